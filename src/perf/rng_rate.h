/*
 * The measured rate of the Philox paths (rng/philox_fast.h): what
 * `loom bench rng` reports and what the RNG placement model reads.
 */
#ifndef LOOM_PERF_RNG_RATE_H
#define LOOM_PERF_RNG_RATE_H

#include <stdint.h>

/* Random bytes per second, all threads together, of Philox4x32-`rounds` on
 * `path` (a loom_philox_path, or LOOM_PHILOX_PATH_BEST), each of `threads`
 * OpenMP threads filling its own L1-sized buffer for about `seconds` after
 * a short warm-up. Per core: divide by threads. -1 if the path is not
 * supported here or an argument is out of range. */
double loom_philox_bench(int path, int rounds, int threads, double seconds);

#endif
