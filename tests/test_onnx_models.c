/* Small models written as ONNX (tests/onnx_writer.h) the way PyTorch
 * exports them, imported and run on ref and cpu (eager, stitch), checked
 * against plain C loops here: a BERT-style encoder layer (post-LN, GELU
 * through Erf), a GPT-2-style block (pre-LN, causal mask by Trilu and
 * Where, tanh GELU), and a small CNN (Conv, BatchNormalization, Relu,
 * MaxPool, grouped strided Conv, HardSwish, GlobalAveragePool, Flatten,
 * Gemm, Softmax). Shapes reach Reshape through Shape -> Gather -> Concat
 * chains, folded at load time. With an argument DIR it writes larger
 * BERT and GPT-2 blocks and a CNN there instead, for
 * bench/peers/onnx_bench.py. */
#include "common.h"
#include "onnx_writer.h"

#include "core/ctx.h"
#include "onnx/import.h"
#include "onnx/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;
static loom_test_rng rng = {12345};

/* ---- a graph under construction ------------------------------------------- */

typedef struct gw {
  pbw g;
  int n; /* names made */
} gw;

static const char *fresh(gw *w) {
  static char names[4096][16];
  char *s = names[w->n++ % 4096];
  snprintf(s, 16, "t%d", w->n);
  return s;
}

static const char *node(gw *w, const char *op, int n_in, const char *const *in, pbw *attrs, int n_attrs) {
  const char *out = fresh(w);
  pbw n = onnxw_node(op, out, n_in, in, 1, &out);
  for (int i = 0; i < n_attrs; i++) pbw_msg(&n, 5, &attrs[i]);
  pbw_msg(&w->g, 1, &n);
  return out;
}
static const char *op1(gw *w, const char *op, const char *a) { return node(w, op, 1, &a, NULL, 0); }
static const char *op2(gw *w, const char *op, const char *a, const char *b) {
  const char *in[2] = {a, b};
  return node(w, op, 2, in, NULL, 0);
}

/* An f32 initializer of uniform values in [-s, s) (copied to host). */
static const char *weight(gw *w, int rank, const int64_t *dims, float *host, double s) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  for (int64_t i = 0; i < n; i++) host[i] = (float)loom_test_uniform(&rng, -s, s);
  const char *name = fresh(w);
  pbw t = onnxw_tensor(name, 1, rank, dims, host, sizeof(float) * (size_t)n);
  pbw_msg(&w->g, 5, &t);
  return name;
}
static const char *scalar_f(gw *w, float v) {
  const char *name = fresh(w);
  pbw t = onnxw_tensor(name, 1, 0, NULL, &v, 4);
  pbw_msg(&w->g, 5, &t);
  return name;
}
static const char *ints(gw *w, int n, const int64_t *v) {
  const char *name = fresh(w);
  pbw t = onnxw_tensor(name, 7, 1, (int64_t[]){n}, v, 8 * (size_t)n);
  pbw_msg(&w->g, 5, &t);
  return name;
}

/* ---- host reference helpers ---------------------------------------------- */

static void matmul(const float *a, const float *b, float *c, int m, int k, int n) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++) s += (double)a[i * k + p] * b[p * n + j];
      c[i * n + j] = (float)s;
    }
}
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

static float *fa(size_t n) {
  float *p = calloc(n, sizeof *p);
  if (!p) abort();
  return p;
}

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

/* ---- running ------------------------------------------------------------------ */

static void run_and_compare(const char *what, const pbw *model, const char *in_name, int rank, const int64_t *shape,
                            const float *x, const float *want, int64_t n_want, int min_folded) {
  onnx_model *m = NULL;
  onnx_program *p = NULL;
  CHECK_OK(ctx, onnx_model_parse(ctx, model->p, model->n, NULL, &m));
  if (m) CHECK_OK(ctx, onnx_import(ctx, m, 0, NULL, &p));
  if (!p) {
    onnx_model_free(m);
    return;
  }
  CHECK(p->n_folded >= min_folded);
  loom_tensor *xt = NULL;
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, rank, shape, (void *)x, &xt));
  onnx_feed f = {in_name, xt};
  const struct {
    const char *backend;
    loom_fusion_mode fusion;
  } modes[] = {{"ref", LOOM_FUSION_EAGER}, {"cpu", LOOM_FUSION_EAGER}, {"cpu", LOOM_FUSION_STITCH}};
  for (int k = 0; k < 3; k++) {
    loom_session *s = NULL;
    loom_tensor *out[1] = {NULL};
    loom_session_options o = LOOM_SESSION_OPTIONS(.backend = modes[k].backend, .fusion = modes[k].fusion);
    CHECK_OK(ctx, onnx_program_session(ctx, p, &o, &s));
    if (s) CHECK_OK(ctx, onnx_program_run(ctx, p, s, 1, &f, out));
    if (out[0]) {
      CHECK(loom_tensor_numel(out[0]) == n_want);
      double err = 0;
      const float *y = loom_tensor_data(out[0]);
      for (int64_t i = 0; i < n_want && i < loom_tensor_numel(out[0]); i++) err = fmax(err, fabs(y[i] - want[i]));
      printf("%s on %s/%s: max |error| %.3g\n", what, modes[k].backend, loom_fusion_mode_name(modes[k].fusion), err);
      CHECK(err < 2e-4);
    }
    loom_tensor_free(out[0]);
    loom_session_free(s);
  }
  loom_tensor_free(xt);
  onnx_program_free(p);
  onnx_model_free(m);
}


