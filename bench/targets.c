/*
 * The closing section of the table: issue 3's Targets, each with the
 * figure this run measured and whether it is met. Only what ran is
 * judged; the targets are stated for the full sizes, so a --size small
 * run says its verdicts are indicative only.
 */
#include "harness.h"

#include <string.h>

#define BW_TARGET 0.70
#define FUSED_SPEEDUP 1.5 /* stitch over loop, memory-bound workloads */
#define MODEL_SPEEDUP 1.2 /* stitch over loop, BERT layer and GPT-2 block */
#define COLD_COMPILE_S 10.0
#define WARM_COMPILE_S 0.2

static const loom_bench_row *find(const loom_bench_row *rows, int32_t n, const char *name) {
  for (int32_t i = 0; i < n; i++)
    if (rows[i].w && strcmp(rows[i].w->name, name) == 0) return &rows[i];
  return NULL;
}

/* The result of mode m of workload name if it ran, else NULL. */
static const loom_bench_result *ran(const loom_bench_row *rows, int32_t n, const char *name,
                                    loom_bench_mode m) {
  const loom_bench_row *row = find(rows, n, name);
  if (!row || !row->wanted[m] || row->r[m].outcome != LOOM_BENCH_RAN) return NULL;
  return &row->r[m];
}

static const char *verdict(bool met) { return met ? "met" : "NOT met"; }

static void speedup(FILE *f, const loom_bench_row *rows, int32_t n, const char *name,
                    double target) {
  const loom_bench_result *s = ran(rows, n, name, LOOM_BENCH_STITCH);
  const loom_bench_result *l = ran(rows, n, name, LOOM_BENCH_LOOP);
  if (!s || !l) return;
  double x = s->median_s > 0 ? l->median_s / s->median_s : 0.0;
  fprintf(f, "  %-26s stitch x%.2f vs loop (target x%.1f): %s\n", name, x, target,
          verdict(x >= target));
}

void loom_bench_print_targets(FILE *f, const loom_bench_row *rows, int32_t n,
                              const loom_bench_machine_info *mi, bool small) {
  fprintf(f, "\nTargets (issue 3; medians%s):\n",
          small ? "; stated for the full sizes, so with --size small only indicative" : "");
  fprintf(f,
          " stitch at >= %.0f%% of the memory roof at the workload's footprint (the\n"
          " machine's: %.1f GB/s), minimum bytes:\n",
          100.0 * BW_TARGET, mi->roof.roof_gbps);
  for (int32_t i = 0; i < n; i++) {
    const loom_bench_row *row = &rows[i];
    const loom_bench_result *s = row->w ? ran(rows, n, row->w->name, LOOM_BENCH_STITCH) : NULL;
    double roof = loom_bench_row_roof(row, mi);
    if (!s || !row->w->memory_bound || s->median_s <= 0 || roof <= 0) continue;
    double frac = (double)row->min_bytes / s->median_s / 1e9 / roof;
    fprintf(f, "  %-26s %5.1f%% of %.1f GB/s: %s%s\n", row->w->name, 100.0 * frac, roof,
            verdict(frac >= BW_TARGET),
            frac > 1.0 ? " (above the roof: a kernel beat every roof variant)" : "");
  }
  fprintf(f, " stitch faster than loop:\n");
  static const char *const fused[] = {"layernorm_fwd", "layernorm_bwd", "softmax_fwd",
                                      "softmax_bwd", "bias_dropout_residual_ln", "cross_entropy"};
  for (size_t k = 0; k < sizeof fused / sizeof fused[0]; k++)
    speedup(f, rows, n, fused[k], FUSED_SPEEDUP);
  speedup(f, rows, n, "bert_layer", MODEL_SPEEDUP);
  speedup(f, rows, n, "gpt2_block", MODEL_SPEEDUP);
  fprintf(f, " stitch kernels at most a third of the memory-intensive ops:\n");
  static const char *const models[] = {"bert_layer", "gpt2_block"};
  for (size_t k = 0; k < 2; k++) {
    const loom_bench_result *s = ran(rows, n, models[k], LOOM_BENCH_STITCH);
    if (!s) continue;
    int32_t kern = s->stats.n_kernels, mem = s->stats.n_memory_ops;
    fprintf(f, "  %-26s %d kernels for %d memory ops: %s\n", models[k], (int)kern, (int)mem,
            verdict(3 * kern <= mem));
  }
  const loom_bench_result *g = ran(rows, n, "gpt2_block", LOOM_BENCH_STITCH);
  if (g) {
    fprintf(f, " compiling the GPT-2 block's training graph (stitch):\n");
    if (g->stats.cache_hit)
      fprintf(f, "  %-26s cold: not measured (the kernel cache already held it; an empty\n"
                 "  %-26s $XDG_CACHE_HOME measures it)\n", "gpt2_block", "");
    else
      fprintf(f, "  %-26s cold %.2f s (target <= %.0f s): %s\n", "gpt2_block",
              g->stats.compile_seconds, COLD_COMPILE_S,
              verdict(g->stats.compile_seconds <= COLD_COMPILE_S));
    if (g->have_warm)
      fprintf(f, "  %-26s warm %.3f s, cache %s (target <= %.1f s): %s\n", "gpt2_block",
              g->warm_compile_s, g->warm_cache_hit ? "hit" : "miss", WARM_COMPILE_S,
              verdict(g->warm_cache_hit && g->warm_compile_s <= WARM_COMPILE_S));
  }
}
