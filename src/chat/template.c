/* template.c - chat templates (tierkv.h, "chat templates"): the families
 * tierkv knows, recognised in the Jinja text of tokenizer.chat_template by
 * marker strings, and rendered by hand. There is no Jinja interpreter: for
 * system, user and assistant messages the families differ only in a few
 * strings and rules (which messages are trimmed, where the system text goes),
 * and those rules are written out here, one renderer per family.
 *
 * Every renderer writes what the family's Jinja writes with bos_token = ""
 * (BOS is the tokenizer's); tests/test_chat.c compares them byte for byte with
 * Jinja2's output on the real templates (scripts/chat_expected.py). */
#include <stdbool.h>
#include <string.h>

#include "tierkv.h"
#include "util/status.h"

static const char *const family_names[TKV_CHAT_FAMILY_COUNT] = {
	[TKV_CHAT_PLAIN] = "plain",
	[TKV_CHAT_CHATML] = "chatml",
	[TKV_CHAT_LLAMA2] = "llama-2",
	[TKV_CHAT_MISTRAL] = "mistral",
	[TKV_CHAT_MISTRAL_NEMO] = "mistral-nemo",
	[TKV_CHAT_MISTRAL_V7] = "mistral-v7",
	[TKV_CHAT_LLAMA3] = "llama-3",
	[TKV_CHAT_ZEPHYR] = "zephyr",
	[TKV_CHAT_PHI3] = "phi-3",
	[TKV_CHAT_GEMMA] = "gemma",
	[TKV_CHAT_GEMMA4] = "gemma-4",
	[TKV_CHAT_PHI4] = "phi-4",
};

/* The variant a family gets by name: the one most GGUFs carry today. */
static const unsigned family_flags[TKV_CHAT_FAMILY_COUNT] = {
	[TKV_CHAT_LLAMA2] = TKV_CHAT_SYS_TAGS,
	[TKV_CHAT_LLAMA3] = TKV_CHAT_DATE_HEADER,
	[TKV_CHAT_PHI3] = TKV_CHAT_EOS_AT_END,
	[TKV_CHAT_MISTRAL] = TKV_CHAT_INST_SPACE | TKV_CHAT_CLOSE_SPACE,
};

const char *tkv_chat_family_names(void)
{
	return "chatml, llama-2, mistral, mistral-nemo, mistral-v7, llama-3, zephyr, phi-3, phi-4, gemma, gemma-4, "
	       "plain";
}

const char *tkv_chat_template_name(const struct tkv_chat_template *t)
{
	return (unsigned)t->family < TKV_CHAT_FAMILY_COUNT ? family_names[t->family] : "?";
}

static void set_family(struct tkv_chat_template *t, enum tkv_chat_family f, unsigned flags)
{
	memset(t, 0, sizeof *t);
	t->family = f;
	t->flags = flags;
	strcpy(t->eos, "</s>");
}

int tkv_chat_template_by_name(struct tkv_chat_template *t, const char *name)
{
	static const struct { const char *alias, *name; } aliases[] = {
		{ "llama2", "llama-2" }, { "llama3", "llama-3" }, { "phi3", "phi-3" }, { "gemma4", "gemma-4" },
		{ "qwen", "chatml" }, { "phi4", "phi-4" },
	};

	if (!t || !name)
		return TKV_ERR_ARG;
	for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
		if (!strcmp(name, aliases[i].alias))
			name = aliases[i].name;
	for (int f = 0; f < TKV_CHAT_FAMILY_COUNT; f++)
		if (!strcmp(name, family_names[f])) {
			set_family(t, (enum tkv_chat_family)f, family_flags[f]);
			return TKV_OK;
		}
	return TKV_ERR_ARG;
}

/* ---- detection ------------------------------------------------------------- */

static const char *find(const char *s, size_t len, const char *needle)
{
	size_t n = strlen(needle);

	for (size_t i = 0; n <= len && i + n <= len; i++)
		if (s[i] == needle[0] && !memcmp(s + i, needle, n))
			return s + i;
	return NULL;
}

static bool has(const char *s, size_t len, const char *needle)
{
	return find(s, len, needle) != NULL;
}

