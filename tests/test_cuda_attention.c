/*
 * The attention RNG placements in a training step on a GPU backend: one
 * Llama block (RMSNorm, SwiGLU, RoPE) forward + backward + AdamW with
 * attention and residual dropout, built with the backend's rewrite (flash
 * attention, its gradient, and the mask where the placement puts it), run
 * under fused, sequential and overlap: the losses and every updated
 * parameter must be the same bits under all three (the same masks), and
 * the loss close to the cpu backend's.
 *
 * As a test (no arguments) on cuda where a device is (else a skip saying
 * why) at a small size. With --sweep it is the GPU check's attention RNG
 * sweep (scripts/gpu-check.sh): sizes from the flags (default a
 * Llama-2-7B block: d 4096, 32 heads of 128, d_ff 11008, sequence 2048,
 * batch 1), --runs timed steps per placement after a warm-up, printing each
 * placement's median step time (and with LOOM_CUDA_TIMING=1 the backend's
 * device times on stderr) and overlap's speed-up over fused; the equality
 * is still checked. --backend opencl runs it on PoCL (small sizes only).
 *
 * As a test it also compiles, with NVRTC for sm_90 (no GPU needed), the
 * kernels of attention with an additive bias (ops/attention_bias.h) and
 * its gradient in each dropout mode: what the cuda backend would build
 * for a training step with a learned position bias. (Running them on a
 * GPU is test_opencl_attention's bias cases under scripts/gpu-check.sh.)
 */
#include "codegen/gpu_attention.h"
#include "common.h"
#include "core/clock.h"
#include "model/gpt.h"
#include "passes/attention.h"
#include "runtime/backend.h"
#include "runtime/cuda/nvrtc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

typedef struct sweep {
  const char *backend;
  int32_t d, heads, d_ff, seq, batch, runs;
  bool timed;
} sweep;

static const loom_rng_placement placements[3] = {LOOM_RNG_FUSED, LOOM_RNG_SEQUENTIAL,
                                                 LOOM_RNG_OVERLAP};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Builds the step for placement pl on backend (NULL: no rewrite). */
static loom_graph *build(const sweep *w, const char *backend, loom_rng_placement pl) {
  loom_gpt_config c;
  loom_gpt_config_default(&c);
  loom_gpt_config_set_arch(&c, LOOM_GPT_ARCH_LLAMA);
  c.n_layer = 1;
  c.d_model = w->d;
  c.n_head = w->heads;
  c.d_ff = w->d_ff;
  c.context = w->seq;
  c.dropout = 0.1;
  loom_session_options so = LOOM_SESSION_OPTIONS(.backend = backend, .rng = pl);
  loom_gpt_optim o = {0.9, 0.95, 1e-8, 0.1, 7, backend ? &so : NULL};
  loom_graph *g = NULL;
  int64_t per_step = 0;
  CHECK_OK(ctx, loom_gpt_build_train(ctx, &c, w->batch, w->seq, &o, &g, &per_step));
  return g;
}

/* Runs g on backend with rng pl: the outputs of the last run (*out), the
 * median seconds of the timed runs. */
static bool run(const sweep *w, const loom_graph *g, const char *backend, loom_rng_placement pl,
                loom_tensor **in, loom_tensor ***out, double *median_s) {
  loom_session *s = NULL;
  loom_session_options o = LOOM_SESSION_OPTIONS(.backend = backend, .rng = pl);
  CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
  if (!s) return false;
  const int32_t n_out = loom_graph_num_outputs(g), runs = w->timed ? w->runs + 1 : 1;
  double *t = calloc((size_t)runs, sizeof *t);
  loom_tensor **res = calloc((size_t)n_out, sizeof *res);
  bool ok = t && res;
  for (int32_t r = 0; ok && r < runs; r++) {
    for (int32_t i = 0; i < n_out; i++) {
      loom_tensor_free(res[i]);
      res[i] = NULL;
    }
    double t0 = loom_now_s();
    loom_status st = loom_session_run(s, loom_graph_num_inputs(g), (const loom_tensor *const *)in,
                                      n_out, res);
    t[r] = loom_now_s() - t0;
    CHECK_OK(ctx, st);
    ok = st == LOOM_STATUS_OK;
  }
  if (ok && w->timed) { /* the first run warms up (module loads, cuBLAS) */
    qsort(t + 1, (size_t)w->runs, sizeof *t, cmp_double);
    *median_s = t[1 + w->runs / 2];
  }
  free(t);
  loom_session_free(s);
  *out = res;
  if (!ok) loom_test_free_tensors(res, n_out);
  return ok;
}

