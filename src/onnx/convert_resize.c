/*
 * Resize (opset 11+), separably: axis by axis from the last, each output
 * element a weighted sum of input elements gathered along the axis, the
 * indices and weights computed here at load time as the ONNX operator's
 * definition does (its coordinate transforms, nearest rounding modes,
 * linear and cubic coefficients, exclude_outside, and tf_crop_and_resize's
 * extrapolation value).
 *
 * An axis scaled by a whole factor f whose plan repeats every f outputs
 * (nearest, and linear or cubic in the half_pixel, pytorch_half_pixel and
 * asymmetric transforms, away from exclude_outside's edges) is written
 * without gathers: output i f + r is a fixed weighting of inputs i + s
 * (clamped to the axis) for a few shifts s, so it becomes the input's
 * edge-clamped shifted copies (slices and concats), each broadcast along
 * a new axis of f phases times its per-phase weights, summed and merged
 * back: element-wise and layout ops that stitching fuses into the
 * kernels around them, where a gather ran as a pass of its own (an FPN's
 * 2x nearest upsampling is then a broadcast and a reshape).
 */
#include "onnx/import_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define G (cv->g)
#define TAPS 4

typedef struct resize_opts {
  int mode;  /* 0 nearest, 1 linear, 2 cubic */
  int coord; /* 0 half_pixel, 1 asymmetric, 2 align_corners, 3 pytorch_half_pixel, 4 tf_crop_and_resize,
               * 5 tf_half_pixel_for_nn */
  int nearest; /* 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil */
  double a, extrapolation;
  bool exclude;
} resize_opts;

