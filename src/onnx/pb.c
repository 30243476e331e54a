/* The protobuf wire-format reader (pb.h). */
#include "onnx/pb.h"

#include <string.h>

bool loom_pb_varint(loom_pb *c, uint64_t *out) {
  uint64_t v = 0;
  for (int i = 0; i < 10; i++) {
    if (c->p >= c->end) return false;
    uint8_t b = *c->p++;
    v |= (uint64_t)(b & 0x7f) << (7 * i);
    if (!(b & 0x80)) {
      *out = v;
      return true;
    }
  }
  return false;
}

bool loom_pb_next(loom_pb *c, loom_pb_field *f, const char **err) {
  uint64_t key;
  *err = "truncated field key";
  if (!loom_pb_varint(c, &key)) return false;
  if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
    *err = "bad field number";
    return false;
  }
  f->num = (uint32_t)(key >> 3);
  f->wire = (int)(key & 7);
  f->u = 0;
  f->sub = loom_pb_make(c->p, 0);
  switch (f->wire) {
  case LOOM_PB_VARINT:
    *err = "truncated varint";
    return loom_pb_varint(c, &f->u);
  case LOOM_PB_I64:
  case LOOM_PB_I32: {
    size_t n = f->wire == LOOM_PB_I64 ? 8 : 4;
    *err = "truncated fixed-size field";
    if (loom_pb_len(c) < n) return false;
    for (size_t i = 0; i < n; i++) f->u |= (uint64_t)c->p[i] << (8 * i);
    c->p += n;
    return true;
  }
  case LOOM_PB_LEN: {
    uint64_t n;
    *err = "truncated length";
    if (!loom_pb_varint(c, &n)) return false;
    *err = "length past the end of the data";
    if (n > loom_pb_len(c)) return false;
    f->sub = loom_pb_make(c->p, (size_t)n);
    c->p += n;
    return true;
  }
  default:
    *err = "unsupported wire type (groups or reserved)";
    return false;
  }
}

bool loom_pb_count_varints(const loom_pb_field *f, size_t *n) {
  if (f->wire == LOOM_PB_VARINT) {
    *n = 1;
    return true;
  }
  if (f->wire != LOOM_PB_LEN) return false;
  size_t k = 0;
  for (const uint8_t *p = f->sub.p; p < f->sub.end; p++) k += !(*p & 0x80);
  /* a packed run must end on a varint's last byte */
  if (f->sub.end > f->sub.p && (f->sub.end[-1] & 0x80)) return false;
  *n = k;
  return true;
}

bool loom_pb_read_varints(const loom_pb_field *f, int64_t *out, size_t *n) {
  if (f->wire == LOOM_PB_VARINT) {
    out[0] = (int64_t)f->u;
    *n = 1;
    return true;
  }
  loom_pb c = f->sub;
  size_t k = 0;
  uint64_t v;
  while (!loom_pb_done(&c)) {
    if (!loom_pb_varint(&c, &v)) return false;
    out[k++] = (int64_t)v;
  }
  *n = k;
  return true;
}

bool loom_pb_count_fixed(const loom_pb_field *f, int size, size_t *n) {
  if (f->wire == (size == 4 ? LOOM_PB_I32 : LOOM_PB_I64)) {
    *n = 1;
    return true;
  }
  if (f->wire != LOOM_PB_LEN || loom_pb_len(&f->sub) % (size_t)size) return false;
  *n = loom_pb_len(&f->sub) / (size_t)size;
  return true;
}

bool loom_pb_read_floats(const loom_pb_field *f, float *out, size_t *n) {
  if (f->wire == LOOM_PB_I32) {
    uint32_t b = (uint32_t)f->u;
    memcpy(out, &b, 4);
    *n = 1;
    return true;
  }
  if (!loom_pb_count_fixed(f, 4, n)) return false;
  for (size_t i = 0; i < *n; i++) {
    const uint8_t *p = f->sub.p + 4 * i;
    uint32_t b = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    memcpy(&out[i], &b, 4);
  }
  return true;
}

bool loom_pb_read_doubles(const loom_pb_field *f, double *out, size_t *n) {
  if (f->wire == LOOM_PB_I64) {
    memcpy(out, &f->u, 8);
    *n = 1;
    return true;
  }
  if (!loom_pb_count_fixed(f, 8, n)) return false;
  for (size_t i = 0; i < *n; i++) {
    uint64_t b = 0;
    for (int k = 0; k < 8; k++) b |= (uint64_t)f->sub.p[8 * i + k] << (8 * k);
    memcpy(&out[i], &b, 8);
  }
  return true;
}
