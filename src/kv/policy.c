/* policy.c - cache policies: the table of their knobs, scores, budgets and
 * maintenance of streams. */
#include "kv/policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/compact.h"
#include "kv/prefix.h"
#include "kv/window.h"
#include "util/alloc.h"
#include "util/status.h"

/* ---- names and params ---------------------------------------------------- */

/* Which tiers a policy keeps its slots in. */
enum kv_tiers {
	KV_TIERS_HOT = 0,   /* one, at full precision */
	KV_TIERS_COLD,      /* one, at the cold format (kivi) */
	KV_TIERS_LADDER,    /* hot, warm and cold at --kv-hot / --kv-warm shares */
};

/* Priority pooling (pool_prios, `--kv-pool`): neighbours on each side in
 * position order, by default and at most. Measured with `adaptive`
 * (docs/lc-8k.md): on lc-8k at 4096 tokens, 1/4 ... 1/32 of the f16 cache,
 * KL 0.0028 / 0.0089 / 0.0258 / 0.0541 without, 0.0029 / 0.0087 / 0.0253 /
 * 0.0505 with, and 14 / 15 / 6 / 2 needles of 15 against 13 / 15 / 6 / 1;
 * kjv-2048 and stories260K lower KL at every budget, `tiered` 20-27% lower
 * on lc-8k. Pooling the copying heads too lost needles (3 of 15 at 1/16,
 * with the mean or the best neighbour alone). */
#define KV_POOL_DEFAULT 6
#define KV_POOL_MAX 64

/* Every policy is a row of knobs for the one machine in this file. */
static const struct kv_policy_row {
	const char *name;
	enum kv_score_mode score;  /* what a slot's score takes from the attention it gets */
	enum kv_prio prio;         /* how maintenance ranks slots */
	enum kv_tiers tiers;
	bool evicts;               /* enforces a budget (full: never) */
	bool always;               /* acts within the budget too */
	bool drop_below;           /* drops slots under threshold x their fair share */
	bool adaptive;             /* budgets by effective span (exp entropy) */
	uint32_t obs_window;       /* SnapKV: only the last queries of a chunk vote; 0 = all */
} policies[TKV_POLICY_COUNT] = {
	[TKV_POLICY_FULL] = { "full", KV_SCORE_NONE, KV_PRIO_MEAN, KV_TIERS_HOT, .evicts = false },
	[TKV_POLICY_WINDOW] = { "window", KV_SCORE_NONE, KV_PRIO_POS, KV_TIERS_HOT, .evicts = true },
	[TKV_POLICY_H2O] = { "h2o", KV_SCORE_ACC, KV_PRIO_ACC, KV_TIERS_HOT, .evicts = true },
	[TKV_POLICY_SNAPKV] = { "snapkv", KV_SCORE_ACC, KV_PRIO_ACC, KV_TIERS_HOT, .evicts = true, .obs_window = 16 },
	[TKV_POLICY_TOVA] = { "tova", KV_SCORE_LAST, KV_PRIO_LAST, KV_TIERS_HOT, .evicts = true },
	[TKV_POLICY_ATTN_THRESHOLD] = { "attn-threshold", KV_SCORE_ACC, KV_PRIO_MEAN, KV_TIERS_HOT, .evicts = true,
					.always = true, .drop_below = true },
	[TKV_POLICY_SEMANTIC] = { "semantic", KV_SCORE_NONE, KV_PRIO_SEMANTIC, KV_TIERS_HOT, .evicts = true },
	[TKV_POLICY_STREAMING] = { "streaming", KV_SCORE_ACC, KV_PRIO_MEAN, KV_TIERS_HOT, .evicts = true },
	[TKV_POLICY_KIVI] = { "kivi", KV_SCORE_ACC, KV_PRIO_MEAN, KV_TIERS_COLD, .evicts = true, .always = true },
	[TKV_POLICY_TIERED] = { "tiered", KV_SCORE_ACC, KV_PRIO_MEAN_SEM, KV_TIERS_LADDER, .evicts = true },
	[TKV_POLICY_ADAPTIVE] = { "adaptive", KV_SCORE_ACC, KV_PRIO_MEAN_SEM, KV_TIERS_LADDER, .evicts = true,
				  .adaptive = true },
};

const char *tkv_policy_name(enum tkv_policy p)
{
	return (unsigned)p < TKV_POLICY_COUNT ? policies[p].name : "?";
}

int tkv_policy_parse(const char *name)
{
	for (int i = 0; i < TKV_POLICY_COUNT; i++)
		if (!strcmp(name, policies[i].name))
			return i;
	return -1;
}

const char *tkv_kv_fmt_name(enum tkv_kv_fmt f)
{
	return kv_fmt_name((uint32_t)f);
}

int tkv_kv_fmt_parse(const char *name)
{
	return kv_fmt_parse(name);
}

struct tkv_kv_policy_params tkv_kv_policy_default_params(void)
{
	struct tkv_kv_policy_params p = {
		.policy = TKV_POLICY_ADAPTIVE,
		.seq_budget = 0,
		.hot_ratio = 0.3f,
		.warm_ratio = 0.4f,
		.n_sink = 4,
		.n_window = 32,
		.warm_fmt = TKV_FMT_Q8,
		.cold_fmt = TKV_FMT_Q4,
		.completion = 0,
		.rotate = 0,
		.cold_skip = 1,
		.tight_q8 = 1,
		.decay = 1.0f,
		.threshold = 0.1f,
		.semantic_weight = 0.1f,
		.recency_weight = 1.0f,
		.gov_high = 0.8f,
		.gov_low = 0.7f,
		.gov_floor = 0.0f,
		.pool = KV_POOL_DEFAULT,
	};
	return p;
}

int tkv_kv_preset(struct tkv_kv_policy_params *p, const char *name)
{
	if (!strcmp(name, "quality")) {
		p->hot_ratio = 0.4f;
		p->warm_ratio = 0.4f;
		p->cold_fmt = TKV_FMT_Q4;
		p->completion = 0;
	} else if (!strcmp(name, "balanced")) {
		p->hot_ratio = 0.3f;
		p->warm_ratio = 0.4f;
		p->cold_fmt = TKV_FMT_Q4;
		p->completion = 0;
	} else if (!strcmp(name, "memory")) {
		p->hot_ratio = 0.2f;
		p->warm_ratio = 0.4f;
		p->cold_fmt = TKV_FMT_Q4;
		p->completion = 1;
	} else {
		return TKV_ERR_ARG;
	}
	return TKV_OK;
}

