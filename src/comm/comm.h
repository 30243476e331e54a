/*
 * Communicators: how the ranks of a parallel plan exchange data. A small
 * vtable (ggml-style iface + context, like runtime/backend.h) with two
 * implementations today:
 *   - in-process (comm_inproc.c): N threads of one process share one world
 *     object (mutex + condition variable); for fast tests and for running
 *     every device of a plan in one process;
 *   - MPI (comm_mpi.c, Open MPI): one process per rank under mpirun; built
 *     when CMake finds MPI, otherwise loom_comm_mpi_new reports
 *     LOOM_STATUS_UNSUPPORTED.
 *   - NCCL (runtime/cuda/comm_nccl.c): one process per GPU, host buffers staged through
 *     device memory, point to point like the others (see "Streams and
 *     device buffers" below for what a device-buffer NCCL would add).
 *
 * An implementation provides point-to-point messages only (isend, irecv,
 * wait with a deadline); every collective is built once, here (comm.c), on
 * top of them. That keeps reductions deterministic and the same for every
 * implementation: each element is reduced in rank order 0, 1, ..., n-1,
 * starting from rank 0's value, so every rank gets the same bits on every
 * run whatever order messages arrive in. MPI_Allreduce does not promise
 * that (the standard only "advises" it; Open MPI picks its algorithm, and
 * so the order of the additions, by message size and process count), which
 * is why Loom does not call it.
 *
 * Buffers are host memory, `count` elements of a loom_dtype, contiguous.
 * Every call takes the caller's loom_ctx for its error message (one ctx per
 * rank: a ctx is not shared between threads). Every blocking wait is
 * bounded by the communicator's timeout (loom_comm_set_timeout; default
 * from the environment variable LOOM_COMM_TIMEOUT in seconds, else 60 s);
 * a wait that runs past it fails with LOOM_STATUS_IO and a message naming
 * the rank, the peer, the operation and the tag, never a hang. After any
 * failure the communicator is broken: call loom_comm_abort (ends every rank
 * with that message: MPI_Abort under MPI; the in-process world wakes every
 * waiting rank with an error) and free it.
 *
 * Streams and device buffers (NCCL's own collectives: not built):
 * loom_comm.stream is the
 * queue the operations are ordered on (a cudaStream_t for NCCL; NULL, the
 * host, for both implementations here), passed to isend and irecv. A
 * communicator whose buffers live on a device sets device_buffers; the
 * collectives here reduce on the host, so such an implementation fills the
 * optional collective entries of the iface (NULL here) with its own
 * (ncclAllReduce over a fixed ring/tree order keeps the determinism rule:
 * NCCL's result for a fixed communicator, size and algorithm is
 * reproducible run to run).
 */
#ifndef LOOM_COMM_COMM_H
#define LOOM_COMM_COMM_H

#include "loom.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum loom_comm_reduce {
  LOOM_COMM_SUM = 0,
  LOOM_COMM_MAX,
  LOOM_COMM_MIN,
} loom_comm_reduce;

/* User tags of send/recv are 0 .. LOOM_COMM_TAG_MAX; the collectives use
 * the tags above it (MPI guarantees tags up to 32767). */
#define LOOM_COMM_TAG_MAX 16383
/* The tags of group operations (and transfers): one per seq, modulo the
 * count, above the world collectives' own; at most 32767 (MPI's least
 * upper bound). Two operations on one pair of ranks never take each
 * other's messages unless their seqs agree modulo LOOM_COMM_SEQ_TAGS, and
 * even then messages with one tag arrive in order. */
#define LOOM_COMM_SEQ_TAG_BASE (LOOM_COMM_TAG_MAX + 16)
#define LOOM_COMM_SEQ_TAGS (32767 - LOOM_COMM_SEQ_TAG_BASE + 1)
/* The default timeout of every blocking wait, seconds. */
#define LOOM_COMM_TIMEOUT_DEFAULT_S 60.0

/* The pause between two tests of a pending request, the spins-th: none
 * for the first thousand (latency stays low), then a 50 us sleep (an idle
 * rank does not burn the core that ranks time-sharing it need). The MPI
 * communicator's waits poll this way; the cluster measurement of this
 * machine (wait.share) polls the same. */
void loom_comm_poll_pause(int32_t spins);
/* How long a wait for a request of `bytes` spins (tests without pausing)
 * before it starts pausing: about the time the bytes take to cross, so a
 * large message's fragments do not each wait out a sleep. A spinning rank
 * holds its core; the simulator charges ranks time-sharing cores for it. */
double loom_comm_spin_seconds(size_t bytes);

/* An operation in flight; its buffer must stay valid and untouched until
 * it is waited for. Owned by the implementation, freed by the wait. */
typedef struct loom_comm_request loom_comm_request;

