/* The shared communicator checks (comm_checks.h). Counters are local, not
 * tests/common.h's globals, because ranks may be threads. */
#include "comm_checks.h"

#include "ir/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tally {
  int rank, failures, checks;
} tally;

#define T_CHECK(t, cond)                                                                         \
  do {                                                                                           \
    (t)->checks++;                                                                               \
    if (!(cond)) {                                                                               \
      (t)->failures++;                                                                           \
      fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s\n", (t)->rank, __FILE__, __LINE__,      \
              #cond);                                                                            \
    }                                                                                            \
  } while (0)

#define T_OK(t, ctx, expr)                                                                       \
  do {                                                                                           \
    loom_status s_ = (expr);                                                                     \
    (t)->checks++;                                                                               \
    if (s_ != LOOM_STATUS_OK) {                                                                  \
      (t)->failures++;                                                                           \
      fprintf(stderr, "rank %d: %s:%d: %s -> %s: %s\n", (t)->rank, __FILE__, __LINE__, #expr,   \
              loom_status_name(s_), loom_ctx_error(ctx));                                        \
    }                                                                                            \
  } while (0)

/* Rank r's element i: values whose sum depends on the order of the
 * additions in floating point (1e8 next to small ones, signs alternating). */
static double value(int32_t r, int64_t i, loom_dtype dt) {
  if (dt == LOOM_DTYPE_I64) return (double)((r + 1) * 1000003LL - i * 7 + (r % 2 ? -99 : 42));
  if (dt == LOOM_DTYPE_I32) return (double)((r + 1) * 1009 - i * 3);
  double big = (i % 3 == 0) ? 1e8 : 1.0;
  return (r % 2 ? -big : big) * (1 + 0.25 * r) + 0.1 * (r + 1) + 0.01 * (double)i;
}

static void fill(void *buf, int64_t n, int32_t r, loom_dtype dt, int64_t first) {
  for (int64_t i = 0; i < n; i++) loom_store(dt, buf, i, value(r, first + i, dt));
}

/* Plain C: element i reduced over ranks 0..n-1 in that order. */
static void expected_reduce(void *out, int64_t count, int32_t n, loom_dtype dt,
                            loom_comm_reduce op, int64_t first) {
  for (int64_t i = 0; i < count; i++) {
    if (dt == LOOM_DTYPE_F32) {
      float a = (float)value(0, first + i, dt);
      for (int32_t r = 1; r < n; r++) {
        float b = (float)value(r, first + i, dt);
        a = op == LOOM_COMM_SUM ? a + b : op == LOOM_COMM_MAX ? (b > a ? b : a) : (b < a ? b : a);
      }
      ((float *)out)[i] = a;
    } else if (dt == LOOM_DTYPE_F64) {
      double a = value(0, first + i, dt);
      for (int32_t r = 1; r < n; r++) {
        double b = value(r, first + i, dt);
        a = op == LOOM_COMM_SUM ? a + b : op == LOOM_COMM_MAX ? (b > a ? b : a) : (b < a ? b : a);
      }
      ((double *)out)[i] = a;
    } else {
      int64_t a = (int64_t)value(0, first + i, dt);
      for (int32_t r = 1; r < n; r++) {
        int64_t b = (int64_t)value(r, first + i, dt);
        a = op == LOOM_COMM_SUM ? a + b : op == LOOM_COMM_MAX ? (b > a ? b : a) : (b < a ? b : a);
      }
      loom_store(dt, out, i, (double)a);
    }
  }
}

static void check_p2p(tally *t, loom_comm *c, loom_ctx *ctx) {
  int32_t n = c->size, me = c->rank;
  if (n < 2) return;
  /* A ring of non-blocking sends and blocking receives (no deadlock). */
  double out[5], in[5], want[5];
  int32_t next = (me + 1) % n, prev = (me + n - 1) % n;
  fill(out, 5, me, LOOM_DTYPE_F64, 0);
  fill(want, 5, prev, LOOM_DTYPE_F64, 0);
  loom_comm_request *req = NULL;
  T_OK(t, ctx, loom_comm_isend(c, ctx, out, 5, LOOM_DTYPE_F64, next, 3, &req));
  T_OK(t, ctx, loom_comm_recv(c, ctx, in, 5, LOOM_DTYPE_F64, prev, 3));
  if (req) T_OK(t, ctx, loom_comm_wait(c, ctx, req));
  T_CHECK(t, memcmp(in, want, sizeof in) == 0);
  /* Blocking send 0 -> 1, and an irecv waited for; messages with one tag
   * arrive in order. */
  int64_t a[3] = {7, -8, 1LL << 40}, b[3] = {0}, b2[3] = {0};
  if (me == 0) {
    T_OK(t, ctx, loom_comm_send(c, ctx, a, 3, LOOM_DTYPE_I64, 1, 0));
    a[0] = 70;
    T_OK(t, ctx, loom_comm_send(c, ctx, a, 3, LOOM_DTYPE_I64, 1, 0));
  } else if (me == 1) {
    loom_comm_request *r1 = NULL, *r2 = NULL;
    T_OK(t, ctx, loom_comm_irecv(c, ctx, b, 3, LOOM_DTYPE_I64, 0, 0, &r1));
    T_OK(t, ctx, loom_comm_irecv(c, ctx, b2, 3, LOOM_DTYPE_I64, 0, 0, &r2));
    if (r1) T_OK(t, ctx, loom_comm_wait(c, ctx, r1));
    if (r2) T_OK(t, ctx, loom_comm_wait(c, ctx, r2));
    T_CHECK(t, b[0] == 7 && b[1] == -8 && b[2] == (1LL << 40));
    T_CHECK(t, b2[0] == 70 && b2[2] == (1LL << 40));
  }
}

static void check_all_reduce(tally *t, loom_comm *c, loom_ctx *ctx) {
  const loom_dtype dts[] = {LOOM_DTYPE_F32, LOOM_DTYPE_F64, LOOM_DTYPE_I64, LOOM_DTYPE_I32};
  const int64_t counts[] = {1, 7, 64};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
    for (size_t k = 0; k < 3; k++) {
      for (int op = LOOM_COMM_SUM; op <= LOOM_COMM_MIN; op++) {
        loom_dtype dt = dts[d];
        int64_t n = counts[k];
        size_t bytes = (size_t)n * loom_dtype_size(dt);
        char *buf = malloc(bytes), *again = malloc(bytes), *want = malloc(bytes);
        char *all = malloc(bytes * (size_t)c->size);
        fill(buf, n, c->rank, dt, 0);
        fill(again, n, c->rank, dt, 0);
        expected_reduce(want, n, c->size, dt, (loom_comm_reduce)op, 0);
        T_OK(t, ctx, loom_comm_all_reduce(c, ctx, buf, n, dt, (loom_comm_reduce)op));
        T_OK(t, ctx, loom_comm_all_reduce(c, ctx, again, n, dt, (loom_comm_reduce)op));
        /* The rank-order fold of plain C, bit for bit; the same on a rerun
         * and on every rank (gathered here and compared). */
        T_CHECK(t, memcmp(buf, want, bytes) == 0);
        T_CHECK(t, memcmp(buf, again, bytes) == 0);
        T_OK(t, ctx, loom_comm_all_gather(c, ctx, buf, all, n, NULL, dt));
        for (int32_t r = 0; r < c->size; r++)
          T_CHECK(t, memcmp(all + (size_t)r * bytes, want, bytes) == 0);
        free(buf);
        free(again);
        free(want);
        free(all);
      }
    }
  }
}

static void check_gather_scatter(tally *t, loom_comm *c, loom_ctx *ctx) {
  int32_t n = c->size, me = c->rank;
  int64_t *counts = calloc((size_t)n, sizeof *counts), total = 0;
  for (int32_t r = 0; r < n; r++) total += counts[r] = r + 1; /* uneven */
  int64_t *mine = calloc((size_t)me + 1, sizeof *mine), *all = calloc((size_t)total, sizeof *all);
  for (int32_t i = 0; i <= me; i++) mine[i] = 1000 * me + i;
  T_OK(t, ctx, loom_comm_all_gather(c, ctx, mine, all, 0, counts, LOOM_DTYPE_I64));
  int64_t at = 0;
  for (int32_t r = 0; r < n; r++)
    for (int32_t i = 0; i <= r; i++) T_CHECK(t, all[at++] == 1000 * r + i);
  free(mine);
  free(all);

  /* Reduce-scatter, uneven blocks of 1 or 2 f64: block r holds elements
   * [off_r, off_r + counts[r]) of the logical vector. */
  total = 0;
  for (int32_t r = 0; r < n; r++) total += counts[r] = 1 + r % 2;
  int64_t off = 0;
  for (int32_t r = 0; r < me; r++) off += counts[r];
  double *send = calloc((size_t)total, sizeof *send), got[2] = {0}, want[2] = {0};
  fill(send, total, me, LOOM_DTYPE_F64, 0);
  expected_reduce(want, counts[me], n, LOOM_DTYPE_F64, LOOM_COMM_SUM, off);
  T_OK(t, ctx, loom_comm_reduce_scatter(c, ctx, send, got, 0, counts, LOOM_DTYPE_F64,
                                        LOOM_COMM_SUM));
  T_CHECK(t, memcmp(got, want, sizeof(double) * (size_t)counts[me]) == 0);
  float fs[8], fg[2], fw[2];
  fill(fs, 2 * n, me, LOOM_DTYPE_F32, 0);
  expected_reduce(fw, 2, n, LOOM_DTYPE_F32, LOOM_COMM_MAX, 2 * me);
  T_OK(t, ctx, loom_comm_reduce_scatter(c, ctx, fs, fg, 2, NULL, LOOM_DTYPE_F32, LOOM_COMM_MAX));
  T_CHECK(t, memcmp(fg, fw, sizeof fg) == 0);
  free(send);
  free(counts);
}

static void check_bcast_a2a_barrier(tally *t, loom_comm *c, loom_ctx *ctx) {
  int32_t n = c->size, me = c->rank;
  float b[6], want[6];
  fill(b, 6, me, LOOM_DTYPE_F32, 0);
  fill(want, 6, n - 1, LOOM_DTYPE_F32, 0);
  T_OK(t, ctx, loom_comm_broadcast(c, ctx, b, 6, LOOM_DTYPE_F32, n - 1));
  T_CHECK(t, memcmp(b, want, sizeof b) == 0);

  double *send = calloc((size_t)n * 2, sizeof *send), *recv = calloc((size_t)n * 2, sizeof *recv);
  for (int32_t j = 0; j < n; j++)
    for (int k = 0; k < 2; k++) send[j * 2 + k] = me * 100.0 + j * 10.0 + k + 0.5;
  T_OK(t, ctx, loom_comm_all_to_all(c, ctx, send, recv, 2, LOOM_DTYPE_F64));
  for (int32_t i = 0; i < n; i++)
    for (int k = 0; k < 2; k++) T_CHECK(t, recv[i * 2 + k] == i * 100.0 + me * 10.0 + k + 0.5);
  free(send);
  free(recv);
  for (int i = 0; i < 3; i++) T_OK(t, ctx, loom_comm_barrier(c, ctx));
  /* Wrong uses are errors with messages, not crashes. */
  loom_comm_request *req = NULL;
  T_CHECK(t, loom_comm_isend(c, ctx, b, 1, LOOM_DTYPE_F32, me, 0, &req) ==
                 LOOM_STATUS_INVALID_ARGUMENT);
  T_CHECK(t, loom_comm_all_reduce(c, ctx, b, 1, LOOM_DTYPE_F16, LOOM_COMM_SUM) ==
                 LOOM_STATUS_UNSUPPORTED);
  T_CHECK(t, strstr(loom_ctx_error(ctx), "f16") != NULL);
}

/* The group collectives over two groups: every rank in reverse order
 * (member m is rank n-1-m) and the odd ranks; member m contributes
 * value(m, ...), so plain C's member-order fold is the expectation. */
static void check_group(tally *t, loom_comm *c, loom_ctx *ctx, int32_t n, const int32_t *ranks,
                        int64_t seq) {
  int32_t me = -1;
  for (int32_t m = 0; m < n; m++)
    if (ranks[m] == c->rank) me = m;
  if (me < 0) return;
  float buf[5], want[5];
  fill(buf, 5, me, LOOM_DTYPE_F32, 0);
  expected_reduce(want, 5, n, LOOM_DTYPE_F32, LOOM_COMM_SUM, 0);
  T_OK(t, ctx, loom_comm_group_all_reduce(c, ctx, n, ranks, seq, buf, 5, LOOM_DTYPE_F32,
                                          LOOM_COMM_SUM));
  T_CHECK(t, memcmp(buf, want, sizeof buf) == 0);

  int64_t mine[2] = {10 * me, 10 * me + 1}, all[2 * 4 * 8];
  T_OK(t, ctx, loom_comm_group_all_gather(c, ctx, n, ranks, seq + 1, mine, all, 2, NULL,
                                          LOOM_DTYPE_I64));
  for (int32_t m = 0; m < n; m++) T_CHECK(t, all[2 * m] == 10 * m && all[2 * m + 1] == 10 * m + 1);

  double send[2 * 32], got[2], dw[2];
  fill(send, 2 * n, me, LOOM_DTYPE_F64, 0);
  expected_reduce(dw, 2, n, LOOM_DTYPE_F64, LOOM_COMM_MIN, 2 * me);
  T_OK(t, ctx, loom_comm_group_reduce_scatter(c, ctx, n, ranks, seq + 2, send, got, 2, NULL,
                                              LOOM_DTYPE_F64, LOOM_COMM_MIN));
  T_CHECK(t, memcmp(got, dw, sizeof got) == 0);

  int32_t a_send[32], a_recv[32];
  for (int32_t j = 0; j < n; j++) a_send[j] = 100 * me + j;
  T_OK(t, ctx, loom_comm_group_all_to_all(c, ctx, n, ranks, seq + 3, a_send, a_recv, 1,
                                          LOOM_DTYPE_I32));
  for (int32_t i = 0; i < n; i++) T_CHECK(t, a_recv[i] == 100 * i + me);

  float b[3], bw[3];
  fill(b, 3, me, LOOM_DTYPE_F32, 0);
  fill(bw, 3, n - 1, LOOM_DTYPE_F32, 0);
  T_OK(t, ctx, loom_comm_group_broadcast(c, ctx, n, ranks, seq + 4, b, 3, LOOM_DTYPE_F32, n - 1));
  T_CHECK(t, memcmp(b, bw, sizeof b) == 0);
}

static void check_groups(tally *t, loom_comm *c, loom_ctx *ctx) {
  int32_t n = c->size;
  if (n > 32) return;
  int32_t rev[32] = {0}, odd[32] = {0}, n_odd = 0;
  for (int32_t m = 0; m < n; m++) rev[m] = n - 1 - m;
  for (int32_t r = 1; r < n; r += 2) odd[n_odd++] = r;
  check_group(t, c, ctx, n, rev, 10);
  if (n_odd > 0) check_group(t, c, ctx, n_odd, odd, 20);
  /* Messages of two seqs between one pair, received in the other order:
   * the tags keep them apart. */
  if (n >= 2 && c->rank <= 1) {
    int64_t x[2] = {7, 8}, y[2] = {0, 0};
    if (c->rank == 0) {
      T_OK(t, ctx, loom_comm_seq_send(c, ctx, &x[0], 1, LOOM_DTYPE_I64, 1, 7));
      T_OK(t, ctx, loom_comm_seq_send(c, ctx, &x[1], 1, LOOM_DTYPE_I64, 1, 8));
    } else {
      T_OK(t, ctx, loom_comm_seq_recv(c, ctx, &y[1], 1, LOOM_DTYPE_I64, 0, 8));
      T_OK(t, ctx, loom_comm_seq_recv(c, ctx, &y[0], 1, LOOM_DTYPE_I64, 0, 7));
      T_CHECK(t, y[0] == 7 && y[1] == 8);
    }
  }
  /* Bad groups are errors with messages. */
  int32_t dup[2] = {0, 0}, outside[1] = {n};
  float none[1] = {0};
  T_CHECK(t, loom_comm_group_all_reduce(c, ctx, 2, dup, 0, none, 0, LOOM_DTYPE_F32,
                                        LOOM_COMM_SUM) == LOOM_STATUS_INVALID_ARGUMENT);
  T_CHECK(t, loom_comm_group_broadcast(c, ctx, 1, outside, 0, none, 0, LOOM_DTYPE_F32, 0) ==
                 LOOM_STATUS_INVALID_ARGUMENT);
  T_CHECK(t, strstr(loom_ctx_error(ctx), "not one of") != NULL);
  if (n >= 2) {
    int32_t other[1] = {(c->rank + 1) % n};
    T_CHECK(t, loom_comm_group_all_reduce(c, ctx, 1, other, 0, none, 0, LOOM_DTYPE_F32,
                                          LOOM_COMM_SUM) == LOOM_STATUS_INVALID_ARGUMENT);
    T_CHECK(t, strstr(loom_ctx_error(ctx), "not a member of the group") != NULL);
  }
}

int comm_check_all(loom_comm *c, loom_ctx *ctx, int *checks) {
  tally t = {.rank = c->rank};
  check_p2p(&t, c, ctx);
  check_all_reduce(&t, c, ctx);
  check_gather_scatter(&t, c, ctx);
  check_bcast_a2a_barrier(&t, c, ctx);
  check_groups(&t, c, ctx);
  *checks += t.checks;
  return t.failures;
}
