/* The string map of core/: against a plain array under random puts,
 * replaces and removes (the backward-shift deletion keeps every other key
 * reachable), keys that are not NUL-terminated, and 100k names in a graph,
 * its outputs and the text IR parser (issue 8 bug 7: lookups by name were
 * linear scans). */
#include "common.h"

#include "core/strmap.h"
#include "ir/graph.h"
#include "ir/text_ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KEYS = 300 };

static void test_against_array(void) {
  loom_strmap m = {0};
  int32_t want[KEYS];
  for (int i = 0; i < KEYS; i++) want[i] = -1;
  loom_test_rng r = {12345};
  char key[32];
  for (int step = 0; step < 20000; step++) {
    int k = (int)loom_test_uniform(&r, 0, KEYS);
    int len = snprintf(key, sizeof key, "key%d", k);
    if (loom_test_uniform(&r, 0, 1) < 0.4) {
      loom_strmap_remove(&m, key, (size_t)len);
      want[k] = -1;
    } else {
      CHECK(loom_strmap_put(&m, key, (size_t)len, step));
      want[k] = step;
    }
    if (step % 97 == 0) {
      size_t n = 0;
      for (int i = 0; i < KEYS; i++) {
        len = snprintf(key, sizeof key, "key%d", i);
        CHECK(loom_strmap_get(&m, key, (size_t)len) == want[i]);
        n += want[i] >= 0;
      }
      CHECK(m.n == n);
    }
  }
  /* lengths, not NULs, delimit keys */
  CHECK(loom_strmap_put(&m, "abcdef", 3, 7));
  CHECK(loom_strmap_get(&m, "abcxyz", 3) == 7);
  CHECK(loom_strmap_get(&m, "abcdef", 4) == -1);
  CHECK(loom_strmap_get(&m, "", 0) == -1);
  CHECK(loom_strmap_put(&m, "", 0, 9));
  CHECK(loom_strmap_get(&m, "", 0) == 9);
  loom_strmap_free(&m);
  CHECK(m.n == 0 && loom_strmap_get(&m, "abc", 3) == -1);
}

enum { BIG = 100000 };

static void test_big_graph(loom_ctx *ctx) {
  /* 100k named nodes and 100k outputs, through the text IR parser */
  size_t cap = (size_t)BIG * 64, len = 0;
  char *text = malloc(cap);
  len += (size_t)snprintf(text + len, cap - len, "input %%x : f32[2]\n");
  len += (size_t)snprintf(text + len, cap - len, "%%v0 = neg(%%x)\n");
  for (int i = 1; i < BIG; i++)
    len += (size_t)snprintf(text + len, cap - len, "%%v%d = neg(%%v%d)\n", i, i - 1);
  for (int i = 0; i < BIG; i += 2)
    len += (size_t)snprintf(text + len, cap - len, "output o%d = %%v%d\n", i, i);
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_graph_parse_text(ctx, text, len, &g));
  free(text);
  if (!g) return;
  CHECK(g->n_nodes == BIG && g->n_outputs == BIG / 2);
  char nm[32];
  for (int i = 0; i < BIG; i++) {
    snprintf(nm, sizeof nm, "v%d", i);
    int32_t v = loom_graph_find_value(g, nm);
    CHECK(v >= 0 && v == g->nodes[i].out[0]);
  }
  CHECK(loom_graph_find_value(g, "x") == g->inputs[0]);
  CHECK(loom_graph_find_value(g, "v100000") == -1);
  /* a name in use is refused; a rename frees the old name */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_value_set_name(g, g->nodes[5].out[0], "v99999"));
  CHECK_OK(ctx, loom_value_set_name(g, g->nodes[7].out[0], "seven"));
  CHECK(loom_graph_find_value(g, "v7") == -1);
  CHECK(loom_graph_find_value(g, "seven") == g->nodes[7].out[0]);
  CHECK_OK(ctx, loom_value_set_name(g, g->nodes[8].out[0], "v7"));
  CHECK(loom_graph_find_value(g, "v7") == g->nodes[8].out[0]);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_graph_output(g, "o99998", 0));
  CHECK_OK(ctx, loom_graph_output(g, "o99999", 0));
  CHECK_OK(ctx, loom_graph_verify(g));
  loom_graph_free(g);
}

int main(void) {
  loom_ctx *ctx = NULL;
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  test_against_array();
  test_big_graph(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_strmap");
}
