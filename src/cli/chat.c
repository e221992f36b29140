/* chat.c - `tierkv chat`: a conversation in the terminal.
 *
 * Each turn renders the whole conversation with the model's chat template
 * (tkv_chat_render) but feeds the model only what is new: the text after
 * what the cache already holds (`fed`, the rendered turns and the replies as
 * generated). The KV of earlier turns is never computed again. A template
 * that rewrites its history (Qwen3 drops old reasoning, Mistral Nemo moves the
 * system text) does not start with `fed`; then the new turn is the template's
 * turn end plus its rendering of the new message after the history.
 *
 * The cache is sized by -c: the sequence's K+V budget is what -c tokens take
 * at f16, and past it the cache policy decides what is demoted or evicted,
 * while positions go on counting (up to --max-pos, where the conversation
 * starts over from its system prompt). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/chat.h"
#include "cli/cli.h"

struct chat_opts {
	struct cli_gen_opts g;   /* model, -n, sampling, engine and cache: first (cli_gen_parse) */
	const char *system, *tmpl;
	long max_pos;
	int verbose;
};
_Static_assert(offsetof(struct chat_opts, g) == 0, "cli_gen_parse takes the options as their cli_gen_opts");

struct chat_msg {
	const char *role;   /* static */
	char *text;         /* malloc'd */
	size_t len;
};

struct chat {
	const struct chat_opts *o;
	struct cli_gen g;         /* model, engine, sequence, sampler, buffers */
	struct tkv_chat_template t;
	uint32_t ctx;             /* tokens the cache is sized for (-c) */
	uint32_t max_pos;         /* positions before the conversation starts over */
	struct chat_msg *msgs;
	size_t n_msgs, cap_msgs;
	struct chat_buf fed;      /* the text whose tokens the cache holds */
	/* counters */
	uint64_t n_prompt, n_gen; /* tokens fed to the model from input, generated */
	uint32_t n_turns, n_restarts, last_fed, last_reused, last_gen;
};

static void chat_help(void)
{
	printf("usage: tierkv chat [-m MODEL] [-sys TEXT] [options]\n"
	       "\n"
	       "A conversation in the terminal. Type a message and Enter; the reply streams back.\n"
	       "Ctrl-C stops a reply; Ctrl-C twice at the prompt, or Ctrl-D (end of input), quits.\n"
	       "Commands: /reset (start over), /stats (cache tiers and bytes, token counters), /help.\n"
	       "Earlier turns stay in the KV cache and are never computed again.\n"
	       "\n"
	       "  -m, --model PATH      GGUF model (default: the bundled stories260K.gguf)\n"
	       "  -sys, --system TEXT   system prompt\n"
	       "      --chat-template F chat format (default: the model's tokenizer.chat_template,\n"
	       "                        else plain), one of:\n"
	       "                        %s\n"
	       "  -n, --n-predict N     most tokens per reply; -1 = until the end of the turn (default -1)\n"
	       "  -c, --ctx-size N      tokens the cache is sized for: its K+V budget is what N tokens\n"
	       "                        take at f16 (unless --kv-budget); past it the cache policy\n"
	       "                        demotes and evicts and the conversation goes on (default: the\n"
	       "                        model's context)\n"
	       "      --max-pos N       positions a conversation may reach before it starts over from\n"
	       "                        its system prompt (default: 4 x -c, at least 65536)\n"
	       "  -b, --batch-size N    prompt tokens per forward chunk (default 64)\n"
	       "  -t, --threads N       threads (default: physical cores)\n"
	       "      --temp T          temperature; 0 = greedy (default 0.8)\n"
	       "      --top-k K, --top-p P, --min-p P, --repeat-penalty X, --repeat-last-n N\n"
	       "                        as in 'tierkv run'\n"
	       "  -s, --seed S          random seed (default: random)\n"
	       "      --ignore-eos      keep generating past end-of-turn tokens (until -n or Ctrl-C)\n"
	       "  -v, --verbose         after each reply, the tokens fed and reused (stderr)\n"
	       "  -h, --help            this text\n\n",
	       tkv_chat_family_names());
	cli_kv_help();
}

