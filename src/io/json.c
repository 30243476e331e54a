#include "io/json.h"

#include "core/strmap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jparser {
  loom_ctx *ctx;
  const char *s;
  size_t len, pos;
} jparser;

static loom_status jerr(jparser *p, const char *what) {
  return loom_error(p->ctx, LOOM_STATUS_PARSE, "json: %s at byte %zu", what, p->pos);
}

static void skip_ws(jparser *p) {
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static bool at(jparser *p, char c) { return p->pos < p->len && p->s[p->pos] == c; }

static void value_clear(loom_json *j) {
  if (j->kind == LOOM_JSON_STRING) free(j->str);
  if (j->kind == LOOM_JSON_ARRAY || j->kind == LOOM_JSON_OBJECT) {
    for (int32_t k = 0; k < j->n; k++) {
      value_clear(&j->items[k]);
      if (j->keys) free(j->keys[k]);
    }
    free(j->items);
    free(j->keys);
  }
  memset(j, 0, sizeof *j);
}

void loom_json_free(loom_json *j) {
  if (!j) return;
  value_clear(j);
  free(j);
}

const char *loom_json_kind_name(loom_json_kind k) {
  switch (k) {
  case LOOM_JSON_NULL: return "null";
  case LOOM_JSON_BOOL: return "boolean";
  case LOOM_JSON_NUMBER: return "number";
  case LOOM_JSON_STRING: return "string";
  case LOOM_JSON_ARRAY: return "array";
  case LOOM_JSON_OBJECT: return "object";
  }
  return "?";
}

const loom_json *loom_json_get(const loom_json *j, const char *key) {
  if (!j || j->kind != LOOM_JSON_OBJECT || !key) return NULL;
  for (int32_t k = 0; k < j->n; k++)
    if (strcmp(j->keys[k], key) == 0) return &j->items[k];
  return NULL;
}

/* ---- strings ------------------------------------------------------------ */

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool read_hex4(jparser *p, uint32_t *out) {
  if (p->len - p->pos < 4) return false;
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) {
    int h = hexval(p->s[p->pos + (size_t)k]);
    if (h < 0) return false;
    v = v * 16 + (uint32_t)h;
  }
  p->pos += 4;
  *out = v;
  return true;
}

static size_t put_utf8(char *o, uint32_t cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Length of the valid UTF-8 sequence at s[0..n), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t k;
  uint32_t cp, min;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0)
    k = 2, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0)
    k = 3, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0)
    k = 4, cp = c & 0x07, min = 0x10000;
  else
    return 0;
  if (n < k) return 0;
  for (size_t i = 1; i < k; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return k;
}

/* Parses a string at p->pos (the opening quote) into a malloc'ed copy. */
static loom_status parse_string(jparser *p, char **out) {
  p->pos++; /* the quote */
  /* The decoded text is never longer than the source. */
  size_t start = p->pos, end = start;
  while (end < p->len && p->s[end] != '"')
    end += p->s[end] == '\\' ? 2 : 1;
  if (end >= p->len) {
    p->pos = start - 1;
    return jerr(p, "unterminated string");
  }
  char *o = malloc(end - start + 1);
  if (!o) return loom_error(p->ctx, LOOM_STATUS_OUT_OF_MEMORY, "json: out of memory");
  size_t k = 0;
  while (p->s[p->pos] != '"') {
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c < 0x20) {
      free(o);
      return jerr(p, "unescaped control character in string");
    }
    if (c != '\\') {
      size_t n = utf8_seq((const unsigned char *)p->s + p->pos, p->len - p->pos);
      if (n == 0) {
        free(o);
        return jerr(p, "invalid UTF-8 in string");
      }
      memcpy(o + k, p->s + p->pos, n);
      k += n;
      p->pos += n;
      continue;
    }
    p->pos++;
    char e = p->pos < p->len ? p->s[p->pos++] : '\0';
    switch (e) {
    case '"': o[k++] = '"'; break;
    case '\\': o[k++] = '\\'; break;
    case '/': o[k++] = '/'; break;
    case 'b': o[k++] = '\b'; break;
    case 'f': o[k++] = '\f'; break;
    case 'n': o[k++] = '\n'; break;
    case 'r': o[k++] = '\r'; break;
    case 't': o[k++] = '\t'; break;
    case 'u': {
      uint32_t cp;
      if (!read_hex4(p, &cp)) {
        free(o);
        return jerr(p, "bad \\u escape");
      }
      if (cp >= 0xDC00 && cp <= 0xDFFF) {
        free(o);
        return jerr(p, "lone low surrogate in \\u escape");
      }
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t lo;
        if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
          free(o);
          return jerr(p, "high surrogate without a low surrogate");
        }
        p->pos += 2;
        if (!read_hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
          free(o);
          return jerr(p, "bad low surrogate in \\u escape");
        }
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      if (cp == 0) {
        free(o);
        return jerr(p, "\\u0000 is not allowed in strings");
      }
      /* 6 escaped source bytes give at most 3 UTF-8 bytes; 12 give 4 */
      k += put_utf8(o + k, cp);
      break;
    }
    default:
      free(o);
      p->pos--;
      return jerr(p, "bad escape in string");
    }
  }
  p->pos++; /* closing quote */
  o[k] = '\0';
  *out = o;
  return LOOM_STATUS_OK;
}

