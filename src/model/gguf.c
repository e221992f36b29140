/* gguf.c - GGUF reader: maps a file (or takes a buffer), validates all of it,
 * and hands out borrowed views of its metadata and tensors.
 *
 * Parsing goes through a bounds-checked cursor (struct gguf_rd) that never reads
 * past the buffer: every read first checks the bytes left. Counts read from the
 * file are checked against the bytes left before anything is allocated for them,
 * so a corrupt count fails fast instead of asking for gigabytes. All sizes are
 * computed in uint64_t with explicit overflow checks.
 *
 * Keys and tensor names are indexed by small open-addressing hash tables, which
 * find duplicates at open time and make gguf_find/gguf_find_tensor O(1). */
#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/dtype.h"
#include "util/alloc.h"
#include "util/status.h"

/* Smallest encodings, used to bound counts before allocating:
 * kv = key len (8) + type (4) + smallest value (1);
 * tensor info = name len (8) + n_dims (4) + ne[0] (8) + type (4) + offset (8). */
#define GGUF_MIN_KV_BYTES 13
#define GGUF_MIN_TINFO_BYTES 32
#define GGUF_HEADER_BYTES 24
#define GGUF_MSG_STR_MAX 64 /* longest key/name quoted in a message */

/* Index from names to entries: slot holds entry index + 1, 0 = empty. */
struct gguf_map {
	size_t *slot;
	size_t mask; /* capacity - 1; capacity is a power of two */
};

struct gguf_file {
	struct tkv_alloc *a;
	char *name;                    /* owned copy of the path or buffer name */
	const uint8_t *base;           /* the file bytes: [base, base + size) */
	uint64_t size;
	void *map;                     /* mmap'd region, NULL for buffers */
	size_t map_size;
	uint32_t version;
	uint32_t alignment;
	uint64_t data_offset;
	uint64_t n_kv;
	struct gguf_kv *kv;            /* [n_kv], owned */
	uint64_t n_tensors;
	struct gguf_tensor *tensors;   /* [n_tensors], owned */
	struct gguf_map kv_map;
	struct gguf_map tensor_map;
};

/* Bounds-checked cursor over the file, with the context for messages. */
struct gguf_rd {
	const uint8_t *p;
	uint64_t size;
	uint64_t pos;
	const char *name;              /* file name for messages */
	char ctx[160];                 /* "kv #3 'general.name'" etc. */
	struct tkv_alloc *a;
	struct tkv_error *err;
};

