/* syscall(): getdents64 for the signal-safe tree removal */
#define _GNU_SOURCE
#include "common.h"

#include "perf/machine.h"
#include "perf/profile.h"

#include <math.h>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int loom_test_failures = 0;
int loom_test_checks = 0;

int loom_test_finish(const char *name) {
  printf("%s: %d passed, %d failed\n", name, loom_test_checks - loom_test_failures,
         loom_test_failures);
  return loom_test_failures ? 1 : 0;
}

double loom_test_uniform(loom_test_rng *r, double lo, double hi) {
  uint64_t x = r->s ? r->s : 0x9e3779b97f4a7c15ull;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  r->s = x;
  return lo + (hi - lo) * (double)(x >> 11) / 9007199254740992.0;
}

/* Empties the open directory fd (subdirectories down to `depth` levels):
 * only system calls and stack buffers, no allocation or stdio, so the
 * signal handlers below may run it. Entries are read afresh after every
 * pass that removed some (getdents over a changing directory may skip). */
static void empty_dir(int fd, int depth) {
  _Alignas(8) char buf[2048];
  bool removed = true;
  while (removed) {
    removed = false;
    if (lseek(fd, 0, SEEK_SET) < 0) return;
    long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
    for (long off = 0; off < n;) {
      struct {
        uint64_t ino;
        int64_t next;
        unsigned short reclen;
        unsigned char type;
        char name[];
      } *e = (void *)(buf + off);
      off += e->reclen;
      if (!strcmp(e->name, ".") || !strcmp(e->name, "..")) continue;
      if (unlinkat(fd, e->name, 0) == 0) {
        removed = true;
        continue;
      }
      int sub = depth > 0 ? openat(fd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                          : -1;
      if (sub >= 0) {
        empty_dir(sub, depth - 1);
        close(sub);
      }
      if (unlinkat(fd, e->name, AT_REMOVEDIR) == 0) removed = true;
    }
  }
}

void loom_test_remove_tree(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    unlink(path);
    return;
  }
  empty_dir(fd, 16);
  close(fd);
  rmdir(path);
}

/* Every test program gets a private kernel cache (XDG_CACHE_HOME),
 * created before main and removed at exit, so tests never read or write
 * the user's cache, and a stale or foreign entry there cannot change a
 * result. Only the process that made it removes it (not a forked child).
 * A process ended by SIGTERM, SIGINT or SIGHUP removes it too (mpirun
 * ends a job's other ranks so when one fails; Ctrl-C). What no process
 * can remove, a SIGKILL's (a ctest timeout), stays under the build's
 * tests/tmp (LOOM_TEST_TMP), not /tmp; the folder's name carries its
 * owner's pid, so test_tmp_left tells such leftovers from live caches. */
static char test_cache[512];
static pid_t test_cache_owner;

void loom_test_remove_cache(void) {
  if (test_cache[0] && getpid() == test_cache_owner) loom_test_remove_tree(test_cache);
}

