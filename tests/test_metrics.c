/* test_metrics.c - the eval metrics on small cases worked out by hand:
 * log-sum-exp, NLL, KL, argmax, perplexity, the accumulator, BLEU-4 (clipping,
 * smoothing, brevity penalty), ROUGE-L (against a full LCS table on random
 * sequences) and an allocation failure. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/metrics.h"

#define TOL 1e-9  /* on values computed in double from exact float inputs */

static void test_logsumexp_nll(void **state)
{
	const float a[2] = { 0.0f, 0.0f };
	const float b[2] = { 0.0f, (float)log(3.0) };      /* softmax: 1/4, 3/4 */
	const float big[3] = { 1000.0f, 1000.0f, -INFINITY };
	const float ninf[2] = { -INFINITY, -INFINITY };
	const float withnan[2] = { 0.0f, NAN };

	(void)state;
	assert_float_equal(evm_logsumexp(a, 2), log(2.0), TOL);
	assert_float_equal(evm_logsumexp(big, 3), 1000.0 + log(2.0), 1e-9);  /* no overflow */
	assert_true(evm_logsumexp(ninf, 2) == -INFINITY);
	assert_true(isnan(evm_logsumexp(withnan, 2)));
	assert_float_equal(evm_nll(b, 2, 1), log(4.0 / 3.0), 1e-7);  /* log 3 rounded to float */
	assert_float_equal(evm_nll(b, 2, 0), log(4.0), 1e-7);
	assert_true(evm_nll(big, 3, 2) == INFINITY);
	assert_true(isnan(evm_nll(b, 2, 2)));
	assert_true(isnan(evm_nll(b, 2, -1)));
}

static void test_kl(void **state)
{
	const float p[2] = { 0.0f, 0.0f };                 /* 1/2, 1/2 */
	const float q[2] = { 0.0f, (float)log(3.0) };      /* 1/4, 3/4 */
	const float q_zero[2] = { 0.0f, -INFINITY };       /* 1, 0 */
	const float p_zero[2] = { -INFINITY, 0.0f };       /* 0, 1 */
	float r[64], r_shift[64];

	(void)state;
	/* 1/2 log(1/2 / 1/4) + 1/2 log(1/2 / 3/4) = 1/2 log(4/3) */
	assert_float_equal(evm_kl(p, q, 2), 0.5 * log(4.0 / 3.0), 1e-7);
	/* 1/4 log(1/4 / 1/2) + 3/4 log(3/4 / 1/2) */
	assert_float_equal(evm_kl(q, p, 2), 0.25 * log(0.5) + 0.75 * log(1.5), 1e-7);
	assert_true(evm_kl(p, q_zero, 2) == INFINITY);
	assert_float_equal(evm_kl(p_zero, q, 2), log(4.0 / 3.0), 1e-7);  /* only the second term */
	for (int i = 0; i < 64; i++) {
		r[i] = (float)sin(i * 1.7) * 5.0f;
		r_shift[i] = r[i] + 8.0f;  /* exact in float: softmax unchanged */
	}
	assert_true(evm_kl(r, r, 64) == 0.0);  /* exactly, not approximately */
	assert_float_equal(evm_kl(r, r_shift, 64), 0.0, 1e-12);
	assert_true(evm_kl(r, q, 2) >= 0.0);
}

static void test_argmax_ppl(void **state)
{
	const float x[5] = { 1.0f, 3.0f, -2.0f, 3.0f, 0.5f };

	(void)state;
	assert_int_equal(evm_argmax(x, 5), 1);  /* the first of ties */
	assert_int_equal(evm_argmax(x, 1), 0);
	assert_int_equal(evm_argmax(x, 0), 0);
	assert_float_equal(evm_ppl(2.0 * log(2.0), 2), 2.0, TOL);
	assert_float_equal(evm_ppl(0.0, 7), 1.0, TOL);
	assert_true(isnan(evm_ppl(1.0, 0)));
}

