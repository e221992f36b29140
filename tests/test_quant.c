/* test_quant.c - the weight types' kernels: the SIMD versions selected for
 * this CPU against the scalar references on random blocks (dequantize,
 * activation quantizers, row dots for 1..4 rows), the references against an
 * exact double computation, the weight quantizers' round trip, and the
 * threaded matmul against the row dots. On a CPU without AVX2 the selected
 * kernels are the references and the SIMD comparisons are trivially equal.
 * The 512-bit kernels are also called directly, whatever TIERKV_KERNELS
 * selects, on a CPU that has AVX512F/BW/VL/VNNI; elsewhere that test is
 * skipped and says so. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dtype.h"
#include "ops/ops.h"
#include "ops/ops_impl.h"
#include "util/cpu.h"
#include "util/tpool.h"

#if defined(__x86_64__) || defined(__i386__)
#include "ops/arch/x86/x86.h"
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

/* Dequantizing is one multiply (and for k-quants one subtract) per element in
 * both versions, in the same order: bit for bit, no tolerance. */
#define TOL_DEQUANT 0.0
/* Activation quantizers round the same products the same way: same bytes. */

/* Row dots: the integer parts are exact; the float parts (a product of two
 * scales and an int per block, then a sum over blocks) round differently in
 * the SIMD version (8 lanes, then a horizontal sum). Each rounding is u = 2^-24
 * relative; with at most 128 blocks and a few roundings per block the
 * difference stays below 128 * 4 * u = 3e-5 of the sum of magnitudes. */
#define TOL_DOT_SIMD_REL 3e-5
/* The references against an exact double sum of dequantized weight times
 * dequantized activation: the same float bound (the integer dot is exact). */
#define TOL_DOT_EXACT_REL 3e-5
/* Panels: the same integer sums as the reference; the float part is one FMA
 * per block in the SIMD version against a multiply and an add: the dot bound. */
#define TOL_PANEL_SIMD_REL 3e-5
/* Matmuls against exact float activations: the activations are rounded to 8
 * bits per block of 32 (a step of amax/127), so each product moves by at most
 * |w| amax / 254; plus the float bound above, relative to sum |w x|. */
#define TOL_MATMUL_FLOAT_REL 3e-5
/* Weight quantizers: each value lands within half a step of the block's
 * grid, plus the rounding of the scales to f16 / 6 bits. The step of each
 * type relative to the block's largest magnitude (or range, for the affine
 * k-quants), with room for the scale quantization: */
#define TOL_RT_Q4_0 (0.5 / 7 + 0.02)
#define TOL_RT_Q8_0 (0.5 / 127 + 0.002)
#define TOL_RT_Q4_K (0.5 / 15 + 0.05)
#define TOL_RT_Q5_K (0.5 / 31 + 0.05)
#define TOL_RT_Q6_K (0.5 / 31 + 0.05)
/* The other types: q4_1 / q5_1 as the affine k-quants, per block of 32;
 * q5_0 maps the value of largest magnitude onto -16, so the other end may be
 * clamped a whole step (1/16); iq4_nl's grid has steps up to 24/127 and its
 * positive end is 113/127 (plus the scale search); the k-quants relative to
 * the super-block's range (q2_k: half a step of 3 plus the 4-bit scale and min)
 * or magnitude (q3_k: a clamped step of 4, iq4_xs as iq4_nl, plus the 6-bit
 * group scales). */
#define TOL_RT_Q4_1 (0.5 / 15 + 0.01)
#define TOL_RT_Q5_1 (0.5 / 31 + 0.01)
#define TOL_RT_Q5_0 (1.0 / 16 + 0.01)
#define TOL_RT_IQ4_NL 0.15
#define TOL_RT_Q2_K (0.5 / 3 + 0.1)
#define TOL_RT_Q3_K (1.0 / 4 + 0.03)
#define TOL_RT_IQ4_XS 0.17
#define TOL_RT_F16 (1.0 / 2048)
#define TOL_RT_BF16 (1.0 / 256)

static const uint32_t types[] = { TKV_F32, TKV_F16, TKV_BF16, TKV_Q4_0, TKV_Q8_0, TKV_Q4_K, TKV_Q5_K, TKV_Q6_K,
				  TKV_Q4_1, TKV_Q5_0, TKV_Q5_1, TKV_IQ4_NL, TKV_Q2_K, TKV_Q3_K, TKV_IQ4_XS };
#define N_TYPES (sizeof types / sizeof types[0])

#define N_MAX 4096

/* A positive normal f16 in [2^-12, 2^-4): the scales real weights use. */
static uint16_t rand_scale(void)
{
	return (uint16_t)((3 + tu_rng_u32() % 8) << 10 | (tu_rng_u32() & 0x3ff));
}

/* A random row of n elements of type: random bits for the quants, sane
 * scales (one block with a negative scale where the type allows it). */
static void make_row(uint32_t type, int64_t n, void *row)
{
	size_t bytes = tkv_dtype_row_size(type, (uint64_t)n);
	unsigned char *p = row;

	for (size_t i = 0; i < bytes; i++)
		p[i] = (unsigned char)tu_rng_u32();
	switch (type) {
	case TKV_F32:
		for (int64_t i = 0; i < n; i++)
			((float *)row)[i] = tu_rng_f53(-2.0f, 2.0f);
		break;
	case TKV_F16:
		for (int64_t i = 0; i < n; i++)
			((uint16_t *)row)[i] = ops_f32_to_f16(tu_rng_f53(-2.0f, 2.0f));
		break;
	case TKV_BF16:
		for (int64_t i = 0; i < n; i++)
			((uint16_t *)row)[i] = ops_f32_to_bf16(tu_rng_f53(-2.0f, 2.0f));
		break;
	case TKV_Q4_0:
		for (int64_t i = 0; i < n / QK4_0; i++)
			((struct blk_q4_0 *)row)[i].d = rand_scale() | (i == 1 ? 0x8000 : 0);
		break;
	case TKV_Q8_0:
		for (int64_t i = 0; i < n / QK8_0; i++)
			((struct blk_q8_0 *)row)[i].d = rand_scale() | (i == 1 ? 0x8000 : 0);
		break;
	case TKV_Q4_K:
		for (int64_t i = 0; i < n / QK_K; i++) {
			((struct blk_q4_k *)row)[i].d = rand_scale();
			((struct blk_q4_k *)row)[i].dmin = rand_scale();
		}
		break;
	case TKV_Q5_K:
		for (int64_t i = 0; i < n / QK_K; i++) {
			((struct blk_q5_k *)row)[i].d = rand_scale();
			((struct blk_q5_k *)row)[i].dmin = rand_scale();
		}
		break;
	case TKV_Q6_K:
		for (int64_t i = 0; i < n / QK_K; i++)
			((struct blk_q6_k *)row)[i].d = rand_scale();
		break;
	case TKV_Q4_1:
		for (int64_t i = 0; i < n / 32; i++) {
			((struct blk_q4_1 *)row)[i].d = rand_scale();
			((struct blk_q4_1 *)row)[i].m = rand_scale() | (i % 3 ? 0x8000 : 0);
		}
		break;
	case TKV_Q5_0:
		for (int64_t i = 0; i < n / 32; i++)
			((struct blk_q5_0 *)row)[i].d = rand_scale() | (i == 1 ? 0x8000 : 0);
		break;
	case TKV_Q5_1:
		for (int64_t i = 0; i < n / 32; i++) {
			((struct blk_q5_1 *)row)[i].d = rand_scale();
			((struct blk_q5_1 *)row)[i].m = rand_scale() | (i % 3 ? 0x8000 : 0);
		}
		break;
	case TKV_IQ4_NL:
		for (int64_t i = 0; i < n / 32; i++)
			((struct blk_iq4_nl *)row)[i].d = rand_scale() | (i == 1 ? 0x8000 : 0);
		break;
	case TKV_Q2_K:
		for (int64_t i = 0; i < n / QK_K; i++) {
			((struct blk_q2_k *)row)[i].d = rand_scale();
			((struct blk_q2_k *)row)[i].dmin = rand_scale();
		}
		break;
	case TKV_Q3_K:
		for (int64_t i = 0; i < n / QK_K; i++)
			((struct blk_q3_k *)row)[i].d = rand_scale() | (i == 1 ? 0x8000 : 0);
		break;
	case TKV_IQ4_XS:
		for (int64_t i = 0; i < n / QK_K; i++)
			((struct blk_iq4_xs *)row)[i].d = rand_scale() | (i == 1 ? 0x8000 : 0);
		break;
	default:
		fail_msg("make_row: type %u", type);
	}
}

