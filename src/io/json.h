/*
 * A small strict JSON reader (RFC 8259) for file headers such as
 * safetensors', and a growable text buffer for writing JSON.
 * Strict: no comments, no trailing commas, no duplicate object keys, no
 * NUL characters in strings, a nesting limit; every error names the byte
 * offset. Numbers keep an exact int64 when the literal is an integer.
 */
#ifndef LOOM_IO_JSON_H
#define LOOM_IO_JSON_H

#include "core/ctx.h"

#define LOOM_JSON_MAX_DEPTH 64

typedef enum loom_json_kind {
  LOOM_JSON_NULL = 0,
  LOOM_JSON_BOOL,
  LOOM_JSON_NUMBER,
  LOOM_JSON_STRING,
  LOOM_JSON_ARRAY,
  LOOM_JSON_OBJECT
} loom_json_kind;

typedef struct loom_json loom_json;
struct loom_json {
  loom_json_kind kind;
  bool b;           /* BOOL */
  double num;       /* NUMBER */
  bool is_int;      /* NUMBER: an integer literal that fits int64 */
  int64_t i;        /* NUMBER, when is_int */
  char *str;        /* STRING: UTF-8, NUL-terminated (no embedded NUL) */
  int32_t n;        /* ARRAY / OBJECT: number of items */
  loom_json *items; /* ARRAY / OBJECT: the values */
  char **keys;      /* OBJECT: the keys, in file order */
};

/* Parses len bytes of text (need not be NUL-terminated) as one JSON value.
 * Errors are LOOM_STATUS_PARSE with "json: ... at byte N". */
loom_status loom_json_parse(loom_ctx *ctx, const char *text, size_t len, loom_json **out);
/* Frees a parsed value (NULL is fine). */
void loom_json_free(loom_json *j);
/* The value of key in an object; NULL if absent or j is not an object. */
const loom_json *loom_json_get(const loom_json *j, const char *key);
/* A short name of a kind ("object", "string", ...). */
const char *loom_json_kind_name(loom_json_kind k);

/* A growable NUL-terminated text buffer for writing. Errors are sticky:
 * after a failed append, ok is false and later appends do nothing. */
typedef struct loom_jbuf {
  char *data;
  size_t len, cap;
  bool ok;
} loom_jbuf;

void loom_jbuf_init(loom_jbuf *b);
void loom_jbuf_free(loom_jbuf *b);
void loom_jbuf_append(loom_jbuf *b, const char *s, size_t n);
void loom_jbuf_printf(loom_jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a quoted JSON string with escapes. */
void loom_jbuf_string(loom_jbuf *b, const char *s);

#endif
