/* main.c - tkv-train: vocabulary, token files, training and GGUF export for
 * small llama models (see tools/train/README.md).
 *
 *   tkv-train vocab  --spm FILE.vocab -o VOCAB.gguf
 *   tkv-train prep   --vocab VOCAB.gguf -o OUT.tok FILE...
 *   tkv-train train  --vocab VOCAB.gguf --train TRAIN.tok --dev DEV.tok --ckpt CKPT [options]
 *   tkv-train eval   --ckpt CKPT --dev DEV.tok [--seq T]
 *   tkv-train export --ckpt CKPT --vocab VOCAB.gguf -o MODEL.gguf [--type f32|q8_0]
 *
 * Token files are little-endian uint16 ids, each document BOS + its tokens.
 * A checkpoint holds the shape, the step, the parameters and AdamW's moments;
 * it is written to PATH.tmp and renamed, so a cut run leaves the last one
 * whole. Exit codes: 0 ok, 1 runtime error, 2 usage error. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "model/tokenizer.h"
#include "ops/dtype.h"
#include "ops/ops.h"
#include "trn.h"
#include "util/alloc.h"
#include "util/status.h"
#include "util/tpool.h"

#define EXIT_RUN 1
#define EXIT_USAGE 2

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tkv-train: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (tkv-train --help)\n");
	return EXIT_USAGE;
}

static int run_error(const struct tkv_error *err)
{
	fprintf(stderr, "tkv-train: %s\n", err->msg[0] ? err->msg : tkv_status_str(err->status));
	return EXIT_RUN;
}

static int parse_long(const char *opt, const char *v, long lo, long hi, long *out)
{
	char *end;
	long x;

	errno = 0;
	x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < lo || x > hi)
		return usage("%s: '%s' is not an integer in [%ld, %ld]", opt, v, lo, hi);
	*out = x;
	return 0;
}

static int parse_float(const char *opt, const char *v, double lo, double hi, double *out)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (errno || end == v || *end || !(x >= lo && x <= hi))
		return usage("%s: '%s' is not a number in [%g, %g]", opt, v, lo, hi);
	*out = x;
	return 0;
}

/* ---- vocab ----------------------------------------------------------------------- */

/* SentencePiece's piece types as llama.cpp numbers them. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_BYTE = 6 };

static int write_tokenizer_keys(struct gguf_w *w, char **pieces, const float *scores, const int32_t *types,
				uint64_t n)
{
	gguf_w_add_str(w, "tokenizer.ggml.model", "llama");
	gguf_w_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces, n);
	gguf_w_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, n);
	gguf_w_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
	gguf_w_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
	gguf_w_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
	gguf_w_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
	gguf_w_add_bool(w, "tokenizer.ggml.add_bos_token", true);
	gguf_w_add_bool(w, "tokenizer.ggml.add_eos_token", false);
	return gguf_w_add_bool(w, "tokenizer.ggml.add_space_prefix", true);
}

static int cmd_vocab(int argc, char **argv)
{
	const char *spm = NULL, *out = NULL;
	char line[1024], **pieces = NULL;
	float *scores = NULL;
	int32_t *types = NULL;
	size_t n = 0, cap = 0;
	struct gguf_w *w = NULL;
	FILE *fp = NULL, *fo = NULL;
	int rc = EXIT_RUN;

	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--spm") && i + 1 < argc)
			spm = argv[++i];
		else if (!strcmp(argv[i], "-o") && i + 1 < argc)
			out = argv[++i];
		else
			return usage("vocab: unknown or incomplete option '%s'", argv[i]);
	}
	if (!spm || !out)
		return usage("vocab: --spm FILE.vocab and -o OUT.gguf are required");
	if (!(fp = fopen(spm, "r"))) {
		fprintf(stderr, "tkv-train: cannot open %s: %s\n", spm, strerror(errno));
		return EXIT_RUN;
	}
	while (fgets(line, sizeof line, fp)) {
		/* the score follows the last tab: a piece may hold tabs (code indentation) */
		char *tab = strrchr(line, '\t');
		size_t len;

		if (!tab) {
			fprintf(stderr, "tkv-train: %s: line %zu has no tab (spm_export_vocab --output_format=vocab)\n",
				spm, n + 1);
			goto out;
		}
		*tab = 0;
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			pieces = realloc(pieces, cap * sizeof *pieces);
			scores = realloc(scores, cap * sizeof *scores);
			types = realloc(types, cap * sizeof *types);
			if (!pieces || !scores || !types)
				goto out_nomem;
		}
		len = strlen(line);
		if (!(pieces[n] = malloc(len + 1)))
			goto out_nomem;
		memcpy(pieces[n], line, len + 1);
		scores[n] = strtof(tab + 1, NULL);
		if (!strcmp(line, "<unk>"))
			types[n] = TT_UNKNOWN;
		else if (!strcmp(line, "<s>") || !strcmp(line, "</s>"))
			types[n] = TT_CONTROL;
		else if (len == 6 && !memcmp(line, "<0x", 3) && line[5] == '>')
			types[n] = TT_BYTE;
		else
			types[n] = TT_NORMAL;
		n++;
	}
	if (n < 259 || strcmp(pieces[0], "<unk>") || strcmp(pieces[1], "<s>") || strcmp(pieces[2], "</s>")) {
		fprintf(stderr, "tkv-train: %s: expected <unk> <s> </s> first and byte fallback pieces\n", spm);
		goto out;
	}
	if (gguf_w_init(&w, NULL))
		goto out_nomem;
	gguf_w_add_str(w, "general.architecture", "llama");
	gguf_w_add_str(w, "general.name", "tierkv kjv vocab");
	write_tokenizer_keys(w, pieces, scores, types, n);
	if (!(fo = fopen(out, "wb"))) {
		fprintf(stderr, "tkv-train: cannot create %s: %s\n", out, strerror(errno));
		goto out;
	}
	if (gguf_w_start_file(w, fo) || gguf_w_finish(w)) {
		run_error(gguf_w_error(w));
		goto out;
	}
	fprintf(stderr, "tkv-train: %zu pieces -> %s\n", n, out);
	rc = 0;
	goto out;
