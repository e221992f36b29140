/* eval_klbase.c - `tierkv eval --kl-base FILE`: tierkv's next-token
 * distributions against the ones llama.cpp saved with
 * `llama-perplexity --kl-divergence-base FILE`, on the same tokens.
 *
 * The file (llama-perplexity's format, read from its writer's behaviour):
 *   "_logits_"                          8 bytes
 *   n_ctx, n_vocab, n_chunk             int32 each
 *   tokens                              int32[n_chunk * n_ctx] (the text's tokens;
 *                                       chunk c is tokens [c n_ctx, (c+1) n_ctx),
 *                                       its first replaced by BOS when the
 *                                       vocabulary adds one)
 *   per chunk, for positions n_ctx/2 .. n_ctx-2: nv = 2*ceil(n_vocab/2) + 4 uint16:
 *     float scale, float min_log_prob   (the first 4 uint16)
 *     q[i]                              log p_i = scale * q[i] + min_log_prob
 *                                       (q = 0 below max - 16 nats)
 * Each chunk is decoded from an empty cache, as llama-perplexity does, and at
 * every saved position the KL divergence KL(llama.cpp || tierkv) =
 * sum_i p_i (log p_i - log q_i) is summed over the tokens llama.cpp gives
 * log p > -16 (the ones it keeps, as its own KL does), with top-1 agreement
 * and the mean entropy of both distributions. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tierkv.h"

struct kb_opts {
	const char *model, *base, *json;
	long chunks;
	struct tkv_engine_params ep;
};

struct kb_acc {
	double kl, kl2, ent_base, ent_ours, nll_ours;
	double kl_max;
	size_t n, same_top;
};

static void kb_help(void)
{
	printf("usage: tierkv eval --kl-base FILE -m MODEL [options]\n"
	       "\n"
	       "Compares tierkv's next-token distributions with llama.cpp's, saved by\n"
	       "`llama-perplexity -m MODEL -f TEXT -c N --kl-divergence-base FILE` on the same\n"
	       "model: every chunk of N tokens is decoded from an empty cache and each of its\n"
	       "last N/2 - 1 positions scored. Prints the mean KL(llama.cpp || tierkv) in nats,\n"
	       "its largest value, top-1 agreement, tierkv's perplexity and both mean entropies.\n"
	       "\n"
	       "  -m, --model PATH  the model llama.cpp ran\n"
	       "      --kl-base FILE llama-perplexity's --kl-divergence-base output\n"
	       "      --chunks N    score the first N chunks only\n"
	       "      --json FILE   write the result as one JSON object\n"
	       "  engine and KV options as for tierkv run (-t, -b, --kv-type, --kv-policy, ...)\n");
}

static const struct cli_opt kb_table[] = {
	CLI_HELP_OPT,
	{ "-m", "--model", CLI_OPT_STR, offsetof(struct kb_opts, model), 0, 0 },
	{ NULL, "--kl-base", CLI_OPT_STR, offsetof(struct kb_opts, base), 0, 0 },
	{ NULL, "--json", CLI_OPT_STR, offsetof(struct kb_opts, json), 0, 0 },
	{ NULL, "--chunks", CLI_OPT_LONG, offsetof(struct kb_opts, chunks), 1, 1000000 },
};

static int kb_more(struct cli_args *a, void *o)
{
	return cli_engine_or_unknown(a, &((struct kb_opts *)o)->ep, NULL);
}

/* 0, CLI_HELP or CLI_USAGE (after a message). */
static int kb_parse(int argc, char **argv, struct kb_opts *o)
{
	struct cli_args a = { argc, argv, 1, "eval" };
	int rc;

	memset(o, 0, sizeof *o);
	o->ep = tkv_engine_default_params();
	if ((rc = cli_parse_options(&a, CLI_TABLE(kb_table), o, kb_more)))
		return rc;
	if ((rc = cli_kv_check(&a, &o->ep)))
		return rc;
	if (!o->model)
		return cli_usage_error(&a, "--kl-base needs -m MODEL (the model llama.cpp ran)");
	return 0;
}

/* The base file: header checked against the model and the file's size. */
struct kb_file {
	FILE *f;
	int32_t n_ctx, n_vocab, n_chunk;
	int32_t *tokens;    /* (n_chunk, n_ctx) */
	size_t nv;          /* uint16 per saved position */
	uint16_t *rec;      /* (n_ctx/2, nv) one chunk's records */
};

