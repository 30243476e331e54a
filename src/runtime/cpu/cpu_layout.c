/*
 * Data movement on the cpu backend: the n-d iterator shared by the kernels,
 * a parallel strided copy (row memcpy, broadcast fill, or 32x32 tiles for
 * transposes) and the layout ops built on it. Any dtype: bytes are moved.
 */
#include "runtime/cpu/cpu.h"

#include "ir/dtype.h"
#include "ops/ops_util.h"

#include <string.h>

void loom_cpu_iter_init(loom_cpu_iter *it, int32_t n_ops, const loom_view *views) {
  memset(it, 0, sizeof *it);
  it->n_ops = n_ops;
  int32_t r = 0;
  bool empty = false;
  for (int32_t d = 0; d < views[0].rank; d++) {
    int64_t s = views[0].shape[d];
    if (s == 0) empty = true;
    if (s == 1) continue;
    /* merge into the previous dim when every operand walks both as one */
    bool merge = r > 0;
    for (int32_t k = 0; k < n_ops && merge; k++)
      merge = it->stride[k][r - 1] == views[k].stride[d] * s;
    if (merge) {
      it->shape[r - 1] *= s;
      for (int32_t k = 0; k < n_ops; k++)
        it->stride[k][r - 1] = views[k].stride[d];
      continue;
    }
    it->shape[r] = s;
    for (int32_t k = 0; k < n_ops; k++)
      it->stride[k][r] = views[k].stride[d];
    r++;
  }
  if (r == 0) {
    it->shape[0] = 1;
    r = 1;
  }
  it->rank = r;
  int64_t inner = it->shape[r - 1];
  it->chunks = (inner + LOOM_CPU_CHUNK - 1) / LOOM_CPU_CHUNK;
  it->rows = 1;
  for (int32_t d = 0; d < r - 1; d++)
    it->rows *= it->shape[d];
  if (empty) it->rows = it->chunks = 0;
}

int64_t loom_cpu_iter_numel(const loom_cpu_iter *it) {
  if (!it->rows) return 0;
  return it->rows * it->shape[it->rank - 1];
}

void loom_cpu_iter_task(const loom_cpu_iter *it, int64_t t, int64_t *off, int64_t *len) {
  int32_t r = it->rank;
  int64_t row = t / it->chunks, c = t % it->chunks;
  for (int32_t k = 0; k < it->n_ops; k++)
    off[k] = c * LOOM_CPU_CHUNK * it->stride[k][r - 1];
  for (int32_t d = r - 2; d >= 0; d--) {
    int64_t i = row % it->shape[d];
    row /= it->shape[d];
    for (int32_t k = 0; k < it->n_ops; k++)
      off[k] += i * it->stride[k][d];
  }
  int64_t inner = it->shape[r - 1];
  *len = LOOM_MIN((int64_t)LOOM_CPU_CHUNK, inner - c * LOOM_CPU_CHUNK);
}

/* ---- strided copy ------------------------------------------------------- */

#define STRIDED_LOOP(T)                                                                            \
  do {                                                                                             \
    T *d_ = (T *)dp;                                                                               \
    const T *s_ = (const T *)sp;                                                                   \
    for (int64_t i = 0; i < len; i++)                                                              \
      d_[i * ds] = s_[i * ss];                                                                     \
  } while (0)

static void copy_row(char *dp, const char *sp, int64_t len, int64_t ds, int64_t ss, size_t es) {
  if (ds == 1 && ss == 1) {
    memcpy(dp, sp, (size_t)len * es);
    return;
  }
  switch (es) {
  case 1: STRIDED_LOOP(uint8_t); break;
  case 2: STRIDED_LOOP(uint16_t); break;
  case 4: STRIDED_LOOP(uint32_t); break;
  case 8: STRIDED_LOOP(uint64_t); break;
  default:
    for (int64_t i = 0; i < len; i++)
      memcpy(dp + i * ds * (int64_t)es, sp + i * ss * (int64_t)es, es);
  }
}

#define TILE 32

#define TILE_LOOP(T)                                                                               \
  do {                                                                                             \
    T *d_ = (T *)dp;                                                                               \
    const T *s_ = (const T *)sp;                                                                   \
    for (int64_t i = 0; i < ni; i++)                                                               \
      for (int64_t j = 0; j < nj; j++)                                                             \
        d_[i * dsp + j] = s_[i + j * ssl];                                                         \
  } while (0)

/* dst's innermost dim (stride 1) is read with stride ssl from src, and src's
 * unit-stride dim p is written with stride dsp: copy 32x32 tiles of (p, L)
 * so both sides stay in cache. */
