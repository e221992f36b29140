/* window.c - sliding-window layers keep exactly their window (window.h). */
#include "kv/window.h"

void kv_window_set(struct kv_seq *s, const uint32_t *window)
{
	for (uint32_t l = 0; l < s->n_layer; l++)
		for (uint32_t h = 0; h < s->n_kv_head; h++)
			kv_seq_stream(s, l, h)->window = window[l];
}

bool kv_window_any(const struct kv_seq *s)
{
	for (uint32_t l = 0; l < s->n_layer; l++)
		if (s->streams[(size_t)l * s->n_kv_head].window)
			return true;
	return false;
}

void kv_window_slide(struct kv_seq *s, struct kv_stream *st)
{
	int64_t lo; /* the lowest position the next query sees */
	bool dropped = false;

	if (!st->window)
		return;
	lo = (int64_t)s->n_pos - st->window + 1;
	if (lo <= 0)
		return;
	for (uint32_t i = 0; i < st->n_pages; i++) {
		struct kv_page *pg = st->pages[i];

		if (pg->flags & KV_PAGE_FROZEN)
			continue;
		/* from the end: the slot moved into j has been looked at */
		for (uint32_t j = pg->n_used; j-- > 0;)
			if (kv_slot_pos(pg, j) < lo) {
				kv_stream_remove_slot(s, st, i, j);
				dropped = true;
			}
	}
	if (dropped)
		kv_stream_drop_empty(s, st);
}
