/* quant_avx2.c - AVX2/FMA/F16C versions of the per-type kernels in quant.c.
 *
 * Integer dots follow the reference exactly up to the float accumulation:
 * unsigned weights (0..15, 0..31, 0..63) times signed int8 activations go
 * through vpmaddubsw (pairs to int16, which cannot saturate at these ranges)
 * and vpmaddwd (to int32, with ones or with the sub-block scales); offsets
 * such as q4_0's -8 and q6_k's -32 come off as that constant times the
 * activation sums. Loops over whole blocks end without a scalar tail because
 * rows are whole blocks; the float kernels have one. */
#include <immintrin.h>
#include <string.h>

#include "ops/arch/x86/quant_x86.h"
#include "ops/arch/x86/x86.h"
#include "util/simd_x86.h"

static inline int hsum_epi32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));

	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

/* ---- float types ---------------------------------------------------------------------
 * Each row is summed the same way whatever nr is (two 8-lane accumulators over
 * 16 elements, then 8, then a scalar tail), so a row's result never depends on
 * how the matmul grouped it. */

#define FLOAT_DOT_ROWS(NAME, T, LOAD8, SCALAR)                                                      \
	void NAME(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)             \
	{                                                                                           \
		const float *x = a;                                                                 \
		for (int r = 0; r < nr; r++) {                                                      \
			const T *v = row_at(w, ws, r);                                              \
			__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();             \
			int64_t i = 0;                                                              \
			float tail = 0.0f;                                                          \
			for (; i + 16 <= n; i += 16) {                                              \
				acc0 = _mm256_fmadd_ps(LOAD8(v + i), _mm256_loadu_ps(x + i), acc0); \
				acc1 = _mm256_fmadd_ps(LOAD8(v + i + 8), _mm256_loadu_ps(x + i + 8), acc1); \
			}                                                                           \
			if (i + 8 <= n) {                                                           \
				acc0 = _mm256_fmadd_ps(LOAD8(v + i), _mm256_loadu_ps(x + i), acc0); \
				i += 8;                                                             \
			}                                                                           \
			for (; i < n; i++)                                                          \
				tail += SCALAR(v[i]) * x[i];                                        \
			s[r] = hsum_ps(_mm256_add_ps(acc0, acc1)) + tail;                           \
		}                                                                                   \
	}

static inline __m256 load8_f32(const float *p)
{
	return _mm256_loadu_ps(p);
}

static inline __m256 load8_f16(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 load8_bf16(const uint16_t *p)
{
	__m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));

	return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

static inline float scalar_f32(float v)
{
	return v;
}

static inline float scalar_f16(uint16_t h)
{
	return f16(h);
}

static inline float scalar_bf16(uint16_t h)
{
	uint32_t b = (uint32_t)h << 16;
	float f;

	memcpy(&f, &b, sizeof f);
	return f;
}

FLOAT_DOT_ROWS(dot_rows_f32_avx2, float, load8_f32, scalar_f32)
FLOAT_DOT_ROWS(dot_rows_f16_avx2, uint16_t, load8_f16, scalar_f16)
FLOAT_DOT_ROWS(dot_rows_bf16_avx2, uint16_t, load8_bf16, scalar_bf16)

void dequant_f16_avx2(const void *row, float *out, int64_t n)
{
	const uint16_t *h = row;
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(out + i, load8_f16(h + i));
	for (; i < n; i++)
		out[i] = f16(h[i]);
}

void dequant_bf16_avx2(const void *row, float *out, int64_t n)
{
	const uint16_t *h = row;
	int64_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(out + i, load8_bf16(h + i));
	for (; i < n; i++)
		out[i] = scalar_bf16(h[i]);
}

/* ---- dequantize quantized rows (exactly as the references round) ------------------- */

/* out[0..31] = d * (int8 q[0..31] - off), one multiply per element. */
static inline void store32_scaled(float *out, __m256i q, float d)
{
	__m256 vd = _mm256_set1_ps(d);
	__m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);

	_mm256_storeu_ps(out, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
	_mm256_storeu_ps(out + 8, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
	_mm256_storeu_ps(out + 16, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
	_mm256_storeu_ps(out + 24, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

/* out[0..31] = ds * q - dm for unsigned q (the k-quants' affine form). */
static inline void store32_affine(float *out, __m256i q, float ds, float dm)
{
	__m256 vs = _mm256_set1_ps(ds), vm = _mm256_set1_ps(dm);
	__m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
	__m256 f[4] = {
		_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)),
		_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))),
		_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)),
		_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))),
	};

	for (int k = 0; k < 4; k++)
		_mm256_storeu_ps(out + 8 * k, _mm256_sub_ps(_mm256_mul_ps(vs, f[k]), vm));
}

void dequant_q4_0_avx2(const void *row, float *out, int64_t n)
{
	const struct blk_q4_0 *b = row;

	for (int64_t i = 0; i < n / QK4_0; i++, out += QK4_0)
		store32_scaled(out, _mm256_sub_epi8(nibbles(b[i].qs), _mm256_set1_epi8(8)), f16(b[i].d));
}

void dequant_q8_0_avx2(const void *row, float *out, int64_t n)
{
	const struct blk_q8_0 *b = row;

	for (int64_t i = 0; i < n / QK8_0; i++, out += QK8_0)
		store32_scaled(out, _mm256_loadu_si256((const __m256i *)b[i].qs), f16(b[i].d));
}

void dequant_q4_k_avx2(const void *row, float *out, int64_t n)
{
	const struct blk_q4_k *b = row;
	const __m256i m15 = _mm256_set1_epi8(15);

	for (int64_t i = 0; i < n / QK_K; i++) {
		float d = f16(b[i].d), dmin = f16(b[i].dmin);

		for (int c = 0; c < 4; c++, out += 64) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * c));
			uint8_t sc0, m0, sc1, m1;

			ops_k_scale_min(b[i].scales, 2 * c, &sc0, &m0);
			ops_k_scale_min(b[i].scales, 2 * c + 1, &sc1, &m1);
			store32_affine(out, _mm256_and_si256(q, m15), d * sc0, dmin * m0);
			store32_affine(out + 32, _mm256_and_si256(_mm256_srli_epi16(q, 4), m15), d * sc1, dmin * m1);
		}
	}
}

