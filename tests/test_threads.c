/* Threads (the rules are in loom.h): two sessions on two contexts run at
 * the same time and give the results they give alone; one session entered
 * from two threads at once refuses the second call with LOOM_STATUS_BUSY
 * and never returns a wrong result. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 192, RUNS = 100 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* y = tanh(x @ w) * 0.5 + x, x and w [N, N]: a GEMM and a fused kernel. */
static loom_graph *build(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_value x, w, h, t, half, hs, y;
  int64_t s[2] = {N, N};
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return NULL;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, s, &x));
  CHECK_OK(ctx, loom_graph_input(g, "w", LOOM_DTYPE_F32, 2, s, &w));
  CHECK_OK(ctx, loom_graph_input(g, "half", LOOM_DTYPE_F32, 0, NULL, &half));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){x, w}, 0, NULL, &h));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_TANH, 1, &h, 0, NULL, &t));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MUL, 2, (loom_value[]){t, half}, 0, NULL, &hs));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_ADD, 2, (loom_value[]){hs, x}, 0, NULL, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  return g;
}

/* One thread's inputs (x depends on its seed, so results differ by
 * thread), its output tensor and what the output must be. */
typedef struct work {
  loom_tensor *in[3], *out;
  float *want; /* a run alone, checked against doubles */
} work;

static loom_tensor *filled(loom_ctx *ctx, int32_t rank, uint64_t seed, double lo, double hi) {
  loom_tensor *t = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, rank, (int64_t[]){N, N}, &t));
  if (!t) return NULL;
  loom_test_rng r = {seed};
  float *d = loom_tensor_data(t);
  for (int64_t i = 0; i < loom_tensor_numel(t); i++)
    d[i] = (float)loom_test_uniform(&r, lo, hi);
  return t;
}

static bool work_init(loom_ctx *ctx, work *w, uint64_t seed) {
  memset(w, 0, sizeof *w);
  w->in[0] = filled(ctx, 2, seed, -1, 1);
  w->in[1] = filled(ctx, 2, 77, -0.2, 0.2);
  w->in[2] = filled(ctx, 0, 1, 0.5, 0.5);
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){N, N}, &w->out));
  w->want = calloc((size_t)N * N, sizeof *w->want);
  return w->in[0] && w->in[1] && w->in[2] && w->out && w->want;
}

static void work_free(work *w) {
  for (int i = 0; i < 3; i++)
    loom_tensor_free(w->in[i]);
  loom_tensor_free(w->out);
  free(w->want);
}

static loom_status run(loom_session *s, work *w) {
  return loom_session_run(s, 3, (const loom_tensor *const *)w->in, 1, &w->out);
}

static bool out_is_want(const work *w) {
  return memcmp(loom_tensor_data(w->out), w->want, sizeof(float) * N * N) == 0;
}

/* w->want from a run alone on s, which must agree with doubles. */
static void expect_alone(loom_ctx *ctx, loom_session *s, work *w) {
  CHECK_OK(ctx, run(s, w));
  memcpy(w->want, loom_tensor_data(w->out), sizeof(float) * N * N);
  const float *x = loom_tensor_data(w->in[0]), *wt = loom_tensor_data(w->in[1]);
  double worst = 0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int k = 0; k < N; k++)
        acc += (double)x[i * N + k] * wt[k * N + j];
      double y = tanh(acc) * 0.5 + x[i * N + j];
      worst = fmax(worst, fabs(y - w->want[i * N + j]));
    }
  CHECK(worst < 1e-5);
}

/* ---- two sessions, two threads -------------------------------------------- */

typedef struct own {
  loom_ctx *ctx; /* made here, used only by the thread until it ends */
  loom_graph *g;
  work w;
  pthread_barrier_t *start;
  int wrong, failed;
} own;

/* A thread with its own context, graph, session and inputs (no CHECKs
 * here: the counters are not atomic). */
static void *own_thread(void *arg) {
  own *o = arg;
  loom_session *s = NULL;
  /* sessions are made at the same time too (one kernel cache) */
  pthread_barrier_wait(o->start);
  bool ok = loom_session_new(o->ctx, o->g, NULL, &s) == LOOM_STATUS_OK;
  pthread_barrier_wait(o->start);
  for (int r = 0; ok && r < RUNS; r++) {
    memset(loom_tensor_data(o->w.out), 0, sizeof(float) * N * N);
    if (run(s, &o->w) != LOOM_STATUS_OK)
      o->failed++;
    else if (!out_is_want(&o->w))
      o->wrong++;
  }
  if (!ok) o->failed++;
  loom_session_free(s);
  return NULL;
}

