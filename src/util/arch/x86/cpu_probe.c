/* cpu_probe.c - the x86 features the kernels need, the one CPUID probe of
 * tierkv. Compiled without -mavx2: only these checks run before we know the
 * instructions exist. By hand, since not every compiler's
 * __builtin_cpu_supports knows "f16c" or "avx512vnni": CPUID for the
 * instructions, XGETBV for the OS saving the registers they use. */
#include <cpuid.h>
#include <stddef.h>

#include "util/cpu.h"

void cpu_probe(struct cpu_features *f)
{
	unsigned a, b, c, d, xcr0 = 0, hi;

	f->avx2 = false;
	f->avx512_vnni = false;
	if (__get_cpuid_max(0, NULL) < 7)
		return;
	__cpuid(1, a, b, c, d);
	if (c & (1u << 27)) { /* OSXSAVE: xgetbv is usable */
		__asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(hi) : "c"(0));
		(void)hi;
	}
	/* FMA, AVX, F16C (leaf 1 ECX bits 12, 28, 29); the OS saves xmm and ymm
	 * (XCR0 bits 1, 2) */
	if (!(c & (1u << 12)) || !(c & (1u << 28)) || !(c & (1u << 29)) || (xcr0 & 0x6) != 0x6)
		return;
	__cpuid_count(7, 0, a, b, c, d);
	f->avx2 = (b & (1u << 5)) != 0; /* leaf 7 EBX bit 5 */
	/* AVX512F (EBX bit 16), AVX512BW (EBX bit 30), AVX512VL (EBX bit 31),
	 * AVX512-VNNI (ECX bit 11); the OS saves opmask and zmm state (XCR0
	 * bits 5, 6, 7) */
	f->avx512_vnni = f->avx2 && (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31)) &&
			 (c & (1u << 11)) && (xcr0 & 0xe6) == 0xe6;
}
