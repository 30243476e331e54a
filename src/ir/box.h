/* An index box of a tensor: dims [start[d], end[d]); rank 0 is one
 * element. The part of a logical tensor a piece holds (parallel/vtensor.h
 * does the arithmetic); here, below the op table, because an op's
 * sub-op attribute hook (ops/op.h) reads the boxes its piece covers. */
#ifndef LOOM_IR_BOX_H
#define LOOM_IR_BOX_H

#include "loom.h"

typedef struct loom_vbox {
  int32_t rank;
  int64_t start[LOOM_MAX_RANK], end[LOOM_MAX_RANK];
} loom_vbox;

#endif
