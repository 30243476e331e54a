/*
 * ModelProto and the messages under it, read with pb.h. Each message is
 * walked twice: once to count its repeated fields (so arrays are allocated
 * exactly, and every count is bounded by the bytes that hold it), once to
 * read them. Unknown fields are skipped, as protobuf requires.
 */
#include "onnx/model.h"

#include "core/file.h"
#include "ir/dtype.h"
#include "onnx/pb.h"

#include <stdlib.h>
#include <string.h>

/* ---- the arena ---------------------------------------------------------- */

typedef struct arena_block {
  struct arena_block *next;
  max_align_t data[];
} arena_block;

typedef struct parser {
  loom_ctx *ctx;
  arena_block **arena;
  loom_status st;
} parser;

static void *alloc(parser *P, size_t count, size_t size) {
  if (P->st) return NULL;
  if (count && size > (SIZE_MAX - sizeof(arena_block)) / count) {
    P->st = loom_error(P->ctx, LOOM_STATUS_OUT_OF_MEMORY, "ONNX: allocation too large");
    return NULL;
  }
  size_t bytes = count * size;
  arena_block *b = calloc(1, sizeof *b + (bytes ? bytes : 1));
  if (!b) {
    P->st = loom_error(P->ctx, LOOM_STATUS_OUT_OF_MEMORY, "ONNX: out of memory");
    return NULL;
  }
  b->next = *P->arena;
  *P->arena = b;
  return b->data;
}

static void arena_free(void *a) {
  for (arena_block *b = a, *n; b; b = n) {
    n = b->next;
    free(b);
  }
}

static loom_status bad(parser *P, const char *msg, uint32_t field, const char *why) {
  if (!P->st)
    P->st = loom_error(P->ctx, LOOM_STATUS_PARSE, "ONNX: malformed %s (field %u): %s", msg,
                       (unsigned)field, why);
  return P->st;
}

/* A LEN field as a NUL-terminated string in the arena. */
static const char *str(parser *P, const loom_pb_field *f, const char *msg) {
  if (f->wire != LOOM_PB_LEN) {
    bad(P, msg, f->num, "a string field with the wrong wire type");
    return "";
  }
  size_t n = loom_pb_len(&f->sub);
  char *s = n < SIZE_MAX ? alloc(P, n + 1, 1) : NULL;
  if (!s) return "";
  if (n) memcpy(s, f->sub.p, n);
  s[n] = '\0';
  if (strlen(s) != n) {
    bad(P, msg, f->num, "a name with a NUL byte");
    return "";
  }
  return s;
}

static bool want(parser *P, const loom_pb_field *f, int wire, const char *msg) {
  if (f->wire == wire) return true;
  bad(P, msg, f->num, "wrong wire type");
  return false;
}

/* ---- repeated scalars --------------------------------------------------- */

static void count_varints(parser *P, const loom_pb_field *f, size_t *n, const char *msg) {
  size_t k;
  if (!loom_pb_count_varints(f, &k)) {
    bad(P, msg, f->num, "malformed repeated integers");
    return;
  }
  *n += k;
}
static void read_varints(parser *P, const loom_pb_field *f, int64_t *dst, size_t *at,
                         const char *msg) {
  size_t k;
  if (!loom_pb_read_varints(f, dst + *at, &k)) {
    bad(P, msg, f->num, "malformed repeated integers");
    return;
  }
  *at += k;
}
static void count_fixed(parser *P, const loom_pb_field *f, int size, size_t *n, const char *msg) {
  size_t k;
  if (!loom_pb_count_fixed(f, size, &k)) {
    bad(P, msg, f->num, "malformed repeated floats");
    return;
  }
  *n += k;
}

/* ---- messages ----------------------------------------------------------- */

static void parse_graph(parser *P, loom_pb msg, onnx_graph *g, int depth);

static void parse_kv(parser *P, loom_pb msg, onnx_kv *kv) {
  kv->key = kv->value = "";
  loom_pb c = msg;
  loom_pb_field f;
  const char *err;
  while (!P->st && !loom_pb_done(&c)) {
    if (!loom_pb_next(&c, &f, &err)) {
      bad(P, "StringStringEntryProto", 0, err);
      return;
    }
    if (f.num == 1) kv->key = str(P, &f, "StringStringEntryProto");
    if (f.num == 2) kv->value = str(P, &f, "StringStringEntryProto");
  }
}

