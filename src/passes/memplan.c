#include "passes/memplan.h"

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
  memset(p, 0, sizeof *p);
}

loom_status loom_memplan_build(const loom_graph *g, loom_memplan *out) {
  if (!out) return LOOM_STATUS_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  if (!g) return LOOM_STATUS_INVALID_ARGUMENT;
  loom_ctx *ctx = g->ctx;
  size_t nv = (size_t)(g->n_values ? g->n_values : 1);
  out->n_values = g->n_values;
  out->offset = loom_malloc(ctx, sizeof(int64_t) * nv);
  out->size = loom_malloc(ctx, sizeof(int64_t) * nv);
  out->first = loom_malloc(ctx, sizeof(int32_t) * nv);
  out->last = loom_malloc(ctx, sizeof(int32_t) * nv);
  out->root = loom_malloc(ctx, sizeof(int32_t) * nv);
  int32_t *end = loom_malloc(ctx, sizeof(int32_t) * nv); /* per root */
  if (!out->offset || !out->size || !out->first || !out->last || !out->root || !end) {
    free(end);
    loom_memplan_free(out);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t v = 0; v < g->n_values; v++) {
    const loom_value_info *vi = &g->values[v];
    out->offset[v] = -1;
    out->size[v] = loom_type_numel(&vi->type) * (int64_t)loom_dtype_size(vi->type.dtype);
    out->first[v] = vi->kind == LOOM_VALUE_NODE ? vi->node : -1;
    out->last[v] = out->first[v];
    out->root[v] = v;
  }
  for (int32_t j = 0; j < g->n_nodes; j++) {
    const loom_node *n = &g->nodes[j];
    for (int32_t i = 0; i < n->n_in; i++)
      out->last[n->in[i]] = j;
    if (n->op == LOOM_OP_RESHAPE && n->n_in == 1 && n->n_out == 1 &&
        out->size[n->out[0]] == out->size[n->in[0]])
      out->root[n->out[0]] = out->root[n->in[0]];
  }
  for (int32_t i = 0; i < g->n_outputs; i++)
    out->last[g->outputs[i]] = g->n_nodes;
  /* a shared buffer lives until the last use of any value in it */
  for (int32_t v = 0; v < g->n_values; v++)
    end[v] = out->last[v];
  for (int32_t v = 0; v < g->n_values; v++)
    end[out->root[v]] = LOOM_MAX(end[out->root[v]], out->last[v]);

  planner p = {.ctx = ctx};
  loom_status st = LOOM_STATUS_OK;
  for (int32_t j = 0; j < g->n_nodes && !st; j++) {
    const loom_node *n = &g->nodes[j];
    /* Outputs first: they must not reuse the memory of this node's inputs. */
    for (int32_t o = 0; o < n->n_out; o++) {
      int32_t v = n->out[o];
      if (out->root[v] != v)
        out->offset[v] = out->offset[out->root[v]];
      else
        out->offset[v] = plan_alloc(&p, align_up(out->size[v]));
    }
    /* Then release what dies here (each value once, even if read twice). */
    for (int32_t k = 0; k < n->n_in + n->n_out && !st; k++) {
      int32_t v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
      v = out->root[v];
      if (end[v] != j || out->offset[v] < 0) continue;
      bool dup = false;
      for (int32_t e = 0; e < k && !dup; e++)
        dup = out->root[e < n->n_in ? n->in[e] : n->out[e - n->n_in]] == v;
      if (dup) continue;
      int64_t sz = align_up(out->size[v]);
      if (sz && !plan_release(&p, out->offset[v], sz)) st = LOOM_STATUS_OUT_OF_MEMORY;
    }
  }
  free(p.free);
  free(end);
  if (st) {
    loom_memplan_free(out);
    return st;
  }
  out->peak_bytes = p.top;
  return LOOM_STATUS_OK;
}