/* A ChatML template's default system text: a literal
 * '<|im_start|>system\n...<|im_end|>' with nothing but text in between (the
 * branch taken when the conversation has no system message). The newline may
 * be written as "\n" in the Jinja string or as a real one; escapes are undone. */
static void chatml_default_system(struct tkv_chat_template *t, const char *s, size_t len)
{
	static const char open[] = "<|im_start|>system";
	const char *p = s, *end = s + len;

	while ((p = find(p, (size_t)(end - p), open))) {
		const char *q = p + sizeof open - 1, *close;
		size_t n = 0;
		bool ok = true;

		p = q;
		if (end - q >= 2 && q[0] == '\\' && q[1] == 'n')
			q += 2;
		else if (q < end && *q == '\n')
			q++;
		else
			continue;
		if (!(close = find(q, (size_t)(end - q), "<|im_end|>")) || close == q)
			continue;
		for (const char *c = q; c < close && ok; c++) {
			char ch = *c;

			if (ch == '\'' || ch == '"' || ch == '{' || ch == '}' || ch == '+')
				ok = false;
			else if (ch == '\\' && c + 1 < close) {
				c++;
				ch = *c == 'n' ? '\n' : *c == 't' ? '\t' : *c;
			}
			if (ok && n + 1 < sizeof t->default_system)
				t->default_system[n++] = ch;
			else
				ok = false;
		}
		if (ok) {
			t->default_system[n] = 0;
			return;
		}
		t->default_system[0] = 0;
	}
}

/* Phi-3's variants: a template that names roles one by one and never
 * "system" drops system messages (Phi-3-mini, -medium); one without a
 * generation prompt opens the reply after each user turn. */
static void detect_phi3(struct tkv_chat_template *t, const char *s, size_t len)
{
	set_family(t, TKV_CHAT_PHI3, 0);
	if (has(s, len, "<|user|>") && !has(s, len, "system"))
		t->flags |= TKV_CHAT_NO_SYSTEM;
	if (!has(s, len, "add_generation_prompt"))
		t->flags |= TKV_CHAT_USER_OPENS;
	if (has(s, len, "eos_token"))
		t->flags |= TKV_CHAT_EOS_AT_END;
}

/* The [INST] families without <<SYS>>: Mistral v7 ([SYSTEM_PROMPT]), Nemo
 * (the system text in the last user turn), else Mistral 7B; the spaces
 * around the tags as the template's literals have them. */
static void detect_mistral(struct tkv_chat_template *t, const char *s, size_t len)
{
	if (has(s, len, "[SYSTEM_PROMPT]"))
		set_family(t, TKV_CHAT_MISTRAL_V7, 0);
	else if (has(s, len, "loop.last and system_message"))
		set_family(t, TKV_CHAT_MISTRAL_NEMO, 0);
	else
		set_family(t, TKV_CHAT_MISTRAL, 0);
	if (has(s, len, "' [INST] '") || has(s, len, "\" [INST] \""))
		t->flags |= TKV_CHAT_INST_LEAD;
	if (has(s, len, "[INST] "))
		t->flags |= TKV_CHAT_INST_SPACE;
	if (has(s, len, " [/INST]"))
		t->flags |= TKV_CHAT_CLOSE_SPACE;
	if (has(s, len, "' ' + message") || has(s, len, "\" \" + message"))
		t->flags |= TKV_CHAT_REPLY_SPACE;
}

