/* bench_serve.c - `tierkv bench --serve`: how many sequences of a fixed length
 * does each cache policy hold at once in a fixed --kv-mem, and at what
 * aggregate speed?
 *
 * For each policy: N sequences start together, each with P random prompt
 * tokens, and are advanced by continuous batching (tkv_engine_step, as the
 * server does: one batch per step holding every live sequence's next token
 * and the prompt chunks) with greedy sampling until each holds L tokens. When
 * the engine refuses an item for lack of KV memory, the most recently started
 * live sequence is dropped (freed, as the server's preemption would) and the
 * step is retried; "held" is how many sequences reached L tokens together.
 * A policy that evicts or compresses under pressure keeps more of them. The
 * governor is held to a quality floor (--kv-floor, default 0.25 here: no
 * sequence is squeezed below 25% of its full f16 cache, where `tierkv eval`
 * shows the tiered cache within 1% of the full cache's perplexity and at 97%
 * top-1 agreement or more, on stories260K and kjv-2048), so
 * "held" counts sequences kept at that quality, not sequences cut to a window.
 *
 * Aggregate tokens/s counts every token the batch steps processed (prompt and
 * generated) over the wall time of the run; decode tokens/s only generated. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

struct bs_opts {
	const char *model;
	long n_seqs, len, prompt;
	const char *policies;
	int json;
	struct tkv_engine_params ep;
};

static void bs_help(void)
{
	printf("usage: tierkv bench --serve [-m MODEL] [-N SEQS] [-L LEN] [--kv-mem SIZE] [options]\n"
	       "\n"
	       "Starts N sequences of L tokens (P prompt tokens, the rest generated greedily)\n"
	       "together under one KV budget, for each policy, with continuous batching; a\n"
	       "sequence the budget cannot hold is dropped. Reports sequences held, aggregate\n"
	       "tokens/s and KV figures per policy.\n"
	       "\n"
	       "  -m, --model PATH      GGUF model (default: the bundled stories260K.gguf)\n"
	       "  -N, --seqs N          sequences started together (default 64)\n"
	       "  -L, --len N           tokens each sequence must reach (default 256)\n"
	       "  -P, --prompt N        random prompt tokens of each (default 32)\n"
	       "      --policies LIST   comma-separated policies (default: all)\n"
	       "  -t, --threads N       threads (default: physical cores)\n"
	       "  -b, --batch-size N    rows per forward pass (default 256)\n"
	       "  -o json               JSON lines instead of a table\n"
	       "  (and every --kv-* option; --kv-mem defaults to 2M and --kv-floor to 0.25 here)\n\n");
	cli_kv_help();
}

static const struct cli_opt bs_table[] = {
	CLI_HELP_OPT,
	{ "-m", "--model", CLI_OPT_STR, offsetof(struct bs_opts, model), 0, 0 },
	{ "-N", "--seqs", CLI_OPT_LONG, offsetof(struct bs_opts, n_seqs), 1, 4096 },
	{ "-L", "--len", CLI_OPT_LONG, offsetof(struct bs_opts, len), 2, 1L << 20 },
	{ "-P", "--prompt", CLI_OPT_LONG, offsetof(struct bs_opts, prompt), 1, 1L << 20 },
	{ NULL, "--policies", CLI_OPT_STR, offsetof(struct bs_opts, policies), 0, 0 },
};

/* --serve itself, the engine's threads and batch, the output format, then
 * the cache's options. 0 or CLI_USAGE. */
