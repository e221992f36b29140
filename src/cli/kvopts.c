/* kvopts.c - the KV cache options shared by run, eval, bench and serve. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int cli_parse_policies(struct cli_args *a, const char *opt, const char *v, enum tkv_policy *out, size_t *n)
{
	char buf[512], *save = NULL;
	bool seen[TKV_POLICY_COUNT] = { false };

	if (strlen(v) >= sizeof buf)
		return cli_usage_error(a, "%s: list too long", opt);
	strcpy(buf, v);
	*n = 0;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int p;

		if (!strcmp(t, "all")) {
			for (int i = 0; i < TKV_POLICY_COUNT; i++)
				seen[i] = true;
			continue;
		}
		if ((p = tkv_policy_parse(t)) < 0)
			return cli_usage_error(a, "%s: unknown policy '%s'", opt, t);
		seen[p] = true;
	}
	for (int i = 0; i < TKV_POLICY_COUNT; i++)
		if (seen[i])
			out[(*n)++] = (enum tkv_policy)i;
	if (*n == 0)
		return cli_usage_error(a, "%s: no policy in '%s'", opt, v);
	return 0;
}

int cli_compare_option(struct cli_args *a, enum tkv_policy *pol, size_t *n_pol, double *bud, size_t max_bud,
		       size_t *n_bud, int *handled)
{
	const char *s = a->argv[a->i], *v;

	*handled = 1;
	if (!strcmp(s, "--policies"))
		return (v = cli_value(a, s)) ? cli_parse_policies(a, s, v, pol, n_pol) : CLI_USAGE;
	if (!strcmp(s, "--budgets"))
		return (v = cli_value(a, s)) ? cli_parse_fractions(a, s, v, bud, max_bud, n_bud) : CLI_USAGE;
	if (!strcmp(s, "--kv-policy") || !strcmp(s, "--kv-budget"))
		return cli_usage_error(a, "%s: %s compares policies and budgets; use --policies and --budgets", s, a->cmd);
	*handled = 0;
	return 0;
}

int cli_share_spec(struct cli_args *a, const char *opt, const char *v, size_t len, float *cos, uint32_t *from)
{
	char buf[64], *end;
	double c;
	unsigned long l = 0;

	if (len >= sizeof buf)
		return cli_usage_error(a, "%s: '%.*s' is too long", opt, (int)len, v);
	memcpy(buf, v, len);
	buf[len] = 0;
	errno = 0;
	c = strtod(buf, &end);
	if (errno || end == buf || !(c >= 0 && c <= 1))
		return cli_usage_error(a, "%s: '%s': the cosine must be a number in [0, 1]", opt, buf);
	if (*end == ':') {
		const char *ls = end + 1;

		if (*ls < '0' || *ls > '9' || (l = strtoul(ls, &end, 10), errno) || l > 65535)
			return cli_usage_error(a, "%s: '%s': the layer after ':' must be a number", opt, buf);
	}
	if (*end)
		return cli_usage_error(a, "%s: '%s' is not COSINE or COSINE:LAYER", opt, buf);
	*cos = (float)c;
	*from = (uint32_t)l;
	return 0;
}

int cli_parse_numbers(struct cli_args *a, const char *opt, const char *v, double lo, double hi, bool lo_open,
		      double *out, size_t max, size_t *n)
{
	const char *p = v;

	*n = 0;
	while (*p) {
		char *end;
		double b;

		errno = 0;
		b = strtod(p, &end);
		if (errno || end == p || (*end && *end != ','))
			return cli_usage_error(a, "%s: '%s' is not a list of numbers", opt, v);
		if (!((lo_open ? b > lo : b >= lo) && b <= hi))
			return cli_usage_error(a, "%s: %g is not in %c%g, %g]", opt, b, lo_open ? '(' : '[', lo, hi);
		if (*n == max)
			return cli_usage_error(a, "%s: at most %zu values", opt, max);
		out[(*n)++] = b;
		p = *end ? end + 1 : end;
	}
	if (*n == 0)
		return cli_usage_error(a, "%s: no value given", opt);
	return 0;
}

int cli_parse_fractions(struct cli_args *a, const char *opt, const char *v, double *out, size_t max, size_t *n)
{
	return cli_parse_numbers(a, opt, v, 0.0, 1.0, true, out, max, n);
}

void cli_kv_help(void)
{
	printf("KV cache:\n"
	       "      --kv-mem SIZE      KV memory budget for all sequences, e.g. 64M, 1G; 0 = unlimited (256M)\n"
	       "      --kv-policy NAME   full, window, h2o, snapkv, tova, attn-threshold, semantic,\n"
	       "                         streaming, kivi, tiered, adaptive (default adaptive)\n"
	       "      --kv-preset NAME   quality | balanced | memory (hot ratio 0.4 / 0.3 / 0.2)\n"
	       "      --kv-budget SIZE   K+V bytes one sequence may hold (default: no per-sequence cap)\n"
	       "      --kv-hot R         share of kept tokens stored hot, f16 (0.3)\n"
	       "      --kv-warm R        share stored warm (0.4); the rest is cold\n"
	       "      --kv-warm-fmt F    warm format: q8 | q4 (q8)\n"
	       "      --kv-cold-fmt F    cold format: q4 | q2 (q4)\n"
	       "      --kv-sinks N       first tokens always kept (4)\n"
	       "      --kv-window N      recent tokens always kept hot (32)\n"
	       "      --kv-completion on|off  merge evicted values into similar kept tokens (off)\n"
	       "      --kv-rotate on|off      rotate heads before low-bit quantization (off)\n"
	       "      --kv-cold-skip on|off   skip cold pages that cannot matter to a query (on)\n"
	       "      --kv-tight-q8 on|off    tiered/adaptive: a stream whose budget leaves an f16 window\n"
	       "                         under 1/4 of --kv-window stores new tokens at 8 bits (on)\n"
	       "      --kv-threshold X   attn-threshold: evict below X x mean attention (0.1)\n"
	       "      --kv-decay X       per-step decay of accumulated attention (1 = none)\n"
	       "      --kv-recency X     tiered: weight of recency in a slot's importance (1)\n"
	       "      --kv-floor R       the governor never squeezes a sequence below R x its full\n"
	       "                         f16 cache; past that the budget is reported full (0)\n"
	       "      --kv-semantic X    tiered: weight of key-to-centroid similarity (0.1)\n"
	       "      --kv-pool N        tiered/adaptive: a token ranks by the mean of its own priority\n"
	       "                         and the best of its N nearest ranked neighbours on each side,\n"
	       "                         so kept tokens come in spans; 0 = by its own (6)\n"
	       "      --kv-share C[:L]   cross-layer sharing: a token whose key and value have a cosine\n"
	       "                         of at least C with the layer below's keeps one direction for\n"
	       "                         both, from layer L up (default the upper half); off (0)\n"
	       "      --kv-type T        full-precision storage: f16 or f32 (f16)\n"
	       "      --kv-page N        token slots per KV page (16)\n"
	       "      --kv-layer-plan P  page size and budget share per layer: uniform (default),\n"
	       "                         auto (from attention entropy over the first 32 tokens), or\n"
	       "                         one PAGES[:WEIGHT] per layer, e.g. 32:0.5,32:0.5,16,16,8:2\n"
	       "      --kv-heads H       budget share per KV head: auto[:MIX] (default: the heads that\n"
	       "                         copy from far back, found by a probe at start, get more;\n"
	       "                         MIX the even part: 0.1 under adaptive, else 0.5), uniform, or\n"
	       "                         one weight per layer and KV head, layer-major, e.g. 1,3,1,1\n"
	       "      --kv-stats         print the cache's tiers and decisions at the end\n");
}

int cli_engine_option(struct cli_args *a, struct tkv_engine_params *ep, int *stats, int *handled)
{
	const char *s = a->argv[a->i];
	long x;
	int rc;

	*handled = 1;
	if (!strcmp(s, "-c") || !strcmp(s, "--ctx-size")) {
		if (!(rc = cli_int(a, s, 0, 1L << 22, &x)))
			ep->n_ctx = (uint32_t)x;
	} else if (!strcmp(s, "-b") || !strcmp(s, "--batch-size")) {
		if (!(rc = cli_int(a, s, 1, 65536, &x)))
			ep->n_batch = (uint32_t)x;
	} else if (!strcmp(s, "-t") || !strcmp(s, "--threads")) {
		if (!(rc = cli_int(a, s, 1, 512, &x)))
			ep->n_threads = (int)x;
	} else {
		rc = cli_kv_option(a, ep, stats, handled);
	}
	return rc;
}

static int on_off(struct cli_args *a, const char *opt, int *out)
{
	const char *v = cli_value(a, opt);

	if (!v)
		return CLI_USAGE;
	if (!strcmp(v, "on") || !strcmp(v, "1") || !strcmp(v, "true"))
		*out = 1;
	else if (!strcmp(v, "off") || !strcmp(v, "0") || !strcmp(v, "false"))
		*out = 0;
	else
		return cli_usage_error(a, "%s: '%s' is not on or off", opt, v);
	return 0;
}

static int fmt_opt(struct cli_args *a, const char *opt, int allow_q8, enum tkv_kv_fmt *out)
{
	const char *v = cli_value(a, opt);
	int f;

	if (!v)
		return CLI_USAGE;
	f = tkv_kv_fmt_parse(v);
	if (f != TKV_FMT_Q4 && f != TKV_FMT_Q2 && !(allow_q8 && f == TKV_FMT_Q8))
		return cli_usage_error(a, "%s: '%s' is not one of %s", opt, v, allow_q8 ? "q8, q4" : "q4, q2");
	*out = (enum tkv_kv_fmt)f;
	return 0;
}

/* The policy's numeric knobs, one row each: a float of the policy params in
 * [min, max]; and its on/off knobs, an int each. */
