/* quant_avx512.c - the decode kernels on 512-bit registers (AVX512F/BW/VL and
 * AVX512-VNNI): the k-quant row dots and the interleaved q4_0 / q8_0 groups.
 *
 * Decoding one token reads every weight once, so these kernels only have to
 * turn bytes into dot products faster than memory delivers them: at two
 * threads on a 75 GB/s machine, about 37 GB/s per core. One 512-bit register
 * holds 64 weights, half the 4-bit values of a q4_k block:
 *
 *   q4_k/q5_k  the 32 bytes of a 64-weight chunk are loaded into both halves
 *              of a register and shifted by 0 in the low half and by 4 in the
 *              high half (vpsrlvw), so the register holds sub-blocks 2c and
 *              2c+1 in element order and meets the activations as they are;
 *              q5_k's fifth bits are set under a mask (vptestmb).
 *   q6_k       ql's 64 bytes give groups (0, 1) and (2, 3) of a half, with
 *              qh's bits moved into place by a variable shift.
 *   q3_k/q2_k  a half's 32 bytes in both halves of a register, shifted to
 *              the 2-bit fields of groups (0, 1) and (2, 3); q3_k's hmask
 *              bits add 4 under a mask.
 *
 * Unsigned values times int8 activations go through vpmaddubsw (pairs, no
 * saturation at 0..63), and vpdpwssd multiplies the pairs by the sub-block
 * scales and adds them up in one instruction; the scales are spread over the
 * lanes by vpshufb from one 128-bit lane broadcast to all four. Offsets and
 * minimums come off through the activations' 16-element sums as in the AVX2
 * kernels. Results agree with the references up to the float accumulation
 * (the tests compare them).
 *
 * The k-quant groups (ops_impl.h) hold 8 rows of 2 sub-blocks in a 64-byte
 * chunk, lane 8p + r of a register holding 4 values of sub-block p of row r:
 * vpdpbusd against activations put in place by vpermd, and vpmulld by the
 * pair's scales widened in the lanes' order (gemv_k_x8_col below).
 *
 * The interleaved q4_0 / q8_0 groups take two parts per register: for q4_0
 * the activation dwords meet the nibbles through vpermd, and vpdpbusd adds
 * the products into each row's int32 lane; q8_0's signed weights are made
 * unsigned by flipping the top bit (w + 128), and the 128 sum(y) comes off
 * per block. */
#include <immintrin.h>
#include <string.h>

#include "ops/arch/x86/quant_x86.h"
#include "ops/arch/x86/x86.h"

static inline float hsum512(__m512 v)
{
	return _mm512_reduce_add_ps(v);
}

/* The 8 scales and 8 mins of a q4_k/q5_k block as bytes: sc in the low 8,
 * m in the high 8 (ops_k_scale_min, four at a time, in vector registers).
 * With the scale bytes as dwords u0, u1, u2, the result's dwords are
 *   u0 & 0x3f.., (u2 & 0x0f..) | (u0 >> 6 & 0x03..) << 4,
 *   u1 & 0x3f.., (u2 >> 4 & 0x0f..) | (u1 >> 6 & 0x03..) << 4.
 * Reads 16 bytes from s (the block goes on past its 12 scale bytes). */
static inline __m128i k_scales(const uint8_t *s)
{
	__m128i u = _mm_loadu_si128((const __m128i *)s);
	__m128i a = _mm_shuffle_epi32(u, 0x98); /* u0 u2 u1 u2 */
	__m128i b = _mm_shuffle_epi32(u, 0x50); /* u0 u0 u1 u1 */

	a = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
			  _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
	b = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
	return _mm_or_si128(a, b);
}

/* vpshufb controls that give, from a 128-bit lane of bytes b[0..15], int16
 * words b[i] (zero high byte): lanes 0 and 1 (words 0..15) get b[lo], lanes
 * 2 and 3 b[hi]. */
static inline __m512i spread2(int lo, int hi)
{
	const long long wl = 0x8000800080008000ll | (long long)lo * 0x0001000100010001ll;
	const long long wh = 0x8000800080008000ll | (long long)hi * 0x0001000100010001ll;

	return _mm512_set_epi64(wh, wh, wh, wh, wl, wl, wl, wl);
}

/* The same for int16 words w[0..7] of a lane: lane L gets word base + L. */
static inline __m512i spread4w(int base)
{
	long long q[4];

	for (int l = 0; l < 4; l++) {
		long long b = 2 * (base + l);

		q[l] = (b | (b + 1) << 8) * 0x0001000100010001ll;
	}
	return _mm512_set_epi64(q[3], q[3], q[2], q[2], q[1], q[1], q[0], q[0]);
}

/* 32 bytes at p in both halves of a register; the high half shifted right
 * by 4 bits: then & 15 gives the low nibbles, then the high nibbles. */
static inline __m512i nib_pair(const uint8_t *p, __m512i shift)
{
	__m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));

	return _mm512_and_si512(_mm512_srlv_epi16(q, shift), _mm512_set1_epi8(15));
}

/* The shared end of a q4_k/q5_k block: v[c] holds the values of sub-blocks
 * 2c and 2c+1; adds d dy sum_j sc_j sum(q y) to acc and dmin dy sum_j m_j
 * sum(y) to accm. */
