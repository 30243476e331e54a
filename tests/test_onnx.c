/* ONNX in (docs/ONNX.md): a small model written by tests/onnx_writer.h
 * imported and run against values computed here; shape chains folded at
 * load time; dim_params bound from inputs; and hostile files (truncated,
 * lengths past the end, huge or negative dims, cycles, missing inputs,
 * subgraphs nested without end, external data outside the model's
 * folder) refused with a message, never a crash or a huge allocation.
 * With an argument DIR it writes its models there (the seeds of
 * tests/fuzz/corpus/onnx). */
#include "common.h"
#include "onnx_writer.h"

#include "core/ctx.h"
#include "onnx/import.h"
#include "onnx/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static loom_ctx *ctx;
static const char *seed_dir;

static void save_seed(const char *name, const pbw *b) {
  if (!seed_dir) return;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", seed_dir, name);
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(b->p, 1, b->n, f);
    fclose(f);
  }
}

static const float X[6] = {1, -2, 3, 0.5f, 4, -1};
static const float W[12] = {0.5f, -1, 2, 0, 1, 1, -0.5f, 3, -2, 0.25f, 1, -1};
static const float B[4] = {0.1f, -0.2f, 0.3f, -5};

/* y = relu(x @ W + b) with x f32[2, 3] (its first dim "N" symbolic when
 * symbolic), W an initializer in raw_data, b one in float_data; then
 * z = reshape(y, concat(shape(y)[1], shape(y)[0])): a shape chain. */
static pbw good_model(bool symbolic) {
  pbw g = {0}, t;
  const char *const params[2] = {"N", NULL};
  pbw_str(&g, 2, "good");
  t = onnxw_tensor("W", 1, 2, (int64_t[]){3, 4}, W, sizeof W);
  pbw_msg(&g, 5, &t);
  t = onnxw_tensor("b", 1, 1, (int64_t[]){4}, NULL, 0);
  pbw packed = {0};
  pbw_raw(&packed, B, sizeof B);
  pbw_bytes(&t, 4, packed.p, packed.n);
  free(packed.p);
  pbw_msg(&g, 5, &t);
  int64_t zero = 0, one = 1;
  t = onnxw_tensor("i0", 7, 1, (int64_t[]){1}, &zero, 8);
  pbw_msg(&g, 5, &t);
  t = onnxw_tensor("i1", 7, 1, (int64_t[]){1}, &one, 8);
  pbw_msg(&g, 5, &t);
  t = onnxw_value("x", 1, 2, (int64_t[]){symbolic ? -1 : 2, 3}, params);
  pbw_msg(&g, 11, &t);
  t = onnxw_value("z", 1, 2, (int64_t[]){4, 2}, NULL);
  pbw_msg(&g, 12, &t);
  struct {
    const char *op;
    int n_in;
    const char *in[2], *out;
  } nodes[] = {{"MatMul", 2, {"x", "W"}, "h"},   {"Add", 2, {"h", "b"}, "a"},
               {"Relu", 1, {"a"}, "y"},          {"Shape", 1, {"y"}, "s"},
               {"Gather", 2, {"s", "i1"}, "g1"}, {"Gather", 2, {"s", "i0"}, "g0"},
               {"Concat", 2, {"g1", "g0"}, "ns"}, {"Reshape", 2, {"y", "ns"}, "z"}};
  for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
    pbw n = onnxw_node(nodes[i].op, nodes[i].out, nodes[i].n_in, nodes[i].in, 1, &nodes[i].out);
    if (strcmp(nodes[i].op, "Concat") == 0) {
      pbw a = onnxw_attr_int("axis", 0);
      pbw_msg(&n, 5, &a);
    }
    pbw_msg(&g, 1, &n);
  }
  return onnxw_model(&g, 13);
}

static loom_status import_bytes(const pbw *b, const char *dir, int32_t n_feeds, const onnx_feed *feeds,
                                onnx_program **p) {
  onnx_model *m = NULL;
  *p = NULL;
  loom_error_clear(ctx);
  loom_status st = onnx_model_parse(ctx, b->p, b->n, dir, &m);
  if (!st) st = onnx_import(ctx, m, n_feeds, feeds, p);
  onnx_model_free(m);
  return st;
}

