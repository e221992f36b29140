/* quant_more_avx2.c - AVX2 row dots of the types in quant_more.c: q4_1, q5_0,
 * q5_1, iq4_nl (blocks of 32 against OPS_ACT_Q8_1 / OPS_ACT_Q8_32) and q2_k, q3_k, iq4_xs
 * (blocks of 256 against OPS_ACT_Q8_256), and the group dots and packs of
 * their interleaved layouts and of q4_0's, which the blocks of 32 with
 * nibbles share.
 *
 * The integer parts equal the references': unsigned codes (0..3, 0..15,
 * 0..31) times int8 activations through vpmaddubsw, which cannot saturate at
 * these ranges; the iq4 values (-127..113, looked up with vpshufb) through
 * |w| times y with w's sign (at most 2 * 127 * 127 per int16); then vpmaddwd
 * with ones or with the group scales. Offsets come off as the constant times
 * the activation sums (q5_0's -16, q3_k's -4 where the high bit is clear);
 * q4_1 / q5_1's m times the block's s, and q2_k's mins times the 16-element
 * sums. Only the float sums over blocks round in a different order. Rows are
 * whole blocks, so there is no scalar tail. */
#include <immintrin.h>
#include <string.h>

#include "ops/arch/x86/quant_x86.h"
#include "ops/arch/x86/x86.h"
#include "util/simd_x86.h"

/* The 32 bits of a little-endian uint32 at p as 32 bytes: 0x10 where bit e
 * is set (the 5th bit of element e), 0 elsewhere. */
static inline __m256i bit5_bytes(const uint8_t *p)
{
	const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
					     2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
	uint32_t v;
	__m256i x;

	memcpy(&v, p, sizeof v);
	/* each 128-bit lane holds the 4 bytes; lane 0 spreads bytes 0-1, lane 1 bytes 2-3 */
	x = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), sel);
	x = _mm256_cmpeq_epi8(_mm256_and_si256(x, bit), bit);
	return _mm256_and_si256(x, _mm256_set1_epi8(16));
}

/* The iq4 values of 32 codes (0..15). */
static inline __m256i iq4_lookup(__m256i codes)
{
	const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ops_iq4nl_values));

	return _mm256_shuffle_epi8(tbl, codes);
}

/* Pair sums (int16) of signed w times signed y, |w| <= 127. */
static inline __m256i maddss(__m256i w, __m256i y)
{
	return _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(y, w));
}

static inline __m256i sum4(__m256i p16)
{
	return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* ---- blocks of 32 ------------------------------------------------------------------ */

/* The integer dot of block i of each type, as 8 int32 lanes. */
static inline __m256i q4_1_block(const struct blk_q4_1 *b, const __m256i yq)
{
	return sum4(_mm256_maddubs_epi16(nibbles(b->qs), yq));
}

static inline __m256i q5_block(const uint8_t *qs, const uint8_t *qh, const __m256i yq)
{
	return sum4(_mm256_maddubs_epi16(_mm256_or_si256(nibbles(qs), bit5_bytes(qh)), yq));
}

/* Rows of blocks of 32: acc += dot * d dy per block, two accumulators (even
 * and odd blocks) so one block need not wait for the previous one's FMA;
 * OFFSET(i) adds what the block's offset contributes (a float). */
#define ROWS32(NAME, BLK, DOT, OFFSET)                                                                   \
	void NAME(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)                  \
	{                                                                                                \
		const struct blk_q8_32 *y = a;                                                           \
		int64_t nb = n / 32;                                                                     \
		for (int r = 0; r < nr; r++) {                                                           \
			const BLK *b = row_at(w, ws, r);                                                 \
			__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                  \
			float off = 0.0f;                                                                \
			int64_t i = 0;                                                                   \
			for (; i + 1 < nb; i += 2) {                                                     \
				__m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs);               \
				__m256i y1 = _mm256_loadu_si256((const __m256i *)y[i + 1].qs);           \
				acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT(i, y0)),                   \
						       _mm256_set1_ps(f16(b[i].d) * y[i].d), acc0);      \
				acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT(i + 1, y1)),               \
						       _mm256_set1_ps(f16(b[i + 1].d) * y[i + 1].d), acc1); \
				off += OFFSET(i) + OFFSET(i + 1);                                        \
			}                                                                                \
			if (i < nb) {                                                                    \
				__m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs);               \
				acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT(i, y0)),                   \
						       _mm256_set1_ps(f16(b[i].d) * y[i].d), acc0);      \
				off += OFFSET(i);                                                        \
			}                                                                                \
			s[r] = hsum_ps(_mm256_add_ps(acc0, acc1)) + off;                                 \
		}                                                                                        \
	}

