/*
 * The text IR: round trips (graph -> text -> graph, text byte for byte) over
 * a graph that uses every op, over the examples in tests/data (*.loom); every
 * file in tests/data/malformed/ fails at the position its first line names;
 * a bounded, deterministic mutation fuzzer; docs/TEXT_IR.md lists every op.
 */
#include "common.h"

#include "ir/graph.h"
#include "ir/text_ir.h"
#include "ops/op.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------ */

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  for (;;) {
    if (n == cap) {
      cap *= 2;
      buf = realloc(buf, cap + 1);
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    if (!got) break;
    n += got;
  }
  fclose(f);
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* Sorted list of file names in dir ending with suffix. */
static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}
static int list_dir(const char *dir, const char *suffix, char ***out) {
  DIR *d = opendir(dir);
  int n = 0, cap = 16;
  char **names = malloc(sizeof(char *) * (size_t)cap);
  if (!d) {
    *out = names;
    return 0;
  }
  struct dirent *e;
  size_t sl = strlen(suffix);
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l <= sl || strcmp(e->d_name + l - sl, suffix) != 0) continue;
    if (n == cap) names = realloc(names, sizeof(char *) * (size_t)(cap *= 2));
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof(char *), cmp_str);
  *out = names;
  return n;
}

static void free_list(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

static bool same_attr(const loom_attr_spec *s, const loom_attr_value *a,
                      const loom_attr_value *b) {
  switch (s->kind) {
  case LOOM_ATTR_INT: return a->i == b->i;
  case LOOM_ATTR_FLOAT:
    return memcmp(&a->f, &b->f, sizeof a->f) == 0 || (isnan(a->f) && isnan(b->f));
  case LOOM_ATTR_INTS:
    return a->ints.n == b->ints.n &&
           memcmp(a->ints.v, b->ints.v, sizeof(int64_t) * (size_t)a->ints.n) == 0;
  }
  return false;
}

static bool same_name(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Structural equality of two graphs, matching values by role (input i,
 * node k output o), not by id: ids differ when inputs were added late. */
static bool same_graph(const loom_graph *a, const loom_graph *b) {
  if (a->n_values != b->n_values || a->n_nodes != b->n_nodes || a->n_inputs != b->n_inputs ||
      a->n_outputs != b->n_outputs)
    return false;
  int32_t *map = malloc(sizeof(int32_t) * (size_t)(a->n_values + 1));
  bool ok = true;
  for (int32_t v = 0; v < a->n_values; v++) map[v] = -1;
  for (int32_t i = 0; i < a->n_inputs && ok; i++) {
    int32_t va = a->inputs[i], vb = b->inputs[i];
    map[va] = vb;
    ok = a->values[va].kind == b->values[vb].kind &&
         same_name(a->values[va].name, b->values[vb].name) &&
         loom_type_equal(&a->values[va].type, &b->values[vb].type);
  }
  for (int32_t k = 0; k < a->n_nodes && ok; k++) {
    const loom_node *na = &a->nodes[k], *nb = &b->nodes[k];
    const loom_op_def *d = loom_op_get(na->op);
    ok = na->op == nb->op && na->n_in == nb->n_in && na->n_out == nb->n_out;
    for (int32_t i = 0; ok && i < na->n_in; i++) ok = map[na->in[i]] == nb->in[i];
    for (int32_t j = 0; ok && j < d->n_attrs; j++)
      ok = same_attr(&d->attrs[j], &na->attr[j], &nb->attr[j]);
    for (int32_t o = 0; ok && o < na->n_out; o++) {
      int32_t va = na->out[o], vb = nb->out[o];
      map[va] = vb;
      ok = same_name(a->values[va].name, b->values[vb].name) &&
           loom_type_equal(&a->values[va].type, &b->values[vb].type);
    }
  }
  for (int32_t i = 0; i < a->n_outputs && ok; i++)
    ok = map[a->outputs[i]] == b->outputs[i] &&
         strcmp(a->output_names[i], b->output_names[i]) == 0;
  free(map);
  return ok;
}

/* print(g) parses back to an equal graph that prints identically.
 * Returns the first print (caller frees) or NULL. */
static char *check_roundtrip(loom_ctx *ctx, const loom_graph *g, const char *what) {
  char *t1 = NULL, *t2 = NULL;
  loom_graph *g2 = NULL;
  CHECK_OK(ctx, loom_graph_print(g, &t1));
  if (!t1) return NULL;
  loom_status st = loom_graph_parse(ctx, t1, &g2);
  CHECK_OK(ctx, st);
  if (st) {
    fprintf(stderr, "%s: the printed text does not parse:\n%s\n", what, t1);
    loom_free(t1);
    return NULL;
  }
  CHECK_OK(ctx, loom_graph_verify(g2));
  CHECK_OK(ctx, loom_graph_print(g2, &t2));
  bool same_text = t2 && strcmp(t1, t2) == 0;
  CHECK(same_text);
  if (!same_text) fprintf(stderr, "%s: print differs:\n%s\n--- vs ---\n%s\n", what, t1, t2);
  bool same = same_graph(g, g2);
  CHECK(same);
  if (!same) fprintf(stderr, "%s: parsed graph differs from the original\n", what);
  loom_free(t2);
  loom_graph_free(g2);
  return t1;
}

/* ---- a graph using every op --------------------------------------------- */

#define AI(n, v) {.name = n, .kind = LOOM_ATTR_INT, .i = (v)}
#define AF(n, v) {.name = n, .kind = LOOM_ATTR_FLOAT, .f = (v)}
#define AS(n, ...)                                                                  \
  {.name = n, .kind = LOOM_ATTR_INTS,                                               \
   .n_ints = (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),        \
   .ints = (int64_t[]){__VA_ARGS__}}
#define AS0(n) {.name = n, .kind = LOOM_ATTR_INTS, .n_ints = 0, .ints = NULL}
#define ATTRS(...) (int32_t)(sizeof((loom_attr[]){__VA_ARGS__}) / sizeof(loom_attr)), \
                   (loom_attr[]){__VA_ARGS__}
#define INS(...) (int32_t)(sizeof((loom_value[]){__VA_ARGS__}) / sizeof(loom_value)), \
                 (loom_value[]){__VA_ARGS__}

static loom_ctx *g_ctx;

static loom_value op(loom_graph *g, loom_op o, int32_t n_in, const loom_value *in,
                     int32_t n_attrs, const loom_attr *attrs) {
  loom_value v = LOOM_VALUE_NONE;
  loom_status st = loom_graph_op(g, o, n_in, in, n_attrs, attrs, &v);
  CHECK_OK(g_ctx, st);
  if (st) fprintf(stderr, "  (building %s)\n", loom_op_name(o));
  return v;
}
#define OP0(o, ...) op(g, LOOM_OP_##o, 0, NULL, ATTRS(__VA_ARGS__))
#define OPN(o, ins) op(g, LOOM_OP_##o, INS ins, 0, NULL)
#define OPA(o, ins, ...) op(g, LOOM_OP_##o, INS ins, ATTRS(__VA_ARGS__))

static loom_value in(loom_graph *g, bool param, const char *name, loom_dtype dt, int32_t rank,
                     const int64_t *shape) {
  loom_value v = LOOM_VALUE_NONE;
  CHECK_OK(g_ctx, param ? loom_graph_param(g, name, dt, rank, shape, &v)
                        : loom_graph_input(g, name, dt, rank, shape, &v));
  return v;
}
#define SH(...) (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

static loom_graph *build_all_ops(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = in(g, false, "x", LOOM_DTYPE_F32, SH(2, 3));
  loom_value y = in(g, false, "y", LOOM_DTYPE_F32, SH(2, 3));
  loom_value s = in(g, false, "s", LOOM_DTYPE_F32, 0, NULL);
  loom_value d = in(g, false, "d", LOOM_DTYPE_F64, SH(3));
  loom_value h = in(g, false, "h", LOOM_DTYPE_F16, SH(2, 3));
  loom_value bf = in(g, false, "bf", LOOM_DTYPE_BF16, SH(3));
  loom_value i32v = in(g, false, "idx32", LOOM_DTYPE_I32, SH(2));
  loom_value i64v = in(g, false, "idx64", LOOM_DTYPE_I64, SH(2));
  loom_value flag = in(g, false, "flag", LOOM_DTYPE_BOOL, SH(2, 3));
  loom_value u8v = in(g, false, "bytes", LOOM_DTYPE_U8, SH(4));
  loom_value one = in(g, false, "weird name", LOOM_DTYPE_F32, SH(1));
  loom_value w = in(g, true, "w", LOOM_DTYPE_F32, SH(3, 4));
  loom_value gamma = in(g, true, "blocks.0.ln.gamma", LOOM_DTYPE_F32, SH(3));
  loom_value beta = in(g, true, "blocks.0.ln.beta", LOOM_DTYPE_F32, SH(3));
  loom_value bias = in(g, true, "bias", LOOM_DTYPE_F32, SH(4));

  /* element-wise unary, on several dtypes */
  loom_value first = OPN(NEG, (x));
  OPN(NEG, (i32v));
  OPN(ABS, (h));
  OPN(SIGN, (d));
  OPN(EXP, (bf));
  OPN(LOG, (x));
  OPN(SQRT, (x));
  OPN(RSQRT, (x));
  OPN(RECIPROCAL, (s));
  OPN(TANH, (x));
  OPN(SIGMOID, (x));
  OPN(RELU, (h));
  OPN(ERF, (x));
  OPN(SIN, (d));
  OPN(COS, (d));
  /* binary, with broadcasting against a rank-0 value */
  OPN(ADD, (x, s));
  OPN(SUB, (x, y));
  OPN(MUL, (x, y));
  OPN(DIV, (s, x));
  OPN(POW, (d, d));
  OPN(MAXIMUM, (x, y));
  OPN(MINIMUM, (x, y));
  OPN(EQ, (i64v, i64v));
  OPN(NE, (u8v, u8v));
  OPN(LT, (x, y));
  OPN(LE, (x, y));
  OPN(GT, (x, y));
  OPN(GE, (x, y));
  OPN(SELECT, (flag, x, y));
  OPA(CAST, (x), AI("dtype", LOOM_DTYPE_BF16));
  OPA(CAST, (i64v), AI("dtype", LOOM_DTYPE_BOOL));
  /* reductions */
  loom_value rs = OPA(REDUCE_SUM, (x), AS("axes", 0, 1));
  OPA(REDUCE_MAX, (x), AS("axes", -1), AI("keepdims", 1));
  OPA(REDUCE_MIN, (x), AS0("axes"));
  /* layout */
  OPA(RESHAPE, (x), AS("shape", 3, 2));
  OPA(RESHAPE, (one), AS0("shape")); /* to rank 0: required, printed as [] */
  OPA(RESHAPE, (rs), AS("shape", 1, 1, 1, 1, 1, 1, 1, 1));
  OPA(TRANSPOSE, (x), AS("perm", 1, 0));
  OPA(BROADCAST_TO, (s), AS("shape", 2, 3));
  OPA(SLICE, (x), AS("starts", 0, 1), AS("ends", 2, 3));
  OPA(CONCAT, (x, y, x), AI("axis", -2));
  OPA(PAD, (x), AS("lo", 1, 0), AS("hi", 0, 2), AF("value", -INFINITY));
  /* indexing and sources */
  OPA(GATHER, (x, i32v), AI("axis", 1));
  OPA(SCATTER_ADD, (i64v, x), AS("shape", 5, 3), AI("axis", 0));
  OPA(IOTA, (), AS("shape", 4), AI("dtype", LOOM_DTYPE_I32));
  OP0(CONSTANT, AS("shape", 2, 2), AI("dtype", LOOM_DTYPE_F64), AF("value", 0.1));
  op(g, LOOM_OP_CONSTANT, 0, NULL, 0, NULL); /* all defaults: constant() */
  OP0(CONSTANT, AF("value", 1e-30));
  OP0(CONSTANT, AF("value", NAN), AI("dtype", LOOM_DTYPE_F16));
  OP0(CONSTANT, AF("value", -0.0));
  OP0(CONSTANT, AF("value", 5e-324));
  OP0(CONSTANT, AF("value", 1.7976931348623157e308));
  OP0(CONSTANT, AF("value", 255), AI("dtype", LOOM_DTYPE_U8));
  OP0(CONSTANT, AF("value", 1.0 / 3.0));
  loom_value base = OP0(CONSTANT, AI("dtype", LOOM_DTYPE_I64), AF("value", 1e15));
  /* matmul, dropout */
  OPA(MATMUL, (x, y), AI("trans_b", 1));
  OPA(MATMUL, (x, y), AI("trans_a", 1));
  OPA(DROPOUT, (x), AF("p", 0.25), AI("seed", -42), AI("offset", INT64_C(1234567890123)));
  OPA(DROPOUT, (x, base), AI("seed", INT64_MAX));
  /* convolutions and pools over [N, C, W] */
  loom_value img = in(g, false, "img", LOOM_DTYPE_F32, SH(1, 2, 6));
  loom_value ker = in(g, false, "ker", LOOM_DTYPE_F32, SH(2, 1, 3));
  loom_value cy = OPA(CONV, (img, ker), AS("strides", 2), AS("pads_lo", 1), AS("pads_hi", 1),
                      AI("groups", 2));
  OPA(CONV_TRANSPOSE, (cy, ker), AS("strides", 2), AS("output_padding", 1), AI("groups", 2));
  OPA(CONV_GRAD_WEIGHT, (img, cy), AS("strides", 2), AS("pads_lo", 1), AS("pads_hi", 1),
      AI("groups", 2), AS("kernel", 3));
  loom_value py = OPA(MAX_POOL, (img), AS("kernel", 2), AS("strides", 2), AI("ceil_mode", 1));
  OPA(MAX_POOL_GRAD, (img, py), AS("kernel", 2), AS("strides", 2), AI("ceil_mode", 1));
  py = OPA(AVG_POOL, (img), AS("kernel", 3), AS("pads_lo", 1), AS("pads_hi", 1),
           AI("count_include_pad", 1));
  OPA(AVG_POOL_GRAD, (img, py), AS("kernel", 3), AS("pads_lo", 1), AS("pads_hi", 1),
      AI("count_include_pad", 1));
  /* composites */
  OPA(REDUCE_MEAN, (x), AS("axes", 0), AI("keepdims", 1));
  OPA(SOFTMAX, (x), AI("axis", 0));
  OPN(LOG_SOFTMAX, (x));
  OPA(LAYER_NORM, (x, gamma, beta), AF("eps", 1e-30));
  OPA(RMS_NORM, (x, gamma), AF("eps", 0.5), AI("axis", 1));
  OPA(GELU, (x), AI("approximate", 1));
  OPN(SILU, (x));
  OPN(CROSS_ENTROPY, (x, i64v));
  loom_value lin = OPN(LINEAR, (x, w, bias));
  loom_value q = in(g, false, "q", LOOM_DTYPE_F32, SH(1, 2, 4));
  loom_value k = in(g, false, "k", LOOM_DTYPE_F32, SH(1, 2, 4));
  loom_value v = in(g, false, "v", LOOM_DTYPE_F32, SH(1, 2, 5));
  OPA(ATTENTION, (q, k, v, base), AI("causal", 1), AF("p", 0.1), AI("seed", 7),
      AI("offset", -3), AF("scale", 0.125));
  OPN(ATTENTION, (q, k, v));
  /* what the attention pass makes of it: a mask, the flash ops */
  loom_value bits = OPA(DROPOUT_MASK, (base), AF("p", 0.1), AI("seed", 7), AI("offset", -3),
                        AI("numel", 4), AI("overlap", 1));
  loom_value fa[2], fg[3];
  CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_FLASH_ATTENTION, 5,
                                    (loom_value[]){q, k, v, base, bits}, 2,
                                    (loom_attr[]){AI("causal", 1), AF("p", 0.1)}, 2, fa));
  CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_FLASH_ATTENTION_GRAD, 7,
                                    (loom_value[]){q, k, v, fa[0], fa[1], fa[0], base}, 0, NULL,
                                    3, fg));
  /* adamw: three outputs, inputs declared after nodes (ids interleave) */
  loom_value gw = in(g, false, "gw", LOOM_DTYPE_F32, SH(3, 4));
  loom_value m = in(g, false, "m", LOOM_DTYPE_F32, SH(3, 4));
  loom_value vv = in(g, false, "v2", LOOM_DTYPE_F32, SH(3, 4));
  loom_value step = in(g, false, "step", LOOM_DTYPE_F32, 0, NULL);
  loom_value pmv[3];
  loom_attr adam[] = {AF("lr", 0.5), AF("beta1", 0), AF("beta2", 0.99), AF("eps", 1e-12),
                      AF("weight_decay", -0.0)};
  CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_ADAMW, 5, (loom_value[]){w, gw, m, vv, step}, 5,
                                    adam, 3, pmv));
  loom_value pmv2[3];
  CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_ADAMW, 5, (loom_value[]){w, gw, m, vv, step}, 0,
                                    NULL, 3, pmv2));

  /* comm ops: global forms (one result per member) and per-device forms */
  loom_value ar[2], ag[2], rsc[2], a2a[2], bc[3];
  CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_ALL_REDUCE, 2, (loom_value[]){x, y}, 3,
                                    (loom_attr[]){AI("size", 2), AI("seq", 3), AI("reduce", 1)},
                                    2, ar));
  CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_ALL_GATHER, 2, (loom_value[]){x, y}, 3,
                                    (loom_attr[]){AI("group", 4), AI("size", 2), AI("axis", -1)},
                                    2, ag));
  CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_REDUCE_SCATTER, 2, (loom_value[]){x, y}, 2,
                                    (loom_attr[]){AI("size", 2), AI("reduce", 2)}, 2, rsc));
  CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_ALL_TO_ALL, 2, (loom_value[]){x, y}, 3,
                                    (loom_attr[]){AI("size", 2), AI("split_axis", 0),
                                                  AI("concat_axis", 1)},
                                    2, a2a));
  CHECK_OK(ctx, loom_graph_op_multi(g, LOOM_OP_BROADCAST, 1, &x, 2,
                                    (loom_attr[]){AI("size", 3), AI("root", 2)}, 3, bc));
  OPA(BROADCAST, (), AI("size", 3), AI("member", 1), AI("seq", 8), AS("shape", 4, 5),
      AI("dtype", LOOM_DTYPE_I32));
  OPA(ALL_REDUCE, (x), AI("group", 1), AI("size", 4), AI("member", 3), AI("seq", 9));
  OPA(TRANSFER, (x), AI("src", 1), AI("dst", 0));
  OPA(TRANSFER, (x), AI("src", 1), AI("dst", 0), AI("member", 0), AI("seq", 10));
  OPA(TRANSFER, (), AI("src", 1), AI("dst", 0), AI("member", 1), AI("seq", 10), AS("shape", 2, 3));

  /* names: plain, dotted, needing quotes */
  CHECK_OK(ctx, loom_value_set_name(g, lin, "hidden"));
  CHECK_OK(ctx, loom_value_set_name(g, pmv[0], "w.new"));
  CHECK_OK(ctx, loom_value_set_name(g, pmv[1], "9lives"));
  CHECK_OK(ctx, loom_value_set_name(g, pmv[2], "a\"b\\c\x01\xc3\xa9"));
  CHECK_OK(ctx, loom_graph_output(g, "loss", rs));
  CHECK_OK(ctx, loom_graph_output(g, "out put", lin));
  CHECK_OK(ctx, loom_graph_output(g, "input", pmv[0]));
  CHECK_OK(ctx, loom_graph_output(g, "first", first));
  CHECK_OK(ctx, loom_graph_output(g, "m2", pmv2[1]));
  return g;
}

