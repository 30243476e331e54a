/*
 * The fusion cost model. Every formula and constant is documented in
 * docs/FUSION.md ("The cost model"); keep the two in step.
 */
#include "fusion/cost.h"

#include "ops/op.h"

#include <math.h>

/* Bytes a tile should move at least, so the per-tile cost is amortised. */
#define TILE_MIN_BYTES (32 * 1024)
/* Tiles a part aims for: enough to balance any core count up to ~64, few
 * enough that column-reduction partials stay small. A constant, not the
 * thread count: tiles fix the order in which partials are combined. */
#define TILE_TARGET 256
/* Column-reduction partials may add at most 1/PARTIAL_SHARE to a part's
 * traffic, unless that leaves fewer than COL_MIN_TILES tiles. */
#define PARTIAL_SHARE 8.0
#define COL_MIN_TILES 16
/* Fixed cost of one tile (loop setup, scratch pointers, partial flush). */
#define TILE_OVERHEAD_S 1e-7
/* Element-wise ops run at this fraction of the GEMM rate: no FMA pairing,
 * divisions and transcendental functions, loads and stores in between. */
#define ELEM_RATE_OF_GEMM 0.25
/* Without vector lanes (short rows) element-wise work is this much slower. */
#define SCALAR_SLOWDOWN 4.0
/* Re-reading a row from L2 rather than L1 costs this fraction of reading
 * it from memory. */
#define L2_REREAD_FRACTION 0.1
/* A byte a row reads or writes at a stride costs this many bytes of
 * traffic: a transposed add over [16, 196, 256] (two of its three operands
 * walked at a stride of 256 floats) ran at a sixth of the triad rate on
 * the strided bytes (docs/FUSION.md, "The cost model"). */
#define STRIDED_COST 6.0
/* Products below this many flops run on one thread (the cpu backend's
 * LOOM_GEMM_PARALLEL_FLOPS, runtime/cpu/gemm.h). */
#define GEMM_PARALLEL_FLOPS 1e6
/* Rows at least this long get 16 vector lanes rather than 8. */
#define LONG_ROW 256
/* Rows of 2 to SHORT_ROW elements run ROW_BLOCK rows side by side, one row
 * per vector lane: a row of 8 fills one vector at most, and each of its
 * row reductions would end in a fold over the lanes, a chain of scalar
 * ops as long as the row (a top-2 gate over 8 experts: 12 folds a row). */
#define SHORT_ROW 16
#define ROW_BLOCK 16

static int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

static int64_t pow2_at_least(int64_t x) {
  int64_t p = 1;
  while (p < x && p < ((int64_t)1 << 40))
    p <<= 1;
  return p;
}

/* Lanes of R loops and row reductions: 16 on long rows (one AVX-512
 * vector of f32 accumulators, or two AVX2 ones: the reductions'
 * dependency chains are half as long as with 8; the softmax forward
 * kernel measured faster, docs/FUSION.md), 8 on shorter ones, 1 below 8. The
 * choice depends on the row length only, never on the machine or the
 * thread count, so a plan computes the same bits everywhere. */
int32_t loom_cost_vector_width(int64_t row_len) {
  return row_len >= LONG_ROW ? 16 : row_len >= 8 ? 8 : 1;
}

/* The f32 functions (codegen's lm_expf and kin, vectorised) against a
 * multiply-add's share of the element rate: per element on one core of
 * an AVX2 host, exp 0.55 ns, log 0.80, sigmoid 0.58, erf 0.88, tanh 0.97,
 * where the rate's unit is 0.045 ns (docs/FUSION.md, "The cost model").
 * pow, sin and cos (double-precision libm) and dropout's Philox are not
 * measured yet. */
int32_t loom_cost_op_weight(loom_op op) {
  switch (op) {
  case LOOM_OP_EXP: return 12;
  case LOOM_OP_LOG: return 18;
  case LOOM_OP_SIGMOID: return 13;
  case LOOM_OP_ERF: return 20;
  case LOOM_OP_TANH: return 22;
  case LOOM_OP_POW: case LOOM_OP_SIN: case LOOM_OP_COS: case LOOM_OP_DROPOUT: return 8;
  case LOOM_OP_DIV: case LOOM_OP_SQRT: case LOOM_OP_RSQRT: case LOOM_OP_RECIPROCAL: return 3;
  default: break;
  }
  return loom_op_get(op)->cls == LOOM_OPCLASS_ELEMENTWISE ? 1 : 0;
}

