/*
 * The plan-file parser (docs/PARALLEL.md, "Plan files"): one statement per
 * line over the text IR lexer. Sub-op selectors ("matmul.12#0", "add.*",
 * "*#*") are read from the raw bytes instead, because the lexer takes '#'
 * for a comment and has no '*': a '#' right after a selector's characters
 * belongs to it ("add.3#1"), one after a space starts a comment.
 */
#include "parallel/plan_text.h"

#include "core/file.h"
#include "ir/text_ir.h"
#include "ops/op.h"
#include "parallel/builtin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Sub-ops a plan file may make: bounds the memory a hostile file costs
 * (a sub-op is about 300 bytes). */
#define MAX_SUBOPS (1 << 19)
/* Cuts of cuts nest at most this deep (names stay short and exact:
 * loom_subop_name follows at most 64 levels). */
#define MAX_DEPTH 16
/* Room for any sub-op name within MAX_DEPTH (and a planner's deeper ones). */
#define NAME_MAX_LEN 512

/* Built-in plans (parallel/builtin.h) live in builtin.c, written beside
 * this file; until it is in the tree, `builtin` statements and built-in
 * specs report that they are missing instead of failing the link. */

typedef struct pparser {
  loom_ctx *ctx;
  loom_lexer lx;
  loom_token tok;
  const loom_graph *g;
  loom_plan *plan;
  int32_t statements; /* after `plan devices` */
  int32_t *sel;       /* the current selection */
  int32_t n_sel, cap_sel;
  int32_t *devs; /* a device list */
  int32_t n_devs, cap_devs;
} pparser;

static void next(pparser *p) { loom_lexer_next(&p->lx, &p->tok); }

