/* testutil_kv.h - KV cache fixtures and checks shared by the kv tests
 * (test_kv_pool.c, test_kv_attn.c, test_kv_policy.c, test_kv_frag.c); each
 * fails the running cmocka test on error. */
#ifndef TKV_TESTUTIL_KV_H
#define TKV_TESTUTIL_KV_H

#include <stddef.h>
#include <stdint.h>

struct kv_page;
struct kv_pool;
struct kv_seq;
struct kv_stream;
struct tkv_alloc;

/* A pool of `budget` bytes (0: none) with pages of page_tokens slots in fmt. */
struct kv_pool *tu_kv_pool(size_t budget, uint32_t page_tokens, uint32_t fmt, struct tkv_alloc *a);
/* A sequence of n_layer x n_kv_head streams of head_dim channels. */
struct kv_seq *tu_kv_seq(struct kv_pool *pool, uint32_t n_layer, uint32_t n_kv_head, uint32_t head_dim,
			 struct tkv_alloc *a);
/* A page of any format (cap <= 64, head_dim <= 64) filled with n rows (model
 * space) at positions pos[], rotated if rot, added to stream st. Returns the
 * page; NULL (with *why) when the pool refuses it. */
struct kv_page *tu_kv_add_page(struct kv_seq *s, struct kv_stream *st, uint32_t fmt, uint32_t cap, int rot,
			       const float *K, const float *V, const int32_t *pos, uint32_t n, int *why);
/* The pool's counters equal the sums over the sequences' pages (and each
 * stream's n_tokens, hot_free and kv_bytes equal its pages'): allocated ==
 * sum over formats == sum of page bytes, used and kv_bytes exact; the
 * stream's tail page is in its hot format; within the budget, if any. */
void tu_kv_check_acct(struct kv_pool *pool, struct kv_seq *const *seqs, size_t n_seqs);

#endif
