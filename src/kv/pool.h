/* pool.h - the KV page pool: one byte budget, pages allocated on demand.
 *
 * A page holds up to `cap` token slots of one (sequence, layer, KV head) stream
 * in one storage format (tier.h). Layout of a page (one allocation, starting
 * at a 64-byte boundary; K and V start at 32-byte boundaries):
 *
 *   struct kv_page           header, 32 bytes (this struct)
 *   K region                 kv_tier_k_bytes(fmt, cap, d), right after it
 *   V region                 kv_tier_v_bytes(fmt, cap, d)
 *   score[cap]               importance of each slot (kept by the policies):
 *                            uint16_t codes, kv_score_enc / kv_score_dec
 *   pos[cap]                 original position of each slot (keys are stored
 *                            after RoPE at that position), exact, at a 4-byte
 *                            boundary, in the page's position form:
 *                              KV_PAGE_POS8  uint8_t offsets from pos_base
 *                              (neither)     uint16_t
 *                              KV_PAGE_WIDE  int32_t
 *                            or, in a page of form KV_PAGE_POSBM, instead:
 *   bits[words]              uint64_t, at an 8-byte boundary, ending the page:
 *                            bit i set when a slot is at position pos_base + i;
 *                            slot j is at the j-th set bit (slots in position
 *                            order), exactly n_used bits set
 *
 * Metadata is 3 bytes a slot with offsets (4 with uint16_t positions, 6 in a
 * wide page) and 32 bytes a page; a bitmap page has 2 bytes a slot (the
 * score) and a bit per position its range spans (kv_page_bm_bytes, counted
 * as metadata of the page as a whole). Slot positions go through kv_slot_pos / kv_slot_set_pos
 * and scores through kv_slot_score / kv_slot_set_score, never through the
 * arrays directly.
 *
 * Positions: the form is fixed when a page is made (kv_pool_get_form) and
 * says which positions it takes (kv_page_takes_pos): an offset page
 * pos_base..pos_base+255, a narrow page 0..65535 (KV_POS16_LIMIT), a wide one
 * any. Pages made for slots whose positions are known (warm and cold pages
 * the policy fills, compaction's rewrites, stored prefixes) take offsets
 * when those span fewer than 256 positions; pages new tokens go into are
 * narrow, and a stream whose sequence passes KV_POS16_LIMIT takes wide pages
 * from then on (seq.h). A position is never rounded: masks and RoPE see the
 * one the token had.
 *
 * Bitmaps (KV_PAGE_POSBM) are for q4/q2 pages (kv_fmt_packed), which are
 * always written whole (kv_tier_pack / kv_tier_repack): whoever writes one
 * sorts its slots by position first and sets their positions in that order
 * (kv_rows_sort in seq.h); a removal moves the later slots down
 * (kv_stream_remove_slot) instead of moving the last one into the hole. A
 * page takes the form when its bitmap is smaller than its positions would
 * be (kv_pos_form_cap): a cold page of 64 slots spread over 500 positions
 * keeps them in 64 bytes instead of 128.
 *
 * Scores: an unsigned 16-bit float, 6 bits of exponent and 10 of mantissa,
 * i.e. log-scaled in octaves from 2^-32 to 2^32 with 1024 linear steps in
 * each (relative step 2^-10, rounding to nearest: at most 2^-11 of the value);
 * code 0 is 0, smaller and negative values go to 0, larger ones to the
 * largest code.
 *
 * Pages of a stream have any cap: full-size pages of the layer's page size,
 * small pages a growing stream takes (seq.h, dynamic chunking) and
 * right-sized pages compaction leaves.
 *
 * Slots 0..n_used-1 are filled; a page never has holes (removing a slot moves
 * the last one into its place). The pool counts every byte it hands out: a
 * page costs kv_page_bytes() against the budget, metadata included, so
 * "allocated" is what the process really holds for the cache. "used" is the
 * filled share of each page (bytes * n_used / cap); allocated - used is the
 * fragmentation. kv_bytes counts the K and V regions the same way: the figure
 * comparable with a plain f16 cache.
 *
 * Thread safety: get/put/set_used/stats take the pool's lock. */
