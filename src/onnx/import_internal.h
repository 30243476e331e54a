/* What a converter (convert*.c) sees of the importer (import.c). */
#ifndef LOOM_ONNX_IMPORT_INTERNAL_H
#define LOOM_ONNX_IMPORT_INTERNAL_H

#include "ir/build.h"
#include "ir/dtype.h"
#include "onnx/import.h"
#include "ops/op.h"

#define ONNX_MAX_NODE_IO 64

struct onnx_importer;

/* One node being converted into g (the program's graph, or a scratch
 * graph when the node is folded). */
typedef struct onnx_cv {
  struct onnx_importer *im;
  loom_ctx *ctx;
  const onnx_model *m;
  loom_graph *g;
  const onnx_node *node;
  int64_t opset;
  int32_t n_in, n_out;
  int32_t entry[ONNX_MAX_NODE_IO]; /* importer entry of input i, -1: absent */
  int32_t in_val[ONNX_MAX_NODE_IO]; /* its value in g, -1 until used */
  int32_t out_val[ONNX_MAX_NODE_IO];
  loom_tensor *out_const[ONNX_MAX_NODE_IO];
  loom_status st;
} onnx_cv;

typedef loom_status (*onnx_convert_fn)(onnx_cv *cv);

typedef struct onnx_converter {
  const char *op_type;
  int32_t since, until; /* opset range, inclusive; until 0: open */
  onnx_convert_fn fn;
  const char *attrs; /* the attributes it reads, comma-separated */
} onnx_converter;

/* If with a condition known at load time: the branch's nodes imported in
 * place (import.c). */
loom_status onnx_cv_if(onnx_cv *cv);
/* Loop with a trip count and condition known at load time, unrolled. */
loom_status onnx_cv_loop(onnx_cv *cv);

/* The table (convert.c) and a lookup. */
const onnx_converter *onnx_find_converter(const char *op_type, int64_t opset);

/* Input i is given (not absent, not beyond the node's inputs). */
bool cv_has(const onnx_cv *cv, int32_t i);
/* Input i's value in g (made from a constant when it is one); -1 and
 * cv->st set on failure. */
int32_t cv_in(onnx_cv *cv, int32_t i);
const loom_type *cv_type(const onnx_cv *cv, int32_t i);
/* Input i's values when known at load time (a constant, or a fed input);
 * NULL otherwise. */
const loom_tensor *cv_const(const onnx_cv *cv, int32_t i);
/* The tensor bound to parameter v of the graph being built (a constant
 * the importer made a parameter), or NULL. */
const loom_tensor *cv_value_const(const onnx_cv *cv, int32_t v);
/* Input i as integers (at most max); its count, or -1 with cv->st set
 * (UNSUPPORTED: not known at load time). */
int32_t cv_ints(onnx_cv *cv, int32_t i, int64_t *out, int32_t max);
/* A number from a scalar (or one-element) known input, else def. */
bool cv_scalar(onnx_cv *cv, int32_t i, double *out);

int64_t cv_attr_i(const onnx_cv *cv, const char *name, int64_t def);
double cv_attr_f(const onnx_cv *cv, const char *name, double def);
bool cv_attr_has(const onnx_cv *cv, const char *name);
/* The INTS attribute (at most max); -1 when absent. */
int32_t cv_attr_ints(onnx_cv *cv, const char *name, int64_t *out, int32_t max);
/* The STRING attribute, or def ("" for an empty one). */
const char *cv_attr_s(onnx_cv *cv, const char *name, const char *def);

/* Sets output o. */
void cv_out(onnx_cv *cv, int32_t o, int32_t v);
/* Sets output o to a constant (cv takes the tensor). */
void cv_out_const(onnx_cv *cv, int32_t o, loom_tensor *t);
/* An UNSUPPORTED status naming the node. */
loom_status cv_unsupported(onnx_cv *cv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An error (INVALID_ARGUMENT) naming the node. */
loom_status cv_invalid(onnx_cv *cv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A constant in g of dtype with the values given (as doubles, exactly
 * representable); a parameter when the values differ. */
int32_t cv_const_values(onnx_cv *cv, loom_dtype dt, int32_t rank, const int64_t *shape,
                        const double *v);

/* Normalizes a possibly negative axis against rank; false if out of range. */
bool onnx_axis(int64_t axis, int32_t rank, int32_t *out);

#endif
