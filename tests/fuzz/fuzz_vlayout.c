// libFuzzer target over the layout parser (loom_vlayout_parse,
// src/parallel/vtensor.h). The first byte picks a tensor type from a small
// table; the rest is the layout text. Properties: no crash or sanitizer
// report; a rejected input leaves a "LINE:COL: ..." message; an accepted
// layout prints and parses back to an equal layout, and its pieces cover
// the tensor exactly once per value part and replica. Built by `make fuzz`;
// replayed over tests/fuzz/corpus/vlayout by `make test`.
#include "parallel/vtensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_vlayout: %s: %s\n", what, detail);
  __builtin_trap();
}

static const loom_type types[] = {
    {.dtype = LOOM_DTYPE_F32, .rank = 2, .shape = {4, 6}},
    {.dtype = LOOM_DTYPE_F16, .rank = 3, .shape = {8, 4, 2}},
    {.dtype = LOOM_DTYPE_F32, .rank = 0},
    {.dtype = LOOM_DTYPE_I32, .rank = 1, .shape = {0}},
    {.dtype = LOOM_DTYPE_F32, .rank = 4, .shape = {2, 3, 4, 5}},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx && loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 0;
  if (size == 0) return 0;
  const loom_type *t = &types[data[0] % (sizeof types / sizeof types[0])];
  loom_vlayout l, back;
  loom_status st = loom_vlayout_parse(ctx, t, (const char *)data + 1, size - 1, 1, 1, &l);
  if (st != LOOM_STATUS_OK) {
    int line = 0, col = 0;
    if (st != LOOM_STATUS_PARSE) fail("not a parse error", loom_ctx_error(ctx));
    if (sscanf(loom_ctx_error(ctx), "%d:%d: ", &line, &col) != 2 || line < 1 || col < 1)
      fail("error without a position", loom_ctx_error(ctx));
    return 0;
  }
  char s[512];
  loom_vlayout_str(&l, s, sizeof s);
  if (loom_vlayout_parse(ctx, t, s, strlen(s), 1, 1, &back) != LOOM_STATUS_OK)
    fail("printed layout does not parse", loom_ctx_error(ctx));
  if (!loom_vlayout_equal(&l, &back)) fail("parse(print(l)) != l", s);
  /* Keep each run quick: the cover check is quadratic in the pieces. */
  if (l.n_pieces > 256) return 0;
  loom_vpiece pieces[256];
  for (int32_t i = 0; i < l.n_pieces; i++) loom_vlayout_piece(&l, i, &pieces[i]);
  if (loom_vpieces_check_cover(ctx, t, l.n_pieces, pieces) != LOOM_STATUS_OK)
    fail("a layout's pieces do not cover its tensor", loom_ctx_error(ctx));
  return 0;
}
