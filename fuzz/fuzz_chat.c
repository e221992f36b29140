/* fuzz_chat.c - libFuzzer target for chat templates (src/chat/template.c):
 * detection from a GGUF template text (outside input: it comes from the model
 * file) and rendering of arbitrary message lists (outside input: it comes
 * from the request or the terminal).
 *
 * Input: byte 0 picks the template - bits 0-3 a family (mod the family
 * count), bits 4-5 the EOS text ("", "</s>", "<|endoftext|>", 31 bytes), bit 6
 * "detect": the first record is a Jinja template text and the template is the
 * one tkv_chat_template_detect finds there (plain when none), as `tierkv
 * serve` and `tierkv chat` pick it. The rest is records separated by 0x1E: a
 * role byte (mod 3: system, user, assistant) and the content, any bytes, NULs
 * included. These must hold:
 *  - detection gives TKV_OK or TKV_ERR_UNSUPPORTED and a valid family whose
 *    name gives the same family back;
 *  - rendering succeeds and reports its length, a buffer one byte short is
 *    refused; every content the family writes where it stands (trimmed
 *    where the family trims) appears in the output in message order; the
 *    output is at most a bounded number of bytes longer than the contents;
 *    it ends with the assistant's generation prompt (the [INST] families:
 *    after a user turn);
 *  - for the families whose turns stand alone (chatml without Qwen3's think
 *    blocks, llama-3, gemma-4, mistral-v7, phi-4, zephyr, plain) the rendering of all
 *    but the last message without the generation prompt is a prefix of the
 *    full rendering (unless that message is the leading system one);
 *  - the output tokenizes with special tokens parsed, as the server does,
 *    with the stories260K (SPM) tokenizer and, when found, the Qwen2 (BPE)
 *    one, and the ids are in the vocab. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer.h"
#include "common.h"
#include "tierkv.h"


#define SEP 0x1e
#define MAX_MSG 256
#define TURN_BYTES 96   /* bound on the template text one turn adds, EOS included */
#define HEAD_BYTES 128  /* ... and on a fixed header (llama-3's dates, gemma-4's thought channel) */
static const char *const eos_texts[4] = { "", "</s>", "<|endoftext|>", "0123456789abcdefghijklmnopqrstu" };
static const char *const roles[3] = { "system", "user", "assistant" };

static struct tok *toks[2];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char path[4096];

	(void)argc;
	(void)argv;
	fuzz_model_path(path, sizeof path);
	toks[0] = fuzz_load_tok("fuzz_chat", path, true, "TIERKV_MODELS", NULL);
	fuzz_vocab_path(path, sizeof path, "ggml-vocab-qwen2.gguf");
	toks[1] = fuzz_load_tok("fuzz_chat", path, false, "TIERKV_VOCAB", NULL);
	return 0;
}

/* A growable output (malloc). */
struct buf {
	char *p;
	size_t len;
};

/* The generation prompt the rendering must end with ("" = no fixed one). */
static const char *gen_prompt(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n)
{
	bool user_last = n && !strcmp(m[n - 1].role, "user");

	switch (t->family) {
	case TKV_CHAT_CHATML: return "<|im_start|>assistant\n";
	case TKV_CHAT_LLAMA3: return "<|start_header_id|>assistant<|end_header_id|>\n\n";
	case TKV_CHAT_ZEPHYR: return "<|assistant|>\n";
	case TKV_CHAT_PHI3: return (t->flags & TKV_CHAT_USER_OPENS) && !user_last ? "" : "<|assistant|>\n";
	case TKV_CHAT_GEMMA: return "<start_of_turn>model\n";
	case TKV_CHAT_GEMMA4: return "<|turn>model\n<|channel>thought\n<channel|>";
	case TKV_CHAT_LLAMA2: return user_last ? " [/INST]" : "";
	case TKV_CHAT_PHI4: return (t->flags & TKV_CHAT_USER_OPENS) && !user_last ? "" : "<|im_start|>assistant<|im_sep|>";
	case TKV_CHAT_MISTRAL:
	case TKV_CHAT_MISTRAL_NEMO:
	case TKV_CHAT_MISTRAL_V7: return user_last ? "[/INST]" : "";
	default: return "Assistant:";
	}
}

static bool ends_with(const struct buf *b, const char *s)
{
	size_t n = strlen(s);

	return b->len >= n && !memcmp(b->p + b->len - n, s, n);
}

static void tokenize(const struct tok *t, const struct buf *b)
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

static struct buf render(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n, bool gen)
{
	struct buf b = { NULL, 0 };
	size_t len = 0, len2 = 0;

