/* test_chat.c - chat templates (src/chat/template.c) against real ones.
 *
 * tests/chat/expected.json (written by scripts/chat_expected.py with Jinja2)
 * holds, for real chat templates, the family tierkv must detect and what the
 * Jinja renders for a few conversations. The templates themselves stay where
 * they are: the tokenizer.chat_template of the GGUF fixtures in
 * $TIERKV_VOCAB (../shared/vocab), and llama.cpp's models/templates in
 * $TIERKV_CHAT_TEMPLATES (../llamacpp/models/templates). Each case reads its
 * template, checks the detected family, renders the conversation and compares
 * byte for byte. The llama.cpp cases run as their own ctest test
 * (test_chat_llamacpp, TKV_CHAT_PART=llamacpp), reported skipped (exit 77)
 * without that folder; the vocabulary cases and the rest always run. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "testutil.h"
#include "tierkv.h"

static json_t *expected(void)
{
	char path[4096];
	const char *dir = getenv("TIERKV_CHAT_EXPECTED");
	json_error_t e;
	json_t *doc;

	snprintf(path, sizeof path, "%s", dir && *dir ? dir : "tests/chat/expected.json");
	doc = json_load_file(path, 0, &e);
	if (!doc)
		fail_msg("%s: %s (line %d)", path, e.text, e.line);
	return doc;
}

static const char *templates_dir(void)
{
	const char *dir = getenv("TIERKV_CHAT_TEMPLATES");

	return dir && *dir ? dir : "../llamacpp/models/templates";
}

/* The template_str of the test case name in llama.cpp's
 * tests/test-chat-template.cpp: one C++ string literal (maybe inside U8C()),
 * unescaped (malloc'd), or NULL when the file or the case is absent. */
static char *cpp_test_template(const char *name, size_t *len)
{
	char path[4096], key[512], *file, *out;
	const char *p;
	size_t n = 0;

	snprintf(path, sizeof path, "%s/../../tests/test-chat-template.cpp", templates_dir());
	snprintf(key, sizeof key, "/* .name= */ \"%s\",", name);
	if (!(file = tu_read_file(path, NULL)))
		return NULL;
	if (!(p = strstr(file, key)) || !(p = strstr(p, "/* .template_str= */ "))) {
		free(file);
		return NULL;
	}
	p += strlen("/* .template_str= */ ");
	if (!strncmp(p, "U8C(", 4))
		p += 4;
	assert_int_equal(*p++, '"');
	out = malloc(strlen(p) + 1);
	assert_non_null(out);
	for (; *p && *p != '"'; p++) {
		char c = *p;

		if (c == '\\') {
			c = *++p;
			c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
		}
		out[n++] = c;
	}
	assert_int_equal(*p, '"');
	out[n] = 0;
	*len = n;
	free(file);
	return out;
}

/* The template text of a source "vocab:NAME", "llamacpp:NAME" or
 * "llamacpp-test:NAME" (malloc'd), or NULL when the llama.cpp file is absent. */
static char *template_text(const char *source, size_t *len)
{
	char path[4096];

	if (!strncmp(source, "vocab:", 6)) {
		struct gguf_file *g = NULL;
		struct gguf_str s;
		char *text;

		assert_int_equal(gguf_open(&g, tu_vocab_path(source + 6), NULL, NULL), TKV_OK);
		assert_int_equal(gguf_get_str(g, "tokenizer.chat_template", &s, NULL), TKV_OK);
		text = malloc(s.len + 1);
		assert_non_null(text);
		memcpy(text, s.ptr, s.len);
		text[s.len] = 0;
		*len = s.len;
		gguf_close(g);
		return text;
	}
	if (!strncmp(source, "llamacpp-test:", 14))
		return cpp_test_template(source + 14, len);
	assert_true(!strncmp(source, "llamacpp:", 9));
	snprintf(path, sizeof path, "%s/%s", templates_dir(), source + 9);
	if (access(path, R_OK))
		return NULL;
	return tu_read_file(path, len);
}

