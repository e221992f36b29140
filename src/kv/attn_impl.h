/* attn_impl.h - the per-format row kernels of the attention (attn.c) and their
 * architecture-specific versions (arch/x86/attn_avx2.c), picked at start-up.
 *
 * score: logit[h*stride + j] = scale * q_h · k_j for the first n rows of a page's
 *        K region (q: nq rows of d floats, in the page's space).
 * accum: out_h += w[h*stride + j] * v_j for the first n rows of a V region,
 *        skipping rows whose weights are all zero. */
#ifndef TKV_KV_ATTN_IMPL_H
#define TKV_KV_ATTN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kv/tier_impl.h"
#include "util/cpu.h"

typedef void (*kv_score_fn)(const void *K, uint32_t n, uint32_t d, const float *q, uint32_t nq, float scale,
			    float *logit, size_t stride);
typedef void (*kv_accum_fn)(const void *V, uint32_t n, uint32_t d, const float *w, size_t stride, uint32_t nq,
			    float *out);
/* softmax numerators: l[i] = exp(l[i] - max), exactly 0 where l[i] is -inf;
 * returns their sum. */
typedef float (*kv_exp_fn)(float *l, uint32_t n, float max);
/* The largest of m and l[0..n). */
typedef float (*kv_max_fn)(const float *l, uint32_t n, float m);

/* Packed (q4/q2) pages are scored and summed on their integer codes, never
 * turned into float rows. Keys k_jc = m_c + s_c code_jc (per-channel s, m)
 * give q·k_j = Σ_c q_c m_c + Σ_c (q_c s_c) code_jc; the second sum runs on
 * integers, with q_c s_c rounded per head to 16 bits: qi_c = round(q_c s_c /
 * r), r = max_c |q_c s_c| / KV_Q_QMAX. Values v_jc = m_jg + s_jg code_jc (per
 * row and group g of 32 channels) give Σ_j w_j v_jc = Σ_j w_j m_jg + Σ_j (w_j
 * s_jg) code_jc, with w_j s_jg rounded to 8 bits per head, group and sub-tile
 * of KV_Q_SUB rows: ui_j = round(w_j s_jg / r), r = max w_j s_jg / 127 over
 * the sub-tile. Each rounding moves a term by at most r/2 per code step; the
 * tests hold the results to that bound and the error to a small part of the
 * 4-bit codes' own. d % 32 == 0; the AVX2 versions take q4 pages with d 64
 * or 128.
 *
 * score_q: logit[h*stride + i] = scale * q_h · k_{j0+i} for i < n, rows of a
 *          packed K region (tier.h layout); returns 1. With lim not NULL,
 *          when for every head the page's bound - the most scale * q_h · k
 *          can be for keys within the quantization range, [m_c, m_c + L s_c]
 *          per channel (L = 2^bits - 1), with the float rounding of its sum
 *          added - is below lim[h], it writes nothing and returns 0: the
 *          page cannot matter (Quest-style skipping of cold pages).
 * accum_q: out_h += Σ_{i<n} w[h*stride + i] v_{j0+i} for rows of a packed V
 *          region of cap slots; n <= KV_Q_TILE, weights <= 0 count as 0. */
#define KV_Q_QMAX 32767.0f
#define KV_Q_BOUND_SLACK 1e-5f  /* of the sum of the bound's magnitudes */
#define KV_Q_TILE 64
#define KV_Q_SUB 16     /* 8 pairs of rows of at most 2 * 15 * 127: within int16 */
_Static_assert(KV_Q_SUB / 2 * (2 * 15 * 127) <= 32767, "q4 value sums of a sub-tile fit in int16");
#define KV_Q_MAX_D 128  /* the largest head size of the AVX2 kernels (they take 64 and 128) */
#define KV_Q_MAX_NG (KV_Q_MAX_D / KV_V_GROUP) /* value groups of the AVX2 kernels */
typedef int (*kv_score_q_fn)(uint32_t bits, const void *kreg, uint32_t j0, uint32_t n, uint32_t d, const float *q,
			     uint32_t nq, float scale, float *logit, size_t stride, const float *lim);
typedef void (*kv_accum_q_fn)(uint32_t bits, const void *vreg, uint32_t cap, uint32_t j0, uint32_t n, uint32_t d,
			      const float *w, size_t stride, uint32_t nq, float *out);
