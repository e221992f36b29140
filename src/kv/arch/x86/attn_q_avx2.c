/* attn_q_avx2.c - attention over q4 pages on their integer codes, AVX2
 * versions of kv_score_q_ref / kv_accum_q_ref (attn.c; attn_impl.h says what
 * they compute). d is 64 or 128.
 *
 * The codes are never turned into float rows. 32 bytes of a row (64
 * channels) split into two registers with one mask and one shift: the low
 * nibbles (even channels) and the high ones (odd channels). Keys: the two
 * are interleaved back into channel order and widened to int16, and each
 * head's 16-bit query is multiplied in with vpmaddwd (pairs summed into
 * int32). Values: the bytes of two rows are interleaved, so one vpmaddubsw
 * (unsigned codes by the rows' 8-bit weights) adds both rows' weighted codes
 * per channel; the 128-bit lanes hold the two 32-channel groups, each with
 * its own weights, and every 16 rows the int16 sums are scaled into float.
 * Integer sums are exact, so these give the references' integers; only the
 * float steps around them (the query's base term, the scaling) round in
 * another order. */
#include <immintrin.h>
#include <string.h>

#include "kv/attn_impl.h"

#define DOT_I16(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
#include "kv/arch/x86/attn_q_x86.h"

Q4_SCORE_ENTRY(kv_score_q_avx2, score_q4)

/* Sixteen weights as bytes (row order) from two vectors of 8 floats in [0, 127.5). */
static inline __m128i bytes16(__m256 u0, __m256 u1)
{
	__m256i v = _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_cvtps_epi32(u0), _mm256_cvtps_epi32(u1)), 0xd8);

	return _mm_packus_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

/* The 8 low halves (f16) of the int32 lanes of x as floats. */
static inline __m256 low_halves(__m256i x)
{
	/* packus: [x0..x3 x0..x3 | x4..x7 x4..x7]; qwords 0 and 2 to the low lane */
	__m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(x, x), 0x08);

	return _mm256_cvtph_ps(_mm256_castsi256_si128(p));
}

/* The value parameters of rows 0..n-1 as floats: sp[g][i], mp[g][i] (scale
 * and minimum of group g of row i), 0 for rows n..8*nv-1. par holds them per
 * row and group as f16 pairs: one int32 lane of a gather takes a pair. */
static inline void value_params(const uint16_t *par, uint32_t ng, uint32_t n, uint32_t nv, float sp[][KV_Q_TILE],
				float mp[][KV_Q_TILE])
{
	const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), lo = _mm256_set1_epi32(0xffff);
	const __m256i rows = _mm256_mullo_epi32(iota, _mm256_set1_epi32((int)ng));

	for (uint32_t g = 0; g < ng; g++)
		for (uint32_t v = 0; v < nv; v++) {
			__m256i idx = _mm256_add_epi32(rows, _mm256_set1_epi32((int)(8 * v * ng + g))), x;

			if (8 * v + 8 <= n)
				x = _mm256_i32gather_epi32((const int *)par, idx, 4);
			else /* rows past n: not read, 0 */
				x = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)par, idx,
								_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - 8 * v)), iota), 4);
			_mm256_storeu_ps(sp[g] + 8 * v, low_halves(_mm256_and_si256(x, lo)));
			_mm256_storeu_ps(mp[g] + 8 * v, low_halves(_mm256_srli_epi32(x, 16)));
		}
}

