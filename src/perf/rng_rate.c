#include "perf/rng_rate.h"
#include "core/clock.h"

#include "rng/philox_fast.h"

#include <stdlib.h>
#include <time.h>

/* Blocks per call: 16 KiB of output stays in L1, so the figure is the
 * generator's, not the memory system's. */
#define BENCH_BLOCKS 1024
/* Timed windows; the rate is their median. */
#define BENCH_WINDOWS 5

double loom_philox_bench(int path, int rounds, int threads, double seconds) {
  if (path == LOOM_PHILOX_PATH_BEST) path = loom_philox_best_path();
  if (!loom_philox_path_supported(path) || rounds < 0 || rounds > LOOM_PHILOX_MAX_ROUNDS ||
      threads < 1 || !(seconds > 0.0))
    return -1.0;
  /* Window 0 is a warm-up (wide vector units and clocks settle). In each
   * window every thread generates freely until the window's end; the rate
   * is everything made over the window's wall time, so threads that share
   * a core, or lose it to another process, count as they really ran
   * (no lock-step barriers inside a window for a preempted thread to stall). */
  double window = seconds / BENCH_WINDOWS, rate[BENCH_WINDOWS];
  if (window < 0.01) window = 0.01;
  int failed = 0;
  int64_t made = 0;
  double t0 = 0.0;
#pragma omp parallel num_threads(threads) reduction(| : failed)
  {
    uint32_t *buf = malloc(sizeof(uint32_t) * 4 * BENCH_BLOCKS);
    if (!buf) failed = 1;
    for (int w = -1; w < BENCH_WINDOWS; w++) {
#pragma omp master
      {
        made = 0;
        t0 = loom_now_s();
      }
#pragma omp barrier
      double end = t0 + (w < 0 ? 0.02 : window);
      int64_t mine = 0;
      uint64_t b = 0;
      while (buf && loom_now_s() < end) {
        loom_philox_blocks(path, (uint64_t)w, b, BENCH_BLOCKS, rounds, buf);
        b += BENCH_BLOCKS;
        mine += BENCH_BLOCKS;
      }
#pragma omp atomic
      made += mine;
#pragma omp barrier
#pragma omp master
      if (w >= 0) rate[w] = (double)made * 16.0 / (loom_now_s() - t0);
#pragma omp barrier
    }
    free(buf);
  }
  if (failed) return -1.0;
  return loom_median(rate, BENCH_WINDOWS);
}
