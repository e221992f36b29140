/* llama.c - llama-family models: loading from GGUF and the forward pass.
 *
 * The forward pass for a chunk of n tokens at positions pos0..pos0+n-1:
 *
 *   x = embed(ids)
 *   per layer:  xb = rmsnorm(x) * attn_norm
 *               q, k, v = Wq xb, Wk xb, Wv xb;  rope(q, k) at each position
 *               append k, v to the cache; every query head attends to its KV
 *               head's stream up to its own position (causal)
 *               x += Wo attn
 *               xb = rmsnorm(x) * ffn_norm
 *               x += Wdown (silu(Wgate xb) * Wup xb)
 *   logits = Wout (rmsnorm(x) * out_norm)
 */
#include "model/llama.h"

#include <math.h>
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

static int load_hparams(struct tkv_model *m, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	struct tkv_model_info *in = &m->info;
	struct gguf_str s;
	uint32_t key_len, val_len;
	float scale = 1.0f;
	int st;

	if ((st = gguf_get_str(g, "general.architecture", &s, err)))
		return st;
	if (!gguf_str_eq(s, "llama"))
		return tkv_errf(err, TKV_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (llama only)",
				gguf_name(g), (int)(s.len > 64 ? 64 : s.len), s.ptr);
	snprintf(in->arch, sizeof in->arch, "llama");
	if (gguf_find(g, "general.name") && gguf_get_str(g, "general.name", &s, NULL) == TKV_OK)
		snprintf(in->name, sizeof in->name, "%.*s", (int)(s.len > 127 ? 127 : s.len), s.ptr);

	if ((st = hp_u32(g, "llama", "embedding_length", &in->dim, true, 0, err)) ||
	    (st = hp_u32(g, "llama", "block_count", &in->n_layer, true, 0, err)) ||
	    (st = hp_u32(g, "llama", "feed_forward_length", &in->n_ff, true, 0, err)) ||
	    (st = hp_u32(g, "llama", "attention.head_count", &in->n_head, true, 0, err)) ||
	    (st = hp_u32(g, "llama", "attention.head_count_kv", &in->n_kv_head, false, in->n_head, err)) ||
	    (st = hp_u32(g, "llama", "context_length", &in->n_ctx_train, true, 0, err)) ||
	    (st = hp_f32(g, "llama", "attention.layer_norm_rms_epsilon", &in->rms_eps, 1e-5f, err)) ||
	    (st = hp_f32(g, "llama", "rope.freq_base", &in->rope_base, 10000.0f, err)))
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
	if (in->dim % in->n_head)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: embedding %u not divisible by %u heads",
				gguf_name(g), in->dim, in->n_head);
	in->head_dim = in->dim / in->n_head;
	if ((st = hp_u32(g, "llama", "attention.key_length", &key_len, false, in->head_dim, err)) ||
	    (st = hp_u32(g, "llama", "attention.value_length", &val_len, false, in->head_dim, err)))
		return st;
	if (key_len != val_len)
		return tkv_errf(err, TKV_ERR_UNSUPPORTED, "%s: key length %u differs from value length %u",
				gguf_name(g), key_len, val_len);
	in->head_dim = key_len;
	if (in->head_dim == 0 || in->head_dim > KV_MAX_HEAD_DIM || in->head_dim % 2)
		return tkv_errf(err, TKV_ERR_UNSUPPORTED, "%s: head dimension %u (must be even, at most %d)",
				gguf_name(g), in->head_dim, KV_MAX_HEAD_DIM);
	if ((st = hp_u32(g, "llama", "rope.dimension_count", &in->n_rot, false, in->head_dim, err)))
		return st;
	if (in->n_rot == 0 || in->n_rot > in->head_dim || in->n_rot % 2)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: rope dimension count %u (head dimension %u)",
				gguf_name(g), in->n_rot, in->head_dim);
	if (!(in->rms_eps > 0.0f && in->rms_eps < 1.0f))
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: rms epsilon %g out of range", gguf_name(g), in->rms_eps);
	if (!(in->rope_base > 1.0f && isfinite(in->rope_base)))
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: rope base %g out of range", gguf_name(g), in->rope_base);

	/* rope scaling: "none" or "linear" (positions divided by the factor) */
	if (gguf_find(g, "llama.rope.scaling.type")) {
		if ((st = gguf_get_str(g, "llama.rope.scaling.type", &s, err)))
			return st;
		if (gguf_str_eq(s, "linear")) {
			if ((st = hp_f32(g, "llama", "rope.scaling.factor", &scale, 1.0f, err)))
				return st;
		} else if (!gguf_str_eq(s, "none")) {
			return tkv_errf(err, TKV_ERR_UNSUPPORTED, "%s: rope scaling '%.*s' is not supported (none, linear)",
					gguf_name(g), (int)(s.len > 32 ? 32 : s.len), s.ptr);
		}
	} else if (gguf_find(g, "llama.rope.scale_linear")) {
		if ((st = hp_f32(g, "llama", "rope.scale_linear", &scale, 1.0f, err)))
			return st;
	}
	if (scale == 0.0f)
		scale = 1.0f;
	if (!(scale > 0.0f && scale < 1e6f))
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: rope scaling factor %g out of range", gguf_name(g), scale);
	in->rope_scale = scale;
	return TKV_OK;
}