static void test_two_sessions(void) {
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 2);
  own o[2] = {{.start = &start}, {.start = &start}};
  bool ready = true;
  for (int i = 0; i < 2; i++) {
    ready = ready && loom_ctx_new(&o[i].ctx) == LOOM_STATUS_OK;
    if (!ready) break;
    CHECK_OK(o[i].ctx, loom_ctx_set_threads(o[i].ctx, 1));
    o[i].g = build(o[i].ctx);
    ready = o[i].g && work_init(o[i].ctx, &o[i].w, 11 + (uint64_t)i);
    /* what this thread must get: a run alone, checked against doubles */
    loom_session *s = NULL;
    if (ready) CHECK_OK(o[i].ctx, loom_session_new(o[i].ctx, o[i].g, NULL, &s));
    if (s) expect_alone(o[i].ctx, s, &o[i].w);
    ready = ready && s;
    loom_session_free(s);
  }
  if (ready) {
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
      CHECK(pthread_create(&th[i], NULL, own_thread, &o[i]) == 0);
    for (int i = 0; i < 2; i++)
      pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
      if (o[i].failed) fprintf(stderr, "thread %d: %s\n", i, loom_ctx_error(o[i].ctx));
      CHECK(o[i].failed == 0 && o[i].wrong == 0);
    }
    printf("two sessions on two threads: %d runs each, wrong %d and %d\n", RUNS, o[0].wrong,
           o[1].wrong);
  }
  CHECK(ready);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < 2; i++) {
    work_free(&o[i].w);
    loom_graph_free(o[i].g);
    loom_ctx_free(o[i].ctx);
  }
}

/* ---- one session, two threads -------------------------------------------- */

typedef struct shared {
  loom_session *s;
  work w;
  atomic_bool stop;
  int ok, busy, wrong, other;
} shared;

/* Runs the shared session back to back until told to stop. */
static void *busy_thread(void *arg) {
  shared *sh = arg;
  for (int r = 0; r < 100000 && !atomic_load(&sh->stop); r++) {
    memset(loom_tensor_data(sh->w.out), 0, sizeof(float) * N * N);
    loom_status st = run(sh->s, &sh->w);
    if (st == LOOM_STATUS_BUSY)
      sh->busy++;
    else if (st != LOOM_STATUS_OK)
      sh->other++;
    else if (!out_is_want(&sh->w))
      sh->wrong++;
    else
      sh->ok++;
  }
  return NULL;
}

static void test_one_session(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return;
  CHECK_OK(ctx, loom_ctx_set_threads(ctx, 1));
  loom_graph *g = build(ctx);
  shared sh = {0}, mine = {0};
  bool ready = g && work_init(ctx, &sh.w, 21) && work_init(ctx, &mine.w, 22);
  if (ready) CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &sh.s));
  if (!sh.s) ready = false;
  if (ready) {
    mine.s = sh.s;
    expect_alone(ctx, sh.s, &sh.w);
    expect_alone(ctx, sh.s, &mine.w);
    atomic_store(&sh.stop, false);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, busy_thread, &sh) == 0);
    /* meanwhile this thread uses the same session: until it has been
     * refused a few times (the other thread is almost always inside a
     * run), or 20 s went by */
    double t0 = now_s();
    for (int r = 0; (mine.busy < 20 || r < 200) && now_s() - t0 < 20.0; r++) {
      memset(loom_tensor_data(mine.w.out), 0, sizeof(float) * N * N);
      loom_status st = run(sh.s, &mine.w);
      if (st == LOOM_STATUS_BUSY)
        mine.busy++;
      else if (st != LOOM_STATUS_OK)
        mine.other++;
      else if (!out_is_want(&mine.w))
        mine.wrong++;
      else
        mine.ok++;
    }
    atomic_store(&sh.stop, true);
    pthread_join(th, NULL);
    printf("one session, two threads: other thread %d ok, %d busy, %d wrong; this thread %d ok, "
           "%d busy, %d wrong\n",
           sh.ok, sh.busy, sh.wrong, mine.ok, mine.busy, mine.wrong);
    /* never a wrong result or another error; the overlap was refused */
    CHECK(sh.wrong == 0 && mine.wrong == 0 && sh.other == 0 && mine.other == 0);
    /* which thread wins the session is the scheduler's choice (on a busy
     * machine one thread can hold it throughout): runs overlapped, were
     * refused on one side, and completed on the other */
    CHECK(sh.ok + mine.ok > 0 && sh.busy + mine.busy > 0);
    /* a refused call leaves the context alone (it belongs to the runner) */
    CHECK(strcmp(loom_ctx_error(ctx), "") == 0);
    /* and afterwards the session runs as before */
    CHECK_OK(ctx, run(sh.s, &mine.w));
    CHECK(out_is_want(&mine.w));
  }
  CHECK(strcmp(loom_status_name(LOOM_STATUS_BUSY), "busy") == 0);
  loom_session_free(sh.s);
  work_free(&sh.w);
  work_free(&mine.w);
  loom_graph_free(g);
  loom_ctx_free(ctx);
}

int main(void) {
  test_two_sessions();
  test_one_session();
  return loom_test_finish("test_threads");
}
