/* gguf_write.c - streaming GGUF writer.
 *
 * Metadata is encoded into a growing byte buffer as it is added (so a 150k-entry
 * vocabulary costs its encoded size once); tensor infos are kept as records and
 * given offsets when the header is written. Tensor data is never held: it goes
 * straight to the output, with the writer inserting alignment padding. */
#include "model/gguf_write.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "ops/dtype.h"
#include "util/alloc.h"
#include "util/status.h"

enum gguf_w_state {
	GGUF_W_ADDING,   /* taking kvs and tensor infos */
	GGUF_W_DATA,     /* header written, taking tensor data */
	GGUF_W_DONE,     /* finished */
};

struct gguf_w_tensor {
	char *name;                /* owned, NUL-terminated */
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS];
	uint32_t type;
	uint64_t nbytes;
	uint64_t offset;           /* from the data section; set at start */
};

/* A growing byte buffer. */
struct gguf_w_buf {
	uint8_t *p;
	size_t len, cap;
};

struct gguf_w {
	struct tkv_alloc *a;
	struct tkv_error err;      /* first failure, sticky */
	enum gguf_w_state state;
	uint32_t version;
	uint32_t alignment;

	struct gguf_w_buf meta;    /* encoded kvs */
	uint64_t n_kv;
	size_t *kv_off;            /* [n_kv] offset of each kv in meta (for dup checks) */
	size_t kv_cap;

	struct gguf_w_tensor *t;   /* [n_t] */
	uint64_t n_t, t_cap;

	FILE *fp;                  /* borrowed; NULL when writing to out */
	struct gguf_w_buf out;     /* memory output */
	uint64_t pos;              /* bytes emitted so far */
	uint64_t data_start;       /* file offset of the data section */
	uint64_t cur;              /* tensor being written */
	uint64_t cur_done;         /* its bytes written so far */
};

