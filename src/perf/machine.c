/*
 * Machine facts for the cost models: thread count, cache sizes from sysfs,
 * default rates (perf/measure.c replaces them with measured ones), and the
 * fixed cost of one kernel launch, measured here because it is cheap.
 */
#include "perf/machine.h"
#include "core/clock.h"
#include "perf/profile.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Conservative defaults: a small two-core machine. */
#define DEFAULT_L1D (32 * 1024)
#define DEFAULT_L2 (1024 * 1024)
#define DEFAULT_LLC (8 * 1024 * 1024)
#define DEFAULT_TRIAD_GBPS 10.0
#define DEFAULT_SGEMM_GFLOPS 100.0
#define DEFAULT_LAUNCH_S 5e-6
/* Whole-row blocks of 16 .. 256 rows against the GEMM's own tiles, as
 * loom_gemm_rows_curve measured them on this project's machine
 * (docs/PERFORMANCE.md, "The GEMM library"). */
static const double default_rows_eff[LOOM_GEMM_ROWS_POINTS] = {0.8, 0.9, 0.95, 1.0, 1.0};

/* Reads a small sysfs file into buf (NUL-terminated, newline stripped). */
static bool read_small(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t got = fread(buf, 1, n - 1, f);
  fclose(f);
  buf[got] = '\0';
  while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == ' '))
    buf[--got] = '\0';
  return got > 0;
}

/* "48K", "2048K", "8M", "1G" or a plain byte count; -1 if unreadable. */
static int64_t parse_size(const char *s) {
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (end == s || v <= 0) return -1;
  switch (*end) {
  case 'K':
  case 'k': return (int64_t)v << 10;
  case 'M':
  case 'm': return (int64_t)v << 20;
  case 'G':
  case 'g': return (int64_t)v << 30;
  case '\0': return (int64_t)v;
  default: return -1;
  }
}

/* Fills l1d/l2/llc from /sys/devices/system/cpu/cpu0/cache/index*; the
 * largest level found is the last-level cache. */
static void read_caches(loom_machine *m) {
  int32_t top_level = 0;
  for (int i = 0; i < 16; i++) {
    char path[128], level[32], type[32], size[32];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    if (!read_small(path, level, sizeof level)) break;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
    if (!read_small(path, type, sizeof type)) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    if (!read_small(path, size, sizeof size)) continue;
    if (strcmp(type, "Instruction") == 0) continue;
    int32_t lv = atoi(level);
    int64_t bytes = parse_size(size);
    if (bytes <= 0) continue;
    if (lv == 1)
      m->l1d_bytes = bytes;
    else if (lv == 2)
      m->l2_bytes = bytes;
    if (lv >= 2 && lv >= top_level) {
      top_level = lv;
      m->llc_bytes = bytes;
    }
  }
}

/* The fork/join of an empty parallel loop over the threads: what every
 * generated kernel pays once. The minimum over a few hundred runs (at
 * most ~20 ms in all): on a shared, busy machine a run waits for a core
 * now and then, and the floor is the cost itself. */
static double measure_launch(int32_t threads) {
  enum { RUNS = 400 };
  volatile int32_t sink = 0;
  for (int warm = 0; warm < 3; warm++) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int32_t i = 0; i < threads; i++)
      sink += 0;
  }
  double best = 1.0, start = loom_now_s();
  for (int r = 0; r < RUNS && loom_now_s() - start < 20e-3; r++) {
    double t0 = loom_now_s();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int32_t i = 0; i < threads; i++)
      sink += 0;
    double t = loom_now_s() - t0;
    if (t < best) best = t;
  }
  (void)sink;
  /* Bounds keep the model sane with a coarse clock or a starved machine. */
  return best < 2e-7 ? 2e-7 : best > 1e-4 ? 1e-4 : best;
}

/* Rounds to the 1-2-5 series: plans read this number, and a plan that
 * flipped with timer noise would recompile and change results' rounding. */
static double quantize(double s) {
  double decade = 1e-9;
  while (decade * 10 <= s)
    decade *= 10;
  double x = s / decade; /* in [1, 10) */
  double q = x < 1.4 ? 1 : x < 3.2 ? 2 : x < 7.1 ? 5 : 10;
  return q * decade;
}

/* Rates are kept to two significant digits: a plan reads them, and the
 * best rate seen may only move the plan when it moves by a few percent. */
