/* ops.c - the kernel tables and their selection, the threaded matmul driver,
 * and the scalar elementwise kernels. The per-type kernels are in quant.c
 * (scalar references) and arch/ (SIMD versions chosen at start-up). */
#include "ops/ops.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dtype.h"
#include "ops/ops_impl.h"
#include "util/tpool.h"

/* Floats ops_dot_row dequantizes at a time (a multiple of every block size). */
#define OPS_DOT_CHUNK 256
_Static_assert(OPS_DOT_CHUNK % QK_K == 0 && OPS_DOT_CHUNK % QK4_0 == 0 && OPS_DOT_CHUNK % QK8_0 == 0,
	       "ops_dot_row's chunk holds whole blocks of every type");

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

/* ---- kernel tables ---------------------------------------------------------- */

/* Per-type kernels, the scalar references until ops_select() puts in the
 * versions this CPU runs faster. Written once (pthread_once) before any
 * kernel is used and only read after that, like ggml's type_traits table. */
static struct ops_type_kernels ops_types[TKV_DTYPE_COUNT] = {
	[TKV_F32] = { .act_type = OPS_ACT_F32, .dequant = dequant_f32_ref, .dot_rows = dot_rows_f32_ref },
	[TKV_F16] = { .act_type = OPS_ACT_F32, .dequant = dequant_f16_ref, .dot_rows = dot_rows_f16_ref },
	[TKV_BF16] = { .act_type = OPS_ACT_F32, .dequant = dequant_bf16_ref, .dot_rows = dot_rows_bf16_ref },
	[TKV_Q4_0] = { .act_type = OPS_ACT_Q8_32, .panel_act = OPS_ACT_Q8_32,
		       .dequant = dequant_q4_0_ref, .dot_rows = dot_rows_q4_0_ref,
		       .pack = pack_q4_0_ref, .panel = panel_u_ref, .repack = repack_q4_0_x8,
		       .gemv_x8 = gemv_q4_0_x8_ref, .pack_x8 = pack_q4_0_x8_ref,
		       .dequant_x8 = dequant_q4_0_x8_ref, .x8_block = OPS_X8_Q4_0 },
	[TKV_Q8_0] = { .act_type = OPS_ACT_Q8_32, .panel_act = OPS_ACT_Q8_32,
		       .dequant = dequant_q8_0_ref, .dot_rows = dot_rows_q8_0_ref,
		       .pack = pack_q8_0_ref, .panel = panel_s8_ref, .repack = repack_q8_0_x8,
		       .gemv_x8 = gemv_q8_0_x8_ref, .dequant_x8 = dequant_q8_0_x8_ref,
		       .x8_block = OPS_X8_Q8_0 },
	[TKV_Q4_K] = { .act_type = OPS_ACT_Q8_256, .panel_act = OPS_ACT_Q8_K32,
		       .dequant = dequant_q4_k_ref, .dot_rows = dot_rows_q4_k_ref,
		       .pack = pack_q4_k_ref, .panel = panel_u_ref, .repack = repack_q4_k_x8,
		       .gemv_x8 = gemv_q4_k_x8_ref, .pack_x8 = pack_q4_k_x8_ref,
		       .dequant_x8 = dequant_q4_k_x8_ref, .x8_block = OPS_X8_Q4_K },
	[TKV_Q5_K] = { .act_type = OPS_ACT_Q8_256, .panel_act = OPS_ACT_Q8_K32,
		       .dequant = dequant_q5_k_ref, .dot_rows = dot_rows_q5_k_ref,
		       .pack = pack_q5_k_ref, .panel = panel_u_ref, .repack = repack_q5_k_x8,
		       .gemv_x8 = gemv_q5_k_x8_ref, .pack_x8 = pack_q5_k_x8_ref,
		       .dequant_x8 = dequant_q5_k_x8_ref, .x8_block = OPS_X8_Q5_K },
	[TKV_Q6_K] = { .act_type = OPS_ACT_Q8_256, .panel_act = OPS_ACT_Q8_K32,
		       .dequant = dequant_q6_k_ref, .dot_rows = dot_rows_q6_k_ref,
		       .pack = pack_q6_k_ref, .panel = panel_k6_ref, .repack = repack_q6_k_x8,
		       .gemv_x8 = gemv_q6_k_x8_ref, .pack_x8 = pack_q6_k_x8_ref,
		       .dequant_x8 = dequant_q6_k_x8_ref, .x8_block = OPS_X8_Q6_K },
	[TKV_Q4_1] = { .act_type = OPS_ACT_Q8_1, .panel_act = OPS_ACT_Q8_1,
		       .dequant = dequant_q4_1_ref, .dot_rows = dot_rows_q4_1_ref,
		       .pack = pack_q4_1_ref, .panel = panel_u_ref, .repack = repack_q4_1_x8,
		       .gemv_x8 = gemv_q4_1_x8_ref, .pack_x8 = pack_q4_1_x8_ref,
		       .dequant_x8 = dequant_q4_1_x8_ref, .x8_block = OPS_X8_Q4_1 },
	[TKV_Q5_0] = { .act_type = OPS_ACT_Q8_32, .panel_act = OPS_ACT_Q8_32,
		       .dequant = dequant_q5_0_ref, .dot_rows = dot_rows_q5_0_ref,
		       .pack = pack_q5_0_ref, .panel = panel_u_ref, .repack = repack_q5_0_x8,
		       .gemv_x8 = gemv_q5_0_x8_ref, .pack_x8 = pack_q5_0_x8_ref,
		       .dequant_x8 = dequant_q5_0_x8_ref, .x8_block = OPS_X8_Q5_0 },
	[TKV_Q5_1] = { .act_type = OPS_ACT_Q8_1, .panel_act = OPS_ACT_Q8_1,
		       .dequant = dequant_q5_1_ref, .dot_rows = dot_rows_q5_1_ref,
		       .pack = pack_q5_1_ref, .panel = panel_u_ref, .repack = repack_q5_1_x8,
		       .gemv_x8 = gemv_q5_1_x8_ref, .pack_x8 = pack_q5_1_x8_ref,
		       .dequant_x8 = dequant_q5_1_x8_ref, .x8_block = OPS_X8_Q5_1 },
	[TKV_IQ4_NL] = { .act_type = OPS_ACT_Q8_32, .panel_act = OPS_ACT_Q8_32,
			 .dequant = dequant_iq4_nl_ref, .dot_rows = dot_rows_iq4_nl_ref,
			 .pack = pack_iq4_nl_ref, .panel = panel_s8_ref, .repack = repack_q4_0_x8,
			 .gemv_x8 = gemv_iq4_nl_x8_ref, .pack_x8 = pack_iq4_nl_x8_ref,
			 .dequant_x8 = dequant_iq4_nl_x8_ref, .x8_block = OPS_X8_IQ4_NL },
	[TKV_Q2_K] = { .act_type = OPS_ACT_Q8_256, .dequant = dequant_q2_k_ref, .dot_rows = dot_rows_q2_k_ref,
		       .repack = repack_q2_k_x8, .gemv_x8 = gemv_q2_k_x8_ref, .dequant_x8 = dequant_q2_k_x8_ref,
		       .x8_block = OPS_X8_Q2_K },
	[TKV_Q3_K] = { .act_type = OPS_ACT_Q8_256, .dequant = dequant_q3_k_ref, .dot_rows = dot_rows_q3_k_ref,
		       .repack = repack_q3_k_x8, .gemv_x8 = gemv_q3_k_x8_ref, .dequant_x8 = dequant_q3_k_x8_ref,
		       .x8_block = OPS_X8_Q3_K },
	[TKV_IQ4_XS] = { .act_type = OPS_ACT_Q8_256, .panel_act = OPS_ACT_Q8_K32,
			 .dequant = dequant_iq4_xs_ref, .dot_rows = dot_rows_iq4_xs_ref,
			 .pack = pack_iq4_xs_ref, .panel = panel_s8_ref, .repack = repack_iq4_xs_x8,
			 .gemv_x8 = gemv_iq4_xs_x8_ref, .pack_x8 = pack_iq4_xs_x8_ref,
			 .dequant_x8 = dequant_iq4_xs_x8_ref, .x8_block = OPS_X8_IQ4_XS },
};

