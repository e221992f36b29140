/* kvstore.c - the engine's side of the shared KV store (kvstore.h). */
#include "engine/kvstore.h"

#include <stdlib.h>

#include "engine/engine_impl.h"
#include "kv/pool.h"
#include "kv/prefix.h"
#include "kv/seq.h"
#include "util/status.h"

int tkv_kvs_geometry(struct tkv_engine *e, const struct tkv_model_info *mi, const uint64_t fp[2],
		     struct kv_store_geom *g, struct tkv_error *err)
{
	struct kv_pool *pool = tkv_engine_kv_pool(e);

	if (!tkv_engine_prefix_tree(e))
		return tkv_errf(err, TKV_ERR_ARG, "the KV store needs prefix sharing (--prefix-cache on)");
	g->fp[0] = fp[0];
	g->fp[1] = fp[1];
	g->n_layer = mi->n_layer;
	g->n_kv_head = mi->n_kv_head;
	g->head_dim = mi->head_dim;
	g->P = kv_pool_page_tokens(pool);
	g->fmt = KV_FMT_Q4;
	if (!kv_store_entry_bytes(g))
		return tkv_errf(err, TKV_ERR_ARG, "the KV store cannot hold pages of head size %u, %u tokens",
				g->head_dim, g->P);
	return TKV_OK;
}

size_t tkv_kvs_local(struct tkv_engine *e, const int32_t *ids, size_t n_chunks)
{
	struct kv_prefix *t = tkv_engine_prefix_tree(e);

	return t ? kv_prefix_match(t, ids, n_chunks) : 0;
}

size_t tkv_kvs_stored(struct tkv_engine *e, const int32_t *ids, size_t n_chunks)
{
	struct kv_prefix *t = tkv_engine_prefix_tree(e);

	return t ? kv_prefix_stored(t, ids, n_chunks) : 0;
}

void tkv_kvs_mark_stored(struct tkv_engine *e, const int32_t *ids, size_t n_chunks)
{
	struct kv_prefix *t = tkv_engine_prefix_tree(e);

	if (t)
		kv_prefix_mark_stored(t, ids, n_chunks);
}

size_t tkv_kvs_import(struct tkv_engine *e, const struct kv_store_geom *g, const int32_t *ids,
		      const struct kv_hash128 *chain, size_t c0, const uint8_t *const *bufs, const size_t *lens,
		      size_t count, uint64_t verdicts[KV_STORE_N_VERDICTS])
{
	struct kv_prefix *t = tkv_engine_prefix_tree(e);
	struct kv_pool *pool = tkv_engine_kv_pool(e);
	size_t n_streams = (size_t)g->n_layer * g->n_kv_head, k;
	struct kv_page **pages;

	if (!t || !(pages = malloc(n_streams * sizeof *pages)))
		return 0;
	for (k = 0; k < count; k++) {
		size_t c = c0 + k;
		struct kv_hash128 zero = { 0, 0 };
		enum kv_store_verdict v;

		if (!bufs[k])
			break;
		v = kv_store_check(g, (uint32_t)c, c ? &chain[c - 1] : &zero, ids + c * g->P, bufs[k], lens[k]);
		if (v != KV_STORE_OK) {
			verdicts[v]++;
			break;
		}
		if (kv_store_decode(g, (uint32_t)c, bufs[k], pool, pages))
			break;
		if (kv_prefix_graft(t, ids, c, pages)) {
			for (size_t i = 0; i < n_streams; i++)
				kv_pool_put(pool, pages[i]);
			break;
		}
	}
	free(pages);
	return k;
}

size_t tkv_kvs_export(struct tkv_seq *s, const struct kv_store_geom *g, const int32_t *ids, size_t c0, size_t c1,
		      uint8_t *out)
{
	float *scratch = malloc((size_t)g->P * g->head_dim * 2 * sizeof *scratch);
	uint32_t *map = malloc(c1 * g->P * sizeof *map);
	size_t n = 0;

	if (scratch && map && c1 * g->P <= tkv_seq_n_past(s))
		n = kv_store_encode(g, tkv_seq_kv_cache(s), ids, c0, c1, out, scratch, map);
	free(scratch);
	free(map);
	return n;
}