static void make_x(float *x, int64_t n, int pattern)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = tu_rng_f53(-3.0f, 3.0f);
	if (pattern == 1) /* a block of zeros and a block with one outlier */
		for (int i = 0; i < 32; i++) {
			x[i] = 0.0f;
			x[32 + i] = i == 5 ? 1000.0f : 0.01f * x[32 + i];
		}
}

static const ops_dequant_fn ref_dequant[TKV_DTYPE_COUNT] = {
	[TKV_F32] = dequant_f32_ref, [TKV_F16] = dequant_f16_ref, [TKV_BF16] = dequant_bf16_ref,
	[TKV_Q4_0] = dequant_q4_0_ref, [TKV_Q8_0] = dequant_q8_0_ref, [TKV_Q4_K] = dequant_q4_k_ref,
	[TKV_Q5_K] = dequant_q5_k_ref, [TKV_Q6_K] = dequant_q6_k_ref, [TKV_Q4_1] = dequant_q4_1_ref,
	[TKV_Q5_0] = dequant_q5_0_ref, [TKV_Q5_1] = dequant_q5_1_ref, [TKV_IQ4_NL] = dequant_iq4_nl_ref,
	[TKV_Q2_K] = dequant_q2_k_ref, [TKV_Q3_K] = dequant_q3_k_ref, [TKV_IQ4_XS] = dequant_iq4_xs_ref,
};

static const ops_dot_rows_fn ref_dot[TKV_DTYPE_COUNT] = {
	[TKV_F32] = dot_rows_f32_ref, [TKV_F16] = dot_rows_f16_ref, [TKV_BF16] = dot_rows_bf16_ref,
	[TKV_Q4_0] = dot_rows_q4_0_ref, [TKV_Q8_0] = dot_rows_q8_0_ref, [TKV_Q4_K] = dot_rows_q4_k_ref,
	[TKV_Q5_K] = dot_rows_q5_k_ref, [TKV_Q6_K] = dot_rows_q6_k_ref, [TKV_Q4_1] = dot_rows_q4_1_ref,
	[TKV_Q5_0] = dot_rows_q5_0_ref, [TKV_Q5_1] = dot_rows_q5_1_ref, [TKV_IQ4_NL] = dot_rows_iq4_nl_ref,
	[TKV_Q2_K] = dot_rows_q2_k_ref, [TKV_Q3_K] = dot_rows_q3_k_ref, [TKV_IQ4_XS] = dot_rows_iq4_xs_ref,
};

static const ops_pack_fn ref_pack[TKV_DTYPE_COUNT] = {
	[TKV_Q4_0] = pack_q4_0_ref, [TKV_Q8_0] = pack_q8_0_ref, [TKV_Q4_K] = pack_q4_k_ref, [TKV_Q5_K] = pack_q5_k_ref,
	[TKV_Q4_1] = pack_q4_1_ref, [TKV_Q5_0] = pack_q5_0_ref, [TKV_Q5_1] = pack_q5_1_ref,
	[TKV_IQ4_NL] = pack_iq4_nl_ref, [TKV_IQ4_XS] = pack_iq4_xs_ref, [TKV_Q6_K] = pack_q6_k_ref,
};

static const ops_panel_fn ref_panel[TKV_DTYPE_COUNT] = {
	[TKV_Q4_0] = panel_u_ref, [TKV_Q8_0] = panel_s8_ref, [TKV_Q4_K] = panel_u_ref, [TKV_Q5_K] = panel_u_ref,
	[TKV_Q4_1] = panel_u_ref, [TKV_Q5_0] = panel_u_ref, [TKV_Q5_1] = panel_u_ref,
	[TKV_IQ4_NL] = panel_s8_ref, [TKV_IQ4_XS] = panel_s8_ref, [TKV_Q6_K] = panel_k6_ref,
};

static const ops_gemv_x8_fn ref_x8[TKV_DTYPE_COUNT] = {
	[TKV_Q4_0] = gemv_q4_0_x8_ref, [TKV_Q8_0] = gemv_q8_0_x8_ref, [TKV_Q4_K] = gemv_q4_k_x8_ref, [TKV_Q6_K] = gemv_q6_k_x8_ref, [TKV_Q5_K] = gemv_q5_k_x8_ref,
	[TKV_Q4_1] = gemv_q4_1_x8_ref, [TKV_Q5_0] = gemv_q5_0_x8_ref, [TKV_Q5_1] = gemv_q5_1_x8_ref,
	[TKV_IQ4_NL] = gemv_iq4_nl_x8_ref, [TKV_IQ4_XS] = gemv_iq4_xs_x8_ref,
	[TKV_Q2_K] = gemv_q2_k_x8_ref, [TKV_Q3_K] = gemv_q3_k_x8_ref,
};

static const ops_pack_x8_fn ref_pack_x8[TKV_DTYPE_COUNT] = {
	[TKV_Q4_0] = pack_q4_0_x8_ref, [TKV_Q4_K] = pack_q4_k_x8_ref, [TKV_Q6_K] = pack_q6_k_x8_ref, [TKV_Q5_K] = pack_q5_k_x8_ref,
	[TKV_Q4_1] = pack_q4_1_x8_ref, [TKV_Q5_0] = pack_q5_0_x8_ref, [TKV_Q5_1] = pack_q5_1_x8_ref,
	[TKV_IQ4_NL] = pack_iq4_nl_x8_ref, [TKV_IQ4_XS] = pack_iq4_xs_x8_ref,
};

static const ops_quant_act_fn ref_act[OPS_ACT_COUNT] = {
	[OPS_ACT_Q8_32] = quant_act_q8_32_ref,
	[OPS_ACT_Q8_256] = quant_act_q8_256_ref,
	[OPS_ACT_Q8_1] = quant_act_q8_1_ref,
	[OPS_ACT_Q8_K32] = quant_act_q8_k32_ref,
};

