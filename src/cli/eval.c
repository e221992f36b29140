/* eval.c - `tierkv eval`: every cache policy at every budget, measured against
 * the full cache on the same texts.
 *
 * For each text (BOS + its tokens, cut to the context):
 *   reference   policy full, f16, no cap: teacher-forced the way generation
 *               runs - the first --prefill tokens in calls of n_batch (-b),
 *               logits of every position, then one token per call - keeping
 *               the logits of every position;
 *   each row    (policy x budget) the same pass on a fresh engine with the base
 *               --kv-* params, that policy and a per-sequence K+V cap of
 *               budget x tokens x the f16 bytes per token (budget 1: no cap),
 *               scored position by position against the reference: NLL of the
 *               actual next token, KL(full || policy), argmax agreement; the
 *               sequence's K+V bytes are read after every decode call;
 *   generation  (--gen N) from the text's first 32 tokens, N greedy tokens
 *               with the full cache and with each row (with the same byte cap
 *               as on the text, so a short generation may fit under it),
 *               compared by first divergence, BLEU-4 and ROUGE-L.
 * The copy test (--copy-test) is one more text: BOS, passage A (80 tokens of
 * the first text, from its start or --copy-offset), filler from the other
 * texts up to 85% of the context, A again; the score is the NLL of the second
 * A's tokens after its first (cap: budget x its length). A story's opening is
 * formulaic enough that a small model predicts it without looking back, so a
 * passage from the middle tells more about what a policy kept.
 *
 * Rows sum NLL, KL and agreement over all predicted positions of all texts;
 * KV bytes are summed over texts (the table shows the mean per text, the
 * ratio is sum of peaks / sum of full caches at the end of each text).
 * stdout gets a markdown table, --json FILE one JSON object per row,
 * --plot FILE an SVG of delta perplexity against the KV ratio. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/plot.h"
#include "eval/metrics.h"
#include "eval/run.h"

#define EVAL_MAX_FILES 256
#define EVAL_MAX_BUDGETS 16
#define EVAL_GEN_PREFIX 32     /* tokens of each text the greedy generations start from */
#define EVAL_COPY_LEN 80       /* tokens of passage A */
#define EVAL_COPY_FILL 0.85    /* the copy sequence's length as a share of the context */
#define EVAL_MAX_PLANS 8
#define EVAL_PLAN_NAME 512
#define EVAL_MAX_SHARES 8

void cli_eval_help(void)
{
	printf("usage: tierkv eval -m MODEL -f TEXT [-f TEXT ...] [options]\n"
	       "       tierkv eval --retrieval TASKS -m MODEL -f FILLER [-f FILLER ...] [options]\n"
	       "\n"
	       "Runs each text teacher-forced with the full cache, then with every policy at\n"
	       "every budget, and prints a markdown table of perplexity, KL divergence and\n"
	       "top-1 agreement against the full cache, KV bytes per tier, greedy-generation\n"
	       "agreement (first divergence, BLEU-4, ROUGE-L) and the copy-test loss.\n"
	       "\n"
	       "  -m, --model PATH      GGUF model (default: the bundled stories260K.gguf)\n"
	       "  -f, --file PATH ...   text files (every argument that is not an option is one too)\n"
	       "      --policies LIST   comma-separated policies, or 'all' (default all:\n"
	       "                        full,window,h2o,snapkv,tova,attn-threshold,semantic,\n"
	       "                        streaming,kivi,tiered,adaptive); full always comes first\n"
	       "      --budgets LIST    per-sequence K+V caps as fractions of the full f16 cache\n"
	       "                        for the same tokens, in (0, 1]; 1 = no cap (default 1,0.35,0.125,0.0625)\n"
	       "      --layer-plans L   layer plans to compare, ';'-separated: uniform, auto, or\n"
	       "                        PAGES[:WEIGHT] per layer (default: the --kv-layer-plan)\n"
	       "      --shares LIST     cross-layer sharing settings to compare, comma-separated\n"
	       "                        COSINE[:LAYER] as for --kv-share, 0 = off (default: --kv-share)\n"
	       "  -c, --ctx-size N      context; texts are cut to it (default: the model's)\n"
	       "      --prefill N       tokens decoded in the first call, the rest one by one (default 64)\n"
	       "  -b, --batch-size N    tokens per forward chunk of that first call (default 64)\n"
	       "      --gen N           greedy tokens generated from each text's first %d; 0 = skip (default 64)\n"
	       "      --copy-test       also run the copy test (passage A, filler, A again)\n"
	       "      --copy-offset N   passage A starts N tokens into the first text (default 0;\n"
	       "                        implies --copy-test)\n"
	       "      --mem             also run each budget below 1 as a whole-pool --kv-mem of\n"
	       "                        budget x the full f16 K+V bytes (pages, positions, scores\n"
	       "                        and headers included; the governor holds it, no\n"
	       "                        per-sequence cap): rows marked 'pool' beside 'cap'\n"
	       "      --json FILE       write one JSON object per row to FILE\n"
	       "      --plot FILE       write an SVG of delta perplexity against the KV bytes ratio\n"
	       "  -t, --threads N       threads (default: physical cores)\n"
	       "  -h, --help            this text\n"
	       "\n"
	       "The --kv-* options below set the base parameters of every policy run (the\n"
	       "reference is always the full f16 cache); --policies and --budgets take the\n"
	       "place of --kv-policy and --kv-budget. --kv-stats prints each run's cache.\n"
	       "\n"
	       "Retrieval: tierkv eval --retrieval TASKS -m MODEL -f FILLER... [options]\n"
	       "Instead of perplexity, runs retrieval prompts made from the -f files (any text;\n"
	       "filler from a random spot, in whole lines or sentences) for the full cache and\n"
	       "every policy x budget. The haystack goes through the cache in prefill chunks\n"
	       "of -b under the policy and a cap of budget x the full f16 K+V bytes of the\n"
	       "prompt; only then is the question decoded and the answer generated greedily\n"
	       "and scored. Prints accuracy per task and its mean against KV bytes.\n"
	       "      --retrieval TASKS comma list of passkey, niah, multikey, multivalue,\n"
	       "                        vartrack, copy, or 'all' (formats: docs/retrieval.md)\n"
	       "      --ctx-lens LIST   sample lengths in tokens (prompt + answer), each at most\n"
	       "                        the context (default: the context, -c or the model's)\n"
	       "      --depths LIST     needle depths as fractions of the haystack, in [0, 1]\n"
	       "                        (default 0,0.25,0.5,0.75,1)\n"
	       "      --samples N       prompts per task x length x depth (default 2)\n"
	       "      --seed S          seed of the prompts (default 1); the same seed, files and\n"
	       "                        tokenizer give the same prompts\n"
	       "      --grid POLICY     also print that policy's accuracy by depth and length\n"
	       "      --mem             as above: each budget also as a whole-pool --kv-mem\n"
	       "  -v, --verbose         each answer, expected and generated, on stderr\n"
	       "      --json, --plot    as above: one object per row (per task, length and depth\n"
	       "                        counts); an SVG of mean accuracy against the KV ratio\n"
	       "--policies, --budgets, -c, -b, -t and the --kv-* options work as above; --gen,\n"
	       "--prefill, --copy-test, --layer-plans and --shares are perplexity options only.\n\n",
	       EVAL_GEN_PREFIX);
	cli_kv_help();
}