/* Options that are chat's own; cli_gen_parse takes the rest (model, -n, sampling, engine, cache). */
static const struct cli_opt chat_table[] = {
	CLI_HELP_OPT,
	{ "-sys", "--system", CLI_OPT_STR, offsetof(struct chat_opts, system), 0, 0 },
	{ NULL, "--chat-template", CLI_OPT_STR, offsetof(struct chat_opts, tmpl), 0, 0 },
	{ NULL, "--max-pos", CLI_OPT_LONG, offsetof(struct chat_opts, max_pos), 16, 1L << 22 },
	{ "-v", "--verbose", CLI_OPT_FLAG, offsetof(struct chat_opts, verbose), 0, 0 },
};

/* 0, CLI_HELP or CLI_USAGE (after a message). */
static int parse(int argc, char **argv, struct chat_opts *o)
{
	struct cli_args a = { argc, argv, 1, "chat" };
	struct tkv_chat_template t;
	int rc;

	memset(o, 0, sizeof *o);
	if ((rc = cli_gen_parse(&a, CLI_TABLE(chat_table), o)))
		return rc;
	if (o->tmpl && tkv_chat_template_by_name(&t, o->tmpl))
		return cli_usage_error(&a, "--chat-template: unknown format '%s' (one of %s)", o->tmpl,
				       tkv_chat_family_names());
	return 0;
}

/* ---- the conversation ---------------------------------------------------------- */

static int add_msg(struct chat *c, const char *role, const char *text, size_t len)
{
	char *p;

	if (c->n_msgs == c->cap_msgs) {
		size_t cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
		struct chat_msg *m = realloc(c->msgs, cap * sizeof *m);

		if (!m)
			return -1;
		c->msgs = m;
		c->cap_msgs = cap;
	}
	if (!(p = malloc(len + 1)))
		return -1;
	memcpy(p, text, len);
	p[len] = 0;
	c->msgs[c->n_msgs++] = (struct chat_msg){ role, p, len };
	return 0;
}

static void drop_msgs(struct chat *c, size_t keep)
{
	while (c->n_msgs > keep)
		free(c->msgs[--c->n_msgs].text);
}

/* Renders messages [from, to) (with the generation prompt when gen) into out. */
static int render(const struct chat *c, size_t from, size_t to, bool gen, struct chat_buf *out)
{
	struct tkv_chat_msg *m = calloc(to - from + 1, sizeof *m);
	size_t len = 0;
	int rc = -1;

	if (!m)
		return -1;
	for (size_t i = from; i < to; i++)
		m[i - from] = (struct tkv_chat_msg){ c->msgs[i].role, c->msgs[i].text, c->msgs[i].len };
	tkv_chat_render(&c->t, m, to - from, gen, NULL, 0, &len);
	if (len + 1 > out->cap) {
		char *p = realloc(out->p, len + 1);

		if (!p)
			goto out;
		out->p = p;
		out->cap = len + 1;
	}
	rc = tkv_chat_render(&c->t, m, to - from, gen, out->p, out->cap, &out->len) ? -1 : 0;
out:
	free(m);
	return rc;
}

/* The text to feed for the newest (user) message: what the rendered
 * conversation adds to `fed`, or, for a template that rewrites its history,
 * the turn end, then the template's new turn after the history (or alone). */