void dequant_q5_k_avx2(const void *row, float *out, int64_t n)
{
	const struct blk_q5_k *b = row;
	const __m256i m15 = _mm256_set1_epi8(15), m16 = _mm256_set1_epi8(16);

	for (int64_t i = 0; i < n / QK_K; i++) {
		float d = f16(b[i].d), dmin = f16(b[i].dmin);
		__m256i h = _mm256_loadu_si256((const __m256i *)b[i].qh);

		for (int c = 0; c < 4; c++, out += 64) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * c));
			__m256i lo = _mm256_or_si256(_mm256_and_si256(q, m15), _mm256_and_si256(_mm256_slli_epi16(h, 4), m16));
			__m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m15),
						     _mm256_and_si256(_mm256_slli_epi16(h, 3), m16));
			uint8_t sc0, m0, sc1, m1;

			ops_k_scale_min(b[i].scales, 2 * c, &sc0, &m0);
			ops_k_scale_min(b[i].scales, 2 * c + 1, &sc1, &m1);
			store32_affine(out, lo, d * sc0, dmin * m0);
			store32_affine(out + 32, hi, d * sc1, dmin * m1);
			/* bits of the next two sub-blocks to bits 0 and 1; what the 16-bit
			 * shift pulls in from the neighbour byte lands in bits 6-7 and
			 * never reaches bits 0-1 within the four steps */
			h = _mm256_srli_epi16(h, 2);
		}
	}
}

/* The four groups of 32 six-bit values (0..63) of half `h` of a q6_k block,
 * in element order: ql gives the low 4 bits, qh bits 2g and 2g+1 the high 2. */
static inline void q6_k_groups(const struct blk_q6_k *b, int h, __m256i g[4])
{
	const __m256i m15 = _mm256_set1_epi8(15), m48 = _mm256_set1_epi8(48);
	__m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
	__m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
	__m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));

	g[0] = _mm256_or_si256(_mm256_and_si256(ql0, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m48));
	g[1] = _mm256_or_si256(_mm256_and_si256(ql1, m15), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m48));
	g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m15), _mm256_and_si256(qh, m48));
	g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m15),
			       _mm256_and_si256(_mm256_srli_epi16(qh, 2), m48));
}

void dequant_q6_k_avx2(const void *row, float *out, int64_t n)
{
	const struct blk_q6_k *b = row;

	for (int64_t i = 0; i < n / QK_K; i++) {
		float d = f16(b[i].d);

		for (int h = 0; h < 2; h++) {
			__m256i g[4];

			q6_k_groups(&b[i], h, g);
			for (int k = 0; k < 4; k++, out += 32) {
				/* two 16-element halves with their own scales: (q - 32) * (d * sc) */
				__m256i q = _mm256_sub_epi8(g[k], _mm256_set1_epi8(32));
				__m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
				__m256 s0 = _mm256_set1_ps(d * b[i].scales[8 * h + 2 * k]);
				__m256 s1 = _mm256_set1_ps(d * b[i].scales[8 * h + 2 * k + 1]);

				_mm256_storeu_ps(out, _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
				_mm256_storeu_ps(out + 8, _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
				_mm256_storeu_ps(out + 16, _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
				_mm256_storeu_ps(out + 24, _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
			}
		}
	}
}

/* ---- activation quantizers ----------------------------------------------------------- */

/* 32 floats times id, rounded to nearest even (as nearbyintf), to 32 int8 in
 * order; *sum gets the sum of the 16 first and 16 last values. */
static inline __m256i round32(const float *x, __m256 id, int *sum_lo, int *sum_hi)
{
	__m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
	__m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
	__m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
	__m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
	/* packs interleave the 128-bit lanes: 0 4 1 5 2 6 3 7 in dwords; undo it */
	__m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));

	*sum_lo = hsum_epi32(_mm256_add_epi32(i0, i1));
	*sum_hi = hsum_epi32(_mm256_add_epi32(i2, i3));
	return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline float amax_ps(const float *x, int n)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);
	__m256 m = _mm256_setzero_ps();

	for (int j = 0; j < n; j += 8)
		m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
	return hmax_ps(m);
}

static inline float f16_round(float v)
{
	return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
}

/* Blocks of 32 as quant.c's quant_blocks32: d = amax / 127 in f16, s from the
 * f16 d (q8_0) or from the exact d and rounded to f16 (q8_1). */
static inline void quant_blocks32(const float *x, struct blk_q8_32 *b, int64_t n, int q8_1)
{
	for (int64_t i = 0; i < n / 32; i++, x += 32) {
		float amax = amax_ps(x, 32);
		float id = amax > 0.0f ? 127.0f / amax : 0.0f;
		int s0, s1;

		_mm256_storeu_si256((__m256i *)b[i].qs, round32(x, _mm256_set1_ps(id), &s0, &s1));
		b[i].d = f16_round(amax / 127.0f);
		b[i].s = q8_1 ? f16_round(amax / 127.0f * (float)(s0 + s1)) : b[i].d * (float)(s0 + s1);
	}
}

void quant_act_q8_32_avx2(const float *x, void *out, int64_t n)
{
	quant_blocks32(x, out, n, 0);
}

void quant_act_q8_1_avx2(const float *x, void *out, int64_t n)
{
	quant_blocks32(x, out, n, 1);
}

void quant_act_q8_256_avx2(const float *x, void *out, int64_t n)
{
	struct blk_q8_256 *b = out;

	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		float amax = amax_ps(x, QK_K), id = amax > 0.0f ? 127.0f / amax : 0.0f;

		for (int g = 0; g < 8; g++) {
			int s0, s1;

			_mm256_storeu_si256((__m256i *)(b[i].qs + 32 * g), round32(x + 32 * g, _mm256_set1_ps(id), &s0, &s1));
			b[i].bsums[2 * g] = (int16_t)s0;
			b[i].bsums[2 * g + 1] = (int16_t)s1;
		}
		b[i].d = id > 0.0f ? 1.0f / id : 0.0f;
	}
}

/* One scale per 256 (as q8_256), blocks of 32 (as q8_32). */
void quant_act_q8_k32_avx2(const float *x, void *out, int64_t n)
{
	struct blk_q8_32 *b = out;

	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, b += 8) {
		float amax = amax_ps(x, QK_K), id = amax > 0.0f ? 127.0f / amax : 0.0f;
		float d = id > 0.0f ? 1.0f / id : 0.0f;

		for (int g = 0; g < 8; g++) {
			int s0, s1;

			_mm256_storeu_si256((__m256i *)b[g].qs, round32(x + 32 * g, _mm256_set1_ps(id), &s0, &s1));
			b[g].d = d;
			b[g].s = d * (float)(s0 + s1);
		}
	}
}

