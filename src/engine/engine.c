/* engine.c - engines (model + KV pool + threads) and sequences.
 *
 * A sequence's tokens go through the model in chunks of n_batch: for each
 * chunk the cache first reserves room for every stream (all or nothing), then
 * the forward pass fills it. A chunk that cannot get room fails before any
 * state changes, so the sequence stays usable. */
#include <string.h>

#include "kv/pool.h"
#include "kv/seq.h"
#include "model/llama.h"
#include "util/alloc.h"
#include "util/status.h"
#include "util/tpool.h"

struct tkv_engine {
	struct tkv_alloc *alloc;
	struct tkv_model *model;
	struct tkv_engine_params params;
	struct kv_pool *pool;
	struct tpool *tp;
	struct llama_scratch scratch;
	uint32_t n_seqs;
};

struct tkv_seq {
	struct tkv_engine *e;
	struct kv_seq *kv;
	uint32_t n_past;
};

struct tkv_engine_params tkv_engine_default_params(void)
{
	struct tkv_engine_params p = {
		.n_threads = 0,
		.kv_mem = (size_t)256 << 20,
		.page_tokens = 16,
		.kv_type = TKV_KV_F16,
		.n_ctx = 0,
		.n_batch = 64,
		.alloc = NULL,
	};
	return p;
}

int tkv_engine_init(struct tkv_engine **out, struct tkv_model *m, const struct tkv_engine_params *p,
		    struct tkv_error *err)
{
	struct tkv_engine *e;
	struct kv_pool_params pp = kv_pool_default_params();
	int st;

	*out = NULL;
	if (!m || !p)
		return tkv_errf(err, TKV_ERR_ARG, "engine: no model or params");
	if (p->n_threads < 0 || p->n_threads > 512)
		return tkv_errf(err, TKV_ERR_ARG, "threads %d: must be 1..512 (0 = physical cores)", p->n_threads);
	if (p->n_batch == 0 || p->n_batch > 65536)
		return tkv_errf(err, TKV_ERR_ARG, "batch %u: must be 1..65536", p->n_batch);
	if (p->kv_type != TKV_KV_F16 && p->kv_type != TKV_KV_F32)
		return tkv_errf(err, TKV_ERR_ARG, "unknown KV type %d", (int)p->kv_type);
	e = tkv_calloc(p->alloc, 1, sizeof *e);
	if (!e)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory creating the engine");
	e->alloc = p->alloc;
	e->model = m;
	e->params = *p;
	if (e->params.n_threads == 0)
		e->params.n_threads = tpool_default_threads();
	if (e->params.n_ctx == 0)
		e->params.n_ctx = m->info.n_ctx_train;
	if (e->params.n_batch > e->params.n_ctx)
		e->params.n_batch = e->params.n_ctx;

	pp.budget = p->kv_mem;
	pp.page_tokens = p->page_tokens;
	pp.fmt = p->kv_type == TKV_KV_F32 ? KV_FMT_F32 : KV_FMT_F16;
	if ((st = kv_pool_init(&e->pool, &pp, e->alloc, err)))
		goto out_free;
	if ((st = tpool_init(&e->tp, e->params.n_threads, e->alloc, err)))
		goto out_free;
	if ((st = llama_scratch_init(&e->scratch, m, e->params.n_batch, e->params.n_ctx,
				     (uint32_t)e->params.n_threads, e->alloc, err)))
		goto out_free;
	*out = e;
	return TKV_OK;

out_free:
	tkv_engine_free(e);
	return st;
}

void tkv_engine_free(struct tkv_engine *e)
{
	if (!e)
		return;
	llama_scratch_free(&e->scratch, e->alloc);
	tpool_free(e->tp);
	kv_pool_free(e->pool);
	tkv_free(e->alloc, e);
}

void tkv_engine_kv_stats(struct tkv_engine *e, struct tkv_kv_stats *out)
{
	struct kv_pool_stats ps;

	kv_pool_stats(e->pool, &ps);
	memset(out, 0, sizeof *out);
	out->budget = ps.budget;
	out->allocated = ps.allocated;
	out->used = ps.used;
	out->peak_allocated = ps.peak_allocated;
	out->kv_bytes = ps.kv_bytes;
	out->n_pages = ps.n_pages;
	out->n_tokens = ps.kv_bytes / (2 * kv_fmt_size(kv_pool_fmt(e->pool)) * e->model->info.head_dim *
				       e->model->info.n_kv_head * e->model->info.n_layer);
}

int tkv_seq_init(struct tkv_seq **out, struct tkv_engine *e, struct tkv_error *err)
{
	const struct tkv_model_info *in = &e->model->info;
	struct tkv_seq *s;
	int st;

	*out = NULL;
	s = tkv_calloc(e->alloc, 1, sizeof *s);
	if (!s)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory creating a sequence");
	s->e = e;
	st = kv_seq_init(&s->kv, e->pool, in->n_layer, in->n_kv_head, in->head_dim, e->alloc, err);
	if (st) {
		tkv_free(e->alloc, s);
		return st;
	}
	e->n_seqs++;
	*out = s;
	return TKV_OK;
}

void tkv_seq_free(struct tkv_seq *s)
{
	if (!s)
		return;
	s->e->n_seqs--;
	kv_seq_free(s->kv);
	tkv_free(s->e->alloc, s);
}

uint32_t tkv_seq_n_past(const struct tkv_seq *s)
{
	return s->n_past;
}

int tkv_seq_decode(struct tkv_seq *s, const int32_t *ids, size_t n, float *logits, int all_logits,
		   struct tkv_error *err)
{
	struct tkv_engine *e = s->e;
	uint32_t n_vocab = e->model->info.n_vocab;
	size_t done = 0;
	int st;

	if (n == 0)
		return tkv_errf(err, TKV_ERR_ARG, "decode: no tokens");
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || (uint32_t)ids[i] >= n_vocab)
			return tkv_errf(err, TKV_ERR_ARG, "token id %d at %zu out of range [0, %u)", ids[i], i, n_vocab);
	if (s->n_past + n > e->params.n_ctx)
		return tkv_errf(err, TKV_ERR_CTX_FULL, "%zu tokens after %u would exceed the context of %u",
				n, s->n_past, e->params.n_ctx);

	while (done < n) {
		uint32_t c = (uint32_t)(n - done < e->params.n_batch ? n - done : e->params.n_batch);
		bool last = done + c == n;
		float *lg = NULL;

		if ((st = kv_seq_reserve(s->kv, c, err)))
			return st;
		if (logits && all_logits)
			lg = logits + done * n_vocab;
		else if (logits && last)
			lg = logits;
		llama_forward(e->model, &e->scratch, e->tp, s->kv, ids + done, c, (int32_t)s->n_past, lg,
			      all_logits != 0);
		s->n_past += c;
		done += c;
	}
	return TKV_OK;
}
