/* test_faults_server.c - allocation-failure sweep over one server request:
 * a /v1/completions and a /v1/chat/completions, each plain and streamed,
 * through the whole server (srv_start on a loopback port, libmicrohttpd,
 * parsing, the queue, the scheduler, the engine, the response JSON).
 *
 * The server runs on one counting allocator (srv_params.ep.alloc: the
 * model's tokenizer scratch, the engine, the server's own requests and
 * buffers), and jansson is pointed at a malloc that counts its calls on the
 * same counter and fails with it (json_set_alloc_funcs; global, so only
 * here) - all but its parser's, see in_parse. libmicrohttpd's own
 * allocations are not reached.
 *
 * A reference request counts the allocation calls T it makes; then for
 * every N in 1..T+1 (persistent: the Nth call and all later ones fail) and
 * every third N (transient: only the Nth) the request is sent again. Its
 * answer must be one of:
 *  - 200 with exactly the reference's text (a failure the server absorbed,
 *    e.g. a publication retried on the next token),
 *  - a 503 out_of_memory (or a 500) JSON error in OpenAI's shape,
 *  - for a stream, a 200 whose events are valid JSON ending in either the
 *    finish chunk or an OpenAI-shaped out_of_memory error event, then
 *    [DONE];
 * once answered, the allocator's live bytes must come back to what the idle
 * server holds (nothing leaked; LeakSanitizer in the ASan build also sees
 * jansson's blocks), and the same request with the allocator working must
 * get the reference's text. A stream's call count varies a little with how
 * tokens group into events, so the sweep runs to the largest of three
 * reference counts. GET /v1/cache goes through the same sweep. */
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "server/srv.h"
#include "tierkv.h"

/* The server's allocator. Global because jansson's hooks take no context. */
static struct tkv_alloc A;

/* jansson's parser is left out: its lexer ignores a failed growth of the
 * buffer it saves a token in (lex_save drops strbuffer_append_byte's result,
 * jansson 2.14), so a failure there can turn a valid request into another
 * valid one (a prompt with bytes missing) that no caller can tell apart. The
 * link wraps json_loadb (-Wl,--wrap) to let its allocations through. */
static _Thread_local bool in_parse;

json_t *__real_json_loadb(const char *buffer, size_t buflen, size_t flags, json_error_t *error);
json_t *__wrap_json_loadb(const char *buffer, size_t buflen, size_t flags, json_error_t *error)
{
	json_t *j;

	in_parse = true;
	j = __real_json_loadb(buffer, buflen, flags, error);
	in_parse = false;
	return j;
}

static void *j_malloc(size_t n)
{
	unsigned long long call;

	if (in_parse)
		return malloc(n);
	call = atomic_fetch_add(&A.n_calls, 1) + 1;

	if (A.fail_at && call >= A.fail_at && (A.fail_count == 0 || call < A.fail_at + A.fail_count))
		return NULL;
	return malloc(n);
}

static void j_free(void *p)
{
	free(p);
}

/* ---- a small HTTP/1.1 client ------------------------------------------------- */

struct resp {
	int code;
	bool chunked, sse;
	char *body;      /* de-chunked, NUL-terminated */
	size_t len;
};

static void resp_free(struct resp *r)
{
	free(r->body);
	memset(r, 0, sizeof *r);
}

/* Decodes a chunked body in place; false when malformed or cut short. */
static bool dechunk(char *b, size_t *len)
{
	size_t in = 0, out = 0;

	for (;;) {
		char *end;
		unsigned long n = strtoul(b + in, &end, 16);

		if (end == b + in || !(end = strstr(end, "\r\n")))
			return false;
		in = (size_t)(end - b) + 2;
		if (n == 0)
			break;
		if (in + n + 2 > *len)
			return false;
		memmove(b + out, b + in, n);
		out += n;
		in += n + 2;
	}
	b[out] = 0;
	*len = out;
	return true;
}