/* ---- integer row dots ------------------------------------------------------------------ */

/* Row-dot kernels are written once for any row count and instantiated for
 * each constant 1..OPS_DOT_ROWS (always_inline + a switch), so the per-row
 * accumulators live in registers. */
#define DOT_ROWS_DISPATCH(NAME, IMPL)                                                             \
	void NAME(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)           \
	{                                                                                         \
		switch (nr) {                                                                     \
		case 4: IMPL(n, w, ws, 4, a, s); break;                                           \
		case 3: IMPL(n, w, ws, 3, a, s); break;                                           \
		case 2: IMPL(n, w, ws, 2, a, s); break;                                           \
		default:                                                                          \
			for (int r_ = 0; r_ < nr; r_++)                                           \
				IMPL(n, row_at(w, ws, r_), ws, 1, a, s + r_);                     \
		}                                                                                 \
	}

/* Row dots of blocks of 32 (BLK) against OPS_ACT_Q8_32 for nr rows at once:
 * PRE(yq) is what every row needs of a block's activations (computed once),
 * DOT(w, yq, pre) a row's int32 lanes against that block. Even and odd blocks
 * go to two accumulators: one would make every block wait for the previous
 * block's FMA (4 cycles), which bounds a single row's speed; u (0 or 1) is a
 * constant after unrolling, so acc stays in registers. */
#define Q8_32_ROWS(NAME, BLK, PRE, DOT)                                                                       \
	static inline __attribute__((always_inline)) void NAME(int64_t n, const void *w, size_t ws, int nr,   \
							       const void *a, float *s)                      \
	{                                                                                                     \
		const struct blk_q8_32 *y = a;                                                                \
		const __m256i ones = _mm256_set1_epi16(1), eights = _mm256_set1_epi8(8);                      \
		const struct BLK *b[OPS_DOT_ROWS];                                                            \
		__m256 acc[OPS_DOT_ROWS][2];                                                                  \
		int64_t nb = n / 32;                                                                          \
		for (int r = 0; r < nr; r++) {                                                                \
			b[r] = row_at(w, ws, r);                                                              \
			acc[r][0] = acc[r][1] = _mm256_setzero_ps();                                          \
		}                                                                                             \
		for (int64_t i = 0; i + 1 < nb; i += 2) {                                                     \
			Q8_32_BLOCK(PRE, DOT, i, 0);                                                          \
			Q8_32_BLOCK(PRE, DOT, i + 1, 1);                                                      \
		}                                                                                             \
		if (nb & 1)                                                                                   \
			Q8_32_BLOCK(PRE, DOT, nb - 1, 0);                                                     \
		for (int r = 0; r < nr; r++)                                                                  \
			s[r] = hsum_ps(_mm256_add_ps(acc[r][0], acc[r][1]));                                  \
		(void)eights;                                                                                 \
	}

#define Q8_32_BLOCK(PRE, DOT, i, u)                                                                   \
	do {                                                                                          \
		__m256i yq = _mm256_loadu_si256((const __m256i *)y[i].qs), pre = PRE(yq, ones, eights); \
		for (int r = 0; r < nr; r++) {                                                        \
			__m256i p = DOT(&b[r][i], yq, pre, ones);                                     \
			acc[r][u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),                            \
						    _mm256_set1_ps(f16(b[r][i].d) * y[i].d), acc[r][u]); \
		}                                                                                     \
	} while (0)

/* q4_0: sum over blocks of dw dy sum((q - 8) y). The -8 comes off in int32
 * as 8 sum(y) per lane group, computed once per block for all rows. */
static inline __m256i q4_0_pre(__m256i yq, __m256i ones, __m256i eights)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(eights, yq), ones);
}

static inline __m256i q4_0_dot(const struct blk_q4_0 *b, __m256i yq, __m256i y8, __m256i ones)
{
	__m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles(b->qs), yq), ones);

	return _mm256_sub_epi32(p, y8);
}

/* q8_0: signed times signed through |w| and y with w's sign. */
static inline __m256i q8_0_pre(__m256i yq, __m256i ones, __m256i eights)
{
	(void)ones;
	(void)eights;
	return yq;
}

static inline __m256i q8_0_dot(const struct blk_q8_0 *b, __m256i yq, __m256i unused, __m256i ones)
{
	__m256i wq = _mm256_loadu_si256((const __m256i *)b->qs);

	(void)unused;
	return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wq), _mm256_sign_epi8(yq, wq)), ones);
}

Q8_32_ROWS(q4_0_rows, blk_q4_0, q4_0_pre, q4_0_dot)
Q8_32_ROWS(q8_0_rows, blk_q8_0, q8_0_pre, q8_0_dot)
#undef Q8_32_BLOCK
#undef Q8_32_ROWS

DOT_ROWS_DISPATCH(dot_rows_q4_0_avx2, q4_0_rows)
DOT_ROWS_DISPATCH(dot_rows_q8_0_avx2, q8_0_rows)

/* The 8 scales and 8 mins of a q4_k/q5_k block as bytes: sc in the low 8,
 * m in the high 8 (the unpacking of ops_k_scale_min, four at a time). */
static inline __m128i k_scales(const uint8_t *s)
{
	uint32_t u[3];

	memcpy(u, s, 12);
	return _mm_setr_epi32((int)(u[0] & 0x3f3f3f3f),
			      (int)((u[2] & 0x0f0f0f0f) | ((u[0] >> 6) & 0x03030303) << 4),
			      (int)(u[1] & 0x3f3f3f3f),
			      (int)(((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 6) & 0x03030303) << 4));
}

/* Shuffle controls that spread int16 word k over a 256-bit register: the low
 * lane gets word lo, the high lane word hi. */
static inline __m256i spread_words(int lo, int hi)
{
	return _mm256_setr_epi8((char)(2 * lo), (char)(2 * lo + 1), (char)(2 * lo), (char)(2 * lo + 1), (char)(2 * lo),
				(char)(2 * lo + 1), (char)(2 * lo), (char)(2 * lo + 1), (char)(2 * lo), (char)(2 * lo + 1),
				(char)(2 * lo), (char)(2 * lo + 1), (char)(2 * lo), (char)(2 * lo + 1), (char)(2 * lo),
				(char)(2 * lo + 1), (char)(2 * hi), (char)(2 * hi + 1), (char)(2 * hi), (char)(2 * hi + 1),
				(char)(2 * hi), (char)(2 * hi + 1), (char)(2 * hi), (char)(2 * hi + 1), (char)(2 * hi),
				(char)(2 * hi + 1), (char)(2 * hi), (char)(2 * hi + 1), (char)(2 * hi), (char)(2 * hi + 1),
				(char)(2 * hi), (char)(2 * hi + 1));
}