struct eval_opts {
	const char *model, *json, *plot;
	const char *files[EVAL_MAX_FILES];
	size_t n_files;
	enum tkv_policy policies[TKV_POLICY_COUNT];
	size_t n_pol;
	double budgets[EVAL_MAX_BUDGETS];
	size_t n_bud;
	long prefill, n_gen, copy_offset;
	int copy_test, kv_stats;
	int mem;             /* --mem: each budget also as a whole-pool --kv-mem */
	struct tkv_engine_params ep;
	/* layer plans compared (--layer-plans; else the base --kv-layer-plan) */
	struct tkv_kv_layer_plan plans[EVAL_MAX_PLANS];
	char plan_names[EVAL_MAX_PLANS][EVAL_PLAN_NAME];
	size_t n_plans;
	/* cross-layer sharing settings compared (--shares; else the base --kv-share) */
	float share_cos[EVAL_MAX_SHARES];
	uint32_t share_from[EVAL_MAX_SHARES];
	char share_names[EVAL_MAX_SHARES][24];
	size_t n_shares;
};

/* A comma-separated list of sharing specs. */
static int parse_shares(struct cli_args *a, const char *v, struct eval_opts *o)
{
	const char *p = v;

	o->n_shares = 0;
	do {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		int rc;

		if (o->n_shares == EVAL_MAX_SHARES)
			return cli_usage_error(a, "--shares: at most %d settings", EVAL_MAX_SHARES);
		if ((rc = cli_share_spec(a, "--shares", p, len, &o->share_cos[o->n_shares], &o->share_from[o->n_shares])))
			return rc;
		snprintf(o->share_names[o->n_shares], sizeof o->share_names[0], "%.*s", (int)len, p);
		o->n_shares++;
		p = end ? end + 1 : p + len;
	} while (*p);
	return 0;
}

/* A ';'-separated list of layer plans (uniform, auto, or a per-layer list). */
static int parse_plans(struct cli_args *a, const char *v, struct eval_opts *o)
{
	const char *p = v;

	o->n_plans = 0;
	while (*p) {
		const char *end = strchr(p, ';');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		struct tkv_error err = { 0 };

		if (o->n_plans == EVAL_MAX_PLANS)
			return cli_usage_error(a, "--layer-plans: at most %d plans", EVAL_MAX_PLANS);
		if (len >= EVAL_PLAN_NAME)
			return cli_usage_error(a, "--layer-plans: plan %zu is too long", o->n_plans + 1);
		memcpy(o->plan_names[o->n_plans], p, len);
		o->plan_names[o->n_plans][len] = 0;
		if (tkv_kv_layer_plan_parse(&o->plans[o->n_plans], o->plan_names[o->n_plans], &err))
			return cli_usage_error(a, "--layer-plans: %s", err.msg);
		o->n_plans++;
		p = end ? end + 1 : p + len;
	}
	if (o->n_plans == 0)
		return cli_usage_error(a, "--layer-plans: no plan given");
	return 0;
}

static int add_file(struct cli_args *a, struct eval_opts *o, const char *path)
{
	if (o->n_files == EVAL_MAX_FILES)
		return cli_usage_error(a, "at most %d text files", EVAL_MAX_FILES);
	o->files[o->n_files++] = path;
	return 0;
}

static const struct cli_opt eval_table[] = {
	CLI_HELP_OPT,
	{ "-m", "--model", CLI_OPT_STR, offsetof(struct eval_opts, model), 0, 0 },
	{ NULL, "--prefill", CLI_OPT_LONG, offsetof(struct eval_opts, prefill), 1, 1L << 22 },
	{ NULL, "--gen", CLI_OPT_LONG, offsetof(struct eval_opts, n_gen), 0, 1L << 22 },
	{ NULL, "--copy-test", CLI_OPT_FLAG, offsetof(struct eval_opts, copy_test), 0, 0 },
	{ NULL, "--mem", CLI_OPT_FLAG, offsetof(struct eval_opts, mem), 0, 0 },
	{ NULL, "--json", CLI_OPT_STR, offsetof(struct eval_opts, json), 0, 0 },
	{ NULL, "--plot", CLI_OPT_STR, offsetof(struct eval_opts, plot), 0, 0 },
};

