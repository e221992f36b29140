/* ops_impl.h - what the kernel files of src/ops/ share: the block layouts of the
 * weight types, the activation formats their integer dot products read, and the
 * per-type kernel table.
 *
 * Weight blocks (the ggml/GGUF layouts, little-endian, packed):
 *
 *   q4_0  32 weights  | f16 d | 16 bytes: byte j holds weight j (low nibble) and
 *                       weight j+16 (high nibble); w = d * (q - 8)
 *   q8_0  32 weights  | f16 d | 32 int8 q; w = d * q
 *   q4_k 256 weights  | f16 d | f16 dmin | 12 bytes of 6-bit (scale, min) for 8
 *                       sub-blocks of 32 | 128 bytes of nibbles; chunk c of 64
 *                       weights is the 32 bytes qs[32c..]: low nibbles are
 *                       sub-block 2c, high nibbles sub-block 2c+1;
 *                       w = d * sc[j] * q - dmin * m[j]
 *   q5_k 256 weights  | f16 d | f16 dmin | 12 bytes scales as q4_k | 32 bytes qh
 *                       | 128 bytes qs; the 5th bit of weight l of sub-block j is
 *                       bit j of qh[l % 32]; w = d * sc[j] * q - dmin * m[j]
 *   q6_k 256 weights  | 128 bytes ql (low 4 bits) | 64 bytes qh (high 2 bits) |
 *                       16 int8 scales (one per 16 weights) | f16 d;
 *                       w = d * sc[k] * (q - 32); see dequant_q6_k_ref for the
 *                       order of the bits
 *
 * The 6-bit scales of q4_k/q5_k (bytes s[0..11]): for j < 4, sc[j] = s[j] & 63,
 * m[j] = s[j+4] & 63; for j >= 4, sc[j] = (s[j+4] & 15) | (s[j-4] >> 6) << 4 and
 * m[j] = (s[j+4] >> 4) | (s[j] >> 6) << 4.
 *
 * Activations: a matmul quantizes each row of X once to the format its weight
 * type's kernel reads (act_type in the table; panel_act for the panel path),
 * then every weight row is an integer dot product against it, scaled per
 * block. The formats are those llama.cpp's CPU backend quantizes activations
 * to for each weight type, so that both engines give the same integers and
 * differ only by float rounding: in every block q = round-half-even(x *
 * 127 / amax), amax the block's largest |x|, and
 *
 *   OPS_ACT_F32     the floats themselves (f32, f16, bf16 weights)
 *   OPS_ACT_Q8_32   (its "q8_0") blocks of 32: d = amax / 127 rounded to f16,
 *                   s = d * sum(q) in f32, 32 int8 q; x ~ d * q
 *                   (q4_0, q8_0, q5_0, iq4_nl)
 *   OPS_ACT_Q8_1    (its "q8_1") the same blocks, with s = amax / 127 * sum(q)
 *                   rounded to f16 (q4_1, q5_1)
 *   OPS_ACT_Q8_256  (its "q8_K") blocks of 256: d = 1 / (127 / amax), 16 int16
 *                   sums of 16 q each, 256 int8 q; x ~ d * q (q2_k .. q6_k,
 *                   iq4_xs)
 *   OPS_ACT_Q8_K32  the values of OPS_ACT_Q8_256 in the blocks of 32 of
 *                   OPS_ACT_Q8_32: each block of 32 carries its 256-block's d
 *                   and s = d * sum(q) (the panels of q4_k, q5_k, iq4_xs)
 */
#ifndef TKV_OPS_OPS_IMPL_H
#define TKV_OPS_OPS_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/dtype.h"
#include "util/cpu.h"

#define QK4_0 32
#define QK8_0 32
#define QK_K 256

struct blk_q4_0 {
	uint16_t d;           /* f16 scale */
	uint8_t qs[QK4_0 / 2];
};
_Static_assert(sizeof(struct blk_q4_0) == 18, "q4_0 block is 18 bytes");

struct blk_q8_0 {
	uint16_t d;           /* f16 scale */
	int8_t qs[QK8_0];
};
_Static_assert(sizeof(struct blk_q8_0) == 34, "q8_0 block is 34 bytes");

