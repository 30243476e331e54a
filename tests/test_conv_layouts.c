/* The cpu backend's convolutions and pools (cpu_conv.c) on the layouts
 * oneDNN picks: channel counts that are not a multiple of the channel block,
 * depthwise with and without a multiplier, grouped, dilated, strided,
 * asymmetric padding, 1-D and 3-D, batches, several blocks of output
 * channels, with and without an epilogue after them (stitch). Each graph
 * runs on the cpu backend (eager and stitch) against the reference
 * backend, and again on one thread, which must give the same bits (the
 * tasks depend on the shapes only). */
#include "common.h"

#include "ir/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

typedef struct conv_case {
  const char *name, *text;
} conv_case;

static const conv_case cases[] = {
    {"24 -> 40 channels, batch 2, + batchnorm + relu",
     "input %x : f32[2, 24, 17, 19]\n"
     "param %w : f32[40, 24, 3, 3]\n"
     "param %s : f32[40, 1, 1]\n"
     "param %t : f32[40, 1, 1]\n"
     "%c : f32[2, 40, 17, 19] = conv(%x, %w, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%m : f32[2, 40, 17, 19] = mul(%c, %s)\n"
     "%a : f32[2, 40, 17, 19] = add(%m, %t)\n"
     "%y : f32[2, 40, 17, 19] = relu(%a)\n"
     "output y = %y\n"},
    {"depthwise 48, strided, + relu",
     "input %x : f32[1, 48, 30, 30]\n"
     "param %w : f32[48, 1, 3, 3]\n"
     "%c : f32[1, 48, 15, 15] = conv(%x, %w, strides=[2, 2], pads_lo=[1, 1], pads_hi=[1, 1], "
     "groups=48)\n"
     "%y : f32[1, 48, 15, 15] = relu(%c)\n"
     "output y = %y\n"},
    {"depthwise 200 (blocks of channels)",
     "input %x : f32[1, 200, 12, 12]\n"
     "param %w : f32[200, 1, 3, 3]\n"
     "%y : f32[1, 200, 12, 12] = conv(%x, %w, pads_lo=[1, 1], pads_hi=[1, 1], groups=200)\n"
     "output y = %y\n"},
    {"depthwise, multiplier 2",
     "input %x : f32[2, 20, 15, 15]\n"
     "param %w : f32[40, 1, 3, 3]\n"
     "%y : f32[2, 40, 13, 13] = conv(%x, %w, groups=20)\n"
     "output y = %y\n"},
    {"4 groups, dilated",
     "input %x : f32[1, 32, 21, 21]\n"
     "param %w : f32[64, 8, 3, 3]\n"
     "%y : f32[1, 64, 21, 21] = conv(%x, %w, pads_lo=[2, 2], pads_hi=[2, 2], dilations=[2, 2], "
     "groups=4)\n"
     "output y = %y\n"},
    {"1x1, 128 -> 200 (blocks of channels), + tanh",
     "input %x : f32[1, 128, 14, 14]\n"
     "param %w : f32[200, 128, 1, 1]\n"
     "%c : f32[1, 200, 14, 14] = conv(%x, %w)\n"
     "%y : f32[1, 200, 14, 14] = tanh(%c)\n"
     "output y = %y\n"},
    {"3 -> 32 channels, stride 3, kernel 2x4, asymmetric padding",
     "input %x : f32[1, 3, 40, 41]\n"
     "param %w : f32[32, 3, 2, 4]\n"
     "%y : f32[1, 32, 14, 14] = conv(%x, %w, strides=[3, 3], pads_lo=[1, 0], pads_hi=[0, 2])\n"
     "output y = %y\n"},
    {"1-D",
     "input %x : f32[2, 16, 50]\n"
     "param %w : f32[36, 16, 5]\n"
     "%y : f32[2, 36, 50] = conv(%x, %w, pads_lo=[2], pads_hi=[2])\n"
     "output y = %y\n"},
    {"3-D",
     "input %x : f32[1, 8, 6, 10, 10]\n"
     "param %w : f32[20, 8, 3, 3, 3]\n"
     "%y : f32[1, 20, 4, 8, 8] = conv(%x, %w)\n"
     "output y = %y\n"},
    /* the pools on blocked layouts too (cpu_conv.c) */
    {"max_pool, 40 channels, dilated, ceil_mode",
     "input %x : f32[2, 40, 16, 14]\n"
     "%y : f32[2, 40, 9, 7] = max_pool(%x, kernel=[3, 2], strides=[2, 2], pads_lo=[1, 0], "
     "pads_hi=[1, 1], dilations=[1, 2], ceil_mode=true)\n"
     "output y = %y\n"},
    {"avg_pool, 80 channels",
     "input %x : f32[1, 80, 12, 12]\n"
     "%y : f32[1, 80, 6, 6] = avg_pool(%x, kernel=[3, 3], strides=[2, 2], pads_lo=[1, 1], "
     "pads_hi=[1, 1])\n"
     "output y = %y\n"},
    {"avg_pool, 24 channels, count_include_pad",
     "input %x : f32[1, 24, 11, 11]\n"
     "%y : f32[1, 24, 6, 6] = avg_pool(%x, kernel=[3, 3], strides=[2, 2], pads_lo=[1, 1], "
     "pads_hi=[1, 1], count_include_pad=true)\n"
     "output y = %y\n"},
};

