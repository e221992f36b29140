/* test_tokenizer.c - tokenizer against llama.cpp's vocab test cases, plus
 * round trips, streaming UTF-8, special tokens and allocation failures.
 *
 * The vocab fixtures come with NAME.gguf.inp (cases separated by the line
 * "__ggml_vocab_test__") and NAME.gguf.out (one line of ids per case). Splitting
 * follows llama.cpp's test-tokenizer-0: the separator is "\n__ggml_vocab_test__\n",
 * so the newline before the separator line ends the case and is not part of it,
 * and the newline after it starts nothing. Ids are encoded without BOS and with
 * parse_special off (common_tokenize(ctx, text, false, false)). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "util/alloc.h"

#define SEP "\n__ggml_vocab_test__\n"

struct vocab_fix {
	struct gguf_file *g;
	struct tok *t;
	struct tkv_alloc a;
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void load_vocab(struct vocab_fix *v, const char *path)
{
	struct tkv_error err = { 0 };
	double t0;
	int rc;

	memset(v, 0, sizeof(*v));
	rc = gguf_open(&v->g, path, NULL, &err);
	if (rc)
		fail_msg("gguf_open %s: %s", path, err.msg);
	t0 = now_ms();
	rc = tok_init(&v->t, v->g, &v->a, &err);
	if (rc)
		fail_msg("tok_init %s: %s", path, err.msg);
	printf("# %s: tok_init %.1f ms, %d tokens, %zu bytes\n", path, now_ms() - t0,
	       tok_n_vocab(v->t), (size_t)v->a.live);
}

static void free_vocab(struct vocab_fix *v)
{
	tok_free(v->t);
	assert_int_equal(v->a.live, 0);
	gguf_close(v->g);
}

/* Encodes into a malloc'd array; returns the count. */
static size_t encode(const struct tok *t, const char *s, size_t len, bool bos, bool special,
		     int32_t **ids)
{
	size_t n = 0, n2 = 0;
	int rc;

	rc = tok_encode(t, s, len, bos, special, NULL, 0, &n);
	assert_true(rc == TKV_OK || rc == TKV_ERR_ARG);
	*ids = malloc((n ? n : 1) * sizeof(**ids));
	assert_non_null(*ids);
	rc = tok_encode(t, s, len, bos, special, *ids, n, &n2);
	assert_int_equal(rc, TKV_OK);
	assert_int_equal(n, n2);
	return n;
}

/* Concatenated tok_decode of ids; malloc'd, NUL-terminated, length in *len. */
static char *decode(const struct tok *t, const int32_t *ids, size_t n, size_t *len)
{
	size_t cap = 64, k = 0, i;
	char *out = malloc(cap);

	assert_non_null(out);
	for (i = 0; i < n; i++) {
		int m = tok_decode(t, ids[i], false, NULL, 0);

		assert_true(m >= 0);
		while (k + (size_t)m + 1 > cap) {
			cap *= 2;
			out = realloc(out, cap);
			assert_non_null(out);
		}
		assert_int_equal(tok_decode(t, ids[i], false, out + k, cap - k), m);
		k += (size_t)m;
	}
	out[k] = 0;
	*len = k;
	return out;
}

static void print_escaped(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '\n')
			printf("\\n");
		else if (c == '\t')
			printf("\\t");
		else if (c == '\\')
			printf("\\\\");
		else if (c >= 0x20)
			putchar(c); /* UTF-8 passes through */
		else
			printf("\\x%02x", c);
	}
}

static void print_ids(const char *label, const int32_t *ids, size_t n)
{
	size_t i;

	printf("#   %s (%zu):", label, n);
	for (i = 0; i < n; i++)
		printf(" %d", ids[i]);
	printf("\n");
}

