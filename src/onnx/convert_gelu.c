/*
 * GELU as exporters spell it out: 0.5 x (1 + erf(x / sqrt 2)) and 0.5 x (1
 * + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), in any order of their products
 * and with the constants folded anywhere in them, become Loom's gelu op,
 * so that the session builds the GELU as Loom's own layers do (the tanh
 * form as sigmoid(2u): one exp and a division, where tanh costs more).
 */
#include "onnx/convert_util.h"

#include "ops/attrs.h"

#include <math.h>

static const loom_node *producer(const loom_graph *g, int32_t v) {
  return v >= 0 && g->values[v].kind == LOOM_VALUE_NODE ? &g->nodes[g->values[v].node] : NULL;
}

/* The value of a constant node of one element. */
static bool scalar_const(const loom_graph *g, int32_t v, double *out) {
  const loom_node *n = producer(g, v);
  if (!n || n->op != LOOM_OP_CONSTANT || loom_type_numel(&g->values[v].type) != 1) return false;
  *out = LOOM_ATTR_F(n, constant, value);
  return true;
}

/* A product flattened: its constant factors multiplied into c, the other
 * factors (up to 4) listed. ok is false when there were more. */
typedef struct product {
  double c;
  int32_t leaf[4];
  int n;
  bool ok;
} product;

static void flatten(const loom_graph *g, int32_t v, product *p, int depth) {
  const loom_node *n = producer(g, v);
  double k;
  if (scalar_const(g, v, &k)) {
    p->c *= k;
  } else if (n && depth < 4 && n->op == LOOM_OP_MUL) {
    flatten(g, n->in[0], p, depth + 1);
    flatten(g, n->in[1], p, depth + 1);
  } else if (n && depth < 4 && n->op == LOOM_OP_DIV && scalar_const(g, n->in[1], &k) && k != 0.0) {
    flatten(g, n->in[0], p, depth + 1);
    p->c /= k;
  } else if (p->n < 4) {
    p->leaf[p->n++] = v;
  } else {
    p->ok = false;
  }
}

static product product_of(const loom_graph *g, int32_t v) {
  product p = {1.0, {-1, -1, -1, -1}, 0, true};
  flatten(g, v, &p, 0);
  return p;
}

/* c within the rounding of an f32 constant of want */
static bool near(double c, double want) { return fabs(c - want) <= 1e-5 * fabs(want); }

/* If v = 1 + t (either order), t. */
static int32_t one_plus(const loom_graph *g, int32_t v) {
  const loom_node *n = producer(g, v);
  double k;
  if (!n || n->op != LOOM_OP_ADD) return -1;
  for (int32_t side = 0; side < 2; side++)
    if (scalar_const(g, n->in[side], &k) && k == 1.0) return n->in[1 - side];
  return -1;
}

/* Whether t's argument is the GELU's for x: x / sqrt 2 (erf), or sqrt(2 /
 * pi) (x + 0.044715 x^3) (tanh). */
static bool gelu_argument(const loom_graph *g, const loom_node *t, int32_t x) {
  product a = product_of(g, t->in[0]);
  if (!a.ok || a.n != 1) return false;
  if (t->op == LOOM_OP_ERF) return a.leaf[0] == x && near(a.c, sqrt(0.5));
  const loom_node *s = producer(g, a.leaf[0]);
  if (!near(a.c, 0.7978845608028654) /* sqrt(2 / pi) */ || !s || s->op != LOOM_OP_ADD) return false;
  for (int32_t side = 0; side < 2; side++) {
    if (s->in[side] != x) continue;
    product cube = product_of(g, s->in[1 - side]);
    if (cube.ok && cube.n == 3 && cube.leaf[0] == x && cube.leaf[1] == x && cube.leaf[2] == x &&
        near(cube.c, 0.044715))
      return true;
  }
  return false;
}

int32_t onnx_gelu_of(loom_graph *g, int32_t y) {
  if (y < 0 || !loom_dtype_is_float(g->values[y].type.dtype)) return -1;
  product p = product_of(g, y);
  if (!p.ok || p.n != 2 || !near(p.c, 0.5)) return -1;
  for (int side = 0; side < 2; side++) {
    int32_t x = p.leaf[side], t = one_plus(g, p.leaf[1 - side]);
    const loom_node *tn = producer(g, t);
    if (!tn || (tn->op != LOOM_OP_TANH && tn->op != LOOM_OP_ERF) ||
        !loom_type_equal(&g->values[x].type, &g->values[y].type))
      continue;
    if (!gelu_argument(g, tn, x)) continue;
    loom_attr_value a[LOOM_MAX_ATTRS];
    attrs_of(LOOM_OP_GELU, a);
    LOOM_ATTRV_I(a, gelu, approximate) = tn->op == LOOM_OP_TANH;
    return lb_op(g, LOOM_OP_GELU, 1, &x, a);
  }
  return -1;
}
