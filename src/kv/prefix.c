/* prefix.c - the prefix tree of shared pages. */
#include "kv/prefix.h"

#include <string.h>

#include "util/alloc.h"
#include "util/status.h"

/* The most pages of a prompt one attach walks (the depth of its path). */
#define PREFIX_MAX_CHUNKS 4096

struct node {
	int32_t *tokens;          /* [P] this chunk's token ids */
	struct kv_page **pages;   /* [n_streams] */
	struct node *parent;
	struct node **kids;
	uint32_t n_kids, cap_kids;
	uint64_t last_use;
	bool stored;              /* known to be in the shared store */
};

struct kv_prefix {
	struct kv_pool *pool;
	struct tkv_alloc *alloc;
	uint32_t P, n_streams;
	struct node root;         /* the empty prefix: no tokens, no pages */
	uint64_t tick;
	struct kv_prefix_stats st;
};

int kv_prefix_init(struct kv_prefix **out, struct kv_pool *pool, uint32_t page_tokens, uint32_t n_streams,
		   struct tkv_alloc *a, struct tkv_error *err)
{
	struct kv_prefix *t = tkv_calloc(a, 1, sizeof *t);

	*out = NULL;
	if (!t)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory creating the prefix tree");
	t->pool = pool;
	t->alloc = a;
	t->P = page_tokens;
	t->n_streams = n_streams;
	*out = t;
	return TKV_OK;
}

static void node_free(struct kv_prefix *t, struct node *n)
{
	for (uint32_t i = 0; i < n->n_kids; i++)
		node_free(t, n->kids[i]);
	tkv_free(t->alloc, n->kids);
	if (n->pages) {
		for (uint32_t i = 0; i < t->n_streams; i++)
			kv_page_unref(t->pool, n->pages[i]);
		t->st.pages -= t->n_streams;
		t->st.nodes--;
	}
	tkv_free(t->alloc, n->pages);
	tkv_free(t->alloc, n->tokens);
	if (n != &t->root)
		tkv_free(t->alloc, n);
}

void kv_prefix_free(struct kv_prefix *t)
{
	if (!t)
		return;
	node_free(t, &t->root);
	tkv_free(t->alloc, t);
}

static struct node *child(const struct kv_prefix *t, const struct node *n, const int32_t *chunk)
{
	for (uint32_t i = 0; i < n->n_kids; i++)
		if (!memcmp(n->kids[i]->tokens, chunk, t->P * sizeof *chunk))
			return n->kids[i];
	return NULL;
}

int kv_prefix_attach(struct kv_prefix *t, struct kv_seq *s, const int32_t *ids, size_t n)
{
	struct node *cur = &t->root, *path[PREFIX_MAX_CHUNKS];
	size_t n_chunks = 0;

	t->st.lookups++;
	if (s->n_pos != 0 || s->streams[0].n_tokens != 0)
		return 0;
	/* leave at least one token to compute, so the caller gets logits */
	while ((n_chunks + 1) * t->P < n && n_chunks < PREFIX_MAX_CHUNKS) {
		struct node *k = child(t, cur, ids + n_chunks * t->P);

		if (!k)
			break;
		path[n_chunks++] = cur = k;
	}
	if (n_chunks == 0)
		return 0;
	for (size_t c = 0; c < n_chunks; c++) {
		for (uint32_t i = 0; i < t->n_streams; i++) {
			if (kv_stream_add_page(s, &s->streams[i], path[c]->pages[i])) {
				/* undo: give back what this call attached */
				kv_seq_clear(s);
				return TKV_ERR_NOMEM;
			}
			path[c]->pages[i]->refs++;
		}
		path[c]->last_use = ++t->tick;
	}
	s->n_pos = (int32_t)(n_chunks * t->P);
	t->st.hits++;
	t->st.tokens_reused += n_chunks * t->P;
	return (int)(n_chunks * t->P);
}

/* The page of stream st that holds exactly positions [p0, p0+P) in order, as
 * written by the forward pass (full precision, never rewritten); NULL if none. */
