#include "train/checkpoint.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_FORMAT "loom-train-checkpoint"
#define CKPT_VERSION "1"

enum { META_MAX = 32, META_LEN = 40 };

typedef struct meta {
  int32_t n;
  const char *keys[META_MAX];
  const char *values[META_MAX];
  char buf[META_MAX][META_LEN];
} meta;

static void put(meta *m, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put(meta *m, const char *key, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->buf[m->n], META_LEN, fmt, ap);
  va_end(ap);
  m->keys[m->n] = key;
  m->values[m->n] = m->buf[m->n];
  m->n++;
}

loom_status loom_checkpoint_save(loom_trainer *t, const char *path) {
  loom_ctx *ctx = loom_trainer_ctx(t);
  if (!t || !path) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "checkpoint: bad argument");
  const loom_train_config *c = loom_trainer_config(t);
  meta m = {0};
  put(&m, "format", "%s", CKPT_FORMAT);
  put(&m, "version", "%s", CKPT_VERSION);
  put(&m, "step", "%lld", (long long)loom_trainer_steps_done(t));
  put(&m, "vocab", "%d", c->model.vocab);
  put(&m, "layers", "%d", c->model.n_layer);
  put(&m, "d_model", "%d", c->model.d_model);
  put(&m, "heads", "%d", c->model.n_head);
  put(&m, "context", "%d", c->model.context);
  put(&m, "d_ff", "%d", c->model.d_ff);
  /* the architecture, only when not GPT-2's (whose checkpoints stay as they were) */
  const loom_gpt_config *g = &c->model;
  if (loom_gpt_config_arch(g) != LOOM_GPT_ARCH_GPT || g->n_kv_head || g->rope_theta) {
    put(&m, "arch", "%s", loom_gpt_arch_name(loom_gpt_config_arch(g)));
    put(&m, "norm", "%s", g->norm == LOOM_GPT_NORM_RMSNORM ? "rmsnorm" : "layernorm");
    put(&m, "mlp", "%s", g->mlp == LOOM_GPT_MLP_SWIGLU ? "swiglu" : "gelu");
    put(&m, "position", "%s", g->position == LOOM_GPT_POS_ROPE ? "rope" : "learned");
    put(&m, "bias", "%d", !g->no_bias);
    put(&m, "tied", "%d", !g->untied);
    put(&m, "kv_heads", "%d", loom_gpt_kv_heads(g));
    put(&m, "rope_theta", "%.17g", loom_gpt_rope_theta(g));
  }
  /* %.17g: doubles read back bit for bit */
  put(&m, "dropout", "%.17g", c->model.dropout);
  put(&m, "batch", "%d", c->batch);
  put(&m, "steps", "%lld", (long long)c->steps);
  put(&m, "lr", "%.17g", c->lr);
  put(&m, "warmup", "%lld", (long long)c->warmup);
  put(&m, "min_lr_frac", "%.17g", c->min_lr_frac);
  put(&m, "beta1", "%.17g", c->beta1);
  put(&m, "beta2", "%.17g", c->beta2);
  put(&m, "eps", "%.17g", c->eps);
  put(&m, "weight_decay", "%.17g", c->weight_decay);
  put(&m, "seed", "%llu", (unsigned long long)c->seed);
  put(&m, "corpus_lines", "%d", c->corpus_lines);
  put(&m, "heldout", "%d", c->heldout);

  int32_t n = loom_trainer_num_params(t);
  loom_st_tensor *ts = loom_calloc(ctx, (size_t)(3 * n), sizeof *ts);
  char(*names)[48] = loom_calloc(ctx, (size_t)(3 * n), sizeof *names);
  loom_status s = ts && names ? LOOM_STATUS_OK : LOOM_STATUS_OUT_OF_MEMORY;
  for (int32_t k = 0; !s && k < 3; k++)
    for (int32_t i = 0; i < n; i++) {
      const loom_gpt_param *p = loom_trainer_param(t, i);
      const loom_tensor *x = loom_trainer_tensor(t, k, i);
      loom_st_tensor *e = &ts[k * n + i];
      snprintf(names[k * n + i], sizeof names[0], "%s%s",
               k == 0   ? ""
               : k == 1 ? "adam.m."
                        : "adam.v.",
               p->name);
      e->name = names[k * n + i];
      e->dtype = LOOM_DTYPE_F32;
      e->rank = p->rank;
      for (int32_t d = 0; d < p->rank; d++)
        e->shape[d] = p->shape[d];
      e->data = loom_tensor_data(x);
      e->nbytes = (size_t)loom_tensor_numel(x) * sizeof(float);
    }
  if (!s) s = loom_safetensors_save(ctx, path, 3 * n, ts, m.n, m.keys, m.values);
  free(ts);
  free(names);
  return s;
}

