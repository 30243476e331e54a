/*
 * Expressions of generated C: the renderer table (one template per op and
 * evaluation path), conversions as loom_store does them, constants, the
 * offsets of maps, and one kernel expression as a C local.
 */
#include "codegen/c_internal.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- the renderer table -------------------------------------------------- */

/*
 * C for each element-wise op, by evaluation path ($a, $b: the operands):
 *   dbl  operands and result in double: literally the op table's
 *        scalar1/scalar2 (ops/elementwise.c), rounded once afterwards;
 *   flt  f32 operands, f32 result, used only where the float computation
 *        is bitwise the double one rounded to f32: +, -, *, / and sqrt are
 *        correctly rounded and double has more than 2*24+2 bits, so the
 *        double rounding is harmless; neg, abs, sign, relu, max and min are
 *        exact. exp, tanh, sigmoid, log and erf of an f32 operand into an
 *        f32 result are by definition the kernel IR's own f32 functions
 *        (kernel/kmath.h, pasted into the prelude), which the interpreter
 *        calls too; pow, rsqrt, ... have no flt form;
 *   int  integer operands (as int64_t), the exact result of
 *        ops/elementwise.c's integer path (saturated to the dtype after).
 * Comparisons, select and cast are rendered apart (render_op).
 */
typedef struct cg_render {
  const char *dbl, *flt, *intg;
} cg_render;

static const cg_render render_table[LOOM_OP_COUNT] = {
    [LOOM_OP_NEG] = {"-$a", "-$a", "lm_neg_i($a)"},
    [LOOM_OP_ABS] = {"fabs($a)", "fabsf($a)", "lm_abs_i($a)"},
    [LOOM_OP_SIGN] = {"lm_sign($a)", "lm_signf($a)", "(($a > 0) - ($a < 0))"},
    [LOOM_OP_EXP] = {"exp($a)", "lm_expf($a)", NULL},
    [LOOM_OP_LOG] = {"log($a)", "lm_logf($a)", NULL},
    [LOOM_OP_SQRT] = {"sqrt($a)", "sqrtf($a)", NULL},
    [LOOM_OP_RSQRT] = {"1.0 / sqrt($a)", NULL, NULL},
    [LOOM_OP_RECIPROCAL] = {"1.0 / $a", "1.0f / $a", NULL},
    [LOOM_OP_TANH] = {"tanh($a)", "lm_tanhf($a)", NULL},
    [LOOM_OP_SIGMOID] = {"lm_sigmoid($a)", "lm_sigmoidf($a)", NULL},
    [LOOM_OP_RELU] = {"($a < 0 ? 0.0 : $a)", "($a < 0 ? 0.0f : $a)", "($a < 0 ? 0 : $a)"},
    [LOOM_OP_ERF] = {"erf($a)", "lm_erff($a)", NULL},
    [LOOM_OP_SIN] = {"sin($a)", NULL, NULL},
    [LOOM_OP_COS] = {"cos($a)", NULL, NULL},
    [LOOM_OP_ADD] = {"$a + $b", "$a + $b", "lm_add_i($a, $b)"},
    [LOOM_OP_SUB] = {"$a - $b", "$a - $b", "lm_sub_i($a, $b)"},
    [LOOM_OP_MUL] = {"$a * $b", "$a * $b", "lm_mul_i($a, $b)"},
    [LOOM_OP_DIV] = {"$a / $b", "$a / $b", "lm_div_i($a, $b)"},
    [LOOM_OP_POW] = {"pow($a, $b)", NULL, NULL},
    [LOOM_OP_MAXIMUM] = {"lm_max($a, $b)", "lm_maxf($a, $b)", "($a > $b ? $a : $b)"},
    [LOOM_OP_MINIMUM] = {"lm_min($a, $b)", "lm_minf($a, $b)", "($a < $b ? $a : $b)"},
    [LOOM_OP_EQ] = {"==", NULL, NULL},
    [LOOM_OP_NE] = {"!=", NULL, NULL},
    [LOOM_OP_LT] = {"<", NULL, NULL},
    [LOOM_OP_LE] = {"<=", NULL, NULL},
    [LOOM_OP_GT] = {">", NULL, NULL},
    [LOOM_OP_GE] = {">=", NULL, NULL},
};

static bool is_compare(loom_op op) { return op >= LOOM_OP_EQ && op <= LOOM_OP_GE; }

/* Substitutes $a and $b in a template. */
static void subst(cg_buf *b, const char *tpl, const char *a, const char *bb) {
  for (const char *p = tpl; *p; p++) {
    if (p[0] == '$' && (p[1] == 'a' || p[1] == 'b')) {
      put(b, "%s", p[1] == 'a' ? a : bb);
      p++;
    } else {
      put(b, "%c", *p);
    }
  }
}

