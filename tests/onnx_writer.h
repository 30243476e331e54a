/* A tiny ONNX protobuf writer for tests: just enough of ModelProto (field
 * numbers of the ONNX spec's onnx.proto) to write small models, valid or
 * crafted to be hostile. Header-only; each message is built in its own
 * buffer and appended to its parent as a length-delimited field. */
#ifndef LOOM_TESTS_ONNX_WRITER_H
#define LOOM_TESTS_ONNX_WRITER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct pbw {
  uint8_t *p;
  size_t n, cap;
} pbw;

static inline void pbw_byte(pbw *b, uint8_t c) {
  if (b->n == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 256;
    b->p = realloc(b->p, b->cap);
    if (!b->p) abort();
  }
  b->p[b->n++] = c;
}
static inline void pbw_raw(pbw *b, const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) pbw_byte(b, ((const uint8_t *)p)[i]);
}
static inline void pbw_varint(pbw *b, uint64_t v) {
  while (v >= 0x80) {
    pbw_byte(b, (uint8_t)(v | 0x80));
    v >>= 7;
  }
  pbw_byte(b, (uint8_t)v);
}
static inline void pbw_key(pbw *b, uint32_t field, int wire) { pbw_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }
static inline void pbw_int(pbw *b, uint32_t field, int64_t v) {
  pbw_key(b, field, 0);
  pbw_varint(b, (uint64_t)v);
}
static inline void pbw_bytes(pbw *b, uint32_t field, const void *p, size_t n) {
  pbw_key(b, field, 2);
  pbw_varint(b, n);
  pbw_raw(b, p, n);
}
static inline void pbw_str(pbw *b, uint32_t field, const char *s) { pbw_bytes(b, field, s, strlen(s)); }
/* Appends sub as field of b and frees sub. */
static inline void pbw_msg(pbw *b, uint32_t field, pbw *sub) {
  pbw_bytes(b, field, sub->p, sub->n);
  free(sub->p);
  memset(sub, 0, sizeof *sub);
}
static inline void pbw_float(pbw *b, uint32_t field, float f) {
  pbw_key(b, field, 5);
  pbw_raw(b, &f, 4); /* little-endian hosts */
}

/* TensorProto: dims, data_type, name, raw_data (NULL: none). */
static inline pbw onnxw_tensor(const char *name, int dtype, int rank, const int64_t *dims, const void *raw,
                               size_t raw_n) {
  pbw t = {0};
  for (int d = 0; d < rank; d++) pbw_int(&t, 1, dims[d]);
  pbw_int(&t, 2, dtype);
  if (name) pbw_str(&t, 8, name);
  if (raw) pbw_bytes(&t, 9, raw, raw_n);
  return t;
}

/* ValueInfoProto of a tensor: dims[d] < 0 writes params[d] as dim_param. */
static inline pbw onnxw_value(const char *name, int elem, int rank, const int64_t *dims, const char *const *params) {
  pbw shape = {0}, tt = {0}, ty = {0}, v = {0};
  for (int d = 0; d < rank; d++) {
    pbw dim = {0};
    if (dims[d] >= 0) pbw_int(&dim, 1, dims[d]);
    else pbw_str(&dim, 2, params[d]);
    pbw_msg(&shape, 1, &dim);
  }
  pbw_int(&tt, 1, elem);
  pbw_msg(&tt, 2, &shape);
  pbw_msg(&ty, 1, &tt);
  pbw_str(&v, 1, name);
  pbw_msg(&v, 2, &ty);
  return v;
}

/* NodeProto; attrs (already-built AttributeProtos) are appended by the
 * caller with pbw_msg(&node, 5, &attr). */
static inline pbw onnxw_node(const char *op, const char *name, int n_in, const char *const *in, int n_out,
                             const char *const *out) {
  pbw n = {0};
  for (int i = 0; i < n_in; i++) pbw_str(&n, 1, in[i]);
  for (int i = 0; i < n_out; i++) pbw_str(&n, 2, out[i]);
  if (name) pbw_str(&n, 3, name);
  pbw_str(&n, 4, op);
  return n;
}

static inline pbw onnxw_attr_int(const char *name, int64_t v) {
  pbw a = {0};
  pbw_str(&a, 1, name);
  pbw_int(&a, 3, v);
  pbw_int(&a, 20, 2);
  return a;
}
static inline pbw onnxw_attr_ints(const char *name, int n, const int64_t *v) {
  pbw a = {0};
  pbw_str(&a, 1, name);
  for (int i = 0; i < n; i++) pbw_int(&a, 8, v[i]);
  pbw_int(&a, 20, 7);
  return a;
}
static inline pbw onnxw_attr_float(const char *name, float v) {
  pbw a = {0};
  pbw_str(&a, 1, name);
  pbw_float(&a, 2, v);
  pbw_int(&a, 20, 1);
  return a;
}
static inline pbw onnxw_attr_str(const char *name, const char *v) {
  pbw a = {0};
  pbw_str(&a, 1, name);
  pbw_str(&a, 4, v);
  pbw_int(&a, 20, 3);
  return a;
}
/* An attribute holding a tensor (a Constant node's value). */
static inline pbw onnxw_attr_tensor(const char *name, pbw *tensor) {
  pbw a = {0};
  pbw_str(&a, 1, name);
  pbw_msg(&a, 5, tensor);
  pbw_int(&a, 20, 4);
  return a;
}
/* An attribute holding a graph (If's branches, Loop's body). */
static inline pbw onnxw_attr_graph(const char *name, pbw *graph) {
  pbw a = {0};
  pbw_str(&a, 1, name);
  pbw_msg(&a, 6, graph);
  pbw_int(&a, 20, 5);
  return a;
}

/* ModelProto around a graph, with the default domain at opset. */
static inline pbw onnxw_model(pbw *graph, int64_t opset) {
  pbw m = {0}, os = {0};
  pbw_int(&m, 1, 8);
  pbw_str(&m, 2, "loom-test");
  pbw_msg(&m, 7, graph);
  pbw_str(&os, 1, "");
  pbw_int(&os, 2, opset);
  pbw_msg(&m, 8, &os);
  return m;
}

#endif
