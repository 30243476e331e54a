/*
 * A small string -> int32 hash map (open addressing, linear probing, keys
 * copied). One map serves every lookup by name: a graph's value and output
 * names, the text IR parser's symbols, safetensors and JSON keys, so that
 * big inputs cost linear time, not a scan per name.
 */
#ifndef LOOM_CORE_STRMAP_H
#define LOOM_CORE_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct loom_strmap_slot {
  char *key; /* NULL: empty */
  size_t len;
  uint64_t hash;
  int32_t value;
} loom_strmap_slot;

typedef struct loom_strmap {
  loom_strmap_slot *slots;
  size_t cap, n; /* cap is 0 or a power of two */
} loom_strmap;

/* The value stored under key (len bytes, need not end in NUL), or -1. */
int32_t loom_strmap_get(const loom_strmap *m, const char *key, size_t len);
/* Stores value under key, replacing any old value; false if out of memory
 * (the map is unchanged then). */
bool loom_strmap_put(loom_strmap *m, const char *key, size_t len, int32_t value);
/* Removes key if present. */
void loom_strmap_remove(loom_strmap *m, const char *key, size_t len);
/* Frees the keys and slots; the map is empty (and usable) afterwards. */
void loom_strmap_free(loom_strmap *m);

#endif
