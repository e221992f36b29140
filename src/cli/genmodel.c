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
/* writing GGUF files and quantized weights: a named exception to tierkv.h (docs/api.md) */
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "ops/dtype.h"
#include "ops/ops.h"

/* What a family's files carry beyond llama's tensors. */
#define GM_BIAS     (1u << 0)  /* attn_q/k/v.bias (qwen2) */
#define GM_QK_NORM  (1u << 1)  /* attn_q_norm, attn_k_norm (qwen3, gemma3) */
#define GM_POST     (1u << 2)  /* post_attention_norm, post_ffw_norm (gemma2/3) */
#define GM_FUSED    (1u << 3)  /* attn_qkv, and ffn_up holding gate and up (phi3) */
#define GM_TIED     (1u << 4)  /* no output.weight: the embedding is the output */
#define GM_LONGROPE (1u << 5)  /* rope_factors_short/long, original context 4096 (phi3) */
#define GM_LLAMA3   (1u << 6)  /* rope_freqs of Llama 3.1's rope scaling (factor 32) */
#define GM_SOFTCAP  (1u << 7)  /* attention and final soft-caps 50 and 30 (gemma2) */
#define GM_TIGHTCAP (1u << 8)  /* attention soft-cap 4 instead, where random logits reach it */
#define GM_ORIG32   (1u << 9)  /* LongRoPE's original context 32, not 4096: a 64-token test
				* context takes the long factors */
#define GM_ROUTER8  (1u << 10) /* router logits of spread 8, not 2 (see gm_experts) */

struct gm_shape {
	const char *name;
	const char *arch;        /* general.architecture */
	uint32_t dim, n_layer, n_head, n_kv_head, n_ff, n_vocab, n_ctx;
	float rope_base, rms_eps;
	uint32_t head_dim;       /* 0: dim / n_head */
	uint32_t n_rot;          /* 0: head_dim */
	uint32_t window;         /* attention.sliding_window, 0 = none */
	uint32_t flags;          /* GM_* */
	const char *vocab;       /* the vocabulary in ../shared/vocab it is meant for (the real
				  * one, or the nearest there: see gm_help), NULL for the old shapes */
	uint32_t n_expert;       /* routed experts per layer (mixture of experts), 0 = dense */
	uint32_t n_expert_used;  /* experts a token takes */
	uint32_t n_ff_exp;       /* expert_feed_forward_length (qwen3moe); 0: the experts are
				  * n_ff wide and the key is not written (Mixtral in llama) */
};

/* The families' shapes are the models' config.json values. Their files get
 * exactly n_vocab tokens (the vocabulary padded with [PAD<i>] tokens or cut),
 * peaked next-token distributions (gm_tensors) and wq/wk of a larger spread
 * so that attention is far from uniform. */
