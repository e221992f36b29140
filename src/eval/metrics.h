/* metrics.h - how close a cache policy's outputs are to the full cache's.
 *
 * On logits (one position at a time, n_vocab floats each): the negative log
 * likelihood of the actual next token, KL(full || policy) and whether the two
 * argmaxes agree; an accumulator sums them over positions so perplexity, mean
 * KL and top-1 agreement come out at the end. On token sequences (greedy
 * generations): the first position where two differ, BLEU-4 and ROUGE-L F1.
 *
 * Everything is computed in double from the caller's floats; nothing is kept
 * between calls. Only evm_rouge_l allocates (its LCS row, through the counting
 * allocator); the rest works on borrowed memory and cannot fail. */
#ifndef TKV_EVAL_METRICS_H
#define TKV_EVAL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "tierkv.h"

/* log(sum_i exp(logits[i])), stable; -inf when n is 0 or all are -inf, NaN when
 * any logit is NaN. */
double evm_logsumexp(const float *logits, size_t n);
/* -log softmax(logits)[target]; +inf when target's probability is 0. */
double evm_nll(const float *logits, size_t n, int32_t target);
/* KL(P || Q) in nats for P = softmax(p_logits), Q = softmax(q_logits); exactly 0
 * when both arrays are equal; +inf when Q is 0 where P is not. */
double evm_kl(const float *p_logits, const float *q_logits, size_t n);
/* Index of the largest logit (the first of ties); 0 when n is 0. */
size_t evm_argmax(const float *logits, size_t n);
/* exp(nll_sum / n): the perplexity of n predictions; NaN when n is 0. */
double evm_ppl(double nll_sum, uint64_t n);

/* Sums over predicted positions of a policy run against the reference run. */
struct evm_acc {
	double nll;      /* sum of -log q(target), the policy's NLL (nats) */
	double nll_ref;  /* sum of -log p(target), the reference's */
	double kl;       /* sum of KL(p || q) (nats) */
	uint64_t top1;   /* positions where argmax p == argmax q */
	uint64_t n;      /* positions */
};

/* Adds one position: ref and pol are the two runs' logits (n_vocab each,
 * borrowed) for the same prefix, target the token that actually follows. */
void evm_acc_add(struct evm_acc *a, const float *ref, const float *pol, size_t n_vocab, int32_t target);
/* Adds b's sums into a. */
void evm_acc_merge(struct evm_acc *a, const struct evm_acc *b);

/* The first index where a and b differ, comparing n ids; n when equal. */
size_t evm_first_diff(const int32_t *a, const int32_t *b, size_t n);
/* Sentence BLEU of cand against ref (token ids), n-grams 1..max_n with uniform
 * weights (max_n 4 is BLEU-4; 1..8 accepted, others give NaN) and the brevity
 * penalty exp(1 - |ref|/|cand|) when cand is shorter. Smoothed as in Lin & Och
 * (2004): the precisions of n >= 2 are (matches + 1) / (n-grams + 1), so one
 * missing 4-gram does not zero the score; the unigram precision is not smoothed.
 * 0 for an empty cand or one with no unigram in ref; 1 for cand == ref.
 * Clipped counts are found by comparison, O(|cand| * (|cand| + |ref|) * max_n)
 * time and no memory. */
double evm_bleu(const int32_t *cand, size_t n_cand, const int32_t *ref, size_t n_ref, int max_n);
/* ROUGE-L F1 of cand against ref: with L their longest common subsequence,
 * P = L/|cand|, R = L/|ref|, F1 = 2PR/(P+R) (0 when L is 0; 1 when both are
 * empty). Needs min(|cand|, |ref|) + 1 counters from a (may be NULL): TKV_OK, or
 * TKV_ERR_NOMEM with *f1 untouched. */
int evm_rouge_l(const int32_t *cand, size_t n_cand, const int32_t *ref, size_t n_ref, struct tkv_alloc *a,
		double *f1);

#endif
