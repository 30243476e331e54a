/* The Chrome trace recorder: events from several threads, the JSON read
 * back with the strict reader, escaping, bad events, atomic saving. */
#include "common.h"

#include "core/ctx.h"
#include "io/json.h"
#include "runtime/trace.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define N_THREADS 4
#define N_PER_THREAD 2000

static char dir[64];

/* The whole file, NUL-terminated (NULL if unreadable). */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  size_t r;
  while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += r;
    if (cap - n < 2) {
      char *q = realloc(buf, cap *= 2);
      if (!q) free(buf);
      buf = q;
    }
  }
  fclose(f);
  if (buf) buf[n] = '\0';
  *len = n;
  return buf;
}

/* Saves t to dir/name and parses it; NULL (after a failed check) on error. */
static loom_json *save_and_parse(loom_ctx *ctx, loom_trace *t, const char *name) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  CHECK_OK(ctx, loom_trace_save(ctx, t, path));
  size_t len = 0;
  char *text = slurp(path, &len);
  CHECK(text != NULL);
  if (!text) return NULL;
  loom_json *j = NULL;
  CHECK_OK(ctx, loom_json_parse(ctx, text, len, &j));
  free(text);
  if (!j) return NULL;
  const loom_json *ev = loom_json_get(j, "traceEvents");
  const loom_json *unit = loom_json_get(j, "displayTimeUnit");
  CHECK(j->kind == LOOM_JSON_OBJECT && j->n == 2);
  CHECK(ev && ev->kind == LOOM_JSON_ARRAY);
  CHECK(unit && unit->kind == LOOM_JSON_STRING && strcmp(unit->str, "ms") == 0);
  if (!ev || ev->kind != LOOM_JSON_ARRAY) {
    loom_json_free(j);
    return NULL;
  }
  return j;
}

static const char *jstr(const loom_json *o, const char *key) {
  const loom_json *v = loom_json_get(o, key);
  return v && v->kind == LOOM_JSON_STRING ? v->str : NULL;
}

static double jnum(const loom_json *o, const char *key) {
  const loom_json *v = loom_json_get(o, key);
  return v && v->kind == LOOM_JSON_NUMBER ? v->num : NAN;
}

/* The name given to lane tid by a thread_name metadata event, or NULL. */
static const char *lane_name(const loom_json *ev, int tid) {
  for (int32_t i = 0; i < ev->n; i++) {
    const loom_json *e = &ev->items[i];
    const char *ph = jstr(e, "ph"), *name = jstr(e, "name");
    if (ph && strcmp(ph, "M") == 0 && name && strcmp(name, "thread_name") == 0 &&
        jnum(e, "tid") == tid)
      return jstr(loom_json_get(e, "args"), "name");
  }
  return NULL;
}

typedef struct job {
  loom_trace *t;
  int32_t tid;
} job;

static void *record(void *p) {
  job *jb = p;
  char name[32];
  for (int i = 0; i < N_PER_THREAD; i++) {
    snprintf(name, sizeof name, "op %d", i % 37); /* interned, and a temporary */
    double b = loom_trace_now(jb->t);
    double e = loom_trace_now(jb->t);
    loom_trace_arg a[1] = {{"i", i}};
    if (!loom_trace_event_args(jb->t, jb->tid, name, i % 2 ? "even" : "odd", b, e, a, 1))
      return (void *)1;
  }
  return NULL;
}

