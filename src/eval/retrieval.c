/* retrieval.c - prompt generators and answer scorers of the retrieval tasks
 * (see retrieval.h; the formats are in docs/retrieval.md).
 *
 * A prompt is laid out as header, haystack, question. The haystack is a run
 * of filler units (lines, or sentences each after one space) from a random
 * spot of the corpus, the last one cut at a word, with the needles between
 * units at the boundary whose share of the filler's tokens is nearest each
 * needle's depth. Its length is found by measuring: the whole prompt is
 * tokenized, and the filler's token target moved by the difference until the
 * prompt is at most a percent (or 3 tokens) under the length and never over
 * it. Unit counts (each unit tokenized alone) only choose the filler and the
 * boundaries; the counts that matter are the final tokenization's. */
#include "eval/retrieval.h"

#include <stdio.h>
#include <string.h>

#include "model/tokenizer.h"
#include "util/alloc.h"
#include "util/status.h"

#define RETR_MIN_WORDS 8        /* key words a corpus must offer */
#define RETR_FIT_ITERS 24       /* length-fitting rounds */
#define RETR_COPY_TRIES 16      /* passage spots tried before giving up */
#define RETR_NUM_ANSWER 12      /* answer tokens of the single-number tasks */
#define RETR_MV_ANSWER 48       /* multivalue: " v1, v2, v3, and v4." */
#define RETR_VT_ANSWER 32       /* vartrack: " A B C D" */
#define RETR_N_CHAIN 4          /* vartrack: variables in the chain */
#define RETR_DEPTH_GAP 0.05     /* multikey: least distance between needles' depths */

static const char passkey_header[] =
	"There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
	"I will quiz you about the important information there.";
static const char passkey_question[] = " What is the pass key? The pass key is";
static const char ruler_header[] =
	"Some special magic numbers are hidden within the following text. Make sure to memorize it. "
	"I will quiz you about the numbers afterwards.\n";
static const char vartrack_header[] =
	"Memorize and track the chain(s) of variable assignment hidden in the following text.\n";

/* A filler unit: bytes [off, off + len) of the corpus text; its tokens alone. */
struct retr_unit {
	size_t off, len;
	uint32_t n_tok;
};

/* Units of one kind (lines or sentences) and where each file's start. */
struct retr_units {
	struct retr_unit *u;
	size_t n;
	size_t *file_first;   /* (n_files + 1) index of each file's first unit */
};

struct retr_corpus {
	const struct tok *tok;        /* borrowed */
	struct tkv_alloc *alloc;
	char *text;                   /* the texts, each followed by '\n' */
	size_t len, n_files;
	struct retr_units lines, sents;
	struct retr_unit *words;      /* distinct lowercase words of 4-10 letters, sorted */
	size_t n_words;
};

/* ---- random numbers (splitmix64) ------------------------------------------ */

struct rng {
	uint64_t s;
};

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rng_next(struct rng *r)
{
	return mix64(r->s += 0x9e3779b97f4a7c15ull);
}

/* uniform in [lo, hi] (the modulo bias is below 2^-32 for these ranges) */
static uint32_t rng_range(struct rng *r, uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(rng_next(r) % ((uint64_t)hi - lo + 1));
}

static double rng_unit(struct rng *r)
{
	return (double)(rng_next(r) >> 11) / 9007199254740992.0;
}

uint64_t retr_sample_seed(uint64_t run_seed, enum retr_task_id task, size_t length, double depth, size_t index)
{
	uint64_t h = mix64(run_seed ^ 0x7265747269657661ull);

	h = mix64(h ^ (uint64_t)task);
	h = mix64(h ^ (uint64_t)length);
	h = mix64(h ^ (uint64_t)(depth * 1e6 + 0.5));
	return mix64(h ^ (uint64_t)index);
}

/* ---- tokens ------------------------------------------------------------------ */

/* Tokens of s[0..len) alone (no BOS; the vocabulary's space prefix). */
static int count_tokens(const struct tok *t, const char *s, size_t len, size_t *n, struct tkv_error *err)
{
	int st;

	*n = 0;
	if (len == 0)
		return TKV_OK;
	st = tok_encode(t, s, len, false, false, NULL, 0, n);
	if (st == TKV_OK || (st == TKV_ERR_ARG && *n > 0))
		return TKV_OK;
	return tkv_errf(err, st, "retrieval: cannot tokenize the filler: %s", tkv_status_str(st));
}

/* s[0..len) tokenized (with BOS when bos and the vocabulary adds one) into
 * *ids (allocated). */
static int encode(const struct retr_corpus *c, const char *s, size_t len, bool bos, int32_t **ids, size_t *n,
		  struct tkv_error *err)
{
	size_t need = 0;
	int st;

	*ids = NULL;
	st = tok_encode(c->tok, s, len, bos && tok_add_bos(c->tok), false, NULL, 0, &need);
	if (st && !(st == TKV_ERR_ARG && need > 0))
		return tkv_errf(err, st, "retrieval: cannot tokenize a prompt: %s", tkv_status_str(st));
	if (!(*ids = tkv_malloc(c->alloc, (need + 1) * sizeof **ids)))
		return tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory for %zu tokens", need);
	if ((st = tok_encode(c->tok, s, len, bos && tok_add_bos(c->tok), false, *ids, need + 1, n))) {
		tkv_free(c->alloc, *ids);
		*ids = NULL;
		return tkv_errf(err, st, "retrieval: cannot tokenize a prompt: %s", tkv_status_str(st));
	}
	return TKV_OK;
}

/* The byte offset in s where each of ids[0..n) starts (the encoding of s):
 * the pieces decoded one after the other must give s back (after the space
 * the vocabulary adds in front), else TKV_ERR_UNSUPPORTED. Control tokens
 * (BOS) take no bytes. */
