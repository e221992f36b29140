/* quant_more.c - scalar references of the other common GGUF weight types:
 * q4_1, q5_0, q5_1, iq4_nl (blocks of 32, activations OPS_ACT_Q8_1 for q4_1
 * and q5_1, OPS_ACT_Q8_32 for the others) and q2_k, q3_k, iq4_xs (blocks of
 * 256, activations OPS_ACT_Q8_256). For each: dequantize
 * a row, integer row dots, a panel decoder where the type has blocks of 32
 * with one scale, and a weight quantizer. Written from the layouts in
 * ops_impl.h; dequantizing rounds as the GGUF reference does (a scale per
 * block or sub-block times the integer value, then any offset). The arch/
 * versions are tested against these. */
#include <math.h>
#include <string.h>

#include "ops/quant_ref.h"

const int8_t ops_iq4nl_values[16] = {
	-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* ---- element access ----------------------------------------------------------- */

/* Nibble value of element e (0..31) of a 16-byte qs of a block of 32. */
static inline int nib32(const uint8_t *qs, int e)
{
	return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
}

/* Bit e of a little-endian uint32 stored as 4 bytes. */
static inline int bit32(const uint8_t *qh, int e)
{
	return (qh[e / 8] >> (e % 8)) & 1;
}

/* q2_k / q3_k: the 2-bit field of element e (0..255) in qs[64]. */
static inline int k_low2(const uint8_t *qs, int e)
{
	int h = e / 128, g = (e % 128) / 32, l = e % 32;

	return (qs[32 * h + l] >> (2 * g)) & 3;
}

/* q3_k: the signed value (-4..3) of element e. */
static inline int q3_k_value(const struct blk_q3_k *b, int e)
{
	int h = e / 128, g = (e % 128) / 32, l = e % 32;

	return k_low2(b->qs, e) - ((b->hmask[l] >> (4 * h + g)) & 1 ? 0 : 4);
}

/* q3_k: the 6-bit scale k (0..15), still biased by 32. */
static inline int q3_k_scale(const uint8_t *s, int k)
{
	return ((s[k % 8] >> (4 * (k / 8))) & 15) | ((s[8 + k % 4] >> (2 * (k / 4))) & 3) << 4;
}

/* ---- dequantize --------------------------------------------------------------- */

/* The 5-bit value of element e of a q5_0 / q5_1 block. */
static inline int q5_value(const uint8_t *qs, const uint8_t *qh, int e)
{
	return nib32(qs, e) | bit32(qh, e) << 4;
}

static inline void deq_q4_1(const struct blk_q4_1 *b, float *out)
{
	float d = F16(b->d), m = F16(b->m);

	for (int e = 0; e < 32; e++)
		out[e] = (float)nib32(b->qs, e) * d + m;
}

static inline void deq_q5_0(const struct blk_q5_0 *b, float *out)
{
	float d = F16(b->d);

	for (int e = 0; e < 32; e++)
		out[e] = (float)(q5_value(b->qs, b->qh, e) - 16) * d;
}

static inline void deq_q5_1(const struct blk_q5_1 *b, float *out)
{
	float d = F16(b->d), m = F16(b->m);

	for (int e = 0; e < 32; e++)
		out[e] = (float)q5_value(b->qs, b->qh, e) * d + m;
}

static inline void deq_iq4_nl(const struct blk_iq4_nl *b, float *out)
{
	float d = F16(b->d);

	for (int e = 0; e < 32; e++)
		out[e] = d * (float)ops_iq4nl_values[nib32(b->qs, e)];
}

static inline void deq_q2_k(const struct blk_q2_k *b, float *out)
{
	float d = F16(b->d), dmin = F16(b->dmin);

	for (int k = 0; k < 16; k++) {
		float dl = d * (float)(b->scales[k] & 15), ml = dmin * (float)(b->scales[k] >> 4);

		for (int e = 16 * k; e < 16 * k + 16; e++)
			out[e] = dl * (float)k_low2(b->qs, e) - ml;
	}
}

static inline void deq_q3_k(const struct blk_q3_k *b, float *out)
{
	float d = F16(b->d);

	for (int k = 0; k < 16; k++) {
		float dl = d * (float)(q3_k_scale(b->scales, k) - 32);

		for (int e = 16 * k; e < 16 * k + 16; e++)
			out[e] = dl * (float)q3_k_value(b, e);
	}
}

static inline void deq_iq4_xs(const struct blk_iq4_xs *b, float *out)
{
	float d = F16(b->d);

	for (int j = 0; j < 8; j++, out += 32) {
		float dl = d * (float)(iq4_xs_scale(b, j) - 32);

		for (int e = 0; e < 32; e++)
			out[e] = dl * (float)ops_iq4nl_values[nib32(b->qs + 16 * j, e)];
	}
}

/* ---- row dots ------------------------------------------------------------------ */

/* q4_1 / q5_1: d dy sum(q y) + m s per block, s ~ dy sum(y). */
static inline float dot_q4_1(const struct blk_q4_1 *b, const struct blk_q8_32 *y)
{
	int isum = 0;

	for (int e = 0; e < 32; e++)
		isum += nib32(b->qs, e) * y->qs[e];
	return F16(b->d) * y->d * (float)isum + F16(b->m) * y->s;
}

static inline float dot_q5_0(const struct blk_q5_0 *b, const struct blk_q8_32 *y)
{
	int isum = 0;

	for (int e = 0; e < 32; e++)
		isum += (q5_value(b->qs, b->qh, e) - 16) * y->qs[e];
	return F16(b->d) * y->d * (float)isum;
}

static inline float dot_q5_1(const struct blk_q5_1 *b, const struct blk_q8_32 *y)
{
	int isum = 0;

	for (int e = 0; e < 32; e++)
		isum += q5_value(b->qs, b->qh, e) * y->qs[e];
	return F16(b->d) * y->d * (float)isum + F16(b->m) * y->s;
}

static inline float dot_iq4_nl(const struct blk_iq4_nl *b, const struct blk_q8_32 *y)
{
	int isum = 0;

	for (int e = 0; e < 32; e++)
		isum += ops_iq4nl_values[nib32(b->qs, e)] * y->qs[e];
	return F16(b->d) * y->d * (float)isum;
}

/* q2_k: dy (d sum_k sc_k sum(q y) - dmin sum_k m_k bsum_k) over the 16 groups
 * of 16, the y sums from the activation's 16-element sums. */
static inline float dot_q2_k(const struct blk_q2_k *b, const struct blk_q8_256 *y)
{
	int isum = 0, msum = 0;

	for (int k = 0; k < 16; k++) {
		int dot = 0;

		for (int e = 16 * k; e < 16 * k + 16; e++)
			dot += k_low2(b->qs, e) * y->qs[e];
		isum += (b->scales[k] & 15) * dot;
		msum += (b->scales[k] >> 4) * y->bsums[k];
	}
	return y->d * (F16(b->d) * (float)isum - F16(b->dmin) * (float)msum);
}

static inline float dot_q3_k(const struct blk_q3_k *b, const struct blk_q8_256 *y)
{
	int isum = 0;

	for (int k = 0; k < 16; k++) {
		int dot = 0;

		for (int e = 16 * k; e < 16 * k + 16; e++)
			dot += q3_k_value(b, e) * y->qs[e];
		isum += (q3_k_scale(b->scales, k) - 32) * dot;
	}
	return F16(b->d) * y->d * (float)isum;
}

static inline float dot_iq4_xs(const struct blk_iq4_xs *b, const struct blk_q8_256 *y)
{
	int isum = 0;

	for (int j = 0; j < 8; j++) {
		int dot = 0;

		for (int e = 0; e < 32; e++)
			dot += ops_iq4nl_values[nib32(b->qs + 16 * j, e)] * y->qs[32 * j + e];
		isum += (iq4_xs_scale(b, j) - 32) * dot;
	}
	return F16(b->d) * y->d * (float)isum;
}

/* ---- panels (see ops_impl.h): blocks of 32 with one scale ------------------------- */

static void decode_q4_1(const void *row, int64_t b, uint8_t q[32], float *d, float *m)
{
	const struct blk_q4_1 *x = (const struct blk_q4_1 *)row + b;

	for (int e = 0; e < 32; e++)
		q[e] = (uint8_t)nib32(x->qs, e);
	*d = F16(x->d);
	*m = F16(x->m);
}

static void decode_q5_0(const void *row, int64_t b, uint8_t q[32], float *d, float *m)
{
	const struct blk_q5_0 *x = (const struct blk_q5_0 *)row + b;

	for (int e = 0; e < 32; e++)
		q[e] = (uint8_t)q5_value(x->qs, x->qh, e);
	*d = F16(x->d);
	*m = -16.0f * *d;
}

static void decode_q5_1(const void *row, int64_t b, uint8_t q[32], float *d, float *m)
{
	const struct blk_q5_1 *x = (const struct blk_q5_1 *)row + b;

	for (int e = 0; e < 32; e++)
		q[e] = (uint8_t)q5_value(x->qs, x->qh, e);
	*d = F16(x->d);
	*m = F16(x->m);
}

static void decode_iq4_nl(const void *row, int64_t b, uint8_t q[32], float *d, float *m)
{
	const struct blk_iq4_nl *x = (const struct blk_iq4_nl *)row + b;

	for (int e = 0; e < 32; e++)
		q[e] = (uint8_t)ops_iq4nl_values[nib32(x->qs, e)];
	*d = F16(x->d);
	*m = 0.0f;
}

/* Sub-block b % 8 of super-block b / 8. */
static void decode_iq4_xs(const void *row, int64_t b, uint8_t q[32], float *d, float *m)
{
	const struct blk_iq4_xs *x = (const struct blk_iq4_xs *)row + b / 8;
	int j = (int)(b % 8);

	for (int e = 0; e < 32; e++)
		q[e] = (uint8_t)ops_iq4nl_values[nib32(x->qs + 16 * j, e)];
	*d = F16(x->d) * (float)(iq4_xs_scale(x, j) - 32);
	*m = 0.0f;
}

OPS_PACK_REF(q4_1)
OPS_PACK_REF(q5_0)
OPS_PACK_REF(q5_1)
OPS_PACK_REF(iq4_nl)
OPS_PACK_REF(iq4_xs)

/* ---- weight quantizers ------------------------------------------------------------ */

/* The f16 of d and the float it rounds to. */
static inline uint16_t f16_round(float d, float *dq)
{
	uint16_t h = ops_f32_to_f16(d);

	*dq = F16(h);
	return h;
}

static inline float inv(float d)
{
	return d != 0.0f ? 1.0f / d : 0.0f;
}

/* The element of x[0..n) with the largest magnitude, with its sign. */
static float signed_max(const float *x, int n)
{
	float best = 0.0f;

	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > fabsf(best))
			best = x[i];
	return best;
}