static struct ops_act_kernels ops_act = {
	.quant = {
		[OPS_ACT_Q8_32] = quant_act_q8_32_ref,
		[OPS_ACT_Q8_256] = quant_act_q8_256_ref,
		[OPS_ACT_Q8_1] = quant_act_q8_1_ref,
		[OPS_ACT_Q8_K32] = quant_act_q8_k32_ref,
	},
};

static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

/* The level is the one dispatch's (util/cpu.h: CPU and TIERKV_KERNELS). */
static void ops_select(void)
{
	ops_arch_select(ops_types, &ops_act, cpu_kernel_level());
}

const struct ops_type_kernels *ops_kernels(uint32_t type)
{
	pthread_once(&ops_once, ops_select);
	return type < TKV_DTYPE_COUNT ? &ops_types[type] : NULL;
}

const struct ops_act_kernels *ops_act_kernels(void)
{
	pthread_once(&ops_once, ops_select);
	return &ops_act;
}

/* ---- weight rows --------------------------------------------------------- */

bool ops_type_supported(uint32_t type)
{
	const struct ops_type_kernels *k = ops_kernels(type);

	return k && k->dot_rows != NULL;
}

void ops_dequant_row(uint32_t type, const void *row, float *out, int64_t n)
{
	const struct ops_type_kernels *k = ops_kernels(type);

	if (k && k->dequant)
		k->dequant(row, out, n);
	else
		memset(out, 0, (size_t)n * sizeof(float));
}

