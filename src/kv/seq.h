/* seq.h - the cache of one sequence: a stream of pages per (layer, KV head).
 *
 * A stream's pages come in any order and any mix of formats; every slot carries
 * its position, so attention masks by position rather than by order. New tokens
 * go into pages of the stream's hot format with room (full precision, unless
 * the policy set q8 for a tight budget); the policy (policy.h) later
 * moves slots to warm or cold pages or evicts them, per stream, so each layer
 * and head keeps its own set of tokens.
 *
 * Streams grow page by page (kv_seq_reserve, then kv_seq_append); nothing is
 * sized to the maximum context. Ownership: the seq owns its pages (from the pool
 * it was made with) and returns them on kv_seq_free / kv_seq_clear. */
#ifndef TKV_KV_SEQ_H
#define TKV_KV_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/pool.h"

#define KV_NO_PAGE UINT32_MAX

struct kv_stream {
	struct kv_page **pages;  /* [n_pages] */
	uint32_t n_pages;
	uint32_t cap_pages;
	uint32_t n_tokens;       /* filled slots over all pages */
	uint32_t hot_free;       /* free slots in pages of its hot format */
	uint32_t tail;           /* a hot-format page with room, or KV_NO_PAGE */
	size_t kv_bytes;         /* filled share of its pages' K+V regions (what budgets
				  * count; empty slots are the pool's fragmentation) */
	size_t budget;           /* K+V bytes this stream may hold; 0 = none */
	uint32_t page_tokens;    /* slots of its full-size hot pages (the layer plan) */
	uint8_t hot_fmt;         /* the format new tokens are stored in: the pool's full
				  * precision, or q8 under a tight budget (policy.h) */
	bool wide;               /* its sequence passed KV_POS16_LIMIT positions: new
				  * pages are wide, and only wide ones take slots */
	uint32_t low_cap;        /* slots of its full-size warm and cold pages */
	uint32_t ref_tail;       /* a shared-slot (KV_FMT_REF) page that may have room, or KV_NO_PAGE */
	uint32_t n_small;        /* private pages under full size (since the last compaction, */
	uint32_t small_slots;    /* ... counted as they come) and their slots */
	uint32_t window;         /* sliding window in tokens (window.h); 0 = a global layer */
	float *centroid;         /* (head_dim) mean of every key appended so far */
	uint64_t n_seen;         /* keys appended so far */
	double ent_sum;          /* sum of attention entropies observed (nats) */
	uint64_t ent_n;          /* queries behind ent_sum */
	float weight;            /* its share of a budget against the other streams it is
				  * split with (1; the head plan: kv_seq_set_head_weights) */
	double probe_mass;       /* the probe's attention mass (kv_seq.probe) */
	/* counters */
	uint64_t evicted, demoted, merged, cow;
	uint64_t pages_read, pages_skipped;
};

struct kv_seq {
	struct kv_pool *pool;
	struct tkv_alloc *alloc;
	uint32_t n_layer, n_kv_head, head_dim;
	struct kv_stream *streams;   /* [n_layer][n_kv_head] */
	float *layer_weight;         /* (n_layer) share of the sequence's budget per layer,
				      * mean 1 (the layer plan; all 1 when uniform) */
	bool measure_entropy;        /* streams accumulate attention entropy (ent_sum) */
	bool plan_set;               /* a layer plan other than the pool's uniform pages */
	bool heads_set;              /* stream weights other than 1 (a head plan) */
	/* the head probe (engine/heads.c): when set, each stream adds to its
	 * probe_mass the attention its query heads give slots at positions
	 * probe_lo..probe_hi-1 from queries at positions probe_q0 and later */
	bool probe;
	int32_t probe_q0, probe_lo, probe_hi;
	int32_t n_pos;               /* position of the next token */
	float slack;                 /* > 0: how far below its budget a policy round brings
				      * a stream, as a share of the budget (the memory
				      * governor's, narrower than the band it keeps);
				      * 0: the policy's own rule (a page of hot slots) */
	/* cross-layer sharing (share.h): off when share_cos is 0 */
	float share_cos;             /* least cosine of key and of value to the layer below */
	uint32_t share_from;         /* first layer that may share with the one below (>= 1) */
};

/* Warm and cold pages of a layer whose full-precision pages hold P slots:
 * 4 P under a layer plan (fine pages, finer cold quantization groups), and
 * max(64, P) without one. */
static inline uint32_t kv_low_cap(uint32_t P, bool plan)
{
	uint32_t c = plan ? 4 * P : (P < 64 ? 64 : P);

	return c > 4096 ? (P > 4096 ? P : 4096) : c;
}

