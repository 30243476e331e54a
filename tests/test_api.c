/*
 * API misuse: NULL handles, unknown ops, wrong arity, mismatched shapes and
 * dtypes, bad attributes. Every case must return a status with a message,
 * never crash.
 */
#include "common.h"

#include <stddef.h>
#include <string.h>

static void check_null_handles(loom_ctx *ctx) {
  CHECK(loom_ctx_new(NULL) == LOOM_STATUS_INVALID_ARGUMENT);
  loom_ctx_free(NULL);
  loom_graph_free(NULL);
  loom_tensor_free(NULL);
  loom_session_free(NULL);
  CHECK(strlen(loom_ctx_error(NULL)) > 0);
  CHECK(loom_graph_new(ctx, NULL) == LOOM_STATUS_INVALID_ARGUMENT);
  loom_graph *g = NULL;
  CHECK(loom_graph_new(NULL, &g) != LOOM_STATUS_OK);
  CHECK(g == NULL);
  loom_value v;
  CHECK(loom_graph_input(NULL, "x", LOOM_DTYPE_F32, 0, NULL, &v) ==
        LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_graph_op(NULL, LOOM_OP_NEG, 1, &v, 0, NULL, &v) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_graph_output(NULL, "y", 0) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_graph_verify(NULL) != LOOM_STATUS_OK);
  CHECK(loom_graph_num_inputs(NULL) == 0);
  CHECK(loom_graph_input_name(NULL, 0) == NULL);
  char *text = NULL;
  CHECK(loom_graph_print(NULL, &text) != LOOM_STATUS_OK);
  CHECK(loom_graph_parse(ctx, NULL, &g) != LOOM_STATUS_OK);
  CHECK(loom_session_new(ctx, NULL, NULL, NULL) != LOOM_STATUS_OK);
  CHECK(loom_session_run(NULL, 0, NULL, 0, NULL) != LOOM_STATUS_OK);
  loom_tensor *t = NULL;
  CHECK(loom_tensor_new(ctx, LOOM_DTYPE_F32, 1, NULL, &t) != LOOM_STATUS_OK);
  CHECK(loom_tensor_new(ctx, (loom_dtype)99, 0, NULL, &t) != LOOM_STATUS_OK);
  CHECK(loom_tensor_new(ctx, LOOM_DTYPE_F32, -1, NULL, &t) != LOOM_STATUS_OK);
  CHECK(loom_tensor_new(ctx, LOOM_DTYPE_F32, 1, (int64_t[]){-3}, &t) != LOOM_STATUS_OK);
  CHECK(loom_tensor_load_npy(ctx, NULL, &t) != LOOM_STATUS_OK);
  CHECK(loom_ctx_set_threads(ctx, -1) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_ctx_set_threads(NULL, 1) == LOOM_STATUS_INVALID_ARGUMENT);
}

