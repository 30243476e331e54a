/* Piece-aware dropout (rng/piece.h, issue 9): the sub-op of a parallel
 * plan over a piece of an RNG op, with the attributes its sub_attrs hook
 * gives (parallel/subop.h's loom_subop_attrs), computes exactly, bit for
 * bit, that piece of the whole op's result, for pieces that split each
 * splittable dim in 2 and in 3, two dims at once, and pieces of pieces:
 *   - dropout, on the ref backend, the kernel IR interpreter and the cpu
 *     backend in every fusion mode;
 *   - flash_attention and flash_attention_grad with dropout, the keep bits
 *     generated in the kernels or read from a dropout_mask of the piece
 *     (sequential and overlapped), whose bits are checked against the
 *     whole mask's at the logical positions;
 *   - the attention composite with its gradients, under every fusion mode,
 *     decomposed and through the attention pass with every RNG placement
 *     (bit for bit, or within ulps where a GEMM's kernel follows the
 *     piece's row count: same_or_ulps).
 * A piece run with the node's own attributes (no hook) must differ: the
 * checks see a wrong index mapping. */
#include "common.h"

#include "fusion/group.h"
#include "ir/graph.h"
#include "kernel/interp.h"
#include "ops/op.h"
#include "parallel/subop.h"
#include "parallel/vtensor.h"
#include "passes/attention.h"
#include "rng/piece.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

#define MAXIO 8

/* ---- tensors -------------------------------------------------------------- */

static loom_tensor *tensor_of(const loom_type *t) {
  loom_tensor *x = NULL;
  CHECK_OK(ctx, loom_tensor_new(ctx, t->dtype, t->rank, t->shape, &x));
  return x;
}

/* Floats in [-1, 1]; an integer scalar (a counter base) 1000003. */
static loom_tensor *random_tensor(const loom_type *t, loom_test_rng *rng) {
  loom_tensor *x = tensor_of(t);
  if (!x) return NULL;
  if (t->dtype == LOOM_DTYPE_I64) {
    for (int64_t e = 0; e < loom_tensor_numel(x); e++) ((int64_t *)loom_tensor_data(x))[e] = 1000003;
    return x;
  }
  float *f = loom_tensor_data(x);
  for (int64_t e = 0; e < loom_tensor_numel(x); e++) f[e] = (float)loom_test_uniform(rng, -1, 1);
  return x;
}

static loom_type type_of(const loom_tensor *t) {
  loom_type ty = {.dtype = loom_tensor_dtype(t), .rank = loom_tensor_rank(t)};
  for (int32_t d = 0; d < ty.rank; d++) ty.shape[d] = loom_tensor_dim(t, d);
  return ty;
}

/* The box b of t, as a tensor of its own (any dtype). */
static loom_tensor *slice(const loom_tensor *t, const loom_vbox *b) {
  loom_type ty = type_of(t), st = ty;
  for (int32_t d = 0; d < ty.rank; d++) st.shape[d] = b->end[d] - b->start[d];
  loom_tensor *s = tensor_of(&st);
  if (!s) return NULL;
  size_t es = loom_dtype_size(ty.dtype);
  const char *src = loom_tensor_data(t);
  char *dst = loom_tensor_data(s);
  for (int64_t e = 0; e < loom_tensor_numel(s); e++) {
    int64_t rest = e, off = 0, stride = 1;
    for (int32_t d = ty.rank - 1; d >= 0; d--) {
      off += (b->start[d] + rest % st.shape[d]) * stride;
      rest /= st.shape[d];
      stride *= ty.shape[d];
    }
    memcpy(dst + (size_t)e * es, src + (size_t)off * es, es);
  }
  return s;
}

static bool same_bits(const loom_tensor *a, const loom_tensor *b) {
  return a && b && loom_tensor_numel(a) == loom_tensor_numel(b) &&
         memcmp(loom_tensor_data(a), loom_tensor_data(b),
                (size_t)loom_tensor_numel(a) * loom_dtype_size(loom_tensor_dtype(a))) == 0;
}

/* Bit for bit, or, for values that pass through a GEMM whose row count is
 * the piece's, within 1e-6 of the largest: where oneDNN has no blocked
 * matmul (CPUs without AVX-512) sgemm's kernels and their summation
 * order follow the shape, a few ulps apart (7e-9 of 0.26 seen), while a
 * wrong mask bit moves a value by its own size. */
static bool same_or_ulps(const loom_tensor *a, const loom_tensor *b) {
  if (same_bits(a, b)) return true;
  if (!a || !b || loom_tensor_numel(a) != loom_tensor_numel(b) ||
      loom_tensor_dtype(a) != LOOM_DTYPE_F32 || loom_tensor_dtype(b) != LOOM_DTYPE_F32)
    return false;
  const float *x = loom_tensor_data(a), *y = loom_tensor_data(b);
  double diff = 0, top = 0;
  for (int64_t e = 0; e < loom_tensor_numel(a); e++) {
    diff = fmax(diff, fabs((double)x[e] - y[e]));
    top = fmax(top, fabs((double)y[e]));
  }
  return diff <= 1e-6 * top;
}

static void free_all(loom_tensor **t, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    loom_tensor_free(t[i]);
    t[i] = NULL;
  }
}

/* ---- running graphs ------------------------------------------------------- */

typedef struct variant {
  char name[64];
  loom_session_options opt;
  bool pass;                  /* the attention pass before autodiff (composite test) */
  loom_rng_placement placement;
} variant;

