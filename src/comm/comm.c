/*
 * The communicator layer every implementation shares: argument checks,
 * timeouts, and the collectives on top of point-to-point messages, with
 * reductions in rank order so that results are the same bits everywhere
 * (comm.h).
 */
#include "comm/comm.h"

#include "core/clock.h"
#include "core/ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void loom_comm_poll_pause(int32_t spins) {
  if (spins > 1000) nanosleep(&(struct timespec){0, 50000}, NULL);
}

double loom_comm_spin_seconds(size_t bytes) { return 1e-4 + (double)bytes / 1e9; }

/* Tags of the collectives, above the user's (comm.h). */
enum {
  TAG_BARRIER = LOOM_COMM_TAG_MAX + 1,
  TAG_BROADCAST,
  TAG_ALL_GATHER,
  TAG_REDUCE_SCATTER,
  TAG_ALL_TO_ALL,
  TAG_PROBE, /* the cost model's ping-pong (perf/comm_model.c) */
};
_Static_assert(TAG_PROBE < LOOM_COMM_SEQ_TAG_BASE, "the collectives' tags run into the seqs'");

const char *loom_comm_reduce_name(loom_comm_reduce op) {
  switch (op) {
  case LOOM_COMM_SUM: return "sum";
  case LOOM_COMM_MAX: return "max";
  case LOOM_COMM_MIN: return "min";
  }
  return "?";
}

double loom_comm_timeout_from_env(void) {
  const char *s = getenv("LOOM_COMM_TIMEOUT");
  if (s && *s) {
    char *end = NULL;
    double v = strtod(s, &end);
    if (end && *end == '\0' && v > 0 && v < 1e9) return v;
  }
  return LOOM_COMM_TIMEOUT_DEFAULT_S;
}

void loom_comm_free(loom_comm *c) {
  if (!c) return;
  if (c->iface && c->iface->free) c->iface->free(c->context);
  free(c);
}

loom_status loom_comm_set_timeout(loom_comm *c, loom_ctx *ctx, double seconds) {
  if (!c || !(seconds > 0 && seconds < 1e9))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: timeout must be > 0 seconds");
  c->timeout_s = seconds;
  return LOOM_STATUS_OK;
}

void loom_comm_abort(loom_comm *c, const char *why) {
  if (c && c->iface->abort) c->iface->abort(c->context, why ? why : "aborted");
}

/* "comm inproc rank 1: OP: " before the implementation's message (OP NULL
 * for point to point, whose message already says "recv from rank 0"). */
static loom_status comm_fail(loom_comm *c, loom_ctx *ctx, loom_status s, const char *what) {
  if (what) loom_error_prefix(ctx, "comm %s rank %d: %s", c->iface->name, (int)c->rank, what);
  else loom_error_prefix(ctx, "comm %s rank %d", c->iface->name, (int)c->rank);
  return s;
}

static const char *dtype_label(loom_dtype dt) {
  const char *name = loom_dtype_name(dt);
  return name ? name : "an unknown dtype";
}

static loom_status check_peer(loom_comm *c, loom_ctx *ctx, int32_t peer, const char *what) {
  if (peer < 0 || peer >= c->size || peer == c->rank)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "comm %s rank %d: %s: peer %d is not another rank of 0..%d",
                      c->iface->name, (int)c->rank, what, (int)peer, (int)c->size - 1);
  return LOOM_STATUS_OK;
}

static loom_status check_count(loom_comm *c, loom_ctx *ctx, int64_t count, loom_dtype dt,
                               const void *buf, const char *what, size_t *bytes) {
  size_t es = loom_dtype_size(dt);
  if (es == 0 || count < 0 || (uint64_t)count > (uint64_t)INT32_MAX / es ||
      (count > 0 && !buf))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "comm %s rank %d: %s: bad buffer (%lld elements of %s; at most "
                      "2^31 bytes per message)",
                      c->iface->name, (int)c->rank, what, (long long)count, dtype_label(dt));
  *bytes = (size_t)count * es;
  return LOOM_STATUS_OK;
}

