/*
 * Flash attention on the GPU backends (codegen/gpu_attention.h's
 * kernels), on opencl and, where a CUDA device is, on cuda (each only
 * where present and, when $LOOM_TEST_BACKENDS is set, listed there): forward and backward against the reference executor's
 * decomposition, with and without dropout and causal masking, at sizes
 * that are not multiples of the tiles and head dims 32, 64 and 80; every
 * RNG placement (fused, sequential, overlap: the mask on the second
 * command queue / stream beside the GEMM that makes q; auto) giving the
 * same bits; dropout_mask's bits equal to the cpu backend's and to the
 * spec; the kernels in the source; on opencl, the overlapped mask's trace
 * around that GEMM; attention with an additive bias of each broadcast
 * shape the op accepts (forward, backward and dbias against the
 * reference) and an ONNX-style runtime padding mask through the backend's
 * own rewrite. Skips, saying why, without a device.
 */
#include "attention_graph.h"
#include "common.h"
#include "io/json.h"
#include "passes/attention.h"
#include "rng/philox.h"
#include "runtime/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static loom_ctx *ctx;
static const char *backend; /* the GPU backend under test */

static const char *const placements[] = {"fused", "sequential", "overlap", "auto"};

/* The shared graph (attention_graph.h) with q = x wq. */
static loom_graph *build(int64_t b0, int64_t b1, int64_t sq, int64_t sk, int64_t d, bool causal,
                         double p, const char *placement) {
  loom_test_attention a = {b0, b1, sq, sk, d, causal, p, .seed = 4321, .offset = 77, .project_q = true};
  loom_rng_model model;
  loom_rng_model_h200(&model); /* auto: a GPU's model picks overlap for long GEMMs */
  return loom_test_attention_graph(ctx, &a, placement, &model);
}

/* Runs g; *fallback (may be NULL): the nodes run on the reference kernels. */
static bool run(const loom_graph *g, const char *backend, loom_rng_placement rng,
                loom_tensor **in, int32_t n_in, loom_tensor **out, int32_t n_out,
                int32_t *fallback) {
  loom_session *s = NULL;
  loom_session_options o = LOOM_SESSION_OPTIONS(.backend = backend, .rng = rng);
  loom_status st = loom_session_new(ctx, g, &o, &s);
  loom_session_stats stats = {0};
  if (!st) st = loom_session_get_stats(s, &stats);
  if (fallback) *fallback = stats.n_fallback;
  for (int i = 0; i < n_out; i++) out[i] = NULL;
  if (!st) st = loom_session_run(s, n_in, (const loom_tensor *const *)in, n_out, out);
  if (st) fprintf(stderr, "%s: %s\n", backend, loom_ctx_error(ctx));
  CHECK(st == LOOM_STATUS_OK);
  loom_session_free(s);
  return st == LOOM_STATUS_OK;
}

static void free_all(loom_tensor **t, int n) {
  for (int i = 0; i < n; i++) {
    loom_tensor_free(t[i]);
    t[i] = NULL;
  }
}

