/* model.c - forward and backward passes of the llama model in training.
 *
 * Forward, per layer (n rows = B sequences of T tokens, positions 0..T-1):
 *   xb = rmsnorm(x) * attn_norm;  q, k, v = xb Wqᵀ, xb Wkᵀ, xb Wvᵀ;  rope(q, k)
 *   ao = causal GQA attention;     xm = x + ao Woᵀ
 *   xb2 = rmsnorm(xm) * ffn_norm;  h = silu(xb2 Wgᵀ) * (xb2 Wuᵀ);  x' = xm + h Wdᵀ
 * then logits = (rmsnorm(x) * out_norm) Woutᵀ and the mean cross-entropy.
 * Attention keeps only each query's log-sum-exp; the backward pass recomputes
 * the probabilities block by block (64 queries against their keys). The
 * element-wise steps run on the calling thread (a few ms a step); matrix
 * products and attention use the pool. */
#include "trn.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "gemm.h"
#include "ops/ops.h"
#include "util/alloc.h"
#include "util/status.h"
#include "util/tpool.h"

/* ---- parameters ---------------------------------------------------------------- */

int trn_model_init(struct trn_model *m, const struct trn_cfg *c, struct tkv_error *err)
{
	uint32_t hd, kvd, qd;
	size_t k = 0, off = 0;

	memset(m, 0, sizeof *m);
	if (!c->dim || !c->n_layer || !c->n_head || !c->n_kv_head || !c->n_ff || !c->n_vocab || !c->n_ctx ||
	    c->dim % c->n_head || c->n_head % c->n_kv_head || (c->dim / c->n_head) % 2 || c->n_layer > 256)
		return tkv_errf(err, TKV_ERR_ARG,
				"bad shape: dim %u, layers %u, heads %u/%u, ffn %u, vocab %u, ctx %u "
				"(dim a multiple of heads, heads of KV heads, even head size)",
				c->dim, c->n_layer, c->n_head, c->n_kv_head, c->n_ff, c->n_vocab, c->n_ctx);
	m->cfg = *c;
	hd = m->head_dim = c->dim / c->n_head;
	qd = hd * c->n_head;
	kvd = hd * c->n_kv_head;
	m->n_t = 3 + 9 * (size_t)c->n_layer;
	m->t = tkv_calloc(NULL, m->n_t, sizeof *m->t);
	m->pw.l = tkv_calloc(NULL, c->n_layer, sizeof *m->pw.l);
	m->gw.l = tkv_calloc(NULL, c->n_layer, sizeof *m->gw.l);
	m->inv_freq = tkv_calloc(NULL, hd / 2, sizeof(float));
	if (!m->t || !m->pw.l || !m->gw.l || !m->inv_freq)
		goto out_nomem;
#define TEN(nm, in, outf, dec) do { \
		struct trn_tensor *t_ = &m->t[k++]; \
		snprintf(t_->name, sizeof t_->name, "%s", nm); \
		t_->n_dims = (outf) ? 2 : 1; t_->ne[0] = (in); t_->ne[1] = (outf) ? (outf) : 1; \
		t_->n = (size_t)t_->ne[0] * t_->ne[1]; t_->off = off; off += (t_->n + 15) & ~(size_t)15; \
		t_->decay = (dec); } while (0)
	TEN("token_embd.weight", c->dim, c->n_vocab, true);
	TEN("output_norm.weight", c->dim, 0, false);
	TEN("output.weight", c->dim, c->n_vocab, true);
	for (uint32_t l = 0; l < c->n_layer; l++) {
		char nm[48];

#define NM(s) (snprintf(nm, sizeof nm, "blk.%u." s, l), nm)
		TEN(NM("attn_norm.weight"), c->dim, 0, false);
		TEN(NM("attn_q.weight"), c->dim, qd, true);
		TEN(NM("attn_k.weight"), c->dim, kvd, true);
		TEN(NM("attn_v.weight"), c->dim, kvd, true);
		TEN(NM("attn_output.weight"), qd, c->dim, true);
		TEN(NM("ffn_norm.weight"), c->dim, 0, false);
		TEN(NM("ffn_gate.weight"), c->dim, c->n_ff, true);
		TEN(NM("ffn_up.weight"), c->dim, c->n_ff, true);
		TEN(NM("ffn_down.weight"), c->n_ff, c->dim, true);
#undef NM
	}