int tkv_chat_template_detect(struct tkv_chat_template *t, const char *s, size_t len)
{
	set_family(t, TKV_CHAT_PLAIN, 0);
	if (!s || !len)
		return TKV_ERR_UNSUPPORTED;
	if (has(s, len, "<|start_header_id|>") && has(s, len, "<|eot_id|>"))
		set_family(t, TKV_CHAT_LLAMA3, has(s, len, "Cutting Knowledge Date") ? TKV_CHAT_DATE_HEADER : 0);
	else if (has(s, len, "<|im_sep|>"))
		set_family(t, TKV_CHAT_PHI4, has(s, len, "add_generation_prompt") ? 0 : TKV_CHAT_USER_OPENS);
	else if (has(s, len, "<|im_start|>")) {
		set_family(t, TKV_CHAT_CHATML, has(s, len, "</think>") ? TKV_CHAT_THINK : 0);
		chatml_default_system(t, s, len);
	} else if (has(s, len, "<start_of_turn>"))
		set_family(t, TKV_CHAT_GEMMA, 0);
	else if (has(s, len, "<|turn>"))
		set_family(t, TKV_CHAT_GEMMA4, 0);
	else if ((has(s, len, "<|user|>") || has(s, len, "<|assistant|>")) && has(s, len, "<|end|>"))
		detect_phi3(t, s, len);
	else if (has(s, len, "<|user|>"))
		set_family(t, TKV_CHAT_ZEPHYR, 0);
	else if (has(s, len, "[INST]") && has(s, len, "<<SYS>>"))
		set_family(t, TKV_CHAT_LLAMA2, TKV_CHAT_SYS_TAGS);
	else if (has(s, len, "[INST]") || has(s, len, "[SYSTEM_PROMPT]"))
		detect_mistral(t, s, len);
	else
		return TKV_ERR_UNSUPPORTED;
	return TKV_OK;
}

int tkv_chat_template_from_model(struct tkv_chat_template *t, const struct tkv_model *m, const char *name,
				 struct tkv_error *err)
{
	const struct tkv_vocab *v = tkv_model_vocab(m);
	int32_t eos = tkv_vocab_eos(v);
	size_t len = 0, n = 0;
	const char *text = tkv_model_chat_template(m, &len);
	const char *piece = eos >= 0 ? tkv_vocab_token_text(v, eos, &n) : NULL;
	int st = TKV_OK;

	if (name) {
		if (tkv_chat_template_by_name(t, name))
			return tkv_errf(err, TKV_ERR_ARG, "unknown chat template '%s' (one of %s)", name,
					tkv_chat_family_names());
	} else if (!text) {
		set_family(t, TKV_CHAT_PLAIN, 0);
	} else if ((st = tkv_chat_template_detect(t, text, len))) {
		tkv_errf(err, st, "the model's chat template is not one tierkv knows (%s)", tkv_chat_family_names());
	}
	if (piece && n < sizeof t->eos) {
		memcpy(t->eos, piece, n);
		t->eos[n] = 0;
	}
	return st;
}

/* ---- rendering --------------------------------------------------------------- */

/* Output that counts what it would write past cap. */
struct out {
	char *buf;
	size_t cap, len;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->len < o->cap) {
		size_t k = n < o->cap - o->len ? n : o->cap - o->len;

		memcpy(o->buf + o->len, s, k);
	}
	o->len += n;
}

static void puts_(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Jinja's | trim (Python's str.strip() on ASCII whitespace). */
static void put_trim(struct out *o, const char *s, size_t n)
{
	while (n && is_space(*s)) {
		s++;
		n--;
	}
	while (n && is_space(s[n - 1]))
		n--;
	put(o, s, n);
}

static void put_msg(struct out *o, const struct tkv_chat_msg *m)
{
	put(o, m->content, m->content_len);
}

static bool role_is(const struct tkv_chat_msg *m, const char *role)
{
	return !strcmp(m->role, role);
}

/* The last occurrence of needle in s[0..len), or NULL. */
static const char *find_last(const char *s, size_t len, const char *needle)
{
	const char *hit = NULL, *p = s, *end = s + len;

	while ((p = find(p, (size_t)(end - p), needle))) {
		hit = p;
		p++;
	}
	return hit;
}

static const char *skip_nl(const char *p, const char *end)
{
	while (p < end && *p == '\n')
		p++;
	return p;
}

/* ChatML. Qwen3 (THINK) splits a reply at </think>: the reasoning (after
 * the last <think> before the first </think>) is written only into replies
 * after the last user message, and there always into the final one. */
