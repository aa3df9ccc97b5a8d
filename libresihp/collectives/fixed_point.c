/* SPDX-License-Identifier: BSD-3-Clause */
/* Deterministic fixed point: conversions between float types and int64
 * fixed point, the public resihp_fixed_* functions and the kernels the
 * ring fuses into the reduction (fixed_point.h).
 *
 * Speed. Deterministic all-reduce converts every element twice; one
 * scalar cvtsd2si plus fix-ups per element cost more than the ring itself.
 * The kernels here come in three sets chosen once from the CPU (compiled
 * with target attributes, so the library still runs on any x86-64 and
 * builds elsewhere with the portable set only):
 *   - portable: the scalar reference, the definition of the bits;
 *   - AVX2: 4 elements at a time. double -> int64 has no instruction
 *     before AVX-512, so |v| < 2^51 is rounded by adding 1.5 * 2^52 (the
 *     sum's ulp is 1: the addition itself rounds half to even) and reading
 *     the integer from the mantissa bits; a vector with a lane beyond that
 *     (or NaN) goes through the scalar code. int64 -> double splits the
 *     integer into two exact doubles whose one addition rounds once;
 *   - AVX-512DQ: 8 elements, with the direct conversions (vcvtpd2qq,
 *     vcvtqq2pd: current rounding mode, out of range gives INT64_MIN as
 *     cvtsd2si does) and mask fix-ups for saturation and NaN.
 * All of them round in the default mode (half to even), as the reference;
 * tests/unit/test_fixed_fast.c checks them bit for bit against it. */
#include "config.h"

#include "comm_internal.h"
#include "fixed_point.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_X86_KERNELS 1
#include <immintrin.h>
#endif

/* ---- portable reference --------------------------------------------------
 * v is x * 2^frac_bits, exact (a power-of-two scale). */
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
/* cvtsd2si rounds with the current mode (round half to even by default)
 * in one instruction; out-of-range and NaN give INT64_MIN, fixed up with
 * selects the compiler keeps branch-free. */
static inline int64_t fixed_of(double v) {
  int64_t r = _mm_cvtsd_si64(_mm_set_sd(v));
  r = v >= 9223372036854775808.0 ? INT64_MAX : r;
  return v != v ? 0 : r;
}
#else
static inline int64_t fixed_of(double v) {
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

/* Unaligned element access: callers' buffers (and test buffers) need not
 * be aligned for their type. */
static inline double load_src(const void *src, size_t i, int dtype) {
  const uint8_t *b = src;
  if (dtype == RESIHP_FLOAT32) {
    float f;
    memcpy(&f, b + 4 * i, 4);
    return f;
  }
  if (dtype == RESIHP_FLOAT64) {
    double d;
    memcpy(&d, b + 8 * i, 8);
    return d;
  }
  uint16_t h;
  memcpy(&h, b + 2 * i, 2);
  return resihp__bf16_to_float(h);
}

static inline int64_t load_i64(const int64_t *p, size_t i) {
  int64_t v;
  memcpy(&v, (const uint8_t *)p + 8 * i, 8);
  return v;
}

static inline void store_i64(int64_t *p, size_t i, int64_t v) {
  memcpy((uint8_t *)p + 8 * i, &v, 8);
}

/* stats (narrow form, see narrow_shift): OR of the values and of the
 * values with their sign folded away, accumulated when not NULL. */
static inline uint64_t fold(uint64_t v) {
  return v ^ (0 - (v >> 63));
}

static void from_scalar(int64_t *dst, const void *src, const int64_t *add,
                        size_t n, int dtype, double scale, uint64_t *stats) {
  uint64_t any = 0, fo = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t v = fixed_of(load_src(src, i, dtype) * scale);
    if (add)
      v = (int64_t)((uint64_t)v + (uint64_t)load_i64(add, i));
    store_i64(dst, i, v);
    any |= (uint64_t)v;
    fo |= fold((uint64_t)v);
  }
  if (stats)
    stats[0] |= any, stats[1] |= fo;
}

static inline void store_to(void *dst, size_t i, int dtype, double d) {
  uint8_t *b = dst;
  if (dtype == RESIHP_FLOAT64) {
    memcpy(b + 8 * i, &d, 8);
  } else if (dtype == RESIHP_FLOAT32) {
    float f = (float)d;
    memcpy(b + 4 * i, &f, 4);
  } else {
    uint16_t h = resihp__bf16_from_double(d);
    memcpy(b + 2 * i, &h, 2);
  }
}

static void to_scalar(void *dst, const int64_t *src, size_t n, int dtype,
                      double k) {
  for (size_t i = 0; i < n; i++)
    store_to(dst, i, dtype, (double)load_i64(src, i) * k);
}

/* A partial sum (resihp__fixed_sum_to): int64, or narrow values to shift
 * by t. */
struct partial {
  const int64_t *wide;
  const int32_t *vals;
  int t;
};