static const uint32_t gguf_w_elem_size[GGUF_TYPE_COUNT] = {
	[GGUF_TYPE_UINT8] = 1,   [GGUF_TYPE_INT8] = 1,
	[GGUF_TYPE_UINT16] = 2,  [GGUF_TYPE_INT16] = 2,
	[GGUF_TYPE_UINT32] = 4,  [GGUF_TYPE_INT32] = 4,
	[GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,
	[GGUF_TYPE_UINT64] = 8,  [GGUF_TYPE_INT64] = 8,
	[GGUF_TYPE_FLOAT64] = 8,
};

static int gguf_w_fail(struct gguf_w *w, int status, const char *fmt, ...) TKV_PRINTF(3, 4);

static int gguf_w_fail(struct gguf_w *w, int status, const char *fmt, ...)
{
	va_list ap;

	if (w->err.status)
		return w->err.status;
	va_start(ap, fmt);
	vsnprintf(w->err.msg, sizeof w->err.msg, fmt, ap);
	va_end(ap);
	w->err.status = status;
	return status;
}

/* ---- encoding ----------------------------------------------------------- */

static int gguf_w_reserve(struct gguf_w *w, struct gguf_w_buf *b, size_t n)
{
	size_t cap;
	uint8_t *p;

	if (n <= b->cap - b->len)
		return TKV_OK;
	if (n > SIZE_MAX / 2 - b->len)
		return gguf_w_fail(w, TKV_ERR_NOMEM, "gguf writer: buffer of %zu + %zu bytes too large",
				   b->len, n);
	cap = b->cap ? b->cap : 256;
	while (cap - b->len < n)
		cap *= 2;
	p = tkv_realloc(w->a, b->p, cap);
	if (!p)
		return gguf_w_fail(w, TKV_ERR_NOMEM, "gguf writer: out of memory growing a buffer to %zu bytes",
				   cap);
	b->p = p;
	b->cap = cap;
	return TKV_OK;
}

/* Callers reserve first; these only store. */
static void gguf_w_put(struct gguf_w_buf *b, const void *p, size_t n)
{
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void gguf_w_put_le(struct gguf_w_buf *b, uint64_t v, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		b->p[b->len++] = (uint8_t)(v >> (8 * i));
}

static void gguf_w_put_str(struct gguf_w_buf *b, const char *s, uint64_t len)
{
	gguf_w_put_le(b, len, 8);
	gguf_w_put(b, s, (size_t)len);
}

/* Raw bits of one element of type t at p (host order, any alignment), for
 * gguf_w_put_le. */
static uint64_t gguf_w_elem_bits(enum gguf_type t, const void *p)
{
	uint8_t u8;
	uint16_t u16;
	uint32_t u32;
	uint64_t u64;

	switch (gguf_w_elem_size[t]) {
	case 1: memcpy(&u8, p, 1); return u8;
	case 2: memcpy(&u16, p, 2); return u16;
	case 4: memcpy(&u32, p, 4); return u32;
	case 8: memcpy(&u64, p, 8); return u64;
	default: return 0;
	}
}

/* ---- lifetime ----------------------------------------------------------- */

int gguf_w_init(struct gguf_w **out, struct tkv_alloc *a)
{
	struct gguf_w *w;

	if (!out)
		return TKV_ERR_ARG;
	*out = NULL;
	w = tkv_calloc(a, 1, sizeof *w);
	if (!w)
		return TKV_ERR_NOMEM;
	w->a = a;
	w->version = 3;
	w->alignment = GGUF_DEFAULT_ALIGNMENT;
	*out = w;
	return TKV_OK;
}

void gguf_w_free(struct gguf_w *w)
{
	uint64_t i;

	if (!w)
		return;
	for (i = 0; i < w->n_t; i++)
		tkv_free(w->a, w->t[i].name);
	tkv_free(w->a, w->t);
	tkv_free(w->a, w->kv_off);
	tkv_free(w->a, w->meta.p);
	tkv_free(w->a, w->out.p);
	tkv_free(w->a, w);
}

int gguf_w_set_version(struct gguf_w *w, uint32_t version)
{
	if (w->err.status)
		return w->err.status;
	if (w->state != GGUF_W_ADDING)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: version set after the header was written");
	if (version != 2 && version != 3)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: version %u (only 2 and 3)", version);
	w->version = version;
	return TKV_OK;
}

const struct tkv_error *gguf_w_error(const struct gguf_w *w)
{
	return &w->err;
}

/* ---- metadata ----------------------------------------------------------- */

/* Checks state and key, reserves room for the key, type and `extra` value
 * bytes, and writes the key and type. */
static int gguf_w_begin_kv(struct gguf_w *w, const char *key, enum gguf_type t, size_t extra)
{
	size_t klen, need;
	uint64_t i;
	int rc;

	if (w->err.status)
		return w->err.status;
	if (w->state != GGUF_W_ADDING)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: kv added after the header was written");
	if (!key || !*key)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: empty or NULL key");
	klen = strlen(key);
	for (i = 0; i < w->n_kv; i++) {
		const uint8_t *k = w->meta.p + w->kv_off[i];
		uint64_t len = 0;
		unsigned b;

		for (b = 0; b < 8; b++)
			len |= (uint64_t)k[b] << (8 * b);
		if (len == klen && memcmp(k + 8, key, klen) == 0)
			return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: duplicate key '%s'", key);
	}
	if (w->n_kv == w->kv_cap) {
		size_t cap = w->kv_cap ? w->kv_cap * 2 : 16;
		size_t *p = tkv_realloc(w->a, w->kv_off, cap * sizeof *p);

		if (!p)
			return gguf_w_fail(w, TKV_ERR_NOMEM, "gguf writer: out of memory for key '%s'", key);
		w->kv_off = p;
		w->kv_cap = cap;
	}
	if (klen > SIZE_MAX - 12 || extra > SIZE_MAX - 12 - klen)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: kv '%s' too large", key);
	need = 12 + klen + extra;
	rc = gguf_w_reserve(w, &w->meta, need);
	if (rc)
		return rc;
	w->kv_off[w->n_kv++] = w->meta.len;
	gguf_w_put_str(&w->meta, key, klen);
	gguf_w_put_le(&w->meta, t, 4);
	return TKV_OK;
}

static int gguf_w_add_scalar(struct gguf_w *w, const char *key, enum gguf_type t, uint64_t bits)
{
	int rc = gguf_w_begin_kv(w, key, t, gguf_w_elem_size[t]);

	if (rc)
		return rc;
	gguf_w_put_le(&w->meta, bits, gguf_w_elem_size[t]);
	return TKV_OK;
}

int gguf_w_add_u8(struct gguf_w *w, const char *key, uint8_t v)
{
	return gguf_w_add_scalar(w, key, GGUF_TYPE_UINT8, v);
}

int gguf_w_add_i8(struct gguf_w *w, const char *key, int8_t v)
{
	return gguf_w_add_scalar(w, key, GGUF_TYPE_INT8, (uint8_t)v);
}

int gguf_w_add_u16(struct gguf_w *w, const char *key, uint16_t v)
{
	return gguf_w_add_scalar(w, key, GGUF_TYPE_UINT16, v);
}

int gguf_w_add_i16(struct gguf_w *w, const char *key, int16_t v)
{
	return gguf_w_add_scalar(w, key, GGUF_TYPE_INT16, (uint16_t)v);
}

int gguf_w_add_u32(struct gguf_w *w, const char *key, uint32_t v)
{
	int rc;

	if (!w->err.status && key && strcmp(key, "general.alignment") == 0 &&
	    (v == 0 || (v & (v - 1))))
		return gguf_w_fail(w, TKV_ERR_ARG,
				   "gguf writer: general.alignment %u is not a power of two", v);
	rc = gguf_w_add_scalar(w, key, GGUF_TYPE_UINT32, v);
	if (!rc && strcmp(key, "general.alignment") == 0)
		w->alignment = v;
	return rc;
}

int gguf_w_add_i32(struct gguf_w *w, const char *key, int32_t v)
{
	return gguf_w_add_scalar(w, key, GGUF_TYPE_INT32, (uint32_t)v);
}

int gguf_w_add_f32(struct gguf_w *w, const char *key, float v)
{
	return gguf_w_add_scalar(w, key, GGUF_TYPE_FLOAT32, gguf_w_elem_bits(GGUF_TYPE_FLOAT32, &v));
}

int gguf_w_add_bool(struct gguf_w *w, const char *key, bool v)
{
	return gguf_w_add_scalar(w, key, GGUF_TYPE_BOOL, v ? 1 : 0);
}

int gguf_w_add_u64(struct gguf_w *w, const char *key, uint64_t v)
{
	return gguf_w_add_scalar(w, key, GGUF_TYPE_UINT64, v);
}

int gguf_w_add_i64(struct gguf_w *w, const char *key, int64_t v)
{
	return gguf_w_add_scalar(w, key, GGUF_TYPE_INT64, (uint64_t)v);
}

int gguf_w_add_f64(struct gguf_w *w, const char *key, double v)
{
	return gguf_w_add_scalar(w, key, GGUF_TYPE_FLOAT64, gguf_w_elem_bits(GGUF_TYPE_FLOAT64, &v));
}

int gguf_w_add_strn(struct gguf_w *w, const char *key, const char *s, uint64_t len)
{
	int rc;

	if (!w->err.status && !s && len)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: NULL string for '%s'", key ? key : "?");
	if (len > SIZE_MAX - 8)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: string for '%s' too long", key ? key : "?");
	rc = gguf_w_begin_kv(w, key, GGUF_TYPE_STRING, 8 + (size_t)len);
	if (rc)
		return rc;
	gguf_w_put_str(&w->meta, s, len);
	return TKV_OK;
}

int gguf_w_add_str(struct gguf_w *w, const char *key, const char *s)
{
	return gguf_w_add_strn(w, key, s, s ? strlen(s) : 0);
}

int gguf_w_add_arr(struct gguf_w *w, const char *key, enum gguf_type elem, const void *data,
		   uint64_t n)
{
	const uint8_t *p = data;
	size_t es, bytes;
	uint64_t i;
	int rc;

	if (w->err.status)
		return w->err.status;
	if ((unsigned)elem >= GGUF_TYPE_COUNT || !gguf_w_elem_size[elem])
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: array '%s' of %s elements (numeric or bool only)",
				   key ? key : "?", gguf_type_name(elem));
	if (!data && n)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: NULL data for array '%s'", key ? key : "?");
	es = gguf_w_elem_size[elem];
	if (n > (SIZE_MAX - 12) / es)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: array '%s' too long", key ? key : "?");
	bytes = (size_t)n * es;
	if (elem == GGUF_TYPE_BOOL)
		for (i = 0; i < n; i++)
			if (p[i] > 1)
				return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: bool element %llu of '%s' is %u",
						   (unsigned long long)i, key ? key : "?", p[i]);
	rc = gguf_w_begin_kv(w, key, GGUF_TYPE_ARRAY, 12 + bytes);
	if (rc)
		return rc;
	gguf_w_put_le(&w->meta, elem, 4);
	gguf_w_put_le(&w->meta, n, 8);
	for (i = 0; i < n; i++)
		gguf_w_put_le(&w->meta, gguf_w_elem_bits(elem, p + i * es), (unsigned)es);
	return TKV_OK;
}

