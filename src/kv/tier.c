/* tier.c - KV page storage formats (layouts in tier.h): quantize, dequantize,
 * bounds and the rotation. Loads and f16 stores go through the row kernels of
 * tier_impl.h (scalar references here, faster ones from src/kv/arch/ when the
 * CPU has them); quantizing stays scalar, with plain loops the compiler can
 * vectorize (comparisons instead of fminf/fmaxf, no branches in the body). */
#include "kv/tier.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kv/tier_impl.h"
#include "ops/ops.h"

#define V_GROUP KV_V_GROUP /* G, channels per value group (all when d < 32) */
#define CHUNK 64        /* channels processed at once (stack arrays) */
#define F16_MAX 65504.0f
#define ROT_SEED 0x74696572b7c5a3d1ull  /* fixed: rotated pages depend on it */

_Static_assert(CHUNK % V_GROUP == 0, "a chunk holds whole value groups");
_Static_assert(CHUNK % 4 == 0, "a chunk of q2 codes fills whole bytes");

/* Per-format data, one row per enum kv_fmt. */
struct fmt_traits {
	const char *name;
	enum kv_tier tier;
	uint32_t bits;    /* bits per stored element */
	bool packed;      /* K parameters span the page */
};

static const struct fmt_traits traits[KV_FMT_ALL] = {
	[KV_FMT_F32] = { "f32", KV_TIER_HOT, 32, false },
	[KV_FMT_F16] = { "f16", KV_TIER_HOT, 16, false },
	[KV_FMT_Q8] = { "q8", KV_TIER_WARM, 8, false },
	[KV_FMT_Q4] = { "q4", KV_TIER_COLD, 4, true },
	[KV_FMT_Q2] = { "q2", KV_TIER_COLD, 2, true },
	[KV_FMT_REF] = { "ref", KV_TIER_HOT, 0, false },
};

/* ---- names and sizes ------------------------------------------------------ */

const char *kv_fmt_name(uint32_t fmt)
{
	return fmt < KV_FMT_ALL ? traits[fmt].name : "?";
}

int kv_fmt_parse(const char *s)
{
	if (!s)
		return -1;
	for (int f = 0; f < KV_FMT_COUNT; f++)
		if (strcmp(s, traits[f].name) == 0)
			return f;
	return -1;
}

enum kv_tier kv_fmt_tier(uint32_t fmt)
{
	return fmt < KV_FMT_ALL ? traits[fmt].tier : KV_TIER_COLD;
}

const char *kv_tier_name(enum kv_tier t)
{
	switch (t) {
	case KV_TIER_HOT: return "hot";
	case KV_TIER_WARM: return "warm";
	case KV_TIER_COLD: return "cold";
	case KV_TIER_COUNT: break;
	}
	return "?";
}

bool kv_fmt_ok(uint32_t fmt, uint32_t d)
{
	if (fmt >= KV_FMT_COUNT || d == 0)
		return false;
	return d % (fmt == KV_FMT_Q2 ? 4u : 2u) == 0;
}

bool kv_rot_ok(uint32_t d)
{
	return d != 0 && (d & (d - 1)) == 0;
}

bool kv_fmt_packed(uint32_t fmt)
{
	return fmt < KV_FMT_COUNT && traits[fmt].packed;
}

/* Whether q4/q2 values of head size d are quantized per channel over the
 * page (like keys) rather than per slot. */
bool kv_tier_v_per_channel(uint32_t d)
{
	return d < V_GROUP;
}

/* Value groups per slot. */
static uint32_t n_groups(uint32_t d)
{
	return (d + V_GROUP - 1) / V_GROUP;
}

/* Bytes of one slot's codes in q4/q2 (and of one slot's elements in the
 * others). The range check keeps -Warray-bounds quiet at -O3. */
static size_t row_bytes(uint32_t fmt, uint32_t d)
{
	return fmt < KV_FMT_COUNT ? (size_t)d * traits[fmt].bits / 8 : 0;
}

size_t kv_tier_k_bytes(uint32_t fmt, uint32_t cap, uint32_t d)
{
	switch (fmt) {
	case KV_FMT_F32:
	case KV_FMT_F16:
		return (size_t)cap * row_bytes(fmt, d);
	case KV_FMT_Q8:
		return (size_t)cap * (2 + d);
	case KV_FMT_Q4:
	case KV_FMT_Q2:
		return 4 * (size_t)d + (size_t)cap * row_bytes(fmt, d);
	case KV_FMT_REF:
		return 2 * (size_t)cap;
	}
	return 0;
}

