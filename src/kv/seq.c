/* seq.c - per-sequence page streams: growth, appends and page bookkeeping. */
#include "kv/seq.h"

#include <string.h>

#include "util/alloc.h"
#include "util/status.h"

#define KV_SEQ_MAX_D 512  /* head sizes the model accepts (LLAMA_MAX_HEAD_DIM) */

int kv_seq_init(struct kv_seq **out, struct kv_pool *pool, uint32_t n_layer, uint32_t n_kv_head,
		uint32_t head_dim, struct tkv_alloc *a, struct tkv_error *err)
{
	size_t n = (size_t)n_layer * n_kv_head;
	struct kv_seq *s;

	*out = NULL;
	s = tkv_calloc(a, 1, sizeof *s);
	if (!s)
		goto nomem;
	s->streams = tkv_calloc(a, n, sizeof *s->streams);
	if (!s->streams)
		goto nomem_free_s;
	s->streams[0].centroid = tkv_calloc(a, n * head_dim, sizeof(float));
	if (!s->streams[0].centroid)
		goto nomem_free_streams;
	for (size_t i = 0; i < n; i++) {
		s->streams[i].centroid = s->streams[0].centroid + i * head_dim;
		s->streams[i].tail = KV_NO_PAGE;
	}
	s->pool = pool;
	s->alloc = a;
	s->n_layer = n_layer;
	s->n_kv_head = n_kv_head;
	s->head_dim = head_dim;
	*out = s;
	return TKV_OK;

nomem_free_streams:
	tkv_free(a, s->streams);
nomem_free_s:
	tkv_free(a, s);
nomem:
	return tkv_errf(err, TKV_ERR_NOMEM, "out of memory creating a sequence cache");
}

void kv_seq_clear(struct kv_seq *s)
{
	size_t n = (size_t)s->n_layer * s->n_kv_head;

	for (size_t i = 0; i < n; i++) {
		struct kv_stream *st = &s->streams[i];

		for (uint32_t j = 0; j < st->n_pages; j++)
			kv_page_unref(s->pool, st->pages[j]);
		st->n_pages = 0;
		st->n_tokens = 0;
		st->hot_free = 0;
		st->tail = KV_NO_PAGE;
		st->kv_bytes = 0;
		st->n_seen = 0;
		st->ent_sum = 0;
		st->ent_n = 0;
		memset(st->centroid, 0, s->head_dim * sizeof(float));
	}
	s->n_pos = 0;
}

void kv_seq_free(struct kv_seq *s)
{
	size_t n;

	if (!s)
		return;
	kv_seq_clear(s);
	n = (size_t)s->n_layer * s->n_kv_head;
	for (size_t i = 0; i < n; i++)
		tkv_free(s->alloc, s->streams[i].pages);
	tkv_free(s->alloc, s->streams[0].centroid);
	tkv_free(s->alloc, s->streams);
	tkv_free(s->alloc, s);
}

static int is_hot(const struct kv_seq *s, const struct kv_page *pg)
{
	return pg->fmt == kv_pool_fmt(s->pool);
}

static int grow_pages(struct kv_seq *s, struct kv_stream *st, uint32_t want)
{
	uint32_t cap = st->cap_pages ? st->cap_pages : 4;
	struct kv_page **pages;

	if (want <= st->cap_pages)
		return TKV_OK;
	while (cap < want)
		cap *= 2;
	pages = tkv_realloc(s->alloc, st->pages, (size_t)cap * sizeof *pages);
	if (!pages)
		return TKV_ERR_NOMEM;
	st->pages = pages;
	st->cap_pages = cap;
	return TKV_OK;
}

int kv_stream_add_page(struct kv_seq *s, struct kv_stream *st, struct kv_page *pg)
{
	if (grow_pages(s, st, st->n_pages + 1))
		return TKV_ERR_NOMEM;
	st->pages[st->n_pages++] = pg;
	st->n_tokens += pg->n_used;
	st->kv_bytes += kv_page_share(pg, pg->n_used);
	if (is_hot(s, pg)) {
		st->hot_free += pg->cap - pg->n_used;
		if (st->tail == KV_NO_PAGE && pg->n_used < pg->cap)
			st->tail = st->n_pages - 1;
	}
	return TKV_OK;
}

