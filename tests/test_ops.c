/*
 * The generic differential op harness: every primitive op, over shapes with
 * broadcasting, size-1, empty and odd dims, on the cpu backend in every
 * fusion mode (eager, and generated code: none, loop, stitch), against the
 * reference executor. A node the cpu backend has no kernel for (f64 and
 * bf16 element-wise, f64 matmul, ...) falls back to its reference kernel:
 * such a case checks the fallback path, not the cpu backend, so each case
 * is classified per mode before it runs and reported as cpu coverage or as
 * a fallback, never both ("N cases on cpu kernels, M fallbacks to ref").
 * (The reference kernels themselves are checked by known answers in
 * test_ops_ref_*.c; gradients by finite differences in test_grad.c.)
 */
#include "common.h"

#include "fusion/group.h"
#include "ops/op.h"
#include "runtime/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_IN 8

typedef struct operand {
  loom_dtype dt;
  int32_t rank;
  int64_t shape[LOOM_MAX_RANK];
  double lo, hi; /* value range; for index operands: [0, hi) */
} operand;

typedef struct op_case {
  loom_op op;
  int32_t n_in;
  operand in[MAX_IN];
  int32_t n_attrs;
  loom_attr attrs[8];
  int64_t ints[8][LOOM_MAX_RANK]; /* storage for INTS attributes */
  double rtol;
  int32_t n_out, out_index; /* multi-output ops: which output is compared */
  char label[96];
  /* Runs on the reference kernels in cpu mode eager / in the fused modes
   * (classify_cases): a fallback, not cpu coverage. */
  bool ref_eager, ref_fused;
  /* Not run on the GPU backends: an element-wise op on a shape whose
   * indexing other cases check there (see gpu_subset). */
  bool host_only;
} op_case;

static op_case *cases;
static int32_t n_cases, cap_cases;
static bool covered[LOOM_OP_COUNT];

static operand opnd(loom_dtype dt, int32_t rank, const int64_t *shape, double lo,
                    double hi) {
  operand o = {.dt = dt, .rank = rank, .lo = lo, .hi = hi};
  for (int32_t d = 0; d < rank; d++) o.shape[d] = shape[d];
  return o;
}

static op_case *add_case(loom_op op, int32_t n_in, const operand *in) {
  if (n_cases == cap_cases) {
    cap_cases = cap_cases ? 2 * cap_cases : 256;
    cases = realloc(cases, sizeof *cases * (size_t)cap_cases);
    if (!cases) exit(2);
  }
  op_case *c = &cases[n_cases++];
  memset(c, 0, sizeof *c);
  c->op = op;
  c->n_in = n_in;
  for (int32_t i = 0; i < n_in; i++) c->in[i] = in[i];
  c->rtol = 1e-5;
  covered[op] = true;
  return c;
}

static void attr_i(op_case *c, const char *name, int64_t v) {
  c->attrs[c->n_attrs++] = (loom_attr){.name = name, .kind = LOOM_ATTR_INT, .i = v};
}

static void attr_f(op_case *c, const char *name, double v) {
  c->attrs[c->n_attrs++] = (loom_attr){.name = name, .kind = LOOM_ATTR_FLOAT, .f = v};
}

static void attr_ints(op_case *c, const char *name, int32_t n, const int64_t *v) {
  int32_t k = c->n_attrs;
  memcpy(c->ints[k], v, sizeof(int64_t) * (size_t)n);
  c->attrs[c->n_attrs++] =
      (loom_attr){.name = name, .kind = LOOM_ATTR_INTS, .n_ints = n, .ints = c->ints[k]};
}

/*
 * The GPU subset. Every case runs on cpu in every mode; the GPU backends
 * (each an LLVM or NVRTC compile of every kernel, slow on PoCL) skip the
 * element-wise op x shape cross product, whose two factors their code
 * keeps apart: an op's expression does not depend on the shape (every op
 * and cast is also checked at its edge values on the GPU backends by
 * test_codegen_ops), nor the indexing, broadcasting and launch of a shape
 * on the op. So there every op runs on one shape (and its other dtypes),
 * and every shape on two ops (a plain one and one whose math has its own
 * vector form, or a comparison: a bool result); reduce_max and _min keep
 * the axes but not keepdims' second output shape (reduce_sum has both).
 */
#define GPU_ALL_SHAPES_UNARY(op) ((op) == LOOM_OP_NEG || (op) == LOOM_OP_EXP)
#define GPU_ALL_SHAPES_BINARY(op) ((op) == LOOM_OP_ADD || (op) == LOOM_OP_LT)

/* Shapes every element-wise op is tried on: scalar, size-1, empty, odd. */
static const struct {
  int32_t rank;
  int64_t shape[4];
} unary_shapes[] = {
    {0, {0}}, {1, {1}}, {1, {0}}, {1, {7}}, {2, {3, 5}}, {3, {2, 1, 4}}, {2, {0, 3}}, {2, {33, 65}},
};

/* Operand shape pairs exercising NumPy broadcasting. */
static const struct {
  int32_t ra;
  int64_t a[4];
  int32_t rb;
  int64_t b[4];
} binary_shapes[] = {
    {2, {3, 5}, 2, {3, 5}}, {2, {3, 5}, 1, {5}},       {2, {3, 1}, 2, {1, 5}},
    {0, {0}, 1, {4}},       {2, {0, 3}, 1, {3}},       {3, {2, 1, 3}, 2, {4, 1}},
    {1, {1}, 1, {1}},       {3, {2, 17, 9}, 3, {2, 17, 9}}, {1, {9}, 0, {0}},
};

