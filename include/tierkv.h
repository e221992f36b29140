/* tierkv.h - public interface of libtierkv, a llama-family inference engine
 * whose KV cache is token-aware, tiered and adaptive.
 *
 * Conventions (the same everywhere in the library):
 *  - Functions that can fail return an int status: TKV_OK (0) or a negative
 *    TKV_ERR_*. Most take a `struct tkv_error *err` (may be NULL) that receives a
 *    message naming what is wrong and where. Library code never exits.
 *  - x_init()/x_free() pairs; x_free(NULL) is a no-op.
 *  - Options travel in params structs made by x_default_params().
 *  - Ownership is stated in each comment: borrowed, transferred or invalidated.
 *    In short: what x_init / x_load return through **out is the caller's and
 *    goes back through x_free; pointers a function returns are borrowed from
 *    the object they came from and live as long as it; buffers the caller
 *    passes in are only read or written during the call; strings returned
 *    without an object (names, status) are static.
 *  - Thread safety: a model and a vocabulary are read-only once loaded and may
 *    be shared by threads; an engine, its sequences and a sampler are used by
 *    one thread at a time; an allocator may be shared.
 */
#ifndef TIERKV_H
#define TIERKV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------ */

enum tkv_status {
	TKV_OK = 0,
	TKV_ERR_NOMEM = -1,       /* an allocation failed */
	TKV_ERR_IO = -2,          /* open/read/mmap failed */
	TKV_ERR_FORMAT = -3,      /* malformed or inconsistent file */
	TKV_ERR_ARG = -4,         /* bad argument from the caller */
	TKV_ERR_UNSUPPORTED = -5, /* valid, but not something tierkv handles */
	TKV_ERR_KV_FULL = -6,     /* the KV memory budget is exhausted */
	TKV_ERR_CTX_FULL = -7,    /* the sequence reached the context length */
	TKV_ERR_INTERNAL = -8,    /* a broken invariant: a bug */
};

/* Static string for a status; never NULL. */
const char *tkv_status_str(int status);

/* Static name of a GGUF tensor type number ("f32", "f16", "q8_0", "q4_k", ...),
 * "?" when unknown. */
const char *tkv_dtype_name(uint32_t type);

struct tkv_error {
	int status;
	char msg[512];
};

/* Sets err (if not NULL) to status and the printf-formatted message, and
 * returns status, so that code of your own reports through the same record:
 * `return tkv_errf(err, TKV_ERR_FORMAT, "chunk %d: short read", c);`. err
 * and fmt are borrowed for the call. */