static int run_sweep(const sweep *w) {
  loom_backend *b = NULL;
  if (!loom_test_backend_selected(w->backend) || loom_backend_new(ctx, w->backend, &b)) {
    printf("test_cuda_attention: %s skipped: %s\n", w->backend,
           loom_test_backend_selected(w->backend) ? loom_ctx_error(ctx)
                                                  : "not in LOOM_TEST_BACKENDS");
    return 0;
  }
  loom_backend_free(b);
  loom_tensor **in = NULL, **first = NULL;
  int32_t n_in = 0, n_out = 0;
  double ms[3] = {0, 0, 0};
  for (int32_t p = 0; p < 3; p++) {
    loom_graph *g = build(w, w->backend, placements[p]);
    if (!g) break;
    if (!in) {
      n_in = loom_graph_num_inputs(g);
      in = loom_test_gpt_inputs(ctx, g, 5);
    }
    n_out = loom_graph_num_outputs(g);
    loom_tensor **out = NULL;
    double med = 0;
    if (in && run(w, g, w->backend, placements[p], in, &out, &med)) {
      ms[p] = med * 1e3;
      if (!first) {
        first = out;
      } else {
        int32_t differ = 0;
        for (int32_t o = 0; o < n_out; o++)
          differ += loom_tensor_numel(out[o]) != loom_tensor_numel(first[o]) ||
                    memcmp(loom_tensor_data(out[o]), loom_tensor_data(first[o]),
                           (size_t)loom_tensor_numel(out[o]) *
                               loom_dtype_size(loom_tensor_dtype(out[o]))) != 0;
        CHECK(differ == 0); /* the same masks, so the same bits */
        if (differ) fprintf(stderr, "  %s: %d outputs differ from fused\n",
                            loom_rng_placement_name(placements[p]), (int)differ);
        loom_test_free_tensors(out, n_out);
      }
    }
    loom_graph_free(g);
  }
  if (first && !w->timed) { /* the loss against the cpu backend's */
    loom_graph *g = build(w, "cpu", LOOM_RNG_FUSED);
    loom_tensor **cpu = NULL;
    double med = 0;
    sweep once = *w;
    once.timed = false;
    if (g && run(&once, g, "cpu", LOOM_RNG_FUSED, in, &cpu, &med)) {
      float a = *(const float *)loom_tensor_data(first[0]), c = *(const float *)loom_tensor_data(cpu[0]);
      CHECK(fabsf(a - c) <= 1e-4f * fabsf(c));
      printf("%s: loss %.6f, cpu %.6f\n", w->backend, (double)a, (double)c);
      loom_test_free_tensors(cpu, n_out);
    }
    loom_graph_free(g);
  }
  if (w->timed) {
    printf("attention rng sweep on %s: llama block d %d, %d heads of %d, d_ff %d, seq %d, batch %d, "
           "dropout 0.1, fwd+bwd+adamw, median of %d steps\n",
           w->backend, (int)w->d, (int)w->heads, (int)(w->d / w->heads), (int)w->d_ff, (int)w->seq,
           (int)w->batch, (int)w->runs);
    for (int32_t p = 0; p < 3; p++)
      printf("{\"workload\": \"attention_rng\", \"backend\": \"%s\", \"placement\": \"%s\", "
             "\"seq\": %d, \"d_model\": %d, \"heads\": %d, \"median_ms\": %.3f}\n",
             w->backend, loom_rng_placement_name(placements[p]), (int)w->seq, (int)w->d,
             (int)w->heads, ms[p]);
    if (ms[0] > 0 && ms[2] > 0)
      printf("overlap over fused: x%.3f; sequential over fused: x%.3f (whole steps, copies "
             "included)\n",
             ms[0] / ms[2], ms[1] > 0 ? ms[0] / ms[1] : 0.0);
  }
  printf("%s: fused, sequential and overlap gave the same bits\n", w->backend);
  loom_test_free_tensors(first, n_out);
  loom_test_free_tensors(in, n_in);
  return 0;
}

/* The cuda attention source of y = attention(q, k, v, [base,] bias) with
 * dropout p placed by pl (p 0: none), loss = sum(y), differentiated for q
 * and the bias: the forward, dK/dV with dS for dbias, dQ, and dbias. */
