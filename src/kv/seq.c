/* seq.c - per-sequence page streams and attention over them. */
#include "kv/seq.h"

#include <math.h>
#include <string.h>

#include "ops/ops.h"
#include "util/alloc.h"
#include "util/status.h"

int kv_seq_init(struct kv_seq **out, struct kv_pool *pool, uint32_t n_layer, uint32_t n_kv_head,
		uint32_t head_dim, struct tkv_alloc *a, struct tkv_error *err)
{
	struct kv_seq *s;

	*out = NULL;
	s = tkv_calloc(a, 1, sizeof *s);
	if (!s)
		goto nomem;
	s->streams = tkv_calloc(a, (size_t)n_layer * n_kv_head, sizeof *s->streams);
	if (!s->streams)
		goto nomem_free_s;
	s->pool = pool;
	s->alloc = a;
	s->n_layer = n_layer;
	s->n_kv_head = n_kv_head;
	s->head_dim = head_dim;
	*out = s;
	return TKV_OK;

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

		for (uint32_t j = 0; j < st->n_pages; j++) {
			struct kv_page *pg = st->pages[j];

			kv_pool_note_used(s->pool, pg->head_dim, pg->fmt, -(long)pg->n_used);
			pg->n_used = 0;
			kv_pool_put(s->pool, pg);
		}
		st->n_pages = 0;
		st->n_tokens = 0;
	}
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
	tkv_free(s->alloc, s->streams);
	tkv_free(s->alloc, s);
}

/* Pages a stream needs to hold n tokens. */
static uint32_t pages_for(uint32_t n, uint32_t P)
{
	return (n + P - 1) / P;
}

int kv_seq_reserve(struct kv_seq *s, uint32_t n_new, struct tkv_error *err)
{
	uint32_t P = kv_pool_page_tokens(s->pool);
	size_t n_streams = (size_t)s->n_layer * s->n_kv_head, i;
	size_t page_bytes = kv_page_bytes(P, s->head_dim, kv_pool_fmt(s->pool));
	size_t need_pages = 0;
	uint32_t got = 0;
	int why = TKV_OK;

	/* grow the page arrays first: this can fail without touching the pool */
	for (i = 0; i < n_streams; i++) {
		struct kv_stream *st = &s->streams[i];
		uint32_t want = pages_for(st->n_tokens + n_new, P);

		if (want > st->cap_pages) {
			uint32_t cap = st->cap_pages ? st->cap_pages : 4;
			struct kv_page **pages;

			while (cap < want)
				cap *= 2;
			pages = tkv_realloc(s->alloc, st->pages, (size_t)cap * sizeof *pages);
			if (!pages)
				return tkv_errf(err, TKV_ERR_NOMEM, "out of memory growing a KV stream");
			st->pages = pages;
			st->cap_pages = cap;
		}
		/* pages reserved earlier and not yet filled count: want may be below n_pages */
		if (want > st->n_pages)
			need_pages += want - st->n_pages;
	}
	if (need_pages == 0)
		return TKV_OK;
	if (!kv_pool_can_fit(s->pool, need_pages * page_bytes))
		goto full;

	/* stage the new pages past n_pages; n_pages moves only once all have come */
	for (i = 0; i < n_streams; i++) {
		struct kv_stream *st = &s->streams[i];
		uint32_t want = pages_for(st->n_tokens + n_new, P);

		for (got = st->n_pages; got < want; got++) {
			struct kv_page *pg = kv_pool_get(s->pool, s->head_dim, &why);

			if (!pg)
				goto undo;
			st->pages[got] = pg;
		}
	}
	for (i = 0; i < n_streams; i++) {
		struct kv_stream *st = &s->streams[i];
		uint32_t want = pages_for(st->n_tokens + n_new, P);

		if (want > st->n_pages)
			st->n_pages = want;
	}
	return TKV_OK;

undo:
	/* return only the pages staged by this call (stream i up to got, the streams
	 * before it up to want), not empty pages reserved by earlier calls */
	while (got > s->streams[i].n_pages)
		kv_pool_put(s->pool, s->streams[i].pages[--got]);
	while (i-- > 0) {
		struct kv_stream *st = &s->streams[i];

		for (got = pages_for(st->n_tokens + n_new, P); got > st->n_pages; got--)
			kv_pool_put(s->pool, st->pages[got - 1]);
	}
	if (why == TKV_ERR_NOMEM)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory allocating KV pages");
full: {
		struct kv_pool_stats ps;

		kv_pool_stats(s->pool, &ps);
		return tkv_errf(err, TKV_ERR_KV_FULL,
				"KV cache budget exhausted at %u tokens: %u more need %zu bytes of new pages, "
				"%zu of the %zu-byte budget are in use (raise --kv-mem)",
				s->streams[0].n_tokens, n_new, need_pages * page_bytes, ps.allocated, ps.budget);
	}
}

void kv_seq_append(struct kv_seq *s, uint32_t layer, uint32_t head, int32_t pos,
		   const float *k, const float *v)
{
	struct kv_stream *st = kv_seq_stream(s, layer, head);
	uint32_t P = kv_pool_page_tokens(s->pool);
	struct kv_page *pg = st->pages[st->n_tokens / P];

	kv_page_store(pg, pg->n_used, pos, k, v);
	pg->n_used++;
	st->n_tokens++;
	kv_pool_note_used(s->pool, pg->head_dim, pg->fmt, 1);
}

void kv_attn(const struct kv_stream *st, uint32_t head_dim, const float *q, uint32_t n_visible,
	     float scale, float *att, float *out)
{
	float kbuf[512], vbuf[512];
	float max = -INFINITY, sum = 0.0f;
	uint32_t t = 0;

	/* pass 1: scores */
	for (uint32_t p = 0; p < st->n_pages && t < n_visible; p++) {
		const struct kv_page *pg = st->pages[p];

		for (uint32_t j = 0; j < pg->n_used && t < n_visible; j++, t++) {
			float s = 0.0f;

			if (pg->fmt == KV_FMT_F32) {
				const float *k = (const float *)pg->k + (size_t)j * head_dim;
				for (uint32_t i = 0; i < head_dim; i++)
					s += q[i] * k[i];
			} else {
				kv_page_load_k(pg, j, kbuf);
				for (uint32_t i = 0; i < head_dim; i++)
					s += q[i] * kbuf[i];
			}
			att[t] = s * scale;
			if (att[t] > max)
				max = att[t];
		}
	}
	n_visible = t;
	for (t = 0; t < n_visible; t++) {
		att[t] = expf(att[t] - max);
		sum += att[t];
	}
	for (t = 0; t < n_visible; t++)
		att[t] /= sum;

	/* pass 2: weighted values */
	memset(out, 0, head_dim * sizeof(float));
	t = 0;
	for (uint32_t p = 0; p < st->n_pages && t < n_visible; p++) {
		const struct kv_page *pg = st->pages[p];

		for (uint32_t j = 0; j < pg->n_used && t < n_visible; j++, t++) {
			const float *v = vbuf;

			if (pg->fmt == KV_FMT_F32)
				v = (const float *)pg->v + (size_t)j * head_dim;
			else
				kv_page_load_v(pg, j, vbuf);
			for (uint32_t i = 0; i < head_dim; i++)
				out[i] += att[t] * v[i];
		}
	}
}
