/* ops.c - scalar reference kernels. Readable first; the arch/ versions of the
 * speed work replace the hot ones and are tested against these. */
#include "ops/ops.h"

#include <math.h>
#include <string.h>

#include "ops/dtype.h"
#include "util/tpool.h"

/* ---- half floats ------------------------------------------------------- */

float ops_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;
	uint32_t bits;
	float f;

	if (exp == 0) {
		/* zero or subnormal: man * 2^-24 */
		f = (float)man * (1.0f / 16777216.0f);
		return sign ? -f : f;
	}
	if (exp == 31)
		bits = sign | 0x7f800000u | (man << 13);
	else
		bits = sign | ((exp + 112) << 23) | (man << 13);
	memcpy(&f, &bits, sizeof f);
	return f;
}

uint16_t ops_f32_to_f16(float f)
{
	uint32_t x, sign, man;
	int32_t exp;

	memcpy(&x, &f, sizeof x);
	sign = (x >> 16) & 0x8000;
	exp = (int32_t)((x >> 23) & 0xff);
	man = x & 0x7fffff;
	if (exp == 0xff) /* Inf / NaN (keep NaN quiet and non-zero) */
		return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
	exp = exp - 127 + 15;
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {
		/* subnormal half (or zero): shift the implicit-1 mantissa */
		uint32_t m, shift, r, half;

		if (exp < -10)
			return (uint16_t)sign;
		m = man | 0x800000;
		shift = (uint32_t)(14 - exp);
		r = m >> shift;
		half = 1u << (shift - 1);
		if ((m & ((half << 1) - 1)) > half || ((m & ((half << 1) - 1)) == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	{
		uint32_t r = ((uint32_t)exp << 10) | (man >> 13);
		uint32_t rem = man & 0x1fff;

		if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
			r++; /* may carry into the exponent, up to Inf: correct */
		return (uint16_t)(sign | r);
	}
}

float ops_bf16_to_f32(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, sizeof f);
	return f;
}

uint16_t ops_f32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof x);
	if ((x & 0x7fffffff) > 0x7f800000) /* NaN: keep it a quiet NaN */
		return (uint16_t)((x >> 16) | 0x40);
	return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* ---- weight rows ------------------------------------------------------- */

/* Q8_0: blocks of 32 int8 with one f16 scale. */
struct blk_q8_0 {
	uint16_t d;
	int8_t qs[32];
};
_Static_assert(sizeof(struct blk_q8_0) == 34, "q8_0 block is 34 bytes");

bool ops_type_supported(uint32_t type)
{
	return type == TKV_F32 || type == TKV_F16 || type == TKV_BF16 || type == TKV_Q8_0;
}

void ops_dequant_row(uint32_t type, const void *row, float *out, int64_t n)
{
	int64_t i;

	switch (type) {
	case TKV_F32:
		memcpy(out, row, (size_t)n * sizeof(float));
		break;
	case TKV_F16: {
		const uint16_t *h = row;
		for (i = 0; i < n; i++)
			out[i] = ops_f16_to_f32(h[i]);
		break;
	}
	case TKV_BF16: {
		const uint16_t *h = row;
		for (i = 0; i < n; i++)
			out[i] = ops_bf16_to_f32(h[i]);
		break;
	}
	case TKV_Q8_0: {
		const struct blk_q8_0 *b = row;
		for (i = 0; i < n / 32; i++) {
			float d = ops_f16_to_f32(b[i].d);
			for (int j = 0; j < 32; j++)
				out[i * 32 + j] = d * (float)b[i].qs[j];
		}
		break;
	}
	default:
		memset(out, 0, (size_t)n * sizeof(float));
		break;
	}
}

float ops_dot_row(uint32_t type, const void *row, const float *x, int64_t n)
{
	float sum = 0.0f;
	int64_t i;

	switch (type) {
	case TKV_F32: {
		const float *w = row;
		for (i = 0; i < n; i++)
			sum += w[i] * x[i];
		break;
	}
	case TKV_F16: {
		const uint16_t *h = row;
		for (i = 0; i < n; i++)
			sum += ops_f16_to_f32(h[i]) * x[i];
		break;
	}
	case TKV_BF16: {
		const uint16_t *h = row;
		for (i = 0; i < n; i++)
			sum += ops_bf16_to_f32(h[i]) * x[i];
		break;
	}
	case TKV_Q8_0: {
		const struct blk_q8_0 *b = row;
		for (i = 0; i < n / 32; i++) {
			float s = 0.0f;
			for (int j = 0; j < 32; j++)
				s += (float)b[i].qs[j] * x[i * 32 + j];
			sum += ops_f16_to_f32(b[i].d) * s;
		}
		break;
	}
	default:
		break;
	}
	return sum;
}

/* ---- matmul -------------------------------------------------------------- */

struct matmul_job {
	const struct ops_mat *w;
	const float *x;
	float *y;
	int n;
};

static void matmul_worker(void *ctx, int ith, int nth)
{
	const struct matmul_job *j = ctx;
	const struct ops_mat *w = j->w;
	int64_t r0 = w->rows * ith / nth, r1 = w->rows * (ith + 1) / nth;

	for (int64_t r = r0; r < r1; r++) {
		const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
		for (int t = 0; t < j->n; t++)
			j->y[(size_t)t * w->rows + r] = ops_dot_row(w->type, row, j->x + (size_t)t * w->cols, w->cols);
	}
}

/* Below this many multiply-adds a matmul runs on the caller alone: waking the
 * workers costs more than the work (tiny models, the last rows of a split). */
#define OPS_MATMUL_MIN_PARALLEL 65536

void ops_matmul(struct tpool *tp, const struct ops_mat *w, const float *x, float *y, int n)
{
	struct matmul_job j = { w, x, y, n };

	if ((double)w->rows * (double)w->cols * n < OPS_MATMUL_MIN_PARALLEL)
		tp = NULL;
	tpool_run(tp, matmul_worker, &j);
}

/* ---- elementwise ----------------------------------------------------------- */

void ops_rmsnorm(float *o, const float *x, const float *w, int n, float eps)
{
	double ss = 0.0;
	float scale;

	for (int i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	scale = 1.0f / sqrtf((float)(ss / n) + eps);
	for (int i = 0; i < n; i++)
		o[i] = x[i] * scale * w[i];
}

void ops_softmax(float *x, int n)
{
	float max = -INFINITY, sum = 0.0f;

	for (int i = 0; i < n; i++)
		if (x[i] > max)
			max = x[i];
	for (int i = 0; i < n; i++) {
		x[i] = expf(x[i] - max);
		sum += x[i];
	}
	for (int i = 0; i < n; i++)
		x[i] /= sum;
}

void ops_rope(float *x, int n_heads, int head_dim, int n_rot, float pos, const float *inv_freq)
{
	for (int i = 0; i < n_rot / 2; i++) {
		float theta = pos * inv_freq[i];
		float c = cosf(theta), s = sinf(theta);

		for (int h = 0; h < n_heads; h++) {
			float *p = x + (size_t)h * head_dim + 2 * i;
			float a = p[0], b = p[1];

			p[0] = a * c - b * s;
			p[1] = a * s + b * c;
		}
	}
}

void ops_swiglu(float *h, const float *g, const float *u, int n)
{
	for (int i = 0; i < n; i++)
		h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
