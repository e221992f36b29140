/* tier_cpu.c - picks the x86 KV row kernels this CPU can run. Compiled
 * without -mavx2: only the feature check runs before we know the instructions
 * exist. */
#include <cpuid.h>
#include <stddef.h>

#include "kv/arch/x86/tier_x86.h"

/* AVX2, FMA and F16C, and the OS saves the ymm registers (XCR0 bits 1, 2).
 * CPUID by hand: clang 14's __builtin_cpu_supports does not know "f16c". */
int kv_arch_has_avx2(void)
{
	unsigned a, b, c, d, lo, hi;

	if (__get_cpuid_max(0, NULL) < 7)
		return 0;
	__cpuid(1, a, b, c, d);
	/* FMA, OSXSAVE, AVX, F16C */
	if (!(c & (1u << 12)) || !(c & (1u << 27)) || !(c & (1u << 28)) || !(c & (1u << 29)))
		return 0;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	(void)hi;
	if ((lo & 0x6) != 0x6)
		return 0;
	__cpuid_count(7, 0, a, b, c, d);
	return (b & (1u << 5)) != 0; /* AVX2 */
}

/* CPUID leaf 7: EBX bit 31 (AVX512VL), ECX bit 11 (AVX512-VNNI); XCR0 bits
 * 5-7 (opmask and ZMM state). */
int kv_arch_has_vnni(void)
{
	unsigned a, b, c, d, lo, hi;

	if (!kv_arch_has_avx2())
		return 0;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	(void)hi;
	if ((lo & 0xe6) != 0xe6)
		return 0;
	__cpuid_count(7, 0, a, b, c, d);
	return (b & (1u << 31)) && (c & (1u << 11));
}

const char *kv_tier_arch_select(struct kv_tier_kernels *k)
{
	if (!kv_arch_has_avx2())
		return "ref";
	k->f16_load = kv_tier_f16_load_avx2;
	k->f16_store = kv_tier_f16_store_avx2;
	k->q8_load = kv_tier_q8_load_avx2;
	k->asym_load_k = kv_tier_asym_load_k_avx2;
	k->asym_load_v = kv_tier_asym_load_v_avx2;
	return "avx2";
}
