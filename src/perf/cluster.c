/*
 * Cluster files (cluster.h): one `key value [unit]` per line, keys from
 * one table that says each one's field and kind, so the parser, the
 * checks and the writer never disagree.
 */
#include "perf/cluster.h"

#include "core/file.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *loom_precision_name(loom_precision p) {
  static const char *const names[] = {
#define LOOM_PRECISION_NAME(p) #p,
      LOOM_PRECISION_LIST(LOOM_PRECISION_NAME)
#undef LOOM_PRECISION_NAME
  };
  return p >= 0 && p < LOOM_PRECISION_COUNT ? names[p] : "?";
}

typedef enum key_kind { K_WORD, K_FLOPS, K_RATE, K_BYTES, K_SECONDS, K_COUNT, K_FRACTION } key_kind;

typedef struct key_def {
  const char *name;
  key_kind kind;
  size_t offset;
  bool required;
  const char *choices; /* a word key: the words it may be, space-separated (NULL: any) */
} key_def;

#define AT(field) offsetof(loom_cluster, field)
static const key_def keys[] = {
    {"name", K_WORD, AT(name), true, NULL},
    {"device", K_WORD, AT(device), true, NULL},
    {"flops.f32", K_FLOPS, AT(flops[LOOM_PRECISION_f32]), true, NULL},
    {"flops.tf32", K_FLOPS, AT(flops[LOOM_PRECISION_tf32]), false, NULL},
    {"flops.bf16", K_FLOPS, AT(flops[LOOM_PRECISION_bf16]), false, NULL},
    {"flops.fp8", K_FLOPS, AT(flops[LOOM_PRECISION_fp8]), false, NULL},
    {"memory.bandwidth", K_RATE, AT(memory_bandwidth_Bps), true, NULL},
    {"memory.capacity", K_BYTES, AT(memory_bytes), true, NULL},
    {"kernel.launch", K_SECONDS, AT(kernel_launch_s), false, NULL},
    {"gemm.efficiency", K_FRACTION, AT(gemm_efficiency), false, NULL},
    {"gemm.half_dim", K_COUNT, AT(gemm_half_dim), false, NULL},
    {"memory.efficiency", K_FRACTION, AT(memory_efficiency), false, NULL},
    {"attn.efficiency", K_FRACTION, AT(attention_efficiency), false, NULL},
    {"wait.share", K_FRACTION, AT(wait_share), false, NULL},
    {"shared.efficiency", K_FRACTION, AT(shared_efficiency), false, NULL},
    {"wait.period", K_SECONDS, AT(wait_period_s), false, NULL},
    {"wait.turn", K_SECONDS, AT(wait_turn_s), false, NULL},
    {"comm.copy_rate", K_RATE, AT(comm_copy_Bps), false, NULL},
    {"node.devices", K_COUNT, AT(devices_per_node), true, NULL},
    {"collectives", K_WORD, AT(collectives), false, "nccl direct"},
    {"nodes", K_COUNT, AT(max_nodes), false, NULL},
    {"intra.kind", K_WORD, AT(intra.kind), true, NULL},
    {"intra.bandwidth", K_RATE, AT(intra.bandwidth_Bps), true, NULL},
    {"intra.latency", K_SECONDS, AT(intra.latency_s), true, NULL},
    {"inter.kind", K_WORD, AT(inter.kind), false, NULL},
    {"inter.bandwidth", K_RATE, AT(inter.bandwidth_Bps), false, NULL},
    {"inter.latency", K_SECONDS, AT(inter.latency_s), false, NULL},
    {"inter.nics", K_COUNT, AT(inter.nics), false, NULL},
};
#undef AT
enum { N_KEYS = sizeof keys / sizeof keys[0] };

typedef struct unit_def {
  key_kind kind;
  const char *name;
  double scale;
} unit_def;

/* The units a value may carry; without one it is in the first (base) unit. */
static const unit_def units[] = {
    {K_FLOPS, "FLOP/s", 1},      {K_FLOPS, "GFLOP/s", 1e9},   {K_FLOPS, "TFLOP/s", 1e12},
    {K_FLOPS, "PFLOP/s", 1e15},  {K_RATE, "B/s", 1},          {K_RATE, "kB/s", 1e3},
    {K_RATE, "MB/s", 1e6},       {K_RATE, "GB/s", 1e9},       {K_RATE, "TB/s", 1e12},
    {K_RATE, "MiB/s", 1 << 20},  {K_RATE, "GiB/s", 1 << 30},  {K_RATE, "Mb/s", 1e6 / 8},
    {K_RATE, "Gb/s", 1e9 / 8},   {K_RATE, "Tb/s", 1e12 / 8},  {K_BYTES, "B", 1},
    {K_BYTES, "kB", 1e3},        {K_BYTES, "MB", 1e6},        {K_BYTES, "GB", 1e9},
    {K_BYTES, "TB", 1e12},       {K_BYTES, "KiB", 1 << 10},   {K_BYTES, "MiB", 1 << 20},
    {K_BYTES, "GiB", 1 << 30},   {K_BYTES, "TiB", 1099511627776.0},
    {K_SECONDS, "s", 1},         {K_SECONDS, "ms", 1e-3},     {K_SECONDS, "us", 1e-6},
    {K_SECONDS, "ns", 1e-9},
};
enum { N_UNITS = sizeof units / sizeof units[0] };

