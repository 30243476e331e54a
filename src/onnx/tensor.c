#define _XOPEN_SOURCE 700 /* realpath */
/* ONNX TensorProto to Loom tensors: raw_data, the typed fields, or
 * external data in a file beside the model. */
#include "onnx/model.h"

#include "core/checked.h"
#include "core/file.h"
#include "ir/dtype.h"
#include "ir/graph.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool onnx_dtype_to_loom(int32_t dt, loom_dtype *out) {
  switch (dt) {
  case ONNX_FLOAT: *out = LOOM_DTYPE_F32; return true;
  case ONNX_DOUBLE: *out = LOOM_DTYPE_F64; return true;
  case ONNX_FLOAT16: *out = LOOM_DTYPE_F16; return true;
  case ONNX_BFLOAT16: *out = LOOM_DTYPE_BF16; return true;
  case ONNX_INT32: *out = LOOM_DTYPE_I32; return true;
  case ONNX_INT64: *out = LOOM_DTYPE_I64; return true;
  case ONNX_BOOL: *out = LOOM_DTYPE_BOOL; return true;
  case ONNX_UINT8: *out = LOOM_DTYPE_U8; return true;
  default: return false;
  }
}

/* A relative path that stays inside the model's folder: no absolute path,
 * no "..", and (symlinks resolved) still under the folder. */
static loom_status external_path(loom_ctx *ctx, const onnx_model *m, const char *loc,
                                 char **out) {
  *out = NULL;
  if (!m->dir)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "ONNX: external data '%s' but the model has no folder", loc);
  if (!loc[0] || loc[0] == '/' || strstr(loc, "..") || loom_has_control_bytes(loc))
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "ONNX: external data path '%s' leaves the model's folder", loc);
  size_t n = strlen(m->dir) + strlen(loc) + 2;
  char *p = loom_malloc(ctx, n);
  if (!p) return LOOM_STATUS_OUT_OF_MEMORY;
  snprintf(p, n, "%s/%s", m->dir, loc);
  char *rd = realpath(m->dir, NULL), *rp = realpath(p, NULL);
  loom_status st = LOOM_STATUS_OK;
  if (!rd || !rp) {
    st = loom_error(ctx, LOOM_STATUS_IO, "ONNX: external data '%s': %s", loc, strerror(errno));
  } else {
    size_t k = strlen(rd);
    if (strncmp(rp, rd, k) != 0 || (rp[k] != '/' && strcmp(rd, "/") != 0))
      st = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "ONNX: external data path '%s' leaves the model's folder", loc);
  }
  free(rd);
  free(rp);
  if (st) {
    free(p);
    return st;
  }
  *out = p;
  return LOOM_STATUS_OK;
}

static bool parse_u64(const char *s, uint64_t *v) {
  if (!s[0]) return false;
  uint64_t x = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || x > (UINT64_MAX - 9) / 10) return false;
    x = x * 10 + (uint64_t)(*s - '0');
  }
  *v = x;
  return true;
}

/* dst NULL: only checks that the file holds the bytes. */
static loom_status read_external(loom_ctx *ctx, const onnx_model *m, const onnx_tensor *t,
                                 void *dst, size_t bytes) {
  const char *loc = NULL;
  uint64_t offset = 0, length = bytes;
  bool has_len = false;
  for (int32_t i = 0; i < t->n_external; i++) {
    const onnx_kv *kv = &t->external[i];
    if (strcmp(kv->key, "location") == 0) loc = kv->value;
    else if (strcmp(kv->key, "offset") == 0 && !parse_u64(kv->value, &offset))
      return loom_error(ctx, LOOM_STATUS_PARSE, "ONNX: tensor '%s': bad external offset", t->name);
    else if (strcmp(kv->key, "length") == 0) {
      if (!parse_u64(kv->value, &length))
        return loom_error(ctx, LOOM_STATUS_PARSE, "ONNX: tensor '%s': bad external length", t->name);
      has_len = true;
    }
  }
  if (!loc) return loom_error(ctx, LOOM_STATUS_PARSE, "ONNX: tensor '%s': external data without a location", t->name);
  if (has_len && length != bytes)
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "ONNX: tensor '%s': external length %llu, but its shape needs %zu bytes",
                      t->name, (unsigned long long)length, bytes);
  char *path = NULL;
  LOOM_TRY(external_path(ctx, m, loc, &path));
  FILE *f = loom_file_open_read(ctx, path);
  loom_status st = LOOM_STATUS_OK;
  if (!f) {
    st = LOOM_STATUS_IO;
  } else {
    if (fseeko(f, 0, SEEK_END) != 0) st = loom_error(ctx, LOOM_STATUS_IO, "ONNX: cannot seek in '%s'", loc);
    off_t size = st ? 0 : ftello(f);
    if (!st && (size < 0 || offset > (uint64_t)size || bytes > (uint64_t)size - offset))
      st = loom_error(ctx, LOOM_STATUS_PARSE,
                      "ONNX: tensor '%s': external data past the end of '%s'", t->name, loc);
    if (!st && dst && bytes &&
        (fseeko(f, (off_t)offset, SEEK_SET) != 0 || fread(dst, 1, bytes, f) != bytes))
      st = loom_error(ctx, LOOM_STATUS_IO, "ONNX: cannot read '%s'", loc);
    fclose(f);
  }
  free(path);
  return st;
}

