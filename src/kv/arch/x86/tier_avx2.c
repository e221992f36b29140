/* tier_avx2.c - AVX2/F16C versions of the KV row kernels (tier_impl.h), eight
 * channels per step with the scalar reference for the tail. They give the
 * references' bits: F16C conversions are exact (load) or round to nearest
 * even (store), and m + s * q is a multiply then an add, never an fma. */
#include <immintrin.h>
#include <string.h>

#include "kv/arch/x86/codes_avx2.h"
#include "kv/arch/x86/tier_x86.h"

void kv_tier_f16_load_avx2(const uint16_t *h, float *x, uint32_t n)
{
	uint32_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
	kv_tier_f16_load_ref(h + i, x + i, n - i);
}

void kv_tier_f16_store_avx2(const float *x, uint16_t *h, uint32_t n)
{
	uint32_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(h + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	kv_tier_f16_store_ref(x + i, h + i, n - i);
}

void kv_tier_q8_load_avx2(const int8_t *q, float s, float *x, uint32_t n)
{
	__m256 vs = _mm256_set1_ps(s);
	uint32_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m128i b = _mm_loadu_si128((const __m128i *)(q + i));
		__m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
		__m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));

		_mm256_storeu_ps(x + i, _mm256_mul_ps(vs, lo));
		_mm256_storeu_ps(x + i + 8, _mm256_mul_ps(vs, hi));
	}
	kv_tier_q8_load_ref(q + i, s, x + i, n - i);
}

/* Eight codes as floats: 4-bit codes from 4 bytes, or 2-bit codes from 2
 * bytes. Each byte is copied to the lanes of its codes, then shifted by the
 * code's place in it. For the short tails; the loops below take 32 at once. */
static inline __m256 codes8(uint32_t bits, const uint8_t *p)
{
	__m128i b, dup;
	__m256i v;

	if (bits == 4) {
		uint32_t w;

		memcpy(&w, p, 4);
		b = _mm_cvtsi32_si128((int)w);
		dup = _mm_shuffle_epi8(b, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1));
		v = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(dup), _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
		v = _mm256_and_si256(v, _mm256_set1_epi32(15));
	} else {
		uint16_t w;

		memcpy(&w, p, 2);
		b = _mm_cvtsi32_si128(w);
		dup = _mm_shuffle_epi8(b, _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1));
		v = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(dup), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
		v = _mm256_and_si256(v, _mm256_set1_epi32(3));
	}
	return _mm256_cvtepi32_ps(v);
}

/* Codes 8j..8j+7 of a codes32 result, as floats. */
static inline __m256 codes32_f(const __m128i c[2], int j)
{
	__m128i b = c[j / 2];

	if (j % 2)
		b = _mm_srli_si128(b, 8);
	return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
}

/* Code c of a row, one at a time (for the last few channels of a group). */
static inline float code1(uint32_t bits, const uint8_t *codes, uint32_t c)
{
	return (float)((codes[c * bits / 8] >> (c * bits % 8)) & ((1u << bits) - 1));
}

void kv_tier_asym_load_k_avx2(uint32_t bits, const uint8_t *codes, const uint16_t *s, const uint16_t *m, float *x,
			      uint32_t n)
{
	uint32_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m128i c[2];

		codes32(bits, codes + i * bits / 8, c);
		for (int j = 0; j < 4; j++) {
			__m256 vs = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i + 8 * j)));
			__m256 vm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(m + i + 8 * j)));

			_mm256_storeu_ps(x + i + 8 * j, _mm256_add_ps(vm, _mm256_mul_ps(vs, codes32_f(c, j))));
		}
	}
	for (; i + 8 <= n; i += 8) {
		__m256 vs = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i)));
		__m256 vm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(m + i)));

		_mm256_storeu_ps(x + i, _mm256_add_ps(vm, _mm256_mul_ps(vs, codes8(bits, codes + i * bits / 8))));
	}
	kv_tier_asym_load_k_ref(bits, codes + i * bits / 8, s + i, m + i, x + i, n - i);
}

void kv_tier_asym_load_v_avx2(uint32_t bits, const uint8_t *codes, const uint16_t *par, float *x, uint32_t d)
{
	uint32_t G = d < KV_V_GROUP ? d : KV_V_GROUP;

	for (uint32_t c0 = 0, g = 0; c0 < d; c0 += G, g++) {
		uint32_t nc = d - c0 < G ? d - c0 : G, i = 0;
		float s = _cvtsh_ss(par[2 * g]), m = _cvtsh_ss(par[2 * g + 1]);
		__m256 vs = _mm256_set1_ps(s), vm = _mm256_set1_ps(m);
		const uint8_t *cg = codes + c0 * bits / 8;
		float *xg = x + c0;

		if (nc == 32) {
			__m128i c[2];

			codes32(bits, cg, c);
			for (int j = 0; j < 4; j++)
				_mm256_storeu_ps(xg + 8 * j, _mm256_add_ps(vm, _mm256_mul_ps(vs, codes32_f(c, j))));
			continue;
		}
		for (; i + 8 <= nc; i += 8)
			_mm256_storeu_ps(xg + i, _mm256_add_ps(vm, _mm256_mul_ps(vs, codes8(bits, cg + i * bits / 8))));
		for (; i < nc; i++)
			xg[i] = m + s * code1(bits, cg, i);
	}
}
