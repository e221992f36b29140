/* run.c - `tierkv run`: generate text from a prompt.
 *
 * stdout gets the prompt followed by the generated text and nothing else;
 * everything else (timings, KV bytes, errors) goes to stderr. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void run_help(void)
{
	printf("usage: tierkv run [-m MODEL] [-p PROMPT | -f FILE] [options]\n"
	       "\n"
	       "Generates text and prints the prompt followed by the generation on stdout;\n"
	       "timings and memory go to stderr.\n"
	       "\n"
	       "  -m, --model PATH      GGUF model (default: the bundled stories260K.gguf)\n"
	       "  -p, --prompt TEXT     prompt text (default: empty, generation starts from BOS)\n"
	       "  -f, --file PATH       read the prompt from a file\n"
	       "  -n, --n-predict N     tokens to generate; -1 = until end of text or context (default -1)\n"
	       "  -c, --ctx-size N      context length in tokens (default: the model's)\n"
	       "  -b, --batch-size N    prompt tokens per forward chunk (default 64)\n"
	       "  -t, --threads N       threads (default: physical cores)\n"
	       "      --temp T          temperature; 0 = greedy (default 0.8)\n"
	       "      --top-k K         keep the K most likely tokens; 0 = off (default 40)\n"
	       "      --top-p P         nucleus sampling mass; 1 = off (default 0.95)\n"
	       "      --min-p P         drop tokens below P x the top probability; 0 = off (default 0.05)\n"
	       "      --repeat-penalty X  penalise recent tokens; 1 = off (default 1.0)\n"
	       "      --repeat-last-n N tokens the penalty looks back (default 64)\n"
	       "  -s, --seed S          random seed (default: random, printed on stderr)\n"
	       "      --ignore-eos      keep generating past end-of-text tokens\n"
	       "  -h, --help            this text\n\n");
	cli_kv_help();
}

struct run_opts {
	struct cli_gen_opts g;   /* model, -n, sampling, engine and cache: first (cli_gen_parse) */
	const char *prompt, *file;
};
_Static_assert(offsetof(struct run_opts, g) == 0, "cli_gen_parse takes the options as their cli_gen_opts");

/* Options that are run's own; cli_gen_parse takes the rest. */
static const struct cli_opt run_table[] = {
	CLI_HELP_OPT,
	{ "-p", "--prompt", CLI_OPT_STR, offsetof(struct run_opts, prompt), 0, 0 },
	{ "-f", "--file", CLI_OPT_STR, offsetof(struct run_opts, file), 0, 0 },
};

/* 0, CLI_HELP or CLI_USAGE (after a message). */
static int parse(int argc, char **argv, struct run_opts *o)
{
	struct cli_args a = { argc, argv, 1, "run" };
	int rc;

	memset(o, 0, sizeof *o);
	if ((rc = cli_gen_parse(&a, CLI_TABLE(run_table), o)))
		return rc;
	if (o->prompt && o->file)
		return cli_usage_error(&a, "give -p or -f, not both");
	return 0;
}

/* Writes n bytes to stdout; a write error (closed pipe, full disk) is an error. */
static int out_write(const char *s, size_t n)
{
	return fwrite(s, 1, n, stdout) == n ? 0 : -1;
}

/* A run's handles and buffers (all freed by run_free). */
struct run_state {
	struct cli_gen g;    /* model, engine, sequence, sampler, buffers */
	struct tkv_detok ts;
	int32_t *ids;        /* (n_prompt) the prompt's tokens */
	size_t n_prompt, n_gen;
	struct tkv_error err;
	int st;           /* the failed call's status, for the message */
};

static void run_free(struct run_state *r)
{
	free(r->ids);
	cli_gen_free(&r->g);
}

/* Loads the model, the engine, a sequence and the sampler, and tokenizes the
 * prompt into r->ids. Returns CLI_OK, CLI_USAGE, or CLI_ERR (r->st and
 * r->err say why when a library call failed; otherwise it has printed why). */
