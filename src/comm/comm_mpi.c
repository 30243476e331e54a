/*
 * The MPI communicator: one rank per process of MPI_COMM_WORLD (a
 * duplicate, so Loom's tags never meet the application's). Messages are
 * bytes (Loom reduces itself, comm.h); every wait is MPI_Test in a loop
 * with a short sleep until the deadline, so a peer that never answers
 * gives an error, not a hang. Built when CMake finds MPI (LOOM_HAVE_MPI).
 */
#include "comm/comm.h"

#include "core/ctx.h"

#ifdef LOOM_HAVE_MPI

#include "core/clock.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct mpi_ctx {
  MPI_Comm comm;
  bool finalize; /* we initialised MPI, so the free finalises it */
} mpi_ctx;

struct loom_comm_request {
  MPI_Request req;
  bool is_recv;
  size_t bytes;
  int32_t peer, tag;
};

bool loom_comm_mpi_available(void) { return true; }

static loom_status mpi_fail(loom_ctx *ctx, int code, const char *what, int32_t peer) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  text[len] = '\0';
  return loom_error(ctx, LOOM_STATUS_IO, "%s rank %d: MPI error: %s", what, (int)peer, text);
}

static void mpi_free(void *cctx) {
  mpi_ctx *m = cctx;
  MPI_Comm_free(&m->comm);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (m->finalize && !finalized) MPI_Finalize();
  free(m);
}

static loom_status new_request(loom_ctx *ctx, bool is_recv, size_t bytes, int32_t peer,
                               int32_t tag, loom_comm_request **req) {
  *req = loom_calloc(ctx, 1, sizeof **req);
  if (!*req) return LOOM_STATUS_OUT_OF_MEMORY;
  **req = (loom_comm_request){.req = MPI_REQUEST_NULL, .is_recv = is_recv, .bytes = bytes,
                              .peer = peer, .tag = tag};
  return LOOM_STATUS_OK;
}

static loom_status mpi_isend(void *cctx, loom_ctx *ctx, const void *buf, size_t bytes,
                             int32_t peer, int32_t tag, void *stream, loom_comm_request **req) {
  (void)stream;
  mpi_ctx *m = cctx;
  LOOM_TRY(new_request(ctx, false, bytes, peer, tag, req));
  int rc = MPI_Isend(bytes ? buf : NULL, (int)bytes, MPI_BYTE, peer, tag, m->comm, &(*req)->req);
  if (rc == MPI_SUCCESS) return LOOM_STATUS_OK;
  free(*req);
  *req = NULL;
  return mpi_fail(ctx, rc, "send to", peer);
}

static loom_status mpi_irecv(void *cctx, loom_ctx *ctx, void *buf, size_t bytes, int32_t peer,
                             int32_t tag, void *stream, loom_comm_request **req) {
  (void)stream;
  mpi_ctx *m = cctx;
  LOOM_TRY(new_request(ctx, true, bytes, peer, tag, req));
  int rc = MPI_Irecv(bytes ? buf : NULL, (int)bytes, MPI_BYTE, peer, tag, m->comm, &(*req)->req);
  if (rc == MPI_SUCCESS) return LOOM_STATUS_OK;
  free(*req);
  *req = NULL;
  return mpi_fail(ctx, rc, "recv from", peer);
}

static loom_status mpi_wait(void *cctx, loom_ctx *ctx, loom_comm_request *req, double deadline_s,
                            bool *timed_out) {
  (void)cctx;
  loom_comm_request r = *req;
  free(req);
  *timed_out = false;
  const char *what = r.is_recv ? "recv from" : "send to";
  MPI_Status st;
  /* Spin for about the time the bytes take to move, then sleep between
   * tests (loom_comm_poll_pause). A large message crosses in fragments,
   * each needing a test on both ends: a sleep per fragment made a 3 MB
   * all-reduce take hundreds of sleeps. */
  double spin_until = loom_now_s() + loom_comm_spin_seconds(r.bytes);
  for (int32_t spins = 0;; spins++) {
    int done = 0;
    int rc = MPI_Test(&r.req, &done, &st);
    if (rc != MPI_SUCCESS) return mpi_fail(ctx, rc, what, r.peer);
    if (done) break;
    if (loom_now_s() >= deadline_s) {
      /* Withdraw it; a receive is cancelled, a send left to MPI. */
      if (r.is_recv) {
        MPI_Cancel(&r.req);
        MPI_Request_free(&r.req);
      } else {
        MPI_Request_free(&r.req);
      }
      *timed_out = true;
      return loom_error(ctx, LOOM_STATUS_IO, "%s rank %d (tag %d, %zu bytes) timed out", what,
                        (int)r.peer, (int)r.tag, r.bytes);
    }
    if (loom_now_s() >= spin_until) loom_comm_poll_pause(spins);
  }
  if (r.is_recv) {
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if ((size_t)got != r.bytes)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "recv from rank %d (tag %d): the message has %d bytes, expected %zu",
                        (int)r.peer, (int)r.tag, got, r.bytes);
  }
  return LOOM_STATUS_OK;
}

static void mpi_abort(void *cctx, const char *why) {
  mpi_ctx *m = cctx;
  int rank = 0;
  MPI_Comm_rank(m->comm, &rank);
  fprintf(stderr, "loom: rank %d aborts the job: %s\n", rank, why);
  MPI_Abort(m->comm, 1);
}

static const loom_comm_iface mpi_iface = {
    .name = "mpi",
    .free = mpi_free,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .wait = mpi_wait,
    .abort = mpi_abort,
};

loom_status loom_comm_mpi_new(loom_ctx *ctx, loom_comm **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "comm mpi: NULL argument");
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  /* SERIALIZED: a program's comm stream calls MPI while the main thread
   * does not (comm_env's stream); with less, comm ops stay on the main
   * thread */
  if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    return loom_error(ctx, LOOM_STATUS_IO, "comm mpi: MPI_Init_thread failed");
  if (inited) MPI_Query_thread(&provided);
  mpi_ctx *m = loom_calloc(ctx, 1, sizeof *m);
  loom_comm *c = m ? loom_calloc(ctx, 1, sizeof *c) : NULL;
  if (!c) {
    free(m);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  m->finalize = !inited;
  /* Errors come back as codes (turned into messages), not a job abort. */
  MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
  MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(m->comm, &rank);
  MPI_Comm_size(m->comm, &size);
  *c = (loom_comm){.iface = &mpi_iface, .context = m, .rank = rank, .size = size,
                   .timeout_s = loom_comm_timeout_from_env(),
                   .threads_ok = provided >= MPI_THREAD_SERIALIZED};
  *out = c;
  return LOOM_STATUS_OK;
}

#else

bool loom_comm_mpi_available(void) { return false; }

loom_status loom_comm_mpi_new(loom_ctx *ctx, loom_comm **out) {
  if (out) *out = NULL;
  return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                    "comm mpi: this Loom was built without MPI (install libopenmpi-dev with "
                    "scripts/install-deps.sh and reconfigure)");
}

#endif
