/* test_gguf.c - GGUF reader and writer: real fixtures, round trips of every
 * metadata type, malformed files (truncation at every byte, corrupt counts,
 * lengths, types, alignment, tensor infos and extents) and allocation failure. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/gguf_write.h"
#include "ops/dtype.h"
#include "util/alloc.h"

/* ---- helpers ------------------------------------------------------------ */

/* Opens a copy of buf[0..len) in a heap block of exactly len bytes, so ASan
 * flags any read past the end; checks nothing leaks on failure. */
static int open_copy(const void *buf, size_t len, struct tkv_error *err)
{
	struct tkv_alloc a = {0};
	struct gguf_file *f = (struct gguf_file *)1;
	void *copy = malloc(len ? len : 1);
	int rc;

	assert_non_null(copy);
	if (len)
		memcpy(copy, buf, len);
	rc = gguf_open_buffer(&f, copy, len, "test.gguf", &a, err);
	if (rc == TKV_OK) {
		uint64_t i;

		/* touch everything a caller may read */
		for (i = 0; i < gguf_n_tensors(f); i++) {
			const struct gguf_tensor *t = gguf_tensor_at(f, i);
			volatile uint8_t x = ((const uint8_t *)t->data)[t->nbytes - 1];
			(void)x;
		}
		gguf_close(f);
	} else {
		assert_null(f);
	}
	assert_int_equal(atomic_load(&a.live), 0);
	free(copy);
	return rc;
}

/* Expects status rc and a message containing each of the given fragments. */
static void expect_fail(const void *buf, size_t len, int rc, const char *frag1, const char *frag2)
{
	struct tkv_error err = {0};
	int got = open_copy(buf, len, &err);

	if (got != rc || (frag1 && !strstr(err.msg, frag1)) || (frag2 && !strstr(err.msg, frag2)))
		print_error("got %d '%s', expected %d with '%s' '%s'\n", got, err.msg, rc,
			    frag1 ? frag1 : "", frag2 ? frag2 : "");
	assert_int_equal(got, rc);
	assert_int_equal(err.status, rc);
	assert_non_null(strstr(err.msg, "test.gguf: "));
	if (frag1)
		assert_non_null(strstr(err.msg, frag1));
	if (frag2)
		assert_non_null(strstr(err.msg, frag2));
}

static void tb_header(struct tu_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	tu_put_u32(b, GGUF_MAGIC);
	tu_put_u32(b, version);
	tu_put_u64(b, n_tensors);
	tu_put_u64(b, n_kv);
}

static void tb_kv_u32(struct tu_buf *b, const char *key, uint32_t v)
{
	tu_put_str(b, key);
	tu_put_u32(b, GGUF_TYPE_UINT32);
	tu_put_u32(b, v);
}

static void tb_kv_str(struct tu_buf *b, const char *key, const char *v)
{
	tu_put_str(b, key);
	tu_put_u32(b, GGUF_TYPE_STRING);
	tu_put_str(b, v);
}

/* Restarts b as a file of one key and no tensors, up to the key's value
 * type; the caller writes the value. */
static void tb_restart_kv(struct tu_buf *b, const char *key, uint32_t type)
{
	b->len = 0;
	tb_header(b, 3, 0, 1);
	tu_put_str(b, key);
	tu_put_u32(b, type);
}

/* ... of one array "arr" of n elements of type elem, up to the elements. */
static void tb_restart_array(struct tu_buf *b, uint32_t elem, uint64_t n)
{
	tb_restart_kv(b, "arr", GGUF_TYPE_ARRAY);
	tu_put_u32(b, elem);
	tu_put_u64(b, n);
}

static void tb_tinfo(struct tu_buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
		     uint32_t type, uint64_t offset)
{
	uint32_t i;

	tu_put_str(b, name);
	tu_put_u32(b, n_dims);
	for (i = 0; i < n_dims; i++)
		tu_put_u64(b, ne[i]);
	tu_put_u32(b, type);
	tu_put_u64(b, offset);
}

static void tb_align(struct tu_buf *b, size_t a)
{
	while (b->len % a)
		tu_put_u8(b, 0);
}

static void tb_zeros(struct tu_buf *b, size_t n)
{
	while (n--)
		tu_put_u8(b, 0);
}

/* Two f32 tensors "a" [8] and "b" [8] with the given infos and data bytes. */
static void tb_two_tensors(struct tu_buf *b, uint64_t off_a, uint64_t off_b, size_t data_bytes)
{
	const uint64_t ne[1] = {8};

	tb_header(b, 3, 2, 1);
	tb_kv_str(b, "general.architecture", "test");
	tb_tinfo(b, "a", 1, ne, TKV_F32, off_a);
	tb_tinfo(b, "b", 1, ne, TKV_F32, off_b);
	tb_align(b, 32);
	tb_zeros(b, data_bytes);
}

/* ---- real fixtures ------------------------------------------------------ */