static const struct gm_shape gm_shapes[] = {
	{ "tinyllama-1.1b", "llama", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, 1e-5f, 0, 0, 0, 0, NULL, 0, 0, 0 },
	{ "llama2-7b", "llama", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, 1e-5f, 0, 0, 0, 0, NULL, 0, 0, 0 },
	{ "llama3-8b", "llama", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f, 1e-5f, 0, 0, 0, 0, NULL, 0, 0, 0 },
	{ "stories15m", "llama", 288, 6, 6, 6, 768, 32000, 256, 10000.0f, 1e-5f, 0, 0, 0, 0, NULL, 0, 0, 0 },
	/* models/kjv-2048.gguf's shape (its file is the vocabulary): every row a
	 * whole number of 256-blocks, small enough to write each type in tests */
	{ "kjv-2048", "llama", 256, 6, 8, 4, 768, 2048, 2048, 10000.0f, 1e-5f, 0, 0, 0, 0, NULL, 0, 0, 0 },
	{ "llama3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f, 1e-5f, 64, 0, 0,
	  GM_TIED | GM_LLAMA3, "llama-bpe", 0, 0, 0 },
	{ "llama3.2-3b", "llama", 3072, 28, 24, 8, 8192, 128256, 131072, 500000.0f, 1e-5f, 128, 0, 0,
	  GM_TIED | GM_LLAMA3, "llama-bpe", 0, 0, 0 },
	{ "mistral-7b", "llama", 4096, 32, 32, 8, 14336, 32000, 32768, 10000.0f, 1e-5f, 128, 0, 4096, 0,
	  "llama-spm", 0, 0, 0 },
	{ "qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 1000000.0f, 1e-6f, 64, 0, 0,
	  GM_BIAS | GM_TIED, "qwen2", 0, 0, 0 },
	{ "qwen2.5-1.5b", "qwen2", 1536, 28, 12, 2, 8960, 151936, 32768, 1000000.0f, 1e-6f, 128, 0, 0,
	  GM_BIAS | GM_TIED, "qwen2", 0, 0, 0 },
	{ "qwen2.5-7b", "qwen2", 3584, 28, 28, 4, 18944, 152064, 32768, 1000000.0f, 1e-6f, 128, 0, 0, GM_BIAS,
	  "qwen2", 0, 0, 0 },
	{ "qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 3072, 151936, 40960, 1000000.0f, 1e-6f, 128, 0, 0,
	  GM_QK_NORM | GM_TIED, "qwen2", 0, 0, 0 },
	{ "qwen3-4b", "qwen3", 2560, 36, 32, 8, 9728, 151936, 40960, 1000000.0f, 1e-6f, 128, 0, 0,
	  GM_QK_NORM | GM_TIED, "qwen2", 0, 0, 0 },
	{ "qwen3-8b", "qwen3", 4096, 36, 32, 8, 12288, 151936, 40960, 1000000.0f, 1e-6f, 128, 0, 0, GM_QK_NORM,
	  "qwen2", 0, 0, 0 },
	{ "gemma2-2b", "gemma2", 2304, 26, 8, 4, 9216, 256000, 8192, 10000.0f, 1e-6f, 256, 0, 4096,
	  GM_POST | GM_TIED | GM_SOFTCAP, "gemma-4", 0, 0, 0 },
	{ "gemma3-1b", "gemma3", 1152, 26, 4, 1, 6912, 262144, 32768, 1000000.0f, 1e-6f, 256, 0, 512,
	  GM_POST | GM_QK_NORM | GM_TIED, "gemma-4", 0, 0, 0 },
	{ "gemma3-4b", "gemma3", 2560, 34, 8, 4, 10240, 262208, 131072, 1000000.0f, 1e-6f, 256, 0, 1024,
	  GM_POST | GM_QK_NORM | GM_TIED, "gemma-4", 0, 0, 0 },
	{ "phi3-mini", "phi3", 3072, 32, 32, 32, 8192, 32064, 131072, 10000.0f, 1e-5f, 96, 0, 0,
	  GM_FUSED | GM_LONGROPE, "phi-3", 0, 0, 0 },
	{ "phi4-mini", "phi3", 3072, 32, 24, 8, 8192, 200064, 131072, 10000.0f, 1e-5f, 128, 96, 0,
	  GM_FUSED | GM_LONGROPE | GM_TIED, "qwen2", 0, 0, 0 },
	/* mixture of experts: Qwen3-30B-A3B with 4 of its 48 layers (--layers
	 * changes that; each layer is 1.2 GB of f16 experts), and a small
	 * Mixtral-like llama (8 experts, 2 a token, 8 layers) on Mistral's vocabulary */
	{ "qwen3-30b-a3b", "qwen3moe", 2048, 4, 32, 4, 6144, 151936, 40960, 1000000.0f, 1e-6f, 128, 0, 0, GM_QK_NORM,
	  "qwen2", 128, 8, 768 },
	{ "mixtral-mini", "llama", 1024, 8, 16, 4, 2816, 32000, 32768, 1000000.0f, 1e-5f, 64, 0, 0, GM_ROUTER8, "llama-spm",
	  8, 2, 0 },
	/* each family small, on models/kjv-2048.gguf's vocabulary, windows of 16
	 * tokens, for the tests (tests/cli_families.sh) */
	{ "test-llama3", "llama", 256, 2, 4, 2, 512, 2048, 131072, 500000.0f, 1e-5f, 64, 0, 0, GM_TIED | GM_LLAMA3,
	  "kjv-2048", 0, 0, 0 },
	{ "test-mistral", "llama", 256, 2, 4, 2, 512, 2048, 32768, 10000.0f, 1e-5f, 64, 0, 16, 0, "kjv-2048", 0, 0, 0 },
	{ "test-qwen2", "qwen2", 256, 2, 4, 2, 512, 2048, 32768, 1000000.0f, 1e-6f, 64, 0, 0, GM_BIAS | GM_TIED,
	  "kjv-2048", 0, 0, 0 },
	{ "test-qwen3", "qwen3", 256, 2, 4, 2, 512, 2048, 40960, 1000000.0f, 1e-6f, 64, 0, 0, GM_QK_NORM,
	  "kjv-2048", 0, 0, 0 },
	{ "test-gemma2", "gemma2", 256, 2, 4, 2, 512, 2048, 8192, 10000.0f, 1e-6f, 64, 0, 16,
	  GM_POST | GM_TIED | GM_SOFTCAP | GM_TIGHTCAP, "kjv-2048", 0, 0, 0 },
	{ "test-gemma3", "gemma3", 256, 6, 4, 1, 512, 2048, 32768, 1000000.0f, 1e-6f, 64, 0, 16,
	  GM_POST | GM_QK_NORM | GM_TIED, "kjv-2048", 0, 0, 0 },
	{ "test-phi3", "phi3", 256, 2, 4, 4, 512, 2048, 128, 10000.0f, 1e-5f, 64, 0, 0,
	  GM_FUSED | GM_LONGROPE | GM_ORIG32, "kjv-2048", 0, 0, 0 },
	{ "test-qwen3moe", "qwen3moe", 256, 2, 4, 2, 512, 2048, 40960, 1000000.0f, 1e-6f, 64, 0, 0, GM_QK_NORM,
	  "kjv-2048", 16, 4, 256 },
	{ "test-mixtral", "llama", 256, 2, 4, 2, 512, 2048, 32768, 1000000.0f, 1e-5f, 64, 0, 0, 0, "kjv-2048", 8, 2, 0 },
};
#define GM_SHAPE_LIST "tinyllama-1.1b | llama2-7b | llama3-8b | stories15m | kjv-2048 | llama3.2-1b | llama3.2-3b |\n" \
	"                    mistral-7b | qwen2.5-0.5b | qwen2.5-1.5b | qwen2.5-7b | qwen3-0.6b | qwen3-4b | qwen3-8b |\n" \
	"                    gemma2-2b | gemma3-1b | gemma3-4b | phi3-mini | phi4-mini | qwen3-30b-a3b |\n" \
	"                    mixtral-mini;\n" \
	"                    small ones for tests: test-llama3 | test-mistral | test-qwen2 | test-qwen3 |\n" \
	"                    test-gemma2 | test-gemma3 | test-phi3 | test-qwen3moe | test-mixtral"