static int kb_open(struct kb_file *b, const char *path, uint32_t n_vocab)
{
	char magic[8];
	long long need;
	long size = -1;

	if (!(b->f = fopen(path, "rb"))) {
		fprintf(stderr, "tierkv eval: cannot open %s: %s\n", path, strerror(errno));
		return CLI_ERR;
	}
	if (fread(magic, 1, 8, b->f) != 8 || memcmp(magic, "_logits_", 8) || fread(&b->n_ctx, 4, 1, b->f) != 1 ||
	    fread(&b->n_vocab, 4, 1, b->f) != 1 || fread(&b->n_chunk, 4, 1, b->f) != 1 || b->n_ctx < 4 ||
	    b->n_vocab < 1 || b->n_chunk < 1 || b->n_ctx > 1 << 20 || b->n_chunk > 1 << 20) {
		fprintf(stderr, "tierkv eval: %s: not a llama-perplexity --kl-divergence-base file\n", path);
		return CLI_ERR;
	}
	if ((uint32_t)b->n_vocab != n_vocab) {
		fprintf(stderr, "tierkv eval: %s has %d tokens per distribution; the model has %u\n", path,
			b->n_vocab, n_vocab);
		return CLI_ERR;
	}
	b->nv = 2 * (((size_t)b->n_vocab + 1) / 2) + 4;
	need = 20 + 4LL * b->n_chunk * b->n_ctx +
	       2LL * (long long)b->nv * (b->n_ctx - 1 - b->n_ctx / 2) * b->n_chunk;
	if (fseek(b->f, 0, SEEK_END) || (size = ftell(b->f)) != need || fseek(b->f, 20, SEEK_SET)) {
		fprintf(stderr, "tierkv eval: %s: %ld bytes, expected %lld for %d chunks of %d\n", path, size, need,
			b->n_chunk, b->n_ctx);
		return CLI_ERR;
	}
	b->tokens = malloc((size_t)b->n_chunk * b->n_ctx * 4);
	b->rec = malloc((size_t)(b->n_ctx / 2) * b->nv * 2);
	if (!b->tokens || !b->rec ||
	    fread(b->tokens, 4, (size_t)b->n_chunk * b->n_ctx, b->f) != (size_t)b->n_chunk * b->n_ctx) {
		fprintf(stderr, "tierkv eval: %s: cannot read the tokens\n", path);
		return CLI_ERR;
	}
	for (size_t i = 0; i < (size_t)b->n_chunk * b->n_ctx; i++)
		if (b->tokens[i] < 0 || b->tokens[i] >= b->n_vocab) {
			fprintf(stderr, "tierkv eval: %s: token %d at %zu out of range\n", path, b->tokens[i], i);
			return CLI_ERR;
		}
	return CLI_OK;
}

/* One position: base record rec (llama.cpp), our logits lg, the next token. */
static void kb_score(struct kb_acc *acc, const uint16_t *rec, const float *lg, int32_t n_vocab, int32_t next)
{
	float scale, minlp;
	double mx = -INFINITY, sum = 0.0, lse, kl = 0.0, ent_b = 0.0, ent_o = 0.0, bmax = -INFINITY;
	int32_t top_o = 0, top_b = 0;

	memcpy(&scale, rec, 4);
	memcpy(&minlp, rec + 2, 4);
	rec += 4;
	for (int32_t i = 0; i < n_vocab; i++)
		if (lg[i] > mx) {
			mx = lg[i];
			top_o = i;
		}
	for (int32_t i = 0; i < n_vocab; i++)
		sum += exp(lg[i] - mx);
	lse = mx + log(sum);
	for (int32_t i = 0; i < n_vocab; i++) {
		double lb = (double)scale * rec[i] + minlp, lo = lg[i] - lse;

		if (lb > bmax) {
			bmax = lb;
			top_b = i;
		}
		if (lb > -16.0) {
			kl += exp(lb) * (lb - lo);
			ent_b -= exp(lb) * lb;
		}
		ent_o -= exp(lo) * lo;
	}
	acc->kl += kl;
	acc->kl2 += kl * kl;
	if (kl > acc->kl_max)
		acc->kl_max = kl;
	acc->ent_base += ent_b;
	acc->ent_ours += ent_o;
	acc->nll_ours -= lg[next] - lse;
	acc->same_top += top_o == top_b;
	acc->n++;
}

/* One chunk decoded from an empty cache, positions first..n_ctx-2 scored. */
static int kb_chunk(struct tkv_engine *e, uint32_t nb, const struct kb_file *b, int32_t c,
		    const struct tkv_vocab *voc, float *lg, struct kb_acc *acc, struct tkv_error *err)
{
	int32_t n_ctx = b->n_ctx, first = n_ctx / 2, *ids = b->tokens + (size_t)c * n_ctx, bos0 = ids[0];
	struct tkv_seq *s = NULL;
	int st;

	if (fread(b->rec, 2, (size_t)(n_ctx - 1 - first) * b->nv, b->f) != (size_t)(n_ctx - 1 - first) * b->nv)
		return tkv_errf(err, TKV_ERR_IO, "chunk %d: short read", c);
	if (tkv_vocab_add_bos(voc) && tkv_vocab_bos(voc) >= 0)
		ids[0] = tkv_vocab_bos(voc);
	if ((st = tkv_seq_init(&s, e, err)))
		goto out;
	for (int32_t done = 0; done < n_ctx - 1;) {
		int32_t n = n_ctx - 1 - done < (int32_t)nb ? n_ctx - 1 - done : (int32_t)nb;

		/* the chunks before the first scored position need no logits */
		if ((st = tkv_seq_decode(s, ids + done, (size_t)n, done + n <= first ? NULL : lg, 1, err)))
			goto out;
		if (done + n <= first) {
			done += n;
			continue;
		}
		for (int32_t i = 0; i < n; i++)
			if (done + i >= first)
				kb_score(acc, b->rec + (size_t)(done + i - first) * b->nv, lg + (size_t)i * b->n_vocab,
					 b->n_vocab, ids[done + i + 1]);
		done += n;
	}
out:
	ids[0] = bos0;
	tkv_seq_free(s);
	return st;
}