static double deadline(const loom_comm *c) { return loom_now_s() + c->timeout_s; }

/* Waits for reqs[0..n) by one deadline; on a failure still frees the rest
 * (waiting no longer) and keeps the first message. */
static loom_status wait_all(loom_comm *c, loom_ctx *ctx, loom_comm_request **reqs, int32_t n,
                            const char *what) {
  double end = deadline(c);
  loom_status first = LOOM_STATUS_OK;
  for (int32_t i = 0; i < n; i++) {
    if (!reqs[i]) continue;
    bool timed_out = false;
    loom_status s =
        c->iface->wait(c->context, first == LOOM_STATUS_OK ? ctx : NULL, reqs[i],
                       first == LOOM_STATUS_OK ? end : 0.0, &timed_out);
    reqs[i] = NULL;
    if (s != LOOM_STATUS_OK && first == LOOM_STATUS_OK) {
      first = s;
      if (timed_out && ctx) {
        char msg[LOOM_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", loom_ctx_error(ctx));
        loom_error(ctx, s, "%s after %.3g s (LOOM_COMM_TIMEOUT)", msg, c->timeout_s);
      }
      comm_fail(c, ctx, s, what);
    }
  }
  return first;
}

/* The arguments of one point-to-point message (what: "send" or "recv"). */
static loom_status check_message(loom_comm *c, loom_ctx *ctx, const void *buf, int64_t count,
                                 loom_dtype dt, int32_t peer, int32_t tag,
                                 loom_comm_request **req, const char *what, size_t *bytes) {
  if (!c || !req) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: NULL argument");
  *req = NULL;
  LOOM_TRY(check_peer(c, ctx, peer, what));
  LOOM_TRY(check_count(c, ctx, count, dt, buf, what, bytes));
  if (tag < 0 || tag > LOOM_COMM_TAG_MAX)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: %s tag %d is not in 0..%d", what,
                      (int)tag, LOOM_COMM_TAG_MAX);
  return LOOM_STATUS_OK;
}

loom_status loom_comm_isend(loom_comm *c, loom_ctx *ctx, const void *buf, int64_t count,
                            loom_dtype dt, int32_t peer, int32_t tag, loom_comm_request **req) {
  size_t bytes = 0;
  LOOM_TRY(check_message(c, ctx, buf, count, dt, peer, tag, req, "send", &bytes));
  loom_status s = c->iface->isend(c->context, ctx, buf, bytes, peer, tag, c->stream, req);
  return s == LOOM_STATUS_OK ? s : comm_fail(c, ctx, s, NULL);
}

loom_status loom_comm_irecv(loom_comm *c, loom_ctx *ctx, void *buf, int64_t count, loom_dtype dt,
                            int32_t peer, int32_t tag, loom_comm_request **req) {
  size_t bytes = 0;
  LOOM_TRY(check_message(c, ctx, buf, count, dt, peer, tag, req, "recv", &bytes));
  loom_status s = c->iface->irecv(c->context, ctx, buf, bytes, peer, tag, c->stream, req);
  return s == LOOM_STATUS_OK ? s : comm_fail(c, ctx, s, NULL);
}

loom_status loom_comm_wait(loom_comm *c, loom_ctx *ctx, loom_comm_request *req) {
  if (!c || !req) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: NULL argument");
  return wait_all(c, ctx, &req, 1, NULL);
}

loom_status loom_comm_send(loom_comm *c, loom_ctx *ctx, const void *buf, int64_t count,
                           loom_dtype dt, int32_t peer, int32_t tag) {
  loom_comm_request *req = NULL;
  LOOM_TRY(loom_comm_isend(c, ctx, buf, count, dt, peer, tag, &req));
  return wait_all(c, ctx, &req, 1, NULL);
}

