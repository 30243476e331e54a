/*
 * Plan files (parallel/plan_text.h): plans parsed over a small graph give
 * the sub-ops, devices, placements and ties they say; every kind of
 * mistake is an error at its LINE:COL; and a plan written out reads back
 * to an equal plan, for plans from files and plans made in C.
 */
#include "common.h"

#include "parallel/plan_text.h"

#include <stdlib.h>
#include <string.h>

/* Nodes: 0 matmul [8,16]x[16,32], 1 add (+ b1), 2 relu, 3 matmul x [32,4],
 * 4 reduce_sum (scalar), 5 neg(w2) (the "new" w2, for a tie). */
static const char graph_text[] =
    "input %x : f32[8, 16]\n"
    "param %w1 : f32[16, 32]\n"
    "param %b1 : f32[32]\n"
    "param %w2 : f32[32, 4]\n"
    "%h = matmul(%x, %w1)\n"
    "%hb = add(%h, %b1)\n"
    "%r = relu(%hb)\n"
    "%y = matmul(%r, %w2)\n"
    "%s = reduce_sum(%y)\n"
    "%nw = neg(%w2)\n"
    "output y = %y\n"
    "output s = %s\n"
    "output \"new w2\" = %nw\n";

static loom_plan *parse(loom_ctx *ctx, const loom_graph *g, const char *text) {
  loom_plan *p = NULL;
  loom_status st = loom_plan_parse(ctx, g, text, strlen(text), &p);
  if (st) fprintf(stderr, "parse failed: %s\n--\n%s--\n", loom_ctx_error(ctx), text);
  CHECK(st == LOOM_STATUS_OK && p);
  return p;
}

static int32_t sub(const loom_plan *p, const char *name) {
  int32_t s = loom_plan_find_subop(p, name);
  if (s < 0) fprintf(stderr, "no sub-op %s\n", name);
  return s;
}

static int32_t device_of(const loom_plan *p, const char *name) {
  int32_t s = sub(p, name);
  return s < 0 ? -99 : p->subops[s].device;
}

/* write p, parse it back, compare */
static void check_round_trip(loom_ctx *ctx, const loom_plan *p, const char *what) {
  loom_strbuf b = {0};
  CHECK_OK(ctx, loom_plan_write(p, &b));
  CHECK(!b.oom);
  char *text = loom_strbuf_take(&b);
  if (!text) return;
  loom_plan *q = NULL;
  CHECK_OK(ctx, loom_plan_parse(ctx, p->graph, text, strlen(text), &q));
  char why[256];
  bool same = q && loom_plan_same(p, q, why, sizeof why);
  if (!same) fprintf(stderr, "%s: round trip differs: %s\n%s", what, q ? why : "", text);
  CHECK(same);
  /* and printing is stable */
  loom_strbuf b2 = {0};
  if (q) CHECK_OK(ctx, loom_plan_write(q, &b2));
  char *text2 = loom_strbuf_take(&b2);
  CHECK(text2 && strcmp(text, text2) == 0);
  free(text2);
  free(text);
  loom_plan_free(q);
}

static void test_data_parallel(loom_ctx *ctx, const loom_graph *g) {
  loom_plan *p = parse(ctx, g,
                       "# data parallel over the rows of x\n"
                       "plan devices 2\n"
                       "trans matmul.0 split out0 0 2   # the rows of h\n"
                       "trans add.* split out0 0 2\n"
                       "trans relu.2 split in0 0 2\n"
                       "trans matmul.3 split in0 0 2\n"
                       "trans reduce_sum.4 split in0 0 2  # partial sums\n"
                       "trans neg.5 replicate 2\n"
                       "assign * 0 1\n"
                       "input %x D(0,2) on 0 1\n"
                       "output y D(0,2) on 0 1\n"
                       "tie \"new w2\" %w2\n");
  if (!p) return;
  CHECK(p->n_devices == 2);
  CHECK(p->n_subops == 6 + 12);
  for (int32_t node = 0; node < 6; node++) CHECK(p->subops[node].n_children == 2);
  CHECK(device_of(p, "matmul.0#0") == 0 && device_of(p, "matmul.0#1") == 1);
  CHECK(device_of(p, "reduce_sum.4#1") == 1);
  /* matmul.0#1 computes rows 4..8 of h: label m = [4, 8), k and n whole */
  int32_t m = loom_plan_label(p, 0, true, 0, 0), s = sub(p, "matmul.0#1");
  CHECK(m >= 0 && s >= 0);
  if (m >= 0 && s >= 0) CHECK(p->subops[s].r.lo[m] == 4 && p->subops[s].r.hi[m] == 8);
  s = sub(p, "neg.5#1");
  CHECK(s >= 0 && p->subops[s].replica == 1 && p->subops[s].replicas == 2);
  CHECK(p->inputs[0].set && p->inputs[0].layout.n_pieces == 2 && p->inputs[0].devices[1] == 1);
  CHECK(!p->inputs[1].set);
  CHECK(p->outputs[0].set && !p->outputs[1].set);
  CHECK(p->tied[2] == 3 && p->tied[0] == -1);
  check_round_trip(ctx, p, "data parallel");
  loom_plan_free(p);
}

