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

/* double -> bfloat16 bits with ONE rounding (to nearest even), as
 * allreduce.h promises: (float)d first would round twice, and a double
 * just above a bf16 tie (1 + 2^-8 + 2^-30) would land on the tie and go
 * to even, 1 ulp off. So d goes to float rounded to odd (toward zero,
 * then the lowest bit set when anything was cut): a float keeps 16 bits
 * more than a bf16, and rounding to odd first, then to nearest even with
 * at least 2 bits less, equals rounding once. The vector kernels
 * (bf16_of_double4 in fixed_point.c) and the CUDA kernel do the same. */
static inline uint16_t resihp__bf16_from_double(double d) {
  float f = (float)d;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (d == d) { /* NaN: resihp__bf16_from_float quiets it */
    double back = f, ad = d < 0 ? -d : d, ab = back < 0 ? -back : back;
    if (ab > ad)
      u -= 1; /* rounded away from zero (inf included): one float back */
    if (back != d)
      u |= 1; /* sticky */
  }
  memcpy(&f, &u, 4);
  return resihp__bf16_from_float(f);
}

/* dst[i] = fixed(src[i]) (+ add[i], wrapping, when add is not NULL; add
 * may be dst). src_dtype: RESIHP_FLOAT32, RESIHP_FLOAT64 or
 * RESIHP_BFLOAT16. Pointers need no alignment. */
void resihp__fixed_from(int64_t *dst, const void *src, const int64_t *add,
                        size_t n, int src_dtype, int frac_bits);
/* The same, and stats of the results for resihp__fixed_narrow
 * accumulated into stats (start with {0, 0}): the ring converts and
 * learns whether the chunk fits the narrow form in one pass. */
void resihp__fixed_from_stats(int64_t *dst, const void *src, const int64_t *add,
                              size_t n, int src_dtype, int frac_bits,
                              uint64_t stats[2]);
/* dst[i] = src[i] as dst_dtype (float types), divided by divisor. */
void resihp__fixed_to(void *dst, const int64_t *src, size_t n, int dst_dtype,
                      int frac_bits, double divisor);

/* Narrow wire form of n values: dst[0] = t, dst[1 + i] = src[i] >> t as
 * int32, where 2^t (t <= 32) divides every value. Exact, so only taken
 * when every src[i] >> t fits in int32: then 1 (dst holds n + 1 int32),
 * else 0 (dst then holds garbage). stats: those of src from
 * resihp__fixed_from_stats, or NULL (then read here). The shift lets chunks of
 * larger values travel narrow too: a float has 24 significant bits, so values
 * of similar magnitude share their low zero bits. */
int resihp__fixed_narrow(int32_t *dst, const int64_t *src, size_t n,
                         const uint64_t stats[2]);
/* dst[i] = fixed(src[i]) + partial[i] back in src_dtype, divided by
 * divisor: resihp__fixed_from with add, then resihp__fixed_to, bit for bit,
 * in one pass and without the sums in memory. partial: n int64, or a
 * narrow form when narrow is set (then -1 for an impossible shift, as
 * resihp__fixed_widen). */
int resihp__fixed_sum_to(void *dst, const void *src, const void *partial,
                         int narrow, size_t n, int src_dtype, int frac_bits,
                         double divisor);
/* resihp__fixed_sum_to over n values of a partial sum that arrives in
 * pieces, its form known: part holds n int32 of a narrow form whose shift
 * is t, or n int64 when t < 0 (the deterministic ring sums each piece of
 * a frame as it arrives from the transport). */
void resihp__fixed_sum_to_span(void *dst, const void *src, const void *part,
                               int t, size_t n, int src_dtype, int frac_bits,
                               double divisor);
/* The shift of a narrow form (its first int32), or -1 when impossible. */
int resihp__fixed_shift(const void *narrow);
/* The narrow form with shift 0 straight from n values of src_dtype (the
 * deterministic ring's first sends, without int64 in between): 1 when
 * every resihp__fixed_from value fits in int32 (dst then holds n + 1
 * int32), else 0 (dst holds garbage; resihp__fixed_narrow may still find a
 * shift). */
int resihp__fixed_from_narrow(int32_t *dst, const void *src, size_t n,
                              int src_dtype, int frac_bits);
/* resihp__fixed_from_narrow of fixed(src[i]) + partial[i] (partial as in
 * resihp__fixed_sum_to): a partial sum sent on narrow without int64 in
 * between. 1, 0 when a value does not fit (dst holds garbage), or -1 for
 * an impossible shift of a narrow partial. */
int resihp__fixed_add_narrow(int32_t *dst, const void *src, const void *partial,
                             int narrow, size_t n, int src_dtype,
                             int frac_bits);
/* Back: dst[i] = src[1 + i] << src[0]; dst may start where src starts
 * (widening in place: the narrow form at the beginning of a wide buffer).
 * 0, or -1 when the shift is out of range (a peer's garbage). */
int resihp__fixed_widen(int64_t *dst, const int32_t *src, size_t n);

/* The deterministic ring (ring_allreduce.c): src, count elements of
 * src_dtype, is converted chunk by chunk as the ring first reads it, and
 * reduce-scatter adds int64 fixed point; chunks that fit travel in the
 * narrow form (resihp__fixed_narrow) through narrow
 * (resihp__ring_fixed_narrow_len int32), or all as int64 when narrow is
 * NULL. The owner of a reduced segment converts it back (divided by
 * divisor) into out, count elements of src_dtype, and all-gather moves those
 * final values, so no rank converts more than its own segment. work holds
 * int64 partial sums; staging (two chunks) is required. Same contract as
 * resihp__ring_allreduce. */
struct resihp_comm;
struct resihp__ring_fixed {
  const void *src;
  int src_dtype, frac_bits;
  int32_t *narrow;
  void *out;
  double divisor;
};
int resihp__ring_allreduce_fixed(struct resihp_comm *c,
                                 const struct resihp__ring_fixed *fx,
                                 int64_t *work, void *staging, size_t count,
                                 int *bad_peer);
/* The same with phases as resihp__ring_phase (comm_internal.h): with
 * RESIHP__RING_RS alone, this rank's segment (resihp_block) is the only
 * one converted back to fx->out, at its offset in the full layout. */
int resihp__ring_fixed_phases(struct resihp_comm *c,
                              const struct resihp__ring_fixed *fx,
                              int64_t *work, void *staging, size_t count,
                              int phases, int *bad_peer);
/* A narrow form with an impossible shift came from peer (what: "chunk",
 * "contribution"): logged, *bad_peer = peer, RESIHP_EPROTO. */
int resihp__narrow_refused(int peer, const char *what, int *bad_peer);
/* The int32 capacity that fx->narrow needs for count elements on c. */
size_t resihp__ring_fixed_narrow_len(struct resihp_comm *c, size_t count);
/* Chunks this process sent in deterministic mode: [0] as int64, [1] as
 * int32 (for tests: both forms occur). */
extern atomic_ulong resihp__ring_fixed_sent[2];

/* Kernel sets, for tests: 0 portable scalar (the reference), 1 AVX2, 2
 * AVX-512DQ. resihp__fixed_set_isa(level) uses the highest available
 * level <= level and returns it; -1 goes back to the automatic choice. */
int resihp__fixed_set_isa(int level);

#endif