#undef TEN
	m->n_params = off;
	m->w = tkv_calloc(NULL, off, sizeof(float));
	m->g = tkv_calloc(NULL, off, sizeof(float));
	if (!m->w || !m->g)
		goto out_nomem;
	for (int side = 0; side < 2; side++) {
		float *base = side ? m->g : m->w;
		struct trn_weights *v = side ? &m->gw : &m->pw;

		k = 0;
		v->tok_embd = base + m->t[k++].off;
		v->out_norm = base + m->t[k++].off;
		v->output = base + m->t[k++].off;
		for (uint32_t l = 0; l < c->n_layer; l++) {
			struct trn_layer *L = &v->l[l];

			L->attn_norm = base + m->t[k++].off;
			L->wq = base + m->t[k++].off;
			L->wk = base + m->t[k++].off;
			L->wv = base + m->t[k++].off;
			L->wo = base + m->t[k++].off;
			L->ffn_norm = base + m->t[k++].off;
			L->w_gate = base + m->t[k++].off;
			L->w_up = base + m->t[k++].off;
			L->w_down = base + m->t[k++].off;
		}
	}
	/* as llama.c: base^(-2i/n_rot) */
	for (uint32_t i = 0; i < hd / 2; i++)
		m->inv_freq[i] = powf(c->rope_base, -(float)(2 * i) / (float)hd);
	gemm_use_simd(true);
	return TKV_OK;
out_nomem:
	trn_model_free(m);
	return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for the model's parameters");
}

void trn_model_free(struct trn_model *m)
{
	if (!m)
		return;
	tkv_free(NULL, m->t);
	tkv_free(NULL, m->pw.l);
	tkv_free(NULL, m->gw.l);
	tkv_free(NULL, m->inv_freq);
	tkv_free(NULL, m->w);
	tkv_free(NULL, m->g);
	memset(m, 0, sizeof *m);
}

static uint64_t trn_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void trn_model_randomize(struct trn_model *m, uint64_t seed, float std)
{
	uint64_t s = trn_mix(seed + 0x1234567ull);

	for (size_t i = 0; i < m->n_t; i++) {
		const struct trn_tensor *t = &m->t[i];
		float *w = m->w + t->off;
		float sd = std;

		if (t->n_dims == 1) {
			for (size_t j = 0; j < t->n; j++)
				w[j] = 1.0f;
			continue;
		}
		if (strstr(t->name, "attn_output") || strstr(t->name, "ffn_down"))
			sd = std / sqrtf(2.0f * (float)m->cfg.n_layer);
		for (size_t j = 0; j < t->n; j += 2) {
			/* Box-Muller on two 53-bit uniforms */
			double u1 = ((double)(trn_mix(s += 0x9e3779b97f4a7c15ull) >> 11) + 0.5) / 9007199254740992.0;
			double u2 = (double)(trn_mix(s += 0x9e3779b97f4a7c15ull) >> 11) / 9007199254740992.0;
			double r = sqrt(-2.0 * log(u1));

			w[j] = (float)(sd * r * cos(6.283185307179586 * u2));
			if (j + 1 < t->n)
				w[j + 1] = (float)(sd * r * sin(6.283185307179586 * u2));
		}
	}
}

/* ---- activations ------------------------------------------------------------------ */

int trn_acts_init(struct trn_acts *a, const struct trn_model *m, int B, int T, int n_threads,
		  struct tkv_error *err)
{
	const struct trn_cfg *c = &m->cfg;
	size_t n = (size_t)B * T, D = c->dim, F = c->n_ff, V = c->n_vocab;
	size_t qd = (size_t)m->head_dim * c->n_head, kvd = (size_t)m->head_dim * c->n_kv_head;
	size_t per_layer = n * (D * 4 + qd * 2 + kvd * 2 + F * 3) + (size_t)B * c->n_head * T;
	size_t att = (size_t)(2 * TRN_QBLK + 2 * m->head_dim) * T;
	size_t total = per_layer * c->n_layer + n * (D * 2 + V) + n * (D * 2 + qd * 2 + kvd * 2 + F * 3) +
		       (size_t)n_threads * att;
	float *p;

