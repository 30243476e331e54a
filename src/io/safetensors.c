#include "io/safetensors.h"

#include "core/file.h"
#include "core/sha256.h"
#include "io/json.h"
#include "ir/graph.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name;
  loom_dtype dt;
} st_dtypes[] = {
    {"F32", LOOM_DTYPE_F32},   {"F64", LOOM_DTYPE_F64}, {"F16", LOOM_DTYPE_F16},
    {"BF16", LOOM_DTYPE_BF16}, {"I32", LOOM_DTYPE_I32}, {"I64", LOOM_DTYPE_I64},
    {"BOOL", LOOM_DTYPE_BOOL}, {"U8", LOOM_DTYPE_U8},
};

const char *loom_safetensors_dtype_name(loom_dtype dt) {
  for (int32_t i = 0; i < LOOM_ARRAY_LEN(st_dtypes); i++)
    if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
  return NULL;
}

/* The data is stored little-endian; Loom keeps host order in memory. */
static bool host_is_little_endian(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 1;
}

void loom_safetensors_free(loom_safetensors *st) {
  if (!st) return;
  for (int32_t i = 0; i < st->n_tensors; i++)
    free((char *)st->tensors[i].name);
  for (int32_t i = 0; i < st->n_meta; i++) {
    free(st->meta_keys[i]);
    free(st->meta_values[i]);
  }
  free(st->tensors);
  free(st->meta_keys);
  free(st->meta_values);
  free(st->bytes);
  loom_strmap_free(&st->by_name);
  free(st);
}

const loom_st_tensor *loom_safetensors_find(const loom_safetensors *st, const char *name) {
  if (!st || !name) return NULL;
  int32_t i = loom_strmap_get(&st->by_name, name, strlen(name));
  return i >= 0 ? &st->tensors[i] : NULL;
}

const char *loom_safetensors_meta(const loom_safetensors *st, const char *key) {
  if (!st || !key) return NULL;
  for (int32_t i = 0; i < st->n_meta; i++)
    if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
  return NULL;
}

/* ---- loading ------------------------------------------------------------ */

static loom_status parse_metadata(loom_ctx *ctx, const loom_json *m, loom_safetensors *st) {
  if (m->kind != LOOM_JSON_OBJECT)
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "safetensors: __metadata__ must be an object, got a %s",
                      loom_json_kind_name(m->kind));
  if (m->n == 0) return LOOM_STATUS_OK;
  st->meta_keys = calloc((size_t)m->n, sizeof *st->meta_keys);
  st->meta_values = calloc((size_t)m->n, sizeof *st->meta_values);
  if (!st->meta_keys || !st->meta_values)
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "safetensors: out of memory");
  for (int32_t i = 0; i < m->n; i++) {
    if (m->items[i].kind != LOOM_JSON_STRING)
      return loom_error(ctx, LOOM_STATUS_PARSE,
                        "safetensors: metadata value of '%s' must be a string, got a %s",
                        m->keys[i], loom_json_kind_name(m->items[i].kind));
    st->meta_keys[i] = loom_strdup(ctx, m->keys[i]);
    st->meta_values[i] = loom_strdup(ctx, m->items[i].str);
    if (!st->meta_keys[i] || !st->meta_values[i]) {
      free(st->meta_keys[i]);
      free(st->meta_values[i]);
      return LOOM_STATUS_OUT_OF_MEMORY;
    }
    st->n_meta++;
  }
  return LOOM_STATUS_OK;
}

/* A non-negative integer JSON number. */
static bool json_uint(const loom_json *j, int64_t *out) {
  if (j->kind != LOOM_JSON_NUMBER || !j->is_int || j->i < 0) return false;
  *out = j->i;
  return true;
}

