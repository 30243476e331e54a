/*
 * Measuring the alpha-beta model (comm_model.h) with a ping-pong between
 * ranks 0 and 1: round trips of a small message give the latency, round
 * trips of a large one the bandwidth. Medians, so one preempted round trip
 * (two cores shared by several processes) does not skew the model.
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
#define PROBE_LARGE_BYTES (4 << 20)
#define PROBE_SMALL_REPS 15
#define PROBE_LARGE_REPS 3

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median round trip of `bytes` between ranks 0 and 1, after one warm-up. */
static loom_status round_trips(loom_comm *c, loom_ctx *ctx, void *buf, int64_t bytes, int32_t reps,
                               double *median) {
  double t[PROBE_SMALL_REPS + 1];
  int32_t peer = 1 - c->rank;
  for (int32_t r = 0; r <= reps; r++) {
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
  qsort(t + 1, (size_t)reps, sizeof *t, cmp_double); /* t[0]: the warm-up */
  *median = t[1 + reps / 2];
  return LOOM_STATUS_OK;
}

loom_status loom_comm_model_measure(struct loom_comm *c, loom_ctx *ctx, loom_comm_model *out) {
  if (!c || !out)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm model: NULL communicator or model");
  *out = loom_comm_model_default();
  if (c->size < 2) return LOOM_STATUS_OK;
  double model[2] = {0, 0}; /* latency, bandwidth: rank 0's, for everyone */
  if (c->rank <= 1) {
    void *buf = loom_calloc(ctx, 1, PROBE_LARGE_BYTES);
    if (!buf) return LOOM_STATUS_OUT_OF_MEMORY;
    double small = 0, large = 0;
    loom_status st = round_trips(c, ctx, buf, PROBE_SMALL_BYTES, PROBE_SMALL_REPS, &small);
    if (!st) st = round_trips(c, ctx, buf, PROBE_LARGE_BYTES, PROBE_LARGE_REPS, &large);
    free(buf);
    if (st) {
      loom_error_prefix(ctx, "comm model");
      return st;
    }
    double latency = small / 2, one_way = large / 2;
    /* a large message faster than the latency model allows: the whole time
     * is transfer (shared memory on a quiet host) */
    double transfer = one_way - latency > one_way / 2 ? one_way - latency : one_way;
    model[0] = latency > 0 ? latency : 1e-9;
    model[1] = (double)PROBE_LARGE_BYTES / (transfer > 0 ? transfer : 1e-9);
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