static const struct {
	const char *opt;
	double min, max;
	size_t off;
} kv_float_knobs[] = {
	{ "--kv-hot", 0, 1, offsetof(struct tkv_kv_policy_params, hot_ratio) },
	{ "--kv-warm", 0, 1, offsetof(struct tkv_kv_policy_params, warm_ratio) },
	{ "--kv-threshold", 0, 1000, offsetof(struct tkv_kv_policy_params, threshold) },
	{ "--kv-floor", 0, 1, offsetof(struct tkv_kv_policy_params, gov_floor) },
	{ "--kv-recency", 0, 1000, offsetof(struct tkv_kv_policy_params, recency_weight) },
	{ "--kv-semantic", 0, 1000, offsetof(struct tkv_kv_policy_params, semantic_weight) },
	{ "--kv-decay", 0.5, 1, offsetof(struct tkv_kv_policy_params, decay) },
};
static const struct {
	const char *opt;
	size_t off;
} kv_switch_knobs[] = {
	{ "--kv-completion", offsetof(struct tkv_kv_policy_params, completion) },
	{ "--kv-rotate", offsetof(struct tkv_kv_policy_params, rotate) },
	{ "--kv-cold-skip", offsetof(struct tkv_kv_policy_params, cold_skip) },
	{ "--kv-tight-q8", offsetof(struct tkv_kv_policy_params, tight_q8) },
};

