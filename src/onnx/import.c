/*
 * The importer: a table of values by ONNX name (each a value of the Loom
 * graph, a constant known at load time, or both), the model's inputs and
 * initializers, then every node through its converter (convert.c), in the
 * file's order (ONNX requires a topological one: a node that reads a name
 * nothing earlier defines, which a cycle does, is an error).
 */
#include "onnx/import_internal.h"

#include "core/strmap.h"
#include "ir/view.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
  const char *name;
  loom_tensor *c;           /* a constant (owned by the program), or NULL */
  const loom_tensor *known; /* a fed input's values, or NULL */
  int32_t val;              /* its value in the program's graph, -1: none yet */
  loom_type type;
} entry;

/* Parameters of one graph and the tensors bound to them. */
typedef struct bindings {
  int32_t *val;
  loom_tensor **t;
  int32_t n, cap;
} bindings;

typedef struct onnx_importer {
  loom_ctx *ctx;
  const onnx_model *m;
  onnx_program *p;
  entry *e;
  int32_t n, cap;
  loom_strmap names;
  bindings main_binds;
  bindings *binds; /* those of the graph being built */
  int32_t n_params;
  int64_t n_converted; /* nodes converted, unrolled loops counted per iteration */
} onnx_importer;

/* Unrolled loops (nested ones multiply) stop here: a crafted model must
 * not make the import run for hours. */
#define ONNX_MAX_CONVERTED 200000

/* ---- small helpers -------------------------------------------------------- */

bool onnx_axis(int64_t axis, int32_t rank, int32_t *out) {
  if (axis < -rank || axis >= rank) return false;
  *out = (int32_t)(axis < 0 ? axis + rank : axis);
  return true;
}

static loom_type tensor_type(const loom_tensor *t) {
  loom_type ty = {.dtype = loom_tensor_dtype(t), .rank = loom_tensor_rank(t)};
  for (int32_t d = 0; d < ty.rank; d++) ty.shape[d] = loom_tensor_dim(t, d);
  return ty;
}

