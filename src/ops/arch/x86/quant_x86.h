/* quant_x86.h - small helpers the x86 weight kernel files share
 * (quant_avx2.c, quant_more_avx2.c, quant_vnni.c, quant_avx512.c). They are
 * static inline, so each file compiles them into its own loops with its own
 * flags (x86.h); include this only from those files. */
#ifndef TKV_OPS_ARCH_X86_QUANT_X86_H
#define TKV_OPS_ARCH_X86_QUANT_X86_H

#include <immintrin.h>
#include <string.h>

#include "ops/ops_impl.h"

static inline float f16(uint16_t h)
{
	return _cvtsh_ss(h);
}

static inline const void *row_at(const void *w, size_t ws, int r)
{
	return (const char *)w + (size_t)r * ws;
}

/* 16 bytes of nibbles -> 32 bytes 0..15: elements 0..15 (low nibbles), then
 * 16..31 (high nibbles). */
static inline __m256i nibbles(const uint8_t *p)
{
	__m128i q = _mm_loadu_si128((const __m128i *)p);

	return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
}

/* 4 activation bytes in every dword lane. */
static inline __m256i bcast4(const int8_t *p)
{
	int32_t v;

	memcpy(&v, p, sizeof v);
	return _mm256_set1_epi32(v);
}

/* The 16 scales of a q3_k block, less their bias of 32, as int8: scale k's
 * low 4 bits are nibble k / 8 of byte k % 8, its high 2 bits bits
 * 2 (k / 4) of byte 8 + k % 4; a few 64-bit operations for all 16. */
static inline __m128i q3_k_scales(const uint8_t *sb)
{
	uint64_t lo;
	uint32_t h;

	memcpy(&lo, sb, sizeof lo);
	memcpy(&h, sb + 8, sizeof h);
	uint64_t h01 = (uint64_t)(h >> 2 & 0x03030303u) << 32 | (h & 0x03030303u);
	uint64_t h23 = (uint64_t)(h >> 6 & 0x03030303u) << 32 | (h >> 4 & 0x03030303u);
	uint64_t s0 = (lo & 0x0f0f0f0f0f0f0f0full) | h01 << 4, s1 = (lo >> 4 & 0x0f0f0f0f0f0f0f0full) | h23 << 4;

	return _mm_sub_epi8(_mm_set_epi64x((long long)s1, (long long)s0), _mm_set1_epi8(32));
}

/* q2_k: its mins (the high nibbles of the scale bytes) times the
 * activations' 16-element sums, as 8 int32 pair sums. */
static inline __m256i q2_k_min_sums(const uint8_t *scales, const int16_t *bsums)
{
	__m128i sc8 = _mm_loadu_si128((const __m128i *)scales);
	__m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(15)));

	return _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)bsums));
}

/* The 64 scales of an iq4_xs group super-block (ops_impl.h), v = 8j + r,
 * less their bias, into sc. */
static inline void iq4_xs_x8_scales(const uint8_t *sb, int8_t sc[64])
{
	const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
	__m256i lo = _mm256_loadu_si256((const __m256i *)(sb + 16));
	__m128i h = _mm_loadu_si128((const __m128i *)(sb + 48));
	__m256i h2 = _mm256_set_m128i(_mm_srli_epi16(h, 2), h);
	__m256i h4 = _mm256_set_m128i(_mm_srli_epi16(h, 6), _mm_srli_epi16(h, 4));
	__m256i s0 = _mm256_or_si256(_mm256_and_si256(lo, m15), _mm256_slli_epi16(_mm256_and_si256(h2, m3), 4));
	__m256i s1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo, 4), m15),
				     _mm256_slli_epi16(_mm256_and_si256(h4, m3), 4));

	_mm256_storeu_si256((__m256i *)sc, _mm256_sub_epi8(s0, _mm256_set1_epi8(32)));
	_mm256_storeu_si256((__m256i *)(sc + 32), _mm256_sub_epi8(s1, _mm256_set1_epi8(32)));
}

/* A q2_k / q3_k group super-block's 8 rows (ops_impl.h) from their exact
 * integer sums: acc + y_d (d isum - dmin msum) for q2_k (msum: mins times the
 * activations' 16-element sums), acc + d y_d (isum - 4 msum) for q3_k (msum:
 * scales times those sums, for its values + 4). */