int kv_cfg_init(struct kv_cfg *c, const struct tkv_kv_policy_params *p, uint32_t head_dim,
		uint32_t group, uint32_t hot_fmt, uint32_t page_tokens, struct tkv_error *err)
{
	const struct kv_policy_row *row;

	memset(c, 0, sizeof *c);
	if ((unsigned)p->policy >= TKV_POLICY_COUNT)
		return tkv_errf(err, TKV_ERR_ARG, "unknown KV policy %d", (int)p->policy);
	if (!(p->hot_ratio >= 0 && p->warm_ratio >= 0 && p->hot_ratio + p->warm_ratio <= 1.0f + 1e-6f))
		return tkv_errf(err, TKV_ERR_ARG, "KV hot ratio %g and warm ratio %g: each in [0, 1], sum at most 1",
				p->hot_ratio, p->warm_ratio);
	if (!(p->decay > 0 && p->decay <= 1))
		return tkv_errf(err, TKV_ERR_ARG, "KV score decay %g: must be in (0, 1]", p->decay);
	if (!(p->gov_floor >= 0 && p->gov_floor <= 1))
		return tkv_errf(err, TKV_ERR_ARG, "KV governor floor %g: must be in [0, 1]", p->gov_floor);
	if (!(p->gov_low > 0 && p->gov_low <= p->gov_high && p->gov_high <= 1))
		return tkv_errf(err, TKV_ERR_ARG, "KV governor thresholds %g/%g: need 0 < low <= high <= 1",
				p->gov_low, p->gov_high);
	if (p->warm_fmt != TKV_FMT_Q8 && p->warm_fmt != TKV_FMT_Q4)
		return tkv_errf(err, TKV_ERR_ARG, "KV warm format %s: must be q8 or q4", kv_fmt_name(p->warm_fmt));
	if (p->cold_fmt != TKV_FMT_Q4 && p->cold_fmt != TKV_FMT_Q2)
		return tkv_errf(err, TKV_ERR_ARG, "KV cold format %s: must be q4 or q2", kv_fmt_name(p->cold_fmt));
	if (!kv_fmt_ok(p->warm_fmt, head_dim) || !kv_fmt_ok(p->cold_fmt, head_dim))
		return tkv_errf(err, TKV_ERR_ARG, "head size %u cannot be stored as %s/%s",
				head_dim, kv_fmt_name(p->warm_fmt), kv_fmt_name(p->cold_fmt));
	if (p->rotate && (head_dim & (head_dim - 1)))
		return tkv_errf(err, TKV_ERR_ARG, "--kv-rotate needs a power-of-two head size (have %u)", head_dim);
	if (group == 0 || group > KV_MAX_GROUP)
		return tkv_errf(err, TKV_ERR_UNSUPPORTED, "%u query heads per KV head (at most %u)", group,
				(unsigned)KV_MAX_GROUP);
	if (!(p->share_cos >= 0 && p->share_cos <= 1))
		return tkv_errf(err, TKV_ERR_ARG, "KV cross-layer sharing cosine %g: must be in [0, 1]", p->share_cos);
	c->share_cos = p->share_cos;
	c->share_from = p->share_from;

	row = &policies[p->policy];
	c->policy = p->policy;
	c->score = row->score;
	c->prio = row->prio;
	c->evicts = row->evicts;
	c->always = row->always;
	c->drop_below = row->drop_below;
	c->adaptive = row->adaptive;
	c->obs_window = row->obs_window;
	c->n_sink = p->n_sink;
	c->n_window = p->n_window ? p->n_window : 1;
	c->hot_fmt = hot_fmt;
	c->page_tokens = page_tokens;
	c->low_cap = page_tokens < 64 ? 64 : page_tokens;
	c->group = group;
	c->completion = p->completion != 0;
	c->rotate = p->rotate != 0;
	c->skip = p->cold_skip ? 16.0f : 0.0f;
	c->decay = p->decay;
	c->threshold = p->threshold;
	c->semantic_weight = p->semantic_weight;
	c->recency_weight = p->recency_weight;
	if (p->pool > KV_POOL_MAX)
		return tkv_errf(err, TKV_ERR_ARG, "KV priority pooling %u: at most %u", p->pool, (unsigned)KV_POOL_MAX);
	c->pool = c->prio == KV_PRIO_MEAN_SEM ? p->pool : 0;
	c->seq_budget = p->seq_budget;
	c->n_tiers = 1;
	c->tier_frac[0] = 1.0f;
	c->tier_fmt[0] = row->tiers == KV_TIERS_COLD ? p->cold_fmt : hot_fmt;
	if (row->tiers == KV_TIERS_LADDER) {
		c->n_tiers = 3;
		c->tier_frac[0] = p->hot_ratio;
		c->tier_frac[1] = p->warm_ratio;
		c->tier_frac[2] = 1.0f - p->hot_ratio - p->warm_ratio;
		c->tier_fmt[1] = p->warm_fmt;
		c->tier_fmt[2] = p->cold_fmt;
		c->tight_q8 = p->tight_q8 != 0;
	}
	return TKV_OK;
}

/* ---- scores ---------------------------------------------------------------- */

uint32_t kv_policy_first_voter(const struct kv_cfg *c, uint32_t n)
{
	if (c->score == KV_SCORE_NONE)
		return n;
	return c->obs_window && n > c->obs_window ? n - c->obs_window : 0;
}

void kv_policy_observe(const struct kv_cfg *c, struct kv_stream *st, const float *att)
{
	size_t i = 0;

	for (uint32_t p = 0; p < st->n_pages; p++) {
		struct kv_page *pg = st->pages[p];

		if (pg->flags & KV_PAGE_FROZEN) { /* shared prefix: read-only */
			i += pg->n_used;
			continue;
		}
		if (c->score == KV_SCORE_LAST) {
			for (uint32_t j = 0; j < pg->n_used; j++)
				kv_slot_set_score(pg, j, att[i++]);
		} else if (c->decay < 1.0f) {
			for (uint32_t j = 0; j < pg->n_used; j++)
				kv_slot_set_score(pg, j, kv_slot_score(pg, j) * c->decay + att[i++]);
		} else {
			for (uint32_t j = 0; j < pg->n_used; j++)
				kv_slot_set_score(pg, j, kv_slot_score(pg, j) + att[i++]);
		}
	}
}

/* ---- budgets ---------------------------------------------------------------- */

/* The most of a stream's budget the sinks and recent window may take before the
 * window shrinks (tuned with tierkv eval on stories260K: 0.5 and 0.125 were
 * both worse at 1/16 of the full cache). */
#define KV_WINDOW_SHARE 0.25

static double slot_cost(uint32_t fmt, uint32_t cap, uint32_t d)
{
	return (double)kv_page_kv_bytes(cap, d, fmt) / cap;
}

/* Slots of a stream's full-size pages of a format (the layer plan's). */
static uint32_t fmt_cap(const struct kv_stream *st, uint32_t fmt)
{
	return fmt == st->hot_fmt ? st->page_tokens : st->low_cap;
}

/* Format of tier t in stream st: the policy's, with the stream's hot format
 * for the full-precision one. */
static uint32_t tier_fmt(const struct kv_cfg *c, const struct kv_stream *st, uint32_t t)
{
	return c->tier_fmt[t] == c->hot_fmt ? st->hot_fmt : c->tier_fmt[t];
}

/* How far below its budget maintenance brings a stream, so the next tokens
 * fit without another round: a page of hot slots (of hot format hot) or, for
 * large budgets, a sixteenth of it (a round ranks every slot: at depth 4096
 * one every page of tokens was a tenth of decode time), at most a quarter. */
static double maint_slack(uint32_t hot, uint32_t page_tokens, size_t budget, uint32_t head_dim)
{
	return fmin(fmax((double)kv_page_kv_bytes(page_tokens, head_dim, hot), budget / 16.0), budget / 4.0);
}

/* The recent window of a stream whose new tokens are stored as hot. */
static uint32_t window_of(const struct kv_cfg *c, uint32_t hot, uint32_t page_tokens, size_t budget,
			  uint32_t head_dim)
{
	double w;
	uint32_t least = c->n_window < 4 ? c->n_window : 4;

	if (budget == 0)
		return c->n_window;
	/* of what maintenance aims for: a page (at most a quarter) below the budget */
	w = KV_WINDOW_SHARE * ((double)budget - maint_slack(hot, page_tokens, budget, head_dim)) /
	    slot_cost(hot, page_tokens, head_dim) - (double)c->n_sink;
	if (w >= (double)c->n_window)
		return c->n_window;
	return w < (double)least ? least : (uint32_t)w;
}

/* Tight: at full precision the window would shrink below a quarter of its
 * length (tuned with tierkv eval on stories260K and 16 held-out texts: at
 * "below its length" adaptive at 0.35 lost 0.2% and 0.7 points of top-1 for
 * nothing at 1/8 and 1/16). */
static uint32_t hot_fmt_of(const struct kv_cfg *c, uint32_t page_tokens, size_t budget, uint32_t head_dim)
{
	if (c->tight_q8 && budget && 4 * window_of(c, c->hot_fmt, page_tokens, budget, head_dim) < c->n_window)
		return KV_FMT_Q8;
	return c->hot_fmt;
}

uint32_t kv_policy_hot_fmt(const struct kv_cfg *c, size_t budget, uint32_t head_dim)
{
	return hot_fmt_of(c, c->page_tokens, budget, head_dim);
}

uint32_t kv_policy_window(const struct kv_cfg *c, size_t budget, uint32_t head_dim)
{
	return window_of(c, hot_fmt_of(c, c->page_tokens, budget, head_dim), c->page_tokens, budget, head_dim);
}

/* split_fill's step: what is left of spare after the needs of the streams
 * capped so far (budget not SIZE_MAX), and in *wsum the others' weight. */
static double fill_left(const struct kv_stream *sts, size_t n, double spare, const double *w, const double *need,
			double *wsum)
{
	*wsum = 0.0;
	for (size_t i = 0; i < n; i++) {
		if (sts[i].budget != SIZE_MAX)
			spare -= need[i];
		else
			*wsum += w[i];
	}
	return spare;
}

/* A stream's need under a head plan, as a multiple of every token at its
 * cheapest tier: room for the tokens still to come between rounds besides
 * maintenance's slack (below). Measured on lc-8k (4096 tokens, two
 * fillers; 8192): 1.0 lost needles at 1/4, 1.25 a few at 1/8, 1.5 kept what
 * the ideal mix kept but one license-filler needle at 1/4 and one at 1/8
 * (and one more at 8192). */