void ops_mat_row(const struct ops_mat *w, int64_t r, float *out)
{
	const struct ops_type_kernels *k = ops_kernels(w->type);

	if (w->layout == OPS_LAYOUT_X8 && k && k->dequant_x8)
		k->dequant_x8((const char *)w->data + (size_t)(r / 8) * 8 * w->row_bytes, (int)(r % 8), w->cols, out);
	else
		ops_dequant_row(w->type, (const char *)w->data + (size_t)r * w->row_bytes, out, w->cols);
}

float ops_dot_row(uint32_t type, const void *row, const float *x, int64_t n)
{
	const struct ops_type_kernels *k = ops_kernels(type);
	const struct ops_type_kernels *kf = ops_kernels(TKV_F32);
	const struct tkv_dtype_traits *tr = tkv_dtype_traits(type);
	float buf[OPS_DOT_CHUNK], sum = 0.0f, s;
	int64_t step;

	if (!k || !k->dot_rows)
		return 0.0f;
	if (k->act_type == OPS_ACT_F32) {
		k->dot_rows(n, row, 0, 1, x, &s);
		return s;
	}
	/* quantized weights against exact floats: dequantize a chunk, dot it */
	step = OPS_DOT_CHUNK / tr->blck * tr->blck;
	for (int64_t i = 0; i < n; i += step) {
		int64_t m = n - i < step ? n - i : step;

		k->dequant((const char *)row + (size_t)(i / tr->blck) * tr->size, buf, m);
		kf->dot_rows(m, buf, 0, 1, x + i, &s);
		sum += s;
	}
	return sum;
}

/* ---- matmul -------------------------------------------------------------- */

/* Bytes of one row of cols activations in format act (cols a multiple of its
 * block; 0 for the f32 format, which is read in place). */
static size_t act_row_bytes(uint32_t act, int64_t cols)
{
	if (act == OPS_ACT_F32)
		return 0;
	return (size_t)(cols / ops_act_blck[act]) * ops_act_size[act];
}

/* Bytes of one panel of cols columns. */
static size_t panel_bytes(int64_t cols)
{
	return (size_t)((cols + 31) / 32) * OPS_PANEL_BLOCK;
}

#define OPS_ALIGN(x) (((x) + 63) & ~(size_t)63)

size_t ops_matmul_work_size(int64_t cols_max, int n_max, int n_threads)
{
	size_t act = 0;

	for (uint32_t t = 1; t < OPS_ACT_COUNT; t++) {
		int64_t c = (cols_max + ops_act_blck[t] - 1) / ops_act_blck[t] * ops_act_blck[t];
		size_t b = act_row_bytes(t, c);

		if (b > act)
			act = b;
	}
	return OPS_ALIGN(act * (size_t)n_max) + (size_t)(n_threads > 0 ? n_threads : 1) * 2 * OPS_ALIGN(panel_bytes(cols_max)) + 64;
}

/* The work items (chunks of rows) are split into one contiguous range per
 * thread. A thread takes the items of its own range in order, so that it
 * reads one long stream of weights, and then helps with the others' ranges.
 * One shared counter (items dealt round robin) was measured slower at decode:
 * each thread's stream broke at every item (TinyLlama Q4_K_M tg64 at two
 * threads: 8 items a thread 63-65% of the bandwidth limit, 1-2 items 68-72%),
 * and the counter's line went back and forth between the cores. */
