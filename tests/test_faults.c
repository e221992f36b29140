/* test_faults.c - allocation-failure sweeps over whole paths through the
 * engine: model load, engine set-up and a policy-managed decode with
 * evictions and demotions (a per-sequence budget; the memory governor under a
 * small --kv-mem with two sequences), continuous batching with
 * tkv_engine_step (adaptive policy, governor), and prefix sharing with
 * copy-on-write and the governor dropping unused prefixes.
 *
 * For a set of N (below) the counting allocator fails its Nth call and every
 * one after it (fail_count = 1: only the Nth, in the transient sweep). Each
 * run must end in TKV_ERR_NOMEM - or succeed when a documented fallback took
 * the failure (adaptive's per-head split falls back to an even one; a prefix
 * publication may stop part way) - and then, with the allocator working
 * again, the same engine must serve a new sequence (decode, prefix lookup and
 * publication), its pool must hold no page that nobody owns, and once
 * everything is freed the allocator's live bytes must be 0. The last N is
 * one past the reference run's calls: a run without a failure to inject.
 *
 * Which N: a reference run notes the allocation calls after each decode call
 * and whether a cache counter (evictions, demotions, governor runs, copies on
 * write, prefix hits, prefix pages published or dropped) first moved in it.
 * Every N of the set-up (model load, engine, sequences, first prefill) is
 * tried, and every N of the first FULL_SPAN calls of each decode call in which
 * a counter first moved (then every third, and every fourth of the call
 * after); elsewhere the calls repeat the same sites on more tokens and about
 * SAMPLES evenly spaced N are tried. A gcov build confirms that the failure
 * branch of every allocation site on these paths is taken (README,
 * Hardening). TKV_FAULTS_ONLY=NAME runs one sweep; TKV_FAULTS_DRY=1 prints
 * the plan without sweeping. */
#include "testutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tierkv.h"

#define SAMPLES 64      /* N sampled evenly over the whole run, per sweep */
#define MAX_SEQ 4
#define N_VOCAB 512     /* stories260K */

#define MAX_MARKS 1024

struct run {
	struct tkv_model *m;
	struct tkv_engine *e;
	struct tkv_seq *s[MAX_SEQ];
	/* filled by mark() after each decode call: the allocation calls so far,
	 * and whether a cache counter first moved during that call */
	unsigned long long marks[MAX_MARKS];
	bool news[MAX_MARKS];
	int n_marks;
	struct tkv_kv_stats seen;   /* counters at the previous mark */
};

typedef int (*scenario_fn)(struct run *r, struct tkv_alloc *a, struct tkv_error *err);

static const char *model_path(void)
{
	const char *p = tu_model_path("stories260K.gguf");

	if (!p)
		fail_msg("stories260K.gguf not found (set TIERKV_MODELS)");
	return p;
}

/* A deterministic prompt: ids in [3, N_VOCAB) (no BOS/EOS) from a seed. */
static void prompt(int32_t *ids, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		ids[i] = (int32_t)(3 + (x >> 8) % (N_VOCAB - 3));
	}
}

static int32_t argmax(const float *l)
{
	int32_t best = 0;

	for (int32_t i = 1; i < N_VOCAB; i++)
		if (l[i] > l[best])
			best = i;
	return best;
}

static int load(struct run *r, struct tkv_alloc *a, struct tkv_engine_params *ep, struct tkv_error *err)
{
	struct tkv_model_params mp = tkv_model_default_params();
	int st;

	mp.alloc = a;
	ep->alloc = a;
	if ((st = tkv_model_load(&r->m, model_path(), &mp, err)))
		return st;
	return tkv_engine_init(&r->e, r->m, ep, err);
}

static struct tkv_engine_params base_params(void)
{
	struct tkv_engine_params ep = tkv_engine_default_params();

