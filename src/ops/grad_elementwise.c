/*
 * Gradient rules of the element-wise ops. Each rule reads the forward node n
 * (its inputs and outputs are values of g), the output gradient dout[0] and
 * sets din[j]. Binary ops broadcast, so an operand's gradient is summed back
 * to the operand's shape with lb_unbroadcast.
 */
#include "ops/grad.h"

#include "ir/build.h"
#include "ir/dtype.h"


/* A rank-0 constant with the dtype of x (broadcasts in binary ops). */
static int32_t scal(loom_graph *g, int32_t x, double v) {
  return lb_scalar_like(g, x, v);
}

/* Gradient of operand j of a broadcasting binary op: grad summed to its shape. */
static int32_t unbroadcast_to(loom_graph *g, int32_t grad, int32_t operand) {
  if (g->err || grad < 0) return -1;
  loom_type t = g->values[operand].type; /* copy: adds may realloc values */
  return lb_unbroadcast(g, grad, &t);
}

/* ---- unary -------------------------------------------------------------- */

void loom_grad_neg(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  (void)n;
  if (dout[0] < 0) return;
  din[0] = lb_neg(g, dout[0]);
}

/* d|x| = sign(x): 0 at x == 0 (the subgradient PyTorch and JAX pick). */
void loom_grad_abs(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0) return;
  din[0] = lb_mul(g, dout[0], lb_unary(g, LOOM_OP_SIGN, n->in[0]));
}

void loom_grad_exp(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0) return;
  din[0] = lb_mul(g, dout[0], n->out[0]);
}

void loom_grad_log(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0) return;
  din[0] = lb_div(g, dout[0], n->in[0]);
}

/* d sqrt(x) = 0.5 / sqrt(x) */
void loom_grad_sqrt(loom_graph *g, const loom_node *n, const int32_t *dout,
                    int32_t *din) {
  if (dout[0] < 0) return;
  int32_t y = n->out[0];
  din[0] = lb_div(g, lb_mul(g, dout[0], scal(g, y, 0.5)), y);
}

/* d x^-1/2 = -0.5 x^-3/2 = -0.5 y^3 */
void loom_grad_rsqrt(loom_graph *g, const loom_node *n, const int32_t *dout,
                     int32_t *din) {
  if (dout[0] < 0) return;
  int32_t y = n->out[0];
  int32_t y3 = lb_mul(g, lb_mul(g, y, y), y);
  din[0] = lb_mul(g, dout[0], lb_mul(g, y3, scal(g, y, -0.5)));
}

/* d 1/x = -1/x^2 = -y^2 */
void loom_grad_reciprocal(loom_graph *g, const loom_node *n,
                          const int32_t *dout, int32_t *din) {
  if (dout[0] < 0) return;
  int32_t y = n->out[0];
  din[0] = lb_neg(g, lb_mul(g, dout[0], lb_mul(g, y, y)));
}

/* d tanh = 1 - y^2 */
void loom_grad_tanh(loom_graph *g, const loom_node *n, const int32_t *dout,
                    int32_t *din) {
  if (dout[0] < 0) return;
  int32_t y = n->out[0];
  din[0] = lb_mul(g, dout[0], lb_sub(g, scal(g, y, 1.0), lb_mul(g, y, y)));
}

/* d sigmoid = y (1 - y) */
void loom_grad_sigmoid(loom_graph *g, const loom_node *n, const int32_t *dout,
                       int32_t *din) {
  if (dout[0] < 0) return;
  int32_t y = n->out[0];
  din[0] = lb_mul(g, dout[0], lb_mul(g, y, lb_sub(g, scal(g, y, 1.0), y)));
}

/* d relu = [x > 0] (0 at the kink, as PyTorch). */
void loom_grad_relu(loom_graph *g, const loom_node *n, const int32_t *dout,
                    int32_t *din) {
  if (dout[0] < 0) return;
  int32_t x = n->in[0];
  int32_t pos = lb_binary(g, LOOM_OP_GT, x, scal(g, x, 0.0));
  din[0] = lb_select(g, pos, dout[0], scal(g, dout[0], 0.0));
}

/* d erf = 2/sqrt(pi) exp(-x^2) */
void loom_grad_erf(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0) return;
  int32_t x = n->in[0];
  int32_t e = lb_unary(g, LOOM_OP_EXP, lb_neg(g, lb_mul(g, x, x)));
  int32_t k = scal(g, x, 1.1283791670955126); /* 2 / sqrt(pi) */
  din[0] = lb_mul(g, dout[0], lb_mul(g, e, k));
}

void loom_grad_sin(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0) return;
  din[0] = lb_mul(g, dout[0], lb_unary(g, LOOM_OP_COS, n->in[0]));
}

void loom_grad_cos(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0) return;
  din[0] = lb_neg(g, lb_mul(g, dout[0], lb_unary(g, LOOM_OP_SIN, n->in[0])));
}

/* ---- binary ------------------------------------------------------------- */

