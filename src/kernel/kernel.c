/* Kernel IR helpers: sizes, workspace layout, clearing, the verifier and
 * the printer. */
#include "kernel/kernel.h"

#include "core/strbuf.h"
#include "ir/dtype.h"
#include "ops/op.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t loom_kpart_rows(const loom_kpart *part) {
  int64_t n = 1;
  for (int32_t i = 0; i < part->p_rank; i++) n *= part->p_shape[i];
  return n;
}

int64_t loom_kpart_row_len(const loom_kpart *part) {
  int64_t n = 1;
  for (int32_t j = 0; j < part->r_rank; j++) n *= part->r_shape[j];
  return n;
}

int64_t loom_kpart_tiles(const loom_kpart *part) {
  int64_t rows = loom_kpart_rows(part);
  int64_t rpt = part->sched.rows_per_tile > 0 ? part->sched.rows_per_tile : 1;
  return (rows + rpt - 1) / rpt;
}

int64_t loom_kpart_scratch_stride(const loom_kpart *part) {
  return (loom_kpart_row_len(part) + 15) / 16 * 16;
}

bool loom_kernel_has_rows_entry(const loom_kernel *k) {
  if (k->n_parts != 1) return false;
  for (int32_t a = 0; a < k->n_args; a++)
    if (k->args[a].temp) return false;
  const loom_kpart *part = &k->parts[0];
  for (int32_t s = 0; s < part->n_stages; s++)
    for (int32_t o = 0; o < part->stages[s].n_out; o++)
      if (part->stages[s].out[o].dst == LOOM_KDST_COL_REDUCE) return false;
  return true;
}

static int64_t align64(int64_t n) { return (n + 63) / 64 * 64; }