static int load_tensors(struct tkv_model *m, struct tkv_error *err)
{
	const struct gguf_file *g = m->gguf;
	struct tkv_model_info *in = &m->info;
	uint32_t qd = in->n_head * in->head_dim, kvd = in->n_kv_head * in->head_dim;
	const float *rope_freqs = NULL;
	char name[96];
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
	for (uint32_t l = 0; l < in->n_layer; l++) {
		struct llama_layer *L = &m->layers[l];
#define NAME(s) (snprintf(name, sizeof name, "blk.%u." s, l), name)
		if ((st = get_vec(g, NAME("attn_norm.weight"), in->dim, false, &L->attn_norm, err)) ||
		    (st = get_mat(g, NAME("attn_q.weight"), in->dim, qd, false, &L->wq, err)) ||
		    (st = get_mat(g, NAME("attn_k.weight"), in->dim, kvd, false, &L->wk, err)) ||
		    (st = get_mat(g, NAME("attn_v.weight"), in->dim, kvd, false, &L->wv, err)) ||
		    (st = get_mat(g, NAME("attn_output.weight"), qd, in->dim, false, &L->wo, err)) ||
		    (st = get_vec(g, NAME("ffn_norm.weight"), in->dim, false, &L->ffn_norm, err)) ||
		    (st = get_mat(g, NAME("ffn_gate.weight"), in->dim, in->n_ff, false, &L->w_gate, err)) ||
		    (st = get_mat(g, NAME("ffn_up.weight"), in->dim, in->n_ff, false, &L->w_up, err)) ||
		    (st = get_mat(g, NAME("ffn_down.weight"), in->n_ff, in->dim, false, &L->w_down, err)))
			return st;
#undef NAME
	}
	in->weight_type = m->layers[0].wq.type;

	/* rotary inverse frequencies: base^(-2i/n_rot), divided by linear scaling and
	 * by per-dimension factors when the file has them (Llama 3.1 style) */
	st = get_vec(g, "rope_freqs.weight", in->n_rot / 2, true, &rope_freqs, err);
	if (st < 0)
		return st;
	m->inv_freq = tkv_malloc(m->alloc, in->n_rot / 2 * sizeof(float));
	if (!m->inv_freq)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory loading rope frequencies");
	for (uint32_t i = 0; i < in->n_rot / 2; i++) {
		double f = pow((double)in->rope_base, -2.0 * i / (double)in->n_rot) / in->rope_scale;

		if (rope_freqs) {
			if (!(rope_freqs[i] > 0.0f))
				return tkv_errf(err, TKV_ERR_FORMAT, "%s: rope_freqs.weight[%u] = %g is not positive",
						gguf_name(g), i, rope_freqs[i]);
			f /= rope_freqs[i];
		}
		m->inv_freq[i] = (float)f;
	}
	for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		in->n_params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
	}
	return TKV_OK;
}

/* The matrices the matmuls read, in the order repack_weights visits them. */
static size_t model_mats(struct tkv_model *m, struct ops_mat **out, size_t cap)
{
	size_t n = 0;

	for (uint32_t l = 0; l < m->info.n_layer; l++) {
		struct llama_layer *L = &m->layers[l];
		struct ops_mat *mats[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };

		for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
			if (n < cap)
				out[n++] = mats[i];
	}
	/* a tied output is the embedding, which lookups read row by row */
	if (m->output.data != m->tok_embd.data && n < cap)
		out[n++] = &m->output;
	return n;
}

/* Copies the matrices that have an interleaved layout (q4_0, q8_0) into one
 * owned block in that layout (ops_repack: 8 rows per sequential stream, about
 * 3x fewer instructions per weight when decoding). The file's pages of each
 * copied matrix are then dropped from this process (MADV_DONTNEED: they are
 * never read again, and would otherwise count twice in the resident size). A
 * deviation from "weights are borrowed from the mapping", as llama.cpp does
 * for the same reason. */