static int turn_delta(struct chat *c, struct chat_buf *delta)
{
	struct chat_buf full = { 0 }, prev = { 0 };
	char end[64];
	size_t n = c->n_msgs;
	int rc = -1;

	delta->len = 0;
	if (render(c, 0, n, true, &full))
		goto out;
	if (full.len >= c->fed.len && !memcmp(full.p, c->fed.p ? c->fed.p : "", c->fed.len)) {
		rc = chat_buf_add(delta, full.p + c->fed.len, full.len - c->fed.len);
		goto out;
	}
	if (tkv_chat_turn_end(&c->t, end, sizeof end) < 0 || chat_buf_add(delta, end, strlen(end)) ||
	    render(c, 0, n - 1, false, &prev))
		goto out;
	if (full.len >= prev.len && !memcmp(full.p, prev.p, prev.len)) {
		rc = chat_buf_add(delta, full.p + prev.len, full.len - prev.len);
		goto out;
	}
	if (!render(c, n - 1, n, true, &prev))
		rc = chat_buf_add(delta, prev.p, prev.len);
out:
	chat_buf_free(&full);
	chat_buf_free(&prev);
	return rc;
}

/* Empties the cache and the conversation (the system prompt stays). */
static int start_over(struct chat *c)
{
	struct tkv_error err = { 0 };

	tkv_seq_free(c->g.seq);
	c->g.seq = NULL;
	drop_msgs(c, c->o->system ? 1 : 0);
	c->fed.len = 0;
	tkv_sampler_reset(c->g.smp, c->o->g.sp.seed + c->n_turns);
	if (tkv_seq_init(&c->g.seq, c->g.e, &err)) {
		fprintf(stderr, "tierkv chat: %s\n", err.msg);
		return -1;
	}
	return 0;
}

/* The tokens of text (BOS first when the cache is empty and the vocabulary
 * wants one); *ids malloc'd. */
static int tokenize(const struct chat *c, const struct chat_buf *text, int32_t **ids, size_t *n)
{
	bool bos = tkv_seq_n_past(c->g.seq) == 0 && tkv_vocab_add_bos(c->g.voc);

	*ids = NULL;
	tkv_vocab_tokenize(c->g.voc, text->p ? text->p : "", text->len, bos, true, NULL, 0, n);
	if (!(*ids = malloc((*n + 1) * sizeof **ids)))
		return -1;
	return tkv_vocab_tokenize(c->g.voc, text->p ? text->p : "", text->len, bos, true, *ids, *n, n) ? -1 : 0;
}

/* Writes raw[*shown..upto) to stdout; the reply's leading spaces are not shown. */
static void show(const struct chat_buf *raw, size_t *shown, size_t upto)
{
	if (*shown == 0)
		while (*shown < upto && raw->p[*shown] == ' ')
			(*shown)++;
	if (upto > *shown) {
		fwrite(raw->p + *shown, 1, upto - *shown, stdout);
		fflush(stdout);
		*shown = upto;
	}
}

/* Bytes at the end of raw that could begin the stop string. */
static size_t holdback(const struct chat_buf *raw, const char *stop)
{
	size_t L = stop ? strlen(stop) : 0;

	for (size_t k = L ? L - 1 : 0; k > 0; k--)
		if (raw->len >= k && !memcmp(raw->p + raw->len - k, stop, k))
			return k;
	return 0;
}

enum reply_end { REPLY_DONE, REPLY_STOPPED, REPLY_BROKEN };

/* Generates the reply into raw (every token of it is in the cache) and
 * streams it; *cut is where the text for the history ends (before the
 * plain format's "\nUser:"). */
static enum reply_end reply(struct chat *c, struct chat_buf *raw, size_t *cut)
{
	const struct chat_opts *o = c->o;
	const char *stop = c->t.family == TKV_CHAT_PLAIN ? "\nUser:" : NULL;
	struct tkv_detok d = { { 0 }, 0 };
	struct tkv_error err = { 0 };
	enum reply_end end = REPLY_DONE;
	size_t shown = 0;
	const char *hit = NULL;
	int k;

