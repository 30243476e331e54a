/*
 * RNN, GRU and LSTM unrolled over the (static) sequence: per step and
 * direction, GEMMs of the input and the hidden state against the gate
 * weights, then the gates' element-wise maths. Default activations (or
 * Sigmoid/Tanh/Relu named explicitly), forward, reverse and
 * bidirectional, both layouts, optional biases, initial states and
 * peepholes; sequence_lens only when every length is the full sequence.
 */
#include "onnx/import_internal.h"

#include <string.h>

#define G (cv->g)

typedef enum { K_RNN, K_GRU, K_LSTM } rnn_kind;

/* columns [a, b) of m [r, c] */
static int32_t cols(onnx_cv *cv, int32_t m, int64_t r, int64_t a, int64_t b) {
  return lb_slice(G, m, (int64_t[]){0, a}, (int64_t[]){r, b});
}

static int32_t act(onnx_cv *cv, int which, int32_t x) {
  switch (which) {
  case 0: return lb_unary(G, LOOM_OP_SIGMOID, x);
  case 1: return lb_unary(G, LOOM_OP_TANH, x);
  default: return lb_unary(G, LOOM_OP_RELU, x);
  }
}

/* dir d's [rows, cols] slice of a [dirs, rows, cols] input i */
static int32_t per_dir(onnx_cv *cv, int32_t i, int64_t d) {
  const loom_type *t = cv_type(cv, i);
  int64_t s[3] = {d, 0, 0}, e[3] = {d + 1, t->shape[1], t->shape[2]};
  return lb_reshape(G, lb_slice(G, cv_in(cv, i), s, e), 2, (int64_t[]){t->shape[1], t->shape[2]});
}

