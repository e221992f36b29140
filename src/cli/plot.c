/* plot.c - SVG plots of a measure against the KV bytes ratio, one line per
 * policy (see plot.h). */
#include "cli/plot.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLOT_W 760
#define PLOT_H 480
#define PLOT_L 72     /* margins (px) */
#define PLOT_R 170
#define PLOT_T 44
#define PLOT_B 56

static const char *const plot_colors[TKV_POLICY_COUNT] = {
	"#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
	"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
};

static double symlog(double y)
{
	return y < 0 ? -log10(1.0 - y) : log10(1.0 + y);
}

struct plot_frame {
	enum cli_plot_axis axis;
	double x0, x1, y0, y1;   /* data range: log2(ratio), and y on the axis's scale */
};

/* y on the axis's scale */
static double yscale(const struct plot_frame *fr, double y)
{
	return fr->axis == CLI_PLOT_SYMLOG_PCT ? symlog(y) : y;
}

static double px(const struct plot_frame *fr, double ratio)
{
	return PLOT_L + (log2(ratio) - fr->x0) / (fr->x1 - fr->x0) * (PLOT_W - PLOT_L - PLOT_R);
}

static double py(const struct plot_frame *fr, double y)
{
	return PLOT_H - PLOT_B - (yscale(fr, y) - fr->y0) / (fr->y1 - fr->y0) * (PLOT_H - PLOT_T - PLOT_B);
}

static bool plottable(const struct cli_plot_point *p)
{
	return isfinite(p->ratio) && p->ratio > 0 && isfinite(p->y) && (int)p->policy >= 0 &&
	       p->policy < TKV_POLICY_COUNT;
}

/* The data range: whole powers of two across; up and down, half decades of
 * the symmetric log (so a small negative delta does not take a decade of
 * room) or 0-100%. */
static struct plot_frame frame(const struct cli_plot *p, const struct cli_plot_point *pts, size_t n)
{
	struct plot_frame fr = { p->axis, INFINITY, -INFINITY, 0.0, -INFINITY };

	for (size_t i = 0; i < n; i++) {
		if (!plottable(&pts[i]))
			continue;
		fr.x0 = fmin(fr.x0, floor(log2(pts[i].ratio)));
		fr.x1 = fmax(fr.x1, ceil(log2(pts[i].ratio)));
		fr.y0 = fmin(fr.y0, symlog(pts[i].y));
		fr.y1 = fmax(fr.y1, symlog(pts[i].y));
	}
	if (!isfinite(fr.x0)) {
		fr.x0 = -4;
		fr.x1 = 0;
	}
	if (fr.x1 - fr.x0 < 1)
		fr.x0 = fr.x1 - 1;
	if (p->axis == CLI_PLOT_PCT) {
		fr.y0 = 0.0;
		fr.y1 = 100.0;
	} else {
		fr.y0 = floor(2 * fr.y0) / 2;
		fr.y1 = fmax(ceil(2 * fr.y1) / 2, fr.y0 + 1);
	}
	return fr;
}

/* Horizontal grid lines and labels: 0 and +-1, 3, 10, 30, ... for the
 * symmetric log; every 20% for the linear axis. */
static void y_grid(FILE *f, const struct plot_frame *fr)
{
	if (fr->axis == CLI_PLOT_PCT) {
		for (int val = 0; val <= 100; val += 20) {
			double y = py(fr, val);

			fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\"/>\n", PLOT_L, y,
				PLOT_W - PLOT_R, y, val == 0 ? "#999" : "#ddd");
			fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%d%%</text>\n", PLOT_L - 6, y + 4, val);
		}
		return;
	}
	for (int j = -1; j <= 16; j++) {
		for (int sign = 1; sign >= -1; sign -= 2) {
			/* 0, 1, 3, 10, 30, ... */
			double val = j < 0 ? 0.0 : sign * pow(10, j / 2) * (j % 2 ? 3 : 1), y;

			if (symlog(val) < fr->y0 - 1e-9 || symlog(val) > fr->y1 + 1e-9 || (j < 0 && sign < 0))
				continue;
			y = py(fr, val);
			fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\"/>\n", PLOT_L, y,
				PLOT_W - PLOT_R, y, val == 0 ? "#999" : "#ddd");
			fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%+g%%</text>\n", PLOT_L - 6, y + 4,
				val);
		}
	}
}

/* One policy's polyline, markers and legend entry; pts its points (sorted
 * here by ratio). */