	for (c->last_gen = 0;; c->last_gen++) {
		int32_t id;

		if (chat_sigint) {
			chat_sigint = 0;
			end = REPLY_STOPPED;
			break;
		}
		if ((o->g.n_predict >= 0 && c->last_gen >= o->g.n_predict) || tkv_seq_n_past(c->g.seq) >= c->max_pos)
			break;
		id = tkv_sampler_sample(c->g.smp, c->g.logits);
		if (tkv_vocab_is_eog(c->g.voc, id) && !o->g.ignore_eos)
			break;
		tkv_sampler_accept(c->g.smp, id);
		if (tkv_seq_decode(c->g.seq, &id, 1, c->g.logits, 0, &err)) {
			fprintf(stderr, "\ntierkv chat: %s; the conversation starts over\n", err.msg);
			end = REPLY_BROKEN;
			break;
		}
		c->n_gen++;
		k = tkv_detok_push(c->g.voc, &d, id, c->g.piece, c->g.piece_cap);
		if ((k > 0 && chat_buf_add(raw, c->g.piece, (size_t)k)) || chat_buf_add(raw, "", 0))
			return REPLY_BROKEN;
		if (stop && (hit = strstr(raw->p, stop)))
			break;
		show(raw, &shown, raw->len - holdback(raw, stop));
	}
	k = tkv_detok_flush(&d, c->g.piece, c->g.piece_cap);
	if (k > 0 && chat_buf_add(raw, c->g.piece, (size_t)k))
		return REPLY_BROKEN;
	*cut = hit ? (size_t)(hit - raw->p) : raw->len;
	show(raw, &shown, *cut);
	printf("\n");
	if (end == REPLY_STOPPED)
		fprintf(stderr, "[reply stopped]\n");
	if (tkv_seq_n_past(c->g.seq) >= c->max_pos)
		fprintf(stderr, "[the conversation reached --max-pos %u positions; the next message starts over]\n",
			c->max_pos);
	fflush(stdout);
	return end;
}

/* Starts over keeping the newest message (the user's). 0 or -1. */
static int start_over_with_last(struct chat *c)
{
	struct chat_msg last = c->msgs[--c->n_msgs];
	int rc;

	c->n_restarts++;
	rc = start_over(c) || add_msg(c, "user", last.text, last.len) ? -1 : 0;
	free(last.text);
	return rc;
}

/* Feeds the new user message's turn; starts over first when the positions
 * would pass --max-pos, and once more when the cache cannot take it. 1 when
 * the message is refused (and dropped), 0 when fed, -1 out of memory. */
static int feed_turn(struct chat *c, struct chat_buf *delta)
{
	struct tkv_error err = { 0 };
	int32_t *ids = NULL;
	size_t n = 0;
	int rc = -1, tries = 0;

again:
	free(ids);
	ids = NULL;
	if (turn_delta(c, delta) || tokenize(c, delta, &ids, &n))
		goto out;
	if (n + 1 > c->ctx || n + 1 > c->max_pos) {
		fprintf(stderr, "tierkv chat: the message is %zu tokens, more than the cache is sized for (-c %u): "
			"ignored\n", n, c->ctx);
		free(c->msgs[--c->n_msgs].text);
		rc = 1;
		goto out;
	}
	if (tkv_seq_n_past(c->g.seq) + n + 1 > c->max_pos) {
		fprintf(stderr, "[%u positions: the conversation starts over from the system prompt]\n",
			tkv_seq_n_past(c->g.seq));
		if (start_over_with_last(c))
			goto out;
		goto again;
	}
	for (size_t i = 0; i < n; i++)
		tkv_sampler_accept(c->g.smp, ids[i]);
	c->last_reused = tkv_seq_n_past(c->g.seq);
	if (tkv_seq_decode(c->g.seq, ids, n, c->g.logits, 0, &err)) {
		bool retry = tkv_seq_n_past(c->g.seq) > 0 && tries++ == 0;

		fprintf(stderr, "tierkv chat: %s; the conversation starts over%s\n", err.msg,
			retry ? " from the system prompt" : " (the message is dropped)");
		if (retry ? start_over_with_last(c) : start_over(c))
			goto out;
		if (retry)
			goto again;
		rc = 1;
		goto out;
	}
	c->last_fed = (uint32_t)n;
	c->n_prompt += n;
	rc = chat_buf_add(&c->fed, delta->p, delta->len) ? -1 : 0;
out:
	free(ids);
	return rc;
}

