/* The lowering harness (test_lower, test_lower_analyze): a graph put in
 * one group, lowered in stitch mode, run by the kernel interpreter and
 * compared with the reference executor output by output; and the small
 * builders its cases share. */
#ifndef LOOM_TESTS_LOWER_CHECK_H
#define LOOM_TESTS_LOWER_CHECK_H

#include "common.h"

#include "fusion/group.h"

/* One case: its name, the inputs' ranges and what the lowering must give. */
typedef struct loom_lower_case {
  const char *name;
  double lo, hi;       /* f32 inputs uniform in [lo, hi) */
  int64_t ilo, ihi;    /* integer inputs uniform in [ilo, ihi] */
  int loop_ok;         /* expected loop-mode verdict: 1 yes, 0 no, -1 unchecked */
  int32_t want_parts;  /* expected parts (0: unchecked) */
  int32_t want_phases; /* expected phases (0: unchecked) */
} loom_lower_case;

/* Runs g0 (composites allowed) through the reference and through one
 * stitched kernel; compares every output. */
void loom_test_lower_check(loom_ctx *ctx, loom_graph *g0, const loom_lower_case *tc);

/* A graph input; an op with public attributes (the output, -1 on failure). */
int32_t loom_test_lower_input(loom_graph *g, const char *name, loom_dtype dt, int32_t rank,
                              const int64_t *shape);
int32_t loom_test_lower_op(loom_graph *g, loom_op op, int32_t n, const int32_t *in, int32_t n_attr,
                           const loom_attr *attrs);
/* sum(y * w) with a new input w: a scalar loss whose gradient wrt y is w. */
int32_t loom_test_lower_loss(loom_graph *g, int32_t y, int32_t rank, const int64_t *shape);

#endif