/* The options the table cannot hold (lists, files), then the engine's and
 * the cache's; anything not an option is a text file. 0 or CLI_USAGE. */
static int eval_option(struct cli_args *a, void *ctx)
{
	struct eval_opts *o = ctx;
	const char *s = a->argv[a->i], *v = NULL;
	int handled, rc;

	if ((rc = cli_compare_option(a, o->policies, &o->n_pol, o->budgets, EVAL_MAX_BUDGETS, &o->n_bud, &handled)) ||
	    handled)
		return rc;
	if (!strcmp(s, "-f") || !strcmp(s, "--file"))
		return (v = cli_value(a, s)) ? add_file(a, o, v) : CLI_USAGE;
	if (!strcmp(s, "--layer-plans"))
		return (v = cli_value(a, s)) ? parse_plans(a, v, o) : CLI_USAGE;
	if (!strcmp(s, "--shares"))
		return (v = cli_value(a, s)) ? parse_shares(a, v, o) : CLI_USAGE;
	if (!strcmp(s, "--copy-offset")) {
		o->copy_test = 1;
		return cli_int(a, s, 0, 1L << 22, &o->copy_offset);
	}
	if (s[0] == '-' && s[1])
		return cli_engine_or_unknown(a, &o->ep, &o->kv_stats);
	return add_file(a, o, s);
}

/* 0, CLI_HELP or CLI_USAGE (after a message). */
static int parse(int argc, char **argv, struct eval_opts *o)
{
	struct cli_args a = { argc, argv, 1, "eval" };
	int rc;

	memset(o, 0, sizeof *o);
	o->prefill = 64;
	o->n_gen = 64;
	o->ep = tkv_engine_default_params();
	for (int i = 0; i < TKV_POLICY_COUNT; i++)
		o->policies[o->n_pol++] = (enum tkv_policy)i;
	o->budgets[o->n_bud++] = 1.0;
	o->budgets[o->n_bud++] = 0.35;
	o->budgets[o->n_bud++] = 0.125;
	o->budgets[o->n_bud++] = 0.0625;
	if ((rc = cli_parse_options(&a, CLI_TABLE(eval_table), o, eval_option)))
		return rc;
	if (o->n_files == 0)
		return cli_usage_error(&a, "no text: give -f FILE");
	return cli_kv_check(&a, &o->ep);
}

/* ---- runs --------------------------------------------------------------------- */

struct eval_text {
	const char *path;
	int32_t *ids;   /* (n) BOS + the text's tokens, cut to the context */
	size_t n;
	size_t start;   /* 1 when ids[0] is BOS, else 0 */
};

struct eval_ctx {
	const struct eval_opts *o;
	struct tkv_model *m;
	struct evr_ctx r;    /* the runs (src/eval/run.c): scratch logits, uncounted memory */
	size_t n_vocab;
	uint32_t n_ctx;
};

/* One line of the table: a policy at a budget, summed over texts. */
struct eval_row {
	enum tkv_policy policy;
	double budget;            /* share of the full cache; 1 = no cap */
	bool mem;                 /* the budget limits the whole pool (--kv-mem), not K+V per sequence */
	size_t plan;              /* index of its layer plan in eval_opts */
	size_t share;             /* index of its sharing setting in eval_opts */
	char plan_chosen[EVAL_PLAN_NAME]; /* the plan applied on the last text (auto: as chosen) */
	double alloc_end, used_end;      /* sums over texts of page bytes and their filled share at the end */
	double kv_end;                   /* ... and of the K+V bytes then */
	uint64_t compact_slots, compact_ns;
	struct evm_acc acc;       /* teacher-forced positions against the reference */
	double kv_peak, kv_full;  /* sums over texts (bytes) */
	double kv_mean;           /* sum over texts of the K+V held on the whole run (evr_pass) */
	double alloc_peak;        /* sum over texts of the peak page bytes */
	double tier[3];           /* sums over texts of K+V bytes per tier at the end */
	double shared;            /* ... and of cross-layer shared slots */
	uint64_t evicted, demoted, merged, pages_read, pages_skipped;
	size_t n_texts;
	double first_div, bleu, rouge;  /* sums over generations */
	size_t n_gen;
	struct evm_acc copy;      /* the second passage of the copy test */
	double seconds;
	int failed;
};

/* A budget as a share of the full f16 cache of n tokens (the sliding-window
 * layers at their window). */
static size_t budget_bytes(const struct eval_ctx *x, double frac, size_t n_tokens)
{
	double b;

	if (frac >= 1.0)
		return 0;
	b = frac * (double)tkv_model_kv_bytes(x->m, n_tokens);
	return b < 1.0 ? 1 : (size_t)b;
}

/* A row's engine: its budget as a per-sequence K+V cap, or (--mem) as the
 * whole pool's --kv-mem (pages, positions, scores and headers included) with
 * the governor holding it and no per-sequence cap. */
static struct tkv_engine_params row_params(const struct eval_opts *o, const struct eval_row *r, size_t budget)
{
	struct tkv_engine_params ep = o->ep;

	ep.kv.policy = r->policy;
	ep.kv.seq_budget = r->mem ? 0 : budget;
	if (r->mem && budget)
		ep.kv_mem = budget;
	ep.layer_plan = o->plans[r->plan];
	ep.kv.share_cos = o->share_cos[r->share];
	ep.kv.share_from = o->share_from[r->share];
	return ep;
}

/* The reference: the full cache at f16 with no pool limit, whatever the base
 * params say, so it never evicts or fails for memory. */
static struct tkv_engine_params ref_params(const struct eval_opts *o)
{
	struct tkv_engine_params ep = o->ep;

