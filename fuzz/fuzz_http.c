/* fuzz_http.c - libFuzzer target for the server's request path: an HTTP body
 * (any bytes) -> JSON -> validated request parameters, through srv_api_parse,
 * the function http.c calls for POST /v1/completions and
 * /v1/chat/completions.
 *
 * Each input is one request body. It is parsed as a completion with the
 * stories260K tokenizer (SPM, no chat template: $TIERKV_MODELS or the bundled
 * models/) and as a chat request under every built-in template family, with a
 * small and a normal context and --max-tokens limit; when the Qwen2 vocab is
 * found ($TIERKV_VOCAB or ../shared/vocab) it is parsed once more each way
 * with that BPE tokenizer and the chat template detected from its GGUF
 * metadata, as `tierkv serve` would pick it. These must hold:
 *  - an accepted request has 1 <= prompt tokens < context, ids in the vocab,
 *    1 <= max_tokens <= the limit and prompt + max_tokens <= context, every
 *    sampling field in its documented range, at most 4 stop strings of 1 to
 *    256 bytes, a header-safe list of ignored fields; its prompt, decoded as
 *    the server streams text, goes into response and chunk JSON that parse
 *    back to the same text;
 *  - a rejected one is a 400 (nothing runs out of memory here) with a type, a
 *    code, and a message and param of printable ASCII without file paths or
 *    pointers; its error JSON parses back to the same message;
 *  - nothing leaks (LeakSanitizer), srv_gen_free leaves nothing behind. */
#include <ctype.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "server/srv_impl.h"

#include "common.h"


/* One server configuration: tokenizer, chat template and limits. */
struct fz_ctx {
	struct srv_api_ctx api;
	const char *what;
};

#define MAX_CTX 16
static struct fz_ctx ctxs[MAX_CTX];
static size_t n_ctxs;
static struct tok *tok_stories, *tok_qwen;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The tokenizer at path, and in chat the template its metadata names, as
 * the server picks it (plain when none is found). */
static struct tok *load_tok(const char *path, struct tkv_chat_template *chat, bool need)
{
	struct gguf_file *g = NULL;
	struct tok *t = fuzz_load_tok("fuzz_http", path, need, need ? "TIERKV_MODELS" : "TIERKV_VOCAB", &g);
	const struct gguf_kv *kv;

	if (!t)
		return NULL;
	if (chat) {
		kv = gguf_find(g, "tokenizer.chat_template");
		memset(chat, 0, sizeof *chat);
		if (!kv || kv->type != GGUF_TYPE_STRING ||
		    tkv_chat_template_detect(chat, kv->v.str.ptr, (size_t)kv->v.str.len) != TKV_OK)
			CHECK(tkv_chat_template_by_name(chat, "plain") == TKV_OK);
	}
	gguf_close(g); /* the tokenizer keeps no pointer into the file */
	return t;
}

static void add_ctx(struct tok *t, const struct tkv_chat_template *chat, uint32_t n_ctx, uint32_t max_tokens,
		    const char *what)
{
	struct fz_ctx *c = &ctxs[n_ctxs++];

	CHECK(n_ctxs <= MAX_CTX);
	c->api.vocab = tok_vocab(t);
	c->api.chat = *chat;
	c->api.n_ctx = n_ctx;
	c->api.n_vocab = (uint32_t)tok_n_vocab(t);
	c->api.max_tokens = max_tokens;
	c->api.seed_base = 12345;
	c->what = what;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char *const families[] = {
		"plain", "chatml", "llama-2", "mistral", "llama-3", "zephyr", "phi-3", "gemma",
	};
	struct tkv_chat_template chat;
	char path[4096];

	(void)argc;
	(void)argv;
	fuzz_model_path(path, sizeof path);
	tok_stories = load_tok(path, NULL, true);
	for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
		size_t n = 0;
		const char *eos = tok_piece(tok_stories, tok_eos(tok_stories), &n);

		memset(&chat, 0, sizeof chat);
		CHECK(tkv_chat_template_by_name(&chat, families[i]) == TKV_OK);
		if (eos && n < sizeof chat.eos)
			memcpy(chat.eos, eos, n);
		/* odd families get a tiny context and limit: context_length_exceeded
		 * and the max_tokens clamp are reached by short bodies */
		add_ctx(tok_stories, &chat, i % 2 ? 24 : 512, i % 2 ? 8 : 4096, families[i]);
	}
	fuzz_vocab_path(path, sizeof path, "ggml-vocab-qwen2.gguf");
	if ((tok_qwen = load_tok(path, &chat, false)))
		add_ctx(tok_qwen, &chat, 32768, 4096, "qwen2 (GGUF template)");
	return 0;
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if (!isprint((unsigned char)*s))
			return false;
	return true;
}

