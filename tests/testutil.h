/* testutil.h - shared helpers for the cmocka tests. */
#ifndef TKV_TESTUTIL_H
#define TKV_TESTUTIL_H

#include <stddef.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <cmocka.h>

/* Tests keep a struct tkv_alloc on the stack and set its fail_at: they see
 * its layout, which tierkv.h keeps private. */
#include "util/alloc.h"

/* Path of a model fixture: $TIERKV_MODELS/name if it exists, else the bundled
 * copy in models/. Returns a static buffer; NULL if neither exists. */
const char *tu_model_path(const char *name);
/* Path of $TIERKV_VOCAB/name (static buffer). */
const char *tu_vocab_path(const char *name);
/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL on error. */
char *tu_read_file(const char *path, size_t *len);

/* An allocation failure reported as one: rc is TKV_ERR_NOMEM, the object the
 * call would have made (out) is NULL, and, given err, so is its status (and
 * its message contains needle, if given). */
void tu_expect_nomem(int rc, const void *out, const struct tkv_error *err, const char *needle);

/* A growing byte buffer for hand-made (and malformed) files: raw bytes,
 * little-endian integers, GGUF strings (a u64 length, then the bytes). Fails
 * the running test when out of memory; the caller frees p. */
struct tu_buf {
	uint8_t *p;
	size_t len, cap;
};

void tu_put(struct tu_buf *b, const void *p, size_t n);
void tu_put_u8(struct tu_buf *b, uint8_t v);
void tu_put_u32(struct tu_buf *b, uint32_t v);
void tu_put_u64(struct tu_buf *b, uint64_t v);
void tu_put_str(struct tu_buf *b, const char *s);

/* A deterministic generator (splitmix64) for test data: seed, 64 random
 * bits, their top 32, a float uniform in [lo, hi) from 32 bits (tu_rng_f)
 * or from 53 (tu_rng_f53). One state per test program, seeded 0x5eed1234
 * until tu_rng_seed. */
void tu_rng_seed(uint64_t seed);
uint64_t tu_rng_u64(void);
uint32_t tu_rng_u32(void);
float tu_rng_f(float lo, float hi);
float tu_rng_f53(float lo, float hi);
/* A standard normal draw (Box-Muller over two tu_rng_u32). */
float tu_rng_gauss(void);

#endif
