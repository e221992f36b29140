/* load.c - a model from a GGUF file: the family's row (arch.c), the common
 * hyperparameters and the family's own, every layer's tensors, the rotary
 * tables, and the interleaved copies of the matrices that have a layout of
 * their own. */
#include "model/model.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kv/cache.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "ops/dtype.h"
#include "util/alloc.h"
#include "util/cpu.h"
#include "util/status.h"
#include "util/tpool.h"


/* ---- loading ------------------------------------------------------------- */

static int hp_u32(const struct gguf_file *g, const char *arch, const char *suffix, uint32_t *out,
		  bool required, uint32_t dflt, struct tkv_error *err)
{
	char key[160];

	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	if (!gguf_find(g, key)) {
		if (required)
			return tkv_errf(err, TKV_ERR_FORMAT, "%s: missing metadata key '%s'", gguf_name(g), key);
		*out = dflt;
		return TKV_OK;
	}
	return gguf_get_u32(g, key, out, err);
}

static int hp_f32(const struct gguf_file *g, const char *arch, const char *suffix, float *out,
		  float dflt, struct tkv_error *err)
{
	char key[160];

	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	if (!gguf_find(g, key)) {
		*out = dflt;
		return TKV_OK;
	}
	return gguf_get_f32(g, key, out, err);
}

/* Looks up a 2-D weight (out, in) and checks shape and type. Returns 1 when
 * absent and optional. */