static int bs_option(struct cli_args *a, void *ctx)
{
	struct bs_opts *o = ctx;
	const char *s = a->argv[a->i], *v;
	int rc;
	long x;

	if (!strcmp(s, "--serve"))
		return 0;
	if (!strcmp(s, "-t") || !strcmp(s, "--threads")) {
		if (!(rc = cli_int(a, s, 1, 512, &x)))
			o->ep.n_threads = (int)x;
		return rc;
	}
	if (!strcmp(s, "-b") || !strcmp(s, "--batch-size")) {
		if (!(rc = cli_int(a, s, 1, 65536, &x)))
			o->ep.n_batch = (uint32_t)x;
		return rc;
	}
	if (!strcmp(s, "-o")) {
		if (!(v = cli_value(a, s)))
			return CLI_USAGE;
		if (strcmp(v, "json") && strcmp(v, "md"))
			return cli_usage_error(a, "-o: '%s' is not md or json", v);
		o->json = !strcmp(v, "json");
		return 0;
	}
	return cli_kv_or_unknown(a, &o->ep, NULL);
}

/* 0, CLI_HELP or CLI_USAGE (after a message). */
static int bs_parse(int argc, char **argv, struct bs_opts *o)
{
	struct cli_args a = { argc, argv, 1, "bench --serve" };
	int rc;

	memset(o, 0, sizeof *o);
	o->n_seqs = 64;
	o->len = 256;
	o->prompt = 32;
	o->ep = tkv_engine_default_params();
	o->ep.kv_mem = (size_t)2 << 20;
	o->ep.kv.gov_floor = 0.25f; /* the quality bar: see the head comment */
	o->ep.n_batch = 256;
	o->policies = "full,window,h2o,snapkv,tova,attn-threshold,semantic,streaming,kivi,tiered,adaptive";
	if ((rc = cli_parse_options(&a, CLI_TABLE(bs_table), o, bs_option)))
		return rc;
	if (o->prompt >= o->len)
		return cli_usage_error(&a, "-P %ld must be below -L %ld", o->prompt, o->len);
	return cli_kv_check(&a, &o->ep);
}

struct bs_seq {
	struct tkv_seq *seq;
	int32_t *ids;      /* (len) prompt, then generated */
	uint32_t n_fed, n_have;
	float *logits;     /* (n_vocab) */
	int dropped;
};

struct bs_result {
	long held, peak_live;
	double secs, tok_total, tok_gen;
	struct tkv_kv_stats ks;
	size_t peak_tokens_bytes;
};

