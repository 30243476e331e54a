/*
 * The reports of `loom bench`: one JSON object per line (--json; the
 * schema of issue 3, point 8, plus extra fields) or a table for people.
 */
#include "harness.h"

#include <math.h>
#include <string.h>

/* A finite number or 0: JSON has no NaN or infinity. */
static double fin(double x) { return isfinite(x) ? x : 0.0; }

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c == '\n')
      fputs("\\n", f);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* ", "roof_gbps": F, ..." of a roof, keys prefixed by pre. */
static void json_roof(FILE *f, const loom_bench_roof *r, const char *pre) {
  fprintf(f, ", \"%sgbps\": %.4g, \"%svariant\": \"%s\", \"%sbytes\": %lld, \"%sruns\": %d", pre,
          fin(r->roof_gbps), pre, loom_bench_roof_variant_name(r->best), pre,
          (long long)r->footprint, pre, (int)r->runs);
  fprintf(f, ", \"%scounting\": \"each array read or written once, no write-allocate; best run\"",
          pre);
  for (int32_t v = 0; v < LOOM_ROOF_VARIANTS; v++)
    fprintf(f, ", \"%s%s_gbps\": %.4g, \"%s%s_moved_gbps\": %.4g", pre,
            loom_bench_roof_variant_name(v), fin(r->gbps[v]), pre,
            loom_bench_roof_variant_name(v), fin(r->moved_gbps[v]));
}

/* "triad 20.1, triad_stream 25.3, ..." */
static void table_roof(FILE *f, const loom_bench_roof *r) {
  for (int32_t v = 0; v < LOOM_ROOF_VARIANTS; v++)
    fprintf(f, "%s%s %.1f%s", v ? ", " : "", loom_bench_roof_variant_name(v), r->gbps[v],
            v == r->best ? "*" : "");
}

void loom_bench_print_machine(FILE *f, bool json, const loom_bench_machine_info *mi) {
  const loom_machine *m = &mi->m;
  if (json) {
    fprintf(f,
            "{\"machine\": {\"triad_gbps\": %.4g, \"sgemm_gflops\": %.4g, \"llc_bytes\": %lld, "
            "\"threads\": %d, \"l1d_bytes\": %lld, \"l2_bytes\": %lld, "
            "\"kernel_launch_s\": %.3g, \"triad_bytes\": %lld, "
            "\"triad_counting\": \"STREAM: 3 arrays x 4 bytes per element\", "
            "\"sgemm_n\": %lld, \"gemm_library\": \"oneDNN\", \"sgemm_onednn_gflops\": %.4g, "
            "\"measure_s\": %.3g, \"loadavg_1m\": %.3g",
            fin(m->triad_gbps), fin(m->sgemm_gflops), (long long)m->llc_bytes, (int)m->threads,
            (long long)m->l1d_bytes, (long long)m->l2_bytes, fin(m->kernel_launch_s),
            (long long)mi->triad_bytes, (long long)mi->gemm_n, fin(mi->sgemm_lib_gflops),
            fin(mi->measure_s), fin(mi->loadavg));
    fputs(", \"gemm_rows_eff\": [", f);
    for (int32_t i = 0; i < LOOM_GEMM_ROWS_POINTS; i++)
      fprintf(f, "%s%.3g", i ? ", " : "", fin(m->gemm_rows_eff[i]));
    fputs("]", f);
    json_roof(f, &mi->roof, "roof_");
    fputs("}}\n", f);
    return;
  }
  fprintf(f,
          "machine: %d threads, L1d %lld KiB, L2 %lld KiB, LLC %lld MiB, kernel launch %.2g us,\n"
          "         load average %.2f at the start\n"
          "         triad %.1f GB/s (3 arrays, %lld MiB in all; STREAM byte counting; median;\n"
          "         -O3, ordinary stores: the rate the cost models read)\n"
          "         sgemm %.1f GFLOP/s (%lld^3 through Loom's GEMM tiles on oneDNN; median);\n"
          "         oneDNN's own threaded sgemm: %.1f GFLOP/s\n",
          (int)m->threads, (long long)(m->l1d_bytes >> 10), (long long)(m->l2_bytes >> 10),
          (long long)(m->llc_bytes >> 20), m->kernel_launch_s * 1e6, mi->loadavg, m->triad_gbps,
          (long long)(mi->triad_bytes >> 20), m->sgemm_gflops, (long long)mi->gemm_n,
          mi->sgemm_lib_gflops);
  fprintf(f, "         GEMM on whole-row blocks against its own tiles (the epilogue rule's\n"
             "         curve, kept in the machine profile), rows: rate\n        ");
  for (int32_t i = 0; i < LOOM_GEMM_ROWS_POINTS; i++)
    fprintf(f, "%s %d: %.2f", i ? "," : "", LOOM_GEMM_ROWS_MIN << i, m->gemm_rows_eff[i]);
  fprintf(f, "\n");
  fprintf(f,
          "         memory roof %.1f GB/s (%s; kernels built like generated code, same\n"
          "         bytes; counted: each array once, no write-allocate; best of %d):\n"
          "         ",
          mi->roof.roof_gbps, loom_bench_roof_variant_name(mi->roof.best), (int)mi->roof.runs);
  table_roof(f, &mi->roof);
  fprintf(f, "\n");
}

