/* compact.c - compaction of a stream's loose pages (compact.h): packing in
 * place, rewriting into full-size pages, and the cost counters. */
#include "kv/compact.h"

#include <string.h>
#include <time.h>

#include "util/alloc.h"
#include "util/status.h"

/* Compaction's cost, summed over one call. */
struct compact_cost {
	uint64_t slots, bytes;
};

/* The full size of a stream's pages of a format. */
static uint32_t full_cap(const struct kv_stream *st, uint32_t fmt)
{
	return fmt == st->hot_fmt ? st->page_tokens : st->low_cap;
}

/* A group: a format, a rotation and a position width (rot holds
 * KV_PAGE_ROT and KV_PAGE_WIDE bits), so slots move only between pages of
 * the same kind and wide positions never into a narrow page. */
#define GROUP_FLAGS (KV_PAGE_ROT | KV_PAGE_WIDE)

static bool in_group(const struct kv_page *pg, uint32_t fmt, uint32_t rot)
{
	return pg->fmt == fmt && (uint32_t)(pg->flags & GROUP_FLAGS) == rot;
}

/* Pages whose slots compaction may move: private (not in the prefix tree),
 * partly filled. */
static int partial(const struct kv_page *pg)
{
	return pg->n_used > 0 && pg->n_used < pg->cap && !(pg->flags & KV_PAGE_FROZEN);
}

/* Private pages compaction rewrites: partly filled, or under full size. */
static bool loose(const struct kv_stream *st, const struct kv_page *pg)
{
	return pg->n_used > 0 && !(pg->flags & KV_PAGE_FROZEN) &&
	       (pg->n_used < pg->cap || pg->cap < full_cap(st, pg->fmt));
}

/* Scratch of in-place packing: rows of the largest page, and their
 * positions, score codes and sort indices. */
struct pack_buf {
	float *K, *V;
	int32_t *pos;
	uint16_t *score;
	uint32_t *idx;
};

/* Moves the last m slots of page a to the end of page b (same format and
 * rotation, b has room), in the pages' own (possibly rotated) space. Per-slot
 * formats copy exactly (f16 and q8 rows decode and re-encode to the same
 * bits); packed ones re-pack b with its slots and the new ones (sorted by
 * position when b keeps them so: kv_page_set_rows) on b's grid where it
 * covers them, as when the policy tops a page up. */
static void move_slots(struct kv_seq *s, struct kv_stream *st, struct kv_page *a, struct kv_page *b, uint32_t m,
		       const struct pack_buf *pb)
{
	uint32_t d = s->head_dim, na = a->n_used - m, nb = b->n_used;
	float *K = pb->K, *V = pb->V;

	if (kv_fmt_packed(b->fmt)) {
		kv_tier_load_k_slots(b->fmt, b->k, b->cap, d, 0, nb, K);
		kv_tier_load_v_slots(b->fmt, b->v, b->cap, d, 0, nb, V);
		kv_tier_load_k_slots(a->fmt, a->k, a->cap, d, na, m, K + (size_t)nb * d);
		kv_tier_load_v_slots(a->fmt, a->v, a->cap, d, na, m, V + (size_t)nb * d);
		for (uint32_t j = 0; j < nb; j++)
			pb->pos[j] = kv_slot_pos(b, j);
		for (uint32_t j = 0; j < m; j++)
			pb->pos[nb + j] = kv_slot_pos(a, na + j);
		memcpy(pb->score, kv_page_scores(b), nb * sizeof *pb->score);
		memcpy(pb->score + nb, kv_page_scores(a) + na, m * sizeof *pb->score);
		kv_page_set_rows(b, K, V, pb->pos, pb->score, nb + m, pb->idx);
		kv_tier_repack(b->fmt, b->k, b->v, b->cap, d, K, V, nb + m);
	} else {
		float k[KV_MAX_HEAD_DIM], v[KV_MAX_HEAD_DIM];

		for (uint32_t j = 0; j < m; j++) {
			kv_tier_load_k(a->fmt, a->k, a->cap, d, na + j, k);
			kv_tier_load_v(a->fmt, a->v, a->cap, d, na + j, v);
			kv_tier_store(b->fmt, b->k, b->v, b->cap, d, nb + j, k, v);
		}
		kv_slot_copy(b, nb, a, na, m);
	}
	kv_stream_set_used(s, st, b, nb + m);
	kv_stream_set_used(s, st, a, na);
}

