/* test_model.c - model loading, the forward pass and the engine's contract:
 * chunking does not change results, budgets and context limits fail cleanly
 * and leave the sequence usable, corrupt metadata is rejected with a message,
 * and every allocation failure during load and generation is TKV_ERR_NOMEM
 * with nothing leaked. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "tierkv.h"

/* Logits of the same tokens through different chunkings differ only by float
 * summation order inside matmuls: well under 1e-3 on logits of magnitude ~10. */
#define TOL_CHUNK_LOGIT 1e-3f

static const char *model_path(void)
{
	const char *p = tu_model_path("stories260K.gguf");

	assert_non_null(p);
	return p;
}

static struct tkv_model *load(void)
{
	struct tkv_model *m = NULL;
	struct tkv_error err = { 0 };

	assert_int_equal(tkv_model_load(&m, model_path(), NULL, &err), TKV_OK);
	return m;
}

/* stories260K, an engine of the given params and (with seq) one sequence;
 * err is the one the test's calls report into. */
struct fx {
	struct tkv_model *m;
	struct tkv_engine *e;
	struct tkv_seq *s;
	struct tkv_error err;
};

static void fx_open(struct fx *f, const struct tkv_engine_params *p, bool seq)
{
	memset(f, 0, sizeof *f);
	f->m = load();
	assert_int_equal(tkv_engine_init(&f->e, f->m, p, &f->err), TKV_OK);
	if (seq)
		assert_int_equal(tkv_seq_init(&f->s, f->e, &f->err), TKV_OK);
}

static void fx_close(struct fx *f)
{
	tkv_seq_free(f->s);
	tkv_engine_free(f->e);
	tkv_model_free(f->m);
}

static void test_info(void **state)
{
	struct tkv_model *m = load();
	struct tkv_model_info in;

	(void)state;
	tkv_model_get_info(m, &in);
	assert_string_equal(in.arch, "llama");
	assert_int_equal(in.n_vocab, 512);
	assert_int_equal(in.n_ctx_train, 512);
	assert_int_equal(in.dim, 64);
	assert_int_equal(in.n_layer, 5);
	assert_int_equal(in.n_head, 8);
	assert_int_equal(in.n_kv_head, 4);
	assert_int_equal(in.head_dim, 8);
	assert_int_equal(in.n_ff, 172);
	assert_int_equal(in.n_rot, 8);
	assert_true(fabsf(in.rope_base - 10000.0f) < 1e-3f);
	assert_true(fabsf(in.rms_eps - 1e-5f) < 1e-9f);
	/* 2 (K,V) x 5 layers x 4 heads x 8 dims x 2 bytes */
	assert_int_equal(tkv_model_kv_bytes_per_token(m), 640);
	tkv_model_free(m);
	tkv_model_free(NULL);
}

static int32_t prompt_ids[] = { 1, 403, 407, 261, 378, 36, 261, 491, 65, 296, 395, 264, 373, 289, 45, 292 };
#define N_PROMPT (sizeof prompt_ids / sizeof prompt_ids[0])

/* Last-token logits of prompt_ids with a given chunk size and KV type. */
static void run_prompt(struct tkv_model *m, uint32_t n_batch, enum tkv_kv_type kt, float *logits, float *all)
{
	struct tkv_engine_params p = tkv_engine_default_params();
	struct tkv_engine *e = NULL;
	struct tkv_seq *s = NULL;
	struct tkv_error err = { 0 };

	p.n_batch = n_batch;
	p.kv_type = kt;
	p.n_threads = 2;
	assert_int_equal(tkv_engine_init(&e, m, &p, &err), TKV_OK);
	assert_int_equal(tkv_seq_init(&s, e, &err), TKV_OK);
	if (all)
		assert_int_equal(tkv_seq_decode(s, prompt_ids, N_PROMPT, all, 1, &err), TKV_OK);
	else
		assert_int_equal(tkv_seq_decode(s, prompt_ids, N_PROMPT, logits, 0, &err), TKV_OK);
	assert_int_equal(tkv_seq_n_past(s), N_PROMPT);
	if (all)
		memcpy(logits, all + (N_PROMPT - 1) * 512, 512 * sizeof(float));
	tkv_seq_free(s);
	tkv_engine_free(e);
}

