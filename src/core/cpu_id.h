/*
 * The CPU's identity as a string: what code built with -march=native
 * depends on (the kernel cache puts it in its keys, runtime/jit.h).
 * x86: the cpuid vendor, brand string, family/model/stepping and feature
 * words, and the OS-enabled register state (xgetbv); no /proc needed.
 * Elsewhere: the auxiliary vector's hardware capabilities (getauxval) and,
 * where /proc/cpuinfo is readable, its model and feature lines.
 */
#ifndef LOOM_CORE_CPU_ID_H
#define LOOM_CORE_CPU_ID_H

/* The identity, computed once per process (a static string). */
const char *loom_cpu_identity(void);

#endif
