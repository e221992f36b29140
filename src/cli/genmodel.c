/* genmodel.c - `tierkv gen-model`: llama GGUF files with random weights of
 * real shapes, for benchmarks (ours and llama.cpp's, on the same file).
 *
 * The tokenizer comes from a vocabulary GGUF (every tokenizer.* key is
 * copied). Weights are N(0, 0.02)-like (sum of four uniforms), which keeps
 * activations in a sane range through the layers; norm weights are f32 near
 * 1. Every 2-D tensor gets --type unless its rows are not a multiple of that
 * type's block (stories15m's 288 with the 256-blocks of the k-quants): those
 * fall back to q8_0. Data is generated in row chunks by all threads and
 * streamed to the file, so a 7B model needs only a few MB of memory. Rows are
 * seeded from (seed, tensor, row): the same seed gives the same file whatever
 * the thread count. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
/* writing GGUF files and quantized weights: the one exception to tierkv.h (docs/api.md) */
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "ops/dtype.h"
#include "ops/ops.h"
#include "util/status.h"
#include "util/tpool.h"

struct gm_shape {
	const char *name;
	uint32_t dim, n_layer, n_head, n_kv_head, n_ff, n_vocab, n_ctx;
	float rope_base, rms_eps;
};

static const struct gm_shape gm_shapes[] = {
	{ "tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, 1e-5f },
	{ "llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, 1e-5f },
	{ "llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f, 1e-5f },
	{ "stories15m", 288, 6, 6, 6, 768, 32000, 256, 10000.0f, 1e-5f },
	/* models/kjv-2048.gguf's shape (its file is the vocabulary): every row a
	 * whole number of 256-blocks, small enough to write each type in tests */
	{ "kjv-2048", 256, 6, 8, 4, 768, 2048, 2048, 10000.0f, 1e-5f },
};

/* llama.cpp's general.file_type numbering for files of one weight type. */
static uint32_t gm_file_type(uint32_t t)
{
	switch (t) {
	case TKV_F32: return 0;
	case TKV_F16: return 1;
	case TKV_Q4_0: return 2;
	case TKV_Q4_1: return 3;
	case TKV_Q5_0: return 8;
	case TKV_Q5_1: return 9;
	case TKV_Q2_K: return 10;
	case TKV_Q3_K: return 11; /* Q3_K_S: every tensor q3_k */
	case TKV_Q8_0: return 7;
	case TKV_Q4_K: return 14; /* Q4_K_S: every tensor q4_k */
	case TKV_Q5_K: return 16; /* Q5_K_S */
	case TKV_Q6_K: return 18;
	case TKV_IQ4_NL: return 25;
	case TKV_IQ4_XS: return 30;
	case TKV_BF16: return 32;
	default: return 0;
	}
}

static const uint32_t gm_types[] = { TKV_Q4_0, TKV_Q4_K, TKV_Q5_K, TKV_Q6_K, TKV_Q8_0, TKV_F16, TKV_BF16, TKV_F32,
				     TKV_Q4_1, TKV_Q5_0, TKV_Q5_1, TKV_Q2_K, TKV_Q3_K, TKV_IQ4_NL, TKV_IQ4_XS };
#define GM_TYPE_LIST "q2_k | q3_k | q4_0 | q4_1 | q4_k | q5_0 | q5_1 | q5_k | q6_k | q8_0 | iq4_nl | iq4_xs | f16 | bf16 | f32"

static void gm_help(void)
{
	printf("usage: tierkv gen-model --shape SHAPE --type TYPE --vocab VOCAB.gguf -o OUT.gguf [options]\n"
	       "\n"
	       "Writes a llama GGUF with random weights of a real model's shape (for benchmarks;\n"
	       "llama.cpp reads it too). The tokenizer is copied from VOCAB.gguf.\n"
	       "\n"
	       "  --shape NAME      tinyllama-1.1b | llama2-7b | llama3-8b | stories15m | kjv-2048\n"
	       "  --type TYPE       weights: " GM_TYPE_LIST "\n"
	       "  --vocab PATH      GGUF with the tokenizer (e.g. ../shared/vocab/ggml-vocab-llama-spm.gguf)\n"
	       "  -o, --output PATH file to write\n"
	       "  --seed N          random seed (default 1)\n"
	       "  --layers N        override the number of layers (quick tests)\n"
	       "  -t, --threads N   threads (default: physical cores)\n"
	       "  -h, --help        this text\n");
}

/* ---- random rows ------------------------------------------------------------ */

static inline uint64_t gm_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* n values ~ mean + std * N(0, 1) (Irwin-Hall of four 16-bit uniforms:
 * variance 1/3 before the scaling), from a stream seeded by key. */
static void gm_fill(float *x, int64_t n, uint64_t key, float mean, float std)
{
	uint64_t s = gm_mix(key);
	float k = std * 1.7320508f / 65536.0f; /* sqrt(3) / 2^16 */

	for (int64_t i = 0; i < n; i++) {
		uint64_t r = gm_mix(s += 0x9e3779b97f4a7c15ull);
		float u = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) + (float)((r >> 32) & 0xffff) +
			  (float)(r >> 48);

		x[i] = mean + k * (u - 131070.0f); /* 4 * 65535 / 2 */
	}
}

struct gm_tensor {
	char name[64];
	uint32_t n_dims;
	uint64_t ne[2];
	uint32_t type;
	float mean, std;
};

/* One chunk of rows of a tensor, generated and quantized by all threads. */
struct gm_job {
	const struct gm_tensor *t;
	uint64_t seed, tensor_idx;
	int64_t row0, n_rows;
	size_t row_bytes;
	unsigned char *out;
	float *scratch;        /* n_threads rows of floats */
};

static void gm_worker(void *ctx, int ith, int nth)
{
	const struct gm_job *j = ctx;
	float *x = j->scratch + (size_t)ith * j->t->ne[0];

	for (int64_t r = j->n_rows * ith / nth; r < j->n_rows * (ith + 1) / nth; r++) {
		uint64_t row = (uint64_t)(j->row0 + r);

		gm_fill(x, (int64_t)j->t->ne[0], j->seed ^ gm_mix(j->tensor_idx << 32 ^ row), j->t->mean, j->t->std);
		ops_quantize_row(j->t->type, x, j->out + (size_t)r * j->row_bytes, (int64_t)j->t->ne[0]);
	}
}

/* ---- metadata ------------------------------------------------------------------ */

/* Copies one key/value of a GGUF into the writer. */
static int gm_copy_kv(struct gguf_w *w, const struct gguf_kv *kv)
{
	char key[256];

	snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 255 ? kv->key.len : 255), kv->key.ptr);
	switch (kv->type) {
	case GGUF_TYPE_UINT8: return gguf_w_add_u8(w, key, (uint8_t)kv->v.u64);
	case GGUF_TYPE_INT8: return gguf_w_add_i8(w, key, (int8_t)kv->v.i64);
	case GGUF_TYPE_UINT16: return gguf_w_add_u16(w, key, (uint16_t)kv->v.u64);
	case GGUF_TYPE_INT16: return gguf_w_add_i16(w, key, (int16_t)kv->v.i64);
	case GGUF_TYPE_UINT32: return gguf_w_add_u32(w, key, (uint32_t)kv->v.u64);
	case GGUF_TYPE_INT32: return gguf_w_add_i32(w, key, (int32_t)kv->v.i64);
	case GGUF_TYPE_FLOAT32: return gguf_w_add_f32(w, key, (float)kv->v.f64);
	case GGUF_TYPE_BOOL: return gguf_w_add_bool(w, key, kv->v.u64 != 0);
	case GGUF_TYPE_UINT64: return gguf_w_add_u64(w, key, kv->v.u64);
	case GGUF_TYPE_INT64: return gguf_w_add_i64(w, key, kv->v.i64);
	case GGUF_TYPE_FLOAT64: return gguf_w_add_f64(w, key, kv->v.f64);
	case GGUF_TYPE_STRING: return gguf_w_add_strn(w, key, kv->v.str.ptr, kv->v.str.len);
	case GGUF_TYPE_ARRAY:
		if (kv->v.arr.type == GGUF_TYPE_STRING)
			return gguf_w_add_arr_strn(w, key, kv->v.arr.strs, kv->v.arr.n);
		return gguf_w_add_arr(w, key, kv->v.arr.type, kv->v.arr.data, kv->v.arr.n);
	default:
		return TKV_ERR_FORMAT;
	}
}

