/*
 * NumPy .npy files (format versions 1.0, 2.0 and 3.0).
 *
 * Layout: "\x93NUMPY", major, minor, a little-endian header length (u16 for
 * 1.0, u32 for 2.0/3.0), a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and '\n', then the raw C-order data.
 *
 * Supported dtypes: <f4 <f8 <f2 <i4 <i8 |b1 |u1 ('<' or '=' or '|' accepted
 * for the one-byte ones). bf16 has no NumPy type code, so saving a bf16
 * tensor is refused (UNSUPPORTED): cast it to f32 first. Big-endian data,
 * Fortran order and structured dtypes are refused as UNSUPPORTED.
 *
 * The writer produces the same bytes as numpy.save (numpy >= 1.24 header
 * growth padding included), so saved files can be compared byte for byte.
 */
#include "core/ctx.h"
#include "core/file.h"
#include "ir/dtype.h"
#include "ir/view.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
/* numpy.save leaves room for the growth axis to reach this many digits. */
#define NPY_GROWTH_DIGITS 21
/* numpy refuses headers past 10000 bytes by default; allow some slack. */
#define NPY_MAX_HEADER (1 << 20)

static const struct {
  const char *descr;
  loom_dtype dtype;
} npy_codes[] = {
    {"<f4", LOOM_DTYPE_F32}, {"<f8", LOOM_DTYPE_F64}, {"<f2", LOOM_DTYPE_F16},
    {"<i4", LOOM_DTYPE_I32}, {"<i8", LOOM_DTYPE_I64}, {"|b1", LOOM_DTYPE_BOOL},
    {"|u1", LOOM_DTYPE_U8},
    /* Byte order is meaningless for one-byte types; some writers use these. */
    {"<b1", LOOM_DTYPE_BOOL}, {"=b1", LOOM_DTYPE_BOOL}, {"<u1", LOOM_DTYPE_U8},
    {"=u1", LOOM_DTYPE_U8},
};

