#include "core/strmap.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a over the bytes. */
static uint64_t hash_bytes(const char *s, size_t len) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

/* The slot holding key, or the empty slot where it would go. */
static size_t find_slot(const loom_strmap *m, const char *key, size_t len, uint64_t h) {
  size_t i = (size_t)h & (m->cap - 1);
  while (m->slots[i].key) {
    const loom_strmap_slot *s = &m->slots[i];
    if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) break;
    i = (i + 1) & (m->cap - 1);
  }
  return i;
}

int32_t loom_strmap_get(const loom_strmap *m, const char *key, size_t len) {
  if (!m->cap) return -1;
  const loom_strmap_slot *s = &m->slots[find_slot(m, key, len, hash_bytes(key, len))];
  return s->key ? s->value : -1;
}

/* Doubles the table (load stays under one half). */
static bool grow(loom_strmap *m) {
  size_t cap = m->cap ? m->cap * 2 : 16;
  loom_strmap_slot *slots = calloc(cap, sizeof *slots);
  if (!slots) return false;
  loom_strmap old = *m;
  m->slots = slots;
  m->cap = cap;
  for (size_t i = 0; i < old.cap; i++)
    if (old.slots[i].key)
      m->slots[find_slot(m, old.slots[i].key, old.slots[i].len, old.slots[i].hash)] = old.slots[i];
  free(old.slots);
  return true;
}

bool loom_strmap_put(loom_strmap *m, const char *key, size_t len, int32_t value) {
  uint64_t h = hash_bytes(key, len);
  if (m->cap) {
    loom_strmap_slot *s = &m->slots[find_slot(m, key, len, h)];
    if (s->key) {
      s->value = value;
      return true;
    }
  }
  if ((m->n + 1) * 2 > m->cap && !grow(m)) return false;
  char *copy = malloc(len + 1);
  if (!copy) return false;
  memcpy(copy, key, len);
  copy[len] = '\0';
  m->slots[find_slot(m, key, len, h)] = (loom_strmap_slot){copy, len, h, value};
  m->n++;
  return true;
}

void loom_strmap_remove(loom_strmap *m, const char *key, size_t len) {
  if (!m->cap) return;
  size_t i = find_slot(m, key, len, hash_bytes(key, len));
  if (!m->slots[i].key) return;
  free(m->slots[i].key);
  m->slots[i].key = NULL;
  m->n--;
  /* Backward-shift deletion: move later entries of the probe run into the
   * hole when their home slot does not lie between the hole and them. */
  size_t mask = m->cap - 1, hole = i;
  for (size_t j = (i + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
    size_t home = (size_t)m->slots[j].hash & mask;
    bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    m->slots[hole] = m->slots[j];
    m->slots[j].key = NULL;
    hole = j;
  }
}

void loom_strmap_free(loom_strmap *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
  free(m->slots);
  m->slots = NULL;
  m->cap = m->n = 0;
}