static int get_mat(const struct gguf_file *g, const char *name, uint64_t in, uint64_t out,
		   bool optional, struct ops_mat *mat, struct tkv_error *err)
{
	const struct gguf_tensor *t = gguf_find_tensor(g, name);

	if (!t) {
		if (optional)
			return 1;
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: missing tensor '%s'", gguf_name(g), name);
	}
	if (t->ne[0] != in || t->ne[1] != out || t->ne[2] != 1 || t->ne[3] != 1)
		return tkv_errf(err, TKV_ERR_FORMAT,
				"%s: tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]",
				gguf_name(g), name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
				(unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
				(unsigned long long)in, (unsigned long long)out);
	if (!ops_type_supported(t->type))
		return tkv_errf(err, TKV_ERR_UNSUPPORTED,
				"%s: tensor '%s': unsupported tensor type %s (supported: f32, f16, bf16, q2_k, q3_k, "
				"q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0, iq4_nl, iq4_xs)",
				gguf_name(g), name, tkv_dtype_name(t->type));
	mat->data = t->data;
	mat->type = t->type;
	mat->rows = (int64_t)out;
	mat->cols = (int64_t)in;
	mat->row_bytes = tkv_dtype_row_size(t->type, in);
	return TKV_OK;
}

/* Looks up a 3-D stack of n_exp weights (out, in) each (the experts of one
 * layer) and describes it as one (n_exp * out, in) matrix: expert e's rows
 * start at e * out. */
static int get_experts(const struct gguf_file *g, const char *name, uint64_t in, uint64_t out, uint64_t n_exp,
		       struct ops_mat *mat, struct tkv_error *err)
{
	const struct gguf_tensor *t = gguf_find_tensor(g, name);

	if (!t)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: missing tensor '%s'", gguf_name(g), name);
	if (t->ne[0] != in || t->ne[1] != out || t->ne[2] != n_exp || t->ne[3] != 1)
		return tkv_errf(err, TKV_ERR_FORMAT,
				"%s: tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu, %llu] "
				"(%llu experts)", gguf_name(g), name, (unsigned long long)t->ne[0],
				(unsigned long long)t->ne[1], (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
				(unsigned long long)in, (unsigned long long)out, (unsigned long long)n_exp,
				(unsigned long long)n_exp);
	if (!ops_type_supported(t->type))
		return tkv_errf(err, TKV_ERR_UNSUPPORTED, "%s: tensor '%s': unsupported tensor type %s",
				gguf_name(g), name, tkv_dtype_name(t->type));
	mat->data = t->data;
	mat->type = t->type;
	mat->rows = (int64_t)(out * n_exp);
	mat->cols = (int64_t)in;
	mat->row_bytes = tkv_dtype_row_size(t->type, in);
	return TKV_OK;
}

/* A 1-D f32 vector of n elements (norm weights, rope factors). */
static int get_vec(const struct gguf_file *g, const char *name, uint64_t n, bool optional,
		   const float **out, struct tkv_error *err)
{
	const struct gguf_tensor *t = gguf_find_tensor(g, name);

	if (!t) {
		if (optional)
			return 1;
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: missing tensor '%s'", gguf_name(g), name);
	}
	if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: tensor '%s' has shape [%llu, %llu, ...], expected [%llu]",
				gguf_name(g), name, (unsigned long long)t->ne[0],
				(unsigned long long)t->ne[1], (unsigned long long)n);
	if (t->type != TKV_F32)
		return tkv_errf(err, TKV_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, expected f32",
				gguf_name(g), name, tkv_dtype_name(t->type));
	*out = t->data;
	return TKV_OK;
}

/* The dimensions every family has, under its own key prefix. */
static int load_dims(struct tkv_model *m, const char *a, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	struct tkv_model_info *in = &m->info;
	uint32_t key_len, val_len;
	char key[160];
	int st;

	if ((st = hp_u32(g, a, "embedding_length", &in->dim, true, 0, err)) ||
	    (st = hp_u32(g, a, "block_count", &in->n_layer, true, 0, err)) ||
	    (st = hp_u32(g, a, "feed_forward_length", &in->n_ff, true, 0, err)) ||
	    (st = hp_u32(g, a, "attention.head_count", &in->n_head, true, 0, err)) ||
	    (st = hp_u32(g, a, "attention.head_count_kv", &in->n_kv_head, false, in->n_head, err)) ||
	    (st = hp_u32(g, a, "context_length", &in->n_ctx_train, true, 0, err)) ||
	    (st = hp_f32(g, a, "attention.layer_norm_rms_epsilon", &in->rms_eps, 1e-5f, err)) ||
	    (st = hp_f32(g, a, "rope.freq_base", &in->rope_base, 10000.0f, err)))
		return st;
	if (in->dim == 0 || in->n_layer == 0 || in->n_head == 0 || in->n_kv_head == 0 || in->n_ff == 0 ||
	    in->n_ctx_train == 0)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: zero in hyperparameters (dim %u, layers %u, heads %u/%u, ffn %u, ctx %u)",
				gguf_name(g), in->dim, in->n_layer, in->n_head, in->n_kv_head, in->n_ff, in->n_ctx_train);
	if (in->n_layer > 4096 || in->n_head > 4096 || in->dim > 1u << 20 || in->n_ff > 1u << 22)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: hyperparameters out of range (dim %u, layers %u, heads %u, ffn %u)",
				gguf_name(g), in->dim, in->n_layer, in->n_head, in->n_ff);
	if (in->n_head % in->n_kv_head)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: %u query heads are not a multiple of %u KV heads",
				gguf_name(g), in->n_head, in->n_kv_head);
	snprintf(key, sizeof key, "%s.attention.key_length", a);
	if (!gguf_find(g, key) && in->dim % in->n_head)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: embedding %u not divisible by %u heads",
				gguf_name(g), in->dim, in->n_head);
	in->head_dim = in->dim / in->n_head;
	if ((st = hp_u32(g, a, "attention.key_length", &key_len, false, in->head_dim, err)) ||
	    (st = hp_u32(g, a, "attention.value_length", &val_len, false, in->head_dim, err)))
		return st;
	if (key_len != val_len)
		return tkv_errf(err, TKV_ERR_UNSUPPORTED, "%s: key length %u differs from value length %u",
				gguf_name(g), key_len, val_len);
	in->head_dim = key_len;
	if (in->head_dim == 0 || in->head_dim > KV_MAX_HEAD_DIM || in->head_dim % 2)
		return tkv_errf(err, TKV_ERR_UNSUPPORTED, "%s: head dimension %u (must be even, at most %d)",
				gguf_name(g), in->head_dim, KV_MAX_HEAD_DIM);
	if ((st = hp_u32(g, a, "rope.dimension_count", &in->n_rot, false, in->head_dim, err)))
		return st;
	if (in->n_rot == 0 || in->n_rot > in->head_dim || in->n_rot % 2)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: rope dimension count %u (head dimension %u)",
				gguf_name(g), in->n_rot, in->head_dim);
	if (!(in->rms_eps > 0.0f && in->rms_eps < 1.0f))
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: rms epsilon %g out of range", gguf_name(g), in->rms_eps);
	if (!(in->rope_base > 1.0f && isfinite(in->rope_base)))
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: rope base %g out of range", gguf_name(g), in->rope_base);
	return TKV_OK;
}

/* Rope scaling: "none" or "linear" (positions divided by the factor); phi3's
 * LongRoPE files name none and carry their factors as tensors. */
