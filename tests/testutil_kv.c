/* testutil_kv.c - KV cache fixtures shared by the kv tests (testutil_kv.h). */
#include "testutil.h"
#include "testutil_kv.h"

#include <string.h>

#include "kv/pool.h"
#include "kv/seq.h"
#include "kv/tier.h"

struct kv_pool *tu_kv_pool(size_t budget, uint32_t page_tokens, uint32_t fmt, struct tkv_alloc *a)
{
	struct kv_pool_params p = kv_pool_default_params();
	struct kv_pool *pool = NULL;
	struct tkv_error err = {0};

	p.budget = budget;
	p.page_tokens = page_tokens;
	p.fmt = fmt;
	if (kv_pool_init(&pool, &p, a, &err) != TKV_OK)
		fail_msg("kv_pool_init: %s", err.msg);
	assert_non_null(pool);
	return pool;
}

struct kv_seq *tu_kv_seq(struct kv_pool *pool, uint32_t n_layer, uint32_t n_kv_head, uint32_t head_dim,
			 struct tkv_alloc *a)
{
	struct kv_seq *s = NULL;
	struct tkv_error err = {0};

	if (kv_seq_init(&s, pool, n_layer, n_kv_head, head_dim, a, &err) != TKV_OK)
		fail_msg("kv_seq_init: %s", err.msg);
	assert_non_null(s);
	return s;
}

struct kv_page *tu_kv_add_page(struct kv_seq *s, struct kv_stream *st, uint32_t fmt, uint32_t cap, int rot,
			       const float *K, const float *V, const int32_t *pos, uint32_t n, int *why)
{
	uint32_t d = s->head_dim;
	static float Kr[64 * 64], Vr[64 * 64];
	struct kv_page *pg;

	assert_true(n <= cap && cap <= 64 && d <= 64);
	pg = kv_stream_new_page(s, st, fmt, cap, why);
	if (!pg)
		return NULL;
	memcpy(Kr, K, (size_t)n * d * sizeof(float));
	memcpy(Vr, V, (size_t)n * d * sizeof(float));
	if (rot) {
		pg->flags |= KV_PAGE_ROT;
		for (uint32_t j = 0; j < n; j++) {
			kv_rotate(Kr + (size_t)j * d, d);
			kv_rotate(Vr + (size_t)j * d, d);
		}
	}
	kv_tier_pack(fmt, pg->k, pg->v, cap, d, Kr, Vr, n);
	for (uint32_t j = 0; j < n; j++) {
		kv_slot_set_pos(pg, j, pos[j]);
		kv_slot_set_score(pg, j, 0.0f);
	}
	if (kv_stream_add_page(s, st, pg) != TKV_OK) {
		kv_pool_put(s->pool, pg);
		*why = TKV_ERR_NOMEM;
		return NULL;
	}
	kv_stream_set_used(s, st, pg, n);
	return pg;
}
