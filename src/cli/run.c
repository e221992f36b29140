/* run.c - `tierkv run`: generate text from a prompt.
 *
 * stdout gets the prompt followed by the generated text and nothing else;
 * everything else (timings, KV bytes, errors) goes to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/status.h"

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
	const char *model, *prompt, *file;
	long n_predict;
	int ignore_eos;
	int kv_stats;
	struct tkv_sampler_params sp;
	int seed_set;
	struct tkv_engine_params ep;
};

static int parse(int argc, char **argv, struct run_opts *o)
{
	struct cli_args a = { argc, argv, 1, "run" };
	long x;
	double d;
	int rc;

	memset(o, 0, sizeof *o);
	o->n_predict = -1;
	o->sp = tkv_sampler_default_params();
	o->ep = tkv_engine_default_params();
	for (; a.i < argc; a.i++) {
		const char *s = argv[a.i];

		if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
			run_help();
			return -1;
		} else if (!strcmp(s, "-m") || !strcmp(s, "--model")) {
			if (!(o->model = cli_value(&a, s)))
				return CLI_USAGE;
		} else if (!strcmp(s, "-p") || !strcmp(s, "--prompt")) {
			if (!(o->prompt = cli_value(&a, s)))
				return CLI_USAGE;
		} else if (!strcmp(s, "-f") || !strcmp(s, "--file")) {
			if (!(o->file = cli_value(&a, s)))
				return CLI_USAGE;
		} else if (!strcmp(s, "-n") || !strcmp(s, "--n-predict")) {
			if ((rc = cli_int(&a, s, -1, 1L << 30, &o->n_predict)))
				return rc;
		} else if (!strcmp(s, "--temp")) {
			if ((rc = cli_float(&a, s, 0, 100, &d)))
				return rc;
			o->sp.temp = (float)d;
		} else if (!strcmp(s, "--top-k")) {
			if ((rc = cli_int(&a, s, 0, 1L << 30, &x)))
				return rc;
			o->sp.top_k = (int32_t)x;
		} else if (!strcmp(s, "--top-p")) {
			if ((rc = cli_float(&a, s, 1e-9, 1, &d)))
				return rc;
			o->sp.top_p = (float)d;
		} else if (!strcmp(s, "--min-p")) {
			if ((rc = cli_float(&a, s, 0, 1, &d)))
				return rc;
			o->sp.min_p = (float)d;
		} else if (!strcmp(s, "--repeat-penalty")) {
			if ((rc = cli_float(&a, s, 1e-3, 100, &d)))
				return rc;
			o->sp.repeat_penalty = (float)d;
		} else if (!strcmp(s, "--repeat-last-n")) {
			if ((rc = cli_int(&a, s, 0, 1L << 20, &x)))
				return rc;
			o->sp.repeat_last_n = (int32_t)x;
		} else if (!strcmp(s, "-s") || !strcmp(s, "--seed")) {
			if ((rc = cli_u64(&a, s, &o->sp.seed)))
				return rc;
			o->seed_set = 1;
		} else if (!strcmp(s, "--ignore-eos")) {
			o->ignore_eos = 1;
		} else {
			int handled;

			if ((rc = cli_engine_option(&a, &o->ep, &o->kv_stats, &handled)))
				return rc;
			if (!handled)
				return cli_usage_error(&a, "unknown option '%s'", s);
		}
	}
	if ((rc = cli_kv_check(&a, &o->ep)))
		return rc;
	if (o->prompt && o->file)
		return cli_usage_error(&a, "give -p or -f, not both");
	if (!o->seed_set) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		o->sp.seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
	}
	return 0;
}

/* Writes n bytes to stdout; a write error (closed pipe, full disk) is an error. */
static int out_write(const char *s, size_t n)
{
	return fwrite(s, 1, n, stdout) == n ? 0 : -1;
}

