/* run.c - teacher-forced passes and greedy generations of `tierkv eval`
 * (see run.h). */
#include "eval/run.h"

#include <stdbool.h>
#include <string.h>

#include "util/alloc.h"
#include "util/status.h"

int evr_init(struct evr_ctx *x, struct tkv_model *m, size_t prefill, uint32_t n_ctx, struct tkv_alloc *a)
{
	struct tkv_model_info info;
	size_t bytes;

	memset(x, 0, sizeof *x);
	tkv_model_get_info(m, &info);
	x->m = m;
	x->alloc = a;
	x->n_vocab = info.n_vocab;
	x->prefill = prefill;
	x->buf_rows = prefill < n_ctx ? prefill : n_ctx;
	if (tkv_mul_ok(x->buf_rows * x->n_vocab, sizeof *x->buf, &bytes) || !(x->buf = tkv_malloc(a, bytes)))
		return TKV_ERR_NOMEM;
	return TKV_OK;
}

void evr_free(struct evr_ctx *x)
{
	if (!x)
		return;
	tkv_free(x->alloc, x->buf);
	x->buf = NULL;
}

/* A fresh engine (on the context's allocator) and one sequence. */
static int open_seq(struct evr_ctx *x, const struct tkv_engine_params *ep, struct tkv_engine **e,
		    struct tkv_seq **s, struct tkv_error *err)
{
	struct tkv_engine_params p = *ep;
	int st;

	p.alloc = x->alloc;
	*s = NULL;
	if ((st = tkv_engine_init(e, x->m, &p, err)))
		return st;
	if ((st = tkv_seq_init(s, *e, err))) {
		tkv_engine_free(*e);
		*e = NULL;
	}
	return st;
}

/* After a decode call of c tokens: the peaks, and the K+V held counted for
 * those tokens in the running mean. */
static void sample_kv(const struct tkv_seq *s, struct evr_pass *p, size_t c)
{
	struct tkv_kv_stats ks;

	tkv_seq_kv_stats(s, &ks);
	p->kv_tokens += (double)c;
	p->kv_mean += ((double)ks.kv_bytes - p->kv_mean) * (double)c / p->kv_tokens;
	if (ks.kv_bytes > p->kv_peak)
		p->kv_peak = ks.kv_bytes;
	if (ks.allocated > p->alloc_peak)
		p->alloc_peak = ks.allocated;
}

int evr_pass_run(struct evr_ctx *x, const struct tkv_engine_params *ep, struct evr_pass *p, struct tkv_error *err)
{
	struct tkv_engine *e = NULL;
	struct tkv_seq *s = NULL;
	size_t n_pre = x->prefill < p->n ? x->prefill : p->n;
	int st;

	p->kv_peak = p->alloc_peak = 0;
	p->kv_mean = p->kv_tokens = 0.0;
	if ((st = open_seq(x, ep, &e, &s, err)))
		return st;
	/* the engine would chunk one call the same way; separate calls let the
	 * bytes be read between chunks */
	for (size_t done = 0; done < n_pre;) {
		size_t c = n_pre - done < ep->n_batch ? n_pre - done : ep->n_batch;

		if ((st = tkv_seq_decode(s, p->ids + done, c, x->buf + done * x->n_vocab, 1, err)))
			goto out;
		sample_kv(s, p, c);
		done += c;
	}
	for (size_t i = p->from; i < n_pre && i + 1 < p->n; i++)
		p->visit(p->ctx, i, x->buf + i * x->n_vocab);
	for (size_t i = n_pre; i < p->n; i++) {
		bool scored = i >= p->from && i + 1 < p->n;

		if ((st = tkv_seq_decode(s, p->ids + i, 1, scored ? x->buf : NULL, 0, err)))
			goto out;
		sample_kv(s, p, 1);
		if (scored)
			p->visit(p->ctx, i, x->buf);
	}
	tkv_seq_kv_stats(s, &p->end);
	tkv_seq_layer_plan(s, &p->plan);
out:
	tkv_seq_free(s);
	tkv_engine_free(e);
	return st;
}

