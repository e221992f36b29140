/* test_kv_plan.c - layer plans: parsing and printing, the AUTO choice from
 * entropy, the budget split by layer weights, and the engine on stories260K
 * (a fixed plan's page sizes on the pages it allocates, an auto plan chosen
 * after TKV_PLAN_AUTO_TOKENS tokens, the wrong layer count refused). Head
 * plans: parsing, the split by head weights, the engine's checks, and the
 * AUTO probe on lc-8k (it finds the heads that copy). */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "kv/plan.h"
#include "kv/policy.h"
#include "kv/pool.h"
#include "kv/seq.h"
#include "tierkv.h"

static void test_parse(void **state)
{
	struct tkv_kv_layer_plan p;
	struct tkv_error err = { 0 };
	char buf[256];
	static const char *const bad[] = { "", "0", "4097", "16,", ",16", "16,,8", "16:", "16:0", "16:-1", "16:17",
					   "16:x", "x", "16;8", "16 8", "-4", "16:1:2", "auto,16" };

	(void)state;
	assert_int_equal(tkv_kv_layer_plan_parse(&p, "uniform", &err), TKV_OK);
	assert_int_equal(p.mode, TKV_PLAN_UNIFORM);
	assert_int_equal(tkv_kv_layer_plan_parse(&p, "auto", &err), TKV_OK);
	assert_int_equal(p.mode, TKV_PLAN_AUTO);
	assert_int_equal(tkv_kv_layer_plan_parse(&p, "32:0.5,16,8:2.5", &err), TKV_OK);
	assert_int_equal(p.mode, TKV_PLAN_FIXED);
	assert_int_equal(p.n_layer, 3);
	assert_int_equal(p.page_tokens[0], 32);
	assert_int_equal(p.page_tokens[1], 16);
	assert_int_equal(p.page_tokens[2], 8);
	assert_true(p.weight[0] == 0.5f && p.weight[1] == 1.0f && p.weight[2] == 2.5f);
	/* printed with weights normalized to mean 1 */
	tkv_kv_layer_plan_str(&p, buf, sizeof buf);
	assert_string_equal(buf, "32:0.38,16:0.75,8:1.88");
	assert_int_equal(tkv_kv_layer_plan_parse(&p, "4096", &err), TKV_OK);
	assert_int_equal(p.n_layer, 1);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err.msg[0] = 0;
		if (tkv_kv_layer_plan_parse(&p, bad[i], &err) != TKV_ERR_ARG)
			fail_msg("'%s' accepted", bad[i]);
		assert_true(strlen(err.msg) > 10);
	}
	/* more layers than a plan holds */
	{
		char *big = malloc(3 * (TKV_MAX_PLAN_LAYERS + 1) + 1);

		assert_non_null(big);
		big[0] = 0;
		for (int i = 0; i <= TKV_MAX_PLAN_LAYERS; i++)
			strcat(big, i ? ",16" : "16");
		assert_int_equal(tkv_kv_layer_plan_parse(&p, big, &err), TKV_ERR_ARG);
		free(big);
	}
}

/* AUTO: wider attention (higher entropy) gets coarser pages and a larger
 * share; equal entropies give the uniform plan; weights have mean 1 and
 * stay within [1/4, 4] of the mean before normalization. */