static void expect_good_output(onnx_program *p, const loom_tensor *x, const char *backend) {
  loom_session *s = NULL;
  loom_tensor *out[1] = {NULL};
  onnx_feed f = {"x", x};
  loom_session_options o = LOOM_SESSION_OPTIONS(.backend = backend);
  CHECK_OK(ctx, onnx_program_session(ctx, p, &o, &s));
  if (s) CHECK_OK(ctx, onnx_program_run(ctx, p, s, 1, &f, out));
  if (out[0]) {
    CHECK(loom_tensor_rank(out[0]) == 2 && loom_tensor_dim(out[0], 0) == 4 && loom_tensor_dim(out[0], 1) == 2);
    const float *z = loom_tensor_data(out[0]);
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 4; j++) {
        double acc = B[j];
        for (int k = 0; k < 3; k++) acc += (double)X[i * 3 + k] * W[k * 4 + j];
        double want = acc > 0 ? acc : 0;
        CHECK(fabs(z[i * 4 + j] - want) < 1e-5);
      }
  }
  loom_tensor_free(out[0]);
  loom_session_free(s);
}

static void test_good_model(void) {
  pbw b = good_model(false);
  save_seed("good.onnx", &b);
  onnx_program *p = NULL;
  CHECK_OK(ctx, import_bytes(&b, NULL, 0, NULL, &p));
  loom_tensor *x = NULL;
  CHECK_OK(ctx, loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){2, 3}, (void *)X, &x));
  if (p) {
    /* Shape, two Gathers and the Concat became a constant shape */
    CHECK(p->n_folded == 4);
    expect_good_output(p, x, "ref");
    expect_good_output(p, x, "cpu");
  }
  onnx_program_free(p);

  /* dim_param: bound by the given input, an error naming it without */
  pbw sym = good_model(true);
  save_seed("symbolic.onnx", &sym);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, import_bytes(&sym, NULL, 0, NULL, &p));
  CHECK(strstr(loom_ctx_error(ctx), "'N'") != NULL);
  onnx_feed f = {"x", x};
  CHECK_OK(ctx, import_bytes(&sym, NULL, 1, &f, &p));
  if (p) expect_good_output(p, x, "ref");
  onnx_program_free(p);
  loom_tensor *x3 = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){2, 4}, &x3));
  f.t = x3; /* a fixed dim (3) that the given input contradicts */
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH, import_bytes(&sym, NULL, 1, &f, &p));

  /* every prefix: an error or a model, never a crash (no prefix but the
   * whole is a model with a graph holding all 8 nodes) */
  int parsed_whole = 0;
  for (size_t n = 0; n < b.n; n++) {
    pbw cut = {b.p, n, n};
    onnx_model *m = NULL;
    loom_status st = onnx_model_parse(ctx, cut.p, cut.n, NULL, &m);
    if (!st) {
      CHECK(m && m->graph);
      parsed_whole += m->graph->n_nodes == 8 && m->graph->n_init == 4 && m->graph->n_outputs == 1 && m->n_opsets == 1;
    } else {
      CHECK(loom_ctx_error(ctx)[0] != '\0');
    }
    onnx_model_free(m);
  }
  CHECK(parsed_whole == 0);
  loom_tensor_free(x);
  loom_tensor_free(x3);
  free(b.p);
  free(sym.p);
}

/* A graph of one node op(in...) -> out with inputs x f32[2] (and extra
 * initializers written by the caller into g before). */
static pbw one_node_graph(pbw *g, const char *op, int n_in, const char *const *in, const char *out) {
  pbw v = onnxw_value("x", 1, 1, (int64_t[]){2}, NULL);
  pbw_msg(g, 11, &v);
  v = onnxw_value(out, 1, 1, (int64_t[]){2}, NULL);
  pbw_msg(g, 12, &v);
  pbw n = onnxw_node(op, "the_node", n_in, in, 1, &out);
  return n;
}