/* The shared part of q4_k and q5_k: given the 8 sub-blocks' values (0..31) as
 * four registers of 64 (low nibble sub-block, high nibble sub-block), adds
 * d dy sum_j sc_j sum(q y) - dmin dy sum_j m_j sum(y) into acc / accm. */
static inline void k_affine_block(const __m256i lo[4], const __m256i hi[4], const uint8_t *scales, uint16_t d,
				  uint16_t dmin, const struct blk_q8_256 *y, __m256 *acc, __m256 *accm)
{
	__m128i sm = k_scales(scales);
	__m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
	__m256i mdup = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));  /* m0 m0 m1 m1 ... */
	__m256i mins = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), mdup);
	__m256i isum = _mm256_setzero_si256();

	for (int c = 0; c < 4; c++) {
		__m256i y0 = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * c));
		__m256i y1 = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * c + 32));
		__m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[c], y0),
					       _mm256_shuffle_epi8(sc, spread_words(2 * c, 2 * c)));
		__m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[c], y1),
					       _mm256_shuffle_epi8(sc, spread_words(2 * c + 1, 2 * c + 1)));

		isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
	}
	*acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(f16(d) * y->d), *acc);
	*accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(f16(dmin) * y->d), *accm);
}

void dot_rows_q4_k_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m256i m15 = _mm256_set1_epi8(15);

	for (int r = 0; r < nr; r++) {
		const struct blk_q4_k *b = row_at(w, ws, r);
		__m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m256i lo[4], hi[4];

			for (int c = 0; c < 4; c++) {
				__m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * c));

				lo[c] = _mm256_and_si256(q, m15);
				hi[c] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m15);
			}
			k_affine_block(lo, hi, b[i].scales, b[i].d, b[i].dmin, &y[i], &acc, &accm);
		}
		s[r] = hsum_ps(acc) - hsum_ps(accm);
	}
}

void dot_rows_q5_k_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;
	const __m256i m15 = _mm256_set1_epi8(15), m16 = _mm256_set1_epi8(16);

	for (int r = 0; r < nr; r++) {
		const struct blk_q5_k *b = row_at(w, ws, r);
		__m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m256i lo[4], hi[4], h = _mm256_loadu_si256((const __m256i *)b[i].qh);

			for (int c = 0; c < 4; c++) {
				__m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * c));

				lo[c] = _mm256_or_si256(_mm256_and_si256(q, m15), _mm256_and_si256(_mm256_slli_epi16(h, 4), m16));
				hi[c] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m15),
							_mm256_and_si256(_mm256_slli_epi16(h, 3), m16));
				h = _mm256_srli_epi16(h, 2); /* see dequant_q5_k_avx2 */
			}
			k_affine_block(lo, hi, b[i].scales, b[i].d, b[i].dmin, &y[i], &acc, &accm);
		}
		s[r] = hsum_ps(acc) - hsum_ps(accm);
	}
}

/* q6_k: sum_k sc_k sum((q - 32) y) over 16-element groups; the -32 comes off
 * as 32 sum_k sc_k bsum_k. */
void dot_rows_q6_k_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s)
{
	const struct blk_q8_256 *y = a;

	for (int r = 0; r < nr; r++) {
		const struct blk_q6_k *b = row_at(w, ws, r);
		__m256 acc = _mm256_setzero_ps();

		for (int64_t i = 0; i < n / QK_K; i++) {
			__m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[i].scales));
			__m256i isum = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), sc16);

			isum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(isum, 5));
			for (int h = 0; h < 2; h++) {
				__m256i g[4];
				__m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(b[i].scales + 8 * h))));

				q6_k_groups(&b[i], h, g);
				for (int k = 0; k < 4; k++) {
					__m256i yq = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * k));
					__m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(g[k], yq),
								      _mm256_shuffle_epi8(sc, spread_words(2 * k, 2 * k + 1)));

					isum = _mm256_add_epi32(isum, p);
				}
			}
			acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(f16(b[i].d) * y[i].d), acc);
		}
		s[r] = hsum_ps(acc);
	}
}

/* ---- panels (layout in ops_impl.h) ---------------------------------------------------- */

void pack_q4_0_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel)
{
	uint8_t *pb = panel;

	for (int64_t b = 0; b < n / QK4_0; b++, pb += OPS_PANEL_BLOCK) {
		__m256i u[8];
		float d[8], m[8];

		for (int r = 0; r < OPS_PANEL_ROWS; r++) {
			const struct blk_q4_0 *x = (const struct blk_q4_0 *)row_at(w, ws, r < nr ? r : 0) + b;

			u[r] = r < nr ? nibbles(x->qs) : _mm256_setzero_si256();
			d[r] = r < nr ? f16(x->d) : 0.0f;
			m[r] = r < nr ? -8.0f * d[r] : 0.0f;
		}
		panel_store(pb, u, _mm256_loadu_ps(d), _mm256_loadu_ps(m));
	}
}

void pack_q8_0_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel)
{
	uint8_t *pb = panel;

	for (int64_t b = 0; b < n / QK8_0; b++, pb += OPS_PANEL_BLOCK) {
		__m256i u[8];
		float d[8];

		for (int r = 0; r < OPS_PANEL_ROWS; r++) {
			const struct blk_q8_0 *x = (const struct blk_q8_0 *)row_at(w, ws, r < nr ? r : 0) + b;

			u[r] = r < nr ? _mm256_loadu_si256((const __m256i *)x->qs) : _mm256_setzero_si256();
			d[r] = r < nr ? f16(x->d) : 0.0f;
		}
		panel_store(pb, u, _mm256_loadu_ps(d), _mm256_setzero_ps());
	}
}