	ep.n_threads = 1;
	ep.n_batch = 8;
	ep.n_ctx = 256;
	ep.kv_mem = 0;
	ep.kv.policy = TKV_POLICY_TIERED;
	ep.kv.n_window = 4;  /* a short window and 2 sinks: short sequences already evict */
	ep.kv.n_sink = 2;
	ep.head_plan.mode = TKV_HEADS_UNIFORM; /* the head probe has a sweep of its own */
	return ep;
}

/* Called after each decode call (and set-up step): records the calls so far
 * and whether a counter - evictions, demotions, merges, governor runs, copies
 * on write, prefix hits, prefix pages published or dropped - first moved. */
static void mark(struct run *r, struct tkv_alloc *a)
{
	struct tkv_kv_stats ks, *o = &r->seen;

	if (r->n_marks == MAX_MARKS)
		return;
	tkv_engine_kv_stats(r->e, &ks);
	r->news[r->n_marks] = (!o->evicted && ks.evicted) || (!o->demoted && ks.demoted) ||
			      (!o->merged && ks.merged) || (!o->gov_runs && ks.gov_runs) || (!o->cow && ks.cow) ||
			      (!o->prefix_hits && ks.prefix_hits) || (!o->prefix_pages && ks.prefix_pages) ||
			      ks.prefix_pages < o->prefix_pages;
	r->marks[r->n_marks++] = atomic_load(&a->n_calls);
	r->seen = ks;
}

/* Prefill (in chunks of n_batch), then greedy decode of `gen` tokens one
 * by one, marking after each decode call. */
static int generate(struct run *r, struct tkv_alloc *a, struct tkv_seq *s, const int32_t *ids, size_t n,
		    int gen, struct tkv_error *err)
{
	float logits[N_VOCAB];
	int st = n ? tkv_seq_decode(s, ids, n, logits, 0, err) : TKV_OK;

	if (n && !st)
		mark(r, a);
	for (int i = 0; !st && i < gen; i++) {
		int32_t t = argmax(logits);

		if (!(st = tkv_seq_decode(s, &t, 1, logits, 0, err)))
			mark(r, a);
	}
	return st;
}

/* The engine of params ep, then two sequences: prompts of plen tokens (<= 16)
 * from seeds seed0 and seed0 + 1, then `turns` greedy tokens each, decoded
 * in turns; marks after every call. */
static int two_in_turns(struct run *r, struct tkv_alloc *a, struct tkv_engine_params *ep, size_t plen,
			uint32_t seed0, int turns, struct tkv_error *err)
{
	float logits[2][N_VOCAB];
	int32_t ids[2][16], next[2];
	int st;

	assert_true(plen <= 16);
	if ((st = load(r, a, ep, err)))
		return st;
	for (int i = 0; i < 2; i++) {
		prompt(ids[i], plen, seed0 + (uint32_t)i);
		if ((st = tkv_seq_init(&r->s[i], r->e, err)) ||
		    (st = tkv_seq_decode(r->s[i], ids[i], plen, logits[i], 0, err)))
			return st;
		next[i] = argmax(logits[i]);
		mark(r, a);
	}
	for (int k = 0; k < turns; k++)
		for (int i = 0; i < 2; i++) {
			if ((st = tkv_seq_decode(r->s[i], &next[i], 1, logits[i], 0, err)))
				return st;
			next[i] = argmax(logits[i]);
			mark(r, a);
		}
	return TKV_OK;
}

/* Tiered policy under a per-sequence cap of 12 x 640 bytes of K+V (2 sinks, a
 * window of 4): two sequences of 12 + 10 tokens, decoded in turns, demote and
 * then evict. */
static int sc_policy(struct run *r, struct tkv_alloc *a, struct tkv_error *err)
{
	struct tkv_engine_params ep = base_params();

	ep.kv.seq_budget = 12 * 640;
	return two_in_turns(r, a, &ep, 12, 0, 10, err);
}

/* The head probe when the engine starts (its sequences, the fork between its
 * two continuations, the scores), then two capped sequences in turns. */
