/* sampler.c - next-token selection: repetition penalty, top-k, top-p, min-p,
 * temperature, draw.
 *
 * Candidates are kept as an index list into the caller's logits (scratch
 * s->idx, n_vocab entries). Ordering is a strict total order: higher logit
 * first, lower id first among equal logits, so every cut (top-k, top-p) is
 * deterministic and top-k = 1 picks exactly what greedy picks.
 *
 * Top-k uses a heap partial sort: O(n log k) worst case, and for random logit
 * order most of the 150k candidates are rejected by one compare against the
 * heap root. Top-p without top-k sorts a growing prefix (64, 128, ... ) until
 * the prefix holds mass >= p, so a peaked distribution never pays a full sort.
 *
 * top-p and min-p both keep a prefix of the descending list; min-p's threshold
 * (p >= min_p * p_max) is invariant to renormalisation, so applying top-p then
 * min-p (the llama.cpp order) keeps the shorter of the two prefixes. We filter
 * by min-p first (a linear pass) and then run top-p against the normaliser of
 * the pre-min-p set, which gives the same set with less sorting.
 *
 * Random numbers: PCG32 (PCG-XSH-RR, 64-bit state, 32-bit output, O'Neill
 * 2014), seeded like pcg32_srandom_r(seed, SAMP_PCG_STREAM). A uniform double
 * in [0, 1) takes two outputs a, b: ((a >> 5) * 2^26 + (b >> 6)) / 2^53. */
#include "model/sampler.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "util/alloc.h"
#include "util/status.h"

#define SAMP_PCG_MULT 6364136223846793005ULL
#define SAMP_PCG_STREAM 0xda3e39cb94b95bdbULL /* the PCG reference default */
#define SAMP_TOP_P_FIRST 64                   /* first prefix sorted for top-p */

struct samp {
	struct samp_params p;
	int32_t n_vocab;
	struct tkv_alloc *a;

	uint64_t rng_state; /* PCG32 state */
	uint64_t rng_inc;   /* PCG32 stream increment (odd) */

	int32_t *hist;      /* (repeat_last_n) ring of accepted ids, or NULL */
	int32_t hist_len;   /* valid entries in hist */
	int32_t hist_pos;   /* next slot to write */

	uint32_t *seen;     /* (n_vocab) penalty dedupe stamps, or NULL */
	uint32_t seen_gen;  /* current stamp value */

	int32_t *idx;       /* (n_vocab) candidate ids */
	float *w;           /* (n_vocab) draw weights, parallel to idx */
};

/* ---- PCG32 ------------------------------------------------------------- */

static uint32_t samp_pcg_next(struct samp *s)
{
	uint64_t old = s->rng_state;
	uint32_t xorshifted, rot;

	s->rng_state = old * SAMP_PCG_MULT + s->rng_inc;
	xorshifted = (uint32_t)(((old >> 18) ^ old) >> 27);
	rot = (uint32_t)(old >> 59);
	return (xorshifted >> rot) | (xorshifted << ((32 - rot) & 31));
}

static void samp_pcg_seed(struct samp *s, uint64_t seed)
{
	s->rng_state = 0;
	s->rng_inc = (SAMP_PCG_STREAM << 1) | 1;
	samp_pcg_next(s);
	s->rng_state += seed;
	samp_pcg_next(s);
}