/* q4_k / q5_k: each super-block gives 8 panel blocks (its sub-blocks). */
static inline void pack_k_affine(const void *w, size_t ws, int nr, int64_t n, void *panel, int five)
{
	const __m256i m15 = _mm256_set1_epi8(15), m16 = _mm256_set1_epi8(16);
	uint8_t *pb = panel;

	for (int64_t i = 0; i < n / QK_K; i++, pb += 8 * OPS_PANEL_BLOCK) {
		__m256i u[8][8];  /* [sub-block][row] */
		float d[8][8], m[8][8];

		for (int r = 0; r < OPS_PANEL_ROWS; r++) {
			const uint8_t *qs, *scales, *qh = NULL;
			float dd, dmin;
			__m256i h = _mm256_setzero_si256();

			if (r >= nr) {
				for (int j = 0; j < 8; j++) {
					u[j][r] = _mm256_setzero_si256();
					d[j][r] = m[j][r] = 0.0f;
				}
				continue;
			}
			if (five) {
				const struct blk_q5_k *x = (const struct blk_q5_k *)row_at(w, ws, r) + i;

				qs = x->qs, scales = x->scales, qh = x->qh, dd = f16(x->d), dmin = f16(x->dmin);
				h = _mm256_loadu_si256((const __m256i *)qh);
			} else {
				const struct blk_q4_k *x = (const struct blk_q4_k *)row_at(w, ws, r) + i;

				qs = x->qs, scales = x->scales, dd = f16(x->d), dmin = f16(x->dmin);
			}
			for (int c = 0; c < 4; c++) {
				__m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));

				u[2 * c][r] = _mm256_and_si256(q, m15);
				u[2 * c + 1][r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m15);
				if (five) {
					u[2 * c][r] = _mm256_or_si256(u[2 * c][r], _mm256_and_si256(_mm256_slli_epi16(h, 4), m16));
					u[2 * c + 1][r] = _mm256_or_si256(u[2 * c + 1][r],
									  _mm256_and_si256(_mm256_slli_epi16(h, 3), m16));
					h = _mm256_srli_epi16(h, 2); /* see dequant_q5_k_avx2 */
				}
			}
			for (int j = 0; j < 8; j++) {
				uint8_t sc, mn;

				ops_k_scale_min(scales, j, &sc, &mn);
				d[j][r] = dd * sc;
				m[j][r] = -(dmin * mn);
			}
		}
		for (int j = 0; j < 8; j++)
			panel_store(pb + j * OPS_PANEL_BLOCK, u[j], _mm256_loadu_ps(d[j]), _mm256_loadu_ps(m[j]));
	}
}

void pack_q4_k_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel)
{
	pack_k_affine(w, ws, nr, n, panel, 0);
}

void pack_q5_k_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel)
{
	pack_k_affine(w, ws, nr, n, panel, 1);
}

/* The panel dot for nc (constant after inlining) activation rows. kind
 * decides how often the int16 sums go to int32: U4 after all 8 groups (8 x 2
 * x 15 x 127 < 2^15), U5 after 4 (4 x 2 x 31 x 127), S8 after each (|w| and y
 * with w's sign, 2 x 128 x 127). The group loops unroll by 2, not 8: fully
 * unrolled, GCC hoisted every group's loads and spilled the 16 vector
 * registers' sums to the stack (q4_0 prefill: 145 against 210 GFLOP/s a
 * core, bench_kernels mm). */
static inline __attribute__((always_inline)) void panel_cols(int64_t n, const uint8_t *panel, const void *a, size_t as,
							     int nc, float *s, size_t ss, int kind)
{
	const __m256i ones = _mm256_set1_epi16(1);
	const struct blk_q8_32 *y[OPS_PANEL_COLS];
	__m256 acc[OPS_PANEL_COLS], accm[OPS_PANEL_COLS];
	const uint8_t *pb = panel;

	for (int c = 0; c < nc; c++) {
		y[c] = (const void *)((const char *)a + (size_t)c * as);
		acc[c] = _mm256_setzero_ps();
		accm[c] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < n / 32; b++, pb += OPS_PANEL_BLOCK) {
		__m256i isum[OPS_PANEL_COLS];
		__m256 d = _mm256_loadu_ps((const float *)(pb + 256));

		if (kind == OPS_PANEL_S8) {
			for (int c = 0; c < nc; c++)
				isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
			for (int g = 0; g < 8; g++) {
				__m256i wq = _mm256_loadu_si256((const __m256i *)(pb + 32 * g)), aw = _mm256_abs_epi8(wq);

				for (int c = 0; c < nc; c++) {
					__m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(y[c][b].qs + 4 * g), wq));

					isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, ones));
				}
			}
		} else {
			int per = kind == OPS_PANEL_U4 ? 8 : 4;

			for (int c = 0; c < nc; c++)
				isum[c] = _mm256_setzero_si256();
			for (int g0 = 0; g0 < 8; g0 += per) {
				__m256i s16[OPS_PANEL_COLS];

				for (int c = 0; c < nc; c++)
					s16[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
				for (int g = g0; g < g0 + per; g++) {
					__m256i wq = _mm256_loadu_si256((const __m256i *)(pb + 32 * g));

					for (int c = 0; c < nc; c++)
						s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(wq, bcast4(y[c][b].qs + 4 * g)));
				}
				for (int c = 0; c < nc; c++)
					isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s16[c], ones));
			}
		}
		for (int c = 0; c < nc; c++)
			acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, _mm256_set1_ps(y[c][b].d)), acc[c]);
	}
	if (kind != OPS_PANEL_S8) {
		/* the offsets: sum over blocks of m (per row) times s (per column) */
		pb = panel;
		for (int64_t b = 0; b < n / 32; b++, pb += OPS_PANEL_BLOCK) {
			__m256 m = _mm256_loadu_ps((const float *)(pb + 288));

			for (int c = 0; c < nc; c++)
				accm[c] = _mm256_fmadd_ps(m, _mm256_set1_ps(y[c][b].s), accm[c]);
		}
	}
	for (int c = 0; c < nc; c++)
		_mm256_storeu_ps(s + (size_t)c * ss, _mm256_add_ps(acc[c], accm[c]));
}

/* AVX2 has 16 vector registers: at most 4 columns at a time. */
#define PANEL_DISPATCH(NAME, KIND)                                                                     \
	void NAME(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss)       \
	{                                                                                              \
		if (nc > 4) {                                                                          \
			panel_cols(n, panel, a, as, 4, s, ss, KIND);                                   \
			a = (const char *)a + 4 * as;                                                  \
			s += 4 * ss;                                                                   \
			nc -= 4;                                                                       \
		}                                                                                      \
		switch (nc) {                                                                          \
		case 4: panel_cols(n, panel, a, as, 4, s, ss, KIND); break;                            \
		case 3: panel_cols(n, panel, a, as, 3, s, ss, KIND); break;                            \
		case 2: panel_cols(n, panel, a, as, 2, s, ss, KIND); break;                            \
		default: panel_cols(n, panel, a, as, 1, s, ss, KIND); break;                           \
		}                                                                                      \
	}

