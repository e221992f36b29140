/* api.c - the OpenAI request and response shapes.
 *
 * Requests: a JSON object (duplicate keys rejected). Known fields are checked
 * for type and range and a wrong one is a 400 naming the field (param); fields
 * tierkv does not know are ignored, as OpenAI-compatible servers usually do, and
 * listed in the X-Tierkv-Ignored-Fields response header so a client can see it.
 * Fields that ask for something tierkv cannot do (n > 1, logprobs, tools,
 * non-text content, JSON mode) are a 400 rather than silently different output.
 * null means "the default" for every optional field.
 *
 * Error messages never hold file paths or pointers; text taken from the
 * request is reduced to printable ASCII. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_impl.h"

#define INVALID "invalid_request_error"

int srv_errf(struct srv_err *e, int http, const char *type, const char *code, const char *param,
	     const char *fmt, ...)
{
	va_list ap;

	e->http = http;
	e->type = type;
	e->code = code;
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	for (char *p = e->msg; *p; p++)
		if (!isprint((unsigned char)*p))
			*p = '?';
	for (char *p = e->param; *p; p++)
		if (!isprint((unsigned char)*p))
			*p = '?';
	return -1;
}

void srv_gen_free(struct srv_gen *g)
{
	tkv_free(g->alloc, g->ids);
	for (int i = 0; i < g->n_stop; i++)
		tkv_free(g->alloc, g->stop[i]);
	memset(g, 0, sizeof *g);
}

/* ---- field readers: 1 = null (unset), 0 = set, -1 = error in e ------------- */

static int get_num(json_t *v, const char *key, double lo, double hi, double *out, struct srv_err *e)
{
	double x;

	if (json_is_null(v))
		return 1;
	if (!json_is_number(v))
		return srv_errf(e, 400, INVALID, "invalid_type", key, "'%s' must be a number", key);
	x = json_number_value(v);
	if (!(x >= lo && x <= hi))
		return srv_errf(e, 400, INVALID, "invalid_value", key, "'%s' is %g; it must be in [%g, %g]",
				key, x, lo, hi);
	*out = x;
	return 0;
}

static int get_int(json_t *v, const char *key, long long lo, long long hi, long long *out, struct srv_err *e)
{
	long long x;

	if (json_is_null(v))
		return 1;
	if (json_is_real(v)) {
		/* 16.0 from clients that only have doubles; the range is checked
		 * before the cast, which is undefined outside long long */
		double r = json_real_value(v);

		if (r != floor(r))
			return srv_errf(e, 400, INVALID, "invalid_type", key, "'%s' must be an integer", key);
		if (!(r >= -0x1p63 && r < 0x1p63 && r >= (double)lo && r <= (double)hi))
			return srv_errf(e, 400, INVALID, "invalid_value", key, "'%s' is %g; it must be in [%lld, %lld]",
					key, r, lo, hi);
		x = (long long)r;
	} else if (json_is_integer(v))
		x = json_integer_value(v);
	else
		return srv_errf(e, 400, INVALID, "invalid_type", key, "'%s' must be an integer", key);
	if (x < lo || x > hi)
		return srv_errf(e, 400, INVALID, "invalid_value", key, "'%s' is %lld; it must be in [%lld, %lld]",
				key, x, lo, hi);
	*out = x;
	return 0;
}

static int get_bool(json_t *v, const char *key, bool *out, struct srv_err *e)
{
	if (json_is_null(v))
		return 1;
	if (!json_is_boolean(v))
		return srv_errf(e, 400, INVALID, "invalid_type", key, "'%s' must be true or false", key);
	*out = json_is_true(v);
	return 0;
}

