/* test_ops.c - the scalar reference kernels: f16/bf16 conversion bit for bit,
 * row dequant and dot for every supported weight type against a double
 * reference, matmul, rmsnorm, softmax, rope and swiglu. */
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dtype.h"
#include "ops/ops.h"

/* Dequantizing F32/F16/BF16/Q8_0 is exact: a Q8_0 element is an f16 scale
 * (11 significant bits) times an int8 (8 bits), a 19-bit product a float holds
 * exactly. So dequant is compared with ==, no tolerance. */

/* Float dot products accumulate one rounding per term: the classic bound is
 * n * u * sum|w_i x_i| with u = 2^-24. Rows here are at most 256 long, so
 * 256 * 6e-8 = 1.5e-5 of sum|w_i x_i| bounds the error; a bit above that. */
#define TOL_DOT_REL 2e-5
/* rmsnorm: one float multiply chain per element after a double sum of squares,
 * plus a float sqrt and divide: a few ulps, 1e-6 relative is ~8 ulps. */
#define TOL_NORM_REL 1e-6
/* softmax: expf is within an ulp or two, the float sum of n <= 1000 terms adds
 * up to n * u relatively; 1e-5 absolute on weights <= 1 covers n = 128 easily,
 * and the sum check uses the same bound. */
#define TOL_SOFTMAX 1e-5
/* rope: cosf/sinf of a float angle are within an ulp, but the angle itself
 * (pos * inv_freq, rounded to float) is off by up to |theta| * u; with pos up
 * to ~1000 that rotates by ~6e-5 rad. Norms are preserved far better than the
 * angle: the rotation matrix built from cosf/sinf is orthogonal to ~1e-7. */
#define TOL_ROPE_NORM_REL 1e-6
#define TOL_ROPE_ANGLE 1e-4
/* cosf(pi/2 as a float) is -4.4e-8, not 0: the 90-degree case is exact to that. */
#define TOL_ROPE_90 1e-6
/* swiglu: expf, a divide and a multiply, each within an ulp or so. */
#define TOL_SWIGLU_REL 1e-6

/* ---- helpers --------------------------------------------------------------- */

#define TEST_PI 3.14159265358979323846

static float bits_f32(uint32_t b)
{
	float f;

	memcpy(&f, &b, sizeof f);
	return f;
}

static bool f16_is_nan(uint16_t h)
{
	return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

static bool bf16_is_nan(uint16_t h)
{
	return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
}

/* Value of an f16 bit pattern, decoded independently of ops.c. */
/* The value of a 16-bit float with 1 sign bit, ebits of exponent (bias
 * 2^(ebits-1) - 1) and 16 - 1 - ebits of mantissa, from the definition. */
static double ref_half(uint16_t h, int ebits)
{
	int mbits = 15 - ebits, bias = (1 << (ebits - 1)) - 1;
	int e = (h >> mbits) & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1);
	double v;

	if (e == (1 << ebits) - 1)
		v = m ? NAN : INFINITY;
	else if (e == 0)
		v = ldexp(m, 1 - bias - mbits);
	else
		v = ldexp((1 << mbits) + m, e - bias - mbits);
	return (h & 0x8000) ? -v : v;
}

static double ref_f16(uint16_t h)
{
	return ref_half(h, 5);
}

static double ref_bf16(uint16_t h)
{
	return ref_half(h, 8);
}

/* Nearest f16 to a finite float by search over the ordered non-negative
 * patterns 0..0x7c00 (0x7c00 standing for the first value past the largest,
 * 65536, so that values past 65520 round to Inf); ties go to the even pattern. */
static uint16_t ref_f32_to_f16(float f)
{
	double a = fabs((double)f);
	uint16_t sign = signbit(f) ? 0x8000 : 0, lo = 0, hi = 0x7c00, pick;
	double vlo, vhi;

	if (a >= 65536.0)
		return sign | 0x7c00;
	/* largest pattern with value <= a */
	while (hi - lo > 1) {
		uint16_t mid = (uint16_t)((lo + hi) / 2);

		if (ref_f16(mid) <= a)
			lo = mid;
		else
			hi = mid;
	}
	vlo = ref_f16(lo);
	if (vlo == a)
		return sign | lo;
	hi = (uint16_t)(lo + 1);
	vhi = hi == 0x7c00 ? 65536.0 : ref_f16(hi);
	if (a - vlo < vhi - a)
		pick = lo;
	else if (a - vlo > vhi - a)
		pick = hi;
	else
		pick = (lo & 1) ? hi : lo;
	return sign | pick;
}

/* ---- f16 --------------------------------------------------------------- */