loom_kschedule loom_cost_schedule(int64_t rows, int64_t row_len, int64_t bytes_per_row,
                                  int64_t partial_elems) {
  loom_kschedule s = {.rows_per_tile = 1, .vector_width = loom_cost_vector_width(row_len)};
  if (rows <= 1) return s;
  if (row_len >= 2 && row_len <= SHORT_ROW && rows >= ROW_BLOCK) s.rows_per_block = ROW_BLOCK;
  if (bytes_per_row < 1) bytes_per_row = 1;
  /* Big enough to amortise a tile, small enough for TILE_TARGET tiles;
   * amortisation wins when the two disagree (rows of a few bytes). */
  int64_t by_bytes = ceil_div(TILE_MIN_BYTES, bytes_per_row);
  int64_t by_count = ceil_div(rows, TILE_TARGET);
  /* Column partials (written and read back once per tile, as doubles)
   * stay under 1/PARTIAL_SHARE of the part's traffic, as long as that
   * leaves COL_MIN_TILES tiles. */
  int64_t by_partials = 1;
  if (partial_elems > 0) {
    double fit =
        (double)rows * (double)bytes_per_row / (PARTIAL_SHARE * 16.0 * (double)partial_elems);
    int64_t max_tiles = LOOM_MAX(COL_MIN_TILES, (int64_t)fit);
    by_partials = ceil_div(rows, max_tiles);
  }
  int64_t r = pow2_at_least(LOOM_MAX(LOOM_MAX(by_bytes, by_count), by_partials));
  s.rows_per_tile = LOOM_MIN(r, rows);
  return s;
}

double loom_cost_group(const loom_machine *m, const loom_group_info *info,
                       loom_cost_detail *detail) {
  loom_cost_detail d = {0};
  int64_t cores = m->cores > 0 ? m->cores : 1;
  double bw = (m->triad_gbps > 0 ? m->triad_gbps : 10.0) * 1e9;
  double elem_rate = (m->sgemm_gflops > 0 ? m->sgemm_gflops : 100.0) * 1e9 * ELEM_RATE_OF_GEMM;
  int64_t rows = info->rows > 0 ? info->rows : 1;
  int64_t row_len = info->row_len > 0 ? info->row_len : 1;
  int64_t bytes = info->bytes_read + info->bytes_written;
  int64_t bytes_per_row = ceil_div(bytes, rows);
  /* Column results are about a row long (a bias or gain gradient). */
  int64_t partial_elems = (int64_t)info->n_col_reduce * row_len;
  d.sched = loom_cost_schedule(rows, row_len, bytes_per_row, partial_elems);
  d.tiles = ceil_div(rows, d.sched.rows_per_tile);

  /* Parallelism: cores without a tile idle; equal tiles run in waves.
   * info describes the largest part only: the tiles of other parts (run
   * alongside it) are counted as one per part, and their uneven sizes as
   * balancing the waves. */
  int32_t n_parts = info->n_parts > 1 ? info->n_parts : 1;
  int64_t avail = LOOM_MAX(d.tiles, (int64_t)n_parts);
  d.utilization = avail >= cores ? 1.0 : (double)avail / (double)cores;
  d.imbalance = n_parts == 1 && d.tiles >= cores
                    ? (double)(ceil_div(d.tiles, cores) * cores) / (double)d.tiles
                    : 1.0;

  /* Working set of one row: its scratch rows, the row's inputs, and
   * column-reduction accumulators. A row reduction that feeds later work
   * makes the row's inputs be read again in a later stage (a pass): free
   * from L1, cheap from L2, full price from memory. Passes are bounded by
   * the ROW stages a part can have (SCALAR stages read no row). */
  int64_t scratch = (int64_t)info->n_scratch * row_len * 4;
  int64_t read_per_row = ceil_div(info->bytes_read, rows);
  d.working_set = scratch + read_per_row + (int64_t)info->n_col_reduce * row_len * 8;
  int64_t later = LOOM_MAX(0, LOOM_MIN(info->n_row_reduce, info->n_stages - n_parts));
  int64_t rereads = (int64_t)((double)later / n_parts * (double)info->bytes_read);
  if (d.working_set > m->l2_bytes) {
    d.extra_bytes = rereads + 2 * scratch * rows;
  } else if (d.working_set > m->l1d_bytes) {
    d.extra_bytes = (int64_t)(L2_REREAD_FRACTION * (double)rereads);
  }

  bool lanes = d.sched.vector_width > 1 || d.sched.rows_per_block > 1;
  double rate = elem_rate * (lanes ? 1.0 : 1.0 / SCALAR_SLOWDOWN);
  /* a row walking an operand at a stride (a transpose) touches a cache
   * line per element: what the lines' reuse by the next rows leaves */
  d.strided_bytes = (int64_t)((STRIDED_COST - 1.0) * (double)info->strided_bytes);
  d.memory_s = (double)(bytes + d.extra_bytes + d.strided_bytes) / (bw * d.utilization);
  d.compute_s = (double)info->elem_ops / (rate * d.utilization);
  d.launch_s = m->kernel_launch_s;
  d.tile_s = (double)d.tiles * TILE_OVERHEAD_S / ((double)cores * d.utilization);
  /* Column partials: written per tile, read back once when combined. */
  d.combine_s = (double)partial_elems * (double)d.tiles * 16.0 / bw;
  d.total_s = d.launch_s + fmax(d.memory_s, d.compute_s) * d.imbalance + d.tile_s + d.combine_s;
  if (detail) *detail = d;
  return d.total_s;
}

