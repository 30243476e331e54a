#include "ir/view.h"

#include "ir/dtype.h"

#include <string.h>

/* Strides and counts below need no overflow checks: every type and tensor
 * passed loom_shape_check, which bounds the dims' product (zeros counted
 * as one) by LOOM_MAX_NUMEL. */
loom_view loom_view_of(const loom_type *t, void *data) {
  loom_view v;
  memset(&v, 0, sizeof v);
  v.dtype = t->dtype;
  v.rank = t->rank;
  v.data = data;
  int64_t s = 1;
  for (int32_t d = t->rank - 1; d >= 0; d--) {
    v.shape[d] = t->shape[d];
    v.stride[d] = s;
    s *= t->shape[d];
  }
  return v;
}

int64_t loom_view_numel(const loom_view *v) {
  int64_t n = 1;
  for (int32_t d = 0; d < v->rank; d++) n *= v->shape[d];
  return n;
}

bool loom_view_is_contiguous(const loom_view *v) {
  int64_t s = 1;
  for (int32_t d = v->rank - 1; d >= 0; d--) {
    if (v->shape[d] != 1 && v->stride[d] != s) return false;
    s *= v->shape[d];
  }
  return true;
}

int64_t loom_view_offset(const loom_view *v, int64_t i) {
  int64_t off = 0;
  for (int32_t d = v->rank - 1; d >= 0; d--) {
    int64_t n = v->shape[d];
    off += (i % n) * v->stride[d];
    i /= n;
  }
  return off;
}

double loom_view_get(const loom_view *v, int64_t i) {
  return loom_load(v->dtype, v->data, loom_view_offset(v, i));
}

int64_t loom_view_get_i64(const loom_view *v, int64_t i) {
  return loom_load_i64(v->dtype, v->data, loom_view_offset(v, i));
}

void loom_view_set(const loom_view *v, int64_t i, double x) {
  loom_store(v->dtype, v->data, loom_view_offset(v, i), x);
}

loom_view loom_view_broadcast(const loom_view *v, int32_t rank,
                              const int64_t *shape) {
  loom_view b = *v;
  b.rank = rank;
  for (int32_t d = rank - 1, s = v->rank - 1; d >= 0; d--, s--) {
    b.shape[d] = shape[d];
    b.stride[d] = (s >= 0 && v->shape[s] == shape[d]) ? v->stride[s] : 0;
  }
  return b;
}

loom_view loom_view_permute(const loom_view *v, const int64_t *perm) {
  loom_view p = *v;
  for (int32_t d = 0; d < v->rank; d++) {
    p.shape[d] = v->shape[perm[d]];
    p.stride[d] = v->stride[perm[d]];
  }
  return p;
}

void loom_view_copy(const loom_view *dst, const loom_view *src) {
  int64_t n = loom_view_numel(dst);
  size_t es = loom_dtype_size(dst->dtype);
  if (dst->dtype == src->dtype && loom_view_is_contiguous(dst) &&
      loom_view_is_contiguous(src)) {
    if (n) memmove(dst->data, src->data, (size_t)n * es);
    return;
  }
  if (dst->dtype == src->dtype && (es == 8 || es == 4 || es == 2 || es == 1)) {
    for (int64_t i = 0; i < n; i++)
      memcpy((char *)dst->data + loom_view_offset(dst, i) * (int64_t)es,
             (const char *)src->data + loom_view_offset(src, i) * (int64_t)es, es);
    return;
  }
  for (int64_t i = 0; i < n; i++) loom_view_set(dst, i, loom_view_get(src, i));
}
