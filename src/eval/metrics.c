/* metrics.c - perplexity, KL divergence, top-1 agreement, BLEU and ROUGE-L. */
#include "eval/metrics.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "util/alloc.h"

/* ---- logits ---------------------------------------------------------------- */

double evm_logsumexp(const float *logits, size_t n)
{
	double mx = -INFINITY, sum = 0.0;

	for (size_t i = 0; i < n; i++) {
		if (isnan(logits[i]))
			return NAN;
		if (logits[i] > mx)
			mx = logits[i];
	}
	if (mx == -INFINITY || mx == INFINITY)
		return mx;
	for (size_t i = 0; i < n; i++)
		sum += exp((double)logits[i] - mx);
	return mx + log(sum);
}

double evm_nll(const float *logits, size_t n, int32_t target)
{
	if (target < 0 || (size_t)target >= n)
		return NAN;
	return evm_logsumexp(logits, n) - (double)logits[target];
}

/* KL(P || Q) given both log-normalisers. */
static double kl_lse(const float *p, double lse_p, const float *q, double lse_q, size_t n)
{
	double kl = 0.0;

	for (size_t i = 0; i < n; i++) {
		double lp = (double)p[i] - lse_p, lq;

		if (lp == -INFINITY)
			continue; /* 0 * log(0 / q) = 0 */
		lq = (double)q[i] - lse_q;
		kl += exp(lp) * (lp - lq);
	}
	return kl;
}

double evm_kl(const float *p_logits, const float *q_logits, size_t n)
{
	return kl_lse(p_logits, evm_logsumexp(p_logits, n), q_logits, evm_logsumexp(q_logits, n), n);
}

size_t evm_argmax(const float *logits, size_t n)
{
	size_t best = 0;

	for (size_t i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

double evm_ppl(double nll_sum, uint64_t n)
{
	return n ? exp(nll_sum / (double)n) : NAN;
}

void evm_acc_add(struct evm_acc *a, const float *ref, const float *pol, size_t n_vocab, int32_t target)
{
	double lse_p = evm_logsumexp(ref, n_vocab), lse_q = evm_logsumexp(pol, n_vocab);

	if (target >= 0 && (size_t)target < n_vocab) {
		a->nll_ref += lse_p - (double)ref[target];
		a->nll += lse_q - (double)pol[target];
	} else {
		a->nll_ref = a->nll = NAN;
	}
	a->kl += kl_lse(ref, lse_p, pol, lse_q, n_vocab);
	a->top1 += evm_argmax(ref, n_vocab) == evm_argmax(pol, n_vocab);
	a->n++;
}

void evm_acc_merge(struct evm_acc *a, const struct evm_acc *b)
{
	a->nll += b->nll;
	a->nll_ref += b->nll_ref;
	a->kl += b->kl;
	a->top1 += b->top1;
	a->n += b->n;
}

/* ---- sequences ------------------------------------------------------------- */

size_t evm_first_diff(const int32_t *a, const int32_t *b, size_t n)
{
	size_t i = 0;

	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/* Occurrences of the n-gram g (length k) in s (length n_s). */
static size_t ngram_count(const int32_t *s, size_t n_s, const int32_t *g, size_t k)
{
	size_t c = 0;

	for (size_t i = 0; i + k <= n_s; i++)
		if (!memcmp(s + i, g, k * sizeof *g))
			c++;
	return c;
}

double evm_bleu(const int32_t *cand, size_t n_cand, const int32_t *ref, size_t n_ref, int max_n)
{
	double log_p = 0.0, bp;

	if (max_n < 1 || max_n > 8)
		return NAN;
	if (n_cand == 0)
		return 0.0;
	for (int k = 1; k <= max_n; k++) {
		size_t total = n_cand >= (size_t)k ? n_cand - (size_t)k + 1 : 0, match = 0;

		/* clipped matches: each distinct n-gram of cand, counted at its first
		 * occurrence, matches at most as often as it occurs in ref */
		for (size_t i = 0; i < total; i++) {
			const int32_t *g = cand + i;
			size_t c_ref, c_cand;
			bool first = true;

			for (size_t j = 0; j < i && first; j++)
				first = memcmp(cand + j, g, (size_t)k * sizeof *g) != 0;
			if (!first)
				continue;
			c_ref = ngram_count(ref, n_ref, g, (size_t)k);
			if (!c_ref)
				continue;
			c_cand = ngram_count(cand + i, n_cand - i, g, (size_t)k);
			match += c_cand < c_ref ? c_cand : c_ref;
		}
		if (k == 1) {
			if (match == 0)
				return 0.0;
			log_p += log((double)match / (double)total);
		} else {
			log_p += log((double)(match + 1) / (double)(total + 1));
		}
	}
	bp = n_cand < n_ref ? exp(1.0 - (double)n_ref / (double)n_cand) : 1.0;
	return bp * exp(log_p / max_n);
}

int evm_rouge_l(const int32_t *cand, size_t n_cand, const int32_t *ref, size_t n_ref, struct tkv_alloc *a,
		double *f1)
{
	const int32_t *rows = cand, *cols = ref;
	size_t n_rows = n_cand, n_cols = n_ref, lcs;
	size_t *row;
	double p, r;

	if (n_cand == 0 || n_ref == 0) {
		*f1 = n_cand == n_ref ? 1.0 : 0.0;
		return TKV_OK;
	}
	/* one row of the LCS table over the shorter sequence */
	if (n_ref > n_cand) {
		rows = ref;
		cols = cand;
		n_rows = n_ref;
		n_cols = n_cand;
	}
	row = tkv_calloc(a, n_cols + 1, sizeof *row);
	if (!row)
		return TKV_ERR_NOMEM;
	for (size_t i = 0; i < n_rows; i++) {
		size_t diag = 0; /* row[j - 1] of the previous row */

		for (size_t j = 1; j <= n_cols; j++) {
			size_t up = row[j];

			if (rows[i] == cols[j - 1])
				row[j] = diag + 1;
			else if (row[j - 1] > row[j])
				row[j] = row[j - 1];
			diag = up;
		}
	}
	lcs = row[n_cols];
	tkv_free(a, row);
	if (lcs == 0) {
		*f1 = 0.0;
		return TKV_OK;
	}
	p = (double)lcs / (double)n_cand;
	r = (double)lcs / (double)n_ref;
	*f1 = 2.0 * p * r / (p + r);
	return TKV_OK;
}