/* GroupNormalization (opset 18: scale and bias per group), x [2, 4, 3],
 * 2 groups, against the definition. */
static void test_group_norm(void) {
  gw w = {0};
  float gs[2], gb[2], x[24], want[24];
  pbw v = onnxw_value("x", 1, 3, (int64_t[]){2, 4, 3}, NULL);
  pbw_msg(&w.g, 11, &v);
  const char *in[3] = {"x", weight(&w, 1, (int64_t[]){2}, gs, 1.0), weight(&w, 1, (int64_t[]){2}, gb, 1.0)};
  pbw at = onnxw_attr_int("num_groups", 2);
  pbw n = onnxw_node("GroupNormalization", "gn", 3, in, 1, (const char *[]){"y"});
  pbw_msg(&n, 5, &at);
  pbw_msg(&w.g, 1, &n);
  v = onnxw_value("y", 1, 3, (int64_t[]){2, 4, 3}, NULL);
  pbw_msg(&w.g, 12, &v);
  pbw m = onnxw_model(&w.g, 18);
  for (int i = 0; i < 24; i++) x[i] = (float)loom_test_uniform(&rng, -2, 2);
  for (int b = 0; b < 2; b++)
    for (int g = 0; g < 2; g++) {
      const float *p = x + b * 12 + g * 6; /* channels 2g, 2g+1: 6 values */
      double mean = 0, var = 0;
      for (int i = 0; i < 6; i++) mean += p[i];
      mean /= 6;
      for (int i = 0; i < 6; i++) var += (p[i] - mean) * (p[i] - mean);
      var /= 6;
      for (int i = 0; i < 6; i++) want[b * 12 + g * 6 + i] = (float)((p[i] - mean) / sqrt(var + 1e-5) * gs[g] + gb[g]);
    }
  run_and_compare("GroupNormalization", &m, "x", 3, (int64_t[]){2, 4, 3}, x, want, 24, 0);
  free(m.p);
}

/* How many nodes of op the import of model makes. */
static int count_op(const pbw *model, loom_op op) {
  onnx_model *m = NULL;
  onnx_program *p = NULL;
  CHECK_OK(ctx, onnx_model_parse(ctx, model->p, model->n, NULL, &m));
  if (m) CHECK_OK(ctx, onnx_import(ctx, m, 0, NULL, &p));
  int n = 0;
  for (int32_t i = 0; p && i < p->g->n_nodes; i++) n += p->g->nodes[i].op == op;
  onnx_program_free(p);
  onnx_model_free(m);
  return n;
}

/* The rank of the first matmul's product in the import of model (0: none). */
static int first_matmul_rank(const pbw *model) {
  onnx_model *m = NULL;
  onnx_program *p = NULL;
  CHECK_OK(ctx, onnx_model_parse(ctx, model->p, model->n, NULL, &m));
  if (m) CHECK_OK(ctx, onnx_import(ctx, m, 0, NULL, &p));
  int r = 0;
  for (int32_t i = 0; p && i < p->g->n_nodes && !r; i++)
    if (p->g->nodes[i].op == LOOM_OP_MATMUL) r = p->g->values[p->g->nodes[i].out[0]].type.rank;
  onnx_program_free(p);
  onnx_model_free(m);
  return r;
}

/* Attention as PyTorch exports it: x [1, 2, 6, 4] as q, k = 0.5 x, v =
 * -x; Softmax(masked scores) v, the scores q k^T * 0.5 (or q and k^T each
 * times sqrt(0.5) first), masked by Where(mask, scores, fill) with the
 * mask from Trilu (lower: causal; upper: not) and Equal, or by adding a
 * float mask of 0 and fill; or a mask keeping everything (BERT's padding
 * mask of ones: (1 - ones) * min, all zeros, [1, 1, 1, 6]; or Where on
 * all true; or no mask at all). k^T is transpose(k) of the last two dims, or (keyperm 1) one
 * transpose from k's [1, 6, 2, 4] layout, as PyTorch writes
 * k.view(b, t, h, d).permute(0, 2, 1, 3).transpose(-1, -2), or (keyperm
 * 2) k as [2, 6, 4], transposed and reshaped back, as torch.export does. The import
 * makes the attention op for every additive mask (causal or keeping
 * everything: the causal flag or nothing; any other: an additive bias)
 * and every Where of fill <= -1e9 (the bias where(mask, 0, fill) for a
 * mask neither causal nor keeping all), not for a Where of a higher fill
 * (not the same as adding it); every variant matches the definition
 * computed here. */