static void build_elementwise_cases(void) {
  static const struct {
    loom_op op;
    double lo, hi;
  } unary[] = {
      {LOOM_OP_NEG, -2, 2},        {LOOM_OP_ABS, -2, 2},     {LOOM_OP_SIGN, -2, 2},
      {LOOM_OP_EXP, -3, 3},        {LOOM_OP_LOG, 0.1, 4},    {LOOM_OP_SQRT, 0.0, 4},
      {LOOM_OP_RSQRT, 0.1, 4},     {LOOM_OP_RECIPROCAL, 0.2, 3}, {LOOM_OP_TANH, -3, 3},
      {LOOM_OP_SIGMOID, -6, 6},    {LOOM_OP_RELU, -2, 2},    {LOOM_OP_ERF, -3, 3},
      {LOOM_OP_SIN, -4, 4},        {LOOM_OP_COS, -4, 4},
  };
  for (int32_t u = 0; u < LOOM_ARRAY_LEN(unary); u++)
    for (int32_t s = 0; s < LOOM_ARRAY_LEN(unary_shapes); s++) {
      operand x = opnd(LOOM_DTYPE_F32, unary_shapes[s].rank, unary_shapes[s].shape,
                       unary[u].lo, unary[u].hi);
      add_case(unary[u].op, 1, &x)->host_only = s != 4 && !GPU_ALL_SHAPES_UNARY(unary[u].op);
      if (s == 4) { /* other dtypes on one shape: the fallback path */
        x.dt = LOOM_DTYPE_F64;
        add_case(unary[u].op, 1, &x);
        x.dt = LOOM_DTYPE_BF16;
        add_case(unary[u].op, 1, &x);
      }
    }
  operand xi = opnd(LOOM_DTYPE_I32, 2, (int64_t[]){3, 5}, -5, 5);
  add_case(LOOM_OP_NEG, 1, &xi);
  add_case(LOOM_OP_ABS, 1, &xi);

  static const struct {
    loom_op op;
    double alo, ahi, blo, bhi;
  } binary[] = {
      {LOOM_OP_ADD, -2, 2, -2, 2},     {LOOM_OP_SUB, -2, 2, -2, 2},
      {LOOM_OP_MUL, -2, 2, -2, 2},     {LOOM_OP_DIV, -2, 2, 0.5, 2},
      {LOOM_OP_POW, 0.1, 3, -2, 2},    {LOOM_OP_MAXIMUM, -2, 2, -2, 2},
      {LOOM_OP_MINIMUM, -2, 2, -2, 2}, {LOOM_OP_EQ, -2, 2, -2, 2},
      {LOOM_OP_NE, -2, 2, -2, 2},      {LOOM_OP_LT, -2, 2, -2, 2},
      {LOOM_OP_LE, -2, 2, -2, 2},      {LOOM_OP_GT, -2, 2, -2, 2},
      {LOOM_OP_GE, -2, 2, -2, 2},
  };
  for (int32_t b = 0; b < LOOM_ARRAY_LEN(binary); b++)
    for (int32_t s = 0; s < LOOM_ARRAY_LEN(binary_shapes); s++) {
      operand in[2] = {
          opnd(LOOM_DTYPE_F32, binary_shapes[s].ra, binary_shapes[s].a, binary[b].alo,
               binary[b].ahi),
          opnd(LOOM_DTYPE_F32, binary_shapes[s].rb, binary_shapes[s].b, binary[b].blo,
               binary[b].bhi)};
      add_case(binary[b].op, 2, in)->host_only = s != 2 && !GPU_ALL_SHAPES_BINARY(binary[b].op);
      if (s == 2) {
        in[0].dt = in[1].dt = LOOM_DTYPE_F64;
        add_case(binary[b].op, 2, in);
        in[0].dt = in[1].dt = LOOM_DTYPE_I32; /* integer values: compare exactly */
        if (binary[b].op != LOOM_OP_POW) add_case(binary[b].op, 2, in);
      }
    }

  for (int32_t s = 0; s < LOOM_ARRAY_LEN(binary_shapes); s++) {
    operand in[3] = {
        opnd(LOOM_DTYPE_BOOL, binary_shapes[s].ra, binary_shapes[s].a, 0, 1),
        opnd(LOOM_DTYPE_F32, binary_shapes[s].rb, binary_shapes[s].b, -2, 2),
        opnd(LOOM_DTYPE_F32, binary_shapes[s].ra, binary_shapes[s].a, -2, 2)};
    add_case(LOOM_OP_SELECT, 3, in);
  }

  static const struct {
    loom_dtype from, to;
  } casts[] = {
      {LOOM_DTYPE_F32, LOOM_DTYPE_I32},  {LOOM_DTYPE_F32, LOOM_DTYPE_BOOL},
      {LOOM_DTYPE_I32, LOOM_DTYPE_F32},  {LOOM_DTYPE_F32, LOOM_DTYPE_F16},
      {LOOM_DTYPE_F32, LOOM_DTYPE_BF16}, {LOOM_DTYPE_F64, LOOM_DTYPE_F32},
      {LOOM_DTYPE_I64, LOOM_DTYPE_F32},  {LOOM_DTYPE_BOOL, LOOM_DTYPE_F32},
      {LOOM_DTYPE_F32, LOOM_DTYPE_F32},  {LOOM_DTYPE_U8, LOOM_DTYPE_I64},
  };
  for (int32_t k = 0; k < LOOM_ARRAY_LEN(casts); k++) {
    bool is_bool = casts[k].from == LOOM_DTYPE_BOOL;
    operand x = opnd(casts[k].from, 2, (int64_t[]){4, 9}, is_bool ? 0 : -40, is_bool ? 1 : 40);
    if (casts[k].from == LOOM_DTYPE_U8) x.lo = 0;
    op_case *c = add_case(LOOM_OP_CAST, 1, &x);
    attr_i(c, "dtype", casts[k].to);
  }
}

static void build_reduce_cases(void) {
  static const loom_op ops[] = {LOOM_OP_REDUCE_SUM, LOOM_OP_REDUCE_MAX, LOOM_OP_REDUCE_MIN};
  static const struct {
    int32_t rank;
    int64_t shape[4];
    int32_t n_axes;
    int64_t axes[4];
  } red[] = {
      {2, {3, 5}, 1, {1}},       {2, {3, 5}, 1, {0}},       {2, {3, 5}, 0, {0}},
      {3, {2, 3, 4}, 2, {0, 2}}, {3, {2, 3, 4}, 1, {-1}},   {1, {1}, 1, {0}},
      {2, {0, 4}, 1, {1}},       {2, {130, 257}, 1, {1}},   {2, {130, 257}, 1, {0}},
      {4, {2, 3, 1, 5}, 2, {1, 3}}, {0, {0}, 0, {0}},
      /* one short axis that is not the last (the fusing modes unroll it:
       * passes/short_reduce.h), and one just too long for that */
      {4, {2, 3, 4, 5}, 1, {1}}, {3, {8, 64, 33}, 1, {0}}, {3, {4, 6, 7}, 1, {-2}},
      {3, {3, 9, 40}, 1, {1}},
  };
  for (int32_t o = 0; o < LOOM_ARRAY_LEN(ops); o++)
    for (int32_t r = 0; r < LOOM_ARRAY_LEN(red); r++)
      for (int keep = 0; keep < 2; keep++) {
        operand x = opnd(LOOM_DTYPE_F32, red[r].rank, red[r].shape, -2, 2);
        op_case *c = add_case(ops[o], 1, &x);
        attr_ints(c, "axes", red[r].n_axes, red[r].axes);
        attr_i(c, "keepdims", keep);
        c->rtol = 1e-5;
        c->host_only = keep && ops[o] != LOOM_OP_REDUCE_SUM;
      }
  /* an empty set reduced: sum = 0 (max/min of nothing gives -inf/+inf) */
  operand e = opnd(LOOM_DTYPE_F32, 2, (int64_t[]){3, 0}, -1, 1);
  op_case *c = add_case(LOOM_OP_REDUCE_SUM, 1, &e);
  attr_ints(c, "axes", 1, (int64_t[]){1});
}