size_t kv_tier_v_bytes(uint32_t fmt, uint32_t cap, uint32_t d)
{
	if ((fmt == KV_FMT_Q4 || fmt == KV_FMT_Q2) && !kv_tier_v_per_channel(d))
		return (size_t)cap * (4 * (size_t)n_groups(d) + row_bytes(fmt, d));
	return kv_tier_k_bytes(fmt, cap, d);
}

/* ---- half floats and rounding -------------------------------------------- */

static inline uint32_t f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return u;
}

static inline float u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

/* f16 -> f32 with masks instead of branches, so loops of it vectorize; the
 * same bits as ops_f16_to_f32 (tested over all 65536 halves). */
static inline float h2f(uint16_t h)
{
	uint32_t em = h & 0x7fffu;                                  /* exponent, mantissa */
	uint32_t norm = (em << 13) + ((uint32_t)(127 - 15) << 23);  /* rebiased */
	uint32_t sub = f2u((float)em * 0x1p-24f);                   /* exponent 0: exact */
	uint32_t is_sub = 0u - (uint32_t)(em < 0x400u);
	uint32_t is_inf = 0u - (uint32_t)(em >= 0x7c00u);           /* exponent 31 -> 255 */
	uint32_t o = (sub & is_sub) | ((norm + (is_inf & ((uint32_t)(128 - 16) << 23))) & ~is_sub);

	return u2f(o | (uint32_t)(h & 0x8000u) << 16);
}

/* The same for one value outside a loop: a branch (normal numbers are the
 * rule) is cheaper than computing every case. */
static inline float h2f1(uint16_t h)
{
	uint32_t em = h & 0x7fffu;

	if (em - 0x400u < 0x7c00u - 0x400u) /* normal */
		return u2f(((em << 13) + ((uint32_t)(127 - 15) << 23)) | (uint32_t)(h & 0x8000u) << 16);
	return h2f(h);
}

/* Round to nearest even, for |v| < 2^22: adding 1.5 * 2^23 leaves no
 * fraction bits, so the addition rounds and the subtraction is exact. */
static inline float rne(float v)
{
	return (v + 0x1.8p23f) - 0x1.8p23f;
}

/* The largest f16 <= x (saturating at -F16_MAX .. F16_MAX; x not NaN). */
static uint16_t f16_down(float x)
{
	uint16_t h;

	if (x >= F16_MAX)
		return 0x7bff;
	if (x <= -F16_MAX)
		return 0xfbff;
	h = ops_f32_to_f16(x);
	if (h2f1(h) > x) /* one step toward -Inf */
		h = h == 0x0000 ? 0x8001 : (h & 0x8000) ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
	return h;
}

/* The smallest f16 >= x (saturating likewise). */
static uint16_t f16_up(float x)
{
	return (uint16_t)(f16_down(-x) ^ 0x8000);
}

/* ---- row kernels: the scalar references ----------------------------------- */

void kv_tier_f16_load_ref(const uint16_t *h, float *x, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		x[i] = h2f(h[i]);
}

void kv_tier_f16_store_ref(const float *x, uint16_t *h, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		h[i] = ops_f32_to_f16(x[i]);
}

void kv_tier_q8_load_ref(const int8_t *q, float s, float *x, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		x[i] = s * (float)q[i];
}

/* Codes [0, n) of a packed row, one per byte (n a multiple of 8 / bits). */
static void unpack_codes(uint32_t bits, const uint8_t *codes, uint8_t *q, uint32_t n)
{
	if (bits == 4) {
		for (uint32_t j = 0; j < n / 2; j++) {
			q[2 * j] = codes[j] & 15;
			q[2 * j + 1] = codes[j] >> 4;
		}
	} else {
		for (uint32_t j = 0; j < n / 4; j++)
			for (uint32_t i = 0; i < 4; i++)
				q[4 * j + i] = (codes[j] >> (2 * i)) & 3;
	}
}

void kv_tier_asym_load_k_ref(uint32_t bits, const uint8_t *codes, const uint16_t *s, const uint16_t *m, float *x,
			     uint32_t n)
{
	for (uint32_t c0 = 0; c0 < n; c0 += CHUNK) {
		uint32_t nc = n - c0 < CHUNK ? n - c0 : CHUNK;
		float sf[CHUNK], mf[CHUNK];
		uint8_t q[CHUNK];

		kv_tier_f16_load_ref(s + c0, sf, nc);
		kv_tier_f16_load_ref(m + c0, mf, nc);
		unpack_codes(bits, codes + c0 * bits / 8, q, nc);
		for (uint32_t c = 0; c < nc; c++)
			x[c0 + c] = mf[c] + sf[c] * (float)q[c];
	}
}

