/* tierkv.h - public interface of libtierkv, a llama-family inference engine
 * whose KV cache is token-aware, tiered and adaptive.
 *
 * Conventions (the same everywhere in the library):
 *  - Functions that can fail return an int status: TKV_OK (0) or a negative
 *    TKV_ERR_*. Most take a `struct tkv_error *err` (may be NULL) that receives a
 *    message naming what is wrong and where. Library code never exits.
 *  - x_init()/x_free() pairs; x_free(NULL) is a no-op.
 *  - Options travel in params structs made by x_default_params().
 *  - Ownership is stated in each comment: borrowed, transferred or invalidated.
 */
#ifndef TIERKV_H
#define TIERKV_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------ */

enum tkv_status {
	TKV_OK = 0,
	TKV_ERR_NOMEM = -1,       /* an allocation failed */
	TKV_ERR_IO = -2,          /* open/read/mmap failed */
	TKV_ERR_FORMAT = -3,      /* malformed or inconsistent file */
	TKV_ERR_ARG = -4,         /* bad argument from the caller */
	TKV_ERR_UNSUPPORTED = -5, /* valid, but not something tierkv handles */
	TKV_ERR_KV_FULL = -6,     /* the KV memory budget is exhausted */
	TKV_ERR_CTX_FULL = -7,    /* the sequence reached the context length */
	TKV_ERR_INTERNAL = -8,    /* a broken invariant: a bug */
};

/* Static string for a status; never NULL. */
const char *tkv_status_str(int status);

struct tkv_error {
	int status;
	char msg[512];
};

/* ---- memory -------------------------------------------------------------
 * The counting allocator. Zero-initialise one (`struct tkv_alloc a = {0};`),
 * pass it to the *_params of what you create, and read live/peak bytes. Tests set
 * fail_at = N to make the Nth allocation call (1-based) fail, and every one
 * after it for fail_count calls (0 = all later calls). */
struct tkv_alloc {
	atomic_size_t live;              /* bytes currently allocated */
	atomic_size_t peak;              /* high-water mark of live */
	atomic_ullong n_calls;           /* allocation calls so far */
	unsigned long long fail_at;      /* 0 = never fail */
	unsigned long long fail_count;   /* 0 = fail forever once fail_at is reached */
};

#ifdef __cplusplus
}
#endif
#endif
