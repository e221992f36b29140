/* plot.h - the SVG plots of `tierkv eval`: a measure against the KV bytes
 * ratio (log2 axis), one line per cache policy.
 *
 * Two y axes: symmetric-logarithmic percentages, sign(y) log10(1 + |y|), so
 * +0.5% and +500% both show (delta perplexity), or a linear 0-100% axis
 * (retrieval accuracy). Points of a policy are joined in order of their
 * ratio; each has a tooltip "policy @ budget: ratio R, Y". */
#ifndef TKV_CLI_PLOT_H
#define TKV_CLI_PLOT_H

#include <stddef.h>

#include "tierkv.h"

enum cli_plot_axis {
	CLI_PLOT_SYMLOG_PCT = 0,  /* signed percentages, symmetric log */
	CLI_PLOT_PCT = 1,         /* 0..100 %, linear */
};

struct cli_plot_point {
	enum tkv_policy policy;   /* its line, colour and legend entry */
	double budget;            /* for the tooltip */
	double ratio;             /* x: KV bytes / full f16 cache, > 0 */
	double y;                 /* in percent */
};

struct cli_plot {
	const char *cmd;          /* "eval", for error messages */
	const char *title;
	const char *y_label;
	const char *y_tip;        /* printf format of y in tooltips, e.g. "%+.2f%%" */
	enum cli_plot_axis axis;
};

/* Writes the SVG of pts[0..n) (borrowed; points that are not finite, or with
 * a ratio <= 0, are left out) to path. 0, or -1 after a message on stderr. */
int cli_plot_write(const char *path, const struct cli_plot *p, const struct cli_plot_point *pts, size_t n);

#endif