const char *loom_cg_ctype(loom_dtype dt) {
  switch (dt) {
  case LOOM_DTYPE_F32: return "float";
  case LOOM_DTYPE_F64: return "double";
  case LOOM_DTYPE_I32: return "int32_t";
  case LOOM_DTYPE_I64: return "int64_t";
  case LOOM_DTYPE_U8:
  case LOOM_DTYPE_BOOL: return "uint8_t";
  default: return NULL;
  }
}

bool loom_cg_is_float(loom_dtype dt) { return dt == LOOM_DTYPE_F32 || dt == LOOM_DTYPE_F64; }

/* Integer range of dt (for saturation). */
static const char *int_lo(loom_dtype dt) {
  return dt == LOOM_DTYPE_I32 ? "INT32_MIN" : dt == LOOM_DTYPE_I64 ? "INT64_MIN" : "0";
}
static const char *int_hi(loom_dtype dt) {
  return dt == LOOM_DTYPE_I32 ? "INT32_MAX" : dt == LOOM_DTYPE_I64 ? "INT64_MAX" : "255";
}

/* Writes `x` (a C expression of dtype from) converted to dtype to, as
 * loom_store converts (kernel.h, "Convert x to dtype"). */
void loom_cg_conv(cg_buf *b, const char *x, loom_dtype from, loom_dtype to) {
  if (from == to) {
    put(b, "%s", x);
  } else if (to == LOOM_DTYPE_BOOL) {
    put(b, "(uint8_t)(%s != 0)", x);
  } else if (to == LOOM_DTYPE_F32 && from == LOOM_DTYPE_BOOL) {
    put(b, "(%s ? 1.0f : 0.0f)", x); /* a select: gcc vectorises no bool -> double */
  } else if (to == LOOM_DTYPE_F32) {
    put(b, "(float)(double)%s", x); /* i64 -> f32 rounds through double too */
  } else if (to == LOOM_DTYPE_F64) {
    put(b, "(double)%s", x);
  } else if (loom_cg_is_float(from)) {
    put(b, "(%s)lm_f2i(%s, %s, %s)", loom_cg_ctype(to), x, int_lo(to), int_hi(to));
  } else if (to == LOOM_DTYPE_I64 || (to == LOOM_DTYPE_I32 && from != LOOM_DTYPE_I64) ||
             (to == LOOM_DTYPE_U8 && from == LOOM_DTYPE_BOOL)) {
    put(b, "(%s)%s", loom_cg_ctype(to), x); /* widening: exact */
  } else {
    put(b, "(%s)lm_sat(%s, %s, %s)", loom_cg_ctype(to), x, int_lo(to), int_hi(to));
  }
}

/* Writes a constant of dtype dt (c converted as loom_store would). */
static void put_const(cg_buf *b, double c, loom_dtype dt) {
  if (loom_cg_is_float(dt)) {
    double v = dt == LOOM_DTYPE_F32 ? (double)(float)c : c;
    const char *suf = dt == LOOM_DTYPE_F32 ? "f" : "";
    if (v != v)
      put(b, "%sNAN", dt == LOOM_DTYPE_F32 ? "" : "(double)");
    else if (isinf(v))
      put(b, "%s%sINFINITY", v < 0 ? "-" : "", dt == LOOM_DTYPE_F32 ? "" : "(double)");
    else
      put(b, "%a%s", v, suf); /* hex: exact */
    return;
  }
  int64_t i;
  if (c != c) i = 0;
  else if (dt == LOOM_DTYPE_BOOL) i = c != 0.0;
  else if (dt == LOOM_DTYPE_U8) i = c <= 0 ? 0 : c >= 255 ? 255 : (int64_t)c;
  else if (dt == LOOM_DTYPE_I32) i = c <= INT32_MIN ? INT32_MIN : c >= INT32_MAX ? INT32_MAX : (int64_t)c;
  else i = c <= -9223372036854775808.0 ? INT64_MIN : c >= 9223372036854775808.0 ? INT64_MAX : (int64_t)c;
  if (i == INT64_MIN)
    put(b, "((%s)INT64_MIN)", loom_cg_ctype(dt));
  else
    put(b, "((%s)%lldLL)", loom_cg_ctype(dt), (long long)i);
}

/* Operands are earlier expressions (the kernel verifier checks it), so one
 * downward sweep from e visits each reached expression once, with no
 * recursion (a chain of 10k ops would overflow the stack): 2 marks
 * "reached, operands not yet marked", 1 "done"; the sweep stops when
 * nothing is pending. */
