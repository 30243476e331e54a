/* Writing and reading user files safely (core/file.h), through every writer
 * that uses it: safetensors (checkpoints), .npy and the Chrome trace. */
#include "common.h"

#include "core/file.h"
#include "io/safetensors.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static const char *at(const char *name) {
  static char buf[4][256];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static void put_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* The file's text (first 63 bytes) in a static buffer; "" if unreadable. */
static const char *text_of(const char *path) {
  static char buf[64];
  buf[0] = '\0';
  FILE *f = fopen(path, "rb");
  if (!f) return buf;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* No temporary file is left behind in dir. */
static int leftovers(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "ls -A %s | grep -c '\\.tmp' >/dev/null", dir);
  return system(cmd) == 0;
}

/* ---- the three writers -------------------------------------------------- */

typedef loom_status (*writer_fn)(loom_ctx *ctx, const char *path);

static float data4[4] = {1, 2, 3, 4};

static loom_status write_st(loom_ctx *ctx, const char *path) {
  loom_st_tensor t = {.name = "w",
                      .dtype = LOOM_DTYPE_F32,
                      .rank = 1,
                      .shape = {4},
                      .data = data4,
                      .nbytes = sizeof data4};
  return loom_safetensors_save(ctx, path, 1, &t, 0, NULL, NULL);
}

static loom_status write_npy(loom_ctx *ctx, const char *path) {
  loom_tensor *t = NULL;
  int64_t shape[1] = {4};
  LOOM_TRY(loom_tensor_wrap(ctx, LOOM_DTYPE_F32, 1, shape, data4, &t));
  loom_status s = loom_tensor_save_npy(ctx, t, path);
  loom_tensor_free(t);
  return s;
}

static loom_status write_trace(loom_ctx *ctx, const char *path) {
  LOOM_TRY(loom_ctx_trace_begin(ctx));
  return loom_ctx_trace_end(ctx, path);
}

static const struct {
  const char *name;
  writer_fn fn;
} writers[] = {{"safetensors", write_st}, {"npy", write_npy}, {"trace", write_trace}};

static void test_writers_refuse_special_targets(loom_ctx *ctx) {
  for (int w = 0; w < LOOM_ARRAY_LEN(writers); w++) {
    const char *what = writers[w].name;
    int failures = loom_test_failures;
    /* a plain save, then a replace of that regular file */
    const char *out = at("out");
    remove(out);
    CHECK_OK(ctx, writers[w].fn(ctx, out));
    CHECK_OK(ctx, writers[w].fn(ctx, out));
    struct stat st;
    CHECK(lstat(out, &st) == 0 && S_ISREG(st.st_mode));
    CHECK(!leftovers());

    /* "G.tmp -> victim": the old fixed temporary name followed it */
    const char *victim = at("victim"), *g = at("g"), *gtmp = at("g.tmp");
    put_text(victim, "victim");
    remove(gtmp);
    CHECK(symlink(victim, gtmp) == 0);
    CHECK_OK(ctx, writers[w].fn(ctx, g));
    CHECK(strcmp(text_of(victim), "victim") == 0);
    remove(gtmp);
    remove(g);

    /* a symlink at the target is refused, and stays a symlink */
    const char *link = at("link");
    remove(link);
    CHECK(symlink(victim, link) == 0);
    CHECK_STATUS(ctx, LOOM_STATUS_IO, writers[w].fn(ctx, link));
    CHECK(strstr(loom_ctx_error(ctx), "symbolic link") != NULL);
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(strcmp(text_of(victim), "victim") == 0);
    remove(link);

    /* a FIFO (a device node behaves the same) is not replaced by a file */
    const char *fifo = at("fifo");
    remove(fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_STATUS(ctx, LOOM_STATUS_IO, writers[w].fn(ctx, fifo));
    CHECK(strstr(loom_ctx_error(ctx), "FIFO") != NULL);
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    remove(fifo);
    /* /dev/null: refused before a write is tried (root's save replaced it) */
    CHECK_STATUS(ctx, LOOM_STATUS_IO, writers[w].fn(ctx, "/dev/null"));
    CHECK(strstr(loom_ctx_error(ctx), "character device") != NULL);
    CHECK(lstat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));

    /* a directory, a missing directory, a read-only file */
    const char *sub = at("sub");
    CHECK(mkdir(sub, 0700) == 0);
    CHECK_STATUS(ctx, LOOM_STATUS_IO, writers[w].fn(ctx, sub));
    CHECK(strstr(loom_ctx_error(ctx), "directory") != NULL);
    rmdir(sub);
    CHECK_STATUS(ctx, LOOM_STATUS_IO, writers[w].fn(ctx, at("nodir/x")));
    CHECK(strstr(loom_ctx_error(ctx), "nodir") != NULL);
    const char *ro = at("ro");
    put_text(ro, "keep");
    CHECK(chmod(ro, 0444) == 0);
    CHECK_STATUS(ctx, LOOM_STATUS_IO, writers[w].fn(ctx, ro));
    CHECK(strstr(loom_ctx_error(ctx), "read-only") != NULL);
    CHECK(strcmp(text_of(ro), "keep") == 0);
    remove(ro);
    CHECK(!leftovers());
    if (loom_test_failures > failures) fprintf(stderr, "  (writer %s)\n", what);
  }
}

