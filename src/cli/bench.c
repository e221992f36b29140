/* bench.c - `tierkv bench`: prefill and decode speed, in the manner of
 * llama.cpp's llama-bench, next to the machine's limit.
 *
 * Tests, for each depth d of -d (default 0):
 *   pp<P> @ d   P random tokens through a sequence already holding d tokens,
 *               in chunks of -b (default 512), logits of the last only
 *   tg<N> @ d   N tokens one at a time after d tokens
 * for each policy of --policies at each budget of --budgets (a per-sequence
 * K+V cap, as a fraction of the full f16 cache at the test's final length).
 * Filling the cache to depth d is not timed: one sequence is filled once (the
 * policy managing its cache on the way, as in generation), and each run works
 * on a copy of it (tkv_seq_fork). Each test runs once to warm up, then -r times
 * (default 5); t/s is the mean ± standard deviation of the repetitions' rates.
 *
 * The limit: decoding one token reads every weight once (token_embd: one row)
 * and the whole KV cache, so it cannot go faster than the memory bandwidth
 * divided by those bytes. The bandwidth is measured in the same run, as the
 * best of a few multi-threaded streaming reads of the model's matrices
 * themselves (the memory decode reads; on this VM a fresh buffer can be
 * faster or slower than another by half). A streaming read of a fresh 512 MiB
 * buffer (in a child process, so it does not count in our peak RSS) is
 * reported beside it. Decode figures are also given as a fraction of the
 * limit, with the KV bytes the run's sequence actually held (mean of its
 * start and end). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"

#define BENCH_MAX_DEPTHS 16
#define BENCH_MAX_REPS 100
#define BENCH_MAX_BUDGETS 8
#define BENCH_BW_BYTES ((size_t)512 << 20)
#define BENCH_BW_PASSES 5       /* at start: the header's figure */
#define BENCH_BW_RUN_PASSES 3   /* before each decode run */

static void bench_help(void)
{
	printf("usage: tierkv bench -m MODEL [options]\n"
	       "\n"
	       "Measures prefill (pp) and decode (tg) tokens/s on random tokens, like llama-bench,\n"
	       "and each decode rate as a fraction of the memory-bandwidth limit (bandwidth\n"
	       "measured in the same run / bytes read per token: weights + KV cache).\n"
	       "\n"
	       "  -m, --model PATH      GGUF model\n"
	       "  -p, --n-prompt N      prompt tokens for the pp test; 0 = none (default 512)\n"
	       "  -n, --n-gen N         tokens for the tg test; 0 = none (default 128)\n"
	       "  -d, --depth LIST      comma-separated context depths, filled untimed first (default 0)\n"
	       "  -r, --repetitions N   timed runs per test (default 5)\n"
	       "  -t, --threads N       threads (default: physical cores)\n"
	       "  -b, --batch-size N    prompt tokens per forward chunk (default 512)\n"
	       "      --policies LIST   KV policies to compare, comma-separated or 'all' (default full)\n"
	       "      --budgets LIST    per-sequence K+V caps as fractions of the full f16 cache at\n"
	       "                        the test's final length (default 1: no cap)\n"
	       "      --budget-at N     budgets are fractions of the full f16 cache at N tokens, the\n"
	       "                        same bytes at every depth (default: each test's own length)\n"
	       "      --kv-* options    as for run (--kv-cold-skip, --kv-hot, --kv-type, ...);\n"
	       "                        --kv-mem is unlimited unless given\n"
	       "  -o, --output FMT      md (table, default) or json (JSON lines) on stdout\n"
	       "      --json FILE       also write JSON lines to FILE\n"
	       "      --no-bandwidth    skip the bandwidth measurement (no limit column)\n"
	       "  -h, --help            this text\n");
}

struct bench_opts {
	const char *model, *json_path;
	long n_prompt, n_gen, reps, threads, batch, budget_at;
	long depths[BENCH_MAX_DEPTHS];
	int n_depths;
	int json_stdout, no_bw;
	enum tkv_policy policies[TKV_POLICY_COUNT];
	size_t n_pol;
	double budgets[BENCH_MAX_BUDGETS];
	size_t n_bud;
	struct tkv_engine_params ep;
};