struct blk_q4_k {
	uint16_t d;           /* f16 super-block scale of the sub-block scales */
	uint16_t dmin;        /* f16 super-block scale of the sub-block mins */
	uint8_t scales[12];   /* 8 x (6-bit scale, 6-bit min) */
	uint8_t qs[QK_K / 2];
};
_Static_assert(sizeof(struct blk_q4_k) == 144, "q4_k block is 144 bytes");

struct blk_q5_k {
	uint16_t d;
	uint16_t dmin;
	uint8_t scales[12];
	uint8_t qh[QK_K / 8];  /* 5th bits */
	uint8_t qs[QK_K / 2];  /* low 4 bits */
};
_Static_assert(sizeof(struct blk_q5_k) == 176, "q5_k block is 176 bytes");

struct blk_q6_k {
	uint8_t ql[QK_K / 2];      /* low 4 bits */
	uint8_t qh[QK_K / 4];      /* high 2 bits */
	int8_t scales[QK_K / 16];  /* one per 16 weights */
	uint16_t d;                /* f16 */
};
_Static_assert(sizeof(struct blk_q6_k) == 210, "q6_k block is 210 bytes");

/* The other common GGUF types (ops/quant_more.c). Element e of a block of 32
 * in q4_1 / q5_x / iq4_nl: the low nibble of qs[e] for e < 16, the high nibble
 * of qs[e - 16] otherwise; the 5th bit of q5_x element e is bit e of qh (a
 * little-endian uint32).
 *
 *   q4_1    32 weights  | f16 d | f16 m | 16 bytes qs; w = d * q + m
 *   q5_0    32 weights  | f16 d | 4 bytes qh | 16 bytes qs; w = d * (q - 16)
 *   q5_1    32 weights  | f16 d | f16 m | 4 bytes qh | 16 bytes qs; w = d * q + m
 *   iq4_nl  32 weights  | f16 d | 16 bytes qs; w = d * ops_iq4nl_values[q]
 *   q2_k   256 weights  | 16 bytes scales (low nibble scale, high nibble min, one
 *                         per 16 weights) | 64 bytes qs | f16 d | f16 dmin;
 *                         element e (h = e / 128, g = e % 128 / 32, l = e % 32)
 *                         is bits 2g, 2g+1 of qs[32h + l]; with sc, m of
 *                         scales[e / 16]: w = d * sc * q - dmin * m
 *   q3_k   256 weights  | 32 bytes hmask | 64 bytes qs | 12 bytes of 16 6-bit
 *                         scales | f16 d; element e: low 2 bits as q2_k, plus
 *                         4 when bit 4h + g of hmask[l] is set, minus 4
 *                         (q in -4..3); w = d * (sc[e / 16] - 32) * q, with
 *                         sc[k] = (s[k % 8] >> 4 (k / 8)) & 15 |
 *                                 ((s[8 + k % 4] >> 2 (k / 4)) & 3) << 4
 *   iq4_xs 256 weights  | f16 d | u16 scales_h | 4 bytes scales_l | 128 bytes qs;
 *                         sub-block j of 32 has 6-bit ls = nibble j of scales_l
 *                         (low first) | bits 2j, 2j+1 of scales_h << 4 and the
 *                         16 bytes qs[16j..] laid out as iq4_nl;
 *                         w = d * (ls - 32) * ops_iq4nl_values[q]
 */
struct blk_q4_1 {
	uint16_t d;           /* f16 scale */
	uint16_t m;           /* f16 offset */
	uint8_t qs[16];
};
_Static_assert(sizeof(struct blk_q4_1) == 20, "q4_1 block is 20 bytes");

struct blk_q5_0 {
	uint16_t d;
	uint8_t qh[4];        /* 5th bits, bit e of the little-endian uint32 */
	uint8_t qs[16];
};
_Static_assert(sizeof(struct blk_q5_0) == 22, "q5_0 block is 22 bytes");

struct blk_q5_1 {
	uint16_t d;
	uint16_t m;
	uint8_t qh[4];
	uint8_t qs[16];
};
_Static_assert(sizeof(struct blk_q5_1) == 24, "q5_1 block is 24 bytes");

struct blk_iq4_nl {
	uint16_t d;
	uint8_t qs[16];       /* indices into ops_iq4nl_values */
};
_Static_assert(sizeof(struct blk_iq4_nl) == 18, "iq4_nl block is 18 bytes");

