/* pool.c - byte-budgeted page pool. Pages come from the counting allocator when
 * asked for and go back when returned: nothing is preallocated, so the cache
 * holds what the live sequences need and no more. */
#include "kv/pool.h"

#include <pthread.h>
#include <string.h>

#include "util/alloc.h"
#include "util/status.h"

struct kv_pool {
	struct tkv_alloc *alloc;
	struct kv_pool_params params;
	pthread_mutex_t lock;
	struct kv_pool_stats st;     /* guarded by lock */
};

/* The header starts a cache line and K follows it at 32 bytes; V starts at
 * 32 bytes too (an AVX load) and the metadata after it, so a small page pays
 * little padding. */
#define KV_DATA_ALIGN 32
#define KV_META_ALIGN 4
#define ROUND_UP(x, a) (((x) + (a) - 1) & ~(size_t)((a) - 1))

struct kv_pool_params kv_pool_default_params(void)
{
	struct kv_pool_params p = { .budget = 0, .page_tokens = 16, .fmt = KV_FMT_F16 };
	return p;
}

size_t kv_page_kv_bytes(uint32_t cap, uint32_t head_dim, uint32_t fmt)
{
	return kv_tier_k_bytes(fmt, cap, head_dim) + kv_tier_v_bytes(fmt, cap, head_dim);
}

/* Offsets of a page's regions from its start (see pool.h). */
struct page_layout {
	size_t v, meta, end;
};

/* words: a bitmap page's bitmap (form KV_PAGE_POSBM), which ends it. */
static struct page_layout layout(uint32_t cap, uint32_t head_dim, uint32_t fmt, uint32_t form, uint32_t words)
{
	struct page_layout l;

	l.v = ROUND_UP(sizeof(struct kv_page) + kv_tier_k_bytes(fmt, cap, head_dim), KV_DATA_ALIGN);
	l.meta = ROUND_UP(l.v + kv_tier_v_bytes(fmt, cap, head_dim), KV_META_ALIGN);
	if (form & KV_PAGE_POSBM)
		l.end = kv_bm_off(l.meta, cap) + (size_t)words * sizeof(uint64_t);
	else
		l.end = ROUND_UP(l.meta + kv_meta_pos_off(cap) + (size_t)cap * kv_pos_bytes(form), KV_META_ALIGN);
	return l;
}

size_t kv_page_bytes(uint32_t cap, uint32_t head_dim, uint32_t fmt)
{
	return layout(cap, head_dim, fmt, 0, 0).end;
}

size_t kv_page_bytes_width(uint32_t cap, uint32_t head_dim, uint32_t fmt, bool wide)
{
	return layout(cap, head_dim, fmt, wide ? KV_PAGE_WIDE : 0, 0).end;
}

size_t kv_page_bytes_form(uint32_t cap, uint32_t head_dim, uint32_t fmt, uint32_t form)
{
	return layout(cap, head_dim, fmt, form & KV_POS_FORMS & ~(uint32_t)KV_PAGE_POSBM, 0).end;
}

size_t kv_page_bytes_bm(uint32_t cap, uint32_t head_dim, uint32_t fmt, uint32_t words)
{
	return layout(cap, head_dim, fmt, KV_PAGE_POSBM, words).end;
}

int kv_pool_init(struct kv_pool **out, const struct kv_pool_params *p, struct tkv_alloc *a,
		 struct tkv_error *err)
{
	struct kv_pool *pool;

	*out = NULL;
	if (p->page_tokens == 0 || p->page_tokens > 4096)
		return tkv_errf(err, TKV_ERR_ARG, "KV page size %u tokens: must be 1..4096", p->page_tokens);
	if (p->fmt != KV_FMT_F16 && p->fmt != KV_FMT_F32)
		return tkv_errf(err, TKV_ERR_ARG, "KV page format %u: full precision must be f16 or f32", p->fmt);
	pool = tkv_calloc(a, 1, sizeof *pool);
	if (!pool)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory creating the KV pool");
	if (pthread_mutex_init(&pool->lock, NULL) != 0) {
		tkv_free(a, pool);
		return tkv_errf(err, TKV_ERR_NOMEM, "cannot create the KV pool lock");
	}
	pool->alloc = a;
	pool->params = *p;
	pool->st.budget = p->budget;
	*out = pool;
	return TKV_OK;
}