int cli_run(int argc, char **argv)
{
	struct run_opts o;
	struct tkv_model_params mp = tkv_model_default_params();
	struct tkv_model *m = NULL;
	struct tkv_engine *e = NULL;
	struct tkv_seq *seq = NULL;
	struct tkv_sampler *smp = NULL;
	struct tkv_error err = { 0 };
	struct tkv_model_info info;
	struct tkv_detok ts = { { 0 }, 0 };
	const struct tkv_vocab *voc;
	char *prompt_buf = NULL, *piece = NULL;
	size_t piece_cap = 0;
	const char *prompt = "";
	size_t prompt_len = 0, n_prompt = 0, n_gen = 0;
	int32_t *ids = NULL;
	float *logits = NULL;
	double t0, t1, t2;
	int rc = CLI_ERR, st, strip_space;

	st = parse(argc, argv, &o);
	if (st == -1)
		return CLI_OK;
	if (st)
		return st;
	if (!o.model && !(o.model = cli_bundled_model())) {
		fprintf(stderr, "tierkv run: no -m given and the bundled model was not found\n");
		return CLI_USAGE;
	}
	if (o.file) {
		if (!(prompt_buf = cli_read_file(o.file, &prompt_len)))
			return CLI_ERR;
		prompt = prompt_buf;
	} else if (o.prompt) {
		prompt = o.prompt;
		prompt_len = strlen(prompt);
	}

	if ((st = tkv_model_load(&m, o.model, &mp, &err)))
		goto fail;
	tkv_model_get_info(m, &info);
	if ((rc = cli_check_layer_plan("run", &o.ep, &info)))
		goto out;
	rc = CLI_ERR;
	voc = tkv_model_vocab(m);
	if ((st = tkv_engine_init(&e, m, &o.ep, &err)) || (st = tkv_seq_init(&seq, e, &err)) ||
	    (st = tkv_sampler_init(&smp, &o.sp, (int32_t)info.n_vocab, NULL, &err)))
		goto fail;

	/* tokenize: ask for the size first, then encode */
	tkv_vocab_tokenize(voc, prompt, prompt_len, tkv_vocab_add_bos(voc), true, NULL, 0, &n_prompt);
	if (n_prompt == 0) {
		fprintf(stderr, "tierkv run: the prompt is empty and the model has no BOS token to start from\n");
		rc = CLI_USAGE;
		goto out;
	}
	ids = malloc(n_prompt * sizeof *ids);
	logits = malloc((size_t)info.n_vocab * sizeof *logits);
	piece_cap = tkv_detok_min_cap(voc);
	piece = malloc(piece_cap);
	if (!ids || !logits || !piece) {
		fprintf(stderr, "tierkv run: out of memory\n");
		goto out;
	}
	if ((st = tkv_vocab_tokenize(voc, prompt, prompt_len, tkv_vocab_add_bos(voc), true, ids, n_prompt, &n_prompt))) {
		tkv_errf(&err, st, "cannot tokenize the prompt");
		goto fail;
	}
	{
		uint32_t n_ctx = o.ep.n_ctx ? o.ep.n_ctx : info.n_ctx_train;

		if (n_prompt >= n_ctx) {
			fprintf(stderr, "tierkv run: the prompt is %zu tokens but the context holds %u "
				"(leave room to generate; raise -c or shorten the prompt)\n", n_prompt, n_ctx);
			goto out;
		}
	}
	if (!o.seed_set && o.sp.temp > 0)
		fprintf(stderr, "tierkv: seed %llu\n", (unsigned long long)o.sp.seed);

	if (out_write(prompt, prompt_len))
		goto write_fail;
	fflush(stdout);
	strip_space = prompt_len == 0;
	for (size_t i = 0; i < n_prompt; i++)
		tkv_sampler_accept(smp, ids[i]);

	t0 = cli_now();
	if ((st = tkv_seq_decode(seq, ids, n_prompt, logits, 0, &err)))
		goto fail;
	t1 = cli_now();
	while (o.n_predict < 0 || (long)n_gen < o.n_predict) {
		int32_t id = tkv_sampler_sample(smp, logits);
		int n;

		if (tkv_vocab_is_eog(voc, id) && !o.ignore_eos)
			break;
		tkv_sampler_accept(smp, id);
		n_gen++;
		n = tkv_detok_push(voc, &ts, id, piece, piece_cap);
		if (n > 0) {
			const char *p = piece;

			if (strip_space && *p == ' ') {
				p++;
				n--;
			}
			if (n > 0)
				strip_space = 0;
			if (out_write(p, (size_t)n))
				goto write_fail;
			fflush(stdout);
		}
		if (tkv_seq_n_past(seq) >= (o.ep.n_ctx ? o.ep.n_ctx : info.n_ctx_train)) {
			fprintf(stderr, "\ntierkv: context of %u tokens is full; stopping\n", tkv_seq_n_past(seq));
			break;
		}
		if (o.n_predict >= 0 && (long)n_gen >= o.n_predict)
			break;
		if ((st = tkv_seq_decode(seq, &id, 1, logits, 0, &err))) {
			fflush(stdout);
			fprintf(stderr, "\n");
			goto fail;
		}
	}
	{
		int n = tkv_detok_flush(&ts, piece, piece_cap);

		if (n > 0 && out_write(piece, (size_t)n))
			goto write_fail;
	}
	if (fflush(stdout))
		goto write_fail;
	t2 = cli_now();
	{
		struct tkv_kv_stats ks;
		char b1[32], b2[32], b3[32], b4[32], b5[32];

		tkv_engine_kv_stats(e, &ks);
		fprintf(stderr, "\ntierkv: prefill %zu tokens in %.1f ms (%.1f tok/s) | decode %zu tokens in %.1f ms (%.1f tok/s)\n",
			n_prompt, (t1 - t0) * 1e3, n_prompt / (t1 - t0), n_gen, (t2 - t1) * 1e3,
			n_gen ? n_gen / (t2 - t1) : 0.0);
		fprintf(stderr, "tierkv: KV %s allocated (%zu pages), %s used by %zu tokens, K+V data %s, budget %s | peak RSS %s\n",
			cli_fmt_bytes(b1, sizeof b1, (double)ks.allocated), ks.n_pages,
			cli_fmt_bytes(b2, sizeof b2, (double)ks.used), ks.n_tokens,
			cli_fmt_bytes(b3, sizeof b3, (double)ks.kv_bytes),
			ks.budget ? cli_fmt_bytes(b4, sizeof b4, (double)ks.budget) : "unlimited",
			cli_fmt_bytes(b5, sizeof b5, (double)cli_peak_rss()));
		if (o.kv_stats) {
			struct tkv_kv_layer_plan lp;

			cli_print_kv_stats(stderr, &ks, ks.n_tokens * tkv_model_kv_bytes_per_token(m));
			tkv_seq_layer_plan(seq, &lp);
			cli_print_layer_plan(stderr, &lp);
		}
	}
	rc = CLI_OK;
	goto out;

write_fail:
	fprintf(stderr, "tierkv run: cannot write to standard output\n");
	rc = CLI_ERR;
	goto out;
fail:
	fprintf(stderr, "tierkv run: %s\n", err.msg[0] ? err.msg : tkv_status_str(st));
	rc = CLI_ERR;
out:
	free(ids);
	free(piece);
	free(logits);
	free(prompt_buf);
	tkv_sampler_free(smp);
	tkv_seq_free(seq);
	tkv_engine_free(e);
	tkv_model_free(m);
	return rc;
}
