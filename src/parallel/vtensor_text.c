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

static loom_status parse_factor(vparser *p, loom_vfactor *f) {
  if (p->tok.kind != LOOM_TOK_IDENT ||
      (strcmp(p->tok.text, "D") && strcmp(p->tok.text, "V") && strcmp(p->tok.text, "R")))
    return fail_at(p, &p->tok, "a factor D(dim,parts), V(parts) or R(parts)");
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

loom_status loom_vlayout_parse(loom_ctx *ctx, const loom_type *type, const char *text,
                               size_t len, int32_t line, int32_t col, loom_vlayout *out) {
  if (!type || !out || (!text && len))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "vlayout_parse: NULL argument");
  vparser p = {.ctx = ctx};
  loom_lexer_init(&p.lx, text, len);
  p.lx.line = line > 0 ? line : 1;
  p.lx.col = col > 0 ? col : 1;
  next(&p);
  loom_vfactor factors[LOOM_VT_MAX_FACTORS];
  int32_t n = 0;
  int32_t fline[LOOM_VT_MAX_FACTORS], fcol[LOOM_VT_MAX_FACTORS];
  while (p.tok.kind == LOOM_TOK_NEWLINE) next(&p);
  if (p.tok.kind == LOOM_TOK_EOF)
    return fail_at(&p, &p.tok, "a layout (R(1) is one whole piece)");
  while (p.tok.kind != LOOM_TOK_EOF) {
    if (p.tok.kind == LOOM_TOK_NEWLINE) { /* trailing newlines only */
      next(&p);
      if (p.tok.kind != LOOM_TOK_EOF && p.tok.kind != LOOM_TOK_NEWLINE)
        return fail_at(&p, &p.tok, "the end of the layout");
      continue;
    }
    if (n == LOOM_VT_MAX_FACTORS)
      return loom_error(ctx, LOOM_STATUS_PARSE, "%d:%d: more than %d factors", p.tok.line,
                        p.tok.col, LOOM_VT_MAX_FACTORS);
    fline[n] = p.tok.line;
    fcol[n] = p.tok.col;
    LOOM_TRY(parse_factor(&p, &factors[n]));
    n++;
  }
  /* Errors against the type point at the factor that caused them. */
  for (int32_t i = 1; i <= n; i++) {
    loom_vlayout partial;
    if (loom_vlayout_make(ctx, type, i, factors, &partial) != LOOM_STATUS_OK) {
      loom_error_prefix(ctx, "%d:%d", fline[i - 1], fcol[i - 1]);
      if (ctx) ctx->last = LOOM_STATUS_PARSE;
      return LOOM_STATUS_PARSE;
    }
  }
  return loom_vlayout_make(ctx, type, n, factors, out);
}