/* Walks the fields of msg, calling the block for each (f is the field). */
#define WALK(MSG, NAME)                                                                            \
  for (loom_pb c_ = (MSG), *once_ = &c_; once_; once_ = NULL)                                     \
    for (loom_pb_field f; !P->st && !loom_pb_done(&c_) && walk_next(P, &c_, &f, NAME);)

static bool walk_next(parser *P, loom_pb *c, loom_pb_field *f, const char *msg) {
  const char *err;
  if (loom_pb_next(c, f, &err)) return true;
  bad(P, msg, 0, err);
  return false;
}

static void parse_tensor(parser *P, loom_pb msg, onnx_tensor *t) {
  static const char M[] = "TensorProto";
  memset(t, 0, sizeof *t);
  t->name = "";
  size_t n_dims = 0;
  WALK(msg, M) {
    switch (f.num) {
    case 1: count_varints(P, &f, &n_dims, M); break;
    case 4: count_fixed(P, &f, 4, &t->n_float, M); break;
    case 5: count_varints(P, &f, &t->n_i32, M); break;
    case 6: t->n_string++; break;
    case 7: count_varints(P, &f, &t->n_i64, M); break;
    case 10: count_fixed(P, &f, 8, &t->n_double, M); break;
    case 11: count_varints(P, &f, &t->n_u64, M); break;
    case 13: t->n_external++; break;
    }
  }
  if (P->st) return;
  if (n_dims > 64) {
    bad(P, M, 1, "more than 64 dims");
    return;
  }
  t->dims = alloc(P, n_dims, sizeof *t->dims);
  t->float_data = alloc(P, t->n_float, sizeof(float));
  t->i32_data = alloc(P, t->n_i32, sizeof(int64_t));
  t->i64_data = alloc(P, t->n_i64, sizeof(int64_t));
  t->double_data = alloc(P, t->n_double, sizeof(double));
  t->u64_data = alloc(P, t->n_u64, sizeof(int64_t));
  t->external = alloc(P, (size_t)t->n_external, sizeof *t->external);
  size_t at_dims = 0, at_f = 0, at_i32 = 0, at_i64 = 0, at_d = 0, at_u64 = 0;
  int32_t at_ext = 0;
  WALK(msg, M) {
    size_t k;
    switch (f.num) {
    case 1: read_varints(P, &f, t->dims, &at_dims, M); break;
    case 2: if (want(P, &f, LOOM_PB_VARINT, M)) t->data_type = (int32_t)f.u; break;
    case 3: t->segmented = true; break;
    case 4:
      if (loom_pb_read_floats(&f, t->float_data + at_f, &k)) at_f += k;
      break;
    case 5: read_varints(P, &f, t->i32_data, &at_i32, M); break;
    case 7: read_varints(P, &f, t->i64_data, &at_i64, M); break;
    case 8: t->name = str(P, &f, M); break;
    case 9:
      if (want(P, &f, LOOM_PB_LEN, M)) {
        t->has_raw = true;
        t->raw.p = f.sub.p;
        t->raw.n = loom_pb_len(&f.sub);
      }
      break;
    case 10:
      if (loom_pb_read_doubles(&f, t->double_data + at_d, &k)) at_d += k;
      break;
    case 11: read_varints(P, &f, t->u64_data, &at_u64, M); break;
    case 13:
      if (want(P, &f, LOOM_PB_LEN, M)) parse_kv(P, f.sub, &t->external[at_ext++]);
      break;
    case 14: if (want(P, &f, LOOM_PB_VARINT, M)) t->data_location = (int32_t)f.u; break;
    }
  }
  t->n_dims = (int32_t)n_dims;
}

static void parse_shape(parser *P, loom_pb msg, onnx_value_info *v) {
  static const char M[] = "TensorShapeProto";
  size_t n = 0;
  WALK(msg, M) if (f.num == 1) n++;
  if (P->st) return;
  if (n > 64) {
    bad(P, M, 1, "more than 64 dims");
    return;
  }
  v->dims = alloc(P, n, sizeof *v->dims);
  v->params = alloc(P, n, sizeof *v->params);
  v->has_shape = true;
  v->rank = 0;
  WALK(msg, M) {
    if (f.num != 1 || !want(P, &f, LOOM_PB_LEN, M)) continue;
    int32_t d = v->rank++;
    v->dims[d] = -1;
    v->params[d] = NULL;
    loom_pb dim = f.sub;
    for (loom_pb_field g; !P->st && !loom_pb_done(&dim) && walk_next(P, &dim, &g, "Dimension");) {
      if (g.num == 1 && want(P, &g, LOOM_PB_VARINT, "Dimension")) v->dims[d] = (int64_t)g.u;
      if (g.num == 2) v->params[d] = str(P, &g, "Dimension");
    }
  }
}

