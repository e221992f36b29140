/* test_cpu.c - the one kernel dispatch (util/cpu.h): the level TIERKV_KERNELS
 * asks for is the one every family's table holds - the weight kernels of
 * ops/, the KV row kernels of kv/tier.c, the attention kernels of kv/attn.c -
 * and a level the CPU lacks, or an unknown one, is an error that names it.
 * ctest runs this program once per value of TIERKV_KERNELS (unset, ref, avx2,
 * avx512, a bad one). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "kv/attn_impl.h"
#include "kv/tier.h"
#include "kv/tier_impl.h"
#include "ops/ops_impl.h"
#include "util/cpu.h"
#include "util/status.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kv/arch/x86/tier_x86.h"
#include "ops/arch/x86/x86.h"
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

static enum cpu_level best_level(void)
{
	const struct cpu_features *f = cpu_features();

	return f->avx2 && f->avx512_vnni ? CPU_LEVEL_AVX512 : f->avx2 ? CPU_LEVEL_AVX2 : CPU_LEVEL_REF;
}

/* What TIERKV_KERNELS asks for: a level, -1 for unset/auto, -2 for unknown. */
static int wanted(void)
{
	const char *env = getenv("TIERKV_KERNELS");

	if (!env || !*env || !strcmp(env, "auto"))
		return -1;
	for (int l = CPU_LEVEL_REF; l <= CPU_LEVEL_AVX512; l++)
		if (!strcmp(env, cpu_level_name((enum cpu_level)l)))
			return l;
	return -2;
}

/* The level and the status follow from the request and the CPU. */
static void test_level(void **state)
{
	struct tkv_error err = {0};
	int want = wanted(), st = cpu_kernels_check(&err);
	enum cpu_level best = best_level(), got = cpu_kernel_level();

	(void)state;
	print_message("TIERKV_KERNELS=%s, CPU best %s: level %s, %s\n", getenv("TIERKV_KERNELS") ? getenv("TIERKV_KERNELS") : "(unset)",
		      cpu_level_name(best), cpu_level_name(got), st == TKV_OK ? "ok" : err.msg);
	assert_string_equal(tkv_kernel_level(), cpu_level_name(got));
	if (want == -1) {
		assert_int_equal(st, TKV_OK);
		assert_int_equal(got, best);
	} else if (want == -2) {
		assert_int_equal(st, TKV_ERR_ARG);
		assert_non_null(strstr(err.msg, "unknown kernel level"));
		assert_int_equal(got, best);
	} else if ((enum cpu_level)want > best) {
		assert_int_equal(st, TKV_ERR_ARG);
		assert_non_null(strstr(err.msg, "this CPU lacks"));
		assert_int_equal(got, best);
	} else {
		assert_int_equal(st, TKV_OK);
		assert_int_equal(got, (enum cpu_level)want);
	}
}