#define OPS_MATMUL_RANGES 64
struct mm_range {
	_Alignas(64) atomic_llong next; /* next item */
	int64_t end;                    /* one past the range's last item */
};

struct mm_job {
	const struct ops_mat *w[OPS_MATMUL_MAX];
	float *y[OPS_MATMUL_MAX];
	int64_t row0[OPS_MATMUL_MAX + 1]; /* first row of each matrix in the joint row space */
	int n_mat;
	const struct ops_type_kernels *k;
	const void *a;       /* activations: n rows, as bytes apart */
	size_t as;
	int n;
	unsigned char *panels; /* NULL: row dots / x8 dots; else two panels per thread, each panel_stride
				* long, 2 panel_stride apart */
	size_t panel_stride;
	int64_t chunk;       /* rows per work item */
	int n_ranges;
	struct mm_range range[OPS_MATMUL_RANGES];
};

/* Below this many activation rows the weights are read one row at a time:
 * the rows then form one sequential stream, which the hardware prefetchers
 * follow at full bandwidth; several rows at once are as many short streams,
 * which they do not (measured: 4 rows at a time read q4_0 at a quarter of the
 * bandwidth of 1 row at a time). From here on the matmul is bound by
 * arithmetic and sharing each activation block between rows pays. */
#define OPS_MATMUL_MULTIROW_N 4
/* From this many activation rows on, types with panels use them: repacking a
 * panel costs about one token's dots. */
#define OPS_PANEL_MIN_N 8

/* Rows [r0, r1) of matrix i for every activation row: each group of weight
 * rows stays in L1 while the activation rows stream past. */
static void mm_rows(const struct mm_job *j, int i, int64_t r0, int64_t r1)
{
	const struct ops_mat *w = j->w[i];
	int group = j->n < OPS_MATMUL_MULTIROW_N ? 1 : OPS_DOT_ROWS;
	float s[OPS_DOT_ROWS];

	for (int64_t r = r0; r < r1; r += group) {
		int nr = r1 - r < group ? (int)(r1 - r) : group;
		const char *wr = (const char *)w->data + (size_t)r * w->row_bytes;

		for (int t = 0; t < j->n; t++) {
			float *y = j->y[i] + (size_t)t * w->rows + r;

			j->k->dot_rows(w->cols, wr, w->row_bytes, nr, (const char *)j->a + (size_t)t * j->as, s);
			for (int q = 0; q < nr; q++)
				y[q] = s[q];
		}
	}
}

/* Runs the activation rows against the panel(s) of rows [r, r + nr) of
 * matrix i: two panels (16 rows) when nr is 16, else one. */
static void mm_panel_cols(const struct mm_job *j, int i, int64_t r, int nr, const void *panel)
{
	const struct ops_mat *w = j->w[i];

	for (int t = 0; t < j->n; t += OPS_PANEL_COLS) {
		int nc = j->n - t < OPS_PANEL_COLS ? j->n - t : OPS_PANEL_COLS;
		const void *a = (const char *)j->a + (size_t)t * j->as;
		float *y = j->y[i] + (size_t)t * w->rows + r;

		if (nr == 2 * OPS_PANEL_ROWS) {
			j->k->panel2(w->cols, panel, j->panel_stride, a, j->as, nc, y, (size_t)w->rows);
		} else if (nr == OPS_PANEL_ROWS) {
			j->k->panel(w->cols, panel, a, j->as, nc, y, (size_t)w->rows);
		} else {
			/* a partial panel must not write past the matrix's rows */
			float tmp[OPS_PANEL_COLS * OPS_PANEL_ROWS];

			j->k->panel(w->cols, panel, a, j->as, nc, tmp, OPS_PANEL_ROWS);
			for (int c = 0; c < nc; c++)
				memcpy(y + (size_t)c * w->rows, tmp + c * OPS_PANEL_ROWS, (size_t)nr * sizeof(float));
		}
	}
}

/* The same with panels: pack 8 rows (16 when the type has a two-panel
 * kernel) into this thread's panels, then run all the activation rows
 * against them, OPS_PANEL_COLS at a time. */