static void parse_type(parser *P, loom_pb msg, onnx_value_info *v) {
  WALK(msg, "TypeProto") {
    if (f.num != 1 || !want(P, &f, LOOM_PB_LEN, "TypeProto")) continue;
    v->is_tensor = true;
    loom_pb tt = f.sub;
    for (loom_pb_field g; !P->st && !loom_pb_done(&tt) && walk_next(P, &tt, &g, "TypeProto.Tensor");) {
      if (g.num == 1 && want(P, &g, LOOM_PB_VARINT, "TypeProto.Tensor")) v->elem_type = (int32_t)g.u;
      if (g.num == 2 && want(P, &g, LOOM_PB_LEN, "TypeProto.Tensor")) parse_shape(P, g.sub, v);
    }
  }
}

static void parse_value_info(parser *P, loom_pb msg, onnx_value_info *v) {
  memset(v, 0, sizeof *v);
  v->name = "";
  WALK(msg, "ValueInfoProto") {
    if (f.num == 1) v->name = str(P, &f, "ValueInfoProto");
    if (f.num == 2 && want(P, &f, LOOM_PB_LEN, "ValueInfoProto")) parse_type(P, f.sub, v);
  }
}

static void parse_attr(parser *P, loom_pb msg, onnx_attr *a, int depth) {
  static const char M[] = "AttributeProto";
  memset(a, 0, sizeof *a);
  a->name = "";
  WALK(msg, M) {
    switch (f.num) {
    case 7: count_fixed(P, &f, 4, &a->n_floats, M); break;
    case 8: count_varints(P, &f, &a->n_ints, M); break;
    case 9: a->n_strings++; break;
    case 10: a->n_tensors++; break;
    case 11: a->n_graphs++; break;
    }
  }
  if (P->st) return;
  a->floats = alloc(P, a->n_floats, sizeof *a->floats);
  a->ints = alloc(P, a->n_ints, sizeof *a->ints);
  a->strings = alloc(P, a->n_strings, sizeof *a->strings);
  a->tensors = alloc(P, a->n_tensors, sizeof *a->tensors);
  a->graphs = alloc(P, a->n_graphs, sizeof *a->graphs);
  size_t at_f = 0, at_i = 0, at_s = 0, at_t = 0, at_g = 0, k;
  WALK(msg, M) {
    switch (f.num) {
    case 1: a->name = str(P, &f, M); break;
    case 2:
      if (want(P, &f, LOOM_PB_I32, M)) {
        uint32_t b = (uint32_t)f.u;
        memcpy(&a->f, &b, 4);
      }
      break;
    case 3: if (want(P, &f, LOOM_PB_VARINT, M)) a->i = (int64_t)f.u; break;
    case 4:
      if (want(P, &f, LOOM_PB_LEN, M)) a->s = (onnx_bytes){f.sub.p, loom_pb_len(&f.sub)};
      break;
    case 5:
      if (want(P, &f, LOOM_PB_LEN, M) && (a->t = alloc(P, 1, sizeof *a->t)))
        parse_tensor(P, f.sub, a->t);
      break;
    case 6:
      if (!want(P, &f, LOOM_PB_LEN, M)) break;
      if (depth + 1 > ONNX_MAX_DEPTH) {
        bad(P, M, f.num, "subgraphs nested too deep");
        break;
      }
      if ((a->g = alloc(P, 1, sizeof *a->g))) parse_graph(P, f.sub, a->g, depth + 1);
      break;
    case 7:
      if (loom_pb_read_floats(&f, a->floats + at_f, &k)) at_f += k;
      break;
    case 8: read_varints(P, &f, a->ints, &at_i, M); break;
    case 9:
      if (want(P, &f, LOOM_PB_LEN, M)) a->strings[at_s++] = (onnx_bytes){f.sub.p, loom_pb_len(&f.sub)};
      break;
    case 10:
      if (want(P, &f, LOOM_PB_LEN, M)) parse_tensor(P, f.sub, &a->tensors[at_t++]);
      break;
    case 11:
      if (!want(P, &f, LOOM_PB_LEN, M)) break;
      if (depth + 1 > ONNX_MAX_DEPTH) {
        bad(P, M, f.num, "subgraphs nested too deep");
        break;
      }
      parse_graph(P, f.sub, &a->graphs[at_g++], depth + 1);
      break;
    case 20: if (want(P, &f, LOOM_PB_VARINT, M)) a->type = (int32_t)f.u; break;
    case 21: a->ref_attr_name = str(P, &f, M); break;
    }
  }
}