	ep.kv.policy = TKV_POLICY_FULL;
	ep.kv.seq_budget = 0;
	ep.kv_type = TKV_KV_F16;
	ep.kv_mem = 0;
	ep.layer_plan.mode = TKV_PLAN_UNIFORM;
	ep.kv.share_cos = 0.0f;
	return ep;
}

static void row_fail(struct eval_row *r, const char *what, const char *path, int st, const struct tkv_error *err)
{
	fprintf(stderr, "tierkv eval: %s at budget %g, %s on %s: %s\n", tkv_policy_name(r->policy), r->budget, what,
		path, err->msg[0] ? err->msg : tkv_status_str(st));
	r->failed = 1;
}

/* Everything for one text: the reference, then every row. */
static int eval_text(struct eval_ctx *x, const struct eval_text *t, struct eval_row *rows, size_t n_rows,
		     double *ref_seconds)
{
	const struct eval_opts *o = x->o;
	struct tkv_engine_params rp = ref_params(o);
	struct evr_ref ref;
	struct tkv_error err = { 0 };
	enum evr_stage stage;
	size_t n_prefix = t->n < EVAL_GEN_PREFIX ? t->n : EVAL_GEN_PREFIX, n_gen = 0;
	double t0 = cli_now(), full_bytes;
	int st, rc = CLI_ERR;

	if (o->n_gen > 0) {
		n_gen = (size_t)o->n_gen;
		if (n_prefix + n_gen > x->n_ctx)
			n_gen = x->n_ctx - n_prefix;
	}
	if ((st = evr_ref_run(&x->r, &rp, t->ids, t->n, 0, 0, 0, n_prefix, n_gen, &ref, &stage, &err))) {
		if (stage == EVR_STAGE_ALLOC)
			fprintf(stderr, "tierkv eval: out of memory for the reference logits of %s (%zu x %zu floats)\n",
				t->path, t->n - 1, x->n_vocab);
		else
			fprintf(stderr, "tierkv eval: the full-cache reference failed on %s: %s\n", t->path,
				err.msg[0] ? err.msg : tkv_status_str(st));
		return CLI_ERR;
	}
	full_bytes = (double)ref.end.kv_bytes;
	if (ref.end.kv_bytes != tkv_model_kv_bytes(x->m, t->n))
		fprintf(stderr, "tierkv eval: note: the full cache holds %zu K+V bytes for %zu tokens, "
			"expected %zu\n", ref.end.kv_bytes, t->n, tkv_model_kv_bytes(x->m, t->n));
	*ref_seconds += cli_now() - t0;

	for (size_t r = 0; r < n_rows; r++) {
		struct eval_row *row = &rows[r];
		struct tkv_engine_params ep = row_params(o, row, budget_bytes(x, row->budget, t->n));
		struct evr_row q;

		t0 = cli_now();
		st = evr_row_run(&x->r, &ep, &ref, t->ids, t->n, &q, &stage, &err);
		if (st && stage == EVR_STAGE_PASS) {
			row_fail(row, "teacher-forced", t->path, st, &err);
			continue;
		}
		if (o->kv_stats) {
			fprintf(stderr, "tierkv eval: %s at budget %g, layer plan %s, on %s:\n", tkv_policy_name(row->policy),
				row->budget, o->plan_names[row->plan],
				t->path);
			cli_print_kv_stats(stderr, &q.end, tkv_model_kv_bytes(x->m, t->n));
			cli_print_layer_plan(stderr, &q.plan);
		}
		tkv_kv_layer_plan_str(&q.plan, row->plan_chosen, sizeof row->plan_chosen);
		row->alloc_end += (double)q.end.allocated;
		row->used_end += (double)q.end.used;
		row->kv_end += (double)q.end.kv_bytes;
		row->compact_slots += q.end.compact_slots;
		row->compact_ns += q.end.compact_ns;
		evm_acc_merge(&row->acc, &q.acc);
		row->kv_peak += (double)q.kv_peak;
		row->kv_mean += q.kv_mean;
		row->kv_full += full_bytes;
		row->alloc_peak += (double)q.alloc_peak;
		for (int k = 0; k < 3; k++)
			row->tier[k] += (double)q.end.tier_bytes[k];
		row->shared += (double)q.end.shared_bytes;
		row->evicted += q.end.evicted;
		row->demoted += q.end.demoted;
		row->merged += q.end.merged;
		row->pages_read += q.end.pages_read;
		row->pages_skipped += q.end.pages_skipped;
		row->n_texts++;
		if (st && stage == EVR_STAGE_GEN) {
			row_fail(row, "generation", t->path, st, &err);
		} else if (st) {
			fprintf(stderr, "tierkv eval: out of memory\n");
			goto out;
		} else if (q.gen_done) {
			row->first_div += (double)q.first_div;
			row->bleu += q.bleu;
			row->rouge += q.rouge;
			row->n_gen++;
		}
		row->seconds += cli_now() - t0;
	}
	rc = CLI_OK;
out:
	evr_ref_free(&x->r, &ref);
	return rc;
}

/* Builds the copy sequence: BOS (if the texts have one), A (from `off` tokens
 * into the first text), filler from the other texts (then from the first text
 * after A, over and over), A again. *a2 gets the index of the second A and
 * *a_len its length. NULL when the first text or the context is too short, or
 * memory is. */