loom_status loom_comm_recv(loom_comm *c, loom_ctx *ctx, void *buf, int64_t count, loom_dtype dt,
                           int32_t peer, int32_t tag) {
  loom_comm_request *req = NULL;
  LOOM_TRY(loom_comm_irecv(c, ctx, buf, count, dt, peer, tag, &req));
  return wait_all(c, ctx, &req, 1, NULL);
}

/* --- collectives ------------------------------------------------------- */

/* The ranks a collective runs over: every rank (the world collectives), or
 * a group's members in member order. Messages go to members; a group
 * operation's messages carry its own tag (from its seq). */
typedef struct group {
  const int32_t *ranks; /* NULL: the world, member m is rank m */
  int32_t n, me;        /* members; this rank's member index */
  int32_t tag;          /* -1: each world collective's own tag */
} group;

static group world_group(const loom_comm *c) {
  group gr = {NULL, c->size, c->rank, -1};
  return gr;
}

static int32_t rank_of(const group *gr, int32_t m) { return gr->ranks ? gr->ranks[m] : m; }
static int32_t tag_of(const group *gr, int32_t world_tag) {
  return gr->tag >= 0 ? gr->tag : world_tag;
}

int32_t loom_comm_seq_tag(int64_t seq) {
  int64_t m = seq % LOOM_COMM_SEQ_TAGS;
  return LOOM_COMM_SEQ_TAG_BASE + (int32_t)(m < 0 ? m + LOOM_COMM_SEQ_TAGS : m);
}

/* Checks a group's rank list (in range, distinct, this rank among them). */
static loom_status make_group(loom_comm *c, loom_ctx *ctx, int32_t n, const int32_t *ranks,
                              int64_t seq, const char *what, group *out) {
  if (!c) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: NULL communicator");
  if (n < 1 || n > c->size || !ranks)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "comm %s rank %d: %s: a group of %d ranks (the world has %d)",
                      c->iface->name, (int)c->rank, what, (int)n, (int)c->size);
  if (seq < 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm %s rank %d: %s: seq %lld < 0",
                      c->iface->name, (int)c->rank, what, (long long)seq);
  out->ranks = ranks;
  out->n = n;
  out->me = -1;
  out->tag = loom_comm_seq_tag(seq);
  for (int32_t m = 0; m < n; m++) {
    if (ranks[m] < 0 || ranks[m] >= c->size)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "comm %s rank %d: %s: group member %d is rank %d, not one of 0..%d",
                        c->iface->name, (int)c->rank, what, (int)m, (int)ranks[m],
                        (int)c->size - 1);
    for (int32_t k = 0; k < m; k++)
      if (ranks[k] == ranks[m])
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "comm %s rank %d: %s: rank %d is in the group twice",
                          c->iface->name, (int)c->rank, what, (int)ranks[m]);
    if (ranks[m] == c->rank) out->me = m;
  }
  if (out->me < 0)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "comm %s rank %d: %s: this rank is not a member of the group",
                      c->iface->name, (int)c->rank, what);
  return LOOM_STATUS_OK;
}

/* One collective's messages: at most one send and one receive per peer. */
typedef struct coll {
  loom_comm *c;
  loom_ctx *ctx;
  const group *gr;
  const char *what;
  loom_comm_request **reqs;
  int32_t n;
  loom_status status;
} coll;

static loom_status coll_begin(coll *k, loom_comm *c, loom_ctx *ctx, const group *gr,
                              const char *what) {
  memset(k, 0, sizeof *k);
  if (!c) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: NULL communicator");
  k->c = c;
  k->ctx = ctx;
  k->gr = gr;
  k->what = what;
  k->reqs = loom_calloc(ctx, 2 * (size_t)gr->n, sizeof *k->reqs);
  return k->reqs ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
}

