/* tier_impl.h - the row kernels under the KV page formats (tier.c), shared
 * with the per-architecture files of src/kv/arch/ and the tests.
 *
 * Every format's loads and stores come down to these five loops over a row of
 * n elements. tier.c holds the scalar references (*_ref); an arch file may
 * put faster versions in the table at start-up (kv_tier_arch_select), and they
 * must give the same bits as the references (tests compare them on random
 * and special inputs): no fused multiply-add, round to nearest even. */
#ifndef TKV_KV_TIER_IMPL_H
#define TKV_KV_TIER_IMPL_H

#include <stdint.h>

#include "util/cpu.h"

#define KV_V_GROUP 32   /* channels per q4/q2 value group (all of them when d < 32) */

struct kv_tier_kernels {
	/* x[i] = f16 h[i] (exact). */
	void (*f16_load)(const uint16_t *h, float *x, uint32_t n);
	/* h[i] = f16(x[i]), round to nearest even; overflow to Inf, NaN kept
	 * quiet (the same bits as ops_f32_to_f16). */
	void (*f16_store)(const float *x, uint16_t *h, uint32_t n);
	/* x[i] = s * q[i]. */
	void (*q8_load)(const int8_t *q, float s, float *x, uint32_t n);
	/* One key of q4/q2: x[i] = m[i] + s[i] * code(i) with the per-channel f16
	 * parameters s[n], m[n]; codes of `bits` (4 or 2) bits packed little end
	 * first; n a multiple of 8 / bits. */
	void (*asym_load_k)(uint32_t bits, const uint8_t *codes, const uint16_t *s, const uint16_t *m, float *x,
			    uint32_t n);
	/* One value of q4/q2: x[c] = m_g + s_g * code(c) for channel c of group
	 * g = c / G (G = min(d, KV_V_GROUP)), par[2g] = s_g and par[2g + 1] = m_g
	 * in f16. */
	void (*asym_load_v)(uint32_t bits, const uint8_t *codes, const uint16_t *par, float *x, uint32_t d);
};

void kv_tier_f16_load_ref(const uint16_t *h, float *x, uint32_t n);
void kv_tier_f16_store_ref(const float *x, uint16_t *h, uint32_t n);
void kv_tier_q8_load_ref(const int8_t *q, float s, float *x, uint32_t n);
void kv_tier_asym_load_k_ref(uint32_t bits, const uint8_t *codes, const uint16_t *s, const uint16_t *m, float *x,
			     uint32_t n);
void kv_tier_asym_load_v_ref(uint32_t bits, const uint8_t *codes, const uint16_t *par, float *x, uint32_t d);

/* Puts the kernels of `level` (util/cpu.h) into k, left as the references
 * otherwise (arch/x86/select.c; arch/generic/select.c keeps them all);
 * returns the level the set runs at: there are no AVX-512 row kernels, so
 * avx512 gives the avx2 set. */
enum cpu_level kv_tier_arch_select(struct kv_tier_kernels *k, enum cpu_level level);

/* The references, and the kernels in use (chosen once, at first use, from
 * the one kernel level of util/cpu.h). */
const struct kv_tier_kernels *kv_tier_kernels_ref(void);
const struct kv_tier_kernels *kv_tier_kernels(void);
const char *kv_tier_kernel_name(void);

#endif