#define KV_HEAD_NEED 1.5

/* Under a head plan: the spare bytes above each stream's floor fl by weight
 * w[], but no stream takes more than it needs to keep every token of the
 * sequence (its protected slots within the floor): what a copying head
 * cannot use goes to the others by their weights, until no share passes its
 * need (water-filling; each pass caps at least one more stream, or ends);
 * when every stream fits so, the rest is split evenly. The need is every
 * token at the cheapest tier, times KV_HEAD_NEED, plus the slack a round
 * leaves below the budget (maint_slack), at most the policy's ideal mix.
 * Exactly all-cold is too little: a copying head held there evicts a little
 * each round, and the first tokens it evicts are the needles, which nothing
 * attends to until the question (lc-8k at 1/4: retrieval 93% -> 53%). The
 * ideal mix is more than a copying head uses: its hot and warm slots came
 * out of the other heads (lc-8k at 4096 tokens, KL at 1/4 and 1/8: 0.0056
 * and 0.0167 with the ideal mix, 0.0052 and 0.0159 with this need, the same
 * needles found). need[] is scratch. */
static void split_fill(const struct kv_cfg *c, struct kv_seq *s, struct kv_stream *sts, size_t n, double fl,
		       double spare, const double *w, double *need)
{
	int32_t prot = (int32_t)(c->n_sink + c->n_window);
	/* every token the sequence has seen, not the ones a stream still holds:
	 * a share cut to what is left would shrink with each eviction */
	uint32_t rest = s->n_pos > prot ? (uint32_t)(s->n_pos - prot) : 0;

	for (size_t i = 0; i < n; i++) {
		uint32_t cold = tier_fmt(c, &sts[i], c->n_tiers - 1);
		double ideal = 0.0, least;

		for (uint32_t t = 0; t < c->n_tiers; t++) {
			uint32_t fmt = tier_fmt(c, &sts[i], t);

			ideal += c->tier_frac[t] * slot_cost(fmt, fmt_cap(&sts[i], fmt), s->head_dim);
		}
		least = KV_HEAD_NEED * rest * slot_cost(cold, fmt_cap(&sts[i], cold), s->head_dim);
		least += maint_slack(sts[i].hot_fmt, sts[i].page_tokens, (size_t)(least * 16.0 / 15.0), s->head_dim);
		need[i] = fmin(rest * ideal, least); /* above the floor */
	}
	/* SIZE_MAX marks a stream not capped (yet) */
	for (size_t i = 0; i < n; i++)
		sts[i].budget = SIZE_MAX;
	for (;;) {
		double wsum, left = fill_left(sts, n, spare, w, need, &wsum);
		bool capped = false;

		for (size_t i = 0; wsum > 0 && left > 0 && i < n; i++)
			if (sts[i].budget == SIZE_MAX && left * w[i] / wsum > need[i]) {
				sts[i].budget = (size_t)(fl + need[i]);
				capped = true;
			}
		if (!capped)
			break;
	}
	{
		double wsum, left = fill_left(sts, n, spare, w, need, &wsum);

		for (size_t i = 0; i < n; i++) {
			if (wsum > 0 && sts[i].budget == SIZE_MAX)
				sts[i].budget = (size_t)(fl + (left > 0 ? left * w[i] / wsum : 0.0));
			else if (wsum <= 0 && left > 0) /* every stream fits whole at the ideal mix: the rest evenly */
				sts[i].budget += (size_t)(left / (double)n);
		}
	}
}

/* Splits `bytes` over the n streams from `first` (see kv_policy_split_budget). */
static void split_streams(const struct kv_cfg *c, struct kv_seq *s, size_t first, size_t n, size_t bytes)
{
	struct kv_stream *sts = s->streams + first;
	double floor_b = (c->n_sink + c->n_window) * slot_cost(c->hot_fmt, c->page_tokens, s->head_dim);
	double total = 0.0, *w;

	/* a tight budget shrinks the protected window (maintain_round), so no
	 * stream needs more than its share of the protected part */
	{
		double least = (c->n_sink + (c->n_window < 4 ? c->n_window : 4)) *
			       slot_cost(c->hot_fmt, c->page_tokens, s->head_dim);

		floor_b = fmin(floor_b, fmax(least, KV_WINDOW_SHARE * (double)bytes / (double)n));
	}

	if (bytes == 0 || (!c->adaptive && !s->heads_set)) {
		for (size_t i = 0; i < n; i++)
			sts[i].budget = bytes / n;
		return;
	}
	w = tkv_malloc(s->alloc, 2 * n * sizeof *w);
	if (!w) { /* no scratch: fall back to an even split */
		for (size_t i = 0; i < n; i++)
			sts[i].budget = bytes / n;
		return;
	}
	/* adaptive: each stream's effective span, exp(attention entropy) */
	for (size_t i = 0; i < n; i++) {
		const struct kv_stream *st = &sts[i];

		w[i] = !c->adaptive ? 1.0 : st->ent_n ? exp(st->ent_sum / (double)st->ent_n / c->group) : 1.0;
		total += w[i];
	}
	/* a copying head attends narrowly (to the one token it copies), but its
	 * span says nothing of how far back that token may be: its span counts
	 * as at least the mean */
	for (size_t i = 0; i < n; i++) {
		if (sts[i].weight >= KV_COPY_WEIGHT && w[i] < total / (double)n)
			w[i] = total / (double)n;
	}
	total = 0.0;
	for (size_t i = 0; i < n; i++) {
		w[i] *= sts[i].weight;
		total += w[i];
	}
	/* proportional shares above the floor each stream needs for its protected slots */
	{
		double spare = (double)bytes - floor_b * (double)n, fl = fmin(floor_b, (double)bytes / n);
		double *need = w + n;

		if (spare < 0)
			spare = 0;
		if (s->heads_set && spare > 0)
			split_fill(c, s, sts, n, fl, spare, w, need);
		else
			for (size_t i = 0; i < n; i++)
				sts[i].budget = (size_t)(fl + spare * w[i] / total);
	}
	tkv_free(s->alloc, w);
}

/* With sliding layers (window.h): they hold their window whatever the
 * budget and take no part in it; the global layers share what is left, by
 * their plan weights. */
static void split_sliding(const struct kv_cfg *c, struct kv_seq *s, size_t bytes)
{
	size_t held = 0, rest;
	double wsum = 0.0;

	for (uint32_t l = 0; l < s->n_layer; l++) {
		struct kv_stream *st = kv_seq_stream(s, l, 0);

		if (!st->window) {
			wsum += s->layer_weight[l];
			continue;
		}
		for (uint32_t h = 0; h < s->n_kv_head; h++) {
			held += st[h].kv_bytes;
			st[h].budget = 0;
		}
	}
	rest = bytes == 0 ? 0 : bytes > held ? bytes - held : 1;
	for (uint32_t l = 0; l < s->n_layer; l++) {
		double b = wsum > 0 ? (double)rest * s->layer_weight[l] / wsum : 0.0;

		if (!kv_seq_stream(s, l, 0)->window)
			split_streams(c, s, (size_t)l * s->n_kv_head, s->n_kv_head,
				      rest == 0 ? 0 : b < 1.0 ? 1 : (size_t)b);
	}
}

static void split_layers(const struct kv_cfg *c, struct kv_seq *s, size_t bytes)
{
	double wsum = 0.0;

	if (kv_window_any(s)) {
		split_sliding(c, s, bytes);
		return;
	}
	if (!s->plan_set || bytes == 0) {
		split_streams(c, s, 0, (size_t)s->n_layer * s->n_kv_head, bytes);
		return;
	}
	/* a layer plan: each layer's share by its weight, then within the layer */
	for (uint32_t l = 0; l < s->n_layer; l++)
		wsum += s->layer_weight[l];
	for (uint32_t l = 0; l < s->n_layer; l++) {
		double b = wsum > 0 ? (double)bytes * s->layer_weight[l] / wsum : (double)bytes / s->n_layer;

		split_streams(c, s, (size_t)l * s->n_kv_head, s->n_kv_head, b < 1.0 ? 1 : (size_t)b);
	}
}

void kv_policy_split_budget(const struct kv_cfg *c, struct kv_seq *s, size_t bytes)
{
	split_layers(c, s, bytes);
	for (size_t i = 0; i < (size_t)s->n_layer * s->n_kv_head; i++) {
		struct kv_stream *st = &s->streams[i];

		kv_stream_set_hot_fmt(st, hot_fmt_of(c, st->page_tokens, st->budget, s->head_dim));
	}
}