/* No file path or pointer in a client-visible message, unless the client sent
 * those very bytes (JSON errors quote the token near the error). Pointers:
 * 0x and at least 6 hex digits; paths: the fixtures' directories, /work,
 * /home, /tmp, .gguf. */
static bool no_leak(const char *msg, const char *body, size_t len)
{
	static const char *const paths[] = { "/work", "/home", "/tmp", "/shared", ".gguf", "models/" };
	size_t n = strlen(msg);

	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		const char *at = fuzz_find(msg, n, paths[i], strlen(paths[i]));

		if (at && !fuzz_find(body, len, paths[i], strlen(paths[i])))
			return false;
	}
	for (size_t i = 0; i + 2 < n; i++) {
		size_t k = 0;

		if (msg[i] != '0' || msg[i + 1] != 'x')
			continue;
		while (i + 2 + k < n && isxdigit((unsigned char)msg[i + 2 + k]))
			k++;
		if (k >= 6 && !fuzz_find(body, len, msg + i, k + 2))
			return false;
	}
	return true;
}

static void check_error(const struct srv_err *e, const char *body, size_t len)
{
	json_t *j, *err;
	char *s;

	CHECK(e->http == 400);
	CHECK(e->type && !strcmp(e->type, "invalid_request_error"));
	CHECK(e->code && *e->code);
	CHECK(e->msg[0] && printable(e->msg) && no_leak(e->msg, body, len));
	CHECK(printable(e->param));
	s = srv_api_error_json(e);
	CHECK(s);
	j = json_loads(s, JSON_REJECT_DUPLICATES, NULL);
	CHECK(j);
	err = json_object_get(j, "error");
	CHECK(json_is_object(err));
	CHECK(!strcmp(json_string_value(json_object_get(err, "message")), e->msg));
	CHECK(e->param[0] ? !strcmp(json_string_value(json_object_get(err, "param")), e->param)
			  : json_is_null(json_object_get(err, "param")));
	json_decref(j);
	free(s);
}

/* The prompt's ids through the stream decoder (what the server publishes). */
static char *stream_text(const struct tok *t, const int32_t *ids, size_t n, size_t *len)
{
	size_t cap = tok_stream_min_cap(t), room = (n + 1) * cap + 1, used = 0;
	struct tok_stream st = { { 0 }, 0 };
	char *out = malloc(room);
	int m;

	CHECK(out);
	for (size_t i = 0; i < n; i++) {
		m = tok_stream_push(t, &st, ids[i], out + used, cap);
		CHECK(m >= 0);
		used += (size_t)m;
	}
	m = tok_stream_flush(&st, out + used, cap);
	CHECK(m >= 0);
	used += (size_t)m;
	out[used] = 0;
	*len = used;
	return out;
}

/* s (freed here) parses as JSON whose first choice holds text exactly: in
 * its chat_key's content for a chat, in its text otherwise. */