static int offsets(const struct retr_corpus *c, const char *s, size_t len, const int32_t *ids, size_t n,
		   size_t *start, struct tkv_error *err)
{
	long pos = len && tok_add_space_prefix(c->tok) ? -1 : 0;
	char buf[256];

	for (size_t i = 0; i < n; i++) {
		int k = tok_decode(c->tok, ids[i], false, buf, sizeof buf);

		if (k < 0 || (size_t)k > sizeof buf)
			return tkv_errf(err, TKV_ERR_UNSUPPORTED, "retrieval: token %d has no text", ids[i]);
		start[i] = pos < 0 ? 0 : (size_t)pos;
		for (int j = 0; j < k; j++, pos++) {
			if (pos < 0 ? buf[j] != ' ' : (size_t)pos >= len || s[pos] != buf[j])
				return tkv_errf(err, TKV_ERR_UNSUPPORTED,
						"retrieval: the tokenizer does not give the prompt back byte for byte "
						"(at byte %ld); the token offsets need it", pos);
		}
	}
	if (pos != (long)len)
		return tkv_errf(err, TKV_ERR_UNSUPPORTED, "retrieval: the tokenizer's pieces cover %ld of %zu bytes",
				pos, len);
	return TKV_OK;
}

/* The token holding byte off: the last one starting at or before it, from
 * index `first` on. */
static size_t tok_at(const size_t *start, size_t n, size_t first, size_t off)
{
	size_t i = first;

	while (i + 1 < n && start[i + 1] <= off)
		i++;
	return i;
}

/* ---- corpus ------------------------------------------------------------------ */

static bool is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f' || ch == '\v';
}

static bool is_lower(char ch)
{
	return ch >= 'a' && ch <= 'z';
}

static bool is_alpha(char ch)
{
	return is_lower(ch) || (ch >= 'A' && ch <= 'Z');
}

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

/* Appends unit [b, e) of the text (trimmed) to us, when not empty. */
static int add_unit(struct retr_corpus *c, struct retr_units *us, size_t *cap, size_t b, size_t e,
		    struct tkv_error *err)
{
	size_t n_tok;
	int st;

	while (b < e && is_space(c->text[b]))
		b++;
	while (e > b && is_space(c->text[e - 1]))
		e--;
	if (b == e)
		return TKV_OK;
	if (us->n == *cap) {
		size_t nc = *cap ? 2 * *cap : 256;
		struct retr_unit *nu = tkv_realloc(c->alloc, us->u, nc * sizeof *nu);

		if (!nu)
			return tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory for the filler");
		us->u = nu;
		*cap = nc;
	}
	if ((st = count_tokens(c->tok, c->text + b, e - b, &n_tok, err)))
		return st;
	us->u[us->n++] = (struct retr_unit){ b, e - b, n_tok ? (uint32_t)n_tok : 1 };
	return TKV_OK;
}

/* Lines and sentences of file f, the bytes [b, e) of the text. */
static int split_file(struct retr_corpus *c, size_t b, size_t e, size_t *cap_l, size_t *cap_s, struct tkv_error *err)
{
	int st;

	while (b < e) {
		size_t nl = b, s0 = b;

		while (nl < e && c->text[nl] != '\n')
			nl++;
		if ((st = add_unit(c, &c->lines, cap_l, b, nl, err)))
			return st;
		for (size_t i = b; i < nl; i++)
			if ((c->text[i] == '.' || c->text[i] == '?' || c->text[i] == '!') && i + 1 < nl &&
			    c->text[i + 1] == ' ') {
				if ((st = add_unit(c, &c->sents, cap_s, s0, i + 1, err)))
					return st;
				s0 = i + 1;
			}
		if ((st = add_unit(c, &c->sents, cap_s, s0, nl, err)))
			return st;
		b = nl + 1;
	}
	return TKV_OK;
}

static int word_cmp(const char *text, const struct retr_unit *a, const struct retr_unit *b)
{
	int d = memcmp(text + a->off, text + b->off, a->len < b->len ? a->len : b->len);

	return d ? d : (a->len > b->len) - (a->len < b->len);
}

/* Heapsort of w[0..n) by their text (qsort has no context for the text). */
static void sift(const char *text, struct retr_unit *w, size_t root, size_t n)
{
	for (size_t child; (child = 2 * root + 1) < n; root = child) {
		struct retr_unit t;

		if (child + 1 < n && word_cmp(text, &w[child], &w[child + 1]) < 0)
			child++;
		if (word_cmp(text, &w[root], &w[child]) >= 0)
			return;
		t = w[root];
		w[root] = w[child];
		w[child] = t;
	}
}

static void sort_words(const char *text, struct retr_unit *w, size_t n)
{
	for (size_t i = n / 2; i-- > 0;)
		sift(text, w, i, n);
	for (size_t end = n; end-- > 1;) {
		struct retr_unit t = w[0];

		w[0] = w[end];
		w[end] = t;
		sift(text, w, 0, end);
	}
}

/* The distinct lowercase words of 4-10 letters. */
static int collect_words(struct retr_corpus *c, struct tkv_error *err)
{
	size_t cap = 0, n = 0;

	for (size_t i = 0; i < c->len;) {
		size_t j = i;
		bool lower = true;

		if (!is_alpha(c->text[i])) {
			i++;
			continue;
		}
		while (j < c->len && is_alpha(c->text[j]))
			lower &= is_lower(c->text[j++]);
		if (lower && j - i >= 4 && j - i <= 10) {
			if (n == cap) {
				size_t nc = cap ? 2 * cap : 1024;
				struct retr_unit *nw = tkv_realloc(c->alloc, c->words, nc * sizeof *nw);

				if (!nw)
					return tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory for the key words");
				c->words = nw;
				cap = nc;
			}
			c->words[n++] = (struct retr_unit){ i, j - i, 0 };
		}
		i = j;
	}
	if (n) {
		size_t k = 1;

		sort_words(c->text, c->words, n);
		for (size_t i = 1; i < n; i++)
			if (c->words[i].len != c->words[k - 1].len ||
			    memcmp(c->text + c->words[i].off, c->text + c->words[k - 1].off, c->words[i].len))
				c->words[k++] = c->words[i];
		n = k;
	}
	c->n_words = n;
	return TKV_OK;
}