static uint32_t gm_head_dim(const struct gm_shape *sh)
{
	return sh->head_dim ? sh->head_dim : sh->dim / sh->n_head;
}

static uint32_t gm_n_rot(const struct gm_shape *sh)
{
	return sh->n_rot ? sh->n_rot : gm_head_dim(sh);
}

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
	       "Writes a GGUF of a model family with random weights of a real model's shape (for\n"
	       "benchmarks and comparisons; llama.cpp reads it too). The tokenizer is copied from\n"
	       "VOCAB.gguf; the families' shapes pad or cut it to the model's vocabulary size.\n"
	       "\n"
	       "  --shape NAME      " GM_SHAPE_LIST "\n"
	       "  --type TYPE       weights: " GM_TYPE_LIST "\n"
	       "  --vocab PATH      GGUF with the tokenizer (e.g. ../shared/vocab/ggml-vocab-qwen2.gguf; each\n"
	       "                    family shape names its own in the message it prints)\n"
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

/* A tensor's values: random, or one of the fixed rotary factor tables. */
enum gm_fill { GM_RANDOM, GM_ROPE_SHORT, GM_ROPE_LONG, GM_ROPE_LLAMA3 };

struct gm_tensor {
	char name[64];
	uint32_t n_dims;
	uint64_t ne[3];        /* ne[2]: experts of a 3-D stack, else 1 */
	uint32_t type;
	float mean, std;
	uint64_t rows2;        /* rows from this one on have std2 (a fused tensor's parts) */
	float std2;
	enum gm_fill fill;
	float base;            /* GM_ROPE_LLAMA3: the rope base; n_rot is 2 * ne[0] */
};

/* Element i of a fixed table of n (LongRoPE-like short and long factors,
 * rising with the dimension; Llama 3.1's factors for base, scale 32, low 1,
 * high 4, original context 8192). */
static float gm_fixed(const struct gm_tensor *t, uint64_t i)
{
	double x = (double)i / (double)(t->ne[0] > 1 ? t->ne[0] - 1 : 1);

	if (t->fill == GM_ROPE_SHORT)
		return (float)(1.0 + 0.05 * x);
	if (t->fill == GM_ROPE_LONG)
		return (float)(1.0 + 30.0 * x * x);
	{
		double freq = pow((double)t->base, -2.0 * (double)i / (2.0 * (double)t->ne[0]));
		double wavelen = 2.0 * M_PI / freq, old = 8192.0, factor = 32.0, smooth;

		if (wavelen < old / 4.0)
			return 1.0f;
		if (wavelen > old / 1.0)
			return (float)factor;
		smooth = (old / wavelen - 1.0) / (4.0 - 1.0);
		return (float)(1.0 / ((1.0 - smooth) / factor + smooth));
	}
}

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

		if (j->t->fill != GM_RANDOM)
			for (uint64_t i = 0; i < j->t->ne[0]; i++)
				x[i] = gm_fixed(j->t, i);
		else
			gm_fill(x, (int64_t)j->t->ne[0], j->seed ^ gm_mix(j->tensor_idx << 32 ^ row), j->t->mean,
				row >= j->t->rows2 ? j->t->std2 : j->t->std);
		ops_quantize_row(j->t->type, x, j->out + (size_t)r * j->row_bytes, (int64_t)j->t->ne[0]);
	}
}

/* ---- metadata ------------------------------------------------------------------ */


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
				return cli_usage_error(&a, "--shape: unknown shape '%s' (see tierkv gen-model --help)", v);
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

/* Entries of the vocabulary file's token list. */
static uint64_t gm_vocab_n(const struct gguf_file *voc)
{
	const struct gguf_kv *kv = gguf_find(voc, "tokenizer.ggml.tokens");

	return kv && kv->type == GGUF_TYPE_ARRAY ? kv->v.arr.n : 0;
}