static void test_stories260k(void **state)
{
	const char *path = tu_model_path("stories260K.gguf");
	struct tkv_alloc a = {0};
	struct tkv_error err = {0};
	struct gguf_file *f;
	const struct gguf_tensor *t;
	const struct gguf_kv *kv;
	struct gguf_str s;
	uint32_t u;
	float eps;
	uint64_t i;

	(void)state;
	assert_non_null(path);
	assert_int_equal(gguf_open(&f, path, &a, &err), TKV_OK);
	assert_int_equal(gguf_version(f), 3);
	assert_int_equal(gguf_alignment(f), 32);
	assert_int_equal(gguf_size(f), 1185376);
	assert_string_equal(gguf_name(f), path);
	assert_int_equal(gguf_data_offset(f) % 32, 0);

	assert_int_equal(gguf_get_str(f, "general.architecture", &s, &err), TKV_OK);
	assert_true(gguf_str_eq(s, "llama"));
	assert_int_equal(gguf_get_u32(f, "llama.block_count", &u, &err), TKV_OK);
	assert_int_equal(u, 5);
	assert_int_equal(gguf_get_u32(f, "llama.embedding_length", &u, &err), TKV_OK);
	assert_int_equal(u, 64);
	assert_int_equal(gguf_get_u32(f, "llama.attention.head_count", &u, &err), TKV_OK);
	assert_int_equal(u, 8);
	assert_int_equal(gguf_get_u32(f, "llama.attention.head_count_kv", &u, &err), TKV_OK);
	assert_int_equal(u, 4);
	assert_int_equal(gguf_get_u32(f, "llama.feed_forward_length", &u, &err), TKV_OK);
	assert_int_equal(u, 172);
	assert_int_equal(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps, &err), TKV_OK);
	assert_true(fabsf(eps - 1e-5f) < 1e-9f);
	assert_int_equal(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv, &err), TKV_OK);
	assert_int_equal(kv->v.arr.n, 512);
	assert_true(gguf_str_eq(kv->v.arr.strs[0], "<unk>"));
	assert_true(gguf_str_eq(kv->v.arr.strs[1], "<s>"));
	assert_true(gguf_str_eq(kv->v.arr.strs[2], "</s>"));
	assert_int_equal(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &kv, &err), TKV_OK);
	assert_int_equal(kv->v.arr.n, 512);
	/* absent keys and wrong types are errors naming the key */
	assert_int_equal(gguf_get_u32(f, "no.such.key", &u, &err), TKV_ERR_FORMAT);
	assert_non_null(strstr(err.msg, "no.such.key"));
	assert_null(gguf_find(f, "no.such.key"));
	assert_int_equal(gguf_get_u32(f, "general.architecture", &u, &err), TKV_ERR_FORMAT);
	assert_int_equal(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_INT32, &kv, &err),
			 TKV_ERR_FORMAT);

	assert_int_equal(gguf_n_tensors(f), 48);
	for (i = 0; i < gguf_n_tensors(f); i++) {
		char name[128];

		t = gguf_tensor_at(f, i);
		assert_int_equal(t->type, TKV_F32);
		assert_int_equal(t->offset % 32, 0);
		assert_true(gguf_data_offset(f) + t->offset + t->nbytes <= gguf_size(f));
		assert_int_equal(t->nbytes, t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] * 4);
		snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
		assert_ptr_equal(gguf_find_tensor(f, name), t);
	}
	assert_null(gguf_tensor_at(f, 48));
	assert_null(gguf_kv_at(f, gguf_n_kv(f)));
	t = gguf_find_tensor(f, "token_embd.weight");
	assert_non_null(t);
	assert_int_equal(t->n_dims, 2);
	assert_int_equal(t->ne[0], 64);
	assert_int_equal(t->ne[1], 512);
	assert_int_equal(t->nbytes, 64 * 512 * 4);
	t = gguf_find_tensor(f, "blk.4.ffn_gate.weight");
	assert_non_null(t);
	assert_int_equal(t->ne[0], 64);
	assert_int_equal(t->ne[1], 172);
	assert_null(gguf_find_tensor(f, "blk.5.ffn_gate.weight"));
	assert_null(gguf_find_tensor(f, "token_embd.weigh"));
	gguf_close(f);
	assert_int_equal(atomic_load(&a.live), 0);
	gguf_close(NULL);
}

static void check_vocab(const char *file, const char *model, uint64_t n_vocab, bool merges)
{
	struct tkv_alloc a = {0};
	struct tkv_error err = {0};
	struct gguf_file *f;
	const struct gguf_kv *kv;
	struct gguf_str s;
	uint64_t i, total = 0;

	assert_int_equal(gguf_open(&f, tu_vocab_path(file), &a, &err), TKV_OK);
	assert_int_equal(gguf_n_tensors(f), 0);
	/* these files end right after the metadata, without padding */
	assert_true(gguf_data_offset(f) <= gguf_size(f));
	assert_int_equal(gguf_get_str(f, "tokenizer.ggml.model", &s, &err), TKV_OK);
	assert_true(gguf_str_eq(s, model));
	assert_int_equal(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv, &err), TKV_OK);
	assert_int_equal(kv->v.arr.n, n_vocab);
	for (i = 0; i < kv->v.arr.n; i++)
		total += kv->v.arr.strs[i].len;
	assert_true(total > n_vocab);
	assert_int_equal(gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &kv, &err), TKV_OK);
	assert_int_equal(kv->v.arr.n, n_vocab);
	for (i = 0; i < kv->v.arr.n; i++)
		assert_true(gguf_arr_i64(kv, i) >= 0 && gguf_arr_i64(kv, i) <= 6);
	if (merges) {
		assert_int_equal(gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &kv, &err),
				 TKV_OK);
		assert_true(kv->v.arr.n > 1000);
	}
	gguf_close(f);
	assert_int_equal(atomic_load(&a.live), 0);
}

static void test_vocab_files(void **state)
{
	(void)state;
	check_vocab("ggml-vocab-llama-spm.gguf", "llama", 32000, false);
	check_vocab("ggml-vocab-llama-bpe.gguf", "gpt2", 128256, true);
	check_vocab("ggml-vocab-qwen2.gguf", "gpt2", 151936, true);
}

/* ---- writer -> reader round trip ---------------------------------------- */

/* Writes a file with every metadata type, a string array and tensors of several
 * types; the data of tensor i is bytes (i*37 + k) & 0xff. Returns malloc'd bytes. */
