/* test_kv_attn.c - attention over a stream's pages (kv/attn.c): a group of
 * query heads with position masking against a double-precision reference
 * (f32, f16, q8, q4, q2, shared-slot and rotated pages, in any order), large
 * scores, the softmax kernel against expf, and q4 pages on their integer
 * codes (SIMD kernels against the references, errors against the 4-bit
 * codes' own). The kernels are the level TIERKV_KERNELS selects; under ref
 * the SIMD comparisons check the references alone. */
#include "testutil.h"
#include "testutil_kv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/attn_impl.h"
#include "kv/pool.h"
#include "kv/seq.h"
#include "kv/tier.h"
#include "kv/tier_impl.h"
#include "ops/ops.h"
#include "util/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

/* Attention on data with |q| <= 1 and |k|, |v| <= M (M = 1 for f32/f16 pages;
 * quantized and rotated pages dequantize a little past the data's range, so
 * the checks take M from the dequantized keys and values), head_dim d <= 64,
 * scale 1/sqrt(d): a float score q·k carries at most d * u * sum|q_i k_i| of
 * rounding (u = 2^-24), 64 * 6e-8 * 64 M / 8 = 3e-5 M after scaling. Rotated
 * pages score R q against R k: log2(d) + 2 roundings of each vector's norm,
 * 8 * 2 * 6e-8 * |q| |k| <= 1e-6 * 64 M / 8, far inside the same bound. A
 * weight moves by at most about twice the score error relatively, and weights
 * are <= 1. */
#define TOL_ATT_W 6e-5
/* out = sum w_i v_i: the weight errors above (summing to at most 6e-5 M, times
 * |v| <= M) plus one rounding per slot of accumulation (and, for rotated
 * pages, the un-rotation of the sum: log2(d) + 2 roundings of |out| <= M). */
#define TOL_ATT_OUT 1e-4
/* The weights are divided by their float sum: they sum to 1 within a few ulps
 * per slot; 1e-5 is generous for <= 40 slots and tight enough to catch a
 * missing or doubled slot (whose weight is >= 1/40 * e^-2 here). */
#define TOL_ATT_SUM 1e-5
/* Entropy -sum w log w (nats): a score error e moves each weight by about
 * 2 e w, so the entropy by 2 e sum w |log w + 1| <= 2 e (H + 1), with
 * H <= log 40: 2 * 3e-5 M * 4.7 = 3e-4 M per head. */
#define TOL_ATT_ENT 1e-3

/* ---- attention ------------------------------------------------------------------- */

#define AT_MAX_T 40
#define AT_MAX_Q 4

struct page_spec {
	uint32_t fmt, cap, n;
	int rot;
};

/* The sliding window and soft-cap check_attn runs with (0: none). */
static uint32_t at_window;
static float at_softcap;

/* Whether a slot at pos is seen from qpos: causal and inside the window. */
static int at_visible(int32_t pos, int32_t qpos)
{
	return pos <= qpos && (at_window == 0 || (int64_t)qpos - pos < (int64_t)at_window);
}

/* kv_attn for nq query heads over one stream built from `spec` (pages in that
 * order, positions a random permutation of 0..T-1 spread over them), for every
 * query position qpos (slots with pos > qpos masked), against a double-
 * precision softmax and weighted sum over the keys and values the pages hold
 * (decoded in model space). A second stream of the sequence is filled with
 * large values: it must not leak into the first. q4 pages go through the
 * exact path here (dequantized rows); their integer kernels have their own
 * test (test_attn_q_kernels). */