static void check_graph_misuse(loom_ctx *ctx) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return;
  loom_value x, w, y, bad;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){4, 8}, &x));
  CHECK_OK(ctx, loom_graph_param(g, "w", LOOM_DTYPE_F32, 2, (int64_t[]){7, 16}, &w));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_input(g, "x", LOOM_DTYPE_F32, 0, NULL, &bad)); /* duplicate name */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_input(g, "", LOOM_DTYPE_F32, 0, NULL, &bad));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_input(g, "z", (loom_dtype)-1, 0, NULL, &bad));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_input(g, "z", LOOM_DTYPE_F32, LOOM_MAX_RANK + 1,
                                (int64_t[LOOM_MAX_RANK + 1]){0}, &bad));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_input(g, "z", LOOM_DTYPE_F32, 1, (int64_t[]){-2}, &bad));

  /* unknown op, wrong arity, values from nowhere */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, (loom_op)LOOM_OP_COUNT, 1, &x, 0, NULL, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, (loom_op)-5, 1, &x, 0, NULL, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_ADD, 1, &x, 0, NULL, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_NEG, 1, (loom_value[]){1234}, 0, NULL, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_NEG, 1, NULL, 0, NULL, &y));

  /* mismatched shapes and dtypes */
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){x, w}, 0, NULL, &y));
  CHECK(strstr(loom_ctx_error(ctx), "matmul") != NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_ADD, 2, (loom_value[]){x, w}, 0, NULL, &y));
  loom_value xi;
  CHECK_OK(ctx, loom_graph_input(g, "xi", LOOM_DTYPE_I32, 2, (int64_t[]){4, 8}, &xi));
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_ADD, 2, (loom_value[]){x, xi}, 0, NULL, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_DTYPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_EXP, 1, &xi, 0, NULL, &y));

  /* attributes: unknown name, wrong kind, missing required, out of range */
  loom_attr unknown = {.name = "nope", .kind = LOOM_ATTR_INT, .i = 1};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_NEG, 1, &x, 1, &unknown, &y));
  loom_attr wrong_kind = {.name = "axes", .kind = LOOM_ATTR_FLOAT, .f = 1};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_REDUCE_SUM, 1, &x, 1, &wrong_kind, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_TRANSPOSE, 1, &x, 0, NULL, &y));
  loom_attr axes = {.name = "axes", .kind = LOOM_ATTR_INTS, .n_ints = 1, .ints = (int64_t[]){5}};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_REDUCE_SUM, 1, &x, 1, &axes, &y));
  loom_attr too_many = {.name = "axes", .kind = LOOM_ATTR_INTS, .n_ints = LOOM_MAX_RANK + 1,
                        .ints = (int64_t[LOOM_MAX_RANK + 1]){0}};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_REDUCE_SUM, 1, &x, 1, &too_many, &y));
  loom_attr shape = {.name = "shape", .kind = LOOM_ATTR_INTS, .n_ints = 2,
                     .ints = (int64_t[]){5, 7}};
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               loom_graph_op(g, LOOM_OP_RESHAPE, 1, &x, 1, &shape, &y));
  loom_attr p = {.name = "p", .kind = LOOM_ATTR_FLOAT, .f = 1.5};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_DROPOUT, 1, &x, 1, &p, &y));

  /* multi-output op through the single-output call */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_ADAMW, 5, (loom_value[]){x, x, x, x, x}, 0, NULL, &y));

  /* outputs: bad value, duplicate name */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_graph_output(g, "y", 999));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_RELU, 1, &x, 0, NULL, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_graph_output(g, "y", y));

  /* the failed calls above left the graph valid and unchanged */
  CHECK_OK(ctx, loom_graph_verify(g));
  CHECK(loom_graph_num_inputs(g) == 3);
  CHECK(loom_graph_num_outputs(g) == 1);
  CHECK(loom_graph_input_is_param(g, 1));
  CHECK(!loom_graph_input_is_param(g, 0));
  loom_dtype dt;
  int32_t rank;
  int64_t dims[LOOM_MAX_RANK];
  CHECK_OK(ctx, loom_graph_value_type(g, y, &dt, &rank, dims));
  CHECK(dt == LOOM_DTYPE_F32 && rank == 2 && dims[0] == 4 && dims[1] == 8);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_graph_value_type(g, -7, &dt, &rank, dims));
  loom_graph_free(g);
}

static void check_names(void) {
  loom_op op;
  CHECK(loom_op_from_name("layer_norm", &op) == LOOM_STATUS_OK && op == LOOM_OP_LAYER_NORM);
  CHECK(loom_op_from_name("no_such_op", &op) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_op_name((loom_op)LOOM_OP_COUNT) == NULL);
  CHECK(loom_op_is_composite(LOOM_OP_SOFTMAX));
  CHECK(!loom_op_is_composite(LOOM_OP_ADD));
  loom_dtype dt;
  CHECK(loom_dtype_from_name("bf16", &dt) == LOOM_STATUS_OK && dt == LOOM_DTYPE_BF16);
  CHECK(loom_dtype_from_name("f31", &dt) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_dtype_size(LOOM_DTYPE_F16) == 2);
  CHECK(loom_dtype_size((loom_dtype)77) == 0);
  CHECK(strcmp(loom_status_name(LOOM_STATUS_SHAPE_MISMATCH), "shape mismatch") == 0);
  CHECK(strcmp(loom_status_name((loom_status)1000), "unknown status") == 0);
  CHECK(strcmp(loom_version(), LOOM_VERSION_STRING) == 0);
  /* every op has a unique name that maps back to it */
  for (int i = 0; i < LOOM_OP_COUNT; i++) {
    const char *name = loom_op_name((loom_op)i);
    CHECK(name != NULL);
    CHECK(name && loom_op_from_name(name, &op) == LOOM_STATUS_OK && op == (loom_op)i);
  }
}