/* ---- maintenance ------------------------------------------------------------- */

struct cand {
	float prio;
	uint32_t page, slot;
	int32_t pos;
	uint8_t fmt;      /* current page format */
	uint8_t target;   /* tier index, or KV_EVICT */
	uint8_t stay;     /* kept where it is */
};

#define KV_EVICT 255

static int cmp_prio_desc(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->prio != y->prio)
		return x->prio > y->prio ? -1 : 1;
	return x->pos > y->pos ? -1 : x->pos < y->pos; /* newer first on ties */
}

/* An unsigned key whose ascending order is cmp_prio_desc's order: the
 * priority's bits made order-preserving and complemented (descending), then
 * the position, complemented too (newer first). */
static uint64_t prio_key(const struct cand *k)
{
	float p = k->prio == 0.0f ? 0.0f : k->prio; /* -0 ties with +0, as in the comparison */
	uint32_t u, q = (uint32_t)k->pos ^ 0x80000000u;

	memcpy(&u, &p, sizeof u);
	u = u & 0x80000000u ? ~u : u | 0x80000000u;
	return (uint64_t)~u << 32 | (uint32_t)~q;
}

/* Sorts n keys ascending and their idx with them: an LSD radix sort, a byte
 * a pass, skipping the bytes every key shares. key and idx hold 2n each
 * (the second halves are scratch). */
static void radix_sort(uint64_t *key, uint32_t *idx, uint32_t n)
{
	for (int shift = 0; shift < 64; shift += 8) {
		uint32_t count[256] = { 0 }, at = 0;
		uint64_t *ko = key + n;
		uint32_t *io = idx + n;

		for (uint32_t i = 0; i < n; i++)
			count[key[i] >> shift & 255]++;
		if (count[key[0] >> shift & 255] == n)
			continue; /* every key has this byte */
		for (int b = 0; b < 256; b++) {
			uint32_t m = count[b];

			count[b] = at;
			at += m;
		}
		for (uint32_t i = 0; i < n; i++) {
			uint32_t o = count[key[i] >> shift & 255]++;

			ko[o] = key[i];
			io[o] = idx[i];
		}
		memcpy(key, ko, (size_t)n * sizeof *key);
		memcpy(idx, io, (size_t)n * sizeof *idx);
	}
}

/* Sorts the candidates as qsort with cmp_prio_desc would: an LSD radix sort
 * of their keys, a byte a pass, skipping the bytes every key shares (the
 * positions' high bytes). qsort's comparisons had cost a round a fifth of its
 * time at 1,500 candidates. Falls back to qsort when scratch is short. */
static void sort_cands(struct kv_seq *s, struct cand *c, uint32_t n)
{
	uint64_t *key = n >= 64 ? tkv_malloc(s->alloc, (size_t)n * 2 * sizeof *key) : NULL;
	uint32_t *idx = key ? tkv_malloc(s->alloc, (size_t)n * 2 * sizeof *idx) : NULL;
	struct cand *tmp = idx ? tkv_malloc(s->alloc, (size_t)n * sizeof *tmp) : NULL;

	if (!tmp) {
		tkv_free(s->alloc, idx);
		tkv_free(s->alloc, key);
		qsort(c, n, sizeof *c, cmp_prio_desc);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		key[i] = prio_key(&c[i]);
		idx[i] = i;
	}
	radix_sort(key, idx, n);
	for (uint32_t i = 0; i < n; i++)
		tmp[i] = c[idx[i]];
	memcpy(c, tmp, (size_t)n * sizeof *c);
	tkv_free(s->alloc, tmp);
	tkv_free(s->alloc, idx);
	tkv_free(s->alloc, key);
}

/* Pools each candidate's priority over its c->pool nearest candidates on
 * each side in position order: it ranks by the mean of its own and the best
 * among them, so a token next to one the attention picked stays with it and
 * what is kept comes in spans (SnapKV's clustering by pooling, here over a
 * stream's ranked slots, the protected ones left out; the mean keeps a
 * token's own rank among its neighbours). See KV_POOL_DEFAULT. */
static int pool_prios(const struct kv_cfg *c, struct kv_seq *s, struct cand *cand, uint32_t n)
{
	uint32_t h = c->pool;
	uint64_t *key = tkv_malloc(s->alloc, (size_t)n * 2 * sizeof *key);
	uint32_t *idx = key ? tkv_malloc(s->alloc, (size_t)n * 2 * sizeof *idx) : NULL;
	float *best = idx ? tkv_malloc(s->alloc, (size_t)n * sizeof *best) : NULL;

	if (!best) {
		tkv_free(s->alloc, idx);
		tkv_free(s->alloc, key);
		return TKV_ERR_NOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		key[i] = (uint32_t)cand[i].pos; /* positions are never negative */
		idx[i] = i;
	}
	radix_sort(key, idx, n);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t lo = i > h ? i - h : 0, hi = n - 1 - i > h ? i + h : n - 1;
		float own = cand[idx[i]].prio, m = own;

		for (uint32_t k = lo; k <= hi; k++)
			if (cand[idx[k]].prio > m)
				m = cand[idx[k]].prio;
		best[i] = 0.5f * (own + m);
	}
	for (uint32_t i = 0; i < n; i++)
		cand[idx[i]].prio = best[i];
	tkv_free(s->alloc, best);
	tkv_free(s->alloc, idx);
	tkv_free(s->alloc, key);
	return TKV_OK;
}

static int cmp_pos(const void *a, const void *b)
{
	const struct cand *x = *(const struct cand *const *)a, *y = *(const struct cand *const *)b;

	return (x->pos > y->pos) - (x->pos < y->pos);
}

static float cosine(const float *a, const float *b, uint32_t d)
{
	double ab = 0, aa = 0, bb = 0;

	for (uint32_t i = 0; i < d; i++) {
		ab += (double)a[i] * b[i];
		aa += (double)a[i] * a[i];
		bb += (double)b[i] * b[i];
	}
	return aa > 0 && bb > 0 ? (float)(ab / sqrt(aa * bb)) : 0.0f;
}

/* Whether the priority uses the keys' similarity to the centroid. */
static bool prio_semantic(const struct kv_cfg *c)
{
	return c->prio == KV_PRIO_SEMANTIC || (c->prio == KV_PRIO_MEAN_SEM && c->semantic_weight != 0.0f);
}

/* Keys loaded at a time for their similarities: 16 KiB of floats. */
#define SIM_FLOATS 4096

/* The cosines of slots [j0, j0 + n) of pg's keys to c (norm cn > 0), in
 * floats: eight partial sums a vector, so that the compiler keeps them in
 * registers (with cosine()'s double loop over unpacked keys a round's
 * ranking took 290 us at head size 64 and 1,500 candidates, this way 217).
 * n * d <= SIM_FLOATS. */
static void page_sims(const struct kv_page *pg, uint32_t j0, uint32_t n, const float *c, float cn, float *sim)
{
	uint32_t d = pg->head_dim;
	float K[SIM_FLOATS];

	kv_tier_load_k_slots(pg->fmt, pg->k, pg->cap, d, j0, n, K);
	for (uint32_t j = 0; j < n; j++) {
		const float *k = K + (size_t)j * d;
		float ab[8] = { 0 }, aa[8] = { 0 }, sab = 0.0f, saa = 0.0f;
		uint32_t i = 0;

		if (pg->flags & KV_PAGE_ROT)
			kv_unrotate(K + (size_t)j * d, d);
		for (; i + 8 <= d; i += 8)
			for (int l = 0; l < 8; l++) {
				ab[l] += k[i + l] * c[i + l];
				aa[l] += k[i + l] * k[i + l];
			}
		for (; i < d; i++) {
			sab += k[i] * c[i];
			saa += k[i] * k[i];
		}
		for (int l = 0; l < 8; l++) {
			sab += ab[l];
			saa += aa[l];
		}
		sim[j] = saa > 0.0f && cn > 0.0f ? sab / (sqrtf(saa) * cn) : 0.0f;
	}
}

/* The slot's priority; sim is its key's similarity to the centroid when
 * prio_semantic(c) (page_sims), else unused. */
