/* select.c - fills the KV kernel tables (the row kernels of tier.c, the
 * attention kernels of attn.c) from the kernel level (util/cpu.h, which has
 * checked the CPU). Compiled without -mavx2: nothing here runs the
 * instructions. */
#include "kv/arch/x86/tier_x86.h"
#include "kv/attn_impl.h"

enum cpu_level kv_tier_arch_select(struct kv_tier_kernels *k, enum cpu_level level)
{
	if (level < CPU_LEVEL_AVX2)
		return CPU_LEVEL_REF;
	k->f16_load = kv_tier_f16_load_avx2;
	k->f16_store = kv_tier_f16_store_avx2;
	k->q8_load = kv_tier_q8_load_avx2;
	k->asym_load_k = kv_tier_asym_load_k_avx2;
	k->asym_load_v = kv_tier_asym_load_v_avx2;
	return CPU_LEVEL_AVX2;
}

void kv_attn_arch_select(struct kv_attn_kernels *k, enum cpu_level level)
{
	if (level < CPU_LEVEL_AVX2)
		return;
	k->score_f16 = kv_score_f16_avx2;
	k->score_f32 = kv_score_f32_avx2;
	k->accum_f16 = kv_accum_f16_avx2;
	k->accum_f32 = kv_accum_f32_avx2;
	k->exp = kv_exp_avx2;
	k->max = kv_max_avx2;
	k->score_q4 = kv_score_q_avx2;
	k->accum_q4 = kv_accum_q_avx2;
	if (level < CPU_LEVEL_AVX512)
		return;
	/* 512-bit vpdpwssd for the q4 key scores, vpdpbusd for their values */
	k->score_q4 = kv_score_q_avx512;
	k->accum_q4 = kv_accum_q_avx512;
}
