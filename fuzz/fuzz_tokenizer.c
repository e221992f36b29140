/* fuzz_tokenizer.c - libFuzzer target for the tokenizer.
 *
 * The vocab fixtures (Llama-2 and Phi-3 SPM; Llama-3, Qwen2 and Qwen3.5 BPE;
 * Gemma 4's BPE over SentencePiece-style pieces) are loaded once, from
 * $TIERKV_VOCAB or ../shared/vocab. Each input's first byte picks options
 * (parse_special, add_bos, stream output room), the rest is the text: arbitrary
 * bytes, NULs and invalid UTF-8 included. For every vocab the text is encoded
 * (once with too small an id buffer, once with enough), every id is decoded and
 * pushed through the UTF-8 stream decoder, and these must hold:
 *  - the count with a too-small buffer equals the full count, ids are in range;
 *  - BPE: decoding (special rendering, without the BOS asked for) gives back
 *    text that is valid UTF-8 without overlong forms or surrogates, byte for byte;
 *  - SPM without parse_special: the same, after a leading space and with
 *    U+2581 read as a space; Gemma 4: the same without the leading space;
 *  - the stream output is always valid UTF-8, and equals the plain decode when
 *    that is valid UTF-8. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer.h"
#include "util/alloc.h"

#include "common.h"


static const char *const vocab_names[] = {
	"ggml-vocab-llama-spm.gguf", "ggml-vocab-llama-bpe.gguf", "ggml-vocab-qwen2.gguf",
	"ggml-vocab-phi-3.gguf",     "ggml-vocab-qwen35.gguf",    "ggml-vocab-gemma-4.gguf",
};
/* vocabularies whose pieces spell a space U+2581 (decoded as ' ') */
static const bool vocab_escapes[] = { true, false, false, true, false, true };
#define N_VOCAB (sizeof(vocab_names) / sizeof(vocab_names[0]))

static struct tok *toks[N_VOCAB];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	for (size_t i = 0; i < N_VOCAB; i++) {
		char path[4096];

		fuzz_vocab_path(path, sizeof path, vocab_names[i]);
		toks[i] = fuzz_load_tok("fuzz_tokenizer", path, true, "TIERKV_VOCAB", NULL);
	}
	return 0;
}

/* Strict UTF-8: no overlong forms, surrogates or code points past U+10FFFF. */
static int utf8_valid(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned char b = s[i], lo = 0x80, hi = 0xbf;
		size_t need, k;

		if (b < 0x80) {
			i++;
			continue;
		}
		if (b >= 0xc2 && b <= 0xdf) {
			need = 1;
		} else if (b >= 0xe0 && b <= 0xef) {
			need = 2;
			lo = b == 0xe0 ? 0xa0 : 0x80;
			hi = b == 0xed ? 0x9f : 0xbf;
		} else if (b >= 0xf0 && b <= 0xf4) {
			need = 3;
			lo = b == 0xf0 ? 0x90 : 0x80;
			hi = b == 0xf4 ? 0x8f : 0xbf;
		} else {
			return 0;
		}
		if (need >= n - i)
			return 0;
		for (k = 1; k <= need; k++) {
			if (s[i + k] < lo || s[i + k] > hi)
				return 0;
			lo = 0x80;
			hi = 0xbf;
		}
		i += need + 1;
	}
	return 1;
}

/* Appends n bytes to a growing buffer. */
static void append(char **buf, size_t *len, size_t *cap, const char *src, size_t n)
{
	if (*len + n > *cap) {
		*cap = (*len + n) * 2 + 64;
		*buf = realloc(*buf, *cap);
		CHECK(*buf);
	}
	if (n)
		memcpy(*buf + *len, src, n);
	*len += n;
}

