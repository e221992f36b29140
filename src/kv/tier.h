/* tier.h - storage formats of KV pages: what "hot", "warm" and "cold" are made of.
 *
 * A page of cap slots and head_dim d has a K region and a V region (see kv_page
 * in pool.h). Their layouts, byte by byte (f16 = IEEE half, little-endian; all
 * offsets are from the start of the region; ng = ceil(d / G), G = min(d, 32)):
 *
 *   format  tier  K region                          V region
 *   f32     hot   f32 k[cap][d]                     f32 v[cap][d]
 *   f16     hot   f16 k[cap][d]                     f16 v[cap][d]
 *   q8      warm  f16 scale[cap]; int8 q[cap][d]    same as K
 *                 x = scale * q, symmetric per slot: scale = absmax / 127
 *                 (rounded to nearest f16), q = round(x / scale) in [-127, 127]
 *   q4      cold  per channel (KIVI): f16 scale[d];  per slot and group of G channels:
 *                 f16 min[d]; then codes             f16 par[cap][ng][2] = (scale, min);
 *                 [cap][d/2] bytes                   then codes [cap][d/2] bytes
 *   q2      cold  like q4 with codes [cap][d/4]      like q4 with codes [cap][d/4]
 *
 * Heads of fewer than 32 channels (d < G would make the per-slot value
 * parameters cost as much as 8 channels of q4 codes) store q4/q2 values per
 * channel over the page, exactly like keys: V region = f16 scale[d]; f16
 * min[d]; codes (kv_tier_v_per_channel).
 *
 * q4/q2 are asymmetric with L = 2^bits - 1 levels: x = min + scale * q, q in
 * [0, L]. min is the f16 at or below the range's minimum and scale the
 * smallest f16 with min + scale * L >= max (in float), so every value of the
 * range has a code and is off by at most scale / 2 (codes are clamped anyway:
 * values beyond ±65504 saturate). Keys take min/max per channel
 * over the page's slots, values per slot over each group of G channels (the last
 * group is shorter when G does not divide d). Codes are slot-major (one slot's
 * codes are contiguous, channel c of slot s in byte s*d*bits/8 + c*bits/8) and
 * packed little end first: channel 2j in the low nibble of byte j (q4), channel
 * 4j + i in bits 2i..2i+1 of byte j (q2).
 *
 * Sizes, cap = 16: d = 8, cap 64: f16 1024 + 1024, q8 640 + 640, q4 288 + 288
 * (per-slot values would take 512), q2 160 + 160; d = 64: f32 4096 + 4096, f16 2048 + 2048, q8 1056 + 1056,
 * q4 768 + 640, q2 512 + 384; d = 128: f32 8192 + 8192, f16 4096 + 4096,
 * q8 2080 + 2080, q4 1536 + 1280, q2 1024 + 768 (K + V bytes).
 *
 * Keys of cold pages are quantized per channel because key outliers live in
 * fixed channels; values per token because each value row is used whole.
 * Per-channel parameters depend on every slot of the page, so cold pages are
 * written whole by kv_tier_pack, and re-packed to add slots
 * (kv_tier_repack: channels whose range still covers every slot keep their
 * parameters, so slots already stored are not rounded a second time); the
 * other formats take single slots with kv_tier_store.
 *
 * Optionally a page is stored rotated: keys and values multiplied by a fixed
 * orthogonal matrix R = H·D / sqrt(d) (D random signs, H Walsh-Hadamard; d a
 * power of two) before quantizing, which spreads outlier channels over all
 * channels. Attention over a rotated page uses R q (q·k = Rq·Rk) and
 * un-rotates the weighted value sum (Rᵀ Σ w Rv = Σ w v). Rotation pays for the
 * per-token values (an outlier channel no longer sets every group's range);
 * for per-channel keys it is about neutral.
 *
 * All functions take the page's K and V regions (at least 2-byte aligned; the
 * pool gives 64) and trust their caller (the cache) for sizes and indices:
 * fmt < KV_FMT_ALL, kv_fmt_ok(fmt, d) or fmt == KV_FMT_REF, slots < cap. Nothing allocates;
 * regions and float rows are borrowed for the call. Thread safety: calls on
 * different pages may run concurrently (the only shared state is the table of
 * row kernels, chosen once by CPU feature at first use; see tier_impl.h). */
#ifndef TKV_KV_TIER_H
#define TKV_KV_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum kv_fmt {
	KV_FMT_F32 = 0,  /* 4 bytes per element */
	KV_FMT_F16 = 1,  /* 2 bytes per element (the default: "hot") */
	KV_FMT_Q8 = 2,   /* 1 byte per element + 2 per slot */
	KV_FMT_Q4 = 3,   /* 1/2 byte per element + parameters */
	KV_FMT_Q2 = 4,   /* 1/4 byte per element + parameters */
	KV_FMT_COUNT,    /* the formats a tier can use */
	/* Cross-layer sharing (seq.h): a slot whose key and value are nearly
	 * parallel to the same token's in the layer below stores only their
	 * scales against it, f16 alpha_k[cap] in the K region and alpha_v[cap]
	 * in the V region; attention reads the direction in the layer below.
	 * Through the row functions a slot reads as (alpha, 0, ..., 0) and
	 * stores x[0], so moves and copies keep it exact. Never a tier. */
	KV_FMT_REF = KV_FMT_COUNT,
	KV_FMT_ALL       /* every page format */
};

enum kv_tier { KV_TIER_HOT = 0, KV_TIER_WARM = 1, KV_TIER_COLD = 2, KV_TIER_COUNT };