static int sc_heads(struct run *r, struct tkv_alloc *a, struct tkv_error *err)
{
	struct tkv_engine_params ep = base_params();

	ep.head_plan.mode = TKV_HEADS_AUTO;
	ep.n_ctx = 40; /* a probe of 19 tokens and two continuations */
	ep.kv.seq_budget = 8 * 640;
	return two_in_turns(r, a, &ep, 8, 0, 3, err);
}

/* The same under a --kv-mem of 64 KiB, which holds one probe sequence (3
 * pages of 16 f16 slots in each of 20 streams: 36 KiB, under 0.7 of 64)
 * and not two: the second continuation runs on a sequence of its own after
 * the first is freed, at the probe's full length. */
static int sc_heads_mem(struct run *r, struct tkv_alloc *a, struct tkv_error *err)
{
	struct tkv_engine_params ep = base_params();
	struct tkv_kv_head_plan hp;
	int st;

	ep.head_plan.mode = TKV_HEADS_AUTO;
	ep.n_ctx = 40;
	ep.kv_mem = 64 << 10;
	ep.kv.seq_budget = 8 * 640;
	if ((st = two_in_turns(r, a, &ep, 8, 0, 3, err)))
		return st;
	tkv_engine_head_plan(r->e, &hp);
	if (hp.unprobed || hp.probe_tokens != 19)
		fail_msg("heads-mem: the probe ran on %u tokens (unprobed %d), want 19", hp.probe_tokens, hp.unprobed);
	return st;
}

/* The memory governor (two worker threads): no per-sequence cap, a --kv-mem
 * of 30 KiB that two sequences outgrow after some 14 tokens each. */
static int sc_governor(struct run *r, struct tkv_alloc *a, struct tkv_error *err)
{
	struct tkv_engine_params ep = base_params();

	ep.n_threads = 2;
	ep.kv_mem = 30 << 10;
	return two_in_turns(r, a, &ep, 8, 10, 14, err);
}

/* Continuous batching: three sequences through tkv_engine_step (up to 8
 * rows a step), the third's prompt joining while the others decode, with the
 * adaptive policy (per-head budgets) under a per-sequence cap and a --kv-mem
 * of 44 KiB that the governor defends. */
static int sc_step(struct run *r, struct tkv_alloc *a, struct tkv_error *err)
{
	struct tkv_engine_params ep = base_params();
	static const size_t plen[3] = { 10, 6, 14 };
	float logits[3][N_VOCAB];
	int32_t ids[3][14], next[3];
	struct tkv_batch_item it[3];
	int st;

	ep.kv.policy = TKV_POLICY_ADAPTIVE;
	ep.kv_mem = 44 << 10;
	ep.kv.seq_budget = 16 * 640;
	if ((st = load(r, a, &ep, err)))
		return st;
	for (int i = 0; i < 3; i++) {
		prompt(ids[i], plen[i], 20 + (uint32_t)i);
		if ((st = tkv_seq_init(&r->s[i], r->e, err)))
			return st;
	}
	mark(r, a);
	for (int k = 0; k < 12; k++) {
		uint32_t before[3];
		size_t n = 0;

		for (int i = 0; i < 3; i++) {
			if (i == 2 && k < 3)
				continue;   /* joins at step 3 */
			before[n] = tkv_seq_n_past(r->s[i]);
			it[n] = (struct tkv_batch_item){ r->s[i], before[n] ? &next[i] : ids[i], before[n] ? 1 : plen[i],
							  logits[i], -1 };
			n++;
		}
		st = tkv_engine_step(r->e, it, n, err);
		/* the contract a server relies on: an item whose status is OK got
		 * all its tokens in (and its logits); the others say why not */
		for (size_t j = 0; j < n; j++) {
			if (it[j].status == TKV_OK && tkv_seq_n_past(it[j].seq) != before[j] + it[j].n)
				fail_msg("step %d: item %zu is OK but holds %u tokens, want %u + %zu (step: %s)", k, j,
					 tkv_seq_n_past(it[j].seq), before[j], it[j].n, tkv_status_str(st));
			if (st == TKV_OK)
				assert_int_equal(it[j].status, TKV_OK);
			else if (it[j].status != TKV_OK)
				assert_int_equal(it[j].status, TKV_ERR_NOMEM);
		}
		if (st)
			return st;
		for (size_t j = 0; j < n; j++)
			next[j] = argmax(it[j].logits);
		mark(r, a);
	}
	return TKV_OK;
}

