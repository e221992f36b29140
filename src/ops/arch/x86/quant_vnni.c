/* quant_vnni.c - the hottest kernels again with vpdpbusd (AVX512-VNNI on
 * 256-bit registers, AVX512VL), for CPUs that have it (AMD Zen 4, Intel Ice
 * Lake and later). vpdpbusd multiplies unsigned by signed bytes and adds each
 * group of 4 products into an int32 lane: one instruction where AVX2 needs
 * vpmaddubsw + vpmaddwd (+ vpaddd), and no int16 stage that could saturate.
 * Same layouts, same results as the AVX2 versions up to float rounding; the
 * tests compare them with the references like the others. */
#include <immintrin.h>
#include <string.h>

#include "ops/arch/x86/quant_x86.h"
#include "ops/arch/x86/x86.h"

/* Panels (ops_impl.h): q in 0..31 (u4, u5) or signed (s8: q ^ 0x80 = q + 128
 * against y, one flip a weight register for all the columns, the 128 off as
 * 128 d s_y, as m s_y of the unsigned kinds). */
static inline __attribute__((always_inline)) void panel_cols_vnni(int64_t n, const uint8_t *panel, const void *a,
								  size_t as, int nc, float *s, size_t ss, int is_signed)
{
	const struct blk_q8_32 *y[OPS_PANEL_COLS];
	__m256 acc[OPS_PANEL_COLS], accm[OPS_PANEL_COLS];
	const uint8_t *pb = panel;

	for (int c = 0; c < nc; c++) {
		y[c] = (const void *)((const char *)a + (size_t)c * as);
		acc[c] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < n / 32; b++, pb += OPS_PANEL_BLOCK) {
		__m256i isum[OPS_PANEL_COLS];
		__m256 d = _mm256_loadu_ps((const float *)(pb + 256));

		for (int c = 0; c < nc; c++)
			isum[c] = _mm256_setzero_si256();
		for (int g = 0; g < 8; g++) {
			__m256i wq = _mm256_loadu_si256((const __m256i *)(pb + 32 * g));

			if (is_signed)
				wq = _mm256_xor_si256(wq, _mm256_set1_epi8((char)0x80));
			for (int c = 0; c < nc; c++)
				isum[c] = _mm256_dpbusd_epi32(isum[c], wq, bcast4(y[c][b].qs + 4 * g));
		}
		for (int c = 0; c < nc; c++)
			acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, _mm256_set1_ps(y[c][b].d)), acc[c]);
	}
	for (int c = 0; c < nc; c++)
		accm[c] = _mm256_setzero_ps();
	pb = panel;
	for (int64_t b = 0; b < n / 32; b++, pb += OPS_PANEL_BLOCK) {
		__m256 m = is_signed ? _mm256_mul_ps(_mm256_loadu_ps((const float *)(pb + 256)), _mm256_set1_ps(-128.0f))
				     : _mm256_loadu_ps((const float *)(pb + 288));

		for (int c = 0; c < nc; c++)
			accm[c] = _mm256_fmadd_ps(m, _mm256_set1_ps(y[c][b].s), accm[c]);
	}
	for (int c = 0; c < nc; c++)
		_mm256_storeu_ps(s + (size_t)c * ss, _mm256_add_ps(acc[c], accm[c]));
}