/* A tokenizer array (tokens, scores, token types) fitted to n entries:
 * cut, or padded with [PAD<i>] tokens of type UNUSED, score 0 (as llama.cpp's
 * converter pads a vocabulary to the embedding's rows). */
static int gm_fit_arr(struct gguf_w *w, const char *key, const struct gguf_kv *kv, uint32_t n)
{
	uint64_t have = kv->v.arr.n;
	int st;

	if (kv->v.arr.type == GGUF_TYPE_STRING) {
		struct gguf_str *strs = calloc(n, sizeof *strs);
		char (*pad)[24] = calloc(n > have ? n - have : 1, sizeof *pad);

		if (!strs || !pad) {
			free(strs);
			free(pad);
			return TKV_ERR_NOMEM;
		}
		for (uint32_t i = 0; i < n; i++) {
			if (i < have) {
				strs[i] = kv->v.arr.strs[i];
				continue;
			}
			snprintf(pad[i - have], sizeof pad[0], "[PAD%u]", i);
			strs[i].ptr = pad[i - have];
			strs[i].len = strlen(pad[i - have]);
		}
		st = gguf_w_add_arr_strn(w, key, strs, n);
		free(strs);
		free(pad);
		return st;
	}
	if (kv->v.arr.type == GGUF_TYPE_FLOAT32 || kv->v.arr.type == GGUF_TYPE_INT32) {
		uint32_t *v = calloc(n, 4);

		if (!v)
			return TKV_ERR_NOMEM;
		memcpy(v, kv->v.arr.data, (size_t)(have < n ? have : n) * 4);
		for (uint64_t i = have; i < n; i++)
			v[i] = kv->v.arr.type == GGUF_TYPE_INT32 ? 5u /* UNUSED */ : 0u;
		st = gguf_w_add_arr(w, key, kv->v.arr.type, v, n);
		free(v);
		return st;
	}
	return gguf_w_add_kv(w, kv);
}

/* The tokenizer keys of the vocabulary file; the families' shapes fit the
 * token arrays to n_vocab and drop special-token ids past it. */
static void gm_tokenizer(struct gguf_w *w, const struct gm_opts *o, const struct gguf_file *voc, uint32_t n_vocab)
{
	for (uint64_t i = 0; i < gguf_n_kv(voc); i++) {
		const struct gguf_kv *kv = gguf_kv_at(voc, i);
		char key[256];

		if (!(kv->key.len > 10 && !memcmp(kv->key.ptr, "tokenizer.", 10)))
			continue;
		snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 255 ? kv->key.len : 255), kv->key.ptr);
		if (!o->shape->vocab) {
			gguf_w_add_kv(w, kv);
		} else if (kv->type == GGUF_TYPE_ARRAY && kv->v.arr.n == gm_vocab_n(voc) &&
			   strcmp(key, "tokenizer.ggml.merges")) {
			gm_fit_arr(w, key, kv, n_vocab);
		} else if (!(kv->type == GGUF_TYPE_UINT32 && strstr(key, "_token_id") && kv->v.u64 >= n_vocab)) {
			gguf_w_add_kv(w, kv);
		}
	}
}