/* POSTs json to path (json NULL: a GET) and reads the whole answer (the
 * server closes). */
static void post(int port, const char *path, const char *json, struct resp *r)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct timeval tv = { 30, 0 };
	char head[512], *hdr_end;
	size_t cap = 1 << 16, n = 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ssize_t k;

	memset(r, 0, sizeof *r);
	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa))
		fail_msg("connect: %s", strerror(errno));
	if (json)
		snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n", path, strlen(json));
	else
		snprintf(head, sizeof head, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
	assert_true(write(fd, head, strlen(head)) == (ssize_t)strlen(head));
	assert_true(!json || write(fd, json, strlen(json)) == (ssize_t)strlen(json));
	r->body = malloc(cap);
	assert_non_null(r->body);
	while ((k = read(fd, r->body + n, cap - n - 1)) > 0) {
		n += (size_t)k;
		if (n + 1 == cap) {
			r->body = realloc(r->body, cap *= 2);
			assert_non_null(r->body);
		}
	}
	if (k < 0)
		fail_msg("no answer within 30 s: %s", strerror(errno));
	close(fd);
	r->body[n] = 0;
	if (sscanf(r->body, "HTTP/1.%*d %d", &r->code) != 1 || !(hdr_end = strstr(r->body, "\r\n\r\n")))
		fail_msg("not an HTTP response: %.200s", r->body);
	*hdr_end = 0;
	r->chunked = strstr(r->body, "chunked") != NULL;
	r->sse = strstr(r->body, "text/event-stream") != NULL;
	hdr_end += 4;
	r->len = n - (size_t)(hdr_end - r->body);
	memmove(r->body, hdr_end, r->len + 1);
	if (r->chunked && !dechunk(r->body, &r->len))
		fail_msg("a chunked body cut short (%zu bytes): %.300s", r->len, r->body);
}

/* ---- checking answers ------------------------------------------------------------- */

enum outcome { OUT_OK, OUT_OOM, OUT_500 };

/* An OpenAI error object: {"message": str, "type": str, "param": str|null,
 * "code": str|null}; returns the code ("" for null). */
static const char *error_code(json_t *root, const char *what)
{
	json_t *e = json_object_get(root, "error"), *c;

	if (!json_is_object(e) || json_object_size(e) != 4 || !json_is_string(json_object_get(e, "message")) ||
	    !json_is_string(json_object_get(e, "type")) ||
	    !(json_is_string(json_object_get(e, "param")) || json_is_null(json_object_get(e, "param"))))
		fail_msg("%s: not an OpenAI error", what);
	c = json_object_get(e, "code");
	if (json_is_null(c))
		return "";
	if (!json_is_string(c))
		fail_msg("%s: error code is not a string", what);
	return json_string_value(c);
}

/* The text of a choice: "text", or the chat message's / delta's "content". */
static const char *choice_text(json_t *root, bool chat, bool stream, bool *finished)
{
	json_t *ch = json_array_get(json_object_get(root, "choices"), 0), *t;

	if (!ch)
		return "";   /* the usage chunk */
	if (json_is_string(json_object_get(ch, "finish_reason")))
		*finished = true;
	t = chat ? json_object_get(json_object_get(ch, stream ? "delta" : "message"), "content")
		 : json_object_get(ch, "text");
	return json_is_string(t) ? json_string_value(t) : "";
}

/* The test's own parsing, outside the count (it runs between requests). */
static json_t *parse(const char *text)
{
	json_error_t je;
	json_t *j;

	in_parse = true;
	j = json_loads(text, 0, &je);
	in_parse = false;
	return j;
}

/* Classifies an answer; the text of a complete one goes to text (cap bytes). */
static enum outcome check(const struct resp *r, bool chat, bool stream, char *text, size_t cap, unsigned long long n)
{
	char what[64];
	json_t *root;
	enum outcome o = OUT_OK;

