/*
 * Index, random and source ops on the cpu backend: gather (any dtype),
 * scatter_add (f32, parallel over output rows so the sum order is fixed),
 * dropout (f32, the rng/philox.h mask via the fast paths), iota and constant (any dtype).
 */
#include "runtime/cpu/cpu.h"

#include "ir/dtype.h"
#include "ops/ops_util.h"
#include "ops/rng_piece.h"
#include "rng/philox.h"
#include "rng/philox_fast.h"

#include <stdlib.h>
#include <string.h>

/* Columns per scatter task (double accumulators on the stack). */
#define SCATTER_COLS 256

static void outer_inner(const loom_view *v, int32_t axis, int64_t *outer, int64_t *inner) {
  *outer = *inner = 1;
  for (int32_t d = 0; d < axis; d++)
    *outer *= v->shape[d];
  for (int32_t d = axis + 1; d < v->rank; d++)
    *inner *= v->shape[d];
}

static loom_status k_gather(const loom_cpu *c, const loom_node *n, const loom_view *in,
                            const loom_view *out) {
  const loom_view *data = &in[0];
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, gather, axis), data->rank, &axis))
    return loom_error(c->ctx, LOOM_STATUS_INVALID_ARGUMENT, "gather: bad axis");
  int64_t extent = data->shape[axis], outer, inner, *iv = NULL;
  outer_inner(data, axis, &outer, &inner);
  LOOM_TRY(loom_index_rows(c->ctx, "gather", &in[1], LOOM_ATTR_I(n, gather, base), extent,
                           LOOM_ATTR_I(n, gather, range), &iv));
  int64_t ni = loom_view_numel(&in[1]), rows = outer * ni;
  size_t es = loom_dtype_size(data->dtype), row_bytes = (size_t)inner * es;
  const char *src = data->data;
  char *dst = out[0].data;
  if (inner == 1 && es == 4) { /* along the last axis (a resize's columns): no call per element */
    const uint32_t *s4 = (const uint32_t *)src;
    uint32_t *d4 = (uint32_t *)dst;
#pragma omp parallel for num_threads(c->nt) schedule(static) if (rows >= LOOM_CPU_PAR_MIN)
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < ni; j++)
        d4[o * ni + j] = iv[j] < 0 ? 0 : s4[o * extent + iv[j]];
    free(iv);
    return LOOM_STATUS_OK;
  }
#pragma omp parallel for num_threads(c->nt) schedule(static) if (rows * inner >= LOOM_CPU_PAR_MIN)
  for (int64_t t = 0; t < rows; t++) {
    int64_t o = t / ni, j = t % ni;
    if (iv[j] < 0) /* outside this table piece */
      memset(dst + t * (int64_t)row_bytes, 0, row_bytes);
    else
      memcpy(dst + t * (int64_t)row_bytes, src + (o * extent + iv[j]) * (int64_t)row_bytes,
             row_bytes);
  }
  free(iv);
  return LOOM_STATUS_OK;
}

/* out[o, e, :] = sum over j with idx[j] == e, in increasing j, of
 * upd[o, j, :]: accumulated in double and rounded once like the reference.
 * The j lists per e come from a stable counting sort. */
static loom_status k_scatter_add(const loom_cpu *c, const loom_node *n, const loom_view *in,
                                 const loom_view *out) {
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, scatter_add, axis), out[0].rank, &axis))
    return loom_error(c->ctx, LOOM_STATUS_INVALID_ARGUMENT, "scatter_add: bad axis");
  int64_t extent = out[0].shape[axis], outer, inner, *iv = NULL;
  outer_inner(&out[0], axis, &outer, &inner);
  int64_t ni = loom_view_numel(&in[0]);
  if (loom_view_numel(&in[1]) != outer * ni * inner)
    return loom_error(c->ctx, LOOM_STATUS_SHAPE_MISMATCH, "scatter_add: bad updates");
  LOOM_TRY(loom_index_rows(c->ctx, "scatter_add", &in[0], LOOM_ATTR_I(n, scatter_add, base),
                           extent, LOOM_ATTR_I(n, scatter_add, range), &iv));
  int64_t *start = loom_calloc(c->ctx, (size_t)extent + 1, sizeof(int64_t));
  int64_t *order = loom_malloc(c->ctx, sizeof(int64_t) * (size_t)(ni > 0 ? ni : 1));
  if (!start || !order) {
    free(iv);
    free(start);
    free(order);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int64_t j = 0; j < ni; j++) /* rows outside this table piece are dropped */
    if (iv[j] >= 0) start[iv[j] + 1]++;
  for (int64_t e = 0; e < extent; e++)
    start[e + 1] += start[e];
  for (int64_t j = 0; j < ni; j++)
    if (iv[j] >= 0) order[start[iv[j]]++] = j; /* start[e] -> end of e */
  for (int64_t e = extent; e > 0; e--)
    start[e] = start[e - 1];
  start[0] = 0;
  const float *upd = in[1].data;
  float *y = out[0].data;
  int64_t cb = (inner + SCATTER_COLS - 1) / SCATTER_COLS, tasks = outer * extent * cb;
#pragma omp parallel for num_threads(c->nt)                                                        \
    schedule(static) if (outer * extent * inner + ni * inner >= LOOM_CPU_PAR_MIN)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t row = t / cb, i0 = (t % cb) * SCATTER_COLS;
    int64_t o = row / extent, e = row % extent, len = LOOM_MIN((int64_t)SCATTER_COLS, inner - i0);
    double acc[SCATTER_COLS];
    for (int64_t i = 0; i < len; i++)
      acc[i] = 0.0;
    for (int64_t q = start[e]; q < start[e + 1]; q++) {
      const float *u = upd + (o * ni + order[q]) * inner + i0;
      for (int64_t i = 0; i < len; i++)
        acc[i] += u[i];
    }
    float *dst = y + row * inner + i0;
    for (int64_t i = 0; i < len; i++)
      dst[i] = (float)acc[i];
  }
  free(iv);
  free(start);
  free(order);
  return LOOM_STATUS_OK;
}

