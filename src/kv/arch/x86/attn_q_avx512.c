/* attn_q_avx512.c - the q4 page kernels (kv_score_q_ref and kv_accum_q_ref
 * in attn.c, attn_impl.h says what they compute) on 512-bit registers with
 * AVX512-VNNI, for d 64 and 128. The same integers as the references and
 * the AVX2 versions.
 *
 * Keys: a row's 64 codes widen to int16 in two registers, channels 0-15 and
 * 32-47 in one, 16-31 and 48-63 in the other (the order the nibbles unpack
 * in), and each head's 16-bit query is laid out alike; two vpdpwssd give a
 * row's 16 partial sums for a head, and the partial sums of 16 rows are
 * added across lanes in four steps into one register of 16 rows' scores.
 *
 * Values:
 * The codes of four rows are interleaved once per tile so that each int32
 * lane holds one channel's four codes (rows 4p..4p+3, one byte each); one
 * vpdpbusd then adds those four codes times the rows' 8-bit weights into
 * the channel's int32 sum, 16 channels an instruction, the codes unsigned
 * (0..15) and the weights signed bytes (0..127). The interleaving leaves a
 * 64-channel chunk in 4 registers whose 128-bit lanes alternate between the
 * chunk's two groups of 32 channels:
 *
 *   register 0: channels 0-3, 32-35, 4-7, 36-39
 *   register 1: channels 8-11, 40-43, 12-15, 44-47
 *   register 2: channels 16-19, 48-51, 20-23, 52-55
 *   register 3: channels 24-27, 56-59, 28-31, 60-63
 *
 * so a weight register holds group 2t's 4 bytes in lanes 0 and 2 and group
 * 2t + 1's in lanes 1 and 3. The int32 sums of a sub-tile of KV_Q_SUB rows
 * are scaled into float (each group by its own step), and the 4 float
 * registers go back to channel order once per head and tile. */
#include <immintrin.h>
#include <string.h>

#include "kv/attn_impl.h"

/* prep_query, page_matters (INLINE too) */
#define DOT_I16(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
#include "kv/arch/x86/attn_q_x86.h"

/* The codes of 64 channels of a row in channel order within 128-bit lanes:
 * lo = channels 0-15 | 32-47, hi = 16-31 | 48-63 (one byte each). */
INLINE void row_bytes(const uint8_t *p, __m256i *lo, __m256i *hi)
{
	__m256i e, o;

	row_eo(p, &e, &o);
	*lo = _mm256_unpacklo_epi8(e, o);
	*hi = _mm256_unpackhi_epi8(e, o);
}

/* Rows r[0..3] (NULL: zero codes) of one 64-channel chunk as 4 registers of
 * 16 channels x 4 rows, in the lane order of the top of this file. */
INLINE void quad_codes(const uint8_t *const r[4], __m512i z[4])
{
	__m256i lo[4], hi[4];

	for (int k = 0; k < 4; k++) {
		if (r[k]) {
			row_bytes(r[k], &lo[k], &hi[k]);
		} else {
			lo[k] = _mm256_setzero_si256();
			hi[k] = _mm256_setzero_si256();
		}
	}
	{
		/* rows 0,1 and 2,3 paired per channel, then the pairs paired */
		__m256i a01 = _mm256_unpacklo_epi8(lo[0], lo[1]), b01 = _mm256_unpackhi_epi8(lo[0], lo[1]);
		__m256i c01 = _mm256_unpacklo_epi8(hi[0], hi[1]), d01 = _mm256_unpackhi_epi8(hi[0], hi[1]);
		__m256i a23 = _mm256_unpacklo_epi8(lo[2], lo[3]), b23 = _mm256_unpackhi_epi8(lo[2], lo[3]);
		__m256i c23 = _mm256_unpacklo_epi8(hi[2], hi[3]), d23 = _mm256_unpackhi_epi8(hi[2], hi[3]);

		z[0] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_unpacklo_epi16(a01, a23)),
					  _mm256_unpackhi_epi16(a01, a23), 1);
		z[1] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_unpacklo_epi16(b01, b23)),
					  _mm256_unpackhi_epi16(b01, b23), 1);
		z[2] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_unpacklo_epi16(c01, c23)),
					  _mm256_unpackhi_epi16(c01, c23), 1);
		z[3] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_unpacklo_epi16(d01, d23)),
					  _mm256_unpackhi_epi16(d01, d23), 1);
	}
}

