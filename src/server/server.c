/* server.c - `tierkv serve` start-up and shutdown. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/srv_impl.h"

struct srv_params srv_default_params(void)
{
	struct srv_params p = {
		.host = "127.0.0.1",
		.port = 8080,
		.max_seqs = 32,
		.max_queue = 256,
		.max_body = (size_t)1 << 20,
		.max_tokens = 4096,
		.timeout = 600,
		.idle_timeout = 60,
		.max_preempt = 3,
		.ep = tkv_engine_default_params(),
	};

	p.ep.n_batch = 256;
	return p;
}

/* The chat template: --chat-template, else the model's tokenizer.chat_template
 * when it is a known family, else the plain fallback. */
static int pick_template(struct srv *s, struct tkv_chat_template *t)
{
	struct tkv_error err = { 0 };
	int st = tkv_chat_template_from_model(t, s->model, s->p.chat_template, &err);

	if (st == TKV_ERR_ARG) {
		fprintf(stderr, "tierkv serve: --chat-template: %s\n", err.msg);
		return -1;
	}
	if (st)
		fprintf(stderr, "tierkv serve: %s; using the plain format (choose one with --chat-template)\n",
			err.msg);
	return 0;
}

static void model_id(struct srv *s)
{
	const char *base = strrchr(s->p.model_path, '/');
	size_t n;

	if (s->p.alias) {
		snprintf(s->model_id, sizeof s->model_id, "%s", s->p.alias);
		return;
	}
	base = base ? base + 1 : s->p.model_path;
	n = strlen(base);
	if (n > 5 && !strcmp(base + n - 5, ".gguf"))
		n -= 5;
	if (n >= sizeof s->model_id)
		n = sizeof s->model_id - 1;
	memcpy(s->model_id, base, n);
	s->model_id[n] = 0;
}

int srv_start(struct srv **out, const struct srv_params *p)
{
	struct srv *s = calloc(1, sizeof *s);
	struct tkv_model_params mp = tkv_model_default_params();
	struct tkv_error err = { 0 };
	struct srv_err se;
	char mem[32];

	*out = NULL;
	if (!s) {
		fprintf(stderr, "tierkv serve: out of memory\n");
		return 1;
	}
	s->p = *p;
	s->alloc = p->ep.alloc;
	mp.alloc = s->alloc;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->sched_cv, NULL);

	if (tkv_model_load(&s->model, p->model_path, &mp, &err) ||
	    tkv_engine_init(&s->engine, s->model, &s->p.ep, &err)) {
		fprintf(stderr, "tierkv serve: %s\n", err.msg[0] ? err.msg : "cannot start the engine");
		goto fail;
	}
	tkv_model_get_info(s->model, &s->info);
	s->vocab = tkv_model_vocab(s->model);
	s->n_ctx = p->ep.n_ctx ? p->ep.n_ctx : s->info.n_ctx_train;
	model_id(s);
	s->started = (long)time(NULL);
	s->api.vocab = s->vocab;
	s->api.n_ctx = s->n_ctx;
	s->api.n_vocab = s->info.n_vocab;
	s->api.max_tokens = (uint32_t)p->max_tokens;
	s->api.seed_base = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 20 ^ (uint64_t)clock();
	s->api.alloc = s->alloc;
	if (pick_template(s, &s->api.chat))
		goto fail;
	if (p->kv_store) {
		char msg[256];

		if (srv_kvs_start(&s->kvs, s, msg, sizeof msg)) {
			fprintf(stderr, "tierkv serve: %s\n", msg);
			goto fail;
		}
	}
	srv_pred_init(&s->pred, &s->info, tkv_model_kv_bytes_per_token(s->model), &s->p.ep, p->kv_expect);
	s->t_start = srv_now();
	if (srv_cache_init(&s->cache, s->info.n_layer, s->info.n_kv_head, (uint32_t)p->max_seqs, s->alloc)) {
		fprintf(stderr, "tierkv serve: out of memory\n");
		goto fail;
	}
	if (srv_sched_start(s)) {
		fprintf(stderr, "tierkv serve: cannot start the scheduler\n");
		goto fail;
	}
	if (http_start(s, &se)) {
		fprintf(stderr, "tierkv serve: %s\n", se.msg);
		goto fail;
	}
	if (p->ep.kv_mem)
		snprintf(mem, sizeof mem, "%.1f MiB", (double)p->ep.kv_mem / (1024.0 * 1024.0));
	else
		snprintf(mem, sizeof mem, "unlimited");
	fprintf(stderr, "tierkv serve: model %s (%u layers, context %u), KV policy %s, KV memory %s, "
		"chat template %s, up to %d sequences\n", s->model_id, s->info.n_layer, s->n_ctx,
		tkv_policy_name(p->ep.kv.policy), mem, tkv_chat_template_name(&s->api.chat), p->max_seqs);
	fprintf(stderr, "tierkv serve: listening on http://%s%s%s:%d\n", strchr(p->host, ':') ? "[" : "", p->host,
		strchr(p->host, ':') ? "]" : "", http_port(s));
	*out = s;
	return 0;
fail:
	srv_stop(s);
	return 1;
}

int srv_port(struct srv *s)
{
	return http_port(s);
}

void srv_stop(struct srv *s)
{
	if (!s)
		return;
	srv_sched_stop(s);
	http_stop(s);
	/* requests still referenced by nobody but the scheduler are gone; the rest
	 * were answered before the daemon stopped */
	srv_kvs_stop(s->kvs);
	srv_cache_free(&s->cache);
	tkv_engine_free(s->engine);
	tkv_model_free(s->model);
	pthread_cond_destroy(&s->sched_cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

int srv_run(const struct srv_params *p)
{
	struct srv *s;
	sigset_t sigs;
	int sig = 0;

	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (srv_start(&s, p))
		return 1;
	if (sigwait(&sigs, &sig) == 0)
		fprintf(stderr, "tierkv serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
	srv_sched_stop(s);
	http_stop(s);
	if (p->kv_stats) {
		struct tkv_kv_stats ks;

		tkv_engine_kv_stats(s->engine, &ks);
		fprintf(stderr, "tierkv serve: KV peak %zu bytes of %zu, evicted %llu, governor runs %llu\n",
			ks.peak_allocated, ks.budget, (unsigned long long)ks.evicted, (unsigned long long)ks.gov_runs);
	}
	srv_stop(s);
	return 0;
}
