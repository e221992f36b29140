/* attn_q_x86.h - the key side of the q4 integer kernels (attn_q_avx2.c says
 * how they work), shared by attn_q_avx2.c, attn_q_vnni.c and attn_q_avx512.c
 * (which takes its row and query preparation): each includes it after
 * defining DOT_I16(acc, a, b), acc + the int32 pair sums of a * b (vpmaddwd +
 * vpaddd, or vpdpwssd where the CPU has AVX512-VNNI). */
#ifndef TKV_KV_ARCH_X86_ATTN_Q_X86_H
#define TKV_KV_ARCH_X86_ATTN_Q_X86_H

#include <immintrin.h>
#include <string.h>

#include "kv/attn_impl.h"
#include "util/simd_x86.h"

#define QHEADS 8     /* query heads prepared at once */

/* The codes of 64 channels of a row: e = even channels, o = odd ones. */
static inline void row_eo(const uint8_t *p, __m256i *e, __m256i *o)
{
	const __m256i m4 = _mm256_set1_epi8(15);
	__m256i b = _mm256_loadu_si256((const __m256i *)p);

	*e = _mm256_and_si256(b, m4);
	*o = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
}

/* The codes of 64 channels of a row as int16, 16 channels per register in
 * channel order. */
static inline void row_i16(const uint8_t *p, __m256i x[4])
{
	__m256i e, o, lo, hi;

	row_eo(p, &e, &o);
	lo = _mm256_unpacklo_epi8(e, o);  /* channels 0-15 | 32-47 */
	hi = _mm256_unpackhi_epi8(e, o);  /* channels 16-31 | 48-63 */
	x[0] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(lo));
	x[1] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(hi));
	x[2] = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(lo, 1));
	x[3] = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(hi, 1));
}

/* A page's per-channel key scales s and minima m (f16 in its K region) as floats. */
static inline void page_params(const uint16_t *ps, uint32_t d, float *s, float *m)
{
	for (uint32_t c = 0; c < d; c += 8) {
		_mm256_storeu_ps(s + c, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ps + c))));
		_mm256_storeu_ps(m + c, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ps + d + c))));
	}
}

/* The 16-bit query of one head (16 channels per register, in order) from q
 * and the page's per-channel s, m; see kv_score_q_ref. */
static inline void prep_query(const float *q, const float *s, const float *m, uint32_t d, __m256i *qv, float *base,
			      float *r)
{
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 vmax = _mm256_setzero_ps(), vb = _mm256_setzero_ps(), inv;
	float amax;

	for (uint32_t c = 0; c < d; c += 8) {
		__m256 qc = _mm256_loadu_ps(q + c);

		vmax = _mm256_max_ps(vmax, _mm256_and_ps(absmask, _mm256_mul_ps(qc, _mm256_loadu_ps(s + c))));
		vb = _mm256_fmadd_ps(qc, _mm256_loadu_ps(m + c), vb);
	}
	amax = hmax_ps(vmax);
	*base = hsum_ps(vb);
	*r = amax / KV_Q_QMAX;
	inv = _mm256_set1_ps(amax > 0.0f ? KV_Q_QMAX / amax : 0.0f);
	for (uint32_t c = 0; c < d; c += 16) {
		__m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(s + c)), inv));
		__m256i b = _mm256_cvtps_epi32(
			_mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(q + c + 8), _mm256_loadu_ps(s + c + 8)), inv));

		qv[c / 16] = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
	}
}

/* The 8 lane sums of a0..a7 in one vector: lane r = the sum of ar's lanes. */
static inline __m256i hsum8_epi32(const __m256i a[8])
{
	__m256i b0 = _mm256_hadd_epi32(a[0], a[1]), b1 = _mm256_hadd_epi32(a[2], a[3]);
	__m256i b2 = _mm256_hadd_epi32(a[4], a[5]), b3 = _mm256_hadd_epi32(a[6], a[7]);
	__m256i c0 = _mm256_hadd_epi32(b0, b1), c1 = _mm256_hadd_epi32(b2, b3);

	return _mm256_add_epi32(_mm256_permute2x128_si256(c0, c1, 0x20), _mm256_permute2x128_si256(c0, c1, 0x31));
}

#define INLINE static inline __attribute__((always_inline))