static void build_layout_cases(void) {
  operand x = opnd(LOOM_DTYPE_F32, 3, (int64_t[]){2, 3, 4}, -2, 2);
  op_case *c = add_case(LOOM_OP_RESHAPE, 1, &x);
  attr_ints(c, "shape", 2, (int64_t[]){6, 4});
  c = add_case(LOOM_OP_RESHAPE, 1, &x);
  attr_ints(c, "shape", 3, (int64_t[]){4, -1, 2});
  operand z = opnd(LOOM_DTYPE_F32, 2, (int64_t[]){0, 4}, -2, 2);
  c = add_case(LOOM_OP_RESHAPE, 1, &z);
  attr_ints(c, "shape", 3, (int64_t[]){2, 0, 8});

  static const int64_t perms[][3] = {{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {0, 2, 1}, {2, 0, 1}};
  for (int32_t p = 0; p < LOOM_ARRAY_LEN(perms); p++) {
    c = add_case(LOOM_OP_TRANSPOSE, 1, &x);
    attr_ints(c, "perm", 3, perms[p]);
  }
  operand big = opnd(LOOM_DTYPE_F32, 2, (int64_t[]){67, 131}, -2, 2);
  c = add_case(LOOM_OP_TRANSPOSE, 1, &big);
  attr_ints(c, "perm", 2, (int64_t[]){1, 0});

  operand b1 = opnd(LOOM_DTYPE_F32, 2, (int64_t[]){3, 1}, -2, 2);
  c = add_case(LOOM_OP_BROADCAST_TO, 1, &b1);
  attr_ints(c, "shape", 3, (int64_t[]){2, 3, 4});
  operand b0 = opnd(LOOM_DTYPE_F32, 0, NULL, -2, 2);
  c = add_case(LOOM_OP_BROADCAST_TO, 1, &b0);
  attr_ints(c, "shape", 2, (int64_t[]){5, 0});

  c = add_case(LOOM_OP_SLICE, 1, &x);
  attr_ints(c, "starts", 3, (int64_t[]){0, 1, 1});
  attr_ints(c, "ends", 3, (int64_t[]){2, 3, -1});
  c = add_case(LOOM_OP_SLICE, 1, &x);
  attr_ints(c, "starts", 3, (int64_t[]){1, 2, 2});
  attr_ints(c, "ends", 3, (int64_t[]){1, 3, 4}); /* empty along dim 0 */

  operand cat[3] = {opnd(LOOM_DTYPE_F32, 2, (int64_t[]){2, 3}, -2, 2),
                    opnd(LOOM_DTYPE_F32, 2, (int64_t[]){2, 0}, -2, 2),
                    opnd(LOOM_DTYPE_F32, 2, (int64_t[]){2, 5}, -2, 2)};
  c = add_case(LOOM_OP_CONCAT, 3, cat);
  attr_i(c, "axis", 1);
  cat[1] = opnd(LOOM_DTYPE_F32, 2, (int64_t[]){1, 3}, -2, 2);
  cat[2] = opnd(LOOM_DTYPE_F32, 2, (int64_t[]){4, 3}, -2, 2);
  c = add_case(LOOM_OP_CONCAT, 3, cat);
  attr_i(c, "axis", -2);

  c = add_case(LOOM_OP_PAD, 1, &x);
  attr_ints(c, "lo", 3, (int64_t[]){1, 0, 2});
  attr_ints(c, "hi", 3, (int64_t[]){0, 2, 1});
  attr_f(c, "value", -1.5);
}

static void build_index_cases(void) {
  operand g[2] = {opnd(LOOM_DTYPE_F32, 2, (int64_t[]){5, 3}, -2, 2),
                  opnd(LOOM_DTYPE_I64, 1, (int64_t[]){7}, 0, 5)};
  add_case(LOOM_OP_GATHER, 2, g);
  g[1] = opnd(LOOM_DTYPE_I32, 2, (int64_t[]){2, 2}, 0, 3);
  op_case *c = add_case(LOOM_OP_GATHER, 2, g);
  attr_i(c, "axis", 1);
  g[0] = opnd(LOOM_DTYPE_F32, 2, (int64_t[]){256, 32}, -2, 2);
  g[1] = opnd(LOOM_DTYPE_I64, 2, (int64_t[]){4, 9}, 0, 256);
  add_case(LOOM_OP_GATHER, 2, g);
  /* a table piece: rows [3, 8) of 12; indices over the whole table, those
   * outside the piece read zeros */
  g[0] = opnd(LOOM_DTYPE_F32, 2, (int64_t[]){5, 3}, -2, 2);
  g[1] = opnd(LOOM_DTYPE_I64, 1, (int64_t[]){9}, 0, 12);
  c = add_case(LOOM_OP_GATHER, 2, g);
  attr_i(c, "base", 3);
  attr_i(c, "range", 12);

  operand s[2] = {opnd(LOOM_DTYPE_I64, 1, (int64_t[]){7}, 0, 5),
                  opnd(LOOM_DTYPE_F32, 2, (int64_t[]){7, 3}, -2, 2)};
  c = add_case(LOOM_OP_SCATTER_ADD, 2, s);
  attr_ints(c, "shape", 2, (int64_t[]){5, 3});
  s[0] = opnd(LOOM_DTYPE_I32, 2, (int64_t[]){2, 3}, 0, 4);
  s[1] = opnd(LOOM_DTYPE_F32, 3, (int64_t[]){6, 2, 3}, -2, 2);
  c = add_case(LOOM_OP_SCATTER_ADD, 2, s);
  attr_ints(c, "shape", 2, (int64_t[]){6, 4});
  attr_i(c, "axis", 1);
  /* rows [2, 6) of 10 along axis 1: updates elsewhere are dropped */
  s[0] = opnd(LOOM_DTYPE_I64, 1, (int64_t[]){8}, 0, 10);
  s[1] = opnd(LOOM_DTYPE_F32, 2, (int64_t[]){3, 8}, -2, 2);
  c = add_case(LOOM_OP_SCATTER_ADD, 2, s);
  attr_ints(c, "shape", 2, (int64_t[]){3, 4});
  attr_i(c, "axis", 1);
  attr_i(c, "base", 2);
  attr_i(c, "range", 10);

  c = add_case(LOOM_OP_IOTA, 0, NULL);
  attr_ints(c, "shape", 2, (int64_t[]){3, 4});
  attr_i(c, "axis", 1);
  attr_i(c, "dtype", LOOM_DTYPE_F32);
  c = add_case(LOOM_OP_IOTA, 0, NULL);
  attr_ints(c, "shape", 1, (int64_t[]){5});
  c = add_case(LOOM_OP_CONSTANT, 0, NULL);
  attr_ints(c, "shape", 2, (int64_t[]){2, 3});
  attr_f(c, "value", 0.25);
  c = add_case(LOOM_OP_CONSTANT, 0, NULL);
  attr_f(c, "value", -3);
}

static void build_matmul_cases(void) {
  static const struct {
    int32_t ra;
    int64_t a[4];
    int32_t rb;
    int64_t b[4];
    bool ta, tb;
  } mm[] = {
      {2, {3, 4}, 2, {4, 5}, false, false},
      {2, {4, 3}, 2, {4, 5}, true, false},
      {2, {3, 4}, 2, {5, 4}, false, true},
      {2, {4, 3}, 2, {5, 4}, true, true},
      {3, {2, 3, 4}, 2, {4, 5}, false, false},
      {4, {2, 1, 3, 4}, 3, {5, 4, 6}, false, false},
      {3, {2, 7, 9}, 3, {2, 7, 9}, false, true},
      {2, {0, 4}, 2, {4, 3}, false, false},
      {2, {3, 0}, 2, {0, 4}, false, false},
      {2, {1, 1}, 2, {1, 1}, false, false},
      {2, {65, 130}, 2, {130, 33}, false, false},
      /* above the GEMM's 1e6-flop threshold, several tiles: the threaded
       * path, under the 1/2/3-thread determinism check */
      {2, {130, 200}, 2, {200, 70}, false, false},
      {2, {200, 130}, 2, {70, 200}, true, true},
      {3, {4, 64, 96}, 3, {4, 96, 80}, false, false},
  };
  for (int32_t k = 0; k < LOOM_ARRAY_LEN(mm); k++) {
    operand in[2] = {opnd(LOOM_DTYPE_F32, mm[k].ra, mm[k].a, -1, 1),
                     opnd(LOOM_DTYPE_F32, mm[k].rb, mm[k].b, -1, 1)};
    op_case *c = add_case(LOOM_OP_MATMUL, 2, in);
    attr_i(c, "trans_a", mm[k].ta);
    attr_i(c, "trans_b", mm[k].tb);
    c->rtol = 1e-4;
    if (k == 1) {
      in[0].dt = in[1].dt = LOOM_DTYPE_F64;
      c = add_case(LOOM_OP_MATMUL, 2, in);
      attr_i(c, "trans_a", 1);
    }
  }
}

/* One window op's case: x (and a second operand) of the given shapes, the
 * per-dim attributes of k spatial dims (NULL: the default). */
typedef struct window_case {
  loom_op op;
  int32_t rank;
  int64_t x[5], y[5];
  const int64_t *kernel, *strides, *lo, *hi, *dil, *opad;
  int64_t groups, ceil, include;
} window_case;

static void add_window_case(const window_case *w) {
  int32_t k = w->rank - 2, n_in = w->op == LOOM_OP_MAX_POOL || w->op == LOOM_OP_AVG_POOL ? 1 : 2;
  operand in[2] = {opnd(LOOM_DTYPE_F32, w->rank, w->x, -1, 1), opnd(LOOM_DTYPE_F32, w->rank, w->y, -1, 1)};
  op_case *c = add_case(w->op, n_in, in);
  c->rtol = 1e-4;
  if (w->kernel) attr_ints(c, "kernel", k, w->kernel);
  if (w->strides) attr_ints(c, "strides", k, w->strides);
  if (w->lo) attr_ints(c, "pads_lo", k, w->lo);
  if (w->hi) attr_ints(c, "pads_hi", k, w->hi);
  if (w->dil) attr_ints(c, "dilations", k, w->dil);
  if (w->opad) attr_ints(c, "output_padding", k, w->opad);
  if (w->groups) attr_i(c, "groups", w->groups);
  if (w->ceil) attr_i(c, "ceil_mode", 1);
  if (w->include) attr_i(c, "count_include_pad", 1);
}

/* Convolutions and pools: 1-d to 3-d, strides, padding, dilation, groups,
 * ceil_mode, both avg divisors; some above the 1e6-flop threshold, so the
 * threaded paths meet the determinism check. */
static void build_window_cases(void) {
  static const int64_t one[] = {1, 1, 1}, two[] = {2, 2, 2}, k3[] = {3, 3, 3}, k2[] = {2, 2, 2};
  static const int64_t lo12[] = {1, 2}, hi21[] = {2, 1}, dil21[] = {2, 1}, s12[] = {1, 2};
  static const int64_t three[] = {3, 3, 3}, k7[] = {7, 7, 7};
  const window_case ws[] = {
      {LOOM_OP_CONV, 3, {2, 3, 11}, {4, 3, 3}, .groups = 1},
      {LOOM_OP_CONV, 3, {2, 4, 13}, {6, 2, 3}, .strides = two, .lo = one, .hi = two, .groups = 2},
      {LOOM_OP_CONV, 4, {2, 3, 9, 8}, {5, 3, 3, 3}, .lo = one, .hi = one},
      {LOOM_OP_CONV, 4, {1, 4, 10, 9}, {4, 1, 3, 2}, .strides = s12, .lo = lo12, .hi = hi21, .dil = dil21, .groups = 4},
      {LOOM_OP_CONV, 4, {2, 16, 20, 20}, {48, 16, 3, 3}, .lo = one, .hi = one},
      {LOOM_OP_CONV, 4, {3, 32, 14, 14}, {64, 8, 3, 3}, .strides = two, .lo = one, .hi = one, .groups = 4},
      {LOOM_OP_CONV, 5, {1, 2, 5, 6, 4}, {3, 2, 2, 3, 2}, .lo = one},
      /* many channels, one image: blocks of output channels in parallel */
      {LOOM_OP_CONV, 4, {1, 8, 10, 10}, {256, 8, 3, 3}, .groups = 1},
      {LOOM_OP_CONV_TRANSPOSE, 4, {1, 16, 6, 6}, {16, 256, 3, 3}, .groups = 1},
      {LOOM_OP_CONV_GRAD_WEIGHT, 4, {2, 8, 10, 10}, {2, 256, 8, 8}, .kernel = k3},
      {LOOM_OP_CONV_TRANSPOSE, 3, {2, 4, 7}, {4, 3, 3}, .strides = two, .lo = one, .opad = one},
      {LOOM_OP_CONV_TRANSPOSE, 4, {2, 4, 5, 6}, {4, 3, 3, 2}, .strides = s12, .lo = lo12, .hi = hi21, .dil = dil21, .groups = 2},
      {LOOM_OP_CONV_TRANSPOSE, 4, {2, 32, 12, 12}, {32, 40, 3, 3}, .strides = two, .lo = one, .hi = one},
      {LOOM_OP_CONV_GRAD_WEIGHT, 3, {2, 3, 11}, {2, 4, 9}, .kernel = k3},
      {LOOM_OP_CONV_GRAD_WEIGHT, 4, {2, 4, 10, 9}, {2, 6, 9, 5}, .kernel = k3, .strides = s12, .lo = lo12, .hi = hi21, .dil = dil21, .groups = 2},
      {LOOM_OP_CONV_GRAD_WEIGHT, 4, {3, 16, 20, 20}, {3, 48, 20, 20}, .kernel = k3, .lo = one, .hi = one},
      /* blocked backward layouts: blocks of 56 and 44 channels (the last
       * not whole channel blocks), and a depthwise pair */
      {LOOM_OP_CONV_GRAD_WEIGHT, 4, {2, 12, 9, 9}, {2, 100, 9, 9}, .kernel = k3, .lo = one, .hi = one},
      {LOOM_OP_CONV_TRANSPOSE, 4, {2, 20, 7, 7}, {20, 100, 3, 3}, .lo = one, .hi = one},
      {LOOM_OP_CONV_GRAD_WEIGHT, 4, {2, 40, 8, 8}, {2, 40, 8, 8}, .kernel = k3, .lo = one, .hi = one, .groups = 40},
      {LOOM_OP_CONV_TRANSPOSE, 4, {2, 40, 8, 8}, {40, 1, 3, 3}, .lo = one, .hi = one, .groups = 40},
      /* depthwise weight gradients (Loom's own loop): strides, dilation,
       * uneven padding, 1-d, a 7 x 7 kernel */
      {LOOM_OP_CONV_GRAD_WEIGHT, 3, {2, 6, 13}, {2, 6, 6}, .kernel = k3, .strides = two, .lo = one, .groups = 6},
      {LOOM_OP_CONV_GRAD_WEIGHT, 4, {2, 5, 11, 10}, {2, 5, 10, 6}, .kernel = k3, .strides = s12, .lo = lo12, .hi = hi21, .dil = dil21, .groups = 5},
      {LOOM_OP_CONV_GRAD_WEIGHT, 4, {1, 8, 12, 12}, {1, 8, 12, 12}, .kernel = k7, .lo = three, .hi = three, .groups = 8},
      {LOOM_OP_MAX_POOL, 3, {2, 3, 11}, {0}, .kernel = k3, .strides = two},
      {LOOM_OP_MAX_POOL, 4, {2, 3, 9, 8}, {0}, .kernel = k3, .strides = two, .lo = one, .hi = one, .ceil = 1},
      {LOOM_OP_MAX_POOL, 4, {2, 3, 9, 8}, {0}, .kernel = k3, .dil = dil21, .lo = lo12, .hi = hi21},
      {LOOM_OP_MAX_POOL, 4, {4, 32, 24, 24}, {0}, .kernel = k3, .strides = two, .lo = one, .hi = one},
      {LOOM_OP_MAX_POOL, 5, {1, 2, 5, 6, 4}, {0}, .kernel = k2, .strides = two},
      {LOOM_OP_AVG_POOL, 4, {2, 3, 9, 8}, {0}, .kernel = k3, .strides = two, .lo = one, .hi = one},
      {LOOM_OP_AVG_POOL, 4, {2, 3, 9, 8}, {0}, .kernel = k3, .strides = two, .lo = one, .hi = one, .include = 1},
      {LOOM_OP_AVG_POOL, 4, {2, 3, 8, 8}, {0}, .kernel = k3, .strides = two, .lo = one, .hi = one, .ceil = 1, .include = 1},
      {LOOM_OP_AVG_POOL, 3, {2, 5, 12}, {0}, .kernel = k2, .strides = two, .ceil = 1},
      {LOOM_OP_AVG_POOL, 4, {4, 32, 24, 24}, {0}, .kernel = k2, .strides = two},
      {LOOM_OP_MAX_POOL_GRAD, 4, {2, 3, 9, 8}, {2, 3, 5, 4}, .kernel = k3, .strides = two, .lo = one, .hi = one},
      {LOOM_OP_MAX_POOL_GRAD, 3, {2, 5, 12}, {2, 5, 6}, .kernel = k3, .strides = two, .ceil = 1, .hi = one},
      {LOOM_OP_AVG_POOL_GRAD, 4, {2, 3, 9, 8}, {2, 3, 5, 4}, .kernel = k3, .strides = two, .lo = one, .hi = one, .include = 1},
      {LOOM_OP_AVG_POOL_GRAD, 4, {2, 3, 8, 8}, {2, 3, 5, 5}, .kernel = k3, .strides = two, .lo = one, .hi = one, .ceil = 1},
  };
  for (int32_t i = 0; i < LOOM_ARRAY_LEN(ws); i++) add_window_case(&ws[i]);
}

static void build_dropout_cases(void) {
  operand x = opnd(LOOM_DTYPE_F32, 2, (int64_t[]){37, 29}, -2, 2);
  op_case *c = add_case(LOOM_OP_DROPOUT, 1, &x);
  attr_f(c, "p", 0.1);
  attr_i(c, "seed", 1234);
  attr_i(c, "offset", 77);
  operand xb[2] = {x, opnd(LOOM_DTYPE_I64, 0, NULL, 0, 1000)};
  c = add_case(LOOM_OP_DROPOUT, 2, xb);
  attr_f(c, "p", 0.5);
  attr_i(c, "seed", 7);
  operand e = opnd(LOOM_DTYPE_F32, 1, (int64_t[]){0}, -2, 2);
  add_case(LOOM_OP_DROPOUT, 1, &e);
}

/* flash_attention, its gradient (every output; from arbitrary o, lse and
 * d_o: the op's formulas hold for any), and dropout_mask. */
static void build_attention_cases(void) {
  const int64_t q[4] = {2, 3, 17, 8}, k[4] = {2, 3, 21, 8}, v[4] = {2, 3, 21, 5};
  const int64_t o[4] = {2, 3, 17, 5}, lse[3] = {2, 3, 17}, bits[1] = {(2 * 3 * 17 * 21 + 7) / 8};
  operand in[8] = {opnd(LOOM_DTYPE_F32, 4, q, -1, 1), opnd(LOOM_DTYPE_F32, 4, k, -1, 1),
                   opnd(LOOM_DTYPE_F32, 4, v, -1, 1), opnd(LOOM_DTYPE_I64, 0, NULL, 0, 1000),
                   opnd(LOOM_DTYPE_U8, 1, bits, 0, 256)};
  for (int32_t variant = 0; variant < 3; variant++) { /* plain, causal+dropout, with a mask */
    for (int32_t out = 0; out < 2; out++) {
      op_case *c = add_case(LOOM_OP_FLASH_ATTENTION, variant == 2 ? 5 : 4, in);
      c->n_out = 2;
      c->out_index = out;
      c->rtol = 1e-4;
      if (variant) {
        attr_i(c, "causal", 1);
        attr_f(c, "p", 0.2);
        attr_i(c, "seed", 99);
        attr_i(c, "offset", 5);
      }
    }
  }
  operand gin[8] = {in[0], in[1], in[2], opnd(LOOM_DTYPE_F32, 4, o, -1, 1),
                    opnd(LOOM_DTYPE_F32, 3, lse, 1, 2), opnd(LOOM_DTYPE_F32, 4, o, -1, 1), in[3],
                    in[4]};
  for (int32_t variant = 0; variant < 2; variant++)
    for (int32_t out = 0; out < 3; out++) {
      op_case *c = add_case(LOOM_OP_FLASH_ATTENTION_GRAD, variant ? 8 : 7, gin);
      c->n_out = 3;
      c->out_index = out;
      c->rtol = 1e-4;
      attr_i(c, "causal", variant);
      attr_f(c, "p", 0.3);
      attr_i(c, "seed", 3);
    }
  op_case *c = add_case(LOOM_OP_DROPOUT_MASK, 1, &in[3]);
  attr_f(c, "p", 0.25);
  attr_i(c, "seed", 11);
  attr_i(c, "numel", 100003);
}

/* Fills a tensor with values in [lo, hi]; integers are rounded down. */
static void fill(loom_tensor *t, const operand *o, loom_test_rng *rng) {
  int64_t n = loom_tensor_numel(t);
  void *p = loom_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    double v = loom_test_uniform(rng, o->lo, o->hi);
    switch (o->dt) {
    case LOOM_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case LOOM_DTYPE_F64: ((double *)p)[i] = v; break;
    case LOOM_DTYPE_F16:
    case LOOM_DTYPE_BF16: {
      /* exact small multiples of 1/8, representable in both formats */
      float f = floorf((float)v * 8.0f) / 8.0f;
      uint32_t u;
      memcpy(&u, &f, 4);
      ((uint16_t *)p)[i] = o->dt == LOOM_DTYPE_BF16 ? (uint16_t)(u >> 16) : 0;
      if (o->dt == LOOM_DTYPE_F16) {
        /* f16 operands only come from casts in this harness */
        ((uint16_t *)p)[i] = 0;
      }
      break;
    }
    case LOOM_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)floor(v); break;
    case LOOM_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)floor(v); break;
    case LOOM_DTYPE_BOOL: ((uint8_t *)p)[i] = v > 0.5; break;
    case LOOM_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)floor(v); break;
    default: break;
    }
  }
  /* index operands must stay inside [0, hi) */
  if ((o->dt == LOOM_DTYPE_I32 || o->dt == LOOM_DTYPE_I64) && o->lo == 0)
    for (int64_t i = 0; i < n; i++) {
      if (o->dt == LOOM_DTYPE_I32 && ((int32_t *)p)[i] >= o->hi) ((int32_t *)p)[i] = 0;
      if (o->dt == LOOM_DTYPE_I64 && ((int64_t *)p)[i] >= o->hi) ((int64_t *)p)[i] = 0;
    }
}