/* Posts a message to / from member m of the group. */
static void coll_send(coll *k, const void *buf, size_t bytes, int32_t m, int32_t world_tag) {
  if (k->status != LOOM_STATUS_OK) return;
  loom_comm *c = k->c;
  k->status = c->iface->isend(c->context, k->ctx, buf, bytes, rank_of(k->gr, m),
                              tag_of(k->gr, world_tag), c->stream, &k->reqs[k->n]);
  if (k->status == LOOM_STATUS_OK) k->n++;
  else comm_fail(c, k->ctx, k->status, k->what);
}

static void coll_recv(coll *k, void *buf, size_t bytes, int32_t m, int32_t world_tag) {
  if (k->status != LOOM_STATUS_OK) return;
  loom_comm *c = k->c;
  k->status = c->iface->irecv(c->context, k->ctx, buf, bytes, rank_of(k->gr, m),
                              tag_of(k->gr, world_tag), c->stream, &k->reqs[k->n]);
  if (k->status == LOOM_STATUS_OK) k->n++;
  else comm_fail(c, k->ctx, k->status, k->what);
}

/* Waits for everything posted (also after a failed post) and frees. */
static loom_status coll_end(coll *k) {
  if (!k->reqs) return k->status;
  loom_status s = wait_all(k->c, k->status == LOOM_STATUS_OK ? k->ctx : NULL, k->reqs, k->n,
                           k->what);
  free(k->reqs);
  k->reqs = NULL;
  return k->status != LOOM_STATUS_OK ? k->status : s;
}

loom_status loom_comm_barrier(loom_comm *c, loom_ctx *ctx) {
  if (!c) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: NULL communicator");
  group gr = world_group(c);
  coll k;
  LOOM_TRY(coll_begin(&k, c, ctx, &gr, "barrier"));
  /* Everyone checks in with rank 0, then rank 0 lets everyone go. */
  if (c->rank == 0) {
    for (int32_t p = 1; p < c->size; p++) coll_recv(&k, NULL, 0, p, TAG_BARRIER);
    LOOM_TRY(coll_end(&k));
    LOOM_TRY(coll_begin(&k, c, ctx, &gr, "barrier"));
    for (int32_t p = 1; p < c->size; p++) coll_send(&k, NULL, 0, p, TAG_BARRIER);
  } else {
    coll_send(&k, NULL, 0, 0, TAG_BARRIER);
    coll_recv(&k, NULL, 0, 0, TAG_BARRIER);
  }
  return coll_end(&k);
}

static loom_status broadcast(loom_comm *c, loom_ctx *ctx, const group *gr, void *buf,
                             int64_t count, loom_dtype dt, int32_t root) {
  size_t bytes = 0;
  LOOM_TRY(check_count(c, ctx, count, dt, buf, "broadcast", &bytes));
  if (root < 0 || root >= gr->n)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "comm: broadcast root %d is not a %s of 0..%d", (int)root,
                      gr->ranks ? "member" : "rank", (int)gr->n - 1);
  coll k;
  LOOM_TRY(coll_begin(&k, c, ctx, gr, "broadcast"));
  if (gr->me == root) {
    for (int32_t p = 0; p < gr->n; p++)
      if (p != root) coll_send(&k, buf, bytes, p, TAG_BROADCAST);
  } else {
    coll_recv(&k, buf, bytes, root, TAG_BROADCAST);
  }
  return coll_end(&k);
}

loom_status loom_comm_broadcast(loom_comm *c, loom_ctx *ctx, void *buf, int64_t count,
                                loom_dtype dt, int32_t root) {
  if (!c) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: NULL communicator");
  group gr = world_group(c);
  return broadcast(c, ctx, &gr, buf, count, dt, root);
}

