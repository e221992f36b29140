/* bench_kernels.c - timings that are no test (machines differ): the thread
 * pool's fork/join cost, and what loading costs per KV page format. Built
 * with the tests (build/tests/bench_kernels), not run by ctest; the kernel
 * level follows TIERKV_KERNELS like everything else (util/cpu.h).
 *
 * The matmul timings read weights of each common type in the layout the model
 * loader gives them: decode (one activation row) from a matrix far larger
 * than the caches, in GB/s next to a plain streaming read of the same bytes
 * with the same threads, and from a matrix that stays in L2 (the kernel's
 * own speed, what memory could feed it); prefill (64 rows) in GFLOP/s.
 *
 * The attention timings score and sum one q4 page (64 slots, 8 query heads
 * sharing the KV head, as in Llama-style GQA) with every integer kernel the
 * CPU can run, in ns per slot (all 8 heads).
 *
 *   build/tests/bench_kernels            all of them
 *   build/tests/bench_kernels tpool|kv|mm [TYPE...]|attn   one of them */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/attn_impl.h"
#include "kv/tier.h"
#include "ops/dtype.h"
#include "ops/ops.h"
#include "kv/tier_impl.h"
#include "testutil.h"
#include "util/tpool.h"

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void noop_fn(void *arg, int ith, int nth)
{
	(void)arg;
	(void)ith;
	(void)nth;
}

/* The fork/join cost of an empty run, back to back and after serial work on
 * the caller (as in a decode step): below the spin window the workers are
 * still spinning; above it they sleep and the run pays a condvar wakeup. */
static int bench_tpool(void)
{
	static const double gaps[] = { 5, 20, 200 };
	struct tpool *p = NULL;

	for (int n = 2; n <= 4; n++) {
		const int runs = 20000;
		double t0, t1;

		if (tpool_init(&p, n, NULL, NULL) != TKV_OK)
			return 1;
		for (int r = 0; r < 1000; r++)
			tpool_run(p, noop_fn, NULL);
		t0 = now_us();
		for (int r = 0; r < runs; r++)
			tpool_run(p, noop_fn, NULL);
		t1 = now_us();
		printf("tpool: %d threads, empty run %.2f us (back to back, %d runs)\n", n, (t1 - t0) / runs, runs);
		tpool_free(p);
	}
	if (tpool_init(&p, 2, NULL, NULL) != TKV_OK)
		return 1;
	for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
		const int runs = 2000;
		double cost = 0, t0, t1;

		for (int r = 0; r < runs; r++) {
			double until = now_us() + gaps[g];

			while (now_us() < until)
				;
			t0 = now_us();
			tpool_run(p, noop_fn, NULL);
			t1 = now_us();
			cost += t1 - t0;
		}
		printf("tpool: 2 threads, empty run %.2f us after %.0f us of caller work\n", cost / runs, gaps[g]);
	}
	tpool_free(p);
	return 0;
}

/* Packing and loading full pages of every format (keys and values, d = 128,
 * cap = 64): ns per slot and GB/s of page bytes read. */
static int bench_kv(void)
{
	enum { CAP = 64, D = 128, PAGES = 64, REPS = 8 };
	float *K = malloc(sizeof(float) * CAP * D), *V = malloc(sizeof(float) * CAP * D);
	float *out = malloc(sizeof(float) * 2 * D);

	if (!K || !V || !out)
		return 1;
	tu_rng_seed(13);
	for (size_t i = 0; i < (size_t)CAP * D; i++) {
		K[i] = 3.0f * tu_rng_gauss();
		V[i] = 3.0f * tu_rng_gauss();
	}
	for (uint32_t f = 0; f < KV_FMT_COUNT; f++) {
		size_t kb = kv_tier_k_bytes(f, CAP, D), vb = kv_tier_v_bytes(f, CAP, D);
		unsigned char *k = malloc(kb * PAGES), *v = malloc(vb * PAGES);
		double t0, t1, t2, slots = (double)REPS * PAGES * CAP;

		if (!k || !v)
			return 1;
		memset(k, 0, kb * PAGES); /* fault the pages in before timing */
		memset(v, 0, vb * PAGES);
		t0 = now_us();
		for (int p = 0; p < PAGES; p++)
			kv_tier_pack(f, k + p * kb, v + p * vb, CAP, D, K, V, CAP);
		t1 = now_us();
		for (int r = 0; r < REPS; r++)
			for (int p = 0; p < PAGES; p++)
				for (uint32_t j = 0; j < CAP; j++) {
					kv_tier_load_k(f, k + p * kb, CAP, D, j, out);
					kv_tier_load_v(f, v + p * vb, CAP, D, j, out + D);
				}
		t2 = now_us();
		printf("kv %s (%s): pack %.0f ns/slot, load K+V %.0f ns/slot, %.1f GB/s\n", kv_fmt_name(f),
		       kv_tier_kernel_name(), (t1 - t0) / (PAGES * CAP) * 1e3, (t2 - t1) / slots * 1e3,
		       (double)(kb + vb) * PAGES * REPS / (t2 - t1) * 1e-3);
		free(k);
		free(v);
	}
	free(K);
	free(V);
	free(out);
	return 0;
}