static int run_setup(struct run_state *r, struct run_opts *o, const char *prompt, size_t prompt_len)
{
	uint32_t n_ctx;
	int rc;

	if ((rc = cli_load_model("run", o->g.model, &o->g.ep, &r->g.m, &r->g.info)))
		return rc;
	if ((r->st = cli_gen_start(&r->g, &o->g.ep, &o->g.sp, &r->err)))
		return CLI_ERR;
	/* tokenize: ask for the size first, then encode */
	tkv_vocab_tokenize(r->g.voc, prompt, prompt_len, tkv_vocab_add_bos(r->g.voc), true, NULL, 0, &r->n_prompt);
	if (r->n_prompt == 0) {
		fprintf(stderr, "tierkv run: the prompt is empty and the model has no BOS token to start from\n");
		return CLI_USAGE;
	}
	if (!(r->ids = malloc(r->n_prompt * sizeof *r->ids))) {
		fprintf(stderr, "tierkv run: out of memory\n");
		return CLI_ERR;
	}
	if ((r->st = tkv_vocab_tokenize(r->g.voc, prompt, prompt_len, tkv_vocab_add_bos(r->g.voc), true, r->ids,
					r->n_prompt, &r->n_prompt))) {
		tkv_errf(&r->err, r->st, "cannot tokenize the prompt");
		return CLI_ERR;
	}
	n_ctx = o->g.ep.n_ctx ? o->g.ep.n_ctx : r->g.info.n_ctx_train;
	if (r->n_prompt >= n_ctx) {
		fprintf(stderr, "tierkv run: the prompt is %zu tokens but the context holds %u "
			"(leave room to generate; raise -c or shorten the prompt)\n", r->n_prompt, n_ctx);
		return CLI_ERR;
	}
	return CLI_OK;
}

/* Writes a generated piece (without the leading space of the first one
 * when there was no prompt). -1 when stdout fails. */
static int run_emit(struct run_state *r, int32_t id, int *strip_space)
{
	int n = tkv_detok_push(r->g.voc, &r->ts, id, r->g.piece, r->g.piece_cap);
	const char *p = r->g.piece;

	if (n <= 0)
		return 0;
	if (*strip_space && *p == ' ') {
		p++;
		n--;
	}
	if (n > 0)
		*strip_space = 0;
	if (out_write(p, (size_t)n) || fflush(stdout))
		return -1;
	return 0;
}

/* Samples and decodes until -n, end of generation or a full context.
 * CLI_OK, CLI_ERR with r->st set (a decode failed), or -1 (stdout failed). */
static int run_generate(struct run_state *r, const struct run_opts *o, int strip_space)
{
	uint32_t n_ctx = o->g.ep.n_ctx ? o->g.ep.n_ctx : r->g.info.n_ctx_train;

	while (o->g.n_predict < 0 || (long)r->n_gen < o->g.n_predict) {
		int32_t id = tkv_sampler_sample(r->g.smp, r->g.logits);

		if (tkv_vocab_is_eog(r->g.voc, id) && !o->g.ignore_eos)
			break;
		tkv_sampler_accept(r->g.smp, id);
		r->n_gen++;
		if (run_emit(r, id, &strip_space))
			return -1;
		if (tkv_seq_n_past(r->g.seq) >= n_ctx) {
			fprintf(stderr, "\ntierkv: context of %u tokens is full; stopping\n", tkv_seq_n_past(r->g.seq));
			break;
		}
		if (o->g.n_predict >= 0 && (long)r->n_gen >= o->g.n_predict)
			break;
		if ((r->st = tkv_seq_decode(r->g.seq, &id, 1, r->g.logits, 0, &r->err))) {
			fflush(stdout);
			fprintf(stderr, "\n");
			return CLI_ERR;
		}
	}
	{
		int n = tkv_detok_flush(&r->ts, r->g.piece, r->g.piece_cap);

		if (n > 0 && out_write(r->g.piece, (size_t)n))
			return -1;
	}
	return fflush(stdout) || ferror(stdout) ? -1 : CLI_OK;
}