static void check_attn(const struct page_spec *spec, size_t n_spec, uint32_t hd, uint32_t nq, uint64_t seed)
{
	int was_exact = kv_attn_exact_packed(1);

	struct kv_pool *pool = tu_kv_pool(0, 16, KV_FMT_F16, NULL);
	struct kv_seq *s = tu_kv_seq(pool, 1, 2, hd, NULL);
	struct kv_stream *st = kv_seq_stream(s, 0, 0), *other = kv_seq_stream(s, 0, 1);
	static float K[AT_MAX_T * 64], V[AT_MAX_T * 64], Kd[AT_MAX_T * 64], Vd[AT_MAX_T * 64];
	static float logit[AT_MAX_Q * AT_MAX_T], att[AT_MAX_T + 4];
	float q[AT_MAX_Q * 64], out[AT_MAX_Q * 64], qrot[AT_MAX_Q * 64], orot[AT_MAX_Q * 64];
	int32_t pos[AT_MAX_T], spos[AT_MAX_T];
	uint32_t T = 0, off = 0;
	double M = 1.0;
	int why;

	assert_true(hd <= 64 && nq <= AT_MAX_Q);
	tu_rng_seed(seed);
	for (size_t i = 0; i < n_spec; i++)
		T += spec[i].n;
	assert_true(T <= AT_MAX_T);
	for (uint32_t t = 0; t < T; t++)
		pos[t] = (int32_t)t;
	for (uint32_t t = T; t > 1; t--) {
		uint32_t r = tu_rng_u32() % t;
		int32_t x = pos[t - 1];

		pos[t - 1] = pos[r];
		pos[r] = x;
	}
	for (uint32_t i = 0; i < T * hd; i++) {
		K[i] = tu_rng_f(-1.0f, 1.0f);
		V[i] = tu_rng_f(-1.0f, 1.0f);
	}
	for (size_t i = 0; i < n_spec; i++) {
		struct kv_page *pg = tu_kv_add_page(s, st, spec[i].fmt, spec[i].cap, spec[i].rot, K + (size_t)off * hd,
						    V + (size_t)off * hd, pos + off, spec[i].n, &why);
		float big[64 * 64];

		assert_non_null(pg);
		/* the other stream: the same page shapes, values of 100 */
		for (uint32_t x = 0; x < spec[i].n * hd; x++)
			big[x] = 100.0f;
		assert_non_null(tu_kv_add_page(s, other, spec[i].fmt, spec[i].cap, spec[i].rot, big, big, pos + off,
					       spec[i].n, &why));
		off += spec[i].n;
	}
	assert_int_equal(st->n_tokens, T);
	/* what the pages hold, in page order */
	off = 0;
	for (uint32_t p = 0; p < st->n_pages; p++) {
		const struct kv_page *pg = st->pages[p];

		for (uint32_t j = 0; j < pg->n_used; j++, off++) {
			kv_page_load_k(pg, j, Kd + (size_t)off * hd);
			kv_page_load_v(pg, j, Vd + (size_t)off * hd);
			spos[off] = kv_slot_pos(pg, j);
		}
	}
	for (uint32_t i = 0; i < T * hd; i++)
		M = fmax(M, fmax(fabs(Kd[i]), fabs(Vd[i])));
	for (uint32_t i = 0; i < nq * hd; i++)
		q[i] = tu_rng_f(-1.0f, 1.0f);

	for (int32_t qpos = -1; qpos < (int32_t)T; qpos++) {
		struct kv_attn_args a = {
			.q = q, .nq = nq, .qpos = qpos, .scale = 1.0f / sqrtf((float)hd), .skip = 0.0f,
			.window = at_window, .softcap = at_softcap,
			.logit = logit, .qrot = qrot, .orot = orot, .att = att, .out = out,
		};
		double w[AT_MAX_Q][AT_MAX_T], ent_want = 0.0, ent = 0.0;
		uint32_t n_vis = 0;
		uint64_t read0 = st->pages_read, skipped0 = st->pages_skipped;

		a.entropy = &ent;
		for (uint32_t t = 0; t < T + 4; t++)
			att[t] = -7.0f;
		kv_attn(st, hd, &a);
		assert_int_equal(st->pages_skipped, skipped0); /* skip 0: never */
		for (uint32_t t = 0; t < T; t++)
			n_vis += at_visible(spos[t], qpos);
		for (uint32_t h = 0; h < nq; h++) {
			double mx = -INFINITY, sum = 0.0, got_sum = 0.0;

			for (uint32_t t = 0; t < T; t++) {
				double sc = 0.0;

				if (!at_visible(spos[t], qpos)) {
					w[h][t] = -INFINITY;
					continue;
				}
				for (uint32_t i = 0; i < hd; i++)
					sc += (double)q[h * hd + i] * Kd[(size_t)t * hd + i];
				w[h][t] = sc * a.scale;
				if (at_softcap > 0.0f)
					w[h][t] = at_softcap * tanh(w[h][t] / at_softcap);
				mx = fmax(mx, w[h][t]);
			}
			for (uint32_t t = 0; t < T; t++)
				sum += (w[h][t] = !at_visible(spos[t], qpos) ? 0.0 : exp(w[h][t] - mx));
			for (uint32_t t = 0; t < T; t++) {
				if (sum > 0)
					w[h][t] /= sum;
				if (w[h][t] > 0)
					ent_want -= w[h][t] * log(w[h][t]);
				got_sum += w[h][t];
			}
			if (n_vis)
				assert_true(fabs(got_sum - 1.0) < 1e-12);
			for (uint32_t i = 0; i < hd; i++) {
				double o = 0.0;

				for (uint32_t t = 0; t < T; t++)
					o += w[h][t] * Vd[(size_t)t * hd + i];
				if (!(fabs(out[h * hd + i] - o) <= TOL_ATT_OUT * M * M))
					fail_msg("d %u nq %u qpos %d head %u: out[%u] = %.9g, want %.9g", hd, nq, qpos, h,
						 i, (double)out[h * hd + i], o);
			}
		}
		/* att: the weight each slot got, summed over heads; 0 when masked */
		{
			double got_sum = 0.0;

			for (uint32_t t = 0; t < T; t++) {
				double want = 0.0;

				for (uint32_t h = 0; h < nq; h++)
					want += w[h][t];
				if (!at_visible(spos[t], qpos))
					assert_true(att[t] == 0.0f);
				if (!(fabs(att[t] - want) <= nq * TOL_ATT_W * M))
					fail_msg("d %u nq %u qpos %d: att[%u] (pos %d) = %.9g, want %.9g", hd, nq, qpos, t,
						 spos[t], (double)att[t], want);
				got_sum += att[t];
			}
			if (fabs(got_sum - (n_vis ? nq : 0)) > nq * TOL_ATT_SUM)
				fail_msg("d %u nq %u qpos %d: weights sum to %.9g", hd, nq, qpos, got_sum);
			for (uint32_t t = T; t < T + 4; t++)
				assert_true(att[t] == -7.0f); /* past the stream's slots: untouched */
		}
		if (!(fabs(ent - ent_want) <= nq * TOL_ATT_ENT * M))
			fail_msg("d %u nq %u qpos %d: entropy %.9g, want %.9g", hd, nq, qpos, ent, ent_want);
		if (n_vis == 0) {
			/* nothing visible: zeros, not NaN */
			for (uint32_t i = 0; i < nq * hd; i++)
				assert_true(out[i] == 0.0f);
		} else {
			assert_true(st->pages_read > read0);
		}
		assert_true(st->pages_read - read0 <= st->n_pages);
		if (n_vis == 1 && n_spec == 1 && spec[0].fmt == KV_FMT_F32) {
			/* one slot: weight exactly 1 per head, out is its value */
			for (uint32_t t = 0; t < T; t++)
				if (at_visible(spos[t], qpos)) {
					assert_true(att[t] == (float)nq);
					for (uint32_t h = 0; h < nq; h++)
						assert_memory_equal(out + h * hd, Vd + (size_t)t * hd, hd * sizeof(float));
				}
		}
		/* with a skip margin and no page skipped, nothing changes, bit for bit */
		{
			float out2[AT_MAX_Q * 64];
			static float att2[AT_MAX_T];
			double ent2 = 0.0;

			a.skip = 16.0f;
			a.out = out2;
			a.att = att2;
			a.entropy = &ent2;
			kv_attn(st, hd, &a);
			if (st->pages_skipped == skipped0) {
				assert_memory_equal(out2, out, nq * hd * sizeof(float));
				assert_memory_equal(att2, att, T * sizeof(float));
				assert_true(ent2 == ent);
			}
		}
		/* q4 pages on their integer kernels (where the CPU has them): the
		 * same masking and page order, values within the kernels' small
		 * error (test_attn_q_kernels bounds it), weights still summing to 1 */
		if (kv_attn_score_q_kernel(KV_FMT_Q4, hd)) {
			float out3[AT_MAX_Q * 64];
			static float att3[AT_MAX_T];
			double sum3 = 0.0;

			a.skip = 0.0f;
			a.out = out3;
			a.att = att3;
			a.entropy = NULL;
			kv_attn_exact_packed(0);
			kv_attn(st, hd, &a);
			kv_attn_exact_packed(1);
			for (uint32_t i = 0; i < nq * hd; i++)
				if (!(fabs(out3[i] - out[i]) <= 0.02 * M))
					fail_msg("d %u qpos %d: integer kernels give out[%u] = %.9g, exact %.9g", hd, qpos, i,
						 (double)out3[i], (double)out[i]);
			for (uint32_t t = 0; t < T; t++) {
				if (!at_visible(spos[t], qpos))
					assert_true(att3[t] == 0.0f);
				sum3 += att3[t];
			}
			assert_true(fabs(sum3 - (n_vis ? nq : 0)) <= nq * TOL_ATT_SUM);
		}
	}
	kv_seq_free(s);
	kv_pool_free(pool);
	kv_attn_exact_packed(was_exact);
}