static void test_chunking_invariant(void **state)
{
	struct tkv_model *m = load();
	float ref[512], got[512], *all = malloc(N_PROMPT * 512 * sizeof(float));
	uint32_t batches[] = { 1, 3, 7, 64 };

	(void)state;
	assert_non_null(all);
	run_prompt(m, 16, TKV_KV_F32, ref, NULL);
	for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
		run_prompt(m, batches[b], TKV_KV_F32, got, NULL);
		for (int i = 0; i < 512; i++)
			assert_true(fabsf(got[i] - ref[i]) < TOL_CHUNK_LOGIT);
	}
	/* all-logits mode: the last row equals the last-token logits */
	run_prompt(m, 5, TKV_KV_F32, got, all);
	for (int i = 0; i < 512; i++)
		assert_true(fabsf(got[i] - ref[i]) < TOL_CHUNK_LOGIT);
	/* the f16 cache agrees on the argmax and to within f16 rounding */
	run_prompt(m, 16, TKV_KV_F16, got, NULL);
	for (int i = 0; i < 512; i++)
		assert_true(fabsf(got[i] - ref[i]) < 0.05f);
	free(all);
	tkv_model_free(m);
}

/* The weights copied at load by one thread or by several give the same
 * logits, bit for bit; a thread count out of range is refused. */
static void test_load_threads(void **state)
{
	struct tkv_model_params mp = tkv_model_default_params();
	struct tkv_error err = { 0 };
	struct tkv_model *m = NULL;
	float ref[512], got[512];
	const int counts[] = { 1, 3, 7 }, bad[] = { -1, 513 };

	(void)state;
	assert_int_equal(mp.n_threads, 0);
	for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
		mp.n_threads = counts[i];
		assert_int_equal(tkv_model_load(&m, model_path(), &mp, &err), TKV_OK);
		run_prompt(m, 16, TKV_KV_F32, i ? got : ref, NULL);
		tkv_model_free(m);
		if (i)
			assert_memory_equal(got, ref, sizeof ref);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		mp.n_threads = bad[i];
		m = (struct tkv_model *)&err; /* must come back NULL */
		assert_int_equal(tkv_model_load(&m, model_path(), &mp, &err), TKV_ERR_ARG);
		assert_null(m);
		assert_non_null(strstr(err.msg, "threads"));
	}
}

static void test_bad_tokens_and_context(void **state)
{
	struct tkv_engine_params p = tkv_engine_default_params();
	int32_t bad[] = { 1, 512 }, neg[] = { -1 };
	float logits[512];
	struct fx f;

	(void)state;
	p.n_ctx = 8;
	fx_open(&f, &p, true);
	assert_int_equal(tkv_seq_decode(f.s, bad, 2, logits, 0, &f.err), TKV_ERR_ARG);
	assert_non_null(strstr(f.err.msg, "out of range"));
	assert_int_equal(tkv_seq_decode(f.s, neg, 1, logits, 0, &f.err), TKV_ERR_ARG);
	assert_int_equal(tkv_seq_decode(f.s, prompt_ids, 0, logits, 0, &f.err), TKV_ERR_ARG);
	assert_int_equal(tkv_seq_n_past(f.s), 0);
	assert_int_equal(tkv_seq_decode(f.s, prompt_ids, 9, logits, 0, &f.err), TKV_ERR_CTX_FULL);
	assert_int_equal(tkv_seq_n_past(f.s), 0);
	assert_int_equal(tkv_seq_decode(f.s, prompt_ids, 8, logits, 0, &f.err), TKV_OK);
	assert_int_equal(tkv_seq_decode(f.s, prompt_ids, 1, logits, 0, &f.err), TKV_ERR_CTX_FULL);
	assert_int_equal(tkv_seq_n_past(f.s), 8);
	fx_close(&f);
}

/* With a budget of a few pages, decoding stops with TKV_ERR_KV_FULL, the budget
 * is never exceeded, and the sequence keeps what it had. */