static int32_t *copy_sequence(const struct eval_ctx *x, const struct eval_text *t, size_t n_texts, size_t off,
			      size_t *n_out, size_t *a2, size_t *a_len)
{
	size_t len = (size_t)(EVAL_COPY_FILL * x->n_ctx), b = t[0].start, la = EVAL_COPY_LEN, fill_end, k;
	const int32_t *a;
	int32_t *s;

	if (t[0].n < b + off + 8 || len < b + 3 * 8)
		return NULL;
	a = t[0].ids + b + off;
	if (la > t[0].n - b - off)
		la = t[0].n - b - off;
	if (la > (len - b) / 3)
		la = (len - b) / 3;
	fill_end = len - la;
	s = malloc(len * sizeof *s);
	if (!s)
		return NULL;
	memcpy(s, t[0].ids, b * sizeof *s);
	memcpy(s + b, a, la * sizeof *s);
	k = b + la;
	for (size_t i = 1; i < n_texts && k < fill_end; i++) {
		size_t take = t[i].n - t[i].start;

		if (take > fill_end - k)
			take = fill_end - k;
		memcpy(s + k, t[i].ids + t[i].start, take * sizeof *s);
		k += take;
	}
	while (k < fill_end) {
		const int32_t *src = a + la;
		size_t take = (size_t)(t[0].ids + t[0].n - src);

		if (take == 0) { /* A runs to the end of the first text: repeat it */
			src = a;
			take = la;
		}
		if (take > fill_end - k)
			take = fill_end - k;
		memcpy(s + k, src, take * sizeof *s);
		k += take;
	}
	*a2 = k;
	memcpy(s + k, a, la * sizeof *s);
	*n_out = k + la;
	*a_len = la;
	return s;
}

static int eval_copy(struct eval_ctx *x, const struct eval_text *texts, size_t n_texts, struct eval_row *rows,
		     size_t n_rows, double *ref_seconds)
{
	const struct eval_opts *o = x->o;
	struct tkv_engine_params rp = ref_params(o);
	struct evr_ref ref;
	struct tkv_error err = { 0 };
	enum evr_stage stage;
	size_t n, a2, la;
	int32_t *ids = copy_sequence(x, texts, n_texts, (size_t)o->copy_offset, &n, &a2, &la);
	double t0 = cli_now();
	int st;

	if (!ids) {
		fprintf(stderr, "tierkv eval: copy test skipped: the first text (after --copy-offset) or the context "
			"is too short\n");
		return CLI_OK;
	}
	/* scored: the second A's tokens after its first (the first cannot be
	 * told from the filler); the first A's alike, for the note below */
	if ((st = evr_ref_run(&x->r, &rp, ids, n, a2, texts[0].start, texts[0].start + la - 1, 0, 0, &ref, &stage,
			      &err))) {
		if (stage == EVR_STAGE_ALLOC)
			fprintf(stderr, "tierkv eval: out of memory for the copy test\n");
		else
			fprintf(stderr, "tierkv eval: the full-cache copy test failed: %s\n",
				err.msg[0] ? err.msg : tkv_status_str(st));
		free(ids);
		return CLI_ERR;
	}
	*ref_seconds += cli_now() - t0;
	for (size_t r = 0; r < n_rows; r++) {
		struct eval_row *row = &rows[r];
		struct tkv_engine_params ep = row_params(o, row, budget_bytes(x, row->budget, n));
		struct evr_row q;

		t0 = cli_now();
		if ((st = evr_row_run(&x->r, &ep, &ref, ids, n, &q, &stage, &err)))
			row_fail(row, "copy test", "the copy sequence", st, &err);
		else
			row->copy = q.acc;
		row->seconds += cli_now() - t0;
	}
	if (rows[0].copy.n)
		fprintf(stderr, "tierkv eval: copy test: %zu tokens, A = %zu tokens at %zu and %zu; full-cache NLL "
			"%.3f on the first A, %.3f on the second\n", n, la, texts[0].start, a2,
			ref.n_nll ? ref.nll / (double)ref.n_nll : NAN, rows[0].copy.nll_ref / (double)rows[0].copy.n);
	evr_ref_free(&x->r, &ref);
	free(ids);
	return CLI_OK;
}

/* ---- output --------------------------------------------------------------------- */

/* Values of a row, NaN where not measured. */
struct row_vals {
	double kv_peak, ratio, kv_mean, ratio_mean, ppl, ppl_full, dppl, kl, top1, first_div, bleu, rouge, copy_nll, copy_full;
	double alloc_peak, frag;  /* mean peak page bytes; fragmentation at the ends of the texts (%) */
	double tier[3], shared;
};

static struct row_vals row_values(const struct eval_row *r)
{
	struct row_vals v;
	double nt = (double)r->n_texts;

	v.kv_peak = r->n_texts ? r->kv_peak / nt : NAN;
	v.alloc_peak = r->n_texts ? r->alloc_peak / nt : NAN;
	v.frag = r->alloc_end > 0 ? 100.0 * (r->alloc_end - r->used_end) / r->alloc_end : NAN;
	v.ratio = r->kv_full > 0 ? r->kv_peak / r->kv_full : NAN;
	v.kv_mean = r->n_texts ? r->kv_mean / nt : NAN;
	v.ratio_mean = r->kv_full > 0 ? r->kv_mean / r->kv_full : NAN;
	v.ppl = evm_ppl(r->acc.nll, r->acc.n);
	v.ppl_full = evm_ppl(r->acc.nll_ref, r->acc.n);
	v.dppl = 100.0 * (v.ppl / v.ppl_full - 1.0);
	v.kl = r->acc.n ? r->acc.kl / (double)r->acc.n : NAN;
	v.top1 = r->acc.n ? 100.0 * (double)r->acc.top1 / (double)r->acc.n : NAN;
	v.first_div = r->n_gen ? r->first_div / (double)r->n_gen : NAN;
	v.bleu = r->n_gen ? r->bleu / (double)r->n_gen : NAN;
	v.rouge = r->n_gen ? r->rouge / (double)r->n_gen : NAN;
	v.copy_nll = r->copy.n ? r->copy.nll / (double)r->copy.n : NAN;
	v.copy_full = r->copy.n ? r->copy.nll_ref / (double)r->copy.n : NAN;
	for (int k = 0; k < 3; k++)
		v.tier[k] = r->n_texts ? r->tier[k] / nt : NAN;
	v.shared = r->n_texts ? r->shared / nt : NAN;
	return v;
}