/* A knob of the tables above: sets *handled when argv[a->i] is one; 0 or
 * CLI_USAGE after a message. */
static int kv_knob_option(struct cli_args *a, struct tkv_kv_policy_params *p, int *handled)
{
	const char *s = a->argv[a->i];
	double d;
	int rc;

	*handled = 1;
	for (size_t i = 0; i < sizeof kv_float_knobs / sizeof kv_float_knobs[0]; i++)
		if (!strcmp(s, kv_float_knobs[i].opt)) {
			if (!(rc = cli_float(a, s, kv_float_knobs[i].min, kv_float_knobs[i].max, &d)))
				*(float *)(void *)((char *)p + kv_float_knobs[i].off) = (float)d;
			return rc;
		}
	for (size_t i = 0; i < sizeof kv_switch_knobs / sizeof kv_switch_knobs[0]; i++)
		if (!strcmp(s, kv_switch_knobs[i].opt))
			return on_off(a, s, (int *)(void *)((char *)p + kv_switch_knobs[i].off));
	*handled = 0;
	return 0;
}

/* The options that set the policy's other settings (ep->kv): sets *handled
 * when argv[a->i] is one; 0 or CLI_USAGE after a message. */
static int kv_policy_option(struct cli_args *a, struct tkv_kv_policy_params *p, int *handled)
{
	const char *s = a->argv[a->i];
	long x;
	size_t sz;
	int rc = 0;

	*handled = 1;
	if (!strcmp(s, "--kv-policy")) {
		const char *v = cli_value(a, s);
		int pol;

		if (!v)
			return CLI_USAGE;
		if ((pol = tkv_policy_parse(v)) < 0)
			return cli_usage_error(a, "--kv-policy: unknown policy '%s'", v);
		p->policy = (enum tkv_policy)pol;
	} else if (!strcmp(s, "--kv-preset")) {
		const char *v = cli_value(a, s);

		if (!v)
			return CLI_USAGE;
		if (tkv_kv_preset(p, v))
			return cli_usage_error(a, "--kv-preset: '%s' is not quality, balanced or memory", v);
	} else if (!strcmp(s, "--kv-budget")) {
		if (!(rc = cli_size(a, s, &sz)))
			p->seq_budget = sz;
	} else if (!strcmp(s, "--kv-warm-fmt")) {
		rc = fmt_opt(a, s, 1, &p->warm_fmt);
	} else if (!strcmp(s, "--kv-cold-fmt")) {
		rc = fmt_opt(a, s, 0, &p->cold_fmt);
	} else if (!strcmp(s, "--kv-sinks")) {
		if (!(rc = cli_int(a, s, 0, 1 << 20, &x)))
			p->n_sink = (uint32_t)x;
	} else if (!strcmp(s, "--kv-pool")) {
		if (!(rc = cli_int(a, s, 0, 64, &x)))
			p->pool = (uint32_t)x;
	} else if (!strcmp(s, "--kv-window")) {
		if (!(rc = cli_int(a, s, 1, 1 << 20, &x)))
			p->n_window = (uint32_t)x;
	} else if (!strcmp(s, "--kv-share")) {
		const char *v = cli_value(a, s);

		if (!v)
			return CLI_USAGE;
		rc = cli_share_spec(a, s, v, strlen(v), &p->share_cos, &p->share_from);
	} else {
		return kv_knob_option(a, p, handled);
	}
	return rc;
}

