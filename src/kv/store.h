/* store.h - entries of the shared KV store: one prefix chunk, every stream, compact.
 *
 * A shared store (Redis, see src/server/kvstore.c) holds prefix chunks that any
 * replica serving the same model can attach instead of computing them. An
 * entry is one chunk of P tokens (P = the engine's page size) at positions
 * [c P, (c + 1) P) of a prompt, for all n_layer x n_kv_head streams, stored at
 * a compact tier format (q4), keyed by the model's fingerprint, the page
 * geometry and a hash chain over the prefix's token ids (kv_store_chain).
 *
 * Byte layout (little-endian; the host must be little-endian, others only
 * ever reject entries):
 *
 *   off  size  field
 *     0     4  magic "TKVS"
 *     4     2  format version (KV_STORE_VERSION)
 *     6     1  page format (enum kv_fmt; KV_FMT_Q4)
 *     7     1  flags (0)
 *     8    16  model fingerprint (two u64)
 *    24    16  n_layer, n_kv_head, head_dim, P (u32 each)
 *    40     4  chunk index c (u32)
 *    44     4  payload bytes (u32): n_layer * n_kv_head * (kb + vb)
 *    48    16  chain hash of chunks [0, c) (the parent; zero for c = 0)
 *    64  4 P   token ids of the chunk (i32)
 *     .        per stream, layer-major (layer 0 head 0, layer 0 head 1, ...):
 *              the K region then the V region of a P-slot page of that format,
 *              exactly as tier.h lays them out, each padded with zeros to a
 *              multiple of 8 bytes (kb, vb)
 *   end     8  checksum: kv_store_hash64 of every byte before it
 *
 * Slot j of every page is position c P + j; scores are not stored (attached
 * chunks are frozen: the policy never ranks them). An entry is trusted only
 * after kv_store_check: size, magic, version, geometry and fingerprint
 * (foreign), checksum (corrupt), chunk index, parent hash and tokens (another
 * prefix under a colliding key), and every f16 quantization parameter finite
 * with scales >= 0 (a NaN would poison attention). The checksum detects
 * corruption, not forgery: the store is as trusted as the network it is on.
 *
 * Pure functions over caller buffers; nothing here allocates except
 * kv_store_decode's pages (from the pool). */
#ifndef TKV_KV_STORE_H
#define TKV_KV_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "kv/pool.h"
#include "kv/seq.h"

#define KV_STORE_VERSION 1
#define KV_STORE_HEADER 64

struct kv_hash128 { uint64_t lo, hi; };

/* What entries must match to be attached. */
struct kv_store_geom {
	uint64_t fp[2];        /* model fingerprint */
	uint32_t n_layer, n_kv_head, head_dim;
	uint32_t P;            /* tokens per chunk (the engine's page size) */
	uint32_t fmt;          /* stored page format (KV_FMT_Q4) */
};

/* Why an entry was refused (KV_STORE_OK = accepted). */
enum kv_store_verdict {
	KV_STORE_OK = 0,
	KV_STORE_TRUNCATED,    /* shorter or longer than the geometry's entry */
	KV_STORE_BAD_HEADER,   /* magic, format version or flags */
	KV_STORE_FOREIGN,      /* another model or geometry */
	KV_STORE_CORRUPT,      /* checksum, or non-finite quantization parameters */
	KV_STORE_MISMATCH,     /* another chunk, parent or tokens under this key */
	KV_STORE_N_VERDICTS
};

/* "ok", "truncated", "bad_header", "foreign", "corrupt", "mismatch". */
const char *kv_store_verdict_name(int v);

/* A 64-bit hash of n bytes (not cryptographic: detects corruption). */
uint64_t kv_store_hash64(const void *p, size_t n, uint64_t seed);
/* chain[c] = hash of the prefix ids[0, (c + 1) P), for c < n_chunks. */
void kv_store_chain(const int32_t *ids, size_t n_chunks, uint32_t P, struct kv_hash128 *chain);

/* Bytes of one stream's K / V region in an entry (padded to 8) and of the
 * whole entry; 0 when the geometry is unusable (fmt not storable for
 * head_dim, zero sizes, or an entry over 1 GiB). */
size_t kv_store_region_k(const struct kv_store_geom *g);
size_t kv_store_region_v(const struct kv_store_geom *g);
size_t kv_store_entry_bytes(const struct kv_store_geom *g);

/* Encodes chunks [c0, c1) of sequence s (ids: its tokens, at least c1 P) into
 * out: c1 - c0 entries of kv_store_entry_bytes(g) bytes, back to back. Slots
 * are read by position from pages of any format (dequantized, un-rotated) and
 * packed at g->fmt. Returns the chunks encoded: fewer than c1 - c0 when a
 * stream no longer holds some position of a chunk (evicted), the entries
 * before it are complete. scratch: (P * head_dim * 2) floats plus
 * (c1 P) uint32 borrowed for the call. */
size_t kv_store_encode(const struct kv_store_geom *g, const struct kv_seq *s, const int32_t *ids,
		       size_t c0, size_t c1, uint8_t *out, float *scratch, uint32_t *map);

/* Checks an entry (len bytes, any bytes) against the geometry and the chunk
 * it should be: index c, parent chain hash (zero for c = 0), its P tokens. */
enum kv_store_verdict kv_store_check(const struct kv_store_geom *g, uint32_t c, const struct kv_hash128 *parent,
				     const int32_t *tokens, const uint8_t *buf, size_t len);

/* Pages of a checked entry: pages[n_layer * n_kv_head] new frozen pages from
 * the pool (refs 1, transferred to the caller). TKV_ERR_KV_FULL / NOMEM when
 * the pool refuses one (nothing is left allocated). */
int kv_store_decode(const struct kv_store_geom *g, uint32_t c, const uint8_t *buf, struct kv_pool *pool,
		    struct kv_page **pages);

#endif
