// libFuzzer target over the ONNX reader (src/onnx: pb.c, model.c,
// tensor.c): any bytes as a ModelProto, and when they parse, every
// initializer and tensor attribute converted to a Loom tensor. No model
// folder is given, so external data must be refused. Properties: no crash
// or sanitizer report; a rejected input leaves a message; an accepted
// tensor holds no more bytes than the input (its data came from the
// input: a crafted shape makes no large allocation). Built by `make fuzz`;
// replayed over tests/fuzz/corpus/onnx by `make test` (seeds written by
// `test_onnx DIR`).
#include "loom.h"
#include "onnx/model.h"

#include <stdio.h>
#include <string.h>

static loom_ctx *ctx;

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_onnx: %s: %s\n", what, detail);
  __builtin_trap();
}

static void check_tensor(const onnx_model *m, const onnx_tensor *t, size_t size) {
  loom_tensor *lt = NULL;
  loom_error_clear(ctx);
  loom_status st = onnx_tensor_to_loom(ctx, m, t, &lt);
  if (st) {
    if (lt) fail("a failed conversion returned a tensor", loom_ctx_error(ctx));
    if (!loom_ctx_error(ctx)[0]) fail("a failed conversion left no message", t->name);
    return;
  }
  size_t nb = (size_t)loom_tensor_numel(lt) * loom_dtype_size(loom_tensor_dtype(lt));
  /* typed fields take at least one byte per element in the input */
  if (nb > 8 * size) fail("tensor larger than the input", t->name);
  loom_tensor_free(lt);
}

static void walk_graph(const onnx_model *m, const onnx_graph *g, size_t size) {
  for (int32_t i = 0; i < g->n_init; i++) check_tensor(m, &g->init[i], size);
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t k = 0; k < g->nodes[i].n_attrs; k++) {
      const onnx_attr *a = &g->nodes[i].attrs[k];
      if (a->t) check_tensor(m, a->t, size);
      for (size_t j = 0; j < a->n_tensors; j++) check_tensor(m, &a->tensors[j], size);
      if (a->g) walk_graph(m, a->g, size);
      for (size_t j = 0; j < a->n_graphs; j++) walk_graph(m, &a->graphs[j], size);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx && loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 0;
  loom_error_clear(ctx);
  onnx_model *m = NULL;
  loom_status st = onnx_model_parse(ctx, data, size, NULL, &m);
  if (st) {
    if (m) fail("a failed parse returned a model", loom_ctx_error(ctx));
    if (!loom_ctx_error(ctx)[0]) fail("a failed parse left no message", "");
    return 0;
  }
  if (!m || !m->graph) fail("a parsed model without a graph", "");
  walk_graph(m, m->graph, size);
  onnx_model_free(m);
  return 0;
}
