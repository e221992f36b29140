/* test_kv_pool.c - the KV page pool and per-sequence streams: byte accounting
 * that never drifts (allocated == sum over formats == sum of page bytes; used
 * and kv_bytes exact) over random init/reserve/append/demote/evict/clear/free
 * with pages of every format, budget limits, all-or-nothing reserve, pages on
 * demand, the stream bookkeeping the policies use, compaction, and allocation
 * faults at every call. Attention is in test_kv_attn.c. */
#include "testutil.h"
#include "testutil_kv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/compact.h"
#include "kv/pool.h"
#include "kv/seq.h"
#include "kv/tier.h"
#include "kv/tier_impl.h"
#include "ops/ops.h"
#include "util/alloc.h"

#define N_STEPS 6000
#define N_SLOTS 4
#define MAX_POS 512

static const uint32_t LOW_FMTS[] = { KV_FMT_Q8, KV_FMT_Q4, KV_FMT_Q2 };

/* ---- helpers --------------------------------------------------------------- */

/* The filled share of a page's bytes, as the pool defines it (floor). */
static size_t share(size_t bytes, uint32_t n_used, uint32_t cap)
{
	return (size_t)((unsigned __int128)bytes * n_used / cap);
}

/* A deterministic K or V element for (seq id, layer, head, pos, i): a multiple
 * of 1/64 in [-15.6, 15.6], exact in f16, so both hot formats store it as is. */
static float kv_val(uint32_t id, uint32_t layer, uint32_t head, int32_t pos, uint32_t i, int is_v)
{
	uint32_t x = id * 0x9e3779b1u ^ layer * 0x85ebca6bu ^ head * 0xc2b2ae35u ^ (uint32_t)pos * 0x27d4eb2fu ^
		     i * 0x165667b1u ^ (uint32_t)is_v * 0xd3a2646cu;

	x ^= x >> 15;
	x *= 0x2c1b3c6du;
	x ^= x >> 12;
	return (float)((int)(x % 2001) - 1000) / 64.0f;
}

static void kv_row(uint32_t id, uint32_t layer, uint32_t head, int32_t pos, uint32_t d, float *k, float *v)
{
	for (uint32_t i = 0; i < d; i++) {
		k[i] = kv_val(id, layer, head, pos, i, 0);
		v[i] = kv_val(id, layer, head, pos, i, 1);
	}
}

/* Appends token `pos` to every stream of s with kv_val data. */
static void append_token(struct kv_seq *s, uint32_t id, int32_t pos)
{
	float k[256], v[256];

	assert_true(s->head_dim <= 256);
	for (uint32_t l = 0; l < s->n_layer; l++)
		for (uint32_t h = 0; h < s->n_kv_head; h++) {
			kv_row(id, l, h, pos, s->head_dim, k, v);
			kv_seq_append(s, l, h, pos, k, v);
		}
}

static int is_hot(const struct kv_seq *s, const struct kv_page *pg)
{
	return pg->fmt == kv_pool_fmt(s->pool);
}

/* A page new tokens of st may go into (hot_free, tail: seq.h): once the
 * stream is wide, only wide pages. */
static int takes_new(const struct kv_stream *st, const struct kv_page *pg)
{
	return pg->fmt == st->hot_fmt && !(pg->flags & KV_PAGE_ROT) && (!st->wide || kv_page_wide(pg));
}

/* Every slot of every full-precision page holds what append_token put there,
 * and (when want_tokens is not UINT32_MAX) each stream holds the positions
 * 0..want_tokens-1, each once. */
static void check_contents(struct kv_seq *s, uint32_t id, uint32_t want_tokens)
{
	float k[256], v[256];
	static unsigned char seen[MAX_POS];

	for (uint32_t l = 0; l < s->n_layer; l++)
		for (uint32_t h = 0; h < s->n_kv_head; h++) {
			struct kv_stream *st = kv_seq_stream(s, l, h);
			uint32_t n = 0;

			memset(seen, 0, sizeof seen);
			for (uint32_t p = 0; p < st->n_pages; p++) {
				const struct kv_page *pg = st->pages[p];

				for (uint32_t j = 0; j < pg->n_used; j++) {
					int32_t pos = kv_slot_pos(pg, j);

					if (pos < 0 || pos >= MAX_POS || seen[pos])
						fail_msg("seq %u layer %u head %u: position %d twice or out of range", id, l,
							 h, pos);
					seen[pos] = 1;
					n++;
					if (!is_hot(s, pg))
						continue;
					kv_page_load_k(pg, j, k);
					kv_page_load_v(pg, j, v);
					for (uint32_t i = 0; i < s->head_dim; i++)
						if (k[i] != kv_val(id, l, h, pos, i, 0) || v[i] != kv_val(id, l, h, pos, i, 1))
							fail_msg("seq %u layer %u head %u pos %d elem %u: %g %g", id, l, h, pos,
								 i, (double)k[i], (double)v[i]);
				}
			}
			assert_int_equal(st->n_tokens, n);
			if (want_tokens != UINT32_MAX) {
				assert_int_equal(n, want_tokens);
				for (uint32_t t = 0; t < want_tokens; t++)
					assert_true(seen[t]);
			}
		}
}

/* What the pool's counters must be, recomputed from the pages themselves. */
struct acct {
	size_t allocated, used, kv_bytes, n_pages;
	size_t fmt_bytes[KV_FMT_COUNT], fmt_kv_bytes[KV_FMT_COUNT], fmt_slots[KV_FMT_COUNT];
};

static void acct_page(struct acct *a, const struct kv_page *pg)
{
	assert_int_equal(pg->bytes, kv_page_bytes_form(pg->cap, pg->head_dim, pg->fmt, pg->flags));
	assert_int_equal(pg->kv_bytes, kv_page_kv_bytes(pg->cap, pg->head_dim, pg->fmt));
	assert_true(pg->n_used <= pg->cap);
	a->allocated += pg->bytes;
	a->used += share(pg->bytes, pg->n_used, pg->cap);
	a->kv_bytes += share(pg->kv_bytes, pg->n_used, pg->cap);
	a->n_pages++;
	a->fmt_bytes[pg->fmt] += pg->bytes;
	a->fmt_kv_bytes[pg->fmt] += share(pg->kv_bytes, pg->n_used, pg->cap);
	a->fmt_slots[pg->fmt] += pg->n_used;
}

/* Adds a sequence's pages, checking each stream's own figures (n_tokens,
 * hot_free, kv_bytes, tail) against its pages on the way. */
static void acct_seq(struct acct *a, const struct kv_seq *s)
{
	size_t n = (size_t)s->n_layer * s->n_kv_head;

	for (size_t i = 0; i < n; i++) {
		const struct kv_stream *st = &s->streams[i];
		uint32_t tokens = 0, hot_free = 0;
		size_t kvb = 0;

		for (uint32_t p = 0; p < st->n_pages; p++) {
			const struct kv_page *pg = st->pages[p];

			acct_page(a, pg);
			tokens += pg->n_used;
			kvb += share(pg->kv_bytes, pg->n_used, pg->cap); /* the filled share (seq.h) */
			if (takes_new(st, pg))
				hot_free += pg->cap - pg->n_used;
		}
		if (st->n_tokens != tokens || st->hot_free != hot_free || st->kv_bytes != kvb)
			fail_msg("stream %zu: n_tokens %u hot_free %u kv_bytes %zu, pages say %u %u %zu", i, st->n_tokens,
				 st->hot_free, st->kv_bytes, tokens, hot_free, kvb);
		assert_true(st->n_pages <= st->cap_pages || st->cap_pages == 0);
		if (st->tail != KV_NO_PAGE) {
			assert_true(st->tail < st->n_pages);
			assert_true(takes_new(st, st->pages[st->tail]));
		}
	}
}

/* The pool's counters equal the sums over the given sequences' pages plus
 * `loose` pages held outside any sequence: allocated == sum over formats ==
 * sum of page bytes, used and kv_bytes exact, the budget never passed. */
static void check_acct(struct kv_pool *pool, struct kv_seq *const *seqs, size_t n_seqs,
		       struct kv_page *const *loose, size_t n_loose)
{
	struct acct a;
	struct kv_pool_stats st;
	size_t sum_fmt = 0;

	memset(&a, 0, sizeof a);
	for (size_t i = 0; i < n_seqs; i++)
		if (seqs[i])
			acct_seq(&a, seqs[i]);
	for (size_t i = 0; i < n_loose; i++)
		if (loose[i])
			acct_page(&a, loose[i]);
	kv_pool_stats(pool, &st);
	for (int f = 0; f < KV_FMT_COUNT; f++) {
		sum_fmt += st.fmt_bytes[f];
		if (st.fmt_bytes[f] != a.fmt_bytes[f] || st.fmt_kv_bytes[f] != a.fmt_kv_bytes[f] ||
		    st.fmt_slots[f] != a.fmt_slots[f])
			fail_msg("%s: pool says %zu bytes %zu kv %zu slots, pages say %zu %zu %zu", kv_fmt_name(f),
				 st.fmt_bytes[f], st.fmt_kv_bytes[f], st.fmt_slots[f], a.fmt_bytes[f],
				 a.fmt_kv_bytes[f], a.fmt_slots[f]);
	}
	if (st.allocated != a.allocated || sum_fmt != st.allocated || st.used != a.used ||
	    st.kv_bytes != a.kv_bytes || st.n_pages != a.n_pages)
		fail_msg("pool: allocated %zu (formats %zu) used %zu kv %zu pages %zu; pages say %zu %zu %zu %zu",
			 st.allocated, sum_fmt, st.used, st.kv_bytes, st.n_pages, a.allocated, a.used, a.kv_bytes,
			 a.n_pages);
	assert_true(st.used <= st.allocated);
	assert_true(st.peak_allocated >= st.allocated);
	if (st.budget) {
		assert_true(st.allocated <= st.budget);
		assert_true(st.peak_allocated <= st.budget);
	}
}

static void check_acct1(struct kv_pool *pool, struct kv_seq *s)
{
	check_acct(pool, &s, 1, NULL, 0);
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
	for (int f = 0; f < KV_FMT_COUNT; f++) {
		assert_int_equal(a->fmt_bytes[f], b->fmt_bytes[f]);
		assert_int_equal(a->fmt_kv_bytes[f], b->fmt_kv_bytes[f]);
		assert_int_equal(a->fmt_slots[f], b->fmt_slots[f]);
	}
}

/* Everything but pages_refused, which may count the refusal. */
static void assert_stats_same(const struct kv_pool_stats *a, const struct kv_pool_stats *b)
{
	assert_state_same(a, b);
	assert_int_equal(a->peak_allocated, b->peak_allocated);
	assert_int_equal(a->pages_allocated, b->pages_allocated);
}

/* Snapshot of a sequence's streams, to check that nothing moved. */
#define SHAPE_STREAMS 64
#define SHAPE_PAGES 32
struct seq_shape {
	uint32_t n_pages[SHAPE_STREAMS];
	uint32_t n_tokens[SHAPE_STREAMS];
	uint32_t hot_free[SHAPE_STREAMS];
	uint32_t tail[SHAPE_STREAMS];
	size_t kv_bytes[SHAPE_STREAMS];
	struct kv_page *pages[SHAPE_STREAMS][SHAPE_PAGES];
	uint32_t n_used[SHAPE_STREAMS][SHAPE_PAGES];
};

static void shape_of(struct kv_seq *s, struct seq_shape *out)
{
	size_t n = (size_t)s->n_layer * s->n_kv_head;

	assert_true(n <= SHAPE_STREAMS);
	memset(out, 0, sizeof *out);
	for (size_t i = 0; i < n; i++) {
		const struct kv_stream *st = &s->streams[i];

		out->n_pages[i] = st->n_pages;
		out->n_tokens[i] = st->n_tokens;
		out->hot_free[i] = st->hot_free;
		out->tail[i] = st->tail;
		out->kv_bytes[i] = st->kv_bytes;
		for (uint32_t j = 0; j < st->n_pages && j < SHAPE_PAGES; j++) {
			out->pages[i][j] = st->pages[j];
			out->n_used[i][j] = st->pages[j]->n_used;
		}
	}
}

