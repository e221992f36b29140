/* heads.c - head plans: each KV head's share of a sequence's budget, and the
 * probe that finds the heads that copy from far back (tierkv.h).
 *
 * A needle is a token nothing in the haystack attends to, so a query-agnostic
 * policy cannot tell it from filler by the attention it receives. What
 * retrieves it at the question is a few induction heads: they find the
 * earlier occurrence of what they read and attend to what followed it. The
 * probe measures that directly, on random tokens: R R against R R', the same
 * first half; the attention the second half gives the first is the same in
 * both runs for a head that does not copy, and near 1 higher with R for one
 * that does. Those heads get the larger share of every budget (up to what
 * keeps the whole sequence at the policy's ideal mix, policy.c), so they
 * keep the haystack while the others keep less. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "kv/pool.h"
#include "kv/seq.h"
#include "util/alloc.h"
#include "util/status.h"

/* The mix an AUTO plan uses: the plan's, or its policy's default. */
static float head_mix(const struct tkv_engine *e)
{
	float m = e->params.head_plan.mix;

	if (m != TKV_HEADS_MIX_POLICY)
		return m;
	return e->params.kv.policy == TKV_POLICY_ADAPTIVE ? TKV_HEADS_MIX_ADAPTIVE : TKV_HEADS_MIX;
}

int tkv_kv_head_plan_parse(struct tkv_kv_head_plan *out, const char *text, struct tkv_error *err)
{
	const char *p = text;
	uint32_t n = 0;

	memset(out, 0, sizeof *out);
	out->mix = TKV_HEADS_MIX_POLICY;
	if (!text || !*text)
		return tkv_errf(err, TKV_ERR_ARG, "head plan: empty (give uniform, auto, auto:MIX or a list of weights)");
	if (!strcmp(text, "uniform"))
		return TKV_OK;
	if (!strncmp(text, "auto", 4) && (!text[4] || text[4] == ':')) {
		out->mode = TKV_HEADS_AUTO;
		if (text[4] == ':') {
			char *end;
			double m;

			errno = 0;
			m = strtod(text + 5, &end);
			if (end == text + 5 || *end || errno || !(m >= 0 && m <= 1))
				return tkv_errf(err, TKV_ERR_ARG, "head plan '%s': the mix after 'auto:' must be in [0, 1]",
						text);
			out->mix = (float)m;
		}
		return TKV_OK;
	}
	while (*p) {
		char *end;
		double w;

		if (n == TKV_MAX_PLAN_HEADS)
			return tkv_errf(err, TKV_ERR_ARG, "head plan: more than %d weights", TKV_MAX_PLAN_HEADS);
		errno = 0;
		w = strtod(p, &end);
		if (end == p || errno || !(w > 0 && w <= 1024))
			return tkv_errf(err, TKV_ERR_ARG, "head plan '%s': weight %u must be a number in (0, 1024]", text,
					n + 1);
		p = end;
		if (*p && *p != ',')
			return tkv_errf(err, TKV_ERR_ARG, "head plan '%s': weight %u: expected ',' or the end", text, n + 1);
		if (*p == ',' && !p[1])
			return tkv_errf(err, TKV_ERR_ARG, "head plan '%s': ends with ','", text);
		out->weight[n++] = (float)w;
		if (*p == ',')
			p++;
	}
	out->mode = TKV_HEADS_FIXED;
	out->n = n;
	return TKV_OK;
}

/* A deterministic stream of token ids in [lo, hi). */
static int32_t probe_token(uint64_t *x, int32_t lo, int32_t hi)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return lo + (int32_t)(*x % (uint64_t)(hi - lo));
}

/* A probe sequence: no cap, and its streams add up the attention the
 * queries from position 1 + half on give positions 1 .. half. */
static void probe_set(struct tkv_seq *s, uint32_t half)
{
	s->budget = 0;
	s->kv->probe = true;
	s->kv->probe_lo = 1;
	s->kv->probe_hi = 1 + (int32_t)half;
	s->kv->probe_q0 = 1 + (int32_t)half;
}

/* Runs ids[0..1 + half) (BOS and R) through a sequence of its own, then on
 * it ids[1 + half..1 + 2 half) (R again) and, on a copy of it made before
 * (on_copy) or on a second sequence of BOS and R made after the first is
 * gone, other[0..half) (R'); each stream's attention from the second half
 * to the first into copy[] and fresh[]. */