void loom_bench_print_header(FILE *f, bool json) {
  if (json) return;
  fprintf(f,
          "\nGB/s counts the minimum bytes each workload must move; roof is that as a share\n"
          "of the memory roof measured at the workload's own footprint (its minimum bytes,\n"
          "in the same rounds as its runs); modeled MB is the fusion cost model's\n"
          "estimate; vs X = time(X) / time(this mode); err is the largest difference from\n"
          "the first mode run (relative to the largest magnitude).\n");
}

static void json_result(FILE *f, const loom_bench_row *row, const loom_bench_result *r,
                        const loom_bench_machine_info *mi) {
  fputs("{\"workload\": ", f);
  json_string(f, row->w->name);
  fputs(", \"mode\": ", f);
  json_string(f, loom_bench_mode_name(r->mode));
  fputs(", \"shape\": ", f);
  json_string(f, row->shape);
  if (r->outcome != LOOM_BENCH_RAN) {
    fputs(r->outcome == LOOM_BENCH_SKIPPED ? ", \"skipped\": " : ", \"error\": ", f);
    json_string(f, r->note);
    fputs("}\n", f);
    return;
  }
  const loom_session_stats *s = &r->stats;
  double gbps = r->median_s > 0 ? (double)row->min_bytes / r->median_s / 1e9 : 0.0;
  double roof = loom_bench_row_roof(row, mi);
  double frac = roof > 0 ? gbps / roof : 0.0;
  fprintf(f,
          ", \"ops\": %d, \"kernels\": %d, \"bytes\": %lld, \"median_s\": %.6g, \"gbps\": %.4g, "
          "\"bw_fraction\": %.4g",
          (int)s->n_primitive_ops, (int)s->n_kernels, (long long)s->modeled_bytes,
          fin(r->median_s), fin(gbps), fin(frac));
  fprintf(f,
          ", \"memory_ops\": %d, \"gemm_calls\": %d, \"gemm_epilogues\": %d, \"eager_nodes\": %d, "
          "\"min_bytes\": %lld, "
          "\"memory_bound\": %s, \"min_s\": %.6g, \"runs\": %d, \"peak_bytes\": %lld, "
          "\"compile_s\": %.4g, \"cache_hit\": %s",
          (int)s->n_memory_ops, (int)s->n_gemm, (int)s->n_epilogues, (int)s->n_eager,
          (long long)row->min_bytes,
          row->w->memory_bound ? "true" : "false", fin(r->min_s), (int)r->runs,
          (long long)s->peak_bytes, fin(s->compile_seconds), s->cache_hit ? "true" : "false");
  if (r->have_warm)
    fprintf(f, ", \"warm_compile_s\": %.4g, \"warm_cache_hit\": %s", fin(r->warm_compile_s),
            r->warm_cache_hit ? "true" : "false");
  if (row->gemm_flops > 0 && r->median_s > 0) {
    double gf = row->gemm_flops / r->median_s / 1e9;
    fprintf(f, ", \"gemm_flops\": %.6g, \"gflops\": %.4g, \"sgemm_fraction\": %.4g",
            row->gemm_flops, fin(gf), mi->m.sgemm_gflops > 0 ? fin(gf / mi->m.sgemm_gflops) : 0.0);
  }
  if (s->modeled_seconds > 0) fprintf(f, ", \"modeled_s\": %.6g", fin(s->modeled_seconds));
  if (s->n_frozen_inputs > 0)
    fprintf(f, ", \"frozen_inputs\": %d, \"packed\": %d, \"packed_bytes\": %lld",
            (int)s->n_frozen_inputs, (int)s->n_packed, (long long)s->packed_bytes);
  if (r->gemm_s > 0 && s->gemm_flops > 0) {
    double rate = s->gemm_flops / r->gemm_s / 1e9;
    fprintf(f, ", \"gemm_s\": %.6g, \"gemm_step_flops\": %.6g, \"gemm_gflops\": %.4g",
            fin(r->gemm_s), s->gemm_flops, fin(rate));
    if (mi->m.sgemm_gflops > 0)
      fprintf(f, ", \"gemm_sgemm_fraction\": %.4g, \"gemm_floor_s\": %.6g",
              fin(rate / mi->m.sgemm_gflops), fin(s->gemm_flops / (mi->m.sgemm_gflops * 1e9)));
  }
  for (int32_t m = LOOM_BENCH_EAGER; m < LOOM_BENCH_MODE_COUNT; m++)
    if (r->vs[m] > 0)
      fprintf(f, ", \"vs_%s\": %.4g", loom_bench_mode_name((loom_bench_mode)m), fin(r->vs[m]));
  if (r->checked) {
    fprintf(f, ", \"max_err\": %.3g, \"checked_against\": ", fin(r->max_err));
    json_string(f, loom_bench_mode_name(r->baseline));
  }
  if (mi->m.triad_gbps > 0) fprintf(f, ", \"triad_fraction\": %.4g", fin(gbps / mi->m.triad_gbps));
  if (row->have_roof) json_roof(f, &row->roof, "roof_");
  fputs("}\n", f);
}