static void test_hostile(void) {
  onnx_program *p = NULL;
  onnx_model *m = NULL;

  /* a length past the end */
  pbw b = {0};
  pbw_key(&b, 7, 2);
  pbw_varint(&b, 1000);
  pbw_raw(&b, "0123456789", 10);
  save_seed("length_past_end.onnx", &b);
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, onnx_model_parse(ctx, b.p, b.n, NULL, &m));
  CHECK(strstr(loom_ctx_error(ctx), "past the end") != NULL);
  free(b.p);

  /* a varint that never ends */
  b = (pbw){0};
  pbw_key(&b, 1, 0);
  for (int i = 0; i < 12; i++) pbw_byte(&b, 0xff);
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, onnx_model_parse(ctx, b.p, b.n, NULL, &m));
  free(b.p);

  /* no graph at all, and a string where a message should be */
  b = (pbw){0};
  pbw_int(&b, 1, 8);
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, onnx_model_parse(ctx, b.p, b.n, NULL, &m));
  pbw_int(&b, 7, 3);
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, onnx_model_parse(ctx, b.p, b.n, NULL, &m));
  free(b.p);

  /* huge dims with 4 bytes of data: refused before allocating */
  pbw g = {0};
  float four = 4;
  pbw t = onnxw_tensor("big", 1, 3, (int64_t[]){1 << 20, 1 << 20, 1 << 20}, &four, 4);
  pbw_msg(&g, 5, &t);
  const char *in2[2] = {"x", "big"};
  pbw n = one_node_graph(&g, "Add", 2, in2, "y");
  pbw_msg(&g, 1, &n);
  b = onnxw_model(&g, 13);
  save_seed("huge_dims.onnx", &b);
  loom_status st = import_bytes(&b, NULL, 0, NULL, &p);
  CHECK(st != LOOM_STATUS_OK && p == NULL && loom_ctx_error(ctx)[0]);
  free(b.p);

  /* a negative dim */
  g = (pbw){0};
  t = onnxw_tensor("neg", 1, 1, (int64_t[]){-2}, &four, 4);
  pbw_msg(&g, 5, &t);
  const char *in3[2] = {"x", "neg"};
  n = one_node_graph(&g, "Add", 2, in3, "y");
  pbw_msg(&g, 1, &n);
  b = onnxw_model(&g, 13);
  save_seed("negative_dim.onnx", &b);
  CHECK(import_bytes(&b, NULL, 0, NULL, &p) != LOOM_STATUS_OK && p == NULL);
  free(b.p);

  /* raw_data shorter than the shape */
  g = (pbw){0};
  t = onnxw_tensor("short", 1, 1, (int64_t[]){2}, &four, 4);
  pbw_msg(&g, 5, &t);
  const char *in4[2] = {"x", "short"};
  n = one_node_graph(&g, "Add", 2, in4, "y");
  pbw_msg(&g, 1, &n);
  b = onnxw_model(&g, 13);
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, import_bytes(&b, NULL, 0, NULL, &p));
  CHECK(strstr(loom_ctx_error(ctx), "raw_data") != NULL);
  free(b.p);

  /* a cycle: a = Relu(c), c = Neg(a) */
  g = (pbw){0};
  pbw v = onnxw_value("x", 1, 1, (int64_t[]){2}, NULL);
  pbw_msg(&g, 11, &v);
  v = onnxw_value("c", 1, 1, (int64_t[]){2}, NULL);
  pbw_msg(&g, 12, &v);
  const char *ca = "a", *cc = "c";
  n = onnxw_node("Relu", "first", 1, &cc, 1, &ca);
  pbw_msg(&g, 1, &n);
  n = onnxw_node("Neg", "second", 1, &ca, 1, &cc);
  pbw_msg(&g, 1, &n);
  b = onnxw_model(&g, 13);
  save_seed("cycle.onnx", &b);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, import_bytes(&b, NULL, 0, NULL, &p));
  CHECK(strstr(loom_ctx_error(ctx), "first") && strstr(loom_ctx_error(ctx), "not defined"));
  free(b.p);

  /* an output nothing defines, and a node reading a missing name */
  g = (pbw){0};
  const char *in5[2] = {"x", "nowhere"};
  n = one_node_graph(&g, "Add", 2, in5, "y");
  pbw_msg(&g, 1, &n);
  b = onnxw_model(&g, 13);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, import_bytes(&b, NULL, 0, NULL, &p));
  CHECK(strstr(loom_ctx_error(ctx), "nowhere") != NULL);
  free(b.p);

  /* unsupported: an op without a converter, an attribute none reads */
  g = (pbw){0};
  const char *x = "x";
  n = one_node_graph(&g, "Acos", 1, &x, "y");
  pbw_msg(&g, 1, &n);
  b = onnxw_model(&g, 13);
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED, import_bytes(&b, NULL, 0, NULL, &p));
  CHECK(strstr(loom_ctx_error(ctx), "the_node") && strstr(loom_ctx_error(ctx), "Acos"));
  free(b.p);
  g = (pbw){0};
  n = one_node_graph(&g, "Relu", 1, &x, "y");
  pbw a = onnxw_attr_int("made_up", 1);
  pbw_msg(&n, 5, &a);
  pbw_msg(&g, 1, &n);
  b = onnxw_model(&g, 13);
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED, import_bytes(&b, NULL, 0, NULL, &p));
  CHECK(strstr(loom_ctx_error(ctx), "made_up") != NULL);
  free(b.p);

  /* subgraphs nested 40 deep: refused by the depth limit */
  pbw inner = {0};
  pbw_str(&inner, 2, "leaf");
  for (int d = 0; d < 40; d++) {
    pbw node = onnxw_node("If", NULL, 1, &x, 1, &x);
    pbw at = onnxw_attr_graph("then_branch", &inner);
    pbw_msg(&node, 5, &at);
    inner = (pbw){0};
    pbw_str(&inner, 2, "level");
    pbw_msg(&inner, 1, &node);
  }
  b = onnxw_model(&inner, 13);
  save_seed("deep_subgraphs.onnx", &b);
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, onnx_model_parse(ctx, b.p, b.n, NULL, &m));
  CHECK(strstr(loom_ctx_error(ctx), "too deep") != NULL);
  free(b.p);
}

