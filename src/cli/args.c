/* args.c - argument parsing and small utilities shared by the subcommands. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

int cli_usage_error(const struct cli_args *a, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tierkv %s: ", a->cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'tierkv %s --help'.\n", a->cmd);
	return CLI_USAGE;
}

const char *cli_value(struct cli_args *a, const char *opt)
{
	if (a->i + 1 >= a->argc) {
		cli_usage_error(a, "option %s needs a value", opt);
		return NULL;
	}
	a->i++;
	return a->argv[a->i];
}

int cli_int(struct cli_args *a, const char *opt, long min, long max, long *out)
{
	const char *v = cli_value(a, opt);
	char *end;
	long x;

	if (!v)
		return CLI_USAGE;
	errno = 0;
	x = strtol(v, &end, 10);
	if (errno || end == v || *end)
		return cli_usage_error(a, "%s: '%s' is not an integer", opt, v);
	if (x < min || x > max)
		return cli_usage_error(a, "%s: %ld is out of range [%ld, %ld]", opt, x, min, max);
	*out = x;
	return 0;
}

int cli_float(struct cli_args *a, const char *opt, double min, double max, double *out)
{
	const char *v = cli_value(a, opt);
	char *end;
	double x;

	if (!v)
		return CLI_USAGE;
	errno = 0;
	x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x))
		return cli_usage_error(a, "%s: '%s' is not a number", opt, v);
	if (x < min || x > max)
		return cli_usage_error(a, "%s: %g is out of range [%g, %g]", opt, x, min, max);
	*out = x;
	return 0;
}

int cli_u64(struct cli_args *a, const char *opt, uint64_t *out)
{
	const char *v = cli_value(a, opt);
	char *end;
	unsigned long long x;

	if (!v)
		return CLI_USAGE;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || end == v || *end || *v == '-')
		return cli_usage_error(a, "%s: '%s' is not a non-negative integer", opt, v);
	*out = x;
	return 0;
}

int cli_parse_size(const char *s, size_t *out)
{
	char *end;
	double x;
	double mul = 1;

	errno = 0;
	x = strtod(s, &end);
	if (errno || end == s || !(x >= 0) || !isfinite(x))
		return -1;
	if (*end) {
		switch (*end) {
		case 'k': case 'K': mul = 1024.0; break;
		case 'm': case 'M': mul = 1024.0 * 1024; break;
		case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
		case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
		case 'b': case 'B': mul = 1; break;
		default: return -1;
		}
		end++;
		if (*end && strcasecmp(end, "iB") && strcasecmp(end, "B"))
			return -1;
	}
	x *= mul;
	if (x >= 18446744073709551615.0)
		return -1;
	*out = (size_t)x;
	return 0;
}

int cli_size(struct cli_args *a, const char *opt, size_t *out)
{
	const char *v = cli_value(a, opt);

	if (!v)
		return CLI_USAGE;
	if (cli_parse_size(v, out))
		return cli_usage_error(a, "%s: '%s' is not a size (e.g. 4096, 512K, 256M, 1G)", opt, v);
	return 0;
}

const char *cli_fmt_bytes(char *buf, size_t cap, double b)
{
	if (b >= 1024.0 * 1024 * 1024)
		snprintf(buf, cap, "%.2f GiB", b / (1024.0 * 1024 * 1024));
	else if (b >= 1024.0 * 1024)
		snprintf(buf, cap, "%.2f MiB", b / (1024.0 * 1024));
	else if (b >= 1024.0)
		snprintf(buf, cap, "%.2f KiB", b / 1024.0);
	else
		snprintf(buf, cap, "%.0f B", b);
	return buf;
}

const char *cli_bundled_model(void)
{
	static char buf[PATH_MAX + 64];
	static const char *rel[] = { "/../models/stories260K.gguf", "/models/stories260K.gguf",
				     "/../share/tierkv/stories260K.gguf" };
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);

	if (n > 0) {
		char *slash;

		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
		for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
			snprintf(buf, sizeof buf, "%s%s", exe, rel[i]);
			if (access(buf, R_OK) == 0)
				return buf;
		}
	}
#ifdef TKV_BUNDLED_MODEL
	if (access(TKV_BUNDLED_MODEL, R_OK) == 0)
		return TKV_BUNDLED_MODEL;
#endif
	return NULL;
}

char *cli_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0;

	if (!f) {
		fprintf(stderr, "tierkv: cannot open %s: %s\n", path, strerror(errno));
		return NULL;
	}
	for (;;) {
		size_t got;

		if (cap - n < 4096) {
			char *nb;

			cap = cap ? cap * 2 : 65536;
			nb = realloc(buf, cap + 1);
			if (!nb) {
				fprintf(stderr, "tierkv: out of memory reading %s\n", path);
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		fprintf(stderr, "tierkv: cannot read %s: %s\n", path, strerror(errno));
		free(buf);
		fclose(f);
		return NULL;
	}
	fclose(f);
	buf[n] = 0;
	*len = n;
	return buf;
}

size_t cli_peak_rss(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return (size_t)ru.ru_maxrss * 1024;
}

double cli_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cli_sampler_option(struct cli_args *a, struct tkv_sampler_params *sp, int *seed_set, int *handled)
{
	const char *s = a->argv[a->i];
	double d;
	long x;
	int rc = 0;

	*handled = 1;
	if (!strcmp(s, "--temp")) {
		if (!(rc = cli_float(a, s, 0, 100, &d)))
			sp->temp = (float)d;
	} else if (!strcmp(s, "--top-k")) {
		if (!(rc = cli_int(a, s, 0, 1L << 30, &x)))
			sp->top_k = (int32_t)x;
	} else if (!strcmp(s, "--top-p")) {
		if (!(rc = cli_float(a, s, 1e-9, 1, &d)))
			sp->top_p = (float)d;
	} else if (!strcmp(s, "--min-p")) {
		if (!(rc = cli_float(a, s, 0, 1, &d)))
			sp->min_p = (float)d;
	} else if (!strcmp(s, "--repeat-penalty")) {
		if (!(rc = cli_float(a, s, 1e-3, 100, &d)))
			sp->repeat_penalty = (float)d;
	} else if (!strcmp(s, "--repeat-last-n")) {
		if (!(rc = cli_int(a, s, 0, 1L << 20, &x)))
			sp->repeat_last_n = (int32_t)x;
	} else if (!strcmp(s, "-s") || !strcmp(s, "--seed")) {
		if (!(rc = cli_u64(a, s, &sp->seed)))
			*seed_set = 1;
	} else {
		*handled = 0;
	}
	return rc;
}

uint64_t cli_random_seed(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
}

int cli_model_path(const char *cmd, const char **path)
{
	if (!*path && !(*path = cli_bundled_model())) {
		fprintf(stderr, "tierkv %s: no -m given and the bundled model was not found\n", cmd);
		return CLI_USAGE;
	}
	return CLI_OK;
}

void cli_print_error(const char *cmd, int st, const struct tkv_error *err)
{
	fprintf(stderr, "tierkv %s: %s\n", cmd, err->msg[0] ? err->msg : tkv_status_str(st));
}

int cli_load_model(const char *cmd, const char *path, const struct tkv_engine_params *ep, struct tkv_model **out,
		   struct tkv_model_info *info)
{
	struct tkv_model_params mp = tkv_model_default_params();
	struct tkv_error err = { 0 };
	int st;

	if (ep)
		mp.n_threads = ep->n_threads; /* -t: the same threads copy the weights */
	if ((st = tkv_model_load(out, path, &mp, &err))) {
		cli_print_error(cmd, st, &err);
		return CLI_ERR;
	}
	tkv_model_get_info(*out, info);
	return ep ? cli_check_layer_plan(cmd, ep, info) : CLI_OK;
}

