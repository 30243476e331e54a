/*
 * Known answers for the layout, index and source ops: shape inference and
 * its errors through loom_graph_op, the reference kernels called directly on
 * views over local arrays, and one partition string per op.
 */
#include "common.h"

#include "ops/op.h"

#include <string.h>

static loom_ctx *ctx;

#define ATTR_INTS(nm, ...)                                                     \
  ((loom_attr){.name = nm, .kind = LOOM_ATTR_INTS,                             \
               .n_ints = (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
               .ints = (int64_t[]){__VA_ARGS__}})
#define ATTR_INT(nm, v) ((loom_attr){.name = nm, .kind = LOOM_ATTR_INT, .i = (v)})
#define ATTR_FLOAT(nm, v) ((loom_attr){.name = nm, .kind = LOOM_ATTR_FLOAT, .f = (v)})

static loom_value input(loom_graph *g, const char *name, loom_dtype dt,
                        int32_t rank, const int64_t *shape) {
  loom_value v = LOOM_VALUE_NONE;
  CHECK_OK(ctx, loom_graph_input(g, name, dt, rank, shape, &v));
  return v;
}

static const loom_node *last_node(const loom_graph *g) {
  return &g->nodes[g->n_nodes - 1];
}

/* Runs the last node's reference kernel on contiguous views of the given
 * arrays (in_data[i] for input i, out_data for the output). */
static loom_status run_last(loom_graph *g, void *const *in_data, void *out_data) {
  const loom_node *n = last_node(g);
  loom_view in[4], out;
  for (int32_t i = 0; i < n->n_in && i < 4; i++)
    in[i] = loom_view_of(&g->values[n->in[i]].type, in_data[i]);
  out = loom_view_of(&g->values[n->out[0]].type, out_data);
  loom_error_clear(ctx);
  return loom_op_get(n->op)->ref(ctx, n, in, &out);
}

/* The last node's partition, formatted. */
static const char *part_last(const loom_graph *g, char *buf, size_t len) {
  const loom_node *n = last_node(g);
  loom_type in[4], out = g->values[n->out[0]].type;
  for (int32_t i = 0; i < n->n_in && i < 4; i++) in[i] = g->values[n->in[i]].type;
  loom_partition p;
  loom_op_get(n->op)->partition(n, in, &out, &p);
  return loom_partition_str(&p, buf, len);
}

static void check_type(const loom_graph *g, loom_value v, loom_dtype dt,
                       int32_t rank, const int64_t *shape) {
  loom_dtype got_dt;
  int32_t got_rank;
  int64_t got[LOOM_MAX_RANK];
  CHECK_OK(ctx, loom_graph_value_type(g, v, &got_dt, &got_rank, got));
  CHECK(got_dt == dt);
  CHECK(got_rank == rank);
  for (int32_t d = 0; d < rank && d < got_rank; d++) CHECK(got[d] == shape[d]);
}

static void check_f32(const float *got, const float *want, int n) {
  for (int i = 0; i < n; i++) {
    loom_test_checks++;
    if (got[i] != want[i]) {
      loom_test_failures++;
      fprintf(stderr, "element %d: got %g, want %g\n", i, got[i], want[i]);
    }
  }
}

static void test_transpose(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){2, 3}), y;
  loom_attr perm = ATTR_INTS("perm", 1, 0);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_TRANSPOSE, 1, &x, 1, &perm, &y));
  check_type(g, y, LOOM_DTYPE_F32, 2, (int64_t[]){3, 2});
  float a[6] = {1, 2, 3, 4, 5, 6}, out[6] = {0};
  CHECK_OK(ctx, run_last(g, (void *[]){a}, out));
  check_f32(out, (float[]){1, 4, 2, 5, 3, 6}, 6);
  char buf[128];
  CHECK(strcmp(part_last(g, buf, sizeof buf), "a b -> b a") == 0);

  loom_attr bad = ATTR_INTS("perm", 0, 0);
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_TRANSPOSE, 1, &x, 1, &bad, &y));
  CHECK(strstr(loom_ctx_error(ctx), "perm") != NULL);
  bad = ATTR_INTS("perm", 0, 1, 2);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_TRANSPOSE, 1, &x, 1, &bad, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_TRANSPOSE, 1, &x, 0, NULL, &y));
  loom_graph_free(g);
}

