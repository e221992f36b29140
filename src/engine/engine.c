/* engine.c - engines (model + KV pool + policy + threads) and sequences.
 *
 * A sequence's tokens go through the model in chunks of n_batch. For each
 * chunk: the memory governor makes room if the pool is past its high-water
 * mark; the cache reserves room in every stream (all or nothing); the forward
 * pass fills it; then each stream's policy brings it back within its budget.
 * A chunk that cannot get room fails before any state changes, so the sequence
 * stays usable. Caps, the governor and the AUTO plan's choice: governor.c. */
#include <string.h>

#include "engine/engine_impl.h"
#include "kv/cache.h"
#include "kv/plan.h"
#include "kv/pool.h"
#include "kv/prefix.h"
#include "kv/seq.h"
#include "kv/window.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/status.h"
#include "util/tpool.h"

struct tkv_engine_params tkv_engine_default_params(void)
{
	struct tkv_engine_params p = {
		.n_threads = 0,
		.kv_mem = (size_t)256 << 20,
		.page_tokens = 16,
		.kv_type = TKV_KV_F16,
		.n_ctx = 0,
		.n_batch = 64,
		.kv = tkv_kv_policy_default_params(),
		.head_plan = { .mode = TKV_HEADS_AUTO, .mix = TKV_HEADS_MIX_POLICY },
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
	if (p->page_tokens == 0 || p->page_tokens > 4096)
		return tkv_errf(err, TKV_ERR_ARG, "KV page size %u tokens: must be 1..4096", p->page_tokens);
	if ((unsigned)p->layer_plan.mode > TKV_PLAN_FIXED)
		return tkv_errf(err, TKV_ERR_ARG, "unknown layer plan mode %d", (int)p->layer_plan.mode);
	if (p->layer_plan.mode == TKV_PLAN_FIXED) {
		const struct tkv_kv_layer_plan *lp = &p->layer_plan;

		if (lp->n_layer != m->info.n_layer)
			return tkv_errf(err, TKV_ERR_ARG, "the layer plan lists %u layers; the model has %u", lp->n_layer,
					m->info.n_layer);
		for (uint32_t l = 0; l < lp->n_layer; l++)
			if (lp->page_tokens[l] == 0 || lp->page_tokens[l] > 4096 || !(lp->weight[l] > 0 && lp->weight[l] <= 16))
				return tkv_errf(err, TKV_ERR_ARG,
						"layer plan, layer %u: page tokens %u (1..4096), weight %g ((0, 16])", l,
						lp->page_tokens[l], lp->weight[l]);
	}
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
	if ((st = kv_cfg_init(&e->cfg, &p->kv, m->info.head_dim, m->info.n_head / m->info.n_kv_head, pp.fmt,
			      pp.page_tokens, err)))
		goto out_free;
	if (p->kv.share_cos > 0.0f && p->kv.share_from >= m->info.n_layer) {
		st = tkv_errf(err, TKV_ERR_ARG, "cross-layer sharing from layer %u: the model has %u layers (0-%u)",
			      p->kv.share_from, m->info.n_layer, m->info.n_layer - 1);
		goto out_free;
	}
	if ((st = kv_pool_init(&e->pool, &pp, e->alloc, err)))
		goto out_free;
	if (p->prefix_cache &&
	    (st = kv_prefix_init(&e->prefix, e->pool, pp.page_tokens, m->info.n_layer * m->info.n_kv_head,
				 e->alloc, err)))
		goto out_free;
	if ((st = tpool_init(&e->tp, e->params.n_threads, e->alloc, err)))
		goto out_free;
	if ((st = model_scratch_init(&e->scratch, m, e->params.n_batch, e->params.n_ctx, (uint32_t)e->params.n_threads, e->alloc,
				     err)))
		goto out_free;
	{
		struct kv_cache_shape sh = {
			.n_batch = e->params.n_batch,
			.n_ctx = e->params.n_ctx,
			.n_threads = (uint32_t)e->params.n_threads,
			.n_head = m->info.n_head,
			.n_kv_head = m->info.n_kv_head,
			.head_dim = m->info.head_dim,
			.softcap = m->hp.attn_softcap,
		};

		if ((st = kv_cache_init(&e->cache, &e->cfg, &sh, e->alloc, err)))
			goto out_free;
	}
	e->logits = tkv_malloc(e->alloc, (size_t)e->params.n_batch * m->info.n_vocab * sizeof(float));
	e->window = tkv_malloc(e->alloc, m->info.n_layer * sizeof *e->window);
	if (!e->logits || !e->window) {
		st = tkv_errf(err, TKV_ERR_NOMEM, "out of memory for batch logits");
		goto out_free;
	}
	model_layer_windows(m, e->window);
	if ((st = heads_init(e, err)))
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
	tkv_free(e->alloc, e->logits);
	tkv_free(e->alloc, e->window);
	tkv_free(e->alloc, e->head_w);
	tkv_free(e->alloc, e->head_score);
	kv_cache_free(e->cache);
	model_scratch_free(&e->scratch, e->alloc);
	tpool_free(e->tp);
	kv_prefix_free(e->prefix);
	kv_pool_free(e->pool);
	tkv_free(e->alloc, e);
}

/* Adds one sequence's cache figures (tiers, counters) into out. */
static void seq_stats_add(const struct kv_seq *kv, struct tkv_kv_stats *out)
{
	size_t n = (size_t)kv->n_layer * kv->n_kv_head;

	for (size_t i = 0; i < n; i++) {
		const struct kv_stream *st = &kv->streams[i];

		for (uint32_t p = 0; p < st->n_pages; p++) {
			const struct kv_page *pg = st->pages[p];
			enum kv_tier t = kv_fmt_tier(pg->fmt);
			size_t b = kv_page_share(pg, pg->n_used);

			if (pg->fmt == KV_FMT_REF) {
				out->shared_bytes += b;
				out->shared_tokens += pg->n_used;
				continue;
			}
			out->tier_bytes[t] += b;
			out->tier_tokens[t] += pg->n_used;
		}
		out->evicted += st->evicted;
		out->demoted += st->demoted;
		out->merged += st->merged;
		out->cow += st->cow;
		out->pages_read += st->pages_read;
		out->pages_skipped += st->pages_skipped;
	}
}

/* The pool's compaction counters (engine-wide). */
static void pool_compact_stats(const struct kv_pool_stats *ps, struct tkv_kv_stats *out)
{
	out->compactions = ps->compactions;
	out->compact_slots = ps->compact_slots;
	out->compact_bytes = ps->compact_bytes;
	out->compact_ns = ps->compact_ns;
	out->compact_freed = ps->compact_freed;
}

void tkv_engine_kv_stats(struct tkv_engine *e, struct tkv_kv_stats *out)
{
	struct kv_pool_stats ps;
	size_t max_tokens = 0;

	kv_pool_stats(e->pool, &ps);
	memset(out, 0, sizeof *out);
	out->budget = ps.budget;
	out->allocated = ps.allocated;
	out->used = ps.used;
	out->peak_allocated = ps.peak_allocated;
	out->kv_bytes = ps.kv_bytes;
	out->meta_bytes = ps.meta_bytes;
	out->fixed_bytes = ps.fixed_bytes;
	out->n_pages = ps.n_pages;
	for (struct tkv_seq *s = e->seqs; s; s = s->next) {
		seq_stats_add(s->kv, out);
		max_tokens += s->n_past;
	}
	out->n_tokens = max_tokens;
	out->evicted += e->evicted_gone;
	out->demoted += e->demoted_gone;
	out->merged += e->merged_gone;
	out->cow += e->cow_gone;
	out->gov_runs = e->gov_runs;
	out->gov_raises = e->gov_raises;
	if (e->pool_ns) {
		out->pool_mean = (size_t)(e->pool_byte_ns / (double)e->pool_ns);
		out->pool_min = e->pool_min;
	}
	pool_compact_stats(&ps, out);
	if (e->prefix) {
		struct kv_prefix_stats xs;

		kv_prefix_get_stats(e->prefix, &xs);
		out->prefix_lookups = xs.lookups;
		out->prefix_hits = xs.hits;
		out->prefix_tokens = xs.tokens_reused;
		out->prefix_pages = xs.pages;
	}
}

void tkv_seq_kv_stats(const struct tkv_seq *s, struct tkv_kv_stats *out)
{
	size_t n = (size_t)s->kv->n_layer * s->kv->n_kv_head;

	memset(out, 0, sizeof *out);
	seq_stats_add(s->kv, out);
	for (size_t i = 0; i < n; i++) {
		const struct kv_stream *st = &s->kv->streams[i];

		for (uint32_t p = 0; p < st->n_pages; p++) {
			const struct kv_page *pg = st->pages[p];

			out->allocated += pg->bytes;
			out->used += kv_share(pg->bytes, pg->n_used, pg->cap);
			out->kv_bytes += kv_page_share(pg, pg->n_used);
			out->meta_bytes += (size_t)pg->n_used * kv_page_slot_meta(pg) + kv_page_bm_bytes(pg);
			out->fixed_bytes += kv_page_fixed(pg);
			out->n_pages++;
		}
	}
	out->budget = s->budget;
	out->n_tokens = s->n_past;
	out->gov_runs = s->e->gov_runs;
	out->gov_raises = s->e->gov_raises;
	{
		struct kv_pool_stats ps;

		kv_pool_stats(s->e->pool, &ps);
		pool_compact_stats(&ps, out);
	}
}

/* Puts a new sequence on the engine's list of live ones. */
static void seq_link(struct tkv_engine *e, struct tkv_seq *s)
{
	s->next = e->seqs;
	if (e->seqs)
		e->seqs->prev = s;
	e->seqs = s;
	e->n_seqs++;
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
	s->budget = e->cfg.seq_budget;
	kv_window_set(s->kv, e->window);
	if (e->head_w)
		kv_seq_set_head_weights(s->kv, e->head_w);
	s->kv->share_cos = e->cfg.share_cos;
	s->kv->share_from = e->cfg.share_from ? e->cfg.share_from : (in->n_layer / 2 ? in->n_layer / 2 : 1);
	if (e->params.layer_plan.mode == TKV_PLAN_FIXED) {
		kv_plan_apply(s->kv, &e->params.layer_plan);
	} else if (e->params.layer_plan.mode == TKV_PLAN_AUTO) {
		s->plan_ent = tkv_calloc(e->alloc, in->n_layer, sizeof *s->plan_ent);
		if (!s->plan_ent) {
			kv_seq_free(s->kv);
			tkv_free(e->alloc, s);
			return tkv_errf(err, TKV_ERR_NOMEM, "out of memory creating a sequence");
		}
		s->plan_pending = true;
		s->kv->measure_entropy = true;
	}
	seq_link(e, s);
	*out = s;
	return TKV_OK;
}

int tkv_seq_fork(struct tkv_seq **out, const struct tkv_seq *src, struct tkv_error *err)
{
	struct tkv_engine *e = src->e;
	struct tkv_seq *s;
	int st;

	*out = NULL;
	s = tkv_calloc(e->alloc, 1, sizeof *s);
	if (!s)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory creating a sequence");
	if ((st = kv_seq_fork(&s->kv, src->kv, err))) {
		tkv_free(e->alloc, s);
		return st;
	}
	if (src->plan_ent) {
		s->plan_ent = tkv_malloc(e->alloc, src->kv->n_layer * sizeof *s->plan_ent);
		if (!s->plan_ent) {
			kv_seq_free(s->kv);
			tkv_free(e->alloc, s);
			return tkv_errf(err, TKV_ERR_NOMEM, "out of memory copying a sequence");
		}
		memcpy(s->plan_ent, src->plan_ent, src->kv->n_layer * sizeof *s->plan_ent);
	}
	s->plan_pending = src->plan_pending;
	s->e = e;
	s->n_past = src->n_past;
	s->budget = src->budget;
	s->gov_budget = src->gov_budget;
	seq_link(e, s);
	*out = s;
	return TKV_OK;
}

void tkv_seq_free(struct tkv_seq *s)
{
	struct tkv_engine *e;
	struct tkv_kv_stats ks;

	if (!s)
		return;
	e = s->e;
	memset(&ks, 0, sizeof ks);
	seq_stats_add(s->kv, &ks);
	e->evicted_gone += ks.evicted;
	e->demoted_gone += ks.demoted;
	e->merged_gone += ks.merged;
	e->cow_gone += ks.cow;
	if (s->prev)
		s->prev->next = s->next;
	else
		e->seqs = s->next;
	if (s->next)
		s->next->prev = s->prev;
	e->n_seqs--;
	kv_seq_free(s->kv);
	tkv_free(e->alloc, s->plan_ent);
	tkv_free(e->alloc, s);
}

void tkv_seq_layer_plan(const struct tkv_seq *s, struct tkv_kv_layer_plan *out)
{
	const struct kv_seq *kv = s->kv;

	memset(out, 0, sizeof *out);
	out->mode = s->e->params.layer_plan.mode;
	out->pending = s->plan_pending;
	out->n_layer = kv->n_layer < TKV_MAX_PLAN_LAYERS ? kv->n_layer : TKV_MAX_PLAN_LAYERS;
	for (uint32_t l = 0; l < out->n_layer; l++) {
		out->page_tokens[l] = kv->streams[(size_t)l * kv->n_kv_head].page_tokens;
		out->weight[l] = kv->layer_weight[l];
		out->entropy[l] = s->plan_ent ? s->plan_ent[l] : 0.0f;
	}
}

uint32_t tkv_seq_n_past(const struct tkv_seq *s)
{
	return s->n_past;
}

void tkv_seq_set_budget(struct tkv_seq *s, size_t bytes)
{
	s->budget = bytes;
}

static int check_tokens(const struct tkv_engine *e, const struct tkv_seq *s, const int32_t *ids, size_t n,
			struct tkv_error *err);

int tkv_seq_reuse_prefix(struct tkv_seq *s, const int32_t *ids, size_t n, size_t *n_reused,
			 struct tkv_error *err)
{
	int got;