static inline int64_t partial_at(const struct partial *w, size_t i) {
  if (w->wide)
    return load_i64(w->wide, i);
  int32_t v;
  memcpy(&v, (const uint8_t *)w->vals + 4 * i, 4);
  return (int64_t)((uint64_t)(int64_t)v << w->t);
}

/* w from element i on. */
static inline struct partial partial_from(struct partial w, size_t i) {
  return (struct partial){w.wide ? w.wide + i : NULL,
                          w.vals ? w.vals + i : NULL, w.t};
}

static void sum_to_scalar(void *dst, const void *src, struct partial w,
                          size_t n, int dtype, double scale, double k) {
  for (size_t i = 0; i < n; i++) {
    uint64_t v = (uint64_t)fixed_of(load_src(src, i, dtype) * scale) +
                 (uint64_t)partial_at(&w, i);
    store_to(dst, i, dtype, (double)(int64_t)v * k);
  }
}

/* Narrow form (fixed_point.h): the common power of two t of the values
 * (at most 32, so that shifting logically or arithmetically keeps the
 * same low 32 bits) and whether every value >> t fits in int32. fold is
 * the OR of v ^ sign(v): its top bit is the top bit of the largest
 * magnitude, so v >> t fits for all v iff fold >> t < 2^31. */
static int narrow_shift(uint64_t any, uint64_t fold) {
  int t = any ? __builtin_ctzll(any) : 0;
  if (t > 32)
    t = 32;
  return (fold >> t) < 0x80000000u ? t : -1;
}

/* The narrow values with shift 0 of fixed(src[i]) + partial[i] (none
 * when the partial has neither form; wrapping, as the int64 path): 1 when
 * every one fits in int32 (fold < 2^31, as narrow_shift asks), else 0. */
static int narrow_of_scalar(int32_t *vals, const void *src, struct partial w,
                            size_t n, int dtype, double scale) {
  for (size_t i = 0; i < n; i++) {
    uint64_t v = (uint64_t)fixed_of(load_src(src, i, dtype) * scale);
    if (w.wide || w.vals)
      v += (uint64_t)partial_at(&w, i);
    if (fold(v) >= 0x80000000u)
      return 0;
    uint32_t u = (uint32_t)v;
    memcpy((uint8_t *)vals + 4 * i, &u, 4);
  }
  return 1;
}

static int from_narrow_scalar(int32_t *dst, const void *src, size_t n,
                              int dtype, double scale) {
  static const struct partial none;
  memset(dst, 0, 4);
  return narrow_of_scalar(dst + 1, src, none, n, dtype, scale);
}

static int add_narrow_scalar(int32_t *dst, const void *src, struct partial w,
                             size_t n, int dtype, double scale) {
  memset(dst, 0, 4);
  return narrow_of_scalar(dst + 1, src, w, n, dtype, scale);
}

static void scan_scalar(const int64_t *src, size_t n, uint64_t *stats) {
  for (size_t i = 0; i < n; i++) {
    uint64_t v = (uint64_t)load_i64(src, i);
    stats[0] |= v;
    stats[1] |= fold(v);
  }
}

static void pack_scalar(int32_t *dst, const int64_t *src, size_t n, int t) {
  uint32_t w = (uint32_t)t;
  memcpy(dst, &w, 4);
  for (size_t i = 0; i < n; i++) {
    w = (uint32_t)((uint64_t)load_i64(src, i) >> t);
    memcpy((uint8_t *)dst + 4 * (i + 1), &w, 4);
  }
}

/* The values of a narrow form shifted by t: backwards, so that widening
 * in place reads each narrow value before the wide values overwrite it. */
static void widen_values(int64_t *dst, const int32_t *vals, size_t n, int t) {
  while (n--) {
    int32_t w;
    memcpy(&w, (const uint8_t *)vals + 4 * n, 4);
    store_i64(dst, n, (int64_t)((uint64_t)(int64_t)w << t));
  }
}

static int narrow_t(const int32_t *src) {
  uint32_t t;
  memcpy(&t, src, 4);
  return t > 32 ? -1 : (int)t;
}

static int widen_scalar(int64_t *dst, const int32_t *src, size_t n) {
  int t = narrow_t(src);
  if (t < 0)
    return -1;
  widen_values(dst, src + 1, n, t);
  return 0;
}

static size_t src_size(int dtype) {
  return dtype == RESIHP_FLOAT64 ? 8 : dtype == RESIHP_FLOAT32 ? 4 : 2;
}

#ifdef HAVE_X86_KERNELS
/* ---- AVX2 ---------------------------------------------------------------- */
#define AVX2 __attribute__((target("avx2")))

AVX2 static inline __m256d load4_avx2(const void *src, size_t i, int dtype) {
  const uint8_t *b = src;
  if (dtype == RESIHP_FLOAT32)
    return _mm256_cvtps_pd(_mm_loadu_ps((const float *)(b + 4 * i)));
  if (dtype == RESIHP_FLOAT64)
    return _mm256_loadu_pd((const double *)(b + 8 * i));
  __m128i h = _mm_loadl_epi64((const __m128i *)(b + 2 * i));
  __m128i f = _mm_slli_epi32(_mm_cvtepu16_epi32(h), 16);
  return _mm256_cvtps_pd(_mm_castsi128_ps(f));
}