/* Runs every case of NAME.gguf.inp against NAME.gguf.out. */
static void run_vocab_cases(const char *name)
{
	char path[4096];
	struct vocab_fix v;
	char *inp, *outp, *pos, *end, *line;
	size_t inp_len, out_len, n_case = 0, n_ok = 0;
	double t_enc = 0;

	snprintf(path, sizeof path, "%s", tu_vocab_path(name));
	load_vocab(&v, path);
	snprintf(path, sizeof path, "%s.inp", tu_vocab_path(name));
	inp = tu_read_file(path, &inp_len);
	assert_non_null(inp);
	snprintf(path, sizeof path, "%s.out", tu_vocab_path(name));
	outp = tu_read_file(path, &out_len);
	assert_non_null(outp);

	pos = inp;
	end = inp + inp_len;
	line = outp;
	while (pos < end) {
		char *sep = strstr(pos, SEP);
		size_t clen = sep ? (size_t)(sep - pos) : (size_t)(end - pos);
		char *eol = strchr(line, '\n');
		int32_t *want = NULL, *got = NULL;
		size_t n_want = 0, n_got, i;
		char *p, *q;
		double t0;
		bool ok;

		if (!eol)
			fail_msg("%s.out has fewer lines than cases (case %zu)", name, n_case);
		*eol = 0;
		want = malloc((strlen(line) / 2 + 1) * sizeof(*want));
		assert_non_null(want);
		for (p = line;; p = q) {
			long id = strtol(p, &q, 10);

			if (q == p)
				break;
			want[n_want++] = (int32_t)id;
		}
		line = eol + 1;

		t0 = now_ms();
		n_got = encode(v.t, pos, clen, false, false, &got);
		t_enc += now_ms() - t0;
		ok = n_got == n_want;
		for (i = 0; ok && i < n_got; i++)
			ok = got[i] == want[i];
		if (ok) {
			n_ok++;
		} else {
			printf("# MISMATCH %s case %zu: \"", name, n_case);
			print_escaped(pos, clen);
			printf("\"\n");
			print_ids("expected", want, n_want);
			print_ids("got     ", got, n_got);
		}
		free(want);
		free(got);
		n_case++;
		pos = sep ? sep + strlen(SEP) : end;
	}
	printf("# %s: %zu/%zu cases match (encode %.2f ms total)\n", name, n_ok, n_case, t_enc);
	assert_true(n_case > 0);
	assert_int_equal(*line, 0); /* no extra expected lines */
	free(inp);
	free(outp);
	free_vocab(&v);
	assert_int_equal(n_ok, n_case);
}

/* The vocabulary fixtures (SPM ones add a leading space); each has a test of
 * its cases and a round-trip test, with the fixture as the test's state. */
struct vocab_case {
	const char *file;
	bool spm;
};

static struct vocab_case VOCABS[] = {
	{ "ggml-vocab-llama-spm.gguf", true },
	{ "ggml-vocab-llama-bpe.gguf", false },
	{ "ggml-vocab-qwen2.gguf", false },
	{ "ggml-vocab-phi-3.gguf", true },
	{ "ggml-vocab-gemma-4.gguf", false },
	{ "ggml-vocab-qwen35.gguf", false },
};

static void test_vocab(void **state)
{
	const struct vocab_case *c = *state;

	run_vocab_cases(c->file);
}

#define VOCAB_TEST(name, k) { "test_vocab_" name, test_vocab, NULL, NULL, &VOCABS[k] }

/* ---- stories260K ----------------------------------------------------------- */

static void test_stories_once_upon(void **state)
{
	const char *path = tu_model_path("stories260K.gguf");
	static const char *const pieces[] = {
		"\xe2\x96\x81Once", "\xe2\x96\x81upon", "\xe2\x96\x81\x61", "\xe2\x96\x81time",
	};
	struct vocab_fix v;
	int32_t *ids;
	size_t n, i, len;
	char *text;

	(void)state;
	assert_non_null(path);
	load_vocab(&v, path);
	assert_int_equal(tok_kind(v.t), TOK_SPM);
	assert_int_equal(tok_n_vocab(v.t), 512);
	assert_int_equal(tok_bos(v.t), 1);
	assert_int_equal(tok_eos(v.t), 2);
	assert_true(tok_add_bos(v.t));
	assert_true(tok_add_space_prefix(v.t));
	assert_true(tok_is_control(v.t, 1));
	assert_true(tok_is_control(v.t, 0)); /* <unk> */
	assert_false(tok_is_control(v.t, 403));
	assert_true(tok_is_eog(v.t, 2));
	assert_false(tok_is_eog(v.t, 1));

	n = encode(v.t, "Once upon a time", 16, true, false, &ids);
	print_ids("stories260K \"Once upon a time\"", ids, n);
	/* llama.cpp: BOS, then one piece per word */
	assert_int_equal(n, 5);
	assert_int_equal(ids[0], 1);
	for (i = 0; i < 4; i++) {
		size_t pl;
		const char *p = tok_piece(v.t, ids[i + 1], &pl);

		assert_non_null(p);
		assert_int_equal(pl, strlen(pieces[i]));
		assert_memory_equal(p, pieces[i], pl);
	}
	/* the exact ids of those pieces in tok512 */
	assert_int_equal(ids[1], 403);
	assert_int_equal(ids[2], 407);
	assert_int_equal(ids[3], 261);
	assert_int_equal(ids[4], 378);

	text = decode(v.t, ids, n, &len);
	assert_string_equal(text, " Once upon a time");
	free(text);
	free(ids);
	free_vocab(&v);
}

