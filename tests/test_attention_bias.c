/* Attention with an additive bias (ops/attention_bias.h): the composite
 * with a bias of several broadcast shapes (a [Sk] padding mask, BERT's
 * [B, 1, 1, Sk], a learned [H, Sq, Sk] or [1, H, Sq, Sk] position bias,
 * -inf entries, a fully masked row), causal on and off, dropout on and
 * off, runs as flash_attention on the cpu backend (stitch and eager) and
 * on the reference backend (the flash ops' double kernels), against the
 * decomposition on the reference backend: outputs and the gradients of
 * q, k, v and the bias. The learned bias's gradient is also checked by
 * finite differences, the attention pass's primitive form (scores + bias
 * from a padding mask) is recognised, heads split from a projection run
 * with q, k, v read in place beside the bias (its gradient dropped when
 * nothing reads it), and a bias that does not broadcast is a clear
 * error. */
#include "common.h"

#include "ir/graph.h"
#include "ops/op.h"
#include "passes/attention.h"
#include "runtime/cpu/flash_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

enum { B = 2, H = 3, SQ = 20, SK = 36, D = 8, DV = 12 };

/* A bias shape and how its values are drawn. */
typedef struct bias_case {
  const char *name;
  int32_t rank;
  int64_t shape[4];
  int fill; /* 0 uniform; 1 padding: 0 or -inf (last key columns); 2 also one row all -inf */
} bias_case;

static const bias_case cases[] = {
    {"[Sk] padding", 1, {SK}, 1},
    {"[B,1,1,Sk] padding", 4, {B, 1, 1, SK}, 1},
    {"[H,Sq,Sk] learned", 3, {H, SQ, SK}, 0},
    {"[1,H,Sq,Sk] learned", 4, {1, H, SQ, SK}, 0},
    {"[B,1,Sq,1] row bias", 4, {B, 1, SQ, 1}, 0},
    {"[Sq,Sk] with a masked row", 2, {SQ, SK}, 2},
};

static void shape_str(char *buf, size_t n, int32_t rank, const int64_t *s) {
  size_t at = (size_t)snprintf(buf, n, "[");
  for (int32_t d = 0; d < rank && at < n; d++)
    at += (size_t)snprintf(buf + at, n - at, d ? ", %lld" : "%lld", (long long)s[d]);
  if (at < n) snprintf(buf + at, n - at, "]");
}

/* y = attention(q, k, v, base, bias), loss = sum(y * w); outputs y and the
 * gradients of q, k, v and (grad_bias) the bias. flash: the attention pass
 * runs first, so the backward is flash_attention_grad. */
static loom_graph *build(const bias_case *c, bool causal, double p, bool grad_bias, bool flash) {
  char text[2048], bs[64];
  shape_str(bs, sizeof bs, c->rank, c->shape);
  snprintf(text, sizeof text,
           "input %%q : f32[%d, %d, %d, %d]\n"
           "input %%k : f32[%d, %d, %d, %d]\n"
           "input %%v : f32[%d, %d, %d, %d]\n"
           "input %%bias : f32%s\n"
           "input %%base : i64[]\n"
           "input %%w : f32[%d, %d, %d, %d]\n"
           "%%y : f32[%d, %d, %d, %d] = attention(%%q, %%k, %%v, %%base, %%bias, causal=%s, "
           "p=%g, seed=11, offset=5, bias=true)\n"
           "output y = %%y\n",
           B, H, SQ, D, B, H, SK, D, B, H, SK, DV, bs, B, H, SQ, DV, B, H, SQ, DV,
           causal ? "true" : "false", p);
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, text, &g));
  if (!g) return NULL;
  if (flash) {
    loom_graph *f = NULL;
    int32_t n = 0;
    CHECK_OK(ctx, loom_graph_fuse_attention(g, LOOM_RNG_FUSED, NULL, &f, &n));
    CHECK(n == 1);
    loom_graph_free(g);
    g = f;
    if (!g) return NULL;
  }
  loom_value prod, loss, grads[4], *in = g->inputs;
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MUL, 2, (loom_value[]){g->outputs[0], in[5]}, 0, NULL,
                              &prod));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_REDUCE_SUM, 1, &prod, 0, NULL, &loss));
  int32_t n_wrt = grad_bias ? 4 : 3;
  CHECK_OK(ctx, loom_graph_grad(g, loss, n_wrt, (loom_value[]){in[0], in[1], in[2], in[3]}, grads));
  static const char *const names[4] = {"dq", "dk", "dv", "dbias"};
  for (int32_t i = 0; i < n_wrt; i++) CHECK_OK(ctx, loom_graph_output(g, names[i], grads[i]));
  return g;
}

