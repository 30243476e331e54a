/* A conv's epilogue kernel as oneDNN post-ops (runtime/cpu/cpu_conv_post.c):
 * each graph below is fused (stitch) and the kernel that reads the conv's
 * output is translated; the chain it gives (scale, bias, post-ops with
 * their per-channel operands), applied here in plain C to random values,
 * must equal what the kernel IR interpreter computes from the same
 * arguments. Kernels the chain cannot say (a row reduction, a select, a
 * second use of the conv output) must be refused. */
#include "common.h"

#include "fusion/fusion.h"
#include "ir/graph.h"
#include "kernel/interp.h"
#include "perf/machine.h"
#include "runtime/cpu/cpu_conv_post.h"

#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

typedef struct post_case {
  const char *name;
  bool translates;
  int32_t n_post; /* post-ops after the scale and bias (when it translates) */
  bool scale, bias;
  const char *text; /* %c is the conv's output */
} post_case;

#define CONV20 \
  "input %x : f32[2, 6, 9, 9]\n" \
  "param %w : f32[20, 6, 3, 3]\n" \
  "%c : f32[2, 20, 9, 9] = conv(%x, %w, pads_lo=[1, 1], pads_hi=[1, 1])\n"
#define BN20 \
  "param %b : f32[20, 1, 1]\n" \
  "param %mean : f32[20, 1, 1]\n" \
  "param %var : f32[20, 1, 1]\n" \
  "param %gamma : f32[20, 1, 1]\n" \
  "param %beta : f32[20, 1, 1]\n" \
  "%cb : f32[2, 20, 9, 9] = add(%c, %b)\n" \
  "%eps : f32[] = constant(value=0.001)\n" \
  "%ve : f32[20, 1, 1] = add(%var, %eps)\n" \
  "%inv : f32[20, 1, 1] = rsqrt(%ve)\n" \
  "%sc : f32[20, 1, 1] = mul(%inv, %gamma)\n" \
  "%xc : f32[2, 20, 9, 9] = sub(%cb, %mean)\n" \
  "%xs : f32[2, 20, 9, 9] = mul(%xc, %sc)\n" \
  "%bn : f32[2, 20, 9, 9] = add(%xs, %beta)\n"

static const post_case cases[] = {
    {"bias + batchnorm + relu", true, 1, true, true,
     CONV20 BN20 "%y : f32[2, 20, 9, 9] = relu(%bn)\noutput y = %y\n"},
    {"bias only", true, 0, false, true,
     CONV20 "param %b : f32[20, 1, 1]\n%y : f32[2, 20, 9, 9] = add(%c, %b)\noutput y = %y\n"},
    {"batchnorm + hardswish (x * clamp(x / 6 + 1/2, 0, 1))", true, 1, true, true,
     CONV20 BN20
     "%k6 : f32[] = constant(value=6)\n%kh : f32[] = constant(value=0.5)\n"
     "%k1 : f32[] = constant(value=1)\n%k0 : f32[] = constant(value=0)\n"
     "%d : f32[2, 20, 9, 9] = div(%bn, %k6)\n%h : f32[2, 20, 9, 9] = add(%d, %kh)\n"
     "%lo : f32[2, 20, 9, 9] = minimum(%h, %k1)\n%hs : f32[2, 20, 9, 9] = maximum(%lo, %k0)\n"
     "%y : f32[2, 20, 9, 9] = mul(%bn, %hs)\noutput y = %y\n"},
    {"swish, then a per-channel shift and max", true, 3, false, false,
     CONV20 "param %t : f32[20, 1, 1]\n"
     "%s : f32[2, 20, 9, 9] = sigmoid(%c)\n%sw : f32[2, 20, 9, 9] = mul(%s, %c)\n"
     "%a : f32[2, 20, 9, 9] = add(%sw, %t)\n%z : f32[] = constant(value=0.25)\n"
     "%y : f32[2, 20, 9, 9] = maximum(%a, %z)\noutput y = %y\n"},
    {"residual: 1 - tanh(relu(bn(conv) + r))", true, 5, true, true,
     CONV20 BN20 "input %r : f32[2, 20, 9, 9]\n"
     "%s : f32[2, 20, 9, 9] = add(%bn, %r)\n%q : f32[2, 20, 9, 9] = relu(%s)\n"
     "%t : f32[2, 20, 9, 9] = tanh(%q)\n%one : f32[] = constant(value=1)\n"
     "%y : f32[2, 20, 9, 9] = sub(%one, %t)\noutput y = %y\n"},
    {"a row reduction (softmax-like): refused", false, 0, false, false,
     CONV20 "%m : f32[2, 20, 9, 1] = reduce_max(%c, axes=[3], keepdims=true)\n"
     "%y : f32[2, 20, 9, 9] = sub(%c, %m)\noutput y = %y\n"},
    {"x * x: refused", false, 0, false, false,
     CONV20 "%y : f32[2, 20, 9, 9] = mul(%c, %c)\noutput y = %y\n"},
    {"a per-column operand: refused", false, 0, false, false,
     CONV20 "param %col : f32[9]\n%y : f32[2, 20, 9, 9] = add(%c, %col)\noutput y = %y\n"},
};

