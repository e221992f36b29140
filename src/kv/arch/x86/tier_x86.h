/* tier_x86.h - the x86 KV row kernels, for tier_cpu.c, which picks them by CPU
 * feature. Functions in *_avx2.c are compiled with -mavx2 -mfma -mf16c and
 * must only be called after tier_cpu.c has checked those features. */
#ifndef TKV_KV_ARCH_X86_TIER_X86_H
#define TKV_KV_ARCH_X86_TIER_X86_H

#include "kv/tier_impl.h"

void kv_tier_f16_load_avx2(const uint16_t *h, float *x, uint32_t n);
void kv_tier_f16_store_avx2(const float *x, uint16_t *h, uint32_t n);
void kv_tier_q8_load_avx2(const int8_t *q, float s, float *x, uint32_t n);
void kv_tier_asym_load_k_avx2(uint32_t bits, const uint8_t *codes, const uint16_t *s, const uint16_t *m, float *x,
			      uint32_t n);
void kv_tier_asym_load_v_avx2(uint32_t bits, const uint8_t *codes, const uint16_t *par, float *x, uint32_t d);

#endif