/* Lane r of the result: the sum of the 16 lanes of a[r] (16 rows' partial
 * sums into 16 rows' sums). */
INLINE __m512i sum16_epi32(const __m512i a[16])
{
	__m512i s[8], t[4], w01, w23;

	for (int k = 0; k < 8; k++) /* per 128-bit lane: rows 2k, 2k + 1, 2k, 2k + 1 */
		s[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2 * k], a[2 * k + 1]),
					_mm512_unpackhi_epi32(a[2 * k], a[2 * k + 1]));
	for (int k = 0; k < 4; k++) /* per 128-bit lane: rows 4k .. 4k + 3 */
		t[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(s[2 * k], s[2 * k + 1]),
					_mm512_unpackhi_epi64(s[2 * k], s[2 * k + 1]));
	/* the four 128-bit lanes of each t[k] added */
	w01 = _mm512_add_epi32(_mm512_shuffle_i32x4(t[0], t[1], 0x44), _mm512_shuffle_i32x4(t[0], t[1], 0xee));
	w23 = _mm512_add_epi32(_mm512_shuffle_i32x4(t[2], t[3], 0x44), _mm512_shuffle_i32x4(t[2], t[3], 0xee));
	return _mm512_add_epi32(_mm512_shuffle_i32x4(w01, w23, 0x88), _mm512_shuffle_i32x4(w01, w23, 0xdd));
}

/* kv_score_q_avx512 for nc chunks of 64 channels (a constant where inlined). */
INLINE void score_q4_512(uint32_t nc, const uint16_t *ps, const uint8_t *codes, uint32_t n, const float *q,
			 uint32_t nq, float scale, float *logit, size_t stride)
{
	const uint32_t d = 64 * nc;
	const size_t rb = 32 * (size_t)nc;
	float s[KV_Q_MAX_D], m[KV_Q_MAX_D], base[QHEADS], r[QHEADS];
	__m256i qv[KV_Q_MAX_D / 16];
	__m512i qz[QHEADS][KV_Q_MAX_D / 32], kz[16][KV_Q_MAX_D / 32];

	page_params(ps, d, s, m);
	for (uint32_t h0 = 0; h0 < nq; h0 += QHEADS) {
		uint32_t nh = nq - h0 < QHEADS ? nq - h0 : QHEADS;

		for (uint32_t h = 0; h < nh; h++) {
			prep_query(q + (size_t)(h0 + h) * d, s, m, d, qv, &base[h], &r[h]);
			for (uint32_t t = 0; t < nc; t++) { /* the rows' channel order */
				qz[h][2 * t] = _mm512_inserti64x4(_mm512_castsi256_si512(qv[4 * t]), qv[4 * t + 2], 1);
				qz[h][2 * t + 1] = _mm512_inserti64x4(_mm512_castsi256_si512(qv[4 * t + 1]), qv[4 * t + 3], 1);
			}
		}
		for (uint32_t i0 = 0; i0 < n; i0 += 16) {
			uint32_t mr = n - i0 < 16 ? n - i0 : 16;

			for (uint32_t i = 0; i < 16; i++)
				for (uint32_t t = 0; t < nc; t++) {
					if (i < mr) {
						__m256i e, o;

						row_eo(codes + (i0 + i) * rb + 32 * t, &e, &o);
						kz[i][2 * t] = _mm512_cvtepu8_epi16(_mm256_unpacklo_epi8(e, o));
						kz[i][2 * t + 1] = _mm512_cvtepu8_epi16(_mm256_unpackhi_epi8(e, o));
					} else {
						kz[i][2 * t] = kz[i][2 * t + 1] = _mm512_setzero_si512();
					}
				}
			for (uint32_t h = 0; h < nh; h++) {
				__m512i acc[16];

				/* |sum| <= d * 15 * 32767: within int32 */
				for (uint32_t i = 0; i < 16; i++) {
					acc[i] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), kz[i][0], qz[h][0]);
					for (uint32_t k = 1; k < 2 * nc; k++)
						acc[i] = _mm512_dpwssd_epi32(acc[i], kz[i][k], qz[h][k]);
				}
				_mm512_mask_storeu_ps(logit + (size_t)(h0 + h) * stride + i0, (__mmask16)((1u << mr) - 1),
						      _mm512_mul_ps(_mm512_set1_ps(scale),
								    _mm512_fmadd_ps(_mm512_set1_ps(r[h]),
										    _mm512_cvtepi32_ps(sum16_epi32(acc)),
										    _mm512_set1_ps(base[h]))));
			}
		}
	}
}