int evr_gen(struct evr_ctx *x, const struct tkv_engine_params *ep, const int32_t *prefix, size_t n_prefix,
	    size_t n_gen, int32_t *out, struct tkv_error *err)
{
	struct tkv_engine *e = NULL;
	struct tkv_seq *s = NULL;
	int st;

	if ((st = open_seq(x, ep, &e, &s, err)))
		return st;
	if ((st = tkv_seq_decode(s, prefix, n_prefix, x->buf, 0, err)))
		goto out;
	for (size_t g = 0; g < n_gen; g++) {
		out[g] = (int32_t)evm_argmax(x->buf, x->n_vocab);
		if (g + 1 < n_gen && (st = tkv_seq_decode(s, &out[g], 1, x->buf, 0, err)))
			goto out;
	}
out:
	tkv_seq_free(s);
	tkv_engine_free(e);
	return st;
}

/* Reference pass visitor: keeps the logits of positions [from, n - 1) and sums
 * the NLL of positions [lo, hi). */
struct ref_visit {
	struct evr_ref *r;
	size_t n_vocab;
	const int32_t *ids;
	size_t lo, hi;
};

static void ref_visit(void *ctx, size_t i, const float *logits)
{
	struct ref_visit *v = ctx;

	if (i >= v->lo && i < v->hi) {
		v->r->nll += evm_nll(logits, v->n_vocab, v->ids[i + 1]);
		v->r->n_nll++;
	}
	if (i >= v->r->from)
		memcpy(v->r->logits + (i - v->r->from) * v->n_vocab, logits, v->n_vocab * sizeof *logits);
}

static int fail_stage(enum evr_stage *stage, enum evr_stage s, int st)
{
	*stage = s;
	return st;
}

int evr_ref_run(struct evr_ctx *x, const struct tkv_engine_params *ep, const int32_t *ids, size_t n, size_t from,
		size_t lo, size_t hi, size_t n_prefix, size_t n_gen, struct evr_ref *r, enum evr_stage *stage,
		struct tkv_error *err)
{
	struct ref_visit v = { r, x->n_vocab, ids, lo, hi };
	struct evr_pass p = { .ids = ids, .n = n, .from = lo < hi && lo < from ? lo : from, .visit = ref_visit,
			      .ctx = &v };
	size_t bytes;
	int st;

	memset(r, 0, sizeof *r);
	*stage = EVR_STAGE_NONE;
	r->from = from;
	r->n_prefix = n_prefix;
	r->n_gen = n_gen;
	if (tkv_mul_ok((n - 1 - from) * x->n_vocab, sizeof *r->logits, &bytes) ||
	    !(r->logits = tkv_malloc(x->alloc, bytes)) ||
	    !(r->gen = tkv_malloc(x->alloc, (n_gen + 1) * sizeof *r->gen))) {
		st = fail_stage(stage, EVR_STAGE_ALLOC, TKV_ERR_NOMEM);
		goto fail;
	}
	if ((st = evr_pass_run(x, ep, &p, err))) {
		fail_stage(stage, EVR_STAGE_PASS, st);
		goto fail;
	}
	r->end = p.end;
	if (n_gen && (st = evr_gen(x, ep, ids, n_prefix, n_gen, r->gen, err))) {
		fail_stage(stage, EVR_STAGE_GEN, st);
		goto fail;
	}
	return TKV_OK;
fail:
	evr_ref_free(x, r);
	return st;
}

void evr_ref_free(struct evr_ctx *x, struct evr_ref *r)
{
	if (!r)
		return;
	tkv_free(x->alloc, r->logits);
	tkv_free(x->alloc, r->gen);
	r->logits = NULL;
	r->gen = NULL;
}

/* Policy pass visitor: scores each position against the reference's logits. */
struct cmp_visit {
	const struct evr_ref *ref;
	size_t n_vocab;
	const int32_t *ids;
	struct evm_acc *acc;
};

static void cmp_visit(void *ctx, size_t i, const float *logits)
{
	struct cmp_visit *c = ctx;

	evm_acc_add(c->acc, c->ref->logits + (i - c->ref->from) * c->n_vocab, logits, c->n_vocab, c->ids[i + 1]);
}