static bool run_graph(const loom_graph *g, const loom_session_options *o, int32_t n_in,
                      loom_tensor **in, int32_t n_out, loom_tensor **out) {
  for (int32_t i = 0; i < n_out; i++) out[i] = NULL;
  loom_session *s = NULL;
  CHECK_OK(ctx, loom_session_new(ctx, g, o, &s));
  if (!s) return false;
  loom_status st = loom_session_run(s, n_in, (const loom_tensor *const *)in, n_out, out);
  CHECK_OK(ctx, st);
  loom_session_free(s);
  return st == LOOM_STATUS_OK;
}

/* One op over graph inputs: the whole op, or a sub-op. */
typedef struct one_op {
  loom_op op;
  int32_t n_in;
  loom_type in[MAXIO];
  loom_attr_value attr[LOOM_MAX_ATTRS];
} one_op;

/* A graph of o alone (with_mask: a dropout_mask of o's probabilities, from
 * the counter base input, feeds o as its last input, and is an output too). */
static loom_graph *graph_of(const one_op *o, int32_t with_mask, loom_type *out, int32_t *n_out) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return NULL;
  int32_t in[MAXIO + 1], outs[4];
  for (int32_t i = 0; i < o->n_in; i++) {
    char name[16];
    snprintf(name, sizeof name, "i%d", (int)i);
    CHECK_OK(ctx, loom_graph_input(g, name, o->in[i].dtype, o->in[i].rank, o->in[i].shape, &in[i]));
  }
  int32_t n_in = o->n_in, mask = -1;
  if (with_mask) {
    const loom_type *q = &o->in[0], *k = &o->in[1];
    int32_t r = q->rank;
    loom_attr_value ma[LOOM_MAX_ATTRS];
    loom_attrs_default(LOOM_OP_DROPOUT_MASK, ma);
    LOOM_ATTRV_F(ma, dropout_mask, p) = LOOM_ATTRV_F(o->attr, attention, p);
    LOOM_ATTRV_I(ma, dropout_mask, seed) = LOOM_ATTRV_I(o->attr, attention, seed);
    LOOM_ATTRV_I(ma, dropout_mask, offset) = LOOM_ATTRV_I(o->attr, attention, offset);
    LOOM_ATTRV_I(ma, dropout_mask, overlap) = with_mask > 1;
    LOOM_ATTRV_INTS(ma, dropout_mask, whole) = LOOM_ATTRV_INTS(o->attr, attention, whole);
    LOOM_ATTRV_INTS(ma, dropout_mask, at) = LOOM_ATTRV_INTS(o->attr, attention, at);
    loom_ints *shape = &LOOM_ATTRV_INTS(ma, dropout_mask, shape);
    shape->n = r;
    int64_t numel = 1;
    for (int32_t d = 0; d < r; d++) {
      shape->v[d] = d < r - 1 ? q->shape[d] : k->shape[r - 2];
      numel *= shape->v[d];
    }
    LOOM_ATTRV_I(ma, dropout_mask, numel) = numel;
    int32_t base = in[o->n_in - 1];
    CHECK_OK(ctx, loom_graph_add(g, LOOM_OP_DROPOUT_MASK, 1, &base, ma, 1, &mask));
    in[n_in++] = mask;
  }
  /* a variadic op (n_out < 0: flash_attention_grad) in its contiguous form: dq, dk, dv */
  *n_out = loom_op_get(o->op)->n_out >= 0 ? loom_op_get(o->op)->n_out : 3;
  CHECK_OK(ctx, loom_graph_add(g, o->op, n_in, in, o->attr, *n_out, outs));
  for (int32_t k = 0; k < *n_out; k++) {
    char name[16];
    snprintf(name, sizeof name, "o%d", (int)k);
    CHECK_OK(ctx, loom_graph_output(g, name, outs[k]));
    if (out) out[k] = g->values[outs[k]].type;
  }
  if (with_mask) CHECK_OK(ctx, loom_graph_output(g, "mask", mask));
  return g;
}

/* ---- pieces ---------------------------------------------------------------- */

typedef struct piece_list {
  int32_t n;
  loom_subop_ranges r[64];
} piece_list;

/* top: every part of each label split in 2 and in 3, and one piece of two
 * labels split at once; else (a piece of a piece): the last part of each
 * label split in 2 or, failing that, 3. */
static void list_pieces(const loom_partition *p, const int64_t *ext, bool top, piece_list *L) {
  L->n = 0;
  loom_subop_ranges full;
  loom_subop_ranges_full(p, ext, &full);
  int32_t split2[2], n2 = 0;
  for (int32_t l = 0; l < p->n_labels; l++) {
    for (int64_t n = 2; n <= 3; n++) {
      if (ext[l] < n || ext[l] % n) continue;
      for (int64_t i = top ? 0 : n - 1; i < n && L->n < 64; i++) {
        loom_subop_ranges r = full;
        r.lo[l] = i * ext[l] / n;
        r.hi[l] = (i + 1) * ext[l] / n;
        L->r[L->n++] = r;
      }
      if (n2 < 2 && n == 2) split2[n2++] = l;
      if (!top) break;
    }
  }
  if (top && n2 == 2 && L->n < 64) {
    loom_subop_ranges r = full;
    for (int32_t k = 0; k < 2; k++) {
      r.lo[split2[k]] = ext[split2[k]] / 2;
      r.hi[split2[k]] = ext[split2[k]];
    }
    L->r[L->n++] = r;
  }
}