/* The smallest full-precision page a growing stream gets (dynamic chunking). */
#define KV_PAGE_MIN 2
/* A growing stream's newest page holds at most 1/KV_TAIL_SHARE of what the
 * stream already holds (in K+V bytes): the room it leaves empty. */
#define KV_TAIL_SHARE 64

int kv_seq_init(struct kv_seq **out, struct kv_pool *pool, uint32_t n_layer, uint32_t n_kv_head,
		uint32_t head_dim, struct tkv_alloc *a, struct tkv_error *err);
void kv_seq_free(struct kv_seq *s);
/* A new sequence with a copy of src's cache: private pages are copied (against
 * the budget), frozen prefix pages shared; positions, scores, centroids and
 * budgets carry over, counters start at 0. TKV_ERR_KV_FULL / TKV_ERR_NOMEM
 * leave nothing behind. */
int kv_seq_fork(struct kv_seq **out, const struct kv_seq *src, struct tkv_error *err);
/* Drops every token and returns every page. */
void kv_seq_clear(struct kv_seq *s);

static inline struct kv_stream *kv_seq_stream(struct kv_seq *s, uint32_t layer, uint32_t head)
{
	return &s->streams[(size_t)layer * s->n_kv_head + head];
}

/* Sets the page size of a layer's streams (pages allocated from now on; the
 * next compaction repacks loose pages to it) and its budget weight. */
void kv_seq_set_layer(struct kv_seq *s, uint32_t layer, uint32_t page_tokens, float weight);

/* Sets every stream's budget weight, w[layer * n_kv_head + head] (>= 0: 0
 * leaves a stream its floor; the head plan), or back to 1 each with w NULL. */
void kv_seq_set_head_weights(struct kv_seq *s, const float *w);

/* Slots of the last page a stream takes for `need` more slots of a format
 * whose full-size pages hold `full` (need < full): need and room for more,
 * the largest power of two of slots within 1/KV_TAIL_SHARE of the stream's
 * K+V bytes; at least KV_PAGE_MIN, at most full. */
uint32_t kv_stream_tail_cap(const struct kv_seq *s, const struct kv_stream *st, uint32_t fmt, uint32_t need,
			    uint32_t full);
/* Bytes of new pages kv_seq_reserve(s, n_new) would take. */
size_t kv_seq_reserve_bytes(const struct kv_seq *s, uint32_t n_new);

/* Makes room for n_new more tokens in every stream (dynamic chunking: whole
 * pages of the stream's page_tokens for the bulk, and for the rest one page
 * sized by kv_stream_tail_cap), all or nothing. When the new positions pass
 * KV_POS16_LIMIT, every stream goes wide first (its narrow pages keep what
 * they hold and take nothing more). On
 * TKV_ERR_KV_FULL (budget) or TKV_ERR_NOMEM nothing changes and err says how
 * many bytes were needed against what the budget had left. */
int kv_seq_reserve(struct kv_seq *s, uint32_t n_new, struct tkv_error *err);
/* Appends one token's key and value (head_dim floats each, model space) to a
 * stream that has room (after kv_seq_reserve). */
void kv_seq_append(struct kv_seq *s, uint32_t layer, uint32_t head, int32_t pos,
		   const float *k, const float *v);

/* Counts a key appended to a stream into its running mean (the centroid
 * semantic priorities compare keys with). */
void kv_stream_see_key(struct kv_stream *st, const float *k, uint32_t d);

/* Whether page pg of stream st may take more slots at any position the
 * stream holds: a wide page, or a narrow one before the stream went wide;
 * never a page of position offsets or a bitmap (it takes only its range: the
 * policy's top-ups check each position, kv_page_takes_pos), so new tokens
 * and shared slots never go there. */
static inline bool kv_stream_takes(const struct kv_stream *st, const struct kv_page *pg)
{
	return (!st->wide || kv_page_wide(pg)) && !(pg->flags & (KV_PAGE_POS8 | KV_PAGE_POSBM));
}

/* Whether the policy may top page pg up with slots whose positions it
 * takes (kv_page_takes_pos): kv_stream_takes, or a page of offsets or a
 * bitmap. */
static inline bool kv_stream_tops_up(const struct kv_stream *st, const struct kv_page *pg)
{
	return kv_stream_takes(st, pg) || (pg->flags & (KV_PAGE_POS8 | KV_PAGE_POSBM));
}
/* A new empty page for stream st (narrow or wide as the stream is); NULL
 * with *why set when the pool refuses. Ownership: the caller's until added. */
