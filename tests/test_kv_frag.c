/* test_kv_frag.c - fragmentation of one pool under a long mixed workload.
 *
 * 1,000 sequences of random lengths (1..512 tokens, fixed seed) go through one
 * pool, up to 12 alive at once, each with its own policy (full, window, h2o,
 * tova, kivi, tiered, adaptive) and per-sequence cap (none, or 1/16 .. 1/2 of
 * its full f16 cache at its final length) and a layer plan (uniform or one of
 * fixed per-layer page sizes). A step picks a live sequence and appends a
 * prompt chunk (its first call: 1..64 tokens) or one token, with random keys
 * and values, feeds random attention to the policy (scores, entropy; for the
 * prompt and every 4th token), then
 * maintains it as the engine does: budget split, kv_policy_maintain per
 * stream (evictions, demotions, compaction), and compaction of streams that
 * gathered small pages. A finished sequence is freed and a new one starts.
 *
 * Checkpoints: after every step from step 100 on (of some 229,000; before
 * it the pool holds a few short sequences: 6.7% at step 2, 6.6 KB) to the
 * last step that leaves pages in the pool, the pool's fragmentation (allocated - used) / allocated
 * must be under 5%; every 64th step and at the end, the pool's counters must
 * equal the sums over the live sequences' pages (allocated, used, K+V bytes,
 * pages, slots per format) and every stream's own counters its pages'. At the
 * end everything is returned (pool and allocator at zero). The compaction
 * cost (slots and bytes moved, time) is printed. */
#include "testutil.h"
#include "testutil_kv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/compact.h"
#include "kv/policy.h"
#include "kv/pool.h"
#include "kv/seq.h"
#include "tierkv.h"
#include "util/alloc.h"

#define N_SEQS 1000
#define MAX_LIVE 12
#define MAX_LEN 512
#define N_LAYER 2
#define N_KV_HEAD 2
#define HD 16
#define GROUP 2
#define P 16
#define FRAG_MAX 0.05
#define WARMUP_STEPS 100   /* before this the pool holds a few short sequences */

struct live {
	struct kv_seq *s;
	struct kv_cfg *c;
	uint32_t len;        /* tokens it will hold */
	size_t budget;       /* per-sequence cap (0 = none) */
};

/* The pool's counters against the sums over the live sequences' pages, and
 * each stream's counters against its own pages. */
static void check_acct(struct kv_pool *pool, const struct live *lv, int n_live)
{
	struct kv_seq *seqs[MAX_LIVE];

	for (int i = 0; i < n_live; i++)
		seqs[i] = lv[i].s;
	tu_kv_check_acct(pool, seqs, (size_t)n_live);
}

/* Appends n tokens of random keys and values to every stream (one random
 * draw per row: the rows only need to differ). */
static void append(struct kv_seq *s, uint32_t n)
{
	float k[HD], v[HD];

	assert_int_equal(kv_seq_reserve(s, n, NULL), TKV_OK);
	for (uint32_t t = 0; t < n; t++) {
		for (uint32_t l = 0; l < s->n_layer; l++)
			for (uint32_t h = 0; h < s->n_kv_head; h++) {
				uint32_t r = tu_rng_u32();
				float a = tu_rng_f(0.5f, 2.0f);

				for (uint32_t c = 0; c < HD; c++) {
					k[c] = a * (float)((int)((r >> (c % 29)) & 7) - 3) + 0.01f * (float)c;
					v[c] = (float)((int)((r >> ((c + 7) % 29)) & 3) - 1) / a;
				}
				kv_seq_append(s, l, h, s->n_pos, k, v);
			}
		s->n_pos++;
	}
}

/* Random attention over every stream: heavy-tailed weights (a cheap hash of
 * position and step) that sum to the group's query count, and an entropy for
 * the adaptive split. */
static void attend(const struct kv_cfg *c, struct kv_seq *s, float *att)
{
	uint32_t salt = tu_rng_u32();

	for (uint32_t k = 0; k < s->n_layer * s->n_kv_head; k++) {
		struct kv_stream *st = &s->streams[k];
		double sum = 0.0;

		for (uint32_t i = 0; i < st->n_tokens; i++) {
			uint32_t x = (i + 1) * 2654435761u ^ salt ^ k * 40503u;
			float u = (float)((x >> 8) & 0xffff) / 65536.0f;

			att[i] = u * u * u * u;
			sum += att[i];
		}
		for (uint32_t i = 0; i < st->n_tokens && sum > 0; i++)
			att[i] = (float)(att[i] * GROUP / sum);
		kv_policy_observe(c, st, att);
		st->ent_sum += GROUP * (1.0 + 0.5 * (double)(k % N_KV_HEAD) + 0.3 * (double)(k / N_KV_HEAD));
		st->ent_n++;
	}
}

/* What the engine does after a chunk (engine.c seq_maintain). */
static void maintain(const struct kv_cfg *c, struct live *lv)
{
	struct kv_seq *s = lv->s;
	bool policy = c->evicts && (lv->budget || c->always);

	if (c->evicts)
		kv_policy_split_budget(c, s, lv->budget);
	for (uint32_t k = 0; k < s->n_layer * s->n_kv_head; k++) {
		struct kv_stream *st = &s->streams[k];

		if (policy)
			assert_int_equal(kv_policy_maintain(c, s, st), TKV_OK);
		if (kv_stream_untidy(st))
			assert_int_equal(kv_stream_compact(s, st), TKV_OK);
	}
}

