// libFuzzer target over the safetensors reader (loom_safetensors_parse).
// Properties: no crash or sanitizer report on any bytes; a rejected input
// leaves a message and no result; an accepted one has every tensor's data
// inside the file's data section, numel * dtype-size bytes long, and every
// tensor name and metadata key found by lookup. Built by `make fuzz`
// (clang, libFuzzer); replayed over tests/fuzz/corpus/safetensors by
// `make test` (tests/fuzz/replay.c).
#include "io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_safetensors: %s: %s\n", what, detail);
  __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx && loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 0;
  loom_safetensors *st = NULL;
  loom_status s = loom_safetensors_parse(ctx, data, size, &st);
  if (s != LOOM_STATUS_OK) {
    if (st) fail("a failed parse returned a file", loom_ctx_error(ctx));
    if (!loom_ctx_error(ctx)[0]) fail("error without a message", "");
    return 0;
  }
  if (st->size != size || size < 8) fail("accepted a file shorter than its header length", "");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
  if (hlen > size - 8) fail("header length past the end", "");
  const uint8_t *begin = st->bytes + 8 + hlen, *end = st->bytes + st->size;
  for (int32_t i = 0; i < st->n_tensors; i++) {
    const loom_st_tensor *t = &st->tensors[i];
    int64_t numel = 1;
    for (int32_t d = 0; d < t->rank; d++) numel *= t->shape[d];
    if (t->nbytes != (size_t)numel * loom_dtype_size(t->dtype)) fail("size differs", t->name);
    const uint8_t *p = t->data;
    if (t->nbytes && (p < begin || p > end || (size_t)(end - p) < t->nbytes))
      fail("data outside the file's data section", t->name);
    if (loom_safetensors_find(st, t->name) != t) fail("find misses", t->name);
  }
  for (int32_t i = 0; i < st->n_meta; i++)
    if (loom_safetensors_meta(st, st->meta_keys[i]) != st->meta_values[i])
      fail("meta misses", st->meta_keys[i]);
  loom_safetensors_free(st);
  return 0;
}