/* String i of an array given as (ptr, len) pairs (strs) or as C strings
 * (cstrs, when strs is NULL). 0 for a NULL string (a NULL ptr of length 0
 * is the empty string). */
static int arr_elem(const struct gguf_str *strs, const char *const *cstrs, uint64_t i, const char **p,
		    uint64_t *len)
{
	if (strs) {
		*p = strs[i].ptr;
		*len = strs[i].len;
		return *p || !*len;
	}
	*p = cstrs[i];
	*len = *p ? strlen(*p) : 0;
	return *p != NULL;
}

static int add_arr_str(struct gguf_w *w, const char *key, const struct gguf_str *strs, const char *const *cstrs,
		       uint64_t n)
{
	size_t bytes = 12;
	const char *p;
	uint64_t i, len;
	int rc;

	if (w->err.status)
		return w->err.status;
	if (!strs && !cstrs && n)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: NULL strings for array '%s'", key ? key : "?");
	for (i = 0; i < n; i++) {
		if (!arr_elem(strs, cstrs, i, &p, &len))
			return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: NULL string %llu in '%s'",
					   (unsigned long long)i, key ? key : "?");
		if (len > SIZE_MAX / 2 - bytes - 8)
			return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: array '%s' too large", key ? key : "?");
		bytes += 8 + (size_t)len;
	}
	rc = gguf_w_begin_kv(w, key, GGUF_TYPE_ARRAY, bytes);
	if (rc)
		return rc;
	gguf_w_put_le(&w->meta, GGUF_TYPE_STRING, 4);
	gguf_w_put_le(&w->meta, n, 8);
	for (i = 0; i < n; i++) {
		arr_elem(strs, cstrs, i, &p, &len);
		gguf_w_put_str(&w->meta, p, len);
	}
	return TKV_OK;
}