/* q4_1 / q5_1: + m s per block. */
#define DOT_Q4_1(i, yq) q4_1_block(&b[i], yq)
#define DOT_Q5_1(i, yq) q5_block(b[i].qs, b[i].qh, yq)
#define OFF_M(i) (f16(b[i].m) * y[i].s)
ROWS32(dot_rows_q4_1_avx2, struct blk_q4_1, DOT_Q4_1, OFF_M)
ROWS32(dot_rows_q5_1_avx2, struct blk_q5_1, DOT_Q5_1, OFF_M)

/* q5_0: the -16 comes off in int32 as 16 sum(y) per lane group. */
static inline __m256i q5_0_block(const struct blk_q5_0 *b, const __m256i yq)
{
	__m256i y16 = sum4(_mm256_maddubs_epi16(_mm256_set1_epi8(16), yq));

	return _mm256_sub_epi32(q5_block(b->qs, b->qh, yq), y16);
}

#define DOT_Q5_0(i, yq) q5_0_block(&b[i], yq)
#define DOT_IQ4_NL(i, yq) sum4(maddss(iq4_lookup(nibbles(b[i].qs)), yq))
#define OFF_NONE(i) 0.0f
ROWS32(dot_rows_q5_0_avx2, struct blk_q5_0, DOT_Q5_0, OFF_NONE)
ROWS32(dot_rows_iq4_nl_avx2, struct blk_iq4_nl, DOT_IQ4_NL, OFF_NONE)

/* ---- blocks of 256 ------------------------------------------------------------------ */

/* From 16 bytes of scales S (in both lanes): the scale of group 2t (lane 0)
 * and 2t + 1 (lane 1) as int16 in every lane position, sign-extended (each
 * byte goes to the high half of its int16, then an arithmetic shift). */
static inline __m256i scale_pair(__m256i S, int t)
{
	__m256i idx = _mm256_set_m128i(_mm_set1_epi16((short)((2 * t + 1) << 8 | 0x80)),
				       _mm_set1_epi16((short)((2 * t) << 8 | 0x80)));

	return _mm256_srai_epi16(_mm256_shuffle_epi8(S, idx), 8);
}

/* q2_k: per group of 32 (h, g) the 2-bit field g of the 32 bytes qs[32h..];
 * its halves have scales 8h + 2g and 8h + 2g + 1. The mins times the 16
 * activation sums in one vpmaddwd. */
void dot_rows_q2_k_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m256i m3 = _mm256_set1_epi8(3);
	const __m128i m15 = _mm_set1_epi8(15);

	for (int r = 0; r < nr; r++) {
		const struct blk_q2_k *b = row_at(w, ws, r);
		__m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m256i S = _mm256_broadcastsi128_si256(_mm_and_si128(_mm_loadu_si128((const __m128i *)b[i].scales), m15));
			__m256i msum = q2_k_min_sums(b[i].scales, y[i].bsums);
			__m256i isum = _mm256_setzero_si256();

			for (int h = 0; h < 2; h++) {
				__m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h));

				for (int g = 0; g < 4; g++) {
					__m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * g), m3);
					__m256i yq = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * g));

					isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(v, yq),
											scale_pair(S, 4 * h + g)));
				}
			}
			acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(y[i].d * f16(b[i].d)), acc);
			accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(y[i].d * f16(b[i].dmin)), accm);
		}
		s[r] = hsum_ps(_mm256_sub_ps(acc, accm));
	}
}

/* The hmask bit j (0..7) of every byte, moved to bit 2 (a 4 where it is
 * set): 16-bit shifts keep each byte's bits in place for j <= 7. */
static inline __m256i q3_k_bit4(__m256i hm, int j)
{
	__m256i x = j >= 2 ? _mm256_srli_epi16(hm, j - 2) : _mm256_slli_epi16(hm, 2 - j);

	return _mm256_and_si256(x, _mm256_set1_epi8(4));
}