static uint64_t bs_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int32_t argmax(const float *x, uint32_t n)
{
	uint32_t best = 0;

	for (uint32_t i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return (int32_t)best;
}

/* The next batch: decoding sequences first, then prompt chunks within the
 * row budget. Returns the items. */
static size_t bs_gather(struct bs_seq *q, const struct bs_opts *o, uint32_t rows, struct tkv_batch_item *items,
			long *map)
{
	uint32_t L = (uint32_t)o->len, P = (uint32_t)o->prompt;
	size_t ni = 0;

	for (int pass = 0; pass < 2; pass++)
		for (long i = 0; i < o->n_seqs; i++) {
			struct bs_seq *s = &q[i];
			uint32_t left, n;

			if (s->dropped || s->n_fed == L)
				continue;
			left = s->n_have - s->n_fed;
			if ((pass == 0) != (left == 1 && s->n_fed >= P))
				continue;
			n = pass == 0 ? 1 : (left < rows ? left : rows);
			if (pass == 1 && n == 0)
				continue;
			if (pass == 1)
				rows -= n;
			items[ni] = (struct tkv_batch_item){ s->seq, s->ids + s->n_fed, n,
							     s->n_fed + n == s->n_have ? s->logits : NULL, 0 };
			map[ni++] = i;
		}
	return ni;
}

/* A step's results: tokens fed, the greedy next tokens. Returns how many
 * items the pool refused, or -1 after a message on another failure. */
static long bs_collect(struct bs_seq *q, const struct bs_opts *o, const struct tkv_batch_item *items, size_t ni,
		       const long *map, uint32_t n_vocab, const struct tkv_engine_params *ep, struct bs_result *res)
{
	long refused = 0;

	for (size_t k = 0; k < ni; k++) {
		struct bs_seq *s = &q[map[k]];

		if (items[k].status == TKV_ERR_KV_FULL) {
			s->n_fed = tkv_seq_n_past(s->seq);
			refused++;
			continue;
		}
		if (items[k].status) {
			fprintf(stderr, "tierkv bench: %s: %s\n", tkv_policy_name(ep->kv.policy),
				tkv_status_str(items[k].status));
			return -1;
		}
		res->tok_total += (double)items[k].n;
		s->n_fed += (uint32_t)items[k].n;
		if (items[k].logits && s->n_have < (uint32_t)o->len) {
			s->ids[s->n_have++] = argmax(s->logits, n_vocab);
			res->tok_gen += 1;
		}
	}
	return refused;
}

/* Drops the most recently started live sequence to make room. */
static void bs_drop_newest(struct bs_seq *q, const struct bs_opts *o, long *live)
{
	for (long i = o->n_seqs - 1; i >= 0; i--)
		if (!q[i].dropped && q[i].n_fed < (uint32_t)o->len) {
			q[i].dropped = 1;
			tkv_seq_free(q[i].seq);
			q[i].seq = NULL;
			(*live)--;
			return;
		}
}

/* One policy's run. 0, or CLI_ERR after a message. */
static int bs_run(struct tkv_model *m, const struct bs_opts *o, const struct tkv_engine_params *ep,
		  struct bs_result *res)
{
	struct tkv_model_info mi;
	struct tkv_engine *e = NULL;
	struct tkv_error err = { 0 };
	struct bs_seq *q = calloc((size_t)o->n_seqs, sizeof *q);
	struct tkv_batch_item *items = calloc((size_t)o->n_seqs, sizeof *items);
	long *map = calloc((size_t)o->n_seqs, sizeof *map);
	uint32_t L = (uint32_t)o->len, P = (uint32_t)o->prompt, budget_rows = ep->n_batch ? ep->n_batch : 64;
	uint64_t rng = 0x2545F4914F6CDD1Dull;
	long live = 0;
	double t0;
	int rc = CLI_ERR;

	memset(res, 0, sizeof *res);
	tkv_model_get_info(m, &mi);
	if (!q || !items || !map) {
		fprintf(stderr, "tierkv bench: out of memory\n");
		goto out;
	}
	if (tkv_engine_init(&e, m, ep, &err))
		goto fail;
	for (long i = 0; i < o->n_seqs; i++) {
		q[i].ids = malloc(L * sizeof *q[i].ids);
		q[i].logits = malloc(mi.n_vocab * sizeof *q[i].logits);
		if (!q[i].ids || !q[i].logits) {
			fprintf(stderr, "tierkv bench: out of memory\n");
			goto out;
		}
		for (uint32_t k = 0; k < P; k++)
			q[i].ids[k] = (int32_t)(bs_rand(&rng) % mi.n_vocab);
		q[i].n_have = P;
		if (tkv_seq_init(&q[i].seq, e, &err))
			goto fail;
		live++;
	}
	t0 = cli_now();
	for (;;) {
		size_t ni = bs_gather(q, o, budget_rows, items, map);
		long refused;

		if (ni == 0)
			break;
		tkv_engine_step(e, items, ni, NULL);
		if ((refused = bs_collect(q, o, items, ni, map, mi.n_vocab, ep, res)) < 0)
			goto out;
		if (live > res->peak_live)
			res->peak_live = live;
		if (refused)
			bs_drop_newest(q, o, &live);
		if (live == 0)
			break;
	}
	res->secs = cli_now() - t0;
	tkv_engine_kv_stats(e, &res->ks);
	for (long i = 0; i < o->n_seqs; i++)
		if (!q[i].dropped)
			res->held++;
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "tierkv bench: %s\n", err.msg[0] ? err.msg : "engine failure");
out:
	for (long i = 0; q && i < o->n_seqs; i++) {
		tkv_seq_free(q[i].seq);
		free(q[i].ids);
		free(q[i].logits);
	}
	tkv_engine_free(e);
	free(q);
	free(items);
	free(map);
	return rc;
}