static int bench_parse_depths(struct cli_args *a, const char *v, struct bench_opts *o)
{
	const char *p = v;

	o->n_depths = 0;
	while (*p) {
		char *end;
		long d;

		errno = 0;
		d = strtol(p, &end, 10);
		if (errno || end == p || d < 0 || d > (1L << 22) || (*end && *end != ','))
			return cli_usage_error(a, "-d: '%s' is not a comma-separated list of depths", v);
		if (o->n_depths == BENCH_MAX_DEPTHS)
			return cli_usage_error(a, "-d: at most %d depths", BENCH_MAX_DEPTHS);
		o->depths[o->n_depths++] = d;
		p = *end ? end + 1 : end;
	}
	if (o->n_depths == 0)
		return cli_usage_error(a, "-d: no depth given");
	return 0;
}

static const struct cli_opt bench_opts_table[] = {
	CLI_HELP_OPT,
	{ "-m", "--model", CLI_OPT_STR, offsetof(struct bench_opts, model), 0, 0 },
	{ "-p", "--n-prompt", CLI_OPT_LONG, offsetof(struct bench_opts, n_prompt), 0, 1L << 20 },
	{ "-n", "--n-gen", CLI_OPT_LONG, offsetof(struct bench_opts, n_gen), 0, 1L << 20 },
	{ "-r", "--repetitions", CLI_OPT_LONG, offsetof(struct bench_opts, reps), 1, BENCH_MAX_REPS },
	{ "-t", "--threads", CLI_OPT_LONG, offsetof(struct bench_opts, threads), 1, 512 },
	{ "-b", "--batch-size", CLI_OPT_LONG, offsetof(struct bench_opts, batch), 1, 65536 },
	{ NULL, "--budget-at", CLI_OPT_LONG, offsetof(struct bench_opts, budget_at), 1, 1L << 24 },
	{ NULL, "--json", CLI_OPT_STR, offsetof(struct bench_opts, json_path), 0, 0 },
	{ NULL, "--no-bandwidth", CLI_OPT_FLAG, offsetof(struct bench_opts, no_bw), 0, 0 },
};

/* The options the table cannot hold (lists, the output format), then the
 * cache's. 0 or CLI_USAGE. */
static int bench_option(struct cli_args *a, void *ctx)
{
	struct bench_opts *o = ctx;
	const char *s = a->argv[a->i], *v = NULL;
	int handled = 0, rc;

	if (!strcmp(s, "-d") || !strcmp(s, "--depth"))
		return (v = cli_value(a, s)) ? bench_parse_depths(a, v, o) : CLI_USAGE;
	if ((rc = cli_compare_option(a, o->policies, &o->n_pol, o->budgets, BENCH_MAX_BUDGETS, &o->n_bud, &handled)) ||
	    handled)
		return rc;
	if (!strcmp(s, "-o") || !strcmp(s, "--output")) {
		if (!(v = cli_value(a, s)))
			return CLI_USAGE;
		if (!strcmp(v, "json"))
			o->json_stdout = 1;
		else if (strcmp(v, "md"))
			return cli_usage_error(a, "--output: '%s' is not md or json", v);
		return 0;
	}
	return cli_kv_or_unknown(a, &o->ep, NULL);
}

/* 0, CLI_HELP or CLI_USAGE (after a message). */
static int bench_parse(int argc, char **argv, struct bench_opts *o)
{
	struct cli_args a = { argc, argv, 1, "bench" };
	int rc;

	memset(o, 0, sizeof *o);
	o->n_prompt = 512;
	o->n_gen = 128;
	o->reps = 5;
	o->batch = 512;
	o->n_depths = 1;
	o->ep = tkv_engine_default_params();
	o->ep.kv_mem = 0;
	o->policies[o->n_pol++] = TKV_POLICY_FULL;
	o->budgets[o->n_bud++] = 1.0;
	if ((rc = cli_parse_options(&a, CLI_TABLE(bench_opts_table), o, bench_option)))
		return rc;
	if (!o->model)
		return cli_usage_error(&a, "-m MODEL is required");
	if (o->n_prompt == 0 && o->n_gen == 0)
		return cli_usage_error(&a, "nothing to measure: -p and -n are both 0");
	return cli_kv_check(&a, &o->ep);
}

