/* eval_retrieval.c - `tierkv eval --retrieval TASKS`: retrieval accuracy of
 * every cache policy at every budget, on prompts made from the -f files.
 *
 * The prompts (src/eval/retrieval.c) are made once, from the seed: for every
 * task x length x depth, --samples of them. Each row (the full cache first,
 * then policy x budget) runs every prompt on a fresh engine the way serving
 * runs it (src/eval/run.c, evr_ask_run): BOS, header and haystack in prefill
 * chunks of -b tokens under the policy's rounds and a per-sequence K+V cap of
 * budget x the full f16 bytes of the whole prompt - the cache is compressed
 * before the question exists - then the question through the same cache,
 * then the answer, greedy, until a newline, an end-of-generation token or the
 * task's answer length. The answer is scored by the task's scorer.
 *
 * stdout gets a markdown table (per row: mean KV peak and its ratio to the
 * full f16 cache, accuracy per task and their mean), --json FILE one object
 * per row (per-task, per-length and per-depth counts), --plot FILE an SVG of
 * mean accuracy against the KV ratio, --grid POLICY the accuracy of that
 * policy's rows by depth and length. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/plot.h"
#include "eval/retrieval.h"
#include "eval/run.h"

#define RQ_MAX_FILES 256
#define RQ_MAX_BUDGETS 16
#define RQ_MAX_LENS 16
#define RQ_MAX_DEPTHS 32
#define RQ_MIN_LEN 32
#define RQ_DEFAULT_SAMPLES 2

struct rq_opts {
	const char *model, *json, *plot;
	const char *files[RQ_MAX_FILES];
	size_t n_files;
	bool tasks[RETR_TASK_COUNT];
	enum tkv_policy policies[TKV_POLICY_COUNT];
	size_t n_pol;
	double budgets[RQ_MAX_BUDGETS];
	size_t n_bud;
	long lens[RQ_MAX_LENS];
	size_t n_lens;
	double depths[RQ_MAX_DEPTHS];
	size_t n_depths;
	long samples;
	uint64_t seed;
	int grid;             /* policy of --grid, or -1 */
	int verbose, kv_stats;
	int mem;              /* --mem: each budget also as a whole-pool --kv-mem */
	struct tkv_engine_params ep;
};

/* A comma list of task names, or 'all'. */
static int parse_tasks(struct cli_args *a, const char *v, bool *tasks)
{
	const char *p = v;

	if (!strcmp(v, "all")) {
		for (int i = 0; i < RETR_TASK_COUNT; i++)
			tasks[i] = true;
		return 0;
	}
	do {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char name[32];
		int t;

		snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
		if ((t = retr_task_find(name)) < 0 || len >= sizeof name)
			return cli_usage_error(a, "--retrieval: unknown task '%.*s' (passkey, niah, multikey, "
					       "multivalue, vartrack, copy or all)", (int)len, p);
		tasks[t] = true;
		p = end ? end + 1 : p + len;
	} while (*p);
	return 0;
}

/* A comma list of lengths in tokens. */
static int parse_lens(struct cli_args *a, const char *v, struct rq_opts *o)
{
	const char *p = v;

	o->n_lens = 0;
	do {
		char *end;
		long x;

		errno = 0;
		x = strtol(p, &end, 10);
		if (errno || end == p || (*end && *end != ','))
			return cli_usage_error(a, "--ctx-lens: '%s' is not a list of integers", v);
		if (x < RQ_MIN_LEN || x > (1L << 24))
			return cli_usage_error(a, "--ctx-lens: %ld is out of range [%d, %ld]", x, RQ_MIN_LEN, 1L << 24);
		if (o->n_lens == RQ_MAX_LENS)
			return cli_usage_error(a, "--ctx-lens: at most %d lengths", RQ_MAX_LENS);
		o->lens[o->n_lens++] = x;
		p = *end ? end + 1 : end;
	} while (*p);
	return 0;
}