AVX2 static inline void stats_avx2(__m256i any, __m256i fo, uint64_t *stats) {
  uint64_t a[4], f[4];
  _mm256_storeu_si256((__m256i *)a, any);
  _mm256_storeu_si256((__m256i *)f, fo);
  stats[0] |= a[0] | a[1] | a[2] | a[3];
  stats[1] |= f[0] | f[1] | f[2] | f[3];
}

AVX2 static inline __m256i fold_avx2(__m256i x) {
  return _mm256_xor_si256(x, _mm256_cmpgt_epi64(_mm256_setzero_si256(), x));
}

/* Four values by way of double: exact for every input (|v| < 2^51 by
 * the magic-number rounding, the rest by fixed_of). */
AVX2 static inline __m256i fixed4_avx2(const void *src, size_t i, int dtype,
                                       __m256d vs) {
  const __m256d lim = _mm256_set1_pd(2251799813685248.0);   /* 2^51 */
  const __m256d magic = _mm256_set1_pd(6755399441055744.0); /* 1.5*2^52 */
  const __m256d abs = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));
  __m256d v = _mm256_mul_pd(load4_avx2(src, i, dtype), vs);
  __m256d ok = _mm256_cmp_pd(_mm256_and_pd(v, abs), lim, _CMP_LT_OQ);
  if (_mm256_movemask_pd(ok) == 0xf) {
    __m256d t = _mm256_add_pd(v, magic);
    return _mm256_sub_epi64(_mm256_castpd_si256(t), _mm256_castpd_si256(magic));
  }
  double t[4];
  int64_t q[4];
  _mm256_storeu_pd(t, v);
  for (int k = 0; k < 4; k++)
    q[k] = fixed_of(t[k]);
  return _mm256_loadu_si256((const __m256i *)q);
}

/* Eight float or bfloat16 values as float. */
AVX2 static inline __m256 load8_avx2(const void *src, size_t i, int dtype) {
  const uint8_t *b = src;
  if (dtype == RESIHP_FLOAT32)
    return _mm256_loadu_ps((const float *)(b + 4 * i));
  __m128i h = _mm_loadu_si128((const __m128i *)(b + 2 * i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AVX2 static inline void put4_avx2(int64_t *dst, const int64_t *add, size_t i,
                                  __m256i r, __m256i *any, __m256i *fo) {
  if (add)
    r = _mm256_add_epi64(r, _mm256_loadu_si256((const __m256i *)(add + i)));
  _mm256_storeu_si256((__m256i *)(dst + i), r);
  *any = _mm256_or_si256(*any, r);
  *fo = _mm256_or_si256(*fo, fold_avx2(r));
}

/* Float and bfloat16, eight at a time in float: x * 2^frac_bits is exact
 * there too (frac_bits <= 62), and while |v| < 2^31 cvtps2dq rounds it
 * half to even into int32 as the double path would (gradients are far
 * below: 2^31 is 0.5 with 32 fraction bits). 1 and the eight int32 in
 * *q, or 0 when one does not fit. */
AVX2 static inline int fixed8_i32_avx2(const void *src, size_t i, int dtype,
                                       __m256 fs, __m256i *q) {
  const __m256 flim = _mm256_set1_ps(2147483648.0f);
  const __m256 fabs = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MAX));
  __m256 v = _mm256_mul_ps(load8_avx2(src, i, dtype), fs);
  __m256 ok = _mm256_cmp_ps(_mm256_and_ps(v, fabs), flim, _CMP_LT_OQ);
  if (_mm256_movemask_ps(ok) != 0xff)
    return 0;
  *q = _mm256_cvtps_epi32(v);
  return 1;
}

/* The same eight as int64: by way of int32 when they fit, else of double. */
AVX2 static inline void fixed8_avx2(const void *src, size_t i, int dtype,
                                    __m256 fs, __m256d vs, __m256i *lo,
                                    __m256i *hi) {
  __m256i q;
  if (fixed8_i32_avx2(src, i, dtype, fs, &q)) {
    *lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(q));
    *hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(q, 1));
  } else {
    *lo = fixed4_avx2(src, i, dtype, vs);
    *hi = fixed4_avx2(src, i + 4, dtype, vs);
  }
}

AVX2 static void from_avx2(int64_t *dst, const void *src, const int64_t *add,
                           size_t n, int dtype, double scale, uint64_t *stats) {
  __m256i any = _mm256_setzero_si256(), fo = any;
  const __m256d vs = _mm256_set1_pd(scale);
  const __m256 fs = _mm256_set1_ps((float)scale);
  size_t i = 0;
  if (dtype != RESIHP_FLOAT64) {
    for (; i + 8 <= n; i += 8) {
      __m256i lo, hi;
      fixed8_avx2(src, i, dtype, fs, vs, &lo, &hi);
      put4_avx2(dst, add, i, lo, &any, &fo);
      put4_avx2(dst, add, i + 4, hi, &any, &fo);
    }
  }
  for (; i + 4 <= n; i += 4)
    put4_avx2(dst, add, i, fixed4_avx2(src, i, dtype, vs), &any, &fo);
  if (stats)
    stats_avx2(any, fo, stats);
  from_scalar(dst + i, (const uint8_t *)src + i * src_size(dtype),
              add ? add + i : NULL, n - i, dtype, scale, stats);
}