static void assert_shape_same(struct kv_seq *s, const struct seq_shape *before)
{
	static struct seq_shape now;

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
		{ 16, KV_FMT_Q8, TKV_ERR_ARG },   /* pages of any format, but the hot one is f16/f32 */
		{ 16, KV_FMT_Q4, TKV_ERR_ARG },
		{ 16, KV_FMT_Q2, TKV_ERR_ARG },
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
		p.budget = 12345;
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
			assert_int_equal(kv_pool_budget(pool), 12345);
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

/* Page sizes: the 32-byte header, the K and V regions of tier.h, 2-byte
 * positions (4-byte in a wide page, 1-byte offsets) and 2-byte scores, a
 * 4-byte multiple with under 32 bytes of padding after K and under 4 after V,
 * the scores and the positions. */
static void test_page_bytes(void **state)
{
	static const uint32_t caps[] = { 1, 3, 4, 16, 64, 4096 }, hds[] = { 4, 8, 64, 128 };

	(void)state;
	for (uint32_t f = 0; f < KV_FMT_COUNT; f++)
		for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
			for (size_t j = 0; j < sizeof hds / sizeof hds[0]; j++) {
				uint32_t cap = caps[i], hd = hds[j];
				size_t kvb = kv_tier_k_bytes(f, cap, hd) + kv_tier_v_bytes(f, cap, hd);
				size_t lo = 32 + (size_t)cap * (sizeof(uint16_t) + sizeof(uint16_t)) + kvb;
				size_t b = kv_page_bytes(cap, hd, f), bw = kv_page_bytes_width(cap, hd, f, true);

				assert_int_equal(kv_page_kv_bytes(cap, hd, f), kvb);
				assert_int_equal(kv_page_bytes_width(cap, hd, f, false), b);
				assert_int_equal(b % 4, 0);
				assert_true(b >= lo);
				assert_true(b < lo + 31 + 3 + 3 + 3);
				assert_int_equal(bw % 4, 0);
				assert_true(bw >= lo + 2 * (size_t)cap);
				assert_true(bw < lo + 2 * (size_t)cap + 31 + 3 + 3 + 3);
				assert_int_equal(kv_page_bytes_form(cap, hd, f, KV_PAGE_WIDE), bw);
				assert_int_equal(kv_page_bytes_form(cap, hd, f, 0), b);
				b = kv_page_bytes_form(cap, hd, f, KV_PAGE_POS8);
				assert_int_equal(b % 4, 0);
				assert_true(b >= lo - cap);
				assert_true(b < lo - cap + 31 + 3 + 3 + 3);
			}
	/* the figures of tier.h, d = 64, 16 slots: K + V bytes */
	assert_int_equal(kv_page_kv_bytes(16, 64, KV_FMT_F32), 4096 + 4096);
	assert_int_equal(kv_page_kv_bytes(16, 64, KV_FMT_F16), 2048 + 2048);
	assert_int_equal(kv_page_kv_bytes(16, 64, KV_FMT_Q8), 1056 + 1056);
	assert_int_equal(kv_page_kv_bytes(16, 64, KV_FMT_Q4), 768 + 640);
	assert_int_equal(kv_page_kv_bytes(16, 64, KV_FMT_Q2), 512 + 384);
}

/* Largest error of a format on rows within [-R, R] (in the space the page
 * stores), loosely: f32 exact, f16 half an ulp, q8 half a step of absmax/127
 * (plus the f16 scale), q4/q2 one step of the range over L levels (the f16
 * parameters round outward). */
static double fmt_err(uint32_t fmt, double R)
{
	switch (fmt) {
	case KV_FMT_F32: return 0.0;
	case KV_FMT_F16: return R * 0x1p-11;
	case KV_FMT_Q8: return R / 127.0 * (0.5 + 0x1p-10) + 1e-6;
	case KV_FMT_Q4: return 2.0 * R / 15.0 * 1.01 + 1e-6;
	default: return 2.0 * R / 3.0 * 1.01 + 1e-6;
	}
}

/* A page's regions lie inside its bytes, aligned and in order; every slot
 * written comes back (per-slot formats slot by slot, packed ones whole),
 * rotated pages read back un-rotated; ASan catches a write past the page. */
static void test_page_layout(void **state)
{
	static const uint32_t caps[] = { 1, 5, 16, 64 }, hds[] = { 8, 64 };

	(void)state;
	for (uint32_t f = 0; f < KV_FMT_COUNT; f++)
		for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
			for (size_t j = 0; j < sizeof hds / sizeof hds[0]; j++)
				for (int rot = 0; rot < 2; rot++) {
					struct tkv_alloc a = {0};
					struct kv_pool *pool = tu_kv_pool(0, 16, KV_FMT_F16, &a);
					uint32_t cap = caps[i], hd = hds[j];
					int why = 12345;
					struct kv_page *pg = kv_pool_get(pool, hd, f, cap, &why);
					uintptr_t lo, hi;
					static float K[64 * 64], V[64 * 64];
					float kb[64], vb[64];
					double R = 15.625, tol;

					assert_non_null(pg);
					assert_int_equal(why, 12345); /* untouched on success */
					lo = (uintptr_t)pg;
					hi = lo + pg->bytes;
					assert_int_equal(pg->bytes, kv_page_bytes(cap, hd, f));
					assert_int_equal(pg->kv_bytes, kv_page_kv_bytes(cap, hd, f));
					assert_int_equal(pg->fmt, f);
					assert_int_equal(pg->flags, 0);
					assert_int_equal(pg->cap, cap);
					assert_int_equal(pg->n_used, 0);
					assert_int_equal(pg->head_dim, hd);
					assert_true(lo % 64 == 0);
					/* header, K, V, scores, positions: in that order, in the page */
					assert_int_equal(sizeof *pg, 32);
					assert_true((uintptr_t)pg->k % 32 == 0 && (uintptr_t)pg->k == lo + sizeof *pg);
					assert_true((uintptr_t)pg->v % 32 == 0 &&
						    (uintptr_t)pg->v >= (uintptr_t)pg->k + kv_tier_k_bytes(f, cap, hd));
					assert_true(pg->meta_off % 4 == 0 &&
						    lo + pg->meta_off >= (uintptr_t)pg->v + kv_tier_v_bytes(f, cap, hd));
					assert_true((uintptr_t)kv_page_scores(pg) == lo + pg->meta_off);
					assert_true(kv_meta_pos_off(cap) >= 2u * cap && kv_meta_pos_off(cap) % 4 == 0);
					assert_true(lo + pg->meta_off + kv_meta_pos_off(cap) + 2u * cap <= hi);
					/* metadata: 4 bytes a slot; padding under 32 + 4 + 4 bytes */
					assert_true(pg->bytes <= sizeof *pg + kv_page_kv_bytes(cap, hd, f) + 4u * cap + 31 + 3 + 2);

					for (uint32_t s = 0; s < cap; s++)
						kv_row(1, 0, 0, (int32_t)s, hd, K + (size_t)s * hd, V + (size_t)s * hd);
					if (rot) {
						static float Kr[64 * 64], Vr[64 * 64];

						pg->flags |= KV_PAGE_ROT;
						memcpy(Kr, K, (size_t)cap * hd * sizeof(float));
						memcpy(Vr, V, (size_t)cap * hd * sizeof(float));
						for (uint32_t s = 0; s < cap; s++) {
							kv_rotate(Kr + (size_t)s * hd, hd);
							kv_rotate(Vr + (size_t)s * hd, hd);
						}
						kv_tier_pack(f, pg->k, pg->v, cap, hd, Kr, Vr, cap);
						for (uint32_t s = 0; s < cap; s++)
							kv_slot_set_pos(pg, s, (int32_t)(1000 + s));
						/* rotated rows are within |x|_2 <= R sqrt(d); the error
						 * per element of the un-rotated row is at most the 2-norm
						 * of the stored error, sqrt(d) times its largest element,
						 * plus the rounding of rotate and unrotate (log2(d) + 2
						 * roundings of |x|_2 each, doubled for slack) */
						tol = sqrt((double)hd) * fmt_err(f, R * sqrt((double)hd)) +
						      4.0 * (log2((double)hd) + 2.0) * 0x1p-24 * R * sqrt((double)hd);
					} else if (kv_fmt_packed(f)) {
						kv_tier_pack(f, pg->k, pg->v, cap, hd, K, V, cap);
						for (uint32_t s = 0; s < cap; s++)
							kv_slot_set_pos(pg, s, (int32_t)(1000 + s));
						tol = fmt_err(f, R);
					} else {
						for (uint32_t s = 0; s < cap; s++)
							kv_page_store(pg, s, (int32_t)(1000 + s), K + (size_t)s * hd,
								      V + (size_t)s * hd);
						/* kv_val data is exact in f16 */
						tol = f == KV_FMT_Q8 ? fmt_err(f, R) : 0.0;
					}
					for (uint32_t s = 0; s < cap; s++) {
						kv_page_load_k(pg, s, kb);
						kv_page_load_v(pg, s, vb);
						assert_int_equal(kv_slot_pos(pg, s), (int32_t)(1000 + s));
						if (!rot && !kv_fmt_packed(f))
							assert_true(kv_slot_score(pg, s) == 0.0f);
						for (uint32_t e = 0; e < hd; e++) {
							double ek = fabs(kb[e] - K[(size_t)s * hd + e]);
							double ev = fabs(vb[e] - V[(size_t)s * hd + e]);

							if (!(ek <= tol && ev <= tol))
								fail_msg("%s cap %u d %u rot %d slot %u elem %u: errors %g %g > %g",
									 kv_fmt_name(f), cap, hd, rot, s, e, ek, ev, tol);
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
	struct kv_pool *pool = tu_kv_pool(0, 4, KV_FMT_F16, NULL);
	int why;
	struct kv_page *pg = kv_pool_get(pool, 4, KV_FMT_F16, 4, &why), *p32 = kv_pool_get(pool, 4, KV_FMT_F32, 4, &why);
	float k[4] = { 1.0f / 3.0f, 65504.0f, 1e6f, -0x1p-24f }, v[4] = { 0.1f, -0.0f, 2.0f, 1.0f + 0x1p-11f }, o[4];

	(void)state;
	assert_non_null(pg);
	assert_non_null(p32);
	kv_page_store(pg, 2, 7, k, v);
	kv_page_load_k(pg, 2, o);
	for (int i = 0; i < 4; i++)
		assert_true(o[i] == ops_f16_to_f32(ops_f32_to_f16(k[i])));
	assert_true(o[2] == INFINITY);
	kv_page_load_v(pg, 2, o);
	for (int i = 0; i < 4; i++)
		assert_true(o[i] == ops_f16_to_f32(ops_f32_to_f16(v[i])));
	assert_true(o[3] == 1.0f);
	kv_page_store(p32, 3, 9, k, v);
	kv_page_load_k(p32, 3, o);
	assert_memory_equal(o, k, sizeof k);
	kv_page_load_v(p32, 3, o);
	assert_memory_equal(o, v, sizeof v);
	assert_int_equal(kv_slot_pos(p32, 3), 9);
	kv_pool_put(pool, pg);
	kv_pool_put(pool, p32);
	kv_pool_free(pool);
}

/* ---- the pool on its own ------------------------------------------------------ */

static void test_pool_get_put_budget(void **state)
{
	struct tkv_alloc a = {0};
	size_t pb = kv_page_bytes(8, 32, KV_FMT_F16), qb = kv_page_bytes(16, 32, KV_FMT_Q4);
	struct kv_pool *pool = tu_kv_pool(2 * pb + qb + pb / 2, 8, KV_FMT_F16, &a);
	size_t live0 = atomic_load(&a.live);
	struct kv_pool_stats st;
	struct kv_page *p1, *p2, *p3, *q;
	int why = 0;

	(void)state;
	assert_true(qb < pb); /* 16 q4 slots cost less than 8 f16 ones at d = 32 */
	assert_true(kv_pool_can_fit(pool, 2 * pb + qb));
	assert_false(kv_pool_can_fit(pool, 3 * pb + qb));
	p1 = kv_pool_get(pool, 32, KV_FMT_F16, 8, &why);
	p2 = kv_pool_get(pool, 32, KV_FMT_F16, 8, &why);
	q = kv_pool_get(pool, 32, KV_FMT_Q4, 16, &why);
	assert_non_null(p1);
	assert_non_null(p2);
	assert_non_null(q);
	assert_false(kv_pool_can_fit(pool, pb));
	assert_true(kv_pool_can_fit(pool, pb / 2));
	p3 = kv_pool_get(pool, 32, KV_FMT_F16, 8, &why);
	assert_null(p3);
	assert_int_equal(why, TKV_ERR_KV_FULL);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.budget, 2 * pb + qb + pb / 2);
	assert_int_equal(st.n_pages, 3);
	assert_int_equal(st.allocated, 2 * pb + qb);
	assert_int_equal(st.fmt_bytes[KV_FMT_F16], 2 * pb);
	assert_int_equal(st.fmt_bytes[KV_FMT_Q4], qb);
	assert_int_equal(st.fmt_bytes[KV_FMT_F32], 0);
	assert_int_equal(st.peak_allocated, 2 * pb + qb);
	assert_int_equal(st.pages_allocated, 3);
	assert_int_equal(st.pages_refused, 1);
	assert_int_equal(st.used, 0);
	assert_int_equal(atomic_load(&a.live), live0 + 2 * pb + qb);

	/* filled slots count in used and kv_bytes (their share of each page), per
	 * format, and leave with the page */
	kv_pool_set_used(pool, p1, 3);
	kv_pool_set_used(pool, q, 5);
	assert_int_equal(p1->n_used, 3);
	assert_int_equal(q->n_used, 5);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.used, share(pb, 3, 8) + share(qb, 5, 16));
	assert_int_equal(st.kv_bytes, 3 * 2 * 32 * 2 + share(q->kv_bytes, 5, 16));
	assert_int_equal(st.fmt_kv_bytes[KV_FMT_F16], 3 * 2 * 32 * 2);
	assert_int_equal(st.fmt_kv_bytes[KV_FMT_Q4], share(q->kv_bytes, 5, 16));
	assert_int_equal(st.fmt_slots[KV_FMT_F16], 3);
	assert_int_equal(st.fmt_slots[KV_FMT_Q4], 5);
	/* set_used in both directions, to the same value, to full and to 0 */
	kv_pool_set_used(pool, p1, 8);
	kv_pool_set_used(pool, p1, 8);
	kv_pool_set_used(pool, q, 1);
	kv_pool_set_used(pool, q, 16);
	kv_pool_set_used(pool, q, 0);
	kv_pool_set_used(pool, q, 7);
	check_acct(pool, NULL, 0, (struct kv_page *[]){ p1, p2, q }, 3);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.fmt_slots[KV_FMT_F16], 8);
	assert_int_equal(st.fmt_slots[KV_FMT_Q4], 7);
	kv_pool_put(pool, p1);
	kv_pool_put(pool, NULL);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.used, share(qb, 7, 16));
	assert_int_equal(st.fmt_slots[KV_FMT_F16], 0);
	assert_int_equal(st.fmt_kv_bytes[KV_FMT_F16], 0);
	assert_int_equal(st.n_pages, 2);
	assert_int_equal(st.allocated, pb + qb);
	assert_int_equal(st.peak_allocated, 2 * pb + qb);
	p3 = kv_pool_get(pool, 32, KV_FMT_F16, 8, &why);
	assert_non_null(p3);
	kv_pool_put(pool, q);
	kv_pool_put(pool, p2);
	kv_pool_put(pool, p3);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.kv_bytes, 0);
	assert_int_equal(st.n_pages, 0);
	for (int f = 0; f < KV_FMT_COUNT; f++) {
		assert_int_equal(st.fmt_bytes[f], 0);
		assert_int_equal(st.fmt_kv_bytes[f], 0);
		assert_int_equal(st.fmt_slots[f], 0);
	}
	assert_int_equal(st.pages_allocated, 4);
	assert_int_equal(atomic_load(&a.live), live0);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* used is exact over pages whose bytes do not divide by their slots: each
 * page's share is floored on its own, and the pool's sum never drifts from
 * the sum of those floors however often fills go up and down. */
