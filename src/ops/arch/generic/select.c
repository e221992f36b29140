/* select.c - architectures without SIMD kernels of their own: the scalar
 * references stay in the tables (the level is always ref here). */
#include "ops/ops_impl.h"

void ops_arch_select(struct ops_type_kernels types[TKV_DTYPE_COUNT], struct ops_act_kernels *act,
		     enum cpu_level level)
{
	(void)types;
	(void)act;
	(void)level;
}
