/*
 * In-place updates: when may a kernel write one of its outputs into the
 * memory of one of its inputs? (An optimizer's parameter, moment and
 * variance, updated element by element: the memory plan lets the caller's
 * tensor take the new value, and the run skips a copy back; see
 * passes/memplan.h, "in_place".)
 */
#ifndef LOOM_KERNEL_IN_PLACE_H
#define LOOM_KERNEL_IN_PLACE_H

#include "kernel/kernel.h"

/*
 * True if kernel k computes the same results when output argument `out`
 * shares the memory of input argument `in`. That holds when every element
 * of `in` is read only where, and before, the same element of `out` is
 * written:
 *   - `out` is written by one STORE (not a column reduction) whose map is
 *     one-to-one over its part's domain, so each element is written once,
 *     by the row (hence the tile, hence the thread) that owns it;
 *   - every LOAD of `in` in that part is in the same stage, at the same
 *     map, and feeds the stored value: the store depends on the load, so
 *     it can only come after it, however a code generator orders the
 *     element's code (the C generator's arguments are restrict; a data
 *     dependence is an order no compiler may break);
 *   - every other part that loads `in` runs in an earlier phase (phases
 *     are separated by a barrier); none of the same or a later phase does.
 * Both arguments have one dtype and element count. Conservative: false
 * for anything else.
 */
bool loom_kernel_in_place_ok(const loom_kernel *k, int32_t in, int32_t out);

/* The input arguments that output argument `out` may overwrite (those for
 * which loom_kernel_in_place_ok holds, trying only the inputs the stored
 * value loads at the store's own map), in argument order: writes up to
 * max of them to in[] and returns how many there are. */
int32_t loom_kernel_in_place_inputs(const loom_kernel *k, int32_t out, int32_t *in, int32_t max);

#endif