void kv_tier_asym_load_v_ref(uint32_t bits, const uint8_t *codes, const uint16_t *par, float *x, uint32_t d)
{
	uint32_t G = d < KV_V_GROUP ? d : KV_V_GROUP;

	for (uint32_t c0 = 0, g = 0; c0 < d; c0 += G, g++) {
		uint32_t nc = d - c0 < G ? d - c0 : G;
		float s = h2f1(par[2 * g]), m = h2f1(par[2 * g + 1]);
		uint8_t q[KV_V_GROUP];

		unpack_codes(bits, codes + c0 * bits / 8, q, nc);
		for (uint32_t c = 0; c < nc; c++)
			x[c0 + c] = m + s * (float)q[c];
	}
}

static const struct kv_tier_kernels kernels_ref = {
	.f16_load = kv_tier_f16_load_ref,
	.f16_store = kv_tier_f16_store_ref,
	.q8_load = kv_tier_q8_load_ref,
	.asym_load_k = kv_tier_asym_load_k_ref,
	.asym_load_v = kv_tier_asym_load_v_ref,
};

/* The kernels in use: written once (pthread_once) before the first use and
 * only read after that, like the ops tables. */
static struct kv_tier_kernels kernels;
static enum cpu_level kernels_level = CPU_LEVEL_REF;
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;

/* The level is the one dispatch's (util/cpu.h: CPU and TIERKV_KERNELS). */
static void kernels_select(void)
{
	kernels = kernels_ref;
	kernels_level = kv_tier_arch_select(&kernels, cpu_kernel_level());
}

const struct kv_tier_kernels *kv_tier_kernels_ref(void)
{
	return &kernels_ref;
}

const struct kv_tier_kernels *kv_tier_kernels(void)
{
	pthread_once(&kernels_once, kernels_select);
	return &kernels;
}

const char *kv_tier_kernel_name(void)
{
	pthread_once(&kernels_once, kernels_select);
	return cpu_level_name(kernels_level);
}

/* ---- quantizing ------------------------------------------------------------- */

/* Asymmetric parameters of L levels over [lo, hi]: stored min (the f16 at or
 * below lo) and scale (the smallest f16 whose top level m + s L, computed in
 * float as the loads do, reaches hi; one step either side of the rounded-up
 * quotient is enough), and the floats the quantizer uses. Taking the smallest
 * makes a re-pack of loaded data find the same parameters and codes, as long
 * as the range spans more than L f16 steps of its values (then the extremes
 * keep codes 0 and L). */
static void asym_params(float lo, float hi, float L, uint16_t *s16, uint16_t *m16, float *m, float *inv)
{
	float s;

	*m16 = f16_down(lo);
	*m = h2f1(*m16);
	*s16 = f16_up((hi - *m) / L); /* >= 0: hi >= lo >= m */
	if (*s16 > 0 && *m + h2f1((uint16_t)(*s16 - 1)) * L >= hi)
		(*s16)--;
	else if (*s16 < 0x7bff && *m + h2f1(*s16) * L < hi)
		(*s16)++;
	s = h2f1(*s16);
	*inv = s > 0.0f ? 1.0f / s : 0.0f;
}

/* Code of x: round((x - m) / s) clamped to [0, L] (NaN -> 0). */
static inline uint8_t asym_code(float x, float m, float inv, float L)
{
	float q = (x - m) * inv;

	q = q > 0.0f ? q : 0.0f;
	q = q < L ? q : L;
	return (uint8_t)rne(q);
}

/* Whether every x in [lo, hi] codes into [0, L] without clamping: (x - m) *
 * inv is monotonic in x, so the ends decide. False for NaN and for ranges
 * past what f16 parameters reach. */
static inline bool asym_in_range(float lo, float hi, float m, float inv, float L)
{
	return (lo - m) * inv > -0.5f && (hi - m) * inv < L + 0.5f;
}

/* Codes of n values with per-channel (m, inv), clamped only when needed: the
 * plain loop vectorizes, the clamping one does not. */
static void asym_codes(const float *x, const float *m, const float *inv, float L, bool in_range, uint8_t *q,
		       uint32_t n)
{
	if (in_range) {
		for (uint32_t c = 0; c < n; c++)
			q[c] = (uint8_t)rne((x[c] - m[c]) * inv[c]);
	} else {
		for (uint32_t c = 0; c < n; c++)
			q[c] = asym_code(x[c], m[c], inv[c], L);
	}
}

