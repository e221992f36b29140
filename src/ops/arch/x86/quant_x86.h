/* quant_x86.h - small helpers the x86 weight kernel files share
 * (quant_avx2.c, quant_more_avx2.c, quant_vnni.c, quant_avx512.c). They are
 * static inline, so each file compiles them into its own loops with its own
 * flags (x86.h); include this only from those files. */
#ifndef TKV_OPS_ARCH_X86_QUANT_X86_H
#define TKV_OPS_ARCH_X86_QUANT_X86_H

#include <immintrin.h>
#include <string.h>

#include "ops/ops_impl.h"

static inline float f16(uint16_t h)
{
	return _cvtsh_ss(h);
}

static inline const void *row_at(const void *w, size_t ws, int r)
{
	return (const char *)w + (size_t)r * ws;
}

/* 16 bytes of nibbles -> 32 bytes 0..15: elements 0..15 (low nibbles), then
 * 16..31 (high nibbles). */
static inline __m256i nibbles(const uint8_t *p)
{
	__m128i q = _mm_loadu_si128((const __m128i *)p);

	return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
}

/* 4 activation bytes in every dword lane. */
static inline __m256i bcast4(const int8_t *p)
{
	int32_t v;

	memcpy(&v, p, sizeof v);
	return _mm256_set1_epi32(v);
}

/* CALL(k) with k = nc, 1 to 8 (below 1: 1): a constant in each case, so the
 * always_inline kernel it names is compiled once per column count and keeps
 * its per-column accumulators in registers (AVX-512's 32 vector registers
 * hold 8 columns; measured +10% over 4). */
#define OPS_COLS_SWITCH8(nc, CALL)            \
	switch (nc) {                         \
	case 8: CALL(8); break;               \
	case 7: CALL(7); break;               \
	case 6: CALL(6); break;               \
	case 5: CALL(5); break;               \
	case 4: CALL(4); break;               \
	case 3: CALL(3); break;               \
	case 2: CALL(2); break;               \
	default: CALL(1); break;              \
	}

#endif
