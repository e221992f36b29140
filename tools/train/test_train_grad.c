/* test_train_grad.c - the trainer's gradients against central finite
 * differences, and its GEMM against a plain triple loop.
 *
 * A tiny model (dim 16, 2 layers, 4 heads of 4, 2 KV heads, ffn 32, vocab 32,
 * batch 2 x 8 tokens, random weights of std 0.3 and norms near 1): in every
 * parameter tensor, up to 96 elements (all of the smaller tensors, a random
 * sample of the larger) are checked: d loss / d w_i is
 * (L(w_i + h) - L(w_i - h)) / 2h with the loss summed in double. Float
 * rounding of the loss (~1e-7 relative) limits the finite difference to about
 * 1e-4 absolute, so each tensor is judged by its relative error norm
 * |fd - g| / |g| (GRAD_REL_TOL) and each element by GRAD_ABS_TOL +
 * GRAD_ELEM_REL * |g|. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "trn.h"

#define GRAD_H 1e-2f
#define GRAD_REL_TOL 1e-2
#define GRAD_ABS_TOL 2e-3
#define GRAD_ELEM_REL 5e-2
#define GEMM_TOL 1e-4 /* relative to the sum of |a||b| of each output */

static uint64_t rng = 88172645463325252ull;

static double urand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

static int test_gemm(void)
{
	static const int shapes[][3] = { { 1, 1, 1 }, { 7, 17, 5 }, { 6, 16, 256 }, { 13, 33, 300 },
					 { 64, 130, 32 }, { 20, 40, 513 } };
	int fails = 0;

	for (int simd = 0; simd < 2; simd++) {
		const char *kname = gemm_use_simd(simd != 0);

		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int tr = 0; tr < 4; tr++)
				for (int acc = 0; acc < 2; acc++) {
					int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
					bool ta = tr & 1, tb = tr & 2;
					float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
					float *C = malloc(sizeof(float) * M * N), *R = malloc(sizeof(float) * M * N);
					struct gemm_args g = { M, N, K, A, ta ? M : K, ta, B, tb ? K : N, tb, C, N, acc };
					struct gemm_args r = g;
					double worst = 0;

					for (int i = 0; i < M * K; i++)
						A[i] = (float)(urand() * 2 - 1);
					for (int i = 0; i < K * N; i++)
						B[i] = (float)(urand() * 2 - 1);
					for (int i = 0; i < M * N; i++)
						C[i] = R[i] = (float)(urand() * 2 - 1);
					r.C = R;
					gemm_st(&g);
					gemm_naive(&r);
					for (int i = 0; i < M * N; i++) {
						double e = fabs((double)C[i] - R[i]) / (K + 1);

						worst = e > worst ? e : worst;
					}
					if (worst > GEMM_TOL) {
						printf("FAIL gemm %s %dx%dx%d ta %d tb %d acc %d: error %.3g\n", kname, M, N,
						       K, ta, tb, acc, worst);
						fails++;
					}
					free(A), free(B), free(C), free(R);
				}
	}
	gemm_use_simd(true);
	printf("gemm: %s\n", fails ? "FAILED" : "ok (ref and avx2 tiles, all transposes, edges)");
	return fails;
}

static double loss_of(const struct trn_model *m, struct trn_acts *a)
{
	return trn_forward(m, a, NULL, NULL) / (a->B * a->T);
}

/* Checks every tensor; in each, every element when it has at most max_elem,
 * else max_elem of them at random. */
static int test_grad(const struct trn_cfg *cp, int B, int T, size_t max_elem)
{
	struct trn_cfg c = *cp;
	struct trn_model m;
	struct trn_acts a;
	float *g;
	int fails = 0;

	printf("dim %u, %u layers, %u/%u heads, ffn %u, vocab %u, batch %d x %d\n", c.dim, c.n_layer, c.n_head,
	       c.n_kv_head, c.n_ff, c.n_vocab, B, T);
	if (trn_model_init(&m, &c, NULL) || trn_acts_init(&a, &m, B, T, 1, NULL)) {
		printf("FAIL: init\n");
		return 1;
	}
	trn_model_randomize(&m, 7, 0.3f);
	for (size_t k = 0; k < m.n_t; k++)
		if (m.t[k].n_dims == 1)
			for (size_t i = 0; i < m.t[k].n; i++)
				m.w[m.t[k].off + i] = (float)(0.8 + 0.4 * urand());
	for (int i = 0; i < B * (T + 1); i++)
		a.tok[i] = (int32_t)(urand() * c.n_vocab);
	memset(m.g, 0, m.n_params * sizeof(float));
	printf("loss %.5f (ln %u = %.5f)\n", loss_of(&m, &a), c.n_vocab, log((double)c.n_vocab));
	trn_forward(&m, &a, NULL, NULL);
	trn_backward(&m, &a, NULL);
	g = malloc(m.n_params * sizeof(float));
	memcpy(g, m.g, m.n_params * sizeof(float));
	for (size_t k = 0; k < m.n_t; k++) {
		const struct trn_tensor *t = &m.t[k];
		double num = 0, den = 0;
		size_t bad = 0;

		for (size_t e = 0; e < (t->n < max_elem ? t->n : max_elem); e++) {
			size_t i = t->n <= max_elem ? e : (size_t)(urand() * (double)t->n);
			float *w = &m.w[t->off + i], w0 = *w;
			double lp, lm, fd, an = g[t->off + i];

			*w = w0 + GRAD_H;
			lp = loss_of(&m, &a);
			*w = w0 - GRAD_H;
			lm = loss_of(&m, &a);
			*w = w0;
			fd = (lp - lm) / (2.0 * GRAD_H);
			num += (fd - an) * (fd - an);
			den += an * an;
			if (fabs(fd - an) > GRAD_ABS_TOL + GRAD_ELEM_REL * fabs(an)) {
				if (!bad)
					printf("  %s[%zu]: analytic %.6g, finite difference %.6g\n", t->name, i, an, fd);
				bad++;
			}
		}
		{
			double rel = sqrt(num) / (sqrt(den) > 1e-6 ? sqrt(den) : 1e-6);
			bool ok = rel < GRAD_REL_TOL && !bad && den > 0;

			printf("%s %-24s |g| %.4f rel err %.2e%s\n", ok ? "ok  " : "FAIL", t->name, sqrt(den), rel,
			       bad ? " (elements off)" : "");
			fails += !ok;
		}
	}
	free(g);
	trn_acts_free(&a);
	trn_model_free(&m);
	return fails;
}

int main(void)
{
	/* the tiny model of the file comment, then one whose 80 positions span two
	 * attention blocks of TRN_QBLK queries (the block-causal paths) */
	static const struct trn_cfg tiny = { 16, 2, 4, 2, 32, 32, 8, 10000.0f, 1e-5f };
	static const struct trn_cfg blocks = { 16, 1, 4, 2, 32, 32, 80, 10000.0f, 1e-5f };
	int fails = test_gemm();

	fails += test_grad(&tiny, 2, 8, 96);
	fails += test_grad(&blocks, 1, 80, 24);
	printf("%s\n", fails ? "FAILED" : "all ok");
	return fails ? 1 : 0;
}
