/* dtype.c - the traits table of tensor element types. */
#include "ops/dtype.h"

static const struct tkv_dtype_traits traits[TKV_DTYPE_COUNT] = {
	[TKV_F32] = {"f32", 1, 4},
	[TKV_F16] = {"f16", 1, 2},
	[TKV_Q4_0] = {"q4_0", 32, 18},
	[TKV_Q4_1] = {"q4_1", 32, 20},
	[TKV_Q5_0] = {"q5_0", 32, 22},
	[TKV_Q5_1] = {"q5_1", 32, 24},
	[TKV_Q8_0] = {"q8_0", 32, 34},
	[TKV_Q8_1] = {"q8_1", 32, 36},
	[TKV_Q2_K] = {"q2_k", 256, 84},
	[TKV_Q3_K] = {"q3_k", 256, 110},
	[TKV_Q4_K] = {"q4_k", 256, 144},
	[TKV_Q5_K] = {"q5_k", 256, 176},
	[TKV_Q6_K] = {"q6_k", 256, 210},
	[TKV_Q8_K] = {"q8_k", 256, 292},
	[TKV_IQ2_XXS] = {"iq2_xxs", 256, 66},
	[TKV_IQ2_XS] = {"iq2_xs", 256, 74},
	[TKV_IQ3_XXS] = {"iq3_xxs", 256, 98},
	[TKV_IQ1_S] = {"iq1_s", 256, 50},
	[TKV_IQ4_NL] = {"iq4_nl", 32, 18},
	[TKV_IQ3_S] = {"iq3_s", 256, 110},
	[TKV_IQ2_S] = {"iq2_s", 256, 82},
	[TKV_IQ4_XS] = {"iq4_xs", 256, 136},
	[TKV_I8] = {"i8", 1, 1},
	[TKV_I16] = {"i16", 1, 2},
	[TKV_I32] = {"i32", 1, 4},
	[TKV_I64] = {"i64", 1, 8},
	[TKV_F64] = {"f64", 1, 8},
	[TKV_IQ1_M] = {"iq1_m", 256, 56},
	[TKV_BF16] = {"bf16", 1, 2},
	[TKV_TQ1_0] = {"tq1_0", 256, 54},
	[TKV_TQ2_0] = {"tq2_0", 256, 66},
	[TKV_MXFP4] = {"mxfp4", 32, 17},
};

const struct tkv_dtype_traits *tkv_dtype_traits(uint32_t t)
{
	if (t >= TKV_DTYPE_COUNT || !traits[t].name)
		return 0;
	return &traits[t];
}

const char *tkv_dtype_name(uint32_t t)
{
	const struct tkv_dtype_traits *tr = tkv_dtype_traits(t);
	return tr ? tr->name : "?";
}

size_t tkv_dtype_row_size(uint32_t t, uint64_t n)
{
	const struct tkv_dtype_traits *tr = tkv_dtype_traits(t);

	if (!tr || n % tr->blck)
		return 0;
	if (n / tr->blck > (uint64_t)((size_t)-1 / tr->size))
		return 0;
	return (size_t)(n / tr->blck * tr->size);
}
