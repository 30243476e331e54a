/*
 * The RNG placement model (rng_model.h). Terms, for an attention op with
 * n = BH Sq Sk probabilities (n_vis of them visible: about half when
 * causal, and only visible tiles draw words inside the kernel):
 *
 *   A     = attention without dropout: 4 BH Sq Sk D flops (x 1/2 causal)
 *           at the forward rate, and 2.5 times that at the backward rate
 *           when training (the backward's five products to two); both
 *           rates times Sk / (Sk + s0), the kernels' efficiency at Sk keys;
 *   R(w,c)= w Philox words on c cores: w / (c * rng_words_core);
 *   W     = writing the n-bit mask: n / 8 / bandwidth;
 *   M     = an attention kernel reading it: n * mask_read_bit_s (measured:
 *           more than the bytes, the bits are unpacked per tile).
 *
 *   fused      A + penalty * R(n_vis, cores) * (1 + backward)
 *              (the words are drawn again in the backward pass);
 *   sequential A + R(n, cores) + W + M * (1 + backward);
 *   overlap    A + W + M * (1 + backward) + hidden, where the mask task runs on
 *              k = overlap_cores beside the GEMMs before attention (G seconds
 *              on all cores): on a CPU those cores leave the GEMM, so
 *              hidden = max(R(n, k), G c / (c - k)) - G; on a GPU the words
 *              come from integer units the tensor-core GEMM leaves idle, so
 *              hidden = max(0, R(n, cores) - G).
 */
#include "perf/rng_model.h"

#include <math.h>

static double words_time(const loom_rng_model *m, double words, double cores) {
  double rate = m->rng_words_core * cores;
  return rate > 0 ? words / rate : INFINITY;
}

loom_rng_placement loom_rng_model_predict(const loom_rng_model *m, const loom_rng_attn *a,
                                          double *t_none, double t[LOOM_RNG_COUNT]) {
  double n = (double)a->bh * (double)a->sq * (double)a->sk;
  double visible = a->causal ? 0.5 : 1.0;
  double flops = 4.0 * n * (double)a->d * visible;
  double eff = (double)a->sk / ((double)a->sk + fmax(m->attn_s0, 0.0));
  double attn = flops / (m->attn_fwd_flops * eff);
  if (a->backward) attn += 2.5 * flops / (m->attn_bwd_flops * eff);
  double reads = 1.0 + (a->backward ? 1.0 : 0.0);
  double write = n / 8.0 / m->bandwidth, mask = n * m->mask_read_bit_s;
  double cores = m->cores > 0 ? m->cores : 1;
  double gemm = m->gemm_flops > 0 ? a->gemm_before_flops / m->gemm_flops : 0.0;
  t[LOOM_RNG_FUSED] =
      attn + m->fused_rng_penalty * words_time(m, n * visible, cores) * reads;
  t[LOOM_RNG_SEQUENTIAL] = attn + words_time(m, n, cores) + write + mask * reads;
  double hidden;
  if (m->gpu) {
    hidden = fmax(0.0, words_time(m, n, cores) - gemm);
  } else {
    double k = m->overlap_cores > 0 ? m->overlap_cores : 1;
    double slowed = k < cores ? gemm * cores / (cores - k) : INFINITY;
    hidden = fmax(words_time(m, n, k), slowed) - gemm;
  }
  t[LOOM_RNG_OVERLAP] = attn + write + mask * reads + hidden;
  loom_rng_placement best = LOOM_RNG_FUSED;
  for (int p = LOOM_RNG_FUSED; p < LOOM_RNG_COUNT; p++)
    if (t[p] < t[best]) best = (loom_rng_placement)p;
  t[LOOM_RNG_AUTO] = t[best];
  if (t_none) *t_none = attn;
  return best;
}

/* H100 SXM5: 132 SMs at 1.98 GHz; 989 TFLOP/s dense f16 tensor-core peak,
 * of which GEMMs reach about 70% and FlashAttention-2 about 35% forward and
 * 25% backward; 64 INT32 lanes per SM per clock, and Philox4x32-10 costs
 * about 30 integer instructions per 32-bit word (10 rounds of two 32x32
 * multiplies with high halves, xors and key bumps, per 4 words); HBM3 at
 * 3.35 TB/s. Inside the attention kernel the words compete with its own
 * exp and softmax arithmetic for the same issue slots: the penalty 1.5 is
 * our estimate, not a published figure. */
void loom_rng_model_h100(loom_rng_model *m) {
  *m = (loom_rng_model){.machine = "H100 SXM (published rates)",
                        .cores = 132,
                        .gpu = true,
                        .rng_words_core = 64.0 * 1.98e9 / 30.0,
                        .gemm_flops = 0.70 * 989e12,
                        .attn_fwd_flops = 0.35 * 989e12,
                        .attn_bwd_flops = 0.25 * 989e12,
                        .bandwidth = 3.35e12,
                        .mask_read_bit_s = 1.0 / (8.0 * 3.35e12),
                        .fused_rng_penalty = 1.5,
                        .overlap_cores = 132};
}

void loom_rng_model_h200(loom_rng_model *m) {
  loom_rng_model_h100(m);
  m->machine = "H200 (published rates)";
  m->bandwidth = 4.8e12;
  m->mask_read_bit_s = 1.0 / (8.0 * 4.8e12);
}
