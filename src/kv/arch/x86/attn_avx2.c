/* attn_avx2.c - AVX2/FMA/F16C kernels for attention over full-precision pages.
 * Compiled with -mavx2 -mfma -mf16c; attn.c calls them only after checking the
 * CPU. Each kernel handles a page's rows for a group of query heads; the
 * scalar versions in attn.c are the reference they are tested against. */
#include <immintrin.h>
#include <math.h>

#include "kv/attn_impl.h"
#include "util/simd_x86.h"

#define TILE 16   /* rows converted to f32 at once */

/* The 8 sums of a0..a7 in one vector: lane r = sum of the lanes of ar. */
static inline __m256 hsum8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6,
			   __m256 a7)
{
	__m256 b0 = _mm256_hadd_ps(a0, a1), b1 = _mm256_hadd_ps(a2, a3);
	__m256 b2 = _mm256_hadd_ps(a4, a5), b3 = _mm256_hadd_ps(a6, a7);
	__m256 c0 = _mm256_hadd_ps(b0, b1), c1 = _mm256_hadd_ps(b2, b3);
	/* c0 = [r0 r1 r2 r3 | r0 r1 r2 r3] halves of rows 0-3, c1 likewise for 4-7 */
	__m256 lo = _mm256_permute2f128_ps(c0, c1, 0x20), hi = _mm256_permute2f128_ps(c0, c1, 0x31);

	return _mm256_add_ps(lo, hi);
}

/* Scores of rows j < n of f32 keys k (row stride d) for nq heads: eight rows
 * at a time per head, their eight dot products reduced together. */
static void score_f32(const float *k, uint32_t n, uint32_t d, const float *q, uint32_t nq, float scale,
		      float *logit, size_t stride)
{
	const __m256 vs = _mm256_set1_ps(scale);

	for (uint32_t h = 0; h < nq; h++) {
		const float *qh = q + (size_t)h * d;
		float *lh = logit + (size_t)h * stride;
		uint32_t j = 0;

		for (; j + 8 <= n; j += 8) {
			const float *r = k + (size_t)j * d;
			__m256 a[8];

			for (int i = 0; i < 8; i++)
				a[i] = _mm256_setzero_ps();
			for (uint32_t c = 0; c < d; c += 8) {
				__m256 qc = _mm256_loadu_ps(qh + c);

				for (int i = 0; i < 8; i++)
					a[i] = _mm256_fmadd_ps(_mm256_loadu_ps(r + (size_t)i * d + c), qc, a[i]);
			}
			_mm256_storeu_ps(lh + j, _mm256_mul_ps(vs, hsum8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7])));
		}
		for (; j < n; j++) {
			const float *r = k + (size_t)j * d;
			__m256 acc = _mm256_setzero_ps();

			for (uint32_t c = 0; c < d; c += 8)
				acc = _mm256_fmadd_ps(_mm256_loadu_ps(r + c), _mm256_loadu_ps(qh + c), acc);
			lh[j] = scale * hsum_ps(acc);
		}
	}
}

/* out_h += Σ_j w[h*stride + j] v_j over rows j < n of f32 values (row stride
 * d), 64 channels at a time in eight named registers (an array indexed by a
 * run-time count would live on the stack, each multiply-add waiting on a
 * store), then 8 at a time; heads whose weights are all zero are skipped. */
