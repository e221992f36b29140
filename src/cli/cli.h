/* cli.h - the tierkv command line: shared argument helpers and subcommands.
 *
 * Exit codes everywhere: 0 ok, 1 runtime error, 2 usage error. Only the
 * subcommand functions (called from main) decide them. */
#ifndef TKV_CLI_CLI_H
#define TKV_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "tierkv.h"

#define CLI_OK 0
#define CLI_ERR 1
#define CLI_USAGE 2

/* Argument cursor over argv for one subcommand. */
struct cli_args {
	int argc;
	char **argv;
	int i;             /* next argument */
	const char *cmd;   /* subcommand name, for messages */
};

/* Prints "tierkv CMD: <message>" and a pointer to --help to stderr; returns CLI_USAGE. */
int cli_usage_error(const struct cli_args *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The value after option opt (argv[i]); NULL (after a usage message) if missing. */
const char *cli_value(struct cli_args *a, const char *opt);
/* Parsers: return 0 on success, or print a usage error and return CLI_USAGE. */
int cli_int(struct cli_args *a, const char *opt, long min, long max, long *out);
int cli_float(struct cli_args *a, const char *opt, double min, double max, double *out);
int cli_u64(struct cli_args *a, const char *opt, uint64_t *out);
/* A command's plain options as a table, one row each: its spellings (shrt
 * may be NULL), the kind of value and where it goes in the command's options
 * struct (offsetof). */
enum cli_opt_kind {
	CLI_OPT_HELP,  /* -h/--help: cli_table_option returns CLI_HELP */
	CLI_OPT_FLAG,  /* int, set to 1 */
	CLI_OPT_STR,   /* const char *: the argument itself */
	CLI_OPT_LONG,  /* long: an integer in [min, max] */
	CLI_OPT_INT,   /* int: an integer in [min, max] */
	CLI_OPT_DOUBLE,/* double: a number in [min, max] */
	CLI_OPT_U64,   /* uint64_t: a non-negative integer */
};
struct cli_opt {
	const char *shrt, *lng;
	enum cli_opt_kind kind;
	size_t off;
	double min, max;
};
#define CLI_HELP (-1)
#define CLI_HELP_OPT { "-h", "--help", CLI_OPT_HELP, 0, 0, 0 }
/* The table t and its length, for cli_table_option. */
#define CLI_TABLE(t) (t), sizeof(t) / sizeof((t)[0])
/* If argv[a->i] is one of the n options of t, parses it (and its value) into
 * the struct at o and sets *handled; 0, CLI_HELP, or CLI_USAGE after a
 * message. */
int cli_table_option(struct cli_args *a, const struct cli_opt *t, size_t n, void *o, int *handled);
/* The option loop of a command: each argument goes to its table t (n rows,
 * into the struct at o), else to more(a, o), the command's other options,
 * which ends with an engine or KV option or "unknown option". 0, CLI_HELP or
 * CLI_USAGE (after a message). */
int cli_parse_options(struct cli_args *a, const struct cli_opt *t, size_t n, void *o,
		      int (*more)(struct cli_args *a, void *o));
/* What a command returns after its parse failed or asked for help (st, not
 * 0): CLI_OK after help() for CLI_HELP, else st. */
int cli_parse_end(int st, void (*help)(void));
/* An option no table took: an engine or KV option into ep (stats as for
 * cli_engine_option), else a usage error "unknown option". 0 or CLI_USAGE. */
int cli_engine_or_unknown(struct cli_args *a, struct tkv_engine_params *ep, int *stats);
/* The same with the KV options only (no -c, -b, -t). */
int cli_kv_or_unknown(struct cli_args *a, struct tkv_engine_params *ep, int *stats);
/* The options of the commands that generate (run, chat). */
struct cli_gen_opts {
	const char *model;               /* -m (NULL: the bundled model) */
	long n_predict;                  /* -n: tokens to generate, -1 = until the end */
	int ignore_eos;                  /* --ignore-eos */
	int seed_set, kv_stats;          /* -s given, --kv-stats */
	struct tkv_sampler_params sp;    /* --temp, --top-k, ... */
	struct tkv_engine_params ep;     /* -c, -b, -t, --kv-* */
};
/* The whole option parse of a generating command whose options struct o
 * starts with its struct cli_gen_opts: the defaults, the command's table t,
 * cli_gen_option for the rest, then the KV options' joint check and a seed
 * from the clock when none was given. 0, CLI_HELP or CLI_USAGE. */
int cli_gen_parse(struct cli_args *a, const struct cli_opt *t, size_t n, void *o);
/* What a generating command holds once its model is loaded (cli_gen_free
 * frees it all; members still NULL are fine). */
struct cli_gen {
	struct tkv_model *m;
	struct tkv_model_info info;
	const struct tkv_vocab *voc;     /* borrowed from m */
	struct tkv_engine *e;
	struct tkv_seq *seq;
	struct tkv_sampler *smp;
	float *logits;                   /* (n_vocab) */
	char *piece;                     /* (piece_cap) streamed text */
	size_t piece_cap;
};
/* For g->m loaded and g->info filled: the engine on ep, one sequence, the
 * sampler on sp, the logits and the piece buffer. TKV_OK, or a status with
 * err set. */
int cli_gen_start(struct cli_gen *g, const struct tkv_engine_params *ep, const struct tkv_sampler_params *sp,
		  struct tkv_error *err);
void cli_gen_free(struct cli_gen *g);
/* Sampling options (--temp, --top-k, --top-p, --min-p, --repeat-penalty,
 * --repeat-last-n, -s/--seed): if argv[a->i] is one, parses it into sp and
 * sets *handled (and *seed_set for a seed); returns 0 or CLI_USAGE. */
struct tkv_sampler_params;
int cli_sampler_option(struct cli_args *a, struct tkv_sampler_params *sp, int *seed_set, int *handled);
/* A seed from the clock and the process id. */
uint64_t cli_random_seed(void);
/* Byte sizes: "4096", "512K", "256M", "1G" (powers of 1024; "KiB"/"MB" accepted). */
int cli_size(struct cli_args *a, const char *opt, size_t *out);
/* Parses a size string; 0 on success. */
int cli_parse_size(const char *s, size_t *out);
/* Formats bytes as "1.50 MiB" into buf. */
const char *cli_fmt_bytes(char *buf, size_t cap, double bytes);
/* The bundled model: next to the executable (../models, ./models), then the
 * source tree's models/. NULL when none is readable. */
const char *cli_bundled_model(void);
/* The model path of subcommand cmd: *path as given, else the bundled model
 * (*path is set to it). CLI_OK, or CLI_USAGE after "tierkv CMD: no -m given
 * and the bundled model was not found". */
int cli_model_path(const char *cmd, const char **path);
/* Loads the model at path into *out (the caller's: tkv_model_free; NULL on
 * failure) and its info, and checks the layer plan and sharing of ep against
 * it (ep may be NULL: no check). CLI_OK, CLI_ERR after "tierkv CMD: <why>",
 * or CLI_USAGE after cli_check_layer_plan's message. */
int cli_load_model(const char *cmd, const char *path, const struct tkv_engine_params *ep, struct tkv_model **out,
		   struct tkv_model_info *info);
/* Prints "tierkv CMD: <err's message, or the status's name>" to stderr. */
void cli_print_error(const char *cmd, int st, const struct tkv_error *err);
/* Reads a whole file (malloc'd, NUL-terminated); NULL and a message on error. */
char *cli_read_file(const char *path, size_t *len);
/* Peak resident set size of this process in bytes. */
size_t cli_peak_rss(void);
/* Monotonic seconds. */
double cli_now(void);

/* KV cache options (--kv-*): if argv[a->i] is one, parses it (and its value)
 * into ep and sets *handled; returns 0 or CLI_USAGE after a message. stats (may
 * be NULL) is set by --kv-stats. */
struct tkv_engine_params;
int cli_kv_option(struct cli_args *a, struct tkv_engine_params *ep, int *stats, int *handled);
/* The engine options (-c/--ctx-size, -b/--batch-size, -t/--threads) and then
 * the KV options, the same way as cli_kv_option. */
int cli_engine_option(struct cli_args *a, struct tkv_engine_params *ep, int *stats, int *handled);
/* What the KV options only say together, checked after the last option
 * (--kv-hot + --kv-warm at most 1, in any order); 0 or CLI_USAGE. */
int cli_kv_check(struct cli_args *a, const struct tkv_engine_params *ep);
/* A comma-separated list of policy names (or 'all') for option opt into
 * out[TKV_POLICY_COUNT], in the order of the enum (full first, so tables
 * compare across runs); 0 or CLI_USAGE after a message. */
enum tkv_policy;
int cli_parse_policies(struct cli_args *a, const char *opt, const char *v, enum tkv_policy *out, size_t *n);
/* --policies LIST and --budgets LIST (at most max_bud fractions) of the
 * commands that compare policies at budgets (bench, eval), which refuse
 * --kv-policy and --kv-budget: sets *handled when argv[a->i] is one of the
 * four; 0 or CLI_USAGE after a message. */
int cli_compare_option(struct cli_args *a, enum tkv_policy *pol, size_t *n_pol, double *bud, size_t max_bud,
		       size_t *n_bud, int *handled);
/* A comma-separated list of up to max numbers in (0, 1] for option opt. */
/* One sharing spec "C" or "C:L" (the first len bytes of v) into cos and from
 * (see --kv-share); 0 or a usage error. */
int cli_share_spec(struct cli_args *a, const char *opt, const char *v, size_t len, float *cos, uint32_t *from);
/* A comma list of numbers in [lo, hi] ((lo, hi] if lo_open) into out[max];
 * a usage error (status 2) names opt otherwise. */
int cli_parse_numbers(struct cli_args *a, const char *opt, const char *v, double lo, double hi, bool lo_open,
		      double *out, size_t max, size_t *n);
int cli_parse_fractions(struct cli_args *a, const char *opt, const char *v, double *out, size_t max, size_t *n);
/* Prints the --kv-* options for a --help text. */
void cli_kv_help(void);
/* Prints a cache's tiers, bytes and decisions; full_kv_bytes is what a full
 * f16 cache would hold for the same tokens. */
void cli_print_kv_stats(FILE *f, const struct tkv_kv_stats *ks, size_t full_kv_bytes);
/* Prints a sequence's layer plan (nothing for a uniform one). */
struct tkv_kv_layer_plan;
void cli_print_layer_plan(FILE *f, const struct tkv_kv_layer_plan *p);
/* The head plan (tkv_engine_head_plan) for --kv-stats; nothing when uniform. */
void cli_print_head_plan(FILE *f, const struct tkv_kv_head_plan *p, uint32_t n_kv_head);
/* Options checked against the model: a fixed --kv-layer-plan must list one
 * entry per layer, --kv-share must start at one of its layers; else a message
 * and CLI_USAGE. */
struct tkv_model_info;
int cli_check_layer_plan(const char *cmd, const struct tkv_engine_params *ep, const struct tkv_model_info *info);

int cli_run(int argc, char **argv);
int cli_inspect(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_gen_model(int argc, char **argv);
/* tierkv eval --kl-base FILE (eval_klbase.c) */
int cli_eval_klbase(int argc, char **argv);
int cli_bench(int argc, char **argv);
/* `tierkv bench --serve` (bench_serve.c), reached from cli_bench. */
int cli_bench_serve(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_chat(int argc, char **argv);
/* `tierkv eval --retrieval` (eval_retrieval.c), reached from cli_eval. */
int cli_eval_retrieval(int argc, char **argv);
/* The text of `tierkv eval --help`, both modes. */
void cli_eval_help(void);

#endif