static loom_status perr_at(pparser *p, int32_t line, int32_t col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static loom_status perr_at(pparser *p, int32_t line, int32_t col, const char *fmt, ...) {
  char msg[LOOM_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_error(p->ctx, LOOM_STATUS_PARSE, "%d:%d: %s", line, col, msg);
}

/* "expected WHAT but found <the current token>" (a lexer error: its own). */
static loom_status expected(pparser *p, const char *what) {
  char b[128];
  if (p->tok.kind == LOOM_TOK_ERROR) return perr_at(p, p->tok.line, p->tok.col, "%s", p->tok.text);
  return perr_at(p, p->tok.line, p->tok.col, "expected %s but found %s", what,
                 loom_token_desc(&p->tok, b, sizeof b));
}

/* The message a plan primitive left, at LINE:COL, without its "plan: ". */
static loom_status at(pparser *p, int32_t line, int32_t col) {
  char old[LOOM_ERROR_MAX];
  snprintf(old, sizeof old, "%s", loom_ctx_error(p->ctx));
  const char *m = strncmp(old, "plan: ", 6) == 0 ? old + 6 : old;
  return loom_error(p->ctx, LOOM_STATUS_PARSE, "%d:%d: %s", line, col, m);
}

/* Printable copy of a name for messages. */
static const char *safe(const char *s, char *buf, size_t n) {
  size_t k = 0;
  for (; s && s[k] && k + 4 < n && k < 60; k++) {
    unsigned char c = (unsigned char)s[k];
    buf[k] = c >= 0x20 && c < 0x7f ? (char)c : '?';
  }
  snprintf(buf + k, n - k, "%s", s && s[k] ? "..." : "");
  return buf;
}

/* An integer in [lo, hi]. */
static loom_status parse_int(pparser *p, int64_t lo, int64_t hi, const char *what, int32_t *out) {
  if (p->tok.kind != LOOM_TOK_INT) return expected(p, what);
  errno = 0;
  long long v = strtoll(p->tok.text, NULL, 10);
  if (errno == ERANGE || v < lo || v > hi)
    return perr_at(p, p->tok.line, p->tok.col, "%s %.40s%s is outside [%lld, %lld]", what,
                   p->tok.text, strlen(p->tok.text) > 40 ? "..." : "", (long long)lo,
                   (long long)hi);
  *out = (int32_t)v;
  next(p);
  return LOOM_STATUS_OK;
}

static bool is_word(const loom_token *t, const char *w) {
  return t->kind == LOOM_TOK_IDENT && strcmp(t->text, w) == 0;
}

static loom_status expect_word(pparser *p, const char *w) {
  char what[64];
  snprintf(what, sizeof what, "'%s'", w);
  if (!is_word(&p->tok, w)) return expected(p, what);
  next(p);
  return LOOM_STATUS_OK;
}

static bool at_end(const pparser *p) {
  return p->tok.kind == LOOM_TOK_NEWLINE || p->tok.kind == LOOM_TOK_EOF;
}

/* ---- selectors ------------------------------------------------------------ */

typedef struct selector {
  char text[LOOM_TEXT_MAX_TOKEN + 1];
  int32_t line, col;
} selector;

static int raw_peek(const loom_lexer *lx, size_t k) {
  return lx->pos + k < lx->len ? (unsigned char)lx->src[lx->pos + k] : -1;
}

static void raw_advance(loom_lexer *lx) {
  lx->pos++;
  if (lx->col < INT32_MAX) lx->col++;
}

static bool sel_char(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '*';
}

/* Reads a selector from the bytes after the current token (which the
 * caller has consumed but not advanced past); the caller then calls next()
 * for the token after it. */
static loom_status read_selector(pparser *p, selector *s, const char *what) {
  loom_lexer *lx = &p->lx;
  while (raw_peek(lx, 0) == ' ' || raw_peek(lx, 0) == '\t' || raw_peek(lx, 0) == '\r')
    raw_advance(lx);
  s->line = lx->line;
  s->col = lx->col;
  size_t n = 0;
  for (;;) {
    int c = raw_peek(lx, 0);
    bool part = c == '#' && n > 0;
    if (!sel_char(c) && !part) break;
    if (n == LOOM_TEXT_MAX_TOKEN) {
      next(p);
      return perr_at(p, s->line, s->col, "%s is longer than %d bytes", what, LOOM_TEXT_MAX_TOKEN);
    }
    s->text[n++] = (char)c;
    raw_advance(lx);
  }
  s->text[n] = '\0';
  if (n == 0) {
    next(p);
    return expected(p, what);
  }
  return LOOM_STATUS_OK;
}

static loom_status sel_push(pparser *p, int32_t s) {
  if (!loom_grow(p->ctx, (void **)&p->sel, &p->cap_sel, p->n_sel + 1, sizeof *p->sel))
    return LOOM_STATUS_OUT_OF_MEMORY;
  p->sel[p->n_sel++] = s;
  return LOOM_STATUS_OK;
}

/* Reads a non-negative decimal at *q (advancing it); -1 if none or huge. */
static int64_t read_index(const char **q) {
  const char *s = *q;
  int64_t v = 0;
  if (*s < '0' || *s > '9') return -1;
  while (*s >= '0' && *s <= '9') {
    if (v > INT32_MAX) v = INT32_MAX + 1LL; /* saturate: reported as missing */
    else v = v * 10 + (*s - '0');
    s++;
  }
  *q = s;
  return v;
}

/* Fills p->sel with the sub-ops selector s names: a head (OP.NODE, OP.*
 * or *) and then per level #i (part i) or #* (every part). */
static loom_status select_subops(pparser *p, const selector *s) {
  const loom_graph *g = p->g;
  const loom_plan *pl = p->plan;
  char b1[NAME_MAX_LEN], b2[96];
  p->n_sel = 0;
  const char *text = s->text, *hash = strchr(text, '#');
  size_t head_len = hash ? (size_t)(hash - text) : strlen(text);
  if (head_len == 1 && text[0] == '*') {
    for (int32_t i = 0; i < g->n_nodes; i++) LOOM_TRY(sel_push(p, i));
  } else {
    const char *dot = NULL;
    for (size_t k = 0; k < head_len; k++)
      if (text[k] == '.') dot = text + k;
    char op_name[LOOM_TEXT_MAX_TOKEN + 1];
    size_t op_len = dot ? (size_t)(dot - text) : 0;
    memcpy(op_name, text, op_len);
    op_name[op_len] = '\0';
    loom_op op;
    bool star_in_op = memchr(text, '*', op_len) != NULL;
    if (!dot || op_len == 0 || star_in_op || loom_op_from_name(op_name, &op) != LOOM_STATUS_OK) {
      if (dot && op_len && !star_in_op)
        return perr_at(p, s->line, s->col, "unknown op '%s' in '%s'",
                       safe(op_name, b1, sizeof b1), safe(text, b2, sizeof b2));
      return perr_at(p, s->line, s->col,
                     "'%s' is not a sub-op selector (OP.NODE, OP.* or *, then #i or #* per cut)",
                     safe(text, b1, sizeof b1));
    }
    const char *num = dot + 1;
    size_t num_len = head_len - op_len - 1;
    if (num_len == 1 && num[0] == '*') {
      for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == op) LOOM_TRY(sel_push(p, i));
      if (p->n_sel == 0)
        return perr_at(p, s->line, s->col, "'%s' selects nothing: the graph has no %s node",
                       safe(text, b1, sizeof b1), loom_op_get(op)->name);
    } else {
      const char *q = num;
      int64_t node = read_index(&q);
      if (node < 0 || q != num + num_len)
        return perr_at(p, s->line, s->col, "'%s': expected a node number or '*' after '%s.'",
                       safe(text, b1, sizeof b1), loom_op_get(op)->name);
      if (node >= g->n_nodes)
        return perr_at(p, s->line, s->col, "unknown node %lld: the graph has nodes 0 to %d",
                       (long long)node, g->n_nodes - 1);
      if (g->nodes[node].op != op)
        return perr_at(p, s->line, s->col, "node %lld is a %s, not a %s", (long long)node,
                       loom_op_get(g->nodes[node].op)->name, loom_op_get(op)->name);
      LOOM_TRY(sel_push(p, (int32_t)node));
    }
  }
  /* the parts, level by level */
  const char *q = hash;
  while (q && *q == '#') {
    const char *mark = q++;
    bool all = *q == '*';
    int64_t idx = -1;
    if (all) {
      q++;
    } else if ((idx = read_index(&q)) < 0) {
      q = mark;
      break;
    }
    int32_t n = p->n_sel;
    /* the new level replaces the old in place: copy the old first */
    int32_t *old = loom_malloc(p->ctx, sizeof *old * (size_t)(n ? n : 1));
    if (!old) return LOOM_STATUS_OUT_OF_MEMORY;
    memcpy(old, p->sel, sizeof *old * (size_t)n);
    p->n_sel = 0;
    loom_status st = LOOM_STATUS_OK;
    for (int32_t k = 0; k < n && !st; k++) {
      const loom_subop *sub = &pl->subops[old[k]];
      loom_subop_name(pl, old[k], b1, sizeof b1);
      if (sub->n_children == 0)
        st = perr_at(p, s->line, s->col, "%s is not cut, so it has no part %s", b1,
                     all ? "#*" : "to select");
      else if (!all && idx >= sub->n_children)
        st = perr_at(p, s->line, s->col, "%s has %d parts, so no part %lld", b1, sub->n_children,
                     (long long)idx);
      for (int32_t c = 0; !st && c < sub->n_children; c++)
        if (all || c == idx) st = sel_push(p, sub->first_child + c);
    }
    free(old);
    LOOM_TRY(st);
  }
  if (q && *q)
    return perr_at(p, s->line, s->col, "'%s': unexpected '%s' (parts are #i or #*)",
                   safe(text, b1, sizeof b1), safe(q, b2, sizeof b2));
  return LOOM_STATUS_OK;
}

/* ---- statements --------------------------------------------------------- */

/* "plan" "devices" N */
static loom_status parse_plan(pparser *p) {
  int32_t line = p->tok.line, col = p->tok.col;
  if (p->plan) return perr_at(p, line, col, "a plan file has one 'plan devices N' line");
  next(p);
  LOOM_TRY(expect_word(p, "devices"));
  int32_t n = 0;
  LOOM_TRY(parse_int(p, 1, LOOM_PLAN_MAX_DEVICES, "a device count", &n));
  if (loom_plan_new(p->ctx, p->g, n, &p->plan) != LOOM_STATUS_OK) return at(p, line, col);
  return LOOM_STATUS_OK;
}

/* "builtin" SPEC: replaces the (so far untouched) plan by a built-in one. */
static loom_status parse_builtin(pparser *p) {
  int32_t line = p->tok.line, col = p->tok.col;
  if (p->statements > 0)
    return perr_at(p, line, col, "'builtin' must come right after 'plan devices N'");
  next(p);
  if (p->tok.kind != LOOM_TOK_IDENT && p->tok.kind != LOOM_TOK_STRING)
    return expected(p, "a built-in plan spec (dp2, dp2xtp2, ...)");
  char spec[LOOM_TEXT_MAX_TOKEN + 1];
  int32_t sl = p->tok.line, sc = p->tok.col;
  memcpy(spec, p->tok.text, sizeof spec);
  next(p);
  loom_plan *b = NULL;
  if (loom_plan_builtin(p->ctx, p->g, spec, p->plan->n_devices, &b) != LOOM_STATUS_OK)
    return at(p, sl, sc);
  loom_plan_free(p->plan);
  p->plan = b;
  return LOOM_STATUS_OK;
}

/* OPERAND: in0, in1, ..., out0, ... */
static loom_status parse_operand(pparser *p, bool *is_out, int32_t *operand) {
  const char *t = p->tok.text;
  const char *digits = NULL;
  if (p->tok.kind == LOOM_TOK_IDENT) {
    if (strncmp(t, "in", 2) == 0) digits = t + 2, *is_out = false;
    else if (strncmp(t, "out", 3) == 0) digits = t + 3, *is_out = true;
  }
  const char *q = digits;
  int64_t v = digits ? read_index(&q) : -1;
  if (v < 0 || *q) return expected(p, "an operand (in0, in1, ..., out0, ...)");
  if (v >= LOOM_PART_MAX_IO)
    return perr_at(p, p->tok.line, p->tok.col, "operand %s: an op has at most %d %s",
                   strlen(t) > 20 ? "(long)" : t, LOOM_PART_MAX_IO, *is_out ? "outputs" : "inputs");
  *operand = (int32_t)v;
  next(p);
  return LOOM_STATUS_OK;
}

static loom_status parse_io_name(pparser *p, bool output, int32_t *index);

/* Per node, the label of its annotation that carries the index of dim
 * `dim` of graph input `input` (-1: none), followed forward through the
 * graph: a label is that index when an input dim it labels is, and then
 * so are the output dims it labels. Nodes are in topological order. For
 * the batch dim of a training graph this finds the batch in the forward
 * pass, the backward pass (which reads the forward's activations) and as
 * the reduction of every weight gradient: data parallelism. */
static loom_status follow_input_dim(pparser *p, int32_t input, int32_t dim, int32_t *node_label) {
  const loom_graph *g = p->g;
  uint8_t *tag = loom_calloc(p->ctx, (size_t)(g->n_values ? g->n_values : 1), 1); /* dims */
  if (!tag) return LOOM_STATUS_OUT_OF_MEMORY;
  tag[g->inputs[input]] = (uint8_t)(1u << dim);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const loom_node *n = &g->nodes[i];
    const loom_partition *pa = &p->plan->part[i];
    node_label[i] = -1;
    for (int32_t l = 0; l < pa->n_labels; l++) {
      bool carries = false;
      for (int32_t k = 0; k < n->n_in && k < LOOM_PART_MAX_IO && !carries; k++)
        for (int32_t d = 0; d < loom_value_type(g, n->in[k])->rank; d++)
          carries |= pa->in[k][d] == l && (tag[n->in[k]] >> d & 1);
      if (!carries) continue;
      if (node_label[i] < 0) node_label[i] = l;
      for (int32_t o = 0; o < n->n_out && o < LOOM_PART_MAX_IO; o++)
        for (int32_t d = 0; d < loom_value_type(g, n->out[o])->rank; d++)
          if (pa->out[o][d] == l) tag[n->out[o]] |= (uint8_t)(1u << d);
    }
  }
  free(tag);
  return LOOM_STATUS_OK;
}