static float priority(const struct kv_cfg *c, const struct kv_seq *s, const struct kv_stream *st,
		      const struct kv_page *pg, uint32_t j, int32_t pos, float sim)
{
	float age = (float)(s->n_pos - pos);
	/* a shared slot's direction is in the layer below: neutral similarity */
	bool sem = pg->fmt != KV_FMT_REF;

	if (age < 1.0f)
		age = 1.0f;
	switch (c->prio) {
	case KV_PRIO_POS:
		return (float)pos;
	case KV_PRIO_ACC:
	case KV_PRIO_LAST:
		return kv_slot_score(pg, j);
	case KV_PRIO_MEAN:
		return kv_slot_score(pg, j) / age;
	case KV_PRIO_SEMANTIC:
		return sem ? sim : 0.0f;
	case KV_PRIO_MEAN_SEM: {
		/* attention per query relative to a fair share (1 = average), shaded
		 * by the key's similarity to the core vector, plus recency */
		float att = kv_slot_score(pg, j) / age * (float)st->n_tokens / (float)c->group;
		float rec = s->n_pos > 0 ? (float)pos / (float)s->n_pos : 0.0f;

		if (c->semantic_weight != 0.0f && sem)
			att *= 1.0f + c->semantic_weight * sim;
		return att + c->recency_weight * rec;
	}
	}
	return 0.0f;
}

/* Tier boundaries for n kept ranks at richness x in [0, 1]: ranks below b[t]
 * are stored at tier t or better; b[n_tiers-1] = n. x = 1 is the policy's
 * ideal mix; lower x shifts slots toward the cheapest tier. */
static void plan_bounds(const struct kv_cfg *c, uint32_t n, double x, uint32_t *b)
{
	double cum = 0.0;

	for (uint32_t t = 0; t + 1 < c->n_tiers; t++) {
		cum += c->tier_frac[t];
		b[t] = (uint32_t)fmin((double)n, floor(x * cum * n + 0.5));
	}
	b[c->n_tiers - 1] = n;
}

static double plan_cost(const struct kv_cfg *c, const double *cost, const uint32_t *b)
{
	double total = 0.0;
	uint32_t prev = 0;

	for (uint32_t t = 0; t < c->n_tiers; t++) {
		total += (double)(b[t] - prev) * cost[t];
		prev = b[t];
	}
	return total;
}

/* The bounds at the largest x in [lo, hi] whose plan fits `room` (the plan
 * at lo fits, the one at hi does not), by 30 bisections. */
static void plan_fit(const struct kv_cfg *c, const double *cost, uint32_t n, double room, double lo, double hi,
		     uint32_t *b)
{
	for (int it = 0; it < 30; it++) {
		double mid = (lo + hi) / 2;

		plan_bounds(c, n, mid, b);
		if (plan_cost(c, cost, b) <= room)
			lo = mid;
		else
			hi = mid;
	}
	plan_bounds(c, n, lo, b);
}

/* The plan for n candidates (ranked) and `room` bytes, as a ladder: the ideal
 * mix if it fits; else every slot kept with the mix shifted toward the
 * cheapest tier (hot slots demote before anything is evicted); else the
 * cheapest tier only, evicting the lowest ranks. */
static void plan(const struct kv_cfg *c, const double *cost, uint32_t n, double room, uint32_t *b)
{
	double lo = 0.0, hi = 1.0;
	uint32_t keep;

	plan_bounds(c, n, 1.0, b);
	if (plan_cost(c, cost, b) <= room) {
		/* room to spare: the mix shifts toward the most precise tier until
		 * it fills the room (all of it at x = 1 / tier_frac[0]), so that a
		 * round does not leave the stream far below its budget */
		if (c->n_tiers > 1 && c->tier_frac[0] > 0) {
			lo = 1.0;
			hi = 1.0 / c->tier_frac[0];
			plan_bounds(c, n, hi, b);
			if (plan_cost(c, cost, b) <= room)
				return;
			plan_fit(c, cost, n, room, lo, hi, b);
		}
		return;
	}
	plan_bounds(c, n, 0.0, b);
	if (c->n_tiers > 1 && plan_cost(c, cost, b) <= room) {
		plan_fit(c, cost, n, room, lo, hi, b);
		return;
	}
	keep = room <= 0 ? 0 : (uint32_t)fmin((double)n, floor(room / cost[c->n_tiers - 1]));
	for (uint32_t t = 0; t < c->n_tiers; t++)
		b[t] = keep;
	/* the most precise tiers stay empty: everything kept is cheapest */
	for (uint32_t t = 0; t + 1 < c->n_tiers; t++)
		b[t] = 0;
}

static uint8_t tier_of_rank(const struct kv_cfg *c, const uint32_t *b, uint32_t r)
{
	for (uint32_t t = 0; t < c->n_tiers; t++)
		if (r < b[t])
			return (uint8_t)t;
	return KV_EVICT;
}

/* A slot being moved: its data in model space until it lands in its new page. */
struct moved {
	float *k, *v;     /* (d) each */
	int32_t pos;
	float score;
	uint8_t target;
};

