/* chat.c - chat templates: the families tierkv knows, recognised in the Jinja
 * text of the GGUF key tokenizer.chat_template by marker strings, and rendered
 * by hand (no Jinja interpreter: the families differ only in a few strings).
 *
 * Every rendering ends with the assistant's generation prompt. BOS is left to
 * the tokenizer (add_bos), so it is not written for the first turn. */
#include <string.h>

#include "server/srv_impl.h"

static const char *const chat_names[SRV_CHAT_COUNT] = {
	[SRV_CHAT_PLAIN] = "plain",   [SRV_CHAT_CHATML] = "chatml", [SRV_CHAT_LLAMA2] = "llama-2",
	[SRV_CHAT_LLAMA3] = "llama-3", [SRV_CHAT_ZEPHYR] = "zephyr", [SRV_CHAT_PHI3] = "phi-3",
	[SRV_CHAT_GEMMA] = "gemma",
};

const char *srv_chat_family_names(void)
{
	return "chatml, llama-2, mistral, llama-3, zephyr, phi-3, gemma, plain";
}

static bool has(const char *s, size_t len, const char *needle)
{
	size_t n = strlen(needle);

	if (n > len)
		return false;
	for (size_t i = 0; i + n <= len; i++)
		if (s[i] == needle[0] && !memcmp(s + i, needle, n))
			return true;
	return false;
}

int srv_chat_detect(const char *t, size_t len)
{
	if (!t || !len)
		return -1;
	if (has(t, len, "<|start_header_id|>") && has(t, len, "<|eot_id|>"))
		return SRV_CHAT_LLAMA3;
	if (has(t, len, "<|im_start|>"))
		return SRV_CHAT_CHATML;
	if (has(t, len, "<start_of_turn>"))
		return SRV_CHAT_GEMMA;
	if (has(t, len, "<|user|>") && has(t, len, "<|end|>"))
		return SRV_CHAT_PHI3;
	if (has(t, len, "<|user|>"))
		return SRV_CHAT_ZEPHYR;
	if (has(t, len, "[INST]"))
		return SRV_CHAT_LLAMA2;
	return -1;
}

int srv_chat_parse(const char *name, struct srv_chat_tmpl *t)
{
	t->sys_tags = true;
	if (!strcmp(name, "mistral")) {
		t->fmt = SRV_CHAT_LLAMA2;
		t->sys_tags = false;
		return 0;
	}
	if (!strcmp(name, "llama2"))
		name = "llama-2";
	else if (!strcmp(name, "llama3"))
		name = "llama-3";
	else if (!strcmp(name, "phi3"))
		name = "phi-3";
	for (int i = 0; i < SRV_CHAT_COUNT; i++)
		if (!strcmp(name, chat_names[i])) {
			t->fmt = (enum srv_chat_fmt)i;
			return 0;
		}
	return -1;
}

const char *srv_chat_name(const struct srv_chat_tmpl *t)
{
	if (t->fmt == SRV_CHAT_LLAMA2 && !t->sys_tags)
		return "mistral";
	return t->fmt < SRV_CHAT_COUNT ? chat_names[t->fmt] : "?";
}

static int add_msg(struct srv_buf *o, const struct srv_chat_msg *m)
{
	return srv_buf_add(o, m->content, m->content_len);
}

/* [INST] turns; system text opens the first one (inside <<SYS>> when sys_tags). */
static int render_llama2(const struct srv_chat_tmpl *t, const struct srv_chat_msg *m, size_t n, struct srv_buf *o)
{
	bool inside = false, first = true;
	int r = 0;

	for (size_t i = 0; i < n && !r; i++) {
		const char *role = m[i].role;

		if (!strcmp(role, "assistant")) {
			if (inside)
				r |= srv_buf_str(o, " ");
			r |= add_msg(o, &m[i]);
			r |= srv_buf_str(o, "</s>");
			inside = false;
			continue;
		}
		if (!inside) {
			r |= srv_buf_str(o, first ? "[INST] " : "<s>[INST] ");
			inside = true;
			first = false;
		}
		if (!strcmp(role, "system")) {
			r |= srv_buf_str(o, t->sys_tags ? "<<SYS>>\n" : "");
			r |= add_msg(o, &m[i]);
			r |= srv_buf_str(o, t->sys_tags ? "\n<</SYS>>\n\n" : "\n\n");
		} else {
			r |= add_msg(o, &m[i]);
			r |= srv_buf_str(o, " [/INST]");
		}
	}
	return r;
}