/* The activation row for type's kernels (or x itself), and its values. */
static const void *prepare_act(uint32_t type, const float *x, int64_t n, void *buf, float *vals)
{
	uint32_t act = ops_kernels(type)->act_type;

	if (act == OPS_ACT_F32) {
		memcpy(vals, x, (size_t)n * sizeof(float));
		return x;
	}
	ref_act[act](x, buf, n);
	if (act != OPS_ACT_Q8_256) {
		const struct blk_q8_32 *b = buf;
		for (int64_t i = 0; i < n; i++)
			vals[i] = b[i / 32].d * b[i / 32].qs[i % 32];
	} else {
		const struct blk_q8_256 *b = buf;
		for (int64_t i = 0; i < n; i++)
			vals[i] = b[i / QK_K].d * b[i / QK_K].qs[i % QK_K];
	}
	return buf;
}

/* OPS_ACT_Q8_1 carries s = d sum(q) rounded to f16, which q4_1 and q5_1 meet
 * with their offset m: what their dots add beyond the exact product of the
 * values d q, sum over blocks of m (s - d sum(q)); 0 for the other formats. */
static double q8_1_offset_term(uint32_t type, const void *row, const struct blk_q8_32 *a, int64_t n)
{
	double t = 0.0;

	if (type != TKV_Q4_1 && type != TKV_Q5_1)
		return 0.0;
	for (int64_t b = 0; b < n / 32; b++) {
		uint16_t mh = type == TKV_Q4_1 ? ((const struct blk_q4_1 *)row)[b].m : ((const struct blk_q5_1 *)row)[b].m;
		int sum = 0;

		for (int e = 0; e < 32; e++)
			sum += a[b].qs[e];
		t += (double)ops_f16_to_f32(mh) * ((double)a[b].s - (double)a[b].d * sum);
	}
	return t;
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_block_sizes(void **state)
{
	(void)state;
	assert_int_equal(tkv_dtype_row_size(TKV_Q4_0, 32), sizeof(struct blk_q4_0));
	assert_int_equal(tkv_dtype_row_size(TKV_Q8_0, 32), sizeof(struct blk_q8_0));
	assert_int_equal(tkv_dtype_row_size(TKV_Q4_K, 256), sizeof(struct blk_q4_k));
	assert_int_equal(tkv_dtype_row_size(TKV_Q5_K, 256), sizeof(struct blk_q5_k));
	assert_int_equal(tkv_dtype_row_size(TKV_Q6_K, 256), sizeof(struct blk_q6_k));
	for (size_t t = 0; t < N_TYPES; t++)
		assert_true(ops_type_supported(types[t]));
	print_message("kernels: %s\n", tkv_kernel_level());
}

/* Hand-made blocks with known values, one per quantized layout. */
static void test_known_blocks(void **state)
{
	float out[256];
	struct blk_q4_0 q4 = { 0x3c00 /* 1.0 */, { 0 } };
	struct blk_q4_k k4;
	struct blk_q6_k k6;

	(void)state;
	q4.qs[0] = 0x9f; /* element 0: 15 - 8 = 7; element 16: 9 - 8 = 1 */
	q4.qs[15] = 0x08; /* element 15: 0, element 31: -8 */
	ref_dequant[TKV_Q4_0](&q4, out, 32);
	assert_true(out[0] == 7.0f && out[16] == 1.0f && out[15] == 0.0f && out[31] == -8.0f && out[1] == -8.0f);

	/* q4_k: sub-block 5 has scale 33 (0b100001) and min 18 (0b010010): its low
	 * 4 bits sit in scales[9], the high 2 bits in bits 6-7 of scales[1] / [5] */
	memset(&k4, 0, sizeof k4);
	k4.d = 0x3c00;    /* 1.0 */
	k4.dmin = 0x3800; /* 0.5 */
	k4.scales[9] = (uint8_t)(1 | 2 << 4);
	k4.scales[1] = 2 << 6;
	k4.scales[5] = 1 << 6;
	k4.qs[32 * 2 + 3] = 0x70; /* sub-block 5 = high nibbles of chunk 2: element 160 + 3 */
	ref_dequant[TKV_Q4_K](&k4, out, 256);
	assert_true(out[163] == 33.0f * 7 - 0.5f * 18);
	assert_true(out[160] == -0.5f * 18);
	assert_true(out[0] == 0.0f);

	/* q6_k: element 200 = half 1, group 2, l 8: low nibble = high half of
	 * ql[64 + 8], bits 4-5 of qh[32 + 8]; scale 200 / 16 = 12 */
	memset(&k6, 0, sizeof k6);
	k6.d = 0x3c00;
	k6.scales[12] = -3;
	k6.ql[64 + 8] = 0x50;
	k6.qh[32 + 8] = 2 << 4;
	ref_dequant[TKV_Q6_K](&k6, out, 256);
	assert_true(out[200] == -3.0f * (float)((5 | 2 << 4) - 32));
}

static void test_dequant_simd_vs_ref(void **state)
{
	static unsigned char row[N_MAX * 4];
	static float want[N_MAX], got[N_MAX + 1];

	(void)state;
	tu_rng_seed(11);
	for (size_t t = 0; t < N_TYPES; t++) {
		const struct ops_type_kernels *k = ops_kernels(types[t]);

		for (int64_t n = 256; n <= N_MAX; n *= 4)
			for (int rep = 0; rep < 10; rep++) {
				make_row(types[t], n, row);
				ref_dequant[types[t]](row, want, n);
				got[n] = 42.0f;
				k->dequant(row, got, n);
				for (int64_t i = 0; i < n; i++)
					if (fabs((double)got[i] - want[i]) > TOL_DEQUANT || isnan(got[i]))
						fail_msg("%s n=%lld [%lld]: %a, want %a", tkv_dtype_name(types[t]),
							 (long long)n, (long long)i, (double)got[i], (double)want[i]);
				assert_true(got[n] == 42.0f);
			}
	}
}

static void test_act_quant_simd_vs_ref(void **state)
{
	static float x[N_MAX];
	static unsigned char want[N_MAX * 2], got[N_MAX * 2];
	const struct ops_act_kernels *ak = ops_act_kernels();

	(void)state;
	tu_rng_seed(12);
	for (uint32_t act = OPS_ACT_Q8_32; act < OPS_ACT_COUNT; act++)
		for (int rep = 0; rep < 40; rep++) {
			int64_t n = rep % 2 ? 256 : N_MAX;
			size_t bytes = (size_t)(n / ops_act_blck[act]) * ops_act_size[act];

			make_x(x, n, rep % 3 == 0);
			memset(want, 0, sizeof want);
			memset(got, 0, sizeof got);
			ref_act[act](x, want, n);
			ak->quant[act](x, got, n);
			if (memcmp(want, got, bytes) != 0)
				fail_msg("activation format %u n=%lld: SIMD bytes differ from the reference", act,
					 (long long)n);
		}
	/* the q8_32 block sum and the q8_256 16-element sums are the sums of q */
	make_x(x, 256, 0);
	ref_act[OPS_ACT_Q8_32](x, want, 256);
	for (int b = 0; b < 8; b++) {
		const struct blk_q8_32 *q = (const struct blk_q8_32 *)want + b;
		int s = 0;

		for (int i = 0; i < 32; i++)
			s += q->qs[i];
		assert_true(q->s == q->d * (float)s);
	}
	ref_act[OPS_ACT_Q8_256](x, want, 256);
	for (int g = 0; g < 16; g++) {
		const struct blk_q8_256 *q = (const struct blk_q8_256 *)want;
		int s = 0;

		for (int i = 0; i < 16; i++)
			s += q->qs[16 * g + i];
		assert_int_equal(q->bsums[g], s);
	}
}

/* What each format holds (ops_impl.h: the activations llama.cpp's CPU
 * backend quantizes to for the same weight type): q rounds x * 127 / amax
 * half to even; q8_32's d is amax / 127 rounded to f16 and s = d sum(q);
 * q8_1's s is amax / 127 sum(q) rounded to f16; q8_256's d is 1 / (127 /
 * amax) over 256; q8_k32 holds q8_256's values and d in blocks of 32. */
static void test_act_formats(void **state)
{
	enum { N = 1024 };
	static float x[N];
	static struct blk_q8_32 b32[N / 32], b1[N / 32], bk32[N / 32];
	static struct blk_q8_256 b256[N / QK_K];

	(void)state;
	tu_rng_seed(19);
	for (int rep = 0; rep < 6; rep++) {
		make_x(x, N, rep % 2);
		if (rep == 5)
			memset(x + 256, 0, 256 * sizeof(float)); /* an all-zero block of 256 */
		quant_act_q8_32_ref(x, b32, N);
		quant_act_q8_1_ref(x, b1, N);
		quant_act_q8_256_ref(x, b256, N);
		quant_act_q8_k32_ref(x, bk32, N);
		for (int i = 0; i < N / 32; i++) {
			float amax = 0.0f, amax256 = 0.0f, d256;
			int sum = 0;

			for (int j = 0; j < 32; j++)
				amax = fmaxf(amax, fabsf(x[32 * i + j]));
			for (int j = 0; j < QK_K; j++)
				amax256 = fmaxf(amax256, fabsf(x[QK_K * (i / 8) + j]));
			d256 = amax256 > 0.0f ? 1.0f / (127.0f / amax256) : 0.0f;
			for (int j = 0; j < 32; j++) {
				float v = x[32 * i + j];
				int q = amax > 0.0f ? (int)nearbyintf(v * (127.0f / amax)) : 0;
				int qk = amax256 > 0.0f ? (int)nearbyintf(v * (127.0f / amax256)) : 0;

				assert_int_equal(b32[i].qs[j], q);
				assert_int_equal(b1[i].qs[j], q);
				assert_int_equal(b256[i / 8].qs[32 * (i % 8) + j], qk);
				assert_int_equal(bk32[i].qs[j], qk);
				sum += q;
			}
			assert_true(b32[i].d == ops_f16_to_f32(ops_f32_to_f16(amax / 127.0f)));
			assert_true(b32[i].s == b32[i].d * (float)sum);
			assert_true(b1[i].d == b32[i].d);
			assert_true(b1[i].s == ops_f16_to_f32(ops_f32_to_f16(amax / 127.0f * (float)sum)));
			assert_true(b256[i / 8].d == d256);
			assert_true(bk32[i].d == d256);
			assert_true(bk32[i].s == d256 * (float)(b256[i / 8].bsums[2 * (i % 8)] +
								b256[i / 8].bsums[2 * (i % 8) + 1]));
		}
	}
}

static void test_dot_simd_vs_ref(void **state)
{
	static unsigned char rows[OPS_DOT_ROWS][N_MAX * 4];
	static unsigned char act[N_MAX * 2];
	static float x[N_MAX], xv[N_MAX], wv[N_MAX];

	(void)state;
	tu_rng_seed(13);
	for (size_t t = 0; t < N_TYPES; t++) {
		uint32_t type = types[t];
		const struct ops_type_kernels *k = ops_kernels(type);

		int64_t blk = tkv_dtype_traits(type)->blck < 32 ? 32 : tkv_dtype_traits(type)->blck;

		/* long rows, and rows of 1..15 blocks (odd counts for the kernels that
		 * take two blocks at a time) */
		for (int rep = 0; rep < 36; rep++) {
			int64_t n = rep % 3 == 0 ? N_MAX : rep % 3 == 1 ? blk * (1 + rep / 3) : blk * (1 + (rep * 5) % 15);
			size_t ws = sizeof rows[0];
			int nr = 1 + rep % OPS_DOT_ROWS;
			float got[OPS_DOT_ROWS], want[OPS_DOT_ROWS], one;
			const void *a;

			for (int r = 0; r < nr; r++)
				make_row(type, n, rows[r]);
			make_x(x, n, rep % 5 == 0);
			a = prepare_act(type, x, n, act, xv);
			k->dot_rows(n, rows, ws, nr, a, got);
			ref_dot[type](n, rows, ws, nr, a, want);
			for (int r = 0; r < nr; r++) {
				double exact = 0.0, mag = 0.0;

				ref_dequant[type](rows[r], wv, n);
				for (int64_t i = 0; i < n; i++) {
					exact += (double)wv[i] * xv[i];
					mag += fabs((double)wv[i] * xv[i]);
				}
				exact += q8_1_offset_term(type, rows[r], a, n);
				if (fabs((double)got[r] - want[r]) > TOL_DOT_SIMD_REL * mag)
					fail_msg("%s n=%lld row %d of %d: SIMD %.9g, ref %.9g (mag %.3g)", tkv_dtype_name(type),
						 (long long)n, r, nr, (double)got[r], (double)want[r], mag);
				if (fabs((double)want[r] - exact) > TOL_DOT_EXACT_REL * mag)
					fail_msg("%s n=%lld row %d: ref %.9g, exact %.9g (mag %.3g)", tkv_dtype_name(type),
						 (long long)n, r, (double)want[r], exact, mag);
				/* a row's result does not depend on the rows beside it */
				k->dot_rows(n, rows[r], ws, 1, a, &one);
				if (memcmp(&one, &got[r], sizeof one) != 0)
					fail_msg("%s: row %d alone %a, in a group of %d %a", tkv_dtype_name(type), r,
						 (double)one, nr, (double)got[r]);
			}
		}
	}
}

static void test_quantize_round_trip(void **state)
{
	static const struct {
		uint32_t type;
		double tol;
		int affine;
	} cases[] = {
		{ TKV_F16, TOL_RT_F16, 0 }, { TKV_BF16, TOL_RT_BF16, 0 }, { TKV_Q4_0, TOL_RT_Q4_0, 0 },
		{ TKV_Q8_0, TOL_RT_Q8_0, 0 }, { TKV_Q4_K, TOL_RT_Q4_K, 1 }, { TKV_Q5_K, TOL_RT_Q5_K, 1 },
		{ TKV_Q6_K, TOL_RT_Q6_K, 0 }, { TKV_Q4_1, TOL_RT_Q4_1, 1 }, { TKV_Q5_0, TOL_RT_Q5_0, 0 },
		{ TKV_Q5_1, TOL_RT_Q5_1, 1 }, { TKV_IQ4_NL, TOL_RT_IQ4_NL, 0 }, { TKV_Q2_K, TOL_RT_Q2_K, 1 },
		{ TKV_Q3_K, TOL_RT_Q3_K, 0 }, { TKV_IQ4_XS, TOL_RT_IQ4_XS, 0 },
	};
	static float x[1024], back[1024];
	static unsigned char q[1024 * 4];

	(void)state;
	tu_rng_seed(14);
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		uint32_t blk = tkv_dtype_traits(cases[c].type)->blck;

		for (int rep = 0; rep < 10; rep++) {
			for (int i = 0; i < 1024; i++)
				x[i] = tu_rng_f53(-0.05f, 0.05f) + (rep % 2 ? 0.02f : 0.0f);
			assert_int_equal(ops_quantize_row(cases[c].type, x, q, 1024), 0);
			ops_dequant_row(cases[c].type, q, back, 1024);
			for (uint32_t b0 = 0; b0 < 1024; b0 += blk < 32 ? 32 : blk) {
				/* error relative to the block's magnitude or range */
				uint32_t len = blk < 32 ? 32 : blk;
				float lo = 0.0f, hi = 0.0f, amax = 0.0f;

				for (uint32_t i = b0; i < b0 + len; i++) {
					lo = fminf(lo, x[i]);
					hi = fmaxf(hi, x[i]);
					amax = fmaxf(amax, fabsf(x[i]));
				}
				for (uint32_t i = b0; i < b0 + len; i++) {
					double ref = cases[c].affine ? hi - lo : amax;

					if (fabs((double)back[i] - x[i]) > cases[c].tol * ref)
						fail_msg("%s [%u]: %g -> %g (scale %g)", tkv_dtype_name(cases[c].type), i,
							 (double)x[i], (double)back[i], ref);
				}
			}
		}
	}
	assert_int_equal(ops_quantize_row(TKV_IQ2_XXS, x, q, 256), -1);
	assert_int_equal(ops_quantize_row(TKV_Q4_0, x, q, 33), -1);
}