static void test_kv_budget(void **state)
{
	struct tkv_engine_params p = tkv_engine_default_params();
	struct tkv_kv_stats ks;
	float logits[512];
	uint32_t n = 0;
	int st;
	struct fx f;

	(void)state;
	p.kv_mem = 40000;
	p.page_tokens = 4;
	p.kv.policy = TKV_POLICY_FULL; /* the reference cache never evicts: it must stop */
	fx_open(&f, &p, true);
	for (;;) {
		st = tkv_seq_decode(f.s, &prompt_ids[n % N_PROMPT], 1, logits, 0, &f.err);
		tkv_engine_kv_stats(f.e, &ks);
		assert_true(ks.allocated <= p.kv_mem);
		if (st)
			break;
		n++;
		assert_true(n < 512);
	}
	assert_int_equal(st, TKV_ERR_KV_FULL);
	assert_non_null(strstr(f.err.msg, "budget"));
	assert_int_equal(tkv_seq_n_past(f.s), n);
	/* stopped exactly at a page boundary (pages of 4, or of 2 while the
	 * sequence is short: dynamic chunking) */
	assert_true(n > 0 && n % 2 == 0);
	assert_int_equal(ks.n_tokens, n);
	tkv_seq_free(f.s);
	f.s = NULL;
	tkv_engine_kv_stats(f.e, &ks);
	assert_int_equal(ks.allocated, 0);
	assert_int_equal(ks.n_pages, 0);
	fx_close(&f);
}

/* Pages are taken as the sequence grows, never for the whole context. */
static void test_on_demand(void **state)
{
	struct tkv_engine_params p = tkv_engine_default_params();
	struct tkv_kv_stats ks;
	float logits[512];
	struct fx f;

	(void)state;
	fx_open(&f, &p, false);
	tkv_engine_kv_stats(f.e, &ks);
	assert_int_equal(ks.allocated, 0);
	assert_int_equal(tkv_seq_init(&f.s, f.e, &f.err), TKV_OK);
	assert_int_equal(tkv_seq_decode(f.s, prompt_ids, 1, logits, 0, &f.err), TKV_OK);
	tkv_engine_kv_stats(f.e, &ks);
	assert_int_equal(ks.n_pages, 5 * 4); /* one page per (layer, KV head) */
	assert_int_equal(ks.kv_bytes, 640);
	assert_int_equal(tkv_seq_decode(f.s, prompt_ids, N_PROMPT, logits, 0, &f.err), TKV_OK);
	tkv_engine_kv_stats(f.e, &ks);
	assert_int_equal(ks.n_pages, 5 * 4 * 2); /* 17 tokens: two 16-slot pages per stream */
	assert_int_equal(ks.kv_bytes, 640 * (1 + N_PROMPT));
	assert_true(ks.allocated >= ks.used);
	fx_close(&f);
}

/* A batch step over several sequences gives each the logits it gets alone. */
static void test_batch_step(void **state)
{
	struct tkv_model *m = load();
	struct tkv_engine_params p = tkv_engine_default_params();
	struct tkv_engine *e = NULL;
	struct tkv_seq *s[3] = { 0 }, *solo = NULL;
	struct tkv_error err = { 0 };
	struct tkv_batch_item it[3];
	float lg[3][512], ref[512];
	int32_t next[3];
	size_t lens[3] = { 5, 16, 1 };

	(void)state;
	p.n_batch = 8; /* smaller than the prompts together: several forwards per step */
	p.kv.policy = TKV_POLICY_FULL;
	assert_int_equal(tkv_engine_init(&e, m, &p, &err), TKV_OK);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(tkv_seq_init(&s[i], e, &err), TKV_OK);
		it[i] = (struct tkv_batch_item){ s[i], prompt_ids, lens[i], lg[i], 0 };
	}
	assert_int_equal(tkv_engine_step(e, it, 3, &err), TKV_OK);
	for (int step = 0; step < 4; step++) {
		for (int i = 0; i < 3; i++) {
			int best = 0;

			for (int v = 1; v < 512; v++)
				if (lg[i][v] > lg[i][best])
					best = v;
			next[i] = best;
			it[i] = (struct tkv_batch_item){ s[i], &next[i], 1, lg[i], 0 };
		}
		assert_int_equal(tkv_engine_step(e, it, 3, &err), TKV_OK);
	}
	/* the same sequence alone: prompt of 16, then the 4 tokens seq 1 chose */
	assert_int_equal(tkv_seq_init(&solo, e, &err), TKV_OK);
	assert_int_equal(tkv_seq_decode(solo, prompt_ids, 16, ref, 0, &err), TKV_OK);
	for (int step = 0; step < 4; step++) {
		int best = 0;

		for (int v = 1; v < 512; v++)
			if (ref[v] > ref[best])
				best = v;
		assert_int_equal(tkv_seq_decode(solo, (int32_t[]){ best }, 1, ref, 0, &err), TKV_OK);
	}
	for (int v = 0; v < 512; v++)
		assert_true(fabsf(ref[v] - lg[1][v]) < TOL_CHUNK_LOGIT);
	assert_int_equal(tkv_seq_n_past(s[1]), 20);
	/* a failing item does not stop the others */
	{
		int32_t bad = 9999;

		it[0] = (struct tkv_batch_item){ s[0], &bad, 1, lg[0], 0 };
		it[1] = (struct tkv_batch_item){ s[1], &next[1], 1, lg[1], 0 };
		assert_int_equal(tkv_engine_step(e, it, 2, &err), TKV_ERR_ARG);
		assert_int_equal(it[0].status, TKV_ERR_ARG);
		assert_int_equal(it[1].status, TKV_OK);
		assert_int_equal(tkv_seq_n_past(s[1]), 21);
	}
	tkv_seq_free(solo);
	for (int i = 0; i < 3; i++)
		tkv_seq_free(s[i]);
	tkv_engine_free(e);
	tkv_model_free(m);
}