/* Parses one tensor entry; its offsets into begin/end. */
static loom_status parse_entry(loom_ctx *ctx, const char *name, const loom_json *e,
                               size_t data_size, loom_st_tensor *t, int64_t *begin, int64_t *end) {
  if (e->kind != LOOM_JSON_OBJECT)
    return loom_error(ctx, LOOM_STATUS_PARSE, "safetensors: entry '%s' must be an object, got a %s",
                      name, loom_json_kind_name(e->kind));
  for (int32_t k = 0; k < e->n; k++)
    if (strcmp(e->keys[k], "dtype") && strcmp(e->keys[k], "shape") &&
        strcmp(e->keys[k], "data_offsets"))
      return loom_error(ctx, LOOM_STATUS_PARSE, "safetensors: entry '%s' has an unknown field '%s'",
                        name, e->keys[k]);
  const loom_json *dt = loom_json_get(e, "dtype"), *sh = loom_json_get(e, "shape");
  const loom_json *off = loom_json_get(e, "data_offsets");
  if (!dt || !sh || !off)
    return loom_error(ctx, LOOM_STATUS_PARSE, "safetensors: entry '%s' lacks '%s'", name,
                      !dt   ? "dtype"
                      : !sh ? "shape"
                            : "data_offsets");
  if (dt->kind != LOOM_JSON_STRING)
    return loom_error(ctx, LOOM_STATUS_PARSE, "safetensors: dtype of '%s' must be a string", name);
  bool found = false;
  for (int32_t i = 0; i < LOOM_ARRAY_LEN(st_dtypes); i++)
    if (strcmp(dt->str, st_dtypes[i].name) == 0) {
      t->dtype = st_dtypes[i].dt;
      found = true;
    }
  if (!found)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "safetensors: tensor '%s' has dtype '%s', which Loom does not support", name,
                      dt->str);
  if (sh->kind != LOOM_JSON_ARRAY)
    return loom_error(ctx, LOOM_STATUS_PARSE, "safetensors: shape of '%s' must be an array", name);
  if (sh->n > LOOM_MAX_RANK)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "safetensors: tensor '%s' has rank %d, more than Loom's %d", name, sh->n,
                      LOOM_MAX_RANK);
  t->rank = sh->n;
  for (int32_t d = 0; d < sh->n; d++)
    if (!json_uint(&sh->items[d], &t->shape[d]))
      return loom_error(ctx, LOOM_STATUS_PARSE,
                        "safetensors: shape of '%s' must hold non-negative integers", name);
  /* Loom's limit on shapes keeps numel * dtype size far from overflow. */
  int64_t numel = 0;
  if (loom_shape_check(ctx, t->rank, t->shape, &numel)) {
    loom_error_prefix(ctx, "safetensors: tensor '%s'", name);
    return LOOM_STATUS_SHAPE_MISMATCH;
  }
  if (off->kind != LOOM_JSON_ARRAY || off->n != 2 || !json_uint(&off->items[0], begin) ||
      !json_uint(&off->items[1], end))
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "safetensors: data_offsets of '%s' must be [begin, end] with "
                      "non-negative integers",
                      name);
  if (*begin > *end)
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "safetensors: data_offsets of '%s' are reversed: [%lld, %lld]", name,
                      (long long)*begin, (long long)*end);
  if ((uint64_t)*end > data_size)
    return loom_error(ctx, LOOM_STATUS_OUT_OF_RANGE,
                      "safetensors: data_offsets of '%s' [%lld, %lld] lie outside the "
                      "%zu data bytes",
                      name, (long long)*begin, (long long)*end, data_size);
  uint64_t want = (uint64_t)numel * loom_dtype_size(t->dtype);
  if (want != (uint64_t)(*end - *begin))
    return loom_error(ctx, LOOM_STATUS_SHAPE_MISMATCH,
                      "safetensors: tensor '%s' needs %llu bytes for its dtype and shape, "
                      "but data_offsets give %lld",
                      name, (unsigned long long)want, (long long)(*end - *begin));
  t->nbytes = (size_t)want;
  return LOOM_STATUS_OK;
}

typedef struct span {
  int64_t begin, end;
  int32_t idx;
} span;

static int span_cmp(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->idx - y->idx;
}

/* Offsets must tile the data exactly: no overlap, no hole, no tail. */
static loom_status check_spans(loom_ctx *ctx, span *sp, int32_t n, const loom_safetensors *st,
                               size_t data_size) {
  if (n > 1) qsort(sp, (size_t)n, sizeof *sp, span_cmp);
  int64_t at = 0;
  for (int32_t i = 0; i < n; i++) {
    if (sp[i].begin < at)
      return loom_error(ctx, LOOM_STATUS_PARSE,
                        "safetensors: tensors '%s' and '%s' overlap in the data",
                        st->tensors[sp[i - 1].idx].name, st->tensors[sp[i].idx].name);
    if (sp[i].begin > at)
      return loom_error(ctx, LOOM_STATUS_PARSE,
                        "safetensors: data bytes [%lld, %lld) belong to no tensor", (long long)at,
                        (long long)sp[i].begin);
    at = sp[i].end;
  }
  if ((uint64_t)at != data_size)
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "safetensors: %lld data bytes after the last tensor belong to no tensor",
                      (long long)(data_size - (uint64_t)at));
  return LOOM_STATUS_OK;
}

