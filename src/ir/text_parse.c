/*
 * The text IR parser (docs/TEXT_IR.md): recursive descent over the tokens of
 * text_lex.c, one statement per line, no nesting (so no recursion at all).
 * Op names, attribute names, kinds and formats come from the op table, so a
 * new op or attribute needs no change here. Every error is "LINE:COL: ...".
 */
#include "ir/text_ir.h"

#include "core/file.h"

#include "ir/dtype.h"
#include "ops/op.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- symbol table: %name and %digits -> value id ------------------------ */

/* The two kinds of %value live apart: tag 'n' for names, 'd' for numbers. */
typedef struct symtab {
  loom_strmap names, nums;
} symtab;

static int32_t sym_find(const symtab *t, char tag, const char *name) {
  return loom_strmap_get(tag == 'n' ? &t->names : &t->nums, name, strlen(name));
}

static bool sym_insert(symtab *t, char tag, const char *name, int32_t value) {
  return loom_strmap_put(tag == 'n' ? &t->names : &t->nums, name, strlen(name), value);
}

static void sym_free(symtab *t) {
  loom_strmap_free(&t->names);
  loom_strmap_free(&t->nums);
}

typedef struct parser {
  loom_ctx *ctx;
  loom_lexer lx;
  loom_token tok; /* the current token */
  loom_graph *g;
  symtab syms;
  int32_t *ins; /* an op's inputs, grown as needed */
  int32_t cap_ins;
} parser;

static void next(parser *p) { loom_lexer_next(&p->lx, &p->tok); }