static void test_reshape(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = input(g, "x", LOOM_DTYPE_F32, 3, (int64_t[]){2, 3, 4}), y;
  loom_attr shape = ATTR_INTS("shape", 2, -1);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_RESHAPE, 1, &x, 1, &shape, &y));
  check_type(g, y, LOOM_DTYPE_F32, 2, (int64_t[]){2, 12});
  char buf[128];
  CHECK(strcmp(part_last(g, buf, sizeof buf), "a b _ -> a b") == 0);
  float a[24], out[24];
  for (int i = 0; i < 24; i++) a[i] = (float)i;
  CHECK_OK(ctx, run_last(g, (void *[]){a}, out));
  check_f32(out, a, 24);

  shape = ATTR_INTS("shape", 4, -1);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_RESHAPE, 1, &x, 1, &shape, &y));
  check_type(g, y, LOOM_DTYPE_F32, 2, (int64_t[]){4, 6});

  /* A strided input: the transpose of a 2x3, read in its logical order. */
  loom_value t = input(g, "t", LOOM_DTYPE_F32, 2, (int64_t[]){3, 2}), r;
  shape = ATTR_INTS("shape", 6);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_RESHAPE, 1, &t, 1, &shape, &r));
  float m[6] = {1, 2, 3, 4, 5, 6}, flat[6] = {0};
  loom_type mt = {.dtype = LOOM_DTYPE_F32, .rank = 2, .shape = {2, 3}};
  loom_view mv = loom_view_of(&mt, m);
  loom_view tv = loom_view_permute(&mv, (int64_t[]){1, 0});
  loom_view ov = loom_view_of(&g->values[r].type, flat);
  CHECK_OK(ctx, loom_op_get(LOOM_OP_RESHAPE)->ref(ctx, last_node(g), &tv, &ov));
  check_f32(flat, (float[]){1, 4, 2, 5, 3, 6}, 6);

  shape = ATTR_INTS("shape", 5, 5);
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_RESHAPE, 1, &x, 1, &shape, &y));
  CHECK(strstr(loom_ctx_error(ctx), "reshape") != NULL);
  shape = ATTR_INTS("shape", 5, -1);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_RESHAPE, 1, &x, 1, &shape, &y));
  shape = ATTR_INTS("shape", -1, -1);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_RESHAPE, 1, &x, 1, &shape, &y));
  shape = ATTR_INTS("shape", -3, -8);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_RESHAPE, 1, &x, 1, &shape, &y));
  loom_graph_free(g);
}

static void test_broadcast_to(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){3, 1}), y;
  loom_attr shape = ATTR_INTS("shape", 2, 3, 4);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_BROADCAST_TO, 1, &x, 1, &shape, &y));
  check_type(g, y, LOOM_DTYPE_F32, 3, (int64_t[]){2, 3, 4});
  float a[3] = {1, 2, 3}, out[24] = {0}, want[24];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) want[(i * 3 + j) * 4 + k] = (float)(j + 1);
  CHECK_OK(ctx, run_last(g, (void *[]){a}, out));
  check_f32(out, want, 24);
  char buf[128];
  CHECK(strcmp(part_last(g, buf, sizeof buf), "b _ -> a b c") == 0);

  shape = ATTR_INTS("shape", 2, 4, 4);
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_BROADCAST_TO, 1, &x, 1, &shape, &y));
  shape = ATTR_INTS("shape", 3);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_BROADCAST_TO, 1, &x, 1, &shape, &y));
  loom_graph_free(g);
}