/* The model's metadata under its family's prefix, then the tokenizer. */
static void gm_meta(struct gguf_w *w, const struct gm_opts *o, const struct gguf_file *voc, uint32_t n_vocab,
		    uint32_t n_layer)
{
	const struct gm_shape *sh = o->shape;
	char name[128], key[128];
	const char *a = sh->arch;

#define KEY(s) (snprintf(key, sizeof key, "%s." s, a), key)
	/* llama.cpp reads tokenizer quirks from general.name (a name with "phi3"
	 * in it must have Phi-3's special tokens): the family shapes' names go
	 * in a key of their own */
	if (sh->vocab)
		snprintf(name, sizeof name, "tierkv random %u-layer %s", n_layer, tkv_dtype_name(o->type));
	else
		snprintf(name, sizeof name, "tierkv random %s %s", sh->name, tkv_dtype_name(o->type));
	gguf_w_add_str(w, "general.architecture", a);
	gguf_w_add_str(w, "general.name", name);
	if (sh->vocab)
		gguf_w_add_str(w, "tierkv.gen_model.shape", sh->name);
	gguf_w_add_u32(w, "general.file_type", gm_file_type(o->type));
	gguf_w_add_u32(w, "general.quantization_version", 2);
	gguf_w_add_u32(w, KEY("context_length"), sh->n_ctx);
	gguf_w_add_u32(w, KEY("embedding_length"), sh->dim);
	gguf_w_add_u32(w, KEY("block_count"), n_layer);
	gguf_w_add_u32(w, KEY("feed_forward_length"), sh->n_ff);
	gguf_w_add_u32(w, KEY("attention.head_count"), sh->n_head);
	gguf_w_add_u32(w, KEY("attention.head_count_kv"), sh->n_kv_head);
	if (sh->vocab) {
		gguf_w_add_u32(w, KEY("attention.key_length"), gm_head_dim(sh));
		gguf_w_add_u32(w, KEY("attention.value_length"), gm_head_dim(sh));
	}
	gguf_w_add_u32(w, KEY("rope.dimension_count"), gm_n_rot(sh));
	gguf_w_add_f32(w, KEY("rope.freq_base"), sh->rope_base);
	gguf_w_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), sh->rms_eps);
	gguf_w_add_u32(w, KEY("vocab_size"), n_vocab);
	if (sh->window)
		gguf_w_add_u32(w, KEY("attention.sliding_window"), sh->window);
	if (sh->n_expert) {
		gguf_w_add_u32(w, KEY("expert_count"), sh->n_expert);
		gguf_w_add_u32(w, KEY("expert_used_count"), sh->n_expert_used);
		if (sh->n_ff_exp)
			gguf_w_add_u32(w, KEY("expert_feed_forward_length"), sh->n_ff_exp);
	}
	if (sh->flags & GM_SOFTCAP) {
		gguf_w_add_f32(w, KEY("attn_logit_softcapping"), sh->flags & GM_TIGHTCAP ? 4.0f : 50.0f);
		gguf_w_add_f32(w, KEY("final_logit_softcapping"), 30.0f);
	}
	if (sh->flags & GM_LONGROPE) {
		/* Phi-3's LongRoPE: sqrt(1 + ln(context / original) / ln(original)) */
		double orig = sh->flags & GM_ORIG32 ? 32.0 : 4096.0;

		gguf_w_add_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)orig);
		gguf_w_add_f32(w, KEY("rope.scaling.attn_factor"), (float)sqrt(1.0 + log((double)sh->n_ctx / orig) / log(orig)));
	}
#undef KEY
	gm_tokenizer(w, o, voc, n_vocab);
}

/* Spreads of the families' random weights: wq and wk give attention logits
 * of about GM_QK_LOGIT standard deviations (sqrt(GM_QK_LOGIT / dim)), q/k norm
 * weights the same (GM_QKN_LOGIT), and the output norm's weights next-token
 * logits of about GM_OUT_LOGIT, so that next-token distributions are peaked
 * (mean entropy below half of ln(vocab): measured by eval --kl-base). Sharper
 * attention or output would turn either engine's rounding (f16 activations,
 * q8 activation blocks of 32 or 256) into KL far above what trained models
 * show: random layers amplify it. The old shapes keep N(0, 0.02) everywhere
 * and norms at 1. */
#define GM_QK_LOGIT 1.0
#define GM_QKN_LOGIT 1.0
#define GM_OUT_LOGIT 4.0
#define GM_OUT_LOGIT_GEMMA2 5.5
#define GM_ROUTER_LOGIT 2.0
#define GM_STD 0.02f

struct gm_list {
	struct gm_tensor *t;
	size_t k;
};

static struct gm_tensor *gm_add(struct gm_list *L, const char *name, uint32_t n_dims, uint64_t in, uint64_t out,
				uint32_t type, float mean, float std)
{
	struct gm_tensor *t = &L->t[L->k++];

	snprintf(t->name, sizeof t->name, "%s", name);
	t->n_dims = n_dims;
	t->ne[0] = in;
	t->ne[1] = out;
	t->ne[2] = 1;
	t->type = type;
	t->mean = mean;
	t->std = t->std2 = std;
	t->rows2 = UINT64_MAX;
	return t;
}

/* A layer's routed experts: the router (f32, as llama.cpp's converter and
 * llama-quantize keep it) with logits of about GM_ROUTER_LOGIT standard
 * deviations, so that the top experts stand apart from the rest, and the
 * three 3-D stacks of experts. Choosing 2 of 8 experts, a spread of 2 left
 * enough near-ties between the second and third expert over 4 layers x 512
 * tokens that float rounding flipped choices, each moving half the FFN
 * (mixtral-mini at f16: llama.cpp against itself with -fa off, KL 3.9e-3):
 * GM_ROUTER8 shapes get 4 times the spread. */
static void gm_experts(const struct gm_opts *o, struct gm_list *L, uint32_t l)
{
	const struct gm_shape *sh = o->shape;
	uint64_t D = sh->dim, F = sh->n_ff_exp ? sh->n_ff_exp : sh->n_ff;
	char nm[64];

#define NM(s) (snprintf(nm, sizeof nm, "blk.%u." s, l), nm)
	gm_add(L, NM("ffn_gate_inp.weight"), 2, D, sh->n_expert, TKV_F32, 0.0f,
	       (float)(GM_ROUTER_LOGIT * (sh->flags & GM_ROUTER8 ? 4.0 : 1.0) / sqrt(D)));
	gm_add(L, NM("ffn_gate_exps.weight"), 3, D, F, o->type, 0.0f, GM_STD)->ne[2] = sh->n_expert;
	gm_add(L, NM("ffn_down_exps.weight"), 3, F, D, o->type, 0.0f, GM_STD)->ne[2] = sh->n_expert;
	gm_add(L, NM("ffn_up_exps.weight"), 3, D, F, o->type, 0.0f, GM_STD)->ne[2] = sh->n_expert;
#undef NM
}