/* ---- round trips ------------------------------------------------------------ */

static const char *const roundtrip_texts[] = {
	"Hello world",
	"The quick brown fox jumps over the lazy dog. 1234567890 !@#$%^&*()_+-=[]{};':\",./<>?",
	"  leading and trailing spaces  ",
	"tabs\tand\nnewlines\r\n\n\nend",
	"I've been 'told he's there, 'RE you sure? We'Ve a'lL",
	"\xd0\xbd\xd0\xb5\xd1\x89\xd0\xbe \xd0\xbd\xd0\xb0 \xd0\x91\xd1\x8a\xd0\xbb\xd0\xb3\xd0\xb0\xd1\x80\xd1\x81\xd0\xba\xd0\xb8", /* нещо на Български */
	"\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8" "apple\xe5\xb7\xa5\xe4\xbd\x9c" "1314151\xe5\xa4\xa9\xef\xbd\x9e", /* 我想在apple工作1314151天～ */
	"\xf0\x9f\x9a\x80 (normal) \xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f \xe2\x9c\x85", /* emoji */
	"C\xe1\xbb\xadu Vi\xe1\xbb\x87t \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87 \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7",
	"\xe1\x9e\x80\xe1\x9e\xb6\xe1\x9e\x93\xe1\x9f\x8b\xe1\x9e\x8f\xe1\x9f\x82", /* Khmer */
	"\xc2\xa0nbsp\xe2\x80\x83" "em-space\xe3\x80\x80" "ideographic",
};

static void roundtrip_vocab(const char *name, bool spm)
{
	struct vocab_fix v;
	size_t k;

	load_vocab(&v, tu_vocab_path(name));
	for (k = 0; k < sizeof(roundtrip_texts) / sizeof(roundtrip_texts[0]); k++) {
		const char *s = roundtrip_texts[k];
		int32_t *ids;
		size_t n = encode(v.t, s, strlen(s), false, false, &ids), len;
		char *out = decode(v.t, ids, n, &len);
		const char *cmp = out;

		if (spm) {
			/* SPM adds a leading space */
			assert_true(len >= 1 && out[0] == ' ');
			cmp++;
			len--;
		}
		if (len != strlen(s) || memcmp(cmp, s, len) != 0) {
			printf("# round trip %s: \"", name);
			print_escaped(s, strlen(s));
			printf("\" -> \"");
			print_escaped(cmp, len);
			printf("\"\n");
			fail();
		}
		free(out);
		free(ids);
	}
	free_vocab(&v);
}

static void test_roundtrip(void **state)
{
	const struct vocab_case *c = *state;

	roundtrip_vocab(c->file, c->spm);
}

#define ROUNDTRIP_TEST(name, k) { "test_roundtrip_" name, test_roundtrip, NULL, NULL, &VOCABS[k] }

/* ---- special tokens, small buffers, odd input ------------------------------- */

