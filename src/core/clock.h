/* Wall-clock time and medians, for timing runs (benchmarks, progress lines,
 * compile times, the machine's measured rates). */
#ifndef LOOM_CORE_CLOCK_H
#define LOOM_CORE_CLOCK_H

#include <stdint.h>

/* Seconds on a monotonic clock (only differences mean anything). */
double loom_now_s(void);
/* CPU seconds of the calling thread: unlike wall time, not stretched when
 * other processes share the cores. */
double loom_thread_cpu_s(void);
/* The median of v[0..n) (n >= 1); sorts v in place. */
double loom_median(double *v, int32_t n);

#endif
