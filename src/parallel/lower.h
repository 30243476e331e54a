/*
 * Lowering a plan (parallel/plan.h) into programs: the dependency finder,
 * the validator and the per-device programs.
 *
 * loom_plan_lower validates the plan (every sub-op placed, every piece of
 * every value produced exactly once or by consistent replicas, orders on
 * one device and acyclic with the data), then walks the logical graph in
 * order and, for every operand a sub-op reads, finds the producer pieces
 * it needs and chooses how they get there: used as they are, a local
 * slice, concatenation or sum, or communication (all-reduce, all-gather,
 * reduce-scatter, all-to-all, broadcast, transfer), by the cost model of
 * perf/comm_model.h. The result is one **global graph**: every device's
 * sub-ops as ordinary ops over piece-shaped values, and the communication
 * as comm-class ops in their global form (one input and one output per
 * group member), so the reference executor runs all devices of a plan in
 * one process. Its inputs and outputs are the logical graph's (outputs
 * assembled whole from their pieces), which makes it the oracle a plan is
 * tested against: it must compute what the logical graph computes.
 *
 * loom_plan_device_graph cuts device d's program out of the global graph:
 * its nodes in its execution order, its comm ops in their per-device form
 * (run through the communicator of loom_ctx.comm_env), its pieces of the
 * graph's inputs as inputs and its pieces of the outputs as outputs.
 */
#ifndef LOOM_PARALLEL_LOWER_H
#define LOOM_PARALLEL_LOWER_H

#include "parallel/plan.h"
#include "perf/comm_model.h"

/* One communication op of the program. */
typedef struct loom_plan_comm {
  loom_op op;     /* LOOM_OP_ALL_REDUCE, ... (the comm class) */
  int32_t node;   /* its node in the global graph */
  int32_t group;  /* its group (loom_plan_program.groups) */
  int32_t seq;    /* its number: every member runs comms in seq order */
  int32_t value;  /* the logical value whose pieces it moves */
  int64_t bytes;  /* bytes each member sends (the busiest one's) */
} loom_plan_comm;

/* A piece of a graph input or output on one device. */
typedef struct loom_plan_io {
  int32_t device;
  int32_t index;  /* the graph input or output */
  loom_vbox box;  /* the part of it */
  int32_t value;  /* the piece's value in the global graph */
} loom_plan_io;

/* What one device's program does, per step. */
typedef struct loom_plan_device_stats {
  double flops;
  int64_t comm_bytes[LOOM_OP_COUNT]; /* bytes it sends, by comm op */
  int64_t input_bytes;               /* pieces of the graph's inputs it holds */
  int64_t peak_bytes;                /* its values' peak, in execution order */
  int32_t n_nodes, n_comms;
} loom_plan_device_stats;

typedef struct loom_plan_program {
  loom_ctx *ctx;
  int32_t n_devices;
  loom_graph *global;
  int32_t *node_device; /* per global node: its device; -1 for a comm op
                           (it spans its group) or the host's assembly */
  int32_t *value_device; /* per global value: where it lives (-1: host) */
  int32_t *node_subop;   /* per global node: the sub-op it computes, or -1 */
  /* groups: members of group g are group_ranks[group_start[g] ..
   * group_start[g+1]), in member order */
  int32_t n_groups;
  int32_t *group_start, *group_ranks;
  loom_plan_comm *comms;
  int32_t n_comms;
  /* per device: its global nodes in execution order (a comm op is in the
   * list of each of its members) */
  int32_t *order_start, *order_nodes;
  loom_plan_io *ins, *outs;
  int32_t n_ins, n_outs;
  int32_t *output_tied; /* per graph output: the input it updates (plan.h), -1 */
  loom_plan_device_stats *stats; /* n_devices */
} loom_plan_program;

typedef struct loom_plan_lower_options {
  loom_comm_model comm;  /* costs of the communication choices */
  int64_t memory_limit;  /* bytes per device, 0: none */
  int64_t bucket_bytes;  /* gradient buckets: all-reduces whose results are read
                            later coalesced up to this many bytes per member
                            (<= 0: none, one all-reduce per gradient; off by
                            default: docs/PARALLEL.md, "Gradient buckets") */
} loom_plan_lower_options;

/* Validates and lowers p. A broken plan fails with a message naming the
 * sub-op, the device and the dependency. opts may be NULL (defaults). */
loom_status loom_plan_lower(const loom_plan *p, const loom_plan_lower_options *opts,
                            loom_plan_program **out);
void loom_plan_program_free(loom_plan_program *pp);

/* The FLOPs of one node as the per-device stats and the simulator count
 * them: 2 m n k for a matmul, the QK^T and PV products of attention
 * (twice that backward), one per output element for other compute, none
 * for layout and comm ops. */
double loom_plan_node_flops(const loom_graph *g, const loom_node *n);

/* Device d's program. io (may be NULL) gets, per input of the device graph,
 * the index into pp->ins, and per output the index into pp->outs (or -1 for
 * a comm op's completion token, which the runner ignores); both malloc'ed. */
loom_status loom_plan_device_graph(const loom_plan_program *pp, int32_t d, loom_graph **out,
                                   int32_t **in_map, int32_t **out_map);

/* Checks per-device programs against each other: every comm seq has one
 * kind and group on all its members, in the same order on each, and each
 * member's piece has the shape the others expect. Used on the programs of
 * loom_plan_device_graph (a test of the matching, and what ranks check
 * across processes before the first step). */
loom_status loom_plan_check_matching(loom_ctx *ctx, int32_t n_devices, loom_graph *const *graphs);

#endif