static int repack_weights(struct tkv_model *m, struct tkv_error *err)
{
	size_t cap = (size_t)m->info.n_layer * 7 + 1, n, total = 0, off = 0;
	struct ops_mat **mats = tkv_calloc(m->alloc, cap, sizeof *mats);
	long page = sysconf(_SC_PAGESIZE);

	if (!mats)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory loading layers");
	n = model_mats(m, mats, cap);
	for (size_t i = 0; i < n; i++)
		total += (ops_repack_size(mats[i]) + 63) & ~(size_t)63;
	if (total == 0) {
		tkv_free(m->alloc, mats);
		return TKV_OK;
	}
	m->packed = tkv_malloc(m->alloc, total);
	if (!m->packed) {
		tkv_free(m->alloc, mats);
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for %zu bytes of repacked weights", total);
	}
	m->packed_bytes = total;
#ifdef MADV_HUGEPAGE
	{
		/* 2 MiB pages for the copy: the hardware prefetchers stop at page
		 * boundaries, so a sequential read of 4 KiB pages keeps restarting */
		uintptr_t lo = ((uintptr_t)m->packed + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1);
		uintptr_t hi = ((uintptr_t)m->packed + total) & ~(uintptr_t)((2u << 20) - 1);

		if (hi > lo)
			madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
	}
#endif
	for (size_t i = 0; i < n; i++) {
		size_t sz = ops_repack_size(mats[i]);
		uintptr_t lo, hi;

		if (!sz)
			continue;
		lo = ((uintptr_t)mats[i]->data + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
		hi = ((uintptr_t)mats[i]->data + sz) & ~(uintptr_t)(page - 1);
		ops_repack(mats[i], (char *)m->packed + off);
		/* tkv_model_load's file is mapped PROT_READ, MAP_PRIVATE and never
		 * written: dropping its pages only drops clean page-cache references */
		if (page > 0 && hi > lo)
			madvise((void *)lo, hi - lo, MADV_DONTNEED);
		off += (sz + 63) & ~(size_t)63;
	}
	tkv_free(m->alloc, mats);
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
	if ((st = load_tensors(m, err)) || (st = repack_weights(m, err)))
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
	return (size_t)2 * m->info.n_layer * m->info.n_kv_head * m->info.head_dim * 2;
}

const struct tok *llama_tokenizer(const struct tkv_model *m)
{
	return m->tok;
}

const struct gguf_file *llama_gguf(const struct tkv_model *m)
{
	return m->gguf;
}

int tkv_tokenize(const struct tkv_model *m, const char *text, size_t len, int add_bos,
		 int parse_special, int32_t *ids, size_t n_max, size_t *n_out)
{
	return tok_encode(m->tok, text, len, add_bos != 0, parse_special != 0, ids, n_max, n_out);
}

/* ---- scratch --------------------------------------------------------------- */

int llama_scratch_init(struct llama_scratch *s, const struct tkv_model *m, uint32_t n_batch,
		       uint32_t n_threads, struct tkv_alloc *a, struct tkv_error *err)
{
	const struct tkv_model_info *in = &m->info;
	size_t B = n_batch, qd = (size_t)in->n_head * in->head_dim, kvd = (size_t)in->n_kv_head * in->head_dim;
	size_t widest = in->dim > in->n_ff ? in->dim : in->n_ff;

	memset(s, 0, sizeof *s);
	s->n_batch = n_batch;
	s->n_threads = n_threads;
	s->x = tkv_malloc(a, B * in->dim * sizeof(float));
	s->xb = tkv_malloc(a, B * in->dim * sizeof(float));
	s->q = tkv_malloc(a, B * qd * sizeof(float));
	s->k = tkv_malloc(a, B * kvd * sizeof(float));
	s->v = tkv_malloc(a, B * kvd * sizeof(float));
	s->ao = tkv_malloc(a, B * qd * sizeof(float));
	s->o = tkv_malloc(a, B * in->dim * sizeof(float));
	s->hg = tkv_malloc(a, B * in->n_ff * sizeof(float));
	s->hu = tkv_malloc(a, B * in->n_ff * sizeof(float));
	s->rows = tkv_malloc(a, B * sizeof *s->rows);
	if (qd > widest)
		widest = qd;
	s->work_size = ops_matmul_work_size((int64_t)widest, (int)n_batch, (int)n_threads);
	s->work = tkv_malloc(a, s->work_size);
	if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->ao || !s->o || !s->hg || !s->hu || !s->rows ||
	    !s->work) {
		llama_scratch_free(s, a);
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for activations (batch %u)", n_batch);
	}
	return TKV_OK;
}