enum { MASK_LOWER, MASK_UPPER, MASK_NONE, MASK_ABSENT };

/* The definition the attention tests compare with, in double: per head h
 * of x [hs, n, dk], q = x, k = 0.5 x, v = -x, scores q k^T * 0.5 passed
 * through score(s, i, j, u) (masks, biases), softmax over j, times v. */
static void attention_want(const float *x, int hs, int n, int dk,
                           double (*score)(double s, int i, int j, const void *u), const void *u,
                           float *want) {
  for (int h = 0; h < hs; h++)
    for (int i = 0; i < n; i++) {
      const float *xh = x + h * n * dk;
      double s[n], mx = -INFINITY, sum = 0;
      for (int j = 0; j < n; j++) {
        double d = 0;
        for (int e = 0; e < dk; e++) d += (double)xh[i * dk + e] * 0.5 * xh[j * dk + e];
        s[j] = score(d * 0.5, i, j, u);
        mx = fmax(mx, s[j]);
      }
      for (int j = 0; j < n; j++) sum += s[j] = exp(s[j] - mx);
      for (int e = 0; e < dk; e++) {
        double acc = 0;
        for (int j = 0; j < n; j++) acc += s[j] / sum * -xh[j * dk + e];
        want[(h * n + i) * dk + e] = (float)acc;
      }
    }
}

/* A causal (or upper) mask: kept scores as they are, the others fill, or
 * plus fill when the mask is additive. */
typedef struct mask_rule {
  bool none, upper, additive;
  float fill;
} mask_rule;

static double masked_score(double s, int i, int j, const void *u) {
  const mask_rule *r = u;
  bool kept = r->none || (r->upper ? j >= i : j <= i);
  return kept ? s : r->additive ? s + r->fill : r->fill;
}

/* BERT's padding mask: (1 - mask[j]) * -10000 added. */
static double padded_score(double s, int i, int j, const void *u) {
  (void)i;
  return s + (1.0 - (double)((const int64_t *)u)[j]) * -10000.0;
}