static double elem(const loom_tensor *t, int64_t i) {
  const void *p = loom_tensor_data(t);
  switch (loom_tensor_dtype(t)) {
  case LOOM_DTYPE_F32: return ((const float *)p)[i];
  case LOOM_DTYPE_F64: return ((const double *)p)[i];
  case LOOM_DTYPE_I32: return ((const int32_t *)p)[i];
  case LOOM_DTYPE_I64: return (double)((const int64_t *)p)[i];
  case LOOM_DTYPE_BOOL:
  case LOOM_DTYPE_U8: return ((const uint8_t *)p)[i];
  case LOOM_DTYPE_F16:
  case LOOM_DTYPE_BF16: return ((const uint16_t *)p)[i]; /* compared bit for bit */
  default: return NAN;
  }
}

static bool close_enough(double ref, double got, double rtol) {
  if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got);
  if (isinf(ref) || isinf(got)) return ref == got;
  return fabs(ref - got) <= rtol * fabs(ref) + rtol;
}

static void describe(op_case *c) {
  int k = snprintf(c->label, sizeof c->label, "%s(", loom_op_name(c->op));
  for (int32_t i = 0; i < c->n_in && k < (int)sizeof c->label; i++) {
    k += snprintf(c->label + k, sizeof c->label - (size_t)k, "%s%s[", i ? ", " : "",
                  loom_dtype_name(c->in[i].dt));
    for (int32_t d = 0; d < c->in[i].rank && k < (int)sizeof c->label; d++)
      k += snprintf(c->label + k, sizeof c->label - (size_t)k, d ? ",%lld" : "%lld",
                    (long long)c->in[i].shape[d]);
    if (k < (int)sizeof c->label) k += snprintf(c->label + k, sizeof c->label - (size_t)k, "]");
  }
  if (k < (int)sizeof c->label) snprintf(c->label + k, sizeof c->label - (size_t)k, ")");
}