/* q6_k panels (ops_impl.h): each half of a super-block's values is four runs
 * of 32 from its ql and qh bytes (see q6_k_value in quant.c), then every 4
 * values go to their row's place in the group. */
void pack_q6_k_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel)
{
	const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
	uint8_t *pb = panel;

	memset(panel, 0, (size_t)(n / QK_K) * OPS_PANEL_K6_BLOCK);
	for (int64_t b = 0; b < n / QK_K; b++, pb += OPS_PANEL_K6_BLOCK)
		for (int r = 0; r < nr; r++) {
			const struct blk_q6_k *x = (const struct blk_q6_k *)row_at(w, ws, r) + b;
			uint8_t v[QK_K];
			float d = f16(x->d);

			for (int h = 0; h < 2; h++) {
				__m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
				__m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
				__m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
				__m256i lo[4] = { l0, l1, _mm256_srli_epi16(l0, 4), _mm256_srli_epi16(l1, 4) };

				for (int g = 0; g < 4; g++) {
					__m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m3);
					__m256i q = _mm256_or_si256(_mm256_and_si256(lo[g], m15), _mm256_slli_epi16(hi, 4));

					_mm256_storeu_si256((__m256i *)(v + 128 * h + 32 * g), _mm256_sub_epi8(q, k32));
				}
			}
			for (int g = 0; g < QK_K / 4; g++)
				memcpy(pb + 32 * g + 4 * r, v + 4 * g, 4);
			for (int h = 0; h < QK_K / 16; h++)
				pb[2048 + 16 * h + 2 * r] = pb[2048 + 16 * h + 2 * r + 1] = (uint8_t)x->scales[h];
			memcpy(pb + 2304 + 4 * r, &d, sizeof d);
		}
}

/* q6_k panels (ops_impl.h): |q - 32| times y with q's sign, each scale's 16
 * values summed in int16, then multiplied by the rows' scales (vpmaddwd). */
static inline __attribute__((always_inline)) void panel_k6_cols(int64_t n, const uint8_t *panel, const void *a,
								size_t as, int nc, float *s, size_t ss)
{
	const struct blk_q8_32 *y[4];
	__m256 acc[4];
	const uint8_t *pb = panel;

	for (int c = 0; c < nc; c++) {
		y[c] = (const void *)((const char *)a + (size_t)c * as);
		acc[c] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < n / QK_K; b++, pb += OPS_PANEL_K6_BLOCK) {
		__m256i isum[4];

		for (int c = 0; c < nc; c++)
			isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 1
		for (int j = 0; j < 8; j++) { /* a block of 32 activations: two scales */
			const uint8_t *pj = pb + 256 * j;

			for (int hh = 0; hh < 2; hh++) {
				__m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(pb + 2048 + 32 * j + 16 * hh)));
				__m256i s16[4];

				for (int c = 0; c < nc; c++)
					s16[c] = _mm256_setzero_si256();
				for (int e = 4 * hh; e < 4 * hh + 4; e++) {
					__m256i wq = _mm256_loadu_si256((const __m256i *)(pj + 32 * e)), aw = _mm256_abs_epi8(wq);

					for (int c = 0; c < nc; c++)
						s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(aw,
							_mm256_sign_epi8(bcast4(y[c][8 * b + j].qs + 4 * e), wq)));
				}
				for (int c = 0; c < nc; c++)
					isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s16[c], sc));
			}
		}
		{
			__m256 d = _mm256_loadu_ps((const float *)(pb + 2304));

			for (int c = 0; c < nc; c++)
				acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]),
							 _mm256_mul_ps(d, _mm256_set1_ps(y[c][8 * b].d)), acc[c]);
		}
	}
	for (int c = 0; c < nc; c++)
		_mm256_storeu_ps(s + (size_t)c * ss, acc[c]);
}

void panel_k6_avx2(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss)
{
	while (nc > 0) {
		int k = nc > 4 ? 4 : nc;

		switch (k) {
		case 4: panel_k6_cols(n, panel, a, as, 4, s, ss); break;
		case 3: panel_k6_cols(n, panel, a, as, 3, s, ss); break;
		case 2: panel_k6_cols(n, panel, a, as, 2, s, ss); break;
		default: panel_k6_cols(n, panel, a, as, 1, s, ss); break;
		}
		a = (const char *)a + (size_t)k * as;
		s += (size_t)k * ss;
		nc -= k;
	}
}

PANEL_DISPATCH(panel_u4_avx2, OPS_PANEL_U4)
PANEL_DISPATCH(panel_u5_avx2, OPS_PANEL_U5)
PANEL_DISPATCH(panel_s8_avx2, OPS_PANEL_S8)

/* ---- the interleaved layout (see ops_impl.h; the blocks of 32 with nibbles: quant_more_avx2.c) */

/* q8_0 groups: |w| times y with w's sign, to int32 after each part. */
static inline __attribute__((always_inline)) void q8_0_x8_cols(int64_t n, const uint8_t *grp, const void *a,
							       size_t as, int nc, float *s, size_t ss)
{
	const __m256i ones = _mm256_set1_epi16(1);
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

			for (int c = 0; c < nc; c++) {
				__m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(y[c][b].qs + 4 * g), wq));

				isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, ones));
			}
		}
		for (int c = 0; c < nc; c++)
			acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, _mm256_set1_ps(y[c][b].d)), acc[c]);
	}
	for (int c = 0; c < nc; c++)
		_mm256_storeu_ps(s + (size_t)c * ss, acc[c]);
}

#define X8_DISPATCH(NAME, IMPL)                                                                         \
	void NAME(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss)       \
	{                                                                                               \
		if (nc > 4) {                                                                           \
			IMPL(n, group, a, as, 4, s, ss);                                                \
			a = (const char *)a + 4 * as;                                                   \
			s += 4 * ss;                                                                    \
			nc -= 4;                                                                        \
		}                                                                                       \
		switch (nc) {                                                                           \
		case 4: IMPL(n, group, a, as, 4, s, ss); break;                                         \
		case 3: IMPL(n, group, a, as, 3, s, ss); break;                                         \
		case 2: IMPL(n, group, a, as, 2, s, ss); break;                                         \
		default: IMPL(n, group, a, as, 1, s, ss); break;                                        \
		}                                                                                       \
	}