static void chatml_reply(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, bool after_last_user,
			 bool last, struct out *o)
{
	const char *c = m->content, *end = c + m->content_len, *r = c, *re = c, *p;

	puts_(o, "<|im_start|>assistant\n");
	if (!(t->flags & TKV_CHAT_THINK)) {
		put(o, c, m->content_len);
		return;
	}
	if ((p = find(c, m->content_len, "</think>"))) {
		re = p;
		if ((p = find_last(c, (size_t)(re - c), "<think>")))
			r = p + 7;
		c = skip_nl(find_last(c, m->content_len, "</think>") + 8, end);
		while (re > r && re[-1] == '\n')
			re--;
		r = skip_nl(r, re);
	}
	if (after_last_user && (last || re > r)) {
		puts_(o, "<think>\n");
		put(o, r, (size_t)(re - r));
		puts_(o, "\n</think>\n\n");
		c = skip_nl(c, end);
	}
	put(o, c, (size_t)(end - c));
}

static void render_chatml(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n, bool gen,
			  struct out *o)
{
	size_t last_user = n ? n - 1 : 0;

	for (size_t i = 0; i < n; i++)
		if (role_is(&m[i], "user"))
			last_user = i;
	if ((!n || !role_is(&m[0], "system")) && t->default_system[0]) {
		puts_(o, "<|im_start|>system\n");
		puts_(o, t->default_system);
		puts_(o, "<|im_end|>\n");
	}
	for (size_t i = 0; i < n; i++) {
		if (role_is(&m[i], "assistant")) {
			chatml_reply(t, &m[i], i > last_user, i + 1 == n, o);
		} else {
			puts_(o, "<|im_start|>");
			puts_(o, m[i].role);
			puts_(o, "\n");
			put_msg(o, &m[i]);
		}
		puts_(o, "<|im_end|>\n");
	}
	if (gen)
		puts_(o, "<|im_start|>assistant\n");
}

/* Llama 3: contents trimmed; 3.1+ always opens with a system header that
 * carries the knowledge and (fixed) today dates. */
static void render_llama3(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n, bool gen,
			  struct out *o)
{
	size_t i = 0;

