/* common.h - what the fuzz targets share: the CHECK that makes libFuzzer
 * keep an input, and the fixtures (the stories260K model, the vocabularies)
 * found the way the tests find them. */
#ifndef TKV_FUZZ_COMMON_H
#define TKV_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* Aborts with the file, line and condition when c is false: libFuzzer saves
 * the input as a crash. */
#define CHECK(c)                                                                          \
	do {                                                                              \
		if (!(c)) {                                                               \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
			abort();                                                          \
		}                                                                         \
	} while (0)

struct gguf_file;
struct tok;

/* stories260K.gguf in $TIERKV_MODELS (default ../shared/models), else the
 * bundled copy, into path[cap]. */
void fuzz_model_path(char *path, size_t cap);
/* The vocabulary file name in $TIERKV_VOCAB (default ../shared/vocab), into
 * path[cap]. */
void fuzz_vocab_path(char *path, size_t cap, const char *name);
/* The tokenizer of the GGUF at path (the caller's: tok_free). When the file
 * or its tokenizer cannot be read, a line "WHO: PATH: why" that points to the
 * environment variable env; then abort when need, else NULL ("skipped").
 * With keep, the file stays open in *keep (the caller's: gguf_close);
 * without, it is closed (the tokenizer keeps no pointer into it). */
struct tok *fuzz_load_tok(const char *who, const char *path, bool need, const char *env, struct gguf_file **keep);

/* The first occurrence of n bytes of needle in hay (hn bytes), or NULL. */
const char *fuzz_find(const char *hay, size_t hn, const char *needle, size_t n);

#endif