static inline __attribute__((always_inline)) void k_affine_512(const __m512i v[4], const uint8_t *scales,
								const uint16_t *dd, const struct blk_q8_256 *y,
								__m512 *acc, __m256 *accm)
{
	uint32_t dbits;
	__m128 dm;
	__m128i sm = k_scales(scales);
	__m512i sb = _mm512_broadcast_i32x4(sm);
	__m256i mdup = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm)); /* m0 m0 m1 m1 ... */
	__m256i mins = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), mdup);
	__m512i isum = _mm512_setzero_si512();

	for (int c = 0; c < 4; c++) {
		__m512i p = _mm512_maddubs_epi16(v[c], _mm512_loadu_si512((const void *)(y->qs + 64 * c)));

		isum = _mm512_dpwssd_epi32(isum, p, _mm512_shuffle_epi8(sb, spread2(2 * c, 2 * c + 1)));
	}
	memcpy(&dbits, dd, sizeof dbits); /* d, dmin */
	dm = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dbits)), _mm_set1_ps(y->d));
	*acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_broadcastss_ps(dm), *acc);
	*accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_permutexvar_ps(_mm256_set1_epi32(1), _mm256_castps128_ps256(dm)), *accm);
}

static inline float hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

void dot_rows_q4_k_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);

	for (int r = 0; r < nr; r++) {
		const struct blk_q4_k *b = (const void *)((const char *)w + (size_t)r * ws);
		__m512 acc = _mm512_setzero_ps();
		__m256 accm = _mm256_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m512i v[4];

			for (int c = 0; c < 4; c++)
				v[c] = nib_pair(b[i].qs + 32 * c, shift);
			k_affine_512(v, b[i].scales, &b[i].d, &y[i], &acc, &accm);
		}
		s[r] = hsum512(acc) - hsum256(accm);
	}
}

void dot_rows_q5_k_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
	const __m512i m16 = _mm512_set1_epi8(16);
	__m512i bit[4];

	/* sub-block j's fifth bits are bit j of qh[0..31] */
	for (int c = 0; c < 4; c++)
		bit[c] = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << 2 * c)), _mm256_set1_epi8((char)(1 << (2 * c + 1))), 1);
	for (int r = 0; r < nr; r++) {
		const struct blk_q5_k *b = (const void *)((const char *)w + (size_t)r * ws);
		__m512 acc = _mm512_setzero_ps();
		__m256 accm = _mm256_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m512i v[4], qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[i].qh));

			for (int c = 0; c < 4; c++) {
				v[c] = nib_pair(b[i].qs + 32 * c, shift);
				v[c] = _mm512_mask_add_epi8(v[c], _mm512_test_epi8_mask(qh, bit[c]), v[c], m16);
			}
			k_affine_512(v, b[i].scales, &b[i].d, &y[i], &acc, &accm);
		}
		s[r] = hsum512(acc) - hsum256(accm);
	}
}

/* q6_k: per half h, register 0 holds groups 0, 1 (elements 128h + 0..63) and
 * register 1 groups 2, 3; sum_k sc_k sum(q y) with q in 0..63, less
 * 32 sum_k sc_k bsum_k. */
void dot_rows_q6_k_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m512i m15 = _mm512_set1_epi8(15), m48 = _mm512_set1_epi8(48);
	/* qh bits 2g, 2g+1 to bits 4, 5: left 4 / 2 for groups 0 / 1, right 0 / 2
	 * for groups 2 / 3 */
	const __m512i shl01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
	const __m512i shr23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
	const __m512i sp01 = spread4w(0), sp23 = spread4w(4);

	for (int r = 0; r < nr; r++) {
		const struct blk_q6_k *b = (const void *)((const char *)w + (size_t)r * ws);
		__m512 acc = _mm512_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[i].scales));
			__m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), sc16), 5);
			__m512i isum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(corr));

			for (int h = 0; h < 2; h++) {
				__m512i ql = _mm512_loadu_si512((const void *)(b[i].ql + 64 * h));
				__m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[i].qh + 32 * h)));
				__m512i sb = _mm512_broadcast_i32x4(h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16));
				__m512i v01 = _mm512_or_si512(_mm512_and_si512(ql, m15), _mm512_and_si512(_mm512_sllv_epi16(qh, shl01), m48));
				__m512i v23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m15),
							      _mm512_and_si512(_mm512_srlv_epi16(qh, shr23), m48));
				__m512i p01 = _mm512_maddubs_epi16(v01, _mm512_loadu_si512((const void *)(y[i].qs + 128 * h)));
				__m512i p23 = _mm512_maddubs_epi16(v23, _mm512_loadu_si512((const void *)(y[i].qs + 128 * h + 64)));

				isum = _mm512_dpwssd_epi32(isum, p01, _mm512_shuffle_epi8(sb, sp01));
				isum = _mm512_dpwssd_epi32(isum, p23, _mm512_shuffle_epi8(sb, sp23));
			}
			acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(f16(b[i].d) * y[i].d), acc);
		}
		s[r] = hsum512(acc);
	}
}

/* q3_k: as q6_k, two groups of 32 per register (groups 2p, 2p+1 of half h:
 * 2-bit fields at shifts 4p and 4p + 2), the hmask bit 4h + g adding 4
 * under a mask; value + 4 times y, less 4 sum_k sc_k bsum_k. */
