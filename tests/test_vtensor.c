/*
 * vTensors (src/parallel/vtensor.h): layouts from R/V/D factors, their
 * pieces, box intersection, the exact-cover check, the pieces a region
 * needs, piece bytes, and the text form (round trips and malformed layouts
 * with their LINE:COL).
 */
#include "common.h"

#include "ir/text_ir.h"
#include "parallel/vtensor.h"

#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;
static const loom_type T46 = {.dtype = LOOM_DTYPE_F32, .rank = 2, .shape = {4, 6}};

static loom_vlayout layout(const loom_type *t, const char *text) {
  loom_vlayout l;
  memset(&l, 0, sizeof l);
  CHECK_OK(ctx, loom_vlayout_parse(ctx, t, text, strlen(text), 1, 1, &l));
  return l;
}

static bool box_is(const loom_vbox *b, int64_t s0, int64_t e0, int64_t s1, int64_t e1) {
  return b->rank == 2 && b->start[0] == s0 && b->end[0] == e0 && b->start[1] == s1 &&
         b->end[1] == e1;
}

static void all_pieces(const loom_vlayout *l, loom_vpiece *out) {
  for (int32_t i = 0; i < l->n_pieces; i++) loom_vlayout_piece(l, i, &out[i]);
}

static void test_pieces(void) {
  loom_vpiece p[16];
  loom_vlayout d0 = layout(&T46, "D(0,2)");
  CHECK(d0.n_pieces == 2);
  all_pieces(&d0, p);
  CHECK(box_is(&p[0].box, 0, 2, 0, 6) && box_is(&p[1].box, 2, 4, 0, 6));
  CHECK(p[1].value_n == 1 && p[1].replicas == 1);

  loom_vlayout d1 = layout(&T46, "D(1,3)");
  all_pieces(&d1, p);
  CHECK(d1.n_pieces == 3 && box_is(&p[2].box, 0, 4, 4, 6));

  loom_vlayout v = layout(&T46, "V(2)");
  all_pieces(&v, p);
  CHECK(v.n_pieces == 2 && box_is(&p[1].box, 0, 4, 0, 6) && p[1].value_k == 1 &&
        p[1].value_n == 2);

  /* Leftmost factor most significant: D(0,2)R(2) numbers replicas inside halves. */
  loom_vlayout dr = layout(&T46, "D(0,2)R(2)");
  all_pieces(&dr, p);
  CHECK(dr.n_pieces == 4);
  CHECK(box_is(&p[1].box, 0, 2, 0, 6) && p[1].replica == 1 && p[1].replicas == 2);
  CHECK(box_is(&p[2].box, 2, 4, 0, 6) && p[2].replica == 0);
  loom_vlayout rd = layout(&T46, "R(2)D(0,2)");
  all_pieces(&rd, p);
  CHECK(box_is(&p[1].box, 2, 4, 0, 6) && p[1].replica == 0 && p[2].replica == 1);

  loom_vlayout dd = layout(&T46, "D(0,2)D(1,2)");
  all_pieces(&dd, p);
  CHECK(dd.n_pieces == 4 && box_is(&p[1].box, 0, 2, 3, 6) && box_is(&p[2].box, 2, 4, 0, 3));

  char s[128];
  loom_vlayout dvr = layout(&T46, "D(1,3)V(2)R(2)");
  loom_vlayout_piece(&dvr, 11, &p[0]);
  CHECK(strcmp(loom_vpiece_str(&p[0], s, sizeof s), "[0:4, 4:6] v1/2 r1/2") == 0);
  loom_vlayout_piece(&d0, 1, &p[0]);
  CHECK(strcmp(loom_vpiece_str(&p[0], s, sizeof s), "[2:4, 0:6]") == 0);

  /* A rank-0 tensor takes V and R but no D. */
  loom_type scalar = {.dtype = LOOM_DTYPE_F32, .rank = 0};
  loom_vlayout sv = layout(&scalar, "V(4)");
  loom_vlayout_piece(&sv, 3, &p[0]);
  CHECK(sv.n_pieces == 4 && p[0].value_k == 3 && loom_vbox_numel(&p[0].box) == 1);
}

