/* test_kv_share.c - cross-layer sharing (kv_seq_append_shared, KV_FMT_REF).
 *
 * Layer 1 of a two-layer cache takes tokens whose key and value are nearly
 * parallel to layer 0's as shared slots; attention over layer 1 must equal
 * attention over the keys and values the shared slots stand for (alpha times
 * layer 0's, as stored), a shared slot whose source was evicted must get no
 * weight, shared slots must survive the policy's evictions and compaction
 * with their scales, and through the engine on the real model every shared
 * slot must save exactly one f16 row pair less its two scales. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/policy.h"
#include "kv/pool.h"
#include "kv/seq.h"
#include "kv/share.h"
#include "kv/tier.h"
#include "tierkv.h"

#define D 8
#define NQ 2
#define N 90

static struct kv_pool *make_pool(size_t budget, struct tkv_alloc *a)
{
	struct kv_pool_params p = kv_pool_default_params();
	struct kv_pool *pool = NULL;
	struct tkv_error err = { 0 };

	p.budget = budget;
	if (kv_pool_init(&pool, &p, a, &err) != TKV_OK)
		fail_msg("kv_pool_init: %s", err.msg);
	return pool;
}

static struct kv_seq *make_seq(struct kv_pool *pool, struct tkv_alloc *a, float cos)
{
	struct kv_seq *s = NULL;
	struct tkv_error err = { 0 };

	if (kv_seq_init(&s, pool, 2, 1, D, a, &err) != TKV_OK)
		fail_msg("kv_seq_init: %s", err.msg);
	s->share_cos = cos;
	s->share_from = 1;
	return s;
}

static void rand_row(float *x)
{
	for (int i = 0; i < D; i++)
		x[i] = tu_rng_f(-2.0f, 2.0f);
}

/* Appends N tokens: layer 0 random; layer 1 parallel to it (key x1.7, value
 * x0.8, small noise) at even positions, random at odd ones. Checks which
 * were shared. */
static void fill(struct kv_seq *s)
{
	for (int32_t pos = 0; pos < N; pos++) {
		float k0[D], v0[D], k1[D], v1[D];
		struct tkv_error err = { 0 };
		bool shared;

		assert_int_equal(kv_seq_reserve(s, 1, &err), TKV_OK);
		rand_row(k0);
		rand_row(v0);
		for (int i = 0; i < D; i++) {
			k1[i] = pos % 2 ? tu_rng_f(-2, 2) : 1.7f * k0[i] + tu_rng_f(-0.01f, 0.01f);
			v1[i] = pos % 2 ? tu_rng_f(-2, 2) : 0.8f * v0[i] + tu_rng_f(-0.01f, 0.01f);
		}
		assert_false(kv_seq_append_shared(s, 0, 0, pos, k0, v0, NULL, NULL));
		shared = kv_seq_append_shared(s, 1, 0, pos, k1, v1, k0, v0);
		/* random rows in 8 dimensions: both cosines >= 0.9 is rare; allow it */
		if (pos % 2 == 0)
			assert_true(shared);
		s->n_pos = pos + 1;
	}
}

/* The key or value slot j of page pg in layer 1 stands for: alpha times
 * layer 0's row of the same position, or its own row; false when the source
 * is gone. */
static bool effective(const struct kv_seq *s, const struct kv_page *pg, uint32_t j, int value, float *out)
{
	const struct kv_stream *below = &s->streams[0];
	float a[D];

	if (pg->fmt != KV_FMT_REF) {
		if (value)
			kv_page_load_v(pg, j, out);
		else
			kv_page_load_k(pg, j, out);
		return true;
	}
	if (value)
		kv_page_load_v(pg, j, a);
	else
		kv_page_load_k(pg, j, a);
	for (uint32_t p = 0; p < below->n_pages; p++)
		for (uint32_t i = 0; i < below->pages[p]->n_used; i++)
			if (kv_slot_pos(below->pages[p], i) == kv_slot_pos(pg, j)) {
				if (value)
					kv_page_load_v(below->pages[p], i, out);
				else
					kv_page_load_k(below->pages[p], i, out);
				for (int c = 0; c < D; c++)
					out[c] *= a[0];
				return true;
			}
	return false;
}