static void test_nested_and_patterns(loom_ctx *ctx, const loom_graph *g) {
  loom_plan *p = parse(ctx, g,
                       "plan devices 4\n"
                       "trans matmul.* split out0 1 2        # columns, both matmuls\n"
                       "trans matmul.*#* split out0 0 2      # then rows of each half\n"
                       "assign matmul.0#0 0 1\n"
                       "assign matmul.0#1 2 3\n"
                       "assign matmul.3#* 3                  # every part of matmul.3 on 3\n"
                       "trans add.1 split out0 0 4\n"
                       "trans relu.2 split out0 1 2\n"
                       "trans reduce_sum.4 replicate 4\n"
                       "assign add.1 0 1 2 3\n"
                       "assign relu.2#* 2\n"
                       "assign reduce_sum.4 1 0 3 2\n"
                       "assign neg.5 0\n"
                       "order matmul.0#0#0 add.1#0\n");
  if (!p) return;
  /* matmul.0 is 2 x 2 leaves; matmul.0#1#0 covers n [16, 32), m [0, 4) */
  int32_t m = loom_plan_label(p, 0, true, 0, 0), n = loom_plan_label(p, 0, true, 0, 1);
  int32_t s = sub(p, "matmul.0#1#0");
  CHECK(s >= 0 && m >= 0 && n >= 0);
  if (s >= 0 && m >= 0 && n >= 0) {
    CHECK(p->subops[s].r.lo[n] == 16 && p->subops[s].r.hi[n] == 32);
    CHECK(p->subops[s].r.lo[m] == 0 && p->subops[s].r.hi[m] == 4);
  }
  CHECK(device_of(p, "matmul.0#1#0") == 2 && device_of(p, "matmul.0#1#1") == 3);
  CHECK(device_of(p, "matmul.3#0#1") == 3 && device_of(p, "matmul.3#1#0") == 3);
  CHECK(device_of(p, "relu.2#1") == 2 && device_of(p, "reduce_sum.4#0") == 1);
  CHECK(device_of(p, "reduce_sum.4#3") == 2 && device_of(p, "add.1#3") == 3);
  CHECK(p->n_orders == 1 && p->orders[0].before == sub(p, "matmul.0#0#0") &&
        p->orders[0].after == sub(p, "add.1#0"));
  check_round_trip(ctx, p, "nested");
  loom_plan_free(p);
}

/* The else-replicate fallback replicates the nodes whose dim cannot split. */
static void test_else_replicate(loom_ctx *ctx, const loom_graph *g) {
  loom_plan *p = parse(ctx, g,
                       "plan devices 4\n"
                       "trans * split out0 0 4 else replicate\n"
                       "assign * 0 1 2 3\n");
  if (!p) return;
  /* the scalar sum has no dim 0: replicated; neg's out0 dim 0 (32 rows) splits */
  int32_t s = sub(p, "reduce_sum.4#3");
  CHECK(s >= 0 && p->subops[s].replicas == 4 && p->subops[s].replica == 3);
  s = sub(p, "neg.5#2");
  CHECK(s >= 0 && p->subops[s].replicas == 1);
  CHECK(device_of(p, "relu.2#3") == 3);
  check_round_trip(ctx, p, "else replicate");
  loom_plan_free(p);
}