/* The defaults: every policy, budgets 1, 0.35, 1/8, 1/16, five depths. */
static void rq_defaults(struct rq_opts *o)
{
	const double depths[] = { 0, 0.25, 0.5, 0.75, 1 };

	memset(o, 0, sizeof *o);
	o->ep = tkv_engine_default_params();
	o->samples = RQ_DEFAULT_SAMPLES;
	o->seed = 1;
	o->grid = -1;
	for (int i = 0; i < TKV_POLICY_COUNT; i++)
		o->policies[o->n_pol++] = (enum tkv_policy)i;
	o->budgets[o->n_bud++] = 1.0;
	o->budgets[o->n_bud++] = 0.35;
	o->budgets[o->n_bud++] = 0.125;
	o->budgets[o->n_bud++] = 0.0625;
	for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++)
		o->depths[o->n_depths++] = depths[i];
}

/* After the options: a task, a filler, the grid's policy among those run. */
static int rq_check(struct cli_args *a, struct rq_opts *o)
{
	bool any = false;

	for (int i = 0; i < RETR_TASK_COUNT; i++)
		any |= o->tasks[i];
	if (!any)
		return cli_usage_error(a, "--retrieval: no task given");
	if (o->n_files == 0)
		return cli_usage_error(a, "no filler text: give -f FILE");
	if (o->grid > TKV_POLICY_FULL) {
		size_t i = 0;

		while (i < o->n_pol && (int)o->policies[i] != o->grid)
			i++;
		if (i == o->n_pol)
			return cli_usage_error(a, "--grid: %s is not in --policies", tkv_policy_name(o->grid));
	}
	return cli_kv_check(a, &o->ep);
}

static const struct cli_opt rq_table[] = {
	CLI_HELP_OPT,
	{ "-m", "--model", CLI_OPT_STR, offsetof(struct rq_opts, model), 0, 0 },
	{ NULL, "--samples", CLI_OPT_LONG, offsetof(struct rq_opts, samples), 1, 100000 },
	{ NULL, "--seed", CLI_OPT_U64, offsetof(struct rq_opts, seed), 0, 0 },
	{ NULL, "--mem", CLI_OPT_FLAG, offsetof(struct rq_opts, mem), 0, 0 },
	{ "-v", "--verbose", CLI_OPT_FLAG, offsetof(struct rq_opts, verbose), 0, 0 },
	{ NULL, "--json", CLI_OPT_STR, offsetof(struct rq_opts, json), 0, 0 },
	{ NULL, "--plot", CLI_OPT_STR, offsetof(struct rq_opts, plot), 0, 0 },
};

static int add_filler(struct cli_args *a, struct rq_opts *o, const char *path)
{
	if (o->n_files == RQ_MAX_FILES)
		return cli_usage_error(a, "at most %d filler files", RQ_MAX_FILES);
	o->files[o->n_files++] = path;
	return 0;
}

/* The options the table cannot hold (lists, files), the perplexity eval's
 * refused, then the engine's and the cache's; anything not an option is a
 * filler file. 0 or CLI_USAGE. */
static int rq_option(struct cli_args *a, void *ctx)
{
	struct rq_opts *o = ctx;
	const char *s = a->argv[a->i], *v = NULL;
	int handled, rc;

	if ((rc = cli_compare_option(a, o->policies, &o->n_pol, o->budgets, RQ_MAX_BUDGETS, &o->n_bud, &handled)) ||
	    handled)
		return rc;
	if (!strcmp(s, "-f") || !strcmp(s, "--file"))
		return (v = cli_value(a, s)) ? add_filler(a, o, v) : CLI_USAGE;
	if (!strcmp(s, "--retrieval"))
		return (v = cli_value(a, s)) ? parse_tasks(a, v, o->tasks) : CLI_USAGE;
	if (!strcmp(s, "--ctx-lens"))
		return (v = cli_value(a, s)) ? parse_lens(a, v, o) : CLI_USAGE;
	if (!strcmp(s, "--depths"))
		return (v = cli_value(a, s)) ? cli_parse_numbers(a, s, v, 0.0, 1.0, false, o->depths, RQ_MAX_DEPTHS,
								 &o->n_depths)
					     : CLI_USAGE;
	if (!strcmp(s, "--grid")) {
		if (!(v = cli_value(a, s)))
			return CLI_USAGE;
		if ((o->grid = tkv_policy_parse(v)) < 0)
			return cli_usage_error(a, "--grid: unknown policy '%s'", v);
		return 0;
	}
	if (!strcmp(s, "--gen") || !strcmp(s, "--prefill") || !strcmp(s, "--copy-test") ||
	    !strcmp(s, "--copy-offset") || !strcmp(s, "--layer-plans") || !strcmp(s, "--shares"))
		return cli_usage_error(a, "%s is an option of the perplexity eval, not of --retrieval", s);
	if (s[0] == '-' && s[1])
		return cli_engine_or_unknown(a, &o->ep, &o->kv_stats);
	return add_filler(a, o, s);
}