/* Inputs q, k, v, bias, base, w of case c. */
static loom_tensor **inputs(const bias_case *c, uint64_t seed) {
  loom_tensor **t = calloc(7, sizeof *t);
  int64_t qs[4] = {B, H, SQ, D}, ks[4] = {B, H, SK, D}, vs[4] = {B, H, SK, DV},
          ws[4] = {B, H, SQ, DV};
  const int64_t *shapes[6] = {qs, ks, vs, c->shape, NULL, ws};
  loom_test_rng rng = {seed};
  for (int i = 0; i < 6; i++) {
    int32_t rank = i == 3 ? c->rank : i == 4 ? 0 : 4;
    CHECK_OK(ctx, loom_tensor_new(ctx, i == 4 ? LOOM_DTYPE_I64 : LOOM_DTYPE_F32, rank, shapes[i],
                                  &t[i]));
    if (!t[i]) return t;
    if (i == 4) {
      *(int64_t *)loom_tensor_data(t[i]) = 1000003;
      continue;
    }
    float *x = loom_tensor_data(t[i]);
    int64_t n = loom_tensor_numel(t[i]);
    for (int64_t e = 0; e < n; e++) x[e] = (float)loom_test_uniform(&rng, -1, 1);
    if (i != 3 || c->fill == 0) continue;
    int64_t sk = c->shape[c->rank - 1], rows = n / sk;
    for (int64_t r = 0; r < rows; r++) /* row r hides its last (r % 3 + 1) * 4 keys */
      for (int64_t j = 0; j < sk; j++)
        x[r * sk + j] = j >= sk - (r % 3 + 1) * 4 ? -INFINITY : 0.0f;
    if (c->fill == 2)
      for (int64_t j = 0; j < sk; j++) x[5 * sk + j] = -INFINITY; /* row 5 sees no key */
  }
  return t;
}

/* Largest error |a - b| / (1 + |b|); NaN in the same places counts 0, a
 * NaN against a number infinity. */
static double error(const loom_tensor *a, const loom_tensor *b) {
  if (!a || !b || loom_tensor_numel(a) != loom_tensor_numel(b)) return INFINITY;
  const float *x = loom_tensor_data(a), *y = loom_tensor_data(b);
  double worst = 0;
  for (int64_t e = 0; e < loom_tensor_numel(a); e++) {
    if (isnan(x[e]) || isnan(y[e])) {
      if (isnan(x[e]) != isnan(y[e])) return INFINITY;
      continue;
    }
    double err = fabs((double)x[e] - (double)y[e]) / (1.0 + fabs((double)y[e]));
    if (err > worst) worst = err;
  }
  return worst;
}

static int32_t count_op(const loom_graph *g, loom_op op) {
  int32_t n = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) n += g->nodes[i].op == op;
  return n;
}