static loom_status trans_each(pparser *p, const selector *sl, bool split, bool is_out,
                              int32_t operand, int32_t dim, int32_t n, bool fallback,
                              const int32_t *node_label, int32_t op_line, int32_t op_col,
                              int32_t n_line, int32_t n_col);

/* "trans" SEL ("split" (OPERAND | %INPUT) DIM N ["else" "replicate"] | "replicate" N) */
static loom_status parse_trans(pparser *p) {
  selector s;
  LOOM_TRY(read_selector(p, &s, "a sub-op name or pattern"));
  next(p);
  bool split = is_word(&p->tok, "split");
  if (!split && !is_word(&p->tok, "replicate")) return expected(p, "'split' or 'replicate'");
  next(p);
  bool is_out = false, fallback = false;
  int32_t operand = 0, dim = 0, n = 0, op_line = 0, op_col = 0, follow = -1;
  if (split) {
    op_line = p->tok.line;
    op_col = p->tok.col;
    if (p->tok.kind == LOOM_TOK_VALUE) LOOM_TRY(parse_io_name(p, false, &follow));
    else LOOM_TRY(parse_operand(p, &is_out, &operand));
    int32_t dl = p->tok.line, dc = p->tok.col;
    LOOM_TRY(parse_int(p, 0, LOOM_MAX_RANK - 1, "a dim", &dim));
    int32_t rank = follow >= 0 ? loom_value_type(p->g, p->g->inputs[follow])->rank : 0;
    char b[96];
    if (follow >= 0 && dim >= rank)
      return perr_at(p, dl, dc, "input %s has no dim %d (rank %d)",
                     safe(p->g->values[p->g->inputs[follow]].name, b, sizeof b), dim, rank);
  }
  int32_t n_line = p->tok.line, n_col = p->tok.col;
  LOOM_TRY(parse_int(p, 1, LOOM_PLAN_MAX_DEVICES, "a part count", &n));
  if (split && is_word(&p->tok, "else")) {
    next(p);
    LOOM_TRY(expect_word(p, "replicate"));
    fallback = true;
  }
  if (!at_end(p)) return expected(p, "the end of the line");
  LOOM_TRY(select_subops(p, &s));
  int32_t *node_label = NULL;
  if (follow >= 0) {
    node_label = loom_malloc(p->ctx, sizeof *node_label * (size_t)(p->g->n_nodes + 1));
    if (!node_label) return LOOM_STATUS_OUT_OF_MEMORY;
    node_label[p->g->n_nodes] = follow; /* for messages */
    loom_status st = follow_input_dim(p, follow, dim, node_label);
    if (!st) st = trans_each(p, &s, split, is_out, operand, dim, n, fallback, node_label, op_line,
                             op_col, n_line, n_col);
    free(node_label);
    return st;
  }
  return trans_each(p, &s, split, is_out, operand, dim, n, fallback, NULL, op_line, op_col, n_line,
                    n_col);
}

