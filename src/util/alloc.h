/* alloc.h - the one counting allocator.
 *
 * Everything the library allocates goes through tkv_malloc/tkv_calloc/
 * tkv_realloc/tkv_free with a `struct tkv_alloc` (see tierkv.h), so live and
 * peak bytes are exact and a test can make the Nth allocation fail. A NULL
 * allocator means "count nothing, never fail on purpose" (the blocks are laid out
 * the same way, so tkv_free works for both).
 *
 * Blocks are 64-byte aligned (a cache line, and enough for any SIMD load). */
#ifndef TKV_UTIL_ALLOC_H
#define TKV_UTIL_ALLOC_H

#include <stddef.h>

#include "tierkv.h"

/* Returns NULL on failure (or injected failure). n == 0 allocates a minimal block. */
void *tkv_malloc(struct tkv_alloc *a, size_t n);
/* Zeroed; NULL if n*size overflows. */
void *tkv_calloc(struct tkv_alloc *a, size_t n, size_t size);
/* Like realloc; on failure returns NULL and leaves p valid and unchanged. */
void *tkv_realloc(struct tkv_alloc *a, void *p, size_t n);
/* p may be NULL. */
void tkv_free(struct tkv_alloc *a, void *p);
/* Duplicates len bytes of s and adds a NUL. */
char *tkv_strndup(struct tkv_alloc *a, const char *s, size_t len);

/* n*size with overflow check: returns 0 and sets *out, or -1 on overflow. */
static inline int tkv_mul_ok(size_t n, size_t size, size_t *out)
{
	if (size != 0 && n > (size_t)-1 / size)
		return -1;
	*out = n * size;
	return 0;
}

#endif