static void test_threads(loom_ctx *ctx) {
  loom_trace *t = NULL;
  CHECK_OK(ctx, loom_trace_new(ctx, &t));
  if (!t) return;
  pthread_t th[N_THREADS];
  job jobs[N_THREADS];
  char lane[32];
  for (int k = 0; k < N_THREADS; k++) {
    snprintf(lane, sizeof lane, "thread %d", k);
    CHECK_OK(ctx, loom_trace_name_lane(ctx, t, k + 1, lane));
    jobs[k] = (job){t, k + 1};
    CHECK(pthread_create(&th[k], NULL, record, &jobs[k]) == 0);
  }
  double b = loom_trace_now(t);
  CHECK(loom_trace_event(t, 0, "main work", NULL, b, loom_trace_now(t)));
  for (int k = 0; k < N_THREADS; k++) {
    void *r = NULL;
    pthread_join(th[k], &r);
    CHECK(r == NULL);
  }
  CHECK(loom_trace_count(t) == N_THREADS * N_PER_THREAD + 1);

  loom_json *j = save_and_parse(ctx, t, "threads.json");
  loom_trace_free(t);
  if (!j) return;
  const loom_json *ev = loom_json_get(j, "traceEvents");
  int per_tid[N_THREADS + 1] = {0};
  double last_end[N_THREADS + 1], last_ts = -1.0;
  for (int k = 0; k <= N_THREADS; k++) last_end[k] = -1.0;
  int bad = 0, n_meta = 0;
  for (int32_t i = 0; i < ev->n; i++) {
    const loom_json *e = &ev->items[i];
    const char *ph = jstr(e, "ph");
    if (!ph || jnum(e, "pid") != 1) {
      bad++;
      continue;
    }
    if (strcmp(ph, "M") == 0) {
      n_meta++;
      continue;
    }
    double ts = jnum(e, "ts"), dur = jnum(e, "dur"), tid = jnum(e, "tid");
    const char *name = jstr(e, "name"), *cat = jstr(e, "cat");
    if (strcmp(ph, "X") != 0 || !name || !cat || !(ts >= 0) || !(dur >= 0) ||
        !(tid >= 0 && tid <= N_THREADS) || ts < last_ts) {
      bad++;
      continue;
    }
    int k = (int)tid;
    last_ts = ts;
    /* each thread records one event after the other */
    if (ts < last_end[k] - 0.0015) bad++;
    last_end[k] = ts + dur;
    per_tid[k]++;
    if (k > 0) {
      const loom_json *args = loom_json_get(e, "args");
      double i_arg = jnum(args, "i");
      char want[32];
      snprintf(want, sizeof want, "op %d", (int)i_arg % 37);
      if (strcmp(name, want) != 0 || strcmp(cat, (int)i_arg % 2 ? "even" : "odd") != 0) bad++;
    } else if (strcmp(name, "main work") != 0 || strcmp(cat, "loom") != 0) {
      bad++;
    }
  }
  CHECK(bad == 0);
  CHECK(per_tid[0] == 1);
  for (int k = 1; k <= N_THREADS; k++) CHECK(per_tid[k] == N_PER_THREAD);
  /* process_name, then thread_name and thread_sort_index per lane */
  CHECK(n_meta == 1 + 2 * (N_THREADS + 1));
  CHECK(lane_name(ev, 0) && strcmp(lane_name(ev, 0), "main") == 0);
  CHECK(lane_name(ev, 3) && strcmp(lane_name(ev, 3), "thread 2") == 0);
  loom_json_free(j);
}

static void test_escaping(loom_ctx *ctx) {
  loom_trace *t = NULL;
  CHECK_OK(ctx, loom_trace_new(ctx, &t));
  if (!t) return;
  const char *names[] = {"say \"hi\"", "back\\slash", "line\nbreak\ttab\r",
                         "ctl\x01\x1f\x7f", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "}],{"};
  int n = (int)(sizeof names / sizeof names[0]);
  double b = loom_trace_now(t);
  for (int i = 0; i < n; i++) CHECK(loom_trace_event(t, i, names[i], names[i], b, b + 1e-3 * i));
  /* invalid UTF-8 (a stray continuation, a truncated sequence, an encoded
   * surrogate) becomes U+FFFD */
  CHECK(loom_trace_event(t, 0, "a\x80z\xe2\x82", "x", b, b));
  CHECK(loom_trace_event(t, 0, "s\xed\xa0\x80", "x", b, b));
  CHECK_OK(ctx, loom_trace_name_lane(ctx, t, 0, "lane \"0\"\\"));
  CHECK_OK(ctx, loom_trace_name_lane(ctx, t, 7, "renamed later"));
  CHECK_OK(ctx, loom_trace_name_lane(ctx, t, 7, "seven"));
  loom_json *j = save_and_parse(ctx, t, "escape.json");
  loom_trace_free(t);
  if (!j) return;
  const loom_json *ev = loom_json_get(j, "traceEvents");
  int found = 0, replaced = 0;
  for (int32_t k = 0; k < ev->n; k++) {
    const loom_json *e = &ev->items[k];
    const char *name = jstr(e, "name"), *cat = jstr(e, "cat");
    for (int i = 0; i < n; i++)
      if (name && cat && strcmp(name, names[i]) == 0 && strcmp(cat, names[i]) == 0 &&
          jnum(e, "tid") == i && fabs(jnum(e, "dur") - 1e3 * i) < 0.01)
        found++;
    if (name && (strcmp(name, "a\xef\xbf\xbdz\xef\xbf\xbd\xef\xbf\xbd") == 0 ||
                 strcmp(name, "s\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd") == 0))
      replaced++;
  }
  CHECK(found == n);
  CHECK(replaced == 2);
  CHECK(lane_name(ev, 0) && strcmp(lane_name(ev, 0), "lane \"0\"\\") == 0);
  CHECK(lane_name(ev, 7) && strcmp(lane_name(ev, 7), "seven") == 0);
  loom_json_free(j);
}

