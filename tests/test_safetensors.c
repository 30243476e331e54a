/* safetensors and JSON: round trips, malformed files, atomic saves. */
#include "common.h"

#include "io/json.h"
#include "io/safetensors.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A file image: 8-byte little-endian length, header, data. */
static size_t make_file(const char *header, const void *data, size_t ndata, uint8_t *out) {
  size_t h = strlen(header);
  for (int k = 0; k < 8; k++)
    out[k] = (uint8_t)((uint64_t)h >> (8 * k));
  memcpy(out + 8, header, h);
  if (ndata) memcpy(out + 8 + h, data, ndata);
  return 8 + h + ndata;
}

static loom_status parse_image(loom_ctx *ctx, const char *header, const void *data, size_t ndata) {
  static uint8_t buf[4096];
  size_t n = make_file(header, data, ndata, buf);
  loom_safetensors *st = NULL;
  loom_error_clear(ctx);
  loom_status s = loom_safetensors_parse(ctx, buf, n, &st);
  loom_safetensors_free(st);
  return s;
}

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)sz + 1);
  *n = fread(b, 1, (size_t)sz, f);
  fclose(f);
  return b;
}

static void test_json(loom_ctx *ctx) {
  const char *txt =
      " {\"a\": [1, -2, 3.5e2, true, false, null], \"s\": \"x\\n\\u00e9\\ud83d\\ude00\\\"\","
      " \"big\": 9223372036854775807, \"neg\": -9223372036854775808, \"o\": {}} ";
  loom_json *j = NULL;
  CHECK_OK(ctx, loom_json_parse(ctx, txt, strlen(txt), &j));
  if (j) {
    const loom_json *a = loom_json_get(j, "a");
    CHECK(a && a->kind == LOOM_JSON_ARRAY && a->n == 6);
    if (a && a->n == 6) {
      CHECK(a->items[0].is_int && a->items[0].i == 1);
      CHECK(a->items[1].is_int && a->items[1].i == -2);
      CHECK(!a->items[2].is_int && a->items[2].num == 350.0);
      CHECK(a->items[3].kind == LOOM_JSON_BOOL && a->items[3].b);
      CHECK(a->items[4].kind == LOOM_JSON_BOOL && !a->items[4].b);
      CHECK(a->items[5].kind == LOOM_JSON_NULL);
    }
    const loom_json *s = loom_json_get(j, "s");
    /* x, newline, e-acute (C3 A9), U+1F600 (F0 9F 98 80), quote */
    CHECK(s && s->kind == LOOM_JSON_STRING && strcmp(s->str, "x\n\xC3\xA9\xF0\x9F\x98\x80\"") == 0);
    const loom_json *big = loom_json_get(j, "big"), *neg = loom_json_get(j, "neg");
    CHECK(big && big->is_int && big->i == INT64_MAX);
    CHECK(neg && neg->is_int && neg->i == INT64_MIN);
    CHECK(loom_json_get(j, "o") && loom_json_get(j, "o")->n == 0);
    CHECK(loom_json_get(j, "missing") == NULL);
  }
  loom_json_free(j);
  /* 2^63 does not fit int64: a number, but not an exact integer */
  CHECK_OK(ctx, loom_json_parse(ctx, "9223372036854775808", 19, &j));
  CHECK(j && !j->is_int && j->num == 9223372036854775808.0);
  loom_json_free(j);

  static const char *const bad[] = {
      "",
      "{",
      "{\"a\":1,}",
      "[1,]",
      "{\"a\" 1}",
      "{a:1}",
      "[01]",
      "[1.]",
      "[.5]",
      "[1e]",
      "[-]",
      "\"abc",
      "\"\\x\"",
      "\"\\u12\"",
      "\"\\ud800\"",
      "\"\\udc00\"",
      "\"\\u0000\"",
      "[1] x",
      "{\"a\":1,\"a\":2}",
      "tru",
      "[nul]",
      "\"\x01\"",
      "\"\xff\"",
      "\"\xc0\xaf\"",
      "[1e999]",
      "// c\n1",
      "'a'",
  };
  for (int32_t i = 0; i < LOOM_ARRAY_LEN(bad); i++) {
    j = NULL;
    loom_error_clear(ctx);
    CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_json_parse(ctx, bad[i], strlen(bad[i]), &j));
    CHECK(j == NULL);
  }
  /* nesting limit */
  char deep[200];
  memset(deep, '[', 100);
  memset(deep + 100, ']', 100);
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_json_parse(ctx, deep, 200, &j));
  memset(deep, '[', 30);
  memset(deep + 30, ']', 30);
  CHECK_OK(ctx, loom_json_parse(ctx, deep, 60, &j));
  loom_json_free(j);
  /* not NUL-terminated: only len bytes are read */
  CHECK_OK(ctx, loom_json_parse(ctx, "[1]xyz", 3, &j));
  loom_json_free(j);

  loom_jbuf b;
  loom_jbuf_init(&b);
  loom_jbuf_string(&b, "a\"b\\c\n\x01");
  CHECK(b.ok && strcmp(b.data, "\"a\\\"b\\\\c\\n\\u0001\"") == 0);
  loom_jbuf_free(&b);
}