static void remove_cache_and_die(int sig) {
  loom_test_remove_cache();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* The directory the test caches go in: the build's (made if missing),
 * else $TMPDIR or /tmp. */
static const char *cache_base(void) {
#ifdef LOOM_TEST_TMP
  mkdir(LOOM_TEST_TMP, 0700);
  struct stat st;
  if (stat(LOOM_TEST_TMP, &st) == 0 && S_ISDIR(st.st_mode) && access(LOOM_TEST_TMP, W_OK) == 0)
    return LOOM_TEST_TMP;
#endif
  const char *tmp = getenv("TMPDIR");
  return tmp && tmp[0] ? tmp : "/tmp";
}

__attribute__((constructor)) static void make_test_cache(void) {
  snprintf(test_cache, sizeof test_cache, "%s/loom-test-cache-%ld-XXXXXX", cache_base(),
           (long)getpid());
  if (!mkdtemp(test_cache)) {
    test_cache[0] = '\0';
    return;
  }
  test_cache_owner = getpid();
  setenv("XDG_CACHE_HOME", test_cache, 1);
  atexit(loom_test_remove_cache);
  static const int ends[] = {SIGTERM, SIGINT, SIGHUP};
  for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
    struct sigaction old, sa = {.sa_handler = remove_cache_and_die};
    sigemptyset(&sa.sa_mask);
    /* a signal the caller ignores (nohup) stays ignored */
    if (sigaction(ends[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
      sigaction(ends[i], &sa, NULL);
  }
  /* A fixed machine profile: the plans of a test do not follow the timer
   * noise of a busy machine (launch cost, rates, the GEMM's row curve) */
  loom_profile_put("kernel_launch_s", 5e-6);
  loom_profile_put("triad_gbps", 10.0);
  loom_profile_put("sgemm_gflops", 100.0);
  static const double rows_eff[LOOM_GEMM_ROWS_POINTS] = {0.8, 0.9, 0.95, 1.0, 1.0};
  for (int32_t i = 0; i < LOOM_GEMM_ROWS_POINTS; i++) {
    char key[32];
    snprintf(key, sizeof key, "gemm_rows_eff_%d", LOOM_GEMM_ROWS_MIN << i);
    loom_profile_put(key, rows_eff[i]);
  }
  /* and the attention choice's rates (loom train's default picks by them):
   * this machine's figures, rounded */
  static const char *const attn_keys[] = {"attn_fwd_flops", "attn_bwd_flops", "attn_s0",
                                          "attn_gemm_flops", "attn_softmax_s",
                                          "attn_softmax_grad_s"};
  static const double attn_rates[] = {1.2e11, 1.2e11, 9.0, 1.7e11, 4.2e-9, 2.2e-10};
  loom_profile_put_all(attn_keys, 6, "", attn_rates);
}

loom_tensor **loom_test_run(loom_ctx *ctx, const loom_graph *g, const loom_session_options *o,
                            loom_tensor *const *in) {
  int32_t no = loom_graph_num_outputs(g);
  loom_tensor **out = calloc((size_t)no + 1, sizeof *out);
  loom_session *s = NULL;
  loom_status st = out ? loom_session_new(ctx, g, o, &s) : LOOM_STATUS_OUT_OF_MEMORY;
  if (!st)
    st = loom_session_run(s, loom_graph_num_inputs(g), (const loom_tensor *const *)in, no, out);
  loom_session_free(s);
  loom_test_checks++;
  if (st) {
    loom_test_failures++;
    fprintf(stderr, "loom_test_run: %s\n", loom_ctx_error(ctx));
    loom_test_free_tensors(out, no);
    return NULL;
  }
  return out;
}

void loom_test_free_tensors(loom_tensor **t, int32_t n) {
  for (int32_t i = 0; t && i < n; i++) loom_tensor_free(t[i]);
  free(t);
}

double loom_test_update_error(const loom_tensor *want, const loom_tensor *got,
                              const loom_tensor *base) {
  if (!want || !got || loom_tensor_numel(want) != loom_tensor_numel(got)) return INFINITY;
  const float *a = loom_tensor_data(want), *b = loom_tensor_data(got);
  const float *z = base ? loom_tensor_data(base) : NULL;
  int64_t n = loom_tensor_numel(want);
  double sq = 0, worst = 0;
  for (int64_t e = 0; e < n; e++) {
    double u = (double)a[e] - (z ? z[e] : 0.0);
    sq += u * u;
  }
  double scale = fmax(sqrt(sq / (double)(n ? n : 1)), 1e-30);
  for (int64_t e = 0; e < n; e++) {
    double d = fabs((double)a[e] - b[e]) / scale;
    if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
  }
  return worst;
}

loom_tensor **loom_test_uniform_inputs(loom_ctx *ctx, const loom_graph *g, uint64_t seed) {
  int32_t n = loom_graph_num_inputs(g);
  loom_tensor **in = calloc((size_t)n + 1, sizeof *in);
  loom_test_rng r = {seed};
  for (int32_t i = 0; in && i < n; i++) {
    loom_dtype dt;
    int32_t rank;
    int64_t shape[LOOM_MAX_RANK];
    CHECK_OK(ctx, loom_graph_value_type(g, loom_graph_input_value(g, i), &dt, &rank, shape));
    CHECK_OK(ctx, loom_tensor_new(ctx, dt, rank, shape, &in[i]));
    if (!in[i]) continue;
    float *d = loom_tensor_data(in[i]);
    for (int64_t e = 0; e < loom_tensor_numel(in[i]); e++) d[e] = (float)loom_test_uniform(&r, -1, 1);
  }
  return in;
}

loom_tensor **loom_test_gpt_fill_inputs(loom_ctx *ctx, const loom_graph *g,
                                        const loom_test_gpt_fill *f) {
  int32_t n = loom_graph_num_inputs(g);
  loom_tensor **in = calloc((size_t)n + 1, sizeof *in);
  loom_test_rng r = {f->seed};
  for (int32_t i = 0; in && i < n; i++) {
    loom_dtype dt;
    int32_t rank;
    int64_t shape[LOOM_MAX_RANK];
    CHECK_OK(ctx, loom_graph_value_type(g, loom_graph_input_value(g, i), &dt, &rank, shape));
    CHECK_OK(ctx, loom_tensor_new(ctx, dt, rank, shape, &in[i]));
    if (!in[i]) continue;
    const char *name = loom_graph_input_name(g, i);
    size_t len = strlen(name);
    bool gain = f->gain_hi > f->gain_lo && len >= 2 && strcmp(name + len - 2, ".g") == 0;
    void *d = loom_tensor_data(in[i]);
    float *x = d;
    for (int64_t e = 0; e < loom_tensor_numel(in[i]); e++) {
      if (dt == LOOM_DTYPE_I64) ((int64_t *)d)[e] = (int64_t)loom_test_uniform(&r, 0, (double)f->vocab - 0.01);
      else if (strcmp(name, "step") == 0) x[e] = f->step;
      else if (strcmp(name, "lr") == 0) x[e] = f->lr;
      else if (f->zero_moments && strncmp(name, "adam.", 5) == 0) x[e] = 0;
      else if (strncmp(name, "adam.v.", 7) == 0) x[e] = (float)loom_test_uniform(&r, f->v_lo, f->v_hi);
      else if (gain) x[e] = (float)loom_test_uniform(&r, f->gain_lo, f->gain_hi);
      else x[e] = (float)loom_test_uniform(&r, f->lo, f->hi);
    }
  }
  return in;
}

loom_tensor **loom_test_gpt_inputs(loom_ctx *ctx, const loom_graph *g, uint64_t seed) {
  loom_test_gpt_fill f = {.seed = seed, .vocab = 256, .step = 3, .lr = 1e-2f, .lo = -0.2,
                          .hi = 0.2, .v_lo = 1e-4, .v_hi = 1e-3};
  return loom_test_gpt_fill_inputs(ctx, g, &f);
}

bool loom_test_backend_selected(const char *name) {
  if (!strcmp(name, "ref") || !strcmp(name, "cpu")) return true;
  const char *list = getenv("LOOM_TEST_BACKENDS");
  if (!list || !list[0]) return true;
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && strncmp(p, name, n) == 0) return true;
    p += len;
    p += *p == ',';
  }
  return false;
}