static int load_rope_scaling(struct tkv_model *m, const char *a, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	struct gguf_str s;
	char key[160];
	float scale = 1.0f;
	int st;

	snprintf(key, sizeof key, "%s.rope.scaling.type", a);
	if (gguf_find(g, key)) {
		if ((st = gguf_get_str(g, key, &s, err)))
			return st;
		if (gguf_str_eq(s, "linear")) {
			if ((st = hp_f32(g, a, "rope.scaling.factor", &scale, 1.0f, err)))
				return st;
		} else if (!gguf_str_eq(s, "none") && !(m->arch->longrope && gguf_str_eq(s, "longrope"))) {
			return tkv_errf(err, TKV_ERR_UNSUPPORTED, "%s: rope scaling '%.*s' is not supported (none, linear)",
					gguf_name(g), (int)(s.len > 32 ? 32 : s.len), s.ptr);
		}
	} else {
		if ((st = hp_f32(g, a, "rope.scale_linear", &scale, 1.0f, err)))
			return st;
	}
	if (scale == 0.0f)
		scale = 1.0f;
	if (!(scale > 0.0f && scale < 1e6f))
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: rope scaling factor %g out of range", gguf_name(g), scale);
	m->info.rope_scale = scale;
	return TKV_OK;
}

/* What the family's row says it reads: sliding window, soft-caps, the
 * sliding layers' rope base, LongRoPE's original context and factor. */
static int load_family(struct tkv_model *m, const char *a, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	const struct model_arch *ar = m->arch;
	struct model_hp *hp = &m->hp;
	int st;

	hp->embd_scale = ar->embd_scale ? sqrtf((float)m->info.dim) : 1.0f;
	hp->rope_base_swa = ar->rope_base_swa ? 10000.0f : m->info.rope_base;
	hp->rope_mscale = 1.0f;
	if ((st = hp_f32(g, a, "attn_logit_softcapping", &hp->attn_softcap, ar->attn_softcap, err)) ||
	    (st = hp_f32(g, a, "final_logit_softcapping", &hp->final_softcap, ar->final_softcap, err)) ||
	    (st = hp_f32(g, a, "rope.freq_base_swa", &hp->rope_base_swa, hp->rope_base_swa, err)) ||
	    (st = hp_u32(g, a, "rope.scaling.original_context_length", &hp->n_ctx_orig, false,
			 m->info.n_ctx_train, err)))
		return st;
	if (ar->swa != ARCH_SWA_NONE &&
	    (st = hp_u32(g, a, "attention.sliding_window", &hp->n_swa, false, ar->swa_default, err)))
		return st;
	if (ar->longrope && (st = hp_f32(g, a, "rope.scaling.attn_factor", &hp->rope_mscale, 1.0f, err)))
		return st;
	if (!(hp->attn_softcap >= 0.0f && hp->attn_softcap < 1e6f) ||
	    !(hp->final_softcap >= 0.0f && hp->final_softcap < 1e6f) ||
	    !(hp->rope_mscale > 0.0f && hp->rope_mscale < 100.0f) ||
	    !(hp->rope_base_swa > 1.0f && isfinite(hp->rope_base_swa)))
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: soft-caps (%g, %g), rope attention factor %g or sliding "
				"rope base %g out of range", gguf_name(g), hp->attn_softcap, hp->final_softcap,
				hp->rope_mscale, hp->rope_base_swa);
	return TKV_OK;
}

/* The experts of a family that routes (arch.h): how many, how many a token
 * takes, and their width. */
static int load_moe_hp(struct tkv_model *m, const char *a, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	const struct model_arch *ar = m->arch;
	struct model_hp *hp = &m->hp;
	bool req = ar->moe == ARCH_MOE_ALL;
	int st;

	if (ar->moe == ARCH_MOE_NONE)
		return TKV_OK;
	if ((st = hp_u32(g, a, "expert_count", &hp->n_expert, req, 0, err)))
		return st;
	if (!hp->n_expert && !req)
		return TKV_OK;
	if ((st = hp_u32(g, a, "expert_used_count", &hp->n_expert_used, true, 0, err)))
		return st;
	if (hp->n_expert == 0 || hp->n_expert > 1024 || hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: %u experts, %u used per token (want 1 <= used <= experts <= 1024)",
				gguf_name(g), hp->n_expert, hp->n_expert_used);
	hp->n_ff_exp = m->info.n_ff;
	if (ar->moe_ff_key &&
	    (st = hp_u32(g, a, "expert_feed_forward_length", &hp->n_ff_exp, false, m->info.n_ff / hp->n_expert_used,
			 err)))
		return st;
	if (hp->n_ff_exp == 0 || hp->n_ff_exp > 1u << 22)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: expert feed-forward length %u out of range", gguf_name(g),
				hp->n_ff_exp);
	return TKV_OK;
}

