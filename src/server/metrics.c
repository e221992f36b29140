/* metrics.c - GET /metrics in the Prometheus text format (version 0.0.4).
 *
 * Counters come from atomics; the KV figures from the scheduler's latest
 * snapshot of tkv_engine_kv_stats (at most STATS_PERIOD old while it runs),
 * since the engine itself is not safe to read from an HTTP thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_impl.h"

const int srv_http_codes[SRV_N_CODES] = { 200, 400, 401, 404, 405, 413, 429, 500, 503, 504, 0 };

int srv_code_slot(int code)
{
	for (int i = 0; i < SRV_N_CODES - 1; i++)
		if (srv_http_codes[i] == code)
			return i;
	return SRV_N_CODES - 1;
}

static void metric(struct srv_buf *b, const char *name, const char *type, const char *help)
{
	srv_buf_printf(b, "# HELP tierkv_%s %s\n# TYPE tierkv_%s %s\n", name, help, name, type);
}

static void val(struct srv_buf *b, const char *name, const char *labels, double v)
{
	srv_buf_printf(b, "tierkv_%s%s %.17g\n", name, labels ? labels : "", v);
}

static void counter(struct srv_buf *b, const char *name, const char *help, unsigned long long v)
{
	metric(b, name, "counter", help);
	srv_buf_printf(b, "tierkv_%s %llu\n", name, v);
}

static void gauge(struct srv_buf *b, const char *name, const char *help, double v)
{
	metric(b, name, "gauge", help);
	val(b, name, NULL, v);
}

char *srv_metrics_text(struct srv *s)
{
	struct srv_stats *st = &s->st;
	struct srv_buf b = { 0 };
	char *out;
	struct tkv_kv_stats kv;
	double ttft_sum, rate, mae, now = srv_now();
	uint64_t ttft_n, pred_n;
	uint32_t n_live, n_queued;
	static const char *const tier[3] = { "hot", "warm", "cold" };

	pthread_mutex_lock(&s->mu);
	kv = st->kv;
	ttft_sum = st->ttft_sum;
	ttft_n = st->ttft_n;
	rate = now - st->last_step > 2.0 ? 0.0 : st->tok_rate;
	mae = st->pred_mae;
	pred_n = st->pred_n;
	n_live = st->n_live;
	n_queued = s->n_queued;
	pthread_mutex_unlock(&s->mu);

	metric(&b, "http_responses_total", "counter", "HTTP responses by status code.");
	for (int i = 0; i < SRV_N_CODES; i++) {
		char lab[32];

		if (srv_http_codes[i])
			snprintf(lab, sizeof lab, "{code=\"%d\"}", srv_http_codes[i]);
		else
			snprintf(lab, sizeof lab, "{code=\"other\"}");
		val(&b, "http_responses_total", lab, (double)atomic_load(&st->http[i]));
	}
	counter(&b, "requests_total", "Generation requests accepted into the queue.", atomic_load(&st->requests));
	metric(&b, "requests_finished_total", "counter", "Generation requests by outcome.");
	val(&b, "requests_finished_total", "{reason=\"stop\"}", (double)atomic_load(&st->fin_stop));
	val(&b, "requests_finished_total", "{reason=\"length\"}", (double)atomic_load(&st->fin_length));
	val(&b, "requests_finished_total", "{reason=\"cancelled\"}", (double)atomic_load(&st->fin_cancel));
	val(&b, "requests_finished_total", "{reason=\"error\"}", (double)atomic_load(&st->fin_error));
	counter(&b, "requests_rejected_queue_full_total", "Requests refused because the queue was full.",
		atomic_load(&st->rejected_queue_full));
	counter(&b, "requests_timed_out_total", "Requests that passed --timeout.", atomic_load(&st->timeouts));
	counter(&b, "prompt_tokens_total", "Prompt tokens of accepted requests.", atomic_load(&st->prompt_tokens));
	counter(&b, "generated_tokens_total", "Tokens generated.", atomic_load(&st->gen_tokens));
	gauge(&b, "tokens_per_second", "Generated tokens per second over the last second of work.", rate);
	gauge(&b, "queue_length", "Requests waiting for admission.", n_queued);
	gauge(&b, "live_sequences", "Sequences admitted and generating.", n_live);
	gauge(&b, "max_sequences", "The --max-seqs limit.", s->p.max_seqs);
	counter(&b, "batch_steps_total", "Continuous-batching steps (tkv_engine_step calls).", atomic_load(&st->steps));
	counter(&b, "preemptions_total", "Sequences freed and requeued to make room in the KV budget.",
		atomic_load(&st->preemptions));
	metric(&b, "time_to_first_token_seconds", "summary", "Seconds from arrival to the first generated token.");
	val(&b, "time_to_first_token_seconds_sum", NULL, ttft_sum);
	val(&b, "time_to_first_token_seconds_count", NULL, (double)ttft_n);

	gauge(&b, "kv_budget_bytes", "KV memory budget (--kv-mem); 0 = unlimited.", (double)s->p.ep.kv_mem);
	gauge(&b, "kv_allocated_bytes", "KV pages allocated, metadata included.", (double)kv.allocated);
	gauge(&b, "kv_peak_allocated_bytes", "High-water mark of KV pages allocated.", (double)kv.peak_allocated);
	gauge(&b, "kv_used_bytes", "KV bytes of filled slots.", (double)kv.used);
	metric(&b, "kv_tier_bytes", "gauge", "K+V bytes per tier (quantization parameters included).");
	for (int t = 0; t < 3; t++) {
		char lab[24];

		snprintf(lab, sizeof lab, "{tier=\"%s\"}", tier[t]);
		val(&b, "kv_tier_bytes", lab, (double)kv.tier_bytes[t]);
	}
	metric(&b, "kv_tier_tokens", "gauge", "Token slots per tier, summed over layers and KV heads.");
	for (int t = 0; t < 3; t++) {
		char lab[24];

		snprintf(lab, sizeof lab, "{tier=\"%s\"}", tier[t]);
		val(&b, "kv_tier_tokens", lab, (double)kv.tier_tokens[t]);
	}
	gauge(&b, "kv_cached_tokens", "Tokens cached, summed over live sequences.", (double)kv.n_tokens);
	counter(&b, "kv_evicted_total", "Token slots evicted by the cache policy.", (unsigned long long)kv.evicted);
	counter(&b, "kv_demoted_total", "Token slots moved to a lower tier.", (unsigned long long)kv.demoted);
	counter(&b, "kv_merged_total", "Evicted slots merged into kept ones.", (unsigned long long)kv.merged);
	counter(&b, "kv_governor_runs_total", "Times the memory governor lowered the caps.", (unsigned long long)kv.gov_runs);
	counter(&b, "kv_governor_raises_total", "Caps the memory governor raised again.", (unsigned long long)kv.gov_raises);
	counter(&b, "prefix_lookups_total", "Sequences that looked for a shared prompt prefix.",
		(unsigned long long)kv.prefix_lookups);
	counter(&b, "prefix_hits_total", "Sequences that reused a shared prompt prefix.",
		(unsigned long long)kv.prefix_hits);
	counter(&b, "prefix_tokens_total", "Prompt tokens reused from shared prefixes.",
		(unsigned long long)kv.prefix_tokens);
	gauge(&b, "predictor_mae_tokens", "Mean absolute error of the predicted final length (tokens).", mae);
	counter(&b, "predictor_samples_total", "Finished requests the predictor was scored on.",
		(unsigned long long)pred_n);
	if (s->kvs)
		srv_kvs_metrics(s->kvs, &b);
	out = b.p ? strdup(b.p) : NULL;   /* reply() hands it to libmicrohttpd, which calls free() */
	srv_buf_free(&b);
	return out;
}