static void digest_hex(const uint8_t d[32], char hex[65]) {
  for (int k = 0; k < 32; k++)
    snprintf(hex + 2 * k, 3, "%02x", d[k]);
}

/* A file that says what its data hashes to must hash to it: a torn or
 * altered file is found here, not used. Files without the key pass. */
static loom_status check_digest(loom_ctx *ctx, const loom_safetensors *st, const uint8_t *data,
                                size_t n) {
  const char *want = loom_safetensors_meta(st, LOOM_SAFETENSORS_DIGEST_KEY);
  if (!want) return LOOM_STATUS_OK;
  uint8_t d[32];
  char got[65];
  loom_sha256(data, n, d);
  digest_hex(d, got);
  if (strcmp(want, got) != 0)
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "safetensors: the data does not match its checksum (%s %.16s..., data "
                      "hashes to %.16s...): the file is damaged",
                      LOOM_SAFETENSORS_DIGEST_KEY, want, got);
  return LOOM_STATUS_OK;
}

static loom_status parse_header(loom_ctx *ctx, loom_safetensors *st) {
  if (st->size < 8)
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "safetensors: file has %zu bytes, too few for the 8-byte header length",
                      st->size);
  uint64_t hlen = 0;
  for (int k = 7; k >= 0; k--)
    hlen = (hlen << 8) | st->bytes[k];
  if (hlen > LOOM_SAFETENSORS_MAX_HEADER)
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "safetensors: header length %llu exceeds the limit of %u bytes",
                      (unsigned long long)hlen, LOOM_SAFETENSORS_MAX_HEADER);
  if (hlen > st->size - 8)
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "safetensors: header length %llu is larger than the %zu bytes "
                      "after it (truncated file?)",
                      (unsigned long long)hlen, st->size - 8);
  const char *text = (const char *)st->bytes + 8;
  if (hlen == 0 || text[0] != '{')
    return loom_error(ctx, LOOM_STATUS_PARSE, "safetensors: header must start with '{'");
  loom_json *h = NULL;
  loom_status s = loom_json_parse(ctx, text, (size_t)hlen, &h);
  if (s) {
    loom_error_prefix(ctx, "safetensors header");
    return s;
  }
  size_t data_off = 8 + (size_t)hlen, data_size = st->size - data_off;
  span *sp = NULL;
  if (h->n) {
    st->tensors = calloc((size_t)h->n, sizeof *st->tensors);
    sp = calloc((size_t)h->n, sizeof *sp);
    if (!st->tensors || !sp) {
      s = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "safetensors: out of memory");
      goto done;
    }
  }
  for (int32_t i = 0; i < h->n; i++) {
    const char *name = h->keys[i];
    if (strcmp(name, "__metadata__") == 0) {
      if ((s = parse_metadata(ctx, &h->items[i], st))) goto done;
      continue;
    }
    loom_st_tensor *t = &st->tensors[st->n_tensors];
    int64_t b = 0, e = 0;
    if ((s = parse_entry(ctx, name, &h->items[i], data_size, t, &b, &e))) goto done;
    t->name = loom_strdup(ctx, name);
    if (!t->name || !loom_strmap_put(&st->by_name, name, strlen(name), st->n_tensors)) {
      free((char *)t->name);
      t->name = NULL;
      s = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "safetensors: out of memory");
      goto done;
    }
    t->data = st->bytes + data_off + b;
    sp[st->n_tensors] = (span){b, e, st->n_tensors};
    st->n_tensors++;
  }
  s = check_spans(ctx, sp, st->n_tensors, st, data_size);
  if (!s) s = check_digest(ctx, st, st->bytes + data_off, data_size);
done:
  free(sp);
  loom_json_free(h);
  return s;
}

