/* SPDX-License-Identifier: BSD-3-Clause */
/* Tests of the fast deterministic mode: the vectorised fixed-point kernels
 * (fixed_point.c) bit for bit against the scalar reference, over every
 * frac_bits, special values, odd lengths and misaligned buffers; and the
 * deterministic all-reduce with conversion fused into the ring and int32
 * chunks on the wire, against sums computed here from an independent
 * scalar definition, with real forked ranks (rank_group.h), over shared
 * memory and TCP, with mac-data, and with a rank killed mid-collective. */
#include "config.h"

#include <resihp.h>

#include "../../libresihp/collectives/comm_internal.h"
#include "../../libresihp/collectives/fixed_point.h"

#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rank_group.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* The definition, written independently of the library: round half to
 * even, NaN -> 0, saturation. */
static int64_t ref_fixed(double x, int frac_bits) {
  double v = ldexp(x, frac_bits);
  if (isnan(v))
    return 0;
  if (v >= 0x1p63)
    return INT64_MAX;
  if (v < -0x1p63)
    return INT64_MIN;
  return (int64_t)nearbyint(v);
}

/* A double of any kind, with frac_bits in mind: special values, exact
 * halves of the fixed-point grid, the saturation edges, subnormals and
 * random magnitudes. */
static double any_double(int f) {
  uint64_t r = next();
  double edge = ldexp(1.0, 63 - f);
  switch (r % 16) {
  case 0:
    return (r >> 8) & 1 ? NAN : -NAN;
  case 1:
    return (r >> 8) & 1 ? INFINITY : -INFINITY;
  case 2:
    return (r >> 8) & 1 ? 0.0 : -0.0;
  case 3: /* k + 1/2 on the grid: ties */
    return ldexp((double)((int64_t)(r >> 20) - (1ll << 42)) + 0.5, -f);
  case 4:
    return (r >> 8) & 1 ? edge : -edge;
  case 5:
    return nextafter((r >> 8) & 1 ? edge : -edge, 0.0);
  case 6:
    return nextafter((r >> 8) & 1 ? edge : -edge,
                     (r >> 9) & 1 ? INFINITY : -INFINITY);
  case 7: { /* subnormal double */
    uint64_t b = (r >> 12) | ((r & 1) << 63);
    double d;
    memcpy(&d, &b, 8);
    return d;
  }
  case 8: /* just around 2^51..2^53 after scaling: the AVX2 switch-over */
    return ldexp((double)(int64_t)(r >> 11) * ((r & 1) ? 1 : -1),
                 -f - (int)(r % 4));
  default: { /* any finite double of moderate exponent, any mantissa */
    int e = (int)((r >> 52) % 160) - 80 - f / 2;
    return ldexp((double)(int64_t)(next() >> 11) * ((r & 1) ? 1 : -1), e - 53);
  }
  }
}

/* What gradients look like with frac_bits f: below 2^31 after scaling,
 * where the AVX2 kernel converts eight floats at a time in float, with
 * ties, both sides of the 2^31 edge, and now and then any value (a lane
 * that sends its eight to the double path). */
static double gradient_double(int f) {
  uint64_t r = next();
  double edge = ldexp(1.0, 31 - f);
  switch (r % 64) {
  case 0:
    return any_double(f);
  case 1:
    return (r >> 8) & 1 ? edge : -edge;
  case 2:
    return nextafterf((float)((r >> 8) & 1 ? edge : -edge), 0.0f);
  case 3:
    return nextafter((r >> 8) & 1 ? edge : -edge, 0.0);
  default:
    if (r % 4 == 0) /* k + 1/2 on the grid: ties */
      return ldexp((double)((int64_t)(r >> 40) - (1ll << 23)) + 0.5, -f);
    return ldexp((double)(int64_t)(next() >> 33) * ((r & 1) ? 1 : -1),
                 -f - (int)((r >> 8) % 24));
  }
}

static void fill_src(void *src, size_t n, int dtype, int f) {
  uint8_t *b = src;
  int gradients = next() % 2;
  for (size_t i = 0; i < n; i++) {
    double d = gradients ? gradient_double(f) : any_double(f);
    if (dtype == RESIHP_FLOAT64) {
      memcpy(b + 8 * i, &d, 8);
    } else if (dtype == RESIHP_FLOAT32) {
      float x = (float)d;
      if (next() % 8 == 0) { /* any float bit pattern, subnormals too */
        uint32_t u = (uint32_t)next();
        memcpy(&x, &u, 4);
      }
      memcpy(b + 4 * i, &x, 4);
    } else {
      uint16_t h = (uint16_t)next();
      if (next() % 2)
        h = resihp_bf16_from_float((float)d);
      memcpy(b + 2 * i, &h, 2);
    }
  }
}