static int add_stop(struct srv_gen *g, json_t *s, struct srv_err *e)
{
	size_t n = json_string_length(s);

	if (n == 0)
		return 0;
	if (n > SRV_MAX_STOP_LEN)
		return srv_errf(e, 400, INVALID, "invalid_value", "stop", "a stop sequence is %zu bytes; at most %d",
				n, SRV_MAX_STOP_LEN);
	if (g->n_stop == SRV_MAX_STOP)
		return srv_errf(e, 400, INVALID, "invalid_value", "stop", "at most %d stop sequences", SRV_MAX_STOP);
	if (!(g->stop[g->n_stop] = tkv_malloc(g->alloc, n + 1)))
		return srv_errf(e, 503, "server_error", "out_of_memory", NULL, "out of memory");
	memcpy(g->stop[g->n_stop], json_string_value(s), n + 1);
	g->stop_len[g->n_stop++] = n;
	return 0;
}

static int get_stop(struct srv_gen *g, json_t *v, struct srv_err *e)
{
	size_t i;
	json_t *s;

	if (json_is_null(v))
		return 0;
	if (json_is_string(v))
		return add_stop(g, v, e);
	if (!json_is_array(v))
		return srv_errf(e, 400, INVALID, "invalid_type", "stop", "'stop' must be a string or an array of strings");
	json_array_foreach(v, i, s) {
		if (!json_is_string(s))
			return srv_errf(e, 400, INVALID, "invalid_type", "stop", "'stop' must be a string or an array of strings");
		if (add_stop(g, s, e))
			return -1;
	}
	return 0;
}

/* ---- prompts -------------------------------------------------------------- */

/* Tokenizes text (with BOS, special tokens parsed as llama.cpp's server does). */
static int tokenize(const struct srv_api_ctx *c, const char *text, size_t len, struct srv_gen *g,
		    const char *param, struct srv_err *e)
{
	size_t n = 0;
	int st;

	st = tkv_vocab_tokenize(c->vocab, text, len, tkv_vocab_add_bos(c->vocab), true, NULL, 0, &n);
	if (st == TKV_ERR_NOMEM)
		return srv_errf(e, 503, "server_error", "out_of_memory", NULL, "out of memory; retry later");
	if (n == 0)
		return srv_errf(e, 400, INVALID, "invalid_value", param, "the prompt is empty");
	if (n >= c->n_ctx)
		return srv_errf(e, 400, INVALID, "context_length_exceeded", param,
				"the prompt is %zu tokens but the context holds %u (leave room to generate)", n, c->n_ctx);
	if (!(g->ids = tkv_malloc(g->alloc, n * sizeof *g->ids)))
		return srv_errf(e, 503, "server_error", "out_of_memory", NULL, "out of memory");
	if ((st = tkv_vocab_tokenize(c->vocab, text, len, tkv_vocab_add_bos(c->vocab), true, g->ids, n, &n)))
		return srv_errf(e, 503, "server_error", "out_of_memory", NULL, "cannot tokenize the prompt (%s)",
				tkv_status_str(st));
	g->n_prompt = n;
	return 0;
}

static int token_prompt(const struct srv_api_ctx *c, json_t *arr, struct srv_gen *g, struct srv_err *e)
{
	size_t n = json_array_size(arr), i;
	json_t *v;

	if (n == 0)
		return srv_errf(e, 400, INVALID, "invalid_value", "prompt", "the prompt is empty");
	if (n >= c->n_ctx)
		return srv_errf(e, 400, INVALID, "context_length_exceeded", "prompt",
				"the prompt is %zu tokens but the context holds %u (leave room to generate)", n, c->n_ctx);
	if (!(g->ids = tkv_malloc(g->alloc, n * sizeof *g->ids)))
		return srv_errf(e, 503, "server_error", "out_of_memory", NULL, "out of memory");
	json_array_foreach(arr, i, v) {
		json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;

		if (id < 0 || id >= (json_int_t)c->n_vocab)
			return srv_errf(e, 400, INVALID, "invalid_value", "prompt",
					"prompt token %zu is not a token id in [0, %u)", i, c->n_vocab);
		g->ids[i] = (int32_t)id;
	}
	g->n_prompt = n;
	return 0;
}

