/*
 * The view fold (attention.h): the layout ops between flash attention and
 * the tensors its operands come from become strided operands
 * (ops/attention_views.h), so q, k, v are read in place from a fused QKV
 * projection and o is written in the layout the output projection reads.
 *
 * An operand's layout chain is walked back from the operand as a strided
 * view over the current value's row-major elements: a reshape changes
 * nothing (same elements, same order); a transpose, a slice or a
 * broadcast is applied to the view's multi-index form, which exists when
 * each of the view's dims steps within one dim of the value without
 * carrying into the next (a dim that would is split first). The walk stops
 * at any other op; the final view must have contiguous rows (W), one stride
 * between rows (S) and at most three leading dims. The forward's o is
 * walked forward through transposes and reshapes that only it reads, the
 * same way (o is then a transpose and reshape of their last value).
 */
#include "passes/attention.h"

#include "ir/build.h"
#include "ops/attention_bias.h"
#include "ops/attention_views.h"
#include "ops/op.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VMAX 16 /* view dims: splits may add some to a value's rank */

/* A strided view over a value's row-major elements. */
typedef struct sview {
  int32_t rank;
  int64_t shape[VMAX], stride[VMAX], offset;
} sview;

/* The view's dims in the multi-index form of a value of shape xs[xr]: view
 * dim k steps value dim dim[k] by mult[k] (dim -1: a size-1 or stride-0
 * dim, which moves nothing), the first element is at multi-index off. */
typedef struct mview {
  int32_t dim[VMAX];
  int64_t mult[VMAX], off[LOOM_MAX_RANK];
} mview;

static void row_major(int32_t r, const int64_t *shape, int64_t *cs) {
  int64_t s = 1;
  for (int32_t d = r - 1; d >= 0; d--) {
    cs[d] = s;
    s *= shape[d];
  }
}

/* Splits view dim k (size n = outer * inner) into (outer, inner). */
static bool split_dim(sview *v, int32_t k, int64_t inner) {
  if (v->rank >= VMAX) return false;
  memmove(&v->shape[k + 1], &v->shape[k], sizeof(int64_t) * (size_t)(v->rank - k));
  memmove(&v->stride[k + 1], &v->stride[k], sizeof(int64_t) * (size_t)(v->rank - k));
  v->rank++;
  v->shape[k] = v->shape[k + 1] / inner;
  v->stride[k] = v->stride[k + 1] * inner;
  v->shape[k + 1] = inner;
  return true;
}

/* v in multi-index form over shape xs (splitting dims that carry); false
 * if it has none. */
static bool to_multi(sview *v, int32_t xr, const int64_t *xs, mview *m) {
  int64_t cs[LOOM_MAX_RANK], used[LOOM_MAX_RANK];
  row_major(xr, xs, cs);
  int64_t rest = v->offset;
  for (int32_t d = 0; d < xr; d++) {
    m->off[d] = xs[d] ? rest / cs[d] % xs[d] : 0;
    used[d] = m->off[d];
  }
  if (xr > 0 && xs[0] && rest / cs[0] >= xs[0]) return false;
  for (int32_t k = 0; k < v->rank; k++) {
    int64_t n = v->shape[k], s = v->stride[k];
    m->dim[k] = -1;
    m->mult[k] = 0;
    if (n == 1 || s == 0) continue;
    int32_t d = xr - 1;
    while (d > 0 && cs[d - 1] <= s) d--;
    while (d < xr - 1 && xs[d] == 1) d++; /* a size-1 dim has its inner neighbour's stride */
    if (s % cs[d]) return false;
    int64_t mult = s / cs[d];
    if (used[d] + (n - 1) * mult < xs[d]) {
      m->dim[k] = d;
      m->mult[k] = mult;
      used[d] += (n - 1) * mult;
      continue;
    }
    /* steps past dim d: split into the steps that stay in it and the rest */
    int64_t inner = xs[d] % mult == 0 ? xs[d] / mult : 0;
    if (d == 0 || used[d] != 0 || inner <= 1 || n % inner) return false;
    if (!split_dim(v, k, inner)) return false;
    k--; /* the outer part first, then the inner one */
  }
  return true;
}