/* "%.*f" of x, or "-" when it was not measured. */
static const char *num(char *buf, size_t cap, const char *fmt, double x)
{
	if (isnan(x))
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, fmt, x);
	return buf;
}

static const char *bytes(char *buf, size_t cap, double x)
{
	return isnan(x) ? strcpy(buf, "-") : cli_fmt_bytes(buf, cap, x);
}

static void print_table(FILE *f, const struct eval_opts *o, const struct eval_row *rows, size_t n_rows, int copy)
{
	bool plans = o->n_plans > 1, shares = o->n_shares > 1;

	fprintf(f, "| policy | budget |%s%s%s KV peak | ratio |%s ppl | Δppl %% | KL | top-1 %% | first-div | BLEU | ROUGE-L |%s "
		"hot | warm | cold |%s evicted | demoted | merged | skipped | pages peak | frag %% |\n", o->mem ? " limit |" : "",
		plans ? " plan |" : "",
		shares ? " share |" : "", o->mem ? " KV mean | ratio mean |" : "", copy ? " copy NLL |" : "", shares ? " shared |" : "");
	fprintf(f, "|---|---:|%s%s%s---:|---:|%s---:|---:|---:|---:|---:|---:|---:|%s---:|---:|---:|%s---:|---:|---:|---:|---:|---:|\n",
		o->mem ? "---|" : "", plans ? "---|" : "", shares ? "---|" : "", o->mem ? "---:|---:|" : "", copy ? "---:|" : "", shares ? "---:|" : "");
	for (size_t i = 0; i < n_rows; i++) {
		const struct eval_row *r = &rows[i];
		struct row_vals v = row_values(r);
		char b[20][32];

		fprintf(f, "| %s%s | %s |", tkv_policy_name(r->policy), r->failed ? " (failed)" : "",
			num(b[0], 32, "%g", r->budget));
		if (o->mem)
			fprintf(f, " %s |", r->budget >= 1.0 ? "-" : r->mem ? "pool" : "cap");
		if (plans)
			fprintf(f, " %s |", o->plan_names[r->plan]);
		if (shares)
			fprintf(f, " %s |", o->share_names[r->share]);
		fprintf(f, " %s | %s |", bytes(b[1], 32, v.kv_peak), num(b[2], 32, "%.3f", v.ratio));
		if (o->mem)
			fprintf(f, " %s | %s |", bytes(b[18], 32, v.kv_mean), num(b[19], 32, "%.3f", v.ratio_mean));
		fprintf(f, " %s | %s | %s | %s | %s | %s | %s |", num(b[3], 32, "%.4f", v.ppl), num(b[4], 32, "%+.2f", v.dppl),
			num(b[5], 32, "%.5f", v.kl), num(b[6], 32, "%.2f", v.top1), num(b[7], 32, "%.1f", v.first_div),
			num(b[8], 32, "%.3f", v.bleu), num(b[9], 32, "%.3f", v.rouge));
		if (copy)
			fprintf(f, " %s |", num(b[10], 32, "%.3f", v.copy_nll));
		fprintf(f, " %s | %s | %s |", bytes(b[11], 32, v.tier[0]), bytes(b[12], 32, v.tier[1]),
			bytes(b[13], 32, v.tier[2]));
		if (shares)
			fprintf(f, " %s |", bytes(b[16], 32, v.shared));
		fprintf(f, " %llu | %llu | %llu | %llu | %s | %s |\n", (unsigned long long)r->evicted,
			(unsigned long long)r->demoted, (unsigned long long)r->merged,
			(unsigned long long)r->pages_skipped, bytes(b[14], 32, v.alloc_peak),
			num(b[15], 32, "%.1f", v.frag));
	}
}

/* A JSON number, or null for what was not measured or is not finite. */
static void jnum(FILE *f, const char *key, double x)
{
	if (isfinite(x))
		fprintf(f, ",\"%s\":%.9g", key, x);
	else
		fprintf(f, ",\"%s\":null", key);
}