/* ---- memory bandwidth ------------------------------------------------------- */

/* A streaming read of byte ranges, split evenly over the threads. */
struct bw_seg {
	const unsigned char *p;
	size_t n;
};

struct bw_job {
	const struct bw_seg *segs;
	size_t n_segs, total;
	uint64_t sums[512];  /* one per thread, so the reads are not optimised away */
};

static void bw_worker(void *ctx, int ith, int nth)
{
	struct bw_job *j = ctx;
	size_t lo = j->total * (size_t)ith / (size_t)nth, hi = j->total * (size_t)(ith + 1) / (size_t)nth, base = 0;
	uint64_t s[8] = { 0 };

	for (size_t g = 0; g < j->n_segs && base < hi; base += j->segs[g].n, g++) {
		/* this thread's part of segment g, in whole 64-byte lines */
		size_t a = lo > base ? lo - base : 0, b = hi - base < j->segs[g].n ? hi - base : j->segs[g].n;
		const unsigned char *p = j->segs[g].p;
		uintptr_t pa = ((uintptr_t)(p + a) + 63) & ~(uintptr_t)63, pb = (uintptr_t)(p + b) & ~(uintptr_t)63;

		if (b <= a || pb <= pa)
			continue;
		for (const uint64_t *w = (const uint64_t *)pa; (uintptr_t)w < pb; w += 8)
			for (int k = 0; k < 8; k++)
				s[k] += w[k];
	}
	j->sums[ith] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* Best bytes/s of `passes` passes over segs with the pool's threads. */
static double bw_measure(struct tkv_threads *tp, const struct bw_seg *segs, size_t n_segs, int passes)
{
	struct bw_job *j = calloc(1, sizeof *j);
	double best = 0.0;

	if (!j)
		return 0.0;
	j->segs = segs;
	j->n_segs = n_segs;
	for (size_t g = 0; g < n_segs; g++)
		j->total += segs[g].n;
	tkv_threads_run(tp, bw_worker, j); /* warm: page tables, thread wake-up */
	for (int pass = 0; pass < passes; pass++) {
		double t0 = cli_now(), dt;

		tkv_threads_run(tp, bw_worker, j);
		dt = cli_now() - t0;
		if (dt > 0 && j->total / dt > best)
			best = j->total / dt;
	}
	free(j);
	return best;
}

/* Best of a few multi-threaded passes over a buffer far larger than the
 * caches, in bytes/s; 0 on failure. Runs in a child process: the buffer never
 * counts in this process's peak RSS, and the child's threads end with it. */
static double bench_bandwidth(int n_threads)
{
	int fds[2];
	double best = 0.0;
	pid_t pid;

	if (pipe(fds))
		return 0.0;
	pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return 0.0;
	}
	if (pid == 0) {
		struct tkv_threads *tp = NULL;
		unsigned char *buf = malloc(BENCH_BW_BYTES);
		double r = 0.0;

		close(fds[0]);
		if (buf && tkv_threads_init(&tp, n_threads, NULL) == TKV_OK) {
			struct bw_seg seg = { buf, BENCH_BW_BYTES };

			memset(buf, 1, BENCH_BW_BYTES);
			r = bw_measure(tp, &seg, 1, BENCH_BW_PASSES);
		}
		if (write(fds[1], &r, sizeof r) != sizeof r)
			r = 0.0;
		_exit(0);
	}
	close(fds[1]);
	if (read(fds[0], &best, sizeof best) != sizeof best)
		best = 0.0;
	close(fds[0]);
	waitpid(pid, NULL, 0);
	return best;
}

/* ---- bytes per token -------------------------------------------------------- */

/* Streaming reads of this model's matrices: exactly the bytes a decoded
 * token reads, in their own memory (on this VM a fresh buffer can be faster
 * or slower than another by half, and the host's other tenants change it
 * from second to second, so decode tests measure it again before each run). */
struct bench_bw {
	struct tkv_threads *tp;
	struct bw_seg *segs;
	size_t n_segs;
};

static void bench_bw_free(struct bench_bw *b)
{
	tkv_threads_free(b->tp);
	free(b->segs);
	memset(b, 0, sizeof *b);
}