static void series(FILE *f, const struct cli_plot *p, const struct plot_frame *fr, enum tkv_policy pol,
		   const struct cli_plot_point **pts, size_t n, int n_leg)
{
	char tip[64];

	for (size_t i = 1; i < n; i++) /* insertion sort by ratio */
		for (size_t j = i; j > 0 && pts[j]->ratio < pts[j - 1]->ratio; j--) {
			const struct cli_plot_point *tmp = pts[j];

			pts[j] = pts[j - 1];
			pts[j - 1] = tmp;
		}
	fprintf(f, "<g stroke=\"%s\" fill=\"%s\">\n", plot_colors[pol], plot_colors[pol]);
	if (n > 1) {
		fprintf(f, "<polyline fill=\"none\" stroke-width=\"1.5\" points=\"");
		for (size_t i = 0; i < n; i++)
			fprintf(f, "%s%.1f,%.1f", i ? " " : "", px(fr, pts[i]->ratio), py(fr, pts[i]->y));
		fprintf(f, "\"/>\n");
	}
	for (size_t i = 0; i < n; i++) {
		snprintf(tip, sizeof tip, p->y_tip, pts[i]->y);
		fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\"><title>%s @ %g: ratio %.3f, %s</title>"
			"</circle>\n", px(fr, pts[i]->ratio), py(fr, pts[i]->y), tkv_policy_name(pol), pts[i]->budget,
			pts[i]->ratio, tip);
	}
	fprintf(f, "</g>\n");
	fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>"
		"<circle cx=\"%d\" cy=\"%d\" r=\"3.5\" fill=\"%s\"/>"
		"<text x=\"%d\" y=\"%d\">%s</text>\n",
		PLOT_W - PLOT_R + 14, PLOT_T + 8 + 18 * n_leg, PLOT_W - PLOT_R + 38, PLOT_T + 8 + 18 * n_leg,
		plot_colors[pol], PLOT_W - PLOT_R + 26, PLOT_T + 8 + 18 * n_leg, plot_colors[pol],
		PLOT_W - PLOT_R + 44, PLOT_T + 12 + 18 * n_leg, tkv_policy_name(pol));
}

int cli_plot_write(const char *path, const struct cli_plot *p, const struct cli_plot_point *pts, size_t n)
{
	struct plot_frame fr = frame(p, pts, n);
	const struct cli_plot_point **sel = malloc((n ? n : 1) * sizeof *sel);
	FILE *f = sel ? fopen(path, "w") : NULL;
	int n_leg = 0;

	if (!f) {
		fprintf(stderr, "tierkv %s: cannot create %s: %s\n", p->cmd, path, sel ? strerror(errno) : "out of memory");
		free(sel);
		return -1;
	}
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
		"font-family=\"sans-serif\" font-size=\"12\">\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
		"<text x=\"%d\" y=\"24\" font-size=\"15\">%s</text>\n",
		PLOT_W, PLOT_H, PLOT_W, PLOT_H, PLOT_L, p->title);
	/* grid and ticks: powers of two across */
	for (double e = fr.x0; e <= fr.x1 + 1e-9; e += 1) {
		double x = px(&fr, exp2(e));

		fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n", x, PLOT_T, x,
			PLOT_H - PLOT_B);
		if (e >= 0)
			fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, PLOT_H - PLOT_B + 16,
				exp2(e));
		else
			fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">1/%g</text>\n", x,
				PLOT_H - PLOT_B + 16, exp2(-e));
	}
	y_grid(f, &fr);
	fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", PLOT_L,
		PLOT_T, PLOT_W - PLOT_L - PLOT_R, PLOT_H - PLOT_T - PLOT_B);
	fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">KV bytes (peak) / full f16 cache (log scale)</text>\n",
		(PLOT_W - PLOT_R + PLOT_L) / 2, PLOT_H - 14);
	fprintf(f, "<text transform=\"translate(18 %d) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
		(PLOT_H - PLOT_B + PLOT_T) / 2, p->y_label);

	/* one polyline with markers per policy, points in order of ratio */
	for (int pol = 0; pol < TKV_POLICY_COUNT; pol++) {
		size_t k = 0;

		for (size_t i = 0; i < n; i++)
			if ((int)pts[i].policy == pol && plottable(&pts[i]))
				sel[k++] = &pts[i];
		if (k)
			series(f, p, &fr, (enum tkv_policy)pol, sel, k, n_leg++);
	}
	fprintf(f, "</svg>\n");
	free(sel);
	if (fclose(f)) {
		fprintf(stderr, "tierkv %s: cannot write %s: %s\n", p->cmd, path, strerror(errno));
		return -1;
	}
	return 0;
}