void loom_cg_mark_reach_stop(const loom_kernel *k, int32_t e, uint8_t *seen, const int8_t *stop) {
  if (e < 0 || e >= k->n_exprs || seen[e]) return;
  seen[e] = 2;
  int64_t pending = 1;
  for (int32_t i = e; i >= 0 && pending > 0; i--) {
    if (seen[i] != 2) continue;
    seen[i] = 1;
    pending--;
    const loom_kexpr *x = &k->exprs[i];
    /* operands: of ops, keep bits and guarded loads */
    if ((stop && stop[i]) || x->kind == LOOM_KX_CONST || x->kind == LOOM_KX_INDEX ||
        x->kind == LOOM_KX_REG || x->kind == LOOM_KX_SCRATCH)
      continue;
    for (int32_t a = 0; a < x->n_a && a < 3; a++) {
      int32_t o = x->a[a];
      if (o >= 0 && o < i && !seen[o]) {
        seen[o] = 2;
        pending++;
      }
    }
  }
}

void loom_cg_mark_reach(const loom_kernel *k, int32_t e, uint8_t *seen) {
  loom_cg_mark_reach_stop(k, e, seen, NULL);
}

/* True if m's p strides collapse to one stride over the flat row index
 * (row-major over the non-unit p dims); *stride gets it. */
bool loom_cg_p_flat(const loom_kmap *m, const loom_kpart *part, int64_t *stride) {
  int32_t prev = -1;
  *stride = 0;
  for (int32_t i = 0; i < part->p_rank; i++) {
    if (part->p_shape[i] == 1) continue;
    if (prev >= 0 && m->p[prev] != m->p[i] * part->p_shape[i]) return false;
    prev = i;
  }
  if (prev >= 0) *stride = m->p[prev];
  return true;
}

/* The element offset of map m: its row base (named base) plus r terms. */
void loom_cg_put_offset(cg_buf *b, const cg_site *si, const char *base, const loom_kmap *m) {
  put(b, "%s", base);
  if (si->scalar) return;
  const cg_loops *lp = &si->cp->loops;
  for (int32_t d = 0; d < lp->n; d++) {
    int64_t s = m->r[lp->dim[d]];
    if (s == 1)
      put(b, " + %s", si->idx[d]);
    else if (s != 0)
      put(b, " + %s * (%lld)", si->idx[d], (long long)s);
  }
}

/* The row base of map m (the p terms), as a C expression. */
void loom_cg_put_row_base(cg_buf *b, const cg_part *cp, const loom_kmap *m) {
  int64_t s;
  put(b, "(int64_t)%lld", (long long)m->base);
  if (loom_cg_p_flat(m, cp->part, &s)) {
    if (s) put(b, " + row * (%lld)", (long long)s);
    return;
  }
  for (int32_t i = 0; i < cp->part->p_rank; i++)
    if (m->p[i] && cp->part->p_shape[i] != 1) put(b, " + p%d * (%lld)", i, (long long)m->p[i]);
}

/* The operation of expr e on locals v<a[i]> into b (a C expression of
 * e's dtype). */
