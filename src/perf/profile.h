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
 *
 * The file's first line names its format, `profile_version N`. A file of
 * another version (or of none: written before versions) is stale: it
 * reads as empty, so every fact is measured again, and the next put
 * starts the file afresh. Bump LOOM_PROFILE_VERSION when a measurement's
 * method or the kernels it times change, rather than renaming its keys.
 */
#ifndef LOOM_PERF_PROFILE_H
#define LOOM_PERF_PROFILE_H

#include <stdbool.h>
#include <stddef.h>

/* 2: the attention choice's rates (attn_*) from one core's CPU time, the
 * flash forward on transposed scores (they were attn_v2_* keys before). */
/* 3: flash attention's AVX2 tile set (BEST on CPUs without AVX-512): the
 * attn_* rates of such a machine were the plain C set's; and the flash
 * rate curve's short point at 32 keys instead of 128. */
/* 4: GEMM operands of a thrashing row stride restrided (gemm_restride.h):
 * the GEMM rates kept (sgemm, attention, RNG overlap, the epilogue rows
 * curve) were measured without it. */
#define LOOM_PROFILE_VERSION 4

/* The value of key in this machine's profile; false if absent, the file
 * is missing, or the value is not a finite number. */
bool loom_profile_get(const char *key, double *value);
/* Records key = value (replacing an earlier one). Best effort: a missing
 * or read-only cache directory only costs a measurement next time; a
 * planted symlink or FIFO is left alone. Keys are [a-z0-9_]+. */
void loom_profile_put(const char *key, double value);

/* Several facts at once, each key followed by suffix (may be ""): true
 * only if every one is present and finite (values[] is then filled; on
 * false it may be partly written). One read of the file. */
bool loom_profile_get_all(const char *const *keys, int n, const char *suffix, double *values);
/* Records every key + suffix = values[i] in one write; none if any value
 * is not finite or any key is not valid. */
void loom_profile_put_all(const char *const *keys, int n, const char *suffix,
                          const double *values);

/* The profile file's path for this process (cores, wait policy, cache
 * directory); false without a cache directory. */
bool loom_profile_path(char *buf, size_t n);

#endif
