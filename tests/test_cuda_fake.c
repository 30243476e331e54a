/*
 * The cuda backend's host side on a stand-in driver (fake_cuda.c: memory
 * is host memory at flipped addresses, nothing can run kernels), so that
 * machines without a GPU check what does not need one: the device listing,
 * the arena and its device mirror, inputs staged in and outputs copied out
 * (fresh, and computed into the caller's tensor), nodes run on the host
 * between device copies, a reshape kept on the device, a second run
 * reusing the staged buffers (the same graph on cpu too: an output and a
 * reshape of it, one given by the caller), that no device memory leaks, and that a
 * graph with generated kernels fails with the driver's error, not a crash.
 * Every result is compared with the ref backend's, bit for bit.
 */
#include "common.h"
#include "runtime/backend.h"
#include "runtime/cuda/cuda.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;
static long (*fake_live)(void);

static bool run(loom_graph *g, const char *backend, loom_tensor **in, int32_t n_in,
                loom_tensor **out, int32_t n_out, int32_t times) {
  loom_session *s = NULL;
  loom_session_options o = LOOM_SESSION_OPTIONS(.backend = backend);
  loom_status st = loom_session_new(ctx, g, &o, &s);
  for (int32_t t = 0; !st && t < times; t++)
    st = loom_session_run(s, n_in, (const loom_tensor *const *)in, n_out, out);
  if (st) fprintf(stderr, "%s: %s\n", backend, loom_ctx_error(ctx));
  loom_session_stats stats = {0};
  if (s && !strcmp(backend, "cuda")) {
    loom_session_get_stats(s, &stats);
    CHECK(stats.n_kernels == 0); /* nothing here can run kernels */
  }
  loom_session_free(s);
  return st == LOOM_STATUS_OK;
}

static bool same(const loom_tensor *a, const loom_tensor *b) {
  return a && b && loom_tensor_numel(a) == loom_tensor_numel(b) &&
         memcmp(loom_tensor_data(a), loom_tensor_data(b),
                (size_t)loom_tensor_numel(a) * loom_dtype_size(loom_tensor_dtype(a))) == 0;
}

/* y = gather(x, idx); z = reshape(y); w = x (an input as an output). */
static void test_host_nodes(void) {
  const int64_t sx[2] = {9, 6}, si[1] = {5}, sz[1] = {30};
  loom_graph *g = NULL;
  loom_value x, idx, y, z;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, sx, &x));
  CHECK_OK(ctx, loom_graph_input(g, "idx", LOOM_DTYPE_I64, 1, si, &idx));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_GATHER, 2, (loom_value[]){x, idx}, 0, NULL, &y));
  loom_attr shape = {.name = "shape", .kind = LOOM_ATTR_INTS, .n_ints = 1, .ints = sz};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_RESHAPE, 1, &y, 1, &shape, &z));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  CHECK_OK(ctx, loom_graph_output(g, "z", z));
  CHECK_OK(ctx, loom_graph_output(g, "w", x));
  loom_tensor *in[2] = {NULL, NULL}, *want[3] = {NULL, NULL, NULL}, *got[3] = {NULL, NULL, NULL};
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, sx, &in[0]));
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_I64, 1, si, &in[1]));
  float *xv = loom_tensor_data(in[0]);
  for (int i = 0; i < 54; i++)
    xv[i] = (float)i * 0.25f - 3.0f;
  int64_t *iv = loom_tensor_data(in[1]);
  for (int i = 0; i < 5; i++)
    iv[i] = (i * 4 + 1) % 9;
  const int64_t sy[2] = {5, 6};
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, sy, &got[0])); /* computed in place */
  long before = fake_live();
  /* cpu too: z shares y's memory, so y cannot be computed in place (the
   * session once did, and z came from the stale arena) */
  const char *backends[2] = {"cuda", "cpu"};
  bool ok = run(g, "ref", in, 2, want, 3, 1);
  for (int b = 0; ok && b < 2; b++) {
    ok = run(g, backends[b], in, 2, got, 3, 2);
    CHECK(ok);
    for (int o = 0; ok && o < 3; o++) {
      CHECK(same(want[o], got[o]));
      if (!same(want[o], got[o]))
        fprintf(stderr, "%s: output %d differs from ref\n", backends[b], o);
    }
    memset(loom_tensor_data(got[0]), 0, sizeof(float) * 30); /* the next must write it */
    for (int o = 1; o < 3; o++) { /* fresh ones again for the next backend */
      loom_tensor_free(got[o]);
      got[o] = NULL;
    }
  }
  CHECK(ok);
  CHECK(fake_live() == before); /* the session's device memory all freed */
  printf("gather on the host, reshape, an input as an output (2 runs, one output in place): "
         "the ref backend's bytes; %ld fake allocations live after\n",
         fake_live());
  for (int i = 0; i < 3; i++) {
    loom_tensor_free(want[i]);
    loom_tensor_free(got[i]);
  }
  loom_tensor_free(in[0]);
  loom_tensor_free(in[1]);
  loom_graph_free(g);
}

/* A graph with a generated kernel: NVRTC compiles it, the stand-in driver
 * refuses to load it, and the session says so. */
static void test_kernel_refused(void) {
  const int64_t s[1] = {8};
  loom_graph *g = NULL;
  loom_value x, y;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 1, s, &x));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_EXP, 1, &x, 0, NULL, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  loom_session *ses = NULL;
  loom_session_options o = LOOM_SESSION_OPTIONS(.backend = "cuda");
  loom_status st = loom_session_new(ctx, g, &o, &ses);
  const char *e = loom_ctx_error(ctx);
  CHECK(st != LOOM_STATUS_OK && !ses);
  if (strstr(e, "no NVRTC")) {
    printf("kernel graph: skipped (%s)\n", e);
  } else {
    CHECK(strstr(e, "cuda backend: the generated kernels") &&
          strstr(e, "CUDA_ERROR_NOT_SUPPORTED") && strstr(e, "NVRTC is"));
    printf("kernel graph: %s\n", e);
  }
  loom_session_free(ses);
  loom_graph_free(g);
}

int main(void) {
  if (loom_ctx_new(&ctx)) return 1;
  setenv("LOOM_CUDA_DRIVER_LIB", LOOM_FAKE_CUDA, 1); /* before the driver table loads */
  void *h = dlopen(LOOM_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
  void *sym = h ? dlsym(h, "fake_cuda_live") : NULL;
  CHECK(sym != NULL);
  if (!sym) return loom_test_finish("test_cuda_fake");
  memcpy(&fake_live, &sym, sizeof sym);
  loom_backend *b = NULL;
  CHECK_OK(ctx, loom_backend_new(ctx, "cuda", &b));
  if (b) {
    char dev[256] = "";
    b->iface->device(b->context, dev, sizeof dev);
    CHECK(
        strstr(dev, "CUDA: Loom fake CUDA device (host memory), sm_90, 1 SMs, 1 GiB, driver 13.0"));
    printf("device: %s\n", dev);
    loom_backend_free(b);
    test_host_nodes();
    test_kernel_refused();
  }
  loom_ctx_free(ctx);
  return loom_test_finish("test_cuda_fake");
}
