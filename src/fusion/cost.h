/*
 * The fusion cost model (formulas and constants: docs/FUSION.md). It turns
 * what loom_fusion_group_analyze says about a group, plus the machine's
 * measured facts, into modeled seconds, and chooses each kernel part's
 * schedule. It reads machine->cores, never machine->threads: plans and
 * schedules must not change with the thread count of a run.
 */
#ifndef LOOM_FUSION_COST_H
#define LOOM_FUSION_COST_H

#include "fusion/group.h"

/* The terms of one kernel's modeled time (seconds unless named). */
typedef struct loom_cost_detail {
  loom_kschedule sched; /* of the largest part */
  int64_t tiles;        /* of the largest part */
  double utilization;   /* cores with work / cores, in (0, 1] */
  double imbalance;     /* >= 1: waves of equal tiles vs perfect balance */
  int64_t working_set;  /* bytes per row in flight: scratch + row I/O */
  int64_t extra_bytes;  /* re-reads and scratch that spill out of cache */
  int64_t strided_bytes; /* what walking operands at a stride adds */
  double launch_s, memory_s, compute_s, tile_s, combine_s;
  double total_s;
} loom_cost_detail;

/* The vector lanes of a part whose rows are row_len long: 16, 8 or 1. */
int32_t loom_cost_vector_width(int64_t row_len);

/* A part's schedule from its sizes alone (never the thread count):
 * rows_per_tile and vector_width. bytes_per_row is the part's global
 * traffic per row (reads + writes); partial_elems the elements of its
 * column-reduction results (each tile keeps a partial of them). */
loom_kschedule loom_cost_schedule(int64_t rows, int64_t row_len, int64_t bytes_per_row,
                                  int64_t partial_elems);

/* What one element of op costs in the element rate's operations: a
 * multiply or an add 1, a division or root 3, the kernel IR's f32
 * functions their measured time (docs/FUSION.md), layout 0. */
int32_t loom_cost_op_weight(loom_op op);

/* Modeled seconds of one kernel described by info (detail may be NULL). */
double loom_cost_group(const loom_machine *m, const loom_group_info *info,
                       loom_cost_detail *detail);

/* Bytes a node reads and writes when run alone (inputs + outputs). */
int64_t loom_cost_node_bytes(const loom_graph *g, int32_t node);
/* Modeled seconds of a matmul (or a convolution) through the GEMM library. */
double loom_cost_gemm(const loom_machine *m, const loom_graph *g, int32_t node);
/* The length of the products a GEMM-class node sums: a matmul's K, a
 * conv's C/g times its kernel positions. */
int64_t loom_cost_gemm_depth(const loom_graph *g, int32_t node);
/* Modeled compute seconds of a GEMM of `flops` run as `tasks` equal
 * blocks of `rows` whole rows of C each (an epilogue's blocking; 0: the
 * GEMM's own tiles), on the machine's cores: the sgemm rate per core times
 * the measured efficiency of such blocks (machine.h, gemm_rows_eff; 1 when
 * B, of b_bytes, stays in L2), in waves of `cores` blocks; one core below
 * the runtime's parallel threshold. */
double loom_cost_gemm_blocked(const loom_machine *m, double flops, int64_t tasks, int64_t rows,
                              int64_t b_bytes);
/* Modeled seconds of a node run eagerly (its bytes at the bandwidth). */
double loom_cost_eager(const loom_machine *m, const loom_graph *g, int32_t node);

#endif