static struct kv_page *pristine(const struct kv_seq *s, const struct kv_stream *st, uint32_t chunk,
				uint32_t P, int32_t p0)
{
	for (uint32_t k = 0; k < st->n_pages; k++) {
		/* pages of a prefill come in order: try the expected index first */
		uint32_t i = k == 0 ? (chunk < st->n_pages ? chunk : 0) : (k <= chunk ? k - 1 : k);
		struct kv_page *pg = st->pages[i];
		int ok = pg->n_used == P && pg->cap == P && pg->fmt == kv_pool_fmt(s->pool) &&
			 !(pg->flags & (KV_PAGE_DIRTY | KV_PAGE_ROT)) && kv_slot_pos(pg, 0) == p0;

		for (uint32_t j = 1; ok && j < P; j++)
			ok = kv_slot_pos(pg, j) == p0 + (int32_t)j;
		if (ok)
			return pg;
	}
	return NULL;
}

static int grow_kids(struct kv_prefix *t, struct node *n)
{
	uint32_t cap;
	struct node **kids;

	if (n->n_kids < n->cap_kids)
		return TKV_OK;
	cap = n->cap_kids ? n->cap_kids * 2 : 2;
	kids = tkv_realloc(t->alloc, n->kids, cap * sizeof *kids);
	if (!kids)
		return TKV_ERR_NOMEM;
	n->kids = kids;
	n->cap_kids = cap;
	return TKV_OK;
}

int kv_prefix_insert(struct kv_prefix *t, struct kv_seq *s, const int32_t *ids, size_t n)
{
	struct node *cur = &t->root;
	struct kv_page **pages = NULL;
	int added = 0;

	for (size_t c = 0; (c + 1) * t->P <= n; c++) {
		const int32_t *chunk = ids + c * t->P;
		struct node *k = child(t, cur, chunk);

		if (k) {
			k->last_use = ++t->tick;
			cur = k;
			continue;
		}
		pages = tkv_malloc(t->alloc, t->n_streams * sizeof *pages);
		if (!pages)
			return added ? added : TKV_ERR_NOMEM;
		for (uint32_t i = 0; i < t->n_streams; i++) {
			pages[i] = pristine(s, &s->streams[i], (uint32_t)c, t->P, (int32_t)(c * t->P));
			if (!pages[i]) {
				tkv_free(t->alloc, pages);
				return added;
			}
		}
		k = tkv_calloc(t->alloc, 1, sizeof *k);
		if (k)
			k->tokens = tkv_malloc(t->alloc, t->P * sizeof *k->tokens);
		if (!k || !k->tokens || grow_kids(t, cur)) {
			if (k)
				tkv_free(t->alloc, k->tokens);
			tkv_free(t->alloc, k);
			tkv_free(t->alloc, pages);
			return added ? added : TKV_ERR_NOMEM;
		}
		memcpy(k->tokens, chunk, t->P * sizeof *chunk);
		k->pages = pages;
		k->parent = cur;
		k->last_use = ++t->tick;
		for (uint32_t i = 0; i < t->n_streams; i++) {
			pages[i]->refs++;
			pages[i]->flags |= KV_PAGE_FROZEN;
		}
		cur->kids[cur->n_kids++] = k;
		t->st.nodes++;
		t->st.pages += t->n_streams;
		added++;
		cur = k;
	}
	return added;
}

/* The least recently used leaf whose pages only the tree holds. */
static struct node *lru_leaf(struct node *n, struct node *best, uint32_t n_streams)
{
	for (uint32_t i = 0; i < n->n_kids; i++)
		best = lru_leaf(n->kids[i], best, n_streams);
	if (n->pages && n->n_kids == 0 && (!best || n->last_use < best->last_use)) {
		for (uint32_t i = 0; i < n_streams; i++)
			if (n->pages[i]->refs > 1)
				return best;
		return n;
	}
	return best;
}