static void test_f16_known_patterns(void **state)
{
	static const struct {
		float f;
		uint16_t h;
	} cases[] = {
		{ 1.0f, 0x3c00 },
		{ -2.0f, 0xc000 },
		{ 0.5f, 0x3800 },
		{ 0.0f, 0x0000 },
		{ -0.0f, 0x8000 },
		{ 65504.0f, 0x7bff },           /* largest finite */
		{ -65504.0f, 0xfbff },
		{ 0x1p-24f, 0x0001 },           /* smallest subnormal */
		{ -0x1p-24f, 0x8001 },
		{ 0x3ffp-24f, 0x03ff },         /* largest subnormal */
		{ 0x1p-14f, 0x0400 },           /* smallest normal */
		{ 65519.0f, 0x7bff },           /* below the Inf midpoint */
		{ 65520.0f, 0x7c00 },           /* the midpoint: ties to even = Inf */
		{ 65536.0f, 0x7c00 },
		{ 1e6f, 0x7c00 },
		{ -1e6f, 0xfc00 },
		{ FLT_MAX, 0x7c00 },
		{ INFINITY, 0x7c00 },
		{ -INFINITY, 0xfc00 },
		{ 0x1p-25f, 0x0000 },           /* half the smallest subnormal: tie to 0 */
		{ -0x1p-25f, 0x8000 },
		{ 0x1.000002p-25f, 0x0001 },    /* just above that half: rounds up */
		{ 0x1p-26f, 0x0000 },
		{ FLT_MIN, 0x0000 },            /* float normals far below f16 */
		{ 0x1p-149f, 0x0000 },          /* float subnormal */
		{ -0x1p-149f, 0x8000 },
		{ 3.14159265f, 0x4248 },
		{ 0.333333343f, 0x3555 },
		{ 1000.0f, 0x63d0 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint16_t h = ops_f32_to_f16(cases[i].f);

		if (h != cases[i].h)
			fail_msg("f32_to_f16(%a) = 0x%04x, want 0x%04x", (double)cases[i].f, h, cases[i].h);
	}
	assert_true(ops_f16_to_f32(0x3c00) == 1.0f);
	assert_true(ops_f16_to_f32(0xc000) == -2.0f);
	assert_true(ops_f16_to_f32(0x7bff) == 65504.0f);
	assert_true(ops_f16_to_f32(0x0001) == 0x1p-24f);
	assert_true(ops_f16_to_f32(0x8001) == -0x1p-24f);
	assert_true(ops_f16_to_f32(0x03ff) == 0x3ffp-24f);
	assert_true(ops_f16_to_f32(0x0400) == 0x1p-14f);
	assert_true(ops_f16_to_f32(0x7c00) == INFINITY);
	assert_true(ops_f16_to_f32(0xfc00) == -INFINITY);
	assert_true(ops_f16_to_f32(0x0000) == 0.0f && !signbit(ops_f16_to_f32(0x0000)));
	assert_true(ops_f16_to_f32(0x8000) == 0.0f && signbit(ops_f16_to_f32(0x8000)));
}

/* Every f16 pattern decodes to its exact value, and every non-NaN one comes
 * back bit for bit; NaN patterns decode to NaN of the same sign and come back
 * as some NaN of that sign. */
/* Every pattern of a 16-bit float (name, from16, to16, is_nan16, its
 * reference decoder ref) decodes to its exact value and sign, and every
 * non-NaN one comes back bit for bit; NaN patterns decode to NaN of the same
 * sign and come back as some NaN of that sign. Returns the non-NaN count. */
static int roundtrip_all16(const char *name, float (*from16)(uint16_t), uint16_t (*to16)(float),
			   bool (*is_nan16)(uint16_t), double (*ref)(uint16_t))
{
	int n_checked = 0;

	for (uint32_t i = 0; i < 65536; i++) {
		uint16_t h = (uint16_t)i, back;
		float f = from16(h);

		back = to16(f);
		if (is_nan16(h)) {
			if (!isnan(f) || !is_nan16(back) || (back & 0x8000) != (h & 0x8000))
				fail_msg("NaN 0x%04x -> %a -> 0x%04x", h, (double)f, back);
			continue;
		}
		if ((double)f != ref(h) || !signbit(f) != !(h & 0x8000))
			fail_msg("%s_to_f32(0x%04x) = %a, want %a", name, h, (double)f, ref(h));
		if (back != h)
			fail_msg("0x%04x -> %a -> 0x%04x", h, (double)f, back);
		n_checked++;
	}
	return n_checked;
}

static void test_f16_roundtrip_exhaustive(void **state)
{
	(void)state;
	assert_int_equal(roundtrip_all16("f16", ops_f16_to_f32, ops_f32_to_f16, f16_is_nan, ref_f16), 65536 - 2 * 1023);
}

/* Round to nearest, ties to even, on both sides of every midpoint between
 * adjacent f16 values (subnormal, normal, across exponent boundaries and up to
 * the Inf threshold), both signs. Midpoints need 12 significant bits, so they
 * are exact floats and nextafterf gives the closest values on either side. */
static void test_f16_round_nearest_even(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 0x7c00; h++) {
		double lo = ref_f16((uint16_t)h), hi = h + 1 == 0x7c00 ? 65536.0 : ref_f16((uint16_t)(h + 1));
		float mid = (float)((lo + hi) / 2);
		uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;

		assert_true((double)mid == (lo + hi) / 2);
		for (int s = 0; s < 2; s++) {
			uint16_t sg = s ? 0x8000 : 0;
			float m = s ? -mid : mid;
			float below = nextafterf(m, 0.0f), above = nextafterf(m, s ? -INFINITY : INFINITY);
			uint16_t got_mid = ops_f32_to_f16(m), got_below = ops_f32_to_f16(below),
				 got_above = ops_f32_to_f16(above);

			if (got_mid != (sg | even))
				fail_msg("tie %a -> 0x%04x, want 0x%04x", (double)m, got_mid, sg | even);
			if (got_below != (sg | h))
				fail_msg("below tie %a -> 0x%04x, want 0x%04x", (double)below, got_below, sg | h);
			if (got_above != (sg | (h + 1)))
				fail_msg("above tie %a -> 0x%04x, want 0x%04x", (double)above, got_above,
					 sg | (h + 1));
		}
	}
	/* a few by hand: 1 + 2^-11 is halfway between 0x3c00 (even) and 0x3c01 */
	assert_int_equal(ops_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
	assert_int_equal(ops_f32_to_f16(1.0f + 0x3p-11f), 0x3c02);
	assert_int_equal(ops_f32_to_f16(-(1.0f + 0x3p-11f)), 0xbc02);
	/* 1 - 2^-12 is halfway between 0x3bff (odd) and 0x3c00: carries the exponent */
	assert_int_equal(ops_f32_to_f16(1.0f - 0x1p-12f), 0x3c00);
	/* 1023.5 * 2^-24: subnormal carrying into the smallest normal */
	assert_int_equal(ops_f32_to_f16(0x7ffp-25f), 0x0400);
	assert_int_equal(ops_f32_to_f16(0x3p-25f), 0x0002);  /* 1.5 ulp -> 2 */
	assert_int_equal(ops_f32_to_f16(0x5p-25f), 0x0002);  /* 2.5 ulp -> 2 */
}

/* Random floats of every magnitude against the search reference. */
static void test_f16_random_vs_reference(void **state)
{
	(void)state;
	tu_rng_seed(1);
	for (int i = 0; i < 300000; i++) {
		/* half the draws in the f16 range, half over all float exponents */
		uint32_t b = tu_rng_u32();
		float f;

		if (i & 1)
			b = (b & 0x807fffffu) | ((uint32_t)(127 - 26 + (int)(tu_rng_u32() % 44)) << 23);
		f = bits_f32(b);
		if (isnan(f))
			continue;
		if (ops_f32_to_f16(f) != ref_f32_to_f16(f))
			fail_msg("f32_to_f16(%a) = 0x%04x, want 0x%04x", (double)f, ops_f32_to_f16(f),
				 ref_f32_to_f16(f));
	}
}

/* Each float NaN pattern converts to a 16-bit NaN (to16, is_nan16) of its sign. */
static void check_nans(const uint32_t *nans, size_t n, uint16_t (*to16)(float), bool (*is_nan16)(uint16_t))
{
	for (size_t i = 0; i < n; i++) {
		uint16_t h = to16(bits_f32(nans[i]));

		if (!is_nan16(h))
			fail_msg("NaN 0x%08x -> 0x%04x is not NaN", nans[i], h);
		assert_int_equal(h & 0x8000, (nans[i] >> 16) & 0x8000);
	}
}

static void test_f16_nan(void **state)
{
	static const uint32_t nans[] = {
		0x7fc00000u, /* the default quiet NaN */
		0xffc00000u, /* negative */
		0x7f800001u, /* signalling, payload only in bits dropped by f16 */
		0x7f801fffu,
		0xff800001u,
		0x7fa00000u,
		0x7fffffffu,
	};

	(void)state;
	check_nans(nans, sizeof nans / sizeof nans[0], ops_f32_to_f16, f16_is_nan);
	assert_true(isnan(ops_f16_to_f32(0x7e00)));
	assert_true(isnan(ops_f16_to_f32(0x7c01)));
	assert_true(isnan(ops_f16_to_f32(0xfe00)));
	assert_true(signbit(ops_f16_to_f32(0xfe00)));
}

/* ---- bf16 -------------------------------------------------------------- */

static void test_bf16_known_patterns(void **state)
{
	(void)state;
	assert_int_equal(ops_f32_to_bf16(1.0f), 0x3f80);
	assert_int_equal(ops_f32_to_bf16(-2.0f), 0xc000);
	assert_int_equal(ops_f32_to_bf16(3.0f), 0x4040);
	assert_int_equal(ops_f32_to_bf16(0.0f), 0x0000);
	assert_int_equal(ops_f32_to_bf16(-0.0f), 0x8000);
	assert_int_equal(ops_f32_to_bf16(INFINITY), 0x7f80);
	assert_int_equal(ops_f32_to_bf16(-INFINITY), 0xff80);
	assert_int_equal(ops_f32_to_bf16(FLT_MAX), 0x7f80);   /* past the last midpoint */
	assert_int_equal(ops_f32_to_bf16(-FLT_MAX), 0xff80);
	assert_int_equal(ops_f32_to_bf16(0x1.fep127f), 0x7f7f); /* largest finite bf16 */
	assert_int_equal(ops_f32_to_bf16(0x1p-133f), 0x0001);   /* smallest subnormal */
	assert_int_equal(ops_f32_to_bf16(3.14159265f), 0x4049);
	assert_true(ops_bf16_to_f32(0x3f80) == 1.0f);
	assert_true(ops_bf16_to_f32(0xc000) == -2.0f);
	assert_true(ops_bf16_to_f32(0x7f80) == INFINITY);
	assert_true(ops_bf16_to_f32(0xff80) == -INFINITY);
	assert_true(ops_bf16_to_f32(0x0001) == 0x1p-133f);
}

static void test_bf16_roundtrip_exhaustive(void **state)
{
	(void)state;
	assert_int_equal(roundtrip_all16("bf16", ops_bf16_to_f32, ops_f32_to_bf16, bf16_is_nan, ref_bf16),
			 65536 - 2 * 127);
}

/* The low 16 bits of a float decide bf16 rounding: 0x8000 is the tie. Every
 * finite bf16 pattern, both sides of its upper midpoint. */
static void test_bf16_round_nearest_even(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 65536; h++) {
		uint32_t up = h + 1, even = (h & 1) ? up : h;

		if ((h & 0x7f80) == 0x7f80) /* Inf and NaN: no midpoint above */
			continue;
		if (ops_f32_to_bf16(bits_f32(h << 16 | 0x8000)) != even)
			fail_msg("tie above 0x%04x -> 0x%04x", h, ops_f32_to_bf16(bits_f32(h << 16 | 0x8000)));
		if (ops_f32_to_bf16(bits_f32(h << 16 | 0x7fff)) != h)
			fail_msg("below tie above 0x%04x", h);
		if (ops_f32_to_bf16(bits_f32(h << 16 | 0x8001)) != (up & 0xffff))
			fail_msg("above tie above 0x%04x", h);
		if (ops_f32_to_bf16(bits_f32(h << 16 | 0x0001)) != h)
			fail_msg("just above 0x%04x", h);
	}
	assert_int_equal(ops_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);  /* tie, even below */
	assert_int_equal(ops_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);  /* tie, even above */
}