out_nomem:
	fprintf(stderr, "tkv-train: out of memory\n");
out:
	if (fo && fclose(fo) && !rc) {
		fprintf(stderr, "tkv-train: writing %s failed\n", out);
		rc = EXIT_RUN;
	}
	if (fp)
		fclose(fp);
	gguf_w_free(w);
	for (size_t i = 0; i < n; i++)
		free(pieces[i]);
	free(pieces);
	free(scores);
	free(types);
	return rc;
}

/* ---- prep ------------------------------------------------------------------------ */

static int read_file(const char *path, char **out, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	long sz;
	char *buf;

	if (!fp)
		return -1;
	if (fseek(fp, 0, SEEK_END) || (sz = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) ||
	    !(buf = malloc((size_t)sz + 1))) {
		fclose(fp);
		return -1;
	}
	if (fread(buf, 1, (size_t)sz, fp) != (size_t)sz) {
		free(buf);
		fclose(fp);
		return -1;
	}
	fclose(fp);
	buf[sz] = 0;
	*out = buf;
	*len = (size_t)sz;
	return 0;
}

static int load_tok(const char *vocab, struct gguf_file **g, struct tok **t, struct tkv_error *err)
{
	int st = gguf_open(g, vocab, NULL, err);

	if (!st)
		st = tok_init(t, *g, NULL, err);
	return st;
}

static int cmd_prep(int argc, char **argv)
{
	const char *vocab = NULL, *out = NULL;
	struct gguf_file *g = NULL;
	struct tok *t = NULL;
	struct tkv_error err = { 0 };
	FILE *fo = NULL;
	int rc = EXIT_RUN, first = 0;
	size_t total = 0, docs = 0;

	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--vocab") && i + 1 < argc)
			vocab = argv[++i];
		else if (!strcmp(argv[i], "-o") && i + 1 < argc)
			out = argv[++i];
		else if (argv[i][0] == '-')
			return usage("prep: unknown or incomplete option '%s'", argv[i]);
		else if (!first)
			first = i;
	}
	if (!vocab || !out || !first)
		return usage("prep: --vocab VOCAB.gguf, -o OUT.tok and at least one text file are required");
	if (load_tok(vocab, &g, &t, &err))
		return run_error(&err);
	if (!(fo = fopen(out, "wb"))) {
		fprintf(stderr, "tkv-train: cannot create %s: %s\n", out, strerror(errno));
		goto out;
	}
	for (int i = first; i < argc; i++) {
		char *text;
		size_t len, n = 0;
		int32_t *ids;
		uint16_t *u;

		if (argv[i][0] == '-') {
			i++;
			continue;
		}
		if (read_file(argv[i], &text, &len)) {
			fprintf(stderr, "tkv-train: cannot read %s\n", argv[i]);
			goto out;
		}
		tok_encode(t, text, len, true, false, NULL, 0, &n);
		ids = malloc(n * sizeof *ids);
		u = malloc(n * sizeof *u);
		if (!ids || !u || tok_encode(t, text, len, true, false, ids, n, &n)) {
			fprintf(stderr, "tkv-train: cannot tokenize %s\n", argv[i]);
			free(text), free(ids), free(u);
			goto out;
		}
		for (size_t k = 0; k < n; k++)
			u[k] = (uint16_t)ids[k];
		if (fwrite(u, sizeof *u, n, fo) != n) {
			free(text), free(ids), free(u);
			fprintf(stderr, "tkv-train: writing %s failed\n", out);
			goto out;
		}
		total += n;
		docs++;
		free(text), free(ids), free(u);
	}
	if (tok_n_vocab(t) > 65535) {
		fprintf(stderr, "tkv-train: vocabulary too large for 16-bit token files\n");
		goto out;
	}
	rc = 0;
	fprintf(stderr, "tkv-train: %zu documents, %zu tokens -> %s\n", docs, total, out);
out:
	if (fo && fclose(fo) && !rc) {
		fprintf(stderr, "tkv-train: writing %s failed\n", out);
		rc = EXIT_RUN;
	}
	tok_free(t);
	gguf_close(g);
	return rc;
}

static int read_tokens(const char *path, uint32_t n_vocab, int32_t **out, size_t *n)
{
	char *buf;
	size_t len;
	int32_t *ids;

	if (read_file(path, &buf, &len)) {
		fprintf(stderr, "tkv-train: cannot read %s\n", path);
		return -1;
	}
	*n = len / 2;
	if (!(ids = malloc((*n + 1) * sizeof *ids))) {
		free(buf);
		return -1;
	}
	for (size_t i = 0; i < *n; i++) {
		ids[i] = (int32_t)((unsigned char)buf[2 * i] | (unsigned char)buf[2 * i + 1] << 8);
		if ((uint32_t)ids[i] >= n_vocab) {
			fprintf(stderr, "tkv-train: %s: token %d at %zu is past the vocabulary (%u)\n", path,
				ids[i], i, n_vocab);
			free(buf);
			free(ids);
			return -1;
		}
	}
	free(buf);
	*out = ids;
	return 0;
}