X8_DISPATCH(gemv_q8_0_x8_avx2, q8_0_x8_cols)

/* ---- q4_k and q5_k in the interleaved layout (ops_impl.h) ------------------------------ */

/* 32 bits as 32 bytes: 16 where the bit is set. */
static inline __m256i bits_to_16(uint32_t bits)
{
	const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
					      3, 3, 3, 3, 3, 3, 3, 3);
	const __m256i sel = _mm256_set1_epi64x(0x8040201008040201ll);
	__m256i x = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf), sel);

	return _mm256_and_si256(_mm256_cmpeq_epi8(x, sel), _mm256_set1_epi8(16));
}

/* The 8 scales and mins of a q4_k/q5_k group super-block unpacked to bytes:
 * sc[8j + r], mn[8r + j]. */
static inline void k_x8_scales(const uint8_t *group, uint8_t sc[64], uint8_t mn[64])
{
	const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
	__m256i L0 = _mm256_loadu_si256((const __m256i *)(group + 32));
	__m256i L1 = _mm256_loadu_si256((const __m256i *)(group + 64));
	__m256i H = _mm256_loadu_si256((const __m256i *)(group + 96));

	_mm256_storeu_si256((__m256i *)sc, _mm256_or_si256(_mm256_and_si256(L0, m4),
			    _mm256_slli_epi16(_mm256_and_si256(H, m3), 4)));
	_mm256_storeu_si256((__m256i *)(sc + 32), _mm256_or_si256(_mm256_and_si256(L1, m4),
			    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 2), m3), 4)));
	_mm256_storeu_si256((__m256i *)mn, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4),
			    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 4), m3), 4)));
	_mm256_storeu_si256((__m256i *)(mn + 32), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),
			    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 6), m3), 4)));
}

/* The two registers (elements 8k + e, 8k + 4 + e) of chunk k of sub-block j
 * of a q4_k/q5_k group super-block: lane r holds row r. */
static inline __attribute__((always_inline)) void k_x8_regs(const uint8_t *group, int j, int k, __m256i v[2], int five)
{
	const __m256i m4 = _mm256_set1_epi8(15);
	const uint8_t *pair = group + 128 + (five ? 320 : 256) * (j / 2);
	__m256i x = _mm256_loadu_si256((const __m256i *)(pair + 32 * (j % 2) + 64 * k));

	v[0] = _mm256_and_si256(x, m4);
	v[1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
	if (five) {
		const uint8_t *qh = pair + 256 + 16 * k + 4 * (j % 2);
		uint32_t bl, bh;

		memcpy(&bl, qh, 4);
		memcpy(&bh, qh + 8, 4);
		v[0] = _mm256_add_epi8(v[0], bits_to_16(bl));
		v[1] = _mm256_add_epi8(v[1], bits_to_16(bh));
	}
}

/* One column against a group on 256-bit registers: lane r holds row r. Per
 * sub-block j, the half p = j % 2 of each chunk of pair j / 2 gives 8
 * registers of 4 values a row; vpmaddubsw against the broadcast activation
 * bytes, the int16 sums added (q4_k: all 8, 8 x 2 x 15 x 127 < 2^15; q5_k:
 * 4 at a time) and vpmaddwd by the rows' scales. The mins: per row pair,
 * vpmaddwd of the widened mins by the 32-element sums, reduced by two rounds
 * of vphaddd, which leave the rows in the order 0 2 4 6 1 3 5 7 (the dmin
 * vector is put in that order too, and the sums back at the end). */
static inline __attribute__((always_inline)) void gemv_k_x8_col(int64_t n, const uint8_t *group,
								 const struct blk_q8_256 *y, float *s, int five)
{
	const __m256i ones = _mm256_set1_epi16(1);
	const __m256i ord = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
	const size_t sbs = five ? OPS_X8_Q5_K_SB : OPS_X8_Q4_K_SB;
	__m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
	uint8_t sc[64], mn[64];
	float f[8], m[8];

	for (int64_t b = 0; b < n / QK_K; b++, group += sbs) {
		__m256i isum = _mm256_setzero_si256(), bs, ms;
		__m256 dy = _mm256_set1_ps(y[b].d);

		k_x8_scales(group, sc, mn);
		for (int j = 0; j < 8; j++) {
			const int8_t *yq = y[b].qs + 32 * j;
			__m256i sc32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * j))), scw, p16[2];

			scw = _mm256_or_si256(sc32, _mm256_slli_epi32(sc32, 16));
			p16[0] = p16[1] = _mm256_setzero_si256();
			for (int k = 0; k < 4; k++) {
				__m256i v[2];
				int32_t ya, yb;
				int h = five ? k / 2 : 0;

				k_x8_regs(group, j, k, v, five);
				memcpy(&ya, yq + 8 * k, 4);
				memcpy(&yb, yq + 8 * k + 4, 4);
				p16[h] = _mm256_add_epi16(p16[h], _mm256_maddubs_epi16(v[0], _mm256_set1_epi32(ya)));
				p16[h] = _mm256_add_epi16(p16[h], _mm256_maddubs_epi16(v[1], _mm256_set1_epi32(yb)));
			}
			isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16[0], scw));
			if (five)
				isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16[1], scw));
		}
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
				      _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)group)), dy), acc);
		/* sum_j m_j (bsums 2j + 2j+1), per row: words j of both lanes */
		bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[b].bsums), ones);
		bs = _mm256_permute4x64_epi64(_mm256_packs_epi32(bs, bs), 0x88);
		ms = _mm256_hadd_epi32(
			_mm256_hadd_epi32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)mn)), bs),
					  _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(mn + 16))), bs)),
			_mm256_hadd_epi32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(mn + 32))), bs),
					  _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(mn + 48))), bs)));
		accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms),
				       _mm256_permutevar8x32_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(group + 16))), dy), ord),
				       accm);
	}
	_mm256_storeu_ps(f, acc);
	_mm256_storeu_ps(m, accm);
	for (int i = 0; i < 8; i++) {
		int r = i < 4 ? 2 * i : 2 * (i - 4) + 1; /* lane i of the mins holds row r */

		s[r] = f[r] - m[i];
	}
}

OPS_X8_EACH_COL(gemv_q4_k_x8_avx2, gemv_k_x8_col, 0)

