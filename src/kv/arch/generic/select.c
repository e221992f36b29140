/* select.c - architectures without KV kernels of their own: the scalar
 * references stay in the tables (the level is always ref here). */
#include "kv/attn_impl.h"
#include "kv/tier_impl.h"

enum cpu_level kv_tier_arch_select(struct kv_tier_kernels *k, enum cpu_level level)
{
	(void)k;
	(void)level;
	return CPU_LEVEL_REF;
}

void kv_attn_arch_select(struct kv_attn_kernels *k, enum cpu_level level)
{
	(void)k;
	(void)level;
}