	*n_reused = 0;
	if (!s->e->prefix || s->n_past != 0)
		return TKV_OK;
	if ((got = check_tokens(s->e, s, ids, n, err)))
		return got;
	got = kv_prefix_attach(s->e->prefix, s->kv, ids, n);
	if (got < 0)
		return tkv_errf(err, got, "out of memory attaching a shared prefix");
	s->n_past = (uint32_t)got;
	*n_reused = (size_t)got;
	return TKV_OK;
}

int tkv_seq_publish_prefix(struct tkv_seq *s, const int32_t *ids, size_t n, struct tkv_error *err)
{
	int got;

	if (!s->e->prefix)
		return TKV_OK;
	if (n > s->n_past)
		n = s->n_past;
	got = kv_prefix_insert(s->e->prefix, s->kv, ids, n);
	if (got < 0)
		return tkv_errf(err, got, "out of memory publishing a prefix");
	return TKV_OK;
}

/* The most new pages one chunk may take under a --kv-mem of `pool` bytes:
 * the room above the governor's high mark. A larger chunk made the governor
 * lower every cap to make room for it (to its target, 0.775 of the pool,
 * less the chunk), evicting most of a short prompt at once under a small pool:
 * tierkv eval's pool rows at 1/8 of stories260K went from +7.8% to +6.5%
 * perplexity with chunks cut to this room instead of the low mark. */
static double chunk_room(const struct tkv_engine *e, size_t pool)
{
	return (1.0 - e->params.kv.gov_high) * (double)pool;
}

/* Bytes of new pages a sequence needs for c more tokens. */
static size_t need_bytes(const struct tkv_seq *s, uint32_t c)
{
	return kv_seq_reserve_bytes(s->kv, c);
}

static int check_tokens(const struct tkv_engine *e, const struct tkv_seq *s, const int32_t *ids, size_t n,
			struct tkv_error *err)
{
	uint32_t n_vocab = e->model->info.n_vocab;