/* from_narrow_scalar, eight (float, bfloat16) or four (double) at a time
 * while every value is below 2^31 after scaling; the first block with
 * one that is not (out of range, or exactly -2^31, which fits) goes on in
 * the scalar code. */
AVX2 static int from_narrow_avx2(int32_t *dst, const void *src, size_t n,
                                 int dtype, double scale) {
  memset(dst, 0, 4);
  int32_t *vals = dst + 1;
  size_t i = 0;
  if (dtype != RESIHP_FLOAT64) {
    const __m256 fs = _mm256_set1_ps((float)scale);
    __m256i q;
    for (; i + 8 <= n && fixed8_i32_avx2(src, i, dtype, fs, &q); i += 8)
      _mm256_storeu_si256((__m256i *)(vals + i), q);
  } else {
    const __m256d vs = _mm256_set1_pd(scale);
    /* Doubles just below 2^31 round up to it: below 2^31 - 1/2 they
     * cannot (floats there are integers already). */
    const __m256d lim = _mm256_set1_pd(2147483647.5);
    const __m256d abs = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));
    for (; i + 4 <= n; i += 4) {
      __m256d v = _mm256_mul_pd(
          _mm256_loadu_pd((const double *)((const uint8_t *)src + 8 * i)), vs);
      __m256d ok = _mm256_cmp_pd(_mm256_and_pd(v, abs), lim, _CMP_LT_OQ);
      if (_mm256_movemask_pd(ok) != 0xf)
        break;
      _mm_storeu_si128((__m128i *)(vals + i), _mm256_cvtpd_epi32(v));
    }
  }
  static const struct partial none;
  return narrow_of_scalar(vals + i, (const uint8_t *)src + i * src_size(dtype),
                          none, n - i, dtype, scale);
}

/* int64 -> double, correctly rounded over the whole range: the top 16
 * bits (times 2^48) and the low 48 bits become two exact doubles (magic
 * exponents 3*2^67 and 2^52 placed by integer arithmetic), and their sum
 * rounds once, as cvtsi2sd does. */
AVX2 static inline __m256d i64_to_f64_avx2(__m256i x) {
  __m256i hi = _mm256_srai_epi32(x, 16);
  hi = _mm256_blend_epi16(hi, _mm256_setzero_si256(), 0x33);
  hi = _mm256_add_epi64(
      hi, _mm256_castpd_si256(_mm256_set1_pd(442721857769029238784.0)));
  __m256i lo = _mm256_blend_epi16(
      x, _mm256_castpd_si256(_mm256_set1_pd(4503599627370496.0)), 0x88);
  __m256d f = _mm256_sub_pd(_mm256_castsi256_pd(hi),
                            _mm256_set1_pd(442726361368656609280.0));
  return _mm256_add_pd(f, _mm256_castsi256_pd(lo));
}

/* float bits -> bfloat16 bits (resihp__bf16_from_float), 4 lanes. */
AVX2 static inline __m128i bf16_of_bits4(__m128i u) {
  __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, _mm_set1_epi32(0x7fffffff)),
                                _mm_set1_epi32(0x7f800000));
  __m128i top = _mm_srli_epi32(u, 16);
  __m128i bias = _mm_add_epi32(_mm_set1_epi32(0x7fff),
                               _mm_and_si128(top, _mm_set1_epi32(1)));
  __m128i rn = _mm_srli_epi32(_mm_add_epi32(u, bias), 16);
  __m128i qn = _mm_or_si128(top, _mm_set1_epi32(0x40));
  return _mm_blendv_epi8(rn, qn, nan);
}

/* Four doubles -> bfloat16 bits (resihp__bf16_from_double: to float
 * rounded to odd, then to bf16 by nearest even), in the low 16 bits of
 * four int32 lanes. */
AVX2 static inline __m128i bf16_of_double4(__m256d d) {
  __m128 f = _mm256_cvtpd_ps(d);
  __m256d back = _mm256_cvtps_pd(f);
  const __m256d sign = _mm256_set1_pd(-0.0);
  __m256d away = _mm256_cmp_pd(_mm256_andnot_pd(sign, back),
                               _mm256_andnot_pd(sign, d), _CMP_GT_OQ);
  __m256d cut = _mm256_cmp_pd(back, d, _CMP_NEQ_OQ);
  /* the 64-bit lane masks as 32-bit ones: the low half of each lane */
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  __m128i away32 = _mm256_castsi256_si128(
      _mm256_permutevar8x32_epi32(_mm256_castpd_si256(away), even));
  __m128i cut32 = _mm256_castsi256_si128(
      _mm256_permutevar8x32_epi32(_mm256_castpd_si256(cut), even));
  __m128i u = _mm_add_epi32(_mm_castps_si128(f), away32); /* -1 where away */
  u = _mm_or_si128(u, _mm_and_si128(cut32, _mm_set1_epi32(1)));
  return bf16_of_bits4(u);
}