static void test_bf16_nan(void **state)
{
	static const uint32_t nans[] = {
		0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fffffffu, 0x7f810000u,
	};

	(void)state;
	check_nans(nans, sizeof nans / sizeof nans[0], ops_f32_to_bf16, bf16_is_nan);
	assert_true(isnan(ops_bf16_to_f32(0x7fc0)));
	assert_true(isnan(ops_bf16_to_f32(0x7f81)));
	assert_true(isnan(ops_bf16_to_f32(0xffc0)));
}

/* ---- weight rows ----------------------------------------------------------- */

/* The Q8_0 block as the file stores it: an f16 scale, then 32 int8 quants. */
struct tq8_0 {
	uint16_t d;
	int8_t qs[32];
};
_Static_assert(sizeof(struct tq8_0) == 34, "q8_0 block is 34 bytes");

#define ROW_MAX 256

/* A random row of `type` with n elements in `row` (large enough), and its
 * exact values (decoded independently of ops.c) in ref. */
static void make_row(uint32_t type, int n, void *row, double *ref)
{
	switch (type) {
	case TKV_F32: {
		float *w = row;
		for (int i = 0; i < n; i++) {
			w[i] = tu_rng_f53(-2.0f, 2.0f);
			ref[i] = w[i];
		}
		break;
	}
	case TKV_F16: {
		uint16_t *h = row;
		for (int i = 0; i < n; i++) {
			do
				h[i] = (uint16_t)tu_rng_u32();
			while ((h[i] & 0x7c00) == 0x7c00 || (h[i] & 0x7c00) > 0x5000); /* finite, |v| < 64 */
			ref[i] = ref_f16(h[i]);
		}
		break;
	}
	case TKV_BF16: {
		uint16_t *h = row;
		for (int i = 0; i < n; i++) {
			do
				h[i] = (uint16_t)tu_rng_u32();
			while ((h[i] & 0x7f80) > 0x4200 || (h[i] & 0x7f80) < 0x3000); /* 2^-31 .. 2^5 */
			ref[i] = ref_bf16(h[i]);
		}
		break;
	}
	case TKV_Q8_0: {
		struct tq8_0 *b = row;
		for (int k = 0; k < n / 32; k++) {
			double d;

			/* a positive normal f16 scale in [2^-12, 2^-4), as real weights use */
			b[k].d = (uint16_t)((3 + tu_rng_u32() % 8) << 10 | (tu_rng_u32() & 0x3ff));
			if (k == 1)
				b[k].d |= 0x8000; /* a negative scale too */
			d = ref_f16(b[k].d);
			for (int j = 0; j < 32; j++) {
				b[k].qs[j] = (int8_t)(int)(tu_rng_u32() % 256 - 128);
				ref[k * 32 + j] = d * b[k].qs[j];
			}
		}
		break;
	}
	default:
		fail_msg("make_row: type %u", type);
	}
}