static char *biased_source(double p, loom_rng_placement pl) {
  char text[1024];
  snprintf(text, sizeof text,
           "input %%q : f32[2, 4, 40, 64]\n"
           "input %%k : f32[2, 4, 40, 64]\n"
           "input %%v : f32[2, 4, 40, 64]\n"
           "input %%base : i64[]\n"
           "input %%bias : f32[1, 4, 40, 40]\n"
           "%%y : f32[2, 4, 40, 64] = attention(%%q, %%k, %%v, %%base, %%bias, causal=true, p=%g, "
           "seed=5, bias=true)\n"
           "output y = %%y\n",
           p);
  loom_graph *g = NULL, *f = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, text, &g));
  int32_t n = 0;
  if (g) CHECK_OK(ctx, loom_graph_fuse_attention(g, pl, NULL, &f, &n));
  loom_graph_free(g);
  CHECK(n == 1);
  char *src = NULL;
  loom_value loss, grads[2];
  if (f) {
    CHECK_OK(ctx, loom_graph_op(f, LOOM_OP_REDUCE_SUM, 1, &f->outputs[0], 0, NULL, &loss));
    CHECK_OK(ctx, loom_graph_grad(f, loss, 2, (loom_value[]){f->inputs[0], f->inputs[4]}, grads));
    CHECK_OK(ctx, loom_graph_output(f, "dq", grads[0]));
    CHECK_OK(ctx, loom_graph_output(f, "dbias", grads[1]));
    CHECK_OK(ctx, loom_codegen_gpu_attention(ctx, LOOM_GPU_CUDA, f, &src));
  }
  loom_graph_free(f);
  return src;
}

/* The biased kernels in each dropout mode (0 none, 1 fused, 2 the mask)
 * compile with NVRTC for sm_90, every entry there and no atomics (dbias
 * sums in a fixed order); without NVRTC, a skip. */
static void test_bias_nvrtc(void) {
  char ver[32];
  if (loom_nvrtc_version(ctx, ver, sizeof ver)) {
    printf("biased attention kernels: NVRTC skipped: %s\n", loom_ctx_error(ctx));
    return;
  }
  static const struct {
    double p;
    loom_rng_placement pl;
  } modes[3] = {{0.0, LOOM_RNG_FUSED}, {0.1, LOOM_RNG_FUSED}, {0.1, LOOM_RNG_SEQUENTIAL}};
  int found = 0;
  for (int m = 0; m < 3; m++) {
    char *src = biased_source(modes[m].p, modes[m].pl), *ptx = NULL;
    if (src) CHECK_OK(ctx, loom_nvrtc_compile(ctx, src, 90, &ptx));
    static const char *const entries[4] = {"lm_fa_fwd_d64_v64_m%d_b(", "lm_fa_dkdv_d64_v64_m%d_bg(",
                                           "lm_fa_dq_d64_v64_m%d_b(", "lm_fa_dbias("};
    for (int e = 0; ptx && e < 4; e++) {
      char want[96] = ".entry ";
      snprintf(want + 7, sizeof want - 7, entries[e], m);
      const bool has = strstr(ptx, want) != NULL;
      CHECK(has);
      if (!has) fprintf(stderr, "  mode %d: no %s in the PTX\n", m, want);
      found += has;
    }
    CHECK(ptx && !strstr(ptx, "atom."));
    free(src);
    free(ptx);
  }
  printf("biased attention kernels: %d functions (3 dropout modes) compiled with NVRTC %s for "
         "sm_90, no atomics\n",
         found, ver);
}

static bool int_flag(int argc, char **argv, int *i, const char *name, int32_t lo, int32_t hi,
                     int32_t *out) {
  if (strcmp(argv[*i], name) != 0) return false;
  long v = *i + 1 < argc ? strtol(argv[*i + 1], NULL, 10) : -1;
  if (v < lo || v > hi) {
    fprintf(stderr, "test_cuda_attention: %s wants a number in [%d, %d]\n", name, (int)lo, (int)hi);
    exit(2);
  }
  *out = (int32_t)v;
  (*i)++;
  return true;
}

int main(int argc, char **argv) {
  if (loom_ctx_new(&ctx)) return 1;
  sweep w = {"cuda", 64, 2, 128, 48, 2, 1, false};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sweep")) {
      w = (sweep){w.backend, 4096, 32, 11008, 2048, 1, 5, true};
    } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
      w.backend = argv[++i];
    } else if (!int_flag(argc, argv, &i, "--d-model", 1, 16384, &w.d) &&
               !int_flag(argc, argv, &i, "--heads", 1, 256, &w.heads) &&
               !int_flag(argc, argv, &i, "--d-ff", 1, 65536, &w.d_ff) &&
               !int_flag(argc, argv, &i, "--seq", 2, 16384, &w.seq) &&
               !int_flag(argc, argv, &i, "--batch", 1, 64, &w.batch) &&
               !int_flag(argc, argv, &i, "--runs", 1, 100, &w.runs)) {
      fprintf(stderr,
              "usage: test_cuda_attention [--sweep] [--backend B] [--d-model N] [--heads N] "
              "[--d-ff N] [--seq N] [--batch N] [--runs N]\n");
      return 2;
    }
  }
  if (!w.timed) test_bias_nvrtc();
  run_sweep(&w);
  loom_ctx_free(ctx);
  return loom_test_finish("test_cuda_attention");
}