void llama_scratch_free(struct llama_scratch *s, struct tkv_alloc *a)
{
	tkv_free(a, s->x);
	tkv_free(a, s->xb);
	tkv_free(a, s->q);
	tkv_free(a, s->k);
	tkv_free(a, s->v);
	tkv_free(a, s->ao);
	tkv_free(a, s->o);
	tkv_free(a, s->hg);
	tkv_free(a, s->hu);
	tkv_free(a, s->rows);
	tkv_free(a, s->work);
	memset(s, 0, sizeof *s);
}

/* ---- forward ----------------------------------------------------------------- */

/* x += W in for each of n rows: a projection added to the residual stream
 * (through the scratch output o). */
static void residual(const struct tkv_model *m, struct llama_scratch *s, struct tpool *tp, const struct ops_mat *w,
		     const float *in, uint32_t n)
{
	ops_matmul_n(tp, &w, &s->o, 1, in, (int)n, s->work, s->work_size);
	for (size_t i = 0; i < (size_t)n * m->info.dim; i++)
		s->x[i] += s->o[i];
}

void llama_forward(const struct tkv_model *m, struct llama_scratch *s, struct tpool *tp, struct kv_cache *kv,
		   const int32_t *ids, const struct kv_seg *segs, uint32_t n_segs, const uint32_t *out_rows,
		   uint32_t n_out, float *logits)
{
	const struct tkv_model_info *in = &m->info;
	uint32_t dim = in->dim, hd = in->head_dim, n = 0;
	size_t qd = (size_t)in->n_head * hd, kvd = (size_t)in->n_kv_head * hd;

	for (uint32_t g = 0; g < n_segs; g++)
		n += segs[g].n;
	for (uint32_t i = 0; i < n; i++)
		ops_dequant_row(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)ids[i] * m->tok_embd.row_bytes,
				s->x + (size_t)i * dim, dim);

	for (uint32_t l = 0; l < in->n_layer; l++) {
		const struct llama_layer *L = &m->layers[l];

		/* attention: q, k, v of the normed rows, rotated to their positions;
		 * the cache stores k and v and attends the queries */
		for (uint32_t i = 0; i < n; i++)
			ops_rmsnorm(s->xb + (size_t)i * dim, s->x + (size_t)i * dim, L->attn_norm, dim, in->rms_eps);
		ops_matmul_n(tp, (const struct ops_mat *[]){ &L->wq, &L->wk, &L->wv }, (float *[]){ s->q, s->k, s->v },
			     3, s->xb, (int)n, s->work, s->work_size);
		for (uint32_t g = 0; g < n_segs; g++)
			for (uint32_t i = 0; i < segs[g].n; i++) {
				size_t r = segs[g].row0 + i;
				float pos = (float)(segs[g].pos0 + (int32_t)i);

				ops_rope(s->q + r * qd, (int)in->n_head, (int)hd, (int)in->n_rot, pos, m->inv_freq);
				ops_rope(s->k + r * kvd, (int)in->n_kv_head, (int)hd, (int)in->n_rot, pos, m->inv_freq);
			}
		kv_cache_store(kv, l, segs, n_segs, s->k, s->v);
		kv_cache_attend(kv, tp, l, segs, n_segs, s->q, s->ao);
		residual(m, s, tp, &L->wo, s->ao, n);

		/* feed-forward: x += Wdown (silu(Wgate xb) * Wup xb) */
		for (uint32_t i = 0; i < n; i++)
			ops_rmsnorm(s->xb + (size_t)i * dim, s->x + (size_t)i * dim, L->ffn_norm, dim, in->rms_eps);
		ops_matmul_n(tp, (const struct ops_mat *[]){ &L->w_gate, &L->w_up }, (float *[]){ s->hg, s->hu }, 2, s->xb,
			     (int)n, s->work, s->work_size);
		ops_swiglu(s->hg, s->hg, s->hu, (int)(n * in->n_ff));
		residual(m, s, tp, &L->w_down, s->hg, n);
	}

	if (!n_out)
		return;
	/* final norm of the rows that want logits, gathered, then one matmul */
	for (uint32_t i = 0; i < n_out; i++)
		ops_rmsnorm(s->xb + (size_t)i * dim, s->x + (size_t)out_rows[i] * dim, m->out_norm, dim, in->rms_eps);
	ops_matmul_n(tp, (const struct ops_mat *[]){ &m->output }, &logits, 1, s->xb, (int)n_out, s->work, s->work_size);
}
