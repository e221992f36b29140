/* share.h - cross-layer sharing (MiniCache-style; off unless a sequence's
 * share_cos > 0).
 *
 * A token of layer l >= share_from whose key and value both have a cosine of
 * at least share_cos with its key and value in layer l - 1 is stored as a
 * KV_FMT_REF slot: the least-squares scales alpha = x . x_below / |x_below|^2
 * of key and value, 4 bytes instead of a row each. Attention reads the
 * direction from the slot of the same position in layer l - 1 (whatever its
 * tier by then), so the two layers keep one direction and their own
 * magnitudes; a shared slot whose source was evicted is masked (the layer
 * below's eviction takes it along). Shared slots are never a source, so
 * sharing does not chain.
 *
 * The forward pass reaches this through kv_cache_store / kv_cache_attend
 * (cache.h): struct kv_share_rows carries each batch row's keys and values
 * from one layer to the next. */
#ifndef TKV_KV_SHARE_H
#define TKV_KV_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/seq.h"

/* Stores a token as a shared slot of (layer, head) when it qualifies
 * (k_below, v_below: its key and value in layer l - 1, NULL when layer l - 1
 * did not store them in full); otherwise (or when no page for the slot can
 * be had) this is kv_seq_append. Returns whether the slot was stored shared. */
bool kv_seq_append_shared(struct kv_seq *s, uint32_t layer, uint32_t head, int32_t pos, const float *k,
			  const float *v, const float *k_below, const float *v_below);
/* Where each position of stream src lives: map[pos] = page << 12 | slot for
 * its slots (caps are at most 4096), KV_NO_PAGE for positions it does not
 * hold; map has n_pos entries. */
void kv_stream_pos_map(const struct kv_stream *src, uint32_t *map, int32_t n_pos);

/* What a forward pass carries from one layer to the next for sharing. */
struct kv_share_rows {
	uint32_t n_kv_head, head_dim;
	float *kb, *vb;     /* (n_batch, n_kv_head*head_dim) the layer below's keys and values */
	uint8_t *shared;    /* (n_batch, n_kv_head) whether the layer below stored them shared */
};

int kv_share_rows_init(struct kv_share_rows *r, uint32_t n_batch, uint32_t n_kv_head, uint32_t head_dim,
		       struct tkv_alloc *a);
void kv_share_rows_free(struct kv_share_rows *r, struct tkv_alloc *a);

/* Appends batch row `row`'s key and value (head_dim floats each) to stream
 * (layer, head) of a sequence that shares: as a shared slot when they are
 * alike the layer below's (kv_seq_append_shared), and keeps them as the
 * layer above's reference. */
void kv_share_append(struct kv_share_rows *r, struct kv_seq *s, uint32_t layer, uint32_t head, uint32_t row,
		     int32_t pos, const float *k, const float *v);

/* Prepares attention over stream (layer, head) for positions before `end`:
 * when the stream holds shared slots, a->below is the layer below's stream
 * and a->below_map its position map (written to map, map_cap entries at
 * most); else a->below is NULL. */
void kv_share_attn_below(struct kv_seq *s, uint32_t layer, uint32_t head, int32_t end, uint32_t *map,
			 int32_t map_cap, struct kv_attn_args *a);

#endif