static void test_all_ops(loom_ctx *ctx) {
  loom_graph *g = build_all_ops(ctx);
  CHECK_OK(ctx, loom_graph_verify(g));
  /* every op of LOOM_OP_LIST appears */
  for (int o = 0; o < LOOM_OP_COUNT; o++) {
    bool found = false;
    for (int32_t i = 0; i < g->n_nodes && !found; i++) found = g->nodes[i].op == (loom_op)o;
    CHECK(found);
    if (!found) fprintf(stderr, "op %s is not covered by build_all_ops\n", loom_op_name(o));
  }
  char *t = check_roundtrip(ctx, g, "all ops");
  CHECK(t != NULL);
  if (!t) {
    loom_graph_free(g);
    return;
  }
  /* The expected lines, written by hand from docs/TEXT_IR.md. */
  static const char *const want[] = {
      "input %x : f32[2, 3]\n",
      "input %s : f32[]\n",
      "input %\"weird name\" : f32[1]\n",
      "param %w : f32[3, 4]\n",
      "param %blocks.0.ln.gamma : f32[3]\n",
      "input %step : f32[]\n",
      "%0 : f32[2, 3] = neg(%x)\n",
      "%1 : i32[2] = neg(%idx32)\n",
      "%2 : f16[2, 3] = abs(%h)\n",
      "%15 : f32[2, 3] = add(%x, %s)\n",
      "%19 : f64[3] = pow(%d, %d)\n",
      "%22 : bool[2] = eq(%idx64, %idx64)\n",
      "%23 : bool[4] = ne(%bytes, %bytes)\n",
      " = select(%flag, %x, %y)\n",
      " : bf16[2, 3] = cast(%x, dtype=bf16)\n",
      " : bool[2] = cast(%idx64, dtype=bool)\n",
      " : f32[] = reduce_sum(%x, axes=[0, 1])\n",
      " : f32[2, 1] = reduce_max(%x, axes=[-1], keepdims=true)\n",
      " : f32[] = reduce_min(%x)\n",
      " : f32[] = reshape(%\"weird name\", shape=[])\n",
      " : f32[1, 1, 1, 1, 1, 1, 1, 1] = reshape(%",
      " : f32[6, 3] = concat(%x, %y, %x, axis=-2)\n",
      " : f32[3, 5] = pad(%x, lo=[1, 0], hi=[0, 2], value=-inf)\n",
      " : f32[5, 3] = scatter_add(%idx64, %x, shape=[5, 3])\n",
      " : i32[4] = iota(shape=[4], dtype=i32)\n",
      " : f64[2, 2] = constant(shape=[2, 2], dtype=f64, value=0.1)\n",
      " : f32[] = constant()\n",
      " = constant(value=1e-30)\n",
      " : f16[] = constant(dtype=f16, value=nan)\n",
      " = constant(value=-0)\n",
      " = constant(value=5e-324)\n",
      " = constant(value=1.7976931348623157e+308)\n",
      " : u8[] = constant(dtype=u8, value=255)\n",
      " = constant(value=0.3333333333333333)\n",
      " : i64[] = constant(dtype=i64, value=1e+15)\n",
      " : f32[2, 2] = matmul(%x, %y, trans_b=true)\n",
      " : f32[3, 3] = matmul(%x, %y, trans_a=true)\n",
      " = dropout(%x, p=0.25, seed=-42, offset=1234567890123)\n",
      " = dropout(%x, %", /* the base is numbered */
      ", seed=9223372036854775807)\n",
      " : f32[1, 3] = reduce_mean(%x, axes=[0], keepdims=true)\n",
      " = softmax(%x, axis=0)\n",
      " : f32[1, 2, 3] = conv(%img, %ker, strides=[2], pads_lo=[1], pads_hi=[1], groups=2)\n",
      " : f32[1, 2, 3] = max_pool(%img, kernel=[2], strides=[2], ceil_mode=true)\n",
      " = log_softmax(%x)\n",
      " = layer_norm(%x, %blocks.0.ln.gamma, %blocks.0.ln.beta, eps=1e-30)\n",
      " = rms_norm(%x, %blocks.0.ln.gamma, axis=1, eps=0.5)\n",
      " = gelu(%x, approximate=true)\n",
      " : f32[] = cross_entropy(%x, %idx64)\n",
      "%hidden : f32[2, 4] = linear(%x, %w, %bias)\n",
      ", causal=true, p=0.1, seed=7, offset=-3, scale=0.125)\n",
      " : f32[1, 2, 5] = attention(%q, %k, %v)\n",
      "%w.new : f32[3, 4], %\"9lives\" : f32[3, 4], %\"a\\\"b\\\\c\\x01\\xc3\\xa9\" : f32[3, 4] = "
      "adamw(%w, %gw, %m, %v2, %step, lr=0.5, beta1=0, beta2=0.99, eps=1e-12, "
      "weight_decay=-0)\n",
      " : f32[3, 4] = adamw(%w, %gw, %m, %v2, %step)\n",
      " : f32[2, 3] = all_reduce(%x, %y, size=2, seq=3, reduce=1)\n",
      " : f32[2, 6] = all_gather(%x, %y, group=4, size=2, axis=-1)\n",
      " : f32[1, 3] = reduce_scatter(%x, %y, size=2, reduce=2)\n",
      " : f32[1, 6] = all_to_all(%x, %y, size=2, concat_axis=1)\n",
      " : f32[2, 3] = broadcast(%x, size=3, root=2)\n",
      " : i32[4, 5] = broadcast(size=3, member=1, seq=8, shape=[4, 5], dtype=i32)\n",
      " : f32[2, 3] = all_reduce(%x, group=1, size=4, member=3, seq=9)\n",
      " : f32[2, 3] = transfer(%x, src=1)\n",
      " : i64[] = transfer(%x, src=1, member=0, seq=10)\n",
      " : f32[2, 3] = transfer(src=1, member=1, seq=10, shape=[2, 3])\n",
      "output loss = %",
      "output \"out put\" = %hidden\n",
      "output input = %w.new\n",
      "output first = %0\n",
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    bool found = strstr(t, want[i]) != NULL;
    CHECK(found);
    if (!found) fprintf(stderr, "printed text lacks: %s\n", want[i]);
  }
  if (loom_test_failures) fprintf(stderr, "--- printed:\n%s", t);
  free(t);
  loom_graph_free(g);
}