static void test_case(const bias_case *c, bool causal, double p) {
  bool grad_bias = c->fill == 0;
  int32_t n_out = grad_bias ? 5 : 4;
  loom_graph *gd = build(c, causal, p, grad_bias, false), *gf = build(c, causal, p, grad_bias, true);
  if (gd && gf) CHECK(count_op(gf, LOOM_OP_FLASH_ATTENTION_GRAD) == 1);
  loom_tensor **in = inputs(c, (uint64_t)(c - cases) * 7919 + causal * 31 + (p > 0) + 1);
  loom_tensor **want = gd ? loom_test_run(ctx, gd, &LOOM_SESSION_OPTIONS(.backend = "ref"), in) : NULL;
  static const struct {
    const char *what;
    loom_session_options o;
  } runs[] = {{"ref flash ops", LOOM_SESSION_OPTIONS(.backend = "ref")},
              {"cpu stitch", LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = LOOM_FUSION_STITCH)},
              {"cpu eager", LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = LOOM_FUSION_EAGER)}};
  for (size_t r = 0; want && gf && r < sizeof runs / sizeof runs[0]; r++) {
    loom_tensor **got = loom_test_run(ctx, gf, &runs[r].o, in);
    if (!got) continue;
    for (int32_t t = 0; t < n_out; t++) {
      double err = error(got[t], want[t]);
      /* f32 against double; the bias gradient sums up to B*H*Sq terms */
      double tol = r == 0 ? 1e-6 : t == 4 ? 1e-4 : 2e-5;
      CHECK(err <= tol);
      if (!(err <= tol))
        fprintf(stderr, "  %s causal %d p %g, %s: output %d error %g\n", c->name, causal, p,
                runs[r].what, (int)t, err);
    }
    loom_test_free_tensors(got, n_out);
  }
  loom_test_free_tensors(want, n_out);
  loom_test_free_tensors(in, 6);
  loom_graph_free(gd);
  loom_graph_free(gf);
}

/* The learned bias's gradient from the cpu flash kernels against central
 * differences of the loss computed in double by the reference backend. */
static void test_finite_differences(void) {
  const bias_case *c = &cases[2];
  loom_graph *gf = build(c, true, 0.0, true, true), *gd = build(c, true, 0.0, false, false);
  loom_tensor **in = inputs(c, 99);
  loom_tensor **got = gf ? loom_test_run(ctx, gf, &LOOM_SESSION_OPTIONS(.backend = "cpu"), in) : NULL;
  if (got && gd) {
    float *b = loom_tensor_data(in[3]);
    const float *db = loom_tensor_data(got[4]), *w = loom_tensor_data(in[5]);
    int64_t picks[4] = {0, 77, 1000, H * SQ * SK - 1};
    for (int i = 0; i < 4; i++) {
      double loss[2], h = 1e-2;
      for (int s = 0; s < 2; s++) {
        float keep = b[picks[i]];
        b[picks[i]] = keep + (float)(s ? h : -h);
        loom_tensor **y = loom_test_run(ctx, gd, &LOOM_SESSION_OPTIONS(.backend = "ref"), in);
        b[picks[i]] = keep;
        loss[s] = 0;
        if (!y) continue;
        const float *yv = loom_tensor_data(y[0]);
        for (int64_t e = 0; e < loom_tensor_numel(y[0]); e++) loss[s] += (double)yv[e] * w[e];
        loom_test_free_tensors(y, 4);
      }
      double fd = (loss[1] - loss[0]) / (2 * h);
      CHECK(fabs(fd - db[picks[i]]) <= 1e-3 * (1 + fabs(fd)));
      if (!(fabs(fd - db[picks[i]]) <= 1e-3 * (1 + fabs(fd))))
        fprintf(stderr, "  dbias[%lld]: %g, finite differences %g\n", (long long)picks[i],
                db[picks[i]], fd);
    }
  }
  loom_test_free_tensors(got, 5);
  loom_test_free_tensors(in, 6);
  loom_graph_free(gf);
  loom_graph_free(gd);
}

/* BERT's masked scores written as primitives: (1 - mask) * -10000 added
 * to the scaled scores, the mask an input known only at run time. The
 * pass makes flash attention with that bias; the results are the
 * decomposition's. */
