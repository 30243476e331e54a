/*
 * Memory-bound workloads from the layers of recent models, built from
 * primitives the way a user's graph would be (issue 13, point 1: the
 * general mechanisms are measured on graphs nobody tuned for): RMSNorm
 * forward and backward, a SwiGLU gate, rotary embeddings (slice, neg,
 * concat), GroupNorm + SiLU (reshapes around the statistics),
 * label-smoothed cross-entropy forward + backward (a one-hot from
 * iota == label) and binary cross-entropy with logits forward + backward.
 * The peer scripts (bench/peers) build the same math at the same shapes.
 */
#include "workloads.h"

#include "ir/build.h"
#include "ops/op.h"

#include <math.h>
#include <stdio.h>

#define RMS_EPS 1e-6
#define GN_EPS 1e-5
#define LABEL_SMOOTHING 0.1

static void shape2(loom_bench_graph *b, const char *prefix, int64_t r, int64_t c) {
  snprintf(b->shape, sizeof b->shape, "%s[%lld, %lld]", prefix, (long long)r, (long long)c);
}

static int32_t silu(loom_graph *g, int32_t x) { return lb_unary(g, LOOM_OP_SILU, x); }

static loom_status output(loom_bench_graph *b, const char *name, int32_t y) {
  LOOM_TRY(loom_build_status(b->g));
  return loom_graph_output(b->g, name, y);
}

/* Backward of y: loss = sum(y * dy), gradients wrt the first n_wrt inputs. */
static loom_status backward(loom_bench_graph *b, int32_t y, int32_t dy, int32_t n_wrt) {
  LOOM_TRY(output(b, "objective", loom_bench_vjp_loss(b->g, y, dy)));
  int32_t wrt[4] = {0, 1, 2, 3};
  return loom_bench_make_backward(b, n_wrt, wrt);
}

/* ---- RMSNorm ------------------------------------------------------------- */

static int32_t rms_norm(loom_graph *g, int32_t x, int32_t gain) {
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_RMS_NORM, a);
  LOOM_ATTRV_I(a, rms_norm, axis) = -1;
  LOOM_ATTRV_F(a, rms_norm, eps) = RMS_EPS;
  int32_t in[2] = {x, gain};
  return lb_op(g, LOOM_OP_RMS_NORM, 2, in, a);
}