static void test_causal_attention(void) {
  static const struct {
    int mask, additive, prescaled, keyperm;
    float fill;
    int attention;
  } cases[] = {{MASK_LOWER, 0, 0, 0, -1e9f, 1},     {MASK_LOWER, 0, 0, 0, -INFINITY, 1},
               {MASK_LOWER, 0, 0, 0, -1e4f, 0},     {MASK_UPPER, 0, 0, 0, -1e9f, 1},
               {MASK_LOWER, 1, 0, 0, -INFINITY, 1}, {MASK_LOWER, 1, 0, 0, -1e4f, 1},
               {MASK_UPPER, 1, 0, 0, -INFINITY, 1}, {MASK_LOWER, 0, 1, 0, -1e9f, 1},
               {MASK_LOWER, 1, 1, 0, -3.4e38f, 1},  {MASK_LOWER, 0, 0, 1, -3.4e38f, 1},
               {MASK_LOWER, 1, 1, 1, -INFINITY, 1}, {MASK_NONE, 1, 0, 0, -3.4e38f, 1},
               {MASK_NONE, 1, 0, 1, -3.4e38f, 1},   {MASK_NONE, 0, 1, 1, -3.4e38f, 1},
               {MASK_NONE, 0, 0, 0, -1e4f, 1},      {MASK_UPPER, 1, 0, 1, -INFINITY, 1},
               {MASK_LOWER, 1, 1, 2, -INFINITY, 1},  {MASK_UPPER, 0, 0, 2, -1e9f, 1},
               {MASK_ABSENT, 0, 0, 1, 0, 1},        {MASK_ABSENT, 0, 1, 2, 0, 1}};
  enum { N = 6, DK = 4, HS = 2 };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    gw w = {0};
    pbw v = onnxw_value("x", 1, 4, (int64_t[]){1, HS, N, DK}, NULL);
    pbw_msg(&w.g, 11, &v);
    const char *k = op2(&w, "Mul", "x", scalar_f(&w, 0.5f)), *vv = op1(&w, "Neg", "x"), *kt, *sc;
    if (cases[c].keyperm == 2) { /* torch.export: [1, h, t, d] as [h, t, d], transposed, and back */
      const char *k3 = op2(&w, "Reshape", k, ints(&w, 3, (int64_t[]){HS, N, DK}));
      pbw perm = onnxw_attr_ints("perm", 3, (int64_t[]){0, 2, 1});
      const char *kt3 = node(&w, "Transpose", 1, &k3, &perm, 1);
      kt = op2(&w, "Reshape", kt3, ints(&w, 4, (int64_t[]){1, HS, DK, N}));
    } else if (cases[c].keyperm) {
      pbw heads = onnxw_attr_ints("perm", 4, (int64_t[]){0, 2, 1, 3});
      const char *kx = node(&w, "Transpose", 1, &k, &heads, 1);
      pbw perm = onnxw_attr_ints("perm", 4, (int64_t[]){0, 2, 3, 1});
      kt = node(&w, "Transpose", 1, &kx, &perm, 1);
    } else {
      pbw perm = onnxw_attr_ints("perm", 4, (int64_t[]){0, 1, 3, 2});
      kt = node(&w, "Transpose", 1, &k, &perm, 1);
    }
    if (cases[c].prescaled) {
      float r = sqrtf(0.5f);
      sc = op2(&w, "MatMul", op2(&w, "Mul", "x", scalar_f(&w, r)), op2(&w, "Mul", kt, scalar_f(&w, r)));
    } else {
      sc = op2(&w, "Mul", op2(&w, "MatMul", "x", kt), scalar_f(&w, 0.5f));
    }
    bool none = cases[c].mask == MASK_NONE || cases[c].mask == MASK_ABSENT;
    float mask[N * N];
    for (int i = 0; i < N * N; i++) {
      bool kept = none || (cases[c].mask == MASK_UPPER ? i % N >= i / N : i % N <= i / N);
      mask[i] = cases[c].additive ? (kept ? 0.0f : cases[c].fill) : 1.0f;
    }
    const char *on = fresh(&w);
    pbw t = none && cases[c].additive ? onnxw_tensor(on, 1, 4, (int64_t[]){1, 1, 1, N}, mask, sizeof(float) * N)
                                      : onnxw_tensor(on, 1, 2, (int64_t[]){N, N}, mask, sizeof mask);
    pbw_msg(&w.g, 5, &t);
    const char *masked;
    if (cases[c].mask == MASK_ABSENT) {
      masked = sc;
    } else if (cases[c].additive) {
      masked = op2(&w, "Add", sc, on);
    } else {
      const char *tri = on;
      if (!none) {
        pbw up = onnxw_attr_int("upper", cases[c].mask == MASK_UPPER);
        tri = node(&w, "Trilu", 1, &on, &up, 1);
      }
      const char *keep = op2(&w, "Equal", tri, scalar_f(&w, 1.0f));
      const char *win[3] = {keep, sc, scalar_f(&w, cases[c].fill)};
      masked = node(&w, "Where", 3, win, NULL, 0);
    }
    pbw ax = onnxw_attr_int("axis", -1);
    const char *pr = node(&w, "Softmax", 1, &masked, &ax, 1);
    const char *mm[2] = {pr, vv};
    pbw o = onnxw_node("MatMul", "att", 2, mm, 1, (const char *[]){"y"});
    pbw_msg(&w.g, 1, &o);
    v = onnxw_value("y", 1, 4, (int64_t[]){1, HS, N, DK}, NULL);
    pbw_msg(&w.g, 12, &v);
    pbw m = onnxw_model(&w.g, 17);
    CHECK(count_op(&m, LOOM_OP_ATTENTION) == cases[c].attention);
    float x[HS * N * DK], want[HS * N * DK];
    for (int i = 0; i < HS * N * DK; i++) x[i] = (float)loom_test_uniform(&rng, -2, 2);
    mask_rule rule = {none, cases[c].mask == MASK_UPPER, cases[c].additive, cases[c].fill};
    attention_want(x, HS, N, DK, masked_score, &rule, want);
    char what[160];
    snprintf(what, sizeof what, "attention, %s %s mask, fill %g%s%s",
             cases[c].mask == MASK_ABSENT ? "no" : none ? "keep-all" : cases[c].mask == MASK_UPPER ? "upper" : "causal",
             cases[c].additive ? "additive" : "Where", (double)cases[c].fill,
             cases[c].prescaled ? ", q and k scaled" : "",
             cases[c].keyperm == 2 ? ", k^T through [h, t, d]"
             : cases[c].keyperm    ? ", k^T from [b, t, h, d]"
                                   : "");
    run_and_compare(what, &m, "x", 4, (int64_t[]){1, HS, N, DK}, x, want, HS * N * DK, 0);
    free(m.p);
  }
}

/* BERT's padding mask known only at run time, as Hugging Face exports
 * it: mask i64 [1, N] an input, (1 - float(mask[:, None, None, :])) *
 * -10000 added to the scaled scores q k^T * 0.5 (x [1, 2, N, 4] as q, k =
 * 0.5 x, v = -x). The import makes one attention op with that additive
 * bias (flash attention in the session), and the results are the
 * definition's computed here, with the last three keys padded. */
