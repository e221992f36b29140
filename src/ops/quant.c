/* quant.c - scalar reference kernels of every weight type: dequantize a row,
 * quantize activations, integer row dots, and the weight quantizers used to
 * write models. Written from the block layouts in ops_impl.h, for clarity:
 * the arch/ versions are tested against these. */
#include <math.h>
#include <string.h>

#include "ops/quant_ref.h"

const uint32_t ops_act_blck[OPS_ACT_COUNT] = {
	[OPS_ACT_F32] = 1,
	[OPS_ACT_Q8_32] = 32,
	[OPS_ACT_Q8_256] = QK_K,
	[OPS_ACT_Q8_1] = 32,
	[OPS_ACT_Q8_K32] = QK_K,
};

const uint32_t ops_act_size[OPS_ACT_COUNT] = {
	[OPS_ACT_F32] = sizeof(float),
	[OPS_ACT_Q8_32] = sizeof(struct blk_q8_32),
	[OPS_ACT_Q8_256] = sizeof(struct blk_q8_256),
	[OPS_ACT_Q8_1] = sizeof(struct blk_q8_32),
	[OPS_ACT_Q8_K32] = 8 * sizeof(struct blk_q8_32),
};

/* ---- dequantize --------------------------------------------------------------- */

void dequant_f32_ref(const void *row, float *out, int64_t n)
{
	memcpy(out, row, (size_t)n * sizeof(float));
}

void dequant_f16_ref(const void *row, float *out, int64_t n)
{
	const uint16_t *h = row;

	for (int64_t i = 0; i < n; i++)
		out[i] = ops_f16_to_f32(h[i]);
}

void dequant_bf16_ref(const void *row, float *out, int64_t n)
{
	const uint16_t *h = row;

	for (int64_t i = 0; i < n; i++)
		out[i] = ops_bf16_to_f32(h[i]);
}

static inline void deq_q4_0(const struct blk_q4_0 *b, float *out)
{
	float d = F16(b->d);

	for (int j = 0; j < QK4_0 / 2; j++) {
		out[j] = d * (float)((b->qs[j] & 15) - 8);
		out[j + 16] = d * (float)((b->qs[j] >> 4) - 8);
	}
}

static inline void deq_q8_0(const struct blk_q8_0 *b, float *out)
{
	float d = F16(b->d);

	for (int j = 0; j < QK8_0; j++)
		out[j] = d * (float)b->qs[j];
}

/* q4_k (qh NULL) and q5_k: element l (0..31) of sub-block j (0..7); the
 * sub-blocks take the low then the high nibbles of 32 bytes, and q5_k's
 * fifth bit of sub-block j is bit j of qh[l]. */
static inline int k_sub_value(const uint8_t *qs, const uint8_t *qh, int j, int l)
{
	int v = (qs[32 * (j / 2) + l] >> ((j & 1) * 4)) & 15;

	return qh ? v | ((qh[l] >> j) & 1) << 4 : v;
}

static inline void deq_k_affine(const uint8_t *qs, const uint8_t *qh, const uint8_t *scales, uint16_t d16,
				uint16_t dmin16, float *out)
{
	float d = F16(d16), dmin = F16(dmin16);

	for (int j = 0; j < 8; j++, out += 32) {
		uint8_t sc, m;

		ops_k_scale_min(scales, j, &sc, &m);
		for (int l = 0; l < 32; l++)
			out[l] = d * sc * (float)k_sub_value(qs, qh, j, l) - dmin * m;
	}
}

static inline void deq_q4_k(const struct blk_q4_k *b, float *out)
{
	deq_k_affine(b->qs, NULL, b->scales, b->d, b->dmin, out);
}

static inline void deq_q5_k(const struct blk_q5_k *b, float *out)
{
	deq_k_affine(b->qs, b->qh, b->scales, b->d, b->dmin, out);
}

/* The 6-bit value of element e (0..255) of a q6_k block, before the -32: each
 * half of 128 has 64 bytes of ql and 32 of qh; element l + 32g of a half (l <
 * 32, g < 4) takes ql[l + 32 (g & 1)] (low nibble for g < 2, high for g >= 2)
 * and bits 2g, 2g+1 of qh[l]. */
static inline int q6_k_value(const struct blk_q6_k *b, int e)
{
	int h = e / 128, g = (e % 128) / 32, l = e % 32;
	const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
	int lo = (ql[l + 32 * (g & 1)] >> (g >= 2 ? 4 : 0)) & 15;
	int hi = (qh[l] >> (2 * g)) & 3;

	return lo | hi << 4;
}

static inline void deq_q6_k(const struct blk_q6_k *b, float *out)
{
	float d = F16(b->d);

	for (int e = 0; e < QK_K; e++)
		out[e] = d * b->scales[e / 16] * (float)(q6_k_value(b, e) - 32);
}

/* ---- activations ------------------------------------------------------------------ */

/* The inverse scale of a block whose largest magnitude is amax (0 for an
 * all-zero block). The AVX2 quantizers compute exactly the same floats, so
 * both give the same bytes. */
static inline float act_iscale(float amax)
{
	return amax > 0.0f ? 127.0f / amax : 0.0f;
}

static inline float f16_round(float v)
{
	return ops_f16_to_f32(ops_f32_to_f16(v));
}

/* Blocks of 32 with d = amax / 127 in f16 and s = d x the sum of q: from the
 * f16 d (q8_0), or from the exact d, rounded to f16 itself (q8_1). */