/* ---- hand-written texts ------------------------------------------------- */

/* Parses text, which must give the graph that prints as `want`. */
static void expect_print(loom_ctx *ctx, const char *text, const char *want) {
  loom_graph *g = NULL;
  char *t = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, text, &g));
  if (!g) return;
  CHECK_OK(ctx, loom_graph_verify(g));
  CHECK_OK(ctx, loom_graph_print(g, &t));
  bool same = t && strcmp(t, want) == 0;
  CHECK(same);
  if (!same) fprintf(stderr, "parsed:\n%s\nprinted:\n%s\nwanted:\n%s\n", text, t, want);
  free(t);
  loom_graph_free(g);
}

/* Parsing must fail with status st and a message starting with prefix. */
static void expect_error(loom_ctx *ctx, const char *text, loom_status st, const char *prefix) {
  loom_graph *g = (loom_graph *)&g; /* must be reset to NULL */
  loom_status got = loom_graph_parse(ctx, text, &g);
  const char *msg = loom_ctx_error(ctx);
  loom_test_checks++;
  if (got != st || g != NULL || strncmp(msg, prefix, strlen(prefix)) != 0) {
    loom_test_failures++;
    fprintf(stderr, "text '%s': got %s '%s', wanted %s '%s...'\n", text, loom_status_name(got),
            msg, loom_status_name(st), prefix);
  }
  if (got == LOOM_STATUS_OK) loom_graph_free(g);
}