/* prompt: a string, an array of token ids, or an array holding one of those. */
static int get_prompt(const struct srv_api_ctx *c, json_t *v, struct srv_gen *g, struct srv_err *e)
{
	if (json_is_array(v) && json_array_size(v) == 1 &&
	    (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
		v = json_array_get(v, 0);
	else if (json_is_array(v) && json_array_size(v) > 1 && !json_is_integer(json_array_get(v, 0)))
		return srv_errf(e, 400, INVALID, "unsupported_value", "prompt",
				"one prompt per request (n = 1): send the prompts as separate requests");
	if (json_is_string(v))
		return tokenize(c, json_string_value(v), json_string_length(v), g, "prompt", e);
	if (json_is_array(v))
		return token_prompt(c, v, g, e);
	return srv_errf(e, 400, INVALID, "invalid_type", "prompt", "'prompt' must be a string or an array of token ids");
}

/* The conversation and the generation prompt as the template writes them. */
static int render(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n, struct srv_buf *out)
{
	size_t len = 0;

	tkv_chat_render(t, m, n, true, NULL, 0, &len);
	if (len + 1 > out->cap) {
		char *p = tkv_realloc(out->a, out->p, len + 1);

		if (!p)
			return -1;
		out->p = p;
		out->cap = len + 1;
	}
	if (tkv_chat_render(t, m, n, true, out->p, out->cap, &out->len))
		return -1;
	return 0;
}

/* messages: [{role, content}], content a string or text parts. */
static int get_messages(const struct srv_api_ctx *c, json_t *v, struct srv_gen *g, struct srv_err *e)
{
	size_t n = json_array_size(v), i;
	struct tkv_chat_msg *m = NULL;
	struct srv_buf *parts = NULL, text = { 0 };
	json_t *msg;
	int r = -1;

	if (!json_is_array(v))
		return srv_errf(e, 400, INVALID, "invalid_type", "messages", "'messages' must be an array");
	if (n == 0)
		return srv_errf(e, 400, INVALID, "invalid_value", "messages", "'messages' is empty");
	text.a = c->alloc;
	m = tkv_calloc(c->alloc, n, sizeof *m);
	parts = tkv_calloc(c->alloc, n, sizeof *parts);
	if (!m || !parts) {
		srv_errf(e, 503, "server_error", "out_of_memory", NULL, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++)
		parts[i].a = c->alloc;
	json_array_foreach(v, i, msg) {
		json_t *role = json_object_get(msg, "role"), *content = json_object_get(msg, "content");
		const char *rs;
		char param[48];

		snprintf(param, sizeof param, "messages[%zu]", i);
		if (!json_is_object(msg)) {
			srv_errf(e, 400, INVALID, "invalid_type", param, "%s must be an object", param);
			goto out;
		}
		if (!json_is_string(role)) {
			srv_errf(e, 400, INVALID, "invalid_type", param, "%s.role must be a string", param);
			goto out;
		}
		rs = json_string_value(role);
		if (!strcmp(rs, "system") || !strcmp(rs, "developer"))
			m[i].role = "system";
		else if (!strcmp(rs, "user"))
			m[i].role = "user";
		else if (!strcmp(rs, "assistant"))
			m[i].role = "assistant";
		else {
			srv_errf(e, 400, INVALID, "unsupported_value", param,
				 "%s.role must be system, developer, user or assistant (tool messages are not supported)", param);
			goto out;
		}
		if (json_is_string(content)) {
			m[i].content = json_string_value(content);
			m[i].content_len = json_string_length(content);
		} else if (json_is_array(content)) {
			size_t k;
			json_t *part;

			json_array_foreach(content, k, part) {
				json_t *type = json_object_get(part, "type"), *t = json_object_get(part, "text");

				if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(t)) {
					srv_errf(e, 400, INVALID, "unsupported_value", param,
						 "%s.content[%zu]: only {\"type\": \"text\", \"text\": ...} parts are supported",
						 param, k);
					goto out;
				}
				if ((k && srv_buf_str(&parts[i], "\n")) ||
				    srv_buf_add(&parts[i], json_string_value(t), json_string_length(t))) {
					srv_errf(e, 503, "server_error", "out_of_memory", NULL, "out of memory");
					goto out;
				}
			}
			m[i].content = parts[i].p ? parts[i].p : "";
			m[i].content_len = parts[i].len;
		} else if ((json_is_null(content) || !content) && m[i].role[0] == 'a') {
			m[i].content = "";
		} else {
			srv_errf(e, 400, INVALID, "invalid_type", param, "%s.content must be a string or an array of text parts",
				 param);
			goto out;
		}
	}
	if (render(&c->chat, m, n, &text)) {
		srv_errf(e, 503, "server_error", "out_of_memory", NULL, "out of memory");
		goto out;
	}
	r = tokenize(c, text.p ? text.p : "", text.len, g, "messages", e);
out:
	srv_buf_free(&text);
	for (i = 0; parts && i < n; i++)
		srv_buf_free(&parts[i]);
	tkv_free(c->alloc, parts);
	tkv_free(c->alloc, m);
	return r;
}

/* ---- the request ------------------------------------------------------------ */

static void note_ignored(struct srv_gen *g, const char *key)
{
	size_t len = strlen(g->ignored), k = strlen(key);

	if (len + k + 2 >= sizeof g->ignored)
		return;
	if (len)
		g->ignored[len++] = ',';
	for (size_t i = 0; i < k; i++)   /* header-safe */
		g->ignored[len + i] = isalnum((unsigned char)key[i]) || key[i] == '_' ? key[i] : '?';
	g->ignored[len + k] = 0;
}

/* Fields that must keep their default value. */
static int must_be_off(json_t *v, const char *key, struct srv_err *e)
{
	if (json_is_null(v) || json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 0) ||
	    (json_is_array(v) && json_array_size(v) == 0) || (json_is_object(v) && json_object_size(v) == 0))
		return 0;
	return srv_errf(e, 400, INVALID, "unsupported_parameter", key, "'%s' is not supported by this server", key);
}

/* A sampling field into g->sp (or the penalties and seed); 1 when key is
 * not one, else 0 or < 0 with e set. */
static int parse_sampling(const char *key, json_t *v, struct srv_gen *g, struct srv_err *e)
{
	long long x = 0;
	double d = 0;
	int rc = 0;

	if (!strcmp(key, "temperature")) {
		if (!(rc = get_num(v, key, 0, 2, &d, e)))
			g->sp.temp = (float)d;
	} else if (!strcmp(key, "top_p")) {
		if (!(rc = get_num(v, key, 0, 1, &d, e))) {
			if (d <= 0)
				rc = srv_errf(e, 400, INVALID, "invalid_value", key, "'top_p' must be in (0, 1]");
			g->sp.top_p = (float)d;
		}
	} else if (!strcmp(key, "top_k")) {
		if (!(rc = get_int(v, key, 0, 1 << 30, &x, e)))
			g->sp.top_k = (int32_t)x;
	} else if (!strcmp(key, "min_p")) {
		if (!(rc = get_num(v, key, 0, 1, &d, e)))
			g->sp.min_p = (float)d;
	} else if (!strcmp(key, "repeat_penalty") || !strcmp(key, "repetition_penalty")) {
		if (!(rc = get_num(v, key, 1e-3, 100, &d, e)))
			g->sp.repeat_penalty = (float)d;
	} else if (!strcmp(key, "repeat_last_n")) {
		if (!(rc = get_int(v, key, 0, 1 << 20, &x, e)))
			g->sp.repeat_last_n = (int32_t)x;
	} else if (!strcmp(key, "frequency_penalty")) {
		if (!(rc = get_num(v, key, -2, 2, &d, e)))
			g->freq_penalty = (float)d;
	} else if (!strcmp(key, "presence_penalty")) {
		if (!(rc = get_num(v, key, -2, 2, &d, e)))
			g->presence_penalty = (float)d;
	} else if (!strcmp(key, "seed")) {
		if (!(rc = get_int(v, key, INT64_MIN, INT64_MAX, &x, e))) {
			g->sp.seed = (uint64_t)x;
			g->seed_set = true;
		}
	} else {
		return 1;
	}
	return rc;
}

/* max_tokens / max_completion_tokens into *out. */
static int parse_max_tokens(const struct srv_api_ctx *c, const char *key, json_t *v, long long *out,
			    struct srv_err *e)
{
	long long x = 0;
	int rc = get_int(v, key, 1, c->max_tokens, &x, e);

	if (rc == 0)
		*out = x;
	else if (rc < 0 && !strcmp(e->code, "invalid_value") && json_is_integer(v))
		srv_errf(e, 400, INVALID, "invalid_value", key, "'%s' is %lld; this server allows 1 to %u", key,
			 (long long)json_integer_value(v), c->max_tokens);
	else if (rc < 0 && !strcmp(e->code, "invalid_value"))
		srv_errf(e, 400, INVALID, "invalid_value", key, "'%s' is %g; this server allows 1 to %u", key,
			 json_real_value(v), c->max_tokens);
	return rc;
}

/* Fields OpenAI defines that this server refuses unless off, accepts
 * without effect, or checks the value of; 1 when key is none of them. */
static int parse_unsupported(const char *key, json_t *v, struct srv_err *e)
{
	static const char *const off[] = { "logprobs", "top_logprobs", "echo", "suffix", "logit_bias", "tools",
					   "functions", "tool_choice", "function_call", "audio", "prediction" };
	static const char *const inert[] = { "user", "store", "metadata", "service_tier", "parallel_tool_calls",
					     "modalities", "reasoning_effort" };

	for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
		if (!strcmp(key, off[i])) {
			if (!strcmp(key, "tool_choice") && json_is_string(v) && !strcmp(json_string_value(v), "none"))
				return 0;
			return must_be_off(v, key, e);
		}
	for (size_t i = 0; i < sizeof inert / sizeof inert[0]; i++)
		if (!strcmp(key, inert[i]))
			return 0;
	if (!strcmp(key, "response_format")) {
		json_t *t = json_object_get(v, "type");

		if (!json_is_null(v) && !(json_is_string(t) && !strcmp(json_string_value(t), "text")))
			return srv_errf(e, 400, INVALID, "unsupported_value", key,
					"only response_format {\"type\": \"text\"} is supported");
		return 0;
	}
	return 1;
}

/* One field of the request object; 0 or < 0 with e set. */
static int parse_field(const struct srv_api_ctx *c, enum srv_kind kind, const char *key, json_t *v,
		       struct srv_gen *g, json_t **input, long long *max_tokens, struct srv_err *e)
{
	long long x = 0;
	int rc;

	if ((rc = parse_sampling(key, v, g, e)) != 1)
		return rc;
	if ((rc = parse_unsupported(key, v, e)) != 1)
		return rc;
	if (!strcmp(key, "model")) {
		if (!json_is_string(v) && !json_is_null(v))
			return srv_errf(e, 400, INVALID, "invalid_type", key, "'model' must be a string");
	} else if ((kind == SRV_COMPLETION && !strcmp(key, "prompt")) || (kind == SRV_CHAT && !strcmp(key, "messages"))) {
		*input = v;
	} else if (!strcmp(key, "max_tokens") || (kind == SRV_CHAT && !strcmp(key, "max_completion_tokens"))) {
		return parse_max_tokens(c, key, v, max_tokens, e);
	} else if (!strcmp(key, "session_id")) {
		/* a conversation resumable on any replica (--kv-store): its chunks are stored at the end */
		if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 256)
			return srv_errf(e, 400, INVALID, "invalid_type", key,
					"'%s' must be a string of 1 to 256 characters", key);
		g->session = true;
	} else if (!strcmp(key, "n") || !strcmp(key, "best_of")) {
		if (!(rc = get_int(v, key, 1, 1 << 30, &x, e)) && x != 1)
			rc = srv_errf(e, 400, INVALID, "unsupported_value", key, "'%s' must be 1 on this server", key);
		return rc;
	} else if (!strcmp(key, "stream")) {
		return get_bool(v, key, &g->stream, e);
	} else if (!strcmp(key, "stream_options")) {
		json_t *iu = json_object_get(v, "include_usage");

		if (!json_is_object(v) && !json_is_null(v))
			return srv_errf(e, 400, INVALID, "invalid_type", key, "'stream_options' must be an object");
		return iu ? get_bool(iu, "stream_options.include_usage", &g->include_usage, e) : 0;
	} else if (!strcmp(key, "stop")) {
		return get_stop(g, v, e);
	} else if (!strcmp(key, "ignore_eos")) {
		return get_bool(v, key, &g->ignore_eos, e);
	} else {
		note_ignored(g, key);
	}
	return 0;
}

