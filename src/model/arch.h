/* arch.h - one description per model family.
 *
 * Every family GGUF files name in general.architecture is one row of one
 * table (arch.c): the metadata keys it reads beyond the common ones, the
 * tensors each layer must have, the rotary layout, the FFN's activation, the
 * sliding-window pattern and the defaults of its soft-caps. Loading
 * (load.c) reads a file through its row; the forward pass (forward.c) is one
 * for every family and consults only the hooks and the per-layer fields
 * loading filled in - never the family's name.
 *
 * Tensors every family may have (what llama.cpp's loaders accept for all of
 * them): attn_qkv.weight instead of attn_q/k/v (phi3), Q/K/V biases (qwen2),
 * ffn_up.weight of 2*n_ff rows without ffn_gate (phi3: gate rows first),
 * a separate output.weight or the embedding tied. */
#ifndef TKV_MODEL_ARCH_H
#define TKV_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Tensors a family requires in every layer (beyond the common ones). */
#define ARCH_T_QK_NORM   (1u << 0)  /* attn_q_norm, attn_k_norm: (head_dim) per-head RMSNorm */
#define ARCH_T_POST_NORM (1u << 1)  /* post_attention_norm, post_ffw_norm: (dim) */

/* Where a family's layers take routed experts (mixture of experts) for the
 * feed-forward: router ffn_gate_inp (n_expert, dim) and the 3-D
 * ffn_gate_exps, ffn_up_exps (n_expert, n_ff_exp, dim), ffn_down_exps
 * (n_expert, dim, n_ff_exp); model/moe.c computes them. */
enum arch_moe {
	ARCH_MOE_NONE,     /* dense FFN only */
	ARCH_MOE_FILE,     /* experts when the file has <arch>.expert_count (Mixtral in llama) */
	ARCH_MOE_ALL,      /* every layer routes; expert_count and expert_used_count required */
};

/* Which layers slide when the file gives a window. */
enum arch_swa {
	ARCH_SWA_NONE,     /* the key is ignored (llama.cpp's phi3 does the same) */
	ARCH_SWA_ALL,      /* every layer (Mistral) */
	ARCH_SWA_PATTERN,  /* layer l slides unless l % swa_period == swa_period - 1 */
};

/* Rotates the first n_rot dims of n_heads heads of head_dim floats to pos:
 * pairs (2i, 2i+1) (llama) or (i, i + n_rot/2) (NeoX), angle pos * inv_freq[i],
 * the rotated dims multiplied by mscale (LongRoPE's attention factor; 1 else). */
typedef void (*arch_rope_fn)(float *x, int n_heads, int head_dim, int n_rot, float pos, const float *inv_freq,
			     float mscale);
/* h = act(g) * u over n elements (h may alias g): SwiGLU or GeGLU. */
typedef void (*arch_glu_fn)(float *h, const float *g, const float *u, int n);

struct model_arch {
	const char *name;         /* general.architecture, and the prefix of its keys */
	arch_rope_fn rope;
	arch_glu_fn glu;
	uint32_t need;            /* ARCH_T_* */
	bool embd_scale;          /* embeddings times sqrt(dim) (Gemma) */
	enum arch_swa swa;
	uint32_t swa_period;      /* ARCH_SWA_PATTERN: one global layer in this many */
	uint32_t swa_default;     /* window when the file has no attention.sliding_window (0: none) */
	bool rope_base_swa;       /* sliding layers rotate with rope.freq_base_swa (default 10000) */
	float attn_softcap;       /* default attn_logit_softcapping (0: none; the key overrides) */
	float final_softcap;      /* default final_logit_softcapping (0: none; the key overrides) */
	bool longrope;            /* rope_factors_short/long and rope.scaling.attn_factor (phi3) */
	enum arch_moe moe;
	bool moe_ff_key;          /* the experts' width is <arch>.expert_feed_forward_length
				   * (default feed_forward_length / expert_used_count), not
				   * feed_forward_length */
	bool moe_norm;            /* the top-k softmax weights are divided by their sum */
};

/* The row of a family, or NULL when it is not supported. */
const struct model_arch *arch_find(const char *name, size_t len);
/* "llama, qwen2, ..." for messages. */
const char *arch_names(void);

#endif