	if (n == 0)
		return tkv_errf(err, TKV_ERR_ARG, "decode: no tokens");
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || (uint32_t)ids[i] >= n_vocab)
			return tkv_errf(err, TKV_ERR_ARG, "token id %d at %zu out of range [0, %u)", ids[i], i, n_vocab);
	if (s->n_past + n > e->params.n_ctx)
		return tkv_errf(err, TKV_ERR_CTX_FULL, "%zu tokens after %u would exceed the context of %u",
				n, s->n_past, e->params.n_ctx);
	return TKV_OK;
}

/* After a forward pass: positions advance, then the policy restores the budget. */
static int advance(struct tkv_engine *e, struct tkv_seq *s, uint32_t c, struct tkv_error *err)
{
	int st;

	s->n_past += c;
	s->kv->n_pos = (int32_t)s->n_past;
	if (s->plan_pending && s->n_past >= TKV_PLAN_AUTO_TOKENS)
		gov_choose_plan(e, s);
	if ((st = gov_seq_maintain(e, s)))
		return tkv_errf(err, st, "out of memory while applying the KV policy");
	return TKV_OK;
}

int tkv_seq_decode(struct tkv_seq *s, const int32_t *ids, size_t n, float *logits, int all_logits,
		   struct tkv_error *err)
{
	struct tkv_engine *e = s->e;
	uint32_t n_vocab = e->model->info.n_vocab;
	size_t done = 0;
	uint32_t most = e->params.n_batch; /* the largest chunk: halved when the pool refuses one */
	int st;