void dot_rows_q3_k_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
	const __m512i sh[2] = { _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1),
				_mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1) };
	const __m512i sp[2] = { spread4w(0), spread4w(4) };
	__m512i hb[2][2];

	for (int h = 0; h < 2; h++)
		for (int p = 0; p < 2; p++)
			hb[h][p] = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (4 * h + 2 * p))),
						      _mm256_set1_epi8((char)(1 << (4 * h + 2 * p + 1))), 1);
	for (int r = 0; r < nr; r++) {
		const struct blk_q3_k *b = (const void *)((const char *)w + (size_t)r * ws);
		__m512 acc = _mm512_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m256i sc16 = _mm256_cvtepi8_epi16(q3_k_scales(b[i].scales));
			__m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), sc16), 2);
			__m512i isum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(corr));
			__m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[i].hmask));

			for (int h = 0; h < 2; h++) {
				__m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h)));
				__m512i sb = _mm512_broadcast_i32x4(h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16));

				for (int p = 0; p < 2; p++) {
					__m512i v = _mm512_and_si512(_mm512_srlv_epi16(q, sh[p]), m3);
					__m512i prod;

					v = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(hm, hb[h][p]), v, four);
					prod = _mm512_maddubs_epi16(v, _mm512_loadu_si512((const void *)(y[i].qs + 128 * h + 64 * p)));
					isum = _mm512_dpwssd_epi32(isum, prod, _mm512_shuffle_epi8(sb, sp[p]));
				}
			}
			acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(f16(b[i].d) * y[i].d), acc);
		}
		s[r] = hsum512(acc);
	}
}

/* q2_k: the same walk over the 2-bit fields with the low nibbles of the
 * scale bytes as scales; the high nibbles (mins) times the 16-element sums
 * go to a second accumulator with dmin. */
void dot_rows_q2_k_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m512i m3 = _mm512_set1_epi8(3);
	const __m128i m15 = _mm_set1_epi8(15);
	const __m512i sh[2] = { _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1),
				_mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1) };
	const __m512i sp[2] = { spread4w(0), spread4w(4) };

	for (int r = 0; r < nr; r++) {
		const struct blk_q2_k *b = (const void *)((const char *)w + (size_t)r * ws);
		__m512 acc = _mm512_setzero_ps();
		__m256 accm = _mm256_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_loadu_si128((const __m128i *)b[i].scales), m15));
			__m256i msum = q2_k_min_sums(b[i].scales, y[i].bsums);
			__m512i isum = _mm512_setzero_si512();

			for (int h = 0; h < 2; h++) {
				__m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h)));
				__m512i sb = _mm512_broadcast_i32x4(h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16));

				for (int p = 0; p < 2; p++) {
					__m512i v = _mm512_and_si512(_mm512_srlv_epi16(q, sh[p]), m3);
					__m512i prod = _mm512_maddubs_epi16(v, _mm512_loadu_si512((const void *)(y[i].qs + 128 * h + 64 * p)));

					isum = _mm512_dpwssd_epi32(isum, prod, _mm512_shuffle_epi8(sb, sp[p]));
				}
			}
			acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(f16(b[i].d) * y[i].d), acc);
			accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(f16(b[i].dmin) * y[i].d), accm);
		}
		s[r] = hsum512(acc) - hsum256(accm);
	}
}

/* ---- the interleaved layout (ops_impl.h) ------------------------------------------ */

/* vpermd indices: dword lo in lanes 0..7, dword hi in lanes 8..15. */
static inline __m512i dw_pair(int lo, int hi)
{
	return _mm512_inserti64x4(_mm512_set1_epi32(lo), _mm256_set1_epi32(hi), 1);
}

/* The 8 rows' f16 scales of a group block in both halves of a register. */
static inline __m512 d_pair(const uint8_t *blk, __m256 *d8)
{
	*d8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
	return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(*d8)), _mm256_castps_pd(*d8), 1));
}

/* The group layouts of blocks of 32 that x8_cols_512 reads (ops_impl.h). */
enum x8_kind { X8_Q4_0, X8_Q8_0, X8_Q4_1, X8_Q5_0, X8_Q5_1, X8_IQ4_NL };

/* The iq4 values + 128 (1..241) in each 128-bit lane, for vpshufb. */
static inline __m512i iq4_table128(void)
{
	__m128i t = _mm_add_epi8(_mm_loadu_si128((const __m128i *)ops_iq4nl_values), _mm_set1_epi8((char)128));

	return _mm512_broadcast_i32x4(t);
}

/* Groups of 8 rows against nc activation rows. A register holds two parts
 * of a block (4 bytes of each of the 8 rows per part); each row's products
 * add up in lanes r and 8 + r, folded at the end. Unsigned weight values
 * are w + off (q4_0: the nibbles, off = 8; q5_0: with the fifth bits added
 * under masks from a byte test, off = 16; iq4_nl: its values + 128 looked up
 * from the codes, off = 128; q8_0: w ^ 0x80, off = 128); the offset comes
 * off as off * sum over blocks of d s_y. q4_1 and q5_1 (w = d q + m) add
 * m s_y instead. */
