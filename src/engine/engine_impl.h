/* engine_impl.h - the engine's and a sequence's state, shared by engine.c
 * (engines, sequences, chunked decode, batch steps) and governor.c (caps,
 * the memory governor, the AUTO layer plan's choice). */
#ifndef TKV_ENGINE_IMPL_H
#define TKV_ENGINE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/policy.h"
#include "model/model.h"
#include "tierkv.h"

struct kv_cache;
struct kv_pool;
struct kv_prefix;
struct kv_seq;
struct tpool;

struct tkv_engine {
	struct tkv_alloc *alloc;
	struct tkv_model *model;
	struct tkv_engine_params params;
	struct kv_cfg cfg;
	struct kv_pool *pool;
	struct kv_prefix *prefix;  /* NULL when prefix sharing is off */
	struct tpool *tp;
	struct model_scratch scratch;
	struct kv_cache *cache;   /* the forward pass's seam to the KV cache */
	float *logits;            /* (n_batch, n_vocab) logits of a batch step */
	uint32_t *window;         /* (n_layer) each layer's sliding window, 0 = global */
	struct tkv_seq *seqs;     /* live sequences (doubly linked) */
	uint32_t n_seqs;
	uint64_t gov_runs;
	uint64_t gov_raises;
	/* the pool over forward passes since the governor's first run: bytes
	 * times nanoseconds, nanoseconds, and the least bytes seen */
	double pool_byte_ns;
	uint64_t pool_ns;
	size_t pool_min;
	uint64_t evicted_gone, demoted_gone, merged_gone, cow_gone; /* counters of freed sequences */
	float *head_w;            /* (n_layer x n_kv_head) the head plan's weights, or NULL (uniform) */
	float *head_score;        /* ... the AUTO probe's scores, or NULL */
	bool heads_unprobed;      /* AUTO: the probe did not fit --kv-mem (an even split) */
	uint32_t heads_probe;     /* AUTO: the random tokens the probe repeated */
	bool probing;             /* the head probe is running: the governor stays out of it */
};

struct tkv_seq {
	struct tkv_engine *e;
	struct kv_seq *kv;
	struct tkv_seq *prev, *next;
	uint32_t n_past;
	bool plan_pending;   /* AUTO layer plan not chosen yet */
	float *plan_ent;     /* (n_layer) AUTO: entropies the plan was chosen from, or NULL */
	size_t budget;       /* per-sequence K+V cap (0 = none) */
	size_t gov_budget;   /* cap set by the governor (0 = none) */
};

/* governor.c */

/* Applies the sequence's cap (its own, or the governor's, never below the
 * floor) to its streams, and lets the policy enforce it; compacts streams
 * whose small pages have piled up. TKV_ERR_NOMEM as kv_policy_maintain. */
int gov_seq_maintain(struct tkv_engine *e, struct tkv_seq *s);
/* The memory governor, before a forward pass that needs `need` bytes of new
 * pages: when the pool would pass gov_high of --kv-mem, unused shared
 * prefixes go first, then every live sequence's cap is lowered in
 * proportion so that the pool comes back into the band below gov_high, and
 * each policy enforces it (gov_seq_maintain). Below gov_low the caps rise
 * again, up to each sequence's full size. */
int gov_make_room(struct tkv_engine *e, size_t need);
/* Records the pool's bytes after a forward pass that took ns nanoseconds
 * (for the time-weighted mean and the minimum once the governor has run). */
void gov_sample(struct tkv_engine *e, uint64_t ns);
/* Chooses a sequence's AUTO layer plan from the entropy measured so far
 * (plan.h) and applies it; without scratch it tries again after the next
 * chunk. */
void gov_choose_plan(struct tkv_engine *e, struct tkv_seq *s);

/* heads.c */

/* Sets up the engine's head plan (tierkv.h): FIXED weights checked and
 * copied; AUTO runs the probe on two sequences of its own. */
int heads_init(struct tkv_engine *e, struct tkv_error *err);

/* Borrowed from the engine (for engine/kvstore.c): its prefix tree (NULL
 * without prefix_cache), its page pool, and a sequence's cache. */
struct kv_prefix *tkv_engine_prefix_tree(struct tkv_engine *e);
struct kv_pool *tkv_engine_kv_pool(struct tkv_engine *e);
struct kv_seq *tkv_seq_kv_cache(struct tkv_seq *s);

#endif