/* q3_k: value = field - 4 where the hmask bit is clear, i.e. (field | 4 h) -
 * 4: vpmaddubsw of the unsigned 0..7, and the 4 comes off once per block as
 * 4 times the scales against the 16-element activation sums. */
void dot_rows_q3_k_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m256i m3 = _mm256_set1_epi8(3);

	for (int r = 0; r < nr; r++) {
		const struct blk_q3_k *b = row_at(w, ws, r);
		__m256 acc = _mm256_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m128i sc = q3_k_scales(b[i].scales);
			__m256i S = _mm256_broadcastsi128_si256(sc), isum = _mm256_setzero_si256();
			__m256i hm = _mm256_loadu_si256((const __m256i *)b[i].hmask);
			__m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc),
							_mm256_loadu_si256((const __m256i *)y[i].bsums));

			for (int h = 0; h < 2; h++) {
				__m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h));

				for (int g = 0; g < 4; g++) {
					__m256i v = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * g), m3),
								    q3_k_bit4(hm, 4 * h + g));
					__m256i yq = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * g));

					isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(v, yq),
											scale_pair(S, 4 * h + g)));
				}
			}
			isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 2));
			acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(y[i].d * f16(b[i].d)), acc);
		}
		s[r] = hsum_ps(acc);
	}
}

/* iq4_xs: per sub-block of 32, the iq4 values times y, times its scale. */
void dot_rows_iq4_xs_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;

	for (int r = 0; r < nr; r++) {
		const struct blk_iq4_xs *b = row_at(w, ws, r);
		__m256 acc = _mm256_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m256i isum = _mm256_setzero_si256();

			for (int j = 0; j < 8; j++) {
				int ls = iq4_xs_scale(&b[i], j);
				__m256i yq = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * j));
				__m256i p = maddss(iq4_lookup(nibbles(b[i].qs + 16 * j)), yq);

				isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_set1_epi16((short)(ls - 32))));
			}
			acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(y[i].d * f16(b[i].d)), acc);
		}
		s[r] = hsum_ps(acc);
	}
}

/* ---- panels (ops_impl.h): the rows' values as bytes, 8 rows per block ------------- */

/* Panel blocks of 32 for the blocks of 32: row r's values U (0..15, 0..31 or
 * the signed iq4 values), its scale and its offset, as decode_* in
 * quant_more.c gives them. Rows past nr are zero. */
#define PACK32(NAME, BLK, U, M)                                                                   \
	void NAME(const void *w, size_t ws, int nr, int64_t n, void *panel)                       \
	{                                                                                         \
		uint8_t *pb = panel;                                                              \
		for (int64_t i = 0; i < n / 32; i++, pb += OPS_PANEL_BLOCK) {                     \
			__m256i u[OPS_PANEL_ROWS];                                                \
			float d[OPS_PANEL_ROWS], m[OPS_PANEL_ROWS];                               \
			for (int r = 0; r < OPS_PANEL_ROWS; r++) {                                \
				const BLK *x = (const BLK *)row_at(w, ws, r < nr ? r : 0) + i;    \
				u[r] = r < nr ? U : _mm256_setzero_si256();                       \
				d[r] = r < nr ? f16(x->d) : 0.0f;                                 \
				m[r] = r < nr ? M : 0.0f;                                         \
			}                                                                         \
			panel_store(pb, u, _mm256_loadu_ps(d), _mm256_loadu_ps(m));               \
		}                                                                                 \
	}

PACK32(pack_q4_1_avx2, struct blk_q4_1, nibbles(x->qs), f16(x->m))
PACK32(pack_q5_0_avx2, struct blk_q5_0, _mm256_or_si256(nibbles(x->qs), bit5_bytes(x->qh)), -16.0f * d[r])
PACK32(pack_q5_1_avx2, struct blk_q5_1, _mm256_or_si256(nibbles(x->qs), bit5_bytes(x->qh)), f16(x->m))
PACK32(pack_iq4_nl_avx2, struct blk_iq4_nl, iq4_lookup(nibbles(x->qs)), 0.0f)

/* iq4_xs: panel block i is sub-block i % 8 of super-block i / 8, its scale
 * d (ls - 32). */
