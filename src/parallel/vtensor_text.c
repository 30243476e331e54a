/*
 * The text form of a layout: factors D(dim,parts), V(parts), R(parts)
 * written one after another ("D(0,2)R(2)"). Tokens come from the text IR
 * lexer (ir/text_ir.h), so spacing, comments and LINE:COL errors read as
 * they do in a .loom file. The grammar is in docs/PARALLEL.md.
 */
#include "parallel/vtensor.h"

#include "ir/text_ir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct vparser {
  loom_ctx *ctx;
  loom_lexer lx;
  loom_token tok;
} vparser;

static loom_status fail_at(vparser *p, const loom_token *t, const char *what) {
  char d[128];
  if (t->kind == LOOM_TOK_ERROR)
    return loom_error(p->ctx, LOOM_STATUS_PARSE, "%d:%d: %s", t->line, t->col, t->text);
  return loom_error(p->ctx, LOOM_STATUS_PARSE, "%d:%d: expected %s, found %s", t->line, t->col,
                    what, loom_token_desc(t, d, sizeof d));
}

static void next(vparser *p) { loom_lexer_next(&p->lx, &p->tok); }

static loom_status expect(vparser *p, loom_tok_kind kind, const char *what) {
  if (p->tok.kind != kind) return fail_at(p, &p->tok, what);
  next(p);
  return LOOM_STATUS_OK;
}

/* An integer in [lo, hi] (what names it in messages). */
static loom_status parse_int(vparser *p, int64_t lo, int64_t hi, const char *what,
                             int32_t *out) {
  if (p->tok.kind != LOOM_TOK_INT) return fail_at(p, &p->tok, what);
  errno = 0;
  long long v = strtoll(p->tok.text, NULL, 10);
  if (errno == ERANGE || v < lo || v > hi)
    return loom_error(p->ctx, LOOM_STATUS_PARSE, "%d:%d: %s %s is outside [%lld, %lld]",
                      p->tok.line, p->tok.col, what, p->tok.text, (long long)lo, (long long)hi);
  *out = (int32_t)v;
  next(p);
  return LOOM_STATUS_OK;
}

static bool starts_factor(const loom_token *t) {
  return t->kind == LOOM_TOK_IDENT &&
         (!strcmp(t->text, "D") || !strcmp(t->text, "V") || !strcmp(t->text, "R"));
}

static loom_status parse_factor(vparser *p, loom_vfactor *f) {
  f->kind = p->tok.text[0] == 'D' ? LOOM_VF_D : p->tok.text[0] == 'V' ? LOOM_VF_V : LOOM_VF_R;
  f->dim = -1;
  next(p);
  LOOM_TRY(expect(p, LOOM_TOK_LPAREN, "'('"));
  if (f->kind == LOOM_VF_D) {
    LOOM_TRY(parse_int(p, 0, LOOM_MAX_RANK - 1, "a dim", &f->dim));
    LOOM_TRY(expect(p, LOOM_TOK_COMMA, "','"));
  }
  LOOM_TRY(parse_int(p, 1, LOOM_VT_MAX_PIECES, "a part count", &f->parts));
  return expect(p, LOOM_TOK_RPAREN, "')'");
}

loom_status loom_vlayout_parse_lexer(loom_ctx *ctx, const loom_type *type,
                                     struct loom_lexer *lx, struct loom_token *tok,
                                     loom_vlayout *out) {
  if (!type || !lx || !tok || !out)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "vlayout_parse: NULL argument");
  vparser p = {.ctx = ctx, .lx = *lx, .tok = *tok};
  loom_vfactor factors[LOOM_VT_MAX_FACTORS];
  int32_t fline[LOOM_VT_MAX_FACTORS], fcol[LOOM_VT_MAX_FACTORS], n = 0;
  loom_status st = LOOM_STATUS_OK;
  if (!starts_factor(&p.tok))
    st = fail_at(&p, &p.tok, "a layout: factors D(dim,parts), V(parts), R(parts)");
  /* A factor starts with the identifier D, V or R; anything else ends the layout. */
  while (st == LOOM_STATUS_OK && starts_factor(&p.tok)) {
    if (n == LOOM_VT_MAX_FACTORS) {
      st = loom_error(ctx, LOOM_STATUS_PARSE, "%d:%d: more than %d factors", p.tok.line,
                      p.tok.col, LOOM_VT_MAX_FACTORS);
      break;
    }
    fline[n] = p.tok.line;
    fcol[n] = p.tok.col;
    st = parse_factor(&p, &factors[n]);
    n++;
  }
  /* Errors against the type point at the factor that caused them. */
  for (int32_t i = 1; i <= n && st == LOOM_STATUS_OK; i++) {
    loom_vlayout partial;
    if (loom_vlayout_make(ctx, type, i, factors, &partial) != LOOM_STATUS_OK) {
      loom_error_prefix(ctx, "%d:%d", fline[i - 1], fcol[i - 1]);
      if (ctx) ctx->last = LOOM_STATUS_PARSE;
      st = LOOM_STATUS_PARSE;
    } else if (i == n) {
      *out = partial;
    }
  }
  *lx = p.lx;
  *tok = p.tok;
  return st;
}

loom_status loom_vlayout_parse(loom_ctx *ctx, const loom_type *type, const char *text,
                               size_t len, int32_t line, int32_t col, loom_vlayout *out) {
  if (!type || !out || (!text && len))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "vlayout_parse: NULL argument");
  loom_lexer lx;
  loom_token tok;
  loom_lexer_init(&lx, text, len);
  lx.line = line > 0 ? line : 1;
  lx.col = col > 0 ? col : 1;
  do loom_lexer_next(&lx, &tok);
  while (tok.kind == LOOM_TOK_NEWLINE);
  LOOM_TRY(loom_vlayout_parse_lexer(ctx, type, &lx, &tok, out));
  vparser p = {.ctx = ctx};
  if (tok.kind != LOOM_TOK_NEWLINE && tok.kind != LOOM_TOK_EOF)
    return fail_at(&p, &tok, "a factor D(dim,parts), V(parts) or R(parts)");
  /* A layout is one line; blank lines may follow. */
  while (tok.kind == LOOM_TOK_NEWLINE) loom_lexer_next(&lx, &tok);
  if (tok.kind != LOOM_TOK_EOF) return fail_at(&p, &tok, "the end of the layout");
  return LOOM_STATUS_OK;
}