static void test_pool_used_rounding(void **state)
{
	struct kv_pool *pool = tu_kv_pool(0, 16, KV_FMT_F16, NULL);
	struct kv_page *pg[6];
	static const uint32_t caps[6] = { 3, 7, 11, 64, 13, 5 }, fmts[6] = { 1, 2, 3, 4, 0, 2 };
	int why;

	(void)state;
	for (int i = 0; i < 6; i++) {
		pg[i] = kv_pool_get(pool, 8, fmts[i], caps[i], &why);
		assert_non_null(pg[i]);
	}
	tu_rng_seed(5);
	for (int step = 0; step < 2000; step++) {
		int i = (int)(tu_rng_u32() % 6);

		kv_pool_set_used(pool, pg[i], tu_rng_u32() % (caps[i] + 1));
		check_acct(pool, NULL, 0, pg, 6);
	}
	for (int i = 0; i < 6; i++)
		kv_pool_put(pool, pg[i]);
	check_acct(pool, NULL, 0, NULL, 0);
	kv_pool_free(pool);
}

/* kv_share is floor(bytes * n / cap) without 128-bit integers: against plain
 * 64-bit arithmetic where the product fits, and at the ends for large sizes. */
static void test_share_exact(void **state)
{
	(void)state;
	tu_rng_seed(11);
	for (int i = 0; i < 100000; i++) {
		uint32_t cap = 1 + tu_rng_u32() % 4096, n = tu_rng_u32() % (cap + 1);
		size_t bytes = tu_rng_u32();

		assert_int_equal(kv_share(bytes, n, cap), (size_t)((uint64_t)bytes * n / cap));
	}
	for (int i = 0; i < 1000; i++) {
		uint32_t cap = 1 + tu_rng_u32(), n = tu_rng_u32() % cap;
		size_t bytes = ((size_t)tu_rng_u32() << 30) | tu_rng_u32();

		assert_int_equal(kv_share(bytes, cap, cap), bytes);
		assert_int_equal(kv_share(bytes, 0, cap), 0);
		assert_true(kv_share(bytes, n, cap) <= kv_share(bytes, n + 1, cap));
		assert_true(kv_share(bytes, n + 1, cap) - kv_share(bytes, n, cap) <= bytes / cap + 1);
	}
}

/* ---- sequences ------------------------------------------------------------------ */

/* A sequence holds one page per stream for its first token, not the context. */
static void test_pages_on_demand(void **state)
{
	struct tkv_alloc a = {0};
	const uint32_t L = 3, H = 2, HD = 16, P = 16;
	struct kv_pool *pool = tu_kv_pool(0, P, KV_FMT_F16, &a);
	size_t live0 = atomic_load(&a.live), pb = kv_page_bytes(P, HD, KV_FMT_F16);
	size_t pm = kv_page_bytes(KV_PAGE_MIN, HD, KV_FMT_F16);
	struct kv_seq *s = tu_kv_seq(pool, L, H, HD, &a);
	struct kv_pool_stats st;
	struct tkv_error err = {0};

	(void)state;
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 0);
	assert_int_equal(st.allocated, 0);
	for (uint32_t i = 0; i < L * H; i++) {
		assert_int_equal(s->streams[i].n_pages, 0);
		assert_int_equal(s->streams[i].hot_free, 0);
		assert_int_equal(s->streams[i].tail, KV_NO_PAGE);
		assert_int_equal(s->streams[i].kv_bytes, 0);
	}

	/* the first token takes one small page per stream (dynamic chunking) */
	assert_int_equal(kv_seq_reserve(s, 1, &err), TKV_OK);
	append_token(s, 7, 0);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, L * H);
	assert_int_equal(st.allocated, L * H * pm);
	assert_int_equal(st.used, L * H * share(pm, 1, KV_PAGE_MIN));
	assert_int_equal(st.kv_bytes, L * H * 2 * HD * 2);
	assert_int_equal(st.fmt_slots[KV_FMT_F16], L * H);
	for (uint32_t i = 0; i < L * H; i++) {
		assert_int_equal(s->streams[i].n_pages, 1);
		assert_int_equal(s->streams[i].n_tokens, 1);
		assert_int_equal(s->streams[i].hot_free, KV_PAGE_MIN - 1);
		assert_int_equal(s->streams[i].kv_bytes, 2 * HD * 2); /* one filled f16 slot */
		assert_int_equal(s->streams[i].n_small, 1);
	}
	check_acct1(pool, s);

	/* the rest of the first page needs nothing new */
	for (uint32_t t = 1; t < KV_PAGE_MIN; t++) {
		assert_int_equal(kv_seq_reserve(s, 1, &err), TKV_OK);
		append_token(s, 7, (int32_t)t);
	}
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, L * H);
	assert_int_equal(st.pages_allocated, L * H);
	assert_int_equal(s->streams[0].hot_free, 0);
	/* the next token takes a second small page: a stream of 4 slots may
	 * leave no more than 1/32 of itself empty, so the least, KV_PAGE_MIN */
	assert_int_equal(kv_seq_reserve_bytes(s, 1), L * H * pm);
	assert_int_equal(kv_seq_reserve(s, 1, &err), TKV_OK);
	append_token(s, 7, (int32_t)KV_PAGE_MIN);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 2 * L * H);
	assert_int_equal(st.allocated, 2 * L * H * pm);
	check_contents(s, 7, KV_PAGE_MIN + 1);
	check_acct1(pool, s);
	/* appended in order: token t in page t / KV_PAGE_MIN */
	for (uint32_t t = 0; t <= KV_PAGE_MIN; t++)
		assert_int_equal(kv_slot_pos(s->streams[0].pages[t / KV_PAGE_MIN], t % KV_PAGE_MIN), (int32_t)t);
	/* a chunk that fills the second page, two full pages and a small one */
	{
		uint32_t n_new = (KV_PAGE_MIN - 1) + 2 * P + KV_PAGE_MIN, end = KV_PAGE_MIN + 1 + n_new;

		assert_int_equal(kv_seq_reserve_bytes(s, n_new), L * H * (2 * pb + pm));
		assert_int_equal(kv_seq_reserve(s, n_new, &err), TKV_OK);
		for (uint32_t t = KV_PAGE_MIN + 1; t < end; t++)
			append_token(s, 7, (int32_t)t);
		kv_pool_stats(pool, &st);
		assert_int_equal(st.n_pages, 5 * L * H);
		assert_int_equal(st.allocated, L * H * (3 * pm + 2 * pb));
		assert_int_equal(st.used, st.allocated);
		check_contents(s, 7, end);
		check_acct1(pool, s);
		/* three small full pages: not worth a compaction yet */
		for (uint32_t i = 0; i < L * H; i++) {
			assert_false(kv_stream_untidy(&s->streams[i]));
			assert_int_equal(kv_stream_compact(s, &s->streams[i]), TKV_OK);
			assert_int_equal(s->streams[i].n_pages, 5);
		}
		kv_pool_stats(pool, &st);
		assert_int_equal(st.compactions, 0);
		/* tokens one by one until KV_UNTIDY_PAGES small pages: the stream is
		 * still small, so each new page has KV_PAGE_MIN slots */
		for (uint32_t t = end; t < end + (KV_UNTIDY_PAGES - 3) * KV_PAGE_MIN; t++) {
			assert_int_equal(kv_seq_reserve(s, 1, &err), TKV_OK);
			append_token(s, 7, (int32_t)t);
		}
		end += (KV_UNTIDY_PAGES - 3) * KV_PAGE_MIN;
		for (uint32_t i = 0; i < L * H; i++) {
			assert_true(kv_stream_untidy(&s->streams[i]));
			assert_int_equal(kv_stream_compact(s, &s->streams[i]), TKV_OK);
			assert_int_equal(s->streams[i].n_small, (KV_UNTIDY_PAGES * KV_PAGE_MIN) % P != 0);
		}
		/* the small pages' slots now fill full pages (and a right-sized one) */
		kv_pool_stats(pool, &st);
		{
			uint32_t T = KV_UNTIDY_PAGES * KV_PAGE_MIN;
			/* full pages of neighbours: positions as offsets (pool.h) */
			size_t want = 2 * pb + T / P * kv_page_bytes_form(P, HD, KV_FMT_F16, KV_PAGE_POS8) +
				      (T % P ? kv_page_bytes_form(T % P, HD, KV_FMT_F16, KV_PAGE_POS8) : 0);

			assert_int_equal(st.allocated, L * H * want);
			assert_int_equal(st.compact_slots, L * H * T);
			assert_int_equal(st.compact_bytes, L * H * T * 2 * HD * 2);
			assert_int_equal(st.compact_freed, L * H * (KV_UNTIDY_PAGES * pm - (want - 2 * pb)));
		}
		assert_int_equal(st.used, st.allocated);
		assert_true(st.compactions == L * H && st.compact_ns > 0);
		check_contents(s, 7, end);
		check_acct1(pool, s);
		/* nothing left to do */
		assert_int_equal(kv_stream_compact(s, &s->streams[0]), TKV_OK);
		kv_pool_stats(pool, &st);
		assert_int_equal(st.compactions, L * H);
	}

	/* reserving 0 is a no-op */
	{
		size_t n0;

		kv_pool_stats(pool, &st);
		n0 = st.n_pages;
		assert_int_equal(kv_seq_reserve(s, 0, &err), TKV_OK);
		kv_pool_stats(pool, &st);
		assert_int_equal(st.n_pages, n0);
	}

	kv_seq_clear(s);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 0);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.kv_bytes, 0);
	for (uint32_t i = 0; i < L * H; i++) {
		assert_int_equal(s->streams[i].n_tokens, 0);
		assert_int_equal(s->streams[i].n_pages, 0);
		assert_int_equal(s->streams[i].hot_free, 0);
		assert_int_equal(s->streams[i].kv_bytes, 0);
		assert_int_equal(s->streams[i].tail, KV_NO_PAGE);
		assert_int_equal(s->streams[i].n_seen, 0);
	}
	assert_int_equal(s->n_pos, 0);
	/* usable again after a clear */
	assert_int_equal(kv_seq_reserve(s, 3, &err), TKV_OK);
	for (int32_t t = 0; t < 3; t++)
		append_token(s, 8, t);
	check_contents(s, 8, 3);
	check_acct1(pool, s);

	kv_seq_free(s);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 0);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(atomic_load(&a.live), live0);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* The running key centroid of a stream is the mean of every key appended. */
