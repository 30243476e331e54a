/* Convolutions with frozen weights (loom_session_freeze_input): their
 * weights reordered (and scaled by the per-channel affine folded into the
 * conv) once and reused give, bit for bit, what the same session gives
 * with the weights passed on every run, and what the reference gives; a
 * rebind of a weight or of the folded scale changes the result to the new
 * data's; weights passed as plain inputs are not packed. */
#include "common.h"

#include <math.h>
#include <string.h>

/* a conv + per-channel affine + relu (scale folded into the weights'
 * reorder), then a 1x1 conv into 200 channels (blocks of channels, the
 * last shorter) and a depthwise conv */
static const char *graph_text =
    "input %x : f32[2, 24, 17, 19]\n"
    "param %w : f32[40, 24, 3, 3]\n"
    "param %s : f32[40, 1, 1]\n"
    "param %t : f32[40, 1, 1]\n"
    "param %v : f32[200, 40, 1, 1]\n"
    "param %d : f32[200, 1, 3, 3]\n"
    "%c : f32[2, 40, 17, 19] = conv(%x, %w, pads_lo=[1, 1], pads_hi=[1, 1])\n"
    "%m : f32[2, 40, 17, 19] = mul(%c, %s)\n"
    "%a : f32[2, 40, 17, 19] = add(%m, %t)\n"
    "%h : f32[2, 40, 17, 19] = relu(%a)\n"
    "%e : f32[2, 200, 17, 19] = conv(%h, %v)\n"
    "%y : f32[2, 200, 17, 19] = conv(%e, %d, pads_lo=[1, 1], pads_hi=[1, 1], groups=200)\n"
    "output y = %y\n";

#define N_IN 6

static void fill(loom_tensor *t, loom_test_rng *rng, double lo, double hi) {
  float *p = loom_tensor_data(t);
  for (int64_t i = 0; i < loom_tensor_numel(t); i++)
    p[i] = (float)loom_test_uniform(rng, lo, hi);
}

static double max_diff(const loom_tensor *a, const loom_tensor *b) {
  const float *x = loom_tensor_data(a), *y = loom_tensor_data(b);
  double worst = 0;
  for (int64_t i = 0; i < loom_tensor_numel(a); i++)
    worst = fmax(worst, fabs((double)x[i] - y[i]) / fmax(1.0, fabs((double)y[i])));
  return worst;
}

static bool same_bits(const loom_tensor *a, const loom_tensor *b) {
  return loom_tensor_numel(a) == loom_tensor_numel(b) &&
         !memcmp(loom_tensor_data(a), loom_tensor_data(b),
                 sizeof(float) * (size_t)loom_tensor_numel(a));
}

static loom_tensor *run(loom_ctx *ctx, loom_session *s, const loom_tensor *const *in) {
  loom_tensor *out = NULL;
  CHECK_OK(ctx, loom_session_run(s, N_IN, in, 1, &out));
  return out;
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, graph_text, &g));
  if (!g) return loom_test_finish("test_conv_frozen");
  loom_test_rng rng = {31};
  loom_tensor *in[N_IN] = {NULL};
  for (int32_t i = 0; i < N_IN; i++) {
    int64_t shape[8];
    int32_t rank = 0;
    loom_dtype dt;
    CHECK_OK(ctx, loom_graph_value_type(g, loom_graph_input_value(g, i), &dt, &rank, shape));
    CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, rank, shape, &in[i]));
    fill(in[i], &rng, i == 2 ? 0.5 : -0.5, i == 2 ? 1.5 : 0.5); /* s: a BN-like scale */
  }
  loom_session *ref = NULL, *plain = NULL, *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, &LOOM_SESSION_OPTIONS(.backend = "ref"), &ref));
  CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &plain));
  CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &s));
  if (!ref || !plain || !s) return loom_test_finish("test_conv_frozen");
  const loom_tensor *const *all = (const loom_tensor *const *)in;
  loom_tensor *want = run(ctx, ref, all), *passed = run(ctx, plain, all);
  loom_session_stats st;
  CHECK_OK(ctx, loom_session_get_stats(plain, &st));
  CHECK(st.n_packed == 0); /* weights passed: reordered on every run */

  const loom_tensor *x_only[N_IN] = {in[0]};
  for (int32_t i = 1; i < N_IN; i++)
    CHECK_OK(ctx, loom_session_freeze_input(s, i, in[i]));
  loom_tensor *first = run(ctx, s, x_only), *second = run(ctx, s, x_only);
  CHECK_OK(ctx, loom_session_get_stats(s, &st));
  printf("frozen: %d packed (%.1f KB); vs passed %s, vs ref %.2g\n", st.n_packed,
         (double)st.packed_bytes / 1e3, same_bits(second, passed) ? "bit for bit" : "differs",
         max_diff(second, want));
  /* the convs whose weights are reordered: 40 * 24 * 9 + 200 * 40 floats at least */
  CHECK(st.n_packed >= 2);
  CHECK(st.packed_bytes >= (int64_t)sizeof(float) * (40 * 24 * 9 + 200 * 40));
  CHECK(same_bits(first, passed));
  CHECK(same_bits(second, passed));
  CHECK(max_diff(second, want) <= 1e-4);

  /* rebinds: new weights, then a new folded scale; each run matches the
   * reference with the new data, and the passed-weights session bit for bit */
  const int32_t rebind[2] = {1, 2};
  loom_tensor *prev = second;
  second = NULL;
  for (int32_t r = 0; r < 2; r++) {
    int32_t i = rebind[r];
    fill(in[i], &rng, i == 2 ? 0.5 : -0.5, i == 2 ? 1.5 : 0.5);
    CHECK_OK(ctx, loom_session_freeze_input(s, i, in[i]));
    CHECK_OK(ctx, loom_session_get_stats(s, &st));
    CHECK(st.n_packed == 0); /* dropped until the next run */
    loom_tensor *got = run(ctx, s, x_only), *want2 = run(ctx, ref, all),
                *passed2 = run(ctx, plain, all);
    double moved = max_diff(got, prev);
    printf("rebind input %d: vs ref %.2g, moved by %.2g, vs passed %s\n", i, max_diff(got, want2),
           moved, same_bits(got, passed2) ? "bit for bit" : "differs");
    CHECK(max_diff(got, want2) <= 1e-4);
    CHECK(moved > 1e-3);
    CHECK(same_bits(got, passed2));
    loom_tensor_free(prev);
    loom_tensor_free(want2);
    loom_tensor_free(passed2);
    prev = got;
  }
  loom_tensor_free(prev);
  loom_tensor_free(first);
  loom_tensor_free(want);
  loom_tensor_free(passed);
  loom_session_free(s);
  loom_session_free(plain);
  loom_session_free(ref);
  for (int32_t i = 0; i < N_IN; i++)
    loom_tensor_free(in[i]);
  loom_graph_free(g);
  int rc = loom_test_finish("test_conv_frozen");
  loom_ctx_free(ctx);
  return rc;
}