static bool host_is_little_endian(void) {
  const uint16_t one = 1;
  uint8_t b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* ---- header parsing ------------------------------------------------------ */

typedef struct npy_parser {
  loom_ctx *ctx;
  const char *path;
  const char *start, *s, *end;
} npy_parser;

static loom_status npy_bad(npy_parser *p, const char *what) {
  return loom_error(p->ctx, LOOM_STATUS_PARSE,
                    "%s: malformed .npy header: %s (at header byte %ld)",
                    p->path, what, (long)(p->s - p->start));
}

static void skip_ws(npy_parser *p) {
  while (p->s < p->end &&
         (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
    p->s++;
}

static bool eat(npy_parser *p, char c) {
  skip_ws(p);
  if (p->s < p->end && *p->s == c) {
    p->s++;
    return true;
  }
  return false;
}

/* A Python string literal in single or double quotes, without escapes. */
static loom_status parse_string(npy_parser *p, char *buf, size_t n) {
  skip_ws(p);
  if (p->s >= p->end || (*p->s != '\'' && *p->s != '"'))
    return npy_bad(p, "expected a quoted string");
  char q = *p->s++;
  size_t k = 0;
  while (p->s < p->end && *p->s != q) {
    if (*p->s == '\\' || *p->s == '\n' || *p->s == '\0')
      return npy_bad(p, "unsupported character in a string");
    if (k + 1 >= n) return npy_bad(p, "string too long");
    buf[k++] = *p->s++;
  }
  if (p->s >= p->end) return npy_bad(p, "unterminated string");
  p->s++;
  buf[k] = '\0';
  return LOOM_STATUS_OK;
}

static bool eat_word(npy_parser *p, const char *w) {
  skip_ws(p);
  size_t n = strlen(w);
  if ((size_t)(p->end - p->s) < n || memcmp(p->s, w, n) != 0) return false;
  const char *after = p->s + n;
  if (after < p->end &&
      ((*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z') ||
       (*after >= '0' && *after <= '9') || *after == '_'))
    return false;
  p->s = after;
  return true;
}

/* A non-negative Python int (an old "L" suffix is accepted). */
static loom_status parse_dim(npy_parser *p, int64_t *out) {
  skip_ws(p);
  if (p->s < p->end && *p->s == '-')
    return npy_bad(p, "negative dimension in shape");
  if (p->s >= p->end || *p->s < '0' || *p->s > '9')
    return npy_bad(p, "expected an integer in shape");
  int64_t v = 0;
  while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
    int d = *p->s++ - '0';
    if (v > (INT64_MAX - d) / 10) return npy_bad(p, "dimension too large");
    v = v * 10 + d;
  }
  if (p->s < p->end && (*p->s == 'L' || *p->s == 'l')) p->s++;
  *out = v;
  return LOOM_STATUS_OK;
}

/* "()", "(n,)", "(a, b)", "(a, b,)". A bare "(n)" is an int, not a tuple. */
static loom_status parse_shape(npy_parser *p, int32_t *rank, int64_t *shape) {
  if (!eat(p, '(')) return npy_bad(p, "shape is not a tuple");
  int32_t r = 0;
  if (eat(p, ')')) {
    *rank = 0;
    return LOOM_STATUS_OK;
  }
  for (;;) {
    int64_t d = 0;
    LOOM_TRY(parse_dim(p, &d));
    if (r >= LOOM_MAX_RANK)
      return loom_error(p->ctx, LOOM_STATUS_UNSUPPORTED,
                        "%s: array has more than %d dimensions", p->path,
                        LOOM_MAX_RANK);
    shape[r++] = d;
    bool comma = eat(p, ',');
    if (eat(p, ')')) {
      if (r == 1 && !comma)
        return npy_bad(p, "shape '(n)' is not a tuple (needs '(n,)')");
      break;
    }
    if (!comma) return npy_bad(p, "expected ',' or ')' in shape");
  }
  *rank = r;
  return LOOM_STATUS_OK;
}

static loom_status parse_header(npy_parser *p, loom_dtype *dt, int32_t *rank,
                                int64_t *shape) {
  bool have_descr = false, have_order = false, have_shape = false;
  char descr[32];
  if (!eat(p, '{')) return npy_bad(p, "expected '{'");
  for (;;) {
    if (eat(p, '}')) break;
    char key[32];
    LOOM_TRY(parse_string(p, key, sizeof key));
    if (!eat(p, ':')) return npy_bad(p, "expected ':' after a key");
    if (strcmp(key, "descr") == 0 && !have_descr) {
      skip_ws(p);
      if (p->s < p->end && *p->s == '[')
        return loom_error(p->ctx, LOOM_STATUS_UNSUPPORTED,
                          "%s: structured dtypes are not supported", p->path);
      LOOM_TRY(parse_string(p, descr, sizeof descr));
      have_descr = true;
    } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
      if (eat_word(p, "True"))
        return loom_error(p->ctx, LOOM_STATUS_UNSUPPORTED,
                          "%s: Fortran-order arrays are not supported "
                          "(save with numpy.ascontiguousarray)",
                          p->path);
      if (!eat_word(p, "False"))
        return npy_bad(p, "fortran_order must be True or False");
      have_order = true;
    } else if (strcmp(key, "shape") == 0 && !have_shape) {
      LOOM_TRY(parse_shape(p, rank, shape));
      have_shape = true;
    } else {
      char msg[80];
      snprintf(msg, sizeof msg, "unexpected or repeated key '%s'", key);
      return npy_bad(p, msg);
    }
    if (eat(p, '}')) break;
    if (!eat(p, ',')) return npy_bad(p, "expected ',' or '}'");
  }
  skip_ws(p);
  if (p->s != p->end) return npy_bad(p, "text after the closing '}'");
  if (!have_descr || !have_order || !have_shape)
    return npy_bad(p, "needs the keys 'descr', 'fortran_order' and 'shape'");
  for (size_t i = 0; i < sizeof npy_codes / sizeof npy_codes[0]; i++)
    if (strcmp(descr, npy_codes[i].descr) == 0) {
      *dt = npy_codes[i].dtype;
      return LOOM_STATUS_OK;
    }
  if (descr[0] == '>')
    return loom_error(p->ctx, LOOM_STATUS_UNSUPPORTED,
                      "%s: big-endian dtype '%s' is not supported", p->path,
                      descr);
  return loom_error(p->ctx, LOOM_STATUS_UNSUPPORTED,
                    "%s: dtype '%s' is not supported (Loom reads <f4 <f8 <f2 "
                    "<i4 <i8 |b1 |u1)",
                    p->path, descr);
}

/* ---- loading -------------------------------------------------------------- */

static loom_status read_exact(loom_ctx *ctx, FILE *f, const char *path,
                              void *buf, size_t n, const char *what) {
  size_t got = fread(buf, 1, n, f);
  if (got == n) return LOOM_STATUS_OK;
  if (ferror(f))
    return loom_error(ctx, LOOM_STATUS_IO, "%s: read error: %s", path,
                      strerror(errno));
  return loom_error(ctx, LOOM_STATUS_PARSE,
                    "%s: file is truncated (%s: wanted %zu bytes, got %zu)",
                    path, what, n, got);
}

static loom_status load_from(loom_ctx *ctx, FILE *f, const char *path,
                             loom_tensor **out) {
  /* Knowing the file size lets an absurd shape fail before allocating. */
  struct stat st;
  int64_t file_size = -1;
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode))
    file_size = (int64_t)st.st_size;

  unsigned char pre[12];
  LOOM_TRY(read_exact(ctx, f, path, pre, 8, "magic and version"));
  if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "%s: not a .npy file (bad magic)", path);
  unsigned major = pre[6], minor = pre[7];
  uint32_t hlen;
  int64_t prefix;
  if (major == 1 && minor == 0) {
    LOOM_TRY(read_exact(ctx, f, path, pre + 8, 2, "header length"));
    hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    prefix = 10;
  } else if ((major == 2 || major == 3) && minor == 0) {
    LOOM_TRY(read_exact(ctx, f, path, pre + 8, 4, "header length"));
    hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 |
           (uint32_t)pre[11] << 24;
    prefix = 12;
  } else {
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "%s: .npy format version %u.%u is not supported "
                      "(1.0, 2.0, 3.0 are)",
                      path, major, minor);
  }
  if (hlen > NPY_MAX_HEADER ||
      (file_size >= 0 && prefix + (int64_t)hlen > file_size))
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "%s: header length %u is larger than the file", path,
                      hlen);

  char *header = loom_malloc(ctx, hlen + 1);
  if (!header) return LOOM_STATUS_OUT_OF_MEMORY;
  loom_status st_ = read_exact(ctx, f, path, header, hlen, "header");
  if (st_ != LOOM_STATUS_OK) {
    free(header);
    return st_;
  }
  header[hlen] = '\0';
  if (memchr(header, '\0', hlen)) {
    free(header);
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "%s: malformed .npy header: contains a NUL byte", path);
  }
  npy_parser p = {ctx, path, header, header, header + hlen};
  loom_dtype dt = LOOM_DTYPE_F32;
  int32_t rank = 0;
  int64_t shape[LOOM_MAX_RANK];
  st_ = parse_header(&p, &dt, &rank, shape);
  free(header);
  if (st_ != LOOM_STATUS_OK) return st_;

  /* Loom's shape limit (ir/graph.h) keeps numel * esize far from overflow. */
  int64_t esize = (int64_t)loom_dtype_size(dt), numel = 0;
  if (loom_shape_check(ctx, rank, shape, &numel)) {
    loom_error_prefix(ctx, "%s", path);
    return LOOM_STATUS_PARSE;
  }
  int64_t bytes = numel * esize;
  if (file_size >= 0 && file_size - prefix - (int64_t)hlen != bytes) {
    int64_t have = file_size - prefix - (int64_t)hlen;
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "%s: data is %lld bytes but the shape and dtype say "
                      "%lld (file %s)",
                      path, (long long)have, (long long)bytes,
                      have < bytes ? "truncated" : "has trailing bytes");
  }
  if ((uint64_t)bytes > (uint64_t)SIZE_MAX)
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY,
                      "%s: %lld bytes do not fit in memory", path,
                      (long long)bytes);

  loom_tensor *t = NULL;
  LOOM_TRY(loom_tensor_new(ctx, dt, rank, shape, &t));
  st_ = read_exact(ctx, f, path, loom_tensor_data(t), (size_t)bytes, "data");
  if (st_ == LOOM_STATUS_OK && file_size < 0 && fgetc(f) != EOF)
    st_ = loom_error(ctx, LOOM_STATUS_PARSE,
                     "%s: data is longer than the shape and dtype say", path);
  if (st_ != LOOM_STATUS_OK) {
    loom_tensor_free(t);
    return st_;
  }
  if (dt == LOOM_DTYPE_BOOL) {
    /* NumPy treats any nonzero byte as True; Loom's bools are 0 or 1. */
    uint8_t *b = loom_tensor_data(t);
    for (int64_t i = 0; i < numel; i++) b[i] = b[i] != 0;
  }
  *out = t;
  return LOOM_STATUS_OK;
}