/* Splitting the label that follows dim 0 of %x through the graph: data
 * parallelism in two lines, the weight-only neg replicated. */
static void test_follow_input(loom_ctx *ctx, const loom_graph *g) {
  loom_plan *p = parse(ctx, g,
                       "plan devices 2\n"
                       "trans * split %x 0 2 else replicate\n"
                       "assign * 0 1\n");
  if (!p) return;
  /* matmul.3 splits its rows (m), the sum the rows it reduces (partial sums) */
  int32_t m3 = loom_plan_label(p, 3, true, 0, 0), r4 = loom_plan_label(p, 4, false, 0, 0);
  int32_t s3 = sub(p, "matmul.3#1"), s4 = sub(p, "reduce_sum.4#1"), s5 = sub(p, "neg.5#1");
  CHECK(m3 >= 0 && r4 >= 0 && s3 >= 0 && s4 >= 0 && s5 >= 0);
  if (m3 >= 0 && r4 >= 0 && s3 >= 0 && s4 >= 0 && s5 >= 0) {
    CHECK(p->subops[s3].r.lo[m3] == 4 && p->subops[s3].r.hi[m3] == 8);
    CHECK(p->subops[s4].r.lo[r4] == 4 && p->subops[s4].r.hi[r4] == 8);
    CHECK(p->subops[s5].replicas == 2 && p->subops[s5].replica == 1);
  }
  /* the add's rows follow, its bias columns do not */
  int32_t a1 = sub(p, "add.1#0"), rows = loom_plan_label(p, 1, true, 0, 0);
  CHECK(a1 >= 0 && rows >= 0 && p->subops[a1].r.hi[rows] == 4);
  CHECK(device_of(p, "add.1#1") == 1);
  check_round_trip(ctx, p, "follow %x");
  loom_plan_free(p);
}

/* A plan made in C, with orders and every kind of placement. */
static void test_written_plan(loom_ctx *ctx, const loom_graph *g) {
  loom_plan *p = NULL;
  CHECK_OK(ctx, loom_plan_new(ctx, g, 2, &p));
  if (!p) return;
  int32_t first = -1, l = loom_plan_label(p, 0, false, 0, 1); /* k of matmul.0 */
  CHECK(l >= 0);
  CHECK_OK(ctx, loom_op_trans(p, 0, (loom_algo){LOOM_ALGO_SPLIT, l}, 2, &first));
  CHECK_OK(ctx, loom_op_assign(p, first, 0));
  CHECK_OK(ctx, loom_op_assign(p, first + 1, 1));
  CHECK_OK(ctx, loom_op_trans(p, 2, (loom_algo){LOOM_ALGO_REPLICATE, 0}, 2, &first));
  CHECK_OK(ctx, loom_op_assign(p, first, 1));
  CHECK_OK(ctx, loom_op_assign(p, first + 1, 0));
  for (int32_t node = 1; node < 6; node++)
    if (node != 2) CHECK_OK(ctx, loom_op_assign(p, node, 0));
  CHECK_OK(ctx, loom_op_order(p, 1, 3));
  loom_vlayout lay;
  CHECK_OK(ctx, loom_vlayout_parse(ctx, loom_value_type(g, g->inputs[1]), "D(1,2)R(2)", 10, 1, 1,
                                   &lay));
  CHECK_OK(ctx, loom_plan_set_input(p, 1, &lay, (int32_t[]){1, 0, 0, 1}));
  CHECK_OK(ctx, loom_vlayout_parse(ctx, loom_value_type(g, g->outputs[1]), "R(2)", 4, 1, 1, &lay));
  CHECK_OK(ctx, loom_plan_set_output(p, 1, &lay, (int32_t[]){1, 0}));
  CHECK_OK(ctx, loom_plan_tie(p, 2, 3));
  loom_strbuf b = {0};
  CHECK_OK(ctx, loom_plan_write(p, &b));
  char *text = loom_strbuf_take(&b);
  const char *want = "plan devices 2\n"
                     "trans matmul.0 split in0 1 2\n"
                     "trans relu.2 replicate 2\n"
                     "assign matmul.0 0 1\n"
                     "assign add.1 0\n"
                     "assign relu.2 1 0\n"
                     "assign matmul.3 0\n"
                     "assign reduce_sum.4 0\n"
                     "assign neg.5 0\n"
                     "order add.1 matmul.3\n"
                     "input %w1 D(1,2)R(2) on 1 0 0 1\n"
                     "output s R(2) on 1 0\n"
                     "tie \"new w2\" %w2\n";
  if (!text || strcmp(text, want) != 0)
    fprintf(stderr, "written:\n%s--\nwanted:\n%s", text ? text : "(none)", want);
  CHECK(text && strcmp(text, want) == 0);
  free(text);
  check_round_trip(ctx, p, "made in C");
  /* the comparison sees a change */
  loom_plan *q = NULL;
  CHECK_OK(ctx, loom_plan_copy(p, &q));
  if (q) {
    CHECK(loom_plan_same(p, q, NULL, 0));
    CHECK_OK(ctx, loom_op_assign(q, loom_plan_find_subop(q, "relu.2#1"), 1));
    char why[128];
    CHECK(!loom_plan_same(p, q, why, sizeof why));
    CHECK(strstr(why, "relu.2#1") != NULL);
  }
  loom_plan_free(q);
  loom_plan_free(p);
}

