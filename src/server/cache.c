/* cache.c - GET /v1/cache: the cache as it stands, for the web page.
 *
 * The engine may be read only by the scheduler thread. Every STATS_PERIOD of
 * work (and once when it goes idle) the scheduler fills a working view - the
 * engine's figures, its per-layer tiers and each live sequence's figures -
 * then swaps it with the published view under srv->mu (the swap is two
 * pointers, so HTTP threads never wait on the engine). Publishing compares
 * the engine's counters with the previous view and logs what moved (governor
 * runs and raises, evictions, demotions, merges, prefix hits, preemptions) in
 * a ring of events; admissions and finished requests are logged as they
 * happen, and a finished sequence's last figures and layers are kept, so a
 * request shorter than a snapshot period still shows. The JSON is built under
 * srv->mu from the published view (a few kilobytes). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_impl.h"

static const char *const tier_name[3] = { "hot", "warm", "cold" };

static int view_init(struct srv_cache_view *v, uint32_t n_layer, uint32_t cap, struct tkv_alloc *a)
{
	memset(v, 0, sizeof *v);
	v->layers = tkv_calloc(a, n_layer ? n_layer : 1, sizeof *v->layers);
	v->seqs = tkv_calloc(a, cap ? cap : 1, sizeof *v->seqs);
	v->cap = cap;
	return v->layers && v->seqs ? 0 : -1;
}

int srv_cache_init(struct srv_cache *c, uint32_t n_layer, uint32_t n_kv_head, uint32_t max_seqs,
		   struct tkv_alloc *a)
{
	memset(c, 0, sizeof *c);
	c->n_layer = n_layer;
	c->n_kv_head = n_kv_head ? n_kv_head : 1;
	c->a = a;
	c->last_layers = tkv_calloc(a, n_layer ? n_layer : 1, sizeof *c->last_layers);
	if (view_init(&c->pub, n_layer, max_seqs, a) | view_init(&c->work, n_layer, max_seqs, a) ||
	    !c->last_layers)
		return -1;
	return 0;
}

void srv_cache_free(struct srv_cache *c)
{
	if (!c)
		return;
	tkv_free(c->a, c->pub.layers);
	tkv_free(c->a, c->pub.seqs);
	tkv_free(c->a, c->work.layers);
	tkv_free(c->a, c->work.seqs);
	tkv_free(c->a, c->last_layers);
	memset(c, 0, sizeof *c);
}

void srv_cache_event(struct srv_cache *c, double t, const char *kind, const char *fmt, ...)
{
	struct srv_cache_event *e = &c->ev[c->n_ev % SRV_CACHE_EVENTS];
	va_list ap;

	e->id = ++c->n_ev;
	e->t = t;
	e->kind = kind;
	va_start(ap, fmt);
	vsnprintf(e->text, sizeof e->text, fmt, ap);
	va_end(ap);
}

static unsigned long long moved(uint64_t now, uint64_t before)
{
	return now > before ? (unsigned long long)(now - before) : 0;
}

/* Events for the counters of cur that moved since the last ones logged (the
 * first call only takes them in); the pool's share of --kv-mem is cur's when
 * it holds sequences. */
static void log_deltas(struct srv_cache *c, const struct tkv_kv_stats *cur, double t)
{
	const struct tkv_kv_stats *prev = &c->logged;
	char pool[48] = "";
	unsigned long long d;

	if (!c->have_logged) {
		c->logged = *cur;
		c->have_logged = true;
		return;
	}
	if (cur->budget && cur->n_tokens)
		snprintf(pool, sizeof pool, "; pool at %.0f%% of --kv-mem",
			 100.0 * (double)cur->allocated / (double)cur->budget);
	if ((d = moved(cur->gov_runs, prev->gov_runs)))
		srv_cache_event(c, t, "governor", "governor lowered the caps (%llu run%s)%s", d, d == 1 ? "" : "s", pool);
	if ((d = moved(cur->gov_raises, prev->gov_raises)))
		srv_cache_event(c, t, "raise", "governor raised %llu cap%s again%s", d, d == 1 ? "" : "s", pool);
	if ((d = moved(cur->evicted, prev->evicted)))
		srv_cache_event(c, t, "evict", "%llu token slots evicted", d);
	if ((d = moved(cur->demoted, prev->demoted)))
		srv_cache_event(c, t, "demote", "%llu token slots demoted to a lower tier", d);
	if ((d = moved(cur->merged, prev->merged)))
		srv_cache_event(c, t, "merge", "%llu evicted slots merged into kept ones", d);
	if ((d = moved(cur->prefix_hits, prev->prefix_hits)))
		srv_cache_event(c, t, "prefix", "%llu prefix-cache hit%s, %llu prompt tokens reused", d, d == 1 ? "" : "s",
				moved(cur->prefix_tokens, prev->prefix_tokens));
	/* a counter that went back (it cannot, but) is taken as the new base */
	c->logged = *cur;
}

void srv_cache_publish(struct srv_cache *c)
{
	struct srv_cache_view tmp;

	log_deltas(c, &c->work.kv, c->work.t);
	tmp = c->pub;
	c->pub = c->work;
	c->work = tmp;
}

