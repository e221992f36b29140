/* model_api.c - the public face of the model's parts (tierkv.h): metadata and
 * weight spans, the vocabulary (tokens, pieces, the streaming detokenizer)
 * and the sampler, for front ends and embedders that see only tierkv.h.
 *
 * Handles: a `struct tkv_vocab *` is the tokenizer's `struct tok *` under its
 * public name (tok_of_vocab / tok_vocab in model/tokenizer.h), and a
 * `struct tkv_sampler *` is a `struct samp *` (samp_of below); neither public
 * struct is defined anywhere, so the pointers only ever convert back. */
#include <string.h>

#include "model/gguf.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/tokenizer.h"
#include "ops/ops.h"
#include "util/status.h"

/* ---- model metadata and weights ------------------------------------------------ */

int tkv_model_meta_str(const struct tkv_model *m, const char *key, const char **val, size_t *len)
{
	const struct gguf_kv *kv = m && key ? gguf_find(model_gguf(m), key) : NULL;

	*val = NULL;
	*len = 0;
	if (!kv || kv->type != GGUF_TYPE_STRING)
		return TKV_ERR_ARG;
	*val = kv->v.str.ptr;
	*len = (size_t)kv->v.str.len;
	return TKV_OK;
}

const char *tkv_model_chat_template(const struct tkv_model *m, size_t *len)
{
	const char *t;

	tkv_model_meta_str(m, "tokenizer.chat_template", &t, len);
	return t;
}

static uint64_t mat_bytes(const struct ops_mat *w)
{
	return (uint64_t)w->rows * w->row_bytes;
}

size_t tkv_model_weight_spans(const struct tkv_model *m, struct tkv_weight_span *out, size_t cap)
{
	size_t n = 0;

	for (uint32_t l = 0; l < m->info.n_layer; l++) {
		const struct model_layer *L = &m->layers[l];
		bool moe = L->moe.router.rows != 0;
		const struct ops_mat *mats[] = { &L->wq, &L->wk, &L->wv, &L->wo, moe ? &L->moe.gate : &L->w_gate,
						 moe ? &L->moe.up : &L->w_up, moe ? &L->moe.down : &L->w_down };

		for (size_t i = 0; i < 7; i++, n++)
			if (n < cap)
				out[n] = (struct tkv_weight_span){ mats[i]->data, (size_t)mat_bytes(mats[i]) };
	}
	if (n < cap)
		out[n] = (struct tkv_weight_span){ m->output.data, (size_t)mat_bytes(&m->output) };
	return n + 1;
}

uint64_t tkv_model_token_weight_bytes(const struct tkv_model *m)
{
	const struct tkv_model_info *in = &m->info;
	uint64_t b = mat_bytes(&m->output) + m->tok_embd.row_bytes + (uint64_t)in->dim * 4 * (2 * in->n_layer + 1);

	for (uint32_t l = 0; l < in->n_layer; l++) {
		const struct model_layer *L = &m->layers[l];

		b += mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo) +
		     mat_bytes(&L->w_gate) + mat_bytes(&L->w_up) + mat_bytes(&L->w_down);
		/* a layer of experts: the router and the experts a token takes */
		if (L->moe.router.rows)
			b += mat_bytes(&L->moe.router) + (mat_bytes(&L->moe.gate) + mat_bytes(&L->moe.up) +
							  mat_bytes(&L->moe.down)) / m->hp.n_expert * m->hp.n_expert_used;
	}
	return b;
}

uint64_t tkv_model_file_tensor_bytes(const struct tkv_model *m)
{
	const struct gguf_file *g = model_gguf(m);
	uint64_t b = 0;

	for (uint64_t i = 0; i < gguf_n_tensors(g); i++)
		b += gguf_tensor_at(g, i)->nbytes;
	return b;
}

/* ---- vocabulary ---------------------------------------------------------------- */

const struct tkv_vocab *tkv_model_vocab(const struct tkv_model *m)
{
	return tok_vocab(model_tokenizer(m));
}

int tkv_vocab_load(struct tkv_vocab **out, const char *path, struct tkv_alloc *a, struct tkv_error *err)
{
	struct gguf_file *g = NULL;
	struct tok *t = NULL;
	int st;

	*out = NULL;
	if (!path)
		return tkv_errf(err, TKV_ERR_ARG, "no vocabulary path");
	if ((st = gguf_open(&g, path, a, err)))
		return st;
	st = tok_init(&t, g, a, err); /* copies what it needs: the file may go */
	gguf_close(g);
	if (st)
		return st;
	*out = (struct tkv_vocab *)(void *)t;
	return TKV_OK;
}

void tkv_vocab_free(struct tkv_vocab *v)
{
	tok_free((struct tok *)(void *)v);
}

int32_t tkv_vocab_n_tokens(const struct tkv_vocab *v)
{
	return tok_n_vocab(tok_of_vocab(v));
}

int32_t tkv_vocab_bos(const struct tkv_vocab *v)
{
	return tok_bos(tok_of_vocab(v));
}

