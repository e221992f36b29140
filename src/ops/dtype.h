/* dtype.h - tensor element types (the numbering of GGUF / ggml) and their
 * block layouts. One designated-initializer table holds every type's traits. */
#ifndef TKV_OPS_DTYPE_H
#define TKV_OPS_DTYPE_H

#include <stddef.h>
#include <stdint.h>

enum tkv_dtype {
	TKV_F32 = 0,
	TKV_F16 = 1,
	TKV_Q4_0 = 2,
	TKV_Q4_1 = 3,
	TKV_Q5_0 = 6,
	TKV_Q5_1 = 7,
	TKV_Q8_0 = 8,
	TKV_Q8_1 = 9,
	TKV_Q2_K = 10,
	TKV_Q3_K = 11,
	TKV_Q4_K = 12,
	TKV_Q5_K = 13,
	TKV_Q6_K = 14,
	TKV_Q8_K = 15,
	TKV_IQ2_XXS = 16,
	TKV_IQ2_XS = 17,
	TKV_IQ3_XXS = 18,
	TKV_IQ1_S = 19,
	TKV_IQ4_NL = 20,
	TKV_IQ3_S = 21,
	TKV_IQ2_S = 22,
	TKV_IQ4_XS = 23,
	TKV_I8 = 24,
	TKV_I16 = 25,
	TKV_I32 = 26,
	TKV_I64 = 27,
	TKV_F64 = 28,
	TKV_IQ1_M = 29,
	TKV_BF16 = 30,
	TKV_TQ1_0 = 34,
	TKV_TQ2_0 = 35,
	TKV_MXFP4 = 39,
	TKV_DTYPE_COUNT = 40
};

struct tkv_dtype_traits {
	const char *name;   /* "q8_0"; NULL for numbers that are not a type */
	uint32_t blck;      /* elements per block */
	uint32_t size;      /* bytes per block */
};

/* Traits of type t, or NULL when t is not a known type. */
const struct tkv_dtype_traits *tkv_dtype_traits(uint32_t t);
/* Name of type t ("f32", "q4_k", ...), "?" when unknown. */
const char *tkv_dtype_name(uint32_t t);
/* Bytes of a row of n elements of type t; 0 if t is unknown or n is not a
 * multiple of the block size. */
size_t tkv_dtype_row_size(uint32_t t, uint64_t n);

#endif