int gguf_w_add_arr_strn(struct gguf_w *w, const char *key, const struct gguf_str *strs,
			uint64_t n)
{
	return add_arr_str(w, key, strs, NULL, n);
}

int gguf_w_add_arr_str(struct gguf_w *w, const char *key, const char *const *strs, uint64_t n)
{
	return add_arr_str(w, key, NULL, strs, n);
}

/* ---- tensors ------------------------------------------------------------ */

int gguf_w_add_tensor(struct gguf_w *w, const char *name, uint32_t n_dims, const uint64_t *ne,
		      uint32_t type)
{
	const struct tkv_dtype_traits *tr = tkv_dtype_traits(type);
	struct gguf_w_tensor *t;
	uint64_t i, rows = 1, row;

	if (w->err.status)
		return w->err.status;
	if (w->state != GGUF_W_ADDING)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: tensor added after the header was written");
	if (!name || !*name)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: empty or NULL tensor name");
	if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || !ne)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: tensor '%s': n_dims %u not in 1..%d",
				   name, n_dims, GGUF_MAX_DIMS);
	if (!tr)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: tensor '%s': unknown type %u", name, type);
	for (i = 0; i < n_dims; i++) {
		if (ne[i] == 0 || ne[i] > (uint64_t)INT64_MAX)
			return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: tensor '%s': ne[%llu] = %llu",
					   name, (unsigned long long)i, (unsigned long long)ne[i]);
		if (i > 0) {
			if (rows > (uint64_t)INT64_MAX / ne[i])
				return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: tensor '%s': size overflows", name);
			rows *= ne[i];
		}
	}
	if (ne[0] % tr->blck)
		return gguf_w_fail(w, TKV_ERR_ARG,
				   "gguf writer: tensor '%s': ne[0] = %llu not a multiple of the %s block size %u",
				   name, (unsigned long long)ne[0], tr->name, tr->blck);
	row = ne[0] / tr->blck * tr->size;
	if (row > ((uint64_t)INT64_MAX) / rows)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: tensor '%s': size overflows", name);
	for (i = 0; i < w->n_t; i++)
		if (strcmp(w->t[i].name, name) == 0)
			return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: duplicate tensor name '%s'", name);
	if (w->n_t == w->t_cap) {
		uint64_t cap = w->t_cap ? w->t_cap * 2 : 16;
		struct gguf_w_tensor *p = tkv_realloc(w->a, w->t, (size_t)cap * sizeof *p);

		if (!p)
			return gguf_w_fail(w, TKV_ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
		w->t = p;
		w->t_cap = cap;
	}
	t = &w->t[w->n_t];
	memset(t, 0, sizeof *t);
	t->name = tkv_strndup(w->a, name, strlen(name));
	if (!t->name)
		return gguf_w_fail(w, TKV_ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
	t->n_dims = n_dims;
	for (i = 0; i < GGUF_MAX_DIMS; i++)
		t->ne[i] = i < n_dims ? ne[i] : 1;
	t->type = type;
	t->nbytes = row * rows;
	w->n_t++;
	return TKV_OK;
}

uint64_t gguf_w_tensor_nbytes(const struct gguf_w *w, uint64_t i)
{
	return i < w->n_t ? w->t[i].nbytes : 0;
}

/* ---- output ------------------------------------------------------------- */

static int gguf_w_emit(struct gguf_w *w, const void *p, size_t n)
{
	int rc;

	if (!n)
		return TKV_OK;
	if (w->fp) {
		if (fwrite(p, 1, n, w->fp) != n)
			return gguf_w_fail(w, TKV_ERR_IO, "gguf writer: write of %zu bytes at 0x%llx failed: %s",
					   n, (unsigned long long)w->pos, strerror(errno));
	} else {
		rc = gguf_w_reserve(w, &w->out, n);
		if (rc)
			return rc;
		gguf_w_put(&w->out, p, n);
	}
	w->pos += n;
	return TKV_OK;
}

/* Zero bytes until the output position reaches `to`. */
static int gguf_w_pad_to(struct gguf_w *w, uint64_t to)
{
	static const uint8_t zeros[4096];

	while (w->pos < to) {
		uint64_t n = to - w->pos;
		int rc = gguf_w_emit(w, zeros, n < sizeof zeros ? (size_t)n : sizeof zeros);

		if (rc)
			return rc;
	}
	return TKV_OK;
}

static uint64_t gguf_w_align(uint64_t x, uint32_t a)
{
	return (x + a - 1) / a * a;
}

static int gguf_w_start(struct gguf_w *w)
{
	struct gguf_w_buf hdr = {0};
	uint64_t i, off = 0;
	size_t bytes = 24;
	int rc;

	if (w->err.status)
		return w->err.status;
	if (w->state != GGUF_W_ADDING)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: header already written");
	for (i = 0; i < w->n_t; i++) {
		struct gguf_w_tensor *t = &w->t[i];

		t->offset = gguf_w_align(off, w->alignment);
		off = t->offset + t->nbytes;
		if (off < t->offset || off > (uint64_t)INT64_MAX)
			return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: tensor data exceeds 2^63 bytes");
		bytes += 8 + strlen(t->name) + 4 + 8 * t->n_dims + 4 + 8;
	}
	/* Header and tensor infos are built in one buffer, then emitted with the kvs. */
	rc = gguf_w_reserve(w, &hdr, bytes);
	if (rc)
		goto out_free;
	gguf_w_put_le(&hdr, GGUF_MAGIC, 4);
	gguf_w_put_le(&hdr, w->version, 4);
	gguf_w_put_le(&hdr, w->n_t, 8);
	gguf_w_put_le(&hdr, w->n_kv, 8);
	w->state = GGUF_W_DATA;
	rc = gguf_w_emit(w, hdr.p, hdr.len);
	if (rc)
		goto out_free;
	rc = gguf_w_emit(w, w->meta.p, w->meta.len);
	if (rc)
		goto out_free;
	hdr.len = 0;
	for (i = 0; i < w->n_t; i++) {
		struct gguf_w_tensor *t = &w->t[i];
		uint32_t d;

		gguf_w_put_str(&hdr, t->name, strlen(t->name));
		gguf_w_put_le(&hdr, t->n_dims, 4);
		for (d = 0; d < t->n_dims; d++)
			gguf_w_put_le(&hdr, t->ne[d], 8);
		gguf_w_put_le(&hdr, t->type, 4);
		gguf_w_put_le(&hdr, t->offset, 8);
	}
	rc = gguf_w_emit(w, hdr.p, hdr.len);
	if (rc)
		goto out_free;
	/* Without tensors there is no data section to align (and general.alignment
	 * may be up to 2^31). */
	w->data_start = w->n_t ? gguf_w_align(w->pos, w->alignment) : w->pos;
	rc = gguf_w_pad_to(w, w->data_start);
out_free:
	tkv_free(w->a, hdr.p);
	return rc;
}

int gguf_w_start_file(struct gguf_w *w, FILE *fp)
{
	if (!w->err.status && !fp)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: NULL FILE");
	if (!w->err.status && w->state == GGUF_W_ADDING)
		w->fp = fp;
	return gguf_w_start(w);
}

int gguf_w_start_mem(struct gguf_w *w)
{
	return gguf_w_start(w);
}

/* 0 in the data phase; else the writer's error, or (recorded) that `what`
 * came before the header or, after the data, `late`. */
static int gguf_w_in_data(struct gguf_w *w, const char *what, const char *late)
{
	if (w->err.status)
		return w->err.status;
	if (w->state != GGUF_W_DATA)
		return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: %s %s", what,
				   w->state == GGUF_W_ADDING ? "before the header" : late);
	return TKV_OK;
}

