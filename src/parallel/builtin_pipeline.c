/*
 * The pipeline axis of the built-in plans: every node goes to a stage —
 * a parameter's layer decides it (hN.* in layer N, the embedding in the
 * first stage, the final norm in the last), forward nodes take the latest
 * stage of what they read, backward nodes the earliest stage of where
 * what they read is used — then the batch is cut into micro-batches that
 * stay on their stage's device (op_trans + op_assign), and each device's
 * micro-batch sub-ops are chained by op_order into the schedule:
 *
 *   gpipe: every forward micro-batch, then every backward one;
 *   1f1b:  stage s of S runs S-1-s forwards to fill the pipe, then one
 *          forward and one backward in turn, then the remaining backwards
 *          (PipeDream-Flush / Megatron's schedule: at most S-s micro-batches'
 *          activations alive at once).
 *
 * Interleaved 1F1B holds v chunks of layers a device (+interleavedV), and
 * +recompute recomputes a micro-batch's layers in its backward slot.
 *
 * Weight gradients are partial sums over micro-batches on one device; the
 * lowering adds them there (gradient accumulation). Nodes the batch does
 * not reach (the optimizer) are not cut and run when their data is ready.
 */
#include "parallel/builtin_internal.h"

#include <stdlib.h>
#include <string.h>

/* The layer of a parameter or AdamW moment: N for "hN.*", -1 for the
 * embeddings, INT32_MAX for the rest (the final norm). */
static int32_t layer_of(const char *name) {
  if (strncmp(name, "adam.m.", 7) == 0 || strncmp(name, "adam.v.", 7) == 0) name += 7;
  if (name[0] == 'h' && name[1] >= '0' && name[1] <= '9') return atoi(name + 1);
  if (strcmp(name, "wte") == 0 || strcmp(name, "wpe") == 0) return -1;
  return INT32_MAX;
}

typedef struct stages {
  int32_t *node;   /* per node: its stage */
  int32_t *value;  /* per value: producer's stage, a parameter's, -1 free */
  int32_t *use;    /* per value: the latest stage of a forward node reading it */
  bool *forward;   /* per node: an ancestor of the loss */
} stages;

/* Stages are first found per layer ("fine": 0 the embeddings, 1..L the
 * layers, L+1 the final norm and head), then mapped onto the pipeline's
 * S stages; max and min commute with the monotone map. */
static int32_t fine_stage(const char *name, int32_t n_layers) {
  int32_t l = layer_of(name);
  if (l < 0) return 0;
  if (l >= n_layers) return n_layers + 1;
  return l + 1;
}

static int32_t pipeline_stage(int32_t fine, int32_t n_layers, int32_t S) {
  if (fine <= 0) return 0;
  if (fine > n_layers) return S - 1;
  return (int32_t)((int64_t)(fine - 1) * S / n_layers);
}

