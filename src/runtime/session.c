/*
 * Sessions: a graph decomposed, verified and prepared for one backend (which
 * may fuse it into generated kernels) and memory-planned. Values in memory
 * live in one arena at the plan's offsets; inputs are read in place from
 * the caller's tensors; outputs are copied out at the end.
 */
#include "runtime/session.h"

#include "ir/dtype.h"
#include "passes/memplan.h"
#include "passes/simplify.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct loom_session {
  loom_ctx *ctx;
  loom_graph *g; /* the session's own, decomposed graph */
  loom_backend *backend;
  loom_prepared prep; /* the backend's state, memory plan, stats, warning */
  bool *supported;    /* per node of g: supports_op's answer (prep.supported) */
  void *arena;
  loom_view *values; /* one per value of g; inputs filled per run */
  /* A run is in progress: values, the arena and the backend's per-run
   * state belong to it, so a second thread is refused (loom.h). */
  atomic_flag running;
  /* Per graph input: the session's copy of a frozen input, or NULL
   * (loom_session_freeze_input); n_frozen of them. */
  loom_tensor **frozen;
  int32_t n_frozen;
  int32_t n_in_place; /* outputs the last run computed in an input's memory */
};

void loom_session_free(loom_session *s) {
  if (!s) return;
  if (s->arena) s->backend->iface->buffer_free(s->backend->context, s->arena);
  if (s->prep.handle) s->backend->iface->release(s->backend->context, s->prep.handle);
  loom_backend_free(s->backend);
  loom_memplan_free(&s->prep.plan);
  for (int32_t i = 0; s->frozen && i < s->g->n_inputs; i++) loom_tensor_free(s->frozen[i]);
  free(s->frozen);
  free(s->values);
  free(s->supported);
  loom_graph_free(s->g);
  free(s);
}

/* A pass reports on the graph's context; bring its message to ours. */
static loom_status forward_error(loom_ctx *ctx, const loom_graph *g, loom_status st,
                                 const char *what) {
  if (g->ctx != ctx) loom_error(ctx, st, "%s", loom_ctx_error(g->ctx));
  loom_error_prefix(ctx, "session: %s", what);
  return st;
}

/* Runs backend b's graph rewrite (if it has one) with checked options:
 * *out is a new graph, or NULL. */
static loom_status rewrite(loom_ctx *ctx, const loom_backend *b, const loom_graph *g,
                           const loom_session_options *opts, loom_graph **out,
                           int32_t *n_rewritten) {
  *out = NULL;
  *n_rewritten = 0;
  if (!b->iface->rewrite) return LOOM_STATUS_OK;
  loom_status st = b->iface->rewrite(b->context, ctx, g, opts, out, n_rewritten);
  if (st) {
    loom_error_prefix(ctx, "%s backend: graph rewrite", b->iface->name);
    *out = NULL;
  }
  return st;
}

/* The caller's options as this library's struct: the fields the caller's
 * struct_size covers, defaults for the rest (a caller built against an
 * older loom.h); each mode checked, even where it does not apply (ref). */
static loom_status read_options(loom_ctx *ctx, const loom_session_options *opts,
                                loom_session_options *o) {
  loom_session_options_init(o);
  if (!opts) return LOOM_STATUS_OK;
  if (opts->struct_size == 0 || opts->struct_size > sizeof *o)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "session options: struct_size is %zu (this library knows %zu): make "
                      "options with LOOM_SESSION_OPTIONS(...) or loom_session_options_init",
                      opts->struct_size, sizeof *o);
  memcpy(o, opts, opts->struct_size);
  o->struct_size = sizeof *o;
  if ((unsigned)o->fusion >= LOOM_FUSION_COUNT)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "session options: unknown fusion mode %d (known: " LOOM_FUSION_MODE_NAMES ")",
                      (int)o->fusion);
  if ((unsigned)o->attention >= LOOM_ATTENTION_COUNT)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "session options: unknown attention mode %d (known: " LOOM_ATTENTION_MODE_NAMES
                      ")",
                      (int)o->attention);
  if ((unsigned)o->rng >= LOOM_RNG_COUNT)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "session options: unknown rng placement %d (known: " LOOM_RNG_PLACEMENT_NAMES ")",
                      (int)o->rng);
  if ((unsigned)o->gemm >= LOOM_GEMM_COUNT)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "session options: unknown gemm precision %d (known: " LOOM_GEMM_PRECISION_NAMES
                      ")",
                      (int)o->gemm);
  return LOOM_STATUS_OK;
}

