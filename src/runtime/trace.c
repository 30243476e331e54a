/*
 * Chrome trace recorder (trace.h). One mutex guards everything: recording
 * is a hash lookup per string and an amortised O(1) append, short enough
 * that a lock-free buffer would not pay for its complexity here.
 */
#include "runtime/trace.h"

#include "core/file.h"
#include "core/clock.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Strings are offsets into the pool (it moves when it grows), plus one so
 * that 0 means "none". */
typedef struct trace_event {
  double begin, end;
  int32_t tid;
  uint32_t name, cat;
  uint32_t n_args;
  size_t arg0; /* index into args */
} trace_event;

typedef struct trace_argv {
  uint32_t key;
  int64_t value;
} trace_argv;

typedef struct trace_lane {
  int32_t tid;
  uint32_t name;
} trace_lane;

struct loom_trace {
  pthread_mutex_t mu;
  double t0;
  trace_event *ev;
  size_t n_ev, cap_ev;
  trace_argv *args;
  size_t n_args, cap_args;
  trace_lane *lanes;
  size_t n_lanes, cap_lanes;
  char *pool; /* interned NUL-terminated strings */
  size_t pool_len, pool_cap;
  uint32_t *slots; /* open-addressing hash of pool strings (offset + 1) */
  size_t n_slots, n_interned;
  int64_t dropped_oom, dropped_bad;
  char first_bad[160];
};

/* Grows *p to hold need elements (doubling, so appends are amortised O(1)). */
static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t n = *cap ? *cap : 64;
  while (n < need) {
    if (n > SIZE_MAX / 2 / elem) return false;
    n *= 2;
  }
  void *q = realloc(*p, n * elem);
  if (!q) return false;
  *p = q;
  *cap = n;
  return true;
}

static uint64_t str_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

static bool rehash(loom_trace *t) {
  size_t n = t->n_slots ? 2 * t->n_slots : 64;
  uint32_t *s = calloc(n, sizeof *s);
  if (!s) return false;
  for (size_t i = 0; i < t->n_slots; i++) {
    uint32_t v = t->slots[i];
    if (!v) continue;
    size_t j = str_hash(t->pool + v - 1) & (n - 1);
    while (s[j]) j = (j + 1) & (n - 1);
    s[j] = v;
  }
  free(t->slots);
  t->slots = s;
  t->n_slots = n;
  return true;
}

/* The pool handle of s (added if new), 0 when out of memory. Caller locks. */
static uint32_t intern(loom_trace *t, const char *s) {
  if (2 * (t->n_interned + 1) > t->n_slots && !rehash(t)) return 0;
  size_t mask = t->n_slots - 1, j = str_hash(s) & mask;
  for (; t->slots[j]; j = (j + 1) & mask)
    if (strcmp(t->pool + t->slots[j] - 1, s) == 0) return t->slots[j];
  size_t len = strlen(s) + 1;
  if (len > UINT32_MAX - 1 - t->pool_len) return 0;
  if (!grow((void **)&t->pool, &t->pool_cap, t->pool_len + len, 1)) return 0;
  memcpy(t->pool + t->pool_len, s, len);
  t->slots[j] = (uint32_t)t->pool_len + 1;
  t->pool_len += len;
  t->n_interned++;
  return t->slots[j];
}

static bool set_lane(loom_trace *t, int32_t tid, const char *name) {
  uint32_t h = intern(t, name);
  if (!h) return false;
  for (size_t i = 0; i < t->n_lanes; i++)
    if (t->lanes[i].tid == tid) {
      t->lanes[i].name = h;
      return true;
    }
  if (!grow((void **)&t->lanes, &t->cap_lanes, t->n_lanes + 1, sizeof *t->lanes)) return false;
  t->lanes[t->n_lanes++] = (trace_lane){tid, h};
  return true;
}

