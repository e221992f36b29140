/* test_sampler.c - greedy, top-k/top-p/min-p supports, temperature against
 * softmax, repetition penalty, determinism, NaN/inf, params, allocation faults. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/sampler.h"
#include "util/alloc.h"

#define DRAWS 20000

/* Sampler with everything off except what the test turns on. */
static struct samp_params plain_params(float temp)
{
	struct samp_params p = samp_default_params();

	p.temp = temp;
	p.top_k = 0;
	p.top_p = 1.0f;
	p.min_p = 0.0f;
	p.repeat_penalty = 1.0f;
	return p;
}

static struct samp *make(const struct samp_params *p, int32_t n_vocab)
{
	struct samp *s = NULL;
	struct tkv_error err = {0};

	assert_int_equal(samp_init(&s, p, n_vocab, NULL, &err), TKV_OK);
	assert_non_null(s);
	return s;
}

/* Samples from a copy, since samp_sample may modify the logits. */
static int32_t draw(struct samp *s, const float *logits, float *tmp, int32_t n)
{
	memcpy(tmp, logits, (size_t)n * sizeof *tmp);
	return samp_sample(s, tmp);
}

/* Deterministic pseudo-random logits in [-4, 4). */
static void fill_logits(float *l, int32_t n, unsigned seed)
{
	int32_t i;
	uint32_t x = seed * 2654435761u + 1;

	for (i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		l[i] = (float)((x >> 8) & 0xffff) / 65536.0f * 8.0f - 4.0f;
	}
}

static void test_greedy_argmax_and_ties(void **state)
{
	struct samp_params p = plain_params(0.0f);
	struct samp *s = make(&p, 5);
	float a[5] = { 1.0f, 5.0f, -2.0f, 5.0f, 4.9f };
	float b[5] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY };
	float c[5] = { -1.0f, -1.0f, -1.0f, -1.0f, -1.0f };

	(void)state;
	assert_int_equal(samp_sample(s, a), 1); /* lowest id among the tied max */
	assert_int_equal(samp_sample(s, b), 0);
	assert_int_equal(samp_sample(s, c), 0);
	samp_free(s);
}

static void test_top_k1_equals_greedy(void **state)
{
	enum { NV = 3000 };
	struct samp_params pg = plain_params(0.0f);
	struct samp_params pk = plain_params(1.5f);
	struct samp *g, *k;
	static float l[NV], tmp[NV];
	unsigned r;

	(void)state;
	pk.top_k = 1;
	g = make(&pg, NV);
	k = make(&pk, NV);
	for (r = 0; r < 50; r++) {
		fill_logits(l, NV, r);
		if (r % 2) { /* force a tie at the max on odd rounds */
			l[NV - 7] = 10.0f;
			l[123 + r] = 10.0f;
		}
		assert_int_equal(draw(k, l, tmp, NV), draw(g, l, tmp, NV));
	}
	samp_free(g);
	samp_free(k);
}

/* The set a reference top-p / min-p would keep: ids sorted by (logit desc, id
 * asc); keep the shortest prefix with mass >= top_p, then min-p. */
static int cmp_desc_ref(const void *x, const void *y, const float *l)
{
	int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;

	if (l[a] != l[b])
		return l[a] > l[b] ? -1 : 1;
	return a < b ? -1 : 1;
}

static const float *g_ref_logits;

static int cmp_desc(const void *x, const void *y)
{
	return cmp_desc_ref(x, y, g_ref_logits);
}