/* ---- numbers ------------------------------------------------------------ */

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static loom_status parse_number(jparser *p, loom_json *j) {
  size_t start = p->pos;
  bool integral = true;
  if (at(p, '-')) p->pos++;
  if (at(p, '0')) {
    p->pos++;
  } else if (p->pos < p->len && is_digit(p->s[p->pos])) {
    while (p->pos < p->len && is_digit(p->s[p->pos]))
      p->pos++;
  } else {
    return jerr(p, "bad number");
  }
  if (at(p, '.')) {
    integral = false;
    p->pos++;
    if (!(p->pos < p->len && is_digit(p->s[p->pos]))) return jerr(p, "bad number fraction");
    while (p->pos < p->len && is_digit(p->s[p->pos]))
      p->pos++;
  }
  if (at(p, 'e') || at(p, 'E')) {
    integral = false;
    p->pos++;
    if (at(p, '+') || at(p, '-')) p->pos++;
    if (!(p->pos < p->len && is_digit(p->s[p->pos]))) return jerr(p, "bad number exponent");
    while (p->pos < p->len && is_digit(p->s[p->pos]))
      p->pos++;
  }
  size_t n = p->pos - start;
  char buf[64];
  if (n >= sizeof buf) {
    /* long literals: only their value as a double matters */
    char *tmp = malloc(n + 1);
    if (!tmp) return loom_error(p->ctx, LOOM_STATUS_OUT_OF_MEMORY, "json: out of memory");
    memcpy(tmp, p->s + start, n);
    tmp[n] = '\0';
    j->num = strtod(tmp, NULL);
    free(tmp);
  } else {
    memcpy(buf, p->s + start, n);
    buf[n] = '\0';
    j->num = strtod(buf, NULL);
  }
  j->kind = LOOM_JSON_NUMBER;
  if (integral) {
    /* exact int64, with overflow detection */
    const char *d = p->s + start;
    bool neg = *d == '-';
    if (neg) d++;
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    bool fits = true;
    for (; d < p->s + p->pos; d++) {
      uint64_t dig = (uint64_t)(*d - '0');
      if (v > (lim - dig) / 10) {
        fits = false;
        break;
      }
      v = v * 10 + dig;
    }
    if (fits) {
      j->is_int = true;
      j->i = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    }
  }
  if (!isfinite(j->num)) return jerr(p, "number out of range");
  return LOOM_STATUS_OK;
}

/* ---- values ------------------------------------------------------------- */

static loom_status parse_value(jparser *p, loom_json *j, int depth);

static bool grow_items(jparser *p, loom_json *j, int32_t *cap, bool keys) {
  if (j->n < *cap) return true;
  int32_t nc = *cap ? *cap * 2 : 4;
  if (nc > (1 << 28)) {
    loom_error(p->ctx, LOOM_STATUS_OUT_OF_MEMORY, "json: too many items");
    return false;
  }
  loom_json *it = realloc(j->items, sizeof *it * (size_t)nc);
  if (!it) {
    loom_error(p->ctx, LOOM_STATUS_OUT_OF_MEMORY, "json: out of memory");
    return false;
  }
  j->items = it;
  if (keys) {
    char **k = realloc(j->keys, sizeof *k * (size_t)nc);
    if (!k) {
      loom_error(p->ctx, LOOM_STATUS_OUT_OF_MEMORY, "json: out of memory");
      return false;
    }
    j->keys = k;
  }
  *cap = nc;
  return true;
}

