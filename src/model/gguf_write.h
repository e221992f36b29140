/* gguf_write.h - a small GGUF writer (version 3 by default, 2 on request).
 *
 * Use:
 *	struct gguf_w *w;
 *	gguf_w_init(&w, alloc);
 *	gguf_w_add_str(w, "general.architecture", "llama");     metadata, any order
 *	gguf_w_add_u32(w, "llama.block_count", 5);
 *	gguf_w_add_tensor(w, "token_embd.weight", 2, ne, TKV_F32);  infos, file order
 *	gguf_w_start_file(w, fp);      or gguf_w_start_mem(w): header, kvs, infos
 *	gguf_w_write(w, bytes, n);     every tensor's data, in order, in any chunks
 *	gguf_w_finish(w);              checks all data was written, final padding
 *	gguf_w_free(w);
 *
 * Tensor data is streamed: the writer never holds it, so files of many GB can
 * be written with little memory. The data of all tensors is one stream in the
 * order the tensors were added; the writer puts each tensor at an offset aligned
 * to `general.alignment` (32 unless a uint32 kv of that name is added) and
 * inserts the zero padding itself, so a chunk may span tensors. A file without
 * tensors ends right after its metadata (no padding).
 *
 * Ownership: every add copies what it is given (key, strings, array elements,
 * tensor name), so the caller's memory may be freed right after the call. The
 * FILE* passed to gguf_w_start_file is borrowed (not closed). The memory output
 * belongs to the writer (see gguf_w_mem).
 *
 * Errors: every function returns TKV_OK or a negative status: TKV_ERR_NOMEM,
 * TKV_ERR_ARG (duplicate key or tensor name, bad type, dims or alignment, calls
 * in the wrong order, too much or too little data), TKV_ERR_IO (a write to the
 * FILE* failed). The first failure is sticky: later calls return it without
 * doing anything, and gguf_w_error() gives its message. So a caller may make a
 * run of adds and check only the last status. */
#ifndef TKV_MODEL_GGUF_WRITE_H
#define TKV_MODEL_GGUF_WRITE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/gguf.h"

struct gguf_w;

/* a may be NULL. On failure *out is NULL. */
int gguf_w_init(struct gguf_w **out, struct tkv_alloc *a);
/* Frees the writer and its memory output; w may be NULL. */
void gguf_w_free(struct gguf_w *w);
/* The version written in the header: 3 (default) or 2 (the same bytes for a
 * little-endian file). Only before gguf_w_start_*. */
int gguf_w_set_version(struct gguf_w *w, uint32_t version);

/* Metadata. key is NUL-terminated, non-empty and unique in the file. */
int gguf_w_add_u8(struct gguf_w *w, const char *key, uint8_t v);
int gguf_w_add_i8(struct gguf_w *w, const char *key, int8_t v);
int gguf_w_add_u16(struct gguf_w *w, const char *key, uint16_t v);
int gguf_w_add_i16(struct gguf_w *w, const char *key, int16_t v);
int gguf_w_add_u32(struct gguf_w *w, const char *key, uint32_t v);
int gguf_w_add_i32(struct gguf_w *w, const char *key, int32_t v);
int gguf_w_add_f32(struct gguf_w *w, const char *key, float v);
int gguf_w_add_bool(struct gguf_w *w, const char *key, bool v);
int gguf_w_add_u64(struct gguf_w *w, const char *key, uint64_t v);
int gguf_w_add_i64(struct gguf_w *w, const char *key, int64_t v);
int gguf_w_add_f64(struct gguf_w *w, const char *key, double v);
/* s is NUL-terminated; strn takes len bytes (which may hold NULs). */
int gguf_w_add_str(struct gguf_w *w, const char *key, const char *s);
int gguf_w_add_strn(struct gguf_w *w, const char *key, const char *s, uint64_t len);
/* An array of n numeric or bool elements (elem not STRING or ARRAY). data holds
 * them as the matching C type in host order (uint8_t, int8_t, uint16_t, ...,
 * float, double; bool as uint8_t 0 or 1), not necessarily aligned; they are
 * written little-endian. */
int gguf_w_add_arr(struct gguf_w *w, const char *key, enum gguf_type elem,
		   const void *data, uint64_t n);
/* Arrays of strings: NUL-terminated, or with explicit lengths. */
int gguf_w_add_arr_str(struct gguf_w *w, const char *key, const char *const *strs,
		       uint64_t n);
int gguf_w_add_arr_strn(struct gguf_w *w, const char *key, const struct gguf_str *strs,
			uint64_t n);
/* One key/value of a file being read (kv borrowed: its key, cut to 255
 * bytes, and value are copied), as the matching add call above;
 * TKV_ERR_FORMAT for a type it does not know. */
int gguf_w_add_kv(struct gguf_w *w, const struct gguf_kv *kv);

/* A tensor info: n_dims 1..4 dims ne[] (ne[0] the row, a multiple of the type's
 * block size), type an enum tkv_dtype. Tensors are laid out in the order added. */
int gguf_w_add_tensor(struct gguf_w *w, const char *name, uint32_t n_dims,
		      const uint64_t *ne, uint32_t type);
/* Bytes of tensor i's data (0 if i is out of range). */
uint64_t gguf_w_tensor_nbytes(const struct gguf_w *w, uint64_t i);

/* Writes the header, metadata, tensor infos and padding to fp (borrowed), or to
 * a memory buffer owned by the writer. After this, no more adds. */
int gguf_w_start_file(struct gguf_w *w, FILE *fp);
int gguf_w_start_mem(struct gguf_w *w);
/* Appends n bytes of tensor data (the tensors' bytes concatenated in order). */
int gguf_w_write(struct gguf_w *w, const void *data, size_t n);
/* Checks every tensor was written in full, writes the final padding and, for a
 * FILE*, flushes it. */
int gguf_w_finish(struct gguf_w *w);

/* The memory output so far (borrowed: valid until the next write or
 * gguf_w_free); NULL if the writer does not write to memory. */
const void *gguf_w_mem(const struct gguf_w *w, size_t *size);
/* The first error (status TKV_OK and an empty message if none). */
const struct tkv_error *gguf_w_error(const struct gguf_w *w);

#endif
