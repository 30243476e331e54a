/*
 * The memory roof of `loom bench` (docs/PERFORMANCE.md, "The memory
 * roof"): what the best memory-bound kernel on this machine can reach,
 * measured with kernels built exactly like the generated ones: the same
 * prelude (loom_codegen_c_prelude, whose lm_stream_f32 the generated
 * kernels' streamed stores call), the same chunks of LOOM_CODEGEN_CHUNK
 * elements, and the same JIT path and flags (runtime/jit.h: -O3
 * -march=native ...), so the roof and the kernels cannot drift apart.
 *
 * Four variants: triad a = b + 3 c and copy a = b, each with ordinary
 * stores (which make the CPU read every output line before writing it:
 * the write-allocate) and with streaming stores (which do not). Bytes are
 * counted as the workloads count their minimum bytes: each array read or
 * written once, no write-allocate (triad 12 bytes per element, copy 8).
 * The roof is the best variant: the largest counted GB/s, each variant
 * timed by its best run (STREAM's rule: noise only ever slows a run).
 */
#include "harness.h"
#include "core/clock.h"

#include "codegen/c_codegen.h"
#include "runtime/jit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const variant_names[LOOM_ROOF_VARIANTS] = {"triad", "triad_stream", "copy",
                                                              "copy_stream"};

const char *loom_bench_roof_variant_name(int32_t v) {
  return v >= 0 && v < LOOM_ROOF_VARIANTS ? variant_names[v] : "?";
}

/* Arrays read and written per element, and the array the plain-store
 * variants read again for ownership. */
static int32_t arrays_counted(int32_t v) { return v < 2 ? 3 : 2; }
static bool streams(int32_t v) { return v == 1 || v == 3; }

typedef void (*roof_fn)(float *a, const float *b, const float *c, int64_t n, int32_t nt);

struct loom_bench_roof_kit {
  loom_jit_module *jit;
  roof_fn fill, fn[LOOM_ROOF_VARIANTS];
};

/* The kernels' C, after the generated code's prelude. One OpenMP loop of
 * chunks, static schedule (first touch by fill puts pages where the same
 * chunks run); a streamed chunk is computed into an L1 buffer and written
 * by lm_stream_f32, then every thread fences, as generated parts do. */
static const char roof_source[] =
    "#define ROOF_CH %d\n"
    "#define ROOF_LOOP(BODY) \\\n"
    "  _Pragma(\"omp parallel num_threads(nt)\") { \\\n"
    "    _Pragma(\"omp for schedule(static)\") \\\n"
    "    for (int64_t c0 = 0; c0 < n; c0 += ROOF_CH) { \\\n"
    "      const int64_t c1 = c0 + ROOF_CH < n ? c0 + ROOF_CH : n; \\\n"
    "      BODY \\\n"
    "    } \\\n"
    "    lm_sfence(); \\\n"
    "  }\n"
    "void roof_fill(float *restrict a, const float *restrict b0, const float *restrict c0_, "
    "int64_t n, int32_t nt) {\n"
    "  float *b = (float *)b0, *c = (float *)c0_;\n"
    "  ROOF_LOOP(for (int64_t i = c0; i < c1; i++) { a[i] = 0.0f; b[i] = 1.0f; c[i] = 2.0f; })\n"
    "}\n"
    "void roof_triad(float *restrict a, const float *restrict b, const float *restrict c, "
    "int64_t n, int32_t nt) {\n"
    "  ROOF_LOOP(for (int64_t i = c0; i < c1; i++) a[i] = b[i] + 3.0f * c[i];)\n"
    "}\n"
    "void roof_triad_stream(float *restrict a, const float *restrict b, const float *restrict c, "
    "int64_t n, int32_t nt) {\n"
    "  ROOF_LOOP(float so[ROOF_CH] __attribute__((aligned(64))); \\\n"
    "            for (int64_t i = c0; i < c1; i++) so[i - c0] = b[i] + 3.0f * c[i]; \\\n"
    "            lm_stream_f32(&a[c0], so, c1 - c0);)\n"
    "}\n"
    "void roof_copy(float *restrict a, const float *restrict b, const float *restrict c, "
    "int64_t n, int32_t nt) {\n"
    "  (void)c;\n"
    "  ROOF_LOOP(for (int64_t i = c0; i < c1; i++) a[i] = b[i];)\n"
    "}\n"
    "void roof_copy_stream(float *restrict a, const float *restrict b, const float *restrict c, "
    "int64_t n, int32_t nt) {\n"
    "  (void)c;\n"
    "  ROOF_LOOP(lm_stream_f32(&a[c0], &b[c0], c1 - c0);)\n"
    "}\n";

loom_status loom_bench_roof_load(loom_ctx *ctx, loom_bench_roof_kit **out) {
  *out = NULL;
  char *prelude = NULL;
  LOOM_TRY(loom_codegen_c_prelude(ctx, &prelude));
  size_t n = strlen(prelude) + sizeof roof_source + 32;
  char *src = loom_malloc(ctx, n);
  loom_bench_roof_kit *kit = loom_calloc(ctx, 1, sizeof *kit);
  loom_status st = src && kit ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st) {
    int w = snprintf(src, n, "%s", prelude);
    snprintf(src + w, n - (size_t)w, roof_source, LOOM_CODEGEN_CHUNK);
    st = loom_jit_load(ctx, src, &kit->jit, NULL);
  }
  static const char *const syms[LOOM_ROOF_VARIANTS] = {"roof_triad", "roof_triad_stream",
                                                       "roof_copy", "roof_copy_stream"};
  for (int32_t v = -1; !st && v < LOOM_ROOF_VARIANTS; v++) {
    void *sym = loom_jit_symbol(kit->jit, v < 0 ? "roof_fill" : syms[v]);
    if (!sym) {
      st = loom_error(ctx, LOOM_STATUS_INTERNAL, "bench: the roof module lacks %s",
                      v < 0 ? "roof_fill" : syms[v]);
      break;
    }
    memcpy(v < 0 ? &kit->fill : &kit->fn[v], &sym, sizeof sym); /* POSIX: dlsym's pointer */
  }
  free(prelude);
  free(src);
  if (st) {
    loom_error_prefix(ctx, "bench: building the memory roof's kernels");
    loom_bench_roof_free(kit);
    return st;
  }
  *out = kit;
  return LOOM_STATUS_OK;
}