void srv_cache_finished(struct srv_cache *c, const struct srv_cache_seq *q, const struct tkv_kv_layer_stats *layers,
			const struct tkv_kv_stats *engine)
{
	if (engine)
		log_deltas(c, engine, q->t_end);
	c->recent[c->n_recent++ % SRV_CACHE_RECENT] = *q;
	if (layers) {
		memcpy(c->last_layers, layers, (size_t)c->n_layer * sizeof *layers);
		snprintf(c->last_id, sizeof c->last_id, "%s", q->id);
	}
	srv_cache_event(c, q->t_end, "finish", "%s %s: %u prompt + %u generated tokens, %zu bytes of K+V at the end",
			q->id, q->state, q->prompt, q->generated, q->kv.tier_bytes[0] + q->kv.tier_bytes[1] + q->kv.tier_bytes[2]);
}

/* ---- JSON ------------------------------------------------------------------------ */

/* {"hot": {"bytes", "tokens"}, "warm": ..., "cold": ..., "shared": ...}; tokens
 * are slots / per (the streams they are spread over). */
static json_t *tiers_obj(const size_t *bytes, const size_t *slots, size_t sh_bytes, size_t sh_slots, double per)
{
	json_t *o = json_object();

	for (int t = 0; o && t < 4; t++) {
		size_t b = t < 3 ? bytes[t] : sh_bytes, n = t < 3 ? slots[t] : sh_slots;

		if (json_object_set_new(o, t < 3 ? tier_name[t] : "shared",
					json_pack("{s:I, s:I, s:f}", "bytes", (json_int_t)b, "slots", (json_int_t)n,
						  "tokens", per > 0 ? (double)n / per : 0.0))) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

static json_t *seq_obj(const struct srv_cache *c, const struct srv_cache_seq *q)
{
	const struct tkv_kv_stats *k = &q->kv;

	return json_pack("{s:s, s:s, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:o?, s:o}", "id", q->id, "state",
			 q->state ? q->state : "?", "prompt_tokens", (json_int_t)q->prompt, "generated_tokens",
			 (json_int_t)q->generated, "reused_tokens", (json_int_t)q->reused, "tokens", (json_int_t)k->n_tokens,
			 "allocated", (json_int_t)k->allocated, "kv_bytes", (json_int_t)k->kv_bytes, "cap",
			 (json_int_t)k->budget, "evicted", (json_int_t)k->evicted, "ended",
			 q->t_end > 0 ? json_real(q->t_end) : NULL, "tiers",
			 tiers_obj(k->tier_bytes, k->tier_tokens, k->shared_bytes, k->shared_tokens,
				   (double)c->n_layer * c->n_kv_head));
}

/* The live sequences, then the finished ones, newest first. */
static json_t *seqs_arr(const struct srv_cache *c)
{
	json_t *a = json_array();
	uint64_t n = c->n_recent < SRV_CACHE_RECENT ? c->n_recent : SRV_CACHE_RECENT;

	for (uint32_t i = 0; a && i < c->pub.n_seqs; i++)
		if (json_array_append_new(a, seq_obj(c, &c->pub.seqs[i])))
			goto fail;
	for (uint64_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, seq_obj(c, &c->recent[(c->n_recent - 1 - i) % SRV_CACHE_RECENT])))
			goto fail;
	return a;
fail:
	json_decref(a);
	return NULL;
}

/* Per layer: the live sequences' tiers, or when none is live, the last
 * finished sequence's ("of" says which). */
static json_t *layers_obj(const struct srv_cache *c)
{
	bool live = c->pub.n_seqs > 0 || !c->last_id[0];
	const struct tkv_kv_layer_stats *L = live ? c->pub.layers : c->last_layers;
	json_t *a = json_array();

	for (uint32_t l = 0; a && l < c->n_layer; l++)
		if (json_array_append_new(a, tiers_obj(L[l].tier_bytes, L[l].tier_tokens, L[l].shared_bytes,
						       L[l].shared_tokens, c->n_kv_head)))
			goto fail;
	return json_pack("{s:s, s:o}", "of", live ? "live" : c->last_id, "layers", a);
fail:
	json_decref(a);
	return NULL;
}

static json_t *events_arr(const struct srv_cache *c)
{
	json_t *a = json_array();
	uint64_t n = c->n_ev < SRV_CACHE_EVENTS_JSON ? c->n_ev : SRV_CACHE_EVENTS_JSON;

	for (uint64_t i = c->n_ev - n; a && i < c->n_ev; i++) {
		const struct srv_cache_event *e = &c->ev[i % SRV_CACHE_EVENTS];

		if (json_array_append_new(a, json_pack("{s:I, s:f, s:s, s:s}", "id", (json_int_t)e->id, "t", e->t,
						       "kind", e->kind, "text", e->text))) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static json_t *counters_obj(const struct tkv_kv_stats *k, const struct srv_cache_meta *m)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "governor_runs", (json_int_t)k->gov_runs,
			 "governor_raises", (json_int_t)k->gov_raises, "evicted", (json_int_t)k->evicted, "demoted",
			 (json_int_t)k->demoted, "merged", (json_int_t)k->merged, "prefix_lookups",
			 (json_int_t)k->prefix_lookups, "prefix_hits", (json_int_t)k->prefix_hits, "prefix_tokens",
			 (json_int_t)k->prefix_tokens, "prefix_pages", (json_int_t)k->prefix_pages, "preemptions",
			 (json_int_t)m->preemptions);
}

char *srv_cache_json(const struct srv_cache *c, const struct srv_cache_meta *m)
{
	const struct tkv_kv_stats *k = &c->pub.kv;
	json_t *root, *layers = layers_obj(c);

	root = json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:i, s:i, s:i, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f},"
			 " s:o, s:o, s:o, s:O, s:O, s:o, s:i}",
			 "object", "cache", "model", m->model, "policy", m->policy, "time", m->now, "snapshot",
			 c->pub.t, "n_layer", (json_int_t)c->n_layer, "n_kv_head", (json_int_t)c->n_kv_head, "n_ctx",
			 (json_int_t)m->n_ctx, "live", (json_int_t)m->n_live, "queued", (json_int_t)m->n_queued,
			 "budget", "kv_mem", (json_int_t)m->kv_mem, "allocated", (json_int_t)k->allocated, "peak",
			 (json_int_t)k->peak_allocated, "used", (json_int_t)k->used, "kv_bytes", (json_int_t)k->kv_bytes,
			 "pages", (json_int_t)k->n_pages, "gov_low", round(1e4 * m->gov_low) / 1e4, "gov_high", round(1e4 * m->gov_high) / 1e4,
			 "tiers", tiers_obj(k->tier_bytes, k->tier_tokens, k->shared_bytes, k->shared_tokens,
					    (double)c->n_layer * c->n_kv_head),
			 "counters", counters_obj(k, m), "sequences", seqs_arr(c), "layers",
			 layers ? json_object_get(layers, "layers") : NULL, "layers_of",
			 layers ? json_object_get(layers, "of") : NULL, "events", events_arr(c), "max_seqs",
			 (json_int_t)m->max_seqs);
	json_decref(layers);
	return srv_api_dump(root);
}