static void test_auto(void **state)
{
	struct tkv_alloc a = { 0 };
	struct kv_pool_params pp = kv_pool_default_params();
	struct kv_pool *pool;
	struct kv_seq *s;
	struct tkv_kv_layer_plan p;
	const uint32_t group = 2;
	const double ent[5] = { 1.0, 0.3, 1.3, 1.5, 2.5 }; /* nats per query head */

	(void)state;
	assert_int_equal(kv_pool_init(&pool, &pp, &a, NULL), TKV_OK);
	assert_int_equal(kv_seq_init(&s, pool, 5, 2, 8, &a, NULL), TKV_OK);
	kv_plan_auto(s, group, 16, &p);
	for (uint32_t l = 0; l < 5; l++) {
		assert_int_equal(p.page_tokens[l], 16);
		assert_true(fabsf(p.weight[l] - 1.0f) < 1e-6f);
	}
	for (uint32_t l = 0; l < 5; l++)
		for (uint32_t h = 0; h < 2; h++) {
			struct kv_stream *st = kv_seq_stream(s, l, h);

			st->ent_n = 10;
			st->ent_sum = ent[l] * (double)group * 10.0 * (h ? 1.1 : 0.9);
		}
	kv_plan_auto(s, group, 16, &p);
	{
		double wsum = 0.0;

		for (uint32_t l = 0; l < 5; l++) {
			assert_true(fabsf(p.entropy[l] - (float)ent[l]) < 1e-5f);
			wsum += p.weight[l];
		}
		assert_true(fabs(wsum - 5.0) < 1e-4);
	}
	/* geometric mean of the spans exp(1.32): layer 1 (0.3) narrow, layer 4 (2.5) wide */
	assert_int_equal(p.page_tokens[1], 8);
	assert_int_equal(p.page_tokens[4], 32);
	assert_int_equal(p.page_tokens[0], 16);
	assert_int_equal(p.page_tokens[2], 16);
	assert_int_equal(p.page_tokens[3], 16);
	for (uint32_t l = 0; l + 1 < 5; l++)
		if (ent[l] < ent[l + 1])
			assert_true(p.weight[l] <= p.weight[l + 1]);
	/* weights within the clamp */
	assert_true(p.weight[4] / p.weight[1] <= 16.0f + 1e-4f);
	/* one layer far wider than the rest: weights clamped to 1/4 and 4 of
	 * the mean span, then normalized */
	for (uint32_t l = 0; l < 5; l++)
		for (uint32_t h = 0; h < 2; h++)
			kv_seq_stream(s, l, h)->ent_sum = (l == 4 ? 5.0 : 0.0) * (double)group * 10.0;
	kv_plan_auto(s, group, 16, &p);
	assert_true(fabsf(p.weight[4] / p.weight[0] - 16.0f) < 1e-3f);
	assert_true(fabsf(p.weight[0] * 4 + p.weight[4] - 5.0f) < 1e-4f);
	kv_plan_auto(s, group, 16, &p);
	/* applied: streams take the page sizes, warm/cold pages 4x */
	kv_plan_apply(s, &p);
	assert_true(s->plan_set);
	for (uint32_t l = 0; l < 5; l++)
		for (uint32_t h = 0; h < 2; h++) {
			assert_int_equal(kv_seq_stream(s, l, h)->page_tokens, p.page_tokens[l]);
			assert_int_equal(kv_seq_stream(s, l, h)->low_cap, 4 * p.page_tokens[l]);
		}
	kv_seq_free(s);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

/* The budget split under a plan: each layer's streams together get the
 * layer's weight share of the sequence's bytes. */
static void test_split(void **state)
{
	struct tkv_alloc a = { 0 };
	struct kv_pool_params pp = kv_pool_default_params();
	struct tkv_kv_policy_params kp = tkv_kv_policy_default_params();
	struct kv_pool *pool;
	struct kv_seq *s;
	struct kv_cfg c;
	const float w[3] = { 0.5f, 1.0f, 2.5f };
	const size_t bytes = 300000;

	(void)state;
	assert_int_equal(kv_pool_init(&pool, &pp, &a, NULL), TKV_OK);
	assert_int_equal(kv_seq_init(&s, pool, 3, 2, 8, &a, NULL), TKV_OK);
	assert_int_equal(kv_cfg_init(&c, &kp, 8, 1, KV_FMT_F16, 16, NULL), TKV_OK);
	for (uint32_t l = 0; l < 3; l++)
		kv_seq_set_layer(s, l, 16, w[l]);
	kv_policy_split_budget(&c, s, bytes);
	for (uint32_t l = 0; l < 3; l++) {
		size_t got = kv_seq_stream(s, l, 0)->budget + kv_seq_stream(s, l, 1)->budget;
		double want = (double)bytes * w[l] / 4.0;

		assert_true(fabs((double)got - want) <= 2.0);
	}
	kv_seq_free(s);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

static void test_head_parse(void **state)
{
	static struct tkv_kv_head_plan p;
	struct tkv_error err = { 0 };
	static const char *const bad[] = { "", "auto:", "auto:2", "auto:-0.1", "auto:x", "autox", "auto:0.5,1", "0",
					   "-1", "1025", "1,", ",1", "1,,2", "x", "1 2", "1;2", "nan" };

	(void)state;
	assert_int_equal(tkv_kv_head_plan_parse(&p, "uniform", &err), TKV_OK);
	assert_int_equal(p.mode, TKV_HEADS_UNIFORM);
	assert_int_equal(tkv_kv_head_plan_parse(&p, "auto", &err), TKV_OK);
	assert_int_equal(p.mode, TKV_HEADS_AUTO);
	assert_true(p.mix == TKV_HEADS_MIX_POLICY);
	assert_int_equal(tkv_kv_head_plan_parse(&p, "auto:0.25", &err), TKV_OK);
	assert_int_equal(p.mode, TKV_HEADS_AUTO);
	assert_true(p.mix == 0.25f);
	assert_int_equal(tkv_kv_head_plan_parse(&p, "auto:0", &err), TKV_OK);
	assert_true(p.mix == 0.0f);
	assert_int_equal(tkv_kv_head_plan_parse(&p, "1,2.5,0.25,1024", &err), TKV_OK);
	assert_int_equal(p.mode, TKV_HEADS_FIXED);
	assert_int_equal(p.n, 4);
	assert_true(p.weight[0] == 1.0f && p.weight[1] == 2.5f && p.weight[2] == 0.25f && p.weight[3] == 1024.0f);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		err.msg[0] = 0;
		if (tkv_kv_head_plan_parse(&p, bad[i], &err) != TKV_ERR_ARG)
			fail_msg("'%s' was accepted", bad[i]);
		assert_true(strstr(err.msg, "head plan") != NULL);
	}
}

/* Head weights: each stream keeps the floor its protected slots need and
 * takes the rest by weight, but no more than it needs to keep every token of
 * the sequence at the policy's ideal mix of tiers (what it cannot use goes to
 * the others by weight; when all fit so, the rest evenly); without weights
 * the split is even, to the byte. */
static void test_head_split(void **state)
{
	struct tkv_alloc a = { 0 };
	struct kv_pool_params pp = kv_pool_default_params();
	struct tkv_kv_policy_params kp = tkv_kv_policy_default_params();
	struct kv_pool *pool;
	struct kv_seq *s;
	struct kv_cfg c;
	const float w[6] = { 1.0f, 3.0f, 1.0f, 1.0f, 0.5f, 0.5f };
	const size_t bytes = 600000;
	/* the floor: sinks and window at f16; a stream's need: every token at
	 * the cheapest tier (q4, 64-slot pages) times 1.5, and a sixteenth of
	 * the budget that makes for maintenance's slack */
	const double fl = (kp.n_sink + kp.n_window) * (double)kv_page_kv_bytes(16, 8, KV_FMT_F16) / 16;
	const double per = 1.5 * (double)kv_page_kv_bytes(64, 8, KV_FMT_Q4) / 64 * 16.0 / 15.0;
	size_t sum, got[6];

	(void)state;
	assert_int_equal(kv_pool_init(&pool, &pp, &a, NULL), TKV_OK);
	assert_int_equal(kv_seq_init(&s, pool, 3, 2, 8, &a, NULL), TKV_OK);
	assert_int_equal(kv_cfg_init(&c, &kp, 8, 1, KV_FMT_F16, 16, NULL), TKV_OK);
	kv_seq_set_head_weights(s, w);

	/* a long sequence: every share is below the need, so by weight */
	s->n_pos = 1 << 20;
	kv_policy_split_budget(&c, s, bytes);
	sum = 0;
	for (size_t i = 0; i < 6; i++) {
		double want = fl + ((double)bytes - 6 * fl) * w[i] / 7.0;

		sum += got[i] = s->streams[i].budget;
		assert_true(fabs((double)got[i] - want) <= 2.0);
	}
	assert_true(sum <= bytes && sum + 6 >= bytes);

	/* a sequence whose every token fits in the heaviest stream's share:
	 * that stream takes its need, the others the rest */
	s->n_pos = (int32_t)(kp.n_sink + kp.n_window) + (int32_t)(200000 / per);
	kv_policy_split_budget(&c, s, bytes);
	{
		double need = (double)(s->n_pos - (int32_t)(kp.n_sink + kp.n_window)) * per;

		assert_true(fabs((double)s->streams[1].budget - (fl + need)) <= 2.0);
		sum = s->streams[1].budget;
		for (size_t i = 0; i < 6; i++) {
			double want = fl + ((double)bytes - 6 * fl - need) * w[i] / 4.0;

			if (i == 1)
				continue;
			sum += s->streams[i].budget;
			assert_true(fabs((double)s->streams[i].budget - want) <= 2.0);
			assert_true(s->streams[i].budget > got[i]);
		}
		assert_true(sum <= bytes && sum + 6 >= bytes);
	}

	/* a short one: every stream keeps all it needs, the rest evenly */
	s->n_pos = 100;
	kv_policy_split_budget(&c, s, bytes);
	sum = 0;
	for (size_t i = 0; i < 6; i++) {
		sum += s->streams[i].budget;
		assert_true(s->streams[i].budget + 1 >= s->streams[0].budget &&
			    s->streams[i].budget <= s->streams[0].budget + 1);
	}
	assert_true(sum <= bytes && sum + 6 >= bytes);

	/* forks keep the weights */
	{
		struct kv_seq *f;

		assert_int_equal(kv_seq_fork(&f, s, NULL), TKV_OK);
		assert_true(f->heads_set && f->streams[1].weight == 3.0f);
		kv_seq_free(f);
	}
	kv_seq_set_head_weights(s, NULL);
	kv_policy_split_budget(&c, s, bytes);
	for (size_t i = 0; i < 6; i++)
		assert_int_equal(s->streams[i].budget, bytes / 6);
	kv_seq_free(s);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

static struct tkv_model *load_named(const char *name)
{
	const char *path = tu_model_path(name);
	struct tkv_model_params mp = tkv_model_default_params();
	struct tkv_model *m = NULL;
	struct tkv_error err = { 0 };

	if (!path)
		return NULL;
	if (tkv_model_load(&m, path, &mp, &err))
		fail_msg("load %s: %s", name, err.msg);
	return m;
}

/* 400 tokens under a cap of 64 tokens' f16 K+V on lc-8k: the sequence keeps
 * to it, and the copying head `top` gets more than the others and keeps
 * every token (see test_head_engine). */
static void budget_split(struct tkv_engine *e, struct tkv_model *m, uint32_t n, uint32_t top, bool tiered)
{
	size_t cap = 64 * tkv_model_kv_bytes_per_token(m), held = 0, sum = 0;
	struct tkv_error err = { 0 };
	struct tkv_seq *s = NULL;
	struct kv_seq *kv;

	assert_int_equal(tkv_seq_init(&s, e, &err), TKV_OK);
	tkv_seq_set_budget(s, cap);
	for (uint32_t i = 0; i < 400; i++) {
		int32_t id = (int32_t)(300 + (i * 7919) % 7000);

		if (tkv_seq_decode(s, &id, 1, NULL, 0, &err))
			fail_msg("decode: %s", err.msg);
	}
	kv = tkv_seq_kv_cache(s);
	for (uint32_t i = 0; i < n; i++) {
		held += kv->streams[i].kv_bytes;
		sum += kv->streams[i].budget;
	}
	assert_true(held <= cap);
	if (tiered) {
		assert_true(kv->streams[top].budget > 2 * kv->streams[0].budget);
		assert_true(kv->streams[top].n_tokens > 2 * kv->streams[0].n_tokens);
	} else {
		assert_true(kv->streams[top].budget * n >= sum);
	}
	/* the copying head keeps every token, so the needles too */
	assert_int_equal(kv->streams[top].n_tokens, 400);
	tkv_seq_free(s);
}

/* An auto plan's weights: mix + (1 - mix) x n x score / sum of scores. */
static void check_mix(const struct tkv_kv_head_plan *hp, uint32_t n)
{
	double ssum = 0.0;

	for (uint32_t i = 0; i < n; i++)
		ssum += hp->score[i] > 0 ? hp->score[i] : 0;
	for (uint32_t i = 0; i < n; i++)
		assert_true(fabs(hp->weight[i] -
				 (hp->mix + (1 - hp->mix) * n * (hp->score[i] > 0 ? hp->score[i] : 0) / ssum)) < 1e-4);
}

/* The engine's head plans: a wrong weight count is refused; fixed weights
 * reach every sequence; AUTO on lc-8k finds its copying heads (the ones
 * whose attention lands on a needle at the answer: layer 4's second KV head
 * and layer 7's first, by far), the same on every start, with weights of
 * mean 1 that follow the scores, and a sequence under a budget keeps to it. */
static void test_head_engine(void **state)
{
	struct tkv_model *m = load_named("lc-8k.gguf");
	struct tkv_model_info info;
	struct tkv_engine_params ep = tkv_engine_default_params();
	struct tkv_engine *e = NULL;
	struct tkv_seq *s = NULL;
	struct tkv_error err = { 0 };
	static struct tkv_kv_head_plan hp, again;
	double wsum = 0.0;
	uint32_t n, top = 0, second = 0;

	(void)state;
	if (!m)
		skip();
	tkv_model_get_info(m, &info);
	n = info.n_layer * info.n_kv_head;
	assert_int_equal(n, 16);
	ep.n_threads = 1;
	assert_int_equal(tkv_kv_head_plan_parse(&ep.head_plan, "1,2,3", &err), TKV_OK);
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_ERR_ARG);
	assert_non_null(strstr(err.msg, "16"));

	assert_int_equal(tkv_kv_head_plan_parse(&ep.head_plan, "1,1,1,1,1,1,1,1,1,4,1,1,1,1,1,1", &err), TKV_OK);
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_OK);
	assert_int_equal(tkv_seq_init(&s, e, &err), TKV_OK);
	assert_true(tkv_seq_kv_cache(s)->streams[9].weight == 4.0f);
	assert_true(tkv_seq_kv_cache(s)->streams[8].weight == 1.0f);
	tkv_seq_free(s);
	tkv_engine_free(e);

	assert_int_equal(tkv_kv_head_plan_parse(&ep.head_plan, "auto", &err), TKV_OK);
	/* a mix outside [0, 1] other than TKV_HEADS_MIX_POLICY is refused */
	for (int k = 0; k < 2; k++) {
		ep.head_plan.mix = k ? -0.5f : 1.5f;
		err.msg[0] = 0;
		assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_ERR_ARG);
		assert_non_null(strstr(err.msg, "mix"));
	}
	ep.head_plan.mix = TKV_HEADS_MIX_POLICY;
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_OK);
	{
		/* the probe leaves no trace in the engine's figures */
		struct tkv_kv_stats ks;

		tkv_engine_kv_stats(e, &ks);
		assert_int_equal(ks.allocated, 0);
		assert_int_equal(ks.peak_allocated, 0);
		assert_int_equal(ks.gov_runs, 0);
		assert_int_equal(ks.compactions, 0);
	}
	tkv_engine_head_plan(e, &hp);
	assert_int_equal(hp.mode, TKV_HEADS_AUTO);
	assert_int_equal(hp.n, n);
	for (uint32_t i = 0; i < n; i++) {
		assert_true(hp.score[i] > -0.2f && hp.score[i] < 1.0f);
		assert_true(hp.weight[i] >= hp.mix - 1e-6f);
		wsum += hp.weight[i];
		if (hp.score[i] > hp.score[top]) {
			second = top;
			top = i;
		} else if (i != top && (second == top || hp.score[i] > hp.score[second])) {
			second = i;
		}
	}
	assert_true(fabs(wsum - n) < 1e-3);
	/* the default policy's mix */
	assert_true(hp.mix == TKV_HEADS_MIX_ADAPTIVE);
	check_mix(&hp, n);
	assert_int_equal(top, 4 * 2 + 1);
	assert_int_equal(second, 7 * 2 + 0);
	assert_true(hp.score[top] > 0.25f && hp.score[second] > 0.2f);
	assert_true(hp.weight[top] > 2.0f && hp.weight[0] < 0.7f);
	/* a sequence under a budget keeps to it, its copying heads with more:
	 * adaptive (the default) gives the copying head at least the mean
	 * stream's share, tiered (an even split but for the plan) more than
	 * twice the first head's */
	budget_split(e, m, n, top, false);
	tkv_engine_free(e);
	ep.kv.policy = TKV_POLICY_TIERED;
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_OK);
	/* tiered's default mix, on the same scores */
	tkv_engine_head_plan(e, &again);
	assert_true(again.mix == TKV_HEADS_MIX);
	check_mix(&again, n);
	for (uint32_t i = 0; i < n; i++)
		assert_true(again.score[i] == hp.score[i]);
	assert_true(again.weight[top] < hp.weight[top]);
	budget_split(e, m, n, top, true);
	ep.kv.policy = TKV_POLICY_ADAPTIVE;
	tkv_engine_free(e);
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_OK);
	tkv_engine_head_plan(e, &again);
	assert_int_equal(again.unprobed, 0);
	for (uint32_t i = 0; i < n; i++)
		assert_true(again.score[i] == hp.score[i] && again.weight[i] == hp.weight[i]);
	tkv_engine_free(e);
	/* a --kv-mem that holds one probe sequence but not two: the second
	 * continuation runs after the first, with the same scores */
	assert_int_equal(hp.probe_tokens, TKV_HEADS_PROBE);
	ep.kv_mem = 2 << 20;
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_OK);
	tkv_engine_head_plan(e, &again);
	assert_int_equal(again.unprobed, 0);
	assert_int_equal(again.probe_tokens, TKV_HEADS_PROBE);
	for (uint32_t i = 0; i < n; i++)
		assert_true(fabsf(again.score[i] - hp.score[i]) < 1e-5f);
	tkv_engine_free(e);
	/* 1/16 of the f16 cache of 4096 tokens: a shorter probe, the same
	 * copying head on top, and no trace of it in the engine's figures */
	ep.kv_mem = 1 << 20;
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_OK);
	tkv_engine_head_plan(e, &again);
	assert_int_equal(again.unprobed, 0);
	assert_true(again.probe_tokens >= TKV_HEADS_PROBE_MIN && again.probe_tokens < TKV_HEADS_PROBE);
	for (uint32_t i = 0; i < n; i++)
		assert_true(again.score[i] <= again.score[4 * 2 + 1]);
	assert_true(again.weight[4 * 2 + 1] > 2.0f);
	{
		struct tkv_kv_stats ks;

		tkv_engine_kv_stats(e, &ks);
		assert_int_equal(ks.peak_allocated, 0);
		assert_int_equal(ks.demoted + ks.evicted + ks.gov_runs, 0);
	}
	tkv_engine_free(e);
	/* a --kv-mem too small for the probe: an even split, said so */
	ep.kv_mem = 64 << 10;
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_OK);
	tkv_engine_head_plan(e, &again);
	assert_int_equal(again.unprobed, 1);
	for (uint32_t i = 0; i < n; i++)
		assert_true(again.weight[i] == 1.0f);
	{
		struct tkv_kv_stats ks;

		tkv_engine_kv_stats(e, &ks);
		assert_int_equal(ks.allocated, 0);
		assert_int_equal(ks.peak_allocated, 0);
	}
	tkv_engine_free(e);
	tkv_model_free(m);
}