/* Packs n codes of `bits` bits (n a multiple of 8 / bits) into out. */
static void pack_codes(uint32_t bits, const uint8_t *q, uint32_t n, uint8_t *out)
{
	if (bits == 4) {
		for (uint32_t j = 0; j < n / 2; j++)
			out[j] = (uint8_t)(q[2 * j] | q[2 * j + 1] << 4);
	} else {
		for (uint32_t j = 0; j < n / 4; j++)
			out[j] = (uint8_t)(q[4 * j] | q[4 * j + 1] << 2 | q[4 * j + 2] << 4 | q[4 * j + 3] << 6);
	}
}

/* Float order as int32 order (NaN aside): the sign bit stays and negative
 * magnitudes are flipped; its own inverse. Integer min/max vectorize where
 * float selects do not (the compiler must assume a NaN compare may trap). */
static inline int32_t ford(float f)
{
	uint32_t u = f2u(f);

	return (int32_t)(u ^ ((0u - (u >> 31)) >> 1));
}

static inline float ford_inv(int32_t i)
{
	uint32_t u = (uint32_t)i;

	return u2f(u ^ ((0u - (u >> 31)) >> 1));
}

/* lo/hi <- the min/max of lo/hi and x, elementwise over n (in ford order). */
static void minmax(const float *x, int32_t *lo, int32_t *hi, uint32_t n)
{
	for (uint32_t c = 0; c < n; c++) {
		int32_t v = ford(x[c]);

		lo[c] = v < lo[c] ? v : lo[c];
		hi[c] = v > hi[c] ? v : hi[c];
	}
}

/* ---- q4/q2 per channel over the page: keys, and values of small heads ------- */

/* A per-channel region: f16 scale[d], f16 min[d], codes[cap][row_bytes].
 * Writes the parameters and codes of n rows X (n >= 1). With keep, a
 * channel whose n values all code within the range of the parameters the
 * region has keeps them, so rows that were already on that grid get their
 * codes back unchanged; the other channels take the smallest parameters
 * covering their values. */
static void pack_chan(uint32_t fmt, void *reg, uint32_t d, const float *X, uint32_t n, bool keep)
{
	uint32_t bits = traits[fmt].bits;
	uint16_t *ps = reg, *pm = ps + d;
	uint8_t *codes = (uint8_t *)reg + 4 * (size_t)d;
	size_t rb = row_bytes(fmt, d);
	float L = (float)((1u << bits) - 1);

	for (uint32_t c0 = 0; c0 < d; c0 += CHUNK) {
		uint32_t nc = d - c0 < CHUNK ? d - c0 : CHUNK;
		int32_t lo[CHUNK], hi[CHUNK];
		float m[CHUNK], inv[CHUNK];
		uint8_t q[CHUNK];
		bool in_range = true;

		for (uint32_t c = 0; c < nc; c++)
			lo[c] = hi[c] = ford(X[c0 + c]);
		for (uint32_t s = 1; s < n; s++)
			minmax(X + (size_t)s * d + c0, lo, hi, nc);
		for (uint32_t c = 0; c < nc; c++) {
			float flo = ford_inv(lo[c]), fhi = ford_inv(hi[c]);

			if (keep) {
				float ms = h2f1(pm[c0 + c]), sc = h2f1(ps[c0 + c]), iv = sc > 0.0f ? 1.0f / sc : 0.0f;

				if (sc > 0.0f && asym_in_range(flo, fhi, ms, iv, L)) {
					m[c] = ms;
					inv[c] = iv;
					continue;
				}
			}
			asym_params(flo, fhi, L, &ps[c0 + c], &pm[c0 + c], &m[c], &inv[c]);
			in_range = in_range && asym_in_range(flo, fhi, m[c], inv[c], L);
		}
		for (uint32_t s = 0; s < n; s++) {
			asym_codes(X + (size_t)s * d + c0, m, inv, L, in_range, q, nc);
			pack_codes(bits, q, nc, codes + (size_t)s * rb + (size_t)c0 * bits / 8);
		}
	}
}

/* Row `slot` of a per-channel region from x, on the parameters it has
 * (values outside their range clamp to the nearest end). */
