/* tpool.c - persistent worker threads with a cheap fork/join.
 *
 * Protocol (all counters are C11 atomics):
 *  - The caller writes fn/ctx (plain fields), resets n_done, then bumps `gen`
 *    with release order. A worker that acquire-loads the new gen therefore sees
 *    fn/ctx of this run.
 *  - Each worker runs fn(ctx, ith, nth) and adds 1 to n_done (release); the
 *    caller, after running its own share as thread 0, spins until n_done ==
 *    nth - 1 (acquire), so the next run's writes to fn/ctx happen after every
 *    worker has read them.
 *  - Between runs a worker spins on gen for up to TPOOL_SPIN_NS (50 us: longer
 *    than the serial gaps between the ~100 runs of a decode step, because a
 *    condvar wakeup costs 5-100+ us, worst on VMs with halted vCPUs), then
 *    sleeps on a condition variable. No spinning when there are more threads
 *    than CPUs. A worker announces sleeping by incrementing n_sleeping under
 *    the mutex and then rechecks gen; the caller bumps gen and then reads
 *    n_sleeping (both seq_cst), so either the worker sees the new gen or the
 *    caller sees the sleeper and broadcasts under the mutex: no lost wakeup,
 *    and no mutex traffic at all while the workers are spinning.
 *  - tpool_free sets `stop`, bumps gen, broadcasts and joins every worker. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_* */
#include "util/tpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/alloc.h"
#include "util/clock.h"
#include "util/status.h"

#define TPOOL_MAX_THREADS 512
#define TPOOL_SPIN_NS 50000   /* how long an idle worker spins before sleeping */
#define TPOOL_SPIN_CHECK 64    /* pause instructions between clock reads */

#if defined(__x86_64__) || defined(__i386__)
static inline void tpool_pause(void) { __builtin_ia32_pause(); }
#elif defined(__aarch64__) || defined(__arm__)
static inline void tpool_pause(void) { __asm__ __volatile__("yield" ::: "memory"); }
#else
static inline void tpool_pause(void) { atomic_signal_fence(memory_order_seq_cst); }
#endif

struct tpool;

struct tpool_worker {
	struct tpool *pool;
	int ith;              /* 1..n-1 */
	pthread_t thread;
};

struct tpool {
	/* Written by the caller, read by workers; one cache line each so the
	 * spinning workers and the finishing workers do not share a line. */
	alignas(64) atomic_uint gen;    /* run generation; bumped per run */
	alignas(64) atomic_int n_done;  /* workers finished with this run */
	alignas(64) atomic_int n_sleeping; /* workers blocked on cv */
	atomic_bool stop;

	tpool_fn fn;          /* this run's work; valid once gen is seen */
	void *ctx;

	int n;                /* threads including the caller */
	int64_t spin_ns;      /* idle spin budget; 0 when threads > CPUs */
	int n_started;        /* workers created (for cleanup) */
	struct tpool_worker *workers; /* (n - 1) */
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	struct tkv_alloc *a;
};

/* CPUs this process may run on (affinity mask), else online CPUs; >= 1. */
static int tpool_n_cpus(void)
{
	cpu_set_t set;
	long online;

	if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 1)
		return CPU_COUNT(&set);
	online = sysconf(_SC_NPROCESSORS_ONLN);
	return online >= 1 ? (int)(online > TPOOL_MAX_THREADS ? TPOOL_MAX_THREADS : online) : 1;
}

/* Waits until gen differs from seen; returns the new gen. */
static unsigned tpool_wait_gen(struct tpool *p, unsigned seen)
{
	unsigned g;
	int64_t t0 = (int64_t)util_now_ns();
	int i;

	for (;;) {
		for (i = 0; i < TPOOL_SPIN_CHECK; i++) {
			g = atomic_load_explicit(&p->gen, memory_order_acquire);
			if (g != seen)
				return g;
			tpool_pause();
		}
		if ((int64_t)util_now_ns() - t0 > p->spin_ns)
			break;
	}

	pthread_mutex_lock(&p->mtx);
	atomic_fetch_add(&p->n_sleeping, 1);
	while ((g = atomic_load(&p->gen)) == seen)
		pthread_cond_wait(&p->cv, &p->mtx);
	atomic_fetch_sub(&p->n_sleeping, 1);
	pthread_mutex_unlock(&p->mtx);
	return g;
}

static void *tpool_worker_main(void *arg)
{
	struct tpool_worker *w = arg;
	struct tpool *p = w->pool;
	unsigned seen = 0; /* gen when workers are created; a late start must not skip run 1 */

	for (;;) {
		seen = tpool_wait_gen(p, seen);
		if (atomic_load(&p->stop))
			break;
		p->fn(p->ctx, w->ith, p->n);
		atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
	}
	return NULL;
}

/* Bumps gen and wakes sleepers; `always` forces the broadcast (shutdown). */
static void tpool_kick(struct tpool *p, bool always)
{
	atomic_fetch_add(&p->gen, 1); /* seq_cst: pairs with n_sleeping, see top */
	if (always || atomic_load(&p->n_sleeping) > 0) {
		pthread_mutex_lock(&p->mtx);
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mtx);
	}
}

