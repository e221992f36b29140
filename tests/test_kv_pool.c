/* test_kv_pool.c - the KV page pool and per-sequence streams: byte accounting
 * that never drifts over random init/reserve/append/clear/free, budget limits,
 * all-or-nothing reserve, pages on demand, attention against a reference, and
 * allocation faults at every call. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/pool.h"
#include "kv/seq.h"
#include "ops/ops.h"
#include "util/alloc.h"

/* Attention on random data, |q|, |k|, |v| <= 1, head_dim <= 64, scale
 * 1/sqrt(head_dim): a float score q·k carries at most hd * u * sum|q_i k_i|
 * of rounding (u = 2^-24), 64 * 6e-8 * 64 / 8 = 3e-5 after scaling; a weight
 * moves by at most about twice that relatively, and weights are <= 1. */
#define TOL_ATT_W 6e-5
/* out = sum w_i v_i with |v| <= 1: the weight errors above (summing to at most
 * 2 * 3e-5 * sum w = 6e-5) plus one rounding per slot of accumulation. */
#define TOL_ATT_OUT 1e-4
/* The weights are divided by their float sum: they sum to 1 within a few ulps
 * per slot; 1e-5 is generous for <= 16 slots and tight enough to catch a
 * missing or doubled slot. */
#define TOL_ATT_SUM 1e-5

#define N_STEPS 6000
#define N_SLOTS 4

/* ---- helpers --------------------------------------------------------------- */

static uint64_t rng_state;

static void rng_seed(uint64_t s)
{
	rng_state = s;
}

