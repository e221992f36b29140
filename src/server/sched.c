/* sched.c - the request queue and the continuous-batching loop.
 *
 * One scheduler thread owns the engine. Each iteration:
 *  1. drops requests whose client went away or whose deadline passed (their
 *     sequences are freed here, between steps);
 *  2. admits queued requests in arrival order while the demand predictor says
 *     their sequences fit in the KV budget next to the live ones (always at
 *     least one, at most --max-seqs);
 *  3. builds one batch: every decoding sequence's next token, then prompt
 *     chunks of the sequences still in prefill (about n_batch rows in all),
 *     and runs tkv_engine_step;
 *  4. samples each sequence that got logits, detokenizes, cuts stop strings
 *     and publishes the new text to the waiting HTTP thread.
 * A sequence refused by the budget (TKV_ERR_KV_FULL) keeps its place and
 * retries; to make room one request is preempted - the least often preempted,
 * then the one with the largest predicted remaining demand: its sequence is
 * freed and it goes back to the head of the queue, to be recomputed (prompt +
 * tokens so far) when admitted again, which waits until its worst case
 * (max_tokens) fits. A request preempted more than --max-preempt times fails
 * with a 503.
 *
 * Prefix sharing: admission asks the engine for the cached pages of the
 * prompt's longest known prefix (tkv_seq_reuse_prefix) and, once the prompt
 * is in, offers its pages (tkv_seq_publish_prefix); both are no-ops unless the
 * engine was made with prefix_cache. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv_impl.h"

#define ADMIT_FRAC 0.95      /* of --kv-mem that predicted demand may fill */
#define STATS_PERIOD 0.25    /* seconds between engine statistics snapshots */