	snprintf(what, sizeof what, "N=%llu %s%s", n, chat ? "chat" : "completion", stream ? " stream" : "");
	text[0] = 0;
	if (r->code != 200 || !r->sse) {
		const char *code;

		if (!(root = parse(r->body)))
			fail_msg("%s: HTTP %d, body not JSON: %.200s", what, r->code, r->body);
		if (r->code == 200) {
			bool fin = false;

			if (stream)
				fail_msg("%s: a 200 that is not a stream", what);
			snprintf(text, cap, "%s", choice_text(root, chat, false, &fin));
			if (!fin)
				fail_msg("%s: no finish_reason", what);
		} else {
			code = error_code(root, what);
			if (r->code == 503 && !strcmp(code, "out_of_memory"))
				o = OUT_OOM;
			else if (r->code == 500)
				o = OUT_500;
			else
				fail_msg("%s: HTTP %d code '%s': %.200s", what, r->code, code, r->body);
		}
		json_decref(root);
		return o;
	}
	/* a stream: "data: JSON\n\n" events, then "data: [DONE]\n\n" */
	{
		char *p = r->body;
		bool fin = false, done = false, err = false;
		size_t tl = 0;

		if (!stream)
			fail_msg("%s: a stream for a plain request", what);
		while (*p) {
			char *end = strstr(p, "\n\n");

			if (done || strncmp(p, "data: ", 6) || !end)
				fail_msg("%s: malformed stream at: %.200s", what, p);
			*end = 0;
			p += 6;
			if (!strcmp(p, "[DONE]")) {
				done = true;
			} else if (err) {
				fail_msg("%s: an event after the error: %.200s", what, p);
			} else if (!(root = parse(p))) {
				fail_msg("%s: event not JSON: %.200s", what, p);
			} else {
				if (json_object_get(root, "error")) {
					if (strcmp(error_code(root, what), "out_of_memory"))
						fail_msg("%s: error event %.200s", what, p);
					err = true;
				} else {
					const char *t = choice_text(root, chat, true, &fin);
					size_t k = strlen(t);

					if (tl + k + 1 < cap) {
						memcpy(text + tl, t, k + 1);
						tl += k;
					}
				}
				json_decref(root);
			}
			p = end + 2;
		}
		if (!done)
			fail_msg("%s: the stream has no [DONE]", what);
		if (!err && !fin)
			fail_msg("%s: the stream ended without finish_reason or error", what);
		return err ? OUT_OOM : OUT_OK;
	}
}

/* ---- the sweep ------------------------------------------------------------------------- */

struct kind {
	const char *name, *path, *body;
	bool chat, stream;
};

static const struct kind kinds[] = {
	{ "completion", "/v1/completions",
	  "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"temperature\":0,\"stop\":[\"zq\"]}", false, false },
	{ "chat", "/v1/chat/completions",
	  "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
	  "[{\"type\":\"text\",\"text\":\"Tell me\"},{\"type\":\"text\",\"text\":\"a story.\"}]}],"
	  "\"max_tokens\":6,\"temperature\":0}", true, false },
	{ "completion stream", "/v1/completions",
	  "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0,\"stream\":true,"
	  "\"stream_options\":{\"include_usage\":true}}", false, true },
	{ "chat stream", "/v1/chat/completions",
	  "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story.\"}],\"max_tokens\":4,"
	  "\"temperature\":0,\"stream\":true}", true, true },
};

static struct srv *S;
static int PORT;
static size_t IDLE;   /* live bytes of the idle server */

/* Waits (up to 5 s) for the server to let go of a finished request's memory. */
static void settle(const char *what, unsigned long long n)
{
	for (int i = 0; i < 5000; i++) {
		if (atomic_load(&A.live) == IDLE)
			return;
		usleep(1000);
	}
	fail_msg("%s N=%llu: %zu bytes live after the answer, the idle server holds %zu", what, n,
		 (size_t)atomic_load(&A.live), IDLE);
}