	if ((st = check_tokens(e, s, ids, n, err)))
		return st;
	while (done < n) {
		uint32_t c = (uint32_t)(n - done < most ? n - done : most);
		size_t pool = kv_pool_budget(e->pool);
		bool last;
		struct kv_seg seg;

		/* a chunk whose new pages alone would take more than the room
		 * above the governor's high mark goes through in halves */
		while (pool && c > 1 && (double)need_bytes(s, c) > chunk_room(e, pool))
			c = (c + 1) / 2;
		last = done + c == n;
		seg = (struct kv_seg){ s->kv, 0, c, (int32_t)s->n_past };
		uint32_t n_out = 0;
		float *lg = NULL;

		if ((st = gov_make_room(e, need_bytes(s, c))))
			return tkv_errf(err, st, "out of memory while making room in the KV cache");
		if ((st = kv_seq_reserve(s->kv, c, err))) {
			/* refused (nothing changed): in halves, the policy evicts between them */
			if (st == TKV_ERR_KV_FULL && pool && c > 1) {
				most = (c + 1) / 2;
				continue;
			}
			return st;
		}
		if (logits && all_logits) {
			for (uint32_t i = 0; i < c; i++)
				e->scratch.rows[i] = i;
			n_out = c;
			lg = logits + done * n_vocab;
		} else if (logits && last) {
			e->scratch.rows[0] = c - 1;
			n_out = 1;
			lg = logits;
		}
		uint64_t t0 = util_now_ns();

		model_forward(e->model, &e->scratch, e->tp, e->cache, ids + done, &seg, 1, e->scratch.rows, n_out, lg);
		done += c;
		st = advance(e, s, c, err);
		gov_sample(e, util_now_ns() - t0);
		if (st)
			return st;
	}
	return TKV_OK;
}

