/*
 * Held-out graphs written in the text IR, as a user writes a model file
 * (issue 13: graphs nobody tuned for, tenth session). Each is a template
 * whose sizes ($NAME) are set for --size full or small, parsed by
 * loom_graph_parse like any .loom file; a backward workload states its
 * objective (sum(y * dy) with dy an input) as its first output and lists
 * the inputs it differentiates, and the bench builds the backward as for
 * every other workload. Inputs are filled by dtype: integer ones as labels
 * in [0, classes), params like initialised weights, the rest uniform in
 * [-1, 1). The peers (bench/peers) write the same math by hand.
 */
#include "workloads.h"

#include "ir/dtype.h"
#include "ir/graph.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct loom_bench_heldout {
  const char *full, *small; /* "NAME=VALUE ..." */
  const char *classes;      /* the size variable label inputs index, or NULL */
  int32_t n_wrt;            /* 0: forward only */
  int32_t wrt[16];
  const char *text;
};
typedef struct loom_bench_heldout heldout_spec;

/* The value of $name in "A=1 B=2", or -1. */
static long long size_of(const char *sizes, const char *name, size_t len) {
  for (const char *p = sizes; *p;) {
    while (*p == ' ') p++;
    const char *eq = strchr(p, '=');
    if (!eq) break;
    if ((size_t)(eq - p) == len && strncmp(p, name, len) == 0) return atoll(eq + 1);
    p = strchr(eq, ' ');
    if (!p) break;
  }
  return -1;
}

/* The template with every $NAME replaced by its size (malloc'd). */
static char *instantiate(loom_ctx *ctx, const char *text, const char *sizes) {
  size_t cap = strlen(text) * 2 + 64, n = 0;
  char *out = loom_malloc(ctx, cap);
  for (const char *p = text; out && *p;) {
    if (n + 32 >= cap) {
      char *bigger = realloc(out, cap *= 2);
      if (!bigger) {
        free(out);
        return NULL;
      }
      out = bigger;
    }
    if (*p != '$') {
      out[n++] = *p++;
      continue;
    }
    size_t len = 0;
    while (isalnum((unsigned char)p[1 + len])) len++;
    long long v = size_of(sizes, p + 1, len);
    if (v < 0) { /* a bug in a template */
      free(out);
      loom_error(ctx, LOOM_STATUS_INTERNAL, "bench: held-out size $%.*s is not set", (int)len, p + 1);
      return NULL;
    }
    n += (size_t)snprintf(out + n, cap - n, "%lld", v);
    p += 1 + len;
  }
  if (out) out[n] = 0;
  return out;
}

loom_status loom_bench_build_heldout(loom_ctx *ctx, const loom_bench_workload *self, bool small,
                                 loom_bench_graph *b) {
  const heldout_spec *s = self->arg;
  const char *sizes = small ? s->small : s->full;
  char *text = instantiate(ctx, s->text, sizes);
  if (!text) return LOOM_STATUS_INTERNAL; /* a bad template, or no memory: the error says */
  loom_status st = loom_graph_parse(ctx, text, &b->g);
  free(text);
  if (st) return st;
  if (s->classes) b->classes = size_of(sizes, s->classes, strlen(s->classes));
  snprintf(b->shape, sizeof b->shape, "%s", sizes);
  if (s->n_wrt > 0) LOOM_TRY(loom_bench_make_backward(b, s->n_wrt, s->wrt));
  LOOM_TRY(loom_bench_fill_by_kind(ctx, b));
  b->min_bytes = loom_bench_io_bytes(b->g);
  return loom_bench_count_flops(b);
}

/* ---- the graphs ----------------------------------------------------------- */

/* Rotary embedding backward: rotate_half of the computed dy * sin. */
const heldout_spec loom_bench_heldout_rotary_bwd = {
    "T=4096 H=16 D=64 D2=32", "T=256 H=8 D=32 D2=16", NULL, 1, {0},
    "input %x : f32[$T, $H, $D]\n"
    "input %cos : f32[$T, 1, $D]\n"
    "input %sin : f32[$T, 1, $D]\n"
    "input %dy : f32[$T, $H, $D]\n"
    "%x1 = slice(%x, starts=[0, 0, 0], ends=[$T, $H, $D2])\n"
    "%x2 = slice(%x, starts=[0, 0, $D2], ends=[$T, $H, $D])\n"
    "%n2 = neg(%x2)\n"
    "%rot = concat(%n2, %x1, axis=-1)\n"
    "%a = mul(%x, %cos)\n"
    "%b = mul(%rot, %sin)\n"
    "%y = add(%a, %b)\n"
    "%yd = mul(%y, %dy)\n"
    "%obj = reduce_sum(%yd)\n"
    "output objective = %obj\n"};

