/*
 * The machine profile's format version (perf/profile.h): a file of
 * another version, or of none, reads as empty and is started afresh by
 * the next put; the keys of both rate tables of the cpu backend (the RNG
 * placement's, per thread count, and the attention choice's) are kept
 * from a current file and measured again over a stale one.
 */
#include "common.h"

#include "passes/attention.h"
#include "perf/profile.h"
#include "runtime/cpu/cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char path[4096];

static void write_file(const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static char *read_file(void) {
  static char text[16384];
  text[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return text;
  text[fread(text, 1, sizeof text - 1, f)] = '\0';
  fclose(f);
  return text;
}

/* The current version's first line. */
static const char *head(void) {
  static char h[64];
  snprintf(h, sizeof h, "profile_version %d\n", LOOM_PROFILE_VERSION);
  return h;
}

static void test_versions(void) {
  double v = 0;
  char text[512];
  /* current: read */
  snprintf(text, sizeof text, "%striad_gbps 77\nattn_s0 12\n", head());
  write_file(text);
  CHECK(loom_profile_get("triad_gbps", &v) && v == 77);
  CHECK(loom_profile_get("attn_s0", &v) && v == 12);
  /* none (written before versions), an older one, a newer one: stale */
  const char *stale[] = {"triad_gbps 77\nattn_s0 12\n", "profile_version 1\ntriad_gbps 77\n",
                         "profile_version 999\ntriad_gbps 77\n", "profile_version 2x\ntriad_gbps 77\n"};
  for (size_t i = 0; i < sizeof stale / sizeof stale[0]; i++) {
    write_file(stale[i]);
    CHECK(!loom_profile_get("triad_gbps", &v));
  }
  /* a put over a stale file starts it afresh: the version, then the key */
  write_file("profile_version 1\ntriad_gbps 77\nsgemm_gflops 5\n");
  loom_profile_put("kernel_launch_s", 2e-6);
  const char *t = read_file();
  CHECK(strncmp(t, head(), strlen(head())) == 0);
  CHECK(strstr(t, "triad_gbps") == NULL && strstr(t, "sgemm_gflops") == NULL);
  CHECK(loom_profile_get("kernel_launch_s", &v) && v == 2e-6);
  /* a put keeps the current file's other keys; the version stays one line */
  loom_profile_put("triad_gbps", 30);
  loom_profile_put("kernel_launch_s", 3e-6);
  t = read_file();
  CHECK(strstr(t, "profile_version") == t && strstr(t + 1, "profile_version") == NULL);
  CHECK(loom_profile_get("triad_gbps", &v) && v == 30);
  CHECK(loom_profile_get("kernel_launch_s", &v) && v == 3e-6);
  /* the version is not a key a caller may set */
  loom_profile_put("profile_version", 1);
  CHECK(strncmp(read_file(), head(), strlen(head())) == 0);
  /* several at once, with a suffix; all or nothing */
  const char *keys[] = {"aa_one", "aa_two"};
  double put[2] = {1.5, -2.25}, got[2] = {0, 0};
  loom_profile_put_all(keys, 2, "_3t", put);
  CHECK(loom_profile_get_all(keys, 2, "_3t", got) && got[0] == 1.5 && got[1] == -2.25);
  CHECK(loom_profile_get("aa_two_3t", &v) && v == -2.25);
  CHECK(!loom_profile_get_all(keys, 2, "_4t", got));
  const char *some[] = {"aa_one", "aa_absent"};
  CHECK(!loom_profile_get_all(some, 2, "_3t", got));
  double bad[2] = {1.0, INFINITY};
  loom_profile_put_all(keys, 2, "_5t", bad); /* nothing written */
  CHECK(!loom_profile_get("aa_one_5t", &v));
}

/* Both rate tables: kept from a current file, measured over a stale one
 * (the values planted there are not what the machine gives). */
static void test_rates(loom_ctx *ctx) {
  char text[1024];
  snprintf(text, sizeof text,
           "%sattn_fwd_flops 1234\nattn_bwd_flops 2345\nattn_s0 7\nattn_gemm_flops 3456\n"
           "attn_softmax_s 1e-09\nattn_softmax_grad_s 2e-09\n"
           "rng_words_core_1t 11\nrng_gemm_flops_1t 12\nrng_attn_fwd_flops_1t 13\n"
           "rng_attn_bwd_flops_1t 14\nrng_attn_s0_1t 15\nrng_fused_penalty_1t 16\n"
           "rng_mask_read_bit_s_1t 17\n",
           head());
  write_file(text);
  loom_attention_costs c;
  loom_cpu_attention_costs(ctx, &c);
  CHECK(c.rates.attn_fwd_flops == 1234 && c.rates.attn_bwd_flops == 2345 &&
        c.rates.attn_s0 == 7 && c.rates.gemm_flops == 3456 && c.softmax_s == 1e-9 &&
        c.softmax_grad_s == 2e-9);
  loom_rng_model m;
  loom_cpu_rng_model(ctx, 1, &m);
  CHECK(m.rng_words_core == 11 && m.gemm_flops == 12 && m.attn_fwd_flops == 13 &&
        m.attn_bwd_flops == 14 && m.attn_s0 == 15 && m.fused_rng_penalty == 16 &&
        m.mask_read_bit_s == 17);
  /* the same facts in a file of the previous version: measured again */
  char *stale = strstr(text, "\n") + 1;
  char old[1100];
  snprintf(old, sizeof old, "profile_version %d\n%s", LOOM_PROFILE_VERSION - 1, stale);
  write_file(old);
  loom_cpu_attention_costs(ctx, &c);
  CHECK(c.rates.attn_fwd_flops > 1e6 && c.rates.attn_fwd_flops != 1234);
  CHECK(c.rates.gemm_flops > 1e6 && c.softmax_s > 0 && c.softmax_s < 1e-6);
  double v = 0;
  CHECK(loom_profile_get("attn_fwd_flops", &v) && v == c.rates.attn_fwd_flops);
  loom_cpu_rng_model(ctx, 1, &m);
  CHECK(m.rng_words_core > 1e6 && m.gemm_flops > 1e6 && m.fused_rng_penalty != 16);
  CHECK(loom_profile_get("rng_words_core_1t", &v) && v == m.rng_words_core);
  /* and kept from then on */
  loom_rng_model again;
  loom_cpu_rng_model(ctx, 1, &again);
  CHECK(again.rng_words_core == m.rng_words_core && again.attn_s0 == m.attn_s0);
  printf("remeasured: flash forward %.3g FLOP/s, GEMM %.3g FLOP/s, %.3g RNG words/s/core\n",
         c.rates.attn_fwd_flops, c.rates.gemm_flops, m.rng_words_core);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  CHECK(loom_profile_path(path, sizeof path));
  test_versions();
  test_rates(ctx);
  loom_ctx_free(ctx);
  return loom_test_finish("test_profile");
}