/* kv_attn over layer 1 against a direct softmax over the effective rows. */
static void check_attention(struct kv_seq *s, int32_t gone_pos)
{
	struct kv_stream *st = &s->streams[1];
	uint32_t n = st->n_tokens, *map = malloc((size_t)s->n_pos * sizeof *map);
	float q[NQ * D], out[NQ * D], *logit = malloc((size_t)NQ * n * sizeof(float)), *att = malloc(n * sizeof(float));
	float qrot[NQ * D], orot[NQ * D];
	struct kv_attn_args a = { 0 };
	bool saw_gone = false;

	assert_non_null(map);
	assert_non_null(logit);
	assert_non_null(att);
	for (int i = 0; i < NQ * D; i++)
		q[i] = tu_rng_f(-1, 1);
	kv_stream_pos_map(&s->streams[0], map, s->n_pos);
	a.q = q;
	a.nq = NQ;
	a.qpos = s->n_pos - 1;
	a.scale = 1.0f / sqrtf((float)D);
	a.logit = logit;
	a.qrot = qrot;
	a.orot = orot;
	a.att = att;
	a.out = out;
	a.below = &s->streams[0];
	a.below_map = map;
	a.n_pos = s->n_pos;
	kv_attn(st, D, &a);

	for (uint32_t h = 0; h < NQ; h++) {
		double w[N * 2], max = -INFINITY, sum = 0, ref[D] = { 0 };
		uint32_t off = 0;

		for (uint32_t p = 0; p < st->n_pages; p++)
			for (uint32_t j = 0; j < st->pages[p]->n_used; j++, off++) {
				float k[D];
				double l = 0;

				if (!effective(s, st->pages[p], j, 0, k)) {
					assert_int_equal(kv_slot_pos(st->pages[p], j), gone_pos);
					w[off] = -INFINITY;
					saw_gone = true;
					continue;
				}
				for (int c = 0; c < D; c++)
					l += (double)q[h * D + c] * k[c];
				w[off] = l / sqrt((double)D);
				if (w[off] > max)
					max = w[off];
			}
		off = 0;
		for (uint32_t p = 0; p < st->n_pages; p++)
			for (uint32_t j = 0; j < st->pages[p]->n_used; j++, off++) {
				float v[D];

				w[off] = isinf(w[off]) ? 0.0 : exp(w[off] - max);
				sum += w[off];
				if (w[off] > 0 && effective(s, st->pages[p], j, 1, v))
					for (int c = 0; c < D; c++)
						ref[c] += w[off] * v[c];
			}
		for (int c = 0; c < D; c++)
			assert_float_equal(out[h * D + c], ref[c] / sum, 1e-4 * (1 + fabs(ref[c] / sum)));
	}
	/* the weights handed to the policy: the gone slot got none */
	{
		double tot = 0;
		uint32_t off = 0;

		for (uint32_t p = 0; p < st->n_pages; p++)
			for (uint32_t j = 0; j < st->pages[p]->n_used; j++, off++) {
				tot += att[off];
				if (kv_slot_pos(st->pages[p], j) == gone_pos)
					assert_true(att[off] == 0.0f);
			}
		assert_float_equal(tot, NQ, 1e-4);
	}
	assert_int_equal(saw_gone, gone_pos >= 0);
	free(att);
	free(logit);
	free(map);
}

static size_t ref_slots(const struct kv_stream *st)
{
	size_t n = 0;

	for (uint32_t p = 0; p < st->n_pages; p++)
		if (st->pages[p]->fmt == KV_FMT_REF)
			n += st->pages[p]->n_used;
	return n;
}

static void test_ref_format(void **state)
{
	uint16_t kreg[16], vreg[16];
	float k[D] = { 1.5f, 9, 9, 9, 9, 9, 9, 9 }, v[D] = { -0.25f, 7, 7, 7, 7, 7, 7, 7 }, x[D], lo[D], hi[D];

	(void)state;
	assert_int_equal(kv_tier_k_bytes(KV_FMT_REF, 16, D), 32);
	assert_int_equal(kv_tier_v_bytes(KV_FMT_REF, 16, D), 32);
	assert_string_equal(kv_fmt_name(KV_FMT_REF), "ref");
	assert_false(kv_fmt_packed(KV_FMT_REF));
	assert_false(kv_fmt_ok(KV_FMT_REF, D)); /* never a tier */
	memset(kreg, 0xff, sizeof kreg);
	kv_tier_store(KV_FMT_REF, kreg, vreg, 16, D, 3, k, v);
	kv_tier_load_k(KV_FMT_REF, kreg, 16, D, 3, x);
	assert_true(x[0] == 1.5f);
	for (int i = 1; i < D; i++)
		assert_true(x[i] == 0.0f);
	kv_tier_move(KV_FMT_REF, kreg, vreg, 16, D, 0, 3);
	kv_tier_load_v(KV_FMT_REF, vreg, 16, D, 0, x);
	assert_true(x[0] == -0.25f);
	kv_tier_key_bounds(KV_FMT_REF, kreg, 16, D, 1, lo, hi);
	assert_true(isinf(lo[0]) && lo[0] < 0 && isinf(hi[0]) && hi[0] > 0);
}