static void test_accumulator(void **state)
{
	const float p[3] = { 0.0f, 0.0f, -INFINITY };           /* 1/2, 1/2, 0 */
	const float q[3] = { 0.0f, (float)log(3.0), -INFINITY }; /* 1/4, 3/4, 0 */
	struct evm_acc a = { 0 }, b = { 0 };

	(void)state;
	evm_acc_add(&a, p, p, 3, 0);   /* same: KL 0, argmax agrees */
	evm_acc_add(&a, p, q, 3, 1);   /* argmax 0 vs 1 */
	assert_int_equal(a.n, 2);
	assert_int_equal(a.top1, 1);
	assert_float_equal(a.nll_ref, 2.0 * log(2.0), 1e-7);
	assert_float_equal(a.nll, log(2.0) + log(4.0 / 3.0), 1e-7);
	assert_float_equal(a.kl, 0.5 * log(4.0 / 3.0), 1e-7);
	evm_acc_add(&b, q, q, 3, 1);
	evm_acc_merge(&b, &a);
	assert_int_equal(b.n, 3);
	assert_int_equal(b.top1, 2);
	assert_float_equal(b.nll, 2.0 * log(4.0 / 3.0) + log(2.0), 1e-7);
}

static void test_first_diff(void **state)
{
	const int32_t a[4] = { 1, 2, 3, 4 }, b[4] = { 1, 2, 9, 4 };

	(void)state;
	assert_int_equal(evm_first_diff(a, b, 4), 2);
	assert_int_equal(evm_first_diff(a, a, 4), 4);
	assert_int_equal(evm_first_diff(a, b, 0), 0);
}

static void test_bleu(void **state)
{
	const int32_t ref[6] = { 1, 2, 3, 4, 7, 6 }, cand[6] = { 1, 2, 3, 4, 5, 6 };
	const int32_t sevens[4] = { 7, 7, 7, 7 }, seven_one[2] = { 7, 1 };
	const int32_t short_c[2] = { 1, 2 }, long_r[4] = { 1, 2, 3, 4 };
	const int32_t nine[1] = { 9 };

	(void)state;
	assert_float_equal(evm_bleu(cand, 6, cand, 6, 4), 1.0, TOL);
	/* unigrams 5/6; bigrams 3/5 -> 4/6; trigrams 2/4 -> 3/5; 4-grams 1/3 -> 2/4:
	 * (5/6 * 4/6 * 3/5 * 2/4)^(1/4) = (1/6)^(1/4) */
	assert_float_equal(evm_bleu(cand, 6, ref, 6, 4), pow(1.0 / 6.0, 0.25), TOL);
	/* clipping: 7 occurs once in ref, so 1/4 unigrams; no bigram 7 7 in ref:
	 * 1/4, 1/3, 1/2 after smoothing */
	assert_float_equal(evm_bleu(sevens, 4, seven_one, 2, 4), pow(1.0 / 96.0, 0.25), TOL);
	/* brevity: every precision 1 (empty orders smooth to 1/1), BP = exp(1 - 4/2) */
	assert_float_equal(evm_bleu(short_c, 2, long_r, 4, 4), exp(-1.0), TOL);
	/* BLEU-1 and BLEU-2 */
	assert_float_equal(evm_bleu(cand, 6, ref, 6, 1), 5.0 / 6.0, TOL);
	assert_float_equal(evm_bleu(cand, 6, ref, 6, 2), sqrt(5.0 / 6.0 * 4.0 / 6.0), TOL);
	assert_float_equal(evm_bleu(nine, 1, ref, 6, 4), 0.0, TOL);
	assert_float_equal(evm_bleu(cand, 0, ref, 6, 4), 0.0, TOL);
	assert_float_equal(evm_bleu(cand, 6, ref, 0, 4), 0.0, TOL);
	assert_true(isnan(evm_bleu(cand, 6, ref, 6, 0)));
	assert_true(isnan(evm_bleu(cand, 6, ref, 6, 9)));
}