static void test_case(int64_t b0, int64_t b1, int64_t sq, int64_t sk, int64_t d, bool causal,
                      double p) {
  loom_graph *g = build(b0, b1, sq, sk, d, causal, p, NULL);
  if (!g) return;
  loom_test_rng rng = {(uint64_t)(sq * 131 + sk * 7 + d + causal)};
  loom_tensor *in[6] = {0};
  int64_t qs[4] = {b0, b1, sq, d}, ks[4] = {b0, b1, sk, d}, ws[2] = {d, d};
  const int64_t *shapes[6] = {qs, ks, ks, NULL, qs, ws};
  const int ranks[6] = {4, 4, 4, 0, 4, 2};
  for (int i = 0; i < 6; i++) {
    CHECK_OK(ctx, loom_tensor_new(ctx, i == 3 ? LOOM_DTYPE_I64 : LOOM_DTYPE_F32, ranks[i],
                                  shapes[i], &in[i]));
    if (!in[i]) return;
    if (i == 3) {
      *(int64_t *)loom_tensor_data(in[i]) = 5000011;
      continue;
    }
    float *x = loom_tensor_data(in[i]);
    const double r = i == 5 ? 0.3 : 1.0;
    for (int64_t e = 0; e < loom_tensor_numel(in[i]); e++)
      x[e] = (float)loom_test_uniform(&rng, -r, r);
  }
  loom_tensor *ref[4], *first[4] = {0};
  double worst_all = 0;
  if (run(g, "ref", LOOM_RNG_AUTO, in, 6, ref, 4, NULL)) {
    for (int pl = 0; pl < 4; pl++) {
      loom_tensor *got[4];
      loom_graph *gf = build(b0, b1, sq, sk, d, causal, p, placements[pl]);
      loom_rng_placement rp = LOOM_RNG_AUTO;
      loom_rng_placement_from_name(placements[pl], &rp);
      int32_t fallback = -1;
      bool ok = gf && run(gf, backend, rp, in, 6, got, 4, &fallback);
      loom_graph_free(gf);
      if (!ok) continue;
      CHECK(fallback == 0); /* attention, its gradient and the mask on the device */
      double worst = 0;
      for (int t = 0; t < 4; t++) {
        const float *a = loom_tensor_data(got[t]), *b = loom_tensor_data(ref[t]);
        for (int64_t e = 0; e < loom_tensor_numel(ref[t]); e++) {
          double err = fabs((double)a[e] - (double)b[e]) / (1.0 + fabs((double)b[e]));
          if (err > worst || isnan(err)) worst = err;
        }
      }
      /* f32 tiles with an online softmax against the decomposition in double */
      CHECK(worst <= 1e-4);
      if (!(worst <= 1e-4))
        fprintf(stderr, "  [%lld,%lld] sq %lld sk %lld d %lld causal %d p %g, %s: error %g\n",
                (long long)b0, (long long)b1, (long long)sq, (long long)sk, (long long)d, causal, p,
                placements[pl], worst);
      worst_all = fmax(worst_all, worst);
      if (!first[0]) {
        memcpy(first, got, sizeof got);
        continue;
      }
      bool same = true;
      for (int t = 0; t < 4; t++)
        same = same && memcmp(loom_tensor_data(got[t]), loom_tensor_data(first[t]),
                              sizeof(float) * (size_t)loom_tensor_numel(got[t])) == 0;
      CHECK(same); /* the same masks, so the same bits */
      if (!same) fprintf(stderr, "  %s differs from fused\n", placements[pl]);
      free_all(got, 4);
    }
    free_all(ref, 4);
  }
  printf("%s attention [%lld,%lld] sq %lld sk %lld d %lld causal %d p %g: 4 placements bit for bit "
         "equal, worst error against ref %.2g\n",
         backend, (long long)b0, (long long)b1, (long long)sq, (long long)sk, (long long)d, causal, p,
         worst_all);
  free_all(first, 4);
  free_all(in, 6);
  loom_graph_free(g);
}

/* [ts, ts + dur] (microseconds) of the first complete event of category
 * cat in a Chrome trace. */
static bool trace_interval(const loom_json *events, const char *cat, double *t0, double *t1) {
  for (int32_t i = 0; events && i < events->n; i++) {
    const loom_json *e = &events->items[i], *c = loom_json_get(e, "cat"),
                    *ts = loom_json_get(e, "ts"), *dur = loom_json_get(e, "dur");
    if (!c || c->kind != LOOM_JSON_STRING || strcmp(c->str, cat) != 0 || !ts || !dur) continue;
    *t0 = ts->num;
    *t1 = ts->num + dur->num;
    return true;
  }
  return false;
}

/* With the overlap placement the mask is queued on the second command
 * queue before the GEMM that makes q and joined after it: in the trace its
 * interval on the "opencl queue 2" lane (queued to joined) contains the
 * GEMM step's on the main lane. (Sequential runs it before the GEMM.) */