/* One exchange: the user's message, then the reply. 0, or -1 (out of memory). */
static int user_turn(struct chat *c, const char *line, size_t len)
{
	struct chat_buf delta = { 0 }, raw = { 0 };
	enum reply_end end;
	size_t cut = 0, skip;
	int rc;

	if (add_msg(c, "user", line, len))
		return -1;
	rc = feed_turn(c, &delta);
	chat_buf_free(&delta);
	if (rc)
		return rc < 0 ? -1 : 0;
	c->n_turns++;
	end = reply(c, &raw, &cut);
	if (c->o->verbose)
		fprintf(stderr, "[turn %u: fed %u new tokens, reused %u cached positions, generated %u]\n",
			c->n_turns, c->last_fed, c->last_reused, c->last_gen);
	if (end == REPLY_BROKEN) {
		chat_buf_free(&raw);
		return start_over(c);
	}
	/* the plain format writes "Assistant: " before the text */
	skip = c->t.family == TKV_CHAT_PLAIN && cut && raw.p[0] == ' ' ? 1 : 0;
	rc = add_msg(c, "assistant", raw.p ? raw.p + skip : "", cut - skip) ||
	     chat_buf_add(&c->fed, raw.p ? raw.p : "", raw.len) ? -1 : 0;
	chat_buf_free(&raw);
	return rc;
}

/* ---- commands -------------------------------------------------------------------- */

static void print_tier(const char *name, size_t slots, size_t bytes, size_t streams)
{
	char b[32];

	printf("  %-5s %8zu tokens  %10s\n", name, streams ? slots / streams : 0,
	       cli_fmt_bytes(b, sizeof b, (double)bytes));
}

/* /stats: counters of the conversation, its cache's tiers and bytes, the pool. */
static void print_stats(struct chat *c)
{
	struct tkv_kv_stats ks, es;
	size_t streams = (size_t)c->g.info.n_layer * c->g.info.n_kv_head, held = 0;
	uint32_t pos = tkv_seq_n_past(c->g.seq);
	char b1[32], b2[32], b3[32], b4[32];

	tkv_seq_kv_stats(c->g.seq, &ks);
	tkv_engine_kv_stats(c->g.e, &es);
	for (int i = 0; i < 3; i++)
		held += ks.tier_tokens[i];
	printf("conversation: %u turns, %zu messages, template %s, %u restarts\n", c->n_turns, c->n_msgs,
	       tkv_chat_template_name(&c->t), c->n_restarts);
	printf("positions: %u (model context %u, cache sized for %u tokens, --max-pos %u)\n", pos,
	       c->g.info.n_ctx_train, c->ctx, c->max_pos);
	printf("tokens: %llu fed from input + %llu generated; last turn fed %u new, reused %u cached, generated %u\n",
	       (unsigned long long)c->n_prompt, (unsigned long long)c->n_gen, c->last_fed, c->last_reused,
	       c->last_gen);
	printf("cache: %zu tokens held (per layer and KV head), K+V %s of a %s budget (full f16 for %u positions: %s)\n",
	       streams ? held / streams : 0, cli_fmt_bytes(b1, sizeof b1, (double)ks.kv_bytes),
	       c->o->g.ep.kv.seq_budget ? cli_fmt_bytes(b2, sizeof b2, (double)c->o->g.ep.kv.seq_budget) : "unlimited",
	       pos, cli_fmt_bytes(b3, sizeof b3, (double)tkv_model_kv_bytes(c->g.m, pos)));
	print_tier("hot", ks.tier_tokens[0], ks.tier_bytes[0], streams);
	print_tier("warm", ks.tier_tokens[1], ks.tier_bytes[1], streams);
	print_tier("cold", ks.tier_tokens[2], ks.tier_bytes[2], streams);
	printf("  evicted %llu, demoted %llu token slots (all layers and KV heads)\n",
	       (unsigned long long)ks.evicted, (unsigned long long)ks.demoted);
	printf("pool: %s allocated of --kv-mem %s (%.1f%%), peak %s, %zu pages\n",
	       cli_fmt_bytes(b1, sizeof b1, (double)es.allocated),
	       es.budget ? cli_fmt_bytes(b2, sizeof b2, (double)es.budget) : "unlimited",
	       es.budget ? 100.0 * (double)es.allocated / (double)es.budget : 0.0,
	       cli_fmt_bytes(b4, sizeof b4, (double)es.peak_allocated), es.n_pages);
	fflush(stdout);
}