static uint32_t rng_u32(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static float rng_f(float lo, float hi)
{
	return lo + (hi - lo) * (float)((double)rng_u32() / 4294967296.0);
}

/* Bytes one filled slot accounts for in "used": K, V, pos and score. */
static size_t slot_bytes(uint32_t head_dim, uint32_t fmt)
{
	return 2 * head_dim * kv_fmt_size(fmt) + sizeof(int32_t) + sizeof(float);
}

static struct kv_pool *make_pool(size_t budget, uint32_t page_tokens, uint32_t fmt, struct tkv_alloc *a)
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

static struct kv_seq *make_seq(struct kv_pool *pool, uint32_t n_layer, uint32_t n_kv_head, uint32_t head_dim,
			       struct tkv_alloc *a)
{
	struct kv_seq *s = NULL;
	struct tkv_error err = {0};

	if (kv_seq_init(&s, pool, n_layer, n_kv_head, head_dim, a, &err) != TKV_OK)
		fail_msg("kv_seq_init: %s", err.msg);
	assert_non_null(s);
	return s;
}

/* A deterministic K or V element for (seq id, layer, head, pos, i): a multiple
 * of 1/64 in [-15.6, 15.6], exact in f16, so both page formats store it as is. */
static float kv_val(uint32_t id, uint32_t layer, uint32_t head, int32_t pos, uint32_t i, int is_v)
{
	uint32_t x = id * 0x9e3779b1u ^ layer * 0x85ebca6bu ^ head * 0xc2b2ae35u ^ (uint32_t)pos * 0x27d4eb2fu ^
		     i * 0x165667b1u ^ (uint32_t)is_v * 0xd3a2646cu;

	x ^= x >> 15;
	x *= 0x2c1b3c6du;
	x ^= x >> 12;
	return (float)((int)(x % 2001) - 1000) / 64.0f;
}

/* Appends token `pos` to every stream of s with kv_val data. */
static void append_token(struct kv_seq *s, uint32_t id, int32_t pos)
{
	float k[256], v[256];

	assert_true(s->head_dim <= 256);
	for (uint32_t l = 0; l < s->n_layer; l++)
		for (uint32_t h = 0; h < s->n_kv_head; h++) {
			for (uint32_t i = 0; i < s->head_dim; i++) {
				k[i] = kv_val(id, l, h, pos, i, 0);
				v[i] = kv_val(id, l, h, pos, i, 1);
			}
			kv_seq_append(s, l, h, pos, k, v);
		}
}

/* Every slot of every stream holds what append_token put there. */
static void check_contents(struct kv_seq *s, uint32_t id, uint32_t n_tokens)
{
	uint32_t P = kv_pool_page_tokens(s->pool);
	float k[256], v[256];

	for (uint32_t l = 0; l < s->n_layer; l++)
		for (uint32_t h = 0; h < s->n_kv_head; h++) {
			struct kv_stream *st = kv_seq_stream(s, l, h);

			assert_int_equal(st->n_tokens, n_tokens);
			for (uint32_t t = 0; t < n_tokens; t++) {
				const struct kv_page *pg = st->pages[t / P];

				assert_true(t % P < pg->n_used);
				assert_int_equal(pg->pos[t % P], (int32_t)t);
				kv_page_load_k(pg, t % P, k);
				kv_page_load_v(pg, t % P, v);
				for (uint32_t i = 0; i < s->head_dim; i++)
					if (k[i] != kv_val(id, l, h, (int32_t)t, i, 0) ||
					    v[i] != kv_val(id, l, h, (int32_t)t, i, 1))
						fail_msg("seq %u layer %u head %u token %u elem %u: %g %g", id, l, h, t, i,
							 (double)k[i], (double)v[i]);
			}
		}
}

/* The state a failed reserve must leave alone. The history counters are not
 * state: a reserve that fails with TKV_ERR_NOMEM midway really held the pages
 * it got before the failure, so peak_allocated and pages_allocated may record
 * them (assert_stats_same checks those too, for refusals by the budget, which
 * take no page at all). */
static void assert_state_same(const struct kv_pool_stats *a, const struct kv_pool_stats *b)
{
	assert_int_equal(a->budget, b->budget);
	assert_int_equal(a->allocated, b->allocated);
	assert_int_equal(a->used, b->used);
	assert_int_equal(a->n_pages, b->n_pages);
	assert_int_equal(a->kv_bytes, b->kv_bytes);
	for (int f = 0; f < KV_FMT_COUNT; f++)
		assert_int_equal(a->fmt_bytes[f], b->fmt_bytes[f]);
}

/* Everything but pages_refused, which may count the refusal. */
static void assert_stats_same(const struct kv_pool_stats *a, const struct kv_pool_stats *b)
{
	assert_state_same(a, b);
	assert_int_equal(a->peak_allocated, b->peak_allocated);
	assert_int_equal(a->pages_allocated, b->pages_allocated);
}

/* Snapshot of a sequence's stream shapes, to check that nothing moved. */
struct seq_shape {
	uint32_t n_pages[64];
	uint32_t n_tokens[64];
	struct kv_page *pages[64][32];
};

static void shape_of(struct kv_seq *s, struct seq_shape *out)
{
	size_t n = (size_t)s->n_layer * s->n_kv_head;

	assert_true(n <= 64);
	memset(out, 0, sizeof *out);
	for (size_t i = 0; i < n; i++) {
		out->n_pages[i] = s->streams[i].n_pages;
		out->n_tokens[i] = s->streams[i].n_tokens;
		for (uint32_t j = 0; j < s->streams[i].n_pages && j < 32; j++)
			out->pages[i][j] = s->streams[i].pages[j];
	}
}

static void assert_shape_same(struct kv_seq *s, const struct seq_shape *before)
{
	struct seq_shape now;

	shape_of(s, &now);
	assert_memory_equal(&now, before, sizeof now);
}

/* ---- params and layout ----------------------------------------------------- */

static void test_params(void **state)
{
	struct kv_pool_params d = kv_pool_default_params();
	static const struct {
		uint32_t page_tokens, fmt;
		int want;
	} cases[] = {
		{ 0, KV_FMT_F16, TKV_ERR_ARG },
		{ 5000, KV_FMT_F16, TKV_ERR_ARG },
		{ 4097, KV_FMT_F32, TKV_ERR_ARG },
		{ 16, KV_FMT_COUNT, TKV_ERR_ARG },
		{ 16, 7, TKV_ERR_ARG },
		{ 16, 0xffffffffu, TKV_ERR_ARG },
		{ 1, KV_FMT_F32, TKV_OK },
		{ 4096, KV_FMT_F16, TKV_OK },
	};

	(void)state;
	assert_int_equal(d.budget, 0);
	assert_int_equal(d.page_tokens, 16);
	assert_int_equal(d.fmt, KV_FMT_F16);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct tkv_alloc a = {0};
		struct tkv_error err = {0};
		struct kv_pool_params p = d;
		struct kv_pool *pool = (struct kv_pool *)&a; /* must be overwritten */
		int rc;

		p.page_tokens = cases[i].page_tokens;
		p.fmt = cases[i].fmt;
		rc = kv_pool_init(&pool, &p, &a, &err);
		assert_int_equal(rc, cases[i].want);
		if (rc != TKV_OK) {
			assert_null(pool);
			assert_int_equal(err.status, rc);
			assert_true(err.msg[0] != 0);
			assert_int_equal(atomic_load(&a.n_calls), 0); /* checked before allocating */
		} else {
			assert_non_null(pool);
			assert_int_equal(kv_pool_page_tokens(pool), cases[i].page_tokens);
			assert_int_equal(kv_pool_fmt(pool), cases[i].fmt);
			kv_pool_free(pool);
		}
		assert_int_equal(atomic_load(&a.live), 0);
	}
	/* err may be NULL */
	{
		struct kv_pool_params p = d;
		struct kv_pool *pool;

		p.page_tokens = 0;
		assert_int_equal(kv_pool_init(&pool, &p, NULL, NULL), TKV_ERR_ARG);
	}
	/* frees of NULL are no-ops */
	kv_pool_free(NULL);
	kv_seq_free(NULL);
}

static void test_fmt_and_page_bytes(void **state)
{
	static const uint32_t Ps[] = { 1, 3, 4, 16, 4096 }, hds[] = { 2, 8, 64, 128 };

	(void)state;
	assert_int_equal(kv_fmt_size(KV_FMT_F32), 4);
	assert_int_equal(kv_fmt_size(KV_FMT_F16), 2);
	assert_string_equal(kv_fmt_name(KV_FMT_F32), "f32");
	assert_string_equal(kv_fmt_name(KV_FMT_F16), "f16");
	assert_string_equal(kv_fmt_name(99), "?");
	for (uint32_t f = 0; f < KV_FMT_COUNT; f++)
		for (size_t i = 0; i < sizeof Ps / sizeof Ps[0]; i++)
			for (size_t j = 0; j < sizeof hds / sizeof hds[0]; j++) {
				size_t b = kv_page_bytes(Ps[i], hds[j], f);

				assert_int_equal(b % 64, 0);
				assert_true(b >= sizeof(struct kv_page) + Ps[i] * slot_bytes(hds[j], f));
				/* at most one cache line of padding per region (header, pos, score, k, v) */
				assert_true(b < sizeof(struct kv_page) + Ps[i] * slot_bytes(hds[j], f) + 5 * 64);
			}
}

/* A page's regions lie inside its bytes, aligned and in order, and every slot
 * stores and loads back (the whole page written: ASan catches an overrun). */
