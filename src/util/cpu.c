/* cpu.c - the kernel level, from the CPU's features and TIERKV_KERNELS, decided
 * once for the whole process (see cpu.h). */
#include "util/cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/status.h"

static const char *const level_names[] = {
	[CPU_LEVEL_REF] = "ref",
	[CPU_LEVEL_AVX2] = "avx2",
	[CPU_LEVEL_AVX512] = "avx512",
};

/* Written once, under once, and only read after that. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct cpu_features features;
static enum cpu_level level;
static int env_status;          /* TKV_OK or TKV_ERR_ARG */
static char env_msg[160];       /* what is wrong with TIERKV_KERNELS */

static enum cpu_level best_level(const struct cpu_features *f)
{
	if (f->avx2 && f->avx512_vnni)
		return CPU_LEVEL_AVX512;
	return f->avx2 ? CPU_LEVEL_AVX2 : CPU_LEVEL_REF;
}

static void decide(void)
{
	const char *env = getenv("TIERKV_KERNELS");
	enum cpu_level best, want;
	int known = 0;

	cpu_probe(&features);
	best = best_level(&features);
	level = best;
	env_status = TKV_OK;
	if (!env || !*env || !strcmp(env, "auto"))
		return;
	want = best;
	for (int i = 0; i < (int)(sizeof level_names / sizeof level_names[0]); i++)
		if (!strcmp(env, level_names[i])) {
			want = (enum cpu_level)i;
			known = 1;
		}
	if (!known) {
		env_status = TKV_ERR_ARG;
		snprintf(env_msg, sizeof env_msg, "TIERKV_KERNELS=%.32s: unknown kernel level (ref, avx2, avx512 or auto)",
			 env);
		return;
	}
	if (want > best) {
		env_status = TKV_ERR_ARG;
		snprintf(env_msg, sizeof env_msg,
			 "TIERKV_KERNELS=%s: this CPU lacks %s (it runs %s at most); ask for a lower level or unset it",
			 env, want == CPU_LEVEL_AVX512 ? "AVX512F/BW/VL/VNNI" : "AVX2/FMA/F16C", level_names[best]);
		return;
	}
	level = want;
}

const struct cpu_features *cpu_features(void)
{
	pthread_once(&once, decide);
	return &features;
}

enum cpu_level cpu_kernel_level(void)
{
	pthread_once(&once, decide);
	return level;
}

const char *cpu_level_name(enum cpu_level l)
{
	return (unsigned)l < sizeof level_names / sizeof level_names[0] ? level_names[l] : "?";
}

int cpu_kernels_check(struct tkv_error *err)
{
	pthread_once(&once, decide);
	if (env_status != TKV_OK)
		return tkv_errf(err, env_status, "%s", env_msg);
	return TKV_OK;
}

const char *tkv_kernel_level(void)
{
	return cpu_level_name(cpu_kernel_level());
}