static void test_padding_mask_attention(void) {
  enum { N = 6, DK = 4, HS = 2 };
  gw w = {0};
  pbw v = onnxw_value("x", 1, 4, (int64_t[]){1, HS, N, DK}, NULL);
  pbw_msg(&w.g, 11, &v);
  v = onnxw_value("mask", 7, 2, (int64_t[]){1, N}, NULL);
  pbw_msg(&w.g, 11, &v);
  const char *k = op2(&w, "Mul", "x", scalar_f(&w, 0.5f)), *vv = op1(&w, "Neg", "x");
  pbw perm = onnxw_attr_ints("perm", 4, (int64_t[]){0, 1, 3, 2});
  const char *kt = node(&w, "Transpose", 1, &k, &perm, 1);
  const char *sc = op2(&w, "Mul", op2(&w, "MatMul", "x", kt), scalar_f(&w, 0.5f));
  const char *m4 = op2(&w, "Unsqueeze", "mask", ints(&w, 2, (int64_t[]){1, 2}));
  pbw to = onnxw_attr_int("to", 1);
  const char *mf = node(&w, "Cast", 1, &m4, &to, 1);
  const char *ext = op2(&w, "Mul", op2(&w, "Sub", scalar_f(&w, 1.0f), mf), scalar_f(&w, -10000.0f));
  const char *masked = op2(&w, "Add", sc, ext);
  pbw ax = onnxw_attr_int("axis", -1);
  const char *pr = node(&w, "Softmax", 1, &masked, &ax, 1);
  const char *mm[2] = {pr, vv};
  pbw o = onnxw_node("MatMul", "att", 2, mm, 1, (const char *[]){"y"});
  pbw_msg(&w.g, 1, &o);
  v = onnxw_value("y", 1, 4, (int64_t[]){1, HS, N, DK}, NULL);
  pbw_msg(&w.g, 12, &v);
  pbw model = onnxw_model(&w.g, 17);
  CHECK(count_op(&model, LOOM_OP_ATTENTION) == 1);
  float x[HS * N * DK], want[HS * N * DK];
  int64_t mask[N] = {1, 1, 1, 0, 0, 0};
  for (int i = 0; i < HS * N * DK; i++) x[i] = (float)loom_test_uniform(&rng, -2, 2);
  attention_want(x, HS, N, DK, padded_score, mask, want);
  onnx_model *m = NULL;
  onnx_program *p = NULL;
  CHECK_OK(ctx, onnx_model_parse(ctx, model.p, model.n, NULL, &m));
  if (m) CHECK_OK(ctx, onnx_import(ctx, m, 0, NULL, &p));
  loom_tensor *xt = NULL, *mt = NULL;
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 4, (int64_t[]){1, HS, N, DK}, x, &xt));
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_I64, 2, (int64_t[]){1, N}, mask, &mt));
  onnx_feed f[2] = {{"x", xt}, {"mask", mt}};
  static const char *const backends[3] = {"ref", "cpu", "cpu"};
  for (int b = 0; p && b < 3; b++) {
    loom_session *sess = NULL;
    loom_tensor *out[1] = {NULL};
    loom_session_options opts = LOOM_SESSION_OPTIONS(
        .backend = backends[b], .fusion = b == 2 ? LOOM_FUSION_STITCH : LOOM_FUSION_EAGER);
    CHECK_OK(ctx, onnx_program_session(ctx, p, &opts, &sess));
    if (sess) CHECK_OK(ctx, onnx_program_run(ctx, p, sess, 2, f, out));
    double err = out[0] ? 0 : INFINITY;
    for (int64_t i = 0; out[0] && i < HS * N * DK; i++)
      err = fmax(err, fabs(((const float *)loom_tensor_data(out[0]))[i] - want[i]));
    printf("attention, runtime padding mask on %s/%s: max |error| %.3g\n", backends[b],
           b == 2 ? "stitch" : "eager", err);
    CHECK(err < 2e-5);
    loom_tensor_free(out[0]);
    loom_session_free(sess);
  }
  loom_tensor_free(xt);
  loom_tensor_free(mt);
  onnx_program_free(p);
  onnx_model_free(m);
  free(model.p);
}

/* Split(x W + b) as PyTorch exports a merged QKV projection: x [2, 3, 4],
 * W [4, 12], b of 12 values, split along the last axis into 4 + 4 + 4 (b
 * split with it) or along axis 1 into 1 + 2 (b whole in each part); the
 * parts multiplied together. The import makes x W one GEMM of 6 rows
 * and adds b's part to each slice (3 adds, or 2; the full sum is left
 * dead), and the values match loops. */
