/* gguf.h - reader of GGUF files (versions 2 and 3).
 *
 * The file, byte by byte (all integers little-endian):
 *
 *   header   u32 magic "GGUF" (0x46554747) | u32 version (2 or 3)
 *            u64 n_tensors | u64 n_kv
 *   kv[n_kv] string key | u32 value type | value
 *            string  = u64 len | len bytes (UTF-8, not NUL-terminated)
 *            value   = by type: u8 i8 u16 i16 u32 i32 f32 bool(u8: 0/1) string
 *                      u64 i64 f64, or array = u32 elem type | u64 n | n values
 *                      (arrays of arrays are not allowed)
 *   tensor infos[n_tensors]
 *            string name | u32 n_dims (1..4) | u64 ne[n_dims] | u32 type
 *            | u64 offset (from the start of the data section, aligned)
 *   padding  to `general.alignment` (u32, default 32, a power of two)
 *   data     the tensor bytes
 *
 * Everything is validated at open time, before any use: magic, version, counts
 * against the bytes left, string and array lengths, value types, integer overflow
 * in sizes, known tensor types, dims and block multiples, unique names, tensor
 * extents inside the file and without overlap. After gguf_open succeeds every
 * pointer below is safe to read within its stated length.
 *
 * Ownership: strings, arrays and tensor data point into the mapping (or buffer),
 * borrowed from the gguf_file; they stay valid until gguf_close. */
#ifndef TKV_MODEL_GGUF_H
#define TKV_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tierkv.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

enum gguf_type {
	GGUF_TYPE_UINT8 = 0,
	GGUF_TYPE_INT8 = 1,
	GGUF_TYPE_UINT16 = 2,
	GGUF_TYPE_INT16 = 3,
	GGUF_TYPE_UINT32 = 4,
	GGUF_TYPE_INT32 = 5,
	GGUF_TYPE_FLOAT32 = 6,
	GGUF_TYPE_BOOL = 7,
	GGUF_TYPE_STRING = 8,
	GGUF_TYPE_ARRAY = 9,
	GGUF_TYPE_UINT64 = 10,
	GGUF_TYPE_INT64 = 11,
	GGUF_TYPE_FLOAT64 = 12,
	GGUF_TYPE_COUNT
};

/* A string inside the file: len bytes at ptr, not NUL-terminated. */
struct gguf_str {
	uint64_t len;
	const char *ptr;
};

/* One metadata key/value. Scalars are widened into the union on open. */
struct gguf_kv {
	struct gguf_str key;
	enum gguf_type type;
	uint64_t offset;              /* file offset of the key, for messages */
	union {
		uint64_t u64;         /* UINT8/16/32/64 and BOOL (0 or 1) */
		int64_t i64;          /* INT8/16/32/64 */
		double f64;           /* FLOAT32/64 */
		struct gguf_str str;  /* STRING */
		struct {
			enum gguf_type type;  /* element type, never ARRAY */
			uint64_t n;           /* element count */
			const void *data;     /* raw little-endian elements (not for STRING) */
			struct gguf_str *strs; /* STRING arrays: n entries, owned by the file */
		} arr;
	} v;
};

struct gguf_tensor {
	struct gguf_str name;
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS];   /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
	uint32_t type;                /* enum tkv_dtype */
	uint64_t offset;              /* from the start of the data section */
	uint64_t nbytes;              /* exact size of the data */
	const void *data;             /* inside the mapping */
};

struct gguf_file;

/* Maps and validates the file at path. On success *out owns the mapping.
 * On failure *out is NULL and err names the problem and the byte offset:
 * e.g. "stories.gguf: tensor 'blk.3.attn_q.weight': data [0x1234, 0x5234) past
 * end of file (size 0x1000)". Allocations go through a (may be NULL). */
int gguf_open(struct gguf_file **out, const char *path, struct tkv_alloc *a,
	      struct tkv_error *err);
/* Same, over a caller's buffer (borrowed: must outlive the gguf_file).
 * name is used in messages. For tests and fuzzing. */
int gguf_open_buffer(struct gguf_file **out, const void *buf, size_t size,
		     const char *name, struct tkv_alloc *a, struct tkv_error *err);
/* Unmaps and frees; f may be NULL. Invalidates every pointer handed out. */
void gguf_close(struct gguf_file *f);

uint32_t gguf_version(const struct gguf_file *f);
uint32_t gguf_alignment(const struct gguf_file *f);
uint64_t gguf_size(const struct gguf_file *f);          /* file bytes */
uint64_t gguf_data_offset(const struct gguf_file *f);   /* start of the data section */
const char *gguf_name(const struct gguf_file *f);       /* path or buffer name */

uint64_t gguf_n_kv(const struct gguf_file *f);
const struct gguf_kv *gguf_kv_at(const struct gguf_file *f, uint64_t i);
/* NULL when absent. key is NUL-terminated. */
const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key);

/* Typed getters. Return TKV_OK, or TKV_ERR_FORMAT (with a message naming the key)
 * when the key is absent or its value does not fit the requested type. Integer
 * getters accept any integer type whose value fits (and BOOL for get_bool);
 * gguf_get_f32 accepts FLOAT32/64 and integers. */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, struct tkv_error *err);
int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out, struct tkv_error *err);
int gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *out, struct tkv_error *err);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out, struct tkv_error *err);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, struct tkv_error *err);
int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out, struct tkv_error *err);
/* The array under key, checking its element type (GGUF_TYPE_COUNT = any). */
int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_type elem,
		 const struct gguf_kv **out, struct tkv_error *err);

/* Element i of an array kv widened: integers (and bool) as int64/uint64, floats as
 * double. Caller guarantees i < n and a matching numeric element type. */
int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i);
double gguf_arr_f64(const struct gguf_kv *kv, uint64_t i);

uint64_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, uint64_t i);
/* NULL when absent. */
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Compares a file string with a C string. */
bool gguf_str_eq(struct gguf_str s, const char *c);
/* Name of a value type ("uint32", "array", ...). */
const char *gguf_type_name(uint32_t t);

#endif