static double src_at(const void *src, size_t i, int dtype) {
  const uint8_t *b = src;
  if (dtype == RESIHP_FLOAT64) {
    double d;
    memcpy(&d, b + 8 * i, 8);
    return d;
  }
  if (dtype == RESIHP_FLOAT32) {
    float x;
    memcpy(&x, b + 4 * i, 4);
    return x;
  }
  uint16_t h;
  memcpy(&h, b + 2 * i, 2);
  return resihp_bf16_to_float(h);
}

static size_t dsize(int dtype) {
  return dtype == RESIHP_FLOAT64 ? 8 : dtype == RESIHP_FLOAT32 ? 4 : 2;
}

#define NMAX 1031
static const int dtypes[] = {RESIHP_FLOAT32, RESIHP_FLOAT64, RESIHP_BFLOAT16};

/* float -> fixed and accumulate, at each kernel level the CPU has, every
 * frac_bits, lengths 0..NMAX and misaligned buffers. */
START_TEST(from_fixed_bitwise) {
  int best = resihp__fixed_set_isa(99);
  static uint8_t srcb[NMAX * 8 + 16], dstb[NMAX * 8 + 16], accb[NMAX * 8 + 16];
  static int64_t want[NMAX], acc0[NMAX];
  long checked = 0, fits_seen[2] = {0, 0};
  for (int level = 0; level <= best; level++) {
    ck_assert_int_eq(resihp__fixed_set_isa(level), level);
    for (int f = 0; f <= 62; f++)
      for (int d = 0; d < 3; d++) {
        int dt = dtypes[d];
        size_t n = f % 7 == 0 ? NMAX : (size_t)(next() % 70);
        size_t so = next() % 8, doff = next() % 8;
        void *src = srcb + so;
        int64_t *dst = (int64_t *)(void *)(dstb + doff);
        fill_src(src, n, dt, f);
        for (size_t i = 0; i < n; i++)
          want[i] = ref_fixed(src_at(src, i, dt), f);
        resihp__fixed_from(dst, src, NULL, n, dt, f);
        for (size_t i = 0; i < n; i++) {
          int64_t got;
          memcpy(&got, dstb + doff + 8 * i, 8);
          ck_assert_msg(got == want[i],
                        "level %d frac %d dtype %d i %zu x %a: %lld, want "
                        "%lld",
                        level, f, dt, i, src_at(src, i, dt), (long long)got,
                        (long long)want[i]);
        }
        checked += (long)n;
        /* The stats the ring keeps for the narrow form: the same values,
         * and the OR of them and of them with the sign folded away. */
        uint64_t st[2] = {0, 0}, any = 0, fo = 0;
        resihp__fixed_from_stats(dst, src, NULL, n, dt, f, st);
        for (size_t i = 0; i < n; i++) {
          int64_t got;
          memcpy(&got, dstb + doff + 8 * i, 8);
          ck_assert(got == want[i]);
          any |= (uint64_t)want[i];
          fo |= (uint64_t)(want[i] < 0 ? ~want[i] : want[i]);
        }
        ck_assert(st[0] == any && st[1] == fo);
        /* Straight to the narrow form with shift 0: exactly when every
         * value fits in int32, then those values. */
        static int32_t nb[NMAX + 1];
        int fits = 1;
        for (size_t i = 0; i < n; i++)
          fits &= want[i] >= INT32_MIN && want[i] <= INT32_MAX;
        ck_assert_msg(resihp__fixed_from_narrow(nb, src, n, dt, f) == fits,
                      "level %d frac %d dtype %d n %zu: fits %d", level, f, dt,
                      n, fits);
        for (size_t i = 0; fits && i <= n; i++)
          ck_assert_msg(nb[i] == (i ? want[i - 1] : 0),
                        "level %d frac %d dtype %d i %zu: narrow %d, want "
                        "%lld",
                        level, f, dt, i, nb[i],
                        (long long)(i ? want[i - 1] : 0));
        fits_seen[fits]++;
        if (dt != RESIHP_FLOAT32)
          continue;
        /* accumulate: wrapping sums, acc misaligned too */
        int64_t *acc = (int64_t *)(void *)(accb + (8 - doff) % 8);
        for (size_t i = 0; i < n; i++) {
          acc0[i] = (int64_t)next();
          memcpy((uint8_t *)acc + 8 * i, &acc0[i], 8);
        }
        resihp_fixed_accumulate_float(acc, src, n, f);
        for (size_t i = 0; i < n; i++) {
          int64_t got;
          memcpy(&got, (uint8_t *)acc + 8 * i, 8);
          ck_assert(got == (int64_t)((uint64_t)acc0[i] + (uint64_t)want[i]));
        }
      }
  }
  resihp__fixed_set_isa(-1);
  ck_assert(checked > 10000);
  ck_assert(fits_seen[0] > 10 && fits_seen[1] > 10);
}
END_TEST

