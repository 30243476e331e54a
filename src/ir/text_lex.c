/*
 * The text IR lexer. Works on (pointer, length), so it never reads past the
 * end and reports NUL bytes instead of stopping at them. Every token's text
 * is copied (bounded by LOOM_TEXT_MAX_TOKEN) so the parser can keep one
 * token of lookahead without pointing into the source.
 */
#include "ir/text_ir.h"

#include <stdio.h>
#include <string.h>

void loom_lexer_init(loom_lexer *lx, const char *src, size_t len) {
  lx->src = src;
  lx->len = src ? len : 0;
  lx->pos = 0;
  lx->line = 1;
  lx->col = 1;
}

static bool is_alpha(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_ident_char(int c) { return is_alpha(c) || is_digit(c) || c == '.'; }

bool loom_text_is_ident(const char *name) {
  if (!name || !is_alpha((unsigned char)name[0])) return false;
  size_t n = 0;
  for (; name[n]; n++)
    if (!is_ident_char((unsigned char)name[n])) return false;
  return n <= LOOM_TEXT_MAX_TOKEN;
}

/* The byte at pos + k, or -1 past the end. */
static int peek(const loom_lexer *lx, size_t k) {
  return lx->pos + k < lx->len ? (unsigned char)lx->src[lx->pos + k] : -1;
}

static void advance(loom_lexer *lx) {
  if (lx->pos >= lx->len) return;
  if (lx->src[lx->pos] == '\n') {
    lx->line++;
    lx->col = 1;
  } else if (lx->col < INT32_MAX) {
    lx->col++;
  }
  lx->pos++;
}

static void lex_error(loom_token *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void lex_error(loom_token *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->text, sizeof t->text, fmt, ap);
  va_end(ap);
  t->kind = LOOM_TOK_ERROR;
}

/* Describes byte c for a message. */
static const char *byte_desc(int c, char *buf, size_t n) {
  if (c == 0)
    snprintf(buf, n, "NUL byte");
  else if (c > 0x20 && c < 0x7f)
    snprintf(buf, n, "'%c'", c);
  else
    snprintf(buf, n, "byte 0x%02x", (unsigned)c);
  return buf;
}

/* Copies a run of identifier characters into t->text (false: too long). */
static bool lex_word(loom_lexer *lx, loom_token *t, size_t *n) {
  while (is_ident_char(peek(lx, 0))) {
    if (*n >= LOOM_TEXT_MAX_TOKEN) {
      while (is_ident_char(peek(lx, 0))) advance(lx);
      return false;
    }
    t->text[(*n)++] = (char)peek(lx, 0);
    advance(lx);
  }
  t->text[*n] = '\0';
  return true;
}

static void lex_number(loom_lexer *lx, loom_token *t) {
  size_t n = 0;
  bool is_float = false, ok = true;
  if (peek(lx, 0) == '-' || peek(lx, 0) == '+') {
    t->text[n++] = (char)peek(lx, 0);
    advance(lx);
  }
  size_t mant_digits = 0;
  /* Everything that could belong to the number is taken, then checked. */
  while (n < LOOM_TEXT_MAX_TOKEN) {
    int c = peek(lx, 0);
    bool take = is_ident_char(c) ||
                ((c == '-' || c == '+') && n > 0 && (t->text[n - 1] == 'e' || t->text[n - 1] == 'E'));
    if (!take) break;
    t->text[n++] = (char)c;
    advance(lx);
  }
  t->text[n] = '\0';
  if (is_ident_char(peek(lx, 0))) {
    while (is_ident_char(peek(lx, 0))) advance(lx);
    lex_error(t, "number is longer than %d bytes", LOOM_TEXT_MAX_TOKEN);
    return;
  }
  /* [sign] digits [. digits] [e [sign] digits], or [sign] . digits [...] */
  size_t i = (t->text[0] == '-' || t->text[0] == '+') ? 1 : 0;
  while (is_digit((unsigned char)t->text[i])) i++, mant_digits++;
  if (t->text[i] == '.') {
    is_float = true;
    i++;
    while (is_digit((unsigned char)t->text[i])) i++, mant_digits++;
  }
  if (mant_digits == 0) ok = false;
  if (ok && (t->text[i] == 'e' || t->text[i] == 'E')) {
    is_float = true;
    i++;
    if (t->text[i] == '-' || t->text[i] == '+') i++;
    if (!is_digit((unsigned char)t->text[i])) ok = false;
    while (is_digit((unsigned char)t->text[i])) i++;
  }
  if (!ok || t->text[i] != '\0') {
    char copy[80];
    snprintf(copy, sizeof copy, "%.60s%s", t->text, n > 60 ? "..." : "");
    lex_error(t, "bad number '%s'", copy);
    return;
  }
  t->kind = is_float ? LOOM_TOK_FLOAT : LOOM_TOK_INT;
}

static int hex_val(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* A quoted string at lx (on its '"'), decoded into t->text. */
static void lex_string(loom_lexer *lx, loom_token *t, loom_tok_kind kind) {
  size_t n = 0;
  advance(lx); /* the opening quote */
  for (;;) {
    int c = peek(lx, 0);
    if (c < 0 || c == '\n') {
      lex_error(t, "unterminated string: expected '\"' before the end of the %s",
                c < 0 ? "file" : "line");
      return;
    }
    if (c == '"') {
      advance(lx);
      break;
    }
    if (c == '\\') {
      int e = peek(lx, 1);
      if (e == '\\' || e == '"') {
        c = e;
        advance(lx);
      } else if (e == 'n') {
        c = '\n';
        advance(lx);
      } else if (e == 't') {
        c = '\t';
        advance(lx);
      } else if (e == 'x' && hex_val(peek(lx, 2)) >= 0 && hex_val(peek(lx, 3)) >= 0) {
        c = hex_val(peek(lx, 2)) * 16 + hex_val(peek(lx, 3));
        advance(lx);
        advance(lx);
        advance(lx);
        if (c == 0) {
          lex_error(t, "a name cannot contain \\x00");
          return;
        }
      } else {
        char b[32];
        lex_error(t, "bad escape in string: expected \\\\, \\\", \\n, \\t or \\xHH after "
                     "'\\' but found %s", e < 0 ? "the end of the file" : byte_desc(e, b, sizeof b));
        return;
      }
    } else if (c == 0 || c < 0x20 || c == 0x7f) {
      char b[32];
      lex_error(t, "%s in a string (write it as \\xHH)", byte_desc(c, b, sizeof b));
      return;
    }
    if (n >= LOOM_TEXT_MAX_TOKEN) {
      lex_error(t, "string is longer than %d bytes", LOOM_TEXT_MAX_TOKEN);
      return;
    }
    t->text[n++] = (char)c;
    advance(lx);
  }
  t->text[n] = '\0';
  if (n == 0) {
    lex_error(t, "empty name \"\"");
    return;
  }
  t->kind = kind;
}

static void lex_value(loom_lexer *lx, loom_token *t) {
  advance(lx); /* '%' */
  int c = peek(lx, 0);
  size_t n = 0;
  if (c == '"') {
    lex_string(lx, t, LOOM_TOK_VALUE);
  } else if (is_digit(c)) {
    if (!lex_word(lx, t, &n)) {
      lex_error(t, "value number is longer than %d bytes", LOOM_TEXT_MAX_TOKEN);
      return;
    }
    for (size_t i = 0; i < n; i++)
      if (!is_digit((unsigned char)t->text[i])) {
        char copy[80];
        snprintf(copy, sizeof copy, "%.60s%s", t->text, n > 60 ? "..." : "");
        lex_error(t, "bad value '%%%s': a name starts with a letter or '_', a number "
                     "has only digits", copy);
        return;
      }
    t->kind = LOOM_TOK_VALUE_NUM;
  } else if (is_alpha(c)) {
    if (!lex_word(lx, t, &n)) {
      lex_error(t, "name is longer than %d bytes", LOOM_TEXT_MAX_TOKEN);
      return;
    }
    t->kind = LOOM_TOK_VALUE;
  } else {
    char b[32];
    lex_error(t, "expected a name, a number or '\"' after '%%' but found %s",
              c < 0 ? "the end of the file" : c == '\n' ? "the end of the line"
                                                       : byte_desc(c, b, sizeof b));
  }
}

void loom_lexer_next(loom_lexer *lx, loom_token *t) {
  t->text[0] = '\0';
  for (;;) {
    int c = peek(lx, 0);
    if (c == ' ' || c == '\t' || c == '\r') {
      advance(lx);
    } else if (c == '#') {
      /* A comment runs to the end of the line; any bytes but NUL. */
      while (peek(lx, 0) >= 0 && peek(lx, 0) != '\n' && peek(lx, 0) != 0) advance(lx);
      if (peek(lx, 0) == 0) break;
    } else {
      break;
    }
  }
  t->line = lx->line;
  t->col = lx->col;
  int c = peek(lx, 0);
  size_t n = 0;
  switch (c) {
  case -1: t->kind = LOOM_TOK_EOF; return;
  case '\n': advance(lx); t->kind = LOOM_TOK_NEWLINE; return;
  case ':': advance(lx); t->kind = LOOM_TOK_COLON; return;
  case ',': advance(lx); t->kind = LOOM_TOK_COMMA; return;
  case '=': advance(lx); t->kind = LOOM_TOK_EQUAL; return;
  case '(': advance(lx); t->kind = LOOM_TOK_LPAREN; return;
  case ')': advance(lx); t->kind = LOOM_TOK_RPAREN; return;
  case '[': advance(lx); t->kind = LOOM_TOK_LBRACK; return;
  case ']': advance(lx); t->kind = LOOM_TOK_RBRACK; return;
  case '%': lex_value(lx, t); return;
  case '"': lex_string(lx, t, LOOM_TOK_STRING); return;
  default: break;
  }
  if (is_digit(c) || ((c == '-' || c == '+' || c == '.') &&
                      (is_digit(peek(lx, 1)) || (c != '.' && peek(lx, 1) == '.')))) {
    lex_number(lx, t);
  } else if (c == '-' || c == '+') {
    advance(lx);
    t->text[0] = (char)c;
    t->text[1] = '\0';
    t->kind = LOOM_TOK_SIGN;
  } else if (is_alpha(c)) {
    if (!lex_word(lx, t, &n))
      lex_error(t, "identifier is longer than %d bytes", LOOM_TEXT_MAX_TOKEN);
    else
      t->kind = LOOM_TOK_IDENT;
  } else {
    char b[32];
    advance(lx);
    lex_error(t, "unexpected %s", byte_desc(c, b, sizeof b));
  }
}

const char *loom_token_desc(const loom_token *t, char *buf, size_t n) {
  switch (t->kind) {
  case LOOM_TOK_EOF: snprintf(buf, n, "the end of the file"); break;
  case LOOM_TOK_NEWLINE: snprintf(buf, n, "the end of the line"); break;
  case LOOM_TOK_IDENT: snprintf(buf, n, "'%.60s'", t->text); break;
  case LOOM_TOK_INT:
  case LOOM_TOK_FLOAT: snprintf(buf, n, "the number %.60s", t->text); break;
  case LOOM_TOK_SIGN: snprintf(buf, n, "'%s'", t->text); break;
  case LOOM_TOK_VALUE: {
    /* Names may hold any byte: show only the printable ones. */
    char safe[64];
    size_t k = 0;
    for (; t->text[k] && k < sizeof safe - 1; k++) {
      unsigned char c = (unsigned char)t->text[k];
      safe[k] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    safe[k] = '\0';
    snprintf(buf, n, "%%%s%s", safe, t->text[k] ? "..." : "");
    break;
  }
  case LOOM_TOK_VALUE_NUM: snprintf(buf, n, "%%%.60s", t->text); break;
  case LOOM_TOK_STRING: snprintf(buf, n, "a string"); break;
  case LOOM_TOK_COLON: snprintf(buf, n, "':'"); break;
  case LOOM_TOK_COMMA: snprintf(buf, n, "','"); break;
  case LOOM_TOK_EQUAL: snprintf(buf, n, "'='"); break;
  case LOOM_TOK_LPAREN: snprintf(buf, n, "'('"); break;
  case LOOM_TOK_RPAREN: snprintf(buf, n, "')'"); break;
  case LOOM_TOK_LBRACK: snprintf(buf, n, "'['"); break;
  case LOOM_TOK_RBRACK: snprintf(buf, n, "']'"); break;
  case LOOM_TOK_ERROR: snprintf(buf, n, "an invalid token"); break;
  }
  return buf;
}