/* A line that is a command: 1 when handled, 0 when it is a message. */
static int command(struct chat *c, const char *s, int *rc)
{
	*rc = 0;
	if (s[0] != '/' || strchr(s, ' '))
		return 0;
	if (!strcmp(s, "/reset")) {
		*rc = start_over(c);
		printf("[conversation reset]\n");
	} else if (!strcmp(s, "/stats")) {
		print_stats(c);
	} else if (!strcmp(s, "/help")) {
		printf("/reset  start over (the system prompt stays)\n/stats  cache tiers and bytes, token counters\n"
		       "/help   this text\nCtrl-C stops a reply; Ctrl-C twice at the prompt or Ctrl-D quits.\n");
	} else {
		fprintf(stderr, "tierkv chat: unknown command '%s' (/help lists them)\n", s);
	}
	fflush(stdout);
	return 1;
}

/* Checks one input line; NULL when it is a message to send or a command. */
static bool usable(struct chat_buf *line, size_t too_long)
{
	const char *why;
	size_t at = 0;

	if (too_long) {
		fprintf(stderr, "tierkv chat: the line is %zu bytes, more than %d: ignored\n", too_long, CHAT_MAX_LINE);
		return false;
	}
	if ((why = chat_check_text(line->p ? line->p : "", line->len, &at))) {
		fprintf(stderr, "tierkv chat: the input %s (byte 0x%02x at offset %zu): ignored\n", why,
			(unsigned char)line->p[at], at);
		return false;
	}
	while (line->len && (line->p[line->len - 1] == ' ' || line->p[line->len - 1] == '\t'))
		line->p[--line->len] = 0;
	return line->len > 0;
}

/* The prompt loop until end of input or Ctrl-C twice in a row at the prompt
 * (a Ctrl-C that stops a reply does not count). */
static int converse(struct chat *c)
{
	struct chat_reader r = { .pos = 0 };
	struct chat_buf line = { 0 };
	int ctrl_c = 0, rc = CLI_OK;

	for (;;) {
		size_t too_long = 0;
		enum chat_read st;
		int crc;

		printf("> ");
		fflush(stdout);
		st = chat_read_line(&r, &line, &too_long);
		if (st == CHAT_READ_INTERRUPTED) {
			chat_sigint = 0;
			printf("\n");
			if (ctrl_c)
				break;
			ctrl_c = 1;
			fprintf(stderr, "(Ctrl-C again or Ctrl-D to quit)\n");
			continue;
		}
		if (st == CHAT_READ_EOF) {
			printf("\n");
			break;
		}
		if (st == CHAT_READ_ERROR) {
			fprintf(stderr, "tierkv chat: cannot read standard input\n");
			rc = CLI_ERR;
			break;
		}
		ctrl_c = 0;
		if (!usable(&line, too_long))
			continue;
		if (command(c, line.p, &crc) ? crc : user_turn(c, line.p, line.len)) {
			fprintf(stderr, "tierkv chat: out of memory\n");
			rc = CLI_ERR;
			break;
		}
	}
	chat_buf_free(&line);
	fflush(stdout);
	return rc;
}