	if (t->flags & TKV_CHAT_DATE_HEADER) {
		puts_(o, "<|start_header_id|>system<|end_header_id|>\n\n"
			 "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
		if (n && role_is(&m[0], "system")) {
			put_trim(o, m[0].content, m[0].content_len);
			i = 1;
		}
		puts_(o, "<|eot_id|>");
	}
	for (; i < n; i++) {
		puts_(o, "<|start_header_id|>");
		puts_(o, m[i].role);
		puts_(o, "<|end_header_id|>\n\n");
		put_trim(o, m[i].content, m[i].content_len);
		puts_(o, "<|eot_id|>");
	}
	if (gen)
		puts_(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Gemma 2/3: no system role; its text and a blank line open the first turn.
 * Contents trimmed; the assistant is "model". Gemma 4 has a system turn. */
static void render_gemma(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n, bool gen,
			 struct out *o)
{
	bool g4 = t->family == TKV_CHAT_GEMMA4;
	const char *open = g4 ? "<|turn>" : "<start_of_turn>", *close = g4 ? "<turn|>\n" : "<end_of_turn>\n";
	const struct tkv_chat_msg *sys = NULL;
	size_t i = 0;

	if (n && role_is(&m[0], "system"))
		sys = &m[i++];
	if (sys && g4) {
		puts_(o, "<|turn>system\n");
		put_trim(o, sys->content, sys->content_len);
		puts_(o, close);
	}
	for (size_t first = i; i < n; i++) {
		puts_(o, open);
		puts_(o, role_is(&m[i], "assistant") ? "model" : m[i].role);
		puts_(o, "\n");
		if (sys && !g4 && i == first) {
			put_msg(o, sys);
			puts_(o, "\n\n");
		}
		put_trim(o, m[i].content, m[i].content_len);
		puts_(o, close);
	}
	if (gen)
		puts_(o, g4 ? "<|turn>model\n<|channel>thought\n<channel|>" : "<start_of_turn>model\n");
}

/* Phi-3.5: <|role|>\n...<|end|>\n, eos_token after a finished conversation.
 * Phi-3-mini: no system, and every user turn already opens the reply. */
static void render_phi3(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n, bool gen,
			struct out *o)
{
	bool opens = t->flags & TKV_CHAT_USER_OPENS;

	for (size_t i = 0; i < n; i++) {
		bool asst = role_is(&m[i], "assistant");

		if (role_is(&m[i], "system") && ((t->flags & TKV_CHAT_NO_SYSTEM) || !m[i].content_len))
			continue;
		if (!(asst && opens)) {
			puts_(o, "<|");
			puts_(o, m[i].role);
			puts_(o, "|>\n");
		}
		put_msg(o, &m[i]);
		puts_(o, "<|end|>\n");
		if (opens && role_is(&m[i], "user"))
			puts_(o, "<|assistant|>\n");
	}
	if (opens)
		return;
	if (gen)
		puts_(o, "<|assistant|>\n");
	else if (t->flags & TKV_CHAT_EOS_AT_END)
		puts_(o, t->eos);
}

/* Llama 2's [INST] turns: the system text opens the first one inside
 * <<SYS>>; later turns open with <s> (BOS is the tokenizer's only at the
 * start). */
static void render_llama2(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n,
			  struct out *o)
{
	bool inside = false, first = true, tags = t->flags & TKV_CHAT_SYS_TAGS;

	for (size_t i = 0; i < n; i++) {
		if (role_is(&m[i], "assistant")) {
			if (inside)
				puts_(o, " ");
			put_msg(o, &m[i]);
			puts_(o, t->eos);
			inside = false;
			continue;
		}
		if (!inside) {
			puts_(o, first ? "[INST] " : "<s>[INST] ");
			inside = true;
			first = false;
		}
		if (role_is(&m[i], "system")) {
			puts_(o, tags ? "<<SYS>>\n" : "");
			put_msg(o, &m[i]);
			puts_(o, tags ? "\n<</SYS>>\n\n" : "\n\n");
		} else {
			put_msg(o, &m[i]);
			puts_(o, " [/INST]");
		}
	}
}

/* Mistral: [INST]user[/INST]reply</s>, with the template's spaces. The
 * system text opens the first user turn (Mistral 7B), the last one when that
 * is the final message (Nemo), or stands in [SYSTEM_PROMPT] tags (v7). */
static void render_mistral(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n,
			   struct out *o)
{
	bool v7 = t->family == TKV_CHAT_MISTRAL_V7, sp = t->flags & TKV_CHAT_INST_SPACE;
	const struct tkv_chat_msg *sys = NULL;
	size_t i = 0, first_user = n;

	if (!v7 && n && role_is(&m[0], "system"))
		sys = &m[i++];
	for (size_t k = i; k < n && first_user == n; k++)
		if (role_is(&m[k], "user"))
			first_user = k;
	for (; i < n; i++) {
		if (role_is(&m[i], "system")) {
			puts_(o, sp ? "[SYSTEM_PROMPT] " : "[SYSTEM_PROMPT]");
			put_msg(o, &m[i]);
			puts_(o, "[/SYSTEM_PROMPT]");
		} else if (role_is(&m[i], "user")) {
			bool here = t->family == TKV_CHAT_MISTRAL_NEMO ? i + 1 == n : i == first_user;

			puts_(o, t->flags & TKV_CHAT_INST_LEAD ? " [INST]" : "[INST]");
			puts_(o, sp ? " " : "");
			if (sys && here) {
				put_msg(o, sys);
				puts_(o, "\n\n");
			}
			put_msg(o, &m[i]);
			puts_(o, t->flags & TKV_CHAT_CLOSE_SPACE ? " [/INST]" : "[/INST]");
		} else {
			puts_(o, t->flags & TKV_CHAT_REPLY_SPACE ? " " : "");
			put_msg(o, &m[i]);
			puts_(o, t->eos);
		}
	}
}

/* Phi-4: <|im_start|>role<|im_sep|>...<|im_end|>, no newlines. */
static void render_phi4(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n, bool gen,
			struct out *o)
{
	bool opens = t->flags & TKV_CHAT_USER_OPENS;

	for (size_t i = 0; i < n; i++) {
		if (!(opens && role_is(&m[i], "assistant"))) {
			puts_(o, "<|im_start|>");
			puts_(o, m[i].role);
			puts_(o, "<|im_sep|>");
		}
		put_msg(o, &m[i]);
		puts_(o, "<|im_end|>");
		if (opens && role_is(&m[i], "user"))
			puts_(o, "<|im_start|>assistant<|im_sep|>");
	}
	if (gen && !opens)
		puts_(o, "<|im_start|>assistant<|im_sep|>");
}

static void render_simple(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n, bool gen,
			  struct out *o)
{
	for (size_t i = 0; i < n; i++) {
		if (t->family == TKV_CHAT_ZEPHYR) {
			puts_(o, "<|");
			puts_(o, m[i].role);
			puts_(o, "|>\n");
			put_msg(o, &m[i]);
			puts_(o, t->eos);
			puts_(o, "\n");
			continue;
		}
		puts_(o, role_is(&m[i], "system") ? "System: " : role_is(&m[i], "user") ? "User: " : "Assistant: ");
		put_msg(o, &m[i]);
		puts_(o, "\n");
	}
	if (gen)
		puts_(o, t->family == TKV_CHAT_ZEPHYR ? "<|assistant|>\n" : "Assistant:");
}

int tkv_chat_render(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n,
		    bool gen, char *buf, size_t cap, size_t *n_out)
{
	struct out o = { buf, buf ? cap : 0, 0 };

	*n_out = 0;
	if (!t || (n && !m))
		return TKV_ERR_ARG;
	for (size_t i = 0; i < n; i++)
		if (!m[i].role || (!m[i].content && m[i].content_len) ||
		    !(role_is(&m[i], "system") || role_is(&m[i], "user") || role_is(&m[i], "assistant")))
			return TKV_ERR_ARG;
	switch (t->family) {
	case TKV_CHAT_CHATML: render_chatml(t, m, n, gen, &o); break;
	case TKV_CHAT_LLAMA3: render_llama3(t, m, n, gen, &o); break;
	case TKV_CHAT_GEMMA:
	case TKV_CHAT_GEMMA4: render_gemma(t, m, n, gen, &o); break;
	case TKV_CHAT_PHI3: render_phi3(t, m, n, gen, &o); break;
	case TKV_CHAT_LLAMA2: render_llama2(t, m, n, &o); break;
	case TKV_CHAT_MISTRAL:
	case TKV_CHAT_MISTRAL_NEMO:
	case TKV_CHAT_MISTRAL_V7: render_mistral(t, m, n, &o); break;
	case TKV_CHAT_PHI4: render_phi4(t, m, n, gen, &o); break;
	case TKV_CHAT_ZEPHYR:
	case TKV_CHAT_PLAIN: render_simple(t, m, n, gen, &o); break;
	default: return TKV_ERR_ARG;
	}
	*n_out = o.len;
	if (o.len >= cap || !buf)
		return TKV_ERR_ARG;
	buf[o.len] = 0;
	return TKV_OK;
}

int tkv_chat_turn_end(const struct tkv_chat_template *t, char *buf, size_t cap)
{
	const char *s = NULL;
	struct out o = { buf, buf ? cap : 0, 0 };

	switch (t->family) {
	case TKV_CHAT_CHATML: s = "<|im_end|>\n"; break;
	case TKV_CHAT_LLAMA3: s = "<|eot_id|>"; break;
	case TKV_CHAT_GEMMA: s = "<end_of_turn>\n"; break;
	case TKV_CHAT_GEMMA4: s = "<turn|>\n"; break;
	case TKV_CHAT_PHI3: s = "<|end|>\n"; break;
	case TKV_CHAT_PHI4: s = "<|im_end|>"; break;
	case TKV_CHAT_PLAIN: s = "\n"; break;
	default: break;
	}
	if (s) {
		puts_(&o, s);
	} else {
		puts_(&o, t->eos);
		if (t->family == TKV_CHAT_ZEPHYR)
			puts_(&o, "\n");
	}
	if (o.len >= cap || !buf)
		return TKV_ERR_ARG;
	buf[o.len] = 0;
	return (int)o.len;
}