/* The options that shape the cache's memory (pool size, storage type, page
 * size, layer plan) and --kv-stats, the same way as kv_policy_option. */
static int kv_memory_option(struct cli_args *a, struct tkv_engine_params *ep, int *stats, int *handled)
{
	const char *s = a->argv[a->i];
	long x;
	size_t sz;
	int rc = 0;

	*handled = 1;
	if (!strcmp(s, "--kv-mem")) {
		if (!(rc = cli_size(a, s, &sz)))
			ep->kv_mem = sz;
	} else if (!strcmp(s, "--kv-type")) {
		const char *v = cli_value(a, s);

		if (!v)
			return CLI_USAGE;
		if (!strcmp(v, "f16"))
			ep->kv_type = TKV_KV_F16;
		else if (!strcmp(v, "f32"))
			ep->kv_type = TKV_KV_F32;
		else
			return cli_usage_error(a, "--kv-type: '%s' is not f16 or f32", v);
	} else if (!strcmp(s, "--kv-page")) {
		if (!(rc = cli_int(a, s, 1, 4096, &x)))
			ep->page_tokens = (uint32_t)x;
	} else if (!strcmp(s, "--kv-layer-plan")) {
		const char *v = cli_value(a, s);
		struct tkv_error err = { 0 };

		if (!v)
			return CLI_USAGE;
		if (tkv_kv_layer_plan_parse(&ep->layer_plan, v, &err))
			return cli_usage_error(a, "--kv-layer-plan: %s", err.msg);
	} else if (!strcmp(s, "--kv-heads")) {
		const char *v = cli_value(a, s);
		struct tkv_error err = { 0 };

		if (!v)
			return CLI_USAGE;
		if (tkv_kv_head_plan_parse(&ep->head_plan, v, &err))
			return cli_usage_error(a, "--kv-heads: %s", err.msg);
	} else if (!strcmp(s, "--kv-stats")) {
		if (stats)
			*stats = 1;
	} else {
		*handled = 0;
	}
	return rc;
}