/* Per-member element counts and offsets (counts NULL: count each). */
static loom_status layout(loom_comm *c, loom_ctx *ctx, const group *gr, int64_t count,
                          const int64_t *counts, loom_dtype dt, const void *buf,
                          const char *what, int64_t **off_out) {
  int64_t *off = loom_malloc(ctx, sizeof(int64_t) * ((size_t)gr->n + 1));
  if (!off) return LOOM_STATUS_OUT_OF_MEMORY;
  off[0] = 0;
  for (int32_t r = 0; r < gr->n; r++) {
    int64_t n = counts ? counts[r] : count;
    size_t bytes = 0;
    if (check_count(c, ctx, n, dt, buf, what, &bytes) != LOOM_STATUS_OK ||
        off[r] > INT64_MAX / 2 - n) {
      free(off);
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "comm %s rank %d: %s: bad count %lld for %s %d", c->iface->name,
                        (int)c->rank, what, (long long)n, gr->ranks ? "member" : "rank", (int)r);
    }
    off[r + 1] = off[r] + n;
  }
  *off_out = off;
  return LOOM_STATUS_OK;
}

/* what: the operation messages name (all_reduce runs these as phases). */
static loom_status all_gather(loom_comm *c, loom_ctx *ctx, const group *gr, const void *send,
                              void *recv, int64_t count, const int64_t *counts, loom_dtype dt,
                              const char *what) {
  int64_t *off = NULL;
  LOOM_TRY(layout(c, ctx, gr, count, counts, dt, recv, what, &off));
  size_t es = loom_dtype_size(dt);
  int32_t me = gr->me;
  size_t mine = (size_t)(off[me + 1] - off[me]) * es;
  if (mine && !send) {
    free(off);
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: %s: NULL send buffer", what);
  }
  coll k;
  loom_status s = coll_begin(&k, c, ctx, gr, what);
  if (s == LOOM_STATUS_OK) {
    char *out = recv;
    for (int32_t p = 0; p < gr->n; p++) {
      if (p == me) continue;
      coll_recv(&k, out + off[p] * (int64_t)es, (size_t)(off[p + 1] - off[p]) * es, p,
                TAG_ALL_GATHER);
      coll_send(&k, send, mine, p, TAG_ALL_GATHER);
    }
    if (mine) memcpy(out + off[me] * (int64_t)es, send, mine);
    s = coll_end(&k);
  }
  free(off);
  return s;
}

loom_status loom_comm_all_gather(loom_comm *c, loom_ctx *ctx, const void *send, void *recv,
                                 int64_t count, const int64_t *counts, loom_dtype dt) {
  if (!c) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: NULL communicator");
  group gr = world_group(c);
  return all_gather(c, ctx, &gr, send, recv, count, counts, dt, "all_gather");
}

/* acc[i] = acc[i] op x[i], for one dtype. Integer sums wrap (unsigned). */
#define REDUCE_LOOP(T, U)                                                                        \
  do {                                                                                           \
    T *a = acc;                                                                                  \
    const T *b = x;                                                                              \
    for (int64_t i = 0; i < n; i++) {                                                            \
      if (op == LOOM_COMM_SUM) a[i] = (T)((U)a[i] + (U)b[i]);                                    \
      else if (op == LOOM_COMM_MAX) a[i] = b[i] > a[i] ? b[i] : a[i];                            \
      else a[i] = b[i] < a[i] ? b[i] : a[i];                                                     \
    }                                                                                            \
  } while (0)

void loom_comm_reduce_into(void *acc, const void *x, int64_t n, loom_dtype dt,
                           loom_comm_reduce op) {
  switch (dt) {
  case LOOM_DTYPE_F32: REDUCE_LOOP(float, float); break;
  case LOOM_DTYPE_F64: REDUCE_LOOP(double, double); break;
  case LOOM_DTYPE_I32: REDUCE_LOOP(int32_t, uint32_t); break;
  case LOOM_DTYPE_I64: REDUCE_LOOP(int64_t, uint64_t); break;
  case LOOM_DTYPE_U8:
  case LOOM_DTYPE_BOOL: REDUCE_LOOP(uint8_t, uint8_t); break;
  default: break;
  }
}

