/* gen.c - what the generating commands (run, chat) share: their options
 * (model, -n, --ignore-eos, sampling, engine, cache) and the handles a
 * generation holds once the model is loaded. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const struct cli_opt gen_table[] = {
	{ "-m", "--model", CLI_OPT_STR, offsetof(struct cli_gen_opts, model), 0, 0 },
	{ "-n", "--n-predict", CLI_OPT_LONG, offsetof(struct cli_gen_opts, n_predict), -1, 1L << 30 },
	{ NULL, "--ignore-eos", CLI_OPT_FLAG, offsetof(struct cli_gen_opts, ignore_eos), 0, 0 },
};

/* -m, -n, --ignore-eos, the sampling options, then the engine's and the
 * cache's, into the struct cli_gen_opts at g; else "unknown option". */
static int gen_option(struct cli_args *a, void *g)
{
	struct cli_gen_opts *o = g;
	int rc, handled;

	if ((rc = cli_table_option(a, CLI_TABLE(gen_table), o, &handled)) ||
	    (!handled && (rc = cli_sampler_option(a, &o->sp, &o->seed_set, &handled))) ||
	    (!handled && (rc = cli_engine_or_unknown(a, &o->ep, &o->kv_stats))))
		return rc;
	return 0;
}

int cli_gen_parse(struct cli_args *a, const struct cli_opt *t, size_t n, void *o)
{
	struct cli_gen_opts *g = o;
	int rc;

	memset(g, 0, sizeof *g);
	g->n_predict = -1;
	g->sp = tkv_sampler_default_params();
	g->ep = tkv_engine_default_params();
	/* o and g are one pointer: gen_option takes o as the cli_gen_opts */
	if ((rc = cli_parse_options(a, t, n, o, gen_option)) || (rc = cli_kv_check(a, &g->ep)))
		return rc;
	if (!g->seed_set)
		g->sp.seed = cli_random_seed();
	return 0;
}

int cli_gen_start(struct cli_gen *g, const struct tkv_engine_params *ep, const struct tkv_sampler_params *sp,
		  struct tkv_error *err)
{
	int st;

	g->voc = tkv_model_vocab(g->m);
	if ((st = tkv_engine_init(&g->e, g->m, ep, err)) || (st = tkv_seq_init(&g->seq, g->e, err)) ||
	    (st = tkv_sampler_init(&g->smp, sp, (int32_t)g->info.n_vocab, NULL, err)))
		return st;
	g->logits = malloc((size_t)g->info.n_vocab * sizeof *g->logits);
	g->piece_cap = tkv_detok_min_cap(g->voc);
	g->piece = malloc(g->piece_cap);
	if (!g->logits || !g->piece)
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory");
	return TKV_OK;
}

void cli_gen_free(struct cli_gen *g)
{
	free(g->piece);
	free(g->logits);
	tkv_sampler_free(g->smp);
	tkv_seq_free(g->seq);
	tkv_engine_free(g->e);
	tkv_model_free(g->m);
}
