/* attn.c - attention of one query position over a stream of mixed-format pages.
 *
 * Pass 1 scores every visible slot (dequantizing keys on the fly) for all the
 * query heads that share this KV head, so each key is decoded once per group.
 * Full-precision and warm pages go first; a cold page is then skipped when
 * its per-channel key bounds prove that no slot in it can come within `skip`
 * (in logits) of the best score seen, for every head: its softmax weight
 * would be below e^-skip of the maximum. Pass 2 accumulates values with the
 * softmax numerators, decoding each value row once, and divides by their sum
 * at the end. Rotated pages are scored with R q and their values are summed
 * in the rotated space, then rotated back once.
 *
 * Full-precision pages have their own SIMD kernels; q4 pages are scored and
 * summed on their integer codes (attn_impl.h); other quantized pages are
 * decoded a tile of rows at a time by the tier's row kernels (tier_impl.h)
 * and go through the f32 kernels, so each row is decoded once for the whole
 * group of query heads. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "kv/attn_impl.h"
#include "kv/seq.h"
#include "kv/tier_impl.h"

/* ---- kernel selection ------------------------------------------------------ */

/* The SIMD kernels of the level in use (util/cpu.h), put in once by
 * kv_attn_arch_select (arch/x86/select.c; NULL entries: the scalar loops
 * here) and only read after that. */
static struct kv_attn_kernels kernels;
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;
static atomic_int exact_packed;

static void kernels_select(void)
{
	kv_attn_arch_select(&kernels, cpu_kernel_level());
}

int kv_attn_exact_packed(int on)
{
	return atomic_exchange(&exact_packed, on);
}

/* The table, or NULL when rows of d channels take the scalar loops. */
static const struct kv_attn_kernels *simd(uint32_t d)
{
	pthread_once(&kernels_once, kernels_select);
	return d % 8 == 0 ? &kernels : NULL;
}

kv_score_fn kv_attn_score_kernel(uint32_t fmt, uint32_t d)
{
	const struct kv_attn_kernels *k = simd(d);

	if (!k)
		return NULL;
	return fmt == KV_FMT_F16 ? k->score_f16 : fmt == KV_FMT_F32 ? k->score_f32 : NULL;
}

kv_accum_fn kv_attn_accum_kernel(uint32_t fmt, uint32_t d)
{
	const struct kv_attn_kernels *k = simd(d);

	if (!k)
		return NULL;
	return fmt == KV_FMT_F16 ? k->accum_f16 : fmt == KV_FMT_F32 ? k->accum_f32 : NULL;
}

kv_exp_fn kv_attn_exp_kernel(void)
{
	const struct kv_attn_kernels *k = simd(8);

	return k ? k->exp : NULL;
}

kv_max_fn kv_attn_max_kernel(void)
{
	const struct kv_attn_kernels *k = simd(8);

	return k ? k->max : NULL;
}

/* The integer kernels take q4 pages with d 64 or 128 (attn_q_avx2.c). */
static const struct kv_attn_kernels *simd_q(uint32_t fmt, uint32_t d)
{
	if (fmt != KV_FMT_Q4 || (d != 64 && d != 128) || atomic_load(&exact_packed))
		return NULL;
	return simd(d);
}

kv_score_q_fn kv_attn_score_q_kernel(uint32_t fmt, uint32_t d)
{
	const struct kv_attn_kernels *k = simd_q(fmt, d);

	return k ? k->score_q4 : NULL;
}

kv_accum_q_fn kv_attn_accum_q_kernel(uint32_t fmt, uint32_t d)
{
	const struct kv_attn_kernels *k = simd_q(fmt, d);

	return k ? k->accum_q4 : NULL;
}

/* ---- packed pages on integer codes (attn_impl.h) ----------------------------- */

/* Code c of a packed row. */
static inline int32_t code_at(uint32_t bits, const uint8_t *row, uint32_t c)
{
	return (row[c * bits / 8] >> (c * bits % 8)) & ((1 << bits) - 1);
}