static void check_choice_text(char *s, enum srv_kind kind, const char *chat_key, const char *text, size_t len)
{
	json_t *j, *choice, *v;

	CHECK(s);
	j = json_loads(s, JSON_ALLOW_NUL, NULL);
	CHECK(j);
	choice = json_array_get(json_object_get(j, "choices"), 0);
	v = kind == SRV_CHAT ? json_object_get(json_object_get(choice, chat_key), "content")
			     : json_object_get(choice, "text");
	CHECK(json_is_string(v) && json_string_length(v) == len && !memcmp(json_string_value(v), text, len));
	json_decref(j);
	free(s);
}

/* Response and chunk JSON hold the text exactly. */
static void check_responses(enum srv_kind kind, const char *text, size_t len, const struct srv_gen *g)
{
	struct srv_usage u = { (uint32_t)g->n_prompt, g->max_tokens };

	check_choice_text(srv_api_response_json(kind, "cmpl-fuzz", 1, "stories260K", text, len, "length", &u), kind,
			  "message", text, len);
	check_choice_text(srv_api_chunk_json(kind, "cmpl-fuzz", 1, "stories260K", false, text, len, NULL), kind,
			  "delta", text, len);
}

static void check_gen(const struct fz_ctx *c, enum srv_kind kind, const struct srv_gen *g)
{
	char *text;
	size_t len;

	CHECK(g->kind == kind);
	CHECK(g->ids && g->n_prompt >= 1 && g->n_prompt < c->api.n_ctx);
	for (size_t i = 0; i < g->n_prompt; i++)
		CHECK(g->ids[i] >= 0 && (uint32_t)g->ids[i] < c->api.n_vocab);
	CHECK(g->max_tokens >= 1 && g->max_tokens <= c->api.max_tokens);
	CHECK(g->n_prompt + g->max_tokens <= c->api.n_ctx);
	CHECK(g->sp.temp >= 0 && g->sp.temp <= 2);
	CHECK(g->sp.top_p > 0 && g->sp.top_p <= 1);
	CHECK(g->sp.min_p >= 0 && g->sp.min_p <= 1);
	CHECK(g->sp.top_k >= 0);
	CHECK(g->sp.repeat_penalty >= 1e-3f && g->sp.repeat_penalty <= 100);
	CHECK(g->sp.repeat_last_n >= 0);
	CHECK(g->freq_penalty >= -2 && g->freq_penalty <= 2);
	CHECK(g->presence_penalty >= -2 && g->presence_penalty <= 2);
	CHECK(g->n_stop >= 0 && g->n_stop <= SRV_MAX_STOP);
	for (int i = 0; i < g->n_stop; i++)
		CHECK(g->stop[i] && g->stop_len[i] >= 1 && g->stop_len[i] <= SRV_MAX_STOP_LEN &&
		      g->stop[i][g->stop_len[i]] == 0);
	CHECK(memchr(g->ignored, 0, sizeof g->ignored));
	for (const char *p = g->ignored; *p; p++)
		CHECK(isalnum((unsigned char)*p) || *p == '_' || *p == '?' || *p == ',');

	text = stream_text(tok_of_vocab(c->api.vocab), g->ids, g->n_prompt, &len);
	check_responses(kind, text, len, g);
	free(text);
}

static void run(const struct fz_ctx *c, enum srv_kind kind, const char *body, size_t len)
{
	struct srv_gen g;
	struct srv_err e;

	memset(&e, 0, sizeof e);
	if (srv_api_parse(&c->api, kind, body, len, &g, &e) == 0)
		check_gen(c, kind, &g);
	else
		check_error(&e, body, len);
	srv_gen_free(&g);
	CHECK(!g.ids && g.n_stop == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *body = (const char *)data;

	run(&ctxs[0], SRV_COMPLETION, body, size);
	run(&ctxs[1], SRV_COMPLETION, body, size);
	for (size_t i = 0; i < n_ctxs; i++)
		run(&ctxs[i], SRV_CHAT, body, size);
	if (tok_qwen)
		run(&ctxs[n_ctxs - 1], SRV_COMPLETION, body, size);
	return 0;
}
