/* Helpers the ONNX model tests share (onnx_models_common.h). */
#include "onnx_models_common.h"

#include "runtime/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

loom_ctx *ctx;
loom_test_rng rng = {12345};

const char *fresh(gw *w) {
  static char names[4096][16];
  char *s = names[w->n++ % 4096];
  snprintf(s, 16, "t%d", w->n);
  return s;
}

const char *node(gw *w, const char *op, int n_in, const char *const *in, pbw *attrs, int n_attrs) {
  const char *out = fresh(w);
  pbw n = onnxw_node(op, out, n_in, in, 1, &out);
  for (int i = 0; i < n_attrs; i++) pbw_msg(&n, 5, &attrs[i]);
  pbw_msg(&w->g, 1, &n);
  return out;
}
const char *op1(gw *w, const char *op, const char *a) { return node(w, op, 1, &a, NULL, 0); }
const char *op2(gw *w, const char *op, const char *a, const char *b) {
  const char *in[2] = {a, b};
  return node(w, op, 2, in, NULL, 0);
}

/* An f32 initializer of uniform values in [-s, s) (copied to host). */
const char *weight(gw *w, int rank, const int64_t *dims, float *host, double s) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  for (int64_t i = 0; i < n; i++) host[i] = (float)loom_test_uniform(&rng, -s, s);
  const char *name = fresh(w);
  pbw t = onnxw_tensor(name, 1, rank, dims, host, sizeof(float) * (size_t)n);
  pbw_msg(&w->g, 5, &t);
  return name;
}
const char *scalar_f(gw *w, float v) {
  const char *name = fresh(w);
  pbw t = onnxw_tensor(name, 1, 0, NULL, &v, 4);
  pbw_msg(&w->g, 5, &t);
  return name;
}
const char *ints(gw *w, int n, const int64_t *v) {
  const char *name = fresh(w);
  pbw t = onnxw_tensor(name, 7, 1, (int64_t[]){n}, v, 8 * (size_t)n);
  pbw_msg(&w->g, 5, &t);
  return name;
}

void matmul(const float *a, const float *b, float *c, int m, int k, int n) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++) s += (double)a[i * k + p] * b[p * n + j];
      c[i * n + j] = (float)s;
    }
}

float *fa(size_t n) {
  float *p = calloc(n, sizeof *p);
  if (!p) abort();
  return p;
}

/* True if the opencl backend can be created here and $LOOM_TEST_BACKENDS,
 * where set, lists it (asked once). */
static bool opencl_present(void) {
  static int present = -1;
  if (present < 0) {
    loom_backend *b = NULL;
    present = loom_test_backend_selected("opencl") && loom_backend_new(ctx, "opencl", &b) == LOOM_STATUS_OK;
    if (!present) printf("opencl skipped: %s\n", loom_ctx_error(ctx)[0] ? loom_ctx_error(ctx) : "not selected");
    loom_backend_free(b);
  }
  return present;
}

void run_and_compare_on(const char *what, const pbw *model, const char *in_name, int rank, const int64_t *shape,
                        const float *x, const float *want, int64_t n_want, int min_folded, double tol,
                        bool device) {
  onnx_model *m = NULL;
  onnx_program *p = NULL;
  CHECK_OK(ctx, onnx_model_parse(ctx, model->p, model->n, NULL, &m));
  if (m) CHECK_OK(ctx, onnx_import(ctx, m, 0, NULL, &p));
  if (!p) {
    onnx_model_free(m);
    return;
  }
  CHECK(p->n_folded >= min_folded);
  loom_tensor *xt = NULL;
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, rank, shape, (void *)x, &xt));
  onnx_feed f = {in_name, xt};
  const struct {
    const char *backend;
    loom_fusion_mode fusion;
  } modes[] = {{"ref", LOOM_FUSION_EAGER}, {"cpu", LOOM_FUSION_EAGER}, {"cpu", LOOM_FUSION_STITCH},
               {"opencl", LOOM_FUSION_STITCH}};
  int n_modes = device && opencl_present() ? 4 : 3;
  for (int k = 0; k < n_modes; k++) {
    loom_session *s = NULL;
    loom_tensor *out[1] = {NULL};
    loom_session_options o = LOOM_SESSION_OPTIONS(.backend = modes[k].backend, .fusion = modes[k].fusion);
    CHECK_OK(ctx, onnx_program_session(ctx, p, &o, &s));
    if (s) CHECK_OK(ctx, onnx_program_run(ctx, p, s, 1, &f, out));
    if (out[0]) {
      CHECK(loom_tensor_numel(out[0]) == n_want);
      double err = 0;
      const float *y = loom_tensor_data(out[0]);
      for (int64_t i = 0; i < n_want && i < loom_tensor_numel(out[0]); i++) err = fmax(err, fabs(y[i] - want[i]));
      printf("%s on %s/%s: max |error| %.3g\n", what, modes[k].backend, loom_fusion_mode_name(modes[k].fusion), err);
      CHECK(err < tol);
    }
    loom_tensor_free(out[0]);
    loom_session_free(s);
  }
  loom_tensor_free(xt);
  onnx_program_free(p);
  onnx_model_free(m);
}

void run_and_compare(const char *what, const pbw *model, const char *in_name, int rank, const int64_t *shape,
                     const float *x, const float *want, int64_t n_want, int min_folded) {
  run_and_compare_on(what, model, in_name, rank, shape, x, want, n_want, min_folded, 2e-4, false);
}

/* How many nodes of op the import of model makes. */
int count_op(const pbw *model, loom_op op) {
  onnx_model *m = NULL;
  onnx_program *p = NULL;
  CHECK_OK(ctx, onnx_model_parse(ctx, model->p, model->n, NULL, &m));
  if (m) CHECK_OK(ctx, onnx_import(ctx, m, 0, NULL, &p));
  int n = 0;
  for (int32_t i = 0; p && i < p->g->n_nodes; i++) n += p->g->nodes[i].op == op;
  onnx_program_free(p);
  onnx_model_free(m);
  return n;
}

/* The rank of the first matmul's product in the import of model (0: none). */
int first_matmul_rank(const pbw *model) {
  onnx_model *m = NULL;
  onnx_program *p = NULL;
  CHECK_OK(ctx, onnx_model_parse(ctx, model->p, model->n, NULL, &m));
  if (m) CHECK_OK(ctx, onnx_import(ctx, m, 0, NULL, &p));
  int r = 0;
  for (int32_t i = 0; p && i < p->g->n_nodes && !r; i++)
    if (p->g->nodes[i].op == LOOM_OP_MATMUL) r = p->g->values[p->g->nodes[i].out[0]].type.rank;
  onnx_program_free(p);
  onnx_model_free(m);
  return r;
}

void write_file(const char *dir, const char *name, const pbw *m) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(m->p, 1, m->n, f) == m->n && fclose(f) == 0);
  printf("wrote %s (%zu bytes)\n", path, m->n);
}