static void test_texts(loom_ctx *ctx) {
  /* empty graphs */
  expect_print(ctx, "", "");
  expect_print(ctx, "\n\n   \t\r\n# only a comment", "");
  /* untyped results, CRLF, comments, extra spaces, renumbering */
  expect_print(ctx,
               "# c\r\ninput %a:f32[2,2]\r\n%7=neg( %a )  # n\n%3 = add(%7, %a)\n"
               "%z : f32[2, 2] = mul(%3, %3)\noutput  o=%3\n",
               "input %a : f32[2, 2]\n%0 : f32[2, 2] = neg(%a)\n%1 : f32[2, 2] = add(%0, %a)\n"
               "%z : f32[2, 2] = mul(%1, %1)\noutput o = %1\n");
  /* attributes in any order, defaults dropped, ints as floats, bools as 0/1,
   * +/- signs, exponents, inf spelled with a sign */
  expect_print(ctx,
               "input %x : f32[2, 3]\ninput %y : f32[3, 2]\n"
               "%m = matmul(%x, %y, trans_b=0, trans_a=false)\n"
               "%c = constant(value=+1e2, dtype=f32)\n"
               "%p = pad(%x, hi=[+0, -0], lo=[0, 0], value=-inf)\n"
               "%q = pad(%x, hi=[0, 0], lo=[0, 0], value=+inf)\n"
               "%r = pad(%x, hi=[0, 0], lo=[0, 0], value=.5)\n"
               "%d = dropout(%x, p=0)\n",
               "input %x : f32[2, 3]\ninput %y : f32[3, 2]\n"
               "%m : f32[2, 2] = matmul(%x, %y)\n"
               "%c : f32[] = constant(value=100)\n"
               "%p : f32[2, 3] = pad(%x, lo=[0, 0], hi=[0, 0], value=-inf)\n"
               "%q : f32[2, 3] = pad(%x, lo=[0, 0], hi=[0, 0], value=inf)\n"
               "%r : f32[2, 3] = pad(%x, lo=[0, 0], hi=[0, 0], value=0.5)\n"
               "%d : f32[2, 3] = dropout(%x, p=0)\n");
  /* the recomputation mark (loom_node.copy): after the attributes, 0 dropped */
  expect_print(ctx,
               "input %x : f32[2]\n%a = exp(%x)\n%b = exp(%x, copy=1)\n%c = exp(%x, copy=0)\n"
               "%d = dropout(%x, copy=2, p=0.5)\n",
               "input %x : f32[2]\n%a : f32[2] = exp(%x)\n%b : f32[2] = exp(%x, copy=1)\n"
               "%c : f32[2] = exp(%x)\n%d : f32[2] = dropout(%x, p=0.5, copy=2)\n");
  expect_error(ctx, "input %x : f32[2]\n%a = exp(%x, copy=1, copy=1)\n", LOOM_STATUS_PARSE,
               "2:22: attribute 'copy' is given twice");
  expect_error(ctx, "input %x : f32[2]\n%a = exp(%x, copy=-1)\n", LOOM_STATUS_PARSE,
               "2:21: 'copy' is a count");
  /* inputs after nodes keep declaration order among inputs */
  expect_print(ctx,
               "input %a : f32[]\n%b = neg(%a)\nparam %c : i64[3]\noutput b = %b\n",
               "input %a : f32[]\nparam %c : i64[3]\n%b : f32[] = neg(%a)\noutput b = %b\n");
  /* quoted names and escapes; the same name may be an output and a value */
  expect_print(ctx,
               "input %\"x\\ty\" : f32[]\n%\"\\x41\" = neg(%\"x\\ty\")\noutput \"A\" = %A\n",
               "input %\"x\\x09y\" : f32[]\n%A : f32[] = neg(%\"x\\x09y\")\noutput A = %A\n");
  /* a long variadic list */
  {
    size_t cap = 64 * 1024, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "input %%x : f32[1]\n%%c = concat(");
    for (int i = 0; i < 1000; i++) n += (size_t)snprintf(s + n, cap - n, "%s%%x", i ? ", " : "");
    snprintf(s + n, cap - n, ")\noutput c = %%c\n");
    loom_graph *g = NULL;
    CHECK_OK(ctx, loom_graph_parse(ctx, s, &g));
    CHECK(g && g->n_nodes == 1 && g->nodes[0].n_in == 1000 &&
          g->values[1].type.shape[0] == 1000);
    loom_graph_free(g);
    free(s);
  }

  expect_error(ctx, "input %x : f32[2]\n%y : f32[3] = neg(%x)\n", LOOM_STATUS_PARSE,
               "2:6: type mismatch: f32[3] is written, but neg gives f32[2]");
  expect_error(ctx, "input %x : f32[2]\n%y = nope(%x)\n", LOOM_STATUS_PARSE,
               "2:6: unknown op 'nope'");
  expect_error(ctx, "input %x : f32[2]\n%y = neg(%x, foo=1)\n", LOOM_STATUS_PARSE,
               "2:14: unknown attribute 'foo' for neg (its attributes: none)");
  expect_error(ctx, "input %x : f32[2]\n%y = neg(%q)\n", LOOM_STATUS_PARSE,
               "2:10: undefined value %q");
  expect_error(ctx, "input %x : f32[2]\n%x = neg(%x)\n", LOOM_STATUS_PARSE,
               "2:1: redefined value: %x");
  expect_error(ctx, "input %x : f32[2]\n\n  %y = add(%x", LOOM_STATUS_PARSE,
               "3:14: expected ',' or ')' but found the end of the file");
  /* graph-building errors keep their status, prefixed by the position */
  expect_error(ctx, "input %x : f32[2]\ninput %y : f32[3]\n%z = add(%x, %y)\n",
               LOOM_STATUS_SHAPE_MISMATCH, "3:6: add");
  expect_error(ctx, "input %x : f32[2]\noutput o = %x\noutput o = %x\n",
               LOOM_STATUS_INVALID_ARGUMENT, "3:8: output name 'o' is already used");
  expect_error(ctx, "input %x : f32[1099511627776, 1099511627776]\n",
               LOOM_STATUS_INVALID_ARGUMENT, "1:7: input 'x': shape has too many elements");
  /* window ops: bad shapes and attributes are errors that say which */
  expect_error(ctx, "input %x : f32[1, 4, 5]\ninput %w : f32[6, 3, 3]\n%y = conv(%x, %w)\n",
               LOOM_STATUS_SHAPE_MISMATCH, "3:6: conv: channels of f32[1, 4, 5] and f32[6, 3, 3]");
  expect_error(ctx, "input %x : f32[1, 4, 2]\ninput %w : f32[6, 4, 3]\n%y = conv(%x, %w)\n",
               LOOM_STATUS_SHAPE_MISMATCH, "3:6: conv: the window (3 positions");
  expect_error(ctx, "input %x : f32[1, 4, 5]\ninput %w : f32[6, 4, 3]\n"
               "%y = conv(%x, %w, strides=[0])\n",
               LOOM_STATUS_INVALID_ARGUMENT, "3:6: conv: 'strides' must be >= 1, got 0");
  expect_error(ctx, "input %x : f32[1, 4, 5, 5]\ninput %w : f32[6, 4, 3, 3]\n"
               "%y = conv(%x, %w, pads_lo=[1])\n",
               LOOM_STATUS_INVALID_ARGUMENT, "3:6: conv: 'pads_lo' has 1 values for 2 spatial dims");
  expect_error(ctx, "input %x : f32[4, 5]\n%y = max_pool(%x, kernel=[2])\n",
               LOOM_STATUS_SHAPE_MISMATCH, "2:6: max_pool: needs [N, C, spatial...]");
  expect_error(ctx, "input %x : f32[1, 2, 5]\n%y = avg_pool(%x, kernel=[2], pads_lo=[2])\n",
               LOOM_STATUS_INVALID_ARGUMENT, "2:6: avg_pool: padding (2, 0) of spatial dim 0");
  expect_error(ctx, "input %x : i32[1, 2, 5]\n%y = max_pool(%x, kernel=[2])\n",
               LOOM_STATUS_DTYPE_MISMATCH, "2:6: max_pool: needs a float input");

  /* NUL bytes through the length-aware entry */
  loom_graph *g = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_graph_parse_text(ctx, "input %x\0 : f32[]", 17, &g));
  CHECK(strncmp(loom_ctx_error(ctx), "1:9: unexpected NUL byte", 24) == 0);
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_graph_parse_text(ctx, "# a\0b\n", 6, &g));
  CHECK(strncmp(loom_ctx_error(ctx), "1:4: ", 5) == 0);
  CHECK_OK(ctx, loom_graph_parse_text(ctx, "input %x : f32[]\ngarbage", 16, &g));
  loom_graph_free(g);
  /* bad arguments */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_graph_parse(ctx, NULL, &g));
  CHECK(loom_graph_parse(ctx, "", NULL) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_graph_print(NULL, NULL) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_graph_load(ctx, LOOM_TEST_DATA "/no/such.loom", &g));
  CHECK(strstr(loom_ctx_error(ctx), "no/such.loom") && strstr(loom_ctx_error(ctx), strerror(ENOENT)));
  CHECK(g == NULL);
}

