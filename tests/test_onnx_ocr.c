/* PaddleOCR-style models written as ONNX the way paddle2onnx writes them
 * (opset 11: BatchNormalization as a node with epsilon and momentum,
 * hard_swish as Add, Clip, Mul, Div; HardSigmoid alpha 0.2 beta 0.5 in
 * the squeeze-excite blocks; Resize with roi and scales inputs, or sizes
 * from a Shape -> Slice -> Concat chain; Constant nodes for those), after
 * PaddleOCR's published architectures, small and with random weights (no
 * PaddleOCR file or weight is used):
 *   - a DB text detector (ch_PP-OCR det's shape): a MobileNetV3-like
 *     backbone (Conv + BN + hard_swish stem; inverted residual blocks of
 *     1x1 expand, depthwise kxk, squeeze-excite, 1x1 project, residual
 *     Add), a DBFPN neck (1x1 convs, top-down Resize + Add, 3x3 convs,
 *     Resize of every level to 1/4 and Concat), and a DB head (Conv + BN
 *     + Relu, two ConvTranspose 2x2 stride 2, Sigmoid) on a 1x3x64x64
 *     image. The neck's upsamplings cover the Resize forms exporters
 *     write: nearest (asymmetric, floor) by scales, linear half_pixel by
 *     sizes, linear align_corners by scales and by sizes;
 *   - a direction classifier (ch_ppocr_mobile cls's shape): a small
 *     MobileNetV3 of HardSwish ops (opset 14), GlobalAveragePool,
 *     Flatten, Gemm, Softmax on a 1x3x32x96 text line.
 * Each is built node by node beside its reference, computed here by plain
 * loops from the same weights, and run on ref, cpu eager, cpu stitch (and
 * opencl where present). With an argument DIR it writes a 1x3x640x640
 * detector of PP-OCR mobile widths there instead (det_db.onnx), for
 * `loom bench` and bench/peers/onnx_bench.py. */
#include "onnx_models_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A value of the model under construction: its ONNX name, and its
 * reference data [c, h, w] (batch 1) computed by the loops here; NULL
 * data when only the model is written (benchmark sizes). */
typedef struct act {
  const char *name;
  int c, h, w;
  float *d;
} act;

static bool with_ref = true;

/* every buffer made, freed at the end */
static float *bufs[4096];
static int n_bufs;

static float *keep(size_t n) {
  float *p = fa(n);
  if (n_bufs < 4096) bufs[n_bufs++] = p;
  return p;
}
static void free_bufs(void) {
  while (n_bufs > 0) free(bufs[--n_bufs]);
}

static act act_new(const char *name, int c, int h, int w) {
  act a = {name, c, h, w, with_ref ? keep((size_t)c * h * w) : NULL};
  return a;
}

/* A Constant node holding a tensor (paddle2onnx writes its constants so). */
static const char *constant(gw *w, int dtype, int rank, const int64_t *dims, const void *raw, size_t n) {
  pbw t = onnxw_tensor(NULL, dtype, rank, dims, raw, n);
  pbw v = onnxw_attr_tensor("value", &t);
  return node(w, "Constant", 0, NULL, &v, 1);
}
static const char *scalar_c(gw *w, float v) { return constant(w, 1, 0, NULL, &v, 4); }

/* ---- layers: each writes its nodes and computes its reference ----------- */

/* Conv [co, ci/g, k, k], stride s, padding k/2, optional bias. */
static act conv(gw *w, act x, int co, int k, int s, int g, bool bias) {
  int cig = x.c / g, cog = co / g, p = k / 2;
  int oh = (x.h + 2 * p - k) / s + 1, ow = (x.w + 2 * p - k) / s + 1;
  size_t nw = (size_t)co * cig * k * k;
  float *wt = keep(nw), *b = bias ? keep((size_t)co) : NULL;
  double scale = 1.7 / sqrt((double)cig * k * k);
  const char *in[3] = {x.name, weight(w, 4, (int64_t[]){co, cig, k, k}, wt, scale), NULL};
  if (bias) in[2] = weight(w, 1, (int64_t[]){co}, b, 0.2);
  pbw a[5] = {onnxw_attr_ints("dilations", 2, (int64_t[]){1, 1}), onnxw_attr_int("group", g),
              onnxw_attr_ints("kernel_shape", 2, (int64_t[]){k, k}),
              onnxw_attr_ints("pads", 4, (int64_t[]){p, p, p, p}), onnxw_attr_ints("strides", 2, (int64_t[]){s, s})};
  act y = act_new(node(w, "Conv", bias ? 3 : 2, in, a, 5), co, oh, ow);
  for (int m = 0; y.d && m < co; m++)
    for (int i = 0; i < oh; i++)
      for (int j = 0; j < ow; j++) {
        double acc = b ? b[m] : 0;
        for (int c = 0; c < cig; c++)
          for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++) {
              int yi = i * s + ki - p, xj = j * s + kj - p;
              if (yi < 0 || yi >= x.h || xj < 0 || xj >= x.w) continue;
              acc += (double)x.d[((m / cog * cig + c) * x.h + yi) * x.w + xj] * wt[((m * cig + c) * k + ki) * k + kj];
            }
        y.d[(m * oh + i) * ow + j] = (float)acc;
      }
  return y;
}