/* 0, CLI_HELP or CLI_USAGE (after a message). */
static int parse(int argc, char **argv, struct rq_opts *o)
{
	struct cli_args a = { argc, argv, 1, "eval" };
	int rc;

	rq_defaults(o);
	if ((rc = cli_parse_options(&a, CLI_TABLE(rq_table), o, rq_option)))
		return rc;
	return rq_check(&a, o);
}

/* ---- runs --------------------------------------------------------------------- */

/* One prompt and where it sits in the grid. */
struct rq_sample {
	struct retr_sample s;
	size_t len_i, depth_i;
};

/* One line of the table: a policy at a budget, over every sample. */
struct rq_row {
	enum tkv_policy policy;
	double budget;
	bool mem;                   /* the budget limits the whole pool (--kv-mem) */
	double kv_peak, kv_full;    /* sums over samples (bytes) */
	size_t n_run;               /* samples that ran */
	size_t n[RETR_TASK_COUNT], correct[RETR_TASK_COUNT];
	size_t tok_match[RETR_TASK_COUNT], tok_total[RETR_TASK_COUNT];
	size_t n_failed;
	double seconds;
};

struct rq_ctx {
	const struct rq_opts *o;
	struct tkv_model *m;
	struct retr_corpus *corpus;
	struct evr_ctx r;
	uint32_t n_ctx;
	struct rq_sample *samples;
	size_t n_samples;
	struct rq_row *rows;
	size_t n_rows;
	unsigned char *result;    /* (n_rows, n_samples): 0 not run, 1 wrong, 2 right */
};

static struct tkv_engine_params row_params(const struct rq_opts *o, const struct rq_row *r, size_t full)
{
	struct tkv_engine_params ep = o->ep;

	if (r->policy == TKV_POLICY_FULL) {
		/* the full cache at f16 with no pool limit, as eval's reference */
		ep.kv.policy = TKV_POLICY_FULL;
		ep.kv.seq_budget = 0;
		ep.kv_type = TKV_KV_F16;
		ep.kv_mem = 0;
		ep.layer_plan.mode = TKV_PLAN_UNIFORM;
		ep.kv.share_cos = 0.0f;
		return ep;
	}
	ep.kv.policy = r->policy;
	ep.kv.seq_budget = 0;
	if (r->budget < 1.0) {
		double b = r->budget * (double)full;

		if (r->mem)
			ep.kv_mem = b < 1.0 ? 1 : (size_t)b;
		else
			ep.kv.seq_budget = b < 1.0 ? 1 : (size_t)b;
	}
	return ep;
}

/* evr_ask's stop test for one sample */
struct rq_done {
	const struct retr_corpus *c;
	const struct retr_sample *s;
};

static bool answer_done(void *ctx, const int32_t *gen, size_t k)
{
	const struct rq_done *d = ctx;

	return retr_answer_done(d->c, d->s, gen, k);
}