	CHECK(tkv_chat_render(t, m, n, gen, NULL, 0, &len) == TKV_ERR_ARG);
	b.p = malloc(len + 1);
	CHECK(b.p);
	if (len)
		CHECK(tkv_chat_render(t, m, n, gen, b.p, len, &len2) == TKV_ERR_ARG && len2 == len);
	CHECK(tkv_chat_render(t, m, n, gen, b.p, len + 1, &len2) == TKV_OK && len2 == len && b.p[len] == 0);
	b.len = len;
	return b;
}

/* The part of message i the family writes where it stands (NULL: none to look for). */
static const char *visible(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t *n)
{
	bool trims = t->family == TKV_CHAT_LLAMA3 || t->family == TKV_CHAT_GEMMA || t->family == TKV_CHAT_GEMMA4;
	const char *s = m->content;
	bool sys = !strcmp(m->role, "system"), asst = !strcmp(m->role, "assistant");

	*n = m->content_len;
	if ((sys && (t->family == TKV_CHAT_PHI3 || t->family == TKV_CHAT_MISTRAL_NEMO ||
		     t->family == TKV_CHAT_MISTRAL)) ||
	    (asst && (t->flags & TKV_CHAT_THINK)))
		return NULL;
	if (trims) {
		while (*n && strchr(" \t\n\r\v\f", *s) && *s) {
			s++;
			(*n)--;
		}
		while (*n && s[*n - 1] && strchr(" \t\n\r\v\f", s[*n - 1]))
			(*n)--;
	}
	return s;
}

static void check_render(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n)
{
	struct buf out = render(t, m, n, true);
	size_t total = strlen(t->default_system), at = 0;
	const char *gp = gen_prompt(t, m, n);

	for (size_t i = 0; i < n; i++) {
		size_t len;
		const char *s = visible(t, &m[i], &len), *hit;

		total += m[i].content_len;
		/* gemma writes its system text into the first turn: none, none written */
		if (!s || !len || (t->family == TKV_CHAT_GEMMA && i == 0 && n == 1 && !strcmp(m[0].role, "system")))
			continue;
		hit = fuzz_find(out.p + at, out.len - at, s, len);
		CHECK(hit);
		at = (size_t)(hit - out.p) + len;
	}
	CHECK(out.len <= total + (n + 1) * TURN_BYTES + HEAD_BYTES);
	CHECK(ends_with(&out, gp));

	/* (a leading system message alone stands for the default one: not a turn) */
	if (n >= 1 && !(n == 1 && !strcmp(m[0].role, "system")) && (t->family == TKV_CHAT_LLAMA3 || t->family == TKV_CHAT_GEMMA4 ||
		       t->family == TKV_CHAT_MISTRAL_V7 || t->family == TKV_CHAT_ZEPHYR ||
		       t->family == TKV_CHAT_PLAIN || t->family == TKV_CHAT_PHI4 || (t->family == TKV_CHAT_CHATML && !(t->flags & TKV_CHAT_THINK)))) {
		struct buf head = render(t, m, n - 1, false);

		CHECK(head.len <= out.len && !memcmp(head.p, out.p, head.len));
		free(head.p);
	}
	for (size_t i = 0; i < 2; i++)
		if (toks[i])
			tokenize(toks[i], &out);
	free(out.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct tkv_chat_msg m[MAX_MSG];
	struct tkv_chat_template t, back;
	const uint8_t *p, *end = data + size, *rec;
	size_t n = 0;
	uint8_t sel;

	if (size == 0)
		return 0;
	sel = data[0];
	memset(&t, 0, sizeof t);
	t.family = (enum tkv_chat_family)((sel & 15) % TKV_CHAT_FAMILY_COUNT);
	CHECK(tkv_chat_template_by_name(&t, tkv_chat_template_name(&t)) == TKV_OK);
	p = data + 1;
	if (sel & 0x40) {
		/* the first record is a template text from a GGUF file */
		const uint8_t *e = memchr(p, SEP, (size_t)(end - p));
		size_t len = (size_t)((e ? e : end) - p);
		int st = tkv_chat_template_detect(&t, (const char *)p, len);

		CHECK(st == TKV_OK || (st == TKV_ERR_UNSUPPORTED && t.family == TKV_CHAT_PLAIN));
		CHECK((unsigned)t.family < TKV_CHAT_FAMILY_COUNT);
		CHECK(strlen(t.default_system) < sizeof t.default_system);
		p = e ? e + 1 : end;
	}
	snprintf(t.eos, sizeof t.eos, "%s", eos_texts[(sel >> 4) & 3]);
	CHECK(tkv_chat_template_by_name(&back, tkv_chat_template_name(&t)) == TKV_OK);
	CHECK(back.family == t.family);

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