static void test_primitive_padding_mask(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx,
                                 "input %q : f32[2, 3, 16, 8]\n"
                                 "input %k : f32[2, 3, 16, 8]\n"
                                 "input %v : f32[2, 3, 16, 8]\n"
                                 "input %mask : f32[2, 1, 1, 16]\n"
                                 "%s : f32[2, 3, 16, 16] = matmul(%q, %k, trans_b=true)\n"
                                 "%c : f32[] = constant(value=0.35355339)\n"
                                 "%t : f32[2, 3, 16, 16] = mul(%s, %c)\n"
                                 "%one : f32[] = constant(value=1)\n"
                                 "%inv : f32[2, 1, 1, 16] = sub(%one, %mask)\n"
                                 "%big : f32[] = constant(value=-10000)\n"
                                 "%b : f32[2, 1, 1, 16] = mul(%inv, %big)\n"
                                 "%u : f32[2, 3, 16, 16] = add(%b, %t)\n"
                                 "%p : f32[2, 3, 16, 16] = softmax(%u, axis=-1)\n"
                                 "%y : f32[2, 3, 16, 8] = matmul(%p, %v)\n"
                                 "output y = %y\n",
                                 &g));
  if (!g) return;
  loom_graph *f = NULL;
  int32_t n = 0;
  CHECK_OK(ctx, loom_graph_fuse_attention(g, LOOM_RNG_FUSED, NULL, &f, &n));
  CHECK(n == 1);
  if (f) CHECK(count_op(f, LOOM_OP_FLASH_ATTENTION) == 1 && count_op(f, LOOM_OP_SOFTMAX) == 0);
  /* the GPU backends' form leaves it decomposed */
  loom_graph *u = NULL;
  CHECK_OK(ctx, loom_graph_fuse_attention_unbiased(g, LOOM_RNG_FUSED, NULL, &u, &n));
  CHECK(n == 0);
  loom_tensor **in = loom_test_uniform_inputs(ctx, g, 5);
  if (in && in[3]) {
    float *m = loom_tensor_data(in[3]);
    for (int j = 0; j < 32; j++) m[j] = (j % 16) < 12 - (j / 16) * 4 ? 1.0f : 0.0f;
  }
  loom_tensor **want = in ? loom_test_run(ctx, g, &LOOM_SESSION_OPTIONS(.backend = "ref"), in) : NULL;
  loom_tensor **got = in ? loom_test_run(ctx, g, &LOOM_SESSION_OPTIONS(.backend = "cpu"), in) : NULL;
  if (want && got) CHECK(error(got[0], want[0]) <= 2e-5);
  loom_test_free_tensors(want, 1);
  loom_test_free_tensors(got, 1);
  loom_test_free_tensors(in, 4);
  loom_graph_free(u);
  loom_graph_free(f);
  loom_graph_free(g);
}

/* Heads split from a projection (reshape, transpose): the cpu backend's
 * view fold reads q, k, v and writes o in place, with the learned bias
 * beside them and its gradient kept (a padding bias's dropped); the
 * results are the reference's. */
