/* common.c - the fuzz targets' fixtures (common.h). */
#include "common.h"

#include <string.h>

#include "model/gguf.h"
#include "model/tokenizer.h"

#ifndef TKV_BUNDLED_MODEL
#define TKV_BUNDLED_MODEL "models/stories260K.gguf"
#endif

void fuzz_model_path(char *path, size_t cap)
{
	const char *models = getenv("TIERKV_MODELS");
	FILE *f;

	snprintf(path, cap, "%s/stories260K.gguf", models && *models ? models : "../shared/models");
	if (!(f = fopen(path, "rb")))
		snprintf(path, cap, "%s", TKV_BUNDLED_MODEL);
	else
		fclose(f);
}

void fuzz_vocab_path(char *path, size_t cap, const char *name)
{
	const char *vocab = getenv("TIERKV_VOCAB");

	snprintf(path, cap, "%s/%s", vocab && *vocab ? vocab : "../shared/vocab", name);
}

struct tok *fuzz_load_tok(const char *who, const char *path, bool need, const char *env, struct gguf_file **keep)
{
	struct gguf_file *g = NULL;
	struct tkv_error err = { 0 };
	struct tok *t = NULL;

	if (gguf_open(&g, path, NULL, &err) || tok_init(&t, g, NULL, &err)) {
		fprintf(stderr, "%s: %s: %s%s (set %s)\n", who, path, err.msg, need ? "" : "; skipped", env);
		if (need)
			abort();
		gguf_close(g);
		return NULL;
	}
	if (keep)
		*keep = g;
	else
		gguf_close(g);
	return t;
}

const char *fuzz_find(const char *hay, size_t hn, const char *needle, size_t n)
{
	if (n == 0)
		return hay;
	for (size_t i = 0; n <= hn && i <= hn - n; i++)
		if (hay[i] == needle[0] && !memcmp(hay + i, needle, n))
			return hay + i;
	return NULL;
}