struct blk_q2_k {
	uint8_t scales[QK_K / 16]; /* 4-bit scale | 4-bit min << 4 */
	uint8_t qs[QK_K / 4];      /* 2-bit values */
	uint16_t d;                /* f16 scale of the scales */
	uint16_t dmin;             /* f16 scale of the mins */
};
_Static_assert(sizeof(struct blk_q2_k) == 84, "q2_k block is 84 bytes");

struct blk_q3_k {
	uint8_t hmask[QK_K / 8];   /* 3rd bits */
	uint8_t qs[QK_K / 4];      /* low 2 bits */
	uint8_t scales[12];        /* 16 6-bit scales, biased by 32 */
	uint16_t d;
};
_Static_assert(sizeof(struct blk_q3_k) == 110, "q3_k block is 110 bytes");

struct blk_iq4_xs {
	uint16_t d;
	uint16_t scales_h;         /* high 2 bits of the 8 sub-block scales */
	uint8_t scales_l[QK_K / 64]; /* low 4 bits */
	uint8_t qs[QK_K / 2];
};
_Static_assert(sizeof(struct blk_iq4_xs) == 136, "iq4_xs block is 136 bytes");

/* iq4_xs: the 6-bit scale of sub-block j (0..7), still biased by 32 (the
 * references and the x86 kernels read it the same way). */
static inline int iq4_xs_scale(const struct blk_iq4_xs *b, int j)
{
	return ((b->scales_l[j / 2] >> (4 * (j % 2))) & 15) | ((b->scales_h >> (2 * j)) & 3) << 4;
}

/* The 16 values of iq4_nl / iq4_xs codes (the GGUF format's table). */
extern const int8_t ops_iq4nl_values[16];

enum ops_act_type {
	OPS_ACT_F32 = 0,
	OPS_ACT_Q8_32 = 1,
	OPS_ACT_Q8_256 = 2,
	OPS_ACT_Q8_1 = 3,
	OPS_ACT_Q8_K32 = 4,
	OPS_ACT_COUNT
};

struct blk_q8_32 {
	float d;              /* x ~ d * q */
	float s;              /* d * sum(q) (OPS_ACT_Q8_1: rounded to f16) */
	int8_t qs[32];
};
_Static_assert(sizeof(struct blk_q8_32) == 40, "q8_32 activation block is 40 bytes");

struct blk_q8_256 {
	float d;
	int16_t bsums[16];    /* sum of q[16i .. 16i+15] */
	int8_t qs[256];
};
_Static_assert(sizeof(struct blk_q8_256) == 292, "q8_256 activation block is 292 bytes");

/* Elements per block and bytes per block of each activation format. */
extern const uint32_t ops_act_blck[OPS_ACT_COUNT];
extern const uint32_t ops_act_size[OPS_ACT_COUNT];

/* Dequantizes n elements (a multiple of the block size) of a row. */
typedef void (*ops_dequant_fn)(const void *row, float *out, int64_t n);
/* Quantizes n floats to a row of the activation format. */
typedef void (*ops_quant_act_fn)(const float *x, void *out, int64_t n);
/* Row dots: s[r] = dot(row r of W, a) for r < nr (1 <= nr <= OPS_DOT_ROWS),
 * rows ws bytes apart, a one row of the type's activation format; n elements. */
typedef void (*ops_dot_rows_fn)(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);

#define OPS_DOT_ROWS 4

/* Panels: for matmuls of many tokens (prefill), the worker first repacks 8
 * weight rows into a panel in its own scratch, then runs every activation row
 * against it. A panel holds, per block of 32 columns (OPS_PANEL_BLOCK bytes):
 *
 *   uint8 q[8][8][4]  the 32 values of each of the 8 rows as small integers,
 *                     4 at a time interleaved by row: q[g][r][e] is element
 *                     4g + e of row r (so one 32-byte load covers 4 columns
 *                     of 8 rows, and one 4-byte broadcast of the activation
 *                     meets all 8)
 *   float d[8]        per-row scale of the block
 *   float m[8]        per-row offset: w = d * q + m (0 for signed values)
 *
 * Panel kinds by the range of q, which decides how the int16 sums of
 * vpmaddubsw may be accumulated before they could saturate:
 *   OPS_PANEL_U4  q in 0..15 (q4_0 with m = -8 d; q4_k with m = -dmin m_j)
 *   OPS_PANEL_U5  q in 0..31 (q5_k)
 *   OPS_PANEL_S8  q in -128..127, m = 0 (q8_0)
 * Panel dots read activations in blocks of 32 (OPS_ACT_Q8_32, OPS_ACT_Q8_1 or
 * OPS_ACT_Q8_K32: the type's panel_act; s = d sum(q) meets m).
 * Repacking costs about as much as one token's dots, and is shared by all the
 * tokens of the chunk; the kernel needs no decoding and no horizontal sums
 * (each row's sum stays in its own lane). */