static void parse_node(parser *P, loom_pb msg, onnx_node *n, int depth) {
  static const char M[] = "NodeProto";
  memset(n, 0, sizeof *n);
  n->name = n->op_type = n->domain = "";
  WALK(msg, M) {
    if (f.num == 1) n->n_in++;
    if (f.num == 2) n->n_out++;
    if (f.num == 5) n->n_attrs++;
  }
  if (P->st) return;
  n->in = alloc(P, (size_t)n->n_in, sizeof *n->in);
  n->out = alloc(P, (size_t)n->n_out, sizeof *n->out);
  n->attrs = alloc(P, (size_t)n->n_attrs, sizeof *n->attrs);
  int32_t ai = 0, ao = 0, aa = 0;
  WALK(msg, M) {
    switch (f.num) {
    case 1: n->in[ai++] = str(P, &f, M); break;
    case 2: n->out[ao++] = str(P, &f, M); break;
    case 3: n->name = str(P, &f, M); break;
    case 4: n->op_type = str(P, &f, M); break;
    case 5: if (want(P, &f, LOOM_PB_LEN, M)) parse_attr(P, f.sub, &n->attrs[aa++], depth); break;
    case 7: n->domain = str(P, &f, M); break;
    }
  }
}

static void parse_graph(parser *P, loom_pb msg, onnx_graph *g, int depth) {
  static const char M[] = "GraphProto";
  memset(g, 0, sizeof *g);
  g->name = "";
  WALK(msg, M) {
    switch (f.num) {
    case 1: g->n_nodes++; break;
    case 5: g->n_init++; break;
    case 11: g->n_inputs++; break;
    case 12: g->n_outputs++; break;
    case 13: g->n_value_info++; break;
    case 15: g->n_sparse_init++; break;
    }
  }
  if (P->st) return;
  g->nodes = alloc(P, (size_t)g->n_nodes, sizeof *g->nodes);
  g->init = alloc(P, (size_t)g->n_init, sizeof *g->init);
  g->inputs = alloc(P, (size_t)g->n_inputs, sizeof *g->inputs);
  g->outputs = alloc(P, (size_t)g->n_outputs, sizeof *g->outputs);
  g->value_info = alloc(P, (size_t)g->n_value_info, sizeof *g->value_info);
  int32_t an = 0, at = 0, ai = 0, ao = 0, av = 0;
  WALK(msg, M) {
    if (f.num != 2 && f.num != 1 && f.num != 5 && f.num != 11 && f.num != 12 && f.num != 13) continue;
    if (f.num == 2) {
      g->name = str(P, &f, M);
      continue;
    }
    if (!want(P, &f, LOOM_PB_LEN, M)) break;
    switch (f.num) {
    case 1: parse_node(P, f.sub, &g->nodes[an++], depth); break;
    case 5: parse_tensor(P, f.sub, &g->init[at++]); break;
    case 11: parse_value_info(P, f.sub, &g->inputs[ai++]); break;
    case 12: parse_value_info(P, f.sub, &g->outputs[ao++]); break;
    case 13: parse_value_info(P, f.sub, &g->value_info[av++]); break;
    }
  }
}

static void parse_model(parser *P, loom_pb msg, onnx_model *m) {
  static const char M[] = "ModelProto";
  m->producer = "";
  bool has_graph = false;
  WALK(msg, M) if (f.num == 8) m->n_opsets++;
  if (P->st) return;
  m->opsets = alloc(P, (size_t)m->n_opsets, sizeof *m->opsets);
  int32_t ao = 0;
  WALK(msg, M) {
    switch (f.num) {
    case 1: if (want(P, &f, LOOM_PB_VARINT, M)) m->ir_version = (int64_t)f.u; break;
    case 2: m->producer = str(P, &f, M); break;
    case 7:
      if (!want(P, &f, LOOM_PB_LEN, M)) break;
      if (has_graph) {
        bad(P, M, 7, "two graphs");
        break;
      }
      has_graph = true;
      if ((m->graph = alloc(P, 1, sizeof *m->graph))) parse_graph(P, f.sub, m->graph, 0);
      break;
    case 8: {
      if (!want(P, &f, LOOM_PB_LEN, M)) break;
      onnx_opset *o = &m->opsets[ao++];
      o->domain = "";
      loom_pb os = f.sub;
      for (loom_pb_field g; !P->st && !loom_pb_done(&os) && walk_next(P, &os, &g, "OperatorSetIdProto");) {
        if (g.num == 1) o->domain = str(P, &g, "OperatorSetIdProto");
        if (g.num == 2 && want(P, &g, LOOM_PB_VARINT, "OperatorSetIdProto")) o->version = (int64_t)g.u;
      }
      break;
    }
    }
  }
  if (!P->st && !has_graph) bad(P, M, 7, "no graph (is this an ONNX model?)");
}

