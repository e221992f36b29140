/* compact.h - compaction: a stream's loose pages repacked (defragmentation).
 *
 * Evictions and demotions leave holes, and a growing stream leaves small
 * pages (seq.h, dynamic chunking); a page only returns to the pool once
 * empty. Compaction gathers them back into full pages. */
#ifndef TKV_KV_COMPACT_H
#define TKV_KV_COMPACT_H

#include <stdbool.h>

#include "kv/seq.h"

/* Repacks a stream's loose pages (defragmentation). Per format and rotation,
 * the loose pages are the private ones partly filled or smaller than the
 * format's full size (page_tokens hot, low_cap warm/cold: pages a growing
 * stream or an earlier compaction right-sized). First the group is packed in
 * place (no new pages): slots of the emptiest partial page move into the
 * fullest partner until one partial page is left. Then, when the loose
 * pages' empty slots still come to more than 1/KV_SLACK_SHARE of the stream's
 * page bytes, or there are KV_UNTIDY_PAGES of them, their slots are rewritten
 * into full-size pages and one right-sized page for the rest (the slots left
 * and the room kv_stream_tail_cap allows a growing stream), new pages taken
 * before the old ones go back (when the pool cannot give them, the group
 * stays as packed in place). Slots keep their positions and
 * scores; per-slot formats move bit for bit, q4/q2 slots are re-packed
 * into each new page on the grid of the page most of them come from
 * (kv_tier_repack: its slots keep their codes where that grid covers the
 * others). Frozen (shared) pages are left alone.
 * The slots and bytes moved and the time taken are added to the pool's
 * compaction counters. TKV_ERR_NOMEM when scratch cannot be had: q4/q2 pages
 * then stay as they are, the rest is compacted. */
int kv_stream_compact(struct kv_seq *s, struct kv_stream *st);
/* Whether a stream has gathered enough small pages to be worth a
 * compaction: two or more holding a full-precision page's worth of slots, or
 * KV_UNTIDY_PAGES of them. */
#define KV_UNTIDY_PAGES 8
/* Compaction rewrites a group's loose pages when their empty slots pass
 * 1/KV_SLACK_SHARE of the stream's page bytes (tuned with test_kv_frag: 1/32
 * moved 60% more slots for the same fragmentation). */
#define KV_SLACK_SHARE 16
bool kv_stream_untidy(const struct kv_stream *st);

#endif