#define OPS_PANEL_ROWS 8
#define OPS_PANEL_COLS 8   /* activation rows per panel / x8 call (at most) */
#define OPS_PANEL_BLOCK (256 + 32 + 32)
_Static_assert(OPS_PANEL_BLOCK == OPS_PANEL_ROWS * 32 + 2 * OPS_PANEL_ROWS * sizeof(float),
	       "a panel block is 32 one-byte values and a float d and m per row");

enum ops_panel_kind { OPS_PANEL_NONE = 0, OPS_PANEL_U4, OPS_PANEL_U5, OPS_PANEL_S8 };

/* q6_k's panel: its scales change every 16 values, so a block of 32 cannot
 * carry one d per row. Its panel blocks are super-blocks of 256 columns
 * (OPS_PANEL_K6_BLOCK bytes, fewer than 8 blocks of 32 of the others):
 *
 *   int8 q[64][8][4]   q - 32 (-32..31) of element 4g + e of row r at
 *                      q[g][r][e], as above
 *   int8 sc[16][16]    sc[h][2r] = sc[h][2r + 1]: row r's scale of values
 *                      16h .. 16h + 15 (one load widens to the int16 factors
 *                      of vpmaddwd for all 8 rows)
 *   float d[8]         per-row d of the super-block
 *
 * against OPS_ACT_Q8_K32 activations: s = sum over super-blocks of d dy
 * sum_h sc_h sum(q y). With |q - 32| <= 32 the int16 sums of vpmaddubsw hold
 * all 16 values of a scale (4 x 2 x 32 x 127 < 2^15). */
#define OPS_PANEL_K6_BLOCK (2048 + 256 + 32)
_Static_assert(OPS_PANEL_K6_BLOCK <= 8 * OPS_PANEL_BLOCK, "a q6_k panel fits the room of 8 blocks of 32");

/* Puts row r's 32 values q, scale d and offset m into panel block pb. */
static inline void ops_panel_put(uint8_t *pb, int r, const uint8_t q[32], float d, float m)
{
	for (int g = 0; g < 8; g++)
		memcpy(pb + 32 * g + 4 * r, q + 4 * g, 4);
	memcpy(pb + 256 + 4 * r, &d, sizeof d);
	memcpy(pb + 288 + 4 * r, &m, sizeof m);
}

/* Packs nr (<= 8) rows of W, ws bytes apart, n elements each, into a panel;
 * rows nr..7 are zero. */
typedef void (*ops_pack_fn)(const void *w, size_t ws, int nr, int64_t n, void *panel);
/* s[c * ss + r] = dot(panel row r, activation row c) for r < 8, c < nc
 * (<= OPS_PANEL_COLS); activation rows (the type's panel_act) are as bytes apart.
 * Writes all 8 rows of each column. */
typedef void (*ops_panel_fn)(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss);

/* The same for two panels of 8 rows, pstride bytes apart, as 16 rows:
 * s[c * ss + r] for r < 16 (optional, for the unsigned panel kinds; wide
 * registers meet 16 rows at once). */
typedef void (*ops_panel2_fn)(int64_t n, const void *panel, size_t pstride, const void *a, size_t as, int nc, float *s,
			      size_t ss);