static loom_status assign_stages(const loom_graph *g, int32_t S, stages *st, int32_t *n_layers_out) {
  int32_t n_layers = 0;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    int32_t l = layer_of(g->values[g->inputs[i]].name);
    if (l >= 0 && l != INT32_MAX && l + 1 > n_layers) n_layers = l + 1;
  }
  if (n_layers < S)
    return loom_error(g->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: a pipeline of %d stages needs at least %d layers (hN.* parameters), "
                      "the graph has %d",
                      S, S, n_layers);
  for (int32_t v = 0; v < g->n_values; v++) st->value[v] = st->use[v] = -1;
  for (int32_t i = 0; i < g->n_inputs; i++) {
    int32_t v = g->inputs[i];
    bool state = g->values[v].kind == LOOM_VALUE_PARAM || layer_of(g->values[v].name) != INT32_MAX ||
                 strncmp(g->values[v].name, "adam.", 5) == 0;
    if (state) st->value[v] = fine_stage(g->values[v].name, n_layers);
  }
  /* the loss's ancestors are the forward pass */
  memset(st->forward, 0, sizeof *st->forward * (size_t)g->n_nodes);
  if (g->n_outputs > 0 && g->values[g->outputs[0]].node >= 0) {
    st->forward[g->values[g->outputs[0]].node] = true;
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
      if (!st->forward[i]) continue;
      for (int32_t k = 0; k < g->nodes[i].n_in; k++) {
        int32_t p = g->values[g->nodes[i].in[k]].node;
        if (p >= 0) st->forward[p] = true;
      }
    }
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const loom_node *n = &g->nodes[i];
    int32_t s = -1;
    for (int32_t k = 0; k < n->n_in; k++) {
      int32_t v = n->in[k], vs;
      if (st->forward[i]) {
        vs = st->value[v];
        if (vs > s) s = vs;
      } else {
        /* what the forward read (its activations, and parameters: a tied
         * embedding is read by the head on the last stage too) places a
         * backward node where the forward last read it */
        vs = st->use[v] >= 0 ? st->use[v] : st->value[v];
        if (vs >= 0 && (s < 0 || vs < s)) s = vs;
      }
    }
    st->node[i] = s;
    for (int32_t o = 0; o < n->n_out; o++) st->value[n->out[o]] = s;
    if (st->forward[i])
      for (int32_t k = 0; k < n->n_in; k++)
        if (s > st->use[n->in[k]]) st->use[n->in[k]] = s;
  }
  /* what reads nothing placed (constants): with its first reader */
  for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
    if (st->node[i] >= 0) continue;
    int32_t s = -1;
    for (int32_t j = i + 1; j < g->n_nodes; j++)
      for (int32_t k = 0; k < g->nodes[j].n_in; k++) {
        int32_t p = g->values[g->nodes[j].in[k]].node;
        if (p == i && st->node[j] >= 0 && (s < 0 || st->node[j] < s)) s = st->node[j];
      }
    st->node[i] = s >= 0 ? s : 0;
  }
  *n_layers_out = n_layers;
  return LOOM_STATUS_OK;
}

/* Whether a forward node's results stay inside its layer (fine stage
 * 1..L): no forward node of another stage reads them. A layer's other
 * results are its outputs, its checkpoint: kept, never recomputed. */
static bool stays_in_layer(const loom_graph *g, const stages *st, int32_t node,
                           int32_t n_layers) {
  int32_t f = st->node[node];
  if (!st->forward[node] || f < 1 || f > n_layers) return false;
  const loom_node *n = &g->nodes[node];
  for (int32_t u = node + 1; u < g->n_nodes; u++)
    if (st->forward[u] && st->node[u] != f)
      for (int32_t k = 0; k < g->nodes[u].n_in; k++)
        for (int32_t o = 0; o < n->n_out; o++)
          if (g->nodes[u].in[k] == n->out[o]) return false;
  return true;
}

/* Cuts leaf s into a pair of replicas on its device, the second (the
 * recomputation) read by the backward: reads_last. *copy gets its id. */
static loom_status recompute_pair(loom_plan *p, int32_t s, int32_t *copy) {
  int32_t first = -1, dev = p->subops[s].device;
  LOOM_TRY(loom_op_trans(p, s, (loom_algo){LOOM_ALGO_REPLICATE, 0}, 2, &first));
  LOOM_TRY(loom_op_assign(p, first, dev));
  LOOM_TRY(loom_op_assign(p, first + 1, dev));
  p->subops[first + 1].reads_last = true;
  *copy = first + 1;
  return LOOM_STATUS_OK;
}

/* +recompute with a pipeline: every micro-batch part of a node that stays
 * in its layer becomes a pair (recompute_pair), and every backward part
 * reads the copies; the schedule runs a micro-batch's copies in its
 * backward slot, just before its backward nodes (Megatron's full
 * recomputation: only the layers' inputs live between a micro-batch's
 * forward and backward). */