/* ---- checkpoints ------------------------------------------------------------------ */

static const char CKPT_MAGIC[8] = "TKVTRN01";

struct ckpt_state {
	uint64_t step, tokens;
	double seconds;     /* training time so far */
};

static int ckpt_save(const char *path, const struct trn_model *m, const float *mom, const float *vel,
		     const struct ckpt_state *s)
{
	char tmp[4096];
	FILE *fp;
	uint32_t u[7] = { m->cfg.dim, m->cfg.n_layer, m->cfg.n_head, m->cfg.n_kv_head,
			  m->cfg.n_ff, m->cfg.n_vocab, m->cfg.n_ctx };
	float f[2] = { m->cfg.rope_base, m->cfg.rms_eps };
	uint64_t np = m->n_params;
	int ok;

	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	if (!(fp = fopen(tmp, "wb")))
		return -1;
	ok = fwrite(CKPT_MAGIC, 8, 1, fp) == 1 && fwrite(u, sizeof u, 1, fp) == 1 && fwrite(f, sizeof f, 1, fp) == 1 &&
	     fwrite(s, sizeof *s, 1, fp) == 1 && fwrite(&np, 8, 1, fp) == 1 &&
	     fwrite(m->w, 4, np, fp) == np && fwrite(mom, 4, np, fp) == np && fwrite(vel, 4, np, fp) == np;
	if (fclose(fp) || !ok || rename(tmp, path)) {
		remove(tmp);
		return -1;
	}
	return 0;
}

/* Reads the shape, then (with m initialised from it) everything else. */
static int ckpt_load(const char *path, struct trn_model *m, float **mom, float **vel, struct ckpt_state *s,
		     struct tkv_error *err)
{
	FILE *fp = fopen(path, "rb");
	char magic[8];
	uint32_t u[7];
	float f[2];
	uint64_t np;
	struct trn_cfg c;
	int st;

	*mom = *vel = NULL;
	if (!fp)
		return tkv_errf(err, TKV_ERR_IO, "cannot open checkpoint %s: %s", path, strerror(errno));
	if (fread(magic, 8, 1, fp) != 1 || memcmp(magic, CKPT_MAGIC, 8) || fread(u, sizeof u, 1, fp) != 1 ||
	    fread(f, sizeof f, 1, fp) != 1 || fread(s, sizeof *s, 1, fp) != 1 || fread(&np, 8, 1, fp) != 1) {
		fclose(fp);
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: not a tkv-train checkpoint", path);
	}
	c = (struct trn_cfg){ u[0], u[1], u[2], u[3], u[4], u[5], u[6], f[0], f[1] };
	if ((st = trn_model_init(m, &c, err))) {
		fclose(fp);
		return st;
	}
	*mom = tkv_calloc(NULL, m->n_params, 4);
	*vel = tkv_calloc(NULL, m->n_params, 4);
	if (!*mom || !*vel || np != m->n_params || fread(m->w, 4, np, fp) != np || fread(*mom, 4, np, fp) != np ||
	    fread(*vel, 4, np, fp) != np) {
		fclose(fp);
		return tkv_errf(err, TKV_ERR_FORMAT, "%s: truncated or inconsistent checkpoint", path);
	}
	fclose(fp);
	return TKV_OK;
}

/* ---- evaluation ------------------------------------------------------------------- */

/* Mean NLL (nats) over every token of dev but the first, in windows of T+1
 * tokens (stride T; the last window ends at the end and scores only what the
 * others did not). */
static double eval_dev(const struct trn_model *m, struct trn_acts *a, struct tpool *tp, const int32_t *dev,
		       size_t n_dev, size_t *n_scored, float *nll)
{
	int T = a->T;
	double sum = 0;
	size_t done = 0, scored = 0;

	while (done + 1 < n_dev) {
		size_t w0 = done, skip = 0;

		if (w0 + (size_t)T + 1 > n_dev) {
			if (n_dev < (size_t)T + 1)
				break;
			w0 = n_dev - (size_t)T - 1;
			skip = done - w0;
		}
		memcpy(a->tok, dev + w0, ((size_t)T + 1) * sizeof(int32_t));
		trn_forward(m, a, tp, nll);
		for (size_t i = skip; i < (size_t)T; i++) {
			sum += nll[i];
			scored++;
		}
		done = w0 + (size_t)T;
	}
	*n_scored = scored;
	return scored ? sum / (double)scored : NAN;
}

