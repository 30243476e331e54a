/* Helpers the ONNX model tests share (test_onnx_models, test_onnx_attention,
 * test_onnx_ops, test_onnx_ocr): a graph written node by node with
 * tests/onnx_writer.h, initializers of random values copied to the host
 * for the loops that check them, and the run of a model on every mode
 * against those loops. */
#ifndef LOOM_TESTS_ONNX_MODELS_COMMON_H
#define LOOM_TESTS_ONNX_MODELS_COMMON_H

#include "common.h"
#include "onnx_writer.h"

#include "core/ctx.h"
#include "onnx/import.h"
#include "onnx/model.h"

#include <stdbool.h>
#include <stdint.h>

/* The context each test's main makes, and the random stream every
 * initializer and input is drawn from (one per test program). */
extern loom_ctx *ctx;
extern loom_test_rng rng;

/* ---- a graph under construction ------------------------------------------- */

typedef struct gw {
  pbw g;
  int n; /* names made */
} gw;

/* A new value name (t1, t2, ...). */
const char *fresh(gw *w);
/* A node of op with one new output, its attributes appended (and freed). */
const char *node(gw *w, const char *op, int n_in, const char *const *in, pbw *attrs, int n_attrs);
const char *op1(gw *w, const char *op, const char *a);
const char *op2(gw *w, const char *op, const char *a, const char *b);
/* An f32 initializer of uniform values in [-s, s) (copied to host). */
const char *weight(gw *w, int rank, const int64_t *dims, float *host, double s);
/* A scalar f32 initializer; an i64 vector initializer. */
const char *scalar_f(gw *w, float v);
const char *ints(gw *w, int n, const int64_t *v);

/* ---- host reference helpers ---------------------------------------------- */

/* c[m, n] = a[m, k] b[k, n], summed in double. */
void matmul(const float *a, const float *b, float *c, int m, int k, int n);
/* n zeroed floats (aborts when out of memory: test set-up only). */
float *fa(size_t n);

/* ---- running ------------------------------------------------------------------ */

/* Imports model (at least min_folded nodes folded at load time), runs it
 * on ref, cpu eager and cpu stitch with one f32 input, and checks its
 * first output against want: max |error| < 2e-4. */
void run_and_compare(const char *what, const pbw *model, const char *in_name, int rank, const int64_t *shape,
                     const float *x, const float *want, int64_t n_want, int min_folded);
/* The same with the bound tol, and (device) on opencl's stitch too where
 * that backend is present. */
void run_and_compare_on(const char *what, const pbw *model, const char *in_name, int rank, const int64_t *shape,
                        const float *x, const float *want, int64_t n_want, int min_folded, double tol,
                        bool device);
/* How many nodes of op the import of model makes. */
int count_op(const pbw *model, loom_op op);
/* The rank of the first matmul's product in the import of model (0: none). */
int first_matmul_rank(const pbw *model);
/* Writes model to dir/name (benchmark models). */
void write_file(const char *dir, const char *name, const pbw *m);

#endif