/* Events with bad times are dropped and make write fail before writing. */
static void test_bad_events(loom_ctx *ctx) {
  loom_trace *t = NULL;
  CHECK_OK(ctx, loom_trace_new(ctx, &t));
  if (!t) return;
  double b = loom_trace_now(t);
  CHECK(loom_trace_event(t, 0, "fine", "c", b, b));
  CHECK(!loom_trace_event(t, 1, "reversed", "c", b, b - 1.0));
  CHECK(!loom_trace_event(t, 1, "nan", "c", NAN, b));
  CHECK(!loom_trace_event(t, 1, NULL, "c", b, b));
  loom_trace_arg a[1] = {{NULL, 1}};
  CHECK(!loom_trace_event_args(t, 1, "nullkey", "c", b, b, a, 1));
  CHECK(!loom_trace_event_args(t, 1, "toomany", "c", b, b, a, LOOM_TRACE_MAX_ARGS + 1));
  CHECK(loom_trace_count(t) == 1);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK(f != NULL);
  if (f) {
    CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_trace_write(ctx, t, f));
    CHECK(strstr(loom_ctx_error(ctx), "5 events") && strstr(loom_ctx_error(ctx), "reversed"));
    fclose(f);
    CHECK(len == 0);
    free(buf);
  }
  char path[256];
  snprintf(path, sizeof path, "%s/bad.json", dir);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_trace_save(ctx, t, path));
  CHECK(strstr(loom_ctx_error(ctx), path) != NULL);
  CHECK(access(path, F_OK) != 0);
  loom_trace_free(t);
}

static void test_null_and_args(loom_ctx *ctx) {
  /* a NULL trace records nothing and never fails */
  CHECK(loom_trace_now(NULL) == 0.0);
  CHECK(loom_trace_event(NULL, 0, "x", "y", 1.0, 0.0));
  CHECK_OK(ctx, loom_trace_name_lane(ctx, NULL, 0, "x"));
  CHECK(loom_trace_count(NULL) == 0);
  loom_trace_free(NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_trace_new(ctx, NULL));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_trace_write(ctx, NULL, stdout));
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT, loom_trace_save(ctx, NULL, "x.json"));

  loom_trace *t = NULL;
  CHECK_OK(ctx, loom_trace_new(ctx, &t));
  if (!t) return;
  double b = loom_trace_now(t);
  loom_trace_arg a[LOOM_TRACE_MAX_ARGS] = {{"m", 64}, {"big", INT64_MAX}, {"neg", -5}, {"m2", 0}};
  CHECK(loom_trace_event_args(t, 2, "gemm", "gemm", b, b + 0.5, a, LOOM_TRACE_MAX_ARGS));
  CHECK(loom_trace_event_args(t, 2, "none", "gemm", b, b, NULL, 0));
  loom_json *j = save_and_parse(ctx, t, "args.json");
  loom_trace_free(t);
  if (!j) return;
  const loom_json *ev = loom_json_get(j, "traceEvents");
  int seen = 0;
  for (int32_t i = 0; i < ev->n; i++) {
    const loom_json *e = &ev->items[i];
    const char *name = jstr(e, "name");
    const loom_json *args = loom_json_get(e, "args");
    if (name && strcmp(name, "gemm") == 0) {
      const loom_json *big = loom_json_get(args, "big");
      CHECK(args && args->n == 4 && jnum(args, "m") == 64 && jnum(args, "neg") == -5);
      CHECK(big && big->is_int && big->i == INT64_MAX);
      CHECK(fabs(jnum(e, "dur") - 5e5) < 0.01);
      seen++;
    } else if (name && strcmp(name, "none") == 0) {
      CHECK(args == NULL && jnum(e, "dur") == 0);
      seen++;
    }
  }
  CHECK(seen == 2);
  loom_json_free(j);
}