static void test_slice(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){3, 4}), y;
  loom_attr se[2] = {ATTR_INTS("starts", -2, 1), ATTR_INTS("ends", 3, -1)};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_SLICE, 1, &x, 2, se, &y));
  check_type(g, y, LOOM_DTYPE_F32, 2, (int64_t[]){2, 2});
  float a[12], out[4] = {0};
  for (int i = 0; i < 12; i++) a[i] = (float)i;
  CHECK_OK(ctx, run_last(g, (void *[]){a}, out));
  check_f32(out, (float[]){5, 6, 9, 10}, 4);
  char buf[128];
  CHECK(strcmp(part_last(g, buf, sizeof buf), "replicate") == 0); /* no dim splits */

  se[0] = ATTR_INTS("starts", 0, 1);
  se[1] = ATTR_INTS("ends", 3, 4);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_SLICE, 1, &x, 2, se, &y));
  CHECK(strcmp(part_last(g, buf, sizeof buf), "a _ -> a _") == 0);
  float out2[9] = {0};
  CHECK_OK(ctx, run_last(g, (void *[]){a}, out2));
  check_f32(out2, (float[]){1, 2, 3, 5, 6, 7, 9, 10, 11}, 9);

  /* start past end at dim 1, and an end past the extent: no clamping. */
  se[0] = ATTR_INTS("starts", 0, 3);
  se[1] = ATTR_INTS("ends", 3, 2);
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_SLICE, 1, &x, 2, se, &y));
  CHECK(strstr(loom_ctx_error(ctx), "dim 1") != NULL);
  se[0] = ATTR_INTS("starts", 0, 0);
  se[1] = ATTR_INTS("ends", 4, 4);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_SLICE, 1, &x, 2, se, &y));
  CHECK(strstr(loom_ctx_error(ctx), "dim 0") != NULL);
  se[0] = ATTR_INTS("starts", 0);
  se[1] = ATTR_INTS("ends", 3);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_SLICE, 1, &x, 2, se, &y));
  loom_graph_free(g);
}

static void test_concat(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value a = input(g, "a", LOOM_DTYPE_F32, 2, (int64_t[]){2, 2});
  loom_value b = input(g, "b", LOOM_DTYPE_F32, 2, (int64_t[]){2, 1});
  loom_value c = input(g, "c", LOOM_DTYPE_I32, 2, (int64_t[]){2, 1});
  loom_value d = input(g, "d", LOOM_DTYPE_F32, 2, (int64_t[]){3, 1}), y;
  loom_attr axis = ATTR_INT("axis", 1);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_CONCAT, 2, (loom_value[]){a, b}, 1, &axis, &y));
  check_type(g, y, LOOM_DTYPE_F32, 2, (int64_t[]){2, 3});
  float av[4] = {1, 2, 3, 4}, bv[2] = {5, 6}, out[6] = {0};
  CHECK_OK(ctx, run_last(g, (void *[]){av, bv}, out));
  check_f32(out, (float[]){1, 2, 5, 3, 4, 6}, 6);
  char buf[128];
  CHECK(strcmp(part_last(g, buf, sizeof buf), "a _, a _ -> a _") == 0);

  axis = ATTR_INT("axis", -1);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_CONCAT, 3, (loom_value[]){b, a, b}, 1, &axis, &y));
  check_type(g, y, LOOM_DTYPE_F32, 2, (int64_t[]){2, 4});
  float out4[8] = {0};
  CHECK_OK(ctx, run_last(g, (void *[]){bv, av, bv}, out4));
  check_f32(out4, (float[]){5, 1, 2, 5, 6, 3, 4, 6}, 8);
  /* default axis 0 */
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_CONCAT, 2, (loom_value[]){b, d}, 0, NULL, &y));
  check_type(g, y, LOOM_DTYPE_F32, 2, (int64_t[]){5, 1});

  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_CONCAT, 2, (loom_value[]){b, c}, 1, &axis, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_CONCAT, 2, (loom_value[]){a, d}, 1, &axis, &y));
  axis = ATTR_INT("axis", 2);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_CONCAT, 2, (loom_value[]){a, b}, 1, &axis, &y));
  loom_graph_free(g);
}