/* BatchNormalization with model-constant statistics, as paddle2onnx
 * writes it (epsilon, momentum). */
static act batch_norm(gw *w, act x) {
  int c = x.c;
  float *g = keep((size_t)c), *b = keep((size_t)c), *mean = keep((size_t)c), *var = keep((size_t)c);
  for (int i = 0; i < c; i++) g[i] = 0.6f + (float)loom_test_uniform(&rng, 0, 0.5); /* gains away from 0 */
  for (int i = 0; i < c; i++) var[i] = 0.5f + (float)loom_test_uniform(&rng, 0, 1);
  const char *in[5] = {x.name, fresh(w), weight(w, 1, (int64_t[]){c}, b, 0.3), weight(w, 1, (int64_t[]){c}, mean, 0.3),
                       fresh(w)};
  pbw t = onnxw_tensor(in[1], 1, 1, (int64_t[]){c}, g, sizeof(float) * (size_t)c);
  pbw_msg(&w->g, 5, &t);
  t = onnxw_tensor(in[4], 1, 1, (int64_t[]){c}, var, sizeof(float) * (size_t)c);
  pbw_msg(&w->g, 5, &t);
  pbw a[2] = {onnxw_attr_float("epsilon", 1e-5f), onnxw_attr_float("momentum", 0.9f)};
  act y = act_new(node(w, "BatchNormalization", 5, in, a, 2), c, x.h, x.w);
  int plane = x.h * x.w;
  for (int i = 0; y.d && i < c * plane; i++) {
    int ch = i / plane;
    y.d[i] = (float)((x.d[i] - mean[ch]) / sqrt((double)var[ch] + 1e-5) * g[ch] + b[ch]);
  }
  return y;
}

enum { ACT_NONE, ACT_RELU, ACT_HSWISH_P2O, ACT_HSWISH, ACT_HSIGMOID, ACT_SIGMOID };

/* An activation: Relu; hard_swish as paddle2onnx writes it below opset
 * 14 (x * Clip(x + 3, 0, 6) / 6) or as the HardSwish op; HardSigmoid
 * (alpha 0.2, beta 0.5, PaddleOCR's squeeze-excite gate); Sigmoid. */
static act activation(gw *w, act x, int kind) {
  const char *y;
  switch (kind) {
  case ACT_NONE: return x;
  case ACT_RELU: y = op1(w, "Relu", x.name); break;
  case ACT_HSWISH: y = op1(w, "HardSwish", x.name); break;
  case ACT_SIGMOID: y = op1(w, "Sigmoid", x.name); break;
  case ACT_HSIGMOID: {
    pbw a[2] = {onnxw_attr_float("alpha", 0.2f), onnxw_attr_float("beta", 0.5f)};
    y = node(w, "HardSigmoid", 1, &x.name, a, 2);
    break;
  }
  default: {
    const char *clip_in[3] = {op2(w, "Add", x.name, scalar_c(w, 3.0f)), scalar_c(w, 0.0f), scalar_c(w, 6.0f)};
    const char *clip = node(w, "Clip", 3, clip_in, NULL, 0);
    y = op2(w, "Div", op2(w, "Mul", x.name, clip), scalar_c(w, 6.0f));
  }
  }
  act r = act_new(y, x.c, x.h, x.w);
  for (int i = 0; r.d && i < x.c * x.h * x.w; i++) {
    double v = x.d[i];
    switch (kind) {
    case ACT_RELU: v = v > 0 ? v : 0; break;
    case ACT_SIGMOID: v = 1 / (1 + exp(-v)); break;
    case ACT_HSIGMOID: v = fmin(1, fmax(0, 0.2 * v + 0.5)); break;
    default: v = v * fmin(6, fmax(0, v + 3)) / 6; break;
    }
    r.d[i] = (float)v;
  }
  return r;
}