static inline __m256 k2_x8_accum(__m256 acc, const uint8_t *sb, float yd, __m256i isum, __m256i msum, int three)
{
	__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sb)), y = _mm256_set1_ps(yd);

	if (three)
		return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum, _mm256_slli_epi32(msum, 2))),
				       _mm256_mul_ps(d, y), acc);
	return _mm256_fmadd_ps(y,
			       _mm256_fnmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 16))),
						_mm256_cvtepi32_ps(msum), _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum))),
			       acc);
}

/* Stores one panel block: row r's 32 values are u[r]; the 8x8 transpose of
 * 32-bit words puts 4 values of all 8 rows in each 32-byte group. */
static inline void panel_store(uint8_t *pb, const __m256i u[8], __m256 d, __m256 m)
{
	__m256i t0 = _mm256_unpacklo_epi32(u[0], u[1]), t1 = _mm256_unpackhi_epi32(u[0], u[1]);
	__m256i t2 = _mm256_unpacklo_epi32(u[2], u[3]), t3 = _mm256_unpackhi_epi32(u[2], u[3]);
	__m256i t4 = _mm256_unpacklo_epi32(u[4], u[5]), t5 = _mm256_unpackhi_epi32(u[4], u[5]);
	__m256i t6 = _mm256_unpacklo_epi32(u[6], u[7]), t7 = _mm256_unpackhi_epi32(u[6], u[7]);
	/* v0: words 0 (low lane) and 4 (high lane) of rows 0-3; v1: words 1 / 5 ... */
	__m256i v0 = _mm256_unpacklo_epi64(t0, t2), v1 = _mm256_unpackhi_epi64(t0, t2);
	__m256i v2 = _mm256_unpacklo_epi64(t1, t3), v3 = _mm256_unpackhi_epi64(t1, t3);
	__m256i v4 = _mm256_unpacklo_epi64(t4, t6), v5 = _mm256_unpackhi_epi64(t4, t6);
	__m256i v6 = _mm256_unpacklo_epi64(t5, t7), v7 = _mm256_unpackhi_epi64(t5, t7);
	__m256i *o = (__m256i *)pb;

	_mm256_storeu_si256(o + 0, _mm256_permute2x128_si256(v0, v4, 0x20));
	_mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(v1, v5, 0x20));
	_mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(v2, v6, 0x20));
	_mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(v3, v7, 0x20));
	_mm256_storeu_si256(o + 4, _mm256_permute2x128_si256(v0, v4, 0x31));
	_mm256_storeu_si256(o + 5, _mm256_permute2x128_si256(v1, v5, 0x31));
	_mm256_storeu_si256(o + 6, _mm256_permute2x128_si256(v2, v6, 0x31));
	_mm256_storeu_si256(o + 7, _mm256_permute2x128_si256(v3, v7, 0x31));
	_mm256_storeu_ps((float *)(pb + 256), d);
	_mm256_storeu_ps((float *)(pb + 288), m);
}

/* CALL(k) with k = nc, 1 to 8 (below 1: 1): a constant in each case, so the
 * always_inline kernel it names is compiled once per column count and keeps
 * its per-column accumulators in registers (AVX-512's 32 vector registers
 * hold 8 columns; measured +10% over 4). */
#define OPS_COLS_SWITCH8(nc, CALL)            \
	switch (nc) {                         \
	case 8: CALL(8); break;               \
	case 7: CALL(7); break;               \
	case 6: CALL(6); break;               \
	case 5: CALL(5); break;               \
	case 4: CALL(4); break;               \
	case 3: CALL(3); break;               \
	case 2: CALL(2); break;               \
	default: CALL(1); break;              \
	}

/* A group dot (ops_gemv_x8_fn) from a one-column kernel COL(n, group, y, s
 * ...), run for each activation column in turn: the k-quant groups, whose
 * per-column work already fills the registers. */
#define OPS_X8_EACH_COL(NAME, COL, ...)                                                                      \
	void NAME(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)       \
	{                                                                                                    \
		for (int c = 0; c < nc; c++)                                                                 \
			COL(n, group, (const void *)((const char *)a + (size_t)c * as), s + (size_t)c * ss,  \
			    ##__VA_ARGS__);                                                                  \
	}

#endif