/* q4_1 / q5_1: [min, max] of the block onto 0..levels. */
static void affine32(const float *x, int levels, uint16_t *d16, uint16_t *m16, uint8_t q[32])
{
	float lo = x[0], hi = x[0], d, m, id;

	for (int e = 1; e < 32; e++) {
		lo = fminf(lo, x[e]);
		hi = fmaxf(hi, x[e]);
	}
	*d16 = f16_round((hi - lo) / (float)levels, &d);
	*m16 = f16_round(lo, &m);
	id = inv(d);
	for (int e = 0; e < 32; e++)
		q[e] = (uint8_t)clampi((int)nearbyintf((x[e] - m) * id), 0, levels);
}

/* 32 values 0..15 into 16 bytes: element e < 16 low nibble of byte e. */
static void put_nibbles(uint8_t *qs, const uint8_t q[32])
{
	for (int e = 0; e < 16; e++)
		qs[e] = (uint8_t)((q[e] & 15) | (q[e + 16] & 15) << 4);
}

static void put_bit5(uint8_t qh[4], const uint8_t q[32])
{
	memset(qh, 0, 4);
	for (int e = 0; e < 32; e++)
		qh[e / 8] |= (uint8_t)((q[e] >> 4) << (e % 8));
}

static inline void qnt_q4_1(const float *x, struct blk_q4_1 *b)
{
	uint8_t q[32];

	affine32(x, 15, &b->d, &b->m, q);
	put_nibbles(b->qs, q);
}