static void test_special_tokens(void **state)
{
	struct vocab_fix v;
	int32_t *ids, buf[2];
	size_t n;
	char piece[64];

	(void)state;
	load_vocab(&v, tu_vocab_path("ggml-vocab-llama-bpe.gguf"));
	assert_int_equal(tok_kind(v.t), TOK_BPE);
	assert_int_equal(tok_bos(v.t), 128000);
	assert_true(tok_add_bos(v.t));
	assert_true(tok_is_eog(v.t, 128001));
	assert_true(tok_is_eog(v.t, 128009)); /* <|eot_id|> */
	assert_false(tok_is_eog(v.t, 9906));

	n = encode(v.t, "<|begin_of_text|>Hello", 22, false, true, &ids);
	assert_int_equal(n, 2);
	assert_int_equal(ids[0], 128000);
	assert_int_equal(ids[1], 9906);
	free(ids);
	/* without parse_special the marker is plain text */
	n = encode(v.t, "<|begin_of_text|>Hello", 22, false, false, &ids);
	assert_true(n > 2);
	assert_int_not_equal(ids[0], 128000);
	free(ids);
	/* control tokens decode to nothing unless special */
	assert_int_equal(tok_decode(v.t, 128000, false, piece, sizeof piece), 0);
	assert_int_equal(tok_decode(v.t, 128000, true, piece, sizeof piece), 17);
	assert_memory_equal(piece, "<|begin_of_text|>", 17);
	assert_true(tok_decode(v.t, -1, false, piece, sizeof piece) < 0);
	assert_true(tok_decode(v.t, tok_n_vocab(v.t), false, piece, sizeof piece) < 0);

	/* too small an output: TKV_ERR_ARG and the full count */
	assert_int_equal(tok_encode(v.t, "Hello world", 11, true, false, buf, 2, &n), TKV_ERR_ARG);
	assert_int_equal(n, 3);
	assert_int_equal(buf[0], 128000);
	assert_int_equal(buf[1], 9906);
	free_vocab(&v);

	/* Qwen2: user-defined tokens are split out even without parse_special */
	load_vocab(&v, tu_vocab_path("ggml-vocab-qwen2.gguf"));
	assert_false(tok_add_bos(v.t));
	assert_true(tok_is_eog(v.t, 151643)); /* <|endoftext|> */
	assert_true(tok_is_eog(v.t, 151645)); /* <|im_end|> */
	n = encode(v.t, "a[PAD151646]b", 13, false, false, &ids);
	assert_int_equal(n, 3);
	assert_int_equal(ids[1], 151646);
	free(ids);
	n = encode(v.t, "<|im_start|>user\nhi<|im_end|>", 29, false, true, &ids);
	assert_int_equal(n, 5); /* <|im_start|> user \n hi <|im_end|> */
	assert_int_equal(ids[0], 151644);
	assert_int_equal(ids[4], 151645);
	free(ids);
	free_vocab(&v);

	/* SPM: a special token restarts the space prefix, like llama.cpp */
	load_vocab(&v, tu_vocab_path("ggml-vocab-llama-spm.gguf"));
	n = encode(v.t, "Hello</s>Hello", 14, false, true, &ids);
	assert_int_equal(n, 3);
	assert_int_equal(ids[0], 15043);
	assert_int_equal(ids[1], 2);
	assert_int_equal(ids[2], 15043);
	free(ids);
	free_vocab(&v);
}

static const char *const all_vocabs[] = {
	"ggml-vocab-llama-spm.gguf", "ggml-vocab-llama-bpe.gguf", "ggml-vocab-qwen2.gguf",
};