int retr_corpus_init(struct retr_corpus **out, const struct tkv_vocab *v, const char *const *texts, const size_t *lens,
		     size_t n, struct tkv_alloc *a, struct tkv_error *err)
{
	struct retr_corpus *c;
	size_t total = 0, cap_l = 0, cap_s = 0, pos = 0;
	int st;

	*out = NULL;
	for (size_t i = 0; i < n; i++) {
		if (lens[i] > ((size_t)1 << 40) || total + lens[i] + 1 < total)
			return tkv_errf(err, TKV_ERR_ARG, "retrieval: filler text %zu is too large", i + 1);
		total += lens[i] + 1;
	}
	if (!(c = tkv_calloc(a, 1, sizeof *c)))
		return tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory");
	c->tok = tok_of_vocab(v);
	c->alloc = a;
	c->n_files = n;
	c->text = tkv_malloc(a, total + 1);
	c->lines.file_first = tkv_calloc(a, n + 1, sizeof *c->lines.file_first);
	c->sents.file_first = tkv_calloc(a, n + 1, sizeof *c->sents.file_first);
	if (!c->text || !c->lines.file_first || !c->sents.file_first) {
		st = tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory for %zu bytes of filler", total);
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		memcpy(c->text + pos, texts[i], lens[i]);
		c->text[pos + lens[i]] = '\n';
		c->lines.file_first[i] = c->lines.n;
		c->sents.file_first[i] = c->sents.n;
		if ((st = split_file(c, pos, pos + lens[i], &cap_l, &cap_s, err)))
			goto fail;
		pos += lens[i] + 1;
	}
	c->lines.file_first[n] = c->lines.n;
	c->sents.file_first[n] = c->sents.n;
	c->text[total] = 0;
	c->len = total;
	if (c->lines.n == 0) {
		st = tkv_errf(err, TKV_ERR_ARG, "retrieval: the filler texts have no line of text");
		goto fail;
	}
	if ((st = collect_words(c, err)))
		goto fail;
	if (c->n_words < RETR_MIN_WORDS) {
		st = tkv_errf(err, TKV_ERR_ARG, "retrieval: the filler texts have %zu distinct lowercase words of "
			      "4-10 letters, the keys need %d", c->n_words, RETR_MIN_WORDS);
		goto fail;
	}
	*out = c;
	return TKV_OK;
fail:
	retr_corpus_free(c);
	return st;
}

void retr_corpus_free(struct retr_corpus *c)
{
	if (!c)
		return;
	tkv_free(c->alloc, c->text);
	tkv_free(c->alloc, c->lines.u);
	tkv_free(c->alloc, c->lines.file_first);
	tkv_free(c->alloc, c->sents.u);
	tkv_free(c->alloc, c->sents.file_first);
	tkv_free(c->alloc, c->words);
	tkv_free(c->alloc, c);
}

/* A random start: a random file that has units, a random unit in it. */
static size_t random_start(const struct retr_corpus *c, const struct retr_units *us, struct rng *r)
{
	size_t f = rng_next(r) % c->n_files;

	while (us->file_first[f + 1] == us->file_first[f])
		f = (f + 1) % c->n_files;
	return us->file_first[f] + rng_next(r) % (us->file_first[f + 1] - us->file_first[f]);
}

/* ---- layout ------------------------------------------------------------------ */

/* What a prompt is made of. Needles are in order of appearance (depths not
 * decreasing); units[start..] (cyclic) is the filler. */
struct layout {
	const char *header, *question;
	size_t header_len, question_len;
	bool lines;                         /* units on their own lines, else each after a space */
	const char *nd[RETR_MAX_NEEDLES];
	size_t nd_len[RETR_MAX_NEEDLES];
	double nd_depth[RETR_MAX_NEEDLES];
	size_t n_nd;
	const struct retr_units *units;
	size_t start;
	size_t target;                      /* most tokens of the prompt, BOS included */
};

/* A prompt as built: text, tokens and where its parts begin. */
struct built {
	char *text;
	size_t len;
	int32_t *ids;
	size_t n;
	size_t hay_begin, n_context, nd_tok[RETR_MAX_NEEDLES];
	size_t nd_end[RETR_MAX_NEEDLES];    /* the token holding the byte after each needle */
	size_t nd_off[RETR_MAX_NEEDLES];    /* byte offsets of the needles' text */
};

static void built_free(const struct retr_corpus *c, struct built *b)
{
	tkv_free(c->alloc, b->text);
	tkv_free(c->alloc, b->ids);
	b->text = NULL;
	b->ids = NULL;
}

/* The filler for `need` tokens: whole units from the start, then the longest
 * run of words of the next one that still fits (*cut bytes of it, *cut_tok
 * tokens; 0 when none). Returns the number of whole units. */
static int pick_filler(const struct retr_corpus *c, const struct layout *l, long need, size_t *n_whole,
		       size_t *cut, size_t *cut_tok, struct tkv_error *err)
{
	const struct retr_units *us = l->units;
	long sum = 0;
	size_t k = 0;
	int st;

	*cut = *cut_tok = 0;
	while (sum + (long)us->u[(l->start + k) % us->n].n_tok <= need)
		sum += us->u[(l->start + k++) % us->n].n_tok;
	*n_whole = k;
	{
		const struct retr_unit *u = &us->u[(l->start + k) % us->n];
		const char *s = c->text + u->off;
		size_t lo = 0, hi = 0, ends[512], n_ends = 0;

		/* word ends (the bytes before each space), at most 512 of them */
		for (size_t i = 1; i < u->len && n_ends < 512; i++)
			if (s[i] == ' ' && s[i - 1] != ' ')
				ends[n_ends++] = i;
		/* the most words whose tokens fit: binary search over ends */
		hi = n_ends;
		while (lo < hi) {
			size_t mid = (lo + hi + 1) / 2, n_tok;

			if ((st = count_tokens(c->tok, s, ends[mid - 1], &n_tok, err)))
				return st;
			if (sum + (long)n_tok <= need)
				lo = mid;
			else
				hi = mid - 1;
		}
		if (lo > 0) {
			*cut = ends[lo - 1];
			if ((st = count_tokens(c->tok, s, *cut, cut_tok, err)))
				return st;
		}
	}
	return TKV_OK;
}