static loom_status render_op(loom_ctx *ctx, cg_buf *b, const loom_kernel *k, int32_t e) {
  const loom_kexpr *x = &k->exprs[e];
  char v[3][24];
  loom_dtype dt[3] = {LOOM_DTYPE_F32, LOOM_DTYPE_F32, LOOM_DTYPE_F32};
  bool all_int = true, all_f32 = true;
  for (int32_t i = 0; i < x->n_a; i++) {
    snprintf(v[i], sizeof v[i], "v%d", x->a[i]);
    dt[i] = k->exprs[x->a[i]].dtype;
    all_int = all_int && !loom_cg_is_float(dt[i]);
    all_f32 = all_f32 && dt[i] == LOOM_DTYPE_F32;
  }
  loom_op op = x->op;
  const loom_op_def *def = loom_op_get(op);
  int32_t want = op == LOOM_OP_SELECT ? 3 : def && def->scalar2 ? 2 : 1;
  if (!def || def->cls != LOOM_OPCLASS_ELEMENTWISE || x->n_a != want)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "kernel %s: e%d: op %s with %d operands",
                      k->name, e, loom_op_name(op) ? loom_op_name(op) : "?", x->n_a);
  cg_buf t = {0};
  if (op == LOOM_OP_SELECT) {
    put(b, "(%s ? ", v[0]);
    loom_cg_conv(b, v[1], dt[1], x->dtype);
    put(b, " : ");
    loom_cg_conv(b, v[2], dt[2], x->dtype);
    put(b, ")");
    return LOOM_STATUS_OK;
  }
  if (op == LOOM_OP_CAST) {
    loom_cg_conv(b, v[0], dt[0], x->dtype);
    return LOOM_STATUS_OK;
  }
  const cg_render *r = &render_table[op];
  loom_dtype res;
  if (is_compare(op)) {
    if (all_int)
      put(&t, "((int64_t)%s %s (int64_t)%s)", v[0], r->dbl, v[1]);
    else if (dt[0] == dt[1])
      put(&t, "(%s %s %s)", v[0], r->dbl, v[1]); /* exact in either type */
    else
      put(&t, "((double)%s %s (double)%s)", v[0], r->dbl, v[1]);
    res = LOOM_DTYPE_BOOL;
  } else if (all_int && op != LOOM_OP_POW) {
    if (!r->intg) {
      free(t.buf.p);
      return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "kernel %s: e%d: %s of integers", k->name,
                        e, loom_op_name(op));
    }
    char a0[40], a1[40];
    snprintf(a0, sizeof a0, "(int64_t)%s", v[0]);
    snprintf(a1, sizeof a1, "(int64_t)%s", x->n_a > 1 ? v[1] : "0");
    put(&t, "(");
    subst(&t, r->intg, a0, a1);
    put(&t, ")");
    res = LOOM_DTYPE_I64;
  } else if (x->dtype == LOOM_DTYPE_F32 && all_f32 && r->flt) {
    put(&t, "(");
    subst(&t, r->flt, v[0], x->n_a > 1 ? v[1] : "");
    put(&t, ")");
    res = LOOM_DTYPE_F32;
  } else {
    char a0[40], a1[40];
    snprintf(a0, sizeof a0, "(double)%s", v[0]);
    snprintf(a1, sizeof a1, "(double)%s", x->n_a > 1 ? v[1] : "0");
    put(&t, "(");
    subst(&t, r->dbl, a0, a1);
    put(&t, ")");
    res = LOOM_DTYPE_F64;
  }
  if (t.buf.oom) b->buf.oom = true;
  else loom_cg_conv(b, t.buf.p, res, x->dtype);
  free(t.buf.p);
  return LOOM_STATUS_OK;
}