/* The interleaved layout (OPS_LAYOUT_X8, ops_repack): rows in groups of 8;
 * a group is its blocks in order, and a block of the group is
 *
 *   q4_0: f16 d[8] | 4 x 32 bytes: part g holds, for rows 0..7, 4 bytes each;
 *         byte k of row r has element 8g + k in its low nibble and element
 *         8g + 4 + k in its high nibble (w = d (q - 8))        144 bytes
 *   q8_0: f16 d[8] | 8 x 32 bytes: part g holds 4 int8 of each row r,
 *         elements 4g .. 4g + 3                                 272 bytes
 *
 *   q4_k: a super-block of 8 rows (1152 bytes; x8_block is the bytes per
 *         32 columns, 144):
 *         f16 d[8] | f16 dmin[8] | the 128 6-bit values v = 8j + r (scale
 *         of sub-block j of row r) and v = 64 + 8r + j (its min) as 64 bytes
 *         of low nibbles (v < 64 in the low, v >= 64 in the high nibble of
 *         byte v % 64) and 32 bytes of top bits (bits 2 (v / 32), +1 of byte
 *         v % 32) | 4 pairs t of sub-blocks (2t, 2t + 1), 256 bytes each:
 *         4 chunks c of 64 bytes, byte 4 (8p + r) + e of chunk c holding
 *         element 8c + e of sub-block 2t + p of row r in its low nibble and
 *         element 8c + 4 + e in its high one
 *
 *   q5_k: as q4_k (x8_block 176, a super-block 1408 bytes), but each pair
 *         is 320 bytes: its 4 chunks, then its fifth bits, bit b of the 8
 *         bytes at 256 + 8q for byte b of the register of chunk c = q / 2,
 *         nibble q % 2 (next to its chunks: with the fifth bits after all
 *         the chunks, two threads read q5_k from memory at 26 GB/s where
 *         the row layout gave 29-35; next to them, 33-34)
 *   q6_k: a super-block of 8 rows (1680 bytes; x8_block 210):
 *         f16 d[8] | int8 scale of 16-group G of row r at 8G + r | 8
 *         units u of 192 bytes (16-groups 2u, 2u + 1): 2 chunks c of 64
 *         bytes, byte 4 (8p + r) + e holding the low 4 bits of element
 *         4 (2c) + e of 16-group 2u + p of row r in its low nibble and of
 *         element 4 (2c + 1) + e in its high one, then 64 bytes of top bits:
 *         bits 2q, 2q + 1 of byte 4 (8p + r) + e for element 4q + e
 *
 *   q4_1, q5_0, q5_1: as q4_0, with what else the type has before the
 *         nibbles: f16 d[8] | q4_1, q5_1: f16 m[8] | q5_0, q5_1: 32 bytes
 *         of fifth bits | the nibbles, 4 x 32 bytes as q4_0's. Byte i of
 *         the fifth bits holds in bit 2g + h the fifth bit of the value in
 *         nibble h (0 low, 1 high) of byte i of part g (element
 *         8g + 4h + i % 4 of row i / 4), so that a shift and a mask put a
 *         nibble's bits in place for a whole part, and a byte test makes a
 *         512-bit register's mask (w = d q + m; q5_0: d (q - 16))
 *                                                 160, 176 and 192 bytes
 *   iq4_nl: q4_0's bytes (the nibbles are codes of ops_iq4nl_values)   144 bytes
 *   iq4_xs: a super-block of 8 rows (1088 bytes; x8_block 136): f16 d[8] |
 *         the 6-bit scales (biased by 32) v = 8j + r of sub-block j of row
 *         r as 32 bytes of low nibbles (v < 32 in the low, v >= 32 in the
 *         high nibble of byte v % 32) and 16 bytes of top bits (bits
 *         2 (v / 16), +1 of byte v % 16) | sub-block j (0..7): 4 x 32 bytes
 *         of codes laid out as q4_0's parts
 *   q2_k: a super-block of 8 rows (672 bytes; x8_block 84): f16 d[8] |
 *         f16 dmin[8] | the scale bytes (scale | min << 4) of 16-group G of
 *         row r at 8G + r | 8 pairs P of 16-groups (2P, 2P + 1), 64 bytes
 *         each: byte 4 (8h + r) + e holds, in bits 2c, element
 *         16 (2P + h) + 4c + e of row r (so one 64-byte load gives 4
 *         registers of 16 int32 lanes, lane 8h + r holding 4 values of one
 *         row and one 16-group)
 *   q3_k: a super-block of 8 rows (880 bytes; x8_block 110): f16 d[8] | the
 *         6-bit scales (biased by 32) v = 8G + r as 64 bytes of low nibbles
 *         (v < 64 low, v >= 64 high nibble of byte v % 64) and 32 bytes of
 *         top bits (bits 2 (v / 32), +1 of byte v % 32) | 8 pairs of 96
 *         bytes: the low 2 bits of value + 4 (0..7) as q2_k's 64 bytes, then
 *         32 bytes of third bits: bit c + 4 (i / 32) of byte i % 32 for the
 *         value in bits 2c of byte i (a shift and a mask per field put them
 *         at bit 2 of each byte, in a 256- or a 512-bit register)
 *
 * the same bytes as 8 rows of blocks. Activations are OPS_ACT_Q8_32 (q4_1,
 * q5_1: OPS_ACT_Q8_1; the k-quants and iq4_xs: OPS_ACT_Q8_256). One 64-byte
 * chunk of q4_k gives two registers
 * of 16 int32 lanes, lane 8p + r holding 4 values of row r, so that one
 * vpdpbusd covers 8 rows and 2 sub-blocks, each row's sum stays in its
 * lanes, and the scales of a pair unpack to the lanes' order in one
 * widening. */