static void test_attn_f32(void **state)
{
	static const struct page_spec one[] = { { KV_FMT_F32, 16, 11, 0 } };
	static const struct page_spec several[] = {
		{ KV_FMT_F32, 4, 4, 0 }, { KV_FMT_F32, 4, 4, 0 }, { KV_FMT_F32, 4, 3, 0 } };

	(void)state;
	for (uint32_t nq = 1; nq <= 4; nq *= 2) {
		check_attn(one, 1, 16, nq, 21);
		check_attn(several, 3, 16, nq, 22);
		check_attn(several, 3, 64, nq, 23);
	}
}

static void test_attn_f16(void **state)
{
	static const struct page_spec several[] = {
		{ KV_FMT_F16, 4, 4, 0 }, { KV_FMT_F16, 4, 2, 0 }, { KV_FMT_F16, 4, 4, 0 }, { KV_FMT_F16, 16, 1, 0 } };

	(void)state;
	for (uint32_t nq = 1; nq <= 4; nq *= 2) {
		check_attn(several, 4, 16, nq, 24);
		check_attn(several, 4, 64, nq, 25);
	}
}

/* Pages of every format in one stream, in any order, some rotated. */
static void test_attn_mixed(void **state)
{
	static const struct page_spec mixed[] = {
		{ KV_FMT_Q4, 16, 6, 0 }, { KV_FMT_F16, 4, 3, 0 }, { KV_FMT_Q8, 8, 8, 0 }, { KV_FMT_Q2, 8, 5, 0 },
		{ KV_FMT_Q4, 8, 4, 1 },  { KV_FMT_F32, 4, 4, 0 }, { KV_FMT_Q8, 4, 3, 1 }, { KV_FMT_Q2, 4, 4, 1 },
	};
	static const struct page_spec rotated[] = {
		{ KV_FMT_F16, 4, 4, 1 }, { KV_FMT_Q8, 16, 7, 1 }, { KV_FMT_Q4, 16, 9, 1 }, { KV_FMT_F32, 4, 2, 1 } };

	(void)state;
	for (uint32_t nq = 1; nq <= 4; nq++) {
		check_attn(mixed, sizeof mixed / sizeof mixed[0], 8, nq, 31 + nq);
		check_attn(mixed, sizeof mixed / sizeof mixed[0], 64, nq, 35 + nq);
		check_attn(rotated, sizeof rotated / sizeof rotated[0], 16, nq, 39 + nq);
	}
}

