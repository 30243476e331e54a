/*
 * The communication cost model: a message of b bytes between two ranks
 * takes latency + b / bandwidth seconds (Hockney's alpha-beta model). The
 * lowering of a parallel plan (parallel/lower.h) uses it to choose among
 * ways of moving a value's pieces; `loom plan` and the simulator use it to
 * time them. Measured on this machine's communicator and kept in the
 * machine profile (perf/profile.h); the defaults are those of shared
 * memory on one host.
 */
#ifndef LOOM_PERF_COMM_MODEL_H
#define LOOM_PERF_COMM_MODEL_H

#include "loom.h"

#include <stdbool.h>
#include <stdint.h>

struct loom_comm;

typedef struct loom_comm_model {
  double latency_s;     /* per message */
  double bandwidth_Bps; /* bytes per second, one direction */
  bool measured;        /* false: the defaults below; true: measured or kept */
  /* bytes per second each way while two ranks send to each other at once
   * (a collective's blocks; 0: unknown). The simulator's link for Loom's
   * direct collectives; plans are lowered with bandwidth_Bps. */
  double exchange_Bps;
  /* bytes per second of the CPU's own copies and reductions around Loom's
   * collectives, from a measured all-reduce (0: unknown) */
  double copy_Bps;
} loom_comm_model;

/* 5 us and 5 GB/s: Open MPI's shared-memory transport on one host. */
static inline loom_comm_model loom_comm_model_default(void) {
  loom_comm_model m = {5e-6, 5e9, false, 0, 0};
  return m;
}

/* Seconds for `messages` messages carrying `bytes` in all, one after
 * another on one rank's link. */
static inline double loom_comm_model_time(const loom_comm_model *m, double bytes,
                                          int32_t messages) {
  return (double)messages * m->latency_s + bytes / m->bandwidth_Bps;
}

/*
 * Measures the model on communicator c (perf/comm_model.c): ranks 0 and 1
 * ping-pong small messages (latency: half the median round trip) and
 * messages of 64 KiB, 256 KiB, 1 MiB and 4 MiB, the sizes plans send
 * (per size the bytes over half the median round trip, less the latency;
 * the bandwidth the median over sizes) and exchanges of those sizes (both
 * sending at once: exchange_Bps, per size the bytes over the median
 * exchange less the latency) and all-reduces of those sizes as the device
 * op runs them (copy_Bps: the 6.5 tensors of copies and reductions an
 * all-reduce of two makes over what is left of its time after the
 * latency and the exchange), in three interleaved rounds;
 * rank 0's result goes to every rank, so all get the same model. Every
 * rank calls it; the others only take part in the broadcast. One rank:
 * the defaults (measured false). About 100 ms on one host.
 */
loom_status loom_comm_model_measure(struct loom_comm *c, loom_ctx *ctx, loom_comm_model *out);

/*
 * The model of communicator c as the machine profile keeps it
 * (perf/profile.h: comm_<kind>_latency_s, comm_<kind>_bytes_per_s,
 * comm_<kind>_exchange_bytes_per_s and comm_<kind>_copy_bytes_per_s, kind
 * the communicator's name, e.g. "mpi"), measured with
 * loom_comm_model_measure and recorded there when the profile has none or
 * when remeasure is set (or the environment has LOOM_COMM_REMEASURE=1),
 * so every run on this machine lowers a plan with the same costs. Collective: rank 0 reads and writes the profile, and its
 * model goes to every rank. One rank: the kept model, else the defaults.
 */
loom_status loom_comm_model_get(struct loom_comm *c, loom_ctx *ctx, bool remeasure,
                                loom_comm_model *out);
/* The model kept for communicators of kind (e.g. "mpi"), or the defaults
 * when the profile has none. For planning without a communicator. */
loom_comm_model loom_comm_model_kept(const char *kind);

#endif