static uint8_t *build_all_types(uint32_t version, uint32_t align, size_t *len)
{
	static const uint8_t a_u8[] = {0, 1, 255};
	static const int8_t a_i8[] = {-128, 0, 127};
	static const uint16_t a_u16[] = {0, 65535};
	static const int16_t a_i16[] = {-32768, 32767};
	static const uint32_t a_u32[] = {0, 1, 0xffffffffu};
	static const int32_t a_i32[] = {INT32_MIN, -1, INT32_MAX};
	static const float a_f32[] = {0.5f, -1.25f, 3.0e38f};
	static const uint8_t a_bool[] = {1, 0, 1, 1};
	static const uint64_t a_u64[] = {UINT64_MAX, 0};
	static const int64_t a_i64[] = {INT64_MIN, INT64_MAX};
	static const double a_f64[] = {1e300, -2.5};
	static const char *const a_str[] = {"hello", "", "w\xc3\xb6rld", "<0x0A>"};
	const struct gguf_str a_strn[] = {{3, "a\0b"}, {0, NULL}};
	const uint64_t ne1[] = {3}, ne2[] = {4, 2}, ne3[] = {64, 2}, ne4[] = {256},
		       ne5[] = {5, 1, 1, 2};
	struct gguf_w *w;
	uint8_t chunk[97];
	uint64_t i, k, total = 0;
	const void *mem;
	uint8_t *out;
	size_t n;

	assert_int_equal(gguf_w_init(&w, NULL), TKV_OK);
	if (version != 3)
		gguf_w_set_version(w, version);
	if (align)
		gguf_w_add_u32(w, "general.alignment", align);
	gguf_w_add_u8(w, "t.u8", 200);
	gguf_w_add_i8(w, "t.i8", -100);
	gguf_w_add_u16(w, "t.u16", 60000);
	gguf_w_add_i16(w, "t.i16", -30000);
	gguf_w_add_u32(w, "t.u32", 4000000000u);
	gguf_w_add_i32(w, "t.i32", -2000000000);
	gguf_w_add_f32(w, "t.f32", 0.15625f);
	gguf_w_add_bool(w, "t.bool", true);
	gguf_w_add_bool(w, "t.bool0", false);
	gguf_w_add_u64(w, "t.u64", 0xfedcba9876543210ull);
	gguf_w_add_i64(w, "t.i64", -0x123456789abcdefll);
	gguf_w_add_f64(w, "t.f64", -1.0 / 3.0);
	gguf_w_add_str(w, "t.str", "llama");
	gguf_w_add_str(w, "t.str_empty", "");
	gguf_w_add_strn(w, "t.strn", "x\0y", 3);
	gguf_w_add_arr(w, "a.u8", GGUF_TYPE_UINT8, a_u8, 3);
	gguf_w_add_arr(w, "a.i8", GGUF_TYPE_INT8, a_i8, 3);
	gguf_w_add_arr(w, "a.u16", GGUF_TYPE_UINT16, a_u16, 2);
	gguf_w_add_arr(w, "a.i16", GGUF_TYPE_INT16, a_i16, 2);
	gguf_w_add_arr(w, "a.u32", GGUF_TYPE_UINT32, a_u32, 3);
	gguf_w_add_arr(w, "a.i32", GGUF_TYPE_INT32, a_i32, 3);
	gguf_w_add_arr(w, "a.f32", GGUF_TYPE_FLOAT32, a_f32, 3);
	gguf_w_add_arr(w, "a.bool", GGUF_TYPE_BOOL, a_bool, 4);
	gguf_w_add_arr(w, "a.u64", GGUF_TYPE_UINT64, a_u64, 2);
	gguf_w_add_arr(w, "a.i64", GGUF_TYPE_INT64, a_i64, 2);
	gguf_w_add_arr(w, "a.f64", GGUF_TYPE_FLOAT64, a_f64, 2);
	gguf_w_add_arr(w, "a.empty", GGUF_TYPE_INT32, NULL, 0);
	gguf_w_add_arr_str(w, "a.str", a_str, 4);
	gguf_w_add_arr_strn(w, "a.strn", a_strn, 2);
	gguf_w_add_arr_str(w, "a.str_empty", NULL, 0);
	gguf_w_add_tensor(w, "t.f32", 1, ne1, TKV_F32);
	gguf_w_add_tensor(w, "t.f16", 2, ne2, TKV_F16);
	gguf_w_add_tensor(w, "t.q8_0", 2, ne3, TKV_Q8_0);
	gguf_w_add_tensor(w, "t.q4_k", 1, ne4, TKV_Q4_K);
	gguf_w_add_tensor(w, "t.i8", 4, ne5, TKV_I8);
	assert_int_equal(gguf_w_start_mem(w), TKV_OK);
	for (i = 0; i < 5; i++)
		total += gguf_w_tensor_nbytes(w, i);
	/* stream the data in odd-sized chunks that span tensors */
	for (i = 0, k = 0; k < total;) {
		uint64_t c = 0;

		while (c < sizeof chunk && k < total) {
			uint64_t ti = 0, before = 0;

			while (k - before >= gguf_w_tensor_nbytes(w, ti))
				before += gguf_w_tensor_nbytes(w, ti++);
			chunk[c++] = (uint8_t)(ti * 37 + (k - before));
			k++;
		}
		assert_int_equal(gguf_w_write(w, chunk, c), TKV_OK);
		i++;
	}
	assert_int_equal(gguf_w_finish(w), TKV_OK);
	assert_int_equal(gguf_w_error(w)->status, TKV_OK);
	mem = gguf_w_mem(w, &n);
	assert_non_null(mem);
	assert_int_equal(n % (align ? align : 32), 0);
	out = malloc(n);
	assert_non_null(out);
	memcpy(out, mem, n);
	gguf_w_free(w);
	*len = n;
	return out;
}