/* Sliding windows mask the slots at qpos - window and before; soft-capped
 * scores are cap * tanh(score / cap); each alone and together, on every
 * page format, with and without skipping (a soft-capped stream skips cold
 * pages on the raw bound of the capped limit). */
static void test_attn_window_softcap(void **state)
{
	static const struct page_spec mixed[] = {
		{ KV_FMT_Q4, 16, 6, 0 }, { KV_FMT_F16, 4, 3, 0 }, { KV_FMT_Q8, 8, 8, 0 }, { KV_FMT_Q2, 8, 5, 0 },
		{ KV_FMT_Q4, 8, 4, 1 },  { KV_FMT_F32, 4, 4, 0 }, { KV_FMT_Q8, 4, 3, 1 }, { KV_FMT_Q2, 4, 4, 1 },
	};
	static const struct page_spec f16[] = { { KV_FMT_F16, 16, 13, 0 }, { KV_FMT_F16, 16, 16, 0 } };
	static const struct { uint32_t window; float cap; } cases[] = { { 1, 0 }, { 5, 0 }, { 0, 0.3f }, { 7, 0.2f } };

	(void)state;
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		at_window = cases[c].window;
		at_softcap = cases[c].cap;
		for (uint32_t nq = 1; nq <= 4; nq++) {
			check_attn(mixed, sizeof mixed / sizeof mixed[0], 64, nq, 51 + nq + 8 * c);
			check_attn(f16, 2, 64, nq, 61 + nq + 8 * c);
		}
	}
	at_window = 0;
	at_softcap = 0.0f;
}

/* Large scores (q·k in the thousands) do not overflow: the max is subtracted,
 * per head. */
static void test_attn_large_scores(void **state)
{
	struct kv_pool *pool = tu_kv_pool(0, 2, KV_FMT_F32, NULL);
	struct kv_seq *s = tu_kv_seq(pool, 1, 1, 4, NULL);
	float k0[4] = { 1000, 0, 0, 0 }, k1[4] = { 999, 0, 0, 0 }, k2[4] = { -1000, 0, 0, 0 };
	float v0[4] = { 1, 0, 0, 0 }, v1[4] = { 0, 1, 0, 0 }, v2[4] = { 0, 0, 1, 0 };
	float q[8] = { 1, 0, 0, 0, -1, 0, 0, 0 }, att[3], out[8], logit[6], qrot[8], orot[8];
	double e = exp(-1.0);
	struct kv_attn_args a = {
		.q = q, .nq = 2, .qpos = 2, .scale = 1.0f, .logit = logit, .qrot = qrot, .orot = orot, .att = att,
		.out = out,
	};

	(void)state;
	assert_int_equal(kv_seq_reserve(s, 3, NULL), TKV_OK);
	kv_seq_append(s, 0, 0, 0, k0, v0);
	kv_seq_append(s, 0, 0, 1, k1, v1);
	kv_seq_append(s, 0, 0, 2, k2, v2);
	kv_attn(kv_seq_stream(s, 0, 0), 4, &a);
	for (int i = 0; i < 3; i++)
		assert_true(isfinite(att[i]));
	/* head 0 favours k0 and k1, head 1 (q = -e0) k2 alone */
	assert_float_equal(att[0], 1.0 / (1.0 + e), TOL_ATT_W);
	assert_float_equal(att[1], e / (1.0 + e), TOL_ATT_W);
	assert_float_equal(att[2], 1.0, TOL_ATT_W);
	assert_float_equal(out[0], 1.0 / (1.0 + e), TOL_ATT_OUT);
	assert_float_equal(out[1], e / (1.0 + e), TOL_ATT_OUT);
	assert_true(out[2] == 0.0f && out[3] == 0.0f);
	assert_true(out[4] == 0.0f && out[5] == 0.0f && out[6] == 1.0f && out[7] == 0.0f);
	/* masking the last position: head 1 now sees only k0 and k1 */
	a.qpos = 1;
	kv_attn(kv_seq_stream(s, 0, 0), 4, &a);
	assert_true(att[2] == 0.0f);
	assert_float_equal(att[0], 1.0 / (1.0 + e) + e / (1.0 + e), TOL_ATT_W);
	assert_float_equal(att[1], e / (1.0 + e) + 1.0 / (1.0 + e), TOL_ATT_W);
	assert_float_equal(out[4], e / (1.0 + e), TOL_ATT_OUT);
	assert_float_equal(out[5], 1.0 / (1.0 + e), TOL_ATT_OUT);
	kv_seq_free(s);
	kv_pool_free(pool);
}