/* Here, not in backend.c: it shares the session's option checks. */
loom_status loom_backend_rewrite(loom_ctx *ctx, const loom_session_options *opts,
                                 const loom_graph *g, loom_graph **out, int32_t *n_rewritten) {
  if (!out || !g)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "backend_rewrite: NULL argument");
  *out = NULL;
  int32_t n = 0;
  loom_session_options o;
  LOOM_TRY(read_options(ctx, opts, &o));
  loom_backend *b = NULL;
  LOOM_TRY(loom_backend_new(ctx, o.backend ? o.backend : LOOM_BACKEND_DEFAULT, &b));
  loom_status st = rewrite(ctx, b, g, &o, out, &n);
  loom_backend_free(b);
  if (n_rewritten) *n_rewritten = n;
  return st;
}

/* Which nodes the backend runs itself: supports_op, asked once per node. */
static loom_status assign_nodes(loom_session *s) {
  const loom_graph *g = s->g;
  s->supported = loom_calloc(s->ctx, (size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *s->supported);
  if (!s->supported) return LOOM_STATUS_OUT_OF_MEMORY;
  const loom_backend *b = s->backend;
  for (int32_t i = 0; i < g->n_nodes; i++)
    s->supported[i] = b->iface->supports_op(b->context, g, &g->nodes[i]);
  return LOOM_STATUS_OK;
}

loom_status loom_session_new(loom_ctx *ctx, const loom_graph *g, const loom_session_options *user,
                             loom_session **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "session_new: out is NULL");
  *out = NULL;
  if (!ctx) return LOOM_STATUS_INVALID_ARGUMENT;
  if (!g) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "session_new: graph is NULL");
  loom_session_options options, *opts = &options;
  LOOM_TRY(read_options(ctx, user, opts));
  const char *bname = opts->backend ? opts->backend : LOOM_BACKEND_DEFAULT;
  loom_session *s = loom_calloc(ctx, 1, sizeof *s);
  if (!s) return LOOM_STATUS_OUT_OF_MEMORY;
  s->ctx = ctx;
  atomic_flag_clear(&s->running);
  loom_status st = loom_backend_new(ctx, bname, &s->backend);
  if (st) goto fail;
  /* The graph passes, each followed by the verifier. */
  loom_graph *lowered = NULL, *rewritten = NULL;
  int32_t n_rewritten = 0;
  st = rewrite(ctx, s->backend, g, opts, &rewritten, &n_rewritten);
  if (st) goto fail;
  st = loom_graph_decompose(rewritten ? rewritten : g, &lowered);
  loom_graph_free(rewritten);
  if (st) {
    forward_error(ctx, g, st, "decompose");
    goto fail;
  }
  lowered->ctx = ctx; /* later errors belong to the session's context */
  st = loom_graph_verify(lowered);
  if (!st) st = loom_graph_simplify(lowered, &s->g);
  loom_graph_free(lowered);
  if (!st) st = loom_graph_verify(s->g);
  if (!st && s->backend->iface->finish) { /* the backend's own last form, dead code removed */
    loom_graph *fin = NULL, *simple = NULL;
    st = s->backend->iface->finish(s->backend->context, ctx, s->g, opts, &fin);
    if (!st && fin) st = loom_graph_simplify(fin, &simple);
    loom_graph_free(fin);
    if (!st && simple) {
      loom_graph_free(s->g);
      s->g = simple;
      st = loom_graph_verify(s->g);
    }
  }
  if (st) {
    loom_error_prefix(ctx, "session: after decompose and simplify");
    goto fail;
  }
  loom_session_stats *stats = &s->prep.stats;
  loom_count_ops(s->g, &stats->n_primitive_ops, &stats->n_memory_ops, NULL);
  st = assign_nodes(s);
  if (st) goto fail;
  s->prep.supported = s->supported;
  st = s->backend->iface->prepare(s->backend->context, ctx, s->g, opts, &s->prep);
  if (st) {
    memset(&s->prep, 0, sizeof s->prep); /* a failed prepare leaves nothing */
    s->prep.supported = s->supported;
    goto fail;
  }
  stats->peak_bytes = s->prep.plan.peak_bytes;
  s->arena = s->backend->iface->buffer_alloc(s->backend->context, (size_t)s->prep.plan.peak_bytes);
  if (!s->arena) {
    st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "session: cannot allocate the %lld-byte arena",
                    (long long)s->prep.plan.peak_bytes);
    goto fail;
  }
  s->values = loom_calloc(ctx, (size_t)(s->g->n_values ? s->g->n_values : 1), sizeof *s->values);
  if (!s->values) {
    st = LOOM_STATUS_OUT_OF_MEMORY;
    goto fail;
  }
  for (int32_t v = 0; v < s->g->n_values; v++) {
    int64_t off = s->prep.plan.offset[v];
    s->values[v] = loom_view_of(&s->g->values[v].type, off >= 0 ? (char *)s->arena + off : NULL);
  }
  *out = s;
  return LOOM_STATUS_OK;