static void quant_blocks32(const float *x, struct blk_q8_32 *b, int64_t n, int q8_1)
{
	for (int64_t i = 0; i < n / 32; i++, x += 32) {
		float amax = 0.0f, id;
		int sum = 0;

		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		id = act_iscale(amax);
		for (int j = 0; j < 32; j++) {
			int q = (int)nearbyintf(x[j] * id);

			b[i].qs[j] = (int8_t)q;
			sum += q;
		}
		b[i].d = f16_round(amax / 127.0f);
		b[i].s = q8_1 ? f16_round(amax / 127.0f * (float)sum) : b[i].d * (float)sum;
	}
}

void quant_act_q8_32_ref(const float *x, void *out, int64_t n)
{
	quant_blocks32(x, out, n, 0);
}

void quant_act_q8_1_ref(const float *x, void *out, int64_t n)
{
	quant_blocks32(x, out, n, 1);
}

void quant_act_q8_256_ref(const float *x, void *out, int64_t n)
{
	struct blk_q8_256 *b = out;

	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		float amax = 0.0f, id;

		for (int j = 0; j < QK_K; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		id = act_iscale(amax);
		for (int k = 0; k < 16; k++) {
			int sum = 0;

			for (int j = 16 * k; j < 16 * k + 16; j++) {
				int q = (int)nearbyintf(x[j] * id);

				b[i].qs[j] = (int8_t)q;
				sum += q;
			}
			b[i].bsums[k] = (int16_t)sum;
		}
		b[i].d = id > 0.0f ? 1.0f / id : 0.0f;
	}
}

void quant_act_q8_k32_ref(const float *x, void *out, int64_t n)
{
	struct blk_q8_32 *b = out;
	struct blk_q8_256 k;

	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, b += 8) {
		quant_act_q8_256_ref(x, &k, QK_K);
		for (int j = 0; j < 8; j++) {
			memcpy(b[j].qs, k.qs + 32 * j, 32);
			b[j].d = k.d;
			b[j].s = k.d * (float)(k.bsums[2 * j] + k.bsums[2 * j + 1]);
		}
	}
}

/* ---- row dots ----------------------------------------------------------------------- */

/* f32, f16, bf16: each row's plain sum of w x in element order. */
#define FLOAT_DOT_ROWS_REF(NAME, T, TO_F32)                                                              \
	void dot_rows_##NAME##_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s) \
	{                                                                                                \
		const float *x = a;                                                                      \
		for (int r = 0; r < nr; r++) {                                                           \
			const T *v = row_at(w, ws, r);                                                   \
			float sum = 0.0f;                                                                \
			for (int64_t i = 0; i < n; i++)                                                  \
				sum += TO_F32(v[i]) * x[i];                                              \
			s[r] = sum;                                                                      \
		}                                                                                        \
	}

static inline float f32_value(float v)
{
	return v;
}

FLOAT_DOT_ROWS_REF(f32, float, f32_value)
FLOAT_DOT_ROWS_REF(f16, uint16_t, ops_f16_to_f32)
FLOAT_DOT_ROWS_REF(bf16, uint16_t, ops_bf16_to_f32)

static inline float dot_q4_0(const struct blk_q4_0 *b, const struct blk_q8_32 *y)
{
	int isum = 0;

	for (int j = 0; j < 16; j++)
		isum += ((b->qs[j] & 15) - 8) * y->qs[j] + ((b->qs[j] >> 4) - 8) * y->qs[j + 16];
	return F16(b->d) * y->d * (float)isum;
}

static inline float dot_q8_0(const struct blk_q8_0 *b, const struct blk_q8_32 *y)
{
	int isum = 0;

	for (int j = 0; j < 32; j++)
		isum += b->qs[j] * y->qs[j];
	return F16(b->d) * y->d * (float)isum;
}

/* q4_k and q5_k: sum_j d sc_j sum(q y) - dmin m_j sum(y), with every sum over a
 * sub-block of 32 and the y sums from the activation's 16-element sums. */
static inline float dot_k_affine(const uint8_t *qs, const uint8_t *qh, const uint8_t *scales, uint16_t d,
				 uint16_t dmin, const struct blk_q8_256 *y)
{
	int isum = 0, msum = 0;

	for (int j = 0; j < 8; j++) {
		const int8_t *yq = y->qs + 32 * j;
		int dot = 0;
		uint8_t sc, m;

		ops_k_scale_min(scales, j, &sc, &m);
		for (int l = 0; l < 32; l++)
			dot += k_sub_value(qs, qh, j, l) * yq[l];
		isum += sc * dot;
		msum += m * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
	}
	return y->d * (F16(d) * (float)isum - F16(dmin) * (float)msum);
}

static inline float dot_q4_k(const struct blk_q4_k *b, const struct blk_q8_256 *y)
{
	return dot_k_affine(b->qs, NULL, b->scales, b->d, b->dmin, y);
}

static inline float dot_q5_k(const struct blk_q5_k *b, const struct blk_q8_256 *y)
{
	return dot_k_affine(b->qs, b->qh, b->scales, b->d, b->dmin, y);
}

static inline float dot_q6_k(const struct blk_q6_k *b, const struct blk_q8_256 *y)
{
	int isum = 0;

	for (int k = 0; k < 16; k++) {
		int dot = 0;

		for (int e = 16 * k; e < 16 * k + 16; e++)
			dot += (q6_k_value(b, e) - 32) * y->qs[e];
		isum += b->scales[k] * dot;
	}
	return F16(b->d) * y->d * (float)isum;
}

/* ---- weight quantizers ------------------------------------------------------------- */