static void store_chan(uint32_t fmt, void *reg, uint32_t d, uint32_t slot, const float *x)
{
	const uint16_t *ps = reg, *pm = ps + d;
	uint8_t *codes = (uint8_t *)reg + 4 * (size_t)d + (size_t)slot * row_bytes(fmt, d);
	float L = (float)((1u << traits[fmt].bits) - 1);

	for (uint32_t c0 = 0; c0 < d; c0 += CHUNK) {
		uint32_t nc = d - c0 < CHUNK ? d - c0 : CHUNK;
		float m[CHUNK], inv[CHUNK];
		uint8_t q[CHUNK];

		for (uint32_t c = 0; c < nc; c++) {
			float sc = h2f1(ps[c0 + c]);

			m[c] = h2f1(pm[c0 + c]);
			inv[c] = sc > 0.0f ? 1.0f / sc : 0.0f;
		}
		asym_codes(x + c0, m, inv, L, false, q, nc);
		pack_codes(traits[fmt].bits, q, nc, codes + (size_t)c0 * traits[fmt].bits / 8);
	}
}

/* Rows [s0, s0 + n) of a per-channel region: min + scale * code, the f16
 * parameters converted on the fly (cheaper than decoding them to arrays
 * first, even for a whole page). */
static void load_chan(uint32_t fmt, const void *reg, uint32_t d, uint32_t s0, uint32_t n, float *X)
{
	const struct kv_tier_kernels *k = kv_tier_kernels();
	const uint16_t *ps = reg, *pm = ps + d;
	const uint8_t *codes = (const uint8_t *)reg + 4 * (size_t)d;
	size_t rb = row_bytes(fmt, d);

	for (uint32_t i = 0; i < n; i++)
		k->asym_load_k(traits[fmt].bits, codes + (s0 + i) * rb, ps, pm, X + (size_t)i * d, d);
}

/* Copies row src of a per-channel region over row dst (the parameters are
 * shared, so the codes stay valid). */
static void move_chan(uint32_t fmt, void *reg, uint32_t d, uint32_t dst, uint32_t src)
{
	uint8_t *codes = (uint8_t *)reg + 4 * (size_t)d;
	size_t rb = row_bytes(fmt, d);

	memmove(codes + dst * rb, codes + src * rb, rb);
}

/* ---- per-slot layouts: f32, f16, q8 (K and V), q4/q2 values ----------------- */

static void store_q8(void *reg, uint32_t cap, uint32_t d, uint32_t slot, const float *x)
{
	uint16_t *scale = reg;
	int8_t *q = (int8_t *)((uint8_t *)reg + 2 * (size_t)cap) + (size_t)slot * d;
	uint32_t abits = 0;
	float amax, s, inv;

	for (uint32_t c = 0; c < d; c++) { /* |x| orders like its bits */
		uint32_t a = f2u(x[c]) & 0x7fffffffu;

		abits = a > abits ? a : abits;
	}
	amax = u2f(abits);
	s = amax / 127.0f;
	scale[slot] = ops_f32_to_f16(s < F16_MAX ? s : F16_MAX);
	s = h2f1(scale[slot]);
	inv = s > 0.0f ? 1.0f / s : 0.0f;
	if (amax * inv < 127.5f) { /* every code in range (false for NaN, saturation) */
		for (uint32_t c = 0; c < d; c++)
			q[c] = (int8_t)rne(x[c] * inv);
		return;
	}
	for (uint32_t c = 0; c < d; c++) {
		float v = x[c] * inv;

		v = v > -127.0f ? v : -127.0f; /* NaN -> -127 */
		v = v < 127.0f ? v : 127.0f;
		q[c] = (int8_t)rne(v);
	}
}

/* One q4/q2 value row: parameters per group of G channels, then codes. */
static void store_v_asym(uint32_t fmt, void *reg, uint32_t cap, uint32_t d, uint32_t slot, const float *x)
{
	uint32_t bits = traits[fmt].bits, ng = n_groups(d), G = d < V_GROUP ? d : V_GROUP;
	uint16_t *par = (uint16_t *)reg + (size_t)slot * ng * 2;
	uint8_t *codes = (uint8_t *)reg + 4 * (size_t)cap * ng + (size_t)slot * row_bytes(fmt, d);
	float L = (float)((1u << bits) - 1);
	uint8_t q[V_GROUP];

	for (uint32_t g = 0; g < ng; g++) {
		uint32_t c0 = g * G, nc = d - c0 < G ? d - c0 : G;
		int32_t ilo = ford(x[c0]), ihi = ilo;
		float lo, hi, m[V_GROUP], inv[V_GROUP];

		for (uint32_t c = 1; c < nc; c++) {
			int32_t v = ford(x[c0 + c]);

			ilo = v < ilo ? v : ilo;
			ihi = v > ihi ? v : ihi;
		}
		lo = ford_inv(ilo);
		hi = ford_inv(ihi);
		asym_params(lo, hi, L, &par[2 * g], &par[2 * g + 1], &m[0], &inv[0]);
		for (uint32_t c = 1; c < nc; c++) {
			m[c] = m[0];
			inv[c] = inv[0];
		}
		asym_codes(x + c0, m, inv, L, asym_in_range(lo, hi, m[0], inv[0], L), q, nc);
		pack_codes(bits, q, nc, codes + (size_t)c0 * bits / 8);
	}
}