/* ---- reading ------------------------------------------------------------ */

static loom_status need(loom_ctx *ctx, const loom_safetensors *st, const char *key,
                        const char **out) {
  *out = loom_safetensors_meta(st, key);
  if (!*out) return loom_error(ctx, LOOM_STATUS_PARSE, "checkpoint: metadata '%s' is missing", key);
  return LOOM_STATUS_OK;
}

static loom_status meta_int(loom_ctx *ctx, const loom_safetensors *st, const char *key, int64_t lo,
                            int64_t hi, int64_t *out) {
  const char *v;
  LOOM_TRY(need(ctx, st, key, &v));
  char *end = NULL;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi)
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "checkpoint: metadata '%s' = '%s' is not an integer in [%lld, %lld]", key, v,
                      (long long)lo, (long long)hi);
  *out = x;
  return LOOM_STATUS_OK;
}

static loom_status meta_i32(loom_ctx *ctx, const loom_safetensors *st, const char *key,
                            int32_t *out) {
  int64_t x;
  LOOM_TRY(meta_int(ctx, st, key, INT32_MIN, INT32_MAX, &x));
  *out = (int32_t)x;
  return LOOM_STATUS_OK;
}

static loom_status meta_f64(loom_ctx *ctx, const loom_safetensors *st, const char *key,
                            double *out) {
  const char *v;
  LOOM_TRY(need(ctx, st, key, &v));
  char *end = NULL;
  double x = strtod(v, &end);
  if (!*v || *end || !isfinite(x))
    return loom_error(ctx, LOOM_STATUS_PARSE,
                      "checkpoint: metadata '%s' = '%s' is not a finite number", key, v);
  *out = x;
  return LOOM_STATUS_OK;
}

/* One of two names (false, true) into *out. */
static loom_status meta_choice(loom_ctx *ctx, const loom_safetensors *st, const char *key,
                               const char *no, const char *yes, bool *out) {
  const char *v;
  LOOM_TRY(need(ctx, st, key, &v));
  if (strcmp(v, no) && strcmp(v, yes))
    return loom_error(ctx, LOOM_STATUS_PARSE, "checkpoint: metadata '%s' = '%s' is not %s or %s",
                      key, v, no, yes);
  *out = !strcmp(v, yes);
  return LOOM_STATUS_OK;
}