void kv_stream_set_used(struct kv_seq *s, struct kv_stream *st, struct kv_page *pg, uint32_t n)
{
	st->n_tokens = st->n_tokens - pg->n_used + n;
	st->kv_bytes = st->kv_bytes - kv_page_share(pg, pg->n_used) + kv_page_share(pg, n);
	if (is_hot(s, pg))
		st->hot_free = st->hot_free + pg->n_used - n;
	kv_pool_set_used(s->pool, pg, n);
}

void kv_stream_remove_slot(struct kv_seq *s, struct kv_stream *st, uint32_t i, uint32_t j)
{
	struct kv_page *pg = st->pages[i];
	uint32_t last = pg->n_used - 1;

	if (j != last) {
		kv_tier_move(pg->fmt, pg->k, pg->v, pg->cap, pg->head_dim, j, last);
		pg->pos[j] = pg->pos[last];
		pg->score[j] = pg->score[last];
	}
	kv_stream_set_used(s, st, pg, last);
	if (is_hot(s, pg) && st->tail == KV_NO_PAGE)
		st->tail = i;
}

void kv_stream_drop_empty(struct kv_seq *s, struct kv_stream *st)
{
	uint32_t i = 0;

	while (i < st->n_pages) {
		struct kv_page *pg = st->pages[i];

		if (pg->n_used) {
			i++;
			continue;
		}
		if (is_hot(s, pg))
			st->hot_free -= pg->cap;
		kv_page_unref(s->pool, pg);
		st->pages[i] = st->pages[--st->n_pages];
		if (st->tail == i)
			st->tail = KV_NO_PAGE;
		else if (st->tail == st->n_pages)
			st->tail = i;
	}
}

/* Pages whose slots compaction may move: private (not in the prefix tree),
 * partly filled. */
static int partial(const struct kv_page *pg)
{
	return pg->n_used > 0 && pg->n_used < pg->cap && !(pg->flags & KV_PAGE_FROZEN);
}

/* Moves the last m slots of page a to the end of page b (same format and
 * rotation, b has room), in the pages' own (possibly rotated) space. Per-slot
 * formats copy exactly (f16 and q8 rows decode and re-encode to the same
 * bits); packed ones re-pack b with its slots and the new ones (K and V:
 * scratch for b->cap rows), one more rounding of b's key parameters, as when
 * the policy tops a page up. */
static void move_slots(struct kv_seq *s, struct kv_stream *st, struct kv_page *a, struct kv_page *b, uint32_t m,
		       float *K, float *V)
{
	uint32_t d = s->head_dim, na = a->n_used - m, nb = b->n_used;

	if (kv_fmt_packed(b->fmt)) {
		kv_tier_load_k_slots(b->fmt, b->k, b->cap, d, 0, nb, K);
		kv_tier_load_v_slots(b->fmt, b->v, b->cap, d, 0, nb, V);
		kv_tier_load_k_slots(a->fmt, a->k, a->cap, d, na, m, K + (size_t)nb * d);
		kv_tier_load_v_slots(a->fmt, a->v, a->cap, d, na, m, V + (size_t)nb * d);
		kv_tier_pack(b->fmt, b->k, b->v, b->cap, d, K, V, nb + m);
	} else {
		float k[KV_SEQ_MAX_D], v[KV_SEQ_MAX_D];

		for (uint32_t j = 0; j < m; j++) {
			kv_tier_load_k(a->fmt, a->k, a->cap, d, na + j, k);
			kv_tier_load_v(a->fmt, a->v, a->cap, d, na + j, v);
			kv_tier_store(b->fmt, b->k, b->v, b->cap, d, nb + j, k, v);
		}
	}
	memcpy(b->pos + nb, a->pos + na, m * sizeof *b->pos);
	memcpy(b->score + nb, a->score + na, m * sizeof *b->score);
	kv_stream_set_used(s, st, b, nb + m);
	kv_stream_set_used(s, st, a, na);
}