/* Cuts every selected sub-op (parse_trans). */
static loom_status trans_each(pparser *p, const selector *sl, bool split, bool is_out,
                              int32_t operand, int32_t dim, int32_t n, bool fallback,
                              const int32_t *node_label, int32_t op_line, int32_t op_col,
                              int32_t n_line, int32_t n_col) {
  loom_plan *pl = p->plan;
  selector s = *sl;
  for (int32_t k = 0; k < p->n_sel; k++) {
    int32_t sub = p->sel[k];
    char name[NAME_MAX_LEN];
    loom_subop_name(pl, sub, name, sizeof name);
    if (pl->subops[sub].n_children > 0)
      return perr_at(p, s.line, s.col, "%s is already cut into %d parts (select them with %s#*)",
                     name, pl->subops[sub].n_children, name);
    int32_t depth = 0;
    for (int32_t at = sub; pl->subops[at].parent >= 0; at = pl->subops[at].parent) depth++;
    if (depth >= MAX_DEPTH)
      return perr_at(p, s.line, s.col, "%s is %d cuts deep, the most a plan file nests", name,
                     depth);
    if (pl->n_subops + n > MAX_SUBOPS)
      return perr_at(p, n_line, n_col, "the plan would have more than %d sub-ops", MAX_SUBOPS);
    loom_algo a = {LOOM_ALGO_REPLICATE, 0};
    if (split) {
      const loom_subop *so = &pl->subops[sub];
      int32_t l = node_label ? node_label[so->node] : loom_plan_label(pl, so->node, is_out, operand, dim);
      if (l < 0 && !fallback) {
        if (!node_label) return at(p, op_line, op_col);
        char b[96];
        return perr_at(p, op_line, op_col, "%s: no dim of it follows dim %d of input %s", name,
                       dim, safe(p->g->values[p->g->inputs[node_label[p->g->n_nodes]]].name, b,
                                 sizeof b));
      }
      /* a split that does not divide: op_trans says why, unless "else replicate" */
      if (l >= 0 && (!fallback || (so->r.hi[l] - so->r.lo[l]) % n == 0))
        a = (loom_algo){LOOM_ALGO_SPLIT, l};
    }
    if (loom_op_trans(pl, sub, a, n, NULL) != LOOM_STATUS_OK) return at(p, n_line, n_col);
  }
  return LOOM_STATUS_OK;
}