static void ranges_str(const loom_subop_ranges *r, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int32_t l = 0; l < r->n_labels && k < n; l++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld:%lld", l ? "," : "", (long long)r->lo[l],
                          (long long)r->hi[l]);
}

/* o's partition and label extents; false with none to split. */
static bool partition_of(const one_op *o, loom_partition *p, int64_t *ext, loom_type *out) {
  int32_t n_out;
  loom_graph *g = graph_of(o, 0, out, &n_out);
  if (!g) return false;
  loom_subop_partition(&g->nodes[g->n_nodes - 1], o->in, out, p);
  bool ok = loom_subop_label_extents(ctx, p, o->in, out, ext);
  CHECK(ok);
  loom_graph_free(g);
  return ok && p->n_labels > 0;
}

/* The sub-op of o over r (hook: the attributes from loom_subop_attrs, else
 * o's own), and the boxes it reads and writes. */
static bool sub_op(const one_op *o, const loom_subop_ranges *r, bool hook, one_op *c,
                   loom_vbox *in_box, loom_vbox *out_box) {
  loom_type out[4];
  int32_t n_out;
  loom_graph *g = graph_of(o, 0, out, &n_out);
  if (!g) return false;
  const loom_node *n = &g->nodes[g->n_nodes - 1];
  loom_partition p;
  int64_t ext[LOOM_PART_MAX_LABELS];
  loom_subop_partition(n, o->in, out, &p);
  bool ok = loom_subop_label_extents(ctx, &p, o->in, out, ext);
  if (ok) {
    loom_subop_boxes(&p, ext, o->in, out, r, in_box, out_box);
    *c = *o;
    for (int32_t i = 0; i < o->n_in; i++)
      for (int32_t d = 0; d < o->in[i].rank; d++)
        c->in[i].shape[d] = in_box[i].end[d] - in_box[i].start[d];
    if (hook) CHECK_OK(ctx, loom_subop_attrs(ctx, n, o->in, out, in_box, out_box, c->attr));
  }
  loom_graph_free(g);
  return ok;
}

/* ---- the mask's bits at logical positions ---------------------------------- */

static int bit(const loom_tensor *m, int64_t e) {
  return (((const uint8_t *)loom_tensor_data(m))[e >> 3] >> (e & 7)) & 1;
}

/* The mask of attention op c (its probabilities' whole/at) holds, at bit e,
 * the whole mask's bit at e's logical index (computed here, not by
 * rng/piece.h). whole_mask: the single-device op's bits. */
static bool mask_matches(const one_op *c, const loom_tensor *mask, const loom_tensor *whole_mask) {
  const loom_ints *whole = &LOOM_ATTRV_INTS(c->attr, attention, whole);
  const loom_ints *at = &LOOM_ATTRV_INTS(c->attr, attention, at);
  int32_t r = c->in[0].rank;
  int64_t shape[LOOM_MAX_RANK], numel = 1;
  for (int32_t d = 0; d < r; d++) {
    shape[d] = d < r - 1 ? c->in[0].shape[d] : c->in[1].shape[r - 2];
    numel *= shape[d];
  }
  for (int64_t e = 0; e < numel; e++) {
    int64_t rest = e, lin = 0, stride = 1;
    for (int32_t d = r - 1; d >= 0; d--) {
      int64_t j = rest % shape[d] + (at->n ? at->v[d] : 0);
      rest /= shape[d];
      lin += j * stride;
      stride *= whole->n ? whole->v[d] : shape[d];
    }
    if (bit(mask, e) != bit(whole_mask, lin)) return false;
  }
  return true;
}

/* ---- the kernel IR interpreter ------------------------------------------ */

/* o (one fusible node) lowered to a stitched kernel and run by the kernel
 * interpreter: its output equals want bit for bit. */
static bool interpreted_matches(const one_op *o, loom_tensor **in, const loom_tensor *want) {
  int32_t n_out;
  loom_graph *g = graph_of(o, 0, NULL, &n_out);
  if (!g) return false;
  int32_t gon[1] = {7};
  CHECK(g->n_nodes == 1 && loom_fusion_node_fusible(g, 0));
  loom_kernel k = {0};
  loom_kschedule sched = {.rows_per_tile = 2, .vector_width = 4};
  bool same = false;
  loom_tensor *got = tensor_of(&g->values[loom_graph_output_value(g, 0)].type);
  CHECK_OK(ctx, loom_fusion_group_lower(ctx, g, gon, 7, LOOM_FUSION_STITCH, &sched, "k", &k));
  if (got && k.n_parts > 0) {
    void *args[MAXIO + 1] = {0};
    for (int32_t a = 0; a < k.n_args && a <= MAXIO; a++) {
      for (int32_t i = 0; i < o->n_in; i++)
        if (loom_graph_input_value(g, i) == k.args[a].value) args[a] = loom_tensor_data(in[i]);
      if (loom_graph_output_value(g, 0) == k.args[a].value) args[a] = loom_tensor_data(got);
    }
    CHECK_OK(ctx, loom_kernel_interpret(ctx, &k, args));
    same = same_bits(got, want);
  }
  loom_tensor_free(got);
  loom_kernel_clear(&k);
  loom_graph_free(g);
  return same;
}

/* ---- one op, its pieces, their pieces ----------------------------------- */