/* q4_0 groups of the interleaved layout (ops_impl.h). */
static inline __attribute__((always_inline)) void q4_0_x8_cols_vnni(int64_t n, const uint8_t *grp, const void *a,
								    size_t as, int nc, float *s, size_t ss)
{
	const __m256i m15 = _mm256_set1_epi8(15);
	const struct blk_q8_32 *y[OPS_PANEL_COLS];
	__m256 acc[OPS_PANEL_COLS], corr[OPS_PANEL_COLS];
	const uint8_t *blk = grp;

	/* few columns (decode): the offset correction rides along in the main
	 * loop; more would run out of registers, so they take a second pass */
	const int fold = nc <= 2;

	for (int c = 0; c < nc; c++) {
		y[c] = (const void *)((const char *)a + (size_t)c * as);
		acc[c] = _mm256_setzero_ps();
		corr[c] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < n / 32; b++, blk += OPS_X8_Q4_0) {
		__m256i isum[OPS_PANEL_COLS];
		__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));

		for (int c = 0; c < nc; c++)
			isum[c] = _mm256_setzero_si256();
		for (int g = 0; g < 4; g++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * g));
			__m256i lo = _mm256_and_si256(q, m15), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m15);

			for (int c = 0; c < nc; c++) {
				isum[c] = _mm256_dpbusd_epi32(isum[c], lo, bcast4(y[c][b].qs + 8 * g));
				isum[c] = _mm256_dpbusd_epi32(isum[c], hi, bcast4(y[c][b].qs + 8 * g + 4));
			}
		}
		for (int c = 0; c < nc; c++) {
			acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, _mm256_set1_ps(y[c][b].d)), acc[c]);
			if (fold)
				corr[c] = _mm256_fmadd_ps(d, _mm256_set1_ps(y[c][b].s), corr[c]);
		}
	}
	blk = grp;
	for (int64_t b = 0; !fold && b < n / 32; b++, blk += OPS_X8_Q4_0) {
		__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));

		for (int c = 0; c < nc; c++)
			corr[c] = _mm256_fmadd_ps(d, _mm256_set1_ps(y[c][b].s), corr[c]);
	}
	for (int c = 0; c < nc; c++)
		_mm256_storeu_ps(s + (size_t)c * ss, _mm256_fnmadd_ps(_mm256_set1_ps(8.0f), corr[c], acc[c]));
}

static inline __attribute__((always_inline)) void q8_0_x8_cols_vnni(int64_t n, const uint8_t *grp, const void *a,
								    size_t as, int nc, float *s, size_t ss)
{
	const struct blk_q8_32 *y[OPS_PANEL_COLS];
	__m256 acc[OPS_PANEL_COLS];
	const uint8_t *blk = grp;

	for (int c = 0; c < nc; c++) {
		y[c] = (const void *)((const char *)a + (size_t)c * as);
		acc[c] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < n / 32; b++, blk += OPS_X8_Q8_0) {
		__m256i isum[OPS_PANEL_COLS];
		__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));

		for (int c = 0; c < nc; c++)
			isum[c] = _mm256_setzero_si256();
		for (int g = 0; g < 8; g++) {
			__m256i wq = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * g)), aw = _mm256_abs_epi8(wq);

			for (int c = 0; c < nc; c++)
				isum[c] = _mm256_dpbusd_epi32(isum[c], aw, _mm256_sign_epi8(bcast4(y[c][b].qs + 4 * g), wq));
		}
		for (int c = 0; c < nc; c++)
			acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, _mm256_set1_ps(y[c][b].d)), acc[c]);
	}
	for (int c = 0; c < nc; c++)
		_mm256_storeu_ps(s + (size_t)c * ss, acc[c]);
}

/* Up to 8 activation rows at once (OPS_COLS_SWITCH8). */
#define COLS_DISPATCH(NAME, ARGS, CALL) \
	void NAME ARGS                  \
	{                               \
		OPS_COLS_SWITCH8(nc, CALL)  \
	}

#define PANEL_ARGS (int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss)
#define X8_ARGS (int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)
#define CALL_U(k) panel_cols_vnni(n, panel, a, as, k, s, ss, 0)
#define CALL_S8(k) panel_cols_vnni(n, panel, a, as, k, s, ss, 1)
#define CALL_Q4_0(k) q4_0_x8_cols_vnni(n, group, a, as, k, s, ss)
#define CALL_Q8_0(k) q8_0_x8_cols_vnni(n, group, a, as, k, s, ss)

COLS_DISPATCH(panel_u_vnni, PANEL_ARGS, CALL_U)
COLS_DISPATCH(panel_s8_vnni, PANEL_ARGS, CALL_S8)
COLS_DISPATCH(gemv_q4_0_x8_vnni, X8_ARGS, CALL_Q4_0)
COLS_DISPATCH(gemv_q8_0_x8_vnni, X8_ARGS, CALL_Q8_0)