static void check_all_types(const uint8_t *buf, size_t len, uint32_t version, uint32_t align)
{
	struct tkv_alloc a = {0};
	struct tkv_error err = {0};
	struct gguf_file *f;
	const struct gguf_kv *kv;
	struct gguf_str s;
	uint32_t u32;
	uint64_t u64, i, k;
	int32_t i32;
	float f32;
	bool b;

	assert_int_equal(gguf_open_buffer(&f, buf, len, "rt.gguf", &a, &err), TKV_OK);
	assert_int_equal(gguf_version(f), version);
	assert_int_equal(gguf_alignment(f), align ? align : 32);
	assert_int_equal(gguf_n_kv(f), 30 + (align ? 1 : 0));

	kv = gguf_find(f, "t.u8");
	assert_int_equal(kv->type, GGUF_TYPE_UINT8);
	assert_int_equal(kv->v.u64, 200);
	kv = gguf_find(f, "t.i8");
	assert_int_equal(kv->type, GGUF_TYPE_INT8);
	assert_int_equal(kv->v.i64, -100);
	assert_int_equal(gguf_find(f, "t.u16")->v.u64, 60000);
	assert_int_equal(gguf_find(f, "t.i16")->v.i64, -30000);
	assert_int_equal(gguf_find(f, "t.u32")->v.u64, 4000000000u);
	assert_int_equal(gguf_find(f, "t.i32")->v.i64, -2000000000);
	assert_true(gguf_find(f, "t.f32")->v.f64 == 0.15625);
	assert_int_equal(gguf_find(f, "t.bool")->v.u64, 1);
	assert_int_equal(gguf_find(f, "t.bool0")->v.u64, 0);
	assert_true(gguf_find(f, "t.u64")->v.u64 == 0xfedcba9876543210ull);
	assert_true(gguf_find(f, "t.i64")->v.i64 == -0x123456789abcdefll);
	assert_true(gguf_find(f, "t.f64")->v.f64 == -1.0 / 3.0);
	assert_true(gguf_str_eq(gguf_find(f, "t.str")->v.str, "llama"));
	assert_int_equal(gguf_find(f, "t.str_empty")->v.str.len, 0);
	kv = gguf_find(f, "t.strn");
	assert_int_equal(kv->v.str.len, 3);
	assert_memory_equal(kv->v.str.ptr, "x\0y", 3);
	assert_true(kv->offset > 24 && kv->offset < len);

	/* typed getters: widening and range checks */
	assert_int_equal(gguf_get_u32(f, "t.u8", &u32, &err), TKV_OK);
	assert_int_equal(u32, 200);
	assert_int_equal(gguf_get_u32(f, "t.u32", &u32, &err), TKV_OK);
	assert_int_equal(u32, 4000000000u);
	assert_int_equal(gguf_get_u32(f, "t.i8", &u32, &err), TKV_ERR_FORMAT);
	assert_non_null(strstr(err.msg, "t.i8"));
	assert_int_equal(gguf_get_u32(f, "t.u64", &u32, &err), TKV_ERR_FORMAT);
	assert_int_equal(gguf_get_u64(f, "t.u64", &u64, &err), TKV_OK);
	assert_true(u64 == 0xfedcba9876543210ull);
	assert_int_equal(gguf_get_u64(f, "t.i64", &u64, &err), TKV_ERR_FORMAT);
	assert_int_equal(gguf_get_i32(f, "t.i32", &i32, &err), TKV_OK);
	assert_int_equal(i32, -2000000000);
	assert_int_equal(gguf_get_i32(f, "t.u16", &i32, &err), TKV_OK);
	assert_int_equal(i32, 60000);
	assert_int_equal(gguf_get_i32(f, "t.u32", &i32, &err), TKV_ERR_FORMAT);
	assert_int_equal(gguf_get_i32(f, "t.f32", &i32, &err), TKV_ERR_FORMAT);
	assert_int_equal(gguf_get_f32(f, "t.f32", &f32, &err), TKV_OK);
	assert_true(f32 == 0.15625f);
	assert_int_equal(gguf_get_f32(f, "t.i16", &f32, &err), TKV_OK);
	assert_true(f32 == -30000.0f);
	assert_int_equal(gguf_get_f32(f, "a.f64", &f32, &err), TKV_ERR_FORMAT);
	assert_int_equal(gguf_get_f32(f, "t.str", &f32, &err), TKV_ERR_FORMAT);
	assert_int_equal(gguf_get_bool(f, "t.bool", &b, &err), TKV_OK);
	assert_true(b);
	assert_int_equal(gguf_get_bool(f, "t.bool0", &b, &err), TKV_OK);
	assert_false(b);
	assert_int_equal(gguf_get_bool(f, "t.u8", &b, &err), TKV_ERR_FORMAT);
	assert_int_equal(gguf_get_str(f, "t.str", &s, &err), TKV_OK);
	assert_true(gguf_str_eq(s, "llama"));
	assert_int_equal(gguf_get_str(f, "t.u8", &s, &err), TKV_ERR_FORMAT);

	/* arrays */
	assert_int_equal(gguf_get_arr(f, "a.u8", GGUF_TYPE_UINT8, &kv, &err), TKV_OK);
	assert_int_equal(kv->v.arr.n, 3);
	assert_int_equal(gguf_arr_i64(kv, 2), 255);
	assert_int_equal(gguf_get_arr(f, "a.i8", GGUF_TYPE_COUNT, &kv, &err), TKV_OK);
	assert_int_equal(gguf_arr_i64(kv, 0), -128);
	assert_int_equal(gguf_arr_i64(kv, 2), 127);
	assert_int_equal(gguf_get_arr(f, "a.u16", GGUF_TYPE_UINT16, &kv, &err), TKV_OK);
	assert_int_equal(gguf_arr_i64(kv, 1), 65535);
	assert_int_equal(gguf_get_arr(f, "a.i16", GGUF_TYPE_INT16, &kv, &err), TKV_OK);
	assert_int_equal(gguf_arr_i64(kv, 0), -32768);
	assert_int_equal(gguf_get_arr(f, "a.u32", GGUF_TYPE_UINT32, &kv, &err), TKV_OK);
	assert_int_equal(gguf_arr_i64(kv, 2), 0xffffffffll);
	assert_int_equal(gguf_get_arr(f, "a.i32", GGUF_TYPE_INT32, &kv, &err), TKV_OK);
	assert_int_equal(gguf_arr_i64(kv, 0), INT32_MIN);
	assert_int_equal(gguf_arr_i64(kv, 1), -1);
	assert_true(gguf_arr_f64(kv, 2) == INT32_MAX);
	assert_int_equal(gguf_get_arr(f, "a.f32", GGUF_TYPE_FLOAT32, &kv, &err), TKV_OK);
	assert_true(gguf_arr_f64(kv, 0) == 0.5 && gguf_arr_f64(kv, 1) == -1.25);
	assert_true((float)gguf_arr_f64(kv, 2) == 3.0e38f);
	assert_int_equal(gguf_get_arr(f, "a.bool", GGUF_TYPE_BOOL, &kv, &err), TKV_OK);
	assert_int_equal(gguf_arr_i64(kv, 0) + gguf_arr_i64(kv, 1) * 2 + gguf_arr_i64(kv, 3) * 4, 5);
	assert_int_equal(gguf_get_arr(f, "a.u64", GGUF_TYPE_UINT64, &kv, &err), TKV_OK);
	assert_true((uint64_t)gguf_arr_i64(kv, 0) == UINT64_MAX);
	assert_int_equal(gguf_get_arr(f, "a.i64", GGUF_TYPE_INT64, &kv, &err), TKV_OK);
	assert_true(gguf_arr_i64(kv, 0) == INT64_MIN && gguf_arr_i64(kv, 1) == INT64_MAX);
	assert_int_equal(gguf_get_arr(f, "a.f64", GGUF_TYPE_FLOAT64, &kv, &err), TKV_OK);
	assert_true(gguf_arr_f64(kv, 0) == 1e300 && gguf_arr_f64(kv, 1) == -2.5);
	assert_int_equal(gguf_get_arr(f, "a.empty", GGUF_TYPE_INT32, &kv, &err), TKV_OK);
	assert_int_equal(kv->v.arr.n, 0);
	assert_int_equal(gguf_get_arr(f, "a.str", GGUF_TYPE_STRING, &kv, &err), TKV_OK);
	assert_int_equal(kv->v.arr.n, 4);
	assert_true(gguf_str_eq(kv->v.arr.strs[0], "hello"));
	assert_true(gguf_str_eq(kv->v.arr.strs[1], ""));
	assert_true(gguf_str_eq(kv->v.arr.strs[2], "w\xc3\xb6rld"));
	assert_true(gguf_str_eq(kv->v.arr.strs[3], "<0x0A>"));
	assert_int_equal(gguf_get_arr(f, "a.strn", GGUF_TYPE_STRING, &kv, &err), TKV_OK);
	assert_int_equal(kv->v.arr.strs[0].len, 3);
	assert_memory_equal(kv->v.arr.strs[0].ptr, "a\0b", 3);
	assert_int_equal(kv->v.arr.strs[1].len, 0);
	assert_int_equal(gguf_get_arr(f, "a.str_empty", GGUF_TYPE_STRING, &kv, &err), TKV_OK);
	assert_int_equal(kv->v.arr.n, 0);
	assert_int_equal(gguf_get_arr(f, "t.u8", GGUF_TYPE_COUNT, &kv, &err), TKV_ERR_FORMAT);
	assert_int_equal(gguf_get_arr(f, "a.u8", GGUF_TYPE_INT8, &kv, &err), TKV_ERR_FORMAT);
	assert_non_null(strstr(err.msg, "array of uint8"));

	/* tensors */
	{
		static const char *const names[] = {"t.f32", "t.f16", "t.q8_0", "t.q4_k", "t.i8"};
		static const uint32_t types[] = {TKV_F32, TKV_F16, TKV_Q8_0, TKV_Q4_K, TKV_I8};
		static const uint64_t nbytes[] = {12, 16, 4 * 34, 144, 10};

		assert_int_equal(gguf_n_tensors(f), 5);
		for (i = 0; i < 5; i++) {
			const struct gguf_tensor *t = gguf_tensor_at(f, i);
			const uint8_t *d = t->data;

			assert_ptr_equal(gguf_find_tensor(f, names[i]), t);
			assert_int_equal(t->type, types[i]);
			assert_int_equal(t->nbytes, nbytes[i]);
			assert_int_equal(t->offset % gguf_alignment(f), 0);
			assert_int_equal((gguf_data_offset(f) + t->offset) % gguf_alignment(f), 0);
			for (k = 0; k < t->nbytes; k++)
				assert_int_equal(d[k], (uint8_t)(i * 37 + k));
		}
		assert_int_equal(gguf_tensor_at(f, 1)->n_dims, 2);
		assert_int_equal(gguf_tensor_at(f, 1)->ne[1], 2);
		assert_int_equal(gguf_tensor_at(f, 1)->ne[2], 1);
		assert_int_equal(gguf_tensor_at(f, 4)->n_dims, 4);
		assert_int_equal(gguf_tensor_at(f, 4)->ne[3], 2);
	}
	gguf_close(f);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* Every metadata type written as GGUF version v with alignment `align` (0:
 * the default) and read back. */
struct roundtrip_case {
	uint32_t version, align;
};

static struct roundtrip_case ROUNDTRIPS[] = { { 3, 0 }, { 2, 64 }, { 3, 1 } };

static void test_roundtrip(void **state)
{
	const struct roundtrip_case *c = *state;
	size_t len;
	uint8_t *buf = build_all_types(c->version, c->align, &len);

	check_all_types(buf, len, c->version, c->align);
	free(buf);
}

#define ROUNDTRIP_TEST(name, k) { name, test_roundtrip, NULL, NULL, &ROUNDTRIPS[k] }

/* Writes through a FILE* and reads back with gguf_open (mmap). */
static void test_roundtrip_file(void **state)
{
	char path[] = "/tmp/test_gguf_XXXXXX";
	struct tkv_error err = {0};
	struct gguf_file *f;
	size_t len, flen;
	uint8_t *buf = build_all_types(3, 0, &len), *fbuf;
	struct gguf_w *w;
	const uint64_t ne[] = {4, 3};
	float data[12];
	int fd, i;
	FILE *fp;

	(void)state;
	for (i = 0; i < 12; i++)
		data[i] = (float)i * 0.5f;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	fp = fdopen(fd, "wb");
	assert_non_null(fp);
	assert_int_equal(gguf_w_init(&w, NULL), TKV_OK);
	gguf_w_add_str(w, "general.architecture", "llama");
	gguf_w_add_tensor(w, "w", 2, ne, TKV_F32);
	assert_int_equal(gguf_w_start_file(w, fp), TKV_OK);
	assert_null(gguf_w_mem(w, NULL));
	assert_int_equal(gguf_w_write(w, data, 20), TKV_OK);
	assert_int_equal(gguf_w_finish(w), TKV_ERR_ARG); /* 20 of 48 bytes */
	assert_non_null(strstr(gguf_w_error(w)->msg, "20 of 48"));
	gguf_w_free(w);
	fclose(fp);

	fp = fopen(path, "wb");
	assert_non_null(fp);
	assert_int_equal(gguf_w_init(&w, NULL), TKV_OK);
	gguf_w_add_str(w, "general.architecture", "llama");
	gguf_w_add_tensor(w, "w", 2, ne, TKV_F32);
	assert_int_equal(gguf_w_start_file(w, fp), TKV_OK);
	assert_int_equal(gguf_w_write(w, data, sizeof data), TKV_OK);
	assert_int_equal(gguf_w_write(w, data, 1), TKV_ERR_ARG); /* past the last tensor */
	gguf_w_free(w);
	fclose(fp);

	fp = fopen(path, "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(buf, 1, len, fp), len);
	fclose(fp);
	assert_int_equal(gguf_open(&f, path, NULL, &err), TKV_OK);
	assert_int_equal(gguf_size(f), len);
	gguf_close(f);
	check_all_types(buf, len, 3, 0);
	fbuf = (uint8_t *)tu_read_file(path, &flen);
	assert_int_equal(flen, len);
	free(fbuf);

	/* empty file: a format error, not an mmap failure */
	fp = fopen(path, "wb");
	fclose(fp);
	assert_int_equal(gguf_open(&f, path, NULL, &err), TKV_ERR_FORMAT);
	assert_null(f);
	assert_non_null(strstr(err.msg, path));
	unlink(path);
	assert_int_equal(gguf_open(&f, path, NULL, &err), TKV_ERR_IO);
	assert_non_null(strstr(err.msg, "cannot open"));
	assert_int_equal(gguf_open(&f, "/tmp", NULL, &err), TKV_ERR_IO);
	assert_non_null(strstr(err.msg, "not a regular file"));
	free(buf);
}

/* The writer rejects what would make an invalid file, and errors are sticky. */
static void test_writer_errors(void **state)
{
	const uint64_t ne[] = {33, 2}, ne0[] = {0}, ne1[] = {32};
	const uint8_t bad_bool[] = {0, 2};
	struct gguf_w *w;

	(void)state;
	assert_int_equal(gguf_w_init(&w, NULL), TKV_OK);
	assert_int_equal(gguf_w_add_u32(w, "general.alignment", 48), TKV_ERR_ARG);
	gguf_w_free(w);
	assert_int_equal(gguf_w_init(&w, NULL), TKV_OK);
	assert_int_equal(gguf_w_add_u32(w, "k", 1), TKV_OK);
	assert_int_equal(gguf_w_add_u8(w, "k", 1), TKV_ERR_ARG);
	assert_non_null(strstr(gguf_w_error(w)->msg, "duplicate key 'k'"));
	assert_int_equal(gguf_w_add_u8(w, "k2", 1), TKV_ERR_ARG); /* sticky */
	gguf_w_free(w);

#define FRESH_FAILS(call)                                         \
	do {                                                      \
		assert_int_equal(gguf_w_init(&w, NULL), TKV_OK);  \
		assert_int_equal(call, TKV_ERR_ARG);              \
		assert_true(gguf_w_error(w)->msg[0] != 0);        \
		gguf_w_free(w);                                   \
	} while (0)
	FRESH_FAILS(gguf_w_add_u8(w, "", 1));
	FRESH_FAILS(gguf_w_add_arr(w, "a", GGUF_TYPE_ARRAY, ne, 1));
	FRESH_FAILS(gguf_w_add_arr(w, "a", GGUF_TYPE_STRING, ne, 1));
	FRESH_FAILS(gguf_w_add_arr(w, "a", GGUF_TYPE_BOOL, bad_bool, 2));
	FRESH_FAILS(gguf_w_add_tensor(w, "t", 2, ne, TKV_Q8_0));
	FRESH_FAILS(gguf_w_add_tensor(w, "t", 1, ne0, TKV_F32));
	FRESH_FAILS(gguf_w_add_tensor(w, "t", 0, ne1, TKV_F32));
	FRESH_FAILS(gguf_w_add_tensor(w, "t", 5, ne1, TKV_F32));
	FRESH_FAILS(gguf_w_add_tensor(w, "t", 1, ne1, 4));
	FRESH_FAILS(gguf_w_set_version(w, 1));
	FRESH_FAILS(gguf_w_write(w, ne, 1));
	FRESH_FAILS(gguf_w_finish(w));
#undef FRESH_FAILS
	assert_int_equal(gguf_w_init(&w, NULL), TKV_OK);
	assert_int_equal(gguf_w_add_tensor(w, "t", 1, ne1, TKV_F32), TKV_OK);
	assert_int_equal(gguf_w_add_tensor(w, "t", 1, ne1, TKV_F32), TKV_ERR_ARG);
	gguf_w_free(w);
	assert_int_equal(gguf_w_init(&w, NULL), TKV_OK);
	assert_int_equal(gguf_w_start_mem(w), TKV_OK);
	assert_int_equal(gguf_w_add_u8(w, "late", 1), TKV_ERR_ARG);
	gguf_w_free(w);
	gguf_w_free(NULL);
}

/* ---- truncation ----------------------------------------------------------- */

/* End of the last tensor's data: cutting anywhere before it must fail. */
static size_t data_end(const uint8_t *buf, size_t len)
{
	struct gguf_file *f;
	size_t end, i;

	assert_int_equal(gguf_open_buffer(&f, buf, len, "x", NULL, NULL), TKV_OK);
	end = (size_t)gguf_data_offset(f);
	for (i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		size_t e = (size_t)(gguf_data_offset(f) + t->offset + t->nbytes);
		if (e > end)
			end = e;
	}
	gguf_close(f);
	return end;
}

static void test_truncate_synthetic(void **state)
{
	size_t len, end, cut;
	uint8_t *buf = build_all_types(3, 0, &len);

	(void)state;
	end = data_end(buf, len);
	for (cut = 0; cut < end; cut++) {
		struct tkv_error err = {0};
		int rc = open_copy(buf, cut, &err);

		if (rc != TKV_ERR_FORMAT)
			print_error("cut at %zu: %d %s\n", cut, rc, err.msg);
		assert_int_equal(rc, TKV_ERR_FORMAT);
		assert_non_null(strstr(err.msg, "test.gguf: "));
	}
	assert_int_equal(open_copy(buf, len, NULL), TKV_OK);
	free(buf);
}

static void test_truncate_stories(void **state)
{
	size_t len, end, meta_end, cut;
	uint8_t *buf = (uint8_t *)tu_read_file(tu_model_path("stories260K.gguf"), &len);
	struct gguf_file *f;
	uint64_t i;

	(void)state;
	assert_non_null(buf);
	end = data_end(buf, len);
	assert_int_equal(gguf_open_buffer(&f, buf, len, "x", NULL, NULL), TKV_OK);
	meta_end = (size_t)gguf_data_offset(f);
	/* every byte of the header, kvs, tensor infos and padding */
	for (cut = 0; cut <= meta_end; cut++)
		assert_int_equal(open_copy(buf, cut, NULL), TKV_ERR_FORMAT);
	/* each tensor's first and last byte and its middle; the kv boundaries */
	for (i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		size_t s = (size_t)(gguf_data_offset(f) + t->offset);

		assert_int_equal(open_copy(buf, s, NULL), TKV_ERR_FORMAT);
		assert_int_equal(open_copy(buf, s + 1, NULL), TKV_ERR_FORMAT);
		assert_int_equal(open_copy(buf, s + t->nbytes / 2, NULL), TKV_ERR_FORMAT);
		assert_int_equal(open_copy(buf, s + t->nbytes - 1, NULL), TKV_ERR_FORMAT);
	}
	for (i = 0; i < gguf_n_kv(f); i++) {
		size_t o = (size_t)gguf_kv_at(f, i)->offset;
		assert_int_equal(open_copy(buf, o, NULL), TKV_ERR_FORMAT);
		assert_int_equal(open_copy(buf, o + 1, NULL), TKV_ERR_FORMAT);
	}
	assert_int_equal(open_copy(buf, end - 1, NULL), TKV_ERR_FORMAT);
	assert_int_equal(open_copy(buf, end, NULL), TKV_OK);
	gguf_close(f);
	free(buf);
}

/* ---- malformed headers, kvs and tensor infos ------------------------------ */

static void test_bad_header(void **state)
{
	struct tu_buf b = {0};
	uint8_t be[24];

	(void)state;
	expect_fail("", 0, TKV_ERR_FORMAT, "too small", NULL);
	expect_fail("GGU", 3, TKV_ERR_FORMAT, "too small", NULL);
	expect_fail("GGML\3\0\0\0", 8, TKV_ERR_FORMAT, "not a GGUF file", "0x0");
	expect_fail("GGUF\3\0\0", 7, TKV_ERR_FORMAT, "truncated", "version");
	tb_header(&b, 1, 0, 0);
	expect_fail(b.p, b.len, TKV_ERR_UNSUPPORTED, "version 1", "only versions 2 and 3");
	b.len = 0;
	tb_header(&b, 4, 0, 0);
	expect_fail(b.p, b.len, TKV_ERR_UNSUPPORTED, "version 4", NULL);
	b.len = 0;
	tb_header(&b, 0, 0, 0);
	expect_fail(b.p, b.len, TKV_ERR_UNSUPPORTED, "version 0", NULL);
	memcpy(be, "GGUF\0\0\0\3", 8);
	memset(be + 8, 0, 16);
	expect_fail(be, 24, TKV_ERR_UNSUPPORTED, "big-endian", NULL);
	b.len = 0;
	tb_header(&b, 3, 0, 0);
	assert_int_equal(open_copy(b.p, b.len - 1, NULL), TKV_ERR_FORMAT);
	assert_int_equal(open_copy(b.p, b.len, NULL), TKV_OK); /* empty but valid */
	{
		struct gguf_file *f;

		assert_int_equal(gguf_open_buffer(&f, b.p, b.len, "e", NULL, NULL), TKV_OK);
		assert_int_equal(gguf_n_kv(f), 0);
		assert_int_equal(gguf_data_offset(f), 24); /* no padding needed */
		assert_null(gguf_find(f, "general.alignment"));
		assert_null(gguf_find_tensor(f, "x"));
		gguf_close(f);
	}
	b.len = 0;
	tb_header(&b, 2, 0, 0);
	assert_int_equal(open_copy(b.p, b.len, NULL), TKV_OK);
	free(b.p);
}

static void test_bad_counts(void **state)
{
	static const uint64_t huge[] = {UINT64_MAX, UINT64_MAX / 13 + 1, 1ull << 60, 1ull << 32, 100};
	struct tu_buf b = {0};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof huge / sizeof huge[0]; i++) {
		b.len = 0;
		tb_header(&b, 3, 0, huge[i]);
		tb_kv_u32(&b, "k", 1);
		expect_fail(b.p, b.len, TKV_ERR_FORMAT, "cannot fit", "kvs");
		b.len = 0;
		tb_header(&b, 3, huge[i], 1);
		tb_kv_u32(&b, "k", 1);
		expect_fail(b.p, b.len, TKV_ERR_FORMAT, "cannot fit", "tensors");
	}
	/* each count fits alone but not both together */
	b.len = 0;
	tb_header(&b, 3, 1, 2);
	tb_zeros(&b, 40);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "cannot fit", NULL);
	/* n_kv claims one more than present */
	b.len = 0;
	tb_header(&b, 3, 0, 2);
	tb_kv_u32(&b, "k", 1);
	tb_zeros(&b, 14);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "kv #1", "empty key");
	free(b.p);
}