/* Appends n bytes; the buffer was sized beforehand. */
static void put(char *buf, size_t *len, const char *s, size_t n)
{
	memcpy(buf + *len, s, n);
	*len += n;
}

/* Builds the prompt of l with the filler of pick_filler(need). */
static int build(const struct retr_corpus *c, const struct layout *l, long need, struct built *b,
		 struct tkv_error *err)
{
	const struct retr_units *us = l->units;
	size_t n_whole, cut, cut_tok, m, bytes, *cum = NULL, bound[RETR_MAX_NEEDLES], *start = NULL;
	size_t q_off, hay_off, n_items = 0, first;
	int st;

	memset(b, 0, sizeof *b);
	if ((st = pick_filler(c, l, need, &n_whole, &cut, &cut_tok, err)))
		return st;
	m = n_whole + (cut > 0);
	if (!(cum = tkv_malloc(c->alloc, (m + 1) * sizeof *cum)))
		return tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory");
	/* cum[j]: filler tokens before unit j; the bytes of the whole text */
	cum[0] = 0;
	bytes = l->header_len + l->question_len + 1;
	for (size_t j = 0; j < m; j++) {
		const struct retr_unit *u = &us->u[(l->start + j) % us->n];
		bool last_cut = j == n_whole;

		cum[j + 1] = cum[j] + (last_cut ? cut_tok : u->n_tok);
		bytes += (last_cut ? cut : u->len) + 1;
	}
	for (size_t i = 0; i < l->n_nd; i++) {
		double want = l->nd_depth[i] * (double)cum[m], best = 1e300;

		bytes += l->nd_len[i] + 1;
		bound[i] = 0;
		for (size_t j = 0; j <= m; j++) {
			double d = (double)cum[j] - want;

			if ((d < 0 ? -d : d) < best) {
				best = d < 0 ? -d : d;
				bound[i] = j;
			}
		}
		if (i > 0 && bound[i] < bound[i - 1])   /* keep the order of appearance */
			bound[i] = bound[i - 1];
	}
	tkv_free(c->alloc, cum);
	if (!(b->text = tkv_malloc(c->alloc, bytes)))
		return tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory for a %zu-byte prompt", bytes);
	put(b->text, &b->len, l->header, l->header_len);
	hay_off = b->len;
	for (size_t j = 0, i = 0; j <= m; j++) {
		for (; i < l->n_nd && bound[i] == j; i++) {
			if (l->lines && n_items++)
				put(b->text, &b->len, "\n", 1);
			else if (!l->lines)
				put(b->text, &b->len, " ", 1);
			b->nd_off[i] = b->len;
			put(b->text, &b->len, l->nd[i], l->nd_len[i]);
		}
		if (j < m) {
			const struct retr_unit *u = &us->u[(l->start + j) % us->n];

			if (l->lines && n_items++)
				put(b->text, &b->len, "\n", 1);
			else if (!l->lines)
				put(b->text, &b->len, " ", 1);
			put(b->text, &b->len, c->text + u->off, j == n_whole ? cut : u->len);
		}
	}
	q_off = b->len;
	put(b->text, &b->len, l->question, l->question_len);
	b->text[b->len] = 0;

	if ((st = encode(c, b->text, b->len, true, &b->ids, &b->n, err)))
		goto fail;
	if (!(start = tkv_malloc(c->alloc, (b->n + 1) * sizeof *start))) {
		st = tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory");
		goto fail;
	}
	if ((st = offsets(c, b->text, b->len, b->ids, b->n, start, err)))
		goto fail;
	first = b->n && tok_is_control(c->tok, b->ids[0]) ? 1 : 0;
	/* a needle after a space starts with the token holding that space */
	b->hay_begin = hay_off == 0 ? first : tok_at(start, b->n, first, hay_off);
	b->n_context = tok_at(start, b->n, first, q_off);
	for (size_t i = 0; i < l->n_nd; i++) {
		b->nd_tok[i] = tok_at(start, b->n, first, l->lines ? b->nd_off[i] : b->nd_off[i] - 1);
		b->nd_end[i] = tok_at(start, b->n, first, b->nd_off[i] + l->nd_len[i]);
	}
	tkv_free(c->alloc, start);
	return TKV_OK;
fail:
	tkv_free(c->alloc, start);
	built_free(c, b);
	return st;
}

/* The prompt of l, fitted to l->target tokens: at most that, and at most a
 * percent (or 3 tokens) under it when the filler allows. The filler's token
 * target is searched between one that fits (lo) and one that does not (hi):
 * a secant step (the last build's shortfall) kept inside the bracket. */
static int fit(const struct retr_corpus *c, const struct layout *l, const char *task, struct built *out,
	       struct tkv_error *err)
{
	size_t tol = l->target / 100 > 3 ? l->target / 100 : 3;
	long lo = 0, hi = -1, need = 0, last;
	int st;

	if ((st = build(c, l, 0, out, err)))
		return st;
	if (out->n > l->target) {
		st = tkv_errf(err, TKV_ERR_ARG, "retrieval: %s needs %zu tokens without filler, more than the %zu "
			      "its length leaves for the prompt", task, out->n, l->target);
		built_free(c, out);
		return st;
	}
	last = (long)out->n;
	for (int it = 0; it < RETR_FIT_ITERS && l->target - out->n > tol; it++) {
		struct built b;

		need += (long)l->target - last;
		if (need <= lo)
			need = lo + 1;
		if (hi >= 0 && need >= hi)
			need = lo + (hi - lo) / 2;
		if (need <= lo)
			break;   /* hi == lo + 1: nothing between */
		if ((st = build(c, l, need, &b, err))) {
			built_free(c, out);
			return st;
		}
		last = (long)b.n;
		if (b.n <= l->target) {
			lo = need;
			if (b.n >= out->n) {
				built_free(c, out);
				*out = b;
			} else {
				built_free(c, &b);
			}
		} else {
			hi = need;
			built_free(c, &b);
		}
	}
	return TKV_OK;
}

/* ---- samples ----------------------------------------------------------------- */