/* The architecture keys; a checkpoint without "arch" is GPT-2's. */
static loom_status read_arch(loom_ctx *ctx, const loom_safetensors *st, loom_gpt_config *g) {
  loom_gpt_config_set_arch(g, LOOM_GPT_ARCH_GPT);
  g->n_kv_head = 0;
  g->rope_theta = 0;
  if (!loom_safetensors_meta(st, "arch")) return LOOM_STATUS_OK;
  bool rms, swiglu, rope;
  int64_t bias, tied;
  LOOM_TRY(meta_choice(ctx, st, "norm", "layernorm", "rmsnorm", &rms));
  LOOM_TRY(meta_choice(ctx, st, "mlp", "gelu", "swiglu", &swiglu));
  LOOM_TRY(meta_choice(ctx, st, "position", "learned", "rope", &rope));
  LOOM_TRY(meta_int(ctx, st, "bias", 0, 1, &bias));
  LOOM_TRY(meta_int(ctx, st, "tied", 0, 1, &tied));
  LOOM_TRY(meta_i32(ctx, st, "kv_heads", &g->n_kv_head));
  LOOM_TRY(meta_f64(ctx, st, "rope_theta", &g->rope_theta));
  g->norm = rms ? LOOM_GPT_NORM_RMSNORM : LOOM_GPT_NORM_LAYERNORM;
  g->mlp = swiglu ? LOOM_GPT_MLP_SWIGLU : LOOM_GPT_MLP_GELU;
  g->position = rope ? LOOM_GPT_POS_ROPE : LOOM_GPT_POS_LEARNED;
  g->no_bias = !bias;
  g->untied = !tied;
  return LOOM_STATUS_OK;
}

static loom_status read_config(loom_ctx *ctx, const loom_safetensors *st, loom_train_config *c) {
  const char *fmt, *ver;
  LOOM_TRY(need(ctx, st, "format", &fmt));
  if (strcmp(fmt, CKPT_FORMAT) != 0)
    return loom_error(ctx, LOOM_STATUS_PARSE, "checkpoint: format is '%s', not '%s'", fmt,
                      CKPT_FORMAT);
  LOOM_TRY(need(ctx, st, "version", &ver));
  if (strcmp(ver, CKPT_VERSION) != 0)
    return loom_error(ctx, LOOM_STATUS_UNSUPPORTED,
                      "checkpoint: version '%s' is not supported (this Loom reads '%s')", ver,
                      CKPT_VERSION);
  LOOM_TRY(meta_i32(ctx, st, "vocab", &c->model.vocab));
  LOOM_TRY(meta_i32(ctx, st, "layers", &c->model.n_layer));
  LOOM_TRY(meta_i32(ctx, st, "d_model", &c->model.d_model));
  LOOM_TRY(meta_i32(ctx, st, "heads", &c->model.n_head));
  LOOM_TRY(meta_i32(ctx, st, "context", &c->model.context));
  LOOM_TRY(meta_i32(ctx, st, "d_ff", &c->model.d_ff));
  LOOM_TRY(meta_f64(ctx, st, "dropout", &c->model.dropout));
  LOOM_TRY(read_arch(ctx, st, &c->model));
  LOOM_TRY(meta_i32(ctx, st, "batch", &c->batch));
  LOOM_TRY(meta_int(ctx, st, "steps", 1, INT64_MAX, &c->steps));
  LOOM_TRY(meta_f64(ctx, st, "lr", &c->lr));
  LOOM_TRY(meta_int(ctx, st, "warmup", -1, INT64_MAX, &c->warmup));
  LOOM_TRY(meta_f64(ctx, st, "min_lr_frac", &c->min_lr_frac));
  LOOM_TRY(meta_f64(ctx, st, "beta1", &c->beta1));
  LOOM_TRY(meta_f64(ctx, st, "beta2", &c->beta2));
  LOOM_TRY(meta_f64(ctx, st, "eps", &c->eps));
  LOOM_TRY(meta_f64(ctx, st, "weight_decay", &c->weight_decay));
  LOOM_TRY(meta_i32(ctx, st, "corpus_lines", &c->corpus_lines));
  LOOM_TRY(meta_i32(ctx, st, "heldout", &c->heldout));
  const char *seed;
  LOOM_TRY(need(ctx, st, "seed", &seed));
  char *end = NULL;
  errno = 0;
  unsigned long long sv = strtoull(seed, &end, 10);
  if (!*seed || *seed == '-' || *end || errno)
    return loom_error(ctx, LOOM_STATUS_PARSE, "checkpoint: metadata 'seed' = '%s' is invalid",
                      seed);
  c->seed = sv;
  loom_status s = loom_train_config_check(ctx, c);
  if (s) loom_error_prefix(ctx, "checkpoint configuration");
  return s;
}

