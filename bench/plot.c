/*
 * `loom bench --plot OUT.svg`: each workload's median time per mode (and
 * per peer, from their JSON lines) as a bar chart, written as SVG by hand
 * (no plotting library: the picture is a few rectangles and labels).
 * Workloads differ by orders of magnitude, so each one's bars are scaled
 * to its slowest mode but the reference oracle (whose bar is cut off when
 * longer); the labels carry the times and the ratio to stitch.
 */
#include "plot.h"

#include "core/file.h"
#include "core/strbuf.h"
#include "io/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SERIES 32
#define MAX_LINE_BYTES ((size_t)1 << 20)

struct loom_bench_plot {
  loom_bench_plot_bar *bars;
  int32_t n, cap;
};

loom_bench_plot *loom_bench_plot_new(void) { return calloc(1, sizeof(loom_bench_plot)); }

void loom_bench_plot_free(loom_bench_plot *p) {
  if (!p) return;
  free(p->bars);
  free(p);
}

int32_t loom_bench_plot_count(const loom_bench_plot *p) { return p ? p->n : 0; }

bool loom_bench_plot_add(loom_bench_plot *p, const char *workload, const char *series,
                         double seconds) {
  if (!p || !workload || !series || !(seconds > 0) || !isfinite(seconds)) return false;
  for (int32_t i = 0; i < p->n; i++) /* a later figure replaces an earlier one */
    if (!strcmp(p->bars[i].workload, workload) && !strcmp(p->bars[i].series, series)) {
      p->bars[i].seconds = seconds;
      return true;
    }
  if (p->n == p->cap) {
    int32_t cap = p->cap ? 2 * p->cap : 64;
    loom_bench_plot_bar *b = realloc(p->bars, (size_t)cap * sizeof *b);
    if (!b) return false;
    p->bars = b, p->cap = cap;
  }
  loom_bench_plot_bar *b = &p->bars[p->n++];
  snprintf(b->workload, sizeof b->workload, "%s", workload);
  snprintf(b->series, sizeof b->series, "%s", series);
  b->seconds = seconds;
  return true;
}

loom_status loom_bench_plot_read(loom_ctx *ctx, loom_bench_plot *p, const char *path) {
  char *text = NULL;
  size_t len = 0;
  LOOM_TRY(loom_file_read(ctx, path, (size_t)256 << 20, &text, &len));
  int32_t line = 0, added = 0;
  loom_status st = LOOM_STATUS_OK;
  for (char *s = text; !st && s < text + len; line++) {
    char *end = memchr(s, '\n', (size_t)(text + len - s));
    size_t n = end ? (size_t)(end - s) : (size_t)(text + len - s);
    char *start = s;
    s += n + 1;
    while (n && (*start == ' ' || *start == '\t'))
      start++, n--;
    if (!n || *start != '{') continue; /* blank lines and the peers' prose */
    loom_json *j = NULL;
    if (n > MAX_LINE_BYTES || loom_json_parse(ctx, start, n, &j) != LOOM_STATUS_OK) {
      st = loom_error(ctx, LOOM_STATUS_PARSE, "%s:%d: not a JSON line of a bench (%s)", path,
                      (int)line + 1, n > MAX_LINE_BYTES ? "over 1 MiB" : loom_ctx_error(ctx));
      break;
    }
    const loom_json *w = loom_json_get(j, "workload"), *m = loom_json_get(j, "mode"),
                    *t = loom_json_get(j, "median_s");
    /* the machine line, errors and skipped modes carry no time */
    if (w && m && t && w->kind == LOOM_JSON_STRING && m->kind == LOOM_JSON_STRING &&
        t->kind == LOOM_JSON_NUMBER && t->num > 0) {
      if (!loom_bench_plot_add(p, w->str, m->str, t->num))
        st = loom_error(ctx, LOOM_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
      added++;
    }
    loom_json_free(j);
  }
  free(text);
  if (!st && added == 0)
    st = loom_error(ctx, LOOM_STATUS_PARSE,
                    "%s: no timed workloads in it (expected the JSON lines of `loom bench "
                    "--json` or of bench/peers)",
                    path);
  return st;
}

/* Colours: Loom's modes in blues (stitch darkest); NULL for a peer's. */
static const char *mode_colour(const char *name) {
  static const struct {
    const char *mode, *colour;
  } loom[] = {{"reference", "#b0b0b0"},
              {"eager", "#9ab7d3"},
              {"none", "#6d9ccc"},
              {"loop", "#3d78b8"},
              {"stitch", "#123f7a"},
              {"frozen", "#0a2347"}};
  for (size_t i = 0; i < sizeof loom / sizeof loom[0]; i++)
    if (!strcmp(name, loom[i].mode)) return loom[i].colour;
  return NULL;
}
static const char *const PEER_COLOURS[] = {"#e07b00", "#f2b705", "#3a9b3a", "#8e44ad", "#c0392b"};
enum { N_PEER_COLOURS = sizeof PEER_COLOURS / sizeof PEER_COLOURS[0] };

static void put_text(loom_strbuf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '<')
      loom_strbuf_put(b, "&lt;");
    else if (*s == '>')
      loom_strbuf_put(b, "&gt;");
    else if (*s == '&')
      loom_strbuf_put(b, "&amp;");
    else if (*s == '"')
      loom_strbuf_put(b, "&quot;");
    else if ((unsigned char)*s >= 0x20)
      loom_strbuf_put(b, "%c", *s);
  }
}

