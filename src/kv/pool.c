/* pool.c - byte-budgeted page pool. Pages come from the counting allocator when
 * asked for and go back when returned: nothing is preallocated, so the cache
 * holds what the live sequences need and no more. */
#include "kv/pool.h"

#include <pthread.h>
#include <string.h>

#include "ops/ops.h"
#include "util/alloc.h"
#include "util/status.h"

struct kv_pool {
	struct tkv_alloc *alloc;
	struct kv_pool_params params;
	pthread_mutex_t lock;
	struct kv_pool_stats st;     /* guarded by lock */
};

#define KV_ALIGN 64
#define ROUND_UP(x) (((x) + KV_ALIGN - 1) & ~(size_t)(KV_ALIGN - 1))

struct kv_pool_params kv_pool_default_params(void)
{
	struct kv_pool_params p = { .budget = 0, .page_tokens = 16, .fmt = KV_FMT_F16 };
	return p;
}

size_t kv_fmt_size(uint32_t fmt)
{
	return fmt == KV_FMT_F32 ? 4 : 2;
}

const char *kv_fmt_name(uint32_t fmt)
{
	switch (fmt) {
	case KV_FMT_F32: return "f32";
	case KV_FMT_F16: return "f16";
	}
	return "?";
}

size_t kv_page_bytes(uint32_t page_tokens, uint32_t head_dim, uint32_t fmt)
{
	size_t P = page_tokens, n = ROUND_UP(sizeof(struct kv_page));

	n += ROUND_UP(P * sizeof(int32_t));
	n += ROUND_UP(P * sizeof(float));
	n += 2 * ROUND_UP(P * head_dim * kv_fmt_size(fmt));
	return n;
}

/* Bytes a filled slot accounts for: K, V and its metadata. */
static size_t slot_bytes(uint32_t head_dim, uint32_t fmt)
{
	return 2 * head_dim * kv_fmt_size(fmt) + sizeof(int32_t) + sizeof(float);
}

int kv_pool_init(struct kv_pool **out, const struct kv_pool_params *p, struct tkv_alloc *a,
		 struct tkv_error *err)
{
	struct kv_pool *pool;

	*out = NULL;
	if (p->page_tokens == 0 || p->page_tokens > 4096)
		return tkv_errf(err, TKV_ERR_ARG, "KV page size %u tokens: must be 1..4096", p->page_tokens);
	if (p->fmt >= KV_FMT_COUNT)
		return tkv_errf(err, TKV_ERR_ARG, "KV page format %u unknown", p->fmt);
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

int kv_pool_can_fit(struct kv_pool *p, size_t bytes)
{
	int ok;

	pthread_mutex_lock(&p->lock);
	ok = p->st.budget == 0 || p->st.allocated + bytes <= p->st.budget;
	pthread_mutex_unlock(&p->lock);
	return ok;
}

struct kv_page *kv_pool_get(struct kv_pool *p, uint32_t head_dim, int *why)
{
	uint32_t P = p->params.page_tokens, fmt = p->params.fmt;
	size_t bytes = kv_page_bytes(P, head_dim, fmt), off;
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
	pg->fmt = fmt;
	pg->cap = P;
	pg->head_dim = head_dim;
	pg->bytes = bytes;
	off = ROUND_UP(sizeof *pg);
	pg->pos = (int32_t *)(base + off);
	off += ROUND_UP(P * sizeof(int32_t));
	pg->score = (float *)(base + off);
	off += ROUND_UP(P * sizeof(float));
	pg->k = base + off;
	off += ROUND_UP(P * head_dim * kv_fmt_size(fmt));
	pg->v = base + off;

	pthread_mutex_lock(&p->lock);
	if (p->st.allocated > p->st.peak_allocated)
		p->st.peak_allocated = p->st.allocated;
	p->st.n_pages++;
	p->st.fmt_bytes[fmt] += bytes;
	p->st.pages_allocated++;
	pthread_mutex_unlock(&p->lock);
	return pg;
}

void kv_pool_put(struct kv_pool *p, struct kv_page *pg)
{
	if (!pg)
		return;
	pthread_mutex_lock(&p->lock);
	p->st.allocated -= pg->bytes;
	p->st.fmt_bytes[pg->fmt] -= pg->bytes;
	p->st.n_pages--;
	p->st.used -= pg->n_used * slot_bytes(pg->head_dim, pg->fmt);
	p->st.kv_bytes -= pg->n_used * 2 * pg->head_dim * kv_fmt_size(pg->fmt);
	pthread_mutex_unlock(&p->lock);
	tkv_free(p->alloc, pg);
}

void kv_pool_note_used(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, long delta)
{
	pthread_mutex_lock(&p->lock);
	p->st.used += (size_t)delta * slot_bytes(head_dim, fmt);
	p->st.kv_bytes += (size_t)delta * 2 * head_dim * kv_fmt_size(fmt);
	pthread_mutex_unlock(&p->lock);
}

void kv_pool_stats(struct kv_pool *p, struct kv_pool_stats *out)
{
	pthread_mutex_lock(&p->lock);
	*out = p->st;
	pthread_mutex_unlock(&p->lock);
}

void kv_page_store(struct kv_page *pg, uint32_t slot, int32_t pos, const float *k, const float *v)
{
	uint32_t d = pg->head_dim;

	pg->pos[slot] = pos;
	pg->score[slot] = 0.0f;
	if (pg->fmt == KV_FMT_F32) {
		memcpy((float *)pg->k + (size_t)slot * d, k, d * sizeof(float));
		memcpy((float *)pg->v + (size_t)slot * d, v, d * sizeof(float));
	} else {
		uint16_t *kk = (uint16_t *)pg->k + (size_t)slot * d;
		uint16_t *vv = (uint16_t *)pg->v + (size_t)slot * d;

		for (uint32_t i = 0; i < d; i++) {
			kk[i] = ops_f32_to_f16(k[i]);
			vv[i] = ops_f32_to_f16(v[i]);
		}
	}
}

static void load_row(const struct kv_page *pg, const void *base, uint32_t slot, float *out)
{
	uint32_t d = pg->head_dim;

	if (pg->fmt == KV_FMT_F32) {
		memcpy(out, (const float *)base + (size_t)slot * d, d * sizeof(float));
	} else {
		const uint16_t *h = (const uint16_t *)base + (size_t)slot * d;

		for (uint32_t i = 0; i < d; i++)
			out[i] = ops_f16_to_f32(h[i]);
	}
}

void kv_page_load_k(const struct kv_page *pg, uint32_t slot, float *k)
{
	load_row(pg, pg->k, slot, k);
}

void kv_page_load_v(const struct kv_page *pg, uint32_t slot, float *v)
{
	load_row(pg, pg->v, slot, v);
}
