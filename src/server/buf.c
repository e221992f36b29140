/* buf.c - a growable byte buffer, always NUL-terminated once it holds anything,
 * on its allocator (b->a; a zeroed buffer is uncounted). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_impl.h"

static int buf_reserve(struct srv_buf *b, size_t extra)
{
	size_t cap;
	char *p;

	if (extra > (size_t)-1 / 2 - b->len)
		return -1;
	if (b->len + extra + 1 <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < b->len + extra + 1)
		cap *= 2;
	p = tkv_realloc(b->a, b->p, cap);
	if (!p)
		return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

int srv_buf_add(struct srv_buf *b, const char *s, size_t n)
{
	if (buf_reserve(b, n))
		return -1;
	if (n)
		memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
	return 0;
}

int srv_buf_str(struct srv_buf *b, const char *s)
{
	return srv_buf_add(b, s, strlen(s));
}

int srv_buf_printf(struct srv_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || buf_reserve(b, (size_t)n))
		return -1;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void srv_buf_free(struct srv_buf *b)
{
	tkv_free(b->a, b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}