static loom_status perr_at(parser *p, int32_t line, int32_t col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static loom_status perr_at(parser *p, int32_t line, int32_t col, const char *fmt, ...) {
  char msg[LOOM_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_error(p->ctx, LOOM_STATUS_PARSE, "%d:%d: %s", line, col, msg);
}

/* An error at the current token; a lexer error reports its own message. */
static loom_status perr(parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static loom_status perr(parser *p, const char *fmt, ...) {
  if (p->tok.kind == LOOM_TOK_ERROR)
    return perr_at(p, p->tok.line, p->tok.col, "%s", p->tok.text);
  char msg[LOOM_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return perr_at(p, p->tok.line, p->tok.col, "%s", msg);
}

/* "expected X but found <current token>". */
static loom_status expected(parser *p, const char *what) {
  char b[128];
  return perr(p, "expected %s but found %s", what, loom_token_desc(&p->tok, b, sizeof b));
}

static loom_status expect(parser *p, loom_tok_kind k, const char *what) {
  if (p->tok.kind != k) return expected(p, what);
  next(p);
  return LOOM_STATUS_OK;
}

/* Adds "LINE:COL: " before a message left by the graph builder. */
static loom_status build_err(parser *p, loom_status st, int32_t line, int32_t col) {
  loom_error_prefix(p->ctx, "%d:%d", line, col);
  return st;
}

static loom_status parse_int(parser *p, const char *what, int64_t *out) {
  if (p->tok.kind != LOOM_TOK_INT) return expected(p, what);
  errno = 0;
  char *end = NULL;
  long long v = strtoll(p->tok.text, &end, 10);
  if (errno == ERANGE || !end || *end)
    return perr(p, "the integer %.60s is out of range (64-bit signed)", p->tok.text);
  *out = v;
  next(p);
  return LOOM_STATUS_OK;
}

/* A float: a number, inf or nan, optionally signed. */
static loom_status parse_float(parser *p, const char *what, double *out) {
  if (p->tok.kind == LOOM_TOK_INT || p->tok.kind == LOOM_TOK_FLOAT) {
    errno = 0;
    char *end = NULL;
    double v = strtod(p->tok.text, &end);
    /* Underflow to a subnormal or zero is fine; overflow is not. */
    if ((errno == ERANGE && isinf(v)) || !end || *end)
      return perr(p, "the number %.60s is out of range for a double", p->tok.text);
    *out = v;
    next(p);
    return LOOM_STATUS_OK;
  }
  double sign = 1.0;
  if (p->tok.kind == LOOM_TOK_SIGN) {
    sign = p->tok.text[0] == '-' ? -1.0 : 1.0;
    next(p);
  }
  if (p->tok.kind == LOOM_TOK_IDENT && strcmp(p->tok.text, "inf") == 0) {
    *out = sign * INFINITY;
  } else if (p->tok.kind == LOOM_TOK_IDENT && strcmp(p->tok.text, "nan") == 0) {
    *out = NAN;
  } else {
    return expected(p, what);
  }
  next(p);
  return LOOM_STATUS_OK;
}

static loom_status parse_dtype(parser *p, loom_dtype *dt) {
  if (p->tok.kind != LOOM_TOK_IDENT)
    return expected(p, "a dtype (f32, f64, f16, bf16, i32, i64, bool, u8)");
  if (loom_dtype_from_name(p->tok.text, dt) != LOOM_STATUS_OK)
    return perr(p, "unknown dtype '%.60s' (expected f32, f64, f16, bf16, i32, i64, bool "
                   "or u8)", p->tok.text);
  next(p);
  return LOOM_STATUS_OK;
}

/* "[" [ INT { "," INT } ] "]", at most LOOM_MAX_RANK entries: the dims of
 * a type (attr NULL) or the value of INTS attribute attr. */
static loom_status parse_int_list(parser *p, const char *attr, loom_ints *out) {
  char exp[128];
  out->n = 0;
  LOOM_TRY(expect(p, LOOM_TOK_LBRACK, "'['"));
  if (p->tok.kind == LOOM_TOK_RBRACK) {
    next(p);
    return LOOM_STATUS_OK;
  }
  for (;;) {
    if (out->n == LOOM_MAX_RANK) {
      if (!attr) return perr(p, "too many dimensions: at most %d are allowed", LOOM_MAX_RANK);
      return perr(p, "too many integers in '%s': at most %d are allowed", attr, LOOM_MAX_RANK);
    }
    int32_t line = p->tok.line, col = p->tok.col;
    if (attr)
      snprintf(exp, sizeof exp, "an integer in '%s'", attr);
    else
      snprintf(exp, sizeof exp, "an integer dimension");
    int64_t v = 0;
    LOOM_TRY(parse_int(p, exp, &v));
    if (!attr && v < 0)
      return perr_at(p, line, col, "a dimension must be >= 0, not %lld", (long long)v);
    out->v[out->n++] = v;
    if (p->tok.kind == LOOM_TOK_RBRACK) break;
    if (attr)
      snprintf(exp, sizeof exp, "',' or ']' in '%s'", attr);
    else
      snprintf(exp, sizeof exp, "',' or ']' after a dimension");
    LOOM_TRY(expect(p, LOOM_TOK_COMMA, exp));
  }
  next(p);
  return LOOM_STATUS_OK;
}

/* dtype "[" dims "]" */
static loom_status parse_type(parser *p, loom_type *t) {
  memset(t, 0, sizeof *t);
  LOOM_TRY(parse_dtype(p, &t->dtype));
  loom_ints dims;
  LOOM_TRY(parse_int_list(p, NULL, &dims));
  t->rank = dims.n;
  memcpy(t->shape, dims.v, sizeof(int64_t) * (size_t)dims.n);
  return LOOM_STATUS_OK;
}

/* Looks up a %value token; tag 'n' for names, 'd' for numbers. */
static loom_status parse_use(parser *p, int32_t *v) {
  if (p->tok.kind != LOOM_TOK_VALUE && p->tok.kind != LOOM_TOK_VALUE_NUM)
    return expected(p, "a %value");
  char tag = p->tok.kind == LOOM_TOK_VALUE ? 'n' : 'd';
  *v = sym_find(&p->syms, tag, p->tok.text);
  if (*v < 0) {
    char b[128];
    return perr(p, "undefined value %s (not defined on an earlier line)",
                loom_token_desc(&p->tok, b, sizeof b));
  }
  next(p);
  return LOOM_STATUS_OK;
}

static loom_status define(parser *p, char tag, const char *name, int32_t v) {
  if (!sym_insert(&p->syms, tag, name, v))
    return loom_error(p->ctx, LOOM_STATUS_OUT_OF_MEMORY, "parse: out of memory");
  return LOOM_STATUS_OK;
}

/* ("input" | "param") %name ":" type */
static loom_status parse_input(parser *p, bool is_param) {
  next(p);
  if (p->tok.kind == LOOM_TOK_VALUE_NUM)
    return perr(p, "an %s needs a name (like %%x), not a number", is_param ? "param" : "input");
  if (p->tok.kind != LOOM_TOK_VALUE) return expected(p, "a %name");
  char name[LOOM_TEXT_MAX_TOKEN + 1], b[128];
  int32_t line = p->tok.line, col = p->tok.col;
  memcpy(name, p->tok.text, sizeof name);
  if (sym_find(&p->syms, 'n', name) >= 0)
    return perr(p, "redefined value: %s is already defined",
                loom_token_desc(&p->tok, b, sizeof b));
  next(p);
  LOOM_TRY(expect(p, LOOM_TOK_COLON, "':' and a type"));
  loom_type t;
  LOOM_TRY(parse_type(p, &t));
  int32_t v;
  loom_status st = is_param ? loom_graph_param(p->g, name, t.dtype, t.rank, t.shape, &v)
                            : loom_graph_input(p->g, name, t.dtype, t.rank, t.shape, &v);
  if (st) return build_err(p, st, line, col);
  return define(p, 'n', name, v);
}

/* "output" (NAME | STRING) "=" %value */
static loom_status parse_output(parser *p) {
  next(p);
  if (p->tok.kind != LOOM_TOK_IDENT && p->tok.kind != LOOM_TOK_STRING)
    return expected(p, "an output name");
  char name[LOOM_TEXT_MAX_TOKEN + 1];
  int32_t line = p->tok.line, col = p->tok.col;
  memcpy(name, p->tok.text, sizeof name);
  next(p);
  LOOM_TRY(expect(p, LOOM_TOK_EQUAL, "'='"));
  int32_t v;
  LOOM_TRY(parse_use(p, &v));
  loom_status st = loom_graph_output(p->g, name, v);
  if (st) return build_err(p, st, line, col);
  return LOOM_STATUS_OK;
}

/* One attribute value of the kind and format its spec gives. */
static loom_status parse_attr_value(parser *p, const loom_attr_spec *s, loom_attr_value *a) {
  char what[128];
  if (s->kind == LOOM_ATTR_INTS) return parse_int_list(p, s->name, &a->ints);
  if (s->kind == LOOM_ATTR_FLOAT) {
    snprintf(what, sizeof what, "a number, inf or nan for '%s'", s->name);
    return parse_float(p, what, &a->f);
  }
  if (s->fmt == LOOM_ATTR_FMT_BOOL && p->tok.kind == LOOM_TOK_IDENT) {
    bool t = strcmp(p->tok.text, "true") == 0;
    if (!t && strcmp(p->tok.text, "false") != 0)
      return perr(p, "expected true or false for '%s' but found '%.60s'", s->name, p->tok.text);
    a->i = t;
    next(p);
    return LOOM_STATUS_OK;
  }
  if (s->fmt == LOOM_ATTR_FMT_DTYPE && p->tok.kind == LOOM_TOK_IDENT) {
    loom_dtype dt;
    LOOM_TRY(parse_dtype(p, &dt));
    a->i = dt;
    return LOOM_STATUS_OK;
  }
  snprintf(what, sizeof what, "%s for '%s'",
           s->fmt == LOOM_ATTR_FMT_BOOL    ? "true or false"
           : s->fmt == LOOM_ATTR_FMT_DTYPE ? "a dtype"
                                           : "an integer",
           s->name);
  return parse_int(p, what, &a->i);
}

static loom_status push_input(parser *p, int32_t n, int32_t v) {
  if (!loom_grow(p->ctx, (void **)&p->ins, &p->cap_ins, n + 1, sizeof *p->ins))
    return LOOM_STATUS_OUT_OF_MEMORY;
  p->ins[n] = v;
  return LOOM_STATUS_OK;
}

typedef struct result {
  char tag; /* 'n' name, 'd' number */
  char *name;
  bool typed;
  loom_type type;
  int32_t line, col, type_line, type_col;
} result;

/* The attribute list of an op's spec, for "unknown attribute" messages. */
static void attr_names(const loom_op_def *d, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = '\0';
  for (int32_t i = 0; i < d->n_attrs && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", d->attrs[i].name);
  if (d->n_attrs == 0) snprintf(buf, n, "none");
}

static loom_status parse_call_add(parser *p, loom_op op, const loom_op_def *d, result *res,
                                  int32_t n_res, int32_t n_in, const loom_attr_value *attrs,
                                  int32_t op_line, int32_t op_col, int32_t *out);

/* results "=" op "(" [ args ] ")" ; results are parsed by the caller. */
static loom_status parse_call(parser *p, result *res, int32_t n_res) {
  if (p->tok.kind != LOOM_TOK_IDENT) return expected(p, "an op name");
  loom_op op;
  int32_t op_line = p->tok.line, op_col = p->tok.col;
  if (loom_op_from_name(p->tok.text, &op) != LOOM_STATUS_OK)
    return perr(p, "unknown op '%.60s'", p->tok.text);
  const loom_op_def *d = loom_op_get(op);
  next(p);
  LOOM_TRY(expect(p, LOOM_TOK_LPAREN, "'(' after the op name"));
  loom_attr_value attrs[LOOM_MAX_ATTRS];
  loom_attrs_default(op, attrs);
  bool seen[LOOM_MAX_ATTRS] = {false};
  bool any_attr = false;
  int32_t n_in = 0, copy = -1;
  if (p->tok.kind != LOOM_TOK_RPAREN) {
    for (;;) {
      if (p->tok.kind == LOOM_TOK_VALUE || p->tok.kind == LOOM_TOK_VALUE_NUM) {
        if (any_attr) return perr(p, "inputs must come before attributes");
        int32_t v;
        LOOM_TRY(parse_use(p, &v));
        LOOM_TRY(push_input(p, n_in++, v));
      } else if (p->tok.kind == LOOM_TOK_IDENT) {
        int32_t i = loom_op_attr_index(op, p->tok.text);
        if (i < 0 && strcmp(p->tok.text, "copy") == 0) { /* the recomputation mark */
          if (copy >= 0) return perr(p, "attribute 'copy' is given twice");
          any_attr = true;
          next(p);
          LOOM_TRY(expect(p, LOOM_TOK_EQUAL, "'=' after the attribute name"));
          loom_attr_value v = {0};
          loom_attr_spec mark = {.name = "copy", .kind = LOOM_ATTR_INT};
          LOOM_TRY(parse_attr_value(p, &mark, &v));
          if (v.i < 0 || v.i > INT32_MAX) return perr(p, "'copy' is a count: 0 or more");
          copy = (int32_t)v.i;
          if (p->tok.kind == LOOM_TOK_RPAREN) break;
          LOOM_TRY(expect(p, LOOM_TOK_COMMA, "',' or ')'"));
          continue;
        }
        if (i < 0) {
          char names[256];
          attr_names(d, names, sizeof names);
          return perr(p, "unknown attribute '%.60s' for %s (its attributes: %s)",
                      p->tok.text, d->name, names);
        }
        if (seen[i]) return perr(p, "attribute '%s' is given twice", d->attrs[i].name);
        seen[i] = any_attr = true;
        next(p);
        LOOM_TRY(expect(p, LOOM_TOK_EQUAL, "'=' after the attribute name"));
        LOOM_TRY(parse_attr_value(p, &d->attrs[i], &attrs[i]));
      } else {
        return expected(p, "an input %value or an attribute name=value");
      }
      if (p->tok.kind == LOOM_TOK_RPAREN) break;
      LOOM_TRY(expect(p, LOOM_TOK_COMMA, "',' or ')'"));
    }
  }
  int32_t close_line = p->tok.line, close_col = p->tok.col;
  next(p); /* ')' */
  for (int32_t i = 0; i < d->n_attrs; i++)
    if (d->attrs[i].required && !seen[i])
      return perr_at(p, close_line, close_col, "%s needs the attribute '%s'", d->name,
                     d->attrs[i].name);
  if (!loom_op_out_count_ok(d, n_res))
    return perr_at(p, op_line, op_col, "%s has %d output%s but %d result%s given", d->name,
                   d->n_out, d->n_out == 1 ? "" : "s", n_res, n_res == 1 ? " is" : "s are");
  if (n_in < d->min_in || (d->max_in >= 0 && n_in > d->max_in)) {
    if (d->max_in < 0)
      return perr_at(p, op_line, op_col, "%s takes at least %d input%s, got %d", d->name,
                     d->min_in, d->min_in == 1 ? "" : "s", n_in);
    if (d->min_in == d->max_in)
      return perr_at(p, op_line, op_col, "%s takes %d input%s, got %d", d->name, d->min_in,
                     d->min_in == 1 ? "" : "s", n_in);
    return perr_at(p, op_line, op_col, "%s takes %d to %d inputs, got %d", d->name,
                   d->min_in, d->max_in, n_in);
  }
  int32_t out_stack[LOOM_PART_MAX_IO], *out = out_stack;
  if (n_res > LOOM_PART_MAX_IO && !(out = loom_malloc(p->ctx, sizeof *out * (size_t)n_res)))
    return LOOM_STATUS_OUT_OF_MEMORY;
  loom_status st = parse_call_add(p, op, d, res, n_res, n_in, attrs, op_line, op_col, out);
  if (!st && copy > 0) p->g->nodes[p->g->n_nodes - 1].copy = copy;
  if (out != out_stack) free(out);
  return st;
}

/* Adds the parsed node and defines its results (out: n_res ids). */
static loom_status parse_call_add(parser *p, loom_op op, const loom_op_def *d, result *res,
                                  int32_t n_res, int32_t n_in, const loom_attr_value *attrs,
                                  int32_t op_line, int32_t op_col, int32_t *out) {
  loom_status st = loom_graph_add(p->g, op, n_in, p->ins, attrs, n_res, out);
  if (st) return build_err(p, st, op_line, op_col);
  for (int32_t r = 0; r < n_res; r++) {
    const loom_type *have = loom_value_type(p->g, out[r]);
    if (res[r].typed && !loom_type_equal(have, &res[r].type)) {
      char t1[160], t2[160];
      return perr_at(p, res[r].type_line, res[r].type_col,
                     "type mismatch: %s is written, but %s gives %s", 
                     loom_type_str(&res[r].type, t1, sizeof t1), d->name,
                     loom_type_str(have, t2, sizeof t2));
    }
  }
  for (int32_t r = 0; r < n_res; r++) {
    if (res[r].tag == 'n') {
      st = loom_value_set_name(p->g, out[r], res[r].name);
      if (st) return build_err(p, st, res[r].line, res[r].col);
    }
    LOOM_TRY(define(p, res[r].tag, res[r].name, out[r]));
  }
  return LOOM_STATUS_OK;
}

/* result { "," result } "=" call, where result = %value [ ":" type ]. */
static loom_status parse_op(parser *p) {
  result *res = NULL;
  int32_t n_res = 0, cap_res = 0;
  loom_status st = LOOM_STATUS_OK;
  for (;;) {
    if (p->tok.kind != LOOM_TOK_VALUE && p->tok.kind != LOOM_TOK_VALUE_NUM) {
      st = expected(p, "a %value");
      break;
    }
    if (n_res == LOOM_MAX_NODE_IO) {
      st = perr(p, "too many results: at most %d", LOOM_MAX_NODE_IO);
      break;
    }
    if (!loom_grow(p->ctx, (void **)&res, &cap_res, n_res + 1, sizeof *res)) {
      st = LOOM_STATUS_OUT_OF_MEMORY;
      break;
    }
    result *r = &res[n_res];
    r->tag = p->tok.kind == LOOM_TOK_VALUE ? 'n' : 'd';
    r->line = p->tok.line;
    r->col = p->tok.col;
    r->typed = false;
    bool dup = sym_find(&p->syms, r->tag, p->tok.text) >= 0;
    for (int32_t k = 0; k < n_res && !dup; k++)
      dup = res[k].tag == r->tag && strcmp(res[k].name, p->tok.text) == 0;
    if (dup) {
      char b[128];
      st = perr(p, "redefined value: %s is already defined",
                loom_token_desc(&p->tok, b, sizeof b));
      break;
    }
    r->name = loom_strdup(p->ctx, p->tok.text);
    if (!r->name) {
      st = LOOM_STATUS_OUT_OF_MEMORY;
      break;
    }
    n_res++;
    next(p);
    if (p->tok.kind == LOOM_TOK_COLON) {
      next(p);
      r->typed = true;
      r->type_line = p->tok.line;
      r->type_col = p->tok.col;
      if ((st = parse_type(p, &r->type))) break;
    }
    if (p->tok.kind == LOOM_TOK_EQUAL) {
      next(p);
      st = parse_call(p, res, n_res);
      break;
    }
    if ((st = expect(p, LOOM_TOK_COMMA, r->typed ? "',' or '='" : "':', ',' or '='"))) break;
  }
  for (int32_t r = 0; r < n_res; r++) free(res[r].name);
  free(res);
  return st;
}

static loom_status parse_statement(parser *p) {
  if (p->tok.kind == LOOM_TOK_IDENT) {
    if (strcmp(p->tok.text, "input") == 0) return parse_input(p, false);
    if (strcmp(p->tok.text, "param") == 0) return parse_input(p, true);
    if (strcmp(p->tok.text, "output") == 0) return parse_output(p);
    loom_op op;
    if (loom_op_from_name(p->tok.text, &op) == LOOM_STATUS_OK)
      return perr(p, "expected '%%result = ' before the op '%s'", p->tok.text);
  }
  if (p->tok.kind == LOOM_TOK_VALUE || p->tok.kind == LOOM_TOK_VALUE_NUM) return parse_op(p);
  return expected(p, "a statement ('input', 'param', 'output' or '%result = op(...)')");
}

loom_status loom_graph_parse_text(loom_ctx *ctx, const char *text, size_t len,
                                  loom_graph **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "graph_parse: out is NULL");
  *out = NULL;
  if (!ctx) return LOOM_STATUS_INVALID_ARGUMENT;
  if (!text && len) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "graph_parse: text is NULL");
  parser *p = loom_calloc(ctx, 1, sizeof *p);
  if (!p) return LOOM_STATUS_OUT_OF_MEMORY;
  p->ctx = ctx;
  loom_status st = loom_graph_new(ctx, &p->g);
  loom_lexer_init(&p->lx, text, len);
  if (!st) next(p);
  while (!st && p->tok.kind != LOOM_TOK_EOF) {
    if (p->tok.kind == LOOM_TOK_NEWLINE) {
      next(p);
      continue;
    }
    st = parse_statement(p);
    if (!st && p->tok.kind != LOOM_TOK_NEWLINE && p->tok.kind != LOOM_TOK_EOF)
      st = expected(p, "the end of the line");
  }
  if (st) {
    loom_graph_free(p->g);
  } else {
    *out = p->g;
  }
  sym_free(&p->syms);
  free(p->ins);
  free(p);
  return st;
}

loom_status loom_graph_parse(loom_ctx *ctx, const char *text, loom_graph **out) {
  if (out) *out = NULL;
  if (!text) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "graph_parse: text is NULL");
  return loom_graph_parse_text(ctx, text, strlen(text), out);
}

loom_status loom_graph_load(loom_ctx *ctx, const char *path, loom_graph **out) {
  if (out) *out = NULL;
  if (!path || !out)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "graph_load: path or out is NULL");
  /* regular files only, at most LOOM_TEXT_MAX_FILE bytes: a FIFO or
   * /dev/zero is refused before a byte is read */
  char *buf = NULL;
  size_t len = 0;
  loom_status st = loom_file_read(ctx, path, LOOM_TEXT_MAX_FILE, &buf, &len);
  if (!st) {
    st = loom_graph_parse_text(ctx, buf, len, out);
    if (st) loom_file_error_at(ctx, st, path);
  }
  free(buf);
  return st;
}
