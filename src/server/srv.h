/* srv.h - `tierkv serve`: an OpenAI-compatible HTTP server over one engine.
 *
 * A front end: it drives the engine through the public API (include/tierkv.h)
 * plus the tokenizer and sampler, and never reaches into the cache.
 *
 * Threads: libmicrohttpd runs one thread per connection; those threads parse
 * and validate a request, put it in the queue and wait on its condition
 * variable. One scheduler thread owns the engine: each iteration it drops
 * cancelled requests, admits queued ones (their prefill joins the batch) and
 * advances every live sequence by one token with tkv_engine_step.
 *
 * The CLI (src/cli/serve.c) parses the options into srv_params and calls
 * srv_run, which returns when SIGINT or SIGTERM arrives. */
#ifndef TKV_SERVER_SRV_H
#define TKV_SERVER_SRV_H

#include <stddef.h>

#include "tierkv.h"

struct srv_params {
	const char *model_path;   /* GGUF file (required) */
	const char *alias;        /* model id in the API; NULL = file name without .gguf */
	const char *host;         /* address to bind (default "127.0.0.1") */
	int port;                 /* 8080; 0 = any free port (the chosen one is printed) */
	const char *api_key;      /* NULL = no key; else "Authorization: Bearer KEY" */
	const char *chat_template;/* NULL = from the model's metadata; else a family name */
	int max_seqs;             /* sequences generating at once (32) */
	int max_queue;            /* requests waiting for admission (256) */
	size_t max_body;          /* request body bytes (1 MiB) */
	int max_tokens;           /* max_tokens a request may ask for (4096) */
	double timeout;           /* seconds a request may take, queue included; 0 = none (600) */
	double idle_timeout;      /* seconds a connection may send nothing before it is closed,
				     while no request of it is generating (60) */
	int max_preempt;          /* times a request may be preempted before it fails (3) */
	double kv_expect;         /* expected cache bytes per token / full f16; 0 = from the policy */
	int verbose;              /* log every request on stderr */
	int kv_stats;             /* print the cache statistics at exit */
	const char *kv_store;     /* redis://[[USER]:PASS@]HOST[:PORT][/DB] or NULL (kvstore.c) */
	const char *kv_store_password; /* AUTH password (else the URL's or TIERKV_KV_STORE_PASSWORD) */
	int kv_store_ttl;         /* seconds an entry lives after its last use (3600) */
	double kv_store_timeout;  /* seconds: connect, lookup deadline (0.5) */
	struct tkv_engine_params ep;  /* ep.alloc (NULL = uncounted) also takes the model's and the
				       * server's own memory; jansson and libmicrohttpd use malloc */
};

struct srv_params srv_default_params(void);
/* Loads the model, starts the engine, the scheduler and the HTTP daemon, and
 * serves until SIGINT/SIGTERM. Returns 0 after a clean shutdown, 1 on a
 * start-up failure (message on stderr). Blocks SIGINT and SIGTERM in the
 * calling thread and the threads it starts. */
int srv_run(const struct srv_params *p);

/* The same in steps, for a caller that serves in-process (tests): srv_start
 * loads the model and starts the engine, the scheduler and the HTTP daemon
 * (port 0: any free one, see srv_port); 0, or 1 with a message on stderr and
 * *out NULL. srv_stop fails what is still queued or running with 503, stops
 * and frees everything; srv_stop(NULL) is a no-op. Neither touches signals. */
struct srv;
int srv_start(struct srv **out, const struct srv_params *p);
void srv_stop(struct srv *s);
int srv_port(struct srv *s);


#endif