/* Invalid UTF-8, NUL bytes, lone continuation bytes, truncated sequences. */
static void test_odd_bytes(void **state)
{
	static const char odd[] = "a\0b\xff\xfe\x80\xc3(\xe2\x82 \xf0\x9f\x98 x\xed\xa0\x80"
				  "\xc0\x80\xf4\x90\x80\x80\xf8\x88\x80\x80\x80 end\xe2";
	/* no space after a cut-short sequence: SPM splits characters by lead byte
	 * after spaces became U+2581, so "\xe2\x82 " swallows part of the U+2581
	 * (as in llama.cpp) and only then the bytes do not come back unchanged */
	static const char odd_nospace[] = "a\0b\xff\xfe\x80\xc3(\xed\xa0\x80\xc0\x80\xf4\x90\x80\x80"
					  "\xf8\x88\x80\x80\x80\xe2";
	size_t k;

	(void)state;
	for (k = 0; k < 3; k++) {
		struct vocab_fix v;
		struct tok_stream st = { { 0 }, 0 };
		int32_t *ids;
		size_t n, i, len;
		char *text, out[2048];

		load_vocab(&v, tu_vocab_path(all_vocabs[k]));
		n = encode(v.t, odd, sizeof(odd) - 1, true, true, &ids);
		assert_true(n > 0);
		for (i = 0; i < n; i++) {
			assert_true(ids[i] >= 0 && ids[i] < tok_n_vocab(v.t));
			assert_true(tok_stream_push(v.t, &st, ids[i], out, sizeof out) >= 0);
		}
		assert_true(tok_stream_flush(&st, out, sizeof out) >= 0);
		assert_int_equal(st.n_pend, 0);
		free(ids);
		if (k == 0) {
			/* SPM keeps every byte (byte fallback) */
			n = encode(v.t, odd_nospace, sizeof(odd_nospace) - 1, false, false, &ids);
			text = decode(v.t, ids, n, &len);
			assert_int_equal(len, sizeof(odd_nospace));
			assert_memory_equal(text + 1, odd_nospace, sizeof(odd_nospace) - 1);
			free(text);
			free(ids);
		}
		/* empty text */
		assert_int_equal(tok_encode(v.t, "", 0, false, true, NULL, 0, &n), TKV_OK);
		assert_int_equal(n, 0);
		assert_int_equal(tok_encode(v.t, NULL, 0, true, true, NULL, 0, &n),
				 tok_bos(v.t) >= 0 ? TKV_ERR_ARG : TKV_OK);
		free_vocab(&v);
	}
}

/* ---- streaming UTF-8 --------------------------------------------------------- */

static int push(const struct tok *t, struct tok_stream *s, int32_t id, char *out)
{
	int n = tok_stream_push(t, s, id, out, 64);

	assert_true(n >= 0);
	out[n] = 0;
	return n;
}

static void test_stream_utf8(void **state)
{
	struct vocab_fix v;
	struct tok_stream s = { { 0 }, 0 };
	char out[80];
	int32_t b[256];
	int i, n;

	(void)state;
	load_vocab(&v, tu_vocab_path("ggml-vocab-llama-spm.gguf"));
	for (i = 0; i < 256; i++) {
		char name[8];
		size_t nb;
		int32_t *ids;

		/* the byte tokens <0xXX> are ids 3..258 in this vocab */
		snprintf(name, sizeof name, "<0x%02X>", i);
		b[i] = 3 + i;
		assert_memory_equal(tok_piece(v.t, b[i], &nb), name, 6);
		(void)ids;
	}
	assert_true(tok_stream_min_cap(v.t) >= 64);

	/* € = E2 82 AC split over three tokens */
	assert_int_equal(push(v.t, &s, b[0xe2], out), 0);
	assert_int_equal(push(v.t, &s, b[0x82], out), 0);
	assert_int_equal(s.n_pend, 2);
	assert_int_equal(push(v.t, &s, b[0xac], out), 3);
	assert_string_equal(out, "\xe2\x82\xac");
	assert_int_equal(s.n_pend, 0);

	/* 😀 = F0 9F 98 80, the last byte together with a word piece */
	push(v.t, &s, b[0xf0], out);
	push(v.t, &s, b[0x9f], out);
	assert_int_equal(push(v.t, &s, b[0x98], out), 0);
	assert_int_equal(push(v.t, &s, b[0x80], out), 4);
	assert_string_equal(out, "\xf0\x9f\x98\x80");
	n = push(v.t, &s, 15043, out); /* "▁Hello" */
	assert_string_equal(out, " Hello");
	assert_int_equal(n, 6);

	/* invalid bytes: FF alone, a lead byte cut short by ASCII */
	assert_int_equal(push(v.t, &s, b[0xff], out), 3);
	assert_string_equal(out, "\xef\xbf\xbd");
	push(v.t, &s, b[0xe2], out);
	assert_int_equal(push(v.t, &s, b[0x41], out), 4);
	assert_string_equal(out, "\xef\xbf\xbd" "A");
	/* E2 82 then 41: one U+FFFD for the maximal subpart E2 82 */
	push(v.t, &s, b[0xe2], out);
	push(v.t, &s, b[0x82], out);
	assert_int_equal(push(v.t, &s, b[0x41], out), 4);
	assert_string_equal(out, "\xef\xbf\xbd" "A");
	/* surrogates and overlong forms are invalid */
	push(v.t, &s, b[0xed], out);
	assert_int_equal(push(v.t, &s, b[0xa0], out), 6);
	assert_string_equal(out, "\xef\xbf\xbd\xef\xbf\xbd");
	assert_int_equal(push(v.t, &s, b[0xc0], out), 3);
	assert_int_equal(s.n_pend, 0);

	/* control tokens add nothing and keep what is pending */
	push(v.t, &s, b[0xc3], out);
	assert_int_equal(push(v.t, &s, 2, out), 0);
	assert_int_equal(s.n_pend, 1);
	/* too small an output leaves the stream as it was */
	assert_int_equal(tok_stream_push(v.t, &s, 15043, out, 2), TKV_ERR_ARG);
	assert_int_equal(s.n_pend, 1);
	assert_int_equal(push(v.t, &s, b[0xa4], out), 2);
	assert_string_equal(out, "\xc3\xa4");

	/* flush: an incomplete character becomes U+FFFD */
	push(v.t, &s, b[0xf0], out);
	push(v.t, &s, b[0x9f], out);
	assert_int_equal(tok_stream_flush(&s, out, 2), TKV_ERR_ARG);
	assert_int_equal(tok_stream_flush(&s, out, sizeof out), 3);
	assert_int_equal(s.n_pend, 0);
	assert_int_equal(tok_stream_flush(&s, out, sizeof out), 0);
	free_vocab(&v);

	/* BPE: Qwen2 byte-level pieces for the single bytes of a character */
	load_vocab(&v, tu_vocab_path("ggml-vocab-qwen2.gguf"));
	{
		int32_t *ids;
		size_t nid = encode(v.t, "\xe2\x82\xac\xe2\x82\xac!", 7, false, false, &ids), k;
		char acc[64];
		size_t alen = 0;

		for (k = 0; k < nid; k++) {
			n = tok_stream_push(v.t, &s, ids[k], acc + alen, sizeof acc - alen);
			assert_true(n >= 0);
			alen += (size_t)n;
		}
		assert_int_equal(tok_stream_flush(&s, acc + alen, sizeof acc - alen), 0);
		assert_int_equal(alen, 7);
		assert_memory_equal(acc, "\xe2\x82\xac\xe2\x82\xac!", 7);
		free(ids);
	}
	free_vocab(&v);
}