static const uint32_t row_types[] = { TKV_F32, TKV_F16, TKV_BF16, TKV_Q8_0 };

static void test_type_supported(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof row_types / sizeof row_types[0]; i++)
		assert_true(ops_type_supported(row_types[i]));
	/* the quantized types are tested in depth by test_quant.c */
	assert_true(ops_type_supported(TKV_Q4_0));
	assert_true(ops_type_supported(TKV_Q4_K));
	assert_true(ops_type_supported(TKV_Q5_K));
	assert_true(ops_type_supported(TKV_Q6_K));
	/* every common GGUF quant from q2_k to q8_0, iq4_nl and iq4_xs */
	assert_true(ops_type_supported(TKV_Q4_1));
	assert_true(ops_type_supported(TKV_Q5_0));
	assert_true(ops_type_supported(TKV_Q5_1));
	assert_true(ops_type_supported(TKV_Q2_K));
	assert_true(ops_type_supported(TKV_Q3_K));
	assert_true(ops_type_supported(TKV_IQ4_NL));
	assert_true(ops_type_supported(TKV_IQ4_XS));
	assert_false(ops_type_supported(TKV_IQ2_XXS));
	assert_false(ops_type_supported(TKV_IQ3_S));
	assert_false(ops_type_supported(TKV_TQ2_0));
	assert_false(ops_type_supported(TKV_Q8_1));
	assert_false(ops_type_supported(TKV_I8));
	assert_false(ops_type_supported(TKV_DTYPE_COUNT));
	assert_false(ops_type_supported(1000));
	/* the hand-made block agrees with the dtype table */
	assert_int_equal(tkv_dtype_row_size(TKV_Q8_0, 64), 2 * sizeof(struct tq8_0));
}

