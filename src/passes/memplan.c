#include "passes/memplan.h"

#include "core/checked.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Free blocks of the arena, sorted by offset, never adjacent (coalesced). */
typedef struct block {
  int64_t off, size;
} block;

typedef struct planner {
  loom_ctx *ctx;
  block *free;
  int32_t n_free, cap_free;
  int64_t top; /* arena bytes handed out so far: the peak */
} planner;

static int64_t align_up(int64_t n) {
  return (n + LOOM_MEMPLAN_ALIGN - 1) / LOOM_MEMPLAN_ALIGN * LOOM_MEMPLAN_ALIGN;
}

static void remove_block(planner *p, int32_t i) {
  memmove(&p->free[i], &p->free[i + 1], sizeof(block) * (size_t)(p->n_free - i - 1));
  p->n_free--;
}

/* Best fit among the free blocks; else grow the arena (reusing a free
 * block that ends at the top). Returns the offset. */
static int64_t plan_alloc(planner *p, int64_t size) {
  int32_t best = -1;
  for (int32_t i = 0; i < p->n_free; i++)
    if (p->free[i].size >= size && (best < 0 || p->free[i].size < p->free[best].size)) best = i;
  if (best >= 0) {
    int64_t off = p->free[best].off;
    p->free[best].off += size;
    p->free[best].size -= size;
    if (p->free[best].size == 0) remove_block(p, best);
    return off;
  }
  if (p->n_free > 0) {
    block *last = &p->free[p->n_free - 1];
    if (last->off + last->size == p->top) {
      int64_t off = last->off;
      p->top = off + size;
      p->n_free--;
      return off;
    }
  }
  int64_t off = p->top;
  p->top += size;
  return off;
}

static bool plan_release(planner *p, int64_t off, int64_t size) {
  int32_t i = 0;
  while (i < p->n_free && p->free[i].off < off)
    i++;
  bool join_prev = i > 0 && p->free[i - 1].off + p->free[i - 1].size == off;
  bool join_next = i < p->n_free && off + size == p->free[i].off;
  if (join_prev && join_next) {
    p->free[i - 1].size += size + p->free[i].size;
    remove_block(p, i);
  } else if (join_prev) {
    p->free[i - 1].size += size;
  } else if (join_next) {
    p->free[i].off = off;
    p->free[i].size += size;
  } else {
    if (!loom_grow(p->ctx, (void **)&p->free, &p->cap_free, p->n_free + 1, sizeof(block)))
      return false;
    memmove(&p->free[i + 1], &p->free[i], sizeof(block) * (size_t)(p->n_free - i));
    p->free[i] = (block){off, size};
    p->n_free++;
  }
  return true;
}

void loom_memplan_free(loom_memplan *p) {
  if (!p) return;
  free(p->offset);
  free(p->size);
  free(p->first);
  free(p->last);
  free(p->root);
  free(p->in_place_out);
  free(p->in_place_in);
  memset(p, 0, sizeof *p);
}

static const char *value_label(const loom_graph *g, int32_t v, char *buf, size_t n) {
  if (g->values[v].name)
    snprintf(buf, n, "%%%s", g->values[v].name);
  else
    snprintf(buf, n, "value %d", v);
  return buf;
}