static void reference_allowed(const float *l, int32_t n, float top_p, float min_p,
			      char *allowed)
{
	int32_t *ord = malloc((size_t)n * sizeof *ord);
	double z = 0, cum = 0, pmax;
	int32_t i, keep;

	assert_non_null(ord);
	for (i = 0; i < n; i++)
		ord[i] = i;
	g_ref_logits = l;
	qsort(ord, (size_t)n, sizeof *ord, cmp_desc);
	for (i = 0; i < n; i++)
		z += exp((double)l[i] - l[ord[0]]);
	keep = n;
	if (top_p < 1.0f) {
		for (i = 0; i < n; i++) {
			cum += exp((double)l[ord[i]] - l[ord[0]]);
			if (cum >= top_p * z) {
				keep = i + 1;
				break;
			}
		}
	}
	pmax = 1.0 / z;
	for (i = 0; i < n; i++)
		allowed[i] = 0;
	for (i = 0; i < keep; i++) {
		double pi = exp((double)l[ord[i]] - l[ord[0]]) / z;

		if (min_p > 0.0f && pi < min_p * pmax)
			break;
		allowed[ord[i]] = 1;
	}
	free(ord);
}

/* Draws many samples; none may fall outside the reference set, and (for small
 * sets) every member should appear. */
static void check_support(float top_p, float min_p, int32_t nv, unsigned seed,
			  int expect_all_hit)
{
	const int n_draws = nv > 1000 ? DRAWS / 10 : DRAWS;
	struct samp_params p = plain_params(1.0f);
	struct samp *s;
	float *l = malloc((size_t)nv * sizeof *l), *tmp = malloc((size_t)nv * sizeof *tmp);
	char *allowed = malloc((size_t)nv), *hit = calloc((size_t)nv, 1);
	int32_t i, n_allowed = 0;
	int r;

	assert_true(l && tmp && allowed && hit);
	p.top_p = top_p;
	p.min_p = min_p;
	s = make(&p, nv);
	fill_logits(l, nv, seed);
	reference_allowed(l, nv, top_p, min_p, allowed);
	for (i = 0; i < nv; i++)
		n_allowed += allowed[i];
	assert_true(n_allowed >= 1);
	if (top_p < 1.0f || min_p > 0.0f)
		assert_true(n_allowed < nv);
	for (r = 0; r < n_draws; r++) {
		int32_t id = draw(s, l, tmp, nv);

		assert_true(id >= 0 && id < nv);
		if (!allowed[id])
			fail_msg("top_p %g min_p %g: drew id %d outside the allowed set "
				 "(%d of %d allowed)", (double)top_p, (double)min_p,
				 (int)id, (int)n_allowed, (int)nv);
		hit[id] = 1;
	}
	if (expect_all_hit)
		for (i = 0; i < nv; i++)
			if (allowed[i])
				assert_true(hit[i]);
	samp_free(s);
	free(l);
	free(tmp);
	free(allowed);
	free(hit);
}

/* DRAWS samples of ids 0..4 with p = 0.05, 0.3, 0.05, 0.5, 0.1 (sorted: 0.5,
 * 0.3, 0.1, 0.05, 0.05) under top_p and min_p: how often each id came. */
static void five_hits(float top_p, float min_p, int hits[5])
{
	float l[5] = { logf(0.05f), logf(0.3f), logf(0.05f), logf(0.5f), logf(0.1f) };
	struct samp_params p = plain_params(1.0f);
	struct samp *s;
	float tmp[5];

	p.top_p = top_p;
	p.min_p = min_p;
	s = make(&p, 5);
	memset(hits, 0, 5 * sizeof *hits);
	for (int r = 0; r < DRAWS; r++)
		hits[draw(s, l, tmp, 5)]++;
	samp_free(s);
}

static void test_top_p_support(void **state)
{
	int hits[5];

	(void)state;
	/* top_p 0.7 keeps ids 3 and 1 */
	five_hits(0.7f, 0.0f, hits);
	assert_int_equal(hits[0] + hits[2] + hits[4], 0);
	/* renormalised: 0.5/0.8 and 0.3/0.8 */
	assert_true(fabs(hits[3] / (double)DRAWS - 0.625) < 0.02);

	check_support(0.3f, 0.0f, 50, 1, 1);
	check_support(0.9f, 0.0f, 50, 2, 0);
	/* large vocabulary: exercises the growing partial sort (> 64 kept) */
	check_support(0.2f, 0.0f, 5000, 3, 0);
	check_support(0.6f, 0.0f, 5000, 4, 0);
}