static void test_bad_strings(void **state)
{
	static const uint64_t lens[] = {UINT64_MAX, UINT64_MAX - 7, 1ull << 63, 1000};
	struct tu_buf b = {0};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		/* key length */
		b.len = 0;
		tb_header(&b, 3, 0, 1);
		tu_put_u64(&b, lens[i]);
		tu_put(&b, "key", 3);
		tu_put_u32(&b, GGUF_TYPE_UINT8);
		tu_put_u8(&b, 1);
		expect_fail(b.p, b.len, TKV_ERR_FORMAT, "key at 0x18", "exceeds");
		/* string value length */
		tb_restart_kv(&b, "key", GGUF_TYPE_STRING);
		tu_put_u64(&b, lens[i]);
		tu_put(&b, "value", 5);
		expect_fail(b.p, b.len, TKV_ERR_FORMAT, "kv #0 'key' at 0x18", "string value");
		/* tensor name length */
		b.len = 0;
		tb_header(&b, 3, 1, 0);
		tu_put_u64(&b, lens[i]);
		tb_zeros(&b, 40);
		expect_fail(b.p, b.len, TKV_ERR_FORMAT, "tensor #0", "name");
	}
	b.len = 0;
	tb_header(&b, 3, 0, 1);
	tb_kv_u32(&b, "", 1);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "empty key", NULL);
	free(b.p);
}

