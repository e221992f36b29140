/* threads.c - the public face of the worker pool (tierkv.h: tkv_threads_*):
 * a handle around a struct tpool (util/tpool.c), so the header names no
 * internal type. */
#include <stdlib.h>

#include "util/tpool.h"

struct tkv_threads {
	struct tpool *pool;
};

int tkv_threads_init(struct tkv_threads **out, int n_threads, struct tkv_error *err)
{
	struct tkv_threads *t;
	int st;

	*out = NULL;
	if (!(t = calloc(1, sizeof *t)))
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for a thread pool");
	if ((st = tpool_init(&t->pool, n_threads, NULL, err))) {
		free(t);
		return st;
	}
	*out = t;
	return TKV_OK;
}

void tkv_threads_free(struct tkv_threads *p)
{
	if (!p)
		return;
	tpool_free(p->pool);
	free(p);
}

int tkv_threads_n(const struct tkv_threads *p)
{
	return p ? tpool_n(p->pool) : 1;
}

void tkv_threads_run(struct tkv_threads *p, void (*fn)(void *ctx, int ith, int nth), void *ctx)
{
	tpool_run(p ? p->pool : NULL, fn, ctx);
}

int tkv_default_threads(void)
{
	return tpool_default_threads();
}