int gguf_w_write(struct gguf_w *w, const void *data, size_t n)
{
	const uint8_t *p = data;
	int rc;

	if ((rc = gguf_w_in_data(w, "tensor data written", "after finish")))
		return rc;
	while (n) {
		struct gguf_w_tensor *t;
		uint64_t chunk;

		if (w->cur >= w->n_t)
			return gguf_w_fail(w, TKV_ERR_ARG, "gguf writer: %zu bytes of data past the last tensor", n);
		t = &w->t[w->cur];
		if (w->cur_done == 0) {
			rc = gguf_w_pad_to(w, w->data_start + t->offset);
			if (rc)
				return rc;
		}
		chunk = t->nbytes - w->cur_done;
		if (chunk > n)
			chunk = n;
		rc = gguf_w_emit(w, p, (size_t)chunk);
		if (rc)
			return rc;
		p += chunk;
		n -= (size_t)chunk;
		w->cur_done += chunk;
		if (w->cur_done == t->nbytes) {
			w->cur++;
			w->cur_done = 0;
		}
	}
	return TKV_OK;
}

int gguf_w_finish(struct gguf_w *w)
{
	int rc;

	if ((rc = gguf_w_in_data(w, "finish", "called twice")))
		return rc;
	if (w->cur < w->n_t)
		return gguf_w_fail(w, TKV_ERR_ARG,
				   "gguf writer: tensor '%s' (#%llu): %llu of %llu bytes written",
				   w->t[w->cur].name, (unsigned long long)w->cur,
				   (unsigned long long)w->cur_done, (unsigned long long)w->t[w->cur].nbytes);
	if (w->n_t) {
		rc = gguf_w_pad_to(w, gguf_w_align(w->pos, w->alignment));
		if (rc)
			return rc;
	}
	if (w->fp && fflush(w->fp) != 0)
		return gguf_w_fail(w, TKV_ERR_IO, "gguf writer: flush failed: %s", strerror(errno));
	w->state = GGUF_W_DONE;
	return TKV_OK;
}