/* Sends k's request with the allocator working: the reference text. Returns
 * the allocation calls it made. */
static unsigned long long clean(const struct kind *k, char *text, size_t cap, const char *want, unsigned long long n)
{
	unsigned long long c0 = atomic_load(&A.n_calls);
	struct resp r;

	A.fail_at = 0;
	post(PORT, k->path, k->body, &r);
	if (check(&r, k->chat, k->stream, text, cap, n) != OUT_OK)
		fail_msg("%s N=%llu: the request after the failure failed: HTTP %d %.200s", k->name, n, r.code, r.body);
	if (want && strcmp(text, want))
		fail_msg("%s N=%llu: the next request got '%s', want '%s'", k->name, n, text, want);
	resp_free(&r);
	settle(k->name, n);
	return atomic_load(&A.n_calls) - c0;
}

static void sweep(const struct kind *k, unsigned long long fail_count)
{
	char ref[512], text[512];
	unsigned long long total = 0, counts[3] = { 0 }, step = fail_count ? 3 : 1;

	for (int i = 0; i < 3; i++) {
		unsigned long long t = clean(k, i ? text : ref, sizeof ref, i ? ref : NULL, 0);

		if (t > total)
			total = t;
		counts[i] = t;
	}
	assert_true(strlen(ref) > 0);
	unsigned long long n_ok = 0, n_oom = 0, n_500 = 0;

	for (unsigned long long n = 1; n <= total + 1; n += step) {
		struct resp r;
		enum outcome o;

		A.fail_count = fail_count;
		A.fail_at = atomic_load(&A.n_calls) + n;
		post(PORT, k->path, k->body, &r);
		/* the scheduler may still be dropping a cancelled stream: once the
		 * server is idle again (the atomic live count orders its last
		 * allocation call before this), the allocator is mended */
		settle(k->name, n);
		A.fail_at = 0;
		o = check(&r, k->chat, k->stream, text, sizeof text, n);
		if (o == OUT_OK && strcmp(text, ref))
			fail_msg("%s N=%llu: 200 with '%s', want '%s'", k->name, n, text, ref);
		n_ok += o == OUT_OK;
		n_oom += o == OUT_OOM;
		n_500 += o == OUT_500;
		resp_free(&r);
		clean(k, text, sizeof text, ref, n);
	}
	printf("# %s (fail_count %llu): %llu-%llu-%llu allocation calls, N up to %llu every %llu: %llu 503 out_of_memory, "
	       "%llu 500, %llu answered in full\n", k->name, fail_count, counts[0], counts[1], counts[2], total + 1, step,
	       n_oom, n_500, n_ok);
	assert_true(n_oom > 0);
}

static int setup(void **state)
{
	struct srv_params p = srv_default_params();
	const char *path = tu_model_path("stories260K.gguf");
	struct kind warm = kinds[0];

	(void)state;
	if (!path)
		return -1;
	json_set_alloc_funcs(j_malloc, j_free);
	p.model_path = path;
	p.port = 0;
	p.max_tokens = 64;
	p.timeout = 60;
	p.ep.n_threads = 1;
	p.ep.alloc = &A;
	if (srv_start(&S, &p))
		return -1;
	PORT = srv_port(S);
	/* the first request sizes the scheduler's batch scratch; afterwards an
	 * idle server holds the same bytes between requests */
	{
		char text[512];
		struct resp r;

		post(PORT, warm.path, warm.body, &r);
		assert_int_equal(check(&r, false, false, text, sizeof text, 0), OUT_OK);
		resp_free(&r);
		usleep(100000);
	}
	IDLE = atomic_load(&A.live);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	srv_stop(S);
	S = NULL;
	if (atomic_load(&A.live) != 0)
		fail_msg("%zu bytes live after srv_stop", (size_t)atomic_load(&A.live));
	json_set_alloc_funcs(malloc, free);
	return 0;
}