int cli_bench_serve(int argc, char **argv)
{
	struct bs_opts o;
	struct tkv_model *m = NULL;
	struct tkv_model_info mi;
	char list[512], b1[32], b2[32];
	int st, rc = CLI_OK;
	long full_held = 0;

	if ((st = bs_parse(argc, argv, &o)))
		return cli_parse_end(st, bs_help);
	if ((rc = cli_model_path("bench --serve", &o.model)))
		return rc;
	snprintf(list, sizeof list, "%s", o.policies);
	for (char *p = strtok(list, ","); p; p = strtok(NULL, ","))
		if (tkv_policy_parse(p) < 0) {
			fprintf(stderr, "tierkv bench --serve: --policies: unknown policy '%s'\n", p);
			return CLI_USAGE;
		}
	if ((rc = cli_load_model("bench", o.model, NULL, &m, &mi)))
		return rc;
	if (!o.json) {
		printf("bench --serve: %ld sequences of %ld tokens (%ld prompt), KV budget %s, %zu K+V bytes/token (f16)\n\n",
		       o.n_seqs, o.len, o.prompt, o.ep.kv_mem ? cli_fmt_bytes(b1, sizeof b1, (double)o.ep.kv_mem) : "unlimited",
		       tkv_model_kv_bytes_per_token(m));
		printf("| policy         | held | x full | tokens/s | decode t/s | KV peak    | pool mean | pool min | evicted %% | demoted %% | s     |\n");
		printf("| -------------- | ---- | ------ | -------- | ---------- | ---------- | --------- | -------- | --------- | --------- | ----- |\n");
	}
	snprintf(list, sizeof list, "%s", o.policies);
	for (char *p = strtok(list, ","); p; p = strtok(NULL, ",")) {
		struct tkv_engine_params ep = o.ep;
		struct bs_result r;

		ep.kv.policy = (enum tkv_policy)tkv_policy_parse(p);
		if (bs_run(m, &o, &ep, &r)) {
			rc = CLI_ERR;
			continue;
		}
		if (ep.kv.policy == TKV_POLICY_FULL)
			full_held = r.held;
		if (o.json) {
			printf("{\"policy\":\"%s\",\"seqs\":%ld,\"len\":%ld,\"kv_mem\":%zu,\"held\":%ld,\"tokens_per_s\":%.1f,"
			       "\"decode_tokens_per_s\":%.1f,\"kv_peak\":%zu,\"pool_mean\":%zu,\"pool_min\":%zu,\"gov_runs\":%llu,"
			       "\"evicted\":%llu,\"demoted\":%llu,\"secs\":%.3f}\n",
			       p, o.n_seqs, o.len, o.ep.kv_mem, r.held, r.tok_total / r.secs, r.tok_gen / r.secs,
			       r.ks.peak_allocated, r.ks.pool_mean, r.ks.pool_min, (unsigned long long)r.ks.gov_runs, (unsigned long long)r.ks.evicted, (unsigned long long)r.ks.demoted, r.secs);
		} else {
			double slots;

			slots = r.tok_total * mi.n_layer * mi.n_kv_head;
			snprintf(b2, sizeof b2, "%.2f", full_held ? (double)r.held / (double)full_held : 0.0);
			printf("| %-14s | %4ld | %6s | %8.0f | %10.0f | %10s | %9.3f | %8.3f | %9.1f | %9.1f | %5.2f |\n", p,
			       r.held, full_held ? b2 : "-", r.tok_total / r.secs, r.tok_gen / r.secs,
			       cli_fmt_bytes(b1, sizeof b1, (double)r.ks.peak_allocated),
			       r.ks.budget ? (double)r.ks.pool_mean / (double)r.ks.budget : 0.0,
			       r.ks.budget ? (double)r.ks.pool_min / (double)r.ks.budget : 0.0,
			       slots ? 100.0 * (double)r.ks.evicted / slots : 0.0,
			       slots ? 100.0 * (double)r.ks.demoted / slots : 0.0, r.secs);
		}
		fflush(stdout);
	}
	tkv_model_free(m);
	return rc;
}