/* ---- example files ------------------------------------------------------ */

static void test_examples(loom_ctx *ctx) {
  char **names;
  int n = list_dir(LOOM_TEST_DATA, ".loom", &names);
  CHECK(n >= 3);
  for (int i = 0; i < n; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", LOOM_TEST_DATA, names[i]);
    loom_graph *g = NULL;
    loom_status st = loom_graph_load(ctx, path, &g);
    CHECK_OK(ctx, st);
    if (st) continue;
    CHECK_OK(ctx, loom_graph_verify(g));
    CHECK(g->n_nodes > 0 && g->n_outputs > 0);
    free(check_roundtrip(ctx, g, names[i]));
    loom_graph_free(g);
  }
  free_list(names, n);
}

/* ---- malformed files ---------------------------------------------------- */

static void test_malformed(loom_ctx *ctx) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/malformed", LOOM_TEST_DATA);
  char **names;
  int n = list_dir(dir, ".loom", &names);
  CHECK(n >= 30);
  for (int i = 0; i < n; i++) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    size_t len = 0;
    char *text = read_file(path, &len);
    CHECK(text != NULL);
    if (!text) continue;
    /* "# expect: LINE:COL[ substring]" */
    int line = 0, col = 0, used = 0;
    bool header = sscanf(text, "# expect: %d:%d%n", &line, &col, &used) == 2;
    CHECK(header);
    if (!header) {
      fprintf(stderr, "%s: no '# expect: LINE:COL' first line\n", names[i]);
      free(text);
      continue;
    }
    char want_sub[256] = "";
    const char *rest = text + used;
    while (*rest == ' ') rest++;
    size_t k = 0;
    while (rest[k] && rest[k] != '\n' && rest[k] != '\r' && k < sizeof want_sub - 1) {
      want_sub[k] = rest[k];
      k++;
    }
    want_sub[k] = '\0';
    char pos[64];
    snprintf(pos, sizeof pos, "%d:%d: ", line, col);

    loom_graph *g = NULL;
    loom_status st = loom_graph_parse_text(ctx, text, len, &g);
    const char *msg = loom_ctx_error(ctx);
    bool ok = st != LOOM_STATUS_OK && g == NULL && strncmp(msg, pos, strlen(pos)) == 0 &&
              strstr(msg, want_sub) != NULL;
    CHECK(ok);
    if (!ok)
      fprintf(stderr, "%s: got %s '%s', wanted '%s...%s'\n", names[i], loom_status_name(st),
              msg, pos, want_sub);
    else if (getenv("LOOM_TEST_VERBOSE"))
      printf("  %-28s %s\n", names[i], msg);
    loom_graph_free(g);
    /* the file API adds the path in front */
    g = NULL;
    st = loom_graph_load(ctx, path, &g);
    char full[1400];
    snprintf(full, sizeof full, "%s:%s", path, pos);
    ok = st != LOOM_STATUS_OK && strncmp(loom_ctx_error(ctx), full, strlen(full)) == 0;
    CHECK(ok);
    if (!ok) fprintf(stderr, "%s via load: '%s'\n", names[i], loom_ctx_error(ctx));
    loom_graph_free(g);
    free(text);
  }
  free_list(names, n);
}

