/* The kernel IR interpreter (kernel/interp.h): kernel.h's semantics, read
 * literally. Values are doubles for float dtypes and int64 for integer
 * dtypes; every conversion goes through loom_store/loom_load so that it is
 * the reference executor's conversion by construction. */
#include "kernel/interp.h"
#include "kernel/kmath.h"

#include "ir/dtype.h"
#include "ops/op.h"
#include "rng/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef union kval {
  double f;
  int64_t i;
} kval;

static bool is_int(loom_dtype dt) { return loom_dtype_is_int(dt); }

/* A double converted to dt, as loom_store converts it. */
static kval from_double(loom_dtype dt, double x) {
  uint64_t buf[1];
  loom_store(dt, buf, 0, x);
  kval v;
  if (is_int(dt))
    v.i = loom_load_i64(dt, buf, 0);
  else
    v.f = loom_load(dt, buf, 0);
  return v;
}

/* An exact int64 saturated into an integer dtype (the reference's set_i64). */
static int64_t sat_int(loom_dtype dt, int64_t x) {
  switch (dt) {
  case LOOM_DTYPE_I32: return x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : x;
  case LOOM_DTYPE_U8: return x < 0 ? 0 : x > 255 ? 255 : x;
  case LOOM_DTYPE_BOOL: return x != 0;
  default: return x;
  }
}

/* A value of dtype src converted to dtype dst. */
static kval convert(loom_dtype dst, loom_dtype src, kval v) {
  if (is_int(src) && is_int(dst)) return (kval){.i = sat_int(dst, v.i)};
  return from_double(dst, is_int(src) ? (double)v.i : v.f);
}

static double as_double(loom_dtype dt, kval v) { return is_int(dt) ? (double)v.i : v.f; }

typedef struct irun {
  const loom_kernel *k;
  char **ptr;        /* per arg: base pointer */
  kval *val;         /* per expr: value at the current element */
  kval *reg;         /* registers of the current part */
  float *scratch;    /* the current part's scratch rows */
  int64_t stride;    /* floats between scratch rows */
  int64_t p[LOOM_MAX_RANK], r[LOOM_MAX_RANK];
  int64_t rf;        /* flat r of the current element */
  const loom_kpart *part;
} irun;

static kval eval_one(irun *x, const loom_kexpr *e) {
  const loom_kpart *part = x->part;
  kval v = {0};
  switch (e->kind) {
  case LOOM_KX_LOAD: {
    if (e->n_a == 1 && x->val[e->a[0]].i == 0) return v; /* guarded off: 0 */
    int64_t off = loom_kmap_at(&e->map, part->p_rank, x->p, part->r_rank, x->r);
    const void *base = x->ptr[e->arg];
    if (is_int(e->dtype))
      v.i = loom_load_i64(e->dtype, base, off);
    else
      v.f = loom_load(e->dtype, base, off);
    return v;
  }
  case LOOM_KX_CONST: return from_double(e->dtype, e->c);
  case LOOM_KX_INDEX: {
    int64_t idx = loom_kmap_at(&e->map, part->p_rank, x->p, part->r_rank, x->r);
    return convert(e->dtype, LOOM_DTYPE_I64, (kval){.i = idx});
  }
  case LOOM_KX_REG: return x->reg[e->reg];
  case LOOM_KX_SCRATCH: return (kval){.f = x->scratch[e->scratch * x->stride + x->rf]};
  case LOOM_KX_KEEP: {
    uint64_t j = (uint64_t)x->val[e->a[0]].i + e->offset;
    if (e->n_a > 1) j += (uint64_t)x->val[e->a[1]].i;
    return (kval){.i = loom_dropout_keep(e->seed, j, e->threshold) ? 1 : 0};
  }
  case LOOM_KX_OP: break;
  default: return v;
  }
  const loom_kexpr *ex = x->k->exprs;
  loom_dtype d0 = ex[e->a[0]].dtype;
  kval a0 = x->val[e->a[0]];
  if (e->op == LOOM_OP_SELECT) {
    int32_t pick = a0.i ? e->a[1] : e->a[2];
    return convert(e->dtype, ex[pick].dtype, x->val[pick]);
  }
  if (e->op == LOOM_OP_CAST) return convert(e->dtype, d0, a0);
  if (e->dtype == LOOM_DTYPE_F32 && d0 == LOOM_DTYPE_F32 && e->n_a == 1) {
    /* the kernel IR's own f32 functions (kernel/kmath.h) */
    float a = (float)a0.f;
    switch (e->op) {
    case LOOM_OP_EXP: return (kval){.f = lm_expf(a)};
    case LOOM_OP_TANH: return (kval){.f = lm_tanhf(a)};
    case LOOM_OP_SIGMOID: return (kval){.f = lm_sigmoidf(a)};
    case LOOM_OP_LOG: return (kval){.f = lm_logf(a)};
    case LOOM_OP_ERF: return (kval){.f = lm_erff(a)};
    default: break;
    }
  }
  const loom_op_def *d = loom_op_get(e->op);
  bool all_int = is_int(d0) && (e->n_a < 2 || is_int(ex[e->a[1]].dtype));
  if (all_int && e->op != LOOM_OP_POW) {
    int64_t b = e->n_a > 1 ? x->val[e->a[1]].i : 0;
    return convert(e->dtype, LOOM_DTYPE_I64, (kval){.i = loom_int_elementwise(e->op, a0.i, b)});
  }
  double r;
  if (e->n_a == 1)
    r = d->scalar1(as_double(d0, a0));
  else
    r = d->scalar2(as_double(d0, a0), as_double(ex[e->a[1]].dtype, x->val[e->a[1]]));
  return from_double(e->dtype, r);
}