/* The softmax kernel against expf: relative error within TOL_EXP, exactly 0
 * for masked (-inf) logits and for nothing visible, the sum of what it wrote. */
#define TOL_EXP 1e-6
static void test_attn_exp_kernel(void **state)
{
	kv_exp_fn f = kv_attn_exp_kernel();
	static float l[1003], want[1003];
	double sum = 0.0;
	float got;

	(void)state;
	if (!f) {
		print_message("no SIMD softmax kernel at this kernel level (TIERKV_KERNELS, CPU): the scalar loop\n"
			      "is used (tested by test_attn_*)\n");
		return;
	}
	tu_rng_seed(77);
	for (uint32_t i = 0; i < 1003; i++) {
		l[i] = i % 7 == 3 ? -INFINITY : i % 11 == 5 ? tu_rng_f(-200.0f, -80.0f) : tu_rng_f(-30.0f, 0.0f);
		if (i == 500)
			l[i] = 0.0f;
		want[i] = l[i] == -INFINITY ? 0.0f : expf(l[i]);
		sum += want[i];
	}
	got = f(l, 1003, 0.0f);
	for (uint32_t i = 0; i < 1003; i++) {
		if (want[i] == 0.0f)
			assert_true(l[i] == 0.0f);
		else if (!(fabs(l[i] - want[i]) <= TOL_EXP * want[i] + 1e-37))
			fail_msg("exp at %u: %.9g, want %.9g", i, (double)l[i], (double)want[i]);
	}
	assert_true(fabs(got - sum) <= 1e-5 * sum);
	for (uint32_t i = 0; i < 9; i++)
		l[i] = -INFINITY;
	assert_true(f(l, 9, -INFINITY) == 0.0f);
	for (uint32_t i = 0; i < 9; i++)
		assert_true(l[i] == 0.0f);
}

/* The AVX2 float kernels called directly, against double sums: f16 and f32
 * keys and values, heads of 8, 16, 24, 64 and 128 channels, 1..37 rows,
 * 1..8 query heads, weights with zeros (skipped rows). */
static void test_attn_float_kernels(void **state)
{
	(void)state;
#if HAVE_X86
	typedef void (*score_fn)(const void *, uint32_t, uint32_t, const float *, uint32_t, float, float *, size_t);
	typedef void (*accum_fn)(const void *, uint32_t, uint32_t, const float *, size_t, uint32_t, float *);
	static const uint32_t ds[] = { 8, 16, 24, 64, 128 };
	static float K[37 * 128], V[37 * 128], q[8 * 128], w[8 * 40], out[8 * 128];
	static uint16_t K16[37 * 128], V16[37 * 128];
	const score_fn score[2] = { kv_score_f32_avx2, kv_score_f16_avx2 };
	const accum_fn accum[2] = { kv_accum_f32_avx2, kv_accum_f16_avx2 };

	if (!cpu_features()->avx2) {
		print_message("skipped: this CPU lacks AVX2, the float kernels were not run\n");
		skip();
	}
	tu_rng_seed(515);
	for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
		for (uint32_t n = 1; n <= 37; n += 6) {
			uint32_t d = ds[di], nq = 1 + (n + (uint32_t)di) % 8;
			size_t stride = n + 3;

			for (uint32_t i = 0; i < n * d; i++) {
				K16[i] = ops_f32_to_f16(tu_rng_gauss());
				V16[i] = ops_f32_to_f16(tu_rng_gauss());
				K[i] = ops_f16_to_f32(K16[i]);
				V[i] = ops_f16_to_f32(V16[i]);
			}
			for (uint32_t i = 0; i < nq * d; i++)
				q[i] = tu_rng_gauss();
			for (uint32_t i = 0; i < nq * stride; i++)
				w[i] = i % 5 == 2 ? 0.0f : tu_rng_f(0.0f, 1.0f);
			for (int f16 = 0; f16 < 2; f16++) {
				const void *k = f16 ? (const void *)K16 : (const void *)K;
				const void *v = f16 ? (const void *)V16 : (const void *)V;
				float logit[8 * 40];

				score[f16](k, n, d, q, nq, 0.125f, logit, stride);
				for (uint32_t i = 0; i < nq * d; i++)
					out[i] = 0.5f;
				accum[f16](v, n, d, w, stride, nq, out);
				for (uint32_t h = 0; h < nq; h++) {
					for (uint32_t j = 0; j < n; j++) {
						double want = 0.0, mag = 0.0;

						for (uint32_t c = 0; c < d; c++) {
							want += (double)q[h * d + c] * K[j * d + c];
							mag += fabs((double)q[h * d + c] * K[j * d + c]);
						}
						if (!(fabs(logit[h * stride + j] - 0.125 * want) <= 1e-6 * mag + 1e-30))
							fail_msg("score f16 %d d %u n %u head %u row %u: %.9g, want %.9g", f16, d, n, h,
								 j, (double)logit[h * stride + j], 0.125 * want);
					}
					for (uint32_t c = 0; c < d; c++) {
						double want = 0.5, mag = 0.5;

						for (uint32_t j = 0; j < n; j++) {
							want += (double)w[h * stride + j] * V[j * d + c];
							mag += fabs((double)w[h * stride + j] * V[j * d + c]);
						}
						if (!(fabs(out[h * d + c] - want) <= 1e-6 * mag))
							fail_msg("accum f16 %d d %u n %u head %u channel %u: %.9g, want %.9g", f16, d, n,
								 h, c, (double)out[h * d + c], want);
					}
				}
			}
		}
#else
	print_message("skipped: not an x86 build, no float kernels to compare\n");
	skip();
#endif
}

