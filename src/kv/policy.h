/* policy.h - who is hot, warm, cold or evicted, stream by stream.
 *
 * Every policy is the same machine with different knobs (struct kv_cfg; a
 * policy is one row of the table in policy.c):
 *  - a score per slot, updated from the attention each query gives it
 *    (accumulated, last query only, or not at all);
 *  - a priority per slot at maintenance time, from that score, the slot's age
 *    and, for the semantic ones, its key's similarity to the stream's centroid;
 *  - a list of tiers with their shares of the kept slots (tiered: 30% hot f16,
 *    40% warm q8, 30% cold q4) - single-tier policies keep everything hot;
 *  - protected slots: the first n_sink positions and the last n_window — or,
 *    when the stream's budget is so tight that sinks and window would take
 *    more than a quarter of it, a window shrunk to fit that quarter (never
 *    below 4 positions): a hard budget beats a long window. A stream so
 *    tight that its window falls below a quarter of n_window, in a
 *    multi-tier policy (tiered, adaptive; tight_q8), also stores
 *    its new tokens at q8 rather than full precision, so its sinks, window
 *    and not yet ranked tokens cost 20 bytes a slot instead of 32 at head
 *    size 8 (the stream's hot format, kv_stream_set_hot_fmt; its hot tier
 *    becomes q8 too, since slots are never promoted).
 * Maintenance runs when a stream holds more K+V bytes than its budget: it ranks
 * the unprotected slots, keeps as many as the budget pays for at their tiers'
 * costs, moves slots whose tier changed (never up: a quantized slot is not
 * promoted) and evicts the rest, optionally merging each evicted value into
 * its most similar kept neighbour (semantic completion). */
#ifndef TKV_KV_POLICY_H
#define TKV_KV_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/seq.h"
#include "tierkv.h"

enum kv_score_mode { KV_SCORE_NONE = 0, KV_SCORE_ACC, KV_SCORE_LAST };

enum kv_prio {
	KV_PRIO_POS = 0,     /* recency (window) */
	KV_PRIO_ACC,         /* accumulated attention (h2o, snapkv) */
	KV_PRIO_LAST,        /* last query's attention (tova) */
	KV_PRIO_MEAN,        /* attention per query since the slot arrived */
	KV_PRIO_SEMANTIC,    /* cosine of the key to the stream's centroid */
	KV_PRIO_MEAN_SEM,    /* mean attention x (1 + w * cosine) (tiered) */
};

#define KV_MAX_TIERS 3

struct kv_cfg {
	enum tkv_policy policy;
	enum kv_score_mode score;
	enum kv_prio prio;
	uint32_t n_sink, n_window;
	uint32_t n_tiers;
	float tier_frac[KV_MAX_TIERS];    /* shares of the kept unprotected slots */
	uint32_t tier_fmt[KV_MAX_TIERS];  /* their formats, most precise first */
	uint32_t hot_fmt;                 /* the pool's full-precision format */
	uint32_t page_tokens;             /* slots of full-precision pages */
	uint32_t low_cap;                 /* slots of warm and cold pages */
	uint32_t group;                   /* query heads per KV head */
	uint32_t obs_window;              /* snapkv: last queries of a forward chunk that vote; 0 = all */
	bool completion, rotate, adaptive, evicts;
	bool tight_q8;                    /* tight streams take new tokens at q8 (head comment) */
	bool always;                      /* acts within the budget too: kivi quantizes,
					   * attn-threshold drops slots under the threshold */
	bool drop_below;                  /* evicts slots under threshold x their fair share */
	float skip;                       /* cold-page skip margin in logits, 0 = off */
	float decay, threshold, semantic_weight, recency_weight;
	uint32_t pool;                    /* neighbours each side a priority is pooled over; 0 = off */
	size_t seq_budget;                /* default per-sequence K+V budget */
	float share_cos;                  /* cross-layer sharing (seq.h); 0 = off */
	uint32_t share_from;              /* its first layer; 0 = the upper half */
};

/* The head-plan weight from which a stream counts as a copying head
 * (lc-8k's probe: 2.62 and 3.28 for its two, at most 1.09 for the others;
 * mean 1): adaptive counts its span as at least the mean (policy.c), and
 * priority pooling leaves it out. Without the first adaptive starved them by
 * their narrow attention: lc-8k at 4096 tokens, 1/8 and 1/16, +0.19% /
 * +5.25% perplexity and 2 / 0 needles of 15, with it -0.24% / +1.18% and
 * 15 / 6. */
#define KV_COPY_WEIGHT 1.5

/* Resolves public params for a model's head_dim and group size. TKV_ERR_ARG
 * with a message for inconsistent params (ratios, formats the head size cannot
 * store, rotation on a head size that is not a power of two). */
int kv_cfg_init(struct kv_cfg *c, const struct tkv_kv_policy_params *p, uint32_t head_dim,
		uint32_t group, uint32_t hot_fmt, uint32_t page_tokens, struct tkv_error *err);

/* The first of n rows of a forward chunk whose attention updates the slots'
 * scores (n: none vote): every row, or SnapKV's observation window, the last
 * obs_window queries of a longer chunk. */
uint32_t kv_policy_first_voter(const struct kv_cfg *c, uint32_t n);
/* Updates the scores of a stream's slots from one query's attention (att: per
 * slot in page order, summed over the group's heads). */
void kv_policy_observe(const struct kv_cfg *c, struct kv_stream *st, const float *att);

/* Recent positions a stream with this budget protects (kv_cfg n_window, or
 * fewer under a tight budget; see the head comment). */
uint32_t kv_policy_window(const struct kv_cfg *c, size_t budget, uint32_t head_dim);
/* The format a stream with this budget stores new tokens in: c->hot_fmt, or
 * q8 when tight (see the head comment). */
uint32_t kv_policy_hot_fmt(const struct kv_cfg *c, size_t budget, uint32_t head_dim);

/* Splits a sequence's K+V budget over its streams: evenly, or (adaptive) in
 * proportion to each stream's effective attention span exp(mean entropy),
 * never below what its protected slots need. Under a layer plan
 * (s->plan_set) each layer first gets its weight's share, then that share is
 * split over the layer's streams the same way. bytes 0 clears the budgets.
 * Each stream's hot format follows its budget (kv_policy_hot_fmt). */
void kv_policy_split_budget(const struct kv_cfg *c, struct kv_seq *s, size_t bytes);

/* Brings one stream within its budget; policies marked `always` also act
 * within it (budget 0 included). TKV_OK also when nothing was to do;
 * TKV_ERR_NOMEM if scratch or a page could not be had: the stream is then
 * consistent (accounting exact, protected slots kept, slots lost counted as
 * evicted) but maybe only partly maintained. */
int kv_policy_maintain(const struct kv_cfg *c, struct kv_seq *s, struct kv_stream *st);

#endif
