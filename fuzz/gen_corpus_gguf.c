/* gen_corpus_gguf.c - writes the seed corpus of fuzz_gguf: a few small GGUF
 * files (each under 4 KB) covering every value type, string arrays, v2 and v3,
 * custom alignment and several tensor types.
 *
 * Usage: gen_corpus_gguf DIR   (normally fuzz/corpus/gguf) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf_write.h"
#include "ops/dtype.h"

/* Writes w (already filled) to DIR/name, with tensor data bytes i*7+k. */
static int emit(struct gguf_w *w, const char *dir, const char *name, uint64_t n_tensors)
{
	char path[4096];
	uint8_t buf[4096];
	const void *mem;
	uint64_t i, k;
	size_t len;
	FILE *fp;

	gguf_w_start_mem(w);
	for (i = 0; i < n_tensors; i++) {
		uint64_t n = gguf_w_tensor_nbytes(w, i);

		for (k = 0; k < n && k < sizeof buf; k++)
			buf[k] = (uint8_t)(i * 7 + k);
		gguf_w_write(w, buf, (size_t)n);
	}
	if (gguf_w_finish(w)) {
		fprintf(stderr, "%s: %s\n", name, gguf_w_error(w)->msg);
		gguf_w_free(w);
		return 1;
	}
	mem = gguf_w_mem(w, &len);
	snprintf(path, sizeof path, "%s/%s", dir, name);
	fp = fopen(path, "wb");
	if (!fp || fwrite(mem, 1, len, fp) != len || fclose(fp)) {
		perror(path);
		gguf_w_free(w);
		return 1;
	}
	printf("%s: %zu bytes\n", path, len);
	gguf_w_free(w);
	return 0;
}

static struct gguf_w *new_writer(void)
{
	struct gguf_w *w;

	if (gguf_w_init(&w, NULL)) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	return w;
}

int main(int argc, char **argv)
{
	static const uint8_t u8s[] = {0, 1, 255};
	static const int16_t i16s[] = {-32768, 0, 32767};
	static const uint32_t u32s[] = {1, 2, 0xffffffffu};
	static const int32_t i32s[] = {-1, 1, 3, 6};
	static const float f32s[] = {0.0f, -1.5f, 1e-5f, 10000.0f};
	static const double f64s[] = {1e300, -0.5};
	static const uint8_t bools[] = {1, 0, 1};
	static const uint64_t u64s[] = {0, UINT64_MAX};
	static const int64_t i64s[] = {INT64_MIN, 7};
	static const char *const toks[] = {"<unk>", "<s>", "</s>", "<0x0A>", "\xe2\x96\x81the",
					   "a", "b", "ab", ""};
	static const char *const merges[] = {"a b", "\xc4\xa0 t"};
	const uint64_t ne_emb[] = {8, 9}, ne_norm[] = {8}, ne_q8[] = {32, 2}, ne_q4k[] = {256},
		       ne_f16[] = {2, 2, 2, 2}, ne_i8[] = {3};
	const char *dir = argc > 1 ? argv[1] : "fuzz/corpus/gguf";
	struct gguf_w *w;
	int rc = 0;

	/* header only */
	w = new_writer();
	rc |= emit(w, dir, "empty_v3.gguf", 0);

	/* every scalar type, v2 */
	w = new_writer();
	gguf_w_set_version(w, 2);
	gguf_w_add_u8(w, "s.u8", 7);
	gguf_w_add_i8(w, "s.i8", -7);
	gguf_w_add_u16(w, "s.u16", 700);
	gguf_w_add_i16(w, "s.i16", -700);
	gguf_w_add_u32(w, "s.u32", 70000);
	gguf_w_add_i32(w, "s.i32", -70000);
	gguf_w_add_f32(w, "s.f32", 0.25f);
	gguf_w_add_bool(w, "s.bool", true);
	gguf_w_add_str(w, "s.str", "hello");
	gguf_w_add_u64(w, "s.u64", 1ull << 40);
	gguf_w_add_i64(w, "s.i64", -(1ll << 40));
	gguf_w_add_f64(w, "s.f64", 3.5);
	rc |= emit(w, dir, "scalars_v2.gguf", 0);

	/* every array type */
	w = new_writer();
	gguf_w_add_arr(w, "a.u8", GGUF_TYPE_UINT8, u8s, 3);
	gguf_w_add_arr(w, "a.i16", GGUF_TYPE_INT16, i16s, 3);
	gguf_w_add_arr(w, "a.u32", GGUF_TYPE_UINT32, u32s, 3);
	gguf_w_add_arr(w, "a.i32", GGUF_TYPE_INT32, i32s, 4);
	gguf_w_add_arr(w, "a.f32", GGUF_TYPE_FLOAT32, f32s, 4);
	gguf_w_add_arr(w, "a.f64", GGUF_TYPE_FLOAT64, f64s, 2);
	gguf_w_add_arr(w, "a.bool", GGUF_TYPE_BOOL, bools, 3);
	gguf_w_add_arr(w, "a.u64", GGUF_TYPE_UINT64, u64s, 2);
	gguf_w_add_arr(w, "a.i64", GGUF_TYPE_INT64, i64s, 2);
	gguf_w_add_arr(w, "a.empty", GGUF_TYPE_UINT8, NULL, 0);
	gguf_w_add_arr_str(w, "a.str", toks, 9);
	rc |= emit(w, dir, "arrays.gguf", 0);

	/* a tiny llama: vocab, hyperparameters, f32 tensors */
	w = new_writer();
	gguf_w_add_str(w, "general.architecture", "llama");
	gguf_w_add_str(w, "general.name", "tiny");
	gguf_w_add_u32(w, "llama.context_length", 16);
	gguf_w_add_u32(w, "llama.embedding_length", 8);
	gguf_w_add_u32(w, "llama.block_count", 1);
	gguf_w_add_u32(w, "llama.attention.head_count", 2);
	gguf_w_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
	gguf_w_add_str(w, "tokenizer.ggml.model", "llama");
	gguf_w_add_arr_str(w, "tokenizer.ggml.tokens", toks, 9);
	gguf_w_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, f32s, 4);
	gguf_w_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
	gguf_w_add_tensor(w, "token_embd.weight", 2, ne_emb, TKV_F32);
	gguf_w_add_tensor(w, "output_norm.weight", 1, ne_norm, TKV_F32);
	rc |= emit(w, dir, "tiny_llama.gguf", 2);

	/* quantized and odd-shaped tensors, alignment 64, a merges array */
	w = new_writer();
	gguf_w_add_u32(w, "general.alignment", 64);
	gguf_w_add_str(w, "tokenizer.ggml.model", "gpt2");
	gguf_w_add_arr_str(w, "tokenizer.ggml.merges", merges, 2);
	gguf_w_add_tensor(w, "q8", 2, ne_q8, TKV_Q8_0);
	gguf_w_add_tensor(w, "q4k", 1, ne_q4k, TKV_Q4_K);
	gguf_w_add_tensor(w, "f16", 4, ne_f16, TKV_F16);
	gguf_w_add_tensor(w, "i8", 1, ne_i8, TKV_I8);
	rc |= emit(w, dir, "quant_align64.gguf", 4);

	/* alignment 1: no padding at all */
	w = new_writer();
	gguf_w_add_u32(w, "general.alignment", 1);
	gguf_w_add_tensor(w, "a", 1, ne_i8, TKV_I8);
	gguf_w_add_tensor(w, "b", 1, ne_i8, TKV_I8);
	rc |= emit(w, dir, "align1.gguf", 2);
	return rc;
}