static int64_t value_bytes(const loom_graph *g, int32_t v) {
  const loom_type *t = loom_value_type(g, v);
  return loom_type_numel(t) * (int64_t)loom_dtype_size(t->dtype);
}

int64_t loom_cost_node_bytes(const loom_graph *g, int32_t node) {
  const loom_node *nd = &g->nodes[node];
  int64_t b = 0;
  for (int32_t i = 0; i < nd->n_in; i++)
    b += value_bytes(g, nd->in[i]);
  for (int32_t o = 0; o < nd->n_out; o++)
    b += value_bytes(g, nd->out[o]);
  return b;
}

int64_t loom_cost_gemm_depth(const loom_graph *g, int32_t node) {
  const loom_node *nd = &g->nodes[node];
  const loom_type *a = loom_value_type(g, nd->in[0]);
  if (nd->op != LOOM_OP_MATMUL) { /* a conv: weights [M, C/g, K...] */
    const loom_type *w = loom_value_type(g, nd->in[1]);
    int64_t k = 1;
    for (int32_t d = 1; d < w->rank; d++) k *= w->shape[d];
    return k;
  }
  bool ta = LOOM_ATTR_I(nd, matmul, trans_a) != 0;
  return a->rank >= 2 ? a->shape[a->rank - (ta ? 2 : 1)] : 1;
}

double loom_cost_gemm(const loom_machine *m, const loom_graph *g, int32_t node) {
  int64_t k = loom_cost_gemm_depth(g, node);
  double flops = 2.0 * (double)loom_type_numel(loom_value_type(g, g->nodes[node].out[0])) * (double)k;
  double bw = (m->triad_gbps > 0 ? m->triad_gbps : 10.0) * 1e9;
  /* on its own tiles: many (8 or more, GEMM_MIN_TASKS in gemm.c) unless the product is small */
  double compute_s = loom_cost_gemm_blocked(m, flops, LOOM_MAX(m->cores, 2), 0, 0);
  return m->kernel_launch_s + fmax(compute_s, (double)loom_cost_node_bytes(g, node) / bw);
}

double loom_cost_gemm_blocked(const loom_machine *m, double flops, int64_t tasks, int64_t rows,
                              int64_t b_bytes) {
  int64_t cores = m->cores > 0 ? m->cores : 1;
  double core_rate = (m->sgemm_gflops > 0 ? m->sgemm_gflops : 100.0) * 1e9 / (double)cores;
  /* a B that stays in the core's cache is re-packed cheaply */
  double eff = rows > 0 && b_bytes > m->l2_bytes / 2 ? loom_machine_gemm_rows_eff(m, rows) : 1.0;
  if (tasks <= 1 || flops < GEMM_PARALLEL_FLOPS) return flops / (core_rate * eff);
  /* equal blocks in waves over the cores */
  return flops / (double)tasks * (double)ceil_div(tasks, cores) / (core_rate * eff);
}

double loom_cost_eager(const loom_machine *m, const loom_graph *g, int32_t node) {
  double bw = (m->triad_gbps > 0 ? m->triad_gbps : 10.0) * 1e9;
  return m->kernel_launch_s + (double)loom_cost_node_bytes(g, node) / bw;
}
