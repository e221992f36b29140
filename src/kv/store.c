/* store.c - encoding and checking entries of the shared KV store (store.h). */
#include "kv/store.h"

#include <string.h>

#include "kv/share.h"
#include "util/status.h"

static const uint8_t magic[4] = { 'T', 'K', 'V', 'S' };

const char *kv_store_verdict_name(int v)
{
	static const char *const names[KV_STORE_N_VERDICTS] = {
		"ok", "truncated", "bad_header", "foreign", "corrupt", "mismatch",
	};

	return v >= 0 && v < KV_STORE_N_VERDICTS ? names[v] : "?";
}

/* ---- hashing ------------------------------------------------------------------ */

static uint64_t fmix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t x;

	memcpy(&x, p, 8);
	return x;
}

uint64_t kv_store_hash64(const void *p, size_t n, uint64_t seed)
{
	const uint8_t *b = p;
	uint64_t h = seed ^ fmix(n + 0x9e3779b97f4a7c15ull), a = h + 0x632be59bd9b4e019ull;
	size_t i = 0;

	/* two lanes, so the multiply chains overlap */
	for (; i + 16 <= n; i += 16) {
		uint64_t x = h ^ fmix(rd64(b + i)), y = a ^ fmix(rd64(b + i + 8));

		h = (x << 29 | x >> 35) * 0x9e3779b97f4a7c15ull + 0x52dce729;
		a = (y << 31 | y >> 33) * 0xc2b2ae3d27d4eb4full + 0x38495ab5;
	}
	if (i < n) {
		uint8_t t[16] = { 0 };

		memcpy(t, b + i, n - i);
		h ^= fmix(rd64(t));
		a ^= fmix(rd64(t + 8));
	}
	return fmix(h ^ fmix(a + n));
}

static struct kv_hash128 chain_base(void)
{
	return (struct kv_hash128){ 0x243f6a8885a308d3ull, 0x13198a2e03707344ull };
}

static void chain_step(struct kv_hash128 *h, const int32_t *chunk, uint32_t P)
{
	h->lo = kv_store_hash64(chunk, (size_t)P * sizeof *chunk, h->lo);
	h->hi = kv_store_hash64(chunk, (size_t)P * sizeof *chunk, h->hi ^ 0xa4093822299f31d0ull);
}

void kv_store_chain(const int32_t *ids, size_t n_chunks, uint32_t P, struct kv_hash128 *chain)
{
	struct kv_hash128 h = chain_base();

	for (size_t c = 0; c < n_chunks; c++) {
		chain_step(&h, ids + c * P, P);
		chain[c] = h;
	}
}

/* ---- sizes -------------------------------------------------------------------- */

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

static int geom_ok(const struct kv_store_geom *g)
{
	return g->fmt < KV_FMT_COUNT && g->head_dim > 0 && g->head_dim <= KV_MAX_HEAD_DIM &&
	       kv_fmt_ok(g->fmt, g->head_dim) && g->P > 0 && g->P <= 4096 && g->n_layer > 0 &&
	       g->n_layer <= 4096 && g->n_kv_head > 0 && g->n_kv_head <= 4096;
}

size_t kv_store_region_k(const struct kv_store_geom *g)
{
	return geom_ok(g) ? pad8(kv_tier_k_bytes(g->fmt, g->P, g->head_dim)) : 0;
}

size_t kv_store_region_v(const struct kv_store_geom *g)
{
	return geom_ok(g) ? pad8(kv_tier_v_bytes(g->fmt, g->P, g->head_dim)) : 0;
}

/* payload bytes, 0 when unusable or over 1 GiB */
static size_t payload_bytes(const struct kv_store_geom *g)
{
	size_t per, n;

	if (!geom_ok(g))
		return 0;
	per = kv_store_region_k(g) + kv_store_region_v(g);
	n = (size_t)g->n_layer * g->n_kv_head;
	if (per == 0 || per > ((size_t)1 << 30) / n)
		return 0;
	return per * n;
}

size_t kv_store_entry_bytes(const struct kv_store_geom *g)
{
	size_t pl = payload_bytes(g);

	return pl ? KV_STORE_HEADER + (size_t)g->P * 4 + pl + 8 : 0;
}

static void wr32(uint8_t *p, uint32_t x)
{
	memcpy(p, &x, 4);
}