/* Prints the first failure of each (op, variant) pair. */
static void report(const char *what, const variant *v, const char *piece, int32_t level,
                   const char *which) {
  static char seen[128][160];
  static int32_t n_seen;
  char key[160];
  snprintf(key, sizeof key, "%.60s|%.64s", what, v->name);
  for (int32_t i = 0; i < n_seen; i++)
    if (strcmp(seen[i], key) == 0) return;
  if (n_seen < 128) snprintf(seen[n_seen++], sizeof seen[0], "%s", key);
  fprintf(stderr, "  %s, %s, piece %s (level %d): %s differs\n", what, v->name, piece,
          (int)level, which);
}

/* Checks every piece of o (inputs in, expected outputs want) on variant v,
 * then (nested > 0) their pieces. attn_mask: o is an attention op with
 * dropout; also run each sub-op on a dropout_mask of its piece
 * (sequential and overlapped), checking the mask against whole_mask. */
static void check_pieces(const char *what, const variant *v, const one_op *o, loom_tensor **in,
                         loom_tensor **want, int32_t n_out, bool top, int32_t nested,
                         bool attn_mask, const loom_tensor *whole_mask) {
  loom_partition p;
  int64_t ext[LOOM_PART_MAX_LABELS];
  loom_type out[4];
  if (!partition_of(o, &p, ext, out)) return;
  piece_list L;
  list_pieces(&p, ext, top, &L);
  CHECK(L.n > 0);
  for (int32_t k = 0; k < L.n; k++) {
    one_op c;
    loom_vbox in_box[MAXIO], out_box[4];
    if (!sub_op(o, &L.r[k], true, &c, in_box, out_box)) continue;
    char piece[128];
    ranges_str(&L.r[k], piece, sizeof piece);
    loom_tensor *cin[MAXIO] = {0}, *cwant[4] = {0}, *got[5] = {0};
    for (int32_t i = 0; i < o->n_in; i++) cin[i] = slice(in[i], &in_box[i]);
    for (int32_t i = 0; i < n_out; i++) cwant[i] = slice(want[i], &out_box[i]);
    for (int32_t m = 0; m <= (attn_mask ? 2 : 0); m++) {
      int32_t no;
      loom_graph *g = graph_of(&c, m, NULL, &no);
      if (g && run_graph(g, &v->opt, o->n_in, cin, no + (m > 0), got)) {
        for (int32_t i = 0; i < n_out; i++) {
          bool same = same_bits(got[i], cwant[i]);
          CHECK(same);
          if (!same) report(what, v, piece, top ? 1 : 2, m == 0 ? "output" : "output (with a mask)");
        }
        if (m > 0) {
          bool same = mask_matches(&c, got[no], whole_mask);
          CHECK(same);
          if (!same) report(what, v, piece, top ? 1 : 2, "mask bits");
        }
      }
      free_all(got, 5);
      loom_graph_free(g);
    }
    if (o->op == LOOM_OP_DROPOUT && strcmp(v->name, "ref") == 0) {
      bool same = interpreted_matches(&c, cin, cwant[0]);
      CHECK(same);
      if (!same) report(what, v, piece, top ? 1 : 2, "the kernel interpreter's output");
    }
    if (nested > 0)
      check_pieces(what, v, &c, cin, cwant, n_out, false, nested - 1, attn_mask, whole_mask);
    free_all(cin, MAXIO);
    free_all(cwant, 4);
  }
}

/* The piece at the end of the first label's halves, run with o's own
 * attributes (no hook), must differ from the whole's: the checks above
 * would catch a wrong mapping. */
static void check_discriminates(const char *what, const variant *v, const one_op *o,
                                loom_tensor **in, loom_tensor **want, int32_t label) {
  loom_partition p;
  int64_t ext[LOOM_PART_MAX_LABELS];
  loom_type out[4];
  if (!partition_of(o, &p, ext, out)) return;
  loom_subop_ranges r;
  loom_subop_ranges_full(&p, ext, &r);
  r.lo[label] = ext[label] / 2;
  one_op c;
  loom_vbox in_box[MAXIO], out_box[4];
  if (!sub_op(o, &r, false, &c, in_box, out_box)) return;
  loom_tensor *cin[MAXIO] = {0}, *got[4] = {0}, *cwant = slice(want[0], &out_box[0]);
  for (int32_t i = 0; i < o->n_in; i++) cin[i] = slice(in[i], &in_box[i]);
  int32_t no;
  loom_graph *g = graph_of(&c, 0, NULL, &no);
  if (g && run_graph(g, &v->opt, o->n_in, cin, no, got)) {
    bool differs = !same_bits(got[0], cwant);
    CHECK(differs);
    if (!differs) fprintf(stderr, "  %s, %s: a piece without the hook is not caught\n", what, v->name);
  }
  loom_graph_free(g);
  free_all(got, 4);
  free_all(cin, MAXIO);
  loom_tensor_free(cwant);
}

/* ---- the variants ------------------------------------------------------- */

static const char *const fusion_names[] = {"stitch", "loop", "none", "eager"};
static const loom_fusion_mode fusions[] = {LOOM_FUSION_STITCH, LOOM_FUSION_LOOP, LOOM_FUSION_NONE,
                                           LOOM_FUSION_EAGER};
static const char *const placement_names[] = {"auto", "fused", "overlap", "sequential"};

/* ref, then cpu in every fusion mode (the op's own graph: no pass). */
static int32_t plain_variants(variant *v) {
  int32_t n = 0;
  v[n] = (variant){.opt = LOOM_SESSION_OPTIONS(.backend = "ref")};
  snprintf(v[n++].name, sizeof v->name, "ref");
  for (int32_t f = 0; f < 4; f++) {
    v[n] = (variant){.opt = LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = fusions[f])};
    snprintf(v[n++].name, sizeof v->name, "cpu %s", fusion_names[f]);
  }
  return n;
}