/* A batch step's state: the items and, for the forward pass being built,
 * its segments and tokens. */
struct step {
	struct tkv_batch_item *items;
	size_t n_items;
	size_t *done;        /* [n_items] tokens of each item through the model */
	struct kv_seg *segs; /* [n_batch] this forward's segments */
	size_t *seg_item;    /* [n_batch] the item of each segment */
	int32_t *ids;        /* [n_batch] this forward's tokens */
	uint32_t n_segs, rows;
	int first;           /* the step's result: its first failure */
};

/* Fills one forward pass: every unfinished item contributes its next tokens,
 * up to n_batch rows. Returns the bytes of new pages they need. */
static size_t gather(const struct tkv_engine *e, struct step *p)
{
	uint32_t B = e->params.n_batch;
	size_t need = 0, pool = kv_pool_budget(e->pool);

	p->rows = p->n_segs = 0;
	for (size_t i = 0; i < p->n_items && p->rows < B; i++) {
		struct tkv_batch_item *it = &p->items[i];
		uint32_t c;

		if (it->status || p->done[i] == it->n)
			continue;
		c = (uint32_t)(it->n - p->done[i] < B - p->rows ? it->n - p->done[i] : B - p->rows);
		/* as in tkv_seq_decode: a prompt chunk whose new pages alone would
		 * take more than the room above the governor's high mark goes in
		 * halves, over several forward passes of this step */
		while (pool && c > 1 && (double)need_bytes(it->seq, c) > chunk_room(e, pool))
			c = (c + 1) / 2;
		p->segs[p->n_segs] = (struct kv_seg){ it->seq->kv, p->rows, c, (int32_t)it->seq->n_past };
		p->seg_item[p->n_segs++] = i;
		memcpy(p->ids + p->rows, it->ids + p->done[i], c * sizeof *p->ids);
		p->rows += c;
		need += need_bytes(it->seq, c);
	}
	return need;
}

/* Reserves room per sequence; a sequence that cannot get it drops out of
 * the step (its status says why), and the rows left stay contiguous. */
static void reserve(struct step *p, struct tkv_error *err)
{
	uint32_t w = 0, r = 0;

	for (uint32_t g = 0; g < p->n_segs; g++) {
		struct tkv_batch_item *it = &p->items[p->seg_item[g]];
		struct tkv_error e2;
		int st;

		if ((st = kv_seq_reserve(p->segs[g].seq, p->segs[g].n, &e2))) {
			it->status = st;
			if (!p->first) {
				p->first = st;
				if (err)
					*err = e2;
			}
			p->segs[g].n = 0;
		}
	}
	for (uint32_t g = 0; g < p->n_segs; g++) {
		if (p->segs[g].n == 0)
			continue;
		memmove(p->ids + r, p->ids + p->segs[g].row0, p->segs[g].n * sizeof *p->ids);
		p->segs[g].row0 = r;
		r += p->segs[g].n;
		p->segs[w] = p->segs[g];
		p->seg_item[w++] = p->seg_item[g];
	}
	p->n_segs = w;
	p->rows = r;
}