/* Whether page b takes the positions of the slots a move from a would
 * bring (a's last ones, as many as b has room for). */
static bool takes_last(const struct kv_page *b, const struct kv_page *a)
{
	uint32_t m = a->n_used < b->cap - b->n_used ? a->n_used : b->cap - b->n_used;

	return kv_page_takes_slots(b, a, a->n_used - m, m);
}

/* In-place packing of one group, without new pages: slots of the emptiest
 * partial page move into the fullest partner, so each move empties a page or
 * fills one, until one partial page is left. */
static int pack_in_place(struct kv_seq *s, struct kv_stream *st, uint32_t fmt, uint32_t rot, struct compact_cost *cc)
{
	uint32_t d = s->head_dim, cap_max = 0, n_partial = 0;
	struct pack_buf pb = { NULL, NULL, NULL, NULL, NULL };
	int rc = TKV_OK;

	for (uint32_t i = 0; i < st->n_pages && n_partial < 2; i++)
		n_partial += in_group(st->pages[i], fmt, rot) && partial(st->pages[i]);
	if (n_partial < 2)
		return TKV_OK;
	if (kv_fmt_packed(fmt)) {
		for (uint32_t i = 0; i < st->n_pages; i++)
			if (in_group(st->pages[i], fmt, rot) && partial(st->pages[i]) && st->pages[i]->cap > cap_max)
				cap_max = st->pages[i]->cap;
		if (!cap_max)
			return TKV_OK;
		pb.K = tkv_malloc(s->alloc, (size_t)cap_max * d * sizeof(float));
		pb.V = tkv_malloc(s->alloc, (size_t)cap_max * d * sizeof(float));
		pb.pos = tkv_malloc(s->alloc, (size_t)cap_max * sizeof *pb.pos);
		pb.score = tkv_malloc(s->alloc, (size_t)cap_max * sizeof *pb.score);
		pb.idx = tkv_malloc(s->alloc, (size_t)cap_max * sizeof *pb.idx);
		if (!pb.K || !pb.V || !pb.pos || !pb.score || !pb.idx) {
			rc = TKV_ERR_NOMEM;
			goto out;
		}
	}
	for (;;) {
		struct kv_page *a = NULL, *b = NULL;
		uint32_t m;

		for (uint32_t i = 0; i < st->n_pages; i++) {
			struct kv_page *pi = st->pages[i];

			if (!in_group(pi, fmt, rot) || !partial(pi))
				continue;
			for (uint32_t j = 0; j < st->n_pages; j++) {
				struct kv_page *pj = st->pages[j];

				if (j == i || !in_group(pj, fmt, rot) || !partial(pj) || !takes_last(pj, pi))
					continue;
				if (!a || pi->n_used < a->n_used || (pi == a && pj->n_used > b->n_used)) {
					a = pi;
					b = pj;
				}
			}
		}
		if (!a)
			break;
		m = a->n_used < b->cap - b->n_used ? a->n_used : b->cap - b->n_used;
		move_slots(s, st, a, b, m, &pb);
		cc->slots += m;
		cc->bytes += kv_page_share(b, m);
	}
out:
	tkv_free(s->alloc, pb.idx);
	tkv_free(s->alloc, pb.score);
	tkv_free(s->alloc, pb.pos);
	tkv_free(s->alloc, pb.V);
	tkv_free(s->alloc, pb.K);
	return rc;
}

static size_t stream_page_bytes(const struct kv_stream *st)
{
	size_t b = 0;

	for (uint32_t i = 0; i < st->n_pages; i++)
		b += st->pages[i]->bytes;
	return b;
}

/* rebuild() found nothing worth rewriting */
#define KV_SKIP 1

/* A group's loose pages, measured. */
struct group {
	uint32_t n_loose;   /* loose pages */
	uint32_t T;         /* their slots */
	size_t slack;       /* their empty slots' share of their bytes */
	bool any_partial;   /* one of them is partly filled */
};

static struct group measure(const struct kv_stream *st, uint32_t fmt, uint32_t rot)
{
	struct group g = { 0, 0, 0, false };