/* ---- q4 pages on integer codes ---------------------------------------------- */

/* Code of channel c in row j of a q4 region's codes (tier.h layout). */
static int q4_code(const uint8_t *codes, uint32_t d, uint32_t j, uint32_t c)
{
	uint8_t b = codes[(size_t)j * d / 2 + c / 2];

	return c % 2 ? b >> 4 : b & 15;
}

static float f16_at(const uint16_t *p, size_t i)
{
	float x;

	kv_tier_kernels_ref()->f16_load(p + i, &x, 1);
	return x;
}

struct q_errs {
	double score_int, score_fmt, out_int, out_fmt;  /* sums of squares */
	uint32_t n_score, n_out;
};

/* One q4 page of 64 slots from K, V (64 rows of d): rows [j0, j0 + n) through
 * the reference integer kernels, against the exact dequantized rows (within
 * the bound of the kernels' roundings) and the SIMD kernels (within float
 * rounding); e gathers the integer and the format errors (against K, V). */
static void check_q_page(uint32_t d, const float *K, const float *V, uint32_t j0, uint32_t n, uint32_t nq,
			 const float *q, const float *w, size_t stride, struct q_errs *e)
{
	const uint32_t cap = 64, ng = d / 32;
	size_t kb = kv_tier_k_bytes(KV_FMT_Q4, cap, d), vb = kv_tier_v_bytes(KV_FMT_Q4, cap, d);
	uint16_t *kreg = malloc(kb), *vreg = malloc(vb);
	const uint16_t *par;
	const uint8_t *kcodes, *vcodes;
	float *Kd = malloc((size_t)cap * d * sizeof(float)), *Vd = malloc((size_t)cap * d * sizeof(float));
	float logit[9 * 70], logit2[9 * 70], out[9 * 128], out2[9 * 128], out4[9 * 128];
	const float scale = 1.0f / sqrtf((float)d);
	kv_score_q_fn fs = kv_attn_score_q_kernel(KV_FMT_Q4, d);
	kv_accum_q_fn fa = kv_attn_accum_q_kernel(KV_FMT_Q4, d);

	assert_true(kreg && vreg && Kd && Vd && nq <= 9 && stride <= 70 && j0 + n <= cap);
	kv_tier_pack(KV_FMT_Q4, kreg, vreg, cap, d, K, V, cap);
	kv_tier_load_k_slots(KV_FMT_Q4, kreg, cap, d, 0, cap, Kd);
	kv_tier_load_v_slots(KV_FMT_Q4, vreg, cap, d, 0, cap, Vd);
	kcodes = (const uint8_t *)(kreg + 2 * d);
	par = vreg;
	vcodes = (const uint8_t *)(vreg + (size_t)cap * ng * 2);

	/* keys */
	for (uint32_t i = 0; i < 9 * 70; i++)
		logit[i] = logit2[i] = -5.0f;
	assert_int_equal(kv_score_q_ref(4, kreg, j0, n, d, q, nq, scale, logit, stride, NULL), 1);
	if (fs)
		assert_int_equal(fs(4, kreg, j0, n, d, q, nq, scale, logit2, stride, NULL), 1);
	for (uint32_t h = 0; h < nq; h++) {
		const float *qh = q + (size_t)h * d;
		double amax = 0.0, mag = 0.0;

		for (uint32_t c = 0; c < d; c++) {
			amax = fmax(amax, fabs((double)(qh[c] * f16_at(kreg, c))));
			mag += fabs(qh[c]) * (fabs(f16_at(kreg, d + c)) + 15.0 * f16_at(kreg, c));
		}
		for (uint32_t i = 0; i < stride; i++) {
			double exact = 0.0, orig = 0.0, codes = 0.0, bound;
			float got = logit[h * stride + i];

			if (i >= n) { /* past the rows: untouched */
				assert_true(got == -5.0f && logit2[h * stride + i] == -5.0f);
				continue;
			}
			for (uint32_t c = 0; c < d; c++) {
				exact += (double)qh[c] * Kd[(size_t)(j0 + i) * d + c];
				orig += (double)qh[c] * K[(size_t)(j0 + i) * d + c];
				codes += q4_code(kcodes, d, j0 + i, c);
			}
			exact *= scale;
			orig *= scale;
			bound = scale * (amax / 127.0 / 2.0 * codes * (1.0 + 1e-5) + 1e-5 * mag) + 1e-6;
			if (!(fabs(got - exact) <= bound))
				fail_msg("d %u head %u row %u: score %.9g, exact %.9g, bound %.3g", d, h, j0 + i, (double)got,
					 exact, bound);
			if (fs && !(fabs(logit2[h * stride + i] - got) <= 8e-6 * scale * mag + 1e-6))
				fail_msg("d %u head %u row %u: SIMD score %.9g, reference %.9g", d, h, j0 + i,
					 (double)logit2[h * stride + i], (double)got);
			if (fs != NULL && fs != kv_score_q_avx2) { /* the AVX2 and 256-bit VNNI versions too */
				float l4[70];

				assert_int_equal(kv_score_q_avx2(4, kreg, j0 + i, 1, d, qh, 1, scale, l4, 1, NULL), 1);
				if (!(fabs(l4[0] - got) <= 8e-6 * scale * mag + 1e-6))
					fail_msg("d %u head %u row %u: AVX2 score %.9g, reference %.9g", d, h, j0 + i,
						 (double)l4[0], (double)got);
				assert_int_equal(kv_score_q_vnni(4, kreg, j0 + i, 1, d, qh, 1, scale, l4, 1, NULL), 1);
				if (!(fabs(l4[0] - got) <= 8e-6 * scale * mag + 1e-6))
					fail_msg("d %u head %u row %u: VNNI score %.9g, reference %.9g", d, h, j0 + i,
						 (double)l4[0], (double)got);
			}
			e->score_int += (got - exact) * (got - exact);
			e->score_fmt += (exact - orig) * (exact - orig);
			e->n_score++;
		}
	}

	/* skipping: never while some row of the page (any row, not only those
	 * asked for) reaches lim; always once every head's bound is below it */
	{
		float lo[9], hi[9], l3[9 * 70];

		for (uint32_t h = 0; h < nq; h++) {
			const float *qh = q + (size_t)h * d;
			double best = -INFINITY, bnd = 0.0;

			for (uint32_t j = 0; j < cap; j++) {
				double sc = 0.0;

				for (uint32_t c = 0; c < d; c++)
					sc += (double)qh[c] * Kd[(size_t)j * d + c];
				best = fmax(best, sc * scale);
			}
			for (uint32_t c = 0; c < d; c++)
				bnd += (double)qh[c] * f16_at(kreg, d + c) + fmax(15.0 * qh[c] * f16_at(kreg, c), 0.0);
			bnd *= scale;
			assert_true(best <= bnd + 1e-4 * fabs(bnd) + 1e-4);
			lo[h] = (float)(best - 1e-3);
			hi[h] = (float)(bnd + 1e-3 + 1e-4 * fabs(bnd));
		}
		for (uint32_t i = 0; i < 9 * 70; i++)
			l3[i] = -5.0f;
		assert_int_equal(kv_score_q_ref(4, kreg, j0, n, d, q, nq, scale, l3, stride, hi), 0);
		if (fs)
			assert_int_equal(fs(4, kreg, j0, n, d, q, nq, scale, l3, stride, hi), 0);
		for (uint32_t i = 0; i < 9 * 70; i++)
			assert_true(l3[i] == -5.0f); /* skipped: nothing written */
		hi[nq - 1] = lo[nq - 1];          /* one head still reaches it */
		assert_int_equal(kv_score_q_ref(4, kreg, j0, n, d, q, nq, scale, l3, stride, hi), 1);
		if (fs)
			assert_int_equal(fs(4, kreg, j0, n, d, q, nq, scale, l3, stride, lo), 1);
	}

	/* values */
	for (uint32_t i = 0; i < nq * d; i++)
		out[i] = out2[i] = 0.25f;
	kv_accum_q_ref(4, vreg, cap, j0, n, d, w, stride, nq, out);
	if (fa)
		fa(4, vreg, cap, j0, n, d, w, stride, nq, out2);
	if (fa != NULL && fa != kv_accum_q_avx2) { /* the AVX2 version too */
		for (uint32_t i = 0; i < nq * d; i++)
			out4[i] = 0.25f;
		kv_accum_q_avx2(4, vreg, cap, j0, n, d, w, stride, nq, out4);
	}
	for (uint32_t h = 0; h < nq; h++) {
		const float *wh = w + (size_t)h * stride;

		for (uint32_t c = 0; c < d; c++) {
			uint32_t g = c / 32;
			double exact = 0.25, orig = 0.25, umax = 0.0, codes = 0.0, mag = 0.25, bound;
			float got = out[h * d + c];

			for (uint32_t i = 0; i < n; i++) {
				double wi = wh[i] > 0.0f ? wh[i] : 0.0; /* negatives and NaN count as 0 */
				size_t pj = ((size_t)(j0 + i) * ng + g) * 2;

				exact += wi * Vd[(size_t)(j0 + i) * d + c];
				orig += wi * V[(size_t)(j0 + i) * d + c];
				umax = fmax(umax, (double)((float)wi * f16_at(par, pj)));
				mag += wi * (fabs(f16_at(par, pj + 1)) + 15.0 * f16_at(par, pj));
				codes += q4_code(vcodes, d, j0 + i, c);
			}
			bound = umax / 127.0 / 2.0 * codes * (1.0 + 1e-5) + 1e-5 * mag + 1e-7;
			if (!(fabs(got - exact) <= bound))
				fail_msg("d %u head %u channel %u: out %.9g, exact %.9g, bound %.3g", d, h, c, (double)got,
					 exact, bound);
			if (fa && !(fabs(out2[h * d + c] - got) <= 8e-6 * mag))
				fail_msg("d %u head %u channel %u: SIMD out %.9g, reference %.9g", d, h, c,
					 (double)out2[h * d + c], (double)got);
			if (fa != NULL && fa != kv_accum_q_avx2 && !(fabs(out4[h * d + c] - got) <= 8e-6 * mag))
				fail_msg("d %u head %u channel %u: AVX2 out %.9g, reference %.9g", d, h, c,
					 (double)out4[h * d + c], (double)got);
			e->out_int += (got - exact) * (got - exact);
			e->out_fmt += (exact - orig) * (exact - orig);
			e->n_out++;
		}
	}
	free(kreg);
	free(vreg);
	free(Kd);
	free(Vd);
}