static inline __attribute__((always_inline)) void x8_cols_512(int64_t n, const uint8_t *grp, const void *a,
							      size_t as, int nc, float *s, size_t ss, enum x8_kind kind)
{
	const __m512i m15 = _mm512_set1_epi8(15), flip = _mm512_set1_epi8((char)0x80), c16 = _mm512_set1_epi8(16);
	const int q8 = kind == X8_Q8_0, min = kind == X8_Q4_1 || kind == X8_Q5_1;
	const int five = kind == X8_Q5_0 || kind == X8_Q5_1, iq4 = kind == X8_IQ4_NL;
	const size_t nib = OPS_X8N_NIB(min, five), bs = q8 ? OPS_X8_Q8_0 : nib + 128;
	const float off = q8 || iq4 ? 128.0f : five ? 16.0f : 8.0f;
	const __m512i tbl = iq4_table128();
	const struct blk_q8_32 *y[OPS_PANEL_COLS];
	__m512 acc[OPS_PANEL_COLS];
	__m256 corr[OPS_PANEL_COLS];
	const uint8_t *blk = grp;

	for (int c = 0; c < nc; c++) {
		y[c] = (const void *)((const char *)a + (size_t)c * as);
		acc[c] = _mm512_setzero_ps();
		corr[c] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < n / 32; b++, blk += bs) {
		__m512i isum[OPS_PANEL_COLS], yv[OPS_PANEL_COLS];
		__m256 d8;
		__m512 d = d_pair(blk, &d8);
		__m256 m8 = min ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16))) : d8;

		for (int c = 0; c < nc; c++) {
			isum[c] = _mm512_setzero_si512();
			yv[c] = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[c][b].qs));
		}
		if (q8) {
			for (int p = 0; p < 4; p++) {
				__m512i wu = _mm512_xor_si512(_mm512_loadu_si512((const void *)(blk + 16 + 64 * p)), flip);
				__m512i idx = dw_pair(2 * p, 2 * p + 1);

				for (int c = 0; c < nc; c++)
					isum[c] = _mm512_dpbusd_epi32(isum[c], wu, _mm512_permutexvar_epi32(idx, yv[c]));
			}
		} else {
			for (int p = 0; p < 2; p++) {
				__m512i q = _mm512_loadu_si512((const void *)(blk + nib + 64 * p));
				__m512i lo = _mm512_and_si512(q, m15), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m15);
				__m512i ilo = dw_pair(4 * p, 4 * p + 2), ihi = dw_pair(4 * p + 1, 4 * p + 3);

				if (five) {
					/* parts 2p, 2p + 1: bits 4p (+1) of the fifth bytes in the low half, 4p + 2 (+1) in the high */
					__m512i f = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + OPS_X8N_FIFTH(min))));
					__m512i bl = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << 4 * p)), _mm256_set1_epi8((char)(4 << 4 * p)), 1);

					lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(f, bl), lo, c16);
					hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(f, _mm512_add_epi8(bl, bl)), hi, c16);
				}
				if (iq4) {
					lo = _mm512_shuffle_epi8(tbl, lo);
					hi = _mm512_shuffle_epi8(tbl, hi);
				}
				for (int c = 0; c < nc; c++) {
					isum[c] = _mm512_dpbusd_epi32(isum[c], lo, _mm512_permutexvar_epi32(ilo, yv[c]));
					isum[c] = _mm512_dpbusd_epi32(isum[c], hi, _mm512_permutexvar_epi32(ihi, yv[c]));
				}
			}
		}
		for (int c = 0; c < nc; c++) {
			acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, _mm512_set1_ps(y[c][b].d)), acc[c]);
			corr[c] = _mm256_fmadd_ps(m8, _mm256_set1_ps(y[c][b].s), corr[c]);
		}
	}
	for (int c = 0; c < nc; c++) {
		__m256 sum = _mm256_add_ps(_mm512_castps512_ps256(acc[c]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[c]), 1)));

		_mm256_storeu_ps(s + (size_t)c * ss, min ? _mm256_add_ps(sum, corr[c])
							 : _mm256_fnmadd_ps(_mm256_set1_ps(off), corr[c], sum));
	}
}

#define COLS_DISPATCH(NAME, CALL)                                                                    \
	void NAME(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss) \
	{                                                                                            \
		OPS_COLS_SWITCH8(nc, CALL)                                                           \
	}

#define CALL_Q4_0(k) x8_cols_512(n, group, a, as, k, s, ss, X8_Q4_0)
#define CALL_Q8_0(k) x8_cols_512(n, group, a, as, k, s, ss, X8_Q8_0)
#define CALL_Q4_1(k) x8_cols_512(n, group, a, as, k, s, ss, X8_Q4_1)
#define CALL_Q5_0(k) x8_cols_512(n, group, a, as, k, s, ss, X8_Q5_0)
#define CALL_Q5_1(k) x8_cols_512(n, group, a, as, k, s, ss, X8_Q5_1)
#define CALL_IQ4_NL(k) x8_cols_512(n, group, a, as, k, s, ss, X8_IQ4_NL)

COLS_DISPATCH(gemv_q4_0_x8_avx512, CALL_Q4_0)
COLS_DISPATCH(gemv_q8_0_x8_avx512, CALL_Q8_0)
COLS_DISPATCH(gemv_q4_1_x8_avx512, CALL_Q4_1)
COLS_DISPATCH(gemv_q5_0_x8_avx512, CALL_Q5_0)
COLS_DISPATCH(gemv_q5_1_x8_avx512, CALL_Q5_1)
COLS_DISPATCH(gemv_iq4_nl_x8_avx512, CALL_IQ4_NL)

/* iq4_xs groups, one activation column: per sub-block, its codes as
 * iq4_nl's (values + 128 against the int8 activations through vpdpbusd,
 * lanes r and 8 + r for row r), times the rows' scales in int32; the 128
 * comes off as 128 sum_j scale_j sum(y_j) per row, from the activations'
 * 16-element sums. Integers exact, as the reference's; then d dy per
 * super-block in float. */