/* Sequences with a common prompt prefix share its pages and get the logits
 * they would get alone. */
static void test_prefix_sharing(void **state)
{
	struct tkv_model *m = load();
	struct tkv_engine_params p = tkv_engine_default_params();
	struct tkv_engine *e = NULL;
	struct tkv_seq *a = NULL, *b = NULL, *c = NULL;
	struct tkv_error err = { 0 };
	struct tkv_kv_stats ks, before;
	int32_t ids[40];
	float la[512], lb[512], lc[512];
	size_t reused = 0;
	struct tkv_alloc al = { 0 };

	(void)state;
	for (int i = 0; i < 40; i++)
		ids[i] = prompt_ids[i % N_PROMPT];
	p.prefix_cache = 1;
	p.alloc = &al;
	assert_int_equal(tkv_engine_init(&e, m, &p, &err), TKV_OK);
	assert_int_equal(tkv_seq_init(&a, e, &err), TKV_OK);
	assert_int_equal(tkv_seq_reuse_prefix(a, ids, 40, &reused, &err), TKV_OK);
	assert_int_equal(reused, 0); /* nothing cached yet */
	assert_int_equal(tkv_seq_decode(a, ids, 40, la, 0, &err), TKV_OK);
	assert_int_equal(tkv_seq_publish_prefix(a, ids, 40, &err), TKV_OK);
	tkv_engine_kv_stats(e, &before);
	assert_int_equal(before.prefix_pages, 2 * 5 * 4); /* two 16-token chunks x 20 streams */

	/* b: same 35 first tokens, then different ones */
	ids[36] = 100;
	ids[38] = 200;
	assert_int_equal(tkv_seq_init(&b, e, &err), TKV_OK);
	assert_int_equal(tkv_seq_reuse_prefix(b, ids, 40, &reused, &err), TKV_OK);
	assert_int_equal(reused, 32);
	assert_int_equal(tkv_seq_n_past(b), 32);
	assert_int_equal(tkv_seq_decode(b, ids + 32, 8, lb, 0, &err), TKV_OK);
	tkv_engine_kv_stats(e, &ks);
	assert_int_equal(ks.prefix_hits, 1);
	assert_int_equal(ks.prefix_tokens, 32);
	/* shared pages are not allocated twice: b added only its tail pages */
	assert_int_equal(ks.n_pages, before.n_pages + 5 * 4);

	/* c: the same prompt as b computed without sharing */
	assert_int_equal(tkv_seq_init(&c, e, &err), TKV_OK);
	assert_int_equal(tkv_seq_decode(c, ids, 40, lc, 0, &err), TKV_OK);
	for (int v = 0; v < 512; v++)
		assert_true(fabsf(lb[v] - lc[v]) < TOL_CHUNK_LOGIT);
	/* the shared sequence goes on decoding like the private one */
	{
		int32_t t = 7;

		assert_int_equal(tkv_seq_decode(b, &t, 1, lb, 0, &err), TKV_OK);
		assert_int_equal(tkv_seq_decode(c, &t, 1, lc, 0, &err), TKV_OK);
		for (int v = 0; v < 512; v++)
			assert_true(fabsf(lb[v] - lc[v]) < TOL_CHUNK_LOGIT);
	}
	tkv_seq_free(a);
	tkv_seq_free(b);
	tkv_seq_free(c);
	tkv_engine_kv_stats(e, &ks);
	assert_int_equal(ks.n_pages, 2 * 5 * 4); /* only the tree's pages are left */
	tkv_engine_free(e);
	assert_int_equal(atomic_load(&al.live), 0);
	tkv_model_free(m);
}

