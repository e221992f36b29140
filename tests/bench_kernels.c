/* bench_kernels.c - timings that are no test (machines differ): the thread
 * pool's fork/join cost, and what loading costs per KV page format. Built
 * with the tests (build/tests/bench_kernels), not run by ctest; the kernel
 * level follows TIERKV_KERNELS like everything else (util/cpu.h).
 *
 *   build/tests/bench_kernels            both
 *   build/tests/bench_kernels tpool|kv   one of them */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/tier.h"
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

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "all";
	int all = !strcmp(what, "all");

	if (!all && strcmp(what, "tpool") && strcmp(what, "kv")) {
		fprintf(stderr, "usage: bench_kernels [all|tpool|kv]\n");
		return 2;
	}
	if ((all || !strcmp(what, "tpool")) && bench_tpool())
		return 1;
	if ((all || !strcmp(what, "kv")) && bench_kv())
		return 1;
	return 0;
}