/* The integer kernels of q4 pages (attn_impl.h): d 64 and 128, every row
 * range shape (tails of 1..7 rows, odd counts, offsets), 1..9 heads (more
 * than the kernels prepare at once), weights with zeros, negatives and NaN
 * (no weight), keys with an outlier channel. Each result is within the bound
 * of the roundings of the reference, the SIMD version gives the reference's
 * numbers, and over all of it the integer error is small next to the error
 * of the 4-bit codes themselves (RMS at most a fifth: the two add in
 * quadrature, so at most +2%). The page bound of the skipping check holds
 * for every row and decides alike in both versions. */
static void test_attn_q_kernels(void **state)
{
	static const struct { uint32_t j0, n; } rows[] = {
		{ 0, 64 }, { 0, 1 }, { 5, 7 }, { 3, 8 }, { 17, 9 }, { 1, 31 }, { 32, 16 }, { 0, 2 }, { 9, 55 } };
	static float K[64 * 128], V[64 * 128], q[9 * 128], w[9 * 70];
	struct q_errs e = { 0 };

	(void)state;
	if (!kv_attn_score_q_kernel(KV_FMT_Q4, 64))
		print_message("no SIMD integer kernels at this kernel level (TIERKV_KERNELS, CPU): the references\n"
			      "are checked alone\n");
	tu_rng_seed(4242);
	for (uint32_t d = 64; d <= 128; d *= 2) {
		for (uint32_t rep = 0; rep < 3; rep++) {
			for (uint32_t i = 0; i < 64 * d; i++) {
				K[i] = tu_rng_gauss() * (i % d == 7 ? 6.0f : 1.0f) + (i % d == 20 ? 2.0f : 0.0f);
				V[i] = tu_rng_gauss() * (i % d == 40 ? 4.0f : 1.0f);
			}
			for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
				uint32_t nq = 1 + (uint32_t)(r + rep) % 9, n = rows[r].n;
				size_t stride = n + r % 3 + 1;

				for (uint32_t i = 0; i < nq * d; i++)
					q[i] = tu_rng_gauss();
				for (uint32_t h = 0; h < nq; h++) {
					double sum = 0.0;

					for (uint32_t i = 0; i < stride; i++) {
						float x = expf(2.0f * tu_rng_gauss());

						w[h * stride + i] = x;
						sum += x;
					}
					for (uint32_t i = 0; i < stride; i++)
						w[h * stride + i] = (float)(w[h * stride + i] / sum);
					if (h % 4 == 1)       /* a head with no weight here */
						for (uint32_t i = 0; i < stride; i++)
							w[h * stride + i] = 0.0f;
					if (h % 4 == 2 && n > 2) {
						w[h * stride + 0] = -0.5f;
						w[h * stride + 1] = NAN;
					}
				}
				check_q_page(d, K, V, rows[r].j0, n, nq, q, w, stride, &e);
			}
		}
	}
	print_message("q4 integer kernels: RMS score error %.3g (the 4-bit codes' own %.3g), RMS output error %.3g "
		      "(codes' own %.3g)\n", sqrt(e.score_int / e.n_score), sqrt(e.score_fmt / e.n_score),
		      sqrt(e.out_int / e.n_out), sqrt(e.out_fmt / e.n_out));
	assert_true(e.score_int <= 0.04 * e.score_fmt);
	assert_true(e.out_int <= 0.04 * e.out_fmt);
}
int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attn_f32),
		cmocka_unit_test(test_attn_f16),
		cmocka_unit_test(test_attn_mixed),
		cmocka_unit_test(test_attn_window_softcap),
		cmocka_unit_test(test_attn_large_scores),
		cmocka_unit_test(test_attn_exp_kernel),
		cmocka_unit_test(test_attn_float_kernels),
		cmocka_unit_test(test_attn_q_kernels),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
