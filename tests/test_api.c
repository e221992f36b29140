/* test_api.c - the public API the front ends and embedders use instead of the
 * library's internals (include/tierkv.h, src/engine/model_api.c): allocator
 * statistics, the vocabulary of a model and of a file on its own, token to
 * piece, the streaming detokenizer across characters split over byte-fallback
 * tokens, end of generation, metadata, weight spans, the sampler and the
 * cache's figures per layer. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tierkv.h"

static struct tkv_model *load(struct tkv_alloc *a)
{
	struct tkv_model_params p = tkv_model_default_params();
	struct tkv_model *m = NULL;
	struct tkv_error err = { 0 };

	p.alloc = a;
	assert_int_equal(tkv_model_load(&m, tu_model_path("stories260K.gguf"), &p, &err), TKV_OK);
	return m;
}

/* The ids of text without BOS, into ids (cap entries); returns the count. */
static size_t encode(const struct tkv_vocab *v, const char *text, int32_t *ids, size_t cap)
{
	size_t n = 0;

	assert_int_equal(tkv_vocab_tokenize(v, text, strlen(text), false, false, ids, cap, &n), TKV_OK);
	return n;
}

/* The id whose vocabulary text is s, or -1. */
static int32_t find_token(const struct tkv_vocab *v, const char *s)
{
	for (int32_t id = 0; id < tkv_vocab_n_tokens(v); id++) {
		size_t len = 0;
		const char *t = tkv_vocab_token_text(v, id, &len);

		if (t && len == strlen(s) && !memcmp(t, s, len))
			return id;
	}
	return -1;
}

static void test_alloc_stats(void **state)
{
	struct tkv_alloc *a = NULL;
	struct tkv_alloc_stats s0, s1, s2;
	struct tkv_model *m;

	(void)state;
	tkv_alloc_get_stats(NULL, &s0);
	assert_true(s0.live == 0 && s0.peak == 0 && s0.n_calls == 0);
	assert_int_equal(tkv_alloc_init(&a), TKV_OK);
	tkv_alloc_get_stats(a, &s0);
	assert_true(s0.live == 0 && s0.n_calls == 0);
	m = load(a);
	tkv_alloc_get_stats(a, &s1);
	assert_true(s1.live > 0 && s1.peak >= s1.live && s1.n_calls > 0);
	tkv_model_free(m);
	tkv_alloc_get_stats(a, &s2);
	assert_int_equal(s2.live, 0);
	assert_true(s2.peak >= s1.live && s2.n_calls == s1.n_calls);
	tkv_alloc_free(a);
	tkv_alloc_free(NULL);
}

/* A model's vocabulary and the same file's on its own agree. */
static void test_vocab(void **state)
{
	struct tkv_model *m = load(NULL);
	const struct tkv_vocab *mv = tkv_model_vocab(m);
	struct tkv_vocab *fv = NULL;
	struct tkv_error err = { 0 };
	int32_t a[64], b[64];
	size_t na, nb = 0;

	(void)state;
	assert_int_equal(tkv_vocab_load(&fv, tu_model_path("stories260K.gguf"), NULL, &err), TKV_OK);
	assert_int_equal(tkv_vocab_n_tokens(mv), 512);
	assert_int_equal(tkv_vocab_n_tokens(fv), 512);
	assert_int_equal(tkv_vocab_bos(mv), 1);
	assert_int_equal(tkv_vocab_eos(mv), 2);
	assert_true(tkv_vocab_add_bos(mv) && tkv_vocab_add_bos(fv));
	assert_true(tkv_vocab_is_eog(mv, 2) && !tkv_vocab_is_eog(mv, 300));
	assert_true(tkv_vocab_is_control(mv, 1) && !tkv_vocab_is_control(mv, 300));

	na = encode(mv, "Once upon a time", a, 64);
	assert_int_equal(tkv_vocab_tokenize(fv, "Once upon a time", 16, true, false, b, 64, &nb), TKV_OK);
	assert_int_equal(nb, na + 1);
	assert_int_equal(b[0], 1);
	assert_memory_equal(a, b + 1, na * sizeof *a);
	/* the model's tkv_tokenize is the same encoder */
	assert_int_equal(tkv_tokenize(m, "Once upon a time", 16, 1, 0, b, 64, &nb), TKV_OK);
	assert_int_equal(nb, na + 1);
	/* too little room: the count needed, and TKV_ERR_ARG */
	assert_int_equal(tkv_vocab_tokenize(mv, "Once upon a time", 16, false, false, NULL, 0, &nb), TKV_ERR_ARG);
	assert_int_equal(nb, na);

	assert_null(tkv_vocab_token_text(mv, 512, &nb));
	assert_null(tkv_vocab_token_text(mv, -1, &nb));
	tkv_vocab_free(fv);
	tkv_vocab_free(NULL);
	tkv_model_free(m);

	assert_int_equal(tkv_vocab_load(&fv, "/nonexistent.gguf", NULL, &err), TKV_ERR_IO);
	assert_null(fv);
	assert_true(err.msg[0] != 0);
}