/* Panels: SIMD packing gives the reference's bytes (partial panels too), the
 * SIMD panel dot agrees with the reference, and the reference agrees with the
 * exact dot of the dequantized weights and activations. */
static void test_panels(void **state)
{
	enum { N = 1024 };
	static unsigned char rows[OPS_PANEL_ROWS][N * 2];
	static unsigned char want[N / 32 * OPS_PANEL_BLOCK], got[N / 32 * OPS_PANEL_BLOCK];
	static struct blk_q8_32 act[OPS_PANEL_COLS][N / 32];
	static float x[N], wv[N];
	float s_ref[OPS_PANEL_COLS * OPS_PANEL_ROWS], s_simd[OPS_PANEL_COLS * OPS_PANEL_ROWS];

	(void)state;
	tu_rng_seed(16);
	for (size_t t = 0; t < N_TYPES; t++) {
		uint32_t type = types[t];
		const struct ops_type_kernels *k = ops_kernels(type);
		size_t ws = sizeof rows[0];

		if (!ref_pack[type]) {
			assert_null(k->pack);
			continue;
		}
		assert_non_null(k->pack);
		assert_non_null(k->panel);
		for (int rep = 0; rep < 8; rep++) {
			int nr = rep == 3 ? 5 : OPS_PANEL_ROWS, nc = 1 + rep % OPS_PANEL_COLS;

			for (int r = 0; r < OPS_PANEL_ROWS; r++)
				make_row(type, N, rows[r]);
			memset(want, 0xaa, sizeof want);
			memset(got, 0x55, sizeof got);
			ref_pack[type](rows, ws, nr, N, want);
			k->pack(rows, ws, nr, N, got);
			if (memcmp(want, got, type == TKV_Q6_K ? N / 256 * OPS_PANEL_K6_BLOCK : sizeof want) != 0)
				fail_msg("%s: SIMD panel bytes differ from the reference (%d rows)", tkv_dtype_name(type), nr);
			for (int c = 0; c < nc; c++) {
				make_x(x, N, c == 1);
				ref_act[k->panel_act](x, act[c], N);
			}
			ref_panel[type](N, want, act, sizeof act[0], nc, s_ref, OPS_PANEL_ROWS);
			k->panel(N, got, act, sizeof act[0], nc, s_simd, OPS_PANEL_ROWS);
			for (int c = 0; c < nc; c++)
				for (int r = 0; r < OPS_PANEL_ROWS; r++) {
					double exact = 0.0, mag = 0.0;

					if (r < nr)
						ref_dequant[type](rows[r], wv, N);
					else
						memset(wv, 0, sizeof wv);
					for (int i = 0; i < N; i++) {
						double xv = (double)act[c][i / 32].d * act[c][i / 32].qs[i % 32];

						exact += wv[i] * xv;
						mag += fabs(wv[i] * xv);
					}
					if (r < nr)
						exact += q8_1_offset_term(type, rows[r], act[c], N);
					if (fabs((double)s_simd[c * 8 + r] - s_ref[c * 8 + r]) > TOL_PANEL_SIMD_REL * mag)
						fail_msg("%s col %d row %d: SIMD %.9g, ref %.9g", tkv_dtype_name(type), c, r,
							 (double)s_simd[c * 8 + r], (double)s_ref[c * 8 + r]);
					if (fabs((double)s_ref[c * 8 + r] - exact) > TOL_DOT_EXACT_REL * mag + 1e-30)
						fail_msg("%s col %d row %d: ref %.9g, exact %.9g (mag %.3g)", tkv_dtype_name(type), c,
							 r, (double)s_ref[c * 8 + r], exact, mag);
				}
		}
	}
}