static void test_intersect_and_bytes(void) {
  loom_vbox a = {.rank = 2, .start = {0, 0}, .end = {2, 4}};
  loom_vbox b = {.rank = 2, .start = {1, 3}, .end = {4, 6}};
  loom_vbox c = {.rank = 2, .start = {2, 0}, .end = {4, 6}};
  loom_vbox r;
  CHECK(loom_vbox_intersect(&a, &b, &r) && box_is(&r, 1, 2, 3, 4));
  CHECK(loom_vbox_numel(&r) == 1);
  CHECK(!loom_vbox_intersect(&a, &c, &r) && loom_vbox_empty(&r) && loom_vbox_numel(&r) == 0);
  CHECK(loom_vbox_intersect(&b, &c, &r) && box_is(&r, 2, 4, 3, 6));

  loom_vpiece p;
  loom_vlayout dd = layout(&T46, "D(0,2)D(1,3)");
  loom_vlayout_piece(&dd, 5, &p);
  CHECK(box_is(&p.box, 2, 4, 4, 6) && loom_vpiece_bytes(&T46, &p) == 4 * 4);
  loom_vlayout v = layout(&T46, "V(2)");
  loom_vlayout_piece(&v, 0, &p);
  CHECK(loom_vpiece_bytes(&T46, &p) == 24 * 4); /* a partial sum is full-sized */
  loom_type h = {.dtype = LOOM_DTYPE_F16, .rank = 3, .shape = {8, 4, 2}};
  loom_vlayout hd = layout(&h, "D(2,2)R(3)D(0,4)");
  loom_vlayout_piece(&hd, 23, &p);
  CHECK(hd.n_pieces == 24 && loom_vpiece_bytes(&h, &p) == 2 * 4 * 1 * 2);
  CHECK(p.box.start[0] == 6 && p.box.start[2] == 1 && p.replica == 2);
  loom_type pt = loom_vpiece_type(&h, &p);
  CHECK(pt.dtype == LOOM_DTYPE_F16 && pt.rank == 3 && pt.shape[0] == 2 && pt.shape[1] == 4 &&
        pt.shape[2] == 1);
}

static void test_cover(void) {
  const char *good[] = {"D(0,2)", "D(1,3)", "V(2)", "R(2)", "D(0,2)R(2)", "D(0,2)D(1,2)",
                        "V(2)D(1,6)R(2)", "R(1)"};
  loom_vpiece p[32];
  for (int i = 0; i < LOOM_ARRAY_LEN(good); i++) {
    loom_vlayout l = layout(&T46, good[i]);
    all_pieces(&l, p);
    CHECK_OK(ctx, loom_vpieces_check_cover(ctx, &T46, l.n_pieces, p));
  }
  /* A gap: drop a quarter of D(0,2)D(1,2); the message names an uncovered element. */
  loom_vlayout dd = layout(&T46, "D(0,2)D(1,2)");
  all_pieces(&dd, p);
  loom_vpiece gap[3] = {p[0], p[1], p[3]};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vpieces_check_cover(ctx, &T46, 3, gap));
  CHECK(strstr(loom_ctx_error(ctx), "18 of 24") != NULL);
  CHECK(strstr(loom_ctx_error(ctx), "nothing holds [2:3, 0:1]") != NULL);
  /* An overlap: a piece given twice. */
  loom_vpiece twice[5] = {p[0], p[1], p[2], p[3], p[2]};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vpieces_check_cover(ctx, &T46, 5, twice));
  CHECK(strstr(loom_ctx_error(ctx), "pieces 2 ([2:4, 0:3]) and 4 ([2:4, 0:3]) overlap") != NULL);
  /* A partial overlap between hand-made boxes. */
  loom_vpiece h[2] = {{.box = {.rank = 2, .start = {0, 0}, .end = {3, 6}}, .value_n = 1, .replicas = 1},
                      {.box = {.rank = 2, .start = {2, 0}, .end = {4, 6}}, .value_n = 1, .replicas = 1}};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vpieces_check_cover(ctx, &T46, 2, h));
  CHECK(strstr(loom_ctx_error(ctx), "overlap in [2:3, 0:6]") != NULL);
  /* Replicas: one replica missing its lower half. */
  loom_vlayout dr = layout(&T46, "D(0,2)R(2)");
  all_pieces(&dr, p);
  loom_vpiece norep[3] = {p[0], p[1], p[3]};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vpieces_check_cover(ctx, &T46, 3, norep));
  CHECK(strstr(loom_ctx_error(ctx), "value part 0, replica 0") != NULL);
  /* Pieces of two layouts with different value counts do not mix. */
  loom_vlayout v = layout(&T46, "V(2)");
  loom_vpiece mix[3];
  loom_vlayout_piece(&dd, 0, &mix[0]);
  loom_vlayout_piece(&v, 0, &mix[1]);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vpieces_check_cover(ctx, &T46, 2, mix));
  /* Outside the tensor. */
  loom_vpiece out = {.box = {.rank = 2, .start = {0, 0}, .end = {5, 6}}, .value_n = 1, .replicas = 1};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vpieces_check_cover(ctx, &T46, 1, &out));
  CHECK(strstr(loom_ctx_error(ctx), "not inside the tensor f32[4, 6]") != NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vpieces_check_cover(ctx, &T46, 0, p));
  /* A mixed but exact tiling from two layouts' pieces: top half of D(0,2), bottom two of D(0,2)D(1,2). */
  loom_vlayout d0 = layout(&T46, "D(0,2)");
  loom_vlayout_piece(&d0, 0, &mix[0]);
  loom_vlayout_piece(&dd, 2, &mix[1]);
  loom_vlayout_piece(&dd, 3, &mix[2]);
  CHECK_OK(ctx, loom_vpieces_check_cover(ctx, &T46, 3, mix));
}

