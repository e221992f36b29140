/* pool.h - the KV page pool: one byte budget, pages allocated on demand.
 *
 * A page holds P token slots of one (sequence, layer, KV head) stream in one
 * storage format. Layout of a page (one allocation, 64-byte aligned):
 *
 *   struct kv_page                  header (this struct)
 *   int32_t pos[P]                  original position of each slot (keys are
 *                                   stored after RoPE at that position)
 *   float   score[P]                importance of each slot (kept by policies)
 *   k[P][head_dim]                  keys, in the page format
 *   v[P][head_dim]                  values, in the page format
 *
 * The pool counts every byte it hands out: a page costs kv_page_bytes() against
 * the budget, metadata included, so "allocated" is what the process really holds
 * for the cache. "used" counts the slots filled; allocated - used is the
 * fragmentation (partly filled pages).
 *
 * Thread safety: page get/put and stats take the pool's lock. */
#ifndef TKV_KV_POOL_H
#define TKV_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "tierkv.h"

enum kv_fmt {
	KV_FMT_F32 = 0,  /* 4 bytes per element */
	KV_FMT_F16 = 1,  /* 2 bytes per element (the default: "hot") */
	KV_FMT_COUNT
};

struct kv_page {
	uint32_t fmt;        /* enum kv_fmt */
	uint32_t cap;        /* P, slots in this page */
	uint32_t n_used;     /* slots filled, in order from 0 */
	uint32_t head_dim;
	size_t bytes;        /* what this page costs against the budget */
	int32_t *pos;        /* [cap] */
	float *score;        /* [cap] */
	void *k;             /* [cap][head_dim] in fmt */
	void *v;             /* [cap][head_dim] in fmt */
};

struct kv_pool_params {
	size_t budget;        /* bytes; 0 = unlimited */
	uint32_t page_tokens; /* P, slots per page; default 16 */
	uint32_t fmt;         /* format of new pages; default KV_FMT_F16 */
};

struct kv_pool_stats {
	size_t budget;          /* 0 = unlimited */
	size_t allocated;       /* bytes of live pages (metadata included) */
	size_t used;            /* bytes of filled slots (K, V and their metadata) */
	size_t peak_allocated;  /* high-water mark of allocated */
	size_t n_pages;         /* live pages */
	size_t kv_bytes;        /* K and V bytes of filled slots only */
	size_t fmt_bytes[KV_FMT_COUNT]; /* allocated bytes per page format */
	uint64_t pages_allocated; /* pages handed out so far */
	uint64_t pages_refused;   /* requests refused by the budget */
};

struct kv_pool;

struct kv_pool_params kv_pool_default_params(void);
/* TKV_ERR_ARG for page_tokens 0 or > 4096 or an unknown format. */
int kv_pool_init(struct kv_pool **out, const struct kv_pool_params *p, struct tkv_alloc *a,
		 struct tkv_error *err);
/* Every page must have been returned first (kv_pool_stats().n_pages == 0);
 * pages still out are leaked into the allocator's count. */
void kv_pool_free(struct kv_pool *p);

/* Bytes a page of this shape costs against the budget. */
size_t kv_page_bytes(uint32_t page_tokens, uint32_t head_dim, uint32_t fmt);
/* Bytes of one element of fmt. */
size_t kv_fmt_size(uint32_t fmt);
const char *kv_fmt_name(uint32_t fmt);

/* Whether `bytes` more fit under the budget now. */
int kv_pool_can_fit(struct kv_pool *p, size_t bytes);
/* A new empty page (n_used 0) in the pool's format; NULL when the budget is
 * exhausted or the allocator fails (*why = TKV_ERR_KV_FULL or TKV_ERR_NOMEM).
 * Ownership: transferred to the caller until kv_pool_put. */
struct kv_page *kv_pool_get(struct kv_pool *p, uint32_t head_dim, int *why);
/* Returns a page (may be NULL). */
void kv_pool_put(struct kv_pool *p, struct kv_page *pg);
/* Slots were filled (delta > 0) or dropped (delta < 0) in some page. */
void kv_pool_note_used(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, long delta);
void kv_pool_stats(struct kv_pool *p, struct kv_pool_stats *out);
uint32_t kv_pool_page_tokens(const struct kv_pool *p);
uint32_t kv_pool_fmt(const struct kv_pool *p);

/* Element access for page formats. */
void kv_page_store(struct kv_page *pg, uint32_t slot, int32_t pos, const float *k, const float *v);
void kv_page_load_k(const struct kv_page *pg, uint32_t slot, float *k);
void kv_page_load_v(const struct kv_page *pg, uint32_t slot, float *v);

#endif