static act conv_bn(gw *w, act x, int co, int k, int s, int g, int kind) {
  return activation(w, batch_norm(w, conv(w, x, co, k, s, g, false)), kind);
}

static act add(gw *w, act a, act b) {
  act y = act_new(op2(w, "Add", a.name, b.name), a.c, a.h, a.w);
  for (int i = 0; y.d && i < a.c * a.h * a.w; i++) y.d[i] = a.d[i] + b.d[i];
  return y;
}

/* PaddleOCR's squeeze-excite: GlobalAveragePool, 1x1 conv (C/4), Relu,
 * 1x1 conv (C), HardSigmoid, times x per channel. */
static act squeeze_excite(gw *w, act x) {
  act p = act_new(op1(w, "GlobalAveragePool", x.name), x.c, 1, 1);
  int plane = x.h * x.w;
  for (int c = 0; p.d && c < x.c; c++) {
    double s = 0;
    for (int i = 0; i < plane; i++) s += x.d[c * plane + i];
    p.d[c] = (float)(s / plane);
  }
  act gate = activation(w, conv(w, activation(w, conv(w, p, x.c / 4, 1, 1, 1, true), ACT_RELU), x.c, 1, 1, 1, true),
                        ACT_HSIGMOID);
  act y = act_new(op2(w, "Mul", x.name, gate.name), x.c, x.h, x.w);
  for (int i = 0; y.d && i < x.c * plane; i++) y.d[i] = x.d[i] * gate.d[i / plane];
  return y;
}

/* MobileNetV3's inverted residual: 1x1 expand + BN + act, depthwise kxk
 * (stride s) + BN + act, squeeze-excite, 1x1 project + BN, and the
 * input added back when the shapes agree. */
static act residual_unit(gw *w, act x, int mid, int out, int k, int s, bool se, int kind) {
  act h = conv_bn(w, x, mid, 1, 1, 1, kind);
  h = conv_bn(w, h, mid, k, s, mid, kind);
  if (se) h = squeeze_excite(w, h);
  h = conv_bn(w, h, out, 1, 1, 1, ACT_NONE);
  return s == 1 && x.c == out ? add(w, x, h) : h;
}

enum { RS_NEAREST, RS_LINEAR_HALF, RS_LINEAR_CORNERS };

/* Resize by an integer factor, as paddle2onnx writes it: inputs x, roi (a
 * Constant of ones), scales (a Constant [1, 1, f, f], or empty when sizes
 * are given) and sizes (Shape(x)[0:2] ++ [h f, w f] through Slice and
 * Concat); nearest with asymmetric coordinates and floor, or linear with
 * half_pixel or align_corners. */