/* Four doubles stored as dtype at element i of b. */
AVX2 static inline void store4d_avx2(uint8_t *b, size_t i, int dtype,
                                     __m256d d) {
  if (dtype == RESIHP_FLOAT64) {
    _mm256_storeu_pd((double *)(b + 8 * i), d);
  } else if (dtype == RESIHP_FLOAT32) {
    _mm_storeu_ps((float *)(b + 4 * i), _mm256_cvtpd_ps(d));
  } else {
    __m128i h = bf16_of_double4(d);
    _mm_storel_epi64((__m128i *)(b + 2 * i), _mm_packus_epi32(h, h));
  }
}

/* Four int64 values times k, stored as dtype at element i of b. */
AVX2 static inline void store4_avx2(uint8_t *b, size_t i, int dtype, __m256i x,
                                    __m256d vk) {
  store4d_avx2(b, i, dtype, _mm256_mul_pd(i64_to_f64_avx2(x), vk));
}

AVX2 static void to_avx2(void *dst, const int64_t *src, size_t n, int dtype,
                         double k) {
  const __m256d vk = _mm256_set1_pd(k);
  uint8_t *b = dst;
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    store4_avx2(b, i, dtype, _mm256_loadu_si256((const __m256i *)(src + i)),
                vk);
  to_scalar(b + i * src_size(dtype), src + i, n - i, dtype, k);
}

AVX2 static inline __m256i partial4_avx2(const struct partial *w, size_t i) {
  if (w->wide)
    return _mm256_loadu_si256((const __m256i *)(w->wide + i));
  __m128i x = _mm_loadu_si128((const __m128i *)(w->vals + i));
  return _mm256_sll_epi64(_mm256_cvtepi32_epi64(x), _mm_cvtsi32_si128(w->t));
}

AVX2 static void sum_to_avx2(void *dst, const void *src, struct partial w,
                             size_t n, int dtype, double scale, double k) {
  const __m256d vs = _mm256_set1_pd(scale), vk = _mm256_set1_pd(k);
  const __m256 fs = _mm256_set1_ps((float)scale);
  uint8_t *b = dst;
  size_t i = 0;
  if (dtype != RESIHP_FLOAT64) {
    /* The common case in double, without int64: own values in int32 and a
     * narrow partial with t <= 31. Both addends are exact doubles, the sum
     * is below 2^63 in magnitude, and one IEEE addition rounds it as the
     * int64 sum's conversion does: the same bits, in a third of the
     * instructions (AVX2 has no int64 -> double). */
    const int quick = w.vals && w.t <= 31;
    const __m256d pt = _mm256_set1_pd(ldexp(1.0, quick ? w.t : 0));
    /* Quicker still in float: a float32 result of a sum that fits in
     * int32, times a power of two k (a sum, or an average over 2^j):
     * rounding the sum to float and then scaling it exactly gives the
     * bits of scaling exactly in double and rounding once. */
    int e;
    const int in_float = quick && !w.t && dtype == RESIHP_FLOAT32 &&
                         frexp(k, &e) == 0.5 && k >= 0x1p-126;
    const __m256 fk = _mm256_set1_ps((float)k);
    for (; i + 8 <= n; i += 8) {
      __m256i q;
      if (quick && fixed8_i32_avx2(src, i, dtype, fs, &q)) {
        __m256i p = _mm256_loadu_si256((const __m256i *)(w.vals + i));
        __m256i s32 = _mm256_add_epi32(q, p);
        __m256i ovf = _mm256_and_si256(_mm256_xor_si256(q, s32),
                                       _mm256_xor_si256(p, s32));
        if (in_float && !_mm256_movemask_ps(_mm256_castsi256_ps(ovf))) {
          _mm256_storeu_ps((float *)(b + 4 * i),
                           _mm256_mul_ps(_mm256_cvtepi32_ps(s32), fk));
          continue;
        }
        __m256d s0 = _mm256_add_pd(
            _mm256_cvtepi32_pd(_mm256_castsi256_si128(q)),
            _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(p)), pt));
        __m256d s1 = _mm256_add_pd(
            _mm256_cvtepi32_pd(_mm256_extracti128_si256(q, 1)),
            _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(p, 1)),
                          pt));
        store4d_avx2(b, i, dtype, _mm256_mul_pd(s0, vk));
        store4d_avx2(b, i + 4, dtype, _mm256_mul_pd(s1, vk));
        continue;
      }
      __m256i lo, hi;
      fixed8_avx2(src, i, dtype, fs, vs, &lo, &hi);
      store4_avx2(b, i, dtype, _mm256_add_epi64(lo, partial4_avx2(&w, i)), vk);
      store4_avx2(b, i + 4, dtype,
                  _mm256_add_epi64(hi, partial4_avx2(&w, i + 4)), vk);
    }
  }
  for (; i + 4 <= n; i += 4)
    store4_avx2(
        b, i, dtype,
        _mm256_add_epi64(fixed4_avx2(src, i, dtype, vs), partial4_avx2(&w, i)),
        vk);
  sum_to_scalar(b + i * src_size(dtype),
                (const uint8_t *)src + i * src_size(dtype), partial_from(w, i),
                n - i, dtype, scale, k);
}