static void test_min_p_support(void **state)
{
	int hits[5];

	(void)state;
	/* min_p 0.15 keeps p >= 0.075: ids 3, 1 and 4 */
	five_hits(1.0f, 0.15f, hits);
	assert_int_equal(hits[0] + hits[2], 0);
	assert_true(hits[1] > 0 && hits[3] > 0 && hits[4] > 0);

	check_support(1.0f, 0.5f, 200, 5, 1);
	check_support(1.0f, 0.9f, 5000, 6, 1);
	/* both on: the stricter prefix wins */
	check_support(0.5f, 0.3f, 3000, 7, 0);
	check_support(0.1f, 0.05f, 3000, 8, 0);
}

static void test_top_k_support(void **state)
{
	enum { NV = 10000, K = 40 };
	struct samp_params p = plain_params(3.0f);
	static float l[NV], tmp[NV];
	static int32_t ord[NV];
	static char allowed[NV];
	struct samp *s;
	int32_t i;
	int r;

	(void)state;
	p.top_k = K;
	s = make(&p, NV);
	fill_logits(l, NV, 9);
	for (i = 0; i < NV; i++)
		ord[i] = i;
	g_ref_logits = l;
	qsort(ord, NV, sizeof *ord, cmp_desc);
	for (i = 0; i < K; i++)
		allowed[ord[i]] = 1;
	for (r = 0; r < DRAWS / 10; r++)
		assert_true(allowed[draw(s, l, tmp, NV)]);
	samp_free(s);
}

static void test_temperature_matches_softmax(void **state)
{
	const float l[4] = { 1.0f, 0.5f, 0.0f, -1.0f };
	const float temps[3] = { 0.7f, 1.0f, 2.0f };
	const int n = 200000;
	int t;

	(void)state;
	for (t = 0; t < 3; t++) {
		struct samp_params p = plain_params(temps[t]);
		struct samp *s = make(&p, 4);
		double z = 0, want[4];
		int hits[4] = {0}, i, r;
		float tmp[4];

		for (i = 0; i < 4; i++)
			z += want[i] = exp(l[i] / temps[t]);
		for (r = 0; r < n; r++)
			hits[draw(s, l, tmp, 4)]++;
		/* sd of a frequency is <= sqrt(0.25 / n) ~ 0.0011; allow ~5 sd */
		for (i = 0; i < 4; i++)
			assert_true(fabs(hits[i] / (double)n - want[i] / z) < 0.006);
		samp_free(s);
	}
}

static void test_repetition_penalty(void **state)
{
	struct samp_params p = plain_params(0.0f);
	struct samp *s;
	float l[4];

	(void)state;
	p.repeat_penalty = 1.5f;
	p.repeat_last_n = 3;
	s = make(&p, 4);

	/* positive logit divided, once even when repeated */
	samp_accept(s, 0);
	samp_accept(s, 0);
	l[0] = 2.0f; l[1] = 1.9f; l[2] = -1.0f; l[3] = -1.1f;
	assert_int_equal(samp_sample(s, l), 1);
	assert_true(fabsf(l[0] - 2.0f / 1.5f) < 1e-6f);

	/* negative logit multiplied */
	samp_accept(s, 2); /* history: 0 0 2 */
	l[0] = -5.0f; l[1] = -5.0f; l[2] = -1.0f; l[3] = -1.2f;
	assert_int_equal(samp_sample(s, l), 3);
	assert_true(fabsf(l[2] + 1.5f) < 1e-6f);

	/* ids that left the window are not penalised */
	samp_accept(s, 3);
	samp_accept(s, 3);
	samp_accept(s, 3); /* history: 3 3 3 */
	l[0] = 2.0f; l[1] = 1.9f; l[2] = -1.0f; l[3] = -1.1f;
	assert_int_equal(samp_sample(s, l), 0);
	assert_true(l[0] == 2.0f);
	assert_true(fabsf(l[3] + 1.65f) < 1e-6f);

	/* reset forgets the history; out-of-range ids are ignored */
	samp_reset(s, 1);
	samp_accept(s, -1);
	samp_accept(s, 4);
	l[0] = 2.0f; l[1] = 1.9f; l[2] = -1.0f; l[3] = -1.1f;
	assert_int_equal(samp_sample(s, l), 0);
	samp_free(s);

	/* penalty = 1 is off: no history kept at all */
	p.repeat_penalty = 1.0f;
	s = make(&p, 4);
	samp_accept(s, 0);
	l[0] = 2.0f; l[1] = 1.9f; l[2] = -1.0f; l[3] = -1.1f;
	assert_int_equal(samp_sample(s, l), 0);
	samp_free(s);
}