static void test_round_trip(loom_ctx *ctx, const char *path) {
  float f[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  int64_t q[4] = {INT64_MIN, -1, 0, INT64_MAX};
  uint8_t u = 7;
  loom_st_tensor ts[3] = {
      {.name = "w.0",
       .dtype = LOOM_DTYPE_F32,
       .rank = 2,
       .shape = {2, 3},
       .data = f,
       .nbytes = sizeof f},
      {.name = "idx \"quoted\"",
       .dtype = LOOM_DTYPE_I64,
       .rank = 1,
       .shape = {4},
       .data = q,
       .nbytes = sizeof q},
      {.name = "scalar", .dtype = LOOM_DTYPE_U8, .rank = 0, .data = &u, .nbytes = 1},
  };
  const char *keys[2] = {"step", "note"}, *vals[2] = {"42", "line1\nline2 \"q\""};
  CHECK_OK(ctx, loom_safetensors_save(ctx, path, 3, ts, 2, keys, vals));
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK(access(tmp, F_OK) != 0); /* renamed away */

  size_t n = 0;
  char *raw = read_all(path, &n);
  CHECK(raw && n > 8);
  if (raw) {
    uint64_t hl = 0;
    for (int k = 7; k >= 0; k--)
      hl = (hl << 8) | (uint8_t)raw[k];
    CHECK((8 + hl) % 8 == 0); /* data aligned */
    CHECK(n == 8 + hl + sizeof f + sizeof q + 1);
    CHECK(raw[8] == '{');
  }

  loom_safetensors *st = NULL;
  CHECK_OK(ctx, loom_safetensors_load(ctx, path, &st));
  if (st) {
    CHECK(st->n_tensors == 3 && st->n_meta == 3); /* with the saver's digest */
    CHECK(loom_safetensors_meta(st, LOOM_SAFETENSORS_DIGEST_KEY) != NULL);
    const loom_st_tensor *a = loom_safetensors_find(st, "w.0");
    CHECK(a && a->dtype == LOOM_DTYPE_F32 && a->rank == 2 && a->shape[0] == 2 && a->shape[1] == 3 &&
          a->nbytes == sizeof f);
    if (a) CHECK(memcmp(a->data, f, sizeof f) == 0);
    const loom_st_tensor *b = loom_safetensors_find(st, "idx \"quoted\"");
    CHECK(b && b->dtype == LOOM_DTYPE_I64 && b->rank == 1 && b->shape[0] == 4);
    if (b) CHECK(memcmp(b->data, q, sizeof q) == 0);
    const loom_st_tensor *c = loom_safetensors_find(st, "scalar");
    CHECK(c && c->rank == 0 && c->nbytes == 1 && *(const uint8_t *)c->data == 7);
    CHECK(loom_safetensors_meta(st, "step") && !strcmp(loom_safetensors_meta(st, "step"), "42"));
    CHECK(loom_safetensors_meta(st, "note") && !strcmp(loom_safetensors_meta(st, "note"), vals[1]));
    CHECK(loom_safetensors_meta(st, "nope") == NULL);
    CHECK(loom_safetensors_find(st, "nope") == NULL);
  }
  loom_safetensors_free(st);

  /* every strict prefix of a valid file is rejected with a message */
  if (raw) {
    for (size_t k = 0; k < n; k++) {
      st = NULL;
      loom_error_clear(ctx);
      loom_status s = loom_safetensors_parse(ctx, raw, k, &st);
      CHECK(s != LOOM_STATUS_OK && ctx && loom_ctx_error(ctx)[0] != '\0');
      CHECK(st == NULL);
      loom_safetensors_free(st);
    }
    /* byte flips never crash; whatever loads is self-consistent */
    loom_test_rng r = {12345};
    for (int it = 0; it < 3000; it++) {
      char *m = malloc(n);
      memcpy(m, raw, n);
      int flips = 1 + (int)loom_test_uniform(&r, 0, 3);
      for (int k = 0; k < flips; k++)
        m[(size_t)loom_test_uniform(&r, 0, (double)n)] = (char)loom_test_uniform(&r, 0, 256);
      st = NULL;
      loom_error_clear(ctx);
      if (loom_safetensors_parse(ctx, m, n, &st) == LOOM_STATUS_OK) {
        size_t total = 0;
        for (int32_t i = 0; i < st->n_tensors; i++) {
          const uint8_t *d = st->tensors[i].data;
          CHECK(d >= st->bytes && d + st->tensors[i].nbytes <= st->bytes + st->size);
          total += st->tensors[i].nbytes;
        }
        CHECK(total <= st->size);
      } else {
        CHECK(loom_ctx_error(ctx)[0] != '\0');
      }
      loom_safetensors_free(st);
      free(m);
    }
  }
  free(raw);
}

static void test_malformed(loom_ctx *ctx) {
  uint8_t d16[16] = {0};
  const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  CHECK_OK(ctx, parse_image(ctx, ok, d16, 8));
  /* bad JSON */
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE,
               parse_image(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}",
                           d16, 8));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, parse_image(ctx, "{\"a\":{\"dtype\":\"F32\"", d16, 8));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, parse_image(ctx, "[1,2]", NULL, 0));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, parse_image(ctx, "", NULL, 0));
  /* offsets past the data */
  CHECK_STATUS(
      ctx, LOOM_STATUS_OUT_OF_RANGE,
      parse_image(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d16, 4));
  CHECK_STATUS(ctx, LOOM_STATUS_OUT_OF_RANGE,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
                           "[0,9223372036854775807]}}",
                           d16, 8));
  /* past int64: not an offset at all */
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
                           "[0,18446744073709551615]}}",
                           d16, 8));
  CHECK_STATUS(
      ctx, LOOM_STATUS_PARSE,
      parse_image(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", d16, 8));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE,
               parse_image(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-1,7]}}",
                           d16, 8));
  /* 2^61 f64 elements are 2^64 bytes: that wraps to 0 in 64 bits and must
   * not match empty offsets; a zero dim must not hide huge other dims */
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],"
                           "\"data_offsets\":[0,0]}}",
                           d16, 0));
  CHECK(strstr(loom_ctx_error(ctx), "too many elements") != NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,9223372036854775807,"
                           "9223372036854775807],\"data_offsets\":[0,0]}}",
                           d16, 0));
  /* wrong / unknown dtype, and a dtype that does not match the byte count */
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}",
                           d16, 2));
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"float\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                           d16, 8));
  CHECK_STATUS(
      ctx, LOOM_STATUS_PARSE,
      parse_image(ctx, "{\"a\":{\"dtype\":3,\"shape\":[2],\"data_offsets\":[0,8]}}", d16, 8));
  CHECK_STATUS(
      ctx, LOOM_STATUS_SHAPE_MISMATCH,
      parse_image(ctx, "{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", d16, 8));
  CHECK_STATUS(ctx, LOOM_STATUS_SHAPE_MISMATCH,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                           "\"data_offsets\":[0,8]}}",
                           d16, 8));
  /* shapes */
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE,
               parse_image(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",
                           d16, 8));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}",
                           d16, 8));
  CHECK_STATUS(ctx, LOOM_STATUS_UNSUPPORTED,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                           "\"data_offsets\":[0,1]}}",
                           d16, 1));
  /* missing and unknown fields */
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE,
               parse_image(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", d16, 8));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
                           "\"x\":1}}",
                           d16, 8));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, parse_image(ctx, "{\"a\":[]}", d16, 8));
  /* overlap, hole, tail */
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                           d16, 12));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                           "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                           d16, 12));
  CHECK_STATUS(
      ctx, LOOM_STATUS_PARSE,
      parse_image(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d16, 8));
  /* duplicate names */
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE,
               parse_image(ctx,
                           "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                           "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                           d16, 8));
  /* metadata must map strings to strings */
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, parse_image(ctx, "{\"__metadata__\":{\"k\":1}}", NULL, 0));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, parse_image(ctx, "{\"__metadata__\":[]}", NULL, 0));
  CHECK_OK(ctx, parse_image(ctx, "{\"__metadata__\":{\"k\":\"v\"}}  ", NULL, 0));
  /* zero-sized tensors are fine, also several at one offset */
  CHECK_OK(ctx, parse_image(ctx,
                            "{\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
                            "\"f\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                            NULL, 0));

  /* header length fields that lie */
  uint8_t img[64];
  size_t n = make_file("{}", NULL, 0, img);
  loom_safetensors *st = NULL;
  CHECK_OK(ctx, loom_safetensors_parse(ctx, img, n, &st));
  loom_safetensors_free(st);
  st = NULL;
  img[0] = 200; /* larger than the file */
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_safetensors_parse(ctx, img, n, &st));
  CHECK(strstr(loom_ctx_error(ctx), "larger") != NULL);
  memset(img, 0xff, 8); /* 2^64 - 1 */
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_safetensors_parse(ctx, img, n, &st));
  memset(img, 0, 8);
  img[4] = 1; /* 2^32: over the header limit */
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_safetensors_parse(ctx, img, n, &st));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_safetensors_parse(ctx, img, 5, &st));
  CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_safetensors_parse(ctx, img, 0, &st));
  CHECK(st == NULL);
  CHECK_STATUS(ctx, LOOM_STATUS_IO,
               loom_safetensors_load(ctx, "/nonexistent-dir/x.safetensors", &st));
}