static void sample_init(struct retr_sample *s, enum retr_task_id task, size_t length, double depth, uint64_t seed)
{
	memset(s, 0, sizeof *s);
	s->task = task;
	s->length = length;
	s->depth = depth;
	s->seed = seed;
}

/* Moves a fitted prompt into s. */
static void take(struct retr_sample *s, const struct layout *l, struct built *b)
{
	s->text = b->text;
	s->text_len = b->len;
	s->ids = b->ids;
	s->n_ids = b->n;
	s->hay_begin = b->hay_begin;
	s->n_context = b->n_context;
	s->n_needles = l->n_nd;
	for (size_t i = 0; i < l->n_nd; i++) {
		s->needle_tok[i] = b->nd_tok[i];
		s->needle_depth[i] = l->nd_depth[i];
	}
	b->text = NULL;
	b->ids = NULL;
}

static void layout_init(struct layout *l, const struct retr_corpus *c, const struct retr_sample *s, bool lines,
			const char *header, struct rng *r)
{
	memset(l, 0, sizeof *l);
	l->lines = lines;
	l->header = header;
	l->header_len = strlen(header);
	l->units = lines ? &c->lines : &c->sents;
	l->start = random_start(c, l->units, r);
	l->target = s->length - retr_tasks[s->task].n_answer;
}

/* A key: one corpus word or two joined by '-', different from keys[0..n). */
static void make_key(const struct retr_corpus *c, struct rng *r, char (*keys)[RETR_KEY_MAX], size_t n)
{
	char *k = keys[n];

	for (;;) {
		const struct retr_unit *w1 = &c->words[rng_next(r) % c->n_words];
		bool dup = false;

		if (rng_next(r) & 1) {
			const struct retr_unit *w2 = &c->words[rng_next(r) % c->n_words];

			if (w2 == w1)
				continue;
			snprintf(k, RETR_KEY_MAX, "%.*s-%.*s", (int)w1->len, c->text + w1->off, (int)w2->len,
				 c->text + w2->off);
		} else {
			snprintf(k, RETR_KEY_MAX, "%.*s", (int)w1->len, c->text + w1->off);
		}
		for (size_t i = 0; i < n; i++)
			dup |= !strcmp(keys[i], k);
		if (!dup)
			return;
	}
}

/* A 7-digit value different from values[0..n). */
static uint32_t make_value(struct rng *r, const uint32_t *values, size_t n)
{
	for (;;) {
		uint32_t v = rng_range(r, 1000000, 9999999);
		bool dup = false;

		for (size_t i = 0; i < n; i++)
			dup |= values[i] == v;
		if (!dup)
			return v;
	}
}

/* Depths of a chain of n needles: the first at d, the rest spread evenly
 * between it and the end. */
static void spread(double d, double *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = d + (1.0 - d) * (double)i / (double)n;
}

static int make_passkey(const struct retr_corpus *c, struct retr_sample *s, struct tkv_error *err)
{
	struct rng r = { s->seed };
	struct layout l;
	struct built b;
	char needle[128];
	int st;

	layout_init(&l, c, s, false, passkey_header, &r);
	s->values[0] = rng_range(&r, 1, 50000);
	snprintf(needle, sizeof needle, "The pass key is %u. Remember it. %u is the pass key.", s->values[0],
		 s->values[0]);
	l.nd[0] = needle;
	l.nd_len[0] = strlen(needle);
	l.nd_depth[0] = s->depth;
	l.n_nd = 1;
	l.question = passkey_question;
	l.question_len = strlen(passkey_question);
	if ((st = fit(c, &l, "passkey", &b, err)))
		return st;
	take(s, &l, &b);
	snprintf(s->answer, sizeof s->answer, "%u", s->values[0]);
	return TKV_OK;
}

/* niah and multikey: n_keys needles with distinct keys, the asked one at the
 * chosen depth, the others at random depths at least RETR_DEPTH_GAP apart. */
