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

/* Same dtype, strided: an odometer over the outer dims (no division per
 * element: packing a comm op's blocks was 10x slower with one), the
 * innermost dim one memcpy where both sides are contiguous along it. */
static void copy_strided(const loom_view *dst, const loom_view *src, size_t es) {
  int32_t r = dst->rank;
  int64_t inner = dst->shape[r - 1], ds = dst->stride[r - 1], ss = src->stride[r - 1];
  int64_t outer = 1, idx[LOOM_MAX_RANK] = {0}, doff = 0, soff = 0;
  for (int32_t k = 0; k < r - 1; k++) outer *= dst->shape[k];
  char *d = dst->data;
  const char *s = src->data;
  for (int64_t o = 0; o < outer && inner > 0; o++) {
    if (ds == 1 && ss == 1)
      memcpy(d + doff * (int64_t)es, s + soff * (int64_t)es, (size_t)inner * es);
    else
      for (int64_t i = 0; i < inner; i++)
        memcpy(d + (doff + i * ds) * (int64_t)es, s + (soff + i * ss) * (int64_t)es, es);
    for (int32_t k = r - 2; k >= 0; k--) {
      doff += dst->stride[k], soff += src->stride[k];
      if (++idx[k] < dst->shape[k]) break;
      doff -= dst->stride[k] * dst->shape[k], soff -= src->stride[k] * dst->shape[k];
      idx[k] = 0;
    }
  }
}

void loom_view_copy(const loom_view *dst, const loom_view *src) {
  int64_t n = loom_view_numel(dst);
  size_t es = loom_dtype_size(dst->dtype);
  if (dst->dtype == src->dtype && loom_view_is_contiguous(dst) &&
      loom_view_is_contiguous(src)) {
    if (n) memmove(dst->data, src->data, (size_t)n * es);
    return;
  }
  if (dst->dtype == src->dtype && dst->rank > 0 && (es == 8 || es == 4 || es == 2 || es == 1)) {
    copy_strided(dst, src, es);
    return;
  }
  for (int64_t i = 0; i < n; i++) loom_view_set(dst, i, loom_view_get(src, i));
}
