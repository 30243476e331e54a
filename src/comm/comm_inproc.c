/*
 * The in-process communicator: the ranks are threads of one process and
 * share one world. A send copies its message into the receiver's queue
 * (so it completes at once); a receive takes the first queued message from
 * its peer with its tag, waiting on the world's condition variable until
 * the deadline. One mutex guards the world: simple, and fast enough for
 * tests and the reference executor.
 */
#include "comm/comm.h"

#include "core/clock.h"
#include "core/ctx.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct message {
  struct message *next;
  int32_t src, tag;
  size_t bytes;
  unsigned char data[]; /* the copied payload */
} message;

typedef struct world {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* on CLOCK_MONOTONIC: a message arrived or an abort */
  int32_t size, refs;
  bool aborted;
  char why[256];
  message **queue; /* per receiving rank, oldest first */
} world;

typedef struct rank_ctx {
  world *w;
  int32_t rank;
} rank_ctx;

struct loom_comm_request {
  bool is_recv;
  void *buf;
  size_t bytes;
  int32_t peer, tag;
};

static void world_free(world *w) {
  for (int32_t r = 0; r < w->size; r++) {
    for (message *m = w->queue[r], *next; m; m = next) {
      next = m->next;
      free(m);
    }
  }
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w->queue);
  free(w);
}

static void inproc_free(void *cctx) {
  rank_ctx *rc = cctx;
  world *w = rc->w;
  pthread_mutex_lock(&w->mu);
  bool last = --w->refs == 0;
  pthread_mutex_unlock(&w->mu);
  if (last) world_free(w);
  free(rc);
}

static loom_status aborted_error(loom_ctx *ctx, const world *w) {
  return loom_error(ctx, LOOM_STATUS_IO, "the world was aborted: %s", w->why);
}

static loom_status inproc_isend(void *cctx, loom_ctx *ctx, const void *buf, size_t bytes,
                                int32_t peer, int32_t tag, void *stream,
                                loom_comm_request **req) {
  (void)stream;
  rank_ctx *rc = cctx;
  world *w = rc->w;
  message *m = loom_malloc(ctx, sizeof *m + bytes);
  if (!m) return LOOM_STATUS_OUT_OF_MEMORY;
  m->next = NULL;
  m->src = rc->rank;
  m->tag = tag;
  m->bytes = bytes;
  if (bytes) memcpy(m->data, buf, bytes);
  pthread_mutex_lock(&w->mu);
  if (w->aborted) {
    loom_status s = aborted_error(ctx, w);
    pthread_mutex_unlock(&w->mu);
    free(m);
    return s;
  }
  message **tail = &w->queue[peer];
  while (*tail) tail = &(*tail)->next;
  *tail = m;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  /* The copy is made: the request is already complete. */
  *req = loom_calloc(ctx, 1, sizeof **req);
  if (!*req) return LOOM_STATUS_OUT_OF_MEMORY;
  (*req)->peer = peer;
  (*req)->tag = tag;
  (*req)->bytes = bytes;
  return LOOM_STATUS_OK;
}

static loom_status inproc_irecv(void *cctx, loom_ctx *ctx, void *buf, size_t bytes, int32_t peer,
                                int32_t tag, void *stream, loom_comm_request **req) {
  (void)cctx;
  (void)stream;
  *req = loom_calloc(ctx, 1, sizeof **req);
  if (!*req) return LOOM_STATUS_OUT_OF_MEMORY;
  **req = (loom_comm_request){.is_recv = true, .buf = buf, .bytes = bytes, .peer = peer, .tag = tag};
  return LOOM_STATUS_OK;
}

/* Takes the first message from peer with tag off my queue, or NULL. */
static message *take(world *w, int32_t me, int32_t peer, int32_t tag) {
  for (message **p = &w->queue[me]; *p; p = &(*p)->next) {
    if ((*p)->src == peer && (*p)->tag == tag) {
      message *m = *p;
      *p = m->next;
      return m;
    }
  }
  return NULL;
}