static void test_frag_1000_sequences(void **state)
{
	static const enum tkv_policy pols[] = { TKV_POLICY_FULL, TKV_POLICY_WINDOW, TKV_POLICY_H2O,
						TKV_POLICY_TOVA, TKV_POLICY_KIVI, TKV_POLICY_TIERED,
						TKV_POLICY_ADAPTIVE };
	static const double fracs[] = { 0.0, 0.0625, 0.125, 0.25, 0.35, 0.5 };
	static const uint32_t plans[][N_LAYER] = { { P, P }, { 32, 8 }, { 64, 4 }, { 8, 32 } };
	struct tkv_alloc a = { 0 };
	struct kv_pool_params pp = kv_pool_default_params();
	struct kv_pool *pool = NULL;
	struct kv_cfg cfgs[sizeof pols / sizeof pols[0]];
	struct live lv[MAX_LIVE];
	struct kv_pool_stats ps;
	struct tkv_error err = { 0 };
	static float att[MAX_LEN + 64];
	int n_live = 0, started = 0, finished = 0;
	uint64_t steps = 0, checks = 0;
	double frag_max = 0.0, frag_sum = 0.0, bpt = 2.0 * HD * 2 * N_LAYER * N_KV_HEAD;
	size_t alloc_max = 0;

	(void)state;
	pp.page_tokens = P;
	assert_int_equal(kv_pool_init(&pool, &pp, &a, &err), TKV_OK);
	for (size_t i = 0; i < sizeof pols / sizeof pols[0]; i++) {
		struct tkv_kv_policy_params p = tkv_kv_policy_default_params();

		p.policy = pols[i];
		p.n_window = 16;
		assert_int_equal(kv_cfg_init(&cfgs[i], &p, HD, GROUP, KV_FMT_F16, P, &err), TKV_OK);
	}
	while (finished < N_SEQS) {
		struct live *l;
		uint32_t n;
		double frag;

		/* start sequences up to MAX_LIVE (random count live, at least one) */
		while (started < N_SEQS && (n_live == 0 || (n_live < MAX_LIVE && tu_rng_u32() % 4 == 0))) {
			l = &lv[n_live++];
			l->c = &cfgs[tu_rng_u32() % (sizeof pols / sizeof pols[0])];
			l->len = 1 + tu_rng_u32() % MAX_LEN;
			l->budget = (size_t)(fracs[tu_rng_u32() % (sizeof fracs / sizeof fracs[0])] * l->len * bpt);
			assert_int_equal(kv_seq_init(&l->s, pool, N_LAYER, N_KV_HEAD, HD, &a, &err), TKV_OK);
			{
				const uint32_t *plan = plans[tu_rng_u32() % (sizeof plans / sizeof plans[0])];

				if (plan[0] != P || plan[1] != P)
					for (uint32_t ly = 0; ly < N_LAYER; ly++)
						kv_seq_set_layer(l->s, ly, plan[ly], 0.5f + 0.5f * (float)ly);
			}
			started++;
		}
		/* one step of one live sequence */
		l = &lv[tu_rng_u32() % (uint32_t)n_live];
		n = l->s->n_pos == 0 ? 1 + tu_rng_u32() % 64 : 1;
		if (n > l->len - (uint32_t)l->s->n_pos)
			n = l->len - (uint32_t)l->s->n_pos;
		append(l->s, n);
		/* attention for the prompt and every 4th token (scores need not be
		 * exact, only varied) */
		if ((l->c->score != KV_SCORE_NONE || l->c->adaptive) && (n > 1 || l->s->n_pos % 4 == 0))
			attend(l->c, l->s, att);
		maintain(l->c, l);
		steps++;
		if ((uint32_t)l->s->n_pos == l->len) {
			kv_seq_free(l->s);
			*l = lv[--n_live];
			finished++;
		}
		kv_pool_stats(pool, &ps);
		if (ps.allocated > alloc_max)
			alloc_max = ps.allocated;
		if (steps % 64 == 0)
			check_acct(pool, lv, n_live);
		if (steps < WARMUP_STEPS || ps.allocated == 0)
			continue;
		frag = (double)(ps.allocated - ps.used) / (double)ps.allocated;
		if (frag >= FRAG_MAX)
			fail_msg("step %llu (%d sequences live, %d finished): fragmentation %.2f%% (%zu of %zu bytes)",
				 (unsigned long long)steps, n_live, finished, 100.0 * frag, ps.allocated - ps.used,
				 ps.allocated);
		frag_max = fmax(frag_max, frag);
		frag_sum += frag;
		checks++;
	}
	check_acct(pool, lv, n_live);
	kv_pool_stats(pool, &ps);
	assert_int_equal(ps.allocated, 0);
	assert_int_equal(ps.n_pages, 0);
	assert_true(ps.compactions > 0 && ps.compact_slots > 0);
	printf("# %d sequences, %llu steps, %llu checkpoints: fragmentation max %.2f%%, mean %.2f%%; "
	       "peak %zu bytes; compactions %llu, %llu slots and %llu K+V bytes moved in %.1f ms, "
	       "%zu page bytes returned\n",
	       finished, (unsigned long long)steps, (unsigned long long)checks, 100.0 * frag_max,
	       checks ? 100.0 * frag_sum / (double)checks : 0.0, alloc_max, (unsigned long long)ps.compactions,
	       (unsigned long long)ps.compact_slots, (unsigned long long)ps.compact_bytes,
	       (double)ps.compact_ns / 1e6, ps.compact_freed);
	kv_pool_free(pool);
	assert_int_equal(atomic_load(&a.live), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frag_1000_sequences),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
