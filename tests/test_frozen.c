/* Frozen inputs (loom_session_freeze_input): a session with its weights
 * frozen, whose GEMMs read B packed once (transposed weights, a batched
 * weight, a weight transposed in the graph, a weight behind an epilogue),
 * gives what the same session gives with the weights passed on every run
 * and what the reference backend gives; a rebind changes the result (the
 * packs follow the new data); unfreezing takes the inputs from the caller
 * again; bad calls get clear errors. An ONNX model's session freezes its
 * initializers and packs the Gemm weight they give. */
#include "common.h"
#include "onnx_writer.h"

#include "onnx/import.h"
#include "onnx/model.h"
#include "runtime/cpu/gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* x [3, 50, 96]; w [700, 96] read transposed (packed) with a bias + gelu
 * epilogue; v [96, 130] read as stored; wb [3, 700, 96] batched and
 * transposed; m [520, 96] scaled by a `constant` node in the graph and
 * then read transposed (a value computed from frozen inputs and constants
 * only is packed too); s [130] is frozen but feeds no GEMM. */
static const char *graph_text =
    "input %x : f32[3, 50, 96]\n"
    "param %w : f32[700, 96]\n"
    "param %b : f32[700]\n"
    "param %v : f32[96, 130]\n"
    "param %wb : f32[3, 700, 96]\n"
    "param %m : f32[520, 96]\n"
    "param %s : f32[130]\n"
    "%h : f32[3, 50, 700] = matmul(%x, %w, trans_b=true)\n"
    "%hb : f32[3, 50, 700] = add(%h, %b)\n"
    "%y : f32[3, 50, 700] = gelu(%hb)\n"
    "%z0 : f32[3, 50, 130] = matmul(%x, %v)\n"
    "%z : f32[3, 50, 130] = mul(%z0, %s)\n"
    "%q : f32[3, 50, 700] = matmul(%x, %wb, trans_b=true)\n"
    "%two : f32[] = constant(value=2.0)\n"
    "%ms : f32[520, 96] = mul(%m, %two)\n"
    "%r : f32[3, 50, 520] = matmul(%x, %ms, trans_b=true)\n"
    "output y = %y\n"
    "output z = %z\n"
    "output q = %q\n"
    "output r = %r\n";

#define N_IN 7
#define N_OUT 4

static void fill(loom_tensor *t, loom_test_rng *rng, double scale) {
  float *p = loom_tensor_data(t);
  for (int64_t i = 0; i < loom_tensor_numel(t); i++) p[i] = (float)(scale * loom_test_uniform(rng, -1, 1));
}

static void free_all(loom_tensor **t, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    loom_tensor_free(t[i]);
    t[i] = NULL;
  }
}

/* The largest |a - b| over every output, relative to max(1, |b|). */
static double max_diff(loom_tensor **a, loom_tensor **b) {
  double worst = 0;
  for (int32_t o = 0; o < N_OUT; o++) {
    const float *x = loom_tensor_data(a[o]), *y = loom_tensor_data(b[o]);
    for (int64_t i = 0; i < loom_tensor_numel(a[o]); i++)
      worst = fmax(worst, fabs((double)x[i] - y[i]) / fmax(1.0, fabs((double)y[i])));
  }
  return worst;
}

static void run(loom_ctx *ctx, loom_session *s, loom_tensor **in, loom_tensor **out) {
  CHECK_OK(ctx, loom_session_run(s, N_IN, (const loom_tensor *const *)in, N_OUT, out));
}

/* y = Gemm(x [128, 256], W [600, 256] transB, b [600]): W and b are
 * initializers. onnx_program_session freezes both and packs W; the result
 * equals a plain session's (the initializers passed on every run) and the
 * reference's. */
