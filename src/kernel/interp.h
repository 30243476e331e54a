/*
 * The kernel IR interpreter: runs a kernel exactly as kernel.h specifies,
 * on one thread, element by element. Slow and literal: the oracle the code
 * generators are compared with (bit for bit) and the executor of lowering
 * tests.
 */
#ifndef LOOM_KERNEL_INTERP_H
#define LOOM_KERNEL_INTERP_H

#include "kernel/kernel.h"

/* Verifies k, then runs it. args[i] is the base pointer of argument i
 * (ignored for temps, which live in a workspace allocated here). */
loom_status loom_kernel_interpret(loom_ctx *ctx, const loom_kernel *k, void *const *args);

#endif