/* Runs o whole on v, then checks its pieces. */
static void check_op(const char *what, const one_op *o, loom_tensor **in, int32_t nested,
                     bool attn_mask, int32_t discriminate_label) {
  variant vs[8];
  int32_t nv = plain_variants(vs);
  for (int32_t k = 0; k < nv; k++) {
    loom_tensor *want[5] = {0};
    int32_t n_out;
    loom_graph *g = graph_of(o, attn_mask, NULL, &n_out);
    if (g && run_graph(g, &vs[k].opt, o->n_in, in, n_out + attn_mask, want)) {
      check_pieces(what, &vs[k], o, in, want, n_out, true, nested, attn_mask,
                   attn_mask ? want[n_out] : NULL);
      if (k == 0) check_discriminates(what, &vs[k], o, in, want, discriminate_label);
    }
    loom_graph_free(g);
    free_all(want, 5);
  }
}

/* ---- the ops -------------------------------------------------------------- */

static loom_type f32(int32_t rank, const int64_t *shape) {
  loom_type t = {.dtype = LOOM_DTYPE_F32, .rank = rank};
  memcpy(t.shape, shape, sizeof *shape * (size_t)rank);
  return t;
}

static const loom_type i64_scalar = {.dtype = LOOM_DTYPE_I64, .rank = 0};

static void test_dropout(const int64_t *shape, int32_t rank, int32_t nested) {
  one_op o = {.op = LOOM_OP_DROPOUT, .n_in = 2, .in = {f32(rank, shape), i64_scalar}};
  loom_attrs_default(LOOM_OP_DROPOUT, o.attr);
  LOOM_ATTRV_F(o.attr, dropout, p) = 0.4;
  LOOM_ATTRV_I(o.attr, dropout, seed) = 77;
  LOOM_ATTRV_I(o.attr, dropout, offset) = 5;
  loom_test_rng rng = {11};
  loom_tensor *in[2] = {random_tensor(&o.in[0], &rng), random_tensor(&o.in[1], &rng)};
  /* a real mask: some dropped, some kept */
  loom_tensor *y[1] = {0};
  loom_graph *g = graph_of(&o, 0, NULL, &(int32_t){0});
  if (g && run_graph(g, &LOOM_SESSION_OPTIONS(.backend = "ref"), 2, in, 1, y)) {
    int64_t zeros = 0, n = loom_tensor_numel(y[0]);
    for (int64_t e = 0; e < n; e++) zeros += ((float *)loom_tensor_data(y[0]))[e] == 0.0f;
    CHECK(zeros > n / 5 && zeros < n * 3 / 5);
  }
  loom_graph_free(g);
  free_all(y, 1);
  char what[64];
  snprintf(what, sizeof what, "dropout rank %d", (int)rank);
  check_op(what, &o, in, nested, false, rank - 1); /* an inner dim: no offset shift fixes it */
  free_all(in, 2);
}

static one_op attention_op(loom_op op, int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t d,
                           bool causal) {
  int64_t qs[4] = {b, h, sq, d}, ks[4] = {b, h, sk, d};
  one_op o = {.op = op};
  o.in[o.n_in++] = f32(4, qs);
  o.in[o.n_in++] = f32(4, ks);
  o.in[o.n_in++] = f32(4, ks);
  loom_attrs_default(op, o.attr);
  LOOM_ATTRV_I(o.attr, attention, causal) = causal;
  LOOM_ATTRV_F(o.attr, attention, p) = 0.3;
  LOOM_ATTRV_I(o.attr, attention, seed) = 4242;
  LOOM_ATTRV_I(o.attr, attention, offset) = 17;
  return o;
}

static void test_flash(int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t d, bool causal) {
  one_op o = attention_op(LOOM_OP_FLASH_ATTENTION, b, h, sq, sk, d, causal);
  o.in[o.n_in++] = i64_scalar;
  loom_test_rng rng = {(uint64_t)(sq * 7 + sk)};
  loom_tensor *in[4];
  for (int32_t i = 0; i < 4; i++) in[i] = random_tensor(&o.in[i], &rng);
  check_op("flash_attention", &o, in, 1, true, 1);

  /* the gradient, from the forward's o and lse (ref: exact; cpu: its own) */
  one_op gop = attention_op(LOOM_OP_FLASH_ATTENTION_GRAD, b, h, sq, sk, d, causal);
  loom_tensor *gin[7] = {in[0], in[1], in[2], NULL, NULL, NULL, in[3]};
  loom_tensor *fo[2] = {0};
  int32_t n_out;
  loom_graph *g = graph_of(&o, 0, NULL, &n_out);
  if (g && run_graph(g, &LOOM_SESSION_OPTIONS(.backend = "ref"), 4, in, 2, fo)) {
    gop.in[gop.n_in++] = type_of(fo[0]);
    gop.in[gop.n_in++] = type_of(fo[1]);
    gop.in[gop.n_in++] = type_of(fo[0]);
    gop.in[gop.n_in++] = i64_scalar;
    gin[3] = fo[0];
    gin[4] = fo[1];
    gin[5] = random_tensor(&gop.in[5], &rng);
    check_op("flash_attention_grad", &gop, gin, 1, true, 1);
    loom_tensor_free(gin[5]);
  }
  loom_graph_free(g);
  free_all(fo, 2);
  free_all(in, 4);
}

/* ---- the attention composite with gradients, every RNG placement ---------- */

