/* moe.c - routed experts: the feed-forward of a mixture-of-experts layer.
 *
 * For each normed row x of a chunk, with softmax gating (qwen3moe, and
 * Mixtral in llama files, as llama.cpp computes them):
 *
 *   p   = softmax(Wr x)                              (n_expert router probabilities)
 *   S   = the n_expert_used experts of largest p     (ties: the lower index)
 *   w_e = p_e / max(sum_{S} p, 2^-14)                (moe_norm; else w_e = p_e)
 *   out = sum_{e in S} w_e Wdown_e (act(Wgate_e x) * Wup_e x)
 *
 * Each expert's matrices are row ranges of the layer's 3-D tensors, read in
 * place (model.h). The rows of a chunk are grouped by expert: every expert
 * some row chose runs once, over those rows gathered, and its outputs are
 * added back weighted. A decoded token so reads only its n_expert_used
 * experts' weights; a prefill chunk reads each expert it uses once. Each row
 * sums its experts in increasing expert order, whatever the chunk. */
#include "model/model.h"

#include <string.h>

/* Rows [r0, r0 + n) of w as a matrix of its own: one expert's part. */
static struct ops_mat expert_rows(const struct ops_mat *w, int64_t r0, int64_t n)
{
	struct ops_mat v = *w;

	v.data = (const char *)w->data + (size_t)r0 * w->row_bytes;
	v.rows = n;
	return v;
}

/* The router: s->sel and s->sel_w for each of n rows, from s->probs. */
static void moe_route(const struct tkv_model *m, const struct model_moe *E, struct model_scratch *s,
		      struct tpool *tp, uint32_t n)
{
	uint32_t ne = m->hp.n_expert, k = m->hp.n_expert_used;

	ops_matmul_n(tp, (const struct ops_mat *[]){ &E->router }, &s->probs, 1, s->xb, (int)n, s->work,
		     s->work_size);
	for (uint32_t i = 0; i < n; i++) {
		float *p = s->probs + (size_t)i * ne, sum = 0.0f;
		uint32_t *sel = s->sel + (size_t)i * k;
		float *w = s->sel_w + (size_t)i * k;

		ops_softmax(p, (int)ne);
		for (uint32_t j = 0; j < k; j++) {
			uint32_t best = 0;

			for (uint32_t e = 1; e < ne; e++)
				if (p[e] > p[best])
					best = e;
			sel[j] = best;
			w[j] = p[best];
			sum += p[best];
			p[best] = -1.0f; /* taken: below every probability */
		}
		if (m->arch->moe_norm) {
			if (sum < 6.103515625e-5f) /* llama.cpp's clamp: the smallest normal f16 */
				sum = 6.103515625e-5f;
			for (uint32_t j = 0; j < k; j++)
				w[j] /= sum;
		}
	}
}

/* s->order: the n * k (row, slot) entries of s->sel grouped by expert, in
 * row order within an expert; s->start[e] is expert e's first. */
static void moe_group(const struct tkv_model *m, struct model_scratch *s, uint32_t n)
{
	uint32_t ne = m->hp.n_expert, k = m->hp.n_expert_used;

	memset(s->start, 0, (ne + 1) * sizeof *s->start);
	for (size_t i = 0; i < (size_t)n * k; i++)
		s->start[s->sel[i] + 1]++;
	for (uint32_t e = 0; e < ne; e++)
		s->start[e + 1] += s->start[e];
	for (size_t i = 0; i < (size_t)n * k; i++)
		s->order[s->start[s->sel[i]]++] = (uint32_t)i;
	/* the fill advanced every start to the next expert's: shift back */
	for (uint32_t e = ne; e > 0; e--)
		s->start[e] = s->start[e - 1];
	s->start[0] = 0;
}

void moe_ffn(const struct tkv_model *m, const struct model_moe *E, struct model_scratch *s, struct tpool *tp,
	     uint32_t n)
{
	uint32_t ne = m->hp.n_expert, k = m->hp.n_expert_used, dim = m->info.dim, nff = m->hp.n_ff_exp;

	moe_route(m, E, s, tp, n);
	moe_group(m, s, n);
	memset(s->o, 0, (size_t)n * dim * sizeof *s->o);
	for (uint32_t e = 0; e < ne; e++) {
		uint32_t c = s->start[e + 1] - s->start[e];
		const uint32_t *ord = s->order + s->start[e];
		struct ops_mat g, u, d;

		if (!c)
			continue;
		g = expert_rows(&E->gate, (int64_t)e * nff, nff);
		u = expert_rows(&E->up, (int64_t)e * nff, nff);
		d = expert_rows(&E->down, (int64_t)e * dim, dim);
		for (uint32_t t = 0; t < c; t++)
			memcpy(s->ex + (size_t)t * dim, s->xb + (size_t)(ord[t] / k) * dim, dim * sizeof(float));
		ops_matmul_n(tp, (const struct ops_mat *[]){ &g, &u }, (float *[]){ s->hg, s->hu }, 2, s->ex, (int)c,
			     s->work, s->work_size);
		m->arch->glu(s->hg, s->hg, s->hu, (int)(c * nff));
		ops_matmul_n(tp, (const struct ops_mat *[]){ &d }, &s->ey, 1, s->hg, (int)c, s->work, s->work_size);
		for (uint32_t t = 0; t < c; t++) {
			float w = s->sel_w[ord[t]], *o = s->o + (size_t)(ord[t] / k) * dim;
			const float *y = s->ey + (size_t)t * dim;

			for (uint32_t i = 0; i < dim; i++)
				o[i] += w * y[i];
		}
	}
}