typedef struct loom_comm_iface {
  const char *name;
  /* Frees this rank's handle (the last one frees a shared world). */
  void (*free)(void *cctx);
  /* Starts sending / receiving `bytes` bytes to / from rank peer (another
   * rank) with a tag; messages between two ranks with one tag arrive in order. stream:
   * loom_comm.stream. *req: the request to wait for. */
  loom_status (*isend)(void *cctx, loom_ctx *ctx, const void *buf, size_t bytes, int32_t peer,
                       int32_t tag, void *stream, loom_comm_request **req);
  loom_status (*irecv)(void *cctx, loom_ctx *ctx, void *buf, size_t bytes, int32_t peer,
                       int32_t tag, void *stream, loom_comm_request **req);
  /* Waits for req until deadline_s (loom_now_s() clock) and frees it in
   * every case. LOOM_STATUS_OK when done; a timeout sets *timed_out and
   * returns LOOM_STATUS_IO with a message naming the peer and tag (the
   * caller prefixes the operation). A received message of another size is
   * an error too. */
  loom_status (*wait)(void *cctx, loom_ctx *ctx, loom_comm_request *req, double deadline_s,
                      bool *timed_out);
  /* Ends every rank: the others' waits fail with `why`. */
  void (*abort)(void *cctx, const char *why);
} loom_comm_iface;

typedef struct loom_comm {
  const loom_comm_iface *iface;
  void *context;
  int32_t rank, size;
  double timeout_s;    /* bound on every blocking wait */
  void *stream;        /* NULL: host order (see above) */
  bool device_buffers; /* false: buffers are host memory */
  /* True if a thread other than the one that made the communicator may
   * call it (one thread at a time): MPI gave MPI_THREAD_SERIALIZED or
   * more; always for the in-process world. Comm ops overlap computation
   * only then (docs/PARALLEL.md). */
  bool threads_ok;
} loom_comm;

/* The in-process world of n ranks: out[0..n) are the ranks' handles, one
 * per thread, each freed with loom_comm_free. */
loom_status loom_comm_inproc_new(loom_ctx *ctx, int32_t n, loom_comm **out);
/* This process's rank of MPI_COMM_WORLD (initialises MPI if nobody has;
 * then the last free finalises it). LOOM_STATUS_UNSUPPORTED without MPI. */
loom_status loom_comm_mpi_new(loom_ctx *ctx, loom_comm **out);
/* True if Loom was built with MPI. */
bool loom_comm_mpi_available(void);
/* This process's rank over NCCL (runtime/cuda/comm_nccl.c): one process per GPU under
 * mpirun, NCCL's id exchanged over MPI; the host buffers staged through
 * device memory. UNSUPPORTED without NCCL (libnccl.so.2) or a CUDA device;
 * without MPI only a single process (one rank). loom train --plan uses it
 * when $LOOM_COMM is "nccl". */
loom_status loom_comm_nccl_new(loom_ctx *ctx, loom_comm **out);
/* True if NCCL can be opened and (Loom was built with MPI or this process
 * is alone). */
bool loom_comm_nccl_available(void);

void loom_comm_free(loom_comm *c);
/* Sets the bound of every blocking wait (seconds > 0). */
loom_status loom_comm_set_timeout(loom_comm *c, loom_ctx *ctx, double seconds);
/* The timeout from LOOM_COMM_TIMEOUT, or the default if unset or invalid. */
double loom_comm_timeout_from_env(void);
void loom_comm_abort(loom_comm *c, const char *why);

/* Point to point. Blocking calls wait with the timeout. */
loom_status loom_comm_send(loom_comm *c, loom_ctx *ctx, const void *buf, int64_t count,
                           loom_dtype dt, int32_t peer, int32_t tag);
loom_status loom_comm_recv(loom_comm *c, loom_ctx *ctx, void *buf, int64_t count, loom_dtype dt,
                           int32_t peer, int32_t tag);
loom_status loom_comm_isend(loom_comm *c, loom_ctx *ctx, const void *buf, int64_t count,
                            loom_dtype dt, int32_t peer, int32_t tag, loom_comm_request **req);
loom_status loom_comm_irecv(loom_comm *c, loom_ctx *ctx, void *buf, int64_t count, loom_dtype dt,
                            int32_t peer, int32_t tag, loom_comm_request **req);
/* Waits for (and frees) a request, within the timeout. */
loom_status loom_comm_wait(loom_comm *c, loom_ctx *ctx, loom_comm_request *req);

/*
 * Collectives: every rank calls the same ones in the same order. Reductions
 * take f32, f64, i32, i64, u8 (and bool for max/min); integer sums wrap.
 * counts (per rank, n entries) may be NULL for `count` elements each.
 */
loom_status loom_comm_barrier(loom_comm *c, loom_ctx *ctx);
/* buf (count elements) of root to every rank. */
loom_status loom_comm_broadcast(loom_comm *c, loom_ctx *ctx, void *buf, int64_t count,
                                loom_dtype dt, int32_t root);
/* Elementwise reduction of every rank's buf (count elements) into buf on
 * every rank: a reduce-scatter then an all-gather, so each rank sends and
 * receives 2(n-1)/n of the bytes, as a ring does. */
loom_status loom_comm_all_reduce(loom_comm *c, loom_ctx *ctx, void *buf, int64_t count,
                                 loom_dtype dt, loom_comm_reduce op);
