/* tier_cpu.c - architectures without KV row kernels of their own: the scalar
 * references stay in the table. */
#include "kv/tier_impl.h"

const char *kv_tier_arch_select(struct kv_tier_kernels *k)
{
	(void)k;
	return "ref";
}

int kv_arch_has_avx2(void)
{
	return 0;
}

int kv_arch_has_vnni(void)
{
	return 0;
}