/* Runs sample i with row r and books the result. */
static int run_one(struct rq_ctx *x, size_t r, size_t i)
{
	const struct retr_sample *s = &x->samples[i].s;
	struct rq_row *row = &x->rows[r];
	const struct retr_task *task = &retr_tasks[s->task];
	struct tkv_engine_params ep = row_params(x->o, row, tkv_model_kv_bytes(x->m, s->n_ids));
	int32_t gen[RETR_ANSWER_MAX];
	struct rq_done dc = { x->corpus, s };
	struct evr_ask a = { .ids = s->ids, .n = s->n_ids, .n_context = s->n_context, .n_gen = task->n_answer,
			     .done = answer_done, .ctx = &dc, .gen = gen };
	struct tkv_error err = { 0 };
	struct retr_score sc;
	double t0 = cli_now();
	int st;

	st = evr_ask_run(&x->r, &ep, &a, &err);
	row->seconds += cli_now() - t0;
	if (st) {
		if (row->n_failed++ == 0)
			fprintf(stderr, "tierkv eval: %s at budget %g failed on %s (length %zu, depth %g): %s\n",
				tkv_policy_name(row->policy), row->budget, task->name, s->length, s->depth,
				err.msg[0] ? err.msg : tkv_status_str(st));
		return st == TKV_ERR_NOMEM ? CLI_ERR : CLI_OK;
	}
	retr_score(x->corpus, s, gen, a.n_out, &sc);
	row->kv_peak += (double)a.kv_peak;
	row->kv_full += (double)tkv_model_kv_bytes(x->m, a.n_past);
	row->n_run++;
	row->n[s->task]++;
	row->correct[s->task] += sc.correct;
	row->tok_match[s->task] += sc.tok_match;
	row->tok_total[s->task] += sc.tok_total;
	x->result[r * x->n_samples + i] = sc.correct ? 2 : 1;
	if (x->o->kv_stats) {
		fprintf(stderr, "tierkv eval: %s at budget %g on %s (length %zu, depth %g):\n",
			tkv_policy_name(row->policy), row->budget, task->name, s->length, s->depth);
		cli_print_kv_stats(stderr, &a.end, tkv_model_kv_bytes(x->m, a.n_past));
	}
	if (x->o->verbose) {
		char text[512];

		retr_decode(x->corpus, gen, a.n_out, text, sizeof text);
		for (char *p = text; *p; p++)
			if (*p == '\n')
				*p = '|';
		fprintf(stderr, "tierkv eval:   %-14s %-6g %-5s want '%s' got '%s'\n", tkv_policy_name(row->policy),
			row->budget, sc.correct ? "ok" : "WRONG", s->answer, text);
	}
	return CLI_OK;
}

/* ---- output --------------------------------------------------------------------- */

/* Percent correct, NaN when nothing ran. */
static double pct(size_t k, size_t n)
{
	return n ? 100.0 * (double)k / (double)n : NAN;
}

/* The mean of the tasks' accuracies (each task weighs the same). */
static double mean_acc(const struct rq_opts *o, const struct rq_row *r)
{
	double sum = 0.0;
	size_t n = 0;

	for (int t = 0; t < RETR_TASK_COUNT; t++)
		if (o->tasks[t]) {
			sum += pct(r->correct[t], r->n[t]);
			n++;
		}
	return n ? sum / (double)n : NAN;
}

static double row_ratio(const struct rq_row *r)
{
	return r->kv_full > 0 ? r->kv_peak / r->kv_full : NAN;
}

static const char *num(char *buf, size_t cap, const char *fmt, double v)
{
	if (isnan(v))
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, fmt, v);
	return buf;
}