typedef struct bad_case {
  const char *text;
  const char *message; /* the whole message, or its start when it ends in '*' */
} bad_case;

static void test_errors(loom_ctx *ctx, const loom_graph *g) {
  static const bad_case cases[] = {
      {"", "1:1: expected 'plan devices N' but found the end of the file"},
      {"# only a comment\n\n", "3:1: expected 'plan devices N' but found the end of the file"},
      {"trans matmul.0 replicate 2\n",
       "1:1: expected 'plan devices N' before anything else but found 'trans'"},
      {"plan devices 0\n", "1:14: a device count 0 is outside [1, 4096]"},
      {"plan devices 99999999999999999999999\n",
       "1:14: a device count 99999999999999999999999 is outside [1, 4096]"},
      {"plan devices 2\nplan devices 2\n", "2:1: a plan file has one 'plan devices N' line"},
      {"plan devices 2 3\n", "1:16: expected the end of the line but found the number 3"},
      {"plan devices 2\nsplit matmul.0 2\n", "2:1: unknown statement 'split' (*"},
      {"plan devices 2\n%x = 3\n", "2:1: expected a statement (trans, assign, order, input, "
                                   "output, tie) but found %x"},
      {"plan devices 2\ntrans matmul.9 replicate 2\n",
       "2:7: unknown node 9: the graph has nodes 0 to 5"},
      {"plan devices 2\ntrans add.0 replicate 2\n", "2:7: node 0 is a matmul, not a add"},
      {"plan devices 2\ntrans warp.0 replicate 2\n", "2:7: unknown op 'warp' in 'warp.0'"},
      {"plan devices 2\ntrans matmul replicate 2\n", "2:7: 'matmul' is not a sub-op selector*"},
      {"plan devices 2\ntrans softmax.* replicate 2\n",
       "2:7: 'softmax.*' selects nothing: the graph has no softmax node"},
      {"plan devices 2\ntrans matmul.0#1 replicate 2\n",
       "2:7: matmul.0 is not cut, so it has no part to select"},
      {"plan devices 2\ntrans matmul.0 replicate 2\nassign matmul.0#2 0\n",
       "3:8: matmul.0 has 2 parts, so no part 2"},
      {"plan devices 2\ntrans matmul.0 replicate 2\ntrans matmul.0 replicate 2\n",
       "3:7: matmul.0 is already cut into 2 parts (select them with matmul.0#*)"},
      {"plan devices 2\ntrans matmul.0 split out0 1 3\n",
       "2:29: op_trans matmul.0: label 2 spans 32, which does not split evenly into 3 parts"},
      {"plan devices 2\ntrans reduce_sum.4 split out0 0 2\n",
       "2:26: output 0 of reduce_sum.4 has no dim 0 (rank 0)"},
      {"plan devices 2\ntrans add.1 split in1 0 2 extra\n",
       "2:27: expected the end of the line but found 'extra'"},
      {"plan devices 2\ntrans add.1 split in2 0 2\n", "2:19: add.1 has no input 2"},
      {"plan devices 2\ntrans add.1 split left 0 2\n",
       "2:19: expected an operand (in0, in1, ..., out0, ...) but found 'left'"},
      {"plan devices 2\ntrans add.1 split in0 8 2\n", "2:23: a dim 8 is outside [0, 7]"},
      {"plan devices 2\ntrans neg.5 split %x 0 2\n",
       "2:19: neg.5: no dim of it follows dim 0 of input x"},
      {"plan devices 2\ntrans * split %x 2 2\n", "2:18: input x has no dim 2 (rank 2)"},
      {"plan devices 2\ntrans * split %tokens 0 2\n", "2:15: the graph has no input named 'tokens'"},
      {"plan devices 2\ntrans add.1 slice 2\n",
       "2:13: expected 'split' or 'replicate' but found 'slice'"},
      {"plan devices 2\ntrans\n", "2:6: expected a sub-op name or pattern but found the end of "
                                  "the line"},
      {"plan devices 2\nassign matmul.0 2\n", "2:17: device 2 is outside [0, 1]"},
      {"plan devices 2\nassign matmul.0\n", "2:16: expected a device but found the end of the line"},
      {"plan devices 2\nassign matmul.0 0 1\n",
       "2:17: 2 devices for matmul.0, which is not cut (*"},
      {"plan devices 3\ntrans relu.2 replicate 2\nassign relu.2 0 1 2\n",
       "3:15: relu.2 has 2 parts but 3 devices are given"},
      {"plan devices 2\norder matmul.0 *\n", "2:16: order takes sub-op names, not patterns ('*')"},
      {"plan devices 2\norder matmul.0\n",
       "2:15: expected a second sub-op name but found the end of the line"},
      {"plan devices 2\ninput %z D(0,2) on 0 1\n", "2:7: the graph has no input named 'z'"},
      {"plan devices 2\ninput %x D(0,3) on 0 1 2\n", "2:10: vlayout: D(0,3)*"},
      {"plan devices 2\ninput %x D(0,2) on 0\n",
       "2:20: the layout D(0,2) has 2 pieces but 1 device is given"},
      {"plan devices 2\ninput %x D(0,2) at 0 1\n", "2:17: expected 'on' but found 'at'"},
      {"plan devices 2\ninput %x Q(2) on 0 1\n", "2:10: expected a layout*"},
      {"plan devices 2\noutput y D(0,2) on 0 5\n", "2:22: device 5 is outside [0, 1]"},
      {"plan devices 2\noutput nope R(2) on 0 1\n", "2:8: the graph has no output named 'nope'"},
      {"plan devices 2\ntie y %x\n",
       "2:1: output y and input x differ in type, so one cannot update the other"},
      {"plan devices 2\ntrans matmul.0 replicate 2\nbuiltin dp2\n",
       "3:1: 'builtin' must come right after 'plan devices N'"},
      {"plan devices 2\ntrans matmul.0 replicate 99999999999\n",
       "2:26: a part count 99999999999 is outside [1, 4096]"},
      {"plan devices 2\ntrans matmul.0#x replicate 2\n",
       "2:7: 'matmul.0#x': unexpected '#x' (parts are #i or #*)"},
      {"plan devices 2\ntrans matmul.0 # a comment, not a part\n",
       "2:39: expected 'split' or 'replicate' but found the end of the line"},
      {"plan devices 2\ntrans matmul.0 replicate 2 \x01\n", "2:28: unexpected byte 0x01"},
      {"plan devices 2\ntrans matmul.0 replicate 2\nassign matmul.0#99999999999999 0\n",
       "3:8: matmul.0 has 2 parts, so no part 2147483648"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    loom_plan *p = NULL;
    loom_status st = loom_plan_parse(ctx, g, cases[i].text, strlen(cases[i].text), &p);
    const char *msg = loom_ctx_error(ctx);
    size_t n = strlen(cases[i].message);
    bool prefix = n && cases[i].message[n - 1] == '*';
    bool match = prefix ? strncmp(msg, cases[i].message, n - 1) == 0
                        : strcmp(msg, cases[i].message) == 0;
    if (st != LOOM_STATUS_PARSE || !match || p)
      fprintf(stderr, "case %zu: %s\n  got  '%s' (%s)\n  want '%s'\n", i, cases[i].text, msg,
              loom_status_name(st), cases[i].message);
    CHECK(st == LOOM_STATUS_PARSE && match && !p);
    loom_plan_free(p);
  }
}

/* Cuts nest at most 16 deep; a plan 16 deep round-trips. */
static void test_depth(loom_ctx *ctx, const loom_graph *g) {
  char text[4096], name[256] = "matmul.0";
  size_t k = (size_t)snprintf(text, sizeof text, "plan devices 1\n");
  for (int level = 0; level < 17; level++) {
    k += (size_t)snprintf(text + k, sizeof text - k, "trans %s replicate 1\n", name);
    strcat(name, "#0");
  }
  loom_plan *p = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_plan_parse(ctx, g, text, strlen(text), &p));
  CHECK(strstr(loom_ctx_error(ctx), "18:7: matmul.0#0#0#0#0#0#0#0#0#0#0#0#0#0#0#0#0 is 16 cuts "
                                    "deep") == loom_ctx_error(ctx));
  /* without the last line: 16 levels */
  text[k - strlen("trans  replicate 1\n") - (strlen(name) - 2)] = '\0';
  p = parse(ctx, g, text);
  if (p) {
    CHECK(sub(p, "matmul.0#0#0#0#0#0#0#0#0#0#0#0#0#0#0#0#0") > 0);
    check_round_trip(ctx, p, "16 deep");
  }
  loom_plan_free(p);
}