fail:
  loom_session_free(s);
  return st;
}

int32_t loom_session_last_in_place(const loom_session *s) { return s ? s->n_in_place : 0; }

int64_t loom_session_peak_bytes(const loom_session *s) { return s ? s->prep.plan.peak_bytes : 0; }

loom_status loom_session_get_stats_sized(const loom_session *s, loom_session_stats *out,
                                         size_t out_size) {
  if (!s || !out || out_size == 0) return LOOM_STATUS_INVALID_ARGUMENT;
  loom_session_stats now = s->prep.stats;
  now.n_frozen_inputs = s->n_frozen;
  const loom_backend *b = s->backend;
  if (b->iface->packed && s->prep.handle)
    now.n_packed = b->iface->packed(b->context, s->prep.handle, &now.packed_bytes);
  size_t n = LOOM_MIN(out_size, sizeof now);
  memcpy(out, &now, n);
  if (out_size > n) memset((char *)out + n, 0, out_size - n);
  return LOOM_STATUS_OK;
}

const char *loom_session_warning(const loom_session *s) { return s ? s->prep.warning : ""; }

loom_status loom_session_describe(const loom_session *s, loom_session_artifact what, char **text) {
  if (!s || !text) return LOOM_STATUS_INVALID_ARGUMENT;
  *text = NULL;
  if (what == LOOM_ARTIFACT_GRAPH) return loom_graph_print(s->g, text);
  if (what < 0 || what >= LOOM_ARTIFACT_COUNT)
    return loom_error(s->ctx, LOOM_STATUS_INVALID_ARGUMENT, "session_describe: unknown artifact %d",
                      (int)what);
  const loom_backend *b = s->backend;
  if (!b->iface->describe || !s->prep.handle)
    return loom_error(s->ctx, LOOM_STATUS_UNSUPPORTED, "the %s backend prepared no program",
                      b->iface->name);
  return b->iface->describe(b->context, s->ctx, s->g, s->prep.handle, what, text);
}

static const char *type_str(const loom_dtype dt, int32_t rank, const int64_t *shape, char *buf,
                            size_t n) {
  loom_type t = {.dtype = dt, .rank = rank};
  for (int32_t d = 0; d < rank && d < LOOM_MAX_RANK; d++)
    t.shape[d] = shape[d];
  return loom_type_str(&t, buf, n);
}

/* Checks a caller tensor against a graph value's type. */
static loom_status check_tensor(loom_ctx *ctx, const char *kind, const char *name,
                                const loom_tensor *t, const loom_type *want) {
  char a[160], b[160];
  if (t->v.dtype != want->dtype)
    return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "%s '%s': expected %s, got %s", kind, name,
                      loom_type_str(want, a, sizeof a),
                      type_str(t->v.dtype, t->v.rank, t->v.shape, b, sizeof b));
  bool same = t->v.rank == want->rank;
  for (int32_t d = 0; same && d < want->rank; d++)
    same = t->v.shape[d] == want->shape[d];
  if (!same)
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "%s '%s': expected %s, got %s", kind, name,
                      loom_type_str(want, a, sizeof a),
                      type_str(t->v.dtype, t->v.rank, t->v.shape, b, sizeof b));
  if (!loom_view_is_contiguous(&t->v))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "%s '%s': tensor is not contiguous", kind,
                      name);
  return LOOM_STATUS_OK;
}