/* The session modes: one table each (loom.h), names both ways. */
static void check_mode_names(void) {
  CHECK(strcmp(LOOM_FUSION_MODE_NAMES, "stitch, loop, none, eager") == 0);
  CHECK(strcmp(LOOM_ATTENTION_MODE_NAMES, "flash, decomposed, auto") == 0);
  CHECK(strcmp(LOOM_RNG_PLACEMENT_NAMES, "auto, fused, overlap, sequential") == 0);
  /* the default is value 0, the first name */
  CHECK(strcmp(loom_fusion_mode_name((loom_fusion_mode)0), "stitch") == 0);
  CHECK(strcmp(loom_attention_mode_name((loom_attention_mode)0), "flash") == 0);
  CHECK(strcmp(loom_rng_placement_name((loom_rng_placement)0), "auto") == 0);
  int n = 0;
  for (int i = 0; i < LOOM_FUSION_COUNT; i++) {
    loom_fusion_mode m = LOOM_FUSION_COUNT;
    const char *name = loom_fusion_mode_name((loom_fusion_mode)i);
    n += name && loom_fusion_mode_from_name(name, &m) == LOOM_STATUS_OK &&
         m == (loom_fusion_mode)i && strstr(LOOM_FUSION_MODE_NAMES, name);
  }
  for (int i = 0; i < LOOM_ATTENTION_COUNT; i++) {
    loom_attention_mode m = LOOM_ATTENTION_COUNT;
    const char *name = loom_attention_mode_name((loom_attention_mode)i);
    n += name && loom_attention_mode_from_name(name, &m) == LOOM_STATUS_OK &&
         m == (loom_attention_mode)i && strstr(LOOM_ATTENTION_MODE_NAMES, name);
  }
  for (int i = 0; i < LOOM_RNG_COUNT; i++) {
    loom_rng_placement p = LOOM_RNG_COUNT;
    const char *name = loom_rng_placement_name((loom_rng_placement)i);
    n += name && loom_rng_placement_from_name(name, &p) == LOOM_STATUS_OK &&
         p == (loom_rng_placement)i && strstr(LOOM_RNG_PLACEMENT_NAMES, name);
  }
  CHECK(n == 4 + 3 + 4);
  loom_fusion_mode m = LOOM_FUSION_LOOP;
  CHECK(loom_fusion_mode_from_name("fast", &m) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_fusion_mode_from_name("Stitch", &m) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_fusion_mode_from_name(NULL, &m) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(loom_fusion_mode_from_name("loop", NULL) == LOOM_STATUS_INVALID_ARGUMENT);
  CHECK(m == LOOM_FUSION_LOOP); /* a failed parse writes nothing */
  CHECK(loom_fusion_mode_name(LOOM_FUSION_COUNT) == NULL);
  CHECK(loom_fusion_mode_name((loom_fusion_mode)-1) == NULL);
  CHECK(loom_rng_placement_name(LOOM_RNG_COUNT) == NULL);
}

/* y = relu(x @ w): the example at the top of loom.h, checked. */
static void check_header_example(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_session *s = NULL;
  loom_value x, w, h, y;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){4, 8}, &x));
  CHECK_OK(ctx, loom_graph_param(g, "w", LOOM_DTYPE_F32, 2, (int64_t[]){8, 16}, &w));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){x, w}, 0, NULL, &h));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_RELU, 1, &h, 0, NULL, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  loom_session_options o = LOOM_SESSION_OPTIONS(.fusion = LOOM_FUSION_STITCH);
  CHECK_OK(ctx, loom_session_new(ctx, g, &o, &s));
  loom_tensor *xt = NULL, *wt = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){4, 8}, &xt));
  CHECK_OK(ctx, loom_tensor_new(ctx, LOOM_DTYPE_F32, 2, (int64_t[]){8, 16}, &wt));
  if (s && xt && wt) {
    float *xv = loom_tensor_data(xt), *wv = loom_tensor_data(wt);
    for (int i = 0; i < 32; i++)
      xv[i] = (float)(i % 5) - 2.0f; /* -2..2 */
    for (int i = 0; i < 128; i++)
      wv[i] = (float)(i % 3) - 1.0f; /* -1..1 */
    loom_tensor *in[2] = {xt, wt}, *out[1] = {NULL};
    CHECK_OK(ctx, loom_session_run(s, 2, (const loom_tensor *const *)in, 1, out));
    if (out[0]) {
      const float *yv = loom_tensor_data(out[0]);
      int bad = 0;
      for (int r = 0; r < 4; r++)
        for (int c = 0; c < 16; c++) {
          float acc = 0;
          for (int k = 0; k < 8; k++)
            acc += xv[r * 8 + k] * wv[k * 16 + c];
          bad += yv[r * 16 + c] != (acc > 0 ? acc : 0); /* small integers: exact */
        }
      CHECK(bad == 0);
    }
    loom_tensor_free(out[0]);
  }
  /* the printed graph is the caller's, released with loom_free */
  char *text = NULL;
  CHECK_OK(ctx, loom_graph_print(g, &text));
  CHECK(text && strstr(text, "matmul(%x, %w)") && strstr(text, "output y ="));
  loom_free(text);
  loom_free(NULL);
  loom_tensor_free(xt);
  loom_tensor_free(wt);
  loom_session_free(s);
  loom_graph_free(g);
}