static int64_t any_int64(void) {
  uint64_t r = next();
  switch (r % 8) {
  case 0:
    return (r >> 3) & 1 ? INT64_MAX : INT64_MIN;
  case 1: /* around 2^53: int64 -> double rounds, ties included */
    return (int64_t)((1ull << (53 + (r >> 3) % 10)) + (next() % 4096)) *
           (((r >> 20) & 1) ? 1 : -1);
  case 2:
    return (int64_t)(next() % 2048) - 1024;
  case 3:
    return (int64_t)next();
  default:
    return (int64_t)(next() >> ((r >> 3) % 64)) * (((r >> 9) & 1) ? 1 : -1);
  }
}

/* bfloat16 of w, rounded once to nearest even (allreduce.h), by the
 * definition: w over the bf16 ulp of its binade (exact: a power of two)
 * rounded to an integer, times that ulp. Not through float, which would
 * round a second time. */
static uint16_t ref_bf16(double w) {
  if (isnan(w) || isinf(w) || w == 0.0)
    return resihp_bf16_from_float((float)w); /* exact, or a quiet NaN */
  int e = ilogb(w);
  if (e > 127)
    return signbit(w) ? 0xff80 : 0x7f80;
  int ulp = (e < -126 ? -126 : e) - 7; /* subnormals: 2^-133 */
  double v = ldexp(nearbyint(ldexp(w, -ulp)), ulp); /* exact, or 2^128 */
  return resihp_bf16_from_float((float)v);       /* exact, or inf */
}

/* x times k in dtype, by the definition: one rounding to double, then
 * to the type. */
static void ref_to(int64_t x, int dt, double k, uint8_t *want) {
  double w = (double)x * k;
  if (dt == RESIHP_FLOAT64) {
    memcpy(want, &w, 8);
  } else if (dt == RESIHP_FLOAT32) {
    float y = (float)w;
    memcpy(want, &y, 4);
  } else {
    uint16_t h = ref_bf16(w);
    memcpy(want, &h, 2);
  }
}

START_TEST(to_float_bitwise) {
  int best = resihp__fixed_set_isa(99);
  static uint8_t srcb[NMAX * 8 + 16], dstb[NMAX * 8 + 16];
  static const double divisors[] = {1.0, 2.0, 3.0, 5.0, 7.0};
  long checked = 0;
  for (int level = 0; level <= best; level++) {
    resihp__fixed_set_isa(level);
    for (int f = 0; f <= 62; f++)
      for (int d = 0; d < 3; d++)
        for (int v = 0; v < 5; v++) {
          int dt = dtypes[d];
          double div = divisors[v];
          size_t n = (f + v) % 9 == 0 ? NMAX : (size_t)(next() % 40);
          size_t so = next() % 8, doff = next() % 8;
          for (size_t i = 0; i < n; i++) {
            int64_t x = any_int64();
            memcpy(srcb + so + 8 * i, &x, 8);
          }
          resihp__fixed_to(dstb + doff, (const int64_t *)(void *)(srcb + so), n,
                           dt, f, div);
          double k = ldexp(1.0, -f) / div;
          for (size_t i = 0; i < n; i++) {
            int64_t x;
            memcpy(&x, srcb + so + 8 * i, 8);
            uint8_t want[8];
            ref_to(x, dt, k, want);
            ck_assert_msg(!memcmp(dstb + doff + dsize(dt) * i, want, dsize(dt)),
                          "level %d frac %d dtype %d div %g x %lld", level, f,
                          dt, div, (long long)x);
          }
          checked += (long)n;
        }
  }
  resihp__fixed_set_isa(-1);
  ck_assert(checked > 10000);
}
END_TEST