/* ---- mutation fuzzer ---------------------------------------------------- */

typedef struct frng {
  uint64_t s;
} frng;
static uint64_t fnext(frng *r) {
  r->s ^= r->s << 13;
  r->s ^= r->s >> 7;
  r->s ^= r->s << 17;
  return r->s;
}
static size_t frand(frng *r, size_t n) { return n ? (size_t)(fnext(r) % n) : 0; }

/* A failed parse leaves "LINE:COL: message". */
static bool positioned(const char *msg) {
  int a = 0, b = 0, used = 0;
  return sscanf(msg, "%d:%d: %n", &a, &b, &used) == 2 && used > 0 && a >= 1 && b >= 1 &&
         msg[used] != '\0';
}

static void test_fuzz(loom_ctx *ctx, char **seeds, size_t *seed_len, int n_seeds) {
  static const char *const pieces[] = {
      "%", "(", ")", "[", "]", ",", "=", ":", "\n", "\"", "#", "-", "+", ".", "\\", "\\x",
      "inf", "nan", "-inf", "1e999", "1e-999", "99999999999999999999", "-9223372036854775808",
      "input ", "param ", "output ", "%x", "%0", "%\"q\"", "f32[", "i64[]", "bool", "adamw(",
      "matmul(", "concat(", "axes=[", "shape=[]", "dtype=", "true", "0", "-1", "2.5e-3",
      "\xff", "\xc3\xa9", "\0", "\r\n", "\t", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
      "((((((((((((((((((((((((((((((((", ",,,,,,,,", "%%%%%%%%",
  };
  const int n_pieces = (int)(sizeof pieces / sizeof pieces[0]);
  const char *quick = getenv("LOOM_TEST_QUICK");
  int iters = quick && *quick && strcmp(quick, "0") != 0 ? 2000 : 20000;
  frng r = {0x243f6a8885a308d3ull};
  size_t cap = 1 << 16;
  char *buf = malloc(cap);
  int n_ok = 0, n_err = 0, bad = 0;
  for (int it = 0; it < iters; it++) {
    int si = (int)frand(&r, (size_t)n_seeds);
    size_t len = seed_len[si];
    if (len + 4096 > cap) continue;
    memcpy(buf, seeds[si], len);
    int n_mut = 1 + (int)frand(&r, 4);
    for (int m = 0; m < n_mut; m++) {
      size_t at = frand(&r, len + 1);
      switch (frand(&r, 7)) {
      case 0: /* flip a byte */
        if (len) buf[frand(&r, len)] ^= (char)(1 + frand(&r, 255));
        break;
      case 1: { /* delete a range */
        size_t k = 1 + frand(&r, 16);
        if (k > len - at) k = len - at;
        memmove(buf + at, buf + at + k, len - at - k);
        len -= k;
        break;
      }
      case 2: { /* insert a random byte */
        memmove(buf + at + 1, buf + at, len - at);
        buf[at] = (char)frand(&r, 256);
        len++;
        break;
      }
      case 3:
      case 4: { /* insert a structural piece */
        int p = (int)frand(&r, (size_t)n_pieces);
        size_t k = pieces[p][0] ? strlen(pieces[p]) : 1;
        if (len + k >= cap) break;
        memmove(buf + at + k, buf + at, len - at);
        memcpy(buf + at, pieces[p], k);
        len += k;
        break;
      }
      case 5: /* truncate */
        len = at;
        break;
      default: { /* copy a chunk of the text elsewhere */
        size_t from = frand(&r, len + 1), k = frand(&r, 64);
        if (k > len - from) k = len - from;
        if (len + k >= cap) break;
        char tmp[64];
        memcpy(tmp, buf + from, k);
        memmove(buf + at + k, buf + at, len - at);
        memcpy(buf + at, tmp, k);
        len += k;
        break;
      }
      }
    }
    /* Exact-size copy so ASan catches any read past the end. */
    char *text = malloc(len ? len : 1);
    memcpy(text, buf, len);
    loom_graph *g = NULL;
    loom_status st = loom_graph_parse_text(ctx, text, len, &g);
    if (st == LOOM_STATUS_OK) {
      n_ok++;
      /* whatever parses is a valid graph that round-trips */
      bool good = g && loom_graph_verify(g) == LOOM_STATUS_OK;
      char *t1 = NULL;
      if (good) {
        char *t = check_roundtrip(ctx, g, "fuzz");
        good = t != NULL;
        free(t1 = t);
      }
      if (!good) {
        bad++;
        fprintf(stderr, "fuzz %d: parsed but broken: %s\n", it, loom_ctx_error(ctx));
      }
    } else {
      n_err++;
      bool good = g == NULL && (st == LOOM_STATUS_OUT_OF_MEMORY || positioned(loom_ctx_error(ctx)));
      if (!good) {
        bad++;
        fprintf(stderr, "fuzz %d: status %s, message '%s'\n", it, loom_status_name(st),
                loom_ctx_error(ctx));
      }
    }
    loom_graph_free(g);
    free(text);
  }
  loom_test_checks++;
  if (bad) loom_test_failures++;
  /* the mutations must exercise both outcomes */
  CHECK(n_ok > iters / 100 && n_err > iters / 2);
  printf("fuzz: %d mutations, %d parsed, %d rejected, %d bad\n", iters, n_ok, n_err, bad);
  free(buf);
}

