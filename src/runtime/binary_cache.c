/* The device-binary cache (binary_cache.h) over jit_cache.c's directory and entries. */
#include "runtime/binary_cache.h"

#include "core/sha256.h"
#include "runtime/jit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void loom_binary_cache_open(loom_binary_cache *c, const char *ext, const char *const *parts,
                            int n_parts, const char *source) {
  memset(c, 0, sizeof *c);
  c->ext = ext;
  loom_sha256_state s;
  loom_sha256_init(&s);
  for (int i = 0; i < n_parts; i++)
    loom_sha256_update(&s, parts[i], strlen(parts[i]) + 1);
  loom_sha256_update(&s, source, strlen(source));
  loom_sha256_final(&s, c->key);
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    c->hex[2 * i] = digits[c->key[i] >> 4];
    c->hex[2 * i + 1] = digits[c->key[i] & 15];
  }
  c->hex[64] = '\0';
  snprintf(c->name, sizeof c->name, "%s.%s", c->hex, ext);
  char why[256];
  char *dir = loom_jit_cache_dir();
  c->have_dir = dir && jit_dir_open_cache(&c->dir, dir, why, sizeof why);
  free(dir);
}

uint8_t *loom_binary_cache_load(loom_binary_cache *c, size_t *n) {
  *n = 0;
  if (!c->have_dir) return NULL;
  uint8_t *data = NULL;
  size_t size = 0;
  char why[256];
  if (jit_entry_read(&c->dir, c->name, c->key, &data, &size, why, sizeof why) != JIT_ENTRY_OK ||
      size <= JIT_TRAILER_BYTES) {
    free(data);
    return NULL;
  }
  *n = size - JIT_TRAILER_BYTES;
  data[*n] = '\0'; /* over the trailer, which is no longer needed */
  return data;
}

void loom_binary_cache_store(loom_binary_cache *c, const void *data, size_t n) {
  if (!c->have_dir) return;
  uint8_t t[JIT_TRAILER_BYTES];
  char tmp[160];
  jit_trailer(data, n, c->key, t);
  jit_tmp_name(tmp, sizeof tmp, c->ext, c->hex, "tmp");
  jit_entry_write(&c->dir, tmp, c->name, data, n, t, sizeof t); /* best effort */
}

void loom_binary_cache_close(loom_binary_cache *c) {
  if (c->have_dir) jit_dir_close(&c->dir);
  c->have_dir = false;
}