/* y = attention(matmul(x, wq), k, v, base); outputs y and d(sum(y w))/d(x,
 * k, v). attr: the attention's attributes (a sub-op's, from the hook). The
 * matmul gives the overlapped mask a GEMM to run beside. */
static loom_graph *attention_graph(const loom_type *xt, const loom_type *kt, const loom_type *wqt,
                                   const loom_attr_value *attr, const variant *v) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return NULL;
  loom_value x, wq, k, vv, base, w, q, y, prod, loss, grads[3];
  loom_type yt = *xt;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 4, xt->shape, &x));
  CHECK_OK(ctx, loom_graph_input(g, "wq", LOOM_DTYPE_F32, 2, wqt->shape, &wq));
  CHECK_OK(ctx, loom_graph_input(g, "k", LOOM_DTYPE_F32, 4, kt->shape, &k));
  CHECK_OK(ctx, loom_graph_input(g, "v", LOOM_DTYPE_F32, 4, kt->shape, &vv));
  CHECK_OK(ctx, loom_graph_input(g, "base", LOOM_DTYPE_I64, 0, NULL, &base));
  CHECK_OK(ctx, loom_graph_input(g, "w", LOOM_DTYPE_F32, 4, yt.shape, &w));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){x, wq}, 0, NULL, &q));
  CHECK_OK(ctx, loom_graph_add(g, LOOM_OP_ATTENTION, 4, (int32_t[]){q, k, vv, base}, attr, 1, &y));
  CHECK_OK(ctx, loom_graph_output(g, "y", y));
  if (v->pass) {
    loom_rng_model model;
    loom_rng_model_h100(&model); /* auto: any model will do for equality */
    loom_graph *f = NULL;
    int32_t n = 0;
    CHECK_OK(ctx, loom_graph_fuse_attention(g, v->placement, &model, &f, &n));
    CHECK(n == 1);
    loom_graph_free(g);
    g = f;
    if (!g) return NULL;
    y = g->outputs[0];
    x = g->inputs[0], k = g->inputs[2], vv = g->inputs[3], w = g->inputs[5];
  }
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MUL, 2, (loom_value[]){y, w}, 0, NULL, &prod));
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_REDUCE_SUM, 1, &prod, 0, NULL, &loss));
  CHECK_OK(ctx, loom_graph_grad(g, loss, 3, (loom_value[]){x, k, vv}, grads));
  CHECK_OK(ctx, loom_graph_output(g, "dx", grads[0]));
  CHECK_OK(ctx, loom_graph_output(g, "dk", grads[1]));
  CHECK_OK(ctx, loom_graph_output(g, "dv", grads[2]));
  return g;
}

static int32_t composite_variants(variant *v) {
  int32_t n = 0;
  v[n] = (variant){.opt = LOOM_SESSION_OPTIONS(.backend = "ref")};
  snprintf(v[n++].name, sizeof v->name, "ref");
  for (int32_t f = 0; f < 4; f++) {
    v[n] = (variant){.opt = LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = fusions[f],
                                                 .attention = LOOM_ATTENTION_DECOMPOSED)};
    snprintf(v[n++].name, sizeof v->name, "cpu %s decomposed", fusion_names[f]);
    for (int32_t pl = 0; pl < 4; pl++) {
      loom_rng_placement rp = LOOM_RNG_AUTO;
      CHECK(loom_rng_placement_from_name(placement_names[pl], &rp) == LOOM_STATUS_OK);
      /* the pass in the session (the cpu backend's rewrite), or before
       * autodiff as the training builders run it */
      for (int32_t before = 0; before < 2; before++) {
        v[n] = (variant){.opt = LOOM_SESSION_OPTIONS(.backend = "cpu", .fusion = fusions[f],
                                                     .rng = rp),
                         .pass = before,
                         .placement = rp};
        snprintf(v[n++].name, sizeof v->name, "cpu %s rng %s%s", fusion_names[f],
                 placement_names[pl], before ? " (pass before autodiff)" : "");
      }
    }
  }
  return n;
}