int32_t tkv_vocab_eos(const struct tkv_vocab *v)
{
	return tok_eos(tok_of_vocab(v));
}

bool tkv_vocab_add_bos(const struct tkv_vocab *v)
{
	return tok_add_bos(tok_of_vocab(v));
}

bool tkv_vocab_is_eog(const struct tkv_vocab *v, int32_t id)
{
	return tok_is_eog(tok_of_vocab(v), id);
}

bool tkv_vocab_is_control(const struct tkv_vocab *v, int32_t id)
{
	return tok_is_control(tok_of_vocab(v), id);
}

int tkv_vocab_tokenize(const struct tkv_vocab *v, const char *text, size_t len, bool add_bos,
		       bool parse_special, int32_t *ids, size_t n_max, size_t *n_out)
{
	return tok_encode(tok_of_vocab(v), text, len, add_bos, parse_special, ids, n_max, n_out);
}

const char *tkv_vocab_token_text(const struct tkv_vocab *v, int32_t id, size_t *len)
{
	return tok_piece(tok_of_vocab(v), id, len);
}

int tkv_vocab_token_to_piece(const struct tkv_vocab *v, int32_t id, bool special, char *buf, size_t cap)
{
	return tok_decode(tok_of_vocab(v), id, special, buf, cap);
}

/* ---- streaming detokenizer ------------------------------------------------------ */

_Static_assert(sizeof(((struct tkv_detok *)0)->pend) == sizeof(((struct tok_stream *)0)->pend),
	       "tkv_detok holds what a tok_stream holds");

size_t tkv_detok_min_cap(const struct tkv_vocab *v)
{
	return tok_stream_min_cap(tok_of_vocab(v));
}

/* A tkv_detok is the public copy of a tok_stream's pending bytes. */
static void detok_load(struct tok_stream *s, const struct tkv_detok *d)
{
	memcpy(s->pend, d->pend, sizeof s->pend);
	s->n_pend = d->n_pend;
}

static void detok_store(struct tkv_detok *d, const struct tok_stream *s)
{
	memcpy(d->pend, s->pend, sizeof d->pend);
	d->n_pend = s->n_pend;
}

int tkv_detok_push(const struct tkv_vocab *v, struct tkv_detok *d, int32_t id, char *out, size_t cap)
{
	struct tok_stream s;
	int n;

	if (!d)
		return TKV_ERR_ARG;
	detok_load(&s, d);
	n = tok_stream_push(tok_of_vocab(v), &s, id, out, cap);
	detok_store(d, &s);
	return n;
}

int tkv_detok_flush(struct tkv_detok *d, char *out, size_t cap)
{
	struct tok_stream s;
	int n;

	if (!d)
		return TKV_ERR_ARG;
	detok_load(&s, d);
	n = tok_stream_flush(&s, out, cap);
	detok_store(d, &s);
	return n;
}

void tkv_detok_reset(struct tkv_detok *d)
{
	memset(d, 0, sizeof *d);
}

/* ---- sampler ----------------------------------------------------------------------- */

static struct samp *samp_of(struct tkv_sampler *s)
{
	return (struct samp *)(void *)s;
}

struct tkv_sampler_params tkv_sampler_default_params(void)
{
	struct samp_params d = samp_default_params();

	return (struct tkv_sampler_params){
		.temp = d.temp,
		.top_k = d.top_k,
		.top_p = d.top_p,
		.min_p = d.min_p,
		.repeat_penalty = d.repeat_penalty,
		.repeat_last_n = d.repeat_last_n,
		.seed = d.seed,
	};
}

int tkv_sampler_init(struct tkv_sampler **out, const struct tkv_sampler_params *p, int32_t n_vocab,
		     struct tkv_alloc *a, struct tkv_error *err)
{
	struct samp *s = NULL;
	struct samp_params sp;
	int st;

	*out = NULL;
	if (!p)
		return tkv_errf(err, TKV_ERR_ARG, "no sampler params");
	sp = (struct samp_params){
		.temp = p->temp,
		.top_k = p->top_k,
		.top_p = p->top_p,
		.min_p = p->min_p,
		.repeat_penalty = p->repeat_penalty,
		.repeat_last_n = p->repeat_last_n,
		.seed = p->seed,
	};
	if ((st = samp_init(&s, &sp, n_vocab, a, err)))
		return st;
	*out = (struct tkv_sampler *)(void *)s;
	return TKV_OK;
}

void tkv_sampler_free(struct tkv_sampler *s)
{
	samp_free(samp_of(s));
}

int32_t tkv_sampler_sample(struct tkv_sampler *s, float *logits)
{
	return samp_sample(samp_of(s), logits);
}

void tkv_sampler_accept(struct tkv_sampler *s, int32_t id)
{
	samp_accept(samp_of(s), id);
}

void tkv_sampler_reset(struct tkv_sampler *s, uint64_t seed)
{
	samp_reset(samp_of(s), seed);
}
