/*
 * safetensors files: an 8-byte little-endian header length N, N bytes of
 * JSON header {"name": {"dtype": "F32", "shape": [...], "data_offsets":
 * [begin, end]}, ..., "__metadata__": {"key": "value"}}, then the data
 * (offsets relative to its start). Loading checks everything (header
 * bounds, JSON, dtypes, shapes, offsets inside the data, no overlaps, no
 * holes) and never trusts the file. Saving goes through core/file.h (a
 * fresh temporary file, synced, renamed over a regular file only), so a
 * failed or concurrent save never leaves a half-written file at PATH, and
 * puts the SHA-256 of the data in the metadata (LOOM_SAFETENSORS_DIGEST_KEY,
 * 64 hex digits); loading checks it when it is there, so a damaged file is
 * refused. Files from other tools (no such key) load as before.
 */
#ifndef LOOM_IO_SAFETENSORS_H
#define LOOM_IO_SAFETENSORS_H

#include "core/ctx.h"
#include "core/strmap.h"

/* Headers larger than this are rejected (as in the reference reader). */
#define LOOM_SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u)
/* The metadata key of the data's SHA-256 (written by every save). */
#define LOOM_SAFETENSORS_DIGEST_KEY "loom.data_sha256"

/* One tensor. When loaded, data points into the file buffer and may be
 * unaligned: copy it out with memcpy. */
typedef struct loom_st_tensor {
  const char *name;
  loom_dtype dtype;
  int32_t rank;
  int64_t shape[LOOM_MAX_RANK];
  const void *data;
  size_t nbytes;
} loom_st_tensor;

/* A loaded file (owns the name strings, metadata and the file bytes). */
typedef struct loom_safetensors {
  int32_t n_tensors;
  loom_st_tensor *tensors; /* in file-header order */
  int32_t n_meta;
  char **meta_keys, **meta_values;
  uint8_t *bytes; /* the whole file */
  size_t size;
  loom_strmap by_name; /* tensor name -> index into tensors */
} loom_safetensors;

/* Reads and validates a file. */
loom_status loom_safetensors_load(loom_ctx *ctx, const char *path, loom_safetensors **out);
/* Validates a file image in memory (copied). */
loom_status loom_safetensors_parse(loom_ctx *ctx, const void *bytes, size_t size,
                                   loom_safetensors **out);
/* Frees a loaded file (NULL is fine). */
void loom_safetensors_free(loom_safetensors *st);
/* The tensor named name, NULL if none. */
const loom_st_tensor *loom_safetensors_find(const loom_safetensors *st, const char *name);
/* The metadata value for key, NULL if none. */
const char *loom_safetensors_meta(const loom_safetensors *st, const char *key);

/* Writes tensors (names unique, not "__metadata__") and string metadata
 * to path atomically (core/file.h; an existing regular, writable file is
 * replaced), with the data's digest added to the metadata. */
loom_status loom_safetensors_save(loom_ctx *ctx, const char *path, int32_t n,
                                  const loom_st_tensor *tensors, int32_t n_meta,
                                  const char *const *meta_keys, const char *const *meta_values);

/* The safetensors dtype name ("F32", ...) of a Loom dtype; NULL if none. */
const char *loom_safetensors_dtype_name(loom_dtype dt);

#endif