static void test_overlap_trace(void) {
  loom_graph *g = build(1, 2, 40, 40, 32, true, 0.1, "overlap");
  if (!g) return;
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = "opencl"), &s));
  loom_tensor *in[6] = {0}, *out[4] = {0};
  for (int32_t i = 0; i < 6; i++) {
    const loom_type *t = loom_value_type(g, g->inputs[i]);
    CHECK_OK(ctx, loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &in[i]));
  }
  char path[] = "/tmp/loom_ocl_trace_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  if (s) {
    CHECK_OK(ctx, loom_ctx_trace_begin(ctx));
    CHECK_OK(ctx, loom_session_run(s, 6, (const loom_tensor *const *)in, 4, out));
    CHECK_OK(ctx, loom_ctx_trace_end(ctx, path));
    char *text = NULL;
    size_t n = 0;
    FILE *f = fopen(path, "rb");
    if (f) {
      text = calloc(1, 1 << 20);
      n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
      fclose(f);
    }
    CHECK(text && strstr(text, "\"opencl queue 2\""));
    loom_json *j = NULL;
    if (text) CHECK_OK(ctx, loom_json_parse(ctx, text, n, &j));
    double m0 = 0, m1 = 0, g0 = 0, g1 = 0;
    const loom_json *ev = loom_json_get(j, "traceEvents");
    bool found = trace_interval(ev, "rng", &m0, &m1) && trace_interval(ev, "gemm", &g0, &g1);
    CHECK(found);
    CHECK(m0 <= g0 && g1 <= m1);
    printf("overlap: mask queued %.0f us, joined %.0f us; the GEMM [%.0f, %.0f] us between\n", m0,
           m1, g0, g1);
    loom_json_free(j);
    free(text);
  }
  remove(path);
  free_all(out, 4);
  free_all(in, 6);
  loom_session_free(s);
  loom_graph_free(g);
}

/* dropout_mask of 1000 bits with a base: bit for bit the cpu backend's and
 * the spec's (rng/philox.h), the last byte's spare bits 0. */
static void test_mask(void) {
  const int64_t numel = 1003;
  const uint64_t seed = 0xfeedULL;
  const int64_t offset = 13, base = 1000001;
  loom_graph *g = NULL;
  loom_value b, bits;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_input(g, "base", LOOM_DTYPE_I64, 0, NULL, &b));
  loom_attr at[] = {{.name = "p", .kind = LOOM_ATTR_FLOAT, .f = 0.25},
                    {.name = "seed", .kind = LOOM_ATTR_INT, .i = (int64_t)seed},
                    {.name = "offset", .kind = LOOM_ATTR_INT, .i = offset},
                    {.name = "numel", .kind = LOOM_ATTR_INT, .i = numel}};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_DROPOUT_MASK, 1, &b, 4, at, &bits));
  CHECK_OK(ctx, loom_graph_output(g, "bits", bits));
  loom_tensor *in = NULL, *cpu = NULL, *gpu = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_I64, 0, NULL, &in));
  if (in) *(int64_t *)loom_tensor_data(in) = base;
  if (in && run(g, "cpu", LOOM_RNG_AUTO, &in, 1, &cpu, 1, NULL) &&
      run(g, backend, LOOM_RNG_AUTO, &in, 1, &gpu, 1, NULL)) {
    const uint8_t *c = loom_tensor_data(cpu), *o = loom_tensor_data(gpu);
    const int64_t nb = (numel + 7) / 8;
    CHECK(loom_tensor_numel(gpu) == nb);
    CHECK(memcmp(c, o, (size_t)nb) == 0);
    const uint64_t thr = loom_dropout_threshold(0.25);
    int64_t wrong = 0, kept = 0;
    for (int64_t e = 0; e < nb * 8; e++) {
      bool want = e < numel && loom_dropout_keep(seed, (uint64_t)(base + offset + e), thr);
      bool have = (o[e / 8] >> (e % 8)) & 1;
      wrong += want != have;
      kept += have;
    }
    CHECK(wrong == 0);
    CHECK(kept > numel / 2 && kept < numel - numel / 8);
    printf("%s dropout_mask: %lld of %lld bits set, the cpu's and the spec's\n", backend,
           (long long)kept, (long long)numel);
  }
  loom_tensor_free(in);
  loom_tensor_free(cpu);
  loom_tensor_free(gpu);
  loom_graph_free(g);
}

/* The session's own pass (the backend's rewrite) makes flash attention,
 * whose kernels are in the described source; decomposed keeps them out;
 * auto places dropout by the backend's RNG model. */
