/* Small models written as ONNX (tests/onnx_writer.h) the way PyTorch
 * exports them, imported and run on ref and cpu (eager, stitch), checked
 * against plain C loops here: a BERT-style encoder layer (post-LN, GELU
 * through Erf), a GPT-2-style block (pre-LN, causal mask by Trilu and
 * Where, tanh GELU), and a small CNN (Conv, BatchNormalization, Relu,
 * MaxPool, grouped strided Conv, HardSwish, GlobalAveragePool, Flatten,
 * Gemm, Softmax). Shapes reach Reshape through Shape -> Gather -> Concat
 * chains, folded at load time. With an argument DIR it writes larger
 * BERT and GPT-2 blocks and a CNN there instead, for
 * bench/peers/onnx_bench.py. (The import's recognitions are checked in
 * test_onnx_attention.c, single converters in test_onnx_ops.c, the
 * PaddleOCR-style models in test_onnx_ocr.c.) */
#include "onnx_models_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- host reference helpers ---------------------------------------------- */

static void layer_norm(float *x, int rows, int d, const float *g, const float *b) {
  for (int r = 0; r < rows; r++) {
    double m = 0, v = 0;
    for (int j = 0; j < d; j++) m += x[r * d + j];
    m /= d;
    for (int j = 0; j < d; j++) v += (x[r * d + j] - m) * (x[r * d + j] - m);
    v /= d;
    for (int j = 0; j < d; j++) x[r * d + j] = (float)((x[r * d + j] - m) / sqrt(v + 1e-5) * g[j] + b[j]);
  }
}
static float gelu(float x, bool tanh_form) {
  if (tanh_form) return (float)(0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))));
  return (float)(0.5 * x * (1 + erf(x / sqrt(2.0))));
}

/* ---- a transformer block ---------------------------------------------------- */

/* sizes: small for the test, larger when writing benchmark models */
static int B = 2, T = 6, D = 16, H = 2, DH = 8, F = 32;

typedef struct block_weights {
  float *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo;
  float *g1, *b1, *g2, *b2, *w1, *c1, *w2, *c2;
} block_weights;


static void block_alloc(block_weights *w) {
  size_t d = (size_t)D, f = (size_t)F;
  w->wq = fa(d * d), w->wk = fa(d * d), w->wv = fa(d * d), w->wo = fa(d * d);
  w->bq = fa(d), w->bk = fa(d), w->bv = fa(d), w->bo = fa(d);
  w->g1 = fa(d), w->b1 = fa(d), w->g2 = fa(d), w->b2 = fa(d);
  w->w1 = fa(d * f), w->c1 = fa(f), w->w2 = fa(f * d), w->c2 = fa(d);
}