static loom_status check_external(loom_ctx *ctx, const onnx_model *m, const onnx_tensor *t,
                                  size_t bytes) {
  return read_external(ctx, m, t, NULL, bytes);
}

loom_status onnx_tensor_to_loom(loom_ctx *ctx, const onnx_model *m, const onnx_tensor *t,
                                loom_tensor **out) {
  *out = NULL;
  loom_dtype dt;
  if (!onnx_dtype_to_loom(t->data_type, &dt))
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "ONNX: tensor '%s': element type %s (%d) is unsupported",
                      t->name, onnx_dtype_name(t->data_type), (int)t->data_type);
  if (t->n_dims > LOOM_MAX_RANK)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "ONNX: tensor '%s': rank %d is over Loom's %d",
                      t->name, (int)t->n_dims, LOOM_MAX_RANK);
  if (t->segmented)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED, "ONNX: tensor '%s': segments are unsupported", t->name);
  int64_t numel = 0;
  loom_status st = loom_shape_check(ctx, t->n_dims, t->dims, &numel);
  if (st) {
    loom_error_prefix(ctx, "ONNX: tensor '%s'", t->name);
    return st;
  }
  for (int32_t d = 0; d < t->n_dims; d++)
    if (t->dims[d] == 0) numel = 0;
  size_t esize = loom_dtype_size(dt), bytes = (size_t)numel * esize;
  bool external = t->data_location == 1 || t->n_external > 0;
  /* the source holds the bytes the shape needs, checked before allocating
   * (a crafted shape must not make a huge allocation) */
  size_t have = 0;
  switch (t->data_type) {
  case ONNX_FLOAT: have = t->n_float; break;
  case ONNX_DOUBLE: have = t->n_double; break;
  case ONNX_INT64: have = t->n_i64; break;
  default: have = t->n_i32; break;
  }
  if (external) {
    LOOM_TRY(check_external(ctx, m, t, bytes));
  } else if (t->has_raw && t->raw.n != bytes) {
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "ONNX: tensor '%s': raw_data holds %zu bytes, its shape needs %zu", t->name,
                      t->raw.n, bytes);
  } else if (!t->has_raw && have != (size_t)numel) {
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "ONNX: tensor '%s' holds %zu values, its shape needs %lld", t->name, have,
                      (long long)numel);
  }
  LOOM_TRY(loom_tensor_new(ctx, dt, t->n_dims, t->dims, out));
  void *dst = loom_tensor_data(*out);
  if (external) {
    st = read_external(ctx, m, t, dst, bytes);
  } else if (t->has_raw) {
    if (bytes) memcpy(dst, t->raw.p, bytes);
    if (dt == LOOM_DTYPE_BOOL)
      for (size_t i = 0; i < bytes; i++) ((uint8_t *)dst)[i] = ((uint8_t *)dst)[i] != 0;
  } else {
    {
      for (int64_t i = 0; i < numel; i++) {
        switch (t->data_type) {
        case ONNX_FLOAT: ((float *)dst)[i] = t->float_data[i]; break;
        case ONNX_DOUBLE: ((double *)dst)[i] = t->double_data[i]; break;
        case ONNX_INT64: ((int64_t *)dst)[i] = t->i64_data[i]; break;
        case ONNX_INT32: ((int32_t *)dst)[i] = (int32_t)t->i32_data[i]; break;
        case ONNX_FLOAT16:
        case ONNX_BFLOAT16: ((uint16_t *)dst)[i] = (uint16_t)t->i32_data[i]; break;
        case ONNX_BOOL: ((uint8_t *)dst)[i] = t->i32_data[i] != 0; break;
        case ONNX_UINT8: ((uint8_t *)dst)[i] = (uint8_t)t->i32_data[i]; break;
        }
      }
    }
  }
  if (st) {
    loom_tensor_free(*out);
    *out = NULL;
  }
  return st;
}