bool loom_comm_reduce_supported(loom_dtype dt, loom_comm_reduce op) {
  if (op != LOOM_COMM_SUM && op != LOOM_COMM_MAX && op != LOOM_COMM_MIN) return false;
  return dt == LOOM_DTYPE_F32 || dt == LOOM_DTYPE_F64 || dt == LOOM_DTYPE_I32 ||
         dt == LOOM_DTYPE_I64 || dt == LOOM_DTYPE_U8 ||
         (dt == LOOM_DTYPE_BOOL && op != LOOM_COMM_SUM);
}

static loom_status check_reduce(loom_comm *c, loom_ctx *ctx, loom_dtype dt, loom_comm_reduce op,
                                const char *what) {
  if (op != LOOM_COMM_SUM && op != LOOM_COMM_MAX && op != LOOM_COMM_MIN)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: %s: unknown reduction %d", what,
                      (int)op);
  if (!loom_comm_reduce_supported(dt, op))
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "comm %s rank %d: %s: no %s reduction of %s",
                      c->iface->name, (int)c->rank, what, loom_comm_reduce_name(op),
                      dtype_label(dt));
  return LOOM_STATUS_OK;
}

static loom_status reduce_scatter(loom_comm *c, loom_ctx *ctx, const group *gr, const void *send,
                                  void *recv, int64_t count, const int64_t *counts,
                                  loom_dtype dt, loom_comm_reduce op, const char *what) {
  LOOM_TRY(check_reduce(c, ctx, dt, op, what));
  int64_t *off = NULL;
  LOOM_TRY(layout(c, ctx, gr, count, counts, dt, send, what, &off));
  size_t es = loom_dtype_size(dt);
  int32_t me = gr->me, n = gr->n;
  int64_t m = off[me + 1] - off[me];
  size_t mine = (size_t)m * es;
  /* Every member's contribution to my block, then folded in member order. */
  char *parts = mine ? loom_malloc(ctx, mine * (size_t)n) : NULL;
  if (mine && (!parts || !recv)) {
    free(off);
    free(parts);
    return parts ? loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                              "comm: %s: NULL receive buffer", what)
                 : LOOM_STATUS_OUT_OF_MEMORY;
  }
  coll k;
  loom_status s = coll_begin(&k, c, ctx, gr, what);
  if (s == LOOM_STATUS_OK) {
    const char *in = send;
    for (int32_t p = 0; p < n; p++) {
      if (p == me) continue;
      coll_recv(&k, parts ? parts + (size_t)p * mine : NULL, mine, p, TAG_REDUCE_SCATTER);
      coll_send(&k, in + off[p] * (int64_t)es, (size_t)(off[p + 1] - off[p]) * es, p,
                TAG_REDUCE_SCATTER);
    }
    if (mine) memcpy(parts + (size_t)me * mine, in + off[me] * (int64_t)es, mine);
    s = coll_end(&k);
  }
  if (s == LOOM_STATUS_OK && mine) {
    memcpy(recv, parts, mine);
    for (int32_t p = 1; p < n; p++) loom_comm_reduce_into(recv, parts + (size_t)p * mine, m, dt, op);
  }
  free(parts);
  free(off);
  return s;
}

loom_status loom_comm_reduce_scatter(loom_comm *c, loom_ctx *ctx, const void *send, void *recv,
                                     int64_t count, const int64_t *counts, loom_dtype dt,
                                     loom_comm_reduce op) {
  if (!c) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: NULL communicator");
  group gr = world_group(c);
  return reduce_scatter(c, ctx, &gr, send, recv, count, counts, dt, op, "reduce_scatter");
}