/* The deterministic ring's last reduce-scatter step in one pass: the
 * caller's values to fixed point, plus a partial sum (int64, or a narrow
 * form with any shift), back to the caller's type and divided, at each
 * kernel level, against the definitions; a narrow form with an impossible
 * shift is refused. */
START_TEST(sum_to_bitwise) {
  int best = resihp__fixed_set_isa(99);
  static uint8_t srcb[NMAX * 8 + 16], dstb[NMAX * 8 + 16], wb[NMAX * 8 + 16];
  static const double divisors[] = {1.0, 3.0, 4.0};
  long checked = 0, fits_seen[2] = {0, 0};
  for (int level = 0; level <= best; level++) {
    resihp__fixed_set_isa(level);
    for (int f = 0; f <= 62; f++)
      for (int d = 0; d < 3; d++)
        for (int form = 0; form < 2; form++) {
          int dt = dtypes[d];
          double div = divisors[(f + form) % 3];
          size_t n = (f + d) % 9 == 0 ? NMAX : (size_t)(next() % 40);
          size_t so = next() % 8, doff = next() % 8, wo = next() % 8;
          void *src = srcb + so;
          fill_src(src, n, dt, f);
          /* Half the time partial sums of gradients: small, shift 0. */
          int small = next() % 2;
          uint32_t t = small ? 0 : (uint32_t)(next() % 33);
          if (form)
            memcpy(wb + wo, &t, 4);
          for (size_t i = 0; i < n; i++) {
            int64_t x =
                small ? (int64_t)(next() % 2000001) - 1000000 : any_int64();
            int32_t q = small ? (int32_t)x : (int32_t)next();
            if (form)
              memcpy(wb + wo + 4 * (i + 1), &q, 4);
            else
              memcpy(wb + wo + 8 * i, &x, 8);
          }
          ck_assert_int_eq(resihp__fixed_sum_to(dstb + doff, src, wb + wo, form,
                                                n, dt, f, div),
                           0);
          double k = ldexp(1.0, -f) / div;
          static int32_t nb[NMAX + 1];
          int fits = resihp__fixed_add_narrow(nb, src, wb + wo, form, n, dt, f);
          ck_assert_int_ge(fits, 0);
          int want_fits = 1;
          for (size_t i = 0; i < n; i++) {
            int64_t w;
            if (form) {
              int32_t q;
              memcpy(&q, wb + wo + 4 * (i + 1), 4);
              w = (int64_t)((uint64_t)(int64_t)q << t);
            } else {
              memcpy(&w, wb + wo + 8 * i, 8);
            }
            int64_t sum = (int64_t)((uint64_t)ref_fixed(src_at(src, i, dt), f) +
                                    (uint64_t)w);
            uint8_t want[8];
            ref_to(sum, dt, k, want);
            ck_assert_msg(!memcmp(dstb + doff + dsize(dt) * i, want, dsize(dt)),
                          "level %d frac %d dtype %d form %d i %zu x %a", level,
                          f, dt, form, i, src_at(src, i, dt));
            want_fits &= sum >= INT32_MIN && sum <= INT32_MAX;
            if (fits)
              ck_assert_msg(nb[i + 1] == sum, "level %d frac %d: narrow sum",
                            level, f);
          }
          ck_assert_msg(fits == want_fits, "level %d frac %d dtype %d n %zu",
                        level, f, dt, n);
          ck_assert(!fits || nb[0] == 0);
          if (n >= 16)
            fits_seen[fits]++;
          checked += (long)n;
        }
    uint32_t bad = 33;
    memcpy(wb, &bad, 4);
    ck_assert_int_eq(
        resihp__fixed_sum_to(dstb, srcb, wb, 1, 4, RESIHP_FLOAT32, 32, 1.0),
        -1);
    ck_assert_int_eq(resihp__fixed_add_narrow((int32_t *)(void *)dstb, srcb, wb,
                                              1, 4, RESIHP_FLOAT32, 32),
                     -1);
  }
  resihp__fixed_set_isa(-1);
  ck_assert(checked > 10000);
  ck_assert(fits_seen[0] > 10 && fits_seen[1] > 10);
}
END_TEST

/* Narrow wire form: taken exactly when some 2^t (t <= 32) divides every
 * value and every quotient fits in int32; widening in place restores the
 * values; a shift beyond 32 is refused. */