static act resize(gw *w, act x, int f, int mode, bool by_sizes) {
  float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1}, scales[4] = {1, 1, (float)f, (float)f};
  const char *in[4] = {x.name, constant(w, 1, 1, (int64_t[]){8}, ones, sizeof ones), NULL, NULL};
  if (by_sizes) {
    in[2] = constant(w, 1, 1, (int64_t[]){0}, NULL, 0);
    const char *sl[3] = {op1(w, "Shape", x.name), constant(w, 7, 1, (int64_t[]){1}, (int64_t[]){0}, 8),
                         constant(w, 7, 1, (int64_t[]){1}, (int64_t[]){2}, 8)};
    const char *cat[2] = {node(w, "Slice", 3, sl, NULL, 0),
                          constant(w, 7, 1, (int64_t[]){2}, (int64_t[]){x.h * f, x.w * f}, 16)};
    pbw ax = onnxw_attr_int("axis", 0);
    in[3] = node(w, "Concat", 2, cat, &ax, 1);
  } else {
    in[2] = constant(w, 1, 1, (int64_t[]){4}, scales, sizeof scales);
  }
  pbw a[3];
  int na = 2;
  a[0] = onnxw_attr_str("mode", mode == RS_NEAREST ? "nearest" : "linear");
  a[1] = onnxw_attr_str("coordinate_transformation_mode",
                        mode == RS_NEAREST ? "asymmetric" : mode == RS_LINEAR_HALF ? "half_pixel" : "align_corners");
  if (mode == RS_NEAREST) a[na++] = onnxw_attr_str("nearest_mode", "floor");
  act y = act_new(node(w, "Resize", by_sizes ? 4 : 3, in, a, na), x.c, x.h * f, x.w * f);
  for (int c = 0; y.d && c < x.c; c++)
    for (int i = 0; i < y.h; i++)
      for (int j = 0; j < y.w; j++) {
        double v;
        if (mode == RS_NEAREST) {
          v = x.d[(c * x.h + i / f) * x.w + j / f];
        } else { /* bilinear: source coordinates clamped to the image */
          double src[2];
          for (int d = 0; d < 2; d++) {
            int o = d ? j : i, n = d ? x.w : x.h;
            double s = mode == RS_LINEAR_HALF ? (o + 0.5) / f - 0.5 : (double)o * (n - 1) / (n * f - 1);
            src[d] = fmin(fmax(s, 0), n - 1);
          }
          int i0 = (int)floor(src[0]), j0 = (int)floor(src[1]);
          int i1 = i0 + 1 < x.h ? i0 + 1 : i0, j1 = j0 + 1 < x.w ? j0 + 1 : j0;
          double ri = src[0] - i0, rj = src[1] - j0;
          const float *p = x.d + c * x.h * x.w;
          v = (1 - ri) * ((1 - rj) * p[i0 * x.w + j0] + rj * p[i0 * x.w + j1]) +
              ri * ((1 - rj) * p[i1 * x.w + j0] + rj * p[i1 * x.w + j1]);
        }
        y.d[(c * y.h + i) * y.w + j] = (float)v;
      }
  return y;
}

static act concat4(gw *w, const act *parts) {
  const char *in[4] = {parts[0].name, parts[1].name, parts[2].name, parts[3].name};
  pbw ax = onnxw_attr_int("axis", 1);
  int c = 0;
  for (int i = 0; i < 4; i++) c += parts[i].c;
  act y = act_new(node(w, "Concat", 4, in, &ax, 1), c, parts[0].h, parts[0].w);
  size_t at = 0;
  for (int i = 0; y.d && i < 4; i++) {
    size_t n = (size_t)parts[i].c * parts[i].h * parts[i].w;
    memcpy(y.d + at, parts[i].d, n * sizeof(float));
    at += n;
  }
  return y;
}

/* ConvTranspose 2x2, stride 2, with bias: weights [ci, co, 2, 2] of
 * scale gain / sqrt(ci). */
static act conv_transpose2(gw *w, act x, int co, double gain) {
  float *wt = keep((size_t)x.c * co * 4), *b = keep((size_t)co);
  const char *in[3] = {x.name, weight(w, 4, (int64_t[]){x.c, co, 2, 2}, wt, gain / sqrt((double)x.c)),
                       weight(w, 1, (int64_t[]){co}, b, 0.2)};
  pbw a[4] = {onnxw_attr_ints("dilations", 2, (int64_t[]){1, 1}), onnxw_attr_int("group", 1),
              onnxw_attr_ints("kernel_shape", 2, (int64_t[]){2, 2}), onnxw_attr_ints("strides", 2, (int64_t[]){2, 2})};
  act y = act_new(node(w, "ConvTranspose", 3, in, a, 4), co, 2 * x.h, 2 * x.w);
  for (int m = 0; y.d && m < co; m++)
    for (int i = 0; i < y.h; i++)
      for (int j = 0; j < y.w; j++) {
        double acc = b[m];
        for (int c = 0; c < x.c; c++)
          acc += (double)x.d[(c * x.h + i / 2) * x.w + j / 2] * wt[((c * co + m) * 2 + i % 2) * 2 + j % 2];
        y.d[(m * y.h + i) * y.w + j] = (float)acc;
      }
  return y;
}

/* ---- the detector ------------------------------------------------------------ */

typedef struct det_sizes {
  int hw;                /* input image side */
  int stem;              /* stem channels */
  int exp[4], out[4];    /* the four stages' expand and output channels (1/4 .. 1/32) */
  int fpn;               /* the neck's width */
} det_sizes;

/* PaddleOCR's DB detector on a MobileNetV3-like backbone; the output
 * (the shrink map) is named "maps", [1, 1, hw, hw]. */