Q4_SCORE_ENTRY(kv_score_q_avx512, score_q4_512)

/* kv_accum_q_avx512 for nc chunks of 64 channels (a constant where inlined). */
INLINE void accum_q4(uint32_t nc, const uint16_t *par, const uint8_t *codes, uint32_t n, const float *w, size_t stride,
		     uint32_t nq, float *out)
{
	const uint32_t ng = 2 * nc, nquad = (n + 3) / 4, nsub = (n + KV_Q_SUB - 1) / KV_Q_SUB;
	const size_t rb = 32 * (size_t)nc;
	const __mmask16 tail = (__mmask16)(n % KV_Q_SUB ? (1u << n % KV_Q_SUB) - 1 : 0xffff);
	/* back to channel order: lanes 0 and 2 of a pair of registers, then 1 and 3 */
	const __m512i even = _mm512_set_epi32(27, 26, 25, 24, 19, 18, 17, 16, 11, 10, 9, 8, 3, 2, 1, 0);
	const __m512i odd = _mm512_set_epi32(31, 30, 29, 28, 23, 22, 21, 20, 15, 14, 13, 12, 7, 6, 5, 4);
	float sp[KV_Q_MAX_NG][KV_Q_TILE], mp[KV_Q_MAX_NG][KV_Q_TILE];
	__m512i z[KV_Q_TILE / 4][KV_Q_MAX_D / 64][4];

	for (uint32_t g = 0; g < ng; g++)
		for (uint32_t i = 0; i < nsub * KV_Q_SUB; i++) {
			sp[g][i] = i < n ? _cvtsh_ss(par[((size_t)i * ng + g) * 2]) : 0.0f;
			mp[g][i] = i < n ? _cvtsh_ss(par[((size_t)i * ng + g) * 2 + 1]) : 0.0f;
		}
	for (uint32_t p = 0; p < nquad; p++)
		for (uint32_t t = 0; t < nc; t++) {
			const uint8_t *r[4];

			for (uint32_t k = 0; k < 4; k++)
				r[k] = 4 * p + k < n ? codes + (4 * p + k) * rb + 32 * t : NULL;
			quad_codes(r, z[p][t]);
		}
	for (uint32_t h = 0; h < nq; h++) {
		const float *wh = w + (size_t)h * stride;
		__m512 wv[KV_Q_TILE / KV_Q_SUB];
		__mmask16 any = 0;

		for (uint32_t s = 0; s < nsub; s++) {
			__m512 x = _mm512_maskz_loadu_ps(s + 1 < nsub ? 0xffff : tail, wh + KV_Q_SUB * s);

			wv[s] = _mm512_max_ps(x, _mm512_setzero_ps()); /* NaN and negatives: 0 */
			any |= _mm512_cmp_ps_mask(wv[s], _mm512_setzero_ps(), _CMP_GT_OQ);
		}
		if (!any)
			continue;
		for (uint32_t t = 0; t < nc; t++) {
			float bb[2];
			__m512 acc[4];

			for (int k = 0; k < 2; k++) {
				__m512 vb = _mm512_setzero_ps();

				for (uint32_t s = 0; s < nsub; s++)
					vb = _mm512_fmadd_ps(wv[s], _mm512_loadu_ps(mp[2 * t + k] + KV_Q_SUB * s), vb);
				bb[k] = _mm512_reduce_add_ps(vb);
			}
			for (int k = 0; k < 4; k++)
				acc[k] = _mm512_setzero_ps();
			for (uint32_t s = 0; s < nsub; s++) {
				float rr[2];
				__m128i ub[2];
				__m512i W, isum[4];

				for (int k = 0; k < 2; k++) {
					__m512 u = _mm512_mul_ps(wv[s], _mm512_loadu_ps(sp[2 * t + k] + KV_Q_SUB * s));
					float umax = _mm512_reduce_max_ps(u);
					__m512 inv = _mm512_set1_ps(umax > 0.0f ? 127.0f / umax : 0.0f);

					rr[k] = umax / 127.0f;
					ub[k] = _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(u, inv)));
				}
				if (!(rr[0] > 0.0f) && !(rr[1] > 0.0f))
					continue;
				/* 128-bit lanes: group 2t, 2t + 1, 2t, 2t + 1 */
				W = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(ub[1], ub[0])),
						       _mm256_set_m128i(ub[1], ub[0]), 1);
				for (int k = 0; k < 4; k++)
					isum[k] = _mm512_setzero_si512();
				for (uint32_t p = 4 * s; p < nquad && p < 4 * s + 4; p++) {
					__m512i wq;

					switch (p - 4 * s) { /* the quad's 4 weight bytes of each group */
					case 0: wq = _mm512_shuffle_epi32(W, 0x00); break;
					case 1: wq = _mm512_shuffle_epi32(W, 0x55); break;
					case 2: wq = _mm512_shuffle_epi32(W, 0xaa); break;
					default: wq = _mm512_shuffle_epi32(W, 0xff); break;
					}
					for (int k = 0; k < 4; k++)
						isum[k] = _mm512_dpbusd_epi32(isum[k], z[p][t][k], wq);
				}
				{
					/* each lane's group step: lanes 0 and 2 group 2t */
					__m512 R = _mm512_mask_blend_ps(0x0f0f, _mm512_set1_ps(rr[1]), _mm512_set1_ps(rr[0]));

					for (int k = 0; k < 4; k++)
						acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[k]), R, acc[k]);
				}
			}
			{
				float *o = out + (size_t)h * nc * 64 + 64 * t;
				__m512 b0 = _mm512_set1_ps(bb[0]), b1 = _mm512_set1_ps(bb[1]);

				_mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o),
								  _mm512_add_ps(_mm512_permutex2var_ps(acc[0], even, acc[1]), b0)));
				_mm512_storeu_ps(o + 16, _mm512_add_ps(_mm512_loadu_ps(o + 16),
								       _mm512_add_ps(_mm512_permutex2var_ps(acc[2], even, acc[3]), b0)));
				_mm512_storeu_ps(o + 32, _mm512_add_ps(_mm512_loadu_ps(o + 32),
								       _mm512_add_ps(_mm512_permutex2var_ps(acc[0], odd, acc[1]), b1)));
				_mm512_storeu_ps(o + 48, _mm512_add_ps(_mm512_loadu_ps(o + 48),
								       _mm512_add_ps(_mm512_permutex2var_ps(acc[2], odd, acc[3]), b1)));
			}
		}
	}
}

Q4_ACCUM_ENTRY(kv_accum_q_avx512, accum_q4)
