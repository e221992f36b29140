/* chat_io.c - `tierkv chat`'s input: lines from standard input that Ctrl-C
 * can interrupt, and the check that a line is text (chat.h). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/chat.h"

volatile sig_atomic_t chat_sigint;

static void on_sigint(int sig)
{
	(void)sig;
	chat_sigint = 1;
}

int chat_signals_init(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;   /* no SA_RESTART: a read waiting at the prompt returns EINTR */
	return sigaction(SIGINT, &sa, NULL);
}

int chat_buf_add(struct chat_buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		if (!(p = realloc(b->p, cap)))
			return -1;
		b->p = p;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
	return 0;
}

void chat_buf_free(struct chat_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

/* Refills r->buf; 1 when bytes came, 0 at end of input, or a chat_read error. */
static int fill(struct chat_reader *r)
{
	ssize_t n;

	if (r->eof)
		return 0;
	do {
		if (chat_sigint)
			return CHAT_READ_INTERRUPTED;
		n = read(STDIN_FILENO, r->buf, sizeof r->buf);
	} while (n < 0 && errno == EINTR && !chat_sigint);
	if (n < 0)
		return errno == EINTR ? CHAT_READ_INTERRUPTED : CHAT_READ_ERROR;
	if (n == 0) {
		r->eof = true;
		return 0;
	}
	r->pos = 0;
	r->len = (size_t)n;
	return 1;
}

enum chat_read chat_read_line(struct chat_reader *r, struct chat_buf *line, size_t *too_long)
{
	size_t seen = 0;
	bool any = false;

	line->len = 0;
	if (line->p)
		line->p[0] = 0;
	*too_long = 0;
	for (;;) {
		char *nl;
		size_t n;

		if (r->pos == r->len) {
			int st = fill(r);

			if (st < 0)
				return (enum chat_read)st;
			if (st == 0)
				break;
		}
		any = true;
		nl = memchr(r->buf + r->pos, '\n', r->len - r->pos);
		n = nl ? (size_t)(nl - (r->buf + r->pos)) : r->len - r->pos;
		if (seen + n <= CHAT_MAX_LINE && chat_buf_add(line, r->buf + r->pos, n))
			return CHAT_READ_ERROR;
		seen += n;
		r->pos += n + (nl ? 1 : 0);
		if (nl)
			break;
	}
	if (!any)
		return CHAT_READ_EOF;
	if (seen > CHAT_MAX_LINE) {
		*too_long = seen;
		line->len = 0;
		if (line->p)
			line->p[0] = 0;
		return CHAT_READ_LINE;
	}
	if (line->len && line->p[line->len - 1] == '\r')
		line->p[--line->len] = 0;
	return CHAT_READ_LINE;
}

/* Length of the UTF-8 sequence at s (n bytes left), 0 when it is not one:
 * no overlong forms, surrogates or code points past U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	uint32_t c;
	size_t k;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		k = 2, c = s[0] & 0x1F;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		k = 3, c = s[0] & 0x0F;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		k = 4, c = s[0] & 0x07;
	else
		return 0;
	if (k > n)
		return 0;
	for (size_t i = 1; i < k; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3F);
	}
	if ((k == 3 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) || (k == 4 && (c < 0x10000 || c > 0x10FFFF)))
		return 0;
	return k;
}

const char *chat_check_text(const char *text, size_t n, size_t *at)
{
	const unsigned char *s = (const unsigned char *)text;

	for (size_t i = 0; i < n;) {
		size_t k = utf8_len(s + i, n - i);

		*at = i;
		if (!k)
			return "is not valid UTF-8";
		if (k == 1 && ((s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7F))
			return "holds a control byte (binary input?)";
		i += k;
	}
	return NULL;
}