static loom_status own(onnx_importer *im, loom_tensor *t) {
  onnx_program *p = im->p;
  if (!loom_grow(im->ctx, (void **)&p->owned, &p->cap_owned, p->n_owned + 1, sizeof *p->owned)) {
    loom_tensor_free(t);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  p->owned[p->n_owned++] = t;
  return LOOM_STATUS_OK;
}

static loom_status bind(onnx_importer *im, bindings *b, int32_t val, loom_tensor *t) {
  int32_t cap = b->cap;
  if (!loom_grow(im->ctx, (void **)&b->val, &cap, b->n + 1, sizeof *b->val)) return LOOM_STATUS_OUT_OF_MEMORY;
  cap = b->cap;
  if (!loom_grow(im->ctx, (void **)&b->t, &cap, b->n + 1, sizeof *b->t)) return LOOM_STATUS_OUT_OF_MEMORY;
  b->cap = cap;
  b->val[b->n] = val;
  b->t[b->n++] = t;
  return LOOM_STATUS_OK;
}

static void bindings_free(bindings *b) {
  free(b->val);
  free(b->t);
  memset(b, 0, sizeof *b);
}

static int32_t find(const onnx_importer *im, const char *name) {
  return loom_strmap_get(&im->names, name, strlen(name));
}

/* A new entry for name (a later definition of a name shadows nothing: it
 * is an error, as ONNX names are assigned once). */
static int32_t add_entry(onnx_importer *im, const char *name) {
  if (find(im, name) >= 0) {
    loom_error(im->ctx, LOOM_STATUS_INVALID_ARGUMENT, "ONNX: '%s' is defined twice", name);
    return -1;
  }
  if (!loom_grow(im->ctx, (void **)&im->e, &im->cap, im->n + 1, sizeof *im->e)) return -1;
  if (!loom_strmap_put(&im->names, name, strlen(name), im->n)) {
    loom_error(im->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory");
    return -1;
  }
  entry *e = &im->e[im->n];
  memset(e, 0, sizeof *e);
  e->name = name;
  e->val = -1;
  return im->n++;
}

/* A constant as a value of g: a `constant` op when every element is the
 * same (exactly, as a double), else a parameter bound to the tensor. */
static int32_t materialize(onnx_importer *im, loom_graph *g, loom_tensor *t) {
  if (g->err) return -1;
  loom_type ty = tensor_type(t);
  int64_t n = loom_type_numel(&ty);
  const void *d = loom_tensor_data(t);
  bool same = true;
  double v0 = n ? loom_load(ty.dtype, d, 0) : 0.0;
  if (ty.dtype == LOOM_DTYPE_I64 && n && (double)loom_load_i64(ty.dtype, d, 0) != v0) same = false;
  if (ty.dtype == LOOM_DTYPE_I64 && n && (int64_t)v0 != loom_load_i64(ty.dtype, d, 0)) same = false;
  for (int64_t i = 1; same && i < n; i++) {
    double v = loom_load(ty.dtype, d, i);
    if (!(v == v0) && !(isnan(v) && isnan(v0))) same = false;
    if (ty.dtype == LOOM_DTYPE_I64 && loom_load_i64(ty.dtype, d, i) != loom_load_i64(ty.dtype, d, 0))
      same = false;
  }
  if (same) return lb_const(g, ty.dtype, ty.rank, ty.shape, v0);
  char name[64];
  int32_t v = -1;
  do snprintf(name, sizeof name, "onnx_const_%d", im->n_params++);
  while (loom_graph_find_value(g, name) >= 0);
  loom_status st = loom_graph_param(g, name, ty.dtype, ty.rank, ty.shape, &v);
  if (!st) st = bind(im, im->binds, v, t);
  if (st) {
    g->err = st;
    return -1;
  }
  return v;
}

/* ---- what converters call ------------------------------------------------ */

bool cv_has(const onnx_cv *cv, int32_t i) { return i >= 0 && i < cv->n_in && cv->entry[i] >= 0; }

const loom_type *cv_type(const onnx_cv *cv, int32_t i) { return &cv->im->e[cv->entry[i]].type; }

int32_t cv_in(onnx_cv *cv, int32_t i) {
  if (!cv_has(cv, i)) {
    if (!cv->st) cv->st = cv_invalid(cv, "input %d is missing", i);
    return -1;
  }
  if (cv->in_val[i] >= 0) return cv->in_val[i];
  onnx_importer *im = cv->im;
  entry *e = &im->e[cv->entry[i]];
  bool main_graph = cv->g == im->p->g;
  int32_t v = -1;
  if (main_graph && e->val >= 0)
    v = e->val;
  else if (e->c) {
    v = materialize(im, cv->g, e->c);
    if (main_graph) e->val = v;
  } else if (!cv->st)
    cv->st = loom_error(im->ctx, LOOM_STATUS_INTERNAL, "ONNX import: '%s' has no value", e->name);
  cv->in_val[i] = v;
  return v;
}

const loom_tensor *cv_const(const onnx_cv *cv, int32_t i) {
  if (!cv_has(cv, i)) return NULL;
  const entry *e = &cv->im->e[cv->entry[i]];
  return e->c ? e->c : e->known;
}

const loom_tensor *cv_value_const(const onnx_cv *cv, int32_t v) {
  const bindings *b = cv->im->binds;
  for (int32_t i = 0; b && v >= 0 && i < b->n; i++)
    if (b->val[i] == v) return b->t[i];
  return NULL;
}

int32_t cv_ints(onnx_cv *cv, int32_t i, int64_t *out, int32_t max) {
  const loom_tensor *t = cv_const(cv, i);
  if (!t) {
    if (!cv->st) cv->st = cv_unsupported(cv, "input %d must be known at load time (a constant or a given input)", i);
    return -1;
  }
  loom_dtype dt = loom_tensor_dtype(t);
  if (!loom_dtype_is_int(dt) || loom_tensor_rank(t) > 1 || loom_tensor_numel(t) > max) {
    if (!cv->st) cv->st = cv_invalid(cv, "input %d must be at most %d integers", i, max);
    return -1;
  }
  int64_t n = loom_tensor_numel(t);
  for (int64_t k = 0; k < n; k++) out[k] = loom_load_i64(dt, loom_tensor_data(t), k);
  return (int32_t)n;
}

bool cv_scalar(onnx_cv *cv, int32_t i, double *out) {
  const loom_tensor *t = cv_const(cv, i);
  if (!t || loom_tensor_numel(t) != 1) return false;
  *out = loom_load(loom_tensor_dtype(t), loom_tensor_data(t), 0);
  return true;
}

bool cv_attr_has(const onnx_cv *cv, const char *name) { return onnx_node_attr(cv->node, name) != NULL; }

int64_t cv_attr_i(const onnx_cv *cv, const char *name, int64_t def) {
  const onnx_attr *a = onnx_node_attr(cv->node, name);
  return a ? a->i : def;
}

double cv_attr_f(const onnx_cv *cv, const char *name, double def) {
  const onnx_attr *a = onnx_node_attr(cv->node, name);
  return a ? (double)a->f : def;
}

int32_t cv_attr_ints(onnx_cv *cv, const char *name, int64_t *out, int32_t max) {
  const onnx_attr *a = onnx_node_attr(cv->node, name);
  if (!a) return -1;
  if (a->n_ints > (size_t)max) {
    if (!cv->st) cv->st = cv_unsupported(cv, "attribute %s has %zu values (at most %d)", name, a->n_ints, max);
    return -1;
  }
  for (size_t k = 0; k < a->n_ints; k++) out[k] = a->ints[k];
  return (int32_t)a->n_ints;
}

const char *cv_attr_s(onnx_cv *cv, const char *name, const char *def) {
  const onnx_attr *a = onnx_node_attr(cv->node, name);
  if (!a) return def;
  static _Thread_local char buf[128];
  size_t n = a->s.n < sizeof buf - 1 ? a->s.n : sizeof buf - 1;
  if (n) memcpy(buf, a->s.p, n);
  buf[n] = '\0';
  return buf;
}

void cv_out(onnx_cv *cv, int32_t o, int32_t v) {
  if (o < cv->n_out) cv->out_val[o] = v;
}

void cv_out_const(onnx_cv *cv, int32_t o, loom_tensor *t) {
  if (o < cv->n_out && !cv->out_const[o])
    cv->out_const[o] = t;
  else
    loom_tensor_free(t);
}

static loom_status node_error(onnx_cv *cv, loom_status st, const char *fmt, va_list ap) {
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  const onnx_node *n = cv->node;
  const char *name = n->name;
  for (int32_t o = 0; !name[0] && o < n->n_out; o++) name = n->out[o];
  return loom_error(cv->im->ctx, st, "ONNX node '%s' (%s, opset %lld): %s%s", name,
                    n->op_type, (long long)cv->opset, st == LOOM_STATUS_UNSUPPORTED ? "unsupported: " : "",
                    msg);
}

loom_status cv_unsupported(onnx_cv *cv, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  loom_status st = node_error(cv, LOOM_STATUS_UNSUPPORTED, fmt, ap);
  va_end(ap);
  return st;
}

loom_status cv_invalid(onnx_cv *cv, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  loom_status st = node_error(cv, LOOM_STATUS_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  return st;
}

int32_t cv_const_values(onnx_cv *cv, loom_dtype dt, int32_t rank, const int64_t *shape,
                        const double *v) {
  loom_tensor *t = NULL;
  if (loom_tensor_new(cv->im->ctx, dt, rank, shape, &t) || own(cv->im, t)) {
    cv->g->err = LOOM_STATUS_OUT_OF_MEMORY;
    return -1;
  }
  int64_t n = loom_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) loom_store(dt, loom_tensor_data(t), i, v[i]);
  return materialize(cv->im, cv->g, t);
}

static loom_status tensor_copy(loom_ctx *ctx, const loom_tensor *t, loom_tensor **out) {
  loom_type ty = tensor_type(t);
  LOOM_TRY(loom_tensor_new(ctx, ty.dtype, ty.rank, ty.shape, out));
  size_t n = (size_t)loom_type_numel(&ty) * loom_dtype_size(ty.dtype);
  if (n) memcpy(loom_tensor_data(*out), loom_tensor_data(t), n);
  return LOOM_STATUS_OK;
}

/* ---- one node ------------------------------------------------------------- */

/* Checks the node's attributes against those its converter reads: an
 * attribute it would ignore could change the answer. */
static loom_status check_attrs(onnx_cv *cv, const onnx_converter *c) {
  for (int32_t i = 0; i < cv->node->n_attrs; i++) {
    const char *name = cv->node->attrs[i].name;
    size_t len = strlen(name);
    const char *s = c->attrs;
    bool ok = false;
    while (s && *s && !ok) {
      const char *comma = strchr(s, ',');
      size_t k = comma ? (size_t)(comma - s) : strlen(s);
      ok = k == len && strncmp(s, name, len) == 0;
      s = comma ? comma + 1 : NULL;
    }
    if (!ok) return cv_unsupported(cv, "attribute '%s'", name);
    if (cv->node->attrs[i].ref_attr_name)
      return cv_unsupported(cv, "attribute '%s' refers to a function's", name);
  }
  return LOOM_STATUS_OK;
}

/* Runs the converter into cv->g; builder errors become the node's. */
static loom_status run_converter(onnx_cv *cv, const onnx_converter *c) {
  loom_status st = c->fn(cv);
  loom_status bs = loom_build_status(cv->g);
  if (!st && cv->st) st = cv->st;
  if (!st && bs) {
    char msg[LOOM_ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", loom_ctx_error(cv->im->ctx));
    st = cv_invalid(cv, "%s", msg);
    cv->im->ctx->last = bs;
    st = bs == LOOM_STATUS_UNSUPPORTED ? LOOM_STATUS_UNSUPPORTED : st;
  }
  if (!st)
    for (int32_t o = 0; o < cv->n_out; o++)
      if (cv->node->out[o][0] && cv->out_val[o] < 0 && !cv->out_const[o])
        st = cv_unsupported(cv, "output %d", o);
  return st;
}

/* Folds a node whose inputs are all constant: converted into a scratch
 * graph whose parameters are those constants, run on the reference
 * kernels; its outputs become constants. */
static loom_status fold(onnx_cv *cv, const onnx_converter *c) {
  onnx_importer *im = cv->im;
  loom_graph *s = NULL;
  bindings b = {0};
  loom_session *sess = NULL;
  loom_tensor **ins = NULL, *outs[ONNX_MAX_NODE_IO] = {0};
  int32_t n_run = 0, which[ONNX_MAX_NODE_IO];
  LOOM_TRY(loom_graph_new(im->ctx, &s));
  cv->g = s;
  im->binds = &b;
  loom_status st = run_converter(cv, c);
  im->binds = &im->main_binds;
  for (int32_t o = 0; !st && o < cv->n_out; o++) {
    if (cv->out_const[o] || cv->out_val[o] < 0) continue;
    /* an output that is one of the constants (Identity): a copy */
    int32_t k = 0;
    while (k < b.n && b.val[k] != cv->out_val[o]) k++;
    if (k < b.n) {
      st = tensor_copy(im->ctx, b.t[k], &cv->out_const[o]);
      continue;
    }
    char name[32];
    snprintf(name, sizeof name, "o%d", o);
    st = loom_graph_output(s, name, cv->out_val[o]);
    which[n_run++] = o;
  }
  if (!st && n_run) {
    ins = loom_calloc(im->ctx, (size_t)s->n_inputs + 1, sizeof *ins);
    if (!ins) st = LOOM_STATUS_OUT_OF_MEMORY;
    for (int32_t i = 0; !st && i < s->n_inputs; i++)
      for (int32_t k = 0; k < b.n; k++)
        if (b.val[k] == s->inputs[i]) ins[i] = b.t[k];
    loom_session_options o = LOOM_SESSION_OPTIONS(.backend = "ref");
    if (!st) st = loom_session_new(im->ctx, s, &o, &sess);
    if (!st) st = loom_session_run(sess, s->n_inputs, (const loom_tensor *const *)ins, n_run, outs);
    for (int32_t k = 0; !st && k < n_run; k++) {
      cv->out_const[which[k]] = outs[k];
      outs[k] = NULL;
    }
    if (st) loom_error_prefix(im->ctx, "ONNX node '%s' (%s) folded at load time", cv->node->name, cv->node->op_type);
  }
  for (int32_t k = 0; k < n_run; k++) loom_tensor_free(outs[k]);
  free(ins);
  loom_session_free(sess);
  loom_graph_free(s);
  bindings_free(&b);
  cv->g = im->p->g;
  return st;
}

static loom_status convert_node(onnx_importer *im, const onnx_node *n, int64_t opset);

/* A branch's initializers become constants and its nodes are converted
 * into the program like the main graph's; its outputs are the If's. */
loom_status onnx_cv_if(onnx_cv *cv) {
  onnx_importer *im = cv->im;
  double cond;
  if (!cv_scalar(cv, 0, &cond)) return cv_unsupported(cv, "a condition not known at load time");
  const onnx_attr *a = onnx_node_attr(cv->node, cond != 0 ? "then_branch" : "else_branch");
  if (!a || !a->g) return cv_invalid(cv, "no %s graph", cond != 0 ? "then_branch" : "else_branch");
  const onnx_graph *b = a->g;
  if (b->n_outputs != cv->n_out) return cv_invalid(cv, "the branch has %d outputs for %d", b->n_outputs, cv->n_out);
  for (int32_t i = 0; i < b->n_init; i++) {
    loom_tensor *lt = NULL;
    LOOM_TRY(onnx_tensor_to_loom(im->ctx, im->m, &b->init[i], &lt));
    LOOM_TRY(own(im, lt));
    int32_t k = add_entry(im, b->init[i].name);
    if (k < 0) return im->ctx->last ? im->ctx->last : LOOM_STATUS_INVALID_ARGUMENT;
    im->e[k].c = lt;
    im->e[k].type = tensor_type(lt);
  }
  for (int32_t i = 0; i < b->n_nodes; i++) LOOM_TRY(convert_node(im, &b->nodes[i], cv->opset));
  for (int32_t o = 0; o < cv->n_out; o++) {
    int32_t k = find(im, b->outputs[o].name);
    if (k < 0) return cv_invalid(cv, "branch output '%s' is not defined", b->outputs[o].name);
    entry *e = &im->e[k];
    if (e->val >= 0) {
      cv_out(cv, o, e->val);
    } else if (e->c) {
      loom_tensor *t = NULL;
      LOOM_TRY(tensor_copy(im->ctx, e->c, &t));
      cv_out_const(cv, o, t);
    }
  }
  return LOOM_STATUS_OK;
}


/* A value between iterations of a Loop: a value of the program, or a
 * constant (owned by the program). */
typedef struct loop_value {
  int32_t val;
  loom_tensor *c;
  loom_type type;
} loop_value;

static loom_status bind_name(onnx_importer *im, const char *name, loop_value v) {
  if (!name[0]) return LOOM_STATUS_OK;
  int32_t k = add_entry(im, name);
  if (k < 0) return im->ctx->last ? im->ctx->last : LOOM_STATUS_INVALID_ARGUMENT;
  im->e[k].val = v.val;
  im->e[k].c = v.c;
  im->e[k].type = v.type;
  return LOOM_STATUS_OK;
}

static loom_status scalar_const(onnx_importer *im, loom_dtype dt, double x, loop_value *v) {
  loom_tensor *t = NULL;
  LOOM_TRY(loom_tensor_new(im->ctx, dt, 0, NULL, &t));
  loom_store(dt, loom_tensor_data(t), 0, x);
  LOOM_TRY(own(im, t));
  *v = (loop_value){-1, t, tensor_type(t)};
  return LOOM_STATUS_OK;
}

/* Loop with a trip count and condition known at load time, unrolled: each
 * iteration imports the body with its inputs bound to the iteration
 * number, the condition and the carried values, reads its outputs, and
 * drops the body's names again. The condition the body computes must be
 * known at load time too (a constant). Scan outputs are stacked. */
loom_status onnx_cv_loop(onnx_cv *cv) {
  onnx_importer *im = cv->im;
  const onnx_attr *a = onnx_node_attr(cv->node, "body");
  if (!a || !a->g) return cv_invalid(cv, "no body graph");
  const onnx_graph *b = a->g;
  double trip = -1, cond = 1;
  if (cv_has(cv, 0) && !cv_scalar(cv, 0, &trip)) return cv_unsupported(cv, "a trip count not known at load time");
  if (cv_has(cv, 1) && !cv_scalar(cv, 1, &cond)) return cv_unsupported(cv, "a condition not known at load time");
  if (trip < 0) return cv_unsupported(cv, "a loop without a trip count");
  if (trip > 4096) return cv_unsupported(cv, "%g iterations (at most 4096 are unrolled)", trip);
  int32_t n_carried = cv->n_in - 2;
  if (n_carried < 0 || b->n_inputs != n_carried + 2 || b->n_outputs < n_carried + 1 || cv->n_out != b->n_outputs - 1)
    return cv_invalid(cv, "the body's inputs and outputs do not match the node's");
  int32_t n_scan = b->n_outputs - 1 - n_carried;
  loop_value carried[ONNX_MAX_NODE_IO];
  for (int32_t k = 0; k < n_carried; k++) {
    if (!cv_has(cv, 2 + k)) return cv_invalid(cv, "carried input %d is missing", k);
    const entry *e = &im->e[cv->entry[2 + k]];
    carried[k] = (loop_value){e->val, e->c, e->type};
  }
  int32_t *scans = loom_calloc(im->ctx, (size_t)(n_scan * (int64_t)trip + 1), sizeof *scans);
  if (!scans) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_status st = LOOM_STATUS_OK;
  int64_t iters = 0;
  for (int64_t i = 0; !st && i < (int64_t)trip && cond != 0; i++, iters++) {
    int32_t mark = im->n;
    loop_value it, cd;
    st = scalar_const(im, LOOM_DTYPE_I64, (double)i, &it);
    if (!st) st = scalar_const(im, LOOM_DTYPE_BOOL, 1, &cd);
    if (!st) st = bind_name(im, b->inputs[0].name, it);
    if (!st) st = bind_name(im, b->inputs[1].name, cd);
    for (int32_t k = 0; !st && k < n_carried; k++) st = bind_name(im, b->inputs[2 + k].name, carried[k]);
    for (int32_t k = 0; !st && k < b->n_init; k++) {
      loom_tensor *lt = NULL;
      st = onnx_tensor_to_loom(im->ctx, im->m, &b->init[k], &lt);
      if (!st) st = own(im, lt);
      if (!st) st = bind_name(im, b->init[k].name, (loop_value){-1, lt, tensor_type(lt)});
    }
    for (int32_t k = 0; !st && k < b->n_nodes; k++) st = convert_node(im, &b->nodes[k], cv->opset);
    for (int32_t o = 0; !st && o < b->n_outputs; o++) {
      int32_t k = find(im, b->outputs[o].name);
      if (k < 0) {
        st = cv_invalid(cv, "body output '%s' is not defined", b->outputs[o].name);
        break;
      }
      const entry *e = &im->e[k];
      loop_value v = {e->val, e->c, e->type};
      if (o == 0) {
        if (!v.c || loom_tensor_numel(v.c) != 1) {
          st = cv_unsupported(cv, "a loop condition computed from data");
          break;
        }
        cond = loom_load(loom_tensor_dtype(v.c), loom_tensor_data(v.c), 0);
      } else if (o <= n_carried) {
        carried[o - 1] = v;
      } else {
        if (v.type.rank + 1 > LOOM_MAX_RANK) {
          st = cv_unsupported(cv, "a scan output of rank %d", v.type.rank + 1);
          break;
        }
        int64_t shape[LOOM_MAX_RANK] = {1};
        for (int32_t d = 0; d < v.type.rank; d++) shape[d + 1] = v.type.shape[d];
        int32_t sv = v.val >= 0 ? v.val : materialize(im, im->p->g, v.c);
        sv = lb_reshape(im->p->g, sv, v.type.rank + 1, shape);
        scans[(o - 1 - n_carried) * (int64_t)trip + i] = sv;
      }
    }
    /* the body's names leave scope */
    for (int32_t k = mark; k < im->n; k++) loom_strmap_remove(&im->names, im->e[k].name, strlen(im->e[k].name));
    im->n = mark;
  }
  for (int32_t k = 0; !st && k < n_carried; k++) {
    if (carried[k].val >= 0) {
      cv_out(cv, k, carried[k].val);
    } else {
      loom_tensor *t = NULL;
      st = tensor_copy(im->ctx, carried[k].c, &t);
      if (!st) cv_out_const(cv, k, t);
    }
  }
  for (int32_t o = 0; !st && o < n_scan; o++) {
    if (iters == 0) {
      st = cv_unsupported(cv, "scan outputs of a loop that runs no iteration");
      break;
    }
    int32_t *parts = scans + o * (int64_t)trip;
    cv_out(cv, n_carried + o, iters == 1 ? parts[0] : lb_concat(im->p->g, (int32_t)iters, parts, 0));
  }
  free(scans);
  return st;
}

static loom_status convert_node(onnx_importer *im, const onnx_node *n, int64_t opset) {
  if (++im->n_converted > ONNX_MAX_CONVERTED)
    return loom_error(im->ctx, LOOM_STATUS_UNSUPPORTED,
                      "ONNX: unsupported: more than %d nodes to convert (loops unrolled)", ONNX_MAX_CONVERTED);
  onnx_cv cv = {.im = im, .ctx = im->ctx, .m = im->m, .g = im->p->g, .node = n, .opset = opset};
  if (n->n_in > ONNX_MAX_NODE_IO || n->n_out > ONNX_MAX_NODE_IO)
    return cv_unsupported(&cv, "more than %d inputs or outputs", ONNX_MAX_NODE_IO);
  cv.n_in = n->n_in;
  cv.n_out = n->n_out;
  for (int32_t o = 0; o < ONNX_MAX_NODE_IO; o++) cv.out_val[o] = cv.in_val[o] = -1;
  if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
    return cv_unsupported(&cv, "domain '%s'", n->domain);
  const onnx_converter *c = onnx_find_converter(n->op_type, opset);
  if (!c) return cv_unsupported(&cv, "no converter for %s at opset %lld", n->op_type, (long long)opset);
  LOOM_TRY(check_attrs(&cv, c));
  bool all_const = true;
  for (int32_t i = 0; i < n->n_in; i++) {
    cv.entry[i] = -1;
    if (!n->in[i][0]) continue;
    cv.entry[i] = find(im, n->in[i]);
    if (cv.entry[i] < 0)
      return cv_invalid(&cv, "input '%s' is not defined by an earlier node, an input or an initializer",
                        n->in[i]);
    if (!im->e[cv.entry[i]].c) all_const = false;
  }
  /* a node with subgraphs converts them into the program: never folded */
  for (int32_t i = 0; i < n->n_attrs; i++)
    if (n->attrs[i].g || n->attrs[i].n_graphs) all_const = false;
  loom_status st = all_const ? fold(&cv, c) : run_converter(&cv, c);
  bool folded = !st;
  for (int32_t o = 0; o < n->n_out; o++) folded &= !n->out[o][0] || cv.out_const[o] != NULL;
  for (int32_t o = 0; o < n->n_out; o++) {
    loom_tensor *t = cv.out_const[o];
    cv.out_const[o] = NULL;
    if (st || !n->out[o][0]) {
      loom_tensor_free(t);
      continue;
    }
    if (t && (st = own(im, t))) continue;
    int32_t k = add_entry(im, n->out[o]);
    if (k < 0) {
      st = im->ctx->last ? im->ctx->last : LOOM_STATUS_INVALID_ARGUMENT;
      continue;
    }
    entry *e = &im->e[k];
    if (t) {
      e->c = t;
      e->type = tensor_type(t);
    } else {
      e->val = cv.out_val[o];
      e->type = *loom_value_type(im->p->g, e->val);
    }
  }
  for (int32_t o = 0; o < n->n_out; o++) loom_tensor_free(cv.out_const[o]);
  if (!st) im->p->n_folded += folded;
  return st;
}

/* ---- the model's inputs --------------------------------------------------- */

typedef struct dim_binding {
  const char *param;
  int64_t value;
} dim_binding;

static loom_status add_input(onnx_importer *im, const onnx_value_info *vi, const onnx_feed *feed,
                             dim_binding *dims, int32_t *n_dims) {
  loom_ctx *ctx = im->ctx;
  loom_dtype dt;
  if (!vi->is_tensor)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "ONNX input '%s': unsupported: not a tensor", vi->name);
  if (!onnx_dtype_to_loom(vi->elem_type, &dt))
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "ONNX input '%s': unsupported: element type %s",
                      vi->name, onnx_dtype_name(vi->elem_type));
  loom_type ty = {.dtype = dt, .rank = vi->has_shape ? vi->rank : 0};
  if (feed) {
    loom_type have = tensor_type(feed->t);
    if (have.dtype != dt)
      return loom_error(ctx, LOOM_STATUS_DTYPE_MISMATCH, "ONNX input '%s' is %s, but %s was given",
                        vi->name, onnx_dtype_name(vi->elem_type), loom_dtype_name(have.dtype));
    if (vi->has_shape && have.rank != vi->rank)
      return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH, "ONNX input '%s' has rank %d, but rank %d was given",
                        vi->name, (int)vi->rank, (int)have.rank);
    ty = have;
  } else if (!vi->has_shape) {
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "ONNX input '%s' has no declared shape: give the input", vi->name);
  }
  if (ty.rank > LOOM_MAX_RANK)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "ONNX input '%s': unsupported: rank %d", vi->name, (int)ty.rank);
  for (int32_t d = 0; vi->has_shape && d < vi->rank; d++) {
    int64_t want = vi->dims[d];
    if (feed) {
      if (want >= 0 && want != ty.shape[d])
        return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                          "ONNX input '%s': dim %d is %lld, but %lld was given", vi->name, (int)d,
                          (long long)want, (long long)ty.shape[d]);
    } else if (want < 0) {
      int32_t k = 0;
      while (vi->params[d] && k < *n_dims && strcmp(dims[k].param, vi->params[d]) != 0) k++;
      if (!vi->params[d] || k == *n_dims)
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "ONNX input '%s': dim %d is symbolic ('%s'): give the input (its shape binds it)",
                          vi->name, (int)d, vi->params[d] ? vi->params[d] : "?");
      ty.shape[d] = dims[k].value;
    } else {
      ty.shape[d] = want;
    }
    /* every input naming a dim_param must agree on its extent */
    if (vi->params[d]) {
      int32_t k = 0;
      while (k < *n_dims && strcmp(dims[k].param, vi->params[d]) != 0) k++;
      if (k == *n_dims && *n_dims < 256) dims[(*n_dims)++] = (dim_binding){vi->params[d], ty.shape[d]};
      else if (k < *n_dims && dims[k].value != ty.shape[d])
        return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                          "ONNX input '%s': dim '%s' is %lld here but %lld in an earlier input",
                          vi->name, vi->params[d], (long long)ty.shape[d], (long long)dims[k].value);
    }
  }
  LOOM_TRY(loom_shape_check(ctx, ty.rank, ty.shape, NULL));
  int32_t k = add_entry(im, vi->name);
  if (k < 0) return ctx->last ? ctx->last : LOOM_STATUS_INVALID_ARGUMENT;
  int32_t v = -1;
  LOOM_TRY(loom_graph_input(im->p->g, vi->name, ty.dtype, ty.rank, ty.shape, &v));
  im->e[k].val = v;
  im->e[k].type = ty;
  im->e[k].known = feed ? feed->t : NULL;
  return LOOM_STATUS_OK;
}