static void test_completion(void **state) { (void)state; sweep(&kinds[0], 0); sweep(&kinds[0], 1); }
static void test_chat(void **state) { (void)state; sweep(&kinds[1], 0); sweep(&kinds[1], 1); }
static void test_completion_stream(void **state) { (void)state; sweep(&kinds[2], 0); sweep(&kinds[2], 1); }
static void test_chat_stream(void **state) { (void)state; sweep(&kinds[3], 0); sweep(&kinds[3], 1); }

/* GET /v1/cache (the live cache view, built with jansson) under the same
 * sweep, after the requests above left sequences and events in it: each
 * answer is the whole view (an object naming the model, every layer, the
 * finished sequences) or a 503 out_of_memory error, and nothing leaks. */
static enum outcome check_cache(const struct resp *r, unsigned long long n, size_t *n_seqs)
{
	json_t *root = parse(r->body);
	enum outcome o = OUT_OK;

	if (!root)
		fail_msg("N=%llu cache: HTTP %d, not JSON: %.200s", n, r->code, r->body);
	if (r->code == 503 && !strcmp(error_code(root, "cache"), "out_of_memory")) {
		o = OUT_OOM;
	} else if (r->code != 200 || strcmp(json_string_value(json_object_get(root, "object")), "cache") ||
		   json_array_size(json_object_get(root, "layers")) != 5 ||
		   !json_is_array(json_object_get(root, "sequences")) || !json_is_array(json_object_get(root, "events"))) {
		fail_msg("N=%llu cache: HTTP %d %.300s", n, r->code, r->body);
	}
	*n_seqs = json_array_size(json_object_get(root, "sequences"));
	json_decref(root);
	return o;
}

static void test_cache_view(void **state)
{
	unsigned long long c0, total, n_ok = 0, n_oom = 0;
	size_t ref_seqs, got;
	struct resp r;

	(void)state;
	c0 = atomic_load(&A.n_calls);
	post(PORT, "/v1/cache", NULL, &r);
	assert_int_equal(check_cache(&r, 0, &ref_seqs), OUT_OK);
	resp_free(&r);
	total = atomic_load(&A.n_calls) - c0;
	assert_true(ref_seqs > 0 && total > 0);
	for (unsigned long long fail_count = 0; fail_count < 2; fail_count++)
		for (unsigned long long n = 1; n <= total + 1; n++) {
			A.fail_count = fail_count;
			A.fail_at = atomic_load(&A.n_calls) + n;
			post(PORT, "/v1/cache", NULL, &r);
			A.fail_at = 0;
			if (check_cache(&r, n, &got) == OUT_OK) {
				assert_int_equal(got, ref_seqs);
				n_ok++;
			} else {
				n_oom++;
			}
			resp_free(&r);
			settle("cache", n);
		}
	printf("# cache view: %llu allocation calls; %llu 503 out_of_memory, %llu answered in full\n", total, n_oom,
	       n_ok);
	assert_true(n_oom > 0);
}

/* TKV_FAULTS_PART=plain or stream runs half (ctest runs the halves side by
 * side); unset, all four. */
int main(void)
{
	const struct CMUnitTest plain[] = {
		cmocka_unit_test(test_completion),
		cmocka_unit_test(test_chat),
		cmocka_unit_test(test_cache_view),
	};
	const struct CMUnitTest stream[] = {
		cmocka_unit_test(test_completion_stream),
		cmocka_unit_test(test_chat_stream),
	};
	const char *part = getenv("TKV_FAULTS_PART");
	int rc = 0;

	signal(SIGPIPE, SIG_IGN);
	if (!part || strcmp(part, "stream"))
		rc |= cmocka_run_group_tests_name("plain", plain, setup, teardown);
	if (!part || strcmp(part, "plain"))
		rc |= cmocka_run_group_tests_name("stream", stream, setup, teardown);
	return rc;
}