	memset(a, 0, sizeof *a);
	if (B < 1 || T < 2 || n_threads < 1)
		return tkv_errf(err, TKV_ERR_ARG, "batch %d x %d tokens, %d threads", B, T, n_threads);
	a->B = B;
	a->T = T;
	a->n_threads = n_threads;
	a->l = tkv_calloc(NULL, c->n_layer, sizeof *a->l);
	a->tok = tkv_calloc(NULL, (size_t)B * (T + 1), sizeof(int32_t));
	a->mem = tkv_malloc(NULL, total * sizeof(float));
	if (!a->l || !a->tok || !a->mem) {
		trn_acts_free(a);
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for activations (%.0f MB)",
				(double)total * 4 / 1e6);
	}
	memset(a->mem, 0, total * sizeof(float));
	p = a->mem;
#define TAKE(ptr, cnt) ((ptr) = p, p += (cnt))
	for (uint32_t l = 0; l < c->n_layer; l++) {
		struct trn_lacts *L = &a->l[l];

		TAKE(L->x, n * D);
		TAKE(L->xb, n * D);
		TAKE(L->q, n * qd);
		TAKE(L->k, n * kvd);
		TAKE(L->v, n * kvd);
		TAKE(L->ao, n * qd);
		TAKE(L->lse, (size_t)B * c->n_head * T);
		TAKE(L->xm, n * D);
		TAKE(L->xb2, n * D);
		TAKE(L->hg, n * F);
		TAKE(L->hu, n * F);
		TAKE(L->h, n * F);
	}
	TAKE(a->xL, n * D);
	TAKE(a->xf, n * D);
	TAKE(a->logits, n * V);
	TAKE(a->dx, n * D);
	TAKE(a->dxb, n * D);
	TAKE(a->dq, n * qd);
	TAKE(a->dk, n * kvd);
	TAKE(a->dv, n * kvd);
	TAKE(a->dao, n * qd);
	TAKE(a->dh, n * F);
	TAKE(a->dg, n * F);
	TAKE(a->du, n * F);
	TAKE(a->att, (size_t)n_threads * att);
#undef TAKE
	return TKV_OK;
}

void trn_acts_free(struct trn_acts *a)
{
	if (!a)
		return;
	tkv_free(NULL, a->l);
	tkv_free(NULL, a->tok);
	tkv_free(NULL, a->mem);
	memset(a, 0, sizeof *a);
}

/* ---- helpers ---------------------------------------------------------------------- */

/* y (n, out) = x (n, in) · Wᵀ */
static void lin_fwd(struct tpool *tp, const float *x, const float *W, float *y, int n, int in, int out)
{
	struct gemm_args g = { n, out, in, x, in, false, W, in, true, y, out, false };

	gemm(tp, &g);
}

/* dx (n, in) [+]= dy (n, out) · W;  dW (out, in) += dyᵀ · x */
static void lin_bwd(struct tpool *tp, const float *x, const float *W, const float *dy, float *dx, float *dW,
		    int n, int in, int out, bool acc_dx)
{
	struct gemm_args gx = { n, in, out, dy, out, false, W, in, false, dx, in, acc_dx };
	struct gemm_args gw = { out, in, n, dy, out, true, x, in, false, dW, in, true };

	gemm(tp, &gx);
	gemm(tp, &gw);
}

static void rms_fwd(float *o, const float *x, const float *w, int n, int d, float eps)
{
	for (int r = 0; r < n; r++)
		ops_rmsnorm(o + (size_t)r * d, x + (size_t)r * d, w, d, eps);
}

/* y = x * s * w with s = 1/sqrt(mean(x²) + eps): dx [+]= s (dy w) - x s³/d Σ(dy w x);
 * dw += Σ_rows dy x s. */