static void test_save_errors(loom_ctx *ctx, const char *path) {
  float f[2] = {1, 2};
  loom_st_tensor t = {
      .name = "a", .dtype = LOOM_DTYPE_F32, .rank = 1, .shape = {2}, .data = f, .nbytes = sizeof f};
  CHECK_STATUS(ctx, LOOM_STATUS_IO,
               loom_safetensors_save(ctx, "/nonexistent-dir/x.safetensors", 1, &t, 0, NULL, NULL));
  /* a user's file is never replaced by a failed save */
  FILE *fp = fopen(path, "wb");
  fputs("precious", fp);
  fclose(fp);
  loom_st_tensor two[2] = {t, t};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_safetensors_save(ctx, path, 2, two, 0, NULL, NULL));
  loom_st_tensor bad = t;
  bad.nbytes = 4; /* does not match f32[2] */
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_safetensors_save(ctx, path, 1, &bad, 0, NULL, NULL));
  bad = t;
  bad.name = "__metadata__";
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_safetensors_save(ctx, path, 1, &bad, 0, NULL, NULL));
  const char *k2[2] = {"k", "k"}, *v2[2] = {"1", "2"};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_safetensors_save(ctx, path, 1, &t, 2, k2, v2));
  size_t n = 0;
  char *raw = read_all(path, &n);
  CHECK(raw && n == 8 && memcmp(raw, "precious", 8) == 0);
  free(raw);
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK(access(tmp, F_OK) != 0);
  /* and a good save replaces it */
  CHECK_OK(ctx, loom_safetensors_save(ctx, path, 1, &t, 0, NULL, NULL));
  loom_safetensors *st = NULL;
  CHECK_OK(ctx, loom_safetensors_load(ctx, path, &st));
  CHECK(st && st->n_tensors == 1 && st->n_meta == 1);
  loom_safetensors_free(st);
}

