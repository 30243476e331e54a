/*
 * Internals of the text IR (docs/TEXT_IR.md): the lexer shared by the parser,
 * the identifier rule shared with the printer, and a length-aware parse entry
 * (files may hold NUL bytes, which the C-string API cannot see).
 */
#ifndef LOOM_IR_TEXT_IR_H
#define LOOM_IR_TEXT_IR_H

#include "ir/graph.h"

/* Longest identifier, name, number or decoded string, in bytes. */
#define LOOM_TEXT_MAX_TOKEN 1024
/* Largest text loom_graph_load reads. */
#define LOOM_TEXT_MAX_FILE ((size_t)1 << 30)

typedef enum loom_tok_kind {
  LOOM_TOK_EOF = 0,
  LOOM_TOK_NEWLINE,
  LOOM_TOK_IDENT,     /* f32, matmul, trans_a, true, inf, ... */
  LOOM_TOK_INT,       /* -12 */
  LOOM_TOK_FLOAT,     /* 0.5, -1e-30 */
  LOOM_TOK_SIGN,      /* a lone '-' or '+' (before inf/nan) */
  LOOM_TOK_VALUE,     /* %name or %"any name": text is the decoded name */
  LOOM_TOK_VALUE_NUM, /* %12: text is the digits */
  LOOM_TOK_STRING,    /* "any name": text is the decoded string */
  LOOM_TOK_COLON,
  LOOM_TOK_COMMA,
  LOOM_TOK_EQUAL,
  LOOM_TOK_LPAREN,
  LOOM_TOK_RPAREN,
  LOOM_TOK_LBRACK,
  LOOM_TOK_RBRACK,
  LOOM_TOK_ERROR /* text is the message */
} loom_tok_kind;

typedef struct loom_token {
  loom_tok_kind kind;
  int32_t line, col; /* 1-based; columns count bytes */
  char text[LOOM_TEXT_MAX_TOKEN + 1];
} loom_token;

typedef struct loom_lexer {
  const char *src;
  size_t len, pos;
  int32_t line, col;
} loom_lexer;

void loom_lexer_init(loom_lexer *lx, const char *src, size_t len);
/* Reads the next token; never reads past src[len - 1]. */
void loom_lexer_next(loom_lexer *lx, loom_token *t);
/* "identifier 'foo'", "end of line", "'('", ... for messages; buf >= 96 bytes. */
const char *loom_token_desc(const loom_token *t, char *buf, size_t n);

/* True if name can be printed bare: [A-Za-z_][A-Za-z0-9_.]*, not too long. */
bool loom_text_is_ident(const char *name);

/* loom_graph_parse over len bytes (a NUL byte in them is an error). */
loom_status loom_graph_parse_text(loom_ctx *ctx, const char *text, size_t len,
                                  loom_graph **out);

#endif
