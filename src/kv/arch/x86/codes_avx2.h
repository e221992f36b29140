/* codes_avx2.h - unpacking q4/q2 codes (tier.h layouts) in AVX2 registers,
 * for the files compiled with -mavx2 (tier_avx2.c, attn_q_avx2.c). */
#ifndef TKV_KV_ARCH_X86_CODES_AVX2_H
#define TKV_KV_ARCH_X86_CODES_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* 32 codes, one per byte and in channel order, from 16 bytes (4-bit) or 8
 * bytes (2-bit): c[0] holds channels 0..15, c[1] channels 16..31. */
static inline void codes32(uint32_t bits, const uint8_t *p, __m128i c[2])
{
	if (bits == 4) {
		__m128i b = _mm_loadu_si128((const __m128i *)p), m4 = _mm_set1_epi8(15);
		__m128i lo = _mm_and_si128(b, m4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m4);

		c[0] = _mm_unpacklo_epi8(lo, hi);
		c[1] = _mm_unpackhi_epi8(lo, hi);
	} else {
		__m128i b = _mm_loadl_epi64((const __m128i *)p), m2 = _mm_set1_epi8(3);
		__m128i a0 = _mm_and_si128(b, m2), a1 = _mm_and_si128(_mm_srli_epi16(b, 2), m2);
		__m128i a2 = _mm_and_si128(_mm_srli_epi16(b, 4), m2), a3 = _mm_and_si128(_mm_srli_epi16(b, 6), m2);
		__m128i x01 = _mm_unpacklo_epi8(a0, a1), x23 = _mm_unpacklo_epi8(a2, a3);

		c[0] = _mm_unpacklo_epi16(x01, x23);
		c[1] = _mm_unpackhi_epi16(x01, x23);
	}
}

/* The 32 codes of codes32 in one register, channel order (0..15 in the low
 * lane, 16..31 in the high one). */
static inline __m256i codes32_u8(uint32_t bits, const uint8_t *p)
{
	__m128i c[2];

	codes32(bits, p, c);
	return _mm256_set_m128i(c[1], c[0]);
}

#endif
