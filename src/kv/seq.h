/* seq.h - the cache of one sequence: a stream of pages per (layer, KV head).
 *
 * Streams grow page by page as tokens arrive (kv_seq_reserve, then
 * kv_seq_write); nothing is sized to the maximum context. Attention for a query
 * head walks the pages of its KV head's stream in slot order.
 *
 * Ownership: the seq owns its pages (borrowed from the pool it was made with) and
 * returns them on kv_seq_free / kv_seq_clear. */
#ifndef TKV_KV_SEQ_H
#define TKV_KV_SEQ_H

#include <stdint.h>

#include "kv/pool.h"

struct kv_stream {
	struct kv_page **pages;  /* [n_pages], slots fill page 0 first */
	uint32_t n_pages;
	uint32_t cap_pages;
	uint32_t n_tokens;       /* slots filled over all pages */
};

struct kv_seq {
	struct kv_pool *pool;
	struct tkv_alloc *alloc;
	uint32_t n_layer, n_kv_head, head_dim;
	struct kv_stream *streams;   /* [n_layer][n_kv_head] */
};

int kv_seq_init(struct kv_seq **out, struct kv_pool *pool, uint32_t n_layer, uint32_t n_kv_head,
		uint32_t head_dim, struct tkv_alloc *a, struct tkv_error *err);
void kv_seq_free(struct kv_seq *s);
/* Drops every token and returns every page. */
void kv_seq_clear(struct kv_seq *s);

static inline struct kv_stream *kv_seq_stream(struct kv_seq *s, uint32_t layer, uint32_t head)
{
	return &s->streams[(size_t)layer * s->n_kv_head + head];
}

/* Makes room for n_new more tokens in every stream, all or nothing: on
 * TKV_ERR_KV_FULL (budget) or TKV_ERR_NOMEM nothing changes and err says how
 * many bytes were needed against what the budget had left. */
int kv_seq_reserve(struct kv_seq *s, uint32_t n_new, struct tkv_error *err);
/* Appends one token's key and value (head_dim floats each) to a stream that
 * has room (after kv_seq_reserve). */
void kv_seq_append(struct kv_seq *s, uint32_t layer, uint32_t head, int32_t pos,
		   const float *k, const float *v);

/* Attention of one query over the first n_visible slots of a stream:
 *   att[i] = softmax_i(scale * q·k_i),   out = Σ att[i] v_i
 * q and out have head_dim floats; att (n_visible floats, scratch) receives the
 * weight each slot got, in slot order, for importance scores. */
void kv_attn(const struct kv_stream *st, uint32_t head_dim, const float *q, uint32_t n_visible,
	     float scale, float *att, float *out);

#endif
