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
 *
 * Comm ops overlap computation by default: the device's program runs them
 * in order on a comm stream of the runner's (docs/PARALLEL.md,
 * "Overlapping communication"), unless the communicator allows no thread
 * but its own (loom_comm.threads_ok) or overlap is switched off. A step
 * returns only when all of its communication is done, so the calls here
 * (gathers) and the caller's own (barriers) never meet the stream's.
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

/* Switches overlapping comm ops with computation on (the default) or off
 * (each blocks the device's thread) for the steps that follow; on has no
 * effect when the communicator is not threads_ok. */
void loom_plan_runner_set_comm_overlap(loom_plan_runner *r, bool on);
bool loom_plan_runner_comm_overlap(const loom_plan_runner *r);
/* Comm ops run on the comm stream so far. */
int64_t loom_plan_runner_comm_tasks(const loom_plan_runner *r);

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
