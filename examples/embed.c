/* embed.c - libtierkv inside a program of its own, through <tierkv.h> only.
 *
 * Loads a GGUF model, generates greedily with the tiered KV cache held to a
 * per-sequence budget, and prints the prompt and then the generated text
 * through the streaming detokenizer on stdout; the cache's and the
 * allocator's figures go to stderr. Its stdout is what
 * `tierkv run -p PROMPT -n N --temp 0 --kv-budget BUDGET` prints.
 *
 *   cc -std=c11 embed.c $(pkg-config --cflags --libs tierkv) -o embed
 *   ./embed model.gguf "Once upon a time" 64 [BUDGET]
 *
 * BUDGET is the K+V bytes the sequence may keep; left out, a quarter of what
 * the full f16 cache needs for the prompt and the generation. Exit status:
 * 0 done, 1 error, 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tierkv.h>

static int usage(void)
{
	fprintf(stderr, "usage: embed MODEL.gguf PROMPT N_TOKENS [KV_BUDGET_BYTES]\n");
	return 2;
}

/* Prints what went wrong; returns the exit status of an error. */
static int fail(const char *what, int st, const struct tkv_error *err)
{
	fprintf(stderr, "embed: %s: %s\n", what, err && err->msg[0] ? err->msg : tkv_status_str(st));
	return 1;
}

/* The prompt's ids (malloc'ed, the caller's) and their count, or NULL. */
static int32_t *tokenize(const struct tkv_vocab *v, const char *text, size_t *n)
{
	size_t len = strlen(text);
	bool bos = tkv_vocab_add_bos(v);
	int32_t *ids;

	/* the first call only counts (and fails for want of room) */
	tkv_vocab_tokenize(v, text, len, bos, true, NULL, 0, n);
	if (*n == 0 || !(ids = malloc(*n * sizeof *ids)))
		return NULL;
	if (tkv_vocab_tokenize(v, text, len, bos, true, ids, *n, n) != TKV_OK) {
		free(ids);
		return NULL;
	}
	return ids;
}

/* Generates up to n_predict tokens after the prompt, printing them as text. */
static int generate(struct tkv_model *model, struct tkv_seq *seq, struct tkv_sampler *smp,
		    const int32_t *prompt, size_t n_prompt, long n_predict, struct tkv_error *err)
{
	const struct tkv_vocab *v = tkv_model_vocab(model);
	struct tkv_model_info info;
	struct tkv_detok dt = { { 0 }, 0 };
	size_t cap = tkv_detok_min_cap(v);
	char *text = malloc(cap);
	float *logits;
	int st = TKV_ERR_NOMEM, n;

	tkv_model_get_info(model, &info);
	logits = malloc((size_t)info.n_vocab * sizeof *logits);
	if (!text || !logits)
		goto out;
	for (size_t i = 0; i < n_prompt; i++)
		tkv_sampler_accept(smp, prompt[i]);
	if ((st = tkv_seq_decode(seq, prompt, n_prompt, logits, 0, err)))
		goto out;
	for (long i = 0; i < n_predict; i++) {
		int32_t id = tkv_sampler_sample(smp, logits);

		if (tkv_vocab_is_eog(v, id))
			break;
		tkv_sampler_accept(smp, id);
		/* a piece may end inside a UTF-8 character: the detokenizer holds it back */
		if ((n = tkv_detok_push(v, &dt, id, text, cap)) > 0)
			fwrite(text, 1, (size_t)n, stdout);
		fflush(stdout);
		if (i + 1 == n_predict || tkv_seq_n_past(seq) >= info.n_ctx_train)
			break;
		if ((st = tkv_seq_decode(seq, &id, 1, logits, 0, err)))
			goto out;
	}
	if ((n = tkv_detok_flush(&dt, text, cap)) > 0)
		fwrite(text, 1, (size_t)n, stdout);
	st = fflush(stdout) ? TKV_ERR_IO : TKV_OK;
out:
	free(logits);
	free(text);
	return st;
}

int main(int argc, char **argv)
{
	struct tkv_alloc *alloc = NULL;
	struct tkv_model *model = NULL;
	struct tkv_engine *engine = NULL;
	struct tkv_seq *seq = NULL;
	struct tkv_sampler *smp = NULL;
	struct tkv_error err = { 0 };
	struct tkv_model_params mp = tkv_model_default_params();
	struct tkv_engine_params ep = tkv_engine_default_params();
	struct tkv_sampler_params sp = tkv_sampler_default_params();
	struct tkv_model_info info;
	struct tkv_kv_stats ks;
	struct tkv_alloc_stats as;
	int32_t *ids = NULL;
	size_t n_prompt = 0;
	long n_predict;
	unsigned long long budget = 0;
	char *end;
	int rc = 1, st;

	if (argc < 4 || argc > 5 || (n_predict = strtol(argv[3], &end, 10)) < 1 || *end)
		return usage();
	if (argc == 5 && ((budget = strtoull(argv[4], &end, 10)) == 0 || *end))
		return usage();
	if (tkv_alloc_init(&alloc))
		return fail("allocator", TKV_ERR_NOMEM, NULL);

	mp.alloc = alloc; /* count every byte the model, engine and sampler hold */
	if ((st = tkv_model_load(&model, argv[1], &mp, &err))) {
		rc = fail(argv[1], st, &err);
		goto out;
	}
	tkv_model_get_info(model, &info);
	if (!(ids = tokenize(tkv_model_vocab(model), argv[2], &n_prompt)) ||
	    n_prompt + (size_t)n_predict > info.n_ctx_train) {
		fprintf(stderr, "embed: the prompt cannot be tokenized, or it and %ld tokens pass the context (%u)\n",
			n_predict, info.n_ctx_train);
		goto out;
	}

	/* the tiered cache (the default policy), held to a byte budget */
	ep.alloc = alloc;
	ep.kv.policy = TKV_POLICY_TIERED;
	ep.kv.seq_budget = (n_prompt + (size_t)n_predict) * tkv_model_kv_bytes_per_token(model) / 4;
	if (argc == 5)
		ep.kv.seq_budget = budget;
	sp.temp = 0.0f; /* greedy */
	if ((st = tkv_engine_init(&engine, model, &ep, &err)) || (st = tkv_seq_init(&seq, engine, &err)) ||
	    (st = tkv_sampler_init(&smp, &sp, (int32_t)info.n_vocab, alloc, &err))) {
		rc = fail("engine", st, &err);
		goto out;
	}

	fputs(argv[2], stdout);
	if ((st = generate(model, seq, smp, ids, n_prompt, n_predict, &err))) {
		rc = fail("generation", st, &err);
		goto out;
	}

	tkv_seq_kv_stats(seq, &ks);
	fprintf(stderr, "\nembed: %zu tokens cached in %zu K+V bytes (budget %zu): hot %zu, warm %zu, cold %zu slots\n",
		(size_t)tkv_seq_n_past(seq), ks.kv_bytes, ep.kv.seq_budget, ks.tier_tokens[0], ks.tier_tokens[1],
		ks.tier_tokens[2]);
	rc = 0;
out:
	tkv_sampler_free(smp);
	tkv_seq_free(seq);
	tkv_engine_free(engine);
	tkv_model_free(model);
	free(ids);
	tkv_alloc_get_stats(alloc, &as);
	fprintf(stderr, "embed: allocator peak %zu bytes, %zu live after freeing everything\n", as.peak, as.live);
	tkv_alloc_free(alloc);
	return rc;
}