static void test_page_layout(void **state)
{
	static const uint32_t Ps[] = { 1, 5, 16 }, hds[] = { 6, 64 };

	(void)state;
	for (uint32_t f = 0; f < KV_FMT_COUNT; f++)
		for (size_t i = 0; i < sizeof Ps / sizeof Ps[0]; i++)
			for (size_t j = 0; j < sizeof hds / sizeof hds[0]; j++) {
				struct tkv_alloc a = {0};
				struct kv_pool *pool = make_pool(0, Ps[i], f, &a);
				uint32_t P = Ps[i], hd = hds[j];
				int why = 12345;
				struct kv_page *pg = kv_pool_get(pool, hd, &why);
				uintptr_t lo, hi;
				float k[64], v[64], kb[64], vb[64];

				assert_non_null(pg);
				lo = (uintptr_t)pg;
				hi = lo + pg->bytes;
				assert_int_equal(pg->bytes, kv_page_bytes(P, hd, f));
				assert_int_equal(pg->fmt, f);
				assert_int_equal(pg->cap, P);
				assert_int_equal(pg->n_used, 0);
				assert_int_equal(pg->head_dim, hd);
				assert_true(lo % 64 == 0);
				assert_true((uintptr_t)pg->pos % 64 == 0 && (uintptr_t)pg->pos >= lo + sizeof *pg);
				assert_true((uintptr_t)pg->score % 64 == 0 &&
					    (uintptr_t)pg->score >= (uintptr_t)(pg->pos + P));
				assert_true((uintptr_t)pg->k % 64 == 0 && (uintptr_t)pg->k >= (uintptr_t)(pg->score + P));
				assert_true((uintptr_t)pg->v % 64 == 0 &&
					    (uintptr_t)pg->v >= (uintptr_t)pg->k + P * hd * kv_fmt_size(f));
				assert_true((uintptr_t)pg->v + P * hd * kv_fmt_size(f) <= hi);
				for (uint32_t s = 0; s < P; s++) {
					for (uint32_t e = 0; e < hd; e++) {
						k[e] = kv_val(1, 0, 0, (int32_t)s, e, 0);
						v[e] = kv_val(1, 0, 0, (int32_t)s, e, 1);
					}
					kv_page_store(pg, s, (int32_t)(1000 + s), k, v);
				}
				for (uint32_t s = 0; s < P; s++) {
					kv_page_load_k(pg, s, kb);
					kv_page_load_v(pg, s, vb);
					assert_int_equal(pg->pos[s], (int32_t)(1000 + s));
					assert_true(pg->score[s] == 0.0f);
					for (uint32_t e = 0; e < hd; e++) {
						assert_true(kb[e] == kv_val(1, 0, 0, (int32_t)s, e, 0));
						assert_true(vb[e] == kv_val(1, 0, 0, (int32_t)s, e, 1));
					}
				}
				kv_pool_put(pool, pg);
				kv_pool_free(pool);
				assert_int_equal(atomic_load(&a.live), 0);
			}
}

/* f16 pages round to nearest f16; f32 pages keep the bits. */
static void test_page_store_rounding(void **state)
{
	struct kv_pool *pool = make_pool(0, 4, KV_FMT_F16, NULL);
	int why;
	struct kv_page *pg = kv_pool_get(pool, 4, &why);
	float k[4] = { 1.0f / 3.0f, 65504.0f, 1e6f, -0x1p-24f }, v[4] = { 0.1f, -0.0f, 2.0f, 1.0f + 0x1p-11f }, o[4];

	(void)state;
	assert_non_null(pg);
	kv_page_store(pg, 2, 7, k, v);
	kv_page_load_k(pg, 2, o);
	for (int i = 0; i < 4; i++)
		assert_true(o[i] == ops_f16_to_f32(ops_f32_to_f16(k[i])));
	assert_true(o[2] == INFINITY);
	kv_page_load_v(pg, 2, o);
	for (int i = 0; i < 4; i++)
		assert_true(o[i] == ops_f16_to_f32(ops_f32_to_f16(v[i])));
	assert_true(o[3] == 1.0f);
	kv_pool_put(pool, pg);
	kv_pool_free(pool);
}

/* ---- the pool on its own ------------------------------------------------------ */

static void test_pool_get_put_budget(void **state)
{
	struct tkv_alloc a = {0};
	size_t pb = kv_page_bytes(8, 32, KV_FMT_F16);
	struct kv_pool *pool = make_pool(2 * pb + pb / 2, 8, KV_FMT_F16, &a);
	size_t live0 = atomic_load(&a.live);
	struct kv_pool_stats st;
	struct kv_page *p1, *p2, *p3;
	int why = 0;

	(void)state;
	assert_true(kv_pool_can_fit(pool, 2 * pb));
	assert_false(kv_pool_can_fit(pool, 3 * pb));
	p1 = kv_pool_get(pool, 32, &why);
	p2 = kv_pool_get(pool, 32, &why);
	assert_non_null(p1);
	assert_non_null(p2);
	assert_false(kv_pool_can_fit(pool, pb));
	assert_true(kv_pool_can_fit(pool, pb / 2));
	p3 = kv_pool_get(pool, 32, &why);
	assert_null(p3);
	assert_int_equal(why, TKV_ERR_KV_FULL);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.budget, 2 * pb + pb / 2);
	assert_int_equal(st.n_pages, 2);
	assert_int_equal(st.allocated, 2 * pb);
	assert_int_equal(st.fmt_bytes[KV_FMT_F16], 2 * pb);
	assert_int_equal(st.fmt_bytes[KV_FMT_F32], 0);
	assert_int_equal(st.peak_allocated, 2 * pb);
	assert_int_equal(st.pages_allocated, 2);
	assert_int_equal(st.pages_refused, 1);
	assert_int_equal(st.used, 0);
	assert_int_equal(atomic_load(&a.live), live0 + 2 * pb);

	/* filled slots count in used and kv_bytes, and leave with the page */
	kv_pool_note_used(pool, 32, KV_FMT_F16, 3);
	p1->n_used = 3;
	kv_pool_stats(pool, &st);
	assert_int_equal(st.used, 3 * slot_bytes(32, KV_FMT_F16));
	assert_int_equal(st.kv_bytes, 3 * 2 * 32 * 2);
	kv_pool_put(pool, p1);
	kv_pool_put(pool, NULL);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.kv_bytes, 0);
	assert_int_equal(st.n_pages, 1);
	assert_int_equal(st.allocated, pb);
	assert_int_equal(st.peak_allocated, 2 * pb);
	p3 = kv_pool_get(pool, 32, &why);
	assert_non_null(p3);
	kv_pool_put(pool, p2);
	kv_pool_put(pool, p3);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.n_pages, 0);
	assert_int_equal(st.pages_allocated, 3);
	assert_int_equal(atomic_load(&a.live), live0);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* ---- sequences ------------------------------------------------------------------ */

