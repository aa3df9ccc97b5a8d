/* SPDX-License-Identifier: BSD-3-Clause */
/* Element-wise kernels (the fixed-point conversions are in fixed_point.c).
 * Plain loops the compiler vectorises; bfloat16 is widened to float, summed and
 * rounded back to nearest even, as GPUs do. */
#include "config.h"

#include "comm_internal.h"
#include "fixed_point.h"

#include <resihp/settings.h>

#include <string.h>

size_t resihp__dtype_size(int dtype) {
  switch (dtype) {
  case RESIHP_FLOAT32:
    return 4;
  case RESIHP_BFLOAT16:
    return 2;
  case RESIHP_FLOAT64:
  case RESIHP_FIXED64:
    return 8;
  }
  return 0;
}

#define bf16_to_float resihp__bf16_to_float
#define bf16_from_float resihp__bf16_from_float

uint16_t resihp_bf16_from_float(float f) { return bf16_from_float(f); }

float resihp_bf16_to_float(uint16_t h) { return bf16_to_float(h); }

/* The sum kernels run on every received chunk of the ring and were the
 * largest cost after memcpy: at -O2 GCC only vectorises loops whose trip
 * count is known to fit its vector width, so the plain loops stayed scalar
 * (one element per instruction). The main part is written with the
 * compiler's generic vectors instead (16 bytes: the x86-64 baseline, and
 * NEON, hold one in a register; wider ones spill without -mavx), with
 * unaligned loads and stores through memcpy and a scalar tail. Lane-wise addition: the results are bit for bit those of the
 * scalar loop. */
#define VEC_BYTES 16
typedef float vec_f32 __attribute__((vector_size(VEC_BYTES)));
typedef double vec_f64 __attribute__((vector_size(VEC_BYTES)));
typedef uint64_t vec_u64 __attribute__((vector_size(VEC_BYTES)));

/* dst = a + b, element-wise; dst may be a or b (no restrict: each value
 * is loaded before its result is stored). The operands may be misaligned
 * (a payload read in place from a shared-memory ring follows a frame of
 * another type), so every access goes through memcpy, which compiles to
 * plain unaligned loads and stores. */
#define SUM_LOOP(T, VT, dst, a, b, n)                                          \
  do {                                                                         \
    uint8_t *d_ = (dst);                                                       \
    const uint8_t *a_ = (a), *b_ = (b);                                        \
    size_t i_ = 0, bytes_ = (n) * sizeof(T);                                   \
    for (; i_ + VEC_BYTES <= bytes_; i_ += VEC_BYTES) {                        \
      VT x_, y_;                                                               \
      memcpy(&x_, a_ + i_, sizeof(x_));                                        \
      memcpy(&y_, b_ + i_, sizeof(y_));                                        \
      x_ += y_;                                                                \
      memcpy(d_ + i_, &x_, sizeof(x_));                                        \
    }                                                                          \
    for (; i_ < bytes_; i_ += sizeof(T)) {                                     \
      T x_, y_;                                                                \
      memcpy(&x_, a_ + i_, sizeof(x_));                                        \
      memcpy(&y_, b_ + i_, sizeof(y_));                                        \
      x_ += y_;                                                                \
      memcpy(d_ + i_, &x_, sizeof(x_));                                        \
    }                                                                          \
  } while (0)

void resihp__reduce_sum_to(void *dst, const void *a, const void *b, size_t n,
                           int dtype) {
  switch (dtype) {
  case RESIHP_FLOAT32:
    SUM_LOOP(float, vec_f32, dst, a, b, n);
    break;
  case RESIHP_FLOAT64:
    SUM_LOOP(double, vec_f64, dst, a, b, n);
    break;
  case RESIHP_FIXED64:
    /* Wrapping unsigned arithmetic: exact and associative modulo 2^64, so
     * the order of contributions cannot matter. */
    SUM_LOOP(uint64_t, vec_u64, dst, a, b, n);
    break;
  case RESIHP_BFLOAT16: {
    uint8_t *d = dst;
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n * 2; i += 2) {
      uint16_t u, v;
      memcpy(&u, x + i, 2);
      memcpy(&v, y + i, 2);
      u = bf16_from_float(bf16_to_float(u) + bf16_to_float(v));
      memcpy(d + i, &u, 2);
    }
    break;
  }
  }
}

void resihp__reduce_sum(void *dst, const void *src, size_t n, int dtype) {
  resihp__reduce_sum_to(dst, dst, src, n, dtype);
}

int resihp_fixed_frac_bits(void) {
  return (int)resihp_settings_get(resihp_settings_global(),
                                  RESIHP_SETTING_FIXED_FRAC_BITS);
}
