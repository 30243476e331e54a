/*
 * vTensor layouts and pieces (vtensor.h): building a layout from its
 * factors, enumerating pieces, box arithmetic, the exact-cover check the
 * plan validator uses and the dependency query the dependency finder uses.
 * Plans have at most thousands of pieces per tensor, so the checks are
 * plain loops over pieces (the cover check is quadratic in the pieces of
 * one value part and replica).
 */
#include "parallel/vtensor.h"

#include "core/checked.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *factor_name(loom_vfactor_kind k) {
  return k == LOOM_VF_D ? "D" : k == LOOM_VF_V ? "V" : "R";
}

loom_status loom_vlayout_make(loom_ctx *ctx, const loom_type *type, int32_t n_factors,
                              const loom_vfactor *factors, loom_vlayout *out) {
  if (!type || !out || (n_factors > 0 && !factors))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "vlayout: NULL argument");
  LOOM_TRY(loom_shape_check(ctx, type->rank, type->shape, NULL));
  if (n_factors < 1 || n_factors > LOOM_VT_MAX_FACTORS)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "vlayout: %d factors (a layout has 1 to %d; R(1) is one whole piece)",
                      n_factors, LOOM_VT_MAX_FACTORS);
  memset(out, 0, sizeof *out);
  out->type = *type;
  bool dim_seen[LOOM_MAX_RANK] = {false}, v_seen = false, r_seen = false;
  int64_t pieces = 1;
  for (int32_t i = 0; i < n_factors; i++) {
    loom_vfactor f = factors[i];
    if (f.kind != LOOM_VF_D && f.kind != LOOM_VF_V && f.kind != LOOM_VF_R)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "vlayout: factor %d has kind %d", i,
                        (int)f.kind);
    if (f.parts < 1)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "vlayout: %s with %d parts (at least 1)",
                        factor_name(f.kind), f.parts);
    if (f.kind == LOOM_VF_D) {
      if (f.dim < 0 || f.dim >= type->rank)
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "vlayout: D(%d,%d) splits dim %d of a rank-%d tensor", f.dim, f.parts,
                          f.dim, type->rank);
      if (dim_seen[f.dim])
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "vlayout: dim %d is split twice (write one D(%d,n) with the product)",
                          f.dim, f.dim);
      dim_seen[f.dim] = true;
      int64_t extent = type->shape[f.dim];
      if (f.parts > extent)
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "vlayout: D(%d,%d) has more parts than dim %d's extent %lld", f.dim,
                          f.parts, f.dim, (long long)extent);
      if (extent % f.parts != 0)
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "vlayout: D(%d,%d): dim %d's extent %lld does not split evenly into %d "
                          "parts (only even splits are allowed)",
                          f.dim, f.parts, f.dim, (long long)extent, f.parts);
    } else {
      bool *seen = f.kind == LOOM_VF_V ? &v_seen : &r_seen;
      if (*seen)
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "vlayout: %s given twice (write one %s(n) with the product)",
                          factor_name(f.kind), factor_name(f.kind));
      *seen = true;
      f.dim = -1;
    }
    pieces *= f.parts; /* at most 2^20 * 2^31: no overflow */
    if (pieces > LOOM_VT_MAX_PIECES)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "vlayout: more than %d pieces", LOOM_VT_MAX_PIECES);
    out->factors[out->n_factors++] = f;
  }
  out->n_pieces = (int32_t)pieces;
  return LOOM_STATUS_OK;
}

bool loom_vlayout_equal(const loom_vlayout *a, const loom_vlayout *b) {
  if (!loom_type_equal(&a->type, &b->type) || a->n_factors != b->n_factors) return false;
  for (int32_t i = 0; i < a->n_factors; i++)
    if (a->factors[i].kind != b->factors[i].kind || a->factors[i].dim != b->factors[i].dim ||
        a->factors[i].parts != b->factors[i].parts)
      return false;
  return true;
}

loom_vbox loom_vbox_full(const loom_type *t) {
  loom_vbox b = {.rank = t->rank};
  for (int32_t d = 0; d < t->rank; d++) b.end[d] = t->shape[d];
  return b;
}