/* DEVICE { DEVICE } to the end of the line, into p->devs. */
static loom_status parse_devices(pparser *p) {
  p->n_devs = 0;
  if (at_end(p)) return expected(p, "a device");
  while (!at_end(p)) {
    int32_t d = 0;
    LOOM_TRY(parse_int(p, 0, p->plan->n_devices - 1, "device", &d));
    if (!loom_grow(p->ctx, (void **)&p->devs, &p->cap_devs, p->n_devs + 1, sizeof *p->devs))
      return LOOM_STATUS_OUT_OF_MEMORY;
    p->devs[p->n_devs++] = d;
  }
  return LOOM_STATUS_OK;
}

/* "assign" SEL DEVICE...: one device takes each selected sub-op whole;
 * several take its parts, part i the i-th. */
static loom_status parse_assign(pparser *p) {
  selector s;
  LOOM_TRY(read_selector(p, &s, "a sub-op name or pattern"));
  next(p);
  int32_t dl = p->tok.line, dc = p->tok.col;
  LOOM_TRY(parse_devices(p));
  LOOM_TRY(select_subops(p, &s));
  loom_plan *pl = p->plan;
  for (int32_t k = 0; k < p->n_sel; k++) {
    int32_t sub = p->sel[k];
    const loom_subop *so = &pl->subops[sub];
    if (p->n_devs == 1) {
      if (loom_op_assign(pl, sub, p->devs[0]) != LOOM_STATUS_OK) return at(p, dl, dc);
      continue;
    }
    if (so->n_children != p->n_devs) {
      char name[NAME_MAX_LEN];
      loom_subop_name(pl, sub, name, sizeof name);
      if (so->n_children == 0)
        return perr_at(p, dl, dc, "%d devices for %s, which is not cut (one device takes it "
                                  "whole; several take its parts)", p->n_devs, name);
      return perr_at(p, dl, dc, "%s has %d parts but %d devices are given", name,
                     so->n_children, p->n_devs);
    }
    for (int32_t c = 0; c < so->n_children; c++)
      if (loom_op_assign(pl, so->first_child + c, p->devs[c]) != LOOM_STATUS_OK)
        return at(p, dl, dc);
  }
  return LOOM_STATUS_OK;
}

/* A selector that must name exactly one sub-op. */
static loom_status one_subop(pparser *p, const selector *s, int32_t *out) {
  if (strchr(s->text, '*')) {
    char b[96];
    return perr_at(p, s->line, s->col, "order takes sub-op names, not patterns ('%s')",
                   safe(s->text, b, sizeof b));
  }
  LOOM_TRY(select_subops(p, s));
  *out = p->sel[0];
  return LOOM_STATUS_OK;
}

/* "order" SUBOP SUBOP */
static loom_status parse_order(pparser *p) {
  int32_t line = p->tok.line, col = p->tok.col;
  selector a, b;
  LOOM_TRY(read_selector(p, &a, "a sub-op name"));
  LOOM_TRY(read_selector(p, &b, "a second sub-op name"));
  next(p);
  if (!at_end(p)) return expected(p, "the end of the line");
  int32_t sa = -1, sb = -1;
  LOOM_TRY(one_subop(p, &a, &sa));
  LOOM_TRY(one_subop(p, &b, &sb));
  if (loom_op_order(p->plan, sa, sb) != LOOM_STATUS_OK) return at(p, line, col);
  return LOOM_STATUS_OK;
}

/* A graph input or output name: NAME, "NAME" or %NAME. */
static loom_status parse_io_name(pparser *p, bool output, int32_t *index) {
  const loom_graph *g = p->g;
  char b[96];
  if (p->tok.kind != LOOM_TOK_IDENT && p->tok.kind != LOOM_TOK_STRING &&
      p->tok.kind != LOOM_TOK_VALUE)
    return expected(p, output ? "a graph output's name" : "a graph input's name");
  int32_t n = output ? g->n_outputs : g->n_inputs;
  for (int32_t i = 0; i < n; i++) {
    const char *name = output ? g->output_names[i] : g->values[g->inputs[i]].name;
    if (name && strcmp(name, p->tok.text) == 0) {
      *index = i;
      next(p);
      return LOOM_STATUS_OK;
    }
  }
  return perr_at(p, p->tok.line, p->tok.col, "the graph has no %s named '%s'",
                 output ? "output" : "input", safe(p->tok.text, b, sizeof b));
}

/* ("input" | "output") NAME LAYOUT "on" DEVICE... */
static loom_status parse_placement(pparser *p, bool output) {
  int32_t line = p->tok.line, col = p->tok.col;
  next(p);
  int32_t io = -1;
  LOOM_TRY(parse_io_name(p, output, &io));
  const loom_graph *g = p->g;
  const loom_type *t = loom_value_type(g, output ? g->outputs[io] : g->inputs[io]);
  loom_vlayout l;
  if (loom_vlayout_parse_lexer(p->ctx, t, &p->lx, &p->tok, &l) != LOOM_STATUS_OK) {
    if (p->ctx) p->ctx->last = LOOM_STATUS_PARSE;
    return LOOM_STATUS_PARSE;
  }
  LOOM_TRY(expect_word(p, "on"));
  int32_t dl = p->tok.line, dc = p->tok.col;
  LOOM_TRY(parse_devices(p));
  if (p->n_devs != l.n_pieces) {
    char b[128];
    return perr_at(p, dl, dc, "the layout %s has %d piece%s but %d device%s given",
                   loom_vlayout_str(&l, b, sizeof b), l.n_pieces, l.n_pieces == 1 ? "" : "s",
                   p->n_devs, p->n_devs == 1 ? " is" : "s are");
  }
  loom_status st = output ? loom_plan_set_output(p->plan, io, &l, p->devs)
                          : loom_plan_set_input(p->plan, io, &l, p->devs);
  if (st) return at(p, line, col);
  return LOOM_STATUS_OK;
}

