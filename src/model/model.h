/* model.h - a loaded model: weights from GGUF (load.c) and the forward pass
 * shared by every family (forward.c); the family's description is its row
 * of arch.c.
 *
 * Shapes in comments are (rows, cols) of the matrix as used: y = W x with
 * W (out, in). In GGUF terms ne[0] = in (contiguous), ne[1] = out. */
#ifndef TKV_MODEL_MODEL_H
#define TKV_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "model/arch.h"
#include "ops/ops.h"
#include "tierkv.h"

struct gguf_file;
struct kv_cache;
struct kv_seg;
struct tok;
struct tpool;

/* A layer's routed experts (moe.c); all zero in a dense layer. The experts'
 * matrices are the 3-D tensors read as 2-D: expert e's rows of gate and up
 * are [e * n_ff_exp, (e + 1) * n_ff_exp), of down [e * dim, (e + 1) * dim). */
struct model_moe {
	struct ops_mat router;       /* (n_expert, dim) ffn_gate_inp */
	struct ops_mat gate;         /* (n_expert * n_ff_exp, dim) ffn_gate_exps */
	struct ops_mat up;           /* (n_expert * n_ff_exp, dim) ffn_up_exps */
	struct ops_mat down;         /* (n_expert * dim, n_ff_exp) ffn_down_exps */
};

struct model_layer {
	const float *attn_norm;      /* (dim) */
	struct ops_mat wq;           /* (n_head*head_dim, dim) */
	struct ops_mat wk;           /* (n_kv_head*head_dim, dim) */
	struct ops_mat wv;           /* (n_kv_head*head_dim, dim); the three are row ranges
				      * of one attn_qkv when the file fuses them */
	const float *bq, *bk, *bv;   /* (n_head*head_dim), (n_kv_head*head_dim) x2 biases, or NULL */
	const float *q_norm, *k_norm;/* (head_dim) per-head RMSNorm weights, or NULL */
	struct ops_mat wo;           /* (dim, n_head*head_dim) */
	const float *attn_post_norm; /* (dim) RMSNorm of the attention output, or NULL */
	const float *ffn_norm;       /* (dim) */
	struct ops_mat w_gate;       /* (n_ff, dim) */
	struct ops_mat w_up;         /* (n_ff, dim); gate and up are the two halves of
				      * one ffn_up when the file fuses them */
	struct ops_mat w_down;       /* (dim, n_ff); the three are empty in a layer of experts */
	struct model_moe moe;        /* routed experts (router.rows = n_expert), or empty */
	const float *ffn_post_norm;  /* (dim) RMSNorm of the FFN output, or NULL */
	const float *inv_freq[2];    /* (n_rot/2) rotary frequencies for contexts up to
				      * n_ctx_orig and beyond (the same table unless LongRoPE) */
	uint32_t window;             /* sliding window in tokens: a query at p sees keys
				      * p - window < pos <= p; 0 = global attention */
};

/* Family hyperparameters beyond tkv_model_info's. */
struct model_hp {
	float embd_scale;       /* the embeddings' factor (1, or sqrt(dim)) */
	float attn_softcap;     /* attention logits: cap * tanh(l / cap); 0 = none */
	float final_softcap;    /* output logits likewise; 0 = none */
	float rope_mscale;      /* LongRoPE attention factor on the rotation (1 = none) */
	uint32_t n_ctx_orig;    /* contexts above this use the long rotary table */
	uint32_t n_swa;         /* the sliding window of the sliding layers, 0 = none */
	uint32_t n_swa_layers;  /* layers that slide */
	float rope_base_swa;    /* rope base of the sliding layers */
	uint32_t n_expert;      /* routed experts per layer, 0 = dense */
	uint32_t n_expert_used; /* experts each token takes (top-k) */
	uint32_t n_ff_exp;      /* an expert's feed-forward width */
};