void pack_iq4_xs_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel)
{
	uint8_t *pb = panel;

	for (int64_t i = 0; i < n / 32; i++, pb += OPS_PANEL_BLOCK) {
		__m256i u[OPS_PANEL_ROWS];
		float d[OPS_PANEL_ROWS];
		int j = (int)(i % 8);

		for (int r = 0; r < OPS_PANEL_ROWS; r++) {
			const struct blk_iq4_xs *x = (const struct blk_iq4_xs *)row_at(w, ws, r < nr ? r : 0) + i / 8;
			int ls = iq4_xs_scale(x, j);

			u[r] = r < nr ? iq4_lookup(nibbles(x->qs + 16 * j)) : _mm256_setzero_si256();
			d[r] = r < nr ? f16(x->d) * (float)(ls - 32) : 0.0f;
		}
		panel_store(pb, u, _mm256_loadu_ps(d), _mm256_setzero_ps());
	}
}

/* ---- q4_1, q5_0 and q5_1 in the interleaved layout (ops_impl.h) ------------------- */

/* Part g (0..3) of a q4_0-like group block's nibbles at nib: elements
 * 8g .. 8g + 3 (lo) and 8g + 4 .. 8g + 7 (hi) of the 8 rows, 4 a lane, with
 * the fifth bits of the block's masks at fifth (NULL: none) added, or
 * (iq4) looked up to the iq4 values. */
static inline void x8_part(const uint8_t *nib, const uint8_t *fifth, int g, int iq4, __m256i *lo, __m256i *hi)
{
	const __m256i m15 = _mm256_set1_epi8(15);
	__m256i q = _mm256_loadu_si256((const __m256i *)(nib + 32 * g));

	*lo = _mm256_and_si256(q, m15);
	*hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m15);
	if (fifth) { /* bits 2g and 2g + 1 of each byte to bit 4, as 16 */
		const __m256i f = _mm256_loadu_si256((const __m256i *)fifth), c16 = _mm256_set1_epi8(16);

		*lo = _mm256_or_si256(*lo, _mm256_and_si256(g < 2 ? _mm256_slli_epi16(f, 4 - 2 * g) : _mm256_srli_epi16(f, 2 * g - 4), c16));
		*hi = _mm256_or_si256(*hi, _mm256_and_si256(g < 2 ? _mm256_slli_epi16(f, 3 - 2 * g) : _mm256_srli_epi16(f, 2 * g - 3), c16));
	}
	if (iq4) {
		*lo = iq4_lookup(*lo);
		*hi = iq4_lookup(*hi);
	}
}

/* Groups of 8 rows of the blocks of 32 with nibbles (q4_0, q4_1, q5_0, q5_1,
 * iq4_nl): per block, the 8 rows' scales in one load and each part's
 * nibbles in two registers of 4 elements x 8 rows, each row's products in
 * its own int32 lane; the fifth bits come in from their 32-bit masks. The
 * int16 sums go to int32 after the block (4 x 2 x 2 x 15 x 127 < 2^15), with
 * fifth bits after every two parts (4 x 2 x 31 x 127 < 2^15). The offset,
 * m s (q4_1, q5_1) or -8 d s (q4_0) or -16 d s (q5_0), is a second pass
 * over the blocks' scales (the registers are full in the first). iq4_nl (q4_0's
 * bytes, iq4 set): the codes looked up to their values and multiplied as
 * |w| times y with w's sign, each int16 pair up to 2 x 127 x 127, so to
 * int32 after every part; no offset. */