const void *gguf_w_mem(const struct gguf_w *w, size_t *size)
{
	if (w->fp || w->state == GGUF_W_ADDING) {
		if (size)
			*size = 0;
		return NULL;
	}
	if (size)
		*size = w->out.len;
	return w->out.p;
}

int gguf_w_add_kv(struct gguf_w *w, const struct gguf_kv *kv)
{
	char key[256];

	snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 255 ? kv->key.len : 255), kv->key.ptr);
	switch (kv->type) {
	case GGUF_TYPE_UINT8: return gguf_w_add_u8(w, key, (uint8_t)kv->v.u64);
	case GGUF_TYPE_INT8: return gguf_w_add_i8(w, key, (int8_t)kv->v.i64);
	case GGUF_TYPE_UINT16: return gguf_w_add_u16(w, key, (uint16_t)kv->v.u64);
	case GGUF_TYPE_INT16: return gguf_w_add_i16(w, key, (int16_t)kv->v.i64);
	case GGUF_TYPE_UINT32: return gguf_w_add_u32(w, key, (uint32_t)kv->v.u64);
	case GGUF_TYPE_INT32: return gguf_w_add_i32(w, key, (int32_t)kv->v.i64);
	case GGUF_TYPE_FLOAT32: return gguf_w_add_f32(w, key, (float)kv->v.f64);
	case GGUF_TYPE_BOOL: return gguf_w_add_bool(w, key, kv->v.u64 != 0);
	case GGUF_TYPE_UINT64: return gguf_w_add_u64(w, key, kv->v.u64);
	case GGUF_TYPE_INT64: return gguf_w_add_i64(w, key, kv->v.i64);
	case GGUF_TYPE_FLOAT64: return gguf_w_add_f64(w, key, kv->v.f64);
	case GGUF_TYPE_STRING: return gguf_w_add_strn(w, key, kv->v.str.ptr, kv->v.str.len);
	case GGUF_TYPE_ARRAY:
		if (kv->v.arr.type == GGUF_TYPE_STRING)
			return gguf_w_add_arr_strn(w, key, kv->v.arr.strs, kv->v.arr.n);
		return gguf_w_add_arr(w, key, kv->v.arr.type, kv->v.arr.data, kv->v.arr.n);
	default:
		return TKV_ERR_FORMAT;
	}
}
