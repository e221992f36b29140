/* seq.c - per-sequence page streams: growth, appends and page bookkeeping
 * (compaction: compact.c; cross-layer sharing: share.c). */
#include "kv/seq.h"

#include <math.h>
#include <string.h>

#include "util/alloc.h"
#include "util/status.h"


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
	s->layer_weight = tkv_malloc(a, (n_layer ? n_layer : 1) * sizeof *s->layer_weight);
	if (!s->layer_weight)
		goto nomem_free_centroid;
	for (uint32_t l = 0; l < n_layer; l++)
		s->layer_weight[l] = 1.0f;
	for (size_t i = 0; i < n; i++) {
		s->streams[i].centroid = s->streams[0].centroid + i * head_dim;
		s->streams[i].tail = KV_NO_PAGE;
		s->streams[i].ref_tail = KV_NO_PAGE;
		s->streams[i].page_tokens = kv_pool_page_tokens(pool);
		s->streams[i].low_cap = kv_low_cap(kv_pool_page_tokens(pool), false);
		s->streams[i].hot_fmt = (uint8_t)kv_pool_fmt(pool);
		s->streams[i].weight = 1.0f;
	}
	s->pool = pool;
	s->alloc = a;
	s->n_layer = n_layer;
	s->n_kv_head = n_kv_head;
	s->head_dim = head_dim;
	*out = s;
	return TKV_OK;

nomem_free_centroid:
	tkv_free(a, s->streams[0].centroid);
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
		st->ref_tail = KV_NO_PAGE;
		st->kv_bytes = 0;
		st->n_seen = 0;
		st->ent_sum = 0;
		st->ent_n = 0;
		st->n_small = 0;
		st->small_slots = 0;
		st->hot_fmt = (uint8_t)kv_pool_fmt(s->pool);
		st->wide = false;
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
	tkv_free(s->alloc, s->layer_weight);
	tkv_free(s->alloc, s);
}

void kv_seq_set_layer(struct kv_seq *s, uint32_t layer, uint32_t page_tokens, float weight)
{
	for (uint32_t h = 0; h < s->n_kv_head; h++) {
		struct kv_stream *st = kv_seq_stream(s, layer, h);

		st->page_tokens = page_tokens;
		st->low_cap = kv_low_cap(page_tokens, true);
	}
	s->layer_weight[layer] = weight;
	s->plan_set = true;
}

void kv_seq_set_head_weights(struct kv_seq *s, const float *w)
{
	for (size_t i = 0; i < (size_t)s->n_layer * s->n_kv_head; i++)
		s->streams[i].weight = w ? w[i] : 1.0f;
	s->heads_set = w != NULL;
}

/* Pages new tokens go into: the stream's hot format, not rotated (new tokens
 * arrive in model space; a tight stream's hot format is q8, which its warm
 * pages may hold rotated from before). */
static int is_hot(const struct kv_stream *st, const struct kv_page *pg)
{
	return pg->fmt == st->hot_fmt && !(pg->flags & KV_PAGE_ROT) && kv_stream_takes(st, pg);
}

struct kv_page *kv_stream_new_page(struct kv_seq *s, const struct kv_stream *st, uint32_t fmt, uint32_t cap,
				   int *why)
{
	return kv_pool_get_width(s->pool, s->head_dim, fmt, cap, st->wide, why);
}

struct kv_page *kv_stream_new_page_for(struct kv_seq *s, const struct kv_stream *st, uint32_t fmt, uint32_t cap,
				       int32_t lo, int32_t hi, int *why)
{
	return kv_pool_get_span(s->pool, s->head_dim, fmt, cap, kv_pos_form_cap(lo, hi, cap, st->wide, kv_fmt_packed(fmt)),
				lo, hi, why);
}

/* Free slots and the tail of st's hot pages, counted again (after the hot
 * format or the width changed). */
static void recount_hot(struct kv_stream *st)
{
	st->hot_free = 0;
	st->tail = KV_NO_PAGE;
	for (uint32_t i = 0; i < st->n_pages; i++)
		if (is_hot(st, st->pages[i]))
			st->hot_free += st->pages[i]->cap - st->pages[i]->n_used;
}

/* Whether n_new more positions from s->n_pos need wide pages. */
static bool needs_wide(const struct kv_seq *s, uint32_t n_new)
{
	return (int64_t)s->n_pos + n_new > KV_POS16_LIMIT;
}

/* Every stream of s takes wide pages from now on. */
static void go_wide(struct kv_seq *s)
{
	for (size_t i = 0; i < (size_t)s->n_layer * s->n_kv_head; i++) {
		s->streams[i].wide = true;
		recount_hot(&s->streams[i]);
	}
}