/* "tie" OUTPUT INPUT */
static loom_status parse_tie(pparser *p) {
  int32_t line = p->tok.line, col = p->tok.col;
  next(p);
  int32_t o = -1, i = -1;
  LOOM_TRY(parse_io_name(p, true, &o));
  LOOM_TRY(parse_io_name(p, false, &i));
  if (loom_plan_tie(p->plan, o, i) != LOOM_STATUS_OK) return at(p, line, col);
  return LOOM_STATUS_OK;
}

static loom_status parse_statement(pparser *p) {
  if (p->tok.kind == LOOM_TOK_IDENT) {
    const char *w = p->tok.text;
    if (!strcmp(w, "plan")) return parse_plan(p);
    if (!p->plan)
      return perr_at(p, p->tok.line, p->tok.col,
                     "expected 'plan devices N' before anything else but found '%.60s'", w);
    if (!strcmp(w, "builtin")) return parse_builtin(p);
    if (!strcmp(w, "trans")) return parse_trans(p);
    if (!strcmp(w, "assign")) return parse_assign(p);
    if (!strcmp(w, "order")) return parse_order(p);
    if (!strcmp(w, "input")) return parse_placement(p, false);
    if (!strcmp(w, "output")) return parse_placement(p, true);
    if (!strcmp(w, "tie")) return parse_tie(p);
    return perr_at(p, p->tok.line, p->tok.col,
                   "unknown statement '%.60s' (plan, builtin, trans, assign, order, input, "
                   "output, tie)", w);
  }
  if (!p->plan) return expected(p, "'plan devices N'");
  return expected(p, "a statement (trans, assign, order, input, output, tie)");
}

loom_status loom_plan_parse(loom_ctx *ctx, const loom_graph *g, const char *text, size_t len,
                            loom_plan **out) {
  if (!out || !g || (!text && len))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan_parse: NULL argument");
  *out = NULL;
  pparser p = {.ctx = ctx, .g = g};
  loom_lexer_init(&p.lx, text, len);
  next(&p);
  loom_status st = LOOM_STATUS_OK;
  while (!st && p.tok.kind != LOOM_TOK_EOF) {
    if (p.tok.kind == LOOM_TOK_NEWLINE) {
      next(&p);
      continue;
    }
    bool had_plan = p.plan != NULL;
    st = parse_statement(&p);
    if (!st && !at_end(&p)) st = expected(&p, "the end of the line");
    if (had_plan) p.statements++;
  }
  if (!st && !p.plan)
    st = perr_at(&p, p.tok.line, p.tok.col, "expected 'plan devices N' but found the end of the "
                                            "file");
  free(p.sel);
  free(p.devs);
  if (st) {
    loom_plan_free(p.plan);
    return st;
  }
  *out = p.plan;
  return LOOM_STATUS_OK;
}

loom_status loom_plan_load(loom_ctx *ctx, const loom_graph *g, const char *path, loom_plan **out) {
  if (out) *out = NULL;
  if (!path || !out || !g)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan_load: NULL argument");
  char *buf = NULL;
  size_t len = 0;
  loom_status st = loom_file_read(ctx, path, LOOM_PLAN_MAX_FILE, &buf, &len);
  if (!st) {
    st = loom_plan_parse(ctx, g, buf, len, out);
    if (st) loom_file_error_at(ctx, st, path);
  }
  free(buf);
  return st;
}

loom_status loom_plan_open(loom_ctx *ctx, const loom_graph *g, const char *what,
                           int32_t n_devices, loom_plan **out) {
  if (out) *out = NULL;
  if (!what || !out || !g)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "plan_open: NULL argument");
  struct stat sb;
  if (stat(what, &sb) == 0) {
    LOOM_TRY(loom_plan_load(ctx, g, what, out));
    if (n_devices > 0 && (*out)->n_devices != n_devices) {
      int32_t have = (*out)->n_devices;
      loom_plan_free(*out);
      *out = NULL;
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "%s: the plan is for %d devices, not %d", what, have, n_devices);
    }
    return LOOM_STATUS_OK;
  }
  char b[96];
  if (loom_plan_builtin_known(what)) return loom_plan_builtin(ctx, g, what, n_devices, out);
  return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                    "'%s' is neither a plan file nor a built-in plan; built-ins:\n%s",
                    safe(what, b, sizeof b), loom_plan_builtin_help());
}

/* ---- the printer ---------------------------------------------------------- */

/* A name as the lexer reads it back: bare, or "quoted" with escapes. */
static void put_name(loom_strbuf *b, const char *prefix, const char *name) {
  if (loom_text_is_ident(name)) {
    loom_strbuf_put(b, "%s%s", prefix, name);
    return;
  }
  loom_strbuf_put(b, "%s\"", prefix);
  for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
    if (*c == '"' || *c == '\\') loom_strbuf_put(b, "\\%c", *c);
    else if (*c >= 0x20 && *c < 0x7f) loom_strbuf_put(b, "%c", *c);
    else loom_strbuf_put(b, "\\x%02x", *c);
  }
  loom_strbuf_put(b, "\"");
}

/* The (operand, dim) that carries label l of node's annotation:
 * outputs first, the way a user reads a cut. */