void kv_pool_free(struct kv_pool *p)
{
	if (!p)
		return;
	pthread_mutex_destroy(&p->lock);
	tkv_free(p->alloc, p);
}

uint32_t kv_pool_page_tokens(const struct kv_pool *p)
{
	return p->params.page_tokens;
}

uint32_t kv_pool_fmt(const struct kv_pool *p)
{
	return p->params.fmt;
}

size_t kv_pool_budget(const struct kv_pool *p)
{
	return p->params.budget;
}

int kv_pool_can_fit(struct kv_pool *p, size_t bytes)
{
	int ok;

	pthread_mutex_lock(&p->lock);
	ok = p->st.budget == 0 || p->st.allocated + bytes <= p->st.budget;
	pthread_mutex_unlock(&p->lock);
	return ok;
}

struct kv_page *kv_pool_get(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, uint32_t cap, int *why)
{
	return kv_pool_get_width(p, head_dim, fmt, cap, false, why);
}

struct kv_page *kv_pool_get_width(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, uint32_t cap, bool wide,
				  int *why)
{
	return kv_pool_get_form(p, head_dim, fmt, cap, wide ? KV_PAGE_WIDE : 0, 0, why);
}

/* A new page of position form `form` (a bitmap of `words` words with
 * KV_PAGE_POSBM). */
static struct kv_page *get_page(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, uint32_t cap, uint32_t form,
				int32_t pos_base, uint32_t words, int *why)
{
	struct page_layout lay = layout(cap, head_dim, fmt, form & KV_POS_FORMS, words);
	size_t bytes = lay.end;
	struct kv_page *pg;
	unsigned char *base;

	pthread_mutex_lock(&p->lock);
	if (p->st.budget && p->st.allocated + bytes > p->st.budget) {
		p->st.pages_refused++;
		pthread_mutex_unlock(&p->lock);
		*why = TKV_ERR_KV_FULL;
		return NULL;
	}
	/* count first, so concurrent requests cannot overshoot the budget */
	p->st.allocated += bytes;
	pthread_mutex_unlock(&p->lock);

	base = tkv_malloc(p->alloc, bytes);
	if (!base) {
		pthread_mutex_lock(&p->lock);
		p->st.allocated -= bytes;
		pthread_mutex_unlock(&p->lock);
		*why = TKV_ERR_NOMEM;
		return NULL;
	}
	pg = (struct kv_page *)base;
	memset(pg, 0, sizeof *pg);
	pg->fmt = (uint8_t)fmt;
	pg->flags = (uint8_t)(form & KV_POS_FORMS);
	pg->pos_base = form & (KV_PAGE_POS8 | KV_PAGE_POSBM) ? (uint16_t)pos_base : 0;
	pg->refs = 1;
	pg->cap = (uint16_t)cap;
	pg->head_dim = (uint16_t)head_dim;
	pg->bytes = (uint32_t)bytes;
	pg->kv_bytes = (uint32_t)kv_page_kv_bytes(cap, head_dim, fmt);
	pg->v = base + lay.v;
	pg->meta_off = (uint32_t)lay.meta;

	pthread_mutex_lock(&p->lock);
	if (p->st.allocated > p->st.peak_allocated)
		p->st.peak_allocated = p->st.allocated;
	p->st.n_pages++;
	p->st.fmt_bytes[fmt] += bytes;
	p->st.fixed_bytes += kv_page_fixed(pg);
	p->st.meta_bytes += kv_page_bm_bytes(pg);
	p->st.pages_allocated++;
	pthread_mutex_unlock(&p->lock);
	kv_page_clear_pos(pg);
	return pg;
}

struct kv_page *kv_pool_get_form(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, uint32_t cap, uint32_t form,
				 int32_t pos_base, int *why)
{
	/* a bitmap needs its span: kv_pool_get_span */
	return get_page(p, head_dim, fmt, cap, form & ~(uint32_t)KV_PAGE_POSBM, pos_base, 0, why);
}

struct kv_page *kv_pool_get_span(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, uint32_t cap, uint32_t form,
				 int32_t lo, int32_t hi, int *why)
{
	return get_page(p, head_dim, fmt, cap, form, lo, form & KV_PAGE_POSBM ? kv_bm_words(lo, hi) : 0, why);
}