static void gemv_iq4_xs_x8_col(int64_t n, const void *group, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m512i m15 = _mm512_set1_epi8(15), tbl = iq4_table128();
	const uint8_t *sb = group;
	__m256 acc = _mm256_setzero_ps();

	for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_IQ4_XS_SB) {
		int8_t sc[64];
		__m512i isum = _mm512_setzero_si512();
		__m256i corr = _mm256_setzero_si256();

		iq4_xs_x8_scales(sb, sc);
		for (int j = 0; j < 8; j++) {
			const uint8_t *blk = sb + 64 + 128 * j;
			__m512i yv = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y[b].qs + 32 * j)));
			__m512i t = _mm512_setzero_si512();
			__m256i s8 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * j)));

			for (int p = 0; p < 2; p++) {
				__m512i q = _mm512_loadu_si512((const void *)(blk + 64 * p));
				__m512i lo = _mm512_shuffle_epi8(tbl, _mm512_and_si512(q, m15));
				__m512i hi = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(q, 4), m15));

				t = _mm512_dpbusd_epi32(t, lo, _mm512_permutexvar_epi32(dw_pair(4 * p, 4 * p + 2), yv));
				t = _mm512_dpbusd_epi32(t, hi, _mm512_permutexvar_epi32(dw_pair(4 * p + 1, 4 * p + 3), yv));
			}
			isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(t, _mm512_inserti64x4(_mm512_castsi256_si512(s8), s8, 1)));
			corr = _mm256_add_epi32(corr, _mm256_mullo_epi32(s8, _mm256_set1_epi32(y[b].bsums[2 * j] + y[b].bsums[2 * j + 1])));
		}
		{
			__m256i tot = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
			__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sb));

			tot = _mm256_sub_epi32(tot, _mm256_slli_epi32(corr, 7));
			acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), _mm256_mul_ps(d, _mm256_set1_ps(y[b].d)), acc);
		}
	}
	_mm256_storeu_ps(s, acc);
}

OPS_X8_EACH_COL(gemv_iq4_xs_x8_avx512, gemv_iq4_xs_x8_col)

/* q2_k and q3_k groups, one activation column. A pair of 16-groups is one
 * 64-byte load of 2-bit fields: register c (bits 2c) holds elements 4c..4c+3
 * of group 2P in lanes 0-7 and of group 2P + 1 in lanes 8-15, one row a
 * lane, so that vpdpbusd sums a whole 16-group of a row in its lane after
 * the 4 registers, and one vpmulld applies the 16 (row, group) scales.
 * q3_k's third bits add 4 (values 0..7 = w + 4);
 * its 4 and q2_k's mins come off through the activations' 16-element sums.
 * Integers exact, as the references'. */
static inline __attribute__((always_inline)) void gemv_k2_x8_col(int64_t n, const void *group, const void *a,
								 float *s, int three)
{
	const struct blk_q8_256 *y = a;
	const __m512i m3 = _mm512_set1_epi8(3), c4 = _mm512_set1_epi8(4);
	const uint8_t *sb = group;
	const size_t sbs = three ? OPS_X8_Q3_K_SB : OPS_X8_Q2_K_SB;
	__m256 acc = _mm256_setzero_ps();

	for (int64_t b = 0; b < n / QK_K; b++, sb += sbs) {
		_Alignas(64) int8_t sc[128];
		__m512i isum = _mm512_setzero_si512(), msum = _mm512_setzero_si512();

		if (three) {
			/* the 128 scales, v = 8G + r, less their bias */
			const __m512i m15 = _mm512_set1_epi8(15), b32 = _mm512_set1_epi8(32);
			__m512i lo = _mm512_loadu_si512((const void *)(sb + 16));
			__m256i h = _mm256_loadu_si256((const __m256i *)(sb + 80));
			__m512i h01 = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
			__m512i h23 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(h, 4)), _mm256_srli_epi16(h, 6), 1);

			_mm512_store_si512((void *)sc, _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(lo, m15),
											_mm512_slli_epi16(_mm512_and_si512(h01, m3), 4)), b32));
			_mm512_store_si512((void *)(sc + 64),
					   _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lo, 4), m15),
									   _mm512_slli_epi16(_mm512_and_si512(h23, m3), 4)), b32));
		}
		for (int P = 0; P < 8; P++) {
			const uint8_t *pair = sb + (three ? 112 + 96 * P : 160 + 64 * P);
			__m512i x = _mm512_loadu_si512((const void *)pair);
			__m512i yv = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y[b].qs + 32 * P)));
			__m512i t = _mm512_setzero_si512(), scale, bs, h3 = _mm512_setzero_si512();

			if (three) {
				/* third bits of value bytes 0-31 in the low, 32-63 in the high nibbles */
				__m256i hb = _mm256_loadu_si256((const __m256i *)(pair + 64));

				h3 = _mm512_inserti64x4(_mm512_castsi256_si512(hb), _mm256_srli_epi16(hb, 4), 1);
			}
			for (int c = 0; c < 4; c++) {
				__m512i v = _mm512_and_si512(_mm512_srli_epi16(x, 2 * c), m3);

				if (three) /* + 4 where bit c is set */
					v = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(h3, _mm512_set1_epi8((char)(1 << c))), v, c4);
				t = _mm512_dpbusd_epi32(t, v, _mm512_permutexvar_epi32(dw_pair(c, 4 + c), yv));
			}
			bs = _mm512_inserti64x4(_mm512_set1_epi32(y[b].bsums[2 * P]), _mm256_set1_epi32(y[b].bsums[2 * P + 1]), 1);
			if (three) {
				scale = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(sc + 16 * P)));
				msum = _mm512_add_epi32(msum, _mm512_mullo_epi32(scale, bs));
			} else {
				__m512i sm = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sb + 32 + 16 * P)));

				scale = _mm512_and_si512(sm, _mm512_set1_epi32(15));
				msum = _mm512_add_epi32(msum, _mm512_mullo_epi32(_mm512_srli_epi32(sm, 4), bs));
			}
			isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(t, scale));
		}
		acc = k2_x8_accum(acc, sb, y[b].d,
				  _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1)),
				  _mm256_add_epi32(_mm512_castsi512_si256(msum), _mm512_extracti64x4_epi64(msum, 1)), three);
	}
	_mm256_storeu_ps(s, acc);
}