static double two_digits(double x) {
  if (!(x > 0)) return 0;
  double scale = pow(10.0, floor(log10(x)) - 1);
  return round(x / scale) * scale;
}

/* The machine's measured rates, if the profile keeps both. */
static void read_kept_rates(loom_machine *m) {
  double triad = 0, sgemm = 0;
  if (loom_profile_get("triad_gbps", &triad) && triad >= 0.1 && triad <= 1e5 &&
      loom_profile_get("sgemm_gflops", &sgemm) && sgemm >= 0.1 && sgemm <= 1e7) {
    m->triad_gbps = triad;
    m->sgemm_gflops = sgemm;
    m->measured = true;
  }
}

void loom_machine_default(loom_machine *m) {
  memset(m, 0, sizeof *m);
  m->threads = 2;
  m->cores = 2;
  m->l1d_bytes = DEFAULT_L1D;
  m->l2_bytes = DEFAULT_L2;
  m->llc_bytes = DEFAULT_LLC;
  m->triad_gbps = DEFAULT_TRIAD_GBPS;
  m->sgemm_gflops = DEFAULT_SGEMM_GFLOPS;
  m->kernel_launch_s = DEFAULT_LAUNCH_S;
  memcpy(m->gemm_rows_eff, default_rows_eff, sizeof default_rows_eff);
  m->comm = loom_comm_model_default();
  m->measured = false;
}

void loom_machine_detect(loom_ctx *ctx, loom_machine *m) {
  loom_machine_default(m);
  m->threads = loom_ctx_resolved_threads(ctx);
  if (m->threads < 1) m->threads = 1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  m->cores = cores > 0 ? (int32_t)cores : 1;
  read_caches(m);
  m->comm = loom_comm_model_kept("mpi");
  if (m->l2_bytes < m->l1d_bytes) m->l2_bytes = m->l1d_bytes;
  if (m->llc_bytes < m->l2_bytes) m->llc_bytes = m->l2_bytes;
  /* Measured with the cores, like the plans that read it; the
   * environment may pin it (reproducible plans on a noisy machine). */
  read_kept_rates(m);
  const char *env = getenv("LOOM_KERNEL_LAUNCH_US");
  double pinned = env ? strtod(env, NULL) : 0.0;
  if (pinned > 0 && pinned < 1e6) {
    m->kernel_launch_s = pinned * 1e-6;
    return;
  }
  /* Measured once per machine and kept in the cache directory: a plan must
   * not change from one process to the next with timer noise. */
  double kept = 0;
  if (loom_profile_get("kernel_launch_s", &kept) && kept >= 1e-9 && kept <= 1e-3) {
    m->kernel_launch_s = kept;
    return;
  }
  m->kernel_launch_s = quantize(measure_launch(m->cores));
  loom_profile_put("kernel_launch_s", m->kernel_launch_s);
}

double loom_machine_gemm_rows_eff(const loom_machine *m, int64_t rows) {
  const double *e = m->gemm_rows_eff;
  if (rows <= LOOM_GEMM_ROWS_MIN) return e[0];
  double x = log2((double)rows / LOOM_GEMM_ROWS_MIN); /* 0 .. POINTS - 1 */
  if (x >= LOOM_GEMM_ROWS_POINTS - 1) return e[LOOM_GEMM_ROWS_POINTS - 1];
  int32_t i = (int32_t)x;
  double f = x - i;
  return e[i] + f * (e[i + 1] - e[i]);
}

double loom_machine_measure_launch(const loom_machine *m) {
  return quantize(measure_launch(m->cores > 0 ? m->cores : 1));
}

void loom_machine_keep_best(const loom_machine *m, double launch_s) {
  double kept = 0;
  /* rates taken with fewer threads than cores are not the machine's */
  if (m->measured && m->threads == m->cores) {
    double triad = two_digits(m->triad_gbps), sgemm = two_digits(m->sgemm_gflops);
    if (triad > 0 && !(loom_profile_get("triad_gbps", &kept) && kept >= triad))
      loom_profile_put("triad_gbps", triad);
    if (sgemm > 0 && !(loom_profile_get("sgemm_gflops", &kept) && kept >= sgemm))
      loom_profile_put("sgemm_gflops", sgemm);
  }
  if (launch_s >= 1e-9 && launch_s <= 1e-3 &&
      !(loom_profile_get("kernel_launch_s", &kept) && kept <= launch_s))
    loom_profile_put("kernel_launch_s", launch_s);
}