static int probe_run(struct tkv_engine *e, const int32_t *ids, const int32_t *other, uint32_t half, bool on_copy,
		     double *copy, double *fresh, struct tkv_error *err)
{
	size_t n_st = (size_t)e->model->info.n_layer * e->model->info.n_kv_head;
	struct tkv_seq *s, *f = NULL;
	int st = tkv_seq_init(&s, e, err);

	if (st)
		return st;
	probe_set(s, half);
	st = tkv_seq_decode(s, ids, 1 + (size_t)half, NULL, 0, err);
	if (!st && on_copy && !(st = tkv_seq_fork(&f, s, err)))
		probe_set(f, half);
	if (!st)
		st = tkv_seq_decode(s, ids + 1 + half, half, NULL, 0, err);
	for (size_t i = 0; !st && i < n_st; i++)
		copy[i] = s->kv->streams[i].probe_mass;
	if (!on_copy) {
		tkv_seq_free(s);
		s = NULL;
		if (!st && !(st = tkv_seq_init(&f, e, err))) {
			probe_set(f, half);
			st = tkv_seq_decode(f, ids, 1 + (size_t)half, NULL, 0, err);
		}
	}
	if (!st)
		st = tkv_seq_decode(f, other, half, NULL, 0, err);
	for (size_t i = 0; !st && i < n_st; i++)
		fresh[i] = f->kv->streams[i].probe_mass;
	tkv_seq_free(f);
	tkv_seq_free(s);
	return st;
}

/* The pool bytes the probe's sequences hold at their peak: each stream's
 * BOS, R and its continuation in full-precision pages, twice when the
 * second continuation runs on a copy. */
static double probe_bytes(const struct tkv_engine *e, uint32_t half, bool on_copy)
{
	const struct tkv_model_info *in = &e->model->info;
	uint32_t pt = kv_pool_page_tokens(e->pool);
	size_t pages = (2 * (size_t)half + pt) / pt;
	double b = (double)in->n_layer * in->n_kv_head * (double)pages *
		   (double)kv_page_bytes(pt, in->head_dim, kv_pool_fmt(e->pool));

	return on_copy ? 2 * b : b;
}

/* The probe is not the user's work: its pages and its sequences' counters
 * (a policy that acts without a budget, kivi, demotes) leave no trace in the
 * figures, whether it finished or ran out of memory; the governor stayed out,
 * so it has no runs or pool samples to forget. */
static void probe_forget(struct tkv_engine *e)
{
	kv_pool_forget(e->pool);
	e->evicted_gone = e->demoted_gone = e->merged_gone = e->cow_gone = 0;
}

