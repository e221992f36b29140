/* test_moe.c - the routed experts' feed-forward (model/moe.c) against a
 * reference computed here in double precision from the same (dequantized)
 * weights: router softmax, top-k, renormalised weights, each selected
 * expert's SwiGLU FFN read from its rows of the 3-D stacks.
 *
 * Cases: f32 experts (exact float activations: tight tolerance) with k <
 * n_expert and k = n_expert (every expert: the dense mixture sum_e p_e
 * FFN_e); identical experts, where any k must give exactly the one dense
 * FFN (the weights sum to 1); quantized stacks (q8_0, q4_k, q6_k; the
 * activations are quantized to 8 bits, hence the looser tolerance) and a
 * q4_0 stack repacked into the interleaved layout, read by expert row
 * ranges; and a prefill chunk equal row by row to the same rows decoded one
 * at a time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "model/arch.h"
#include "model/model.h"
#include "ops/dtype.h"
#include "ops/ops.h"
#include "util/tpool.h"

struct fx {
	struct tkv_model m;
	struct model_moe E;
	uint32_t dim, ne, k, nff;
	void *buf[4];        /* router, gate, up, down as stored */
	float *w[4];         /* the same dequantized: (rows, cols) */
	void *packed;
};

/* A stack of rows x cols weights of type t, N(0, std), stored and dequantized. */
static void make_mat(struct fx *f, int i, struct ops_mat *mat, uint32_t t, int64_t rows, int64_t cols, float std)
{
	size_t rb = tkv_dtype_row_size(t, (uint64_t)cols);
	float *x = malloc((size_t)cols * sizeof *x);

	f->buf[i] = malloc(rb * (size_t)rows);
	f->w[i] = malloc((size_t)rows * cols * sizeof(float));
	assert_non_null(x);
	assert_non_null(f->buf[i]);
	assert_non_null(f->w[i]);
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t c = 0; c < cols; c++)
			x[c] = std * tu_rng_gauss();
		assert_int_equal(ops_quantize_row(t, x, (char *)f->buf[i] + (size_t)r * rb, cols), 0);
		ops_dequant_row(t, (char *)f->buf[i] + (size_t)r * rb, f->w[i] + (size_t)r * cols, cols);
	}
	free(x);
	*mat = (struct ops_mat){ .data = f->buf[i], .type = t, .rows = rows, .cols = cols, .row_bytes = rb };
}

static void fx_init(struct fx *f, const char *arch, uint32_t t, uint32_t dim, uint32_t ne, uint32_t k, uint32_t nff)
{
	memset(f, 0, sizeof *f);
	f->dim = dim, f->ne = ne, f->k = k, f->nff = nff;
	f->m.arch = arch_find(arch, strlen(arch));
	assert_non_null(f->m.arch);
	f->m.info = (struct tkv_model_info){ .dim = dim, .n_head = 1, .n_kv_head = 1, .head_dim = dim, .n_ff = nff };
	f->m.hp.n_expert = ne;
	f->m.hp.n_expert_used = k;
	f->m.hp.n_ff_exp = nff;
	f->m.hp.n_ctx_orig = 1u << 20;
	make_mat(f, 0, &f->E.router, TKV_F32, ne, dim, 2.0f / sqrtf((float)dim));
	make_mat(f, 1, &f->E.gate, t, (int64_t)ne * nff, dim, 1.0f / sqrtf((float)dim));
	make_mat(f, 2, &f->E.up, t, (int64_t)ne * nff, dim, 1.0f / sqrtf((float)dim));
	make_mat(f, 3, &f->E.down, t, (int64_t)ne * dim, nff, 1.0f / sqrtf((float)nff));
}

static void fx_free(struct fx *f)
{
	for (int i = 0; i < 4; i++) {
		free(f->buf[i]);
		free(f->w[i]);
	}
	free(f->packed);
}

/* Every expert a copy of expert 0 (stored and dequantized). */
static void fx_same_experts(struct fx *f)
{
	struct ops_mat *mats[] = { NULL, &f->E.gate, &f->E.up, &f->E.down };

	for (int i = 1; i < 4; i++) {
		size_t per = (size_t)(mats[i]->rows / f->ne), bytes = per * mats[i]->row_bytes;

		for (uint32_t e = 1; e < f->ne; e++) {
			memcpy((char *)f->buf[i] + e * bytes, f->buf[i], bytes);
			memcpy(f->w[i] + e * per * mats[i]->cols, f->w[i], per * mats[i]->cols * sizeof(float));
		}
	}
}

static double silu(double g)
{
	return g / (1.0 + exp(-g));
}