/* External data: read beside the model; paths leaving its folder refused. */
static void test_external(void) {
  char dir[] = "/tmp/loom_onnx_ext_XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK(!"mkdtemp");
    return;
  }
  char path[256];
  snprintf(path, sizeof path, "%s/w.bin", dir);
  FILE *f = fopen(path, "wb");
  float data[4] = {7, 7, 1, 2}; /* the tensor is the last two, at offset 8 */
  fwrite(data, 1, sizeof data, f);
  fclose(f);
  char link[300];
  snprintf(link, sizeof link, "%s/escape.bin", dir);
  CHECK(symlink("/etc/hostname", link) == 0 || symlink("/etc/passwd", link) == 0);
  const char *locations[] = {"w.bin", "../w.bin", "/etc/passwd", "escape.bin", "sub/../w.bin", "missing.bin"};
  for (int i = 0; i < 6; i++) {
    pbw g = {0};
    pbw t = onnxw_tensor("e", 1, 1, (int64_t[]){2}, NULL, 0);
    struct {
      const char *k, *v;
    } kv[3] = {{"location", locations[i]}, {"offset", "8"}, {"length", "8"}};
    for (int k = 0; k < 3; k++) {
      pbw e = {0};
      pbw_str(&e, 1, kv[k].k);
      pbw_str(&e, 2, kv[k].v);
      pbw_msg(&t, 13, &e);
    }
    pbw_int(&t, 14, 1);
    pbw_msg(&g, 5, &t);
    const char *in[2] = {"x", "e"};
    pbw n = one_node_graph(&g, "Add", 2, in, "y");
    pbw_msg(&g, 1, &n);
    pbw b = onnxw_model(&g, 13);
    if (i == 1) save_seed("external_escape.onnx", &b);
    onnx_program *p = NULL;
    loom_status st = import_bytes(&b, dir, 0, NULL, &p);
    if (i == 0) {
      CHECK_OK(ctx, st);
      if (p) {
        const loom_tensor *e = NULL;
        for (int32_t k = 0; k < p->n_bound; k++)
          if (p->bound[k]) e = p->bound[k];
        CHECK(e && ((const float *)loom_tensor_data(e))[0] == 1 && ((const float *)loom_tensor_data(e))[1] == 2);
      }
    } else {
      CHECK(st != LOOM_STATUS_OK && p == NULL);
      if (i < 5) CHECK(strstr(loom_ctx_error(ctx), "leaves the model's folder") != NULL);
    }
    onnx_program_free(p);
    /* no folder given: external data refused */
    if (i == 0) CHECK(import_bytes(&b, NULL, 0, NULL, &p) != LOOM_STATUS_OK && p == NULL);
    free(b.p);
  }
  unlink(link);
  unlink(path);
  rmdir(dir);
}