static bool find_label_dim(const loom_plan *p, int32_t node, int32_t l, bool *is_out,
                           int32_t *operand, int32_t *dim) {
  const loom_partition *pa = &p->part[node];
  const loom_node *n = &p->graph->nodes[node];
  for (int side = 1; side >= 0; side--) {
    int32_t count = side ? n->n_out : n->n_in;
    for (int32_t o = 0; o < count && o < LOOM_PART_MAX_IO; o++) {
      const loom_type *t = loom_value_type(p->graph, side ? n->out[o] : n->in[o]);
      for (int32_t d = 0; d < t->rank; d++)
        if ((side ? pa->out[o][d] : pa->in[o][d]) == l) {
          *is_out = side;
          *operand = o;
          *dim = d;
          return true;
        }
    }
  }
  return false;
}

/* One "trans" line for cut sub-op s. */
static loom_status put_cut(const loom_plan *p, int32_t s, loom_strbuf *b) {
  const loom_subop *par = &p->subops[s], *c0 = &p->subops[par->first_child];
  char name[NAME_MAX_LEN];
  loom_subop_name(p, s, name, sizeof name);
  int32_t l = -1;
  for (int32_t k = 0; k < par->r.n_labels && l < 0; k++)
    if (c0->r.hi[k] - c0->r.lo[k] != par->r.hi[k] - par->r.lo[k]) l = k;
  if (l < 0) {
    loom_strbuf_put(b, "trans %s replicate %d\n", name, par->n_children);
    return LOOM_STATUS_OK;
  }
  bool is_out = false;
  int32_t operand = 0, dim = 0;
  if (!find_label_dim(p, par->node, l, &is_out, &operand, &dim))
    return loom_error(p->ctx, LOOM_STATUS_UNSUPPORTED,
                      "plan_write: %s is split on label %d, which no operand dim carries", name, l);
  loom_strbuf_put(b, "trans %s split %s%d %d %d\n", name, is_out ? "out" : "in", operand, dim,
                  par->n_children);
  return LOOM_STATUS_OK;
}

/* "assign" lines for the leaves under s, one line per sub-op whose parts
 * are all assigned leaves. */
static void put_assign(const loom_plan *p, int32_t s, loom_strbuf *b) {
  const loom_subop *so = &p->subops[s];
  char name[NAME_MAX_LEN];
  if (so->n_children == 0) {
    if (so->device >= 0)
      loom_strbuf_put(b, "assign %s %d\n", loom_subop_name(p, s, name, sizeof name), so->device);
    return;
  }
  bool flat = true, same = true;
  for (int32_t c = 0; c < so->n_children && flat; c++) {
    const loom_subop *ch = &p->subops[so->first_child + c];
    flat = ch->n_children == 0 && ch->device >= 0;
    same = same && ch->device == p->subops[so->first_child].device;
  }
  if (!flat) {
    for (int32_t c = 0; c < so->n_children; c++) put_assign(p, so->first_child + c, b);
    return;
  }
  loom_strbuf_put(b, "assign %s", loom_subop_name(p, s, name, sizeof name));
  for (int32_t c = 0; c < (same ? 1 : so->n_children); c++)
    loom_strbuf_put(b, " %d", p->subops[so->first_child + c].device);
  loom_strbuf_put(b, "\n");
}

static void put_placement(loom_strbuf *b, const char *kw, const char *prefix, const char *name,
                          const loom_plan_placement *pl) {
  char lay[256];
  loom_strbuf_put(b, "%s ", kw);
  put_name(b, prefix, name);
  loom_strbuf_put(b, " %s on", loom_vlayout_str(&pl->layout, lay, sizeof lay));
  for (int32_t i = 0; i < pl->layout.n_pieces; i++) loom_strbuf_put(b, " %d", pl->devices[i]);
  loom_strbuf_put(b, "\n");
}

static int cmp_int_by(const void *x, const void *y, const loom_plan *p) {
  int32_t a = p->subops[*(const int32_t *)x].first_child;
  int32_t c = p->subops[*(const int32_t *)y].first_child;
  return (a > c) - (a < c);
}