loom_status loom_safetensors_parse(loom_ctx *ctx, const void *bytes, size_t size,
                                   loom_safetensors **out) {
  if (!out || (!bytes && size))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "safetensors_parse: NULL argument");
  *out = NULL;
  if (!host_is_little_endian())
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "safetensors: big-endian hosts are not supported");
  loom_safetensors *st = loom_calloc(ctx, 1, sizeof *st);
  if (!st) return LOOM_STATUS_OUT_OF_MEMORY;
  st->bytes = loom_malloc(ctx, size ? size : 1);
  if (!st->bytes) {
    free(st);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  if (size) memcpy(st->bytes, bytes, size);
  st->size = size;
  loom_status s = parse_header(ctx, st);
  if (s) {
    loom_safetensors_free(st);
    return s;
  }
  *out = st;
  return LOOM_STATUS_OK;
}

loom_status loom_safetensors_load(loom_ctx *ctx, const char *path, loom_safetensors **out) {
  if (!out || !path)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "safetensors_load: NULL argument");
  *out = NULL;
  char *buf = NULL;
  size_t size = 0;
  /* regular files only: a FIFO or /dev/zero is refused, not read forever */
  LOOM_TRY(loom_file_read(ctx, path, SIZE_MAX / 2, &buf, &size));
  loom_status s = loom_safetensors_parse(ctx, buf, size, out);
  if (s) loom_error_prefix(ctx, "%s", path);
  free(buf);
  return s;
}

/* ---- saving ------------------------------------------------------------- */

/* The first name (of n, name_at(i); NULL ones skipped) seen twice, or NULL;
 * *oom on running out of memory. */
static const char *first_duplicate(int32_t n, const char *(*name_at)(const void *, int32_t),
                                   const void *arr, bool *oom) {
  loom_strmap seen = {0};
  const char *dup = NULL;
  *oom = false;
  for (int32_t i = 0; i < n && !dup && !*oom; i++) {
    const char *nm = name_at(arr, i);
    if (!nm) continue;
    size_t len = strlen(nm);
    if (loom_strmap_get(&seen, nm, len) >= 0)
      dup = nm;
    else
      *oom = !loom_strmap_put(&seen, nm, len, i);
  }
  loom_strmap_free(&seen);
  return dup;
}

static const char *meta_key_at(const void *arr, int32_t i) {
  return ((const char *const *)arr)[i];
}

static const char *tensor_name_at(const void *arr, int32_t i) {
  return ((const loom_st_tensor *)arr)[i].name;
}

/* Names and keys must be unique: checked with a hash, not pair by pair. */
static loom_status check_unique(loom_ctx *ctx, int32_t n, const loom_st_tensor *ts, int32_t n_meta,
                                const char *const *keys) {
  bool oom = false;
  const char *dup = n_meta > 0 ? first_duplicate(n_meta, meta_key_at, keys, &oom) : NULL;
  if (dup)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "safetensors_save: duplicate metadata key '%s'", dup);
  if (!oom && n > 0) dup = first_duplicate(n, tensor_name_at, ts, &oom);
  if (oom) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "safetensors_save: out of memory");
  if (dup)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "safetensors_save: duplicate tensor name '%s'", dup);
  return LOOM_STATUS_OK;
}