/* After the fields: the prompt or messages, the plain template's stop, and
 * the tokens left to generate. */
static int parse_finish(const struct srv_api_ctx *c, enum srv_kind kind, json_t *input, long long max_tokens,
			struct srv_gen *g, struct srv_err *e)
{
	uint32_t room;

	if (!input || json_is_null(input)) {
		const char *what = kind == SRV_CHAT ? "messages" : "prompt";

		return srv_errf(e, 400, INVALID, "missing_required_parameter", what, "'%s' is required", what);
	}
	if (kind == SRV_CHAT ? get_messages(c, input, g, e) : get_prompt(c, input, g, e))
		return -1;
	/* a model without a chat template would go on to write the user's turn */
	if (kind == SRV_CHAT && c->chat.family == TKV_CHAT_PLAIN && g->n_stop < SRV_MAX_STOP) {
		if (!(g->stop[g->n_stop] = tkv_strndup(g->alloc, "\nUser:", 6)))
			return srv_errf(e, 503, "server_error", "out_of_memory", NULL, "out of memory; retry later");
		g->stop_len[g->n_stop++] = 6;
	}
	/* room left in the context; the default is all of it up to --max-tokens */
	room = c->n_ctx - (uint32_t)g->n_prompt;
	g->max_tokens = max_tokens > 0 ? (uint32_t)max_tokens : c->max_tokens;
	if (g->max_tokens > room)
		g->max_tokens = room;
	return 0;
}

