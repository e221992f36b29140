/* plan.h - layer plans: page size and budget share per layer.
 *
 * A plan (struct tkv_kv_layer_plan, tierkv.h) is applied to a sequence with
 * kv_seq_set_layer per layer. AUTO plans are chosen from the attention
 * entropy the sequence's streams accumulated (ent_sum / ent_n, summed over
 * the query heads of a KV head): a layer's effective span is exp(mean entropy
 * per query head), and relative to the geometric mean of the spans of all
 * layers it sets
 *   - the page size: half of page_tokens below 0.7 of it (narrow attention:
 *     fine pages, so cold pages bound fewer keys and are skipped more
 *     often, and cold keys are quantized in smaller groups), double above
 *     1.4 (wide attention: coarse pages, fewer pages to walk), else
 *     page_tokens, never below KV_PAGE_MIN;
 *   - the budget weight: the span over its mean, clamped to [1/4, 4]
 *     (the layer-level half of the adaptive policy's split). */
#ifndef TKV_KV_PLAN_H
#define TKV_KV_PLAN_H

#include <stdint.h>

#include "kv/seq.h"
#include "tierkv.h"

/* Mean attention entropy per query head of each layer's streams (nats; 0
 * where nothing was measured) into ent[n_layer]. */
void kv_plan_entropy(const struct kv_seq *s, uint32_t group, float *ent);
/* The AUTO plan for a sequence from its measured entropy: fills out
 * (mode FIXED, n_layer = s->n_layer) for pages of base page_tokens. */
void kv_plan_auto(const struct kv_seq *s, uint32_t group, uint32_t page_tokens, struct tkv_kv_layer_plan *out);
/* Sets every layer of a sequence to a FIXED plan (n_layer == s->n_layer). */
void kv_plan_apply(struct kv_seq *s, const struct tkv_kv_layer_plan *p);

#endif