loom_status loom_checkpoint_read(loom_ctx *ctx, const char *path, loom_train_config *cfg,
                                 loom_safetensors **st) {
  if (!path || !cfg || !st)
    return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "checkpoint: bad argument");
  *st = NULL;
  loom_safetensors *f = NULL;
  LOOM_TRY(loom_safetensors_load(ctx, path, &f));
  loom_train_config c = *cfg;
  loom_status s = read_config(ctx, f, &c);
  if (!s) {
    int64_t step;
    s = meta_int(ctx, f, "step", 0, (1 << 24) - 1, &step);
  }
  if (s) {
    loom_error_prefix(ctx, "%s", path);
    loom_safetensors_free(f);
    return s;
  }
  *cfg = c;
  *st = f;
  return LOOM_STATUS_OK;
}

loom_status loom_checkpoint_restore(loom_trainer *t, const loom_safetensors *st) {
  loom_ctx *ctx = loom_trainer_ctx(t);
  if (!t || !st) return loom_error(ctx, LOOM_STATUS_INVALID_ARGUMENT, "checkpoint: bad argument");
  int32_t n = loom_trainer_num_params(t);
  if (st->n_tensors != 3 * n) {
    /* name the first stranger, or say how many are missing */
    for (int32_t j = 0; j < st->n_tensors; j++) {
      bool known = false;
      for (int32_t k = 0; k < 3 && !known; k++)
        for (int32_t i = 0; i < n && !known; i++) {
          char nm[48];
          snprintf(nm, sizeof nm, "%s%s",
                   k == 0   ? ""
                   : k == 1 ? "adam.m."
                            : "adam.v.",
                   loom_trainer_param(t, i)->name);
          known = strcmp(nm, st->tensors[j].name) == 0;
        }
      if (!known)
        return loom_error(ctx, LOOM_STATUS_PARSE,
                          "checkpoint: unexpected tensor '%s' for this model", st->tensors[j].name);
    }
  }
  /* check everything before touching the trainer's state */
  for (int32_t pass = 0; pass < 2; pass++)
    for (int32_t k = 0; k < 3; k++)
      for (int32_t i = 0; i < n; i++) {
        const loom_gpt_param *p = loom_trainer_param(t, i);
        char nm[48], want[128], got[128];
        snprintf(nm, sizeof nm, "%s%s", k == 0 ? "" : k == 1 ? "adam.m." : "adam.v.", p->name);
        const loom_st_tensor *e = loom_safetensors_find(st, nm);
        if (!e) return loom_error(ctx, LOOM_STATUS_PARSE, "checkpoint: tensor '%s' is missing", nm);
        loom_type wt = {.dtype = LOOM_DTYPE_F32, .rank = p->rank};
        loom_type gt = {.dtype = e->dtype, .rank = e->rank};
        for (int32_t d = 0; d < p->rank; d++)
          wt.shape[d] = p->shape[d];
        for (int32_t d = 0; d < e->rank; d++)
          gt.shape[d] = e->shape[d];
        if (!loom_type_equal(&wt, &gt))
          return loom_error(
              ctx,
              e->dtype != LOOM_DTYPE_F32 ? LOOM_STATUS_DTYPE_MISMATCH : LOOM_STATUS_SHAPE_MISMATCH,
              "checkpoint: tensor '%s' is %s, the model needs %s", nm,
              loom_type_str(&gt, got, sizeof got), loom_type_str(&wt, want, sizeof want));
        if (pass == 1) memcpy(loom_tensor_data(loom_trainer_tensor(t, k, i)), e->data, e->nbytes);
      }
  int64_t step = 0;
  const char *v = loom_safetensors_meta(st, "step");
  if (v) step = strtoll(v, NULL, 10);
  return loom_trainer_set_steps_done(t, step);
}