static void print_table(FILE *f, const struct rq_ctx *x)
{
	const struct rq_opts *o = x->o;
	char b[4][32];

	fprintf(f, "| policy | budget |%s KV peak | ratio |", o->mem ? " limit |" : "");
	for (int t = 0; t < RETR_TASK_COUNT; t++)
		if (o->tasks[t])
			fprintf(f, " %s %% |", retr_tasks[t].name);
	fprintf(f, " mean %% | s |\n|---|---:|%s---:|---:|", o->mem ? "---|" : "");
	for (int t = 0; t < RETR_TASK_COUNT; t++)
		if (o->tasks[t])
			fprintf(f, "---:|");
	fprintf(f, "---:|---:|\n");
	for (size_t i = 0; i < x->n_rows; i++) {
		const struct rq_row *r = &x->rows[i];

		fprintf(f, "| %s%s | %g |", tkv_policy_name(r->policy), r->n_failed ? " (failed)" : "", r->budget);
		if (o->mem)
			fprintf(f, " %s |", r->budget >= 1.0 ? "-" : r->mem ? "pool" : "cap");
		fprintf(f, " %s | %s |", r->n_run ? cli_fmt_bytes(b[0], 32, r->kv_peak / (double)r->n_run) : "-",
			num(b[1], 32, "%.3f", row_ratio(r)));
		for (int t = 0; t < RETR_TASK_COUNT; t++)
			if (o->tasks[t])
				fprintf(f, " %s |", num(b[2], 32, "%.1f", pct(r->correct[t], r->n[t])));
		fprintf(f, " %s | %.1f |\n", num(b[3], 32, "%.1f", mean_acc(o, r)), r->seconds);
	}
}

/* Accuracy of row r over the samples that match (len_i, depth_i; SIZE_MAX =
 * any): *k right of *n run. */
static void cell(const struct rq_ctx *x, size_t r, size_t len_i, size_t depth_i, size_t *k, size_t *n)
{
	*k = *n = 0;
	for (size_t i = 0; i < x->n_samples; i++) {
		unsigned char v = x->result[r * x->n_samples + i];

		if (!v || (len_i != SIZE_MAX && x->samples[i].len_i != len_i) ||
		    (depth_i != SIZE_MAX && x->samples[i].depth_i != depth_i))
			continue;
		*n += 1;
		*k += v == 2;
	}
}

/* --grid: per row of the policy, accuracy by depth (rows) and length (columns). */
static void print_grid(FILE *f, const struct rq_ctx *x)
{
	const struct rq_opts *o = x->o;
	char b[32];
	size_t k, n;

	for (size_t r = 0; r < x->n_rows; r++) {
		if ((int)x->rows[r].policy != o->grid)
			continue;
		fprintf(f, "\n%s at budget %g%s: accuracy %% by needle depth and length (all tasks)\n\n| depth |",
			tkv_policy_name(x->rows[r].policy), x->rows[r].budget, x->rows[r].mem ? " (pool)" : "");
		for (size_t l = 0; l < o->n_lens; l++)
			fprintf(f, " %ld |", o->lens[l]);
		fprintf(f, " all |\n|---:|");
		for (size_t l = 0; l <= o->n_lens; l++)
			fprintf(f, "---:|");
		fprintf(f, "\n");
		for (size_t d = 0; d <= o->n_depths; d++) {
			size_t di = d < o->n_depths ? d : SIZE_MAX;

			if (d < o->n_depths)
				fprintf(f, "| %g |", o->depths[d]);
			else
				fprintf(f, "| all |");
			for (size_t l = 0; l <= o->n_lens; l++) {
				cell(x, r, l < o->n_lens ? l : SIZE_MAX, di, &k, &n);
				fprintf(f, " %s |", num(b, sizeof b, "%.1f", pct(k, n)));
			}
			fprintf(f, "\n");
		}
	}
}

static void jnum(FILE *f, const char *key, double v)
{
	if (isfinite(v))
		fprintf(f, "\"%s\":%.9g", key, v);
	else
		fprintf(f, "\"%s\":null", key);
}

/* {"n":N,"correct":K,"acc_pct":P} */
static void jcount(FILE *f, size_t k, size_t n)
{
	fprintf(f, "{\"n\":%zu,\"correct\":%zu,", n, k);
	jnum(f, "acc_pct", pct(k, n));
	fprintf(f, "}");
}