static loom_status inproc_wait(void *cctx, loom_ctx *ctx, loom_comm_request *req,
                               double deadline_s, bool *timed_out) {
  rank_ctx *rc = cctx;
  world *w = rc->w;
  loom_comm_request r = *req;
  free(req);
  *timed_out = false;
  if (!r.is_recv) return LOOM_STATUS_OK;
  /* The deadline on the condition variable's clock. */
  struct timespec now_ts, end_ts;
  clock_gettime(CLOCK_MONOTONIC, &now_ts);
  double left = deadline_s - loom_now_s();
  if (left < 0) left = 0;
  double whole = floor(left);
  end_ts.tv_sec = now_ts.tv_sec + (time_t)whole;
  end_ts.tv_nsec = now_ts.tv_nsec + (long)((left - whole) * 1e9);
  if (end_ts.tv_nsec >= 1000000000L) {
    end_ts.tv_sec++;
    end_ts.tv_nsec -= 1000000000L;
  }
  loom_status s = LOOM_STATUS_OK;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    message *m = take(w, rc->rank, r.peer, r.tag);
    if (m) {
      if (m->bytes != r.bytes)
        s = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                       "recv from rank %d (tag %d): the message has %zu bytes, expected %zu",
                       (int)r.peer, (int)r.tag, m->bytes, r.bytes);
      else if (r.bytes)
        memcpy(r.buf, m->data, r.bytes);
      free(m);
      break;
    }
    if (w->aborted) {
      s = aborted_error(ctx, w);
      break;
    }
    int rc_wait = pthread_cond_timedwait(&w->cv, &w->mu, &end_ts);
    if (rc_wait == ETIMEDOUT && !(m = take(w, rc->rank, r.peer, r.tag))) {
      *timed_out = true;
      s = loom_error(ctx, LOOM_STATUS_IO, "recv from rank %d (tag %d, %zu bytes) timed out",
                     (int)r.peer, (int)r.tag, r.bytes);
      break;
    }
    if (m) { /* arrived just as the wait timed out: put it back first */
      m->next = w->queue[rc->rank];
      w->queue[rc->rank] = m;
    }
  }
  pthread_mutex_unlock(&w->mu);
  return s;
}

static void inproc_abort(void *cctx, const char *why) {
  rank_ctx *rc = cctx;
  world *w = rc->w;
  pthread_mutex_lock(&w->mu);
  if (!w->aborted) {
    w->aborted = true;
    snprintf(w->why, sizeof w->why, "rank %d: %s", (int)rc->rank, why);
  }
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static const loom_comm_iface inproc_iface = {
    .name = "inproc",
    .free = inproc_free,
    .isend = inproc_isend,
    .irecv = inproc_irecv,
    .wait = inproc_wait,
    .abort = inproc_abort,
};

loom_status loom_comm_inproc_new(loom_ctx *ctx, int32_t n, loom_comm **out) {
  if (!out || n < 1 || n > 4096)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "comm inproc: %d ranks (wanted 1..4096)", (int)n);
  world *w = loom_calloc(ctx, 1, sizeof *w);
  if (!w) return LOOM_STATUS_OUT_OF_MEMORY;
  w->queue = loom_calloc(ctx, (size_t)n, sizeof *w->queue);
  if (!w->queue) {
    free(w);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  w->size = n;
  pthread_mutex_init(&w->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cv, &attr);
  pthread_condattr_destroy(&attr);
  double timeout = loom_comm_timeout_from_env();
  for (int32_t r = 0; r < n; r++) {
    loom_comm *c = loom_calloc(ctx, 1, sizeof *c);
    rank_ctx *rc = c ? loom_calloc(ctx, 1, sizeof *rc) : NULL;
    if (!rc) {
      free(c);
      for (int32_t q = 0; q < r; q++) loom_comm_free(out[q]);
      if (r == 0) world_free(w);
      return LOOM_STATUS_OUT_OF_MEMORY;
    }
    rc->w = w;
    rc->rank = r;
    w->refs++;
    *c = (loom_comm){.iface = &inproc_iface, .context = rc, .rank = r, .size = n,
                     .timeout_s = timeout, .threads_ok = true};
    out[r] = c;
  }
  return LOOM_STATUS_OK;
}