int srv_api_parse(const struct srv_api_ctx *c, enum srv_kind kind, const char *body, size_t len,
		  struct srv_gen *g, struct srv_err *e)
{
	json_error_t je;
	json_t *root, *v, *input = NULL;
	const char *key;
	long long max_tokens = -1;
	int r = -1;

	memset(g, 0, sizeof *g);
	g->kind = kind;
	g->sp = tkv_sampler_default_params();
	g->alloc = c->alloc;
	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	/* jansson reports out of memory with its code, or - when its lexer cannot
	 * start - with no message at all */
	if (!root && (json_error_code(&je) == json_error_out_of_memory || !je.text[0]))
		return srv_errf(e, 503, "server_error", "out_of_memory", NULL, "out of memory; retry later");
	if (!root)
		return srv_errf(e, 400, INVALID, "invalid_json", NULL, "malformed JSON at line %d column %d: %s",
				je.line, je.column, je.text);
	if (!json_is_object(root)) {
		srv_errf(e, 400, INVALID, "invalid_json", NULL, "the request body must be a JSON object");
		goto out;
	}
	json_object_foreach(root, key, v)
		if (parse_field(c, kind, key, v, g, &input, &max_tokens, e) < 0)
			goto out;
	if (parse_finish(c, kind, input, max_tokens, g, e))
		goto out;
	r = 0;
out:
	json_decref(root);
	return r;
}

