#include "core/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void loom_strbuf_vput(loom_strbuf *b, const char *fmt, va_list ap) {
  if (b->oom) return;
  for (;;) {
    va_list aq;
    va_copy(aq, ap);
    int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, aq);
    va_end(aq);
    if (w < 0) {
      b->oom = true;
      return;
    }
    if (b->p && (size_t)w < b->cap - b->n) {
      b->n += (size_t)w;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 1024;
    while (cap < b->n + (size_t)w + 1) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) {
      b->oom = true;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
}

void loom_strbuf_put(loom_strbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  loom_strbuf_vput(b, fmt, ap);
  va_end(ap);
}

char *loom_strbuf_take(loom_strbuf *b) {
  char *p = b->p;
  bool failed = b->oom;
  memset(b, 0, sizeof *b);
  if (failed) {
    free(p);
    return NULL;
  }
  if (!p) {
    p = malloc(1);
    if (p) p[0] = '\0';
  }
  return p;
}

void loom_strbuf_put_dot_label(loom_strbuf *b, const char *s) {
  for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
    if (*c == '"' || *c == '\\') loom_strbuf_put(b, "\\%c", *c);
    else if (*c >= 0x20 && *c < 0x7f) loom_strbuf_put(b, "%c", *c);
    else loom_strbuf_put(b, "?");
  }
}
