#include "ir/dtype.h"

#include <math.h>
#include <string.h>

static const struct {
  const char *name;
  size_t size;
} dtype_info[LOOM_DTYPE_COUNT] = {
    [LOOM_DTYPE_F32] = {"f32", 4}, [LOOM_DTYPE_F64] = {"f64", 8},
    [LOOM_DTYPE_F16] = {"f16", 2}, [LOOM_DTYPE_BF16] = {"bf16", 2},
    [LOOM_DTYPE_I32] = {"i32", 4}, [LOOM_DTYPE_I64] = {"i64", 8},
    [LOOM_DTYPE_BOOL] = {"bool", 1}, [LOOM_DTYPE_U8] = {"u8", 1},
};

bool loom_dtype_valid(loom_dtype dt) { return (unsigned)dt < LOOM_DTYPE_COUNT; }

size_t loom_dtype_size(loom_dtype dt) {
  return loom_dtype_valid(dt) ? dtype_info[dt].size : 0;
}

const char *loom_dtype_name(loom_dtype dt) {
  return loom_dtype_valid(dt) ? dtype_info[dt].name : NULL;
}

loom_status loom_dtype_from_name(const char *name, loom_dtype *out) {
  if (!name || !out) return LOOM_STATUS_INVALID_ARGUMENT;
  for (int i = 0; i < LOOM_DTYPE_COUNT; i++)
    if (strcmp(name, dtype_info[i].name) == 0) {
      *out = (loom_dtype)i;
      return LOOM_STATUS_OK;
    }
  return LOOM_STATUS_INVALID_ARGUMENT;
}

bool loom_dtype_is_float(loom_dtype dt) {
  return dt == LOOM_DTYPE_F32 || dt == LOOM_DTYPE_F64 || dt == LOOM_DTYPE_F16 ||
         dt == LOOM_DTYPE_BF16;
}

bool loom_dtype_is_int(loom_dtype dt) {
  return dt == LOOM_DTYPE_I32 || dt == LOOM_DTYPE_I64 || dt == LOOM_DTYPE_U8 ||
         dt == LOOM_DTYPE_BOOL;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t loom_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float loom_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t loom_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
  if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
  if (absu < 0x38800000u) {                                    /* subnormal or zero */
    /* value * 2^24 rounded to nearest even gives the subnormal mantissa */
    float a = bits_f32(absu);
    float scaled = a * 16777216.0f;
    uint32_t m = (uint32_t)nearbyintf(scaled);
    return (uint16_t)(sign | m);
  }
  uint32_t e = ((absu >> 23) - 112u) << 10;
  uint32_t m = absu & 0x7fffffu;
  uint32_t h = e | (m >> 13);
  uint32_t rest = m & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}

float loom_f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = (float)m / 16777216.0f;
    return sign ? -v : v;
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
  return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

double loom_load(loom_dtype dt, const void *p, int64_t i) {
  switch (dt) {
  case LOOM_DTYPE_F32: return ((const float *)p)[i];
  case LOOM_DTYPE_F64: return ((const double *)p)[i];
  case LOOM_DTYPE_F16: return loom_f16_to_f32(((const uint16_t *)p)[i]);
  case LOOM_DTYPE_BF16: return loom_bf16_to_f32(((const uint16_t *)p)[i]);
  case LOOM_DTYPE_I32: return ((const int32_t *)p)[i];
  case LOOM_DTYPE_I64: return (double)((const int64_t *)p)[i];
  case LOOM_DTYPE_BOOL:
  case LOOM_DTYPE_U8: return ((const uint8_t *)p)[i];
  default: return 0.0;
  }
}

static int64_t to_int(double v, int64_t lo, int64_t hi) {
  if (v != v) return 0;
  if (v <= (double)lo) return lo;
  if (v >= (double)hi) return hi;
  return (int64_t)v;
}

void loom_store(loom_dtype dt, void *p, int64_t i, double v) {
  switch (dt) {
  case LOOM_DTYPE_F32: ((float *)p)[i] = (float)v; break;
  case LOOM_DTYPE_F64: ((double *)p)[i] = v; break;
  case LOOM_DTYPE_F16: ((uint16_t *)p)[i] = loom_f32_to_f16((float)v); break;
  case LOOM_DTYPE_BF16: ((uint16_t *)p)[i] = loom_f32_to_bf16((float)v); break;
  case LOOM_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)to_int(v, INT32_MIN, INT32_MAX); break;
  case LOOM_DTYPE_I64: ((int64_t *)p)[i] = to_int(v, INT64_MIN, INT64_MAX); break;
  case LOOM_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0.0; break;
  case LOOM_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)to_int(v, 0, 255); break;
  default: break;
  }
}

int64_t loom_load_i64(loom_dtype dt, const void *p, int64_t i) {
  switch (dt) {
  case LOOM_DTYPE_I32: return ((const int32_t *)p)[i];
  case LOOM_DTYPE_I64: return ((const int64_t *)p)[i];
  case LOOM_DTYPE_BOOL:
  case LOOM_DTYPE_U8: return ((const uint8_t *)p)[i];
  default: return to_int(loom_load(dt, p, i), INT64_MIN, INT64_MAX);
  }
}