/* Sums by category and name prefix: what the machine bench fits its
 * attention rate and launch cost from. */
static void test_sums(loom_ctx *ctx) {
  loom_trace *t = NULL;
  CHECK_OK(ctx, loom_trace_new(ctx, &t));
  if (!t) return;
  double b = loom_trace_now(t);
  CHECK(loom_trace_event(t, 0, "flash_attention", "eager", b, b + 0.25));
  CHECK(loom_trace_event(t, 0, "flash_attention_grad", "eager", b, b + 0.5));
  CHECK(loom_trace_event(t, 0, "pad", "eager", b, b + 2));
  CHECK(loom_trace_event(t, 1, "matmul", "gemm", b, b + 4));
  int64_t n = -1;
  CHECK(fabs(loom_trace_sum(t, NULL, "flash_attention", &n) - 0.75) < 1e-9 && n == 2);
  CHECK(fabs(loom_trace_sum(t, "eager", NULL, &n) - 2.75) < 1e-9 && n == 3);
  CHECK(fabs(loom_trace_sum(t, NULL, NULL, &n) - 6.75) < 1e-9 && n == 4);
  CHECK(loom_trace_sum(t, "gemm", "flash", &n) == 0 && n == 0);
  CHECK(fabs(loom_trace_seconds(t, "gemm") - 4) < 1e-9);
  CHECK(loom_trace_sum(NULL, NULL, NULL, &n) == 0 && n == 0);
  loom_trace_free(t);
}

static int count_entries(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static void test_save(loom_ctx *ctx) {
  char sub[128], path[256];
  snprintf(sub, sizeof sub, "%s/save", dir);
  CHECK(mkdir(sub, 0700) == 0);
  snprintf(path, sizeof path, "%s/trace.json", sub);
  loom_trace *t = NULL;
  CHECK_OK(ctx, loom_trace_new(ctx, &t));
  if (!t) return;
  CHECK_OK(ctx, loom_trace_save(ctx, t, path));
  size_t len1 = 0, len2 = 0;
  char *a = slurp(path, &len1);
  double b = loom_trace_now(t);
  CHECK(loom_trace_event(t, 0, "later", NULL, b, b));
  CHECK_OK(ctx, loom_trace_save(ctx, t, path)); /* replaces the file */
  char *c = slurp(path, &len2);
  CHECK(a && c && len2 > len1 && strstr(c, "later") && !strstr(a, "later"));
  free(a);
  free(c);
  CHECK(count_entries(sub) == 1); /* no temporary left behind */

  /* a missing directory: the message names the path */
  char bad[256];
  snprintf(bad, sizeof bad, "%s/missing/trace.json", sub);
  CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_trace_save(ctx, t, bad));
  CHECK(strstr(loom_ctx_error(ctx), bad) != NULL);
  /* a directory in the way of the rename: the temporary is removed */
  snprintf(bad, sizeof bad, "%s/adir", sub);
  CHECK(mkdir(bad, 0700) == 0);
  CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_trace_save(ctx, t, bad));
  CHECK(strstr(loom_ctx_error(ctx), bad) != NULL);
  CHECK(count_entries(sub) == 2);
  rmdir(bad);
  unlink(path);
  rmdir(sub);
  loom_trace_free(t);
}

static void remove_dir(void) {
  DIR *d = opendir(dir);
  if (!d) return;
  char p[512];
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx) != LOOM_STATUS_OK) return 1;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/loom-trace-XXXXXX", tmp && tmp[0] && strlen(tmp) < 40 ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "cannot create a temporary directory\n");
    return 1;
  }
  test_threads(ctx);
  test_escaping(ctx);
  test_bad_events(ctx);
  test_null_and_args(ctx);
  test_sums(ctx);
  test_save(ctx);
  remove_dir();
  loom_ctx_free(ctx);
  return loom_test_finish("test_trace");
}