/* `builtin` starts from a built-in plan, or says at its spec that there is none. */
static void test_builtin(loom_ctx *ctx, const loom_graph *g) {
  const char *text = "plan devices 2\nbuiltin nosuchplan7\n";
  loom_plan *p = NULL;
  loom_status st = loom_plan_parse(ctx, g, text, strlen(text), &p);
  CHECK(st == LOOM_STATUS_PARSE && !p);
  CHECK(strncmp(loom_ctx_error(ctx), "2:9: ", 5) == 0);
  loom_plan_free(p);
}

static void test_load(loom_ctx *ctx, const loom_graph *g) {
  char path[] = "/tmp/loom_plan_text_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  FILE *f = fdopen(fd, "w");
  fputs("plan devices 2\ntrans matmul.0 replicate 3 x\n", f);
  fclose(f);
  loom_plan *p = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_plan_load(ctx, g, path, &p));
  char want[128];
  snprintf(want, sizeof want, "%s:2:28: expected the end of the line", path);
  CHECK(strncmp(loom_ctx_error(ctx), want, strlen(want)) == 0);
  /* open: a file's device count must match */
  f = fopen(path, "w");
  fputs("plan devices 2\n", f);
  fclose(f);
  CHECK_OK(ctx, loom_plan_open(ctx, g, path, 2, &p));
  CHECK(p && p->n_devices == 2);
  loom_plan_free(p);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_plan_open(ctx, g, path, 4, &p));
  CHECK(strstr(loom_ctx_error(ctx), "the plan is for 2 devices, not 4") != NULL);
  CHECK(!p);
  remove(path);
  CHECK(loom_plan_open(ctx, g, "/nonexistent/plan", 2, &p) != LOOM_STATUS_OK && !p);
}

int main(void) {
  loom_ctx *ctx = NULL;
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse(ctx, graph_text, &g));
  if (g) {
    test_data_parallel(ctx, g);
    test_nested_and_patterns(ctx, g);
    test_else_replicate(ctx, g);
    test_written_plan(ctx, g);
    test_follow_input(ctx, g);
    test_errors(ctx, g);
    test_builtin(ctx, g);
    test_depth(ctx, g);
    test_load(ctx, g);
  }
  loom_graph_free(g);
  loom_ctx_free(ctx);
  return loom_test_finish("test_plan_text");
}