/* The pieces of producer layout `from` that piece `i` of `to` needs, as their indices. */
static int32_t needs(const char *from, const char *to, int32_t i, int32_t *idx, loom_vbox *boxes) {
  loom_vlayout a = layout(&T46, from), b = layout(&T46, to);
  loom_vpiece p;
  loom_vlayout_piece(&b, i, &p);
  loom_vneed *list = NULL;
  int32_t n = -1;
  CHECK_OK(ctx, loom_vlayout_needs(ctx, &a, &p.box, &list, &n));
  for (int32_t k = 0; k < n; k++) {
    idx[k] = list[k].piece;
    if (boxes) boxes[k] = list[k].box;
  }
  free(list);
  return n;
}

static void test_needs(void) {
  int32_t idx[32];
  loom_vbox boxes[32];
  /* Row halves from column thirds: each half needs all three, a third of it from each. */
  CHECK(needs("D(1,3)", "D(0,2)", 1, idx, boxes) == 3);
  CHECK(idx[0] == 0 && idx[1] == 1 && idx[2] == 2);
  CHECK(box_is(&boxes[1], 2, 4, 2, 4));
  /* Same layout: exactly the matching piece. */
  CHECK(needs("D(0,2)", "D(0,2)", 1, idx, NULL) == 1 && idx[0] == 1);
  /* Whole from halves (all-gather). */
  CHECK(needs("D(0,2)", "R(2)", 0, idx, NULL) == 2 && idx[0] == 0 && idx[1] == 1);
  /* Whole from partial sums (all-reduce): every value part. */
  CHECK(needs("V(2)", "R(1)", 0, idx, NULL) == 2);
  /* A quarter from replicated halves: both replicas of the top half are alternatives. */
  CHECK(needs("D(0,2)R(2)", "D(0,2)D(1,2)", 1, idx, boxes) == 2);
  CHECK(idx[0] == 0 && idx[1] == 1 && box_is(&boxes[0], 0, 2, 3, 6));
  /* Finer to coarser and back: D(1,6) piece 3 lies in D(1,2)'s piece 1. */
  CHECK(needs("D(1,2)", "D(1,6)", 3, idx, boxes) == 1 && idx[0] == 1 &&
        box_is(&boxes[0], 0, 4, 3, 4));
  CHECK(needs("D(1,6)", "D(1,2)", 1, idx, NULL) == 3 && idx[0] == 3 && idx[2] == 5);
  /* A region outside the tensor is an error, not an empty answer. */
  loom_vlayout a = layout(&T46, "D(0,2)");
  loom_vbox bad = {.rank = 2, .start = {0, 0}, .end = {4, 7}};
  loom_vneed *list = NULL;
  int32_t n = 0;
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vlayout_needs(ctx, &a, &bad, &list, &n));
  CHECK(list == NULL && n == 0);
}

