/* test_server_cache.c - the view behind GET /v1/cache (src/server/cache.c)
 * and the web page's URL map (src/server/web.c), without a server: events
 * from counters that moved (and none from counters that did not or went
 * back), the event ring past its size, finished sequences newest first and
 * only the last SRV_CACHE_RECENT, the layers of the live sequences or of the
 * last finished one, tokens per tier as slots over the streams, the JSON
 * parsing back to the figures put in; URLs to embedded files. The view as
 * the server fills it is tested end to end by cli_web.sh and, under
 * allocation failures, by test_faults_server. */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_impl.h"

#define N_LAYER 3
#define N_KV_HEAD 2

static struct srv_cache_meta meta(void)
{
	struct srv_cache_meta m = {
		.model = "m", .policy = "tiered", .kv_mem = 100000, .gov_low = 0.7f, .gov_high = 0.8f,
		.n_ctx = 512, .max_seqs = 4, .n_live = 1, .n_queued = 2, .preemptions = 3, .now = 9.5,
	};
	return m;
}

/* The view as JSON, parsed back. */
static json_t *view(const struct srv_cache *c)
{
	struct srv_cache_meta m = meta();
	char *text = srv_cache_json(c, &m);
	json_error_t je;
	json_t *j;

	assert_non_null(text);
	j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		fail_msg("not JSON: %s: %.200s", je.text, text);
	free(text);
	return j;
}

static json_int_t geti(json_t *j, const char *path)
{
	char buf[128], *save = NULL;

	snprintf(buf, sizeof buf, "%s", path);
	for (char *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save))
		j = (*k >= '0' && *k <= '9') ? json_array_get(j, (size_t)atoi(k)) : json_object_get(j, k);
	if (!json_is_number(j))
		fail_msg("%s: not a number", path);
	return json_is_integer(j) ? json_integer_value(j) : (json_int_t)json_real_value(j);
}

static const char *gets_(json_t *j, const char *a, size_t i, const char *b)
{
	json_t *v = json_object_get(json_array_get(json_object_get(j, a), i), b);

	if (!json_is_string(v))
		fail_msg("%s[%zu].%s: not a string", a, i, b);
	return json_string_value(v);
}

static void init(struct srv_cache *c)
{
	assert_int_equal(srv_cache_init(c, N_LAYER, N_KV_HEAD, 4, NULL), 0);
}

static void test_empty(void **state)
{
	struct srv_cache c;
	json_t *j;

	(void)state;
	init(&c);
	j = view(&c);
	assert_string_equal(json_string_value(json_object_get(j, "object")), "cache");
	assert_string_equal(json_string_value(json_object_get(j, "policy")), "tiered");
	assert_int_equal(geti(j, "budget.kv_mem"), 100000);
	assert_true(json_real_value(json_object_get(json_object_get(j, "budget"), "gov_high")) == 0.8);
	assert_true(json_real_value(json_object_get(json_object_get(j, "budget"), "gov_low")) == 0.7);
	assert_int_equal(geti(j, "counters.preemptions"), 3);
	assert_int_equal(geti(j, "queued"), 2);
	assert_int_equal(json_array_size(json_object_get(j, "layers")), N_LAYER);
	assert_string_equal(json_string_value(json_object_get(j, "layers_of")), "live");
	assert_int_equal(json_array_size(json_object_get(j, "sequences")), 0);
	assert_int_equal(json_array_size(json_object_get(j, "events")), 0);
	json_decref(j);
	srv_cache_free(&c);
	srv_cache_free(NULL);
}