static void run_one(const struct tok *t, bool escapes, const char *text, size_t len, uint8_t opt)
{
	bool parse_special = opt & 1, add_bos = opt & 2;
	size_t n = 0, n2 = 0, small, i, cap_out, dlen = 0, dcap = 0, slen = 0, scap = 0;
	size_t plen = 0, pcap = 0;
	char *dec = NULL, *plain = NULL, *str = NULL, *piece, *out;
	int32_t *ids;
	struct tok_stream st = { { 0 }, 0 };
	bool escapes_ok = true;
	int rc;

	rc = tok_encode(t, text, len, add_bos, parse_special, NULL, 0, &n);
	CHECK(rc == TKV_OK || rc == TKV_ERR_ARG);
	CHECK((rc == TKV_OK) == (n == 0));
	ids = malloc((n + 1) * sizeof(*ids));
	CHECK(ids);
	small = n / 2;
	rc = tok_encode(t, text, len, add_bos, parse_special, ids, small, &n2);
	CHECK(n2 == n && (rc == TKV_OK) == (small >= n));
	rc = tok_encode(t, text, len, add_bos, parse_special, ids, n, &n2);
	CHECK(rc == TKV_OK && n2 == n);

	cap_out = (opt & 4) ? 64 : tok_stream_min_cap(t);
	piece = malloc(tok_stream_min_cap(t));
	out = malloc(cap_out);
	CHECK(piece && out);
	for (i = 0; i < n; i++) {
		int m;

		CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
		m = tok_decode(t, ids[i], true, piece, tok_stream_min_cap(t));
		CHECK(m >= 0 && (size_t)m <= tok_stream_min_cap(t));
		/* dec: every piece but the BOS we asked for; plain: as shown */
		if (!(add_bos && i == 0 && tok_bos(t) >= 0))
			append(&dec, &dlen, &dcap, piece, (size_t)m);
		if (!tok_is_control(t, ids[i]))
			append(&plain, &plen, &pcap, piece, (size_t)m);
		m = tok_stream_push(t, &st, ids[i], out, cap_out);
		if (m == TKV_ERR_ARG) {
			/* 64 bytes were too few for this piece: take the full room */
			CHECK(cap_out < tok_stream_min_cap(t));
			out = realloc(out, tok_stream_min_cap(t));
			CHECK(out);
			cap_out = tok_stream_min_cap(t);
			m = tok_stream_push(t, &st, ids[i], out, cap_out);
		}
		CHECK(m >= 0 && st.n_pend <= 3);
		append(&str, &slen, &scap, out, (size_t)m);
	}
	rc = tok_stream_flush(&st, out, cap_out);
	CHECK(rc >= 0 && st.n_pend == 0);
	append(&str, &slen, &scap, out, (size_t)rc);
	CHECK(utf8_valid((const unsigned char *)str, slen));
	if (utf8_valid((const unsigned char *)plain, plen))
		CHECK(slen == plen && (plen == 0 || memcmp(str, plain, plen) == 0));

	/* round trip for valid text; where pieces spell spaces U+2581 only when no
	 * special token was split out (SPM adds a space after one, and special
	 * pieces may spell U+2581 raw) */
	for (i = 0; escapes && i < n; i++)
		if (tok_is_special(t, ids[i]) && !(add_bos && i == 0 && ids[i] == tok_bos(t)))
			escapes_ok = false;
	if (utf8_valid((const unsigned char *)text, len) && escapes_ok) {
		if (!escapes) {
			CHECK(dlen == len && (len == 0 || memcmp(dec, text, len) == 0));
		} else if (len > 0) {
			size_t k = 0, j = tok_kind(t) == TOK_SPM; /* SPM: a leading space */

			CHECK(dlen >= j && (j == 0 || dec[0] == ' '));
			for (; j < dlen && k < len; k++) {
				if (len - k >= 3 && memcmp(text + k, "\xe2\x96\x81", 3) == 0) {
					CHECK(dec[j] == ' ');
					k += 2;
				} else {
					CHECK(dec[j] == text[k]);
				}
				j++;
			}
			CHECK(j == dlen && k == len);
		}
	}
	free(ids);
	free(dec);
	free(plain);
	free(str);
	free(piece);
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t i;

	if (size == 0)
		return 0;
	for (i = 0; i < N_VOCAB; i++)
		run_one(toks[i], vocab_escapes[i], (const char *)data + 1, size - 1, data[0]);
	return 0;
}
