/*
 * The order each device's program runs in. The session compiles a
 * device's program with the fusion plan's execution order
 * (fusion/plan_merge.c, unit_key): comm ops stay where the plan put them
 * and nothing crosses one, but between two comm ops whatever reads a
 * collective's output (not a transfer's) waits until nothing else is
 * ready, so the collective overlaps the compute that does not need it.
 * The plan's own order puts such a reader right after its collective (a
 * data-parallel loss's mean after the all-reduce of its sum): walked as
 * written, the simulator stalled a rank there that the runtime keeps
 * busy (docs/SIMULATOR.md, "Run order").
 */
#ifndef LOOM_PARALLEL_SIMULATE_ORDER_H
#define LOOM_PARALLEL_SIMULATE_ORDER_H

#include "parallel/lower.h"

/* order: pp->order_start[pp->n_devices] entries, each device's range of
 * pp->order_nodes reordered as the runtime runs it; canon (may be NULL):
 * per value, the value it is after the runtime's merges
 * (simulate_merge.h). */
loom_status loom_sim_runtime_order(const loom_plan_program *pp, const int32_t *canon,
                                   int32_t *order);

#endif