static void test_bad_arrays(void **state)
{
	static const struct {
		uint32_t type;
		uint64_t n;
	} cases[] = {
		{GGUF_TYPE_UINT8, UINT64_MAX},
		{GGUF_TYPE_UINT32, 1ull << 62},       /* n * 4 wraps to 0 */
		{GGUF_TYPE_UINT64, (1ull << 61) + 1}, /* n * 8 wraps to 8 */
		{GGUF_TYPE_FLOAT32, 5},               /* 4 bytes present */
		{GGUF_TYPE_STRING, UINT64_MAX / 8 + 1},
		{GGUF_TYPE_STRING, 1ull << 40},
		{GGUF_TYPE_STRING, 2},
	};
	struct tu_buf b = {0};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		tb_restart_array(&b, cases[i].type, cases[i].n);
		tb_zeros(&b, 8);
		expect_fail(b.p, b.len, TKV_ERR_FORMAT, "kv #0 'arr'", "array of");
	}
	/* a string array whose second element runs past the end */
	tb_restart_array(&b, GGUF_TYPE_STRING, 2);
	tu_put_str(&b, "ok");
	tu_put_u64(&b, 100);
	tu_put(&b, "short", 5);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "string element 1", "exceeds");
	/* arrays of arrays, unknown element types */
	tb_restart_array(&b, GGUF_TYPE_ARRAY, 1);
	tu_put_u32(&b, GGUF_TYPE_UINT8);
	tu_put_u64(&b, 1);
	tu_put_u8(&b, 0);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "array of arrays", NULL);
	b.p[b.len - 21 - 4] = 13;
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "unknown array element type 13", NULL);
	/* bool array element 2 */
	tb_restart_array(&b, GGUF_TYPE_BOOL, 3);
	tu_put_u8(&b, 1);
	tu_put_u8(&b, 0);
	tu_put_u8(&b, 2);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "bool element 2", "not 0 or 1");
	free(b.p);
}