static bool ranges_overlap(const void *a, size_t na, const void *b, size_t nb) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return na && nb && x < y + nb && y < x + na;
}

static size_t tensor_bytes(const loom_tensor *t) {
  return (size_t)loom_view_numel(&t->v) * loom_dtype_size(t->v.dtype);
}

/* Points value root (and the reshapes sharing its memory) at p. */
static void point_value(loom_session *s, int32_t root, void *p) {
  const loom_memplan *plan = &s->prep.plan;
  for (int32_t v = 0; v < s->g->n_values; v++)
    if (plan->root[v] == root && plan->offset[v] >= 0) s->values[v].data = p;
}

/* True if output tensor t of value v may be computed in place: t is
 * exactly the caller's tensor of one input, overlaps no other, and the
 * memory plan lets v take that input's memory (loom_memplan.in_place_*:
 * every other read of the input is done by the time v is written). */
static bool in_place_ok(const loom_session *s, int32_t v, const loom_tensor *t, int32_t n_inputs,
                        const loom_tensor *const *inputs) {
  const loom_memplan *plan = &s->prep.plan;
  int32_t x = -1;
  for (int32_t k = 0; k < n_inputs; k++) {
    const loom_tensor *in = inputs[k];
    if (!ranges_overlap(in->v.data, tensor_bytes(in), t->v.data, tensor_bytes(t))) continue;
    if (x >= 0 || in->v.data != t->v.data || tensor_bytes(in) != tensor_bytes(t)) return false;
    x = s->g->inputs[k];
  }
  for (int32_t k = 0; x >= 0 && k < plan->n_in_place; k++)
    if (plan->in_place_out[k] == v && plan->in_place_in[k] == x) return true;
  return false;
}

/*
 * Zero-copy outputs: a caller-given output whose value lives in the arena
 * is computed straight into the caller's memory instead of being copied
 * there afterwards — unless that memory overlaps an input (an update must
 * read the old values until the end; but see in_place_ok) or another
 * output, or the value is another output's too. direct[i] says which
 * were bound.
 */
static void bind_outputs(loom_session *s, int32_t n_inputs, const loom_tensor *const *inputs,
                         int32_t n_outputs, loom_tensor *const *outputs, bool *direct) {
  const loom_graph *g = s->g;
  const loom_memplan *plan = &s->prep.plan;
  for (int32_t i = 0; i < n_outputs; i++) {
    int32_t v = g->outputs[i];
    loom_tensor *t = outputs[i];
    if (!t || plan->offset[v] < 0 || plan->root[v] != v || !loom_view_is_contiguous(&t->v))
      continue;
    bool ok = true;
    /* another output in the same memory (a reshape of v) is copied from
     * the arena after the run, so v must be computed there */
    for (int32_t k = 0; k < n_outputs && ok; k++)
      ok = k == i || (g->outputs[k] != v && plan->root[g->outputs[k]] != v &&
                      !(outputs[k] && ranges_overlap(outputs[k]->v.data, tensor_bytes(outputs[k]),
                                                     t->v.data, tensor_bytes(t))));
    bool inputs_clear = true;
    for (int32_t k = 0; k < n_inputs && inputs_clear; k++)
      inputs_clear =
          !ranges_overlap(inputs[k]->v.data, tensor_bytes(inputs[k]), t->v.data, tensor_bytes(t));
    if (!ok || (!inputs_clear && !in_place_ok(s, v, t, n_inputs, inputs))) continue;
    s->n_in_place += !inputs_clear;
    direct[i] = true;
    point_value(s, v, t->v.data);
  }
}

/* Puts bound outputs back at their arena offsets for the next run. */
static void unbind_outputs(loom_session *s, int32_t n_outputs, const bool *direct) {
  for (int32_t i = 0; i < n_outputs; i++)
    if (direct[i]) {
      int32_t v = s->g->outputs[i];
      point_value(s, v, (char *)s->arena + s->prep.plan.offset[v]);
    }
}