/* ---- matmul ------------------------------------------------------------------ */

struct bench_read {
	const unsigned char *p;
	size_t n;
	uint64_t sums[8];
};

static void read_worker(void *ctx, int ith, int nth)
{
	struct bench_read *r = ctx;
	size_t lo = r->n / 64 * (size_t)ith / (size_t)nth * 64, hi = r->n / 64 * (size_t)(ith + 1) / (size_t)nth * 64;
	uint64_t s[8] = { 0 };

	for (const uint64_t *w = (const uint64_t *)(r->p + lo); w < (const uint64_t *)(r->p + hi); w += 8)
		for (int k = 0; k < 8; k++)
			s[k] += w[k];
	r->sums[ith & 7] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* A matrix of `rows` x cols of type t: 64 distinct random rows, repeated
 * (the speed does not depend on the values), in the loader's layout. */
static int mm_make(uint32_t t, int64_t rows, int64_t cols, struct ops_mat *w, void **mem)
{
	size_t rb = tkv_dtype_row_size(t, (uint64_t)cols), sz = rb * (size_t)rows;
	float *x = malloc(sizeof(float) * (size_t)cols);
	unsigned char *m = aligned_alloc(64, (sz + 63) / 64 * 64), *packed;

	if (!x || !m)
		return -1;
	for (int64_t r = 0; r < rows; r++) {
		if (r < 64) {
			for (int64_t c = 0; c < cols; c++)
				x[c] = tu_rng_gauss();
			if (ops_quantize_row(t, x, m + (size_t)r * rb, cols))
				return -1;
		} else {
			memcpy(m + (size_t)r * rb, m + (size_t)(r % 64) * rb, rb);
		}
	}
	free(x);
	*w = (struct ops_mat){ .data = m, .type = t, .rows = rows, .cols = cols, .row_bytes = rb };
	*mem = m;
	if (ops_repack_size(w)) {
		packed = aligned_alloc(64, (ops_repack_size(w) + 63) / 64 * 64);
		if (!packed)
			return -1;
		ops_repack(w, packed);
		free(m);
		*mem = packed;
	}
	return 0;
}

/* Best seconds of `reps` products of n activation rows. */
static double mm_time(struct tpool *tp, const struct ops_mat *w, const float *x, float *y, int n, void *work,
		      size_t ws, int reps)
{
	const struct ops_mat *wl[1] = { w };
	float *yl[1] = { y };
	double best = 1e30;

	ops_matmul_n(tp, wl, yl, 1, x, n, work, ws);
	for (int r = 0; r < reps; r++) {
		double t0 = now_us(), dt;

		ops_matmul_n(tp, wl, yl, 1, x, n, work, ws);
		dt = now_us() - t0;
		if (dt < best)
			best = dt;
	}
	return best * 1e-6;
}

static int bench_mm_type(uint32_t t, struct tpool *const tps[2])
{
	enum { COLS = 2048, PP = 64 };
	const int64_t big_rows = (int64_t)((256u << 20) / tkv_dtype_row_size(t, COLS)) / 64 * 64;
	const int64_t small_rows = (int64_t)((512u << 10) / tkv_dtype_row_size(t, COLS)) / 64 * 64;
	size_t ws = ops_matmul_work_size(COLS, PP, 2);
	float *x = malloc(sizeof(float) * COLS * PP), *y = malloc(sizeof(float) * (size_t)big_rows * PP);
	void *work = aligned_alloc(64, (ws + 63) / 64 * 64), *mb = NULL, *ms = NULL;
	struct ops_mat big, small;
	size_t bytes_big, bytes_small;

	if (!x || !y || !work || mm_make(t, big_rows, COLS, &big, &mb) || mm_make(t, small_rows, COLS, &small, &ms))
		return 1;
	for (int i = 0; i < COLS * PP; i++)
		x[i] = tu_rng_gauss();
	bytes_big = (size_t)big_rows * big.row_bytes;
	bytes_small = (size_t)small_rows * small.row_bytes;
	for (int k = 0; k < 2; k++) {
		struct bench_read rd = { .p = big.data, .n = bytes_big };
		double t_read = 1e30, t_big, t_small, t_pp;

		tpool_run(tps[k], read_worker, &rd);
		for (int r = 0; r < 5; r++) {
			double t0 = now_us();

			tpool_run(tps[k], read_worker, &rd);
			if (now_us() - t0 < t_read)
				t_read = now_us() - t0;
		}
		t_read *= 1e-6;
		t_big = mm_time(tps[k], &big, x, y, 1, work, ws, 5);
		t_small = mm_time(tps[k], &small, x, y, 1, work, ws, 200);
		t_pp = mm_time(tps[k], &small, x, y, PP, work, ws, 10);
		printf("mm %-6s %d thr (%s%s): decode %6.1f GB/s = %3.0f%% of a read (%5.1f GB/s); from L2 %6.1f GB/s; "
		       "pp%d %6.1f GFLOP/s\n",
		       tkv_dtype_name(t), k + 1, tkv_kernel_level(), big.layout == OPS_LAYOUT_X8 ? ", x8" : "",
		       bytes_big / t_big * 1e-9, 100.0 * t_read / t_big, bytes_big / t_read * 1e-9,
		       bytes_small / t_small * 1e-9, PP, 2.0 * PP * small_rows * COLS / t_pp * 1e-9);
	}
	free(mb);
	free(ms);
	free(work);
	free(x);
	free(y);
	return 0;
}

static int bench_mm(int argc, char **argv)
{
	static const uint32_t all[] = { TKV_Q4_0, TKV_Q8_0, TKV_Q4_K, TKV_Q5_K, TKV_Q6_K, TKV_Q4_1, TKV_Q5_0, TKV_Q5_1, TKV_Q2_K, TKV_Q3_K, TKV_IQ4_NL, TKV_IQ4_XS };
	struct tpool *tps[2] = { NULL, NULL };
	int rc = 0;

	tu_rng_seed(7);
	if (tpool_init(&tps[1], 2, NULL, NULL) != TKV_OK)
		return 1;
	for (size_t i = 0; i < sizeof all / sizeof all[0] && !rc; i++) {
		int want = argc == 0;

		for (int a = 0; a < argc; a++)
			want |= !strcmp(argv[a], tkv_dtype_name(all[i]));
		if (want)
			rc = bench_mm_type(all[i], tps);
	}
	tpool_free(tps[1]);
	return rc;
}

typedef void (*accum_q_fn)(uint32_t, const void *, uint32_t, uint32_t, uint32_t, uint32_t, const float *, size_t,
			   uint32_t, float *);
typedef int (*score_q_fn)(uint32_t, const void *, uint32_t, uint32_t, uint32_t, const float *, uint32_t, float,
			  float *, size_t, const float *);

static int bench_attn(void)
{
	enum { CAP = 64, NQ = 8, REPS = 20000 };
	const char *names[] = { "ref", "avx2", "vnni-256", "avx512" };
	score_q_fn score[4] = { kv_score_q_ref, NULL, NULL, NULL };
	accum_q_fn accum[4] = { kv_accum_q_ref, NULL, NULL, NULL };
	const char *lvl = tkv_kernel_level();

	if (strcmp(lvl, "ref")) {
		score[1] = kv_score_q_avx2;
		accum[1] = kv_accum_q_avx2;
	}
	if (!strcmp(lvl, "avx512")) {
		score[2] = kv_score_q_vnni;
		accum[2] = kv_accum_q_avx2;
		score[3] = kv_score_q_avx512;
		accum[3] = kv_accum_q_avx512;
	}
	tu_rng_seed(11);
	for (uint32_t d = 64; d <= 128; d *= 2) {
		size_t kb = kv_tier_k_bytes(KV_FMT_Q4, CAP, d), vb = kv_tier_v_bytes(KV_FMT_Q4, CAP, d);
		void *kreg = malloc(kb), *vreg = malloc(vb);
		float *K = malloc(sizeof(float) * CAP * d), *V = malloc(sizeof(float) * CAP * d);
		float *q = malloc(sizeof(float) * NQ * d), *out = calloc((size_t)NQ * d, sizeof(float));
		float logit[NQ * CAP], w[NQ * CAP];

		if (!kreg || !vreg || !K || !V || !q || !out)
			return 1;
		for (uint32_t i = 0; i < CAP * d; i++) {
			K[i] = tu_rng_gauss();
			V[i] = tu_rng_gauss();
		}
		for (uint32_t i = 0; i < NQ * d; i++)
			q[i] = tu_rng_gauss();
		for (uint32_t i = 0; i < NQ * CAP; i++)
			w[i] = tu_rng_f(0.0f, 1.0f / CAP);
		kv_tier_pack(KV_FMT_Q4, kreg, vreg, CAP, d, K, V, CAP);
		for (int k = 0; k < 4; k++) {
			double t0, ts, ta;
			int reps = k == 0 ? REPS / 20 : REPS;

			if (!score[k])
				continue;
			t0 = now_us();
			for (int r = 0; r < reps; r++)
				score[k](4, kreg, 0, CAP, d, q, NQ, 0.125f, logit, CAP, NULL);
			ts = now_us() - t0;
			t0 = now_us();
			for (int r = 0; r < reps; r++)
				accum[k](4, vreg, CAP, 0, CAP, d, w, CAP, NQ, out);
			ta = now_us() - t0;
			printf("attn q4 d %3u, %d heads (%s): score %6.2f ns/slot, values %6.2f ns/slot\n", d, NQ, names[k],
			       ts * 1e3 / reps / CAP, ta * 1e3 / reps / CAP);
		}
		/* f16 pages (hot slots, the full cache) */
		if (score[1]) {
			static uint16_t K16[CAP * 128], V16[CAP * 128];
			double t0, ts, ta;

			for (uint32_t i = 0; i < CAP * d; i++) {
				K16[i] = ops_f32_to_f16(K[i]);
				V16[i] = ops_f32_to_f16(V[i]);
			}
			t0 = now_us();
			for (int r = 0; r < REPS; r++)
				kv_score_f16_avx2(K16, CAP, d, q, NQ, 0.125f, logit, CAP);
			ts = now_us() - t0;
			t0 = now_us();
			for (int r = 0; r < REPS; r++)
				kv_accum_f16_avx2(V16, CAP, d, w, CAP, NQ, out);
			ta = now_us() - t0;
			printf("attn f16 d %3u, %d heads (avx2): score %6.2f ns/slot, values %6.2f ns/slot\n", d, NQ,
			       ts * 1e3 / REPS / CAP, ta * 1e3 / REPS / CAP);
		}
		free(kreg);
		free(vreg);
		free(K);
		free(V);
		free(q);
		free(out);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "all";
	int all = !strcmp(what, "all");

	if (!all && strcmp(what, "tpool") && strcmp(what, "kv") && strcmp(what, "mm") && strcmp(what, "attn")) {
		fprintf(stderr, "usage: bench_kernels [all|tpool|kv|mm [TYPE...]|attn]\n");
		return 2;
	}
	if ((all || !strcmp(what, "tpool")) && bench_tpool())
		return 1;
	if ((all || !strcmp(what, "kv")) && bench_kv())
		return 1;
	if ((all || !strcmp(what, "mm")) && bench_mm(all ? 0 : argc - 2, argv + 2))
		return 1;
	if ((all || !strcmp(what, "attn")) && bench_attn())
		return 1;
	return 0;
}