static void rms_bwd(const float *x, const float *w, const float *dy, float *dx, float *dw, int n, int d,
		    float eps, bool acc)
{
	for (int r = 0; r < n; r++) {
		const float *xr = x + (size_t)r * d, *dyr = dy + (size_t)r * d;
		float *dxr = dx + (size_t)r * d;
		double ss = 0, dot = 0;
		float s, c;

		for (int i = 0; i < d; i++)
			ss += (double)xr[i] * xr[i];
		s = (float)(1.0 / sqrt(ss / d + eps));
		for (int i = 0; i < d; i++)
			dot += (double)dyr[i] * w[i] * xr[i];
		c = (float)(dot * s * s * s / d);
		for (int i = 0; i < d; i++) {
			float v = s * dyr[i] * w[i] - c * xr[i];

			dxr[i] = acc ? dxr[i] + v : v;
			dw[i] += dyr[i] * xr[i] * s;
		}
	}
}

/* ---- attention --------------------------------------------------------------------- */

/* Tasks (a sequence and a head, or a KV head backward) are taken from a
 * shared counter, so a thread slowed by other jobs on the machine takes fewer. */
struct att_job {
	const struct trn_model *m;
	struct trn_acts *a;
	struct trn_lacts *L;
	atomic_int next;
};

/* The per-thread attention scratch: two (TRN_QBLK, T) blocks, then Kᵀ and
 * Vᵀ (hd, T) of the current KV head, so the products against Kᵀ and Vᵀ read
 * rows (packing a transposed operand for every block of queries costs as
 * much as the product). */
static float *att_scratch(const struct trn_acts *a, int hd, int ith)
{
	return a->att + (size_t)ith * (size_t)(2 * TRN_QBLK + 2 * hd) * a->T;
}

/* xt (hd, T) = x (T, hd) with rows of stride ld. */
static void att_transpose(float *xt, const float *x, int T, int hd, int ld)
{
	for (int t = 0; t < T; t++)
		for (int e = 0; e < hd; e++)
			xt[(size_t)e * T + t] = x[(size_t)t * ld + e];
}

/* Softmax of the causal rows of S (bq, nk, stride nk): rows are queries i0+r,
 * keys 0..nk-1; row r sees keys 0..i0+r. Writes probabilities (0 past the
 * query) and each row's log-sum-exp of the scaled logits. */
static void att_softmax(float *S, int bq, int nk, int i0, float scale, float *lse)
{
	for (int r = 0; r < bq; r++) {
		float *s = S + (size_t)r * nk, mx = -INFINITY;
		int n = i0 + r + 1;
		double sum = 0;

		for (int j = 0; j < n; j++) {
			s[j] *= scale;
			mx = s[j] > mx ? s[j] : mx;
		}
		for (int j = 0; j < n; j++) {
			s[j] = expf(s[j] - mx);
			sum += s[j];
		}
		for (int j = 0; j < n; j++)
			s[j] = (float)(s[j] / sum);
		for (int j = n; j < nk; j++)
			s[j] = 0.0f;
		lse[r] = mx + (float)log(sum);
	}
}

static void att_fwd_worker(void *ctx, int ith, int nth)
{
	struct att_job *j = ctx;
	const struct trn_cfg *c = &j->m->cfg;
	struct trn_acts *a = j->a;
	struct trn_lacts *L = j->L;
	int T = a->T, hd = (int)j->m->head_dim, H = (int)c->n_head, G = (int)(c->n_head / c->n_kv_head);
	int qd = hd * H, kvd = hd * (int)c->n_kv_head;
	float scale = 1.0f / sqrtf((float)hd), *S = att_scratch(a, hd, ith);
	float *KT = S + (size_t)2 * TRN_QBLK * T;

	(void)nth;
	for (int task; (task = atomic_fetch_add(&j->next, 1)) < a->B * H;) {
		int b = task / H, h = task % H, kvh = h / G;
		const float *K = L->k + (size_t)b * T * kvd + kvh * hd, *V = L->v + (size_t)b * T * kvd + kvh * hd;

		att_transpose(KT, K, T, hd, kvd);
		for (int i0 = 0; i0 < T; i0 += TRN_QBLK) {
			int bq = T - i0 < TRN_QBLK ? T - i0 : TRN_QBLK, nk = i0 + bq;
			const float *Q = L->q + ((size_t)b * T + i0) * qd + h * hd;
			struct gemm_args s = { bq, nk, hd, Q, qd, false, KT, T, false, S, nk, false };
			struct gemm_args o = { bq, hd, nk, S, nk, false, V, kvd, false,
					       L->ao + ((size_t)b * T + i0) * qd + h * hd, qd, false };

			gemm_st(&s);
			att_softmax(S, bq, nk, i0, scale, L->lse + ((size_t)b * H + h) * T + i0);
			gemm_st(&o);
		}
	}
}

