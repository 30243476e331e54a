/* Shared helpers for the test programs: checks that count failures. */
#ifndef LOOM_TESTS_COMMON_H
#define LOOM_TESTS_COMMON_H

#include "loom.h"

#include <stdio.h>

extern int loom_test_failures;
extern int loom_test_checks;

#define CHECK(cond)                                                            \
  do {                                                                         \
    loom_test_checks++;                                                        \
    if (!(cond)) {                                                             \
      loom_test_failures++;                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

/* Checks that a loom call returned OK; prints the context's message if not. */
#define CHECK_OK(ctx, expr)                                                    \
  do {                                                                         \
    loom_status s_ = (expr);                                                   \
    loom_test_checks++;                                                        \
    if (s_ != LOOM_STATUS_OK) {                                                \
      loom_test_failures++;                                                    \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr,      \
              loom_status_name(s_), loom_ctx_error(ctx));                      \
    }                                                                          \
  } while (0)

/* Checks that a call failed with the given status and left a message. */
#define CHECK_STATUS(ctx, expected, expr)                                      \
  do {                                                                         \
    loom_status s_ = (expr);                                                   \
    loom_test_checks++;                                                        \
    if (s_ != (expected) || loom_ctx_error(ctx)[0] == '\0') {                  \
      loom_test_failures++;                                                    \
      fprintf(stderr, "%s:%d: %s -> %s (wanted %s), message '%s'\n", __FILE__, \
              __LINE__, #expr, loom_status_name(s_),                           \
              loom_status_name(expected), loom_ctx_error(ctx));                \
    }                                                                          \
  } while (0)

/* Prints "N passed, N failed" and returns the exit code for main. */
int loom_test_finish(const char *name);

/* Removes a file or a directory tree (symlinks are removed, not followed).
 * Each test program runs with XDG_CACHE_HOME set to a private temporary
 * directory that common.c creates before main and removes at exit. */
void loom_test_remove_tree(const char *path);
/* Removes that directory now: for a process about to end without exit
 * handlers (_exit, MPI_Abort). Only in the process that made it. */
void loom_test_remove_cache(void);
/* True if the differential tests run device backend `name`: the host
 * backends (ref, cpu) always; a device backend (opencl, cuda) unless
 * $LOOM_TEST_BACKENDS is set and does not list it (comma-separated, e.g.
 * "cuda": the GPU check skips PoCL there). */
bool loom_test_backend_selected(const char *name);

/* Deterministic pseudo-random numbers for test data (xorshift). */
typedef struct loom_test_rng {
  uint64_t s;
} loom_test_rng;
double loom_test_uniform(loom_test_rng *r, double lo, double hi);

/* Runs g once on a session with options o (NULL: defaults) on inputs in
 * (one per graph input); the outputs, or NULL with the failure counted and
 * its message printed. */
loom_tensor **loom_test_run(loom_ctx *ctx, const loom_graph *g, const loom_session_options *o,
                            loom_tensor *const *in);
/* How loom_test_gpt_fill_inputs fills a training-step graph of model/gpt.h
 * (inputs by name, in order, one draw per element unless said otherwise). */
typedef struct loom_test_gpt_fill {
  uint64_t seed;
  int64_t vocab;           /* tokens and targets: [0, vocab) */
  float step, lr;          /* the inputs "step" and "lr" (no draw) */
  double lo, hi;           /* every other float */
  double v_lo, v_hi;       /* second moments, "adam.v.*" */
  bool zero_moments;       /* every "adam.*" 0 instead (no draw) */
  double gain_lo, gain_hi; /* names ending ".g" (norm gains), when gain_hi > gain_lo */
} loom_test_gpt_fill;
loom_tensor **loom_test_gpt_fill_inputs(loom_ctx *ctx, const loom_graph *g,
                                        const loom_test_gpt_fill *f);
/* The usual fill: tokens in [0, 256), step 3, lr 1e-2, second moments in
 * [1e-4, 1e-3), every other float in [-0.2, 0.2), from seed. */
loom_tensor **loom_test_gpt_inputs(loom_ctx *ctx, const loom_graph *g, uint64_t seed);
/* Inputs of an all-f32 graph, uniform in [-1, 1) from seed (NULL-ended). */
loom_tensor **loom_test_uniform_inputs(loom_ctx *ctx, const loom_graph *g, uint64_t seed);
/* Frees n tensors and the array (either may be NULL). */
void loom_test_free_tensors(loom_tensor **t, int32_t n);
/* max |got - want| / rms(want - base), f32 tensors; base NULL: rms(want).
 * An output that updates an input (a weight) is compared as its update.
 * Infinity for a missing or mis-sized tensor or a NaN. */
double loom_test_update_error(const loom_tensor *want, const loom_tensor *got,
                              const loom_tensor *base);

#endif
