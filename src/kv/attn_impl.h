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

typedef void (*kv_score_fn)(const void *K, uint32_t n, uint32_t d, const float *q, uint32_t nq, float scale,
			    float *logit, size_t stride);
typedef void (*kv_accum_fn)(const void *V, uint32_t n, uint32_t d, const float *w, size_t stride, uint32_t nq,
			    float *out);
/* softmax numerators: l[i] = exp(l[i] - max), exactly 0 where l[i] is -inf;
 * returns their sum. */
typedef float (*kv_exp_fn)(float *l, uint32_t n, float max);
/* The largest of m and l[0..n). */
typedef float (*kv_max_fn)(const float *l, uint32_t n, float m);

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

/* Kernels of the format (NULL: the generic slot-by-slot path); d must be a
 * multiple of 8 for the SIMD versions. */
kv_score_fn kv_attn_score_kernel(uint32_t fmt, uint32_t d);
kv_accum_fn kv_attn_accum_kernel(uint32_t fmt, uint32_t d);
/* The softmax kernel (NULL: the scalar loop in attn.c). */
kv_exp_fn kv_attn_exp_kernel(void);
kv_max_fn kv_attn_max_kernel(void);
/* Forces the scalar reference (tests); returns the previous setting. */
int kv_attn_force_ref(int on);

#endif
