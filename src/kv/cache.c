/* cache.c - the forward pass's view of the cache: store a layer's new keys
 * and values, attend a layer's queries (cache.h). */
#include "kv/cache.h"

#include <math.h>

#include "kv/policy.h"
#include "kv/seq.h"
#include "kv/share.h"
#include "util/alloc.h"
#include "util/status.h"
#include "util/tpool.h"

struct kv_cache {
	struct tkv_alloc *alloc;
	const struct kv_cfg *cfg;   /* borrowed */
	struct kv_cache_shape shape;
	uint32_t group;             /* query heads per KV head */
	float *logit;        /* (n_threads, group, n_ctx) attention logits/weights, per thread */
	float *att;          /* (n_threads, n_ctx) attention per slot summed over a group */
	float *rot;          /* (n_threads, 2, group, head_dim) rotated query / output */
	uint32_t *below_map; /* (n_threads, n_ctx) kv_stream_pos_map of the layer below */
	struct kv_share_rows share;
};

int kv_cache_init(struct kv_cache **out, const struct kv_cfg *cfg, const struct kv_cache_shape *shape,
		  struct tkv_alloc *a, struct tkv_error *err)
{
	struct kv_cache *c;
	size_t T = shape->n_threads, ctx = shape->n_ctx, group = shape->n_head / shape->n_kv_head;

	*out = NULL;
	c = tkv_calloc(a, 1, sizeof *c);
	if (!c)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for attention scratch (batch %u)", shape->n_batch);
	c->alloc = a;
	c->cfg = cfg;
	c->shape = *shape;
	c->group = (uint32_t)group;
	c->logit = tkv_malloc(a, T * group * ctx * sizeof(float));
	c->att = tkv_malloc(a, T * ctx * sizeof(float));
	c->rot = tkv_malloc(a, T * 2 * group * shape->head_dim * sizeof(float));
	c->below_map = tkv_malloc(a, T * ctx * sizeof *c->below_map);
	if (!c->logit || !c->att || !c->rot || !c->below_map ||
	    kv_share_rows_init(&c->share, shape->n_batch, shape->n_kv_head, shape->head_dim, a)) {
		kv_cache_free(c);
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory for attention scratch (batch %u)", shape->n_batch);
	}
	*out = c;
	return TKV_OK;
}

void kv_cache_free(struct kv_cache *c)
{
	if (!c)
		return;
	kv_share_rows_free(&c->share, c->alloc);
	tkv_free(c->alloc, c->below_map);
	tkv_free(c->alloc, c->rot);
	tkv_free(c->alloc, c->att);
	tkv_free(c->alloc, c->logit);
	tkv_free(c->alloc, c);
}

void kv_cache_store(struct kv_cache *c, uint32_t layer, const struct kv_seg *segs, uint32_t n_segs,
		    const float *k, const float *v)
{
	uint32_t H = c->shape.n_kv_head, hd = c->shape.head_dim;
	size_t kvd = (size_t)H * hd;

	for (uint32_t g = 0; g < n_segs; g++) {
		const struct kv_seg *sg = &segs[g];

		for (uint32_t i = 0; i < sg->n; i++) {
			size_t r = sg->row0 + i;
			int32_t pos = sg->pos0 + (int32_t)i;

			for (uint32_t h = 0; h < H; h++) {
				const float *kr = k + r * kvd + (size_t)h * hd, *vr = v + r * kvd + (size_t)h * hd;

				if (sg->seq->share_cos > 0.0f)
					kv_share_append(&c->share, sg->seq, layer, h, (uint32_t)r, pos, kr, vr);
				else
					kv_seq_append(sg->seq, layer, h, pos, kr, vr);
			}
		}
	}
}

struct attend_job {
	struct kv_cache *c;
	const struct kv_seg *segs;
	uint32_t n_segs, layer;
	const float *q;
	float *out;
};

/* The head probe (seq.h): the weight the slots at positions probe_lo ..
 * probe_hi - 1 received from one query row (att in the order of
 * kv_policy_observe: pages in order, their filled slots). */
