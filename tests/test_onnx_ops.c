/* Single ONNX converters against their definitions, on ref, cpu eager
 * and cpu stitch: GroupNormalization, MaxPool with Indices, AveragePool
 * with dilations, Resize by whole factors, ConvTranspose. */
#include "onnx_models_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* One output position o of an axis I -> I f resized as ONNX defines it
 * (scale f): the taps' input indices (clamped to the axis) and weights.
 * mode 0 nearest (asymmetric, floor), 1 linear, 2 cubic (A = -0.75); coord
 * 0 half_pixel, 1 pytorch_half_pixel, 2 align_corners. */
static int resize_taps(int mode, int coord, int I, int f, int o, int *idx, double *w) {
  if (mode == 0) {
    idx[0] = o / f, w[0] = 1;
    return 1;
  }
  double src = coord == 2 ? (double)o * (I - 1) / (I * f - 1) : (o + 0.5) / f - 0.5;
  if (coord == 1 && I * f == 1) src = -0.5;
  if (mode == 1) src = fmin(fmax(src, 0), I - 1); /* linear: the edge value outside */
  int base = (int)floor(src), n = mode == 1 ? 2 : 4, first = mode == 1 ? base : base - 1;
  for (int k = 0; k < n; k++) {
    double t = fabs(src - (first + k)), A = -0.75;
    w[k] = mode == 1 ? fmax(0, 1 - t)
           : t <= 1  ? ((A + 2) * t - (A + 3)) * t * t + 1
                     : ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
    int i = first + k;
    idx[k] = i < 0 ? 0 : i >= I ? I - 1 : i;
  }
  return n;
}

/* Resize of x [1, 2, 3, 5] by whole factors, as exporters write it (roi,
 * scales inputs): nearest x2, x3; linear half_pixel x2; linear
 * pytorch_half_pixel x3; cubic half_pixel x2; linear align_corners x2.
 * Every one but align_corners repeats every f outputs and is imported
 * without a gather (shifted copies, broadcasts, reshapes); align_corners
 * keeps its gathers. All match the definition computed here. */
static void test_resize_whole_factors(void) {
  enum { C = 2, H = 3, W = 5 };
  static const struct {
    int mode, coord, fh, fw, gathers;
  } cases[] = {{0, 0, 2, 3, 0}, {1, 0, 2, 2, 0}, {1, 1, 3, 3, 0}, {2, 0, 2, 2, 0}, {1, 2, 2, 2, 4}};
  static const char *const modes[] = {"nearest", "linear", "cubic"};
  static const char *const coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners"};
  float x[C * H * W];
  for (int i = 0; i < C * H * W; i++) x[i] = (float)loom_test_uniform(&rng, -1, 1);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int fh = cases[c].fh, fw = cases[c].fw, OH = H * fh, OW = W * fw;
    gw w = {0};
    pbw v = onnxw_value("x", 1, 4, (int64_t[]){1, C, H, W}, NULL);
    pbw_msg(&w.g, 11, &v);
    float roi[8] = {0, 0, 0, 0, 1, 1, 1, 1}, sc[4] = {1, 1, (float)fh, (float)fw};
    const char *in[3] = {"x", fresh(&w), fresh(&w)};
    pbw t = onnxw_tensor(in[1], 1, 1, (int64_t[]){8}, roi, sizeof roi);
    pbw_msg(&w.g, 5, &t);
    t = onnxw_tensor(in[2], 1, 1, (int64_t[]){4}, sc, sizeof sc);
    pbw_msg(&w.g, 5, &t);
    pbw a[3] = {onnxw_attr_str("mode", modes[cases[c].mode]),
                onnxw_attr_str("coordinate_transformation_mode",
                               cases[c].mode == 0 ? "asymmetric" : coords[cases[c].coord]),
                onnxw_attr_str("nearest_mode", "floor")};
    pbw nd = onnxw_node("Resize", "rs", 3, in, 1, (const char *[]){"y"});
    for (int k = 0; k < 3; k++) pbw_msg(&nd, 5, &a[k]);
    pbw_msg(&w.g, 1, &nd);
    v = onnxw_value("y", 1, 4, (int64_t[]){1, C, OH, OW}, NULL);
    pbw_msg(&w.g, 12, &v);
    pbw m = onnxw_model(&w.g, 13);
    int gathers = count_op(&m, LOOM_OP_GATHER);
    printf("Resize case %zu: %d gathers\n", c, gathers);
    CHECK(gathers == cases[c].gathers);
    float *want = fa((size_t)(C * OH * OW));
    for (int ch = 0; ch < C; ch++)
      for (int i = 0; i < OH; i++)
        for (int j = 0; j < OW; j++) {
          int ih[4], iw[4];
          double wh[4], ww[4], acc = 0;
          int nh = resize_taps(cases[c].mode, cases[c].coord, H, fh, i, ih, wh);
          int nw = resize_taps(cases[c].mode, cases[c].coord, W, fw, j, iw, ww);
          for (int p = 0; p < nh; p++)
            for (int q = 0; q < nw; q++) acc += wh[p] * ww[q] * x[(ch * H + ih[p]) * W + iw[q]];
          want[(ch * OH + i) * OW + j] = (float)acc;
        }
    char what[96];
    snprintf(what, sizeof what, "Resize %s %s x%d x%d", modes[cases[c].mode],
             cases[c].mode == 0 ? "asymmetric" : coords[cases[c].coord], fh, fw);
    run_and_compare_on(what, &m, "x", 4, (int64_t[]){1, C, H, W}, x, want, C * OH * OW, 0, 1e-5, false);
    free(want);
    free(m.p);
  }
}