/* m back to a view over the row-major elements of shape us[ur]; dim[k]
 * and off are dims of that value now. */
static void from_multi(sview *v, const mview *m, int32_t ur, const int64_t *us) {
  int64_t cs[LOOM_MAX_RANK];
  row_major(ur, us, cs);
  v->offset = 0;
  for (int32_t d = 0; d < ur; d++) v->offset += m->off[d] * cs[d];
  for (int32_t k = 0; k < v->rank; k++) v->stride[k] = m->dim[k] >= 0 ? m->mult[k] * cs[m->dim[k]] : 0;
}

/* The view of x = op(u) over x, as a view over u; false where that is not
 * a strided view (or op is not a layout op it knows). */
static bool through(const loom_graph *g, const loom_node *n, sview *v) {
  const loom_type *x = loom_value_type(g, n->out[0]), *u = loom_value_type(g, n->in[0]);
  if (n->n_in != 1 || n->n_out != 1) return false;
  if (n->op == LOOM_OP_RESHAPE) return true;
  if (n->op != LOOM_OP_TRANSPOSE && n->op != LOOM_OP_SLICE && n->op != LOOM_OP_BROADCAST_TO)
    return false;
  mview m, mu;
  if (!to_multi(v, x->rank, x->shape, &m)) return false;
  mu = m;
  memset(mu.off, 0, sizeof mu.off);
  if (n->op == LOOM_OP_TRANSPOSE) { /* x dim d is u dim perm[d] */
    const loom_ints *perm = &LOOM_ATTR_INTS(n, transpose, perm);
    for (int32_t d = 0; d < x->rank; d++) mu.off[perm->v[d]] = m.off[d];
    for (int32_t k = 0; k < v->rank; k++)
      if (m.dim[k] >= 0) mu.dim[k] = (int32_t)perm->v[m.dim[k]];
  } else if (n->op == LOOM_OP_SLICE) {
    const loom_ints *st = &LOOM_ATTR_INTS(n, slice, starts);
    for (int32_t d = 0; d < x->rank; d++) mu.off[d] = m.off[d] + st->v[d];
  } else { /* broadcast: u's dims align right; its size-1 dims stay put */
    int32_t lead = x->rank - u->rank;
    for (int32_t d = lead; d < x->rank; d++)
      mu.off[d - lead] = u->shape[d - lead] == 1 ? 0 : m.off[d];
    for (int32_t k = 0; k < v->rank; k++) {
      int32_t d = m.dim[k];
      bool moves = d >= lead && u->shape[d - lead] != 1;
      mu.dim[k] = moves ? d - lead : -1;
      if (!moves) mu.mult[k] = 0;
    }
  }
  from_multi(v, &mu, u->rank, u->shape);
  return true;
}

/* The contiguous view of a value of type t over itself. */
static sview whole(const loom_type *t) {
  sview v = {.rank = t->rank};
  memcpy(v.shape, t->shape, sizeof(int64_t) * (size_t)t->rank);
  row_major(t->rank, t->shape, v.stride);
  return v;
}

/* The last `size` elements of v's row-major order as one dim (stride
 * *stride), taken off v; false if they are not one strided run. */
static bool take_tail(sview *v, int64_t size, int64_t *stride) {
  while (v->rank > 0 && v->shape[v->rank - 1] == 1) v->rank--;
  if (size == 1) {
    *stride = 0;
    return true;
  }
  if (v->rank == 0) return false;
  /* merge the trailing dims that step as one */
  while (v->rank >= 2 && v->shape[v->rank - 1] < size &&
         v->stride[v->rank - 2] == v->stride[v->rank - 1] * v->shape[v->rank - 1]) {
    v->shape[v->rank - 2] *= v->shape[v->rank - 1];
    v->stride[v->rank - 2] = v->stride[v->rank - 1];
    v->rank--;
  }
  int64_t n = v->shape[v->rank - 1];
  if (n % size) return false;
  *stride = v->stride[v->rank - 1];
  if (n == size) {
    v->rank--;
  } else {
    v->shape[v->rank - 1] = n / size;
    v->stride[v->rank - 1] = *stride * size;
  }
  return true;
}