struct gm_opts {
	const struct gm_shape *shape;
	uint32_t type;
	const char *vocab, *out;
	uint64_t seed;
	long layers, threads;
	int type_set;
};

static int gm_parse(int argc, char **argv, struct gm_opts *o)
{
	struct cli_args a = { argc, argv, 1, "gen-model" };
	int rc;

	memset(o, 0, sizeof *o);
	o->seed = 1;
	for (; a.i < argc; a.i++) {
		const char *s = argv[a.i], *v;

		if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
			gm_help();
			return -1;
		} else if (!strcmp(s, "--shape")) {
			if (!(v = cli_value(&a, s)))
				return CLI_USAGE;
			for (size_t i = 0; i < sizeof gm_shapes / sizeof gm_shapes[0]; i++)
				if (!strcmp(v, gm_shapes[i].name))
					o->shape = &gm_shapes[i];
			if (!o->shape)
				return cli_usage_error(&a, "--shape: unknown shape '%s' (tinyllama-1.1b, llama2-7b, llama3-8b, stories15m, kjv-2048)", v);
		} else if (!strcmp(s, "--type")) {
			if (!(v = cli_value(&a, s)))
				return CLI_USAGE;
			o->type = TKV_DTYPE_COUNT;
			for (size_t i = 0; i < sizeof gm_types / sizeof gm_types[0]; i++)
				if (!strcmp(v, tkv_dtype_name(gm_types[i])))
					o->type = gm_types[i];
			if (o->type == TKV_DTYPE_COUNT)
				return cli_usage_error(&a, "--type: unknown type '%s' (" GM_TYPE_LIST ")", v);
			o->type_set = 1;
		} else if (!strcmp(s, "--vocab")) {
			if (!(o->vocab = cli_value(&a, s)))
				return CLI_USAGE;
		} else if (!strcmp(s, "-o") || !strcmp(s, "--output")) {
			if (!(o->out = cli_value(&a, s)))
				return CLI_USAGE;
		} else if (!strcmp(s, "--seed")) {
			if ((rc = cli_u64(&a, s, &o->seed)))
				return rc;
		} else if (!strcmp(s, "--layers")) {
			if ((rc = cli_int(&a, s, 1, 4096, &o->layers)))
				return rc;
		} else if (!strcmp(s, "-t") || !strcmp(s, "--threads")) {
			if ((rc = cli_int(&a, s, 1, 512, &o->threads)))
				return rc;
		} else {
			return cli_usage_error(&a, "unknown option '%s'", s);
		}
	}
	if (!o->shape)
		return cli_usage_error(&a, "--shape is required");
	if (!o->type_set)
		return cli_usage_error(&a, "--type is required");
	if (!o->vocab)
		return cli_usage_error(&a, "--vocab is required (a GGUF with a tokenizer, e.g. ggml-vocab-llama-spm.gguf)");
	if (!o->out)
		return cli_usage_error(&a, "-o is required");
	return 0;
}