static void block_free(block_weights *w) {
  float *all[] = {w->wq, w->wk, w->wv, w->wo, w->bq, w->bk, w->bv, w->bo,
                  w->g1, w->b1, w->g2, w->b2, w->w1, w->c1, w->w2, w->c2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* [B*T, D] -> heads [B, H, T, DH] through a reshape whose shape comes
 * from a Shape -> Gather -> Concat chain, then a transpose. */
static const char *heads(gw *w, const char *x2d, const char *x3d) {
  const char *shape = op1(w, "Shape", x3d);
  const char *bt = op2(w, "Gather", shape, ints(w, 2, (int64_t[]){0, 1}));
  const char *hd = ints(w, 2, (int64_t[]){H, DH});
  pbw ax = onnxw_attr_int("axis", 0);
  const char *cin[2] = {bt, hd};
  const char *full = node(w, "Concat", 2, cin, &ax, 1);
  const char *r = op2(w, "Reshape", x2d, full);
  pbw perm = onnxw_attr_ints("perm", 4, (int64_t[]){0, 2, 1, 3});
  return node(w, "Transpose", 1, &r, &perm, 1);
}

static const char *linear(gw *w, const char *x, int in, int out, float *wt, float *bias) {
  const char *mm = op2(w, "MatMul", x, weight(w, 2, (int64_t[]){in, out}, wt, 0.3));
  return op2(w, "Add", mm, weight(w, 1, (int64_t[]){out}, bias, 0.1));
}

static const char *layer_norm_node(gw *w, const char *x, float *g, float *b) {
  for (int j = 0; j < D; j++) g[j] = 1.0f + (float)loom_test_uniform(&rng, -0.1, 0.1);
  const char *gn = fresh(w);
  pbw t = onnxw_tensor(gn, 1, 1, (int64_t[]){D}, g, sizeof(float) * D);
  pbw_msg(&w->g, 5, &t);
  const char *in[3] = {x, gn, weight(w, 1, (int64_t[]){D}, b, 0.1)};
  pbw ax = onnxw_attr_int("axis", -1);
  return node(w, "LayerNormalization", 3, in, &ax, 1);
}

static const char *gelu_node(gw *w, const char *x, bool tanh_form) {
  if (!tanh_form) { /* 0.5 * x * (1 + erf(x / sqrt(2))) */
    const char *e = op1(w, "Erf", op2(w, "Div", x, scalar_f(w, 1.41421356f)));
    return op2(w, "Mul", op2(w, "Mul", x, scalar_f(w, 0.5f)), op2(w, "Add", e, scalar_f(w, 1.0f)));
  }
  const char *x3 = op2(w, "Pow", x, scalar_f(w, 3.0f));
  const char *in = op2(w, "Mul", op2(w, "Add", x, op2(w, "Mul", x3, scalar_f(w, 0.044715f))), scalar_f(w, 0.7978845608f));
  return op2(w, "Mul", op2(w, "Mul", x, scalar_f(w, 0.5f)), op2(w, "Add", op1(w, "Tanh", in), scalar_f(w, 1.0f)));
}

/* BERT (post-LN, erf GELU) or GPT-2 (pre-LN, causal, tanh GELU). */
static pbw block_model(bool gpt, block_weights *bw) {
  gw w = {0};
  pbw v = onnxw_value("x", 1, 3, (int64_t[]){B, T, D}, NULL);
  pbw_msg(&w.g, 11, &v);
  const char *x = "x";
  const char *h = gpt ? layer_norm_node(&w, x, bw->g1, bw->b1) : x;
  const char *h2 = op2(&w, "Reshape", h, ints(&w, 2, (int64_t[]){B * T, D}));
  const char *q = heads(&w, linear(&w, h2, D, D, bw->wq, bw->bq), x);
  const char *k = heads(&w, linear(&w, h2, D, D, bw->wk, bw->bk), x);
  const char *vv = heads(&w, linear(&w, h2, D, D, bw->wv, bw->bv), x);
  pbw perm = onnxw_attr_ints("perm", 4, (int64_t[]){0, 1, 3, 2});
  const char *kt = node(&w, "Transpose", 1, &k, &perm, 1);
  const char *s = op2(&w, "Mul", op2(&w, "MatMul", q, kt), scalar_f(&w, 1.0f / sqrtf((float)DH)));
  if (gpt) {
    float *ones = fa((size_t)(T * T));
    for (int i = 0; i < T * T; i++) ones[i] = 1;
    const char *on = fresh(&w);
    pbw t = onnxw_tensor(on, 1, 2, (int64_t[]){T, T}, ones, sizeof(float) * (size_t)(T * T));
    free(ones);
    pbw_msg(&w.g, 5, &t);
    pbw up = onnxw_attr_int("upper", 0);
    const char *tril = node(&w, "Trilu", 1, &on, &up, 1);
    const char *keep = op2(&w, "Equal", tril, scalar_f(&w, 1.0f));
    const char *win[3] = {keep, s, scalar_f(&w, -1e9f)};
    s = node(&w, "Where", 3, win, NULL, 0);
  }
  pbw ax = onnxw_attr_int("axis", -1);
  const char *p = node(&w, "Softmax", 1, &s, &ax, 1);
  const char *c = op2(&w, "MatMul", p, vv);
  pbw perm2 = onnxw_attr_ints("perm", 4, (int64_t[]){0, 2, 1, 3});
  const char *ct = node(&w, "Transpose", 1, &c, &perm2, 1);
  const char *c2 = op2(&w, "Reshape", ct, ints(&w, 2, (int64_t[]){B * T, D}));
  const char *o = op2(&w, "Reshape", linear(&w, c2, D, D, bw->wo, bw->bo), ints(&w, 3, (int64_t[]){B, T, D}));
  const char *r1 = op2(&w, "Add", x, o);
  if (!gpt) r1 = layer_norm_node(&w, r1, bw->g1, bw->b1);
  const char *f_in = gpt ? layer_norm_node(&w, r1, bw->g2, bw->b2) : r1;
  const char *f = gelu_node(&w, linear(&w, f_in, D, F, bw->w1, bw->c1), gpt);
  const char *y = op2(&w, "Add", r1, linear(&w, f, F, D, bw->w2, bw->c2));
  if (!gpt) y = layer_norm_node(&w, y, bw->g2, bw->b2);
  pbw idn = onnxw_node("Identity", "out", 1, &y, 1, (const char *[]){"y"});
  pbw_msg(&w.g, 1, &idn);
  v = onnxw_value("y", 1, 3, (int64_t[]){B, T, D}, NULL);
  pbw_msg(&w.g, 12, &v);
  return onnxw_model(&w.g, 17);
}

static void block_reference(bool gpt, const block_weights *bw, const float *x, float *y) {
  size_t n = (size_t)(B * T * D);
  float *h = fa(n), *q = fa(n), *k = fa(n), *v = fa(n), *c = fa(n), *o = fa(n), *r1 = fa(n), *f2 = fa(n), *fin = fa(n);
  float *f = fa((size_t)(B * T * F));
  double *s = malloc(sizeof *s * (size_t)T);
  memcpy(h, x, sizeof(float) * n);
  if (gpt) layer_norm(h, B * T, D, bw->g1, bw->b1);
  matmul(h, bw->wq, q, B * T, D, D);
  matmul(h, bw->wk, k, B * T, D, D);
  matmul(h, bw->wv, v, B * T, D, D);
  for (int i = 0; i < B * T; i++)
    for (int j = 0; j < D; j++) q[i * D + j] += bw->bq[j], k[i * D + j] += bw->bk[j], v[i * D + j] += bw->bv[j];
  for (int b = 0; b < B; b++)
    for (int hh = 0; hh < H; hh++)
      for (int i = 0; i < T; i++) {
        double m = -INFINITY, z = 0;
        for (int j = 0; j < T; j++) {
          double dot = 0;
          for (int e = 0; e < DH; e++) dot += (double)q[(b * T + i) * D + hh * DH + e] * k[(b * T + j) * D + hh * DH + e];
          s[j] = gpt && j > i ? -1e9 : dot / sqrt((double)DH);
          m = s[j] > m ? s[j] : m;
        }
        for (int j = 0; j < T; j++) z += s[j] = exp(s[j] - m);
        for (int e = 0; e < DH; e++) {
          double acc = 0;
          for (int j = 0; j < T; j++) acc += s[j] / z * v[(b * T + j) * D + hh * DH + e];
          c[(b * T + i) * D + hh * DH + e] = (float)acc;
        }
      }
  matmul(c, bw->wo, o, B * T, D, D);
  for (int i = 0; i < B * T * D; i++) r1[i] = x[i] + o[i] + bw->bo[i % D];
  if (!gpt) layer_norm(r1, B * T, D, bw->g1, bw->b1);
  memcpy(fin, r1, sizeof(float) * n);
  if (gpt) layer_norm(fin, B * T, D, bw->g2, bw->b2);
  matmul(fin, bw->w1, f, B * T, D, F);
  for (int i = 0; i < B * T * F; i++) f[i] = gelu(f[i] + bw->c1[i % F], gpt);
  matmul(f, bw->w2, f2, B * T, F, D);
  for (int i = 0; i < B * T * D; i++) y[i] = r1[i] + f2[i] + bw->c2[i % D];
  if (!gpt) layer_norm(y, B * T, D, bw->g2, bw->b2);
  float *all[] = {h, q, k, v, c, o, r1, f2, fin, f};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  free(s);
}

/* ---- a small CNN ------------------------------------------------------------ */

enum { CI = 3, HW = 8, C1 = 4, C2 = 4, NC = 5 };

typedef struct cnn_weights {
  float w1[C1 * CI * 9], b1[C1], scale[C1], bias[C1], mean[C1], var[C1];
  float w2[C2 * (C1 / 2) * 9], b2[C2], fc[C2 * NC], fb[NC];
} cnn_weights;

static pbw cnn_model(cnn_weights *cw) {
  gw w = {0};
  pbw v = onnxw_value("img", 1, 4, (int64_t[]){1, CI, HW, HW}, NULL);
  pbw_msg(&w.g, 11, &v);
  const char *img = "img";
  const char *in1[3] = {img, weight(&w, 4, (int64_t[]){C1, CI, 3, 3}, cw->w1, 0.3), weight(&w, 1, (int64_t[]){C1}, cw->b1, 0.1)};
  pbw a1[2] = {onnxw_attr_ints("pads", 4, (int64_t[]){1, 1, 1, 1}), onnxw_attr_ints("kernel_shape", 2, (int64_t[]){3, 3})};
  const char *c1 = node(&w, "Conv", 3, in1, a1, 2);
  const char *bn_in[5] = {c1, weight(&w, 1, (int64_t[]){C1}, cw->scale, 1.0), weight(&w, 1, (int64_t[]){C1}, cw->bias, 0.5),
                          weight(&w, 1, (int64_t[]){C1}, cw->mean, 0.5), NULL};
  for (int i = 0; i < C1; i++) cw->var[i] = 0.5f + (float)loom_test_uniform(&rng, 0, 1);
  const char *vn = fresh(&w);
  pbw t = onnxw_tensor(vn, 1, 1, (int64_t[]){C1}, cw->var, sizeof cw->var);
  pbw_msg(&w.g, 5, &t);
  bn_in[4] = vn;
  pbw eps = onnxw_attr_int("epsilon", 0); /* replaced below by a float */
  free(eps.p);
  eps = (pbw){0};
  pbw_str(&eps, 1, "epsilon");
  pbw_float(&eps, 2, 1e-5f);
  pbw_int(&eps, 20, 1);
  const char *bn = node(&w, "BatchNormalization", 5, bn_in, &eps, 1);
  const char *r = op1(&w, "Relu", bn);
  pbw mp[2] = {onnxw_attr_ints("kernel_shape", 2, (int64_t[]){2, 2}), onnxw_attr_ints("strides", 2, (int64_t[]){2, 2})};
  const char *pool = node(&w, "MaxPool", 1, &r, mp, 2);
  const char *in2[3] = {pool, weight(&w, 4, (int64_t[]){C2, C1 / 2, 3, 3}, cw->w2, 0.3), weight(&w, 1, (int64_t[]){C2}, cw->b2, 0.1)};
  pbw a2[3] = {onnxw_attr_int("group", 2), onnxw_attr_ints("strides", 2, (int64_t[]){2, 2}),
               onnxw_attr_ints("pads", 4, (int64_t[]){1, 1, 1, 1})};
  const char *c2 = node(&w, "Conv", 3, in2, a2, 3);
  const char *hs = op1(&w, "HardSwish", c2);
  const char *gap = op1(&w, "GlobalAveragePool", hs);
  const char *fl = op1(&w, "Flatten", gap);
  const char *gin[3] = {fl, weight(&w, 2, (int64_t[]){NC, C2}, cw->fc, 0.5), weight(&w, 1, (int64_t[]){NC}, cw->fb, 0.1)};
  pbw tb = onnxw_attr_int("transB", 1);
  const char *logits = node(&w, "Gemm", 3, gin, &tb, 1);
  pbw ax = onnxw_attr_int("axis", 1);
  pbw sm = onnxw_node("Softmax", "probs", 1, &logits, 1, (const char *[]){"probs"});
  pbw_msg(&sm, 5, &ax);
  pbw_msg(&w.g, 1, &sm);
  v = onnxw_value("probs", 1, 2, (int64_t[]){1, NC}, NULL);
  pbw_msg(&w.g, 12, &v);
  return onnxw_model(&w.g, 14);
}

/* direct convolution of [ci, h, w] with [co, ci/g, 3, 3], pad 1 */
static void conv3(const float *x, int ci, int hw, const float *wt, const float *b, int co, int g, int stride, float *y,
                  int *ohw) {
  int o = (hw + 2 - 3) / stride + 1, cig = ci / g, cog = co / g;
  *ohw = o;
  for (int m = 0; m < co; m++)
    for (int i = 0; i < o; i++)
      for (int j = 0; j < o; j++) {
        double s = b[m];
        int gi = m / cog;
        for (int c = 0; c < cig; c++)
          for (int ki = 0; ki < 3; ki++)
            for (int kj = 0; kj < 3; kj++) {
              int yi = i * stride + ki - 1, xj = j * stride + kj - 1;
              if (yi < 0 || yi >= hw || xj < 0 || xj >= hw) continue;
              s += (double)x[((gi * cig + c) * hw + yi) * hw + xj] * wt[((m * cig + c) * 3 + ki) * 3 + kj];
            }
        y[(m * o + i) * o + j] = (float)s;
      }
}

static void cnn_reference(const cnn_weights *cw, const float *img, float *probs) {
  float a[C1 * HW * HW], p[C1 * 4 * 4], c2[C2 * 2 * 2];
  int o;
  conv3(img, CI, HW, cw->w1, cw->b1, C1, 1, 1, a, &o);
  for (int c = 0; c < C1; c++)
    for (int i = 0; i < HW * HW; i++) {
      float v = (float)((a[c * HW * HW + i] - cw->mean[c]) / sqrt(cw->var[c] + 1e-5) * cw->scale[c] + cw->bias[c]);
      a[c * HW * HW + i] = v > 0 ? v : 0;
    }
  for (int c = 0; c < C1; c++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) {
        float m = -INFINITY;
        for (int di = 0; di < 2; di++)
          for (int dj = 0; dj < 2; dj++) m = fmaxf(m, a[(c * HW + 2 * i + di) * HW + 2 * j + dj]);
        p[(c * 4 + i) * 4 + j] = m;
      }
  conv3(p, C1, 4, cw->w2, cw->b2, C2, 2, 2, c2, &o);
  double gap[C2];
  for (int c = 0; c < C2; c++) {
    gap[c] = 0;
    for (int i = 0; i < o * o; i++) {
      double v = c2[c * o * o + i], hsig = fmin(1, fmax(0, v / 6 + 0.5));
      gap[c] += v * hsig;
    }
    gap[c] /= o * o;
  }
  double l[NC], m = -INFINITY, z = 0;
  for (int k = 0; k < NC; k++) {
    l[k] = cw->fb[k];
    for (int c = 0; c < C2; c++) l[k] += gap[c] * cw->fc[k * C2 + c];
    m = fmax(m, l[k]);
  }
  for (int k = 0; k < NC; k++) z += exp(l[k] - m);
  for (int k = 0; k < NC; k++) probs[k] = (float)(exp(l[k] - m) / z);
}


/* A benchmark CNN (bench/peers/onnx_bench.py; not run here): a
 * MobileNet-like stem on a [1, 3, 112, 112] image: Conv + BatchNorm +
 * Relu blocks (full, depthwise, pointwise), MaxPool, strided Conv +
 * BatchNorm + HardSwish, GlobalAveragePool, Flatten, Gemm. */
static pbw bench_cnn_model(void) {
  gw w = {0};
  float *host = malloc(sizeof(float) * 128 * 128 * 9);
  pbw v = onnxw_value("img", 1, 4, (int64_t[]){1, 3, 112, 112}, NULL);
  pbw_msg(&w.g, 11, &v);
  static const struct {
    int64_t cin, cout, k, stride, groups;
    const char *act;
  } layers[] = {
      {3, 32, 3, 2, 1, "Relu"},    {32, 32, 3, 1, 32, "Relu"},     {32, 64, 1, 1, 1, "Relu"},
      {0, 0, 0, 0, 0, "MaxPool"},  {64, 128, 3, 1, 1, "Relu"},     {128, 128, 3, 1, 128, "Relu"},
      {128, 128, 1, 1, 1, "Relu"}, {128, 128, 3, 2, 1, "HardSwish"},
  };
  const char *x = "img";
  for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
    if (layers[l].cin == 0) {
      pbw mp[2] = {onnxw_attr_ints("kernel_shape", 2, (int64_t[]){2, 2}), onnxw_attr_ints("strides", 2, (int64_t[]){2, 2})};
      x = node(&w, "MaxPool", 1, &x, mp, 2);
      continue;
    }
    int64_t co = layers[l].cout, k = layers[l].k, p = k / 2, s = layers[l].stride, g = layers[l].groups;
    const char *in[3] = {x, weight(&w, 4, (int64_t[]){co, layers[l].cin / g, k, k}, host, 0.3),
                         weight(&w, 1, (int64_t[]){co}, host, 0.1)};
    pbw a[4] = {onnxw_attr_ints("pads", 4, (int64_t[]){p, p, p, p}), onnxw_attr_ints("kernel_shape", 2, (int64_t[]){k, k}),
                onnxw_attr_ints("strides", 2, (int64_t[]){s, s}), onnxw_attr_int("group", g)};
    x = node(&w, "Conv", 3, in, a, 4);
    const char *bn[5] = {x, weight(&w, 1, (int64_t[]){co}, host, 1.0), weight(&w, 1, (int64_t[]){co}, host, 0.5),
                         weight(&w, 1, (int64_t[]){co}, host, 0.5), NULL};
    for (int64_t i = 0; i < co; i++) host[i] = 0.5f + (float)loom_test_uniform(&rng, 0, 1);
    bn[4] = fresh(&w);
    pbw t = onnxw_tensor(bn[4], 1, 1, (int64_t[]){co}, host, sizeof(float) * (size_t)co);
    pbw_msg(&w.g, 5, &t);
    x = op1(&w, layers[l].act, node(&w, "BatchNormalization", 5, bn, NULL, 0));
  }
  const char *fl = op1(&w, "Flatten", op1(&w, "GlobalAveragePool", x));
  const char *gin[3] = {fl, weight(&w, 2, (int64_t[]){10, 128}, host, 0.5), weight(&w, 1, (int64_t[]){10}, host, 0.1)};
  pbw tb = onnxw_attr_int("transB", 1);
  pbw gm = onnxw_node("Gemm", "logits", 3, gin, 1, (const char *[]){"logits"});
  pbw_msg(&gm, 5, &tb);
  pbw_msg(&w.g, 1, &gm);
  v = onnxw_value("logits", 1, 2, (int64_t[]){1, 10}, NULL);
  pbw_msg(&w.g, 12, &v);
  free(host);
  return onnxw_model(&w.g, 14);
}

int main(int argc, char **argv) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  block_weights bw;
  if (argc > 1) {
    /* benchmark models (bench/peers/onnx_bench.py): one sequence of 128
     * tokens, width 256, 4 heads, FFN 1024; with "base N", BERT-base and
     * GPT-2-small sized ones instead (width 768, 12 heads, FFN 3072) for
     * N sequences of 128 */
    bool base = argc > 2 && strcmp(argv[2], "base") == 0;
    B = base && argc > 3 ? atoi(argv[3]) : 1, T = 128, D = base ? 768 : 256, H = base ? 12 : 4;
    DH = 64, F = 4 * D;
    CHECK(B >= 1 && B <= 64);
    if (B < 1 || B > 64) return loom_test_finish("test_onnx_models");
    block_alloc(&bw);
    for (int gpt = 0; gpt < 2; gpt++) {
      pbw m = block_model(gpt, &bw);
      char name[64];
      snprintf(name, sizeof name, "%s%s.onnx", gpt ? "gpt2_block" : "bert_layer",
               base ? (gpt ? "_small" : "_base") : "");
      if (base && B > 1) snprintf(name + strlen(name) - 5, sizeof name - strlen(name) + 5, "_b%d.onnx", B);
      write_file(argv[1], name, &m);
      free(m.p);
    }
    block_free(&bw);
    if (!base) {
      pbw cnn = bench_cnn_model();
      write_file(argv[1], "cnn.onnx", &cnn);
      free(cnn.p);
    }
    loom_ctx_free(ctx);
    return loom_test_finish("test_onnx_models");
  }
  block_alloc(&bw);
  float *x = fa((size_t)(B * T * D)), *y = fa((size_t)(B * T * D));
  for (int gpt = 0; gpt < 2; gpt++) {
    pbw m = block_model(gpt, &bw);
    for (int i = 0; i < B * T * D; i++) x[i] = (float)loom_test_uniform(&rng, -1, 1);
    block_reference(gpt, &bw, x, y);
    CHECK(count_op(&m, LOOM_OP_GELU) == 1); /* the spelled-out GELU, recognized */
    /* three head splits, each Shape + Gather + Concat */
    run_and_compare(gpt ? "GPT-2-style block" : "BERT-style layer", &m, "x", 3, (int64_t[]){B, T, D}, x, y, B * T * D,
                    9 + (gpt ? 2 : 0));
    free(m.p);
  }
  free(x);
  free(y);
  block_free(&bw);
  static cnn_weights cw;
  pbw m = cnn_model(&cw);
  float img[CI * HW * HW], probs[NC];
  for (int i = 0; i < CI * HW * HW; i++) img[i] = (float)loom_test_uniform(&rng, -1, 1);
  cnn_reference(&cw, img, probs);
  run_and_compare("small CNN", &m, "img", 4, (int64_t[]){1, CI, HW, HW}, img, probs, NC, 0);
  free(m.p);
  loom_ctx_free(ctx);
  return loom_test_finish("test_onnx_models");
}