static void test_q8_0_by_hand(void **state)
{
	struct tq8_0 b[2];
	float out[64], x[64];

	(void)state;
	memset(b, 0, sizeof b);
	b[0].d = 0x3800; /* 0.5 */
	b[1].d = 0xc000; /* -2 */
	for (int j = 0; j < 32; j++) {
		b[0].qs[j] = (int8_t)(j - 16);
		b[1].qs[j] = (int8_t)(j == 0 ? -128 : j == 1 ? 127 : j);
	}
	ops_dequant_row(TKV_Q8_0, b, out, 64);
	for (int j = 0; j < 32; j++)
		assert_true(out[j] == 0.5f * (float)(j - 16));
	assert_true(out[32] == 256.0f);
	assert_true(out[33] == -254.0f);
	for (int j = 2; j < 32; j++)
		assert_true(out[32 + j] == -2.0f * (float)j);

	for (int j = 0; j < 64; j++)
		x[j] = j < 32 ? 1.0f : 0.0f;
	/* 0.5 * sum(j - 16 for j < 32) = 0.5 * (-16) = -8 */
	assert_true(ops_dot_row(TKV_Q8_0, b, x, 64) == -8.0f);
	for (int j = 0; j < 64; j++)
		x[j] = j == 32 ? 1.0f : j == 33 ? 2.0f : 0.0f;
	assert_true(ops_dot_row(TKV_Q8_0, b, x, 64) == 256.0f - 508.0f);
}

static void test_dequant_exact(void **state)
{
	static const int sizes[] = { 32, 64, 256 };
	float row[ROW_MAX]; /* float-aligned storage for a row of any type */
	double ref[ROW_MAX];
	float out[ROW_MAX + 1];

	(void)state;
	tu_rng_seed(2);
	for (size_t t = 0; t < sizeof row_types / sizeof row_types[0]; t++) {
		for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
			int n = sizes[si];

			for (int rep = 0; rep < 20; rep++) {
				make_row(row_types[t], n, row, ref);
				out[n] = 12345.0f; /* must not be written */
				ops_dequant_row(row_types[t], row, out, n);
				for (int i = 0; i < n; i++)
					if ((double)out[i] != ref[i])
						fail_msg("%s n=%d [%d]: %a, want %a", tkv_dtype_name(row_types[t]), n,
							 i, (double)out[i], ref[i]);
				assert_true(out[n] == 12345.0f);
			}
		}
	}
}

