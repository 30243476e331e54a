/*
 * A model's inputs for a run (feeds.h).
 */
#include "onnx/feeds.h"

#include "core/ctx.h"
#include "core/file.h"
#include "ir/dtype.h"

#include <stdlib.h>
#include <string.h>

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static loom_status load_pb(loom_ctx *ctx, const char *path, loom_tensor **out, char **name) {
  char *buf = NULL;
  size_t len = 0;
  LOOM_TRY(loom_file_read(ctx, path, (size_t)2 << 30, &buf, &len));
  onnx_model *holder = NULL;
  onnx_tensor *t = NULL;
  loom_status st = onnx_tensor_parse(ctx, buf, len, &holder, &t);
  free(buf);
  if (!st) st = onnx_tensor_to_loom(ctx, holder, t, out);
  if (!st && name && t->name[0] && !(*name = strdup(t->name))) st = LOOM_STATUS_OUT_OF_MEMORY;
  onnx_model_free(holder);
  if (st) loom_error_prefix(ctx, "%s", path);
  return st;
}

loom_status onnx_tensor_load_file(loom_ctx *ctx, const char *path, loom_tensor **out, char **name) {
  *out = NULL;
  if (name) *name = NULL;
  if (ends_with(path, ".npy")) return loom_tensor_load_npy(ctx, path, out);
  return load_pb(ctx, path, out, name);
}

static loom_status random_input(loom_ctx *ctx, const onnx_value_info *vi,
                                const onnx_input_spec *spec, uint64_t *seed, loom_tensor **out) {
  loom_dtype dt;
  if (!vi->is_tensor || !onnx_dtype_to_loom(vi->elem_type, &dt))
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "input '%s': unsupported type", vi->name);
  if (vi->rank > LOOM_MAX_RANK)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "input '%s': rank %d", vi->name, vi->rank);
  int64_t shape[LOOM_MAX_RANK];
  for (int32_t d = 0; d < vi->rank; d++) {
    shape[d] = vi->dims[d] >= 0 ? vi->dims[d] : 1;
    for (int32_t k = 0; vi->params[d] && k < spec->n_dims; k++)
      if (strcmp(spec->dim_names[k], vi->params[d]) == 0) shape[d] = spec->dim_values[k];
  }
  LOOM_TRY(loom_tensor_new(ctx, dt, vi->rank, shape, out));
  if (loom_dtype_is_float(dt)) {
    int64_t n = loom_tensor_numel(*out);
    for (int64_t i = 0; i < n; i++) {
      *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
      loom_store(dt, loom_tensor_data(*out), i, (double)(*seed >> 11) / 9007199254740992.0 * 2 - 1);
    }
  }
  return LOOM_STATUS_OK;
}

static loom_status add(loom_ctx *ctx, onnx_inputs *in, const char *name, loom_tensor *t) {
  if (in->n == ONNX_MAX_FEEDS) {
    loom_tensor_free(t);
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "more than %d model inputs", ONNX_MAX_FEEDS);
  }
  in->t[in->n] = t;
  in->feeds[in->n++] = (onnx_feed){name, t};
  return LOOM_STATUS_OK;
}

loom_status onnx_inputs_load(loom_ctx *ctx, const onnx_model *m, const onnx_input_spec *spec,
                             onnx_inputs *out) {
  memset(out, 0, sizeof *out);
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; !st && i < spec->n_given; i++) {
    for (int32_t k = 0; k < i && !st; k++)
      if (strcmp(spec->given_names[k], spec->given_names[i]) == 0)
        st = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "input '%s' is given twice",
                        spec->given_names[i]);
    loom_tensor *t = NULL;
    if (!st) st = onnx_tensor_load_file(ctx, spec->given_paths[i], &t, NULL);
    if (!st) st = add(ctx, out, spec->given_names[i], t);
  }
  const onnx_graph *g = m->graph;
  uint64_t seed = 42;
  for (int32_t i = 0; !st && spec->random && i < g->n_inputs; i++) {
    const onnx_value_info *vi = &g->inputs[i];
    bool given = false;
    for (int32_t k = 0; k < out->n; k++) given |= strcmp(out->feeds[k].name, vi->name) == 0;
    for (int32_t k = 0; k < g->n_init; k++) given |= strcmp(g->init[k].name, vi->name) == 0;
    if (given) continue;
    loom_tensor *t = NULL;
    st = random_input(ctx, vi, spec, &seed, &t);
    if (!st) st = add(ctx, out, vi->name, t);
  }
  if (st) onnx_inputs_free(out);
  return st;
}

void onnx_inputs_free(onnx_inputs *in) {
  for (int32_t k = 0; k < in->n; k++) loom_tensor_free(in->t[k]);
  memset(in, 0, sizeof *in);
}
