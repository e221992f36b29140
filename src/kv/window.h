/* window.h - sliding-window layers (Mistral, Gemma 2/3's local layers).
 *
 * A layer with a window W is a layer plan of its own: a query at position p
 * sees the keys at p - W < pos <= p (attn.c masks the rest, as llama.cpp's
 * standard sliding window does), so after every forward pass its streams
 * keep exactly the slots the next query can see - positions above
 * n_pos - W - and return the rest, with no policy round: the policy neither
 * scores them out nor counts them against its budget, which goes whole to
 * the global layers (kv_policy_split_budget). Frozen prefix pages are shared
 * and stay; attention masks their old slots. */
#ifndef TKV_KV_WINDOW_H
#define TKV_KV_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/seq.h"

/* Sets each layer's window (window[n_layer], 0 = global) on its streams. */
void kv_window_set(struct kv_seq *s, const uint32_t *window);
/* Whether any layer of the sequence slides. */
bool kv_window_any(const struct kv_seq *s);
/* Returns the slots of a sliding stream the next query (at s->n_pos) cannot
 * see; no-op for a global one. */
void kv_window_slide(struct kv_seq *s, struct kv_stream *st);

#endif