loom_status loom_kernel_workspace_layout(loom_ctx *ctx, const loom_kernel *k,
                                         int32_t n_threads,
                                         loom_kworkspace *out) {
  memset(out, 0, sizeof *out);
  if (n_threads < 1) n_threads = 1;
  out->temp = loom_calloc(ctx, (size_t)(k->n_args > 0 ? k->n_args : 1), sizeof(int64_t));
  if (!out->temp) return LOOM_STATUS_OUT_OF_MEMORY;
  int64_t at = 0;
  for (int32_t i = 0; i < k->n_args; i++) {
    out->temp[i] = -1;
    if (!k->args[i].temp) continue;
    out->temp[i] = at;
    at = align64(at + k->args[i].numel * (int64_t)loom_dtype_size(k->args[i].dtype));
  }
  int32_t n_col = 0;
  for (int32_t pi = 0; pi < k->n_parts; pi++)
    for (int32_t s = 0; s < k->parts[pi].n_stages; s++)
      for (int32_t o = 0; o < k->parts[pi].stages[s].n_out; o++)
        n_col += k->parts[pi].stages[s].out[o].dst == LOOM_KDST_COL_REDUCE;
  out->partial = loom_calloc(ctx, (size_t)(n_col > 0 ? n_col : 1), sizeof(int64_t));
  if (!out->partial) {
    loom_kworkspace_clear(out);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  out->n_partial = n_col;
  int64_t scratch_floats = 0;
  int32_t c = 0;
  for (int32_t pi = 0; pi < k->n_parts; pi++) {
    const loom_kpart *part = &k->parts[pi];
    int64_t tiles = loom_kpart_tiles(part);
    for (int32_t s = 0; s < part->n_stages; s++)
      for (int32_t o = 0; o < part->stages[s].n_out; o++) {
        const loom_kout *ko = &part->stages[s].out[o];
        if (ko->dst != LOOM_KDST_COL_REDUCE) continue;
        int64_t numel = ko->target >= 0 && ko->target < k->n_args ? k->args[ko->target].numel : 0;
        out->partial[c++] = at;
        at = align64(at + tiles * numel * (int64_t)sizeof(double));
      }
    int64_t f = (int64_t)part->n_scratch * loom_kpart_scratch_stride(part);
    if (f > scratch_floats) scratch_floats = f;
  }
  out->scratch = at;
  out->scratch_thread_bytes = align64(scratch_floats * (int64_t)sizeof(float));
  out->total = at + (int64_t)n_threads * out->scratch_thread_bytes;
  return LOOM_STATUS_OK;
}

void loom_kworkspace_clear(loom_kworkspace *w) {
  if (!w) return;
  free(w->temp);
  free(w->partial);
  memset(w, 0, sizeof *w);
}

int64_t loom_kernel_workspace_bytes(const loom_kernel *k, int32_t n_threads) {
  loom_kworkspace w;
  if (loom_kernel_workspace_layout(NULL, k, n_threads, &w) != LOOM_STATUS_OK) return -1;
  int64_t t = w.total;
  loom_kworkspace_clear(&w);
  return t;
}

void loom_kernel_clear(loom_kernel *k) {
  if (!k) return;
  for (int32_t pi = 0; pi < k->n_parts && k->parts; pi++) {
    loom_kpart *part = &k->parts[pi];
    for (int32_t s = 0; s < part->n_stages && part->stages; s++) free(part->stages[s].out);
    free(part->stages);
  }
  free(k->parts);
  free(k->args);
  free(k->exprs);
  free(k->nodes);
  memset(k, 0, sizeof *k);
}

const char *loom_kexpr_kind_name(loom_kexpr_kind k) {
  static const char *names[] = {"load", "const", "index", "op", "reg", "scratch", "keep"};
  return (int)k >= 0 && k < LOOM_KX_COUNT ? names[k] : "?";
}

const char *loom_kdst_kind_name(loom_kdst_kind k) {
  static const char *names[] = {"store", "scratch", "reg", "row_reduce", "col_reduce"};
  return (int)k >= 0 && k < LOOM_KDST_COUNT ? names[k] : "?";
}

/* ---- printing ------------------------------------------------------------ */

static const char *dt_name(loom_dtype dt) {
  const char *n = loom_dtype_name(dt);
  return n ? n : "?";
}

static const char *op_name(loom_op op) {
  const char *n = loom_op_name(op);
  return n ? n : "?";
}

/* "base + p0*s + r1*s" with zero terms left out. */
static void print_map(loom_strbuf *b, const loom_kmap *m) {
  loom_strbuf_put(b, "%lld", (long long)m->base);
  for (int32_t i = 0; i < LOOM_MAX_RANK; i++)
    if (m->p[i]) loom_strbuf_put(b, " + p%d*%lld", i, (long long)m->p[i]);
  for (int32_t j = 0; j < LOOM_MAX_RANK; j++)
    if (m->r[j]) loom_strbuf_put(b, " + r%d*%lld", j, (long long)m->r[j]);
}

static void print_dims(loom_strbuf *b, int32_t rank, const int64_t *shape) {
  loom_strbuf_put(b, "[");
  for (int32_t i = 0; i < rank; i++) loom_strbuf_put(b, "%s%lld", i ? ", " : "", (long long)shape[i]);
  loom_strbuf_put(b, "]");
}

static void print_expr(loom_strbuf *b, int32_t i, const loom_kexpr *e) {
  loom_strbuf_put(b, "  e%d = ", i);
  switch (e->kind) {
  case LOOM_KX_LOAD:
    loom_strbuf_put(b, "load a%d[", e->arg);
    print_map(b, &e->map);
    loom_strbuf_put(b, "]");
    if (e->n_a == 1) loom_strbuf_put(b, " if e%d", e->a[0]);
    break;
  case LOOM_KX_CONST: loom_strbuf_put(b, "const %.17g", e->c); break;
  case LOOM_KX_INDEX:
    loom_strbuf_put(b, "index ");
    print_map(b, &e->map);
    break;
  case LOOM_KX_OP:
    loom_strbuf_put(b, "%s", op_name(e->op));
    for (int32_t a = 0; a < e->n_a && a < 3; a++) loom_strbuf_put(b, " e%d", e->a[a]);
    break;
  case LOOM_KX_REG: loom_strbuf_put(b, "reg r%d", e->reg); break;
  case LOOM_KX_SCRATCH: loom_strbuf_put(b, "scratch s%d", e->scratch); break;
  case LOOM_KX_KEEP:
    loom_strbuf_put(b, "keep");
    for (int32_t a = 0; a < e->n_a && a < 3; a++) loom_strbuf_put(b, " e%d", e->a[a]);
    loom_strbuf_put(b, " seed=%llu offset=%llu threshold=%llu", (unsigned long long)e->seed,
              (unsigned long long)e->offset, (unsigned long long)e->threshold);
    break;
  default: loom_strbuf_put(b, "? kind %d", (int)e->kind); break;
  }
  loom_strbuf_put(b, " : %s\n", dt_name(e->dtype));
}

static void print_out(loom_strbuf *b, const loom_kout *o) {
  loom_strbuf_put(b, "      %s", loom_kdst_kind_name(o->dst));
  if (o->dst == LOOM_KDST_ROW_REDUCE || o->dst == LOOM_KDST_COL_REDUCE)
    loom_strbuf_put(b, ".%s", op_name(o->combine));
  switch (o->dst) {
  case LOOM_KDST_STORE:
  case LOOM_KDST_COL_REDUCE:
    loom_strbuf_put(b, " a%d[", o->target);
    print_map(b, &o->map);
    loom_strbuf_put(b, "]");
    break;
  case LOOM_KDST_SCRATCH: loom_strbuf_put(b, " s%d", o->target); break;
  default: loom_strbuf_put(b, " r%d", o->target); break;
  }
  loom_strbuf_put(b, " <- e%d\n", o->expr);
}

loom_status loom_kernel_print(loom_ctx *ctx, const loom_kernel *k, char **out) {
  loom_strbuf b = {0};
  loom_strbuf_put(&b, "kernel %s", k->name);
  if (k->n_nodes > 0) {
    loom_strbuf_put(&b, " (nodes");
    for (int32_t i = 0; i < k->n_nodes; i++) loom_strbuf_put(&b, " %d", k->nodes[i]);
    loom_strbuf_put(&b, ")");
  }
  loom_strbuf_put(&b, "\n");
  for (int32_t i = 0; i < k->n_args; i++) {
    const loom_karg *a = &k->args[i];
    loom_strbuf_put(&b, "  a%d: %s %s[%lld] v%d\n", i,
              a->temp ? "temp" : a->is_output ? "out" : "in", dt_name(a->dtype),
              (long long)a->numel, a->value);
  }
  for (int32_t i = 0; i < k->n_exprs; i++) print_expr(&b, i, &k->exprs[i]);
  for (int32_t pi = 0; pi < k->n_parts; pi++) {
    const loom_kpart *p = &k->parts[pi];
    loom_strbuf_put(&b, "  part %d phase %d: P ", pi, p->phase);
    print_dims(&b, p->p_rank, p->p_shape);
    loom_strbuf_put(&b, " R ");
    print_dims(&b, p->r_rank, p->r_shape);
    loom_strbuf_put(&b, " rows/tile %lld vec %d regs %d scratch %d\n",
              (long long)p->sched.rows_per_tile, p->sched.vector_width, p->n_regs,
              p->n_scratch);
    for (int32_t s = 0; s < p->n_stages; s++) {
      const loom_kstage *st = &p->stages[s];
      loom_strbuf_put(&b, "    stage %d %s\n", s, st->kind == LOOM_KSTAGE_ROW ? "row" : "scalar");
      for (int32_t o = 0; o < st->n_out; o++) print_out(&b, &st->out[o]);
    }
  }
  *out = loom_strbuf_take(&b);
  if (!*out) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory printing a kernel");
  return LOOM_STATUS_OK;
}

/* ---- the verifier -------------------------------------------------------- */

static bool is_ident(const char *s) {
  if (!s[0] || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
    return false;
  for (const char *c = s; *c; c++)
    if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
          (*c >= '0' && *c <= '9')))
      return false;
  return true;
}