/* Focal loss (gamma 2) on logits: -mean((1 - p_t)^2 log p_t), and dz. */
const heldout_spec loom_bench_heldout_focal = {
    "N=4096 K=8192", "N=256 K=1024", "K", 1, {0},
    "input %z : f32[$N, $K]\n"
    "input %t : i64[$N]\n"
    "%lp = log_softmax(%z, axis=-1)\n"
    "%col = iota(shape=[$N, $K], axis=1)\n"
    "%tt = reshape(%t, shape=[$N, 1])\n"
    "%hot = eq(%col, %tt)\n"
    "%zero = constant(value=0)\n"
    "%lpt_all = select(%hot, %lp, %zero)\n"
    "%lpt = reduce_sum(%lpt_all, axes=[1])\n"
    "%pt = exp(%lpt)\n"
    "%one = constant(value=1)\n"
    "%q = sub(%one, %pt)\n"
    "%w = mul(%q, %q)\n"
    "%f = mul(%w, %lpt)\n"
    "%s = reduce_mean(%f)\n"
    "%loss = neg(%s)\n"
    "output loss = %loss\n"};

/* Logit soft-capping (Gemma 2: 30 tanh(z / 30)) + cross-entropy + z-loss
 * 1e-4 * mean(logsumexp^2), and dz. */
const heldout_spec loom_bench_heldout_softcap = {
    "N=4096 K=8192", "N=256 K=1024", "K", 1, {0},
    "input %z : f32[$N, $K]\n"
    "input %t : i64[$N]\n"
    "%inv = constant(value=0.03333333333333333)\n"
    "%cap = constant(value=30)\n"
    "%zs = mul(%z, %inv)\n"
    "%th = tanh(%zs)\n"
    "%c = mul(%th, %cap)\n"
    "%m = reduce_max(%c, axes=[1], keepdims=true)\n"
    "%sh = sub(%c, %m)\n"
    "%e = exp(%sh)\n"
    "%se = reduce_sum(%e, axes=[1], keepdims=true)\n"
    "%lse0 = log(%se)\n"
    "%lse = add(%lse0, %m)\n"
    "%col = iota(shape=[$N, $K], axis=1)\n"
    "%tt = reshape(%t, shape=[$N, 1])\n"
    "%hot = eq(%col, %tt)\n"
    "%zero = constant(value=0)\n"
    "%ct_all = select(%hot, %c, %zero)\n"
    "%ct = reduce_sum(%ct_all, axes=[1], keepdims=true)\n"
    "%ce = sub(%lse, %ct)\n"
    "%ce_mean = reduce_mean(%ce)\n"
    "%lse2 = mul(%lse, %lse)\n"
    "%z2 = reduce_mean(%lse2)\n"
    "%zw = constant(value=0.0001)\n"
    "%zl = mul(%z2, %zw)\n"
    "%loss = add(%ce_mean, %zl)\n"
    "output loss = %loss\n"};

/* Mixtral-style top-2 routing over 8 experts: gates renormalised over the
 * two largest probabilities, and the load-balancing loss E * sum_e(f_e *
 * P_e) (f: the fraction of tokens routed to e, P: its mean probability);
 * objective sum(gates * dg) + 0.01 * lb, differentiated to the logits. */
