/* quant_ref.h - what the scalar reference kernels (quant.c, quant_more.c)
 * share: each type is written as functions of one block, and these macros
 * make its row kernels from them (the row and block loops, one place for
 * every type). Include only from those two files. */
#ifndef TKV_OPS_QUANT_REF_H
#define TKV_OPS_QUANT_REF_H

#include "ops/ops.h"
#include "ops/ops_impl.h"

#include <string.h>

#define F16(h) ops_f16_to_f32(h)

static inline const void *row_at(const void *w, size_t ws, int r)
{
	return (const char *)w + (size_t)r * ws;
}

static inline int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* ---- group blocks of the interleaved layout (ops_impl.h) ---- */

/* The f16 at byte at of a group block, as float (d, m, dmin of row r: at
 * 2r past where they start). */
static inline float x8_half(const uint8_t *blk, size_t at)
{
	uint16_t h;

	memcpy(&h, blk + at, sizeof h);
	return F16(h);
}

/* The code (0..15) of element e of row r in 4 x 32 bytes of nibbles laid out
 * as q4_0's group block: byte 4r + k % 4 of part e / 8, low nibble for
 * k = e % 8 < 4. */
static inline int x8_nib(const uint8_t *nib, int r, int e)
{
	int g = e / 8, k = e % 8;

	return (nib[32 * g + 4 * r + k % 4] >> (k >= 4 ? 4 : 0)) & 15;
}

/* The 6-bit fields v (0..n-1, n 64 or 128) of q4_k, q5_k, q3_k and iq4_xs
 * group blocks at six: n / 2 bytes of low nibbles (v < n / 2 in the low, the
 * rest in the high nibble of byte v % (n / 2)), then n / 4 bytes of top bits
 * (bits 2 (v / (n / 4)), +1 of byte v % (n / 4)). x8_six_put ors a field into
 * zeroed bytes. */
static inline int x8_six(const uint8_t *six, int n, int v)
{
	int h = n / 2, q = n / 4;

	return ((six[v % h] >> (v >= h ? 4 : 0)) & 15) | ((six[h + v % q] >> (2 * (v / q))) & 3) << 4;
}

static inline void x8_six_put(uint8_t *six, int n, int v, int val)
{
	int h = n / 2, q = n / 4;

	six[v % h] |= (uint8_t)((val & 15) << (v >= h ? 4 : 0));
	six[h + v % q] |= (uint8_t)((val >> 4) << (2 * (v / q)));
}

/* dequant_NAME_ref: BLOCK_DEQ(&b[i], out) writes the QK values of block i. */
#define OPS_DEQUANT_REF(NAME, BLK, QK, BLOCK_DEQ)                               \
	void dequant_##NAME##_ref(const void *row, float *out, int64_t n)       \
	{                                                                       \
		const struct BLK *b = row;                                      \
		for (int64_t i = 0; i < n / (QK); i++, out += (QK))             \
			BLOCK_DEQ(&b[i], out);                                  \
	}

/* dot_rows_NAME_ref: each of the nr rows sums, block by block in order,
 * BLOCK_DOT(&b[i], &y[i]) (the float contribution of weight block i against
 * activation block i). */
#define OPS_DOT_ROWS_REF(NAME, BLK, ACT, QK, BLOCK_DOT)                                                  \
	void dot_rows_##NAME##_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s) \
	{                                                                                                \
		const struct ACT *y = a;                                                                 \
		for (int r = 0; r < nr; r++) {                                                           \
			const struct BLK *b = row_at(w, ws, r);                                          \
			float sum = 0.0f;                                                                \
			for (int64_t i = 0; i < n / (QK); i++)                                           \
				sum += BLOCK_DOT(&b[i], &y[i]);                                          \
			s[r] = sum;                                                                      \
		}                                                                                        \
	}

/* quantize_NAME_ref: BLOCK_Q(x, &b[i]) writes block i from the QK floats at x. */
#define OPS_QUANTIZE_REF(NAME, BLK, QK, BLOCK_Q)                               \
	void quantize_##NAME##_ref(const float *x, void *out, int64_t n)       \
	{                                                                      \
		struct BLK *b = out;                                           \
		for (int64_t i = 0; i < n / (QK); i++, x += (QK))              \
			BLOCK_Q(x, &b[i]);                                     \
	}

/* The three row kernels of a type from its block functions deq_NAME,
 * dot_NAME and qnt_NAME: one row per type. */
#define OPS_REF_ROWS(NAME, BLK, ACT, QK)                        \
	OPS_DEQUANT_REF(NAME, BLK, QK, deq_##NAME)              \
	OPS_DOT_ROWS_REF(NAME, BLK, ACT, QK, dot_##NAME)        \
	OPS_QUANTIZE_REF(NAME, BLK, QK, qnt_##NAME)

/* pack_NAME_ref: the generic packer (ops_pack_rows) with decode_NAME. */
#define OPS_PACK_REF(NAME)                                                               \
	void pack_##NAME##_ref(const void *w, size_t ws, int nr, int64_t n, void *panel) \
	{                                                                                \
		ops_pack_rows(w, ws, nr, n, panel, decode_##NAME);                       \
	}

#endif