static void test_centroid(void **state)
{
	const uint32_t HD = 8;
	struct kv_pool *pool = tu_kv_pool(0, 4, KV_FMT_F32, NULL);
	struct kv_seq *s = tu_kv_seq(pool, 2, 1, HD, NULL);
	double sum[2][8] = { { 0 } };
	float k[8], v[8];

	(void)state;
	assert_int_equal(kv_seq_reserve(s, 10, NULL), TKV_OK);
	for (int32_t t = 0; t < 10; t++) {
		append_token(s, 4, t);
		for (uint32_t l = 0; l < 2; l++) {
			kv_row(4, l, 0, t, HD, k, v);
			for (uint32_t i = 0; i < HD; i++)
				sum[l][i] += k[i];
		}
	}
	for (uint32_t l = 0; l < 2; l++) {
		const struct kv_stream *st = kv_seq_stream(s, l, 0);

		assert_int_equal(st->n_seen, 10);
		for (uint32_t i = 0; i < HD; i++)
			assert_float_equal(st->centroid[i], sum[l][i] / 10.0, 1e-4);
	}
	kv_seq_free(s);
	kv_pool_free(pool);
}

/* Free returns every page (of any format) and every byte of the sequence's
 * own memory, from any state (several pages, partly filled, with grown page
 * arrays). */
static void test_free_returns_everything(void **state)
{
	struct tkv_alloc a = {0};
	struct kv_pool *pool = tu_kv_pool(0, 4, KV_FMT_F32, &a);
	size_t live0 = atomic_load(&a.live);
	struct kv_seq *s1 = tu_kv_seq(pool, 2, 2, 8, &a), *s2 = tu_kv_seq(pool, 1, 3, 8, &a);
	struct kv_pool_stats st;
	float K[8 * 8], V[8 * 8];
	int32_t pos[8];
	int why;

	(void)state;
	assert_int_equal(kv_seq_reserve(s1, 30, NULL), TKV_OK); /* 8 pages a stream: arrays grow */
	assert_true(KV_PAGE_MIN == 2); /* 30 = 7 x 4 + 2, 5 = 4 + 1 */
	for (int32_t t = 0; t < 30; t++)
		append_token(s1, 1, t);
	/* warm and cold pages too, one rotated */
	for (uint32_t j = 0; j < 8; j++) {
		kv_row(1, 0, 0, (int32_t)(100 + j), 8, K + j * 8, V + j * 8);
		pos[j] = (int32_t)(100 + j);
	}
	assert_non_null(tu_kv_add_page(s1, kv_seq_stream(s1, 0, 0), KV_FMT_Q8, 8, 0, K, V, pos, 8, &why));
	assert_non_null(tu_kv_add_page(s1, kv_seq_stream(s1, 1, 1), KV_FMT_Q4, 64, 1, K, V, pos, 5, &why));
	assert_non_null(tu_kv_add_page(s1, kv_seq_stream(s1, 1, 0), KV_FMT_Q2, 16, 0, K, V, pos, 0, &why));
	assert_int_equal(kv_seq_reserve(s2, 5, NULL), TKV_OK);
	append_token(s2, 2, 0);
	check_acct(pool, (struct kv_seq *[]){ s1, s2 }, 2, NULL, 0);
	kv_seq_free(s1);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 3 * 2);
	assert_int_equal(st.used, 3 * share(kv_page_bytes(4, 8, KV_FMT_F32), 1, 4));
	for (int f = KV_FMT_F16; f < KV_FMT_COUNT; f++)
		assert_int_equal(st.fmt_bytes[f], 0);
	check_contents(s2, 2, 1);
	kv_seq_free(s2);
	kv_pool_stats(pool, &st);
	assert_int_equal(st.n_pages, 0);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.fmt_bytes[KV_FMT_F32], 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.kv_bytes, 0);
	/* 30 tokens: 7 pages of 4 and one of KV_PAGE_MIN per stream; 5: one of
	 * 4 and one of KV_PAGE_MIN */
	assert_int_equal(st.peak_allocated, (7 * 4 + 3) * kv_page_bytes(4, 8, KV_FMT_F32) +
						    (4 + 3) * kv_page_bytes(KV_PAGE_MIN, 8, KV_FMT_F32) +
						    kv_page_bytes(8, 8, KV_FMT_Q8) + kv_page_bytes(64, 8, KV_FMT_Q4) +
						    kv_page_bytes(16, 8, KV_FMT_Q2));
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
	struct kv_pool *pool = tu_kv_pool(10 * pb, P, KV_FMT_F16, &a);
	struct kv_seq *s = tu_kv_seq(pool, 2, 2, HD, &a), *s2 = tu_kv_seq(pool, 1, 1, HD, &a);
	struct kv_pool_stats before, after;
	static struct seq_shape shape;
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
	assert_int_equal(after.used, 2 * 4 * share(pb, P, P));
	check_acct(pool, (struct kv_seq *[]){ s, s2 }, 2, NULL, 0);

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
	struct kv_pool *pool = tu_kv_pool(0, P, KV_FMT_F32, &a);
	struct kv_seq *s = tu_kv_seq(pool, 2, 2, HD, &a);
	struct kv_pool_stats before, after;
	static struct seq_shape shape;
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
	check_acct1(pool, s);
	kv_seq_free(s);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* ---- stream bookkeeping ------------------------------------------------------------ */

/* Decoded keys and values of every slot of a page, in model space. */
static void page_rows(const struct kv_page *pg, float *K, float *V)
{
	for (uint32_t j = 0; j < pg->n_used; j++) {
		kv_page_load_k(pg, j, K + (size_t)j * pg->head_dim);
		kv_page_load_v(pg, j, V + (size_t)j * pg->head_dim);
	}
}

/* Removes slot j of page i and checks that the page now holds exactly what it
 * held minus slot j (the last slot moved into j, bit for bit, whatever the
 * format: per-channel parameters of packed pages are shared by all slots). */
static void remove_and_check(struct kv_seq *s, struct kv_stream *st, uint32_t i, uint32_t j)
{
	struct kv_page *pg = st->pages[i];
	uint32_t d = s->head_dim, n = pg->n_used, last = n - 1;
	static float K0[64 * 64], V0[64 * 64], K1[64 * 64], V1[64 * 64];
	int32_t pos0[64];
	uint16_t score0[64];

	assert_true(n <= 64 && d <= 64 && j < n);
	page_rows(pg, K0, V0);
	for (uint32_t t = 0; t < n; t++)
		pos0[t] = kv_slot_pos(pg, t);
	memcpy(score0, kv_page_scores(pg), n * sizeof *score0);
	kv_stream_remove_slot(s, st, i, j);
	assert_ptr_equal(st->pages[i], pg);
	assert_int_equal(pg->n_used, last);
	page_rows(pg, K1, V1);
	for (uint32_t t = 0; t < last; t++) {
		uint32_t from = t == j ? last : t;

		assert_int_equal(kv_slot_pos(pg, t), pos0[from]);
		assert_true(kv_page_scores(pg)[t] == score0[from]);
		assert_memory_equal(K1 + (size_t)t * d, K0 + (size_t)from * d, d * sizeof(float));
		assert_memory_equal(V1 + (size_t)t * d, V0 + (size_t)from * d, d * sizeof(float));
	}
}

/* add_page / set_used / remove_slot / drop_empty keep n_tokens, hot_free, tail
 * and kv_bytes exact over pages of every format; reserve counts the room left
 * by removed slots in hot pages, and appends fill it. */