/* Loops nested to unroll 4096 x 4096 times: refused at the conversion
 * budget, quickly, not unrolled for hours. */
static void test_loop_bomb(void) {
  /* inner body: (i, cond, v) -> (cond, v + v) */
  pbw inner = {0};
  const char *bin[3] = {"i2", "c2", "v2"};
  for (int k = 0; k < 3; k++) {
    pbw v = onnxw_value(bin[k], k == 0 ? 7 : k == 1 ? 9 : 1, k == 2 ? 1 : 0, (int64_t[]){2}, NULL);
    pbw_msg(&inner, 11, &v);
  }
  const char *add_in[2] = {"v2", "v2"}, *add_out = "w2", *idn_out = "c2o";
  pbw n = onnxw_node("Add", NULL, 2, add_in, 1, &add_out);
  pbw_msg(&inner, 1, &n);
  n = onnxw_node("Identity", NULL, 1, (const char *[]){"c2"}, 1, &idn_out);
  pbw_msg(&inner, 1, &n);
  pbw v = onnxw_value("c2o", 9, 0, NULL, NULL);
  pbw_msg(&inner, 12, &v);
  v = onnxw_value("w2", 1, 1, (int64_t[]){2}, NULL);
  pbw_msg(&inner, 12, &v);
  /* outer body: (i, cond, v) -> (cond, Loop(4096, cond, v)) */
  pbw outer = {0};
  const char *oin[3] = {"i1", "c1", "v1"};
  for (int k = 0; k < 3; k++) {
    v = onnxw_value(oin[k], k == 0 ? 7 : k == 1 ? 9 : 1, k == 2 ? 1 : 0, (int64_t[]){2}, NULL);
    pbw_msg(&outer, 11, &v);
  }
  pbw t = onnxw_tensor("n4096", 7, 0, NULL, (int64_t[]){4096}, 8);
  pbw_msg(&outer, 5, &t);
  const char *lin[3] = {"n4096", "c1", "v1"}, *lout = "w1", *cout = "c1o";
  n = onnxw_node("Loop", "inner_loop", 3, lin, 1, &lout);
  pbw at = onnxw_attr_graph("body", &inner);
  pbw_msg(&n, 5, &at);
  pbw_msg(&outer, 1, &n);
  n = onnxw_node("Identity", NULL, 1, (const char *[]){"c1"}, 1, &cout);
  pbw_msg(&outer, 1, &n);
  v = onnxw_value("c1o", 9, 0, NULL, NULL);
  pbw_msg(&outer, 12, &v);
  v = onnxw_value("w1", 1, 1, (int64_t[]){2}, NULL);
  pbw_msg(&outer, 12, &v);
  pbw g = {0};
  v = onnxw_value("x", 1, 1, (int64_t[]){2}, NULL);
  pbw_msg(&g, 11, &v);
  t = onnxw_tensor("m4096", 7, 0, NULL, (int64_t[]){4096}, 8);
  pbw_msg(&g, 5, &t);
  uint8_t yes = 1;
  t = onnxw_tensor("yes", 9, 0, NULL, &yes, 1);
  pbw_msg(&g, 5, &t);
  const char *gin[3] = {"m4096", "yes", "x"}, *gout = "y";
  n = onnxw_node("Loop", "outer_loop", 3, gin, 1, &gout);
  at = onnxw_attr_graph("body", &outer);
  pbw_msg(&n, 5, &at);
  pbw_msg(&g, 1, &n);
  v = onnxw_value("y", 1, 1, (int64_t[]){2}, NULL);
  pbw_msg(&g, 12, &v);
  pbw b = onnxw_model(&g, 13);
  save_seed("loop_bomb.onnx", &b);
  onnx_program *p = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED, import_bytes(&b, NULL, 0, NULL, &p));
  CHECK(p == NULL && strstr(loom_ctx_error(ctx), "loops unrolled") != NULL);
  free(b.p);
}

int main(int argc, char **argv) {
  if (argc > 1) seed_dir = argv[1];
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  test_good_model();
  test_hostile();
  test_external();
  test_loop_bomb();
  loom_ctx_free(ctx);
  return loom_test_finish("test_onnx");
}