/* v (over a value) in the kernel's form for an operand [..., S, W], as the
 * `_at` attribute; false if it has none or is the value itself. */
static bool encode(sview v, int64_t s, int64_t w, loom_ints *at) {
  int64_t row, col;
  if (!take_tail(&v, w, &col) || (w > 1 && col != 1) || !take_tail(&v, s, &row)) return false;
  int32_t n = 0;
  int64_t lead[VMAX], stride[VMAX];
  for (int32_t k = 0; k < v.rank; k++) {
    if (v.shape[k] == 1) continue;
    /* merge with the previous leading dim where they step as one */
    if (n > 0 && stride[n - 1] == v.stride[k] * v.shape[k]) {
      lead[n - 1] *= v.shape[k];
      stride[n - 1] = v.stride[k];
      continue;
    }
    lead[n] = v.shape[k];
    stride[n++] = v.stride[k];
  }
  if (n > 3) return false;
  if (n == 0) lead[n] = 1, stride[n++] = 0;
  at->n = 2 + 2 * n;
  at->v[0] = v.offset;
  at->v[1] = row;
  for (int32_t i = 0; i < n; i++) at->v[2 + 2 * i] = lead[i], at->v[3 + 2 * i] = stride[i];
  return true;
}

/* Walks operand x (logical [..., S, W]) back through layout ops: the value
 * it lies in (*base) and its `_at`; false when it stays as it is. */
static bool fold_input(const loom_graph *g, const uint8_t *skip, int32_t x, int64_t s, int64_t w,
                       int32_t *base, loom_ints *at) {
  const loom_type *t = loom_value_type(g, x);
  sview v = whole(t), best_v = v;
  int32_t cur = x, best = -1;
  for (int32_t hops = 0; hops < 16; hops++) {
    int32_t nd = g->values[cur].node;
    /* (a folded o's chain is gone: o is not where it says) */
    if (nd < 0 || skip[nd] || !through(g, &g->nodes[nd], &v)) break;
    cur = g->nodes[nd].in[0];
    loom_ints probe;
    /* the farthest value the operand can be read from */
    if (loom_value_type(g, cur)->dtype == t->dtype && encode(v, s, w, &probe))
      best = cur, best_v = v;
  }
  if (best < 0) return false;
  *base = best;
  return encode(best_v, s, w, at);
}