/* ---- the whole graph ------------------------------------------------------ */

void onnx_program_free(onnx_program *p) {
  if (!p) return;
  loom_graph_free(p->g);
  for (int32_t i = 0; i < p->n_owned; i++) loom_tensor_free(p->owned[i]);
  free(p->owned);
  free(p->bound);
  free(p);
}

static loom_status import_graph(onnx_importer *im, const onnx_graph *gr, int64_t opset,
                                int32_t n_feeds, const onnx_feed *feeds) {
  loom_ctx *ctx = im->ctx;
  const onnx_model *m = im->m;
  for (int32_t i = 0; i < n_feeds; i++) {
    int32_t k = 0;
    while (k < gr->n_inputs && strcmp(gr->inputs[k].name, feeds[i].name) != 0) k++;
    if (k == gr->n_inputs)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "the model has no input named '%s'", feeds[i].name);
  }
  /* initializers first: an input of the same name (IR < 4 lists them as
   * inputs too) is fed only when given */
  for (int32_t i = 0; i < gr->n_init; i++) {
    const onnx_tensor *t = &gr->init[i];
    bool fed = false;
    for (int32_t k = 0; k < n_feeds; k++) fed |= strcmp(feeds[k].name, t->name) == 0;
    if (fed) continue;
    loom_tensor *lt = NULL;
    LOOM_TRY(onnx_tensor_to_loom(ctx, m, t, &lt));
    LOOM_TRY(own(im, lt));
    int32_t k = add_entry(im, t->name);
    if (k < 0) return ctx->last ? ctx->last : LOOM_STATUS_INVALID_ARGUMENT;
    im->e[k].c = lt;
    im->e[k].type = tensor_type(lt);
  }
  if (gr->n_sparse_init)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "ONNX: unsupported: sparse initializers");
  dim_binding dims[256];
  int32_t n_dims = 0;
  /* fed inputs first, so their shapes bind the dim_params of the rest */
  for (int pass = 0; pass < 2; pass++)
    for (int32_t i = 0; i < gr->n_inputs; i++) {
      const onnx_value_info *vi = &gr->inputs[i];
      const onnx_feed *feed = NULL;
      for (int32_t k = 0; k < n_feeds; k++)
        if (strcmp(feeds[k].name, vi->name) == 0) feed = &feeds[k];
      if ((pass == 0) != (feed != NULL)) continue;
      if (!feed && find(im, vi->name) >= 0) continue; /* an initializer */
      LOOM_TRY(add_input(im, vi, feed, dims, &n_dims));
    }
  for (int32_t i = 0; i < gr->n_nodes; i++) LOOM_TRY(convert_node(im, &gr->nodes[i], opset));
  for (int32_t i = 0; i < gr->n_outputs; i++) {
    const char *name = gr->outputs[i].name;
    int32_t k = find(im, name);
    if (k < 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "ONNX output '%s' is not defined by any node", name);
    entry *e = &im->e[k];
    if (e->val < 0) {
      e->val = materialize(im, im->p->g, e->c);
      LOOM_TRY(loom_build_status(im->p->g));
    }
    LOOM_TRY(loom_graph_output(im->p->g, name, e->val));
  }
  return LOOM_STATUS_OK;
}

