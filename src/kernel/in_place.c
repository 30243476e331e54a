/* In-place updates: the check of kernel/in_place.h. */
#include "kernel/in_place.h"

#include <stdlib.h>
#include <string.h>

/* Marks in seen every expr that the outputs of part pi's stages depend
 * on: stage `only` (every stage when negative) but stage `except`. Exprs
 * are in topological order: one pass from the last down carries each
 * mark to the operands. */
static void mark_stages(const loom_kernel *k, int32_t pi, int32_t only, int32_t except,
                        uint8_t *seen) {
  const loom_kpart *part = &k->parts[pi];
  memset(seen, 0, (size_t)k->n_exprs);
  for (int32_t t = 0; t < part->n_stages; t++)
    for (int32_t o = 0; (only < 0 || t == only) && t != except && o < part->stages[t].n_out; o++)
      seen[part->stages[t].out[o].expr] = 1;
  for (int32_t e = k->n_exprs - 1; e >= 0; e--)
    for (int32_t i = 0; seen[e] && i < k->exprs[e].n_a; i++) seen[k->exprs[e].a[i]] = 1;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* True if map m sends distinct points of the part's domain (r fixed at 0
 * in a SCALAR stage) to distinct elements: sorted by stride, each stride
 * must exceed the span of all smaller ones (a mixed radix). */
static bool one_to_one(const loom_kmap *m, const loom_kpart *part, bool scalar) {
  int64_t dims[2 * LOOM_MAX_RANK][2]; /* |stride|, extent */
  int32_t n = 0;
  for (int32_t i = 0; i < part->p_rank; i++)
    if (part->p_shape[i] > 1) {
      dims[n][0] = m->p[i] < 0 ? -m->p[i] : m->p[i];
      dims[n++][1] = part->p_shape[i];
    }
  for (int32_t j = 0; !scalar && j < part->r_rank; j++)
    if (part->r_shape[j] > 1) {
      dims[n][0] = m->r[j] < 0 ? -m->r[j] : m->r[j];
      dims[n++][1] = part->r_shape[j];
    }
  qsort(dims, (size_t)n, sizeof dims[0], cmp_i64); /* by the first of each pair */
  int64_t span = 0;
  for (int32_t i = 0; i < n; i++) {
    if (dims[i][0] <= span) return false;
    span += dims[i][0] * (dims[i][1] - 1);
  }
  return true;
}

static bool same_map(const loom_kmap *a, const loom_kmap *b, const loom_kpart *part) {
  if (a->base != b->base) return false;
  for (int32_t i = 0; i < part->p_rank; i++)
    if (a->p[i] != b->p[i]) return false;
  for (int32_t j = 0; j < part->r_rank; j++)
    if (a->r[j] != b->r[j]) return false;
  return true;
}

bool loom_kernel_in_place_ok(const loom_kernel *k, int32_t in, int32_t out) {
  if (in < 0 || out < 0 || in >= k->n_args || out >= k->n_args || in == out) return false;
  const loom_karg *ai = &k->args[in], *ao = &k->args[out];
  if (ai->is_output || ai->temp || !ao->is_output || ao->temp || ai->dtype != ao->dtype ||
      ai->numel != ao->numel)
    return false;
  /* the one output that writes `out` */
  int32_t pw = -1, sw = -1;
  const loom_kout *w = NULL;
  for (int32_t pi = 0; pi < k->n_parts; pi++)
    for (int32_t s = 0; s < k->parts[pi].n_stages; s++)
      for (int32_t o = 0; o < k->parts[pi].stages[s].n_out; o++) {
        const loom_kout *ko = &k->parts[pi].stages[s].out[o];
        if (ko->target != out || (ko->dst != LOOM_KDST_STORE && ko->dst != LOOM_KDST_COL_REDUCE))
          continue;
        if (w || ko->dst != LOOM_KDST_STORE) return false;
        w = ko, pw = pi, sw = s;
      }
  if (!w) return false;
  const loom_kpart *part = &k->parts[pw];
  if (!one_to_one(&w->map, part, part->stages[sw].kind == LOOM_KSTAGE_SCALAR)) return false;
  uint8_t *seen = malloc((size_t)k->n_exprs + 1), *feeds = malloc((size_t)k->n_exprs + 1);
  bool ok = seen && feeds;
  if (ok) { /* what the stored value depends on */
    memset(feeds, 0, (size_t)k->n_exprs);
    feeds[w->expr] = 1;
    for (int32_t e = w->expr; e >= 0; e--)
      for (int32_t i = 0; feeds[e] && i < k->exprs[e].n_a; i++) feeds[k->exprs[e].a[i]] = 1;
  }
  for (int32_t pi = 0; ok && pi < k->n_parts; pi++) {
    /* no load of `in` in another stage of the writer's part, nor in a
     * part of the same or a later phase */
    if (pi != pw && k->parts[pi].phase < part->phase) continue;
    mark_stages(k, pi, -1, pi == pw ? sw : -1, seen);
    for (int32_t e = 0; ok && e < k->n_exprs; e++)
      if (seen[e] && k->exprs[e].kind == LOOM_KX_LOAD && k->exprs[e].arg == in) ok = false;
  }
  if (ok) { /* the writing stage: every load of `in` feeds the store, at its map */
    mark_stages(k, pw, sw, -1, seen);
    for (int32_t e = 0; ok && e < k->n_exprs; e++) {
      const loom_kexpr *x = &k->exprs[e];
      if (seen[e] && x->kind == LOOM_KX_LOAD && x->arg == in)
        ok = feeds[e] && same_map(&x->map, &w->map, part);
    }
  }
  free(seen);
  free(feeds);
  return ok;
}

int32_t loom_kernel_in_place_inputs(const loom_kernel *k, int32_t out, int32_t *in, int32_t max) {
  if (out < 0 || out >= k->n_args || !k->args[out].is_output) return 0;
  const loom_kout *w = NULL;
  const loom_kpart *part = NULL;
  for (int32_t pi = 0; pi < k->n_parts && !w; pi++)
    for (int32_t s = 0; s < k->parts[pi].n_stages && !w; s++)
      for (int32_t o = 0; o < k->parts[pi].stages[s].n_out && !w; o++)
        if (k->parts[pi].stages[s].out[o].target == out &&
            k->parts[pi].stages[s].out[o].dst == LOOM_KDST_STORE)
          w = &k->parts[pi].stages[s].out[o], part = &k->parts[pi];
  if (!w) return 0;
  /* the candidates: arguments the stored value loads at its own map */
  uint8_t *feeds = calloc((size_t)k->n_exprs + 1, 1), *cand = calloc((size_t)k->n_args + 1, 1);
  int32_t n = 0;
  if (feeds && cand) {
    feeds[w->expr] = 1;
    for (int32_t e = w->expr; e >= 0; e--) {
      const loom_kexpr *x = &k->exprs[e];
      if (!feeds[e]) continue;
      for (int32_t i = 0; i < x->n_a; i++) feeds[x->a[i]] = 1;
      if (x->kind == LOOM_KX_LOAD && same_map(&x->map, &w->map, part)) cand[x->arg] = 1;
    }
    for (int32_t a = 0; a < k->n_args; a++)
      if (cand[a] && loom_kernel_in_place_ok(k, a, out)) {
        if (n < max) in[n] = a;
        n++;
      }
  }
  free(feeds);
  free(cand);
  return n;
}