void loom_grad_add(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0) return;
  din[0] = unbroadcast_to(g, dout[0], n->in[0]);
  din[1] = unbroadcast_to(g, dout[0], n->in[1]);
}

void loom_grad_sub(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0) return;
  din[0] = unbroadcast_to(g, dout[0], n->in[0]);
  din[1] = unbroadcast_to(g, lb_neg(g, dout[0]), n->in[1]);
}

void loom_grad_mul(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0) return;
  int32_t a = n->in[0], b = n->in[1];
  din[0] = unbroadcast_to(g, lb_mul(g, dout[0], b), a);
  din[1] = unbroadcast_to(g, lb_mul(g, dout[0], a), b);
}

/* y = a / b: da = dout / b, db = -dout * y / b */
void loom_grad_div(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0) return;
  int32_t a = n->in[0], b = n->in[1], y = n->out[0];
  int32_t q = lb_div(g, dout[0], b);
  din[0] = unbroadcast_to(g, q, a);
  din[1] = unbroadcast_to(g, lb_neg(g, lb_mul(g, q, y)), b);
}

/*
 * y = a^b: da = dout * b * a^(b-1) (computed as a power, so a == 0 with
 * b >= 1 stays finite); db = dout * y * log(a).
 * For a <= 0, y * log(a) is not a real derivative: at a == 0 we return 0
 * (the limit of a^b log a as a -> 0+ for b > 0, PyTorch's choice); for
 * a < 0 log(a) is NaN, so the b-gradient is NaN there (a^b of a negative
 * base is only real for integer b, where it is not differentiable in b).
 */
void loom_grad_pow(loom_graph *g, const loom_node *n, const int32_t *dout,
                   int32_t *din) {
  if (dout[0] < 0) return;
  int32_t a = n->in[0], b = n->in[1], y = n->out[0];
  int32_t bm1 = lb_sub(g, b, scal(g, b, 1.0));
  int32_t da = lb_mul(g, b, lb_binary(g, LOOM_OP_POW, a, bm1));
  din[0] = unbroadcast_to(g, lb_mul(g, dout[0], da), a);
  int32_t zero = scal(g, a, 0.0);
  int32_t is0 = lb_binary(g, LOOM_OP_EQ, a, zero);
  int32_t ylog = lb_mul(g, y, lb_unary(g, LOOM_OP_LOG, a));
  int32_t db = lb_select(g, is0, zero, ylog);
  din[1] = unbroadcast_to(g, lb_mul(g, dout[0], db), b);
}

/*
 * maximum/minimum: the gradient goes to the winning operand; on a tie it is
 * split in half between both, so their sum is still dout. `win` is the
 * comparison that makes a the winner (gt for maximum, lt for minimum).
 */
static void grad_extremum(loom_graph *g, const loom_node *n,
                          const int32_t *dout, int32_t *din, loom_op win) {
  if (dout[0] < 0) return;
  int32_t a = n->in[0], b = n->in[1], d = dout[0];
  int32_t a_wins = lb_binary(g, win, a, b);
  int32_t tie = lb_binary(g, LOOM_OP_EQ, a, b);
  int32_t half = lb_mul(g, d, scal(g, d, 0.5));
  int32_t ga = lb_select(g, a_wins, d, lb_select(g, tie, half, scal(g, d, 0.0)));
  int32_t gb = lb_sub(g, d, ga);
  din[0] = unbroadcast_to(g, ga, a);
  din[1] = unbroadcast_to(g, gb, b);
}

void loom_grad_maximum(loom_graph *g, const loom_node *n, const int32_t *dout,
                       int32_t *din) {
  grad_extremum(g, n, dout, din, LOOM_OP_GT);
}

void loom_grad_minimum(loom_graph *g, const loom_node *n, const int32_t *dout,
                       int32_t *din) {
  grad_extremum(g, n, dout, din, LOOM_OP_LT);
}

/* select(c, a, b): the condition is bool and gets no gradient. */
void loom_grad_select(loom_graph *g, const loom_node *n, const int32_t *dout,
                      int32_t *din) {
  if (dout[0] < 0) return;
  int32_t c = n->in[0], d = dout[0];
  int32_t zero = scal(g, d, 0.0);
  din[1] = unbroadcast_to(g, lb_select(g, c, d, zero), n->in[1]);
  din[2] = unbroadcast_to(g, lb_select(g, c, zero, d), n->in[2]);
}

/* A cast between float dtypes passes the gradient back in the input's dtype;
 * casts from or to integers carry none. */
void loom_grad_cast(loom_graph *g, const loom_node *n, const int32_t *dout,
                    int32_t *din) {
  if (dout[0] < 0 || g->err) return;
  loom_dtype from = g->values[n->in[0]].type.dtype;
  loom_dtype to = g->values[n->out[0]].type.dtype;
  if (!loom_dtype_is_float(from) || !loom_dtype_is_float(to)) return;
  din[0] = lb_cast(g, dout[0], from);
}
