#include "ops/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOOM_X_ENTRY(NAME, name) [LOOM_OP_##NAME] = &loom_opdef_##name,
static const loom_op_def *const op_table[] = {LOOM_OP_LIST(LOOM_X_ENTRY)};
#undef LOOM_X_ENTRY

_Static_assert(sizeof op_table / sizeof op_table[0] == LOOM_OP_COUNT,
               "op table must have one entry per op");

const loom_op_def *loom_op_get(loom_op op) {
  return (unsigned)op < LOOM_OP_COUNT ? op_table[op] : NULL;
}

const char *loom_op_name(loom_op op) {
  const loom_op_def *d = loom_op_get(op);
  return d ? d->name : NULL;
}

loom_status loom_op_from_name(const char *name, loom_op *out) {
  if (!name || !out) return LOOM_STATUS_INVALID_ARGUMENT;
  for (int i = 0; i < LOOM_OP_COUNT; i++)
    if (strcmp(op_table[i]->name, name) == 0) {
      *out = (loom_op)i;
      return LOOM_STATUS_OK;
    }
  return LOOM_STATUS_INVALID_ARGUMENT;
}

bool loom_op_is_composite(loom_op op) {
  const loom_op_def *d = loom_op_get(op);
  return d && d->cls == LOOM_OPCLASS_COMPOSITE;
}

bool loom_op_is_comm(loom_op op) {
  const loom_op_def *d = loom_op_get(op);
  return d && d->cls == LOOM_OPCLASS_COMM;
}

bool loom_op_is_collective(loom_op op) { return loom_op_is_comm(op) && op != LOOM_OP_TRANSFER; }

bool loom_op_out_count_ok(const loom_op_def *d, int32_t n_out) {
  if (d->n_out >= 0) return n_out == d->n_out;
  return n_out >= 1 && n_out <= LOOM_MAX_NODE_IO;
}

int32_t loom_op_attr_index(loom_op op, const char *name) {
  const loom_op_def *d = loom_op_get(op);
  if (!d) return -1;
  for (int32_t i = 0; i < d->n_attrs; i++)
    if (strcmp(d->attrs[i].name, name) == 0) return i;
  return -1;
}

int32_t loom_attr_slot_checked(loom_op op, int32_t slot, const char *name) {
  const loom_op_def *d = loom_op_get(op);
  if (d && slot < d->n_attrs && strcmp(d->attrs[slot].name, name) == 0) return slot;
  /* Only code reads by slot, so this is a bug in Loom, never bad input. */
  fprintf(stderr, "loom: internal error: %s has no attribute '%s' in slot %d\n", d ? d->name : "?",
          name, (int)slot);
  abort();
}

void loom_partition_init(loom_partition *p, int32_t n_in, int32_t n_out) {
  memset(p, 0, sizeof *p);
  memset(p->in, INT8_MIN, sizeof p->in);
  memset(p->out, INT8_MIN, sizeof p->out);
  p->n_in = n_in;
  p->n_out = n_out;
}

int32_t loom_partition_new_label(loom_partition *p, loom_split_kind k,
                                 loom_op combine) {
  if (p->n_labels >= LOOM_PART_MAX_LABELS) return -1;
  p->split[p->n_labels] = (uint8_t)k;
  p->combine[p->n_labels] = combine;
  return p->n_labels++;
}

const char *loom_partition_str(const loom_partition *p, char *buf, size_t n) {
  size_t k = 0;
#define PUT(...)                                                               \
  do {                                                                         \
    int w_ = snprintf(buf + k, k < n ? n - k : 0, __VA_ARGS__);                \
    if (w_ > 0) k += (size_t)w_;                                               \
  } while (0)
  if (n) buf[0] = '\0';
  if (p->n_labels == 0) {
    PUT("replicate");
    return buf;
  }
  for (int io = 0; io < 2; io++) {
    int32_t count = io ? p->n_out : p->n_in;
    for (int32_t t = 0; t < count; t++) {
      if (t) PUT(", ");
      const int8_t *dims = io ? p->out[t] : p->in[t];
      bool first = true;
      for (int d = 0; d < LOOM_MAX_RANK && dims[d] != INT8_MIN; d++) {
        PUT(first ? "%c" : " %c", dims[d] < 0 ? '_' : 'a' + dims[d]);
        first = false;
      }
    }
    if (!io) PUT(" -> ");
  }
  for (int32_t l = 0; l < p->n_labels; l++)
    if (p->split[l] == LOOM_SPLIT_PARTIAL)
      PUT(" | %c:%s", 'a' + l, loom_op_name(p->combine[l]));
#undef PUT
  return buf;
}