static const char *kind_what(key_kind k) {
  switch (k) {
  case K_FLOPS: return "a FLOP rate (FLOP/s, GFLOP/s, TFLOP/s, PFLOP/s)";
  case K_RATE: return "a bandwidth (B/s, kB/s, MB/s, GB/s, TB/s, MiB/s, GiB/s, Mb/s, Gb/s, Tb/s)";
  case K_BYTES: return "a size (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)";
  case K_SECONDS: return "a time (s, ms, us, ns)";
  case K_COUNT: return "a whole number";
  case K_FRACTION: return "a fraction in (0, 1]";
  default: return "a name";
  }
}

/* The scanner: one line at a time, with the position for messages. */
typedef struct scan {
  loom_ctx *ctx;
  const char *p, *end;
  int32_t line;
  const char *line_start;
} scan;

static loom_status fail_at(scan *s, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static loom_status fail_at(scan *s, const char *at, const char *fmt, ...) {
  char msg[LOOM_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_error(s->ctx, LOOM_STATUS_PARSE, "%d:%d: %s", (int)s->line,
                    (int)(at - s->line_start) + 1, msg);
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* The next token of the line: [start, *len); NULL at the end of the line
 * or at a comment. */
static const char *token(scan *s, size_t *len) {
  while (s->p < s->end && blank(*s->p)) s->p++;
  if (s->p >= s->end || *s->p == '\n' || *s->p == '#') return NULL;
  const char *t = s->p;
  while (s->p < s->end && !blank(*s->p) && *s->p != '\n' && *s->p != '#') s->p++;
  *len = (size_t)(s->p - t);
  return t;
}

static const key_def *find_key(const char *t, size_t n) {
  for (int32_t k = 0; k < N_KEYS; k++)
    if (strlen(keys[k].name) == n && memcmp(keys[k].name, t, n) == 0) return &keys[k];
  return NULL;
}

static bool word_ok(const char *t, size_t n) {
  if (n == 0 || n >= LOOM_CLUSTER_NAME_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if (!(isalnum((unsigned char)t[i]) || t[i] == '-' || t[i] == '_' || t[i] == '.' ||
          t[i] == '+'))
      return false;
  return true;
}

/* True if w is one of the space-separated words of list. */
static bool word_in(const char *list, const char *w) {
  size_t n = strlen(w);
  for (const char *p = list; *p;) {
    size_t m = strcspn(p, " ");
    if (m == n && strncmp(p, w, n) == 0) return true;
    p += m + (p[m] == ' ');
  }
  return false;
}

/* One `key value [unit]` line into c. */
static loom_status parse_line(scan *s, loom_cluster *c, bool *seen) {
  size_t kn = 0, vn = 0, un = 0, xn = 0;
  const char *kt = token(s, &kn);
  if (!kt) return LOOM_STATUS_OK; /* blank or comment */
  const key_def *k = find_key(kt, kn);
  if (!k) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(kn < 40 ? kn : 40), kt);
    return fail_at(s, kt, "unknown key '%s' (docs/CLUSTER.md lists the keys)", name);
  }
  int32_t idx = (int32_t)(k - keys);
  if (seen[idx]) return fail_at(s, kt, "'%s' is given twice", k->name);
  seen[idx] = true;
  const char *vt = token(s, &vn);
  if (!vt) return fail_at(s, s->p, "'%s' wants %s", k->name, kind_what(k->kind));
  const char *ut = token(s, &un);
  const char *extra = ut ? token(s, &xn) : NULL;
  if (extra) return fail_at(s, extra, "unexpected text after the value of '%s'", k->name);
  char *field = (char *)c + k->offset;
  if (k->kind == K_WORD) {
    if (ut) return fail_at(s, ut, "'%s' is one word", k->name);
    if (!word_ok(vt, vn))
      return fail_at(s, vt, "'%s' wants a name of letters, digits and - _ . + (at most %d)",
                     k->name, LOOM_CLUSTER_NAME_MAX - 1);
    memcpy(field, vt, vn);
    field[vn] = '\0';
    if (k->choices && !word_in(k->choices, field))
      return fail_at(s, vt, "'%s' is one of: %s", k->name, k->choices);
    return LOOM_STATUS_OK;
  }
  char num[64];
  if (vn >= sizeof num) return fail_at(s, vt, "'%s': the number is too long", k->name);
  memcpy(num, vt, vn);
  num[vn] = '\0';
  char *stop = NULL;
  double v = strtod(num, &stop);
  if (stop == num || *stop != '\0' || !isfinite(v))
    return fail_at(s, vt, "'%s' wants %s, got '%s'", k->name, kind_what(k->kind), num);
  double scale = 1;
  if (ut) {
    int32_t u = 0;
    while (u < N_UNITS && !(units[u].kind == k->kind && strlen(units[u].name) == un &&
                            memcmp(units[u].name, ut, un) == 0))
      u++;
    if (u == N_UNITS || k->kind == K_COUNT || k->kind == K_FRACTION)
      return fail_at(s, ut, "'%.*s' is not a unit of '%s', which wants %s", (int)(un < 20 ? un : 20),
                     ut, k->name, kind_what(k->kind));
    scale = units[u].scale;
  }
  v *= scale;
  if (k->kind == K_COUNT) {
    if (v != floor(v) || v < 0 || v > 1e9)
      return fail_at(s, vt, "'%s' wants a whole number in 0..1000000000, got '%s'", k->name, num);
    *(int32_t *)field = (int32_t)v;
    return LOOM_STATUS_OK;
  }
  if (k->kind == K_FRACTION && !(v > 0 && v <= 1))
    return fail_at(s, vt, "'%s' wants a fraction in (0, 1], got '%s'", k->name, num);
  if (!(v >= 0) || !isfinite(v))
    return fail_at(s, vt, "'%s' must be a non-negative finite number, got '%s'", k->name, num);
  *(double *)field = v;
  return LOOM_STATUS_OK;
}

static bool was_seen(const bool *seen, const char *name) {
  return seen[find_key(name, strlen(name)) - keys];
}

/* What no single line can check: required keys and their consistency. */
static loom_status check_whole(scan *s, const loom_cluster *c, const bool *seen) {
  for (int32_t k = 0; k < N_KEYS; k++)
    if (keys[k].required && !seen[k])
      return loom_error(s->ctx, LOOM_STATUS_PARSE, "%d:1: '%s' is missing (%s)", (int)s->line,
                        keys[k].name, kind_what(keys[k].kind));
  const char *positive[] = {"flops.f32", "memory.bandwidth", "memory.capacity", "node.devices",
                            "intra.bandwidth"};
  double vals[] = {c->flops[LOOM_PRECISION_f32], c->memory_bandwidth_Bps, c->memory_bytes,
                   c->devices_per_node, c->intra.bandwidth_Bps};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
    if (!(vals[i] > 0))
      return loom_error(s->ctx, LOOM_STATUS_PARSE, "%d:1: '%s' must be positive", (int)s->line,
                        positive[i]);
  bool any_inter = was_seen(seen, "inter.kind") || was_seen(seen, "inter.bandwidth") ||
                   was_seen(seen, "inter.latency") || was_seen(seen, "inter.nics");
  if (any_inter && !(c->inter.kind[0] && c->inter.bandwidth_Bps > 0 && c->inter.nics > 0 &&
                     was_seen(seen, "inter.latency")))
    return loom_error(s->ctx, LOOM_STATUS_PARSE,
                      "%d:1: the inter-node link needs inter.kind, inter.bandwidth (> 0), "
                      "inter.latency and inter.nics (> 0) together",
                      (int)s->line);
  if (!any_inter && c->max_nodes > 1)
    return loom_error(s->ctx, LOOM_STATUS_PARSE,
                      "%d:1: nodes %d needs an inter-node link (inter.kind, inter.bandwidth, "
                      "inter.latency, inter.nics)",
                      (int)s->line, (int)c->max_nodes);
  return LOOM_STATUS_OK;
}

loom_status loom_cluster_parse(loom_ctx *ctx, const char *text, size_t len, loom_cluster *out) {
  if (!text || !out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "cluster: NULL argument");
  memset(out, 0, sizeof *out);
  bool seen[N_KEYS] = {false};
  scan s = {ctx, text, text + len, 1, text};
  for (const char *z = text; z < text + len; z++) {
    if (*z == '\n') {
      s.line++;
      s.line_start = z + 1;
    } else if (*z == '\0') {
      return fail_at(&s, z, "a NUL byte: not a text file");
    }
  }
  s.line = 1;
  s.line_start = text;
  while (s.p < s.end) {
    s.line_start = s.p;
    LOOM_TRY(parse_line(&s, out, seen));
    while (s.p < s.end && *s.p != '\n') s.p++; /* the comment */
    if (s.p < s.end) {
      s.p++;
      s.line++;
    }
  }
  if (!out->collectives[0]) snprintf(out->collectives, sizeof out->collectives, "nccl");
  return check_whole(&s, out, seen);
}

loom_status loom_cluster_load(loom_ctx *ctx, const char *path, loom_cluster *out) {
  if (!path || !out) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "cluster: NULL argument");
  char *buf = NULL;
  size_t len = 0;
  loom_status st = loom_file_read(ctx, path, LOOM_CLUSTER_MAX_FILE, &buf, &len);
  if (!st) {
    st = loom_cluster_parse(ctx, buf, len, out);
    if (st) loom_file_error_at(ctx, st, path);
  }
  free(buf);
  return st;
}

/* The unit a value of kind is written in: the largest not above it (the
 * smallest for tiny values); decimal bytes, not bits, so one spelling. */
static const unit_def *write_unit(key_kind kind, double v) {
  const unit_def *best = NULL, *least = NULL;
  for (int32_t u = 0; u < N_UNITS; u++) {
    const unit_def *d = &units[u];
    if (d->kind != kind || strchr(d->name, 'i') || strstr(d->name, "b/s")) continue;
    if (!least || d->scale < least->scale) least = d;
    if (d->scale <= v && (!best || d->scale > best->scale)) best = d;
  }
  return best ? best : least;
}

void loom_cluster_write(const loom_cluster *c, loom_strbuf *b) {
  for (int32_t k = 0; k < N_KEYS; k++) {
    const key_def *d = &keys[k];
    const char *field = (const char *)c + d->offset;
    if (d->kind == K_WORD) {
      if (field[0]) loom_strbuf_put(b, "%-18s%s\n", d->name, field);
      continue;
    }
    if (d->kind == K_COUNT) {
      int32_t v = *(const int32_t *)field;
      if (v || d->required) loom_strbuf_put(b, "%-18s%d\n", d->name, (int)v);
      continue;
    }
    double v = *(const double *)field;
    if (d->kind == K_FRACTION) {
      if (v > 0) loom_strbuf_put(b, "%-18s%.6g\n", d->name, v);
      continue;
    }
    bool inter = strncmp(d->name, "inter.", 6) == 0;
    if (!d->required && v == 0 && !(inter && c->inter.kind[0])) continue;
    const unit_def *u = write_unit(d->kind, v);
    loom_strbuf_put(b, "%-18s%.6g %s\n", d->name, v / u->scale, u->name);
  }
}

void loom_cluster_this_machine(const loom_machine *m, double single_sgemm_gflops,
                               int32_t gemm_half_dim, double memory_bytes, loom_cluster *out) {
  memset(out, 0, sizeof *out);
  int32_t cores = m->cores > 0 ? m->cores : 1;
  snprintf(out->name, sizeof out->name, "this-machine-%dc", (int)cores);
  snprintf(out->device, sizeof out->device, "cpu-core");
  out->flops[LOOM_PRECISION_f32] = single_sgemm_gflops * 1e9;
  out->memory_bandwidth_Bps = m->triad_gbps * 1e9 / cores;
  out->memory_bytes = memory_bytes / cores;
  out->kernel_launch_s = m->kernel_launch_s;
  out->gemm_efficiency = 1; /* flops.f32 is the rate a large GEMM reached */
  out->gemm_half_dim = gemm_half_dim;
  out->memory_efficiency = 1; /* the triad's, measured */
  out->devices_per_node = cores;
  snprintf(out->collectives, sizeof out->collectives, "direct"); /* Loom's comm over MPI */
  out->max_nodes = 1;
  snprintf(out->intra.kind, sizeof out->intra.kind, "%s", m->comm.measured ? "mpi-shm" : "mpi-shm-default");
  /* Loom's direct collectives send and receive at once: the exchange's
   * rate where it was measured */
  out->intra.bandwidth_Bps = m->comm.exchange_Bps > 0 ? m->comm.exchange_Bps : m->comm.bandwidth_Bps;
  out->comm_copy_Bps = m->comm.copy_Bps;
  out->intra.latency_s = m->comm.latency_s;
}

void loom_cluster_time_shared(const loom_cluster *c, int32_t ranks, loom_cluster *out) {
  if (out != c) *out = *c;
  if (ranks <= c->devices_per_node || c->devices_per_node < 1) return;
  double share = (double)c->devices_per_node / ranks;
  for (int32_t p = 0; p < LOOM_PRECISION_COUNT; p++) out->flops[p] *= share;
  out->memory_bandwidth_Bps *= share;
  out->memory_bytes *= share;
  out->devices_per_node = ranks;
  char name[LOOM_CLUSTER_NAME_MAX];
  memcpy(name, c->name, sizeof name); /* out may be c */
  snprintf(out->name, sizeof out->name, "%.40s-x%d", name, (int)ranks);
}