static void test_split_bias(void) {
  for (int along_last = 0; along_last < 2; along_last++) {
    gw w = {0};
    float wt[4 * 12], b[12], x[2 * 3 * 4], want[2 * 3 * 4 * 3];
    pbw v = onnxw_value("x", 1, 3, (int64_t[]){2, 3, 4}, NULL);
    pbw_msg(&w.g, 11, &v);
    const char *mm = op2(&w, "MatMul", "x", weight(&w, 2, (int64_t[]){4, 12}, wt, 0.5));
    const char *sum = op2(&w, "Add", weight(&w, 1, (int64_t[]){12}, b, 0.5), mm);
    const char *in[2] = {sum, along_last ? ints(&w, 3, (int64_t[]){4, 4, 4}) : ints(&w, 2, (int64_t[]){1, 2})};
    const char *parts[3] = {fresh(&w), fresh(&w), fresh(&w)};
    pbw split = onnxw_node("Split", "split", 2, in, along_last ? 3 : 2, parts);
    pbw ax = onnxw_attr_int("axis", along_last ? 2 : 1);
    pbw_msg(&split, 5, &ax);
    pbw_msg(&w.g, 1, &split);
    const char *y = along_last ? op2(&w, "Mul", op2(&w, "Mul", parts[0], parts[1]), parts[2])
                               : op2(&w, "Mul", op1(&w, "Neg", parts[0]), parts[1]);
    pbw idn = onnxw_node("Identity", "out", 1, &y, 1, (const char *[]){"y"});
    pbw_msg(&w.g, 1, &idn);
    int64_t n_out = along_last ? 2 * 3 * 4 : 2 * 2 * 12;
    v = onnxw_value("y", 1, 3, along_last ? (int64_t[]){2, 3, 4} : (int64_t[]){2, 2, 12}, NULL);
    pbw_msg(&w.g, 12, &v);
    pbw m = onnxw_model(&w.g, 17);
    CHECK(count_op(&m, LOOM_OP_ADD) >= (along_last ? 3 : 2)); /* and the dead full sum */
    CHECK(first_matmul_rank(&m) == 2); /* [2, 3, 4] x W as one GEMM of 6 rows */
    for (int i = 0; i < 2 * 3 * 4; i++) x[i] = (float)loom_test_uniform(&rng, -1, 1);
    float h[2 * 3 * 12];
    matmul(x, wt, h, 6, 4, 12);
    for (int i = 0; i < 6 * 12; i++) h[i] += b[i % 12];
    for (int bt = 0; bt < 2; bt++)
      for (int i = 0; i < (along_last ? 3 * 4 : 2 * 12); i++) {
        int r = i / (along_last ? 4 : 12), c = i % (along_last ? 4 : 12);
        const float *hb = h + bt * 36;
        want[bt * (along_last ? 12 : 24) + i] =
            along_last ? hb[r * 12 + c] * hb[r * 12 + 4 + c] * hb[r * 12 + 8 + c] : -hb[c] * hb[(1 + r) * 12 + c];
      }
    run_and_compare(along_last ? "Split of a biased product, last axis" : "Split of a biased product, axis 1", &m, "x",
                    3, (int64_t[]){2, 3, 4}, x, want, n_out, 0);
    free(m.p);
  }
}

/* GELU spelled out as exporters write it, x [2, 5]: (0) TorchScript's tanh
 * form (x * x * x, constants on the left), (1) torch.export's (Pow, Add(t,
 * 1)), (2) the erf form with x times 1/sqrt 2, (3) a tanh form with 0.045
 * for 0.044715 and (4) an erf form without the 0.5: the import makes the
 * gelu op for the first three only, and every variant matches its
 * definition computed here. */
static void test_gelu_forms(void) {
  for (int form = 0; form < 5; form++) {
    gw w = {0};
    pbw v = onnxw_value("x", 1, 2, (int64_t[]){2, 5}, NULL);
    pbw_msg(&w.g, 11, &v);
    const char *x = "x", *y;
    bool tanh_form = form == 0 || form == 1 || form == 3;
    double cube = form == 3 ? 0.045 : 0.044715, half = form == 4 ? 1.0 : 0.5;
    if (tanh_form) {
      const char *x3 = form == 1 ? op2(&w, "Pow", x, scalar_f(&w, 3.0f)) : op2(&w, "Mul", x, op2(&w, "Mul", x, x));
      const char *s = op2(&w, "Add", x, op2(&w, "Mul", scalar_f(&w, (float)cube), x3));
      const char *t = op1(&w, "Tanh", op2(&w, "Mul", scalar_f(&w, 0.7978845608f), s));
      const char *p = form == 1 ? op2(&w, "Add", t, scalar_f(&w, 1.0f)) : op2(&w, "Add", scalar_f(&w, 1.0f), t);
      y = form == 1 ? op2(&w, "Mul", x, op2(&w, "Mul", scalar_f(&w, 0.5f), p))
                    : op2(&w, "Mul", scalar_f(&w, 0.5f), op2(&w, "Mul", x, p));
    } else {
      const char *e = op1(&w, "Erf", op2(&w, "Mul", x, scalar_f(&w, 0.70710678f)));
      const char *p = op2(&w, "Add", e, scalar_f(&w, 1.0f));
      y = form == 4 ? op2(&w, "Mul", x, p) : op2(&w, "Mul", op2(&w, "Mul", scalar_f(&w, 0.5f), x), p);
    }
    pbw idn = onnxw_node("Identity", "out", 1, &y, 1, (const char *[]){"y"});
    pbw_msg(&w.g, 1, &idn);
    v = onnxw_value("y", 1, 2, (int64_t[]){2, 5}, NULL);
    pbw_msg(&w.g, 12, &v);
    pbw m = onnxw_model(&w.g, 17);
    CHECK(count_op(&m, LOOM_OP_GELU) == (form < 3));
    float xs[10], want[10];
    for (int i = 0; i < 10; i++) {
      double a = xs[i] = (float)loom_test_uniform(&rng, -4, 4);
      double c = tanh_form ? 1 + tanh(0.7978845608 * (a + cube * a * a * a)) : 1 + erf(a * 0.70710678);
      want[i] = (float)(half * a * c);
    }
    char what[64];
    snprintf(what, sizeof what, "GELU spelled out, form %d", form);
    run_and_compare(what, &m, "x", 2, (int64_t[]){2, 5}, xs, want, 10, 0);
    free(m.p);
  }
}