static inline void qnt_q5_1(const float *x, struct blk_q5_1 *b)
{
	uint8_t q[32];

	affine32(x, 31, &b->d, &b->m, q);
	put_nibbles(b->qs, q);
	put_bit5(b->qh, q);
}

/* q5_0: the value of largest magnitude maps to -16, the others to the grid. */
static inline void qnt_q5_0(const float *x, struct blk_q5_0 *b)
{
	uint8_t q[32];
	float d, id;

	b->d = f16_round(signed_max(x, 32) / -16.0f, &d);
	id = inv(d);
	for (int e = 0; e < 32; e++)
		q[e] = (uint8_t)clampi((int)nearbyintf(x[e] * id) + 16, 0, 31);
	put_nibbles(b->qs, q);
	put_bit5(b->qh, q);
}

/* Index of the iq4 value nearest t (the values are sorted). */
static int iq4_nearest(float t)
{
	int lo = 0, hi = 15;

	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;

		if (t < (float)ops_iq4nl_values[mid])
			hi = mid;
		else
			lo = mid;
	}
	return t - (float)ops_iq4nl_values[lo] <= (float)ops_iq4nl_values[hi] - t ? lo : hi;
}

/* Squared error of x[0..n) on the iq4 grid of scale d, with the indices. */
static float iq4_fit(const float *x, int n, float d, uint8_t *q)
{
	float id = inv(d), err = 0.0f;

	for (int i = 0; i < n; i++) {
		float e;

		q[i] = (uint8_t)iq4_nearest(x[i] * id);
		e = x[i] - d * (float)ops_iq4nl_values[q[i]];
		err += e * e;
	}
	return err;
}

/* Scale d (rounded to f16 first with to_f16) tried for x[0..n): its indices
 * in q, and d in *best if its error beats *best_err. */
static void iq4_try(const float *x, int n, float d, int to_f16, uint8_t *q, float *best, float *best_err)
{
	float err;

	if (to_f16)
		d = F16(ops_f32_to_f16(d));
	err = iq4_fit(x, n, d, q);
	if (err < *best_err) {
		*best_err = err;
		*best = d;
	}
}

/* The scale of n (<= 32) values on the iq4 grid: the value of largest
 * magnitude onto -127 (and a few scales around it), each refined by least
 * squares for its indices; the one with the smallest error. With to_f16
 * the scales are rounded to f16 before they are tried. */
static float iq4_scale(const float *x, int n, int to_f16)
{
	float base = signed_max(x, n) / -127.0f, best = base, best_err = INFINITY;
	uint8_t q[32];

	if (base == 0.0f)
		return 0.0f;
	for (int k = -4; k <= 4; k++) {
		float num = 0.0f, den = 0.0f;

		iq4_try(x, n, base * (1.0f + 0.04f * (float)k), to_f16, q, &best, &best_err);
		for (int i = 0; i < n; i++) {
			num += x[i] * (float)ops_iq4nl_values[q[i]];
			den += (float)(ops_iq4nl_values[q[i]] * ops_iq4nl_values[q[i]]);
		}
		iq4_try(x, n, num / den, to_f16, q, &best, &best_err);
	}
	return best;
}