#ifndef TKV_KV_POOL_H
#define TKV_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kv/tier.h"
#include "tierkv.h"

/* The largest head size the cache stores; the model loader refuses larger heads,
 * so per-head scratch buffers in kv/ are arrays of this size. */
#define KV_MAX_HEAD_DIM 512
/* The most query heads that share one KV head (GQA group); the policy refuses
 * more, so attention's per-head arrays are of this size. */
#define KV_MAX_GROUP 64

enum kv_page_flags {
	KV_PAGE_ROT = 1,     /* K and V stored rotated (tier.h) */
	KV_PAGE_FROZEN = 2,  /* in the prefix tree: read-only for every holder */
	KV_PAGE_DIRTY = 4,   /* a slot was rewritten in place (no longer pristine) */
	KV_PAGE_WIDE = 8,    /* positions are int32_t (else uint16_t, below KV_POS16_LIMIT) */
	KV_PAGE_POS8 = 16,   /* positions are uint8_t offsets from pos_base */
	KV_PAGE_POSBM = 32,  /* positions are a bitmap from pos_base (slots sorted) */
};

/* The bits of a page's flags that say how it stores positions: its position
 * form, fixed when the page is made (kv_pool_get_form). */
#define KV_POS_FORMS (KV_PAGE_WIDE | KV_PAGE_POS8 | KV_PAGE_POSBM)

/* Positions a narrow page can hold: 0..KV_POS16_LIMIT-1. */
#define KV_POS16_LIMIT 65536

/* The largest slot count of a page (cap and n_used are 16-bit). */
#define KV_PAGE_MAX_CAP 4096

struct kv_page {
	void *v;             /* V region */
	uint32_t bytes;      /* what this page costs against the budget (< 2^32: at
			      * most 4096 slots of 512 f32 channels, K and V) */
	uint32_t kv_bytes;   /* its K and V regions */
	uint8_t fmt;         /* enum kv_fmt */
	uint8_t flags;       /* enum kv_page_flags */
	uint16_t refs;       /* holders: streams and the prefix tree (1 when private) */
	uint16_t cap;        /* slots in this page, 1..KV_PAGE_MAX_CAP */
	uint16_t n_used;     /* slots filled, 0..n_used-1 */
	uint16_t head_dim;   /* at most KV_MAX_HEAD_DIM */
	uint16_t pos_base;   /* KV_PAGE_POS8 / POSBM: what the offsets / bits count from */
	uint32_t meta_off;   /* offset of pos[cap] from the page's start; score[cap] follows */
	_Alignas(32) unsigned char k[]; /* K region */
};
_Static_assert(sizeof(struct kv_page) == 32, "a page header is 32 bytes");

struct kv_pool_params {
	size_t budget;        /* bytes; 0 = unlimited */
	uint32_t page_tokens; /* slots of full-precision pages; default 16 */
	uint32_t fmt;         /* full-precision format; default KV_FMT_F16 */
};

struct kv_pool_stats {
	size_t budget;            /* 0 = unlimited */
	size_t allocated;         /* bytes of live pages (metadata included) */
	size_t used;              /* filled share of allocated */
	size_t peak_allocated;    /* high-water mark of allocated */
	size_t n_pages;           /* live pages */
	size_t kv_bytes;          /* filled share of the K and V regions */
	size_t meta_bytes;        /* positions and scores of filled slots, and the
				   * position bitmaps of live pages */
	size_t fixed_bytes;       /* headers and alignment padding of live pages
				   * (allocated - kv_bytes - meta_bytes - fixed_bytes:
				   * empty slots, the fragmentation) */
	size_t fmt_bytes[KV_FMT_ALL];      /* allocated bytes per format */
	size_t fmt_kv_bytes[KV_FMT_ALL];   /* filled K+V bytes per format */
	size_t fmt_slots[KV_FMT_ALL];      /* filled slots per format */
	uint64_t pages_allocated; /* pages handed out so far */
	uint64_t pages_refused;   /* requests refused by the budget */
	/* compaction (kv_stream_compact): its cost so far */
	uint64_t compactions;     /* stream compactions that moved slots */
	uint64_t compact_slots;   /* slots moved */
	uint64_t compact_bytes;   /* K+V bytes written for them (in their new pages) */
	uint64_t compact_ns;      /* time spent compacting, all threads summed */
	size_t compact_freed;     /* page bytes compactions returned (net of new pages) */
};