static int load_hparams(struct tkv_model *m, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	struct tkv_model_info *in = &m->info;
	struct gguf_str s;
	int st;

	if ((st = gguf_get_str(g, "general.architecture", &s, err)))
		return st;
	m->arch = arch_find(s.ptr, s.len);
	if (!m->arch)
		return tkv_errf(err, TKV_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (%s)",
				gguf_name(g), (int)(s.len > 64 ? 64 : s.len), s.ptr, arch_names());
	snprintf(in->arch, sizeof in->arch, "%s", m->arch->name);
	if (gguf_find(g, "general.name") && gguf_get_str(g, "general.name", &s, NULL) == TKV_OK)
		snprintf(in->name, sizeof in->name, "%.*s", (int)(s.len > 127 ? 127 : s.len), s.ptr);
	if ((st = load_dims(m, m->arch->name, err)) || (st = load_rope_scaling(m, m->arch->name, err)) ||
	    (st = load_family(m, m->arch->name, err)) || (st = load_moe_hp(m, m->arch->name, err)))
		return st;
	return TKV_OK;
}

/* Rows [r0, r0 + n) of a matrix as a matrix of its own (a fused tensor's part). */
static struct ops_mat mat_rows(const struct ops_mat *w, int64_t r0, int64_t n)
{
	struct ops_mat v = *w;

	v.data = (const char *)w->data + (size_t)r0 * w->row_bytes;
	v.rows = n;
	return v;
}

/* An optional vector: 0 when found or absent, < 0 on a bad one. */
static int opt_vec(const struct gguf_file *g, const char *name, uint64_t n, const float **out, struct tkv_error *err)
{
	int st = get_vec(g, name, n, true, out, err);

	return st < 0 ? st : 0;
}

/* The name of layer l's tensor s, in the caller's buffer `name`. */
#define NAME(s) (snprintf(name, sizeof name, "blk.%u." s, l), name)

/* Attention of layer l: attn_qkv or attn_q/k/v, optional biases, per-head
 * q/k norms and the norm after it (required where the family says). */
static int load_attn(struct tkv_model *m, uint32_t l, struct model_layer *L, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	const struct tkv_model_info *in = &m->info;
	uint32_t qd = in->n_head * in->head_dim, kvd = in->n_kv_head * in->head_dim, hd = in->head_dim;
	bool qkn = m->arch->need & ARCH_T_QK_NORM, post = m->arch->need & ARCH_T_POST_NORM;
	const float *bqkv = NULL;
	struct ops_mat qkv;
	char name[96];
	int st;

	if ((st = get_vec(g, NAME("attn_norm.weight"), in->dim, false, &L->attn_norm, err)))
		return st;
	st = get_mat(g, NAME("attn_qkv.weight"), in->dim, (uint64_t)qd + 2 * kvd, true, &qkv, err);
	if (st < 0)
		return st;
	if (st == 0) {
		L->wq = mat_rows(&qkv, 0, qd);
		L->wk = mat_rows(&qkv, qd, kvd);
		L->wv = mat_rows(&qkv, (int64_t)qd + kvd, kvd);
		if ((st = opt_vec(g, NAME("attn_qkv.bias"), (uint64_t)qd + 2 * kvd, &bqkv, err)))
			return st;
		if (bqkv) {
			L->bq = bqkv;
			L->bk = bqkv + qd;
			L->bv = bqkv + qd + kvd;
		}
	} else if ((st = get_mat(g, NAME("attn_q.weight"), in->dim, qd, false, &L->wq, err)) ||
		   (st = get_mat(g, NAME("attn_k.weight"), in->dim, kvd, false, &L->wk, err)) ||
		   (st = get_mat(g, NAME("attn_v.weight"), in->dim, kvd, false, &L->wv, err))) {
		return st;
	}
	if (!bqkv && ((st = opt_vec(g, NAME("attn_q.bias"), qd, &L->bq, err)) ||
		      (st = opt_vec(g, NAME("attn_k.bias"), kvd, &L->bk, err)) ||
		      (st = opt_vec(g, NAME("attn_v.bias"), kvd, &L->bv, err))))
		return st;
	if ((st = get_mat(g, NAME("attn_output.weight"), qd, in->dim, false, &L->wo, err)))
		return st;
	st = get_vec(g, NAME("attn_q_norm.weight"), hd, !qkn, &L->q_norm, err);
	if (st >= 0)
		st = get_vec(g, NAME("attn_k_norm.weight"), hd, !qkn, &L->k_norm, err);
	if (st < 0)
		return st;
	if (!L->q_norm != !L->k_norm)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: layer %u has a norm for q or k but not both", gguf_name(g), l);
	st = get_vec(g, NAME("post_attention_norm.weight"), in->dim, !post, &L->attn_post_norm, err);
	return st < 0 ? st : TKV_OK;
}