/* A saved file whose data changed after the save (a torn write, a flipped
 * bit, two writers mixed) is refused: the digest in the metadata says so. */
static void test_digest(loom_ctx *ctx, const char *path) {
  float f[6] = {1, 2, 3, 4, 5, 6};
  loom_st_tensor t = {
      .name = "w", .dtype = LOOM_DTYPE_F32, .rank = 1, .shape = {6}, .data = f, .nbytes = sizeof f};
  const char *k[1] = {"step"}, *v[1] = {"7"};
  CHECK_OK(ctx, loom_safetensors_save(ctx, path, 1, &t, 1, k, v));
  size_t n = 0;
  char *raw = read_all(path, &n);
  CHECK(raw && n > sizeof f);
  if (!raw) return;
  loom_safetensors *st = NULL;
  CHECK_OK(ctx, loom_safetensors_parse(ctx, raw, n, &st));
  const char *d = st ? loom_safetensors_meta(st, LOOM_SAFETENSORS_DIGEST_KEY) : NULL;
  CHECK(d && strlen(d) == 64);
  loom_safetensors_free(st);
  for (size_t at = n - sizeof f; at < n; at += 5) {
    raw[at] ^= 0x10;
    st = NULL;
    CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_safetensors_parse(ctx, raw, n, &st));
    CHECK(st == NULL && strstr(loom_ctx_error(ctx), "checksum") != NULL);
    raw[at] ^= 0x10;
  }
  /* the saver owns the key */
  const char *k2[1] = {LOOM_SAFETENSORS_DIGEST_KEY};
  CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
               loom_safetensors_save(ctx, path, 1, &t, 1, k2, v));
  free(raw);
}