/* One layer's tensors, in llama.cpp's order. */
static void gm_layer(const struct gm_opts *o, struct gm_list *L, uint32_t l, float qk_std, float qkn_mean)
{
	const struct gm_shape *sh = o->shape;
	uint64_t hd = gm_head_dim(sh), qd = hd * sh->n_head, kvd = hd * sh->n_kv_head, D = sh->dim;
	uint32_t f = sh->flags, T = o->type;
	char nm[64];

#define NM(s) (snprintf(nm, sizeof nm, "blk.%u." s, l), nm)
	gm_add(L, NM("attn_norm.weight"), 1, D, 1, TKV_F32, 1.0f, GM_STD);
	if (f & GM_FUSED) {
		struct gm_tensor *t = gm_add(L, NM("attn_qkv.weight"), 2, D, qd + 2 * kvd, T, 0.0f, qk_std);

		t->rows2 = qd + kvd;
		t->std2 = GM_STD;
	} else {
		gm_add(L, NM("attn_q.weight"), 2, D, qd, T, 0.0f, qk_std);
		gm_add(L, NM("attn_k.weight"), 2, D, kvd, T, 0.0f, qk_std);
		gm_add(L, NM("attn_v.weight"), 2, D, kvd, T, 0.0f, GM_STD);
	}
	if (f & GM_BIAS) {
		gm_add(L, NM("attn_q.bias"), 1, qd, 1, TKV_F32, 0.0f, 0.5f);
		gm_add(L, NM("attn_k.bias"), 1, kvd, 1, TKV_F32, 0.0f, 0.5f);
		gm_add(L, NM("attn_v.bias"), 1, kvd, 1, TKV_F32, 0.0f, 0.1f);
	}
	if (f & GM_QK_NORM) {
		gm_add(L, NM("attn_q_norm.weight"), 1, hd, 1, TKV_F32, qkn_mean, 0.1f);
		gm_add(L, NM("attn_k_norm.weight"), 1, hd, 1, TKV_F32, qkn_mean, 0.1f);
	}
	gm_add(L, NM("attn_output.weight"), 2, qd, D, T, 0.0f, GM_STD);
	if (f & GM_POST)
		gm_add(L, NM("post_attention_norm.weight"), 1, D, 1, TKV_F32, 1.0f, GM_STD);
	gm_add(L, NM("ffn_norm.weight"), 1, D, 1, TKV_F32, 1.0f, GM_STD);
	if (sh->n_expert) {
		gm_experts(o, L, l);
	} else if (f & GM_FUSED) {
		gm_add(L, NM("ffn_up.weight"), 2, D, 2 * (uint64_t)sh->n_ff, T, 0.0f, GM_STD);
	} else {
		gm_add(L, NM("ffn_gate.weight"), 2, D, sh->n_ff, T, 0.0f, GM_STD);
		gm_add(L, NM("ffn_up.weight"), 2, D, sh->n_ff, T, 0.0f, GM_STD);
	}
	if (!sh->n_expert)
		gm_add(L, NM("ffn_down.weight"), 2, sh->n_ff, D, T, 0.0f, GM_STD);
	if (f & GM_POST)
		gm_add(L, NM("post_ffw_norm.weight"), 1, D, 1, TKV_F32, 1.0f, GM_STD);
#undef NM
}