static void gemv_q2_k_x8_col(int64_t n, const void *group, const void *a, float *s)
{
	gemv_k2_x8_col(n, group, a, s, 0);
}

static void gemv_q3_k_x8_col(int64_t n, const void *group, const void *a, float *s)
{
	gemv_k2_x8_col(n, group, a, s, 1);
}

OPS_X8_EACH_COL(gemv_q2_k_x8_avx512, gemv_q2_k_x8_col)
OPS_X8_EACH_COL(gemv_q3_k_x8_avx512, gemv_q3_k_x8_col)

/* ---- two panels at once (prefill) ------------------------------------------------------ */

/* Two 8-row panels (ops_impl.h) side by side, pstride bytes apart, as 16
 * rows: a register holds a group of 4 columns of both panels (32 bytes of
 * each), so the activations' 4 bytes go to all 16 lanes with one memory
 * broadcast and each vpdpbusd does the work of two on 256-bit registers.
 * Unsigned panel values (u4, u5: q in 0..31, w = d q + m). */
static inline __attribute__((always_inline)) void panel2_cols(int64_t n, const uint8_t *panel, size_t pstride,
							      const void *a, size_t as, int nc, float *s, size_t ss,
							      int is_signed)
{
	const struct blk_q8_32 *y[OPS_PANEL_COLS];
	__m512 acc[OPS_PANEL_COLS];
	const uint8_t *pa = panel, *pb = panel + pstride;
	/* few columns: the offsets ride along; more would run out of registers */
	const int fold = nc <= 4;

	for (int c = 0; c < nc; c++) {
		y[c] = (const void *)((const char *)a + (size_t)c * as);
		acc[c] = _mm512_setzero_ps();
	}
	for (int64_t b = 0; b < n / 32; b++, pa += OPS_PANEL_BLOCK, pb += OPS_PANEL_BLOCK) {
		__m512i isum[OPS_PANEL_COLS];
		__m512 d = _mm512_castpd_ps(_mm512_insertf64x4(
			_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps((const float *)(pa + 256)))),
			_mm256_castps_pd(_mm256_loadu_ps((const float *)(pb + 256))), 1));
		for (int c = 0; c < nc; c++)
			isum[c] = _mm512_setzero_si512();
		for (int g = 0; g < 8; g++) {
			__m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(pa + 32 * g))),
							_mm256_loadu_si256((const __m256i *)(pb + 32 * g)), 1);

			if (is_signed) /* q + 128, the 128 off through m = -128 d */
				wq = _mm512_xor_si512(wq, _mm512_set1_epi8((char)0x80));

			for (int c = 0; c < nc; c++) {
				int32_t v;

				memcpy(&v, y[c][b].qs + 4 * g, sizeof v);
				isum[c] = _mm512_dpbusd_epi32(isum[c], wq, _mm512_set1_epi32(v));
			}
		}
		for (int c = 0; c < nc; c++)
			acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, _mm512_set1_ps(y[c][b].d)), acc[c]);
		if (fold) {
			__m512 m = is_signed ? _mm512_mul_ps(d, _mm512_set1_ps(-128.0f)) : _mm512_castpd_ps(_mm512_insertf64x4(
				_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps((const float *)(pa + 288)))),
				_mm256_castps_pd(_mm256_loadu_ps((const float *)(pb + 288))), 1));

			for (int c = 0; c < nc; c++)
				acc[c] = _mm512_fmadd_ps(m, _mm512_set1_ps(y[c][b].s), acc[c]);
		}
	}
	pa = panel;
	pb = panel + pstride;
	for (int64_t b = 0; !fold && b < n / 32; b++, pa += OPS_PANEL_BLOCK, pb += OPS_PANEL_BLOCK) {
		const size_t at = is_signed ? 256 : 288;
		__m512 m = _mm512_castpd_ps(_mm512_insertf64x4(
			_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps((const float *)(pa + at)))),
			_mm256_castps_pd(_mm256_loadu_ps((const float *)(pb + at))), 1));

		if (is_signed)
			m = _mm512_mul_ps(m, _mm512_set1_ps(-128.0f));

		for (int c = 0; c < nc; c++)
			acc[c] = _mm512_fmadd_ps(m, _mm512_set1_ps(y[c][b].s), acc[c]);
	}
	for (int c = 0; c < nc; c++)
		_mm512_storeu_ps(s + (size_t)c * ss, acc[c]);
}

/* q6_k's panels (ops_impl.h), two side by side as 16 rows: vpdpbusd of
 * |q - 32| with y negated where q - 32 is negative sums each group of 4 into
 * its row's lane; after the 4 groups of a scale the sum is multiplied by the
 * rows' scales (every other byte of the panel's scale pairs). */