struct kv_page *kv_pool_get_like(struct kv_pool *p, const struct kv_page *src, int *why)
{
	return get_page(p, src->head_dim, src->fmt, src->cap, src->flags & KV_POS_FORMS, src->pos_base,
			src->flags & KV_PAGE_POSBM ? kv_page_bm_words(src) : 0, why);
}

static void set_used_locked(struct kv_pool *p, struct kv_page *pg, uint32_t n)
{
	p->st.used -= kv_share(pg->bytes, pg->n_used, pg->cap);
	p->st.used += kv_share(pg->bytes, n, pg->cap);
	p->st.kv_bytes -= kv_share(pg->kv_bytes, pg->n_used, pg->cap);
	p->st.kv_bytes += kv_share(pg->kv_bytes, n, pg->cap);
	p->st.fmt_kv_bytes[pg->fmt] -= kv_share(pg->kv_bytes, pg->n_used, pg->cap);
	p->st.fmt_kv_bytes[pg->fmt] += kv_share(pg->kv_bytes, n, pg->cap);
	p->st.fmt_slots[pg->fmt] -= pg->n_used;
	p->st.fmt_slots[pg->fmt] += n;
	p->st.meta_bytes -= (size_t)pg->n_used * kv_page_slot_meta(pg);
	p->st.meta_bytes += (size_t)n * kv_page_slot_meta(pg);
	if ((pg->flags & KV_PAGE_POSBM) && n < pg->n_used)
		kv_page_bm_trim(pg, n);
	pg->n_used = (uint16_t)n;
}

void kv_pool_put(struct kv_pool *p, struct kv_page *pg)
{
	if (!pg)
		return;
	pthread_mutex_lock(&p->lock);
	set_used_locked(p, pg, 0);
	p->st.allocated -= pg->bytes;
	p->st.fmt_bytes[pg->fmt] -= pg->bytes;
	p->st.fixed_bytes -= kv_page_fixed(pg);
	p->st.meta_bytes -= kv_page_bm_bytes(pg);
	p->st.n_pages--;
	pthread_mutex_unlock(&p->lock);
	tkv_free(p->alloc, pg);
}

void kv_page_unref(struct kv_pool *p, struct kv_page *pg)
{
	if (pg && --pg->refs == 0)
		kv_pool_put(p, pg);
}

void kv_pool_set_used(struct kv_pool *p, struct kv_page *pg, uint32_t n)
{
	pthread_mutex_lock(&p->lock);
	set_used_locked(p, pg, n);
	pthread_mutex_unlock(&p->lock);
}

void kv_pool_stats(struct kv_pool *p, struct kv_pool_stats *out)
{
	pthread_mutex_lock(&p->lock);
	*out = p->st;
	pthread_mutex_unlock(&p->lock);
}

void kv_pool_forget(struct kv_pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->st.peak_allocated = p->st.allocated;
	p->st.pages_allocated = 0;
	p->st.pages_refused = 0;
	p->st.compactions = p->st.compact_slots = p->st.compact_bytes = p->st.compact_ns = 0;
	p->st.compact_freed = 0;
	pthread_mutex_unlock(&p->lock);
}

void kv_pool_note_compact(struct kv_pool *p, uint64_t slots, uint64_t bytes, uint64_t ns, size_t freed)
{
	pthread_mutex_lock(&p->lock);
	p->st.compactions++;
	p->st.compact_slots += slots;
	p->st.compact_bytes += bytes;
	p->st.compact_ns += ns;
	p->st.compact_freed += freed;
	pthread_mutex_unlock(&p->lock);
}

void kv_page_store(struct kv_page *pg, uint32_t slot, int32_t pos, const float *k, const float *v)
{
	kv_slot_set_pos(pg, slot, pos);
	kv_page_scores(pg)[slot] = 0;
	kv_tier_store(pg->fmt, pg->k, pg->v, pg->cap, pg->head_dim, slot, k, v);
}

void kv_page_load_k(const struct kv_page *pg, uint32_t slot, float *k)
{
	kv_tier_load_k(pg->fmt, pg->k, pg->cap, pg->head_dim, slot, k);
	if (pg->flags & KV_PAGE_ROT)
		kv_unrotate(k, pg->head_dim);
}

void kv_page_load_v(const struct kv_page *pg, uint32_t slot, float *v)
{
	kv_tier_load_v(pg->fmt, pg->v, pg->cap, pg->head_dim, slot, v);
	if (pg->flags & KV_PAGE_ROT)
		kv_unrotate(v, pg->head_dim);
}
