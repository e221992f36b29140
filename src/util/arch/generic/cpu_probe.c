/* cpu_probe.c - architectures without SIMD kernels of their own: no features,
 * so every kernel table keeps its scalar references. */
#include "util/cpu.h"

void cpu_probe(struct cpu_features *f)
{
	f->avx2 = false;
	f->avx512_vnni = false;
}
