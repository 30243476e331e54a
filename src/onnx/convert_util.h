/* Small helpers the converters of convert.c and convert_matrix.c share. */
#ifndef LOOM_ONNX_CONVERT_UTIL_H
#define LOOM_ONNX_CONVERT_UTIL_H

#include "onnx/import_internal.h"

#define G (cv->g)
#define IN(i) cv_in(cv, i)
#define TYPE(i) cv_type(cv, i)

/* If y, just made by a Mul, is a GELU of some x spelled out in products,
 * sums and erf or tanh (convert_gelu.c): a gelu op of x; else -1. */
int32_t onnx_gelu_of(loom_graph *g, int32_t y);

static inline loom_status done1(onnx_cv *cv, int32_t v) {
  cv_out(cv, 0, v);
  return LOOM_STATUS_OK;
}

static inline int32_t scalar(onnx_cv *cv, int32_t like, double v) {
  return lb_scalar_like(G, like, v);
}

static inline loom_attr_value *attrs_of(loom_op op, loom_attr_value *a) {
  loom_attrs_default(op, a);
  return a;
}

static inline void set_ints(loom_ints *dst, int32_t n, const int64_t *v) {
  dst->n = n;
  for (int32_t k = 0; k < n && k < LOOM_MAX_RANK; k++) dst->v[k] = v[k];
}

static inline int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

static inline bool is_float(const loom_type *t) { return loom_dtype_is_float(t->dtype); }

static inline loom_status need_float(onnx_cv *cv, int32_t i) {
  if (!is_float(TYPE(i)))
    return cv_unsupported(cv, "input %d is %s (a float type is needed)", i,
                          loom_dtype_name(TYPE(i)->dtype));
  return LOOM_STATUS_OK;
}

#endif