/* Prefix sharing (pages of 8 tokens): A publishes a 24-token prompt; B
 * reuses its pages; C, capped below the shared pages, copies them
 * (copy-on-write) to shrink; then A and B leave and D, under a --kv-mem of
 * 48 KiB, makes the governor drop the prefix pages nobody uses. */
static int sc_prefix(struct run *r, struct tkv_alloc *a, struct tkv_error *err)
{
	struct tkv_engine_params ep = base_params();
	int32_t ids[28], other[24];
	size_t reused;
	int st;

	ep.prefix_cache = 1;
	ep.page_tokens = 8;
	ep.kv_mem = 56 << 10;
	if ((st = load(r, a, &ep, err)))
		return st;
	prompt(ids, 28, 30);
	prompt(other, 24, 31);
	/* A: computes and publishes */
	if ((st = tkv_seq_init(&r->s[0], r->e, err)) ||
	    (st = tkv_seq_reuse_prefix(r->s[0], ids, 24, &reused, err)) ||
	    (st = generate(r, a, r->s[0], ids + reused, 24 - reused, 0, err)) ||
	    (st = tkv_seq_publish_prefix(r->s[0], ids, 24, err)))
		return st;
	mark(r, a);
	/* B: the same 24 then its own 4, and 4 generated */
	if ((st = tkv_seq_init(&r->s[1], r->e, err)) ||
	    (st = tkv_seq_reuse_prefix(r->s[1], ids, 28, &reused, err)) ||
	    (st = generate(r, a, r->s[1], ids + reused, 28 - reused, 4, err)))
		return st;
	/* C: shares the prefix under a cap below it: copy-on-write */
	if ((st = tkv_seq_init(&r->s[2], r->e, err)))
		return st;
	tkv_seq_set_budget(r->s[2], 6 * 640);
	if ((st = tkv_seq_reuse_prefix(r->s[2], ids, 26, &reused, err)) ||
	    (st = generate(r, a, r->s[2], ids + reused, 26 - reused, 6, err)))
		return st;
	tkv_seq_free(r->s[0]);
	tkv_seq_free(r->s[1]);
	r->s[0] = r->s[1] = NULL;
	/* D: another prompt; the pool passes the governor's mark */
	if ((st = tkv_seq_init(&r->s[3], r->e, err)) ||
	    (st = tkv_seq_reuse_prefix(r->s[3], other, 24, &reused, err)) ||
	    (st = generate(r, a, r->s[3], other + reused, 24 - reused, 8, err)) ||
	    (st = tkv_seq_publish_prefix(r->s[3], other, 24, err)))
		return st;
	mark(r, a);
	return TKV_OK;
}

static void free_seqs(struct run *r)
{
	for (int i = 0; i < MAX_SEQ; i++) {
		tkv_seq_free(r->s[i]);
		r->s[i] = NULL;
	}
}

static void free_run(struct run *r)
{
	free_seqs(r);
	tkv_engine_free(r->e);
	tkv_model_free(r->m);
	r->e = NULL;
	r->m = NULL;
}

/* With the allocator working again, the engine a failed run left serves a
 * new sequence, and its pool holds only the pages of live sequences and the
 * prefix tree. */
