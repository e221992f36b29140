/* srv_impl.h - declarations shared by the server's files (not a public API).
 *
 *   buf.c      growable byte buffer (srv_buf_*)
 *   api.c      OpenAI request JSON -> generation params; response JSON (srv_api_*)
 *   predict.c  demand predictor: expected final length and KV bytes (srv_pred_*)
 *   sched.c    request queue, admission, continuous batching loop (srv_sched_*)
 *   metrics.c  Prometheus text (srv_metrics_*)
 *   cache.c    the live cache view behind GET /v1/cache (srv_cache_*)
 *   web.c      the web page's files, embedded at build time (srv_web_*)
 *   http.c     libmicrohttpd daemon, routing, SSE, errors (http_*)
 *   server.c   start-up, shutdown (srv_run) */
#ifndef TKV_SERVER_SRV_IMPL_H
#define TKV_SERVER_SRV_IMPL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/srv.h"
#include "tierkv.h"

/* ---- buffer --------------------------------------------------------------- */

struct srv_buf {
	char *p;      /* NUL-terminated when non-NULL; from a */
	size_t len, cap;
	struct tkv_alloc *a;  /* the server's allocator; NULL = uncounted */
};

/* 0 or -1 (out of memory; the buffer keeps what it had). */
int srv_buf_add(struct srv_buf *b, const char *s, size_t n);
int srv_buf_str(struct srv_buf *b, const char *s);
int srv_buf_printf(struct srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void srv_buf_free(struct srv_buf *b);

/* ---- request parameters (api.c) -------------------------------------------- */

enum srv_kind { SRV_COMPLETION = 0, SRV_CHAT = 1 };

#define SRV_MAX_STOP 4
#define SRV_MAX_STOP_LEN 256

/* What a request asks for, validated. Owns ids and stop strings. */
struct srv_gen {
	enum srv_kind kind;
	bool stream;
	bool include_usage;      /* stream_options.include_usage */
	bool ignore_eos;
	bool seed_set;           /* else the server picks a seed per request */
	int32_t *ids;            /* prompt tokens (n_prompt) */
	size_t n_prompt;
	uint32_t max_tokens;     /* after clamping to the context */
	struct tkv_sampler_params sp;
	float freq_penalty, presence_penalty;  /* OpenAI's, applied to generated tokens */
	char *stop[SRV_MAX_STOP];
	size_t stop_len[SRV_MAX_STOP];
	int n_stop;
	bool session;            /* session_id given: the conversation's chunks are stored at the end */
	char ignored[160];       /* unknown fields, comma-separated (reported in a header) */
	struct tkv_alloc *alloc; /* of ids and stop (the parse context's) */
};

/* An OpenAI-shaped error: {"error":{"message","type","param","code"}}. */
struct srv_err {
	int http;            /* 400, 401, 404, 413, 500, 503, ... */
	const char *type;    /* "invalid_request_error", "server_error", ... (static) */
	const char *code;    /* static or NULL */
	char param[48];      /* "" = null */
	char msg[256];
};

/* Fills e and returns -1. */
int srv_errf(struct srv_err *e, int http, const char *type, const char *code, const char *param,
	     const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* What request parsing needs to know about the model and the limits. */
struct srv_api_ctx {
	const struct tkv_vocab *vocab;
	struct tkv_chat_template chat;
	uint32_t n_ctx;          /* tokens per sequence */
	uint32_t n_vocab;
	uint32_t max_tokens;     /* --max-tokens */
	uint64_t seed_base;      /* mixed into the seed of requests without one */
	struct tkv_alloc *alloc; /* for what a parsed request owns; NULL = uncounted */
};

/* Parses a request body (len bytes, any bytes) for kind into g. 0, or -1 with e
 * filled (400 for everything the client got wrong, 503 out of memory). g is
 * zeroed first and must be released with srv_gen_free either way. */
int srv_api_parse(const struct srv_api_ctx *c, enum srv_kind kind, const char *body, size_t len,
		  struct srv_gen *g, struct srv_err *e);
void srv_gen_free(struct srv_gen *g);

/* JSON texts (from jansson's allocator - malloc unless json_set_alloc_funcs
 * says otherwise - to be released with free(); NUL-terminated; NULL on out
 * of memory). */
char *srv_api_error_json(const struct srv_err *e);
struct srv_usage { uint32_t prompt, completion; };
char *srv_api_response_json(enum srv_kind kind, const char *id, long created, const char *model,
			    const char *text, size_t len, const char *finish, const struct srv_usage *u);
/* One SSE chunk's JSON: role (chat's first chunk) or text, finish or NULL. */
char *srv_api_chunk_json(enum srv_kind kind, const char *id, long created, const char *model,
			 bool role, const char *text, size_t len, const char *finish);
/* The usage chunk of stream_options.include_usage (choices empty). */
char *srv_api_usage_chunk_json(enum srv_kind kind, const char *id, long created, const char *model,
			       const struct srv_usage *u);
char *srv_api_models_json(const char *model, long created);
/* The compact text of j (taken; NULL passes through), as the functions above
 * return theirs. */
struct json_t;
char *srv_api_dump(struct json_t *j);

/* ---- demand predictor (predict.c) ------------------------------------------ */

struct srv_pred {
	/* output length history: exponentially weighted mean and mean deviation */
	double out_mean, out_dev;
	uint64_t n_hist;
	/* error of the final-length predictions made at admission */
	double abs_err_sum;
	uint64_t n_err;
	/* KV bytes per cached token: model f16 K+V x format, page overhead, policy */
	double bpt_full;          /* full-precision bytes per token, page metadata included */
	double ratio;             /* expected bytes of a compressed token / a full one */
	uint32_t n_protect;       /* sinks + window: tokens the policy keeps at full precision */
	size_t seq_cap;           /* per-sequence K+V cap of the policy (0 = none) */
	double overhead;          /* allocated / K+V bytes, learned from the pool */
};

/* Sets the priors from the model and the engine params (and --kv-expect when > 0). */
void srv_pred_init(struct srv_pred *p, const struct tkv_model_info *mi, size_t kv_bytes_per_token,
		   const struct tkv_engine_params *ep, double kv_expect);
/* Expected output tokens of a request allowed max_tokens. */
uint32_t srv_pred_out(const struct srv_pred *p, uint32_t max_tokens);
/* Expected KV bytes of a sequence of n tokens under the policy. */
double srv_pred_bytes(const struct srv_pred *p, uint32_t n);
/* Records a finished request: predicted and actual final lengths (tokens). */
void srv_pred_finish(struct srv_pred *p, uint32_t predicted, uint32_t actual, uint32_t n_out);
/* Learns the page overhead from the engine's figures. */
void srv_pred_observe(struct srv_pred *p, const struct tkv_kv_stats *ks);
double srv_pred_mae(const struct srv_pred *p);

/* ---- the live cache view (cache.c) -------------------------------------------
 * What GET /v1/cache shows. The scheduler thread reads the engine (it alone
 * may) into a working view, then swaps it with the published one under
 * srv->mu; finished sequences and events are written under srv->mu on the
 * scheduler thread; HTTP threads read everything under srv->mu. */

struct srv;
struct srv_req;

#define SRV_CACHE_RECENT 8    /* finished sequences kept */
#define SRV_CACHE_EVENTS 64   /* events kept (the newest) */
#define SRV_CACHE_EVENTS_JSON 40 /* ... of which GET /v1/cache returns */

struct srv_cache_seq {
	char id[40];
	const char *state;        /* "prefill", "decode", or how it finished (static) */
	uint32_t prompt, generated, reused;  /* tokens */
	double t_end;             /* finished: seconds since the server started; live: 0 */
	struct tkv_kv_stats kv;   /* tkv_seq_kv_stats */
};

struct srv_cache_event {
	uint64_t id;              /* 1, 2, ... in order */
	double t;                 /* seconds since the server started */
	const char *kind;         /* static: governor, raise, evict, demote, merge, prefix, preempt, admit, finish */
	char text[160];
};

/* One snapshot of the engine. */
struct srv_cache_view {
	double t;                 /* seconds since the server started */
	struct tkv_kv_stats kv;   /* tkv_engine_kv_stats */
	struct tkv_kv_layer_stats *layers; /* (n_layer) summed over the live sequences */
	struct srv_cache_seq *seqs;        /* (cap) the live sequences */
	uint32_t n_seqs, cap;
};

struct srv_cache {
	uint32_t n_layer, n_kv_head;
	struct tkv_alloc *a;
	struct srv_cache_view pub, work;   /* pub: under srv->mu; work: the scheduler's */
	/* under srv->mu */
	struct tkv_kv_stats logged;                    /* the counters as last logged */
	bool have_logged;
	struct srv_cache_seq recent[SRV_CACHE_RECENT]; /* ring of finished sequences */
	uint64_t n_recent;
	struct tkv_kv_layer_stats *last_layers;        /* (n_layer) of the last finished one */
	char last_id[40];                              /* "" = none yet */
	struct srv_cache_event ev[SRV_CACHE_EVENTS];   /* ring */
	uint64_t n_ev;
};

/* What the view is of: constants of the server. */
struct srv_cache_meta {
	const char *model, *policy;
	size_t kv_mem;            /* bytes; 0 = unlimited */
	float gov_low, gov_high;
	uint32_t n_ctx, max_seqs, n_live, n_queued;
	unsigned long long preemptions;
	double now;               /* seconds since the server started */
};

/* 0, or -1 out of memory (c is then safe to free). */
int srv_cache_init(struct srv_cache *c, uint32_t n_layer, uint32_t n_kv_head, uint32_t max_seqs,
		   struct tkv_alloc *a);
void srv_cache_free(struct srv_cache *c);
/* Under srv->mu: appends an event (text truncated to fit). */
void srv_cache_event(struct srv_cache *c, double t, const char *kind, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Under srv->mu: publishes c->work (filled by the caller) as the current
 * view, with events for the counters that moved since the last one. */
void srv_cache_publish(struct srv_cache *c);
/* Under srv->mu: keeps a finished sequence's last figures (and its layers,
 * when given) and logs it, after what moved in the engine's counters (when
 * given: the engine's figures at its end). */
void srv_cache_finished(struct srv_cache *c, const struct srv_cache_seq *q, const struct tkv_kv_layer_stats *layers,
			const struct tkv_kv_stats *engine);
/* Under srv->mu: the view as JSON (from jansson's allocator, released with
 * free(); NULL out of memory). */
char *srv_cache_json(const struct srv_cache *c, const struct srv_cache_meta *m);
/* Scheduler thread: snapshots the engine (ks: its figures, just taken) and
 * the live requests into the view; takes srv->mu to publish. */
void srv_cache_snapshot(struct srv *s, const struct tkv_kv_stats *ks, double now);
/* Scheduler thread, under srv->mu: r finished (state: its finish reason) at
 * now (monotonic seconds, srv_now). */
void srv_cache_request_done(struct srv *s, struct srv_req *r, const char *state, double now);
/* Any thread: GET /v1/cache's body (as srv_cache_json) at now. */
char *srv_cache_text(struct srv *s, double now);

/* ---- the web page (web.c; its files are generated from web/ at build time) --- */

struct srv_web_file {
	const char *name;         /* "index.html", "app.js", ... */
	const unsigned char *data;
	size_t len;
};
extern const struct srv_web_file srv_web_files[];
extern const size_t srv_web_n_files;
/* The file a GET of url serves ("/" is index.html), or NULL; *ctype its
 * Content-Type. */
const struct srv_web_file *srv_web_find(const char *url, const char **ctype);

/* ---- requests and the scheduler (sched.c) ----------------------------------- */

enum srv_finish { SRV_FIN_NONE = 0, SRV_FIN_STOP, SRV_FIN_LENGTH, SRV_FIN_ERROR };

struct srv;

/* One request, shared by its HTTP thread and the scheduler (refs). Fields under
 * "published" change only under srv->mu; the scheduler's own fields are
 * touched only by the scheduler thread. */
struct srv_req {
	struct srv *srv;
	struct srv_gen gen;
	char id[40];              /* "chatcmpl-..." / "cmpl-..." */
	long created;             /* unix seconds */
	double t_enqueue;         /* monotonic seconds */
	double deadline;          /* monotonic seconds; 0 = none */

	/* published (srv->mu) */
	int refs;
	pthread_cond_t cv;
	struct srv_buf text;      /* generated text that is final (stop strings held back) */
	bool done;
	enum srv_finish finish;
	struct srv_err err;       /* when finish == SRV_FIN_ERROR */
	uint32_t n_gen_pub;       /* completion tokens */
	bool cancelled;           /* set by the HTTP side: client gone */
	bool queued;              /* in the wait queue */
	struct srv_req *qnext;    /* queue / live list link */

	/* scheduler-owned */
	struct tkv_seq *seq;
	struct tkv_sampler *smp;
	struct tkv_detok ts;
	float *logits;            /* (n_vocab) */
	int32_t *ctx;             /* (n_prompt + max_tokens) prompt then generated ids */
	uint32_t n_gen;           /* generated tokens in ctx */
	uint32_t n_fed;           /* tokens of ctx in the sequence */
	uint32_t *counts;         /* (n_vocab) generated-token counts, for OpenAI penalties */
	struct srv_buf raw;       /* all generated text, stop strings not yet cut */
	size_t raw_pub;           /* bytes of raw already published */
	uint32_t pred_len;        /* predicted final length at first admission */
	uint32_t pred_out;        /* predicted output tokens */
	int preempted;            /* times preempted */
	uint64_t admit_seq;       /* admission order */
	bool prefix_published;
	bool got_first;           /* first token generated (for time to first token) */
	uint32_t reused;          /* prompt tokens the last admission took from the prefix cache */
};

/* HTTP status codes counted in /metrics; the last slot takes any other. */
#define SRV_N_CODES 11
extern const int srv_http_codes[SRV_N_CODES];
int srv_code_slot(int code);

/* Counters the HTTP side and the scheduler update (atomics) and the
 * scheduler's last snapshot (under srv->mu). */
struct srv_stats {
	atomic_ullong http[SRV_N_CODES]; /* responses by status code, slots of srv_code_slot */
	atomic_ullong requests;       /* generation requests accepted into the queue */
	atomic_ullong prompt_tokens, gen_tokens;
	atomic_ullong fin_stop, fin_length, fin_cancel, fin_error;
	atomic_ullong preemptions, steps, rejected_queue_full, timeouts;
	/* under srv->mu */
	double ttft_sum;              /* seconds from enqueue to first token */
	uint64_t ttft_n;
	double tok_rate;              /* generated tokens/s over the last window */
	double rate_t0, last_step;
	uint64_t rate_tokens;
	struct tkv_kv_stats kv;       /* engine figures after a recent step */
	double kv_time;
	uint32_t n_live, n_queued;
	double pred_mae;
	uint64_t pred_n;
};

struct sched_ctx;

struct srv {
	struct srv_params p;
	struct tkv_alloc *alloc;      /* p.ep.alloc: the model's, the engine's and the server's own memory */
	struct tkv_model *model;
	struct tkv_engine *engine;
	const struct tkv_vocab *vocab;
	struct tkv_model_info info;
	uint32_t n_ctx;
	char model_id[128];
	long started;
	struct srv_api_ctx api;

	pthread_mutex_t mu;
	pthread_cond_t sched_cv;      /* wakes the scheduler: new request, cancel, stop */
	struct srv_req *q_head, *q_tail;  /* waiting for admission */
	uint32_t n_queued;
	bool stopping;                /* no new requests; scheduler ends */
	pthread_t sched_thread;
	bool sched_started;
	struct sched_ctx *sched;      /* the scheduler thread's buffers */
	struct srv_pred pred;         /* scheduler-owned */
	struct srv_req *live;         /* scheduler-owned list of admitted requests */
	uint32_t n_live;
	uint64_t admit_counter;
	atomic_ullong id_counter;
	struct srv_stats st;
	struct MHD_Daemon *httpd;
	struct srv_kvs *kvs;          /* NULL without --kv-store */
	struct srv_cache cache;       /* GET /v1/cache */
	double t_start;               /* monotonic seconds at start-up */
};

/* Makes a request from parsed params (taking ownership of g's contents): refs 1. */
struct srv_req *srv_req_new(struct srv *s, struct srv_gen *g);
/* Drops a reference (under no lock); the last one frees. */
void srv_req_put(struct srv_req *r);
/* Queues r (adds the scheduler's reference). 0, or -1 with e (queue full,
 * stopping). */
int srv_sched_submit(struct srv *s, struct srv_req *r, struct srv_err *e);
/* Marks r cancelled (the client went away); the scheduler frees its sequence. */
void srv_sched_cancel(struct srv *s, struct srv_req *r);
/* Allocates the scheduler's buffers and starts its thread. 0 or -1. */
int srv_sched_start(struct srv *s);
/* Fails every queued and live request with 503, stops and joins the scheduler. */
void srv_sched_stop(struct srv *s);

/* ---- shared KV store (kvstore.c) ---------------------------------------------- */

struct srv_kvs;

/* Store counters (atomics: the scheduler and writer threads add, /metrics reads). */
struct srv_kvs_stats {
	atomic_ullong lookups, hits, misses, skipped, hit_tokens, bytes_read, lookup_ns, timeouts;
	atomic_ullong bytes_written, entries_written, writes_dropped, errors, outages, full;
	atomic_ullong rejected[8];    /* by enum kv_store_verdict */
};

/* Connects to s->p.kv_store (a failure to connect is an outage, not an
 * error: the server starts without it); -1 with msg for a bad URL or model. */
int srv_kvs_start(struct srv_kvs **out, struct srv *s, char *msg, size_t n);
void srv_kvs_stop(struct srv_kvs *k);
/* Scheduler thread: before the local prefix lookup, grafts the stored chunks
 * of ids[0, n) the local tree lacks (a no-op when it has them all or the
 * store is down). */
void srv_kvs_fetch(struct srv_kvs *k, const int32_t *ids, size_t n);
/* Scheduler thread: encodes the sequence's full chunks of ids[0, n) not yet
 * stored and queues them for the writer. */
void srv_kvs_save(struct srv_kvs *k, struct tkv_seq *seq, const int32_t *ids, size_t n);
void srv_kvs_metrics(struct srv_kvs *k, struct srv_buf *b);

/* ---- metrics, http ---------------------------------------------------------- */

char *srv_metrics_text(struct srv *s);

int http_start(struct srv *s, struct srv_err *e);
void http_stop(struct srv *s);
/* Port the daemon listens on. */
int http_port(struct srv *s);

double srv_now(void);
const char *srv_finish_name(enum srv_finish f);

#endif
