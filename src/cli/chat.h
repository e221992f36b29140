/* chat.h - `tierkv chat`'s input side (chat_io.c), shared with chat.c. */
#ifndef TKV_CLI_CHAT_H
#define TKV_CLI_CHAT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

/* The longest input line taken as a message, in bytes. */
#define CHAT_MAX_LINE 65536

/* A growable byte buffer (malloc); NUL-terminated when p is not NULL. */
struct chat_buf {
	char *p;
	size_t len, cap;
};

/* 0 or -1 (out of memory; the buffer keeps what it had). */
int chat_buf_add(struct chat_buf *b, const char *s, size_t n);
void chat_buf_free(struct chat_buf *b);

/* Set by SIGINT (Ctrl-C); cleared by whoever acts on it. */
extern volatile sig_atomic_t chat_sigint;
/* SIGINT sets chat_sigint and interrupts a blocking read (no SA_RESTART). 0 or -1. */
int chat_signals_init(void);

/* Lines of standard input, read with read(2) so that Ctrl-C interrupts a wait. */
struct chat_reader {
	char buf[4096];
	size_t pos, len;
	bool eof;
};

enum chat_read { CHAT_READ_EOF = 0, CHAT_READ_LINE = 1, CHAT_READ_INTERRUPTED = -1, CHAT_READ_ERROR = -2 };

/* The next line (without its newline or a trailing CR) into line. A line
 * longer than CHAT_MAX_LINE bytes is read to its end and dropped: *too_long
 * then holds its length (else 0) and line is empty. A last line without a
 * newline counts. */
enum chat_read chat_read_line(struct chat_reader *r, struct chat_buf *line, size_t *too_long);

/* NULL when s[0..n) is UTF-8 text (tabs allowed, no other control bytes),
 * else what is wrong, in words, with the offending byte's offset in *at. */
const char *chat_check_text(const char *s, size_t n, size_t *at);

#endif
