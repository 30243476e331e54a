/* A growing text buffer for printers and code generators. After an
 * allocation failure `oom` is set and later writes do nothing, so a printer
 * checks once at the end. */
#ifndef LOOM_CORE_STRBUF_H
#define LOOM_CORE_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct loom_strbuf {
  char *p; /* NUL-terminated once anything was written */
  size_t n, cap;
  bool oom;
} loom_strbuf;

/* Appends formatted text. */
void loom_strbuf_put(loom_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void loom_strbuf_vput(loom_strbuf *b, const char *fmt, va_list ap);
/* Appends s inside a Graphviz quoted label: printable ASCII, quotes and
 * backslashes escaped, anything else as '?'. */
void loom_strbuf_put_dot_label(loom_strbuf *b, const char *s);
/* The text, handed to the caller (free() it); NULL after a failure, in
 * which case the buffer is freed. Leaves b empty. An empty buffer gives "". */
char *loom_strbuf_take(loom_strbuf *b);

#endif
