/* select.c - fills the ops tables from the kernel level (util/cpu.h, which
 * has checked the CPU): at avx2 the AVX2/FMA/F16C kernels, at avx512 also the
 * vpdpbusd versions (AVX512-VNNI on 256-bit registers) of the integer dots.
 * Compiled without -mavx2: nothing here runs the instructions. */
#include "ops/arch/x86/x86.h"

/* The types of quant_more.c: their row dots, their packs, the shared panel kernels for
 * those with panels (q4_1: 0..15; q5_0, q5_1: 0..31; iq4: signed values), and the
 * interleaved groups of q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q2_k and q3_k. */
static void ops_select_more_avx2(struct ops_type_kernels types[TKV_DTYPE_COUNT])
{
	types[TKV_Q4_1].dot_rows = dot_rows_q4_1_avx2;
	types[TKV_Q5_0].dot_rows = dot_rows_q5_0_avx2;
	types[TKV_Q5_1].dot_rows = dot_rows_q5_1_avx2;
	types[TKV_IQ4_NL].dot_rows = dot_rows_iq4_nl_avx2;
	types[TKV_Q2_K].dot_rows = dot_rows_q2_k_avx2;
	types[TKV_Q3_K].dot_rows = dot_rows_q3_k_avx2;
	types[TKV_IQ4_XS].dot_rows = dot_rows_iq4_xs_avx2;
	types[TKV_Q4_1].pack = pack_q4_1_avx2;
	types[TKV_Q5_0].pack = pack_q5_0_avx2;
	types[TKV_Q5_1].pack = pack_q5_1_avx2;
	types[TKV_IQ4_NL].pack = pack_iq4_nl_avx2;
	types[TKV_IQ4_XS].pack = pack_iq4_xs_avx2;
	types[TKV_Q4_1].gemv_x8 = gemv_q4_1_x8_avx2;
	types[TKV_Q5_0].gemv_x8 = gemv_q5_0_x8_avx2;
	types[TKV_Q5_1].gemv_x8 = gemv_q5_1_x8_avx2;
	types[TKV_Q4_1].pack_x8 = pack_q4_1_x8_avx2;
	types[TKV_Q5_0].pack_x8 = pack_q5_0_x8_avx2;
	types[TKV_Q5_1].pack_x8 = pack_q5_1_x8_avx2;
	types[TKV_IQ4_NL].gemv_x8 = gemv_iq4_nl_x8_avx2;
	types[TKV_IQ4_XS].gemv_x8 = gemv_iq4_xs_x8_avx2;
	types[TKV_IQ4_NL].pack_x8 = pack_iq4_nl_x8_avx2;
	types[TKV_IQ4_XS].pack_x8 = pack_iq4_xs_x8_avx2;
	types[TKV_Q2_K].gemv_x8 = gemv_q2_k_x8_avx2;
	types[TKV_Q3_K].gemv_x8 = gemv_q3_k_x8_avx2;
	types[TKV_Q4_1].panel = panel_u4_avx2;
	types[TKV_Q5_0].panel = panel_u5_avx2;
	types[TKV_Q5_1].panel = panel_u5_avx2;
	types[TKV_IQ4_NL].panel = panel_s8_avx2;
	types[TKV_IQ4_XS].panel = panel_s8_avx2;
}

static void ops_select_more_vnni(struct ops_type_kernels types[TKV_DTYPE_COUNT])
{
	types[TKV_Q4_1].panel = panel_u_vnni;
	types[TKV_Q5_0].panel = panel_u_vnni;
	types[TKV_Q5_1].panel = panel_u_vnni;
	types[TKV_IQ4_NL].panel = panel_s8_vnni;
	types[TKV_IQ4_XS].panel = panel_s8_vnni;
}

