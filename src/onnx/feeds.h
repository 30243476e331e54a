/*
 * A model's inputs for a run, shared by `loom run|compile MODEL.onnx` and
 * `loom bench MODEL.onnx`: tensors from files (.npy or ONNX TensorProto
 * .pb) and, where asked, deterministic random data of the declared shapes.
 */
#ifndef LOOM_ONNX_FEEDS_H
#define LOOM_ONNX_FEEDS_H

#include "onnx/import.h"
#include "onnx/model.h"

/* A .npy or TensorProto .pb file as a Loom tensor; a .pb's tensor name (if
 * any) to *name (malloc'd; name may be NULL). */
loom_status onnx_tensor_load_file(loom_ctx *ctx, const char *path, loom_tensor **out, char **name);

#define ONNX_MAX_FEEDS 64

typedef struct onnx_inputs {
  onnx_feed feeds[ONNX_MAX_FEEDS];
  loom_tensor *t[ONNX_MAX_FEEDS]; /* owned: t[k] is feeds[k].t */
  int32_t n;
} onnx_inputs;

/* What to feed: n_given NAME=PATH pairs; with random, every other input of
 * the main graph that no initializer gives gets data of its declared shape
 * (a symbolic dim from dim_names / dim_values, else 1): uniform in
 * [-1, 1) for floats, zeros for integers (valid indices), from a fixed seed. */
typedef struct onnx_input_spec {
  int32_t n_given;
  const char *const *given_names, *const *given_paths;
  int32_t n_dims;
  const char *const *dim_names;
  const int64_t *dim_values;
  bool random;
} onnx_input_spec;

loom_status onnx_inputs_load(loom_ctx *ctx, const onnx_model *m, const onnx_input_spec *spec,
                             onnx_inputs *out);
void onnx_inputs_free(onnx_inputs *in);

#endif
