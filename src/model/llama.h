/* llama.h - the llama architecture: weights from GGUF and the forward pass.
 *
 * Shapes in comments are (rows, cols) of the matrix as used: y = W x with
 * W (out, in). In GGUF terms ne[0] = in (contiguous), ne[1] = out. */
#ifndef TKV_MODEL_LLAMA_H
#define TKV_MODEL_LLAMA_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/ops.h"
#include "tierkv.h"

struct gguf_file;
struct kv_cache;
struct kv_seg;
struct tok;
struct tpool;

struct llama_layer {
	const float *attn_norm;  /* (dim) */
	struct ops_mat wq;       /* (n_head*head_dim, dim) */
	struct ops_mat wk;       /* (n_kv_head*head_dim, dim) */
	struct ops_mat wv;       /* (n_kv_head*head_dim, dim) */
	struct ops_mat wo;       /* (dim, n_head*head_dim) */
	const float *ffn_norm;   /* (dim) */
	struct ops_mat w_gate;   /* (n_ff, dim) */
	struct ops_mat w_up;     /* (n_ff, dim) */
	struct ops_mat w_down;   /* (dim, n_ff) */
};

struct tkv_model {
	struct tkv_alloc *alloc;
	struct gguf_file *gguf;      /* owns the mapping all weights point into */
	struct tok *tok;
	struct tkv_model_info info;
	struct ops_mat tok_embd;     /* (n_vocab, dim) */
	const float *out_norm;       /* (dim) */
	struct ops_mat output;       /* (n_vocab, dim); the embedding when tied */
	struct llama_layer *layers;  /* [n_layer] */
	float *inv_freq;             /* (n_rot/2) rotary inverse frequencies, scaling applied */
	void *packed;                /* the matrices ops_repack interleaved (owned), or NULL */
	size_t packed_bytes;
};

/* Activations for a chunk of up to n_batch tokens. */
struct llama_scratch {
	uint32_t n_batch, n_threads;
	float *x;       /* (n_batch, dim) residual stream */
	float *xb;      /* (n_batch, dim) normed input */
	float *q;       /* (n_batch, n_head*head_dim) */
	float *k;       /* (n_batch, n_kv_head*head_dim) */
	float *v;       /* (n_batch, n_kv_head*head_dim) */
	float *ao;      /* (n_batch, n_head*head_dim) attention output */
	float *o;       /* (n_batch, dim) projected attention / ffn output */
	float *hg;      /* (n_batch, n_ff) gate */
	float *hu;      /* (n_batch, n_ff) up */
	uint32_t *rows; /* (n_batch) rows whose logits are wanted */
	void *work;     /* matmul workspace: n_batch quantized activation rows and
			 * one weight panel per thread (ops_matmul_work_size) */
	size_t work_size;
};

int llama_scratch_init(struct llama_scratch *s, const struct tkv_model *m, uint32_t n_batch,
		       uint32_t n_threads, struct tkv_alloc *a, struct tkv_error *err);
void llama_scratch_free(struct llama_scratch *s, struct tkv_alloc *a);

/* Runs a batch of rows (at most n_batch) through the model: ids[r] is the token
 * of row r; segs (kv/cache.h) say which sequence and position each row has.
 * Per layer the rows' keys and values go to the cache (the sequences must
 * have room: kv_seq_reserve) and their queries attend through it
 * (kv_cache_store, kv_cache_attend). logits receives n_vocab floats for each
 * of the n_out rows listed in out_rows, in that order. */
void llama_forward(const struct tkv_model *m, struct llama_scratch *s, struct tpool *tp, struct kv_cache *kv,
		   const int32_t *ids, const struct kv_seg *segs, uint32_t n_segs, const uint32_t *out_rows,
		   uint32_t n_out, float *logits);

const struct tok *llama_tokenizer(const struct tkv_model *m);
const struct gguf_file *llama_gguf(const struct tkv_model *m);

#endif