static int cmp_moved_pos(const void *a, const void *b)
{
	const struct moved *x = a, *y = b;

	return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Keys must be this alike (cosine) for a merge: averaging the values of keys
 * that point elsewhere moves attention mass to the wrong content. */
#define KV_MERGE_MIN_COS 0.9f

/* Semantic completion: merges evicted slot e's value into the most similar
 * (key cosine) of its kept neighbours by position, weighted by priority, so
 * the attention mass e carried still reaches its content. Neighbours that stay
 * where they are get the merged value in place (values are per slot in every
 * format). */
static void complete(struct kv_seq *s, struct kv_stream *st, const struct cand *e,
		     struct cand *const *by_pos, uint32_t n_by_pos)
{
	uint32_t d = s->head_dim, lo = 0, hi = n_by_pos;
	float ke[KV_MAX_HEAD_DIM], ve[KV_MAX_HEAD_DIM], kb[KV_MAX_HEAD_DIM], vb[KV_MAX_HEAD_DIM];
	float best_sim = KV_MERGE_MIN_COS;
	const struct cand *best = NULL;
	struct kv_page *pe = st->pages[e->page], *pk;
	float we, wk, a, b;

	if (pe->fmt == KV_FMT_REF) /* its direction is in the layer below */
		return;
	kv_page_load_k(pe, e->slot, ke);
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (by_pos[mid]->pos < e->pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (uint32_t off = 0; off < 8; off++) {
		for (int side = 0; side < 2; side++) {
			int64_t i = side ? (int64_t)lo + off : (int64_t)lo - 1 - (int64_t)off;
			const struct cand *k;
			float sim;

			if (i < 0 || i >= (int64_t)n_by_pos)
				continue;
			k = by_pos[i];
			if (st->pages[k->page]->fmt == KV_FMT_REF)
				continue;
			kv_page_load_k(st->pages[k->page], k->slot, kb);
			sim = cosine(ke, kb, d);
			if (sim > best_sim) {
				best_sim = sim;
				best = k;
			}
		}
	}
	if (!best)
		return;
	pk = st->pages[best->page];
	kv_page_load_v(pe, e->slot, ve);
	kv_page_load_v(pk, best->slot, vb);
	we = e->prio > 1e-12f ? e->prio : 1e-12f;
	wk = best->prio > 1e-12f ? best->prio : 1e-12f;
	a = wk / (wk + we);
	b = we / (wk + we);
	for (uint32_t i = 0; i < d; i++)
		vb[i] = a * vb[i] + b * ve[i];
	if (pk->flags & KV_PAGE_ROT)
		kv_rotate(vb, d);
	kv_tier_store_v(pk->fmt, pk->v, pk->cap, d, best->slot, vb);
	pk->flags |= KV_PAGE_DIRTY;
	kv_slot_set_score(pk, best->slot, kv_slot_score(pk, best->slot) + kv_slot_score(pe, e->slot));
	st->merged++;
}

/* Moved slots into pages of the stream's with room, per-slot formats: each
 * page with room is filled in turn. Returns how many landed. */
static uint32_t top_up_rows(struct kv_seq *s, struct kv_stream *st, uint32_t fmt, bool rot, struct moved *mv,
			    uint32_t n_mv)
{
	uint32_t d = s->head_dim, done = 0;

	for (uint32_t p = 0; p < st->n_pages && done < n_mv; p++) {
		struct kv_page *pg = st->pages[p];
		uint32_t n = pg->n_used;

		if (pg->fmt != fmt || n == pg->cap || (bool)(pg->flags & KV_PAGE_ROT) != rot || !kv_stream_tops_up(st, pg))
			continue;
		while (n < pg->cap && done < n_mv && kv_page_takes_pos(pg, mv[done].pos)) {
			struct moved *m = &mv[done++];

			if (rot) {
				kv_rotate(m->k, d);
				kv_rotate(m->v, d);
			}
			kv_tier_store(fmt, pg->k, pg->v, pg->cap, d, n, m->k, m->v);
			kv_slot_set_pos(pg, n, m->pos);
			kv_slot_set_score(pg, n, m->score);
			n++;
		}
		kv_stream_set_used(s, st, pg, n);
	}
	return done;
}

/* Re-packs packed page p of stream st with its slots and moved slots
 * mv[0, add), sorted by position when the page keeps them so (a bitmap),
 * in place (grow false: the page has room for them) or into a bigger copy
 * (grow: a page of exactly n_used + add slots that replaces it, on its grid
 * where that covers the new slots). K and V: scratch for a full page. False
 * when the pool or scratch refuses (nothing changed then). */
static bool pack_with(struct kv_seq *s, struct kv_stream *st, uint32_t p, bool rot, struct moved *mv, uint32_t add,
		      bool grow, float *K, float *V)
{
	struct kv_page *pg = st->pages[p], *np = pg;
	uint32_t d = s->head_dim, n = pg->n_used, t = n + add, fmt = pg->fmt;
	int32_t lo = mv[0].pos, hi = mv[add - 1].pos; /* mv is by position */
	int32_t *pos = tkv_malloc(s->alloc, (size_t)t * sizeof *pos);
	uint16_t *sc = tkv_malloc(s->alloc, (size_t)t * sizeof *sc);
	uint32_t *idx = tkv_malloc(s->alloc, (size_t)t * sizeof *idx);
	int why = TKV_OK;
	bool ok = false;

	if (!pos || !sc || !idx)
		goto out;
	for (uint32_t j = 0; j < n; j++) {
		pos[j] = kv_slot_pos(pg, j);
		sc[j] = kv_page_scores(pg)[j];
		lo = pos[j] < lo ? pos[j] : lo;
		hi = pos[j] > hi ? pos[j] : hi;
	}
	if (grow) {
		if (!(np = kv_stream_new_page_for(s, st, fmt, t, lo, hi, &why)))
			goto out;
		np->flags |= (uint8_t)(KV_PAGE_DIRTY | (rot ? KV_PAGE_ROT : 0));
	}
	kv_tier_load_k_slots(fmt, pg->k, pg->cap, d, 0, n, K);
	kv_tier_load_v_slots(fmt, pg->v, pg->cap, d, 0, n, V);
	for (uint32_t j = 0; j < add; j++) {
		memcpy(K + (size_t)(n + j) * d, mv[j].k, d * sizeof(float));
		memcpy(V + (size_t)(n + j) * d, mv[j].v, d * sizeof(float));
		if (rot) {
			kv_rotate(K + (size_t)(n + j) * d, d);
			kv_rotate(V + (size_t)(n + j) * d, d);
		}
		pos[n + j] = mv[j].pos;
		sc[n + j] = kv_score_enc(mv[j].score);
	}
	kv_page_set_rows(np, K, V, pos, sc, t, idx);
	if (grow)
		kv_tier_copy_params(fmt, np->k, np->v, pg->k, pg->v, d);
	kv_tier_repack(fmt, np->k, np->v, np->cap, d, K, V, t);
	if (grow) {
		kv_stream_set_used(s, st, pg, 0);
		st->pages[p] = np;
		kv_pool_put(s->pool, pg);
	}
	kv_stream_set_used(s, st, np, t);
	ok = true;
out:
	tkv_free(s->alloc, idx);
	tkv_free(s->alloc, sc);
	tkv_free(s->alloc, pos);
	return ok;
}

/* Moved slots into one partial page of a packed format, re-packed with them
 * (its slots keep their codes where its grid covers the new ones; K and V:
 * scratch for a page), or into a bigger copy of a right-sized one (a page
 * of the slots it holds, grown to take the new ones: pack_with). Returns
 * how many landed. */
static uint32_t top_up_packed(struct kv_seq *s, struct kv_stream *st, uint32_t fmt, bool rot, struct moved *mv,
			      uint32_t n_mv, float *K, float *V)
{
	uint32_t full = fmt_cap(st, fmt);

	for (uint32_t p = 0; p < st->n_pages; p++) {
		struct kv_page *pg = st->pages[p];
		uint32_t n = pg->n_used, add;

		if (pg->fmt != fmt || (bool)(pg->flags & KV_PAGE_ROT) != rot || !kv_stream_tops_up(st, pg) ||
		    (pg->flags & KV_PAGE_FROZEN))
			continue;
		if (n == pg->cap) {
			/* a right-sized page: grown into a new one (wide when the
			 * stream is), which takes any of the stream's positions */
			if (pg->cap >= full)
				continue;
			add = full - n < n_mv ? full - n : n_mv;
			if (pack_with(s, st, p, rot, mv, add, true, K, V))
				return add;
			continue;
		}
		/* the slots its position form takes, from the first */
		for (add = 0; add < pg->cap - n && add < n_mv && kv_page_takes_pos(pg, mv[add].pos); add++)
			;
		if (add == 0)
			continue;
		if (pack_with(s, st, p, rot, mv, add, false, K, V))
			return add;
	}
	return 0;
}

/* Moved slots into new pages: full-size ones for the bulk, a small one for
 * the rest (per-slot formats: with the room kv_stream_tail_cap allows; q4/q2:
 * exactly the rest, grown by later rounds - pack_with - so a stream's
 * partly filled q4 page is never half empty, its per-channel parameters
 * paid once). Returns how many landed; *why says why the rest did not. */
static uint32_t land_new(struct kv_seq *s, struct kv_stream *st, uint32_t fmt, bool rot, struct moved *mv,
			 uint32_t n_mv, float *K, float *V, int *why)
{
	uint32_t d = s->head_dim, cap = fmt_cap(st, fmt), done = 0;

	while (done < n_mv) {
		uint32_t n = n_mv - done < cap ? n_mv - done : cap;
		/* a packed remainder gets a page of its slots only: the next
		 * round grows it (pack_with) */
		uint32_t pc = n == cap ? cap : kv_fmt_packed(fmt) ? n : kv_stream_tail_cap(s, st, fmt, n, cap);
		/* mv is by position (land): the page's positions span this */
		struct kv_page *pg = kv_stream_new_page_for(s, st, fmt, pc, mv[done].pos, mv[done + n - 1].pos, why);

		if (!pg)
			break;
		if (kv_stream_add_page(s, st, pg)) {
			kv_pool_put(s->pool, pg);
			*why = TKV_ERR_NOMEM;
			break;
		}
		if (pc < cap && !kv_fmt_packed(fmt)) {
			st->n_small++;
			st->small_slots += pc;
		}
		if (rot)
			pg->flags |= KV_PAGE_ROT;
		for (uint32_t j = 0; j < n; j++) {
			struct moved *m = &mv[done + j];

			if (rot) {
				kv_rotate(m->k, d);
				kv_rotate(m->v, d);
			}
			kv_slot_set_pos(pg, j, m->pos);
			kv_slot_set_score(pg, j, m->score);
			if (!kv_fmt_packed(fmt)) {
				kv_tier_store(fmt, pg->k, pg->v, pc, d, j, m->k, m->v);
			} else {
				memcpy(K + (size_t)j * d, m->k, d * sizeof(float));
				memcpy(V + (size_t)j * d, m->v, d * sizeof(float));
			}
		}
		if (kv_fmt_packed(fmt))
			kv_tier_pack(fmt, pg->k, pg->v, pc, d, K, V, n);
		kv_stream_set_used(s, st, pg, n);
		done += n;
	}
	return done;
}

/* Writes moved slots of one target format into pages: per-slot formats fill
 * pages with room first; packed formats re-pack a partial page together with
 * the new slots, then fill new pages. Slots that cannot get a page (the pool is
 * at its budget) are dropped and counted as evicted. */
static int land(const struct kv_cfg *c, struct kv_seq *s, struct kv_stream *st, uint32_t fmt,
		struct moved *mv, uint32_t n_mv, float *K, float *V)
{
	bool rot = c->rotate && fmt != c->hot_fmt && fmt != st->hot_fmt;
	uint32_t done;
	int why = TKV_OK;

	/* by position, so a page takes neighbours (compact position offsets) */
	qsort(mv, n_mv, sizeof *mv, cmp_moved_pos);
	done = kv_fmt_packed(fmt) ? top_up_packed(s, st, fmt, rot, mv, n_mv, K, V) : top_up_rows(s, st, fmt, rot, mv, n_mv);
	done += land_new(s, st, fmt, rot, mv + done, n_mv - done, K, V, &why);
	if (done < n_mv) {
		st->evicted += n_mv - done;
		st->demoted -= n_mv - done;
		return why == TKV_ERR_NOMEM ? TKV_ERR_NOMEM : TKV_OK;
	}
	return TKV_OK;
}

/* Whether position pos is a sink or in the recent window of n_window. */
static bool protected_pos(const struct kv_cfg *c, const struct kv_seq *s, int32_t pos, uint32_t n_window)
{
	return (uint32_t)pos < c->n_sink || pos >= s->n_pos - (int32_t)n_window;
}

/* Moves the protected slots (sinks, window) of a tight stream that are
 * stored more precisely than its hot format into it. Each one is written
 * into a hot page with room (a new one when none has) before it leaves its
 * page, so when the pool refuses a page it simply stays where it is. Returns
 * how many moved. */
static uint32_t convert_protected(const struct kv_cfg *c, struct kv_seq *s, struct kv_stream *st, uint32_t n_window)
{
	uint32_t moved = 0, left = 0;

	if (st->hot_fmt == c->hot_fmt)
		return 0;
	for (int pass = 0; pass < 2; pass++) { /* count, then move */
		for (uint32_t p = 0; p < st->n_pages; p++) {
			struct kv_page *pg = st->pages[p];

			if (pg->fmt >= st->hot_fmt || (pg->flags & KV_PAGE_FROZEN))
				continue;
			/* from the last slot down: a removal moves the last one in */
			for (uint32_t j = pg->n_used; j-- > 0;) {
				float k[KV_MAX_HEAD_DIM], v[KV_MAX_HEAD_DIM];
				struct kv_page *to;

				if (!protected_pos(c, s, kv_slot_pos(pg, j), n_window))
					continue;
				if (pass == 0) {
					left++;
					continue;
				}
				if (!(to = kv_stream_hot_page(s, st, left)))
					return moved;
				kv_page_load_k(pg, j, k);
				kv_page_load_v(pg, j, v);
				kv_page_store(to, to->n_used, kv_slot_pos(pg, j), k, v);
				kv_slot_copy(to, to->n_used, pg, j, 1);
				kv_stream_set_used(s, st, to, to->n_used + 1);
				kv_stream_remove_slot(s, st, p, j);
				st->demoted++;
				moved++;
				left--;
			}
		}
		if (left == 0)
			break;
	}
	return moved;
}

/* One maintenance round's work. */
struct round {
	struct cand *cand;       /* [n_cand] the unprotected slots, best first once ranked */
	struct cand **by_pos;    /* candidates that stay, by position (completion) */
	uint32_t n_cand;
	uint32_t n_keep;         /* ranks kept; the rest are evicted */
	uint32_t n_window;       /* recent positions protected this round */
	double prot_bytes;       /* what the protected slots cost */
	struct moved *mv;        /* [n_mv] slots changing tier, lifted out in model space */
	uint32_t n_mv;
	float *buf;              /* (n_mv, 2, d) their keys and values */
	float *K, *V;            /* (page cap, d) scratch for land() */
	uint32_t *rm;            /* [n_cand] ranks leaving their pages */
	bool no_compact;         /* scratch failed before anything moved: stop there */
};

static void round_free(struct kv_seq *s, struct round *r)
{
	tkv_free(s->alloc, r->rm);
	tkv_free(s->alloc, r->V);
	tkv_free(s->alloc, r->K);
	tkv_free(s->alloc, r->buf);
	tkv_free(s->alloc, r->mv);
	tkv_free(s->alloc, r->by_pos);
	tkv_free(s->alloc, r->cand);
}

/* Phase 1, rank: every slot outside the sinks and the recent window is a
 * candidate, by priority (protected ones more precise than a tight
 * stream's hot format are counted at it: convert_protected moves them there
 * after the round). */
static int rank(const struct kv_cfg *c, struct kv_seq *s, struct kv_stream *st, double target, struct round *r)
{
	uint32_t d = s->head_dim, chunk = SIM_FLOATS / d;
	bool sem = prio_semantic(c);
	float sim[SIM_FLOATS], cn = 0.0f;

	for (uint32_t i = 0; sem && i < d; i++)
		cn += st->centroid[i] * st->centroid[i];
	cn = sqrtf(cn);
	r->cand = tkv_malloc(s->alloc, (size_t)st->n_tokens * sizeof *r->cand);
	r->by_pos = tkv_malloc(s->alloc, (size_t)st->n_tokens * sizeof *r->by_pos);
	if (!r->cand || !r->by_pos)
		return TKV_ERR_NOMEM;
	r->n_window = isfinite(target) ? window_of(c, st->hot_fmt, st->page_tokens, st->budget, d) : c->n_window;
	for (uint32_t p = 0; p < st->n_pages; p++) {
		const struct kv_page *pg = st->pages[p];
		bool conv = pg->fmt < st->hot_fmt && !(pg->flags & KV_PAGE_FROZEN);

		bool page_sem = sem && pg->fmt != KV_FMT_REF;

		for (uint32_t j = 0; j < pg->n_used; j++) {
			struct cand *k = &r->cand[r->n_cand];

			if (page_sem && j % chunk == 0)
				page_sims(pg, j, pg->n_used - j < chunk ? pg->n_used - j : chunk, st->centroid, cn, sim);
			int32_t pos = kv_slot_pos(pg, j);

			if (protected_pos(c, s, pos, r->n_window) || (pg->flags & KV_PAGE_FROZEN)) {
				r->prot_bytes += conv ? slot_cost(st->hot_fmt, fmt_cap(st, st->hot_fmt), d)
						      : slot_cost(pg->fmt, pg->cap, d);
				continue;
			}
			k->prio = priority(c, s, st, pg, j, pos, page_sem ? sim[j % chunk] : 0.0f);
			k->page = p;
			k->slot = j;
			k->pos = pos;
			k->fmt = pg->fmt;
			r->n_cand++;
		}
	}
	/* a copying head keeps tokens nothing attends to yet: no spans there */
	if (c->pool && r->n_cand > 1 && st->weight < KV_COPY_WEIGHT) {
		int rc = pool_prios(c, s, r->cand, r->n_cand);

		if (rc)
			return rc;
	}
	sort_cands(s, r->cand, r->n_cand);
	return TKV_OK;
}

/* Phase 2, choose: the tier of every rank for a target of `target` K+V
 * bytes, as a ladder over the tiers (plan); counts the slots that move. */
static void choose(const struct kv_cfg *c, const struct kv_seq *s, const struct kv_stream *st, double target,
		   struct round *r)
{
	double cost[KV_MAX_TIERS];
	uint32_t hi = r->n_cand, bounds[KV_MAX_TIERS];

	for (uint32_t t = 0; t < c->n_tiers; t++)
		cost[t] = slot_cost(tier_fmt(c, st, t), fmt_cap(st, tier_fmt(c, st, t)), s->head_dim);
	/* attn-threshold: slots under threshold x their fair share go regardless */
	if (c->drop_below) {
		float fair = (float)c->group / (float)st->n_tokens;

		while (hi > 0 && r->cand[hi - 1].prio < c->threshold * fair)
			hi--;
	}
	plan(c, cost, hi, target - r->prot_bytes, bounds);
	r->n_keep = bounds[c->n_tiers - 1];
	for (uint32_t i = 0; i < r->n_cand; i++) {
		struct cand *k = &r->cand[i];
		uint8_t t = tier_of_rank(c, bounds, i);

		/* formats are numbered from most to least precise; a slot already
		 * stored at or below its tier's precision stays: never promote */
		k->target = t;
		k->stay = t != KV_EVICT && tier_fmt(c, st, t) <= k->fmt;
		if (t != KV_EVICT && !k->stay)
			r->n_mv++;
	}
}

/* Phase 3, semantic completion, before anything moves: each evicted slot's
 * value merges into a staying neighbour. */
static void complete_evicted(struct kv_seq *s, struct kv_stream *st, struct round *r)
{
	uint32_t n_by_pos = 0;

	for (uint32_t i = 0; i < r->n_cand; i++)
		if (r->cand[i].stay)
			r->by_pos[n_by_pos++] = &r->cand[i];
	qsort(r->by_pos, n_by_pos, sizeof *r->by_pos, cmp_pos);
	for (uint32_t i = r->n_keep; i < r->n_cand; i++)
		if (r->cand[i].target == KV_EVICT)
			complete(s, st, &r->cand[i], r->by_pos, n_by_pos);
}

/* Phase 4, lift: the moving slots' keys and values, in model space. */
static int lift_moving(struct kv_seq *s, const struct kv_stream *st, struct round *r)
{
	uint32_t d = s->head_dim, cap_max = st->low_cap > st->page_tokens ? st->low_cap : st->page_tokens, n = 0;

	if (!r->n_mv)
		return TKV_OK;
	r->mv = tkv_malloc(s->alloc, (size_t)r->n_mv * sizeof *r->mv);
	r->buf = tkv_malloc(s->alloc, (size_t)r->n_mv * 2 * d * sizeof(float));
	r->K = tkv_malloc(s->alloc, (size_t)cap_max * d * sizeof(float));
	r->V = tkv_malloc(s->alloc, (size_t)cap_max * d * sizeof(float));
	if (!r->mv || !r->buf || !r->K || !r->V)
		return TKV_ERR_NOMEM;
	for (uint32_t i = 0; i < r->n_cand; i++) {
		const struct cand *k = &r->cand[i];
		const struct kv_page *pg = st->pages[k->page];
		struct moved *m = &r->mv[n];

		if (k->target == KV_EVICT || k->stay)
			continue;
		m->k = r->buf + (size_t)n * 2 * d;
		m->v = m->k + d;
		kv_page_load_k(pg, k->slot, m->k);
		kv_page_load_v(pg, k->slot, m->v);
		m->pos = k->pos;
		m->score = kv_slot_score(pg, k->slot);
		m->target = k->target;
		n++;
	}
	r->n_mv = n;
	return TKV_OK;
}

/* Phase 5, remove: moved and evicted slots leave their pages, page by page
 * from the highest slot down (a removal moves the page's last slot in). */
static int remove_leaving(struct kv_seq *s, struct kv_stream *st, struct round *r)
{
	const struct cand *cand = r->cand;
	uint32_t n_rm = 0;

	r->rm = tkv_malloc(s->alloc, (size_t)r->n_cand * sizeof *r->rm);
	if (!r->rm)
		return TKV_ERR_NOMEM;
	for (uint32_t i = 0; i < r->n_cand; i++) {
		if (cand[i].stay)
			continue;
		if (cand[i].target == KV_EVICT)
			st->evicted++;
		else
			st->demoted++;
		r->rm[n_rm++] = i;
	}
	/* order (page asc, slot desc) so each removal leaves the others valid */
	for (uint32_t i = 1; i < n_rm; i++) {
		uint32_t x = r->rm[i], j = i;

		while (j > 0 && (cand[r->rm[j - 1]].page > cand[x].page ||
				 (cand[r->rm[j - 1]].page == cand[x].page && cand[r->rm[j - 1]].slot < cand[x].slot))) {
			r->rm[j] = r->rm[j - 1];
			j--;
		}
		r->rm[j] = x;
	}
	for (uint32_t i = 0; i < n_rm; i++)
		kv_stream_remove_slot(s, st, cand[r->rm[i]].page, cand[r->rm[i]].slot);
	return TKV_OK;
}

/* Phase 6, land: the moved slots go into pages of their new tiers, tier by
 * tier. A failed landing leaves the later tiers' slots nowhere: they are
 * gone (counted as evicted). */
static int land_moved(const struct kv_cfg *c, struct kv_seq *s, struct kv_stream *st, struct round *r)
{
	struct moved *mv = r->mv;
	uint32_t n_mv = r->n_mv;
	int rc = TKV_OK;

	for (uint32_t t = 0; t < c->n_tiers && rc == TKV_OK && n_mv; t++) {
		uint32_t n = 0;

		for (uint32_t i = 0; i < n_mv; i++)
			if (mv[i].target == t) {
				struct moved tmp = mv[n];

				mv[n] = mv[i];
				mv[i] = tmp;
				n++;
			}
		if (n)
			rc = land(c, s, st, tier_fmt(c, st, t), mv, n, r->K, r->V);
		/* the rest move on: shift the landed ones out */
		memmove(mv, mv + n, (size_t)(n_mv - n) * sizeof *mv);
		n_mv -= n;
	}
	st->evicted += n_mv;
	st->demoted -= n_mv;
	return rc;
}

/* One round: rank, choose tiers for a target of `target` K+V bytes, apply;
 * then a tight stream's protected slots move to its hot format and the
 * stream is compacted. */
static int maintain_round(const struct kv_cfg *c, struct kv_seq *s, struct kv_stream *st, double target)
{
	struct round r;
	int rc;

	if (st->n_tokens == 0)
		return TKV_OK;
	memset(&r, 0, sizeof r);
	rc = rank(c, s, st, target, &r);
	if (rc == TKV_OK && r.n_cand) {
		choose(c, s, st, target, &r);
		if (c->completion)
			complete_evicted(s, st, &r);
		rc = lift_moving(s, st, &r);
		if (rc == TKV_OK)
			rc = remove_leaving(s, st, &r);
		r.no_compact = rc != TKV_OK;
		if (rc == TKV_OK)
			rc = land_moved(c, s, st, &r);
	}
	if (rc == TKV_OK && convert_protected(c, s, st, r.n_window))
		r.n_cand++; /* something moved: compact */
	/* evictions leave holes and a page only returns once empty: pack them */
	if (!r.no_compact && r.n_cand && kv_stream_compact(s, st) && rc == TKV_OK)
		rc = TKV_ERR_NOMEM;
	round_free(s, &r);
	return rc;
}

int kv_policy_maintain(const struct kv_cfg *c, struct kv_seq *s, struct kv_stream *st)
{
	double slack, target, step = 0.0;
	int rc = TKV_OK;

	if (!c->evicts || st->window)
		return TKV_OK; /* a sliding stream keeps its window (window.h) */
	if (st->budget == 0 || st->kv_bytes <= st->budget) {
		if (!c->always)
			return TKV_OK;
		/* new low-format pages can take the stream past its budget */
		rc = maintain_round(c, s, st, INFINITY);
		if (rc || st->budget == 0 || st->kv_bytes <= st->budget)
			return rc;
	}
	/* shared prefix pages are protected; when they alone break the budget,
	 * this sequence takes private copies it may then shrink (copy-on-write) */
	{
		size_t frozen = 0;

		for (uint32_t i = 0; i < st->n_pages; i++)
			if (st->pages[i]->flags & KV_PAGE_FROZEN)
				frozen += kv_page_share(st->pages[i], st->pages[i]->n_used);
		if (frozen && frozen + (size_t)c->n_window * (size_t)slot_cost(c->hot_fmt, c->page_tokens, s->head_dim) >
				      st->budget) {
			for (uint32_t i = 0; i < st->n_pages && rc == TKV_OK; i++)
				if (st->pages[i]->flags & KV_PAGE_FROZEN) {
					rc = kv_stream_cow(s, st, i);
					if (rc == TKV_OK)
						st->cow++;
				}
			if (rc == TKV_ERR_KV_FULL)
				rc = TKV_OK; /* no room to copy: keep sharing */
		}
	}
	/* aim a page below the budget so the next tokens fit without another round */
	slack = s->slack > 0 ? (double)s->slack * (double)st->budget
			     : maint_slack(st->hot_fmt, st->page_tokens, st->budget, s->head_dim);
	target = (double)st->budget - slack;
	/* a round can land over the budget (compaction's right-sized q4/q2 page
	 * spreads its per-channel parameters over fewer slots than the plan's
	 * full-size pages): while over, tighten by the overshoot, at least a
	 * step, until nothing unprotected is left to give. The step is the
	 * dearest page, at most an eighth of the budget: a whole page took a
	 * small stream's target below zero at once, and the round after it
	 * evicted every unprotected slot (a 64-slot q8 page at head size 8 is
	 * 1,280 bytes; under --kv-mem of 1/8 of a 200-token text a stream's
	 * budget is about 400) */
	for (uint32_t t = 0; t < c->n_tiers; t++)
		step = fmax(step, (double)kv_page_kv_bytes(fmt_cap(st, tier_fmt(c, st, t)), s->head_dim,
							   tier_fmt(c, st, t)));
	step = fmin(step, (double)st->budget / 8.0);
	while (st->kv_bytes > st->budget && rc == TKV_OK) {
		rc = maintain_round(c, s, st, target);
		if (target < 0)
			break;
		target -= fmax((double)st->kv_bytes - (double)st->budget, step);
	}
	return rc;
}