static int cmd_eval(int argc, char **argv)
{
	const char *ckpt = NULL, *devp = NULL;
	long T = 0, threads = 2;
	struct trn_model m;
	struct trn_acts a;
	struct tkv_error err = { 0 };
	struct ckpt_state s;
	struct tpool *tp = NULL;
	float *mom, *vel, *nll = NULL;
	int32_t *dev = NULL;
	size_t n_dev, n_sc;
	double loss;
	int rc;

	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--ckpt") && i + 1 < argc)
			ckpt = argv[++i];
		else if (!strcmp(argv[i], "--dev") && i + 1 < argc)
			devp = argv[++i];
		else if (!strcmp(argv[i], "--seq") && i + 1 < argc) {
			if ((rc = parse_long("--seq", argv[++i], 2, 1 << 16, &T)))
				return rc;
		} else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
			if ((rc = parse_long("-t", argv[++i], 1, 256, &threads)))
				return rc;
		} else
			return usage("eval: unknown or incomplete option '%s'", argv[i]);
	}
	if (!ckpt || !devp)
		return usage("eval: --ckpt and --dev are required");
	if (ckpt_load(ckpt, &m, &mom, &vel, &s, &err))
		return run_error(&err);
	if (!T)
		T = m.cfg.n_ctx;
	rc = EXIT_RUN;
	if (read_tokens(devp, m.cfg.n_vocab, &dev, &n_dev))
		goto out;
	if (tpool_init(&tp, (int)threads, NULL, &err) || trn_acts_init(&a, &m, 1, (int)T, (int)threads, &err)) {
		run_error(&err);
		goto out;
	}
	nll = malloc((size_t)T * sizeof *nll);
	if (!nll)
		goto out_acts;
	loss = eval_dev(&m, &a, tp, dev, n_dev, &n_sc, nll);
	printf("step %llu: dev loss %.4f ppl %.3f over %zu tokens (windows of %ld)\n", (unsigned long long)s.step, loss,
	       exp(loss), n_sc, T);
	rc = 0;
out_acts:
	trn_acts_free(&a);
out:
	free(nll);
	free(dev);
	tpool_free(tp);
	tkv_free(NULL, mom);
	tkv_free(NULL, vel);
	trn_model_free(&m);
	return rc;
}

/* ---- train ------------------------------------------------------------------------ */

struct train_opts {
	const char *vocab, *train, *dev, *ckpt, *log;
	struct trn_cfg cfg;
	long batch, seq, steps, warmup, eval_every, threads, seed, max_steps_run;
	double lr, min_lr, wd, clip, ckpt_every, time_limit, init_std;
	bool resume;
};

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double lr_at(const struct train_opts *o, uint64_t step)
{
	double min_lr = o->lr * o->min_lr, p;

	if ((long)step < o->warmup)
		return o->lr * (double)(step + 1) / (double)o->warmup;
	if ((long)step >= o->steps)
		return min_lr;
	p = (double)(step - (uint64_t)o->warmup) / (double)(o->steps - o->warmup);
	return min_lr + 0.5 * (o->lr - min_lr) * (1.0 + cos(3.141592653589793 * p));
}

static void logf_(FILE *lg, const char *fmt, ...) TKV_PRINTF(2, 3);
static void logf_(FILE *lg, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (lg) {
		va_start(ap, fmt);
		vfprintf(lg, fmt, ap);
		va_end(ap);
		fflush(lg);
	}
}

static void train_help(void)
{
	printf("usage: tkv-train train --vocab VOCAB.gguf --train TRAIN.tok --ckpt CKPT [options]\n"
	       "  --dev DEV.tok        dev tokens (loss and perplexity every --eval-every steps)\n"
	       "  --resume             continue from --ckpt (the shape comes from it)\n"
	       "  --dim N --layers N --heads N --kv-heads N --ff N --ctx N   shape (256 6 8 4 768 2048)\n"
	       "  --rope-base X        (10000)\n"
	       "  --vocab-size N       instead of --vocab: token ids below N (benchmarks on random tokens)\n"
	       "  --seq T              tokens per training window (default --ctx)\n"
	       "  --batch B            windows per step (4)\n"
	       "  --steps N            length of the schedule (1000)\n"
	       "  --run-steps N        stop after N steps of this run (default: to --steps)\n"
	       "  --lr X --min-lr R    peak learning rate (1e-3), floor as a ratio of it (0.1)\n"
	       "  --warmup N           linear warmup steps (50)\n"
	       "  --wd X --clip X      AdamW weight decay (0.1), gradient-norm clip (1.0)\n"
	       "  --init-std X         (0.02)\n"
	       "  --eval-every N       (50; the best dev loss of the run is also kept in CKPT.best)\n"
	       "  --ckpt-every SEC (300)   --time-limit SEC (none)\n"
	       "  --seed N (1)  -t THREADS (2)  --log FILE (appended)\n");
}

