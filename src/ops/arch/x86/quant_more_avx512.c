/* quant_more_avx512.c - 512-bit row dots (AVX512F/BW/VL, AVX512-VNNI) of the
 * blocks-of-32 types of quant_more.c: q4_1, q5_0, q5_1 and iq4_nl, and of
 * iq4_xs (its sub-blocks of 32 two a register, signed values through
 * vpmaddubsw and the scales through vpdpwssd: see its kernel).
 *
 * One register holds two blocks, 64 values in element order (the nibbles of
 * each block's 16 bytes, low then high); q5's fifth bits are set under a
 * 64-bit mask built from the two qh words, and iq4_nl's values come from a
 * vpshufb table of value + 128. vpdpbusd multiplies the unsigned values by
 * the int8 activations and sums them per 4 into 16 int32 lanes, 8 per block.
 * The integer offsets (q5_0's -16, iq4_nl's -128) come off as a second
 * vpdpbusd of the constant against the activations; q4_1 / q5_1's m times the
 * block's activation sum is added in float, as in the AVX2 kernels. Results
 * agree with the references up to the float sums over blocks (the tests
 * compare them). */
#include <immintrin.h>
#include <string.h>

#include "ops/arch/x86/quant_x86.h"
#include "ops/arch/x86/x86.h"

/* The 32 nibbles of each of two blocks' 16 bytes, as 64 bytes 0..15. */
static inline __m512i nib2(const uint8_t *p0, const uint8_t *p1)
{
	__m256i q = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)p1), _mm_loadu_si128((const __m128i *)p0));
	__m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);

	/* lanes p0, p1, p0 >> 4, p1 >> 4 -> p0, p0 >> 4, p1, p1 >> 4 */
	x = _mm512_shuffle_i64x2(x, x, _MM_SHUFFLE(3, 1, 2, 0));
	return _mm512_and_si512(x, _mm512_set1_epi8(15));
}

/* 16 where bit e of the two little-endian qh words is set. */
static inline __m512i bit5_2(const uint8_t *h0, const uint8_t *h1)
{
	uint32_t a, b;

	memcpy(&a, h0, sizeof a);
	memcpy(&b, h1, sizeof b);
	return _mm512_maskz_mov_epi8(_cvtu64_mask64((uint64_t)b << 32 | a), _mm512_set1_epi8(16));
}

static inline __m512i act2(const struct blk_q8_32 *y0, const struct blk_q8_32 *y1)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y0->qs)),
				  _mm256_loadu_si256((const __m256i *)y1->qs), 1);
}

static inline __m512i iq4_plus128(__m512i codes)
{
	__m128i t = _mm_add_epi8(_mm_loadu_si128((const __m128i *)ops_iq4nl_values), _mm_set1_epi8((char)128));

	return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(t), codes);
}

/* Blocks i and j (= i + 1, or i again with a zero scale at an odd end) per
 * step: VALS gives their 64 unsigned values, OFF8 the constant taken off each
 * (0: none), OFFSET(k) the float offset term of block k. */
#define ROWS32_512(NAME, BLK, VALS, OFF8, OFFSET)                                                          \
	void NAME(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)                    \
	{                                                                                                  \
		const struct blk_q8_32 *y = a;                                                             \
		const __m512i zero = _mm512_setzero_si512(), off8 = _mm512_set1_epi8((char)(OFF8));        \
		int64_t nb = n / 32;                                                                       \
		for (int r = 0; r < nr; r++) {                                                             \
			const BLK *b = row_at(w, ws, r);                                                   \
			__m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();                    \
			float off = 0.0f;                                                                  \
			for (int64_t i = 0; i < nb; i += 2) {                                              \
				int64_t j = i + 1 < nb ? i + 1 : i;                                        \
				__m512i yq = act2(&y[i], &y[j]);                                           \
				__m512i isum = _mm512_dpbusd_epi32(zero, VALS(i, j), yq);                  \
				float s0 = f16(b[i].d) * y[i].d, s1 = j != i ? f16(b[j].d) * y[j].d : 0.0f; \
				__m512 sc = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(s0), _mm512_set1_ps(s1)); \
				if (OFF8)                                                                  \
					isum = _mm512_sub_epi32(isum, _mm512_dpbusd_epi32(zero, off8, yq)); \
				if (i % 4 == 0)                                                            \
					acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, acc0);        \
				else                                                                       \
					acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, acc1);        \
				off += OFFSET(i) + (j != i ? OFFSET(j) : 0.0f);                            \
			}                                                                                  \
			s[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + off;                      \
		}                                                                                          \
	}