/* The f16 of d, and the inverse of the value it rounds to (0 for 0). */
static inline uint16_t f16_scale(float d, float *id)
{
	uint16_t h = ops_f32_to_f16(d);
	float dq = ops_f16_to_f32(h);

	*id = dq != 0.0f ? 1.0f / dq : 0.0f;
	return h;
}

static inline void qnt_q4_0(const float *x, struct blk_q4_0 *b)
{
	float amax = 0.0f, id;

	for (int j = 0; j < QK4_0; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	b->d = f16_scale(amax / 7.0f, &id);
	for (int j = 0; j < 16; j++) {
		int lo = clampi((int)nearbyintf(x[j] * id) + 8, 0, 15);
		int hi = clampi((int)nearbyintf(x[j + 16] * id) + 8, 0, 15);

		b->qs[j] = (uint8_t)(lo | hi << 4);
	}
}

static inline void qnt_q8_0(const float *x, struct blk_q8_0 *b)
{
	float amax = 0.0f, id;

	for (int j = 0; j < QK8_0; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	b->d = f16_scale(amax / 127.0f, &id);
	for (int j = 0; j < QK8_0; j++)
		b->qs[j] = (int8_t)clampi((int)nearbyintf(x[j] * id), -127, 127);
}

/* Packs 8 6-bit (scale, min) pairs into the 12 bytes ops_k_scale_min reads. */
static void pack_k_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t s[12])
{
	for (int j = 0; j < 4; j++) {
		s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
		s[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
		s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
	}
}

/* q4_k / q5_k with `levels` = 15 or 31: each sub-block of 32 maps [min, max]
 * (min clamped to <= 0) onto 0..levels; the sub-block scales and mins are then
 * quantized to 6 bits against the super-block's largest. Returns the values
 * q[256] and fills d, dmin, scales. */
static void quantize_k_affine(const float *x, int levels, uint16_t *d16, uint16_t *dmin16,
			      uint8_t scales[12], uint8_t q[QK_K])
{
	float scale[8], mins[8], max_scale = 0.0f, max_min = 0.0f, id, idm, d, dmin;
	uint8_t sc[8], m[8];

	for (int j = 0; j < 8; j++) {
		float lo = 0.0f, hi = 0.0f;

		for (int l = 0; l < 32; l++) {
			lo = fminf(lo, x[32 * j + l]);
			hi = fmaxf(hi, x[32 * j + l]);
		}
		scale[j] = (hi - lo) / (float)levels;
		mins[j] = -lo;
		max_scale = fmaxf(max_scale, scale[j]);
		max_min = fmaxf(max_min, mins[j]);
	}
	*d16 = f16_scale(max_scale / 63.0f, &id);
	*dmin16 = f16_scale(max_min / 63.0f, &idm);
	d = ops_f16_to_f32(*d16);
	dmin = ops_f16_to_f32(*dmin16);
	for (int j = 0; j < 8; j++) {
		float ds, dm;

		sc[j] = (uint8_t)clampi((int)nearbyintf(scale[j] * id), 0, 63);
		m[j] = (uint8_t)clampi((int)nearbyintf(mins[j] * idm), 0, 63);
		ds = d * sc[j];
		dm = dmin * m[j];
		for (int l = 0; l < 32; l++)
			q[32 * j + l] = (uint8_t)(ds > 0.0f ? clampi((int)nearbyintf((x[32 * j + l] + dm) / ds), 0, levels) : 0);
	}
	pack_k_scales(sc, m, scales);
}

static inline void qnt_q4_k(const float *x, struct blk_q4_k *b)
{
	uint8_t q[QK_K];

	quantize_k_affine(x, 15, &b->d, &b->dmin, b->scales, q);
	for (int c = 0; c < 4; c++)
		for (int l = 0; l < 32; l++)
			b->qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
}

static inline void qnt_q5_k(const float *x, struct blk_q5_k *b)
{
	uint8_t q[QK_K];

	quantize_k_affine(x, 31, &b->d, &b->dmin, b->scales, q);
	memset(b->qh, 0, sizeof b->qh);
	for (int c = 0; c < 4; c++)
		for (int l = 0; l < 32; l++)
			b->qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 15) | (q[64 * c + 32 + l] & 15) << 4);
	for (int j = 0; j < 8; j++)
		for (int l = 0; l < 32; l++)
			b->qh[l] |= (uint8_t)((q[32 * j + l] >> 4) << j);
}

static inline void qnt_q6_k(const float *x, struct blk_q6_k *b)
{
	float scale[16], max_abs_scale = 0.0f, id, d;
	uint8_t q[QK_K];

	for (int k = 0; k < 16; k++) {
		float amax = 0.0f;

		for (int l = 0; l < 16; l++)
			amax = fmaxf(amax, fabsf(x[16 * k + l]));
		scale[k] = amax / 31.0f;
		max_abs_scale = fmaxf(max_abs_scale, scale[k]);
	}
	b->d = f16_scale(max_abs_scale / 127.0f, &id);
	d = ops_f16_to_f32(b->d);
	for (int k = 0; k < 16; k++) {
		float ds;

		b->scales[k] = (int8_t)clampi((int)nearbyintf(scale[k] * id), 0, 127);
		ds = d * b->scales[k];
		for (int l = 0; l < 16; l++)
			q[16 * k + l] = (uint8_t)(ds > 0.0f ? clampi((int)nearbyintf(x[16 * k + l] / ds) + 32, 0, 63) : 32);
	}
	memset(b->ql, 0, sizeof b->ql);
	memset(b->qh, 0, sizeof b->qh);
	for (int e = 0; e < QK_K; e++) {
		int h = e / 128, g = (e % 128) / 32, l = e % 32;

		b->ql[64 * h + l + 32 * (g & 1)] |= (uint8_t)((q[e] & 15) << (g >= 2 ? 4 : 0));
		b->qh[32 * h + l] |= (uint8_t)((q[e] >> 4) << (2 * g));
	}
}