static void test_determinism(void **state)
{
	enum { NV = 500, N = 2000 };
	struct samp_params p = plain_params(1.0f);
	static float l[NV], tmp[NV];
	static int32_t a[N], b[N], c[N];
	struct samp *s1, *s2, *s3;
	int i, differ = 0;

	(void)state;
	p.top_k = 100;
	p.top_p = 0.95f;
	p.min_p = 0.01f;
	s1 = make(&p, NV);
	s2 = make(&p, NV);
	p.seed ^= 1;
	s3 = make(&p, NV);
	for (i = 0; i < N; i++) {
		fill_logits(l, NV, (unsigned)i);
		a[i] = draw(s1, l, tmp, NV);
		b[i] = draw(s2, l, tmp, NV);
		c[i] = draw(s3, l, tmp, NV);
	}
	assert_memory_equal(a, b, sizeof a);
	for (i = 0; i < N; i++)
		differ += a[i] != c[i];
	assert_true(differ > N / 2);

	/* reset to the original seed replays the sequence */
	samp_reset(s3, samp_default_params().seed);
	for (i = 0; i < N; i++) {
		fill_logits(l, NV, (unsigned)i);
		assert_int_equal(draw(s3, l, tmp, NV), a[i]);
	}
	samp_free(s1);
	samp_free(s2);
	samp_free(s3);
}

/* Pins the generator: PCG32 (XSH-RR), stream 0xda3e39cb94b95bdb, seed 0xC0FFEE,
 * uniform = 53 bits from two outputs. Two equal logits split at 0.5, so the ids
 * are the draws' top bits, computed independently from the PCG32 reference. */
static void test_generator_golden(void **state)
{
	static const int32_t want[32] = {
		0, 0, 1, 0, 1, 0, 1, 0, 1, 1, 1, 0, 0, 1, 1, 0,
		1, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0,
	};
	struct samp_params p = plain_params(1.0f);
	struct samp *s = make(&p, 2);
	int i;

	(void)state;
	for (i = 0; i < 32; i++) {
		float l[2] = { 0.0f, 0.0f };

		assert_int_equal(samp_sample(s, l), want[i]);
	}
	samp_free(s);
}

static void test_nan_and_inf(void **state)
{
	struct samp_params pg = plain_params(0.0f);
	struct samp_params ps = plain_params(1.0f);
	struct samp *g = make(&pg, 4), *s;
	float l[4], tmp[4];
	int r;

	(void)state;
	ps.top_k = 3;
	ps.top_p = 0.99f;
	ps.min_p = 0.01f;
	s = make(&ps, 4);

	l[0] = NAN; l[1] = 1.0f; l[2] = NAN; l[3] = 0.5f;
	assert_int_equal(draw(g, l, tmp, 4), 1);
	for (r = 0; r < 2000; r++) {
		int32_t id = draw(s, l, tmp, 4);

		assert_true(id == 1 || id == 3);
	}

	l[0] = NAN; l[1] = NAN; l[2] = NAN; l[3] = NAN;
	assert_int_equal(draw(g, l, tmp, 4), 0);
	assert_int_equal(draw(s, l, tmp, 4), 0);

	l[0] = 0.0f; l[1] = NAN; l[2] = INFINITY; l[3] = 1.0f;
	assert_int_equal(draw(g, l, tmp, 4), 2);
	for (r = 0; r < 200; r++)
		assert_int_equal(draw(s, l, tmp, 4), 2);
	samp_free(g);
	samp_free(s);
}

