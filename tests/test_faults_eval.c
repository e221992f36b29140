/* test_faults_eval.c - allocation-failure sweep over `tierkv eval`'s path on
 * one text (src/eval/run.c, the code the CLI runs): the full-cache reference
 * (teacher-forced pass, logits kept, greedy generation), then two rows scored
 * against it - full, and tiered under a per-sequence cap of half the full
 * cache (demotions and evictions) - each a pass, a generation and the
 * comparison (NLL, KL, top-1, first divergence, BLEU, ROUGE-L).
 *
 * A reference run counts the allocation calls T and where the reference and
 * each row end; plan_n picks the N (below; about a sixth of them). For each, the counting allocator
 * fails its Nth call and every later one (fail_count 0), and for every third
 * N of the plan only the Nth (fail_count 1). Each run must end in
 * TKV_ERR_NOMEM (N <= T) or succeed (N = T + 1, with the reference's
 * results; or a transient failure a fallback absorbed) and hold nothing
 * afterwards (live bytes 0; LeakSanitizer in the ASan build); a run with the
 * allocator working again must then give exactly the reference run's results
 * (after every transient failure and every RECHECK-th persistent one: each
 * eval builds its own engines, only the model is shared). */
#include "testutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/run.h"
#include "tierkv.h"

#define N_MAX 64
#define PREFILL 8
#define N_PREFIX 4
#define N_GEN 4
#define N_ROWS 2
#define RECHECK 16     /* a clean run after every RECHECK-th N of the persistent sweep */

static const char text[] = "Once upon a time, there was a little girl named Lily.";

struct fixture {
	struct tkv_model *m;
	int32_t ids[N_MAX];
	size_t n;
	size_t bpt;
};

/* What one eval run measures, compared bit for bit between runs. */
struct result {
	double ref_nll;
	int32_t ref_gen[N_GEN];
	size_t ref_kv;
	struct evr_row rows[N_ROWS];
	unsigned long long marks[1 + N_ROWS];   /* allocation calls after the reference and each row */
};

static struct tkv_engine_params params(enum tkv_policy pol, size_t cap)
{
	struct tkv_engine_params ep = tkv_engine_default_params();

	ep.n_threads = 1;
	ep.n_batch = 8;
	ep.n_ctx = N_MAX;
	ep.kv_mem = 0;
	ep.kv.policy = pol;
	ep.kv.seq_budget = cap;
	ep.kv.n_sink = 1;
	ep.kv.n_window = 2;
	ep.head_plan.mode = TKV_HEADS_UNIFORM; /* the probe's failures: test_faults */
	return ep;
}

/* One eval of the text as `tierkv eval --policies full,tiered --budgets 0.35
 * --prefill 16 -b 8 --gen 8` does it (the reference is full at f16, no cap). */
static int run_eval(const struct fixture *f, struct tkv_alloc *a, struct result *out)
{
	struct evr_ctx x;
	struct evr_ref ref;
	struct tkv_error err = { 0 };
	enum evr_stage stage;
	struct tkv_engine_params rp = params(TKV_POLICY_FULL, 0);
	struct tkv_engine_params rows[N_ROWS] = {
		params(TKV_POLICY_FULL, 0),
		params(TKV_POLICY_TIERED, (size_t)(0.5 * (double)f->n * (double)f->bpt)),
	};
	int st;

	memset(out, 0, sizeof *out);
	if ((st = evr_init(&x, f->m, PREFILL, N_MAX, a)))
		return st;
	st = evr_ref_run(&x, &rp, f->ids, f->n, 0, 0, f->n - 1, N_PREFIX, N_GEN, &ref, &stage, &err);
	if (st == TKV_OK) {
		out->ref_nll = ref.nll;
		memcpy(out->ref_gen, ref.gen, sizeof out->ref_gen);
		out->ref_kv = ref.end.kv_bytes;
		out->marks[0] = atomic_load(&a->n_calls);
		for (int r = 0; r < N_ROWS && st == TKV_OK; r++) {
			st = evr_row_run(&x, &rows[r], &ref, f->ids, f->n, &out->rows[r], &stage, &err);
			out->marks[1 + r] = atomic_load(&a->n_calls);
		}
		evr_ref_free(&x, &ref);
	}
	evr_free(&x);
	if (st == TKV_ERR_NOMEM)
		assert_int_not_equal(stage, EVR_STAGE_NONE);
	return st;
}

static void same(const struct result *a, const struct result *b, unsigned long long n)
{
	if (memcmp(&a->ref_nll, &b->ref_nll, sizeof a->ref_nll) || memcmp(a->ref_gen, b->ref_gen, sizeof a->ref_gen) ||
	    a->ref_kv != b->ref_kv)
		fail_msg("N=%llu: the reference differs after the failure", n);
	for (int r = 0; r < N_ROWS; r++) {
		const struct evr_row *x = &a->rows[r], *y = &b->rows[r];

		if (memcmp(&x->acc, &y->acc, sizeof x->acc) || x->kv_peak != y->kv_peak ||
		    x->alloc_peak != y->alloc_peak || x->end.kv_bytes != y->end.kv_bytes ||
		    x->end.evicted != y->end.evicted || x->end.demoted != y->end.demoted ||
		    x->gen_done != y->gen_done || x->first_div != y->first_div ||
		    memcmp(&x->bleu, &y->bleu, sizeof x->bleu) || memcmp(&x->rouge, &y->rouge, sizeof x->rouge))
			fail_msg("N=%llu: row %d differs after the failure", n, r);
	}
}

