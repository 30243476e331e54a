/*
 * `loom bench`: runs the named workloads (bench/workloads.h) in every
 * execution mode and reports their times against the machine's measured
 * limits (perf/measure.h). docs/PERFORMANCE.md describes the output.
 */
#ifndef LOOM_BENCH_BENCH_H
#define LOOM_BENCH_BENCH_H

/* The command's entry point: argv[0] is "bench". Returns the exit status
 * (0 success, 1 a failure, 2 wrong arguments). */
int loom_bench_main(int argc, char **argv);

#endif