void kv_stream_set_hot_fmt(struct kv_stream *st, uint32_t fmt)
{
	if (st->hot_fmt == fmt)
		return;
	st->hot_fmt = (uint8_t)fmt;
	recount_hot(st);
}

int kv_stream_grow(struct kv_seq *s, struct kv_stream *st, uint32_t want)
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
	if (kv_stream_grow(s, st, st->n_pages + 1))
		return TKV_ERR_NOMEM;
	st->pages[st->n_pages++] = pg;
	st->n_tokens += pg->n_used;
	st->kv_bytes += kv_page_share(pg, pg->n_used);
	if (is_hot(st, pg)) {
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
	if (is_hot(st, pg))
		st->hot_free = st->hot_free + pg->n_used - n;
	kv_pool_set_used(s->pool, pg, n);
}

void kv_stream_remove_slot(struct kv_seq *s, struct kv_stream *st, uint32_t i, uint32_t j)
{
	struct kv_page *pg = st->pages[i];
	uint32_t last = pg->n_used - 1;

	if (pg->flags & KV_PAGE_POSBM) {
		uint32_t b = (uint32_t)(kv_slot_pos(pg, j) - (int32_t)pg->pos_base);
		uint16_t *sc = kv_page_scores(pg);

		/* its bit goes; the later slots move down and keep theirs */
		kv_page_bm(pg)[b / 64] &= ~((uint64_t)1 << (b % 64));
		for (uint32_t t = j; t < last; t++)
			kv_tier_move(pg->fmt, pg->k, pg->v, pg->cap, pg->head_dim, t, t + 1);
		memmove(sc + j, sc + j + 1, (last - j) * sizeof *sc);
	} else if (j != last) {
		kv_tier_move(pg->fmt, pg->k, pg->v, pg->cap, pg->head_dim, j, last);
		kv_slot_copy(pg, j, pg, last, 1);
	}
	kv_stream_set_used(s, st, pg, last);
	if (is_hot(st, pg) && st->tail == KV_NO_PAGE)
		st->tail = i;
}

void kv_rows_sort(float *K, float *V, uint32_t d, int32_t *pos, uint16_t *score, uint32_t n, uint32_t *idx)
{
	float tk[KV_MAX_HEAD_DIM], tv[KV_MAX_HEAD_DIM];

	/* insertion sort of indices: rows come mostly in order */
	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = i;

		for (; j > 0 && pos[idx[j - 1]] > pos[i]; j--)
			idx[j] = idx[j - 1];
		idx[j] = i;
	}
	/* row i takes row idx[i]: follow each cycle once (idx[i] = i marks done) */
	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = i;
		int32_t p0 = pos[i];
		uint16_t s0 = score[i];

		if (idx[i] == i)
			continue;
		memcpy(tk, K + (size_t)i * d, d * sizeof *tk);
		memcpy(tv, V + (size_t)i * d, d * sizeof *tv);
		while (idx[j] != i) {
			uint32_t from = idx[j];

			memcpy(K + (size_t)j * d, K + (size_t)from * d, d * sizeof *K);
			memcpy(V + (size_t)j * d, V + (size_t)from * d, d * sizeof *V);
			pos[j] = pos[from];
			score[j] = score[from];
			idx[j] = j;
			j = from;
		}
		memcpy(K + (size_t)j * d, tk, d * sizeof *tk);
		memcpy(V + (size_t)j * d, tv, d * sizeof *tv);
		pos[j] = p0;
		score[j] = s0;
		idx[j] = j;
	}
}

void kv_page_set_rows(struct kv_page *pg, float *K, float *V, int32_t *pos, uint16_t *score, uint32_t n,
		      uint32_t *idx)
{
	if (pg->flags & KV_PAGE_POSBM)
		kv_rows_sort(K, V, pg->head_dim, pos, score, n, idx);
	kv_page_clear_pos(pg);
	for (uint32_t j = 0; j < n; j++)
		kv_slot_set_pos(pg, j, pos[j]);
	memcpy(kv_page_scores(pg), score, n * sizeof *score);
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
		if (is_hot(st, pg))
			st->hot_free -= pg->cap;
		kv_page_unref(s->pool, pg);
		st->pages[i] = st->pages[--st->n_pages];
		if (st->tail == i)
			st->tail = KV_NO_PAGE;
		else if (st->tail == st->n_pages)
			st->tail = i;
	}
}