static bool combine_ok(loom_op op) {
  return op == LOOM_OP_ADD || op == LOOM_OP_MAXIMUM || op == LOOM_OP_MINIMUM;
}

/* Map entries past the part's ranks must be 0. */
static bool map_in_rank(const loom_kmap *m, int32_t p_rank, int32_t r_rank) {
  for (int32_t i = p_rank; i < LOOM_MAX_RANK; i++)
    if (m->p[i]) return false;
  for (int32_t j = r_rank; j < LOOM_MAX_RANK; j++)
    if (m->r[j]) return false;
  return true;
}

/* True if every offset map takes over the part's domain (r fixed at 0 in
 * scalar stages) lies in [0, numel); an empty domain accesses nothing. */
static bool map_in_bounds(const loom_kmap *m, const loom_kpart *part, bool scalar, int64_t numel) {
  if (loom_kpart_rows(part) == 0 || (!scalar && loom_kpart_row_len(part) == 0)) return true;
  int64_t lo = m->base, hi = m->base;
  for (int32_t i = 0; i < part->p_rank; i++) {
    int64_t d = m->p[i] * (part->p_shape[i] - 1);
    if (d < 0) lo += d; else hi += d;
  }
  for (int32_t j = 0; !scalar && j < part->r_rank; j++) {
    int64_t d = m->r[j] * (part->r_shape[j] - 1);
    if (d < 0) lo += d; else hi += d;
  }
  return lo >= 0 && hi < numel;
}