/* add_narrow_scalar: the sums are made as in sum_to_avx2, their folds
 * OR'ed (fits iff below 2^31), their low halves stored. */
AVX2 static inline void put_narrow4_avx2(int32_t *vals, size_t i, __m256i x,
                                         __m256i *fo) {
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  *fo = _mm256_or_si256(*fo, fold_avx2(x));
  _mm_storeu_si128(
      (__m128i *)(vals + i),
      _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(x, even)));
}

AVX2 static int add_narrow_avx2(int32_t *dst, const void *src, struct partial w,
                                size_t n, int dtype, double scale) {
  const __m256d vs = _mm256_set1_pd(scale);
  const __m256 fs = _mm256_set1_ps((float)scale);
  __m256i fo = _mm256_setzero_si256();
  int32_t *vals = dst + 1;
  size_t i = 0;
  if (dtype != RESIHP_FLOAT64) {
    for (; i + 8 <= n; i += 8) {
      __m256i lo, hi;
      fixed8_avx2(src, i, dtype, fs, vs, &lo, &hi);
      put_narrow4_avx2(vals, i, _mm256_add_epi64(lo, partial4_avx2(&w, i)),
                       &fo);
      put_narrow4_avx2(vals, i + 4,
                       _mm256_add_epi64(hi, partial4_avx2(&w, i + 4)), &fo);
    }
  }
  for (; i + 4 <= n; i += 4)
    put_narrow4_avx2(
        vals, i,
        _mm256_add_epi64(fixed4_avx2(src, i, dtype, vs), partial4_avx2(&w, i)),
        &fo);
  uint64_t f[4];
  _mm256_storeu_si256((__m256i *)f, fo);
  if ((f[0] | f[1] | f[2] | f[3]) >= 0x80000000u)
    return 0;
  memset(dst, 0, 4);
  return narrow_of_scalar(vals + i, (const uint8_t *)src + i * src_size(dtype),
                          partial_from(w, i), n - i, dtype, scale);
}

AVX2 static void scan_avx2(const int64_t *src, size_t n, uint64_t *stats) {
  __m256i any = _mm256_setzero_si256(), fo = any;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
    any = _mm256_or_si256(any, x);
    fo = _mm256_or_si256(fo, fold_avx2(x));
  }
  stats_avx2(any, fo, stats);
  scan_scalar(src + i, n - i, stats);
}

AVX2 static void pack_avx2(int32_t *dst, const int64_t *src, size_t n, int t) {
  const __m128i cnt = _mm_cvtsi32_si128(t);
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m256i x =
        _mm256_srl_epi64(_mm256_loadu_si256((const __m256i *)(src + i)), cnt);
    _mm_storeu_si128(
        (__m128i *)(dst + 1 + i),
        _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(x, even)));
  }
  uint32_t w = (uint32_t)t;
  memcpy(dst, &w, 4);
  for (; i < n; i++) {
    w = (uint32_t)((uint64_t)load_i64(src, i) >> t);
    memcpy((uint8_t *)dst + 4 * (i + 1), &w, 4);
  }
}

AVX2 static int widen_avx2(int64_t *dst, const int32_t *src, size_t n) {
  int t = narrow_t(src);
  if (t < 0)
    return -1;
  /* Backwards (see widen_values): the tail first, then blocks whose four
   * narrow values are loaded before their wide values are stored. */
  const int32_t *vals = src + 1;
  const __m128i cnt = _mm_cvtsi32_si128(t);
  size_t i = n & ~(size_t)3;
  widen_values(dst + i, vals + i, n - i, t);
  for (; i; i -= 4) {
    __m128i x = _mm_loadu_si128((const __m128i *)(vals + i - 4));
    _mm256_storeu_si256((__m256i *)(dst + i - 4),
                        _mm256_sll_epi64(_mm256_cvtepi32_epi64(x), cnt));
  }
  return 0;
}

/* ---- AVX-512DQ ----------------------------------------------------------- */
#define AVX512 __attribute__((target("avx2,avx512f,avx512dq")))

AVX512 static inline __m512d load8_avx512(const void *src, size_t i,
                                          int dtype) {
  const uint8_t *b = src;
  if (dtype == RESIHP_FLOAT32)
    return _mm512_cvtps_pd(_mm256_loadu_ps((const float *)(b + 4 * i)));
  if (dtype == RESIHP_FLOAT64)
    return _mm512_loadu_pd((const double *)(b + 8 * i));
  __m128i h = _mm_loadu_si128((const __m128i *)(b + 2 * i));
  __m256i f = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
  return _mm512_cvtps_pd(_mm256_castsi256_ps(f));
}