static loom_status build_rms(loom_ctx *ctx, bool small, bool bwd, loom_bench_graph *b) {
  int64_t r = small ? 2048 : 32768, c = small ? 256 : 1024, xs[2] = {r, c};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t gain = loom_bench_input(b, "gamma", LOOM_DTYPE_F32, 1, &c, LOOM_BENCH_FILL_GAIN, true);
  shape2(b, "", r, c);
  b->min_bytes = (bwd ? 3 : 2) * r * c * 4; /* x (and dy) in; y or dx out */
  int32_t y = rms_norm(b->g, x, gain);
  if (!bwd) return output(b, "y", y);
  int32_t dy = loom_bench_input(b, "dy", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  return backward(b, y, dy, 2);
}

loom_status loom_bench_build_rmsnorm_fwd(loom_ctx *ctx, const loom_bench_workload *self,
                                         bool small, loom_bench_graph *b) {
  (void)self;
  return build_rms(ctx, small, false, b);
}

loom_status loom_bench_build_rmsnorm_bwd(loom_ctx *ctx, const loom_bench_workload *self,
                                         bool small, loom_bench_graph *b) {
  (void)self;
  return build_rms(ctx, small, true, b);
}

/* ---- SwiGLU: silu(u[:, :C]) * u[:, C:] of one [R, 2C] projection ---------- */

loom_status loom_bench_build_swiglu(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                    loom_bench_graph *b) {
  (void)self;
  int64_t r = small ? 1024 : 16384, c = small ? 256 : 1024, us[2] = {r, 2 * c};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int32_t u = loom_bench_input(b, "u", LOOM_DTYPE_F32, 2, us, LOOM_BENCH_FILL_UNIFORM, false);
  shape2(b, "u ", r, 2 * c);
  b->min_bytes = 3 * r * c * 4; /* u in (2 halves), y out */
  int64_t s0[2] = {0, 0}, e0[2] = {r, c}, s1[2] = {0, c}, e1[2] = {r, 2 * c};
  int32_t gate = lb_slice(g, u, s0, e0), up = lb_slice(g, u, s1, e1);
  return output(b, "y", lb_mul(g, silu(g, gate), up));
}

/* ---- rotary embedding: x * cos + rotate_half(x) * sin --------------------- */

loom_status loom_bench_build_rotary(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                    loom_bench_graph *b) {
  (void)self;
  int64_t t = small ? 256 : 4096, h = small ? 8 : 16, d = small ? 32 : 64, half = d / 2;
  int64_t xs[3] = {t, h, d}, cs[3] = {t, 1, d};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 3, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t cs_ = loom_bench_input(b, "cos", LOOM_DTYPE_F32, 3, cs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t sn = loom_bench_input(b, "sin", LOOM_DTYPE_F32, 3, cs, LOOM_BENCH_FILL_UNIFORM, false);
  snprintf(b->shape, sizeof b->shape, "x [%lld, %lld, %lld]", (long long)t, (long long)h,
           (long long)d);
  b->min_bytes = 2 * t * h * d * 4 + 2 * t * d * 4; /* x in, y out; cos and sin */
  int64_t s0[3] = {0, 0, 0}, e0[3] = {t, h, half}, s1[3] = {0, 0, half}, e1[3] = {t, h, d};
  int32_t x1 = lb_slice(g, x, s0, e0), x2 = lb_slice(g, x, s1, e1);
  int32_t parts[2] = {lb_neg(g, x2), x1};
  int32_t rot = lb_concat(g, 2, parts, 2);
  return output(b, "y", lb_add(g, lb_mul(g, x, cs_), lb_mul(g, rot, sn)));
}

/* ---- GroupNorm + SiLU over [N, C, H, W] ------------------------------------ */

loom_status loom_bench_build_groupnorm_silu(loom_ctx *ctx, const loom_bench_workload *self,
                                            bool small, loom_bench_graph *b) {
  (void)self;
  int64_t n = small ? 2 : 16, c = small ? 64 : 256, hw = small ? 16 : 32, groups = 32;
  int64_t xs[4] = {n, c, hw, hw}, gs[3] = {n, groups, c / groups * hw * hw}, ps[3] = {c, 1, 1};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 4, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t gamma = loom_bench_input(b, "gamma", LOOM_DTYPE_F32, 3, ps, LOOM_BENCH_FILL_GAIN, true);
  int32_t beta = loom_bench_input(b, "beta", LOOM_DTYPE_F32, 3, ps, LOOM_BENCH_FILL_SMALL, true);
  snprintf(b->shape, sizeof b->shape, "[%lld, %lld, %lld, %lld] G=%lld", (long long)n,
           (long long)c, (long long)hw, (long long)hw, (long long)groups);
  b->min_bytes = 2 * n * c * hw * hw * 4;
  int64_t last = -1;
  int32_t xg = lb_reshape(g, x, 3, gs);
  int32_t inv_n = lb_scalar(g, LOOM_DTYPE_F32, 1.0 / (double)gs[2]);
  int32_t mean = lb_mul(g, lb_sum(g, xg, 1, &last, true), inv_n);
  int32_t xc = lb_sub(g, xg, mean);
  int32_t var = lb_mul(g, lb_sum(g, lb_mul(g, xc, xc), 1, &last, true), inv_n);
  int32_t rstd =
      lb_unary(g, LOOM_OP_RSQRT, lb_add(g, var, lb_scalar(g, LOOM_DTYPE_F32, GN_EPS)));
  int32_t xn = lb_reshape(g, lb_mul(g, xc, rstd), 4, xs);
  return output(b, "y", silu(g, lb_add(g, lb_mul(g, xn, gamma), beta)));
}

/* ---- label-smoothed cross-entropy forward + backward ---------------------- */

/* loss = mean over rows of -sum(target * log_softmax(x)), target =
 * (1 - eps) * onehot(label) + eps / K: PyTorch's label_smoothing. */
loom_status loom_bench_build_ls_ce(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                   loom_bench_graph *b) {
  (void)self;
  int64_t r = small ? 256 : 4096, k = small ? 1024 : 8192, xs[2] = {r, k}, ls[2] = {r, 1};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int32_t logits =
      loom_bench_input(b, "logits", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t labels =
      loom_bench_input(b, "labels", LOOM_DTYPE_I64, 1, &r, LOOM_BENCH_FILL_LABELS, false);
  b->classes = k;
  shape2(b, "logits ", r, k);
  b->min_bytes = 2 * r * k * 4; /* logits in, their gradient out */
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_LOG_SOFTMAX, a);
  LOOM_ATTRV_I(a, log_softmax, axis) = -1;
  int32_t logp = lb_op(g, LOOM_OP_LOG_SOFTMAX, 1, &logits, a);
  int32_t cls = lb_iota(g, LOOM_DTYPE_I64, 2, xs, 1);
  int32_t hit = lb_binary(g, LOOM_OP_EQ, cls, lb_reshape(g, labels, 2, ls));
  double eps = LABEL_SMOOTHING;
  int32_t on = lb_scalar(g, LOOM_DTYPE_F32, 1.0 - eps + eps / (double)k);
  int32_t off = lb_scalar(g, LOOM_DTYPE_F32, eps / (double)k);
  int32_t target = lb_select(g, hit, lb_broadcast_like(g, on, logits),
                             lb_broadcast_like(g, off, logits));
  int64_t axes[2] = {0, 1};
  int32_t total = lb_sum(g, lb_mul(g, target, logp), 2, axes, false);
  int32_t loss = lb_mul(g, total, lb_scalar(g, LOOM_DTYPE_F32, -1.0 / (double)r));
  LOOM_TRY(output(b, "objective", loss));
  LOOM_TRY(loom_graph_output(g, "loss", loss)); /* kept: the forward's result */
  int32_t wrt[1] = {0};
  return loom_bench_make_backward(b, 1, wrt);
}

/* ---- binary cross-entropy with logits forward + backward ------------------ */

/* loss = mean(max(x, 0) - x * t + log(1 + exp(-|x|))), the stable form. */
loom_status loom_bench_build_bce(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                 loom_bench_graph *b) {
  (void)self;
  int64_t r = small ? 2048 : 32768, c = small ? 256 : 1024, xs[2] = {r, c};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t t = loom_bench_input(b, "target", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_POSITIVE, false);
  shape2(b, "", r, c);
  b->min_bytes = 3 * r * c * 4; /* x, target in; dx out */
  int32_t zero = lb_scalar(g, LOOM_DTYPE_F32, 0.0), one = lb_scalar(g, LOOM_DTYPE_F32, 1.0);
  int32_t soft = lb_unary(
      g, LOOM_OP_LOG,
      lb_add(g, one, lb_unary(g, LOOM_OP_EXP, lb_neg(g, lb_unary(g, LOOM_OP_ABS, x)))));
  int32_t el = lb_add(g, lb_sub(g, lb_binary(g, LOOM_OP_MAXIMUM, x, zero), lb_mul(g, x, t)), soft);
  int64_t axes[2] = {0, 1};
  int32_t loss = lb_mul(g, lb_sum(g, el, 2, axes, false),
                        lb_scalar(g, LOOM_DTYPE_F32, 1.0 / (double)(r * c)));
  LOOM_TRY(output(b, "objective", loss));
  LOOM_TRY(loom_graph_output(g, "loss", loss));
  int32_t wrt[1] = {0};
  return loom_bench_make_backward(b, 1, wrt);
}

/* ---- held-out graphs (issue 13: graphs Loom was not tuned for) ------------ */

#define IN_EPS 1e-5
#define LRELU_SLOPE 0.2
#define ALIBI_SCALE 0.125 /* 1 / sqrt(head dim 64) */
#define DROP_PATH_KEEP 0.9

static int32_t scalar(loom_graph *g, double v) { return lb_scalar(g, LOOM_DTYPE_F32, v); }

/* InstanceNorm over H, W with a per-channel affine, then LeakyReLU(0.2). */
static loom_status build_instnorm(loom_ctx *ctx, bool small, bool bwd, loom_bench_graph *b) {
  int64_t n = small ? 2 : 8, c = small ? 32 : 128, hw = small ? 16 : 64;
  int64_t xs[4] = {n, c, hw, hw}, ps[3] = {c, 1, 1}, axes[2] = {2, 3};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 4, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t gamma = loom_bench_input(b, "gamma", LOOM_DTYPE_F32, 3, ps, LOOM_BENCH_FILL_GAIN, true);
  int32_t beta = loom_bench_input(b, "beta", LOOM_DTYPE_F32, 3, ps, LOOM_BENCH_FILL_SMALL, true);
  snprintf(b->shape, sizeof b->shape, "[%lld, %lld, %lld, %lld]", (long long)n, (long long)c,
           (long long)hw, (long long)hw);
  b->min_bytes = (bwd ? 3 : 2) * n * c * hw * hw * 4;
  int32_t inv_n = scalar(g, 1.0 / (double)(hw * hw));
  int32_t mean = lb_mul(g, lb_sum(g, x, 2, axes, true), inv_n);
  int32_t xc = lb_sub(g, x, mean);
  int32_t var = lb_mul(g, lb_sum(g, lb_mul(g, xc, xc), 2, axes, true), inv_n);
  int32_t rstd = lb_unary(g, LOOM_OP_RSQRT, lb_add(g, var, scalar(g, IN_EPS)));
  int32_t z = lb_add(g, lb_mul(g, lb_mul(g, xc, rstd), gamma), beta);
  int32_t pos = lb_binary(g, LOOM_OP_GT, z, scalar(g, 0.0));
  int32_t y = lb_select(g, pos, z, lb_mul(g, z, scalar(g, LRELU_SLOPE)));
  if (!bwd) return output(b, "y", y);
  int32_t dy = loom_bench_input(b, "dy", LOOM_DTYPE_F32, 4, xs, LOOM_BENCH_FILL_UNIFORM, false);
  return backward(b, y, dy, 3);
}

loom_status loom_bench_build_instnorm_lrelu(loom_ctx *ctx, const loom_bench_workload *self,
                                            bool small, loom_bench_graph *b) {
  (void)self;
  return build_instnorm(ctx, small, false, b);
}

loom_status loom_bench_build_instnorm_lrelu_bwd(loom_ctx *ctx, const loom_bench_workload *self,
                                                bool small, loom_bench_graph *b) {
  (void)self;
  return build_instnorm(ctx, small, true, b);
}

/* T5's norm on a residual stream: h = x + r, y = h * rsqrt(mean(h^2) + eps)
 * * w (no centring, no bias); both h and y are outputs. */
loom_status loom_bench_build_t5_norm_residual(loom_ctx *ctx, const loom_bench_workload *self,
                                              bool small, loom_bench_graph *b) {
  (void)self;
  int64_t r = small ? 2048 : 16384, c = small ? 256 : 1024, xs[2] = {r, c}, last = -1;
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t res = loom_bench_input(b, "residual", LOOM_DTYPE_F32, 2, xs, LOOM_BENCH_FILL_UNIFORM,
                                 false);
  int32_t w = loom_bench_input(b, "weight", LOOM_DTYPE_F32, 1, &c, LOOM_BENCH_FILL_GAIN, true);
  shape2(b, "", r, c);
  b->min_bytes = 4 * r * c * 4; /* x, residual in; h, y out */
  int32_t h = lb_add(g, x, res);
  int32_t ms = lb_mul(g, lb_sum(g, lb_mul(g, h, h), 1, &last, true), scalar(g, 1.0 / (double)c));
  int32_t y = lb_mul(g, lb_mul(g, h, lb_unary(g, LOOM_OP_RSQRT, lb_add(g, ms, scalar(g, RMS_EPS)))),
                     w);
  LOOM_TRY(output(b, "h", h));
  return output(b, "y", y);
}

/* Attention scores with an ALiBi bias: softmax over keys of s * scale +
 * slope[head] * (j - i) + mask[batch, key], causal (-inf above the
 * diagonal). Forward, or backward to the scores. */
static loom_status build_alibi(loom_ctx *ctx, bool small, bool bwd, loom_bench_graph *b) {
  int64_t bs = small ? 1 : 4, h = small ? 4 : 16, s = small ? 64 : 256;
  int64_t ss[4] = {bs, h, s, s}, sl[3] = {h, 1, 1}, ms[4] = {bs, 1, 1, s}, sq[2] = {s, s};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int32_t sc = loom_bench_input(b, "scores", LOOM_DTYPE_F32, 4, ss, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t slope = loom_bench_input(b, "slopes", LOOM_DTYPE_F32, 3, sl, LOOM_BENCH_FILL_POSITIVE,
                                   false);
  int32_t mask = loom_bench_input(b, "mask", LOOM_DTYPE_F32, 4, ms, LOOM_BENCH_FILL_UNIFORM, false);
  snprintf(b->shape, sizeof b->shape, "[%lld, %lld, %lld, %lld]", (long long)bs, (long long)h,
           (long long)s, (long long)s);
  b->min_bytes = (bwd ? 3 : 2) * bs * h * s * s * 4;
  int32_t qi = lb_iota(g, LOOM_DTYPE_I64, 2, sq, 0), kj = lb_iota(g, LOOM_DTYPE_I64, 2, sq, 1);
  int32_t dist = lb_cast(g, lb_sub(g, kj, qi), LOOM_DTYPE_F32);
  int32_t z = lb_add(g, lb_add(g, lb_mul(g, sc, scalar(g, ALIBI_SCALE)), lb_mul(g, slope, dist)),
                     mask);
  int32_t causal = lb_binary(g, LOOM_OP_LE, kj, qi);
  int32_t zm = lb_select(g, causal, z, lb_broadcast_like(g, scalar(g, -INFINITY), z));
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_SOFTMAX, a);
  LOOM_ATTRV_I(a, softmax, axis) = -1;
  int32_t y = lb_op(g, LOOM_OP_SOFTMAX, 1, &zm, a);
  if (!bwd) return output(b, "y", y);
  int32_t dy = loom_bench_input(b, "dy", LOOM_DTYPE_F32, 4, ss, LOOM_BENCH_FILL_UNIFORM, false);
  return backward(b, y, dy, 1);
}

loom_status loom_bench_build_alibi_softmax(loom_ctx *ctx, const loom_bench_workload *self,
                                           bool small, loom_bench_graph *b) {
  (void)self;
  return build_alibi(ctx, small, false, b);
}

loom_status loom_bench_build_alibi_softmax_bwd(loom_ctx *ctx, const loom_bench_workload *self,
                                               bool small, loom_bench_graph *b) {
  (void)self;
  return build_alibi(ctx, small, true, b);
}

/* GeGLU, forward + backward: y = gelu_tanh(u[:, :C]) * u[:, C:], du for dy. */
loom_status loom_bench_build_geglu_bwd(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                       loom_bench_graph *b) {
  (void)self;
  int64_t r = small ? 1024 : 16384, c = small ? 256 : 1024, us[2] = {r, 2 * c}, ys[2] = {r, c};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int32_t u = loom_bench_input(b, "u", LOOM_DTYPE_F32, 2, us, LOOM_BENCH_FILL_UNIFORM, false);
  shape2(b, "u ", r, 2 * c);
  b->min_bytes = 5 * r * c * 4; /* u (2C) and dy in, du (2C) out */
  int64_t s0[2] = {0, 0}, e0[2] = {r, c}, s1[2] = {0, c}, e1[2] = {r, 2 * c};
  loom_attr_value a[LOOM_MAX_ATTRS];
  loom_attrs_default(LOOM_OP_GELU, a);
  LOOM_ATTRV_I(a, gelu, approximate) = 1;
  int32_t gate = lb_slice(g, u, s0, e0);
  int32_t y = lb_mul(g, lb_op(g, LOOM_OP_GELU, 1, &gate, a), lb_slice(g, u, s1, e1));
  int32_t dy = loom_bench_input(b, "dy", LOOM_DTYPE_F32, 2, ys, LOOM_BENCH_FILL_UNIFORM, false);
  return backward(b, y, dy, 1);
}

/* LayerScale + stochastic depth on a residual branch, forward + backward:
 * y = x + f * gamma * keep[b] / p_keep with keep[b] = (u[b] < p_keep) per
 * sample; gradients for the branch f and the scale gamma. */
loom_status loom_bench_build_layerscale_droppath(loom_ctx *ctx, const loom_bench_workload *self,
                                                 bool small, loom_bench_graph *b) {
  (void)self;
  int64_t bs = small ? 4 : 32, t = small ? 64 : 256, c = small ? 128 : 768;
  int64_t xs[3] = {bs, t, c}, us[3] = {bs, 1, 1};
  LOOM_TRY(loom_graph_new(ctx, &b->g));
  loom_graph *g = b->g;
  int32_t f = loom_bench_input(b, "f", LOOM_DTYPE_F32, 3, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t gamma = loom_bench_input(b, "gamma", LOOM_DTYPE_F32, 1, &c, LOOM_BENCH_FILL_SMALL, true);
  int32_t x = loom_bench_input(b, "x", LOOM_DTYPE_F32, 3, xs, LOOM_BENCH_FILL_UNIFORM, false);
  int32_t u = loom_bench_input(b, "u", LOOM_DTYPE_F32, 3, us, LOOM_BENCH_FILL_POSITIVE, false);
  snprintf(b->shape, sizeof b->shape, "[%lld, %lld, %lld]", (long long)bs, (long long)t,
           (long long)c);
  b->min_bytes = 3 * bs * t * c * 4; /* f and dy in, df out */
  int32_t keep = lb_cast(g, lb_binary(g, LOOM_OP_LT, u, scalar(g, DROP_PATH_KEEP)), LOOM_DTYPE_F32);
  int32_t scale = lb_mul(g, keep, scalar(g, 1.0 / DROP_PATH_KEEP));
  int32_t y = lb_add(g, x, lb_mul(g, lb_mul(g, f, gamma), scale));
  int32_t dy = loom_bench_input(b, "dy", LOOM_DTYPE_F32, 3, xs, LOOM_BENCH_FILL_UNIFORM, false);
  return backward(b, y, dy, 2);
}