static void test_attention_composite(int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t d) {
  one_op o = attention_op(LOOM_OP_ATTENTION, b, h, sq, sk, d, true);
  o.in[o.n_in++] = i64_scalar;
  loom_type wqt = {.dtype = LOOM_DTYPE_F32, .rank = 2, .shape = {d, d}};
  loom_test_rng rng = {99};
  /* inputs x, wq, k, v, base, w (w and y: x's shape, as Dv = D) */
  loom_tensor *in[6] = {random_tensor(&o.in[0], &rng), random_tensor(&wqt, &rng),
                        random_tensor(&o.in[1], &rng), random_tensor(&o.in[2], &rng),
                        random_tensor(&i64_scalar, &rng), random_tensor(&o.in[0], &rng)};
  loom_partition p;
  int64_t ext[LOOM_PART_MAX_LABELS];
  loom_type out[4];
  if (!partition_of(&o, &p, ext, out)) return;
  piece_list L;
  list_pieces(&p, ext, true, &L);
  int32_t heads = 0; /* a piece of the second half of the heads, all batches */
  while (heads < L.n - 1 && !(L.r[heads].lo[1] > 0 && L.r[heads].hi[0] - L.r[heads].lo[0] == ext[0]))
    heads++;
  static variant vs[64];
  int32_t nv = composite_variants(vs);
  for (int32_t k = 0; k < nv; k++) {
    loom_tensor *want[4] = {0};
    loom_graph *g = attention_graph(&o.in[0], &o.in[1], &wqt, o.attr, &vs[k]);
    bool ok = g && run_graph(g, &vs[k].opt, 6, in, 4, want);
    loom_graph_free(g);
    /* every level-1 piece on ref; on cpu a second head half (its
     * probabilities are not one run of counters), the two-label piece, and
     * a piece of a piece: the last head of that head half */
    for (int32_t r = 0; ok && r < L.n + 1; r++) {
      bool nested = r == L.n;
      if (k > 0 && !nested && r != heads && r != L.n - 1) continue;
      one_op c, cc;
      loom_vbox ib[MAXIO], ob[4], ib2[MAXIO], ob2[4];
      if (!sub_op(&o, &L.r[nested ? heads : r], true, &c, ib, ob)) continue;
      if (nested) {
        loom_partition p2;
        int64_t ext2[LOOM_PART_MAX_LABELS];
        loom_type out2[4];
        if (!partition_of(&c, &p2, ext2, out2)) continue;
        loom_subop_ranges r2;
        loom_subop_ranges_full(&p2, ext2, &r2);
        r2.lo[1] = ext2[1] - 1;
        if (!sub_op(&c, &r2, true, &cc, ib2, ob2)) continue;
        for (int32_t i = 0; i < 3; i++)
          for (int32_t dd = 0; dd < 4; dd++) {
            ib[i].start[dd] += ib2[i].start[dd];
            ib[i].end[dd] = ib[i].start[dd] + cc.in[i].shape[dd];
          }
        ob[0] = ib[0];
        c = cc;
      }
      loom_vbox xb = ib[0], kb = ib[1], vb = ib[2], full_wq = loom_vbox_full(&wqt),
                scalar = {.rank = 0};
      loom_vbox boxes[6] = {xb, full_wq, kb, vb, scalar, ob[0]};
      loom_tensor *cin[6] = {0}, *got[4] = {0};
      for (int32_t i = 0; i < 6; i++) cin[i] = slice(in[i], &boxes[i]);
      loom_graph *cg = attention_graph(&c.in[0], &c.in[1], &wqt, c.attr, &vs[k]);
      if (cg && run_graph(cg, &vs[k].opt, 6, cin, 4, got)) {
        const loom_vbox *wb[4] = {&ob[0], &xb, &kb, &vb};
        static const char *const names[4] = {"y", "dx", "dk", "dv"};
        for (int32_t t = 0; t < 4; t++) {
          loom_tensor *cw = slice(want[t], wb[t]);
          bool same = same_or_ulps(got[t], cw);
          CHECK(same);
          char piece[128];
          ranges_str(&L.r[nested ? heads : r], piece, sizeof piece);
          if (!same) report("attention", &vs[k], piece, nested ? 2 : 1, names[t]);
          loom_tensor_free(cw);
        }
      }
      loom_graph_free(cg);
      free_all(cin, 6);
      free_all(got, 4);
    }
    free_all(want, 4);
  }
  free_all(in, 6);
}

/* ---- logical indices and partitions ------------------------------------- */

/* rng/piece.h against an index computed here, element by element and
 * through its spans (the runs the cpu kernels draw at once). */
static void test_piece_index(void) {
  static const struct {
    int32_t rank;
    int64_t whole[4], at[4], shape[4], run;
  } cases[] = {
      {3, {6, 4, 9}, {2, 0, 0}, {2, 4, 9}, 72}, /* leading rows: one run */
      {3, {6, 4, 9}, {0, 2, 0}, {6, 2, 9}, 18},
      {3, {6, 4, 9}, {1, 1, 3}, {3, 2, 3}, 3},
      {4, {2, 4, 8, 12}, {1, 2, 0, 0}, {1, 2, 8, 12}, 192},
      {2, {5, 7}, {4, 6}, {1, 1}, 1},
      {1, {10}, {0}, {0}, 1}, /* empty */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int32_t r = cases[c].rank;
    loom_rng_piece p;
    char err[128];
    bool ok = loom_rng_piece_init(&p, r, cases[c].shape, r, cases[c].whole, r, cases[c].at, err,
                                  sizeof err);
    CHECK(ok);
    if (!ok) continue;
    CHECK(p.run == cases[c].run);
    int64_t numel = 1;
    for (int32_t d = 0; d < r; d++) numel *= cases[c].shape[d];
    CHECK(loom_rng_piece_is_flat(&p) == (p.run >= numel));
    bool all = true;
    for (int64_t e = 0, len; e < numel; e += len) {
      uint64_t first;
      len = loom_rng_piece_span(&p, e, 5, &first); /* at most 5: spans end early too */
      all = all && len >= 1 && len <= 5;
      for (int64_t k = 0; k < len && all; k++) {
        int64_t rest = e + k, lin = 0, stride = 1;
        for (int32_t d = r - 1; d >= 0; d--) {
          lin += (cases[c].at[d] + rest % cases[c].shape[d]) * stride;
          rest /= cases[c].shape[d];
          stride *= cases[c].whole[d];
        }
        all = first + (uint64_t)k == (uint64_t)lin && loom_rng_piece_index(&p, e + k) == (uint64_t)lin;
      }
    }
    CHECK(all);
  }
  /* no whole: the piece is the tensor, index = flat index */
  loom_rng_piece p;
  char err[128];
  CHECK(loom_rng_piece_init(&p, 2, (int64_t[]){3, 4}, 0, NULL, 0, NULL, err, sizeof err));
  CHECK(loom_rng_piece_is_flat(&p) && loom_rng_piece_index(&p, 7) == 7);
  CHECK(!loom_rng_piece_init(&p, 2, (int64_t[]){3, 4}, 2, (int64_t[]){3, 4}, 2,
                             (int64_t[]){0, 1}, err, sizeof err));
  CHECK(strstr(err, "dim 1") != NULL);
}