/* Static names: "f32", "f16", "q8", "q4", "q2", "ref" ("?" when unknown). */
const char *kv_fmt_name(uint32_t fmt);
/* "f16" -> KV_FMT_F16 ...; -1 when unknown or NULL. */
int kv_fmt_parse(const char *s);
/* Tier of a format (KV_TIER_COLD for unknown ones). */
enum kv_tier kv_fmt_tier(uint32_t fmt);
/* "hot", "warm", "cold" ("?" when unknown). */
const char *kv_tier_name(enum kv_tier t);
/* Whether tier format fmt (< KV_FMT_COUNT) can store head_dim d: d > 0, q2
 * needs d % 4 == 0, the others d % 2 == 0. Rotated pages also need
 * kv_rot_ok(d). */
bool kv_fmt_ok(uint32_t fmt, uint32_t d);
/* Whether kv_rotate can take d: a power of two. */
bool kv_rot_ok(uint32_t d);
/* Bytes of the K region / V region of a page of cap slots, parameters
 * included: exactly what store/pack write, nothing more is touched. */
size_t kv_tier_k_bytes(uint32_t fmt, uint32_t cap, uint32_t d);
size_t kv_tier_v_bytes(uint32_t fmt, uint32_t cap, uint32_t d);
/* True for formats whose K parameters span the page (q4, q2). */
bool kv_fmt_packed(uint32_t fmt);
/* Whether q4/q2 values of head size d are stored per channel over the page
 * like keys (d < 32) rather than per slot in groups of 32 channels. */
bool kv_tier_v_per_channel(uint32_t d);

/* Stores slot `slot` from float rows k and v (d floats each). Per-slot formats
 * only (f32, f16, q8): for q4/q2 it writes nothing (use kv_tier_pack). */
void kv_tier_store(uint32_t fmt, void *kreg, void *vreg, uint32_t cap, uint32_t d, uint32_t slot,
		   const float *k, const float *v);
/* Rewrites the value of one slot, any format (keys of packed pages stay as
 * they are; per-channel values are coded on the page's parameters, clamped
 * to their range). */
void kv_tier_store_v(uint32_t fmt, void *vreg, uint32_t cap, uint32_t d, uint32_t slot, const float *v);
/* Writes slots [0, n) from K and V (n rows of d floats each; n <= cap),
 * replacing the page's content; any format. Slots [n, cap) are zeroed (they
 * read back as 0, or as the channel min for q4/q2 keys). q4/q2 key parameters
 * cover the n slots only. */
void kv_tier_pack(uint32_t fmt, void *kreg, void *vreg, uint32_t cap, uint32_t d,
		  const float *K, const float *V, uint32_t n);
/* kv_tier_pack for a page whose per-channel parameters are valid (it holds
 * packed slots, or kv_tier_copy_params gave it another page's): a channel
 * whose n values all code within its current range keeps its parameters, so
 * values decoded from this grid get their codes back unchanged; the other
 * channels get new ones. The same as kv_tier_pack for per-slot formats. */
void kv_tier_repack(uint32_t fmt, void *kreg, void *vreg, uint32_t cap, uint32_t d,
		    const float *K, const float *V, uint32_t n);
/* Copies the per-channel parameters of a packed page (any cap) to another
 * of the same format and d, for kv_tier_repack; nothing for other formats. */
void kv_tier_copy_params(uint32_t fmt, void *kreg, void *vreg, const void *src_kreg, const void *src_vreg,
			 uint32_t d);
/* Dequantized key / value of a slot (still rotated if the page is). */
void kv_tier_load_k(uint32_t fmt, const void *kreg, uint32_t cap, uint32_t d, uint32_t slot, float *k);
void kv_tier_load_v(uint32_t fmt, const void *vreg, uint32_t cap, uint32_t d, uint32_t slot, float *v);
/* Dequantized keys / values of slots [s0, s0 + n) into n rows of d floats
 * (the same numbers as n single loads). */
void kv_tier_load_k_slots(uint32_t fmt, const void *kreg, uint32_t cap, uint32_t d, uint32_t s0,
			  uint32_t n, float *K);
void kv_tier_load_v_slots(uint32_t fmt, const void *vreg, uint32_t cap, uint32_t d, uint32_t s0,
			  uint32_t n, float *V);
/* Copies slot src over slot dst within a page (codes and per-slot parameters;
 * per-channel parameters are shared so codes stay valid). */
void kv_tier_move(uint32_t fmt, void *kreg, void *vreg, uint32_t cap, uint32_t d, uint32_t dst, uint32_t src);
/* Per-channel bounds of the keys of slots [0, n): kmin[c] <= k[c] <= kmax[c]
 * for every dequantized key (exact for f32/f16/q8; for q4/q2 the quantization
 * range [min, min + scale * L], whatever n). For f32/f16/q8 and n == 0,
 * kmin = +Inf and kmax = -Inf (an empty range). A per-channel q4/q2 value
 * region (kv_tier_v_per_channel) has the key layout: passed as kreg, it gives
 * the values' ranges. */
void kv_tier_key_bounds(uint32_t fmt, const void *kreg, uint32_t cap, uint32_t d, uint32_t n,
			float *kmin, float *kmax);

/* x <- R x and x <- Rᵀ x for a head of d floats (kv_rot_ok(d)). The signs of D
 * are fixed (the same in every process) and D's first m signs do not depend on
 * d, so heads of any size rotate consistently. */
void kv_rotate(float *x, uint32_t d);
void kv_unrotate(float *x, uint32_t d);

#endif
