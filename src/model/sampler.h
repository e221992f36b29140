/* sampler.h - picks the next token from logits.
 *
 * Chain, in order (the order of llama.cpp's default chain):
 *   repetition penalty (last repeat_last_n accepted tokens; logit/p if > 0 else *p)
 *   -> top-k -> top-p (nucleus) -> min-p -> temperature -> draw.
 * temp <= 0 means greedy: argmax of the (penalised) logits, lowest id on ties;
 * no random number is drawn. The generator is a 64-bit PCG seeded from `seed`,
 * so the same seed and the same logits give the same tokens on every machine.
 *
 * Ownership: the sampler owns its scratch; logits passed in are borrowed and
 * may be modified in place. */
#ifndef TKV_MODEL_SAMPLER_H
#define TKV_MODEL_SAMPLER_H

#include <stdint.h>

#include "tierkv.h"

struct samp_params {
	float temp;           /* 0 = greedy; default 0.8 */
	int32_t top_k;        /* <= 0 = off; default 40 */
	float top_p;          /* >= 1 = off; default 0.95 */
	float min_p;          /* <= 0 = off; default 0.05 */
	float repeat_penalty; /* 1 = off; default 1.0 */
	int32_t repeat_last_n;/* history length for the penalty; default 64 */
	uint64_t seed;        /* default 0xC0FFEE; front ends pick a random one when asked */
};

struct samp;

struct samp_params samp_default_params(void);
/* TKV_ERR_ARG for out-of-range params (negative temp, top_p <= 0, min_p > 1,
 * repeat_penalty <= 0, n_vocab < 1); TKV_ERR_NOMEM. */
int samp_init(struct samp **out, const struct samp_params *p, int32_t n_vocab,
	      struct tkv_alloc *a, struct tkv_error *err);
void samp_free(struct samp *s);
/* Returns the chosen id in [0, n_vocab). logits has n_vocab entries and may be
 * modified. NaN logits are treated as -inf; if every logit is -inf/NaN, returns 0. */
int32_t samp_sample(struct samp *s, float *logits);
/* Records an id in the repetition history (prompt tokens too). */
void samp_accept(struct samp *s, int32_t id);
/* Forgets the history and reseeds. */
void samp_reset(struct samp *s, uint64_t seed);

#endif