void loom_vlayout_piece(const loom_vlayout *l, int32_t i, loom_vpiece *out) {
  memset(out, 0, sizeof *out);
  out->box = loom_vbox_full(&l->type);
  out->value_n = 1;
  out->replicas = 1;
  /* Rightmost factor is the least significant digit. */
  for (int32_t f = l->n_factors - 1; f >= 0; f--) {
    const loom_vfactor *fa = &l->factors[f];
    int32_t digit = i % fa->parts;
    i /= fa->parts;
    if (fa->kind == LOOM_VF_D) {
      int64_t chunk = l->type.shape[fa->dim] / fa->parts;
      out->box.start[fa->dim] = digit * chunk;
      out->box.end[fa->dim] = (digit + 1) * chunk;
    } else if (fa->kind == LOOM_VF_V) {
      out->value_k = digit;
      out->value_n = fa->parts;
    } else {
      out->replica = digit;
      out->replicas = fa->parts;
    }
  }
}

bool loom_vbox_empty(const loom_vbox *b) {
  for (int32_t d = 0; d < b->rank; d++)
    if (b->end[d] <= b->start[d]) return true;
  return false;
}

int64_t loom_vbox_numel(const loom_vbox *b) {
  if (loom_vbox_empty(b)) return 0;
  int64_t n = 1;
  /* Boxes lie inside a checked shape, so the product fits (core/checked.h). */
  for (int32_t d = 0; d < b->rank; d++) n *= b->end[d] - b->start[d];
  return n;
}

bool loom_vbox_equal(const loom_vbox *a, const loom_vbox *b) {
  if (a->rank != b->rank) return false;
  for (int32_t d = 0; d < a->rank; d++)
    if (a->start[d] != b->start[d] || a->end[d] != b->end[d]) return false;
  return true;
}

bool loom_vbox_contains(const loom_vbox *outer, const loom_vbox *inner) {
  if (outer->rank != inner->rank) return false;
  for (int32_t d = 0; d < inner->rank; d++)
    if (inner->start[d] < outer->start[d] || inner->end[d] > outer->end[d]) return false;
  return true;
}

bool loom_vbox_intersect(const loom_vbox *a, const loom_vbox *b, loom_vbox *out) {
  loom_vbox r = {.rank = a->rank};
  bool empty = a->rank != b->rank;
  for (int32_t d = 0; d < a->rank && !empty; d++) {
    r.start[d] = LOOM_MAX(a->start[d], b->start[d]);
    r.end[d] = LOOM_MIN(a->end[d], b->end[d]);
    if (r.end[d] <= r.start[d]) empty = true;
  }
  if (empty) { /* a canonical empty box: every range [0, 0) */
    memset(&r, 0, sizeof r);
    r.rank = a->rank;
  }
  if (out) *out = r;
  return !empty;
}

/* Appends to buf (n bytes) at *at, truncating; buf stays NUL-terminated. */
static void put(char *buf, size_t n, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t n, size_t *at, const char *fmt, ...) {
  if (*at >= n) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *at, n - *at, fmt, ap);
  va_end(ap);
  if (w > 0) *at += (size_t)w;
}

const char *loom_vbox_str(const loom_vbox *b, char *buf, size_t n) {
  size_t at = 0;
  if (n) buf[0] = '\0';
  put(buf, n, &at, "[");
  for (int32_t d = 0; d < b->rank; d++)
    put(buf, n, &at, "%s%lld:%lld", d ? ", " : "", (long long)b->start[d], (long long)b->end[d]);
  put(buf, n, &at, "]");
  return buf;
}

const char *loom_vlayout_str(const loom_vlayout *l, char *buf, size_t n) {
  size_t at = 0;
  if (n) buf[0] = '\0';
  for (int32_t i = 0; i < l->n_factors; i++) {
    const loom_vfactor *f = &l->factors[i];
    if (f->kind == LOOM_VF_D)
      put(buf, n, &at, "D(%d,%d)", f->dim, f->parts);
    else
      put(buf, n, &at, "%s(%d)", factor_name(f->kind), f->parts);
  }
  return buf;
}