static int bench_bw_init(struct bench_bw *b, const struct tkv_model *m, int n_threads)
{
	size_t n = tkv_model_weight_spans(m, NULL, 0);
	struct tkv_weight_span *spans = calloc(n, sizeof *spans);

	memset(b, 0, sizeof *b);
	b->segs = calloc(n, sizeof *b->segs);
	if (!spans || !b->segs || tkv_threads_init(&b->tp, n_threads, NULL) != TKV_OK) {
		free(spans);
		bench_bw_free(b);
		return -1;
	}
	tkv_model_weight_spans(m, spans, n);
	for (size_t i = 0; i < n; i++)
		b->segs[b->n_segs++] = (struct bw_seg){ spans[i].data, spans[i].bytes };
	free(spans);
	return 0;
}

/* Best of `passes` reads of the matrices, in bytes/s (0 without b). */
static double bench_bw_measure(const struct bench_bw *b, int passes)
{
	return b && b->tp ? bw_measure(b->tp, b->segs, b->n_segs, passes) : 0.0;
}

/* ---- running tests ------------------------------------------------------------ */

struct bench_result {
	char test[48];
	enum tkv_policy policy;
	double budget;              /* fraction of the full f16 cache; 1 = no cap */
	long n_prompt, n_gen, depth;
	double ts[BENCH_MAX_REPS];
	int n_reps;
	double mean, sd;
	size_t kv_allocated;        /* pool bytes of the run's sequence at the end (page metadata
				     * and empty slots included) */
	size_t peak_rss;
	uint64_t compact_slots, compact_ns;  /* compaction in the timed runs */
	double kv_bytes;            /* K+V bytes the run's sequence held, mean of start and end */
	double kv_full;             /* what a full f16 cache holds for the same tokens */
	uint64_t pages_read, pages_skipped;  /* by attention in the timed runs */
	double bw[BENCH_MAX_REPS];  /* decode: bandwidth measured before each run */
	double bytes_per_token, limit_ts, frac, bw_mean; /* decode only; 0 otherwise */
};

static uint64_t bench_rng = 0x853c49e6748fea9bull;

static int32_t bench_token(uint32_t n_vocab)
{
	bench_rng = bench_rng * 6364136223846793005ull + 1442695040888963407ull;
	return (int32_t)((bench_rng >> 33) % n_vocab);
}

/* The untimed part of a test: a sequence holding depth random tokens, under
 * the per-sequence budget, its cache managed by the engine's policy. */
static int bench_fill(struct tkv_engine *e, uint32_t n_vocab, long depth, size_t budget, int32_t *ids,
		      struct tkv_seq **out, struct tkv_error *err)
{
	int st;

	if ((st = tkv_seq_init(out, e, err)))
		return st;
	tkv_seq_set_budget(*out, budget);
	for (long i = 0; i < depth; i++)
		ids[i] = bench_token(n_vocab);
	if (depth > 0 && (st = tkv_seq_decode(*out, ids, (size_t)depth, NULL, 0, err))) {
		tkv_seq_free(*out);
		*out = NULL;
	}
	return st;
}

struct bench_run {
	double rate;          /* tokens/s */
	double kv_bytes;      /* mean of the K+V bytes at start and end */
	size_t allocated;     /* pool bytes of its sequence at the end */
	uint64_t pages_read, pages_skipped, compact_slots, compact_ns;
};