static int write_json(const char *path, const struct eval_opts *o, const struct eval_row *rows, size_t n_rows)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, "tierkv eval: cannot create %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < n_rows; i++) {
		const struct eval_row *r = &rows[i];
		struct row_vals v = row_values(r);

		fprintf(f, "{\"policy\":\"%s\"", tkv_policy_name(r->policy));
		jnum(f, "budget", r->budget);
		fprintf(f, ",\"limit\":\"%s\"", r->budget >= 1.0 ? "none" : r->mem ? "pool" : "cap");
		fprintf(f, ",\"layer_plan\":\"%s\",\"plan_applied\":\"%s\",\"share\":\"%s\"", o->plan_names[r->plan],
			r->plan_chosen, o->share_names[r->share]);
		jnum(f, "failed", r->failed);
		jnum(f, "texts", (double)r->n_texts);
		jnum(f, "positions", (double)r->acc.n);
		jnum(f, "kv_peak_bytes", v.kv_peak);
		jnum(f, "kv_full_bytes", r->n_texts ? r->kv_full / (double)r->n_texts : NAN);
		jnum(f, "alloc_peak_bytes", r->n_texts ? r->alloc_peak / (double)r->n_texts : NAN);
		jnum(f, "ratio", v.ratio);
		jnum(f, "kv_mean_bytes", v.kv_mean);
		jnum(f, "ratio_mean", v.ratio_mean);
		jnum(f, "ppl", v.ppl);
		jnum(f, "ppl_full", v.ppl_full);
		jnum(f, "dppl_pct", v.dppl);
		jnum(f, "kl", v.kl);
		jnum(f, "top1_pct", v.top1);
		jnum(f, "gen_texts", (double)r->n_gen);
		jnum(f, "first_div", v.first_div);
		jnum(f, "bleu", v.bleu);
		jnum(f, "rouge_l", v.rouge);
		jnum(f, "copy_nll", v.copy_nll);
		jnum(f, "copy_nll_full", v.copy_full);
		jnum(f, "hot_bytes", v.tier[0]);
		jnum(f, "warm_bytes", v.tier[1]);
		jnum(f, "cold_bytes", v.tier[2]);
		jnum(f, "evicted", (double)r->evicted);
		jnum(f, "demoted", (double)r->demoted);
		jnum(f, "merged", (double)r->merged);
		jnum(f, "pages_read", (double)r->pages_read);
		jnum(f, "pages_skipped", (double)r->pages_skipped);
		jnum(f, "alloc_end_bytes", r->n_texts ? r->alloc_end / (double)r->n_texts : NAN);
		jnum(f, "frag_pct", v.frag);
		jnum(f, "pool_kv_ratio", r->kv_end > 0 ? r->alloc_end / r->kv_end : NAN);
		jnum(f, "compact_slots", (double)r->compact_slots);
		jnum(f, "compact_ms", (double)r->compact_ns / 1e6);
		jnum(f, "seconds", r->seconds);
		fprintf(f, "}\n");
	}
	if (fclose(f)) {
		fprintf(stderr, "tierkv eval: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* ---- plot --------------------------------------------------------------------- */

/* Delta perplexity against the KV ratio, one line per policy (first plan only). */
static int write_plot(const char *path, const struct eval_row *rows, size_t n_rows)
{
	static const struct cli_plot spec = {
		.cmd = "eval",
		.title = "tierkv eval: perplexity against KV bytes",
		.y_label = "Δ perplexity vs full (%, symmetric log)",
		.y_tip = "%+.2f%%",
		.axis = CLI_PLOT_SYMLOG_PCT,
	};
	struct cli_plot_point *pts = calloc(n_rows ? n_rows : 1, sizeof *pts);
	size_t n = 0;
	int rc;

	if (!pts) {
		fprintf(stderr, "tierkv eval: out of memory\n");
		return -1;
	}
	for (size_t i = 0; i < n_rows; i++) {
		struct row_vals v = row_values(&rows[i]);

		if (rows[i].failed || rows[i].plan != 0)
			continue;
		pts[n++] = (struct cli_plot_point){ rows[i].policy, rows[i].budget, v.ratio, v.dppl };
	}
	rc = cli_plot_write(path, &spec, pts, n);
	free(pts);
	return rc;
}

/* ---- main --------------------------------------------------------------------- */

static int load_text(struct eval_ctx *x, const char *path, struct eval_text *t)
{
	const struct tkv_vocab *voc = tkv_model_vocab(x->m);
	size_t len, n = 0;
	char *text = cli_read_file(path, &len);
	int st;

	memset(t, 0, sizeof *t);
	t->path = path;
	if (!text)
		return CLI_ERR;
	tkv_vocab_tokenize(voc, text, len, tkv_vocab_add_bos(voc), false, NULL, 0, &n);
	if (n < 2) {
		fprintf(stderr, "tierkv eval: %s has no tokens to predict\n", path);
		free(text);
		return CLI_ERR;
	}
	t->ids = malloc(n * sizeof *t->ids);
	if (!t->ids || (st = tkv_vocab_tokenize(voc, text, len, tkv_vocab_add_bos(voc), false, t->ids, n, &n))) {
		fprintf(stderr, "tierkv eval: cannot tokenize %s\n", path);
		free(text);
		return CLI_ERR;
	}
	free(text);
	t->n = n < x->n_ctx ? n : x->n_ctx;
	t->start = tkv_vocab_add_bos(voc) && tkv_vocab_bos(voc) >= 0 && t->ids[0] == tkv_vocab_bos(voc);
	if (n > x->n_ctx)
		fprintf(stderr, "tierkv eval: %s: %zu tokens, cut to the context of %u\n", path, n, x->n_ctx);
	return CLI_OK;
}

/* The layer plans and sharing settings compared (the base --kv-layer-plan
 * and --kv-share when none was listed), each checked against the model.
 * CLI_OK, or CLI_USAGE after a message. */
static int eval_settings(struct eval_opts *o, const struct tkv_model_info *info)
{
	int rc;

	if (o->n_plans == 0) {
		o->plans[0] = o->ep.layer_plan;
		tkv_kv_layer_plan_str(&o->plans[0], o->plan_names[0], sizeof o->plan_names[0]);
		o->n_plans = 1;
	}
	for (size_t i = 0; i < o->n_plans; i++) {
		struct tkv_engine_params pe = o->ep;

		pe.layer_plan = o->plans[i];
		if ((rc = cli_check_layer_plan("eval", &pe, info)))
			return rc;
	}
	if (o->n_shares == 0) {
		o->share_cos[0] = o->ep.kv.share_cos;
		o->share_from[0] = o->ep.kv.share_from;
		snprintf(o->share_names[0], sizeof o->share_names[0], "%g:%u", o->ep.kv.share_cos, o->ep.kv.share_from);
		o->n_shares = 1;
	}
	for (size_t i = 0; i < o->n_shares; i++)
		if (o->share_cos[i] > 0.0f && o->share_from[i] >= info->n_layer) {
			fprintf(stderr, "tierkv eval: --shares %s: the model has %u layers (0-%u)\n", o->share_names[i],
				info->n_layer, info->n_layer - 1);
			return CLI_USAGE;
		}
	return CLI_OK;
}

/* The rows: full once per sharing setting (it never evicts, so a cap changes
 * nothing), then every policy x budget x plan x sharing (x --mem). Returns
 * their number (rows holds n_shares x (1 + 2 x policies x budgets x plans)). */
static size_t eval_make_rows(const struct eval_opts *o, struct eval_row *rows)
{
	size_t n = 0;

	for (size_t c = 0; c < o->n_shares; c++) {
		rows[n].policy = TKV_POLICY_FULL;
		rows[n].share = c;
		rows[n++].budget = 1.0;
	}
	for (size_t p = 0; p < o->n_pol; p++)
		for (size_t b = 0; b < o->n_bud && o->policies[p] != TKV_POLICY_FULL; b++)
			for (size_t k = 0; k < o->n_plans; k++)
				for (size_t c = 0; c < o->n_shares; c++)
					for (int mem = 0; mem <= (o->mem && o->budgets[b] < 1.0); mem++) {
						rows[n].policy = o->policies[p];
						rows[n].plan = k;
						rows[n].share = c;
						rows[n].mem = mem;
						rows[n++].budget = o->budgets[b];
					}
	return n;
}

/* Every text through every row, then the copy test. CLI_OK or CLI_ERR. */
static int eval_run(struct eval_ctx *x, const struct eval_text *texts, struct eval_row *rows, size_t n_rows,
		    double *ref_seconds)
{
	const struct eval_opts *o = x->o;

	for (size_t i = 0; i < o->n_files; i++) {
		double t0 = cli_now();

		if (eval_text(x, &texts[i], rows, n_rows, ref_seconds))
			return CLI_ERR;
		fprintf(stderr, "tierkv eval: [%zu/%zu] %s: %zu tokens, %.1f s\n", i + 1, o->n_files, texts[i].path,
			texts[i].n, cli_now() - t0);
	}
	if (o->copy_test && eval_copy(x, texts, o->n_files, rows, n_rows, ref_seconds))
		return CLI_ERR;
	return CLI_OK;
}

/* The table on stdout, --json, --plot and the time line on stderr. CLI_OK
 * unless a write failed or a row failed (CLI_ERR). */
static int eval_report(const struct eval_opts *o, const struct eval_row *rows, size_t n_rows, double t_start,
		       double ref_seconds)
{
	double total, slowest = 0.0;
	size_t is = 0;

	print_table(stdout, o, rows, n_rows, o->copy_test);
	if (fflush(stdout)) {
		fprintf(stderr, "tierkv eval: cannot write to standard output\n");
		return CLI_ERR;
	}
	if (o->json && write_json(o->json, o, rows, n_rows))
		return CLI_ERR;
	if (o->plot && write_plot(o->plot, rows, n_rows))
		return CLI_ERR;
	total = cli_now() - t_start;
	for (size_t r = 0; r < n_rows; r++)
		if (rows[r].seconds > slowest) {
			slowest = rows[r].seconds;
			is = r;
		}
	fprintf(stderr, "tierkv eval: %.1f s in all: references %.1f s, %zu policy rows %.1f s "
		"(slowest: %s at %g, %.1f s; full %.1f s)\n", total, ref_seconds, n_rows,
		total - ref_seconds, tkv_policy_name(rows[is].policy), rows[is].budget, slowest, rows[0].seconds);
	for (size_t r = 0; r < n_rows; r++)
		if (rows[r].failed)
			return CLI_ERR;
	return CLI_OK;
}

int cli_eval(int argc, char **argv)
{
	struct eval_opts o;
	struct eval_ctx x = { 0 };
	struct tkv_model_info info;
	struct eval_text *texts = NULL;
	struct eval_row *rows = NULL;
	size_t n_rows = 0, n_tok = 0;
	double t_start = cli_now(), ref_seconds = 0.0;
	int rc, st;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--retrieval"))
			return cli_eval_retrieval(argc, argv);
		else if (!strcmp(argv[i], "--kl-base"))
			return cli_eval_klbase(argc, argv);
	if ((st = parse(argc, argv, &o)))
		return cli_parse_end(st, cli_eval_help);
	if ((rc = cli_model_path("eval", &o.model)) || (rc = cli_load_model("eval", o.model, NULL, &x.m, &info)) ||
	    (rc = eval_settings(&o, &info)))
		goto out;
	rc = CLI_ERR;
	x.o = &o;
	x.n_vocab = info.n_vocab;
	x.n_ctx = o.ep.n_ctx ? o.ep.n_ctx : info.n_ctx_train;
	o.ep.n_ctx = x.n_ctx;
	st = evr_init(&x.r, x.m, (size_t)o.prefill, x.n_ctx, NULL);
	texts = calloc(o.n_files, sizeof *texts);
	rows = calloc(o.n_shares * (1 + 2 * o.n_pol * o.n_bud * o.n_plans), sizeof *rows);
	if (st || !texts || !rows) {
		fprintf(stderr, "tierkv eval: out of memory\n");
		goto out;
	}
	for (size_t i = 0; i < o.n_files; i++) {
		if (load_text(&x, o.files[i], &texts[i]))
			goto out;
		n_tok += texts[i].n;
	}
	n_rows = eval_make_rows(&o, rows);
	fprintf(stderr, "tierkv eval: %s, %zu texts (%zu tokens), context %u, %zu runs per text, "
		"prefill %ld, gen %ld%s\n", o.model, o.n_files, n_tok, x.n_ctx, n_rows, o.prefill, o.n_gen,
		o.copy_test ? ", copy test" : "");
	if (eval_run(&x, texts, rows, n_rows, &ref_seconds) == CLI_OK)
		rc = eval_report(&o, rows, n_rows, t_start, ref_seconds);
out:
	if (texts)
		for (size_t i = 0; i < o.n_files; i++)
			free(texts[i].ids);
	free(texts);
	free(rows);
	evr_free(&x.r);
	tkv_model_free(x.m);
	return rc;
}