loom_status loom_trace_new(loom_ctx *ctx, loom_trace **out) {
  if (!out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "trace_new: out is NULL");
  *out = NULL;
  loom_trace *t = loom_calloc(ctx, 1, sizeof *t);
  if (!t) return LOOM_STATUS_OUT_OF_MEMORY;
  int rc = pthread_mutex_init(&t->mu, NULL);
  if (rc != 0) {
    free(t);
    return loom_error(ctx, LOOM_STATUS_INTERNAL, "trace_new: cannot create a mutex: %s",
                      strerror(rc));
  }
  if (!set_lane(t, 0, "main")) {
    loom_trace_free(t);
    return loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "trace_new: out of memory");
  }
  t->t0 = loom_now_s();
  *out = t;
  return LOOM_STATUS_OK;
}

void loom_trace_free(loom_trace *t) {
  if (!t) return;
  pthread_mutex_destroy(&t->mu);
  free(t->ev);
  free(t->args);
  free(t->lanes);
  free(t->pool);
  free(t->slots);
  free(t);
}

double loom_trace_now(const loom_trace *t) { return t ? loom_now_s() : 0.0; }

bool loom_trace_event(loom_trace *t, int32_t tid, const char *name, const char *cat,
                      double t_begin_s, double t_end_s) {
  return loom_trace_event_args(t, tid, name, cat, t_begin_s, t_end_s, NULL, 0);
}

bool loom_trace_event_args(loom_trace *t, int32_t tid, const char *name, const char *cat,
                           double t_begin_s, double t_end_s, const loom_trace_arg *args,
                           int32_t n_args) {
  if (!t) return true;
  bool bad = !name || !isfinite(t_begin_s) || !isfinite(t_end_s) || t_end_s < t_begin_s ||
             n_args < 0 || n_args > LOOM_TRACE_MAX_ARGS || (n_args > 0 && !args);
  for (int32_t i = 0; !bad && i < n_args; i++) bad = !args[i].key;
  pthread_mutex_lock(&t->mu);
  if (bad) {
    if (t->dropped_bad++ == 0)
      snprintf(t->first_bad, sizeof t->first_bad,
               "'%.60s' on lane %d (begin %g s, end %g s, %d args)", name ? name : "(null)",
               tid, t_begin_s, t_end_s, n_args);
    pthread_mutex_unlock(&t->mu);
    return false;
  }
  trace_event e = {.begin = t_begin_s, .end = t_end_s, .tid = tid, .n_args = (uint32_t)n_args,
                   .arg0 = t->n_args};
  e.name = intern(t, name);
  e.cat = intern(t, cat ? cat : "loom");
  bool ok = e.name && e.cat &&
            grow((void **)&t->ev, &t->cap_ev, t->n_ev + 1, sizeof *t->ev) &&
            grow((void **)&t->args, &t->cap_args, t->n_args + (size_t)n_args, sizeof *t->args);
  for (int32_t i = 0; ok && i < n_args; i++) {
    uint32_t k = intern(t, args[i].key);
    ok = k != 0;
    t->args[e.arg0 + (size_t)i] = (trace_argv){k, args[i].value};
  }
  if (ok) {
    t->ev[t->n_ev++] = e;
    t->n_args += (size_t)n_args;
  } else {
    t->dropped_oom++;
  }
  pthread_mutex_unlock(&t->mu);
  return ok;
}

loom_status loom_trace_name_lane(loom_ctx *ctx, loom_trace *t, int32_t tid, const char *name) {
  if (!t) return LOOM_STATUS_OK;
  if (!name) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "trace: lane name is NULL");
  pthread_mutex_lock(&t->mu);
  bool ok = set_lane(t, tid, name);
  pthread_mutex_unlock(&t->mu);
  return ok ? LOOM_STATUS_OK
            : loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "trace: out of memory naming lane %d",
                         tid);
}