static void test_source(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx,
                                 "input %q : f32[1, 2, 20, 32]\n"
                                 "input %k : f32[1, 2, 20, 32]\n"
                                 "input %v : f32[1, 2, 20, 32]\n"
                                 "%y : f32[1, 2, 20, 32] = attention(%q, %k, %v, causal=true)\n"
                                 "output y = %y\n",
                                 &g));
  if (!g) return;
  for (int m = 0; m < 2; m++) {
    loom_session *s = NULL;
    loom_session_options o = LOOM_SESSION_OPTIONS(
        .backend = backend, .attention = m ? LOOM_ATTENTION_DECOMPOSED : LOOM_ATTENTION_FLASH);
    CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
    char *text = NULL;
    if (s) CHECK_OK(ctx, loom_session_describe(s, LOOM_ARTIFACT_SOURCE, &text));
    bool has = text && strstr(text, strcmp(backend, "cuda")
                                        ? "__kernel __attribute__((reqd_work_group_size(64, 1, "
                                          "1))) void lm_fa_fwd_d32_v32_m0("
                                        : "extern \"C\" __global__ void __launch_bounds__(64) "
                                          "lm_fa_fwd_d32_v32_m0(");
    CHECK(m ? !has : has);
    loom_session_stats st = {0};
    if (s) CHECK_OK(ctx, loom_session_get_stats(s, &st));
    if (!m) CHECK(st.n_eager == 1 && st.n_fallback == 0); /* flash attention on the device */
    loom_free(text);
    loom_session_free(s);
  }
  loom_graph_free(g);
  /* with dropout and the default placement (auto): the backend's model
   * picks fused (Philox in the kernel) or a mask kernel, all on the device */
  g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx,
                                 "input %q : f32[1, 2, 20, 32]\n"
                                 "input %k : f32[1, 2, 20, 32]\n"
                                 "input %v : f32[1, 2, 20, 32]\n"
                                 "input %base : i64[]\n"
                                 "%y : f32[1, 2, 20, 32] = attention(%q, %k, %v, %base, "
                                 "causal=true, p=0.1, seed=3)\n"
                                 "output y = %y\n",
                                 &g));
  if (!g) return;
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = backend), &s));
  char *text = NULL;
  if (s) CHECK_OK(ctx, loom_session_describe(s, LOOM_ARTIFACT_SOURCE, &text));
  const bool fused = text && strstr(text, "lm_fa_fwd_d32_v32_m1(");
  const bool mask = text && strstr(text, "lm_fa_fwd_d32_v32_m2(");
  CHECK(fused != mask);
  loom_session_stats st = {0};
  if (s) CHECK_OK(ctx, loom_session_get_stats(s, &st));
  CHECK(st.n_fallback == 0 && st.n_eager == (mask ? 2 : 1));
  printf("%s: auto placed the dropout %s\n", backend, fused ? "in the kernel (fused)" : "in a mask");
  loom_free(text);
  loom_session_free(s);
  loom_graph_free(g);
}

/* ---- attention with an additive bias (ops/attention_bias.h) ----------------------- */

enum { BB = 2, BH = 3, BSQ = 70, BSK = 83, BD = 16, BDV = 24 };

/* A bias shape (broadcast to the scores [BB, BH, BSQ, BSK]) and its values. */
typedef struct bias_case {
  const char *name;
  int32_t rank;
  int64_t shape[4];
  int fill; /* 0 uniform; 1 padding: 0 or -inf (last keys); 2 also a row all -inf */
} bias_case;

static const bias_case bias_cases[] = {
    {"[Sk] padding", 1, {BSK}, 1},
    {"[B,1,1,Sk] padding", 4, {BB, 1, 1, BSK}, 1},
    {"[1,H,Sq,Sk] learned", 4, {1, BH, BSQ, BSK}, 0},
    {"[H,Sq,Sk] learned", 3, {BH, BSQ, BSK}, 0},
    {"[B,1,Sq,1] row bias", 4, {BB, 1, BSQ, 1}, 0},
    {"[B,H,Sq,Sk] full", 4, {BB, BH, BSQ, BSK}, 0},
    {"[Sq,Sk] with a masked row", 2, {BSQ, BSK}, 2},
};

/* y = attention(q, k, v, base, bias), loss = sum(y * w); outputs y, dq,
 * dk, dv, dbias. With a placement the attention pass runs first (the
 * backward is flash_attention_grad); without, the decomposition. */