static inline void qnt_iq4_nl(const float *x, struct blk_iq4_nl *b)
{
	uint8_t q[32];
	float d;

	b->d = f16_round(iq4_scale(x, 32, 1), &d);
	iq4_fit(x, 32, d, q);
	put_nibbles(b->qs, q);
}

/* iq4_xs: each sub-block's scale as in iq4_nl, then those onto 6 bits (the
 * largest in magnitude onto -32) against one f16 scale, and the values again
 * on the grid of their rounded scale. */
static inline void qnt_iq4_xs(const float *x, struct blk_iq4_xs *b)
{
	float sub[8], d, id;
	uint8_t q[32];

	for (int j = 0; j < 8; j++)
		sub[j] = iq4_scale(x + 32 * j, 32, 0);
	b->d = f16_round(signed_max(sub, 8) / -32.0f, &d);
	id = inv(d);
	b->scales_h = 0;
	memset(b->scales_l, 0, sizeof b->scales_l);
	for (int j = 0; j < 8; j++) {
		int ls = clampi((int)nearbyintf(sub[j] * id), -32, 31) + 32;

		b->scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
		b->scales_h |= (uint16_t)((ls >> 4) << (2 * j));
		iq4_fit(x + 32 * j, 32, d * (float)(ls - 32), q);
		put_nibbles(b->qs + 16 * j, q);
	}
}

/* q2_k: each group of 16 maps [min, max] (min clamped to <= 0) onto 0..3; the
 * group scales and mins are then quantized to 4 bits against the largest. */
static inline void qnt_q2_k(const float *x, struct blk_q2_k *b)
{
	float scale[16], mins[16], max_scale = 0.0f, max_min = 0.0f, d, dmin, id, idm;

	for (int k = 0; k < 16; k++) {
		float lo = 0.0f, hi = 0.0f;

		for (int l = 0; l < 16; l++) {
			lo = fminf(lo, x[16 * k + l]);
			hi = fmaxf(hi, x[16 * k + l]);
		}
		scale[k] = (hi - lo) / 3.0f;
		mins[k] = -lo;
		max_scale = fmaxf(max_scale, scale[k]);
		max_min = fmaxf(max_min, mins[k]);
	}
	b->d = f16_round(max_scale / 15.0f, &d);
	b->dmin = f16_round(max_min / 15.0f, &dmin);
	id = inv(d);
	idm = inv(dmin);
	memset(b->qs, 0, sizeof b->qs);
	for (int k = 0; k < 16; k++) {
		int sc = clampi((int)nearbyintf(scale[k] * id), 0, 15);
		int m = clampi((int)nearbyintf(mins[k] * idm), 0, 15);
		float ds = d * (float)sc, dm = dmin * (float)m, ids = inv(ds);

		b->scales[k] = (uint8_t)(sc | m << 4);
		for (int e = 16 * k; e < 16 * k + 16; e++) {
			int v = clampi((int)nearbyintf((x[e] + dm) * ids), 0, 3);
			int h = e / 128, g = (e % 128) / 32, l = e % 32;

			b->qs[32 * h + l] |= (uint8_t)(v << (2 * g));
		}
	}
}

/* q3_k: each group of 16 maps its value of largest magnitude onto -4; the
 * group scales onto 6 bits (the largest in magnitude onto -32). */
static inline void qnt_q3_k(const float *x, struct blk_q3_k *b)
{
	float scale[16], d, id;

	for (int k = 0; k < 16; k++)
		scale[k] = signed_max(x + 16 * k, 16) / -4.0f;
	b->d = f16_round(signed_max(scale, 16) / -32.0f, &d);
	id = inv(d);
	memset(b->scales, 0, sizeof b->scales);
	memset(b->qs, 0, sizeof b->qs);
	memset(b->hmask, 0, sizeof b->hmask);
	for (int k = 0; k < 16; k++) {
		int ls = clampi((int)nearbyintf(scale[k] * id), -32, 31) + 32;
		float idl = inv(d * (float)(ls - 32));

		b->scales[k % 8] |= (uint8_t)((ls & 15) << (4 * (k / 8)));
		b->scales[8 + k % 4] |= (uint8_t)((ls >> 4) << (2 * (k / 4)));
		for (int e = 16 * k; e < 16 * k + 16; e++) {
			int v = clampi((int)nearbyintf(x[e] * idl), -4, 3) + 4;
			int h = e / 128, g = (e % 128) / 32, l = e % 32;

			b->qs[32 * h + l] |= (uint8_t)((v & 3) << (2 * g));
			b->hmask[l] |= (uint8_t)((v >> 2) << (4 * h + g));
		}
	}
}

