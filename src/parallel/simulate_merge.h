/*
 * What the runtime's simplify pass (passes/simplify.c) merges on a
 * device: the session compiles each device's program after common-
 * subexpression elimination, so a node identical to an earlier one on
 * the same device (same op, attributes, recomputation mark and, after
 * merging, inputs) runs once; a +recompute copy (loom_node.copy) runs
 * again. The simulator times the program that runs, so it charges such a
 * node nothing (docs/SIMULATOR.md, "Merged nodes").
 */
#ifndef LOOM_PARALLEL_SIMULATE_MERGE_H
#define LOOM_PARALLEL_SIMULATE_MERGE_H

#include "parallel/lower.h"

/* merged: pp->global->n_nodes entries, set true for every compute node
 * of a device's order that an earlier node of that order computes
 * already, or whose results nothing that runs on the device reads nor
 * its outputs (dead: the runtime's simplify drops it); comm ops and the
 * device's pieces of inputs never are; canon:
 * pp->global->n_values entries, each value's first computation (itself
 * unless a merged node makes it). */
loom_status loom_sim_merged_nodes(const loom_plan_program *pp, bool *merged, int32_t *canon);

#endif
