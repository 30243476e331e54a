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
    /* epilogues inside the conv (cpu_conv_post.c) and values kept in
     * channel blocks between convs and pools (cpu_conv_layout.c) */
    {"chain: conv + BN + relu, max_pool, depthwise + hardswish, 1x1 + bias, avg_pool",
     "input %x : f32[2, 5, 20, 20]\n"
     "param %w1 : f32[32, 5, 3, 3]\n"
     "param %g1 : f32[32, 1, 1]\n"
     "param %b1 : f32[32, 1, 1]\n"
     "param %m1 : f32[32, 1, 1]\n"
     "param %v1 : f32[32, 1, 1]\n"
     "param %w2 : f32[32, 1, 3, 3]\n"
     "param %w3 : f32[48, 32, 1, 1]\n"
     "param %b3 : f32[48, 1, 1]\n"
     "%c1 : f32[2, 32, 20, 20] = conv(%x, %w1, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%eps : f32[] = constant(value=0.00001)\n"
     "%v2 : f32[32, 1, 1] = mul(%v1, %v1)\n"
     "%ve : f32[32, 1, 1] = add(%v2, %eps)\n"
     "%inv : f32[32, 1, 1] = rsqrt(%ve)\n"
     "%sc : f32[32, 1, 1] = mul(%inv, %g1)\n"
     "%xc : f32[2, 32, 20, 20] = sub(%c1, %m1)\n"
     "%xs : f32[2, 32, 20, 20] = mul(%xc, %sc)\n"
     "%bn : f32[2, 32, 20, 20] = add(%xs, %b1)\n"
     "%r1 : f32[2, 32, 20, 20] = relu(%bn)\n"
     "%p1 : f32[2, 32, 10, 10] = max_pool(%r1, kernel=[2, 2], strides=[2, 2])\n"
     "%c2 : f32[2, 32, 10, 10] = conv(%p1, %w2, pads_lo=[1, 1], pads_hi=[1, 1], groups=32)\n"
     "%k6 : f32[] = constant(value=0.16666666666666666)\n"
     "%kh : f32[] = constant(value=0.5)\n"
     "%k1 : f32[] = constant(value=1)\n"
     "%k0 : f32[] = constant(value=0)\n"
     "%d : f32[2, 32, 10, 10] = mul(%c2, %k6)\n"
     "%h : f32[2, 32, 10, 10] = add(%d, %kh)\n"
     "%lo : f32[2, 32, 10, 10] = minimum(%h, %k1)\n"
     "%hs : f32[2, 32, 10, 10] = maximum(%lo, %k0)\n"
     "%a2 : f32[2, 32, 10, 10] = mul(%c2, %hs)\n"
     "%c3 : f32[2, 48, 10, 10] = conv(%a2, %w3)\n"
     "%a3 : f32[2, 48, 10, 10] = add(%c3, %b3)\n"
     "%y : f32[2, 48, 1, 1] = avg_pool(%a3, kernel=[10, 10])\n"
     "output y = %y\n"},
    {"residual block: relu(bn(conv3x3(relu(bn(conv1x1(x))))) + x), 48 channels, into a strided conv",
     "input %x : f32[1, 48, 14, 14]\n"
     "param %w1 : f32[48, 48, 1, 1]\n"
     "param %s1 : f32[48, 1, 1]\n"
     "param %t1 : f32[48, 1, 1]\n"
     "param %w2 : f32[48, 48, 3, 3]\n"
     "param %s2 : f32[48, 1, 1]\n"
     "param %t2 : f32[48, 1, 1]\n"
     "param %w3 : f32[64, 48, 1, 1]\n"
     "%c1 : f32[1, 48, 14, 14] = conv(%x, %w1)\n"
     "%m1 : f32[1, 48, 14, 14] = mul(%c1, %s1)\n"
     "%a1 : f32[1, 48, 14, 14] = add(%m1, %t1)\n"
     "%r1 : f32[1, 48, 14, 14] = relu(%a1)\n"
     "%c2 : f32[1, 48, 14, 14] = conv(%r1, %w2, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%m2 : f32[1, 48, 14, 14] = mul(%c2, %s2)\n"
     "%a2 : f32[1, 48, 14, 14] = add(%m2, %t2)\n"
     "%sum : f32[1, 48, 14, 14] = add(%a2, %x)\n"
     "%r2 : f32[1, 48, 14, 14] = relu(%sum)\n"
     "%y : f32[1, 64, 7, 7] = conv(%r2, %w3, strides=[2, 2])\n"
     "output y = %y\n"},
    {"two basic blocks on a max_pool, batch 2: each residual (the pool's output, then the first "
     "block's) kept in channel blocks, read by the conv whose epilogue adds it",
     "input %x : f32[2, 3, 20, 20]\n"
     "param %w0 : f32[32, 3, 3, 3]\n"
     "param %w1 : f32[32, 32, 3, 3]\n"
     "param %s1 : f32[32, 1, 1]\n"
     "param %w2 : f32[32, 32, 3, 3]\n"
     "param %s2 : f32[32, 1, 1]\n"
     "param %t2 : f32[32, 1, 1]\n"
     "param %w3 : f32[32, 32, 3, 3]\n"
     "param %w4 : f32[32, 32, 3, 3]\n"
     "%c0 : f32[2, 32, 20, 20] = conv(%x, %w0, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%r0 : f32[2, 32, 20, 20] = relu(%c0)\n"
     "%p : f32[2, 32, 10, 10] = max_pool(%r0, kernel=[3, 3], strides=[2, 2], pads_lo=[1, 1], "
     "pads_hi=[1, 1])\n"
     "%c1 : f32[2, 32, 10, 10] = conv(%p, %w1, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%m1 : f32[2, 32, 10, 10] = mul(%c1, %s1)\n"
     "%r1 : f32[2, 32, 10, 10] = relu(%m1)\n"
     "%c2 : f32[2, 32, 10, 10] = conv(%r1, %w2, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%m2 : f32[2, 32, 10, 10] = mul(%c2, %s2)\n"
     "%a2 : f32[2, 32, 10, 10] = add(%m2, %t2)\n"
     "%sum2 : f32[2, 32, 10, 10] = add(%a2, %p)\n"
     "%y2 : f32[2, 32, 10, 10] = relu(%sum2)\n"
     "%c3 : f32[2, 32, 10, 10] = conv(%y2, %w3, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%r3 : f32[2, 32, 10, 10] = relu(%c3)\n"
     "%c4 : f32[2, 32, 10, 10] = conv(%r3, %w4, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%sum4 : f32[2, 32, 10, 10] = add(%y2, %c4)\n"
     "%y4 : f32[2, 32, 10, 10] = relu(%sum4)\n"
     "%y : f32[2, 32, 1, 1] = avg_pool(%y4, kernel=[10, 10])\n"
     "output y = %y\n"},
    {"residual of 20 channels (a block and a part), batch 2: relu(conv(x) * s + x)",
     "input %x : f32[2, 20, 9, 9]\n"
     "param %w : f32[20, 20, 3, 3]\n"
     "param %s : f32[20, 1, 1]\n"
     "%c : f32[2, 20, 9, 9] = conv(%x, %w, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%m : f32[2, 20, 9, 9] = mul(%c, %s)\n"
     "%a : f32[2, 20, 9, 9] = add(%m, %x)\n"
     "%y : f32[2, 20, 9, 9] = relu(%a)\n"
     "output y = %y\n"},
    {"20 channels (not a block) + bias + sigmoid, then a dilated grouped conv",
     "input %x : f32[2, 8, 15, 13]\n"
     "param %w1 : f32[20, 8, 3, 3]\n"
     "param %b1 : f32[20, 1, 1]\n"
     "param %w2 : f32[20, 5, 3, 3]\n"
     "%c1 : f32[2, 20, 15, 13] = conv(%x, %w1, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%a1 : f32[2, 20, 15, 13] = add(%c1, %b1)\n"
     "%s1 : f32[2, 20, 15, 13] = sigmoid(%a1)\n"
     "%y : f32[2, 20, 11, 9] = conv(%s1, %w2, pads_lo=[0, 0], pads_hi=[0, 0], dilations=[2, 2], "
     "groups=4)\n"
     "output y = %y\n"},
    {"conv output read past its epilogue (by another conv): + bias + relu into a conv",
     "input %x : f32[1, 16, 12, 12]\n"
     "param %w1 : f32[32, 16, 3, 3]\n"
     "param %b1 : f32[32, 1, 1]\n"
     "param %w2 : f32[32, 32, 1, 1]\n"
     "param %w3 : f32[32, 32, 1, 1]\n"
     "%c1 : f32[1, 32, 12, 12] = conv(%x, %w1, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%a1 : f32[1, 32, 12, 12] = add(%c1, %b1)\n"
     "%r1 : f32[1, 32, 12, 12] = relu(%a1)\n"
     "%c2 : f32[1, 32, 12, 12] = conv(%r1, %w2)\n"
     "%c3 : f32[1, 32, 12, 12] = conv(%c1, %w3)\n"
     "%y : f32[1, 32, 12, 12] = add(%c2, %c3)\n"
     "output y = %y\n"},
    {"batch statistics (training BN) after a conv, then a conv",
     "input %x : f32[2, 16, 10, 10]\n"
     "param %w1 : f32[32, 16, 3, 3]\n"
     "param %w2 : f32[32, 32, 3, 3]\n"
     "%c1 : f32[2, 32, 10, 10] = conv(%x, %w1, pads_lo=[1, 1], pads_hi=[1, 1])\n"
     "%mu : f32[1, 32, 1, 1] = reduce_mean(%c1, axes=[0, 2, 3], keepdims=true)\n"
     "%xc : f32[2, 32, 10, 10] = sub(%c1, %mu)\n"
     "%sq : f32[2, 32, 10, 10] = mul(%xc, %xc)\n"
     "%var : f32[1, 32, 1, 1] = reduce_mean(%sq, axes=[0, 2, 3], keepdims=true)\n"
     "%eps : f32[] = constant(value=0.00001)\n"
     "%ve : f32[1, 32, 1, 1] = add(%var, %eps)\n"
     "%inv : f32[1, 32, 1, 1] = rsqrt(%ve)\n"
     "%n : f32[2, 32, 10, 10] = mul(%xc, %inv)\n"
     "%r : f32[2, 32, 10, 10] = relu(%n)\n"
     "%y : f32[2, 32, 10, 10] = conv(%r, %w2, pads_lo=[1, 1], pads_hi=[1, 1])\n"
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

/* A training step: conv + batch-statistics BN + relu, max_pool, conv +
 * bias + relu, a sum as the loss, and its gradients wrt the input and
 * every weight (conv_transpose, conv_grad_weight, max_pool_grad): the cpu
 * backend (stitch) against the reference, every output. The forward
 * convs' outputs are read by the backward pass, so nothing there may run
 * inside a conv or stay blocked where a kernel reads it. */
static void test_training(void) {
  static const char *text =
      "input %x : f32[2, 8, 12, 12]\n"
      "param %w1 : f32[32, 8, 3, 3]\n"
      "param %w2 : f32[32, 32, 3, 3]\n"
      "param %b2 : f32[32, 1, 1]\n"
      "%c1 : f32[2, 32, 12, 12] = conv(%x, %w1, pads_lo=[1, 1], pads_hi=[1, 1])\n"
      "%mu : f32[1, 32, 1, 1] = reduce_mean(%c1, axes=[0, 2, 3], keepdims=true)\n"
      "%xc : f32[2, 32, 12, 12] = sub(%c1, %mu)\n"
      "%sq : f32[2, 32, 12, 12] = mul(%xc, %xc)\n"
      "%var : f32[1, 32, 1, 1] = reduce_mean(%sq, axes=[0, 2, 3], keepdims=true)\n"
      "%eps : f32[] = constant(value=0.00001)\n"
      "%ve : f32[1, 32, 1, 1] = add(%var, %eps)\n"
      "%inv : f32[1, 32, 1, 1] = rsqrt(%ve)\n"
      "%n : f32[2, 32, 12, 12] = mul(%xc, %inv)\n"
      "%r : f32[2, 32, 12, 12] = relu(%n)\n"
      "%p : f32[2, 32, 6, 6] = max_pool(%r, kernel=[2, 2], strides=[2, 2])\n"
      "%c2 : f32[2, 32, 6, 6] = conv(%p, %w2, pads_lo=[1, 1], pads_hi=[1, 1])\n"
      "%a2 : f32[2, 32, 6, 6] = add(%c2, %b2)\n"
      "%r2 : f32[2, 32, 6, 6] = relu(%a2)\n"
      "%q : f32[2, 32, 6, 6] = mul(%r2, %r2)\n"
      "%loss : f32[] = reduce_sum(%q, axes=[0, 1, 2, 3])\n"
      "output loss = %loss\n";
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, text, &g));
  if (!g) return;
  loom_value wrt[4], grads[4];
  for (int32_t i = 0; i < 4; i++) wrt[i] = loom_graph_input_value(g, i);
  CHECK_OK(ctx, loom_graph_grad(g, loom_graph_output_value(g, 0), 4, wrt, grads));
  static const char *names[4] = {"dx", "dw1", "dw2", "db2"};
  for (int32_t i = 0; i < 4; i++) CHECK_OK(ctx, loom_graph_output(g, names[i], grads[i]));
  loom_tensor **in = loom_test_uniform_inputs(ctx, g, 0x7a1);
  loom_tensor *ref[5] = {0}, *got[5] = {0};
  loom_session *s = NULL;
  const char *backends[2] = {"ref", "cpu"};
  loom_tensor **outs[2] = {ref, got};
  for (int b = 0; b < 2; b++) {
    loom_session_options o = LOOM_SESSION_OPTIONS(.backend = backends[b], .fusion = LOOM_FUSION_STITCH);
    CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
    if (s) CHECK_OK(ctx, loom_session_run(s, g->n_inputs, (const loom_tensor *const *)in, 5, outs[b]));
    loom_session_free(s);
    s = NULL;
  }
  for (int32_t o = 0; o < 5; o++) {
    CHECK(ref[o] && got[o]);
    if (!ref[o] || !got[o]) continue;
    const float *a = loom_tensor_data(got[o]), *r = loom_tensor_data(ref[o]);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < loom_tensor_numel(ref[o]); i++) scale = fmax(scale, fabs((double)r[i]));
    for (int64_t i = 0; i < loom_tensor_numel(ref[o]); i++) {
      double e = fabs((double)a[i] - (double)r[i]) / (1.0 + scale);
      worst = e > worst || isnan(e) ? e : worst;
    }
    CHECK(worst <= 1e-4);
    printf("training step, output %d: max error %.2e (of the largest magnitude)\n", o, worst);
    loom_tensor_free(ref[o]);
    loom_tensor_free(got[o]);
  }
  loom_test_free_tensors(in, g->n_inputs);
  loom_graph_free(g);
}

int main(void) {
  if (loom_ctx_new(&ctx)) return 1;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(&cases[i]);
  test_training();
  loom_ctx_free(ctx);
  return loom_test_finish("test_conv_layouts");
}