OPS_REF_ROWS(q4_1, blk_q4_1, blk_q8_32, 32)
OPS_REF_ROWS(q5_0, blk_q5_0, blk_q8_32, 32)
OPS_REF_ROWS(q5_1, blk_q5_1, blk_q8_32, 32)
OPS_REF_ROWS(iq4_nl, blk_iq4_nl, blk_q8_32, 32)
OPS_REF_ROWS(q2_k, blk_q2_k, blk_q8_256, QK_K)
OPS_REF_ROWS(q3_k, blk_q3_k, blk_q8_256, QK_K)
OPS_REF_ROWS(iq4_xs, blk_iq4_xs, blk_q8_256, QK_K)

/* ---- q4_1, q5_0, q5_1 in the interleaved layout (ops_impl.h) ------------------------- */

/* The layouts differ by whether a block has an offset m (q4_1, q5_1) and
 * fifth bits (q5_0, q5_1). */
static inline size_t x8n_block(int min, int five)
{
	return (size_t)OPS_X8N_NIB(min, five) + 128;
}

/* Byte and bit of the fifth bit of element e of row r in a group block:
 * bit 2g + h of byte 4r + k for the nibble h of byte 4r + k of part g. */
static inline size_t x8n_fifth_at(int min, int r, int e, int *bit)
{
	int g = e / 8, h = (e % 8) / 4, k = e % 4;

	*bit = 2 * g + h;
	return (size_t)OPS_X8N_FIFTH(min) + (size_t)(4 * r + k);
}

/* Element e (0..31) of row r of a group block: 0..15 or 0..31. */
static inline int x8n_value(const uint8_t *blk, int min, int five, int r, int e)
{
	int bit, v = x8_nib(blk + OPS_X8N_NIB(min, five), r, e);

	if (five) {
		size_t at = x8n_fifth_at(min, r, e, &bit);

		v |= ((blk[at] >> bit) & 1) << 4;
	}
	return v;
}

/* Row r's 32 values v (0..31) into a group block: its nibbles and its fifth
 * bits (bytes of its own). */
static inline void x8n_put(uint8_t *o, int r, const uint8_t v[32], int min, int five)
{
	uint8_t *nib = o + OPS_X8N_NIB(min, five), *f = o + OPS_X8N_FIFTH(min);

	for (int g = 0; g < 4; g++)
		for (int k = 0; k < 4; k++)
			nib[32 * g + 4 * r + k] = (uint8_t)((v[8 * g + k] & 15) | (v[8 * g + 4 + k] & 15) << 4);
	if (five)
		for (int k = 0; k < 4; k++) {
			unsigned bits = 0;

			for (int g = 0; g < 4; g++)
				for (int h = 0; h < 2; h++)
					bits |= (unsigned)(v[8 * g + 4 * h + k] >> 4) << (2 * g + h);
			f[4 * r + k] = (uint8_t)bits;
		}
}

/* The 32 values of a q4_1 / q5_0 / q5_1 block's 16 bytes of nibbles and
 * (qh, NULL for q4_1) fifth bits. */
static inline void x8n_values(const uint8_t *qs, const uint8_t *qh, uint8_t v[32])
{
	uint32_t h = 0;

	if (qh)
		memcpy(&h, qh, sizeof h);
	for (int e = 0; e < 16; e++) {
		v[e] = (uint8_t)((qs[e] & 15) | ((h >> e) & 1) << 4);
		v[e + 16] = (uint8_t)((qs[e] >> 4) | ((h >> (e + 16)) & 1) << 4);
	}
}

/* Load-time only, so scalar everywhere. BLK's d (and m) come first; QH is
 * the block's fifth bits (NULL: none). */
#define X8N_REPACK(NAME, BLK, MIN, FIVE, QH)                                                             \
	void repack_##NAME##_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst)            \
	{                                                                                                \
		uint8_t *o = dst;                                                                        \
		for (int64_t r0 = 0; r0 < rows; r0 += 8)                                                 \
			for (int64_t b = 0; b < n / 32; b++, o += x8n_block(MIN, FIVE)) {               \
				for (int r = 0; r < 8; r++) {                                            \
					const BLK *x = (const BLK *)((const char *)w + (size_t)(r0 + r) * ws) + b; \
					uint8_t v[32];                                                   \
					memcpy(o + 2 * r, &x->d, 2);                                     \
					if (MIN)                                                         \
						memcpy(o + 16 + 2 * r, (const char *)x + 2, 2);          \
					x8n_values(x->qs, QH, v);                                        \
					x8n_put(o, r, v, MIN, FIVE);                                     \
				}                                                                        \
			}                                                                                \
	}

/* q4_1 and q5_1 keep m right after d. */
_Static_assert(offsetof(struct blk_q4_1, m) == 2 && offsetof(struct blk_q5_1, m) == 2,
	       "q4_1 and q5_1 blocks hold m right after d");

X8N_REPACK(q4_1, struct blk_q4_1, 1, 0, NULL)
X8N_REPACK(q5_0, struct blk_q5_0, 0, 1, x->qh)
X8N_REPACK(q5_1, struct blk_q5_1, 1, 1, x->qh)

/* The weight of element e of row r as an integer: q (q4_1, q5_1), q - 16
 * (q5_0) or iq4_nl's value of the code (its group block is q4_0's). */
