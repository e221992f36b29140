/* trn.h - a llama model in training: parameters, forward pass with the
 * activations kept for the backward pass, the backward pass, AdamW.
 *
 * The architecture is the one src/model/llama.c runs (RMSNorm, RoPE on
 * adjacent pairs, grouped-query attention, SwiGLU, untied output), so an
 * exported model gives the same logits there (up to float rounding).
 *
 * Shapes are (rows, cols), row-major; a weight W (out, in) maps x (in) to
 * W x (out) and is stored as in GGUF (ne[0] = in). n = B * T rows of tokens. */
#ifndef TKV_TRAIN_TRN_H
#define TKV_TRAIN_TRN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tierkv.h"

struct tpool;

struct trn_cfg {
	uint32_t dim, n_layer, n_head, n_kv_head, n_ff, n_vocab, n_ctx;
	float rope_base, rms_eps;
};

/* One parameter tensor: GGUF name, shape and its place in the flat arrays. */
struct trn_tensor {
	char name[48];
	uint32_t n_dims;
	uint64_t ne[2];     /* ne[0] = in (contiguous), ne[1] = out */
	size_t off, n;      /* offset and count in floats */
	bool decay;         /* weight decay applies (matrices, not norms) */
};

struct trn_layer {
	float *attn_norm;   /* (dim) */
	float *wq;          /* (n_head*hd, dim) */
	float *wk;          /* (n_kv_head*hd, dim) */
	float *wv;          /* (n_kv_head*hd, dim) */
	float *wo;          /* (dim, n_head*hd) */
	float *ffn_norm;    /* (dim) */
	float *w_gate;      /* (n_ff, dim) */
	float *w_up;        /* (n_ff, dim) */
	float *w_down;      /* (dim, n_ff) */
};

struct trn_weights {
	float *tok_embd;    /* (n_vocab, dim) */
	float *out_norm;    /* (dim) */
	float *output;      /* (n_vocab, dim) */
	struct trn_layer *l; /* [n_layer] */
};

struct trn_model {
	struct trn_cfg cfg;
	uint32_t head_dim;
	struct trn_tensor *t; /* [n_t] in GGUF file order */
	size_t n_t, n_params;
	float *w, *g;         /* (n_params) parameters and their gradients (owned) */
	struct trn_weights pw, gw; /* views into w and g */
	float *inv_freq;      /* (head_dim/2) rope inverse frequencies */
};

/* What the backward pass needs of one layer's forward pass, per row. */
struct trn_lacts {
	float *x;        /* (n, dim) input of the layer (residual stream) */
	float *xb;       /* (n, dim) rmsnorm(x) * attn_norm */
	float *q;        /* (n, n_head*hd) after rope */
	float *k, *v;    /* (n, n_kv_head*hd) k after rope */
	float *ao;       /* (n, n_head*hd) attention output */
	float *lse;      /* (B, n_head, T) log-sum-exp of each query's scaled logits */
	float *xm;       /* (n, dim) x + Wo ao */
	float *xb2;      /* (n, dim) rmsnorm(xm) * ffn_norm */
	float *hg, *hu;  /* (n, n_ff) gate and up projections */
	float *h;        /* (n, n_ff) silu(hg) * hu */
};

struct trn_acts {
	int B, T, n_threads;
	struct trn_lacts *l;  /* [n_layer] */
	float *xL;       /* (n, dim) output of the last layer */
	float *xf;       /* (n, dim) rmsnorm(xL) * out_norm */
	float *logits;   /* (n, n_vocab); after the forward pass, dloss/dlogits */
	int32_t *tok;    /* (B, T+1) the batch: inputs 0..T-1, targets 1..T */
	/* backward scratch */
	float *dx, *dxb, *dq, *dk, *dv, *dao, *dh, *dg, *du; /* like the activations */
	float *att;      /* (n_threads, 2 TRN_QBLK + 2 hd, T) per thread: attention
			  * probabilities, dP, Kᵀ, Vᵀ */
	float *mem;      /* one block holding all of the above (owned) */
};

#define TRN_QBLK 64 /* queries per attention block */

/* Builds the tensor table for cfg and allocates parameters and gradients
 * (zeroed). TKV_ERR_ARG for a shape the trainer cannot take. */
int trn_model_init(struct trn_model *m, const struct trn_cfg *cfg, struct tkv_error *err);
void trn_model_free(struct trn_model *m);
/* N(0, std) matrices (residual outputs wo, w_down scaled by 1/sqrt(2 n_layer)),
 * norms 1. Deterministic in seed. */
void trn_model_randomize(struct trn_model *m, uint64_t seed, float std);

int trn_acts_init(struct trn_acts *a, const struct trn_model *m, int B, int T, int n_threads,
		  struct tkv_error *err);
void trn_acts_free(struct trn_acts *a);

/* Forward pass over a->tok (B, T+1), filled by the caller. Returns the summed
 * negative log-likelihood (nats) of the B*T targets; with nll not NULL also
 * each target's (B*T). Leaves dloss/dlogits of the mean loss in a->logits. */
double trn_forward(const struct trn_model *m, struct trn_acts *a, struct tpool *tp, float *nll);
/* Adds the gradient of the mean loss of the last trn_forward to m->g. */
void trn_backward(struct trn_model *m, struct trn_acts *a, struct tpool *tp);

struct trn_adamw {
	float lr, beta1, beta2, eps, wd;
};
/* One AdamW step at step number t (1-based) with moments mom, vel (n_params). */
void trn_adamw_step(struct trn_model *m, const struct trn_adamw *o, float *mom, float *vel, uint64_t t);
/* Global L2 norm of the gradient; scales it to max_norm when above (max_norm > 0). */
double trn_clip_grad(struct trn_model *m, double max_norm);

#endif