const heldout_spec loom_bench_heldout_moe_top2 = {
    "T=262144 E=8", "T=8192 E=8", NULL, 1, {0},
    "input %logits : f32[$T, $E]\n"
    "input %dg : f32[$T, $E]\n"
    "%p = softmax(%logits, axis=-1)\n"
    "%m1 = reduce_max(%p, axes=[1], keepdims=true)\n"
    "%top1 = eq(%p, %m1)\n"
    "%ninf = constant(value=-inf)\n"
    "%p2 = select(%top1, %ninf, %p)\n"
    "%m2 = reduce_max(%p2, axes=[1], keepdims=true)\n"
    "%top2 = eq(%p2, %m2)\n"
    "%f1 = cast(%top1, dtype=f32)\n"
    "%f2 = cast(%top2, dtype=f32)\n"
    "%sel = add(%f1, %f2)\n"
    "%kept = mul(%p, %sel)\n"
    "%den = reduce_sum(%kept, axes=[1], keepdims=true)\n"
    "%gates = div(%kept, %den)\n"
    "%frac = reduce_mean(%sel, axes=[0])\n"
    "%pmean = reduce_mean(%p, axes=[0])\n"
    "%fp = mul(%frac, %pmean)\n"
    "%lb0 = reduce_sum(%fp)\n"
    "%lbw = constant(value=0.04)\n" /* E / 2 * 0.01 */
    "%lb = mul(%lb0, %lbw)\n"
    "%gd = mul(%gates, %dg)\n"
    "%obj0 = reduce_sum(%gd)\n"
    "%obj = add(%obj0, %lb)\n"
    "output objective = %obj\n"};

/* Squared-ReLU MLP (Primer): relu(x W1)^2 W2, forward + backward. */
const heldout_spec loom_bench_heldout_sqrelu = {
    "N=4096 D=512 F=2048", "N=256 D=64 F=256", NULL, 3, {0, 1, 2},
    "input %x : f32[$N, $D]\n"
    "param %w1 : f32[$D, $F]\n"
    "param %w2 : f32[$F, $D]\n"
    "input %dy : f32[$N, $D]\n"
    "%h = matmul(%x, %w1)\n"
    "%r = relu(%h)\n"
    "%r2 = mul(%r, %r)\n"
    "%y = matmul(%r2, %w2)\n"
    "%yd = mul(%y, %dy)\n"
    "%obj = reduce_sum(%yd)\n"
    "output objective = %obj\n"};

/* A LoRA adapter beside a frozen weight: y = x W + s (x A) B, rank R,
 * forward + backward to x and the adapter. Its weight gradients are thin:
 * dA = x^T (s dy B^T) is [D, R] with k = N, x read transposed at a
 * row stride of D floats (4 KiB at D = 1024: the GEMM's restride rule). */
const heldout_spec loom_bench_heldout_lora = {
    "N=4096 D=1024 R=16", "N=64 D=32 R=4", NULL, 3, {0, 2, 3},
    "input %x : f32[$N, $D]\n"
    "input %w : f32[$D, $D]\n"
    "param %a : f32[$D, $R]\n"
    "param %b : f32[$R, $D]\n"
    "input %dy : f32[$N, $D]\n"
    "%base = matmul(%x, %w)\n"
    "%xa = matmul(%x, %a)\n"
    "%xab = matmul(%xa, %b)\n"
    "%scale = constant(value=2.0)\n" /* alpha / R */
    "%lo = mul(%xab, %scale)\n"
    "%y = add(%base, %lo)\n"
    "%yd = mul(%y, %dy)\n"
    "%obj = reduce_sum(%yd)\n"
    "output objective = %obj\n"};

/* A ConvNeXt block's tail, channels last: x + gamma * (GELU(LayerNorm(x)
 * W1 + b1) W2 + b2), forward. */
const heldout_spec loom_bench_heldout_convnext = {
    "B=8 H=56 W=56 C=96 F=384", "B=2 H=14 W=14 C=32 F=128", NULL, 0, {0},
    "input %x : f32[$B, $H, $W, $C]\n"
    "param %g : f32[$C]\n"
    "param %bt : f32[$C]\n"
    "param %w1 : f32[$C, $F]\n"
    "param %b1 : f32[$F]\n"
    "param %w2 : f32[$F, $C]\n"
    "param %b2 : f32[$C]\n"
    "param %gamma : f32[$C]\n"
    "%n = layer_norm(%x, %g, %bt, axis=-1, eps=1e-06)\n"
    "%h = linear(%n, %w1, %b1)\n"
    "%a = gelu(%h)\n"
    "%o = linear(%a, %w2, %b2)\n"
    "%s = mul(%o, %gamma)\n"
    "%y = add(%x, %s)\n"
    "output y = %y\n"};

/* A ResNet basic block's training step, channels first: two 3 x 3 convs,
 * each followed by batch normalisation on the batch's own statistics
 * (written out as a user writes it without a batch_norm op), a ReLU
 * between, the residual and a ReLU after; forward + backward to x and
 * every weight (conv_transpose and conv_grad_weight). */