/* The timing and cache lines on stderr (and --kv-stats). */
static void run_report(struct run_state *r, const struct run_opts *o, double t0, double t1, double t2)
{
	struct tkv_kv_stats ks;
	char b1[32], b2[32], b3[32], b4[32], b5[32];

	tkv_engine_kv_stats(r->g.e, &ks);
	fprintf(stderr, "\ntierkv: prefill %zu tokens in %.1f ms (%.1f tok/s) | decode %zu tokens in %.1f ms (%.1f tok/s)\n",
		r->n_prompt, (t1 - t0) * 1e3, r->n_prompt / (t1 - t0), r->n_gen, (t2 - t1) * 1e3,
		r->n_gen ? r->n_gen / (t2 - t1) : 0.0);
	fprintf(stderr, "tierkv: KV %s allocated (%zu pages), %s used by %zu tokens, K+V data %s, budget %s | peak RSS %s\n",
		cli_fmt_bytes(b1, sizeof b1, (double)ks.allocated), ks.n_pages,
		cli_fmt_bytes(b2, sizeof b2, (double)ks.used), ks.n_tokens,
		cli_fmt_bytes(b3, sizeof b3, (double)ks.kv_bytes),
		ks.budget ? cli_fmt_bytes(b4, sizeof b4, (double)ks.budget) : "unlimited",
		cli_fmt_bytes(b5, sizeof b5, (double)cli_peak_rss()));
	if (o->g.kv_stats) {
		struct tkv_kv_layer_plan lp;

		cli_print_kv_stats(stderr, &ks, tkv_model_kv_bytes(r->g.m, ks.n_tokens));
		tkv_seq_layer_plan(r->g.seq, &lp);
		cli_print_layer_plan(stderr, &lp);
		{
			static struct tkv_kv_head_plan hp;

			tkv_engine_head_plan(r->g.e, &hp);
			cli_print_head_plan(stderr, &hp, r->g.info.n_kv_head);
		}
	}
}

int cli_run(int argc, char **argv)
{
	struct run_opts o;
	struct run_state r = { 0 };
	char *prompt_buf = NULL;
	const char *prompt = "";
	size_t prompt_len = 0;
	double t0, t1;
	int rc, st;

	if ((st = parse(argc, argv, &o)))
		return cli_parse_end(st, run_help);
	if ((rc = cli_model_path("run", &o.g.model)))
		return rc;
	if (o.file) {
		if (!(prompt_buf = cli_read_file(o.file, &prompt_len)))
			return CLI_ERR;
		prompt = prompt_buf;
	} else if (o.prompt) {
		prompt = o.prompt;
		prompt_len = strlen(prompt);
	}
	if ((rc = run_setup(&r, &o, prompt, prompt_len)))
		goto out;
	if (!o.g.seed_set && o.g.sp.temp > 0)
		fprintf(stderr, "tierkv: seed %llu\n", (unsigned long long)o.g.sp.seed);
	if (out_write(prompt, prompt_len) || fflush(stdout)) {
		rc = -1;
		goto out;
	}
	for (size_t i = 0; i < r.n_prompt; i++)
		tkv_sampler_accept(r.g.smp, r.ids[i]);
	t0 = cli_now();
	if ((r.st = tkv_seq_decode(r.g.seq, r.ids, r.n_prompt, r.g.logits, 0, &r.err))) {
		rc = CLI_ERR;
		goto out;
	}
	t1 = cli_now();
	if ((rc = run_generate(&r, &o, prompt_len == 0)) == CLI_OK)
		run_report(&r, &o, t0, t1, cli_now());
out:
	if (rc == -1) {
		fprintf(stderr, "tierkv run: cannot write to standard output\n");
		rc = CLI_ERR;
	} else if (rc == CLI_ERR && r.st) {
		fprintf(stderr, "tierkv run: %s\n", r.err.msg[0] ? r.err.msg : tkv_status_str(r.st));
	}
	run_free(&r);
	free(prompt_buf);
	return rc;
}