/*
 * Cases run in batches: one graph holds a batch's cases side by side
 * (inputs "cK_xI", output "cK"), so each fusion mode compiles one program
 * per batch instead of one per case. A batch that fails to prepare is
 * rerun case by case to name the culprit.
 */
typedef struct mode {
  const char *backend;
  loom_fusion_mode fusion;
} mode;

/* Every backend that compiles, in each of its modes; a backend whose
 * device is absent (opencl without a driver) is skipped with a message. */
static const mode modes[] = {
    {"cpu", LOOM_FUSION_EAGER},
    {"cpu", LOOM_FUSION_NONE},
    {"cpu", LOOM_FUSION_LOOP},
    {"cpu", LOOM_FUSION_STITCH},
    {"opencl", LOOM_FUSION_NONE}, /* (loop lies between these two) */
    {"opencl", LOOM_FUSION_STITCH},
    {"cuda", LOOM_FUSION_NONE},
    {"cuda", LOOM_FUSION_STITCH},
};

/* True if mode m's backend can be created here (asked once per name) and
 * $LOOM_TEST_BACKENDS, where set, lists it. */
static bool mode_present(loom_ctx *ctx, const mode *m) {
  static const char *asked[8];
  static bool present[8];
  static int n_asked;
  for (int i = 0; i < n_asked; i++)
    if (strcmp(asked[i], m->backend) == 0) return present[i];
  loom_backend *b = NULL;
  bool ok = loom_test_backend_selected(m->backend);
  if (!ok)
    printf("test_ops: backend %s skipped: not in LOOM_TEST_BACKENDS\n", m->backend);
  else if (!(ok = loom_backend_new(ctx, m->backend, &b) == LOOM_STATUS_OK))
    printf("test_ops: backend %s skipped: %s\n", m->backend, loom_ctx_error(ctx));
  loom_backend_free(b);
  if (n_asked < 8) {
    asked[n_asked] = m->backend;
    present[n_asked++] = ok;
  }
  return ok;
}