static void test_views(void) {
  for (int learned = 0; learned < 2; learned++) {
    char text[2048];
    snprintf(text, sizeof text,
             "input %%x : f32[2, 24, 32]\n"
             "input %%w : f32[32, 96]\n"
             "input %%rb : f32[%s]\n"
             "input %%dy : f32[2, 24, 32]\n"
             "%%p = matmul(%%x, %%w)\n"
             "%%p5 = reshape(%%p, shape=[2, 24, 3, 4, 8])\n"
             "%%t = transpose(%%p5, perm=[2, 0, 3, 1, 4])\n"
             "%%q = slice(%%t, starts=[0, 0, 0, 0, 0], ends=[1, 2, 4, 24, 8])\n"
             "%%k = slice(%%t, starts=[1, 0, 0, 0, 0], ends=[2, 2, 4, 24, 8])\n"
             "%%v = slice(%%t, starts=[2, 0, 0, 0, 0], ends=[3, 2, 4, 24, 8])\n"
             "%%q4 = reshape(%%q, shape=[2, 4, 24, 8])\n"
             "%%k4 = reshape(%%k, shape=[2, 4, 24, 8])\n"
             "%%v4 = reshape(%%v, shape=[2, 4, 24, 8])\n"
             "%%a = attention(%%q4, %%k4, %%v4, %%rb, causal=true, bias=true)\n"
             "%%at = transpose(%%a, perm=[0, 2, 1, 3])\n"
             "%%y = reshape(%%at, shape=[2, 24, 32])\n"
             "%%yd = mul(%%y, %%dy)\n"
             "%%obj = reduce_sum(%%yd)\n"
             "output y = %%y\n",
             learned ? "4, 24, 24" : "2, 1, 1, 24");
    loom_graph *g = NULL;
    CHECK_OK(ctx, loom_graph_parse(ctx, text, &g));
    if (!g) continue;
    loom_graph *f = NULL;
    int32_t n = 0;
    CHECK_OK(ctx, loom_graph_fuse_attention(g, LOOM_RNG_FUSED, NULL, &f, &n));
    CHECK(n == 1);
    loom_graph_free(g);
    if (!f) continue;
    loom_value obj = -1, grads[3];
    for (int32_t i = 0; i < f->n_nodes; i++)
      if (f->nodes[i].op == LOOM_OP_REDUCE_SUM) obj = f->nodes[i].out[0];
    int32_t n_wrt = learned ? 3 : 2, n_out = 1 + n_wrt;
    CHECK_OK(ctx, loom_graph_grad(f, obj, n_wrt, (loom_value[]){f->inputs[0], f->inputs[1], f->inputs[2]},
                                  grads));
    static const char *const names[3] = {"dx", "dw", "drb"};
    for (int i = 0; i < n_wrt; i++) CHECK_OK(ctx, loom_graph_output(f, names[i], grads[i]));
    loom_graph *folded = NULL; /* what the cpu backend runs */
    CHECK_OK(ctx, loom_graph_fold_attention_views(f, &folded, &n));
    for (int32_t i = 0; folded && i < folded->n_nodes; i++) {
      const loom_node *nd = &folded->nodes[i];
      if (nd->op != LOOM_OP_FLASH_ATTENTION && nd->op != LOOM_OP_FLASH_ATTENTION_GRAD) continue;
      CHECK(LOOM_ATTR_INTS(nd, flash_attention, dims).n == 6); /* q, k, v read in place */
      /* dq, dk, dv placed in one output, then the learned bias's gradient */
      if (nd->op == LOOM_OP_FLASH_ATTENTION_GRAD) CHECK(nd->n_out == (learned ? 2 : 1));
    }
    loom_graph_free(folded);
    loom_tensor **in = loom_test_uniform_inputs(ctx, f, 21 + (uint64_t)learned);
    if (in && !learned) { /* a padding bias: 0 or -inf */
      float *b = loom_tensor_data(in[2]);
      for (int j = 0; j < 48; j++) b[j] = j % 24 >= 20 - 4 * (j / 24) ? -INFINITY : 0.0f;
    }
    loom_tensor **want = in ? loom_test_run(ctx, f, &LOOM_SESSION_OPTIONS(.backend = "ref"), in) : NULL;
    loom_tensor **got = in ? loom_test_run(ctx, f, &LOOM_SESSION_OPTIONS(.backend = "cpu"), in) : NULL;
    for (int t = 0; want && got && t < n_out; t++) {
      double err = error(got[t], want[t]);
      CHECK(err <= 5e-5);
      if (!(err <= 5e-5)) fprintf(stderr, "  views, learned %d: output %d error %g\n", learned, t, err);
    }
    loom_test_free_tensors(want, n_out);
    loom_test_free_tensors(got, n_out);
    loom_test_free_tensors(in, 4);
    loom_graph_free(f);
  }
}

/* A bias that does not broadcast to the scores, or of another dtype, is
 * an error that says so. */
static void test_bad_bias(void) {
  static const char *const bad[2] = {"f32[3, 5]", "f64[16]"};
  for (int i = 0; i < 2; i++) {
    char text[512];
    snprintf(text, sizeof text,
             "input %%q : f32[2, 8, 4]\ninput %%k : f32[2, 16, 4]\ninput %%v : f32[2, 16, 4]\n"
             "input %%b : %s\n"
             "%%y : f32[2, 8, 4] = attention(%%q, %%k, %%v, %%b, bias=true)\noutput y = %%y\n",
             bad[i]);
    loom_graph *g = NULL;
    loom_status st = loom_graph_parse(ctx, text, &g);
    CHECK(st != LOOM_STATUS_OK);
    CHECK(strstr(loom_ctx_error(ctx), "bias") != NULL);
    loom_graph_free(g);
  }
}

