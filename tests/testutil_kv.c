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

static size_t share(size_t bytes, uint32_t n_used, uint32_t cap)
{
	return (size_t)((unsigned __int128)bytes * n_used / cap);
}

/* The pool's counters equal the sums over the sequences' pages (and each
 * stream's n_tokens, hot_free and kv_bytes equal its pages'): allocated ==
 * sum over formats == sum of page bytes, used and kv_bytes exact. */
void tu_kv_check_acct(struct kv_pool *pool, struct kv_seq *const *seqs, size_t n_seqs)
{
	size_t allocated = 0, used = 0, kvb = 0, n_pages = 0, sum_fmt = 0, meta = 0, fixed = 0;
	size_t fmt_bytes[KV_FMT_COUNT] = {0}, fmt_kv[KV_FMT_COUNT] = {0}, fmt_slots[KV_FMT_COUNT] = {0};
	struct kv_pool_stats ps;

	for (size_t i = 0; i < n_seqs; i++) {
		const struct kv_seq *s = seqs[i];

		for (size_t j = 0; j < (size_t)s->n_layer * s->n_kv_head; j++) {
			const struct kv_stream *st = &s->streams[j];
			uint32_t tokens = 0, hot_free = 0;
			size_t st_kv = 0;

			for (uint32_t p = 0; p < st->n_pages; p++) {
				const struct kv_page *pg = st->pages[p];

				assert_true(pg->n_used <= pg->cap);
				if (pg->flags & KV_PAGE_POSBM) {
					const uint64_t *bm = kv_page_bm(pg);
					uint32_t bits = 0;

					/* bitmaps only on q4/q2 pages, sized by their span,
					 * with a bit per slot and the slots in order */
					assert_true(kv_fmt_packed(pg->fmt));
					assert_int_equal(pg->bytes, kv_page_bytes_bm(pg->cap, pg->head_dim, pg->fmt,
										     kv_page_bm_words(pg)));
					for (uint32_t w = 0; w < kv_page_bm_words(pg); w++)
						bits += (uint32_t)__builtin_popcountll(bm[w]);
					assert_int_equal(bits, pg->n_used);
					for (uint32_t k = 1; k < pg->n_used; k++)
						assert_true(kv_slot_pos(pg, k - 1) < kv_slot_pos(pg, k));
				} else {
					assert_int_equal(pg->bytes,
							 kv_page_bytes_form(pg->cap, pg->head_dim, pg->fmt, pg->flags));
				}
				allocated += pg->bytes;
				used += share(pg->bytes, pg->n_used, pg->cap);
				kvb += share(pg->kv_bytes, pg->n_used, pg->cap);
				n_pages++;
				fmt_bytes[pg->fmt] += pg->bytes;
				fmt_kv[pg->fmt] += share(pg->kv_bytes, pg->n_used, pg->cap);
				fmt_slots[pg->fmt] += pg->n_used;
				meta += (size_t)pg->n_used * kv_page_slot_meta(pg) + kv_page_bm_bytes(pg);
				fixed += kv_page_fixed(pg);
				/* a page's positions are all in its form's range */
				for (uint32_t k = 0; k < pg->n_used; k++)
					assert_true(kv_page_takes_pos(pg, kv_slot_pos(pg, k)));
				tokens += pg->n_used;
				st_kv += share(pg->kv_bytes, pg->n_used, pg->cap); /* the filled share (seq.h) */
				/* where new tokens go (seq.h): not into a page of position offsets */
				if (pg->fmt == st->hot_fmt && !(pg->flags & KV_PAGE_ROT) && kv_stream_takes(st, pg))
					hot_free += pg->cap - pg->n_used;
			}
			if (st->n_tokens != tokens || st->hot_free != hot_free || st->kv_bytes != st_kv)
				fail_msg("stream %zu: n_tokens %u hot_free %u kv_bytes %zu; its pages say %u %u %zu", j,
					 st->n_tokens, st->hot_free, st->kv_bytes, tokens, hot_free, st_kv);
			if (st->tail != KV_NO_PAGE)
				assert_true(st->tail < st->n_pages && st->pages[st->tail]->fmt == st->hot_fmt);
		}
	}
	kv_pool_stats(pool, &ps);
	for (int f = 0; f < KV_FMT_COUNT; f++) {
		sum_fmt += ps.fmt_bytes[f];
		if (ps.fmt_bytes[f] != fmt_bytes[f] || ps.fmt_kv_bytes[f] != fmt_kv[f] || ps.fmt_slots[f] != fmt_slots[f])
			fail_msg("%s: pool says %zu bytes, %zu kv, %zu slots; pages say %zu %zu %zu", kv_fmt_name(f),
				 ps.fmt_bytes[f], ps.fmt_kv_bytes[f], ps.fmt_slots[f], fmt_bytes[f], fmt_kv[f],
				 fmt_slots[f]);
	}
	if (ps.allocated != allocated || sum_fmt != allocated || ps.used != used || ps.kv_bytes != kvb ||
	    ps.n_pages != n_pages)
		fail_msg("pool: allocated %zu (formats %zu), used %zu, kv %zu, %zu pages; pages say %zu %zu %zu %zu",
			 ps.allocated, sum_fmt, ps.used, ps.kv_bytes, ps.n_pages, allocated, used, kvb, n_pages);
	if (ps.meta_bytes != meta || ps.fixed_bytes != fixed)
		fail_msg("pool: metadata %zu, fixed %zu; pages say %zu %zu", ps.meta_bytes, ps.fixed_bytes, meta, fixed);
	if (ps.budget)
		assert_true(ps.allocated <= ps.budget && ps.peak_allocated <= ps.budget);
}