/* ---- docs/TEXT_IR.md lists every op with its attributes ----------------- */

static void attr_doc(const loom_attr_spec *s, char *buf, size_t n) {
  const char *kind = s->kind == LOOM_ATTR_FLOAT  ? "float"
                     : s->kind == LOOM_ATTR_INTS ? "ints"
                     : s->fmt == LOOM_ATTR_FMT_BOOL  ? "bool"
                     : s->fmt == LOOM_ATTR_FMT_DTYPE ? "dtype"
                                                     : "int";
  char def[64];
  if (s->required)
    snprintf(def, sizeof def, "required");
  else if (s->kind == LOOM_ATTR_INTS)
    snprintf(def, sizeof def, "[]");
  else if (s->kind == LOOM_ATTR_FLOAT)
    snprintf(def, sizeof def, "%g", s->def_f);
  else if (s->fmt == LOOM_ATTR_FMT_BOOL)
    snprintf(def, sizeof def, "%s", s->def_i ? "true" : "false");
  else if (s->fmt == LOOM_ATTR_FMT_DTYPE)
    snprintf(def, sizeof def, "%s", loom_dtype_name((loom_dtype)s->def_i));
  else
    snprintf(def, sizeof def, "%lld", (long long)s->def_i);
  snprintf(buf, n, "`%s`: %s = %s", s->name, kind, def);
}