int cli_table_option(struct cli_args *a, const struct cli_opt *t, size_t n, void *o, int *handled)
{
	const char *s = a->argv[a->i];
	char *field;
	uint64_t u;
	long x;
	int rc;

	for (size_t i = 0; i < n; i++) {
		if (!(t[i].shrt && !strcmp(s, t[i].shrt)) && strcmp(s, t[i].lng))
			continue;
		*handled = 1;
		field = (char *)o + t[i].off;
		switch (t[i].kind) {
		case CLI_OPT_HELP:
			return CLI_HELP;
		case CLI_OPT_FLAG:
			*(int *)(void *)field = 1;
			return 0;
		case CLI_OPT_STR:
			return (*(const char **)(void *)field = cli_value(a, s)) ? 0 : CLI_USAGE;
		case CLI_OPT_LONG:
			if ((rc = cli_int(a, s, (long)t[i].min, (long)t[i].max, &x)))
				return rc;
			*(long *)(void *)field = x;
			return 0;
		case CLI_OPT_INT:
			if ((rc = cli_int(a, s, (long)t[i].min, (long)t[i].max, &x)))
				return rc;
			*(int *)(void *)field = (int)x;
			return 0;
		case CLI_OPT_DOUBLE:
			return cli_float(a, s, t[i].min, t[i].max, (double *)(void *)field);
		case CLI_OPT_U64:
			if ((rc = cli_u64(a, s, &u)))
				return rc;
			*(uint64_t *)(void *)field = u;
			return 0;
		}
	}
	*handled = 0;
	return 0;
}

int cli_parse_options(struct cli_args *a, const struct cli_opt *t, size_t n, void *o,
		      int (*more)(struct cli_args *a, void *o))
{
	int rc, handled;

	for (; a->i < a->argc; a->i++)
		if ((rc = cli_table_option(a, t, n, o, &handled)) || (!handled && (rc = more(a, o))))
			return rc;
	return 0;
}

/* rc, or "unknown option" when no parser took the option. */
static int or_unknown(struct cli_args *a, int rc, int handled)
{
	return rc || handled ? rc : cli_usage_error(a, "unknown option '%s'", a->argv[a->i]);
}

int cli_engine_or_unknown(struct cli_args *a, struct tkv_engine_params *ep, int *stats)
{
	int handled = 0, rc = cli_engine_option(a, ep, stats, &handled);

	return or_unknown(a, rc, handled);
}

int cli_kv_or_unknown(struct cli_args *a, struct tkv_engine_params *ep, int *stats)
{
	int handled = 0, rc = cli_kv_option(a, ep, stats, &handled);

	return or_unknown(a, rc, handled);
}

int cli_parse_end(int st, void (*help)(void))
{
	if (st != CLI_HELP)
		return st;
	help();
	return CLI_OK;
}