/* MaxPool with Indices: x [2, 3, 7, 6] of few distinct values (ties),
 * kernel [3, 2], strides [2, 2], pads [1, 0, 1, 1], dilations [1, 2],
 * ceil_mode, both storage orders, on every backend, against loops that
 * take the first maximum in the window's row-major order. */
static void test_maxpool_indices(void) {
  enum { N = 2, C = 3, H = 7, W = 6, KH = 3, KW = 2 };
  const int64_t st[2] = {2, 2}, lo[2] = {1, 0}, hi[2] = {1, 1}, dil[2] = {1, 2};
  int64_t oh = 0, ow = 0, os[2];
  for (int d = 0; d < 2; d++) { /* ceil_mode, the last window starting inside */
    int64_t s = d ? W : H, k = d ? KW : KH, room = s + lo[d] + hi[d] - (dil[d] * (k - 1) + 1);
    os[d] = (room + st[d] - 1) / st[d] + 1;
    if ((os[d] - 1) * st[d] >= s + lo[d]) os[d]--;
  }
  oh = os[0], ow = os[1];
  float x[N * C * H * W];
  for (int i = 0; i < N * C * H * W; i++) x[i] = (float)floor(loom_test_uniform(&rng, 0, 4));
  for (int order = 0; order < 2; order++) {
    gw w = {0};
    pbw v = onnxw_value("x", 1, 4, (int64_t[]){N, C, H, W}, NULL);
    pbw_msg(&w.g, 11, &v);
    pbw a[6] = {onnxw_attr_ints("kernel_shape", 2, (int64_t[]){KH, KW}),
                onnxw_attr_ints("strides", 2, st),
                onnxw_attr_ints("pads", 4, (int64_t[]){lo[0], lo[1], hi[0], hi[1]}),
                onnxw_attr_ints("dilations", 2, dil), onnxw_attr_int("ceil_mode", 1),
                onnxw_attr_int("storage_order", order)};
    const char *in = "x";
    pbw nd = onnxw_node("MaxPool", "mp", 1, &in, 2, (const char *[]){"y", "i"});
    for (int k = 0; k < 6; k++) pbw_msg(&nd, 5, &a[k]);
    pbw_msg(&w.g, 1, &nd);
    v = onnxw_value("y", 1, 4, (int64_t[]){N, C, oh, ow}, NULL);
    pbw_msg(&w.g, 12, &v);
    v = onnxw_value("i", 7, 4, (int64_t[]){N, C, oh, ow}, NULL);
    pbw_msg(&w.g, 12, &v);
    pbw m = onnxw_model(&w.g, 12);
    onnx_model *om = NULL;
    onnx_program *p = NULL;
    CHECK_OK(ctx, onnx_model_parse(ctx, m.p, m.n, NULL, &om));
    if (om) CHECK_OK(ctx, onnx_import(ctx, om, 0, NULL, &p));
    loom_tensor *xt = NULL;
    CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 4, (int64_t[]){N, C, H, W}, x, &xt));
    onnx_feed f = {"x", xt};
    static const char *backends[] = {"ref", "cpu", "cpu"};
    for (int b = 0; p && b < 3; b++) {
      loom_session *s = NULL;
      loom_tensor *out[2] = {NULL, NULL};
      loom_session_options o = LOOM_SESSION_OPTIONS(
          .backend = backends[b], .fusion = b == 2 ? LOOM_FUSION_STITCH : LOOM_FUSION_EAGER);
      CHECK_OK(ctx, onnx_program_session(ctx, p, &o, &s));
      if (s) CHECK_OK(ctx, onnx_program_run(ctx, p, s, 1, &f, out));
      CHECK(out[0] && out[1] && loom_tensor_dtype(out[1]) == LOOM_DTYPE_I64);
      int bad = 0;
      for (int64_t e = 0; out[0] && out[1] && e < N * C * oh * ow; e++) {
        int64_t j = e % ow, i = e / ow % oh, nc = e / (oh * ow), best = -1;
        for (int64_t a0 = 0; a0 < KH; a0++)
          for (int64_t a1 = 0; a1 < KW; a1++) {
            int64_t r = i * st[0] + a0 * dil[0] - lo[0], c = j * st[1] + a1 * dil[1] - lo[1];
            if (r < 0 || r >= H || c < 0 || c >= W) continue;
            int64_t at = nc * H * W + r * W + c;
            if (best < 0 || x[at] > x[best]) best = at;
          }
        int64_t r = best % (H * W) / W, c = best % W;
        int64_t want = nc * H * W + (order ? c * H + r : r * W + c);
        bad += ((const float *)loom_tensor_data(out[0]))[e] != x[best] ||
               ((const int64_t *)loom_tensor_data(out[1]))[e] != want;
      }
      printf("MaxPool Indices (storage_order %d) on %s: %d wrong\n", order, backends[b], bad);
      CHECK(bad == 0);
      loom_tensor_free(out[0]);
      loom_tensor_free(out[1]);
      loom_session_free(s);
    }
    loom_tensor_free(xt);
    onnx_program_free(p);
    onnx_model_free(om);
    free(m.p);
  }
}

