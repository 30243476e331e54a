/*
 * ONNX graphs to Loom graphs. Every node goes through one table of
 * converters (op type, opset range, function: convert.c); shape
 * computations whose inputs are all constant (initializers, Constant
 * nodes, Shape of a static shape) are folded at load time on the
 * reference kernels, so Shape -> Gather -> Concat -> Reshape chains become
 * plain attributes. Initializers and folded constants that a Loom op reads
 * become graph parameters bound to their tensors.
 */
#ifndef LOOM_ONNX_IMPORT_H
#define LOOM_ONNX_IMPORT_H

#include "ir/graph.h"
#include "onnx/model.h"

/* An input given at load time: its shape binds the model's dim_params, and
 * its values serve where an input sets a shape (Reshape's shape fed as a
 * graph input). */
typedef struct onnx_feed {
  const char *name;
  const loom_tensor *t;
} onnx_feed;

typedef struct onnx_program {
  loom_graph *g;
  /* per graph input of g: the tensor bound to it (parameters), or NULL
   * for the model's inputs, fed by name at run time */
  loom_tensor **bound;
  int32_t n_bound;
  loom_tensor **owned; /* every tensor the program holds */
  int32_t n_owned, cap_owned;
  int32_t n_folded; /* nodes folded at load time */
} onnx_program;

/* Imports m's main graph. UNSUPPORTED (naming the node, its op type and
 * what is missing) when a node has no converter or uses an attribute or
 * type the converter does not handle. */
loom_status onnx_import(loom_ctx *ctx, const onnx_model *m, int32_t n_feeds, const onnx_feed *feeds,
                        onnx_program **out);
void onnx_program_free(onnx_program *p);

/* A session of the program's graph with options opts, its parameters
 * (initializers) frozen (loom_session_freeze_input); runs a program on
 * the model's inputs (by name; parameters not frozen come from the
 * program); outputs as loom_session_run. */
loom_status onnx_program_session(loom_ctx *ctx, const onnx_program *p,
                                 const loom_session_options *opts, loom_session **out);
loom_status onnx_program_run(loom_ctx *ctx, const onnx_program *p, loom_session *s,
                             int32_t n_feeds, const onnx_feed *feeds, loom_tensor **outputs);

/* Whether a converter exists for op_type at opset (domain "" only); for
 * `loom show` before anything is imported. */
bool onnx_op_supported(const char *domain, const char *op_type, int64_t opset);

#endif