/* One timed run on a copy of base. */
static int bench_once(const struct tkv_seq *base, uint32_t n_vocab, long n_prompt,
		      long n_gen, int32_t *ids, float *logits, struct bench_run *run, struct tkv_error *err)
{
	struct tkv_seq *seq = NULL;
	struct tkv_kv_stats k0, k1;
	double t0, t1;
	int st;

	if ((st = tkv_seq_fork(&seq, base, err)))
		return st;
	for (long i = 0; i < n_prompt; i++)
		ids[i] = bench_token(n_vocab);
	tkv_seq_kv_stats(seq, &k0);
	if (n_prompt > 0) {
		t0 = cli_now();
		st = tkv_seq_decode(seq, ids, (size_t)n_prompt, logits, 0, err);
		t1 = cli_now();
		run->rate = n_prompt / (t1 - t0);
	} else {
		int32_t id = bench_token(n_vocab);

		t0 = cli_now();
		for (long i = 0; i < n_gen && !st; i++) {
			st = tkv_seq_decode(seq, &id, 1, logits, 0, err);
			id = bench_token(n_vocab); /* random, like llama-bench: no sampling cost */
		}
		t1 = cli_now();
		run->rate = n_gen / (t1 - t0);
	}
	tkv_seq_kv_stats(seq, &k1);
	run->kv_bytes = ((double)k0.kv_bytes + (double)k1.kv_bytes) / 2.0;
	run->allocated = k1.allocated;
	run->pages_read = k1.pages_read - k0.pages_read;
	run->pages_skipped = k1.pages_skipped - k0.pages_skipped;
	/* the pool's counters: the one sequence running moved them */
	run->compact_slots = k1.compact_slots - k0.compact_slots;
	run->compact_ns = k1.compact_ns - k0.compact_ns;
	tkv_seq_free(seq);
	return st;
}

/* One test on copies of base. For decode with b, the bandwidth is measured
 * before each run and the fraction of the limit is the mean of the runs' own
 * fractions, each with the KV bytes its sequence held. */
static int bench_test(const struct tkv_seq *base, const struct tkv_model *m,
		      const struct bench_opts *o, long n_prompt, long n_gen, int32_t *ids, float *logits,
		      const struct bench_bw *b, double weight_bytes, struct bench_result *r, struct tkv_error *err)
{
	struct bench_run run;
	struct tkv_model_info info;
	double sum = 0.0, ss = 0.0, kv = 0.0, f = 0.0, bws = 0.0;
	int st;

	tkv_model_get_info(m, &info);

	r->n_prompt = n_prompt;
	r->n_gen = n_gen;
	if (n_prompt)
		snprintf(r->test, sizeof r->test, "pp%ld", n_prompt);
	else
		snprintf(r->test, sizeof r->test, "tg%ld", n_gen);
	if (r->depth)
		snprintf(r->test + strlen(r->test), sizeof r->test - strlen(r->test), " @ d%ld", r->depth);
	/* warm-up (llama-bench does one too): pages in the weights, wakes threads */
	if ((st = bench_once(base, info.n_vocab, n_prompt, n_gen ? (n_gen < 16 ? n_gen : 16) : 0, ids, logits,
			     &run, err)))
		return st;
	for (long i = 0; i < o->reps; i++) {
		double bw = n_gen && b ? bench_bw_measure(b, BENCH_BW_RUN_PASSES) : 0.0;

		if ((st = bench_once(base, info.n_vocab, n_prompt, n_gen, ids, logits, &run, err)))
			return st;
		r->bw[r->n_reps] = bw;
		r->ts[r->n_reps++] = run.rate;
		sum += run.rate;
		kv += run.kv_bytes;
		r->pages_read += run.pages_read;
		r->pages_skipped += run.pages_skipped;
		r->compact_slots += run.compact_slots;
		r->compact_ns += run.compact_ns;
		if (bw > 0) {
			f += run.rate * (weight_bytes + run.kv_bytes) / bw;
			bws += bw;
		}
	}
	r->mean = sum / r->n_reps;
	for (int i = 0; i < r->n_reps; i++)
		ss += (r->ts[i] - r->mean) * (r->ts[i] - r->mean);
	r->sd = r->n_reps > 1 ? sqrt(ss / (r->n_reps - 1)) : 0.0;
	r->kv_bytes = kv / r->n_reps;
	r->kv_allocated = run.allocated;
	r->peak_rss = cli_peak_rss();
	if (n_gen && bws > 0) {
		r->bytes_per_token = weight_bytes + r->kv_bytes;
		r->bw_mean = bws / r->n_reps;
		r->limit_ts = r->bw_mean / r->bytes_per_token;
		r->frac = f / r->n_reps;
	}
	return TKV_OK;
}

/* ---- a bench run ---------------------------------------------------------------- */

