/*
 * One tile of the cpu GEMM (gemm.h) on oneDNN's matmul primitive instead of
 * dnnl_sgemm. The primitive (brgemm on AVX-512) reads a transposed B in
 * place where sgemm re-packs it with a slower path: 128 x 768 x 3072 with
 * B stored [N, K] ran at 100 GFLOP/s against sgemm's 85 on one core
 * (docs/PERFORMANCE.md); with B stored [K, N] the primitive was the slower
 * one (81 against 87 at 128 x 3072 x 768), and it wins there only with B
 * packed ahead, which pays only when the packed copy outlives a run. Each
 * tile shape gets one primitive, made for one thread and kept for the
 * process, so a tile's result depends on its shape only, never on the
 * thread count.
 */
#ifndef LOOM_RUNTIME_CPU_GEMM_MATMUL_H
#define LOOM_RUNTIME_CPU_GEMM_MATMUL_H

#include "runtime/cpu/gemm.h"

/* A primitive for tiles of m x n of C in product p (p's k, strides and
 * transposes); NULL when oneDNN has no fast one (or no memory). packed_b:
 * its B is a block packed ahead in the layout the primitive picks
 * (weights format `any`) rather than p's B as stored. Call outside any
 * parallel region; the result is kept for the process. */
typedef struct loom_gemm_tile_prim loom_gemm_tile_prim;
const loom_gemm_tile_prim *loom_gemm_tile_prim_get(const loom_gemm *p, int64_t m, int64_t n,
                                                   bool packed_b);

/* C tile = A tile * B tile on the calling thread (a, c: the tile's first
 * elements, strided as p said; b: the same, or the tile's packed block);
 * false if oneDNN failed. */
bool loom_gemm_tile_prim_run(const loom_gemm_tile_prim *t, const float *a, const float *b,
                             float *c);

/* A packed-B primitive's block: its bytes, whether two primitives read
 * the same layout (tiles of other heights share a block only then), and
 * packing (b: the block's first element of B as stored; dst: b_bytes). */
size_t loom_gemm_tile_prim_b_bytes(const loom_gemm_tile_prim *t);
bool loom_gemm_tile_prim_same_b(const loom_gemm_tile_prim *x, const loom_gemm_tile_prim *y);
bool loom_gemm_tile_prim_pack_b(const loom_gemm_tile_prim *t, const float *b, void *dst);

#endif