static int train_parse(int argc, char **argv, struct train_opts *o)
{
	int rc = 0;

	memset(o, 0, sizeof *o);
	o->cfg = (struct trn_cfg){ 256, 6, 8, 4, 768, 0, 2048, 10000.0f, 1e-5f };
	o->batch = 4;
	o->steps = 1000;
	o->warmup = 50;
	o->eval_every = 50;
	o->threads = 2;
	o->seed = 1;
	o->lr = 1e-3;
	o->min_lr = 0.1;
	o->wd = 0.1;
	o->clip = 1.0;
	o->ckpt_every = 300;
	o->init_std = 0.02;
	for (int i = 2; i < argc && !rc; i++) {
		const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		long x;
		double d;

		if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
			train_help();
			return -1;
		}
		if (!strcmp(s, "--resume")) {
			o->resume = true;
			continue;
		}
		if (!v)
			return usage("train: %s needs a value", s);
		i++;
		if (!strcmp(s, "--vocab"))
			o->vocab = v;
		else if (!strcmp(s, "--train"))
			o->train = v;
		else if (!strcmp(s, "--dev"))
			o->dev = v;
		else if (!strcmp(s, "--ckpt"))
			o->ckpt = v;
		else if (!strcmp(s, "--log"))
			o->log = v;
#define U32OPT(name, field, lo, hi) else if (!strcmp(s, name)) { if (!(rc = parse_long(s, v, lo, hi, &x))) o->field = (uint32_t)x; }
		U32OPT("--dim", cfg.dim, 2, 65536)
		U32OPT("--layers", cfg.n_layer, 1, 256)
		U32OPT("--heads", cfg.n_head, 1, 1024)
		U32OPT("--kv-heads", cfg.n_kv_head, 1, 1024)
		U32OPT("--ff", cfg.n_ff, 1, 1 << 20)
		U32OPT("--ctx", cfg.n_ctx, 2, 1 << 20)
		U32OPT("--vocab-size", cfg.n_vocab, 2, 65535)
#undef U32OPT
#define LOPT(name, field, lo, hi) else if (!strcmp(s, name)) rc = parse_long(s, v, lo, hi, &o->field);
		LOPT("--seq", seq, 2, 1 << 20)
		LOPT("--batch", batch, 1, 4096)
		LOPT("--steps", steps, 1, 100000000)
		LOPT("--run-steps", max_steps_run, 1, 100000000)
		LOPT("--warmup", warmup, 1, 100000000)
		LOPT("--eval-every", eval_every, 1, 100000000)
		LOPT("-t", threads, 1, 256)
		LOPT("--seed", seed, 0, 1L << 62)
#undef LOPT
#define DOPT(name, field, lo, hi) else if (!strcmp(s, name)) rc = parse_float(s, v, lo, hi, &o->field);
		DOPT("--lr", lr, 0, 1)
		DOPT("--min-lr", min_lr, 0, 1)
		DOPT("--wd", wd, 0, 10)
		DOPT("--clip", clip, 0, 1e9)
		DOPT("--ckpt-every", ckpt_every, 1, 1e9)
		DOPT("--time-limit", time_limit, 1, 1e9)
		DOPT("--init-std", init_std, 1e-6, 10)
#undef DOPT
		else if (!strcmp(s, "--rope-base")) {
			if (!(rc = parse_float(s, v, 1.0001, 1e9, &d)))
				o->cfg.rope_base = (float)d;
		} else
			return usage("train: unknown option '%s'", s);
	}
	if (rc)
		return rc;
	if (!o->train || !o->ckpt || (!o->resume && !o->vocab && !o->cfg.n_vocab))
		return usage("train: --train, --ckpt and (unless --resume) --vocab or --vocab-size are required");
	if (o->warmup >= o->steps)
		return usage("train: --warmup %ld must be below --steps %ld", o->warmup, o->steps);
	return 0;
}