static void mm_panels(const struct mm_job *j, int ith, int i, int64_t r0, int64_t r1)
{
	const struct ops_mat *w = j->w[i];
	unsigned char *panel = j->panels + (size_t)ith * 2 * j->panel_stride;

	for (int64_t r = r0; r < r1;) {
		int nr = r1 - r < OPS_PANEL_ROWS ? (int)(r1 - r) : OPS_PANEL_ROWS;
		const char *wr = (const char *)w->data + (size_t)r * w->row_bytes;

		j->k->pack(wr, w->row_bytes, nr, w->cols, panel);
		if (j->k->panel2 && r1 - r >= 2 * OPS_PANEL_ROWS) {
			j->k->pack(wr + OPS_PANEL_ROWS * w->row_bytes, w->row_bytes, OPS_PANEL_ROWS, w->cols,
				   panel + j->panel_stride);
			nr = 2 * OPS_PANEL_ROWS;
		}
		mm_panel_cols(j, i, r, nr, panel);
		r += nr;
	}
}

/* Rows [r0, r1) (multiples of 8) of an interleaved matrix: each group of 8
 * rows against every activation row, as a panel (two groups as two panels
 * where the type has the kernel) when there are many. */
static void mm_x8(const struct mm_job *j, int ith, int i, int64_t r0, int64_t r1)
{
	const struct ops_mat *w = j->w[i];
	size_t stride = (size_t)(w->cols / 32) * j->k->x8_block;
	unsigned char *panel = j->panels ? j->panels + (size_t)ith * 2 * j->panel_stride : NULL;

	for (int64_t r = r0; r < r1;) {
		const void *grp = (const char *)w->data + (size_t)(r / 8) * stride;
		int nr = 8;

		if (panel) {
			j->k->pack_x8(grp, w->cols, panel);
			if (j->k->panel2 && r1 - r >= 16) {
				j->k->pack_x8((const char *)grp + stride, w->cols, panel + j->panel_stride);
				nr = 16;
			}
			mm_panel_cols(j, i, r, nr, panel);
		} else {
			for (int t = 0; t < j->n; t += OPS_PANEL_COLS) {
				int nc = j->n - t < OPS_PANEL_COLS ? j->n - t : OPS_PANEL_COLS;

				j->k->gemv_x8(w->cols, grp, (const char *)j->a + (size_t)t * j->as, j->as, nc,
					      j->y[i] + (size_t)t * w->rows + r, (size_t)w->rows);
			}
		}
		r += nr;
	}
}

/* The items of one range, while it has any left. */
static void mm_range_run(struct mm_job *j, int ith, struct mm_range *g)
{
	int64_t c;

	while ((c = atomic_fetch_add_explicit(&g->next, 1, memory_order_relaxed)) < g->end) {
		int64_t r0 = c * j->chunk, r1 = r0 + j->chunk;

		if (r1 > j->row0[j->n_mat])
			r1 = j->row0[j->n_mat];
		for (int i = 0; i < j->n_mat; i++) {
			int64_t a = r0 > j->row0[i] ? r0 : j->row0[i];
			int64_t b = r1 < j->row0[i + 1] ? r1 : j->row0[i + 1];

			if (a >= b)
				continue;
			if (j->w[i]->layout == OPS_LAYOUT_X8)
				mm_x8(j, ith, i, a - j->row0[i], b - j->row0[i]);
			else if (j->panels)
				mm_panels(j, ith, i, a - j->row0[i], b - j->row0[i]);
			else
				mm_rows(j, i, a - j->row0[i], b - j->row0[i]);
		}
	}
}

/* Each thread runs its own range first, then helps with the others' (a
 * thread slowed by a busy vCPU ends up with fewer items). */
static void mm_worker(void *ctx, int ith, int nth)
{
	struct mm_job *j = ctx;

	(void)nth;
	for (int k = 0; k < j->n_ranges; k++)
		mm_range_run(j, ith, &j->range[(ith + k) % j->n_ranges]);
}

struct quant_job {
	ops_quant_act_fn fn;
	const float *x;
	int64_t cols;
	void *out;
	size_t as;
	int n;
};

static void quant_worker(void *ctx, int ith, int nth)
{
	const struct quant_job *q = ctx;

	for (int t = q->n * ith / nth; t < q->n * (ith + 1) / nth; t++)
		q->fn(q->x + (size_t)t * q->cols, (char *)q->out + (size_t)t * q->as, q->cols);
}

/* Below this many multiply-adds a matmul runs on the caller alone: waking the
 * workers costs more than the work (tiny models, the last rows of a split). */
#define OPS_MATMUL_MIN_PARALLEL 65536
/* Rows per work item: enough for a few per thread and at least this many. */
#define OPS_MATMUL_MIN_CHUNK 16
#define OPS_MATMUL_CHUNKS_PER_THREAD 8