/* ---- the scheduler's side ------------------------------------------------------------ */

static void seq_record(const struct srv_req *r, const char *state, struct srv_cache_seq *q)
{
	snprintf(q->id, sizeof q->id, "%s", r->id);
	q->state = state;
	q->prompt = (uint32_t)r->gen.n_prompt;
	q->generated = r->n_gen;
	q->reused = r->reused;
	q->t_end = 0;
	tkv_seq_kv_stats(r->seq, &q->kv);
}

void srv_cache_snapshot(struct srv *s, const struct tkv_kv_stats *ks, double now)
{
	struct srv_cache *c = &s->cache;
	struct srv_cache_view *w = &c->work;

	/* the live list and the engine are the scheduler's: read without the lock */
	w->t = now - s->t_start;
	w->kv = *ks;
	tkv_engine_kv_layer_stats(s->engine, w->layers, c->n_layer);
	w->n_seqs = 0;
	for (struct srv_req *r = s->live; r && w->n_seqs < w->cap; r = r->qnext)
		if (r->seq)
			seq_record(r, r->n_fed < r->gen.n_prompt ? "prefill" : "decode", &w->seqs[w->n_seqs++]);
	pthread_mutex_lock(&s->mu);
	srv_cache_publish(c);
	pthread_mutex_unlock(&s->mu);
}

void srv_cache_request_done(struct srv *s, struct srv_req *r, const char *state, double now)
{
	struct srv_cache *c = &s->cache;
	struct srv_cache_seq q;
	struct tkv_kv_stats ks;

	if (!r->seq)
		return;
	seq_record(r, state, &q);
	q.t_end = now - s->t_start;
	/* the layers go into c->work.layers, the scheduler's scratch until its next snapshot */
	tkv_seq_kv_layer_stats(r->seq, c->work.layers, c->n_layer);
	/* what the engine did since the last snapshot is logged before the end */
	tkv_engine_kv_stats(s->engine, &ks);
	srv_cache_finished(c, &q, c->work.layers, &ks);
}

/* ---- the HTTP side ---------------------------------------------------------------------- */

char *srv_cache_text(struct srv *s, double now)
{
	struct srv_cache_meta m = {
		.model = s->model_id,
		.policy = tkv_policy_name(s->p.ep.kv.policy),
		.kv_mem = s->p.ep.kv_mem,
		.gov_low = s->p.ep.kv.gov_low,
		.gov_high = s->p.ep.kv.gov_high,
		.n_ctx = s->n_ctx,
		.max_seqs = (uint32_t)s->p.max_seqs,
		.preemptions = atomic_load(&s->st.preemptions),
	};
	char *out;

	pthread_mutex_lock(&s->mu);
	m.n_live = s->st.n_live;
	m.n_queued = s->n_queued;
	m.now = now - s->t_start;
	out = srv_cache_json(&s->cache, &m);
	pthread_mutex_unlock(&s->mu);
	return out;
}