	for (uint32_t i = 0; i < st->n_pages; i++) {
		const struct kv_page *pg = st->pages[i];

		if (in_group(pg, fmt, rot) && loose(st, pg)) {
			g.n_loose++;
			g.T += pg->n_used;
			g.any_partial |= pg->n_used < pg->cap;
			g.slack += kv_share(pg->bytes, pg->cap - pg->n_used, pg->cap);
		}
	}
	return g;
}

/* Where a run of the gathered slots came from (the donor of a new page's grid). */
struct slot_src {
	const struct kv_page *pg;
	uint32_t first, n;
};

/* A rebuild's scratch: the new pages and the group's slots in model space. */
struct rebuild_buf {
	struct kv_page **fresh;   /* [n_new] */
	struct slot_src *src;     /* [n_loose] */
	float *K, *V;             /* (T, d) */
	uint16_t *score;          /* (T) score codes */
	int32_t *pos;             /* (T) */
	uint32_t *order;          /* [n_loose] the loose pages' indices, by their least position */
	uint32_t n_order;
	uint32_t *idx;            /* (T) sort indices for bitmap pages */
};

static int buf_init(struct kv_seq *s, struct rebuild_buf *b, uint32_t n_new, uint32_t n_loose, uint32_t T)
{
	uint32_t d = s->head_dim;

	b->fresh = tkv_malloc(s->alloc, n_new * sizeof *b->fresh);
	b->K = tkv_malloc(s->alloc, (size_t)T * d * sizeof(float));
	b->V = tkv_malloc(s->alloc, (size_t)T * d * sizeof(float));
	b->pos = tkv_malloc(s->alloc, (size_t)T * sizeof *b->pos);
	b->score = tkv_malloc(s->alloc, (size_t)T * sizeof *b->score);
	b->src = tkv_malloc(s->alloc, (size_t)n_loose * sizeof *b->src);
	b->order = tkv_malloc(s->alloc, (size_t)n_loose * sizeof *b->order);
	b->idx = tkv_malloc(s->alloc, (size_t)T * sizeof *b->idx);
	return b->fresh && b->K && b->V && b->pos && b->score && b->src && b->order && b->idx ? TKV_OK
												  : TKV_ERR_NOMEM;
}

static void buf_free(struct kv_seq *s, struct rebuild_buf *b)
{
	tkv_free(s->alloc, b->idx);
	tkv_free(s->alloc, b->order);
	tkv_free(s->alloc, b->src);
	tkv_free(s->alloc, b->score);
	tkv_free(s->alloc, b->pos);
	tkv_free(s->alloc, b->V);
	tkv_free(s->alloc, b->K);
	tkv_free(s->alloc, b->fresh);
}

static int32_t least_pos(const struct kv_page *pg)
{
	int32_t lo = INT32_MAX;

	for (uint32_t j = 0; j < pg->n_used; j++)
		if (kv_slot_pos(pg, j) < lo)
			lo = kv_slot_pos(pg, j);
	return lo;
}

/* The order lift takes the group's loose pages in: by their least position,
 * so each new page gets neighbours (compact position offsets, pool.h); and
 * their slots' positions in that order into b->pos. */
static void plan_order(const struct kv_stream *st, uint32_t fmt, uint32_t rot, struct rebuild_buf *b)
{
	uint32_t t = 0;

	b->n_order = 0;
	for (uint32_t i = 0; i < st->n_pages; i++) {
		uint32_t k = b->n_order;
		int32_t lo;

		if (!in_group(st->pages[i], fmt, rot) || !loose(st, st->pages[i]))
			continue;
		lo = least_pos(st->pages[i]);
		/* insertion: a stream has few loose pages */
		for (; k > 0 && least_pos(st->pages[b->order[k - 1]]) > lo; k--)
			b->order[k] = b->order[k - 1];
		b->order[k] = i;
		b->n_order++;
	}
	for (uint32_t k = 0; k < b->n_order; k++) {
		const struct kv_page *pg = st->pages[b->order[k]];

		for (uint32_t j = 0; j < pg->n_used; j++)
			b->pos[t++] = kv_slot_pos(pg, j);
	}
}

/* A new page of stream st for gathered slots at positions pos[0, n): the
 * most compact position form that holds them, except for a page with room
 * that new tokens may fill (the stream's hot format, not rotated), which
 * takes any position. */