/* A new file gets 0666 less the umask; a replaced one keeps its mode. */
static void test_modes(loom_ctx *ctx) {
  const char *p = at("mode");
  remove(p);
  mode_t old = umask(027);
  CHECK_OK(ctx, loom_file_write_atomic(ctx, p, "a", 1, 0));
  struct stat st;
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0640);
  umask(old);
  CHECK(chmod(p, 0600) == 0);
  CHECK_OK(ctx, loom_file_write_atomic(ctx, p, "bb", 2, LOOM_FILE_REPLACE));
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0600 && st.st_size == 2);
  /* without LOOM_FILE_REPLACE an existing file stays */
  CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_file_write_atomic(ctx, p, "c", 1, 0));
  CHECK(strstr(loom_ctx_error(ctx), "already exists") != NULL);
  CHECK(strcmp(text_of(p), "bb") == 0);
  /* names with control bytes are refused as file names */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_file_check_output(ctx, at("a\x1b]0;X\x07"), 0));
  CHECK(strchr(loom_ctx_error(ctx), '\x1b') == NULL);
  CHECK(strstr(loom_ctx_error(ctx), "\\x1b]0;X\\x07") != NULL);
  remove(p);
}

/* Two threads saving different checkpoints to one path: every load sees
 * one of them whole (the fixed "F.tmp" interleaved them). */
typedef struct saver {
  const char *path;
  float fill;
  int fails;
} saver;

static void *save_loop(void *arg) {
  saver *s = arg;
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return NULL;
  static float big[2][1 << 16];
  float *d = big[s->fill > 1.5f];
  for (int i = 0; i < (1 << 16); i++)
    d[i] = s->fill;
  loom_st_tensor t = {.name = "w",
                      .dtype = LOOM_DTYPE_F32,
                      .rank = 1,
                      .shape = {1 << 16},
                      .data = d,
                      .nbytes = sizeof big[0]};
  for (int it = 0; it < 30; it++)
    if (loom_safetensors_save(ctx, s->path, 1, &t, 0, NULL, NULL)) s->fails++;
  loom_ctx_free(ctx);
  return NULL;
}