/* The tensors of a llama model in llama.cpp's order. */
static int gm_tensors(const struct gm_opts *o, uint32_t n_vocab, uint32_t n_layer, struct gm_tensor **out,
		      size_t *n_out)
{
	const struct gm_shape *sh = o->shape;
	uint64_t hd = sh->dim / sh->n_head, kvd = hd * sh->n_kv_head;
	size_t n = 3 + 9 * (size_t)n_layer, k = 0;
	struct gm_tensor *t = calloc(n, sizeof *t);

	if (!t)
		return -1;
#define MAT(nm, in, outf) (snprintf(t[k].name, sizeof t[k].name, "%s", nm), t[k].n_dims = 2, t[k].ne[0] = (in), \
			    t[k].ne[1] = (outf), t[k].type = o->type, t[k].mean = 0.0f, t[k].std = 0.02f, k++)
#define VEC(nm, len) (snprintf(t[k].name, sizeof t[k].name, "%s", nm), t[k].n_dims = 1, t[k].ne[0] = (len), \
		      t[k].ne[1] = 1, t[k].type = TKV_F32, t[k].mean = 1.0f, t[k].std = 0.02f, k++)
	MAT("token_embd.weight", sh->dim, n_vocab);
	VEC("output_norm.weight", sh->dim);
	MAT("output.weight", sh->dim, n_vocab);
	for (uint32_t l = 0; l < n_layer; l++) {
		char nm[64];

#define NM(s) (snprintf(nm, sizeof nm, "blk.%u." s, l), nm)
		VEC(NM("attn_norm.weight"), sh->dim);
		MAT(NM("attn_q.weight"), sh->dim, sh->dim);
		MAT(NM("attn_k.weight"), sh->dim, kvd);
		MAT(NM("attn_v.weight"), sh->dim, kvd);
		MAT(NM("attn_output.weight"), sh->dim, sh->dim);
		VEC(NM("ffn_norm.weight"), sh->dim);
		MAT(NM("ffn_gate.weight"), sh->dim, sh->n_ff);
		MAT(NM("ffn_up.weight"), sh->dim, sh->n_ff);
		MAT(NM("ffn_down.weight"), sh->n_ff, sh->dim);
#undef NM
	}