/* What one `tierkv bench` holds from setup to report (freed by bench_ctx_free). */
struct bench_ctx {
	struct bench_opts o;
	struct tkv_model *m;
	struct tkv_model_info info;
	char type_name[32];         /* the model's weight type */
	uint64_t wbytes;            /* weight bytes one decoded token reads */
	uint64_t fbytes;            /* tensor bytes in the file */
	double bw, bw_fresh;        /* bytes/s reading the weights, and a fresh buffer (0: not measured) */
	struct bench_bw bwm;        /* the weights' segments, for the reads before each decode run */
	int32_t *ids;               /* (max(depth, n_prompt) + 1) token scratch */
	float *logits;              /* (n_vocab) */
	struct bench_result *res;   /* (depths x 2 x policies x budgets) */
	int n_res;
	FILE *jf;                   /* --json FILE, or NULL */
};

static void bench_ctx_free(struct bench_ctx *x)
{
	if (x->jf)
		fclose(x->jf);
	bench_bw_free(&x->bwm);
	free(x->res);
	free(x->ids);
	free(x->logits);
	tkv_model_free(x->m);
}

/* ---- output --------------------------------------------------------------------- */

static void bench_json(FILE *f, const struct bench_ctx *x, const struct bench_result *r)
{
	const struct bench_opts *o = &x->o;

	fprintf(f, "{\"model\": \"%s\", \"model_type\": \"%s\", \"model_size\": %llu, \"model_n_params\": %llu, "
		"\"kernels\": \"%s\", \"n_threads\": %ld, \"n_batch\": %ld, \"kv_type\": \"%s\", "
		"\"kv_policy\": \"%s\", \"kv_budget\": %g, \"kv_budget_at\": %ld, \"test\": \"%s\", "
		"\"n_prompt\": %ld, \"n_gen\": %ld, \"n_depth\": %ld, \"avg_ts\": %.3f, \"stddev_ts\": %.3f, \"samples_ts\": [",
		o->model, x->type_name, (unsigned long long)x->fbytes, (unsigned long long)x->info.n_params,
		tkv_kernel_level(), o->threads, o->batch, o->ep.kv_type == TKV_KV_F32 ? "f32" : "f16",
		tkv_policy_name(r->policy), r->budget, o->budget_at, r->test, r->n_prompt, r->n_gen, r->depth, r->mean,
		r->sd);
	for (int i = 0; i < r->n_reps; i++)
		fprintf(f, "%s%.3f", i ? ", " : "", r->ts[i]);
	fprintf(f, "], \"kv_allocated\": %zu, \"kv_bytes\": %.0f, \"kv_full_f16\": %.0f, \"pages_read\": %llu, "
		"\"pages_skipped\": %llu, \"compact_slots\": %llu, \"compact_ms\": %.3f, \"peak_rss\": %zu, "
		"\"mem_bw_gbs\": %.3f, \"mem_bw_fresh_gbs\": %.3f",
		r->kv_allocated, r->kv_bytes, r->kv_full, (unsigned long long)r->pages_read,
		(unsigned long long)r->pages_skipped, (unsigned long long)r->compact_slots, (double)r->compact_ns / 1e6,
		r->peak_rss, (r->bw_mean > 0 ? r->bw_mean : x->bw) / 1e9,
		x->bw_fresh / 1e9);
	if (r->n_gen && r->limit_ts > 0)
		fprintf(f, ", \"bytes_per_token\": %.0f, \"limit_ts\": %.3f, \"frac_of_limit\": %.4f", r->bytes_per_token,
			r->limit_ts, r->frac);
	fprintf(f, "}\n");
}

static void bench_emit(const struct bench_ctx *x, const struct bench_result *r)
{
	fprintf(stderr, "tierkv bench: %s, %s at %g: %.2f ± %.2f t/s, K+V %.1f MB (%.0f%% of f16)\n", r->test,
		tkv_policy_name(r->policy), r->budget, r->mean, r->sd, r->kv_bytes / 1e6,
		r->kv_full > 0 ? 100.0 * r->kv_bytes / r->kv_full : 0.0);
	if (x->o.json_stdout)
		bench_json(stdout, x, r);
	if (x->jf)
		bench_json(x->jf, x, r);
}