AVX512 static void from_avx512(int64_t *dst, const void *src,
                               const int64_t *add, size_t n, int dtype,
                               double scale, uint64_t *stats) {
  __m512i any = _mm512_setzero_si512(), fo = any;
  const __m512d vs = _mm512_set1_pd(scale);
  const __m512d two63 = _mm512_set1_pd(9223372036854775808.0);
  const __m512i max = _mm512_set1_epi64(INT64_MAX);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m512d v = _mm512_mul_pd(load8_avx512(src, i, dtype), vs);
    __m512i r = _mm512_cvtpd_epi64(v);
    r = _mm512_mask_blend_epi64(_mm512_cmp_pd_mask(v, two63, _CMP_GE_OQ), r,
                                max);
    r = _mm512_maskz_mov_epi64(_mm512_cmp_pd_mask(v, v, _CMP_ORD_Q), r);
    if (add)
      r = _mm512_add_epi64(r, _mm512_loadu_si512(add + i));
    _mm512_storeu_si512(dst + i, r);
    if (stats) {
      any = _mm512_or_si512(any, r);
      fo = _mm512_or_si512(fo, _mm512_xor_si512(r, _mm512_srai_epi64(r, 63)));
    }
  }
  if (stats) {
    stats[0] |= (uint64_t)_mm512_reduce_or_epi64(any);
    stats[1] |= (uint64_t)_mm512_reduce_or_epi64(fo);
  }
  from_avx2(dst + i, (const uint8_t *)src + i * src_size(dtype),
            add ? add + i : NULL, n - i, dtype, scale, stats);
}

AVX512 static void to_avx512(void *dst, const int64_t *src, size_t n, int dtype,
                             double k) {
  const __m512d vk = _mm512_set1_pd(k);
  uint8_t *b = dst;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m512d d =
        _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_loadu_si512(src + i)), vk);
    if (dtype == RESIHP_FLOAT64) {
      _mm512_storeu_pd(b + 8 * i, d);
    } else if (dtype == RESIHP_FLOAT32) {
      _mm256_storeu_ps((float *)(b + 4 * i), _mm512_cvtpd_ps(d));
    } else {
      __m128i lo = bf16_of_double4(_mm512_castpd512_pd256(d));
      __m128i hi = bf16_of_double4(_mm512_extractf64x4_pd(d, 1));
      _mm_storeu_si128((__m128i *)(b + 2 * i), _mm_packus_epi32(lo, hi));
    }
  }
  to_avx2(b + i * src_size(dtype), src + i, n - i, dtype, k);
}
#endif /* HAVE_X86_KERNELS */

/* ---- dispatch ------------------------------------------------------------ */

struct kernels {
  int level;
  void (*from)(int64_t *dst, const void *src, const int64_t *add, size_t n,
               int dtype, double scale, uint64_t *stats);
  void (*to)(void *dst, const int64_t *src, size_t n, int dtype, double k);
  void (*sum_to)(void *dst, const void *src, struct partial w, size_t n,
                 int dtype, double scale, double k);
  int (*from_narrow)(int32_t *dst, const void *src, size_t n, int dtype,
                     double scale);
  int (*add_narrow)(int32_t *dst, const void *src, struct partial w, size_t n,
                    int dtype, double scale);
  void (*scan)(const int64_t *src, size_t n, uint64_t *stats);
  void (*pack)(int32_t *dst, const int64_t *src, size_t n, int t);
  int (*widen)(int64_t *dst, const int32_t *src, size_t n);
};

static const struct kernels kernel_sets[] = {
    {0, from_scalar, to_scalar, sum_to_scalar, from_narrow_scalar,
     add_narrow_scalar, scan_scalar, pack_scalar, widen_scalar},
#ifdef HAVE_X86_KERNELS
    {1, from_avx2, to_avx2, sum_to_avx2, from_narrow_avx2, add_narrow_avx2,
     scan_avx2, pack_avx2, widen_avx2},
    {2, from_avx512, to_avx512, sum_to_avx2, from_narrow_avx2, add_narrow_avx2,
     scan_avx2, pack_avx2, widen_avx2},
#endif
};

static int best_level(void) {
#ifdef HAVE_X86_KERNELS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
    return 2;
  if (__builtin_cpu_supports("avx2"))
    return 1;
#endif
  return 0;
}

/* Chosen on first use; racing first uses store the same value. */
static _Atomic(const struct kernels *) chosen;

static const struct kernels *K(void) {
  const struct kernels *k = atomic_load_explicit(&chosen, memory_order_relaxed);
  if (!k) {
    k = &kernel_sets[best_level()];
    atomic_store_explicit(&chosen, k, memory_order_relaxed);
  }
  return k;
}

int resihp__fixed_set_isa(int level) {
  int best = best_level();
  if (level < 0 || level > best)
    level = best;
  atomic_store(&chosen, &kernel_sets[level]);
  return level;
}

void resihp__fixed_from(int64_t *dst, const void *src, const int64_t *add,
                        size_t n, int src_dtype, int frac_bits) {
  K()->from(dst, src, add, n, src_dtype, ldexp(1.0, frac_bits), NULL);
}