static loom_graph *build_biased(const bias_case *c, bool causal, double p, const char *placement) {
  char text[2048], bs[64] = "[";
  for (int32_t d = 0; d < c->rank; d++)
    snprintf(bs + strlen(bs), sizeof bs - strlen(bs), d ? ", %lld" : "%lld",
             (long long)c->shape[d]);
  strcat(bs, "]");
  snprintf(text, sizeof text,
           "input %%q : f32[%d, %d, %d, %d]\n"
           "input %%k : f32[%d, %d, %d, %d]\n"
           "input %%v : f32[%d, %d, %d, %d]\n"
           "input %%bias : f32%s\n"
           "input %%base : i64[]\n"
           "input %%w : f32[%d, %d, %d, %d]\n"
           "%%y : f32[%d, %d, %d, %d] = attention(%%q, %%k, %%v, %%base, %%bias, causal=%s, "
           "p=%g, seed=19, offset=3, bias=true)\n"
           "output y = %%y\n",
           BB, BH, BSQ, BD, BB, BH, BSK, BD, BB, BH, BSK, BDV, bs, BB, BH, BSQ, BDV, BB, BH, BSQ,
           BDV, causal ? "true" : "false", p);
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, text, &g));
  if (!g) return NULL;
  if (placement) {
    loom_rng_placement pl = LOOM_RNG_FUSED;
    loom_rng_placement_from_name(placement, &pl);
    loom_graph *f = NULL;
    int32_t n = 0;
    CHECK_OK(ctx, loom_graph_fuse_attention(g, pl, NULL, &f, &n));
    CHECK(n == 1);
    loom_graph_free(g);
    if (!(g = f)) return NULL;
  }
  loom_value prod, loss, grads[4], *in = g->inputs;
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MUL, 2, (loom_value[]){g->outputs[0], in[5]}, 0, NULL,
                              &prod));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_REDUCE_SUM, 1, &prod, 0, NULL, &loss));
  CHECK_OK(ctx, loom_graph_grad(g, loss, 4, (loom_value[]){in[0], in[1], in[2], in[3]}, grads));
  static const char *const names[4] = {"dq", "dk", "dv", "dbias"};
  for (int32_t i = 0; i < 4; i++) CHECK_OK(ctx, loom_graph_output(g, names[i], grads[i]));
  return g;
}

/* Inputs q, k, v, bias, base, w of case c. */
static void biased_inputs(const bias_case *c, uint64_t seed, loom_tensor **t) {
  int64_t qs[4] = {BB, BH, BSQ, BD}, ks[4] = {BB, BH, BSK, BD}, vs[4] = {BB, BH, BSK, BDV},
          ws[4] = {BB, BH, BSQ, BDV};
  const int64_t *shapes[6] = {qs, ks, vs, c->shape, NULL, ws};
  loom_test_rng rng = {seed};
  for (int i = 0; i < 6; i++) {
    const int32_t rank = i == 3 ? c->rank : i == 4 ? 0 : 4;
    CHECK_OK(ctx, loom_tensor_new(ctx, i == 4 ? LOOM_DTYPE_I64 : LOOM_DTYPE_F32, rank, shapes[i],
                                  &t[i]));
    if (!t[i]) return;
    if (i == 4) {
      *(int64_t *)loom_tensor_data(t[i]) = 700001;
      continue;
    }
    float *x = loom_tensor_data(t[i]);
    const int64_t n = loom_tensor_numel(t[i]);
    for (int64_t e = 0; e < n; e++) x[e] = (float)loom_test_uniform(&rng, -1, 1);
    if (i != 3 || c->fill == 0) continue;
    const int64_t sk = c->shape[c->rank - 1];
    for (int64_t r = 0; r < n / sk; r++) /* row r hides its last (r % 3 + 1) * 5 keys */
      for (int64_t j = 0; j < sk; j++)
        x[r * sk + j] = j >= sk - (r % 3 + 1) * 5 ? -INFINITY : 0.0f;
    if (c->fill == 2)
      for (int64_t j = 0; j < sk; j++) x[7 * sk + j] = -INFINITY; /* row 7 sees no key */
  }
}

/* Largest |a - b| / (1 + |b|); NaN where both are NaN counts 0, a NaN
 * against a number infinity. */
static double nan_error(const loom_tensor *a, const loom_tensor *b) {
  if (!a || !b || loom_tensor_numel(a) != loom_tensor_numel(b)) return INFINITY;
  const float *x = loom_tensor_data(a), *y = loom_tensor_data(b);
  double worst = 0;
  for (int64_t e = 0; e < loom_tensor_numel(a); e++) {
    if (isnan(x[e]) || isnan(y[e])) {
      if (isnan(x[e]) != isnan(y[e])) return INFINITY;
      continue;
    }
    const double err = fabs((double)x[e] - (double)y[e]) / (1.0 + fabs((double)y[e]));
    if (err > worst) worst = err;
  }
  return worst;
}

