/*
 * A protobuf wire-format reader (what src/onnx needs and nothing more).
 * Every read is bounded by the cursor's end; a length that runs past it, a
 * varint longer than 10 bytes or a reserved wire type is an error, never a
 * read outside the buffer. Messages are walked field by field.
 */
#ifndef LOOM_ONNX_PB_H
#define LOOM_ONNX_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct loom_pb {
  const uint8_t *p, *end;
} loom_pb;

enum { LOOM_PB_VARINT = 0, LOOM_PB_I64 = 1, LOOM_PB_LEN = 2, LOOM_PB_I32 = 5 };

/* One field: its number, wire type, and either its scalar (varint, or the
 * fixed 32/64 bits) or its bytes (LEN: sub holds them). */
typedef struct loom_pb_field {
  uint32_t num;
  int wire;
  uint64_t u;
  loom_pb sub;
} loom_pb_field;

static inline loom_pb loom_pb_make(const void *p, size_t n) {
  loom_pb c = {(const uint8_t *)p, (const uint8_t *)p + n};
  return c;
}
static inline bool loom_pb_done(const loom_pb *c) { return c->p >= c->end; }
static inline size_t loom_pb_len(const loom_pb *c) { return (size_t)(c->end - c->p); }

/* Reads a varint; false when truncated or longer than 10 bytes. */
bool loom_pb_varint(loom_pb *c, uint64_t *out);
/* Reads the next field; false on malformed bytes (then *err names why). */
bool loom_pb_next(loom_pb *c, loom_pb_field *f, const char **err);

/* Repeated scalars come packed (one LEN field) or one field each. These
 * count and read the elements of one field occurrence f: a varint field
 * (wire VARINT, or LEN packed), a float (I32 or packed) or a double (I64
 * or packed). False on malformed packed bytes. */
bool loom_pb_count_varints(const loom_pb_field *f, size_t *n);
bool loom_pb_read_varints(const loom_pb_field *f, int64_t *out, size_t *n);
bool loom_pb_count_fixed(const loom_pb_field *f, int size, size_t *n);
bool loom_pb_read_floats(const loom_pb_field *f, float *out, size_t *n);
bool loom_pb_read_doubles(const loom_pb_field *f, double *out, size_t *n);

#endif