static void test_dot_vs_reference(void **state)
{
	static const int sizes[] = { 32, 64, 96, 256 };
	float row[ROW_MAX];
	double ref[ROW_MAX];
	float x[ROW_MAX];

	(void)state;
	tu_rng_seed(3);
	for (size_t t = 0; t < sizeof row_types / sizeof row_types[0]; t++) {
		for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
			int n = sizes[si];

			for (int rep = 0; rep < 50; rep++) {
				double want = 0.0, mag = 0.0;
				float got;

				make_row(row_types[t], n, row, ref);
				for (int i = 0; i < n; i++) {
					x[i] = tu_rng_f53(-3.0f, 3.0f);
					want += ref[i] * x[i];
					mag += fabs(ref[i] * x[i]);
				}
				got = ops_dot_row(row_types[t], row, x, n);
				if (fabs(got - want) > TOL_DOT_REL * mag)
					fail_msg("%s n=%d: dot %.9g, want %.9g (mag %.3g)", tkv_dtype_name(row_types[t]),
						 n, (double)got, want, mag);
			}
		}
	}
}

/* With no pool, matmul is the row dots, token by token: bit for bit for the
 * float types; quantized weights take x rounded to 8 bits per block of 32 (a
 * step of amax/127 <= 1/127 here), which moves each product by at most
 * |w| / 254: the bound below, plus float slack. */
static void test_matmul_equals_row_dots(void **state)
{
	enum { ROWS = 7, COLS = 64, NTOK = 3 };
	static float w[ROWS * COLS]; /* float-aligned; rows packed at row_bytes */
	double ref[COLS];
	float x[NTOK][COLS], y[NTOK * ROWS + 1];

	(void)state;
	tu_rng_seed(4);
	for (size_t t = 0; t < sizeof row_types / sizeof row_types[0]; t++) {
		uint32_t type = row_types[t];
		size_t rb = tkv_dtype_row_size(type, COLS);
		/* rows packed back to back at row_bytes, as in a model file */
		unsigned char *packed = (unsigned char *)w;
		struct ops_mat m = { .data = packed, .type = type, .rows = ROWS, .cols = COLS, .row_bytes = rb };

		assert_true(rb > 0 && rb <= COLS * 4);
		for (int r = 0; r < ROWS; r++)
			make_row(type, COLS, packed + (size_t)r * rb, ref);
		for (int i = 0; i < NTOK; i++)
			for (int j = 0; j < COLS; j++)
				x[i][j] = tu_rng_f53(-1.0f, 1.0f);
		y[NTOK * ROWS] = -7.0f;
		ops_matmul(NULL, &m, &x[0][0], y, NTOK);
		for (int i = 0; i < NTOK; i++)
			for (int r = 0; r < ROWS; r++) {
				float d = ops_dot_row(type, packed + (size_t)r * rb, x[i], COLS);
				float wabs[COLS];
				double bound = 0.0;

				if (type != TKV_Q8_0) {
					if (memcmp(&y[i * ROWS + r], &d, sizeof d) != 0)
						fail_msg("%s y[%d][%d] = %a, dot %a", tkv_dtype_name(type), i, r,
							 (double)y[i * ROWS + r], (double)d);
					continue;
				}
				ops_dequant_row(type, packed + (size_t)r * rb, wabs, COLS);
				for (int j = 0; j < COLS; j++)
					bound += fabs(wabs[j]) / 254.0 * (1.0 + 1e-5);
				if (fabs(y[i * ROWS + r] - d) > bound)
					fail_msg("%s y[%d][%d] = %a, dot %a (bound %g)", tkv_dtype_name(type), i, r,
						 (double)y[i * ROWS + r], (double)d, bound);
			}
		assert_true(y[NTOK * ROWS] == -7.0f);
	}
}

/* ---- elementwise ------------------------------------------------------------- */

static void test_rmsnorm(void **state)
{
	enum { N = 96 };
	float x[N], w[N], o[N], a[N];

	(void)state;
	tu_rng_seed(5);
	for (int rep = 0; rep < 20; rep++) {
		double ss = 0.0, scale;
		float eps = rep % 2 ? 1e-5f : 1e-6f;

		for (int i = 0; i < N; i++) {
			x[i] = tu_rng_f53(-4.0f, 4.0f);
			w[i] = tu_rng_f53(0.5f, 1.5f);
			ss += (double)x[i] * x[i];
		}
		scale = 1.0 / sqrt(ss / N + eps);
		ops_rmsnorm(o, x, w, N, eps);
		for (int i = 0; i < N; i++) {
			double want = x[i] * scale * w[i];

			if (fabs(o[i] - want) > TOL_NORM_REL * fabs(want) + 1e-30)
				fail_msg("rmsnorm[%d] = %.9g, want %.9g", i, (double)o[i], want);
		}
		/* in place gives the same bits */
		memcpy(a, x, sizeof a);
		ops_rmsnorm(a, a, w, N, eps);
		assert_memory_equal(a, o, sizeof o);
	}
	/* known: x = (3, 4), w = 1, eps = 0: rms = sqrt(12.5) */
	{
		float xx[2] = { 3.0f, 4.0f }, ww[2] = { 1.0f, 1.0f }, oo[2];

		ops_rmsnorm(oo, xx, ww, 2, 0.0f);
		assert_float_equal(oo[0], 3.0 / sqrt(12.5), 1e-6);
		assert_float_equal(oo[1], 4.0 / sqrt(12.5), 1e-6);
	}
	/* all zero: eps keeps it finite */
	{
		float z[8] = { 0 }, ww[8], oo[8];

		for (int i = 0; i < 8; i++)
			ww[i] = 1.0f;
		ops_rmsnorm(oo, z, ww, 8, 1e-5f);
		for (int i = 0; i < 8; i++)
			assert_true(oo[i] == 0.0f);
	}
}

