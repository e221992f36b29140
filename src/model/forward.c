/* forward.c - the forward pass every family shares.
 *
 * For a chunk of n tokens at positions pos0..pos0+n-1 (hooks and optional
 * steps from the family's row, arch.h, and the layer's tensors, model.h):
 *
 *   x = embed(ids) * embd_scale
 *   per layer:  xb = rmsnorm(x) * attn_norm
 *               q, k, v = Wq xb + bq, Wk xb + bk, Wv xb + bv   (biases if any)
 *               q, k = rmsnorm per head * q_norm, k_norm      (if any)
 *               rope(q, k) at each position                   (the family's hook)
 *               append k, v to the cache; every query head attends to its KV
 *               head's stream up to its own position (causal, within the
 *               layer's window, logits soft-capped: inside the cache)
 *               x += post_norm(Wo attn)                       (norm if any)
 *               xb = rmsnorm(x) * ffn_norm
 *               x += post_norm(Wdown (act(Wgate xb) * Wup xb)) (the family's GLU)
 *                 or, in a layer of experts, x += the routed experts' sum (moe.c)
 *   logits = softcap(Wout (rmsnorm(x) * out_norm))
 */
#include "model/model.h"

#include <string.h>

#include "kv/cache.h"
#include "util/alloc.h"
#include "util/status.h"
#include "util/tpool.h"

/* The router's and the experts' buffers (model.h), for a model with experts. */
static int moe_scratch_init(struct model_scratch *s, const struct tkv_model *m, struct tkv_alloc *a,
			    struct tkv_error *err)
{
	size_t B = s->n_batch, ne = m->hp.n_expert, k = m->hp.n_expert_used;

	if (!ne)
		return TKV_OK;
	s->probs = tkv_malloc(a, B * ne * sizeof(float));
	s->sel_w = tkv_malloc(a, B * k * sizeof(float));
	s->sel = tkv_malloc(a, B * k * sizeof *s->sel);
	s->order = tkv_malloc(a, B * k * sizeof *s->order);
	s->start = tkv_malloc(a, (ne + 1) * sizeof *s->start);
	s->ex = tkv_malloc(a, B * m->info.dim * sizeof(float));
	s->ey = tkv_malloc(a, B * m->info.dim * sizeof(float));
	if (!s->probs || !s->sel_w || !s->sel || !s->order || !s->start || !s->ex || !s->ey)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for the experts' activations (batch %u)",
				s->n_batch);
	return TKV_OK;
}

int model_scratch_init(struct model_scratch *s, const struct tkv_model *m, uint32_t n_batch, uint32_t n_ctx,
		       uint32_t n_threads, struct tkv_alloc *a, struct tkv_error *err)
{
	const struct tkv_model_info *in = &m->info;
	size_t B = n_batch, qd = (size_t)in->n_head * in->head_dim, kvd = (size_t)in->n_kv_head * in->head_dim;
	size_t ff = in->n_ff > m->hp.n_ff_exp ? in->n_ff : m->hp.n_ff_exp;
	size_t widest = in->dim > ff ? in->dim : ff;
	int st;

	memset(s, 0, sizeof *s);
	s->n_batch = n_batch;
	s->n_threads = n_threads;
	s->long_ctx = n_ctx > m->hp.n_ctx_orig;
	s->x = tkv_malloc(a, B * in->dim * sizeof(float));
	s->xb = tkv_malloc(a, B * in->dim * sizeof(float));
	s->q = tkv_malloc(a, B * qd * sizeof(float));
	s->k = tkv_malloc(a, B * kvd * sizeof(float));
	s->v = tkv_malloc(a, B * kvd * sizeof(float));
	s->ao = tkv_malloc(a, B * qd * sizeof(float));
	s->o = tkv_malloc(a, B * in->dim * sizeof(float));
	s->hg = tkv_malloc(a, B * ff * sizeof(float));
	s->hu = tkv_malloc(a, B * ff * sizeof(float));
	s->rows = tkv_malloc(a, B * sizeof *s->rows);
	if (qd > widest)
		widest = qd;
	s->work_size = ops_matmul_work_size((int64_t)widest, (int)n_batch, (int)n_threads);
	s->work = tkv_malloc(a, s->work_size);
	if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->ao || !s->o || !s->hg || !s->hu || !s->rows ||
	    !s->work) {
		model_scratch_free(s, a);
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for activations (batch %u)", n_batch);
	}
	if ((st = moe_scratch_init(s, m, a, err)))
		model_scratch_free(s, a);
	return st;
}