static loom_status all_reduce(loom_comm *c, loom_ctx *ctx, const group *gr, void *buf,
                              int64_t count, loom_dtype dt, loom_comm_reduce op) {
  LOOM_TRY(check_reduce(c, ctx, dt, op, "all_reduce"));
  size_t bytes = 0;
  LOOM_TRY(check_count(c, ctx, count, dt, buf, "all_reduce", &bytes));
  if (gr->n == 1) return LOOM_STATUS_OK;
  /* Blocks as even as they go: the first count % n members own one more.
   * Both phases may share one tag: between two ranks, messages with one
   * tag arrive in the order sent, and phase 1 ends before phase 2 posts. */
  int32_t n = gr->n;
  int64_t *counts = loom_malloc(ctx, sizeof(int64_t) * (size_t)n);
  if (!counts) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t r = 0; r < n; r++) counts[r] = count / n + (r < count % n ? 1 : 0);
  size_t es = loom_dtype_size(dt);
  void *mine = counts[gr->me] ? loom_malloc(ctx, (size_t)counts[gr->me] * es) : NULL;
  loom_status s = counts[gr->me] && !mine ? LOOM_STATUS_OUT_OF_MEMORY : LOOM_STATUS_OK;
  if (s == LOOM_STATUS_OK)
    s = reduce_scatter(c, ctx, gr, buf, mine, 0, counts, dt, op,
                       "all_reduce (reduce-scatter phase)");
  if (s == LOOM_STATUS_OK)
    s = all_gather(c, ctx, gr, mine, buf, 0, counts, dt, "all_reduce (all-gather phase)");
  free(mine);
  free(counts);
  return s;
}

loom_status loom_comm_all_reduce(loom_comm *c, loom_ctx *ctx, void *buf, int64_t count,
                                 loom_dtype dt, loom_comm_reduce op) {
  if (!c) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: NULL communicator");
  group gr = world_group(c);
  return all_reduce(c, ctx, &gr, buf, count, dt, op);
}

static loom_status all_to_all(loom_comm *c, loom_ctx *ctx, const group *gr, const void *send,
                              void *recv, int64_t count, loom_dtype dt) {
  size_t bytes = 0;
  LOOM_TRY(check_count(c, ctx, count, dt, send, "all_to_all", &bytes));
  LOOM_TRY(check_count(c, ctx, count, dt, recv, "all_to_all", &bytes));
  coll k;
  LOOM_TRY(coll_begin(&k, c, ctx, gr, "all_to_all"));
  const char *in = send;
  char *out = recv;
  for (int32_t p = 0; p < gr->n; p++) {
    if (p == gr->me) continue;
    coll_recv(&k, out + (size_t)p * bytes, bytes, p, TAG_ALL_TO_ALL);
    coll_send(&k, in + (size_t)p * bytes, bytes, p, TAG_ALL_TO_ALL);
  }
  if (bytes) memcpy(out + (size_t)gr->me * bytes, in + (size_t)gr->me * bytes, bytes);
  return coll_end(&k);
}

loom_status loom_comm_all_to_all(loom_comm *c, loom_ctx *ctx, const void *send, void *recv,
                                 int64_t count, loom_dtype dt) {
  if (!c) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: NULL communicator");
  group gr = world_group(c);
  return all_to_all(c, ctx, &gr, send, recv, count, dt);
}

/* --- group collectives -------------------------------------------------- */

loom_status loom_comm_group_broadcast(loom_comm *c, loom_ctx *ctx, int32_t n,
                                      const int32_t *ranks, int64_t seq, void *buf,
                                      int64_t count, loom_dtype dt, int32_t root) {
  group gr;
  LOOM_TRY(make_group(c, ctx, n, ranks, seq, "broadcast", &gr));
  return broadcast(c, ctx, &gr, buf, count, dt, root);
}

loom_status loom_comm_group_all_reduce(loom_comm *c, loom_ctx *ctx, int32_t n,
                                       const int32_t *ranks, int64_t seq, void *buf,
                                       int64_t count, loom_dtype dt, loom_comm_reduce op) {
  group gr;
  LOOM_TRY(make_group(c, ctx, n, ranks, seq, "all_reduce", &gr));
  return all_reduce(c, ctx, &gr, buf, count, dt, op);
}

