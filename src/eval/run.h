/* run.h - the runs of `tierkv eval` on one text: the full-cache reference and
 * a policy scored against it.
 *
 * A pass is teacher-forced the way generation runs: a fresh engine and
 * sequence, the first `prefill` tokens in decode calls of n_batch (logits of
 * every position), then one token per call; the sequence's K+V bytes are read
 * after every call. A generation is n greedy tokens after a prefix, on its
 * own engine. The reference (policy full, no cap) keeps the logits of every
 * scored position and its greedy generation; a row (a policy at a cap) is
 * scored position by position against them (NLL, KL, top-1, see metrics.h)
 * and its generation is compared with the reference's (first divergence,
 * BLEU-4, ROUGE-L).
 *
 * Everything these runs allocate - the logits buffers, the generated ids, the
 * engines' caches, the ROUGE-L row - goes through the context's counting
 * allocator (the engine params' own `alloc` is replaced by it), so a test can
 * make any allocation fail: the run then returns TKV_ERR_NOMEM and holds
 * nothing. */
#ifndef TKV_EVAL_RUN_H
#define TKV_EVAL_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eval/metrics.h"
#include "tierkv.h"

#define EVR_BLEU_N 4   /* BLEU-4 */

/* The model and the scratch every run shares. */
struct evr_ctx {
	struct tkv_model *m;      /* borrowed */
	struct tkv_alloc *alloc;  /* for everything below and the runs' engines; NULL = uncounted */
	size_t n_vocab;
	size_t prefill;           /* tokens decoded in the first calls (in chunks of n_batch) */
	float *buf;               /* (buf_rows, n_vocab) logits of one decode call */
	size_t buf_rows;          /* min(prefill, n_ctx) */
};

/* The stage a run failed in, for the caller's message. */
enum evr_stage {
	EVR_STAGE_NONE = 0,
	EVR_STAGE_ALLOC,   /* the run's own buffers */
	EVR_STAGE_PASS,    /* the teacher-forced pass */
	EVR_STAGE_GEN,     /* the greedy generation */
	EVR_STAGE_SCORE,   /* comparing the generations (ROUGE-L) */
};

/* Sets up x for texts of at most n_ctx tokens (x->m borrows m). TKV_OK or
 * TKV_ERR_NOMEM (x then holds nothing). */
int evr_init(struct evr_ctx *x, struct tkv_model *m, size_t prefill, uint32_t n_ctx, struct tkv_alloc *a);
void evr_free(struct evr_ctx *x);

/* One pass over ids[0..n) (n >= 1): visit(ctx, i, logits) gets the logits
 * (n_vocab, borrowed for the call) that predict ids[i + 1], for i in
 * [from, n - 1). The last token is decoded too, so the cache ends up holding
 * all n. */
struct evr_pass {
	const int32_t *ids;
	size_t n;
	size_t from;
	void (*visit)(void *ctx, size_t i, const float *logits);
	void *ctx;
	size_t kv_peak;             /* out: most K+V bytes after any decode call */
	size_t alloc_peak;          /* out: most page bytes (metadata, unused slots) likewise */
	double kv_mean;             /* out: K+V bytes after each decode call, averaged over the calls'
				     * tokens (what the run held on the whole, not at its high) */
	double kv_tokens;           /* tokens behind kv_mean (the sum, kept while the pass runs) */
	struct tkv_kv_stats end;    /* out: the sequence's cache after the last token */
	struct tkv_kv_layer_plan plan; /* out: the sequence's layer plan at the end */
};

int evr_pass_run(struct evr_ctx *x, const struct tkv_engine_params *ep, struct evr_pass *p, struct tkv_error *err);
/* Greedy generation of n_gen tokens after prefix[0..n_prefix) into out. */
int evr_gen(struct evr_ctx *x, const struct tkv_engine_params *ep, const int32_t *prefix, size_t n_prefix,
	    size_t n_gen, int32_t *out, struct tkv_error *err);

/* The reference of one text. Owns logits and gen (release with evr_ref_free). */
struct evr_ref {
	float *logits;              /* (n - 1 - from, n_vocab) of positions [from, n - 1) */
	size_t from;
	double nll;                 /* NLL summed over positions [lo, hi) */
	size_t n_nll;
	int32_t *gen;               /* (n_gen) greedy tokens after the first n_prefix ids */
	size_t n_prefix, n_gen;
	struct tkv_kv_stats end;    /* the full cache after the text */
};

/* Runs the reference over ids[0..n) with ep (the caller makes it the full
 * cache): keeps the logits of positions [from, n - 1) and the NLL of
 * [lo, hi), then (n_gen > 0) generates n_gen tokens after ids[0..n_prefix).
 * On failure *stage says where and r holds nothing. */
int evr_ref_run(struct evr_ctx *x, const struct tkv_engine_params *ep, const int32_t *ids, size_t n, size_t from,
		size_t lo, size_t hi, size_t n_prefix, size_t n_gen, struct evr_ref *r, enum evr_stage *stage,
		struct tkv_error *err);
void evr_ref_free(struct evr_ctx *x, struct evr_ref *r);

/* One policy run on the text of ref, scored against it. */
struct evr_row {
	struct evm_acc acc;         /* positions [ref->from, n - 1) against the reference */
	size_t kv_peak, alloc_peak; /* as in evr_pass */
	double kv_mean;             /* as in evr_pass */
	struct tkv_kv_stats end;
	struct tkv_kv_layer_plan plan;
	int gen_done;               /* the generation ran and was scored: */
	size_t first_div;           /* first position where it differs from the reference's */
	double bleu, rouge;         /* BLEU-4 and ROUGE-L F1 against it */
};

/* The teacher-forced pass over ids[0..n) with ep, scored against ref, then
 * (ref->n_gen > 0) the same generation as the reference's, compared with it.
 * On failure *stage says where; out's fields of the stages before it are
 * valid (the pass's when the generation failed). */
int evr_row_run(struct evr_ctx *x, const struct tkv_engine_params *ep, const struct evr_ref *ref,
		const int32_t *ids, size_t n, struct evr_row *out, enum evr_stage *stage, struct tkv_error *err);

/* A question asked of a compressed cache (the retrieval tasks): on a fresh
 * engine and sequence with ep, the context ids[0..n_context) is decoded in
 * calls of n_batch tokens, as a server streams a prompt - the policy's rounds
 * and the byte cap act between them without knowing the question - then the
 * question ids[n_context..n) in one call (chunked the same way), then up to
 * n_gen greedy tokens, one per call, until done(ctx, gen, k) says the answer
 * is over after its k-th token. The sequence's K+V bytes are read after
 * every call. */
struct evr_ask {
	const int32_t *ids;
	size_t n, n_context;        /* 1 <= n_context <= n */
	size_t n_gen;
	bool (*done)(void *ctx, const int32_t *gen, size_t k);  /* may be NULL */
	void *ctx;
	int32_t *gen;               /* (n_gen) the caller's; out: the answer */
	size_t n_out;               /* out: tokens in gen */
	size_t n_past;              /* out: tokens the sequence took in (the last answer token is not decoded) */
	size_t kv_peak, alloc_peak; /* out: as in evr_pass */
	struct tkv_kv_stats end;    /* out: the sequence's cache after the answer */
};

int evr_ask_run(struct evr_ctx *x, const struct tkv_engine_params *ep, struct evr_ask *a, struct tkv_error *err);

#endif
