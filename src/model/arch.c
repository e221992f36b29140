/* arch.c - the table of model families (arch.h).
 *
 * Each row says what llama.cpp's implementation of the family does (read in
 * its source, src/models/<name>.cpp, and the converters' metadata):
 *   llama   RMSNorm, SwiGLU, rotation of adjacent pairs; a file with
 *           llama.attention.sliding_window (Mistral) slides in every layer
 *   qwen2   as llama with NeoX rotation and Q/K/V biases (in the file)
 *   qwen3   as qwen2 without biases, with per-head RMSNorm of q and k
 *   gemma2  NeoX, GeGLU, norms after attention and FFN as well, embeddings
 *           times sqrt(dim), attention logits soft-capped at 50 and final
 *           logits at 30, sliding window 4096 on even layers
 *   gemma3  as gemma2 without soft-caps, with q/k norm, five sliding layers
 *           to one global, the sliding ones at rope base 10000
 *   phi3    NeoX, fused attn_qkv and gate/up (in the file), LongRoPE:
 *           per-dimension short/long frequency factors and an attention
 *           factor on the rotation
 *   qwen3moe as qwen3 with routed experts in every layer: softmax over the
 *           router's logits, the top expert_used_count experts, their
 *           weights divided by their sum, experts of
 *           expert_feed_forward_length
 * A llama file with llama.expert_count (Mixtral) routes the same way (the
 * renormalised top-k softmax is the softmax of the top-k logits) with
 * experts of feed_forward_length. */
#include "model/arch.h"

#include <string.h>

#include "ops/ops.h"

static void rope_norm(float *x, int n_heads, int head_dim, int n_rot, float pos, const float *inv_freq, float mscale)
{
	ops_rope(x, n_heads, head_dim, n_rot, pos, inv_freq);
	if (mscale != 1.0f)
		for (int h = 0; h < n_heads; h++)
			for (int i = 0; i < n_rot; i++)
				x[(size_t)h * head_dim + i] *= mscale;
}

static const struct model_arch arch_table[] = {
	{ .name = "llama", .rope = rope_norm, .glu = ops_swiglu, .swa = ARCH_SWA_ALL, .moe = ARCH_MOE_FILE,
	  .moe_norm = true },
	{ .name = "qwen2", .rope = ops_rope_neox, .glu = ops_swiglu },
	{ .name = "qwen3", .rope = ops_rope_neox, .glu = ops_swiglu, .need = ARCH_T_QK_NORM },
	{ .name = "gemma2", .rope = ops_rope_neox, .glu = ops_geglu, .need = ARCH_T_POST_NORM, .embd_scale = true,
	  .swa = ARCH_SWA_PATTERN, .swa_period = 2, .swa_default = 4096, .attn_softcap = 50.0f,
	  .final_softcap = 30.0f },
	{ .name = "gemma3", .rope = ops_rope_neox, .glu = ops_geglu, .need = ARCH_T_QK_NORM | ARCH_T_POST_NORM,
	  .embd_scale = true, .swa = ARCH_SWA_PATTERN, .swa_period = 6, .rope_base_swa = true },
	{ .name = "phi3", .rope = ops_rope_neox, .glu = ops_swiglu, .longrope = true },
	{ .name = "qwen3moe", .rope = ops_rope_neox, .glu = ops_swiglu, .need = ARCH_T_QK_NORM, .moe = ARCH_MOE_ALL,
	  .moe_ff_key = true, .moe_norm = true },
};

const struct model_arch *arch_find(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
		if (strlen(arch_table[i].name) == len && !memcmp(arch_table[i].name, name, len))
			return &arch_table[i];
	return NULL;
}

const char *arch_names(void)
{
	return "llama, qwen2, qwen3, gemma2, gemma3, phi3, qwen3moe";
}