/* Threaded matmul (one and several matrices): with few tokens it equals the
 * per-row dots of the selected kernel bit for bit; with many (the panel path
 * for the types that have one) it agrees with the exact float product within
 * the rounding of the activations. */
static void test_matmul_threads(void **state)
{
	enum { COLS = 512, NTOK = 37 };
	static const int rows_of[] = { 1000, 72, 76 };
	static unsigned char w[3][1000 * COLS * 4 / 1];
	static float x[NTOK * COLS], y[3][NTOK * 1000];
	static unsigned char act[COLS * 2];
	static float xv[COLS], wv[COLS];
	struct tpool *tp;
	struct tkv_error err;
	size_t work_size = ops_matmul_work_size(COLS, NTOK, 2);
	void *work = malloc(work_size);

	(void)state;
	assert_non_null(work);
	assert_int_equal(tpool_init(&tp, 2, NULL, &err), TKV_OK);
	tu_rng_seed(15);
	for (size_t t = 0; t < N_TYPES; t++) {
		uint32_t type = types[t];
		size_t rb = tkv_dtype_row_size(type, COLS);
		struct ops_mat m[3];
		const struct ops_mat *mp[3] = { &m[0], &m[1], &m[2] };
		float *yp[3] = { y[0], y[1], y[2] };

		for (int i = 0; i < 3; i++) {
			m[i] = (struct ops_mat){ .data = w[i], .type = type, .rows = rows_of[i], .cols = COLS, .row_bytes = rb };
			for (int r = 0; r < rows_of[i]; r++)
				make_row(type, COLS, w[i] + (size_t)r * rb);
		}
		for (int ntok = 1; ntok <= NTOK; ntok += NTOK - 1) {
			make_x(x, (int64_t)ntok * COLS, 0);
			for (int pass = 0; pass < 2; pass++) {
				/* pass 1 has no workspace: pieces on the stack, row dots only */
				int exact_dots = ntok < 8 || pass == 1 || !ops_kernels(type)->pack;
				uint32_t blk = ops_act_blck[ops_kernels(type)->panel_act];

				if (pass == 0)
					ops_matmul_n(tp, mp, yp, 3, x, ntok, work, work_size);
				else
					for (int i = 0; i < 3; i++)
						ops_matmul(tp, &m[i], x, y[i], ntok);
				for (int i = 0; i < 3; i++)
					for (int tk = 0; tk < ntok; tk += 7)
						for (int r = 0; r < rows_of[i]; r += r % 8 == 7 ? 9 : 1) {
							const float *xt = x + (size_t)tk * COLS;
							float got = y[i][(size_t)tk * rows_of[i] + r], d;
							double exact = 0.0, mag = 0.0, bound = 0.0;

							if (exact_dots) {
								const void *a = prepare_act(type, xt, COLS, act, xv);

								ops_kernels(type)->dot_rows(COLS, w[i] + (size_t)r * rb, rb, 1, a, &d);
								if (memcmp(&d, &got, sizeof d) != 0)
									fail_msg("%s pass %d mat %d tok %d row %d: %a, dot %a",
										 tkv_dtype_name(type), pass, i, tk, r, (double)got,
										 (double)d);
								continue;
							}
							/* half a step of the panel format's blocks, and
							 * its scale's f16 rounding (at most amax / 2048) */
							ops_dequant_row(type, w[i] + (size_t)r * rb, wv, COLS);
							for (int b = 0; b < COLS; b += (int)blk) {
								float amax = 0.0f;

								for (int e = b; e < b + (int)blk; e++)
									amax = fmaxf(amax, fabsf(xt[e]));
								for (int e = b; e < b + (int)blk; e++) {
									exact += (double)wv[e] * xt[e];
									mag += fabs((double)wv[e] * xt[e]);
									bound += fabs((double)wv[e]) * amax * (1.0 / 254.0 + 1.0 / 2048.0);
								}
							}
							if (fabs(got - exact) > bound + TOL_MATMUL_FLOAT_REL * mag)
								fail_msg("%s mat %d tok %d row %d: %.9g, exact %.9g (bound %.3g)",
									 tkv_dtype_name(type), i, tk, r, (double)got, exact,
									 bound + TOL_MATMUL_FLOAT_REL * mag);
						}
			}
		}
	}
	tpool_free(tp);
	free(work);
}