int tkv_errf(struct tkv_error *err, int status, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;

/* ---- kernels --------------------------------------------------------------- */

/* The kernel level every kernel family (weights, KV rows, attention) runs at:
 * "ref" (scalar references), "avx2" or "avx512" (avx2 plus the AVX512-VNNI
 * integer dots). The environment variable TIERKV_KERNELS=ref|avx2|avx512|auto,
 * read once per process, picks it; unset or auto is the highest this CPU
 * runs. A level the CPU lacks or an unknown value makes tkv_model_load fail
 * with TKV_ERR_ARG. Static string; never NULL. */
const char *tkv_kernel_level(void);

/* ---- memory -------------------------------------------------------------
 * The counting allocator. Give one to the params of what you create (model,
 * engine, vocabulary, sampler) and every byte they allocate is counted, so
 * live and peak bytes are exact; NULL anywhere means uncounted memory. One
 * allocator may serve any number of objects and threads (its counters are
 * atomic). Its layout is private (src/util/alloc.h), so this header holds no
 * atomic types and compiles as C and C++. */
struct tkv_alloc;

/* A snapshot of an allocator's counters (plain values, safe to copy). */
struct tkv_alloc_stats {
	size_t live;        /* bytes currently allocated */
	size_t peak;        /* high-water mark of live */
	uint64_t n_calls;   /* allocation calls so far */
};

/* Creates an allocator with zero counters. *out is the caller's: free it with
 * tkv_alloc_free after every object that uses it. TKV_ERR_NOMEM (then *out is
 * NULL). */
int tkv_alloc_init(struct tkv_alloc **out);
/* a may be NULL. */
void tkv_alloc_free(struct tkv_alloc *a);
/* Fills out with a's counters now (all zero for a NULL a). */
void tkv_alloc_get_stats(const struct tkv_alloc *a, struct tkv_alloc_stats *out);

/* Memory of your own through an allocator (a may be NULL: uncounted), so
 * that it counts with the library's. Blocks are 64-byte aligned. What they
 * return is the caller's and goes back through tkv_free with the same a;
 * NULL on failure. n == 0 allocates a minimal block; tkv_calloc zeroes and
 * fails when n * size overflows; tkv_realloc leaves p valid and unchanged on
 * failure; tkv_strndup copies len bytes of s (borrowed) and adds a NUL;
 * tkv_free takes NULL. */
void *tkv_malloc(struct tkv_alloc *a, size_t n);
void *tkv_calloc(struct tkv_alloc *a, size_t n, size_t size);
void *tkv_realloc(struct tkv_alloc *a, void *p, size_t n);
void tkv_free(struct tkv_alloc *a, void *p);
char *tkv_strndup(struct tkv_alloc *a, const char *s, size_t len);

/* ---- threads --------------------------------------------------------------
 * A pool of persistent worker threads for work of your own, the pool the
 * engine runs its kernels on: a run costs microseconds, not thread creation. */
struct tkv_threads;

/* Starts n_threads - 1 workers (n_threads in [1, 512]; 1: everything runs on
 * the caller). *out is the caller's: tkv_threads_free. TKV_ERR_ARG or
 * TKV_ERR_NOMEM (then *out is NULL). */
int tkv_threads_init(struct tkv_threads **out, int n_threads, struct tkv_error *err);
/* Stops and joins the workers; p may be NULL. */
void tkv_threads_free(struct tkv_threads *p);
/* The number of threads, the caller included (1 for a NULL p). */
int tkv_threads_n(const struct tkv_threads *p);
/* Calls fn(ctx, ith, nth) once on each of the nth threads (the caller is
 * ith 0) and returns when all have returned; p may be NULL (fn(ctx, 0, 1) on
 * the caller). ctx is borrowed for the call. Not reentrant. */
void tkv_threads_run(struct tkv_threads *p, void (*fn)(void *ctx, int ith, int nth), void *ctx);
/* This machine's physical cores (online CPUs when unknown), at least 1: the
 * engine's default n_threads. */
int tkv_default_threads(void);

/* ---- model --------------------------------------------------------------
 * A llama-family model from a GGUF file: weights (borrowed from the file's
 * mapping, which the model owns), hyperparameters and tokenizer. */
struct tkv_model;

struct tkv_model_params {
	struct tkv_alloc *alloc;   /* counting allocator (borrowed: must outlive the model);
				    * NULL = uncounted */
	int n_threads;             /* threads that copy and interleave the weights at load,
				    * 1..512; 0 (default) = physical cores */
};

struct tkv_model_info {
	char arch[32];           /* general.architecture */
	char name[128];          /* general.name, or "" */
	uint32_t n_vocab;
	uint32_t n_ctx_train;    /* context length the model was trained for */
	uint32_t dim;            /* embedding width */
	uint32_t n_layer;
	uint32_t n_head;         /* query heads */
	uint32_t n_kv_head;      /* key/value heads (GQA when < n_head) */
	uint32_t head_dim;
	uint32_t n_ff;           /* feed-forward width */
	uint32_t n_rot;          /* rotary dimensions per head */
	float rope_base;
	float rope_scale;        /* linear position scaling factor (1 = none) */
	float rms_eps;
	uint32_t weight_type;    /* type of the attention query weights (GGML's type numbers:
				  * tkv_dtype_name gives the name) */
	uint64_t n_params;
	uint64_t file_bytes;
	uint32_t n_swa;          /* sliding window in tokens of the sliding layers, 0 = none */
	uint32_t n_swa_layers;   /* layers that slide (the others attend to everything) */
	float attn_softcap;      /* attention logit soft-cap (Gemma 2), 0 = none */
	float final_softcap;     /* output logit soft-cap, 0 = none */
	uint32_t n_expert;       /* routed experts per layer (mixture of experts), 0 = dense */
	uint32_t n_expert_used;  /* experts each token takes */
	uint32_t n_ff_exp;       /* an expert's feed-forward width */
};

struct tkv_model_params tkv_model_default_params(void);
/* Loads and validates the model at path (mapped read-only; the weights stay in
 * the mapping). *out is the caller's: free it with tkv_model_free after every
 * engine that uses it. On failure *out is NULL and err says what is wrong and
 * where (file, tensor, key, byte offset). p may be NULL (defaults). */
int tkv_model_load(struct tkv_model **out, const char *path, const struct tkv_model_params *p,
		   struct tkv_error *err);
/* Unmaps the file and frees the model: every pointer borrowed from it (vocabulary,
 * metadata strings, weight spans) is invalid afterwards. m may be NULL. */
void tkv_model_free(struct tkv_model *m);
/* Copies the hyperparameters into out (the caller's). */
void tkv_model_get_info(const struct tkv_model *m, struct tkv_model_info *out);
/* K+V bytes one token costs with full-precision f16 storage, over the layers
 * whose cache grows with the sequence: every layer but the sliding-window
 * ones, which hold at most their window (tkv_model_kv_bytes). */
size_t tkv_model_kv_bytes_per_token(const struct tkv_model *m);
/* K+V bytes of a sequence of n tokens with full-precision f16 storage: the
 * sliding-window layers hold the window - 1 tokens the next one can see
 * (between decode calls), the other layers all n. */
size_t tkv_model_kv_bytes(const struct tkv_model *m, size_t n_tokens);

/* The string value of the GGUF metadata key (e.g. "general.name"): *val points
 * into the model's file mapping (borrowed: valid until tkv_model_free, not
 * NUL-terminated), *len is its byte count. TKV_ERR_ARG when the key is absent
 * or not a string; then *val is NULL and *len 0. */
int tkv_model_meta_str(const struct tkv_model *m, const char *key, const char **val, size_t *len);
/* The model's chat template (tokenizer.chat_template, a Jinja text; borrowed
 * like tkv_model_meta_str's, not NUL-terminated, *len bytes), or NULL with
 * *len 0 when the model has none. */
const char *tkv_model_chat_template(const struct tkv_model *m, size_t *len);

/* Weights as the forward pass reads them, for bandwidth and roofline figures. */
struct tkv_weight_span {
	const void *data;   /* borrowed from the model: valid until tkv_model_free */
	size_t bytes;
};
/* The weight matrices one decoded token streams through: each layer's seven
 * (q, k, v, o, gate, up, down; in a layer of routed experts gate, up and down
 * are the stacks of all its experts) in order, then the output matrix. Writes up to
 * cap spans to out (may be NULL when cap is 0) and returns how many there are
 * (7 n_layer + 1). */
size_t tkv_model_weight_spans(const struct tkv_model *m, struct tkv_weight_span *out, size_t cap);
/* Bytes of weights one decoded token reads: every matrix (of a layer of
 * experts the router and expert_used_count experts' share), the norms and one
 * row of the token embedding. */
uint64_t tkv_model_token_weight_bytes(const struct tkv_model *m);
/* Bytes of all tensor data in the model's file. */
uint64_t tkv_model_file_tensor_bytes(const struct tkv_model *m);

/* ---- engine and sequences -----------------------------------------------
 * An engine runs a model for any number of sequences under one KV memory budget.
 * Each sequence has its own paged cache, grown on demand. */
struct tkv_engine;
struct tkv_seq;

enum tkv_kv_type { TKV_KV_F16 = 0, TKV_KV_F32 = 1 };

/* Cache policies: who stays hot (f16), warm (8-bit) or cold (4/2-bit), and
 * who is evicted when a sequence's budget or the pool's memory is short. */
enum tkv_policy {
	TKV_POLICY_FULL = 0,        /* keep everything at full precision (reference) */
	TKV_POLICY_WINDOW,          /* attention sinks + sliding window */
	TKV_POLICY_H2O,             /* heavy hitters: accumulated attention + recent window */
	TKV_POLICY_SNAPKV,          /* observation-window votes at prefill, then accumulated attention */
	TKV_POLICY_TOVA,            /* evict what the last query attended least */
	TKV_POLICY_ATTN_THRESHOLD,  /* evict tokens whose share of attention falls below a threshold */
	TKV_POLICY_SEMANTIC,        /* keep keys most similar to the context's core vector */
	TKV_POLICY_STREAMING,       /* sinks + window + the hottest tokens by attention */
	TKV_POLICY_KIVI,            /* keep every token, quantize all but the window to the cold format */
	TKV_POLICY_TIERED,          /* hot/warm/cold by combined importance */
	TKV_POLICY_ADAPTIVE,        /* tiered, with per-layer/per-head budgets from attention entropy; the default */
	TKV_POLICY_COUNT
};

/* Storage formats for tiers (the numbering of src/kv/tier.h). */
enum tkv_kv_fmt { TKV_FMT_F32 = 0, TKV_FMT_F16 = 1, TKV_FMT_Q8 = 2, TKV_FMT_Q4 = 3, TKV_FMT_Q2 = 4 };

struct tkv_kv_policy_params {
	enum tkv_policy policy;   /* default TKV_POLICY_ADAPTIVE */
	size_t seq_budget;        /* K+V bytes (data and quantization parameters) one sequence
				   * may hold; 0 = no per-sequence cap (only the pool governor) */
	float hot_ratio;          /* tiered: share of kept tokens stored hot (0.3) */
	float warm_ratio;         /* tiered: share stored warm (0.4); the rest is cold */
	uint32_t n_sink;          /* first tokens always kept hot (4) */
	uint32_t n_window;        /* most recent tokens always kept hot (32) */
	enum tkv_kv_fmt warm_fmt; /* TKV_FMT_Q8 */
	enum tkv_kv_fmt cold_fmt; /* TKV_FMT_Q4 (TKV_FMT_Q2 in the memory preset) */
	int completion;           /* merge evicted values into similar kept tokens (0) */
	int rotate;               /* rotate heads before low-bit quantization (0) */
	int cold_skip;            /* skip cold pages whose key bound cannot matter (1) */
	int tight_q8;             /* tiered/adaptive: a stream whose budget leaves a full-
				   * precision window under a quarter of n_window stores
				   * new tokens (so sinks and window too) at 8 bits (1) */
	float decay;              /* per-step decay of accumulated attention (1 = none) */
	float threshold;          /* attn-threshold: evict below threshold x mean attention (0.1) */
	float semantic_weight;    /* tiered: weight of key-centroid similarity in importance (0.1) */
	float recency_weight;     /* tiered: weight of recency (position / length) in importance (1) */
	float gov_high;           /* governor acts past this fraction of --kv-mem (0.8) */
	float gov_low;            /* ... to keep the pool above this fraction (0.7): below
				   * it, with work in flight, the caps rise again */
	float gov_floor;          /* ... but never squeezes a sequence below this fraction of
				   * its full f16 cache (0 = no floor): past it, decode
				   * reports TKV_ERR_KV_FULL so a server can preempt instead
				   * of lowering quality */
	float share_cos;          /* cross-layer sharing: a token whose key and value both have
				   * at least this cosine with its key and value in the layer
				   * below stores one direction for both layers and its own
				   * scales (MiniCache-style); 0 = off (the default) */
	uint32_t share_from;      /* ... in layers from this one up (0 = the upper half) */
	uint32_t pool;            /* tiered/adaptive: a slot ranks by the mean of its own
				   * priority and the best among the `pool` nearest ranked
				   * slots on each side, in position order, so kept tokens
				   * come in spans (SnapKV's pooling; not in a copying head
				   * of the head plan); 0 = by its own (6) */
};

struct tkv_kv_policy_params tkv_kv_policy_default_params(void);
/* "quality" | "balanced" | "memory": hot 0.4 / 0.3 / 0.2 (memory: semantic
 * completion on). TKV_ERR_ARG for an unknown name. */
int tkv_kv_preset(struct tkv_kv_policy_params *p, const char *name);
/* Static name ("tiered", ...); the parse functions take the same names. */
const char *tkv_policy_name(enum tkv_policy p);
/* -1 for an unknown name. */
int tkv_policy_parse(const char *name);
const char *tkv_kv_fmt_name(enum tkv_kv_fmt f);
int tkv_kv_fmt_parse(const char *name);

/* Layer plans (--kv-layer-plan): the page size and the budget share of each
 * layer. UNIFORM: every layer has page_tokens-slot pages and an even share
 * (the default). AUTO: each sequence measures its attention entropy per layer
 * over its first TKV_PLAN_AUTO_TOKENS tokens (its prompt, and its first
 * generated tokens when the prompt is shorter), then gives layers of wide
 * attention (high entropy) coarse pages and a larger share of its budget and
 * layers of narrow attention fine pages and a smaller share. FIXED: the lists
 * below, one entry per layer of the model. Warm and cold pages of a planned
 * layer hold 4 x its page tokens. A new page size applies to the pages
 * allocated after the plan is set and to pages compaction rewrites. */
#define TKV_MAX_PLAN_LAYERS 256
#define TKV_PLAN_AUTO_TOKENS 32
enum tkv_layer_plan_mode { TKV_PLAN_UNIFORM = 0, TKV_PLAN_AUTO = 1, TKV_PLAN_FIXED = 2 };

struct tkv_kv_layer_plan {
	enum tkv_layer_plan_mode mode;
	uint32_t n_layer;                          /* entries (FIXED, and as reported) */
	uint32_t page_tokens[TKV_MAX_PLAN_LAYERS]; /* slots of the layer's full-precision pages */
	float weight[TKV_MAX_PLAN_LAYERS];         /* its share of a sequence's budget, relative to
						    * the others (1 each = even) */
	/* reported by tkv_seq_layer_plan only: */
	int pending;                               /* AUTO: not chosen yet (too few tokens) */
	float entropy[TKV_MAX_PLAN_LAYERS];        /* AUTO: mean attention entropy per query head
						    * (nats) the choice was made from */
};

/* "uniform", "auto" or a list "P[:W],P[:W],..." (P page tokens 1..4096, W a
 * budget weight in (0, 16], default 1), one entry per layer. TKV_ERR_ARG with
 * a message naming the bad entry. */
int tkv_kv_layer_plan_parse(struct tkv_kv_layer_plan *out, const char *text, struct tkv_error *err);
/* The plan as text (the list for FIXED or a chosen AUTO plan, weights
 * normalized to mean 1), into buf (always NUL-terminated). */
void tkv_kv_layer_plan_str(const struct tkv_kv_layer_plan *p, char *buf, size_t cap);

/* Head plans (--kv-heads): each KV head's share of a sequence's budget.
 * UNIFORM: an even split. FIXED: one weight per (layer, KV head),
 * layer-major. AUTO (the default): the engine finds the heads that copy from
 * far back when it starts: it runs TKV_HEADS_PROBE random tokens, then the
 * same tokens again, and on a copy other random tokens instead (3 x 128
 * tokens of prefill in all); a KV head's score is
 * how much more attention its query heads give the first copy from the
 * second when it repeats (an induction head, the kind that retrieves a
 * needle: up to 1) than when it does not (0 for heads that attend the same
 * either way). Weights are mix + (1 - mix) x n x score / sum of scores (n
 * heads; mean 1), or all 1 when no head scores TKV_HEADS_MIN. The probe
 * keeps below the governor's low mark of --kv-mem: under a small --kv-mem it
 * runs the two continuations one after the other instead of on a copy, and
 * then on fewer tokens (`probe_tokens`, at least TKV_HEADS_PROBE_MIN); below
 * that it does not run and the split is even (`unprobed`). A budget is
 * split as the adaptive policy splits it: each stream the floor its
 * protected slots need, the rest by weight. Under a layer plan the weights
 * share each layer's part; without one, the sequence's whole budget. */
#define TKV_MAX_PLAN_HEADS 1024
#define TKV_HEADS_PROBE 128
#define TKV_HEADS_PROBE_MIN 32
#define TKV_HEADS_MIN 0.1f
/* AUTO's default mix depends on the policy the engine runs (lc-8k, docs/lc-8k.md:
 * with priority pooling, adaptive at 0.1 keeps the haystack's needles at 1/16
 * of the f16 cache; at 0.1 tiered's KL at 1/4 and 1/8 rose by 48-80%):
 * TKV_HEADS_MIX_ADAPTIVE under TKV_POLICY_ADAPTIVE, TKV_HEADS_MIX otherwise. */
#define TKV_HEADS_MIX_POLICY (-1.0f)
#define TKV_HEADS_MIX 0.5f
#define TKV_HEADS_MIX_ADAPTIVE 0.1f
enum tkv_head_plan_mode { TKV_HEADS_UNIFORM = 0, TKV_HEADS_AUTO = 1, TKV_HEADS_FIXED = 2 };

struct tkv_kv_head_plan {
	enum tkv_head_plan_mode mode;
	float mix;                          /* AUTO: the even part of the split, in [0, 1], or
					     * TKV_HEADS_MIX_POLICY (the default: by policy, above);
					     * tkv_engine_head_plan reports the mix used */
	uint32_t n;                         /* FIXED, and as reported: n_layer x n_kv_head */
	float weight[TKV_MAX_PLAN_HEADS];   /* each head's relative share: FIXED in (0, 1024];
					     * AUTO with mix 0 gives 0 to heads that do not copy */
	/* reported by tkv_engine_head_plan only: */
	float score[TKV_MAX_PLAN_HEADS];    /* AUTO: the probe's score per head */
	int unprobed;                       /* AUTO: no probe ran (the KV memory could not hold
					     * it, or the context or vocabulary is too small
					     * for it): an even split */
	uint32_t probe_tokens;              /* AUTO: the random tokens the probe repeated */
};

/* "uniform", "auto", "auto:MIX" or a list of weights "W,W,..." (n_layer x
 * n_kv_head of them, each in (0, 1024]). TKV_ERR_ARG with a message. */
int tkv_kv_head_plan_parse(struct tkv_kv_head_plan *out, const char *text, struct tkv_error *err);

struct tkv_engine_params {
	int n_threads;          /* default: physical cores */
	size_t kv_mem;          /* KV budget in bytes; 0 = unlimited (default 256 MiB) */
	uint32_t page_tokens;   /* token slots per page (default 16) */
	enum tkv_kv_type kv_type;
	uint32_t n_ctx;         /* max tokens per sequence; 0 = the model's training context */
	uint32_t n_batch;       /* prefill chunk in tokens (default 64) */
	struct tkv_kv_policy_params kv;  /* cache policy (default: tiered) */
	int prefix_cache;       /* share the pages of common prompt prefixes (default 0; a
				 * prompt chunk is published only when every layer holds it in
				 * a page of page_tokens slots, which a fixed layer plan with
				 * other sizes prevents) */
	struct tkv_kv_layer_plan layer_plan; /* page size and budget share per layer (uniform) */
	struct tkv_kv_head_plan head_plan;   /* budget share per KV head (auto, TKV_HEADS_MIX_POLICY) */
	struct tkv_alloc *alloc;
};

struct tkv_kv_stats {
	size_t budget;          /* bytes, 0 = unlimited */
	size_t allocated;       /* bytes of live pages, metadata included */
	size_t used;            /* bytes of filled slots */
	size_t peak_allocated;
	size_t kv_bytes;        /* K and V bytes of filled slots */
	size_t meta_bytes;      /* positions and scores of filled slots, and the position
				 * bitmaps of cold pages that keep them so */
	size_t fixed_bytes;     /* page headers and alignment padding (the rest of
				 * allocated: empty slots, the fragmentation) */
	size_t n_pages;
	size_t n_tokens;        /* cached tokens, summed over sequences */
	size_t tier_bytes[3];   /* K+V bytes (with quantization parameters) per tier: hot, warm, cold */
	size_t tier_tokens[3];  /* token slots per tier, summed over layers and KV heads */
	size_t shared_bytes;    /* K+V bytes of cross-layer shared slots (their scales) */
	size_t shared_tokens;   /* ... and their token slots (in no tier) */
	uint64_t evicted;       /* token slots evicted so far */
	uint64_t demoted;       /* token slots moved to a lower tier */
	uint64_t merged;        /* evicted slots merged into kept ones (semantic completion) */
	uint64_t gov_runs;      /* times the memory governor lowered the caps */
	uint64_t gov_raises;    /* caps the governor raised again (pool below its low mark) */
	size_t pool_mean;       /* bytes of live pages averaged over the time of the forward
				 * passes since the governor's first run (0 before it) */
	size_t pool_min;        /* ... and the least after any of them (0 before it) */
	uint64_t pages_read;    /* pages attention read */
	uint64_t pages_skipped; /* cold pages attention skipped by their key bound */
	uint64_t prefix_lookups;  /* sequences that looked for a shared prefix */
	uint64_t prefix_hits;     /* ... and found one */
	uint64_t prefix_tokens;   /* prompt tokens reused instead of computed */
	uint64_t prefix_pages;    /* pages the prefix tree holds */
	uint64_t cow;             /* shared pages a sequence copied to change them */
	/* compaction (engine-wide, also in a sequence's figures) */
	uint64_t compactions;     /* stream compactions that moved slots */
	uint64_t compact_slots;   /* slots moved */
	uint64_t compact_bytes;   /* K+V bytes written for them */
	uint64_t compact_ns;      /* time spent, all threads summed */
	size_t compact_freed;     /* page bytes returned by compactions, net */
};

struct tkv_engine_params tkv_engine_default_params(void);
/* *out is the caller's (free with tkv_engine_free). The engine borrows the
 * model and p->alloc, which must outlive it; p is copied. */
int tkv_engine_init(struct tkv_engine **out, struct tkv_model *m, const struct tkv_engine_params *p,
		    struct tkv_error *err);
/* Every sequence must have been freed first. e may be NULL. */
void tkv_engine_free(struct tkv_engine *e);
/* A snapshot of the pool's figures into out (the caller's). */
void tkv_engine_kv_stats(struct tkv_engine *e, struct tkv_kv_stats *out);
/* The head plan in effect (AUTO: as the probe chose it, with its scores). */
void tkv_engine_head_plan(const struct tkv_engine *e, struct tkv_kv_head_plan *out);

/* A new, empty sequence of e: *out is the caller's (free with tkv_seq_free
 * before the engine). TKV_ERR_NOMEM. */
int tkv_seq_init(struct tkv_seq **out, struct tkv_engine *e, struct tkv_error *err);
/* Returns the sequence's pages to the pool. s may be NULL. */
void tkv_seq_free(struct tkv_seq *s);
/* *out (the caller's, like tkv_seq_init's): a new sequence of the same engine
 * holding a copy of src's tokens and cache
 * (shared prefix pages stay shared; the copy counts against --kv-mem). The two
 * then go their own ways. TKV_ERR_KV_FULL when the budget cannot hold the copy. */
int tkv_seq_fork(struct tkv_seq **out, const struct tkv_seq *src, struct tkv_error *err);
/* Tokens in the sequence so far (the position of the next one). */
uint32_t tkv_seq_n_past(const struct tkv_seq *s);
/* This sequence's cache: same fields as the engine's, for one sequence. */
void tkv_seq_kv_stats(const struct tkv_seq *s, struct tkv_kv_stats *out);
/* One layer's share of a cache: K+V bytes (quantization parameters included)
 * and token slots per tier (hot, warm, cold), summed over the layer's KV
 * heads, and its cross-layer shared slots (in no tier). */
struct tkv_kv_layer_stats {
	size_t tier_bytes[3];
	size_t tier_tokens[3];   /* slots: divide by n_kv_head for tokens per head */
	size_t shared_bytes;
	size_t shared_tokens;
};
/* This sequence's figures per layer into out[0, min(n, n_layer)) (the
 * caller's); returns the model's n_layer. */
uint32_t tkv_seq_kv_layer_stats(const struct tkv_seq *s, struct tkv_kv_layer_stats *out, uint32_t n);
/* The same summed over the engine's live sequences. Like every engine call,
 * from the thread that drives the engine. */
uint32_t tkv_engine_kv_layer_stats(struct tkv_engine *e, struct tkv_kv_layer_stats *out, uint32_t n);
/* The layer plan in effect for this sequence (see struct tkv_kv_layer_plan):
 * mode as requested; n_layer, page_tokens and weight as applied (uniform
 * values while an AUTO plan is pending). */
void tkv_seq_layer_plan(const struct tkv_seq *s, struct tkv_kv_layer_plan *out);
/* Sets this sequence's K+V budget in bytes (0 = none); takes effect at the next
 * decode. */
void tkv_seq_set_budget(struct tkv_seq *s, size_t bytes);
/* Prefix sharing (engine param prefix_cache): on an empty sequence, attaches
 * the cached pages of the longest known prefix of the prompt ids (whole pages,
 * leaving at least one token to compute) and sets *n_reused; the caller then
 * decodes ids[*n_reused..]. A no-op (0 reused) when the cache is off. */
int tkv_seq_reuse_prefix(struct tkv_seq *s, const int32_t *ids, size_t n, size_t *n_reused,
			 struct tkv_error *err);
/* After the prompt ids[0..n) were decoded: offers the sequence's pages of the
 * prompt to the prefix cache so later sequences can share them. */
int tkv_seq_publish_prefix(struct tkv_seq *s, const int32_t *ids, size_t n, struct tkv_error *err);
/* Runs n tokens (ids, read during the call) through the model, appending
 * them to the sequence's cache, in chunks of n_batch. logits (may be NULL) receives n_vocab floats for the last
 * token, or n * n_vocab (token-major) when all_logits is set. TKV_ERR_CTX_FULL
 * past n_ctx and TKV_ERR_KV_FULL past the budget leave the sequence as it was
 * before the failing chunk. */
int tkv_seq_decode(struct tkv_seq *s, const int32_t *ids, size_t n, float *logits, int all_logits,
		   struct tkv_error *err);

/* One sequence's share of a batch step. */
struct tkv_batch_item {
	struct tkv_seq *seq;
	const int32_t *ids;   /* tokens to append (borrowed) */
	size_t n;
	float *logits;        /* n_vocab floats for the last token, or NULL */
	int status;           /* out: TKV_OK or this item's error */
};

/* Advances several sequences together (continuous batching): every forward
 * pass takes up to n_batch rows from all unfinished items, so one sequence's
 * prompt and the others' next tokens share the weight reads. A sequence that
 * fails (context full, budget) gets its status and drops out; the others go on.
 * Out of memory for the step as a whole (its scratch, the governor) fails
 * every item it did not finish, so an item with status TKV_OK always got all
 * its tokens and its logits. Returns TKV_OK when every item succeeded, else
 * the first error (in err). */
int tkv_engine_step(struct tkv_engine *e, struct tkv_batch_item *items, size_t n_items,
		    struct tkv_error *err);

/* ---- text ----------------------------------------------------------------
 * A vocabulary is the tokenizer of a GGUF file: SentencePiece (byte fallback,
 * leading space) or byte-level BPE, with its special tokens. A model's
 * vocabulary is borrowed from the model (tkv_model_vocab); tkv_vocab_load
 * reads one on its own, from any GGUF with tokenizer.* keys (vocabulary-only
 * files too). A vocabulary is read-only once made: any number of threads may
 * use one at once. */
struct tkv_vocab;

/* The model's vocabulary: borrowed, valid until tkv_model_free; never pass it
 * to tkv_vocab_free. */
const struct tkv_vocab *tkv_model_vocab(const struct tkv_model *m);
/* Reads the tokenizer of the GGUF at path (the file is closed again before
 * this returns). Allocations, now and in tkv_vocab_tokenize, go through a
 * (may be NULL), which must outlive the vocabulary. *out is the caller's (free
 * with tkv_vocab_free); on failure it is NULL and err says what is wrong:
 * TKV_ERR_IO, TKV_ERR_FORMAT, TKV_ERR_UNSUPPORTED, TKV_ERR_NOMEM. */
int tkv_vocab_load(struct tkv_vocab **out, const char *path, struct tkv_alloc *a,
		   struct tkv_error *err);
/* Frees a vocabulary from tkv_vocab_load; v may be NULL. */
void tkv_vocab_free(struct tkv_vocab *v);

int32_t tkv_vocab_n_tokens(const struct tkv_vocab *v);
int32_t tkv_vocab_bos(const struct tkv_vocab *v);   /* -1 when none */
int32_t tkv_vocab_eos(const struct tkv_vocab *v);   /* -1 when none */
/* Whether encoding a text should start with BOS (tokenizer.ggml.add_bos_token;
 * SentencePiece default true). */
bool tkv_vocab_add_bos(const struct tkv_vocab *v);
/* End of generation: eos, eot, <|im_end|>, <|eot_id|>, ... A generation loop
 * stops at the first token for which this is true. */
bool tkv_vocab_is_eog(const struct tkv_vocab *v, int32_t id);
/* Control and unknown tokens (the ones detokenizing hides unless asked). */
bool tkv_vocab_is_control(const struct tkv_vocab *v, int32_t id);

/* Encodes len bytes of text (any bytes; invalid UTF-8 is handled). Writes up
 * to n_max ids; *n_out gets the count the full encoding needs, so a first call
 * with n_max 0 (ids may be NULL) sizes the buffer. TKV_ERR_ARG when n_max is
 * too small; TKV_ERR_NOMEM. parse_special matches control tokens written in
 * the text ("<|im_start|>"). */
int tkv_vocab_tokenize(const struct tkv_vocab *v, const char *text, size_t len, bool add_bos,
		       bool parse_special, int32_t *ids, size_t n_max, size_t *n_out);
/* The same with the model's vocabulary. */
int tkv_tokenize(const struct tkv_model *m, const char *text, size_t len, int add_bos,
		 int parse_special, int32_t *ids, size_t n_max, size_t *n_out);

/* The token's text as stored in the vocabulary ("▁Once", "<0x0A>"):
 * borrowed from v (valid while v is), *len bytes, not NUL-terminated; NULL for
 * an id out of range. */
const char *tkv_vocab_token_text(const struct tkv_vocab *v, int32_t id, size_t *len);
/* Token to piece: the bytes id stands for in output text ("▁" becomes
 * a space, <0x0A> a newline byte, BPE bytes unmapped). Control and unknown
 * tokens give 0 bytes unless special. Writes up to cap bytes to buf (caller's)
 * and returns the full count, which may exceed cap, or TKV_ERR_ARG for an
 * invalid id. A piece may be part of a UTF-8 character: to print generated
 * text, use the streaming detokenizer below. */
int tkv_vocab_token_to_piece(const struct tkv_vocab *v, int32_t id, bool special, char *buf,
			     size_t cap);

/* Streaming detokenizer: turns generated ids into text that is always whole
 * UTF-8. Bytes of a character split over tokens (byte-fallback pieces <0xE2>
 * <0x96> <0x81>, BPE bytes) wait for the token that completes it; an invalid
 * sequence comes out as U+FFFD, one per maximal invalid subpart; control
 * tokens add nothing. The caller owns the struct (it holds no pointers):
 * zero-initialise it (or tkv_detok_reset) before the first token. Its fields
 * are private. */
struct tkv_detok {
	unsigned char pend[8];
	size_t n_pend;
};
/* Output room that makes tkv_detok_push succeed for every token of v. */
size_t tkv_detok_min_cap(const struct tkv_vocab *v);
/* Adds token id: writes the text it completes to out (cap bytes, caller's;
 * not NUL-terminated) and returns the byte count (0 when it only completes
 * part of a character), or TKV_ERR_ARG (bad id, or out too small: then d is
 * unchanged). */
int tkv_detok_push(const struct tkv_vocab *v, struct tkv_detok *d, int32_t id, char *out,
		   size_t cap);
/* At the end of a generation: emits U+FFFD for a character still incomplete
 * (needs cap >= 3 then), resets d and returns the byte count written. */
int tkv_detok_flush(struct tkv_detok *d, char *out, size_t cap);
/* Forgets anything pending. */
void tkv_detok_reset(struct tkv_detok *d);

/* ---- chat templates --------------------------------------------------------
 * A conversation rendered as the text a chat model was trained on. A GGUF
 * carries its template as Jinja (tokenizer.chat_template); tierkv runs no Jinja:
 * it recognises the family by the template's marker strings and renders it by
 * hand, byte for byte what the Jinja writes for system, user and assistant
 * messages (tests/test_chat.c checks this against real templates). Tools and
 * other roles are not supported. BOS is never written: the tokenizer adds it
 * (tkv_vocab_add_bos). A template is a plain value (no pointers); its fields
 * may be read, and are set by the functions below. */
enum tkv_chat_family {
	TKV_CHAT_PLAIN = 0,   /* no template: "System: ...\nUser: ...\nAssistant:" */
	TKV_CHAT_CHATML,      /* Qwen 2/2.5/3, ...: <|im_start|>role\n...<|im_end|>\n */
	TKV_CHAT_LLAMA2,      /* [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] */
	TKV_CHAT_MISTRAL,     /* Mistral 7B v0.1-v0.2: [INST] system\n\nuser [/INST]reply</s> */
	TKV_CHAT_MISTRAL_NEMO,/* [INST]user[/INST]; the system text opens the last user turn */
	TKV_CHAT_MISTRAL_V7,  /* [SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]...[/INST] (Small 3, Devstral) */
	TKV_CHAT_LLAMA3,      /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
	TKV_CHAT_ZEPHYR,      /* <|role|>\n...</s>\n */
	TKV_CHAT_PHI3,        /* <|role|>\n...<|end|>\n (Phi-3, Phi-3.5) */
	TKV_CHAT_GEMMA,       /* Gemma 2/3: <start_of_turn>user\n...<end_of_turn>\n, system in the first turn */
	TKV_CHAT_GEMMA4,      /* Gemma 4: <|turn>role\n...<turn|>\n */
	TKV_CHAT_PHI4,        /* Phi-4: <|im_start|>role<|im_sep|>...<|im_end|> */
	TKV_CHAT_FAMILY_COUNT
};

/* Variants within a family (flags), as the template text shows them. */
#define TKV_CHAT_DATE_HEADER   0x1u /* llama-3: the 3.1+ system header with "Cutting Knowledge Date" */
#define TKV_CHAT_THINK         0x2u /* chatml: Qwen3's <think> blocks (dropped from history) */
#define TKV_CHAT_NO_SYSTEM     0x4u /* phi-3: the template ignores system messages (Phi-3-mini) */
#define TKV_CHAT_USER_OPENS    0x8u /* phi-3, phi-4: each user turn opens the reply (no generation prompt) */
#define TKV_CHAT_EOS_AT_END    0x10u /* phi-3: eos_token closes a conversation without a generation prompt */
#define TKV_CHAT_SYS_TAGS      0x20u /* llama-2: the <<SYS>> block */
/* mistral, mistral-v7: the spaces around the tags, as the template writes them */
#define TKV_CHAT_INST_LEAD     0x40u /* " [INST]" */
#define TKV_CHAT_INST_SPACE    0x80u /* "[INST] ", "[SYSTEM_PROMPT] " */
#define TKV_CHAT_CLOSE_SPACE   0x100u /* " [/INST]" */
#define TKV_CHAT_REPLY_SPACE   0x200u /* a space before each reply */

struct tkv_chat_template {
	enum tkv_chat_family family;
	unsigned flags;              /* TKV_CHAT_* variant flags */
	char default_system[256];    /* chatml: the system text written when none is given ("" = none) */
	char eos[32];                /* text of the EOS token (mistral, zephyr, phi-3 write it) */
};

/* One message: role "system", "user" or "assistant"; content borrowed, len bytes. */
struct tkv_chat_msg {
	const char *role;
	const char *content;
	size_t content_len;
};

/* The family and flags of a Jinja template text (len bytes) by its marker
 * strings. TKV_OK, or TKV_ERR_UNSUPPORTED when no family matches (then t is
 * the plain format). t->eos is set to "</s>"; set it to the model's. */
int tkv_chat_template_detect(struct tkv_chat_template *t, const char *jinja, size_t len);
/* A family by name (tkv_chat_family_names lists them; "llama2", "llama3",
 * "phi3" are accepted too), with its most common variant. TKV_ERR_ARG for an
 * unknown name (t unchanged). */
int tkv_chat_template_by_name(struct tkv_chat_template *t, const char *name);
/* The model's template: by name when name is not NULL, else detected from its
 * tokenizer.chat_template; EOS text from its vocabulary. A model without a
 * template gets plain (TKV_OK). TKV_ERR_UNSUPPORTED when the model's template is
 * none tierkv knows (t is plain then, and usable), TKV_ERR_ARG for an unknown
 * name; err says which. */
int tkv_chat_template_from_model(struct tkv_chat_template *t, const struct tkv_model *m, const char *name,
				 struct tkv_error *err);
/* Static name of t's family ("chatml", "llama-3", ...). */
const char *tkv_chat_template_name(const struct tkv_chat_template *t);
/* Static, comma-separated list of the family names. */
const char *tkv_chat_family_names(void);
/* The text that closes an assistant turn ("<|im_end|>\n", "<|eot_id|>",
 * the EOS text, ...): what follows a reply that stopped at an end-of-generation
 * token, which a caller that keeps the reply's KV has not fed to the model.
 * Writes it and a NUL to buf (cap bytes) and returns its length, or
 * TKV_ERR_ARG when cap is too small (64 bytes always do). */
int tkv_chat_turn_end(const struct tkv_chat_template *t, char *buf, size_t cap);
/* Renders the n messages m, then the assistant's generation prompt when
 * add_generation_prompt, into buf (cap bytes, the caller's): the text and a NUL
 * when cap > *n_out, where *n_out is the text's length (a first call with cap 0
 * and buf NULL sizes it). TKV_ERR_ARG for an unknown role, or when cap is too
 * small (nothing useful in buf then). */
int tkv_chat_render(const struct tkv_chat_template *t, const struct tkv_chat_msg *m, size_t n,
		    bool add_generation_prompt, char *buf, size_t cap, size_t *n_out);

/* ---- sampling ------------------------------------------------------------
 * Picks the next token from logits, in llama.cpp's default order: repetition
 * penalty over the last repeat_last_n accepted tokens, top-k, top-p, min-p,
 * temperature, then a draw from a PCG generator seeded by seed (the same seed
 * and logits give the same tokens on every machine). temp 0 is greedy: the
 * argmax, lowest id on ties, no draw. */
struct tkv_sampler;

struct tkv_sampler_params {
	float temp;            /* 0 = greedy (0.8) */
	int32_t top_k;         /* <= 0 = off (40) */
	float top_p;           /* >= 1 = off (0.95) */
	float min_p;           /* <= 0 = off (0.05) */
	float repeat_penalty;  /* 1 = off (1.0) */
	int32_t repeat_last_n; /* history length for the penalty (64) */
	uint64_t seed;         /* (0xC0FFEE) */
};

struct tkv_sampler_params tkv_sampler_default_params(void);
/* A sampler over n_vocab logits. *out is the caller's (free with
 * tkv_sampler_free); a (may be NULL) must outlive it. TKV_ERR_ARG for
 * out-of-range params (negative temp, top_p <= 0, min_p > 1, repeat_penalty
 * <= 0, n_vocab < 1), TKV_ERR_NOMEM; then *out is NULL. */
int tkv_sampler_init(struct tkv_sampler **out, const struct tkv_sampler_params *p, int32_t n_vocab,
		     struct tkv_alloc *a, struct tkv_error *err);
/* s may be NULL. */
void tkv_sampler_free(struct tkv_sampler *s);
/* The chosen id in [0, n_vocab). logits (n_vocab floats, borrowed) may be
 * modified in place. NaN counts as -inf; all -inf gives 0. Does not record
 * the id: call tkv_sampler_accept for that. */
int32_t tkv_sampler_sample(struct tkv_sampler *s, float *logits);
/* Records id in the repetition history (prompt tokens too). */
void tkv_sampler_accept(struct tkv_sampler *s, int32_t id);
/* Forgets the history and reseeds. */
void tkv_sampler_reset(struct tkv_sampler *s, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
