/* attn_q_vnni.c - the key kernel of q4 pages (attn_q_avx2.c) with vpdpwssd,
 * AVX512-VNNI on 256-bit registers (AVX512VL), for CPUs that have it: one
 * instruction for each multiply-and-add of 16-bit pairs into int32 where
 * AVX2 takes vpmaddwd + vpaddd. The same integers as kv_score_q_avx2. */
#include <immintrin.h>

#define DOT_I16(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
#include "kv/arch/x86/attn_q_x86.h"

int kv_score_q_vnni(uint32_t bits, const void *kreg, uint32_t j0, uint32_t n, uint32_t d, const float *q,
		    uint32_t nq, float scale, float *logit, size_t stride, const float *lim)
{
	return score_q(bits, kreg, j0, n, d, q, nq, scale, logit, stride, lim);
}
