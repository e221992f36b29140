/* cache.h - the seam between the forward pass and the KV cache.
 *
 * Per layer, a forward pass over a batch of rows (runs of rows of one
 * sequence each: struct kv_seg) hands the cache the new keys and values of
 * its rows (kv_cache_store) and asks it to attend its queries
 * (kv_cache_attend). Everything the cache does on the way happens behind
 * these two calls, inside kv/: cross-layer sharing (share.h), the score each
 * slot gets from the attention it receives and which queries vote (the
 * policy's, policy.h: SnapKV's observation window), attention entropy for
 * adaptive budgets and layer plans, skipping cold pages (attn.c). The model
 * names no policy, format or stream.
 *
 * The sequences must have room for the rows (kv_seq_reserve) before a
 * forward pass; policy rounds run after it (kv_policy_maintain).
 *
 * Ownership: a kv_cache borrows the policy (cfg: it must outlive the cache)
 * and owns its scratch; kv_cache_free(NULL) is a no-op. */
#ifndef TKV_KV_CACHE_H
#define TKV_KV_CACHE_H

#include <stdint.h>

#include "kv/pool.h"  /* KV_MAX_HEAD_DIM: the largest head the cache stores */
#include "tierkv.h"

struct kv_cache;
struct kv_cfg;
struct kv_seq;
struct tpool;

/* A run of consecutive rows of a batch that belong to one sequence, at
 * positions pos0, pos0+1, ... */
struct kv_seg {
	struct kv_seq *seq;
	uint32_t row0, n;
	int32_t pos0;
};

/* The model's attention shape and the largest batch. */
struct kv_cache_shape {
	uint32_t n_batch;    /* rows per forward pass, at most */
	uint32_t n_ctx;      /* positions per sequence, at most */
	uint32_t n_threads;  /* threads of the pool kv_cache_attend runs on */
	uint32_t n_head, n_kv_head, head_dim;
	float softcap;       /* attention logits l -> softcap * tanh(l / softcap); 0 = none */
};

int kv_cache_init(struct kv_cache **out, const struct kv_cfg *cfg, const struct kv_cache_shape *shape,
		  struct tkv_alloc *a, struct tkv_error *err);
void kv_cache_free(struct kv_cache *c);

/* Appends each row's key and value of one layer to its sequence's streams:
 * k and v are (rows, n_kv_head*head_dim), model space, after RoPE. */
void kv_cache_store(struct kv_cache *c, uint32_t layer, const struct kv_seg *segs, uint32_t n_segs,
		    const float *k, const float *v);

/* Attention of one layer: every query head of each row attends to its KV
 * head's stream up to its own position (causal; within the stream's sliding
 * window, kv/window.h, when it has one), and the slots' scores are
 * updated as the policy asks. q and out are (rows, n_head*head_dim). Runs on
 * tp (NULL: on the caller). */
void kv_cache_attend(struct kv_cache *c, struct tpool *tp, uint32_t layer, const struct kv_seg *segs,
		     uint32_t n_segs, const float *q, float *out);

#endif
