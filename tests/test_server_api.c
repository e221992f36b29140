/* test_server_api.c - request parsing of `tierkv serve` (src/server/api.c):
 * cases the fuzzer (fuzz/fuzz_http.c) found, kept as regression tests. The
 * HTTP side is tested end to end by cli_server.sh. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "server/srv_impl.h"

static struct tok *tok;
static struct srv_api_ctx api;

static int setup(void **state)
{
	struct gguf_file *g = NULL;
	struct tkv_error err = { 0 };

	(void)state;
	if (gguf_open(&g, tu_model_path("stories260K.gguf"), NULL, &err) || tok_init(&tok, g, NULL, &err)) {
		fprintf(stderr, "stories260K: %s\n", err.msg);
		gguf_close(g);
		return -1;
	}
	gguf_close(g);
	api.vocab = tok_vocab(tok);
	api.n_ctx = 512;
	api.n_vocab = (uint32_t)tok_n_vocab(tok);
	api.max_tokens = 256;
	tkv_chat_template_by_name(&api.chat, "plain");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	tok_free(tok);
	return 0;
}

/* Parses body as a completion; returns 0 or -1 like srv_api_parse. */
static int parse(const char *body, struct srv_gen *g, struct srv_err *e)
{
	memset(e, 0, sizeof *e);
	return srv_api_parse(&api, SRV_COMPLETION, body, strlen(body), g, e);
}

static void expect_error(const char *body, const char *code, const char *param, const char *needle)
{
	struct srv_gen g;
	struct srv_err e;

	if (parse(body, &g, &e) == 0)
		fail_msg("%s: accepted", body);
	srv_gen_free(&g);
	assert_int_equal(e.http, 400);
	assert_string_equal(e.code, code);
	assert_string_equal(e.param, param);
	if (needle && !strstr(e.msg, needle))
		fail_msg("%s: message '%s' lacks '%s'", body, e.msg, needle);
}

/* Integer fields given as JSON reals: whole values are taken, fractions are a
 * type error, and values outside the field's range - however far, even past
 * long long, where the cast used to be undefined behaviour (fuzz corpus
 * err_bigreal) - are a range error naming the value. */
static void test_real_as_integer(void **state)
{
	struct srv_gen g;
	struct srv_err e;

	(void)state;
	assert_int_equal(parse("{\"prompt\":\"a\",\"max_tokens\":16.0,\"top_k\":4.0}", &g, &e), 0);
	assert_int_equal(g.max_tokens, 16);
	assert_int_equal(g.sp.top_k, 4);
	srv_gen_free(&g);
	assert_int_equal(parse("{\"prompt\":\"a\",\"seed\":-9223372036854775808.0}", &g, &e), 0);
	assert_true(g.seed_set && g.sp.seed == (uint64_t)1 << 63);
	srv_gen_free(&g);

	expect_error("{\"prompt\":\"a\",\"max_tokens\":2.5}", "invalid_type", "max_tokens", "integer");
	expect_error("{\"prompt\":\"a\",\"max_tokens\":1e300}", "invalid_value", "max_tokens",
		     "'max_tokens' is 1e+300; this server allows 1 to 256");
	expect_error("{\"prompt\":\"a\",\"max_tokens\":-1e300}", "invalid_value", "max_tokens", "-1e+300");
	expect_error("{\"prompt\":\"a\",\"max_tokens\":5000.0}", "invalid_value", "max_tokens",
		     "'max_tokens' is 5000; this server allows 1 to 256");
	expect_error("{\"prompt\":\"a\",\"max_tokens\":1000}", "invalid_value", "max_tokens",
		     "'max_tokens' is 1000; this server allows 1 to 256");
	expect_error("{\"prompt\":\"a\",\"seed\":-1e30}", "invalid_value", "seed", "-1e+30");
	expect_error("{\"prompt\":\"a\",\"seed\":9223372036854775808.0}", "invalid_value", "seed", NULL);
	expect_error("{\"prompt\":\"a\",\"top_k\":1e19}", "invalid_value", "top_k", NULL);
	expect_error("{\"prompt\":\"a\",\"n\":1e100}", "invalid_value", "n", NULL);
	expect_error("{\"prompt\":\"a\",\"repeat_last_n\":-0.5}", "invalid_type", "repeat_last_n", NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_real_as_integer),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