static void test_pad(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value x = input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){2, 2}), y;
  loom_attr at[3] = {ATTR_INTS("lo", 1, 0), ATTR_INTS("hi", 0, 2), ATTR_FLOAT("value", 9)};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_PAD, 1, &x, 3, at, &y));
  check_type(g, y, LOOM_DTYPE_F32, 2, (int64_t[]){3, 4});
  float a[4] = {1, 2, 3, 4}, out[12] = {0};
  CHECK_OK(ctx, run_last(g, (void *[]){a}, out));
  check_f32(out, (float[]){9, 9, 9, 9, 1, 2, 9, 9, 3, 4, 9, 9}, 12);
  char buf[128];
  CHECK(strcmp(part_last(g, buf, sizeof buf), "replicate") == 0); /* no dim splits */

  at[1] = ATTR_INTS("hi", 0, 0);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_PAD, 1, &x, 2, at, &y)); /* value 0 */
  CHECK(strcmp(part_last(g, buf, sizeof buf), "_ a -> _ a") == 0);
  float out2[6] = {7, 7, 7, 7, 7, 7};
  CHECK_OK(ctx, run_last(g, (void *[]){a}, out2));
  check_f32(out2, (float[]){0, 0, 1, 2, 3, 4}, 6);

  at[1] = ATTR_INTS("hi", 0, -1);
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_PAD, 1, &x, 2, at, &y));
  loom_graph_free(g);
}

static void test_gather(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value data = input(g, "data", LOOM_DTYPE_F32, 2, (int64_t[]){3, 2});
  loom_value idx = input(g, "idx", LOOM_DTYPE_I64, 1, (int64_t[]){3}), y;
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_GATHER, 2, (loom_value[]){data, idx}, 0, NULL, &y));
  check_type(g, y, LOOM_DTYPE_F32, 2, (int64_t[]){3, 2});
  float dv[6] = {1, 2, 3, 4, 5, 6}, out[6] = {0};
  int64_t iv[3] = {2, 0, 2};
  CHECK_OK(ctx, run_last(g, (void *[]){dv, iv}, out));
  check_f32(out, (float[]){5, 6, 1, 2, 5, 6}, 6);
  char buf[128];
  CHECK(strcmp(part_last(g, buf, sizeof buf), "b c, a -> a c | b:add") == 0);

  /* Out of range: an error naming the index, no read past the data. */
  int64_t bad[3] = {0, 3, 1};
  CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_RANGE, run_last(g, (void *[]){dv, bad}, out));
  CHECK(strstr(loom_ctx_error(ctx), "index 3") != NULL);
  bad[1] = -1;
  CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_RANGE, run_last(g, (void *[]){dv, bad}, out));
  CHECK(strstr(loom_ctx_error(ctx), "index -1") != NULL);

  /* Axis 1 with 2-d i32 indices: out[i][j][k] = data[i][idx[j][k]]. */
  loom_value d2 = input(g, "d2", LOOM_DTYPE_F32, 2, (int64_t[]){2, 3});
  loom_value i2 = input(g, "i2", LOOM_DTYPE_I32, 2, (int64_t[]){2, 2});
  loom_attr axis = ATTR_INT("axis", -1);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_GATHER, 2, (loom_value[]){d2, i2}, 1, &axis, &y));
  check_type(g, y, LOOM_DTYPE_F32, 3, (int64_t[]){2, 2, 2});
  int32_t i2v[4] = {2, 0, 1, 1};
  float out3[8] = {0};
  CHECK_OK(ctx, run_last(g, (void *[]){dv, i2v}, out3));
  check_f32(out3, (float[]){3, 1, 2, 2, 6, 4, 5, 5}, 8);
  CHECK(strcmp(part_last(g, buf, sizeof buf), "a d, b c -> a b c | d:add") == 0);

  /* Strided data (the transpose of the 3x2 data): gathers its rows. */
  loom_type dt = {.dtype = LOOM_DTYPE_F32, .rank = 2, .shape = {3, 2}};
  loom_view views[2];
  views[1] = loom_view_of(&g->values[i2].type, i2v);
  loom_view base = loom_view_of(&dt, dv);
  views[0] = loom_view_permute(&base, (int64_t[]){1, 0}); /* [[1,3,5],[2,4,6]] */
  loom_view ov = loom_view_of(&g->values[y].type, out3);
  CHECK_OK(ctx, loom_op_get(LOOM_OP_GATHER)->ref(ctx, last_node(g), views, &ov));
  check_f32(out3, (float[]){5, 1, 3, 3, 6, 2, 4, 4}, 8);

  /* A piece of a table: data holds rows [2, 5) of 6. Indices outside the
   * piece read zeros; outside the table, an error. */
  loom_attr piece[2] = {ATTR_INT("base", 2), ATTR_INT("range", 6)};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_GATHER, 2, (loom_value[]){data, idx}, 2, piece, &y));
  int64_t pv[3] = {4, 0, 2};
  CHECK_OK(ctx, run_last(g, (void *[]){dv, pv}, out));
  check_f32(out, (float[]){5, 6, 0, 0, 1, 2}, 6);
  pv[1] = 6;
  CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_RANGE, run_last(g, (void *[]){dv, pv}, out));
  CHECK(strstr(loom_ctx_error(ctx), "index 6") && strstr(loom_ctx_error(ctx), "[0, 6)"));
  piece[1] = ATTR_INT("range", 4); /* rows [2, 5) do not fit 4 */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_GATHER, 2, (loom_value[]){data, idx}, 2, piece, &y));
  CHECK(strstr(loom_ctx_error(ctx), "does not fit a table of 4 rows"));

  loom_value fidx = input(g, "fidx", LOOM_DTYPE_F32, 1, (int64_t[]){3});
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_GATHER, 2, (loom_value[]){data, fidx}, 0, NULL, &y));
  axis = ATTR_INT("axis", 2);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_GATHER, 2, (loom_value[]){data, idx}, 1, &axis, &y));
  loom_graph_free(g);
}

