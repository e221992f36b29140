/* gemm_avx2.c - the 6x16 AVX2/FMA tile of gemm.c (compiled with -mavx2 -mfma). */
#include <immintrin.h>

#include "gemm.h"

void gemm_tile_avx2(int kc, const float *const *ar, long ks, const float *bp, float *c, int ldc, int mr, int nr,
		    bool load)
{
	__m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
	__m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
	const float *a0 = ar[0], *a1 = ar[1], *a2 = ar[2], *a3 = ar[3], *a4 = ar[4], *a5 = ar[5];

	for (int k = 0; k < kc; k++, bp += GEMM_NR, a0 += ks, a1 += ks, a2 += ks, a3 += ks, a4 += ks, a5 += ks) {
		__m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8), a;

		a = _mm256_broadcast_ss(a0);
		c00 = _mm256_fmadd_ps(a, b0, c00);
		c01 = _mm256_fmadd_ps(a, b1, c01);
		a = _mm256_broadcast_ss(a1);
		c10 = _mm256_fmadd_ps(a, b0, c10);
		c11 = _mm256_fmadd_ps(a, b1, c11);
		a = _mm256_broadcast_ss(a2);
		c20 = _mm256_fmadd_ps(a, b0, c20);
		c21 = _mm256_fmadd_ps(a, b1, c21);
		a = _mm256_broadcast_ss(a3);
		c30 = _mm256_fmadd_ps(a, b0, c30);
		c31 = _mm256_fmadd_ps(a, b1, c31);
		a = _mm256_broadcast_ss(a4);
		c40 = _mm256_fmadd_ps(a, b0, c40);
		c41 = _mm256_fmadd_ps(a, b1, c41);
		a = _mm256_broadcast_ss(a5);
		c50 = _mm256_fmadd_ps(a, b0, c50);
		c51 = _mm256_fmadd_ps(a, b1, c51);
	}
	{
		_Alignas(32) float t[GEMM_MR][GEMM_NR];
		__m256 r[GEMM_MR][2] = { { c00, c01 }, { c10, c11 }, { c20, c21 },
					 { c30, c31 }, { c40, c41 }, { c50, c51 } };

		if (mr == GEMM_MR && nr == GEMM_NR) {
			for (int i = 0; i < GEMM_MR; i++) {
				float *ci = c + (size_t)i * ldc;
				__m256 v0 = r[i][0], v1 = r[i][1];

				if (load) {
					v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ci));
					v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ci + 8));
				}
				_mm256_storeu_ps(ci, v0);
				_mm256_storeu_ps(ci + 8, v1);
			}
			return;
		}
		for (int i = 0; i < GEMM_MR; i++) {
			_mm256_store_ps(t[i], r[i][0]);
			_mm256_store_ps(t[i] + 8, r[i][1]);
		}
		for (int i = 0; i < mr; i++)
			for (int j = 0; j < nr; j++)
				c[(size_t)i * ldc + j] = load ? c[(size_t)i * ldc + j] + t[i][j] : t[i][j];
	}
}