/* g on backend / fusion, outputs into out; NULL entries on failure. */
static void run(const loom_graph *g, const char *backend, loom_fusion_mode fusion,
                loom_tensor *const *in, loom_tensor **out) {
  loom_session *s = NULL;
  loom_session_options o = LOOM_SESSION_OPTIONS(.backend = backend, .fusion = fusion);
  CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
  if (!s) return;
  CHECK_OK(ctx, loom_session_run(s, g->n_inputs, (const loom_tensor *const *)in, 1, out));
  loom_session_free(s);
}

static void test_case(const conv_case *c) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, c->text, &g));
  if (!g) return;
  loom_tensor **in = loom_test_uniform_inputs(ctx, g, 0xc0 + (uint64_t)strlen(c->name));
  loom_tensor *ref = NULL;
  run(g, "ref", LOOM_FUSION_STITCH, in, &ref);
  static const loom_fusion_mode modes[] = {LOOM_FUSION_EAGER, LOOM_FUSION_STITCH};
  for (int m = 0; ref && m < 2; m++) {
    loom_tensor *got = NULL, *one = NULL;
    run(g, "cpu", modes[m], in, &got);
    CHECK_OK(ctx, loom_ctx_set_threads(ctx, 1));
    run(g, "cpu", modes[m], in, &one);
    loom_ctx_set_threads(ctx, 0);
    CHECK(got && one);
    if (!got || !one) {
      loom_tensor_free(got);
      loom_tensor_free(one);
      continue;
    }
    const float *a = loom_tensor_data(got), *b = loom_tensor_data(ref);
    int64_t n = loom_tensor_numel(ref);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
      double e = fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i]));
      worst = e > worst || isnan(e) ? e : worst;
    }
    /* f32 sums in the kernels' order against the reference's doubles */
    CHECK(loom_tensor_numel(got) == n && worst <= 2e-5);
    CHECK(memcmp(a, loom_tensor_data(one), sizeof(float) * (size_t)n) == 0);
    printf("%s (%s): max error %.2e\n", c->name, loom_fusion_mode_name(modes[m]), worst);
    loom_tensor_free(got);
    loom_tensor_free(one);
  }
  loom_tensor_free(ref);
  loom_test_free_tensors(in, g->n_inputs);
  loom_graph_free(g);
}

int main(void) {
  if (loom_ctx_new(&ctx)) return 1;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(&cases[i]);
  loom_ctx_free(ctx);
  return loom_test_finish("test_conv_layouts");
}
