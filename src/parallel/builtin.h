/*
 * Built-in plans: short functions over the primitives (plan.h), one per
 * strategy, none with execution code of its own. Each works on any
 * training graph that follows Loom's conventions (model/gpt.h): the batch
 * is the leading dim of the integer inputs, and output "new.X" is the next
 * value of input X (training state).
 *
 * A spec names the strategies and their degrees, joined by 'x':
 *   dp2, tp4, dp2xtp2, zero2x... (see loom_plan_builtin_help)
 * The product of the degrees must be the device count. Devices form a
 * row-major mesh over the strategies in the order written: in dp2xtp2,
 * devices 0,1 are one tensor-parallel group and 0,2 one data-parallel one.
 */
#ifndef LOOM_PARALLEL_BUILTIN_H
#define LOOM_PARALLEL_BUILTIN_H

#include "parallel/plan.h"

/* Builds the plan spec names over g for n_devices. */
loom_status loom_plan_builtin(loom_ctx *ctx, const loom_graph *g, const char *spec,
                              int32_t n_devices, loom_plan **out);
/* True if spec parses as a built-in spec (it may still not fit a graph). */
bool loom_plan_builtin_known(const char *spec);
/* One line per strategy, for --help. */
const char *loom_plan_builtin_help(void);
/* Ties every output "new.X" to input X (what the trainer updates). */
loom_status loom_plan_tie_by_name(loom_plan *p);

#endif