static void test_bad_values(void **state)
{
	static const uint32_t types[] = {13, 255, 0xffffffffu};
	struct tu_buf b = {0};
	size_t i;

	(void)state;
	for (i = 0; i < 3; i++) {
		tb_restart_kv(&b, "k", types[i]);
		tu_put_u64(&b, 0);
		expect_fail(b.p, b.len, TKV_ERR_FORMAT, "unknown value type", "at 0x21");
	}
	tb_restart_kv(&b, "k", GGUF_TYPE_BOOL);
	tu_put_u8(&b, 2);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "bool value 2", "0x25");
	/* each scalar cut short */
	for (i = 0; i < GGUF_TYPE_COUNT; i++) {
		if (i == GGUF_TYPE_STRING || i == GGUF_TYPE_ARRAY || i == GGUF_TYPE_UINT8 ||
		    i == GGUF_TYPE_INT8 || i == GGUF_TYPE_BOOL)
			continue;
		tb_restart_kv(&b, "k", (uint32_t)i);
		tu_put_u8(&b, 0);
		expect_fail(b.p, b.len, TKV_ERR_FORMAT, "truncated", "value");
	}
	/* duplicate keys */
	b.len = 0;
	tb_header(&b, 3, 0, 3);
	tb_kv_u32(&b, "a", 1);
	tb_kv_u32(&b, "b", 1);
	tb_kv_str(&b, "a", "x");
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "duplicate key", "kv #2 'a'");
	free(b.p);
}

static void test_bad_alignment(void **state)
{
	static const uint32_t bad[] = {0, 3, 48, 0x80000001u, 0xffffffffu};
	struct tu_buf b = {0};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		b.len = 0;
		tb_header(&b, 3, 0, 1);
		tb_kv_u32(&b, "general.alignment", bad[i]);
		expect_fail(b.p, b.len, TKV_ERR_FORMAT, "general.alignment", "not a power of two");
	}
	tb_restart_kv(&b, "general.alignment", GGUF_TYPE_UINT64);
	tu_put_u64(&b, 32);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "general.alignment", "expected uint32");
	/* a large valid alignment: the data section starts at 0x10000 */
	b.len = 0;
	{
		const uint64_t ne[] = {4};

		size_t off_at;

		tb_header(&b, 3, 1, 1);
		tb_kv_u32(&b, "general.alignment", 65536);
		tb_tinfo(&b, "t", 1, ne, TKV_F32, 0);
		off_at = b.len - 8;
		tb_align(&b, 65536);
		tb_zeros(&b, 16);
		assert_int_equal(open_copy(b.p, b.len, NULL), TKV_OK);
		assert_int_equal(open_copy(b.p, b.len - 1, NULL), TKV_ERR_FORMAT);
		/* offset 32 is not a multiple of 65536 */
		b.p[off_at] = 32;
	}
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "not a multiple of the alignment 65536", "tensor 't'");
	free(b.p);
}

/* A file of one tensor (no metadata, 64 zero bytes of data) that must be
 * refused as malformed, with frag1 (and frag2) in the message. */
static void expect_bad_tensor(struct tu_buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
			      const char *frag1, const char *frag2)
{
	b->len = 0;
	tb_header(b, 3, 1, 0);
	tb_tinfo(b, name, n_dims, ne, type, 0);
	tb_zeros(b, 64);
	expect_fail(b->p, b->len, TKV_ERR_FORMAT, frag1, frag2);
}