/* Publishing logs what moved since the last view, once. */
static void test_deltas(void **state)
{
	struct srv_cache c;
	json_t *j;

	(void)state;
	init(&c);
	c.work.kv.budget = 100000;
	c.work.kv.allocated = 81000;
	c.work.kv.n_tokens = 300;
	c.work.kv.gov_runs = 5;
	c.work.kv.evicted = 100;
	srv_cache_publish(&c); /* the first view: a baseline, no events */
	assert_int_equal(c.n_ev, 0);
	c.work.kv = c.pub.kv;
	c.work.kv.gov_runs = 7;
	c.work.kv.demoted = 40;
	c.work.kv.prefix_hits = 1;
	c.work.kv.prefix_tokens = 64;
	c.work.kv.evicted = 90; /* went back: no event */
	c.work.t = 2.5;
	srv_cache_publish(&c);
	assert_int_equal(c.n_ev, 3);
	j = view(&c);
	assert_string_equal(gets_(j, "events", 0, "kind"), "governor");
	assert_string_equal(gets_(j, "events", 0, "text"), "governor lowered the caps (2 runs); pool at 81% of --kv-mem");
	assert_string_equal(gets_(j, "events", 1, "text"), "40 token slots demoted to a lower tier");
	assert_string_equal(gets_(j, "events", 2, "text"), "1 prefix-cache hit, 64 prompt tokens reused");
	assert_int_equal(geti(j, "events.2.id"), 3);
	assert_true(json_real_value(json_object_get(json_array_get(json_object_get(j, "events"), 0), "t")) == 2.5);
	assert_int_equal(geti(j, "counters.governor_runs"), 7);
	json_decref(j);
	c.work.kv = c.pub.kv; /* nothing moved */
	srv_cache_publish(&c);
	assert_int_equal(c.n_ev, 3);
	/* a request's end logs what moved since, before itself; with no token
	 * left in the pool its share is not given */
	{
		struct tkv_kv_stats e = c.pub.kv;
		struct srv_cache_seq q = { .id = "cmpl-1", .state = "stop", .prompt = 5, .generated = 7, .t_end = 3.0 };

		e.gov_runs++;
		e.n_tokens = 0;
		srv_cache_finished(&c, &q, NULL, &e);
		j = view(&c);
		assert_string_equal(gets_(j, "events", 3, "text"), "governor lowered the caps (1 run)");
		assert_string_equal(gets_(j, "events", 4, "kind"), "finish");
		assert_string_equal(gets_(j, "events", 4, "text"),
				    "cmpl-1 stop: 5 prompt + 7 generated tokens, 0 bytes of K+V at the end");
		/* no layers given: the layers stay the live ones' */
		assert_string_equal(json_string_value(json_object_get(j, "layers_of")), "live");
		json_decref(j);
		/* the next view does not log the same runs again */
		c.work.kv = e;
		srv_cache_publish(&c);
		assert_int_equal(c.n_ev, 5);
	}
	srv_cache_free(&c);
}

/* The ring keeps the newest events; the JSON has the last 40 in order. */
static void test_event_ring(void **state)
{
	struct srv_cache c;
	json_t *j, *ev;
	char big[400];

	(void)state;
	init(&c);
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = 0;
	for (int i = 1; i <= 150; i++)
		srv_cache_event(&c, i, "admit", "event %d %s", i, i == 150 ? big : "");
	j = view(&c);
	ev = json_object_get(j, "events");
	assert_int_equal(json_array_size(ev), SRV_CACHE_EVENTS_JSON);
	for (size_t i = 0; i < SRV_CACHE_EVENTS_JSON; i++)
		assert_int_equal(json_integer_value(json_object_get(json_array_get(ev, i), "id")),
				 150 - SRV_CACHE_EVENTS_JSON + 1 + (json_int_t)i);
	/* a long text is cut to the slot */
	assert_int_equal(strlen(gets_(j, "events", SRV_CACHE_EVENTS_JSON - 1, "text")), sizeof c.ev[0].text - 1);
	json_decref(j);
	srv_cache_free(&c);
}

static struct srv_cache_seq seq(const char *id, const char *state, size_t hot, size_t warm, size_t cold, double t_end)
{
	struct srv_cache_seq q = { .state = state, .prompt = 100, .generated = 20, .reused = 16, .t_end = t_end };

	snprintf(q.id, sizeof q.id, "%s", id);
	q.kv.tier_bytes[0] = hot;
	q.kv.tier_bytes[1] = warm;
	q.kv.tier_bytes[2] = cold;
	q.kv.tier_tokens[0] = hot / 4;
	q.kv.tier_tokens[1] = warm / 2;
	q.kv.tier_tokens[2] = cold;
	q.kv.n_tokens = 120;
	return q;
}

/* Live sequences first, then the finished ones newest first; the layers are
 * the live ones', or with none live, the last finished one's. */