uint32_t kv_stream_tail_cap(const struct kv_seq *s, const struct kv_stream *st, uint32_t fmt, uint32_t need,
			    uint32_t full)
{
	uint32_t room = 1, c;
	/* room the page may leave empty: a share of what the stream holds */
	double most = (double)st->kv_bytes / KV_TAIL_SHARE / ((double)kv_page_kv_bytes(full, s->head_dim, fmt) / full);

	if (most < 1.0)
		room = 0;
	else
		while ((double)room * 2 <= most && room * 2 <= full)
			room *= 2;
	c = need + room;
	if (c < KV_PAGE_MIN)
		c = KV_PAGE_MIN;
	return c < full ? c : full;
}

/* The pages a stream gets for n_new more tokens: *n_full of page_tokens,
 * then one of *tail slots (0: none). See kv_seq_reserve. */
static void grow_plan(const struct kv_seq *s, const struct kv_stream *st, uint32_t n_new, uint32_t *n_full,
		      uint32_t *tail)
{
	/* going wide leaves no hot room: the narrow pages take nothing more */
	uint32_t r, room = !st->wide && needs_wide(s, n_new) ? 0 : st->hot_free;

	*n_full = *tail = 0;
	if (n_new <= room)
		return;
	r = n_new - room;
	*n_full = r / st->page_tokens;
	r %= st->page_tokens;
	if (r)
		*tail = kv_stream_tail_cap(s, st, st->hot_fmt, r, st->page_tokens);
}

size_t kv_seq_reserve_bytes(const struct kv_seq *s, uint32_t n_new)
{
	size_t n_streams = (size_t)s->n_layer * s->n_kv_head, bytes = 0;

	for (size_t i = 0; i < n_streams; i++) {
		const struct kv_stream *st = &s->streams[i];
		uint32_t n_full, tail;
		bool wide = st->wide || needs_wide(s, n_new);

		grow_plan(s, st, n_new, &n_full, &tail);
		bytes += n_full * kv_page_bytes_width(st->page_tokens, s->head_dim, st->hot_fmt, wide);
		if (tail)
			bytes += kv_page_bytes_width(tail, s->head_dim, st->hot_fmt, wide);
	}
	return bytes;
}

/* The budget refused need_bytes of new pages for n_new more tokens. */
static int budget_full(const struct kv_seq *s, uint32_t n_new, size_t need_bytes, struct tkv_error *err)
{
	struct kv_pool_stats ps;

	kv_pool_stats(s->pool, &ps);
	return tkv_errf(err, TKV_ERR_KV_FULL,
			"KV cache budget exhausted at %d tokens: %u more need %zu bytes of new pages, "
			"%zu of the %zu-byte budget are in use (raise --kv-mem, or use a policy that evicts)",
			s->n_pos, n_new, need_bytes, ps.allocated, ps.budget);
}

/* Returns the empty pages a failed kv_seq_reserve took: the last added[i]
 * of each stream. */
static void unreserve(struct kv_seq *s, uint32_t *added)
{
	for (size_t i = 0; i < (size_t)s->n_layer * s->n_kv_head; i++) {
		struct kv_stream *st = &s->streams[i];

		for (; added[i] > 0; added[i]--) {
			struct kv_page *pg = st->pages[--st->n_pages];

			st->hot_free -= pg->cap;
			if (pg->cap < st->page_tokens) {
				st->n_small--;
				st->small_slots -= pg->cap;
			}
			if (st->tail == st->n_pages)
				st->tail = KV_NO_PAGE;
			kv_pool_put(s->pool, pg);
		}
	}
}