/* Live ranges and roots from the steps; checks the program's consistency. */
static loom_status plan_ranges(const loom_graph *g, int32_t n_steps, const loom_memplan_step *steps,
                               const bool *materialized, loom_memplan *out) {
  loom_ctx *ctx = g->ctx;
  char buf[96];
  for (int32_t v = 0; v < g->n_values; v++) {
    const loom_value_info *vi = &g->values[v];
    out->offset[v] = -1;
    out->size[v] = loom_type_numel(&vi->type) * (int64_t)loom_dtype_size(vi->type.dtype);
    out->first[v] = out->last[v] = -1;
    out->root[v] = v;
  }
  for (int32_t j = 0; j < n_steps; j++) {
    const loom_memplan_step *s = &steps[j];
    for (int32_t i = 0; i < s->n_in; i++) {
      int32_t v = s->in[i];
      if (!loom_value_valid(g, v))
        return loom_error(ctx, LOOM_STATUS_INTERNAL, "memplan: step %d reads unknown value %d", j,
                          v);
      bool external = g->values[v].kind != LOOM_VALUE_NODE;
      if (!external && (out->first[v] < 0 || out->first[v] >= j))
        return loom_error(ctx, LOOM_STATUS_INTERNAL,
                          "memplan: step %d reads %s, which no earlier step writes to memory", j,
                          value_label(g, v, buf, sizeof buf));
      out->last[v] = LOOM_MAX(out->last[v], j); /* an async step may have kept it longer */
    }
    for (int32_t o = 0; o < s->n_out; o++) {
      int32_t v = s->out[o];
      if (!loom_value_valid(g, v))
        return loom_error(ctx, LOOM_STATUS_INTERNAL, "memplan: step %d writes unknown value %d", j,
                          v);
      if (g->values[v].kind != LOOM_VALUE_NODE || out->first[v] >= 0)
        return loom_error(ctx, LOOM_STATUS_INTERNAL, "memplan: step %d writes %s, %s", j,
                          value_label(g, v, buf, sizeof buf),
                          out->first[v] >= 0 ? "which an earlier step wrote" : "a graph input");
      if (materialized && !materialized[v])
        return loom_error(ctx, LOOM_STATUS_INTERNAL,
                          "memplan: step %d writes %s, which is not materialized", j,
                          value_label(g, v, buf, sizeof buf));
      out->first[v] = out->last[v] = j;
    }
    if (s->alias) {
      if (s->n_in < 1 || s->n_out < 1 || out->size[s->out[0]] != out->size[s->in[0]])
        return loom_error(ctx, LOOM_STATUS_INTERNAL,
                          "memplan: step %d aliases values of different sizes", j);
      out->root[s->out[0]] = out->root[s->in[0]];
    }
    /* an async step uses its values until it is joined */
    int32_t join = LOOM_MIN(s->join, n_steps - 1);
    if (join > j)
      for (int32_t k = 0; k < s->n_in + s->n_out; k++) {
        int32_t v = k < s->n_in ? s->in[k] : s->out[k - s->n_in];
        out->last[v] = LOOM_MAX(out->last[v], join);
      }
  }
  for (int32_t i = 0; i < g->n_outputs; i++) {
    int32_t v = g->outputs[i];
    if (g->values[v].kind == LOOM_VALUE_NODE && out->first[v] < 0)
      return loom_error(ctx, LOOM_STATUS_INTERNAL, "memplan: graph output %s is never written",
                        value_label(g, v, buf, sizeof buf));
    out->last[v] = n_steps;
  }
  return LOOM_STATUS_OK;
}

/*
 * The in-place pairs (loom_memplan.in_place_out/_in). Per external root
 * x, the two latest steps that use it (a step uses it until its join)
 * tell whether any step but the writer uses it at or after the writer's
 * step; a graph output in x's memory uses it at the end.
 */
