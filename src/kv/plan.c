/* plan.c - layer plans: parsing, printing, the AUTO choice. */
#include "kv/plan.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/status.h"

#define PLAN_FINE 0.7     /* span below this share of the mean: fine pages */
#define PLAN_COARSE 1.4   /* above this: coarse pages */
#define PLAN_W_MIN 0.25f  /* budget weights are clamped to [1/4, 4] */
#define PLAN_W_MAX 4.0f

int tkv_kv_layer_plan_parse(struct tkv_kv_layer_plan *out, const char *text, struct tkv_error *err)
{
	const char *p = text;
	uint32_t n = 0;

	memset(out, 0, sizeof *out);
	if (!text || !*text)
		return tkv_errf(err, TKV_ERR_ARG, "layer plan: empty (give uniform, auto or a list like 32,16:1.5,8)");
	if (!strcmp(text, "uniform"))
		return TKV_OK;
	if (!strcmp(text, "auto")) {
		out->mode = TKV_PLAN_AUTO;
		return TKV_OK;
	}
	while (*p) {
		char *end;
		unsigned long pt;
		double w = 1.0;

		if (n == TKV_MAX_PLAN_LAYERS)
			return tkv_errf(err, TKV_ERR_ARG, "layer plan '%s': more than %d layers", text,
					TKV_MAX_PLAN_LAYERS);
		errno = 0;
		pt = *p >= '0' && *p <= '9' ? strtoul(p, &end, 10) : 0;
		if (*p < '0' || *p > '9' || errno || pt == 0 || pt > 4096)
			return tkv_errf(err, TKV_ERR_ARG,
					"layer plan '%s': entry %u: page tokens must be a number in 1..4096", text, n + 1);
		p = end;
		if (*p == ':') {
			errno = 0;
			w = strtod(p + 1, &end);
			if (end == p + 1 || errno || !(w > 0 && w <= 16))
				return tkv_errf(err, TKV_ERR_ARG,
						"layer plan '%s': entry %u: the budget weight after ':' must be in (0, 16]",
						text, n + 1);
			p = end;
		}
		if (*p && *p != ',')
			return tkv_errf(err, TKV_ERR_ARG,
					"layer plan '%s': entry %u: expected ',' or the end after '%.*s'", text, n + 1,
					(int)(p - text), text);
		if (*p == ',' && !p[1])
			return tkv_errf(err, TKV_ERR_ARG, "layer plan '%s': ends with ','", text);
		out->page_tokens[n] = (uint32_t)pt;
		out->weight[n] = (float)w;
		n++;
		if (*p == ',')
			p++;
	}
	out->mode = TKV_PLAN_FIXED;
	out->n_layer = n;
	return TKV_OK;
}

void tkv_kv_layer_plan_str(const struct tkv_kv_layer_plan *p, char *buf, size_t cap)
{
	size_t len = 0;
	double mean = 0.0;

	if (cap == 0)
		return;
	buf[0] = 0;
	if (p->n_layer == 0 || p->mode == TKV_PLAN_UNIFORM || (p->mode == TKV_PLAN_AUTO && p->pending)) {
		snprintf(buf, cap, "%s", p->mode == TKV_PLAN_AUTO ? "auto" : "uniform");
		return;
	}
	for (uint32_t l = 0; l < p->n_layer; l++)
		mean += p->weight[l];
	mean /= p->n_layer;
	for (uint32_t l = 0; l < p->n_layer && len + 1 < cap; l++) {
		int k = snprintf(buf + len, cap - len, "%s%u:%.2f", l ? "," : "", p->page_tokens[l],
				 mean > 0 ? p->weight[l] / mean : 1.0);

		if (k < 0)
			break;
		len += (size_t)k;
	}
}

void kv_plan_entropy(const struct kv_seq *s, uint32_t group, float *ent)
{
	for (uint32_t l = 0; l < s->n_layer; l++) {
		double sum = 0.0;
		uint64_t n = 0;

		for (uint32_t h = 0; h < s->n_kv_head; h++) {
			const struct kv_stream *st = &s->streams[(size_t)l * s->n_kv_head + h];

			sum += st->ent_sum;
			n += st->ent_n * group;
		}
		ent[l] = n ? (float)(sum / (double)n) : 0.0f;
	}
}

void kv_plan_auto(const struct kv_seq *s, uint32_t group, uint32_t page_tokens, struct tkv_kv_layer_plan *out)
{
	double logmean = 0.0, mean = 0.0, wsum = 0.0;
	uint32_t L = s->n_layer;

	memset(out, 0, sizeof *out);
	out->mode = TKV_PLAN_FIXED;
	out->n_layer = L;
	kv_plan_entropy(s, group, out->entropy);
	for (uint32_t l = 0; l < L; l++) {
		logmean += out->entropy[l];
		mean += exp(out->entropy[l]);
	}
	logmean /= L;
	mean /= L;
	for (uint32_t l = 0; l < L; l++) {
		double span = exp(out->entropy[l]), rel = exp(out->entropy[l] - logmean);
		uint32_t pt = page_tokens;
		float w = (float)(span / mean);

		if (rel < PLAN_FINE)
			pt = page_tokens / 2;
		else if (rel > PLAN_COARSE)
			pt = page_tokens * 2;
		if (pt < KV_PAGE_MIN)
			pt = page_tokens < KV_PAGE_MIN ? page_tokens : KV_PAGE_MIN;
		if (pt > 4096)
			pt = 4096;
		out->page_tokens[l] = pt;
		out->weight[l] = w < PLAN_W_MIN ? PLAN_W_MIN : w > PLAN_W_MAX ? PLAN_W_MAX : w;
		wsum += out->weight[l];
	}
	for (uint32_t l = 0; l < L; l++)
		out->weight[l] = (float)(out->weight[l] * L / wsum);
}

void kv_plan_apply(struct kv_seq *s, const struct tkv_kv_layer_plan *p)
{
	for (uint32_t l = 0; l < s->n_layer && l < p->n_layer; l++)
		kv_seq_set_layer(s, l, p->page_tokens[l], p->weight[l]);
}