int kv_seq_reserve(struct kv_seq *s, uint32_t n_new, struct tkv_error *err)
{
	size_t n_streams = (size_t)s->n_layer * s->n_kv_head, i;
	size_t need_bytes = 0;
	uint32_t *added = NULL;
	int why = TKV_OK;

	/* grow the page arrays first: this can fail without touching the pool */
	for (i = 0; i < n_streams; i++) {
		struct kv_stream *st = &s->streams[i];
		uint32_t n_full, tail;

		grow_plan(s, st, n_new, &n_full, &tail);
		if (kv_stream_grow(s, st, st->n_pages + n_full + (tail != 0)))
			return tkv_errf(err, TKV_ERR_NOMEM, "out of memory growing a KV stream");
	}
	need_bytes = kv_seq_reserve_bytes(s, n_new);
	if (need_bytes == 0)
		return TKV_OK;
	if (!kv_pool_can_fit(s->pool, need_bytes))
		return budget_full(s, n_new, need_bytes, err);
	/* irreversible, and harmless if the pages below are refused: the
	 * narrow pages stay readable, only new slots go elsewhere */
	if (!s->streams[0].wide && needs_wide(s, n_new))
		go_wide(s);
	added = tkv_calloc(s->alloc, n_streams, sizeof *added);
	if (!added)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory reserving KV pages");

	for (i = 0; i < n_streams && why == TKV_OK; i++) {
		struct kv_stream *st = &s->streams[i];
		uint32_t n_full, tail;

		grow_plan(s, st, n_new, &n_full, &tail);
		for (; added[i] < n_full + (tail != 0); added[i]++) {
			uint32_t cap = added[i] < n_full ? st->page_tokens : tail;
			struct kv_page *pg = kv_stream_new_page(s, st, st->hot_fmt, cap, &why);

			if (!pg)
				break;
			kv_stream_add_page(s, st, pg); /* cannot fail: the array has grown */
			if (cap < st->page_tokens) {
				st->n_small++;
				st->small_slots += cap;
			}
		}
	}
	if (why != TKV_OK)
		unreserve(s, added);
	tkv_free(s->alloc, added);
	if (why == TKV_ERR_NOMEM)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory allocating KV pages");
	if (why != TKV_OK)
		return budget_full(s, n_new, need_bytes, err);
	return TKV_OK;
}

/* A page of st's hot format with room (the tail first), or NULL. */
static struct kv_page *hot_room(struct kv_stream *st)
{
	struct kv_page *pg = st->tail == KV_NO_PAGE ? NULL : st->pages[st->tail];

	if (pg && pg->n_used < pg->cap && is_hot(st, pg))
		return pg;
	for (uint32_t i = 0; i < st->n_pages; i++) {
		pg = st->pages[i];
		if (is_hot(st, pg) && pg->n_used < pg->cap) {
			st->tail = i;
			return pg;
		}
	}
	return NULL;
}

struct kv_page *kv_stream_hot_page(struct kv_seq *s, struct kv_stream *st, uint32_t need)
{
	struct kv_page *pg = hot_room(st);
	uint32_t cap;
	int why;

	if (pg)
		return pg;
	cap = need < st->page_tokens ? kv_stream_tail_cap(s, st, st->hot_fmt, need, st->page_tokens) : st->page_tokens;
	if (!(pg = kv_stream_new_page(s, st, st->hot_fmt, cap, &why)))
		return NULL;
	if (kv_stream_add_page(s, st, pg)) {
		kv_pool_put(s->pool, pg);
		return NULL;
	}
	if (cap < st->page_tokens) {
		st->n_small++;
		st->small_slots += cap;
	}
	return pg;
}

void kv_seq_append(struct kv_seq *s, uint32_t layer, uint32_t head, int32_t pos,
		   const float *k, const float *v)
{
	struct kv_stream *st = kv_seq_stream(s, layer, head);
	/* reserve guarantees a hot page with room */
	struct kv_page *pg = hot_room(st);

	kv_page_store(pg, pg->n_used, pos, k, v);
	kv_stream_set_used(s, st, pg, pg->n_used + 1);
	kv_stream_see_key(st, k, s->head_dim);
}

void kv_stream_see_key(struct kv_stream *st, const float *k, uint32_t d)
{
	float inv;

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
	struct kv_page *pg = kv_pool_get_like(p, src, why);

	if (!pg)
		return NULL;
	/* same shape, same layout: everything after the header */
	memcpy(pg->k, src->k, src->bytes - sizeof *src);
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
		b->window = a->window;
		b->hot_fmt = a->hot_fmt;
		b->wide = a->wide;
		b->page_tokens = a->page_tokens;
		b->low_cap = a->low_cap;
		b->n_small = a->n_small;
		b->small_slots = a->small_slots;
		b->n_seen = a->n_seen;
		b->ent_sum = a->ent_sum;
		b->ent_n = a->ent_n;
		b->weight = a->weight;
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
	memcpy(s->layer_weight, src->layer_weight, src->n_layer * sizeof *s->layer_weight);
	s->plan_set = src->plan_set;
	s->heads_set = src->heads_set;
	s->measure_entropy = src->measure_entropy;
	s->share_cos = src->share_cos;
	s->share_from = src->share_from;
	s->n_pos = src->n_pos;
	*out = s;
	return TKV_OK;

fail:
	kv_seq_free(s);
	if (why == TKV_ERR_KV_FULL)
		return tkv_errf(err, TKV_ERR_KV_FULL, "KV budget exhausted copying a sequence's cache");
	return tkv_errf(err, TKV_ERR_NOMEM, "out of memory copying a sequence's cache");
}