static inline float half(uint16_t h)
{
	float x;

	kv_tier_kernels_ref()->f16_load(&h, &x, 1);
	return x;
}

int kv_score_q_ref(uint32_t bits, const void *kreg, uint32_t j0, uint32_t n, uint32_t d, const float *q, uint32_t nq,
		   float scale, float *logit, size_t stride, const float *lim)
{
	const uint16_t *ps = kreg, *pm = ps + d;
	const size_t rb = (size_t)d * bits / 8;
	const uint8_t *codes = (const uint8_t *)(pm + d) + j0 * rb;
	const float L = (float)((1u << bits) - 1);

	for (uint32_t h = 0; lim && h < nq; h++) {
		const float *qh = q + (size_t)h * d;
		float b = 0.0f, mag = 0.0f;

		for (uint32_t c = 0; c < d; c++) {
			float qm = qh[c] * half(pm[c]), qs = L * (qh[c] * half(ps[c]));

			b += qm + (qs > 0.0f ? qs : 0.0f);
			mag += fabsf(qm) + fabsf(qs);
		}
		if (!(scale * (b + KV_Q_BOUND_SLACK * mag) < lim[h]))
			lim = NULL;
	}
	if (lim)
		return 0;
	for (uint32_t h = 0; h < nq; h++) {
		const float *qh = q + (size_t)h * d;
		float amax = 0.0f, base = 0.0f, inv, r;
		int32_t qi[KV_MAX_HEAD_DIM];

		for (uint32_t c = 0; c < d; c++) {
			float qs = qh[c] * half(ps[c]);

			amax = fabsf(qs) > amax ? fabsf(qs) : amax;
			base += qh[c] * half(pm[c]);
		}
		r = amax / KV_Q_QMAX;
		inv = amax > 0.0f ? KV_Q_QMAX / amax : 0.0f;
		for (uint32_t c = 0; c < d; c++)
			qi[c] = (int32_t)lrintf(qh[c] * half(ps[c]) * inv);
		for (uint32_t i = 0; i < n; i++) {
			int32_t isum = 0;

			for (uint32_t c = 0; c < d; c++)
				isum += qi[c] * code_at(bits, codes + i * rb, c);
			logit[(size_t)h * stride + i] = scale * (base + r * (float)isum);
		}
	}
	return 1;
}

void kv_accum_q_ref(uint32_t bits, const void *vreg, uint32_t cap, uint32_t j0, uint32_t n, uint32_t d,
		    const float *w, size_t stride, uint32_t nq, float *out)
{
	const uint32_t ng = d / 32;
	const size_t rb = (size_t)d * bits / 8;
	const uint16_t *par = (const uint16_t *)vreg + (size_t)j0 * ng * 2;
	const uint8_t *codes = (const uint8_t *)((const uint16_t *)vreg + (size_t)cap * ng * 2) + j0 * rb;

	for (uint32_t h = 0; h < nq; h++) {
		const float *wh = w + (size_t)h * stride;
		int any = 0;

		for (uint32_t i = 0; i < n; i++)
			any |= wh[i] > 0.0f;
		if (!any)
			continue;
		for (uint32_t g = 0; g < ng; g++) {
			float bias = 0.0f, acc[KV_V_GROUP] = { 0 };

			for (uint32_t i = 0; i < n; i++)
				if (wh[i] > 0.0f)
					bias += wh[i] * half(par[((size_t)i * ng + g) * 2 + 1]);
			for (uint32_t i0 = 0; i0 < n; i0 += KV_Q_SUB) {
				uint32_t m = n - i0 < KV_Q_SUB ? n - i0 : KV_Q_SUB;
				float u[KV_Q_SUB], umax = 0.0f, inv;
				int32_t ui[KV_Q_SUB];

				for (uint32_t i = 0; i < m; i++) {
					float wi = wh[i0 + i] > 0.0f ? wh[i0 + i] : 0.0f;

					u[i] = wi * half(par[((size_t)(i0 + i) * ng + g) * 2]);
					umax = u[i] > umax ? u[i] : umax;
				}
				inv = umax > 0.0f ? 127.0f / umax : 0.0f;
				for (uint32_t i = 0; i < m; i++)
					ui[i] = (int32_t)lrintf(u[i] * inv);
				for (uint32_t c = 0; c < 32; c++) {
					int32_t isum = 0;

					for (uint32_t i = 0; i < m; i++)
						isum += ui[i] * code_at(bits, codes + (i0 + i) * rb, 32 * g + c);
					acc[c] += umax / 127.0f * (float)isum;
				}
			}
			for (uint32_t c = 0; c < 32; c++)
				out[(size_t)h * d + 32 * g + c] += acc[c] + bias;
		}
	}
}

