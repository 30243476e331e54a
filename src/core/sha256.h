/*
 * SHA-256 (FIPS 180-4), streaming and one-shot: the kernel cache's keys and
 * checksums, and any layer that needs a content digest.
 */
#ifndef LOOM_CORE_SHA256_H
#define LOOM_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* SHA-256, streaming. */
typedef struct loom_sha256_state {
  uint32_t h[8];
  uint64_t len;
  uint8_t buf[64];
  uint32_t n_buf;
} loom_sha256_state;
void loom_sha256_init(loom_sha256_state *s);
void loom_sha256_update(loom_sha256_state *s, const void *data, size_t n);
void loom_sha256_final(loom_sha256_state *s, uint8_t out[32]);
/* One-shot SHA-256. */
void loom_sha256(const void *data, size_t n, uint8_t out[32]);

#endif
