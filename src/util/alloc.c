/* alloc.c - counting allocator with failure injection.
 *
 * Block layout: [64-byte header: size_t payload size][payload ...]. The header
 * keeps payloads 64-byte aligned and lets tkv_free count exactly. Counters are
 * atomics so sessions on several threads can share one allocator. */
#include "util/alloc.h"

#include <stdlib.h>
#include <string.h>

#define TKV_ALLOC_HDR 64

static int should_fail(struct tkv_alloc *a)
{
	unsigned long long call;

	if (!a)
		return 0;
	call = atomic_fetch_add(&a->n_calls, 1) + 1;
	return a->fail_at != 0 && call >= a->fail_at &&
	       (a->fail_count == 0 || call < a->fail_at + a->fail_count);
}

static void count_add(struct tkv_alloc *a, size_t n)
{
	size_t live, peak;

	if (!a)
		return;
	live = atomic_fetch_add(&a->live, n) + n;
	peak = atomic_load(&a->peak);
	while (live > peak && !atomic_compare_exchange_weak(&a->peak, &peak, live))
		;
}

static void count_sub(struct tkv_alloc *a, size_t n)
{
	if (a)
		atomic_fetch_sub(&a->live, n);
}

void *tkv_malloc(struct tkv_alloc *a, size_t n)
{
	unsigned char *b;
	size_t total;

	if (should_fail(a))
		return NULL;
	if (n > (size_t)-1 - 2 * TKV_ALLOC_HDR)
		return NULL;
	total = (n + TKV_ALLOC_HDR + TKV_ALLOC_HDR - 1) & ~(size_t)(TKV_ALLOC_HDR - 1);
	b = aligned_alloc(TKV_ALLOC_HDR, total);
	if (!b)
		return NULL;
	memcpy(b, &n, sizeof n);
	count_add(a, n);
	return b + TKV_ALLOC_HDR;
}

void *tkv_calloc(struct tkv_alloc *a, size_t n, size_t size)
{
	size_t bytes;
	void *p;

	if (tkv_mul_ok(n, size, &bytes))
		return NULL;
	p = tkv_malloc(a, bytes);
	if (p)
		memset(p, 0, bytes);
	return p;
}

static size_t block_size(const void *p)
{
	size_t n;

	memcpy(&n, (const unsigned char *)p - TKV_ALLOC_HDR, sizeof n);
	return n;
}

void *tkv_realloc(struct tkv_alloc *a, void *p, size_t n)
{
	void *q;
	size_t old;

	if (!p)
		return tkv_malloc(a, n);
	q = tkv_malloc(a, n);
	if (!q)
		return NULL;
	old = block_size(p);
	memcpy(q, p, old < n ? old : n);
	tkv_free(a, p);
	return q;
}

void tkv_free(struct tkv_alloc *a, void *p)
{
	if (!p)
		return;
	count_sub(a, block_size(p));
	free((unsigned char *)p - TKV_ALLOC_HDR);
}

char *tkv_strndup(struct tkv_alloc *a, const char *s, size_t len)
{
	char *d;

	if (len == (size_t)-1)
		return NULL;
	d = tkv_malloc(a, len + 1);
	if (!d)
		return NULL;
	memcpy(d, s, len);
	d[len] = 0;
	return d;
}

/* ---- the public handle (tierkv.h) ------------------------------------------- */

int tkv_alloc_init(struct tkv_alloc **out)
{
	*out = calloc(1, sizeof **out);
	return *out ? TKV_OK : TKV_ERR_NOMEM;
}

void tkv_alloc_free(struct tkv_alloc *a)
{
	free(a);
}

void tkv_alloc_get_stats(const struct tkv_alloc *a, struct tkv_alloc_stats *out)
{
	struct tkv_alloc *m = (struct tkv_alloc *)a; /* atomic_load takes a non-const pointer in C11 */

	memset(out, 0, sizeof *out);
	if (!a)
		return;
	out->live = atomic_load(&m->live);
	out->peak = atomic_load(&m->peak);
	out->n_calls = (uint64_t)atomic_load(&m->n_calls);
}