/* Stores one row of a per-slot layout. */
static void store_row(uint32_t fmt, void *reg, uint32_t cap, uint32_t d, uint32_t slot, const float *x)
{
	switch (fmt) {
	case KV_FMT_F32:
		memcpy((float *)reg + (size_t)slot * d, x, d * sizeof(float));
		break;
	case KV_FMT_F16:
		kv_tier_kernels()->f16_store(x, (uint16_t *)reg + (size_t)slot * d, d);
		break;
	case KV_FMT_Q8:
		store_q8(reg, cap, d, slot, x);
		break;
	case KV_FMT_Q4:
	case KV_FMT_Q2:
		if (kv_tier_v_per_channel(d))
			store_chan(fmt, reg, d, slot, x);
		else
			store_v_asym(fmt, reg, cap, d, slot, x);
		break;
	case KV_FMT_REF:
		kv_tier_kernels()->f16_store(x, (uint16_t *)reg + slot, 1);
		break;
	}
}

/* Channels [c0, c0 + n) of one row of f32, f16 or q8. */
static void load_row_part(uint32_t fmt, const void *reg, uint32_t cap, uint32_t d, uint32_t slot,
			  uint32_t c0, uint32_t n, float *x)
{
	size_t off = (size_t)slot * d + c0;

	switch (fmt) {
	case KV_FMT_F32:
		memcpy(x, (const float *)reg + off, n * sizeof(float));
		break;
	case KV_FMT_F16:
		kv_tier_kernels()->f16_load((const uint16_t *)reg + off, x, n);
		break;
	case KV_FMT_Q8: {
		const int8_t *q = (const int8_t *)((const uint8_t *)reg + 2 * (size_t)cap) + off;

		kv_tier_kernels()->q8_load(q, h2f1(((const uint16_t *)reg)[slot]), x, n);
		break;
	}
	}
}

static void load_v_asym(uint32_t fmt, const void *reg, uint32_t cap, uint32_t d, uint32_t slot, float *x)
{
	uint32_t ng = n_groups(d);
	const uint16_t *par = (const uint16_t *)reg + (size_t)slot * ng * 2;
	const uint8_t *codes = (const uint8_t *)reg + 4 * (size_t)cap * ng + (size_t)slot * row_bytes(fmt, d);

	kv_tier_kernels()->asym_load_v(traits[fmt].bits, codes, par, x, d);
}

/* Loads one row of a per-slot layout. */
static void load_row(uint32_t fmt, const void *reg, uint32_t cap, uint32_t d, uint32_t slot, float *x)
{
	if (fmt == KV_FMT_REF) {
		memset(x, 0, d * sizeof *x);
		x[0] = h2f1(((const uint16_t *)reg)[slot]);
	} else if ((fmt == KV_FMT_Q4 || fmt == KV_FMT_Q2) && kv_tier_v_per_channel(d))
		load_chan(fmt, reg, d, slot, 1, x);
	else if (fmt == KV_FMT_Q4 || fmt == KV_FMT_Q2)
		load_v_asym(fmt, reg, cap, d, slot, x);
	else
		load_row_part(fmt, reg, cap, d, slot, 0, d, x);
}

/* Copies one row of a per-slot layout, its parameters with it. */
static void move_row(uint32_t fmt, void *reg, uint32_t cap, uint32_t d, uint32_t dst, uint32_t src)
{
	uint8_t *b = reg;
	size_t rb = row_bytes(fmt, d);

	switch (fmt) {
	case KV_FMT_F32:
	case KV_FMT_F16:
		memmove(b + dst * rb, b + src * rb, rb);
		break;
	case KV_FMT_Q8:
		memmove(b + 2 * (size_t)dst, b + 2 * (size_t)src, 2);
		b += 2 * (size_t)cap;
		memmove(b + dst * rb, b + src * rb, rb);
		break;
	case KV_FMT_Q4:
	case KV_FMT_Q2: {
		size_t pb = 4 * (size_t)n_groups(d);

		if (kv_tier_v_per_channel(d)) {
			move_chan(fmt, reg, d, dst, src);
			break;
		}

		memmove(b + dst * pb, b + src * pb, pb);
		b += pb * cap;
		memmove(b + dst * rb, b + src * rb, rb);
		break;
	}
	case KV_FMT_REF:
		memmove(b + 2 * (size_t)dst, b + 2 * (size_t)src, 2);
		break;
	}
}