/* Forward and backward of case c on the device against the reference's
 * decomposition, dbias included, with dropout placed fused and (both)
 * also sequential, bit for bit the same; everything on the device. */
static void test_bias_case(const bias_case *c, bool causal, double p, bool both) {
  loom_tensor *in[6] = {0}, *want[5] = {0}, *first[5] = {0};
  biased_inputs(c, (uint64_t)(c - bias_cases) * 104729 + causal * 17 + (p > 0) + 3, in);
  loom_graph *gd = build_biased(c, causal, p, NULL);
  const char *const pls[2] = {"fused", "sequential"};
  const int n_pl = p > 0 && both ? 2 : 1;
  double worst[5] = {0};
  if (gd && in[5] && run(gd, "ref", LOOM_RNG_AUTO, in, 6, want, 5, NULL)) {
    for (int pl = 0; pl < n_pl; pl++) {
      loom_graph *gf = build_biased(c, causal, p, pls[pl]);
      loom_rng_placement rp = LOOM_RNG_FUSED;
      loom_rng_placement_from_name(pls[pl], &rp);
      loom_tensor *got[5] = {0};
      int32_t fallback = -1;
      const bool ok = gf && run(gf, backend, rp, in, 6, got, 5, &fallback);
      loom_graph_free(gf);
      if (!ok) continue;
      CHECK(fallback == 0); /* attention, its gradient (dbias too) and the mask on the device */
      for (int t = 0; t < 5; t++) {
        const double err = nan_error(got[t], want[t]);
        /* f32 tiles against the decomposition in double; dbias sums up to
         * B*H*Sq terms */
        const double tol = t == 4 ? 2e-4 : 1e-4;
        CHECK(err <= tol);
        if (!(err <= tol))
          fprintf(stderr, "  %s causal %d p %g %s: output %d error %g\n", c->name, causal, p,
                  pls[pl], t, err);
        worst[t] = fmax(worst[t], err);
      }
      if (!first[0]) {
        memcpy(first, got, sizeof got);
        continue;
      }
      bool same = true;
      for (int t = 0; t < 5; t++)
        same = same && memcmp(loom_tensor_data(got[t]), loom_tensor_data(first[t]),
                              sizeof(float) * (size_t)loom_tensor_numel(got[t])) == 0;
      CHECK(same); /* the same masks, so the same bits */
      free_all(got, 5);
    }
  }
  printf("%s attention, bias %s, causal %d, p %g: worst error y %.2g dq %.2g dk %.2g dv %.2g "
         "dbias %.2g%s\n",
         backend, c->name, causal, p, worst[0], worst[1], worst[2], worst[3], worst[4],
         n_pl > 1 ? " (fused and sequential bit for bit equal)" : "");
  free_all(first, 5);
  free_all(want, 5);
  free_all(in, 6);
  loom_graph_free(gd);
}

/* Each bias shape with and without causal masking and dropout
 * (alternating, so every pair is covered across the shapes); the mask
 * placement (sequential) for a padding and a learned bias. */
static void test_bias(void) {
  const int n = (int)(sizeof bias_cases / sizeof bias_cases[0]);
  for (int i = 0; i < n; i++) {
    test_bias_case(&bias_cases[i], i % 2 == 0, 0.0, false);
    test_bias_case(&bias_cases[i], i % 2 == 1, 0.15, i == 1 || i == 2);
  }
}

/* A padding mask as ONNX exports BERT's (the import's form): an i64 mask
 * [B, Sk] known only at run time, cast and reshaped to [B, 1, 1, Sk], (1 -
 * m) * -10000 added to the scaled scores of matmul / softmax / matmul.
 * The backend's own rewrite makes flash attention with that bias (the
 * kernels in the source, nothing on the reference kernels), and y is the
 * reference's. */