struct tkv_model {
	struct tkv_alloc *alloc;
	struct gguf_file *gguf;      /* owns the mapping all weights point into */
	struct tok *tok;
	const struct model_arch *arch;
	struct tkv_model_info info;
	struct model_hp hp;
	struct ops_mat tok_embd;     /* (n_vocab, dim) */
	const float *out_norm;       /* (dim) */
	struct ops_mat output;       /* (n_vocab, dim); the embedding when tied */
	struct model_layer *layers;  /* [n_layer] */
	float *inv_freq;             /* (4, n_rot/2) rotary tables, owned: global short, global
				      * long, sliding short, sliding long */
	void *packed;                /* the matrices ops_repack interleaved (owned), or NULL */
	size_t packed_bytes;
};

/* Activations for a chunk of up to n_batch tokens. */
struct model_scratch {
	uint32_t n_batch, n_threads;
	bool long_ctx;  /* the context passes n_ctx_orig: long rotary tables */
	float *x;       /* (n_batch, dim) residual stream */
	float *xb;      /* (n_batch, dim) normed input */
	float *q;       /* (n_batch, n_head*head_dim) */
	float *k;       /* (n_batch, n_kv_head*head_dim) */
	float *v;       /* (n_batch, n_kv_head*head_dim) */
	float *ao;      /* (n_batch, n_head*head_dim) attention output */
	float *o;       /* (n_batch, dim) projected attention / ffn output */
	float *hg;      /* (n_batch, max(n_ff, n_ff_exp)) gate */
	float *hu;      /* (n_batch, max(n_ff, n_ff_exp)) up */
	/* routed experts (moe.c); NULL for a dense model */
	float *probs;   /* (n_batch, n_expert) router logits, then probabilities */
	float *sel_w;   /* (n_batch, n_expert_used) the selected experts' weights */
	uint32_t *sel;  /* (n_batch, n_expert_used) the selected experts */
	uint32_t *order;/* (n_batch * n_expert_used) indices into sel, grouped by expert */
	uint32_t *start;/* (n_expert + 1) each expert's first entry in order */
	float *ex;      /* (n_batch, dim) the rows one expert takes, gathered */
	float *ey;      /* (n_batch, dim) that expert's output for them */
	uint32_t *rows; /* (n_batch) rows whose logits are wanted */
	void *work;     /* matmul workspace: n_batch quantized activation rows and
			 * one weight panel per thread (ops_matmul_work_size) */
	size_t work_size;
};

/* Scratch for chunks of n_batch rows of sequences of at most n_ctx positions. */
int model_scratch_init(struct model_scratch *s, const struct tkv_model *m, uint32_t n_batch, uint32_t n_ctx,
		       uint32_t n_threads, struct tkv_alloc *a, struct tkv_error *err);
void model_scratch_free(struct model_scratch *s, struct tkv_alloc *a);

/* Runs a batch of rows (at most n_batch) through the model: ids[r] is the token
 * of row r; segs (kv/cache.h) say which sequence and position each row has.
 * Per layer the rows' keys and values go to the cache (the sequences must
 * have room: kv_seq_reserve) and their queries attend through it
 * (kv_cache_store, kv_cache_attend). logits receives n_vocab floats for each
 * of the n_out rows listed in out_rows, in that order. */
void model_forward(const struct tkv_model *m, struct model_scratch *s, struct tpool *tp, struct kv_cache *kv,
		   const int32_t *ids, const struct kv_seg *segs, uint32_t n_segs, const uint32_t *out_rows,
		   uint32_t n_out, float *logits);

/* s->o (n, dim) = the routed experts' feed-forward of the n normed rows
 * s->xb in a layer of experts (moe.c). */
void moe_ffn(const struct tkv_model *m, const struct model_moe *E, struct model_scratch *s, struct tpool *tp,
	     uint32_t n);

/* Each layer's sliding window (0 = global) into window[n_layer]. */
void model_layer_windows(const struct tkv_model *m, uint32_t *window);

const struct tok *model_tokenizer(const struct tkv_model *m);
const struct gguf_file *model_gguf(const struct tkv_model *m);

#endif