static const uint32_t gguf_type_size[GGUF_TYPE_COUNT] = {
	[GGUF_TYPE_UINT8] = 1,   [GGUF_TYPE_INT8] = 1,
	[GGUF_TYPE_UINT16] = 2,  [GGUF_TYPE_INT16] = 2,
	[GGUF_TYPE_UINT32] = 4,  [GGUF_TYPE_INT32] = 4,
	[GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,
	[GGUF_TYPE_STRING] = 0,  [GGUF_TYPE_ARRAY] = 0,
	[GGUF_TYPE_UINT64] = 8,  [GGUF_TYPE_INT64] = 8,
	[GGUF_TYPE_FLOAT64] = 8,
};

static const char *const gguf_type_names[GGUF_TYPE_COUNT] = {
	[GGUF_TYPE_UINT8] = "uint8",     [GGUF_TYPE_INT8] = "int8",
	[GGUF_TYPE_UINT16] = "uint16",   [GGUF_TYPE_INT16] = "int16",
	[GGUF_TYPE_UINT32] = "uint32",   [GGUF_TYPE_INT32] = "int32",
	[GGUF_TYPE_FLOAT32] = "float32", [GGUF_TYPE_BOOL] = "bool",
	[GGUF_TYPE_STRING] = "string",   [GGUF_TYPE_ARRAY] = "array",
	[GGUF_TYPE_UINT64] = "uint64",   [GGUF_TYPE_INT64] = "int64",
	[GGUF_TYPE_FLOAT64] = "float64",
};

const char *gguf_type_name(uint32_t t)
{
	return t < GGUF_TYPE_COUNT ? gguf_type_names[t] : "?";
}

/* ---- little-endian loads (unaligned-safe) -------------------------------- */

static uint16_t gguf_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static uint32_t gguf_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t gguf_le64(const uint8_t *p)
{
	return (uint64_t)gguf_le32(p) | (uint64_t)gguf_le32(p + 4) << 32;
}

static double gguf_f32_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

static double gguf_f64_bits(uint64_t u)
{
	double d;

	memcpy(&d, &u, sizeof d);
	return d;
}

/* ---- messages ----------------------------------------------------------- */

/* Copies at most GGUF_MSG_STR_MAX bytes of s into dst, printable ASCII only. */
static void gguf_quote(char *dst, size_t cap, const char *s, uint64_t len)
{
	size_t n = 0;
	uint64_t i;

	for (i = 0; i < len && i < GGUF_MSG_STR_MAX && n + 1 < cap; i++) {
		unsigned char c = (unsigned char)s[i];
		dst[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	if (i < len && n + 4 < cap) {
		memcpy(dst + n, "...", 3);
		n += 3;
	}
	dst[n] = 0;
}

/* Fails with "<file>: <ctx>: <message>" (ctx omitted when empty). */
static int gguf_fail(struct gguf_rd *r, int status, const char *fmt, ...) TKV_PRINTF(3, 4);

static int gguf_fail(struct gguf_rd *r, int status, const char *fmt, ...)
{
	char msg[384];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (r->ctx[0])
		return tkv_errf(r->err, status, "%s: %s: %s", r->name, r->ctx, msg);
	return tkv_errf(r->err, status, "%s: %s", r->name, msg);
}

static int gguf_nomem(struct gguf_rd *r, uint64_t bytes, const char *what)
{
	return gguf_fail(r, TKV_ERR_NOMEM, "out of memory allocating %llu bytes for %s",
			 (unsigned long long)bytes, what);
}

/* ---- cursor ------------------------------------------------------------- */

static uint64_t gguf_left(const struct gguf_rd *r)
{
	return r->size - r->pos;
}

static int gguf_need(struct gguf_rd *r, uint64_t n, const char *what)
{
	if (n <= gguf_left(r))
		return TKV_OK;
	return gguf_fail(r, TKV_ERR_FORMAT,
			 "truncated: %s at 0x%llx needs %llu bytes, %llu left (file size 0x%llx)",
			 what, (unsigned long long)r->pos, (unsigned long long)n,
			 (unsigned long long)gguf_left(r), (unsigned long long)r->size);
}

static int gguf_rd_u32(struct gguf_rd *r, uint32_t *v, const char *what)
{
	int rc = gguf_need(r, 4, what);

	if (rc)
		return rc;
	*v = gguf_le32(r->p + r->pos);
	r->pos += 4;
	return TKV_OK;
}

static int gguf_rd_u64(struct gguf_rd *r, uint64_t *v, const char *what)
{
	int rc = gguf_need(r, 8, what);

	if (rc)
		return rc;
	*v = gguf_le64(r->p + r->pos);
	r->pos += 8;
	return TKV_OK;
}

/* Reads a string; what names it in messages, with " <idx>" appended unless idx
 * is UINT64_MAX (formatted only on failure: vocabularies have 150k strings). */
static int gguf_rd_str(struct gguf_rd *r, struct gguf_str *s, const char *what, uint64_t idx)
{
	uint64_t at = r->pos;
	char name[64];

	if (gguf_left(r) >= 8) {
		s->len = gguf_le64(r->p + r->pos);
		if (s->len <= gguf_left(r) - 8) {
			s->ptr = (const char *)r->p + r->pos + 8;
			r->pos += 8 + s->len;
			return TKV_OK;
		}
	}
	if (idx == UINT64_MAX)
		snprintf(name, sizeof name, "%s", what);
	else
		snprintf(name, sizeof name, "%s %llu", what, (unsigned long long)idx);
	if (gguf_left(r) < 8)
		return gguf_need(r, 8, name);
	return gguf_fail(r, TKV_ERR_FORMAT,
			 "%s at 0x%llx: length %llu exceeds the %llu bytes left (file size 0x%llx)",
			 name, (unsigned long long)at, (unsigned long long)s->len,
			 (unsigned long long)(gguf_left(r) - 8), (unsigned long long)r->size);
}

/* ---- name index --------------------------------------------------------- */

static uint64_t gguf_hash(const char *s, uint64_t len)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	uint64_t i;

	for (i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* Entries are structs whose first member is their struct gguf_str name. */
static const struct gguf_str *gguf_entry_name(const void *base, size_t stride, size_t i)
{
	return (const struct gguf_str *)(const void *)((const char *)base + i * stride);
}

/* Slot index of name, or of the empty slot where it would go. */
static size_t gguf_map_probe(const struct gguf_map *m, const void *base, size_t stride,
			     const char *s, uint64_t len)
{
	size_t i = (size_t)gguf_hash(s, len) & m->mask;

	for (;;) {
		size_t e = m->slot[i];
		const struct gguf_str *n;

		if (!e)
			return i;
		n = gguf_entry_name(base, stride, e - 1);
		if (n->len == len && memcmp(n->ptr, s, len) == 0)
			return i;
		i = (i + 1) & m->mask;
	}
}

/* Indexes n entries; on a duplicate sets *dup_first and *dup_second and stops.
 * Returns TKV_OK, TKV_ERR_NOMEM, or TKV_ERR_FORMAT for a duplicate. */
static int gguf_map_build(struct gguf_map *m, struct tkv_alloc *a, const void *base,
			  size_t stride, size_t n, size_t *dup_first, size_t *dup_second)
{
	size_t cap = 8, i;

	while (cap < n * 2) /* n <= file size / 13, so this cannot overflow */
		cap *= 2;
	m->slot = tkv_calloc(a, cap, sizeof *m->slot);
	if (!m->slot)
		return TKV_ERR_NOMEM;
	m->mask = cap - 1;
	for (i = 0; i < n; i++) {
		const struct gguf_str *s = gguf_entry_name(base, stride, i);
		size_t k = gguf_map_probe(m, base, stride, s->ptr, s->len);

		if (m->slot[k]) {
			*dup_first = m->slot[k] - 1;
			*dup_second = i;
			return TKV_ERR_FORMAT;
		}
		m->slot[k] = i + 1;
	}
	return TKV_OK;
}

static const void *gguf_map_find(const struct gguf_map *m, const void *base, size_t stride,
				 const char *name)
{
	size_t k;

	if (!m->slot || !name)
		return NULL;
	k = gguf_map_probe(m, base, stride, name, strlen(name));
	if (!m->slot[k])
		return NULL;
	return gguf_entry_name(base, stride, m->slot[k] - 1);
}

/* ---- metadata ----------------------------------------------------------- */

/* Reads one scalar of type t (not STRING/ARRAY) into kv's union. */
static int gguf_rd_scalar(struct gguf_rd *r, enum gguf_type t, struct gguf_kv *kv)
{
	uint64_t at = r->pos;
	const uint8_t *p;
	int rc;

	rc = gguf_need(r, gguf_type_size[t], "value");
	if (rc)
		return rc;
	p = r->p + r->pos;
	r->pos += gguf_type_size[t];
	switch (t) {
	case GGUF_TYPE_UINT8: kv->v.u64 = p[0]; break;
	case GGUF_TYPE_INT8: kv->v.i64 = (int8_t)p[0]; break;
	case GGUF_TYPE_UINT16: kv->v.u64 = gguf_le16(p); break;
	case GGUF_TYPE_INT16: kv->v.i64 = (int16_t)gguf_le16(p); break;
	case GGUF_TYPE_UINT32: kv->v.u64 = gguf_le32(p); break;
	case GGUF_TYPE_INT32: kv->v.i64 = (int32_t)gguf_le32(p); break;
	case GGUF_TYPE_FLOAT32: kv->v.f64 = gguf_f32_bits(gguf_le32(p)); break;
	case GGUF_TYPE_UINT64: kv->v.u64 = gguf_le64(p); break;
	case GGUF_TYPE_INT64: kv->v.i64 = (int64_t)gguf_le64(p); break;
	case GGUF_TYPE_FLOAT64: kv->v.f64 = gguf_f64_bits(gguf_le64(p)); break;
	case GGUF_TYPE_BOOL:
		if (p[0] > 1)
			return gguf_fail(r, TKV_ERR_FORMAT, "bool value %u at 0x%llx is not 0 or 1",
					 p[0], (unsigned long long)at);
		kv->v.u64 = p[0];
		break;
	default:
		return gguf_fail(r, TKV_ERR_INTERNAL, "scalar of type %u", (unsigned)t);
	}
	return TKV_OK;
}

static int gguf_rd_array(struct gguf_rd *r, struct gguf_kv *kv)
{
	uint64_t at = r->pos, i, n, esize;
	uint32_t et;
	int rc;

	rc = gguf_rd_u32(r, &et, "array element type");
	if (rc)
		return rc;
	if (et >= GGUF_TYPE_COUNT)
		return gguf_fail(r, TKV_ERR_FORMAT, "unknown array element type %u at 0x%llx",
				 et, (unsigned long long)at);
	if (et == GGUF_TYPE_ARRAY)
		return gguf_fail(r, TKV_ERR_FORMAT, "array of arrays at 0x%llx is not allowed",
				 (unsigned long long)at);
	rc = gguf_rd_u64(r, &n, "array length");
	if (rc)
		return rc;
	kv->v.arr.type = (enum gguf_type)et;
	kv->v.arr.n = n;
	/* Each string element takes at least its 8-byte length. */
	esize = et == GGUF_TYPE_STRING ? 8 : gguf_type_size[et];
	if (n > gguf_left(r) / esize)
		return gguf_fail(r, TKV_ERR_FORMAT,
				 "array of %llu %s at 0x%llx (%s%llu bytes each) runs past end of file: %llu bytes left (file size 0x%llx)",
				 (unsigned long long)n, gguf_type_name(et), (unsigned long long)at,
				 et == GGUF_TYPE_STRING ? "at least " : "",
				 (unsigned long long)esize, (unsigned long long)gguf_left(r),
				 (unsigned long long)r->size);
	if (et != GGUF_TYPE_STRING) {
		const uint8_t *p = r->p + r->pos;

		if (et == GGUF_TYPE_BOOL) {
			for (i = 0; i < n; i++)
				if (p[i] > 1)
					return gguf_fail(r, TKV_ERR_FORMAT,
							 "bool element %llu at 0x%llx has value %u, not 0 or 1",
							 (unsigned long long)i,
							 (unsigned long long)(r->pos + i), p[i]);
		}
		kv->v.arr.data = p;
		r->pos += n * esize;
		return TKV_OK;
	}
	kv->v.arr.data = NULL;
	if (n == 0)
		return TKV_OK;
	/* n <= bytes left / 8 fits size_t; the product is checked anyway. */
	kv->v.arr.strs = tkv_calloc(r->a, (size_t)n, sizeof *kv->v.arr.strs);
	if (!kv->v.arr.strs)
		return gguf_nomem(r, n * sizeof *kv->v.arr.strs, "a string array");
	for (i = 0; i < n; i++) {
		rc = gguf_rd_str(r, &kv->v.arr.strs[i], "string element", i);
		if (rc)
			return rc;
	}
	return TKV_OK;
}

static int gguf_rd_kv(struct gguf_rd *r, uint64_t idx, struct gguf_kv *kv)
{
	char q[GGUF_MSG_STR_MAX + 4];
	uint32_t t;
	int rc;

	kv->offset = r->pos;
	snprintf(r->ctx, sizeof r->ctx, "kv #%llu at 0x%llx", (unsigned long long)idx,
		 (unsigned long long)kv->offset);
	rc = gguf_rd_str(r, &kv->key, "key", UINT64_MAX);
	if (rc)
		return rc;
	if (kv->key.len == 0)
		return gguf_fail(r, TKV_ERR_FORMAT, "empty key");
	gguf_quote(q, sizeof q, kv->key.ptr, kv->key.len);
	snprintf(r->ctx, sizeof r->ctx, "kv #%llu '%s' at 0x%llx", (unsigned long long)idx, q,
		 (unsigned long long)kv->offset);
	rc = gguf_rd_u32(r, &t, "value type");
	if (rc)
		return rc;
	if (t >= GGUF_TYPE_COUNT)
		return gguf_fail(r, TKV_ERR_FORMAT, "unknown value type %u at 0x%llx", t,
				 (unsigned long long)(r->pos - 4));
	kv->type = (enum gguf_type)t;
	if (t == GGUF_TYPE_STRING)
		return gguf_rd_str(r, &kv->v.str, "string value", UINT64_MAX);
	if (t == GGUF_TYPE_ARRAY)
		return gguf_rd_array(r, kv);
	return gguf_rd_scalar(r, kv->type, kv);
}

/* general.alignment, when present, must be a uint32 nonzero power of two. */
static int gguf_rd_alignment(struct gguf_rd *r, struct gguf_file *f)
{
	const struct gguf_kv *kv = gguf_find(f, "general.alignment");

	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	if (!kv)
		return TKV_OK;
	r->ctx[0] = 0;
	if (kv->type != GGUF_TYPE_UINT32)
		return gguf_fail(r, TKV_ERR_FORMAT,
				 "kv 'general.alignment' at 0x%llx has type %s, expected uint32",
				 (unsigned long long)kv->offset, gguf_type_name(kv->type));
	if (kv->v.u64 == 0 || (kv->v.u64 & (kv->v.u64 - 1)))
		return gguf_fail(r, TKV_ERR_FORMAT,
				 "kv 'general.alignment' at 0x%llx is %llu, not a power of two",
				 (unsigned long long)kv->offset, (unsigned long long)kv->v.u64);
	f->alignment = (uint32_t)kv->v.u64;
	return TKV_OK;
}

/* ---- tensors ------------------------------------------------------------ */

static int gguf_rd_tensor_info(struct gguf_rd *r, uint32_t align, uint64_t idx,
			       struct gguf_tensor *t)
{
	const struct tkv_dtype_traits *tr;
	char q[GGUF_MSG_STR_MAX + 4];
	uint64_t at = r->pos, nel = 1, rows = 1, nbytes;
	uint32_t i;
	int rc;

	snprintf(r->ctx, sizeof r->ctx, "tensor #%llu at 0x%llx", (unsigned long long)idx,
		 (unsigned long long)at);
	rc = gguf_rd_str(r, &t->name, "name", UINT64_MAX);
	if (rc)
		return rc;
	if (t->name.len == 0)
		return gguf_fail(r, TKV_ERR_FORMAT, "empty name");
	gguf_quote(q, sizeof q, t->name.ptr, t->name.len);
	snprintf(r->ctx, sizeof r->ctx, "tensor '%s' (#%llu) at 0x%llx", q,
		 (unsigned long long)idx, (unsigned long long)at);
	rc = gguf_rd_u32(r, &t->n_dims, "n_dims");
	if (rc)
		return rc;
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
		return gguf_fail(r, TKV_ERR_FORMAT, "n_dims %u at 0x%llx is not in 1..%d",
				 t->n_dims, (unsigned long long)(r->pos - 4), GGUF_MAX_DIMS);
	for (i = 0; i < GGUF_MAX_DIMS; i++)
		t->ne[i] = 1;
	for (i = 0; i < t->n_dims; i++) {
		rc = gguf_rd_u64(r, &t->ne[i], "dimension");
		if (rc)
			return rc;
		if (t->ne[i] == 0 || t->ne[i] > (uint64_t)INT64_MAX)
			return gguf_fail(r, TKV_ERR_FORMAT, "ne[%u] = %llu at 0x%llx is out of range",
					 i, (unsigned long long)t->ne[i],
					 (unsigned long long)(r->pos - 8));
		if (nel > (uint64_t)INT64_MAX / t->ne[i])
			return gguf_fail(r, TKV_ERR_FORMAT,
					 "element count overflows at ne[%u] = %llu (0x%llx)", i,
					 (unsigned long long)t->ne[i],
					 (unsigned long long)(r->pos - 8));
		nel *= t->ne[i];
		if (i > 0)
			rows *= t->ne[i];
	}
	rc = gguf_rd_u32(r, &t->type, "type");
	if (rc)
		return rc;
	tr = tkv_dtype_traits(t->type);
	if (!tr)
		return gguf_fail(r, TKV_ERR_FORMAT, "unknown tensor type %u at 0x%llx", t->type,
				 (unsigned long long)(r->pos - 4));
	if (t->ne[0] % tr->blck)
		return gguf_fail(r, TKV_ERR_FORMAT,
				 "ne[0] = %llu is not a multiple of the %s block size %u",
				 (unsigned long long)t->ne[0], tr->name, tr->blck);
	/* row bytes = ne0/blck*size <= ne0*size fits; then times rows. */
	nbytes = t->ne[0] / tr->blck * tr->size;
	if (nbytes > UINT64_MAX / rows)
		return gguf_fail(r, TKV_ERR_FORMAT, "data size overflows (%llu elements of %s)",
				 (unsigned long long)nel, tr->name);
	t->nbytes = nbytes * rows;
	rc = gguf_rd_u64(r, &t->offset, "offset");
	if (rc)
		return rc;
	if (t->offset % align)
		return gguf_fail(r, TKV_ERR_FORMAT, "data offset 0x%llx (at 0x%llx) is not a multiple of the alignment %u",
				 (unsigned long long)t->offset, (unsigned long long)(r->pos - 8),
				 align);
	return TKV_OK;
}

struct gguf_extent {
	uint64_t start, end;
	uint64_t idx;
};

static int gguf_extent_cmp(const void *pa, const void *pb)
{
	const struct gguf_extent *a = pa, *b = pb;

	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static void gguf_tensor_label(char *dst, size_t cap, const struct gguf_tensor *t, uint64_t idx)
{
	char q[GGUF_MSG_STR_MAX + 4];

	gguf_quote(q, sizeof q, t->name.ptr, t->name.len);
	snprintf(dst, cap, "tensor '%s' (#%llu)", q, (unsigned long long)idx);
}

/* Checks every tensor's data lies inside the file and that none overlap;
 * sets the data pointers. */
static int gguf_check_extents(struct gguf_rd *r, struct gguf_file *f)
{
	struct gguf_extent *ext;
	uint64_t i, avail;
	int rc = TKV_OK;

	r->ctx[0] = 0;
	if (f->n_tensors == 0)
		return TKV_OK;
	if (f->data_offset > f->size)
		return gguf_fail(r, TKV_ERR_FORMAT,
				 "data section at 0x%llx starts past end of file (size 0x%llx)",
				 (unsigned long long)f->data_offset, (unsigned long long)f->size);
	avail = f->size - f->data_offset;
	for (i = 0; i < f->n_tensors; i++) {
		struct gguf_tensor *t = &f->tensors[i];

		if (t->offset > avail || t->nbytes > avail - t->offset) {
			char lab[GGUF_MSG_STR_MAX + 48];
			uint64_t start = f->data_offset + t->offset; /* may wrap: message only */

			gguf_tensor_label(lab, sizeof lab, t, i);
			if (t->offset > avail)
				return gguf_fail(r, TKV_ERR_FORMAT,
						 "%s: data offset 0x%llx (+ data section 0x%llx) past end of file (size 0x%llx)",
						 lab, (unsigned long long)t->offset,
						 (unsigned long long)f->data_offset,
						 (unsigned long long)f->size);
			return gguf_fail(r, TKV_ERR_FORMAT,
					 "%s: data [0x%llx, 0x%llx) past end of file (size 0x%llx)",
					 lab, (unsigned long long)start,
					 (unsigned long long)(start + t->nbytes),
					 (unsigned long long)f->size);
		}
		t->data = f->base + f->data_offset + t->offset;
	}
	ext = tkv_calloc(f->a, (size_t)f->n_tensors, sizeof *ext);
	if (!ext)
		return gguf_nomem(r, f->n_tensors * sizeof *ext, "the tensor extents");
	for (i = 0; i < f->n_tensors; i++) {
		ext[i].start = f->data_offset + f->tensors[i].offset;
		ext[i].end = ext[i].start + f->tensors[i].nbytes;
		ext[i].idx = i;
	}
	qsort(ext, (size_t)f->n_tensors, sizeof *ext, gguf_extent_cmp);
	for (i = 1; i < f->n_tensors; i++) {
		if (ext[i].start < ext[i - 1].end) {
			char l1[GGUF_MSG_STR_MAX + 48], l2[GGUF_MSG_STR_MAX + 48];

			gguf_tensor_label(l1, sizeof l1, &f->tensors[ext[i].idx], ext[i].idx);
			gguf_tensor_label(l2, sizeof l2, &f->tensors[ext[i - 1].idx], ext[i - 1].idx);
			rc = gguf_fail(r, TKV_ERR_FORMAT,
				       "%s: data [0x%llx, 0x%llx) overlaps %s [0x%llx, 0x%llx)",
				       l1, (unsigned long long)ext[i].start,
				       (unsigned long long)ext[i].end, l2,
				       (unsigned long long)ext[i - 1].start,
				       (unsigned long long)ext[i - 1].end);
			break;
		}
	}
	tkv_free(f->a, ext);
	return rc;
}

/* ---- open / close ------------------------------------------------------- */

static int gguf_rd_header(struct gguf_rd *r, struct gguf_file *f)
{
	uint32_t magic;
	int rc;

	if (r->size < 4)
		return gguf_fail(r, TKV_ERR_FORMAT, "file too small (%llu bytes) to be GGUF",
				 (unsigned long long)r->size);
	magic = gguf_le32(r->p);
	if (magic != GGUF_MAGIC)
		return gguf_fail(r, TKV_ERR_FORMAT,
				 "not a GGUF file: magic 0x%08x at 0x0, expected 0x%08x (\"GGUF\")",
				 magic, GGUF_MAGIC);
	r->pos = 4;
	rc = gguf_rd_u32(r, &f->version, "version");
	if (rc)
		return rc;
	if (f->version == 0x02000000u || f->version == 0x03000000u)
		return gguf_fail(r, TKV_ERR_UNSUPPORTED,
				 "big-endian GGUF (version field 0x%08x at 0x4) is not supported",
				 f->version);
	if (f->version != 2 && f->version != 3)
		return gguf_fail(r, TKV_ERR_UNSUPPORTED,
				 "GGUF version %u (at 0x4) is not supported; only versions 2 and 3 are",
				 f->version);
	rc = gguf_rd_u64(r, &f->n_tensors, "tensor count");
	if (rc)
		return rc;
	rc = gguf_rd_u64(r, &f->n_kv, "kv count");
	if (rc)
		return rc;
	/* Both counts are bounded by the bytes left, so neither can overflow below. */
	if (f->n_kv > gguf_left(r) / GGUF_MIN_KV_BYTES ||
	    f->n_tensors > gguf_left(r) / GGUF_MIN_TINFO_BYTES ||
	    f->n_kv * GGUF_MIN_KV_BYTES + f->n_tensors * GGUF_MIN_TINFO_BYTES > gguf_left(r))
		return gguf_fail(r, TKV_ERR_FORMAT,
				 "%llu kvs (at 0x10) and %llu tensors (at 0x8) cannot fit in the %llu bytes after the header",
				 (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors,
				 (unsigned long long)gguf_left(r));
	return TKV_OK;
}

static int gguf_parse(struct gguf_rd *r, struct gguf_file *f)
{
	size_t d1 = 0, d2 = 0;
	uint64_t i;
	int rc;

	rc = gguf_rd_header(r, f);
	if (rc)
		return rc;
	if (f->n_kv) {
		f->kv = tkv_calloc(f->a, (size_t)f->n_kv, sizeof *f->kv);
		if (!f->kv)
			return gguf_nomem(r, f->n_kv * sizeof *f->kv, "the kv table");
	}
	for (i = 0; i < f->n_kv; i++) {
		rc = gguf_rd_kv(r, i, &f->kv[i]);
		if (rc)
			return rc;
	}
	r->ctx[0] = 0;
	rc = gguf_map_build(&f->kv_map, f->a, f->kv, sizeof *f->kv, (size_t)f->n_kv, &d1, &d2);
	if (rc == TKV_ERR_NOMEM)
		return gguf_nomem(r, (f->n_kv * 2 + 8) * sizeof(size_t), "the key index");
	if (rc) {
		char q[GGUF_MSG_STR_MAX + 4];

		gguf_quote(q, sizeof q, f->kv[d2].key.ptr, f->kv[d2].key.len);
		return gguf_fail(r, TKV_ERR_FORMAT,
				 "kv #%zu '%s' at 0x%llx: duplicate key (first as kv #%zu at 0x%llx)",
				 d2, q, (unsigned long long)f->kv[d2].offset, d1,
				 (unsigned long long)f->kv[d1].offset);
	}
	rc = gguf_rd_alignment(r, f);
	if (rc)
		return rc;

	if (f->n_tensors) {
		f->tensors = tkv_calloc(f->a, (size_t)f->n_tensors, sizeof *f->tensors);
		if (!f->tensors)
			return gguf_nomem(r, f->n_tensors * sizeof *f->tensors, "the tensor table");
	}
	for (i = 0; i < f->n_tensors; i++) {
		rc = gguf_rd_tensor_info(r, f->alignment, i, &f->tensors[i]);
		if (rc)
			return rc;
	}
	r->ctx[0] = 0;
	rc = gguf_map_build(&f->tensor_map, f->a, f->tensors, sizeof *f->tensors,
			    (size_t)f->n_tensors, &d1, &d2);
	if (rc == TKV_ERR_NOMEM)
		return gguf_nomem(r, (f->n_tensors * 2 + 8) * sizeof(size_t), "the tensor index");
	if (rc) {
		char lab[GGUF_MSG_STR_MAX + 48];

		gguf_tensor_label(lab, sizeof lab, &f->tensors[d2], d2);
		return gguf_fail(r, TKV_ERR_FORMAT, "%s: duplicate name (first as tensor #%zu)",
				 lab, d1);
	}

	/* pos <= size, alignment <= 2^31: no overflow. A file without tensors may
	 * end before the padding; its (empty) data section is then the end. */
	f->data_offset = (r->pos + f->alignment - 1) / f->alignment * f->alignment;
	if (f->n_tensors == 0 && f->data_offset > f->size)
		f->data_offset = f->size;
	return gguf_check_extents(r, f);
}

int gguf_open_buffer(struct gguf_file **out, const void *buf, size_t size,
		     const char *name, struct tkv_alloc *a, struct tkv_error *err)
{
	struct gguf_rd r = {0};
	struct gguf_file *f;
	int rc;

	if (!out)
		return tkv_errf(err, TKV_ERR_ARG, "gguf_open_buffer: out is NULL");
	*out = NULL;
	if (!name)
		name = "<buffer>";
	if (!buf && size)
		return tkv_errf(err, TKV_ERR_ARG, "%s: buffer is NULL", name);
	r.p = buf;
	r.size = size;
	r.name = name;
	r.a = a;
	r.err = err;

	f = tkv_calloc(a, 1, sizeof *f);
	if (!f)
		return gguf_nomem(&r, sizeof *f, "the file handle");
	f->a = a;
	f->base = buf;
	f->size = size;
	f->name = tkv_strndup(a, name, strlen(name));
	if (!f->name) {
		rc = gguf_nomem(&r, strlen(name) + 1, "the file name");
		goto out_close;
	}
	rc = gguf_parse(&r, f);
	if (rc)
		goto out_close;
	*out = f;
	return TKV_OK;

out_close:
	gguf_close(f);
	return rc;
}

int gguf_open(struct gguf_file **out, const char *path, struct tkv_alloc *a,
	      struct tkv_error *err)
{
	struct stat st;
	void *map;
	int fd, rc;

	if (!out || !path)
		return tkv_errf(err, TKV_ERR_ARG, "gguf_open: %s is NULL", out ? "path" : "out");
	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tkv_errf(err, TKV_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0) {
		rc = tkv_errf(err, TKV_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
		goto out_fd;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = tkv_errf(err, TKV_ERR_IO, "%s: not a regular file", path);
		goto out_fd;
	}
	if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
		rc = tkv_errf(err, TKV_ERR_UNSUPPORTED, "%s: file of %lld bytes too large to map",
			      path, (long long)st.st_size);
		goto out_fd;
	}
	if (st.st_size == 0) {
		/* mmap of 0 bytes fails; parse the empty buffer for the usual message. */
		close(fd);
		return gguf_open_buffer(out, "", 0, path, a, err);
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		rc = tkv_errf(err, TKV_ERR_IO, "%s: cannot mmap %lld bytes: %s", path,
			      (long long)st.st_size, strerror(errno));
		goto out_fd;
	}
	close(fd);
	rc = gguf_open_buffer(out, map, (size_t)st.st_size, path, a, err);
	if (rc) {
		munmap(map, (size_t)st.st_size);
		return rc;
	}
	(*out)->map = map;
	(*out)->map_size = (size_t)st.st_size;
	return TKV_OK;

out_fd:
	close(fd);
	return rc;
}

void gguf_close(struct gguf_file *f)
{
	uint64_t i;

	if (!f)
		return;
	for (i = 0; f->kv && i < f->n_kv; i++)
		if (f->kv[i].type == GGUF_TYPE_ARRAY)
			tkv_free(f->a, f->kv[i].v.arr.strs);
	tkv_free(f->a, f->kv);
	tkv_free(f->a, f->tensors);
	tkv_free(f->a, f->kv_map.slot);
	tkv_free(f->a, f->tensor_map.slot);
	tkv_free(f->a, f->name);
	if (f->map)
		munmap(f->map, f->map_size);
	tkv_free(f->a, f);
}

/* ---- accessors ---------------------------------------------------------- */

uint32_t gguf_version(const struct gguf_file *f) { return f->version; }
uint32_t gguf_alignment(const struct gguf_file *f) { return f->alignment; }
uint64_t gguf_size(const struct gguf_file *f) { return f->size; }
uint64_t gguf_data_offset(const struct gguf_file *f) { return f->data_offset; }
const char *gguf_name(const struct gguf_file *f) { return f->name; }
uint64_t gguf_n_kv(const struct gguf_file *f) { return f->n_kv; }
uint64_t gguf_n_tensors(const struct gguf_file *f) { return f->n_tensors; }

const struct gguf_kv *gguf_kv_at(const struct gguf_file *f, uint64_t i)
{
	return i < f->n_kv ? &f->kv[i] : NULL;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, uint64_t i)
{
	return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key)
{
	return gguf_map_find(&f->kv_map, f->kv, sizeof *f->kv, key);
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name)
{
	return gguf_map_find(&f->tensor_map, f->tensors, sizeof *f->tensors, name);
}

bool gguf_str_eq(struct gguf_str s, const char *c)
{
	size_t n = strlen(c);

	return s.len == n && memcmp(s.ptr, c, n) == 0;
}

/* ---- typed getters ------------------------------------------------------ */

static bool gguf_is_unsigned(enum gguf_type t)
{
	return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
	       t == GGUF_TYPE_UINT64;
}

static bool gguf_is_signed(enum gguf_type t)
{
	return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
	       t == GGUF_TYPE_INT64;
}

static int gguf_get_kv(const struct gguf_file *f, const char *key, const struct gguf_kv **kv,
		       struct tkv_error *err)
{
	*kv = gguf_find(f, key);
	if (!*kv)
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: key '%s' not found", f->name, key);
	return TKV_OK;
}

static int gguf_type_err(const struct gguf_file *f, const struct gguf_kv *kv, const char *key,
			 const char *want, struct tkv_error *err)
{
	return tkv_errf(err, TKV_ERR_FORMAT, "%s: key '%s' at 0x%llx: %s value does not fit %s",
			f->name, key, (unsigned long long)kv->offset, gguf_type_name(kv->type),
			want);
}

/* The integer value of key within [lo, hi] (hi as uint64, lo as int64), as
 * the bits of an int64 or uint64 in *v (a cast gives the value); *v is left
 * alone on error. */
static int gguf_get_int(const struct gguf_file *f, const char *key, int64_t lo, uint64_t hi,
			const char *want, uint64_t *v, struct tkv_error *err)
{
	const struct gguf_kv *kv;
	int rc = gguf_get_kv(f, key, &kv, err);

	if (rc)
		return rc;
	if ((gguf_is_unsigned(kv->type) && kv->v.u64 <= hi) ||
	    (gguf_is_signed(kv->type) && kv->v.i64 >= lo && (kv->v.i64 < 0 || (uint64_t)kv->v.i64 <= hi))) {
		*v = gguf_is_signed(kv->type) ? (uint64_t)kv->v.i64 : kv->v.u64;
		return TKV_OK;
	}
	return gguf_type_err(f, kv, key, want, err);
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, struct tkv_error *err)
{
	uint64_t v = 0;
	int rc = gguf_get_int(f, key, 0, UINT32_MAX, "uint32", &v, err);

	if (!rc)
		*out = (uint32_t)v;
	return rc;
}

int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out, struct tkv_error *err)
{
	return gguf_get_int(f, key, 0, UINT64_MAX, "uint64", out, err);
}

int gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *out, struct tkv_error *err)
{
	uint64_t v = 0;
	int rc = gguf_get_int(f, key, INT32_MIN, INT32_MAX, "int32", &v, err);

	if (!rc)
		*out = (int32_t)(int64_t)v;
	return rc;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out, struct tkv_error *err)
{
	const struct gguf_kv *kv;
	double d;
	int rc = gguf_get_kv(f, key, &kv, err);

	if (rc)
		return rc;
	if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64)
		d = kv->v.f64;
	else if (gguf_is_signed(kv->type))
		d = (double)kv->v.i64;
	else if (gguf_is_unsigned(kv->type))
		d = (double)kv->v.u64;
	else
		return gguf_type_err(f, kv, key, "float32", err);
	if (isfinite(d) && fabs(d) > FLT_MAX)
		return gguf_type_err(f, kv, key, "float32", err);
	*out = (float)d;
	return TKV_OK;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, struct tkv_error *err)
{
	const struct gguf_kv *kv;
	int rc = gguf_get_kv(f, key, &kv, err);

	if (rc)
		return rc;
	if (kv->type == GGUF_TYPE_BOOL ||
	    (gguf_is_unsigned(kv->type) && kv->v.u64 <= 1) ||
	    (gguf_is_signed(kv->type) && (kv->v.i64 == 0 || kv->v.i64 == 1))) {
		*out = kv->v.u64 != 0;
		return TKV_OK;
	}
	return gguf_type_err(f, kv, key, "bool", err);
}

int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out,
		 struct tkv_error *err)
{
	const struct gguf_kv *kv;
	int rc = gguf_get_kv(f, key, &kv, err);

	if (rc)
		return rc;
	if (kv->type != GGUF_TYPE_STRING)
		return gguf_type_err(f, kv, key, "string", err);
	*out = kv->v.str;
	return TKV_OK;
}

int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_type elem,
		 const struct gguf_kv **out, struct tkv_error *err)
{
	const struct gguf_kv *kv;
	int rc = gguf_get_kv(f, key, &kv, err);

	if (rc)
		return rc;
	if (kv->type != GGUF_TYPE_ARRAY)
		return gguf_type_err(f, kv, key, "an array", err);
	if (elem != GGUF_TYPE_COUNT && kv->v.arr.type != elem)
		return tkv_errf(err, TKV_ERR_FORMAT,
				"%s: key '%s' at 0x%llx: array of %s, expected array of %s",
				f->name, key, (unsigned long long)kv->offset,
				gguf_type_name(kv->v.arr.type), gguf_type_name(elem));
	*out = kv;
	return TKV_OK;
}

int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i)
{
	const uint8_t *p = kv->v.arr.data;

	if (i >= kv->v.arr.n || !p)
		return 0;
	switch (kv->v.arr.type) {
	case GGUF_TYPE_UINT8:
	case GGUF_TYPE_BOOL: return p[i];
	case GGUF_TYPE_INT8: return (int8_t)p[i];
	case GGUF_TYPE_UINT16: return gguf_le16(p + 2 * i);
	case GGUF_TYPE_INT16: return (int16_t)gguf_le16(p + 2 * i);
	case GGUF_TYPE_UINT32: return gguf_le32(p + 4 * i);
	case GGUF_TYPE_INT32: return (int32_t)gguf_le32(p + 4 * i);
	case GGUF_TYPE_UINT64:
	case GGUF_TYPE_INT64: return (int64_t)gguf_le64(p + 8 * i);
	default: return 0;
	}
}

double gguf_arr_f64(const struct gguf_kv *kv, uint64_t i)
{
	const uint8_t *p = kv->v.arr.data;

	if (i >= kv->v.arr.n || !p)
		return 0;
	switch (kv->v.arr.type) {
	case GGUF_TYPE_FLOAT32: return gguf_f32_bits(gguf_le32(p + 4 * i));
	case GGUF_TYPE_FLOAT64: return gguf_f64_bits(gguf_le64(p + 8 * i));
	case GGUF_TYPE_UINT64: return (double)gguf_le64(p + 8 * i);
	default: return (double)gguf_arr_i64(kv, i);
	}
}