int64_t loom_trace_count(loom_trace *t) {
  if (!t) return 0;
  pthread_mutex_lock(&t->mu);
  int64_t n = (int64_t)t->n_ev;
  pthread_mutex_unlock(&t->mu);
  return n;
}

/* Length of the valid UTF-8 sequence at s (NUL-terminated), 0 if invalid. */
static size_t utf8_len(const unsigned char *s) {
  size_t k;
  uint32_t cp, min;
  if (s[0] < 0x80) return 1;
  if ((s[0] & 0xE0) == 0xC0)
    k = 2, cp = s[0] & 0x1Fu, min = 0x80;
  else if ((s[0] & 0xF0) == 0xE0)
    k = 3, cp = s[0] & 0x0Fu, min = 0x800;
  else if ((s[0] & 0xF8) == 0xF0)
    k = 4, cp = s[0] & 0x07u, min = 0x10000;
  else
    return 0;
  for (size_t i = 1; i < k; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the NUL */
    cp = (cp << 6) | (s[i] & 0x3Fu);
  }
  return cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ? 0 : k;
}

/* Writes s as a JSON string: quotes, backslashes and control characters
 * escaped, invalid UTF-8 replaced by U+FFFD (strict readers reject it). */
static void put_string(FILE *f, const char *str) {
  const unsigned char *s = (const unsigned char *)str, *run = s;
  fputc('"', f);
  while (*s) {
    size_t k = utf8_len(s);
    if (k > 0 && *s >= 0x20 && *s != '"' && *s != '\\') {
      s += k;
      continue;
    }
    fwrite(run, 1, (size_t)(s - run), f);
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if (k == 1)
      fprintf(f, "\\u%04x", *s);
    else
      fputs("\\ufffd", f);
    run = ++s;
  }
  fwrite(run, 1, (size_t)(s - run), f);
  fputc('"', f);
}

static int cmp_event(const void *a, const void *b) {
  const trace_event *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return (x->name > y->name) - (x->name < y->name);
}

static int cmp_lane(const void *a, const void *b) {
  const trace_lane *x = a, *y = b;
  return (x->tid > y->tid) - (x->tid < y->tid);
}

/* Writes a metadata event; every event after the first starts with ",\n". */
static void put_meta(FILE *f, const char *what, int32_t tid, const char *key, const char *val,
                     int32_t num) {
  fprintf(f, ",\n{\"name\":\"%s\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"%s\":",
          what, tid, key);
  if (val)
    put_string(f, val);
  else
    fprintf(f, "%d", num);
  fputs("}}", f);
}

loom_status loom_trace_write(loom_ctx *ctx, loom_trace *t, FILE *f) {
  if (!t || !f)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "trace_write: trace and file must not be NULL");
  pthread_mutex_lock(&t->mu);
  loom_status s = LOOM_STATUS_OK;
  if (t->dropped_oom)
    s = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY,
                   "trace: %lld events were dropped for lack of memory",
                   (long long)t->dropped_oom);
  else if (t->dropped_bad)
    s = loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                   "trace: %lld events with bad arguments were dropped; the first: %s",
                   (long long)t->dropped_bad, t->first_bad);
  if (s != LOOM_STATUS_OK) {
    pthread_mutex_unlock(&t->mu);
    return s;
  }
  if (t->n_ev > 1) qsort(t->ev, t->n_ev, sizeof *t->ev, cmp_event);
  if (t->n_lanes > 1) qsort(t->lanes, t->n_lanes, sizeof *t->lanes, cmp_lane);
  fputs("{\"traceEvents\":[\n", f);
  fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
        "\"args\":{\"name\":\"loom\"}}", f);
  for (size_t i = 0; i < t->n_lanes; i++) {
    put_meta(f, "thread_name", t->lanes[i].tid, "name", t->pool + t->lanes[i].name - 1, 0);
    /* viewers otherwise order lanes by name or first event */
    put_meta(f, "thread_sort_index", t->lanes[i].tid, "sort_index", NULL, t->lanes[i].tid);
  }
  for (size_t i = 0; i < t->n_ev; i++) {
    const trace_event *e = &t->ev[i];
    fputs(",\n{\"name\":", f);
    put_string(f, t->pool + e->name - 1);
    fputs(",\"cat\":", f);
    put_string(f, t->pool + e->cat - 1);
    fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%d",
            (e->begin - t->t0) * 1e6, (e->end - e->begin) * 1e6, e->tid);
    for (uint32_t a = 0; a < e->n_args; a++) {
      const trace_argv *v = &t->args[e->arg0 + a];
      fputs(a ? "," : ",\"args\":{", f);
      put_string(f, t->pool + v->key - 1);
      fprintf(f, ":%lld", (long long)v->value);
    }
    fputs(e->n_args ? "}}" : "}", f);
  }
  pthread_mutex_unlock(&t->mu);
  fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f);
  if (fflush(f) != 0 || ferror(f))
    return loom_error(ctx, LOOM_STATUS_IO, "trace: write failed: %s", strerror(errno));
  return LOOM_STATUS_OK;
}