/* Uniform in [0, 1) with 53 random bits. */
static double samp_uniform(struct samp *s)
{
	uint32_t a = samp_pcg_next(s) >> 5;
	uint32_t b = samp_pcg_next(s) >> 6;

	return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

/* ---- params and lifetime ----------------------------------------------- */

struct samp_params samp_default_params(void)
{
	struct samp_params p = {
		.temp = 0.8f,
		.top_k = 40,
		.top_p = 0.95f,
		.min_p = 0.05f,
		.repeat_penalty = 1.0f,
		.repeat_last_n = 64,
		.seed = 0xC0FFEE,
	};
	return p;
}

static int samp_check_params(const struct samp_params *p, int32_t n_vocab,
			     struct tkv_error *err)
{
	/* Written as !(x ok) so NaN fails every check. */
	if (n_vocab < 1)
		return tkv_errf(err, TKV_ERR_ARG, "sampler: n_vocab %d must be >= 1",
				(int)n_vocab);
	if (!(p->temp >= 0.0f))
		return tkv_errf(err, TKV_ERR_ARG,
				"sampler: temp %g must be >= 0 (0 = greedy)", (double)p->temp);
	if (!(p->top_p > 0.0f))
		return tkv_errf(err, TKV_ERR_ARG,
				"sampler: top_p %g must be > 0 (>= 1 turns it off)",
				(double)p->top_p);
	if (!(p->min_p <= 1.0f) || isnan(p->min_p))
		return tkv_errf(err, TKV_ERR_ARG,
				"sampler: min_p %g must be <= 1 (<= 0 turns it off)",
				(double)p->min_p);
	if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
		return tkv_errf(err, TKV_ERR_ARG,
				"sampler: repeat_penalty %g must be finite and > 0 (1 = off)",
				(double)p->repeat_penalty);
	if (p->repeat_last_n < 0)
		return tkv_errf(err, TKV_ERR_ARG,
				"sampler: repeat_last_n %d must be >= 0 (0 = off)",
				(int)p->repeat_last_n);
	return TKV_OK;
}

int samp_init(struct samp **out, const struct samp_params *p, int32_t n_vocab,
	      struct tkv_alloc *a, struct tkv_error *err)
{
	struct samp *s;
	int rc;

	if (!out || !p)
		return tkv_errf(err, TKV_ERR_ARG, "sampler: out and params must not be NULL");
	*out = NULL;
	rc = samp_check_params(p, n_vocab, err);
	if (rc)
		return rc;

	s = tkv_calloc(a, 1, sizeof *s);
	if (!s)
		goto out_nomem;
	s->p = *p;
	s->n_vocab = n_vocab;
	s->a = a;

	s->idx = tkv_malloc(a, (size_t)n_vocab * sizeof *s->idx);
	if (!s->idx)
		goto out_free_samp;
	s->w = tkv_malloc(a, (size_t)n_vocab * sizeof *s->w);
	if (!s->w)
		goto out_free_samp;
	if (p->repeat_penalty != 1.0f && p->repeat_last_n > 0) {
		s->hist = tkv_malloc(a, (size_t)p->repeat_last_n * sizeof *s->hist);
		if (!s->hist)
			goto out_free_samp;
		s->seen = tkv_calloc(a, (size_t)n_vocab, sizeof *s->seen);
		if (!s->seen)
			goto out_free_samp;
	}
	samp_pcg_seed(s, p->seed);
	*out = s;
	return TKV_OK;

out_free_samp:
	samp_free(s);
out_nomem:
	return tkv_errf(err, TKV_ERR_NOMEM,
			"sampler: out of memory allocating scratch for %d-token vocabulary",
			(int)n_vocab);
}

void samp_free(struct samp *s)
{
	if (!s)
		return;
	tkv_free(s->a, s->seen);
	tkv_free(s->a, s->hist);
	tkv_free(s->a, s->w);
	tkv_free(s->a, s->idx);
	tkv_free(s->a, s);
}

void samp_accept(struct samp *s, int32_t id)
{
	/* Out-of-range ids cannot be penalised; they are ignored. */
	if (!s || !s->hist || id < 0 || id >= s->n_vocab)
		return;
	s->hist[s->hist_pos] = id;
	s->hist_pos = (s->hist_pos + 1) % s->p.repeat_last_n;
	if (s->hist_len < s->p.repeat_last_n)
		s->hist_len++;
}

void samp_reset(struct samp *s, uint64_t seed)
{
	if (!s)
		return;
	s->hist_len = 0;
	s->hist_pos = 0;
	samp_pcg_seed(s, seed);
}

/* ---- chain steps ------------------------------------------------------- */

/* Each distinct id in the history is penalised once (llama.cpp semantics). */
static void samp_penalize(struct samp *s, float *logits)
{
	float pen = s->p.repeat_penalty;
	int32_t i;

	if (!s->hist || s->hist_len == 0)
		return;
	if (++s->seen_gen == 0) { /* stamp wrapped: forget all old stamps */
		memset(s->seen, 0, (size_t)s->n_vocab * sizeof *s->seen);
		s->seen_gen = 1;
	}
	for (i = 0; i < s->hist_len; i++) {
		int32_t id = s->hist[i];
		float *l = &logits[id];

		if (s->seen[id] == s->seen_gen)
			continue;
		s->seen[id] = s->seen_gen;
		*l = *l > 0.0f ? *l / pen : *l * pen;
	}
}

/* NaN -> -inf; +inf -> FLT_MAX so softmax arithmetic stays finite. */
static void samp_sanitize(float *logits, int32_t n)
{
	int32_t i;

	for (i = 0; i < n; i++) {
		if (isnan(logits[i]))
			logits[i] = -INFINITY;
		else if (logits[i] == INFINITY)
			logits[i] = FLT_MAX;
	}
}

static int32_t samp_argmax(const float *logits, int32_t n)
{
	int32_t i, best = 0;

	for (i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

/* True if id a ranks strictly before id b. */
static inline int samp_before(const float *l, int32_t a, int32_t b)
{
	return l[a] > l[b] || (l[a] == l[b] && a < b);
}

/* Min-heap by rank (root = worst kept candidate) over h[0..n). */
static void samp_sift_down(const float *l, int32_t *h, int32_t n, int32_t i)
{
	int32_t v = h[i];

	for (;;) {
		int32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && samp_before(l, h[c], h[c + 1]))
			c++;
		if (!samp_before(l, v, h[c]))
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = v;
}

/* Moves the k best of idx[0..n) to idx[0..k), sorted best first; 1 <= k <= n.
 * The order of idx[k..n) is unspecified afterwards. */
static void samp_partial_sort(const float *l, int32_t *idx, int32_t n, int32_t k)
{
	int32_t i;

	for (i = k / 2 - 1; i >= 0; i--)
		samp_sift_down(l, idx, k, i);
	for (i = k; i < n; i++) {
		if (samp_before(l, idx[i], idx[0])) {
			int32_t t = idx[0];

			idx[0] = idx[i];
			idx[i] = t;
			samp_sift_down(l, idx, k, 0);
		}
	}
	/* Heap sort: pop the worst to the back; the array ends best first. */
	for (i = k - 1; i > 0; i--) {
		int32_t t = idx[0];

		idx[0] = idx[i];
		idx[i] = t;
		samp_sift_down(l, idx, i, 0);
	}
}

/* Number of leading candidates whose mass reaches p * z (at least 1), sorting
 * a growing prefix as needed. On return idx[0..result) is sorted best first. */
static int32_t samp_top_p(const float *l, int32_t *idx, int32_t n, int sorted,
			  float lmax, double z, float top_p)
{
	double target = (double)top_p * z;
	int32_t m = sorted ? n : (n < SAMP_TOP_P_FIRST ? n : SAMP_TOP_P_FIRST);
	int32_t done = 0;
	double cum = 0.0;

	for (;;) {
		int32_t i;

		if (!sorted)
			samp_partial_sort(l, idx, n, m);
		/* idx[0..done) is unchanged by a larger partial sort (same total
		 * order), so the running sum carries over. */
		for (i = done; i < m; i++) {
			cum += exp((double)l[idx[i]] - (double)lmax);
			if (cum >= target)
				return i + 1;
		}
		done = m;
		if (m == n)
			return n;
		m = m > n / 2 ? n : 2 * m;
	}
}

/* ---- the chain --------------------------------------------------------- */

int32_t samp_sample(struct samp *s, float *logits)
{
	const struct samp_params *p;
	int32_t i, last, n = 0;
	int sorted = 0;
	float lmax;
	double sum, u;

	if (!s || !logits)
		return 0;
	p = &s->p;

	samp_penalize(s, logits);
	samp_sanitize(logits, s->n_vocab);
	if (p->temp <= 0.0f)
		return samp_argmax(logits, s->n_vocab);

	for (i = 0; i < s->n_vocab; i++)
		if (logits[i] != -INFINITY)
			s->idx[n++] = i;
	if (n == 0)
		return 0;

	if (p->top_k > 0 && p->top_k < n) {
		samp_partial_sort(logits, s->idx, n, p->top_k);
		n = p->top_k;
		sorted = 1;
	}

	lmax = logits[s->idx[0]];
	if (!sorted)
		for (i = 1; i < n; i++)
			if (logits[s->idx[i]] > lmax)
				lmax = logits[s->idx[i]];

	/* Normaliser of the post-top-k set, for top-p; see the head comment. */
	sum = 0.0;
	if (p->top_p < 1.0f)
		for (i = 0; i < n; i++)
			sum += exp((double)logits[s->idx[i]] - (double)lmax);

	if (p->min_p > 0.0f) {
		float thr = lmax + logf(p->min_p);
		int32_t kept = 0;

		for (i = 0; i < n; i++)
			if (logits[s->idx[i]] >= thr)
				s->idx[kept++] = s->idx[i];
		n = kept; /* >= 1: the max always passes */
	}

	if (p->top_p < 1.0f && n > 1)
		n = samp_top_p(logits, s->idx, n, sorted, lmax, sum, p->top_p);

	if (n == 1)
		return s->idx[0];

	sum = 0.0;
	for (i = 0; i < n; i++) {
		s->w[i] = expf((logits[s->idx[i]] - lmax) / p->temp);
		sum += s->w[i];
	}
	/* If rounding leaves u >= 0 after the scan, the last token with a
	 * nonzero weight wins (the max has weight 1, so there is one). */
	u = samp_uniform(s) * sum;
	last = 0;
	for (i = 0; i < n; i++) {
		if (s->w[i] <= 0.0f)
			continue;
		last = i;
		u -= s->w[i];
		if (u < 0.0)
			break;
	}
	return s->idx[last];
}