/* The tensors of a model in llama.cpp's order. */
static int gm_tensors(const struct gm_opts *o, uint32_t n_vocab, uint32_t n_layer, struct gm_tensor **out,
		      size_t *n_out)
{
	const struct gm_shape *sh = o->shape;
	bool fam = sh->vocab != NULL;
	float qk_std = fam ? (float)sqrt(GM_QK_LOGIT / sh->dim) : GM_STD;
	float qkn_mean = (float)sqrt(GM_QKN_LOGIT); /* q, k rows of rms ~1.4 after their norm */
	/* Gemma multiplies embeddings by sqrt(dim): theirs are that much smaller,
	 * or the residual stream stays the input token's embedding and a tied
	 * output predicts that token again with certainty */
	float embd_std = fam && !strncmp(sh->arch, "gemma", 5) ? GM_STD / (float)sqrt(sh->dim) : GM_STD;
	float out_std = sh->flags & GM_TIED ? embd_std : GM_STD;
	/* gemma2 caps its logits at 30 tanh(x / 30) and adds norms after
	 * attention and FFN: measured, GM_OUT_LOGIT left its distributions at a
	 * mean entropy of 6.9 nats against half of ln(256000), 6.23 (at 5: 6.28) */
	double out_logit = fam && !strcmp(sh->arch, "gemma2") ? GM_OUT_LOGIT_GEMMA2 : GM_OUT_LOGIT;
	float out_mean = fam ? (float)(out_logit / (out_std * sqrt(sh->dim))) : 1.0f;
	uint64_t half = gm_n_rot(sh) / 2;
	struct gm_list L = { calloc(6 + 20 * (size_t)n_layer, sizeof(struct gm_tensor)), 0 };

	if (!L.t)
		return -1;
	gm_add(&L, "token_embd.weight", 2, sh->dim, n_vocab, o->type, 0.0f, embd_std);
	gm_add(&L, "output_norm.weight", 1, sh->dim, 1, TKV_F32, out_mean, GM_STD * out_mean);
	if (!(sh->flags & GM_TIED))
		gm_add(&L, "output.weight", 2, sh->dim, n_vocab, o->type, 0.0f, GM_STD);
	if (sh->flags & GM_LONGROPE) {
		gm_add(&L, "rope_factors_long.weight", 1, half, 1, TKV_F32, 0, 0)->fill = GM_ROPE_LONG;
		gm_add(&L, "rope_factors_short.weight", 1, half, 1, TKV_F32, 0, 0)->fill = GM_ROPE_SHORT;
	}
	if (sh->flags & GM_LLAMA3) {
		struct gm_tensor *t = gm_add(&L, "rope_freqs.weight", 1, half, 1, TKV_F32, 0, 0);

		t->fill = GM_ROPE_LLAMA3;
		t->base = sh->rope_base;
	}
	for (uint32_t l = 0; l < n_layer; l++)
		gm_layer(o, &L, l, qk_std, qkn_mean);
	/* rows that are not whole blocks of the type fall back to q8_0 */
	for (size_t i = 0; i < L.k; i++)
		if (L.t[i].n_dims >= 2 && L.t[i].type != TKV_F32 && L.t[i].ne[0] % tkv_dtype_traits(L.t[i].type)->blck)
			L.t[i].type = TKV_Q8_0;
	*out = L.t;
	*n_out = L.k;
	return 0;
}

/* Rows per chunk: about this many bytes of output at a time. */
#define GM_CHUNK_BYTES (8u << 20)

/* ---- the command ------------------------------------------------------------------ */

/* What one gen-model run holds (freed by gm_ctx_free; the output file is
 * removed when it was not finished). */
struct gm_ctx {
	struct gm_opts o;
	struct gguf_file *voc;   /* the vocabulary GGUF */
	struct gguf_w *w;        /* the writer: metadata and tensor table */
	struct gm_tensor *t;     /* (n_t) the tensors, in file order */
	size_t n_t;
	uint32_t n_vocab, n_layer;
	uint64_t total;          /* tensor bytes */
	struct tkv_threads *tp;
	unsigned char *buf;      /* one chunk of quantized rows */
	float *scratch;          /* (threads, widest row) floats */
	FILE *fp;
	struct tkv_error err;
};

/* Prints the library's message for st; CLI_ERR. */
static int gm_fail(const struct gm_ctx *x, int st)
{
	cli_print_error("gen-model", st, &x->err);
	return CLI_ERR;
}

/* The vocabulary file and the model's token count (the shape's, with a note
 * when the vocabulary is padded, cut or meant for another shape). */
static int gm_open_vocab(struct gm_ctx *x)
{
	const struct gm_opts *o = &x->o;
	const struct gguf_kv *tokens;
	int st;

	if ((st = gguf_open(&x->voc, o->vocab, NULL, &x->err)) ||
	    (st = gguf_get_arr(x->voc, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tokens, &x->err)))
		return gm_fail(x, st);
	x->n_vocab = (uint32_t)tokens->v.arr.n;
	if (o->shape->vocab) {
		if (x->n_vocab != o->shape->n_vocab)
			fprintf(stderr, "tierkv gen-model: %s has %u tokens; %s has %u: %s to fit\n", o->vocab, x->n_vocab,
				o->shape->name, o->shape->n_vocab, x->n_vocab < o->shape->n_vocab ? "padded" : "cut");
		if (!strstr(o->vocab, o->shape->vocab))
			fprintf(stderr, "tierkv gen-model: note: %s is meant for ggml-vocab-%s.gguf\n", o->shape->name,
				o->shape->vocab);
		x->n_vocab = o->shape->n_vocab;
	} else if (x->n_vocab != o->shape->n_vocab) {
		fprintf(stderr, "tierkv gen-model: %s has %u tokens; the model gets %u rows of embeddings (the shape's is %u)\n",
			o->vocab, x->n_vocab, x->n_vocab, o->shape->n_vocab);
	}
	return CLI_OK;
}