/* Token to piece: "▁" is a space, <0x0A> a newline byte, controls hidden
 * unless special. */
static void test_token_to_piece(void **state)
{
	struct tkv_model *m = load(NULL);
	const struct tkv_vocab *v = tkv_model_vocab(m);
	int32_t ids[8], nl = find_token(v, "<0x0A>");
	char buf[64];
	int n;

	(void)state;
	assert_int_equal(encode(v, "Once", ids, 8), 1);
	n = tkv_vocab_token_to_piece(v, ids[0], false, buf, sizeof buf);
	assert_int_equal(n, 5);
	assert_memory_equal(buf, " Once", 5);
	/* the full length comes back when cap is short */
	assert_int_equal(tkv_vocab_token_to_piece(v, ids[0], false, buf, 2), 5);
	assert_true(nl >= 0);
	assert_int_equal(tkv_vocab_token_to_piece(v, nl, false, buf, sizeof buf), 1);
	assert_int_equal(buf[0], '\n');
	assert_int_equal(tkv_vocab_token_to_piece(v, 1, false, buf, sizeof buf), 0);
	assert_int_equal(tkv_vocab_token_to_piece(v, 1, true, buf, sizeof buf), 3);
	assert_memory_equal(buf, "<s>", 3);
	assert_int_equal(tkv_vocab_token_to_piece(v, 512, false, buf, sizeof buf), TKV_ERR_ARG);
	tkv_model_free(m);
}

/* Streaming: "ö" and "✓" arrive as byte-fallback tokens (<0xC3> <0xB6>,
 * <0xE2> <0x9C> <0x93>); no output ever ends inside a character, and the
 * whole is the text. */
static void test_detok_split_utf8(void **state)
{
	struct tkv_model *m = load(NULL);
	const struct tkv_vocab *v = tkv_model_vocab(m);
	const char *text = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93";
	struct tkv_detok d = { { 0 }, 0 };
	size_t cap = tkv_detok_min_cap(v), len = 0, n_ids;
	char *piece = malloc(cap), out[128];
	int32_t ids[64];
	int held = 0, n;

	(void)state;
	assert_non_null(piece);
	n_ids = encode(v, text, ids, 64);
	for (size_t i = 0; i < n_ids; i++) {
		n = tkv_detok_push(v, &d, ids[i], piece, cap);
		assert_true(n >= 0);
		if (n == 0)
			held++;
		/* the last byte of a chunk is ASCII or ends its character */
		if (n > 0) {
			unsigned char last = (unsigned char)piece[n - 1];
			int lead = n - 1;

			while (lead > 0 && ((unsigned char)piece[lead] & 0xC0) == 0x80)
				lead--;
			assert_true(last < 0x80 || (size_t)(n - lead) ==
					   (((unsigned char)piece[lead] >= 0xF0) ? 4u : ((unsigned char)piece[lead] >= 0xE0) ? 3u : 2u));
		}
		memcpy(out + len, piece, (size_t)n);
		len += (size_t)n;
	}
	assert_true(held >= 3); /* <0xC3>, <0xE2>, <0x9C> waited */
	assert_int_equal(tkv_detok_flush(&d, piece, cap), 0);
	assert_int_equal(len, strlen(text) + 1);
	assert_memory_equal(out, " ", 1); /* the leading space SentencePiece adds */
	assert_memory_equal(out + 1, text, strlen(text));
	free(piece);
	tkv_model_free(m);
}

/* A character cut off by the end of generation flushes as U+FFFD; a buffer too
 * small leaves the detokenizer as it was. */