int cli_kv_option(struct cli_args *a, struct tkv_engine_params *ep, int *stats, int *handled)
{
	int rc = kv_policy_option(a, &ep->kv, handled);

	if (rc || *handled)
		return rc;
	return kv_memory_option(a, ep, stats, handled);
}

int cli_kv_check(struct cli_args *a, const struct tkv_engine_params *ep)
{
	const struct tkv_kv_policy_params *p = &ep->kv;

	if (p->hot_ratio + p->warm_ratio > 1.0f + 1e-6f)
		return cli_usage_error(a, "--kv-hot %g + --kv-warm %g exceed 1", p->hot_ratio, p->warm_ratio);
	return 0;
}

/* Pool bytes over K+V bytes and where the rest goes, each as a share of K+V. */
static void print_pool_ratio(FILE *f, const struct tkv_kv_stats *ks)
{
	double kv = (double)ks->kv_bytes;
	double empty = (double)ks->allocated - kv - (double)ks->meta_bytes - (double)ks->fixed_bytes;

	if (!ks->kv_bytes) {
		fprintf(f, "tierkv:   pool / K+V: no K+V held\n");
		return;
	}
	fprintf(f, "tierkv:   pool / K+V %.3f = 1 + slot positions and scores %.3f + page headers and padding %.3f "
		"+ empty slots %.3f\n",
		(double)ks->allocated / kv, (double)ks->meta_bytes / kv, (double)ks->fixed_bytes / kv, empty / kv);
}

void cli_print_kv_stats(FILE *f, const struct tkv_kv_stats *ks, size_t full_kv_bytes)
{
	static const char *const tier[3] = { "hot", "warm", "cold" };
	char b1[32], b2[32], b3[32];

	fprintf(f, "tierkv: KV cache: %s K+V for %zu tokens (a full f16 cache: %s, ratio %.3f)\n",
		cli_fmt_bytes(b1, sizeof b1, (double)ks->kv_bytes), ks->n_tokens,
		cli_fmt_bytes(b2, sizeof b2, (double)full_kv_bytes),
		full_kv_bytes ? (double)ks->kv_bytes / (double)full_kv_bytes : 0.0);
	for (int t = 0; t < 3; t++)
		fprintf(f, "tierkv:   %-4s %10zu slots  %s\n", tier[t], ks->tier_tokens[t],
			cli_fmt_bytes(b1, sizeof b1, (double)ks->tier_bytes[t]));
	if (ks->shared_tokens)
		fprintf(f, "tierkv:   shared with the layer below %zu slots  %s\n", ks->shared_tokens,
			cli_fmt_bytes(b1, sizeof b1, (double)ks->shared_bytes));
	fprintf(f, "tierkv:   pages %zu, allocated %s, fragmentation %.1f%%, peak %s\n", ks->n_pages,
		cli_fmt_bytes(b1, sizeof b1, (double)ks->allocated),
		ks->allocated ? 100.0 * (double)(ks->allocated - ks->used) / (double)ks->allocated : 0.0,
		cli_fmt_bytes(b2, sizeof b2, (double)ks->peak_allocated));
	print_pool_ratio(f, ks);
	fprintf(f, "tierkv:   compaction: %llu runs moved %llu slots (%s of K+V) in %.2f ms and returned %s\n",
		(unsigned long long)ks->compactions, (unsigned long long)ks->compact_slots,
		cli_fmt_bytes(b2, sizeof b2, (double)ks->compact_bytes), (double)ks->compact_ns / 1e6,
		cli_fmt_bytes(b3, sizeof b3, (double)ks->compact_freed));
	fprintf(f, "tierkv:   evicted %llu, demoted %llu, merged %llu, governor runs %llu (caps raised %llu), "
		"pages read %llu, cold pages skipped %llu\n",
		(unsigned long long)ks->evicted, (unsigned long long)ks->demoted,
		(unsigned long long)ks->merged, (unsigned long long)ks->gov_runs, (unsigned long long)ks->gov_raises,
		(unsigned long long)ks->pages_read, (unsigned long long)ks->pages_skipped);
	if (ks->budget && ks->pool_mean)
		fprintf(f, "tierkv:   --kv-mem %s: since the governor's first run the pool averaged %s (%.3f) over the "
			"forward passes' time, least %s (%.3f)\n",
			cli_fmt_bytes(b1, sizeof b1, (double)ks->budget), cli_fmt_bytes(b2, sizeof b2, (double)ks->pool_mean),
			(double)ks->pool_mean / (double)ks->budget, cli_fmt_bytes(b3, sizeof b3, (double)ks->pool_min),
			(double)ks->pool_min / (double)ks->budget);
}

