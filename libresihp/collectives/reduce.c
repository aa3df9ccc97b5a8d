/* SPDX-License-Identifier: BSD-3-Clause */
/* Element-wise kernels and the deterministic fixed-point conversions. Plain
 * loops the compiler vectorises; bfloat16 is widened to float, summed and
 * rounded back to nearest even, as GPUs do. */
#include "config.h"

#include "comm_internal.h"

#include <resihp/settings.h>

#include <math.h>
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

/* Called through the PLT from inside the library (exported names), so the
 * loops below use these inline copies. */
static inline float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t bf16_from_float(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

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

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
/* cvtsd2si rounds with the current mode (round half to even by default)
 * in one instruction; out-of-range and NaN give INT64_MIN, fixed up with
 * selects the compiler keeps branch-free. */
static inline int64_t to_fixed(double x, double scale) {
  double v = x * scale; /* exact: a power-of-two scale */
  int64_t r = _mm_cvtsd_si64(_mm_set_sd(v));
  r = v >= 9223372036854775808.0 ? INT64_MAX : r;
  return v != v ? 0 : r;
}
#else
static int64_t to_fixed(double x, double scale) {
  double v = x * scale; /* exact: a power-of-two scale */
  /* Round half to even without a libm call: adding and subtracting 1.5 *
   * 2^52 leaves an integer in the default rounding mode; larger values
   * are integers already. */
  if (fabs(v) < 4503599627370496.0)
    v = (v + 6755399441055744.0) - 6755399441055744.0;
  if (v != v)
    return 0;
  if (v >= 9223372036854775808.0)
    return INT64_MAX;
  if (v < -9223372036854775808.0)
    return INT64_MIN;
  return (int64_t)v;
}
#endif

void resihp_fixed_from_float(int64_t *dst, const float *src, size_t n,
                             int frac_bits) {
  double scale = ldexp(1.0, frac_bits);
  for (size_t i = 0; i < n; i++)
    dst[i] = to_fixed(src[i], scale);
}

void resihp_fixed_from_double(int64_t *dst, const double *src, size_t n,
                              int frac_bits) {
  double scale = ldexp(1.0, frac_bits);
  for (size_t i = 0; i < n; i++)
    dst[i] = to_fixed(src[i], scale);
}

void resihp_fixed_from_bf16(int64_t *dst, const uint16_t *src, size_t n,
                            int frac_bits) {
  double scale = ldexp(1.0, frac_bits);
  for (size_t i = 0; i < n; i++)
    dst[i] = to_fixed(bf16_to_float(src[i]), scale);
}

void resihp_fixed_accumulate_float(int64_t *acc, const float *src, size_t n,
                                   int frac_bits) {
  double scale = ldexp(1.0, frac_bits);
  for (size_t i = 0; i < n; i++)
    acc[i] = (int64_t)((uint64_t)acc[i] + (uint64_t)to_fixed(src[i], scale));
}

void resihp_fixed_to_double(double *dst, const int64_t *src, size_t n,
                            int frac_bits, double divisor) {
  double k = ldexp(1.0, -frac_bits) / divisor;
  for (size_t i = 0; i < n; i++)
    dst[i] = (double)src[i] * k;
}

void resihp_fixed_to_float(float *dst, const int64_t *src, size_t n,
                           int frac_bits, double divisor) {
  double k = ldexp(1.0, -frac_bits) / divisor;
  for (size_t i = 0; i < n; i++)
    dst[i] = (float)((double)src[i] * k);
}

void resihp_fixed_to_bf16(uint16_t *dst, const int64_t *src, size_t n,
                          int frac_bits, double divisor) {
  double k = ldexp(1.0, -frac_bits) / divisor;
  for (size_t i = 0; i < n; i++)
    dst[i] = bf16_from_float((float)((double)src[i] * k));
}