/* ---- public entry points ------------------------------------------------------ */

void kv_tier_store(uint32_t fmt, void *kreg, void *vreg, uint32_t cap, uint32_t d, uint32_t slot,
		   const float *k, const float *v)
{
	if (kv_fmt_packed(fmt))
		return;
	store_row(fmt, kreg, cap, d, slot, k);
	store_row(fmt, vreg, cap, d, slot, v);
}

void kv_tier_store_v(uint32_t fmt, void *vreg, uint32_t cap, uint32_t d, uint32_t slot, const float *v)
{
	store_row(fmt, vreg, cap, d, slot, v);
}

/* kv_tier_pack, with the page's current per-channel parameters as the
 * grid to keep when keep is set. */
static void pack(uint32_t fmt, void *kreg, void *vreg, uint32_t cap, uint32_t d, const float *K, const float *V,
		 uint32_t n, bool keep)
{
	bool packed = kv_fmt_packed(fmt), vch = packed && kv_tier_v_per_channel(d);
	/* a kept grid stays where it is: only the codes are cleared */
	size_t pb = keep && packed && n > 0 ? 4 * (size_t)d : 0;

	memset((uint8_t *)kreg + pb, 0, kv_tier_k_bytes(fmt, cap, d) - pb);
	memset((uint8_t *)vreg + (vch ? pb : 0), 0, kv_tier_v_bytes(fmt, cap, d) - (vch ? pb : 0));
	if (packed && n > 0)
		pack_chan(fmt, kreg, d, K, n, pb > 0);
	if (vch && n > 0)
		pack_chan(fmt, vreg, d, V, n, pb > 0);
	for (uint32_t s = 0; s < n; s++) {
		if (!packed)
			store_row(fmt, kreg, cap, d, s, K + (size_t)s * d);
		if (!vch)
			store_row(fmt, vreg, cap, d, s, V + (size_t)s * d);
	}
}

void kv_tier_pack(uint32_t fmt, void *kreg, void *vreg, uint32_t cap, uint32_t d,
		  const float *K, const float *V, uint32_t n)
{
	pack(fmt, kreg, vreg, cap, d, K, V, n, false);
}

void kv_tier_repack(uint32_t fmt, void *kreg, void *vreg, uint32_t cap, uint32_t d,
		    const float *K, const float *V, uint32_t n)
{
	pack(fmt, kreg, vreg, cap, d, K, V, n, true);
}

void kv_tier_copy_params(uint32_t fmt, void *kreg, void *vreg, const void *src_kreg, const void *src_vreg,
			 uint32_t d)
{
	if (!kv_fmt_packed(fmt))
		return;
	memcpy(kreg, src_kreg, 4 * (size_t)d);
	if (kv_tier_v_per_channel(d))
		memcpy(vreg, src_vreg, 4 * (size_t)d);
}

void kv_tier_load_k(uint32_t fmt, const void *kreg, uint32_t cap, uint32_t d, uint32_t slot, float *k)
{
	kv_tier_load_k_slots(fmt, kreg, cap, d, slot, 1, k);
}

void kv_tier_load_v(uint32_t fmt, const void *vreg, uint32_t cap, uint32_t d, uint32_t slot, float *v)
{
	load_row(fmt, vreg, cap, d, slot, v);
}