loom_status loom_tensor_load_npy(loom_ctx *ctx, const char *path,
                                 loom_tensor **out) {
  if (out) *out = NULL;
  if (!ctx) return LOOM_STATUS_INVALID_ARGUMENT;
  if (!path || !out)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "load_npy: path and out must not be NULL");
  if (!host_is_little_endian())
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "%s: .npy reading needs a little-endian host", path);
  FILE *f = loom_file_open_read(ctx, path); /* regular files only */
  if (!f) return LOOM_STATUS_IO;
  loom_status s = load_from(ctx, f, path, out);
  fclose(f);
  return s;
}

/* ---- saving --------------------------------------------------------------- */

/* The header exactly as numpy.save writes it (format 1.0). */
static size_t build_header(const char *descr, const loom_view *v, char *buf,
                           size_t cap) {
  char shape[LOOM_MAX_RANK * 24 + 8];
  size_t k = 0;
  shape[k++] = '(';
  for (int32_t d = 0; d < v->rank; d++)
    k += (size_t)snprintf(shape + k, sizeof shape - k, d ? ", %lld" : "%lld",
                          (long long)v->shape[d]);
  if (v->rank == 1) shape[k++] = ',';
  shape[k++] = ')';
  shape[k] = '\0';

  size_t n = (size_t)snprintf(
      buf + 10, cap - 10, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
      descr, shape);
  if (v->rank > 0) {
    char first[24];
    int w = snprintf(first, sizeof first, "%lld", (long long)v->shape[0]);
    for (int i = w; i < NPY_GROWTH_DIGITS; i++) buf[10 + n++] = ' ';
  }
  size_t hlen = n + 1; /* with the final '\n' */
  size_t pad = NPY_ALIGN - ((NPY_MAGIC_LEN + 4 + hlen) % NPY_ALIGN);
  memset(buf + 10 + n, ' ', pad);
  n += pad;
  buf[10 + n++] = '\n';
  memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
  buf[6] = 1;
  buf[7] = 0;
  buf[8] = (char)(n & 0xff);
  buf[9] = (char)(n >> 8);
  return 10 + n;
}

