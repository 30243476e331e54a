/*
 * The NCCL communicator: one rank per process and GPU, NCCL (libnccl.so.2)
 * opened at run time like the CUDA driver (runtime/cuda/cuda_api.h). The
 * ranks learn NCCL's unique id over MPI (rank 0 makes it, the MPI
 * communicator broadcasts it), so it runs under mpirun like the MPI
 * communicator; each process takes the GPU of its local rank (the device
 * layer's choice, seen through runtime/cuda/cuda_stream.h: memory and a
 * stream of its own, no more). Built without MPI, a process no launcher started
 * is a world of one rank.
 *
 * Buffers stay host memory (comm.h): a send copies its bytes to a device
 * buffer, a receive lands in one and is copied back once done. NCCL has no
 * tags and matches sends and receives per peer in the order posted, which
 * the collectives of comm.c keep (every rank posts a step's messages in the
 * same order). Sends and receives are posted lazily: the first wait posts
 * every pending one in one ncclGroupStart / ncclGroupEnd, as NCCL needs
 * when two ranks exchange both ways. A wait polls the stream and NCCL's
 * asynchronous error until the deadline, so a peer that never answers is
 * an error, not a hang (the communicator is then aborted).
 */
#include "comm/comm.h"

#include "core/clock.h"
#include "core/ctx.h"
#include "runtime/cuda/cuda_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nccl_ctx {
  const loom_nccl_api *nccl;
  loom_cu *cu;
  loom_nccl_comm comm;
  loom_cu_stream stream;
  loom_comm *boot;            /* the MPI communicator the id came over (abort goes through it) */
  loom_comm_request *pending; /* not yet posted, in posting order */
  loom_comm_request *posted;  /* posted, not yet waited for */
  int32_t rank;
} nccl_ctx;

struct loom_comm_request {
  bool is_recv, done;
  void *host;
  size_t bytes;
  loom_cu_deviceptr dev;
  int32_t peer, tag;
  loom_comm_request *next;
};

/* The world size a launcher gave this process (1 if none). */
static long launched_ranks(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && v[0]) return strtol(v, NULL, 10);
  }
  return 1;
}

bool loom_comm_nccl_available(void) {
  loom_ctx *tmp = NULL;
  if (loom_ctx_new(&tmp)) return false;
  const loom_nccl_api *api = NULL;
  bool ok = loom_nccl_get(tmp, &api) == LOOM_STATUS_OK &&
            (loom_comm_mpi_available() || launched_ranks() <= 1);
  loom_ctx_free(tmp);
  return ok;
}

static loom_status nccl_check(loom_ctx *ctx, const nccl_ctx *n, loom_nccl_result r,
                              const char *what) {
  if (r == LOOM_NCCL_SUCCESS) return LOOM_STATUS_OK;
  const char *s = n->nccl->ncclGetErrorString(r);
  return loom_error(ctx, LOOM_STATUS_IO, "NCCL rank %d: %s: %s (%d)", (int)n->rank, what,
                    s ? s : "?", (int)r);
}

static void free_request(nccl_ctx *n, loom_comm_request *r) {
  loom_cu_free(n->cu, r->dev);
  free(r);
}

static void nccl_free(void *cctx) {
  nccl_ctx *n = cctx;
  if (!n) return;
  if (n->comm) n->nccl->ncclCommDestroy(n->comm);
  /* once the stream is done (and the device current), no request's
   * buffer is in use */
  loom_cu_stream_free(n->cu, n->stream);
  for (loom_comm_request *r = n->pending, *next; r; r = next) {
    next = r->next;
    free_request(n, r);
  }
  for (loom_comm_request *r = n->posted, *next; r; r = next) {
    next = r->next;
    free_request(n, r);
  }
  loom_comm_free(n->boot);
  free(n);
}

