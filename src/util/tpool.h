/* tpool.h - a persistent pool of worker threads.
 *
 * tpool_run(fn, ctx) calls fn(ctx, ith, nth) once on each of nth threads (the
 * caller is thread 0) and returns when all have finished; workers wait between
 * runs (spin briefly, then sleep on a condition variable), so a run costs a few
 * microseconds, not a thread creation. Work is split by the callee from ith/nth. */
#ifndef TKV_UTIL_TPOOL_H
#define TKV_UTIL_TPOOL_H

#include "tierkv.h"

struct tpool;

typedef void (*tpool_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1 (1 = no workers, everything on the caller). */
int tpool_init(struct tpool **out, int n_threads, struct tkv_alloc *a, struct tkv_error *err);
void tpool_free(struct tpool *p);
int tpool_n(const struct tpool *p);
/* p may be NULL: then fn(ctx, 0, 1) runs on the caller. Not reentrant. */
void tpool_run(struct tpool *p, tpool_fn fn, void *ctx);
/* Physical cores of this machine (falls back to online CPUs), at least 1. */
int tpool_default_threads(void);

#endif
