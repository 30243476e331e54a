/*
 * Lowering, step 1b: instances of values read at several offsets of one
 * loop. A concat, pad or slice places its input somewhere along its output's
 * loop; when one value reaches a loop through two of them at different
 * places — the two halves of a gated MLP's projection and their gradients
 * padded back into one du, rotate_half of a computed value — its dim would
 * start at two offsets of one loop, which a value's one set of dims cannot
 * say (step 2 finds the clash). Then every value gets one instance per
 * place it is needed at, found consumers first from the materialized
 * values (at offset 0 of their own dims): a load of an input becomes a
 * load per place (the same buffer, another base), an element-wise value is
 * computed once per place. Reductions are not repeated (a second instance
 * of one is refused: it would read its whole input again).
 *
 * A place is a vector `at`: where each dim of the value starts, in the
 * coordinates of the materialized value it is needed for. Only groups
 * where step 2 found a clash are expanded, so every other kernel is what
 * it was.
 */
#include "fusion/lower_internal.h"

#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

typedef struct inst {
  int32_t l;    /* the value (before expansion) */
  int32_t next; /* its next instance, -1 */
  int64_t at[MAXR];
} inst;

typedef struct places {
  inst *v;
  int32_t n, cap;
  int32_t *head, *tail; /* per value: its first and last instance, -1 */
} places;

/* The instance of value l at `at`, added if new; -1 without memory. */
static int32_t place(lw *w, places *p, int32_t l, const int64_t *at) {
  for (int32_t i = p->head[l]; i >= 0; i = p->v[i].next)
    if (memcmp(p->v[i].at, at, sizeof p->v[i].at) == 0) return i;
  if (!loom_grow(w->ctx, (void **)&p->v, &p->cap, p->n + 1, sizeof(inst))) return -1;
  inst *x = &p->v[p->n];
  x->l = l;
  x->next = -1;
  memcpy(x->at, at, sizeof x->at);
  if (p->tail[l] >= 0) p->v[p->tail[l]].next = p->n;
  else p->head[l] = p->n;
  p->tail[l] = p->n;
  return p->n++;
}

/* Where input i of member m starts, per dim, when its output starts at
 * out_at (the inverse of step 2's unions). */
static void input_at(const lw *w, int32_t m, int32_t i, const int64_t *out_at, int64_t *in_at) {
  const loom_node *nd = mnode(w, m);
  const loom_type *ti = vt(w, m_in(w, m, i)), *to = vt(w, m_out(w, m));
  memset(in_at, 0, sizeof(int64_t) * MAXR);
  const loom_op_def *d = loom_op_get(nd->op);
  bool aligned = false;
  if (d->cls == LOOM_OPCLASS_LAYOUT) {
    switch (nd->op) {
    case LOOM_OP_PAD: /* the input's element k is the output's lo + k */
      for (int32_t k = 0; k < ti->rank; k++) in_at[k] = out_at[k] + LOOM_ATTR_INTS(nd, pad, lo).v[k];
      break;
    case LOOM_OP_SLICE: /* the output's element k is the input's start + k */
      for (int32_t k = 0; k < ti->rank; k++) {
        int64_t s = LOOM_ATTR_INTS(nd, slice, starts).v[k];
        in_at[k] = out_at[k] - (s < 0 ? s + ti->shape[k] : s);
      }
      break;
    case LOOM_OP_CONCAT: {
      int64_t axis = LOOM_ATTR_I(nd, concat, axis), piece = 0;
      if (axis < 0) axis += to->rank;
      for (int32_t j = 0; j < i; j++) piece += vt(w, m_in(w, m, j))->shape[axis];
      for (int32_t k = 0; k < ti->rank; k++) in_at[k] = out_at[k] + (k == axis ? piece : 0);
      break;
    }
    case LOOM_OP_TRANSPOSE:
      for (int32_t k = 0; k < to->rank; k++)
        in_at[LOOM_ATTR_INTS(nd, transpose, perm).v[k]] = out_at[k];
      break;
    case LOOM_OP_RESHAPE: { /* dims other than size-1 ones, in order; a
                               regrouping reshape starts at 0 (step 2 refuses
                               a part of a regrouped dim) */
      int32_t a = 0, b = 0;
      int64_t tmp[MAXR] = {0};
      bool same = true;
      for (;;) {
        while (a < ti->rank && ti->shape[a] == 1) a++;
        while (b < to->rank && to->shape[b] == 1) b++;
        if (a >= ti->rank || b >= to->rank) break;
        if (ti->shape[a] != to->shape[b]) same = false;
        tmp[a++] = out_at[b++];
      }
      if (same && a >= ti->rank && b >= to->rank) memcpy(in_at, tmp, sizeof tmp);
      break;
    }
    default: aligned = true; /* broadcast_to */
    }
  } else if (d->cls == LOOM_OPCLASS_REDUCE) {
    uint32_t mask = loom_lower_reduce_mask(nd, ti->rank);
    bool keep = LOOM_ATTR_I(nd, reduce_sum, keepdims) != 0;
    for (int32_t k = 0, od = 0; k < ti->rank; k++)
      if (!(mask & (1u << k))) in_at[k] = out_at[keep ? k : od++];
  } else {
    aligned = true; /* element-wise, dropout: NumPy broadcasting */
  }
  if (aligned)
    for (int32_t k = 0; k < ti->rank; k++) {
      int32_t o = k + to->rank - ti->rank;
      if (o >= 0 && ti->shape[k] == to->shape[o]) in_at[k] = out_at[o];
    }
  for (int32_t k = 0; k < ti->rank; k++)
    if (ti->shape[k] == 1) in_at[k] = 0; /* no loop there */
}