/* dnnl's eltwise algs the translator emits, in double. */
static double eltwise(int32_t alg, double x, double alpha) {
  switch (alg) {
  case dnnl_eltwise_relu: return x > 0 ? x : alpha * x;
  case dnnl_eltwise_logistic: return 1 / (1 + exp(-x));
  case dnnl_eltwise_tanh: return tanh(x);
  case dnnl_eltwise_exp: return exp(x);
  case dnnl_eltwise_abs: return fabs(x);
  case dnnl_eltwise_sqrt: return sqrt(x);
  case dnnl_eltwise_log: return log(x);
  case dnnl_eltwise_hardswish: return x * fmin(fmax(x / 6 + 0.5, 0), 1);
  case dnnl_eltwise_swish: return x / (1 + exp(-alpha * x));
  default: return NAN;
  }
}

static double binary(int32_t alg, double a, double b) {
  switch (alg) {
  case dnnl_binary_add: return a + b;
  case dnnl_binary_sub: return a - b;
  case dnnl_binary_mul: return a * b;
  case dnnl_binary_div: return a / b;
  case dnnl_binary_max: return fmax(a, b);
  case dnnl_binary_min: return fmin(a, b);
  default: return NAN;
  }
}

static void test_case(const post_case *pc) {
  loom_graph *g = NULL, *d = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, pc->text, &g));
  if (!g) return;
  CHECK_OK(ctx, loom_graph_decompose(g, &d));
  loom_graph_free(g);
  if (!d) return;
  int32_t c = loom_graph_find_value(d, "c");
  loom_machine mc;
  loom_machine_default(&mc);
  loom_fusion_options fo = {.mode = LOOM_FUSION_STITCH, .machine = &mc};
  loom_program p;
  CHECK_OK(ctx, loom_fusion_compile(ctx, d, &fo, &p));
  const loom_kernel *k = NULL;
  for (int32_t ki = 0; ki < p.n_kernels && c >= 0; ki++)
    for (int32_t a = 0; a < p.kernels[ki].n_args; a++)
      if (!p.kernels[ki].args[a].is_output && p.kernels[ki].args[a].value == c) k = &p.kernels[ki];
  CHECK(k != NULL);
  if (!k) {
    loom_program_clear(&p);
    loom_graph_free(d);
    return;
  }
  enum { N = 2, CH = 20, PLANE = 81, TOTAL = N * CH * PLANE };
  loom_test_rng rng = {0x5eed + (uint64_t)strlen(pc->name)};
  void *args[32] = {0};
  int32_t c_arg = -1, out_arg = -1;
  for (int32_t a = 0; a < k->n_args && a < 32; a++) {
    args[a] = calloc((size_t)k->args[a].numel + 1, sizeof(float));
    if (k->args[a].value == c) c_arg = a;
    if (k->args[a].is_output) out_arg = a;
    bool per_channel = k->args[a].numel == CH; /* statistics: variances > 0 */
    for (int64_t i = 0; !k->args[a].is_output && i < k->args[a].numel; i++)
      ((float *)args[a])[i] = (float)(per_channel ? loom_test_uniform(&rng, 0.1, 2.0)
                                                  : loom_test_uniform(&rng, -3.0, 3.0));
  }
  loom_conv_post post;
  bool ok = loom_conv_post_from_kernel(k, args, c, N, CH, PLANE, &post);
  CHECK(ok == pc->translates);
  if (ok) {
    CHECK(post.n == pc->n_post && (post.scale != NULL) == pc->scale &&
          (post.bias != NULL) == pc->bias && post.out == args[out_arg]);
    /* the chain in double against the interpreter */
    CHECK_OK(ctx, loom_kernel_interpret(ctx, k, args));
    const float *cv = args[c_arg], *want = args[out_arg];
    double worst = 0;
    for (int64_t i = 0; i < TOTAL; i++) {
      int64_t ch = i / PLANE % CH;
      double v = cv[i];
      if (post.scale) v *= post.scale[ch];
      if (post.bias) v += post.bias[ch];
      for (int32_t q = 0; q < post.n; q++) {
        const loom_conv_post_op *o = &post.op[q];
        if (o->kind == LOOM_CONV_POST_ELTWISE) v = eltwise(o->alg, v, o->alpha);
        else v = binary(o->alg, v, o->kind == LOOM_CONV_POST_CHANNEL ? o->chan[ch] : o->tensor[i]);
      }
      double e = fabs(v - want[i]) / (1 + fabs(want[i]));
      worst = e > worst || isnan(e) ? e : worst;
    }
    CHECK(worst <= 1e-5);
    printf("%s: %d post-ops, max error %.2e\n", pc->name, post.n, worst);
    /* the structure alone gives the same chain */
    loom_conv_post bare;
    CHECK(loom_conv_post_from_kernel(k, NULL, c, N, CH, PLANE, &bare));
    CHECK(bare.n == post.n && (bare.scale != NULL) == (post.scale != NULL) && !bare.out);
    for (int32_t q = 0; q < bare.n && q < post.n; q++)
      CHECK(bare.op[q].kind == post.op[q].kind && bare.op[q].alg == post.op[q].alg);
    loom_conv_post_free(&bare);
    loom_conv_post_free(&post);
  } else {
    CHECK(post.n == 0 && !post.scale && !post.bias);
    printf("%s: refused\n", pc->name);
  }
  for (int32_t a = 0; a < k->n_args && a < 32; a++) free(args[a]);
  loom_program_clear(&p);
  loom_graph_free(d);
}

int main(void) {
  if (loom_ctx_new(&ctx)) return 1;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(&cases[i]);
  loom_ctx_free(ctx);
  return loom_test_finish("test_conv_post");
}