/* The routed experts of layer l: the router and the three 3-D stacks. */
static int load_experts(struct tkv_model *m, uint32_t l, struct model_layer *L, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	uint32_t ne = m->hp.n_expert, nf = m->hp.n_ff_exp, dim = m->info.dim;
	char name[96];
	int st;

	if ((st = get_mat(g, NAME("ffn_gate_inp.weight"), dim, ne, false, &L->moe.router, err)) ||
	    (st = get_experts(g, NAME("ffn_gate_exps.weight"), dim, nf, ne, &L->moe.gate, err)) ||
	    (st = get_experts(g, NAME("ffn_up_exps.weight"), dim, nf, ne, &L->moe.up, err)) ||
	    (st = get_experts(g, NAME("ffn_down_exps.weight"), nf, dim, ne, &L->moe.down, err)))
		return st;
	return TKV_OK;
}

/* Feed-forward of layer l: ffn_gate and ffn_up, or one ffn_up of 2*n_ff rows
 * (gate first), or routed experts when the model has them; the norm after
 * it where the family has one. */
static int load_ffn(struct tkv_model *m, uint32_t l, struct model_layer *L, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	const struct tkv_model_info *in = &m->info;
	bool post = m->arch->need & ARCH_T_POST_NORM;
	struct ops_mat up2;
	char name[96];
	int st;

	if ((st = get_vec(g, NAME("ffn_norm.weight"), in->dim, false, &L->ffn_norm, err)))
		return st;
	if (m->hp.n_expert) {
		if ((st = load_experts(m, l, L, err)))
			return st;
	} else if (!gguf_find_tensor(g, NAME("ffn_gate.weight")) && gguf_find_tensor(g, NAME("ffn_up.weight"))) {
		if ((st = get_mat(g, NAME("ffn_up.weight"), in->dim, 2 * (uint64_t)in->n_ff, false, &up2, err)))
			return st;
		L->w_gate = mat_rows(&up2, 0, in->n_ff);
		L->w_up = mat_rows(&up2, in->n_ff, in->n_ff);
	} else if ((st = get_mat(g, NAME("ffn_gate.weight"), in->dim, in->n_ff, false, &L->w_gate, err)) ||
		   (st = get_mat(g, NAME("ffn_up.weight"), in->dim, in->n_ff, false, &L->w_up, err))) {
		return st;
	}
	if (!m->hp.n_expert && (st = get_mat(g, NAME("ffn_down.weight"), in->n_ff, in->dim, false, &L->w_down, err)))
		return st;
	st = get_vec(g, NAME("post_ffw_norm.weight"), in->dim, !post, &L->ffn_post_norm, err);
#undef NAME
	return st < 0 ? st : TKV_OK;
}

/* One rotary table: base^(-2i/n_rot), divided by linear scaling and by
 * per-dimension factors when there are (Llama 3.1's rope_freqs, LongRoPE's). */
static int rope_table(const struct gguf_file *g, const struct tkv_model_info *in, double base, double scale,
		      const float *factors, const char *fname, float *out, struct tkv_error *err)
{
	for (uint32_t i = 0; i < in->n_rot / 2; i++) {
		double f = pow(base, -2.0 * i / (double)in->n_rot) / scale;

		if (factors) {
			if (!(factors[i] > 0.0f))
				return tkv_errf(err, TKV_ERR_FORMAT, "%s: %s[%u] = %g is not positive", gguf_name(g),
						fname, i, factors[i]);
			f /= factors[i];
		}
		out[i] = (float)f;
	}
	return TKV_OK;
}

/* The four rotary tables (global and sliding layers, short and long
 * contexts) and each layer's window and tables. */