/* seen: an object's keys so far (key -> index), for the duplicate check. */
static loom_status parse_items(jparser *p, loom_json *j, int depth, bool object,
                               loom_strmap *seen) {
  j->kind = object ? LOOM_JSON_OBJECT : LOOM_JSON_ARRAY;
  char close = object ? '}' : ']';
  int32_t cap = 0;
  p->pos++;
  skip_ws(p);
  if (at(p, close)) {
    p->pos++;
    return LOOM_STATUS_OK;
  }
  for (;;) {
    skip_ws(p);
    if (!grow_items(p, j, &cap, object)) return p->ctx ? p->ctx->last : LOOM_STATUS_OUT_OF_MEMORY;
    loom_json *item = &j->items[j->n];
    memset(item, 0, sizeof *item);
    if (object) {
      if (!at(p, '"')) return jerr(p, "expected a string key");
      size_t key_pos = p->pos;
      char *key = NULL;
      LOOM_TRY(parse_string(p, &key));
      size_t key_len = strlen(key);
      if (loom_strmap_get(seen, key, key_len) >= 0) {
        free(key);
        p->pos = key_pos;
        return jerr(p, "duplicate key in object");
      }
      if (!loom_strmap_put(seen, key, key_len, j->n)) {
        free(key);
        return loom_error(p->ctx, LOOM_STATUS_OUT_OF_MEMORY, "json: out of memory");
      }
      j->keys[j->n] = key;
      skip_ws(p);
      if (!at(p, ':')) {
        free(key);
        return jerr(p, "expected ':' after key");
      }
      p->pos++;
      skip_ws(p);
      loom_status st = parse_value(p, item, depth + 1);
      if (st) {
        value_clear(item);
        free(key);
        return st;
      }
    } else {
      loom_status st = parse_value(p, item, depth + 1);
      if (st) {
        value_clear(item);
        return st;
      }
    }
    j->n++;
    skip_ws(p);
    if (at(p, ',')) {
      p->pos++;
      skip_ws(p);
      if (at(p, close)) return jerr(p, "trailing comma");
      continue;
    }
    if (at(p, close)) {
      p->pos++;
      return LOOM_STATUS_OK;
    }
    return jerr(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static loom_status parse_container(jparser *p, loom_json *j, int depth, bool object) {
  loom_strmap seen = {0};
  loom_status st = parse_items(p, j, depth, object, &seen);
  loom_strmap_free(&seen);
  return st;
}

static bool literal(jparser *p, const char *word) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return false;
  p->pos += n;
  return true;
}

static loom_status parse_value(jparser *p, loom_json *j, int depth) {
  if (depth > LOOM_JSON_MAX_DEPTH) return jerr(p, "nesting too deep");
  if (p->pos >= p->len) return jerr(p, "unexpected end of input");
  char c = p->s[p->pos];
  switch (c) {
  case '{': return parse_container(p, j, depth, true);
  case '[': return parse_container(p, j, depth, false);
  case '"': j->kind = LOOM_JSON_STRING; return parse_string(p, &j->str);
  case 't':
  case 'f':
  case 'n':
    if (literal(p, "true")) {
      j->kind = LOOM_JSON_BOOL;
      j->b = true;
    } else if (literal(p, "false")) {
      j->kind = LOOM_JSON_BOOL;
    } else if (literal(p, "null")) {
      j->kind = LOOM_JSON_NULL;
    } else {
      return jerr(p, "unexpected character");
    }
    return LOOM_STATUS_OK;
  default:
    if (c == '-' || is_digit(c)) return parse_number(p, j);
    return jerr(p, "unexpected character");
  }
}

loom_status loom_json_parse(loom_ctx *ctx, const char *text, size_t len, loom_json **out) {
  if (!out || (!text && len))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "json_parse: NULL argument");
  *out = NULL;
  loom_json *j = calloc(1, sizeof *j);
  if (!j) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "json: out of memory");
  jparser p = {ctx, text, len, 0};
  skip_ws(&p);
  loom_status st = parse_value(&p, j, 0);
  if (!st) {
    skip_ws(&p);
    if (p.pos != p.len) st = jerr(&p, "trailing characters after the value");
  }
  if (st) {
    loom_json_free(j);
    return st;
  }
  *out = j;
  return LOOM_STATUS_OK;
}

/* ---- writing ------------------------------------------------------------ */

void loom_jbuf_init(loom_jbuf *b) {
  b->data = NULL;
  b->len = b->cap = 0;
  b->ok = true;
}

void loom_jbuf_free(loom_jbuf *b) {
  free(b->data);
  loom_jbuf_init(b);
}

static bool jbuf_reserve(loom_jbuf *b, size_t extra) {
  if (!b->ok) return false;
  if (b->len + extra + 1 <= b->cap) return true;
  size_t nc = b->cap ? b->cap : 256;
  while (nc < b->len + extra + 1)
    nc *= 2;
  char *d = realloc(b->data, nc);
  if (!d) {
    b->ok = false;
    return false;
  }
  b->data = d;
  b->cap = nc;
  return true;
}

void loom_jbuf_append(loom_jbuf *b, const char *s, size_t n) {
  if (!jbuf_reserve(b, n)) return;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void loom_jbuf_printf(loom_jbuf *b, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->ok = false;
    return;
  }
  if ((size_t)n < sizeof small) {
    loom_jbuf_append(b, small, (size_t)n);
    return;
  }
  if (!jbuf_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void loom_jbuf_string(loom_jbuf *b, const char *s) {
  loom_jbuf_append(b, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    switch (*c) {
    case '"': loom_jbuf_append(b, "\\\"", 2); break;
    case '\\': loom_jbuf_append(b, "\\\\", 2); break;
    case '\n': loom_jbuf_append(b, "\\n", 2); break;
    case '\r': loom_jbuf_append(b, "\\r", 2); break;
    case '\t': loom_jbuf_append(b, "\\t", 2); break;
    default:
      if (*c < 0x20)
        loom_jbuf_printf(b, "\\u%04x", *c);
      else
        loom_jbuf_append(b, (const char *)c, 1);
    }
  }
  loom_jbuf_append(b, "\"", 1);
}