/* Runs the product for activations already in the kernels' format; panels
 * (may be NULL) is scratch for one panel per thread. */
static void mm_run(struct tpool *tp, const struct ops_mat *const *w, float *const *y, int n_mat,
		   const struct ops_type_kernels *k, const void *a, size_t as, int n, unsigned char *panels)
{
	struct mm_job j;
	double macs = 0.0;
	int64_t n_chunks;
	int nth;

	memset(&j, 0, sizeof j);
	j.n_mat = n_mat;
	j.k = k;
	j.a = a;
	j.as = as;
	j.n = n;
	j.panels = panels;
	j.panel_stride = OPS_ALIGN(panel_bytes(w[0]->cols));
	for (int i = 0; i < n_mat; i++) {
		j.w[i] = w[i];
		j.y[i] = y[i];
		j.row0[i + 1] = j.row0[i] + w[i]->rows;
		macs += (double)w[i]->rows * (double)w[i]->cols * n;
	}
	if (macs < OPS_MATMUL_MIN_PARALLEL)
		tp = NULL;
	nth = tpool_n(tp);
	j.chunk = j.row0[n_mat] / ((int64_t)nth * OPS_MATMUL_CHUNKS_PER_THREAD);
	if (j.chunk < OPS_MATMUL_MIN_CHUNK)
		j.chunk = OPS_MATMUL_MIN_CHUNK;
	/* whole pairs of panels (and of interleaved groups) */
	j.chunk = (j.chunk + 2 * OPS_PANEL_ROWS - 1) / (2 * OPS_PANEL_ROWS) * (2 * OPS_PANEL_ROWS);
	n_chunks = (j.row0[n_mat] + j.chunk - 1) / j.chunk;
	j.n_ranges = nth < OPS_MATMUL_RANGES ? nth : OPS_MATMUL_RANGES;
	for (int g = 0; g < j.n_ranges; g++) {
		atomic_init(&j.range[g].next, n_chunks * g / j.n_ranges);
		j.range[g].end = n_chunks * (g + 1) / j.n_ranges;
	}
	tpool_run(tp, mm_worker, &j);
}

/* Stack room for activations when the caller gives no workspace. */
#define OPS_MATMUL_STACK 32768

void ops_matmul_n(struct tpool *tp, const struct ops_mat *const *w, float *const *y, int n_mat,
		  const float *x, int n, void *work, size_t work_size)
{
	const struct ops_type_kernels *k;
	const struct ops_act_kernels *ak = ops_act_kernels();
	unsigned char stack[OPS_MATMUL_STACK] __attribute__((aligned(64)));
	unsigned char *panels = NULL;
	uint32_t act;
	int64_t cols;
	size_t as;
	int step;

	if (n_mat <= 0 || n <= 0)
		return;
	k = ops_kernels(w[0]->type);
	cols = w[0]->cols;
	/* one joint job needs one activation format and one width */
	for (int i = 1; i < n_mat; i++) {
		if (w[i]->cols != cols || w[i]->type != w[0]->type || w[i]->layout != w[0]->layout ||
		    n_mat > OPS_MATMUL_MAX) {
			for (int m = 0; m < n_mat; m++)
				ops_matmul_n(tp, &w[m], &y[m], 1, x, n, work, work_size);
			return;
		}
	}
	if (k->act_type == OPS_ACT_F32) {
		mm_run(tp, w, y, n_mat, k, x, (size_t)cols * sizeof(float), n, NULL);
		return;
	}
	act = k->act_type;
	/* the panel path when there are enough tokens and room for the panels */
	if ((w[0]->layout == OPS_LAYOUT_X8 ? k->pack_x8 != NULL : k->pack != NULL) && n >= OPS_PANEL_MIN_N && work) {
		size_t need = OPS_ALIGN(act_row_bytes(k->panel_act, cols) * (size_t)n) +
			      (size_t)tpool_n(tp) * 2 * OPS_ALIGN(panel_bytes(cols));

		if (work_size >= need + 64) {
			act = k->panel_act;
			panels = (unsigned char *)work + OPS_ALIGN(act_row_bytes(act, cols) * (size_t)n);
		}
	}
	as = act_row_bytes(act, cols);
	if (!work || work_size < as * (size_t)n) {
		work = stack;
		work_size = sizeof stack;
	}
	step = panels ? n : (int)(work_size / as);
	if (step == 0) {
		/* a row too wide for any buffer we have: exact float dots instead */
		for (int m = 0; m < n_mat; m++)
			for (int t = 0; t < n; t++)
				for (int64_t r = 0; r < w[m]->rows; r++)
					y[m][(size_t)t * w[m]->rows + r] = ops_dot_row(w[m]->type,
						(const char *)w[m]->data + (size_t)r * w[m]->row_bytes, x + (size_t)t * cols, cols);
		return;
	}
	for (int t0 = 0; t0 < n; t0 += step) {
		int nt = n - t0 < step ? n - t0 : step;
		float *yt[OPS_MATMUL_MAX];
		struct quant_job q = { ak->quant[act], x + (size_t)t0 * cols, cols, work, as, nt };

		tpool_run(nt >= 4 && tp ? tp : NULL, quant_worker, &q);
		for (int m = 0; m < n_mat; m++)
			yt[m] = y[m] + (size_t)t0 * w[m]->rows;
		mm_run(tp, w, yt, n_mat, k, work, as, nt, panels);
	}
}