/* Rank r's send (counts[r] elements) to recv at offset sum(counts[0..r))
 * on every rank. */
loom_status loom_comm_all_gather(loom_comm *c, loom_ctx *ctx, const void *send, void *recv,
                                 int64_t count, const int64_t *counts, loom_dtype dt);
/* send: sum(counts) elements on every rank; rank r gets the reduction of
 * every rank's block r (counts[r] elements at offset sum(counts[0..r))). */
loom_status loom_comm_reduce_scatter(loom_comm *c, loom_ctx *ctx, const void *send, void *recv,
                                     int64_t count, const int64_t *counts, loom_dtype dt,
                                     loom_comm_reduce op);
/* send and recv: n blocks of count elements; block j of rank i goes to
 * block i of rank j. */
loom_status loom_comm_all_to_all(loom_comm *c, loom_ctx *ctx, const void *send, void *recv,
                                 int64_t count, loom_dtype dt);

const char *loom_comm_reduce_name(loom_comm_reduce op);
/* acc[i] = acc[i] op x[i] for n elements: the one reduction every
 * collective (and the comm ops' global form) folds with, in member order. */
void loom_comm_reduce_into(void *acc, const void *x, int64_t n, loom_dtype dt,
                           loom_comm_reduce op);
/* True if the collectives reduce dt with op. */
bool loom_comm_reduce_supported(loom_dtype dt, loom_comm_reduce op);

/*
 * Group collectives: the collectives above over a subset of the ranks,
 * ranks[0..n) in member order (distinct, this rank among them). Only the
 * members call; member indices take the place of ranks (root, counts,
 * blocks). seq (>= 0) numbers the operation: its messages carry the tag
 * loom_comm_seq_tag(seq), so operations of different seqs, in one group or
 * in overlapping groups, never cross-match. The world collectives are the
 * case ranks = 0..size-1 with their own tags.
 */
int32_t loom_comm_seq_tag(int64_t seq);
loom_status loom_comm_group_broadcast(loom_comm *c, loom_ctx *ctx, int32_t n,
                                      const int32_t *ranks, int64_t seq, void *buf,
                                      int64_t count, loom_dtype dt, int32_t root);
loom_status loom_comm_group_all_reduce(loom_comm *c, loom_ctx *ctx, int32_t n,
                                       const int32_t *ranks, int64_t seq, void *buf,
                                       int64_t count, loom_dtype dt, loom_comm_reduce op);
loom_status loom_comm_group_all_gather(loom_comm *c, loom_ctx *ctx, int32_t n,
                                       const int32_t *ranks, int64_t seq, const void *send,
                                       void *recv, int64_t count, const int64_t *counts,
                                       loom_dtype dt);
loom_status loom_comm_group_reduce_scatter(loom_comm *c, loom_ctx *ctx, int32_t n,
                                           const int32_t *ranks, int64_t seq, const void *send,
                                           void *recv, int64_t count, const int64_t *counts,
                                           loom_dtype dt, loom_comm_reduce op);
loom_status loom_comm_group_all_to_all(loom_comm *c, loom_ctx *ctx, int32_t n,
                                       const int32_t *ranks, int64_t seq, const void *send,
                                       void *recv, int64_t count, loom_dtype dt);
/* One message to / from rank peer on the tag of seq (the transfer op). */
loom_status loom_comm_seq_send(loom_comm *c, loom_ctx *ctx, const void *buf, int64_t count,
                               loom_dtype dt, int32_t peer, int64_t seq);
loom_status loom_comm_seq_recv(loom_comm *c, loom_ctx *ctx, void *buf, int64_t count,
                               loom_dtype dt, int32_t peer, int64_t seq);

/* Bytes to / from rank peer on a tag of their own (neither a user's nor
 * a collective's): the cost model's ping-pong (perf/comm_model.h). */
loom_status loom_comm_probe_send(loom_comm *c, loom_ctx *ctx, const void *buf, int64_t bytes,
                                 int32_t peer);
loom_status loom_comm_probe_recv(loom_comm *c, loom_ctx *ctx, void *buf, int64_t bytes,
                                 int32_t peer);

/*
 * What a device's program runs its comm ops on (loom_ctx.comm_env): the
 * communicator (its rank is this device) and the groups the ops' `group`
 * attributes name. Members of group g are group_ranks[group_start[g] ..
 * group_start[g+1]) in member order. Owned by the caller.
 *
 * stream: where a program runs its comm ops, in program order, while its
 * compute goes on (runtime/stream.h; docs/PARALLEL.md, "Overlapping
 * communication"); NULL: each runs on the caller's thread and blocks it.
 * With a stream only the stream's thread calls the communicator during a
 * run, and the run has waited for all of it when it returns.
 */
struct loom_stream;
typedef struct loom_comm_env {
  loom_comm *comm;
  int32_t n_groups;
  const int32_t *group_start; /* n_groups + 1 entries */
  const int32_t *group_ranks;
  struct loom_stream *stream;
} loom_comm_env;

#endif