static struct tkv_model *load(void)
{
	return load_named("stories260K.gguf");
}

static void decode_n(struct tkv_seq *s, uint32_t n)
{
	struct tkv_error err = { 0 };
	float logits[512];

	for (uint32_t i = 0; i < n; i++) {
		int32_t id = (int32_t)(1 + (i * 37) % 500);

		if (tkv_seq_decode(s, &id, 1, logits, 0, &err))
			fail_msg("decode: %s", err.msg);
	}
}

/* The engine: a wrong layer count is refused; a fixed plan's pages follow
 * its page sizes; an auto plan is pending until TKV_PLAN_AUTO_TOKENS tokens,
 * then chosen from the measured entropy and applied. */
static void test_engine(void **state)
{
	struct tkv_model *m = load();
	struct tkv_model_info info;
	struct tkv_engine_params ep = tkv_engine_default_params();
	struct tkv_engine *e = NULL;
	struct tkv_seq *s = NULL;
	struct tkv_error err = { 0 };
	struct tkv_kv_layer_plan lp;

	(void)state;
	if (!m)
		skip();
	tkv_model_get_info(m, &info);
	assert_int_equal(info.n_layer, 5);
	ep.n_threads = 1;
	assert_int_equal(tkv_kv_layer_plan_parse(&ep.layer_plan, "16,8", &err), TKV_OK);
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_ERR_ARG);
	assert_non_null(strstr(err.msg, "the model has 5"));

	/* fixed: pages allocated in a layer never exceed its page size */
	assert_int_equal(tkv_kv_layer_plan_parse(&ep.layer_plan, "32:0.5,32,16,8,4:2", &err), TKV_OK);
	ep.kv.seq_budget = 40 * tkv_model_kv_bytes_per_token(m);
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_OK);
	assert_int_equal(tkv_seq_init(&s, e, &err), TKV_OK);
	decode_n(s, 150);
	tkv_seq_layer_plan(s, &lp);
	assert_int_equal(lp.mode, TKV_PLAN_FIXED);
	assert_int_equal(lp.pending, 0);
	for (uint32_t l = 0; l < 5; l++) {
		assert_int_equal(lp.page_tokens[l], ep.layer_plan.page_tokens[l]);
		assert_true(lp.weight[l] == ep.layer_plan.weight[l]);
	}
	{
		struct tkv_kv_stats ks;

		tkv_seq_kv_stats(s, &ks);
		assert_true(ks.kv_bytes <= ep.kv.seq_budget);
		assert_true(ks.compactions > 0);
	}
	tkv_seq_free(s);
	tkv_engine_free(e);

	/* auto */
	ep.layer_plan.mode = TKV_PLAN_AUTO;
	assert_int_equal(tkv_engine_init(&e, m, &ep, &err), TKV_OK);
	assert_int_equal(tkv_seq_init(&s, e, &err), TKV_OK);
	decode_n(s, TKV_PLAN_AUTO_TOKENS - 1);
	tkv_seq_layer_plan(s, &lp);
	assert_int_equal(lp.mode, TKV_PLAN_AUTO);
	assert_int_equal(lp.pending, 1);
	for (uint32_t l = 0; l < 5; l++)
		assert_int_equal(lp.page_tokens[l], 16);
	decode_n(s, 1);
	tkv_seq_layer_plan(s, &lp);
	assert_int_equal(lp.pending, 0);
	{
		double wsum = 0.0;
		int differ = 0;

		for (uint32_t l = 0; l < 5; l++) {
			assert_true(lp.entropy[l] > 0.0f && lp.entropy[l] < logf(32.0f) + 1e-3f);
			assert_true(lp.page_tokens[l] == 8 || lp.page_tokens[l] == 16 || lp.page_tokens[l] == 32);
			wsum += lp.weight[l];
			differ |= lp.weight[l] != lp.weight[0];
		}
		assert_true(fabs(wsum - 5.0) < 1e-3);
		assert_true(differ);
	}
	decode_n(s, 100);
	tkv_seq_free(s);
	tkv_engine_free(e);
	tkv_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_auto),
		cmocka_unit_test(test_split),
		cmocka_unit_test(test_engine),
		cmocka_unit_test(test_head_parse),
		cmocka_unit_test(test_head_split),
		cmocka_unit_test(test_head_engine),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