static int cmd_train(int argc, char **argv)
{
	struct train_opts o;
	struct trn_model m;
	struct trn_acts a, ea;
	struct tkv_error err = { 0 };
	struct ckpt_state s = { 0, 0, 0 };
	struct tpool *tp = NULL;
	float *mom = NULL, *vel = NULL, *nll = NULL;
	int32_t *trn = NULL, *dev = NULL;
	size_t n_trn = 0, n_dev = 0;
	FILE *lg = NULL;
	double t_start, t_ckpt, t_run0;
	long T, done_run = 0;
	double best = INFINITY; /* dev loss of CKPT.best, the best checkpoint of this run */
	int rc, st;

	memset(&m, 0, sizeof m);
	memset(&a, 0, sizeof a);
	memset(&ea, 0, sizeof ea);
	rc = train_parse(argc, argv, &o);
	if (rc == -1)
		return 0;
	if (rc)
		return rc;
	rc = EXIT_RUN;
	if (o.resume) {
		if ((st = ckpt_load(o.ckpt, &m, &mom, &vel, &s, &err)))
			goto fail;
	} else {
		struct gguf_file *g = NULL;
		struct tok *t = NULL;

		if (o.vocab) {
			if ((st = load_tok(o.vocab, &g, &t, &err)))
				goto fail;
			o.cfg.n_vocab = (uint32_t)tok_n_vocab(t);
			tok_free(t);
			gguf_close(g);
		}
		if ((st = trn_model_init(&m, &o.cfg, &err)))
			goto fail;
		trn_model_randomize(&m, (uint64_t)o.seed, (float)o.init_std);
		mom = tkv_calloc(NULL, m.n_params, 4);
		vel = tkv_calloc(NULL, m.n_params, 4);
		if (!mom || !vel) {
			st = tkv_errf(&err, TKV_ERR_NOMEM, "out of memory for AdamW's moments");
			goto fail;
		}
	}
	T = o.seq ? o.seq : (long)m.cfg.n_ctx;
	if (read_tokens(o.train, m.cfg.n_vocab, &trn, &n_trn))
		goto out;
	if (o.dev && read_tokens(o.dev, m.cfg.n_vocab, &dev, &n_dev))
		goto out;
	if (n_trn < (size_t)T + 2) {
		fprintf(stderr, "tkv-train: %s has %zu tokens, fewer than a window of %ld\n", o.train, n_trn, T);
		goto out;
	}
	if ((st = tpool_init(&tp, (int)o.threads, NULL, &err)) ||
	    (st = trn_acts_init(&a, &m, (int)o.batch, (int)T, (int)o.threads, &err)) ||
	    (o.dev && (st = trn_acts_init(&ea, &m, 1, (int)T, (int)o.threads, &err))))
		goto fail;
	if (!(nll = malloc((size_t)T * sizeof *nll)))
		goto out;
	if (o.log && !(lg = fopen(o.log, "a"))) {
		fprintf(stderr, "tkv-train: cannot open log %s: %s\n", o.log, strerror(errno));
		goto out;
	}
	logf_(lg, "# %s: dim %u layers %u heads %u/%u ff %u vocab %u ctx %u; %zu parameters; "
		  "batch %ld x %ld; steps %ld (from %llu); lr %g warmup %ld; %zu train / %zu dev tokens; "
		  "%ld threads, gemm %s\n",
	      o.resume ? "resume" : "start", m.cfg.dim, m.cfg.n_layer, m.cfg.n_head, m.cfg.n_kv_head, m.cfg.n_ff,
	      m.cfg.n_vocab, m.cfg.n_ctx, m.n_params, o.batch, T, o.steps, (unsigned long long)s.step, o.lr,
	      o.warmup, n_trn, n_dev, o.threads, gemm_use_simd(true));
	t_start = t_ckpt = now_s();
	t_run0 = s.seconds;
	while ((long)s.step < o.steps && (!o.max_steps_run || done_run < o.max_steps_run)) {
		struct trn_adamw ad = { (float)lr_at(&o, s.step), 0.9f, 0.95f, 1e-8f, (float)o.wd };
		double t0 = now_s(), loss, gnorm, dt;

		for (long b = 0; b < o.batch; b++) {
			uint64_t r = mix64((uint64_t)o.seed * 0x9e3779b97f4a7c15ull ^ (s.step * (uint64_t)o.batch + (uint64_t)b));
			size_t off = (size_t)(r % (n_trn - (size_t)T - 1));

			memcpy(a.tok + (size_t)b * (T + 1), trn + off, ((size_t)T + 1) * sizeof(int32_t));
		}
		memset(m.g, 0, m.n_params * sizeof(float));
		loss = trn_forward(&m, &a, tp, NULL) / (double)(o.batch * T);
		trn_backward(&m, &a, tp);
		gnorm = trn_clip_grad(&m, o.clip);
		trn_adamw_step(&m, &ad, mom, vel, s.step + 1);
		s.step++;
		done_run++;
		s.tokens += (uint64_t)(o.batch * T);
		dt = now_s() - t0;
		s.seconds = t_run0 + (now_s() - t_start);
		logf_(lg, "step %llu loss %.4f lr %.2e gnorm %.3f %.0f tok/s %.2fs elapsed %.0fs\n",
		      (unsigned long long)s.step, loss, ad.lr, gnorm, (double)(o.batch * T) / dt, dt, s.seconds);
		if (!isfinite(loss)) {
			fprintf(stderr, "tkv-train: loss is not finite at step %llu; stopping without a checkpoint\n",
				(unsigned long long)s.step);
			goto out;
		}
		if (o.dev && (s.step % (uint64_t)o.eval_every == 0 || (long)s.step == o.steps)) {
			size_t n_sc;
			double dl = eval_dev(&m, &ea, tp, dev, n_dev, &n_sc, nll);

			logf_(lg, "eval step %llu dev loss %.4f ppl %.3f (%zu tokens)\n", (unsigned long long)s.step, dl,
			      exp(dl), n_sc);
			if (dl < best) {
				char bp[4096];

				best = dl;
				snprintf(bp, sizeof bp, "%s.best", o.ckpt);
				if (ckpt_save(bp, &m, mom, vel, &s)) {
					fprintf(stderr, "tkv-train: cannot write checkpoint %s: %s\n", bp, strerror(errno));
					goto out;
				}
			}
		}
		if (now_s() - t_ckpt >= o.ckpt_every || (long)s.step == o.steps ||
		    (o.max_steps_run && done_run == o.max_steps_run) ||
		    (o.time_limit > 0 && now_s() - t_start >= o.time_limit)) {
			if (ckpt_save(o.ckpt, &m, mom, vel, &s)) {
				fprintf(stderr, "tkv-train: cannot write checkpoint %s: %s\n", o.ckpt, strerror(errno));
				goto out;
			}
			logf_(lg, "checkpoint step %llu -> %s\n", (unsigned long long)s.step, o.ckpt);
			t_ckpt = now_s();
			if (o.time_limit > 0 && now_s() - t_start >= o.time_limit)
				break;
		}
	}
	rc = 0;
	goto out;
fail:
	run_error(&err);
out:
	if (lg)
		fclose(lg);
	free(nll);
	free(trn);
	free(dev);
	trn_acts_free(&a);
	trn_acts_free(&ea);
	tpool_free(tp);
	tkv_free(NULL, mom);
	tkv_free(NULL, vel);
	trn_model_free(&m);
	return rc;
}

/* ---- export ----------------------------------------------------------------------- */