loom_status onnx_import(loom_ctx *ctx, const onnx_model *m, int32_t n_feeds, const onnx_feed *feeds,
                        onnx_program **out) {
  *out = NULL;
  int64_t opset = onnx_model_opset(m);
  if (opset == 0) opset = 1; /* no import of the default domain: its first version */
  if (opset > 21)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "ONNX: unsupported: opset %lld (Loom reads 1 to 21)",
                      (long long)opset);
  onnx_importer im = {.ctx = ctx, .m = m};
  im.p = loom_calloc(ctx, 1, sizeof *im.p);
  if (!im.p) return LOOM_STATUS_OUT_OF_MEMORY;
  im.binds = &im.main_binds;
  loom_status st = loom_graph_new(ctx, &im.p->g);
  if (!st) st = import_graph(&im, m->graph, opset, n_feeds, feeds);
  onnx_program *p = im.p;
  if (!st) {
    p->n_bound = p->g->n_inputs;
    p->bound = loom_calloc(ctx, (size_t)p->n_bound + 1, sizeof *p->bound);
    if (!p->bound) st = LOOM_STATUS_OUT_OF_MEMORY;
    for (int32_t i = 0; !st && i < p->n_bound; i++)
      for (int32_t k = 0; k < im.main_binds.n; k++)
        if (im.main_binds.val[k] == p->g->inputs[i]) p->bound[i] = im.main_binds.t[k];
  }
  if (!st) st = loom_graph_verify(p->g);
  loom_strmap_free(&im.names);
  free(im.e);
  bindings_free(&im.main_binds);
  if (st) {
    onnx_program_free(p);
    return st;
  }
  *out = p;
  return LOOM_STATUS_OK;
}

