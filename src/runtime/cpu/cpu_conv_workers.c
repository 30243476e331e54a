/*
 * The threads that run a window op's tasks (cpu_conv_internal.h,
 * conv_run_tasks). An OpenMP loop ends in a barrier that every thread of
 * the team must reach, so on a busy machine each conv waited for its
 * second thread to be scheduled even when the first had run every task.
 * Here the caller runs tasks itself and waits only for tasks a helper has
 * claimed: a helper that wakes late finds none left and costs nothing.
 * Tasks are fixed by the shapes and write disjoint outputs, so which
 * thread runs one never changes a result.
 *
 * One job at a time: a counter holds the job's generation (high 32 bits)
 * and its next task (low 32); a task is claimed by compare-and-swap
 * against the generation the helper read the job for, and the job itself
 * sits in one of two slots by generation parity, so a helper holding a
 * stale job can never claim a task of the next one.
 */
#include "runtime/cpu/cpu_conv_internal.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>

#define MAX_HELPERS 255
#define SPINS 4000 /* pauses a helper waits for the next job before it sleeps */

typedef struct work_job {
  bool (*task)(const void *user, int64_t t);
  const void *user;
  int64_t tasks;
  int32_t helpers; /* helpers 0 .. helpers - 1 may take tasks */
} work_job;

static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t sleep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static work_job slot[2];
static _Atomic uint64_t claim; /* generation << 32 | next task */
static _Atomic int64_t done;   /* tasks of the current job finished */
static _Atomic int failed;
static _Atomic int sleepers;
static int32_t n_helpers; /* started (under job_lock) */
static _Thread_local int32_t helper_index; /* helper k: k + 1; 0 elsewhere */

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Claims and runs tasks of generation gen while any are left. */
static void run_claimed(uint32_t gen, const work_job *j) {
  for (;;) {
    uint64_t v = atomic_load(&claim);
    if ((uint32_t)(v >> 32) != gen || (int64_t)(v & 0xffffffffu) >= j->tasks) return;
    if (!atomic_compare_exchange_weak(&claim, &v, v + 1)) continue;
    if (!j->task(j->user, (int64_t)(v & 0xffffffffu))) atomic_store(&failed, 1);
    atomic_fetch_add(&done, 1);
  }
}

static void *helper_main(void *arg) {
  int32_t me = (int32_t)(intptr_t)arg;
  helper_index = me + 1;
  omp_set_num_threads(1); /* oneDNN's reorders run on the calling thread */
  uint32_t seen = (uint32_t)(atomic_load(&claim) >> 32);
  for (;;) {
    uint32_t gen = seen;
    for (int i = 0; i < SPINS && gen == seen; i++) {
      cpu_pause();
      gen = (uint32_t)(atomic_load(&claim) >> 32);
    }
    if (gen == seen) {
      pthread_mutex_lock(&sleep_lock);
      atomic_fetch_add(&sleepers, 1);
      while ((gen = (uint32_t)(atomic_load(&claim) >> 32)) == seen)
        pthread_cond_wait(&wake, &sleep_lock);
      atomic_fetch_sub(&sleepers, 1);
      pthread_mutex_unlock(&sleep_lock);
    }
    seen = gen;
    /* a copy: the slot is rewritten two jobs on, and then the claim fails */
    work_job j = slot[gen & 1];
    if (me < j.helpers) run_claimed(gen, &j);
  }
  return NULL;
}

/* Starts helpers up to n (job_lock held); how many there are. */
static int32_t start_helpers(int32_t n) {
  while (n_helpers < n && n_helpers < MAX_HELPERS) {
    pthread_t t;
    pthread_attr_t at;
    if (pthread_attr_init(&at)) break;
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &at, helper_main, (void *)(intptr_t)n_helpers);
    pthread_attr_destroy(&at);
    if (rc) break;
    n_helpers++;
  }
  return LOOM_MIN(n, n_helpers);
}

bool conv_run_workers(int32_t threads, int64_t tasks, bool (*task)(const void *user, int64_t t),
                      const void *user) {
  if (threads <= 1 || tasks <= 1 || tasks > 0xffffffffLL || omp_in_parallel() ||
      pthread_mutex_trylock(&job_lock) != 0)
    return conv_run_inline(tasks, task, user);
  int32_t helpers = start_helpers(threads - 1);
  if (helpers < 1) {
    pthread_mutex_unlock(&job_lock);
    return conv_run_inline(tasks, task, user);
  }
  uint32_t gen = (uint32_t)(atomic_load(&claim) >> 32) + 1;
  slot[gen & 1] = (work_job){task, user, tasks, helpers};
  atomic_store(&done, 0);
  atomic_store(&failed, 0);
  atomic_store(&claim, (uint64_t)gen << 32);
  if (atomic_load(&sleepers) > 0) {
    pthread_mutex_lock(&sleep_lock);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&sleep_lock);
  }
  int prev = omp_get_max_threads();
  omp_set_num_threads(1);
  run_claimed(gen, &slot[gen & 1]);
  omp_set_num_threads(prev);
  while (atomic_load(&done) < tasks) /* only tasks a helper is running */
    cpu_pause();
  bool ok = !atomic_load(&failed);
  pthread_mutex_unlock(&job_lock);
  return ok;
}

int32_t conv_worker_index(void) { return helper_index ? helper_index : omp_get_thread_num(); }