static void load(struct fixture *f)
{
	struct tkv_model_params mp = tkv_model_default_params();
	struct tkv_error err = { 0 };
	const char *path = tu_model_path("stories260K.gguf");

	memset(f, 0, sizeof *f);
	if (!path)
		fail_msg("stories260K.gguf not found (set TIERKV_MODELS)");
	if (tkv_model_load(&f->m, path, &mp, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(tkv_tokenize(f->m, text, sizeof text - 1, 1, 0, f->ids, N_MAX, &f->n), TKV_OK);
	assert_true(f->n > PREFILL + 6 && f->n <= N_MAX);
	f->bpt = tkv_model_kv_bytes_per_token(f->m);
}

/* The N a sweep tries (ascending, ending at total + 1). The calls fall in
 * three segments - the reference, the full row, the tiered row - each an
 * engine's set-up and prefill, then decode steps that repeat the same sites
 * once per layer and head and per token. Of each segment every N of its first
 * SETUP calls is tried (every third in the full row, the reference's code
 * again), then every STRIDE-th (a prime, so the offsets within a step come
 * round), and every N of the run's last TAIL calls (the tiered row's
 * generation, ROUGE-L). */
#define SETUP 64
#define STRIDE 11
#define TAIL 32

static unsigned long long *plan_n(const struct result *ref, unsigned long long total, size_t *count)
{
	unsigned long long *ns = calloc(total + 1, sizeof *ns);
	size_t n = 0;

	assert_non_null(ns);
	for (unsigned long long k = 1; k <= total + 1; k++) {
		int seg = k <= ref->marks[0] ? 0 : k <= ref->marks[1] ? 1 : 2;
		unsigned long long off = k - 1 - (seg ? ref->marks[seg - 1] : 0);
		bool take = off < SETUP ? (seg != 1 || off % 3 == 0) : off % STRIDE == 0;

		if (take || k > total - TAIL)
			ns[n++] = k;
	}
	*count = n;
	return ns;
}

/* fail_count 0: the plan, and a clean run after every RECHECK-th N; 1: every
 * step-th N of the plan, each followed by a clean run. */
static void sweep(unsigned long long fail_count, size_t step)
{
	struct fixture f;
	struct result ref, got;
	struct tkv_alloc a0 = { 0 };
	unsigned long long total, n_nomem = 0, n_absorbed = 0, *ns;
	size_t count, runs = 0;

	load(&f);
	assert_int_equal(run_eval(&f, &a0, &ref), TKV_OK);
	assert_int_equal(atomic_load(&a0.live), 0);
	total = atomic_load(&a0.n_calls);
	/* the sweep runs what eval measures: the capped row demoted and evicted */
	assert_true(ref.rows[1].end.evicted > 0 && ref.rows[1].end.demoted > 0);
	assert_true(ref.rows[0].acc.kl == 0.0 && ref.rows[0].gen_done && ref.rows[0].first_div == N_GEN);
	assert_true(ref.rows[1].acc.n == f.n - 1 && ref.rows[1].gen_done);

	ns = plan_n(&ref, total, &count);
	for (size_t i = 0; i < count; i += i + step < count || i + 1 == count ? step : count - 1 - i) {
		unsigned long long n = ns[i];
		struct tkv_alloc a = { 0 };
		int st;

		a.fail_at = n;
		a.fail_count = fail_count;
		st = run_eval(&f, &a, &got);
		if (atomic_load(&a.live) != 0)
			fail_msg("N=%llu: %zu bytes leaked", n, (size_t)atomic_load(&a.live));
		if (st == TKV_ERR_NOMEM && n <= total)
			n_nomem++;
		else if (st == TKV_OK && n <= total && fail_count)
			n_absorbed++;
		else if (st != TKV_OK || n <= total)
			fail_msg("N=%llu of %llu: status %s", n, total, tkv_status_str(st));
		else
			same(&ref, &got, n);
		/* the allocator works again: the next eval gives the same figures
		 * (every eval builds its own engines; the model is shared) */
		runs++;
		if (fail_count == 0 && i % RECHECK && n <= total)
			continue;
		a.fail_at = 0;
		assert_int_equal(run_eval(&f, &a, &got), TKV_OK);
		same(&ref, &got, n);
		assert_int_equal(atomic_load(&a.live), 0);
	}
	printf("# eval (fail_count %llu): %llu allocation calls (reference %llu, full row %llu, tiered row %llu); "
	       "%zu runs: %llu NOMEM, %llu absorbed, 1 clean\n", fail_count, total, ref.marks[0],
	       ref.marks[1] - ref.marks[0], ref.marks[2] - ref.marks[1], runs, n_nomem, n_absorbed);
	free(ns);
	assert_true(n_nomem > 0);
	tkv_model_free(f.m);
}

static void test_eval(void **state)
{
	(void)state;
	sweep(0, 1);
}

static void test_eval_transient(void **state)
{
	(void)state;
	sweep(1, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_eval),
		cmocka_unit_test(test_eval_transient),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
