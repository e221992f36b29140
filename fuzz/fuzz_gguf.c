/* fuzz_gguf.c - libFuzzer target for the GGUF reader.
 *
 * Each input is a whole file. When gguf_open_buffer accepts it, every kv and
 * tensor is touched (every string byte, every array element, every tensor's
 * first and last data byte, every typed getter), the lookups are checked against
 * the tables, and the file is written again with the GGUF writer and re-read:
 * the second parse must give the same metadata and tensor bytes. When it is
 * rejected, the status and message must be set and nothing may leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/gguf_write.h"
#include "util/alloc.h"

#include "common.h"


static volatile uint64_t sink;

static void touch(const void *p, uint64_t n)
{
	const uint8_t *b = p;
	uint64_t i, h = 0;

	for (i = 0; i < n; i++)
		h = h * 31 + b[i];
	sink += h;
}

/* NUL-terminated copy of s in buf; false if s holds a NUL or is too long. */
static int cstr(char *buf, size_t cap, struct gguf_str s)
{
	if (s.len >= cap || memchr(s.ptr, 0, s.len))
		return 0;
	memcpy(buf, s.ptr, s.len);
	buf[s.len] = 0;
	return 1;
}

static void touch_kv(const struct gguf_file *f, const struct gguf_kv *kv)
{
	char key[4096];
	struct gguf_str s;
	const struct gguf_kv *arr;
	uint64_t u64, i;
	uint32_t u32;
	int32_t i32;
	float f32;
	bool b;

	touch(kv->key.ptr, kv->key.len);
	CHECK(kv->offset < gguf_size(f));
	if (kv->type == GGUF_TYPE_STRING)
		touch(kv->v.str.ptr, kv->v.str.len);
	if (kv->type == GGUF_TYPE_ARRAY) {
		CHECK(kv->v.arr.type != GGUF_TYPE_ARRAY && kv->v.arr.type < GGUF_TYPE_COUNT);
		for (i = 0; i < kv->v.arr.n; i++) {
			if (kv->v.arr.type == GGUF_TYPE_STRING) {
				touch(kv->v.arr.strs[i].ptr, kv->v.arr.strs[i].len);
			} else {
				sink += (uint64_t)gguf_arr_i64(kv, i);
				sink += (uint64_t)(gguf_arr_f64(kv, i) != 0);
			}
		}
	}
	if (!cstr(key, sizeof key, kv->key))
		return;
	CHECK(gguf_find(f, key) == kv);
	sink += gguf_get_u32(f, key, &u32, NULL);
	sink += gguf_get_u64(f, key, &u64, NULL);
	sink += gguf_get_i32(f, key, &i32, NULL);
	sink += gguf_get_f32(f, key, &f32, NULL);
	sink += gguf_get_bool(f, key, &b, NULL);
	sink += gguf_get_str(f, key, &s, NULL);
	CHECK(gguf_get_arr(f, key, GGUF_TYPE_COUNT, &arr, NULL) ==
	      (kv->type == GGUF_TYPE_ARRAY ? TKV_OK : TKV_ERR_FORMAT));
}

/* Adds kv to the writer; 0 when it cannot be reproduced (NUL in the key). */
static int copy_kv(struct gguf_w *w, const struct gguf_kv *kv)
{
	char key[4096];

	if (!cstr(key, sizeof key, kv->key))
		return 0;
	switch (kv->type) {
	case GGUF_TYPE_UINT8: gguf_w_add_u8(w, key, (uint8_t)kv->v.u64); break;
	case GGUF_TYPE_INT8: gguf_w_add_i8(w, key, (int8_t)kv->v.i64); break;
	case GGUF_TYPE_UINT16: gguf_w_add_u16(w, key, (uint16_t)kv->v.u64); break;
	case GGUF_TYPE_INT16: gguf_w_add_i16(w, key, (int16_t)kv->v.i64); break;
	case GGUF_TYPE_UINT32: gguf_w_add_u32(w, key, (uint32_t)kv->v.u64); break;
	case GGUF_TYPE_INT32: gguf_w_add_i32(w, key, (int32_t)kv->v.i64); break;
	case GGUF_TYPE_FLOAT32: gguf_w_add_f32(w, key, (float)kv->v.f64); break;
	case GGUF_TYPE_BOOL: gguf_w_add_bool(w, key, kv->v.u64 != 0); break;
	case GGUF_TYPE_UINT64: gguf_w_add_u64(w, key, kv->v.u64); break;
	case GGUF_TYPE_INT64: gguf_w_add_i64(w, key, kv->v.i64); break;
	case GGUF_TYPE_FLOAT64: gguf_w_add_f64(w, key, kv->v.f64); break;
	case GGUF_TYPE_STRING: gguf_w_add_strn(w, key, kv->v.str.ptr, kv->v.str.len); break;
	case GGUF_TYPE_ARRAY:
		if (kv->v.arr.type == GGUF_TYPE_STRING)
			gguf_w_add_arr_strn(w, key, kv->v.arr.strs, kv->v.arr.n);
		else
			gguf_w_add_arr(w, key, kv->v.arr.type, kv->v.arr.data, kv->v.arr.n);
		break;
	default: CHECK(0);
	}
	return 1;
}