static void probe_add(struct kv_stream *st, const struct kv_seq *s, const float *att)
{
	size_t i = 0;
	double m = 0.0;

	for (uint32_t p = 0; p < st->n_pages; p++) {
		const struct kv_page *pg = st->pages[p];

		for (uint32_t j = 0; j < pg->n_used; j++, i++) {
			int32_t pos = kv_slot_pos(pg, j);

			if (pos >= s->probe_lo && pos < s->probe_hi)
				m += att[i];
		}
	}
	st->probe_mass += m;
}

/* The rows of one segment for the query heads of KV head g, in order: the
 * slots' scores take each query's attention as the policy asks, and the
 * stream's entropy is counted where budgets or a layer plan need it. */
static void attend_stream(const struct attend_job *j, const struct kv_seg *sg, uint32_t g, int ith,
			  struct kv_attn_args *a)
{
	const struct kv_cache *c = j->c;
	const struct kv_cfg *cfg = c->cfg;
	uint32_t hd = c->shape.head_dim, n_head = c->shape.n_head, group = c->group;
	struct kv_stream *st = kv_seq_stream(sg->seq, j->layer, g);
	uint32_t first_voter = kv_policy_first_voter(cfg, sg->n);

	/* shared slots read their directions in the layer below */
	kv_share_attn_below(sg->seq, j->layer, g, sg->pos0 + (int32_t)sg->n,
			    c->below_map + (size_t)ith * c->shape.n_ctx, (int32_t)c->shape.n_ctx, a);
	for (uint32_t i = 0; i < sg->n; i++) {
		size_t row = sg->row0 + i;
		int observe = i >= first_voter;
		int probe = sg->seq->probe && sg->pos0 + (int32_t)i >= sg->seq->probe_q0;

		a->q = j->q + (row * n_head + (size_t)g * group) * hd;
		a->out = j->out + (row * n_head + (size_t)g * group) * hd;
		a->qpos = sg->pos0 + (int32_t)i;
		a->window = st->window;
		/* the segment's keys are stored: none is past its last row */
		a->unmasked = st->window == 0 && i + 1 == sg->n;
		a->att = observe || probe ? c->att + (size_t)ith * c->shape.n_ctx : NULL;
		a->entropy = cfg->adaptive || sg->seq->measure_entropy ? &st->ent_sum : NULL;
		kv_attn(st, hd, a);
		if (observe)
			kv_policy_observe(cfg, st, a->att);
		if (probe)
			probe_add(st, sg->seq, a->att);
		if (a->entropy)
			st->ent_n++;
	}
}

/* One task per (segment, KV head), so score updates of a stream never race. */
static void attend_worker(void *ctx, int ith, int nth)
{
	const struct attend_job *j = ctx;
	const struct kv_cache *c = j->c;
	uint32_t hd = c->shape.head_dim, H = c->shape.n_kv_head, group = c->group;
	size_t n_task = (size_t)j->n_segs * H;
	struct kv_attn_args a = {
		.nq = group,
		.scale = 1.0f / sqrtf((float)hd),
		.skip = c->cfg->skip,
		.softcap = c->shape.softcap,
		.logit = c->logit + (size_t)ith * group * c->shape.n_ctx,
		.qrot = c->rot + (size_t)ith * 2 * group * hd,
		.orot = c->rot + ((size_t)ith * 2 + 1) * group * hd,
	};

	for (size_t t = n_task * ith / nth; t < n_task * (ith + 1) / nth; t++)
		attend_stream(j, &j->segs[t / H], (uint32_t)(t % H), ith, &a);
}

void kv_cache_attend(struct kv_cache *c, struct tpool *tp, uint32_t layer, const struct kv_seg *segs,
		     uint32_t n_segs, const float *q, float *out)
{
	struct attend_job j = { c, segs, n_segs, layer, q, out };
	size_t work = 0;

	/* the rows' keys are stored by now: each row attends to the tokens
	 * before the segment and the segment's own */
	for (uint32_t g = 0; g < n_segs; g++)
		work += (size_t)segs[g].n * kv_seq_stream(segs[g].seq, 0, 0)->n_tokens;
	work *= (size_t)c->shape.n_head * c->shape.head_dim;
	/* small attention work runs on the caller: a wake-up costs more */
	tpool_run(work < 65536 ? NULL : tp, attend_worker, &j);
}