static struct kv_page *fresh_page(struct kv_seq *s, const struct kv_stream *st, uint32_t fmt, uint32_t rot,
				  uint32_t cap, const int32_t *pos, uint32_t n, int *why)
{
	int32_t lo = INT32_MAX, hi = INT32_MIN;
	uint32_t form = rot & KV_PAGE_WIDE;

	for (uint32_t j = 0; j < n; j++) {
		lo = pos[j] < lo ? pos[j] : lo;
		hi = pos[j] > hi ? pos[j] : hi;
	}
	if (n && (n == cap || fmt != st->hot_fmt || (rot & KV_PAGE_ROT)))
		form = kv_pos_form_cap(lo, hi, cap, form != 0, kv_fmt_packed(fmt));
	return kv_pool_get_span(s->pool, s->head_dim, fmt, cap, form, lo, hi, why);
}

/* Gathers the group's slots (in plan_order's order, whose positions b->pos
 * already has) into b and empties their pages, which stay in the stream
 * until the caller drops them, so their grids stay readable. Returns the
 * number of pages it came from. */
static uint32_t lift(struct kv_seq *s, struct kv_stream *st, uint32_t fmt, struct rebuild_buf *b)
{
	uint32_t d = s->head_dim, t = 0, n_src = 0;

	for (uint32_t i = 0; i < b->n_order; i++) {
		struct kv_page *pg = st->pages[b->order[i]];
		uint32_t n = pg->n_used;

		b->src[n_src++] = (struct slot_src){ pg, t, n };
		kv_tier_load_k_slots(fmt, pg->k, pg->cap, d, 0, n, b->K + (size_t)t * d);
		kv_tier_load_v_slots(fmt, pg->v, pg->cap, d, 0, n, b->V + (size_t)t * d);
		memcpy(b->score + t, kv_page_scores(pg), n * sizeof *b->score);
		t += n;
		kv_stream_set_used(s, st, pg, 0);
	}
	return n_src;
}

/* Writes gathered slots t..t+n-1 into new page pg. q4/q2 slots go on the
 * grid of the page most of them come from, so they keep their codes where it
 * covers the others. */
static void fill(struct kv_seq *s, struct kv_page *pg, uint32_t fmt, const struct rebuild_buf *b, uint32_t n_src,
		 uint32_t t, uint32_t n)
{
	uint32_t d = s->head_dim;
	float *K = b->K + (size_t)t * d, *V = b->V + (size_t)t * d;

	/* a bitmap page keeps its slots sorted: the same slots, so the donor
	 * below stands */
	kv_page_set_rows(pg, K, V, b->pos + t, b->score + t, n, b->idx);
	if (kv_fmt_packed(fmt)) {
		const struct kv_page *donor = NULL;
		uint32_t best = 0;

		for (uint32_t i = 0; i < n_src; i++) {
			const struct slot_src *r = &b->src[i];
			uint32_t lo = r->first > t ? r->first : t;
			uint32_t hi = r->first + r->n < t + n ? r->first + r->n : t + n;

			if (hi > lo && hi - lo > best) {
				best = hi - lo;
				donor = r->pg;
			}
		}
		if (donor) {
			kv_tier_copy_params(fmt, pg->k, pg->v, donor->k, donor->v, d);
			kv_tier_repack(fmt, pg->k, pg->v, pg->cap, d, K, V, n);
		} else {
			kv_tier_pack(fmt, pg->k, pg->v, pg->cap, d, K, V, n);
		}
	} else {
		for (uint32_t k = 0; k < n; k++)
			kv_tier_store(fmt, pg->k, pg->v, pg->cap, d, k, K + (size_t)k * d, V + (size_t)k * d);
	}
}

/* Rewrites the loose pages of one group into full-size pages and one
 * right-sized page (see kv_stream_compact). KV_SKIP when not worth it;
 * TKV_ERR_KV_FULL / TKV_ERR_NOMEM when a new page or scratch cannot be had:
 * nothing changed then. */