size_t kv_prefix_shrink(struct kv_prefix *t, size_t bytes)
{
	size_t freed = 0;

	while (freed < bytes) {
		struct node *n = lru_leaf(&t->root, NULL, t->n_streams), *p;

		if (!n)
			break;
		for (uint32_t i = 0; i < t->n_streams; i++)
			freed += n->pages[i]->bytes;
		p = n->parent;
		for (uint32_t i = 0; i < p->n_kids; i++)
			if (p->kids[i] == n) {
				p->kids[i] = p->kids[--p->n_kids];
				break;
			}
		node_free(t, n);
		t->st.dropped++;
	}
	return freed;
}

/* The node of ids' chunk c - 1 along the path (root for 0), or NULL. */
static struct node *walk(const struct kv_prefix *t, const int32_t *ids, size_t c, size_t *got)
{
	const struct node *cur = &t->root;
	size_t k = 0;

	for (; k < c; k++) {
		const struct node *nx = child(t, cur, ids + k * t->P);

		if (!nx)
			break;
		cur = nx;
	}
	*got = k;
	return (struct node *)cur;
}

size_t kv_prefix_match(const struct kv_prefix *t, const int32_t *ids, size_t n_chunks)
{
	size_t got;

	walk(t, ids, n_chunks, &got);
	return got;
}

size_t kv_prefix_stored(const struct kv_prefix *t, const int32_t *ids, size_t n_chunks)
{
	const struct node *cur = &t->root;
	size_t k = 0;

	for (; k < n_chunks; k++) {
		const struct node *nx = child(t, cur, ids + k * t->P);

		if (!nx || !nx->stored)
			break;
		cur = nx;
	}
	return k;
}

void kv_prefix_mark_stored(struct kv_prefix *t, const int32_t *ids, size_t n_chunks)
{
	struct node *cur = &t->root;

	for (size_t k = 0; k < n_chunks; k++) {
		struct node *nx = child(t, cur, ids + k * t->P);

		if (!nx)
			break;
		nx->stored = true;
		cur = nx;
	}
}

int kv_prefix_graft(struct kv_prefix *t, const int32_t *ids, size_t c, struct kv_page **pages)
{
	size_t got;
	struct node *cur = walk(t, ids, c, &got), *k;

	if (got != c || child(t, cur, ids + c * t->P))
		return TKV_ERR_ARG;
	k = tkv_calloc(t->alloc, 1, sizeof *k);
	if (k) {
		k->tokens = tkv_malloc(t->alloc, t->P * sizeof *k->tokens);
		k->pages = tkv_malloc(t->alloc, t->n_streams * sizeof *k->pages);
	}
	if (!k || !k->tokens || !k->pages || grow_kids(t, cur)) {
		if (k) {
			tkv_free(t->alloc, k->tokens);
			tkv_free(t->alloc, k->pages);
		}
		tkv_free(t->alloc, k);
		return TKV_ERR_NOMEM;
	}
	memcpy(k->tokens, ids + c * t->P, t->P * sizeof *k->tokens);
	memcpy(k->pages, pages, t->n_streams * sizeof *pages);
	k->parent = cur;
	k->last_use = ++t->tick;
	k->stored = true;
	cur->kids[cur->n_kids++] = k;
	t->st.nodes++;
	t->st.pages += t->n_streams;
	return TKV_OK;
}

void kv_prefix_get_stats(const struct kv_prefix *t, struct kv_prefix_stats *out)
{
	*out = t->st;
}

int kv_stream_cow(struct kv_seq *s, struct kv_stream *st, uint32_t i)
{
	struct kv_page *old = st->pages[i], *pg;
	int why;

	pg = kv_pool_get_like(s->pool, old, &why);
	if (!pg)
		return why;
	/* same shape, same layout: copy everything after the header */
	memcpy(pg->k, old->k, old->bytes - sizeof *old);
	pg->flags = old->flags & (KV_PAGE_ROT | KV_POS_FORMS);
	kv_pool_set_used(s->pool, pg, old->n_used);
	st->pages[i] = pg;
	kv_page_unref(s->pool, old);
	return TKV_OK;
}
