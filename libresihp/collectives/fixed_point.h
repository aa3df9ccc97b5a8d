/* SPDX-License-Identifier: BSD-3-Clause */
/* Deterministic fixed point, internal side (fixed_point.c): the public
 * resihp_fixed_* conversions of allreduce.h, with kernels for the vector
 * units of the machine chosen once at run time, and the pieces that the
 * ring fuses into the reduction and the narrow wire format.
 *
 * Every kernel gives the bits of the scalar reference (value = (int64)
 * round_half_even(x * 2^frac_bits) in the default rounding mode, NaN -> 0,
 * saturation at +-2^63; back: (double)v * k rounded to the target type):
 * tests/unit/test_fixed_fast.c compares every kernel with it. */
#ifndef RESIHP_COLLECTIVES_FIXED_POINT_H
#define RESIHP_COLLECTIVES_FIXED_POINT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* bfloat16 <-> float, inline for the kernels (the exported
 * resihp_bf16_* go through the PLT from inside the library): round to
 * nearest even, NaN kept quiet. */
static inline float resihp__bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t resihp__bf16_from_float(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* dst[i] = fixed(src[i]) (+ add[i], wrapping, when add is not NULL; add
 * may be dst). src_dtype: RESIHP_FLOAT32, RESIHP_FLOAT64 or
 * RESIHP_BFLOAT16. Pointers need no alignment. */
void resihp__fixed_from(int64_t *dst, const void *src, const int64_t *add,
                        size_t n, int src_dtype, int frac_bits);
/* dst[i] = src[i] as dst_dtype (float types), divided by divisor. */
void resihp__fixed_to(void *dst, const int64_t *src, size_t n, int dst_dtype,
                      int frac_bits, double divisor);

/* Narrow wire format: 1 when every src[i] fits in int32, and then dst[i]
 * holds them; 0 otherwise (dst then holds garbage). */
int resihp__fixed_narrow(int32_t *dst, const int64_t *src, size_t n);
/* dst[i] = src[i] sign-extended; dst may start where src starts (widening
 * in place: the narrow values at the beginning of a wide buffer). */
void resihp__fixed_widen(int64_t *dst, const int32_t *src, size_t n);

/* The deterministic ring (ring_allreduce.c): src, count elements of
 * src_dtype, is converted chunk by chunk as the ring first reads it; chunks
 * that fit in int32 travel in that form through narrow (count int32), or
 * all as int64 when narrow is NULL. work receives the int64 sums; staging
 * (one chunk) is required. Same contract as resihp__ring_allreduce. */
struct resihp_comm;
struct resihp__ring_fixed {
  const void *src;
  int src_dtype, frac_bits;
  int32_t *narrow;
};
int resihp__ring_allreduce_fixed(struct resihp_comm *c,
                                 const struct resihp__ring_fixed *fx,
                                 int64_t *work, void *staging, size_t count,
                                 int *bad_peer);
/* Chunks this process sent in deterministic mode: [0] as int64, [1] as
 * int32 (for tests: both forms occur). */
extern atomic_ulong resihp__ring_fixed_sent[2];

/* Kernel sets, for tests: 0 portable scalar (the reference), 1 AVX2, 2
 * AVX-512DQ. resihp__fixed_set_isa(level) uses the highest available
 * level <= level and returns it; -1 goes back to the automatic choice. */
int resihp__fixed_set_isa(int level);

#endif