/* A sequence holds one page per stream for its first token, not the context. */
static void test_pages_on_demand(void **state)
{
	struct tkv_alloc a = {0};
	const uint32_t L = 3, H = 2, HD = 16, P = 16;
	struct kv_pool *pool = make_pool(0, P, KV_FMT_F16, &a);
	size_t live0 = atomic_load(&a.live), pb = kv_page_bytes(P, HD, KV_FMT_F16);
	struct kv_seq *s = make_seq(pool, L, H, HD, &a);
	struct kv_pool_stats st;
	struct tkv_error err = {0};

	(void)state;
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 0);
	assert_int_equal(st.allocated, 0);

	assert_int_equal(kv_seq_reserve(s, 1, &err), TKV_OK);
	append_token(s, 7, 0);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, L * H);
	assert_int_equal(st.allocated, L * H * pb);
	assert_int_equal(st.used, L * H * slot_bytes(HD, KV_FMT_F16));
	assert_int_equal(st.kv_bytes, L * H * 2 * HD * 2);
	for (uint32_t i = 0; i < L * H; i++) {
		assert_int_equal(s->streams[i].n_pages, 1);
		assert_int_equal(s->streams[i].n_tokens, 1);
	}

	/* the rest of the first page needs nothing new */
	for (uint32_t t = 1; t < P; t++) {
		assert_int_equal(kv_seq_reserve(s, 1, &err), TKV_OK);
		append_token(s, 7, (int32_t)t);
	}
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, L * H);
	assert_int_equal(st.pages_allocated, L * H);
	/* token P + 1 takes a second page per stream */
	assert_int_equal(kv_seq_reserve(s, 1, &err), TKV_OK);
	append_token(s, 7, (int32_t)P);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 2 * L * H);
	assert_int_equal(st.allocated, 2 * L * H * pb);
	check_contents(s, 7, P + 1);

	/* reserving 0 is a no-op */
	assert_int_equal(kv_seq_reserve(s, 0, &err), TKV_OK);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 2 * L * H);

	kv_seq_clear(s);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 0);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.kv_bytes, 0);
	assert_int_equal(s->streams[0].n_tokens, 0);
	/* usable again after a clear */
	assert_int_equal(kv_seq_reserve(s, 3, &err), TKV_OK);
	for (int32_t t = 0; t < 3; t++)
		append_token(s, 8, t);
	check_contents(s, 8, 3);

	kv_seq_free(s);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 0);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(atomic_load(&a.live), live0);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* Free returns every page and every byte of the sequence's own memory, from
 * any state (several pages, partly filled, with grown page arrays). */
static void test_free_returns_everything(void **state)
{
	struct tkv_alloc a = {0};
	struct kv_pool *pool = make_pool(0, 4, KV_FMT_F32, &a);
	size_t live0 = atomic_load(&a.live);
	struct kv_seq *s1 = make_seq(pool, 2, 2, 8, &a), *s2 = make_seq(pool, 1, 3, 8, &a);
	struct kv_pool_stats st;

	(void)state;
	assert_int_equal(kv_seq_reserve(s1, 30, NULL), TKV_OK); /* 8 pages a stream: arrays grow */
	for (int32_t t = 0; t < 30; t++)
		append_token(s1, 1, t);
	assert_int_equal(kv_seq_reserve(s2, 5, NULL), TKV_OK);
	append_token(s2, 2, 0);
	kv_seq_free(s1);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 3 * 2);
	assert_int_equal(st.used, 3 * slot_bytes(8, KV_FMT_F32));
	check_contents(s2, 2, 1);
	kv_seq_free(s2);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 0);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.fmt_bytes[KV_FMT_F32], 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.kv_bytes, 0);
	assert_int_equal(st.peak_allocated, (8 * 4 + 6) * kv_page_bytes(4, 8, KV_FMT_F32));
	assert_int_equal(atomic_load(&a.live), live0);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* Reserve is all or nothing under the budget: a refused reserve leaves the
 * pool, the token counts and every stream's pages exactly as they were; pages
 * already reserved (but not yet filled) count towards later reserves. */
