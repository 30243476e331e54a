/*
 * Outputs the caller provides are computed in place (zero copy) unless they
 * overlap an input or another output; either way the results are right,
 * and the session is left ready for the next run.
 */
#include "common.h"

#include "ir/build.h"

static void fill(loom_tensor *t, float base) {
  float *p = loom_tensor_data(t);
  for (int64_t i = 0; i < loom_tensor_numel(t); i++) p[i] = base + (float)i;
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  int32_t x, w;
  const int64_t shape[2] = {64, 33};
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, shape, &x));
  CHECK_OK(ctx, loom_graph_param(g, "w", LOOM_DTYPE_F32, 2, shape, &w));
  /* y = x * 2 + w; w' = w - 1 (an in-place style update); s = sum(y) */
  int32_t y = lb_add(g, lb_mul(g, x, lb_scalar(g, LOOM_DTYPE_F32, 2)), w);
  int32_t w2 = lb_sub(g, w, lb_scalar(g, LOOM_DTYPE_F32, 1));
  int32_t sum = lb_sum(g, y, 0, NULL, false);
  CHECK_OK(ctx, loom_build_status(g));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  CHECK_OK(ctx, loom_graph_output(g, "w_new", w2));
  CHECK_OK(ctx, loom_graph_output(g, "sum", sum));

  static const loom_fusion_mode modes[] = {LOOM_FUSION_EAGER, LOOM_FUSION_STITCH};
  for (int m = 0; m < 2; m++) {
    loom_session *s = NULL;
    loom_session_options o = LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = modes[m]);
    CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
    loom_tensor *xt = NULL, *wt = NULL, *yt = NULL, *st = NULL;
    CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, shape, &xt));
    CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, shape, &wt));
    CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, shape, &yt));
    CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 0, NULL, &st));
    if (!s || !xt || !wt || !yt || !st) break;
    for (int run = 0; run < 3; run++) {
      fill(xt, (float)run);
      if (run == 0) fill(wt, 100.0f);
      /* w_new written over w itself: must not be computed in place */
      loom_tensor *outs[3] = {yt, wt, st};
      const loom_tensor *ins[2] = {xt, wt};
      CHECK_OK(ctx, loom_session_run(s, 2, ins, 3, outs));
      const float *yv = loom_tensor_data(yt), *wv = loom_tensor_data(wt);
      double total = 0;
      int bad = 0;
      for (int64_t i = 0; i < 64 * 33; i++) {
        float xv = (float)run + (float)i, wold = 100.0f + (float)i - (float)run;
        bad += yv[i] != xv * 2 + wold;
        bad += wv[i] != wold - 1;
        total += (double)(xv * 2 + wold);
      }
      CHECK(bad == 0);
      float sv = *(const float *)loom_tensor_data(st);
      CHECK(sv > 0.999 * total && sv < 1.001 * total);
    }
    loom_tensor_free(xt);
    loom_tensor_free(wt);
    loom_tensor_free(yt);
    loom_tensor_free(st);
    loom_session_free(s);
  }
  loom_graph_free(g);
  loom_ctx_free(ctx);
  return loom_test_finish("test_session_outputs");
}