/* "x1.23" or "-". */
static const char *ratio(char *buf, size_t n, double x) {
  if (x > 0)
    snprintf(buf, n, "x%.2f", x);
  else
    snprintf(buf, n, "-");
  return buf;
}

static void table_result(FILE *f, const loom_bench_row *row, const loom_bench_result *r,
                         const loom_bench_machine_info *mi) {
  const char *name = loom_bench_mode_name(r->mode);
  if (r->outcome == LOOM_BENCH_SKIPPED) {
    fprintf(f, "  %-10s skipped: %s\n", name, r->note);
    return;
  }
  if (r->outcome == LOOM_BENCH_FAILED) {
    fprintf(f, "  %-10s FAILED: %s\n", name, r->note);
    return;
  }
  const loom_session_stats *s = &r->stats;
  double gbps = r->median_s > 0 ? (double)row->min_bytes / r->median_s / 1e9 : 0.0;
  double roof = loom_bench_row_roof(row, mi);
  double frac = roof > 0 ? gbps / roof : 0.0;
  char gf[24] = "-", sg[24] = "-", v1[16], v2[16], v3[16], err[24] = "-";
  if (row->gemm_flops > 0 && r->median_s > 0) {
    double x = row->gemm_flops / r->median_s / 1e9;
    snprintf(gf, sizeof gf, "%.1f", x);
    if (mi->m.sgemm_gflops > 0) snprintf(sg, sizeof sg, "%.0f%%", 100.0 * x / mi->m.sgemm_gflops);
  }
  if (r->checked) snprintf(err, sizeof err, "%.1e", r->max_err);
  fprintf(f, "  %-10s %5d %5d %5d %4d %10.1f %10.3f %7.2f %6.0f%% %8s %6s %8s %8s %8s %8s\n",
          name, (int)s->n_primitive_ops, (int)s->n_kernels, (int)s->n_gemm, (int)s->n_epilogues,
          (double)s->modeled_bytes / 1e6, r->median_s * 1e3, gbps, 100.0 * frac, gf, sg,
          ratio(v1, sizeof v1, r->vs[LOOM_BENCH_EAGER]), ratio(v2, sizeof v2, r->vs[LOOM_BENCH_NONE]),
          ratio(v3, sizeof v3, r->vs[LOOM_BENCH_LOOP]), err);
}

static bool ran(const loom_bench_row *row, loom_bench_mode m) {
  return row->wanted[m] && row->r[m].outcome == LOOM_BENCH_RAN;
}

/* For a model workload: per mode, the GEMM steps' rate from the trace
 * (their flops over their time) against the measured sgemm rate; then the
 * loop and stitch plans' modeled and measured times, flagged when the
 * cost model's stitch plan ran slower than loop (in median and minimum
 * both: a machine's noise moves one without the other). */