static void test_reserve_all_or_nothing(void **state)
{
	struct tkv_alloc a = {0};
	const uint32_t P = 4, HD = 8;
	size_t pb = kv_page_bytes(P, HD, KV_FMT_F16);
	struct kv_pool *pool = make_pool(10 * pb, P, KV_FMT_F16, &a);
	struct kv_seq *s = make_seq(pool, 2, 2, HD, &a), *s2 = make_seq(pool, 1, 1, HD, &a);
	struct kv_pool_stats before, after;
	struct seq_shape shape;
	struct tkv_error err = {0};

	(void)state;
	/* 4 streams x 3 pages = 12 > 10: refused, nothing taken */
	kv_pool_stats(pool, &before);
	shape_of(s, &shape);
	assert_int_equal(kv_seq_reserve(s, 2 * P + 1, &err), TKV_ERR_KV_FULL);
	assert_int_equal(err.status, TKV_ERR_KV_FULL);
	assert_true(strstr(err.msg, "budget") != NULL);
	kv_pool_stats(pool, &after);
	assert_stats_same(&before, &after);
	assert_shape_same(s, &shape);

	/* 2 pages a stream (8 of 10), one token in */
	assert_int_equal(kv_seq_reserve(s, 2 * P, &err), TKV_OK);
	append_token(s, 1, 0);
	kv_pool_stats(pool, &before);
	assert_int_equal(before.n_pages, 8);
	/* more tokens that fit in the pages already reserved need no budget */
	shape_of(s, &shape);
	assert_int_equal(kv_seq_reserve(s, 1, &err), TKV_OK);
	assert_int_equal(kv_seq_reserve(s, P, &err), TKV_OK);
	assert_int_equal(kv_seq_reserve(s, 2 * P - 1, &err), TKV_OK);
	kv_pool_stats(pool, &after);
	assert_stats_same(&before, &after);
	assert_shape_same(s, &shape);
	/* one more page per stream: 12 > 10, refused, the reserved pages stay */
	assert_int_equal(kv_seq_reserve(s, 2 * P, &err), TKV_ERR_KV_FULL);
	kv_pool_stats(pool, &after);
	assert_stats_same(&before, &after);
	assert_shape_same(s, &shape);
	/* the two pages left go to another sequence, then nothing fits */
	assert_int_equal(kv_seq_reserve(s2, 2 * P, &err), TKV_OK);
	kv_pool_stats(pool, &before);
	assert_int_equal(before.allocated, 10 * pb);
	shape_of(s2, &shape);
	assert_int_equal(kv_seq_reserve(s2, 2 * P + 1, &err), TKV_ERR_KV_FULL);
	kv_pool_stats(pool, &after);
	assert_stats_same(&before, &after);
	assert_shape_same(s2, &shape);
	/* the first sequence fills what it reserved */
	for (int32_t t = 1; t < (int32_t)(2 * P); t++)
		append_token(s, 1, t);
	check_contents(s, 1, 2 * P);
	kv_pool_stats(pool, &after);
	assert_int_equal(after.n_pages, 10);
	assert_int_equal(after.used, 2 * P * 4 * slot_bytes(HD, KV_FMT_F16));

	kv_seq_free(s);
	kv_seq_free(s2);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* An allocation failure in the middle of a reserve (after some pages came)
 * gives back exactly the pages that call took, not ones reserved before. */
static void test_reserve_nomem_midway(void **state)
{
	struct tkv_alloc a = {0};
	const uint32_t P = 4, HD = 8;
	struct kv_pool *pool = make_pool(0, P, KV_FMT_F32, &a);
	struct kv_seq *s = make_seq(pool, 2, 2, HD, &a);
	struct kv_pool_stats before, after;
	struct seq_shape shape;
	struct tkv_error err = {0};

	(void)state;
	/* 2 pages per stream, one token: one page reserved ahead in each */
	assert_int_equal(kv_seq_reserve(s, 2 * P, &err), TKV_OK);
	append_token(s, 3, 0);
	for (unsigned long long k = 1; k <= 8; k++) {
		kv_pool_stats(pool, &before);
		shape_of(s, &shape);
		/* 4 pages per stream wanted: 8 new pages; the k-th allocation fails */
		a.fail_at = atomic_load(&a.n_calls) + k;
		a.fail_count = 1;
		assert_int_equal(kv_seq_reserve(s, 3 * P, &err), TKV_ERR_NOMEM);
		assert_int_equal(err.status, TKV_ERR_NOMEM);
		a.fail_at = 0;
		kv_pool_stats(pool, &after);
		assert_state_same(&before, &after);
		assert_shape_same(s, &shape);
	}
	/* then it goes through, and everything appended reads back */
	assert_int_equal(kv_seq_reserve(s, 3 * P, &err), TKV_OK);
	for (int32_t t = 1; t < (int32_t)(3 * P + 1); t++)
		append_token(s, 3, t);
	check_contents(s, 3, 3 * P + 1);
	kv_seq_free(s);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* ---- random accounting ---------------------------------------------------------- */

struct model_seq {
	struct kv_seq *s;
	uint32_t id;
	uint32_t n_layer, n_kv_head;
	uint32_t n_tokens;  /* in every stream */
	uint32_t n_pages;   /* in every stream */
};

static void check_model(struct kv_pool *pool, const struct model_seq *m, uint32_t hd, uint32_t fmt)
{
	size_t pb = kv_page_bytes(kv_pool_page_tokens(pool), hd, fmt), pages = 0, tokens = 0;
	struct kv_pool_stats st;

	kv_pool_stats(pool, &st);
	for (int i = 0; i < N_SLOTS; i++) {
		size_t n = (size_t)m[i].n_layer * m[i].n_kv_head;

		if (!m[i].s)
			continue;
		pages += n * m[i].n_pages;
		tokens += n * m[i].n_tokens;
		for (size_t j = 0; j < n; j++) {
			if (m[i].s->streams[j].n_pages != m[i].n_pages || m[i].s->streams[j].n_tokens != m[i].n_tokens)
				fail_msg("seq %d stream %zu: %u pages %u tokens, want %u and %u", i, j,
					 m[i].s->streams[j].n_pages, m[i].s->streams[j].n_tokens, m[i].n_pages,
					 m[i].n_tokens);
		}
	}
	assert_int_equal(st.n_pages, pages);
	assert_int_equal(st.allocated, pages * pb);
	assert_int_equal(st.fmt_bytes[fmt], st.allocated);
	assert_int_equal(st.fmt_bytes[!fmt], 0);
	assert_int_equal(st.used, tokens * slot_bytes(hd, fmt));
	assert_int_equal(st.kv_bytes, tokens * 2 * hd * kv_fmt_size(fmt));
	assert_true(st.peak_allocated >= st.allocated);
	if (st.budget) {
		assert_true(st.allocated <= st.budget);
		assert_true(st.peak_allocated <= st.budget);
	}
}

/* Thousands of random init/reserve/append/clear/free steps over several
 * sequences of different shapes; after every step the pool's counters equal
 * what a model of the sequences says, and reserve succeeds exactly when the
 * pages it needs fit under the budget. */
static void run_random(uint32_t fmt, size_t budget_pages, uint64_t seed)
{
	struct tkv_alloc a = {0};
	const uint32_t P = 4, HD = 8;
	size_t pb = kv_page_bytes(P, HD, fmt);
	struct kv_pool *pool = make_pool(budget_pages * pb, P, fmt, &a);
	size_t live0 = atomic_load(&a.live);
	struct model_seq m[N_SLOTS];
	uint32_t next_id = 1;
	int n_full = 0, n_ok = 0;

	rng_seed(seed);
	memset(m, 0, sizeof m);
	for (int step = 0; step < N_STEPS; step++) {
		struct model_seq *q = &m[rng_u32() % N_SLOTS];
		uint32_t op = rng_u32() % 100;

		if (!q->s) {
			q->n_layer = 1 + rng_u32() % 3;
			q->n_kv_head = 1 + rng_u32() % 3;
			q->id = next_id++;
			q->n_tokens = q->n_pages = 0;
			q->s = make_seq(pool, q->n_layer, q->n_kv_head, HD, &a);
		} else if (op < 40) {
			/* unlimited: keep the walk bounded */
			uint32_t n_new = budget_pages == 0 && q->n_tokens > 64 ? 0 : rng_u32() % (3 * P + 2);
			uint32_t want = (q->n_tokens + n_new + P - 1) / P;
			size_t n_streams = (size_t)q->n_layer * q->n_kv_head;
			size_t need = want > q->n_pages ? (want - q->n_pages) * n_streams : 0;
			struct kv_pool_stats before, after;
			struct tkv_error err = {0};
			int expect, rc;

			kv_pool_stats(pool, &before);
			expect = budget_pages == 0 || before.allocated + need * pb <= before.budget ? TKV_OK
												   : TKV_ERR_KV_FULL;
			rc = kv_seq_reserve(q->s, n_new, &err);
			if (rc != expect)
				fail_msg("step %d: reserve %u (%u tokens, %u pages, need %zu of %zu free pages): %d, "
					 "want %d: %s", step, n_new, q->n_tokens, q->n_pages, need,
					 budget_pages - before.n_pages, rc, expect, err.msg);
			if (rc == TKV_OK) {
				if (want > q->n_pages)
					q->n_pages = want;
				n_ok++;
			} else {
				kv_pool_stats(pool, &after);
				assert_stats_same(&before, &after);
				n_full++;
			}
		} else if (op < 80) {
			uint32_t room = q->n_pages * P - q->n_tokens, n = room ? rng_u32() % (room + 1) : 0;

			for (uint32_t t = 0; t < n; t++)
				append_token(q->s, q->id, (int32_t)q->n_tokens++);
		} else if (op < 90) {
			kv_seq_clear(q->s);
			q->n_tokens = q->n_pages = 0;
		} else {
			kv_seq_free(q->s);
			q->s = NULL;
		}
		check_model(pool, m, HD, fmt);
		if (step % 101 == 0)
			for (int i = 0; i < N_SLOTS; i++)
				if (m[i].s)
					check_contents(m[i].s, m[i].id, m[i].n_tokens);
	}
	/* both outcomes happened often enough for the run to mean something */
	assert_true(n_ok > N_STEPS / 10);
	if (budget_pages)
		assert_true(n_full > N_STEPS / 50);
	for (int i = 0; i < N_SLOTS; i++) {
		if (m[i].s)
			check_contents(m[i].s, m[i].id, m[i].n_tokens);
		kv_seq_free(m[i].s);
		m[i].s = NULL;
	}
	check_model(pool, m, HD, fmt);
	assert_int_equal(atomic_load(&a.live), live0);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

static void test_random_accounting_f16(void **state)
{
	(void)state;
	run_random(KV_FMT_F16, 40, 11);
}

static void test_random_accounting_f32(void **state)
{
	(void)state;
	run_random(KV_FMT_F32, 40, 12);
}

static void test_random_accounting_tight(void **state)
{
	(void)state;
	run_random(KV_FMT_F16, 9, 13);
}

static void test_random_accounting_unlimited(void **state)
{
	(void)state;
	run_random(KV_FMT_F16, 0, 14);
}

/* ---- attention ------------------------------------------------------------------- */

/* kv_attn over a stream of several pages (the last one partly filled), for
 * every n_visible, against a double-precision softmax and weighted sum over
 * the values the pages hold. */
static void check_attn(uint32_t fmt, uint32_t hd, uint64_t seed)
{
	enum { T = 11, P = 4 };
	struct kv_pool *pool = make_pool(0, P, fmt, NULL);
	struct kv_seq *s = make_seq(pool, 1, 2, hd, NULL);
	static float k[T][64], v[T][64];
	float q[64], out[64], att[T + 4], kb[64];
	float scale = 1.0f / sqrtf((float)hd);

	assert_true(hd <= 64);
	rng_seed(seed);
	assert_int_equal(kv_seq_reserve(s, T, NULL), TKV_OK);
	for (int t = 0; t < T; t++) {
		float other[64];

		for (uint32_t i = 0; i < hd; i++) {
			k[t][i] = rng_f(-1.0f, 1.0f);
			v[t][i] = rng_f(-1.0f, 1.0f);
			other[i] = 100.0f; /* head 1 must not leak into head 0 */
		}
		kv_seq_append(s, 0, 0, t, k[t], v[t]);
		kv_seq_append(s, 0, 1, t, other, other);
		/* what the page holds */
		if (fmt == KV_FMT_F16)
			for (uint32_t i = 0; i < hd; i++) {
				k[t][i] = ops_f16_to_f32(ops_f32_to_f16(k[t][i]));
				v[t][i] = ops_f16_to_f32(ops_f32_to_f16(v[t][i]));
			}
		kv_page_load_k(kv_seq_stream(s, 0, 0)->pages[t / P], t % P, kb);
		assert_memory_equal(kb, k[t], hd * sizeof(float));
	}
	for (uint32_t i = 0; i < hd; i++)
		q[i] = rng_f(-1.0f, 1.0f);

	for (uint32_t nv = 1; nv <= T; nv++) {
		double sc[T], w[T], mx = -INFINITY, sum = 0.0, got_sum = 0.0;

		for (int t = 0; t < T + 4; t++)
			att[t] = -7.0f;
		kv_attn(kv_seq_stream(s, 0, 0), hd, q, nv, scale, att, out);
		for (uint32_t t = 0; t < nv; t++) {
			sc[t] = 0.0;
			for (uint32_t i = 0; i < hd; i++)
				sc[t] += (double)q[i] * k[t][i];
			sc[t] *= scale;
			if (sc[t] > mx)
				mx = sc[t];
		}
		for (uint32_t t = 0; t < nv; t++)
			sum += (w[t] = exp(sc[t] - mx));
		for (uint32_t t = 0; t < nv; t++) {
			w[t] /= sum;
			if (fabs(att[t] - w[t]) > TOL_ATT_W)
				fail_msg("%s hd %u n_visible %u: att[%u] = %.9g, want %.9g", kv_fmt_name(fmt), hd, nv, t,
					 (double)att[t], w[t]);
			got_sum += att[t];
		}
		if (fabs(got_sum - 1.0) > TOL_ATT_SUM)
			fail_msg("%s hd %u n_visible %u: weights sum to %.9g", kv_fmt_name(fmt), hd, nv, got_sum);
		for (int t = (int)nv; t < T + 4; t++)
			assert_true(att[t] == -7.0f); /* past n_visible: untouched */
		for (uint32_t i = 0; i < hd; i++) {
			double o = 0.0;

			for (uint32_t t = 0; t < nv; t++)
				o += w[t] * v[t][i];
			if (fabs(out[i] - o) > TOL_ATT_OUT)
				fail_msg("%s hd %u n_visible %u: out[%u] = %.9g, want %.9g", kv_fmt_name(fmt), hd, nv, i,
					 (double)out[i], o);
		}
		if (nv == 1) {
			/* one slot: weight exactly 1, out is v_0 */
			assert_true(att[0] == 1.0f);
			assert_memory_equal(out, v[0], hd * sizeof(float));
		}
	}
	kv_seq_free(s);
	kv_pool_free(pool);
}

static void test_attn_f32(void **state)
{
	(void)state;
	check_attn(KV_FMT_F32, 16, 21);
	check_attn(KV_FMT_F32, 64, 22);
}

static void test_attn_f16(void **state)
{
	(void)state;
	check_attn(KV_FMT_F16, 16, 23);
	check_attn(KV_FMT_F16, 64, 24);
}

/* Large scores (q·k in the thousands) do not overflow: the max is subtracted. */
static void test_attn_large_scores(void **state)
{
	struct kv_pool *pool = make_pool(0, 2, KV_FMT_F32, NULL);
	struct kv_seq *s = make_seq(pool, 1, 1, 4, NULL);
	float k0[4] = { 1000, 0, 0, 0 }, k1[4] = { 999, 0, 0, 0 }, k2[4] = { -1000, 0, 0, 0 };
	float v0[4] = { 1, 0, 0, 0 }, v1[4] = { 0, 1, 0, 0 }, v2[4] = { 0, 0, 1, 0 };
	float q[4] = { 1, 0, 0, 0 }, att[3], out[4];
	double e = exp(-1.0);

	(void)state;
	assert_int_equal(kv_seq_reserve(s, 3, NULL), TKV_OK);
	kv_seq_append(s, 0, 0, 0, k0, v0);
	kv_seq_append(s, 0, 0, 1, k1, v1);
	kv_seq_append(s, 0, 0, 2, k2, v2);
	kv_attn(kv_seq_stream(s, 0, 0), 4, q, 3, 1.0f, att, out);
	for (int i = 0; i < 3; i++)
		assert_true(isfinite(att[i]));
	assert_float_equal(att[0], 1.0 / (1.0 + e), TOL_ATT_W);
	assert_float_equal(att[1], e / (1.0 + e), TOL_ATT_W);
	assert_true(att[2] == 0.0f);
	assert_float_equal(out[0], 1.0 / (1.0 + e), TOL_ATT_OUT);
	assert_float_equal(out[1], e / (1.0 + e), TOL_ATT_OUT);
	assert_true(out[2] == 0.0f && out[3] == 0.0f);
	kv_seq_free(s);
	kv_pool_free(pool);
}

/* ---- allocation faults ------------------------------------------------------------ */

/* One scenario (pool, sequence, reserves that grow the page arrays and take
 * several pages each) with the Nth allocation failing, for every N until the
 * scenario runs clean. Every failure is TKV_ERR_NOMEM with nothing changed, and
 * freeing everything leaves the allocator at 0. With fail_count 1 the failed
 * step is retried and must then succeed. */
static void run_fault_sweep(unsigned long long fail_count, size_t budget_pages)
{
	const uint32_t P = 4, HD = 16, L = 2, H = 3;
	static const uint32_t reserves[] = { 1, 5 * P, 2 * P + 3, 20 * P };
	int clean = 0, n_failures = 0;

	for (unsigned long long N = 1; !clean; N++) {
		struct tkv_alloc a = {0};
		struct kv_pool_params pp = kv_pool_default_params();
		struct kv_pool *pool = NULL;
		struct kv_seq *s = NULL;
		struct tkv_error err = {0};
		uint32_t n_tokens = 0;
		int rc, failed = 0;

		assert_true(N < 10000);
		a.fail_at = N;
		a.fail_count = fail_count;
		pp.page_tokens = P;
		pp.budget = budget_pages * kv_page_bytes(P, HD, KV_FMT_F16);
		rc = kv_pool_init(&pool, &pp, &a, &err);
		if (rc != TKV_OK) {
			assert_int_equal(rc, TKV_ERR_NOMEM);
			assert_int_equal(err.status, TKV_ERR_NOMEM);
			assert_null(pool);
			failed = 1;
			if (fail_count == 0)
				goto out;
			assert_int_equal(kv_pool_init(&pool, &pp, &a, &err), TKV_OK);
		}
		rc = kv_seq_init(&s, pool, L, H, HD, &a, &err);
		if (rc != TKV_OK) {
			assert_int_equal(rc, TKV_ERR_NOMEM);
			assert_null(s);
			failed = 1;
			if (fail_count == 0)
				goto out;
			assert_int_equal(kv_seq_init(&s, pool, L, H, HD, &a, &err), TKV_OK);
		}
		for (size_t r = 0; r < sizeof reserves / sizeof reserves[0]; r++) {
			struct kv_pool_stats before, after;
			struct seq_shape shape;

			kv_pool_stats(pool, &before);
			shape_of(s, &shape);
			memset(&err, 0, sizeof err);
			rc = kv_seq_reserve(s, reserves[r], &err);
			if (rc != TKV_OK) {
				if (rc != TKV_ERR_NOMEM)
					fail_msg("N=%llu reserve %u: %d %s", N, reserves[r], rc, err.msg);
				assert_int_equal(err.status, TKV_ERR_NOMEM);
				kv_pool_stats(pool, &after);
				assert_state_same(&before, &after);
				assert_shape_same(s, &shape);
				failed = 1;
				if (fail_count == 0)
					goto out;
				rc = kv_seq_reserve(s, reserves[r], &err);
				if (rc != TKV_OK)
					fail_msg("N=%llu retry of reserve %u: %d %s", N, reserves[r], rc, err.msg);
			}
			/* fill half of what was reserved */
			for (uint32_t t = 0; t < reserves[r] / 2 + 1; t++)
				append_token(s, 5, (int32_t)n_tokens++);
		}
		check_contents(s, 5, n_tokens);
		if (!failed) {
			assert_true(atomic_load(&a.n_calls) < N);
			clean = 1;
		}
out:
		n_failures += failed;
		kv_seq_free(s);
		kv_pool_free(pool);
		assert_int_equal(atomic_load(&a.live), 0);
	}
	/* the scenario makes dozens of allocations: each was made to fail once */
	assert_true(n_failures > 20);
}

static void test_fault_sweep(void **state)
{
	(void)state;
	run_fault_sweep(0, 0);
}

static void test_fault_sweep_budget(void **state)
{
	(void)state;
	run_fault_sweep(0, 1000);
}

static void test_fault_sweep_transient(void **state)
{
	(void)state;
	run_fault_sweep(1, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_params),
		cmocka_unit_test(test_fmt_and_page_bytes),
		cmocka_unit_test(test_page_layout),
		cmocka_unit_test(test_page_store_rounding),
		cmocka_unit_test(test_pool_get_put_budget),
		cmocka_unit_test(test_pages_on_demand),
		cmocka_unit_test(test_free_returns_everything),
		cmocka_unit_test(test_reserve_all_or_nothing),
		cmocka_unit_test(test_reserve_nomem_midway),
		cmocka_unit_test(test_random_accounting_f16),
		cmocka_unit_test(test_random_accounting_f32),
		cmocka_unit_test(test_random_accounting_tight),
		cmocka_unit_test(test_random_accounting_unlimited),
		cmocka_unit_test(test_attn_f32),
		cmocka_unit_test(test_attn_f16),
		cmocka_unit_test(test_attn_large_scores),
		cmocka_unit_test(test_fault_sweep),
		cmocka_unit_test(test_fault_sweep_budget),
		cmocka_unit_test(test_fault_sweep_transient),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