int heads_init(struct tkv_engine *e, struct tkv_error *err)
{
	const struct tkv_kv_head_plan *hp = &e->params.head_plan;
	const double mix = head_mix(e);
	const struct tkv_model_info *in = &e->model->info;
	uint32_t n = in->n_layer * in->n_kv_head, group = in->n_head / in->n_kv_head;
	uint32_t half = TKV_HEADS_PROBE;
	int32_t bos = tkv_vocab_bos(tkv_model_vocab(e->model)), *ids;
	int32_t lo = (int32_t)(in->n_vocab / 4), hi = (int32_t)in->n_vocab;
	double *copy, *fresh, sum = 0.0, top = 0.0;
	float *w, *score;
	uint64_t x = 0x9E3779B97F4A7C15u;
	bool on_copy = true;
	int st;

	if ((unsigned)hp->mode > TKV_HEADS_FIXED)
		return tkv_errf(err, TKV_ERR_ARG, "unknown head plan mode %d", (int)hp->mode);
	if (hp->mode == TKV_HEADS_UNIFORM)
		return TKV_OK;
	if (hp->mode == TKV_HEADS_FIXED && hp->n != n)
		return tkv_errf(err, TKV_ERR_ARG, "the head plan lists %u weights; the model has %u layers x %u KV heads = %u",
				hp->n, in->n_layer, in->n_kv_head, n);
	if (hp->mode == TKV_HEADS_AUTO && !(mix >= 0 && mix <= 1))
		return tkv_errf(err, TKV_ERR_ARG, "head plan: mix %g is not in [0, 1]", mix);
	if (hp->mode == TKV_HEADS_FIXED) {
		for (uint32_t i = 0; i < n; i++)
			if (!(hp->weight[i] > 0 && hp->weight[i] <= 1024))
				return tkv_errf(err, TKV_ERR_ARG, "head plan: weight %u is %g, not in (0, 1024]", i + 1,
						hp->weight[i]);
		if (!(e->head_w = tkv_malloc(e->alloc, n * sizeof *e->head_w)))
			return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for the head plan");
		memcpy(e->head_w, hp->weight, n * sizeof *e->head_w);
		return TKV_OK;
	}
	if (half * 2 + 1 > e->params.n_ctx)
		half = (e->params.n_ctx - 1) / 2;
	if (half < 8 || hi - lo < 2)
		return TKV_OK; /* too small a context or vocabulary to probe: uniform */
	/* the probe stays below the governor's low mark, so that no policy
	 * touches its tokens: one sequence after the other, then fewer tokens
	 * (down to TKV_HEADS_PROBE_MIN, or what the context allows) */
	if (e->params.kv_mem) {
		double room = e->params.kv.gov_low * (double)e->params.kv_mem;
		uint32_t least = half < TKV_HEADS_PROBE_MIN ? half : TKV_HEADS_PROBE_MIN;

		on_copy = probe_bytes(e, half, true) <= room;
		while (half > least && probe_bytes(e, half, false) > room)
			half--;
		if (probe_bytes(e, half, false) > room) {
			e->heads_unprobed = true;
			return TKV_OK;
		}
	}
	/* the probe's own sequences run with an even split: e->head_w is set last */
	ids = tkv_malloc(e->alloc, (3 * (size_t)half + 1) * sizeof *ids);
	copy = tkv_calloc(e->alloc, 2 * (size_t)n, sizeof *copy);
	w = tkv_malloc(e->alloc, n * sizeof *w);
	score = tkv_malloc(e->alloc, n * sizeof *score);
	if (!ids || !copy || !w || !score) {
		tkv_free(e->alloc, ids);
		tkv_free(e->alloc, copy);
		tkv_free(e->alloc, w);
		tkv_free(e->alloc, score);
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for the head probe");
	}
	fresh = copy + n;
	ids[0] = bos >= 0 ? bos : probe_token(&x, lo, hi);
	for (uint32_t i = 1; i <= half; i++)
		ids[i] = ids[half + i] = probe_token(&x, lo, hi);
	for (uint32_t i = 0; i < half; i++)
		ids[2 * half + 1 + i] = probe_token(&x, lo, hi);
	e->probing = true;
	st = probe_run(e, ids, ids + 2 * half + 1, half, on_copy, copy, fresh, err);
	e->probing = false;
	for (uint32_t i = 0; !st && i < n; i++) {
		double s = (copy[i] - fresh[i]) / ((double)half * group);

		score[i] = (float)s;
		s = s > 0 ? s : 0;
		sum += s;
		top = fmax(top, s);
	}
	for (uint32_t i = 0; !st && i < n; i++) {
		double s = score[i] > 0 ? score[i] : 0;

		w[i] = top < TKV_HEADS_MIN ? 1.0f : (float)(mix + (1 - mix) * n * s / sum);
	}
	tkv_free(e->alloc, ids);
	tkv_free(e->alloc, copy);
	if (st) {
		char why[sizeof err->msg];

		tkv_free(e->alloc, w);
		tkv_free(e->alloc, score);
		if (st == TKV_ERR_KV_FULL) {
			/* --kv-mem too small for the probe: an even split */
			e->heads_unprobed = true;
			probe_forget(e);
			return TKV_OK;
		}
		if (!err)
			return st;
		memcpy(why, err->msg, sizeof why);
		return tkv_errf(err, st, "head plan auto: the probe (BOS, %u random tokens and two continuations) failed: %s", half, why);
	}
	e->head_w = w;
	e->head_score = score;
	e->heads_probe = half;
	probe_forget(e);
	return TKV_OK;
}

void tkv_engine_head_plan(const struct tkv_engine *e, struct tkv_kv_head_plan *out)
{
	const struct tkv_model_info *in = &e->model->info;
	uint32_t n = in->n_layer * in->n_kv_head;

	memset(out, 0, sizeof *out);
	out->mode = e->params.head_plan.mode;
	out->mix = head_mix(e);
	out->unprobed = e->heads_unprobed || (out->mode == TKV_HEADS_AUTO && !e->head_score);
	out->probe_tokens = e->head_score ? e->heads_probe : 0;
	out->n = n <= TKV_MAX_PLAN_HEADS ? n : TKV_MAX_PLAN_HEADS;
	for (uint32_t i = 0; i < out->n; i++) {
		out->weight[i] = e->head_w ? e->head_w[i] : 1.0f;
		out->score[i] = e->head_score ? e->head_score[i] : 0.0f;
	}
}