/* A pool without a budget and one sequence of it (sharing at cosine 0.9),
 * counted by their own allocator. */
struct share_fx {
	struct tkv_alloc al;
	struct kv_pool *pool;
	struct kv_seq *s;
};

static struct kv_seq *fx_open(struct share_fx *f)
{
	memset(f, 0, sizeof *f);
	f->pool = make_pool(0, &f->al);
	f->s = make_seq(f->pool, &f->al, 0.9f);
	return f->s;
}

static void fx_close(struct share_fx *f)
{
	kv_seq_free(f->s);
	kv_pool_free(f->pool);
	assert_int_equal(f->al.live, 0);
}

static void test_append_rules(void **state)
{
	struct share_fx f;
	struct kv_seq *s = fx_open(&f);
	struct tkv_error err = { 0 };
	float k[D], v[D], kneg[D], kort[D] = { 0 };

	(void)state;
	tu_rng_seed(7);
	rand_row(k);
	rand_row(v);
	for (int i = 0; i < D; i++)
		kneg[i] = -k[i];
	kort[0] = -k[1];
	kort[1] = k[0];
	assert_int_equal(kv_seq_reserve(s, 6, &err), TKV_OK);
	assert_false(kv_seq_append_shared(s, 0, 0, 0, k, v, k, v));        /* layer 0 has none below */
	assert_false(kv_seq_append_shared(s, 1, 0, 0, k, v, NULL, NULL));  /* source not stored in full */
	assert_false(kv_seq_append_shared(s, 1, 0, 1, kneg, v, k, v));     /* cosine -1 */
	assert_false(kv_seq_append_shared(s, 1, 0, 2, kort, v, k, v));     /* cosine 0 */
	assert_true(kv_seq_append_shared(s, 1, 0, 3, k, v, k, v));         /* cosine 1 */
	s->share_from = 2;
	assert_false(kv_seq_append_shared(s, 1, 0, 4, k, v, k, v));        /* below share_from */
	s->share_from = 1;
	s->share_cos = 0.0f;
	assert_false(kv_seq_append_shared(s, 1, 0, 5, k, v, k, v));        /* off */
	assert_int_equal(ref_slots(&s->streams[1]), 1);
	assert_int_equal(s->streams[1].n_tokens, 6);
	fx_close(&f);
}

static void test_attention_and_orphans(void **state)
{
	struct share_fx f;
	struct kv_seq *s = fx_open(&f);
	struct kv_stream *st0 = &s->streams[0], *st1 = &s->streams[1];
	size_t n_ref;

	(void)state;
	tu_rng_seed(11);
	fill(s);
	n_ref = ref_slots(st1);
	assert_true(n_ref >= N / 2);
	/* a shared slot costs its two f16 scales instead of two f16 rows */
	assert_int_equal(st1->kv_bytes, st0->kv_bytes - n_ref * (4 * D - 4));
	check_attention(s, -1);
	/* evict position 10 (shared in layer 1) from layer 0: it is masked */
	for (uint32_t p = 0; p < st0->n_pages; p++)
		for (uint32_t j = 0; j < st0->pages[p]->n_used; j++)
			if (kv_slot_pos(st0->pages[p], j) == 10) {
				kv_stream_remove_slot(s, st0, p, j);
				break;
			}
	check_attention(s, 10);
	fx_close(&f);
}

/* The tiered policy under a budget evicts and demotes around shared slots:
 * they are never moved to another format, keep their scales, and the
 * stream's byte count stays exact. */