static void test_onnx_initializers(loom_ctx *ctx, loom_test_rng *rng) {
  enum { M = 128, K = 256, N = 600 };
  float *w = malloc(sizeof(float) * N * K), *b = malloc(sizeof(float) * N);
  for (int i = 0; i < N * K; i++) w[i] = (float)loom_test_uniform(rng, -0.1, 0.1);
  for (int i = 0; i < N; i++) b[i] = (float)loom_test_uniform(rng, -1, 1);
  pbw g = {0}, t;
  pbw_str(&g, 2, "gemm");
  t = onnxw_tensor("W", 1, 2, (int64_t[]){N, K}, w, sizeof(float) * N * K);
  pbw_msg(&g, 5, &t);
  t = onnxw_tensor("b", 1, 1, (int64_t[]){N}, b, sizeof(float) * N);
  pbw_msg(&g, 5, &t);
  t = onnxw_value("x", 1, 2, (int64_t[]){M, K}, NULL);
  pbw_msg(&g, 11, &t);
  t = onnxw_value("y", 1, 2, (int64_t[]){M, N}, NULL);
  pbw_msg(&g, 12, &t);
  const char *in[3] = {"x", "W", "b"}, *out[1] = {"y"};
  pbw n = onnxw_node("Gemm", "gemm", 3, in, 1, out);
  pbw a = onnxw_attr_int("transB", 1);
  pbw_msg(&n, 5, &a);
  pbw_msg(&g, 1, &n);
  pbw model = onnxw_model(&g, 13);
  onnx_model *m = NULL;
  onnx_program *p = NULL;
  CHECK_OK(ctx, onnx_model_parse(ctx, model.p, model.n, NULL, &m));
  if (m) CHECK_OK(ctx, onnx_import(ctx, m, 0, NULL, &p));
  loom_tensor *x = NULL, *y[3] = {NULL};
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){M, K}, &x));
  fill(x, rng, 1.0);
  onnx_feed f = {"x", x};
  loom_session *s[3] = {NULL};
  if (p) {
    CHECK_OK(ctx, onnx_program_session(ctx, p, NULL, &s[0]));                 /* frozen */
    CHECK_OK(ctx, loom_session_new(ctx, p->g, NULL, &s[1]));                  /* plain */
    CHECK_OK(ctx, loom_session_new(ctx, p->g, &LOOM_SESSION_OPTIONS(.backend = "ref"), &s[2]));
  }
  for (int k = 0; k < 3; k++)
    if (s[k]) CHECK_OK(ctx, onnx_program_run(ctx, p, s[k], 1, &f, &y[k]));
  if (y[0] && y[1] && y[2]) {
    loom_session_stats st;
    CHECK_OK(ctx, loom_session_get_stats(s[0], &st));
    double d_plain = 0, d_ref = 0;
    const float *f0 = loom_tensor_data(y[0]), *f1 = loom_tensor_data(y[1]), *f2 = loom_tensor_data(y[2]);
    for (int i = 0; i < M * N; i++) {
      d_plain = fmax(d_plain, fabs((double)f0[i] - f1[i]));
      d_ref = fmax(d_ref, fabs((double)f0[i] - f2[i]));
    }
    printf("onnx: %d initializers frozen, %d packed (%.2f MB); vs passed %.2g, vs ref %.2g\n",
           st.n_frozen_inputs, st.n_packed, (double)st.packed_bytes / 1e6, d_plain, d_ref);
    CHECK(st.n_frozen_inputs == 2);
    CHECK(st.n_packed == (loom_gemm_can_pack() ? 1 : 0));
    CHECK(d_plain <= 1e-5);
    CHECK(d_ref <= 1e-4);
  }
  for (int k = 0; k < 3; k++) {
    loom_tensor_free(y[k]);
    loom_session_free(s[k]);
  }
  loom_tensor_free(x);
  onnx_program_free(p);
  onnx_model_free(m);
  free(model.p);
  free(w);
  free(b);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, graph_text, &g));
  if (!g) return loom_test_finish("test_frozen");
  loom_test_rng rng = {77};
  loom_tensor *in[N_IN] = {NULL};
  for (int32_t i = 0; i < N_IN; i++) {
    int64_t shape[8];
    int32_t rank = 0;
    loom_dtype dt;
    CHECK_OK(ctx, loom_graph_value_type(g, loom_graph_input_value(g, i), &dt, &rank, shape));
    CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, rank, shape, &in[i]));
    fill(in[i], &rng, i == 0 ? 1.0 : 0.1);
  }
  loom_tensor *want[N_OUT] = {NULL}, *plain[N_OUT] = {NULL}, *frozen[N_OUT] = {NULL};
  loom_session *ref = NULL, *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = "ref"), &ref));
  CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &s));
  if (!ref || !s) return loom_test_finish("test_frozen");
  run(ctx, ref, in, want);
  run(ctx, s, in, plain);

  /* every weight frozen from a copy the caller then overwrites */
  const loom_tensor *x_only[N_IN] = {in[0]};
  for (int32_t i = 1; i < N_IN; i++) CHECK_OK(ctx, loom_session_freeze_input(s, i, in[i]));
  for (int32_t i = 1; i < N_IN; i++) CHECK(loom_session_input_frozen(s, i));
  CHECK(!loom_session_input_frozen(s, 0));
  loom_tensor *saved_w = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){700, 96}, &saved_w));
  memcpy(loom_tensor_data(saved_w), loom_tensor_data(in[1]), sizeof(float) * 700 * 96);
  fill(in[1], &rng, 0.1); /* the session holds its own copy */
  for (int32_t rep = 0; rep < 2; rep++) { /* packs made on the first run, reused on the second */
    free_all(frozen, N_OUT);
    CHECK_OK(ctx, loom_session_run(s, N_IN, x_only, N_OUT, frozen));
  }
  loom_session_stats st;
  CHECK_OK(ctx, loom_session_get_stats(s, &st));
  double d_plain = max_diff(frozen, plain), d_ref = max_diff(frozen, want);
  printf("frozen: %d inputs, %d packed operands (%.2f MB); vs passed %.2g, vs ref %.2g\n",
         st.n_frozen_inputs, st.n_packed, (double)st.packed_bytes / 1e6, d_plain, d_ref);
  CHECK(st.n_frozen_inputs == N_IN - 1);
  /* w (behind the epilogue), wb and the scaled m: B stored [N, K]; none
   * where the CPU has no primitive reading a packed B */
  if (loom_gemm_can_pack()) {
    CHECK(st.n_packed == 3);
    CHECK(st.packed_bytes >= (int64_t)sizeof(float) * (700 * 96 * 4 + 520 * 96));
  } else {
    CHECK(st.n_packed == 0 && st.packed_bytes == 0);
  }
  CHECK(d_plain <= 1e-5);
  CHECK(d_ref <= 1e-4);

  /* a rebind repacks: the new w's result, as passing it would give */
  CHECK_OK(ctx, loom_session_freeze_input(s, 1, in[1]));
  CHECK_OK(ctx, loom_session_get_stats(s, &st));
  CHECK(st.n_packed == 0); /* dropped until the next run */
  loom_tensor *rebound[N_OUT] = {NULL}, *want2[N_OUT] = {NULL};
  CHECK_OK(ctx, loom_session_run(s, N_IN, x_only, N_OUT, rebound));
  /* the reference with the new w passed */
  run(ctx, ref, in, want2);
  double d_new = max_diff(rebound, want2), moved = max_diff(rebound, frozen);
  printf("rebind: vs ref with the new weight %.2g, moved from the old result by %.2g\n", d_new, moved);
  CHECK(d_new <= 1e-4);
  CHECK(moved > 1e-3);

  /* bad calls */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_session_run(s, N_IN, (const loom_tensor *const *)in, N_OUT, rebound));
  CHECK(strstr(loom_ctx_error(ctx), "frozen") != NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_freeze_input(s, N_IN, in[1]));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_freeze_input(s, -1, in[1]));
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH, loom_session_freeze_input(s, 2, in[1]));
  loom_tensor *ints = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_I64, 1, (int64_t[]){700}, &ints));
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH, loom_session_freeze_input(s, 2, ints));
  CHECK(loom_session_freeze_input(NULL, 0, in[1]) == LOOM_STATUS_INVALID_ARGUMENT);
  /* a failed call changed nothing: the same result as before */
  loom_tensor *again[N_OUT] = {NULL};
  CHECK_OK(ctx, loom_session_run(s, N_IN, x_only, N_OUT, again));
  CHECK(max_diff(again, rebound) == 0.0);

  /* unfrozen: the caller's inputs again, the old w back */
  for (int32_t i = 1; i < N_IN; i++) CHECK_OK(ctx, loom_session_freeze_input(s, i, NULL));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_run(s, N_IN, x_only, N_OUT, again));
  memcpy(loom_tensor_data(in[1]), loom_tensor_data(saved_w), sizeof(float) * 700 * 96);
  free_all(again, N_OUT);
  run(ctx, s, in, again);
  CHECK(max_diff(again, plain) == 0.0);

  free_all(want, N_OUT);
  free_all(want2, N_OUT);
  free_all(plain, N_OUT);
  free_all(frozen, N_OUT);
  free_all(rebound, N_OUT);
  free_all(again, N_OUT);
  free_all(in, N_IN);
  loom_tensor_free(saved_w);
  loom_tensor_free(ints);
  loom_session_free(s);
  loom_session_free(ref);
  loom_graph_free(g);
  test_onnx_initializers(ctx, &rng);
  loom_ctx_free(ctx);
  return loom_test_finish("test_frozen");
}