double srv_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *srv_finish_name(enum srv_finish f)
{
	switch (f) {
	case SRV_FIN_STOP: return "stop";
	case SRV_FIN_LENGTH: return "length";
	case SRV_FIN_ERROR: return "error";
	default: return NULL;
	}
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* ---- requests ---------------------------------------------------------------- */

struct srv_req *srv_req_new(struct srv *s, struct srv_gen *g)
{
	struct srv_req *r = tkv_calloc(s->alloc, 1, sizeof *r);
	pthread_condattr_t ca;
	uint64_t n;

	if (!r)
		return NULL;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (pthread_cond_init(&r->cv, &ca)) {
		pthread_condattr_destroy(&ca);
		tkv_free(s->alloc, r);
		return NULL;
	}
	pthread_condattr_destroy(&ca);
	r->srv = s;
	r->text.a = r->raw.a = s->alloc;
	r->gen = *g;
	memset(g, 0, sizeof *g);
	r->refs = 1;
	n = atomic_fetch_add(&s->id_counter, 1);
	snprintf(r->id, sizeof r->id, "%s%016llx", r->gen.kind == SRV_CHAT ? "chatcmpl-" : "cmpl-",
		 (unsigned long long)mix64(s->api.seed_base ^ n));
	if (!r->gen.seed_set)
		r->gen.sp.seed = mix64(s->api.seed_base + 0x5eed * (n + 1));
	r->created = (long)time(NULL);
	r->t_enqueue = srv_now();
	r->deadline = s->p.timeout > 0 ? r->t_enqueue + s->p.timeout : 0;
	return r;
}

static void req_free(struct srv_req *r)
{
	srv_gen_free(&r->gen);
	srv_buf_free(&r->text);
	srv_buf_free(&r->raw);
	tkv_sampler_free(r->smp);
	tkv_free(r->srv->alloc, r->logits);
	tkv_free(r->srv->alloc, r->ctx);
	tkv_free(r->srv->alloc, r->counts);
	pthread_cond_destroy(&r->cv);
	tkv_free(r->srv->alloc, r);
}

/* Under s->mu. */
static void req_put_locked(struct srv_req *r)
{
	if (--r->refs == 0)
		req_free(r);
}

void srv_req_put(struct srv_req *r)
{
	struct srv *s;

	if (!r)
		return;
	s = r->srv;
	pthread_mutex_lock(&s->mu);
	req_put_locked(r);
	pthread_mutex_unlock(&s->mu);
}

int srv_sched_submit(struct srv *s, struct srv_req *r, struct srv_err *e)
{
	int rc = 0;

	pthread_mutex_lock(&s->mu);
	if (s->stopping) {
		rc = srv_errf(e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
	} else if (s->n_queued >= (uint32_t)s->p.max_queue) {
		atomic_fetch_add(&s->st.rejected_queue_full, 1);
		rc = srv_errf(e, 503, "server_error", "queue_full",
			      NULL, "the server is busy: %u requests are waiting; retry later", s->n_queued);
	} else {
		r->refs++;
		r->queued = true;
		r->qnext = NULL;
		if (s->q_tail)
			s->q_tail->qnext = r;
		else
			s->q_head = r;
		s->q_tail = r;
		s->n_queued++;
		atomic_fetch_add(&s->st.requests, 1);
		atomic_fetch_add(&s->st.prompt_tokens, r->gen.n_prompt);
		pthread_cond_signal(&s->sched_cv);
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void srv_sched_cancel(struct srv *s, struct srv_req *r)
{
	pthread_mutex_lock(&s->mu);
	if (!r->done) {
		r->cancelled = true;
		pthread_cond_signal(&s->sched_cv);
	}
	pthread_mutex_unlock(&s->mu);
}

/* ---- queue and live list (under s->mu; the live list is scheduler-owned) ---- */

static void queue_remove(struct srv *s, struct srv_req *r)
{
	struct srv_req **pp = &s->q_head, *prev = NULL;

	for (; *pp; prev = *pp, pp = &(*pp)->qnext)
		if (*pp == r) {
			*pp = r->qnext;
			if (s->q_tail == r)
				s->q_tail = prev;
			r->qnext = NULL;
			r->queued = false;
			s->n_queued--;
			return;
		}
}

static void queue_push_front(struct srv *s, struct srv_req *r)
{
	r->qnext = s->q_head;
	s->q_head = r;
	if (!s->q_tail)
		s->q_tail = r;
	r->queued = true;
	s->n_queued++;
}

static void live_remove(struct srv *s, struct srv_req *r)
{
	for (struct srv_req **pp = &s->live; *pp; pp = &(*pp)->qnext)
		if (*pp == r) {
			*pp = r->qnext;
			r->qnext = NULL;
			s->n_live--;
			return;
		}
}

static void live_append(struct srv *s, struct srv_req *r)
{
	struct srv_req **pp = &s->live;

	while (*pp)
		pp = &(*pp)->qnext;
	r->qnext = NULL;
	*pp = r;
	s->n_live++;
}

/* Frees what the scheduler holds for r's generation (not the request). */
static void release_seq(struct srv_req *r)
{
	tkv_seq_free(r->seq);
	r->seq = NULL;
	r->n_fed = 0;
	r->prefix_published = false;
}

/* Publishes raw[raw_pub..upto) as final text. Under s->mu. 0, or -1 out of
 * memory (nothing published: the text stays in raw for a later try). */
static int publish(struct srv_req *r, size_t upto)
{
	if (upto > r->raw_pub) {
		if (srv_buf_add(&r->text, r->raw.p + r->raw_pub, upto - r->raw_pub))
			return -1;
		r->raw_pub = upto;
	}
	r->n_gen_pub = r->n_gen;
	pthread_cond_broadcast(&r->cv);
	return 0;
}

/* Ends r: publishes the rest of its text, wakes its HTTP thread, records the
 * outcome and drops the scheduler's reference. r must already be off the
 * queue and the live list. Under s->mu, on the scheduler thread. */
static void finish(struct srv *s, struct srv_req *r, enum srv_finish f, const struct srv_err *e)
{
	/* a session's turn ends: store the conversation so far for its next turn */
	if (s->kvs && r->gen.session && r->seq && (f == SRV_FIN_STOP || f == SRV_FIN_LENGTH))
		srv_kvs_save(s->kvs, r->seq, r->ctx, tkv_seq_n_past(r->seq));
	srv_cache_request_done(s, r, r->cancelled ? "cancelled" : srv_finish_name(f), srv_now());
	release_seq(r);
	if ((f == SRV_FIN_STOP || f == SRV_FIN_LENGTH) && publish(r, r->raw.len)) {
		/* the end of the text cannot be published: an error, not a short text */
		f = SRV_FIN_ERROR;
		e = NULL;
		srv_errf(&r->err, 503, "server_error", "out_of_memory", NULL, "out of memory while generating");
	} else if (f == SRV_FIN_ERROR && e) {
		r->err = *e;
	} else if (f == SRV_FIN_ERROR) {
		srv_errf(&r->err, 500, "server_error", "internal_error", NULL, "the request failed");
	}
	r->done = true;
	r->finish = f;
	if (f == SRV_FIN_STOP || f == SRV_FIN_LENGTH) {
		if (!r->cancelled) {
			srv_pred_finish(&s->pred, r->pred_len, (uint32_t)r->gen.n_prompt + r->n_gen, r->n_gen);
			s->st.pred_mae = srv_pred_mae(&s->pred);
			s->st.pred_n = s->pred.n_err;
		}
	}
	pthread_cond_broadcast(&r->cv);
	if (r->cancelled)
		atomic_fetch_add(&s->st.fin_cancel, 1);
	else if (f == SRV_FIN_STOP)
		atomic_fetch_add(&s->st.fin_stop, 1);
	else if (f == SRV_FIN_LENGTH)
		atomic_fetch_add(&s->st.fin_length, 1);
	else
		atomic_fetch_add(&s->st.fin_error, 1);
	req_put_locked(r);
}

static void fail(struct srv *s, struct srv_req *r, int http, const char *code, const char *msg)
{
	struct srv_err e;

	srv_errf(&e, http, "server_error", code, NULL, "%s", msg);
	finish(s, r, SRV_FIN_ERROR, &e);
}

/* Ends r with f, where SRV_FIN_ERROR means its text ran out of memory. */
static void end(struct srv *s, struct srv_req *r, enum srv_finish f)
{
	if (f == SRV_FIN_ERROR)
		fail(s, r, 503, "out_of_memory", "out of memory while generating; retry later");
	else
		finish(s, r, f, NULL);
}

/* ---- stop strings -------------------------------------------------------------- */

static size_t find(const char *h, size_t hn, const char *n, size_t nn)
{
	if (nn == 0 || nn > hn)
		return (size_t)-1;
	for (size_t i = 0; i + nn <= hn; i++)
		if (h[i] == n[0] && !memcmp(h + i, n, nn))
			return i;
	return (size_t)-1;
}

/* Looks for a stop string in the unpublished text. On a match, cuts raw at its
 * start and returns true. Otherwise *safe is how much of raw may be published:
 * all but the longest tail that could still grow into a stop string. A match
 * cannot start inside published text, since such a tail is never published. */
static bool stop_scan(struct srv_req *r, size_t *safe)
{
	const struct srv_gen *g = &r->gen;
	const char *t = r->raw.p ? r->raw.p : "";
	size_t n = r->raw.len, from = r->raw_pub, best = (size_t)-1, hold = 0;

	for (int i = 0; i < g->n_stop; i++) {
		size_t at = find(t + from, n - from, g->stop[i], g->stop_len[i]);

		if (at != (size_t)-1 && from + at < best)
			best = from + at;
	}
	if (best != (size_t)-1) {
		r->raw.len = best;
		r->raw.p[best] = 0;
		*safe = best;
		return true;
	}
	for (int i = 0; i < g->n_stop; i++) {
		size_t k = g->stop_len[i] - 1 < n - from ? g->stop_len[i] - 1 : n - from;

		for (; k > hold; k--)
			if (!memcmp(t + n - k, g->stop[i], k)) {
				hold = k;
				break;
			}
	}
	*safe = n - hold;
	return false;
}

/* ---- admission ------------------------------------------------------------------ */

/* Predicted final length of r now (it may have outgrown the first guess). A
 * request that was preempted is held to its worst case, so that it is only
 * admitted again when all of it fits. */
static uint32_t pred_final(const struct srv *s, const struct srv_req *r)
{
	uint32_t have = (uint32_t)r->gen.n_prompt + r->n_gen;
	uint32_t out = r->preempted ? r->gen.max_tokens : srv_pred_out(&s->pred, r->gen.max_tokens);
	uint32_t n = (uint32_t)r->gen.n_prompt + out;

	if (n < have + 1 && r->n_gen < r->gen.max_tokens)
		n = have + 1;
	return n;
}

/* Gives r a sequence, a sampler and its buffers. Under s->mu. 0 or -1. */
static int admit(struct srv *s, struct srv_req *r)
{
	struct srv_gen *g = &r->gen;
	struct tkv_error err = { 0 };
	size_t reused = 0;

	if (!r->smp) {
		if (!r->ctx && !(r->ctx = tkv_malloc(s->alloc, (g->n_prompt + g->max_tokens) * sizeof *r->ctx)))
			return -1;
		if (!r->logits && !(r->logits = tkv_malloc(s->alloc, (size_t)s->info.n_vocab * sizeof *r->logits)))
			return -1;
		memcpy(r->ctx, g->ids, g->n_prompt * sizeof *r->ctx);
		if ((g->freq_penalty != 0 || g->presence_penalty != 0) && !r->counts &&
		    !(r->counts = tkv_calloc(s->alloc, s->info.n_vocab, sizeof *r->counts)))
			return -1;
		if (tkv_sampler_init(&r->smp, &g->sp, (int32_t)s->info.n_vocab, s->alloc, &err))
			return -1;
		for (size_t i = 0; i < g->n_prompt; i++)
			tkv_sampler_accept(r->smp, g->ids[i]);
		r->pred_out = srv_pred_out(&s->pred, g->max_tokens);
		r->pred_len = (uint32_t)g->n_prompt + r->pred_out;
	}
	if (tkv_seq_init(&r->seq, s->engine, &err))
		return -1;
	/* the shared store first grafts the stored chunks the local tree lacks */
	if (s->kvs)
		srv_kvs_fetch(s->kvs, r->ctx, g->n_prompt);
	/* prefix sharing: reuse cached pages of the prompt's longest known prefix */
	if (tkv_seq_reuse_prefix(r->seq, r->ctx, g->n_prompt, &reused, &err)) {
		release_seq(r);
		return -1;
	}
	r->n_fed = (uint32_t)reused;
	r->reused = (uint32_t)reused;
	r->admit_seq = ++s->admit_counter;
	return 0;
}

/* Admits queued requests while their predicted KV bytes fit. Under s->mu. */
static void admit_queued(struct srv *s, bool hold)
{
	size_t budget = s->p.ep.kv_mem;
	double committed = 0;

	for (struct srv_req *r = s->live; r; r = r->qnext)
		committed += srv_pred_bytes(&s->pred, pred_final(s, r));
	while (s->q_head && s->n_live < (uint32_t)s->p.max_seqs && !(hold && s->n_live > 0)) {
		struct srv_req *r = s->q_head;
		double need = srv_pred_bytes(&s->pred, pred_final(s, r));

		if (budget && s->n_live > 0 && committed + need > ADMIT_FRAC * (double)budget)
			break;
		queue_remove(s, r);
		if (admit(s, r)) {
			release_seq(r);
			fail(s, r, 503, "out_of_memory", "out of memory starting the request; retry later");
			continue;
		}
		live_append(s, r);
		committed += need;
		srv_cache_event(&s->cache, srv_now() - s->t_start, "admit", "%s admitted: %zu prompt tokens, %u from the "
				"prefix cache", r->id, r->gen.n_prompt, r->reused);
	}
}

/* Whether r is to be dropped now: cancelled, or past its deadline (then
 * counted as a timeout). */
static bool reap_due(struct srv *s, const struct srv_req *r, double now)
{
	if (!r->cancelled && !(r->deadline && now > r->deadline))
		return false;
	if (!r->cancelled)
		atomic_fetch_add(&s->st.timeouts, 1);
	return true;
}

/* Drops cancelled and timed-out requests. Under s->mu. Returns how many live
 * ones left. */
static int reap(struct srv *s, double now)
{
	struct srv_req *r, *next;
	int n = 0;

	for (r = s->q_head; r; r = next) {
		next = r->qnext;
		if (reap_due(s, r, now)) {
			queue_remove(s, r);
			fail(s, r, 504, "timeout", "the request timed out waiting in the queue");
		}
	}
	for (r = s->live; r; r = next) {
		next = r->qnext;
		if (reap_due(s, r, now)) {
			live_remove(s, r);
			fail(s, r, 504, "timeout", "the request timed out");
			n++;
		}
	}
	return n;
}

/* Frees r's sequence and puts it back at the head of the queue, or fails it
 * when it was preempted too often. Under s->mu. */
static void preempt(struct srv *s, struct srv_req *r)
{
	live_remove(s, r);
	release_seq(r);
	atomic_fetch_add(&s->st.preemptions, 1);
	srv_cache_event(&s->cache, srv_now() - s->t_start, "preempt", "%s preempted to make room (%d time%s)", r->id,
			r->preempted + 1, r->preempted ? "s" : "");
	if (++r->preempted > s->p.max_preempt) {
		fail(s, r, 503, "kv_budget_exhausted",
		     "the KV memory budget is exhausted by other requests; retry later");
		return;
	}
	queue_push_front(s, r);
}

/* ---- the loop ----------------------------------------------------------------------- */

struct sched_ctx {
	struct tkv_batch_item *items;
	struct srv_req **ireq;      /* request of each item */
	size_t cap;
	char *piece;                /* detokenizer output, tkv_detok_min_cap bytes */
	size_t piece_cap;
	uint64_t tokens_this_step;
};

/* Ends r's text: an incomplete UTF-8 character left in the detokenizer comes
 * out as U+FFFD. Returns f. */
static enum srv_finish flush(struct sched_ctx *c, struct srv_req *r, enum srv_finish f)
{
	int n = tkv_detok_flush(&r->ts, c->piece, c->piece_cap);

	if (n > 0 && srv_buf_add(&r->raw, c->piece, (size_t)n))
		return SRV_FIN_ERROR;
	return f;
}

/* Samples r's next token from its logits and appends its text. Returns the
 * finish reason when r is done. Scheduler-owned state only. */
static enum srv_finish sample(struct srv *s, struct sched_ctx *c, struct srv_req *r, size_t *safe)
{
	struct srv_gen *g = &r->gen;
	float *lg = r->logits;
	int32_t id;
	int n;

	if (r->counts) {
		for (uint32_t i = 0; i < s->info.n_vocab; i++)
			if (r->counts[i])
				lg[i] -= g->freq_penalty * (float)r->counts[i] + g->presence_penalty;
	}
	id = tkv_sampler_sample(r->smp, lg);
	if (tkv_vocab_is_eog(s->vocab, id) && !g->ignore_eos)
		return flush(c, r, SRV_FIN_STOP);
	tkv_sampler_accept(r->smp, id);
	r->ctx[g->n_prompt + r->n_gen++] = id;
	if (r->counts)
		r->counts[id]++;
	c->tokens_this_step++;
	n = tkv_detok_push(s->vocab, &r->ts, id, c->piece, c->piece_cap);
	if (n > 0 && srv_buf_add(&r->raw, c->piece, (size_t)n))
		return SRV_FIN_ERROR;
	if (stop_scan(r, safe))
		return SRV_FIN_STOP;
	if (r->n_gen >= g->max_tokens || g->n_prompt + r->n_gen >= s->n_ctx)
		return flush(c, r, SRV_FIN_LENGTH);
	return SRV_FIN_NONE;
}

static int ctx_reserve(struct srv *s, struct sched_ctx *c, size_t n)
{
	if (n <= c->cap)
		return 0;
	tkv_free(s->alloc, c->items);
	tkv_free(s->alloc, c->ireq);
	c->items = tkv_malloc(s->alloc, n * sizeof *c->items);
	c->ireq = tkv_malloc(s->alloc, n * sizeof *c->ireq);
	c->cap = c->items && c->ireq ? n : 0;
	return c->cap ? 0 : -1;
}

/* Snapshot of the engine's figures for /metrics and the predictor. */
static void snapshot(struct srv *s, double now, bool force)
{
	struct tkv_kv_stats ks;

	if (!force && now - s->st.kv_time < STATS_PERIOD)
		return;
	tkv_engine_kv_stats(s->engine, &ks);
	srv_pred_observe(&s->pred, &ks);
	pthread_mutex_lock(&s->mu);
	s->st.kv = ks;
	s->st.kv_time = now;
	pthread_mutex_unlock(&s->mu);
	srv_cache_snapshot(s, &ks, now);
}

/* The batch of a step, under s->mu: every decoding request's next token
 * first (so their rows share the first forward pass), then prompt chunks up
 * to the batch's rows. Returns the items; 0 when none, or when there was no
 * memory to batch the live requests (they fail rather than spin). */
static size_t gather_batch(struct srv *s, struct sched_ctx *c, bool *hold)
{
	uint32_t n_batch = s->p.ep.n_batch ? s->p.ep.n_batch : 64, budget, n_dec = 0;
	size_t ni = 0;
	struct srv_req *r;

	if (ctx_reserve(s, c, s->n_live ? s->n_live : 1)) {
		while (s->live) {
			r = s->live;
			live_remove(s, r);
			fail(s, r, 503, "out_of_memory", "out of memory while generating; retry later");
		}
		*hold = false;
		s->st.n_live = 0;
		return 0;
	}
	for (r = s->live; r; r = r->qnext)
		if ((uint32_t)r->gen.n_prompt + r->n_gen - r->n_fed == 1 && r->n_fed >= r->gen.n_prompt) {
			c->items[ni] = (struct tkv_batch_item){ r->seq, r->ctx + r->n_fed, 1, r->logits, 0 };
			c->ireq[ni++] = r;
			n_dec++;
		}
	budget = n_batch > n_dec + n_batch / 4 ? n_batch - n_dec : n_batch / 4 + 1;
	for (r = s->live; r && budget; r = r->qnext) {
		uint32_t total = (uint32_t)r->gen.n_prompt + r->n_gen, left = total - r->n_fed, n;

		if (left == 1 && r->n_fed >= r->gen.n_prompt)
			continue;
		n = left < budget ? left : budget;
		budget -= n;
		c->items[ni] = (struct tkv_batch_item){ r->seq, r->ctx + r->n_fed, n,
							r->n_fed + n == total ? r->logits : NULL, 0 };
		c->ireq[ni++] = r;
	}
	return ni;
}

/* One item's result, under s->mu (released while sampling): tokens fed,
 * the prompt published, a token sampled and published, or the request
 * ended. Returns true when the engine refused it for lack of KV memory. */
static bool item_done(struct srv *s, struct sched_ctx *c, size_t i, double now, bool *hold)
{
	struct tkv_batch_item *it = &c->items[i];
	struct srv_req *r = c->ireq[i];
	enum srv_finish f;
	size_t safe;

	if (it->status == TKV_ERR_KV_FULL) {
		r->n_fed = tkv_seq_n_past(r->seq); /* a multi-pass prefill may have got partway */
		return true;
	}
	if (it->status) {
		live_remove(s, r);
		if (it->status == TKV_ERR_CTX_FULL && r->n_gen)
			end(s, r, flush(c, r, SRV_FIN_LENGTH));
		else if (it->status == TKV_ERR_NOMEM)
			fail(s, r, 503, "out_of_memory", "out of memory while generating; retry later");
		else
			fail(s, r, 500, "internal_error", "the engine failed while generating");
		*hold = false;
		return false;
	}
	r->n_fed += (uint32_t)it->n;
	if (!r->prefix_published && r->n_fed >= r->gen.n_prompt) {
		/* offer the prompt's pages to later requests (a no-op without --prefix-cache) */
		tkv_seq_publish_prefix(r->seq, r->ctx, r->gen.n_prompt, NULL);
		if (s->kvs)
			srv_kvs_save(s->kvs, r->seq, r->ctx, r->gen.n_prompt);
		r->prefix_published = true;
	}
	if (!it->logits)
		return false;
	pthread_mutex_unlock(&s->mu);
	safe = r->raw_pub;
	f = sample(s, c, r, &safe);
	pthread_mutex_lock(&s->mu);
	if (!r->got_first) {
		r->got_first = true;
		s->st.ttft_sum += now - r->t_enqueue;
		s->st.ttft_n++;
	}
	if (f == SRV_FIN_NONE) {
		publish(r, safe);
		return false;
	}
	live_remove(s, r);
	end(s, r, f);
	*hold = false;
	return false;
}

/* After a request the engine refused for lack of KV memory, under s->mu:
 * preempt the request preempted least often, and among those the one with
 * the largest predicted remaining demand (then the newest); alone, it ends
 * (its text so far) or fails. */
static void make_room(struct srv *s, struct sched_ctx *c, bool *hold)
{
	struct srv_req *victim = NULL, *r;
	double worst = -1;

	*hold = true;
	for (r = s->live; r; r = r->qnext) {
		double rem = srv_pred_bytes(&s->pred, pred_final(s, r)) - srv_pred_bytes(&s->pred, r->n_fed);

		if (!victim || r->preempted < victim->preempted ||
		    (r->preempted == victim->preempted &&
		     (rem > worst || (rem == worst && r->admit_seq > victim->admit_seq)))) {
			worst = rem;
			victim = r;
		}
	}
	if (s->n_live == 1) {
		/* alone and still refused: the budget cannot hold this request */
		live_remove(s, victim);
		if (victim->n_gen)
			end(s, victim, flush(c, victim, SRV_FIN_LENGTH));
		else
			fail(s, victim, 503, "kv_budget_exhausted", "the prompt needs more KV memory than the server's budget");
		*hold = false;
	} else if (victim) {
		preempt(s, victim);
	}
}

/* One iteration after admission: batch, step, sample, publish. */
static void step(struct srv *s, struct sched_ctx *c, bool *hold)
{
	struct tkv_error err = { 0 };
	bool kv_full = false;
	size_t ni;
	double now;

	pthread_mutex_lock(&s->mu);
	ni = gather_batch(s, c, hold);
	pthread_mutex_unlock(&s->mu);
	if (ni == 0)
		return;

	tkv_engine_step(s->engine, c->items, ni, &err);
	now = srv_now();
	c->tokens_this_step = 0;
	atomic_fetch_add(&s->st.steps, 1);

	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < ni; i++)
		kv_full |= item_done(s, c, i, now, hold);
	atomic_fetch_add(&s->st.gen_tokens, c->tokens_this_step);
	s->st.rate_tokens += c->tokens_this_step;
	s->st.last_step = now;
	if (now - s->st.rate_t0 >= 1.0) {
		s->st.tok_rate = s->st.rate_t0 > 0 ? (double)s->st.rate_tokens / (now - s->st.rate_t0) : 0;
		s->st.rate_t0 = now;
		s->st.rate_tokens = 0;
	}
	if (kv_full)
		make_room(s, c, hold);
	s->st.n_live = s->n_live;
	s->st.n_queued = s->n_queued;
	pthread_mutex_unlock(&s->mu);
	snapshot(s, now, false);
}

static void *sched_main(void *arg)
{
	struct srv *s = arg;
	struct sched_ctx *c = s->sched;
	bool hold = false;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		bool idle_snapshot = false;
		double now;

		while (!s->stopping && !s->q_head && !s->live) {
			s->st.n_live = 0;
			s->st.n_queued = 0;
			if (!idle_snapshot) {
				/* the figures of the last step, for /metrics while idle */
				pthread_mutex_unlock(&s->mu);
				snapshot(s, srv_now(), true);
				pthread_mutex_lock(&s->mu);
				idle_snapshot = true;
				continue;
			}
			pthread_cond_wait(&s->sched_cv, &s->mu);
		}
		if (s->stopping)
			break;
		now = srv_now();
		if (reap(s, now))
			hold = false;
		admit_queued(s, hold);
		s->st.n_live = s->n_live;
		s->st.n_queued = s->n_queued;
		pthread_mutex_unlock(&s->mu);
		step(s, c, &hold);
		pthread_mutex_lock(&s->mu);
	}
	/* shutting down (or no memory for the loop): fail what is left */
	while (s->q_head) {
		struct srv_req *r = s->q_head;

		queue_remove(s, r);
		fail(s, r, 503, "shutting_down", "the server is shutting down");
	}
	while (s->live) {
		struct srv_req *r = s->live;

		live_remove(s, r);
		fail(s, r, 503, "shutting_down", "the server is shutting down");
	}
	s->st.n_live = 0;
	s->st.n_queued = 0;
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void sched_ctx_free(struct srv *s, struct sched_ctx *c)
{
	if (!c)
		return;
	tkv_free(s->alloc, c->items);
	tkv_free(s->alloc, c->ireq);
	tkv_free(s->alloc, c->piece);
	tkv_free(s->alloc, c);
}

int srv_sched_start(struct srv *s)
{
	struct sched_ctx *c = tkv_calloc(s->alloc, 1, sizeof *c);

	if (!c)
		return -1;
	c->piece_cap = tkv_detok_min_cap(s->vocab);
	if (c->piece_cap < 256)
		c->piece_cap = 256;
	s->sched = c;
	if (!(c->piece = tkv_malloc(s->alloc, c->piece_cap)) ||
	    pthread_create(&s->sched_thread, NULL, sched_main, s)) {
		sched_ctx_free(s, c);
		s->sched = NULL;
		return -1;
	}
	s->sched_started = true;
	return 0;
}

void srv_sched_stop(struct srv *s)
{
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_cond_broadcast(&s->sched_cv);
	pthread_mutex_unlock(&s->mu);
	if (s->sched_started)
		pthread_join(s->sched_thread, NULL);
	s->sched_started = false;
	sched_ctx_free(s, s->sched);
	s->sched = NULL;
}
