// libFuzzer target over the plan-file parser (loom_plan_parse,
// src/parallel/plan_text.h), over a fixed small graph. Properties: no
// crash or sanitizer report on any bytes; a rejected input leaves a
// "LINE:COL: ..." message and no plan; an accepted plan is written out,
// parses back to an equal plan (loom_plan_same) and writes identically.
// Built by `make fuzz`; replayed over tests/fuzz/corpus/plan_text by
// `make test`.
#include "parallel/plan_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;
static loom_graph *graph;

static const char graph_text[] =
    "input %x : f32[8, 16]\n"
    "param %w1 : f32[16, 32]\n"
    "param %b1 : f32[32]\n"
    "param %w2 : f32[32, 4]\n"
    "%h = matmul(%x, %w1)\n"
    "%hb = add(%h, %b1)\n"
    "%r = relu(%hb)\n"
    "%y = matmul(%r, %w2)\n"
    "%s = reduce_sum(%y)\n"
    "%nw = neg(%w2)\n"
    "output y = %y\n"
    "output s = %s\n"
    "output \"new w2\" = %nw\n";

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_plan_text: %s: %s\n", what, detail);
  __builtin_trap();
}

static char *write_plan(const loom_plan *p) {
  loom_strbuf b = {0};
  if (loom_plan_write(p, &b) != LOOM_STATUS_OK) fail("a parsed plan does not write", loom_ctx_error(ctx));
  char *text = loom_strbuf_take(&b);
  if (!text) fail("write", "out of memory");
  return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx && loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 0;
  if (!graph && loom_graph_parse(ctx, graph_text, &graph) != LOOM_STATUS_OK)
    fail("the graph", loom_ctx_error(ctx));
  loom_plan *p = NULL;
  loom_status st = loom_plan_parse(ctx, graph, (const char *)data, size, &p);
  if (st != LOOM_STATUS_OK) {
    int line = 0, col = 0;
    if (p) fail("a failed parse returned a plan", loom_ctx_error(ctx));
    if (st != LOOM_STATUS_OUT_OF_MEMORY &&
        (sscanf(loom_ctx_error(ctx), "%d:%d: ", &line, &col) != 2 || line < 1 || col < 1))
      fail("error without a position", loom_ctx_error(ctx));
    return 0;
  }
  char *text = write_plan(p);
  loom_plan *q = NULL;
  if (loom_plan_parse(ctx, graph, text, strlen(text), &q) != LOOM_STATUS_OK)
    fail("a written plan does not parse", loom_ctx_error(ctx));
  char why[256];
  if (!loom_plan_same(p, q, why, sizeof why)) fail("parse(write(p)) != p", why);
  char *again = write_plan(q);
  if (strcmp(text, again) != 0) fail("writing is not stable", again);
  free(again);
  free(text);
  loom_plan_free(q);
  loom_plan_free(p);
  return 0;
}