int tpool_init(struct tpool **out, int n_threads, struct tkv_alloc *a, struct tkv_error *err)
{
	struct tpool *p;
	int i, rc;

	if (!out)
		return tkv_errf(err, TKV_ERR_ARG, "tpool: out must not be NULL");
	*out = NULL;
	if (n_threads < 1 || n_threads > TPOOL_MAX_THREADS)
		return tkv_errf(err, TKV_ERR_ARG, "tpool: n_threads %d must be in 1..%d",
				n_threads, TPOOL_MAX_THREADS);

	p = tkv_calloc(a, 1, sizeof *p);
	if (!p)
		goto out_nomem;
	p->a = a;
	p->n = n_threads;
	/* Spinning only pays when every thread has a CPU; oversubscribed, a
	 * spinning idle worker steals the CPU a busy one needs. */
	p->spin_ns = n_threads <= tpool_n_cpus() ? TPOOL_SPIN_NS : 0;
	atomic_init(&p->gen, 0);
	atomic_init(&p->n_done, 0);
	atomic_init(&p->n_sleeping, 0);
	atomic_init(&p->stop, false);
	if (n_threads > 1) {
		p->workers = tkv_calloc(a, (size_t)(n_threads - 1), sizeof *p->workers);
		if (!p->workers)
			goto out_free_pool;
	}
	rc = pthread_mutex_init(&p->mtx, NULL);
	if (rc)
		goto out_free_workers;
	rc = pthread_cond_init(&p->cv, NULL);
	if (rc)
		goto out_destroy_mtx;

	for (i = 1; i < n_threads; i++) {
		struct tpool_worker *w = &p->workers[i - 1];

		w->pool = p;
		w->ith = i;
		rc = pthread_create(&w->thread, NULL, tpool_worker_main, w);
		if (rc) {
			tpool_free(p); /* joins the workers started so far */
			return tkv_errf(err, rc == EAGAIN ? TKV_ERR_NOMEM : TKV_ERR_INTERNAL,
					"tpool: cannot create worker thread %d of %d: %s",
					i, n_threads - 1, strerror(rc));
		}
		p->n_started++;
	}
	*out = p;
	return TKV_OK;

out_destroy_mtx:
	pthread_mutex_destroy(&p->mtx);
out_free_workers:
	tkv_free(a, p->workers);
	tkv_free(a, p);
	return tkv_errf(err, TKV_ERR_INTERNAL, "tpool: cannot initialise mutex/condvar: %s",
			strerror(rc));
out_free_pool:
	tkv_free(a, p);
out_nomem:
	return tkv_errf(err, TKV_ERR_NOMEM, "tpool: out of memory for a %d-thread pool",
			n_threads);
}

void tpool_free(struct tpool *p)
{
	int i;

	if (!p)
		return;
	atomic_store(&p->stop, true);
	tpool_kick(p, true);
	for (i = 0; i < p->n_started; i++)
		pthread_join(p->workers[i].thread, NULL);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mtx);
	tkv_free(p->a, p->workers);
	tkv_free(p->a, p);
}

int tpool_n(const struct tpool *p)
{
	return p ? p->n : 1;
}

void tpool_run(struct tpool *p, tpool_fn fn, void *ctx)
{
	int want, i = 0;

	if (!p || p->n == 1) {
		fn(ctx, 0, 1);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
	tpool_kick(p, false);

	fn(ctx, 0, p->n);

	/* Workers usually finish with us; yield now and then in case a worker
	 * was descheduled (more threads than cores). */
	want = p->n - 1;
	while (atomic_load_explicit(&p->n_done, memory_order_acquire) != want) {
		tpool_pause();
		if (p->spin_ns == 0 || ++i % 1024 == 0)
			sched_yield();
	}
}

/* ---- topology ---------------------------------------------------------- */

static int tpool_read_int(const char *path, int *v)
{
	FILE *f = fopen(path, "r");
	int ok;

	if (!f)
		return -1;
	ok = fscanf(f, "%d", v) == 1;
	fclose(f);
	return ok ? 0 : -1;
}

/* Counts distinct (package, core) pairs among the CPUs this process may run
 * on (so a cpuset or taskset is honoured); falls back to the number of such
 * CPUs when sysfs topology is missing, then to online CPUs. */
int tpool_default_threads(void)
{
	int keys[CPU_SETSIZE][2]; /* (package, core) seen so far; 8 KiB */
	int n_cpus, n_cores = 0, cpu, j;
	cpu_set_t set;
	char path[128];

	if (sched_getaffinity(0, sizeof set, &set) != 0)
		goto out_online;
	n_cpus = CPU_COUNT(&set);
	for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		int core, pkg;

		if (!CPU_ISSET(cpu, &set))
			continue;
		snprintf(path, sizeof path,
			 "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
		if (tpool_read_int(path, &core))
			goto out_cpus;
		snprintf(path, sizeof path,
			 "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
		if (tpool_read_int(path, &pkg))
			goto out_cpus;
		for (j = 0; j < n_cores; j++)
			if (keys[j][0] == pkg && keys[j][1] == core)
				break;
		if (j == n_cores) {
			keys[n_cores][0] = pkg;
			keys[n_cores][1] = core;
			n_cores++;
		}
	}
	if (n_cores >= 1)
		return n_cores > TPOOL_MAX_THREADS ? TPOOL_MAX_THREADS : n_cores;
out_cpus:
	if (n_cpus >= 1)
		return n_cpus > TPOOL_MAX_THREADS ? TPOOL_MAX_THREADS : n_cpus;
out_online:
	return tpool_n_cpus();
}
