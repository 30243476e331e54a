/*
 * Measuring the alpha-beta model (comm_model.h) with a ping-pong between
 * ranks 0 and 1: round trips of a small message give the latency, round
 * trips of a ladder of sizes the plans send (64 KiB to 4 MiB: a layer's
 * gradients, a micro-batch's activations) the bandwidth. Every size is
 * measured in several rounds, interleaved, and the model takes medians:
 * one preempted round trip, or a burst of other work during one size (two
 * cores shared by several processes), does not move it.
 */
#include "perf/comm_model.h"

#include "comm/comm.h"
#include "core/clock.h"
#include "core/ctx.h"
#include "perf/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_SMALL_BYTES 8
/* the ladder: 64 KiB x 4^i */
#define PROBE_RUNGS 4
#define PROBE_FIRST_BYTES (64 << 10)
#define PROBE_LARGE_BYTES (PROBE_FIRST_BYTES << (2 * (PROBE_RUNGS - 1)))
/* rounds over the ladder, and round trips of each size in a round */
#define PROBE_ROUNDS 3
#define PROBE_SMALL_REPS 7
#define PROBE_LARGE_REPS 3
#define PROBE_MAX_TRIPS (PROBE_ROUNDS * PROBE_SMALL_REPS)

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median_of(double *t, int32_t n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* reps round trips of `bytes` between ranks 0 and 1, appended to t. */
static loom_status round_trips(loom_comm *c, loom_ctx *ctx, void *buf, int64_t bytes, int32_t reps,
                               double *t) {
  int32_t peer = 1 - c->rank;
  for (int32_t r = 0; r < reps; r++) {
    double t0 = loom_now_s();
    if (c->rank == 0) {
      LOOM_TRY(loom_comm_probe_send(c, ctx, buf, bytes, peer));
      LOOM_TRY(loom_comm_probe_recv(c, ctx, buf, bytes, peer));
    } else {
      LOOM_TRY(loom_comm_probe_recv(c, ctx, buf, bytes, peer));
      LOOM_TRY(loom_comm_probe_send(c, ctx, buf, bytes, peer));
    }
    t[r] = loom_now_s() - t0;
  }
  return LOOM_STATUS_OK;
}

/* The latency and the bandwidth from the medians: the latency half the
 * small round trip; per rung, its bytes over half its round trip less
 * the latency (all of it when the latency would take more than half: a
 * quiet host's shared memory), and the bandwidth the median over rungs. */
static void fit_model(double small_trip, const double *rung_trip, double *latency,
                      double *bandwidth) {
  double lat = small_trip / 2, bw[PROBE_RUNGS];
  for (int32_t i = 0; i < PROBE_RUNGS; i++) {
    double bytes = (double)((int64_t)PROBE_FIRST_BYTES << (2 * i)), one_way = rung_trip[i] / 2;
    double transfer = one_way - lat > one_way / 2 ? one_way - lat : one_way;
    bw[i] = bytes / (transfer > 0 ? transfer : 1e-9);
  }
  *latency = lat > 0 ? lat : 1e-9;
  *bandwidth = median_of(bw, PROBE_RUNGS);
}

static loom_status probe(loom_comm *c, loom_ctx *ctx, double model[2]) {
  void *buf = loom_calloc(ctx, 1, PROBE_LARGE_BYTES);
  if (!buf) return LOOM_STATUS_OUT_OF_MEMORY;
  double small[PROBE_MAX_TRIPS], rung[PROBE_RUNGS][PROBE_MAX_TRIPS], warm[1];
  loom_status st = round_trips(c, ctx, buf, PROBE_LARGE_BYTES, 1, warm); /* pages, paths */
  for (int32_t r = 0; !st && r < PROBE_ROUNDS; r++) {
    st = round_trips(c, ctx, buf, PROBE_SMALL_BYTES, PROBE_SMALL_REPS,
                     small + r * PROBE_SMALL_REPS);
    for (int32_t i = 0; !st && i < PROBE_RUNGS; i++)
      st = round_trips(c, ctx, buf, (int64_t)PROBE_FIRST_BYTES << (2 * i), PROBE_LARGE_REPS,
                       rung[i] + r * PROBE_LARGE_REPS);
  }
  free(buf);
  if (st) return st;
  double trips[PROBE_RUNGS];
  for (int32_t i = 0; i < PROBE_RUNGS; i++)
    trips[i] = median_of(rung[i], PROBE_ROUNDS * PROBE_LARGE_REPS);
  fit_model(median_of(small, PROBE_ROUNDS * PROBE_SMALL_REPS), trips, &model[0], &model[1]);
  return LOOM_STATUS_OK;
}

loom_status loom_comm_model_measure(struct loom_comm *c, loom_ctx *ctx, loom_comm_model *out) {
  if (!c || !out)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm model: NULL communicator or model");
  *out = loom_comm_model_default();
  if (c->size < 2) return LOOM_STATUS_OK;
  double model[2] = {0, 0}; /* latency, bandwidth: rank 0's, for everyone */
  if (c->rank <= 1) {
    loom_status st = probe(c, ctx, model);
    if (st) {
      loom_error_prefix(ctx, "comm model");
      return st;
    }
  }
  loom_status st = loom_comm_broadcast(c, ctx, model, 2, LOOM_DTYPE_F64, 0);
  if (st) {
    loom_error_prefix(ctx, "comm model");
    return st;
  }
  out->latency_s = model[0];
  out->bandwidth_Bps = model[1];
  out->measured = true;
  return LOOM_STATUS_OK;
}

/* The profile's keys for a kind of communicator. */
static bool model_keys(const char *kind, char *lat, char *bw, size_t n) {
  int a = snprintf(lat, n, "comm_%s_latency_s", kind), b = snprintf(bw, n, "comm_%s_bytes_per_s", kind);
  return a > 0 && (size_t)a < n && b > 0 && (size_t)b < n;
}

/* Sane values only: a hand-edited or damaged profile gives the defaults. */
static bool kept_model(const char *kind, loom_comm_model *out) {
  char lat[96], bw[96];
  double l = 0, b = 0;
  if (!kind || !model_keys(kind, lat, bw, sizeof lat) || !loom_profile_get(lat, &l) ||
      !loom_profile_get(bw, &b) || !(l > 0 && l < 1.0) || !(b > 1e3 && b < 1e15))
    return false;
  *out = (loom_comm_model){l, b, true};
  return true;
}

loom_comm_model loom_comm_model_kept(const char *kind) {
  loom_comm_model m = loom_comm_model_default();
  (void)kept_model(kind, &m);
  return m;
}

loom_status loom_comm_model_get(struct loom_comm *c, loom_ctx *ctx, bool remeasure,
                                loom_comm_model *out) {
  if (!c || !out)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm model: NULL communicator or model");
  const char *kind = c->iface->name;
  *out = loom_comm_model_kept(kind);
  if (c->size < 2) return LOOM_STATUS_OK;
  /* rank 0 says whether the profile has a model, and which */
  loom_comm_model kept = loom_comm_model_default();
  double have[3] = {0, 0, 0};
  /* LOOM_COMM_REMEASURE=1 asks for today's link: what a first run kept
   * may have been measured on a machine busy with other work */
  const char *again = getenv("LOOM_COMM_REMEASURE");
  remeasure |= again && strcmp(again, "1") == 0;
  if (c->rank == 0 && !remeasure && kept_model(kind, &kept))
    have[0] = 1, have[1] = kept.latency_s, have[2] = kept.bandwidth_Bps;
  loom_status st = loom_comm_broadcast(c, ctx, have, 3, LOOM_DTYPE_F64, 0);
  if (st) {
    loom_error_prefix(ctx, "comm model");
    return st;
  }
  if (have[0] == 1) {
    *out = (loom_comm_model){have[1], have[2], true};
    return LOOM_STATUS_OK;
  }
  LOOM_TRY(loom_comm_model_measure(c, ctx, out));
  char lat[96], bw[96];
  if (c->rank == 0 && model_keys(kind, lat, bw, sizeof lat)) {
    loom_profile_put(lat, out->latency_s);
    loom_profile_put(bw, out->bandwidth_Bps);
  }
  return LOOM_STATUS_OK;
}
