/*
 * The session modes' names, from their lists in loom.h: one table per
 * mode, so the enum, the names, messages and --help cannot disagree.
 */
#include "core/ctx.h"

#include <string.h>

#define NAME_ENTRY(ENUM, name, help) #name,

static const char *const fusion_names[] = {LOOM_FUSION_MODE_LIST(NAME_ENTRY, )};
static const char *const attention_names[] = {LOOM_ATTENTION_MODE_LIST(NAME_ENTRY, )};
static const char *const rng_names[] = {LOOM_RNG_PLACEMENT_LIST(NAME_ENTRY, )};
static const char *const gemm_names[] = {LOOM_GEMM_PRECISION_LIST(NAME_ENTRY, )};

_Static_assert(LOOM_ARRAY_LEN(fusion_names) == LOOM_FUSION_COUNT, "fusion names");
_Static_assert(LOOM_ARRAY_LEN(attention_names) == LOOM_ATTENTION_COUNT, "attention names");
_Static_assert(LOOM_ARRAY_LEN(rng_names) == LOOM_RNG_COUNT, "rng names");
_Static_assert(LOOM_ARRAY_LEN(gemm_names) == LOOM_GEMM_COUNT, "gemm precision names");

static const char *name_of(const char *const *names, int32_t n, int v) {
  return v >= 0 && v < n ? names[v] : NULL;
}

static int find(const char *const *names, int32_t n, const char *name) {
  for (int32_t i = 0; name && i < n; i++)
    if (strcmp(name, names[i]) == 0) return i;
  return -1;
}

const char *loom_fusion_mode_name(loom_fusion_mode m) {
  return name_of(fusion_names, LOOM_FUSION_COUNT, (int)m);
}

const char *loom_attention_mode_name(loom_attention_mode m) {
  return name_of(attention_names, LOOM_ATTENTION_COUNT, (int)m);
}

const char *loom_rng_placement_name(loom_rng_placement p) {
  return name_of(rng_names, LOOM_RNG_COUNT, (int)p);
}

loom_status loom_fusion_mode_from_name(const char *name, loom_fusion_mode *out) {
  int i = find(fusion_names, LOOM_FUSION_COUNT, name);
  if (i < 0 || !out) return LOOM_STATUS_INVALID_ARGUMENT;
  *out = (loom_fusion_mode)i;
  return LOOM_STATUS_OK;
}

loom_status loom_attention_mode_from_name(const char *name, loom_attention_mode *out) {
  int i = find(attention_names, LOOM_ATTENTION_COUNT, name);
  if (i < 0 || !out) return LOOM_STATUS_INVALID_ARGUMENT;
  *out = (loom_attention_mode)i;
  return LOOM_STATUS_OK;
}

loom_status loom_rng_placement_from_name(const char *name, loom_rng_placement *out) {
  int i = find(rng_names, LOOM_RNG_COUNT, name);
  if (i < 0 || !out) return LOOM_STATUS_INVALID_ARGUMENT;
  *out = (loom_rng_placement)i;
  return LOOM_STATUS_OK;
}

const char *loom_gemm_precision_name(loom_gemm_precision p) {
  return name_of(gemm_names, LOOM_GEMM_COUNT, (int)p);
}

loom_status loom_gemm_precision_from_name(const char *name, loom_gemm_precision *out) {
  int i = find(gemm_names, LOOM_GEMM_COUNT, name);
  if (i < 0 || !out) return LOOM_STATUS_INVALID_ARGUMENT;
  *out = (loom_gemm_precision)i;
  return LOOM_STATUS_OK;
}