/* A fresh local value for an instance of x (step 2 redoes views and
 * loops). */
static lval fresh(const lw *w, const lval *x, bool first) {
  lval y;
  memset(&y, 0, sizeof y);
  y.v = x->v;
  y.prod = -1;
  y.src = -1;
  y.comp = -1;
  y.alias = -1;
  if (x->prod >= 0) {
    y.mat = x->mat && first; /* the first is at 0: the one stored */
  } else {
    y.mat = y.view = true;
    y.src = x->v;
    contiguous(loom_value_type(w->g, x->v), y.stride);
  }
  return y;
}

loom_status loom_lower_instances(lw *w) {
  int32_t nl = w->n_lv, nm = w->n_mem;
  places p = {0};
  p.head = malloc(sizeof(int32_t) * (size_t)nl * 3 + 1);
  int32_t *first = p.head ? p.head + 2 * nl : NULL; /* per value: its first new index */
  lval *lv = NULL;
  int32_t *mem = NULL, *io_off = NULL;
  loom_status st = LOOM_STATUS_OK;
  if (!p.head) goto oom;
  p.tail = p.head + nl;
  for (int32_t l = 0; l < nl; l++) p.head[l] = p.tail[l] = -1;
  int64_t zero[MAXR] = {0};
  for (int32_t l = 0; l < nl; l++)
    if (w->lv[l].prod >= 0 && w->lv[l].mat && place(w, &p, l, zero) < 0) goto oom;
  /* consumers first: members are in graph order */
  int32_t n_new = 0, n_io = 0;
  for (int32_t m = nm - 1; m >= 0; m--) {
    const loom_node *nd = mnode(w, m);
    int32_t lo = m_out(w, m), k = 0;
    for (int32_t i = p.head[lo]; i >= 0; i = p.v[i].next, k++) {
      if (k == 1 && loom_op_get(nd->op)->cls == LOOM_OPCLASS_REDUCE) {
        st = loom_lower_fail(w, "reduction (node %d) needed at two offsets of one loop", w->mem[m]);
        goto done;
      }
      for (int32_t j = 0; j < nd->n_in; j++) {
        int64_t at[MAXR];
        int64_t out_at[MAXR];
        memcpy(out_at, p.v[i].at, sizeof out_at); /* place() may move p.v */
        input_at(w, m, j, out_at, at);
        if (place(w, &p, m_in(w, m, j), at) < 0) goto oom;
      }
    }
    n_new += k;
    n_io += k * (1 + nd->n_in);
  }
  /* the new values, each value's instances together, in the old order */
  int32_t n_lv = 0;
  for (int32_t l = 0; l < nl; l++) {
    first[l] = n_lv;
    for (int32_t i = p.head[l]; i >= 0; i = p.v[i].next) n_lv++;
  }
  int32_t *new_of = malloc(sizeof(int32_t) * (size_t)(p.n > 0 ? p.n : 1));
  lv = calloc((size_t)(n_lv > 0 ? n_lv : 1), sizeof(lval));
  mem = malloc(sizeof(int32_t) * ((size_t)n_new + (size_t)w->n_all + 1));
  io_off = malloc(sizeof(int32_t) * ((size_t)n_new + (size_t)n_io + 1));
  if (!new_of || !lv || !mem || !io_off) {
    free(new_of);
    goto oom;
  }
  for (int32_t l = 0; l < nl; l++) {
    int32_t k = 0;
    for (int32_t i = p.head[l]; i >= 0; i = p.v[i].next, k++) {
      new_of[i] = first[l] + k;
      lv[first[l] + k] = fresh(w, &w->lv[l], k == 0);
    }
  }
  int32_t *io = io_off + n_new, at_io = 0, m2 = 0;
  for (int32_t m = 0; m < nm; m++) {
    const loom_node *nd = mnode(w, m);
    for (int32_t i = p.head[m_out(w, m)]; i >= 0; i = p.v[i].next, m2++) {
      mem[m2] = w->mem[m];
      io_off[m2] = at_io;
      io[at_io] = new_of[i];
      lv[new_of[i]].prod = m2;
      for (int32_t j = 0; j < nd->n_in; j++) {
        int64_t at[MAXR];
        input_at(w, m, j, p.v[i].at, at);
        int32_t q = place(w, &p, m_in(w, m, j), at); /* found: no new instance */
        io[at_io + 1 + j] = new_of[q];
        lv[new_of[q]].n_use++;
      }
      at_io += 1 + nd->n_in;
    }
  }
  free(new_of);
  /* the kernel's node list keeps every member once */
  memcpy(mem + n_new, w->all_mem, sizeof(int32_t) * (size_t)w->n_all);
  free(w->mem);
  free(w->io_off);
  free(w->lv);
  w->mem = mem;
  w->all_mem = mem + n_new;
  w->n_mem = n_new;
  w->io_off = io_off;
  w->io = io;
  w->lv = lv;
  w->n_lv = w->cap_lv = n_lv;
  for (int32_t l = n_lv - 1; l >= 0; l--) w->loc[lv[l].v] = l; /* the first instance */
  mem = io_off = NULL;
  lv = NULL;
  goto done;
oom:
  st = loom_error(w->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
done:
  free(p.v);
  free(p.head);
  free(lv);
  free(mem);
  free(io_off);
  return st;
}