/* kv_score_q_avx2 for nc chunks of 64 channels (a constant where inlined). */
INLINE void score_q4(uint32_t nc, const uint16_t *ps, const uint8_t *codes, uint32_t n, const float *q, uint32_t nq,
		     float scale, float *logit, size_t stride)
{
	const uint32_t d = 64 * nc;
	const size_t rb = 32 * (size_t)nc;
	float s[KV_Q_MAX_D], m[KV_Q_MAX_D], base[QHEADS], r[QHEADS];
	__m256i qv[QHEADS][KV_Q_MAX_D / 16], kb[8][KV_Q_MAX_D / 16];

	page_params(ps, d, s, m);
	for (uint32_t h0 = 0; h0 < nq; h0 += QHEADS) {
		uint32_t nh = nq - h0 < QHEADS ? nq - h0 : QHEADS;

		for (uint32_t h = 0; h < nh; h++)
			prep_query(q + (size_t)(h0 + h) * d, s, m, d, qv[h], &base[h], &r[h]);
		for (uint32_t i0 = 0; i0 < n; i0 += 8) {
			uint32_t mr = n - i0 < 8 ? n - i0 : 8;

			for (uint32_t i = 0; i < 8; i++)
				for (uint32_t t = 0; t < nc; t++) {
					if (i < mr)
						row_i16(codes + (i0 + i) * rb + 32 * t, &kb[i][4 * t]);
					else
						for (int k = 0; k < 4; k++)
							kb[i][4 * t + k] = _mm256_setzero_si256();
				}
			for (uint32_t h = 0; h < nh; h++) {
				__m256i acc[8];
				__m256 lv;
				float *dst = logit + (size_t)(h0 + h) * stride + i0;

				/* |sum| <= d * 15 * 32767: within int32 */
				for (uint32_t i = 0; i < 8; i++) {
					acc[i] = _mm256_madd_epi16(kb[i][0], qv[h][0]);
					for (uint32_t k = 1; k < 4 * nc; k++)
						acc[i] = DOT_I16(acc[i], kb[i][k], qv[h][k]);
				}
				lv = _mm256_mul_ps(_mm256_set1_ps(scale),
						   _mm256_fmadd_ps(_mm256_set1_ps(r[h]), _mm256_cvtepi32_ps(hsum8_epi32(acc)),
								   _mm256_set1_ps(base[h])));
				if (mr == 8) { /* a store, not a call: this runs per head and 8 rows */
					_mm256_storeu_ps(dst, lv);
				} else {
					float l[8];

					_mm256_storeu_ps(l, lv);
					memcpy(dst, l, mr * sizeof(float));
				}
			}
		}
	}
}

/* Whether some head's bound of the page's scores reaches lim[h] (see
 * kv_score_q_ref): q·k <= Σ q_c m_c + Σ max(15 q_c s_c, 0). */
static int page_matters(const uint16_t *ps, uint32_t d, const float *q, uint32_t nq, float scale, const float *lim)
{
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), L = _mm256_set1_ps(15.0f);

	for (uint32_t h = 0; h < nq; h++) {
		const float *qh = q + (size_t)h * d;
		__m256 vb = _mm256_setzero_ps(), vmag = _mm256_setzero_ps();

		for (uint32_t c = 0; c < d; c += 8) {
			__m256 qc = _mm256_loadu_ps(qh + c);
			__m256 qm = _mm256_mul_ps(qc, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ps + d + c))));
			__m256 qs = _mm256_mul_ps(L, _mm256_mul_ps(qc, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ps + c)))));

			vb = _mm256_add_ps(vb, _mm256_add_ps(qm, _mm256_max_ps(qs, _mm256_setzero_ps())));
			vmag = _mm256_add_ps(vmag, _mm256_add_ps(_mm256_and_ps(absmask, qm), _mm256_and_ps(absmask, qs)));
		}
		if (!(scale * (hsum_ps(vb) + KV_Q_BOUND_SLACK * hsum_ps(vmag)) < lim[h]))
			return 1;
	}
	return 0;
}

/* The entry points (attn_impl.h): a page's regions and the dispatch on d, 64
 * or 128, to a kernel body inlined for 1 or 2 chunks of 64 channels:
 * KERNEL(nc, ps, codes, n, q, nq, scale, logit, stride) for keys,
 * KERNEL(nc, par, codes, n, w, stride, nq, out) for values. */
#define Q4_SCORE_ENTRY(NAME, KERNEL)                                                                          \
	int NAME(uint32_t bits, const void *kreg, uint32_t j0, uint32_t n, uint32_t d, const float *q,          \
		 uint32_t nq, float scale, float *logit, size_t stride, const float *lim)                       \
	{                                                                                                       \
		const uint16_t *ps = kreg;                                                                      \
		const uint8_t *codes = (const uint8_t *)(ps + 2 * d) + (size_t)j0 * d / 2;                      \
                                                                                                                \
		(void)bits; /* 4 */                                                                             \
		if (lim && !page_matters(ps, d, q, nq, scale, lim))                                             \
			return 0;                                                                               \
		if (d == 64)                                                                                    \
			KERNEL(1, ps, codes, n, q, nq, scale, logit, stride);                                   \
		else                                                                                            \
			KERNEL(2, ps, codes, n, q, nq, scale, logit, stride);                                   \
		return 1;                                                                                       \
	}

#define Q4_ACCUM_ENTRY(NAME, KERNEL)                                                                          \
	void NAME(uint32_t bits, const void *vreg, uint32_t cap, uint32_t j0, uint32_t n, uint32_t d,          \
		  const float *w, size_t stride, uint32_t nq, float *out)                                       \
	{                                                                                                       \
		const uint32_t ng = d / 32;                                                                     \
		const uint16_t *par = (const uint16_t *)vreg + (size_t)j0 * ng * 2;                             \
		const uint8_t *codes =                                                                          \
			(const uint8_t *)((const uint16_t *)vreg + (size_t)cap * ng * 2) + (size_t)j0 * d / 2;  \
                                                                                                                \
		(void)bits; /* 4 */                                                                             \
		if (d == 64)                                                                                    \
			KERNEL(1, par, codes, n, w, stride, nq, out);                                           \
		else                                                                                            \
			KERNEL(2, par, codes, n, w, stride, nq, out);                                           \
	}

#endif