/* ---- the GPT-2 pre-tokenizer ------------------------------------------------ */

/* No fixture uses it, so the Qwen2 vocab is loaded with tokenizer.ggml.pre
 * patched from "qwen2" to "gpt-2" (same length). Expected ids come from the
 * GPT-2 regex run by a regex engine over the same vocabulary. */
static void test_gpt2_pretokenizer(void **state)
{
	static const char key[] = "tokenizer.ggml.pre\x08\0\0\0\x05\0\0\0\0\0\0\0qwen2";
	static const struct {
		const char *text;
		int32_t ids[9];
		size_t n;
	} cases[] = {
		{ "YOU'RE it's", { 56389, 6, 787, 432, 594 }, 5 },   /* contractions: lower case only */
		{ "I'm   here\n\n  ok", { 40, 2776, 256, 1588, 271, 220, 5394 }, 7 },
		{ "a  \t b!!  ?", { 64, 19271, 293, 2928, 220, 937 }, 6 },
		{ "\xc2\xa0x 12.5\xe2\x80\x83", { 4102, 87, 220, 16, 17, 13, 20, 378, 225 }, 9 },
	};
	struct gguf_file *g = NULL;
	struct tok *t = NULL;
	struct tkv_error err;
	size_t len, k, i;
	char *buf, *p;

	(void)state;
	buf = tu_read_file(tu_vocab_path("ggml-vocab-qwen2.gguf"), &len);
	assert_non_null(buf);
	for (p = buf; p + sizeof(key) - 1 <= buf + len; p++)
		if (memcmp(p, key, sizeof(key) - 1) == 0)
			break;
	assert_true(p + sizeof(key) - 1 <= buf + len);
	memcpy(p + sizeof(key) - 6, "gpt-2", 5);
	assert_int_equal(gguf_open_buffer(&g, buf, len, "gpt2.gguf", NULL, &err), TKV_OK);
	assert_int_equal(tok_init(&t, g, NULL, &err), TKV_OK);
	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		int32_t *ids;
		size_t n = encode(t, cases[k].text, strlen(cases[k].text), false, false, &ids);
		bool ok = n == cases[k].n;

		for (i = 0; ok && i < n; i++)
			ok = ids[i] == cases[k].ids[i];
		if (!ok) {
			printf("# MISMATCH gpt-2 \"");
			print_escaped(cases[k].text, strlen(cases[k].text));
			printf("\"\n");
			print_ids("expected", cases[k].ids, cases[k].n);
			print_ids("got     ", ids, n);
		}
		free(ids);
		assert_true(ok);
	}
	tok_free(t);
	gguf_close(g);
	free(buf);
}