/* The reference output of one row x into out (dim). */
static void ref_row(const struct fx *f, const float *x, double *out)
{
	double p[64], hid[1024], sum = 0.0, mx = -1e300;
	uint32_t sel[64];
	bool used[64] = { false };

	assert_true(f->ne <= 64 && f->nff <= 1024);
	for (uint32_t e = 0; e < f->ne; e++) {
		p[e] = 0.0;
		for (uint32_t i = 0; i < f->dim; i++)
			p[e] += (double)f->w[0][(size_t)e * f->dim + i] * x[i];
		mx = p[e] > mx ? p[e] : mx;
	}
	for (uint32_t e = 0; e < f->ne; e++)
		sum += p[e] = exp(p[e] - mx);
	for (uint32_t e = 0; e < f->ne; e++)
		p[e] /= sum;
	sum = 0.0;
	for (uint32_t j = 0; j < f->k; j++) {
		int best = -1;

		for (uint32_t e = 0; e < f->ne; e++)
			if (!used[e] && (best < 0 || p[e] > p[best]))
				best = (int)e;
		used[best] = true;
		sel[j] = (uint32_t)best;
		sum += p[best];
	}
	memset(out, 0, f->dim * sizeof *out);
	for (uint32_t j = 0; j < f->k; j++) {
		uint32_t e = sel[j];
		double w = p[e] / sum;

		for (uint32_t r = 0; r < f->nff; r++) {
			const float *g = f->w[1] + ((size_t)e * f->nff + r) * f->dim;
			const float *u = f->w[2] + ((size_t)e * f->nff + r) * f->dim;
			double a = 0.0, b = 0.0;

			for (uint32_t i = 0; i < f->dim; i++) {
				a += (double)g[i] * x[i];
				b += (double)u[i] * x[i];
			}
			hid[r] = silu(a) * b;
		}
		for (uint32_t r = 0; r < f->dim; r++) {
			const float *d = f->w[3] + ((size_t)e * f->dim + r) * f->nff;
			double y = 0.0;

			for (uint32_t i = 0; i < f->nff; i++)
				y += (double)d[i] * hid[i];
			out[r] += w * y;
		}
	}
}

/* moe_ffn over n random rows, against the reference: max |diff| / max |ref|
 * must stay within tol; and, each row run alone, within tol_rows of the
 * chunk's row. */
static void check(struct fx *f, uint32_t n, double tol, double tol_rows)
{
	struct model_scratch s;
	struct tkv_error err = { 0 };
	struct tpool *tp = NULL;
	float *x = malloc((size_t)n * f->dim * sizeof *x), *chunk = malloc((size_t)n * f->dim * sizeof *chunk);
	double *ref = malloc(f->dim * sizeof *ref), dmax = 0.0, rmax = 0.0, rows = 0.0;

	assert_non_null(x);
	assert_non_null(chunk);
	assert_non_null(ref);
	assert_int_equal(tpool_init(&tp, 2, NULL, &err), TKV_OK);
	assert_int_equal(model_scratch_init(&s, &f->m, n, 64, 2, NULL, &err), TKV_OK);
	for (size_t i = 0; i < (size_t)n * f->dim; i++)
		x[i] = tu_rng_gauss();
	memcpy(s.xb, x, (size_t)n * f->dim * sizeof *x);
	moe_ffn(&f->m, &f->E, &s, tp, n);
	memcpy(chunk, s.o, (size_t)n * f->dim * sizeof *chunk);
	for (uint32_t t = 0; t < n; t++) {
		ref_row(f, x + (size_t)t * f->dim, ref);
		for (uint32_t i = 0; i < f->dim; i++) {
			double d = fabs(chunk[(size_t)t * f->dim + i] - ref[i]);

			dmax = d > dmax ? d : dmax;
			rmax = fabs(ref[i]) > rmax ? fabs(ref[i]) : rmax;
		}
		/* the same row decoded alone */
		memcpy(s.xb, x + (size_t)t * f->dim, f->dim * sizeof *x);
		moe_ffn(&f->m, &f->E, &s, tp, 1);
		for (uint32_t i = 0; i < f->dim; i++) {
			double d = fabs(s.o[i] - chunk[(size_t)t * f->dim + i]);

			rows = d > rows ? d : rows;
		}
	}
	if (!(rmax > 0.0) || dmax / rmax > tol || rows / rmax > tol_rows)
		fail_msg("%s, %u experts, top %u, %u rows: max |moe - ref| / max |ref| = %.3g (tolerance %.3g), "
			 "chunk against single rows %.3g (tolerance %.3g)", tkv_dtype_name(f->E.gate.type), f->ne, f->k,
			 n, dmax / rmax, tol, rows / rmax, tol_rows);
	model_scratch_free(&s, NULL);
	tpool_free(tp);
	free(x);
	free(chunk);
	free(ref);
}