void loom_bench_roof_free(loom_bench_roof_kit *kit) {
  if (!kit) return;
  loom_jit_free(kit->jit);
  free(kit);
}

/* Elements per array of variant v at footprint bytes (every array it
 * counts, together). */
static int64_t elems(int32_t v, int64_t footprint) {
  int64_t n = footprint / (4 * arrays_counted(v));
  return n < 1024 ? 1024 : n;
}

loom_status loom_bench_roof_begin(loom_ctx *ctx, const loom_bench_roof_kit *kit, int32_t threads,
                                  int64_t footprint, int32_t runs, loom_bench_roof_run *r) {
  memset(r, 0, sizeof *r);
  r->kit = kit;
  r->threads = threads < 1 ? 1 : threads;
  r->footprint = footprint;
  r->runs = runs < 1 ? 1 : runs;
  r->n_max = elems(2, footprint); /* copy's arrays are the longest */
  size_t bytes = ((size_t)r->n_max * sizeof(float) + 63) / 64 * 64;
  r->a = aligned_alloc(64, bytes);
  r->b = aligned_alloc(64, bytes);
  r->c = aligned_alloc(64, bytes);
  r->t = loom_calloc(ctx, (size_t)r->runs * LOOM_ROOF_VARIANTS, sizeof *r->t);
  if (!r->a || !r->b || !r->c || !r->t) {
    loom_bench_roof_end(r, NULL);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY,
                      "bench: cannot allocate the roof's arrays (%lld bytes)",
                      (long long)(3 * bytes));
  }
  kit->fill(r->a, r->b, r->c, r->n_max, r->threads);
  /* warm-up: page tables, the thread pool; and a check of every variant */
  for (int32_t v = 0; v < LOOM_ROOF_VARIANTS; v++) {
    int64_t n = elems(v, footprint);
    kit->fn[v](r->a, r->b, r->c, n, r->threads);
    float want = v < 2 ? 7.0f : 1.0f;
    if (r->a[0] != want || r->a[n / 2] != want || r->a[n - 1] != want) {
      loom_bench_roof_end(r, NULL);
      return loom_error(ctx, LOOM_STATUS_INTERNAL, "bench: the roof's %s computed a wrong value",
                        variant_names[v]);
    }
  }
  return LOOM_STATUS_OK;
}

void loom_bench_roof_round(loom_bench_roof_run *r, int32_t k) {
  if (k < 0 || k >= r->runs) return;
  for (int32_t v = 0; v < LOOM_ROOF_VARIANTS; v++) {
    int64_t n = elems(v, r->footprint);
    double t0 = loom_now_s();
    r->kit->fn[v](r->a, r->b, r->c, n, r->threads);
    r->t[(size_t)v * (size_t)r->runs + (size_t)k] = loom_now_s() - t0;
  }
  r->done = k + 1 > r->done ? k + 1 : r->done;
}

void loom_bench_roof_end(loom_bench_roof_run *r, loom_bench_roof *out) {
  if (out) {
    memset(out, 0, sizeof *out);
    out->footprint = r->footprint;
    out->best = -1;
    for (int32_t v = 0; v < LOOM_ROOF_VARIANTS && r->done > 0; v++) {
      int64_t n = elems(v, r->footprint);
      double best = 0;
      for (int32_t k = 0; k < r->done; k++) {
        double t = r->t[(size_t)v * (size_t)r->runs + (size_t)k];
        if (k == 0 || t < best) best = t;
      }
      int64_t counted = (int64_t)arrays_counted(v) * 4 * n;
      int64_t moved = counted + (streams(v) ? 0 : 4 * n); /* + write-allocate */
      out->best_s[v] = best;
      out->gbps[v] = best > 0 ? (double)counted / best / 1e9 : 0.0;
      out->moved_gbps[v] = best > 0 ? (double)moved / best / 1e9 : 0.0;
      if (out->best < 0 || out->gbps[v] > out->gbps[out->best]) out->best = v;
    }
    out->runs = r->done;
    out->roof_gbps = out->best >= 0 ? out->gbps[out->best] : 0.0;
  }
  free(r->a);
  free(r->b);
  free(r->c);
  free(r->t);
  memset(r, 0, sizeof *r);
}

loom_status loom_bench_roof_measure(loom_ctx *ctx, const loom_bench_roof_kit *kit, int32_t threads,
                                    int64_t footprint, int32_t runs, loom_bench_roof *out) {
  loom_bench_roof_run r;
  LOOM_TRY(loom_bench_roof_begin(ctx, kit, threads, footprint, runs, &r));
  for (int32_t k = 0; k < r.runs; k++) loom_bench_roof_round(&r, k);
  loom_bench_roof_end(&r, out);
  return LOOM_STATUS_OK;
}