/* Options carry their size: a struct from an older loom.h (smaller) is
 * read only as far as it goes; an unset or unknown size is refused. */
static void check_options(loom_ctx *ctx) {
  loom_graph *g = NULL;
  loom_value x, y;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 1, (int64_t[]){5}, &x));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_EXP, 1, &x, 0, NULL, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  loom_session *s = NULL;

  loom_session_options zero = {0}; /* made without the macro or the init */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_new(ctx, g, &zero, &s));
  CHECK(strstr(loom_ctx_error(ctx), "struct_size is 0") &&
        strstr(loom_ctx_error(ctx), "LOOM_SESSION_OPTIONS"));
  CHECK(s == NULL);
  loom_session_options newer = LOOM_SESSION_OPTIONS();
  newer.struct_size = sizeof newer + 8; /* a caller built against a newer loom.h */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_new(ctx, g, &newer, &s));
  CHECK(s == NULL);

  /* the init function and the macro agree: size set, every default */
  loom_session_options a, b = LOOM_SESSION_OPTIONS();
  memset(&a, 0x5a, sizeof a);
  loom_session_options_init(&a);
  CHECK(a.struct_size == sizeof a && b.struct_size == sizeof b);
  CHECK(a.backend == NULL && a.fusion == LOOM_FUSION_STITCH &&
        a.attention == LOOM_ATTENTION_FLASH && a.rng == LOOM_RNG_AUTO);
  CHECK(b.backend == NULL && b.fusion == a.fusion && b.attention == a.attention && b.rng == a.rng);

  /* an older caller knew only struct_size and backend: a fusion field
   * past its size is not read (garbage there would be refused) */
  loom_session_options old = LOOM_SESSION_OPTIONS(.backend = "ref", .fusion = (loom_fusion_mode)99);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_session_new(ctx, g, &old, &s));
  CHECK(strstr(loom_ctx_error(ctx), "fusion mode 99") != NULL);
  old.struct_size = offsetof(loom_session_options, fusion);
  CHECK_OK(ctx, loom_session_new(ctx, g, &old, &s));
  loom_session_stats st;
  if (s) {
    CHECK_OK(ctx, loom_session_get_stats(s, &st));
    CHECK(st.n_kernels == 0 && st.n_eager == 1); /* backend "ref" was read */
    /* stats grow the same way: a newer caller's tail is zeroed, an older
     * caller's struct is filled only as far as it goes */
    unsigned char newer_stats[sizeof(loom_session_stats) + 16];
    memset(newer_stats, 0x5a, sizeof newer_stats);
    CHECK_OK(ctx, loom_session_get_stats_sized(s, (loom_session_stats *)(void *)newer_stats,
                                               sizeof newer_stats));
    int tail = 0;
    for (size_t i = sizeof(loom_session_stats); i < sizeof newer_stats; i++)
      tail += newer_stats[i];
    CHECK(tail == 0 && memcmp(newer_stats, &st, sizeof st) == 0);
    unsigned char older_stats[sizeof(int32_t) + 4];
    memset(older_stats, 0x5a, sizeof older_stats);
    CHECK_OK(ctx, loom_session_get_stats_sized(s, (loom_session_stats *)(void *)older_stats,
                                               sizeof(int32_t)));
    int32_t n_prim;
    memcpy(&n_prim, older_stats, sizeof n_prim);
    CHECK(n_prim == st.n_primitive_ops && older_stats[sizeof(int32_t)] == 0x5a);
    CHECK(loom_session_get_stats_sized(s, &st, 0) == LOOM_STATUS_INVALID_ARGUMENT);
  }
  loom_session_free(s);
  s = NULL;
  /* NULL: every default (cpu, stitch) */
  CHECK_OK(ctx, loom_session_new(ctx, g, NULL, &s));
  if (s) {
    CHECK_OK(ctx, loom_session_get_stats(s, &st));
    CHECK(st.n_kernels == 1 || strstr(loom_session_warning(s), "eager"));
  }
  loom_session_free(s);
  loom_graph_free(g);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  check_null_handles(ctx);
  check_graph_misuse(ctx);
  check_names();
  check_mode_names();
  check_header_example(ctx);
  check_options(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_api");
}