/* Graph of cases ids[0 .. n); NULL on failure (message printed). */
static loom_graph *build_graph(loom_ctx *ctx, const int32_t *ids, int32_t n) {
  loom_graph *g = NULL;
  if (loom_graph_new(ctx, &g)) return NULL;
  for (int32_t j = 0; j < n; j++) {
    int32_t k = ids[j];
    op_case *c = &cases[k];
    loom_value vin[MAX_IN], y;
    char name[32];
    bool ok = true;
    for (int32_t i = 0; i < c->n_in && ok; i++) {
      snprintf(name, sizeof name, "c%d_x%d", k, i);
      ok = loom_graph_input(g, name, c->in[i].dt, c->in[i].rank, c->in[i].shape, &vin[i]) ==
           LOOM_STATUS_OK;
    }
    snprintf(name, sizeof name, "c%d", k);
    loom_value outs[4];
    ok = ok && loom_graph_op_multi(g, c->op, c->n_in, vin, c->n_attrs, c->attrs,
                                   c->n_out ? c->n_out : 1, outs) == LOOM_STATUS_OK;
    y = outs[c->out_index];
    ok = ok && loom_graph_output(g, name, y) == LOOM_STATUS_OK;
    if (!ok) {
      fprintf(stderr, "%s: cannot build: %s\n", c->label, loom_ctx_error(ctx));
      loom_graph_free(g);
      return NULL;
    }
  }
  return g;
}

