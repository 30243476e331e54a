/* The worker pool: split tasks, many submit/wait cycles, overlap with an
 * OpenMP loop on the caller's thread, misuse, tracing. */
#include "common.h"

#include "core/clock.h"
#include "core/ctx.h"
#include "io/json.h"
#include "runtime/worker.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_ELEMS 1000003 /* not a multiple of any thread count */

typedef struct fill_job {
  float *x;
  int64_t n;
  double partial[LOOM_WORKER_MAX_THREADS];
  atomic_int calls[LOOM_WORKER_MAX_THREADS];
  atomic_int bad_count;
} fill_job;

/* Fills x[i] = i % 1000 over this piece's share and sums it. */
static void fill(void *p, int32_t index, int32_t count) {
  fill_job *j = p;
  int64_t lo = j->n * index / count, hi = j->n * (index + 1) / count;
  double s = 0;
  for (int64_t i = lo; i < hi; i++) s += (double)(j->x[i] = (float)(i % 1000));
  j->partial[index] = s;
  atomic_fetch_add(&j->calls[index], 1);
  if (count < 1 || index < 0 || index >= count) atomic_fetch_add(&j->bad_count, 1);
}

static double expected_sum(int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)(i % 1000);
  return s;
}

static void test_split(loom_ctx *ctx) {
  fill_job *j = calloc(1, sizeof *j);
  float *x = malloc(N_ELEMS * sizeof *x);
  CHECK(j && x);
  if (!j || !x) goto out;
  double want = expected_sum(N_ELEMS);
  for (int32_t n = 1; n <= 4; n++) {
    loom_worker *w = NULL;
    CHECK_OK(ctx, loom_worker_new(ctx, n, &w));
    if (!w) continue;
    CHECK(loom_worker_threads(w) == n);
    memset(x, 0xff, N_ELEMS * sizeof *x);
    j->x = x;
    j->n = N_ELEMS;
    for (int32_t i = 0; i < LOOM_WORKER_MAX_THREADS; i++) atomic_store(&j->calls[i], 0);
    CHECK_OK(ctx, loom_worker_submit(w, fill, j, NULL));
    loom_worker_wait(w);
    double s = 0;
    int ok = 1;
    for (int32_t i = 0; i < n; i++) {
      s += j->partial[i];
      ok &= atomic_load(&j->calls[i]) == 1;
    }
    for (int64_t i = 0; i < N_ELEMS; i++) ok &= x[i] == (float)(i % 1000);
    CHECK(ok);
    CHECK(s == want);
    CHECK(atomic_load(&j->calls[n]) == 0);
    loom_worker_free(w); /* right after wait */
  }
  CHECK(atomic_load(&j->bad_count) == 0);
out:
  free(x);
  free(j);
}

/* Each piece owns counts[index]; plain (non-atomic) increments are safe
 * because wait orders them before the caller's reads. */
typedef struct count_job {
  int64_t counts[4];
  int32_t last_count;
} count_job;

static void bump(void *p, int32_t index, int32_t count) {
  count_job *j = p;
  j->counts[index]++;
  if (index == 0) j->last_count = count;
}

static void test_cycles(loom_ctx *ctx) {
  for (int32_t n = 1; n <= 4; n++) {
    loom_worker *w = NULL;
    CHECK_OK(ctx, loom_worker_new(ctx, n, &w));
    if (!w) continue;
    count_job j = {{0}, 0};
    int failures = 0;
    for (int c = 0; c < 1000; c++) {
      if (loom_worker_submit(w, bump, &j, NULL) != LOOM_STATUS_OK) failures++;
      if (c % 3 == 0) loom_worker_wait(w);
      /* the caller reads only after waiting */
      loom_worker_wait(w);
      loom_worker_wait(w); /* a second wait returns at once */
      for (int32_t i = 0; i < n; i++) failures += j.counts[i] != c + 1;
    }
    CHECK(failures == 0);
    CHECK(j.last_count == n);
    loom_worker_free(w);
  }
}

/* The caller's OpenMP loop runs while the pool fills another array. */
static void test_overlap_openmp(loom_ctx *ctx) {
  loom_worker *w = NULL;
  CHECK_OK(ctx, loom_worker_new(ctx, 2, &w));
  fill_job *j = calloc(1, sizeof *j);
  float *x = malloc(N_ELEMS * sizeof *x), *y = malloc(N_ELEMS * sizeof *y);
  CHECK(j && x && y);
  if (w && j && x && y) {
    j->x = x;
    j->n = N_ELEMS;
    for (int rep = 0; rep < 5; rep++) {
      CHECK_OK(ctx, loom_worker_submit(w, fill, j, NULL));
#pragma omp parallel for
      for (int64_t i = 0; i < N_ELEMS; i++) y[i] = (float)(i % 7) * 0.5f;
      loom_worker_wait(w);
    }
    int ok = 1;
    for (int64_t i = 0; i < N_ELEMS; i++)
      ok &= x[i] == (float)(i % 1000) && y[i] == (float)(i % 7) * 0.5f;
    CHECK(ok);
    CHECK(j->partial[0] + j->partial[1] == expected_sum(N_ELEMS));
  }
  free(x);
  free(y);
  free(j);
  loom_worker_free(w);
}