static void test_detok_flush_and_room(void **state)
{
	struct tkv_model *m = load(NULL);
	const struct tkv_vocab *v = tkv_model_vocab(m);
	int32_t c3 = find_token(v, "<0xC3>"), b6 = find_token(v, "<0xB6>");
	struct tkv_detok d;
	char buf[64];

	(void)state;
	assert_true(c3 >= 0 && b6 >= 0);
	tkv_detok_reset(&d);
	assert_int_equal(tkv_detok_push(v, &d, c3, buf, sizeof buf), 0);
	assert_int_equal(tkv_detok_flush(&d, buf, sizeof buf), 3);
	assert_memory_equal(buf, "\xef\xbf\xbd", 3);
	assert_int_equal(tkv_detok_flush(&d, buf, sizeof buf), 0);

	assert_int_equal(tkv_detok_push(v, &d, c3, buf, sizeof buf), 0);
	assert_int_equal(tkv_detok_push(v, &d, b6, buf, 1), TKV_ERR_ARG);
	assert_int_equal(tkv_detok_push(v, &d, b6, buf, sizeof buf), 2);
	assert_memory_equal(buf, "\xc3\xb6", 2);
	/* control tokens add nothing */
	assert_int_equal(tkv_detok_push(v, &d, 1, buf, sizeof buf), 0);
	assert_int_equal(tkv_detok_push(v, &d, -1, buf, sizeof buf), TKV_ERR_ARG);
	tkv_model_free(m);
}

static void test_metadata_and_weights(void **state)
{
	struct tkv_model *m = load(NULL);
	struct tkv_model_info in;
	struct tkv_weight_span *sp;
	const char *val = "x";
	size_t len = 1, n;
	uint64_t sum = 0;

	(void)state;
	tkv_model_get_info(m, &in);
	assert_int_equal(tkv_model_meta_str(m, "general.architecture", &val, &len), TKV_OK);
	assert_int_equal(len, 5);
	assert_memory_equal(val, "llama", 5);
	assert_int_equal(tkv_model_meta_str(m, "no.such.key", &val, &len), TKV_ERR_ARG);
	assert_true(val == NULL && len == 0);
	/* a number is not a string */
	assert_int_equal(tkv_model_meta_str(m, "llama.block_count", &val, &len), TKV_ERR_ARG);
	len = 1;
	assert_null(tkv_model_chat_template(m, &len)); /* stories260K has none */
	assert_int_equal(len, 0);

	n = tkv_model_weight_spans(m, NULL, 0);
	assert_int_equal(n, 7 * in.n_layer + 1);
	sp = calloc(n, sizeof *sp);
	assert_non_null(sp);
	assert_int_equal(tkv_model_weight_spans(m, sp, n), n);
	for (size_t i = 0; i < n; i++) {
		assert_non_null(sp[i].data);
		assert_true(sp[i].bytes > 0);
		sum += sp[i].bytes;
	}
	/* matrices, then the norms and one embedding row on top */
	assert_true(tkv_model_token_weight_bytes(m) > sum);
	assert_true(tkv_model_file_tensor_bytes(m) >= sum);
	assert_true(tkv_model_file_tensor_bytes(m) <= in.file_bytes);
	free(sp);

	assert_string_equal(tkv_dtype_name(0), "f32");
	assert_string_equal(tkv_dtype_name(1), "f16");
	assert_string_equal(tkv_dtype_name(9999), "?");
	assert_true(tkv_kernel_level()[0] != 0);
	tkv_model_free(m);
}

static void test_sampler(void **state)
{
	struct tkv_sampler_params p = tkv_sampler_default_params();
	struct tkv_sampler *s = NULL;
	struct tkv_error err = { 0 };
	struct tkv_alloc *a = NULL;
	struct tkv_alloc_stats as;
	float logits[8] = { 0.1f, 2.0f, -1.0f, 3.5f, 3.5f, 0.0f, 1.0f, -2.0f };

	(void)state;
	assert_true(p.temp > 0 && p.top_k == 40 && p.seed == 0xC0FFEE);
	p.temp = -1.0f;
	assert_int_equal(tkv_sampler_init(&s, &p, 8, NULL, &err), TKV_ERR_ARG);
	assert_null(s);
	assert_int_equal(tkv_alloc_init(&a), TKV_OK);
	p.temp = 0.0f; /* greedy: the argmax, lowest id on ties */
	assert_int_equal(tkv_sampler_init(&s, &p, 8, a, &err), TKV_OK);
	assert_int_equal(tkv_sampler_sample(s, logits), 3);
	tkv_sampler_accept(s, 3);
	tkv_sampler_reset(s, 1);
	tkv_alloc_get_stats(a, &as);
	assert_true(as.live > 0);
	tkv_sampler_free(s);
	tkv_sampler_free(NULL);
	tkv_alloc_get_stats(a, &as);
	assert_int_equal(as.live, 0);
	tkv_alloc_free(a);
}