static loom_status pipeline_recompute(loom_plan *p, const stages *st, int32_t n_layers,
                                      int32_t micro_first) {
  const loom_graph *g = p->graph;
  int32_t n0 = p->n_subops;
  for (int32_t i = 0; i < n0; i++)
    if (!p->subops[i].n_children && !st->forward[p->subops[i].node]) p->subops[i].reads_last = true;
  for (int32_t node = 0; node < g->n_nodes; node++) {
    if (!stays_in_layer(g, st, node, n_layers)) continue;
    int32_t *leaves = NULL, nl = 0, copy;
    loom_status s = loom_plan_leaves(p, node, &leaves, &nl);
    for (int32_t k = 0; !s && k < nl; k++)
      if (leaves[k] >= micro_first && leaves[k] < n0) s = recompute_pair(p, leaves[k], &copy);
    free(leaves);
    LOOM_TRY(s);
  }
  return LOOM_STATUS_OK;
}

typedef struct slot {
  int64_t key; /* schedule position, then node */
  int32_t subop;
} slot;

static int cmp_slot(const void *a, const void *b) {
  const slot *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->subop - y->subop;
}

/* Position of (forward?, micro-batch mb) in stage s's schedule of m. */
static int32_t position(pp_schedule sched, int32_t S, int32_t s, int32_t m, bool fwd, int32_t mb) {
  if (sched == PP_GPIPE) return fwd ? mb : m + mb;
  int32_t warm = S - 1 - s < m ? S - 1 - s : m;
  /* forwards 0..warm-1 first; then F(warm + j) at 2j + warm, B(j) at 2j + warm + 1 */
  if (fwd) return mb < warm ? mb : warm + 2 * (mb - warm);
  if (mb < m - warm) return warm + 2 * mb + 1;
  return warm + 2 * (m - warm) + (mb - (m - warm));
}

/* Interleaved 1F1B (Megatron's virtual pipeline): stage s holds chunks
 * s, s+S, ..., v of them; forward step k runs chunk (k / S) % v of
 * micro-batch (k / (S v)) S + k % S, backward step k the chunks in reverse;
 * (S-1-s)*2 + (v-1)*S warm-up forwards, then one forward and one backward
 * in turn. pos[(fwd * v + chunk) * m + mb] gets each step's position. */
static void interleaved_positions(int32_t S, int32_t s, int32_t v, int32_t m, int32_t *pos) {
  int32_t total = m * v, warm = (S - 1 - s) * 2 + (v - 1) * S, at = 0;
  if (warm > total) warm = total;
#define STEP(fwd, k)                                                                               \
  do {                                                                                             \
    int32_t c_ = ((k) / S) % v, mb_ = ((k) / (S * v)) * S + (k) % S;                               \
    if (!(fwd)) c_ = v - 1 - c_;                                                                   \
    pos[((fwd) * v + c_) * m + mb_] = at++;                                                        \
  } while (0)
  for (int32_t k = 0; k < warm; k++) STEP(1, k);
  for (int32_t k = 0; k < total - warm; k++) {
    STEP(1, warm + k);
    STEP(0, k);
  }
  for (int32_t k = total - warm; k < total; k++) STEP(0, k);
#undef STEP
}