/* ---- responses ----------------------------------------------------------------- */

/* The compact text of j (taken). Not json_dumps: when its growing buffer
 * fails, jansson 2.14 drops an object key from the output and goes on, so the
 * text is measured with json_dumpb and written into a buffer of that size,
 * from jansson's allocator (malloc unless changed; released with free()). */
char *srv_api_dump(json_t *j)
{
	json_malloc_t jmalloc;
	json_free_t jfree;
	size_t n;
	char *s = NULL;

	if (!j)
		return NULL;
	json_get_alloc_funcs(&jmalloc, &jfree);
	n = json_dumpb(j, NULL, 0, JSON_COMPACT);
	if (n && (s = jmalloc(n + 1))) {
		if (json_dumpb(j, s, n, JSON_COMPACT) == n) {
			s[n] = 0;
		} else {
			jfree(s);
			s = NULL;
		}
	}
	json_decref(j);
	return s;
}

char *srv_api_error_json(const struct srv_err *e)
{
	return srv_api_dump(json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", e->msg, "type",
			      e->type ? e->type : "server_error", "param", e->param[0] ? e->param : NULL, "code",
			      e->code));
}

static json_t *usage_obj(const struct srv_usage *u)
{
	return json_pack("{s:i, s:i, s:i}", "prompt_tokens", (json_int_t)u->prompt, "completion_tokens",
			 (json_int_t)u->completion, "total_tokens", (json_int_t)u->prompt + u->completion);
}