static void put_time(loom_strbuf *b, double s) {
  if (s >= 1)
    loom_strbuf_put(b, "%.3g s", s);
  else if (s >= 1e-3)
    loom_strbuf_put(b, "%.3g ms", s * 1e3);
  else
    loom_strbuf_put(b, "%.3g us", s * 1e6);
}

enum { WIDTH = 960, LABEL_W = 130, BAR_W = 500, BAR_H = 16, GAP = 4, HEAD_H = 26, TOP = 60 };

char *loom_bench_plot_svg(const loom_bench_plot *p, const char *title) {
  if (!p || p->n == 0) return NULL;
  /* series in order of first appearance, workloads likewise */
  const char *series[MAX_SERIES];
  int32_t n_series = 0;
  for (int32_t i = 0; i < p->n && n_series < MAX_SERIES; i++) {
    bool seen = false;
    for (int32_t s = 0; s < n_series && !seen; s++)
      seen = !strcmp(series[s], p->bars[i].series);
    if (!seen) series[n_series++] = p->bars[i].series;
  }
  const char *colour[MAX_SERIES];
  for (int32_t s = 0, peers = 0; s < n_series; s++) {
    colour[s] = mode_colour(series[s]);
    if (!colour[s]) colour[s] = PEER_COLOURS[peers++ % N_PEER_COLOURS];
  }
  bool *done = calloc((size_t)p->n, sizeof *done);
  if (!done) return NULL;
  loom_strbuf body = {0};
  int32_t y = TOP;
  for (int32_t i = 0; i < p->n; i++) {
    if (done[i]) continue;
    const char *w = p->bars[i].workload;
    double slowest = 0, stitch = 0;
    for (int32_t k = i; k < p->n; k++)
      if (!strcmp(p->bars[k].workload, w)) {
        if (strcmp(p->bars[k].series, "reference")) slowest = fmax(slowest, p->bars[k].seconds);
        if (!strcmp(p->bars[k].series, "stitch")) stitch = p->bars[k].seconds;
      }
    if (slowest == 0) /* the reference alone */
      for (int32_t k = i; k < p->n; k++)
        if (!strcmp(p->bars[k].workload, w)) slowest = fmax(slowest, p->bars[k].seconds);
    loom_strbuf_put(&body, "<text x=\"10\" y=\"%d\" class=\"w\">", y + 16);
    put_text(&body, w);
    loom_strbuf_put(&body, "</text>\n");
    y += HEAD_H;
    for (int32_t s = 0; s < n_series; s++)
      for (int32_t k = i; k < p->n; k++) {
        const loom_bench_plot_bar *b = &p->bars[k];
        if (done[k] || strcmp(b->workload, w) || strcmp(b->series, series[s])) continue;
        done[k] = true;
        double len = BAR_W * b->seconds / slowest;
        bool cut = len > BAR_W;
        if (cut) len = BAR_W;
        loom_strbuf_put(&body, "<text x=\"%d\" y=\"%d\" class=\"s\">", LABEL_W - 6, y + 12);
        put_text(&body, b->series);
        loom_strbuf_put(&body,
                        "</text><rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
                        "fill=\"%s\"><title>",
                        LABEL_W, y, len < 1 ? 1 : len, BAR_H, colour[s]);
        put_text(&body, b->series);
        loom_strbuf_put(&body, ": ");
        put_time(&body, b->seconds);
        loom_strbuf_put(&body, "</title></rect><text x=\"%.1f\" y=\"%d\" class=\"v\">",
                        LABEL_W + (len < 1 ? 1 : len) + 6, y + 12);
        put_time(&body, b->seconds);
        if (stitch > 0 && strcmp(b->series, "stitch"))
          loom_strbuf_put(&body, " (%.3gx stitch's time)", b->seconds / stitch);
        if (cut) loom_strbuf_put(&body, ", bar cut off");
        loom_strbuf_put(&body, "</text>\n");
        y += BAR_H + GAP;
      }
    y += 10;
  }
  free(done);
  loom_strbuf out = {0};
  loom_strbuf_put(&out,
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                  "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n<style>.t{font-size:16px;"
                  "font-weight:bold}.w{font-size:13px;font-weight:bold}.s{font-size:11px;"
                  "text-anchor:end}.v{font-size:11px}.n{font-size:11px;fill:#555}</style>\n"
                  "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                  "<text x=\"10\" y=\"22\" class=\"t\">",
                  WIDTH, y + 10, WIDTH, y + 10);
  put_text(&out, title ? title : "loom bench");
  loom_strbuf_put(&out, "</text>\n<text x=\"10\" y=\"42\" class=\"n\">median time per mode; each "
                        "workload's bars scaled to its slowest; shorter is faster</text>\n");
  char *b = loom_strbuf_take(&body);
  if (b) loom_strbuf_put(&out, "%s", b);
  loom_strbuf_put(&out, "</svg>\n");
  free(b);
  if (!b) {
    free(loom_strbuf_take(&out));
    return NULL;
  }
  return loom_strbuf_take(&out);
}