int kv_stream_compact(struct kv_seq *s, struct kv_stream *st)
{
	uint32_t d = s->head_dim, cap_max = 0;
	float *K = NULL, *V = NULL;
	int rc = TKV_OK;

	for (uint32_t i = 0; i < st->n_pages; i++)
		if (kv_fmt_packed(st->pages[i]->fmt) && partial(st->pages[i]) && st->pages[i]->cap > cap_max)
			cap_max = st->pages[i]->cap;
	if (cap_max) {
		K = tkv_malloc(s->alloc, (size_t)cap_max * d * sizeof(float));
		V = tkv_malloc(s->alloc, (size_t)cap_max * d * sizeof(float));
		if (!K || !V)
			rc = TKV_ERR_NOMEM; /* per-slot formats still compact */
	}
	for (;;) {
		struct kv_page *a = NULL, *b = NULL;

		/* the emptiest partial page that has a partner of its format and
		 * rotation, and the fullest such partner: each move empties a or
		 * fills b, so the partial pages dwindle to one per group */
		for (uint32_t i = 0; i < st->n_pages; i++) {
			struct kv_page *pi = st->pages[i];

			if (!partial(pi) || (rc && kv_fmt_packed(pi->fmt)))
				continue;
			for (uint32_t j = 0; j < st->n_pages; j++) {
				struct kv_page *pj = st->pages[j];

				if (j == i || !partial(pj) || pj->fmt != pi->fmt ||
				    (pj->flags & KV_PAGE_ROT) != (pi->flags & KV_PAGE_ROT))
					continue;
				if (!a || pi->n_used < a->n_used || (pi == a && pj->n_used > b->n_used)) {
					a = pi;
					b = pj;
				}
			}
		}
		if (!a)
			break;
		move_slots(s, st, a, b, a->n_used < b->cap - b->n_used ? a->n_used : b->cap - b->n_used, K, V);
	}
	tkv_free(s->alloc, V);
	tkv_free(s->alloc, K);
	kv_stream_drop_empty(s, st);
	return rc;
}

/* Hot pages a stream needs for n_new more tokens. */
static uint32_t pages_needed(const struct kv_stream *st, uint32_t n_new, uint32_t P)
{
	return n_new > st->hot_free ? (n_new - st->hot_free + P - 1) / P : 0;
}

int kv_seq_reserve(struct kv_seq *s, uint32_t n_new, struct tkv_error *err)
{
	uint32_t P = kv_pool_page_tokens(s->pool), fmt = kv_pool_fmt(s->pool);
	size_t n_streams = (size_t)s->n_layer * s->n_kv_head, i;
	size_t page_bytes = kv_page_bytes(P, s->head_dim, fmt);
	size_t need_pages = 0;
	uint32_t *added = NULL;
	int why = TKV_OK;

	/* grow the page arrays first: this can fail without touching the pool */
	for (i = 0; i < n_streams; i++) {
		struct kv_stream *st = &s->streams[i];
		uint32_t need = pages_needed(st, n_new, P);

		if (grow_pages(s, st, st->n_pages + need))
			return tkv_errf(err, TKV_ERR_NOMEM, "out of memory growing a KV stream");
		need_pages += need;
	}
	if (need_pages == 0)
		return TKV_OK;
	if (!kv_pool_can_fit(s->pool, need_pages * page_bytes))
		goto full;
	added = tkv_calloc(s->alloc, n_streams, sizeof *added);
	if (!added)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory reserving KV pages");

	for (i = 0; i < n_streams; i++) {
		struct kv_stream *st = &s->streams[i];
		uint32_t need = pages_needed(st, n_new, P);

		for (; added[i] < need; added[i]++) {
			struct kv_page *pg = kv_pool_get(s->pool, s->head_dim, fmt, P, &why);

			if (!pg)
				goto undo;
			kv_stream_add_page(s, st, pg); /* cannot fail: the array has grown */
		}
	}
	tkv_free(s->alloc, added);
	return TKV_OK;

undo:
	/* return the empty pages taken by this call: the last added[i] of each stream */
	for (i = 0; i < n_streams; i++) {
		struct kv_stream *st = &s->streams[i];

		for (; added[i] > 0; added[i]--) {
			struct kv_page *pg = st->pages[--st->n_pages];

			st->hot_free -= pg->cap;
			if (st->tail == st->n_pages)
				st->tail = KV_NO_PAGE;
			kv_pool_put(s->pool, pg);
		}
	}
	tkv_free(s->alloc, added);
	if (why == TKV_ERR_NOMEM)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory allocating KV pages");
full: {
		struct kv_pool_stats ps;

		kv_pool_stats(s->pool, &ps);
		return tkv_errf(err, TKV_ERR_KV_FULL,
				"KV cache budget exhausted at %d tokens: %u more need %zu bytes of new pages, "
				"%zu of the %zu-byte budget are in use (raise --kv-mem, or use a policy that evicts)",
				s->n_pos, n_new, need_pages * page_bytes, ps.allocated, ps.budget);
	}
}

