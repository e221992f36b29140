/* gemm.c - packed blocked float GEMM for the trainer (see gemm.h). */
#include "gemm.h"

#include <cpuid.h>
#include <stdatomic.h>
#include <string.h>

#include "util/tpool.h"

#define GEMM_KC 256
#define GEMM_NC 128

static bool gemm_cpu_avx2(void)
{
	unsigned a, b, c, d;
	bool fma, avx2;

	if (!__get_cpuid(1, &a, &b, &c, &d))
		return false;
	fma = (c >> 12) & 1;
	if (__get_cpuid_max(0, NULL) < 7)
		return false;
	__cpuid_count(7, 0, a, b, c, d);
	avx2 = (b >> 5) & 1;
	return fma && avx2;
}

static gemm_tile_fn gemm_tile;

const char *gemm_use_simd(bool on)
{
	gemm_tile = on && gemm_cpu_avx2() ? gemm_tile_avx2 : gemm_tile_ref;
	return gemm_tile == gemm_tile_avx2 ? "avx2" : "ref";
}

void gemm_tile_ref(int kc, const float *const *a, long ks, const float *bp, float *c, int ldc, int mr, int nr,
		   bool load)
{
	float t[GEMM_MR][GEMM_NR] = { { 0 } };

	for (int k = 0; k < kc; k++)
		for (int r = 0; r < GEMM_MR; r++)
			for (int j = 0; j < GEMM_NR; j++)
				t[r][j] += a[r][k * ks] * bp[k * GEMM_NR + j];
	for (int r = 0; r < mr; r++)
		for (int j = 0; j < nr; j++)
			c[r * ldc + j] = load ? c[r * ldc + j] + t[r][j] : t[r][j];
}

void gemm_naive(const struct gemm_args *g)
{
	for (int i = 0; i < g->M; i++)
		for (int j = 0; j < g->N; j++) {
			double s = 0;

			for (int k = 0; k < g->K; k++) {
				float a = g->ta ? g->A[(size_t)k * g->lda + i] : g->A[(size_t)i * g->lda + k];
				float b = g->tb ? g->B[(size_t)j * g->ldb + k] : g->B[(size_t)k * g->ldb + j];

				s += (double)a * b;
			}
			g->C[(size_t)i * g->ldc + j] = (float)(g->acc ? g->C[(size_t)i * g->ldc + j] + s : s);
		}
}

/* Bp[p][k][NR] for the NR-column panels p of columns jc..jc+nc, rows pc..pc+kc
 * of op(B); columns past N are zero. */
static void gemm_pack_b(const struct gemm_args *g, int pc, int kc, int jc, int nc, float *bp)
{
	for (int p = 0; p * GEMM_NR < nc; p++) {
		float *dst = bp + (size_t)p * kc * GEMM_NR;
		int j0 = jc + p * GEMM_NR, nr = nc - p * GEMM_NR < GEMM_NR ? nc - p * GEMM_NR : GEMM_NR;

		if (!g->tb) {
			for (int k = 0; k < kc; k++) {
				const float *src = g->B + (size_t)(pc + k) * g->ldb + j0;

				memcpy(dst + k * GEMM_NR, src, (size_t)nr * sizeof(float));
				for (int j = nr; j < GEMM_NR; j++)
					dst[k * GEMM_NR + j] = 0.0f;
			}
		} else {
			for (int j = 0; j < GEMM_NR; j++) {
				if (j < nr) {
					const float *src = g->B + (size_t)(j0 + j) * g->ldb + pc;

					for (int k = 0; k < kc; k++)
						dst[k * GEMM_NR + j] = src[k];
				} else {
					for (int k = 0; k < kc; k++)
						dst[k * GEMM_NR + j] = 0.0f;
				}
			}
		}
	}
}

void gemm_st(const struct gemm_args *g)
{
	_Alignas(64) float bp[GEMM_KC * GEMM_NC];
	long rs = g->ta ? 1 : g->lda, ks = g->ta ? g->lda : 1; /* A(i, k) = A[i * rs + k * ks] */

	if (!gemm_tile)
		gemm_use_simd(true);
	if (g->M <= 0 || g->N <= 0)
		return;
	if (g->K <= 0) {
		if (!g->acc)
			for (int i = 0; i < g->M; i++)
				memset(g->C + (size_t)i * g->ldc, 0, (size_t)g->N * sizeof(float));
		return;
	}
	for (int jc = 0; jc < g->N; jc += GEMM_NC) {
		int nc = g->N - jc < GEMM_NC ? g->N - jc : GEMM_NC;

		for (int pc = 0; pc < g->K; pc += GEMM_KC) {
			int kc = g->K - pc < GEMM_KC ? g->K - pc : GEMM_KC;
			bool load = g->acc || pc > 0;

			gemm_pack_b(g, pc, kc, jc, nc, bp);
			for (int ic = 0; ic < g->M; ic += GEMM_MR) {
				int mr = g->M - ic < GEMM_MR ? g->M - ic : GEMM_MR;
				const float *a[GEMM_MR];

				for (int r = 0; r < GEMM_MR; r++)
					a[r] = g->A + (size_t)(ic + (r < mr ? r : 0)) * rs + (size_t)pc * ks;
				for (int p = 0; p * GEMM_NR < nc; p++) {
					int nr = nc - p * GEMM_NR < GEMM_NR ? nc - p * GEMM_NR : GEMM_NR;

					gemm_tile(kc, a, ks, bp + (size_t)p * kc * GEMM_NR,
						  g->C + (size_t)ic * g->ldc + jc + p * GEMM_NR, g->ldc, mr, nr, load);
				}
			}
		}
	}
}

/* Rows are handed out in chunks from a shared counter rather than split
 * evenly: on a machine shared with other jobs one thread may run much slower
 * than the other, and the fast one then takes more chunks. */
struct gemm_job {
	const struct gemm_args *g;
	int chunk;              /* rows per chunk, a multiple of GEMM_MR */
	atomic_int next;        /* first row not yet handed out */
};

static void gemm_worker(void *ctx, int ith, int nth)
{
	struct gemm_job *j = ctx;
	const struct gemm_args *g = j->g;
	int i0;

	(void)ith, (void)nth;
	while ((i0 = atomic_fetch_add(&j->next, j->chunk)) < g->M) {
		struct gemm_args s = *g;

		s.M = g->M - i0 < j->chunk ? g->M - i0 : j->chunk;
		s.A = g->ta ? g->A + i0 : g->A + (size_t)i0 * g->lda;
		s.C = g->C + (size_t)i0 * g->ldc;
		gemm_st(&s);
	}
}

void gemm(struct tpool *tp, const struct gemm_args *g)
{
	struct gemm_job j;
	int nth = tpool_n(tp), rows;

	if (!gemm_tile)
		gemm_use_simd(true);
	if (!tp || nth < 2 || g->M < 2 * GEMM_MR) {
		gemm_st(g);
		return;
	}
	/* about 8 chunks per thread, at least 8 tiles of rows each */
	rows = g->M / (8 * nth);
	rows = rows < 8 * GEMM_MR ? 8 * GEMM_MR : (rows + GEMM_MR - 1) / GEMM_MR * GEMM_MR;
	j.g = g;
	j.chunk = rows;
	atomic_init(&j.next, 0);
	tpool_run(tp, gemm_worker, &j);
}
