/* pool.h - the KV page pool: one byte budget, pages allocated on demand.
 *
 * A page holds up to `cap` token slots of one (sequence, layer, KV head) stream
 * in one storage format (tier.h). Layout of a page (one allocation; the page
 * and pos start at 64-byte boundaries, score at 16, K and V at 32):
 *
 *   struct kv_page           header (this struct)
 *   int32_t pos[cap]         original position of each slot (keys are stored
 *                            after RoPE at that position)
 *   float   score[cap]       importance of each slot (kept by the policies)
 *   K region                 kv_tier_k_bytes(fmt, cap, d)
 *   V region                 kv_tier_v_bytes(fmt, cap, d)
 *
 * Pages of a stream have any cap: full-size pages of the layer's page size,
 * small pages a growing stream takes (seq.h, dynamic chunking) and
 * right-sized pages compaction leaves.
 *
 * Slots 0..n_used-1 are filled; a page never has holes (removing a slot moves
 * the last one into its place). The pool counts every byte it hands out: a
 * page costs kv_page_bytes() against the budget, metadata included, so
 * "allocated" is what the process really holds for the cache. "used" is the
 * filled share of each page (bytes * n_used / cap); allocated - used is the
 * fragmentation. kv_bytes counts the K and V regions the same way: the figure
 * comparable with a plain f16 cache.
 *
 * Thread safety: get/put/set_used/stats take the pool's lock. */
#ifndef TKV_KV_POOL_H
#define TKV_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "kv/tier.h"
#include "tierkv.h"

/* The largest head size the cache stores; the model loader refuses larger heads,
 * so per-head scratch buffers in kv/ are arrays of this size. */
#define KV_MAX_HEAD_DIM 512
/* The most query heads that share one KV head (GQA group); the policy refuses
 * more, so attention's per-head arrays are of this size. */
#define KV_MAX_GROUP 64

enum kv_page_flags {
	KV_PAGE_ROT = 1,     /* K and V stored rotated (tier.h) */
	KV_PAGE_FROZEN = 2,  /* in the prefix tree: read-only for every holder */
	KV_PAGE_DIRTY = 4,   /* a slot was rewritten in place (no longer pristine) */
};

struct kv_page {
	uint8_t fmt;         /* enum kv_fmt */
	uint8_t flags;       /* enum kv_page_flags */
	uint16_t refs;       /* holders: streams and the prefix tree (1 when private) */
	uint32_t cap;        /* slots in this page */
	uint32_t n_used;     /* slots filled, 0..n_used-1 */
	uint32_t head_dim;
	size_t bytes;        /* what this page costs against the budget */
	size_t kv_bytes;     /* its K and V regions */
	int32_t *pos;        /* [cap] */
	float *score;        /* [cap] */
	void *k;             /* K region */
	void *v;             /* V region */
};

struct kv_pool_params {
	size_t budget;        /* bytes; 0 = unlimited */
	uint32_t page_tokens; /* slots of full-precision pages; default 16 */
	uint32_t fmt;         /* full-precision format; default KV_FMT_F16 */
};

struct kv_pool_stats {
	size_t budget;            /* 0 = unlimited */
	size_t allocated;         /* bytes of live pages (metadata included) */
	size_t used;              /* filled share of allocated */
	size_t peak_allocated;    /* high-water mark of allocated */
	size_t n_pages;           /* live pages */
	size_t kv_bytes;          /* filled share of the K and V regions */
	size_t fmt_bytes[KV_FMT_ALL];      /* allocated bytes per format */
	size_t fmt_kv_bytes[KV_FMT_ALL];   /* filled K+V bytes per format */
	size_t fmt_slots[KV_FMT_ALL];      /* filled slots per format */
	uint64_t pages_allocated; /* pages handed out so far */
	uint64_t pages_refused;   /* requests refused by the budget */
	/* compaction (kv_stream_compact): its cost so far */
	uint64_t compactions;     /* stream compactions that moved slots */
	uint64_t compact_slots;   /* slots moved */
	uint64_t compact_bytes;   /* K+V bytes written for them (in their new pages) */
	uint64_t compact_ns;      /* time spent compacting, all threads summed */
	size_t compact_freed;     /* page bytes compactions returned (net of new pages) */
};

struct kv_pool;

struct kv_pool_params kv_pool_default_params(void);
/* TKV_ERR_ARG for page_tokens 0 or > 4096 or a format that is not f16/f32. */
int kv_pool_init(struct kv_pool **out, const struct kv_pool_params *p, struct tkv_alloc *a,
		 struct tkv_error *err);
/* Every page must have been returned first; pages still out stay counted in
 * the allocator. */
void kv_pool_free(struct kv_pool *p);

/* Bytes a page of this shape costs against the budget / its K+V regions. */
size_t kv_page_bytes(uint32_t cap, uint32_t head_dim, uint32_t fmt);
size_t kv_page_kv_bytes(uint32_t cap, uint32_t head_dim, uint32_t fmt);

/* floor(bytes * n / cap) for n <= cap, exact in ISO C integers: with
 * bytes = q * cap + r, it is q * n + r * n / cap, and r * n < cap^2 <= 2^64. */
static inline size_t kv_share(size_t bytes, uint32_t n, uint32_t cap)
{
	return bytes / cap * n + (size_t)((uint64_t)(bytes % cap) * n / cap);
}

/* The filled share of a page's K+V regions with n slots used. */
static inline size_t kv_page_share(const struct kv_page *pg, uint32_t n)
{
	return kv_share(pg->kv_bytes, n, pg->cap);
}

/* Whether `bytes` more fit under the budget now. */
int kv_pool_can_fit(struct kv_pool *p, size_t bytes);
/* A new empty page; NULL when the budget is exhausted or the allocator fails
 * (*why = TKV_ERR_KV_FULL or TKV_ERR_NOMEM). Ownership: transferred to the
 * caller until kv_pool_put. */
struct kv_page *kv_pool_get(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, uint32_t cap, int *why);
/* Returns a page (may be NULL) whatever its holders. */
void kv_pool_put(struct kv_pool *p, struct kv_page *pg);
/* Drops one holder; the last one returns the page. Holders are counted by the
 * engine's single scheduling thread, so refs need no atomics. */
void kv_page_unref(struct kv_pool *p, struct kv_page *pg);
/* Sets pg->n_used to n, keeping the used/kv_bytes/fmt_slots counts exact. */
void kv_pool_set_used(struct kv_pool *p, struct kv_page *pg, uint32_t n);
void kv_pool_stats(struct kv_pool *p, struct kv_pool_stats *out);
/* Adds one compaction's cost to the counters. */
void kv_pool_note_compact(struct kv_pool *p, uint64_t slots, uint64_t bytes, uint64_t ns, size_t freed);
uint32_t kv_pool_page_tokens(const struct kv_pool *p);
uint32_t kv_pool_fmt(const struct kv_pool *p);
size_t kv_pool_budget(const struct kv_pool *p);

/* Slot access for pages of any format (per-slot formats store in place;
 * packed formats are written with kv_tier_pack by the cache). */
void kv_page_store(struct kv_page *pg, uint32_t slot, int32_t pos, const float *k, const float *v);
/* Key / value of a slot in the model's space (un-rotated). */
void kv_page_load_k(const struct kv_page *pg, uint32_t slot, float *k);
void kv_page_load_v(const struct kv_page *pg, uint32_t slot, float *v);

#endif
