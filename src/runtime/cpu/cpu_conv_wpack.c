/*
 * A forward conv's weights reordered into its blocks' layouts (and scaled
 * by its post-ops' first scale) once, kept while they are constant
 * (cpu_conv_internal.h).
 */
#include "runtime/cpu/cpu_conv_internal.h"

#include <stdlib.h>
#include <string.h>

/* The weights of e's output channels from c0 into e's layout at dst,
 * with the post-ops' scale per output channel folded in. */
bool conv_reorder_weights(const conv_job *j, const prim_entry *e, int64_t c0, void *dst) {
  const conv_split *s = &j->s;
  dnnl_memory_desc_t plain;
  conv_md_weights(&plain, &e->key);
  const float *scale = e->key.scale ? j->post->scale + c0 : NULL;
  return conv_reorder_scaled(e->to[2], &plain, j->b + c0 * (s->big_c / s->w.groups) * s->kn,
                             &e->md[2], dst, scale, e->key.small_c);
}

/*
 * A conv's weights reordered (and scaled) once for its blocks, kept in
 * its node's pack slot (cpu.h, loom_cpu_packs) while the weights are
 * constant. It remembers what it was made from (the weights' address, the
 * blocks' layouts, the scale's values) and is remade when any differs,
 * so a pack describes exactly the reorders a run would do.
 */
typedef struct conv_wpack {
  const float *w;
  dnnl_memory_desc_t md[2]; /* the weights' layouts: every block but the last, the last */
  int64_t b, blocks, n_scale;
  float *scale;  /* the scale folded in (n_scale values), or NULL */
  size_t stride; /* bytes a block but the last takes */
  char *data;
} conv_wpack;

static void wpack_free(void *data) {
  conv_wpack *pk = data;
  free(pk->scale);
  free(pk->data);
  free(pk);
}

const float *conv_wpack_block(const conv_wpack *pk, int64_t blk) {
  return (const float *)(pk->data + (size_t)blk * pk->stride);
}

static bool wpack_task(const void *user, int64_t blk) {
  const conv_job *j = user;
  const prim_entry *e = &j->blk[blk == j->s.blocks - 1];
  return conv_reorder_weights(j, e, blk * j->s.b * j->s.per_small,
                              (void *)conv_wpack_block(j->wpack, blk));
}

static bool wpack_fits(const conv_wpack *pk, const conv_job *j) {
  const loom_conv_post *post = j->post;
  bool scaled = j->blk[1].key.scale != 0;
  return pk->w == j->b && pk->b == j->s.b && pk->blocks == j->s.blocks &&
         dnnl_memory_desc_equal(&pk->md[0], &j->blk[0].md[2]) &&
         dnnl_memory_desc_equal(&pk->md[1], &j->blk[1].md[2]) && (pk->scale != NULL) == scaled &&
         (!scaled || (pk->n_scale == j->s.small_c &&
                      !memcmp(pk->scale, post->scale, sizeof(float) * (size_t)pk->n_scale)));
}

/* Sets j->wpack for conv node n when its weights are constant and its
 * blocks reorder them: the pack in n's slot, made (again) where it does
 * not fit j. Nothing packed is no error: the tasks then reorder. */
loom_status conv_wpack_get(const loom_cpu *c, const loom_node *n, conv_job *j) {
  const conv_split *s = &j->s;
  loom_cpu_pack *slot = loom_cpu_packs_slot(c, n);
  if (!slot || !loom_cpu_packs_constant(c, n, 1) || s->batch <= 0 || !j->blk[0].prim ||
      !j->blk[1].prim || !j->blk[0].to[2] || !j->blk[1].to[2])
    return LOOM_STATUS_OK;
  if (slot->data && wpack_fits(slot->data, j)) {
    j->wpack = slot->data;
    return LOOM_STATUS_OK;
  }
  loom_cpu_pack_clear(slot);
  conv_wpack *pk = loom_calloc(c->ctx, 1, sizeof *pk);
  if (!pk) return LOOM_STATUS_OUT_OF_MEMORY;
  pk->w = j->b;
  pk->b = s->b;
  pk->blocks = s->blocks;
  pk->md[0] = j->blk[0].md[2];
  pk->md[1] = j->blk[1].md[2];
  pk->stride = (dnnl_memory_desc_get_size(&pk->md[0]) + 63) / 64 * 64;
  size_t bytes = pk->stride * (size_t)(s->blocks - 1) + dnnl_memory_desc_get_size(&pk->md[1]);
  pk->data = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (j->blk[1].key.scale) {
    pk->n_scale = s->small_c;
    pk->scale = loom_malloc(c->ctx, sizeof(float) * (size_t)s->small_c);
    if (pk->scale) memcpy(pk->scale, j->post->scale, sizeof(float) * (size_t)s->small_c);
  }
  if (!pk->data || (j->blk[1].key.scale && !pk->scale)) {
    wpack_free(pk);
    return loom_error(c->ctx, LOOM_STATUS_OUT_OF_MEMORY, "conv: packing its weights");
  }
  j->wpack = pk;
  if (!conv_run_tasks(c, s->blocks, conv_big_flops(s), wpack_task, j)) {
    j->wpack = NULL;
    wpack_free(pk);
    return conv_status(c, n, false);
  }
  *slot = (loom_cpu_pack){pk, (int64_t)bytes, wpack_free};
  return LOOM_STATUS_OK;
}