static int cmd_export(int argc, char **argv)
{
	const char *ckpt = NULL, *vocab = NULL, *out = NULL, *name = "tierkv kjv";
	uint32_t type = TKV_F32;
	struct trn_model m;
	struct ckpt_state s;
	struct tkv_error err = { 0 };
	struct gguf_file *g = NULL;
	struct gguf_w *w = NULL;
	float *mom = NULL, *vel = NULL;
	unsigned char *buf = NULL;
	FILE *fp = NULL;
	int rc = EXIT_RUN;

	memset(&m, 0, sizeof m);
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--ckpt") && i + 1 < argc)
			ckpt = argv[++i];
		else if (!strcmp(argv[i], "--vocab") && i + 1 < argc)
			vocab = argv[++i];
		else if (!strcmp(argv[i], "-o") && i + 1 < argc)
			out = argv[++i];
		else if (!strcmp(argv[i], "--name") && i + 1 < argc)
			name = argv[++i];
		else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
			const char *v = argv[++i];

			if (!strcmp(v, "f32"))
				type = TKV_F32;
			else if (!strcmp(v, "q8_0"))
				type = TKV_Q8_0;
			else
				return usage("export: --type '%s' (f32 or q8_0)", v);
		} else
			return usage("export: unknown or incomplete option '%s'", argv[i]);
	}
	if (!ckpt || !vocab || !out)
		return usage("export: --ckpt, --vocab and -o are required");
	if (ckpt_load(ckpt, &m, &mom, &vel, &s, &err) || gguf_open(&g, vocab, NULL, &err)) {
		run_error(&err);
		goto out;
	}
	if (gguf_w_init(&w, NULL))
		goto out_nomem;
	gguf_w_add_str(w, "general.architecture", "llama");
	gguf_w_add_str(w, "general.name", name);
	gguf_w_add_u32(w, "general.file_type", type == TKV_Q8_0 ? 7 : 0);
	gguf_w_add_u32(w, "general.quantization_version", 2);
	gguf_w_add_u32(w, "llama.context_length", m.cfg.n_ctx);
	gguf_w_add_u32(w, "llama.embedding_length", m.cfg.dim);
	gguf_w_add_u32(w, "llama.block_count", m.cfg.n_layer);
	gguf_w_add_u32(w, "llama.feed_forward_length", m.cfg.n_ff);
	gguf_w_add_u32(w, "llama.attention.head_count", m.cfg.n_head);
	gguf_w_add_u32(w, "llama.attention.head_count_kv", m.cfg.n_kv_head);
	gguf_w_add_u32(w, "llama.rope.dimension_count", m.head_dim);
	gguf_w_add_f32(w, "llama.rope.freq_base", m.cfg.rope_base);
	gguf_w_add_f32(w, "llama.attention.layer_norm_rms_epsilon", m.cfg.rms_eps);
	gguf_w_add_u32(w, "llama.vocab_size", m.cfg.n_vocab);
	for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
		const struct gguf_kv *kv = gguf_kv_at(g, i);

		if (kv->key.len > 10 && !memcmp(kv->key.ptr, "tokenizer.", 10))
			gguf_w_add_kv(w, kv);
	}
	for (size_t i = 0; i < m.n_t; i++) {
		const struct trn_tensor *t = &m.t[i];
		uint32_t tt = t->n_dims == 2 && t->ne[0] % 32 == 0 ? type : TKV_F32;

		gguf_w_add_tensor(w, t->name, t->n_dims, t->ne, tt);
	}
	if (gguf_w_error(w)->status) {
		run_error(gguf_w_error(w));
		goto out;
	}
	if (!(fp = fopen(out, "wb"))) {
		fprintf(stderr, "tkv-train: cannot create %s: %s\n", out, strerror(errno));
		goto out;
	}
	if (gguf_w_start_file(w, fp)) {
		run_error(gguf_w_error(w));
		goto out;
	}
	for (size_t i = 0; i < m.n_t; i++) {
		const struct trn_tensor *t = &m.t[i];
		size_t nb = gguf_w_tensor_nbytes(w, i);
		uint32_t tt = t->n_dims == 2 && t->ne[0] % 32 == 0 ? type : TKV_F32;

		free(buf);
		if (!(buf = malloc(nb)))
			goto out_nomem;
		for (uint64_t r = 0; r < t->ne[1]; r++)
			ops_quantize_row(tt, m.w + t->off + r * t->ne[0], buf + r * (nb / t->ne[1]), (int64_t)t->ne[0]);
		if (gguf_w_write(w, buf, nb)) {
			run_error(gguf_w_error(w));
			goto out;
		}
	}
	if (gguf_w_finish(w)) {
		run_error(gguf_w_error(w));
		goto out;
	}
	fprintf(stderr, "tkv-train: step %llu, %zu parameters, %s -> %s\n", (unsigned long long)s.step, m.n_params,
		type == TKV_Q8_0 ? "q8_0" : "f32", out);
	rc = 0;
	goto out;
out_nomem:
	fprintf(stderr, "tkv-train: out of memory\n");
out:
	if (fp && fclose(fp) && !rc) {
		fprintf(stderr, "tkv-train: writing %s failed\n", out);
		rc = EXIT_RUN;
	}
	free(buf);
	gguf_w_free(w);
	gguf_close(g);
	tkv_free(NULL, mom);
	tkv_free(NULL, vel);
	trn_model_free(&m);
	return rc;
}

/* ---- ppl -------------------------------------------------------------------------- */

/* The perplexity llama.cpp's llama-perplexity reports, computed by the tierkv
 * engine: the whole file tokenized with BOS, cut into chunks of c tokens (the
 * rest dropped), each chunk's first token replaced by BOS and the chunk run
 * from an empty cache (the full policy); in each chunk the tokens after
 * position c/2 are scored (positions c/2 .. c-2 predicting the next). With
 * --all every position of the chunk is scored instead. */
