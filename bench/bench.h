/*
 * `loom bench`: runs the named workloads (bench/workloads.h) in every
 * execution mode and reports their times against the machine's measured
 * limits (perf/measure.h). docs/PERFORMANCE.md describes the output.
 */
#ifndef LOOM_BENCH_BENCH_H
#define LOOM_BENCH_BENCH_H

#include "loom.h"

/* The command's entry point: argv[0] is "bench". Returns the exit status
 * (0 success, 1 a failure, 2 wrong arguments). */
int loom_bench_main(int argc, char **argv);

/* This machine as a cluster description (perf/cluster.h), measured now:
 * the triad, Loom's sgemm on one thread (a device is one rank of one
 * thread), the launch cost and the MPI model the profile keeps. */
struct loom_cluster;
loom_status loom_bench_this_cluster(loom_ctx *ctx, struct loom_cluster *out);

#endif
