/* alloc.h - the one counting allocator.
 *
 * Everything the library allocates goes through tkv_malloc/tkv_calloc/
 * tkv_realloc/tkv_free with a `struct tkv_alloc` (defined here; tierkv.h only
 * names it, so the public header holds no atomics), so live and
 * peak bytes are exact and a test can make the Nth allocation fail. A NULL
 * allocator means "count nothing, never fail on purpose" (the blocks are laid out
 * the same way, so tkv_free works for both).
 *
 * Blocks are 64-byte aligned (a cache line, and enough for any SIMD load). */
#ifndef TKV_UTIL_ALLOC_H
#define TKV_UTIL_ALLOC_H

#include <stdatomic.h>
#include <stddef.h>

#include "tierkv.h"

/* Zero-initialise one (`struct tkv_alloc a = {0};`) or make one with
 * tkv_alloc_init. Tests set fail_at = N to make the Nth allocation call
 * (1-based) fail, and every one after it for fail_count calls (0 = all later
 * calls). Embedders read the counters with tkv_alloc_get_stats. */
struct tkv_alloc {
	atomic_size_t live;              /* bytes currently allocated */
	atomic_size_t peak;              /* high-water mark of live */
	atomic_ullong n_calls;           /* allocation calls so far */
	unsigned long long fail_at;      /* 0 = never fail */
	unsigned long long fail_count;   /* 0 = fail forever once fail_at is reached */
};

/* tkv_malloc, tkv_calloc, tkv_realloc, tkv_free and tkv_strndup are public
 * (tierkv.h): a failure injected by fail_at is a NULL like any other. */

/* n*size with overflow check: returns 0 and sets *out, or -1 on overflow. */
static inline int tkv_mul_ok(size_t n, size_t size, size_t *out)
{
	if (size != 0 && n > (size_t)-1 / size)
		return -1;
	*out = n * size;
	return 0;
}

#endif