const char *loom_vpiece_str(const loom_vpiece *p, char *buf, size_t n) {
  char box[LOOM_MAX_RANK * 48 + 4], v[32] = "", r[32] = "";
  loom_vbox_str(&p->box, box, sizeof box);
  if (p->value_n > 1) snprintf(v, sizeof v, " v%d/%d", p->value_k, p->value_n);
  if (p->replicas > 1) snprintf(r, sizeof r, " r%d/%d", p->replica, p->replicas);
  snprintf(buf, n, "%s%s%s", box, v, r);
  return buf;
}

loom_type loom_vpiece_type(const loom_type *t, const loom_vpiece *p) {
  loom_type r = {.dtype = t->dtype, .rank = p->box.rank};
  for (int32_t d = 0; d < p->box.rank; d++)
    r.shape[d] = LOOM_MAX(p->box.end[d] - p->box.start[d], 0);
  return r;
}

int64_t loom_vpiece_bytes(const loom_type *t, const loom_vpiece *p) {
  return loom_vbox_numel(&p->box) * (int64_t)loom_dtype_size(t->dtype);
}

static bool box_inside(const loom_vbox *b, const loom_type *t) {
  if (b->rank != t->rank) return false;
  for (int32_t d = 0; d < b->rank; d++)
    if (b->start[d] < 0 || b->start[d] > b->end[d] || b->end[d] > t->shape[d]) return false;
  return true;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Finds an element of t that no piece of group (k, r) covers, trying the
 * lower corners of the grid the boxes' bounds cut t into (every gap holds
 * one); false if there are too many corners to try. */
static bool find_gap(const loom_type *t, int32_t n, const loom_vpiece *p, int32_t k, int32_t r,
                     int64_t *point) {
  enum { MAX_CORNERS = 1 << 16 };
  int64_t *coords[LOOM_MAX_RANK] = {NULL};
  int32_t counts[LOOM_MAX_RANK] = {0};
  bool found = false, ok = true;
  int64_t corners = 1;
  for (int32_t d = 0; d < t->rank && ok; d++) {
    coords[d] = malloc(sizeof(int64_t) * (size_t)(2 * n + 1));
    if (!coords[d]) ok = false;
    int32_t c = 0;
    if (ok) coords[d][c++] = 0;
    for (int32_t i = 0; i < n && ok; i++) {
      if (p[i].value_k != k || p[i].replica != r) continue;
      coords[d][c++] = p[i].box.start[d];
      if (p[i].box.end[d] < t->shape[d]) coords[d][c++] = p[i].box.end[d];
    }
    if (!ok) break;
    qsort(coords[d], (size_t)c, sizeof(int64_t), cmp_i64);
    int32_t u = 0;
    for (int32_t i = 0; i < c; i++)
      if (u == 0 || coords[d][u - 1] != coords[d][i]) coords[d][u++] = coords[d][i];
    counts[d] = u;
    corners *= u;
    if (corners > MAX_CORNERS) ok = false;
  }
  for (int64_t c = 0; ok && c < corners && !found; c++) {
    int64_t rest = c;
    for (int32_t d = t->rank - 1; d >= 0; d--) {
      point[d] = coords[d][rest % counts[d]];
      rest /= counts[d];
    }
    bool covered = false;
    for (int32_t i = 0; i < n && !covered; i++) {
      if (p[i].value_k != k || p[i].replica != r) continue;
      bool in = true;
      for (int32_t d = 0; d < t->rank && in; d++)
        in = point[d] >= p[i].box.start[d] && point[d] < p[i].box.end[d];
      covered = in;
    }
    found = !covered;
  }
  for (int32_t d = 0; d < t->rank; d++) free(coords[d]);
  return found;
}