static void att_bwd_worker(void *ctx, int ith, int nth)
{
	struct att_job *j = ctx;
	const struct trn_cfg *c = &j->m->cfg;
	struct trn_acts *a = j->a;
	struct trn_lacts *L = j->L;
	int T = a->T, hd = (int)j->m->head_dim, H = (int)c->n_head, KV = (int)c->n_kv_head, G = H / KV;
	int qd = hd * H, kvd = hd * KV;
	float scale = 1.0f / sqrtf((float)hd);
	float *P = att_scratch(a, hd, ith), *dP = P + (size_t)TRN_QBLK * T;
	float *KT = P + (size_t)2 * TRN_QBLK * T, *VT = KT + (size_t)hd * T;

	(void)nth;
	for (int task; (task = atomic_fetch_add(&j->next, 1)) < a->B * KV;) {
		int b = task / KV, kvh = task % KV;
		const float *K = L->k + (size_t)b * T * kvd + kvh * hd, *V = L->v + (size_t)b * T * kvd + kvh * hd;
		float *dK = a->dk + (size_t)b * T * kvd + kvh * hd, *dV = a->dv + (size_t)b * T * kvd + kvh * hd;

		att_transpose(KT, K, T, hd, kvd);
		att_transpose(VT, V, T, hd, kvd);

		for (int h = kvh * G; h < (kvh + 1) * G; h++)
			for (int i0 = 0; i0 < T; i0 += TRN_QBLK) {
				int bq = T - i0 < TRN_QBLK ? T - i0 : TRN_QBLK, nk = i0 + bq;
				size_t row0 = (size_t)b * T + i0;
				const float *Q = L->q + row0 * qd + h * hd, *O = L->ao + row0 * qd + h * hd;
				const float *dO = a->dao + row0 * qd + h * hd;
				const float *lse = L->lse + ((size_t)b * H + h) * T + i0;
				struct gemm_args s = { bq, nk, hd, Q, qd, false, KT, T, false, P, nk, false };
				struct gemm_args dp = { bq, nk, hd, dO, qd, false, VT, T, false, dP, nk, false };
				struct gemm_args dq = { bq, hd, nk, dP, nk, false, K, kvd, false,
							a->dq + row0 * qd + h * hd, qd, false };
				struct gemm_args dk = { nk, hd, bq, dP, nk, true, Q, qd, false, dK, kvd, true };
				struct gemm_args dv = { nk, hd, bq, P, nk, true, dO, qd, false, dV, kvd, true };

				gemm_st(&s);
				gemm_st(&dp);
				for (int r = 0; r < bq; r++) {
					float *pr = P + (size_t)r * nk, *dpr = dP + (size_t)r * nk;
					int n = i0 + r + 1;
					float D = 0.0f;

					for (int e = 0; e < hd; e++)
						D += dO[(size_t)r * qd + e] * O[(size_t)r * qd + e];
					for (int jj = 0; jj < n; jj++) {
						pr[jj] = expf(pr[jj] * scale - lse[r]);
						dpr[jj] = pr[jj] * (dpr[jj] - D) * scale;
					}
					for (int jj = n; jj < nk; jj++)
						pr[jj] = dpr[jj] = 0.0f;
				}
				gemm_st(&dq);
				gemm_st(&dk);
				gemm_st(&dv);
			}
	}
}

/* ---- forward ------------------------------------------------------------------------ */

