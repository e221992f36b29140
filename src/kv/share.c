/* share.c - cross-layer sharing: the decision at append time, shared-slot
 * pages, and the layer-below map attention resolves shared slots through. */
#include "kv/share.h"

#include <math.h>
#include <string.h>

#include "util/alloc.h"
#include "util/status.h"

/* alpha = x . b / |b|^2 when cos(x, b) >= min_cos; NAN otherwise. */
static float share_scale(const float *x, const float *b, uint32_t d, float min_cos)
{
	double xb = 0.0, xx = 0.0, bb = 0.0, a;

	for (uint32_t i = 0; i < d; i++) {
		xb += (double)x[i] * b[i];
		xx += (double)x[i] * x[i];
		bb += (double)b[i] * b[i];
	}
	if (!(xx > 0.0 && bb > 0.0) || xb < (double)min_cos * sqrt(xx * bb))
		return NAN;
	a = xb / bb;
	return fabs(a) < 65504.0 ? (float)a : NAN;
}

/* A shared-slot page of st with room, taking a new one when none has;
 * NULL when the pool refuses. */
static struct kv_page *ref_page(struct kv_seq *s, struct kv_stream *st)
{
	struct kv_page *pg;
	int why;

	if (st->ref_tail < st->n_pages) {
		pg = st->pages[st->ref_tail];
		if (pg->fmt == KV_FMT_REF && pg->n_used < pg->cap && !(pg->flags & KV_PAGE_FROZEN) &&
		    kv_stream_takes(st, pg))
			return pg;
	}
	for (uint32_t i = 0; i < st->n_pages; i++) {
		pg = st->pages[i];
		if (pg->fmt == KV_FMT_REF && pg->n_used < pg->cap && !(pg->flags & KV_PAGE_FROZEN) &&
		    kv_stream_takes(st, pg)) {
			st->ref_tail = i;
			return pg;
		}
	}
	if (!(pg = kv_stream_new_page(s, st, KV_FMT_REF, st->low_cap, &why)))
		return NULL;
	if (kv_stream_add_page(s, st, pg)) {
		kv_pool_put(s->pool, pg);
		return NULL;
	}
	st->ref_tail = st->n_pages - 1;
	return pg;
}

bool kv_seq_append_shared(struct kv_seq *s, uint32_t layer, uint32_t head, int32_t pos, const float *k,
			  const float *v, const float *k_below, const float *v_below)
{
	struct kv_stream *st = kv_seq_stream(s, layer, head);
	struct kv_page *pg;
	float ak, av;

	if (!(s->share_cos > 0.0f && layer >= s->share_from && layer > 0 && k_below && v_below) ||
	    isnan(ak = share_scale(k, k_below, s->head_dim, s->share_cos)) ||
	    isnan(av = share_scale(v, v_below, s->head_dim, s->share_cos)) || !(pg = ref_page(s, st))) {
		kv_seq_append(s, layer, head, pos, k, v);
		return false;
	}
	kv_page_store(pg, pg->n_used, pos, &ak, &av);
	kv_stream_set_used(s, st, pg, pg->n_used + 1);
	kv_stream_see_key(st, k, s->head_dim);
	return true;
}

void kv_stream_pos_map(const struct kv_stream *src, uint32_t *map, int32_t n_pos)
{
	for (int32_t i = 0; i < n_pos; i++)
		map[i] = KV_NO_PAGE;
	for (uint32_t p = 0; p < src->n_pages; p++) {
		const struct kv_page *pg = src->pages[p];

		for (uint32_t j = 0; j < pg->n_used; j++) {
			int32_t pos = kv_slot_pos(pg, j);

			if (pos >= 0 && pos < n_pos)
				map[pos] = p << 12 | j;
		}
	}
}

int kv_share_rows_init(struct kv_share_rows *r, uint32_t n_batch, uint32_t n_kv_head, uint32_t head_dim,
		       struct tkv_alloc *a)
{
	size_t kvd = (size_t)n_kv_head * head_dim;

	r->n_kv_head = n_kv_head;
	r->head_dim = head_dim;
	r->kb = tkv_malloc(a, n_batch * kvd * sizeof(float));
	r->vb = tkv_malloc(a, n_batch * kvd * sizeof(float));
	r->shared = tkv_malloc(a, (size_t)n_batch * n_kv_head);
	if (!r->kb || !r->vb || !r->shared) {
		kv_share_rows_free(r, a);
		return TKV_ERR_NOMEM;
	}
	return TKV_OK;
}

void kv_share_rows_free(struct kv_share_rows *r, struct tkv_alloc *a)
{
	tkv_free(a, r->kb);
	tkv_free(a, r->vb);
	tkv_free(a, r->shared);
	r->kb = r->vb = NULL;
	r->shared = NULL;
}

void kv_share_append(struct kv_share_rows *r, struct kv_seq *s, uint32_t layer, uint32_t head, uint32_t row,
		     int32_t pos, const float *k, const float *v)
{
	size_t at = ((size_t)row * r->n_kv_head + head) * r->head_dim;
	float *kb = r->kb + at, *vb = r->vb + at;
	uint8_t *shared = &r->shared[(size_t)row * r->n_kv_head + head];
	/* a shared slot is never a source: no chains */
	bool source = layer && !*shared;

	*shared = kv_seq_append_shared(s, layer, head, pos, k, v, source ? kb : NULL, source ? vb : NULL);
	memcpy(kb, k, r->head_dim * sizeof *kb);
	memcpy(vb, v, r->head_dim * sizeof *vb);
}

void kv_share_attn_below(struct kv_seq *s, uint32_t layer, uint32_t head, int32_t end, uint32_t *map,
			 int32_t map_cap, struct kv_attn_args *a)
{
	const struct kv_stream *st = kv_seq_stream(s, layer, head);

	a->below = NULL;
	if (layer == 0 || !(s->share_cos > 0.0f))
		return;
	for (uint32_t p = 0; p < st->n_pages; p++)
		if (st->pages[p]->fmt == KV_FMT_REF) {
			a->below = kv_seq_stream(s, layer - 1, head);
			a->n_pos = end < map_cap ? end : map_cap;
			kv_stream_pos_map(a->below, map, a->n_pos);
			a->below_map = map;
			return;
		}
}