/* `const T v<e> = ...;` for expr e at site si. */
loom_status loom_cg_emit_expr(loom_ctx *ctx, cg_buf *b, const cg_site *si, int32_t e) {
  const cg_part *cp = si->cp;
  const loom_kernel *k = cp->k;
  const loom_kexpr *x = &k->exprs[e];
  int32_t f = si->fast && si->tmode ? si->fast[e] : 0;
  if (f == CG_KEEP_BLOCK) {
    if (si->tmode == TM_BUF) {
      cg_buf t = {0};
      put(&t, "(uint8_t)(w%d[%s - c0] >= %lluull)", e, si->idx[0],
          (unsigned long long)x->threshold);
      put(b, "%*sconst %s v%d = ", 2 * b->indent, "", loom_cg_ctype(x->dtype), e);
      if (!t.buf.oom) loom_cg_conv(b, t.buf.p, LOOM_DTYPE_BOOL, x->dtype);
      b->buf.oom |= t.buf.oom;
      free(t.buf.p);
      put(b, "; /* keep */\n");
      return LOOM_STATUS_OK;
    }
    f = 0; /* needed by a fast expr: per element */
  }
  if (f && si->tmode != TM_EXACT) {
    const cg_fast *ft = &loom_cg_fast_table[f - 1];
    const char *ix = si->idx[0];
    if (si->tmode == TM_BUF) {
      line(b, "const float v%d = t%d[%s - c0];", e, e, ix);
      return LOOM_STATUS_OK;
    }
    char u[24];
    snprintf(u, sizeof u, "v%d", x->a[0]);
    put(b, "%*sconst double u%d = ", 2 * b->indent, "", e);
    loom_cg_conv(b, u, k->exprs[x->a[0]].dtype, LOOM_DTYPE_F64);
    put(b, ";\n");
    line(b, "const double y%d = %s(u%d);", e, ft->fn, e);
    line(b, "const float v%d = (float)y%d; /* %s */", e, e, loom_op_name(x->op));
    line(b, "bad |= lm_unsure(y%d) | !((u%d >= %.17g) & (u%d <= %.17g));", e, e, ft->lo, e,
         ft->hi);
    line(b, "t%d[%s - c0] = v%d;", e, ix, e);
    return LOOM_STATUS_OK;
  }
  put(b, "%*sconst %s v%d = ", 2 * b->indent, "", loom_cg_ctype(x->dtype), e);
  char base[24];
  snprintf(base, sizeof base, "b%d", e);
  switch (x->kind) {
  case LOOM_KX_LOAD: {
    cg_buf t = {0};
    put(&t, "a%d[", x->arg);
    loom_cg_put_offset(&t, si, base, &x->map);
    put(&t, "]");
    if (x->n_a == 1) put(b, "v%d ? ", x->a[0]); /* guarded: 0 where it reads nothing */
    if (!t.buf.oom) loom_cg_conv(b, t.buf.p, k->args[x->arg].dtype, x->dtype);
    if (x->n_a == 1) put(b, " : (%s)0", loom_cg_ctype(x->dtype));
    b->buf.oom |= t.buf.oom;
    free(t.buf.p);
    put(b, ";\n");
    return LOOM_STATUS_OK;
  }
  case LOOM_KX_CONST: put_const(b, x->c, x->dtype); break;
  case LOOM_KX_INDEX: {
    cg_buf t = {0};
    put(&t, "(");
    loom_cg_put_offset(&t, si, base, &x->map);
    put(&t, ")");
    if (!t.buf.oom) loom_cg_conv(b, t.buf.p, LOOM_DTYPE_I64, x->dtype);
    b->buf.oom |= t.buf.oom;
    free(t.buf.p);
    break;
  }
  case LOOM_KX_OP: LOOM_TRY(render_op(ctx, b, k, e)); break;
  case LOOM_KX_REG: {
    char r[32];
    loom_cg_reg_name(r, sizeof r, si, x->reg);
    loom_cg_conv(b, r, cp->reg_dt[x->reg], x->dtype);
    break;
  }
  case LOOM_KX_SCRATCH: {
    char s[64];
    loom_cg_scratch_name(s, sizeof s, si, x->scratch);
    loom_cg_conv(b, s, LOOM_DTYPE_F32, x->dtype);
    break;
  }
  case LOOM_KX_KEEP: {
    put(b, "(%s)lm_keep(%lluull, ", loom_cg_ctype(x->dtype), (unsigned long long)x->seed);
    for (int32_t i = 0; i < x->n_a; i++) {
      const loom_kexpr *a = &k->exprs[x->a[i]];
      if (loom_cg_is_float(a->dtype))
        put(b, "(uint64_t)lm_f2i(v%d, INT64_MIN, INT64_MAX) + ", x->a[i]);
      else
        put(b, "(uint64_t)v%d + ", x->a[i]);
    }
    put(b, "%lluull, %lluull)", (unsigned long long)x->offset, (unsigned long long)x->threshold);
    break;
  }
  default:
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "kernel %s: e%d: unknown kind %d", k->name,
                      e, (int)x->kind);
  }
  if (x->kind == LOOM_KX_OP) put(b, "; /* %s */\n", loom_op_name(x->op));
  else put(b, ";\n");
  if (f && f != CG_KEEP_BLOCK) line(b, "t%d[%s - c0] = v%d;", e, si->idx[0], e);
  return LOOM_STATUS_OK;
}

const char *loom_cg_ident(loom_op combine, bool dbl) {
  if (combine == LOOM_OP_ADD) return dbl ? "0.0" : "0.0f";
  return combine == LOOM_OP_MAXIMUM ? "-INFINITY" : "INFINITY";
}

/* "acc = combine(acc, v)" in double (column partials) or float (row
 * reduction lanes, kernel.h). */
void loom_cg_put_combine(cg_buf *b, loom_op combine, const char *acc, const char *v, bool dbl) {
  if (combine == LOOM_OP_ADD)
    put(b, "%s = %s + %s", acc, acc, v);
  else
    put(b, "%s = lm_%s%s(%s, %s)", acc, combine == LOOM_OP_MAXIMUM ? "max" : "min",
        dbl ? "" : "f", acc, v);
}

void loom_cg_put_col_combine(cg_buf *b, const cg_site *si, const loom_kout *ko, const char *base,
                             int32_t col, const char *v, loom_dtype from) {
  cg_buf a = {0}, t = {0};
  put(&a, "pc%d[", col);
  loom_cg_put_offset(&a, si, base, &ko->map);
  put(&a, "]");
  loom_cg_conv(&t, v, from, LOOM_DTYPE_F64);
  if (!a.buf.oom && !t.buf.oom) loom_cg_put_combine(b, ko->combine, a.buf.p, t.buf.p, true);
  b->buf.oom |= a.buf.oom || t.buf.oom;
  free(a.buf.p);
  free(t.buf.p);
}