static int ref_narrow_t(const int64_t *v, size_t n) {
  uint64_t any = 0;
  for (size_t i = 0; i < n; i++)
    any |= (uint64_t)v[i];
  int t = 0;
  while (t < 32 && any && !(any >> t & 1))
    t++;
  for (size_t i = 0; i < n; i++) {
    int64_t q = v[i] / ((int64_t)1 << t); /* exact: 2^t divides v[i] */
    if (q < INT32_MIN || q > INT32_MAX)
      return -1;
  }
  return t;
}

START_TEST(narrow_and_widen) {
  int best = resihp__fixed_set_isa(99);
  static int64_t v[NMAX + 1];
  static uint8_t nb[NMAX * 8 + 16];
  static const int64_t edges[] = {INT32_MAX,
                                  INT32_MIN,
                                  (int64_t)INT32_MAX + 1,
                                  (int64_t)INT32_MIN - 1,
                                  0,
                                  -1,
                                  INT64_MAX,
                                  INT64_MIN,
                                  1ll << 32};
  int seen[2] = {0, 0};
  for (int level = 0; level <= best; level++) {
    resihp__fixed_set_isa(level);
    for (int iter = 0; iter < 3000; iter++) {
      size_t n = iter % 50 == 0 ? NMAX : (size_t)(next() % 37) + 1;
      int sh = (int)(next() % 41);
      for (size_t i = 0; i < n; i++)
        v[i] = (int64_t)((uint64_t)(int64_t)(int32_t)next() << sh);
      if (iter % 3) { /* one edge value somewhere */
        int64_t e = edges[next() % 9];
        v[next() % n] = e;
      }
      int t = ref_narrow_t(v, n);
      seen[t >= 0]++;
      size_t off = next() % 8;
      int32_t *dst = (int32_t *)(void *)(nb + off);
      ck_assert_int_eq(resihp__fixed_narrow(dst, v, n, NULL), t >= 0);
      if (t < 0)
        continue;
      uint32_t got_t;
      memcpy(&got_t, dst, 4);
      ck_assert_int_eq(got_t, t);
      ck_assert_int_eq(resihp__fixed_widen((int64_t *)(void *)dst, dst, n), 0);
      for (size_t i = 0; i < n; i++) {
        int64_t got;
        memcpy(&got, nb + off + 8 * i, 8);
        ck_assert_msg(got == v[i], "level %d n %zu i %zu", level, n, i);
      }
      uint32_t bad = 33 + (uint32_t)(next() % 1000);
      memcpy(dst, &bad, 4);
      ck_assert_int_eq(resihp__fixed_widen((int64_t *)(void *)dst, dst, n), -1);
    }
  }
  ck_assert(seen[0] > 100 && seen[1] > 100);
  resihp__fixed_set_isa(-1);
}
END_TEST

/* ---- deterministic all-reduce -------------------------------------------- */

#define CHUNK 32768 /* bytes: 4096 int64 per chunk, the ring's minimum */
#define BLOCK 12288 /* elements: alternately small and large values */

/* Rank wr's contribution: blocks of gradients that fit in int32 at 32
 * fraction bits, and blocks of values that do not (with a NaN, an infinity
 * and a huge value now and then), so that one collective sends both forms
 * and saturation wraps. */
static float contribution(int wr, size_t i, int seed) {
  uint32_t x = (uint32_t)(wr * 2654435761u) ^ (uint32_t)(i * 40503u) ^
               (uint32_t)seed * 97u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  float u = (float)(x & 0xffff) / 65536.0f - 0.5f;
  if ((i / BLOCK + (size_t)seed) % 2 == 0)
    return u * 1e-3f; /* < 2^31 / 2^32 with 5 ranks */
  switch (x >> 28) {
  case 0:
    return NAN;
  case 1:
    return (x >> 27) & 1 ? INFINITY : -INFINITY;
  case 2:
    return u * 1e30f;
  default:
    return u * (float)(1u << ((x >> 16) % 24));
  }
}

/* The expected result over the members of c's view. */
static void expected(resihp_comm_t *c, size_t count, int seed, int dtype,
                     double div, void *out) {
  int f = resihp_fixed_frac_bits();
  double k = ldexp(1.0, -f) / div;
  for (size_t i = 0; i < count; i++) {
    uint64_t s = 0;
    for (int m = 0; m < resihp_comm_size(c); m++) {
      float x = contribution(resihp_comm_member(c, m), i, seed);
      double v = dtype == RESIHP_BFLOAT16
                     ? resihp_bf16_to_float(resihp_bf16_from_float(x))
                     : x;
      s += (uint64_t)ref_fixed(v, f);
    }
    double w = (double)(int64_t)s * k;
    if (dtype == RESIHP_FLOAT64) {
      ((double *)out)[i] = w;
    } else if (dtype == RESIHP_FLOAT32) {
      ((float *)out)[i] = (float)w;
    } else {
      ((uint16_t *)out)[i] = ref_bf16(w);
    }
  }
}