static void test_stream_bookkeeping(void **state)
{
	struct tkv_alloc a = {0};
	const uint32_t P = 4, HD = 8;
	struct kv_pool *pool = tu_kv_pool(0, P, KV_FMT_F16, &a);
	size_t live0 = atomic_load(&a.live);
	struct kv_seq *s = tu_kv_seq(pool, 1, 2, HD, &a);
	struct kv_stream *st = kv_seq_stream(s, 0, 0);
	float K[20 * 8], V[20 * 8];
	int32_t pos[20];
	struct kv_pool_stats ps;
	int why;

	(void)state;
	assert_int_equal(kv_seq_reserve(s, 3 * P, NULL), TKV_OK);
	for (int32_t t = 0; t < (int32_t)(3 * P); t++)
		append_token(s, 9, t);
	assert_int_equal(st->hot_free, 0);
	check_acct1(pool, s);
	for (uint32_t j = 0; j < 20; j++) {
		pos[j] = (int32_t)(100 + j);
		kv_row(9, 0, 0, pos[j], HD, K + j * HD, V + j * HD);
	}
	/* one page of each low format (q4 rotated), partly filled */
	for (size_t f = 0; f < sizeof LOW_FMTS / sizeof LOW_FMTS[0]; f++) {
		struct kv_page *pg = tu_kv_add_page(s, st, LOW_FMTS[f], 16, LOW_FMTS[f] == KV_FMT_Q4, K + f * 6 * HD,
						    V + f * 6 * HD, pos + f * 6, 4 + (uint32_t)f, &why);

		assert_non_null(pg);
		assert_int_equal(st->hot_free, 0); /* low-format room is not room for appends */
		check_acct1(pool, s);
	}
	assert_int_equal(st->n_pages, 6);
	assert_int_equal(st->n_tokens, 3 * P + 4 + 5 + 6);

	/* removals from every page, first, middle and last slots */
	remove_and_check(s, st, 1, 0);           /* hot page 1: room for one token */
	assert_int_equal(st->hot_free, 1);
	check_acct1(pool, s);
	remove_and_check(s, st, 2, P - 1);
	assert_int_equal(st->hot_free, 2);
	remove_and_check(s, st, 3, 1);           /* q8 */
	remove_and_check(s, st, 4, 4);           /* q4, rotated: last slot */
	remove_and_check(s, st, 4, 0);
	remove_and_check(s, st, 5, 2);           /* q2 */
	assert_int_equal(st->hot_free, 2);
	check_acct1(pool, s);

	/* the other stream has no room: reserve takes one page there, none here */
	kv_pool_stats(pool, &ps);
	assert_int_equal(kv_seq_reserve(s, 2, NULL), TKV_OK);
	{
		struct kv_pool_stats ps2;

		kv_pool_stats(pool, &ps2);
		assert_int_equal(ps2.n_pages, ps.n_pages + 1);
	}
	assert_int_equal(st->n_pages, 6);
	assert_int_equal(kv_seq_stream(s, 0, 1)->n_pages, 4);
	append_token(s, 9, 3 * P);
	append_token(s, 9, 3 * P + 1);
	assert_int_equal(st->hot_free, 0);
	check_acct1(pool, s);

	/* empty every slot of the q8 page and of hot page 0: drop_empty returns
	 * them (and only them) and keeps tail pointing at a hot page or nowhere */
	while (st->pages[3]->n_used)
		remove_and_check(s, st, 3, st->pages[3]->n_used - 1);
	while (st->pages[0]->n_used)
		remove_and_check(s, st, 0, 0);
	assert_int_equal(st->hot_free, P);
	check_acct1(pool, s);
	kv_stream_drop_empty(s, st);
	assert_int_equal(st->n_pages, 4);
	assert_int_equal(st->hot_free, 0);
	for (uint32_t p = 0; p < st->n_pages; p++)
		assert_true(st->pages[p]->n_used > 0);
	check_acct1(pool, s);
	check_contents(s, 9, UINT32_MAX);

	/* a hot page with room added by the policy becomes room for appends */
	{
		struct kv_page *pg = kv_pool_get(pool, HD, KV_FMT_F16, P, &why);

		assert_non_null(pg);
		assert_int_equal(kv_stream_add_page(s, st, pg), TKV_OK);
		assert_int_equal(st->hot_free, P);
		kv_stream_set_used(s, st, pg, 0);
		assert_int_equal(st->hot_free, P);
		check_acct1(pool, s);
		assert_int_equal(kv_seq_reserve(s, P, NULL), TKV_OK);
		assert_int_equal(st->n_pages, 5);
		for (int32_t t = 0; t < (int32_t)P; t++)
			append_token(s, 9, (int32_t)(3 * P + 2) + t);
		assert_int_equal(pg->n_used, P);
		check_contents(s, 9, UINT32_MAX);
		check_acct1(pool, s);
	}
	kv_seq_free(s);
	check_acct(pool, NULL, 0, NULL, 0);
	assert_int_equal(atomic_load(&a.live), live0);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* Decoded rows, position and score of every slot of a stream, by position. */
struct stream_rows {
	unsigned char present[MAX_POS];
	float k[MAX_POS][16], v[MAX_POS][16], score[MAX_POS];
	uint8_t fmt[MAX_POS], rot[MAX_POS];
	const struct kv_page *page[MAX_POS];
};

static void rows_of(const struct kv_stream *st, uint32_t d, struct stream_rows *r)
{
	assert_true(d <= 16);
	memset(r->present, 0, sizeof r->present);
	for (uint32_t p = 0; p < st->n_pages; p++) {
		const struct kv_page *pg = st->pages[p];

		for (uint32_t j = 0; j < pg->n_used; j++) {
			int32_t pos = kv_slot_pos(pg, j);

			assert_true(pos >= 0 && pos < MAX_POS && !r->present[pos]);
			r->present[pos] = 1;
			kv_page_load_k(pg, j, r->k[pos]);
			kv_page_load_v(pg, j, r->v[pos]);
			r->score[pos] = kv_slot_score(pg, j);
			r->fmt[pos] = pg->fmt;
			r->rot[pos] = (pg->flags & KV_PAGE_ROT) != 0;
			r->page[pos] = pg;
		}
	}
}

/* A stream with holes in pages of every format (q4 rotated and not) and a
 * frozen page; fills a stream_rows with what it holds. */
static void build_holey(struct kv_seq *s, struct kv_stream *st, struct kv_page **frozen)
{
	static const struct {
		uint32_t fmt, cap, n, rot;
	} pages[] = {
		{ KV_FMT_F16, 4, 4, 0 }, { KV_FMT_F16, 4, 4, 0 }, { KV_FMT_F16, 4, 4, 0 }, { KV_FMT_F16, 4, 4, 0 },
		{ KV_FMT_Q8, 8, 8, 0 },  { KV_FMT_Q8, 8, 6, 0 },  { KV_FMT_Q8, 8, 7, 0 },
		{ KV_FMT_Q4, 8, 8, 0 },  { KV_FMT_Q4, 8, 5, 0 },  { KV_FMT_Q4, 8, 6, 1 }, { KV_FMT_Q4, 8, 3, 1 },
		{ KV_FMT_Q2, 16, 9, 0 }, { KV_FMT_Q2, 16, 2, 0 }, { KV_FMT_F32, 4, 2, 0 }, { KV_FMT_F16, 4, 3, 0 },
	};
	const uint32_t d = s->head_dim;
	float K[16 * 16], V[16 * 16];
	int32_t pos[16];
	int32_t next = 0;
	int why;

	for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
		struct kv_page *pg;

		for (uint32_t j = 0; j < pages[i].n; j++) {
			pos[j] = next++;
			kv_row(3, 0, 0, pos[j], d, K + j * d, V + j * d);
		}
		pg = tu_kv_add_page(s, st, pages[i].fmt, pages[i].cap, (int)pages[i].rot, K, V, pos, pages[i].n, &why);
		assert_non_null(pg);
		for (uint32_t j = 0; j < pg->n_used; j++)
			kv_slot_set_score(pg, j, (float)kv_slot_pos(pg, j) * 0.5f);
	}
	/* the last f16 page stands for a shared prefix page */
	*frozen = st->pages[st->n_pages - 1];
	(*frozen)->flags |= KV_PAGE_FROZEN;
	/* holes everywhere: two or more partial pages in every group */
	remove_and_check(s, st, 7, 2);
	remove_and_check(s, st, 0, 1);
	remove_and_check(s, st, 0, 0);
	remove_and_check(s, st, 1, 3);
	remove_and_check(s, st, 2, 2);
	remove_and_check(s, st, 2, 0);
	remove_and_check(s, st, 2, 0);
	remove_and_check(s, st, 4, 5);
	remove_and_check(s, st, 8, 0);
	remove_and_check(s, st, 11, 4);
}

/* A stream whose new tokens are q8 (a tight stream, policy.h) never writes
 * them into a rotated q8 page with room (warm slots stored rotated before it
 * became tight): new tokens arrive in model space. */
static void test_hot_q8_skips_rotated(void **state)
{
	struct tkv_alloc a = {0};
	struct kv_pool *pool = tu_kv_pool(0, 4, KV_FMT_F16, &a);
	struct kv_seq *s = tu_kv_seq(pool, 1, 1, 16, &a);
	struct kv_stream *st = kv_seq_stream(s, 0, 0);
	static struct stream_rows r;
	struct tkv_error err = {0};
	float K[3 * 16], V[3 * 16], k[16], v[16];
	int32_t pos[3] = { 0, 1, 2 };
	struct kv_page *rot;
	int why;

	(void)state;
	for (uint32_t j = 0; j < 3; j++)
		kv_row(5, 0, 0, pos[j], 16, K + j * 16, V + j * 16);
	kv_stream_set_hot_fmt(st, KV_FMT_Q8);
	rot = tu_kv_add_page(s, st, KV_FMT_Q8, 8, 1, K, V, pos, 3, &why);
	assert_non_null(rot);
	assert_int_equal(st->hot_free, 0);
	s->n_pos = 3;
	assert_int_equal(kv_seq_reserve(s, 6, &err), TKV_OK);
	for (int32_t p = 3; p < 9; p++) {
		kv_row(5, 0, 0, p, 16, k, v);
		kv_seq_append(s, 0, 0, p, k, v);
		s->n_pos = p + 1;
	}
	assert_int_equal(rot->n_used, 3);
	check_acct1(pool, s);
	rows_of(st, 16, &r);
	for (int32_t p = 0; p < 9; p++) {
		float amax = 0.0f;

		assert_true(r.present[p]);
		assert_int_equal(r.rot[p], p < 3); /* the rotated page kept its three */
		if (p < 3)
			continue;
		/* new ones: q8 of the model-space row */
		kv_row(5, 0, 0, p, 16, k, v);
		for (uint32_t c = 0; c < 16; c++)
			amax = fmaxf(amax, fabsf(k[c]));
		for (uint32_t c = 0; c < 16; c++)
			assert_true(fabsf(r.k[p][c] - k[c]) <= amax / 127.0f * 0.51f + 1e-4f);
	}
	kv_seq_free(s);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* A row x of per-channel region reg of packed page pg, x0 before it was
 * re-packed: within half a step of the page's channel range (rotated pages:
 * per element at most the 2-norm of that error). d = 16. */
static void check_repacked(const struct kv_page *pg, bool rot, const void *reg, const float *x, const float *x0)
{
	float lo[16], hi[16];
	double L = pg->fmt == KV_FMT_Q4 ? 15.0 : 3.0, e2 = 0.0, worst = 0.0;

	/* a per-channel value region has the key layout */
	kv_tier_key_bounds(pg->fmt, reg, pg->cap, 16, pg->n_used, lo, hi);
	for (uint32_t c = 0; c < 16; c++) {
		double step = ((double)hi[c] - lo[c]) / L, e = fabs(x[c] - x0[c]);

		e2 += step * step / 4.0;
		worst = fmax(worst, e - (rot ? 0.0 : step / 2.0 * (1.0 + 0x1p-10)));
	}
	if (rot)
		assert_true(worst <= sqrt(e2) * (1.0 + 0x1p-10) + 1e-4);
	else
		assert_true(worst <= 1e-5);
}

/* After a compaction: every slot still there with its position, score,
 * format and rotation; per-slot formats bit for bit; q4/q2 keys (and values
 * stored per channel) within half a step of their page's channel range,
 * per-slot q4/q2 values bit for bit (a value row re-packs to itself). */
static void check_rows_kept(const struct stream_rows *before_, const struct stream_rows *after_)
{
#define before (*before_)
#define after (*after_)
	for (int32_t pos = 0; pos < MAX_POS; pos++) {
		assert_int_equal(after.present[pos], before.present[pos]);
		if (!before.present[pos])
			continue;
		assert_int_equal(after.fmt[pos], before.fmt[pos]);
		assert_int_equal(after.rot[pos], before.rot[pos]);
		assert_true(after.score[pos] == before.score[pos]);
		if (!kv_fmt_packed(after.fmt[pos])) {
			assert_memory_equal(after.v[pos], before.v[pos], sizeof after.v[pos]);
			assert_memory_equal(after.k[pos], before.k[pos], sizeof after.k[pos]);
		} else {
			/* re-quantized once with the receiving page's parameters: within half
			 * a step of its channel range (rotated pages: per element at most
			 * the 2-norm of that error) */
			const struct kv_page *pg = after.page[pos];

			check_repacked(pg, after.rot[pos], pg->k, after.k[pos], before.k[pos]);
			/* values: per channel like keys at d = 16 */
			if (kv_tier_v_per_channel(16))
				check_repacked(pg, after.rot[pos], pg->v, after.v[pos], before.v[pos]);
			else
				assert_memory_equal(after.v[pos], before.v[pos], sizeof after.v[pos]);
		}
	}
#undef before
#undef after
}

/* kv_stream_compact: at most one partial page per format and rotation is left
 * (frozen pages aside, untouched), the positions, scores and the decoded rows
 * of per-slot formats are unchanged bit for bit, q4/q2 keys and
 * per-channel values within half a step of the re-packed page's channel
 * range; fewer pages, accounting exact, bytes back to the
 * allocator. */