#define V_Q4_1(i, j) nib2(b[i].qs, b[j].qs)
#define V_Q5(i, j) _mm512_or_si512(nib2(b[i].qs, b[j].qs), bit5_2(b[i].qh, b[j].qh))
#define V_IQ4(i, j) iq4_plus128(nib2(b[i].qs, b[j].qs))
#define OFF_M(k) (f16(b[k].m) * y[k].s)
#define OFF_NONE(k) 0.0f
ROWS32_512(dot_rows_q4_1_avx512, struct blk_q4_1, V_Q4_1, 0, OFF_M)
ROWS32_512(dot_rows_q5_0_avx512, struct blk_q5_0, V_Q5, 16, OFF_NONE)
ROWS32_512(dot_rows_q5_1_avx512, struct blk_q5_1, V_Q5, 0, OFF_M)
ROWS32_512(dot_rows_iq4_nl_avx512, struct blk_iq4_nl, V_IQ4, 128, OFF_NONE)

/* The 8 sub-block scales of an iq4_xs block less 32, as int16 words: the
 * 4-bit and 2-bit fields spread to bytes with 64-bit shifts and masks. */
static inline __m128i iq4_xs_scales(const struct blk_iq4_xs *b)
{
	uint32_t l;
	uint64_t x, h = b->scales_h;

	memcpy(&l, b->scales_l, sizeof l);
	x = l;
	x = (x | x << 16) & 0x0000ffff0000ffffull;
	x = (x | x << 8) & 0x00ff00ff00ff00ffull;
	x = (x | x << 4) & 0x0f0f0f0f0f0f0f0full; /* byte j: nibble j */
	h = (h | h << 24) & 0x000000ff000000ffull;
	h = (h | h << 12) & 0x000f000f000f000full;
	h = (h | h << 6) & 0x0303030303030303ull; /* byte j: bits 2j, 2j + 1 */
	return _mm_cvtepi8_epi16(_mm_sub_epi8(_mm_cvtsi64_si128((long long)(x | h << 4)), _mm_set1_epi8(32)));
}

/* vpshufb control: lanes 0 and 1 get int16 word lo of their 128-bit lane,
 * lanes 2 and 3 word hi. */
static inline __m512i spread_w2(int lo, int hi)
{
	long long a = (long long)((2 * lo) | (2 * lo + 1) << 8) * 0x0001000100010001ll;
	long long b = (long long)((2 * hi) | (2 * hi + 1) << 8) * 0x0001000100010001ll;

	return _mm512_set_epi64(b, b, b, b, a, a, a, a);
}

/* iq4_xs: sub-blocks j, j + 1 per register; |w| times y with w's sign
 * (vpmaddubsw, at most 2 x 127 x 127 a pair: the activations are within
 * +-127), then vpdpwssd with the two scales. */
void dot_rows_iq4_xs_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m512i tbl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ops_iq4nl_values));
	const __m512i zero = _mm512_setzero_si512();
	const __m512i sp[4] = { spread_w2(0, 1), spread_w2(2, 3), spread_w2(4, 5), spread_w2(6, 7) };

	for (int r = 0; r < nr; r++) {
		const struct blk_iq4_xs *b = row_at(w, ws, r);
		__m512 acc = _mm512_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m512i sb = _mm512_broadcast_i32x4(iq4_xs_scales(&b[i])), isum = zero;

			for (int j = 0; j < 8; j += 2) {
				__m512i v = _mm512_shuffle_epi8(tbl, nib2(b[i].qs + 16 * j, b[i].qs + 16 * (j + 1)));
				__m512i yq = _mm512_loadu_si512((const void *)(y[i].qs + 32 * j));
				__m512i ys = _mm512_mask_sub_epi8(yq, _mm512_movepi8_mask(v), zero, yq);
				__m512i p = _mm512_maddubs_epi16(_mm512_abs_epi8(v), ys);

				isum = _mm512_dpwssd_epi32(isum, p, _mm512_shuffle_epi8(sb, sp[j / 2]));
			}
			acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(f16(b[i].d) * y[i].d), acc);
		}
		s[r] = _mm512_reduce_add_ps(acc);
	}
}