static pbw det_model(const det_sizes *z, const float *img, act *out) {
  gw w = {0};
  pbw v = onnxw_value("x", 1, 4, (int64_t[]){1, 3, z->hw, z->hw}, NULL);
  pbw_msg(&w.g, 11, &v);
  act x = act_new("x", 3, z->hw, z->hw);
  if (x.d) memcpy(x.d, img, sizeof(float) * 3 * (size_t)(z->hw * z->hw));
  /* backbone: stem at 1/2, one unit at 1/2, then stages at 1/4 .. 1/32 */
  act h = conv_bn(&w, x, z->stem, 3, 2, 1, ACT_HSWISH_P2O);
  h = residual_unit(&w, h, z->stem, z->stem, 3, 1, false, ACT_RELU);
  act level[4];
  for (int s = 0; s < 4; s++) {
    bool late = s >= 2;
    h = residual_unit(&w, h, z->exp[s], z->out[s], late ? 5 : 3, 2, late, late ? ACT_HSWISH_P2O : ACT_RELU);
    if (s >= 2) h = residual_unit(&w, h, z->exp[s], z->out[s], 3, 1, true, ACT_HSWISH_P2O);
    level[s] = h;
  }
  /* DBFPN: 1x1 to the neck's width, top-down sums, 3x3 to a quarter,
   * every level up to 1/4 and concatenated */
  act in[4];
  for (int s = 0; s < 4; s++) in[s] = conv(&w, level[s], z->fpn, 1, 1, 1, false);
  act o4 = add(&w, in[2], resize(&w, in[3], 2, RS_NEAREST, false));
  act o3 = add(&w, in[1], resize(&w, o4, 2, RS_LINEAR_HALF, true));
  act o2 = add(&w, in[0], resize(&w, o3, 2, RS_LINEAR_CORNERS, false));
  act p[4] = {conv(&w, in[3], z->fpn / 4, 3, 1, 1, false), conv(&w, o4, z->fpn / 4, 3, 1, 1, false),
              conv(&w, o3, z->fpn / 4, 3, 1, 1, false), conv(&w, o2, z->fpn / 4, 3, 1, 1, false)};
  p[0] = resize(&w, p[0], 8, RS_NEAREST, false);
  p[1] = resize(&w, p[1], 4, RS_LINEAR_CORNERS, true);
  p[2] = resize(&w, p[2], 2, RS_NEAREST, true);
  act fuse = concat4(&w, p);
  /* DB head: 3x3 conv + BN + Relu, ConvTranspose + BN + Relu, ConvTranspose, Sigmoid */
  act t = conv_bn(&w, fuse, z->fpn / 4, 3, 1, 1, ACT_RELU);
  t = activation(&w, batch_norm(&w, conv_transpose2(&w, t, z->fpn / 4, 1.7)), ACT_RELU);
  /* (the last one's weights larger: the random layers before it leave
   * small values, which the Sigmoid would map to about 0.5 everywhere) */
  t = activation(&w, conv_transpose2(&w, t, 1, 30.0), ACT_SIGMOID);
  pbw idn = onnxw_node("Identity", "out", 1, &t.name, 1, (const char *[]){"maps"});
  pbw_msg(&w.g, 1, &idn);
  v = onnxw_value("maps", 1, 4, (int64_t[]){1, 1, z->hw, z->hw}, NULL);
  pbw_msg(&w.g, 12, &v);
  *out = t;
  return onnxw_model(&w.g, 11);
}

/* ---- the direction classifier -------------------------------------------- */

enum { CLS_H = 32, CLS_W = 96, CLS_N = 2 };