/* The markdown table of every result, and the bandwidth note under it. */
static void bench_print_table(const struct bench_ctx *x)
{
	const struct bench_opts *o = &x->o;
	char size[32];

	printf("| model | size | kernels | threads | policy | budget | test | t/s | limit t/s | of limit | K+V | "
	       "of f16 | pages skipped | peak RSS |\n");
	printf("| --- | ---: | --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	for (int i = 0; i < x->n_res; i++) {
		const struct bench_result *r = &x->res[i];
		char lim[32] = "", frac[32] = "", kv[32], rss[32], skip[32] = "";

		if (r->limit_ts > 0) {
			snprintf(lim, sizeof lim, "%.2f", r->limit_ts);
			snprintf(frac, sizeof frac, "%.0f%%", 100.0 * r->frac);
		}
		if (r->pages_read + r->pages_skipped > 0)
			snprintf(skip, sizeof skip, "%.0f%%",
				 100.0 * (double)r->pages_skipped / (double)(r->pages_read + r->pages_skipped));
		printf("| %s %s %s | %s | %s | %ld | %s | %g | %s | %.2f ± %.2f | %s | %s | %s | %.0f%% | %s | %s |\n",
		       x->info.arch[0] ? x->info.arch : "?", x->info.name[0] ? x->info.name : "?", x->type_name, cli_fmt_bytes(size, sizeof size, (double)x->fbytes),
		       tkv_kernel_level(), o->threads, tkv_policy_name(r->policy), r->budget, r->test, r->mean, r->sd,
		       lim, frac, cli_fmt_bytes(kv, sizeof kv, r->kv_bytes),
		       r->kv_full > 0 ? 100.0 * r->kv_bytes / r->kv_full : 0.0, skip,
		       cli_fmt_bytes(rss, sizeof rss, (double)r->peak_rss));
	}
	if (x->bw > 0)
		printf("\nmemory bandwidth %.2f GB/s reading the weights, %.2f GB/s a fresh 512 MiB buffer (%ld "
		       "threads, best of %d passes, at start); decode limit = bandwidth reading the weights (measured "
		       "again before each run) / (%.1f MB of weights + the K+V bytes the run's sequence held)\n",
		       x->bw / 1e9, x->bw_fresh / 1e9, o->threads, BENCH_BW_PASSES, x->wbytes / 1e6);
}

/* ---- the command ------------------------------------------------------------------ */

/* Every test of one policy at one budget: for each depth, a sequence filled
 * once, then pp and tg on copies of it. */
static int bench_policy(struct bench_ctx *x, enum tkv_policy pol, double budget, struct tkv_error *err)
{
	const struct bench_opts *o = &x->o;
	const struct bench_bw *bwm = o->no_bw ? NULL : &x->bwm;
	struct tkv_engine_params ep = o->ep;
	struct tkv_engine *e = NULL;
	int st = TKV_OK;

	ep.kv.policy = pol;
	ep.kv.seq_budget = 0;
	if ((st = tkv_engine_init(&e, x->m, &ep, err)))
		return st;
	for (int di = 0; di < o->n_depths && !st; di++) {
		long d = o->depths[di];

		for (int kind = 0; kind < 2 && !st; kind++) {
			long np = kind == 0 ? o->n_prompt : 0, ng = kind == 1 ? o->n_gen : 0;
			struct bench_result *r = &x->res[x->n_res];
			struct tkv_seq *base = NULL;
			long at = o->budget_at ? o->budget_at : d + np + ng;
			size_t cap = budget < 1.0 ? (size_t)(budget * (double)tkv_model_kv_bytes(x->m, (size_t)at)) : 0;

			if (!np && !ng)
				continue;
			memset(r, 0, sizeof *r);
			r->policy = pol;
			r->budget = budget;
			r->depth = d;
			if ((st = bench_fill(e, x->info.n_vocab, d, cap, x->ids, &base, err)))
				break;
			/* like kv_bytes, the mean of the run's start and end */
			r->kv_full = (double)tkv_model_kv_bytes(x->m, (size_t)d + (np + ng) / 2);
			st = bench_test(base, x->m, o, np, ng, x->ids, x->logits, bwm, (double)x->wbytes, r, err);
			tkv_seq_free(base);
			if (!st) {
				bench_emit(x, r);
				x->n_res++;
			}
		}
	}
	tkv_engine_free(e);
	return st;
}