/* Runs cases ids[0 .. n) as one graph; outputs into out[0..n). */
static bool run_graph(loom_ctx *ctx, const int32_t *ids, int32_t n, const mode *m,
                      loom_tensor **inputs, loom_tensor **out, int32_t threads) {
  loom_graph *g = build_graph(ctx, ids, n);
  if (!g) return false;
  loom_session *s = NULL;
  loom_session_options opts = LOOM_SESSION_OPTIONS(.backend = m->backend, .fusion = m->fusion);
  bool ok = loom_session_new(ctx, g, &opts, &s) == LOOM_STATUS_OK;
  if (ok && loom_session_warning(s)[0])
    fprintf(stderr, "warning (%s): %s\n", loom_fusion_mode_name(m->fusion),
            loom_session_warning(s));
  ok = ok && loom_ctx_set_threads(ctx, threads) == LOOM_STATUS_OK;
  ok = ok && loom_session_run(s, g->n_inputs, (const loom_tensor *const *)inputs, n, out) ==
                 LOOM_STATUS_OK;
  loom_ctx_set_threads(ctx, 0);
  if (!ok) {
    fprintf(stderr, "%s..%s on %s/%s: %s\n", cases[ids[0]].label, cases[ids[n - 1]].label,
            m->backend, loom_fusion_mode_name(m->fusion), loom_ctx_error(ctx));
    for (int32_t k = 0; k < n; k++) {
      loom_tensor_free(out[k]);
      out[k] = NULL;
    }
  }
  loom_session_free(s);
  loom_graph_free(g);
  return ok;
}

static int32_t case_inputs(int32_t k) { return cases[k].n_in; }

/* Compares case k's output with the reference; returns true if equal. */
static bool compare(const op_case *c, const mode *m, const loom_tensor *ref,
                    const loom_tensor *got) {
  if (!ref || !got) return false;
  if (loom_tensor_dtype(ref) != loom_tensor_dtype(got) ||
      loom_tensor_numel(ref) != loom_tensor_numel(got)) {
    fprintf(stderr, "%s on %s: dtype or size differs\n", c->label,
            loom_fusion_mode_name(m->fusion));
    return false;
  }
  int64_t n = loom_tensor_numel(ref), bad = 0;
  for (int64_t i = 0; i < n && bad < 3; i++)
    if (!close_enough(elem(ref, i), elem(got, i), c->rtol)) {
      fprintf(stderr, "%s on %s/%s: element %lld: ref %.9g, got %.9g\n", c->label, m->backend,
              loom_fusion_mode_name(m->fusion), (long long)i, elem(ref, i), elem(got, i));
      bad++;
    }
  return bad == 0;
}

static bool same_bytes(const loom_tensor *a, const loom_tensor *b) {
  if (!a || !b) return false;
  size_t nb = (size_t)loom_tensor_numel(a) * loom_dtype_size(loom_tensor_dtype(a));
  return loom_tensor_numel(a) == loom_tensor_numel(b) &&
         memcmp(loom_tensor_data(a), loom_tensor_data(b), nb) == 0;
}

/*
 * Which cases the cpu backend runs itself. Eager: every node of the
 * decomposed case has a cpu kernel (the backend's supports_op). Fused
 * modes: each node is in a generated kernel (fusible) or, run as a GEMM
 * or eager step, has a cpu kernel. Anything else falls back to ref.
 */
static void classify_cases(loom_ctx *ctx) {
  loom_backend *cpu = NULL;
  CHECK_OK(ctx, loom_backend_new(ctx, "cpu", &cpu));
  if (!cpu) return;
  for (int32_t k = 0; k < n_cases; k++) {
    op_case *c = &cases[k];
    describe(c);
    loom_graph *g = build_graph(ctx, &k, 1), *d = NULL;
    if (g) CHECK_OK(ctx, loom_graph_decompose(g, &d));
    for (int32_t j = 0; d && j < d->n_nodes; j++) {
      bool kernel = cpu->iface->supports_op(cpu->context, d, &d->nodes[j]);
      c->ref_eager = c->ref_eager || !kernel;
      c->ref_fused = c->ref_fused || !(kernel || loom_fusion_node_fusible(d, j));
    }
    loom_graph_free(d);
    loom_graph_free(g);
  }
  loom_backend_free(cpu);
}

static bool is_fallback(const op_case *c, const mode *m) {
  return m->fusion == LOOM_FUSION_EAGER ? c->ref_eager : c->ref_fused;
}

/* (case, mode) pairs compared, per mode: on cpu code / fallbacks to ref. */
static int32_t on_cpu[LOOM_ARRAY_LEN(modes)], on_ref[LOOM_ARRAY_LEN(modes)];

/* Thread counts of the determinism check: 1, 2 and 3 give the bytes of
 * the default (all cores), so threaded paths (the GEMM's above its flop
 * threshold, split reductions) split differently and must still agree. */
static const int32_t det_threads[] = {1, 2, 3};