static loom_status plan_in_place(const loom_graph *g, int32_t n_steps,
                                 const loom_memplan_step *steps, loom_memplan *out) {
  int32_t nv = g->n_values, n_offers = 0;
  for (int32_t j = 0; j < n_steps; j++) n_offers += steps[j].in_place ? steps[j].n_in_place : 0;
  if (n_offers == 0) return LOOM_STATUS_OK;
  out->in_place_out = loom_malloc(g->ctx, sizeof(int32_t) * (size_t)n_offers);
  out->in_place_in = loom_malloc(g->ctx, sizeof(int32_t) * (size_t)n_offers);
  /* per root: the latest use (until) and its step, the latest use by
   * any other step */
  int32_t *late = loom_malloc(g->ctx, sizeof(int32_t) * 3 * (size_t)(nv ? nv : 1));
  if (!late || !out->in_place_out || !out->in_place_in) {
    free(late);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  int32_t *until1 = late, *step1 = late + nv, *until2 = late + 2 * nv;
  for (int32_t v = 0; v < nv; v++) until1[v] = step1[v] = until2[v] = -1;
  for (int32_t j = 0; j <= n_steps; j++) {
    /* step n_steps stands for the caller reading the graph outputs */
    int32_t n = j < n_steps ? steps[j].n_in : g->n_outputs;
    int32_t until = j < n_steps ? LOOM_MAX(j, LOOM_MIN(steps[j].join, n_steps - 1)) : n_steps;
    for (int32_t i = 0; i < n; i++) {
      int32_t x = out->root[j < n_steps ? steps[j].in[i] : g->outputs[i]];
      if (g->values[x].kind == LOOM_VALUE_NODE || step1[x] == j) continue;
      if (until >= until1[x]) {
        until2[x] = until1[x];
        until1[x] = until, step1[x] = j;
      } else if (until > until2[x]) {
        until2[x] = until;
      }
    }
  }
  for (int32_t j = 0; j < n_steps; j++) {
    const loom_memplan_step *s = &steps[j];
    for (int32_t k = 0; s->in_place && k < s->n_in_place; k++) {
      int32_t o = s->in_place[2 * k], i = s->in_place[2 * k + 1];
      if (o < 0 || o >= s->n_out || i < 0 || i >= s->n_in) continue;
      int32_t v = s->out[o], x = out->root[s->in[i]];
      bool ok = out->root[v] == v && g->values[x].kind != LOOM_VALUE_NODE &&
                out->size[x] == out->size[v] && (step1[x] == j ? until2[x] : until1[x]) < j;
      for (int32_t m = 0; ok && m < s->n_in; m++) /* x read through one argument */
        ok = m == i || out->root[s->in[m]] != x;
      bool is_output = false;
      for (int32_t m = 0; ok && m < g->n_outputs && !is_output; m++) is_output = g->outputs[m] == v;
      if (!ok || !is_output) continue;
      out->in_place_out[out->n_in_place] = v;
      out->in_place_in[out->n_in_place++] = x;
    }
  }
  free(late);
  return LOOM_STATUS_OK;
}

/* Buffers by decreasing size (ties: earlier first, then lower id). */
typedef struct sized {
  int64_t size;
  int32_t first, v;
} sized;

static int cmp_sized(const void *a, const void *b) {
  const sized *x = a, *y = b;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return (x->v > y->v) - (x->v < y->v);
}

typedef struct span {
  int64_t lo, hi;
} span;

static int cmp_span(const void *a, const void *b) {
  const span *x = a, *y = b;
  return (x->lo > y->lo) - (x->lo < y->lo);
}

/*
 * Offline placement, largest buffer first: each buffer goes to the lowest
 * offset that overlaps no already placed buffer alive at the same time
 * (the "greedy by size" arena planners use). It knows every live range in
 * advance, so it often packs tighter than the online best fit, which
 * must place a buffer before it knows what comes later. Writes offsets of
 * the buffers (roots with first >= 0) into off and returns the peak, or
 * -1 when out of memory.
 */
static int64_t place_by_size(loom_ctx *ctx, const loom_graph *g, const loom_memplan *pl,
                             const int32_t *end, int64_t *off) {
  int32_t nv = g->n_values, nb = 0;
  sized *bufs = loom_malloc(ctx, sizeof *bufs * (size_t)(nv ? nv : 1));
  span *busy = loom_malloc(ctx, sizeof *busy * (size_t)(nv ? nv : 1));
  int32_t *placed = loom_malloc(ctx, sizeof *placed * (size_t)(nv ? nv : 1));
  if (!bufs || !busy || !placed) {
    free(bufs);
    free(busy);
    free(placed);
    return -1;
  }
  for (int32_t v = 0; v < nv; v++)
    if (pl->root[v] == v && pl->first[v] >= 0)
      bufs[nb++] = (sized){align_up(pl->size[v]), pl->first[v], v};
  qsort(bufs, (size_t)nb, sizeof *bufs, cmp_sized);
  int64_t peak = 0;
  for (int32_t i = 0; i < nb; i++) {
    int32_t v = bufs[i].v, n_busy = 0;
    for (int32_t k = 0; k < i; k++) {
      int32_t u = placed[k];
      if (pl->first[u] <= end[v] && pl->first[v] <= end[u] && bufs[k].size > 0)
        busy[n_busy++] = (span){off[u], off[u] + bufs[k].size};
    }
    qsort(busy, (size_t)n_busy, sizeof *busy, cmp_span);
    int64_t at = 0;
    for (int32_t k = 0; k < n_busy && busy[k].lo < at + bufs[i].size; k++)
      at = LOOM_MAX(at, busy[k].hi);
    off[v] = at;
    placed[i] = v;
    peak = LOOM_MAX(peak, at + bufs[i].size);
  }
  free(bufs);
  free(busy);
  free(placed);
  return peak;
}

/* Releases the buffers of r's values that die at step j (each once, even
 * if read twice). False when out of memory. */
static bool release_dead(planner *p, const loom_memplan *pl, const int32_t *end, bool *released,
                         const loom_memplan_step *r, int32_t j) {
  for (int32_t k = 0; k < r->n_in + r->n_out; k++) {
    int32_t v = pl->root[k < r->n_in ? r->in[k] : r->out[k - r->n_in]];
    if (end[v] != j || pl->offset[v] < 0 || released[v]) continue;
    released[v] = true;
    int64_t sz = align_up(pl->size[v]);
    if (sz && !plan_release(p, pl->offset[v], sz)) return false;
  }
  return true;
}

loom_status loom_memplan_build_steps(const loom_graph *g, int32_t n_steps,
                                     const loom_memplan_step *steps, const bool *materialized,
                                     loom_memplan *out) {
  if (!out) return LOOM_STATUS_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  if (!g || n_steps < 0 || (n_steps && !steps)) return LOOM_STATUS_INVALID_ARGUMENT;
  loom_ctx *ctx = g->ctx;
  size_t nv = (size_t)(g->n_values ? g->n_values : 1);
  out->n_values = g->n_values;
  out->offset = loom_malloc(ctx, sizeof(int64_t) * nv);
  out->size = loom_malloc(ctx, sizeof(int64_t) * nv);
  out->first = loom_malloc(ctx, sizeof(int32_t) * nv);
  out->last = loom_malloc(ctx, sizeof(int32_t) * nv);
  out->root = loom_malloc(ctx, sizeof(int32_t) * nv);
  int32_t *end = loom_malloc(ctx, sizeof(int32_t) * nv); /* per root */
  bool *released = loom_calloc(ctx, nv, sizeof *released); /* per root */
  /* the async steps joined at each step, as lists: joined_head[j], then
   * joined_next[k] */
  size_t ns = (size_t)(n_steps ? n_steps : 1);
  int32_t *joined_head = loom_malloc(ctx, sizeof(int32_t) * ns);
  int32_t *joined_next = loom_malloc(ctx, sizeof(int32_t) * ns);
  if (!out->offset || !out->size || !out->first || !out->last || !out->root || !end ||
      !released || !joined_head || !joined_next) {
    free(joined_head);
    free(joined_next);
    free(end);
    free(released);
    loom_memplan_free(out);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  loom_status st = plan_ranges(g, n_steps, steps, materialized, out);
  if (!st) st = plan_in_place(g, n_steps, steps, out);
  if (st) {
    free(joined_head);
    free(joined_next);
    free(end);
    free(released);
    loom_memplan_free(out);
    return st;
  }
  /* Offsets and peaks are sums of buffer sizes: bound the sum of them all
   * once so that no later sum can overflow. */
  int64_t all = 0;
  for (int32_t v = 0; v < g->n_values && !st; v++)
    if (out->root[v] == v && out->first[v] >= 0 &&
        (loom_add_overflows(all, align_up(out->size[v]), &all) || all > INT64_MAX / 2))
      st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY,
                      "memplan: the graph's intermediate values need more than 2^62 bytes");
  if (st) {
    free(joined_head);
    free(joined_next);
    free(end);
    free(released);
    loom_memplan_free(out);
    return st;
  }
  /* a shared buffer lives until the last use of any value in it */
  for (int32_t v = 0; v < g->n_values; v++)
    end[v] = out->last[v];
  for (int32_t v = 0; v < g->n_values; v++)
    end[out->root[v]] = LOOM_MAX(end[out->root[v]], out->last[v]);

  for (int32_t j = 0; j < n_steps; j++) joined_head[j] = -1;
  for (int32_t k = n_steps - 1; k >= 0; k--) {
    int32_t join = LOOM_MIN(steps[k].join, n_steps - 1);
    if (join <= k) continue;
    joined_next[k] = joined_head[join];
    joined_head[join] = k;
  }
  planner p = {.ctx = ctx};
  for (int32_t j = 0; j < n_steps && !st; j++) {
    const loom_memplan_step *s = &steps[j];
    /* Outputs first: they must not reuse the memory of this step's inputs. */
    for (int32_t o = 0; o < s->n_out; o++) {
      int32_t v = s->out[o];
      if (out->root[v] != v)
        out->offset[v] = out->offset[out->root[v]];
      else
        out->offset[v] = plan_alloc(&p, align_up(out->size[v]));
    }
    /* Then release what dies here: this step's values, and those of the
     * async steps joined now. */
    if (!release_dead(&p, out, end, released, s, j)) st = LOOM_STATUS_OUT_OF_MEMORY;
    for (int32_t k = joined_head[j]; k >= 0 && !st; k = joined_next[k])
      if (!release_dead(&p, out, end, released, &steps[k], j)) st = LOOM_STATUS_OUT_OF_MEMORY;
  }
  free(p.free);
  free(released);
  free(joined_head);
  free(joined_next);
  out->peak_bytes = p.top;
  /* Keep the tighter of the two placements. */
  int64_t *off = st ? NULL : loom_malloc(ctx, sizeof(int64_t) * nv);
  int64_t peak = off ? place_by_size(ctx, g, out, end, off) : -1;
  if (!st && peak < 0) st = LOOM_STATUS_OUT_OF_MEMORY;
  if (!st && peak < out->peak_bytes) {
    for (int32_t v = 0; v < g->n_values; v++)
      if (out->offset[v] >= 0) out->offset[v] = off[out->root[v]];
    out->peak_bytes = peak;
  }
  free(off);
  free(end);
  if (st) {
    loom_memplan_free(out);
    return st;
  }
  return LOOM_STATUS_OK;
}

loom_status loom_memplan_build(const loom_graph *g, loom_memplan *out) {
  if (!out) return LOOM_STATUS_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  if (!g) return LOOM_STATUS_INVALID_ARGUMENT;
  loom_memplan_step *steps =
      loom_calloc(g->ctx, (size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *steps);
  if (!steps) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t j = 0; j < g->n_nodes; j++) {
    const loom_node *n = &g->nodes[j];
    steps[j] = (loom_memplan_step){.n_in = n->n_in, .n_out = n->n_out, .in = n->in, .out = n->out};
    /* a reshape's output is its input's bytes in the same order */
    if (n->op == LOOM_OP_RESHAPE && n->n_in == 1 && n->n_out == 1) {
      const loom_type *a = &g->values[n->in[0]].type, *b = &g->values[n->out[0]].type;
      steps[j].alias = loom_type_numel(a) * (int64_t)loom_dtype_size(a->dtype) ==
                       loom_type_numel(b) * (int64_t)loom_dtype_size(b->dtype);
    }
  }
  loom_status st = loom_memplan_build_steps(g, g->n_nodes, steps, NULL, out);
  free(steps);
  return st;
}