static void check_softmax(const float *in, int n)
{
	float x[1024];
	double mx = -INFINITY, sum = 0.0, got_sum = 0.0;

	assert_true(n <= 1024);
	memcpy(x, in, (size_t)n * sizeof *x);
	ops_softmax(x, n);
	for (int i = 0; i < n; i++)
		if (in[i] > mx)
			mx = in[i];
	for (int i = 0; i < n; i++)
		sum += exp((double)in[i] - mx);
	for (int i = 0; i < n; i++) {
		double want = exp((double)in[i] - mx) / sum;

		if (!isfinite(x[i]) || x[i] < 0.0f || fabs(x[i] - want) > TOL_SOFTMAX)
			fail_msg("softmax[%d] of %d = %.9g, want %.9g", i, n, (double)x[i], want);
		got_sum += x[i];
	}
	if (fabs(got_sum - 1.0) > TOL_SOFTMAX)
		fail_msg("softmax of %d sums to %.9g", n, got_sum);
}

static void test_softmax(void **state)
{
	float x[128];

	(void)state;
	tu_rng_seed(6);
	for (int rep = 0; rep < 50; rep++) {
		int n = 1 + (int)(tu_rng_u32() % 128);

		for (int i = 0; i < n; i++)
			x[i] = tu_rng_f53(-10.0f, 10.0f);
		check_softmax(x, n);
	}
	{
		/* large inputs: exp(1000) overflows, the max must be subtracted */
		float big[4] = { 1000.0f, 999.0f, 998.0f, 1000.0f };
		float neg[3] = { -1000.0f, -1001.0f, -1000.0f };
		float huge[3] = { 3e38f, 3e38f, -3e38f };
		float one[1] = { 42.0f };
		float same[16];
		float masked[4] = { 1.0f, -INFINITY, 2.0f, -INFINITY };

		check_softmax(big, 4);
		memcpy(x, big, sizeof big);
		ops_softmax(x, 4);
		assert_true(x[0] == x[3] && x[0] > x[1] && x[1] > x[2]);
		check_softmax(neg, 3);
		check_softmax(huge, 3);
		memcpy(x, huge, sizeof huge);
		ops_softmax(x, 3);
		assert_float_equal(x[0], 0.5, TOL_SOFTMAX);
		assert_true(x[2] == 0.0f);
		memcpy(x, one, sizeof one);
		ops_softmax(x, 1);
		assert_true(x[0] == 1.0f);
		for (int i = 0; i < 16; i++)
			same[i] = 7.5f;
		ops_softmax(same, 16);
		for (int i = 0; i < 16; i++)
			assert_true(same[i] == 1.0f / 16.0f);
		memcpy(x, masked, sizeof masked);
		ops_softmax(x, 4);
		assert_true(x[1] == 0.0f && x[3] == 0.0f);
		assert_float_equal(x[0] + x[2], 1.0, TOL_SOFTMAX);
	}
}

/* inv_freq[i] = base^(-2i/n_rot), as the model computes it. */
static void make_inv_freq(float *f, int n_rot, double base)
{
	for (int i = 0; i < n_rot / 2; i++)
		f[i] = (float)pow(base, -2.0 * i / n_rot);
}