/* Named tolerances: f32 weights and activations differ from the double
 * reference by float rounding; quantized weights take 8-bit activation
 * blocks (x, and the hidden activations before down), about 1% of a row. */
#define TOL_F32 1e-5
#define TOL_Q8ACT 3e-2

static void test_f32_topk(void **state)
{
	struct fx f;

	(void)state;
	tu_rng_seed(11);
	fx_init(&f, "qwen3moe", TKV_F32, 64, 16, 4, 48);
	check(&f, 1, TOL_F32, TOL_F32);
	check(&f, 13, TOL_F32, TOL_F32);
	fx_free(&f);
	/* Mixtral's row (llama with experts): 8 experts, 2 a token */
	fx_init(&f, "llama", TKV_F32, 64, 8, 2, 96);
	check(&f, 9, TOL_F32, TOL_F32);
	fx_free(&f);
}

static void test_f32_all_experts(void **state)
{
	struct fx f;

	(void)state;
	tu_rng_seed(12);
	fx_init(&f, "qwen3moe", TKV_F32, 64, 8, 8, 32);
	check(&f, 1, TOL_F32, TOL_F32);
	check(&f, 10, TOL_F32, TOL_F32);
	fx_free(&f);
}

/* Identical experts: whatever the router picks, the output is the one FFN
 * (the reference computes it through the selected experts, which are the
 * same: its weights sum to 1 only when renormalised, as the engine's must). */
static void test_same_experts_are_dense(void **state)
{
	struct fx f;
	struct model_scratch s;
	struct tkv_error err = { 0 };
	float x[64];
	double one[64], dmax = 0.0, rmax = 0.0;

	(void)state;
	tu_rng_seed(13);
	fx_init(&f, "qwen3moe", TKV_F32, 64, 8, 3, 32);
	fx_same_experts(&f);
	check(&f, 5, TOL_F32, TOL_F32);
	/* and against expert 0 alone with weight 1 */
	assert_int_equal(model_scratch_init(&s, &f.m, 1, 64, 1, NULL, &err), TKV_OK);
	for (int i = 0; i < 64; i++)
		s.xb[i] = x[i] = tu_rng_gauss();
	moe_ffn(&f.m, &f.E, &s, NULL, 1);
	f.k = 1;
	ref_row(&f, x, one);
	for (int i = 0; i < 64; i++) {
		dmax = fabs(s.o[i] - one[i]) > dmax ? fabs(s.o[i] - one[i]) : dmax;
		rmax = fabs(one[i]) > rmax ? fabs(one[i]) : rmax;
	}
	if (dmax / rmax > TOL_F32)
		fail_msg("3 identical experts against one: %.3g", dmax / rmax);
	model_scratch_free(&s, NULL);
	fx_free(&f);
}

static void test_quantized(void **state)
{
	static const uint32_t types[] = { TKV_Q8_0, TKV_Q4_K, TKV_Q6_K, TKV_F16 };
	struct fx f;

	(void)state;
	tu_rng_seed(14);
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		fx_init(&f, "qwen3moe", types[i], 256, 8, 2, 256);
		check(&f, 1, TOL_Q8ACT, TOL_Q8ACT);
		check(&f, 12, TOL_Q8ACT, TOL_Q8ACT);
		fx_free(&f);
	}
}

/* A q4_0 stack repacked 8 rows at a time (as load.c does) is read by expert
 * row ranges. */
static void test_repacked(void **state)
{
	struct fx f;
	struct ops_mat *mats[] = { &f.E.gate, &f.E.up, &f.E.down };
	size_t total = 0, off = 0;

	(void)state;
	tu_rng_seed(15);
	fx_init(&f, "qwen3moe", TKV_Q4_0, 64, 8, 2, 32);
	for (int i = 0; i < 3; i++) {
		size_t sz = ops_repack_size(mats[i]);

		assert_true(sz > 0); /* every kernel level has q4_0's interleaved layout */
		total += (sz + 63) & ~(size_t)63;
	}
	f.packed = aligned_alloc(64, total);
	assert_non_null(f.packed);
	for (int i = 0; i < 3; i++) {
		size_t sz = ops_repack_size(mats[i]);

		ops_repack(mats[i], (char *)f.packed + off);
		assert_int_equal(mats[i]->layout, OPS_LAYOUT_X8);
		off += (sz + 63) & ~(size_t)63;
	}
	check(&f, 1, TOL_Q8ACT, TOL_Q8ACT);
	check(&f, 11, TOL_Q8ACT, TOL_Q8ACT);
	fx_free(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f32_topk),
		cmocka_unit_test(test_f32_all_experts),
		cmocka_unit_test(test_same_experts_are_dense),
		cmocka_unit_test(test_quantized),
		cmocka_unit_test(test_repacked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