double trn_forward(const struct trn_model *m, struct trn_acts *a, struct tpool *tp, float *nll)
{
	const struct trn_cfg *c = &m->cfg;
	int B = a->B, T = a->T, n = B * T, D = (int)c->dim, F = (int)c->n_ff, V = (int)c->n_vocab;
	int hd = (int)m->head_dim, H = (int)c->n_head, KV = (int)c->n_kv_head, qd = hd * H, kvd = hd * KV;
	double total = 0;

	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++)
			memcpy(a->l[0].x + ((size_t)b * T + t) * D,
			       m->pw.tok_embd + (size_t)a->tok[(size_t)b * (T + 1) + t] * D, (size_t)D * sizeof(float));
	for (uint32_t l = 0; l < c->n_layer; l++) {
		const struct trn_layer *W = &m->pw.l[l];
		struct trn_lacts *L = &a->l[l];
		float *xo = l + 1 < c->n_layer ? a->l[l + 1].x : a->xL;
		struct att_job job = { m, a, L, 0 };

		rms_fwd(L->xb, L->x, W->attn_norm, n, D, c->rms_eps);
		lin_fwd(tp, L->xb, W->wq, L->q, n, D, qd);
		lin_fwd(tp, L->xb, W->wk, L->k, n, D, kvd);
		lin_fwd(tp, L->xb, W->wv, L->v, n, D, kvd);
		for (int r = 0; r < n; r++) {
			ops_rope(L->q + (size_t)r * qd, H, hd, hd, (float)(r % T), m->inv_freq);
			ops_rope(L->k + (size_t)r * kvd, KV, hd, hd, (float)(r % T), m->inv_freq);
		}
		tpool_run(tp, att_fwd_worker, &job);
		lin_fwd(tp, L->ao, W->wo, L->xm, n, qd, D);
		for (size_t i = 0; i < (size_t)n * D; i++)
			L->xm[i] += L->x[i];
		rms_fwd(L->xb2, L->xm, W->ffn_norm, n, D, c->rms_eps);
		lin_fwd(tp, L->xb2, W->w_gate, L->hg, n, D, F);
		lin_fwd(tp, L->xb2, W->w_up, L->hu, n, D, F);
		ops_swiglu(L->h, L->hg, L->hu, n * F);
		lin_fwd(tp, L->h, W->w_down, xo, n, F, D);
		for (size_t i = 0; i < (size_t)n * D; i++)
			xo[i] += L->xm[i];
	}
	rms_fwd(a->xf, a->xL, m->pw.out_norm, n, D, c->rms_eps);
	lin_fwd(tp, a->xf, m->pw.output, a->logits, n, D, V);
	/* cross-entropy; logits become dloss/dlogits of the mean */
	for (int r = 0; r < n; r++) {
		float *z = a->logits + (size_t)r * V, mx = -INFINITY;
		int32_t y = a->tok[(size_t)(r / T) * (T + 1) + r % T + 1];
		double sum = 0, lse;

		for (int i = 0; i < V; i++)
			mx = z[i] > mx ? z[i] : mx;
		for (int i = 0; i < V; i++)
			sum += exp((double)(z[i] - mx));
		lse = mx + log(sum);
		if (nll)
			nll[r] = (float)(lse - z[y]);
		total += lse - z[y];
		for (int i = 0; i < V; i++)
			z[i] = (float)(exp(z[i] - lse) / n);
		z[y] -= 1.0f / (float)n;
	}
	return total;
}

/* ---- backward ---------------------------------------------------------------------- */