static void test_text(void) {
  const char *texts[] = {"D(0,2)", "D(1,3)", "V(2)", "R(2)", "D(0,2)R(2)", "D(0,2)D(1,2)",
                         "R(1)", "V(2)D(1,6)R(2)", "D(1,1)"};
  char s[256];
  for (int i = 0; i < LOOM_ARRAY_LEN(texts); i++) {
    loom_vlayout l = layout(&T46, texts[i]), back;
    CHECK(strcmp(loom_vlayout_str(&l, s, sizeof s), texts[i]) == 0);
    CHECK_OK(ctx, loom_vlayout_parse(ctx, &T46, s, strlen(s), 1, 1, &back));
    CHECK(loom_vlayout_equal(&l, &back));
  }
  /* Spaces and a comment are allowed, as in the text IR. */
  loom_vlayout sp = layout(&T46, " D( 0 , 2 )  R(2)  # replicated halves\n");
  CHECK(strcmp(loom_vlayout_str(&sp, s, sizeof s), "D(0,2)R(2)") == 0);
  /* Built from factors, printed the same way. */
  loom_vfactor f[2] = {{LOOM_VF_R, -1, 2}, {LOOM_VF_D, 1, 3}};
  loom_vlayout made;
  CHECK_OK(ctx, loom_vlayout_make(ctx, &T46, 2, f, &made));
  CHECK(strcmp(loom_vlayout_str(&made, s, sizeof s), "R(2)D(1,3)") == 0 && made.n_pieces == 6);

  struct {
    const char *text, *where, *says;
  } bad[] = {
      {"", "1:1:", "expected a layout"},
      {"D(0,3)", "1:1:", "does not split evenly"},
      {"D(1,2)D(0,8)", "1:7:", "more parts than dim 0's extent 4"},
      {"D(2,2)", "1:1:", "rank-2 tensor"},
      {"D(0,2)D(0,2)", "1:7:", "dim 0 is split twice"},
      {"V(2)R(2)V(2)", "1:9:", "V given twice"},
      {"R(0)", "1:3:", "part count 0 is outside"},
      {"D(-1,2)", "1:3:", "a dim -1 is outside"},
      {"D(0 2)", "1:5:", "expected ','"},
      {"X(2)", "1:1:", "expected a layout"},
      {"D(0,2)X(2)", "1:7:", "expected a factor"},
      {"D(0,2) 5", "1:8:", "expected a factor"},
      {"D(0,2", "1:6:", "expected ')'"},
      {"R[2]", "1:2:", "expected '('"},
      {"D(0,2)\nR(2)", "2:1:", "expected the end of the layout"},
      {"R(99999999999999999999)", "1:3:", "outside"},
      {"R(1.5)", "1:3:", "part count"},
      {"R(2)%", "1:5:", NULL},
  };
  for (int i = 0; i < LOOM_ARRAY_LEN(bad); i++) {
    loom_vlayout l;
    loom_status st = loom_vlayout_parse(ctx, &T46, bad[i].text, strlen(bad[i].text), 1, 1, &l);
    const char *msg = loom_ctx_error(ctx);
    bool ok = st == LOOM_STATUS_PARSE && strncmp(msg, bad[i].where, strlen(bad[i].where)) == 0 &&
              (!bad[i].says || strstr(msg, bad[i].says));
    CHECK(ok);
    if (!ok) fprintf(stderr, "  '%s' -> %s: %s\n", bad[i].text, loom_status_name(st), msg);
  }
  /* Positions count from where a plan file says the layout starts. */
  loom_vlayout l;
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_vlayout_parse(ctx, &T46, "R(2)D(0,3)", 10, 7, 20, &l));
  CHECK(strncmp(loom_ctx_error(ctx), "7:24:", 5) == 0);
  /* Inside a larger line (a plan file): the layout ends at the first token
   * that does not start a factor, which is left for the caller. */
  const char *line = "layout %x D(0,2) R(2) on 0\n";
  loom_lexer lx;
  loom_token tok;
  loom_lexer_init(&lx, line, strlen(line));
  for (int i = 0; i < 3; i++) loom_lexer_next(&lx, &tok); /* layout, %x, D */
  CHECK_OK(ctx, loom_vlayout_parse_lexer(ctx, &T46, &lx, &tok, &l));
  CHECK(strcmp(loom_vlayout_str(&l, s, sizeof s), "D(0,2)R(2)") == 0);
  CHECK(tok.kind == LOOM_TOK_IDENT && strcmp(tok.text, "on") == 0 && tok.col == 23);
  const char *bad_line = "layout %x R(2) D(1,4)\n";
  loom_lexer_init(&lx, bad_line, strlen(bad_line));
  for (int i = 0; i < 3; i++) loom_lexer_next(&lx, &tok);
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_vlayout_parse_lexer(ctx, &T46, &lx, &tok, &l));
  CHECK(strncmp(loom_ctx_error(ctx), "1:16:", 5) == 0);
  /* Errors from make, without parsing. */
  loom_vfactor zero = {LOOM_VF_V, -1, 0};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vlayout_make(ctx, &T46, 1, &zero, &l));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vlayout_make(ctx, &T46, 0, f, &l));
  loom_vfactor huge[2] = {{LOOM_VF_V, -1, 1 << 11}, {LOOM_VF_R, -1, 1 << 10}};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vlayout_make(ctx, &T46, 2, huge, &l));
  CHECK(strstr(loom_ctx_error(ctx), "more than 1048576 pieces") != NULL);
  loom_vfactor widest[2] = {{LOOM_VF_R, -1, 1 << 20}, {LOOM_VF_V, -1, INT32_MAX}};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_vlayout_make(ctx, &T46, 2, widest, &l));
  CHECK(strstr(loom_ctx_error(ctx), "more than 1048576 pieces") != NULL);
}

int main(void) {
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  test_pieces();
  test_intersect_and_bytes();
  test_cover();
  test_needs();
  test_text();
  loom_ctx_free(ctx);
  return loom_test_finish("test_vtensor");
}
