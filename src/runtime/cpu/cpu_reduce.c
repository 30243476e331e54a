/*
 * Reductions on the cpu backend (f32, double accumulation). The input is
 * viewed as [O, R, I]: the reduced axes must form one block once size-1
 * dims are ignored (other patterns run the reference kernel). Each output
 * element is accumulated by one thread over r = 0..R-1 in order, which is
 * also the reference's order, so results match it bit for bit; only a huge
 * reduction into very few outputs is split into fixed-size partial sums.
 */
#include "runtime/cpu/cpu.h"

#include "ops/ops_util.h"

#include <math.h>
#include <stdlib.h>

/* Columns per task when reducing an outer axis (accumulators on stack). */
#define RED_COLS 64
/* Reduction length per partial when few outputs reduce very long rows. */
#define RED_PART 65536

/* Splits shape/mask into O, R, I; false if the reduced dims are not one
 * block. An empty axes list reduces everything. */
static bool reduce_split(const loom_node *n, const loom_type *t, int64_t *O, int64_t *R,
                         int64_t *I) {
  const loom_ints *axes = &LOOM_ATTR_INTS(n, reduce_sum, axes);
  uint32_t mask = 0;
  if (axes->n == 0)
    mask = t->rank ? (uint32_t)((UINT64_C(1) << t->rank) - 1) : 0;
  else if (!loom_axes_mask(axes, t->rank, &mask))
    return false;
  *O = *R = *I = 1;
  int phase = 0; /* 0: before the block, 1: in it, 2: after it */
  for (int32_t d = 0; d < t->rank; d++) {
    int64_t s = t->shape[d];
    bool red = (mask >> d) & 1u;
    if (s == 1) continue;
    if (red) {
      if (phase == 2) return false;
      phase = 1;
      *R *= s;
    } else if (phase == 0) {
      *O *= s;
    } else {
      phase = 2;
      *I *= s;
    }
  }
  /* a zero-sized dim anywhere: keep the products exact (0 elements) */
  for (int32_t d = 0; d < t->rank; d++)
    if (t->shape[d] == 0) {
      if ((mask >> d) & 1u)
        *R = 0;
      else
        *O = 0;
    }
  return true;
}

typedef enum { RSUM, RMAX, RMIN } red_kind;

static inline double red_init(red_kind k) {
  return k == RSUM ? 0.0 : k == RMAX ? -INFINITY : INFINITY;
}

/* acc op= v, NaN sticking for max/min like the reference. */
static inline double red_step(red_kind k, double acc, double v) {
  if (k == RSUM) return acc + v;
  if (v != v) return v;
  return (k == RMAX ? v > acc : v < acc) ? v : acc;
}

static double reduce_row(red_kind k, const float *x, int64_t n) {
  double acc = red_init(k);
  if (k == RSUM)
    for (int64_t r = 0; r < n; r++)
      acc += x[r];
  else
    for (int64_t r = 0; r < n; r++)
      acc = red_step(k, acc, x[r]);
  return acc;
}

static loom_status k_reduce(const loom_cpu *c, const loom_node *n, const loom_view *in,
                            const loom_view *out) {
  loom_type t = {.dtype = in[0].dtype, .rank = in[0].rank};
  for (int32_t d = 0; d < t.rank; d++)
    t.shape[d] = in[0].shape[d];
  int64_t O, R, I;
  if (!reduce_split(n, &t, &O, &R, &I))
    return loom_error(c->ctx, LOOM_STATUS_INTERNAL, "reduce: unsupported axes");
  red_kind k = n->op == LOOM_OP_REDUCE_SUM ? RSUM : n->op == LOOM_OP_REDUCE_MAX ? RMAX : RMIN;
  const float *x = in[0].data;
  float *y = out[0].data;
  int64_t total = O * R * I;
  if (I == 1 && O < 16 && R >= 2 * RED_PART) {
    /* few long rows: fixed-size partials, combined in order */
    int64_t parts = (R + RED_PART - 1) / RED_PART, tasks = O * parts;
    double *part = loom_malloc(c->ctx, sizeof(double) * (size_t)tasks);
    if (!part) return LOOM_STATUS_OUT_OF_MEMORY;
#pragma omp parallel for num_threads(c->nt) schedule(static)
    for (int64_t tk = 0; tk < tasks; tk++) {
      int64_t o = tk / parts, p = tk % parts, r0 = p * RED_PART;
      part[tk] = reduce_row(k, x + o * R + r0, LOOM_MIN((int64_t)RED_PART, R - r0));
    }
    for (int64_t o = 0; o < O; o++) {
      double acc = red_init(k);
      for (int64_t p = 0; p < parts; p++)
        acc = red_step(k, acc, part[o * parts + p]);
      y[o] = (float)acc;
    }
    free(part);
    return LOOM_STATUS_OK;
  }
  if (I == 1) {
#pragma omp parallel for num_threads(c->nt) schedule(static) if (total >= LOOM_CPU_PAR_MIN)
    for (int64_t o = 0; o < O; o++)
      y[o] = (float)reduce_row(k, x + o * R, R);
    return LOOM_STATUS_OK;
  }
  /* reduce a middle/outer axis: accumulate RED_COLS columns at a time */
  int64_t cb = (I + RED_COLS - 1) / RED_COLS, tasks = O * cb;
#pragma omp parallel for num_threads(c->nt) schedule(static) if (total >= LOOM_CPU_PAR_MIN)
  for (int64_t tk = 0; tk < tasks; tk++) {
    int64_t o = tk / cb, i0 = (tk % cb) * RED_COLS, ni = LOOM_MIN((int64_t)RED_COLS, I - i0);
    double acc[RED_COLS];
    for (int64_t i = 0; i < ni; i++)
      acc[i] = red_init(k);
    const float *base = x + o * R * I + i0;
    for (int64_t r = 0; r < R; r++) {
      const float *row = base + r * I;
      if (k == RSUM)
        for (int64_t i = 0; i < ni; i++)
          acc[i] += row[i];
      else
        for (int64_t i = 0; i < ni; i++)
          acc[i] = red_step(k, acc[i], row[i]);
    }
    for (int64_t i = 0; i < ni; i++)
      y[o * I + i0 + i] = (float)acc[i];
  }
  return LOOM_STATUS_OK;
}

loom_cpu_kernel loom_cpu_reduce_kernel(const loom_graph *g, const loom_node *n) {
  const loom_type *t = &g->values[n->in[0]].type;
  if (t->dtype != LOOM_DTYPE_F32 || g->values[n->out[0]].type.dtype != LOOM_DTYPE_F32) return NULL;
  int64_t O, R, I;
  return reduce_split(n, t, &O, &R, &I) ? k_reduce : NULL;
}