int evr_row_run(struct evr_ctx *x, const struct tkv_engine_params *ep, const struct evr_ref *ref,
		const int32_t *ids, size_t n, struct evr_row *out, enum evr_stage *stage, struct tkv_error *err)
{
	struct cmp_visit cv = { ref, x->n_vocab, ids, &out->acc };
	struct evr_pass p = { .ids = ids, .n = n, .from = ref->from, .visit = cmp_visit, .ctx = &cv };
	int32_t *gen = NULL;
	double f1 = 0.0;
	int st;

	memset(out, 0, sizeof *out);
	*stage = EVR_STAGE_NONE;
	if ((st = evr_pass_run(x, ep, &p, err)))
		return fail_stage(stage, EVR_STAGE_PASS, st);
	out->kv_peak = p.kv_peak;
	out->alloc_peak = p.alloc_peak;
	out->kv_mean = p.kv_mean;
	out->end = p.end;
	out->plan = p.plan;
	if (!ref->n_gen)
		return TKV_OK;
	if (!(gen = tkv_malloc(x->alloc, (ref->n_gen + 1) * sizeof *gen)))
		return fail_stage(stage, EVR_STAGE_ALLOC, TKV_ERR_NOMEM);
	if ((st = evr_gen(x, ep, ids, ref->n_prefix, ref->n_gen, gen, err))) {
		fail_stage(stage, EVR_STAGE_GEN, st);
	} else if ((st = evm_rouge_l(gen, ref->n_gen, ref->gen, ref->n_gen, x->alloc, &f1))) {
		fail_stage(stage, EVR_STAGE_SCORE, st);
	} else {
		out->first_div = evm_first_diff(gen, ref->gen, ref->n_gen);
		out->bleu = evm_bleu(gen, ref->n_gen, ref->gen, ref->n_gen, EVR_BLEU_N);
		out->rouge = f1;
		out->gen_done = 1;
	}
	tkv_free(x->alloc, gen);
	return st;
}

int evr_ask_run(struct evr_ctx *x, const struct tkv_engine_params *ep, struct evr_ask *a, struct tkv_error *err)
{
	struct tkv_engine *e = NULL;
	struct tkv_seq *s = NULL;
	struct evr_pass peaks = { 0 };
	size_t batch = ep->n_batch ? ep->n_batch : 1;
	int st;

	a->n_out = a->n_past = 0;
	a->kv_peak = a->alloc_peak = 0;
	if (a->n_context == 0 || a->n_context > a->n)
		return tkv_errf(err, TKV_ERR_ARG, "eval: a question needs a context (%zu of %zu tokens)",
				a->n_context, a->n);
	if ((st = open_seq(x, ep, &e, &s, err)))
		return st;
	for (size_t done = 0; done < a->n_context; done += batch) {
		size_t c = a->n_context - done < batch ? a->n_context - done : batch;

		if ((st = tkv_seq_decode(s, a->ids + done, c, x->buf, 0, err)))
			goto out;
		sample_kv(s, &peaks, c);
	}
	if (a->n > a->n_context) {
		if ((st = tkv_seq_decode(s, a->ids + a->n_context, a->n - a->n_context, x->buf, 0, err)))
			goto out;
		sample_kv(s, &peaks, a->n - a->n_context);
	}
	while (a->n_out < a->n_gen) {
		a->gen[a->n_out] = (int32_t)evm_argmax(x->buf, x->n_vocab);
		a->n_out++;
		if (a->n_out == a->n_gen || (a->done && a->done(a->ctx, a->gen, a->n_out)))
			break;
		if ((st = tkv_seq_decode(s, &a->gen[a->n_out - 1], 1, x->buf, 0, err)))
			goto out;
		sample_kv(s, &peaks, 1);
	}
	tkv_seq_kv_stats(s, &a->end);
	a->n_past = tkv_seq_n_past(s);
out:
	a->kv_peak = peaks.kv_peak;
	a->alloc_peak = peaks.alloc_peak;
	tkv_seq_free(s);
	tkv_engine_free(e);
	return st;
}