static void test_scatter_add(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value idx = input(g, "idx", LOOM_DTYPE_I64, 1, (int64_t[]){3});
  loom_value upd = input(g, "upd", LOOM_DTYPE_F32, 2, (int64_t[]){3, 2}), y;
  loom_attr shape = ATTR_INTS("shape", 4, 2);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_SCATTER_ADD, 2, (loom_value[]){idx, upd}, 1, &shape, &y));
  check_type(g, y, LOOM_DTYPE_F32, 2, (int64_t[]){4, 2});
  int64_t iv[3] = {0, 2, 0};
  float uv[6] = {1, 2, 3, 4, 5, 6}, out[8];
  for (int i = 0; i < 8; i++) out[i] = -1; /* must be overwritten */
  CHECK_OK(ctx, run_last(g, (void *[]){iv, uv}, out));
  check_f32(out, (float[]){6, 8, 0, 0, 3, 4, 0, 0}, 8);
  char buf[128];
  CHECK(strcmp(part_last(g, buf, sizeof buf), "a, a c -> b c | a:add") == 0);

  int64_t bad[3] = {0, 4, 0};
  CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_RANGE, run_last(g, (void *[]){bad, uv}, out));
  CHECK(strstr(loom_ctx_error(ctx), "index 4") != NULL);

  /* Axis 1: out[i][idx[j]] += upd[i][j]. */
  loom_value i1 = input(g, "i1", LOOM_DTYPE_I32, 1, (int64_t[]){3});
  loom_value u1 = input(g, "u1", LOOM_DTYPE_F32, 2, (int64_t[]){2, 3});
  loom_attr at[2] = {ATTR_INTS("shape", 2, 2), ATTR_INT("axis", 1)};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_SCATTER_ADD, 2, (loom_value[]){i1, u1}, 2, at, &y));
  int32_t i1v[3] = {1, 1, 0};
  float u1v[6] = {1, 2, 3, 10, 20, 30}, out2[4] = {0};
  CHECK_OK(ctx, run_last(g, (void *[]){i1v, u1v}, out2));
  check_f32(out2, (float[]){3, 3, 30, 30}, 4);

  /* A piece: rows [1, 3) of a 5-row gradient; updates to other rows are
   * dropped, an index past the table is an error. */
  loom_attr pa[3] = {ATTR_INTS("shape", 2, 2), ATTR_INT("base", 1), ATTR_INT("range", 5)};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_SCATTER_ADD, 2, (loom_value[]){idx, upd}, 3, pa, &y));
  int64_t piv[3] = {2, 4, 2};
  float out4[4] = {-1, -1, -1, -1};
  CHECK_OK(ctx, run_last(g, (void *[]){piv, uv}, out4));
  check_f32(out4, (float[]){0, 0, 6, 8}, 4);
  piv[1] = 5;
  CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_RANGE, run_last(g, (void *[]){piv, uv}, out4));

  shape = ATTR_INTS("shape", 4, 3);
  loom_error_clear(ctx);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_SCATTER_ADD, 2, (loom_value[]){idx, upd}, 1, &shape, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_SCATTER_ADD, 2, (loom_value[]){upd, upd}, 1, &shape, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_SCATTER_ADD, 2, (loom_value[]){idx, upd}, 0, NULL, &y));
  loom_graph_free(g);
}