/* Every family's table holds the kernels of that level. */
static void test_tables_follow_level(void **state)
{
	enum cpu_level l = cpu_kernel_level();
	const struct ops_type_kernels *q8 = ops_kernels(TKV_Q8_0), *q4 = ops_kernels(TKV_Q4_0);
	const struct kv_tier_kernels *tk = kv_tier_kernels(), *tr = kv_tier_kernels_ref();

	(void)state;
	if (l == CPU_LEVEL_REF) {
		assert_ptr_equal(q8->dot_rows, dot_rows_q8_0_ref);
		assert_ptr_equal(q8->panel, panel_s8_ref);
		assert_ptr_equal(q4->gemv_x8, gemv_q4_0_x8_ref);
		assert_ptr_equal(ops_act_kernels()->quant[OPS_ACT_Q8_32], quant_act_q8_32_ref);
		assert_ptr_equal(ops_act_kernels()->quant[OPS_ACT_Q8_K32], quant_act_q8_k32_ref);
		assert_memory_equal(tk, tr, sizeof *tk);
		assert_string_equal(kv_tier_kernel_name(), "ref");
		assert_null(kv_attn_score_kernel(KV_FMT_F16, 64));
		assert_null(kv_attn_accum_kernel(KV_FMT_F32, 64));
		assert_null(kv_attn_exp_kernel());
		assert_null(kv_attn_max_kernel());
		assert_null(kv_attn_score_q_kernel(KV_FMT_Q4, 64));
		assert_null(kv_attn_accum_q_kernel(KV_FMT_Q4, 128));
		return;
	}
#if HAVE_X86
	assert_ptr_equal(q8->dot_rows, dot_rows_q8_0_avx2);
	assert_ptr_equal(ops_act_kernels()->quant[OPS_ACT_Q8_32], quant_act_q8_32_avx2);
	assert_ptr_equal(ops_act_kernels()->quant[OPS_ACT_Q8_1], quant_act_q8_1_avx2);
	assert_ptr_equal(ops_act_kernels()->quant[OPS_ACT_Q8_K32], quant_act_q8_k32_avx2);
	assert_ptr_equal(tk->f16_load, kv_tier_f16_load_avx2);
	assert_ptr_equal(tk->asym_load_k, kv_tier_asym_load_k_avx2);
	assert_string_equal(kv_tier_kernel_name(), "avx2"); /* no AVX-512 row kernels */
	assert_ptr_equal(kv_attn_score_kernel(KV_FMT_F16, 64), kv_score_f16_avx2);
	assert_ptr_equal(kv_attn_accum_kernel(KV_FMT_F32, 64), kv_accum_f32_avx2);
	assert_ptr_equal(kv_attn_exp_kernel(), kv_exp_avx2);
	assert_ptr_equal(kv_attn_max_kernel(), kv_max_avx2);
	assert_ptr_equal(kv_attn_accum_q_kernel(KV_FMT_Q4, 128),
			 l == CPU_LEVEL_AVX2 ? kv_accum_q_avx2 : kv_accum_q_avx512);
	assert_null(kv_attn_score_kernel(KV_FMT_F16, 12)); /* d % 8 != 0: scalar */
	assert_null(kv_attn_score_q_kernel(KV_FMT_Q4, 32)); /* q4 kernels: d 64 or 128 */
	if (l == CPU_LEVEL_AVX2) {
		assert_ptr_equal(q8->panel, panel_s8_avx2);
		assert_ptr_equal(q4->gemv_x8, gemv_q4_0_x8_avx2);
		assert_ptr_equal(q8->gemv_x8, gemv_q8_0_x8_avx2);
		assert_ptr_equal(ops_kernels(TKV_Q4_K)->gemv_x8, gemv_q4_k_x8_avx2);
		assert_ptr_equal(ops_kernels(TKV_Q6_K)->gemv_x8, gemv_q6_k_x8_avx2);
		assert_ptr_equal(ops_kernels(TKV_Q5_K)->gemv_x8, gemv_q5_k_x8_avx2);
		assert_ptr_equal(ops_kernels(TKV_Q4_K)->dot_rows, dot_rows_q4_k_avx2);
		assert_ptr_equal(ops_kernels(TKV_Q6_K)->dot_rows, dot_rows_q6_k_avx2);
		assert_ptr_equal(kv_attn_score_q_kernel(KV_FMT_Q4, 64), kv_score_q_avx2);
	} else {
		/* 256-bit VNNI panels; 512-bit decode kernels */
		assert_ptr_equal(q8->panel, panel_s8_vnni);
		assert_ptr_equal(q4->gemv_x8, gemv_q4_0_x8_avx512);
		assert_ptr_equal(q8->gemv_x8, gemv_q8_0_x8_avx512);
		assert_ptr_equal(ops_kernels(TKV_Q4_K)->gemv_x8, gemv_q4_k_x8_avx512);
		assert_ptr_equal(ops_kernels(TKV_Q6_K)->gemv_x8, gemv_q6_k_x8_avx512);
		assert_ptr_equal(ops_kernels(TKV_Q5_K)->gemv_x8, gemv_q5_k_x8_avx512);
		assert_ptr_equal(ops_kernels(TKV_Q4_K)->dot_rows, dot_rows_q4_k_avx512);
		assert_ptr_equal(ops_kernels(TKV_Q5_K)->dot_rows, dot_rows_q5_k_avx512);
		assert_ptr_equal(ops_kernels(TKV_Q6_K)->dot_rows, dot_rows_q6_k_avx512);
		assert_ptr_equal(kv_attn_score_q_kernel(KV_FMT_Q4, 64), kv_score_q_avx512);
	}
#else
	fail_msg("level %s on a CPU without SIMD kernels", cpu_level_name(l));
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_level),
		cmocka_unit_test(test_tables_follow_level),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
