/* ops.h - the numeric kernels of the forward pass.
 *
 * Vectors are float arrays; weights are rows of any supported tkv_dtype (f32,
 * f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl,
 * iq4_xs), read in place from the model mapping. Every kernel has a scalar reference; faster versions for this CPU
 * (AVX2/FMA/F16C, and AVX-512 with VNNI for the integer dots) are chosen once at
 * start-up from the one kernel level (util/cpu.h: the CPU and
 * TIERKV_KERNELS=ref|avx2|avx512). Nothing here allocates or knows about
 * policies. Threaded entry points take a tpool (may be NULL = caller only). */
#ifndef TKV_OPS_OPS_H
#define TKV_OPS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tpool;

/* A weight matrix: rows x cols elements of `type`, each row row_bytes long
 * (borrowed from the model). y = W x means y[r] = dot(W[r], x). In the
 * default layout the rows follow each other; ops_repack can interleave them
 * 8 at a time (OPS_LAYOUT_X8), which only the matmuls read. */
enum ops_layout { OPS_LAYOUT_ROWS = 0, OPS_LAYOUT_X8 = 1 };

struct ops_mat {
	const void *data;
	uint32_t type;     /* enum tkv_dtype */
	int64_t rows;      /* output features */
	int64_t cols;      /* input features (a multiple of the type's block size) */
	size_t row_bytes;
	uint32_t layout;   /* enum ops_layout */
};

/* f16 / bf16 <-> f32, round to nearest even, NaN and Inf preserved. */
float ops_f16_to_f32(uint16_t h);
uint16_t ops_f32_to_f16(float f);
float ops_bf16_to_f32(uint16_t h);
uint16_t ops_f32_to_bf16(float f);

/* True when the matmul kernels can read weights of this type. */
bool ops_type_supported(uint32_t type);
/* Dequantizes n elements (a multiple of the block size) of a row of `type`. */
void ops_dequant_row(uint32_t type, const void *row, float *out, int64_t n);
/* Row r of a matrix in either layout, all cols elements (embedding lookups). */
void ops_mat_row(const struct ops_mat *w, int64_t r, float *out);
/* dot(row of type, x) over n elements. */
float ops_dot_row(uint32_t type, const void *row, const float *x, int64_t n);

/* Quantizes (or converts) n floats to a row of `type` (n a multiple of the
 * block size): how generated models get their weights. 0, or -1 for a type
 * it cannot write. */
int ops_quantize_row(uint32_t type, const float *x, void *out, int64_t n);

/* Y (n, rows) = X (n, cols) · Wᵀ, split over the pool by rows. Quantized
 * weights take X quantized to 8 bits per block (as llama.cpp does), so results
 * differ from exact float dots by that rounding. */
void ops_matmul(struct tpool *tp, const struct ops_mat *w, const float *x, float *y, int n);

/* Bytes of w in the interleaved layout, or 0 when its type or shape has none
 * (q4_0 and q8_0 with a multiple of 8 rows have one). */
size_t ops_repack_size(const struct ops_mat *w);
/* Copies w into dst (ops_repack_size(w) bytes, 32-byte aligned) with every
 * block of 8 consecutive rows interleaved: the 8 rows' scales together, then
 * their values 4 or 8 columns of one row at a time, so that one load meets 8
 * rows and the matrix is one sequential stream (the hardware prefetchers
 * follow one stream at full bandwidth, not 8 short ones). Same bytes as the
 * rows. On return w describes dst (borrowed: dst must outlive w) and only the
 * matmuls may read it. */
void ops_repack(struct ops_mat *w, void *dst);

#define OPS_MATMUL_MAX 4
/* Y_i (n, w[i]->rows) = X (n, cols) · W_iᵀ for i < n_mat (<= OPS_MATMUL_MAX),
 * one input for several matrices (q, k, v; gate, up): X is quantized once and
 * the rows of all the matrices are shared out over the pool as one job.
 * work (borrowed scratch, may be NULL) holds the quantized X; with
 * work_size >= ops_matmul_work_size(cols, n, threads) nothing runs in pieces. */
void ops_matmul_n(struct tpool *tp, const struct ops_mat *const *w, float *const *y, int n_mat,
		  const float *x, int n, void *work, size_t work_size);
/* Workspace bytes for matmuls of up to n_max rows of X and cols_max columns. */
size_t ops_matmul_work_size(int64_t cols_max, int n_max, int n_threads);

/* o = x / rms(x) * w, over n elements (o may alias x). */
void ops_rmsnorm(float *o, const float *x, const float *w, int n, float eps);
/* In-place softmax over n elements. */
void ops_softmax(float *x, int n);
/* Rotary embedding on n_heads heads of head_dim, rotating adjacent pairs
 * (x[2i], x[2i+1]) of the first n_rot dims by pos * inv_freq[i]. inv_freq has
 * n_rot/2 entries (base^(-2i/n_rot), already divided by any scaling factors). */
void ops_rope(float *x, int n_heads, int head_dim, int n_rot, float pos, const float *inv_freq);
/* h = silu(g) * u, elementwise over n (h may alias g). */
void ops_swiglu(float *h, const float *g, const float *u, int n);
/* h = gelu(g) * u with the tanh form of GELU, its input and result rounded
 * to f16 (llama.cpp's), elementwise over n (h may alias g). */
void ops_geglu(float *h, const float *g, const float *u, int n);
/* Rotary embedding as ops_rope but on the NeoX layout: dims i and i + n_rot/2
 * form pair i; the rotated dims are multiplied by mscale (1: plain rotation). */
void ops_rope_neox(float *x, int n_heads, int head_dim, int n_rot, float pos, const float *inv_freq, float mscale);
/* x = cap * tanh(x / cap) over n elements (logit soft-capping). */
void ops_softcap(float *x, size_t n, float cap);

#endif
