/* attn_q_vnni.c - the key kernel of q4 pages (attn_q_avx2.c) with vpdpwssd,
 * AVX512-VNNI on 256-bit registers (AVX512VL), for CPUs that have it: one
 * instruction for each multiply-and-add of 16-bit pairs into int32 where
 * AVX2 takes vpmaddwd + vpaddd. The same integers as kv_score_q_avx2. */
#include <immintrin.h>

#define DOT_I16(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
#include "kv/arch/x86/attn_q_x86.h"

Q4_SCORE_ENTRY(kv_score_q_vnni, score_q4)