/* Renders conversation conv of doc with t and compares with want. */
static void check_render(const struct tkv_chat_template *t, json_t *conv, bool gen, const char *want,
			 const char *what)
{
	struct tkv_chat_msg m[16];
	size_t n = json_array_size(conv), len = 0, len2;
	char *buf;

	assert_true(n <= 16);
	for (size_t i = 0; i < n; i++) {
		json_t *msg = json_array_get(conv, i);

		m[i].role = json_string_value(json_object_get(msg, "role"));
		m[i].content = json_string_value(json_object_get(msg, "content"));
		m[i].content_len = json_string_length(json_object_get(msg, "content"));
	}
	assert_int_equal(tkv_chat_render(t, m, n, gen, NULL, 0, &len), TKV_ERR_ARG);
	buf = malloc(len + 1);
	assert_non_null(buf);
	assert_int_equal(tkv_chat_render(t, m, n, gen, buf, len + 1, &len2), TKV_OK);
	assert_int_equal(len, len2);
	if (strcmp(buf, want))
		fail_msg("%s: rendered\n%s\n--- expected\n%s\n---", what, buf, want);
	/* one byte short: refused, the length still reported */
	assert_int_equal(tkv_chat_render(t, m, n, gen, buf, len, &len2), TKV_ERR_ARG);
	assert_int_equal(len2, len);
	free(buf);
}

/* Every case of one kind of source; returns how many ran. */
static int run_cases(const char *kind)
{
	json_t *doc = expected(), *cases = json_object_get(doc, "cases"), *c;
	json_t *convs = json_object_get(doc, "conversations");
	size_t i;
	int ran = 0, missing = 0;

	assert_true(json_array_size(cases) > 0);
	json_array_foreach(cases, i, c) {
		const char *source = json_string_value(json_object_get(c, "source"));
		const char *conv = json_string_value(json_object_get(c, "conversation"));
		struct tkv_chat_template t;
		char what[256], *text;
		size_t len = 0;

		if (strncmp(source, kind, strlen(kind)))
			continue;
		if (!(text = template_text(source, &len))) {
			missing++;
			continue;
		}
		snprintf(what, sizeof what, "%s, %s", source, conv);
		assert_int_equal(tkv_chat_template_detect(&t, text, len), TKV_OK);
		assert_string_equal(tkv_chat_template_name(&t), json_string_value(json_object_get(c, "family")));
		snprintf(t.eos, sizeof t.eos, "%s", json_string_value(json_object_get(c, "eos")));
		check_render(&t, json_object_get(convs, conv), json_is_true(json_object_get(c, "add_generation_prompt")),
			     json_string_value(json_object_get(c, "expected")), what);
		ran++;
		free(text);
	}
	json_decref(doc);
	printf("%d cases of %s templates rendered as their Jinja does\n", ran, kind);
	if (missing)
		fail_msg("%d cases of %s templates: the template file is missing", missing, kind);
	return ran;
}

static void test_vocab_templates(void **state)
{
	(void)state;
	assert_true(run_cases("vocab:") >= 10);
}

static void test_llamacpp_templates(void **state)
{
	(void)state;
	assert_true(run_cases("llamacpp:") > 0);
	assert_true(run_cases("llamacpp-test:") > 0);
}