static pbw cls_model(const float *img, act *out) {
  gw w = {0};
  pbw v = onnxw_value("x", 1, 4, (int64_t[]){1, 3, CLS_H, CLS_W}, NULL);
  pbw_msg(&w.g, 11, &v);
  act x = act_new("x", 3, CLS_H, CLS_W);
  memcpy(x.d, img, sizeof(float) * 3 * CLS_H * CLS_W);
  act h = conv_bn(&w, x, 8, 3, 2, 1, ACT_HSWISH);
  h = residual_unit(&w, h, 8, 8, 3, 2, true, ACT_RELU);
  h = residual_unit(&w, h, 24, 12, 3, 1, false, ACT_RELU);
  h = residual_unit(&w, h, 32, 12, 3, 1, false, ACT_RELU);
  h = residual_unit(&w, h, 48, 16, 5, 2, true, ACT_HSWISH);
  h = conv_bn(&w, h, 32, 1, 1, 1, ACT_HSWISH);
  act p = act_new(op1(&w, "GlobalAveragePool", h.name), h.c, 1, 1);
  for (int c = 0; c < h.c; c++) {
    double s = 0;
    for (int i = 0; i < h.h * h.w; i++) s += h.d[c * h.h * h.w + i];
    p.d[c] = (float)(s / (h.h * h.w));
  }
  float *fc = keep((size_t)h.c * CLS_N), *fb = keep(CLS_N);
  const char *gin[3] = {op1(&w, "Flatten", p.name), weight(&w, 2, (int64_t[]){h.c, CLS_N}, fc, 1.0),
                        weight(&w, 1, (int64_t[]){CLS_N}, fb, 0.2)};
  const char *logits = node(&w, "Gemm", 3, gin, NULL, 0);
  pbw ax = onnxw_attr_int("axis", 1);
  pbw sm = onnxw_node("Softmax", "softmax", 1, &logits, 1, (const char *[]){"probs"});
  pbw_msg(&sm, 5, &ax);
  pbw_msg(&w.g, 1, &sm);
  v = onnxw_value("probs", 1, 2, (int64_t[]){1, CLS_N}, NULL);
  pbw_msg(&w.g, 12, &v);
  act y = act_new("probs", CLS_N, 1, 1);
  double l[CLS_N], m = -INFINITY, z = 0;
  for (int k = 0; k < CLS_N; k++) {
    l[k] = fb[k];
    for (int c = 0; c < h.c; c++) l[k] += (double)p.d[c] * fc[c * CLS_N + k];
    m = fmax(m, l[k]);
  }
  for (int k = 0; k < CLS_N; k++) z += exp(l[k] - m);
  for (int k = 0; k < CLS_N; k++) y.d[k] = (float)(exp(l[k] - m) / z);
  *out = y;
  return onnxw_model(&w.g, 14);
}

/* The spread of n values (their standard deviation): the checks below
 * would say little about a map saturated at 0 or 1. */
static double spread(const float *v, int n) {
  double m = 0, s = 0;
  for (int i = 0; i < n; i++) m += v[i];
  m /= n;
  for (int i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
  return sqrt(s / n);
}

int main(int argc, char **argv) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  if (argc > 1) { /* PP-OCR mobile widths (MobileNetV3 large x0.5, neck 96) at 640x640 */
    with_ref = false;
    det_sizes z = {640, 8, {32, 72, 120, 240}, {16, 24, 40, 80}, 96};
    act out;
    pbw m = det_model(&z, NULL, &out);
    write_file(argv[1], "det_db.onnx", &m);
    free(m.p);
    free_bufs();
    loom_ctx_free(ctx);
    return loom_test_finish("test_onnx_ocr");
  }
  det_sizes z = {64, 8, {16, 24, 32, 48}, {8, 12, 16, 24}, 16};
  float *img = fa(3 * 64 * 64);
  for (int i = 0; i < 3 * 64 * 64; i++) img[i] = (float)loom_test_uniform(&rng, -1, 1);
  act maps;
  pbw m = det_model(&z, img, &maps);
  printf("detector: shrink map spread %.3f\n", spread(maps.d, 64 * 64));
  CHECK(spread(maps.d, 64 * 64) > 0.05);
  CHECK(count_op(&m, LOOM_OP_CONV_TRANSPOSE) == 0); /* 2x2 stride 2: 1x1 convs and a transpose */
  run_and_compare_on("PaddleOCR-style DB detector", &m, "x", 4, (int64_t[]){1, 3, 64, 64}, img, maps.d, 64 * 64, 6,
                     1e-4, true);
  free(m.p);
  free(img);

  img = fa(3 * CLS_H * CLS_W);
  for (int i = 0; i < 3 * CLS_H * CLS_W; i++) img[i] = (float)loom_test_uniform(&rng, -1, 1);
  act probs;
  m = cls_model(img, &probs);
  printf("classifier: probabilities %.4f %.4f\n", probs.d[0], probs.d[1]);
  CHECK(fabs(probs.d[0] - 0.5) > 0.01);
  run_and_compare_on("PaddleOCR-style direction classifier", &m, "x", 4, (int64_t[]){1, 3, CLS_H, CLS_W}, img,
                     probs.d, CLS_N, 0, 1e-4, true);
  free(m.p);
  free(img);
  free_bufs();
  loom_ctx_free(ctx);
  return loom_test_finish("test_onnx_ocr");
}