OPS_X8_EACH_COL(gemv_q5_k_x8_avx2, gemv_k_x8_col, 1)

/* A q4_k/q5_k group's super-blocks as panel blocks: group 2c + h of
 * sub-block 2t + p is half p of chunk c of pair t, nibble h (ops_impl.h),
 * with q5_k's fifth bits; d and m per row from the group's d, dmin and 6-bit
 * values, rounded as pack_q4_k_x8_ref rounds them. */
static inline __attribute__((always_inline)) void pack_k_x8(const void *group, int64_t n, void *panel, int five)
{
	const uint8_t *sb = group;
	uint8_t *pb = panel;
	uint8_t sc[64], mn[64];

	for (int64_t b = 0; b < n / QK_K; b++, sb += five ? OPS_X8_Q5_K_SB : OPS_X8_Q4_K_SB) {
		__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sb));
		float dmin[8];

		_mm256_storeu_ps(dmin, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 16))));
		k_x8_scales(sb, sc, mn);
		for (int j = 0; j < 8; j++, pb += OPS_PANEL_BLOCK) {
			__m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * j))));
			float m[8];

			for (int k = 0; k < 4; k++) {
				__m256i v[2];

				k_x8_regs(sb, j, k, v, five);
				_mm256_storeu_si256((__m256i *)(pb + 64 * k), v[0]);
				_mm256_storeu_si256((__m256i *)(pb + 64 * k + 32), v[1]);
			}
			for (int r = 0; r < 8; r++)
				m[r] = -(dmin[r] * (float)mn[8 * r + j]);
			_mm256_storeu_ps((float *)(pb + 256), _mm256_mul_ps(d, scf));
			_mm256_storeu_ps((float *)(pb + 288), _mm256_loadu_ps(m));
		}
	}
}

void pack_q4_k_x8_avx2(const void *group, int64_t n, void *panel)
{
	pack_k_x8(group, n, panel, 0);
}

void pack_q5_k_x8_avx2(const void *group, int64_t n, void *panel)
{
	pack_k_x8(group, n, panel, 1);
}

/* q6_k's group registers for half p of unit u: values 0..63 of elements
 * 4q .. 4q + 3 of 16-group 2u + p, lane r holding row r. */
static inline void q6_k_x8_regs(const uint8_t *sb, int u, int p, __m256i v[4])
{
	const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
	const uint8_t *q = sb + 144 + 192 * u + 32 * p;
	__m256i x0 = _mm256_loadu_si256((const __m256i *)q), x1 = _mm256_loadu_si256((const __m256i *)(q + 64));
	__m256i hb = _mm256_loadu_si256((const __m256i *)(q + 128));

	v[0] = _mm256_or_si256(_mm256_and_si256(x0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
	v[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x0, 4), m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
	v[2] = _mm256_or_si256(_mm256_and_si256(x1, m4), _mm256_and_si256(hb, m30));
	v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
}

/* The 8 rows' int8 scales of 16-group g, each twice (the panel's sc row). */
static inline __m128i q6_k_x8_scales2(const uint8_t *sb, int g)
{
	const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);

	return _mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *)(sb + 16 + 8 * g)), dup);
}

/* The same as int16 pairs (both words of lane r). */
static inline __m256i q6_k_x8_scales(const uint8_t *sb, int g)
{
	return _mm256_cvtepi8_epi16(q6_k_x8_scales2(sb, g));
}

/* One column against a q6_k group on 256-bit registers: per 16-group,
 * vpmaddubsw of the values 0..63 (two registers' int16 sums at most: 2 x 2 x
 * 63 x 127 < 2^15), vpmaddwd by the scales, and 32 sc sum(y) off. */
static void gemv_q6_k_x8_col(int64_t n, const uint8_t *group, const struct blk_q8_256 *y, float *s)
{
	__m256 acc = _mm256_setzero_ps();

	for (int64_t b = 0; b < n / QK_K; b++, group += OPS_X8_Q6_K_SB) {
		__m256i isum = _mm256_setzero_si256();

		for (int g = 0; g < 16; g++) {
			const int8_t *yq = y[b].qs + 16 * g;
			__m256i v[4], sc = q6_k_x8_scales(group, g), p01, p23;
			int32_t yw[4];

			memcpy(yw, yq, sizeof yw);
			q6_k_x8_regs(group, g / 2, g % 2, v);
			p01 = _mm256_add_epi16(_mm256_maddubs_epi16(v[0], _mm256_set1_epi32(yw[0])),
					       _mm256_maddubs_epi16(v[1], _mm256_set1_epi32(yw[1])));
			p23 = _mm256_add_epi16(_mm256_maddubs_epi16(v[2], _mm256_set1_epi32(yw[2])),
					       _mm256_maddubs_epi16(v[3], _mm256_set1_epi32(yw[3])));
			isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_madd_epi16(p01, sc), _mm256_madd_epi16(p23, sc)));
			/* sc (bsum) in both words: 2 sc bsum a lane, times 16 */
			isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(_mm256_madd_epi16(sc, _mm256_set1_epi16(y[b].bsums[g])), 4));
		}
		acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
				      _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)group)), _mm256_set1_ps(y[b].d)),
				      acc);
	}
	_mm256_storeu_ps(s, acc);
}

OPS_X8_EACH_COL(gemv_q6_k_x8_avx2, gemv_q6_k_x8_col)

/* A q6_k group's super-blocks as q6_k panel blocks (ops_impl.h): group 4G + q
 * of the panel is register q of 16-group G, less 32; the scales doubled. */
void pack_q6_k_x8_avx2(const void *group, int64_t n, void *panel)
{
	const __m256i m32 = _mm256_set1_epi8(32);
	const uint8_t *sb = group;
	uint8_t *pb = panel;

	for (int64_t b = 0; b < n / QK_K; b++, sb += OPS_X8_Q6_K_SB, pb += OPS_PANEL_K6_BLOCK) {
		for (int g = 0; g < 16; g++) {
			__m256i v[4];

			q6_k_x8_regs(sb, g / 2, g % 2, v);
			for (int q = 0; q < 4; q++)
				_mm256_storeu_si256((__m256i *)(pb + 32 * (4 * g + q)), _mm256_sub_epi8(v[q], m32));
			_mm_storeu_si128((__m128i *)(pb + 2048 + 16 * g), q6_k_x8_scales2(sb, g));
		}
		_mm256_storeu_ps((float *)(pb + 2304), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sb)));
	}
}