loom_status loom_plan_write(const loom_plan *p, loom_strbuf *b) {
  if (!p || !b) return LOOM_STATUS_INVALID_ARGUMENT;
  const loom_graph *g = p->graph;
  /* Cuts in the order they were made (children ids grow with each cut), so
   * the file rebuilds the same sub-op numbering. Parents come first: a
   * sub-op is made before it is cut. */
  int32_t n_cut = 0;
  for (int32_t s = 0; s < p->n_subops; s++) n_cut += p->subops[s].n_children > 0;
  int32_t *cut = loom_malloc(p->ctx, sizeof *cut * (size_t)(n_cut ? n_cut : 1));
  if (!cut) return LOOM_STATUS_OUT_OF_MEMORY;
  n_cut = 0;
  for (int32_t s = 0; s < p->n_subops; s++)
    if (p->subops[s].n_children > 0) cut[n_cut++] = s;
  /* insertion sort by first_child: already nearly sorted in practice */
  for (int32_t i = 1; i < n_cut; i++) {
    int32_t v = cut[i], j = i;
    while (j > 0 && cmp_int_by(&cut[j - 1], &v, p) > 0) {
      cut[j] = cut[j - 1];
      j--;
    }
    cut[j] = v;
  }
  loom_strbuf tmp = {0};
  loom_strbuf_put(&tmp, "plan devices %d\n", p->n_devices);
  loom_status st = LOOM_STATUS_OK;
  for (int32_t i = 0; i < n_cut && !st; i++) st = put_cut(p, cut[i], &tmp);
  free(cut);
  if (st) {
    free(loom_strbuf_take(&tmp));
    return st;
  }
  for (int32_t node = 0; node < g->n_nodes; node++) put_assign(p, node, &tmp);
  char n1[NAME_MAX_LEN], n2[NAME_MAX_LEN];
  for (int32_t i = 0; i < p->n_orders; i++)
    loom_strbuf_put(&tmp, "order %s %s\n", loom_subop_name(p, p->orders[i].before, n1, sizeof n1),
                    loom_subop_name(p, p->orders[i].after, n2, sizeof n2));
  for (int32_t i = 0; i < g->n_inputs; i++)
    if (p->inputs[i].set) put_placement(&tmp, "input", "%", g->values[g->inputs[i]].name, &p->inputs[i]);
  for (int32_t o = 0; o < g->n_outputs; o++)
    if (p->outputs[o].set) put_placement(&tmp, "output", "", g->output_names[o], &p->outputs[o]);
  for (int32_t o = 0; o < g->n_outputs; o++)
    if (p->tied[o] >= 0) {
      loom_strbuf_put(&tmp, "tie ");
      put_name(&tmp, "", g->output_names[o]);
      loom_strbuf_put(&tmp, " ");
      put_name(&tmp, "%", g->values[g->inputs[p->tied[o]]].name);
      loom_strbuf_put(&tmp, "\n");
    }
  char *text = loom_strbuf_take(&tmp);
  if (!text) return loom_error(p->ctx, LOOM_STATUS_OUT_OF_MEMORY, "plan_write: out of memory");
  loom_strbuf_put(b, "%s", text);
  free(text);
  return LOOM_STATUS_OK;
}

/* ---- equality -------------------------------------------------------------- */

static bool differ(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool differ(char *why, size_t n, const char *fmt, ...) {
  if (why && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  return false;
}

static bool same_tree(const loom_plan *a, int32_t sa, const loom_plan *b, int32_t sb, char *why,
                      size_t n) {
  const loom_subop *x = &a->subops[sa], *y = &b->subops[sb];
  char name[NAME_MAX_LEN];
  loom_subop_name(a, sa, name, sizeof name);
  if (x->n_children != y->n_children)
    return differ(why, n, "%s has %d parts in one plan, %d in the other", name, x->n_children,
                  y->n_children);
  if (x->replica != y->replica || x->replicas != y->replicas ||
      x->r.n_labels != y->r.n_labels)
    return differ(why, n, "%s is a different replica", name);
  for (int32_t l = 0; l < x->r.n_labels; l++)
    if (x->r.lo[l] != y->r.lo[l] || x->r.hi[l] != y->r.hi[l])
      return differ(why, n, "%s covers a different range of label %d", name, l);
  if (x->n_children == 0 && x->device != y->device)
    return differ(why, n, "%s is on device %d in one plan, %d in the other", name, x->device,
                  y->device);
  for (int32_t c = 0; c < x->n_children; c++)
    if (!same_tree(a, x->first_child + c, b, y->first_child + c, why, n)) return false;
  return true;
}

static bool same_placement(const loom_plan_placement *x, const loom_plan_placement *y) {
  if (x->set != y->set) return false;
  if (!x->set) return true;
  if (!loom_vlayout_equal(&x->layout, &y->layout)) return false;
  return memcmp(x->devices, y->devices, sizeof *x->devices * (size_t)x->layout.n_pieces) == 0;
}

bool loom_plan_same(const loom_plan *a, const loom_plan *b, char *why, size_t n) {
  if (why && n) why[0] = '\0';
  if (!a || !b) return differ(why, n, "a plan is NULL");
  if (a->graph != b->graph) return differ(why, n, "the plans are over different graphs");
  if (a->n_devices != b->n_devices)
    return differ(why, n, "%d devices against %d", a->n_devices, b->n_devices);
  const loom_graph *g = a->graph;
  for (int32_t node = 0; node < g->n_nodes; node++)
    if (!same_tree(a, node, b, node, why, n)) return false;
  if (a->n_orders != b->n_orders)
    return differ(why, n, "%d orders against %d", a->n_orders, b->n_orders);
  char n1[NAME_MAX_LEN], n2[NAME_MAX_LEN];
  for (int32_t i = 0; i < a->n_orders; i++) {
    const int32_t ea[2] = {a->orders[i].before, a->orders[i].after};
    const int32_t eb[2] = {b->orders[i].before, b->orders[i].after};
    for (int k = 0; k < 2; k++)
      if (strcmp(loom_subop_name(a, ea[k], n1, sizeof n1), loom_subop_name(b, eb[k], n2, sizeof n2)))
        return differ(why, n, "order %d names %s in one plan, %s in the other", i, n1, n2);
  }
  for (int32_t i = 0; i < g->n_inputs; i++)
    if (!same_placement(&a->inputs[i], &b->inputs[i]))
      return differ(why, n, "input %d is held differently", i);
  for (int32_t o = 0; o < g->n_outputs; o++) {
    if (!same_placement(&a->outputs[o], &b->outputs[o]))
      return differ(why, n, "output %d is delivered differently", o);
    if (a->tied[o] != b->tied[o]) return differ(why, n, "output %d is tied differently", o);
  }
  return true;
}