/* The annotations: dropout every dim; the attention ops their leading
 * dims, on every operand and result carrying them; with a mask input, and
 * the mask itself (flat bits), replicate only. */
static void test_partitions(void) {
  int64_t qs[4] = {2, 3, 8, 4}, ks[4] = {2, 3, 12, 4};
  static const struct {
    loom_op op;
    int32_t mask;
    const char *want;
  } cases[] = {
      {LOOM_OP_DROPOUT, 0, "a b c,  -> a b c"},
      {LOOM_OP_FLASH_ATTENTION, 0, "a b _ _, a b _ _, a b _ _,  -> a b _ _, a b _"},
      {LOOM_OP_FLASH_ATTENTION, 1, "replicate"},
      {LOOM_OP_FLASH_ATTENTION_GRAD, 0,
       "a b _ _, a b _ _, a b _ _, a b _ _, a b _, a b _ _,  -> a b _ _, a b _ _, a b _ _"},
      {LOOM_OP_ATTENTION, 0, "a b _ _, a b _ _, a b _ _,  -> a b _ _"},
      {LOOM_OP_DROPOUT_MASK, 0, "replicate"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    one_op o = {.op = cases[c].op};
    loom_attrs_default(o.op, o.attr);
    if (o.op == LOOM_OP_DROPOUT) {
      o.in[o.n_in++] = f32(3, (int64_t[]){6, 4, 9});
    } else if (o.op == LOOM_OP_DROPOUT_MASK) {
      LOOM_ATTRV_I(o.attr, dropout_mask, numel) = 24;
    } else {
      o = attention_op(o.op, 2, 3, 8, 12, 4, false);
      if (o.op == LOOM_OP_FLASH_ATTENTION_GRAD) {
        o.in[o.n_in++] = f32(4, qs);
        o.in[o.n_in++] = f32(3, qs);
        o.in[o.n_in++] = f32(4, qs);
      }
      (void)ks;
    }
    o.in[o.n_in++] = i64_scalar;
    loom_type out[4];
    int32_t n_out;
    loom_graph *g = graph_of(&o, cases[c].mask, out, &n_out);
    if (!g) continue;
    const loom_node *n = &g->nodes[g->n_nodes - 1];
    loom_type in[MAXIO];
    for (int32_t i = 0; i < n->n_in; i++) in[i] = g->values[n->in[i]].type;
    loom_partition p;
    loom_subop_partition(n, in, out, &p);
    char buf[256];
    loom_partition_str(&p, buf, sizeof buf);
    bool same = strcmp(buf, cases[c].want) == 0;
    CHECK(same);
    if (!same) fprintf(stderr, "  %s partition: '%s', want '%s'\n", loom_op_name(o.op), buf, cases[c].want);
    loom_graph_free(g);
  }
}

/* ---- bad attributes ------------------------------------------------------ */

static void test_errors(void) {
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  if (!g) return;
  loom_value x, y;
  CHECK_OK(ctx, loom_graph_input(g, "x", LOOM_DTYPE_F32, 2, (int64_t[]){4, 6}, &x));
  loom_attr big = {.name = "whole", .kind = LOOM_ATTR_INTS, .n_ints = 2, .ints = (int64_t[]){4, 8}};
  loom_attr at = {.name = "at", .kind = LOOM_ATTR_INTS, .n_ints = 2, .ints = (int64_t[]){0, 2}};
  loom_attr rank = {.name = "whole", .kind = LOOM_ATTR_INTS, .n_ints = 1, .ints = (int64_t[]){24}};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_DROPOUT, 1, &x, 2, (loom_attr[]){big, at}, &y));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_DROPOUT, 1, &x, 1, &at, &y)); /* 3 + 6 > 6 */
  CHECK(strstr(loom_ctx_error(ctx), "does not fit") != NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_DROPOUT, 1, &x, 1, &rank, &y));
  CHECK(strstr(loom_ctx_error(ctx), "'whole' has 1 dims") != NULL);
  loom_attr numel = {.name = "numel", .kind = LOOM_ATTR_INT, .i = 24};
  loom_attr shape = {.name = "shape", .kind = LOOM_ATTR_INTS, .n_ints = 2, .ints = (int64_t[]){4, 5}};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_graph_op(g, LOOM_OP_DROPOUT_MASK, 0, NULL, 2, (loom_attr[]){numel, shape}, &y));
  CHECK(strstr(loom_ctx_error(ctx), "'shape' has 20 elements") != NULL);
  loom_graph_free(g);
}

int main(void) {
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  if (!ctx) return 1;
  test_errors();
  test_piece_index();
  test_partitions();
  const char *quick = getenv("LOOM_TEST_QUICK"); /* 1: the unit checks only */
  if (quick && quick[0] == '1') {
    loom_ctx_free(ctx);
    return loom_test_finish("test_piece_rng");
  }
  test_dropout((int64_t[]){6, 4, 9}, 3, 1);
  test_dropout((int64_t[]){4, 6, 600}, 3, 0); /* runs across the cpu kernels' chunks */
  test_flash(6, 4, 8, 12, 4, true);
  test_attention_composite(2, 4, 8, 8, 4);
  loom_ctx_free(ctx);
  return loom_test_finish("test_piece_rng");
}