loom_status loom_tensor_save_npy(loom_ctx *ctx, const loom_tensor *t,
                                 const char *path) {
  if (!ctx) return LOOM_STATUS_INVALID_ARGUMENT;
  if (!t || !path)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "save_npy: tensor and path must not be NULL");
  if (!host_is_little_endian())
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "%s: .npy writing needs a little-endian host", path);
  const loom_view *v = &t->v;
  const char *descr = NULL;
  for (size_t i = 0; i < sizeof npy_codes / sizeof npy_codes[0] && !descr; i++)
    if (npy_codes[i].dtype == v->dtype) descr = npy_codes[i].descr;
  if (v->dtype == LOOM_DTYPE_BF16)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "%s: bf16 has no NumPy dtype code; cast to f32 to save",
                      path);
  if (!descr)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "%s: tensor has an invalid dtype", path);
  if (v->rank < 0 || v->rank > LOOM_MAX_RANK)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "%s: tensor has an invalid rank %d", path, v->rank);

  char header[1024]; /* rank <= 8: a header is under 400 bytes */
  size_t hbytes = build_header(descr, v, header, sizeof header);

  /* Views that are not contiguous are packed first. */
  int64_t numel = loom_view_numel(v);
  size_t bytes = (size_t)numel * loom_dtype_size(v->dtype);
  const void *data = v->data;
  void *packed = NULL;
  if (numel > 0 && !loom_view_is_contiguous(v)) {
    packed = loom_malloc(ctx, bytes);
    if (!packed) return LOOM_STATUS_OUT_OF_MEMORY;
    loom_type ty = {.dtype = v->dtype, .rank = v->rank};
    memcpy(ty.shape, v->shape, sizeof ty.shape);
    loom_view dst = loom_view_of(&ty, packed);
    loom_view_copy(&dst, v);
    data = packed;
  }

  loom_file_writer w;
  loom_status s = loom_file_begin(ctx, path, LOOM_FILE_REPLACE, &w);
  if (!s) {
    bool ok = fwrite(header, 1, hbytes, w.f) == hbytes &&
              (bytes == 0 || fwrite(data, 1, bytes, w.f) == bytes);
    if (!ok) {
      s = loom_error(ctx, LOOM_STATUS_IO, "%s: write failed: %s", path, strerror(errno));
      loom_file_abort(&w);
    } else {
      s = loom_file_commit(ctx, &w);
    }
  }
  free(packed);
  return s;
}