static inline int x8n_int(const uint8_t *blk, int min, int five, int iq4, int r, int e)
{
	int q = x8n_value(blk, min, five, r, e);

	return iq4 ? ops_iq4nl_values[q] : min ? q : q - 16;
}

/* The same sums, in the same float order, as dot_q4_1 / dot_q5_0 / dot_q5_1
 * / dot_iq4_nl. */
static void gemv_x8n_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss, int min,
			 int five, int iq4)
{
	for (int c = 0; c < nc; c++) {
		const struct blk_q8_32 *y = (const void *)((const char *)a + (size_t)c * as);

		for (int r = 0; r < 8; r++) {
			const uint8_t *blk = group;
			float sum = 0.0f;

			for (int64_t b = 0; b < n / 32; b++, blk += x8n_block(min, five)) {
				int isum = 0;

				for (int e = 0; e < 32; e++)
					isum += x8n_int(blk, min, five, iq4, r, e) * y[b].qs[e];
				if (min)
					sum += x8_half(blk, 2 * (size_t)r) * y[b].d * (float)isum +
					       x8_half(blk, 16 + 2 * (size_t)r) * y[b].s;
				else
					sum += x8_half(blk, 2 * (size_t)r) * y[b].d * (float)isum;
			}
			s[(size_t)c * ss + r] = sum;
		}
	}
}

/* Row r, as deq_q4_1 / deq_q5_0 / deq_q5_1 / deq_iq4_nl give it. */
static void dequant_x8n_ref(const void *group, int r, int64_t n, float *out, int min, int five, int iq4)
{
	const uint8_t *blk = group;

	for (int64_t b = 0; b < n / 32; b++, blk += x8n_block(min, five)) {
		float d = x8_half(blk, 2 * (size_t)r), m = min ? x8_half(blk, 16 + 2 * (size_t)r) : 0.0f;

		for (int e = 0; e < 32; e++) /* no + 0: a -0 stays -0, as in the row references */
			out[32 * b + e] = min ? (float)x8n_int(blk, min, five, iq4, r, e) * d + m
					      : (float)x8n_int(blk, min, five, iq4, r, e) * d;
	}
}

/* The panel of decode_q4_1 / decode_q5_0 / decode_q5_1 / decode_iq4_nl. */
static void pack_x8n_ref(const void *group, int64_t n, void *panel, int min, int five, int iq4)
{
	const uint8_t *blk = group;
	uint8_t *pb = panel;

	for (int64_t b = 0; b < n / 32; b++, blk += x8n_block(min, five), pb += OPS_PANEL_BLOCK)
		for (int r = 0; r < 8; r++) {
			uint8_t q[32];
			float d = x8_half(blk, 2 * (size_t)r);

			for (int e = 0; e < 32; e++)
				q[e] = (uint8_t)(iq4 ? x8n_int(blk, min, five, iq4, r, e) : x8n_value(blk, min, five, r, e));
			ops_panel_put(pb, r, q, d, min ? x8_half(blk, 16 + 2 * (size_t)r) : iq4 ? 0.0f : -16.0f * d);
		}
}

#define X8N_REFS(NAME, MIN, FIVE, IQ4)                                                                         \
	void gemv_##NAME##_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss) \
	{                                                                                                      \
		gemv_x8n_ref(n, group, a, as, nc, s, ss, MIN, FIVE, IQ4);                                      \
	}                                                                                                      \
	void dequant_##NAME##_x8_ref(const void *group, int r, int64_t n, float *out)                          \
	{                                                                                                      \
		dequant_x8n_ref(group, r, n, out, MIN, FIVE, IQ4);                                             \
	}                                                                                                      \
	void pack_##NAME##_x8_ref(const void *group, int64_t n, void *panel)                                   \
	{                                                                                                      \
		pack_x8n_ref(group, n, panel, MIN, FIVE, IQ4);                                                 \
	}

X8N_REFS(q4_1, 1, 0, 0)
X8N_REFS(q5_0, 0, 1, 0)
X8N_REFS(q5_1, 1, 1, 0)
X8N_REFS(iq4_nl, 0, 0, 1)

/* ---- iq4_nl and iq4_xs in the interleaved layout (ops_impl.h) ------------------------ */

/* iq4_nl's block is q4_0's (f16 d, 16 bytes of nibbles), and so is its group
 * block: repack_q4_0_x8 writes it. */
_Static_assert(sizeof(struct blk_iq4_nl) == sizeof(struct blk_q4_0) && offsetof(struct blk_iq4_nl, qs) == 2,
	       "iq4_nl blocks are laid out as q4_0's");

/* iq4_xs: the 6-bit scale (biased by 32) of sub-block j of row r of a group
 * super-block, v = 8 j + r. */
static inline int x8_iq4_xs_scale(const uint8_t *sb, int r, int j)
{
	return x8_six(sb + 16, 64, 8 * j + r);
}