/* 100k tensors: every one found by name, a duplicate key as the last one
 * refused on load and on save (issue 8 bug 7: these were pair-by-pair
 * scans, 30 s for 100k keys). */
static void test_many_keys(loom_ctx *ctx) {
  enum { N = 100000 };
  size_t cap = (size_t)N * 96 + 64, len = 8;
  uint8_t *file = malloc(cap + (size_t)N * 4);
  len += (size_t)snprintf((char *)file + len, cap - len, "{");
  for (int i = 0; i < N; i++)
    len += (size_t)snprintf((char *)file + len, cap - len,
                            "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}",
                            i ? "," : "", i, 4 * i, 4 * i + 4);
  len += (size_t)snprintf((char *)file + len, cap - len, "}");
  uint64_t hlen = len - 8;
  for (int k = 0; k < 8; k++) file[k] = (uint8_t)(hlen >> (8 * k));
  for (int i = 0; i < N; i++) {
    float v = (float)i;
    memcpy(file + len + 4 * (size_t)i, &v, 4);
  }
  loom_safetensors *st = NULL;
  CHECK_OK(ctx, loom_safetensors_parse(ctx, file, len + (size_t)N * 4, &st));
  if (st) {
    CHECK(st->n_tensors == N);
    char nm[32];
    int good = 0;
    for (int i = 0; i < N; i++) {
      snprintf(nm, sizeof nm, "t%d", i);
      const loom_st_tensor *t = loom_safetensors_find(st, nm);
      float v = -1;
      if (t) memcpy(&v, t->data, 4);
      good += t && v == (float)i;
    }
    CHECK(good == N);
    CHECK(loom_safetensors_find(st, "t100000") == NULL);
    /* save refuses the same name twice, found at the end */
    loom_st_tensor *ts = malloc(sizeof *ts * N);
    memcpy(ts, st->tensors, sizeof *ts * N);
    ts[N - 1].name = "t17";
    CHECK_STATUS(ctx, LOOM_STATUS_INVALID_ARGUMENT,
                 loom_safetensors_save(ctx, "/nonexistent-dir/x.safetensors", N, ts, 0, NULL, NULL));
    CHECK(strstr(loom_ctx_error(ctx), "duplicate tensor name 't17'") != NULL);
    free(ts);
    loom_safetensors_free(st);
  }
  /* the last key renamed to repeat an early one */
  char *last = strstr((char *)file + 8, "\"t99999\"");
  CHECK(last != NULL);
  if (last) {
    memcpy(last, "\"t1\"    ", 8);
    st = NULL;
    CHECK_STATUS(ctx, LOOM_STATUS_PARSE, loom_safetensors_parse(ctx, file, len + (size_t)N * 4, &st));
    CHECK(st == NULL && strstr(loom_ctx_error(ctx), "duplicate key") != NULL);
  }
  free(file);
}

int main(void) {
  loom_ctx *ctx = NULL;
  if (loom_ctx_new(&ctx)) return 1;
  char path[256];
  snprintf(path, sizeof path, "/tmp/loom_test_st_%d.safetensors", (int)getpid());
  test_json(ctx);
  test_round_trip(ctx, path);
  test_malformed(ctx);
  test_save_errors(ctx, path);
  test_digest(ctx, path);
  test_many_keys(ctx);
  remove(path);
  loom_ctx_free(ctx);
  return loom_test_finish("test_safetensors");
}