/* ---- entry points ------------------------------------------------------- */

void onnx_model_free(onnx_model *m) {
  if (!m) return;
  arena_free(m->arena);
  free(m->dir);
  free(m->file);
  free(m);
}

static onnx_model *model_new(loom_ctx *ctx, const void *bytes, size_t n) {
  onnx_model *m = loom_calloc(ctx, 1, sizeof *m);
  if (!m) return NULL;
  m->file = malloc(n ? n : 1);
  if (!m->file) {
    free(m);
    loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "ONNX: out of memory");
    return NULL;
  }
  if (n) memcpy(m->file, bytes, n);
  m->file_len = n;
  return m;
}

loom_status onnx_model_parse(loom_ctx *ctx, const void *bytes, size_t n, const char *dir,
                             onnx_model **out) {
  *out = NULL;
  onnx_model *m = model_new(ctx, bytes, n);
  if (!m) return LOOM_STATUS_OUT_OF_MEMORY;
  if (dir && !(m->dir = loom_strdup(ctx, dir))) {
    onnx_model_free(m);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  parser P = {ctx, (arena_block **)&m->arena, LOOM_STATUS_OK};
  parse_model(&P, loom_pb_make(m->file, n), m);
  if (P.st) {
    onnx_model_free(m);
    return P.st;
  }
  *out = m;
  return LOOM_STATUS_OK;
}

loom_status onnx_tensor_parse(loom_ctx *ctx, const void *bytes, size_t n, onnx_model **holder,
                              onnx_tensor **out) {
  *holder = NULL;
  *out = NULL;
  onnx_model *m = model_new(ctx, bytes, n);
  if (!m) return LOOM_STATUS_OUT_OF_MEMORY;
  parser P = {ctx, (arena_block **)&m->arena, LOOM_STATUS_OK};
  onnx_tensor *t = alloc(&P, 1, sizeof *t);
  if (t) parse_tensor(&P, loom_pb_make(m->file, n), t);
  if (P.st) {
    onnx_model_free(m);
    return P.st;
  }
  *holder = m;
  *out = t;
  return LOOM_STATUS_OK;
}

/* Models up to 2 GiB: protobuf's own limit for one message. */
#define ONNX_MAX_FILE ((size_t)2 << 30)

loom_status onnx_model_load(loom_ctx *ctx, const char *path, onnx_model **out) {
  *out = NULL;
  char *buf = NULL;
  size_t len = 0;
  LOOM_TRY(loom_file_read(ctx, path, ONNX_MAX_FILE, &buf, &len));
  char *dir = loom_strdup(ctx, path);
  if (!dir) {
    free(buf);
    return LOOM_STATUS_OUT_OF_MEMORY;
  }
  char *slash = strrchr(dir, '/');
  if (slash)
    slash[slash == dir ? 1 : 0] = '\0';
  else
    strcpy(dir, ".");
  loom_status st = onnx_model_parse(ctx, buf, len, dir, out);
  free(buf);
  free(dir);
  if (st) loom_error_prefix(ctx, "%s", path);
  return st;
}

int64_t onnx_model_opset(const onnx_model *m) {
  for (int32_t i = 0; i < m->n_opsets; i++)
    if (!m->opsets[i].domain[0] || strcmp(m->opsets[i].domain, "ai.onnx") == 0)
      return m->opsets[i].version;
  return 0;
}

const onnx_attr *onnx_node_attr(const onnx_node *n, const char *name) {
  for (int32_t i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

const char *onnx_dtype_name(int32_t dt) {
  static const char *const names[] = {"undefined", "float", "uint8", "int8", "uint16",
                                      "int16", "int32", "int64", "string", "bool",
                                      "float16", "double", "uint32", "uint64", "complex64",
                                      "complex128", "bfloat16"};
  return dt >= 0 && dt < (int32_t)(sizeof names / sizeof names[0]) ? names[dt] : "?";
}