static inline __attribute__((always_inline)) void panel2_k6_cols(int64_t n, const uint8_t *panel, size_t pstride,
								 const void *a, size_t as, int nc, float *s, size_t ss)
{
	const __m128i even = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
	const struct blk_q8_32 *y[OPS_PANEL_COLS];
	__m512 acc[OPS_PANEL_COLS];
	const uint8_t *pa = panel, *pb = panel + pstride;

	for (int c = 0; c < nc; c++) {
		y[c] = (const void *)((const char *)a + (size_t)c * as);
		acc[c] = _mm512_setzero_ps();
	}
	for (int64_t b = 0; b < n / QK_K; b++, pa += OPS_PANEL_K6_BLOCK, pb += OPS_PANEL_K6_BLOCK) {
		__m512i isum[OPS_PANEL_COLS];

		for (int c = 0; c < nc; c++)
			isum[c] = _mm512_setzero_si512();
#pragma GCC unroll 1
		for (int h = 0; h < QK_K / 16; h++) {
			__m128i sa = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(pa + 2048 + 16 * h)), even);
			__m128i sb = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(pb + 2048 + 16 * h)), even);
			__m512i sc = _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(sa, sb));
			__m512i s32[OPS_PANEL_COLS];

			for (int c = 0; c < nc; c++)
				s32[c] = _mm512_setzero_si512();
			for (int g = 4 * h; g < 4 * h + 4; g++) {
				__m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(pa + 32 * g))),
								_mm256_loadu_si256((const __m256i *)(pb + 32 * g)), 1);
				__m512i aw = _mm512_abs_epi8(wq);
				__mmask64 neg = _mm512_movepi8_mask(wq);

				for (int c = 0; c < nc; c++) {
					int32_t v;
					__m512i yv;

					memcpy(&v, y[c][8 * b + g / 8].qs + 4 * (g % 8), sizeof v);
					yv = _mm512_set1_epi32(v);
					s32[c] = _mm512_dpbusd_epi32(s32[c], aw, _mm512_mask_sub_epi8(yv, neg, _mm512_setzero_si512(), yv));
				}
			}
			for (int c = 0; c < nc; c++)
				isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(s32[c], sc));
		}
		{
			__m512 d = _mm512_castpd_ps(_mm512_insertf64x4(
				_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps((const float *)(pa + 2304)))),
				_mm256_castps_pd(_mm256_loadu_ps((const float *)(pb + 2304))), 1));

			for (int c = 0; c < nc; c++)
				acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(d, _mm512_set1_ps(y[c][8 * b].d)),
							 acc[c]);
		}
	}
	for (int c = 0; c < nc; c++)
		_mm512_storeu_ps(s + (size_t)c * ss, acc[c]);
}

#define CALL_K6(k) panel2_k6_cols(n, panel, pstride, a, as, k, s, ss)

void panel2_k6_avx512(int64_t n, const void *panel, size_t pstride, const void *a, size_t as, int nc, float *s, size_t ss)
{
	OPS_COLS_SWITCH8(nc, CALL_K6)
}

#define CALL_P2(k) panel2_cols(n, panel, pstride, a, as, k, s, ss, 0)
#define CALL_P2S(k) panel2_cols(n, panel, pstride, a, as, k, s, ss, 1)

void panel2_u_avx512(int64_t n, const void *panel, size_t pstride, const void *a, size_t as, int nc, float *s, size_t ss)
{
	OPS_COLS_SWITCH8(nc, CALL_P2)
}

void panel2_s8_avx512(int64_t n, const void *panel, size_t pstride, const void *a, size_t as, int nc, float *s, size_t ss)
{
	OPS_COLS_SWITCH8(nc, CALL_P2S)
}

/* ---- q4_k and q5_k in the interleaved layout (ops_impl.h) ------------------------------ */

/* One column against a group (q5_k: five): per pair t of sub-blocks, 4
 * chunks of 64 bytes give 8 registers whose lane 8p + r holds 4 values of
 * sub-block 2t + p of row r (q5_k's fifth bits added as 16 under a mask
 * loaded from its 8 bytes); vpermd puts the matching 4 activation bytes in
 * each lane, and 8 vpdpbusd leave each lane the sum over its sub-block,
 * which vpmulld scales. The mins meet the activations' 32-element sums as
 * int16 pairs (lanes 4r + i of two registers, rows 0..3 and 4..7). */