/* The scalar references (tests compare the SIMD versions with them). */
int kv_score_q_ref(uint32_t bits, const void *kreg, uint32_t j0, uint32_t n, uint32_t d, const float *q, uint32_t nq,
		   float scale, float *logit, size_t stride, const float *lim);
void kv_accum_q_ref(uint32_t bits, const void *vreg, uint32_t cap, uint32_t j0, uint32_t n, uint32_t d,
		    const float *w, size_t stride, uint32_t nq, float *out);
int kv_score_q_avx2(uint32_t bits, const void *kreg, uint32_t j0, uint32_t n, uint32_t d, const float *q,
		    uint32_t nq, float scale, float *logit, size_t stride, const float *lim);
int kv_score_q_vnni(uint32_t bits, const void *kreg, uint32_t j0, uint32_t n, uint32_t d, const float *q,
		    uint32_t nq, float scale, float *logit, size_t stride, const float *lim);
int kv_score_q_avx512(uint32_t bits, const void *kreg, uint32_t j0, uint32_t n, uint32_t d, const float *q,
		      uint32_t nq, float scale, float *logit, size_t stride, const float *lim);
void kv_accum_q_avx2(uint32_t bits, const void *vreg, uint32_t cap, uint32_t j0, uint32_t n, uint32_t d,
		     const float *w, size_t stride, uint32_t nq, float *out);
void kv_accum_q_avx512(uint32_t bits, const void *vreg, uint32_t cap, uint32_t j0, uint32_t n, uint32_t d,
		       const float *w, size_t stride, uint32_t nq, float *out);

void kv_score_f16_avx2(const void *K, uint32_t n, uint32_t d, const float *q, uint32_t nq, float scale,
		       float *logit, size_t stride);
void kv_score_f32_avx2(const void *K, uint32_t n, uint32_t d, const float *q, uint32_t nq, float scale,
		       float *logit, size_t stride);
void kv_accum_f16_avx2(const void *V, uint32_t n, uint32_t d, const float *w, size_t stride, uint32_t nq,
		       float *out);
void kv_accum_f32_avx2(const void *V, uint32_t n, uint32_t d, const float *w, size_t stride, uint32_t nq,
		       float *out);

float kv_exp_avx2(float *l, uint32_t n, float max);
float kv_max_avx2(const float *l, uint32_t n, float m);

/* The attention family's table: the SIMD kernels of a level (NULL: the
 * scalar loops of attn.c). The float kernels need d % 8 == 0; the q4 ones
 * d of 64 or 128. */
struct kv_attn_kernels {
	kv_score_fn score_f16, score_f32;
	kv_accum_fn accum_f16, accum_f32;
	kv_exp_fn exp;
	kv_max_fn max;
	kv_score_q_fn score_q4;
	kv_accum_q_fn accum_q4;
};

/* Puts the kernels of `level` (util/cpu.h) into k, left NULL otherwise:
 * arch/x86/select.c (avx2: AVX2/FMA/F16C; avx512: the q4 key scores with
 * AVX512-VNNI), arch/generic/select.c nothing. Called once. */
void kv_attn_arch_select(struct kv_attn_kernels *k, enum cpu_level level);

/* Kernels of the format (NULL: the generic slot-by-slot path); d must be a
 * multiple of 8 for the SIMD versions. */
kv_score_fn kv_attn_score_kernel(uint32_t fmt, uint32_t d);
kv_accum_fn kv_attn_accum_kernel(uint32_t fmt, uint32_t d);
/* The softmax kernel (NULL: the scalar loop in attn.c). */
kv_exp_fn kv_attn_exp_kernel(void);
kv_max_fn kv_attn_max_kernel(void);
/* The integer kernels of packed pages (NULL: their rows are dequantized
 * into float tiles, exactly, and go through the f32 kernels). */
kv_score_q_fn kv_attn_score_q_kernel(uint32_t fmt, uint32_t d);
kv_accum_q_fn kv_attn_accum_q_kernel(uint32_t fmt, uint32_t d);
/* Keeps packed pages off the integer kernels (tests comparing with exact
 * dequantized rows); returns the previous setting. */
int kv_attn_exact_packed(int on);

#endif