static int write_json(const char *path, const struct rq_ctx *x)
{
	const struct rq_opts *o = x->o;
	FILE *f = fopen(path, "w");
	size_t k, n;

	if (!f) {
		fprintf(stderr, "tierkv eval: cannot create %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < x->n_rows; i++) {
		const struct rq_row *r = &x->rows[i];
		bool first = true;

		fprintf(f, "{\"policy\":\"%s\",", tkv_policy_name(r->policy));
		jnum(f, "budget", r->budget);
		fprintf(f, ",\"limit\":\"%s\"", r->budget >= 1.0 ? "none" : r->mem ? "pool" : "cap");
		fprintf(f, ",\"failed\":%zu,\"samples\":%zu,", r->n_failed, r->n_run);
		jnum(f, "kv_peak_bytes", r->n_run ? r->kv_peak / (double)r->n_run : NAN);
		fprintf(f, ",");
		jnum(f, "kv_full_bytes", r->n_run ? r->kv_full / (double)r->n_run : NAN);
		fprintf(f, ",");
		jnum(f, "ratio", row_ratio(r));
		fprintf(f, ",");
		jnum(f, "mean_acc_pct", mean_acc(o, r));
		fprintf(f, ",\"tasks\":{");
		for (int t = 0; t < RETR_TASK_COUNT; t++) {
			if (!o->tasks[t])
				continue;
			fprintf(f, "%s\"%s\":{\"n\":%zu,\"correct\":%zu,", first ? "" : ",", retr_tasks[t].name, r->n[t],
				r->correct[t]);
			jnum(f, "acc_pct", pct(r->correct[t], r->n[t]));
			if (t == RETR_COPY) {
				fprintf(f, ",\"tokens\":%zu,\"tokens_right\":%zu,", r->tok_total[t], r->tok_match[t]);
				jnum(f, "token_acc_pct", pct(r->tok_match[t], r->tok_total[t]));
			}
			fprintf(f, "}");
			first = false;
		}
		fprintf(f, "},\"lengths\":{");
		for (size_t l = 0; l < o->n_lens; l++) {
			cell(x, i, l, SIZE_MAX, &k, &n);
			fprintf(f, "%s\"%ld\":", l ? "," : "", o->lens[l]);
			jcount(f, k, n);
		}
		fprintf(f, "},\"depths\":{");
		for (size_t d = 0; d < o->n_depths; d++) {
			cell(x, i, SIZE_MAX, d, &k, &n);
			fprintf(f, "%s\"%g\":", d ? "," : "", o->depths[d]);
			jcount(f, k, n);
		}
		fprintf(f, "},");
		jnum(f, "seconds", r->seconds);
		fprintf(f, "}\n");
	}
	if (fclose(f)) {
		fprintf(stderr, "tierkv eval: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

static int write_plot(const char *path, const struct rq_ctx *x)
{
	static const struct cli_plot spec = {
		.cmd = "eval",
		.title = "tierkv eval --retrieval: accuracy against KV bytes",
		.y_label = "retrieval accuracy, mean over tasks (%)",
		.y_tip = "%.1f%%",
		.axis = CLI_PLOT_PCT,
	};
	struct cli_plot_point *pts = calloc(x->n_rows, sizeof *pts);
	size_t n = 0;
	int rc;

	if (!pts) {
		fprintf(stderr, "tierkv eval: out of memory\n");
		return -1;
	}
	for (size_t i = 0; i < x->n_rows; i++)
		if (!x->rows[i].n_failed)
			pts[n++] = (struct cli_plot_point){ x->rows[i].policy, x->rows[i].budget, row_ratio(&x->rows[i]),
							    mean_acc(x->o, &x->rows[i]) };
	rc = cli_plot_write(path, &spec, pts, n);
	free(pts);
	return rc;
}

/* ---- main --------------------------------------------------------------------- */

/* The corpus from the -f files. */
static int load_corpus(struct rq_ctx *x)
{
	const struct rq_opts *o = x->o;
	char *texts[RQ_MAX_FILES] = { 0 };
	size_t lens[RQ_MAX_FILES];
	struct tkv_error err = { 0 };
	int rc = CLI_OK, st;

	for (size_t i = 0; i < o->n_files && rc == CLI_OK; i++)
		if (!(texts[i] = cli_read_file(o->files[i], &lens[i])))
			rc = CLI_ERR;
	if (rc == CLI_OK &&
	    (st = retr_corpus_init(&x->corpus, tkv_model_vocab(x->m), (const char *const *)texts, lens, o->n_files,
				   NULL, &err))) {
		fprintf(stderr, "tierkv eval: %s\n", err.msg[0] ? err.msg : tkv_status_str(st));
		rc = CLI_ERR;
	}
	for (size_t i = 0; i < o->n_files; i++)
		free(texts[i]);
	return rc;
}

/* Every prompt, from the seed. A length a task's text cannot fit in is a
 * usage error. */
static int make_samples(struct rq_ctx *x)
{
	const struct rq_opts *o = x->o;
	size_t n_tasks = 0;

	for (int t = 0; t < RETR_TASK_COUNT; t++)
		n_tasks += o->tasks[t];
	x->n_samples = n_tasks * o->n_lens * o->n_depths * (size_t)o->samples;
	if (!(x->samples = calloc(x->n_samples, sizeof *x->samples))) {
		fprintf(stderr, "tierkv eval: out of memory for %zu samples\n", x->n_samples);
		return CLI_ERR;
	}
	for (size_t t = 0, i = 0; t < RETR_TASK_COUNT; t++) {
		if (!o->tasks[t])
			continue;
		for (size_t l = 0; l < o->n_lens; l++)
			for (size_t d = 0; d < o->n_depths; d++)
				for (size_t k = 0; k < (size_t)o->samples; k++, i++) {
					struct tkv_error err = { 0 };
					size_t len = (size_t)o->lens[l];
					uint64_t seed = retr_sample_seed(o->seed, (enum retr_task_id)t, len, o->depths[d], k);
					int st = retr_sample_make(x->corpus, (enum retr_task_id)t, len, o->depths[d], seed,
								  &x->samples[i].s, &err);

					if (st) {
						fprintf(stderr, "tierkv eval: --ctx-lens %zu: %s\n", len,
							err.msg[0] ? err.msg : tkv_status_str(st));
						x->n_samples = i;
						return st == TKV_ERR_ARG ? CLI_USAGE : CLI_ERR;
					}
					x->samples[i].len_i = l;
					x->samples[i].depth_i = d;
				}
	}
	return CLI_OK;
}

/* The sample lengths: the context when none was given; each at most the
 * context. CLI_OK, or CLI_USAGE after a message. */
static int rq_lens(struct rq_opts *o, uint32_t n_ctx)
{
	if (o->n_lens == 0)
		o->lens[o->n_lens++] = (long)n_ctx;
	for (size_t l = 0; l < o->n_lens; l++)
		if (o->lens[l] > (long)n_ctx) {
			fprintf(stderr, "tierkv eval: --ctx-lens %ld is longer than the context (%u); raise -c\n",
				o->lens[l], n_ctx);
			return CLI_USAGE;
		}
	return CLI_OK;
}

/* The rows (the full cache first: a cap changes nothing for it, then every
 * policy x budget (x --mem)) and their results. CLI_OK or CLI_ERR. */
static int rq_make_rows(struct rq_ctx *x)
{
	const struct rq_opts *o = x->o;

	x->rows = calloc(1 + 2 * o->n_pol * o->n_bud, sizeof *x->rows);
	if (!x->rows) {
		fprintf(stderr, "tierkv eval: out of memory\n");
		return CLI_ERR;
	}
	x->rows[x->n_rows].policy = TKV_POLICY_FULL;
	x->rows[x->n_rows++].budget = 1.0;
	for (size_t p = 0; p < o->n_pol; p++)
		for (size_t b = 0; b < o->n_bud && o->policies[p] != TKV_POLICY_FULL; b++)
			for (int mem = 0; mem <= (o->mem && o->budgets[b] < 1.0); mem++) {
				x->rows[x->n_rows].policy = o->policies[p];
				x->rows[x->n_rows].mem = mem;
				x->rows[x->n_rows++].budget = o->budgets[b];
			}
	if (!(x->result = calloc(x->n_rows * x->n_samples, 1))) {
		fprintf(stderr, "tierkv eval: out of memory\n");
		return CLI_ERR;
	}
	return CLI_OK;
}

/* Every prompt through every row, with a progress line per prompt. CLI_OK
 * or CLI_ERR. */
static int rq_run(struct rq_ctx *x)
{
	for (size_t i = 0; i < x->n_samples; i++) {
		const struct retr_sample *s = &x->samples[i].s;
		double t0 = cli_now();

		if (x->o->verbose)
			fprintf(stderr, "tierkv eval: %s, length %zu, depth %g, seed %016llx: %zu prompt tokens, "
				"needle at token %zu\n", retr_tasks[s->task].name, s->length, s->depth,
				(unsigned long long)s->seed, s->n_ids, s->needle_tok[s->asked]);
		for (size_t r = 0; r < x->n_rows; r++)
			if (run_one(x, r, i))
				return CLI_ERR;
		fprintf(stderr, "tierkv eval: [%zu/%zu] %s, length %zu, depth %g: %zu tokens, %.1f s, full cache %s\n",
			i + 1, x->n_samples, retr_tasks[s->task].name, s->length, s->depth, s->n_ids, cli_now() - t0,
			x->result[i] == 2 ? "right" : x->result[i] == 1 ? "wrong" : "failed");
	}
	return CLI_OK;
}

/* The table (and --grid) on stdout, --json, --plot and the time on stderr.
 * CLI_OK unless a write failed or a row failed (CLI_ERR). */
static int rq_report(const struct rq_ctx *x, double t_start)
{
	const struct rq_opts *o = x->o;

	print_table(stdout, x);
	if (o->grid >= 0)
		print_grid(stdout, x);
	if (fflush(stdout)) {
		fprintf(stderr, "tierkv eval: cannot write to standard output\n");
		return CLI_ERR;
	}
	if (o->json && write_json(o->json, x))
		return CLI_ERR;
	if (o->plot && write_plot(o->plot, x))
		return CLI_ERR;
	fprintf(stderr, "tierkv eval: %.1f s in all\n", cli_now() - t_start);
	for (size_t r = 0; r < x->n_rows; r++)
		if (x->rows[r].n_failed)
			return CLI_ERR;
	return CLI_OK;
}

static void rq_free(struct rq_ctx *x)
{
	if (x->samples)
		for (size_t i = 0; i < x->n_samples; i++)
			retr_sample_free(x->corpus, &x->samples[i].s);
	free(x->samples);
	free(x->rows);
	free(x->result);
	retr_corpus_free(x->corpus);
	evr_free(&x->r);
	tkv_model_free(x->m);
}

int cli_eval_retrieval(int argc, char **argv)
{
	struct rq_opts o;
	struct rq_ctx x = { 0 };
	struct tkv_model_info info;
	double t_start = cli_now();
	size_t n_tok = 0;
	int rc, st;

	if ((st = parse(argc, argv, &o)))
		return cli_parse_end(st, cli_eval_help);
	x.o = &o;
	if ((rc = cli_model_path("eval", &o.model)) || (rc = cli_load_model("eval", o.model, &o.ep, &x.m, &info)))
		goto out;
	x.n_ctx = o.ep.n_ctx ? o.ep.n_ctx : info.n_ctx_train;
	o.ep.n_ctx = x.n_ctx;
	if ((rc = rq_lens(&o, x.n_ctx)))
		goto out;
	if (evr_init(&x.r, x.m, 1, x.n_ctx, NULL)) {
		fprintf(stderr, "tierkv eval: out of memory\n");
		rc = CLI_ERR;
		goto out;
	}
	if ((rc = load_corpus(&x)) || (rc = make_samples(&x)) || (rc = rq_make_rows(&x)))
		goto out;
	for (size_t i = 0; i < x.n_samples; i++)
		n_tok += x.samples[i].s.n_ids;
	fprintf(stderr, "tierkv eval: %s, retrieval: %zu prompts (%zu tokens), context %u, %zu runs per prompt, "
		"prefill chunks of %u, seed %llu\n", o.model, x.n_samples, n_tok, x.n_ctx, x.n_rows, o.ep.n_batch,
		(unsigned long long)o.seed);
	if ((rc = rq_run(&x)) == CLI_OK)
		rc = rq_report(&x, t_start);
out:
	rq_free(&x);
	return rc;
}