void resihp__fixed_from_stats(int64_t *dst, const void *src, const int64_t *add,
                              size_t n, int src_dtype, int frac_bits,
                              uint64_t stats[2]) {
  K()->from(dst, src, add, n, src_dtype, ldexp(1.0, frac_bits), stats);
}

void resihp__fixed_to(void *dst, const int64_t *src, size_t n, int dst_dtype,
                      int frac_bits, double divisor) {
  K()->to(dst, src, n, dst_dtype, ldexp(1.0, -frac_bits) / divisor);
}

int resihp__fixed_narrow(int32_t *dst, const int64_t *src, size_t n,
                         const uint64_t stats[2]) {
  uint64_t st[2] = {0, 0};
  if (stats)
    st[0] = stats[0], st[1] = stats[1];
  else
    K()->scan(src, n, st);
  int t = narrow_shift(st[0], st[1]);
  if (t < 0)
    return 0;
  K()->pack(dst, src, n, t);
  return 1;
}

/* A partial sum as the ring received it: n int64, or a narrow form. 0, or
 * -1 for an impossible shift. */
static int partial_of(const void *partial, int narrow, struct partial *w) {
  *w = (struct partial){narrow ? NULL : partial, NULL, 0};
  if (narrow) {
    if ((w->t = narrow_t(partial)) < 0)
      return -1;
    w->vals = (const int32_t *)partial + 1;
  }
  return 0;
}

static void sum_to(void *dst, const void *src, struct partial w, size_t n,
                   int src_dtype, int frac_bits, double divisor) {
  K()->sum_to(dst, src, w, n, src_dtype, ldexp(1.0, frac_bits),
              ldexp(1.0, -frac_bits) / divisor);
}

int resihp__fixed_sum_to(void *dst, const void *src, const void *partial,
                         int narrow, size_t n, int src_dtype, int frac_bits,
                         double divisor) {
  struct partial w;
  if (partial_of(partial, narrow, &w))
    return -1;
  sum_to(dst, src, w, n, src_dtype, frac_bits, divisor);
  return 0;
}

void resihp__fixed_sum_to_span(void *dst, const void *src, const void *part,
                               int t, size_t n, int src_dtype, int frac_bits,
                               double divisor) {
  struct partial w = {t < 0 ? part : NULL, t < 0 ? NULL : part, t < 0 ? 0 : t};
  sum_to(dst, src, w, n, src_dtype, frac_bits, divisor);
}

int resihp__fixed_shift(const void *narrow) {
  return narrow_t(narrow);
}

int resihp__fixed_add_narrow(int32_t *dst, const void *src, const void *partial,
                             int narrow, size_t n, int src_dtype,
                             int frac_bits) {
  struct partial w;
  if (partial_of(partial, narrow, &w))
    return -1;
  return K()->add_narrow(dst, src, w, n, src_dtype, ldexp(1.0, frac_bits));
}

int resihp__fixed_from_narrow(int32_t *dst, const void *src, size_t n,
                              int src_dtype, int frac_bits) {
  return K()->from_narrow(dst, src, n, src_dtype, ldexp(1.0, frac_bits));
}

int resihp__fixed_widen(int64_t *dst, const int32_t *src, size_t n) {
  return K()->widen(dst, src, n);
}

/* ---- public API (allreduce.h) -------------------------------------------- */

void resihp_fixed_from_float(int64_t *dst, const float *src, size_t n,
                             int frac_bits) {
  resihp__fixed_from(dst, src, NULL, n, RESIHP_FLOAT32, frac_bits);
}

void resihp_fixed_from_double(int64_t *dst, const double *src, size_t n,
                              int frac_bits) {
  resihp__fixed_from(dst, src, NULL, n, RESIHP_FLOAT64, frac_bits);
}

void resihp_fixed_from_bf16(int64_t *dst, const uint16_t *src, size_t n,
                            int frac_bits) {
  resihp__fixed_from(dst, src, NULL, n, RESIHP_BFLOAT16, frac_bits);
}

void resihp_fixed_accumulate_float(int64_t *acc, const float *src, size_t n,
                                   int frac_bits) {
  resihp__fixed_from(acc, src, acc, n, RESIHP_FLOAT32, frac_bits);
}

void resihp_fixed_to_double(double *dst, const int64_t *src, size_t n,
                            int frac_bits, double divisor) {
  resihp__fixed_to(dst, src, n, RESIHP_FLOAT64, frac_bits, divisor);
}

void resihp_fixed_to_float(float *dst, const int64_t *src, size_t n,
                           int frac_bits, double divisor) {
  resihp__fixed_to(dst, src, n, RESIHP_FLOAT32, frac_bits, divisor);
}

void resihp_fixed_to_bf16(uint16_t *dst, const int64_t *src, size_t n,
                          int frac_bits, double divisor) {
  resihp__fixed_to(dst, src, n, RESIHP_BFLOAT16, frac_bits, divisor);
}