static uint32_t rd32(const uint8_t *p)
{
	uint32_t x;

	memcpy(&x, p, 4);
	return x;
}

/* ---- encoding ------------------------------------------------------------------ */

static void write_header(const struct kv_store_geom *g, uint32_t c, const struct kv_hash128 *parent,
			 const int32_t *tokens, uint8_t *e, size_t len)
{
	uint64_t sum;

	memcpy(e, magic, 4);
	e[4] = KV_STORE_VERSION & 0xff;
	e[5] = KV_STORE_VERSION >> 8;
	e[6] = (uint8_t)g->fmt;
	e[7] = 0;
	memcpy(e + 8, &g->fp[0], 8);
	memcpy(e + 16, &g->fp[1], 8);
	wr32(e + 24, g->n_layer);
	wr32(e + 28, g->n_kv_head);
	wr32(e + 32, g->head_dim);
	wr32(e + 36, g->P);
	wr32(e + 40, c);
	wr32(e + 44, (uint32_t)payload_bytes(g));
	memcpy(e + 48, &parent->lo, 8);
	memcpy(e + 56, &parent->hi, 8);
	memcpy(e + KV_STORE_HEADER, tokens, (size_t)g->P * 4);
	sum = kv_store_hash64(e, len - 8, 0);
	memcpy(e + len - 8, &sum, 8);
}

size_t kv_store_encode(const struct kv_store_geom *g, const struct kv_seq *s, const int32_t *ids,
		       size_t c0, size_t c1, uint8_t *out, float *scratch, uint32_t *map)
{
	size_t eb = kv_store_entry_bytes(g), kb = kv_store_region_k(g), vb = kv_store_region_v(g);
	size_t n_ok = c1 > c0 ? c1 - c0 : 0, n_streams = (size_t)g->n_layer * g->n_kv_head;
	uint32_t P = g->P, d = g->head_dim;
	float *K = scratch, *V = scratch + (size_t)P * d;
	struct kv_hash128 h;

	if (!eb || n_ok == 0 || s->n_layer != g->n_layer || s->n_kv_head != g->n_kv_head || s->head_dim != d)
		return 0;
	memset(out, 0, n_ok * eb);
	for (size_t i = 0; i < n_streams && n_ok; i++) {
		const struct kv_stream *st = &s->streams[i];
		bool ref = false;

		for (uint32_t p = 0; p < st->n_pages; p++)
			ref |= st->pages[p]->fmt == KV_FMT_REF;
		if (ref) {  /* cross-layer shared slots live in the layer below: not exported */
			n_ok = 0;
			break;
		}
		kv_stream_pos_map(st, map, (int32_t)(c1 * P));
		for (size_t c = c0; c < c0 + n_ok; c++) {
			uint8_t *reg = out + (c - c0) * eb + KV_STORE_HEADER + (size_t)P * 4 + i * (kb + vb);
			bool full = true;

			for (uint32_t j = 0; j < P && full; j++) {
				uint32_t m = map[c * P + j];

				if (m == KV_NO_PAGE) {
					full = false;
					break;
				}
				kv_page_load_k(st->pages[m >> 12], m & 0xfff, K + (size_t)j * d);
				kv_page_load_v(st->pages[m >> 12], m & 0xfff, V + (size_t)j * d);
			}
			if (!full) {
				n_ok = c - c0;
				break;
			}
			kv_tier_pack(g->fmt, reg, reg + kb, P, d, K, V, P);
		}
	}
	h = chain_base();
	for (size_t c = 0; c < c0 + n_ok; c++) {
		/* the parent of chunk c is the chain of chunks [0, c); zero for c = 0 */
		struct kv_hash128 parent = c ? h : (struct kv_hash128){ 0, 0 };

		if (c >= c0)
			write_header(g, (uint32_t)c, &parent, ids + c * P, out + (c - c0) * eb, eb);
		chain_step(&h, ids + c * P, P);
	}
	return n_ok;
}

/* ---- checking and decoding --------------------------------------------------- */

/* Whether n f16 values at p are finite, and scales (every other one when
 * `pairs`, else the first half) are >= 0. */
static bool params_ok(const uint8_t *p, size_t n, bool pairs)
{
	for (size_t i = 0; i < n; i++) {
		uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
		bool scale = pairs ? i % 2 == 0 : i < n / 2;

		if ((h & 0x7c00) == 0x7c00)
			return false;
		if (scale && (h & 0x8000) && (h & 0x7fff))
			return false;
	}
	return true;
}