/* Runs the forward pass and hands each item that finishes its logits; the
 * sequences then advance (policy rounds). */
static void forward(struct tkv_engine *e, struct step *p, struct tkv_error *err)
{
	uint32_t n_vocab = e->model->info.n_vocab, n_out = 0;

	for (uint32_t g = 0; g < p->n_segs; g++) {
		const struct tkv_batch_item *it = &p->items[p->seg_item[g]];

		if (it->logits && p->done[p->seg_item[g]] + p->segs[g].n == it->n)
			e->scratch.rows[n_out++] = p->segs[g].row0 + p->segs[g].n - 1;
	}
	model_forward(e->model, &e->scratch, e->tp, e->cache, p->ids, p->segs, p->n_segs, e->scratch.rows, n_out,
		      e->logits);
	n_out = 0;
	for (uint32_t g = 0; g < p->n_segs; g++) {
		struct tkv_batch_item *it = &p->items[p->seg_item[g]];
		int st;

		if (it->logits && p->done[p->seg_item[g]] + p->segs[g].n == it->n)
			memcpy(it->logits, e->logits + (size_t)n_out++ * n_vocab, n_vocab * sizeof(float));
		p->done[p->seg_item[g]] += p->segs[g].n;
		if ((st = advance(e, it->seq, p->segs[g].n, NULL))) {
			it->status = st;
			p->first = p->first ? p->first : tkv_errf(err, st, "out of memory while applying the KV policy");
		}
	}
}

int tkv_engine_step(struct tkv_engine *e, struct tkv_batch_item *items, size_t n_items, struct tkv_error *err)
{
	uint32_t B = e->params.n_batch;
	struct step p = { .items = items, .n_items = n_items };
	int abort_st = TKV_OK;

	for (size_t i = 0; i < n_items; i++) {
		items[i].status = check_tokens(e, items[i].seq, items[i].ids, items[i].n, NULL);
		if (items[i].status && !p.first)
			p.first = check_tokens(e, items[i].seq, items[i].ids, items[i].n, err);
	}
	p.done = tkv_calloc(e->alloc, n_items ? n_items : 1, sizeof *p.done);
	p.segs = tkv_malloc(e->alloc, B * sizeof *p.segs);
	p.seg_item = tkv_malloc(e->alloc, B * sizeof *p.seg_item);
	p.ids = tkv_malloc(e->alloc, B * sizeof *p.ids);
	if (!p.done || !p.segs || !p.seg_item || !p.ids)
		p.first = abort_st = tkv_errf(err, TKV_ERR_NOMEM, "out of memory for a batch step");
	while (!abort_st) {
		size_t need = gather(e, &p);
		int st;

		if (p.n_segs == 0)
			break;
		if ((st = gov_make_room(e, need))) {
			p.first = p.first ? p.first : tkv_errf(err, st, "out of memory while making room in the KV cache");
			abort_st = st;
			break;
		}
		reserve(&p, err);
		if (p.n_segs) {
			uint64_t t0 = util_now_ns();

			forward(e, &p, err);
			gov_sample(e, util_now_ns() - t0);
		}
	}
	/* a failure of the whole step leaves the unfinished items undone: they
	 * fail with it, so that an item with status TKV_OK got all its tokens */
	for (size_t i = 0; abort_st && i < n_items; i++)
		if (!items[i].status && (!p.done || p.done[i] < items[i].n))
			items[i].status = abort_st;
	tkv_free(e->alloc, p.ids);
	tkv_free(e->alloc, p.seg_item);
	tkv_free(e->alloc, p.segs);
	tkv_free(e->alloc, p.done);
	return p.first;
}

/* ---- for engine/kvstore.c (engine_impl.h) ---- */

struct kv_prefix *tkv_engine_prefix_tree(struct tkv_engine *e)
{
	return e->prefix;
}

struct kv_pool *tkv_engine_kv_pool(struct tkv_engine *e)
{
	return e->pool;
}

struct kv_seq *tkv_seq_kv_cache(struct tkv_seq *s)
{
	return s->kv;
}