static int cmd_ppl(int argc, char **argv)
{
	const char *model = NULL, *file = NULL;
	long ctx = 0, threads = 2;
	bool all = false;
	struct tkv_model *mdl = NULL;
	struct tkv_engine *e = NULL;
	struct tkv_error err = { 0 };
	struct tkv_model_info info;
	struct tkv_engine_params ep;
	int32_t *ids = NULL;
	float *logits = NULL;
	char *text = NULL;
	size_t len, n = 0;
	double nll = 0;
	size_t scored = 0;
	int rc;

	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "-m") && i + 1 < argc)
			model = argv[++i];
		else if (!strcmp(argv[i], "-f") && i + 1 < argc)
			file = argv[++i];
		else if (!strcmp(argv[i], "--all"))
			all = true;
		else if (!strcmp(argv[i], "-c") && i + 1 < argc) {
			if ((rc = parse_long("-c", argv[++i], 4, 1 << 20, &ctx)))
				return rc;
		} else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
			if ((rc = parse_long("-t", argv[++i], 1, 256, &threads)))
				return rc;
		} else
			return usage("ppl: unknown or incomplete option '%s'", argv[i]);
	}
	if (!model || !file)
		return usage("ppl: -m MODEL.gguf and -f TEXT are required");
	rc = EXIT_RUN;
	if (read_file(file, &text, &len)) {
		fprintf(stderr, "tkv-train: cannot read %s\n", file);
		return EXIT_RUN;
	}
	if (tkv_model_load(&mdl, model, NULL, &err))
		goto fail;
	tkv_model_get_info(mdl, &info);
	if (!ctx)
		ctx = info.n_ctx_train;
	tkv_tokenize(mdl, text, len, 1, 0, NULL, 0, &n);
	if (!(ids = malloc(n * sizeof *ids)) || !(logits = malloc((size_t)ctx * info.n_vocab * sizeof *logits)))
		goto out_nomem;
	if (tkv_tokenize(mdl, text, len, 1, 0, ids, n, &n) != TKV_OK) {
		fprintf(stderr, "tkv-train: cannot tokenize %s\n", file);
		goto out;
	}
	ep = tkv_engine_default_params();
	ep.n_threads = (int)threads;
	ep.kv_mem = 0;
	ep.n_ctx = (uint32_t)ctx;
	ep.kv.policy = TKV_POLICY_FULL;
	if (tkv_engine_init(&e, mdl, &ep, &err))
		goto fail;
	if (n < (size_t)ctx) {
		fprintf(stderr, "tkv-train: %s has %zu tokens, fewer than one chunk of %ld\n", file, n, ctx);
		goto out;
	}
	for (size_t c = 0; c + (size_t)ctx <= n; c += (size_t)ctx) {
		struct tkv_seq *sq = NULL;
		int32_t first = ids[c];
		size_t j0 = all ? 0 : (size_t)ctx / 2;
		double cn = 0;

		ids[c] = ids[0]; /* BOS */
		if (tkv_seq_init(&sq, e, &err) || tkv_seq_decode(sq, ids + c, (size_t)ctx, logits, 1, &err)) {
			tkv_seq_free(sq);
			goto fail;
		}
		tkv_seq_free(sq);
		ids[c] = first;
		for (size_t j = j0; j + 1 < (size_t)ctx; j++) {
			const float *z = logits + j * info.n_vocab;
			float mx = -INFINITY;
			double sum = 0;

			for (uint32_t v = 0; v < info.n_vocab; v++)
				mx = z[v] > mx ? z[v] : mx;
			for (uint32_t v = 0; v < info.n_vocab; v++)
				sum += exp((double)z[v] - mx);
			cn += mx + log(sum) - z[ids[c + j + 1]];
			scored++;
		}
		nll += cn;
		printf("[%zu] %.4f\n", c / (size_t)ctx + 1, exp(nll / (double)scored));
	}
	printf("tierkv: %zu chunks of %ld, %zu tokens scored: ppl %.4f (mean nll %.5f)\n", n / (size_t)ctx, ctx,
	       scored, exp(nll / (double)scored), nll / (double)scored);
	rc = 0;
	goto out;
out_nomem:
	fprintf(stderr, "tkv-train: out of memory\n");
	goto out;
fail:
	run_error(&err);
out:
	tkv_engine_free(e);
	tkv_model_free(mdl);
	free(ids);
	free(logits);
	free(text);
	return rc;
}

static void help(void)
{
	printf("usage: tkv-train COMMAND [options]\n"
	       "  vocab  --spm FILE.vocab -o VOCAB.gguf          SentencePiece vocab -> tokenizer GGUF\n"
	       "  prep   --vocab VOCAB.gguf -o OUT.tok FILE...   one document per file, BOS + tokens\n"
	       "  train  --vocab VOCAB.gguf --train T.tok --ckpt CKPT [--dev D.tok] ...  (train --help)\n"
	       "  eval   --ckpt CKPT --dev D.tok [--seq T] [-t N] dev loss and perplexity\n"
	       "  ppl    -m MODEL.gguf -f TEXT [-c N] [--all]    perplexity as llama-perplexity scores it, by tierkv\n"
	       "  export --ckpt CKPT --vocab VOCAB.gguf -o OUT.gguf [--type f32|q8_0] [--name NAME]\n");
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		help();
		return argc < 2 ? EXIT_USAGE : 0;
	}
	if (!strcmp(argv[1], "vocab"))
		return cmd_vocab(argc, argv);
	if (!strcmp(argv[1], "prep"))
		return cmd_prep(argc, argv);
	if (!strcmp(argv[1], "train"))
		return cmd_train(argc, argv);
	if (!strcmp(argv[1], "eval"))
		return cmd_eval(argc, argv);
	if (!strcmp(argv[1], "ppl"))
		return cmd_ppl(argc, argv);
	if (!strcmp(argv[1], "export"))
		return cmd_export(argc, argv);
	return usage("unknown command '%s'", argv[1]);
}