void cli_print_head_plan(FILE *f, const struct tkv_kv_head_plan *p, uint32_t n_kv_head)
{
	static const char *const mode[] = { "uniform", "auto", "fixed" };

	if (p->mode == TKV_HEADS_UNIFORM)
		return;
	if (p->unprobed) {
		fprintf(f, "tierkv:   head plan (auto): not probed (too little KV memory, context or vocabulary), an even split\n");
		return;
	}
	fprintf(f, "tierkv:   head plan (%s", mode[p->mode]);
	if (p->mode == TKV_HEADS_AUTO)
		fprintf(f, ", mix %.2f, probe of %u tokens", p->mix, p->probe_tokens);
	fprintf(f, "): budget weight per KV head%s, a layer a group:", p->mode == TKV_HEADS_AUTO ? " (probe score)" : "");
	for (uint32_t i = 0; i < p->n; i++) {
		fprintf(f, "%s%.2f", i % n_kv_head ? " " : i ? " | " : " ", p->weight[i]);
		if (p->mode == TKV_HEADS_AUTO)
			fprintf(f, " (%.2f)", p->score[i]);
	}
	fprintf(f, "\n");
}

void cli_print_layer_plan(FILE *f, const struct tkv_kv_layer_plan *p)
{
	static const char *const mode[] = { "uniform", "auto", "fixed" };
	char buf[4096];

	if (p->mode == TKV_PLAN_UNIFORM)
		return;
	tkv_kv_layer_plan_str(p, buf, sizeof buf);
	if (p->pending)
		fprintf(f, "tierkv:   layer plan (%s): not chosen yet (fewer than %d tokens)\n", mode[p->mode],
			TKV_PLAN_AUTO_TOKENS);
	else
		fprintf(f, "tierkv:   layer plan (%s): %s (page tokens:budget weight per layer)\n", mode[p->mode], buf);
	if (p->mode == TKV_PLAN_AUTO && !p->pending) {
		fprintf(f, "tierkv:   attention entropy per layer (nats per head):");
		for (uint32_t l = 0; l < p->n_layer; l++)
			fprintf(f, " %.2f", p->entropy[l]);
		fprintf(f, "\n");
	}
}

int cli_check_layer_plan(const char *cmd, const struct tkv_engine_params *ep, const struct tkv_model_info *info)
{
	if (ep->layer_plan.mode == TKV_PLAN_FIXED && ep->layer_plan.n_layer != info->n_layer) {
		fprintf(stderr, "tierkv %s: --kv-layer-plan lists %u layers; the model has %u (one entry per layer)\n",
			cmd, ep->layer_plan.n_layer, info->n_layer);
		return CLI_USAGE;
	}
	if (ep->head_plan.mode == TKV_HEADS_FIXED && ep->head_plan.n != info->n_layer * info->n_kv_head) {
		fprintf(stderr,
			"tierkv %s: --kv-heads lists %u weights; the model has %u layers x %u KV heads = %u (one per head)\n",
			cmd, ep->head_plan.n, info->n_layer, info->n_kv_head, info->n_layer * info->n_kv_head);
		return CLI_USAGE;
	}
	if (ep->kv.share_cos > 0.0f && ep->kv.share_from >= info->n_layer) {
		fprintf(stderr, "tierkv %s: --kv-share from layer %u: the model has %u layers (0-%u)\n", cmd,
			ep->kv.share_from, info->n_layer, info->n_layer - 1);
		return CLI_USAGE;
	}
	return 0;
}