char *srv_api_response_json(enum srv_kind kind, const char *id, long created, const char *model,
			    const char *text, size_t len, const char *finish, const struct srv_usage *u)
{
	json_t *choice;

	if (kind == SRV_CHAT)
		choice = json_pack("{s:i, s:{s:s, s:s%}, s:n, s:s}", "index", 0, "message", "role", "assistant",
				   "content", text ? text : "", len, "logprobs", "finish_reason", finish);
	else
		choice = json_pack("{s:s%, s:i, s:n, s:s}", "text", text ? text : "", len, "index", 0, "logprobs",
				   "finish_reason", finish);
	return srv_api_dump(json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", id, "object",
			      kind == SRV_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)created,
			      "model", model, "choices", choice, "usage", usage_obj(u)));
}

char *srv_api_chunk_json(enum srv_kind kind, const char *id, long created, const char *model,
			 bool role, const char *text, size_t len, const char *finish)
{
	json_t *choice;

	if (kind == SRV_CHAT) {
		json_t *delta = json_object();

		/* a failed set is out of memory: drop the whole chunk, not the field */
		if (delta && ((role && json_object_set_new(delta, "role", json_string("assistant"))) ||
			      ((text || role) &&
			       json_object_set_new(delta, "content", json_stringn(text ? text : "", text ? len : 0))))) {
			json_decref(delta);
			delta = NULL;
		}
		choice = json_pack("{s:i, s:o, s:n, s:s?}", "index", 0, "delta", delta, "logprobs", "finish_reason",
				   finish);
	} else {
		choice = json_pack("{s:s%, s:i, s:n, s:s?}", "text", text ? text : "", text ? len : 0, "index", 0,
				   "logprobs", "finish_reason", finish);
	}
	return srv_api_dump(json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", id, "object",
			      kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion", "created",
			      (json_int_t)created, "model", model, "choices", choice));
}

char *srv_api_usage_chunk_json(enum srv_kind kind, const char *id, long created, const char *model,
			       const struct srv_usage *u)
{
	return srv_api_dump(json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", id, "object",
			      kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion", "created",
			      (json_int_t)created, "model", model, "choices", "usage", usage_obj(u)));
}

char *srv_api_models_json(const char *model, long created)
{
	return srv_api_dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", model, "object",
			      "model", "created", (json_int_t)created, "owned_by", "tierkv"));
}