/* ---- running -------------------------------------------------------------- */

/* The initializers are frozen: the session keeps its own copy and packs
 * the GEMM operands they give once, for every run. */
loom_status onnx_program_session(loom_ctx *ctx, const onnx_program *p,
                                 const loom_session_options *opts, loom_session **out) {
  LOOM_TRY(loom_session_new(ctx, p->g, opts, out));
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; i < p->n_bound && !st; i++)
    if (p->bound[i]) st = loom_session_freeze_input(*out, i, p->bound[i]);
  if (st) {
    loom_error_prefix(ctx, "freezing the model's initializers");
    loom_session_free(*out);
    *out = NULL;
  }
  return st;
}

loom_status onnx_program_run(loom_ctx *ctx, const onnx_program *p, loom_session *s,
                             int32_t n_feeds, const onnx_feed *feeds, loom_tensor **outputs) {
  const loom_tensor **ins = loom_calloc(ctx, (size_t)p->n_bound + 1, sizeof *ins);
  if (!ins) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; i < p->n_bound && !st; i++) {
    if (loom_session_input_frozen(s, i)) continue; /* the session's copy */
    ins[i] = p->bound[i];
    if (ins[i]) continue;
    const char *name = loom_graph_input_name(p->g, i);
    for (int32_t k = 0; k < n_feeds; k++)
      if (strcmp(feeds[k].name, name) == 0) ins[i] = feeds[k].t;
    if (!ins[i]) st = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "no value given for model input '%s'", name);
  }
  if (!st) st = loom_session_run(s, p->n_bound, ins, loom_graph_num_outputs(p->g), outputs);
  free(ins);
  return st;
}

bool onnx_op_supported(const char *domain, const char *op_type, int64_t opset) {
  if (domain[0] && strcmp(domain, "ai.onnx") != 0) return false;
  return onnx_find_converter(op_type, opset ? opset : 1) != NULL;
}