static void test_padding_mask(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx,
                                 "input %q : f32[2, 3, 37, 16]\n"
                                 "input %k : f32[2, 3, 37, 16]\n"
                                 "input %v : f32[2, 3, 37, 16]\n"
                                 "input %mask : i64[2, 37]\n"
                                 "%s : f32[2, 3, 37, 37] = matmul(%q, %k, trans_b=true)\n"
                                 "%c : f32[] = constant(value=0.25)\n"
                                 "%t : f32[2, 3, 37, 37] = mul(%s, %c)\n"
                                 "%mf : f32[2, 37] = cast(%mask, dtype=f32)\n"
                                 "%m4 : f32[2, 1, 1, 37] = reshape(%mf, shape=[2, 1, 1, 37])\n"
                                 "%one : f32[] = constant(value=1)\n"
                                 "%inv : f32[2, 1, 1, 37] = sub(%one, %m4)\n"
                                 "%big : f32[] = constant(value=-10000)\n"
                                 "%b : f32[2, 1, 1, 37] = mul(%inv, %big)\n"
                                 "%u : f32[2, 3, 37, 37] = add(%t, %b)\n"
                                 "%p : f32[2, 3, 37, 37] = softmax(%u, axis=-1)\n"
                                 "%y : f32[2, 3, 37, 16] = matmul(%p, %v)\n"
                                 "output y = %y\n",
                                 &g));
  if (!g) return;
  loom_tensor **in = loom_test_uniform_inputs(ctx, g, 11);
  if (in && in[3]) { /* batch 0 keeps 30 keys, batch 1 keeps 21 */
    int64_t *m = loom_tensor_data(in[3]);
    for (int j = 0; j < 74; j++) m[j] = (j % 37) < 30 - (j / 37) * 9;
  }
  loom_tensor **want =
      in ? loom_test_run(ctx, g, &LOOM_SESSION_OPTIONS(.backend = "ref"), in) : NULL;
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = backend), &s));
  char *text = NULL;
  if (s) CHECK_OK(ctx, loom_session_describe(s, LOOM_ARTIFACT_SOURCE, &text));
  CHECK(text && strstr(text, "lm_fa_fwd_d16_v16_m0_b("));
  loom_session_stats st = {0};
  if (s) CHECK_OK(ctx, loom_session_get_stats(s, &st));
  CHECK(st.n_fallback == 0);
  loom_tensor *got = NULL;
  if (s && in) CHECK_OK(ctx, loom_session_run(s, 4, (const loom_tensor *const *)in, 1, &got));
  const double err = want && got ? nan_error(got, want[0]) : INFINITY;
  CHECK(err <= 2e-5);
  printf("%s: an ONNX-style runtime padding mask, flash attention with its bias: error %.2g\n",
         backend, err);
  loom_tensor_free(got);
  loom_free(text);
  loom_session_free(s);
  loom_test_free_tensors(want, 1);
  loom_test_free_tensors(in, 4);
  loom_graph_free(g);
}

/* With --bias only the bias cases run, with --no-bias all but them (the
 * GPU check runs them as two steps). */
int main(int argc, char **argv) {
  const bool only_bias = argc > 1 && !strcmp(argv[1], "--bias"),
             no_bias = argc > 1 && !strcmp(argv[1], "--no-bias");
  if (argc > 2 || (argc > 1 && !only_bias && !no_bias)) {
    fprintf(stderr, "usage: test_opencl_attention [--bias | --no-bias]\n");
    return 2;
  }
  if (loom_ctx_new(&ctx)) return 1;
  static const char *const gpus[] = {"opencl", "cuda"};
  for (int i = 0; i < 2; i++) {
    backend = gpus[i];
    loom_backend *b = NULL;
    if (!loom_test_backend_selected(backend)) {
      printf("test_opencl_attention: %s skipped: not in LOOM_TEST_BACKENDS\n", backend);
      continue;
    }
    if (loom_backend_new(ctx, backend, &b) != LOOM_STATUS_OK) {
      printf("test_opencl_attention: %s skipped: %s\n", backend, loom_ctx_error(ctx));
      continue;
    }
    loom_backend_free(b);
    if (!only_bias) {
      test_mask();
      test_source();
      if (i == 0) test_overlap_trace(); /* the second queue's lane: opencl's trace */
      test_case(2, 3, 70, 70, 32, true, 0.1);
      test_case(1, 1, 47, 65, 80, true, 0.2);
      test_case(1, 2, 65, 40, 64, false, 0.0);
    }
    if (!no_bias) {
      test_bias();
      test_padding_mask();
    }
  }
  loom_ctx_free(ctx);
  return loom_test_finish("test_opencl_attention");
}
