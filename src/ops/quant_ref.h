/* quant_ref.h - what the scalar reference kernels (quant.c, quant_more.c)
 * share: each type is written as functions of one block, and these macros
 * make its row kernels from them (the row and block loops, one place for
 * every type). Include only from those two files. */
#ifndef TKV_OPS_QUANT_REF_H
#define TKV_OPS_QUANT_REF_H

#include "ops/ops.h"
#include "ops/ops_impl.h"

#define F16(h) ops_f16_to_f32(h)

static inline const void *row_at(const void *w, size_t ws, int r)
{
	return (const char *)w + (size_t)r * ws;
}

static inline int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
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