struct kv_pool;

struct kv_pool_params kv_pool_default_params(void);
/* TKV_ERR_ARG for page_tokens 0 or > 4096 or a format that is not f16/f32. */
int kv_pool_init(struct kv_pool **out, const struct kv_pool_params *p, struct tkv_alloc *a,
		 struct tkv_error *err);
/* Every page must have been returned first; pages still out stay counted in
 * the allocator. */
void kv_pool_free(struct kv_pool *p);

/* Bytes a page of this shape costs against the budget (wide: int32_t
 * positions) / its K+V regions. */
size_t kv_page_bytes(uint32_t cap, uint32_t head_dim, uint32_t fmt);
size_t kv_page_bytes_width(uint32_t cap, uint32_t head_dim, uint32_t fmt, bool wide);
/* ... with positions of form `form` (KV_POS_FORMS bits; kv_pos_form; a bitmap:
 * kv_page_bytes_bm). */
size_t kv_page_bytes_form(uint32_t cap, uint32_t head_dim, uint32_t fmt, uint32_t form);
size_t kv_page_kv_bytes(uint32_t cap, uint32_t head_dim, uint32_t fmt);
/* ... of a page whose positions are a bitmap of `words` words (KV_PAGE_POSBM). */
size_t kv_page_bytes_bm(uint32_t cap, uint32_t head_dim, uint32_t fmt, uint32_t words);

/* floor(bytes * n / cap) for n <= cap, exact in ISO C integers: with
 * bytes = q * cap + r, it is q * n + r * n / cap, and r * n < cap^2 <= 2^64. */
static inline size_t kv_share(size_t bytes, uint32_t n, uint32_t cap)
{
	return bytes / cap * n + (size_t)((uint64_t)(bytes % cap) * n / cap);
}

/* The filled share of a page's K+V regions with n slots used. */
static inline size_t kv_page_share(const struct kv_page *pg, uint32_t n)
{
	return kv_share(pg->kv_bytes, n, pg->cap);
}

/* Whether `bytes` more fit under the budget now. */
int kv_pool_can_fit(struct kv_pool *p, size_t bytes);
/* A new empty page; NULL when the budget is exhausted or the allocator fails
 * (*why = TKV_ERR_KV_FULL or TKV_ERR_NOMEM). Ownership: transferred to the
 * caller until kv_pool_put. */
struct kv_page *kv_pool_get(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, uint32_t cap, int *why);
/* The same with int32_t positions when wide (any position), uint16_t ones
 * (below KV_POS16_LIMIT) when not. */
struct kv_page *kv_pool_get_width(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, uint32_t cap, bool wide,
				  int *why);
/* The same with positions of form `form` (KV_POS_FORMS bits; kv_pos_form):
 * with KV_PAGE_POS8 the page takes positions base..base+255 (base below
 * KV_POS16_LIMIT). */
struct kv_page *kv_pool_get_form(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, uint32_t cap, uint32_t form,
				 int32_t base, int *why);
/* The same for slots at positions lo..hi (lo <= hi) in a page of position
 * form `form`: with KV_PAGE_POSBM the bitmap spans lo..hi rounded up to
 * 64 positions (lo below KV_POS16_LIMIT), otherwise as kv_pool_get_form
 * with base lo. */
struct kv_page *kv_pool_get_span(struct kv_pool *p, uint32_t head_dim, uint32_t fmt, uint32_t cap, uint32_t form,
				 int32_t lo, int32_t hi, int *why);
/* A new empty page of the same shape as src: format, cap, position form
 * and range, and bytes (for copies of it). */
struct kv_page *kv_pool_get_like(struct kv_pool *p, const struct kv_page *src, int *why);
/* Returns a page (may be NULL) whatever its holders. */
void kv_pool_put(struct kv_pool *p, struct kv_page *pg);
/* Drops one holder; the last one returns the page. Holders are counted by the
 * engine's single scheduling thread, so refs need no atomics. */
