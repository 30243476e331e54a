/*
 * The turn probe (measure.h, loom_measure_turns): how long a rank that
 * polls for its peers (comm_mpi.c's waits: tests, a spin, then pauses of
 * loom_comm_poll_pause) takes to see a peer's message, with the cores to
 * itself and when more processes than cores time-share them. Two forked
 * processes ping-pong through a shared counter, waiting exactly as the
 * MPI waits do; the others run a busy loop, as ranks computing.
 */
#define _GNU_SOURCE /* sched_setaffinity */
#include "perf/measure.h"

#include "comm/comm.h"
#include "core/clock.h"

#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PERIOD_PAUSES 200
/* a round: about a layer's compute between two collectives, then a barrier */
#define ROUND_WORK_S 1e-3
#define ROUNDS_S 0.25
#define WARM_ROUNDS 10
#define TURN_ROUNDS 3
#define PROBE_MAX_RANKS LOOM_MEASURE_TURNS_MAX_RANKS
#define PROBE_DEADLINE_S 10.0

/* Shared by the forked processes (an anonymous shared mapping). */
typedef struct board {
  _Atomic int64_t arrived; /* barrier arrivals, all rounds */
  _Atomic int32_t stop;
  _Atomic int32_t started;
  double round_s; /* process 0's result: the mean round */
} board;

/* Until b->arrived reaches `want` (or stop), as a rank waits for a request. */
static void wait_for(board *b, int64_t want) {
  double spin_until = loom_now_s() + loom_comm_spin_seconds(0);
  for (int32_t spins = 0; atomic_load(&b->arrived) < want && !atomic_load(&b->stop); spins++)
    if (loom_now_s() >= spin_until) loom_comm_poll_pause(spins);
}

static float busy_work(int32_t reps) {
  static float x[1024];
  for (int32_t r = 0; r < reps; r++)
    for (int32_t i = 0; i < 1024; i++) x[i] = x[i] * 0.999f + 1.0f;
  return x[reps % 1024];
}

/* Every process may run on any of the cores: none bound. */
static void unbind(int32_t cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int32_t c = 0; c < cores && c < CPU_SETSIZE; c++) CPU_SET(c, &set);
  (void)sched_setaffinity(0, sizeof set, &set);
}

/* Rounds of `reps` of work, then a barrier of all `ranks`; process 0
 * times the rounds after a warm-up. */
static void run_rounds(board *b, int32_t self, int32_t ranks, int32_t reps) {
  atomic_fetch_add(&b->started, 1);
  while (atomic_load(&b->started) < ranks && !atomic_load(&b->stop)) {}
  volatile float sink = 0;
  double t0 = 0;
  for (int64_t i = 0; !atomic_load(&b->stop); i++) {
    if (self == 0 && i == WARM_ROUNDS) t0 = loom_now_s();
    sink += busy_work(reps);
    atomic_fetch_add(&b->arrived, 1);
    wait_for(b, (i + 1) * ranks);
    if (self == 0 && i >= WARM_ROUNDS && loom_now_s() - t0 >= ROUNDS_S) {
      b->round_s = (loom_now_s() - t0) / (double)(i + 1 - WARM_ROUNDS);
      atomic_store(&b->stop, 1);
    }
  }
}

/* The mean round of `ranks` processes on `cores`, or 0 when a process
 * could not start. */
static double mean_round(board *b, int32_t cores, int32_t ranks, int32_t reps) {
  atomic_store(&b->arrived, 0);
  atomic_store(&b->stop, 0);
  atomic_store(&b->started, 0);
  b->round_s = 0;
  pid_t pids[PROBE_MAX_RANKS];
  pid_t parent = getpid();
  int32_t n = 0;
  for (; n < ranks; n++) {
    pid_t pid = fork();
    if (pid < 0) break;
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      unbind(cores);
      run_rounds(b, n, ranks, reps);
      _exit(0);
    }
    pids[n] = pid;
  }
  if (n < ranks) atomic_store(&b->stop, 1);
  /* process 0 ends the rounds; a stuck probe is cut off */
  double until = loom_now_s() + PROBE_DEADLINE_S;
  while (!atomic_load(&b->stop) && loom_now_s() < until)
    nanosleep(&(struct timespec){0, 5000000}, NULL);
  atomic_store(&b->stop, 1);
  for (int32_t i = 0; i < n; i++) waitpid(pids[i], NULL, 0);
  return n == ranks ? b->round_s : 0;
}

/* Reps of busy_work that take about `seconds` on one core alone. */
static int32_t work_reps(double seconds) {
  int32_t reps = 1;
  for (;;) {
    double t0 = loom_now_s();
    volatile float sink = busy_work(reps);
    (void)sink;
    double t = loom_now_s() - t0;
    if (t >= seconds / 4 || reps >= (1 << 24)) return (int32_t)(reps * seconds / (t > 0 ? t : 1e-9));
    reps *= 2;
  }
}

loom_status loom_measure_turns(loom_ctx *ctx, int32_t cores, int32_t ranks,
                               loom_turn_result *out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "measure turns: out is NULL");
  *out = (loom_turn_result){0, 0};
  if (cores < 1 || ranks < 2 || ranks > PROBE_MAX_RANKS)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "measure turns: %d ranks on %d cores (want 2..%d ranks, a core or more)",
                      (int)ranks, (int)cores, PROBE_MAX_RANKS);
  double t0 = loom_now_s();
  for (int32_t i = 0; i < PERIOD_PAUSES; i++) loom_comm_poll_pause(INT32_MAX);
  out->poll_period_s = (loom_now_s() - t0) / PERIOD_PAUSES;
  if (ranks <= cores) return LOOM_STATUS_OK;
  board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED)
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "measure turns: no shared mapping");
  /* rounds with as many processes as cores and with `ranks`, in turns,
   * medians: the machine's other work drifts, and slows both alike */
  int32_t reps = work_reps(ROUND_WORK_S);
  double fit[TURN_ROUNDS], crowded[TURN_ROUNDS];
  for (int32_t r = 0; r < TURN_ROUNDS; r++) {
    fit[r] = mean_round(b, cores, cores, reps);
    crowded[r] = mean_round(b, cores, ranks, reps);
  }
  munmap(b, sizeof *b);
  double one = loom_median(fit, TURN_ROUNDS), t = loom_median(crowded, TURN_ROUNDS);
  if (!(one > 0 && t > 0))
    return loom_error(ctx, LOOM_STATUS_IO, "measure turns: the probe's processes did not run");
  /* `ranks` processes' work takes ranks / cores times as long as `cores`
   * processes' (a round: the work and the barrier); the rest is the
   * barrier's wait for the ranks - cores members off a core */
  double beyond = t - (double)ranks / cores * one;
  out->turn_s = beyond > 0 ? beyond / (ranks - cores) : 0;
  return LOOM_STATUS_OK;
}