static inline __attribute__((always_inline)) void gemv_k_x8_col(int64_t n, const uint8_t *group,
								  const struct blk_q8_256 *y, float *s, int five)
{
	const size_t sbs = five ? OPS_X8_Q5_K_SB : OPS_X8_Q4_K_SB;
	const __m512i m16 = _mm512_set1_epi8(16);
	const __m512i m4 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3);
	/* the top bits of scales (v < 32, < 64) and mins (< 96, < 128) */
	const __m512i sh_sc = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
	const __m512i sh_m = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
	const __m512i row_lo = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
	const __m512i row_hi = _mm512_add_epi32(row_lo, _mm512_set1_epi32(4));
	__m512i idx[8];
	__m512 acc = _mm512_setzero_ps(), accm0 = _mm512_setzero_ps(), accm1 = _mm512_setzero_ps();
	float f[16], m0[16], m1[16];
	uint8_t sc[64] __attribute__((aligned(64)));

	for (int q = 0; q < 8; q++)
		idx[q] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(q)), _mm256_set1_epi32(8 + q), 1);
	for (int64_t b = 0; b < n / QK_K; b++, group += sbs) {
		__m512i L = _mm512_loadu_si512((const void *)(group + 32));
		__m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(group + 96)));
		__m512i mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
					     _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(H, sh_m), m3), 4));
		__m512i isum = _mm512_setzero_si512(), bs4;
		__m512 dy = _mm512_set1_ps(y[b].d), dd, dm;
		__m256i bs;

		_mm512_store_si512((void *)sc, _mm512_or_si512(_mm512_and_si512(L, m4),
				    _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(H, sh_sc), m3), 4)));
		for (int t = 0; t < 4; t++) {
			const uint8_t *q = group + 128 + (five ? 320 : 256) * t;
			__m512i yv = _mm512_loadu_si512((const void *)(y[b].qs + 64 * t)), dot = _mm512_setzero_si512();

			for (int k = 0; k < 4; k++) {
				__m512i x = _mm512_loadu_si512((const void *)(q + 64 * k));
				__m512i lo = _mm512_and_si512(x, m4), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);

				if (five) {
					/* q5_k: the fifth bits of the two registers, one bit a byte */
					const uint8_t *qh = q + 256 + 16 * k;
					uint64_t bl, bh;

					memcpy(&bl, qh, 8);
					memcpy(&bh, qh + 8, 8);
					lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(bl), lo, m16);
					hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(bh), hi, m16);
				}
				dot = _mm512_dpbusd_epi32(dot, lo, _mm512_permutexvar_epi32(idx[2 * k], yv));
				dot = _mm512_dpbusd_epi32(dot, hi, _mm512_permutexvar_epi32(idx[2 * k + 1], yv));
			}
			isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(dot, _mm512_cvtepu8_epi32(
								     _mm_load_si128((const __m128i *)(sc + 16 * t)))));
		}
		dd = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)group)));
		dd = _mm512_mul_ps(_mm512_shuffle_f32x4(dd, dd, 0x44), dy);
		acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd, acc);
		/* sum_j m_j (bsums 2j + 2j+1), per row */
		bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[b].bsums), _mm256_set1_epi16(1));
		bs4 = _mm512_broadcast_i32x4(_mm256_cvtepi32_epi16(bs));
		dm = _mm512_mul_ps(_mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(group + 16)))), dy);
		accm0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(mn)), bs4)),
					_mm512_permutexvar_ps(row_lo, dm), accm0);
		accm1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(mn, 1)), bs4)),
					_mm512_permutexvar_ps(row_hi, dm), accm1);
	}
	_mm512_storeu_ps(f, acc);
	_mm512_storeu_ps(m0, accm0);
	_mm512_storeu_ps(m1, accm1);
	for (int r = 0; r < 8; r++) {
		const float *m = r < 4 ? m0 + 4 * r : m1 + 4 * (r - 4);

		s[r] = f[r] + f[8 + r] - ((m[0] + m[1]) + (m[2] + m[3]));
	}
}

OPS_X8_EACH_COL(gemv_q4_k_x8_avx512, gemv_k_x8_col, 0)

OPS_X8_EACH_COL(gemv_q5_k_x8_avx512, gemv_k_x8_col, 1)

/* q6_k (ops_impl.h): per unit u (16-groups 2u, 2u + 1), two nibble chunks
 * and the top bits give 4 registers of values 0..63 whose lane 8p + r holds
 * 4 values of 16-group 2u + p of row r; vpdpbusd against the activations
 * (vpermd'd as for q4_k) starts from -32 times the group's activation sum,
 * so each lane ends with sum((q - 32) y), which vpmulld scales. */
static void gemv_q6_k_x8_col(int64_t n, const uint8_t *group, const struct blk_q8_256 *y, float *s)
{
	const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
	const __m512i g01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(1), 1);
	__m512i idx[2][4];
	__m512 acc = _mm512_setzero_ps();
	float f[16];

	for (int q = 0; q < 4; q++)
		for (int o = 0; o < 2; o++)
			idx[o][q] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(8 * o + q)),
						       _mm256_set1_epi32(8 * o + 4 + q), 1);
	for (int64_t b = 0; b < n / QK_K; b++, group += OPS_X8_Q6_K_SB) {
		const __m512i bsum = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)y[b].bsums));
		__m512i isum = _mm512_setzero_si512(), yv = _mm512_setzero_si512();
		__m512 dd;

		for (int u = 0; u < 8; u++) {
			const uint8_t *q = group + 144 + 192 * u;
			__m512i x0 = _mm512_loadu_si512((const void *)q), x1 = _mm512_loadu_si512((const void *)(q + 64));
			__m512i hb = _mm512_loadu_si512((const void *)(q + 128));
			__m512i dot = _mm512_permutexvar_epi32(_mm512_add_epi32(g01, _mm512_set1_epi32(2 * u)), bsum);
			const __m512i *ix = idx[u % 2];

			if (u % 2 == 0)
				yv = _mm512_loadu_si512((const void *)(y[b].qs + 32 * u));
			dot = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(dot, 5));
			dot = _mm512_dpbusd_epi32(dot, _mm512_or_si512(_mm512_and_si512(x0, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30)),
						  _mm512_permutexvar_epi32(ix[0], yv));
			dot = _mm512_dpbusd_epi32(dot, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(x0, 4), m4),
								       _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30)),
						  _mm512_permutexvar_epi32(ix[1], yv));
			dot = _mm512_dpbusd_epi32(dot, _mm512_or_si512(_mm512_and_si512(x1, m4), _mm512_and_si512(hb, m30)),
						  _mm512_permutexvar_epi32(ix[2], yv));
			dot = _mm512_dpbusd_epi32(dot, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(x1, 4), m4),
								       _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30)),
						  _mm512_permutexvar_epi32(ix[3], yv));
			isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(dot, _mm512_cvtepi8_epi32(
								     _mm_loadu_si128((const __m128i *)(group + 16 + 16 * u)))));
		}
		dd = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)group)));
		dd = _mm512_mul_ps(_mm512_shuffle_f32x4(dd, dd, 0x44), _mm512_set1_ps(y[b].d));
		acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd, acc);
	}
	_mm512_storeu_ps(f, acc);
	for (int r = 0; r < 8; r++)
		s[r] = f[r] + f[8 + r];
}

OPS_X8_EACH_COL(gemv_q6_k_x8_avx512, gemv_q6_k_x8_col)
