/* gemm.h - the float matrix products of training.
 *
 *   C (M, N) = [C +] op(A) (M, K) · op(B) (K, N)
 *
 * all row-major: op(A)[i][k] = ta ? A[k*lda + i] : A[i*lda + k] and
 * op(B)[k][j] = tb ? B[j*ldb + k] : B[k*ldb + j]. With acc false C is
 * overwritten, else added to. The three products of a linear layer
 * y = x Wᵀ (W (out, in)) are all of this form:
 *   forward  y (n, out)  = x (n, in) · Wᵀ             ta 0, tb 1
 *   input    dx (n, in)  = dy (n, out) · W             ta 0, tb 0
 *   weight   dW (out, in) += dyᵀ (out, n) · x (n, in)  ta 1, tb 0, acc
 * Blocks of B (256 x 128) are packed into a contiguous buffer on the stack;
 * A is read in place (6 rows at a time, each element broadcast), and a 6x16
 * register tile (AVX2/FMA, or the scalar reference) does the arithmetic. */
#ifndef TKV_TRAIN_GEMM_H
#define TKV_TRAIN_GEMM_H

#include <stdbool.h>

struct tpool;

struct gemm_args {
	int M, N, K;
	const float *A;
	int lda;
	bool ta;
	const float *B;
	int ldb;
	bool tb;
	float *C;
	int ldc;
	bool acc;
};

/* On the calling thread only. */
void gemm_st(const struct gemm_args *g);
/* Rows of C shared out over the pool (tp may be NULL). */
void gemm(struct tpool *tp, const struct gemm_args *g);
/* The reference: the same product by three plain loops (tests). */
void gemm_naive(const struct gemm_args *g);
/* Keep the scalar tile kernel (tests compare the two); true = AVX2 when the
 * CPU has it (the default). Returns the name of the kernel in use. */
const char *gemm_use_simd(bool on);

#define GEMM_MR 6
#define GEMM_NR 16
/* The tile kernel: C (mr x nr, ldc) [+]= A (MR, kc) · Bp (kc, NR) where row r of
 * A is read at a[r][k * ks] (a[r] points at its first element; rows past mr
 * may repeat a valid row, their results are dropped). */
typedef void (*gemm_tile_fn)(int kc, const float *const *a, long ks, const float *bp, float *c, int ldc,
			     int mr, int nr, bool load);
void gemm_tile_ref(int kc, const float *const *a, long ks, const float *bp, float *c, int ldc, int mr, int nr,
		   bool load);
void gemm_tile_avx2(int kc, const float *const *a, long ks, const float *bp, float *c, int ldc, int mr, int nr,
		    bool load);

#endif