OPS_REF_ROWS(q4_0, blk_q4_0, blk_q8_32, QK4_0)
OPS_REF_ROWS(q8_0, blk_q8_0, blk_q8_32, QK8_0)
OPS_REF_ROWS(q4_k, blk_q4_k, blk_q8_256, QK_K)
OPS_REF_ROWS(q5_k, blk_q5_k, blk_q8_256, QK_K)
OPS_REF_ROWS(q6_k, blk_q6_k, blk_q8_256, QK_K)

int ops_quantize_row(uint32_t type, const float *x, void *out, int64_t n)
{
	const struct tkv_dtype_traits *tr = tkv_dtype_traits(type);

	if (!tr || n % tr->blck)
		return -1;
	switch (type) {
	case TKV_F32:
		memcpy(out, x, (size_t)n * sizeof(float));
		return 0;
	case TKV_F16:
		for (int64_t i = 0; i < n; i++)
			((uint16_t *)out)[i] = ops_f32_to_f16(x[i]);
		return 0;
	case TKV_BF16:
		for (int64_t i = 0; i < n; i++)
			((uint16_t *)out)[i] = ops_f32_to_bf16(x[i]);
		return 0;
	case TKV_Q4_0: quantize_q4_0_ref(x, out, n); return 0;
	case TKV_Q8_0: quantize_q8_0_ref(x, out, n); return 0;
	case TKV_Q4_K: quantize_q4_k_ref(x, out, n); return 0;
	case TKV_Q5_K: quantize_q5_k_ref(x, out, n); return 0;
	case TKV_Q6_K: quantize_q6_k_ref(x, out, n); return 0;
	case TKV_Q4_1: quantize_q4_1_ref(x, out, n); return 0;
	case TKV_Q5_0: quantize_q5_0_ref(x, out, n); return 0;
	case TKV_Q5_1: quantize_q5_1_ref(x, out, n); return 0;
	case TKV_IQ4_NL: quantize_iq4_nl_ref(x, out, n); return 0;
	case TKV_Q2_K: quantize_q2_k_ref(x, out, n); return 0;
	case TKV_Q3_K: quantize_q3_k_ref(x, out, n); return 0;
	case TKV_IQ4_XS: quantize_iq4_xs_ref(x, out, n); return 0;
	default: return -1;
	}
}

/* ---- panels (see ops_impl.h) ------------------------------------------------------ */

/* The generic packer: decode(row, block, q, &d, &m) gives block b of a row. */
void ops_pack_rows(const void *w, size_t ws, int nr, int64_t n, void *panel, ops_panel_decode_fn decode)
{
	uint8_t *pb = panel;
	static const uint8_t zero[32];

	for (int64_t b = 0; b < n / 32; b++, pb += OPS_PANEL_BLOCK)
		for (int r = 0; r < OPS_PANEL_ROWS; r++) {
			uint8_t q[32];
			float d, m;

			if (r >= nr) {
				ops_panel_put(pb, r, zero, 0.0f, 0.0f);
				continue;
			}
			decode((const char *)w + (size_t)r * ws, b, q, &d, &m);
			ops_panel_put(pb, r, q, d, m);
		}
}

static void decode_q4_0(const void *row, int64_t b, uint8_t q[32], float *d, float *m)
{
	const struct blk_q4_0 *x = (const struct blk_q4_0 *)row + b;

	for (int j = 0; j < 16; j++) {
		q[j] = x->qs[j] & 15;
		q[j + 16] = x->qs[j] >> 4;
	}
	*d = F16(x->d);
	*m = -8.0f * *d;
}

static void decode_q8_0(const void *row, int64_t b, uint8_t q[32], float *d, float *m)
{
	const struct blk_q8_0 *x = (const struct blk_q8_0 *)row + b;

	memcpy(q, x->qs, 32);
	*d = F16(x->d);
	*m = 0.0f;
}

/* Sub-block j = b % 8 of super-block b / 8. */
static inline void decode_k_affine(const uint8_t *qs, const uint8_t *qh, const uint8_t *scales, uint16_t d16,
				   uint16_t dmin16, int j, uint8_t q[32], float *d, float *m)
{
	uint8_t sc, mn;

	ops_k_scale_min(scales, j, &sc, &mn);
	for (int l = 0; l < 32; l++)
		q[l] = (uint8_t)k_sub_value(qs, qh, j, l);
	*d = F16(d16) * sc;
	*m = -(F16(dmin16) * mn);
}

static void decode_q4_k(const void *row, int64_t b, uint8_t q[32], float *d, float *m)
{
	const struct blk_q4_k *x = (const struct blk_q4_k *)row + b / 8;

	decode_k_affine(x->qs, NULL, x->scales, x->d, x->dmin, (int)(b % 8), q, d, m);
}

static void decode_q5_k(const void *row, int64_t b, uint8_t q[32], float *d, float *m)
{
	const struct blk_q5_k *x = (const struct blk_q5_k *)row + b / 8;

	decode_k_affine(x->qs, x->qh, x->scales, x->d, x->dmin, (int)(b % 8), q, d, m);
}

OPS_PACK_REF(q4_0)
OPS_PACK_REF(q8_0)
OPS_PACK_REF(q4_k)
OPS_PACK_REF(q5_k)