void kv_page_unref(struct kv_pool *p, struct kv_page *pg);
/* Sets pg->n_used to n, keeping the used/kv_bytes/fmt_slots counts exact. */
void kv_pool_set_used(struct kv_pool *p, struct kv_page *pg, uint32_t n);
void kv_pool_stats(struct kv_pool *p, struct kv_pool_stats *out);
/* Forgets the pages handed out and refused so far, compaction's counters
 * and the high-water mark (now: what is allocated): after work that is not
 * the user's (the head probe). */
void kv_pool_forget(struct kv_pool *p);
/* Adds one compaction's cost to the counters. */
void kv_pool_note_compact(struct kv_pool *p, uint64_t slots, uint64_t bytes, uint64_t ns, size_t freed);
uint32_t kv_pool_page_tokens(const struct kv_pool *p);
uint32_t kv_pool_fmt(const struct kv_pool *p);
size_t kv_pool_budget(const struct kv_pool *p);

/* ---- slot metadata ---- */

/* Score codes (see the top of this file). */
#define KV_SCORE_EBIAS (127 - 32) /* the float exponent of code exponent 0 */

static inline uint16_t kv_score_enc(float x)
{
	uint32_t b;

	if (!(x >= 0x1p-32f)) /* 0, negative, NaN, or below the range */
		return 0;
	memcpy(&b, &x, sizeof b);
	b = (b + (1u << 12)) >> 13; /* round the mantissa to 10 bits */
	if (b >= (KV_SCORE_EBIAS + 64u) << 10)
		return UINT16_MAX;
	return (uint16_t)(b - (KV_SCORE_EBIAS << 10));
}

static inline float kv_score_dec(uint16_t c)
{
	uint32_t b = ((uint32_t)c + (KV_SCORE_EBIAS << 10)) << 13;
	float x;

	memcpy(&x, &b, sizeof x);
	return c ? x : 0.0f;
}

static inline bool kv_page_wide(const struct kv_page *pg)
{
	return (pg->flags & KV_PAGE_WIDE) != 0;
}

/* Bytes of one position in a page of position form `form` (KV_POS_FORMS bits;
 * a bitmap has none per slot). */
static inline uint32_t kv_pos_bytes(uint32_t form)
{
	return form & KV_PAGE_WIDE ? 4 : form & KV_PAGE_POS8 ? 1 : form & KV_PAGE_POSBM ? 0 : 2;
}

/* 64-bit words of the bitmap of positions lo..hi (lo <= hi). */
static inline uint32_t kv_bm_words(int32_t lo, int32_t hi)
{
	return (uint32_t)((hi - lo) / 64 + 1);
}

/* Offset of a bitmap page's bitmap from the page's start: past the score
 * codes, at an 8-byte boundary (meta_off: where the codes start). */
static inline size_t kv_bm_off(size_t meta_off, uint32_t cap)
{
	return (meta_off + (size_t)cap * sizeof(uint16_t) + 7) & ~(size_t)7;
}

static inline uint64_t *kv_page_bm(const struct kv_page *pg)
{
	return (uint64_t *)(void *)((unsigned char *)pg + kv_bm_off(pg->meta_off, pg->cap));
}

/* Words of a bitmap page's bitmap: it ends the page. */
static inline uint32_t kv_page_bm_words(const struct kv_page *pg)
{
	return (uint32_t)((pg->bytes - kv_bm_off(pg->meta_off, pg->cap)) / sizeof(uint64_t));
}

/* Set bits of x (SWAR: no library call where the build has no popcnt). */
static inline uint32_t kv_popcount64(uint64_t x)
{
	x -= (x >> 1) & 0x5555555555555555u;
	x = (x & 0x3333333333333333u) + ((x >> 2) & 0x3333333333333333u);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fu;
	return (uint32_t)((x * 0x0101010101010101u) >> 56);
}

/* Index of the j-th set bit (from 0) of a bitmap that has more than j. */
static inline uint32_t kv_bm_select(const uint64_t *w, uint32_t j)
{
	for (uint32_t i = 0;; i++) {
		uint32_t c = kv_popcount64(w[i]);

		if (j < c) {
			uint64_t x = w[i];

			while (j--)
				x &= x - 1;
			return i * 64 + (uint32_t)__builtin_ctzll(x);
		}
		j -= c;
	}
}