/* The mask of rng/philox.h through the fast Philox paths (rng/philox_fast.h:
 * AVX-512, AVX2 or portable, whichever the CPU runs), which give the
 * reference's keep decisions and its double-precision x / (1 - p) bit for
 * bit. Fixed-size tasks: the same result for any thread count. */
static loom_status k_dropout(const loom_cpu *c, const loom_node *n, const loom_view *in,
                             const loom_view *out) {
  double p = LOOM_ATTR_F(n, dropout, p);
  if (!(p >= 0.0 && p < 1.0))
    return loom_error(c->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "dropout: 'p' must satisfy 0 <= p < 1, got %g", p);
  uint64_t start = (uint64_t)LOOM_ATTR_I(n, dropout, offset);
  if (n->n_in > 1) start += (uint64_t)loom_load_i64(in[1].dtype, in[1].data, 0);
  uint64_t seed = (uint64_t)LOOM_ATTR_I(n, dropout, seed), thr = loom_dropout_threshold(p);
  double keep_div = 1.0 - p;
  const float *x = in[0].data;
  float *y = out[0].data;
  loom_rng_piece piece;
  LOOM_TRY(loom_op_rng_piece(c->ctx, n, out[0].rank, out[0].shape, &piece));
  int64_t total = loom_view_numel(&out[0]);
  int64_t tasks = (total + LOOM_CPU_CHUNK - 1) / LOOM_CPU_CHUNK;
#pragma omp parallel for num_threads(c->nt) schedule(static) if (total >= LOOM_CPU_PAR_MIN / 4)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t end = LOOM_MIN(total, (t + 1) * (int64_t)LOOM_CPU_CHUNK);
    /* runs of consecutive logical indices (one run unless a piece) */
    for (int64_t i = t * LOOM_CPU_CHUNK, len; i < end; i += len) {
      uint64_t first;
      len = loom_rng_piece_span(&piece, i, end - i, &first);
      loom_dropout_apply_f32(seed, start + first, len, thr, keep_div, x + i, y + i);
    }
  }
  return LOOM_STATUS_OK;
}

loom_cpu_kernel loom_cpu_index_kernel(const loom_graph *g, const loom_node *n) {
  loom_dtype out = g->values[n->out[0]].type.dtype;
  switch (n->op) {
  case LOOM_OP_GATHER: {
    loom_dtype it = g->values[n->in[1]].type.dtype;
    return (it == LOOM_DTYPE_I32 || it == LOOM_DTYPE_I64) && loom_dtype_size(out) ? k_gather : NULL;
  }
  case LOOM_OP_SCATTER_ADD: {
    loom_dtype it = g->values[n->in[0]].type.dtype;
    return (it == LOOM_DTYPE_I32 || it == LOOM_DTYPE_I64) && out == LOOM_DTYPE_F32 &&
                   g->values[n->in[1]].type.dtype == LOOM_DTYPE_F32
               ? k_scatter_add
               : NULL;
  }
  case LOOM_OP_DROPOUT: {
    if (out != LOOM_DTYPE_F32 || g->values[n->in[0]].type.dtype != LOOM_DTYPE_F32) return NULL;
    if (n->n_in > 1) {
      loom_dtype bt = g->values[n->in[1]].type.dtype;
      if (bt != LOOM_DTYPE_I32 && bt != LOOM_DTYPE_I64) return NULL;
    }
    return k_dropout;
  }
  default: return NULL;
  }
}

/* ---- sources ------------------------------------------------------------- */

static loom_status k_iota(const loom_cpu *c, const loom_node *n, const loom_view *in,
                          const loom_view *out) {
  (void)in;
  int32_t axis;
  if (!loom_norm_axis(LOOM_ATTR_I(n, iota, axis), out[0].rank, &axis))
    return loom_error(c->ctx, LOOM_STATUS_INVALID_ARGUMENT, "iota: bad axis");
  int64_t extent = out[0].shape[axis], inner = 1, total = loom_view_numel(&out[0]);
  for (int32_t d = axis + 1; d < out[0].rank; d++)
    inner *= out[0].shape[d];
  loom_dtype dt = out[0].dtype;
  void *y = out[0].data;
  int64_t start = LOOM_ATTR_I(n, iota, start);
#pragma omp parallel for num_threads(c->nt) schedule(static) if (total >= LOOM_CPU_PAR_MIN)
  for (int64_t i = 0; i < total; i++)
    loom_store(dt, y, i, (double)(start + (i / inner) % extent));
  return LOOM_STATUS_OK;
}

static loom_status k_constant(const loom_cpu *c, const loom_node *n, const loom_view *in,
                              const loom_view *out) {
  (void)in;
  uint64_t val = 0; /* converted once, replicated as bytes */
  loom_store(out[0].dtype, &val, 0, LOOM_ATTR_F(n, constant, value));
  loom_cpu_fill(c, out[0].data, loom_view_numel(&out[0]), loom_dtype_size(out[0].dtype), &val);
  return LOOM_STATUS_OK;
}

loom_cpu_kernel loom_cpu_source_kernel(const loom_graph *g, const loom_node *n) {
  if (!loom_dtype_size(g->values[n->out[0]].type.dtype)) return NULL;
  if (n->op == LOOM_OP_IOTA) return k_iota;
  if (n->op == LOOM_OP_CONSTANT) return k_constant;
  return NULL;
}