/* q6_k panels (ops_impl.h): one super-block of each row a panel block. */
void pack_q6_k_ref(const void *w, size_t ws, int nr, int64_t n, void *panel)
{
	uint8_t *pb = panel;

	memset(panel, 0, (size_t)(n / QK_K) * OPS_PANEL_K6_BLOCK);
	for (int64_t b = 0; b < n / QK_K; b++, pb += OPS_PANEL_K6_BLOCK)
		for (int r = 0; r < nr; r++) {
			const struct blk_q6_k *x = (const struct blk_q6_k *)((const char *)w + (size_t)r * ws) + b;
			float d = F16(x->d);

			for (int e = 0; e < QK_K; e++)
				pb[32 * (e / 4) + 4 * r + e % 4] = (uint8_t)(int8_t)(q6_k_value(x, e) - 32);
			for (int h = 0; h < QK_K / 16; h++)
				pb[2048 + 16 * h + 2 * r] = pb[2048 + 16 * h + 2 * r + 1] = (uint8_t)x->scales[h];
			memcpy(pb + 2304 + 4 * r, &d, sizeof d);
		}
}

void panel_k6_ref(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss)
{
	for (int c = 0; c < nc; c++) {
		const struct blk_q8_32 *y = (const void *)((const char *)a + (size_t)c * as);

		for (int r = 0; r < OPS_PANEL_ROWS; r++) {
			const uint8_t *pb = panel;
			float acc = 0.0f;

			for (int64_t b = 0; b < n / QK_K; b++, pb += OPS_PANEL_K6_BLOCK) {
				const struct blk_q8_32 *yb = y + 8 * b;
				int isum = 0;
				float d;

				for (int h = 0; h < QK_K / 16; h++) {
					int dot = 0;

					for (int e = 16 * h; e < 16 * h + 16; e++)
						dot += (int8_t)pb[32 * (e / 4) + 4 * r + e % 4] * yb[e / 32].qs[e % 32];
					isum += (int8_t)pb[2048 + 16 * h + 2 * r] * dot;
				}
				memcpy(&d, pb + 2304 + 4 * r, sizeof d);
				acc += d * yb[0].d * (float)isum;
			}
			s[(size_t)c * ss + r] = acc;
		}
	}
}

/* sum over blocks of (d dy) sum(q y) + m s, per row; q unsigned or signed. */
static void panel_dot(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss,
		      int is_signed)
{
	for (int c = 0; c < nc; c++) {
		const struct blk_q8_32 *y = (const void *)((const char *)a + (size_t)c * as);

		for (int r = 0; r < OPS_PANEL_ROWS; r++) {
			const uint8_t *pb = panel;
			float acc = 0.0f, accm = 0.0f;

			for (int64_t b = 0; b < n / 32; b++, pb += OPS_PANEL_BLOCK) {
				int isum = 0;
				float d, m;

				for (int e = 0; e < 32; e++) {
					uint8_t v = pb[32 * (e / 4) + 4 * r + e % 4];

					isum += (is_signed ? (int)(int8_t)v : (int)v) * y[b].qs[e];
				}
				memcpy(&d, pb + 256 + 4 * r, sizeof d);
				memcpy(&m, pb + 288 + 4 * r, sizeof m);
				acc += d * y[b].d * (float)isum;
				accm += m * y[b].s;
			}
			s[(size_t)c * ss + r] = acc + accm;
		}
	}
}

void panel_u_ref(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss)
{
	panel_dot(n, panel, a, as, nc, s, ss, 0);
}

void panel_s8_ref(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss)
{
	panel_dot(n, panel, a, as, nc, s, ss, 1);
}

/* ---- the interleaved layout (see ops_impl.h) ------------------------------------------ */

static inline int q4_0_value(const struct blk_q4_0 *b, int e)
{
	return e < 16 ? b->qs[e] & 15 : b->qs[e - 16] >> 4;
}

/* Load-time only, so scalar everywhere. */
void repack_q4_0_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst)
{
	uint8_t *o = dst;

	for (int64_t r0 = 0; r0 < rows; r0 += 8)
		for (int64_t b = 0; b < n / QK4_0; b++, o += OPS_X8_Q4_0) {
			for (int r = 0; r < 8; r++) {
				const struct blk_q4_0 *x = (const struct blk_q4_0 *)((const char *)w + (size_t)(r0 + r) * ws) + b;

				memcpy(o + 2 * r, &x->d, 2);
				for (int g = 0; g < 4; g++)
					for (int k = 0; k < 4; k++)
						o[16 + 32 * g + 4 * r + k] =
							(uint8_t)(q4_0_value(x, 8 * g + k) | q4_0_value(x, 8 * g + 4 + k) << 4);
			}
		}
}

void repack_q8_0_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst)
{
	uint8_t *o = dst;

	for (int64_t r0 = 0; r0 < rows; r0 += 8)
		for (int64_t b = 0; b < n / QK8_0; b++, o += OPS_X8_Q8_0)
			for (int r = 0; r < 8; r++) {
				const struct blk_q8_0 *x = (const struct blk_q8_0 *)((const char *)w + (size_t)(r0 + r) * ws) + b;

				memcpy(o + 2 * r, &x->d, 2);
				for (int g = 0; g < 8; g++)
					memcpy(o + 16 + 32 * g + 4 * r, x->qs + 4 * g, 4);
			}
}

/* Element e of row r of a q4_0 group block, as 0..15. */
static inline int x8_q4_0(const uint8_t *blk, int r, int e)
{
	return x8_nib(blk + 16, r, e);
}

static inline int x8_q8_0(const uint8_t *blk, int r, int e)
{
	return (int8_t)blk[16 + 32 * (e / 4) + 4 * r + e % 4];
}