static int rebuild(struct kv_seq *s, struct kv_stream *st, uint32_t fmt, uint32_t rot, struct compact_cost *cc)
{
	struct group g = measure(st, fmt, rot);
	uint32_t M = full_cap(st, fmt), n_new = g.T / M + (g.T % M != 0), got = 0, n_src, t = 0;
	struct rebuild_buf b = { NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL };
	int why = TKV_OK;

	/* worth it when the empty slots pass a share of what the stream holds,
	 * or small pages have piled up */
	if (g.n_loose == 0 || (!g.any_partial && n_new >= g.n_loose) ||
	    (g.slack * KV_SLACK_SHARE <= stream_page_bytes(st) && g.n_loose < KV_UNTIDY_PAGES && g.T < M))
		return KV_SKIP;
	if (kv_stream_grow(s, st, st->n_pages + n_new))
		return TKV_ERR_NOMEM;
	if (buf_init(s, &b, n_new, g.n_loose, g.T)) {
		buf_free(s, &b);
		return TKV_ERR_NOMEM;
	}
	plan_order(st, fmt, rot, &b);
	/* the new pages first: the old ones go back once their slots are safe;
	 * the last one has the room a growing stream's page may have, so the
	 * next slots land there instead of in a new page to be merged again */
	for (; got < n_new; got++) {
		uint32_t cap = got < g.T / M ? M : kv_stream_tail_cap(s, st, fmt, g.T % M, M);
		uint32_t n = cap < g.T - got * M ? cap : g.T - got * M;

		if (!(b.fresh[got] = fresh_page(s, st, fmt, rot, cap, b.pos + (size_t)got * M, n, &why)))
			break;
	}
	if (got < n_new) {
		for (uint32_t j = 0; j < got; j++)
			kv_pool_put(s->pool, b.fresh[j]);
		buf_free(s, &b);
		return why;
	}
	n_src = lift(s, st, fmt, &b);
	for (uint32_t j = 0; j < n_new; j++) {
		struct kv_page *pg = b.fresh[j];
		uint32_t n = pg->cap < g.T - t ? pg->cap : g.T - t;

		fill(s, pg, fmt, &b, n_src, t, n);
		/* rewritten: not the pristine page of a prompt chunk any more */
		pg->flags |= (uint8_t)(rot | KV_PAGE_DIRTY);
		kv_pool_set_used(s->pool, pg, n);
		kv_stream_add_page(s, st, pg); /* cannot fail: the array has grown */
		cc->bytes += kv_page_share(pg, n);
		t += n;
	}
	cc->slots += g.T;
	buf_free(s, &b);
	return TKV_OK;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int kv_stream_compact(struct kv_seq *s, struct kv_stream *st)
{
	struct compact_cost cc = { 0, 0 };
	uint64_t t0 = now_ns();
	size_t before = stream_page_bytes(st), after;
	int rc = TKV_OK;

	/* whether a group is worth rewriting depends on the stream's total,
	 * which the other groups' rewrites lower: a second pass settles it, so
	 * a compaction right after another finds nothing to do */
	for (int pass = 0; pass < 2; pass++) {
		size_t was = stream_page_bytes(st);

		for (uint32_t fmt = 0; fmt < KV_FMT_ALL; fmt++) {
			for (uint32_t g = 0; g < 4; g++) {
				uint32_t rot = (g & 1 ? KV_PAGE_ROT : 0) | (g & 2 ? KV_PAGE_WIDE : 0);
				bool any = false;
				int r;

				for (uint32_t i = 0; i < st->n_pages && !any; i++)
					any = in_group(st->pages[i], fmt, rot) && loose(st, st->pages[i]);
				if (!any)
					continue;
				/* in place first (no new pages, fewest slots moved), then
				 * what is left is rewritten if it is worth it */
				if (pack_in_place(s, st, fmt, rot, &cc))
					rc = TKV_ERR_NOMEM;
				r = rebuild(s, st, fmt, rot, &cc);
				if (r == TKV_ERR_NOMEM)
					rc = TKV_ERR_NOMEM;
			}
		}
		kv_stream_drop_empty(s, st);
		if (stream_page_bytes(st) == was)
			break;
	}
	st->n_small = st->small_slots = 0;
	for (uint32_t i = 0; i < st->n_pages; i++)
		if (st->pages[i]->cap < full_cap(st, st->pages[i]->fmt) && !(st->pages[i]->flags & KV_PAGE_FROZEN)) {
			st->n_small++;
			st->small_slots += st->pages[i]->cap;
		}
	after = stream_page_bytes(st);
	if (cc.slots)
		kv_pool_note_compact(s->pool, cc.slots, cc.bytes, now_ns() - t0, before > after ? before - after : 0);
	return rc;
}

bool kv_stream_untidy(const struct kv_stream *st)
{
	return st->n_small >= KV_UNTIDY_PAGES || (st->n_small >= 2 && st->small_slots >= st->page_tokens);
}