static loom_status build_header(loom_ctx *ctx, int32_t n, const loom_st_tensor *ts, int32_t n_meta,
                                const char *const *keys, const char *const *values, loom_jbuf *b) {
  LOOM_TRY(check_unique(ctx, n, ts, n_meta, keys));
  loom_jbuf_append(b, "{", 1);
  if (n_meta > 0) {
    loom_jbuf_append(b, "\"__metadata__\":{", 16);
    for (int32_t i = 0; i < n_meta; i++) {
      if (!keys[i] || !values[i])
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "safetensors_save: metadata %d is NULL", i);
      if (strcmp(keys[i], LOOM_SAFETENSORS_DIGEST_KEY) == 0)
        return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                          "safetensors_save: metadata key '%s' is written by the saver", keys[i]);
      if (i) loom_jbuf_append(b, ",", 1);
      loom_jbuf_string(b, keys[i]);
      loom_jbuf_append(b, ":", 1);
      loom_jbuf_string(b, values[i]);
    }
  }
  /* the digest of the data, last in the metadata */
  loom_sha256_state sh;
  loom_sha256_init(&sh);
  for (int32_t i = 0; i < n; i++)
    if (ts[i].nbytes && ts[i].data) loom_sha256_update(&sh, ts[i].data, ts[i].nbytes);
  uint8_t d[32];
  char hex[65];
  loom_sha256_final(&sh, d);
  digest_hex(d, hex);
  loom_jbuf_append(b, n_meta > 0 ? "," : "\"__metadata__\":{", n_meta > 0 ? 1 : 16);
  loom_jbuf_string(b, LOOM_SAFETENSORS_DIGEST_KEY);
  loom_jbuf_append(b, ":", 1);
  loom_jbuf_string(b, hex);
  loom_jbuf_append(b, "}", 1);
  uint64_t at = 0;
  for (int32_t i = 0; i < n; i++) {
    const loom_st_tensor *t = &ts[i];
    const char *dn = loom_safetensors_dtype_name(t->dtype);
    if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0)
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "safetensors_save: tensor %d has an invalid name", i);
    if (!dn)
      return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                        "safetensors_save: tensor '%s' has an unsupported dtype", t->name);
    int64_t numel = 0;
    if (loom_shape_check(ctx, t->rank, t->shape, &numel)) {
      loom_error_prefix(ctx, "safetensors_save: tensor '%s'", t->name);
      return LOOM_STATUS_INVALID_ARGUMENT;
    }
    if ((uint64_t)numel * loom_dtype_size(t->dtype) != t->nbytes || (t->nbytes && !t->data))
      return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                        "safetensors_save: tensor '%s' has %zu bytes, which do not match "
                        "its dtype and shape",
                        t->name, t->nbytes);
    loom_jbuf_append(b, ",", 1); /* after the metadata */
    loom_jbuf_string(b, t->name);
    loom_jbuf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", dn);
    for (int32_t d = 0; d < t->rank; d++)
      loom_jbuf_printf(b, d ? ",%lld" : "%lld", (long long)t->shape[d]);
    loom_jbuf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                     (unsigned long long)(at + t->nbytes));
    at += t->nbytes;
  }
  loom_jbuf_append(b, "}", 1);
  /* pad with spaces so the data starts 8-byte aligned */
  while ((8 + b->len) % 8)
    loom_jbuf_append(b, " ", 1);
  if (!b->ok) return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "safetensors_save: out of memory");
  return LOOM_STATUS_OK;
}

static loom_status write_all(loom_ctx *ctx, FILE *f, const void *p, size_t n, const char *path) {
  if (n && fwrite(p, 1, n, f) != n)
    return loom_error(ctx, LOOM_STATUS_IO, "cannot write '%s': %s", path, strerror(errno));
  return LOOM_STATUS_OK;
}

loom_status loom_safetensors_save(loom_ctx *ctx, const char *path, int32_t n,
                                  const loom_st_tensor *tensors, int32_t n_meta,
                                  const char *const *meta_keys, const char *const *meta_values) {
  if (!path || n < 0 || (n && !tensors) || n_meta < 0 || (n_meta && (!meta_keys || !meta_values)))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "safetensors_save: bad argument");
  if (!host_is_little_endian())
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "safetensors: big-endian hosts are not supported");
  loom_jbuf hb;
  loom_jbuf_init(&hb);
  loom_status s = build_header(ctx, n, tensors, n_meta, meta_keys, meta_values, &hb);
  loom_file_writer w;
  if (!s) s = loom_file_begin(ctx, path, LOOM_FILE_REPLACE, &w);
  if (s) {
    loom_jbuf_free(&hb);
    return s;
  }
  uint8_t len8[8];
  uint64_t hl = hb.len;
  for (int k = 0; k < 8; k++)
    len8[k] = (uint8_t)(hl >> (8 * k));
  s = write_all(ctx, w.f, len8, 8, path);
  if (!s) s = write_all(ctx, w.f, hb.data, hb.len, path);
  for (int32_t i = 0; !s && i < n; i++)
    s = write_all(ctx, w.f, tensors[i].data, tensors[i].nbytes, path);
  if (s)
    loom_file_abort(&w);
  else
    s = loom_file_commit(ctx, &w);
  loom_jbuf_free(&hb);
  return s;
}
