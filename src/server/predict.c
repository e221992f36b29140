/* predict.c - the demand predictor: how long will a request get, and how many
 * KV bytes will its sequence hold then?
 *
 * Output length: an exponentially weighted mean m and mean absolute deviation
 * d of the output lengths of finished requests (alpha 1/8, as TCP's RTT
 * estimator); a request allowed max_tokens is expected to produce
 * min(max_tokens, m + d) — until 4 requests have finished, max_tokens.
 *
 * Bytes: K+V bytes per token at full precision (the model's f16 figure, x2
 * for an f32 cache) times the page overhead (allocated / K+V bytes, learned
 * from the pool; 1.25 at first), and beyond the protected sinks + window, times
 * the policy's expected compression: 1 for the policies that keep tokens at
 * full precision, and for the tiered ones the tier shares weighted by their
 * formats' sizes (q8 ~ (d+2)/2d of f16, q4 ~ 0.34 and q2 ~ 0.22 at d = 64).
 * Under memory pressure the tiered policies reach that size; admission counts
 * on it. A per-sequence budget (--kv-budget) caps the figure.
 *
 * The error reported is the mean absolute difference between the final length
 * predicted at admission and the actual one, in tokens. */
#include <math.h>

#include "server/srv_impl.h"

#define PRED_ALPHA 0.125
#define PRED_MIN_HIST 4

/* Size of a format relative to f16, for head size d and a 16-slot page
 * (see the layouts in src/kv/tier.h). */
static double fmt_ratio(enum tkv_kv_fmt f, uint32_t d)
{
	double dd = d ? d : 64, ng = ceil(dd / 32.0);

	switch (f) {
	case TKV_FMT_F32: return 2.0;
	case TKV_FMT_F16: return 1.0;
	case TKV_FMT_Q8: return (dd + 2) / (2 * dd);
	case TKV_FMT_Q4: return (4 * dd / 16 + dd / 2 + 4 * ng + dd / 2) / (4 * dd);
	case TKV_FMT_Q2: return (4 * dd / 16 + dd / 4 + 4 * ng + dd / 4) / (4 * dd);
	}
	return 1.0;
}

void srv_pred_init(struct srv_pred *p, const struct tkv_model_info *mi, size_t kv_bytes_per_token,
		   const struct tkv_engine_params *ep, double kv_expect)
{
	const struct tkv_kv_policy_params *k = &ep->kv;
	uint32_t d = mi->head_dim;

	*p = (struct srv_pred){ 0 };
	p->overhead = 1.25;
	p->bpt_full = (double)kv_bytes_per_token * (ep->kv_type == TKV_KV_F32 ? 2.0 : 1.0);
	p->n_protect = k->n_sink + k->n_window;
	p->seq_cap = k->seq_budget;
	switch (k->policy) {
	case TKV_POLICY_TIERED:
	case TKV_POLICY_ADAPTIVE: {
		double cold = 1.0 - k->hot_ratio - k->warm_ratio;

		p->ratio = k->hot_ratio + k->warm_ratio * fmt_ratio(k->warm_fmt, d) +
			   (cold > 0 ? cold : 0) * fmt_ratio(k->cold_fmt, d);
		break;
	}
	case TKV_POLICY_KIVI:
		p->ratio = fmt_ratio(k->cold_fmt, d);
		break;
	default:
		p->ratio = 1.0;
		break;
	}
	if (ep->kv_type == TKV_KV_F32 && p->ratio < 1.0)
		p->ratio /= 2.0; /* quantized formats are relative to f16; bpt_full is f32 here */
	if (kv_expect > 0)
		p->ratio = kv_expect;
}

uint32_t srv_pred_out(const struct srv_pred *p, uint32_t max_tokens)
{
	double e;

	if (p->n_hist < PRED_MIN_HIST)
		return max_tokens;
	e = ceil(p->out_mean + p->out_dev);
	if (e < 1)
		e = 1;
	return e < (double)max_tokens ? (uint32_t)e : max_tokens;
}

double srv_pred_bytes(const struct srv_pred *p, uint32_t n)
{
	double full = p->bpt_full * p->overhead, b;
	uint32_t prot = n < p->n_protect ? n : p->n_protect;

	b = full * prot + full * p->ratio * (double)(n - prot);
	if (p->seq_cap && b > (double)p->seq_cap * p->overhead)
		b = (double)p->seq_cap * p->overhead;
	return b;
}

void srv_pred_finish(struct srv_pred *p, uint32_t predicted, uint32_t actual, uint32_t n_out)
{
	double x = n_out;

	if (p->n_hist == 0) {
		p->out_mean = x;
		p->out_dev = x / 2;
	} else {
		p->out_dev += PRED_ALPHA * (fabs(x - p->out_mean) - p->out_dev);
		p->out_mean += PRED_ALPHA * (x - p->out_mean);
	}
	p->n_hist++;
	p->abs_err_sum += fabs((double)predicted - (double)actual);
	p->n_err++;
}

void srv_pred_observe(struct srv_pred *p, const struct tkv_kv_stats *ks)
{
	/* only when enough is cached for the ratio to mean something */
	if (ks->kv_bytes >= 64 * 1024 && ks->allocated >= ks->kv_bytes) {
		double o = (double)ks->allocated / (double)ks->kv_bytes;

		p->overhead += PRED_ALPHA * (o - p->overhead);
	}
}

double srv_pred_mae(const struct srv_pred *p)
{
	return p->n_err ? p->abs_err_sum / (double)p->n_err : 0.0;
}