/* ConvTranspose of x [2, 3, 4, 5] by W [3, 2, KH, KW] with bias, strides
 * [2, 3]: a kernel [2, 3] equal to the strides is imported as a 1x1 conv
 * and a transpose (no conv_transpose op), a kernel [3, 3] (overlapping
 * patches) stays conv_transpose; both against the definition. */
static void test_conv_transpose_patches(void) {
  enum { N = 2, C = 3, H = 4, W = 5, M = 2, SH = 2, SW = 3 };
  float x[N * C * H * W], wt[C * M * 3 * 3], b[M];
  for (int i = 0; i < N * C * H * W; i++) x[i] = (float)loom_test_uniform(&rng, -1, 1);
  for (int kh = 2; kh <= 3; kh++) {
    int kw = 3, OH = (H - 1) * SH + kh, OW = (W - 1) * SW + kw;
    gw w = {0};
    pbw v = onnxw_value("x", 1, 4, (int64_t[]){N, C, H, W}, NULL);
    pbw_msg(&w.g, 11, &v);
    const char *in[3] = {"x", weight(&w, 4, (int64_t[]){C, M, kh, kw}, wt, 0.5), weight(&w, 1, (int64_t[]){M}, b, 0.5)};
    pbw a = onnxw_attr_ints("strides", 2, (int64_t[]){SH, SW});
    pbw nd = onnxw_node("ConvTranspose", "ct", 3, in, 1, (const char *[]){"y"});
    pbw_msg(&nd, 5, &a);
    pbw_msg(&w.g, 1, &nd);
    v = onnxw_value("y", 1, 4, (int64_t[]){N, M, OH, OW}, NULL);
    pbw_msg(&w.g, 12, &v);
    pbw m = onnxw_model(&w.g, 11);
    CHECK(count_op(&m, LOOM_OP_CONV_TRANSPOSE) == (kh == 2 ? 0 : 1));
    float *want = fa((size_t)(N * M * OH * OW));
    double *acc = calloc((size_t)(N * M * OH * OW), sizeof *acc);
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++)
        for (int i = 0; i < H; i++)
          for (int j = 0; j < W; j++)
            for (int o = 0; o < M; o++)
              for (int p = 0; p < kh; p++)
                for (int q = 0; q < kw; q++)
                  acc[((n * M + o) * OH + i * SH + p) * OW + j * SW + q] +=
                      (double)x[((n * C + c) * H + i) * W + j] * wt[((c * M + o) * kh + p) * kw + q];
    for (int e = 0; e < N * M * OH * OW; e++) want[e] = (float)(acc[e] + b[e / (OH * OW) % M]);
    run_and_compare_on(kh == 2 ? "ConvTranspose, kernel = strides" : "ConvTranspose, overlapping", &m, "x", 4,
                       (int64_t[]){N, C, H, W}, x, want, N * M * OH * OW, 0, 1e-5, false);
    free(acc);
    free(want);
    free(m.p);
  }
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  test_group_norm();
  test_maxpool_indices();
  test_avgpool_dilations();
  test_resize_whole_factors();
  test_conv_transpose_patches();
  loom_ctx_free(ctx);
  return loom_test_finish("test_onnx_ops");
}