void repack_iq4_xs_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst)
{
	uint8_t *o = dst;

	for (int64_t r0 = 0; r0 < rows; r0 += 8)
		for (int64_t b = 0; b < n / QK_K; b++, o += OPS_X8_IQ4_XS_SB) {
			memset(o + 16, 0, 48);
			for (int r = 0; r < 8; r++) {
				const struct blk_iq4_xs *x = (const struct blk_iq4_xs *)((const char *)w + (size_t)(r0 + r) * ws) + b;

				memcpy(o + 2 * r, &x->d, 2);
				for (int j = 0; j < 8; j++) {
					uint8_t *nib = o + 64 + 128 * j;

					x8_six_put(o + 16, 64, 8 * j + r, iq4_xs_scale(x, j));
					for (int g = 0; g < 4; g++)
						for (int k = 0; k < 4; k++)
							nib[32 * g + 4 * r + k] = (uint8_t)(nib32(x->qs + 16 * j, 8 * g + k) |
											    nib32(x->qs + 16 * j, 8 * g + 4 + k) << 4);
				}
			}
		}
}

/* The same sums, in the same order, as dot_iq4_xs. */
void gemv_iq4_xs_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)
{
	for (int c = 0; c < nc; c++) {
		const struct blk_q8_256 *y = (const void *)((const char *)a + (size_t)c * as);

		for (int r = 0; r < 8; r++) {
			const uint8_t *sb = group;
			float sum = 0.0f;

			for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_IQ4_XS_SB) {
				int isum = 0;

				for (int j = 0; j < 8; j++) {
					int dot = 0;

					for (int e = 0; e < 32; e++)
						dot += ops_iq4nl_values[x8_nib(sb + 64 + 128 * j, r, e)] * y[b].qs[32 * j + e];
					isum += (x8_iq4_xs_scale(sb, r, j) - 32) * dot;
				}
				sum += x8_half(sb, 2 * (size_t)r) * y[b].d * (float)isum;
			}
			s[(size_t)c * ss + r] = sum;
		}
	}
}

void dequant_iq4_xs_x8_ref(const void *group, int r, int64_t n, float *out)
{
	const uint8_t *sb = group;

	for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_IQ4_XS_SB) {
		float d = x8_half(sb, 2 * (size_t)r);

		for (int j = 0; j < 8; j++) {
			float dl = d * (float)(x8_iq4_xs_scale(sb, r, j) - 32);

			for (int e = 0; e < 32; e++)
				out[QK_K * b + 32 * j + e] = dl * (float)ops_iq4nl_values[x8_nib(sb + 64 + 128 * j, r, e)];
		}
	}
}

/* The panel of decode_iq4_xs: block i is sub-block i % 8 of super-block i / 8. */
void pack_iq4_xs_x8_ref(const void *group, int64_t n, void *panel)
{
	const uint8_t *sb = group;
	uint8_t *pb = panel;

	for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_IQ4_XS_SB)
		for (int j = 0; j < 8; j++, pb += OPS_PANEL_BLOCK)
			for (int r = 0; r < 8; r++) {
				uint8_t q[32];

				for (int e = 0; e < 32; e++)
					q[e] = (uint8_t)ops_iq4nl_values[x8_nib(sb + 64 + 128 * j, r, e)];
				ops_panel_put(pb, r, q, x8_half(sb, 2 * (size_t)r) * (float)(x8_iq4_xs_scale(sb, r, j) - 32),
					      0.0f);
			}
}

/* ---- q2_k and q3_k in the interleaved layout (ops_impl.h) ---------------------------- */

/* Where element 16 (2P + h) + 4c + e of row r is: byte 4L + e (lane
 * L = 8h + r) of pair P's 64 bytes of 2-bit values, bits 2c; q3_k's third
 * bit of value byte i, field c, is bit c + 4 (i / 32) of byte i % 32 of the
 * 32 bytes after them. */
static inline void x8_k2_at(int r, int e256, int *pair, int *byte, int *c)
{
	int G = e256 / 16, k = e256 % 16;

	*pair = G / 2;
	*c = k / 4;
	*byte = 4 * (8 * (G % 2) + r) + k % 4;
}

void repack_q2_k_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst)
{
	uint8_t *o = dst;

	for (int64_t r0 = 0; r0 < rows; r0 += 8)
		for (int64_t b = 0; b < n / QK_K; b++, o += OPS_X8_Q2_K_SB) {
			memset(o + 160, 0, 512);
			for (int r = 0; r < 8; r++) {
				const struct blk_q2_k *x = (const struct blk_q2_k *)((const char *)w + (size_t)(r0 + r) * ws) + b;

				memcpy(o + 2 * r, &x->d, 2);
				memcpy(o + 16 + 2 * r, &x->dmin, 2);
				for (int G = 0; G < 16; G++)
					o[32 + 8 * G + r] = x->scales[G];
				for (int e = 0; e < QK_K; e++) {
					int P, by, c;

					x8_k2_at(r, e, &P, &by, &c);
					o[160 + 64 * P + by] |= (uint8_t)(k_low2(x->qs, e) << (2 * c));
				}
			}
		}
}