/* ---- the command ------------------------------------------------------------------- */

/* The engine sized for a conversation: positions up to --max-pos, K+V budget
 * of -c tokens at f16. */
static int chat_open(struct chat *c, struct chat_opts *o, struct tkv_error *err)
{
	struct tkv_model_params mp = tkv_model_default_params();
	int st;

	if ((st = tkv_model_load(&c->g.m, o->g.model, &mp, err)))
		return st;
	tkv_model_get_info(c->g.m, &c->g.info);
	c->ctx = o->g.ep.n_ctx ? o->g.ep.n_ctx : c->g.info.n_ctx_train;
	c->max_pos = o->max_pos ? (uint32_t)o->max_pos : (4 * c->ctx > 65536 ? 4 * c->ctx : 65536);
	o->g.ep.n_ctx = c->max_pos;
	if (o->g.ep.n_batch > c->max_pos)
		o->g.ep.n_batch = c->max_pos;
	if (!o->g.ep.kv.seq_budget)
		o->g.ep.kv.seq_budget = tkv_model_kv_bytes(c->g.m, c->ctx);
	st = tkv_chat_template_from_model(&c->t, c->g.m, o->tmpl, err);
	if (st == TKV_ERR_UNSUPPORTED)
		fprintf(stderr, "tierkv chat: %s; using the plain format (choose one with --chat-template)\n", err->msg);
	else if (st)
		return st;
	if ((st = cli_gen_start(&c->g, &o->g.ep, &o->g.sp, err)))
		return st;
	if (o->system && add_msg(c, "system", o->system, strlen(o->system)))
		return tkv_errf(err, TKV_ERR_NOMEM, "out of memory");
	return TKV_OK;
}

static void chat_close(struct chat *c)
{
	drop_msgs(c, 0);
	free(c->msgs);
	chat_buf_free(&c->fed);
	cli_gen_free(&c->g);
}

int cli_chat(int argc, char **argv)
{
	struct chat_opts o;
	struct chat c;
	struct tkv_error err = { 0 };
	struct tkv_model_info info;
	char b[32];
	int rc, st;

	if ((st = parse(argc, argv, &o)))
		return cli_parse_end(st, chat_help);
	if ((rc = cli_model_path("chat", &o.g.model)))
		return rc;
	memset(&c, 0, sizeof c);
	c.o = &o;
	if ((st = chat_open(&c, &o, &err))) {
		fprintf(stderr, "tierkv chat: %s\n", err.msg[0] ? err.msg : tkv_status_str(st));
		chat_close(&c);
		return st == TKV_ERR_ARG ? CLI_USAGE : CLI_ERR;
	}
	tkv_model_get_info(c.g.m, &info);
	if ((rc = cli_check_layer_plan("chat", &o.g.ep, &info)) || chat_signals_init()) {
		chat_close(&c);
		return rc ? rc : CLI_ERR;
	}
	fprintf(stderr, "tierkv chat: %s, template %s, cache sized for %u tokens (%s of K+V), policy %s",
		o.g.model, tkv_chat_template_name(&c.t), c.ctx, cli_fmt_bytes(b, sizeof b, (double)o.g.ep.kv.seq_budget),
		tkv_policy_name(o.g.ep.kv.policy));
	if (!o.g.seed_set && o.g.sp.temp > 0)
		fprintf(stderr, ", seed %llu", (unsigned long long)o.g.sp.seed);
	fprintf(stderr, "\n/help for commands; Ctrl-C stops a reply, Ctrl-D quits.\n");
	rc = converse(&c);
	if (o.g.kv_stats)
		print_stats(&c);
	chat_close(&c);
	return rc;
}