static loom_status run_alone(loom_session *s, int32_t n_inputs, const loom_tensor *const *inputs,
                             int32_t n_outputs, loom_tensor **outputs) {
  loom_ctx *ctx = s->ctx;
  const loom_graph *g = s->g;
  if (n_inputs != g->n_inputs)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "session_run: the graph has %d input(s), %d given", g->n_inputs, n_inputs);
  if (n_outputs != g->n_outputs)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "session_run: the graph has %d output(s), %d given", g->n_outputs, n_outputs);
  if ((n_inputs && !inputs) || (n_outputs && !outputs))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "session_run: the %s array is NULL",
                      n_inputs && !inputs ? "input" : "output");
  for (int32_t i = 0; i < n_inputs; i++) {
    const char *name = g->values[g->inputs[i]].name;
    if (!inputs[i])
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "session_run: input '%s' (%d) is NULL",
                        name, i);
    LOOM_TRY(check_tensor(ctx, "input", name, inputs[i], &g->values[g->inputs[i]].type));
  }
  for (int32_t i = 0; i < n_outputs; i++)
    if (outputs[i])
      LOOM_TRY(check_tensor(ctx, "output", g->output_names[i], outputs[i],
                            &g->values[g->outputs[i]].type));

  for (int32_t i = 0; i < n_inputs; i++)
    s->values[g->inputs[i]].data = inputs[i]->v.data;
  /* reshapes of inputs share the caller's memory too */
  for (int32_t v = 0; v < g->n_values; v++)
    if (s->prep.plan.root[v] != v && s->prep.plan.offset[v] < 0)
      s->values[v].data = s->values[s->prep.plan.root[v]].data;
  bool *direct = loom_calloc(ctx, (size_t)(n_outputs ? n_outputs : 1), sizeof *direct);
  if (!direct) return LOOM_STATUS_OUT_OF_MEMORY;
  s->n_in_place = 0;
  bind_outputs(s, n_inputs, inputs, n_outputs, outputs, direct);
  loom_status st =
      s->backend->iface->graph_compute(s->backend->context, ctx, g, s->prep.handle, s->values);
  unbind_outputs(s, n_outputs, direct);
  if (st) {
    free(direct);
    return st;
  }

  /* An output that is a graph input (or a reshape of one) is read from
   * caller memory, which an earlier output may overwrite: snapshot such
   * sources first. */
  void **snap = loom_calloc(ctx, (size_t)(n_outputs ? n_outputs : 1), sizeof *snap);
  loom_tensor **fresh = loom_calloc(ctx, (size_t)(n_outputs ? n_outputs : 1), sizeof *fresh);
  if (!snap || !fresh) {
    free(snap);
    free(fresh);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  for (int32_t i = 0; i < n_outputs && !st; i++) {
    const loom_value_info *vi = &g->values[g->outputs[i]];
    if (!outputs[i])
      st = loom_tensor_new(ctx, vi->type.dtype, vi->type.rank, vi->type.shape, &fresh[i]);
    if (st || s->prep.plan.offset[g->outputs[i]] >= 0) continue; /* in the arena */
    const loom_view *src = &s->values[g->outputs[i]];
    size_t nb = (size_t)loom_view_numel(src) * loom_dtype_size(src->dtype);
    bool clash = false;
    for (int32_t k = 0; k < n_outputs && !clash; k++)
      clash = k != i && outputs[k] &&
              ranges_overlap(outputs[k]->v.data, tensor_bytes(outputs[k]), src->data, nb);
    if (!clash) continue;
    snap[i] = loom_malloc(ctx, nb ? nb : 1);
    if (!snap[i])
      st = LOOM_STATUS_OUT_OF_MEMORY;
    else if (nb)
      memcpy(snap[i], src->data, nb);
  }
  if (!st) {
    for (int32_t i = 0; i < n_outputs; i++) {
      if (direct[i]) continue; /* computed in place */
      loom_tensor *t = outputs[i] ? outputs[i] : fresh[i];
      loom_view src = s->values[g->outputs[i]];
      if (snap[i]) src.data = snap[i];
      loom_view_copy(&t->v, &src);
      outputs[i] = t;
    }
  } else {
    for (int32_t i = 0; i < n_outputs; i++)
      loom_tensor_free(fresh[i]);
  }
  for (int32_t i = 0; i < n_outputs; i++)
    free(snap[i]);
  free(snap);
  free(fresh);
  free(direct);
  return st;
}

/* The inputs a run reads: the caller's, with the session's copies in the
 * places of frozen inputs (where the caller must pass NULL). *out is
 * inputs itself when nothing is frozen. */