static inline __attribute__((always_inline)) void x8n_cols(int64_t n, const uint8_t *grp, const void *a, size_t as,
							   int nc, float *s, size_t ss, int min, int five, int iq4)
{
	const __m256i ones = _mm256_set1_epi16(1);
	const size_t bs = OPS_X8N_NIB(min, five) + 128;
	const int run = iq4 ? 1 : five ? 2 : 4; /* parts per int16 run */
	const struct blk_q8_32 *y[OPS_PANEL_COLS];
	__m256 acc[OPS_PANEL_COLS], corr[OPS_PANEL_COLS];
	const uint8_t *blk = grp;

	for (int c = 0; c < nc; c++) {
		y[c] = (const void *)((const char *)a + (size_t)c * as);
		acc[c] = _mm256_setzero_ps();
		corr[c] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < n / 32; b++, blk += bs) {
		__m256i isum[OPS_PANEL_COLS];
		__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));

		for (int c = 0; c < nc; c++)
			isum[c] = _mm256_setzero_si256();
		for (int g0 = 0; g0 < 4; g0 += run) {
			__m256i s16[OPS_PANEL_COLS];

			for (int c = 0; c < nc; c++)
				s16[c] = _mm256_setzero_si256();
			for (int g = g0; g < g0 + run; g++) {
				__m256i lo, hi;

				x8_part(blk + OPS_X8N_NIB(min, five), five ? blk + OPS_X8N_FIFTH(min) : NULL, g, iq4, &lo, &hi);
				for (int c = 0; c < nc; c++) {
					__m256i ylo = bcast4(y[c][b].qs + 8 * g), yhi = bcast4(y[c][b].qs + 8 * g + 4);

					if (iq4) {
						s16[c] = _mm256_add_epi32(s16[c], sum4(maddss(lo, ylo)));
						s16[c] = _mm256_add_epi32(s16[c], sum4(maddss(hi, yhi)));
					} else {
						s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(lo, ylo));
						s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(hi, yhi));
					}
				}
			}
			for (int c = 0; c < nc; c++)
				isum[c] = _mm256_add_epi32(isum[c], iq4 ? s16[c] : _mm256_madd_epi16(s16[c], ones));
		}
		for (int c = 0; c < nc; c++)
			acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, _mm256_set1_ps(y[c][b].d)), acc[c]);
	}
	blk = grp;
	for (int64_t b = 0; !iq4 && b < n / 32; b++, blk += bs) {
		__m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + (min ? 16 : 0))));

		for (int c = 0; c < nc; c++)
			corr[c] = _mm256_fmadd_ps(m, _mm256_set1_ps(y[c][b].s), corr[c]);
	}
	for (int c = 0; c < nc; c++)
		_mm256_storeu_ps(s + (size_t)c * ss,
				 min || iq4 ? _mm256_add_ps(acc[c], corr[c])
					    : _mm256_fnmadd_ps(_mm256_set1_ps(five ? 16.0f : 8.0f), corr[c], acc[c]));
}

/* Up to 4 columns per pass: more would not stay in the 16 registers. */
#define X8N_GEMV(NAME, MIN, FIVE, IQ4)                                                                      \
	void NAME(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)          \
	{                                                                                                  \
		for (; nc > 0; nc -= 4, a = (const char *)a + 4 * as, s += 4 * ss)                         \
			switch (nc) {                                                                      \
			case 1: x8n_cols(n, group, a, as, 1, s, ss, MIN, FIVE, IQ4); break;                \
			case 2: x8n_cols(n, group, a, as, 2, s, ss, MIN, FIVE, IQ4); break;                \
			case 3: x8n_cols(n, group, a, as, 3, s, ss, MIN, FIVE, IQ4); break;                \
			default: x8n_cols(n, group, a, as, 4, s, ss, MIN, FIVE, IQ4); break;               \
			}                                                                                  \
	}

X8N_GEMV(gemv_q4_0_x8_avx2, 0, 0, 0)
X8N_GEMV(gemv_q4_1_x8_avx2, 1, 0, 0)
X8N_GEMV(gemv_q5_0_x8_avx2, 0, 1, 0)
X8N_GEMV(gemv_q5_1_x8_avx2, 1, 1, 0)
X8N_GEMV(gemv_iq4_nl_x8_avx2, 0, 0, 1)

/* A group's blocks are a panel's already, but for the fifth bits (or iq4's
 * values) and the split of each part's nibbles into two groups of 4
 * columns; pb's d and m are the caller's. */
static inline void pack_x8_parts(const uint8_t *nib, const uint8_t *fifth, int iq4, uint8_t *pb)
{
	for (int g = 0; g < 4; g++) {
		__m256i lo, hi;

		x8_part(nib, fifth, g, iq4, &lo, &hi);
		_mm256_storeu_si256((__m256i *)(pb + 64 * g), lo);
		_mm256_storeu_si256((__m256i *)(pb + 64 * g + 32), hi);
	}
}