void model_scratch_free(struct model_scratch *s, struct tkv_alloc *a)
{
	tkv_free(a, s->x);
	tkv_free(a, s->xb);
	tkv_free(a, s->q);
	tkv_free(a, s->k);
	tkv_free(a, s->v);
	tkv_free(a, s->ao);
	tkv_free(a, s->o);
	tkv_free(a, s->hg);
	tkv_free(a, s->hu);
	tkv_free(a, s->rows);
	tkv_free(a, s->work);
	tkv_free(a, s->probs);
	tkv_free(a, s->sel_w);
	tkv_free(a, s->sel);
	tkv_free(a, s->order);
	tkv_free(a, s->start);
	tkv_free(a, s->ex);
	tkv_free(a, s->ey);
	memset(s, 0, sizeof *s);
}

/* x += post_norm(o) for each of n rows: the scratch output o added to the
 * residual stream, normed first when the layer has a norm there. */
static void residual_add(const struct tkv_model *m, struct model_scratch *s, const float *post_norm, uint32_t n)
{
	uint32_t dim = m->info.dim;

	if (post_norm)
		for (uint32_t i = 0; i < n; i++)
			ops_rmsnorm(s->o + (size_t)i * dim, s->o + (size_t)i * dim, post_norm, (int)dim, m->info.rms_eps);
	for (size_t i = 0; i < (size_t)n * dim; i++)
		s->x[i] += s->o[i];
}

/* x += post_norm(W in) for each of n rows: a projection added to the
 * residual stream through the scratch output o. */
static void residual(const struct tkv_model *m, struct model_scratch *s, struct tpool *tp, const struct ops_mat *w,
		     const float *post_norm, const float *in, uint32_t n)
{
	ops_matmul_n(tp, &w, &s->o, 1, in, (int)n, s->work, s->work_size);
	residual_add(m, s, post_norm, n);
}

/* x += post_norm(FFN(xb)) for n rows: the dense GLU, or the layer's routed
 * experts. */
static void ffn(const struct tkv_model *m, const struct model_layer *L, struct model_scratch *s, struct tpool *tp,
		uint32_t n)
{
	if (L->moe.router.rows) {
		moe_ffn(m, &L->moe, s, tp, n);
		residual_add(m, s, L->ffn_post_norm, n);
		return;
	}
	ops_matmul_n(tp, (const struct ops_mat *[]){ &L->w_gate, &L->w_up }, (float *[]){ s->hg, s->hu }, 2, s->xb,
		     (int)n, s->work, s->work_size);
	m->arch->glu(s->hg, s->hg, s->hu, (int)(n * m->info.n_ff));
	residual(m, s, tp, &L->w_down, L->ffn_post_norm, s->hg, n);
}

/* rows of `width` floats += bias */
static void add_bias(float *x, const float *b, uint32_t n, size_t width)
{
	for (uint32_t i = 0; i < n; i++)
		for (size_t c = 0; c < width; c++)
			x[i * width + c] += b[c];
}

/* RMSNorm of each head of n rows of n_heads heads. */
static void head_norm(float *x, const float *w, uint32_t n, uint32_t n_heads, uint32_t hd, float eps)
{
	for (size_t h = 0; h < (size_t)n * n_heads; h++)
		ops_rmsnorm(x + h * hd, x + h * hd, w, (int)hd, eps);
}