/* The interleaved layout: repacking keeps every element (read back through
 * the reference gemv against unit activations), the SIMD group dots agree
 * with the reference ones and those equal the row dots, SIMD packing of a
 * group gives the reference's panel, matmuls over a repacked matrix agree
 * with the row layout's, and ops_mat_row reads every row back. */
static void test_interleaved(void **state)
{
	enum { COLS = 512, ROWS = 48, NTOK = 19 };
	static const uint32_t x8_types[] = { TKV_Q4_0, TKV_Q8_0, TKV_Q4_K, TKV_Q5_K, TKV_Q6_K, TKV_Q4_1, TKV_Q5_0, TKV_Q5_1,
					     TKV_IQ4_NL, TKV_IQ4_XS, TKV_Q2_K, TKV_Q3_K };
	static unsigned char w[ROWS * COLS * 2], packed[ROWS * COLS * 2];
	static unsigned char want_panel[COLS / 32 * OPS_PANEL_BLOCK], got_panel[COLS / 32 * OPS_PANEL_BLOCK];
	static struct blk_q8_32 act[NTOK][COLS / 32]; /* room for either format: 40 > 292 / 8 bytes a 32 */
	static float av[NTOK][COLS];
	static float x[NTOK * COLS], y_rows[NTOK * ROWS], y_x8[NTOK * ROWS];
	float s_ref[OPS_PANEL_COLS * 8], s_simd[OPS_PANEL_COLS * 8], dots[8];
#if HAVE_X86
	/* the AVX2 group dots where the selected ones may be others */
	static const ops_gemv_x8_fn x8_avx2[TKV_DTYPE_COUNT] = {
		[TKV_Q4_0] = gemv_q4_0_x8_avx2, [TKV_Q8_0] = gemv_q8_0_x8_avx2,
		[TKV_Q4_K] = gemv_q4_k_x8_avx2, [TKV_Q5_K] = gemv_q5_k_x8_avx2, [TKV_Q6_K] = gemv_q6_k_x8_avx2,
		[TKV_Q4_1] = gemv_q4_1_x8_avx2, [TKV_Q5_0] = gemv_q5_0_x8_avx2, [TKV_Q5_1] = gemv_q5_1_x8_avx2,
		[TKV_IQ4_NL] = gemv_iq4_nl_x8_avx2, [TKV_IQ4_XS] = gemv_iq4_xs_x8_avx2,
		[TKV_Q2_K] = gemv_q2_k_x8_avx2, [TKV_Q3_K] = gemv_q3_k_x8_avx2,
	};
#endif
	size_t work_size = ops_matmul_work_size(COLS, NTOK, 2);
	void *work = malloc(work_size);
	struct tpool *tp;
	struct tkv_error err;

	(void)state;
	assert_non_null(work);
	assert_int_equal(tpool_init(&tp, 2, NULL, &err), TKV_OK);
	tu_rng_seed(17);
	for (size_t t = 0; t < sizeof x8_types / sizeof x8_types[0]; t++) {
		uint32_t type = x8_types[t];
		const struct ops_type_kernels *k = ops_kernels(type);
		size_t rb = tkv_dtype_row_size(type, COLS), gstride = COLS / 32 * k->x8_block;
		size_t as = (size_t)(COLS / ops_act_blck[k->act_type]) * ops_act_size[k->act_type];
		struct ops_mat m = { .data = w, .type = type, .rows = ROWS, .cols = COLS, .row_bytes = rb };
		struct ops_mat mx = m;
		assert_non_null(k->gemv_x8);
		for (int r = 0; r < ROWS; r++)
			make_row(type, COLS, w + (size_t)r * rb);
		assert_int_equal(ops_repack_size(&m), ROWS * rb);
		ops_repack(&mx, packed);
		assert_int_equal(mx.layout, OPS_LAYOUT_X8);
		assert_ptr_equal(mx.data, packed);
		assert_int_equal(ops_repack_size(&mx), 0); /* already interleaved */
		/* embedding lookups (a tied output) read each row back exactly */
		for (int r = 0; r < ROWS; r++) {
			static float want_row[COLS], got_row[COLS];

			ops_dequant_row(type, w + (size_t)r * rb, want_row, COLS);
			ops_mat_row(&mx, r, got_row);
			assert_memory_equal(want_row, got_row, sizeof want_row);
			ops_mat_row(&m, r, got_row);
			assert_memory_equal(want_row, got_row, sizeof want_row);
		}
		for (int tk = 0; tk < NTOK; tk++) {
			make_x(x + (size_t)tk * COLS, COLS, tk == 2);
			prepare_act(type, x + (size_t)tk * COLS, COLS, (char *)act + (size_t)tk * as, av[tk]);
		}
		for (int g = 0; g < ROWS / 8; g++) {
			const unsigned char *grp = packed + (size_t)g * gstride;

			for (int nc = 1; nc <= OPS_PANEL_COLS; nc++) {
				ref_x8[type](COLS, grp, act, as, nc, s_ref, 8);
				k->gemv_x8(COLS, grp, act, as, nc, s_simd, 8);
#if HAVE_X86
				/* the AVX2 version, where the selected one is another */
				if (x8_avx2[type] && cpu_features()->avx2) {
					float s_avx2[OPS_PANEL_COLS * 8];

					x8_avx2[type](COLS, grp, act, as, nc, s_avx2, 8);
					for (int i = 0; i < nc * 8; i++)
						if (fabs((double)s_avx2[i] - s_simd[i]) > 1e-4 * (fabs((double)s_simd[i]) + 1.0))
							fail_msg("%s x8 avx2 [%d]: %.9g, selected kernel %.9g", tkv_dtype_name(type), i,
								 (double)s_avx2[i], (double)s_simd[i]);
				}
#endif
				for (int c = 0; c < nc; c++) {
					/* the reference equals the row dots bit for bit */
					const void *ac = (const char *)act + (size_t)c * as;

					ref_dot[type](COLS, w + (size_t)(8 * g) * rb, rb, 4, ac, dots);
					ref_dot[type](COLS, w + (size_t)(8 * g + 4) * rb, rb, 4, ac, dots + 4);
					for (int r = 0; r < 8; r++) {
						double mag = 0.0;
						static float wv[COLS];

						if (memcmp(&s_ref[c * 8 + r], &dots[r], sizeof dots[r]) != 0)
							fail_msg("%s group %d row %d col %d: x8 ref %a, row dot %a", tkv_dtype_name(type),
								 g, r, c, (double)s_ref[c * 8 + r], (double)dots[r]);
						ref_dequant[type](w + (size_t)(8 * g + r) * rb, wv, COLS);
						for (int i = 0; i < COLS; i++)
							mag += fabs((double)wv[i] * av[c][i]);
						if (fabs((double)s_simd[c * 8 + r] - s_ref[c * 8 + r]) > TOL_PANEL_SIMD_REL * mag)
							fail_msg("%s group %d row %d col %d: SIMD %.9g, ref %.9g", tkv_dtype_name(type), g,
								 r, c, (double)s_simd[c * 8 + r], (double)s_ref[c * 8 + r]);
					}
				}
			}
			if (ref_pack_x8[type]) {
				assert_non_null(k->pack_x8);
				memset(want_panel, 0xaa, sizeof want_panel);
				memset(got_panel, 0x55, sizeof got_panel);
				size_t psize = type == TKV_Q6_K ? COLS / QK_K * OPS_PANEL_K6_BLOCK : sizeof want_panel;

				ref_pack_x8[type](grp, COLS, want_panel);
				k->pack_x8(grp, COLS, got_panel);
				if (memcmp(want_panel, got_panel, psize) != 0)
					fail_msg("%s group %d: SIMD panel differs from the reference", tkv_dtype_name(type), g);
				/* and the panel holds the group's rows */
				ref_pack[type](w + (size_t)(8 * g) * rb, rb, 8, COLS, want_panel);
				if (memcmp(want_panel, got_panel, psize) != 0)
					fail_msg("%s group %d: panel from the group differs from the panel of the rows",
						 tkv_dtype_name(type), g);
			}
		}
		/* matmuls: decode (1 token) and prefill sizes, threads and workspace */
		for (int ntok = 1; ntok <= NTOK; ntok += NTOK - 1) {
			const struct ops_mat *mp = &m, *mxp = &mx;
			float *yr = y_rows, *yx = y_x8;

			ops_matmul_n(tp, &mp, &yr, 1, x, ntok, work, work_size);
			ops_matmul_n(tp, &mxp, &yx, 1, x, ntok, work, work_size);
			for (int i = 0; i < ntok * ROWS; i++) {
				static float wv[COLS];
				const float *xt = x + (size_t)(i / ROWS) * COLS;
				double mag = 0.0;

				ref_dequant[type](w + (size_t)(i % ROWS) * rb, wv, COLS);
				for (int e = 0; e < COLS; e++)
					mag += fabs((double)wv[e] * xt[e]);
				if (fabs((double)y_rows[i] - y_x8[i]) > 2 * TOL_PANEL_SIMD_REL * mag)
					fail_msg("%s %d tokens [%d]: rows %.9g, interleaved %.9g", tkv_dtype_name(type), ntok, i,
						 (double)y_rows[i], (double)y_x8[i]);
			}
			ops_matmul(tp, &mx, x, y_x8, ntok); /* no workspace: activations on the stack */
			for (int i = 0; i < ntok * ROWS; i++)
				assert_true(isfinite(y_x8[i]));
		}
	}
	/* types and shapes without the layout */
	{
		struct ops_mat m = { .data = w, .type = TKV_F16, .rows = 8, .cols = 256, .row_bytes = 512 };
		struct ops_mat odd = { .data = w, .type = TKV_Q4_0, .rows = 12, .cols = 64, .row_bytes = 36 };

		assert_int_equal(ops_repack_size(&m), 0);
		assert_int_equal(ops_repack_size(&odd), 0);
	}
	tpool_free(tp);
	free(work);
}