/* A request with its device buffer, queued to be posted at the next wait. */
static loom_status queue(nccl_ctx *n, loom_ctx *ctx, bool is_recv, void *buf, size_t bytes,
                         int32_t peer, int32_t tag, loom_comm_request **req) {
  *req = NULL;
  LOOM_TRY(loom_cu_bind(ctx, n->cu));
  loom_comm_request *r = loom_calloc(ctx, 1, sizeof *r);
  if (!r) return LOOM_STATUS_OUT_OF_MEMORY;
  *r = (loom_comm_request){
      .is_recv = is_recv, .host = buf, .bytes = bytes, .peer = peer, .tag = tag};
  if (bytes) {
    loom_status st = loom_cu_alloc(ctx, n->cu, bytes, &r->dev);
    if (!st && !is_recv) st = loom_cu_to_device_on(ctx, n->cu, r->dev, buf, bytes, n->stream);
    if (st) {
      free_request(n, r);
      return st;
    }
  }
  loom_comm_request **tail = &n->pending;
  while (*tail)
    tail = &(*tail)->next;
  *tail = r;
  *req = r;
  return LOOM_STATUS_OK;
}

static loom_status nccl_isend(void *cctx, loom_ctx *ctx, const void *buf, size_t bytes,
                              int32_t peer, int32_t tag, void *stream, loom_comm_request **req) {
  (void)stream;
  return queue(cctx, ctx, false, (void *)buf, bytes, peer, tag, req);
}

static loom_status nccl_irecv(void *cctx, loom_ctx *ctx, void *buf, size_t bytes, int32_t peer,
                              int32_t tag, void *stream, loom_comm_request **req) {
  (void)stream;
  return queue(cctx, ctx, true, buf, bytes, peer, tag, req);
}

/* Posts every pending request in one group; they move to the posted list. */
static loom_status post_pending(nccl_ctx *n, loom_ctx *ctx) {
  if (!n->pending) return LOOM_STATUS_OK;
  const loom_nccl_api *api = n->nccl;
  loom_status st = nccl_check(ctx, n, api->ncclGroupStart(), "ncclGroupStart");
  for (loom_comm_request *r = n->pending; !st && r; r = r->next) {
    if (!r->bytes) continue;
    void *dev = (void *)(uintptr_t)r->dev;
    st = r->is_recv ? nccl_check(ctx, n,
                                 api->ncclRecv(dev, r->bytes, LOOM_NCCL_UINT8, (int)r->peer,
                                               n->comm, n->stream),
                                 "ncclRecv")
                    : nccl_check(ctx, n,
                                 api->ncclSend(dev, r->bytes, LOOM_NCCL_UINT8, (int)r->peer,
                                               n->comm, n->stream),
                                 "ncclSend");
  }
  loom_status end = nccl_check(ctx, n, api->ncclGroupEnd(), "ncclGroupEnd");
  if (!st) st = end;
  loom_comm_request **tail = &n->posted;
  while (*tail)
    tail = &(*tail)->next;
  *tail = n->pending;
  n->pending = NULL;
  return st;
}

static loom_status nccl_wait(void *cctx, loom_ctx *ctx, loom_comm_request *req, double deadline_s,
                             bool *timed_out) {
  nccl_ctx *n = cctx;
  *timed_out = false;
  loom_status st = loom_cu_bind(ctx, n->cu);
  if (!st) st = post_pending(n, ctx);
  /* everything posted so far is done once the stream is idle */
  for (int32_t spins = 0; !st && !req->done; spins++) {
    bool idle = false;
    st = loom_cu_stream_done(ctx, n->cu, n->stream, "NCCL's stream", &idle);
    if (st) break;
    if (idle) {
      for (loom_comm_request *q = n->posted; q; q = q->next) {
        if (q->done) continue;
        if (!st && q->is_recv)
          st = loom_cu_to_host_on(ctx, n->cu, q->host, q->dev, q->bytes, n->stream);
        q->done = true;
      }
      if (!st) st = loom_cu_stream_sync(ctx, n->cu, n->stream, "copying messages to the host");
      break;
    }
    loom_nccl_result async = LOOM_NCCL_SUCCESS;
    n->nccl->ncclCommGetAsyncError(n->comm, &async);
    if (async != LOOM_NCCL_SUCCESS && async != LOOM_NCCL_IN_PROGRESS) {
      st = nccl_check(ctx, n, async, "asynchronous error");
      break;
    }
    if (loom_now_s() > deadline_s) {
      *timed_out = true;
      st = loom_error(ctx, LOOM_STATUS_IO, "NCCL rank %d: no answer from rank %d (tag %d, %s)",
                      (int)n->rank, (int)req->peer, (int)req->tag,
                      req->is_recv ? "receive" : "send");
      break;
    }
    loom_comm_poll_pause(spins);
  }
  /* unlink and free req in every case */
  for (loom_comm_request **p = &n->posted; *p; p = &(*p)->next)
    if (*p == req) {
      *p = req->next;
      break;
    }
  for (loom_comm_request **p = &n->pending; *p; p = &(*p)->next)
    if (*p == req) {
      *p = req->next;
      break;
    }
  free_request(n, req);
  return st;
}