static void accum_f32(const float *v, uint32_t n, uint32_t d, const float *w, size_t stride, uint32_t nq,
		      float *out)
{
	for (uint32_t h = 0; h < nq; h++) {
		const float *wh = w + (size_t)h * stride;
		float *o = out + (size_t)h * d;
		uint32_t c0 = 0;
		int any = 0;

		for (uint32_t j = 0; j < n; j++)
			any |= wh[j] > 0.0f;
		if (!any)
			continue;
		for (; c0 + 64 <= d; c0 += 64) {
			__m256 a0 = _mm256_loadu_ps(o + c0), a1 = _mm256_loadu_ps(o + c0 + 8);
			__m256 a2 = _mm256_loadu_ps(o + c0 + 16), a3 = _mm256_loadu_ps(o + c0 + 24);
			__m256 a4 = _mm256_loadu_ps(o + c0 + 32), a5 = _mm256_loadu_ps(o + c0 + 40);
			__m256 a6 = _mm256_loadu_ps(o + c0 + 48), a7 = _mm256_loadu_ps(o + c0 + 56);

			for (uint32_t j = 0; j < n; j++) {
				const float *r = v + (size_t)j * d + c0;
				__m256 ww;

				if (!(wh[j] > 0.0f))
					continue;
				ww = _mm256_set1_ps(wh[j]);
				a0 = _mm256_fmadd_ps(ww, _mm256_loadu_ps(r), a0);
				a1 = _mm256_fmadd_ps(ww, _mm256_loadu_ps(r + 8), a1);
				a2 = _mm256_fmadd_ps(ww, _mm256_loadu_ps(r + 16), a2);
				a3 = _mm256_fmadd_ps(ww, _mm256_loadu_ps(r + 24), a3);
				a4 = _mm256_fmadd_ps(ww, _mm256_loadu_ps(r + 32), a4);
				a5 = _mm256_fmadd_ps(ww, _mm256_loadu_ps(r + 40), a5);
				a6 = _mm256_fmadd_ps(ww, _mm256_loadu_ps(r + 48), a6);
				a7 = _mm256_fmadd_ps(ww, _mm256_loadu_ps(r + 56), a7);
			}
			_mm256_storeu_ps(o + c0, a0);
			_mm256_storeu_ps(o + c0 + 8, a1);
			_mm256_storeu_ps(o + c0 + 16, a2);
			_mm256_storeu_ps(o + c0 + 24, a3);
			_mm256_storeu_ps(o + c0 + 32, a4);
			_mm256_storeu_ps(o + c0 + 40, a5);
			_mm256_storeu_ps(o + c0 + 48, a6);
			_mm256_storeu_ps(o + c0 + 56, a7);
		}
		for (; c0 < d; c0 += 8) {
			__m256 a = _mm256_loadu_ps(o + c0);

			for (uint32_t j = 0; j < n; j++)
				if (wh[j] > 0.0f)
					a = _mm256_fmadd_ps(_mm256_set1_ps(wh[j]), _mm256_loadu_ps(v + (size_t)j * d + c0), a);
			_mm256_storeu_ps(o + c0, a);
		}
	}
}

/* n rows of d f16 values to f32. */
static void f16_rows(const uint16_t *x, uint32_t n, uint32_t d, float *y)
{
	for (size_t i = 0; i < (size_t)n * d; i += 8)
		_mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
}

/* logit[h*stride + j] = scale * q_h · k_j for rows j < n of f16 keys;
 * d % 8 == 0, d <= 512 (the largest head the model loader accepts). */
void kv_score_f16_avx2(const void *K, uint32_t n, uint32_t d, const float *q, uint32_t nq, float scale,
		       float *logit, size_t stride)
{
	float tile[TILE * 512];

	for (uint32_t j = 0; j < n; j += TILE) {
		uint32_t m = n - j < TILE ? n - j : TILE;

		f16_rows((const uint16_t *)K + (size_t)j * d, m, d, tile);
		score_f32(tile, m, d, q, nq, scale, logit + j, stride);
	}
}

void kv_score_f32_avx2(const void *K, uint32_t n, uint32_t d, const float *q, uint32_t nq, float scale,
		       float *logit, size_t stride)
{
	score_f32(K, n, d, q, nq, scale, logit, stride);
}

/* out_h += w[h*stride + j] * v_j over rows j < n with a nonzero weight for some head. */
void kv_accum_f16_avx2(const void *V, uint32_t n, uint32_t d, const float *w, size_t stride, uint32_t nq,
		       float *out)
{
	float tile[TILE * 512];

	for (uint32_t j = 0; j < n; j += TILE) {
		uint32_t m = n - j < TILE ? n - j : TILE;
		int any = 0;

		for (uint32_t h = 0; h < nq && !any; h++)
			for (uint32_t i = 0; i < m; i++)
				any |= w[(size_t)h * stride + j + i] > 0.0f;
		if (!any)
			continue;
		f16_rows((const uint16_t *)V + (size_t)j * d, m, d, tile);
		accum_f32(tile, m, d, w + j, stride, nq, out);
	}
}

void kv_accum_f32_avx2(const void *V, uint32_t n, uint32_t d, const float *w, size_t stride, uint32_t nq,
		       float *out)
{
	accum_f32(V, n, d, w, stride, nq, out);
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
	sum = hsum_ps(acc);
	for (; i < n; i++) {
		l[i] = l[i] == -INFINITY ? 0.0f : expf(l[i] - max);
		sum += l[i];
	}
	return sum;
}

float kv_max_avx2(const float *l, uint32_t n, float m)
{
	__m256 a = _mm256_set1_ps(m);
	uint32_t i = 0;

	for (; i + 8 <= n; i += 8)
		a = _mm256_max_ps(_mm256_loadu_ps(l + i), a);
	m = hmax_ps(a);
	for (; i < n; i++)
		if (l[i] > m)
			m = l[i];
	return m;
}
