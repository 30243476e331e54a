/*
 * The machine profile: measured facts that must not change from one
 * process to the next with timer noise (a plan or a schedule that flipped
 * would recompile and change results' rounding), kept in one small text
 * file per machine,
 *
 *   $XDG_CACHE_HOME/loom (or ~/.cache/loom)/machine-<cores>[-<wait policy>].txt
 *
 * (cores: the online cores), one `key value` line per fact (a number), e.g.
 *
 *   kernel_launch_s 5e-07
 *   triad_gbps 30
 *   sgemm_gflops 200
 *   comm_mpi_latency_s 4.1e-06
 *   comm_mpi_bytes_per_s 6.3e+09
 *
 * OMP_WAIT_POLICY=passive makes every fork/join a futex wake-up (~100x
 * the spinning cost), so each policy keeps its own file. Unknown keys and
 * malformed lines are ignored; delete the file to measure again.
 */
#ifndef LOOM_PERF_PROFILE_H
#define LOOM_PERF_PROFILE_H

#include <stdbool.h>

/* The value of key in this machine's profile; false if absent, the file
 * is missing, or the value is not a finite number. */
bool loom_profile_get(const char *key, double *value);
/* Records key = value (replacing an earlier one). Best effort: a missing
 * or read-only cache directory only costs a measurement next time; a
 * planted symlink or FIFO is left alone. Keys are [a-z0-9_]+. */
void loom_profile_put(const char *key, double value);

#endif
