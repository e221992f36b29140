/* cpu.h - the one kernel dispatch: what the CPU runs (probed once) and which
 * kernel level every family uses - the weight kernels of src/ops/, the KV
 * row kernels of kv/tier.c and the attention kernels of kv/attn.c. Each
 * family keeps one table of function pointers, filled once from the level.
 *
 * Levels (the value of TIERKV_KERNELS selects one):
 *   ref     the scalar references, on any CPU
 *   avx2    AVX2 + FMA + F16C kernels
 *   avx512  AVX512F/BW/VL + AVX512-VNNI: the avx2 kernels with these put in:
 *           on 512-bit registers the decode kernels of ops/ (k-quant row
 *           dots, interleaved q4_0/q8_0 groups) and two-panel prefill; on
 *           256-bit registers (AVX512VL) the other panels and the q4 key
 *           scores of attention. Families without such versions (kv/tier.c,
 *           the float attention kernels) run at avx2.
 * Unset (or "auto"): the highest level this CPU runs. A level the CPU lacks,
 * or a value not listed, is an error: cpu_kernels_check() reports it, which
 * tkv_model_load() calls, so the program stops before generating anything;
 * code that reaches a kernel table without that check (the unit tests) runs
 * the highest level at or below the one asked for. */
#ifndef TKV_UTIL_CPU_H
#define TKV_UTIL_CPU_H

#include <stdbool.h>

struct tkv_error;

enum cpu_level {
	CPU_LEVEL_REF = 0,
	CPU_LEVEL_AVX2 = 1,
	CPU_LEVEL_AVX512 = 2,
};

/* What this CPU and its OS run; filled by the per-architecture probe
 * (util/arch/x86/cpu_probe.c: CPUID and XGETBV; generic: nothing). */
struct cpu_features {
	bool avx2;        /* AVX, AVX2, FMA, F16C; the OS saves ymm */
	bool avx512_vnni; /* AVX512F, AVX512BW, AVX512VL, AVX512-VNNI; the OS saves opmask and zmm */
};

/* The features, probed once (thread-safe). */
const struct cpu_features *cpu_features(void);
/* The level the kernel tables are filled from: TIERKV_KERNELS, read once,
 * capped at what the CPU runs. */
enum cpu_level cpu_kernel_level(void);
/* The name of a level ("ref", "avx2", "avx512"). */
const char *cpu_level_name(enum cpu_level level);
/* TKV_OK, or TKV_ERR_ARG with a message when TIERKV_KERNELS names an unknown
 * level or one this CPU lacks (the kernels then run at cpu_kernel_level()). */
int cpu_kernels_check(struct tkv_error *err);

/* Per-architecture probe (util/arch/): fills f; called once. */
void cpu_probe(struct cpu_features *f);

#endif