#define OPS_X8_Q4_0 144
#define OPS_X8_Q8_0 272
#define OPS_X8_Q4_1 160
#define OPS_X8_Q5_0 176
#define OPS_X8_Q5_1 192
#define OPS_X8_Q2_K 84
#define OPS_X8_Q2_K_SB (8 * OPS_X8_Q2_K)
#define OPS_X8_Q3_K 110
#define OPS_X8_Q3_K_SB (8 * OPS_X8_Q3_K)
#define OPS_X8_IQ4_NL 144
#define OPS_X8_IQ4_XS 136
#define OPS_X8_IQ4_XS_SB (8 * OPS_X8_IQ4_XS)
/* Where a q4_1 / q5_0 / q5_1 group block's fifth bits and nibbles start. */
#define OPS_X8N_FIFTH(min) (16 + 16 * (min))
#define OPS_X8N_NIB(min, five) (16 + 16 * (min) + 32 * (five))
#define OPS_X8_Q4_K 144
#define OPS_X8_Q4_K_SB (8 * OPS_X8_Q4_K) /* bytes of a super-block of a group */
#define OPS_X8_Q5_K 176
#define OPS_X8_Q5_K_SB (8 * OPS_X8_Q5_K)
#define OPS_X8_Q6_K 210
#define OPS_X8_Q6_K_SB (8 * OPS_X8_Q6_K)
_Static_assert(OPS_X8_Q4_0 == OPS_PANEL_ROWS * sizeof(struct blk_q4_0) &&
		       OPS_X8_Q8_0 == OPS_PANEL_ROWS * sizeof(struct blk_q8_0) &&
		       OPS_X8_Q4_1 == OPS_PANEL_ROWS * sizeof(struct blk_q4_1) &&
		       OPS_X8_IQ4_NL == OPS_PANEL_ROWS * sizeof(struct blk_iq4_nl) &&
		       OPS_X8_Q2_K_SB == OPS_PANEL_ROWS * sizeof(struct blk_q2_k) &&
		       OPS_X8_Q3_K_SB == OPS_PANEL_ROWS * sizeof(struct blk_q3_k) &&
		       OPS_X8_IQ4_XS_SB == OPS_PANEL_ROWS * sizeof(struct blk_iq4_xs) &&
		       OPS_X8_Q5_0 == OPS_PANEL_ROWS * sizeof(struct blk_q5_0) &&
		       OPS_X8_Q5_1 == OPS_PANEL_ROWS * sizeof(struct blk_q5_1) &&
		       OPS_X8N_NIB(1, 1) + 128 == OPS_X8_Q5_1 && OPS_X8N_NIB(0, 1) + 128 == OPS_X8_Q5_0 &&
		       OPS_X8N_NIB(1, 0) + 128 == OPS_X8_Q4_1 &&
		       OPS_X8_Q4_K_SB == OPS_PANEL_ROWS * sizeof(struct blk_q4_k) &&
		       OPS_X8_Q5_K_SB == OPS_PANEL_ROWS * sizeof(struct blk_q5_k) &&
		       OPS_X8_Q6_K_SB == OPS_PANEL_ROWS * sizeof(struct blk_q6_k),
	       "an interleaved block holds the bytes of one block of each of 8 rows");

/* Rewrites rows (a multiple of 8) of W, ws bytes apart, n elements each, into
 * the interleaved layout at dst. */