static void input(resihp_comm_t *c, size_t count, int seed, int dtype,
                  void *buf) {
  int wr = resihp_comm_world_rank(c);
  for (size_t i = 0; i < count; i++) {
    float x = contribution(wr, i, seed);
    if (dtype == RESIHP_FLOAT64)
      ((double *)buf)[i] = x;
    else if (dtype == RESIHP_FLOAT32)
      ((float *)buf)[i] = x;
    else
      ((uint16_t *)buf)[i] = resihp_bf16_from_float(x);
  }
}

/* One deterministic all-reduce of count elements out of place (the input
 * must stay untouched), then in place, both checked bitwise. 0 or 1. */
static int one(resihp_comm_t *c, size_t count, int seed, int dtype, int op,
               int *rc_out) {
  size_t es = dsize(dtype);
  uint8_t *in = malloc(count * es + 1), *in0 = malloc(count * es + 1),
          *out = malloc(count * es + 1), *want = malloc(count * es + 1);
  input(c, count, seed, dtype, in);
  memcpy(in0, in, count * es);
  expected(c, count, seed, dtype,
           op == RESIHP_OP_AVG ? (double)resihp_comm_size(c) : 1.0, want);
  int rc = resihp_allreduce_to(c, in, out, count, (resihp_dtype_t)dtype,
                               (resihp_op_t)op);
  int bad =
      !rc && (memcmp(out, want, count * es) || memcmp(in, in0, count * es));
  /* In place too: the result goes through the communicator's own memory
   * until the outcome is known. */
  if (!rc && !bad) {
    rc = resihp_allreduce(c, in, count, (resihp_dtype_t)dtype, (resihp_op_t)op);
    bad = !rc && memcmp(in, want, count * es);
    if (rc && memcmp(in, in0, count * es)) {
      fprintf(stderr, "rank %d: a failed call changed the buffer\n",
              resihp_comm_world_rank(c));
      bad = 1;
    }
  }
  if (rc_out)
    *rc_out = rc;
  if (bad)
    fprintf(stderr, "rank %d: count %zu dtype %d op %d differs\n",
            resihp_comm_world_rank(c), count, dtype, op);
  else if (rc && !rc_out) {
    fprintf(stderr, "rank %d: count %zu: %s\n", resihp_comm_world_rank(c),
            count, resihp_strerror(rc));
    bad = 1;
  }
  free(in);
  free(in0);
  free(out);
  free(want);
  return bad;
}

static int rank_sums(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  if (make_comm(rank, n, SECRET, CHUNK, 1, &c))
    return 1;
  size_t counts[] = {0,
                     1,
                     (size_t)n - 1,
                     1000, /* the small path's (narrow when it fits) */
                     4097,
                     (size_t)n * 4096 * 3 + 13,
                     (size_t)n * 4096 * 9 + 1};
  unsigned long narrow0 = atomic_load(&resihp__ring_fixed_sent[1]),
                wide0 = atomic_load(&resihp__ring_fixed_sent[0]);
  for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
    for (int d = 0; d < 3; d++)
      for (int op = 0; op < 2; op++) {
        if (d && k < 5 && op)
          continue;
        if (one(c, counts[k], (int)k + d, dtypes[d], op, NULL))
          return 1;
      }
  /* Both wire forms were used. */
  if (atomic_load(&resihp__ring_fixed_sent[1]) == narrow0 ||
      atomic_load(&resihp__ring_fixed_sent[0]) == wide0) {
    fprintf(stderr, "rank %d: narrow %lu wide %lu chunks\n", rank,
            atomic_load(&resihp__ring_fixed_sent[1]) - narrow0,
            atomic_load(&resihp__ring_fixed_sent[0]) - wide0);
    return 1;
  }
  resihp_comm_destroy(c);
  return 0;
}