loom_status loom_comm_group_all_gather(loom_comm *c, loom_ctx *ctx, int32_t n,
                                       const int32_t *ranks, int64_t seq, const void *send,
                                       void *recv, int64_t count, const int64_t *counts,
                                       loom_dtype dt) {
  group gr;
  LOOM_TRY(make_group(c, ctx, n, ranks, seq, "all_gather", &gr));
  return all_gather(c, ctx, &gr, send, recv, count, counts, dt, "all_gather");
}

loom_status loom_comm_group_reduce_scatter(loom_comm *c, loom_ctx *ctx, int32_t n,
                                           const int32_t *ranks, int64_t seq, const void *send,
                                           void *recv, int64_t count, const int64_t *counts,
                                           loom_dtype dt, loom_comm_reduce op) {
  group gr;
  LOOM_TRY(make_group(c, ctx, n, ranks, seq, "reduce_scatter", &gr));
  return reduce_scatter(c, ctx, &gr, send, recv, count, counts, dt, op, "reduce_scatter");
}

loom_status loom_comm_group_all_to_all(loom_comm *c, loom_ctx *ctx, int32_t n,
                                       const int32_t *ranks, int64_t seq, const void *send,
                                       void *recv, int64_t count, loom_dtype dt) {
  group gr;
  LOOM_TRY(make_group(c, ctx, n, ranks, seq, "all_to_all", &gr));
  return all_to_all(c, ctx, &gr, send, recv, count, dt);
}

/* A blocking message on a tag above the user's (a seq's, the probe's):
 * the same checks as send and recv otherwise. */
static loom_status tagged_message(loom_comm *c, loom_ctx *ctx, void *buf, int64_t count,
                                  loom_dtype dt, int32_t peer, int32_t tag, bool sending) {
  size_t bytes = 0;
  loom_comm_request *req = NULL;
  const char *what = sending ? "send" : "recv";
  LOOM_TRY(check_message(c, ctx, buf, count, dt, peer, 0, &req, what, &bytes));
  loom_status s = sending ? c->iface->isend(c->context, ctx, buf, bytes, peer, tag, c->stream, &req)
                          : c->iface->irecv(c->context, ctx, buf, bytes, peer, tag, c->stream, &req);
  if (s != LOOM_STATUS_OK) return comm_fail(c, ctx, s, NULL);
  return wait_all(c, ctx, &req, 1, NULL);
}

loom_status loom_comm_seq_send(loom_comm *c, loom_ctx *ctx, const void *buf, int64_t count,
                               loom_dtype dt, int32_t peer, int64_t seq) {
  if (seq < 0) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: send: seq < 0");
  return tagged_message(c, ctx, (void *)buf, count, dt, peer, loom_comm_seq_tag(seq), true);
}

loom_status loom_comm_seq_recv(loom_comm *c, loom_ctx *ctx, void *buf, int64_t count,
                               loom_dtype dt, int32_t peer, int64_t seq) {
  if (seq < 0) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm: recv: seq < 0");
  return tagged_message(c, ctx, buf, count, dt, peer, loom_comm_seq_tag(seq), false);
}

loom_status loom_comm_probe_send(loom_comm *c, loom_ctx *ctx, const void *buf, int64_t bytes,
                                 int32_t peer) {
  return tagged_message(c, ctx, (void *)buf, bytes, LOOM_DTYPE_U8, peer, TAG_PROBE, true);
}

loom_status loom_comm_probe_recv(loom_comm *c, loom_ctx *ctx, void *buf, int64_t bytes,
                                 int32_t peer) {
  return tagged_message(c, ctx, buf, bytes, LOOM_DTYPE_U8, peer, TAG_PROBE, false);
}