static int load_rope(struct tkv_model *m, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	struct tkv_model_info *in = &m->info;
	const struct model_arch *ar = m->arch;
	uint32_t h = in->n_rot / 2;
	const float *fs = NULL, *fl = NULL;
	const char *ns = "rope_freqs.weight", *nl = ns;
	double swa_scale = ar->rope_base_swa ? 1.0 : in->rope_scale;
	int st;

	if (ar->longrope) {
		ns = "rope_factors_short.weight";
		nl = "rope_factors_long.weight";
	}
	st = get_vec(g, ns, h, true, &fs, err);
	if (st >= 0)
		st = get_vec(g, nl, h, true, &fl, err);
	if (st < 0)
		return st;
	m->inv_freq = tkv_malloc(m->alloc, 4 * (size_t)h * sizeof(float));
	if (!m->inv_freq)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory loading rope frequencies");
	if ((st = rope_table(g, in, in->rope_base, in->rope_scale, fs, ns, m->inv_freq, err)) ||
	    (st = rope_table(g, in, in->rope_base, in->rope_scale, fl, nl, m->inv_freq + h, err)) ||
	    (st = rope_table(g, in, m->hp.rope_base_swa, swa_scale, fs, ns, m->inv_freq + 2 * h, err)) ||
	    (st = rope_table(g, in, m->hp.rope_base_swa, swa_scale, fl, nl, m->inv_freq + 3 * h, err)))
		return st;
	for (uint32_t l = 0; l < in->n_layer; l++) {
		struct model_layer *L = &m->layers[l];
		bool slide = m->hp.n_swa && (ar->swa == ARCH_SWA_ALL ||
					     (ar->swa == ARCH_SWA_PATTERN && l % ar->swa_period < ar->swa_period - 1));
		const float *t = m->inv_freq + (slide ? 2 * h : 0);

		L->window = slide ? m->hp.n_swa : 0;
		m->hp.n_swa_layers += slide;
		L->inv_freq[0] = t;
		L->inv_freq[1] = t + h;
	}
	return TKV_OK;
}

static int load_tensors(struct tkv_model *m, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	struct tkv_model_info *in = &m->info;
	int st;

	if ((st = get_mat(g, "token_embd.weight", in->dim, in->n_vocab, false, &m->tok_embd, err)) ||
	    (st = get_vec(g, "output_norm.weight", in->dim, false, &m->out_norm, err)))
		return st;
	st = get_mat(g, "output.weight", in->dim, in->n_vocab, true, &m->output, err);
	if (st < 0)
		return st;
	if (st == 1)
		m->output = m->tok_embd; /* tied embeddings */

	m->layers = tkv_calloc(m->alloc, in->n_layer, sizeof *m->layers);
	if (!m->layers)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory loading layers");
	for (uint32_t l = 0; l < in->n_layer; l++)
		if ((st = load_attn(m, l, &m->layers[l], err)) || (st = load_ffn(m, l, &m->layers[l], err)))
			return st;
	in->weight_type = m->layers[0].wq.type;
	if ((st = load_rope(m, err)))
		return st;
	in->n_swa = m->hp.n_swa_layers ? m->hp.n_swa : 0;
	in->n_swa_layers = m->hp.n_swa_layers;
	in->attn_softcap = m->hp.attn_softcap;
	in->final_softcap = m->hp.final_softcap;
	in->n_expert = m->hp.n_expert;
	in->n_expert_used = m->hp.n_expert_used;
	in->n_ff_exp = m->hp.n_ff_exp;
	for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		in->n_params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
	}
	return TKV_OK;
}

/* The matrices the matmuls read, in the order repack_weights visits them: a
 * layer's seven dense ones (empty in a layer of experts), its stacks of
 * experts when each expert is a whole number of 8-row groups (moe.c reads
 * an expert as a row range), then the output. */
#define MODEL_MATS_PER_LAYER 10
static size_t model_mats(struct tkv_model *m, struct ops_mat **out, size_t cap)
{
	size_t n = 0;
	bool x8 = m->hp.n_ff_exp % 8 == 0 && m->info.dim % 8 == 0;

	for (uint32_t l = 0; l < m->info.n_layer; l++) {
		struct model_layer *L = &m->layers[l];
		struct ops_mat *mats[MODEL_MATS_PER_LAYER] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
							       &L->w_down, &L->moe.gate, &L->moe.up, &L->moe.down };

		for (size_t i = 0; i < MODEL_MATS_PER_LAYER; i++)
			if (mats[i]->data && (i < 7 || x8) && n < cap)
				out[n++] = mats[i];
	}
	/* a tied output is the embedding too: lookups read its rows through
	 * ops_mat_row, in whichever layout it ends in */
	if (n < cap)
		out[n++] = &m->output;
	return n;
}

/* Copies the matrices the matmuls read into one owned block: those with an
 * interleaved layout (q4_0, q8_0) in that layout (ops_repack: 8 rows per
 * sequential stream, about 3x fewer instructions per weight when decoding),
 * the others as they are, in 2 MiB pages (measured, decode tg32 in
 * alternation with the mapping: Llama-2-7B Q4_K_M 9.2-9.4 against 6.6-7.8
 * t/s, Qwen2.5-1.5B 36.8-38.5 against 33.6-34.8). The file's pages of each
 * copied matrix are then dropped from this process (MADV_DONTNEED: they are
 * never read again, and would otherwise count twice in the resident size).
 * When memory cannot hold the copy, only the interleaved matrices are copied.
 * A deviation from "weights are borrowed from the mapping", as llama.cpp
 * does for its repacked types. */