void ops_arch_select(struct ops_type_kernels types[TKV_DTYPE_COUNT], struct ops_act_kernels *act,
		     enum cpu_level level)
{
	if (level < CPU_LEVEL_AVX2)
		return;

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
	types[TKV_Q6_K].pack = pack_q6_k_avx2;
	types[TKV_Q6_K].panel = panel_k6_avx2;
	types[TKV_Q4_0].gemv_x8 = gemv_q4_0_x8_avx2;
	types[TKV_Q4_0].pack_x8 = pack_q4_0_x8_avx2;
	types[TKV_Q8_0].gemv_x8 = gemv_q8_0_x8_avx2;
	types[TKV_Q4_K].gemv_x8 = gemv_q4_k_x8_avx2;
	types[TKV_Q4_K].pack_x8 = pack_q4_k_x8_avx2;
	types[TKV_Q6_K].gemv_x8 = gemv_q6_k_x8_avx2;
	types[TKV_Q5_K].gemv_x8 = gemv_q5_k_x8_avx2;
	types[TKV_Q5_K].pack_x8 = pack_q5_k_x8_avx2;
	types[TKV_Q6_K].pack_x8 = pack_q6_k_x8_avx2;
	ops_select_more_avx2(types);
	act->quant[OPS_ACT_Q8_32] = quant_act_q8_32_avx2;
	act->quant[OPS_ACT_Q8_256] = quant_act_q8_256_avx2;
	act->quant[OPS_ACT_Q8_1] = quant_act_q8_1_avx2;
	act->quant[OPS_ACT_Q8_K32] = quant_act_q8_k32_avx2;
	if (level < CPU_LEVEL_AVX512)
		return;

	/* vpdpbusd on 256-bit registers for the integer dots of many tokens and
	 * of the interleaved layout */
	types[TKV_Q4_0].panel = panel_u_vnni;
	types[TKV_Q4_0].gemv_x8 = gemv_q4_0_x8_vnni;
	types[TKV_Q8_0].panel = panel_s8_vnni;
	types[TKV_Q8_0].gemv_x8 = gemv_q8_0_x8_vnni;
	types[TKV_Q4_K].panel = panel_u_vnni;
	types[TKV_Q5_K].panel = panel_u_vnni;
	ops_select_more_vnni(types);

	/* 512-bit registers for decode: the k-quant row dots and the
	 * interleaved groups (which also serve q8_0's prefill) */
	types[TKV_Q4_K].dot_rows = dot_rows_q4_k_avx512;
	types[TKV_Q5_K].dot_rows = dot_rows_q5_k_avx512;
	types[TKV_Q6_K].dot_rows = dot_rows_q6_k_avx512;
	types[TKV_Q3_K].dot_rows = dot_rows_q3_k_avx512;
	types[TKV_Q2_K].dot_rows = dot_rows_q2_k_avx512;
	types[TKV_Q4_1].dot_rows = dot_rows_q4_1_avx512;
	types[TKV_Q5_0].dot_rows = dot_rows_q5_0_avx512;
	types[TKV_Q5_1].dot_rows = dot_rows_q5_1_avx512;
	types[TKV_IQ4_NL].dot_rows = dot_rows_iq4_nl_avx512;
	types[TKV_IQ4_XS].dot_rows = dot_rows_iq4_xs_avx512;
	types[TKV_Q4_0].gemv_x8 = gemv_q4_0_x8_avx512;
	types[TKV_Q8_0].gemv_x8 = gemv_q8_0_x8_avx512;
	types[TKV_Q4_K].gemv_x8 = gemv_q4_k_x8_avx512;
	types[TKV_Q6_K].gemv_x8 = gemv_q6_k_x8_avx512;
	types[TKV_Q5_K].gemv_x8 = gemv_q5_k_x8_avx512;
	types[TKV_Q4_1].gemv_x8 = gemv_q4_1_x8_avx512;
	types[TKV_Q5_0].gemv_x8 = gemv_q5_0_x8_avx512;
	types[TKV_Q5_1].gemv_x8 = gemv_q5_1_x8_avx512;
	types[TKV_IQ4_NL].gemv_x8 = gemv_iq4_nl_x8_avx512;
	types[TKV_IQ4_XS].gemv_x8 = gemv_iq4_xs_x8_avx512;
	types[TKV_Q2_K].gemv_x8 = gemv_q2_k_x8_avx512;
	types[TKV_Q3_K].gemv_x8 = gemv_q3_k_x8_avx512;
	/* prefill: 16 rows (two panels) per register */
	for (int t = 0; t < TKV_DTYPE_COUNT; t++) {
		if (types[t].panel == panel_u_vnni)
			types[t].panel2 = panel2_u_avx512;
		if (types[t].panel == panel_s8_vnni)
			types[t].panel2 = panel2_s8_avx512;
	}
	types[TKV_Q6_K].panel2 = panel2_k6_avx512;
}