static inline __attribute__((always_inline)) void pack_x8n(const void *group, int64_t n, void *panel, int min, int five,
							   int iq4)
{
	const uint8_t *blk = group;
	uint8_t *pb = panel;

	for (int64_t b = 0; b < n / 32; b++, blk += OPS_X8N_NIB(min, five) + 128, pb += OPS_PANEL_BLOCK) {
		__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));

		pack_x8_parts(blk + OPS_X8N_NIB(min, five), five ? blk + OPS_X8N_FIFTH(min) : NULL, iq4, pb);
		_mm256_storeu_ps((float *)(pb + 256), d);
		_mm256_storeu_ps((float *)(pb + 288), min   ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16)))
							  : iq4 ? _mm256_setzero_ps()
								: _mm256_mul_ps(d, _mm256_set1_ps(five ? -16.0f : -8.0f)));
	}
}

void pack_q4_0_x8_avx2(const void *group, int64_t n, void *panel)
{
	pack_x8n(group, n, panel, 0, 0, 0);
}

void pack_q4_1_x8_avx2(const void *group, int64_t n, void *panel)
{
	pack_x8n(group, n, panel, 1, 0, 0);
}

void pack_q5_0_x8_avx2(const void *group, int64_t n, void *panel)
{
	pack_x8n(group, n, panel, 0, 1, 0);
}

void pack_q5_1_x8_avx2(const void *group, int64_t n, void *panel)
{
	pack_x8n(group, n, panel, 1, 1, 0);
}

void pack_iq4_nl_x8_avx2(const void *group, int64_t n, void *panel)
{
	pack_x8n(group, n, panel, 0, 0, 1);
}

/* ---- iq4_nl and iq4_xs in the interleaved layout ----------------------------------- */

/* iq4_xs groups, one column: as iq4_nl's per sub-block, the int16 pair sums
 * times the rows' scales through vpmaddwd (the scale of row r in both
 * halves of lane r), as the row kernel does. */
static void gemv_iq4_xs_x8_col(int64_t n, const void *group, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m256i low16 = _mm256_set1_epi32(0xffff);
	const uint8_t *sb = group;
	__m256 acc = _mm256_setzero_ps();

	for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_IQ4_XS_SB) {
		int8_t sc[64];
		__m256i isum = _mm256_setzero_si256();

		iq4_xs_x8_scales(sb, sc);
		for (int j = 0; j < 8; j++) {
			const uint8_t *blk = sb + 64 + 128 * j;
			__m256i s32 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * j)));
			__m256i s16 = _mm256_or_si256(_mm256_and_si256(s32, low16), _mm256_slli_epi32(s32, 16));

			for (int g = 0; g < 4; g++) {
				__m256i lo, hi;

				x8_part(blk, NULL, g, 1, &lo, &hi);
				isum = _mm256_add_epi32(isum, _mm256_madd_epi16(maddss(lo, bcast4(y[b].qs + 32 * j + 8 * g)), s16));
				isum = _mm256_add_epi32(isum, _mm256_madd_epi16(maddss(hi, bcast4(y[b].qs + 32 * j + 8 * g + 4)), s16));
			}
		}
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
				      _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sb)), _mm256_set1_ps(y[b].d)), acc);
	}
	_mm256_storeu_ps(s, acc);
}

OPS_X8_EACH_COL(gemv_iq4_xs_x8_avx2, gemv_iq4_xs_x8_col)

/* iq4_xs's panels: each sub-block's values, its scale in d. */
void pack_iq4_xs_x8_avx2(const void *group, int64_t n, void *panel)
{
	const uint8_t *sb = group;
	uint8_t *pb = panel;

	for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_IQ4_XS_SB) {
		int8_t sc[64];
		__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sb));

		iq4_xs_x8_scales(sb, sc);
		for (int j = 0; j < 8; j++, pb += OPS_PANEL_BLOCK) {
			__m256 dl = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * j)))));

			pack_x8_parts(sb + 64 + 128 * j, NULL, 1, pb);
			_mm256_storeu_ps((float *)(pb + 256), dl);
			_mm256_storeu_ps((float *)(pb + 288), _mm256_setzero_ps());
		}
	}
}

/* ---- q2_k and q3_k in the interleaved layout ---------------------------------------- */