static void nccl_abort(void *cctx, const char *why) {
  nccl_ctx *n = cctx;
  if (n->comm) n->nccl->ncclCommAbort(n->comm);
  n->comm = NULL;
  if (n->boot)
    loom_comm_abort(n->boot, why); /* MPI_Abort: ends every rank */
  else
    fprintf(stderr, "loom: NCCL rank %d aborts: %s\n", (int)n->rank, why);
}

static const loom_comm_iface nccl_iface = {
    .name = "nccl",
    .free = nccl_free,
    .isend = nccl_isend,
    .irecv = nccl_irecv,
    .wait = nccl_wait,
    .abort = nccl_abort,
};

loom_status loom_comm_nccl_new(loom_ctx *ctx, loom_comm **out) {
  *out = NULL;
  const loom_nccl_api *api = NULL;
  LOOM_TRY(loom_nccl_get(ctx, &api));
  /* without MPI only a world of one process: nothing to exchange */
  bool single = !loom_comm_mpi_available();
  if (single && launched_ranks() > 1)
    return loom_error(
        ctx, LOOM_STATUS_UNSUPPORTED,
        "the NCCL communicator exchanges its id over MPI: Loom was built without MPI");
  loom_cu *cu = NULL;
  LOOM_TRY(loom_cu_get(ctx, &cu));
  loom_comm *boot = NULL;
  if (!single) LOOM_TRY(loom_comm_mpi_new(ctx, &boot));
  int32_t rank = boot ? boot->rank : 0, size = boot ? boot->size : 1;
  nccl_ctx *n = loom_calloc(ctx, 1, sizeof *n);
  loom_comm *c = loom_calloc(ctx, 1, sizeof *c);
  loom_status st = n && c ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (st) goto fail;
  n->nccl = api;
  n->cu = cu;
  n->boot = boot;
  n->rank = rank;
  st = loom_cu_stream_new(ctx, cu, &n->stream);
  if (st) goto fail;
  loom_nccl_unique_id id;
  memset(&id, 0, sizeof id);
  if (rank == 0) st = nccl_check(ctx, n, api->ncclGetUniqueId(&id), "ncclGetUniqueId");
  /* rank 0's failure reaches the others as a broadcast that never comes:
   * abort instead, so they end too */
  if (st) {
    if (boot) loom_comm_abort(boot, loom_ctx_error(ctx));
    goto fail;
  }
  if (boot) st = loom_comm_broadcast(boot, ctx, &id, (int64_t)sizeof id, LOOM_DTYPE_U8, 0);
  if (!st)
    st = nccl_check(ctx, n, api->ncclCommInitRank(&n->comm, (int)size, id, (int)rank),
                    "ncclCommInitRank");
  if (st) goto fail;
  *c = (loom_comm){.iface = &nccl_iface,
                   .context = n,
                   .rank = rank,
                   .size = size,
                   .timeout_s = loom_comm_timeout_from_env(),
                   .stream = n->stream,
                   .device_buffers = false,
                   .threads_ok = true};
  *out = c;
  return LOOM_STATUS_OK;
fail:
  if (n) {
    if (n->stream) loom_cu_stream_free(cu, n->stream);
    free(n);
  }
  free(c);
  loom_comm_free(boot);
  return st;
}