static void test_rope(void **state)
{
	enum { NH = 3, HD = 16, NROT = 12 };
	float x[NH * HD], y[NH * HD], f[NROT / 2];

	(void)state;
	tu_rng_seed(7);
	make_inv_freq(f, NROT, 10000.0);
	for (int i = 0; i < NH * HD; i++)
		x[i] = tu_rng_f53(-2.0f, 2.0f);

	/* position 0 is the identity, bit for bit */
	memcpy(y, x, sizeof y);
	ops_rope(y, NH, HD, NROT, 0.0f, f);
	assert_memory_equal(x, y, sizeof x);

	/* pair norms kept; angle pos * inv_freq; dims past n_rot untouched */
	for (int pi = 0; pi < 6; pi++) {
		float pos = (float)(pi * 173 + 1);

		memcpy(y, x, sizeof y);
		ops_rope(y, NH, HD, NROT, pos, f);
		for (int h = 0; h < NH; h++) {
			for (int i = 0; i < NROT / 2; i++) {
				const float *a = x + h * HD + 2 * i, *b = y + h * HD + 2 * i;
				double na = hypot(a[0], a[1]), nb = hypot(b[0], b[1]);
				double want = fmod((double)pos * f[i], 2 * TEST_PI);
				double got = atan2(b[1], b[0]) - atan2(a[1], a[0]);
				double diff = remainder(got - want, 2 * TEST_PI);

				if (fabs(na - nb) > TOL_ROPE_NORM_REL * na)
					fail_msg("rope head %d pair %d: norm %.9g -> %.9g", h, i, na, nb);
				if (fabs(diff) > TOL_ROPE_ANGLE)
					fail_msg("rope head %d pair %d pos %g: angle off by %g", h, i, (double)pos, diff);
			}
			for (int d = NROT; d < HD; d++)
				assert_true(y[h * HD + d] == x[h * HD + d]);
		}
	}

	/* 90 degrees: (a, b) -> (-b, a) */
	{
		float q[4] = { 1.0f, 0.0f, 0.3f, -0.7f }, ninety[2] = { (float)(TEST_PI / 2), (float)(TEST_PI / 2) };

		ops_rope(q, 1, 4, 4, 1.0f, ninety);
		assert_float_equal(q[0], 0.0f, TOL_ROPE_90);
		assert_float_equal(q[1], 1.0f, TOL_ROPE_90);
		assert_float_equal(q[2], 0.7f, TOL_ROPE_90);
		assert_float_equal(q[3], 0.3f, TOL_ROPE_90);
	}

	/* the point of RoPE: q(m)·k(n) depends only on m - n */
	{
		float q1[HD], k1[HD], q2[HD], k2[HD];
		double d1 = 0.0, d2 = 0.0, mag = 0.0;

		for (int i = 0; i < HD; i++) {
			q1[i] = q2[i] = tu_rng_f53(-1.0f, 1.0f);
			k1[i] = k2[i] = tu_rng_f53(-1.0f, 1.0f);
			mag += fabs(q1[i] * k1[i]);
		}
		ops_rope(q1, 1, HD, NROT, 17.0f, f);
		ops_rope(k1, 1, HD, NROT, 5.0f, f);
		ops_rope(q2, 1, HD, NROT, 112.0f, f);
		ops_rope(k2, 1, HD, NROT, 100.0f, f);
		for (int i = 0; i < HD; i++) {
			d1 += (double)q1[i] * k1[i];
			d2 += (double)q2[i] * k2[i];
		}
		assert_true(fabs(d1 - d2) <= TOL_ROPE_ANGLE * mag);
	}
}

static void test_swiglu(void **state)
{
	enum { N = 200 };
	float g[N], u[N], h[N];

	(void)state;
	tu_rng_seed(8);
	for (int i = 0; i < N; i++) {
		g[i] = tu_rng_f53(-12.0f, 12.0f);
		u[i] = tu_rng_f53(-3.0f, 3.0f);
	}
	ops_swiglu(h, g, u, N);
	for (int i = 0; i < N; i++) {
		double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];

		if (fabs(h[i] - want) > TOL_SWIGLU_REL * fabs(want) + 1e-30)
			fail_msg("swiglu[%d] g=%g u=%g: %.9g, want %.9g", i, (double)g[i], (double)u[i],
				 (double)h[i], want);
	}
	/* in place over g gives the same bits */
	ops_swiglu(g, g, u, N);
	assert_memory_equal(g, h, sizeof h);

	/* edges: silu(0) = 0, silu of a large negative is -0 not NaN, large positive is g */
	{
		float gg[4] = { 0.0f, -100.0f, 100.0f, -1000.0f }, uu[4] = { 5.0f, 2.0f, 0.5f, 1.0f }, hh[4];

		ops_swiglu(hh, gg, uu, 4);
		assert_true(hh[0] == 0.0f);
		assert_true(isfinite(hh[1]) && fabs(hh[1]) < 1e-30);
		assert_float_equal(hh[2], 50.0f, 1e-5);
		assert_true(isfinite(hh[3]) && hh[3] == 0.0f);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f16_known_patterns),
		cmocka_unit_test(test_f16_roundtrip_exhaustive),
		cmocka_unit_test(test_f16_round_nearest_even),
		cmocka_unit_test(test_f16_random_vs_reference),
		cmocka_unit_test(test_f16_nan),
		cmocka_unit_test(test_bf16_known_patterns),
		cmocka_unit_test(test_bf16_roundtrip_exhaustive),
		cmocka_unit_test(test_bf16_round_nearest_even),
		cmocka_unit_test(test_bf16_nan),
		cmocka_unit_test(test_type_supported),
		cmocka_unit_test(test_q8_0_by_hand),
		cmocka_unit_test(test_dequant_exact),
		cmocka_unit_test(test_dot_vs_reference),
		cmocka_unit_test(test_matmul_equals_row_dots),
		cmocka_unit_test(test_rmsnorm),
		cmocka_unit_test(test_softmax),
		cmocka_unit_test(test_rope),
		cmocka_unit_test(test_swiglu),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