/* ---- attention -------------------------------------------------------------- */

#define KV_ATTN_TILE 16    /* rows of a quantized page decoded at once */

static float dot(const float *a, const float *b, uint32_t n)
{
	float s = 0.0f;

	for (uint32_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* Upper bound of q·k over keys within [kmin, kmax] per channel. */
static float bound(const float *q, const float *kmin, const float *kmax, uint32_t d)
{
	float s = 0.0f;

	for (uint32_t c = 0; c < d; c++)
		s += q[c] >= 0.0f ? q[c] * kmax[c] : q[c] * kmin[c];
	return s;
}

static uint32_t packed_bits(uint32_t fmt)
{
	return fmt == KV_FMT_Q2 ? 2 : 4;
}

/* Whether a cold page can matter: false when, for every head, the bound of
 * its keys' scores is below lim[h]. */
static int page_can_matter(const struct kv_page *pg, uint32_t d, const float *q, uint32_t nq, float scale,
			   const float *lim)
{
	float kmin[KV_MAX_HEAD_DIM], kmax[KV_MAX_HEAD_DIM];

	kv_tier_key_bounds(pg->fmt, pg->k, pg->cap, d, pg->n_used, kmin, kmax);
	for (uint32_t h = 0; h < nq; h++)
		if (!(scale * bound(q + (size_t)h * d, kmin, kmax, d) < lim[h]))
			return 1;
	return 0;
}

/* Whether a slot at position pos is seen by the query: causal, and inside
 * the layer's sliding window when it has one. */
static inline int slot_visible(int32_t pos, const struct kv_attn_args *a)
{
	return pos <= a->qpos && (a->window == 0 || (int64_t)a->qpos - pos < (int64_t)a->window);
}

/* Soft-caps the m logits of a page for each of nq heads (rows of stride n). */
static void softcap_page(float *logit, uint32_t n, uint32_t nq, uint32_t m, float cap)
{
	float inv = 1.0f / cap;

	for (uint32_t h = 0; h < nq; h++)
		for (uint32_t j = 0; j < m; j++)
			logit[(size_t)h * n + j] = cap * tanhf(logit[(size_t)h * n + j] * inv);
}

/* Scores the slots of one page into logit[h * n + off + j]; updates max[h].
 * With lim (cold pages, skipping on), a page that cannot matter (see
 * kv_score_q_fn) is left unscored: returns 0. */
static int score_page(const struct kv_page *pg, uint32_t d, const float *q, const struct kv_attn_args *a,
		      float *logit, uint32_t n, uint32_t off, float *max, const float *lim)
{
	uint32_t nq = a->nq;
	float scale = a->scale;
	float kbuf[KV_ATTN_TILE * KV_MAX_HEAD_DIM];
	kv_score_fn fast = kv_attn_score_kernel(pg->fmt, d), f32 = kv_attn_score_kernel(KV_FMT_F32, d);
	kv_score_q_fn qk = kv_attn_score_q_kernel(pg->fmt, d);

	if (lim && !qk && !page_can_matter(pg, d, q, nq, scale, lim))
		return 0;
	if (fast || f32 || qk) {
		if (fast) {
			fast(pg->k, pg->n_used, d, q, nq, scale, logit + off, n);
		} else if (qk) {
			if (!qk(packed_bits(pg->fmt), pg->k, 0, pg->n_used, d, q, nq, scale, logit + off, n, lim))
				return 0;
		} else {
			for (uint32_t j0 = 0; j0 < pg->n_used; j0 += KV_ATTN_TILE) {
				uint32_t m = pg->n_used - j0 < KV_ATTN_TILE ? pg->n_used - j0 : KV_ATTN_TILE;

				kv_tier_load_k_slots(pg->fmt, pg->k, pg->cap, d, j0, m, kbuf);
				f32(kbuf, m, d, q, nq, scale, logit + off + j0, n);
			}
		}
		kv_max_fn vmax = kv_attn_max_kernel();
		int visible = 1;

		if (a->softcap > 0.0f)
			softcap_page(logit + off, n, nq, pg->n_used, a->softcap);
		if (a->unmasked || !pg->n_used)
			;
		else if (pg->flags & KV_PAGE_POSBM) /* sorted: the visible positions are a range */
			visible = slot_visible(kv_slot_pos(pg, 0), a) && slot_visible(kv_slot_pos(pg, pg->n_used - 1), a);
		else
			for (uint32_t j = 0; j < pg->n_used; j++)
				visible &= slot_visible(kv_slot_pos(pg, j), a);
		if (visible && vmax) { /* decode: every slot is in the past */
			for (uint32_t h = 0; h < nq; h++)
				max[h] = vmax(logit + (size_t)h * n + off, pg->n_used, max[h]);
			return 1;
		}
		for (uint32_t j = 0; j < pg->n_used; j++) {
			for (uint32_t h = 0; h < nq; h++) {
				float *l = &logit[(size_t)h * n + off + j];

				if (!slot_visible(kv_slot_pos(pg, j), a))
					*l = -INFINITY;
				else if (*l > max[h])
					max[h] = *l;
			}
		}
		return 1;
	}
	for (uint32_t j = 0; j < pg->n_used; j++) {
		const float *k = kbuf;

		if (!slot_visible(kv_slot_pos(pg, j), a)) {
			for (uint32_t h = 0; h < nq; h++)
				logit[(size_t)h * n + off + j] = -INFINITY;
			continue;
		}
		if (pg->fmt == KV_FMT_F32)
			k = (const float *)pg->k + (size_t)j * d;
		else
			kv_tier_load_k(pg->fmt, pg->k, pg->cap, d, j, kbuf);
		for (uint32_t h = 0; h < nq; h++) {
			float l = scale * dot(q + (size_t)h * d, k, d);

			if (a->softcap > 0.0f)
				l = a->softcap * tanhf(l / a->softcap);
			logit[(size_t)h * n + off + j] = l;
			if (l > max[h])
				max[h] = l;
		}
	}
	return 1;
}

/* Rows [j0, j0 + m) of a shared (KV_FMT_REF) page: alpha times the key
 * (value) of the same position in the layer below, in model space; a row
 * whose source is gone is zero and has its bit in *found clear. */
static void ref_rows(const struct kv_page *pg, const struct kv_attn_args *a, uint32_t d, int value, uint32_t j0,
		     uint32_t m, float *rows, uint32_t *found)
{
	*found = 0;
	for (uint32_t i = 0; i < m; i++) {
		int32_t pos = kv_slot_pos(pg, j0 + i);
		uint32_t e = a->below && pos >= 0 && pos < a->n_pos ? a->below_map[pos] : KV_NO_PAGE;
		float *r = rows + (size_t)i * d;
		uint16_t alpha = ((const uint16_t *)(value ? pg->v : pg->k))[j0 + i];
		float x[1];

		if (e == KV_NO_PAGE || (e >> 12) >= a->below->n_pages) {
			memset(r, 0, d * sizeof *r);
			continue;
		}
		if (value)
			kv_page_load_v(a->below->pages[e >> 12], e & 4095u, r);
		else
			kv_page_load_k(a->below->pages[e >> 12], e & 4095u, r);
		kv_tier_kernels()->f16_load(&alpha, x, 1);
		for (uint32_t c = 0; c < d; c++)
			r[c] *= x[0];
		*found |= 1u << i;
	}
}

/* score_page for a shared page: a slot whose source is gone is masked. */
static void score_ref_page(const struct kv_page *pg, const struct kv_attn_args *a, uint32_t d, float *logit,
			   uint32_t n, uint32_t off, float *max)
{
	float kbuf[KV_ATTN_TILE * KV_MAX_HEAD_DIM];

	for (uint32_t j0 = 0; j0 < pg->n_used; j0 += KV_ATTN_TILE) {
		uint32_t m = pg->n_used - j0 < KV_ATTN_TILE ? pg->n_used - j0 : KV_ATTN_TILE, found;

		ref_rows(pg, a, d, 0, j0, m, kbuf, &found);
		for (uint32_t i = 0; i < m; i++) {
			for (uint32_t h = 0; h < a->nq; h++) {
				float *l = &logit[(size_t)h * n + off + j0 + i];

				*l = !(found >> i & 1u) || !slot_visible(kv_slot_pos(pg, j0 + i), a) ?
					     -INFINITY : a->scale * dot(a->q + (size_t)h * d, kbuf + (size_t)i * d, d);
				if (a->softcap > 0.0f && *l != -INFINITY)
					*l = a->softcap * tanhf(*l / a->softcap);
				if (*l > max[h])
					max[h] = *l;
			}
		}
	}
}

/* Whether any of the nq heads gives rows [j0, j0 + m) a weight. */
static int any_weight(const float *w, size_t stride, uint32_t nq, uint32_t j0, uint32_t m)
{
	for (uint32_t h = 0; h < nq; h++)
		for (uint32_t j = j0; j < j0 + m; j++)
			if (w[(size_t)h * stride + j] > 0.0f)
				return 1;
	return 0;
}

/* Adds the weighted values of one page to o; returns whether any row had a
 * weight (the page was read). */
static int accum_page(const struct kv_page *pg, uint32_t d, const float *w, size_t n, uint32_t nq, float *o)
{
	float vbuf[KV_ATTN_TILE * KV_MAX_HEAD_DIM];
	kv_accum_fn fast = kv_attn_accum_kernel(pg->fmt, d), f32 = kv_attn_accum_kernel(KV_FMT_F32, d);
	kv_accum_q_fn qv = kv_attn_accum_q_kernel(pg->fmt, d);
	int any = 0;

	if (fast) {
		fast(pg->v, pg->n_used, d, w, n, nq, o);
		return 1;
	}
	if (qv) {
		for (uint32_t j0 = 0; j0 < pg->n_used; j0 += KV_Q_TILE) {
			uint32_t m = pg->n_used - j0 < KV_Q_TILE ? pg->n_used - j0 : KV_Q_TILE;

			if (!any_weight(w, n, nq, j0, m))
				continue;
			any = 1;
			qv(packed_bits(pg->fmt), pg->v, pg->cap, j0, m, d, w + j0, n, nq, o);
		}
		return any;
	}
	if (f32) {
		for (uint32_t j0 = 0; j0 < pg->n_used; j0 += KV_ATTN_TILE) {
			uint32_t m = pg->n_used - j0 < KV_ATTN_TILE ? pg->n_used - j0 : KV_ATTN_TILE;

			if (!any_weight(w, n, nq, j0, m))
				continue;
			any = 1;
			kv_tier_load_v_slots(pg->fmt, pg->v, pg->cap, d, j0, m, vbuf);
			f32(vbuf, m, d, w + j0, n, nq, o);
		}
		return any;
	}
	for (uint32_t j = 0; j < pg->n_used; j++) {
		const float *v = vbuf;

		if (!any_weight(w, n, nq, j, 1))
			continue;
		any = 1;
		if (pg->fmt == KV_FMT_F32)
			v = (const float *)pg->v + (size_t)j * d;
		else
			kv_tier_load_v(pg->fmt, pg->v, pg->cap, d, j, vbuf);
		for (uint32_t h = 0; h < nq; h++) {
			float wh = w[(size_t)h * n + j];
			float *oh = o + (size_t)h * d;

			if (wh > 0.0f)
				for (uint32_t c = 0; c < d; c++)
					oh[c] += wh * v[c];
		}
	}
	return any;
}

/* accum_page for a shared page. */
static int accum_ref_page(const struct kv_page *pg, const struct kv_attn_args *a, uint32_t d, const float *w,
			  size_t n, float *o)
{
	float vbuf[KV_ATTN_TILE * KV_MAX_HEAD_DIM];
	int any = 0;

	for (uint32_t j0 = 0; j0 < pg->n_used; j0 += KV_ATTN_TILE) {
		uint32_t m = pg->n_used - j0 < KV_ATTN_TILE ? pg->n_used - j0 : KV_ATTN_TILE, found;

		if (!any_weight(w, n, a->nq, j0, m))
			continue;
		any = 1;
		ref_rows(pg, a, d, 1, j0, m, vbuf, &found);
		for (uint32_t h = 0; h < a->nq; h++)
			for (uint32_t i = 0; i < m; i++) {
				float wh = w[(size_t)h * n + j0 + i];

				if (wh > 0.0f)
					for (uint32_t c = 0; c < d; c++)
						o[(size_t)h * d + c] += wh * vbuf[(size_t)i * d + c];
			}
	}
	return any;
}

/* The raw score below which a soft-capped score stays below lim: the bounds
 * of cold pages are on raw scores, and tanh keeps their order. */
static float raw_limit(float lim, float cap)
{
	if (!(cap > 0.0f))
		return lim;
	if (lim >= cap)
		return INFINITY;
	if (lim <= -cap)
		return -INFINITY;
	return cap * atanhf(lim / cap);
}

/* Pass 1: every page's logits into a->logit and each head's running max:
 * full-precision and warm pages (and shared slots) first, then cold pages,
 * skipped when their bound cannot matter (their logits -inf). */
static void score_pages(struct kv_stream *st, uint32_t d, struct kv_attn_args *a, float *max)
{
	uint32_t n = st->n_tokens, nq = a->nq, off = 0;

	/* pass 1a: full-precision and warm pages */
	for (uint32_t p = 0; p < st->n_pages; p++) {
		const struct kv_page *pg = st->pages[p];

		if (pg->fmt == KV_FMT_REF)
			score_ref_page(pg, a, d, a->logit, n, off, max);
		else if (kv_fmt_tier(pg->fmt) != KV_TIER_COLD)
			score_page(pg, d, (pg->flags & KV_PAGE_ROT) ? a->qrot : a->q, a, a->logit, n, off, max, NULL);
		off += pg->n_used;
	}
	/* pass 1b: cold pages, skipped when their bound cannot matter */
	off = 0;
	for (uint32_t p = 0; p < st->n_pages; p++) {
		const struct kv_page *pg = st->pages[p];
		const float *q = (pg->flags & KV_PAGE_ROT) ? a->qrot : a->q;

		if (kv_fmt_tier(pg->fmt) == KV_TIER_COLD) {
			float lim[KV_MAX_GROUP];

			for (uint32_t h = 0; h < nq; h++)
				lim[h] = raw_limit(max[h] - a->skip, a->softcap);
			if (!score_page(pg, d, q, a, a->logit, n, off, max,
					a->skip > 0.0f && pg->n_used > 0 ? lim : NULL)) {
				for (uint32_t h = 0; h < nq; h++)
					for (uint32_t j = 0; j < pg->n_used; j++)
						a->logit[(size_t)h * n + off + j] = -INFINITY;
				st->pages_skipped++;
			}
		}
		off += pg->n_used;
	}
}

/* Softmax per head over n logits: the weights stay unnormalized
 * (numerators) until the end, a pass over them saved; inv[h] is 1 / their
 * sum. Adds each head's entropy to *a->entropy when asked. */
static void softmax_heads(uint32_t n, const struct kv_attn_args *a, const float *max, float *inv)
{
	kv_exp_fn sum_exp = kv_attn_exp_kernel();

	for (uint32_t h = 0; h < a->nq; h++) {
		float *l = a->logit + (size_t)h * n, sum;

		if (sum_exp) {
			sum = sum_exp(l, n, max[h]);
		} else {
			sum = 0.0f;
			for (uint32_t i = 0; i < n; i++) {
				l[i] = l[i] == -INFINITY ? 0.0f : expf(l[i] - max[h]);
				sum += l[i];
			}
		}
		inv[h] = sum > 0.0f ? 1.0f / sum : 0.0f;
		if (a->entropy) {
			double e = 0.0;

			for (uint32_t i = 0; i < n; i++)
				if (l[i] > 0.0f) {
					double w = (double)(l[i] * inv[h]);

					if (w > 0.0)
						e -= w * log(w);
				}
			*a->entropy += e;
		}
	}
}

/* Pass 2: the values weighted by the numerators into a->out (rotated
 * pages' into a->orot, rotated back and added), then normalized. */
static void sum_values(struct kv_stream *st, uint32_t d, struct kv_attn_args *a, int have_rot, const float *inv)
{
	uint32_t n = st->n_tokens, nq = a->nq, off = 0;

	memset(a->out, 0, (size_t)nq * d * sizeof(float));
	for (uint32_t p = 0; p < st->n_pages; p++) {
		const struct kv_page *pg = st->pages[p];

		if (pg->fmt == KV_FMT_REF ? accum_ref_page(pg, a, d, a->logit + off, n, a->out) :
		    accum_page(pg, d, a->logit + off, n, nq, (pg->flags & KV_PAGE_ROT) ? a->orot : a->out))
			st->pages_read++;
		off += pg->n_used;
	}
	for (uint32_t h = 0; h < nq; h++) {
		float *o = a->out + (size_t)h * d;

		if (have_rot) {
			float *r = a->orot + (size_t)h * d;

			kv_unrotate(r, d);
			for (uint32_t c = 0; c < d; c++)
				o[c] += r[c];
		}
		for (uint32_t c = 0; c < d; c++)
			o[c] *= inv[h];
	}
}

/* The weight each slot received, summed over the heads, into a->att. */
static void slot_weights(uint32_t n, const struct kv_attn_args *a, const float *inv)
{
	/* head by head, so the loads run along the rows */
	if (a->nq == 0)
		memset(a->att, 0, n * sizeof(float));
	for (uint32_t h = 0; h < a->nq; h++) {
		const float *l = a->logit + (size_t)h * n;

		if (h == 0)
			for (uint32_t i = 0; i < n; i++)
				a->att[i] = l[i] * inv[0];
		else
			for (uint32_t i = 0; i < n; i++)
				a->att[i] += l[i] * inv[h];
	}
}

void kv_attn(struct kv_stream *st, uint32_t d, struct kv_attn_args *a)
{
	float max[KV_MAX_GROUP], inv[KV_MAX_GROUP];
	int have_rot = 0;

	for (uint32_t h = 0; h < a->nq; h++)
		max[h] = -INFINITY;
	for (uint32_t p = 0; p < st->n_pages; p++)
		if (st->pages[p]->flags & KV_PAGE_ROT)
			have_rot = 1;
	if (have_rot) {
		memcpy(a->qrot, a->q, (size_t)a->nq * d * sizeof(float));
		for (uint32_t h = 0; h < a->nq; h++)
			kv_rotate(a->qrot + (size_t)h * d, d);
		memset(a->orot, 0, (size_t)a->nq * d * sizeof(float));
	}
	score_pages(st, d, a, max);
	softmax_heads(st->n_tokens, a, max, inv);
	sum_values(st, d, a, have_rot, inv);
	if (a->att)
		slot_weights(st->n_tokens, a, inv);
}