static void test_doc(void) {
  size_t len = 0;
  char *doc = read_file(LOOM_TEST_DATA "/../../docs/TEXT_IR.md", &len);
  CHECK(doc != NULL);
  if (!doc) return;
  for (int o = 0; o < LOOM_OP_COUNT; o++) {
    const loom_op_def *d = loom_op_get((loom_op)o);
    char row[1024], a[160], ins[32];
    if (d->max_in < 0)
      snprintf(ins, sizeof ins, "%d+", d->min_in);
    else if (d->max_in == d->min_in)
      snprintf(ins, sizeof ins, "%d", d->min_in);
    else
      snprintf(ins, sizeof ins, "%d-%d", d->min_in, d->max_in);
    char outs[32];
    if (d->n_out < 0)
      snprintf(outs, sizeof outs, "1+");
    else
      snprintf(outs, sizeof outs, "%d", d->n_out);
    size_t k = (size_t)snprintf(row, sizeof row, "| `%s` | %s | %s | ", d->name, ins, outs);
    for (int32_t i = 0; i < d->n_attrs; i++) {
      attr_doc(&d->attrs[i], a, sizeof a);
      k += (size_t)snprintf(row + k, sizeof row - k, "%s%s", i ? ", " : "", a);
    }
    if (!d->n_attrs) k += (size_t)snprintf(row + k, sizeof row - k, "-");
    snprintf(row + k, sizeof row - k, " |\n");
    bool found = strstr(doc, row) != NULL;
    CHECK(found);
    if (!found) fprintf(stderr, "docs/TEXT_IR.md lacks the row:\n%s", row);
  }
  free(doc);
}

int main(void) {
  loom_ctx *ctx = NULL;
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  g_ctx = ctx;
  test_all_ops(ctx);
  test_texts(ctx);
  test_examples(ctx);
  test_malformed(ctx);
  test_doc();

  /* fuzz seeds: the examples and the all-ops graph */
  char *seeds[64];
  size_t seed_len[64];
  int n_seeds = 0;
  char **names;
  int n = list_dir(LOOM_TEST_DATA, ".loom", &names);
  for (int i = 0; i < n && n_seeds < 63; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", LOOM_TEST_DATA, names[i]);
    if ((seeds[n_seeds] = read_file(path, &seed_len[n_seeds]))) n_seeds++;
  }
  free_list(names, n);
  loom_graph *g = build_all_ops(ctx);
  if (loom_graph_print(g, &seeds[n_seeds]) == LOOM_STATUS_OK) {
    seed_len[n_seeds] = strlen(seeds[n_seeds]);
    n_seeds++;
  }
  loom_graph_free(g);
  if (n_seeds) test_fuzz(ctx, seeds, seed_len, n_seeds);
  for (int i = 0; i < n_seeds; i++) free(seeds[i]);

  loom_ctx_free(ctx);
  return loom_test_finish("test_text_ir");
}