void trn_backward(struct trn_model *m, struct trn_acts *a, struct tpool *tp)
{
	const struct trn_cfg *c = &m->cfg;
	int B = a->B, T = a->T, n = B * T, D = (int)c->dim, F = (int)c->n_ff, V = (int)c->n_vocab;
	int hd = (int)m->head_dim, H = (int)c->n_head, KV = (int)c->n_kv_head, qd = hd * H, kvd = hd * KV;

	/* output and final norm: dx = d xL */
	lin_bwd(tp, a->xf, m->pw.output, a->logits, a->dxb, m->gw.output, n, D, V, false);
	rms_bwd(a->xL, m->pw.out_norm, a->dxb, a->dx, m->gw.out_norm, n, D, c->rms_eps, false);
	for (int l = (int)c->n_layer - 1; l >= 0; l--) {
		const struct trn_layer *W = &m->pw.l[l];
		struct trn_layer *G = &m->gw.l[l];
		struct trn_lacts *L = &a->l[l];
		struct att_job job = { m, a, L, 0 };

		/* ffn: dx is d(output of the layer) = d xm through the residual */
		lin_bwd(tp, L->h, W->w_down, a->dx, a->dh, G->w_down, n, F, D, false);
		for (size_t i = 0; i < (size_t)n * F; i++) {
			float g = L->hg[i], sg = 1.0f / (1.0f + expf(-g));

			a->du[i] = a->dh[i] * g * sg;
			a->dg[i] = a->dh[i] * L->hu[i] * sg * (1.0f + g * (1.0f - sg));
		}
		lin_bwd(tp, L->xb2, W->w_gate, a->dg, a->dxb, G->w_gate, n, D, F, false);
		lin_bwd(tp, L->xb2, W->w_up, a->du, a->dxb, G->w_up, n, D, F, true);
		rms_bwd(L->xm, W->ffn_norm, a->dxb, a->dx, G->ffn_norm, n, D, c->rms_eps, true);
		/* attention: dx is now d xm */
		lin_bwd(tp, L->ao, W->wo, a->dx, a->dao, G->wo, n, qd, D, false);
		memset(a->dk, 0, (size_t)n * kvd * sizeof(float));
		memset(a->dv, 0, (size_t)n * kvd * sizeof(float));
		tpool_run(tp, att_bwd_worker, &job);
		for (int r = 0; r < n; r++) {
			ops_rope(a->dq + (size_t)r * qd, H, hd, hd, -(float)(r % T), m->inv_freq);
			ops_rope(a->dk + (size_t)r * kvd, KV, hd, hd, -(float)(r % T), m->inv_freq);
		}
		lin_bwd(tp, L->xb, W->wq, a->dq, a->dxb, G->wq, n, D, qd, false);
		lin_bwd(tp, L->xb, W->wk, a->dk, a->dxb, G->wk, n, D, kvd, true);
		lin_bwd(tp, L->xb, W->wv, a->dv, a->dxb, G->wv, n, D, kvd, true);
		rms_bwd(L->x, W->attn_norm, a->dxb, a->dx, G->attn_norm, n, D, c->rms_eps, true);
	}
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++) {
			float *ge = m->gw.tok_embd + (size_t)a->tok[(size_t)b * (T + 1) + t] * D;
			const float *d = a->dx + ((size_t)b * T + t) * D;

			for (int i = 0; i < D; i++)
				ge[i] += d[i];
		}
}

/* ---- optimizer --------------------------------------------------------------------- */

double trn_clip_grad(struct trn_model *m, double max_norm)
{
	double ss = 0, norm;

	for (size_t i = 0; i < m->n_params; i++)
		ss += (double)m->g[i] * m->g[i];
	norm = sqrt(ss);
	if (max_norm > 0 && norm > max_norm) {
		float s = (float)(max_norm / norm);

		for (size_t i = 0; i < m->n_params; i++)
			m->g[i] *= s;
	}
	return norm;
}

void trn_adamw_step(struct trn_model *m, const struct trn_adamw *o, float *mom, float *vel, uint64_t t)
{
	float bc1 = 1.0f - powf(o->beta1, (float)t), bc2 = 1.0f - powf(o->beta2, (float)t);

	for (size_t k = 0; k < m->n_t; k++) {
		const struct trn_tensor *tt = &m->t[k];
		float *w = m->w + tt->off, *g = m->g + tt->off, *mm = mom + tt->off, *vv = vel + tt->off;
		float decay = tt->decay ? 1.0f - o->lr * o->wd : 1.0f;

		for (size_t i = 0; i < tt->n; i++) {
			mm[i] = o->beta1 * mm[i] + (1.0f - o->beta1) * g[i];
			vv[i] = o->beta2 * vv[i] + (1.0f - o->beta2) * g[i] * g[i];
			w[i] = w[i] * decay - o->lr * (mm[i] / bc1) / (sqrtf(vv[i] / bc2) + o->eps);
		}
	}
}