/* AveragePool with dilations (opset 19): x [1, 2, 9, 8], kernel [3, 2],
 * dilations [2, 3], strides [1, 2], pads [2, 1, 1, 2], with and without
 * count_include_pad, against loops (the divisor: the window's positions
 * inside the input, or inside the padded input). */
static void test_avgpool_dilations(void) {
  enum { C = 2, H = 9, W = 8, KH = 3, KW = 2 };
  const int64_t st[2] = {1, 2}, lo[2] = {2, 1}, hi[2] = {1, 2}, dil[2] = {2, 3};
  int64_t os[2];
  for (int d = 0; d < 2; d++)
    os[d] = ((d ? W : H) + lo[d] + hi[d] - (dil[d] * ((d ? KW : KH) - 1) + 1)) / st[d] + 1;
  float x[C * H * W];
  for (int i = 0; i < C * H * W; i++) x[i] = (float)loom_test_uniform(&rng, -1, 1);
  for (int incl = 0; incl < 2; incl++) {
    gw w = {0};
    pbw v = onnxw_value("x", 1, 4, (int64_t[]){1, C, H, W}, NULL);
    pbw_msg(&w.g, 11, &v);
    pbw a[5] = {onnxw_attr_ints("kernel_shape", 2, (int64_t[]){KH, KW}),
                onnxw_attr_ints("strides", 2, st),
                onnxw_attr_ints("pads", 4, (int64_t[]){lo[0], lo[1], hi[0], hi[1]}),
                onnxw_attr_ints("dilations", 2, dil), onnxw_attr_int("count_include_pad", incl)};
    const char *in = "x";
    pbw nd = onnxw_node("AveragePool", "ap", 1, &in, 1, (const char *[]){"y"});
    for (int k = 0; k < 5; k++) pbw_msg(&nd, 5, &a[k]);
    pbw_msg(&w.g, 1, &nd);
    v = onnxw_value("y", 1, 4, (int64_t[]){1, C, os[0], os[1]}, NULL);
    pbw_msg(&w.g, 12, &v);
    pbw m = onnxw_model(&w.g, 19);
    int64_t n = C * os[0] * os[1];
    float *want = fa((size_t)n);
    for (int64_t e = 0; e < n; e++) {
      int64_t j = e % os[1], i = e / os[1] % os[0], c = e / (os[0] * os[1]);
      double sum = 0;
      int count = 0;
      for (int64_t a0 = 0; a0 < KH; a0++)
        for (int64_t a1 = 0; a1 < KW; a1++) {
          int64_t r = i * st[0] + a0 * dil[0] - lo[0], q = j * st[1] + a1 * dil[1] - lo[1];
          bool inside = r >= 0 && r < H && q >= 0 && q < W;
          if (inside) sum += x[(c * H + r) * W + q];
          count += inside || incl;
        }
      want[e] = (float)(sum / count);
    }
    run_and_compare(incl ? "AveragePool dilations, count_include_pad" : "AveragePool dilations",
                    &m, "x", 4, (int64_t[]){1, C, H, W}, x, want, n, 0);
    free(want);
    free(m.p);
  }
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

static void write_file(const char *dir, const char *name, const pbw *m) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(m->p, 1, m->n, f) == m->n && fclose(f) == 0);
  printf("wrote %s (%zu bytes)\n", path, m->n);
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
  test_group_norm();
  test_causal_attention();
  test_padding_mask_attention();
  test_split_bias();
  test_gelu_forms();
  test_maxpool_indices();
  test_avgpool_dilations();
  loom_ctx_free(ctx);
  return loom_test_finish("test_onnx_models");
}