size_t ops_repack_size(const struct ops_mat *w)
{
	const struct ops_type_kernels *k = ops_kernels(w->type);

	/* the stack fallback of ops_matmul_n must hold one activation row */
	if (!k || !k->repack || w->layout != OPS_LAYOUT_ROWS || w->rows % 8 || w->cols % 32 ||
	    act_row_bytes(k->act_type, w->cols) > OPS_MATMUL_STACK)
		return 0;
	return (size_t)w->rows * w->row_bytes;
}

void ops_repack(struct ops_mat *w, void *dst)
{
	ops_kernels(w->type)->repack(w->data, w->row_bytes, w->rows, w->cols, dst);
	w->data = dst;
	w->layout = OPS_LAYOUT_X8;
}

void ops_matmul(struct tpool *tp, const struct ops_mat *w, const float *x, float *y, int n)
{
	ops_matmul_n(tp, &w, &y, 1, x, n, NULL, 0);
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

/* GELU's input and result are rounded to f16, as llama.cpp's CPU backend
 * computes it (a table over the f16 values), so that GeGLU models agree
 * with it to float rounding; beyond +-10 it is 0 or x, as there. */
/* GELU (tanh form) of every f16 input, computed once: geglu rounds its input
 * to f16 and its output to f16 (as llama.cpp's table does), so a table of the
 * 65536 f16 values gives the same numbers as evaluating tanhf per element at
 * a fraction of the cost (tanhf was 17% of a Gemma prefill). */
static uint16_t gelu_f16[65536];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void)
{
	for (uint32_t b = 0; b < 65536; b++) {
		float x = ops_f16_to_f32((uint16_t)b), y;

		if (x != x)
			y = x;
		else if (x <= -10.0f)
			y = 0.0f;
		else if (x >= 10.0f)
			y = x;
		else
			y = 0.5f * x * (1.0f + tanhf(0.7978845608f * x * (1.0f + 0.044715f * x * x)));
		gelu_f16[b] = ops_f32_to_f16(y);
	}
}

void ops_geglu(float *h, const float *g, const float *u, int n)
{
	pthread_once(&gelu_once, gelu_table_init);
	for (int i = 0; i < n; i++) {
		float x = g[i], y;

		if (x <= -10.0f)
			y = 0.0f;
		else if (x >= 10.0f)
			y = x;
		else
			y = ops_f16_to_f32(gelu_f16[ops_f32_to_f16(x)]);
		h[i] = y * u[i];
	}
}

void ops_rope_neox(float *x, int n_heads, int head_dim, int n_rot, float pos, const float *inv_freq, float mscale)
{
	int half = n_rot / 2;

	for (int i = 0; i < half; i++) {
		float theta = pos * inv_freq[i];
		float c = cosf(theta) * mscale, s = sinf(theta) * mscale;

		for (int h = 0; h < n_heads; h++) {
			float *p = x + (size_t)h * head_dim + i;
			float a = p[0], b = p[half];

			p[0] = a * c - b * s;
			p[half] = a * s + b * c;
		}
	}
}

void ops_softcap(float *x, size_t n, float cap)
{
	float inv = 1.0f / cap;

	for (size_t i = 0; i < n; i++)
		x[i] = cap * tanhf(x[i] * inv);
}
