/* fuzz_chat.c - libFuzzer target for chat templates: detection from a GGUF
 * template text (outside input: it comes from the model file) and rendering of
 * arbitrary message lists (outside input: it comes from the request).
 *
 * Input: byte 0 picks the template - bits 0-2 a family (plain, chatml,
 * llama-2, mistral, llama-3, zephyr, phi-3, gemma), bits 3-4 the EOS text
 * zephyr closes turns with ("", "</s>", "<|endoftext|>", 31 bytes), bit 5
 * "detect": the first record is a Jinja template text and the family is the
 * one srv_chat_detect finds there (plain when none), as `tierkv serve` picks
 * it. The rest is records separated by 0x1E: a role byte (mod 3: system, user,
 * assistant) and the content, any bytes, NULs included. These must hold:
 *  - detection gives -1 or a family; a family's name parses back to itself;
 *  - rendering succeeds, every content appears in the output in message
 *    order, the output is at most a bounded number of bytes longer than the
 *    contents, and it ends with the assistant's generation prompt (llama-2:
 *    after a user turn);
 *  - for the families whose turns stand alone (chatml, llama-3, zephyr,
 *    phi-3, plain) the rendering of all but the last message, without its
 *    generation prompt, is a prefix of the full rendering;
 *  - the output tokenizes with special tokens parsed, as the server does,
 *    with the stories260K (SPM) tokenizer and, when found, the Qwen2 (BPE)
 *    one, and the ids are in the vocab. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "server/srv_impl.h"

#define CHECK(c)                                                            \
	do {                                                                \
		if (!(c)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #c);                              \
			abort();                                            \
		}                                                           \
	} while (0)

#ifndef TKV_BUNDLED_MODEL
#define TKV_BUNDLED_MODEL "models/stories260K.gguf"
#endif

#define SEP 0x1e
#define MAX_MSG 256
#define TURN_BYTES 96   /* bound on the template text one turn adds, EOS included */

static const char *const families[8] = {
	"plain", "chatml", "llama-2", "mistral", "llama-3", "zephyr", "phi-3", "gemma",
};
static const char *const eos_texts[4] = { "", "</s>", "<|endoftext|>", "0123456789abcdefghijklmnopqrstu" };
static const char *const roles[3] = { "system", "user", "assistant" };

static struct tok *toks[2];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tok *load_tok(const char *path, bool need)
{
	struct gguf_file *g = NULL;
	struct tkv_error err = { 0 };
	struct tok *t = NULL;

	if (gguf_open(&g, path, NULL, &err) || tok_init(&t, g, NULL, &err)) {
		fprintf(stderr, "fuzz_chat: %s: %s%s\n", path, err.msg,
			need ? " (set TIERKV_MODELS)" : "; skipped (set TIERKV_VOCAB)");
		if (need)
			abort();
		t = NULL;
	}
	gguf_close(g);
	return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *models = getenv("TIERKV_MODELS"), *vocab = getenv("TIERKV_VOCAB");
	char path[4096];
	FILE *f;

	(void)argc;
	(void)argv;
	snprintf(path, sizeof path, "%s/stories260K.gguf", models && *models ? models : "../shared/models");
	if (!(f = fopen(path, "rb")))
		snprintf(path, sizeof path, "%s", TKV_BUNDLED_MODEL);
	else
		fclose(f);
	toks[0] = load_tok(path, true);
	snprintf(path, sizeof path, "%s/ggml-vocab-qwen2.gguf", vocab && *vocab ? vocab : "../shared/vocab");
	toks[1] = load_tok(path, false);
	return 0;
}

/* The generation prompt the rendering must end with ("" = no fixed one). */
static const char *gen_prompt(const struct srv_chat_tmpl *t, const struct srv_chat_msg *m, size_t n)
{
	switch (t->fmt) {
	case SRV_CHAT_CHATML: return "<|im_start|>assistant\n";
	case SRV_CHAT_LLAMA3: return "<|start_header_id|>assistant<|end_header_id|>\n\n";
	case SRV_CHAT_ZEPHYR:
	case SRV_CHAT_PHI3: return "<|assistant|>\n";
	case SRV_CHAT_GEMMA: return "<start_of_turn>model\n";
	case SRV_CHAT_LLAMA2: return n && !strcmp(m[n - 1].role, "user") ? " [/INST]" : "";
	default: return "Assistant:";
	}
}

/* First occurrence of n bytes of needle in hay (hn bytes), or NULL. */
static const char *find(const char *hay, size_t hn, const char *needle, size_t n)
{
	if (n == 0)
		return hay;
	for (size_t i = 0; n <= hn && i <= hn - n; i++)
		if (hay[i] == needle[0] && !memcmp(hay + i, needle, n))
			return hay + i;
	return NULL;
}

