/*
 * matmul on the cpu backend (f32): NumPy batch broadcasting resolved into
 * per-batch offsets; a shared right operand folds the batch into M (one
 * tall GEMM, the linear-layer case). A right operand that holds the same
 * data on every run is packed once (cpu.h, loom_cpu_packs).
 */
#include "runtime/cpu/cpu.h"
#include "runtime/cpu/gemm.h"
#include "runtime/matmul_batch.h"

#include "ops/attrs.h"
#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

struct loom_cpu_packs {
  const loom_graph *g;
  bool *constant;           /* per value */
  loom_gemm_packed_b **b;   /* per node: its B's pack, or NULL */
  bool *tried;              /* per node: packing was tried since the last change */
  loom_cpu_pack *own;       /* per node: a kernel's own pack (loom_cpu_packs_slot) */
  loom_gemm_scratch scratch; /* the GEMMs' restrided operands (gemm.h) */
};

loom_status loom_cpu_packs_new(loom_ctx *ctx, const loom_graph *g, loom_cpu_packs **out) {
  *out = NULL;
  loom_cpu_packs *pk = loom_calloc(ctx, 1, sizeof *pk);
  if (!pk) return LOOM_STATUS_OUT_OF_MEMORY;
  pk->g = g;
  pk->constant = loom_calloc(ctx, (size_t)(g->n_values ? g->n_values : 1), sizeof *pk->constant);
  pk->b = loom_calloc(ctx, (size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *pk->b);
  pk->tried = loom_calloc(ctx, (size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *pk->tried);
  pk->own = loom_calloc(ctx, (size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *pk->own);
  if (!pk->constant || !pk->b || !pk->tried || !pk->own) {
    loom_cpu_packs_free(pk);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  loom_cpu_packs_set_frozen(pk, NULL);
  *out = pk;
  return LOOM_STATUS_OK;
}

static void drop_packs(loom_cpu_packs *pk) {
  for (int32_t i = 0; i < pk->g->n_nodes; i++) {
    loom_gemm_packed_b_free(pk->b[i]);
    pk->b[i] = NULL;
    pk->tried[i] = false;
    loom_cpu_pack_clear(&pk->own[i]);
  }
}

void loom_cpu_packs_free(loom_cpu_packs *pk) {
  if (!pk) return;
  if (pk->b && pk->tried && pk->own) drop_packs(pk);
  loom_gemm_scratch_free(&pk->scratch);
  free(pk->constant);
  free(pk->b);
  free(pk->tried);
  free(pk->own);
  free(pk);
}

/* Nodes are in topological order: one pass sees every input first. */
void loom_cpu_packs_set_frozen(loom_cpu_packs *pk, const bool *frozen) {
  const loom_graph *g = pk->g;
  drop_packs(pk);
  memset(pk->constant, 0, sizeof *pk->constant * (size_t)g->n_values);
  for (int32_t i = 0; i < g->n_inputs && frozen; i++) pk->constant[g->inputs[i]] = frozen[i];
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const loom_node *n = &g->nodes[i];
    const loom_op_def *d = loom_op_get(n->op);
    bool c = d && d->cls != LOOM_OPCLASS_RNG && d->cls != LOOM_OPCLASS_COMM;
    for (int32_t k = 0; k < n->n_in && c; k++) c = pk->constant[n->in[k]];
    for (int32_t k = 0; k < n->n_out; k++) pk->constant[n->out[k]] = c;
  }
}

int32_t loom_cpu_packs_count(const loom_cpu_packs *pk, int64_t *bytes) {
  int32_t n = 0;
  int64_t total = 0;
  for (int32_t i = 0; pk && i < pk->g->n_nodes; i++) {
    n += (pk->b[i] != NULL) + (pk->own[i].data != NULL);
    total += loom_gemm_packed_b_bytes(pk->b[i]) + pk->own[i].bytes;
  }
  if (bytes) *bytes = total;
  return n;
}

static bool in_graph(const loom_cpu_packs *pk, const loom_node *n) {
  return pk && n >= pk->g->nodes && n < pk->g->nodes + pk->g->n_nodes;
}

bool loom_cpu_packs_constant(const loom_cpu *c, const loom_node *n, int32_t k) {
  return in_graph(c->packs, n) && k < n->n_in && c->packs->constant[n->in[k]];
}

loom_cpu_pack *loom_cpu_packs_slot(const loom_cpu *c, const loom_node *n) {
  return in_graph(c->packs, n) ? &c->packs->own[n - c->packs->g->nodes] : NULL;
}

void loom_cpu_pack_clear(loom_cpu_pack *slot) {
  if (slot->data && slot->free_fn) slot->free_fn(slot->data);
  *slot = (loom_cpu_pack){0};
}

/* Node n's pack for product p: made on its first run when its B is
 * constant; NULL when not (or when the product gains nothing from one). */
static loom_status packed_b(const loom_cpu *c, const loom_node *n, const loom_gemm *p,
                            const loom_gemm_packed_b **out) {
  *out = NULL;
  loom_cpu_packs *pk = c->packs;
  if (!pk || n < pk->g->nodes || n >= pk->g->nodes + pk->g->n_nodes) return LOOM_STATUS_OK;
  int32_t i = (int32_t)(n - pk->g->nodes);
  if (!pk->constant[n->in[1]]) return LOOM_STATUS_OK;
  if (!pk->tried[i]) {
    pk->tried[i] = true;
    LOOM_TRY(loom_gemm_pack_b(c->ctx, p, &pk->b[i]));
  }
  *out = pk->b[i];
  return LOOM_STATUS_OK;
}

loom_status loom_cpu_matmul(const loom_cpu *c, const loom_node *n, const loom_view *in,
                            const loom_view *out, const loom_gemm_epilogue *epi) {
  const loom_view *o = &out[0];
  int32_t br = o->rank - 2, ra = in[0].rank, rb = in[1].rank;
  bool ta = LOOM_ATTR_I(n, matmul, trans_a) != 0, tb = LOOM_ATTR_I(n, matmul, trans_b) != 0;
  loom_gemm p = {
      .trans_a = ta,
      .trans_b = tb,
      .m = o->shape[br],
      .n = o->shape[br + 1],
      .k = in[0].shape[ra - (ta ? 2 : 1)],
      .batch = 1,
      .a = in[0].data,
      .lda = in[0].shape[ra - 1],
      .b = in[1].data,
      .ldb = in[1].shape[rb - 1],
      .c = o->data,
      .ldc = o->shape[br + 1],
      .c_stride = o->shape[br] * o->shape[br + 1],
  };
  if (epi) p.epilogue = *epi;
  if (c->packs) p.scratch = &c->packs->scratch;
  int64_t a_batch = 1, b_batch = 1;
  for (int32_t d = 0; d < br; d++)
    p.batch *= o->shape[d];
  for (int32_t d = 0; d < ra - 2; d++)
    a_batch *= in[0].shape[d];
  for (int32_t d = 0; d < rb - 2; d++)
    b_batch *= in[1].shape[d];
  if (p.batch == 1 || (b_batch == 1 && !ta && a_batch == p.batch)) {
    /* one GEMM: A's batch rows stack into M over a shared B */
    p.m *= p.batch;
    p.batch = 1;
    LOOM_TRY(packed_b(c, n, &p, &p.b_packed));
    return loom_gemm_f32(c->ctx, c->nt, &p);
  }
  int64_t *off = NULL;
  LOOM_TRY(loom_matmul_batch_offsets(c->ctx, &in[0], &in[1], o, p.batch, &off));
  p.a_off = off;
  p.b_off = off + p.batch;
  loom_status st = packed_b(c, n, &p, &p.b_packed);
  if (!st) st = loom_gemm_f32(c->ctx, c->nt, &p);
  free(off);
  return st;
}

static loom_status k_matmul(const loom_cpu *c, const loom_node *n, const loom_view *in,
                            const loom_view *out) {
  return loom_cpu_matmul(c, n, in, out, NULL);
}

loom_cpu_kernel loom_cpu_matmul_kernel(const loom_graph *g, const loom_node *n) {
  if (n->op != LOOM_OP_MATMUL) return NULL;
  for (int32_t i = 0; i < 2; i++) {
    const loom_type *t = &g->values[n->in[i]].type;
    if (t->dtype != LOOM_DTYPE_F32 || t->rank < 2) return NULL;
  }
  return g->values[n->out[0]].type.dtype == LOOM_DTYPE_F32 ? k_matmul : NULL;
}