/* Gemma has no system role: its text opens the next user turn. */
static int render_gemma(const struct srv_chat_msg *m, size_t n, struct srv_buf *o)
{
	bool open_user = false;
	int r = 0;

	for (size_t i = 0; i < n && !r; i++) {
		const char *role = m[i].role;

		if (!strcmp(role, "system")) {
			if (!open_user)
				r |= srv_buf_str(o, "<start_of_turn>user\n");
			open_user = true;
			r |= add_msg(o, &m[i]);
			r |= srv_buf_str(o, "\n\n");
			continue;
		}
		if (!strcmp(role, "user")) {
			if (!open_user)
				r |= srv_buf_str(o, "<start_of_turn>user\n");
		} else {
			if (open_user)
				r |= srv_buf_str(o, "<end_of_turn>\n");
			r |= srv_buf_str(o, "<start_of_turn>model\n");
		}
		open_user = false;
		r |= add_msg(o, &m[i]);
		r |= srv_buf_str(o, "<end_of_turn>\n");
	}
	if (open_user)
		r |= srv_buf_str(o, "<end_of_turn>\n");
	r |= srv_buf_str(o, "<start_of_turn>model\n");
	return r;
}

int srv_chat_render(const struct srv_chat_tmpl *t, const struct srv_chat_msg *m, size_t n, struct srv_buf *o)
{
	int r = 0;

	switch (t->fmt) {
	case SRV_CHAT_LLAMA2:
		return render_llama2(t, m, n, o);
	case SRV_CHAT_GEMMA:
		return render_gemma(m, n, o);
	case SRV_CHAT_CHATML:
		for (size_t i = 0; i < n; i++)
			r |= srv_buf_printf(o, "<|im_start|>%s\n", m[i].role) | add_msg(o, &m[i]) |
			     srv_buf_str(o, "<|im_end|>\n");
		return r | srv_buf_str(o, "<|im_start|>assistant\n");
	case SRV_CHAT_LLAMA3:
		for (size_t i = 0; i < n; i++)
			r |= srv_buf_printf(o, "<|start_header_id|>%s<|end_header_id|>\n\n", m[i].role) |
			     add_msg(o, &m[i]) | srv_buf_str(o, "<|eot_id|>");
		return r | srv_buf_str(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
	case SRV_CHAT_ZEPHYR:
	case SRV_CHAT_PHI3: {
		const char *end = t->fmt == SRV_CHAT_PHI3 ? "<|end|>" : (t->eos[0] ? t->eos : "</s>");

		for (size_t i = 0; i < n; i++)
			r |= srv_buf_printf(o, "<|%s|>\n", m[i].role) | add_msg(o, &m[i]) |
			     srv_buf_printf(o, "%s\n", end);
		return r | srv_buf_str(o, "<|assistant|>\n");
	}
	case SRV_CHAT_PLAIN:
	default:
		for (size_t i = 0; i < n; i++) {
			const char *role = m[i].role;

			r |= srv_buf_str(o, !strcmp(role, "system") ? "System: " :
					    !strcmp(role, "user") ? "User: " : "Assistant: ");
			r |= add_msg(o, &m[i]) | srv_buf_str(o, "\n");
		}
		return r | srv_buf_str(o, "Assistant:");
	}
}

bool srv_chat_detect_sys(const char *t, size_t len)
{
	return has(t, len, "<<SYS>>");
}