static void probe(struct run *r, struct tkv_alloc *a, unsigned long long n)
{
	struct tkv_error err = { 0 };
	struct tkv_kv_stats ks;
	struct tkv_seq *s = NULL;
	int32_t ids[12];
	size_t reused = 0;
	int st;

	a->fail_at = 0;
	free_seqs(r);
	if (!r->e)
		return;
	tkv_engine_kv_stats(r->e, &ks);
	if (ks.n_pages != ks.prefix_pages)
		fail_msg("N=%llu: %zu pages in the pool after every sequence was freed, %llu in the prefix tree", n,
			 ks.n_pages, (unsigned long long)ks.prefix_pages);
	prompt(ids, 12, 30);
	st = tkv_seq_init(&s, r->e, &err);
	if (!st)
		st = tkv_seq_reuse_prefix(s, ids, 12, &reused, &err);
	if (!st)
		st = generate(r, a, s, ids + reused, 12 - reused, 2, &err);
	if (!st)
		st = tkv_seq_publish_prefix(s, ids, 12, &err);
	if (st)
		fail_msg("N=%llu: the next request failed after the allocator recovered: %s (%s)", n,
			 tkv_status_str(st), err.msg);
	tkv_seq_free(s);
}

/* The N a sweep tries (ascending, 1-based, ending past total): every N of
 * the set-up (to the first mark) and of the first FULL_SPAN calls of each
 * decode call in which a counter first moved, every third N of the rest of
 * that call and every fourth of the call after it; elsewhere about SAMPLES
 * evenly spaced. */
#define FULL_SPAN 120

static unsigned long long *plan_n(const struct run *ref, unsigned long long total, size_t *count)
{
	unsigned long long *ns = calloc(total + 2, sizeof *ns), stride;
	unsigned char *take = calloc(total + 2, 1);
	size_t n = 0;

	assert_non_null(ns);
	assert_non_null(take);
	for (int i = 0; i < ref->n_marks; i++) {
		unsigned long long lo = i ? ref->marks[i - 1] + 1 : 1, hi = ref->marks[i];

		for (unsigned long long k = lo; k <= hi && k <= total; k++)
			if (i == 0 || (ref->news[i] && (k < lo + FULL_SPAN || (k - lo) % 3 == 0)) ||
			    (ref->news[i - 1] && (k - lo) % 4 == 0))
				take[k] = 1;
	}
	stride = total / SAMPLES ? total / SAMPLES : 1;
	for (unsigned long long k = 1; k <= total; k += stride)
		take[k] = 1;
	take[total] = take[total + 1] = 1;  /* total + 1: the run that succeeds */
	for (unsigned long long k = 1; k <= total + 1; k++)
		if (take[k])
			ns[n++] = k;
	free(take);
	*count = n;
	return ns;
}

