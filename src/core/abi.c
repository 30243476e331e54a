/*
 * The public enums' values, pinned. loom.h promises that a released value
 * never changes: a new status, dtype, op or mode goes at the end of its
 * list. An entry inserted in the middle moves the values after it and
 * fails one of these assertions; an entry added at the end fails only the
 * count's, and gets its pin added here.
 */
#include "loom.h"

#define PIN(NAME, v)                                                                               \
  _Static_assert(LOOM_##NAME == (v), "LOOM_" #NAME " moved: public enums are append-only, "       \
                                     "new values go at the end of their list (loom.h)");
/* A count that changed: a value was added (at the end, or a pin above
 * fails too); pin it here and move the count. */
#define PIN_COUNT(NAME, v)                                                                         \
  _Static_assert(LOOM_##NAME == (v), "LOOM_" #NAME " changed: pin the new value here "            \
                                     "(src/core/abi.c) and update the count");

/* clang-format off */
PIN(STATUS_OK, 0) PIN(STATUS_INVALID_ARGUMENT, 1) PIN(STATUS_SHAPE_MISMATCH, 2)
PIN(STATUS_DTYPE_MISMATCH, 3) PIN(STATUS_UNSUPPORTED, 4) PIN(STATUS_OUT_OF_MEMORY, 5)
PIN(STATUS_IO, 6) PIN(STATUS_PARSE, 7) PIN(STATUS_OUT_OF_RANGE, 8) PIN(STATUS_INTERNAL, 9)
PIN(STATUS_BUSY, 10) PIN_COUNT(STATUS_COUNT, 11)

PIN(DTYPE_F32, 0) PIN(DTYPE_F64, 1) PIN(DTYPE_F16, 2) PIN(DTYPE_BF16, 3) PIN(DTYPE_I32, 4)
PIN(DTYPE_I64, 5) PIN(DTYPE_BOOL, 6) PIN(DTYPE_U8, 7) PIN_COUNT(DTYPE_COUNT, 8)

PIN(OP_NEG, 0) PIN(OP_ABS, 1) PIN(OP_SIGN, 2) PIN(OP_EXP, 3) PIN(OP_LOG, 4) PIN(OP_SQRT, 5)
PIN(OP_RSQRT, 6) PIN(OP_RECIPROCAL, 7) PIN(OP_TANH, 8) PIN(OP_SIGMOID, 9) PIN(OP_RELU, 10)
PIN(OP_ERF, 11) PIN(OP_SIN, 12) PIN(OP_COS, 13) PIN(OP_ADD, 14) PIN(OP_SUB, 15) PIN(OP_MUL, 16)
PIN(OP_DIV, 17) PIN(OP_POW, 18) PIN(OP_MAXIMUM, 19) PIN(OP_MINIMUM, 20) PIN(OP_EQ, 21)
PIN(OP_NE, 22) PIN(OP_LT, 23) PIN(OP_LE, 24) PIN(OP_GT, 25) PIN(OP_GE, 26) PIN(OP_SELECT, 27)
PIN(OP_CAST, 28) PIN(OP_REDUCE_SUM, 29) PIN(OP_REDUCE_MAX, 30) PIN(OP_REDUCE_MIN, 31)
PIN(OP_RESHAPE, 32) PIN(OP_TRANSPOSE, 33) PIN(OP_BROADCAST_TO, 34) PIN(OP_SLICE, 35)
PIN(OP_CONCAT, 36) PIN(OP_PAD, 37) PIN(OP_GATHER, 38) PIN(OP_SCATTER_ADD, 39) PIN(OP_IOTA, 40)
PIN(OP_CONSTANT, 41) PIN(OP_MATMUL, 42) PIN(OP_FLASH_ATTENTION, 43)
PIN(OP_FLASH_ATTENTION_GRAD, 44) PIN(OP_DROPOUT, 45) PIN(OP_DROPOUT_MASK, 46)
PIN(OP_REDUCE_MEAN, 47) PIN(OP_SOFTMAX, 48) PIN(OP_LOG_SOFTMAX, 49) PIN(OP_LAYER_NORM, 50)
PIN(OP_RMS_NORM, 51) PIN(OP_GELU, 52) PIN(OP_SILU, 53) PIN(OP_CROSS_ENTROPY, 54)
PIN(OP_LINEAR, 55) PIN(OP_ATTENTION, 56) PIN(OP_ADAMW, 57) PIN(OP_ALL_REDUCE, 58)
PIN(OP_ALL_GATHER, 59) PIN(OP_REDUCE_SCATTER, 60) PIN(OP_ALL_TO_ALL, 61) PIN(OP_BROADCAST, 62)
PIN(OP_TRANSFER, 63) PIN(OP_CONV, 64) PIN(OP_CONV_TRANSPOSE, 65) PIN(OP_CONV_GRAD_WEIGHT, 66)
PIN(OP_MAX_POOL, 67) PIN(OP_AVG_POOL, 68) PIN(OP_MAX_POOL_GRAD, 69) PIN(OP_AVG_POOL_GRAD, 70)
PIN_COUNT(OP_COUNT, 71)

PIN(FUSION_STITCH, 0) PIN(FUSION_LOOP, 1) PIN(FUSION_NONE, 2) PIN(FUSION_EAGER, 3)
PIN_COUNT(FUSION_COUNT, 4)
PIN(ATTENTION_FLASH, 0) PIN(ATTENTION_DECOMPOSED, 1) PIN(ATTENTION_AUTO, 2)
PIN_COUNT(ATTENTION_COUNT, 3)
PIN(RNG_AUTO, 0) PIN(RNG_FUSED, 1) PIN(RNG_OVERLAP, 2) PIN(RNG_SEQUENTIAL, 3)
PIN_COUNT(RNG_COUNT, 4)

PIN(ATTR_INT, 0) PIN(ATTR_FLOAT, 1) PIN(ATTR_INTS, 2)
PIN(ARTIFACT_GRAPH, 0) PIN(ARTIFACT_PROGRAM, 1) PIN(ARTIFACT_KERNELS, 2) PIN(ARTIFACT_SOURCE, 3)
PIN(ARTIFACT_DOT, 4) PIN_COUNT(ARTIFACT_COUNT, 5)
/* clang-format on */

/* Options structs begin with their size, and their fields only grow at
 * the end. */
_Static_assert(offsetof(loom_session_options, struct_size) == 0,
               "struct_size leads the options struct (loom.h)");