static loom_status recurrent(onnx_cv *cv, rnn_kind kind) {
  const loom_type *tx = cv_type(cv, 0), *tw = cv_type(cv, 1);
  if (!loom_dtype_is_float(tx->dtype)) return cv_unsupported(cv, "a %s input", loom_dtype_name(tx->dtype));
  if (tx->rank != 3 || tw->rank != 3) return cv_invalid(cv, "X and W must have rank 3");
  int gates = kind == K_LSTM ? 4 : kind == K_GRU ? 3 : 1;
  int64_t hs = cv_attr_i(cv, "hidden_size", tw->shape[1] / gates);
  if (hs <= 0 || tw->shape[1] != gates * hs) return cv_invalid(cv, "hidden_size %lld", (long long)hs);
  if (cv_attr_has(cv, "clip")) return cv_unsupported(cv, "clip");
  if (cv_attr_has(cv, "activation_alpha") || cv_attr_has(cv, "activation_beta"))
    return cv_unsupported(cv, "activation_alpha/beta");
  if (cv_attr_i(cv, "input_forget", 0) != 0) return cv_unsupported(cv, "input_forget");
  const char *dir = cv_attr_s(cv, "direction", "forward");
  int n_dirs = strcmp(dir, "bidirectional") == 0 ? 2 : 1;
  bool reverse = strcmp(dir, "reverse") == 0;
  if (!reverse && n_dirs == 1 && strcmp(dir, "forward") != 0) return cv_invalid(cv, "direction '%s'", dir);
  if (tw->shape[0] != n_dirs) return cv_invalid(cv, "W has %lld directions", (long long)tw->shape[0]);
  /* activations: f (gates), g (candidate), h (LSTM output) per direction */
  int acts[2][3] = {{0, 1, 1}, {0, 1, 1}};
  if (kind == K_RNN) acts[0][0] = acts[1][0] = 1;
  const onnx_attr *aa = onnx_node_attr(cv->node, "activations");
  int per = kind == K_LSTM ? 3 : kind == K_GRU ? 2 : 1;
  if (aa) {
    if (aa->n_strings != (size_t)(per * n_dirs)) return cv_invalid(cv, "%zu activations", aa->n_strings);
    for (size_t k = 0; k < aa->n_strings; k++) {
      const onnx_bytes *s = &aa->strings[k];
      int w = s->n == 7 && !memcmp(s->p, "Sigmoid", 7) ? 0 : s->n == 4 && !memcmp(s->p, "Tanh", 4) ? 1
            : s->n == 4 && !memcmp(s->p, "Relu", 4) ? 2 : -1;
      if (w < 0) return cv_unsupported(cv, "activation '%.*s'", (int)s->n, (const char *)s->p);
      acts[k / per][k % per] = w;
    }
  }
  bool batch_first = cv_attr_i(cv, "layout", 0) != 0;
  int64_t seq = tx->shape[batch_first ? 1 : 0], batch = tx->shape[batch_first ? 0 : 1], in = tx->shape[2];
  if (seq > 4096) return cv_unsupported(cv, "a sequence of %lld steps", (long long)seq);
  if (cv_has(cv, 4)) {
    const loom_tensor *sl = cv_const(cv, 4);
    if (!sl) return cv_unsupported(cv, "sequence_lens not known at load time");
    for (int64_t b = 0; b < loom_tensor_numel(sl); b++)
      if (loom_load_i64(loom_tensor_dtype(sl), loom_tensor_data(sl), b) != seq)
        return cv_unsupported(cv, "sequence_lens shorter than the sequence");
  }
  bool lbr = kind == K_GRU && cv_attr_i(cv, "linear_before_reset", 0) != 0;
  int32_t x = cv_in(cv, 0);
  if (batch_first) x = lb_transpose(G, x, (int64_t[]){1, 0, 2});
  int32_t ys[2][4096], last_h[2], last_c[2];
  for (int d = 0; d < n_dirs; d++) {
    bool rev = reverse || d == 1;
    int32_t wt = lb_transpose_last2(G, per_dir(cv, 1, d)); /* [in, G*hs] */
    int32_t rt = lb_transpose_last2(G, per_dir(cv, 2, d)); /* [hs, G*hs] */
    int32_t wb = -1, rb = -1;
    if (cv_has(cv, 3)) {
      if (cv_type(cv, 3)->rank != 2 || cv_type(cv, 3)->shape[1] != 2 * gates * hs) return cv_invalid(cv, "B's shape");
      /* [1, 2*G*hs]: Wb then Rb */
      int32_t b = lb_slice(G, cv_in(cv, 3), (int64_t[]){d, 0}, (int64_t[]){d + 1, 2 * gates * hs});
      wb = cols(cv, b, 1, 0, gates * hs);
      rb = cols(cv, b, 1, gates * hs, 2 * gates * hs);
    }
    int32_t h = cv_has(cv, 5) ? per_dir(cv, 5, d) : lb_const(G, tx->dtype, 2, (int64_t[]){batch, hs}, 0);
    int32_t c = kind == K_LSTM && cv_has(cv, 6) ? per_dir(cv, 6, d) : lb_const(G, tx->dtype, 2, (int64_t[]){batch, hs}, 0);
    int32_t p[3] = {-1, -1, -1};
    if (kind == K_LSTM && cv_has(cv, 7)) {
      const loom_type *tp = cv_type(cv, 7);
      int32_t pv = lb_reshape(G, lb_slice(G, cv_in(cv, 7), (int64_t[]){d, 0}, (int64_t[]){d + 1, tp->shape[1]}), 2,
                              (int64_t[]){1, 3 * hs});
      for (int k = 0; k < 3; k++) p[k] = cols(cv, pv, 1, k * hs, (k + 1) * hs);
    }
    for (int64_t s = 0; s < seq; s++) {
      int64_t t = rev ? seq - 1 - s : s;
      int32_t xt = lb_reshape(G, lb_slice(G, x, (int64_t[]){t, 0, 0}, (int64_t[]){t + 1, batch, in}), 2,
                              (int64_t[]){batch, in});
      int32_t xg = lb_matmul(G, xt, wt, false, false); /* [batch, G*hs] */
      if (wb >= 0) xg = lb_add(G, xg, wb);
      int32_t hg = lb_matmul(G, h, rt, false, false);
      if (rb >= 0) hg = lb_add(G, hg, rb);
#define GATE(m, k) cols(cv, m, batch, (int64_t)(k) * hs, (int64_t)((k) + 1) * hs)
      if (kind == K_RNN) {
        h = act(cv, acts[d][0], lb_add(G, xg, hg));
      } else if (kind == K_GRU) {
        int32_t z = act(cv, acts[d][0], lb_add(G, GATE(xg, 0), GATE(hg, 0)));
        int32_t r = act(cv, acts[d][0], lb_add(G, GATE(xg, 1), GATE(hg, 1)));
        int32_t cand;
        if (lbr) {
          cand = lb_add(G, GATE(xg, 2), lb_mul(G, r, GATE(hg, 2)));
        } else {
          /* (r * h) @ Rh^T + Rbh */
          int32_t rh = lb_matmul(G, lb_mul(G, r, h), cols(cv, rt, hs, 2 * hs, 3 * hs), false, false);
          if (rb >= 0) rh = lb_add(G, rh, cols(cv, rb, 1, 2 * hs, 3 * hs));
          cand = lb_add(G, GATE(xg, 2), rh);
        }
        int32_t hh = act(cv, acts[d][1], cand);
        int32_t one = lb_scalar_like(G, z, 1);
        h = lb_add(G, lb_mul(G, lb_sub(G, one, z), hh), lb_mul(G, z, h));
      } else {
        int32_t gi = lb_add(G, GATE(xg, 0), GATE(hg, 0)), go = lb_add(G, GATE(xg, 1), GATE(hg, 1));
        int32_t gf = lb_add(G, GATE(xg, 2), GATE(hg, 2)), gc = lb_add(G, GATE(xg, 3), GATE(hg, 3));
        if (p[0] >= 0) {
          gi = lb_add(G, gi, lb_mul(G, p[0], c));
          gf = lb_add(G, gf, lb_mul(G, p[2], c));
        }
        int32_t i_ = act(cv, acts[d][0], gi), f_ = act(cv, acts[d][0], gf), cc = act(cv, acts[d][1], gc);
        c = lb_add(G, lb_mul(G, f_, c), lb_mul(G, i_, cc));
        if (p[1] >= 0) go = lb_add(G, go, lb_mul(G, p[1], c));
        int32_t o_ = act(cv, acts[d][0], go);
        h = lb_mul(G, o_, act(cv, acts[d][2], c));
      }
#undef GATE
      ys[d][t] = lb_reshape(G, h, 3, (int64_t[]){1, batch, hs});
    }
    last_h[d] = lb_reshape(G, h, 3, (int64_t[]){1, batch, hs});
    last_c[d] = lb_reshape(G, c, 3, (int64_t[]){1, batch, hs});
  }
  /* Y [seq, dirs, batch, hs] (layout 1: [batch, seq, dirs, hs]) */
  int32_t per_dir_y[2];
  for (int d = 0; d < n_dirs; d++) {
    int32_t y = seq == 1 ? ys[d][0] : lb_concat(G, (int32_t)seq, ys[d], 0); /* [seq, batch, hs] */
    per_dir_y[d] = lb_reshape(G, y, 4, (int64_t[]){seq, 1, batch, hs});
  }
  int32_t y = n_dirs == 1 ? per_dir_y[0] : lb_concat(G, 2, per_dir_y, 1);
  int32_t yh = n_dirs == 1 ? last_h[0] : lb_concat(G, 2, last_h, 0);
  int32_t yc = n_dirs == 1 ? last_c[0] : lb_concat(G, 2, last_c, 0);
  if (batch_first) {
    y = lb_transpose(G, y, (int64_t[]){2, 0, 1, 3});
    yh = lb_transpose(G, yh, (int64_t[]){1, 0, 2});
    yc = lb_transpose(G, yc, (int64_t[]){1, 0, 2});
  }
  cv_out(cv, 0, y);
  cv_out(cv, 1, yh);
  if (kind == K_LSTM) cv_out(cv, 2, yc);
  return LOOM_STATUS_OK;
}

loom_status onnx_cv_rnn(onnx_cv *cv);
loom_status onnx_cv_rnn(onnx_cv *cv) { return recurrent(cv, K_RNN); }
loom_status onnx_cv_gru(onnx_cv *cv);
loom_status onnx_cv_gru(onnx_cv *cv) { return recurrent(cv, K_GRU); }
loom_status onnx_cv_lstm(onnx_cv *cv);
loom_status onnx_cv_lstm(onnx_cv *cv) { return recurrent(cv, K_LSTM); }