void repack_q3_k_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst)
{
	uint8_t *o = dst;

	for (int64_t r0 = 0; r0 < rows; r0 += 8)
		for (int64_t b = 0; b < n / QK_K; b++, o += OPS_X8_Q3_K_SB) {
			memset(o + 16, 0, OPS_X8_Q3_K_SB - 16);
			for (int r = 0; r < 8; r++) {
				const struct blk_q3_k *x = (const struct blk_q3_k *)((const char *)w + (size_t)(r0 + r) * ws) + b;

				memcpy(o + 2 * r, &x->d, 2);
				for (int G = 0; G < 16; G++)
					x8_six_put(o + 16, 128, 8 * G + r, q3_k_scale(x->scales, G));
				for (int e = 0; e < QK_K; e++) {
					int P, by, c, u = q3_k_value(x, e) + 4;
					uint8_t *pair;

					x8_k2_at(r, e, &P, &by, &c);
					pair = o + 112 + 96 * P;
					pair[by] |= (uint8_t)((u & 3) << (2 * c));
					pair[64 + by % 32] |= (uint8_t)((u >> 2) << (c + 4 * (by / 32)));
				}
			}
		}
}

/* Element e (0..255) of row r of a group super-block: q2_k's 0..3, q3_k's
 * -4..3. */
static inline int x8_q2_k_value(const uint8_t *sb, int r, int e)
{
	int P, by, c;

	x8_k2_at(r, e, &P, &by, &c);
	return (sb[160 + 64 * P + by] >> (2 * c)) & 3;
}

static inline int x8_q3_k_value(const uint8_t *sb, int r, int e)
{
	int P, by, c;
	const uint8_t *pair;

	x8_k2_at(r, e, &P, &by, &c);
	pair = sb + 112 + 96 * P;
	return (((pair[by] >> (2 * c)) & 3) | ((pair[64 + by % 32] >> (c + 4 * (by / 32))) & 1) << 2) - 4;
}

/* q3_k's scale of 16-group G of row r, biased by 32. */
static inline int x8_q3_k_scale(const uint8_t *sb, int r, int G)
{
	return x8_six(sb + 16, 128, 8 * G + r);
}

/* The same sums, in the same order, as dot_q2_k / dot_q3_k. */
static void gemv_k2_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss,
			   int three)
{
	const size_t sbs = three ? OPS_X8_Q3_K_SB : OPS_X8_Q2_K_SB;

	for (int c = 0; c < nc; c++) {
		const struct blk_q8_256 *y = (const void *)((const char *)a + (size_t)c * as);

		for (int r = 0; r < 8; r++) {
			const uint8_t *sb = group;
			float sum = 0.0f;

			for (int64_t b = 0; b < n / QK_K; b++, sb += sbs) {
				int isum = 0, msum = 0;

				for (int G = 0; G < 16; G++) {
					int dot = 0;

					for (int e = 16 * G; e < 16 * G + 16; e++)
						dot += (three ? x8_q3_k_value(sb, r, e) : x8_q2_k_value(sb, r, e)) * y[b].qs[e];
					if (three) {
						isum += (x8_q3_k_scale(sb, r, G) - 32) * dot;
					} else {
						isum += (sb[32 + 8 * G + r] & 15) * dot;
						msum += (sb[32 + 8 * G + r] >> 4) * y[b].bsums[G];
					}
				}
				if (three)
					sum += x8_half(sb, 2 * (size_t)r) * y[b].d * (float)isum;
				else
					sum += y[b].d * (x8_half(sb, 2 * (size_t)r) * (float)isum -
							 x8_half(sb, 16 + 2 * (size_t)r) * (float)msum);
			}
			s[(size_t)c * ss + r] = sum;
		}
	}
}

void gemv_q2_k_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)
{
	gemv_k2_x8_ref(n, group, a, as, nc, s, ss, 0);
}

void gemv_q3_k_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)
{
	gemv_k2_x8_ref(n, group, a, as, nc, s, ss, 1);
}

/* Row r, as deq_q2_k / deq_q3_k give it. */
void dequant_q2_k_x8_ref(const void *group, int r, int64_t n, float *out)
{
	const uint8_t *sb = group;

	for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_Q2_K_SB) {
		float d = x8_half(sb, 2 * (size_t)r), dmin = x8_half(sb, 16 + 2 * (size_t)r);

		for (int G = 0; G < 16; G++) {
			int v = sb[32 + 8 * G + r];
			float dl = d * (float)(v & 15), ml = dmin * (float)(v >> 4);

			for (int e = 16 * G; e < 16 * G + 16; e++)
				out[QK_K * b + e] = dl * (float)x8_q2_k_value(sb, r, e) - ml;
		}
	}
}

void dequant_q3_k_x8_ref(const void *group, int r, int64_t n, float *out)
{
	const uint8_t *sb = group;

	for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_Q3_K_SB) {
		float d = x8_half(sb, 2 * (size_t)r);

		for (int G = 0; G < 16; G++) {
			float dl = d * (float)(x8_q3_k_scale(sb, r, G) - 32);

			for (int e = 16 * G; e < 16 * G + 16; e++)
				out[QK_K * b + e] = dl * (float)x8_q3_k_value(sb, r, e);
		}
	}
}
