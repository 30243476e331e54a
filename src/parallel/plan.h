/*
 * Parallel plans (docs/PARALLEL.md): SuperScaler's three primitives over a
 * logical graph. A plan cuts nodes into sub-ops (op_trans), places each on
 * a device (op_assign) and orders sub-ops on one device (op_order); how
 * the graph's inputs are held and its outputs delivered is stated per
 * value. Everything else — which pieces each sub-op needs, the
 * communication that brings them, each device's program — Loom derives
 * (parallel/lower.h).
 *
 * Flat arrays indexed by small integers, no pointers between records, so
 * a planner (issue 10) can copy a plan and change it cheaply.
 */
#ifndef LOOM_PARALLEL_PLAN_H
#define LOOM_PARALLEL_PLAN_H

#include "parallel/subop.h"

/* Devices a plan may use. */
#define LOOM_PLAN_MAX_DEVICES 4096

/* How op_trans cuts a sub-op: split one label of the node's partition
 * annotation into n even ranges, or make n replicas. */
typedef enum loom_algo_kind {
  LOOM_ALGO_SPLIT = 0,
  LOOM_ALGO_REPLICATE
} loom_algo_kind;

typedef struct loom_algo {
  loom_algo_kind kind;
  int32_t label; /* SPLIT: the label (loom_plan_label finds it by dim) */
} loom_algo;

typedef struct loom_subop {
  int32_t node;    /* the logical node it computes a part of */
  int32_t parent;  /* the sub-op it was cut from; -1 for the whole node */
  int32_t index;   /* among its parent's children: its name is NODE#i#j */
  int32_t device;  /* -1 until op_assign */
  int32_t replica, replicas; /* r of R: R sub-ops computing the same part */
  int32_t first_child, n_children; /* 0 children: a leaf (what runs) */
  /* A late reader: where several replicas of an operand's piece are on
   * its device, it reads the last made (a recomputed copy) rather than the
   * first. Recomputation is a replica on the same device, ordered late,
   * that the backward reads. */
  bool reads_last;
  loom_subop_ranges r; /* label ranges */
} loom_subop;

typedef struct loom_plan_order {
  int32_t before, after; /* sub-ops on one device */
} loom_plan_order;

/* The pieces of a graph input or output: piece i of `layout` on device
 * devices[i]. An input without one is fed to each device as the parts its
 * sub-ops need (the host holds the whole); an output without one is
 * delivered whole to device 0. */
typedef struct loom_plan_placement {
  bool set;
  loom_vlayout layout;
  int32_t *devices; /* layout.n_pieces entries */
} loom_plan_placement;

typedef struct loom_plan {
  loom_ctx *ctx;
  const loom_graph *graph; /* borrowed: must outlive the plan */
  int32_t n_devices;
  loom_subop *subops;
  int32_t n_subops, cap_subops; /* sub-op i < graph->n_nodes: node i whole */
  loom_plan_order *orders;
  int32_t n_orders, cap_orders;
  loom_plan_placement *inputs;  /* graph->n_inputs */
  loom_plan_placement *outputs; /* graph->n_outputs */
  int32_t *tied; /* per output: the input it updates in place (-1: none) */
  /* per node: its annotation and label extents (computed once) */
  loom_partition *part;
  int64_t (*ext)[LOOM_PART_MAX_LABELS];
} loom_plan;

/* A plan over g for n_devices, every node one whole unassigned sub-op. */
loom_status loom_plan_new(loom_ctx *ctx, const loom_graph *g, int32_t n_devices,
                          loom_plan **out);
void loom_plan_free(loom_plan *p);
/* A deep copy (for planners trying alternatives). */
loom_status loom_plan_copy(const loom_plan *p, loom_plan **out);

/* The label of node's annotation on dim `dim` of input (is_output false)
 * or output `operand`; -1, with a message, when that dim has none (it must
 * stay whole). */
int32_t loom_plan_label(const loom_plan *p, int32_t node, bool is_output, int32_t operand,
                        int32_t dim);

/* op_trans: cuts leaf sub-op s into n children (ids *first .. *first+n-1)
 * by algorithm a. A split needs n to divide the sub-op's range of the
 * label; the children inherit s's device. */
loom_status loom_op_trans(loom_plan *p, int32_t s, loom_algo a, int32_t n, int32_t *first);
/* op_assign: places leaf sub-op s on a device (a non-leaf: all its leaves). */
loom_status loom_op_assign(loom_plan *p, int32_t s, int32_t device);
/* op_order: a runs before b; both leaves on one device. */
loom_status loom_op_order(loom_plan *p, int32_t a, int32_t b);

/* How graph input i is held (piece j of l on devices[j]). */
loom_status loom_plan_set_input(loom_plan *p, int32_t input, const loom_vlayout *l,
                                const int32_t *devices);
/* How graph output o is delivered. */
loom_status loom_plan_set_output(loom_plan *p, int32_t output, const loom_vlayout *l,
                                 const int32_t *devices);
/* Output o is the next value of input i (training state): it is delivered
 * in exactly the pieces input i is held in, so step k+1 reads what step k
 * wrote where it wrote it. */
loom_status loom_plan_tie(loom_plan *p, int32_t output, int32_t input);

/* Leaves of node `node` (sub-ops that run), in index order, into *out
 * (malloc'ed; NULL when none); *n their count. */
loom_status loom_plan_leaves(const loom_plan *p, int32_t node, int32_t **out, int32_t *n);
/* "matmul.12#0#1" into buf. */
const char *loom_subop_name(const loom_plan *p, int32_t s, char *buf, size_t n);
/* Finds a sub-op by that name; -1 with a message if none. */
int32_t loom_plan_find_subop(const loom_plan *p, const char *name);

#endif
