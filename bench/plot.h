/* `loom bench --plot`: median times per workload and mode (Loom's modes
 * and the peers' from their JSON lines) drawn as an SVG bar chart. */
#ifndef LOOM_BENCH_PLOT_H
#define LOOM_BENCH_PLOT_H

#include "core/ctx.h"

typedef struct loom_bench_plot_bar {
  char workload[64], series[48];
  double seconds;
} loom_bench_plot_bar;

typedef struct loom_bench_plot loom_bench_plot;

loom_bench_plot *loom_bench_plot_new(void);
void loom_bench_plot_free(loom_bench_plot *p);
int32_t loom_bench_plot_count(const loom_bench_plot *p);
/* Adds (or replaces) one bar; false when out of memory or seconds is not
 * a positive number. */
bool loom_bench_plot_add(loom_bench_plot *p, const char *workload, const char *series,
                         double seconds);
/* Adds every timed line of a JSON-lines file (`loom bench --json`, or
 * bench/peers): "workload", "mode", "median_s". A line that is not JSON
 * is an error naming PATH:LINE; a file with no timed line too. */
loom_status loom_bench_plot_read(loom_ctx *ctx, loom_bench_plot *p, const char *path);
/* The chart as SVG text (free() it); NULL when empty or out of memory. */
char *loom_bench_plot_svg(const loom_bench_plot *p, const char *title);

#endif