/* True if v is one of g's outputs. */
static bool is_output(const loom_graph *g, int32_t v) {
  for (int32_t i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return true;
  return false;
}

/* x = op(y) for a fake layout node (in y, out x): the view of x over y. */
static bool through_fake(const loom_graph *g, loom_op op, const loom_ints *ints, int32_t x,
                         int32_t y, sview *v) {
  loom_node f = {.op = op, .n_in = 1, .n_out = 1};
  loom_attrs_default(op, f.attr);
  if (op == LOOM_OP_TRANSPOSE) LOOM_ATTR_INTS(&f, transpose, perm) = *ints;
  else LOOM_ATTR_INTS(&f, slice, starts) = *ints;
  int32_t io[2] = {y, x};
  f.in = &io[0], f.out = &io[1];
  return through(g, &f, v);
}

/* y = transpose(x, perm), so x = transpose(y, inverse): v over x as a
 * view over y. */
static bool through_inverse_transpose(const loom_graph *g, const loom_node *n, int32_t x,
                                      sview *v) {
  const loom_ints *perm = &LOOM_ATTR_INTS(n, transpose, perm);
  loom_ints ip = *perm;
  for (int32_t d = 0; d < perm->n; d++) ip.v[perm->v[d]] = d;
  return through_fake(g, LOOM_OP_TRANSPOSE, &ip, x, n->out[0], v);
}

/* The forward's o walked forward through the transposes and reshapes only
 * it reads (each link used once, not an output): the last value (*y), its
 * `_at`, and the chain's nodes marked in skip. False if there is none. */
static bool fold_output(const loom_graph *g, const int32_t *uses, const int32_t *user, int32_t o,
                        int64_t s, int64_t w, int32_t *y, loom_ints *at, uint8_t *skip) {
  const loom_type *t = loom_value_type(g, o);
  sview v = whole(t);
  int32_t cur = o, chain[16], n_chain = 0, best = -1;
  loom_ints best_at = {0};
  for (; n_chain < 16; n_chain++) {
    /* cur's layout user; o itself may also be read by its gradient */
    int32_t u = user[cur];
    if (u < 0 || (cur != o && (uses[cur] != 1 || is_output(g, cur)))) break;
    const loom_node *n = &g->nodes[u];
    int32_t next = n->out[0];
    if (n->op == LOOM_OP_TRANSPOSE) {
      if (!through_inverse_transpose(g, n, cur, &v)) break;
    } else if (n->op != LOOM_OP_RESHAPE) {
      break;
    }
    chain[n_chain] = u;
    cur = next;
    loom_ints probe;
    if (encode(v, s, w, &probe)) best = n_chain, best_at = probe, *y = cur;
  }
  if (best < 0) return false;
  for (int32_t i = 0; i <= best; i++) skip[chain[i]] = 1;
  *at = best_at;
  return true;
}

/* A gradient's walk forward (grad_path): per step the value reached, the
 * node that made it, and its view's `_at` there (ok: encodable). */
typedef struct gstep {
  int32_t value, node;
  bool ok;
  loom_ints at;
} gstep;

/* Walks gradient x ([..., S, W]) forward through the ops that only it
 * reads: reshapes, transposes, zero pads (x a slice of the result) and
 * adds (whose other operand must be zero there: grad_fold checks). */
static int32_t grad_path(const loom_graph *g, const int32_t *uses, const int32_t *sole, int32_t x,
                         int64_t s, int64_t w, gstep *path) {
  sview v = whole(loom_value_type(g, x));
  int32_t cur = x, n = 0;
  while (n < 16 && uses[cur] == 1 && sole[cur] >= 0 && !is_output(g, cur)) {
    const loom_node *u = &g->nodes[sole[cur]];
    int32_t next = u->out[0];
    if (u->op == LOOM_OP_TRANSPOSE) {
      if (!through_inverse_transpose(g, u, cur, &v)) break;
    } else if (u->op == LOOM_OP_PAD) {
      if (LOOM_ATTR_F(u, pad, value) != 0.0 || u->in[0] != cur) break;
      if (!through_fake(g, LOOM_OP_SLICE, &LOOM_ATTR_INTS(u, pad, lo), cur, next, &v)) break;
    } else if (u->op != LOOM_OP_RESHAPE && u->op != LOOM_OP_ADD) {
      break;
    }
    path[n] = (gstep){.value = next, .node = sole[cur]};
    path[n].ok = encode(v, s, w, &path[n].at);
    cur = next;
    n++;
  }
  return n;
}

/* The backward's dq, dk, dv (outs) walked forward to one value z that
 * their zero pads and adds concatenate them into, then transposed and
 * reshaped: their `_at` in z (ats), the nodes on the way marked in skip.
 * The pads must not overlap and must fill their sum. False if no such z. */
static bool grad_fold(const loom_graph *g, const int32_t *uses, const int32_t *sole,
                      const int32_t *outs, const int64_t *s, const int64_t *w, int32_t *z,
                      loom_ints *ats, uint8_t *skip) {
  gstep path[3][16];
  int32_t len[3], end[3] = {-1, -1, -1};
  for (int32_t k = 0; k < 3; k++) len[k] = grad_path(g, uses, sole, outs[k], s[k], w[k], path[k]);
  /* the farthest value on all three paths where each view encodes */
  for (int32_t i = 0; i < len[0]; i++) {
    int32_t at[3] = {i, -1, -1};
    for (int32_t k = 1; k < 3; k++)
      for (int32_t j = 0; j < len[k]; j++)
        if (path[k][j].value == path[0][i].value) at[k] = j;
    if (at[1] >= 0 && at[2] >= 0 && path[0][i].ok && path[1][at[1]].ok && path[2][at[2]].ok)
      memcpy(end, at, sizeof end);
  }
  if (end[0] < 0) return false;
  /* before z: one zero pad per gradient, boxes apart and filling the
   * adds' result, and adds of nothing but these paths' values */
  const loom_node *pads[3] = {NULL, NULL, NULL};
  int32_t adds[4], n_adds = 0;
  for (int32_t k = 0; k < 3; k++)
    for (int32_t j = 0; j <= end[k]; j++) {
      const loom_node *n = &g->nodes[path[k][j].node];
      if (n->op == LOOM_OP_PAD) {
        if (pads[k]) return false;
        pads[k] = n;
      } else if (n->op == LOOM_OP_ADD) {
        bool seen = false;
        for (int32_t a = 0; a < n_adds; a++) seen |= adds[a] == path[k][j].node;
        if (!seen && n_adds == 4) return false;
        if (!seen) adds[n_adds++] = path[k][j].node;
      }
    }
  if (!pads[0] || !pads[1] || !pads[2] || n_adds != 2) return false;
  for (int32_t a = 0; a < n_adds; a++) {
    const loom_node *n = &g->nodes[adds[a]];
    for (int32_t i = 0; i < 2; i++) {
      bool on = false;
      for (int32_t k = 0; k < 3; k++)
        for (int32_t j = 0; j <= end[k]; j++) on |= path[k][j].value == n->in[i];
      if (!on) return false;
    }
    if (!loom_type_equal(loom_value_type(g, n->in[0]), loom_value_type(g, n->out[0])) ||
        !loom_type_equal(loom_value_type(g, n->in[1]), loom_value_type(g, n->out[0])))
      return false;
  }
  const loom_type *pt = loom_value_type(g, pads[0]->out[0]);
  int64_t volume = 0;
  for (int32_t k = 0; k < 3; k++) {
    const loom_type *in = loom_value_type(g, pads[k]->in[0]);
    if (!loom_type_equal(loom_value_type(g, pads[k]->out[0]), pt)) return false;
    volume += loom_type_numel(in);
    for (int32_t m = 0; m < k; m++) { /* boxes apart along some dim */
      const loom_type *im = loom_value_type(g, pads[m]->in[0]);
      const loom_ints *lk = &LOOM_ATTR_INTS(pads[k], pad, lo), *lm = &LOOM_ATTR_INTS(pads[m], pad, lo);
      bool apart = false;
      for (int32_t d = 0; d < pt->rank; d++)
        apart |= lk->v[d] + in->shape[d] <= lm->v[d] || lm->v[d] + im->shape[d] <= lk->v[d];
      if (!apart) return false;
    }
  }
  if (volume != loom_type_numel(pt)) return false;
  for (int32_t k = 0; k < 3; k++) {
    for (int32_t j = 0; j <= end[k]; j++) skip[path[k][j].node] = 1;
    ats[k] = path[k][end[k]].at;
  }
  *z = path[0][end[0]].value;
  return true;
}

/* The operands a flash node may read at strides: q, k, v (and o, d_o in
 * the backward), with their logical [..., S, W]. */
static int32_t operands(const loom_graph *g, const loom_node *n, int32_t *in_index, int64_t *s,
                        int64_t *w) {
  bool grad = n->op == LOOM_OP_FLASH_ATTENTION_GRAD;
  static const int32_t idx[LOOM_FLASH_N] = {0, 1, 2, 3, 5};
  int32_t count = grad ? LOOM_FLASH_N : 3;
  for (int32_t i = 0; i < count; i++) {
    const loom_type *t = loom_value_type(g, n->in[idx[i]]);
    in_index[i] = idx[i];
    s[i] = t->shape[t->rank - 2];
    w[i] = t->shape[t->rank - 1];
  }
  return count;
}

static loom_ints *at_slot(loom_attr_value *a, int32_t w) {
  switch (w) {
  case LOOM_FLASH_Q: return &LOOM_ATTRV_INTS(a, flash_attention, q_at);
  case LOOM_FLASH_K: return &LOOM_ATTRV_INTS(a, flash_attention, k_at);
  case LOOM_FLASH_V: return &LOOM_ATTRV_INTS(a, flash_attention, v_at);
  case LOOM_FLASH_O: return &LOOM_ATTRV_INTS(a, flash_attention, o_at);
  default: return &LOOM_ATTRV_INTS(a, flash_attention, do_at);
  }
}

/* True if nothing reads v and it is not a graph output. */
static bool unread(const loom_graph *g, const int32_t *uses, int32_t v) {
  for (int32_t i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return false;
  return uses[v] == 0;
}

/* A folded forward's o: the value it lies in and where. */
typedef struct folded_o {
  int32_t y;
  loom_ints at;
} folded_o;

loom_status loom_graph_fold_attention_views(const loom_graph *g, loom_graph **out,
                                            int32_t *n_folded) {
  *out = NULL;
  if (n_folded) *n_folded = 0;
  int32_t nv = g->n_values + 1;
  int32_t *uses = calloc((size_t)nv, sizeof *uses), *user = malloc(sizeof(int32_t) * (size_t)nv);
  int32_t *sole = malloc(sizeof(int32_t) * (size_t)nv);
  uint8_t *skip = calloc((size_t)g->n_nodes + 1, 1);
  folded_o *fo = malloc(sizeof *fo * (size_t)nv);
  if (!uses || !user || !sole || !skip || !fo) {
    free(uses), free(user), free(sole), free(skip), free(fo);
    return loom_error(g->ctx, LOOM_STATUS_OUT_OF_MEMORY, "view fold: out of memory");
  }
  /* user[v]: v's one layout-op user (-1: none or several) */
  for (int32_t v = 0; v < nv; v++) user[v] = -1, fo[v].y = -1;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const loom_node *n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_in; j++) {
      int32_t v = n->in[j];
      uses[v]++;
      if (n->op == LOOM_OP_RESHAPE || n->op == LOOM_OP_TRANSPOSE)
        user[v] = user[v] == -1 ? i : -2;
      else if (n->op != LOOM_OP_FLASH_ATTENTION_GRAD)
        user[v] = -2; /* read as it is by something else */
    }
  }
  for (int32_t v = 0; v < nv; v++)
    if (user[v] < 0) user[v] = -1;
  /* sole[v]: v's only user (any op), -1 if it has none or several */
  for (int32_t v = 0; v < nv; v++) sole[v] = -1;
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t j = 0; j < g->nodes[i].n_in; j++)
      if (uses[g->nodes[i].in[j]] == 1) sole[g->nodes[i].in[j]] = i;
  int32_t *map = NULL;
  loom_graph *dst = NULL;
  loom_status st = loom_graph_begin_copy(g, &dst, &map);
  for (int32_t i = 0; i < g->n_nodes && !st; i++) {
    const loom_node *n = &g->nodes[i];
    if (skip[i]) continue;
    bool flash = n->op == LOOM_OP_FLASH_ATTENTION || n->op == LOOM_OP_FLASH_ATTENTION_GRAD;
    if (!flash || loom_flash_has_views(n) || loom_value_type(g, n->in[0])->dtype != LOOM_DTYPE_F32) {
      st = loom_graph_copy_node(dst, g, n, map);
      continue;
    }
    loom_attr_value a[LOOM_MAX_ATTRS];
    memcpy(a, n->attr, sizeof a);
    int32_t in[LOOM_PART_MAX_IO], idx[LOOM_FLASH_N], nf = 0;
    int64_t s[LOOM_FLASH_N], w[LOOM_FLASH_N];
    for (int32_t j = 0; j < n->n_in; j++) in[j] = map[n->in[j]];
    int32_t count = operands(g, n, idx, s, w);
    for (int32_t k = 0; k < count; k++) {
      int32_t x = n->in[idx[k]], base;
      if (k == LOOM_FLASH_O && fo[x].y >= 0) { /* the forward wrote o strided */
        in[idx[k]] = map[fo[x].y];
        *at_slot(a, k) = fo[x].at;
        nf++;
      } else if (fold_input(g, skip, x, s[k], w[k], &base, at_slot(a, k))) {
        in[idx[k]] = map[base];
        nf++;
      }
    }
    int32_t y = -1, z = -1, n_out = n->n_out;
    bool fwd = n->op == LOOM_OP_FLASH_ATTENTION;
    /* a bias gradient nothing reads (the bias needs none) is not made */
    bool has_db = !fwd && n_out == 4, drop_db = has_db && unread(g, uses, n->out[3]);
    if (drop_db) n_out = 3, has_db = false;
    loom_ints dats[3];
    if (!fwd && grad_fold(g, uses, sole, n->out, s, w, &z, dats, skip)) {
      /* dq, dk, dv ([..., Sq, D], [..., Sk, D], [..., Sk, Dv]) into z */
      const loom_type *zt = loom_value_type(g, z);
      loom_ints *os = &LOOM_ATTRV_INTS(a, flash_attention, out_shape);
      os->n = zt->rank;
      memcpy(os->v, zt->shape, sizeof(int64_t) * (size_t)zt->rank);
      LOOM_ATTRV_INTS(a, flash_attention, dq_at) = dats[0];
      LOOM_ATTRV_INTS(a, flash_attention, dk_at) = dats[1];
      LOOM_ATTRV_INTS(a, flash_attention, dv_at) = dats[2];
      n_out = has_db ? 2 : 1; /* the bias gradient stays an output of its own, last */
      nf++;
    }
    if (fwd && fold_output(g, uses, user, n->out[0], s[0], w[2], &y, at_slot(a, LOOM_FLASH_O), skip)) {
      const loom_type *yt = loom_value_type(g, y);
      loom_ints *os = &LOOM_ATTRV_INTS(a, flash_attention, out_shape);
      os->n = yt->rank;
      memcpy(os->v, yt->shape, sizeof(int64_t) * (size_t)yt->rank);
      fo[n->out[0]].y = y;
      fo[n->out[0]].at = *at_slot(a, LOOM_FLASH_O);
      nf++;
    }
    if (nf == 0 && !drop_db) {
      st = loom_graph_copy_node(dst, g, n, map);
      continue;
    }
    /* dims: q's logical shape, then Sk and Dv */
    const loom_type *q = loom_value_type(g, n->in[0]);
    loom_ints *dm = &LOOM_ATTRV_INTS(a, flash_attention, dims);
    if (nf > 0) {
      dm->n = q->rank + 2;
      memcpy(dm->v, q->shape, sizeof(int64_t) * (size_t)q->rank);
      dm->v[q->rank] = s[1];
      dm->v[q->rank + 1] = w[2];
    }
    int32_t outs[4] = {-1, -1, -1, -1};
    (void)loom_build_status(dst);
    /* the counter input goes where it is not read (no dropout) or is a
     * constant (into `offset`): no kernel part is made for it; the bias,
     * last, stays last */
    int32_t n_in = loom_attention_core_inputs(n), bi = fwd ? 3 : 6, bias = loom_attention_bias_input(n);
    if (n_in == bi + 1) { /* a base and no mask */
      int32_t bn = g->values[n->in[bi]].node;
      const loom_node *c = bn >= 0 ? &g->nodes[bn] : NULL;
      double v = c && c->op == LOOM_OP_CONSTANT && loom_value_type(g, n->in[bi])->rank == 0
                     ? LOOM_ATTR_F(c, constant, value)
                     : NAN;
      if (LOOM_ATTR_F(n, flash_attention, p) == 0.0) {
        n_in--;
      } else if (v == floor(v) && fabs(v) < 9e15) {
        LOOM_ATTRV_I(a, flash_attention, offset) += (int64_t)v;
        n_in--;
      }
    }
    if (bias >= 0) in[n_in++] = in[bias];
    lb_op_multi(dst, n->op, n_in, in, a, n_out, outs);
    st = loom_build_status(dst);
    for (int32_t o = 0; o < (z >= 0 ? 1 : n_out) && !st; o++) map[n->out[o]] = outs[o];
    if (!st && z >= 0 && has_db) map[n->out[3]] = outs[1];
    if (!st && y >= 0) map[y] = outs[0];
    if (!st && z >= 0) map[z] = outs[0];
    if (!st && n_folded) (*n_folded)++;
  }
  if (!st) st = loom_graph_finish_copy(dst, g, map);
  free(map), free(uses), free(user), free(sole), free(skip), free(fo);
  if (st) {
    loom_error_prefix(g->ctx, "attention view fold");
    loom_graph_free(dst);
    return st;
  }
  *out = dst;
  return LOOM_STATUS_OK;
}