/* Sweeps fail_at over a scenario; fail_count 0 = fail from N on, 1 = only N. */
static void sweep(scenario_fn fn, unsigned long long fail_count, const char *name, struct tkv_kv_stats *out)
{
	struct run ref = { 0 };
	struct tkv_alloc a0 = { 0 };
	struct tkv_error err = { 0 };
	struct tkv_kv_stats ks;
	unsigned long long total, *ns, n_fail = 0, n_full = 0, n_absorbed = 0;
	size_t count;
	int st;

	memset(out, 0, sizeof *out);
	if (getenv("TKV_FAULTS_ONLY") && strcmp(getenv("TKV_FAULTS_ONLY"), name))
		skip();
	/* reference run: how many calls, and where the counters first move */
	st = fn(&ref, &a0, &err);
	if (st)
		fail_msg("%s: reference run: %s (%s)", name, tkv_status_str(st), err.msg);
	tkv_engine_kv_stats(ref.e, &ks);
	total = atomic_load(&a0.n_calls);
	free_run(&ref);
	assert_int_equal(atomic_load(&a0.live), 0);
	ns = plan_n(&ref, total, &count);
	for (int i = 0; i < ref.n_marks; i++)
		if (i == 0 || ref.news[i])
			n_full += ref.marks[i] - (i ? ref.marks[i - 1] : 0);

	*out = ks;
	if (getenv("TKV_FAULTS_DRY")) {
		count = 0;
		for (int i = 0; i < ref.n_marks; i++)
			if (i == 0 || ref.news[i] || ref.news[i - 1])
				printf("#   [%llu, %llu]%s\n", i ? ref.marks[i - 1] + 1 : 1, ref.marks[i], ref.news[i] ? " new" : "");
	}
	/* the transient sweeps take every other N of the plan (neighbours hit
	 * the same sites; the persistent sweeps took them all) */
	for (size_t i = 0; i < count; i += fail_count ? 2 : 1) {
		unsigned long long n = ns[i];
		struct run r = { 0 };
		struct tkv_alloc a = { 0 };

		a.fail_at = n;
		a.fail_count = fail_count;
		memset(&err, 0, sizeof err);
		st = fn(&r, &a, &err);
		if (st == TKV_OK && atomic_load(&a.n_calls) >= n)
			n_absorbed++;   /* a fallback took the failure (adaptive's even split, a partly published prefix) */
		else if (st != TKV_OK && st != TKV_ERR_NOMEM)
			fail_msg("%s: N=%llu: status %s (%s), want NOMEM", name, n, tkv_status_str(st), err.msg);
		else if (st != TKV_OK)
			n_fail++;
		if (atomic_load(&a.n_calls) >= n)
			probe(&r, &a, n);
		free_run(&r);
		if (atomic_load(&a.live) != 0)
			fail_msg("%s: N=%llu: %zu bytes leaked", name, n, (size_t)atomic_load(&a.live));
	}
	printf("# %s (fail_count %llu): %llu allocation calls, %llu in the set-up and first-change calls; %zu runs, %llu NOMEM, "
	       "%llu absorbed; "
	       "evicted %llu demoted %llu governor %llu cow %llu prefix hits %llu\n",
	       name, fail_count, total, n_full, fail_count ? (count + 1) / 2 : count, n_fail, n_absorbed, (unsigned long long)ks.evicted,
	       (unsigned long long)ks.demoted, (unsigned long long)ks.gov_runs, (unsigned long long)ks.cow,
	       (unsigned long long)ks.prefix_hits);
	free(ns);
	assert_true(n_fail > 0 || count == 0);
}

/* Each scenario swept with persistent failures, and what its full run must
 * have done (so that the sweep went through those paths). */
enum { DID_EVICT = 1, DID_DEMOTE = 2, DID_GOVERN = 4, DID_SHARE = 8 };

struct sweep_case {
	scenario_fn fn;
	const char *name;
	unsigned did;
};

static struct sweep_case SWEEPS[] = {
	{ sc_policy, "policy", DID_EVICT | DID_DEMOTE },
	{ sc_governor, "governor", DID_GOVERN | DID_EVICT | DID_DEMOTE },
	{ sc_step, "step", DID_EVICT | DID_GOVERN },
	{ sc_prefix, "prefix", DID_SHARE },
	{ sc_heads, "heads", DID_EVICT },
	{ sc_heads_mem, "heads-mem", DID_EVICT },
};

static void test_sweep(void **state)
{
	const struct sweep_case *c = *state;
	struct tkv_kv_stats ks;

	sweep(c->fn, 0, c->name, &ks);
	if (c->did & DID_EVICT)
		assert_true(ks.evicted > 0);
	if (c->did & DID_DEMOTE)
		assert_true(ks.demoted > 0);
	if (c->did & DID_GOVERN)
		assert_true(ks.gov_runs > 0);
	if (c->did & DID_SHARE)
		assert_true(ks.prefix_hits >= 2 && ks.cow > 0);
}

#define SWEEP_TEST(name, k) { "test_" name, test_sweep, NULL, NULL, &SWEEPS[k] }

/* One failure, then the allocator works: the code after a failed call runs
 * on with a working allocator (partial landings, retries). */
static void test_transient(void **state)
{
	struct tkv_kv_stats ks;

	(void)state;
	sweep(sc_policy, 1, "policy", &ks);
	sweep(sc_prefix, 1, "prefix", &ks);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		SWEEP_TEST("policy", 0),
		SWEEP_TEST("governor", 1),
		SWEEP_TEST("step", 2),
		SWEEP_TEST("prefix", 3),
		SWEEP_TEST("heads", 4),
		SWEEP_TEST("heads-mem", 5),
		cmocka_unit_test(test_transient),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