static void test_policy_keeps_scales(void **state)
{
	struct share_fx f;
	struct kv_seq *s = fx_open(&f);
	struct kv_stream *st1 = &s->streams[1];
	struct tkv_kv_policy_params pp = tkv_kv_policy_default_params();
	struct kv_cfg c;
	struct tkv_error err = { 0 };
	float alpha[N], x[D];
	size_t bytes = 0;

	(void)state;
	tu_rng_seed(13);
	fill(s);
	for (uint32_t p = 0; p < st1->n_pages; p++)
		for (uint32_t j = 0; j < st1->pages[p]->n_used; j++)
			if (st1->pages[p]->fmt == KV_FMT_REF) {
				kv_page_load_k(st1->pages[p], j, x);
				alpha[kv_slot_pos(st1->pages[p], j)] = x[0];
				kv_slot_set_score(st1->pages[p], j, tu_rng_f(0, 1));
			}
	pp.n_window = 8;
	assert_int_equal(kv_cfg_init(&c, &pp, D, NQ, KV_FMT_F16, 16, &err), TKV_OK);
	st1->budget = st1->kv_bytes / 3;
	assert_int_equal(kv_policy_maintain(&c, s, st1), TKV_OK);
	assert_true(st1->kv_bytes <= st1->budget);
	assert_true(st1->evicted > 0);
	for (uint32_t p = 0; p < st1->n_pages; p++) {
		bytes += kv_page_share(st1->pages[p], st1->pages[p]->n_used);
		for (uint32_t j = 0; j < st1->pages[p]->n_used; j++)
			if (st1->pages[p]->fmt == KV_FMT_REF) {
				kv_page_load_k(st1->pages[p], j, x);
				assert_true(x[0] == alpha[kv_slot_pos(st1->pages[p], j)]);
			}
	}
	assert_int_equal(bytes, st1->kv_bytes);
	assert_true(ref_slots(st1) > 0);
	check_attention(s, -1);
	fx_close(&f);
}

/* Through the engine on stories260K: sharing at a loose cosine stores some
 * slots shared, each saving one f16 key and value row less 4 bytes, and the
 * logits stay finite. */
static void test_engine_bytes(void **state)
{
	const char *path = tu_model_path("stories260K.gguf");
	static const char text[] = "Once upon a time, there was a little girl named Lily. She loved to play outside "
				   "with her dog. One day, they went to the park and saw a big tree.";
	struct tkv_model *m = NULL;
	struct tkv_error err = { 0 };
	struct tkv_kv_stats ks[2];
	struct tkv_model_info info;
	int32_t ids[256];
	size_t n = 0;
	float *logits[2];

	(void)state;
	assert_non_null(path);
	assert_int_equal(tkv_model_load(&m, path, NULL, &err), TKV_OK);
	tkv_model_get_info(m, &info);
	assert_int_equal(tkv_tokenize(m, text, strlen(text), 1, 0, ids, 256, &n), TKV_OK);
	for (int run = 0; run < 2; run++) {
		struct tkv_engine_params ep = tkv_engine_default_params();
		struct tkv_engine *e = NULL;
		struct tkv_seq *sq = NULL;

		ep.kv.policy = TKV_POLICY_FULL;
		ep.kv.share_cos = run ? 0.5f : 0.0f;
		ep.kv.share_from = 1;
		ep.n_threads = 1;
		assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_OK);
		assert_int_equal(tkv_seq_init(&sq, e, &err), TKV_OK);
		logits[run] = malloc(n * info.n_vocab * sizeof(float));
		assert_non_null(logits[run]);
		assert_int_equal(tkv_seq_decode(sq, ids, n, logits[run], 1, &err), TKV_OK);
		tkv_seq_kv_stats(sq, &ks[run]);
		tkv_seq_free(sq);
		tkv_engine_free(e);
	}
	assert_int_equal(ks[0].shared_tokens, 0);
	assert_true(ks[1].shared_tokens > 0);
	assert_int_equal(ks[1].shared_bytes, 4 * ks[1].shared_tokens);
	assert_int_equal(ks[1].kv_bytes, ks[0].kv_bytes - ks[1].shared_tokens * (4 * (size_t)info.head_dim - 4));
	assert_int_equal(ks[1].n_tokens, ks[0].n_tokens);
	for (size_t i = 0; i < n * info.n_vocab; i++)
		assert_true(isfinite(logits[1][i]));
	free(logits[0]);
	free(logits[1]);
	tkv_model_free(m);
	{
		/* a first layer past the model is refused */
		struct tkv_engine_params ep = tkv_engine_default_params();
		struct tkv_engine *e = NULL;

		assert_int_equal(tkv_model_load(&m, path, NULL, &err), TKV_OK);
		ep.kv.share_cos = 0.9f;
		ep.kv.share_from = info.n_layer;
		assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_ERR_ARG);
		assert_null(e);
		ep.kv.share_from = 0;
		ep.kv.share_cos = 1.5f;
		assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_ERR_ARG);
		tkv_model_free(m);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ref_format),
		cmocka_unit_test(test_append_rules),
		cmocka_unit_test(test_attention_and_orphans),
		cmocka_unit_test(test_policy_keeps_scales),
		cmocka_unit_test(test_engine_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
