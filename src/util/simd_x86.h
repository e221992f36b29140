/* simd_x86.h - horizontal reductions of AVX registers, shared by the x86
 * kernel files (each is compiled with -mavx2 or more; include this only from
 * those). */
#ifndef TKV_UTIL_SIMD_X86_H
#define TKV_UTIL_SIMD_X86_H

#include <immintrin.h>

/* The sum of v's eight lanes. */
static inline float hsum_ps(__m256 v)
{
	__m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);

	lo = _mm_add_ps(lo, hi);
	lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
	lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
	return _mm_cvtss_f32(lo);
}

/* The largest of v's eight lanes. */
static inline float hmax_ps(__m256 v)
{
	__m128 r = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	r = _mm_max_ps(r, _mm_movehl_ps(r, r));
	r = _mm_max_ss(r, _mm_movehdup_ps(r));
	return _mm_cvtss_f32(r);
}

#endif