static inline float x8_d(const uint8_t *blk, int r)
{
	return x8_half(blk, 2 * (size_t)r);
}

/* The same sums, in the same float order, as dot_rows_q4_0_ref / q8_0_ref:
 * groups of bs bytes, elements signed (q8_0) or 0..15 less 8 (q4_0). */
static void gemv_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss,
			size_t bs, int q8)
{
	for (int c = 0; c < nc; c++) {
		const struct blk_q8_32 *y = (const void *)((const char *)a + (size_t)c * as);

		for (int r = 0; r < 8; r++) {
			const uint8_t *blk = group;
			float sum = 0.0f;

			for (int64_t b = 0; b < n / 32; b++, blk += bs) {
				int isum = 0;

				for (int e = 0; e < 32; e++)
					isum += (q8 ? x8_q8_0(blk, r, e) : x8_q4_0(blk, r, e) - 8) * y[b].qs[e];
				sum += x8_d(blk, r) * y[b].d * (float)isum;
			}
			s[(size_t)c * ss + r] = sum;
		}
	}
}

void gemv_q4_0_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)
{
	gemv_x8_ref(n, group, a, as, nc, s, ss, OPS_X8_Q4_0, 0);
}

void gemv_q8_0_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)
{
	gemv_x8_ref(n, group, a, as, nc, s, ss, OPS_X8_Q8_0, 1);
}

void dequant_q4_0_x8_ref(const void *group, int r, int64_t n, float *out)
{
	const uint8_t *blk = group;

	for (int64_t b = 0; b < n / 32; b++, blk += OPS_X8_Q4_0)
		for (int e = 0; e < 32; e++)
			out[32 * b + e] = (float)(x8_q4_0(blk, r, e) - 8) * x8_d(blk, r);
}

void dequant_q8_0_x8_ref(const void *group, int r, int64_t n, float *out)
{
	const uint8_t *blk = group;

	for (int64_t b = 0; b < n / 32; b++, blk += OPS_X8_Q8_0)
		for (int e = 0; e < 32; e++)
			out[32 * b + e] = (float)x8_q8_0(blk, r, e) * x8_d(blk, r);
}

void pack_q4_0_x8_ref(const void *group, int64_t n, void *panel)
{
	const uint8_t *blk = group;
	uint8_t *pb = panel;

	for (int64_t b = 0; b < n / 32; b++, blk += OPS_X8_Q4_0, pb += OPS_PANEL_BLOCK)
		for (int r = 0; r < 8; r++) {
			uint8_t q[32];

			for (int e = 0; e < 32; e++)
				q[e] = (uint8_t)x8_q4_0(blk, r, e);
			ops_panel_put(pb, r, q, x8_d(blk, r), -8.0f * x8_d(blk, r));
		}
}

/* ---- q4_k and q5_k in the interleaved layout -------------------------------------- */

/* A pair of sub-blocks of a q4_k/q5_k group super-block: 4 chunks of 64
 * bytes, then q5_k's 64 bytes of fifth bits. */
#define X8_K_PAIR(five) ((five) ? 320 : 256)

/* Byte of a q4_k/q5_k group super-block holding the low 4 bits of element l
 * (0..31) of sub-block j of row r, and the nibble's shift; *bit: the bit of
 * the super-block (byte bit / 8) holding q5_k's fifth bit. */
static inline size_t x8_k_at(int r, int j, int l, int five, int *shift, int *bit)
{
	int t = j / 2, p = j % 2, c = l / 8, h = (l % 8) / 4, b = 4 * (8 * p + r) + l % 4;
	int pair = 128 + X8_K_PAIR(five) * t;

	*shift = 4 * h;
	*bit = 8 * (pair + 256 + 8 * (2 * c + h)) + b;
	return (size_t)pair + 64 * (size_t)c + (size_t)b;
}

/* One row's super-block in the row layout's fields (qh NULL for q4_k). */
struct k_affine_view {
	const uint16_t *d, *dmin;
	const uint8_t *scales, *qs, *qh;
};

static struct k_affine_view k_view(const void *blk, int five)
{
	if (five) {
		const struct blk_q5_k *x = blk;

		return (struct k_affine_view){ &x->d, &x->dmin, x->scales, x->qs, x->qh };
	}
	const struct blk_q4_k *x = blk;

	return (struct k_affine_view){ &x->d, &x->dmin, x->scales, x->qs, NULL };
}

static void repack_k_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst, int five)
{
	size_t bs = five ? sizeof(struct blk_q5_k) : sizeof(struct blk_q4_k), sbs = 8 * bs;
	uint8_t *o = dst;

	for (int64_t r0 = 0; r0 < rows; r0 += 8)
		for (int64_t b = 0; b < n / QK_K; b++, o += sbs) {
			memset(o, 0, sbs);
			for (int r = 0; r < 8; r++) {
				struct k_affine_view x = k_view((const char *)w + (size_t)(r0 + r) * ws + (size_t)b * bs, five);

				memcpy(o + 2 * r, x.d, 2);
				memcpy(o + 16 + 2 * r, x.dmin, 2);
				for (int j = 0; j < 8; j++) {
					uint8_t sc, m;
					int vs = 8 * j + r, vm = 64 + 8 * r + j;

					ops_k_scale_min(x.scales, j, &sc, &m);
					x8_six_put(o + 32, 128, vs, sc);
					x8_six_put(o + 32, 128, vm, m);
				}
				/* byte 4 (8p + r) + e of chunk c of pair t: elements 8c + e
				 * and 8c + 4 + e of sub-block 2t + p (x8_k_at) */
				for (int j = 0; j < 8; j++) {
					uint8_t *pair = o + 128 + X8_K_PAIR(five) * (j / 2);

					for (int c = 0; c < 4; c++)
						for (int e = 0; e < 4; e++) {
							int by = 4 * (8 * (j % 2) + r) + e;
							int v0 = k_sub_value(x.qs, x.qh, j, 8 * c + e);
							int v1 = k_sub_value(x.qs, x.qh, j, 8 * c + 4 + e);

							pair[64 * c + by] = (uint8_t)((v0 & 15) | (v1 & 15) << 4);
							if (five) {
								pair[256 + 16 * c + by / 8] |= (uint8_t)((v0 >> 4) << (by % 8));
								pair[264 + 16 * c + by / 8] |= (uint8_t)((v1 >> 4) << (by % 8));
							}
						}
				}
			}
		}
}