/* Runs the batch in mode m at each of det_threads and compares with got. */
static void check_threads(loom_ctx *ctx, const int32_t *ids, int32_t n, const mode *m,
                          loom_tensor **inputs, loom_tensor **got, loom_tensor **alt) {
  for (int32_t t = 0; t < LOOM_ARRAY_LEN(det_threads); t++) {
    bool ok = run_graph(ctx, ids, n, m, inputs, alt, det_threads[t]);
    CHECK(ok);
    for (int32_t k = 0; ok && k < n; k++) {
      if (!same_bytes(alt[k], got[k]))
        fprintf(stderr, "%s on %s: %d thread(s) differ from all cores\n", cases[ids[k]].label,
                loom_fusion_mode_name(m->fusion), det_threads[t]);
      CHECK(same_bytes(alt[k], got[k]));
    }
    for (int32_t k = 0; k < n; k++) {
      loom_tensor_free(alt[k]);
      alt[k] = NULL;
    }
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The host backend's modes (cpu) or the device backends' (opencl, cuda). */
static bool is_gpu_mode(const mode *m) { return strcmp(m->backend, "cpu") != 0; }

/* Seconds spent per mode (compiles included), for the summary. */
static double mode_s[LOOM_ARRAY_LEN(modes)];

/* One batch, cases ids[0 .. n), on the host modes or on the device modes
 * against ref; cpu eager and stitch also at 1, 2 and 3 threads (bitwise
 * equal). Counts the pairs compared in on_cpu/on_ref. */
static void check_batch(loom_ctx *ctx, const int32_t *ids, int32_t n, bool gpu,
                        loom_test_rng *rng) {
  if (n <= 0) return;
  int32_t n_in = 0;
  for (int32_t k = 0; k < n; k++) n_in += case_inputs(ids[k]);
  loom_tensor **inputs = calloc((size_t)n_in + 1, sizeof *inputs);
  size_t nb = (size_t)n;
  loom_tensor **ref = calloc(nb, sizeof *ref), **got = calloc(nb, sizeof *got);
  loom_tensor **alt = calloc(nb, sizeof *alt);
  int32_t at = 0;
  for (int32_t j = 0; j < n; j++) {
    const op_case *c = &cases[ids[j]];
    for (int32_t i = 0; i < c->n_in; i++, at++) {
      CHECK_OK(ctx, loom_tensor_new(ctx, c->in[i].dt, c->in[i].rank, c->in[i].shape, &inputs[at]));
      if (inputs[at]) fill(inputs[at], &c->in[i], rng);
    }
  }
  const mode ref_mode = {"ref", LOOM_FUSION_STITCH}; /* ref ignores the fusion mode */
  CHECK(run_graph(ctx, ids, n, &ref_mode, inputs, ref, 0));
  for (int32_t m = 0; m < LOOM_ARRAY_LEN(modes); m++) {
    if (is_gpu_mode(&modes[m]) != gpu || !mode_present(ctx, &modes[m])) continue;
    double t0 = now_s();
    bool ok = run_graph(ctx, ids, n, &modes[m], inputs, got, 0);
    if (!ok && n > 1) {
      /* find the case(s) that broke the batch */
      for (int32_t k = 0, in_at = 0; k < n; in_at += case_inputs(ids[k]), k++) {
        loom_tensor *one = NULL;
        if (!run_graph(ctx, &ids[k], 1, &modes[m], inputs + in_at, &one, 0))
          fprintf(stderr, "  fails alone: %s\n", cases[ids[k]].label);
        loom_tensor_free(one);
      }
    }
    CHECK(ok);
    for (int32_t k = 0; ok && k < n; k++) {
      CHECK(compare(&cases[ids[k]], &modes[m], ref[k], got[k]));
      if (is_fallback(&cases[ids[k]], &modes[m]))
        on_ref[m]++;
      else
        on_cpu[m]++;
    }
    /* (a GPU backend's results do not depend on host threads) */
    if (ok && !gpu &&
        (modes[m].fusion == LOOM_FUSION_STITCH || modes[m].fusion == LOOM_FUSION_EAGER))
      check_threads(ctx, ids, n, &modes[m], inputs, got, alt);
    for (int32_t k = 0; k < n; k++) {
      loom_tensor_free(got[k]);
      got[k] = NULL;
    }
    mode_s[m] += now_s() - t0;
  }
  for (int32_t k = 0; k < n; k++) loom_tensor_free(ref[k]);
  for (int32_t i = 0; i < n_in; i++) loom_tensor_free(inputs[i]);
  free(inputs);
  free(ref);
  free(got);
  free(alt);
}

/* Runs the cases with ids[0 .. n) in batches of `batch`; the batch count. */
static int32_t check_batches(loom_ctx *ctx, const int32_t *ids, int32_t n, int32_t batch, bool gpu,
                             loom_test_rng *rng) {
  int32_t batches = 0;
  for (int32_t first = 0; first < n; first += batch, batches++)
    check_batch(ctx, ids + first, LOOM_MIN(batch, n - first), gpu, rng);
  return batches;
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  double t0 = now_s();
  build_elementwise_cases();
  build_reduce_cases();
  build_layout_cases();
  build_index_cases();
  build_matmul_cases();
  build_window_cases();
  build_dropout_cases();
  build_attention_cases();

  classify_cases(ctx);

  /* Every primitive op has at least one case, and one the cpu backend
   * runs itself (eager); the ops seen only through a fallback are named.
   * Comm ops have no cpu kernel by design (they run through the reference
   * kernel and a communicator): test_comm_ops covers them. */
  bool on_cpu_eager[LOOM_OP_COUNT] = {false};
  for (int32_t k = 0; k < n_cases; k++)
    if (!cases[k].ref_eager) on_cpu_eager[cases[k].op] = true;
  for (int op = 0; op < LOOM_OP_COUNT; op++) {
    if (loom_op_is_composite((loom_op)op) || loom_op_is_comm((loom_op)op)) continue;
    if (!covered[op]) fprintf(stderr, "no harness case for op %s\n", loom_op_name((loom_op)op));
    CHECK(covered[op]);
    if (covered[op] && !on_cpu_eager[op])
      fprintf(stderr, "op %s: no case on a cpu kernel (fallbacks to ref only)\n",
              loom_op_name((loom_op)op));
    CHECK(!covered[op] || on_cpu_eager[op]);
  }

  /* Batches of cases: each fusion mode compiles one program per batch. */
  const char *quick = getenv("LOOM_TEST_QUICK");
  int32_t batch = quick && quick[0] == '1' ? 128 : 64;
  loom_test_rng rng = {42};
  int32_t *ids = malloc(sizeof *ids * (size_t)n_cases), n_gpu = 0;
  if (!ids) return 2;
  for (int32_t k = 0; k < n_cases; k++) ids[k] = k;
  int32_t batches = check_batches(ctx, ids, n_cases, batch, false, &rng);
  for (int32_t k = 0; k < n_cases; k++)
    if (!cases[k].host_only) ids[n_gpu++] = k;
  int32_t gpu_batches = check_batches(ctx, ids, n_gpu, batch, true, &rng);
  free(ids);
  printf("op harness: %d cases on cpu, %d of them on the GPU backends, against ref; %d + %d "
         "batches, %.1fs\n",
         n_cases, n_gpu, batches, gpu_batches, now_s() - t0);
  for (int32_t m = 0; m < LOOM_ARRAY_LEN(modes); m++)
    printf("  %-6s %-6s: %d cases on its kernels, %d fallbacks to ref (%.1fs)\n", modes[m].backend,
           loom_fusion_mode_name(modes[m].fusion), on_cpu[m], on_ref[m], mode_s[m]);
  for (int32_t fused = 0; fused < 2; fused++) {
    printf("  %s fall back to ref on:", fused ? "none/loop/stitch" : "eager");
    for (int32_t k = 0; k < n_cases; k++)
      if (fused ? cases[k].ref_fused : cases[k].ref_eager) printf(" %s", cases[k].label);
    printf("\n");
  }
  /* the known fallbacks (f64, bf16, f64 matmul) are there, not counted as cpu */
  CHECK(on_ref[0] > 0 && on_cpu[0] + on_ref[0] == n_cases);
  free(cases);
  loom_ctx_free(ctx);
  return loom_test_finish("test_ops");
}