/* Every allocation during load, engine setup and generation, made to fail in
 * turn: each is reported as TKV_ERR_NOMEM and nothing leaks. */
static void test_alloc_failures(void **state)
{
	int n_fail = 0;

	(void)state;
	for (unsigned long long n = 1;; n++) {
		struct tkv_alloc a = { 0 };
		struct tkv_model_params mp = tkv_model_default_params();
		struct tkv_engine_params ep = tkv_engine_default_params();
		struct tkv_model *m = NULL;
		struct tkv_engine *e = NULL;
		struct tkv_seq *s = NULL;
		struct tkv_error err = { 0 };
		float logits[512];
		int st;

		a.fail_at = n;
		mp.alloc = &a;
		ep.alloc = &a;
		ep.n_threads = 2;
		ep.n_batch = 4;
		ep.head_plan.mode = TKV_HEADS_UNIFORM; /* the probe's failures: test_faults */
		st = tkv_model_load(&m, model_path(), &mp, &err);
		if (!st)
			st = tkv_engine_init(&e, m, &ep, &err);
		if (!st)
			st = tkv_seq_init(&s, e, &err);
		if (!st)
			st = tkv_seq_decode(s, prompt_ids, N_PROMPT, logits, 0, &err);
		for (int i = 0; !st && i < 20; i++) {
			int32_t id = prompt_ids[i % N_PROMPT];

			st = tkv_seq_decode(s, &id, 1, logits, 0, &err);
		}
		tkv_seq_free(s);
		tkv_engine_free(e);
		tkv_model_free(m);
		assert_int_equal(atomic_load(&a.live), 0);
		if (st == TKV_OK) {
			assert_true(a.n_calls < n);   /* no failure left to inject */
			break;
		}
		if (st != TKV_ERR_NOMEM)
			fail_msg("allocation %llu: status %d (%s), want NOMEM", n, st, err.msg);
		n_fail++;
	}
	assert_true(n_fail > 20);
}

/* Writes the fixture with `patch` bytes at the value of `key` and expects the
 * load to fail with status want and a message containing `needle`. */
static void expect_patched(const char *key, const void *patch, size_t n, int want, const char *needle)
{
	size_t len = 0, klen = strlen(key);
	char *buf = tu_read_file(model_path(), &len);
	char path[] = "/tmp/tkv_patched_XXXXXX";
	struct tkv_model *m = NULL;
	struct tkv_error err = { 0 };
	FILE *f;
	int fd, st;
	char *hit = NULL;

	assert_non_null(buf);
	for (size_t i = 8; i + klen + 12 < len; i++) {
		uint64_t l;

		memcpy(&l, buf + i - 8, 8);
		if (l == klen && !memcmp(buf + i, key, klen)) {
			hit = buf + i + klen + 4; /* skip the u32 value type */
			break;
		}
	}
	assert_non_null(hit);
	memcpy(hit, patch, n);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "wb");
	assert_int_equal(fwrite(buf, 1, len, f), len);
	fclose(f);
	st = tkv_model_load(&m, path, NULL, &err);
	unlink(path);
	free(buf);
	assert_null(m);
	assert_int_equal(st, want);
	if (!strstr(err.msg, needle))
		fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_bad_metadata(void **state)
{
	/* a uint32 key patched to a value the loader must refuse */
	static const struct {
		const char *key;
		uint32_t v;
		const char *needle;
	} bad[] = {
		{ "llama.block_count", 6, "blk.5" },
		{ "llama.attention.head_count", 7, "heads" },
		{ "llama.attention.head_count_kv", 3, "KV heads" },
		{ "llama.embedding_length", 65, "" },
		{ "llama.feed_forward_length", 0, "zero" },
		{ "llama.feed_forward_length", 171, "ffn_gate" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		expect_patched(bad[i].key, &bad[i].v, 4, TKV_ERR_FORMAT, bad[i].needle);
	expect_patched("general.architecture", "\x05\0\0\0\0\0\0\0gpt99", 13, TKV_ERR_UNSUPPORTED, "gpt99");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_info),
		cmocka_unit_test(test_chunking_invariant),
		cmocka_unit_test(test_load_threads),
		cmocka_unit_test(test_bad_tokens_and_context),
		cmocka_unit_test(test_kv_budget),
		cmocka_unit_test(test_on_demand),
		cmocka_unit_test(test_batch_step),
		cmocka_unit_test(test_prefix_sharing),
		cmocka_unit_test(test_bad_metadata),
		cmocka_unit_test(test_alloc_failures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