void repack_q4_k_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst)
{
	repack_k_x8(w, ws, rows, n, dst, 0);
}

void repack_q5_k_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst)
{
	repack_k_x8(w, ws, rows, n, dst, 1);
}

/* Scale (j < 8) or min (8 + j) of sub-block j of row r of a q4_k/q5_k
 * group's super-block sb. */
static inline int x8_k_sm(const uint8_t *sb, int r, int j)
{
	return x8_six(sb + 32, 128, j < 8 ? 8 * j + r : 64 + 8 * r + (j - 8));
}

/* Row r of a group super-block back as a q4_k or q5_k block (out): the
 * references run the row kernels' own block functions on it, so they give
 * the same floats. */
static void x8_k_block(const uint8_t *sb, int r, void *out, int five)
{
	struct k_affine_view x = k_view(out, five);
	uint8_t sc[8], m[8], *scales = (uint8_t *)x.scales, *qs = (uint8_t *)x.qs, *qh = (uint8_t *)x.qh;

	memset(out, 0, five ? sizeof(struct blk_q5_k) : sizeof(struct blk_q4_k));
	memcpy((uint16_t *)x.d, sb + 2 * r, 2);
	memcpy((uint16_t *)x.dmin, sb + 16 + 2 * r, 2);
	for (int j = 0; j < 8; j++) {
		sc[j] = (uint8_t)x8_k_sm(sb, r, j);
		m[j] = (uint8_t)x8_k_sm(sb, r, 8 + j);
	}
	pack_k_scales(sc, m, scales);
	for (int j = 0; j < 8; j++)
		for (int l = 0; l < 32; l++) {
			int sh, bit;
			size_t at = x8_k_at(r, j, l, five, &sh, &bit);
			uint8_t v = (uint8_t)((sb[at] >> sh) & 15);

			qs[32 * (j / 2) + l] |= (uint8_t)(v << 4 * (j % 2));
			if (five)
				qh[l] |= (uint8_t)(((sb[bit / 8] >> (bit % 8)) & 1) << j);
		}
}

/* The references, for either type: one super-block of one row at a time. */
union k_block {
	struct blk_q4_k q4;
	struct blk_q5_k q5;
};

static float x8_k_dot(const uint8_t *sb, int r, const struct blk_q8_256 *y, int five)
{
	union k_block x;

	x8_k_block(sb, r, &x, five);
	return five ? dot_q5_k(&x.q5, y) : dot_q4_k(&x.q4, y);
}

static void gemv_k_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss,
			  int five)
{
	size_t sbs = five ? OPS_X8_Q5_K_SB : OPS_X8_Q4_K_SB;

	for (int c = 0; c < nc; c++) {
		const struct blk_q8_256 *y = (const void *)((const char *)a + (size_t)c * as);

		for (int r = 0; r < 8; r++) {
			const uint8_t *sb = group;
			float sum = 0.0f;

			for (int64_t b = 0; b < n / QK_K; b++, sb += sbs)
				sum += x8_k_dot(sb, r, &y[b], five);
			s[(size_t)c * ss + r] = sum;
		}
	}
}

void gemv_q4_k_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)
{
	gemv_k_x8_ref(n, group, a, as, nc, s, ss, 0);
}

void gemv_q5_k_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)
{
	gemv_k_x8_ref(n, group, a, as, nc, s, ss, 1);
}

static void dequant_k_x8_ref(const void *group, int r, int64_t n, float *out, int five)
{
	const uint8_t *sb = group;

	for (int64_t b = 0; b < n / QK_K; b++, sb += five ? OPS_X8_Q5_K_SB : OPS_X8_Q4_K_SB, out += QK_K) {
		union k_block x;

		x8_k_block(sb, r, &x, five);
		if (five)
			deq_q5_k(&x.q5, out);
		else
			deq_q4_k(&x.q4, out);
	}
}

void dequant_q4_k_x8_ref(const void *group, int r, int64_t n, float *out)
{
	dequant_k_x8_ref(group, r, n, out, 0);
}

void dequant_q5_k_x8_ref(const void *group, int r, int64_t n, float *out)
{
	dequant_k_x8_ref(group, r, n, out, 1);
}

static void pack_k_x8_ref(const void *group, int64_t n, void *panel, int five)
{
	const uint8_t *sb = group;

	for (int64_t b = 0; b < n / QK_K; b++, sb += five ? OPS_X8_Q5_K_SB : OPS_X8_Q4_K_SB)
		for (int r = 0; r < 8; r++) {
			union k_block x;
			struct k_affine_view v;

			x8_k_block(sb, r, &x, five);
			v = k_view(&x, five);
			for (int j = 0; j < 8; j++) {
				uint8_t q[32];
				float d, m;

				decode_k_affine(v.qs, v.qh, v.scales, *v.d, *v.dmin, j, q, &d, &m);
				ops_panel_put((uint8_t *)panel + (size_t)(8 * b + j) * OPS_PANEL_BLOCK, r, q, d, m);
			}
		}
}