static void table_gemm_and_model(FILE *f, const loom_bench_row *row,
                                 const loom_bench_machine_info *mi) {
  for (int32_t m = LOOM_BENCH_NONE; m < LOOM_BENCH_MODE_COUNT; m++) {
    const loom_bench_result *r = &row->r[m];
    if (!ran(row, (loom_bench_mode)m) || r->gemm_s <= 0 || r->stats.gemm_flops <= 0) continue;
    double rate = r->stats.gemm_flops / r->gemm_s / 1e9;
    fprintf(f, "  %-10s GEMM steps %.2f GFLOP in %.3f ms of %.3f: %.1f GFLOP/s",
            loom_bench_mode_name((loom_bench_mode)m), r->stats.gemm_flops / 1e9, r->gemm_s * 1e3,
            r->median_s * 1e3, rate);
    if (mi->m.sgemm_gflops > 0) {
      /* the floor: the GEMM FLOPs alone at the sgemm rate, which no plan
       * of these products beats */
      double floor_s = r->stats.gemm_flops / (mi->m.sgemm_gflops * 1e9);
      fprintf(f, ", %.0f%% of sgemm; at the sgemm rate they alone take %.3f ms (%.0f%% of the run)",
              100.0 * rate / mi->m.sgemm_gflops, floor_s * 1e3, 100.0 * floor_s / r->median_s);
    }
    fprintf(f, "\n");
  }
  if (ran(row, LOOM_BENCH_FROZEN)) {
    const loom_bench_result *r = &row->r[LOOM_BENCH_FROZEN];
    fprintf(f, "  frozen     %d params frozen, %d operands packed (%.1f MB)", (int)r->stats.n_frozen_inputs,
            (int)r->stats.n_packed, (double)r->stats.packed_bytes / 1e6);
    if (ran(row, LOOM_BENCH_STITCH))
      fprintf(f, ": x%.3f of stitch", row->r[LOOM_BENCH_STITCH].median_s / r->median_s);
    fprintf(f, "\n");
  }
  if (!ran(row, LOOM_BENCH_LOOP) || !ran(row, LOOM_BENCH_STITCH)) return;
  const loom_bench_result *lp = &row->r[LOOM_BENCH_LOOP], *sp = &row->r[LOOM_BENCH_STITCH];
  fprintf(f, "  model      loop %.3f ms (measured %.3f), stitch %.3f ms (measured %.3f)",
          lp->stats.modeled_seconds * 1e3, lp->median_s * 1e3, sp->stats.modeled_seconds * 1e3,
          sp->median_s * 1e3);
  /* the same plan (as many kernels, epilogues and GEMMs, the same
   * modeled bytes and time): a difference is the machine's noise; a
   * slower median with a faster minimum is within the runs' spread */
  const loom_session_stats *ls = &lp->stats, *ss = &sp->stats;
  bool same = ls->n_kernels == ss->n_kernels && ls->n_epilogues == ss->n_epilogues &&
              ls->n_gemm == ss->n_gemm && ls->modeled_bytes == ss->modeled_bytes &&
              ls->modeled_seconds == ss->modeled_seconds;
  if (same)
    fprintf(f, ": the same plan as loop");
  else if (sp->median_s > lp->median_s && sp->min_s > lp->min_s)
    fprintf(f, ": STITCH SLOWER THAN LOOP (x%.2f)%s", lp->median_s / sp->median_s,
            ss->modeled_seconds <= ls->modeled_seconds ? ", not as modeled" : "");
  else if (sp->median_s > lp->median_s)
    fprintf(f, ": stitch's median x%.2f of loop's, its minimum x%.2f: within the runs' spread",
            lp->median_s / sp->median_s, lp->min_s / sp->min_s);
  fprintf(f, "\n");
}

void loom_bench_print_row(FILE *f, bool json, const loom_bench_row *row,
                          const loom_bench_machine_info *mi) {
  if (!json) {
    fprintf(f, "\n%s %s: %s; min bytes %s = %.1f MB\n", row->w->name, row->shape, row->w->what,
            row->w->bytes_rule, (double)row->min_bytes / 1e6);
    if (row->have_roof) {
      fprintf(f, "  roof at this footprint %.1f GB/s (", row->roof.roof_gbps);
      table_roof(f, &row->roof);
      fprintf(f, ")\n");
    }
    fprintf(f, "  %-10s %5s %5s %5s %4s %10s %10s %7s %7s %8s %6s %8s %8s %8s %8s\n", "mode",
            "ops", "kern", "gemm", "epi", "modeled MB", "median ms", "GB/s", "roof", "GFLOP/s", "sgemm",
            "vs eager", "vs none", "vs loop", "err");
  }
  for (int32_t m = 0; m < LOOM_BENCH_MODE_COUNT; m++) {
    if (!row->wanted[m]) continue;
    if (json)
      json_result(f, row, &row->r[m], mi);
    else
      table_result(f, row, &row->r[m], mi);
  }
  if (!json && row->gemm_flops > 0) table_gemm_and_model(f, row, mi);
}