static void test_sequences_and_layers(void **state)
{
	struct srv_cache c;
	struct tkv_kv_layer_stats L[N_LAYER] = { 0 };
	char id[32];
	json_t *j;

	(void)state;
	init(&c);
	for (int i = 0; i < 12; i++) {
		struct srv_cache_seq q;

		snprintf(id, sizeof id, "cmpl-%d", i);
		q = seq(id, "stop", 0, 0, (size_t)i, 1.0 + i);
		L[1].tier_bytes[2] = (size_t)i;
		srv_cache_finished(&c, &q, L, NULL);
	}
	j = view(&c);
	assert_int_equal(json_array_size(json_object_get(j, "sequences")), SRV_CACHE_RECENT);
	assert_string_equal(gets_(j, "sequences", 0, "id"), "cmpl-11");
	assert_string_equal(gets_(j, "sequences", SRV_CACHE_RECENT - 1, "id"), "cmpl-4");
	assert_string_equal(json_string_value(json_object_get(j, "layers_of")), "cmpl-11");
	assert_int_equal(geti(j, "layers.1.cold.bytes"), 11);
	assert_int_equal(geti(j, "layers.0.cold.bytes"), 0);
	assert_string_equal(gets_(j, "events", 11, "kind"), "finish");
	json_decref(j);

	/* one live sequence: first in the list, and the layers are the live ones' */
	c.work.seqs[0] = seq("chatcmpl-live", "decode", 4000, 2000, 600, 0);
	c.work.n_seqs = 1;
	c.work.layers[2].tier_bytes[0] = 4000;
	c.work.layers[2].tier_tokens[0] = 1000;
	srv_cache_publish(&c);
	j = view(&c);
	assert_int_equal(json_array_size(json_object_get(j, "sequences")), SRV_CACHE_RECENT + 1);
	assert_string_equal(gets_(j, "sequences", 0, "id"), "chatcmpl-live");
	assert_string_equal(gets_(j, "sequences", 0, "state"), "decode");
	assert_true(json_is_null(json_object_get(json_array_get(json_object_get(j, "sequences"), 0), "ended")));
	assert_int_equal(geti(j, "sequences.0.tiers.warm.bytes"), 2000);
	assert_int_equal(geti(j, "sequences.0.tiers.hot.slots"), 1000);
	/* tokens per tier: slots over the sequence's n_layer x n_kv_head streams */
	assert_true(json_real_value(json_object_get(json_object_get(json_object_get(
		json_array_get(json_object_get(j, "sequences"), 0), "tiers"), "hot"), "tokens")) == 1000.0 / (N_LAYER * N_KV_HEAD));
	assert_int_equal(geti(j, "sequences.0.reused_tokens"), 16);
	assert_string_equal(json_string_value(json_object_get(j, "layers_of")), "live");
	assert_int_equal(geti(j, "layers.2.hot.bytes"), 4000);
	/* a layer's tokens: its slots over its KV heads */
	assert_true(json_real_value(json_object_get(json_object_get(json_array_get(json_object_get(j, "layers"), 2), "hot"),
						    "tokens")) == 500.0);
	assert_int_equal(geti(j, "layers.1.cold.bytes"), 0);
	json_decref(j);
	srv_cache_free(&c);
}

static void test_web_files(void **state)
{
	const char *ct = NULL;
	const struct srv_web_file *f;

	(void)state;
	f = srv_web_find("/", &ct);
	assert_non_null(f);
	assert_string_equal(f->name, "index.html");
	assert_string_equal(ct, "text/html; charset=utf-8");
	assert_true(f->len > 100 && f->data[f->len] == 0 && strstr((const char *)f->data, "<html"));
	assert_ptr_equal(srv_web_find("/index.html", &ct), f);
	f = srv_web_find("/app.js", &ct);
	assert_non_null(f);
	assert_string_equal(ct, "text/javascript; charset=utf-8");
	assert_non_null(srv_web_find("/app.css", &ct));
	assert_string_equal(ct, "text/css; charset=utf-8");
	/* nothing else: no paths, no prefixes, no other files */
	assert_null(srv_web_find("", &ct));
	assert_null(srv_web_find("app.js", &ct));
	assert_null(srv_web_find("/app.js/", &ct));
	assert_null(srv_web_find("/../app.js", &ct));
	assert_null(srv_web_find("//app.js", &ct));
	assert_null(srv_web_find("/v1/", &ct));
	assert_null(srv_web_find("/v1/app.js", &ct));
	assert_null(srv_web_find("/app", &ct));
	assert_null(srv_web_find("/APP.JS", &ct));
	/* every file has a known type and ends in a NUL */
	for (size_t i = 0; i < srv_web_n_files; i++) {
		char url[128];

		snprintf(url, sizeof url, "/%s", srv_web_files[i].name);
		assert_ptr_equal(srv_web_find(url, &ct), &srv_web_files[i]);
		assert_true(strcmp(ct, "application/octet-stream") != 0);
		assert_int_equal(srv_web_files[i].data[srv_web_files[i].len], 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_deltas),
		cmocka_unit_test(test_event_ring),
		cmocka_unit_test(test_sequences_and_layers),
		cmocka_unit_test(test_web_files),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