/* ---- allocation failures ------------------------------------------------------- */

static void test_alloc_fail_init(void **state)
{
	struct gguf_file *g = NULL;
	struct tkv_error err;
	unsigned long long k;
	bool done = false;

	(void)state;
	assert_int_equal(gguf_open(&g, tu_vocab_path("ggml-vocab-llama-spm.gguf"), NULL, &err), TKV_OK);
	for (k = 1; k < 1000 && !done; k++) {
		struct tkv_alloc a = { 0 };
		struct tok *t = (struct tok *)0x1;
		int rc;

		a.fail_at = k;
		rc = tok_init(&t, g, &a, &err);
		if (rc == TKV_OK) {
			size_t n;

			a.fail_at = 0;
			assert_int_equal(tok_encode(t, "Hello world", 11, true, false, NULL, 0, &n),
					 TKV_ERR_ARG);
			assert_int_equal(n, 3);
			tok_free(t);
			done = true;
		} else {
			tu_expect_nomem(rc, t, NULL, NULL);
		}
		assert_int_equal(a.live, 0);
	}
	printf("# tok_init succeeded at fail_at = %llu\n", k - 1);
	assert_true(done);
	gguf_close(g);
}

/* Failures inside tok_encode (scratch buffers) on every vocab. */
static void test_alloc_fail_encode(void **state)
{
	static const char text[] = "Hello, y'all! How are you \xf0\x9f\x98\x81 ?\xe6\x88\x91\xe6\x83\xb3<s>"
				   "   33333 \n\n x";
	size_t v;

	(void)state;
	for (v = 0; v < 3; v++) {
		struct vocab_fix f;
		unsigned long long base, k;
		int32_t ids[128];
		size_t n_ok, n;
		bool done = false;

		load_vocab(&f, tu_vocab_path(all_vocabs[v]));
		assert_int_equal(tok_encode(f.t, text, sizeof(text) - 1, true, true, ids, 128, &n_ok),
				 TKV_OK);
		for (k = 1; k < 200 && !done; k++) {
			int rc;

			base = f.a.n_calls;
			f.a.fail_at = base + k;
			rc = tok_encode(f.t, text, sizeof(text) - 1, true, true, ids, 128, &n);
			f.a.fail_at = 0;
			if (rc == TKV_OK) {
				assert_int_equal(n, n_ok);
				done = true;
			} else {
				assert_int_equal(rc, TKV_ERR_NOMEM);
			}
		}
		assert_true(done);
		free_vocab(&f);
	}
}

/* ---- bad metadata --------------------------------------------------------------- */

/* Restarts b as a GGUF v3 file of n_kv keys and no tensors, the first
 * tokenizer.ggml.model = model. */
static void gput_start(struct tu_buf *b, uint64_t n_kv, const char *model)
{
	b->len = 0;
	tu_put_u32(b, 0x46554747u);
	tu_put_u32(b, 3);
	tu_put_u64(b, 0);
	tu_put_u64(b, n_kv);
	tu_put_str(b, "tokenizer.ggml.model");
	tu_put_u32(b, 8);
	tu_put_str(b, model);
}

/* The key tokenizer.ggml.tokens: an array of the n pieces. */
static void gput_tokens(struct tu_buf *b, size_t n, const char *const *pieces)
{
	tu_put_str(b, "tokenizer.ggml.tokens");
	tu_put_u32(b, 9);
	tu_put_u32(b, 8);
	tu_put_u64(b, n);
	for (size_t i = 0; i < n; i++)
		tu_put_str(b, pieces[i]);
}