/* The tile sets (plain C against AVX-512F or AVX2, where the CPU has it) on the bias
 * layouts their bias tiles treat apart: one row for every query (a
 * padding mask), a row per query (a learned bias), gathered rows (the
 * bias read transposed), one value per query (column stride 0); with
 * causal and dropout. The plain set is checked against the vector set,
 * which the session cases above check against the reference (BEST). */
static void test_kernel_sets(int32_t vec) {
  if (!loom_flash_attn_impl_supported(vec)) return;
  enum { BH = 6, Q = 33, K = 70, DD = 16, DW = 8 };
  static float q[BH * Q * DD], k[BH * K * DD], v[BH * K * DW], bias[BH * Q * K], d_o[BH * Q * DW];
  loom_test_rng rng = {4242};
  float *all[5] = {q, k, v, bias, d_o};
  int64_t sizes[5] = {BH * Q * DD, BH * K * DD, BH * K * DW, BH * Q * K, BH * Q * DW};
  for (int t = 0; t < 5; t++)
    for (int64_t e = 0; e < sizes[t]; e++) all[t][e] = (float)loom_test_uniform(&rng, -1, 1);
  /* lead stride, row stride, column stride */
  static const int64_t layouts[4][3] = {{K, 0, 1}, {Q * K, K, 1}, {Q * K, 1, Q}, {Q, 1, 0}};
  for (int l = 0; l < 4; l++) {
    float *res[2][6];
    for (int impl = 0; impl < 2; impl++) {
      loom_flash_attn a = {.bh = BH, .sq = Q, .sk = K, .d = DD, .dv = DW, .q = q, .k = k, .v = v,
                           .scale = 0.25, .causal = true, .p = 0.1, .seed = 3, .j0 = 17,
                           .bias = bias, .bias_col = layouts[l][2],
                           .impl = impl ? vec : LOOM_FLASH_ATTN_IMPL_PORTABLE};
      a.bias_at.n_lead = 1;
      a.bias_at.lead[0] = BH;
      a.bias_at.stride[0] = layouts[l][0];
      a.bias_at.row = layouts[l][1];
      int64_t n[6] = {BH * Q * DW, BH * Q, BH * Q * DD, BH * K * DD, BH * K * DW, BH * Q * K};
      for (int t = 0; t < 6; t++) res[impl][t] = calloc((size_t)n[t], sizeof(float));
      a.dbias = res[impl][5];
      CHECK_OK(ctx, loom_flash_attn_fwd(ctx, 2, &a, res[impl][0], res[impl][1]));
      CHECK_OK(ctx, loom_flash_attn_bwd(ctx, 2, &a, res[impl][0], res[impl][1], d_o, res[impl][2],
                                        res[impl][3], res[impl][4]));
      if (impl == 0) continue;
      double worst = 0;
      for (int t = 0; t < 6; t++)
        for (int64_t e = 0; e < n[t]; e++) {
          double x = res[0][t][e], y = res[1][t][e];
          double err = fabs(x - y) / (1 + fabs(y));
          if (err > worst || isnan(err)) worst = isnan(x) == isnan(y) && isnan(x) ? worst : err;
        }
      CHECK(worst <= 1e-5);
      if (!(worst <= 1e-5)) fprintf(stderr, "  bias layout %d: plain C against set %d: %g\n", l, (int)vec, worst);
    }
    for (int impl = 0; impl < 2; impl++)
      for (int t = 0; t < 6; t++) free(res[impl][t]);
  }
}

int main(void) {
  CHECK_OK(NULL, loom_ctx_new(&ctx));
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int causal = 0; causal < 2; causal++)
      for (int drop = 0; drop < 2; drop++) test_case(&cases[c], causal, drop ? 0.2 : 0.0);
  test_kernel_sets(LOOM_FLASH_ATTN_IMPL_AVX512);
  test_kernel_sets(LOOM_FLASH_ATTN_IMPL_AVX2);
  test_finite_differences();
  test_primitive_padding_mask();
  test_views();
  test_bad_bias();
  loom_ctx_free(ctx);
  return loom_test_finish("test_attention_bias");
}