static void test_sources(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value y;
  loom_attr at[3] = {ATTR_INTS("shape", 2, 3), ATTR_INT("axis", 1)};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_IOTA, 0, NULL, 2, at, &y));
  check_type(g, y, LOOM_DTYPE_I64, 2, (int64_t[]){2, 3});
  int64_t iv[6];
  CHECK_OK(ctx, run_last(g, NULL, iv));
  const int64_t want[6] = {0, 1, 2, 0, 1, 2};
  for (int i = 0; i < 6; i++) CHECK(iv[i] == want[i]);
  char buf[128];
  CHECK(strcmp(part_last(g, buf, sizeof buf), " -> a b") == 0);

  at[1] = ATTR_INT("axis", 0);
  at[2] = ATTR_INT("dtype", LOOM_DTYPE_F32);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_IOTA, 0, NULL, 3, at, &y));
  float fv[6];
  CHECK_OK(ctx, run_last(g, NULL, fv));
  check_f32(fv, (float[]){0, 0, 0, 1, 1, 1}, 6);

  loom_attr ca[3] = {ATTR_INTS("shape", 2, 2), ATTR_FLOAT("value", 2.5)};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_CONSTANT, 0, NULL, 2, ca, &y));
  check_type(g, y, LOOM_DTYPE_F32, 2, (int64_t[]){2, 2});
  float cv[4] = {0};
  CHECK_OK(ctx, run_last(g, NULL, cv));
  check_f32(cv, (float[]){2.5f, 2.5f, 2.5f, 2.5f}, 4);
  CHECK(strcmp(part_last(g, buf, sizeof buf), " -> a b") == 0);

  ca[1] = ATTR_INT("dtype", LOOM_DTYPE_I32);
  ca[2] = ATTR_FLOAT("value", 7);
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_CONSTANT, 0, NULL, 3, ca, &y));
  check_type(g, y, LOOM_DTYPE_I32, 2, (int64_t[]){2, 2});
  int32_t c32[4] = {0};
  CHECK_OK(ctx, run_last(g, NULL, c32));
  for (int i = 0; i < 4; i++) CHECK(c32[i] == 7);

  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_CONSTANT, 0, NULL, 0, NULL, &y));
  check_type(g, y, LOOM_DTYPE_F32, 0, NULL);
  float s = 5;
  CHECK_OK(ctx, run_last(g, NULL, &s));
  CHECK(s == 0);
  CHECK(strcmp(part_last(g, buf, sizeof buf), "replicate") == 0);

  loom_error_clear(ctx);
  at[1] = ATTR_INT("axis", 2);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_IOTA, 0, NULL, 2, at, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_IOTA, 0, NULL, 0, NULL, &y));
  ca[1] = ATTR_INT("dtype", 99);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_CONSTANT, 0, NULL, 2, ca, &y));
  loom_graph_free(g);
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  test_transpose();
  test_reshape();
  test_broadcast_to();
  test_slice();
  test_concat();
  test_pad();
  test_gather();
  test_scatter_add();
  test_sources();
  loom_ctx_free(ctx);
  return loom_test_finish("test_ops_ref_b");
}