/* q, k, v of the normed rows xb, rotated to their positions. */
static void attn_qkv(const struct tkv_model *m, const struct model_layer *L, struct model_scratch *s,
		     struct tpool *tp, const struct kv_seg *segs, uint32_t n_segs, uint32_t n)
{
	const struct tkv_model_info *in = &m->info;
	uint32_t hd = in->head_dim;
	size_t qd = (size_t)in->n_head * hd, kvd = (size_t)in->n_kv_head * hd;
	const float *inv_freq = L->inv_freq[s->long_ctx];

	ops_matmul_n(tp, (const struct ops_mat *[]){ &L->wq, &L->wk, &L->wv }, (float *[]){ s->q, s->k, s->v }, 3,
		     s->xb, (int)n, s->work, s->work_size);
	if (L->bq) {
		add_bias(s->q, L->bq, n, qd);
		add_bias(s->k, L->bk, n, kvd);
		add_bias(s->v, L->bv, n, kvd);
	}
	if (L->q_norm) {
		head_norm(s->q, L->q_norm, n, in->n_head, hd, in->rms_eps);
		head_norm(s->k, L->k_norm, n, in->n_kv_head, hd, in->rms_eps);
	}
	for (uint32_t g = 0; g < n_segs; g++)
		for (uint32_t i = 0; i < segs[g].n; i++) {
			size_t r = segs[g].row0 + i;
			float pos = (float)(segs[g].pos0 + (int32_t)i);

			m->arch->rope(s->q + r * qd, (int)in->n_head, (int)hd, (int)in->n_rot, pos, inv_freq,
				      m->hp.rope_mscale);
			m->arch->rope(s->k + r * kvd, (int)in->n_kv_head, (int)hd, (int)in->n_rot, pos, inv_freq,
				      m->hp.rope_mscale);
		}
}

void model_forward(const struct tkv_model *m, struct model_scratch *s, struct tpool *tp, struct kv_cache *kv,
		   const int32_t *ids, const struct kv_seg *segs, uint32_t n_segs, const uint32_t *out_rows,
		   uint32_t n_out, float *logits)
{
	const struct tkv_model_info *in = &m->info;
	uint32_t dim = in->dim, n = 0;

	for (uint32_t g = 0; g < n_segs; g++)
		n += segs[g].n;
	for (uint32_t i = 0; i < n; i++)
		ops_mat_row(&m->tok_embd, ids[i], s->x + (size_t)i * dim);
	if (m->hp.embd_scale != 1.0f)
		for (size_t i = 0; i < (size_t)n * dim; i++)
			s->x[i] *= m->hp.embd_scale;

	for (uint32_t l = 0; l < in->n_layer; l++) {
		const struct model_layer *L = &m->layers[l];

		/* attention: the cache stores k and v and attends the queries */
		for (uint32_t i = 0; i < n; i++)
			ops_rmsnorm(s->xb + (size_t)i * dim, s->x + (size_t)i * dim, L->attn_norm, dim, in->rms_eps);
		attn_qkv(m, L, s, tp, segs, n_segs, n);
		kv_cache_store(kv, l, segs, n_segs, s->k, s->v);
		kv_cache_attend(kv, tp, l, segs, n_segs, s->q, s->ao);
		residual(m, s, tp, &L->wo, L->attn_post_norm, s->ao, n);

		/* feed-forward */
		for (uint32_t i = 0; i < n; i++)
			ops_rmsnorm(s->xb + (size_t)i * dim, s->x + (size_t)i * dim, L->ffn_norm, dim, in->rms_eps);
		ffn(m, L, s, tp, n);
	}

	if (!n_out)
		return;
	/* final norm of the rows that want logits, gathered, then one matmul */
	for (uint32_t i = 0; i < n_out; i++)
		ops_rmsnorm(s->xb + (size_t)i * dim, s->x + (size_t)out_rows[i] * dim, m->out_norm, dim, in->rms_eps);
	ops_matmul_n(tp, (const struct ops_mat *[]){ &m->output }, &logits, 1, s->xb, (int)n_out, s->work, s->work_size);
	if (m->hp.final_softcap > 0.0f)
		ops_softcap(logits, (size_t)n_out * in->n_vocab, m->hp.final_softcap);
}