static loom_status with_frozen(loom_session *s, int32_t n_inputs, const loom_tensor *const *inputs,
                               const loom_tensor ***out) {
  *out = (const loom_tensor **)inputs;
  if (!s->n_frozen || n_inputs != s->g->n_inputs) return LOOM_STATUS_OK; /* run_alone says why */
  const loom_tensor **all = loom_calloc(s->ctx, (size_t)n_inputs, sizeof *all);
  if (!all) return LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t i = 0; i < n_inputs; i++) {
    const loom_tensor *given = inputs ? inputs[i] : NULL;
    if (s->frozen[i] && given) {
      free(all);
      return loom_error(s->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "session_run: input '%s' (%d) is frozen (loom_session_freeze_input): pass "
                        "NULL in its place, or unfreeze it",
                        s->g->values[s->g->inputs[i]].name, i);
    }
    all[i] = s->frozen[i] ? s->frozen[i] : given;
  }
  *out = all;
  return LOOM_STATUS_OK;
}

/* One run at a time: a concurrent call is refused before it touches the
 * session or its context, both of which the running thread is using. */
loom_status loom_session_run(loom_session *s, int32_t n_inputs, const loom_tensor *const *inputs,
                             int32_t n_outputs, loom_tensor **outputs) {
  if (!s) return LOOM_STATUS_INVALID_ARGUMENT;
  if (atomic_flag_test_and_set_explicit(&s->running, memory_order_acquire)) return LOOM_STATUS_BUSY;
  const loom_tensor **all = NULL;
  loom_status st = with_frozen(s, n_inputs, inputs, &all);
  if (!st) st = run_alone(s, n_inputs, all, n_outputs, outputs);
  if (all != (const loom_tensor **)inputs) free(all);
  atomic_flag_clear_explicit(&s->running, memory_order_release);
  return st;
}

/* Tells the backend which inputs are frozen now (it drops what it kept). */
static void tell_backend(loom_session *s) {
  const loom_backend *b = s->backend;
  if (!b->iface->freeze || !s->prep.handle) return;
  bool *frozen = calloc((size_t)(s->g->n_inputs ? s->g->n_inputs : 1), sizeof *frozen);
  for (int32_t i = 0; frozen && i < s->g->n_inputs; i++) frozen[i] = s->frozen[i] != NULL;
  /* without memory to say which: none, which is always correct */
  b->iface->freeze(b->context, s->prep.handle, frozen && s->n_frozen ? frozen : NULL);
  free(frozen);
}

static loom_status freeze_alone(loom_session *s, int32_t index, const loom_tensor *t) {
  const loom_graph *g = s->g;
  if (index < 0 || index >= g->n_inputs)
    return loom_error(s->ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "session_freeze_input: input %d does not exist (the graph has %d)", index,
                      g->n_inputs);
  const loom_value_info *vi = &g->values[g->inputs[index]];
  if (t) LOOM_TRY(check_tensor(s->ctx, "session_freeze_input: input", vi->name, t, &vi->type));
  if (!s->frozen) {
    s->frozen = loom_calloc(s->ctx, (size_t)g->n_inputs, sizeof *s->frozen);
    if (!s->frozen) return LOOM_STATUS_OUT_OF_MEMORY;
  }
  loom_tensor *copy = NULL;
  if (t) {
    LOOM_TRY(loom_tensor_new(s->ctx, vi->type.dtype, vi->type.rank, vi->type.shape, &copy));
    loom_view_copy(&copy->v, &t->v);
  }
  s->n_frozen += (copy != NULL) - (s->frozen[index] != NULL);
  loom_tensor_free(s->frozen[index]);
  s->frozen[index] = copy;
  tell_backend(s);
  return LOOM_STATUS_OK;
}

loom_status loom_session_freeze_input(loom_session *s, int32_t index, const loom_tensor *t) {
  if (!s) return LOOM_STATUS_INVALID_ARGUMENT;
  if (atomic_flag_test_and_set_explicit(&s->running, memory_order_acquire)) return LOOM_STATUS_BUSY;
  loom_status st = freeze_alone(s, index, t);
  atomic_flag_clear_explicit(&s->running, memory_order_release);
  return st;
}

bool loom_session_input_frozen(const loom_session *s, int32_t index) {
  return s && s->frozen && index >= 0 && index < s->g->n_inputs && s->frozen[index];
}