/* kv_accum_q_avx2 for nc chunks of 64 channels (a constant where inlined). */
INLINE void accum_q4(uint32_t nc, const uint16_t *par, const uint8_t *codes, uint32_t n, const float *w, size_t stride,
		     uint32_t nq, float *out)
{
	const uint32_t d = 64 * nc, ng = 2 * nc, np = (n + 1) / 2, nv = (n + 7) / 8;
	const size_t rb = 32 * (size_t)nc;
	float sp[KV_Q_MAX_NG][KV_Q_TILE], mp[KV_Q_MAX_NG][KV_Q_TILE];
	/* rows 2p and 2p + 1 byte-interleaved: [0] even channels of the low 8
	 * bytes of each lane, [1] of the high 8, [2] and [3] odd channels */
	__m256i ilv[KV_Q_TILE / 2][KV_Q_MAX_NG / 2][4];

	value_params(par, ng, n, nv, sp, mp);
	for (uint32_t p = 0; p < np; p++)
		for (uint32_t t = 0; t < nc; t++) {
			__m256i ea, oa, eb = _mm256_setzero_si256(), ob = _mm256_setzero_si256();

			row_eo(codes + 2 * p * rb + 32 * t, &ea, &oa);
			if (2 * p + 1 < n)
				row_eo(codes + (2 * p + 1) * rb + 32 * t, &eb, &ob);
			ilv[p][t][0] = _mm256_unpacklo_epi8(ea, eb);
			ilv[p][t][1] = _mm256_unpackhi_epi8(ea, eb);
			ilv[p][t][2] = _mm256_unpacklo_epi8(oa, ob);
			ilv[p][t][3] = _mm256_unpackhi_epi8(oa, ob);
		}
	for (uint32_t h = 0; h < nq; h++) {
		const float *wh = w + (size_t)h * stride;
		__m256 wv[KV_Q_TILE / 8];
		int any = 0;

		for (uint32_t v = 0; v < nv; v++) {
			__m256 x;

			if (8 * v + 8 <= n) {
				x = _mm256_loadu_ps(wh + 8 * v);
			} else {
				float t8[8] = { 0 };

				memcpy(t8, wh + 8 * v, (n - 8 * v) * sizeof(float));
				x = _mm256_loadu_ps(t8);
			}
			wv[v] = _mm256_max_ps(x, _mm256_setzero_ps()); /* NaN and negatives: 0 */
			any |= _mm256_movemask_ps(_mm256_cmp_ps(wv[v], _mm256_setzero_ps(), _CMP_GT_OQ));
		}
		if (!any)
			continue;
		for (uint32_t t = 0; t < nc; t++) {
			float bb[2];
			__m256 acc[8];

			for (int k = 0; k < 2; k++) {
				__m256 vb = _mm256_setzero_ps();

				for (uint32_t v = 0; v < nv; v++)
					vb = _mm256_fmadd_ps(wv[v], _mm256_loadu_ps(mp[2 * t + k] + 8 * v), vb);
				bb[k] = hsum_ps(vb);
			}
			for (int k = 0; k < 8; k++)
				acc[k] = _mm256_setzero_ps();
			/* sub-tiles of 16 rows (8 pairs), each with its own weight scale */
			for (uint32_t v = 0; v < nv; v += 2) {
				float rr[2];
				__m128i ub[2];
				__m256i W, a16[4];
				uint32_t p0 = 4 * v;

				for (int k = 0; k < 2; k++) {
					const float *sg = sp[2 * t + k] + 8 * v;
					__m256 u0 = _mm256_mul_ps(wv[v], _mm256_loadu_ps(sg));
					__m256 u1 = v + 1 < nv ? _mm256_mul_ps(wv[v + 1], _mm256_loadu_ps(sg + 8)) : _mm256_setzero_ps();
					float umax = hmax_ps(_mm256_max_ps(u0, u1));
					__m256 inv = _mm256_set1_ps(umax > 0.0f ? 127.0f / umax : 0.0f);

					rr[k] = umax / 127.0f;
					ub[k] = bytes16(_mm256_mul_ps(u0, inv), _mm256_mul_ps(u1, inv));
				}
				if (!(rr[0] > 0.0f) && !(rr[1] > 0.0f))
					continue;
				W = _mm256_set_m128i(ub[1], ub[0]);
				for (int k = 0; k < 4; k++)
					a16[k] = _mm256_setzero_si256();
				for (uint32_t p = p0; p < np && p < p0 + 8; p++) {
					uint32_t b = 2 * (p - p0);
					__m256i wp = _mm256_shuffle_epi8(W, _mm256_set1_epi16((int16_t)(((b + 1) << 8) | b)));

					for (int k = 0; k < 4; k++)
						a16[k] = _mm256_add_epi16(a16[k], _mm256_maddubs_epi16(ilv[p][t][k], wp));
				}
				/* to channel order: x[k] holds channels 8k..8k+7 in its low
				 * lane (group 2t) and 32+8k.. in its high one (group 2t + 1) */
				{
					__m256i x[4] = { _mm256_unpacklo_epi16(a16[0], a16[2]), _mm256_unpackhi_epi16(a16[0], a16[2]),
							 _mm256_unpacklo_epi16(a16[1], a16[3]), _mm256_unpackhi_epi16(a16[1], a16[3]) };
					__m256 r0 = _mm256_set1_ps(rr[0]), r1 = _mm256_set1_ps(rr[1]);

					for (int k = 0; k < 4; k++) {
						acc[k] = _mm256_fmadd_ps(
							_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(x[k]))), r0, acc[k]);
						acc[4 + k] = _mm256_fmadd_ps(
							_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(x[k], 1))), r1,
							acc[4 + k]);
					}
				}
			}
			for (int k = 0; k < 8; k++) {
				float *o = out + (size_t)h * d + 64 * t + (k < 4 ? 8 * k : 32 + 8 * (k - 4));

				_mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o),
								  _mm256_add_ps(acc[k], _mm256_set1_ps(bb[k / 4]))));
			}
		}
	}
}

Q4_ACCUM_ENTRY(kv_accum_q_avx2, accum_q4)
