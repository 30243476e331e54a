/*
 * An ONNX model as read from its protobuf bytes (ModelProto and the
 * messages under it, field numbers from the ONNX spec's onnx.proto). The
 * reader is Loom's own (pb.h), not a generated one: docs/ONNX.md says why.
 * Everything lives in one arena owned by the model; tensor bytes point
 * into the file's buffer, which the model keeps.
 */
#ifndef LOOM_ONNX_MODEL_H
#define LOOM_ONNX_MODEL_H

#include "core/ctx.h"

#include <stddef.h>
#include <stdint.h>

/* TensorProto.DataType */
enum {
  ONNX_UNDEFINED = 0, ONNX_FLOAT = 1, ONNX_UINT8 = 2, ONNX_INT8 = 3, ONNX_UINT16 = 4,
  ONNX_INT16 = 5, ONNX_INT32 = 6, ONNX_INT64 = 7, ONNX_STRING = 8, ONNX_BOOL = 9,
  ONNX_FLOAT16 = 10, ONNX_DOUBLE = 11, ONNX_UINT32 = 12, ONNX_UINT64 = 13,
  ONNX_COMPLEX64 = 14, ONNX_COMPLEX128 = 15, ONNX_BFLOAT16 = 16
};

/* AttributeProto.AttributeType */
enum {
  ONNX_ATTR_UNDEFINED = 0, ONNX_ATTR_FLOAT = 1, ONNX_ATTR_INT = 2, ONNX_ATTR_STRING = 3,
  ONNX_ATTR_TENSOR = 4, ONNX_ATTR_GRAPH = 5, ONNX_ATTR_FLOATS = 6, ONNX_ATTR_INTS = 7,
  ONNX_ATTR_STRINGS = 8, ONNX_ATTR_TENSORS = 9, ONNX_ATTR_GRAPHS = 10,
  ONNX_ATTR_SPARSE_TENSOR = 11, ONNX_ATTR_SPARSE_TENSORS = 12, ONNX_ATTR_TYPE_PROTO = 13,
  ONNX_ATTR_TYPE_PROTOS = 14
};

/* Bytes of the file (not NUL-terminated). */
typedef struct onnx_bytes {
  const uint8_t *p;
  size_t n;
} onnx_bytes;

typedef struct onnx_kv {
  const char *key, *value;
} onnx_kv;

typedef struct onnx_tensor {
  const char *name;
  int32_t data_type;
  int32_t n_dims;
  int64_t *dims;
  bool has_raw;
  onnx_bytes raw;
  /* the typed fields, decoded */
  size_t n_float, n_i32, n_i64, n_double, n_u64, n_string;
  float *float_data;
  int64_t *i32_data; /* int32_data: also int8/16, uint8/16, bool, f16/bf16 bits */
  int64_t *i64_data;
  double *double_data;
  int64_t *u64_data;
  int32_t data_location; /* 1: EXTERNAL */
  int32_t n_external;
  onnx_kv *external;
  bool segmented;
} onnx_tensor;

/* A value's declared type: a tensor of elem_type, with a shape or not. */
typedef struct onnx_value_info {
  const char *name;
  bool is_tensor; /* false: a sequence, map, optional or no type */
  int32_t elem_type;
  bool has_shape;
  int32_t rank;
  int64_t *dims;        /* -1 where unknown (dim_param or nothing) */
  const char **params;  /* dim_param or NULL, per dim */
} onnx_value_info;

struct onnx_graph;

typedef struct onnx_attr {
  const char *name;
  int32_t type;
  float f;
  int64_t i;
  onnx_bytes s;
  onnx_tensor *t;
  struct onnx_graph *g;
  size_t n_floats, n_ints, n_strings, n_tensors, n_graphs;
  float *floats;
  int64_t *ints;
  onnx_bytes *strings;
  onnx_tensor *tensors;
  struct onnx_graph *graphs;
  const char *ref_attr_name;
} onnx_attr;

typedef struct onnx_node {
  const char *name, *op_type, *domain;
  int32_t n_in, n_out, n_attrs;
  const char **in, **out; /* "" for an optional input left out */
  onnx_attr *attrs;
} onnx_node;

typedef struct onnx_graph {
  const char *name;
  int32_t n_nodes, n_init, n_inputs, n_outputs, n_value_info, n_sparse_init;
  onnx_node *nodes;
  onnx_tensor *init;
  onnx_value_info *inputs, *outputs, *value_info;
} onnx_graph;

typedef struct onnx_opset {
  const char *domain;
  int64_t version;
} onnx_opset;

typedef struct onnx_model {
  int64_t ir_version;
  int32_t n_opsets;
  onnx_opset *opsets;
  const char *producer;
  onnx_graph *graph;
  char *dir;      /* the model's folder (external data is looked up there) */
  uint8_t *file;  /* the file's bytes (tensors point into them) */
  size_t file_len;
  void *arena;    /* every allocation above */
} onnx_model;

/* Subgraphs (If, Loop, Scan bodies) nest at most this deep. */
#define ONNX_MAX_DEPTH 16

/* Reads a ModelProto from bytes (copied). dir: where external data lives
 * (NULL: external data is refused). Errors name the message and field. */
loom_status onnx_model_parse(loom_ctx *ctx, const void *bytes, size_t n, const char *dir,
                             onnx_model **out);
/* Reads the file at path; its folder is the external data's. */
loom_status onnx_model_load(loom_ctx *ctx, const char *path, onnx_model **out);
void onnx_model_free(onnx_model *m);

/* A lone TensorProto (a test's input_N.pb); the result lives in m's arena.
 * m owns the bytes (copied). */
loom_status onnx_tensor_parse(loom_ctx *ctx, const void *bytes, size_t n, onnx_model **holder,
                              onnx_tensor **out);

/* The default opset of the ai.onnx domain ("" or "ai.onnx"), 0 if none. */
int64_t onnx_model_opset(const onnx_model *m);
/* An attribute of a node by name, or NULL. */
const onnx_attr *onnx_node_attr(const onnx_node *n, const char *name);
/* The name of a DataType ("float", "int64", ...; "?" if unknown). */
const char *onnx_dtype_name(int32_t dt);

/* Converts a tensor to a Loom tensor: its data from raw_data, the typed
 * fields or external data (a file in m->dir, by a relative path that stays
 * inside it). LOOM_STATUS_UNSUPPORTED for element types Loom lacks. */
loom_status onnx_tensor_to_loom(loom_ctx *ctx, const onnx_model *m, const onnx_tensor *t,
                                loom_tensor **out);
/* The Loom dtype of an ONNX element type; false if Loom has none. */
bool onnx_dtype_to_loom(int32_t dt, loom_dtype *out);

#endif