static double identity(loom_op combine) {
  return combine == LOOM_OP_ADD ? 0.0 : combine == LOOM_OP_MAXIMUM ? -INFINITY : INFINITY;
}

/* combine(acc, v) as the op table's scalar2. */
static double combine2(loom_op combine, double acc, double v) {
  return loom_op_get(combine)->scalar2(acc, v);
}

/* The exprs a stage reaches, ascending (a topological order). */
static int32_t stage_needs(const loom_kernel *k, const loom_kstage *st, bool *mark,
                           int32_t *list) {
  memset(mark, 0, sizeof(bool) * (size_t)k->n_exprs);
  for (int32_t o = 0; o < st->n_out; o++) mark[st->out[o].expr] = true;
  for (int32_t i = k->n_exprs - 1; i >= 0; i--)
    if (mark[i])
      for (int32_t a = 0; a < k->exprs[i].n_a; a++) mark[k->exprs[i].a[a]] = true;
  int32_t n = 0;
  for (int32_t i = 0; i < k->n_exprs; i++)
    if (mark[i]) list[n++] = i;
  return n;
}

static void unflatten(int64_t flat, int32_t rank, const int64_t *shape, int64_t *coord) {
  for (int32_t d = rank - 1; d >= 0; d--) {
    coord[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
}

typedef struct ipart_bufs {
  bool *mark;
  double *lanes; /* W accumulators per ROW_REDUCE output of a stage */
} ipart_bufs;

static void run_stage(irun *x, const loom_kstage *st, int32_t n_need, const int32_t *need,
                      double **partial, int64_t tile, double *lanes) {
  const loom_kernel *k = x->k;
  const loom_kpart *part = x->part;
  int32_t W = part->sched.vector_width;
  bool scalar = st->kind == LOOM_KSTAGE_SCALAR;
  int64_t n_el = scalar ? 1 : loom_kpart_row_len(part);
  for (int32_t o = 0; o < st->n_out; o++)
    if (st->out[o].dst == LOOM_KDST_ROW_REDUCE)
      for (int32_t l = 0; l < W; l++) lanes[o * W + l] = identity(st->out[o].combine);
  for (int64_t rf = 0; rf < n_el; rf++) {
    x->rf = rf;
    if (scalar)
      memset(x->r, 0, sizeof x->r);
    else
      unflatten(rf, part->r_rank, part->r_shape, x->r);
    for (int32_t n = 0; n < n_need; n++) x->val[need[n]] = eval_one(x, &k->exprs[need[n]]);
    for (int32_t o = 0; o < st->n_out; o++) {
      const loom_kout *ko = &st->out[o];
      const loom_kexpr *e = &k->exprs[ko->expr];
      kval v = x->val[ko->expr];
      switch (ko->dst) {
      case LOOM_KDST_STORE: {
        int64_t off = loom_kmap_at(&ko->map, part->p_rank, x->p, part->r_rank, x->r);
        if (is_int(e->dtype)) {
          /* exact for every integer dtype (values are in range already) */
          if (e->dtype == LOOM_DTYPE_I64)
            ((int64_t *)x->ptr[ko->target])[off] = v.i;
          else
            loom_store(e->dtype, x->ptr[ko->target], off, (double)v.i);
        } else {
          loom_store(e->dtype, x->ptr[ko->target], off, v.f);
        }
        break;
      }
      case LOOM_KDST_SCRATCH: x->scratch[ko->target * x->stride + rf] = (float)v.f; break;
      case LOOM_KDST_REG: x->reg[ko->target] = v; break;
      case LOOM_KDST_ROW_REDUCE: { /* f32 lanes: every combine rounded to f32 */
        double *acc = &lanes[o * W + rf % W];
        *acc = (double)(float)combine2(ko->combine, *acc, v.f);
        break;
      }
      case LOOM_KDST_COL_REDUCE: {
        int64_t off = loom_kmap_at(&ko->map, part->p_rank, x->p, part->r_rank, x->r);
        double *acc = &partial[o][tile * k->args[ko->target].numel + off];
        *acc = combine2(ko->combine, *acc, v.f);
        break;
      }
      default: break;
      }
    }
  }
  for (int32_t o = 0; o < st->n_out; o++) {
    const loom_kout *ko = &st->out[o];
    if (ko->dst != LOOM_KDST_ROW_REDUCE) continue;
    double res = lanes[o * W];
    for (int32_t l = 1; l < W; l++)
      res = (double)(float)combine2(ko->combine, res, lanes[o * W + l]);
    x->reg[ko->target] = from_double(LOOM_DTYPE_F32, res);
  }
}

static loom_status run_part(loom_ctx *ctx, irun *x, const loom_kworkspace *ws, char *wsbase,
                            int32_t *col_index, ipart_bufs *b) {
  const loom_kernel *k = x->k;
  const loom_kpart *part = x->part;
  int64_t rows = loom_kpart_rows(part), tiles = loom_kpart_tiles(part);
  int64_t rpt = part->sched.rows_per_tile;
  x->stride = loom_kpart_scratch_stride(part);
  x->scratch = (float *)(wsbase + ws->scratch);
  int32_t n_st = part->n_stages;
  /* per stage: its needed exprs, and per COL_REDUCE output its partials */
  int32_t **need = calloc((size_t)(n_st > 0 ? n_st : 1), sizeof(int32_t *));
  int32_t *n_need = calloc((size_t)(n_st > 0 ? n_st : 1), sizeof(int32_t));
  double ***partial = calloc((size_t)(n_st > 0 ? n_st : 1), sizeof(double **));
  loom_status status = LOOM_STATUS_OK;
  if (!need || !n_need || !partial) {
    status = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory interpreting a kernel");
    goto done;
  }
  for (int32_t s = 0; s < n_st; s++) {
    const loom_kstage *st = &part->stages[s];
    need[s] = malloc(sizeof(int32_t) * (size_t)(k->n_exprs > 0 ? k->n_exprs : 1));
    partial[s] = calloc((size_t)(st->n_out > 0 ? st->n_out : 1), sizeof(double *));
    if (!need[s] || !partial[s]) {
      status = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory interpreting a kernel");
      goto done;
    }
    n_need[s] = stage_needs(k, st, b->mark, need[s]);
    for (int32_t o = 0; o < st->n_out; o++) {
      const loom_kout *ko = &st->out[o];
      if (ko->dst != LOOM_KDST_COL_REDUCE) continue;
      double *pp = (double *)(wsbase + ws->partial[(*col_index)++]);
      int64_t n = tiles * k->args[ko->target].numel;
      for (int64_t i = 0; i < n; i++) pp[i] = identity(ko->combine);
      partial[s][o] = pp;
    }
  }
  for (int64_t t = 0; t < tiles; t++) {
    int64_t end = (t + 1) * rpt < rows ? (t + 1) * rpt : rows;
    for (int64_t row = t * rpt; row < end; row++) {
      unflatten(row, part->p_rank, part->p_shape, x->p);
      for (int32_t s = 0; s < n_st; s++)
        run_stage(x, &part->stages[s], n_need[s], need[s], partial[s], t, b->lanes);
    }
  }
  /* combine the tiles' partials, in tile order */
  for (int32_t s = 0; s < n_st; s++) {
    const loom_kstage *st = &part->stages[s];
    for (int32_t o = 0; o < st->n_out; o++) {
      const loom_kout *ko = &st->out[o];
      if (ko->dst != LOOM_KDST_COL_REDUCE) continue;
      int64_t numel = k->args[ko->target].numel;
      for (int64_t e = 0; e < numel; e++) {
        double acc = identity(ko->combine);
        for (int64_t t = 0; t < tiles; t++)
          acc = combine2(ko->combine, acc, partial[s][o][t * numel + e]);
        loom_store(LOOM_DTYPE_F32, x->ptr[ko->target], e, acc);
      }
    }
  }
done:
  for (int32_t s = 0; s < n_st; s++) {
    if (need) free(need[s]);
    if (partial) free(partial[s]);
  }
  free(need);
  free(n_need);
  free(partial);
  return status;
}

loom_status loom_kernel_interpret(loom_ctx *ctx, const loom_kernel *k, void *const *args) {
  LOOM_TRY(loom_kernel_verify(ctx, k));
  for (int32_t i = 0; i < k->n_args; i++)
    if (!k->args[i].temp && k->args[i].numel > 0 && (!args || !args[i]))
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "kernel %s: argument a%d is NULL",
                        k->name, i);
  loom_kworkspace ws;
  LOOM_TRY(loom_kernel_workspace_layout(ctx, k, 1, &ws));
  int32_t max_regs = 1, max_out = 1, max_w = 1;
  for (int32_t pi = 0; pi < k->n_parts; pi++) {
    const loom_kpart *part = &k->parts[pi];
    max_regs = LOOM_MAX(max_regs, part->n_regs);
    max_w = LOOM_MAX(max_w, part->sched.vector_width);
    for (int32_t s = 0; s < part->n_stages; s++) max_out = LOOM_MAX(max_out, part->stages[s].n_out);
  }
  size_t ne = (size_t)(k->n_exprs > 0 ? k->n_exprs : 1);
  char *wsbase = malloc((size_t)(ws.total > 0 ? ws.total : 1));
  char **ptr = calloc((size_t)(k->n_args > 0 ? k->n_args : 1), sizeof(char *));
  kval *val = calloc(ne, sizeof(kval));
  kval *reg = calloc((size_t)max_regs, sizeof(kval));
  ipart_bufs b = {.mark = calloc(ne, sizeof(bool)),
                  .lanes = calloc((size_t)max_out * (size_t)max_w, sizeof(double))};
  loom_status status = LOOM_STATUS_OK;
  if (!wsbase || !ptr || !val || !reg || !b.mark || !b.lanes) {
    status = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "out of memory interpreting kernel %s",
                        k->name);
    goto done;
  }
  for (int32_t i = 0; i < k->n_args; i++)
    ptr[i] = k->args[i].temp ? wsbase + ws.temp[i] : (char *)args[i];
  irun x = {.k = k, .ptr = ptr, .val = val, .reg = reg};
  int32_t col_index = 0;
  for (int32_t pi = 0; pi < k->n_parts && status == LOOM_STATUS_OK; pi++) {
    x.part = &k->parts[pi];
    status = run_part(ctx, &x, &ws, wsbase, &col_index, &b);
  }
done:
  free(wsbase);
  free(ptr);
  free(val);
  free(reg);
  free(b.mark);
  free(b.lanes);
  loom_kworkspace_clear(&ws);
  return status;
}