#undef MAT
#undef VEC
	/* rows that are not whole blocks of the type fall back to q8_0 */
	for (size_t i = 0; i < k; i++)
		if (t[i].n_dims == 2 && t[i].ne[0] % tkv_dtype_traits(t[i].type)->blck)
			t[i].type = TKV_Q8_0;
	*out = t;
	*n_out = k;
	return 0;
}

/* Rows per chunk: about this many bytes of output at a time. */
#define GM_CHUNK_BYTES (8u << 20)

int cli_gen_model(int argc, char **argv)
{
	struct gm_opts o;
	struct gguf_file *voc = NULL;
	struct gguf_w *w = NULL;
	struct tpool *tp = NULL;
	struct tkv_error err = { 0 };
	struct gm_tensor *t = NULL;
	size_t n_t = 0, fallback = 0;
	const struct gguf_kv *tokens;
	unsigned char *buf = NULL;
	float *scratch = NULL;
	FILE *fp = NULL;
	uint32_t n_vocab, n_layer;
	uint64_t total = 0;
	double t0 = cli_now();
	int rc = CLI_ERR, st;

	st = gm_parse(argc, argv, &o);
	if (st == -1)
		return CLI_OK;
	if (st)
		return st;
	n_layer = o.layers ? (uint32_t)o.layers : o.shape->n_layer;

	if ((st = gguf_open(&voc, o.vocab, NULL, &err)))
		goto fail;
	if ((st = gguf_get_arr(voc, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tokens, &err)))
		goto fail;
	n_vocab = (uint32_t)tokens->v.arr.n;
	if (n_vocab != o.shape->n_vocab)
		fprintf(stderr, "tierkv gen-model: %s has %u tokens; the model gets %u rows of embeddings (the shape's is %u)\n",
			o.vocab, n_vocab, n_vocab, o.shape->n_vocab);
	if (gm_tensors(&o, n_vocab, n_layer, &t, &n_t)) {
		fprintf(stderr, "tierkv gen-model: out of memory\n");
		goto out;
	}

	if ((st = gguf_w_init(&w, NULL))) {
		tkv_errf(&err, st, "out of memory");
		goto fail;
	}
	{
		const struct gm_shape *sh = o.shape;
		char name[128];

		snprintf(name, sizeof name, "tierkv random %s %s", sh->name, tkv_dtype_name(o.type));
		gguf_w_add_str(w, "general.architecture", "llama");
		gguf_w_add_str(w, "general.name", name);
		gguf_w_add_u32(w, "general.file_type", gm_file_type(o.type));
		gguf_w_add_u32(w, "general.quantization_version", 2);
		gguf_w_add_u32(w, "llama.context_length", sh->n_ctx);
		gguf_w_add_u32(w, "llama.embedding_length", sh->dim);
		gguf_w_add_u32(w, "llama.block_count", n_layer);
		gguf_w_add_u32(w, "llama.feed_forward_length", sh->n_ff);
		gguf_w_add_u32(w, "llama.attention.head_count", sh->n_head);
		gguf_w_add_u32(w, "llama.attention.head_count_kv", sh->n_kv_head);
		gguf_w_add_u32(w, "llama.rope.dimension_count", sh->dim / sh->n_head);
		gguf_w_add_f32(w, "llama.rope.freq_base", sh->rope_base);
		gguf_w_add_f32(w, "llama.attention.layer_norm_rms_epsilon", sh->rms_eps);
		gguf_w_add_u32(w, "llama.vocab_size", n_vocab);
		for (uint64_t i = 0; i < gguf_n_kv(voc); i++) {
			const struct gguf_kv *kv = gguf_kv_at(voc, i);

			if (kv->key.len > 10 && !memcmp(kv->key.ptr, "tokenizer.", 10))
				gm_copy_kv(w, kv);
		}
	}
	for (size_t i = 0; i < n_t; i++) {
		gguf_w_add_tensor(w, t[i].name, t[i].n_dims, t[i].ne, t[i].type);
		fallback += t[i].n_dims == 2 && t[i].type != o.type;
		total += gguf_w_tensor_nbytes(w, i);
	}
	if (fallback)
		fprintf(stderr, "tierkv gen-model: %zu tensors have rows that are not whole %s blocks; they are q8_0\n",
			fallback, tkv_dtype_name(o.type));
	if ((st = gguf_w_error(w)->status)) {
		err = *gguf_w_error(w);
		goto fail;
	}

	fp = fopen(o.out, "wb");
	if (!fp) {
		fprintf(stderr, "tierkv gen-model: cannot create %s: %s\n", o.out, strerror(errno));
		goto out;
	}
	if ((st = tpool_init(&tp, o.threads ? (int)o.threads : tpool_default_threads(), NULL, &err)))
		goto fail;
	{
		uint64_t widest = 0;

		for (size_t i = 0; i < n_t; i++)
			if (t[i].ne[0] > widest)
				widest = t[i].ne[0];
		buf = malloc(GM_CHUNK_BYTES + widest * 4);
		scratch = malloc((size_t)tpool_n(tp) * widest * sizeof(float));
		if (!buf || !scratch) {
			fprintf(stderr, "tierkv gen-model: out of memory\n");
			goto out;
		}
	}
	if ((st = gguf_w_start_file(w, fp))) {
		err = *gguf_w_error(w);
		goto fail;
	}
	fprintf(stderr, "tierkv gen-model: %s, %s, %u layers, %u tokens, %.2f GiB of tensors -> %s\n", o.shape->name,
		tkv_dtype_name(o.type), n_layer, n_vocab, (double)total / (1u << 30), o.out);
	for (size_t i = 0; i < n_t; i++) {
		size_t rb = tkv_dtype_row_size(t[i].type, t[i].ne[0]);
		int64_t step = (int64_t)(GM_CHUNK_BYTES / rb) > 0 ? (int64_t)(GM_CHUNK_BYTES / rb) : 1;

		for (int64_t r = 0; r < (int64_t)t[i].ne[1]; r += step) {
			struct gm_job j = { &t[i], o.seed, i, r, 0, rb, buf, scratch };

			j.n_rows = (int64_t)t[i].ne[1] - r < step ? (int64_t)t[i].ne[1] - r : step;
			tpool_run(tp, gm_worker, &j);
			if ((st = gguf_w_write(w, buf, (size_t)j.n_rows * rb))) {
				err = *gguf_w_error(w);
				goto fail;
			}
		}
	}
	if ((st = gguf_w_finish(w))) {
		err = *gguf_w_error(w);
		goto fail;
	}
	if (fclose(fp)) {
		fp = NULL;
		fprintf(stderr, "tierkv gen-model: cannot write %s: %s\n", o.out, strerror(errno));
		goto out;
	}
	fp = NULL;
	fprintf(stderr, "tierkv gen-model: wrote %s in %.1f s\n", o.out, cli_now() - t0);
	rc = CLI_OK;
	goto out;

fail:
	fprintf(stderr, "tierkv gen-model: %s\n", err.msg[0] ? err.msg : tkv_status_str(st));
out:
	if (fp) {
		fclose(fp);
		remove(o.out);
	}
	free(buf);
	free(scratch);
	free(t);
	tpool_free(tp);
	gguf_w_free(w);
	gguf_close(voc);
	return rc;
}