void kv_seq_append(struct kv_seq *s, uint32_t layer, uint32_t head, int32_t pos,
		   const float *k, const float *v)
{
	struct kv_stream *st = kv_seq_stream(s, layer, head);
	struct kv_page *pg = st->tail == KV_NO_PAGE ? NULL : st->pages[st->tail];
	uint32_t d = s->head_dim;
	float inv;

	if (!pg || pg->n_used == pg->cap || !is_hot(s, pg)) {
		/* find another full-precision page with room; reserve guarantees one */
		for (uint32_t i = 0; i < st->n_pages; i++) {
			struct kv_page *c = st->pages[i];

			if (is_hot(s, c) && c->n_used < c->cap) {
				st->tail = i;
				pg = c;
				break;
			}
		}
	}
	kv_page_store(pg, pg->n_used, pos, k, v);
	kv_stream_set_used(s, st, pg, pg->n_used + 1);
	/* running mean of keys: the context's core vector for semantic scores */
	st->n_seen++;
	inv = 1.0f / (float)st->n_seen;
	for (uint32_t i = 0; i < d; i++)
		st->centroid[i] += (k[i] - st->centroid[i]) * inv;
}

/* A private copy of page src: same shape, format, flags (but not frozen) and
 * fill; NULL with *why set when the pool refuses. */
static struct kv_page *page_copy(struct kv_pool *p, const struct kv_page *src, int *why)
{
	struct kv_page *pg = kv_pool_get(p, src->head_dim, src->fmt, src->cap, why);

	if (!pg)
		return NULL;
	memcpy(pg->pos, src->pos, (size_t)src->cap * sizeof *pg->pos);
	memcpy(pg->score, src->score, (size_t)src->cap * sizeof *pg->score);
	memcpy(pg->k, src->k, kv_tier_k_bytes(src->fmt, src->cap, src->head_dim));
	memcpy(pg->v, src->v, kv_tier_v_bytes(src->fmt, src->cap, src->head_dim));
	pg->flags = src->flags & (uint8_t)~KV_PAGE_FROZEN;
	kv_pool_set_used(p, pg, src->n_used);
	return pg;
}

int kv_seq_fork(struct kv_seq **out, const struct kv_seq *src, struct tkv_error *err)
{
	size_t n = (size_t)src->n_layer * src->n_kv_head;
	struct kv_seq *s;
	int st, why = TKV_OK;

	*out = NULL;
	if ((st = kv_seq_init(&s, src->pool, src->n_layer, src->n_kv_head, src->head_dim, src->alloc, err)))
		return st;
	memcpy(s->streams[0].centroid, src->streams[0].centroid, n * src->head_dim * sizeof(float));
	for (size_t i = 0; i < n; i++) {
		const struct kv_stream *a = &src->streams[i];
		struct kv_stream *b = &s->streams[i];

		b->budget = a->budget;
		b->n_seen = a->n_seen;
		b->ent_sum = a->ent_sum;
		b->ent_n = a->ent_n;
		for (uint32_t j = 0; j < a->n_pages; j++) {
			struct kv_page *pg = a->pages[j];

			if (pg->flags & KV_PAGE_FROZEN) {
				pg->refs++;     /* shared prefix pages stay shared */
			} else if (!(pg = page_copy(s->pool, pg, &why))) {
				goto fail;
			}
			if (kv_stream_add_page(s, b, pg)) {
				kv_page_unref(s->pool, pg);
				why = TKV_ERR_NOMEM;
				goto fail;
			}
		}
	}
	s->n_pos = src->n_pos;
	*out = s;
	return TKV_OK;

fail:
	kv_seq_free(s);
	if (why == TKV_ERR_KV_FULL)
		return tkv_errf(err, TKV_ERR_KV_FULL, "KV budget exhausted copying a sequence's cache");
	return tkv_errf(err, TKV_ERR_NOMEM, "out of memory copying a sequence's cache");
}