/* The tensor list, and the writer's metadata and tensor table. */
static int gm_header(struct gm_ctx *x)
{
	size_t fallback = 0;
	int st;

	if (gm_tensors(&x->o, x->n_vocab, x->n_layer, &x->t, &x->n_t) || gguf_w_init(&x->w, NULL)) {
		fprintf(stderr, "tierkv gen-model: out of memory\n");
		return CLI_ERR;
	}
	gm_meta(x->w, &x->o, x->voc, x->n_vocab, x->n_layer);
	for (size_t i = 0; i < x->n_t; i++) {
		gguf_w_add_tensor(x->w, x->t[i].name, x->t[i].n_dims, x->t[i].ne, x->t[i].type);
		fallback += x->t[i].n_dims >= 2 && x->t[i].type != x->o.type && x->t[i].type != TKV_F32;
		x->total += gguf_w_tensor_nbytes(x->w, i);
	}
	if (fallback)
		fprintf(stderr, "tierkv gen-model: %zu tensors have rows that are not whole %s blocks; they are q8_0\n",
			fallback, tkv_dtype_name(x->o.type));
	if ((st = gguf_w_error(x->w)->status)) {
		x->err = *gguf_w_error(x->w);
		return gm_fail(x, st);
	}
	return CLI_OK;
}

/* The output file, the threads and the chunk buffers. */
static int gm_prepare(struct gm_ctx *x)
{
	uint64_t widest = 0;
	int st;

	if (!(x->fp = fopen(x->o.out, "wb"))) {
		fprintf(stderr, "tierkv gen-model: cannot create %s: %s\n", x->o.out, strerror(errno));
		return CLI_ERR;
	}
	if ((st = tkv_threads_init(&x->tp, x->o.threads ? (int)x->o.threads : tkv_default_threads(), &x->err)))
		return gm_fail(x, st);
	for (size_t i = 0; i < x->n_t; i++)
		if (x->t[i].ne[0] > widest)
			widest = x->t[i].ne[0];
	x->buf = malloc(GM_CHUNK_BYTES + widest * 4);
	x->scratch = malloc((size_t)tkv_threads_n(x->tp) * widest * sizeof(float));
	if (!x->buf || !x->scratch) {
		fprintf(stderr, "tierkv gen-model: out of memory\n");
		return CLI_ERR;
	}
	return CLI_OK;
}

/* The header, then every tensor's rows in chunks generated by all threads,
 * then the file closed. */
static int gm_write(struct gm_ctx *x)
{
	int st;

	if ((st = gguf_w_start_file(x->w, x->fp)))
		goto fail;
	fprintf(stderr, "tierkv gen-model: %s, %s, %u layers, %u tokens, %.2f GiB of tensors -> %s\n", x->o.shape->name,
		tkv_dtype_name(x->o.type), x->n_layer, x->n_vocab, (double)x->total / (1u << 30), x->o.out);
	for (size_t i = 0; i < x->n_t; i++) {
		const struct gm_tensor *t = &x->t[i];
		size_t rb = tkv_dtype_row_size(t->type, t->ne[0]);
		int64_t step = (int64_t)(GM_CHUNK_BYTES / rb) > 0 ? (int64_t)(GM_CHUNK_BYTES / rb) : 1;

		int64_t rows = (int64_t)(t->ne[1] * t->ne[2]);

		for (int64_t r = 0; r < rows; r += step) {
			struct gm_job j = { t, x->o.seed, i, r, 0, rb, x->buf, x->scratch };

			j.n_rows = rows - r < step ? rows - r : step;
			tkv_threads_run(x->tp, gm_worker, &j);
			if ((st = gguf_w_write(x->w, x->buf, (size_t)j.n_rows * rb)))
				goto fail;
		}
	}
	if ((st = gguf_w_finish(x->w)))
		goto fail;
	st = fclose(x->fp);
	x->fp = NULL;
	if (st) {
		fprintf(stderr, "tierkv gen-model: cannot write %s: %s\n", x->o.out, strerror(errno));
		return CLI_ERR;
	}
	return CLI_OK;
fail:
	x->err = *gguf_w_error(x->w);
	return gm_fail(x, st);
}

static void gm_ctx_free(struct gm_ctx *x)
{
	if (x->fp) {
		fclose(x->fp);
		remove(x->o.out);
	}
	free(x->buf);
	free(x->scratch);
	free(x->t);
	tkv_threads_free(x->tp);
	gguf_w_free(x->w);
	gguf_close(x->voc);
}

int cli_gen_model(int argc, char **argv)
{
	struct gm_ctx x = { 0 };
	double t0 = cli_now();
	int rc;

	rc = gm_parse(argc, argv, &x.o);
	if (rc == -1)
		return CLI_OK;
	if (rc)
		return rc;
	x.n_layer = x.o.layers ? (uint32_t)x.o.layers : x.o.shape->n_layer;
	if (!(rc = gm_open_vocab(&x)) && !(rc = gm_header(&x)) && !(rc = gm_prepare(&x)) && !(rc = gm_write(&x)))
		fprintf(stderr, "tierkv gen-model: wrote %s in %.1f s\n", x.o.out, cli_now() - t0);
	gm_ctx_free(&x);
	return rc;
}
