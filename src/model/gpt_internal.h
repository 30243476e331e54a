/*
 * What the GPT builder's files share (gpt.c: parameters and the graphs;
 * gpt_block.c: one transformer block): where each parameter sits in the
 * parameter list, and the forward pass's running state.
 */
#ifndef LOOM_MODEL_GPT_INTERNAL_H
#define LOOM_MODEL_GPT_INTERNAL_H

#include "model/gpt.h"

/* Indices into the parameter list; -1 where the architecture has none.
 * Per-layer entries are offsets inside a layer's run of per_layer. */
typedef struct gpt_layout {
  int32_t wte, wpe, first_layer, per_layer, lnf_g, lnf_b, head, total;
  int32_t ln1_g, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_g, ln2_b;
  int32_t fc_w, fc_b, mlp_w, mlp_b;
} gpt_layout;

void gpt_layout_of(const loom_gpt_config *c, gpt_layout *l);

typedef struct gpt_fwd {
  loom_graph *g;
  const loom_gpt_config *c;
  gpt_layout lay;
  int64_t b, t;
  const int32_t *pv; /* every parameter's value id */
  bool train;
  uint64_t seed;
  int32_t base;   /* rng_base input, train only */
  int64_t offset; /* running dropout counter offset within a step */
} gpt_fwd;

/* The norm of the config (layer_norm or rms_norm) with its parameters
 * (bias < 0: none). */
int32_t gpt_norm(gpt_fwd *f, int32_t x, int32_t gain, int32_t bias);
/* Block l on the hidden state x [B, T, D]. */
int32_t gpt_block(gpt_fwd *f, int32_t x, int32_t l);

#endif