/* Everything before the first test: the fresh-buffer bandwidth (before the
 * model and its threads exist: the child forks a quiet process), the --json
 * file, the model, the bandwidth reading its weights, the engine parameters
 * and the buffers; then the header line. CLI_OK, CLI_USAGE or CLI_ERR after a
 * message. */
static int bench_setup(struct bench_ctx *x)
{
	struct bench_opts *o = &x->o;
	long max_depth = 0, max_len;
	char size[32];
	int rc;

	if (!o->threads)
		o->threads = tkv_default_threads();
	for (int i = 0; i < o->n_depths; i++)
		if (o->depths[i] > max_depth)
			max_depth = o->depths[i];
	max_len = max_depth + (o->n_prompt > o->n_gen ? o->n_prompt : o->n_gen);
	if (!o->no_bw)
		x->bw_fresh = bench_bandwidth((int)o->threads);
	if (o->json_path && !(x->jf = fopen(o->json_path, "w"))) {
		fprintf(stderr, "tierkv bench: cannot create %s: %s\n", o->json_path, strerror(errno));
		return CLI_ERR;
	}
	if ((rc = cli_load_model("bench", o->model, &o->ep, &x->m, &x->info)))
		return rc;
	if (!o->no_bw && bench_bw_init(&x->bwm, x->m, (int)o->threads) == 0)
		x->bw = bench_bw_measure(&x->bwm, BENCH_BW_PASSES);
	o->ep.n_threads = (int)o->threads;
	o->ep.n_batch = (uint32_t)o->batch;
	o->ep.n_ctx = (uint32_t)max_len;
	x->ids = malloc((size_t)(max_depth > o->n_prompt ? max_depth : o->n_prompt) * sizeof *x->ids + sizeof *x->ids);
	x->logits = malloc((size_t)x->info.n_vocab * sizeof *x->logits);
	x->res = calloc((size_t)o->n_depths * 2 * o->n_pol * o->n_bud, sizeof *x->res);
	if (!x->ids || !x->logits || !x->res) {
		fprintf(stderr, "tierkv bench: out of memory\n");
		return CLI_ERR;
	}
	x->wbytes = tkv_model_token_weight_bytes(x->m);
	x->fbytes = tkv_model_file_tensor_bytes(x->m);
	snprintf(x->type_name, sizeof x->type_name, "%s", tkv_dtype_name(x->info.weight_type));
	fprintf(stderr, "tierkv bench: %s (%s, %s), %ld threads, kernels %s, memory bandwidth %.2f GB/s reading the "
		"weights (%.2f GB/s a fresh buffer), %.1f MB of weights read per token\n", o->model, x->type_name,
		cli_fmt_bytes(size, sizeof size, (double)x->fbytes), o->threads, tkv_kernel_level(), x->bw / 1e9,
		x->bw_fresh / 1e9, x->wbytes / 1e6);
	return CLI_OK;
}

int cli_bench(int argc, char **argv)
{
	struct bench_ctx x = { 0 };
	struct tkv_error err = { 0 };
	int rc, st;

	for (int i = 1; i < argc; i++) /* concurrent sequences per policy: bench_serve.c */
		if (!strcmp(argv[i], "--serve"))
			return cli_bench_serve(argc, argv);
	if ((st = bench_parse(argc, argv, &x.o)))
		return cli_parse_end(st, bench_help);
	if ((rc = bench_setup(&x)))
		goto out;
	for (size_t pi = 0; pi < x.o.n_pol; pi++)
		for (size_t bi = 0; bi < x.o.n_bud; bi++) {
			if (x.o.budgets[bi] < 1.0 && x.o.policies[pi] == TKV_POLICY_FULL)
				continue; /* full never evicts: a cap would only stop it */
			if ((st = bench_policy(&x, x.o.policies[pi], x.o.budgets[bi], &err))) {
				cli_print_error("bench", st, &err);
				rc = CLI_ERR;
				goto out;
			}
		}
	if (!x.o.json_stdout)
		bench_print_table(&x);
out:
	bench_ctx_free(&x);
	return rc;
}