static void kb_report(const struct kb_opts *o, const struct kb_file *b, const struct kb_acc *a, int32_t n_chunk)
{
	double n = (double)a->n, kl = a->kl / n, sd = sqrt(fmax(a->kl2 / n - kl * kl, 0.0) / n);

	/* no perplexity from the base: its log-probabilities stop 16 nats below
	 * the top, so a poorly predicted token's is floored there */
	printf("| model | chunks x ctx | positions | mean KL (nats) | max KL | top-1 %% | ppl tierkv | "
	       "entropy llama.cpp | entropy tierkv | ln(vocab)/2 |\n");
	printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	printf("| %s | %d x %d | %zu | %.6f ± %.6f | %.5f | %.2f | %.4f | %.3f | %.3f | %.3f |\n", o->model, n_chunk,
	       b->n_ctx, a->n, kl, sd, a->kl_max, 100.0 * (double)a->same_top / n, exp(a->nll_ours / n),
	       a->ent_base / n, a->ent_ours / n, 0.5 * log((double)b->n_vocab));
	if (o->json) {
		FILE *f = fopen(o->json, "w");

		if (!f) {
			fprintf(stderr, "tierkv eval: cannot write %s: %s\n", o->json, strerror(errno));
			return;
		}
		fprintf(f, "{\"model\": \"%s\", \"chunks\": %d, \"n_ctx\": %d, \"positions\": %zu, \"kl\": %.8f, "
			"\"kl_sd\": %.8f, \"kl_max\": %.6f, \"top1\": %.6f, \"ppl\": %.6f, "
			"\"entropy_base\": %.6f, \"entropy\": %.6f, \"half_ln_vocab\": %.6f}\n", o->model, n_chunk,
			b->n_ctx, a->n, kl, sd, a->kl_max, (double)a->same_top / n, exp(a->nll_ours / n),
			a->ent_base / n, a->ent_ours / n, 0.5 * log((double)b->n_vocab));
		fclose(f);
	}
}

int cli_eval_klbase(int argc, char **argv)
{
	struct kb_opts o;
	struct kb_file b = { 0 };
	struct kb_acc acc = { 0 };
	struct tkv_model *m = NULL;
	struct tkv_engine *e = NULL;
	struct tkv_model_info info;
	struct tkv_error err = { 0 };
	float *lg = NULL;
	int32_t n_chunk;
	int rc = CLI_ERR, st;

	if ((st = kb_parse(argc, argv, &o)))
		return cli_parse_end(st, kb_help);
	if ((rc = cli_load_model("eval", o.model, NULL, &m, &info)))
		goto out;
	if ((rc = kb_open(&b, o.base, info.n_vocab)) != CLI_OK)
		goto out;
	rc = CLI_ERR;
	n_chunk = o.chunks && o.chunks < b.n_chunk ? (int32_t)o.chunks : b.n_chunk;
	o.ep.n_ctx = (uint32_t)b.n_ctx;
	if ((st = tkv_engine_init(&e, m, &o.ep, &err)))
		goto fail;
	if (!(lg = malloc((size_t)o.ep.n_batch * info.n_vocab * sizeof *lg))) {
		fprintf(stderr, "tierkv eval: out of memory\n");
		goto out;
	}
	for (int32_t c = 0; c < n_chunk; c++) {
		if ((st = kb_chunk(e, o.ep.n_batch, &b, c, tkv_model_vocab(m), lg, &acc, &err)))
			goto fail;
		fprintf(stderr, "tierkv eval: chunk %d/%d: mean KL so far %.6f, top-1 %.2f%%\n", c + 1, n_chunk,
			acc.kl / (double)acc.n, 100.0 * (double)acc.same_top / (double)acc.n);
	}
	kb_report(&o, &b, &acc, n_chunk);
	rc = CLI_OK;
	goto out;
fail:
	fprintf(stderr, "tierkv eval: %s\n", err.msg[0] ? err.msg : tkv_status_str(st));
out:
	free(lg);
	free(b.tokens);
	free(b.rec);
	if (b.f)
		fclose(b.f);
	tkv_engine_free(e);
	tkv_model_free(m);
	return rc;
}