/* _i: ranks 2..5, then the transport (shm, TCP) and mac-data. */
START_TEST(deterministic_sums_exact) {
  int n = 2 + _i % 4;
  transport = (_i / 4) % 2 ? 1 : -1;
  mac_data = _i >= 8;
  detect_ms = CALM_DETECT_MS;
  int st[MAXN];
  run_group(n, rank_sums, NULL, st);
  expect_all_ok(n, st);
  close(rec_pipe[0]);
  transport = -1;
  mac_data = 0;
}
END_TEST

/* ---- a narrow contribution that cannot be right ------------------------- */

/* Rank 1 sends rank 0 a small-message contribution in the narrow form with
 * shift 33, over the real (authenticated) link, then waits for rank 0 to
 * go: rank 0's deterministic all-reduce must refuse it as RESIHP_EPROTO
 * and suspect rank 1, not add garbage. */
static int rank_bad_shift(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  if (make_comm(rank, n, SECRET, CHUNK, 1, &c))
    return 1;
  enum { COUNT = 64 };
  if (rank == 1) {
    const resihp__transport_ops_t *ops = c->tp->ops;
    int32_t bad[COUNT + 1] = {33};
    resihp__tag_t tag = {c->seq, RESIHP__STEP_SMALL, 0};
    int bp;
    if (ops->post_send_alt(c->tp, c->members[0], tag, bad, sizeof(bad)))
      return 1;
    while (!atomic_load(&c->failed) && ops->progress(c->tp, 100, &bp) >= 0)
      ; /* until rank 0 has gone (the monitor saw it) */
    return 0;
  }
  float x[COUNT];
  for (int i = 0; i < COUNT; i++)
    x[i] = (float)i;
  int rc = resihp_allreduce(c, x, COUNT, RESIHP_FLOAT32, RESIHP_OP_SUM);
  if (rc != RESIHP_EPROTO || !resihp__set_has(&c->dead, 1)) {
    fprintf(stderr, "rank 0: %s, rank 1 %ssuspected\n", resihp_strerror(rc),
            resihp__set_has(&c->dead, 1) ? "" : "not ");
    return 1;
  }
  for (int i = 0; i < COUNT; i++)
    if (x[i] != (float)i)
      return 1; /* the caller's buffer is untouched */
  return 0;
}

START_TEST(narrow_with_impossible_shift_refused) {
  int st[MAXN];
  detect_ms = CALM_DETECT_MS;
  run_group(2, rank_bad_shift, NULL, st);
  expect_all_ok(2, st);
  close(rec_pipe[0]);
}
END_TEST

/* ---- a rank killed mid-collective ---------------------------------------- */

static resihp_comm_t *victim_comm;
static int kill_step;

static void kill_hook(resihp_comm_t *c, int step, size_t chunk) {
  if (c == victim_comm && step == kill_step && chunk == 1)
    raise(SIGKILL);
}

#define KCOUNT (4096 * 4 * 8 + 5)

static int rank_killed(int rank, int n, void *arg) {
  int victim = *(int *)arg;
  resihp_comm_t *c;
  detect_ms = DETECT_MS;
  if (make_comm(rank, n, SECRET, CHUNK, 1, &c))
    return 1;
  if (rank == victim) {
    victim_comm = c;
    resihp__ring_test_hook = kill_hook;
  }
  int rc = 0, attempts = 0;
  double t0 = now_ms(), fail_ms = 0;
  for (;; attempts++) {
    if (one(c, KCOUNT, 5, RESIHP_FLOAT32, RESIHP_OP_SUM, &rc))
      return 1; /* a wrong result */
    if (!rc)
      break;
    if (rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT) {
      fprintf(stderr, "rank %d: %s, want EPEER or ETIMEDOUT\n", rank,
              resihp_strerror(rc));
      return 1;
    }
    fail_ms = now_ms() - t0;
    if (attempts > 2 || resihp_comm_shrink(c, NULL, 0, NULL, 0, NULL))
      return 1;
  }
  if (attempts != 1 || resihp_comm_size(c) != n - 1) {
    fprintf(stderr, "rank %d: %d retries, view of %d\n", rank, attempts,
            resihp_comm_size(c));
    return 1;
  }
  /* And the next one, on the shrunk view, is exact too. */
  if (one(c, KCOUNT, 6, RESIHP_FLOAT32, RESIHP_OP_AVG, NULL))
    return 1;
  put_record(c, attempts, fail_ms);
  resihp_comm_destroy(c);
  return 0;
}

/* _i: the victim and the step it dies in (reduce-scatter's first, whose
 * first chunk left made in the ring (send_fill), and second; all-gather),
 * over shm and TCP. */
