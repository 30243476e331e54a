/*
 * Measuring the alpha-beta model (comm_model.h) with a ping-pong between
 * ranks 0 and 1: round trips of a small message give the latency, round
 * trips of a ladder of sizes the plans send (64 KiB to 4 MiB: a layer's
 * gradients, a micro-batch's activations) the bandwidth, and exchanges of
 * the same sizes (both ranks sending at once, as Loom's collectives do)
 * the bandwidth a collective gets. Every size is
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

/* reps exchanges of `bytes` between ranks 0 and 1, each sending to the
 * other while receiving from it, as Loom's collectives move their blocks
 * (comm/comm.c), waited for as they wait; appended to t. The probe runs
 * before any other traffic, so a user tag is free. */
#define EXCHANGE_TAG LOOM_COMM_TAG_MAX
static loom_status exchanges(loom_comm *c, loom_ctx *ctx, void *out, void *in, int64_t bytes,
                             int32_t reps, double *t) {
  int32_t peer = 1 - c->rank;
  for (int32_t r = 0; r < reps; r++) {
    loom_comm_request *rq = NULL, *sq = NULL;
    double t0 = loom_now_s();
    LOOM_TRY(loom_comm_irecv(c, ctx, in, bytes, LOOM_DTYPE_U8, peer, EXCHANGE_TAG, &rq));
    loom_status st = loom_comm_isend(c, ctx, out, bytes, LOOM_DTYPE_U8, peer, EXCHANGE_TAG, &sq);
    loom_status sr = loom_comm_wait(c, ctx, rq);
    if (!st) st = loom_comm_wait(c, ctx, sq);
    LOOM_TRY(sr);
    LOOM_TRY(st);
    t[r] = loom_now_s() - t0;
  }
  return LOOM_STATUS_OK;
}

/* reps all-reduces of `bytes` of f32 over ranks 0 and 1 as the device op
 * runs one (ops/comm_ops.c: the input copied into the output, then
 * comm.c's reduce-scatter and all-gather phases); appended to t. */
static loom_status all_reduces(loom_comm *c, loom_ctx *ctx, const void *in, void *out,
                               int64_t bytes, int32_t reps, int64_t *seq, double *t) {
  static const int32_t pair[2] = {0, 1};
  for (int32_t r = 0; r < reps; r++) {
    double t0 = loom_now_s();
    memcpy(out, in, (size_t)bytes);
    LOOM_TRY(loom_comm_group_all_reduce(c, ctx, 2, pair, (*seq)++, out, bytes / 4, LOOM_DTYPE_F32,
                                        LOOM_COMM_SUM));
    t[r] = loom_now_s() - t0;
  }
  return LOOM_STATUS_OK;
}

/* The rate of the CPU's own copies and reductions around a collective
 * (what an all-reduce of 2 moves besides its messages: 6.5 times its
 * tensor, docs/SIMULATOR.md): per rung, those bytes over the all-reduce's
 * time less its two phases' latency and its exchange; the median over
 * rungs (0 where nothing is left: copies too fast to tell). */
static double fit_copy_rate(const double *ar_s, double latency, double exchange_Bps) {
  double rate[PROBE_RUNGS];
  for (int32_t i = 0; i < PROBE_RUNGS; i++) {
    double bytes = (double)((int64_t)PROBE_FIRST_BYTES << (2 * i));
    double left = ar_s[i] - 2 * latency - bytes / exchange_Bps;
    rate[i] = left > 0.1 * ar_s[i] ? 6.5 * bytes / left : 0;
  }
  return median_of(rate, PROBE_RUNGS);
}

/* A bandwidth from the median times of the rungs: per rung its bytes over
 * its time less the latency (all of it when the latency would take more
 * than half: a quiet host's shared memory); the median over rungs. */
static double fit_bandwidth(const double *rung_s, double latency) {
  double bw[PROBE_RUNGS];
  for (int32_t i = 0; i < PROBE_RUNGS; i++) {
    double bytes = (double)((int64_t)PROBE_FIRST_BYTES << (2 * i)), t = rung_s[i];
    double transfer = t - latency > t / 2 ? t - latency : t;
    bw[i] = bytes / (transfer > 0 ? transfer : 1e-9);
  }
  return median_of(bw, PROBE_RUNGS);
}

/* model: latency (half the small round trip), the ping-pong's bandwidth
 * (half a round trip per message), the exchange's, and the rate of a
 * collective's copies. */
