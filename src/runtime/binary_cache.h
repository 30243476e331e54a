/*
 * Compiled device binaries (CUDA PTX, OpenCL program binaries) kept in the
 * JIT cache directory, with jit_cache.c's checks: an entry per key, the
 * SHA-256 of what the binary depends on (compiler, device, options) and of
 * the source; a trailer that must match the key. Every step is best effort:
 * with no safe directory nothing is loaded or stored.
 */
#ifndef LOOM_RUNTIME_BINARY_CACHE_H
#define LOOM_RUNTIME_BINARY_CACHE_H

#include "runtime/jit_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct loom_binary_cache {
  jit_dir dir;
  bool have_dir;
  const char *ext; /* the entries' file extension, e.g. "ptx" */
  uint8_t key[32];
  char hex[65];
  char name[80]; /* the entry: HEX.EXT */
} loom_binary_cache;

/* Opens the cache for the entry of source under the n_parts strings parts
 * (each hashed with its terminating NUL, then the source without). */
void loom_binary_cache_open(loom_binary_cache *c, const char *ext, const char *const *parts,
                            int n_parts, const char *source);
/* The entry's binary (malloc'ed, *n bytes followed by a NUL), or NULL when
 * it is absent, damaged or built for another key. */
uint8_t *loom_binary_cache_load(loom_binary_cache *c, size_t *n);
/* Stores data as the entry (best effort). */
void loom_binary_cache_store(loom_binary_cache *c, const void *data, size_t n);
void loom_binary_cache_close(loom_binary_cache *c);

#endif