/* Offset of the positions from the score codes (which start the metadata):
 * past cap codes, at a 4-byte boundary. */
static inline size_t kv_meta_pos_off(uint32_t cap)
{
	return ((size_t)cap * sizeof(uint16_t) + 3) & ~(size_t)3;
}

/* The position form for slots at positions lo..hi (lo <= hi) in a stream
 * that is wide or not: offsets when they span fewer than 256 (and lie below
 * KV_POS16_LIMIT), else uint16_t, int32_t when wide. */
static inline uint32_t kv_pos_form(int32_t lo, int32_t hi, bool wide)
{
	if (wide)
		return KV_PAGE_WIDE;
	return hi - lo < 256 && lo >= 0 && hi < KV_POS16_LIMIT ? KV_PAGE_POS8 : 0;
}

/* The cheapest position form for a page of cap slots at positions lo..hi
 * (lo <= hi) in a stream that is wide or not: kv_pos_form, or a bitmap when
 * the page keeps its slots sorted (`sorted`: q4/q2 pages) and the bitmap,
 * with its alignment, takes fewer bytes than cap positions would. */
static inline uint32_t kv_pos_form_cap(int32_t lo, int32_t hi, uint32_t cap, bool wide, bool sorted)
{
	uint32_t form = kv_pos_form(lo, hi, wide);

	if (sorted && !wide && lo >= 0 && hi < KV_POS16_LIMIT &&
	    (size_t)kv_bm_words(lo, hi) * sizeof(uint64_t) + 6 < (size_t)cap * kv_pos_bytes(form))
		return KV_PAGE_POSBM;
	return form;
}

/* Whether a page's position form holds pos (any filled slot may be anywhere
 * in its range: ranges are fixed when the page is made; a bitmap page's
 * slots must stay sorted too, which its writers see to). */
static inline bool kv_page_takes_pos(const struct kv_page *pg, int32_t pos)
{
	if (pg->flags & KV_PAGE_WIDE)
		return true;
	if (pg->flags & KV_PAGE_POSBM)
		return pos >= (int32_t)pg->pos_base && pos - (int32_t)pg->pos_base < 64 * (int32_t)kv_page_bm_words(pg);
	if (pg->flags & KV_PAGE_POS8)
		return pos >= (int32_t)pg->pos_base && pos - (int32_t)pg->pos_base < 256;
	return pos >= 0 && pos < KV_POS16_LIMIT;
}

static inline int32_t kv_slot_pos(const struct kv_page *pg, uint32_t j)
{
	const unsigned char *m = (const unsigned char *)pg + pg->meta_off + kv_meta_pos_off(pg->cap);

	if (pg->flags & KV_PAGE_POSBM)
		return (int32_t)pg->pos_base + (int32_t)kv_bm_select(kv_page_bm(pg), j);
	if (pg->flags & KV_PAGE_POS8)
		return (int32_t)pg->pos_base + m[j];
	return kv_page_wide(pg) ? ((const int32_t *)(const void *)m)[j] : ((const uint16_t *)(const void *)m)[j];
}

/* pos must be one kv_page_takes_pos(pg, pos) holds. In a bitmap page it
 * sets pos's bit, so slot j gets pos only when slots 0..j-1 have theirs, all
 * below it, and no bit above it is set: its writers set a page's positions
 * in order after kv_page_clear_pos. */
static inline void kv_slot_set_pos(struct kv_page *pg, uint32_t j, int32_t pos)
{
	unsigned char *m = (unsigned char *)pg + pg->meta_off + kv_meta_pos_off(pg->cap);

	if (pg->flags & KV_PAGE_POSBM) {
		uint32_t i = (uint32_t)(pos - (int32_t)pg->pos_base);

		(void)j;
		kv_page_bm(pg)[i / 64] |= (uint64_t)1 << (i % 64);
	} else if (pg->flags & KV_PAGE_POS8)
		m[j] = (uint8_t)(pos - (int32_t)pg->pos_base);
	else if (kv_page_wide(pg))
		((int32_t *)(void *)m)[j] = pos;
	else
		((uint16_t *)(void *)m)[j] = (uint16_t)pos;
}

