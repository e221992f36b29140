/* test_tpool.c - thread pool: every ith runs once per run, back-to-back runs,
 * sleeping workers wake, runs around the spin window, NULL pool, allocation
 * failure. */
#include "testutil.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/tpool.h"

#define MAX_N 8

struct count_ctx {
	atomic_int hits[MAX_N]; /* per ith, this run */
	atomic_int bad_nth;     /* calls that saw the wrong nth */
	int want_nth;
	long total;             /* plain: written only by ith 0 */
};

static void count_fn(void *arg, int ith, int nth)
{
	struct count_ctx *c = arg;

	if (nth != c->want_nth || ith < 0 || ith >= MAX_N)
		atomic_fetch_add(&c->bad_nth, 1);
	else
		atomic_fetch_add(&c->hits[ith], 1);
	if (ith == 0)
		c->total++;
}

static void reset_hits(struct count_ctx *c)
{
	int i;

	for (i = 0; i < MAX_N; i++)
		atomic_store(&c->hits[i], 0);
}

static void check_one_run(struct count_ctx *c, int n)
{
	int i;

	for (i = 0; i < MAX_N; i++)
		assert_int_equal(atomic_load(&c->hits[i]), i < n ? 1 : 0);
	assert_int_equal(atomic_load(&c->bad_nth), 0);
}

static void test_each_ith_once(void **state)
{
	int n;

	(void)state;
	for (n = 1; n <= 4; n++) {
		struct tkv_alloc a = {0};
		struct tpool *p = NULL;
		struct count_ctx c;
		int r;

		memset(&c, 0, sizeof c);
		c.want_nth = n;
		assert_int_equal(tpool_init(&p, n, &a, NULL), TKV_OK);
		assert_non_null(p);
		assert_int_equal(tpool_n(p), n);
		for (r = 0; r < 5000; r++) {
			reset_hits(&c);
			tpool_run(p, count_fn, &c);
			check_one_run(&c, n);
		}
		assert_int_equal(c.total, 5000);
		tpool_free(p);
		assert_int_equal(atomic_load(&a.live), 0);
	}
}

/* Slices of an array written by each thread, summed afterwards: checks that
 * the workers' writes are visible to the caller when tpool_run returns. */
struct fill_ctx {
	int *v;
	int len;
	int round;
};

static void fill_fn(void *arg, int ith, int nth)
{
	struct fill_ctx *f = arg;
	int lo = f->len * ith / nth, hi = f->len * (ith + 1) / nth, i;

	for (i = lo; i < hi; i++)
		f->v[i] = f->round + i;
}

static void test_results_visible(void **state)
{
	int v[1000];
	struct fill_ctx f = { v, 1000, 0 };
	struct tpool *p = NULL;
	int r, i;

	(void)state;
	assert_int_equal(tpool_init(&p, 4, NULL, NULL), TKV_OK);
	for (r = 0; r < 3000; r++) {
		f.round = r;
		tpool_run(p, fill_fn, &f);
		for (i = 0; i < 1000; i++)
			assert_int_equal(v[i], r + i);
	}
	tpool_free(p);
}

/* Runs separated by longer than the spin window: workers go to sleep on the
 * condition variable and must be woken for every run. */
static void test_wake_after_sleep(void **state)
{
	struct tpool *p = NULL;
	struct count_ctx c;
	struct timespec ts = { 0, 2 * 1000 * 1000 }; /* 2 ms */
	int r;

	(void)state;
	memset(&c, 0, sizeof c);
	c.want_nth = 3;
	assert_int_equal(tpool_init(&p, 3, NULL, NULL), TKV_OK);
	for (r = 0; r < 50; r++) {
		reset_hits(&c);
		tpool_run(p, count_fn, &c);
		check_one_run(&c, 3);
		nanosleep(&ts, NULL);
	}
	tpool_free(p);
}

static void test_null_pool(void **state)
{
	struct count_ctx c;

	(void)state;
	memset(&c, 0, sizeof c);
	c.want_nth = 1;
	tpool_run(NULL, count_fn, &c);
	check_one_run(&c, 1);
	assert_int_equal(tpool_n(NULL), 1);
	tpool_free(NULL);
}

static void test_free_idle_and_unused(void **state)
{
	struct tpool *p = NULL;

	(void)state;
	/* Never run: workers are parked on their first wait. */
	assert_int_equal(tpool_init(&p, 4, NULL, NULL), TKV_OK);
	tpool_free(p);
}

static void test_bad_args(void **state)
{
	struct tpool *p = (struct tpool *)1;
	struct tkv_error err = {0};

	(void)state;
	assert_int_equal(tpool_init(&p, 0, NULL, &err), TKV_ERR_ARG);
	assert_null(p);
	assert_int_equal(err.status, TKV_ERR_ARG);
	assert_non_null(strstr(err.msg, "n_threads"));
	assert_int_equal(tpool_init(&p, -3, NULL, NULL), TKV_ERR_ARG);
	assert_int_equal(tpool_init(NULL, 2, NULL, NULL), TKV_ERR_ARG);
}

static void test_default_threads(void **state)
{
	int n = tpool_default_threads();
	long online = sysconf(_SC_NPROCESSORS_ONLN);

	(void)state;
	assert_true(n >= 1);
	if (online >= 1)
		assert_true(n <= online);
}

static void test_alloc_failure(void **state)
{
	unsigned long long k;

	(void)state;
	/* Fail each allocation of init in turn; every failure is clean. */
	for (k = 1; k <= 4; k++) {
		struct tkv_alloc a = {0};
		struct tkv_error err = {0};
		struct tpool *p = NULL;
		int rc;

		a.fail_at = k;
		rc = tpool_init(&p, 3, &a, &err);
		if (rc == TKV_OK) {
			/* k is past the number of allocations init makes */
			assert_non_null(p);
			tpool_free(p);
		} else {
			tu_expect_nomem(rc, p, &err, "tpool");
		}
		assert_int_equal(atomic_load(&a.live), 0);
	}
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Runs after serial work on the caller of 5, 20 and 200 us, around the spin
 * window (as in a decode step: the workers still spinning, just asleep, long
 * asleep): every run calls each ith exactly once with the right nth and
 * returns after all of them. The timings are in tests/bench_kernels.c. */
static void test_runs_after_gaps(void **state)
{
	static const double gaps[] = { 5, 20, 200 };

	(void)state;
	for (int n = 2; n <= 4; n++) {
		struct tpool *p = NULL;
		struct count_ctx c;

		memset(&c, 0, sizeof c);
		c.want_nth = n;
		assert_int_equal(tpool_init(&p, n, NULL, NULL), TKV_OK);
		for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++)
			for (int r = 0; r < 200; r++) {
				double until = now_us() + gaps[g];

				while (now_us() < until)
					;
				reset_hits(&c);
				tpool_run(p, count_fn, &c);
				check_one_run(&c, n);
			}
		assert_int_equal(c.total, 600);
		tpool_free(p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_ith_once),
		cmocka_unit_test(test_results_visible),
		cmocka_unit_test(test_wake_after_sleep),
		cmocka_unit_test(test_null_pool),
		cmocka_unit_test(test_free_idle_and_unused),
		cmocka_unit_test(test_bad_args),
		cmocka_unit_test(test_default_threads),
		cmocka_unit_test(test_alloc_failure),
		cmocka_unit_test(test_runs_after_gaps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