enum kv_store_verdict kv_store_check(const struct kv_store_geom *g, uint32_t c, const struct kv_hash128 *parent,
				     const int32_t *tokens, const uint8_t *buf, size_t len)
{
	size_t eb = kv_store_entry_bytes(g), kb = kv_store_region_k(g), vb = kv_store_region_v(g);
	size_t n_streams = (size_t)g->n_layer * g->n_kv_head;
	uint32_t d = g->head_dim;
	uint64_t fp0, fp1, sum, p0, p1;

	if (!eb || !buf || len < KV_STORE_HEADER)
		return KV_STORE_TRUNCATED;
	if (memcmp(buf, magic, 4) || (buf[4] | buf[5] << 8) != KV_STORE_VERSION || buf[7] != 0)
		return KV_STORE_BAD_HEADER;
	memcpy(&fp0, buf + 8, 8);
	memcpy(&fp1, buf + 16, 8);
	if (buf[6] != g->fmt || fp0 != g->fp[0] || fp1 != g->fp[1] || rd32(buf + 24) != g->n_layer ||
	    rd32(buf + 28) != g->n_kv_head || rd32(buf + 32) != d || rd32(buf + 36) != g->P)
		return KV_STORE_FOREIGN;
	if (len != eb || rd32(buf + 44) != payload_bytes(g))
		return KV_STORE_TRUNCATED;
	memcpy(&sum, buf + len - 8, 8);
	if (sum != kv_store_hash64(buf, len - 8, 0))
		return KV_STORE_CORRUPT;
	memcpy(&p0, buf + 48, 8);
	memcpy(&p1, buf + 56, 8);
	if (rd32(buf + 40) != c || p0 != parent->lo || p1 != parent->hi ||
	    memcmp(buf + KV_STORE_HEADER, tokens, (size_t)g->P * 4))
		return KV_STORE_MISMATCH;
	if (kv_fmt_packed(g->fmt)) {
		size_t nv = kv_tier_v_per_channel(d) ? 2 * (size_t)d : (size_t)g->P * ((d + 31) / 32) * 2;
		const uint8_t *reg = buf + KV_STORE_HEADER + (size_t)g->P * 4;

		for (size_t i = 0; i < n_streams; i++, reg += kb + vb)
			if (!params_ok(reg, 2 * (size_t)d, false) ||
			    !params_ok(reg + kb, nv, !kv_tier_v_per_channel(d)))
				return KV_STORE_CORRUPT;
	}
	return KV_STORE_OK;
}

int kv_store_decode(const struct kv_store_geom *g, uint32_t c, const uint8_t *buf, struct kv_pool *pool,
		    struct kv_page **pages)
{
	size_t kb = kv_store_region_k(g), vb = kv_store_region_v(g);
	size_t n_streams = (size_t)g->n_layer * g->n_kv_head;
	size_t kt = kv_tier_k_bytes(g->fmt, g->P, g->head_dim), vt = kv_tier_v_bytes(g->fmt, g->P, g->head_dim);
	const uint8_t *reg = buf + KV_STORE_HEADER + (size_t)g->P * 4;

	for (size_t i = 0; i < n_streams; i++, reg += kb + vb) {
		int why = TKV_ERR_NOMEM;
		/* a chunk's positions: c * P .. c * P + P - 1 */
		int32_t p0 = (int32_t)(c * g->P), p1 = p0 + (int32_t)g->P - 1;
		bool wide = (uint64_t)(c + 1) * g->P > KV_POS16_LIMIT;
		struct kv_page *pg = kv_pool_get_form(pool, g->head_dim, g->fmt, g->P, kv_pos_form(p0, p1, wide), p0, &why);

		if (!pg) {
			while (i > 0)
				kv_pool_put(pool, pages[--i]);
			return why;
		}
		memcpy(pg->k, reg, kt);
		memcpy(pg->v, reg + kb, vt);
		for (uint32_t j = 0; j < g->P; j++) {
			kv_slot_set_pos(pg, j, (int32_t)(c * g->P + j));
			kv_slot_set_score(pg, j, 0.0f);
		}
		pg->flags |= KV_PAGE_FROZEN;
		kv_pool_set_used(pool, pg, g->P);
		pages[i] = pg;
	}
	return TKV_OK;
}