loom_status builtin_pipeline(loom_plan *p, const spec *sp, int32_t degree, int32_t stride) {
  loom_ctx *ctx = p->ctx;
  const loom_graph *g = p->graph;
  int32_t S = degree, m = sp->micro > 0 ? sp->micro : degree;
  int32_t v = sp->schedule == PP_INTERLEAVED ? sp->chunks : 1; /* chunks per device */
  if (v > 1 && m % S)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "plan: interleaved 1F1B runs micro-batches in groups of the %d stages; %d "
                      "micro-batches do not divide into them",
                      S, m);
  stages st = {loom_malloc(ctx, sizeof(int32_t) * (size_t)(g->n_nodes + 1)),
               loom_malloc(ctx, sizeof(int32_t) * (size_t)(g->n_values + 1)),
               loom_malloc(ctx, sizeof(int32_t) * (size_t)(g->n_values + 1)),
               loom_malloc(ctx, sizeof(bool) * (size_t)(g->n_nodes + 1))};
  loom_status s = st.node && st.value && st.use && st.forward ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  int32_t n_layers = 0;
  if (!s) s = assign_stages(g, S * v, &st, &n_layers);
  /* interlaced: the embedding and the head (fine stages 0 and L+1) are
   * cut tensor-parallel across every stage's device; the rest go to their
   * stage. Stages: shift every leaf to its stage's device. */
  axis_cut across = {.p = p, .kind = AXIS_TP, .degree = S, .stride = stride};
  if (!s && sp->interlaced) {
    across.state = loom_malloc(ctx, sizeof *across.state * (size_t)(g->n_values + 1));
    if (!across.state) s = LOOM_STATUS_OUT_OF_MEMORY;
    else builtin_seed(&across, sp);
  }
  for (int32_t node = 0; !s && node < g->n_nodes; node++) {
    bool region = st.node[node] == 0 || st.node[node] == n_layers + 1;
    if (sp->interlaced && region) {
      s = builtin_cut_node(&across, node);
      continue;
    }
    int32_t *leaves = NULL, n = 0;
    s = loom_plan_leaves(p, node, &leaves, &n);
    /* virtual stage vs is chunk vs / S of device vs % S */
    int32_t stage = pipeline_stage(st.node[node], n_layers, S * v) % S;
    for (int32_t k = 0; !s && k < n; k++) {
      int32_t base = p->subops[leaves[k]].device;
      s = loom_op_assign(p, leaves[k], (base < 0 ? 0 : base) + stage * stride);
    }
    free(leaves);
  }
  free(across.state);
  /* micro-batches: the batch cut, every part on its own device */
  int32_t micro_first = p->n_subops;
  axis_cut ax = {.p = p, .kind = AXIS_DP, .degree = m, .stride = 0};
  ax.state = loom_malloc(ctx, sizeof *ax.state * (size_t)(g->n_values + 1));
  if (!s && !ax.state) s = LOOM_STATUS_OUT_OF_MEMORY;
  if (!s) {
    spec plain = {0};
    builtin_seed(&ax, &plain);
    for (int32_t node = 0; !s && node < g->n_nodes; node++) s = builtin_cut_node(&ax, node);
  }
  /* a node of the forward pass the batch reaches but cannot cut would
   * wait for every micro-batch: no pipeline, and a cycle in the chain */
  for (int32_t node = 0; !s && node < g->n_nodes; node++) {
    if (!st.forward[node]) continue;
    int32_t *leaves = NULL, n = 0;
    s = loom_plan_leaves(p, node, &leaves, &n);
    bool cut = n > 0 && leaves[0] >= micro_first;
    free(leaves);
    if (s || cut) continue;
    bool reached = false;
    for (int32_t k = 0; k < g->nodes[node].n_in; k++) reached |= ax.state[g->nodes[node].in[k]] >= 0;
    if (!reached) continue;
    char name[96];
    s = loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                   "plan: pipeline: %s reads micro-batched values but its partition annotation "
                   "cannot cut it by the batch, so no stage could start the next micro-batch "
                   "before it",
                   loom_subop_name(p, node, name, sizeof name));
  }
  if (!s && sp->recompute) s = pipeline_recompute(p, &st, n_layers, micro_first);
  /* the schedule: chain each device's micro-batch parts */
  slot *slots = NULL;
  int32_t n_slots = 0;
  if (!s) {
    slots = loom_malloc(ctx, sizeof *slots * (size_t)(p->n_subops - micro_first + 1));
    if (!slots) s = LOOM_STATUS_OUT_OF_MEMORY;
  }
  int32_t *ipos = NULL;
  if (!s && v > 1) {
    ipos = loom_malloc(ctx, sizeof *ipos * (size_t)(2 * v * m));
    if (!ipos) s = LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t d = 0; !s && d < p->n_devices; d++) {
    n_slots = 0;
    int32_t stage = (d / stride) % S;
    if (ipos) interleaved_positions(S, stage, v, m, ipos);
    for (int32_t i = micro_first; i < p->n_subops; i++) {
      const loom_subop *sub = &p->subops[i];
      if (sub->n_children || sub->device != d) continue;
      pp_schedule sched = sp->interlaced ? PP_GPIPE : sp->schedule;
      bool fwd = st.forward[sub->node];
      int32_t mb = sub->index;
      if (sub->parent >= micro_first) { /* a recomputation pair: the copy runs with the backward */
        mb = p->subops[sub->parent].index;
        fwd = fwd && sub->index == 0;
      }
      int32_t pos;
      if (ipos) {
        int32_t chunk = pipeline_stage(st.node[sub->node], n_layers, S * v) / S;
        pos = ipos[((fwd ? 1 : 0) * v + chunk) * m + mb];
      } else {
        pos = position(sched, S, stage, m, fwd, mb);
      }
      slots[n_slots++] = (slot){(int64_t)pos * g->n_nodes + sub->node, i};
    }
    qsort(slots, (size_t)n_slots, sizeof *slots, cmp_slot);
    for (int32_t k = 1; !s && k < n_slots; k++) s = loom_op_order(p, slots[k - 1].subop, slots[k].subop);
  }
  free(slots);
  free(ipos);
  free(ax.state);
  free(st.node);
  free(st.value);
  free(st.use);
  free(st.forward);
  return s;
}