const heldout_spec loom_bench_heldout_resnet = {
    "B=8 C=64 H=32", "B=2 C=8 H=6", NULL, 7, {0, 1, 2, 3, 4, 5, 6},
    "input %x : f32[$B, $C, $H, $H]\n"
    "param %w1 : f32[$C, $C, 3, 3]\n"
    "param %g1 : f32[1, $C, 1, 1]\n"
    "param %b1 : f32[1, $C, 1, 1]\n"
    "param %w2 : f32[$C, $C, 3, 3]\n"
    "param %g2 : f32[1, $C, 1, 1]\n"
    "param %b2 : f32[1, $C, 1, 1]\n"
    "input %dy : f32[$B, $C, $H, $H]\n"
    "%eps = constant(value=1e-05)\n"
    "%c1 = conv(%x, %w1, pads_lo=[1, 1], pads_hi=[1, 1])\n"
    "%m1 = reduce_mean(%c1, axes=[0, 2, 3], keepdims=true)\n"
    "%d1 = sub(%c1, %m1)\n"
    "%s1 = mul(%d1, %d1)\n"
    "%v1 = reduce_mean(%s1, axes=[0, 2, 3], keepdims=true)\n"
    "%ve1 = add(%v1, %eps)\n"
    "%r1 = rsqrt(%ve1)\n"
    "%n1 = mul(%d1, %r1)\n"
    "%a1 = mul(%n1, %g1)\n"
    "%bn1 = add(%a1, %b1)\n"
    "%y1 = relu(%bn1)\n"
    "%c2 = conv(%y1, %w2, pads_lo=[1, 1], pads_hi=[1, 1])\n"
    "%m2 = reduce_mean(%c2, axes=[0, 2, 3], keepdims=true)\n"
    "%d2 = sub(%c2, %m2)\n"
    "%s2 = mul(%d2, %d2)\n"
    "%v2 = reduce_mean(%s2, axes=[0, 2, 3], keepdims=true)\n"
    "%ve2 = add(%v2, %eps)\n"
    "%r2 = rsqrt(%ve2)\n"
    "%n2 = mul(%d2, %r2)\n"
    "%a2 = mul(%n2, %g2)\n"
    "%bn2 = add(%a2, %b2)\n"
    "%z = add(%bn2, %x)\n"
    "%y = relu(%z)\n"
    "%yd = mul(%y, %dy)\n"
    "%obj = reduce_sum(%yd)\n"
    "output objective = %obj\n"};

/* A Llama-style block, forward + backward to x and every weight: RMSNorm,
 * separate Q/K/V projections, rotary embeddings written as a user writes
 * them (slices, neg, concat; cos and sin broadcast over batch and heads),
 * causal attention, a residual, RMSNorm and a SwiGLU MLP. */