START_TEST(deterministic_rank_killed) {
  int n = 3, victim = _i % 3;
  kill_step = (_i / 3) % 3; /* 2 = n - 1: all-gather */
  transport = _i >= 9 ? 1 : -1;
  int st[MAXN];
  run_group(n, rank_killed, &victim, st);
  for (int r = 0; r < n; r++)
    if (r == victim)
      ck_assert_msg(WIFSIGNALED(st[r]), "victim status %#x", st[r]);
    else
      ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0,
                    "rank %d status %#x", r, st[r]);
  struct record rec[MAXN];
  int nr = read_records(rec, MAXN);
  ck_assert_int_eq(nr, n - 1);
  for (int k = 0; k < nr; k++) {
    ck_assert(!(rec[k].members & (1ull << victim)));
    ck_assert(rec[k].epoch == rec[0].epoch && rec[k].members == rec[0].members);
  }
  transport = -1;
}
END_TEST

/* A double just above a bfloat16 tie rounds up, at every kernel level,
 * in the conversion (resihp_fixed_to_bf16) and in the ring's fused sum:
 * 2^32 + 2^24 + 4 at 32 fractional bits is 1 + 2^-8 + 2^-30, whose float
 * is the tie 1 + 2^-8 (0x3f80 by even), while the one rounding that
 * allreduce.h promises gives 0x3f81. Then values with random bits next to
 * ties of every binade of the int64 range. */
START_TEST(bf16_rounds_once) {
  int best = resihp__fixed_set_isa(99);
  enum { N = 37 }; /* vector bodies and a scalar tail */
  int64_t v[N];
  uint16_t got[N], zero[N];
  memset(zero, 0, sizeof zero);
  for (int level = 0; level <= best; level++) {
    ck_assert_int_eq(resihp__fixed_set_isa(level), level);
    for (int sign = 0; sign < 2; sign++) {
      int64_t x = (1ll << 32) + (1ll << 24) + 4;
      for (size_t i = 0; i < N; i++)
        v[i] = sign ? -x : x;
      uint16_t want = sign ? 0xbf81 : 0x3f81;
      resihp_fixed_to_bf16(got, v, N, 32, 1.0);
      for (size_t i = 0; i < N; i++)
        ck_assert_msg(got[i] == want, "level %d i %zu: 0x%04x, want 0x%04x",
                      level, i, got[i], want);
      ck_assert_int_eq(resihp__fixed_sum_to(got, zero, v, 0, N,
                                            RESIHP_BFLOAT16, 32, 1.0),
                       0);
      for (size_t i = 0; i < N; i++)
        ck_assert_msg(got[i] == want, "level %d i %zu: sum 0x%04x, want 0x%04x",
                      level, i, got[i], want);
    }
    for (int iter = 0; iter < 4000; iter++) {
      int f = (int)(next() % 63);
      for (size_t i = 0; i < N; i++) {
        /* a bf16 tie (8 significant bits then a 1) with a few random bits
         * further down, of either side, anywhere in the int64 range */
        int top = 9 + (int)(next() % 54);
        uint64_t m = (uint64_t)(next() | 1) & 0x1ff;
        int64_t t = (int64_t)((m | 0x101) << (top - 9));
        int64_t below = (int64_t)(next() % 16) - 8;
        v[i] = (next() % 2 ? -1 : 1) * (t + below);
      }
      resihp_fixed_to_bf16(got, v, N, f, 1.0);
      for (size_t i = 0; i < N; i++) {
        uint16_t want = ref_bf16((double)v[i] * ldexp(1.0, -f));
        ck_assert_msg(got[i] == want,
                      "level %d frac %d x %lld: 0x%04x, want 0x%04x", level, f,
                      (long long)v[i], got[i], want);
      }
    }
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("fixed_fast");
  TCase *tc = tcase_create("kernels");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, from_fixed_bitwise);
  tcase_add_test(tc, to_float_bitwise);
  tcase_add_test(tc, sum_to_bitwise);
  tcase_add_test(tc, narrow_and_widen);
  tcase_add_test(tc, bf16_rounds_once);
  suite_add_tcase(s, tc);
  tc = tcase_create("group");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, deterministic_sums_exact, 0, 12);
  tcase_add_loop_test(tc, deterministic_rank_killed, 0, 18);
  suite_add_tcase(s, tc);
  tc = tcase_create("refusal");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, narrow_with_impossible_shift_refused);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return run_suite(suite()); }