/* Defaults the templates carry, as detected. */
static void test_detect_details(void **state)
{
	struct tkv_chat_template t;
	static const char qwen25[] = "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, it\\'s me.<|im_end|>\\n' }}";
	static const char q3[] = "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }} '</think>'";

	(void)state;
	assert_int_equal(tkv_chat_template_detect(&t, qwen25, strlen(qwen25)), TKV_OK);
	assert_string_equal(t.default_system, "You are Qwen, it's me.");
	assert_int_equal(t.flags, 0);
	assert_int_equal(tkv_chat_template_detect(&t, q3, strlen(q3)), TKV_OK);
	assert_string_equal(t.default_system, "");
	assert_int_equal(t.flags, TKV_CHAT_THINK);
	assert_int_equal(tkv_chat_template_detect(&t, "{{ x }}", 7), TKV_ERR_UNSUPPORTED);
	assert_int_equal(t.family, TKV_CHAT_PLAIN);
	assert_int_equal(tkv_chat_template_detect(&t, NULL, 0), TKV_ERR_UNSUPPORTED);
	assert_int_equal(tkv_chat_template_detect(&t, "[INST] <<SYS>>", 14), TKV_OK);
	assert_string_equal(tkv_chat_template_name(&t), "llama-2");
	assert_int_equal(tkv_chat_template_detect(&t, "'[INST] ' + x", 13), TKV_OK);
	assert_string_equal(tkv_chat_template_name(&t), "mistral");
	assert_int_equal(t.flags, TKV_CHAT_INST_SPACE);
	assert_int_equal(tkv_chat_template_detect(&t, "[INST] loop.last and system_message", 35), TKV_OK);
	assert_string_equal(tkv_chat_template_name(&t), "mistral-nemo");
	assert_int_equal(tkv_chat_template_detect(&t, "<|user|>\n", 9), TKV_OK);
	assert_string_equal(tkv_chat_template_name(&t), "zephyr");
}

/* Names, the plain format, bad roles, turn ends. */
static void test_names_and_errors(void **state)
{
	struct tkv_chat_template t;
	struct tkv_chat_msg m[3] = {
		{ "system", "Be kind.", 8 }, { "user", "Hi", 2 }, { "assistant", "Hello", 5 },
	};
	struct tkv_chat_msg bad = { "tool", "x", 1 };
	char buf[128];
	size_t len;

	(void)state;
	assert_int_equal(tkv_chat_template_by_name(&t, "nope"), TKV_ERR_ARG);
	assert_int_equal(tkv_chat_template_by_name(&t, "plain"), TKV_OK);
	assert_int_equal(tkv_chat_render(&t, m, 3, true, buf, sizeof buf, &len), TKV_OK);
	assert_string_equal(buf, "System: Be kind.\nUser: Hi\nAssistant: Hello\nAssistant:");
	assert_int_equal(len, strlen(buf));
	assert_int_equal(tkv_chat_render(&t, &bad, 1, true, buf, sizeof buf, &len), TKV_ERR_ARG);
	assert_int_equal(tkv_chat_render(&t, NULL, 0, true, buf, sizeof buf, &len), TKV_OK);
	assert_string_equal(buf, "Assistant:");
	assert_int_equal(tkv_chat_turn_end(&t, buf, sizeof buf), 1);
	assert_string_equal(buf, "\n");
	for (int f = 0; f < TKV_CHAT_FAMILY_COUNT; f++) {
		struct tkv_chat_template u;
		char name[32];

		u.family = (enum tkv_chat_family)f;
		snprintf(name, sizeof name, "%s", tkv_chat_template_name(&u));
		assert_int_equal(tkv_chat_template_by_name(&u, name), TKV_OK);
		assert_int_equal((int)u.family, f);
		assert_non_null(strstr(tkv_chat_family_names(), name));
		assert_true(tkv_chat_turn_end(&u, buf, sizeof buf) > 0);
		assert_int_equal(tkv_chat_turn_end(&u, buf, 1), TKV_ERR_ARG);
	}
	assert_int_equal(tkv_chat_template_by_name(&t, "zephyr"), TKV_OK);
	assert_int_equal(tkv_chat_turn_end(&t, buf, sizeof buf), 5);
	assert_string_equal(buf, "</s>\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vocab_templates),
		cmocka_unit_test(test_detect_details),
		cmocka_unit_test(test_names_and_errors),
	};
	const struct CMUnitTest llamacpp[] = {
		cmocka_unit_test(test_llamacpp_templates),
	};
	const char *part = getenv("TKV_CHAT_PART");
	char probe[4096];

	if (part && !strcmp(part, "llamacpp")) {
		snprintf(probe, sizeof probe, "%s/README.md", templates_dir());
		if (access(probe, R_OK)) {
			printf("llama.cpp's templates are not in %s (set TIERKV_CHAT_TEMPLATES): skipped\n",
			       templates_dir());
			return 77;
		}
		return cmocka_run_group_tests(llamacpp, NULL, NULL);
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