static loom_status probe(loom_comm *c, loom_ctx *ctx, double model[4]) {
  char *buf = loom_calloc(ctx, 2, PROBE_LARGE_BYTES);
  if (!buf) return LOOM_STATUS_OUT_OF_MEMORY;
  double small[PROBE_MAX_TRIPS], rung[PROBE_RUNGS][PROBE_MAX_TRIPS], warm[1];
  double swap[PROBE_RUNGS][PROBE_MAX_TRIPS], reduce[PROBE_RUNGS][PROBE_MAX_TRIPS];
  int64_t seq = 0;
  loom_status st = round_trips(c, ctx, buf, PROBE_LARGE_BYTES, 1, warm); /* pages, paths */
  if (!st) st = exchanges(c, ctx, buf, buf + PROBE_LARGE_BYTES, PROBE_LARGE_BYTES, 1, warm);
  if (!st) st = all_reduces(c, ctx, buf, buf + PROBE_LARGE_BYTES, PROBE_LARGE_BYTES, 1, &seq, warm);
  for (int32_t r = 0; !st && r < PROBE_ROUNDS; r++) {
    st = round_trips(c, ctx, buf, PROBE_SMALL_BYTES, PROBE_SMALL_REPS,
                     small + r * PROBE_SMALL_REPS);
    for (int32_t i = 0; !st && i < PROBE_RUNGS; i++) {
      int64_t bytes = (int64_t)PROBE_FIRST_BYTES << (2 * i);
      st = round_trips(c, ctx, buf, bytes, PROBE_LARGE_REPS, rung[i] + r * PROBE_LARGE_REPS);
      if (!st)
        st = exchanges(c, ctx, buf, buf + PROBE_LARGE_BYTES, bytes, PROBE_LARGE_REPS,
                       swap[i] + r * PROBE_LARGE_REPS);
      if (!st)
        st = all_reduces(c, ctx, buf, buf + PROBE_LARGE_BYTES, bytes, PROBE_LARGE_REPS, &seq,
                         reduce[i] + r * PROBE_LARGE_REPS);
    }
  }
  free(buf);
  if (st) return st;
  double one_way[PROBE_RUNGS], both[PROBE_RUNGS], ar[PROBE_RUNGS];
  for (int32_t i = 0; i < PROBE_RUNGS; i++) {
    one_way[i] = median_of(rung[i], PROBE_ROUNDS * PROBE_LARGE_REPS) / 2;
    both[i] = median_of(swap[i], PROBE_ROUNDS * PROBE_LARGE_REPS);
    ar[i] = median_of(reduce[i], PROBE_ROUNDS * PROBE_LARGE_REPS);
  }
  double lat = median_of(small, PROBE_ROUNDS * PROBE_SMALL_REPS) / 2;
  model[0] = lat > 0 ? lat : 1e-9;
  model[1] = fit_bandwidth(one_way, model[0]);
  model[2] = fit_bandwidth(both, model[0]);
  model[3] = fit_copy_rate(ar, model[0], model[2]);
  return LOOM_STATUS_OK;
}

loom_status loom_comm_model_measure(struct loom_comm *c, loom_ctx *ctx, loom_comm_model *out) {
  if (!c || !out)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm model: NULL communicator or model");
  *out = loom_comm_model_default();
  if (c->size < 2) return LOOM_STATUS_OK;
  double model[4] = {0, 0, 0, 0}; /* latency, bandwidths, copies: rank 0's, for everyone */
  if (c->rank <= 1) {
    loom_status st = probe(c, ctx, model);
    if (st) {
      loom_error_prefix(ctx, "comm model");
      return st;
    }
  }
  loom_status st = loom_comm_broadcast(c, ctx, model, 4, LOOM_DTYPE_F64, 0);
  if (st) {
    loom_error_prefix(ctx, "comm model");
    return st;
  }
  out->latency_s = model[0];
  out->bandwidth_Bps = model[1];
  out->exchange_Bps = model[2];
  out->copy_Bps = model[3];
  out->measured = true;
  return LOOM_STATUS_OK;
}

/* The profile's keys for a kind of communicator. */
static bool model_keys(const char *kind, char *lat, char *bw, char *ex, char *cp, size_t n) {
  int a = snprintf(lat, n, "comm_%s_latency_s", kind), b = snprintf(bw, n, "comm_%s_bytes_per_s", kind);
  int e = snprintf(ex, n, "comm_%s_exchange_bytes_per_s", kind);
  int k = snprintf(cp, n, "comm_%s_copy_bytes_per_s", kind);
  return a > 0 && (size_t)a < n && b > 0 && (size_t)b < n && e > 0 && (size_t)e < n && k > 0 &&
         (size_t)k < n;
}

/* Sane values only: a hand-edited or damaged profile gives the defaults
 * (the exchange's bandwidth alone: 0, unknown). */
static bool kept_model(const char *kind, loom_comm_model *out) {
  char lat[96], bw[96], ex[96], cp[96];
  double l = 0, b = 0, e = 0, k = 0;
  if (!kind || !model_keys(kind, lat, bw, ex, cp, sizeof lat) || !loom_profile_get(lat, &l) ||
      !loom_profile_get(bw, &b) || !(l > 0 && l < 1.0) || !(b > 1e3 && b < 1e15))
    return false;
  if (!loom_profile_get(ex, &e) || !(e > 1e3 && e < 1e15)) e = 0;
  if (!loom_profile_get(cp, &k) || !(k > 1e3 && k < 1e15)) k = 0;
  *out = (loom_comm_model){l, b, true, e, k};
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
  double have[5] = {0, 0, 0, 0, 0};
  /* LOOM_COMM_REMEASURE=1 asks for today's link: what a first run kept
   * may have been measured on a machine busy with other work */
  const char *again = getenv("LOOM_COMM_REMEASURE");
  remeasure |= again && strcmp(again, "1") == 0;
  if (c->rank == 0 && !remeasure && kept_model(kind, &kept))
    have[0] = 1, have[1] = kept.latency_s, have[2] = kept.bandwidth_Bps,
    have[3] = kept.exchange_Bps, have[4] = kept.copy_Bps;
  loom_status st = loom_comm_broadcast(c, ctx, have, 5, LOOM_DTYPE_F64, 0);
  if (st) {
    loom_error_prefix(ctx, "comm model");
    return st;
  }
  if (have[0] == 1) {
    *out = (loom_comm_model){have[1], have[2], true, have[3], have[4]};
    return LOOM_STATUS_OK;
  }
  LOOM_TRY(loom_comm_model_measure(c, ctx, out));
  char lat[96], bw[96], ex[96], cp[96];
  if (c->rank == 0 && model_keys(kind, lat, bw, ex, cp, sizeof lat)) {
    loom_profile_put(lat, out->latency_s);
    loom_profile_put(bw, out->bandwidth_Bps);
    if (out->exchange_Bps > 0) loom_profile_put(ex, out->exchange_Bps);
    if (out->copy_Bps > 0) loom_profile_put(cp, out->copy_Bps);
  }
  return LOOM_STATUS_OK;
}
