/* tier_cpu.c - picks the x86 KV row kernels this CPU can run. Compiled
 * without -mavx2: only the feature check runs before we know the instructions
 * exist. */
#include "kv/arch/x86/tier_x86.h"

const char *kv_tier_arch_select(struct kv_tier_kernels *k)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c"))
		return "ref";
	k->f16_load = kv_tier_f16_load_avx2;
	k->f16_store = kv_tier_f16_store_avx2;
	k->q8_load = kv_tier_q8_load_avx2;
	k->asym_load_k = kv_tier_asym_load_k_avx2;
	k->asym_load_v = kv_tier_asym_load_v_avx2;
	return "avx2";
}