typedef struct vstate {
  loom_ctx *ctx;
  const loom_kernel *k;
  int32_t *mark;         /* per expr: stamp of the last walk that reached it */
  int32_t *stack;
  int32_t *arg_writers;  /* per arg: number of outputs writing it */
  int32_t *arg_phase;    /* per arg: phase of its writer (-1: none) */
  const loom_kout **arg_first; /* per arg: its first writer */
} vstate;

static loom_status verr(vstate *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static loom_status verr(vstate *v, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_error(v->ctx, LOOM_STATUS_INTERNAL, "kernel %s: %s", v->k->name, msg);
}

static loom_status verify_expr(vstate *v, int32_t i) {
  const loom_kernel *k = v->k;
  const loom_kexpr *e = &k->exprs[i];
  if ((int)e->kind < 0 || e->kind >= LOOM_KX_COUNT) return verr(v, "e%d: bad kind %d", i, (int)e->kind);
  if (!loom_dtype_valid(e->dtype)) return verr(v, "e%d: bad dtype %d", i, (int)e->dtype);
  if (e->n_a < 0 || e->n_a > 3) return verr(v, "e%d: %d operands", i, e->n_a);
  for (int32_t a = 0; a < e->n_a; a++)
    if (e->a[a] < 0 || e->a[a] >= i)
      return verr(v, "e%d: operand %d is e%d, not an earlier expression", i, a, e->a[a]);
  if (e->kind != LOOM_KX_OP && e->kind != LOOM_KX_KEEP && e->n_a != 0 &&
      !(e->kind == LOOM_KX_LOAD && e->n_a == 1))
    return verr(v, "e%d: a %s takes no operands", i, loom_kexpr_kind_name(e->kind));
  switch (e->kind) {
  case LOOM_KX_LOAD: {
    if (e->arg < 0 || e->arg >= k->n_args) return verr(v, "e%d: load of a%d: no such arg", i, e->arg);
    const loom_karg *a = &k->args[e->arg];
    if (a->dtype != e->dtype)
      return verr(v, "e%d: load as %s of a%d, a %s argument", i, dt_name(e->dtype), e->arg,
                  dt_name(a->dtype));
    if (e->n_a == 1 && k->exprs[e->a[0]].dtype != LOOM_DTYPE_BOOL)
      return verr(v, "e%d: load guard e%d is not bool", i, e->a[0]);
    break;
  }
  case LOOM_KX_OP: {
    const loom_op_def *d = loom_op_get(e->op);
    if (!d || d->cls != LOOM_OPCLASS_ELEMENTWISE)
      return verr(v, "e%d: op %s is not element-wise", i, op_name(e->op));
    int32_t want = e->op == LOOM_OP_SELECT ? 3 : e->op == LOOM_OP_CAST ? 1 : d->scalar1 ? 1 : 2;
    if (e->n_a != want) return verr(v, "e%d: %s takes %d operands, has %d", i, d->name, want, e->n_a);
    if (e->op == LOOM_OP_SELECT && k->exprs[e->a[0]].dtype != LOOM_DTYPE_BOOL)
      return verr(v, "e%d: select's condition e%d is not bool", i, e->a[0]);
    break;
  }
  case LOOM_KX_REG:
    if (e->reg < 0) return verr(v, "e%d: register %d", i, e->reg);
    break;
  case LOOM_KX_SCRATCH:
    if (e->scratch < 0) return verr(v, "e%d: scratch row %d", i, e->scratch);
    if (e->dtype != LOOM_DTYPE_F32) return verr(v, "e%d: scratch is f32 only", i);
    break;
  case LOOM_KX_KEEP:
    if (e->n_a < 1 || e->n_a > 2) return verr(v, "e%d: keep takes 1 or 2 operands", i);
    for (int32_t a = 0; a < e->n_a; a++)
      if (!loom_dtype_is_int(k->exprs[e->a[a]].dtype) || k->exprs[e->a[a]].dtype == LOOM_DTYPE_BOOL)
        return verr(v, "e%d: keep's counter operand e%d is not an integer", i, e->a[a]);
    if (e->dtype != LOOM_DTYPE_BOOL) return verr(v, "e%d: keep must be bool", i);
    break;
  default: break;
  }
  return LOOM_STATUS_OK;
}

/* Checks the expressions one stage reads: registers and scratch rows
 * written earlier, loads and indices in rank and in bounds. */
static loom_status verify_reads(vstate *v, int32_t pi, int32_t s, const int32_t *reg_stage,
                                const loom_dtype *reg_dt, const int32_t *scr_stage) {
  const loom_kernel *k = v->k;
  const loom_kpart *part = &k->parts[pi];
  const loom_kstage *st = &part->stages[s];
  bool scalar = st->kind == LOOM_KSTAGE_SCALAR;
  int32_t stamp = pi * 65536 + s + 1, sp = 0;
  for (int32_t o = 0; o < st->n_out; o++) {
    int32_t root = st->out[o].expr;
    if (v->mark[root] == stamp) continue;
    v->mark[root] = stamp;
    v->stack[sp++] = root;
    while (sp > 0) {
      int32_t i = v->stack[--sp];
      const loom_kexpr *e = &k->exprs[i];
      for (int32_t a = 0; a < e->n_a; a++)
        if (v->mark[e->a[a]] != stamp) {
          v->mark[e->a[a]] = stamp;
          v->stack[sp++] = e->a[a];
        }
      const char *where = scalar ? "scalar" : "row";
      switch (e->kind) {
      case LOOM_KX_REG:
        if (e->reg >= part->n_regs || reg_stage[e->reg] < 0 || reg_stage[e->reg] >= s)
          return verr(v, "part %d stage %d reads register r%d (e%d) before it is written", pi, s,
                      e->reg, i);
        if (reg_dt[e->reg] != e->dtype)
          return verr(v, "part %d stage %d reads r%d as %s, written as %s", pi, s, e->reg,
                      dt_name(e->dtype), dt_name(reg_dt[e->reg]));
        break;
      case LOOM_KX_SCRATCH:
        if (scalar) return verr(v, "part %d stage %d (scalar) reads scratch (e%d)", pi, s, i);
        if (e->scratch >= part->n_scratch || scr_stage[e->scratch] < 0 ||
            scr_stage[e->scratch] >= s)
          return verr(v, "part %d stage %d reads scratch s%d (e%d) before it is written", pi, s,
                      e->scratch, i);
        break;
      case LOOM_KX_LOAD:
        if (!map_in_rank(&e->map, part->p_rank, part->r_rank))
          return verr(v, "part %d: e%d's map uses dims past P rank %d / R rank %d", pi, i,
                      part->p_rank, part->r_rank);
        if (e->n_a == 0 && !map_in_bounds(&e->map, part, scalar, k->args[e->arg].numel))
          return verr(v, "part %d stage %d (%s): e%d loads outside a%d (%lld elements)", pi, s,
                      where, i, e->arg, (long long)k->args[e->arg].numel);
        if ((k->args[e->arg].temp || k->args[e->arg].is_output) &&
            !(v->arg_phase[e->arg] >= 0 && v->arg_phase[e->arg] < part->phase))
          return verr(v, "part %d (phase %d) loads %s a%d not written by an earlier phase", pi,
                      part->phase, k->args[e->arg].temp ? "temp" : "output", e->arg);
        break;
      case LOOM_KX_INDEX:
        if (!map_in_rank(&e->map, part->p_rank, part->r_rank))
          return verr(v, "part %d: e%d's map uses dims past P rank %d / R rank %d", pi, i,
                      part->p_rank, part->r_rank);
        break;
      default: break;
      }
    }
  }
  return LOOM_STATUS_OK;
}

static loom_status verify_out(vstate *v, int32_t pi, int32_t s, int32_t o, int32_t *reg_stage,
                              loom_dtype *reg_dt, int32_t *scr_stage) {
  const loom_kernel *k = v->k;
  const loom_kpart *part = &k->parts[pi];
  const loom_kstage *st = &part->stages[s];
  const loom_kout *ko = &st->out[o];
  bool scalar = st->kind == LOOM_KSTAGE_SCALAR;
  if (ko->expr < 0 || ko->expr >= k->n_exprs)
    return verr(v, "part %d stage %d out %d: expression e%d does not exist", pi, s, o, ko->expr);
  const loom_kexpr *e = &k->exprs[ko->expr];
  switch (ko->dst) {
  case LOOM_KDST_STORE:
  case LOOM_KDST_COL_REDUCE: {
    bool col = ko->dst == LOOM_KDST_COL_REDUCE;
    if (ko->target < 0 || ko->target >= k->n_args)
      return verr(v, "part %d stage %d out %d: argument a%d does not exist", pi, s, o, ko->target);
    const loom_karg *a = &k->args[ko->target];
    if (!(a->is_output || (col && a->temp)))
      return verr(v, "part %d stage %d out %d: a%d is not an output%s", pi, s, o, ko->target,
                  col ? " or temp" : "");
    if (a->dtype != e->dtype)
      return verr(v, "part %d stage %d out %d: %s value into %s a%d", pi, s, o,
                  dt_name(e->dtype), dt_name(a->dtype), ko->target);
    if (col && (e->dtype != LOOM_DTYPE_F32 || !combine_ok(ko->combine)))
      return verr(v, "part %d stage %d out %d: col_reduce needs f32 and add/maximum/minimum", pi,
                  s, o);
    if (!map_in_rank(&ko->map, part->p_rank, part->r_rank))
      return verr(v, "part %d stage %d out %d: map uses dims past the part's ranks", pi, s, o);
    if (!map_in_bounds(&ko->map, part, scalar, a->numel))
      return verr(v, "part %d stage %d out %d: writes outside a%d (%lld elements)", pi, s, o,
                  ko->target, (long long)a->numel);
    break;
  }
  case LOOM_KDST_SCRATCH:
    if (scalar) return verr(v, "part %d stage %d out %d: scratch in a scalar stage", pi, s, o);
    if (ko->target < 0 || ko->target >= part->n_scratch)
      return verr(v, "part %d stage %d out %d: scratch s%d does not exist", pi, s, o, ko->target);
    if (e->dtype != LOOM_DTYPE_F32)
      return verr(v, "part %d stage %d out %d: scratch is f32 only", pi, s, o);
    if (scr_stage[ko->target] >= 0)
      return verr(v, "part %d stage %d out %d: scratch s%d written twice", pi, s, o, ko->target);
    scr_stage[ko->target] = s;
    break;
  case LOOM_KDST_REG:
  case LOOM_KDST_ROW_REDUCE: {
    bool red = ko->dst == LOOM_KDST_ROW_REDUCE;
    if (red == scalar)
      return verr(v, "part %d stage %d out %d: %s in a %s stage", pi, s, o,
                  loom_kdst_kind_name(ko->dst), scalar ? "scalar" : "row");
    if (ko->target < 0 || ko->target >= part->n_regs)
      return verr(v, "part %d stage %d out %d: register r%d does not exist", pi, s, o, ko->target);
    if (red && (e->dtype != LOOM_DTYPE_F32 || !combine_ok(ko->combine)))
      return verr(v, "part %d stage %d out %d: row_reduce needs f32 and add/maximum/minimum", pi,
                  s, o);
    if (reg_stage[ko->target] >= 0)
      return verr(v, "part %d stage %d out %d: register r%d written twice", pi, s, o, ko->target);
    reg_stage[ko->target] = s;
    reg_dt[ko->target] = e->dtype;
    break;
  }
  default: return verr(v, "part %d stage %d out %d: bad destination %d", pi, s, o, (int)ko->dst);
  }
  return LOOM_STATUS_OK;
}

static loom_status verify_part(vstate *v, int32_t pi) {
  const loom_kpart *part = &v->k->parts[pi];
  if (part->p_rank < 0 || part->p_rank > LOOM_MAX_RANK || part->r_rank < 0 ||
      part->r_rank > LOOM_MAX_RANK)
    return verr(v, "part %d: ranks P %d, R %d", pi, part->p_rank, part->r_rank);
  for (int32_t i = 0; i < part->p_rank; i++)
    if (part->p_shape[i] < 0) return verr(v, "part %d: negative P dim", pi);
  for (int32_t j = 0; j < part->r_rank; j++)
    if (part->r_shape[j] < 0) return verr(v, "part %d: negative R dim", pi);
  int32_t w = part->sched.vector_width;
  if (part->sched.rows_per_tile < 1 || !(w == 1 || w == 2 || w == 4 || w == 8 || w == 16))
    return verr(v, "part %d: schedule rows_per_tile %lld, vector_width %d", pi,
                (long long)part->sched.rows_per_tile, w);
  if (part->phase < 0 || (pi > 0 && part->phase < v->k->parts[pi - 1].phase))
    return verr(v, "part %d: phase %d out of order", pi, part->phase);
  if (part->n_regs < 0 || part->n_scratch < 0 || part->n_stages < 0 ||
      (part->n_stages > 0 && !part->stages))
    return verr(v, "part %d: bad counts", pi);
  int32_t nr = part->n_regs > 0 ? part->n_regs : 1, ns = part->n_scratch > 0 ? part->n_scratch : 1;
  int32_t *reg_stage = malloc(sizeof(int32_t) * (size_t)(nr + ns));
  loom_dtype *reg_dt = malloc(sizeof(loom_dtype) * (size_t)nr);
  if (!reg_stage || !reg_dt) {
    free(reg_stage);
    free(reg_dt);
    return loom_error(v->ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory verifying a kernel");
  }
  int32_t *scr_stage = reg_stage + nr;
  for (int32_t i = 0; i < nr + ns; i++) reg_stage[i] = -1;
  loom_status st = LOOM_STATUS_OK;
  for (int32_t s = 0; s < part->n_stages && st == LOOM_STATUS_OK; s++) {
    const loom_kstage *sg = &part->stages[s];
    if (sg->kind != LOOM_KSTAGE_ROW && sg->kind != LOOM_KSTAGE_SCALAR) {
      st = verr(v, "part %d stage %d: bad kind", pi, s);
      break;
    }
    if (sg->n_out < 0 || (sg->n_out > 0 && !sg->out)) {
      st = verr(v, "part %d stage %d: bad output count", pi, s);
      break;
    }
    for (int32_t o = 0; o < sg->n_out && st == LOOM_STATUS_OK; o++)
      if (sg->out[o].expr < 0 || sg->out[o].expr >= v->k->n_exprs)
        st = verr(v, "part %d stage %d out %d: expression e%d does not exist", pi, s, o,
                  sg->out[o].expr);
    if (st == LOOM_STATUS_OK) st = verify_reads(v, pi, s, reg_stage, reg_dt, scr_stage);
    for (int32_t o = 0; o < sg->n_out && st == LOOM_STATUS_OK; o++)
      st = verify_out(v, pi, s, o, reg_stage, reg_dt, scr_stage);
  }
  free(reg_stage);
  free(reg_dt);
  return st;
}

loom_status loom_kernel_verify(loom_ctx *ctx, const loom_kernel *k) {
  if (!k) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "no kernel");
  vstate v = {.ctx = ctx, .k = k};
  if (!memchr(k->name, 0, sizeof k->name) || !is_ident(k->name))
    return verr(&v, "the name is not a C identifier");
  if (k->n_args < 0 || (k->n_args > 0 && !k->args) || k->n_exprs < 0 ||
      (k->n_exprs > 0 && !k->exprs) || k->n_parts < 1 || !k->parts || k->n_nodes < 0)
    return verr(&v, "bad counts (args %d, exprs %d, parts %d)", k->n_args, k->n_exprs, k->n_parts);
  for (int32_t i = 0; i < k->n_args; i++) {
    const loom_karg *a = &k->args[i];
    if (!loom_dtype_valid(a->dtype) || a->numel < 0 || (a->temp && a->is_output))
      return verr(&v, "a%d: bad dtype, size or flags", i);
  }
  for (int32_t i = 0; i < k->n_exprs; i++) LOOM_TRY(verify_expr(&v, i));
  size_t ne = (size_t)(k->n_exprs > 0 ? k->n_exprs : 1), na = (size_t)(k->n_args > 0 ? k->n_args : 1);
  v.mark = malloc(sizeof(int32_t) * ne * 2);
  v.arg_writers = calloc(na * 2, sizeof(int32_t));
  v.arg_first = calloc(na, sizeof(loom_kout *));
  if (!v.mark || !v.arg_writers || !v.arg_first) {
    free(v.mark);
    free(v.arg_writers);
    free(v.arg_first);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory verifying a kernel");
  }
  v.stack = v.mark + ne;
  v.arg_phase = v.arg_writers + na;
  for (size_t i = 0; i < ne; i++) v.mark[i] = 0;
  for (size_t i = 0; i < na; i++) v.arg_phase[i] = -1;
  loom_status st = LOOM_STATUS_OK;
  /* writers first, so loads of temps can check the writer's phase */
  for (int32_t pi = 0; pi < k->n_parts && st == LOOM_STATUS_OK; pi++) {
    const loom_kpart *part = &k->parts[pi];
    for (int32_t s = 0; s < part->n_stages && part->stages; s++)
      for (int32_t o = 0; o < part->stages[s].n_out && part->stages[s].out; o++) {
        const loom_kout *ko = &part->stages[s].out[o];
        if ((ko->dst != LOOM_KDST_STORE && ko->dst != LOOM_KDST_COL_REDUCE) || ko->target < 0 ||
            ko->target >= k->n_args)
          continue;
        /* STOREs of one phase may share an output when they walk it alike
         * from other bases (the segments of a loop: fusion/lower.c);
         * anything else writes alone */
        int32_t *n = &v.arg_writers[ko->target]; /* 0 none, 1 STOREs, 2 a COL_REDUCE, 3 more */
        const loom_kout *f = v.arg_first[ko->target];
        bool alike = f && ko->dst == LOOM_KDST_STORE && f->dst == LOOM_KDST_STORE &&
                     !k->args[ko->target].temp && v.arg_phase[ko->target] == part->phase &&
                     f->map.base != ko->map.base &&
                     memcmp(f->map.p, ko->map.p, sizeof f->map.p) == 0 &&
                     memcmp(f->map.r, ko->map.r, sizeof f->map.r) == 0;
        *n = *n == 0 ? (ko->dst == LOOM_KDST_STORE ? 1 : 2) : alike ? 1 : 3;
        if (!f) v.arg_first[ko->target] = ko;
        v.arg_phase[ko->target] = part->phase;
      }
  }
  for (int32_t i = 0; i < k->n_args && st == LOOM_STATUS_OK; i++) {
    const loom_karg *a = &k->args[i];
    if ((a->is_output || a->temp) && (v.arg_writers[i] == 0 || v.arg_writers[i] == 3))
      st = verr(&v, "%s a%d has %s writer (needs one, or STOREs of one phase)",
                a->temp ? "temp" : "output", i, v.arg_writers[i] ? "more than one" : "no");
  }
  for (int32_t pi = 0; pi < k->n_parts && st == LOOM_STATUS_OK; pi++) st = verify_part(&v, pi);
  free(v.mark);
  free(v.arg_writers);
  free(v.arg_first);
  return st;
}