static void nap(void *p, int32_t index, int32_t count) {
  (void)count;
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  atomic_fetch_add(&((atomic_int *)p)[index], 1);
}

static void test_misuse(loom_ctx *ctx) {
  loom_worker *w = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_worker_new(ctx, 0, &w));
  CHECK(w == NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_worker_new(ctx, LOOM_WORKER_MAX_THREADS + 1, &w));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_worker_new(ctx, 1, NULL));
  loom_worker_free(NULL);
  loom_worker_wait(NULL);
  CHECK(loom_worker_submit(NULL, nap, NULL, NULL) == LOOM_STATUS_INVALID_ARGUMENT);

  /* free without ever submitting */
  CHECK_OK(ctx, loom_worker_new(ctx, 3, &w));
  loom_worker_free(w);

  atomic_int done[2] = {0, 0};
  CHECK_OK(ctx, loom_worker_new(ctx, 2, &w));
  if (!w) return;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_worker_submit(w, NULL, NULL, NULL));
  CHECK_OK(ctx, loom_worker_submit(w, nap, done, NULL));
  /* a second task while one is in flight is an error, however fast the
   * first one is */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_worker_submit(w, nap, done, NULL));
  CHECK(strstr(loom_ctx_error(ctx), "in flight") != NULL);
  loom_worker_wait(w);
  CHECK(atomic_load(&done[0]) == 1 && atomic_load(&done[1]) == 1);
  loom_worker_trace tr = {.trace = (loom_trace *)1, .tid0 = INT32_MAX};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_worker_submit(w, nap, done, &tr));
  /* free with a task in flight waits for it */
  CHECK_OK(ctx, loom_worker_submit(w, nap, done, NULL));
  loom_worker_free(w);
  CHECK(atomic_load(&done[0]) == 2 && atomic_load(&done[1]) == 2);
}

static void test_traced(loom_ctx *ctx) {
  loom_trace *t = NULL;
  loom_worker *w = NULL;
  /* the pool first: times below count from the trace's creation */
  CHECK_OK(ctx, loom_worker_new(ctx, 3, &w));
  CHECK_OK(ctx, loom_trace_new(ctx, &t));
  if (!t || !w) goto out;
  atomic_int done[3] = {0, 0, 0};
  loom_worker_trace tr = {.trace = t, .name = "dropout mask", .cat = "rng", .lane = "rng worker",
                          .tid0 = 100};
  double first = loom_trace_now(t), last = 0;
  for (int rep = 0; rep < 3; rep++) {
    CHECK_OK(ctx, loom_worker_submit(w, nap, done, &tr));
    double b = loom_trace_now(t);
    nap(done + 0, 0, 1); /* the caller's own work meanwhile */
    CHECK(loom_trace_event(t, 0, "gemm", "gemm", b, loom_trace_now(t)));
    loom_worker_wait(w);
    last = loom_trace_now(t);
  }
  CHECK(loom_trace_count(t) == 3 * 3 + 3);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK(f != NULL);
  if (!f) goto out;
  CHECK_OK(ctx, loom_trace_write(ctx, t, f));
  fclose(f);
  loom_json *j = NULL;
  CHECK_OK(ctx, loom_json_parse(ctx, buf, len, &j));
  free(buf);
  const loom_json *ev = loom_json_get(j, "traceEvents");
  int pieces[3] = {0, 0, 0}, lanes = 0, bad = 0;
  for (int32_t i = 0; ev && i < ev->n; i++) {
    const loom_json *e = &ev->items[i];
    const loom_json *name = loom_json_get(e, "name"), *tid = loom_json_get(e, "tid");
    const loom_json *args = loom_json_get(e, "args");
    if (!name || !tid) {
      bad++;
      continue;
    }
    if (strcmp(name->str, "thread_name") == 0 && tid->i >= 100) {
      char want[32];
      snprintf(want, sizeof want, "rng worker %d", (int)(tid->i - 100));
      const loom_json *nm = loom_json_get(args, "name");
      lanes++;
      bad += !nm || strcmp(nm->str, want) != 0;
    } else if (strcmp(name->str, "dropout mask") == 0) {
      const loom_json *idx = loom_json_get(args, "index"), *cnt = loom_json_get(args, "count");
      const loom_json *ts = loom_json_get(e, "ts"), *dur = loom_json_get(e, "dur");
      bad += !idx || !cnt || !ts || !dur || tid->i != 100 + idx->i || cnt->i != 3;
      /* each piece lies between the first submit and the last wait */
      bad += ts->num < 0 || ts->num + dur->num > (last - first) * 1e6 + 1e3 || dur->num < 1.5e4;
      if (idx && idx->i >= 0 && idx->i < 3) pieces[idx->i]++;
    }
  }
  CHECK(bad == 0);
  CHECK(lanes == 3);
  CHECK(pieces[0] == 3 && pieces[1] == 3 && pieces[2] == 3);
  loom_json_free(j);
out:
  loom_worker_free(w);
  loom_trace_free(t);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  double t0 = loom_now_s();
  test_split(ctx);
  test_cycles(ctx);
  test_overlap_openmp(ctx);
  test_misuse(ctx);
  test_traced(ctx);
  printf("test_worker: %.2f s\n", loom_now_s() - t0);
  loom_ctx_free(ctx);
  return loom_test_finish("test_worker");
}