/* Clears a bitmap page's positions (nothing for other forms), before its
 * writer sets them again in order. */
static inline void kv_page_clear_pos(struct kv_page *pg)
{
	if (pg->flags & KV_PAGE_POSBM)
		memset(kv_page_bm(pg), 0, (size_t)kv_page_bm_words(pg) * sizeof(uint64_t));
}

/* Clears the bits of slots n.. of a bitmap page (those past its new fill). */
static inline void kv_page_bm_trim(struct kv_page *pg, uint32_t n)
{
	uint64_t *w = kv_page_bm(pg);
	uint32_t words = kv_page_bm_words(pg), set = 0, i;

	for (i = 0; i < words; i++) {
		uint32_t c = kv_popcount64(w[i]);

		if (set + c > n)
			break;
		set += c;
	}
	if (i == words)
		return;
	/* keep the lowest n - set bits of word i, clear the rest */
	{
		uint64_t x = w[i], keep = 0;

		for (uint32_t k = set; k < n; k++) {
			keep |= x & (~x + 1);
			x &= x - 1;
		}
		w[i] = keep;
	}
	for (i++; i < words; i++)
		w[i] = 0;
}

/* The score codes of a page: [cap], at the start of the metadata. */
static inline uint16_t *kv_page_scores(const struct kv_page *pg)
{
	return (uint16_t *)(void *)((unsigned char *)pg + pg->meta_off);
}

static inline float kv_slot_score(const struct kv_page *pg, uint32_t j)
{
	return kv_score_dec(kv_page_scores(pg)[j]);
}

static inline void kv_slot_set_score(struct kv_page *pg, uint32_t j, float score)
{
	kv_page_scores(pg)[j] = kv_score_enc(score);
}

/* Bytes of one slot's position and score in a page. */
static inline uint32_t kv_page_slot_meta(const struct kv_page *pg)
{
	return kv_pos_bytes(pg->flags) + (uint32_t)sizeof(uint16_t);
}

/* Bytes of a page's position bitmap (0 unless KV_PAGE_POSBM): metadata of
 * the page as a whole, counted with its slots' positions and scores. */
static inline size_t kv_page_bm_bytes(const struct kv_page *pg)
{
	return pg->flags & KV_PAGE_POSBM ? (size_t)kv_page_bm_words(pg) * sizeof(uint64_t) : 0;
}

/* A page's bytes no slot owns: its header and alignment padding. */
static inline size_t kv_page_fixed(const struct kv_page *pg)
{
	return pg->bytes - pg->kv_bytes - (size_t)pg->cap * kv_page_slot_meta(pg) - kv_page_bm_bytes(pg);
}

/* Copies the positions and scores of n slots from src (from slot sj) to dst
 * (from slot dj); scores keep their codes. dst must take the positions
 * (kv_page_takes_pos), and a bitmap dst only at its end, above its slots'
 * positions, in order (kv_slot_set_pos). */
static inline void kv_slot_copy(struct kv_page *dst, uint32_t dj, const struct kv_page *src, uint32_t sj, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		kv_slot_set_pos(dst, dj + i, kv_slot_pos(src, sj + i));
	memmove(kv_page_scores(dst) + dj, kv_page_scores(src) + sj, n * sizeof(uint16_t));
}

/* Whether page pg takes every position of slots [j, j + n) of src. */
static inline bool kv_page_takes_slots(const struct kv_page *pg, const struct kv_page *src, uint32_t j, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (!kv_page_takes_pos(pg, kv_slot_pos(src, j + i)))
			return false;
	return true;
}

/* Slot access for pages of any format (per-slot formats store in place;
 * packed formats are written with kv_tier_pack by the cache). */
void kv_page_store(struct kv_page *pg, uint32_t slot, int32_t pos, const float *k, const float *v);
/* Key / value of a slot in the model's space (un-rotated). */
void kv_page_load_k(const struct kv_page *pg, uint32_t slot, float *k);
void kv_page_load_v(const struct kv_page *pg, uint32_t slot, float *v);

#endif
