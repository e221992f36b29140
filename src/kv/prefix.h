/* prefix.h - prefix sharing: a radix tree over token ids at page granularity.
 *
 * Each node stands for one page-sized chunk of P tokens following its parent's
 * chunks from position 0, and holds, for every (layer, KV head) stream, the
 * page with those P tokens' keys and values. Pages in the tree are frozen:
 * read-only for every sequence that holds them (scores are not updated, the
 * policy treats their slots as protected); a sequence that must shrink below
 * them copies them first (copy-on-write, policy.c). Sequences starting with a
 * cached prefix attach its pages instead of computing them.
 *
 * Nodes hold one reference on each page; the tree drops least recently used
 * leaves that no sequence holds when the pool needs memory. Single-threaded:
 * the engine's scheduling thread is the only caller. */
#ifndef TKV_KV_PREFIX_H
#define TKV_KV_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#include "kv/seq.h"

struct kv_prefix;

struct kv_prefix_stats {
	uint64_t lookups;        /* sequences that asked */
	uint64_t hits;           /* ... and reused at least one chunk */
	uint64_t tokens_reused;  /* tokens not recomputed */
	uint64_t nodes;          /* chunks in the tree */
	uint64_t pages;          /* pages the tree holds */
	uint64_t dropped;        /* chunks dropped for memory */
};

int kv_prefix_init(struct kv_prefix **out, struct kv_pool *pool, uint32_t page_tokens, uint32_t n_streams,
		   struct tkv_alloc *a, struct tkv_error *err);
/* Drops every node (pages still held by sequences live on). */
void kv_prefix_free(struct kv_prefix *t);

/* Attaches to an empty sequence the pages of the longest cached prefix of ids
 * that leaves at least one token to compute; returns the tokens reused (a
 * multiple of P; the sequence's n_pos is set to it), or a negative status. */
int kv_prefix_attach(struct kv_prefix *t, struct kv_seq *s, const int32_t *ids, size_t n);
/* Adds the pristine full pages of the sequence's first n tokens (ids) to the
 * tree, freezing them. Returns the chunks added, or a negative status. */
int kv_prefix_insert(struct kv_prefix *t, struct kv_seq *s, const int32_t *ids, size_t n);
/* Frees least recently used chunks no sequence holds until `bytes` have been
 * returned to the pool or none is left; returns the bytes freed. */
size_t kv_prefix_shrink(struct kv_prefix *t, size_t bytes);
/* Shared store (store.h): the chunks of ids (whole chunks only, at most
 * n_chunks) found in the tree from the root. */
size_t kv_prefix_match(const struct kv_prefix *t, const int32_t *ids, size_t n_chunks);
/* Of those, the leading chunks known to be in the shared store (grafted from
 * it or marked after an export). */
size_t kv_prefix_stored(const struct kv_prefix *t, const int32_t *ids, size_t n_chunks);
/* Marks the tree's nodes of ids' first n_chunks chunks as in the store. */
void kv_prefix_mark_stored(struct kv_prefix *t, const int32_t *ids, size_t n_chunks);
/* Adds chunk c of ids (its parent chunks [0, c) must be in the tree) with
 * pages[n_streams] (frozen, refs 1: the tree takes that reference), marked as
 * in the store. TKV_ERR_ARG when the parent path is missing or the chunk is
 * already there, TKV_ERR_NOMEM; on error the pages stay the caller's. */
int kv_prefix_graft(struct kv_prefix *t, const int32_t *ids, size_t c, struct kv_page **pages);
void kv_prefix_get_stats(const struct kv_prefix *t, struct kv_prefix_stats *out);

/* Replaces frozen page i of a stream by a private copy (copy-on-write).
 * TKV_ERR_KV_FULL / TKV_ERR_NOMEM when no page can be had. */
int kv_stream_cow(struct kv_seq *s, struct kv_stream *st, uint32_t i);

#endif