static void expect_bad(const struct samp_params *p, int32_t nv, const char *word)
{
	struct samp *s = (struct samp *)1;
	struct tkv_error err = {0};

	assert_int_equal(samp_init(&s, p, nv, NULL, &err), TKV_ERR_ARG);
	assert_null(s);
	assert_int_equal(err.status, TKV_ERR_ARG);
	if (!strstr(err.msg, word))
		fail_msg("message \"%s\" does not name %s", err.msg, word);
}

static void test_param_validation(void **state)
{
	struct samp_params d = samp_default_params(), p;
	struct samp *s = NULL;

	(void)state;
	p = d; p.temp = -0.1f;       expect_bad(&p, 10, "temp");
	p = d; p.temp = NAN;         expect_bad(&p, 10, "temp");
	p = d; p.top_p = 0.0f;       expect_bad(&p, 10, "top_p");
	p = d; p.min_p = 1.5f;       expect_bad(&p, 10, "min_p");
	p = d; p.repeat_penalty = 0; expect_bad(&p, 10, "repeat_penalty");
	p = d; p.repeat_last_n = -1; expect_bad(&p, 10, "repeat_last_n");
	expect_bad(&d, 0, "n_vocab");
	assert_int_equal(samp_init(&s, NULL, 10, NULL, NULL), TKV_ERR_ARG);

	/* edge values that are allowed */
	p = d; p.top_p = 1.5f; p.min_p = 1.0f; p.top_k = 1000; p.temp = 0.0f;
	assert_int_equal(samp_init(&s, &p, 10, NULL, NULL), TKV_OK);
	samp_free(s);
	samp_free(NULL);
	samp_accept(NULL, 1);
	samp_reset(NULL, 1);
}

static void test_alloc_failure(void **state)
{
	unsigned long long k;
	int saw_ok = 0;

	(void)state;
	for (k = 1; k <= 6; k++) {
		struct samp_params p = samp_default_params();
		struct tkv_alloc a = {0};
		struct tkv_error err = {0};
		struct samp *s = (struct samp *)1;
		int rc;

		p.repeat_penalty = 1.1f; /* the largest set of allocations */
		a.fail_at = k;
		rc = samp_init(&s, &p, 1000, &a, &err);
		if (rc == TKV_OK) {
			float l[1000];

			saw_ok = 1;
			fill_logits(l, 1000, 0);
			samp_accept(s, 3);
			(void)samp_sample(s, l); /* no allocation per call */
			assert_int_equal(atomic_load(&a.n_calls), k - 1);
			samp_free(s);
		} else {
			tu_expect_nomem(rc, s, &err, "sampler");
		}
		assert_int_equal(atomic_load(&a.live), 0);
	}
	assert_true(saw_ok);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_greedy_argmax_and_ties),
		cmocka_unit_test(test_top_k1_equals_greedy),
		cmocka_unit_test(test_top_p_support),
		cmocka_unit_test(test_min_p_support),
		cmocka_unit_test(test_top_k_support),
		cmocka_unit_test(test_temperature_matches_softmax),
		cmocka_unit_test(test_repetition_penalty),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_generator_golden),
		cmocka_unit_test(test_nan_and_inf),
		cmocka_unit_test(test_param_validation),
		cmocka_unit_test(test_alloc_failure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