static void cubic_coeffs(double r, double A, double c[4]) {
  double s = r + 1, t = 1 - r, u = 2 - r;
  c[0] = ((A * s - 5 * A) * s + 8 * A) * s - 4 * A;
  c[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
  c[2] = ((A + 2) * t - (A + 3)) * t * t + 1;
  c[3] = ((A * u - 5 * A) * u + 8 * A) * u - 4 * A;
}

/* One axis: in extent I to O with scale; idx/w hold TAPS rows of O. */
static void axis_plan(const resize_opts *o, int64_t I, int64_t O, double scale, double roi0, double roi1, int64_t *idx,
                      double *w, int64_t *firsts, bool *outside, int *taps) {
  double width = scale * (double)I;
  *taps = o->mode == 2 ? 4 : o->mode == 1 ? 2 : 1;
  for (int64_t x = 0; x < O; x++) {
    double xo;
    outside[x] = false;
    switch (o->coord) {
    case 1: xo = (double)x / scale; break;
    case 2: xo = width == 1 ? 0.0 : (double)x * (double)(I - 1) / (width - 1); break;
    case 3: xo = width == 1 ? -0.5 : ((double)x + 0.5) / scale - 0.5; break;
    case 4:
      xo = width == 1 ? (roi1 - roi0) * (double)(I - 1) / 2 : (double)x * (roi1 - roi0) * (double)(I - 1) / (width - 1);
      xo += roi0 * (double)(I - 1);
      outside[x] = xo < 0 || xo > (double)(I - 1);
      break;
    case 5: xo = ((double)x + 0.5) / scale; break;
    default: xo = ((double)x + 0.5) / scale - 0.5; break;
    }
    double f = floor(xo), r = xo - f;
    int64_t fi = (int64_t)f;
    double c[TAPS] = {0};
    int64_t first;
    if (o->mode == 0) {
      bool up = o->nearest == 0 ? r > 0.5 : o->nearest == 1 ? r >= 0.5 : o->nearest == 3 && r > 0;
      first = r == 0 ? fi : up ? fi + 1 : fi;
      c[0] = 1;
    } else if (o->mode == 1) {
      first = fi;
      c[0] = 1 - r;
      c[1] = r;
    } else {
      first = fi - 1;
      cubic_coeffs(r, o->a, c);
    }
    firsts[x] = first;
    double sum = 0;
    for (int k = 0; k < *taps; k++) {
      int64_t i = first + k;
      if (o->exclude && (i < 0 || i >= I)) c[k] = 0;
      sum += c[k];
    }
    for (int k = 0; k < *taps; k++) {
      int64_t i = first + k;
      idx[k * O + x] = i < 0 ? 0 : i >= I ? I - 1 : i;
      w[k * O + x] = o->exclude && sum != 0 ? c[k] / sum : c[k];
    }
  }
}

#define MAX_SHIFTS 5 /* distinct shifts per axis */
#define MAX_SHIFT 4   /* |shift| (cubic reads i - 2 .. i + 1 at most) */

/* Output x's weights by shift from its position i (tap k of x reads
 * clamp(firsts[x] + k), shift firsts[x] + k - i), weights of 1e-12 or
 * less left out; the number of shifts, or -1 past MAX_SHIFTS. */
static int shifts_of(int64_t O, int taps, const double *w, const int64_t *firsts, int64_t x, int64_t i,
                     int64_t *shift, double *wt) {
  int n = 0;
  for (int k = 0; k < taps; k++) {
    double wk = w[k * O + x];
    if (fabs(wk) <= 1e-12) continue;
    int64_t s = firsts[x] + k - i;
    int j = 0;
    while (j < n && shift[j] != s) j++;
    if (j == n) {
      if (n == MAX_SHIFTS) return -1;
      shift[n] = s, wt[n++] = 0;
    }
    wt[j] += wk;
  }
  return n;
}

/* True if the plan of an axis I -> O = I f repeats every f outputs:
 * output i f + r is the same weighting of inputs clamp(i + s, 0, I - 1)
 * over a few shifts s for every i (weights equal within 1e-12: a whole
 * factor that is not a power of 2 rounds the coordinates differently). Then
 * w_shift[j * f + r] is the weight of shift shifts[j] at phase r. */
static bool periodic_plan(int64_t I, int64_t O, int taps, const double *w, const int64_t *firsts, int64_t *f_out,
                          int *n_shifts, int64_t *shifts, double *w_shift) {
  if (I < 2 || O % I != 0 || O / I > 64) return false;
  int64_t f = O / I;
  *f_out = f;
  *n_shifts = 0;
  for (int j = 0; j < MAX_SHIFTS * 64; j++) w_shift[j] = 0;
  for (int64_t r = 0; r < f; r++) {
    int64_t s0[MAX_SHIFTS], si[MAX_SHIFTS];
    double w0[MAX_SHIFTS], wi[MAX_SHIFTS];
    int n0 = shifts_of(O, taps, w, firsts, r, 0, s0, w0);
    if (n0 < 0) return false;
    for (int64_t i = 1; i < I; i++) {
      int ni = shifts_of(O, taps, w, firsts, i * f + r, i, si, wi);
      if (ni != n0) return false;
      for (int a = 0; a < n0; a++)
        if (si[a] != s0[a] || fabs(wi[a] - w0[a]) > 1e-12) return false;
    }
    for (int a = 0; a < n0; a++) {
      if (s0[a] <= -I || s0[a] >= I || s0[a] < -MAX_SHIFT || s0[a] > MAX_SHIFT) return false;
      int j = 0;
      while (j < *n_shifts && shifts[j] != s0[a]) j++;
      if (j == *n_shifts) {
        if (j == MAX_SHIFTS) return false;
        shifts[(*n_shifts)++] = s0[a];
      }
      w_shift[j * f + r] = w0[a];
    }
  }
  return *n_shifts > 0;
}

/* x along axis d shifted by s, the edge repeated: out[i] = x[clamp(i + s)]. */
static int32_t edge_shift(onnx_cv *cv, int32_t x, const loom_type *t, int32_t d, int64_t s) {
  if (s == 0) return x;
  int64_t lo[LOOM_MAX_RANK] = {0}, hi[LOOM_MAX_RANK], I = t->shape[d];
  memcpy(hi, t->shape, sizeof(int64_t) * (size_t)t->rank);
  int32_t parts[MAX_SHIFT + 1], n = 0;
  int64_t a = LOOM_MAX(0, s), b = LOOM_MIN(I, I + s); /* the part that moves */
  lo[d] = s < 0 ? 0 : I - 1, hi[d] = lo[d] + 1;
  int32_t edge = lb_slice(G, x, lo, hi);
  lo[d] = a, hi[d] = b;
  int32_t body = lb_slice(G, x, lo, hi);
  if (s > 0) parts[n++] = body;
  for (int64_t k = 0; k < (s < 0 ? -s : s); k++) parts[n++] = edge;
  if (s < 0) parts[n++] = body;
  return lb_concat(G, n, parts, d);
}

/* The periodic form of one axis (periodic_plan): the sum over shifts of
 * the shifted input, as [..., I, 1, ...] times its phases' weights [f]
 * (or broadcast, for a weight of 1 everywhere), merged to [..., I f, ...]. */
static int32_t periodic_axis(onnx_cv *cv, int32_t x, int32_t d, int64_t f, int n_shifts, const int64_t *shifts,
                             const double *w_shift) {
  const loom_type t = G->values[x].type;
  int64_t split[LOOM_MAX_RANK], wide[LOOM_MAX_RANK], wshape[LOOM_MAX_RANK], merged[LOOM_MAX_RANK];
  for (int32_t e = 0, o = 0; e < t.rank; e++) {
    split[o] = wide[o] = t.shape[e], wshape[o] = 1, merged[e] = t.shape[e] * (e == d ? f : 1);
    o++;
    if (e == d) split[o] = 1, wide[o] = f, wshape[o] = f, o++;
  }
  int32_t acc = -1;
  for (int j = 0; j < n_shifts; j++) {
    bool ones = true;
    for (int64_t r = 0; r < f; r++) ones &= w_shift[j * f + r] == 1;
    int32_t v = lb_reshape(G, edge_shift(cv, x, &t, d, shifts[j]), t.rank + 1, split);
    v = ones ? lb_broadcast_to(G, v, t.rank + 1, wide)
             : lb_mul(G, v, cv_const_values(cv, t.dtype, t.rank + 1, wshape, w_shift + j * f));
    acc = acc < 0 ? v : lb_add(G, acc, v);
  }
  return lb_reshape(G, acc, t.rank, merged);
}

static int pick(const char *s, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

loom_status onnx_cv_resize(onnx_cv *cv);
loom_status onnx_cv_resize(onnx_cv *cv) {
  const loom_type *t = cv_type(cv, 0);
  if (!loom_dtype_is_float(t->dtype)) return cv_unsupported(cv, "a %s input", loom_dtype_name(t->dtype));
  static const char *const modes[] = {"nearest", "linear", "cubic"};
  static const char *const coords[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_crop_and_resize",
                                        "tf_half_pixel_for_nn"};
  static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  resize_opts o = {0};
  const char *s;
  if ((o.mode = pick(s = cv_attr_s(cv, "mode", "nearest"), modes, 3)) < 0) return cv_unsupported(cv, "mode '%s'", s);
  if ((o.coord = pick(s = cv_attr_s(cv, "coordinate_transformation_mode", "half_pixel"), coords, 6)) < 0)
    return cv_unsupported(cv, "coordinate_transformation_mode '%s'", s);
  if ((o.nearest = pick(s = cv_attr_s(cv, "nearest_mode", "round_prefer_floor"), nearests, 4)) < 0)
    return cv_unsupported(cv, "nearest_mode '%s'", s);
  o.a = cv_attr_f(cv, "cubic_coeff_a", -0.75);
  o.exclude = cv_attr_i(cv, "exclude_outside", 0) != 0;
  o.extrapolation = cv_attr_f(cv, "extrapolation_value", 0.0);
  int32_t r = t->rank;
  double scales[LOOM_MAX_RANK], roi[2 * LOOM_MAX_RANK];
  int64_t out[LOOM_MAX_RANK];
  const loom_tensor *sc = cv_has(cv, 2) ? cv_const(cv, 2) : NULL, *sz = cv_has(cv, 3) ? cv_const(cv, 3) : NULL;
  if ((cv_has(cv, 2) && !sc) || (cv_has(cv, 3) && !sz)) return cv_unsupported(cv, "scales or sizes not known at load time");
  if (sc && loom_tensor_numel(sc) == 0) sc = NULL;
  if (sz && loom_tensor_numel(sz) == 0) sz = NULL;
  if (!sc == !sz) return cv_invalid(cv, "exactly one of scales and sizes is needed");
  const loom_tensor *rt = cv_has(cv, 1) ? cv_const(cv, 1) : NULL;
  if (o.coord == 4 && (!rt || loom_tensor_numel(rt) != 2 * r)) return cv_unsupported(cv, "roi not known at load time");
  for (int32_t d = 0; d < r; d++) {
    if (sc) {
      if (loom_tensor_numel(sc) != r) return cv_invalid(cv, "%lld scales for rank %d", (long long)loom_tensor_numel(sc), r);
      scales[d] = loom_load(loom_tensor_dtype(sc), loom_tensor_data(sc), d);
      if (!(scales[d] > 0)) return cv_invalid(cv, "scale %g", scales[d]);
      out[d] = (int64_t)floor((double)t->shape[d] * scales[d]);
    } else {
      if (loom_tensor_numel(sz) != r) return cv_invalid(cv, "%lld sizes for rank %d", (long long)loom_tensor_numel(sz), r);
      out[d] = loom_load_i64(loom_tensor_dtype(sz), loom_tensor_data(sz), d);
      if (out[d] < 0 || t->shape[d] == 0) return cv_invalid(cv, "size %lld", (long long)out[d]);
      scales[d] = (double)out[d] / (double)t->shape[d];
    }
    roi[d] = rt && o.coord == 4 ? loom_load(loom_tensor_dtype(rt), loom_tensor_data(rt), d) : 0;
    roi[d + r] = rt && o.coord == 4 ? loom_load(loom_tensor_dtype(rt), loom_tensor_data(rt), d + r) : 1;
  }
  LOOM_TRY(loom_shape_check(cv->ctx, r, out, NULL));
  int32_t y = cv_in(cv, 0);
  for (int32_t d = r - 1; d >= 0; d--) {
    int64_t I = t->shape[d], O = out[d];
    if (O == 0 || I == 0) return cv_unsupported(cv, "an empty dim");
    int64_t *idx = malloc(sizeof *idx * (size_t)(TAPS * O));
    double *w = malloc(sizeof *w * (size_t)(TAPS * O)), *col = malloc(sizeof *col * (size_t)O);
    bool *outside = malloc(sizeof *outside * (size_t)O);
    int64_t *firsts = malloc(sizeof *firsts * (size_t)O);
    if (!idx || !w || !col || !outside || !firsts) {
      free(idx), free(w), free(col), free(outside), free(firsts);
      return loom_error(cv->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    int taps;
    axis_plan(&o, I, O, scales[d], roi[d], roi[d + r], idx, w, firsts, outside, &taps);
    /* the identity: every output reads its own position with weights
     * summing to 1 (a length-1 axis in pytorch_half_pixel reads -0.5:
     * both taps clamp to 0) */
    bool identity = I == O, any_out = false;
    for (int64_t x = 0; x < O; x++) {
      any_out |= outside[x];
      double sum = 0;
      for (int k = 0; k < taps && identity; k++) {
        identity = w[k * O + x] == 0 || idx[k * O + x] == x;
        sum += w[k * O + x];
      }
      identity &= sum == 1;
    }
    int64_t f, shifts[MAX_SHIFTS];
    int n_shifts;
    double w_shift[MAX_SHIFTS * 64];
    if (!identity && !any_out && r < LOOM_MAX_RANK &&
        periodic_plan(I, O, taps, w, firsts, &f, &n_shifts, shifts, w_shift)) {
      y = periodic_axis(cv, y, d, f, n_shifts, shifts, w_shift);
    } else if (!identity || any_out) {
      int64_t wshape[LOOM_MAX_RANK];
      for (int32_t e = 0; e < r; e++) wshape[e] = e == d ? O : 1;
      int32_t acc = -1;
      for (int k = 0; k < taps; k++) {
        for (int64_t x = 0; x < O; x++) col[x] = (double)idx[k * O + x];
        int32_t g = lb_gather(G, y, cv_const_values(cv, LOOM_DTYPE_I64, 1, &O, col), d);
        if (!(o.mode == 0)) {
          for (int64_t x = 0; x < O; x++) col[x] = outside[x] ? 0 : w[k * O + x];
          g = lb_mul(G, g, cv_const_values(cv, t->dtype, r, wshape, col));
        }
        acc = acc < 0 ? g : lb_add(G, acc, g);
      }
      if (any_out) {
        for (int64_t x = 0; x < O; x++) col[x] = outside[x];
        int32_t mask = lb_cast(G, cv_const_values(cv, LOOM_DTYPE_U8, r, wshape, col), LOOM_DTYPE_BOOL);
        acc = lb_select(G, mask, lb_scalar(G, t->dtype, o.extrapolation), acc);
      }
      y = acc;
    }
    free(idx), free(w), free(col), free(outside), free(firsts);
  }
  cv_out(cv, 0, y);
  return LOOM_STATUS_OK;
}