static void test_concurrent_saves(loom_ctx *ctx) {
  const char *p = at("shared.safetensors");
  saver a = {p, 1.0f, 0}, b = {p, 2.0f, 0};
  pthread_t ta, tb;
  CHECK(pthread_create(&ta, NULL, save_loop, &a) == 0);
  CHECK(pthread_create(&tb, NULL, save_loop, &b) == 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  CHECK(a.fails == 0 && b.fails == 0);
  loom_safetensors *st = NULL;
  CHECK_OK(ctx, loom_safetensors_load(ctx, p, &st));
  if (st && st->n_tensors == 1) {
    float first, last;
    memcpy(&first, st->tensors[0].data, 4);
    memcpy(&last, (const char *)st->tensors[0].data + st->tensors[0].nbytes - 4, 4);
    CHECK((first == 1.0f || first == 2.0f) && last == first);
  }
  loom_safetensors_free(st);
  CHECK(!leftovers());
  remove(p);
}

/* Reading: regular files only (a FIFO would block, /dev/zero never ends),
 * and at most the limit. */
static void test_reads(loom_ctx *ctx) {
  char *buf = NULL;
  size_t n = 0;
  const char *fifo = at("rfifo");
  CHECK(mkfifo(fifo, 0600) == 0);
  CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_file_read(ctx, fifo, 1 << 20, &buf, &n));
  CHECK(strstr(loom_ctx_error(ctx), "FIFO") != NULL);
  loom_safetensors *st = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_safetensors_load(ctx, fifo, &st));
  loom_tensor *t = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_tensor_load_npy(ctx, fifo, &t));
  loom_graph *g = NULL;
  CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_graph_load(ctx, "/dev/zero", &g));
  CHECK(strstr(loom_ctx_error(ctx), "character device") != NULL);
  remove(fifo);
  const char *p = at("small");
  put_text(p, "0123456789");
  CHECK_STATUS(ctx, LOOM_STATUS_IO, loom_file_read(ctx, p, 9, &buf, &n));
  CHECK(strstr(loom_ctx_error(ctx), "limit of 9 bytes") != NULL);
  CHECK_OK(ctx, loom_file_read(ctx, p, 10, &buf, &n));
  CHECK(buf && n == 10 && strcmp(buf, "0123456789") == 0);
  free(buf);
  remove(p);
}

static void test_escape(void) {
  char b[64];
  CHECK(strcmp(loom_escape("\x1b]0;X\x07", b, sizeof b), "\\x1b]0;X\\x07") == 0);
  CHECK(strcmp(loom_escape("caf\xc3\xa9 ok", b, sizeof b), "caf\xc3\xa9 ok") == 0);
  /* C1 control U+009B (CSI) and a stray continuation byte */
  CHECK(strcmp(loom_escape("a\xc2\x9b"
                           "b\x80",
                           b, sizeof b),
               "a\\xc2\\x9bb\\x80") == 0);
  CHECK(strcmp(loom_escape("\x7f\n", b, sizeof b), "\\x7f\\x0a") == 0);
  /* truncation never splits an escape */
  CHECK(strcmp(loom_escape("ab\x01", b, 5), "ab") == 0);
  CHECK(loom_has_control_bytes("x\x1b") && !loom_has_control_bytes("caf\xc3\xa9"));
  /* and every error message is escaped */
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return;
  loom_error(ctx, LOOM_STATUS_PARSE, "name '%s'", "\x1b[2J");
  CHECK(strcmp(loom_ctx_error(ctx), "name '\\x1b[2J'") == 0);
  loom_error_prefix(ctx, "in \x07");
  CHECK(strcmp(loom_ctx_error(ctx), "in \\x07: name '\\x1b[2J'") == 0);
  /* a message keeps its lines (a compiler's output) */
  loom_error(ctx, LOOM_STATUS_INTERNAL, "failed:\n\tline\x1b");
  CHECK(strcmp(loom_ctx_error(ctx), "failed:\n\tline\\x1b") == 0);
  loom_ctx_free(ctx);
}

static void test_same_file(void) {
  const char *a = at("same"), *l = at("same_link");
  put_text(a, "x");
  CHECK(symlink(a, l) == 0);
  CHECK(loom_file_same(a, a) && loom_file_same(a, l) && !loom_file_same(a, at("other")));
  /* not there yet: the same name in the same directory */
  char dot[300];
  snprintf(dot, sizeof dot, "%s/./new", dir);
  CHECK(loom_file_same(at("new"), dot) && !loom_file_same(at("new"), at("new2")));
  remove(l);
  remove(a);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/loom_test_file_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  test_escape();
  test_same_file();
  test_writers_refuse_special_targets(ctx);
  test_modes(ctx);
  test_concurrent_saves(ctx);
  test_reads(ctx);
  loom_ctx_free(ctx);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return loom_test_finish("test_file");
}
