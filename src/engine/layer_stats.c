/* layer_stats.c - a cache's figures per layer (tkv_seq_kv_layer_stats,
 * tkv_engine_kv_layer_stats): the bytes and slots of each tier in each layer,
 * read from the pages of the layer's streams (one per KV head), the way
 * tkv_seq_kv_stats reads them for the whole sequence. */
#include <string.h>

#include "engine/engine_impl.h"
#include "kv/pool.h"
#include "kv/seq.h"
#include "kv/tier.h"

/* Adds one sequence's layers [0, n) into out. */
static void layers_add(const struct kv_seq *kv, struct tkv_kv_layer_stats *out, uint32_t n)
{
	for (uint32_t l = 0; l < n && l < kv->n_layer; l++) {
		for (uint32_t h = 0; h < kv->n_kv_head; h++) {
			const struct kv_stream *st = &kv->streams[(size_t)l * kv->n_kv_head + h];

			for (uint32_t p = 0; p < st->n_pages; p++) {
				const struct kv_page *pg = st->pages[p];
				size_t b = kv_page_share(pg, pg->n_used);

				if (pg->fmt == KV_FMT_REF) {
					out[l].shared_bytes += b;
					out[l].shared_tokens += pg->n_used;
					continue;
				}
				out[l].tier_bytes[kv_fmt_tier(pg->fmt)] += b;
				out[l].tier_tokens[kv_fmt_tier(pg->fmt)] += pg->n_used;
			}
		}
	}
}

uint32_t tkv_seq_kv_layer_stats(const struct tkv_seq *s, struct tkv_kv_layer_stats *out, uint32_t n)
{
	if (n > s->kv->n_layer)
		n = s->kv->n_layer;
	memset(out, 0, (size_t)n * sizeof *out);
	layers_add(s->kv, out, n);
	return s->kv->n_layer;
}

uint32_t tkv_engine_kv_layer_stats(struct tkv_engine *e, struct tkv_kv_layer_stats *out, uint32_t n)
{
	uint32_t n_layer = e->model->info.n_layer;

	if (n > n_layer)
		n = n_layer;
	memset(out, 0, (size_t)n * sizeof *out);
	for (struct tkv_seq *s = e->seqs; s; s = s->next)
		layers_add(s->kv, out, n);
	return n_layer;
}
