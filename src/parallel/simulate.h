/*
 * The cluster simulator: how long one step of a lowered plan (lower.h)
 * takes on a cluster (perf/cluster.h), device by device, without running
 * it. It walks every device's program in its execution order, as the
 * runtime does, timing
 *
 *   - compute nodes by a roofline: FLOPs over the device's rate (GEMMs and
 *     attention at the chosen precision, times an efficiency that falls
 *     for skinny shapes), or bytes moved over its memory bandwidth,
 *     whichever is longer;
 *   - comm ops by the ring algorithms the collectives use (comm/comm.c,
 *     and NCCL's rings): steps x latency + the bytes each member sends
 *     over the slowest link the ring crosses (intra-node, or each
 *     device's share of its node's NICs when the group spans nodes);
 *
 * a comm op starts when every member has reached it, and either blocks
 * its members (as Loom's blocking comm does) or, with overlap, runs on
 * each member's comm stream while compute goes on until something reads
 * its result. Idle time (waiting for peers: the pipeline bubble, a slow
 * member) is what is left of the step. docs/SIMULATOR.md describes the
 * model and its constants.
 */
#ifndef LOOM_PARALLEL_SIMULATE_H
#define LOOM_PARALLEL_SIMULATE_H

#include "parallel/lower.h"
#include "perf/cluster.h"

typedef struct loom_sim_options {
  const loom_cluster *cluster;
  loom_precision precision; /* GEMMs and attention (others at f32 rate) */
  bool overlap;             /* comm on its own stream (else it blocks) */
  double gemm_efficiency;   /* of the peak on large GEMMs; 0: 0.75 */
  double memory_efficiency; /* of the memory bandwidth; 0: 0.8 */
  double element_bytes;     /* bytes per element moved; 0: the graph's dtypes */
  /* > 0: the devices are ranks on one node sharing this many cores
   * (mpirun --oversubscribe; a rank's comm stream is a thread of its own).
   * Every running task (a compute node, a comm op's member) wants a core
   * and a rank polling for its peers cluster->wait_share of one; when they
   * want more than there are, all run at cores / demand of their speed. */
  int32_t cores;
} loom_sim_options;

/* One node's run on one device (a comm op: on each member). */
typedef struct loom_sim_event {
  int32_t node;          /* global node */
  double start_s, end_s; /* from the step's start */
  bool comm;
} loom_sim_event;

/* What a device holds at its peak, by role (Loom's training-graph
 * conventions, model/gpt.h). Two kinds of memory:
 *
 *   held: the caller's pieces of the graph's inputs on the device (the
 *     plan runner's tensors, pp->ins), resident for the whole step
 *     whether or not the program reads them through a node: parameters,
 *     optimizer state (the AdamW moments, "adam.*") and the other
 *     inputs (the batch, step, learning rate);
 *   the runtime's arena at the peak: the updates (the new parameters and
 *     moments adamw writes, computed there and copied over the held
 *     pieces after the run), gradients (what adamw reads as one),
 *     communication buffers (what comm ops deliver, gradients aside) and
 *     activations (the rest: forward values kept for the backward,
 *     temporaries). */
typedef struct loom_sim_memory {
  int64_t params, optimizer, inputs;                     /* held */
  int64_t updates, grads, comm_buffers, activations;     /* arena, at the peak */
} loom_sim_memory;

typedef struct loom_sim_device {
  double compute_s; /* busy computing */
  double comm_s;    /* comm that held the device (blocking), or in flight (overlap) */
  double idle_s;    /* waiting for peers: the step less compute and blocked comm */
  double end_s;     /* when its last node ends */
  int64_t peak_bytes;      /* held + the arena's peak */
  loom_sim_memory at_peak; /* sums to peak_bytes */
  /* its events in execution order: events[event_start[d] .. event_start[d + 1]) */
} loom_sim_device;

typedef struct loom_sim_result {
  double step_s;  /* the last device's end */
  double bubble;  /* mean idle fraction of the step over the devices */
  int32_t n_devices;
  loom_sim_device *devices;
  int32_t *event_start; /* n_devices + 1 */
  loom_sim_event *events;
} loom_sim_result;

/* Simulates one step of pp. Errors: no cluster, a plan with more devices
 * per node than the cluster's node holds is fine (devices fill nodes in
 * order: device d on node d / node.devices); a cluster with max_nodes
 * too few for the plan's devices is an error. */
loom_status loom_plan_simulate(const loom_plan_program *pp, const loom_sim_options *o,
                               loom_sim_result *out);
void loom_sim_result_free(loom_sim_result *r);

/* Seconds one compute node n of graph g takes on a device of o->cluster
 * (the per-node model above; 0 for views). What composed estimates
 * (estimate.h) build a layer's time from. */
double loom_sim_node_seconds(const loom_graph *g, const loom_node *n, const loom_sim_options *o);
/* The same for every node of a one-device graph, in node order, with its
 * stitching: the fusible nodes between two non-fusible ones that a value
 * joins are one kernel, which moves only what crosses its edge and pays
 * one launch (node_s: g->n_nodes entries). */
loom_status loom_sim_graph_seconds(loom_ctx *ctx, const loom_graph *g, const loom_sim_options *o,
                                   double *node_s);

#endif