static void copy_tiled(const loom_cpu *c, const loom_cpu_iter *it, int32_t p, char *dbase,
                       const char *sbase, size_t es) {
  int32_t r = it->rank, L = r - 1;
  int64_t np = it->shape[p], nl = it->shape[L];
  int64_t dsp = it->stride[0][p], ssl = it->stride[1][L];
  int64_t tp = (np + TILE - 1) / TILE, tl = (nl + TILE - 1) / TILE, others = 1;
  for (int32_t d = 0; d < L; d++)
    if (d != p) others *= it->shape[d];
  int64_t tasks = others * tp * tl, total = others * np * nl;
#pragma omp parallel for num_threads(c->nt) schedule(static) if (total >= LOOM_CPU_PAR_MIN)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t jt = t % tl, rest = t / tl, itl = rest % tp, o = rest / tp;
    int64_t doff = 0, soff = 0;
    for (int32_t d = L - 1; d >= 0; d--) {
      if (d == p) continue;
      int64_t i = o % it->shape[d];
      o /= it->shape[d];
      doff += i * it->stride[0][d];
      soff += i * it->stride[1][d];
    }
    int64_t i0 = itl * TILE, j0 = jt * TILE;
    int64_t ni = LOOM_MIN((int64_t)TILE, np - i0), nj = LOOM_MIN((int64_t)TILE, nl - j0);
    char *dp = dbase + (doff + i0 * dsp + j0) * (int64_t)es;
    const char *sp = sbase + (soff + i0 + j0 * ssl) * (int64_t)es;
    switch (es) {
    case 1: TILE_LOOP(uint8_t); break;
    case 2: TILE_LOOP(uint16_t); break;
    case 4: TILE_LOOP(uint32_t); break;
    case 8: TILE_LOOP(uint64_t); break;
    default:
      for (int64_t i = 0; i < ni; i++)
        for (int64_t j = 0; j < nj; j++)
          memcpy(dp + (i * dsp + j) * (int64_t)es, sp + (i + j * ssl) * (int64_t)es, es);
    }
  }
}

void loom_cpu_copy(const loom_cpu *c, const loom_view *dst, const loom_view *src) {
  loom_view v[2] = {*dst, *src};
  loom_cpu_iter it;
  loom_cpu_iter_init(&it, 2, v);
  size_t es = loom_dtype_size(dst->dtype);
  char *dbase = dst->data;
  const char *sbase = src->data;
  int32_t L = it.rank - 1;
  int64_t ds = it.stride[0][L], ss = it.stride[1][L];
  if (ds == 1 && ss != 1 && ss != 0) {
    for (int32_t p = 0; p < L; p++)
      if (it.stride[1][p] == 1) {
        copy_tiled(c, &it, p, dbase, sbase, es);
        return;
      }
  }
  int64_t tasks = loom_cpu_iter_tasks(&it), total = loom_cpu_iter_numel(&it);
#pragma omp parallel for num_threads(c->nt) schedule(static) if (total >= LOOM_CPU_PAR_MIN)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t off[2], len;
    loom_cpu_iter_task(&it, t, off, &len);
    copy_row(dbase + off[0] * (int64_t)es, sbase + off[1] * (int64_t)es, len, ds, ss, es);
  }
}

#define FILL_LOOP(T)                                                                               \
  do {                                                                                             \
    T v_;                                                                                          \
    memcpy(&v_, val, sizeof v_);                                                                   \
    T *d_ = (T *)p;                                                                                \
    for (int64_t i = 0; i < len; i++)                                                              \
      d_[i] = v_;                                                                                  \
  } while (0)

void loom_cpu_fill(const loom_cpu *c, void *dst, int64_t n, size_t es, const void *val) {
  int64_t tasks = (n + LOOM_CPU_CHUNK - 1) / LOOM_CPU_CHUNK;
#pragma omp parallel for num_threads(c->nt) schedule(static) if (n >= LOOM_CPU_PAR_MIN)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t start = t * LOOM_CPU_CHUNK, len = LOOM_MIN((int64_t)LOOM_CPU_CHUNK, n - start);
    char *p = (char *)dst + start * (int64_t)es;
    switch (es) {
    case 1: memset(p, *(const uint8_t *)val, (size_t)len); break;
    case 2: FILL_LOOP(uint16_t); break;
    case 4: FILL_LOOP(uint32_t); break;
    case 8: FILL_LOOP(uint64_t); break;
    default:
      for (int64_t i = 0; i < len; i++)
        memcpy(p + i * (int64_t)es, val, es);
    }
  }
}

/* ---- the layout ops ----------------------------------------------------- */

static loom_status k_reshape(const loom_cpu *c, const loom_node *n, const loom_view *in,
                             const loom_view *out) {
  (void)n;
  if (out[0].data == in[0].data) return LOOM_STATUS_OK; /* planned in place */
  /* both contiguous with the same element order: a flat copy */
  loom_view d = out[0], s = in[0];
  d.rank = s.rank = 1;
  d.shape[0] = s.shape[0] = loom_view_numel(&out[0]);
  d.stride[0] = s.stride[0] = 1;
  loom_cpu_copy(c, &d, &s);
  return LOOM_STATUS_OK;
}

