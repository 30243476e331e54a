/*
 * Running one device of a lowered plan (lower.h): its program as an
 * ordinary session on a backend (stitched kernels as on one device), its
 * comm ops through a communicator (in-process threads or MPI), and its
 * pieces of the graph's inputs and outputs.
 *
 * The host side speaks in whole tensors: every rank holds the whole of the
 * inputs that are not training state (a batch), and slices its pieces.
 * Training state (an input some output is tied to, plan.h) lives only as
 * the device's pieces between steps: each step's tied output pieces become
 * the next step's input pieces, in place. Gathers make whole tensors again
 * (for a checkpoint, for inference, for checking against one device); they
 * are collective: every rank calls them in the same order.
 */
#ifndef LOOM_RUNTIME_PLAN_RUNNER_H
#define LOOM_RUNTIME_PLAN_RUNNER_H

#include "comm/comm.h"
#include "parallel/lower.h"

typedef struct loom_plan_runner loom_plan_runner;

/* Device comm->rank of pp (pp must outlive the runner; comm->size must be
 * pp->n_devices). so: the session options of the device's program. */
loom_status loom_plan_runner_new(loom_ctx *ctx, const loom_plan_program *pp, loom_comm *comm,
                                 const loom_session_options *so, loom_plan_runner **out);
void loom_plan_runner_free(loom_plan_runner *r);
/* The device's session (for its stats) and program. */
const loom_session *loom_plan_runner_session(const loom_plan_runner *r);
const loom_graph *loom_plan_runner_graph(const loom_plan_runner *r);

/* Sets this device's pieces of every graph input from whole tensors
 * (whole[i] for input i; NULL: leave that input's pieces as they are). */
loom_status loom_plan_runner_load(loom_plan_runner *r, const loom_tensor *const *whole);
/* One step: the pieces of untied inputs are sliced from whole[] first
 * (NULL entries keep their pieces), then the program runs; tied outputs
 * update their inputs' pieces. */
loom_status loom_plan_runner_step(loom_plan_runner *r, const loom_tensor *const *whole);
/* Collective: graph input i (its current pieces) into whole on every rank. */
loom_status loom_plan_runner_gather_input(loom_plan_runner *r, int32_t input, loom_tensor *whole);
/* Collective: graph output o of the last step into whole on every rank. */
loom_status loom_plan_runner_gather_output(loom_plan_runner *r, int32_t output,
                                           loom_tensor *whole);

#endif
