/* cpu.c - picks the x86 kernels this CPU can run: AVX2/FMA/F16C, then where
 * the CPU also has AVX512-VNNI and AVX512VL, the vpdpbusd versions of the
 * integer dots. Compiled without -mavx2: only the feature checks run before
 * we know the instructions exist. */
#include <cpuid.h>
#include <string.h>

#include "ops/arch/x86/x86.h"

/* Feature checks by hand (not every compiler's __builtin_cpu_supports knows
 * "f16c" or "avx512vnni"): CPUID for the instructions, XGETBV for the OS
 * saving the registers they use. */
static unsigned xcr0(void)
{
	unsigned a, b, c, d, lo, hi;

	__cpuid(1, a, b, c, d);
	if (!(c & (1u << 27))) /* OSXSAVE: xgetbv is usable */
		return 0;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	(void)hi;
	return lo;
}

/* AVX2, FMA, F16C; the OS saves xmm and ymm (XCR0 bits 1, 2). */
static int has_avx2(void)
{
	unsigned a, b, c, d;

	if (__get_cpuid_max(0, NULL) < 7)
		return 0;
	__cpuid(1, a, b, c, d);
	if (!(c & (1u << 12)) || !(c & (1u << 28)) || !(c & (1u << 29))) /* FMA, AVX, F16C */
		return 0;
	if ((xcr0() & 0x6) != 0x6)
		return 0;
	__cpuid_count(7, 0, a, b, c, d);
	return (b & (1u << 5)) != 0; /* AVX2 */
}

/* AVX512-VNNI and AVX512VL (CPUID leaf 7: ECX bit 11, EBX bit 31); the OS
 * saves the AVX-512 state too (XCR0 bits 5, 6, 7). */
static int has_avx512_vnni(void)
{
	unsigned a, b, c, d;

	if ((xcr0() & 0xe6) != 0xe6)
		return 0;
	__cpuid_count(7, 0, a, b, c, d);
	return (b & (1u << 31)) && (c & (1u << 11));
}

const char *ops_arch_select(struct ops_type_kernels types[TKV_DTYPE_COUNT], struct ops_act_kernels *act,
			    const char *limit)
{
	if (!has_avx2())
		return "ref";

	types[TKV_F32].dot_rows = dot_rows_f32_avx2;
	types[TKV_F16].dequant = dequant_f16_avx2;
	types[TKV_F16].dot_rows = dot_rows_f16_avx2;
	types[TKV_BF16].dequant = dequant_bf16_avx2;
	types[TKV_BF16].dot_rows = dot_rows_bf16_avx2;
	types[TKV_Q4_0].dequant = dequant_q4_0_avx2;
	types[TKV_Q4_0].dot_rows = dot_rows_q4_0_avx2;
	types[TKV_Q8_0].dequant = dequant_q8_0_avx2;
	types[TKV_Q8_0].dot_rows = dot_rows_q8_0_avx2;
	types[TKV_Q4_K].dequant = dequant_q4_k_avx2;
	types[TKV_Q4_K].dot_rows = dot_rows_q4_k_avx2;
	types[TKV_Q5_K].dequant = dequant_q5_k_avx2;
	types[TKV_Q5_K].dot_rows = dot_rows_q5_k_avx2;
	types[TKV_Q6_K].dequant = dequant_q6_k_avx2;
	types[TKV_Q6_K].dot_rows = dot_rows_q6_k_avx2;
	types[TKV_Q4_0].pack = pack_q4_0_avx2;
	types[TKV_Q4_0].panel = panel_u4_avx2;
	types[TKV_Q8_0].pack = pack_q8_0_avx2;
	types[TKV_Q8_0].panel = panel_s8_avx2;
	types[TKV_Q4_K].pack = pack_q4_k_avx2;
	types[TKV_Q4_K].panel = panel_u4_avx2;
	types[TKV_Q5_K].pack = pack_q5_k_avx2;
	types[TKV_Q5_K].panel = panel_u5_avx2;
	types[TKV_Q4_0].gemv_x8 = gemv_q4_0_x8_avx2;
	types[TKV_Q4_0].pack_x8 = pack_q4_0_x8_avx2;
	types[TKV_Q8_0].gemv_x8 = gemv_q8_0_x8_avx2;
	act->quant[OPS_ACT_Q8_32] = quant_act_q8_32_avx2;
	act->quant[OPS_ACT_Q8_256] = quant_act_q8_256_avx2;
	if ((limit && !strcmp(limit, "avx2")) || !has_avx512_vnni())
		return "avx2";

	/* vpdpbusd on 256-bit registers for the integer dots of many tokens and
	 * of the interleaved layout */
	types[TKV_Q4_0].panel = panel_u_vnni;
	types[TKV_Q4_0].gemv_x8 = gemv_q4_0_x8_vnni;
	types[TKV_Q8_0].panel = panel_s8_vnni;
	types[TKV_Q8_0].gemv_x8 = gemv_q8_0_x8_vnni;
	types[TKV_Q4_K].panel = panel_u_vnni;
	types[TKV_Q5_K].panel = panel_u_vnni;
	return "avx2+vnni";
}