static loom_status k_transpose(const loom_cpu *c, const loom_node *n, const loom_view *in,
                               const loom_view *out) {
  const loom_ints *perm = &LOOM_ATTR_INTS(n, transpose, perm);
  if (perm->n != in[0].rank)
    return loom_error(c->ctx, LOOM_STATUS_INVALID_ARGUMENT, "transpose: bad perm");
  loom_view s = loom_view_permute(&in[0], perm->v);
  loom_cpu_copy(c, &out[0], &s);
  return LOOM_STATUS_OK;
}

static loom_status k_broadcast_to(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                  const loom_view *out) {
  (void)n;
  loom_view s = loom_view_broadcast(&in[0], out[0].rank, out[0].shape);
  loom_cpu_copy(c, &out[0], &s);
  return LOOM_STATUS_OK;
}

/* Element offset of the corner lo[] in v. */
static void *at(const loom_view *v, const int64_t *lo) {
  int64_t e = 0;
  for (int32_t d = 0; d < v->rank; d++)
    e += lo[d] * v->stride[d];
  return (char *)v->data + e * (int64_t)loom_dtype_size(v->dtype);
}

static loom_status k_slice(const loom_cpu *c, const loom_node *n, const loom_view *in,
                           const loom_view *out) {
  const loom_ints *st = &LOOM_ATTR_INTS(n, slice, starts);
  if (st->n != in[0].rank)
    return loom_error(c->ctx, LOOM_STATUS_INVALID_ARGUMENT, "slice: bad starts");
  int64_t lo[LOOM_MAX_RANK];
  for (int32_t d = 0; d < in[0].rank; d++) {
    lo[d] = st->v[d] < 0 ? st->v[d] + in[0].shape[d] : st->v[d];
    if (lo[d] < 0 || lo[d] + out[0].shape[d] > in[0].shape[d])
      return loom_error(c->ctx, LOOM_STATUS_INVALID_ARGUMENT, "slice: dim %d does not fit", d);
  }
  loom_view s = in[0];
  s.data = at(&in[0], lo);
  for (int32_t d = 0; d < s.rank; d++)
    s.shape[d] = out[0].shape[d];
  loom_cpu_copy(c, &out[0], &s);
  return LOOM_STATUS_OK;
}

static loom_status k_concat(const loom_cpu *c, const loom_node *n, const loom_view *in,
                            const loom_view *out) {
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, concat, axis), out[0].rank, &axis))
    return loom_error(c->ctx, LOOM_STATUS_INVALID_ARGUMENT, "concat: bad axis");
  int64_t off[LOOM_MAX_RANK] = {0};
  for (int32_t i = 0; i < n->n_in; i++) {
    loom_view d = out[0];
    d.data = at(&out[0], off);
    d.shape[axis] = in[i].shape[axis];
    loom_cpu_copy(c, &d, &in[i]);
    off[axis] += in[i].shape[axis];
  }
  return LOOM_STATUS_OK;
}

static loom_status k_pad(const loom_cpu *c, const loom_node *n, const loom_view *in,
                         const loom_view *out) {
  const loom_ints *lo = &LOOM_ATTR_INTS(n, pad, lo);
  if (lo->n != out[0].rank) return loom_error(c->ctx, LOOM_STATUS_INVALID_ARGUMENT, "pad: bad lo");
  uint64_t val = 0; /* the value converted once, as bytes */
  loom_store(out[0].dtype, &val, 0, LOOM_ATTR_F(n, pad, value));
  loom_cpu_fill(c, out[0].data, loom_view_numel(&out[0]), loom_dtype_size(out[0].dtype), &val);
  loom_view d = out[0];
  d.data = at(&out[0], lo->v);
  for (int32_t k = 0; k < d.rank; k++)
    d.shape[k] = in[0].shape[k];
  loom_cpu_copy(c, &d, &in[0]);
  return LOOM_STATUS_OK;
}

loom_cpu_kernel loom_cpu_layout_kernel(const loom_graph *g, const loom_node *n) {
  if (loom_dtype_size(g->values[n->out[0]].type.dtype) == 0) return NULL;
  switch (n->op) {
  case LOOM_OP_RESHAPE: return k_reshape;
  case LOOM_OP_TRANSPOSE: return k_transpose;
  case LOOM_OP_BROADCAST_TO: return k_broadcast_to;
  case LOOM_OP_SLICE: return k_slice;
  case LOOM_OP_CONCAT: return k_concat;
  case LOOM_OP_PAD: return k_pad;
  default: return NULL;
  }
}