static bool ends_with(const struct srv_buf *b, const char *s)
{
	size_t n = strlen(s);

	return b->len >= n && !memcmp(b->p + b->len - n, s, n);
}

static void tokenize(const struct tok *t, const struct srv_buf *b)
{
	size_t n = 0, n2 = 0;
	int32_t *ids;

	CHECK(tok_encode(t, b->p, b->len, tok_add_bos(t), true, NULL, 0, &n) == (n ? TKV_ERR_ARG : TKV_OK));
	ids = malloc((n + 1) * sizeof *ids);
	CHECK(ids);
	CHECK(tok_encode(t, b->p, b->len, tok_add_bos(t), true, ids, n, &n2) == TKV_OK && n2 == n);
	for (size_t i = 0; i < n; i++)
		CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
	free(ids);
}

static void check_render(const struct srv_chat_tmpl *t, const struct srv_chat_msg *m, size_t n)
{
	struct srv_buf out = { 0 }, head = { 0 };
	size_t total = 0, at = 0;
	const char *gp = gen_prompt(t, m, n);

	CHECK(srv_chat_render(t, m, n, &out) == 0);
	/* llama-2 renders nothing for no messages (the server never asks: an
	 * empty list is a 400) */
	CHECK(out.p ? out.p[out.len] == 0 : n == 0 && t->fmt == SRV_CHAT_LLAMA2);
	CHECK(srv_buf_add(&out, "", 0) == 0);
	for (size_t i = 0; i < n; i++) {
		const char *hit;

		total += m[i].content_len;
		if (!m[i].content_len)
			continue;
		hit = find(out.p + at, out.len - at, m[i].content, m[i].content_len);
		CHECK(hit);
		at = (size_t)(hit - out.p) + m[i].content_len;
	}
	CHECK(out.len <= total + (n + 1) * TURN_BYTES);
	CHECK(ends_with(&out, gp));

	if (n >= 1 && t->fmt != SRV_CHAT_LLAMA2 && t->fmt != SRV_CHAT_GEMMA) {
		const char *hgp = gen_prompt(t, m, n - 1);

		CHECK(srv_chat_render(t, m, n - 1, &head) == 0);
		CHECK(ends_with(&head, hgp));
		head.len -= strlen(hgp);
		CHECK(head.len <= out.len && (head.len == 0 || !memcmp(head.p, out.p, head.len)));
		srv_buf_free(&head);
	}
	for (size_t i = 0; i < 2; i++)
		if (toks[i])
			tokenize(toks[i], &out);
	srv_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct srv_chat_msg m[MAX_MSG];
	struct srv_chat_tmpl t, back;
	const uint8_t *p, *end = data + size, *rec;
	size_t n = 0;
	uint8_t sel;

	if (size == 0)
		return 0;
	sel = data[0];
	memset(&t, 0, sizeof t);
	CHECK(srv_chat_parse(families[sel & 7], &t) == 0);
	snprintf(t.eos, sizeof t.eos, "%s", eos_texts[(sel >> 3) & 3]);
	p = data + 1;
	if (sel & 0x20) {
		/* the first record is a template text from a GGUF file */
		const uint8_t *e = memchr(p, SEP, (size_t)(end - p));
		size_t len = (size_t)((e ? e : end) - p);
		int f = srv_chat_detect((const char *)p, len);

		CHECK(f >= -1 && f < SRV_CHAT_COUNT);
		t.fmt = f >= 0 ? (enum srv_chat_fmt)f : SRV_CHAT_PLAIN;
		t.sys_tags = f != SRV_CHAT_LLAMA2 || srv_chat_detect_sys((const char *)p, len);
		p = e ? e + 1 : end;
	}
	memset(&back, 0, sizeof back);
	CHECK(srv_chat_parse(srv_chat_name(&t), &back) == 0);
	CHECK(back.fmt == t.fmt && back.sys_tags == t.sys_tags);

	for (rec = p; rec < end && n < MAX_MSG;) {
		const uint8_t *e = memchr(rec, SEP, (size_t)(end - rec));
		const uint8_t *stop = e ? e : end;

		/* an empty record is an empty user turn */
		m[n].role = roles[rec < stop ? *rec % 3 : 1];
		m[n].content = rec < stop ? (const char *)rec + 1 : "";
		m[n].content_len = rec < stop ? (size_t)(stop - rec) - 1 : 0;
		n++;
		rec = e ? e + 1 : end;
	}
	check_render(&t, m, n);
	return 0;
}