static void test_stream_compact(void **state)
{
	struct tkv_alloc a = {0};
	struct kv_pool *pool = tu_kv_pool(0, 4, KV_FMT_F16, &a);
	struct kv_seq *s = tu_kv_seq(pool, 1, 1, 16, &a);
	struct kv_stream *st = kv_seq_stream(s, 0, 0);
	static struct stream_rows before, after;
	struct kv_page *frozen;
	uint32_t frozen_used;
	unsigned char frozen_bytes[4096];
	size_t live0, live1;

	(void)state;
	build_holey(s, st, &frozen);
	check_acct1(pool, s);
	frozen_used = frozen->n_used;
	assert_true(frozen->bytes <= sizeof frozen_bytes);
	memcpy(frozen_bytes, frozen, frozen->bytes);
	rows_of(st, 16, &before);
	live0 = atomic_load(&a.live);
	assert_int_equal(kv_stream_compact(s, st), TKV_OK);
	live1 = atomic_load(&a.live);
	check_acct1(pool, s);
	rows_of(st, 16, &after);
	assert_true(live1 < live0);
	/* the frozen page: same bytes, still there */
	assert_int_equal(frozen->n_used, frozen_used);
	assert_memory_equal(frozen, frozen_bytes, frozen->bytes);
	/* one partial page per group */
	for (uint32_t p = 0; p < st->n_pages; p++)
		for (uint32_t q = p + 1; q < st->n_pages; q++) {
			const struct kv_page *x = st->pages[p], *y = st->pages[q];

			assert_true(x->n_used > 0);
			if (x == frozen || y == frozen || x->fmt != y->fmt ||
			    (x->flags & KV_PAGE_ROT) != (y->flags & KV_PAGE_ROT))
				continue;
			assert_false(x->n_used < x->cap && y->n_used < y->cap);
		}
	check_rows_kept(&before, &after);
	/* nothing left to do the second time */
	{
		static struct seq_shape shape;

		shape_of(s, &shape);
		assert_int_equal(kv_stream_compact(s, st), TKV_OK);
		assert_shape_same(s, &shape);
	}
	kv_seq_free(s);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* Compaction when allocations fail: every allocation call of a compaction
 * failed in turn (alone, and with every later one): TKV_OK or TKV_ERR_NOMEM,
 * every slot kept as check_rows_kept says, accounting exact, nothing leaked;
 * a compaction with the allocator back finishes the job (one partial page
 * per group at most). */
static void test_stream_compact_nomem(void **state)
{
	static struct stream_rows before, after;
	int n_nomem = 0;

	(void)state;
	for (unsigned long long k = 1;; k++) {
		bool done = false;

		for (unsigned long long count = 0; count <= 1; count++) {
			struct tkv_alloc a = {0};
			struct kv_pool *pool = tu_kv_pool(0, 4, KV_FMT_F16, &a);
			struct kv_seq *s = tu_kv_seq(pool, 1, 1, 16, &a);
			struct kv_stream *st = kv_seq_stream(s, 0, 0);
			struct kv_page *frozen;
			unsigned long long calls;
			int rc;

			build_holey(s, st, &frozen);
			rows_of(st, 16, &before);
			calls = atomic_load(&a.n_calls);
			a.fail_at = calls + k;
			a.fail_count = count;
			rc = kv_stream_compact(s, st);
			a.fail_at = 0;
			assert_true(rc == TKV_OK || rc == TKV_ERR_NOMEM);
			n_nomem += rc == TKV_ERR_NOMEM;
			/* fewer than k calls: the whole compaction ran unhurt */
			done = atomic_load(&a.n_calls) < calls + k;
			check_acct1(pool, s);
			rows_of(st, 16, &after);
			check_rows_kept(&before, &after);
			assert_int_equal(kv_stream_compact(s, st), TKV_OK);
			check_acct1(pool, s);
			for (uint32_t p = 0; p < st->n_pages; p++)
				for (uint32_t q = p + 1; q < st->n_pages; q++) {
					const struct kv_page *x = st->pages[p], *y = st->pages[q];

					if (x == frozen || y == frozen || x->fmt != y->fmt ||
					    (x->flags & KV_PAGE_ROT) != (y->flags & KV_PAGE_ROT))
						continue;
					assert_false(x->n_used < x->cap && y->n_used < y->cap);
				}
			kv_seq_free(s);
			kv_pool_free(pool);
			assert_int_equal(atomic_load(&a.live), 0);
		}
		if (done)
			break;
	}
	assert_true(n_nomem > 0);
}

/* ---- slot metadata ------------------------------------------------------------- */

/* Score codes: 0 and what is below 2^-32 (negatives, NaN) give 0; within
 * [2^-32, 2^32) a code is within 2^-11 of the value (relative); codes are
 * monotonic and every code decodes and encodes to itself; 2^32 and more
 * (infinity too) give the largest code. */
static void test_score_codes(void **state)
{
	float prev = -1.0f;

	(void)state;
	assert_int_equal(kv_score_enc(0.0f), 0);
	assert_int_equal(kv_score_enc(-1.0f), 0);
	assert_int_equal(kv_score_enc(NAN), 0);
	assert_int_equal(kv_score_enc(0x1p-33f), 0);
	assert_true(kv_score_dec(0) == 0.0f);
	assert_int_equal(kv_score_enc(INFINITY), UINT16_MAX);
	assert_int_equal(kv_score_enc(0x1p32f), UINT16_MAX);
	assert_true(kv_score_dec(UINT16_MAX) < 0x1p32f && kv_score_dec(UINT16_MAX) > 0x1.ffp31f);
	for (uint32_t c = 0; c <= UINT16_MAX; c++) {
		float x = kv_score_dec((uint16_t)c);

		assert_true(x > prev);
		assert_int_equal(kv_score_enc(x), c);
		prev = x;
	}
	tu_rng_seed(5);
	for (int i = 0; i < 100000; i++) {
		float x = ldexpf(tu_rng_f(1.0f, 2.0f), (int)(tu_rng_u32() % 63) - 31);
		float y = kv_score_dec(kv_score_enc(x));

		if (!(fabsf(y - x) <= 0x1p-11f * x))
			fail_msg("score %.9g stored as %.9g", (double)x, (double)y);
	}
}

/* Position forms: offsets from a base when positions span fewer than 256
 * (and lie below KV_POS16_LIMIT), uint16_t otherwise, int32_t in a wide
 * stream; an offset page takes exactly base..base+255 and gives every one of
 * them back; it costs one byte a slot less than a narrow page, and the pool
 * counts its metadata and its fixed bytes as such. */
static void test_pos_forms(void **state)
{
	struct tkv_alloc a = {0};
	struct kv_pool *pool = tu_kv_pool(0, 16, KV_FMT_F16, &a);
	struct kv_pool_stats ps;
	struct kv_page *pg, *narrow;
	int why = TKV_OK;

	(void)state;
	assert_int_equal(kv_pos_form(0, 255, false), KV_PAGE_POS8);
	assert_int_equal(kv_pos_form(7, 7, false), KV_PAGE_POS8);
	assert_int_equal(kv_pos_form(0, 256, false), 0);
	assert_int_equal(kv_pos_form(KV_POS16_LIMIT - 256, KV_POS16_LIMIT - 1, false), KV_PAGE_POS8);
	assert_int_equal(kv_pos_form(KV_POS16_LIMIT - 100, KV_POS16_LIMIT, false), 0);
	assert_int_equal(kv_pos_form(0, 3, true), KV_PAGE_WIDE);
	for (uint32_t cap = 1; cap <= 256; cap += 51) {
		pg = kv_pool_get_form(pool, 8, KV_FMT_Q4, cap, KV_PAGE_POS8, 1000, &why);
		narrow = kv_pool_get(pool, 8, KV_FMT_Q4, cap, &why);
		assert_non_null(pg);
		assert_non_null(narrow);
		assert_int_equal(pg->flags & KV_POS_FORMS, KV_PAGE_POS8);
		assert_int_equal(pg->bytes, kv_page_bytes_form(cap, 8, KV_FMT_Q4, KV_PAGE_POS8));
		assert_true(pg->bytes + cap - 3 <= narrow->bytes && pg->bytes + cap + 3 >= narrow->bytes);
		assert_int_equal(kv_page_slot_meta(pg), 3);
		assert_int_equal(kv_page_slot_meta(narrow), 4);
		assert_true(kv_page_fixed(pg) >= 32 && kv_page_fixed(pg) < 32 + 31 + 3 + 3 + 3);
		assert_false(kv_page_takes_pos(pg, 999));
		assert_true(kv_page_takes_pos(pg, 1000));
		assert_true(kv_page_takes_pos(pg, 1255));
		assert_false(kv_page_takes_pos(pg, 1256));
		assert_true(kv_page_takes_pos(narrow, 0) && kv_page_takes_pos(narrow, KV_POS16_LIMIT - 1));
		assert_false(kv_page_takes_pos(narrow, KV_POS16_LIMIT) || kv_page_takes_pos(narrow, -1));
		for (uint32_t off = 0; off < 256; off += cap) {
			for (uint32_t j = 0; j < cap; j++) {
				kv_slot_set_pos(pg, j, 1000 + (int32_t)((off + 97 * j) % 256));
				kv_slot_set_score(pg, j, (float)j);
			}
			for (uint32_t j = 0; j < cap; j++) {
				assert_int_equal(kv_slot_pos(pg, j), 1000 + (int32_t)((off + 97 * j) % 256));
				assert_true(kv_slot_score(pg, j) == (float)j);
			}
		}
		kv_slot_copy(narrow, 0, pg, 0, cap);
		assert_true(kv_page_takes_slots(narrow, pg, 0, cap));
		for (uint32_t j = 0; j < cap; j++)
			assert_int_equal(kv_slot_pos(narrow, j), kv_slot_pos(pg, j));
		kv_pool_set_used(pool, pg, cap);
		kv_pool_set_used(pool, narrow, cap / 2);
		kv_pool_stats(pool, &ps);
		assert_int_equal(ps.meta_bytes, 3 * (size_t)cap + 4 * (size_t)(cap / 2));
		assert_int_equal(ps.fixed_bytes, kv_page_fixed(pg) + kv_page_fixed(narrow));
		kv_pool_put(pool, pg);
		kv_pool_put(pool, narrow);
		kv_pool_stats(pool, &ps);
		assert_int_equal(ps.meta_bytes, 0);
		assert_int_equal(ps.fixed_bytes, 0);
		assert_int_equal(ps.allocated, 0);
	}
	kv_pool_free(pool);
}

/* Bitmap positions (KV_PAGE_POSBM): chosen only for q4/q2 pages whose
 * bitmap is smaller than their positions; a bitmap page takes exactly
 * base..base+64*words-1, gives every position back in order, drops the bits
 * of slots past a lower fill, and a removal keeps its slots sorted and their
 * rows and scores with them; kv_rows_sort sorts rows with their positions
 * and scores; a copy (kv_pool_get_like) has the same shape. */
static void test_pos_bitmap(void **state)
{
	struct tkv_alloc a = {0};
	enum { P = 16, HD = 8, CAP = 64 };
	struct kv_pool *pool = tu_kv_pool(0, P, KV_FMT_F16, &a);
	struct kv_seq *s = tu_kv_seq(pool, 1, 1, HD, &a);
	struct kv_stream *st = &s->streams[0];
	float K[CAP * HD], V[CAP * HD], k[HD], v[HD];
	int32_t pos[CAP], want[CAP];
	uint16_t sc[CAP];
	uint32_t idx[CAP], n = 40;
	struct kv_page *pg, *cp;
	int why = TKV_OK;

	(void)state;
	/* 64 slots over 500 positions: 8 words (64 bytes) against 128 */
	assert_int_equal(kv_pos_form_cap(100, 599, 64, false, true), KV_PAGE_POSBM);
	assert_int_equal(kv_pos_form_cap(100, 599, 64, false, false), 0);
	assert_int_equal(kv_pos_form_cap(100, 599, 64, true, true), KV_PAGE_WIDE);
	/* 64 slots over 64 positions: one word against 64 bytes of offsets */
	assert_int_equal(kv_pos_form_cap(100, 163, 64, false, true), KV_PAGE_POSBM);
	/* few slots over a wide span: 2 bytes each is less */
	assert_int_equal(kv_pos_form_cap(0, 4000, 16, false, true), 0);
	assert_int_equal(kv_pos_form_cap(0, 200, 4, false, true), KV_PAGE_POS8);
	assert_int_equal(kv_pos_form_cap(KV_POS16_LIMIT - 10, KV_POS16_LIMIT + 500, 64, false, true), 0);

	tu_rng_seed(21);
	assert_int_equal(kv_popcount64(0), 0);
	assert_int_equal(kv_popcount64(~(uint64_t)0), 64);
	for (int i = 0; i < 1000; i++) {
		uint64_t x = tu_rng_u64() & tu_rng_u64();

		assert_int_equal(kv_popcount64(x), (uint32_t)__builtin_popcountll(x));
	}
	/* n rows at random distinct positions in 100..599, out of order */
	for (uint32_t j = 0; j < n; j++) {
		bool dup;

		do {
			pos[j] = 100 + (int32_t)(tu_rng_u32() % 500);
			dup = false;
			for (uint32_t i = 0; i < j; i++)
				dup |= pos[i] == pos[j];
		} while (dup);
		sc[j] = kv_score_enc((float)pos[j]);
		for (uint32_t c = 0; c < HD; c++) {
			K[j * HD + c] = (float)pos[j] + 0.125f * (float)c;
			V[j * HD + c] = -(float)pos[j] - 0.25f * (float)c;
		}
	}
	kv_rows_sort(K, V, HD, pos, sc, n, idx);
	for (uint32_t j = 0; j < n; j++) {
		assert_true(j == 0 || pos[j - 1] < pos[j]);
		assert_true(kv_score_dec(sc[j]) == kv_score_dec(kv_score_enc((float)pos[j])));
		assert_true(K[j * HD + 3] == (float)pos[j] + 0.375f && V[j * HD + 1] == -(float)pos[j] - 0.25f);
	}
	pg = kv_pool_get_span(pool, HD, KV_FMT_Q4, CAP, KV_PAGE_POSBM, 100, 599, &why);
	assert_non_null(pg);
	assert_int_equal(pg->flags & KV_POS_FORMS, KV_PAGE_POSBM);
	assert_int_equal(kv_page_bm_words(pg), 8);
	assert_int_equal(pg->bytes, kv_page_bytes_bm(CAP, HD, KV_FMT_Q4, 8));
	assert_true(pg->bytes + 64 <= kv_page_bytes(CAP, HD, KV_FMT_Q4));
	assert_int_equal(kv_page_slot_meta(pg), 2);
	assert_false(kv_page_takes_pos(pg, 99));
	assert_true(kv_page_takes_pos(pg, 100) && kv_page_takes_pos(pg, 611));
	assert_false(kv_page_takes_pos(pg, 612));
	assert_false(kv_stream_takes(st, pg));
	assert_true(kv_stream_tops_up(st, pg));
	for (uint32_t j = 0; j < n; j++)
		kv_slot_set_pos(pg, j, pos[j]);
	memcpy(kv_page_scores(pg), sc, n * sizeof *sc);
	kv_tier_pack(KV_FMT_Q4, pg->k, pg->v, CAP, HD, K, V, n);
	assert_int_equal(kv_stream_add_page(s, st, pg), TKV_OK);
	kv_stream_set_used(s, st, pg, n);
	for (uint32_t j = 0; j < n; j++)
		assert_int_equal(kv_slot_pos(pg, j), pos[j]);
	tu_kv_check_acct(pool, &s, 1);

	/* a copy has the same shape and, with the bytes copied, the same slots */
	cp = kv_pool_get_like(pool, pg, &why);
	assert_non_null(cp);
	assert_int_equal(cp->bytes, pg->bytes);
	assert_int_equal(cp->flags & KV_POS_FORMS, KV_PAGE_POSBM);
	assert_int_equal(cp->pos_base, 100);
	memcpy(cp->k, pg->k, pg->bytes - sizeof *pg);
	kv_pool_set_used(pool, cp, n);
	for (uint32_t j = 0; j < n; j++)
		assert_int_equal(kv_slot_pos(cp, j), pos[j]);
	/* a lower fill drops the bits of the slots past it */
	kv_pool_set_used(pool, cp, 7);
	for (uint32_t j = 0; j < 7; j++)
		assert_int_equal(kv_slot_pos(cp, j), pos[j]);
	{
		uint32_t bits = 0;

		for (uint32_t w = 0; w < kv_page_bm_words(cp); w++)
			bits += (uint32_t)__builtin_popcountll(kv_page_bm(cp)[w]);
		assert_int_equal(bits, 7);
	}
	kv_pool_put(pool, cp);

	/* removals, from the middle, the front and the end: the rest stay in
	 * order with their own rows and scores */
	memcpy(want, pos, sizeof want);
	for (uint32_t r = 0; r < 12; r++) {
		uint32_t j = r % 3 == 0 ? 0 : r % 3 == 1 ? n - 1 : (uint32_t)(tu_rng_u32() % n);

		kv_stream_remove_slot(s, st, 0, j);
		memmove(want + j, want + j + 1, (n - j - 1) * sizeof *want);
		n--;
		assert_int_equal(pg->n_used, n);
		for (uint32_t i = 0; i < n; i++) {
			assert_int_equal(kv_slot_pos(pg, i), want[i]);
			assert_true(kv_slot_score(pg, i) == kv_score_dec(kv_score_enc((float)want[i])));
			kv_page_load_k(pg, i, k);
			kv_page_load_v(pg, i, v);
			/* q4 keys per channel over 500 positions: steps of 33 */
			assert_true(fabsf(k[0] - (float)want[i]) <= 20.0f && fabsf(v[0] + (float)want[i]) <= 20.0f);
		}
		tu_kv_check_acct(pool, &s, 1);
	}
	kv_seq_free(s);
	kv_pool_free(pool);
}

static int demote_some(struct kv_seq *s, struct kv_stream *st, uint32_t n, uint32_t fmt, uint32_t cap, int rot);

/* Positions past 16 bits: a sequence that starts 12 positions short of
 * KV_POS16_LIMIT and grows past it. Its streams go wide when a reserve
 * crosses the limit; narrow pages keep their slots (all below the limit) and
 * take no new ones; every position comes back exact, after random evictions,
 * demotions to q8/q4 pages and compactions too, and attention masks by
 * them exactly. */
static void test_positions_past_16_bits(void **state)
{
	struct tkv_alloc a = {0};
	const uint32_t P = 4, HD = 8, T = 48;
	const int32_t p0 = KV_POS16_LIMIT - 12;
	struct kv_pool *pool = tu_kv_pool(0, P, KV_FMT_F16, &a);
	struct kv_seq *s = tu_kv_seq(pool, 1, 2, HD, &a);
	struct kv_stream *st = &s->streams[0];
	static unsigned char live[64];
	struct tkv_error err = {0};
	uint32_t n = 0;

	(void)state;
	tu_rng_seed(8);
	memset(live, 0, sizeof live);
	s->n_pos = p0;
	while (n < T) {
		uint32_t k = 1 + tu_rng_u32() % 5;

		k = k < T - n ? k : T - n;
		assert_int_equal(kv_seq_reserve(s, k, &err), TKV_OK);
		/* wide from the reserve whose positions pass the limit on */
		assert_true(st->wide == (p0 + (int32_t)(n + k) > KV_POS16_LIMIT));
		for (uint32_t t = 0; t < k; t++, n++) {
			append_token(s, 1, p0 + (int32_t)n);
			live[n] = 1;
		}
		s->n_pos = p0 + (int32_t)n;
		if (tu_rng_u32() % 2 && st->n_tokens > 4) { /* evict one slot of stream 0 */
			uint32_t p = tu_rng_u32() % st->n_pages, j;

			if (st->pages[p]->n_used) {
				j = tu_rng_u32() % st->pages[p]->n_used;
				live[kv_slot_pos(st->pages[p], j) - p0] = 0;
				remove_and_check(s, st, p, j);
			}
		}
		if (tu_rng_u32() % 2)
			assert_int_equal(demote_some(s, st, 1 + tu_rng_u32() % 6, LOW_FMTS[tu_rng_u32() % 2], 8, 0),
					 TKV_OK);
		if (tu_rng_u32() % 3 == 0)
			assert_int_equal(kv_stream_compact(s, st), TKV_OK);
		kv_stream_drop_empty(s, st);
		{
			struct kv_seq *seqs[1] = { s };

			check_acct(pool, seqs, 1, NULL, 0);
		}
	}
	assert_true(st->wide && s->streams[1].wide);
	/* stream 0: each live position once, exact; narrow pages below the limit */
	{
		static unsigned char seen[64];
		uint32_t n_wide = 0, n_narrow = 0;

		memset(seen, 0, sizeof seen);
		for (uint32_t p = 0; p < st->n_pages; p++) {
			const struct kv_page *pg = st->pages[p];

			n_wide += kv_page_wide(pg);
			n_narrow += !kv_page_wide(pg);
			for (uint32_t j = 0; j < pg->n_used; j++) {
				int32_t pos = kv_slot_pos(pg, j);

				assert_true(pos >= p0 && pos < p0 + (int32_t)T && !seen[pos - p0]);
				assert_true(kv_page_wide(pg) || pos < KV_POS16_LIMIT);
				seen[pos - p0] = 1;
			}
		}
		for (uint32_t t = 0; t < T; t++)
			if (seen[t] != live[t])
				fail_msg("position %d %s", p0 + (int32_t)t, seen[t] ? "cached but evicted" : "missing");
		assert_true(n_wide > 0);
	}
	/* stream 1 (no evictions): every slot after qpos gets no weight */
	{
		struct kv_stream *s1 = &s->streams[1];
		float q[8], out[8], logit[64], qrot[8], orot[8], att[64];
		int32_t qpos = KV_POS16_LIMIT + 3;
		uint32_t off = 0;
		struct kv_attn_args at = {
			.q = q, .nq = 1, .qpos = qpos, .scale = 1.0f / sqrtf((float)HD), .skip = 0.0f,
			.logit = logit, .qrot = qrot, .orot = orot, .att = att, .out = out,
		};

		assert_true(s1->n_tokens <= 64);
		for (uint32_t i = 0; i < HD; i++)
			q[i] = tu_rng_f(-0.1f, 0.1f);
		kv_attn(s1, HD, &at);
		for (uint32_t p = 0; p < s1->n_pages; p++)
			for (uint32_t j = 0; j < s1->pages[p]->n_used; j++, off++) {
				int32_t pos = kv_slot_pos(s1->pages[p], j);

				if (pos > qpos ? att[off] != 0.0f : !(att[off] > 0.0f))
					fail_msg("position %d (query at %d): weight %g", pos, qpos, (double)att[off]);
			}
	}
	kv_seq_free(s);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* ---- random accounting ---------------------------------------------------------- */

struct model_seq {
	struct kv_seq *s;
	uint32_t id;
	uint32_t n_layer, n_kv_head;
	uint32_t n_appended;                    /* positions 0..n_appended-1 were appended */
	unsigned char live[9][MAX_POS];         /* per stream: position still cached */
};

/* Each stream holds exactly the positions the model says, each once, and the
 * hot pages hold their appended data. */
static void check_model_seq(const struct model_seq *m)
{
	static unsigned char seen[MAX_POS];
	size_t n = (size_t)m->n_layer * m->n_kv_head;

	check_contents(m->s, m->id, UINT32_MAX);
	for (size_t i = 0; i < n; i++) {
		const struct kv_stream *st = &m->s->streams[i];
		uint32_t want = 0;

		memset(seen, 0, sizeof seen);
		for (uint32_t p = 0; p < st->n_pages; p++)
			for (uint32_t j = 0; j < st->pages[p]->n_used; j++)
				seen[kv_slot_pos(st->pages[p], j)] = 1;
		for (uint32_t t = 0; t < MAX_POS; t++) {
			if (seen[t] != m->live[i][t])
				fail_msg("seq %u stream %zu: position %u %s", m->id, i, t,
					 seen[t] ? "cached but evicted" : "missing");
			want += m->live[i][t];
		}
		assert_int_equal(st->n_tokens, want);
	}
}

static void check_model(struct kv_pool *pool, const struct model_seq *m, int contents)
{
	struct kv_seq *seqs[N_SLOTS];

	for (int i = 0; i < N_SLOTS; i++) {
		seqs[i] = m[i].s;
		if (m[i].s && contents)
			check_model_seq(&m[i]);
	}
	check_acct(pool, seqs, N_SLOTS, NULL, 0);
}

/* Moves up to n random slots of hot pages of a stream into a new page of a
 * low format (rotated or not), as the policies demote. Returns the pool's
 * answer (TKV_OK, or TKV_ERR_KV_FULL with nothing changed). */
static int demote_some(struct kv_seq *s, struct kv_stream *st, uint32_t n, uint32_t fmt, uint32_t cap, int rot)
{
	uint32_t d = s->head_dim, got = 0;
	static float K[64 * 64], V[64 * 64];
	int32_t pos[64];
	uint32_t page_of[64], slot_of[64];
	int why = 0;
	struct kv_page *pg;

	if (n > cap)
		n = cap;
	/* choose: random hot slots, each once */
	for (uint32_t tries = 0; tries < 4 * n && got < n; tries++) {
		uint32_t p, j;
		int dup = 0;

		if (st->n_pages == 0)
			break;
		p = tu_rng_u32() % st->n_pages;
		if (!is_hot(s, st->pages[p]) || st->pages[p]->n_used == 0)
			continue;
		j = tu_rng_u32() % st->pages[p]->n_used;
		for (uint32_t x = 0; x < got; x++)
			dup |= page_of[x] == p && slot_of[x] == j;
		if (dup)
			continue;
		page_of[got] = p;
		slot_of[got++] = j;
	}
	if (got == 0)
		return TKV_OK;
	for (uint32_t x = 0; x < got; x++) {
		const struct kv_page *src = st->pages[page_of[x]];

		kv_page_load_k(src, slot_of[x], K + (size_t)x * d);
		kv_page_load_v(src, slot_of[x], V + (size_t)x * d);
		pos[x] = kv_slot_pos(src, slot_of[x]);
	}
	pg = tu_kv_add_page(s, st, fmt, cap, rot, K, V, pos, got, &why);
	if (!pg) {
		assert_int_equal(why, TKV_ERR_KV_FULL);
		return why;
	}
	/* then remove the originals: page ascending, slot descending */
	for (uint32_t x = 1; x < got; x++)
		for (uint32_t y = x; y > 0 && (page_of[y - 1] > page_of[y] ||
					       (page_of[y - 1] == page_of[y] && slot_of[y - 1] < slot_of[y])); y--) {
			uint32_t tp = page_of[y], ts = slot_of[y];

			page_of[y] = page_of[y - 1];
			slot_of[y] = slot_of[y - 1];
			page_of[y - 1] = tp;
			slot_of[y - 1] = ts;
		}
	for (uint32_t x = 0; x < got; x++)
		remove_and_check(s, st, page_of[x], slot_of[x]);
	return TKV_OK;
}

/* Thousands of random steps over several sequences of different shapes:
 * init, reserve, append, demote hot slots to q8/q4/q2 pages (some rotated),
 * evict slots of any page, drop empty pages, clear, free. After every step
 * the pool's counters equal the sums over the pages, each stream's figures
 * equal its pages', and reserve succeeds exactly when the pages it needs fit
 * under the budget. */
static void run_random(uint32_t fmt, size_t budget_pages, uint64_t seed)
{
	struct tkv_alloc a = {0};
	const uint32_t P = 4, HD = 8;
	size_t pb = kv_page_bytes(P, HD, fmt);
	struct kv_pool *pool = tu_kv_pool(budget_pages * pb, P, fmt, &a);
	size_t live0 = atomic_load(&a.live);
	static struct model_seq m[N_SLOTS];
	uint32_t next_id = 1;
	int n_full = 0, n_ok = 0, n_demoted = 0, n_low_full = 0;

	tu_rng_seed(seed);
	memset(m, 0, sizeof m);
	for (int step = 0; step < N_STEPS; step++) {
		struct model_seq *q = &m[tu_rng_u32() % N_SLOTS];
		uint32_t op = tu_rng_u32() % 100;
		size_t n_streams = (size_t)q->n_layer * q->n_kv_head;

		if (!q->s) {
			memset(q, 0, sizeof *q);
			q->n_layer = 1 + tu_rng_u32() % 3;
			q->n_kv_head = 1 + tu_rng_u32() % 3;
			q->id = next_id++;
			q->s = tu_kv_seq(pool, q->n_layer, q->n_kv_head, HD, &a);
		} else if (op < 30) {
			/* unlimited: keep the walk bounded */
			uint32_t n_new = (budget_pages == 0 && q->n_appended > 64) || q->n_appended > MAX_POS - 64
						 ? 0 : tu_rng_u32() % (3 * P + 2);
			size_t need = 0, need_bytes;
			struct kv_pool_stats before, after;
			struct tkv_error err = {0};
			int expect, rc;

			/* pages of P for the bulk, one (smaller) page for the rest */
			for (size_t i = 0; i < n_streams; i++) {
				uint32_t free_ = q->s->streams[i].hot_free;

				need += n_new > free_ ? (n_new - free_ + P - 1) / P : 0;
			}
			need_bytes = kv_seq_reserve_bytes(q->s, n_new);
			assert_true(need_bytes <= need * pb);
			kv_pool_stats(pool, &before);
			expect = budget_pages == 0 || before.allocated + need_bytes <= before.budget ? TKV_OK
												     : TKV_ERR_KV_FULL;
			rc = kv_seq_reserve(q->s, n_new, &err);
			if (rc != expect)
				fail_msg("step %d: reserve %u (need %zu pages, %zu of %zu bytes used): %d, want %d: %s",
					 step, n_new, need, before.allocated, before.budget, rc, expect, err.msg);
			kv_pool_stats(pool, &after);
			if (rc == TKV_OK) {
				assert_int_equal(after.n_pages, before.n_pages + need);
				assert_int_equal(after.allocated, before.allocated + need_bytes);
				for (size_t i = 0; i < n_streams; i++)
					assert_true(q->s->streams[i].hot_free >= n_new);
				n_ok++;
			} else {
				assert_stats_same(&before, &after);
				n_full++;
			}
		} else if (op < 60) {
			uint32_t room = UINT32_MAX, n;

			for (size_t i = 0; i < n_streams; i++)
				if (q->s->streams[i].hot_free < room)
					room = q->s->streams[i].hot_free;
			n = room ? tu_rng_u32() % (room + 1) : 0;
			if (n > MAX_POS - q->n_appended)
				n = MAX_POS - q->n_appended;
			for (uint32_t t = 0; t < n; t++) {
				append_token(q->s, q->id, (int32_t)q->n_appended);
				for (size_t i = 0; i < n_streams; i++)
					q->live[i][q->n_appended] = 1;
				q->n_appended++;
			}
		} else if (op < 72) {
			size_t i = tu_rng_u32() % n_streams;
			uint32_t f = LOW_FMTS[tu_rng_u32() % 3], caps[] = { 4, 8, 16 };
			int rc = demote_some(q->s, &q->s->streams[i], 1 + tu_rng_u32() % 8, f, caps[tu_rng_u32() % 3],
					     (int)(tu_rng_u32() % 2));

			if (rc == TKV_OK)
				n_demoted++;
			else
				n_low_full++;
		} else if (op < 82) {
			size_t i = tu_rng_u32() % n_streams;
			struct kv_stream *st = &q->s->streams[i];
			uint32_t k = tu_rng_u32() % 4;

			for (uint32_t x = 0; x < k && st->n_tokens; x++) {
				uint32_t p = tu_rng_u32() % st->n_pages, j;

				if (st->pages[p]->n_used == 0)
					continue;
				j = tu_rng_u32() % st->pages[p]->n_used;
				q->live[i][kv_slot_pos(st->pages[p], j)] = 0;
				remove_and_check(q->s, st, p, j);
			}
		} else if (op < 88) {
			kv_stream_drop_empty(q->s, &q->s->streams[tu_rng_u32() % n_streams]);
		} else if (op < 95) {
			kv_seq_clear(q->s);
			memset(q->live, 0, sizeof q->live);
			q->n_appended = 0;
		} else {
			kv_seq_free(q->s);
			q->s = NULL;
		}
		check_model(pool, m, step % 53 == 0);
	}
	/* every outcome happened often enough for the run to mean something */
	assert_true(n_ok > N_STEPS / 20);
	assert_true(n_demoted > N_STEPS / 50);
	if (budget_pages)
		assert_true(n_full + n_low_full > N_STEPS / 100);
	for (int i = 0; i < N_SLOTS; i++) {
		if (m[i].s)
			check_model_seq(&m[i]);
		kv_seq_free(m[i].s);
		m[i].s = NULL;
	}
	check_model(pool, m, 0);
	assert_int_equal(atomic_load(&a.live), live0);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* The random runs: page format, budget in pages (0: none), seed. */
struct random_case {
	uint32_t fmt;
	size_t budget_pages;
	uint64_t seed;
};

static struct random_case RANDOM[] = {
	{ KV_FMT_F16, 40, 11 },
	{ KV_FMT_F32, 40, 12 },
	{ KV_FMT_F16, 9, 13 },  /* tight */
	{ KV_FMT_F16, 0, 14 },  /* unlimited */
};

static void test_random_accounting(void **state)
{
	const struct random_case *c = *state;

	run_random(c->fmt, c->budget_pages, c->seed);
}

#define RANDOM_TEST(name, k) { "test_random_accounting_" name, test_random_accounting, NULL, NULL, &RANDOM[k] }

/* ---- allocation faults ------------------------------------------------------------ */

/* One scenario (pool, sequence, reserves that grow the page arrays and take
 * several pages each, low-format pages added to streams) with the Nth
 * allocation failing, for every N until the scenario runs clean. Every failure
 * is TKV_ERR_NOMEM with nothing changed, and freeing everything leaves the
 * allocator at 0. With fail_count 1 the failed step is retried and must then
 * succeed. */
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
			tu_expect_nomem(rc, pool, &err, NULL);
			failed = 1;
			if (fail_count == 0)
				goto out;
			assert_int_equal(kv_pool_init(&pool, &pp, &a, &err), TKV_OK);
		}
		rc = kv_seq_init(&s, pool, L, H, HD, &a, &err);
		if (rc != TKV_OK) {
			tu_expect_nomem(rc, s, &err, NULL);
			failed = 1;
			if (fail_count == 0)
				goto out;
			assert_int_equal(kv_seq_init(&s, pool, L, H, HD, &a, &err), TKV_OK);
		}
		for (size_t r = 0; r < sizeof reserves / sizeof reserves[0]; r++) {
			struct kv_pool_stats before, after;
			static struct seq_shape shape;

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
			/* a q4 page for every stream, as a policy adds them: the page
			 * itself and the stream's page array can each fail */
			for (size_t i = 0; i < (size_t)L * H; i++) {
				struct kv_stream *st = &s->streams[i];
				int why = 0;
				struct kv_page *pg;

				kv_pool_stats(pool, &before);
				shape_of(s, &shape);
				pg = kv_pool_get(pool, HD, KV_FMT_Q4, 64, &why);
				if (!pg) {
					assert_int_equal(why, TKV_ERR_NOMEM);
					kv_pool_stats(pool, &after);
					assert_state_same(&before, &after);
					failed = 1;
					if (fail_count == 0)
						goto out;
					pg = kv_pool_get(pool, HD, KV_FMT_Q4, 64, &why);
					assert_non_null(pg);
				}
				if (kv_stream_add_page(s, st, pg) != TKV_OK) {
					/* not taken: the stream is as it was */
					assert_shape_same(s, &shape);
					failed = 1;
					if (fail_count == 0) {
						kv_pool_put(pool, pg);
						goto out;
					}
					assert_int_equal(kv_stream_add_page(s, st, pg), TKV_OK);
				}
				kv_stream_set_used(s, st, pg, 0);
			}
			check_acct1(pool, s);
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
	assert_true(n_failures > 40);
}

/* The fault sweeps: persistent or one-shot failures (fail_count), without or
 * with a budget (in pages). */
struct sweep_case {
	unsigned long long fail_count;
	size_t budget_pages;
};

static struct sweep_case SWEEPS[] = { { 0, 0 }, { 0, 1000 }, { 1, 0 } };

static void test_fault_sweep(void **state)
{
	const struct sweep_case *c = *state;

	run_fault_sweep(c->fail_count, c->budget_pages);
}

#define SWEEP_TEST(name, k) { name, test_fault_sweep, NULL, NULL, &SWEEPS[k] }

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_params),
		cmocka_unit_test(test_page_bytes),
		cmocka_unit_test(test_page_layout),
		cmocka_unit_test(test_page_store_rounding),
		cmocka_unit_test(test_pool_get_put_budget),
		cmocka_unit_test(test_pool_used_rounding),
		cmocka_unit_test(test_share_exact),
		cmocka_unit_test(test_pages_on_demand),
		cmocka_unit_test(test_centroid),
		cmocka_unit_test(test_free_returns_everything),
		cmocka_unit_test(test_reserve_all_or_nothing),
		cmocka_unit_test(test_reserve_nomem_midway),
		cmocka_unit_test(test_stream_bookkeeping),
		cmocka_unit_test(test_hot_q8_skips_rotated),
		cmocka_unit_test(test_stream_compact),
		cmocka_unit_test(test_stream_compact_nomem),
		cmocka_unit_test(test_score_codes),
		cmocka_unit_test(test_pos_forms),
		cmocka_unit_test(test_pos_bitmap),
		cmocka_unit_test(test_positions_past_16_bits),
		RANDOM_TEST("f16", 0),
		RANDOM_TEST("f32", 1),
		RANDOM_TEST("tight", 2),
		RANDOM_TEST("unlimited", 3),
		SWEEP_TEST("test_fault_sweep", 0),
		SWEEP_TEST("test_fault_sweep_budget", 1),
		SWEEP_TEST("test_fault_sweep_transient", 2),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