/* Bytes of a matrix's owned copy: every matrix in the file's layout when
 * `all`, otherwise only those ops_repack interleaves (0: it stays in the
 * mapping, as one already copied does). */
static size_t mat_copy_size(const struct ops_mat *w, bool all)
{
	if (!w->data || w->layout != OPS_LAYOUT_ROWS)
		return 0;
	return all ? (size_t)w->rows * w->row_bytes : ops_repack_size(w);
}

static size_t mats_copy_size(struct ops_mat *const *mats, size_t n, bool all)
{
	size_t total = 0;

	for (size_t i = 0; i < n; i++)
		total += (mat_copy_size(mats[i], all) + 63) & ~(size_t)63;
	return total;
}

/* The copies of repack_weights, shared out among threads: each takes the
 * next matrix, largest first, until none is left. */
struct repack_job {
	struct ops_mat **mats;
	const size_t *order;   /* matrix indices, largest copy first */
	const size_t *off;     /* each matrix's offset in the copy */
	size_t n;              /* matrices with a copy */
	bool all;
	char *packed;
	long page;
	atomic_size_t next;
};

static void repack_one(struct repack_job *j, size_t i)
{
	struct ops_mat *w = j->mats[i];
	size_t sz = mat_copy_size(w, j->all);
	uintptr_t lo = ((uintptr_t)w->data + (uintptr_t)j->page - 1) & ~(uintptr_t)(j->page - 1);
	uintptr_t hi = ((uintptr_t)w->data + sz) & ~(uintptr_t)(j->page - 1);
	const void *src = w->data;

	if (ops_repack_size(w)) {
		ops_repack(w, j->packed + j->off[i]);
	} else {
		memcpy(j->packed + j->off[i], w->data, sz);
		w->data = j->packed + j->off[i];
	}
	/* tkv_model_load's file is mapped PROT_READ, MAP_PRIVATE and never
	 * written: dropping its pages only drops clean page-cache references */
	if (j->page > 0 && hi > lo && src)
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static void *repack_worker(void *arg)
{
	struct repack_job *j = arg;
	size_t k;

	while ((k = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n)
		repack_one(j, j->order[k]);
	return NULL;
}

/* Indices by copy size, largest first (a small insertion sort: a few hundred
 * matrices, once per load). */
static void repack_order(struct ops_mat *const *mats, size_t n, bool all, size_t *order, size_t *n_out)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		size_t sz = mat_copy_size(mats[i], all), at = k++;

		if (!sz) {
			k--;
			continue;
		}
		while (at > 0 && mat_copy_size(mats[order[at - 1]], all) < sz) {
			order[at] = order[at - 1];
			at--;
		}
		order[at] = i;
	}
	*n_out = k;
}

static int repack_weights(struct tkv_model *m, int n_threads, struct tkv_error *err)
{
	size_t cap = (size_t)m->info.n_layer * MODEL_MATS_PER_LAYER + 1, n, total, off = 0;
	struct ops_mat **mats = tkv_calloc(m->alloc, cap, sizeof *mats);
	size_t *offs = tkv_calloc(m->alloc, 2 * cap, sizeof *offs);
	bool tied = m->output.data == m->tok_embd.data, all = true;
	struct repack_job job = { .mats = mats, .off = offs, .page = sysconf(_SC_PAGESIZE) };
	pthread_t th[64];
	int started = 0;

	if (!mats || !offs) {
		tkv_free(m->alloc, mats);
		tkv_free(m->alloc, offs);
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory loading layers");
	}
	n = model_mats(m, mats, cap);
	total = mats_copy_size(mats, n, all);
	m->packed = total ? tkv_malloc(m->alloc, total) : NULL;
	if (total && !m->packed) {
		all = false;
		total = mats_copy_size(mats, n, all);
		m->packed = total ? tkv_malloc(m->alloc, total) : NULL;
	}
	if (total && !m->packed) {
		tkv_free(m->alloc, mats);
		tkv_free(m->alloc, offs);
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for %zu bytes of repacked weights", total);
	}
	m->packed_bytes = total;
#ifdef MADV_HUGEPAGE
	if (total) {
		/* 2 MiB pages for the copy: the hardware prefetchers stop at page
		 * boundaries, so a sequential read of 4 KiB pages keeps restarting */
		uintptr_t lo = ((uintptr_t)m->packed + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1);
		uintptr_t hi = ((uintptr_t)m->packed + total) & ~(uintptr_t)((2u << 20) - 1);

		if (hi > lo)
			madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
	}
#endif
	/* the copies keep the matrices' order in memory; threads fill them in
	 * any order */
	for (size_t i = 0; i < n; i++) {
		offs[i] = off;
		off += (mat_copy_size(mats[i], all) + 63) & ~(size_t)63;
	}
	job.order = offs + cap;
	repack_order(mats, n, all, offs + cap, &job.n);
	job.all = all;
	job.packed = m->packed;
	atomic_init(&job.next, 0);
	if (n_threads > (int)(sizeof th / sizeof th[0]))
		n_threads = (int)(sizeof th / sizeof th[0]);
	/* a thread that cannot start leaves its share to the others */
	while (started < n_threads - 1 && (size_t)started + 1 < job.n && pthread_create(&th[started], NULL, repack_worker, &job) == 0)
		started++;
	repack_worker(&job);
	for (int t = 0; t < started; t++)
		pthread_join(th[t], NULL);
	if (tied && total)
		m->tok_embd = m->output;
	tkv_free(m->alloc, mats);
	tkv_free(m->alloc, offs);
	return TKV_OK;
}

