/* cpu.c - architectures without SIMD kernels of their own: the scalar
 * references stay in the tables. */
#include "ops/ops_impl.h"

const char *ops_arch_select(struct ops_type_kernels types[TKV_DTYPE_COUNT], struct ops_act_kernels *act,
			    const char *limit)
{
	(void)types;
	(void)act;
	(void)limit;
	return "ref";
}