void kv_tier_load_k_slots(uint32_t fmt, const void *kreg, uint32_t cap, uint32_t d, uint32_t s0,
			  uint32_t n, float *K)
{
	if (kv_fmt_packed(fmt)) {
		load_chan(fmt, kreg, d, s0, n, K);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		load_row(fmt, kreg, cap, d, s0 + i, K + (size_t)i * d);
}

void kv_tier_load_v_slots(uint32_t fmt, const void *vreg, uint32_t cap, uint32_t d, uint32_t s0,
			  uint32_t n, float *V)
{
	if (kv_fmt_packed(fmt) && kv_tier_v_per_channel(d)) {
		load_chan(fmt, vreg, d, s0, n, V);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		load_row(fmt, vreg, cap, d, s0 + i, V + (size_t)i * d);
}

void kv_tier_move(uint32_t fmt, void *kreg, void *vreg, uint32_t cap, uint32_t d, uint32_t dst, uint32_t src)
{
	if (dst == src)
		return;
	if (kv_fmt_packed(fmt)) {
		move_chan(fmt, kreg, d, dst, src);
	} else {
		move_row(fmt, kreg, cap, d, dst, src);
	}
	move_row(fmt, vreg, cap, d, dst, src);
}

/* nextafterf(x, +Inf), inline (the libm call showed in decode
 * profiles: every cold page's bound takes d of them per query). */
static inline float next_up(float x)
{
	uint32_t u = f2u(x);

	if (!(x < INFINITY))
		return x;                      /* +Inf, NaN */
	if ((u & 0x7fffffffu) == 0)
		return u2f(1);                 /* +-0: the smallest subnormal */
	return u2f(u >> 31 ? u - 1 : u + 1);  /* away from 0 when positive, toward it when negative */
}

void kv_tier_key_bounds(uint32_t fmt, const void *kreg, uint32_t cap, uint32_t d, uint32_t n,
			float *kmin, float *kmax)
{
	if (kv_fmt_packed(fmt)) {
		const uint16_t *ps = kreg, *pm = ps + d;
		float L = (float)((1u << traits[fmt].bits) - 1);

		/* The same float expression as the loads (m + s * q at q = 0 and
		 * q = L), widened by one ulp in case a kernel fuses it into an fma. */
		for (uint32_t c = 0; c < d; c++) {
			float s = h2f1(ps[c]), m = h2f1(pm[c]);

			kmin[c] = m;
			kmax[c] = next_up(m + s * L);
		}
		return;
	}
	if (fmt == KV_FMT_REF) { /* directions live in the layer below */
		for (uint32_t c = 0; c < d; c++) {
			kmin[c] = n ? -INFINITY : INFINITY;
			kmax[c] = n ? INFINITY : -INFINITY;
		}
		return;
	}
	for (uint32_t c0 = 0; c0 < d; c0 += CHUNK) {
		uint32_t nc = d - c0 < CHUNK ? d - c0 : CHUNK;
		int32_t lo[CHUNK], hi[CHUNK];
		float x[CHUNK];

		for (uint32_t c = 0; c < nc; c++) {
			lo[c] = ford(INFINITY);
			hi[c] = ford(-INFINITY);
		}
		for (uint32_t s = 0; s < n; s++) {
			load_row_part(fmt, kreg, cap, d, s, c0, nc, x);
			minmax(x, lo, hi, nc);
		}
		for (uint32_t c = 0; c < nc; c++) {
			kmin[c0 + c] = ford_inv(lo[c]);
			kmax[c0 + c] = ford_inv(hi[c]);
		}
	}
}

/* ---- rotation ------------------------------------------------------------------ */

/* splitmix64 of a counter: the signs of D, 64 channels per word. */
static uint64_t sign_word(uint64_t i)
{
	uint64_t z = ROT_SEED + (i + 1) * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* x <- D x (D diagonal ±1; its own inverse). */
static void apply_signs(float *x, uint32_t d)
{
	for (uint32_t i0 = 0; i0 < d; i0 += 64) {
		uint64_t w = sign_word(i0 / 64);
		uint32_t n = d - i0 < 64 ? d - i0 : 64;

		for (uint32_t j = 0; j < n; j++)
			x[i0 + j] = u2f(f2u(x[i0 + j]) ^ (uint32_t)((w >> j) & 1) << 31);
	}
}

/* x <- H x / sqrt(d), the orthonormal Walsh-Hadamard transform (symmetric, so
 * its own inverse). */
static void fwht(float *x, uint32_t d)
{
	float norm = 1.0f / sqrtf((float)d);

	for (uint32_t h = 1; h < d; h <<= 1)
		for (uint32_t i = 0; i < d; i += 2 * h)
			for (uint32_t j = i; j < i + h; j++) {
				float a = x[j], b = x[j + h];

				x[j] = a + b;
				x[j + h] = a - b;
			}
	for (uint32_t i = 0; i < d; i++)
		x[i] *= norm;
}

void kv_rotate(float *x, uint32_t d)
{
	apply_signs(x, d);
	fwht(x, d);
}

void kv_unrotate(float *x, uint32_t d)
{
	fwht(x, d);
	apply_signs(x, d);
}
