/* Dtype facts and element conversion (every dtype read and written as double). */
#ifndef LOOM_IR_DTYPE_H
#define LOOM_IR_DTYPE_H

#include "loom.h"

bool loom_dtype_valid(loom_dtype dt);
bool loom_dtype_is_float(loom_dtype dt);
bool loom_dtype_is_int(loom_dtype dt); /* i32, i64, u8, bool */

uint16_t loom_f32_to_f16(float f);
float loom_f16_to_f32(uint16_t h);
uint16_t loom_f32_to_bf16(float f); /* round to nearest even */
float loom_bf16_to_f32(uint16_t h);

/* Element i of a buffer of dtype dt, as a double. */
double loom_load(loom_dtype dt, const void *p, int64_t i);
/* Stores v into element i, converting (ints truncate toward zero; bool is v != 0). */
void loom_store(loom_dtype dt, void *p, int64_t i, double v);
/* Element i as int64 (exact for the integer dtypes). */
int64_t loom_load_i64(loom_dtype dt, const void *p, int64_t i);

#endif