const heldout_spec loom_bench_heldout_llama = {
    "B=2 T=256 D=512 H=8 E=64 E2=32 F=1408", "B=1 T=8 D=16 H=2 E=8 E2=4 F=24", NULL, 10,
    {0, 3, 4, 5, 6, 7, 8, 9, 10, 11},
    "input %x : f32[$B, $T, $D]\n"
    "input %cos : f32[$T, 1, $E]\n"
    "input %sin : f32[$T, 1, $E]\n"
    "param %g1 : f32[$D]\n"
    "param %wq : f32[$D, $D]\n"
    "param %wk : f32[$D, $D]\n"
    "param %wv : f32[$D, $D]\n"
    "param %wo : f32[$D, $D]\n"
    "param %g2 : f32[$D]\n"
    "param %wg : f32[$D, $F]\n"
    "param %wu : f32[$D, $F]\n"
    "param %wd : f32[$F, $D]\n"
    "input %dy : f32[$B, $T, $D]\n"
    "%n1 = rms_norm(%x, %g1, eps=1e-06)\n"
    "%q = linear(%n1, %wq)\n"
    "%k = linear(%n1, %wk)\n"
    "%v = linear(%n1, %wv)\n"
    "%q4 = reshape(%q, shape=[$B, $T, $H, $E])\n"
    "%k4 = reshape(%k, shape=[$B, $T, $H, $E])\n"
    "%v4 = reshape(%v, shape=[$B, $T, $H, $E])\n"
    "%q1 = slice(%q4, starts=[0, 0, 0, 0], ends=[$B, $T, $H, $E2])\n"
    "%q2 = slice(%q4, starts=[0, 0, 0, $E2], ends=[$B, $T, $H, $E])\n"
    "%qn = neg(%q2)\n"
    "%qr = concat(%qn, %q1, axis=-1)\n"
    "%qc = mul(%q4, %cos)\n"
    "%qs = mul(%qr, %sin)\n"
    "%qo = add(%qc, %qs)\n"
    "%k1 = slice(%k4, starts=[0, 0, 0, 0], ends=[$B, $T, $H, $E2])\n"
    "%k2 = slice(%k4, starts=[0, 0, 0, $E2], ends=[$B, $T, $H, $E])\n"
    "%kn = neg(%k2)\n"
    "%kr = concat(%kn, %k1, axis=-1)\n"
    "%kc = mul(%k4, %cos)\n"
    "%ks = mul(%kr, %sin)\n"
    "%ko = add(%kc, %ks)\n"
    "%qh = transpose(%qo, perm=[0, 2, 1, 3])\n"
    "%kh = transpose(%ko, perm=[0, 2, 1, 3])\n"
    "%vh = transpose(%v4, perm=[0, 2, 1, 3])\n"
    "%att = attention(%qh, %kh, %vh, causal=true)\n"
    "%at = transpose(%att, perm=[0, 2, 1, 3])\n"
    "%am = reshape(%at, shape=[$B, $T, $D])\n"
    "%o = linear(%am, %wo)\n"
    "%h1 = add(%x, %o)\n"
    "%n2 = rms_norm(%h1, %g2, eps=1e-06)\n"
    "%gt = linear(%n2, %wg)\n"
    "%up = linear(%n2, %wu)\n"
    "%sg = silu(%gt)\n"
    "%m = mul(%sg, %up)\n"
    "%dn = linear(%m, %wd)\n"
    "%y = add(%h1, %dn)\n"
    "%yd = mul(%y, %dy)\n"
    "%obj = reduce_sum(%yd)\n"
    "output objective = %obj\n"};

/* Grouped-query attention (Llama-2-70B's 8 query heads per key head,
 * here H query heads on G key/value heads, R = H / G): K and V projected
 * to G heads and broadcast over the R query heads of each, causal
 * attention, a residual; forward + backward to x and the projections.
 * The backward sums the key and value gradients over each group's R
 * heads: a short middle axis (passes/short_reduce.c). */
const heldout_spec loom_bench_heldout_gqa = {
    "B=4 T=256 D=512 H=8 G=2 R=4 E=64 K=128", "B=1 T=8 D=16 H=4 G=2 R=2 E=4 K=8", NULL, 5,
    {0, 1, 2, 3, 4},
    "input %x : f32[$B, $T, $D]\n"
    "param %wq : f32[$D, $D]\n"
    "param %wk : f32[$D, $K]\n"
    "param %wv : f32[$D, $K]\n"
    "param %wo : f32[$D, $D]\n"
    "input %dy : f32[$B, $T, $D]\n"
    "%q = linear(%x, %wq)\n"
    "%k = linear(%x, %wk)\n"
    "%v = linear(%x, %wv)\n"
    "%q4 = reshape(%q, shape=[$B, $T, $H, $E])\n"
    "%k5 = reshape(%k, shape=[$B, $T, $G, 1, $E])\n"
    "%v5 = reshape(%v, shape=[$B, $T, $G, 1, $E])\n"
    "%kb = broadcast_to(%k5, shape=[$B, $T, $G, $R, $E])\n"
    "%vb = broadcast_to(%v5, shape=[$B, $T, $G, $R, $E])\n"
    "%k4 = reshape(%kb, shape=[$B, $T, $H, $E])\n"
    "%v4 = reshape(%vb, shape=[$B, $T, $H, $E])\n"
    "%qh = transpose(%q4, perm=[0, 2, 1, 3])\n"
    "%kh = transpose(%k4, perm=[0, 2, 1, 3])\n"
    "%vh = transpose(%v4, perm=[0, 2, 1, 3])\n"
    "%att = attention(%qh, %kh, %vh, causal=true)\n"
    "%at = transpose(%att, perm=[0, 2, 1, 3])\n"
    "%am = reshape(%at, shape=[$B, $T, $D])\n"
    "%o = linear(%am, %wo)\n"
    "%y = add(%x, %o)\n"
    "%yd = mul(%y, %dy)\n"
    "%obj = reduce_sum(%yd)\n"
    "output objective = %obj\n"};