typedef void (*ops_repack_fn)(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
/* s[c * ss + r] = dot(row r of the group, activation row c) for r < 8 and
 * c < nc (<= OPS_PANEL_COLS); activation rows (OPS_ACT_Q8_32) as bytes apart. */
typedef void (*ops_gemv_x8_fn)(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
/* Packs one group of the interleaved layout into a panel (see above); NULL
 * when the type's gemv_x8 serves many tokens as well (q8_0: its groups are
 * already a panel's bytes). */
typedef void (*ops_pack_x8_fn)(const void *group, int64_t n, void *panel);

/* The kernels of one weight type. A NULL table entry means "not supported". */
struct ops_type_kernels {
	uint32_t act_type;           /* enum ops_act_type */
	uint32_t panel_act;          /* what pack/panel and pack_x8 read: one with blocks of 32 */
	ops_dequant_fn dequant;
	ops_dot_rows_fn dot_rows;
	/* optional: the panel path for many tokens (NULL = row dots only) */
	ops_pack_fn pack;
	ops_panel_fn panel;
	ops_panel2_fn panel2;        /* optional: 16 rows from two panels */
	/* optional: the interleaved layout (NULL = none) */
	ops_repack_fn repack;
	ops_gemv_x8_fn gemv_x8;
	ops_pack_x8_fn pack_x8;
	/* row r (0..7) of a group, n elements: embedding lookups in a tied,
	 * repacked output matrix */
	void (*dequant_x8)(const void *group, int r, int64_t n, float *out);
	uint32_t x8_block;           /* bytes of one block of a group */
};

/* Activation quantizers by act type (NULL for OPS_ACT_F32). */
struct ops_act_kernels {
	ops_quant_act_fn quant[OPS_ACT_COUNT];
};

/* The selected kernels of a weight type (NULL for numbers past the table; a
 * type without kernels has NULL entries), and of the activation formats. */
const struct ops_type_kernels *ops_kernels(uint32_t type);
const struct ops_act_kernels *ops_act_kernels(void);

/* ---- scalar references (ops/quant.c) ---------------------------------------- */

void dequant_f32_ref(const void *row, float *out, int64_t n);
void dequant_f16_ref(const void *row, float *out, int64_t n);
void dequant_bf16_ref(const void *row, float *out, int64_t n);
void dequant_q4_0_ref(const void *row, float *out, int64_t n);
void dequant_q8_0_ref(const void *row, float *out, int64_t n);
void dequant_q4_k_ref(const void *row, float *out, int64_t n);
void dequant_q5_k_ref(const void *row, float *out, int64_t n);
void dequant_q6_k_ref(const void *row, float *out, int64_t n);

void quant_act_q8_32_ref(const float *x, void *out, int64_t n);
void quant_act_q8_256_ref(const float *x, void *out, int64_t n);
void quant_act_q8_1_ref(const float *x, void *out, int64_t n);
void quant_act_q8_k32_ref(const float *x, void *out, int64_t n);

void dot_rows_f32_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_f16_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_bf16_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q4_0_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q8_0_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q4_k_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q5_k_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q6_k_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);

void pack_q4_0_ref(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_q8_0_ref(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_q4_k_ref(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_q5_k_ref(const void *w, size_t ws, int nr, int64_t n, void *panel);
void panel_u_ref(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q6_k_ref(const void *w, size_t ws, int nr, int64_t n, void *panel);
void panel_k6_ref(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss);
void panel_s8_ref(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss);

void repack_q4_0_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
void repack_q8_0_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
void gemv_q4_0_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q8_0_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q4_0_x8_ref(const void *group, int64_t n, void *panel);
void dequant_q4_0_x8_ref(const void *group, int r, int64_t n, float *out);
void dequant_q8_0_x8_ref(const void *group, int r, int64_t n, float *out);
void repack_q4_k_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
void gemv_q4_k_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q4_k_x8_ref(const void *group, int64_t n, void *panel);
void dequant_q4_k_x8_ref(const void *group, int r, int64_t n, float *out);
void repack_q5_k_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
void gemv_q5_k_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q5_k_x8_ref(const void *group, int64_t n, void *panel);
void dequant_q5_k_x8_ref(const void *group, int r, int64_t n, float *out);
void repack_q6_k_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
void gemv_q6_k_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q6_k_x8_ref(const void *group, int64_t n, void *panel);
void dequant_q6_k_x8_ref(const void *group, int r, int64_t n, float *out);

/* ---- the other common types (ops/quant_more.c) -------------------------------- */

void dequant_q4_1_ref(const void *row, float *out, int64_t n);
void dequant_q5_0_ref(const void *row, float *out, int64_t n);
void dequant_q5_1_ref(const void *row, float *out, int64_t n);
void dequant_iq4_nl_ref(const void *row, float *out, int64_t n);
void dequant_q2_k_ref(const void *row, float *out, int64_t n);
void dequant_q3_k_ref(const void *row, float *out, int64_t n);
void dequant_iq4_xs_ref(const void *row, float *out, int64_t n);

void dot_rows_q4_1_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q5_0_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q5_1_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_iq4_nl_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q2_k_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q3_k_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_iq4_xs_ref(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);

void repack_q4_1_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
void repack_q5_0_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
void repack_q5_1_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
void gemv_q4_1_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q5_0_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q5_1_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q4_1_x8_ref(const void *group, int64_t n, void *panel);
void pack_q5_0_x8_ref(const void *group, int64_t n, void *panel);
void pack_q5_1_x8_ref(const void *group, int64_t n, void *panel);
void dequant_q4_1_x8_ref(const void *group, int r, int64_t n, float *out);
void dequant_q5_0_x8_ref(const void *group, int r, int64_t n, float *out);
void dequant_q5_1_x8_ref(const void *group, int r, int64_t n, float *out);
void gemv_iq4_nl_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_iq4_nl_x8_ref(const void *group, int64_t n, void *panel);
void dequant_iq4_nl_x8_ref(const void *group, int r, int64_t n, float *out);
void repack_iq4_xs_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
void repack_q2_k_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
void repack_q3_k_x8(const void *w, size_t ws, int64_t rows, int64_t n, void *dst);
void gemv_q2_k_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q3_k_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void dequant_q2_k_x8_ref(const void *group, int r, int64_t n, float *out);
void dequant_q3_k_x8_ref(const void *group, int r, int64_t n, float *out);
void gemv_iq4_xs_x8_ref(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_iq4_xs_x8_ref(const void *group, int64_t n, void *panel);
void dequant_iq4_xs_x8_ref(const void *group, int r, int64_t n, float *out);

void pack_q4_1_ref(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_q5_0_ref(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_q5_1_ref(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_iq4_nl_ref(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_iq4_xs_ref(const void *w, size_t ws, int nr, int64_t n, void *panel);

/* Weight quantizers of these types (n a multiple of the block size). */
void quantize_q4_0_ref(const float *x, void *out, int64_t n);
void quantize_q8_0_ref(const float *x, void *out, int64_t n);
void quantize_q4_k_ref(const float *x, void *out, int64_t n);
void quantize_q5_k_ref(const float *x, void *out, int64_t n);
void quantize_q6_k_ref(const float *x, void *out, int64_t n);
void quantize_q4_1_ref(const float *x, void *out, int64_t n);
void quantize_q5_0_ref(const float *x, void *out, int64_t n);
void quantize_q5_1_ref(const float *x, void *out, int64_t n);
void quantize_iq4_nl_ref(const float *x, void *out, int64_t n);
void quantize_q2_k_ref(const float *x, void *out, int64_t n);
void quantize_q3_k_ref(const float *x, void *out, int64_t n);
void quantize_iq4_xs_ref(const float *x, void *out, int64_t n);

/* The panel packer of quant.c: decode(row, b, q, &d, &m) gives block b of 32
 * of a row as 32 one-byte values, the scale and the offset (w = d q + m). */
typedef void (*ops_panel_decode_fn)(const void *row, int64_t b, uint8_t q[32], float *d, float *m);
void ops_pack_rows(const void *w, size_t ws, int nr, int64_t n, void *panel, ops_panel_decode_fn decode);

/* The 6-bit (scale, min) of sub-block j (0..7) of a q4_k/q5_k block. */
static inline void ops_k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*m = s[j + 4] & 63;
	} else {
		*sc = (uint8_t)((s[j + 4] & 15) | (s[j - 4] >> 6) << 4);
		*m = (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
	}
}

/* ---- per-architecture selection --------------------------------------------- */

/* Replaces entries of the reference tables with the kernels of `level`
 * (util/cpu.h; never above what the CPU runs): arch/x86/select.c, while
 * arch/generic/select.c leaves the references. Called once, before any kernel
 * runs. */
void ops_arch_select(struct ops_type_kernels types[TKV_DTYPE_COUNT], struct ops_act_kernels *act,
		     enum cpu_level level);

#endif