void pack_q4_k_x8_ref(const void *group, int64_t n, void *panel)
{
	pack_k_x8_ref(group, n, panel, 0);
}

void pack_q5_k_x8_ref(const void *group, int64_t n, void *panel)
{
	pack_k_x8_ref(group, n, panel, 1);
}

/* ---- q6_k in the interleaved layout ---------------------------------------------- */

/* Bytes of a q6_k group super-block holding element e of row r: its low
 * nibble (at *lo, shift *ls) and its top bits (at *hi, shift *hs). */
static inline void x8_q6_k_at(int r, int e, size_t *lo, int *ls, size_t *hi, int *hs)
{
	int g = e / 16, u = g / 2, p = g % 2, q = (e % 16) / 4, lane = 4 * (8 * p + r) + e % 4;

	*lo = 144 + 192 * (size_t)u + 64 * (size_t)(q / 2) + (size_t)lane;
	*ls = 4 * (q % 2);
	*hi = 144 + 192 * (size_t)u + 128 + (size_t)lane;
	*hs = 2 * q;
}

/* The bytes of a q6_k block holding element e: ql (shift 0 or 4), qh (2g). */
static inline void q6_k_at(int e, int *l, int *ls, int *h, int *hs)
{
	int half = e / 128, g = (e % 128) / 32, k = e % 32;

	*l = 64 * half + k + 32 * (g & 1);
	*ls = g >= 2 ? 4 : 0;
	*h = 32 * half + k;
	*hs = 2 * g;
}

void repack_q6_k_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst)
{
	uint8_t *o = dst;

	for (int64_t r0 = 0; r0 < rows; r0 += 8)
		for (int64_t b = 0; b < n / QK_K; b++, o += OPS_X8_Q6_K_SB) {
			/* every byte is written below: no zeroing */
			for (int r = 0; r < 8; r++) {
				const struct blk_q6_k *x = (const struct blk_q6_k *)((const char *)w + (size_t)(r0 + r) * ws) + b;

				memcpy(o + 2 * r, &x->d, 2);
				for (int g = 0; g < 16; g++)
					o[16 + 8 * g + r] = (uint8_t)x->scales[g];
				/* lane 4 (8p + r) + k of unit u: elements 16 (2u + p) + 4q + k,
				 * q = 0..3 (x8_q6_k_at) */
				for (int u = 0; u < 8; u++)
					for (int p = 0; p < 2; p++)
						for (int k = 0; k < 4; k++) {
							uint8_t *at = o + 144 + 192 * u + 4 * (8 * p + r) + k;
							int e = 16 * (2 * u + p) + k;
							int v0 = q6_k_value(x, e), v1 = q6_k_value(x, e + 4);
							int v2 = q6_k_value(x, e + 8), v3 = q6_k_value(x, e + 12);

							at[0] = (uint8_t)((v0 & 15) | (v1 & 15) << 4);
							at[64] = (uint8_t)((v2 & 15) | (v3 & 15) << 4);
							at[128] = (uint8_t)(v0 >> 4 | (v1 >> 4) << 2 | (v2 >> 4) << 4 | (v3 >> 4) << 6);
						}
			}
		}
}

/* Row r of a group super-block back as a q6_k block (see x8_q4_k_block). */
static void x8_q6_k_block(const uint8_t *sb, int r, struct blk_q6_k *x)
{
	memset(x, 0, sizeof *x);
	memcpy(&x->d, sb + 2 * r, 2);
	for (int g = 0; g < 16; g++)
		x->scales[g] = (int8_t)sb[16 + 8 * g + r];
	for (int e = 0; e < QK_K; e++) {
		size_t lo, hi;
		int ls, hs, l, bls, h, bhs, v;

		x8_q6_k_at(r, e, &lo, &ls, &hi, &hs);
		v = ((sb[lo] >> ls) & 15) | ((sb[hi] >> hs) & 3) << 4;
		q6_k_at(e, &l, &bls, &h, &bhs);
		x->ql[l] |= (uint8_t)((v & 15) << bls);
		x->qh[h] |= (uint8_t)((v >> 4) << bhs);
	}
}

void gemv_q6_k_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)
{
	for (int c = 0; c < nc; c++) {
		const struct blk_q8_256 *y = (const void *)((const char *)a + (size_t)c * as);

		for (int r = 0; r < 8; r++) {
			const uint8_t *sb = group;
			float sum = 0.0f;

			for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_Q6_K_SB) {
				struct blk_q6_k x;

				x8_q6_k_block(sb, r, &x);
				sum += dot_q6_k(&x, &y[b]);
			}
			s[(size_t)c * ss + r] = sum;
		}
	}
}

void dequant_q6_k_x8_ref(const void *group, int r, int64_t n, float *out)
{
	const uint8_t *sb = group;

	for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_Q6_K_SB, out += QK_K) {
		struct blk_q6_k x;

		x8_q6_k_block(sb, r, &x);
		deq_q6_k(&x, out);
	}
}

void pack_q6_k_x8_ref(const void *group, int64_t n, void *panel)
{
	const uint8_t *sb = group;

	for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_Q6_K_SB) {
		struct blk_q6_k x[8];

		for (int r = 0; r < 8; r++)
			x8_q6_k_block(sb, r, &x[r]);
		pack_q6_k_ref(x, sizeof x[0], 8, QK_K, (uint8_t *)panel + (size_t)b * OPS_PANEL_K6_BLOCK);
	}
}