static void test_bad_tensors(void **state)
{
	const uint64_t ne8[] = {8}, ne0[] = {0}, ne_big[] = {1ull << 32, 1ull << 32},
		       ne_i64[] = {1ull << 63}, ne33[] = {33}, ne4[] = {1, 1, 1, 1, 1};
	struct tu_buf b = {0};

	(void)state;
	/* valid baseline */
	tb_two_tensors(&b, 0, 32, 64);
	assert_int_equal(open_copy(b.p, b.len, NULL), TKV_OK);
	/* overlapping: b at 0 as well, then b starting inside a */
	b.len = 0;
	tb_two_tensors(&b, 0, 0, 64);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "overlaps", "tensor 'a' (#0)");
	b.len = 0;
	{
		const uint64_t ne16[] = {16};

		tb_header(&b, 3, 2, 0);
		tb_tinfo(&b, "big", 1, ne16, TKV_F32, 0);
		tb_tinfo(&b, "small", 1, ne8, TKV_F32, 32);
		tb_align(&b, 32);
		tb_zeros(&b, 64);
		expect_fail(b.p, b.len, TKV_ERR_FORMAT, "tensor 'small' (#1): data [", "overlaps tensor 'big'");
	}
	/* out of range: data past end, offset past end, offset near 2^64 */
	b.len = 0;
	tb_two_tensors(&b, 0, 32, 63);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "tensor 'b' (#1): data [0x", "past end of file (size 0x");
	b.len = 0;
	tb_two_tensors(&b, 0, 4096, 64);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "tensor 'b' (#1)", "past end of file");
	b.len = 0;
	tb_two_tensors(&b, 0, UINT64_MAX - 31, 64);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "tensor 'b' (#1)", "past end of file");
	/* misaligned */
	b.len = 0;
	tb_two_tensors(&b, 0, 36, 96);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "offset 0x24", "not a multiple of the alignment 32");
	/* duplicate name */
	b.len = 0;
	tb_header(&b, 3, 2, 0);
	tb_tinfo(&b, "w", 1, ne8, TKV_F32, 0);
	tb_tinfo(&b, "w", 1, ne8, TKV_F32, 32);
	tb_align(&b, 32);
	tb_zeros(&b, 64);
	expect_fail(b.p, b.len, TKV_ERR_FORMAT, "tensor 'w' (#1)", "duplicate name");
	/* n_dims 0 and 5 */
	expect_bad_tensor(&b, "w", 0, ne8, TKV_F32, "n_dims 0", "tensor 'w' (#0)");
	expect_bad_tensor(&b, "w", 5, ne4, TKV_F32, "n_dims 5", NULL);
	/* ne = 0, element count overflow, ne > INT64_MAX */
	expect_bad_tensor(&b, "w", 1, ne0, TKV_F32, "ne[0] = 0", NULL);
	expect_bad_tensor(&b, "w", 2, ne_big, TKV_F32, "overflows", "ne[1]");
	expect_bad_tensor(&b, "w", 1, ne_i64, TKV_F32, "out of range", NULL);
	/* huge but in-range element count: the extent check catches it */
	{
		const uint64_t ne[] = {1ull << 31, 1ull << 31};

		expect_bad_tensor(&b, "w", 2, ne, TKV_Q4_K, "past end of file", NULL);
	}
	/* unknown type, block multiple */
	expect_bad_tensor(&b, "w", 1, ne8, 4, "unknown tensor type 4", NULL);
	expect_bad_tensor(&b, "w", 1, ne8, 1000, "unknown tensor type 1000", NULL);
	expect_bad_tensor(&b, "w", 1, ne33, TKV_Q8_0, "not a multiple of the q8_0 block size 32", NULL);
	/* empty tensor name; names with odd bytes are quoted safely */
	expect_bad_tensor(&b, "", 1, ne8, TKV_F32, "empty name", NULL);
	expect_bad_tensor(&b, "bad\n\x01name", 1, ne0, TKV_F32, "tensor 'bad??name'", NULL);
	free(b.p);
}

/* ---- allocation failure ------------------------------------------------- */

static void test_alloc_failures_open(void **state)
{
	const char *path = tu_model_path("stories260K.gguf");
	unsigned long long n;
	int rc = TKV_ERR_NOMEM;

	(void)state;
	for (n = 1; n < 1000 && rc != TKV_OK; n++) {
		struct tkv_alloc a = {0};
		struct tkv_error err = {0};
		struct gguf_file *f;

		a.fail_at = n;
		rc = gguf_open(&f, path, &a, &err);
		if (rc == TKV_OK) {
			assert_int_equal(gguf_n_tensors(f), 48);
			gguf_close(f);
		} else {
			tu_expect_nomem(rc, f, &err, "out of memory");
		}
		assert_int_equal(atomic_load(&a.live), 0);
	}
	assert_int_equal(rc, TKV_OK);
	assert_true(n > 4); /* handle, name, kvs, strings, tensors, indexes */
}

static void test_alloc_failures_writer(void **state)
{
	unsigned long long n;
	int rc = TKV_ERR_NOMEM;

	(void)state;
	for (n = 1; n < 1000 && rc != TKV_OK; n++) {
		static const char *const strs[] = {"a", "b", "c"};
		const uint64_t ne[] = {8};
		struct tkv_alloc a = {0};
		struct gguf_w *w;
		float data[8] = {0};
		char key[32];
		int i;

		a.fail_at = n;
		rc = gguf_w_init(&w, &a);
		if (rc == TKV_OK) {
			for (i = 0; i < 40; i++) {
				snprintf(key, sizeof key, "k%d", i);
				gguf_w_add_u32(w, key, (uint32_t)i);
			}
			gguf_w_add_arr_str(w, "s", strs, 3);
			gguf_w_add_tensor(w, "t", 1, ne, TKV_F32);
			gguf_w_start_mem(w);
			gguf_w_write(w, data, sizeof data);
			rc = gguf_w_finish(w);
			assert_true(rc == TKV_OK || rc == TKV_ERR_NOMEM);
			if (rc == TKV_OK) {
				size_t len;
				const void *mem = gguf_w_mem(w, &len);

				assert_int_equal(open_copy(mem, len, NULL), TKV_OK);
			}
			gguf_w_free(w);
		} else {
			assert_int_equal(rc, TKV_ERR_NOMEM);
		}
		assert_int_equal(atomic_load(&a.live), 0);
	}
	assert_int_equal(rc, TKV_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stories260k),
		cmocka_unit_test(test_vocab_files),
		ROUNDTRIP_TEST("test_roundtrip_v3", 0),
		ROUNDTRIP_TEST("test_roundtrip_v2_align64", 1),
		ROUNDTRIP_TEST("test_roundtrip_v3_align1", 2),
		cmocka_unit_test(test_roundtrip_file),
		cmocka_unit_test(test_writer_errors),
		cmocka_unit_test(test_truncate_synthetic),
		cmocka_unit_test(test_truncate_stories),
		cmocka_unit_test(test_bad_header),
		cmocka_unit_test(test_bad_counts),
		cmocka_unit_test(test_bad_strings),
		cmocka_unit_test(test_bad_arrays),
		cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_bad_alignment),
		cmocka_unit_test(test_bad_tensors),
		cmocka_unit_test(test_alloc_failures_open),
		cmocka_unit_test(test_alloc_failures_writer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