/* An MLP-Mixer block, forward + backward to x and every weight: a token-
 * mixing MLP across the P patches (LayerNorm, a transpose to [B, C, P],
 * GELU MLP over P, the transpose back, a residual), then a channel MLP
 * with its own LayerNorm and residual. The transposes meet LayerNorm's
 * rows: the cost model's strided bytes (docs/FUSION.md). */
const heldout_spec loom_bench_heldout_mixer = {
    "B=16 P=196 C=256 S=128 F=1024", "B=2 P=8 C=16 S=8 F=32", NULL, 13,
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
    "input %x : f32[$B, $P, $C]\n"
    "param %g1 : f32[$C]\n"
    "param %be1 : f32[$C]\n"
    "param %w1 : f32[$P, $S]\n"
    "param %b1 : f32[$S]\n"
    "param %w2 : f32[$S, $P]\n"
    "param %b2 : f32[$P]\n"
    "param %g2 : f32[$C]\n"
    "param %be2 : f32[$C]\n"
    "param %w3 : f32[$C, $F]\n"
    "param %b3 : f32[$F]\n"
    "param %w4 : f32[$F, $C]\n"
    "param %b4 : f32[$C]\n"
    "input %dy : f32[$B, $P, $C]\n"
    "%n1 = layer_norm(%x, %g1, %be1, axis=-1, eps=1e-05)\n"
    "%t = transpose(%n1, perm=[0, 2, 1])\n"
    "%h = linear(%t, %w1, %b1)\n"
    "%a = gelu(%h)\n"
    "%u = linear(%a, %w2, %b2)\n"
    "%ut = transpose(%u, perm=[0, 2, 1])\n"
    "%x1 = add(%x, %ut)\n"
    "%n2 = layer_norm(%x1, %g2, %be2, axis=-1, eps=1e-05)\n"
    "%h2 = linear(%n2, %w3, %b3)\n"
    "%a2 = gelu(%h2)\n"
    "%o = linear(%a2, %w4, %b4)\n"
    "%y = add(%x1, %o)\n"
    "%yd = mul(%y, %dy)\n"
    "%obj = reduce_sum(%yd)\n"
    "output objective = %obj\n"};

/* A T5-style attention sublayer, forward + backward to x, the projections
 * and the learned relative-position bias [H, T, T] (added to the scaled
 * scores: flash attention's bias, whose gradient the backward sums over
 * the batch), with a residual. */
const heldout_spec loom_bench_heldout_relbias = {
    "B=2 T=256 D=512 H=8 E=64", "B=1 T=8 D=16 H=2 E=8", NULL, 6, {0, 1, 2, 3, 4, 5},
    "input %x : f32[$B, $T, $D]\n"
    "param %wq : f32[$D, $D]\n"
    "param %wk : f32[$D, $D]\n"
    "param %wv : f32[$D, $D]\n"
    "param %wo : f32[$D, $D]\n"
    "param %rb : f32[$H, $T, $T]\n"
    "input %dy : f32[$B, $T, $D]\n"
    "%q = linear(%x, %wq)\n"
    "%k = linear(%x, %wk)\n"
    "%v = linear(%x, %wv)\n"
    "%q4 = reshape(%q, shape=[$B, $T, $H, $E])\n"
    "%k4 = reshape(%k, shape=[$B, $T, $H, $E])\n"
    "%v4 = reshape(%v, shape=[$B, $T, $H, $E])\n"
    "%qh = transpose(%q4, perm=[0, 2, 1, 3])\n"
    "%kh = transpose(%k4, perm=[0, 2, 1, 3])\n"
    "%vh = transpose(%v4, perm=[0, 2, 1, 3])\n"
    "%att = attention(%qh, %kh, %vh, %rb, bias=true)\n"
    "%at = transpose(%att, perm=[0, 2, 1, 3])\n"
    "%am = reshape(%at, shape=[$B, $T, $D])\n"
    "%o = linear(%am, %wo)\n"
    "%y = add(%x, %o)\n"
    "%yd = mul(%y, %dy)\n"
    "%obj = reduce_sum(%yd)\n"
    "output objective = %obj\n"};
