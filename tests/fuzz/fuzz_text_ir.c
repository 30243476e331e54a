// libFuzzer target over the text IR parser (loom_graph_parse_text).
// Properties: no crash or sanitizer report on any bytes; a rejected input
// leaves a "LINE:COL: ..." message and no graph; an accepted one is a
// graph that verifies and whose printed form parses back and prints
// identically. Built by `make fuzz` (clang, libFuzzer); replayed over
// tests/fuzz/corpus/text_ir by `make test` (tests/fuzz/replay.c).
#include "ir/graph.h"
#include "ir/text_ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static loom_ctx *ctx;

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_text_ir: %s: %s\n", what, detail);
  __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx && loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 0;
  loom_graph *g = NULL;
  loom_status st = loom_graph_parse_text(ctx, (const char *)data, size, &g);
  if (st != LOOM_STATUS_OK) {
    int line = 0, col = 0;
    if (g) fail("a failed parse returned a graph", loom_ctx_error(ctx));
    if (st != LOOM_STATUS_OUT_OF_MEMORY &&
        sscanf(loom_ctx_error(ctx), "%d:%d: ", &line, &col) != 2)
      fail("error without a position", loom_ctx_error(ctx));
    return 0;
  }
  if (loom_graph_verify(g) != LOOM_STATUS_OK) fail("parsed graph fails verify", loom_ctx_error(ctx));
  char *t1 = NULL, *t2 = NULL;
  loom_graph *g2 = NULL;
  if (loom_graph_print(g, &t1) != LOOM_STATUS_OK) fail("print", loom_ctx_error(ctx));
  if (loom_graph_parse(ctx, t1, &g2) != LOOM_STATUS_OK) fail("printed text does not parse", loom_ctx_error(ctx));
  if (loom_graph_print(g2, &t2) != LOOM_STATUS_OK) fail("print 2", loom_ctx_error(ctx));
  if (strcmp(t1, t2) != 0) fail("print(parse(print(g))) != print(g)", t1);
  loom_free(t1);
  loom_free(t2);
  loom_graph_free(g);
  loom_graph_free(g2);
  return 0;
}
