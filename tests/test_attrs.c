/* Attribute slots (ops/attrs.h): every op's spec comes from its list, the
 * slots agree with the names the user gives, typed reads see the values
 * set by name, and a read through another op's slots is caught. */
#include "common.h"

#include "ops/op.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static bool has_list[LOOM_OP_COUNT];

/* For one attribute of one list: the op's spec has it at its slot. */
#define CHECK_ATTR(OP, NAME, KIND, ...)                                                            \
  do {                                                                                             \
    loom_op op_;                                                                                   \
    CHECK(loom_op_from_name(#OP, &op_) == LOOM_STATUS_OK);                                         \
    const loom_op_def *d_ = loom_op_get(op_);                                                      \
    CHECK(loom_op_attr_index(op_, #NAME) == LOOM_ATTR_SLOT_##OP##_##NAME);                         \
    CHECK(d_->attrs[LOOM_ATTR_SLOT_##OP##_##NAME].kind == LOOM_ATTR_##KIND);                       \
  } while (0);

#define CHECK_OP(OP)                                                                               \
  do {                                                                                             \
    loom_op op_;                                                                                   \
    CHECK(loom_op_from_name(#OP, &op_) == LOOM_STATUS_OK);                                         \
    CHECK(loom_op_get(op_)->n_attrs == LOOM_ATTR_COUNT(OP));                                       \
    has_list[op_] = true;                                                                          \
    LOOM_ATTR_LIST_##OP(CHECK_ATTR, OP)                                                            \
  } while (0);

static void test_specs_follow_lists(void) {
  LOOM_ATTR_OPS(CHECK_OP)
  /* An op without a list has no attributes: none was written by hand. */
  for (int op = 0; op < LOOM_OP_COUNT; op++)
    if (!has_list[op]) {
      CHECK(loom_op_get((loom_op)op)->n_attrs == 0);
      if (loom_op_get((loom_op)op)->n_attrs) fprintf(stderr, "  op %s\n", loom_op_name(op));
    }
}

/* Values given by name through the public API are read back by slot. */
static void test_typed_reads(void) {
  loom_ctx *ctx = NULL;
  loom_graph *g = NULL;
  CHECK_OK(ctx, loom_ctx_new(&ctx));
  CHECK_OK(ctx, loom_graph_new(ctx, &g));
  loom_value a, b, y, r, dr;
  CHECK_OK(ctx, loom_graph_input(g, "a", LOOM_DTYPE_F32, 2, (int64_t[]){3, 4}, &a));
  CHECK_OK(ctx, loom_graph_input(g, "b", LOOM_DTYPE_F32, 2, (int64_t[]){5, 4}, &b));
  loom_attr tb = {.name = "trans_b", .kind = LOOM_ATTR_INT, .i = 1};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_MATMUL, 2, (loom_value[]){a, b}, 1, &tb, &y));
  loom_attr ra[2] = {{.name = "keepdims", .kind = LOOM_ATTR_INT, .i = 1},
                     {.name = "axes", .kind = LOOM_ATTR_INTS, .n_ints = 1, .ints = (int64_t[]){-1}}};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_REDUCE_MAX, 1, &y, 2, ra, &r));
  loom_attr da[2] = {{.name = "seed", .kind = LOOM_ATTR_INT, .i = 42},
                     {.name = "p", .kind = LOOM_ATTR_FLOAT, .f = 0.25}};
  CHECK_OK(ctx, loom_graph_op(g, LOOM_OP_DROPOUT, 1, &r, 2, da, &dr));
  if (g->n_nodes == 3) {
    const loom_node *mm = &g->nodes[0], *red = &g->nodes[1], *dro = &g->nodes[2];
    CHECK(LOOM_ATTR_I(mm, matmul, trans_a) == 0);
    CHECK(LOOM_ATTR_I(mm, matmul, trans_b) == 1);
    /* reduce_max shares reduce_sum's list, so its slots read it too */
    CHECK(LOOM_ATTR_I(red, reduce_sum, keepdims) == 1);
    CHECK(LOOM_ATTR_INTS(red, reduce_max, axes).n == 1);
    CHECK(LOOM_ATTR_INTS(red, reduce_max, axes).v[0] == -1);
    CHECK(LOOM_ATTR_F(dro, dropout, p) == 0.25);
    CHECK(LOOM_ATTR_I(dro, dropout, seed) == 42);
    CHECK(LOOM_ATTR_I(dro, dropout, offset) == 0); /* the default */
    CHECK(loom_attr_slot_checked(dro->op, LOOM_ATTR_SLOT_dropout_seed, "seed") == 1);
  } else {
    CHECK(!"three nodes");
  }
  loom_graph_free(g);
  loom_ctx_free(ctx);
}

/* Reading a matmul node through dropout's slots is a bug: it aborts with
 * a message naming the op and the attribute (checked in a child). */
static void test_wrong_op_is_caught(void) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    loom_attr_slot_checked(LOOM_OP_MATMUL, LOOM_ATTR_SLOT_dropout_p, "p");
    _exit(0); /* not reached when the check works */
  }
  close(fds[1]);
  char msg[256] = {0};
  size_t got = 0;
  ssize_t k;
  while (got < sizeof msg - 1 && (k = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0)
    got += (size_t)k;
  close(fds[0]);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  CHECK(strstr(msg, "matmul has no attribute 'p' in slot 0") != NULL);
}

int main(void) {
  test_specs_follow_lists();
  test_typed_reads();
  test_wrong_op_is_caught();
  return loom_test_finish("test_attrs");
}