loom_status loom_vpieces_check_cover(loom_ctx *ctx, const loom_type *t, int32_t n,
                                     const loom_vpiece *p) {
  char s1[512], s2[512];
  if (!t || n < 0 || (n > 0 && !p))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "cover: bad arguments");
  if (n == 0) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "cover: no pieces");
  int32_t vn = p[0].value_n, rn = p[0].replicas;
  for (int32_t i = 0; i < n; i++) {
    if (p[i].value_n != vn || p[i].replicas != rn)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "cover: piece %d (%s) is value part of %d, replica of %d, but piece 0 "
                        "(%s) of %d and %d",
                        i, loom_vpiece_str(&p[i], s1, sizeof s1), p[i].value_n, p[i].replicas,
                        loom_vpiece_str(&p[0], s2, sizeof s2), vn, rn);
    if (vn < 1 || rn < 1 || p[i].value_k < 0 || p[i].value_k >= vn || p[i].replica < 0 ||
        p[i].replica >= rn)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "cover: piece %d (%s) has a value part or replica out of range", i,
                        loom_vpiece_str(&p[i], s1, sizeof s1));
    if (!box_inside(&p[i].box, t))
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "cover: piece %d (%s) is not inside the tensor %s", i,
                        loom_vpiece_str(&p[i], s1, sizeof s1), loom_type_str(t, s2, sizeof s2));
  }
  /* No overlap within a (value part, replica) group. */
  for (int32_t i = 0; i < n; i++)
    for (int32_t j = i + 1; j < n; j++) {
      if (p[i].value_k != p[j].value_k || p[i].replica != p[j].replica) continue;
      loom_vbox both;
      if (loom_vbox_intersect(&p[i].box, &p[j].box, &both)) {
        char b[512];
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "cover: pieces %d (%s) and %d (%s) overlap in %s", i,
                          loom_vpiece_str(&p[i], s1, sizeof s1), j,
                          loom_vpiece_str(&p[j], s2, sizeof s2), loom_vbox_str(&both, b, sizeof b));
      }
    }
  /* Without overlaps, a group covers t iff its volumes add up to t's. */
  int64_t total = loom_type_numel(t), groups = (int64_t)vn * rn;
  if (total == 0) return LOOM_STATUS_OK;
  if (groups > n)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "cover: %d pieces cannot cover %d value parts x %d replicas", n, vn, rn);
  int64_t *sum = calloc((size_t)groups, sizeof(int64_t));
  if (!sum) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "cover: out of memory");
  for (int32_t i = 0; i < n; i++) /* sums stay <= total: the boxes are disjoint */
    sum[(int64_t)p[i].value_k * rn + p[i].replica] += loom_vbox_numel(&p[i].box);
  loom_status st = LOOM_STATUS_OK;
  for (int64_t g = 0; g < groups && st == LOOM_STATUS_OK; g++) {
    if (sum[g] == total) continue;
    int32_t k = (int32_t)(g / rn), r = (int32_t)(g % rn);
    int64_t point[LOOM_MAX_RANK];
    char where[512] = "";
    if (find_gap(t, n, p, k, r, point)) {
      loom_vbox pt = {.rank = t->rank};
      for (int32_t d = 0; d < t->rank; d++) pt.start[d] = point[d], pt.end[d] = point[d] + 1;
      snprintf(where, sizeof where, "; nothing holds %s", loom_vbox_str(&pt, s1, sizeof s1));
    }
    st = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                    "cover: value part %d, replica %d: the pieces hold %lld of %lld elements%s", k,
                    r, (long long)sum[g], (long long)total, where);
  }
  free(sum);
  return st;
}

loom_status loom_vlayout_needs(loom_ctx *ctx, const loom_vlayout *a, const loom_vbox *region,
                               loom_vneed **out, int32_t *n) {
  if (!a || !region || !out || !n)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "needs: NULL argument");
  *out = NULL;
  *n = 0;
  if (!box_inside(region, &a->type))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "needs: the region is not a box of the layout's tensor");
  loom_vneed *list = NULL;
  int32_t cap = 0, count = 0;
  for (int32_t i = 0; i < a->n_pieces; i++) {
    loom_vpiece p;
    loom_vlayout_piece(a, i, &p);
    loom_vbox both;
    if (!loom_vbox_intersect(&p.box, region, &both)) continue;
    if (!loom_grow(ctx, (void **)&list, &cap, count + 1, sizeof *list)) {
      free(list);
      return LOOM_STATUS_OUT_OF_MEMORY;
    }
    list[count++] = (loom_vneed){.piece = i, .box = both};
  }
  *out = list;
  *n = count;
  return LOOM_STATUS_OK;
}
