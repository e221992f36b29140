/* attn_avx2.c - AVX2/FMA/F16C kernels for attention over full-precision pages.
 * Compiled with -mavx2 -mfma -mf16c; attn.c calls them only after checking the
 * CPU. Each kernel handles a page's rows for a group of query heads; the
 * scalar versions in attn.c are the reference they are tested against. */
#include <immintrin.h>
#include <math.h>

#include "kv/attn_impl.h"

static inline float hsum(__m256 v)
{
	__m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);

	lo = _mm_add_ps(lo, hi);
	lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
	lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
	return _mm_cvtss_f32(lo);
}

/* logit[h*stride + j] = scale * q_h · k_j for rows j < n of f16 keys; d % 8 == 0. */
void kv_score_f16_avx2(const void *K, uint32_t n, uint32_t d, const float *q, uint32_t nq, float scale,
		       float *logit, size_t stride)
{
	const uint16_t *k = K;

	for (uint32_t j = 0; j < n; j++) {
		const uint16_t *kj = k + (size_t)j * d;

		for (uint32_t h = 0; h < nq; h++) {
			const float *qh = q + (size_t)h * d;
			__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
			uint32_t c = 0;

			for (; c + 16 <= d; c += 16) {
				__m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kj + c)));
				__m256 k1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kj + c + 8)));

				acc0 = _mm256_fmadd_ps(k0, _mm256_loadu_ps(qh + c), acc0);
				acc1 = _mm256_fmadd_ps(k1, _mm256_loadu_ps(qh + c + 8), acc1);
			}
			for (; c < d; c += 8) {
				__m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kj + c)));

				acc0 = _mm256_fmadd_ps(k0, _mm256_loadu_ps(qh + c), acc0);
			}
			logit[(size_t)h * stride + j] = scale * hsum(_mm256_add_ps(acc0, acc1));
		}
	}
}

void kv_score_f32_avx2(const void *K, uint32_t n, uint32_t d, const float *q, uint32_t nq, float scale,
		       float *logit, size_t stride)
{
	const float *k = K;

	for (uint32_t j = 0; j < n; j++) {
		const float *kj = k + (size_t)j * d;

		for (uint32_t h = 0; h < nq; h++) {
			const float *qh = q + (size_t)h * d;
			__m256 acc = _mm256_setzero_ps();

			for (uint32_t c = 0; c < d; c += 8)
				acc = _mm256_fmadd_ps(_mm256_loadu_ps(kj + c), _mm256_loadu_ps(qh + c), acc);
			logit[(size_t)h * stride + j] = scale * hsum(acc);
		}
	}
}

/* out_h += w[h*stride + j] * v_j over rows j < n with a nonzero weight for some head. */
void kv_accum_f16_avx2(const void *V, uint32_t n, uint32_t d, const float *w, size_t stride, uint32_t nq,
		       float *out)
{
	const uint16_t *v = V;
	__m256 vb[64];

	for (uint32_t j = 0; j < n; j++) {
		const uint16_t *vj = v + (size_t)j * d;
		int any = 0;

		for (uint32_t h = 0; h < nq; h++)
			any |= w[(size_t)h * stride + j] > 0.0f;
		if (!any)
			continue;
		if (d <= 512) {
			for (uint32_t c = 0; c < d; c += 8)
				vb[c / 8] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vj + c)));
			for (uint32_t h = 0; h < nq; h++) {
				float wh = w[(size_t)h * stride + j];
				__m256 ww;
				float *o = out + (size_t)h * d;

				if (wh <= 0.0f)
					continue;
				ww = _mm256_set1_ps(wh);
				for (uint32_t c = 0; c < d; c += 8)
					_mm256_storeu_ps(o + c, _mm256_fmadd_ps(ww, vb[c / 8], _mm256_loadu_ps(o + c)));
			}
		}
	}
}

void kv_accum_f32_avx2(const void *V, uint32_t n, uint32_t d, const float *w, size_t stride, uint32_t nq,
		       float *out)
{
	const float *v = V;

	for (uint32_t j = 0; j < n; j++) {
		const float *vj = v + (size_t)j * d;

		for (uint32_t h = 0; h < nq; h++) {
			float wh = w[(size_t)h * stride + j];
			__m256 ww;
			float *o = out + (size_t)h * d;

			if (wh <= 0.0f)
				continue;
			ww = _mm256_set1_ps(wh);
			for (uint32_t c = 0; c < d; c += 8)
				_mm256_storeu_ps(o + c, _mm256_fmadd_ps(ww, _mm256_loadu_ps(vj + c), _mm256_loadu_ps(o + c)));
		}
	}
}

/* exp(x) for x <= 0 (arguments are logits minus their max): 2^k * p(r) with
 * x = k ln2 + r, |r| <= ln2 / 2, ln2 split in two for the reduction and a
 * degree-6 polynomial for e^r (relative error about 2e-7). Below -87 the
 * result is flushed to 0, which the softmax cannot tell from e^-87. */
static inline __m256 exp_neg(__m256 x)
{
	const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
	const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
	__m256 k, r, p, small = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
	__m256i e;

	x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
	k = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(k, ln2_hi, x);
	r = _mm256_fnmadd_ps(k, ln2_lo, r);
	p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
	p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
	return _mm256_andnot_ps(small, p);
}

float kv_exp_avx2(float *l, uint32_t n, float max)
{
	const __m256 vmax = _mm256_set1_ps(max), ninf = _mm256_set1_ps(-INFINITY);
	__m256 acc = _mm256_setzero_ps();
	uint32_t i = 0;
	float sum;

	if (max == -INFINITY) { /* nothing visible */
		for (i = 0; i < n; i++)
			l[i] = 0.0f;
		return 0.0f;
	}
	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps(l + i);
		__m256 masked = _mm256_cmp_ps(x, ninf, _CMP_EQ_OQ);
		__m256 y = _mm256_andnot_ps(masked, exp_neg(_mm256_sub_ps(x, vmax)));

		_mm256_storeu_ps(l + i, y);
		acc = _mm256_add_ps(acc, y);
	}
	sum = hsum(acc);
	for (; i < n; i++) {
		l[i] = l[i] == -INFINITY ? 0.0f : expf(l[i] - max);
		sum += l[i];
	}
	return sum;
}
