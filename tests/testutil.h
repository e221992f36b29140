/* testutil.h - shared helpers for the cmocka tests. */
#ifndef TKV_TESTUTIL_H
#define TKV_TESTUTIL_H

#include <stddef.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <cmocka.h>

/* Path of a model fixture: $TIERKV_MODELS/name if it exists, else the bundled
 * copy in models/. Returns a static buffer; NULL if neither exists. */
const char *tu_model_path(const char *name);
/* Path of $TIERKV_VOCAB/name (static buffer). */
const char *tu_vocab_path(const char *name);
/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL on error. */
char *tu_read_file(const char *path, size_t *len);

#endif