loom_status loom_trace_save(loom_ctx *ctx, loom_trace *t, const char *path) {
  if (!t || !path)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "trace_save: trace and path must not be NULL");
  loom_file_writer w;
  LOOM_TRY(loom_file_begin(ctx, path, LOOM_FILE_REPLACE, &w));
  loom_status s = loom_trace_write(ctx, t, w.f);
  if (s != LOOM_STATUS_OK) {
    loom_error_prefix(ctx, "%s", path);
    loom_file_abort(&w);
    return s;
  }
  return loom_file_commit(ctx, &w);
}

/* ---- the context's timeline (loom.h) ------------------------------------- */

loom_status loom_ctx_trace_begin(loom_ctx *ctx) {
  if (!ctx) return LOOM_STATUS_INVALID_ARGUMENT;
  loom_trace *t = NULL;
  LOOM_TRY(loom_trace_new(ctx, &t));
  loom_trace_free(ctx->trace);
  ctx->trace = t;
  ctx->trace_free = loom_trace_free;
  return LOOM_STATUS_OK;
}

loom_status loom_ctx_trace_end(loom_ctx *ctx, const char *path) {
  if (!ctx) return LOOM_STATUS_INVALID_ARGUMENT;
  if (!ctx->trace)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                      "trace: nothing is being recorded (call loom_ctx_trace_begin first)");
  if (!path || !*path) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "trace: no path");
  loom_status st = loom_trace_save(ctx, ctx->trace, path);
  loom_trace_free(ctx->trace);
  ctx->trace = NULL;
  return st;
}

double loom_trace_seconds(loom_trace *t, const char *cat) {
  if (!t || !cat) return 0;
  pthread_mutex_lock(&t->mu);
  double sum = 0;
  for (size_t i = 0; i < t->n_ev; i++)
    if (t->ev[i].cat && strcmp(t->pool + t->ev[i].cat - 1, cat) == 0)
      sum += t->ev[i].end - t->ev[i].begin;
  pthread_mutex_unlock(&t->mu);
  return sum;
}

double loom_trace_sum(loom_trace *t, const char *cat, const char *prefix, int64_t *count) {
  int64_t n = 0;
  double sum = 0;
  if (t) {
    size_t plen = prefix ? strlen(prefix) : 0;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->n_ev; i++) {
      const trace_event *e = &t->ev[i];
      if (cat && !(e->cat && strcmp(t->pool + e->cat - 1, cat) == 0)) continue;
      if (prefix && !(e->name && strncmp(t->pool + e->name - 1, prefix, plen) == 0)) continue;
      sum += e->end - e->begin;
      n++;
    }
    pthread_mutex_unlock(&t->mu);
  }
  if (count) *count = n;
  return sum;
}
