/*
 * Restriding GEMM operands (gemm.h). oneDNN's sgemm copies panels of its
 * operands before multiplying, walking down several rows at once. When
 * those rows lie a multiple of 1 KiB apart they share a handful of cache
 * sets and the copy thrashes: on an AVX2 host 1024 x 3072 x 768 with B's
 * rows 12 KiB apart ran at 89 GFLOP/s on two cores, and at 183 with the
 * rows 16 floats (64 bytes) further apart; a weight gradient (A
 * transposed, rows 3 KiB apart) went from 64 to 137 (docs/PERFORMANCE.md,
 * fifteenth session). Transformer widths (768, 1024, 3072, 4096) all
 * give such strides. An operand walked that way with such a stride is
 * therefore copied, before the product, into rows RESTRIDE_PAD floats
 * longer, when this machine's probe found the copy worth it.
 */
#ifndef LOOM_RUNTIME_CPU_GEMM_RESTRIDE_H
#define LOOM_RUNTIME_CPU_GEMM_RESTRIDE_H

#include <stdbool.h>
#include <stdint.h>

/* Whether restriding pays on this machine: measured once per machine (one
 * core, a few milliseconds: the same product with B's rows 4 KiB and 4 KiB
 * + 64 bytes apart) and kept in the profile as gemm_restride_gain.
 * LOOM_GEMM_RESTRIDE=0|1 pins it. Call outside any parallel region. */
bool loom_gemm_restride_pays(void);

/* The row stride (in floats) an operand stored with rows ld floats apart
 * is copied into, or 0 when ld is harmless (not a multiple of 1 KiB). */
int64_t loom_gemm_restride_ld(int64_t ld);

#endif