/* The 512-bit kernels (ops/arch/x86/quant_avx512.c) against the references,
 * called directly so that a run at TIERKV_KERNELS=avx2 or ref checks them
 * too: k-quant row dots (1..4 rows, rows of 1..16 blocks, an outlier
 * pattern), interleaved groups and pairs of panels for 1..8 activation
 * rows. */
static void test_avx512_kernels(void **state)
{
	(void)state;
#if HAVE_X86
	if (!cpu_features()->avx512_vnni) {
		print_message("skipped: this CPU lacks AVX512F/BW/VL/VNNI, the 512-bit kernels were not run\n");
		skip();
	}
	{
		static const struct {
			uint32_t type;
			ops_dot_rows_fn fn;
		} dots[] = {
			{ TKV_Q4_K, dot_rows_q4_k_avx512 },   { TKV_Q5_K, dot_rows_q5_k_avx512 },
			{ TKV_Q6_K, dot_rows_q6_k_avx512 },   { TKV_Q4_1, dot_rows_q4_1_avx512 },
			{ TKV_Q5_0, dot_rows_q5_0_avx512 },   { TKV_Q5_1, dot_rows_q5_1_avx512 },
			{ TKV_IQ4_NL, dot_rows_iq4_nl_avx512 }, { TKV_Q3_K, dot_rows_q3_k_avx512 },
			{ TKV_Q2_K, dot_rows_q2_k_avx512 },   { TKV_IQ4_XS, dot_rows_iq4_xs_avx512 },
		};
		static const struct {
			uint32_t type;
			ops_gemv_x8_fn fn;
		} x8[] = {
			{ TKV_Q4_0, gemv_q4_0_x8_avx512 },
			{ TKV_Q8_0, gemv_q8_0_x8_avx512 },
			{ TKV_Q4_K, gemv_q4_k_x8_avx512 },
			{ TKV_Q6_K, gemv_q6_k_x8_avx512 },
			{ TKV_Q5_K, gemv_q5_k_x8_avx512 },
			{ TKV_Q4_1, gemv_q4_1_x8_avx512 },
			{ TKV_Q5_0, gemv_q5_0_x8_avx512 },
			{ TKV_Q5_1, gemv_q5_1_x8_avx512 },
			{ TKV_IQ4_NL, gemv_iq4_nl_x8_avx512 },
			{ TKV_IQ4_XS, gemv_iq4_xs_x8_avx512 },
			{ TKV_Q2_K, gemv_q2_k_x8_avx512 },
			{ TKV_Q3_K, gemv_q3_k_x8_avx512 },
		};
		enum { XCOLS = 1024 };
		static unsigned char rows[OPS_DOT_ROWS][N_MAX * 4], w[8 * XCOLS * 2], packed[8 * XCOLS * 2];
		static unsigned char act[N_MAX * 2];
		static struct blk_q8_32 xact[OPS_PANEL_COLS][XCOLS / 32];
		static float x[N_MAX], xv[N_MAX], wv[N_MAX];
		int runs = 0;

		tu_rng_seed(18);
		for (size_t t = 0; t < sizeof dots / sizeof dots[0]; t++)
			for (int rep = 0; rep < 32; rep++) {
				uint32_t at = ops_kernels(dots[t].type)->act_type;
				/* blocks of 32: odd block counts too (the last block alone) */
				int64_t n = rep % 2 ? (at == OPS_ACT_Q8_256 ? QK_K * (1 + rep % 16) : 32 * (1 + rep % 9))
						    : N_MAX;
				int nr = 1 + rep % OPS_DOT_ROWS;
				float got[OPS_DOT_ROWS], want[OPS_DOT_ROWS];

				for (int r = 0; r < nr; r++)
					make_row(dots[t].type, n, rows[r]);
				make_x(x, n, rep % 5 == 0);
				ref_act[at](x, act, n);
				dots[t].fn(n, rows, sizeof rows[0], nr, act, got);
				ref_dot[dots[t].type](n, rows, sizeof rows[0], nr, act, want);
				for (int r = 0; r < nr; r++) {
					double mag = 0.0;
					const struct blk_q8_256 *ab = (const void *)act;
					const struct blk_q8_32 *a32 = (const void *)act;

					ref_dequant[dots[t].type](rows[r], wv, n);
					for (int64_t i = 0; i < n; i++) {
						xv[i] = at == OPS_ACT_Q8_256 ? ab[i / QK_K].d * ab[i / QK_K].qs[i % QK_K]
									     : a32[i / 32].d * a32[i / 32].qs[i % 32];
						mag += fabs((double)wv[i] * xv[i]);
					}
					if (!(fabs((double)got[r] - want[r]) <= TOL_DOT_SIMD_REL * mag))
						fail_msg("%s avx512 n=%lld row %d of %d: %.9g, ref %.9g (mag %.3g)",
							 tkv_dtype_name(dots[t].type), (long long)n, r, nr, (double)got[r],
							 (double)want[r], mag);
					runs++;
				}
			}
		for (size_t t = 0; t < sizeof x8 / sizeof x8[0]; t++) {
			uint32_t type = x8[t].type;
			size_t rb = tkv_dtype_row_size(type, XCOLS);
			struct ops_mat m = { .data = w, .type = type, .rows = 8, .cols = XCOLS, .row_bytes = rb };

			for (int r = 0; r < 8; r++)
				make_row(type, XCOLS, w + (size_t)r * rb);
			ops_repack(&m, packed);
			uint32_t at = ops_kernels(type)->act_type;
			size_t as = (size_t)(XCOLS / ops_act_blck[at]) * ops_act_size[at];
			static float xvals[OPS_PANEL_COLS][XCOLS];

			for (int c = 0; c < OPS_PANEL_COLS; c++) {
				make_x(x, XCOLS, c == 2);
				prepare_act(type, x, XCOLS, (char *)xact + (size_t)c * as, xvals[c]);
			}
			for (int nc = 1; nc <= OPS_PANEL_COLS; nc++) {
				float got[OPS_PANEL_COLS * 8], want[OPS_PANEL_COLS * 8];

				x8[t].fn(XCOLS, packed, xact, as, nc, got, 8);
				ref_x8[type](XCOLS, packed, xact, as, nc, want, 8);
				for (int c = 0; c < nc; c++)
					for (int r = 0; r < 8; r++) {
						double mag = 0.0;

						ref_dequant[type](w + (size_t)r * rb, wv, XCOLS);
						for (int i = 0; i < XCOLS; i++)
							mag += fabs((double)wv[i] * xvals[c][i]);
						if (!(fabs((double)got[c * 8 + r] - want[c * 8 + r]) <= TOL_PANEL_SIMD_REL * mag))
							fail_msg("%s avx512 x8 col %d of %d row %d: %.9g, ref %.9g",
								 tkv_dtype_name(type), c, nc, r, (double)got[c * 8 + r],
								 (double)want[c * 8 + r]);
						runs++;
					}
			}
		}
		/* two panels as 16 rows, for 1..8 activation rows */
		for (size_t t = 0; t < 5; t++) {
			static const uint32_t p2_types[] = { TKV_Q4_0, TKV_Q5_K, TKV_Q6_K, TKV_IQ4_NL, TKV_IQ4_XS };
			uint32_t type = p2_types[t];
			ops_panel2_fn fn = type == TKV_Q6_K				     ? panel2_k6_avx512
					   : type == TKV_IQ4_NL || type == TKV_IQ4_XS ? panel2_s8_avx512
										     : panel2_u_avx512;
			size_t rb = tkv_dtype_row_size(type, XCOLS), pstride = XCOLS / 32 * OPS_PANEL_BLOCK;
			static unsigned char panels[2 * XCOLS / 32 * OPS_PANEL_BLOCK];

			for (int r = 0; r < 16; r++)
				make_row(type, XCOLS, w + (size_t)r * rb);
			for (int c = 0; c < OPS_PANEL_COLS; c++) {
				make_x(x, XCOLS, c == 2);
				ref_act[ops_kernels(type)->panel_act](x, xact[c], XCOLS);
			}
			ref_pack[type](w, rb, 8, XCOLS, panels);
			ref_pack[type](w + 8 * rb, rb, 8, XCOLS, panels + pstride);
			for (int nc = 1; nc <= OPS_PANEL_COLS; nc++) {
				float got[OPS_PANEL_COLS * 16], want[OPS_PANEL_COLS * 16];

				fn(XCOLS, panels, pstride, xact, sizeof xact[0], nc, got, 16);
				ref_panel[type](XCOLS, panels, xact, sizeof xact[0], nc, want, 16);
				ref_panel[type](XCOLS, panels + pstride, xact, sizeof xact[0], nc, want + 8, 16);
				for (int c = 0; c < nc; c++)
					for (int r = 0; r < 16; r++) {
						double mag = 0.0;

						ref_dequant[type](w + (size_t)r * rb, wv, XCOLS);
						for (int i = 0; i < XCOLS; i++)
							mag += fabs((double)wv[i] * xact[c][i / 32].d * xact[c][i / 32].qs[i % 32]);
						if (!(fabs((double)got[c * 16 + r] - want[c * 16 + r]) <= TOL_PANEL_SIMD_REL * mag))
							fail_msg("%s avx512 two panels col %d of %d row %d: %.9g, ref %.9g",
								 tkv_dtype_name(type), c, nc, r, (double)got[c * 16 + r],
								 (double)want[c * 16 + r]);
						runs++;
					}
			}
		}
		print_message("avx512 kernels: %d row and group results checked against the references\n", runs);
	}
#else
	print_message("skipped: not an x86 CPU, there are no 512-bit kernels\n");
	skip();
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_block_sizes),
		cmocka_unit_test(test_known_blocks),
		cmocka_unit_test(test_dequant_simd_vs_ref),
		cmocka_unit_test(test_act_quant_simd_vs_ref),
		cmocka_unit_test(test_act_formats),
		cmocka_unit_test(test_dot_simd_vs_ref),
		cmocka_unit_test(test_quantize_round_trip),
		cmocka_unit_test(test_panels),
		cmocka_unit_test(test_matmul_threads),
		cmocka_unit_test(test_interleaved),
		cmocka_unit_test(test_avx512_kernels),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