/* ---- activation recomputation ------------------------------------------------ */

/*
 * +recompute: every forward node inside a layer whose result stays in the
 * layer (the layer's output, its checkpoint, is kept) gets a second
 * replica on the same device; the copy reads the copies (reads_last), the
 * backward reads the copies, and op_order starts a layer's copies only
 * once the backward of the layer above is done. The originals' results
 * then die with the forward pass, and the layer is computed again where
 * its backward needs it (Megatron's full recomputation).
 */
loom_status builtin_recompute(loom_plan *p) {
  loom_ctx *ctx = p->ctx;
  const loom_graph *g = p->graph;
  stages st = {loom_malloc(ctx, sizeof(int32_t) * (size_t)(g->n_nodes + 1)),
               loom_malloc(ctx, sizeof(int32_t) * (size_t)(g->n_values + 1)),
               loom_malloc(ctx, sizeof(int32_t) * (size_t)(g->n_values + 1)),
               loom_malloc(ctx, sizeof(bool) * (size_t)(g->n_nodes + 1))};
  int32_t n_layers = 0;
  loom_status s = st.node && st.value && st.use && st.forward ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  if (!s) s = assign_stages(g, 1, &st, &n_layers);
  /* per device and fine stage: its last backward leaf (the trigger: the
   * layer below recomputes once the layer above is done with its backward,
   * which reads only its own copies and the kept layer outputs) */
  int32_t nf = n_layers + 2;
  int32_t *trigger = NULL;
  if (!s) {
    trigger = loom_malloc(ctx, sizeof *trigger * (size_t)p->n_devices * (size_t)nf);
    if (!trigger) s = LOOM_STATUS_OUT_OF_MEMORY;
    for (int64_t i = 0; trigger && i < (int64_t)p->n_devices * nf; i++) trigger[i] = -1;
  }
  for (int32_t i = 0; !s && i < p->n_subops; i++) {
    loom_subop *sub = &p->subops[i];
    if (sub->n_children || st.forward[sub->node]) continue;
    sub->reads_last = true; /* the backward reads the recomputed copies */
    int32_t *t = &trigger[(int64_t)sub->device * nf + st.node[sub->node]];
    if (*t < 0 || p->subops[*t].node < sub->node) *t = i;
  }
  int32_t n0 = p->n_subops;
  for (int32_t node = 0; !s && node < g->n_nodes; node++) {
    if (!stays_in_layer(g, &st, node, n_layers)) continue;
    int32_t f = st.node[node];
    int32_t *leaves = NULL, nl = 0;
    s = loom_plan_leaves(p, node, &leaves, &nl);
    for (int32_t k = 0; !s && k < nl; k++) {
      if (leaves[k] >= n0) continue;
      int32_t dev = p->subops[leaves[k]].device, copy = -1;
      s = recompute_pair(p, leaves[k], &copy);
      /* after the backward of the layer above has begun on this device */
      int32_t t = -1;
      for (int32_t up = f + 1; !s && up < nf && t < 0; up++) t = trigger[(int64_t)dev * nf + up];
      if (!s && t >= 0) s = loom_op_order(p, t, copy);
    }
    free(leaves);
  }
  free(trigger);
  free(st.node);
  free(st.value);
  free(st.use);
  free(st.forward);
  return s;
}