struct tkv_model_params tkv_model_default_params(void)
{
	struct tkv_model_params p = { .alloc = NULL };
	return p;
}

int tkv_model_load(struct tkv_model **out, const char *path, const struct tkv_model_params *p,
		   struct tkv_error *err)
{
	struct tkv_model_params dp = tkv_model_default_params();
	struct tkv_model *m;
	int st;

	*out = NULL;
	if (!path)
		return tkv_errf(err, TKV_ERR_ARG, "no model path given");
	st = cpu_kernels_check(err); /* TIERKV_KERNELS names a level this CPU runs */
	if (st != TKV_OK)
		return st;
	if (!p)
		p = &dp;
	if (p->n_threads < 0 || p->n_threads > 512)
		return tkv_errf(err, TKV_ERR_ARG, "load threads %d: must be 1..512 (0 = physical cores)", p->n_threads);
	m = tkv_calloc(p->alloc, 1, sizeof *m);
	if (!m)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory loading %s", path);
	m->alloc = p->alloc;
	if ((st = gguf_open(&m->gguf, path, p->alloc, err)))
		goto out_free;
	if ((st = load_hparams(m, err)))
		goto out_free;
	if ((st = tok_init(&m->tok, m->gguf, p->alloc, err)))
		goto out_free;
	m->info.n_vocab = (uint32_t)tok_n_vocab(m->tok);
	if ((st = load_tensors(m, err)) || (st = repack_weights(m, p->n_threads ? p->n_threads : tpool_default_threads(), err)))
		goto out_free;
	m->info.file_bytes = gguf_size(m->gguf);
	*out = m;
	return TKV_OK;

out_free:
	tkv_model_free(m);
	return st;
}

void tkv_model_free(struct tkv_model *m)
{
	if (!m)
		return;
	tkv_free(m->alloc, m->packed);
	tkv_free(m->alloc, m->inv_freq);
	tkv_free(m->alloc, m->layers);
	tok_free(m->tok);
	gguf_close(m->gguf);
	tkv_free(m->alloc, m);
}

void tkv_model_get_info(const struct tkv_model *m, struct tkv_model_info *out)
{
	*out = m->info;
}

size_t tkv_model_kv_bytes_per_token(const struct tkv_model *m)
{
	return (size_t)2 * (m->info.n_layer - m->hp.n_swa_layers) * m->info.n_kv_head * m->info.head_dim * 2;
}

size_t tkv_model_kv_bytes(const struct tkv_model *m, size_t n_tokens)
{
	size_t layer = (size_t)2 * m->info.n_kv_head * m->info.head_dim * 2, b = 0;

	for (uint32_t l = 0; l < m->info.n_layer; l++) {
		uint32_t w = m->layers[l].window;

		b += layer * (w && w - 1 < n_tokens ? w - 1 : n_tokens);
	}
	return b;
}

void model_layer_windows(const struct tkv_model *m, uint32_t *window)
{
	for (uint32_t l = 0; l < m->info.n_layer; l++)
		window[l] = m->layers[l].window;
}

const struct tok *model_tokenizer(const struct tkv_model *m)
{
	return m->tok;
}

const struct gguf_file *model_gguf(const struct tkv_model *m)
{
	return m->gguf;
}

int tkv_tokenize(const struct tkv_model *m, const char *text, size_t len, int add_bos,
		 int parse_special, int32_t *ids, size_t n_max, size_t *n_out)
{
	return tok_encode(m->tok, text, len, add_bos != 0, parse_special != 0, ids, n_max, n_out);
}