/* LCS length by the full table, for comparison. */
static size_t lcs_full(const int32_t *a, size_t n, const int32_t *b, size_t m)
{
	size_t *t = calloc((n + 1) * (m + 1), sizeof *t), r;

	assert_non_null(t);
	for (size_t i = 1; i <= n; i++)
		for (size_t j = 1; j <= m; j++) {
			size_t up = t[(i - 1) * (m + 1) + j], left = t[i * (m + 1) + j - 1];

			t[i * (m + 1) + j] = a[i - 1] == b[j - 1] ? t[(i - 1) * (m + 1) + j - 1] + 1 : up > left ? up : left;
		}
	r = t[n * (m + 1) + m];
	free(t);
	return r;
}

static void test_rouge_l(void **state)
{
	/* "police killed the gunman" vs "police kill the gunman": LCS 3 of 4 */
	const int32_t c1[4] = { 10, 11, 12, 13 }, r1[4] = { 10, 14, 12, 13 };
	const int32_t c2[5] = { 1, 2, 3, 4, 5 }, r2[4] = { 1, 3, 5, 7 };
	const int32_t none[2] = { 8, 9 };
	double f = -1;
	unsigned seed = 12345;

	(void)state;
	assert_int_equal(evm_rouge_l(c1, 4, r1, 4, NULL, &f), TKV_OK);
	assert_float_equal(f, 0.75, TOL);
	/* LCS 1 3 5: P 3/5, R 3/4, F1 = 2 PR / (P + R) = 2/3 */
	assert_int_equal(evm_rouge_l(c2, 5, r2, 4, NULL, &f), TKV_OK);
	assert_float_equal(f, 2.0 / 3.0, TOL);
	assert_int_equal(evm_rouge_l(r2, 4, c2, 5, NULL, &f), TKV_OK);  /* F1 is symmetric */
	assert_float_equal(f, 2.0 / 3.0, TOL);
	assert_int_equal(evm_rouge_l(c2, 5, c2, 5, NULL, &f), TKV_OK);
	assert_float_equal(f, 1.0, TOL);
	assert_int_equal(evm_rouge_l(c2, 5, none, 2, NULL, &f), TKV_OK);
	assert_float_equal(f, 0.0, TOL);
	assert_int_equal(evm_rouge_l(c2, 0, none, 0, NULL, &f), TKV_OK);
	assert_float_equal(f, 1.0, TOL);
	assert_int_equal(evm_rouge_l(c2, 5, none, 0, NULL, &f), TKV_OK);
	assert_float_equal(f, 0.0, TOL);

	/* random sequences over a small alphabet, both orders of length */
	for (int trial = 0; trial < 200; trial++) {
		int32_t a[40], b[40];
		size_t n = 1 + (size_t)(rand_r(&seed) % 40), m = 1 + (size_t)(rand_r(&seed) % 40), l;
		double p, r;

		for (size_t i = 0; i < n; i++)
			a[i] = rand_r(&seed) % 4;
		for (size_t i = 0; i < m; i++)
			b[i] = rand_r(&seed) % 4;
		l = lcs_full(a, n, b, m);
		assert_int_equal(evm_rouge_l(a, n, b, m, NULL, &f), TKV_OK);
		p = (double)l / (double)n;
		r = (double)l / (double)m;
		assert_float_equal(f, l ? 2 * p * r / (p + r) : 0.0, TOL);
	}
}

static void test_rouge_l_nomem(void **state)
{
	const int32_t c[3] = { 1, 2, 3 };
	struct tkv_alloc a = { 0 };
	double f = -1;

	(void)state;
	a.fail_at = 1;
	assert_int_equal(evm_rouge_l(c, 3, c, 3, &a, &f), TKV_ERR_NOMEM);
	assert_float_equal(f, -1.0, 0.0);  /* untouched */
	a.fail_at = 0;
	assert_int_equal(evm_rouge_l(c, 3, c, 3, &a, &f), TKV_OK);
	assert_float_equal(f, 1.0, TOL);
	assert_int_equal(atomic_load(&a.live), 0);  /* nothing leaked */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_logsumexp_nll),
		cmocka_unit_test(test_kl),
		cmocka_unit_test(test_argmax_ppl),
		cmocka_unit_test(test_accumulator),
		cmocka_unit_test(test_first_diff),
		cmocka_unit_test(test_bleu),
		cmocka_unit_test(test_rouge_l),
		cmocka_unit_test(test_rouge_l_nomem),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