static const size_t elem_size[GGUF_TYPE_COUNT] = {
	[GGUF_TYPE_UINT8] = 1,   [GGUF_TYPE_INT8] = 1,   [GGUF_TYPE_UINT16] = 2,
	[GGUF_TYPE_INT16] = 2,   [GGUF_TYPE_UINT32] = 4, [GGUF_TYPE_INT32] = 4,
	[GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,   [GGUF_TYPE_UINT64] = 8,
	[GGUF_TYPE_INT64] = 8,   [GGUF_TYPE_FLOAT64] = 8,
};

static int same_value(const struct gguf_kv *a, const struct gguf_kv *b)
{
	uint64_t i;

	if (a->type != b->type || a->key.len != b->key.len ||
	    memcmp(a->key.ptr, b->key.ptr, a->key.len))
		return 0;
	switch (a->type) {
	case GGUF_TYPE_FLOAT32:
	case GGUF_TYPE_FLOAT64:
		return memcmp(&a->v.f64, &b->v.f64, sizeof a->v.f64) == 0 ||
		       (a->v.f64 != a->v.f64 && b->v.f64 != b->v.f64);
	case GGUF_TYPE_STRING:
		return a->v.str.len == b->v.str.len &&
		       memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len) == 0;
	case GGUF_TYPE_ARRAY:
		if (a->v.arr.type != b->v.arr.type || a->v.arr.n != b->v.arr.n)
			return 0;
		if (a->v.arr.type != GGUF_TYPE_STRING)
			return memcmp(a->v.arr.data, b->v.arr.data,
				      (size_t)a->v.arr.n * elem_size[a->v.arr.type]) == 0;
		for (i = 0; i < a->v.arr.n; i++) {
			const struct gguf_str *x = &a->v.arr.strs[i], *y = &b->v.arr.strs[i];

			if (x->len != y->len || memcmp(x->ptr, y->ptr, x->len))
				return 0;
		}
		return 1;
	default:
		return a->v.u64 == b->v.u64;
	}
}

/* Writes f again with the writer and checks the re-read file matches. */
static void roundtrip(const struct gguf_file *f)
{
	struct tkv_alloc a = {0};
	struct gguf_file *g;
	struct gguf_w *w;
	const void *mem;
	char name[4096];
	uint64_t i;
	size_t len;

	CHECK(gguf_w_init(&w, &a) == TKV_OK);
	for (i = 0; i < gguf_n_kv(f); i++)
		if (!copy_kv(w, gguf_kv_at(f, i)))
			goto out_free;
	for (i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);

		if (!cstr(name, sizeof name, t->name))
			goto out_free;
		gguf_w_add_tensor(w, name, t->n_dims, t->ne, t->type);
	}
	CHECK(gguf_w_start_mem(w) == TKV_OK);
	for (i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);

		CHECK(gguf_w_write(w, t->data, (size_t)t->nbytes) == TKV_OK);
	}
	CHECK(gguf_w_finish(w) == TKV_OK);
	mem = gguf_w_mem(w, &len);
	CHECK(gguf_open_buffer(&g, mem, len, "roundtrip", &a, NULL) == TKV_OK);
	CHECK(gguf_n_kv(g) == gguf_n_kv(f) && gguf_n_tensors(g) == gguf_n_tensors(f));
	CHECK(gguf_alignment(g) == gguf_alignment(f));
	for (i = 0; i < gguf_n_kv(f); i++)
		CHECK(same_value(gguf_kv_at(f, i), gguf_kv_at(g, i)));
	for (i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i), *u = gguf_tensor_at(g, i);

		CHECK(t->name.len == u->name.len && !memcmp(t->name.ptr, u->name.ptr, t->name.len));
		CHECK(t->n_dims == u->n_dims && t->type == u->type && t->nbytes == u->nbytes);
		CHECK(!memcmp(t->ne, u->ne, sizeof t->ne));
		CHECK(!memcmp(t->data, u->data, (size_t)t->nbytes));
	}
	gguf_close(g);
out_free:
	gguf_w_free(w);
	CHECK(a.live == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tkv_alloc a = {0};
	struct tkv_error err = {0};
	struct gguf_file *f;
	char name[4096];
	uint64_t i;
	int rc;

	rc = gguf_open_buffer(&f, data, size, "fuzz.gguf", &a, &err);
	if (rc != TKV_OK) {
		CHECK(f == NULL);
		CHECK(rc == TKV_ERR_FORMAT || rc == TKV_ERR_UNSUPPORTED);
		CHECK(err.status == rc && strncmp(err.msg, "fuzz.gguf: ", 11) == 0);
		CHECK(a.live == 0);
		return 0;
	}
	CHECK(gguf_version(f) == 2 || gguf_version(f) == 3);
	CHECK(gguf_alignment(f) && !(gguf_alignment(f) & (gguf_alignment(f) - 1)));
	CHECK(gguf_size(f) == size);
	for (i = 0; i < gguf_n_kv(f); i++)
		touch_kv(f, gguf_kv_at(f, i));
	for (i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		const uint8_t *d = t->data;

		CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS && t->nbytes > 0);
		CHECK(t->offset % gguf_alignment(f) == 0);
		CHECK(gguf_data_offset(f) + t->offset + t->nbytes <= size);
		CHECK(d == data + gguf_data_offset(f) + t->offset);
		sink += d[0] + d[t->nbytes - 1];
		touch(t->name.ptr, t->name.len);
		if (cstr(name, sizeof name, t->name))
			CHECK(gguf_find_tensor(f, name) == t);
	}
	roundtrip(f);
	gguf_close(f);
	CHECK(a.live == 0);
	return 0;
}