/* Per-layer figures: each sequence's layers add up to its own tier totals, the
 * engine's layers to the sum over its sequences; a short out array gets only
 * its entries. Under a small --kv-mem so that every tier holds something. */
static void test_layer_stats(void **state)
{
	struct tkv_model *m = load(NULL);
	struct tkv_engine_params ep = tkv_engine_default_params();
	struct tkv_engine *e = NULL;
	struct tkv_seq *s[2] = { NULL, NULL };
	struct tkv_error err = { 0 };
	struct tkv_model_info in;
	struct tkv_kv_layer_stats ls[2][8], el[8], sum[8], guard[3];
	struct tkv_kv_stats ks;
	int32_t ids[400];
	size_t n = 0;
	const char *text = "Once upon a time, there was a little girl named Lily. She loved to play outside "
			   "in the park with her friends. One day, she saw a big red ball under a tree. ";

	(void)state;
	tkv_model_get_info(m, &in);
	assert_true(in.n_layer <= 8);
	ep.n_threads = 1;
	ep.kv_mem = tkv_model_kv_bytes_per_token(m) * 480 * 35 / 100;
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_OK);
	while (n + 64 < sizeof ids / sizeof ids[0])
		n += encode(tkv_model_vocab(m), text, ids + n, sizeof ids / sizeof ids[0] - n);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(tkv_seq_init(&s[k], e, &err), TKV_OK);
		assert_int_equal(tkv_seq_decode(s[k], ids, n - (size_t)k * 40, NULL, 0, &err), TKV_OK);
	}
	memset(sum, 0, sizeof sum);
	for (int k = 0; k < 2; k++) {
		size_t want[3] = { 0, 0, 0 }, want_tok[3] = { 0, 0, 0 };

		assert_int_equal(tkv_seq_kv_layer_stats(s[k], ls[k], 8), in.n_layer);
		tkv_seq_kv_stats(s[k], &ks);
		for (uint32_t l = 0; l < in.n_layer; l++)
			for (int t = 0; t < 3; t++) {
				want[t] += ls[k][l].tier_bytes[t];
				want_tok[t] += ls[k][l].tier_tokens[t];
				sum[l].tier_bytes[t] += ls[k][l].tier_bytes[t];
				sum[l].tier_tokens[t] += ls[k][l].tier_tokens[t];
			}
		for (int t = 0; t < 3; t++) {
			assert_int_equal(want[t], ks.tier_bytes[t]);
			assert_int_equal(want_tok[t], ks.tier_tokens[t]);
		}
		/* the governor ran: lower tiers hold tokens (a tight cap may store even the window at 8 bits) */
		assert_true(ks.gov_runs > 0 && ks.tier_bytes[1] + ks.tier_bytes[2] > 0);
	}
	assert_int_equal(tkv_engine_kv_layer_stats(e, el, 8), in.n_layer);
	for (uint32_t l = 0; l < in.n_layer; l++)
		for (int t = 0; t < 3; t++) {
			assert_int_equal(el[l].tier_bytes[t], sum[l].tier_bytes[t]);
			assert_int_equal(el[l].tier_tokens[t], sum[l].tier_tokens[t]);
		}
	/* n = 2 of 5 layers: two entries written, the third left alone */
	memset(guard, 0xab, sizeof guard);
	assert_int_equal(tkv_engine_kv_layer_stats(e, guard, 2), in.n_layer);
	assert_memory_equal(&guard[0], &el[0], 2 * sizeof guard[0]);
	assert_int_equal(guard[2].tier_bytes[0], (size_t)0xabababababababab);
	tkv_seq_free(s[0]);
	tkv_seq_free(s[1]);
	assert_int_equal(tkv_engine_kv_layer_stats(e, el, 8), in.n_layer);
	for (uint32_t l = 0; l < in.n_layer; l++)
		assert_int_equal(el[l].tier_bytes[0] + el[l].tier_bytes[1] + el[l].tier_bytes[2], 0);
	tkv_engine_free(e);
	tkv_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alloc_stats),
		cmocka_unit_test(test_vocab),
		cmocka_unit_test(test_token_to_piece),
		cmocka_unit_test(test_detok_split_utf8),
		cmocka_unit_test(test_detok_flush_and_room),
		cmocka_unit_test(test_metadata_and_weights),
		cmocka_unit_test(test_sampler),
		cmocka_unit_test(test_layer_stats),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