/* q2_k / q3_k groups, one column, a 16-group at a time: half h of a pair's
 * 64 bytes is group 2P + h, one row an int32 lane; the 4 registers of 2-bit
 * fields (q3_k: + 4 where the third bit is set) against the activations
 * through vpmaddubsw (at most 4 x 2 x 7 x 127 per int16), then vpmaddwd
 * with the rows' scales in both halves of each lane. Offsets (q3_k's 4,
 * q2_k's mins) through the 16-element activation sums, as the 512-bit
 * version. */
static inline __attribute__((always_inline)) void gemv_k2_x8_col_avx2(int64_t n, const void *group, const void *a,
								      float *s, int three)
{
	const struct blk_q8_256 *y = a;
	const __m256i m3 = _mm256_set1_epi8(3), low16 = _mm256_set1_epi32(0xffff);
	const uint8_t *sb = group;
	const size_t sbs = three ? OPS_X8_Q3_K_SB : OPS_X8_Q2_K_SB;
	__m256 acc = _mm256_setzero_ps();

	for (int64_t b = 0; b < n / QK_K; b++, sb += sbs) {
		int8_t sc[128];
		__m256i isum = _mm256_setzero_si256(), msum = _mm256_setzero_si256();

		if (three) {
			const __m256i m15 = _mm256_set1_epi8(15), b32 = _mm256_set1_epi8(32);
			__m256i h = _mm256_loadu_si256((const __m256i *)(sb + 80));

			for (int q = 0; q < 4; q++) {
				/* v = 32q .. 32q + 31: nibble q / 2 of bytes 32 (q % 2) .., bits 2q of h */
				__m256i lo = _mm256_loadu_si256((const __m256i *)(sb + 16 + 32 * (q % 2)));
				__m256i nib = _mm256_and_si256(q >= 2 ? _mm256_srli_epi16(lo, 4) : lo, m15);
				__m256i top = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * q)), m3);

				_mm256_storeu_si256((__m256i *)(sc + 32 * q),
						    _mm256_sub_epi8(_mm256_or_si256(nib, _mm256_slli_epi16(top, 4)), b32));
			}
		}
		for (int G = 0; G < 16; G++) {
			const uint8_t *pair = sb + (three ? 112 + 96 * (G / 2) : 160 + 64 * (G / 2));
			__m256i x = _mm256_loadu_si256((const __m256i *)(pair + 32 * (G % 2)));
			__m256i p16 = _mm256_setzero_si256(), s32, bs = _mm256_set1_epi32(y[b].bsums[G]), h3 = x;

			if (three) { /* third bits of this half's value bytes, in bits 0-3 */
				h3 = _mm256_loadu_si256((const __m256i *)(pair + 64));
				if (G % 2)
					h3 = _mm256_srli_epi16(h3, 4);
			}
			for (int c = 0; c < 4; c++) {
				__m256i v = _mm256_and_si256(_mm256_srli_epi16(x, 2 * c), m3);

				if (three) /* bit c to bit 2, as 4 */
					v = _mm256_or_si256(v, _mm256_and_si256(c < 3 ? _mm256_slli_epi16(h3, 2 - c) : _mm256_srli_epi16(h3, 1),
										_mm256_set1_epi8(4)));
				p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(v, bcast4(y[b].qs + 16 * G + 4 * c)));
			}
			if (three) {
				s32 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * G)));
				msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(s32, bs));
			} else {
				__m256i sm = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sb + 32 + 8 * G)));

				s32 = _mm256_and_si256(sm, _mm256_set1_epi32(15));
				msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(_mm256_srli_epi32(sm, 4), bs));
			}
			isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16, _mm256_or_si256(_mm256_and_si256(s32, low16),
										     _mm256_slli_epi32(s32, 16))));
		}
		acc = k2_x8_accum(acc, sb, y[b].d, isum, msum, three);
	}
	_mm256_storeu_ps(s, acc);
}

static void gemv_q2_k_x8_col(int64_t n, const void *group, const void *a, float *s)
{
	gemv_k2_x8_col_avx2(n, group, a, s, 0);
}

static void gemv_q3_k_x8_col(int64_t n, const void *group, const void *a, float *s)
{
	gemv_k2_x8_col_avx2(n, group, a, s, 1);
}

OPS_X8_EACH_COL(gemv_q2_k_x8_avx2, gemv_q2_k_x8_col)
OPS_X8_EACH_COL(gemv_q3_k_x8_avx2, gemv_q3_k_x8_col)