struct kv_page *kv_stream_new_page(struct kv_seq *s, const struct kv_stream *st, uint32_t fmt, uint32_t cap,
				   int *why);
/* The same for slots at positions lo..hi only (lo <= hi): the most compact
 * position form that holds them (kv_pos_form_cap: a bitmap only for q4/q2,
 * whose writers keep it sorted); it takes no others. */
struct kv_page *kv_stream_new_page_for(struct kv_seq *s, const struct kv_stream *st, uint32_t fmt, uint32_t cap,
				       int32_t lo, int32_t hi, int *why);

/* Page bookkeeping for the policy, keeping n_tokens, hot_free, tail and
 * kv_bytes exact: */
/* Sets the format new tokens of the stream are stored in (hot pages from now
 * on; pages of the old one stay as they are). */
void kv_stream_set_hot_fmt(struct kv_stream *st, uint32_t fmt);
/* A page of the stream's hot format with room: one it has, or a new one for
 * `need` more slots (sized as kv_seq_reserve sizes a tail page); NULL when
 * the pool refuses one (nothing changed then). */
struct kv_page *kv_stream_hot_page(struct kv_seq *s, struct kv_stream *st, uint32_t need);
/* Makes room in a stream's page array for `want` pages; TKV_ERR_NOMEM when
 * it cannot grow (nothing changed then). */
int kv_stream_grow(struct kv_seq *s, struct kv_stream *st, uint32_t want);
/* Adds a page (empty or filled) to a stream; TKV_ERR_NOMEM if the page array
 * cannot grow (the page is not taken then). */
int kv_stream_add_page(struct kv_seq *s, struct kv_stream *st, struct kv_page *pg);
/* Changes a page's fill. */
void kv_stream_set_used(struct kv_seq *s, struct kv_stream *st, struct kv_page *pg, uint32_t n);
/* Removes slot j of page i (the last slot moves into it; in a bitmap page
 * the later slots move down one, so it stays sorted). */
void kv_stream_remove_slot(struct kv_seq *s, struct kv_stream *st, uint32_t i, uint32_t j);
/* Sorts n rows by position, for a page that keeps its slots sorted
 * (KV_PAGE_POSBM): K and V (n rows of d floats each), pos and score codes
 * move together (stable); idx: scratch for n. */
void kv_rows_sort(float *K, float *V, uint32_t d, int32_t *pos, uint16_t *score, uint32_t n, uint32_t *idx);
/* Sets the positions and score codes of slots 0..n-1 of page pg from pos and
 * score, the rows (K and V, n rows of head_dim floats each, which the caller
 * then stores or packs into pg) sorted by position first when pg keeps its
 * slots sorted (KV_PAGE_POSBM: kv_rows_sort, idx scratch for n). */
void kv_page_set_rows(struct kv_page *pg, float *K, float *V, int32_t *pos, uint16_t *score, uint32_t n,
		      uint32_t *idx);
/* Returns empty pages to the pool. */
void kv_stream_drop_empty(struct kv_seq *s, struct kv_stream *st);

/* ---- attention (attn.c) ---- */

struct kv_attn_args {
	const float *q;     /* (nq, d) the query heads sharing this KV head, model space */
	uint32_t nq;
	int32_t qpos;       /* slots with pos > qpos are masked (causal) */
	uint32_t window;    /* and with pos <= qpos - window (sliding window); 0 = none */
	int unmasked;       /* no window and no slot of the stream past qpos (the last
			     * row of a segment): nothing to mask, positions unread */
	float softcap;      /* logits l become softcap * tanh(l / softcap) (Gemma 2); 0 = none */
	float scale;        /* 1/sqrt(d) */
	float skip;         /* skip a cold page whose score bound is below the running
			     * max minus skip for every head; 0 = never skip */
	const struct kv_stream *below; /* shared (KV_FMT_REF) slots: the stream of the layer
				   * below, where their directions are */
	const uint32_t *below_map;     /* kv_stream_pos_map of below, n_pos entries */
	int32_t n_pos;
	float *logit;       /* scratch: nq * n_tokens floats */
	float *qrot;        /* scratch: nq * d floats */
	float *orot;        /* scratch: nq * d floats */
	float *att;         /* out (may be NULL): per slot in page order, the sum over the
			     * nq heads of the weight it received; 0 for masked/skipped */
	float *out;         /* out: (nq, d) */
	double *entropy;    /* out (may be NULL): += sum over heads of the entropy (nats) */
};

/* One query position of nq heads over a stream: out_h = Σ_i softmax_i(scale q_h·k_i) v_i. */
void kv_attn(struct kv_stream *st, uint32_t d, struct kv_attn_args *a);

#endif
