/* testutil.c - fixture lookup and file reading for tests. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

const char *tu_model_path(const char *name)
{
	static char buf[4096];

	snprintf(buf, sizeof buf, "%s/%s", env_or("TIERKV_MODELS", "../shared/models"), name);
	if (access(buf, R_OK) == 0)
		return buf;
	snprintf(buf, sizeof buf, "%s/%s", env_or("TIERKV_BUNDLED", "models"), name);
	if (access(buf, R_OK) == 0)
		return buf;
	return NULL;
}

const char *tu_vocab_path(const char *name)
{
	static char buf[4096];

	snprintf(buf, sizeof buf, "%s/%s", env_or("TIERKV_VOCAB", "../shared/vocab"), name);
	return buf;
}

char *tu_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		if (buf) {
			buf[n] = 0;
			if (len)
				*len = (size_t)n;
		}
	}
	fclose(f);
	return buf;
}

void tu_expect_nomem(int rc, const void *out, const struct tkv_error *err, const char *needle)
{
	assert_int_equal(rc, TKV_ERR_NOMEM);
	assert_null(out);
	if (err)
		assert_int_equal(err->status, TKV_ERR_NOMEM);
	if (err && needle)
		assert_non_null(strstr(err->msg, needle));
}

void tu_put(struct tu_buf *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

void tu_put_u8(struct tu_buf *b, uint8_t v)
{
	tu_put(b, &v, 1);
}

void tu_put_u32(struct tu_buf *b, uint32_t v)
{
	tu_put(b, &v, 4);
}

void tu_put_u64(struct tu_buf *b, uint64_t v)
{
	tu_put(b, &v, 8);
}

void tu_put_str(struct tu_buf *b, const char *s)
{
	tu_put_u64(b, strlen(s));
	tu_put(b, s, strlen(s));
}

static uint64_t rng_state = 0x5eed1234ull;

void tu_rng_seed(uint64_t seed)
{
	rng_state = seed;
}

uint64_t tu_rng_u64(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint32_t tu_rng_u32(void)
{
	return (uint32_t)(tu_rng_u64() >> 32);
}

float tu_rng_f(float lo, float hi)
{
	return lo + (hi - lo) * (float)((double)tu_rng_u32() / 4294967296.0);
}

float tu_rng_f53(float lo, float hi)
{
	return lo + (hi - lo) * (float)((double)(tu_rng_u64() >> 11) / 9007199254740992.0);
}

float tu_rng_gauss(void)
{
	double u = ((double)tu_rng_u32() + 1.0) / 4294967297.0, v = (double)tu_rng_u32() / 4294967296.0;

	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}