static int make_keys(const struct retr_corpus *c, struct retr_sample *s, size_t n_keys, struct tkv_error *err)
{
	struct rng r = { s->seed };
	struct layout l;
	struct built b;
	char needles[RETR_MAX_NEEDLES][160], question[256];
	double depth[RETR_MAX_NEEDLES];
	size_t order[RETR_MAX_NEEDLES];
	int st;

	layout_init(&l, c, s, true, ruler_header, &r);
	for (size_t i = 0; i < n_keys; i++) {
		make_key(c, &r, s->keys, i);
		s->values[i] = make_value(&r, s->values, i);
		depth[i] = s->depth;
		for (int tries = 0; i > 0 && tries < 64; tries++) {
			bool near = false;

			depth[i] = rng_unit(&r);
			for (size_t j = 0; j < i; j++)
				near |= depth[i] - depth[j] < RETR_DEPTH_GAP && depth[j] - depth[i] < RETR_DEPTH_GAP;
			if (!near)
				break;
		}
	}
	/* needle 0 is the asked one; lay them out in order of depth */
	for (size_t i = 0; i < n_keys; i++)
		order[i] = i;
	for (size_t i = 1; i < n_keys; i++)
		for (size_t j = i; j > 0 && depth[order[j]] < depth[order[j - 1]]; j--) {
			size_t t = order[j];

			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	snprintf(question, sizeof question, "\nWhat is the special magic number for %s mentioned in the provided "
		 "text? The special magic number for %s mentioned in the provided text is", s->keys[0], s->keys[0]);
	{
		char keys[RETR_MAX_NEEDLES][RETR_KEY_MAX];
		uint32_t values[RETR_MAX_NEEDLES];

		for (size_t i = 0; i < n_keys; i++) {
			memcpy(keys[i], s->keys[order[i]], RETR_KEY_MAX);
			values[i] = s->values[order[i]];
			if (order[i] == 0)
				s->asked = i;
		}
		for (size_t i = 0; i < n_keys; i++) {
			memcpy(s->keys[i], keys[i], RETR_KEY_MAX);
			s->values[i] = values[i];
			snprintf(needles[i], sizeof needles[i], "One of the special magic numbers for %s is: %u.",
				 keys[i], values[i]);
			l.nd[i] = needles[i];
			l.nd_len[i] = strlen(needles[i]);
			l.nd_depth[i] = depth[order[i]];
		}
	}
	l.n_nd = n_keys;
	l.question = question;
	l.question_len = strlen(question);
	if ((st = fit(c, &l, n_keys > 1 ? "multikey" : "niah", &b, err)))
		return st;
	take(s, &l, &b);
	snprintf(s->answer, sizeof s->answer, "%u", s->values[s->asked]);
	return TKV_OK;
}

static int make_niah(const struct retr_corpus *c, struct retr_sample *s, struct tkv_error *err)
{
	return make_keys(c, s, 1, err);
}

static int make_multikey(const struct retr_corpus *c, struct retr_sample *s, struct tkv_error *err)
{
	return make_keys(c, s, RETR_MAX_NEEDLES, err);
}

static int make_multivalue(const struct retr_corpus *c, struct retr_sample *s, struct tkv_error *err)
{
	struct rng r = { s->seed };
	struct layout l;
	struct built b;
	char needles[RETR_MAX_NEEDLES][160], question[256];
	int st;

	layout_init(&l, c, s, true, ruler_header, &r);
	make_key(c, &r, s->keys, 0);
	spread(s->depth, l.nd_depth, RETR_MAX_NEEDLES);
	for (size_t i = 0; i < RETR_MAX_NEEDLES; i++) {
		memcpy(s->keys[i], s->keys[0], RETR_KEY_MAX);
		s->values[i] = make_value(&r, s->values, i);
		snprintf(needles[i], sizeof needles[i], "One of the special magic numbers for %s is: %u.", s->keys[0],
			 s->values[i]);
		l.nd[i] = needles[i];
		l.nd_len[i] = strlen(needles[i]);
	}
	l.n_nd = RETR_MAX_NEEDLES;
	snprintf(question, sizeof question, "\nWhat are all the special magic numbers for %s mentioned in the "
		 "provided text? The special magic numbers for %s mentioned in the provided text are", s->keys[0],
		 s->keys[0]);
	l.question = question;
	l.question_len = strlen(question);
	if ((st = fit(c, &l, "multivalue", &b, err)))
		return st;
	take(s, &l, &b);
	snprintf(s->answer, sizeof s->answer, "%u, %u, %u, and %u", s->values[0], s->values[1], s->values[2],
		 s->values[3]);
	return TKV_OK;
}

static int make_vartrack(const struct retr_corpus *c, struct retr_sample *s, struct tkv_error *err)
{
	struct rng r = { s->seed };
	struct layout l;
	struct built b;
	char needles[RETR_N_CHAIN][64], question[320];
	size_t alen = 0;
	int st;

	layout_init(&l, c, s, true, vartrack_header, &r);
	s->values[0] = rng_range(&r, 10000, 99999);
	for (size_t i = 0; i < RETR_N_CHAIN; i++) {
		bool dup;

		do {
			dup = false;
			for (size_t k = 0; k < RETR_VAR_LEN; k++)
				s->vars[i][k] = (char)('A' + rng_range(&r, 0, 25));
			s->vars[i][RETR_VAR_LEN] = 0;
			for (size_t j = 0; j < i; j++)
				dup |= !strcmp(s->vars[i], s->vars[j]);
		} while (dup);
		if (i == 0)
			snprintf(needles[i], sizeof needles[i], "VAR %s = %u.", s->vars[0], s->values[0]);
		else
			snprintf(needles[i], sizeof needles[i], "VAR %s = VAR %s.", s->vars[i], s->vars[i - 1]);
		l.nd[i] = needles[i];
		l.nd_len[i] = strlen(needles[i]);
		alen += (size_t)snprintf(s->answer + alen, sizeof s->answer - alen, "%s%s", i ? " " : "", s->vars[i]);
	}
	spread(s->depth, l.nd_depth, RETR_N_CHAIN);
	l.n_nd = RETR_N_CHAIN;
	snprintf(question, sizeof question, "\nQuestion: Find all variables that are assigned the value %u in the "
		 "text above. Answer: According to the chain(s) of variables assigned in the text above, %d "
		 "variables are assigned the value %u, they are:", s->values[0], RETR_N_CHAIN, s->values[0]);
	l.question = question;
	l.question_len = strlen(question);
	if ((st = fit(c, &l, "vartrack", &b, err)))
		return st;
	take(s, &l, &b);
	return TKV_OK;
}

/* A copy passage: from a random line on (its lines kept), the text of the
 * first RETR_COPY_PASSAGE tokens it has after a newline, into *p (allocated).
 * *next gets the line after the last one used. */
static int copy_passage(const struct retr_corpus *c, struct rng *r, char **p, size_t *p_len, size_t *next,
			struct tkv_error *err)
{
	const struct retr_units *us = &c->lines;
	size_t line = random_start(c, us, r), bytes = 1, n_tok = 0, k = 0, n_ids, *start = NULL;
	char *s;
	int32_t *ids = NULL;
	int st;

	/* lines until their tokens alone pass the passage by a margin */
	while (n_tok < RETR_COPY_PASSAGE + 16 && k < us->n) {
		bytes += us->u[(line + k) % us->n].len + 1;
		n_tok += us->u[(line + k++) % us->n].n_tok;
	}
	*next = (line + k) % us->n;
	if (!(s = tkv_malloc(c->alloc, bytes + 1)))
		return tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory");
	s[0] = '\n';
	bytes = 1;
	for (size_t j = 0; j < k; j++) {
		const struct retr_unit *u = &us->u[(line + j) % us->n];

		if (j)
			s[bytes++] = '\n';
		memcpy(s + bytes, c->text + u->off, u->len);
		bytes += u->len;
	}
	s[bytes] = 0;
	/* its tokens after a newline, as in the prompt */
	if ((st = encode(c, s, bytes, false, &ids, &n_ids, err)))
		goto out;
	if (!(start = tkv_malloc(c->alloc, (n_ids + 1) * sizeof *start))) {
		st = tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory");
		goto out;
	}
	if ((st = offsets(c, s, bytes, ids, n_ids, start, err)))
		goto out;
	{
		size_t t0 = tok_at(start, n_ids, 0, 1), end = bytes;

		if (start[t0] != 1 || n_ids - t0 < RETR_COPY_PREFIX + RETR_COPY_ANSWER) {
			*p = NULL;   /* no clean start, or too short: the caller tries another spot */
			goto out;
		}
		if (t0 + RETR_COPY_PASSAGE < n_ids)
			end = start[t0 + RETR_COPY_PASSAGE];
		while (end > 1 && (s[end - 1] == ' ' || s[end - 1] == '\n'))
			end--;
		*p_len = end - 1;
		if (!(*p = tkv_strndup(c->alloc, s + 1, end - 1)))
			st = tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory");
	}
out:
	tkv_free(c->alloc, start);
	tkv_free(c->alloc, ids);
	tkv_free(c->alloc, s);
	return st;
}

/* The text of the passage's first RETR_COPY_PREFIX tokens in prompt b (the
 * passage's tokens start at nd_tok[0]): "\n" and those bytes, into q. */
static int copy_question(const struct retr_corpus *c, const struct built *b, char *q, size_t cap,
			 struct tkv_error *err)
{
	size_t *start = tkv_malloc(c->alloc, (b->n + 1) * sizeof *start), from, to;
	int st;

	if (!start)
		return tkv_errf(err, TKV_ERR_NOMEM, "retrieval: out of memory");
	if ((st = offsets(c, b->text, b->len, b->ids, b->n, start, err)))
		goto out;
	from = start[b->nd_tok[0]];
	to = b->nd_tok[0] + RETR_COPY_PREFIX < b->n ? start[b->nd_tok[0] + RETR_COPY_PREFIX] : b->len;
	if (from != b->nd_off[0] || to - from + 2 > cap)
		q[0] = 0;
	else
		snprintf(q, cap, "\n%.*s", (int)(to - from), b->text + from);
out:
	tkv_free(c->alloc, start);
	return st;
}

/* copy: a passage (whole lines from another spot, its lines kept) between
 * two filler lines at the depth; the prompt ends with a newline and the text
 * of its first 16 tokens, and the next 32 are the answer. The filler starts right after the passage's lines, so it holds the
 * passage again only when the corpus is shorter than the haystack. A spot
 * whose tokens 2-16 do not come out the same in the prompt and at its end is
 * replaced by another (the first may differ: at depth 0 the passage opens
 * the prompt and takes the vocabulary's space prefix, which a word after a
 * newline does not). */
static int make_copy(const struct retr_corpus *c, struct retr_sample *s, struct tkv_error *err)
{
	struct rng r = { s->seed };
	int st = TKV_OK;

	for (int tries = 0; tries < RETR_COPY_TRIES; tries++) {
		struct layout l;
		struct built b = { 0 }, probe;
		char *p = NULL, q[2048];
		size_t p_len = 0, next, nt;
		bool ok;

		layout_init(&l, c, s, true, "", &r);
		if ((st = copy_passage(c, &r, &p, &p_len, &next, err)))
			return st;
		if (!p)
			continue;
		l.start = next;
		l.nd[0] = p;
		l.nd_len[0] = p_len;
		l.nd_depth[0] = s->depth;
		l.n_nd = 1;
		/* the question's text from the passage's tokens in place: a probe
		 * with a question of the same kind (a newline and text) */
		l.question = "\nX";
		l.question_len = 2;
		st = build(c, &l, 0, &probe, err);
		if (!st) {
			st = copy_question(c, &probe, q, sizeof q, err);
			built_free(c, &probe);
		}
		if (!st && q[0]) {
			l.question = q;
			l.question_len = strlen(q);
			st = fit(c, &l, "copy", &b, err);
		}
		if (st || !q[0]) {
			tkv_free(c->alloc, p);
			if (st)
				return st;
			continue;
		}
		/* the passage's tokens in the prompt, and the same 16 at its end */
		nt = b.nd_tok[0];
		ok = nt + RETR_COPY_PREFIX + RETR_COPY_ANSWER <= b.nd_end[0] && b.n >= b.n_context + RETR_COPY_PREFIX &&
		     !memcmp(b.ids + nt + 1, b.ids + b.n - (RETR_COPY_PREFIX - 1), (RETR_COPY_PREFIX - 1) * sizeof *b.ids);
		tkv_free(c->alloc, p);
		if (!ok) {
			built_free(c, &b);
			continue;
		}
		memcpy(s->expect, b.ids + nt + RETR_COPY_PREFIX, RETR_COPY_ANSWER * sizeof *s->expect);
		s->n_expect = RETR_COPY_ANSWER;
		take(s, &l, &b);
		retr_decode(c, s->expect, s->n_expect, s->answer, sizeof s->answer);
		return TKV_OK;
	}
	return tkv_errf(err, TKV_ERR_ARG, "retrieval: copy: no passage of %d tokens found that the tokenizer "
			"splits the same way on its line and at the end of the prompt (in %d spots); "
			"the filler texts may be too short", RETR_COPY_PASSAGE, RETR_COPY_TRIES);
}

int retr_sample_make(const struct retr_corpus *c, enum retr_task_id task, size_t length, double depth,
		     uint64_t seed, struct retr_sample *s, struct tkv_error *err)
{
	int st;

	sample_init(s, task, length, depth, seed);
	if ((int)task < 0 || task >= RETR_TASK_COUNT || !(depth >= 0.0 && depth <= 1.0))
		return tkv_errf(err, TKV_ERR_ARG, "retrieval: bad task %d or depth %g", (int)task, depth);
	if (length <= retr_tasks[task].n_answer)
		return tkv_errf(err, TKV_ERR_ARG, "retrieval: length %zu leaves no room for a %s prompt", length,
				retr_tasks[task].name);
	if ((st = retr_tasks[task].make(c, s, err)))
		retr_sample_free(c, s);
	return st;
}

void retr_sample_free(const struct retr_corpus *c, struct retr_sample *s)
{
	if (!s)
		return;
	tkv_free(c->alloc, s->text);
	tkv_free(c->alloc, s->ids);
	s->text = NULL;
	s->ids = NULL;
}

/* ---- answers ----------------------------------------------------------------- */

size_t retr_decode(const struct retr_corpus *c, const int32_t *ids, size_t n, char *buf, size_t cap)
{
	struct tok_stream ts = { 0 };
	char piece[512];
	size_t len = 0;

	if (cap == 0)
		return 0;
	for (size_t i = 0; i <= n; i++) {
		int k = i < n ? tok_stream_push(c->tok, &ts, ids[i], piece, sizeof piece)
			      : tok_stream_flush(&ts, piece, sizeof piece);

		for (int j = 0; j < k && len + 1 < cap; j++)
			buf[len++] = piece[j];
	}
	buf[len] = 0;
	return len;
}

bool retr_answer_done(const struct retr_corpus *c, const struct retr_sample *s, const int32_t *gen, size_t n)
{
	char piece[512];
	int k;

	if (n == 0)
		return false;
	if (tok_is_eog(c->tok, gen[n - 1]))
		return true;
	if (!retr_tasks[s->task].one_line)
		return false;
	k = tok_decode(c->tok, gen[n - 1], false, piece, sizeof piece);
	return k > 0 && memchr(piece, '\n', (size_t)k < sizeof piece ? (size_t)k : sizeof piece) != NULL;
}

/* text, after leading spaces, starts with the digits of v and then a non-digit */
static bool starts_with_number(const char *text, uint32_t v)
{
	char want[16];
	int n = snprintf(want, sizeof want, "%u", v);

	while (*text == ' ')
		text++;
	return !strncmp(text, want, (size_t)n) && !is_digit(text[n]);
}

/* v is one of the whole numbers (maximal digit runs) of text */
static bool has_number(const char *text, uint32_t v)
{
	char want[16];
	size_t n = (size_t)snprintf(want, sizeof want, "%u", v);

	for (const char *p = text; *p;) {
		const char *q = p;

		if (!is_digit(*p)) {
			p++;
			continue;
		}
		while (is_digit(*q))
			q++;
		if ((size_t)(q - p) == n && !memcmp(p, want, n))
			return true;
		p = q;
	}
	return false;
}

static bool score_passkey(const struct retr_sample *s, const char *text, const int32_t *ids, size_t n,
			  size_t *tok_match)
{
	(void)ids;
	(void)n;
	(void)tok_match;
	return starts_with_number(text, s->values[0]);
}

static bool score_key(const struct retr_sample *s, const char *text, const int32_t *ids, size_t n, size_t *tok_match)
{
	(void)ids;
	(void)n;
	(void)tok_match;
	return starts_with_number(text, s->values[s->asked]);
}

static bool score_multivalue(const struct retr_sample *s, const char *text, const int32_t *ids, size_t n,
			     size_t *tok_match)
{
	(void)ids;
	(void)n;
	(void)tok_match;
	for (size_t i = 0; i < RETR_MAX_NEEDLES; i++)
		if (!has_number(text, s->values[i]))
			return false;
	return true;
}

/* the set of words of exactly 5 uppercase letters equals the chain's */
static bool score_vartrack(const struct retr_sample *s, const char *text, const int32_t *ids, size_t n,
			   size_t *tok_match)
{
	bool seen[RETR_N_CHAIN] = { false };

	(void)ids;
	(void)n;
	(void)tok_match;
	for (const char *p = text; *p;) {
		const char *q = p;
		bool upper = true;

		if (!(is_alpha(*p) || is_digit(*p) || *p == '_')) {
			p++;
			continue;
		}
		for (; is_alpha(*q) || is_digit(*q) || *q == '_'; q++)
			upper &= *q >= 'A' && *q <= 'Z';
		if (upper && q - p == RETR_VAR_LEN) {
			size_t i = 0;

			while (i < RETR_N_CHAIN && memcmp(s->vars[i], p, RETR_VAR_LEN))
				i++;
			if (i == RETR_N_CHAIN)
				return false;   /* a variable not in the chain */
			seen[i] = true;
		}
		p = q;
	}
	for (size_t i = 0; i < RETR_N_CHAIN; i++)
		if (!seen[i])
			return false;
	return true;
}

static bool score_copy(const struct retr_sample *s, const char *text, const int32_t *ids, size_t n,
		       size_t *tok_match)
{
	size_t k = 0;

	(void)text;
	for (size_t i = 0; i < n && i < s->n_expect; i++)
		k += ids[i] == s->expect[i];
	*tok_match = k;
	return n >= s->n_expect && k == s->n_expect;
}

void retr_score(const struct retr_corpus *c, const struct retr_sample *s, const int32_t *ids, size_t n,
		struct retr_score *out)
{
	char text[1024], *nl;

	retr_decode(c, ids, n, text, sizeof text);
	if (retr_tasks[s->task].one_line && (nl = strchr(text, '\n')))
		*nl = 0;
	out->tok_match = 0;
	out->tok_total = s->task == RETR_COPY ? s->n_expect : 0;
	out->correct = retr_tasks[s->task].score(s, text, ids, n, &out->tok_match);
}

/* ---- the table --------------------------------------------------------------- */

const struct retr_task retr_tasks[RETR_TASK_COUNT] = {
	[RETR_PASSKEY] = { "passkey", RETR_NUM_ANSWER, true, make_passkey, score_passkey },
	[RETR_NIAH] = { "niah", RETR_NUM_ANSWER, true, make_niah, score_key },
	[RETR_MULTIKEY] = { "multikey", RETR_NUM_ANSWER, true, make_multikey, score_key },
	[RETR_MULTIVALUE] = { "multivalue", RETR_MV_ANSWER, true, make_multivalue, score_multivalue },
	[RETR_VARTRACK] = { "vartrack", RETR_VT_ANSWER, true, make_vartrack, score_vartrack },
	[RETR_COPY] = { "copy", RETR_COPY_ANSWER, false, make_copy, score_copy },
};

int retr_task_find(const char *name)
{
	for (int i = 0; i < RETR_TASK_COUNT; i++)
		if (!strcmp(retr_tasks[i].name, name))
			return i;
	return -1;
}