static int init_from(struct tu_buf *b, struct tkv_error *err)
{
	struct gguf_file *g = NULL;
	struct tok *t = NULL;
	struct tkv_alloc a = { 0 };
	int rc;

	rc = gguf_open_buffer(&g, b->p, b->len, "test.gguf", NULL, err);
	assert_int_equal(rc, TKV_OK);
	rc = tok_init(&t, g, &a, err);
	tok_free(t);
	assert_int_equal(a.live, 0);
	gguf_close(g);
	return rc;
}

/* The tokenizer of b fails with want and a message containing frag. */
static void expect_init(struct tu_buf *b, int want, const char *frag)
{
	struct tkv_error err = { 0 };

	assert_int_equal(init_from(b, &err), want);
	if (frag)
		assert_non_null(strstr(err.msg, frag));
	printf("# %s\n", err.msg);
}

static void test_bad_metadata(void **state)
{
	static const char *const spm3[] = { "<unk>", "a", "" };
	struct tu_buf b = { NULL, 0, 0 };
	struct tkv_error err = { 0 };
	int rc;

	(void)state;
	/* unknown model */
	gput_start(&b, 1, "wordpiece");
	expect_init(&b, TKV_ERR_UNSUPPORTED, NULL);

	/* token_type shorter than tokens */
	gput_start(&b, 3, "llama");
	gput_tokens(&b, 3, spm3);
	tu_put_str(&b, "tokenizer.ggml.token_type");
	tu_put_u32(&b, 9);
	tu_put_u32(&b, 5);
	tu_put_u64(&b, 2);
	tu_put_u32(&b, 2);
	tu_put_u32(&b, 1);
	expect_init(&b, TKV_ERR_FORMAT, "token_type");

	/* gpt2 without merges */
	gput_start(&b, 2, "gpt2");
	gput_tokens(&b, 1, spm3 + 1);
	expect_init(&b, TKV_ERR_FORMAT, "merges");

	/* a tiny valid SPM vocab with an empty piece and no byte tokens */
	gput_start(&b, 2, "llama");
	gput_tokens(&b, 3, spm3);
	rc = init_from(&b, &err);
	assert_int_equal(rc, TKV_OK);
	{
		struct gguf_file *g = NULL;
		struct tok *t = NULL;
		int32_t ids[16];
		size_t n;

		assert_int_equal(gguf_open_buffer(&g, b.p, b.len, "tiny.gguf", NULL, &err), TKV_OK);
		assert_int_equal(tok_init(&t, g, NULL, &err), TKV_OK);
		gguf_close(g); /* the tok keeps no pointer into the file */
		assert_int_equal(tok_bos(t), 1); /* SPM default, in range */
		assert_int_equal(tok_eos(t), 2);
		assert_int_equal(tok_encode(t, "a b\xff", 4, false, false, ids, 16, &n), TKV_OK);
		/* "▁a▁b\xff": only "a" is a piece; the rest falls back to <unk> */
		assert_true(n >= 2);
		tok_free(t);
	}
	free(b.p);
	tok_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		VOCAB_TEST("llama_spm", 0),
		VOCAB_TEST("llama_bpe", 1),
		VOCAB_TEST("qwen2", 2),
		VOCAB_TEST("phi3", 3),
		VOCAB_TEST("gemma4", 4),
		VOCAB_TEST("qwen35", 5),
		cmocka_unit_test(test_stories_once_upon),
		ROUNDTRIP_TEST("spm", 0),
		ROUNDTRIP_TEST("llama_bpe", 1),
		ROUNDTRIP_TEST("qwen2", 2),
		ROUNDTRIP_TEST("phi3", 3),
		ROUNDTRIP_TEST("gemma4", 4),
		ROUNDTRIP_TEST("qwen35", 5),
		cmocka_unit_test(test_special_tokens),
		cmocka_unit_test(test_odd_bytes),
		cmocka_unit_test(test_stream_utf8),
		cmocka_unit_test(test_gpt2_pretokenizer),
		cmocka_unit_test(test_alloc_fail_init),
		cmocka_unit_test(test_alloc_fail_encode),
		cmocka_unit_test(test_bad_metadata),
	};

	return cmocka_run_group_tests_name("tokenizer", tests, NULL, NULL);
}
