/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU test of the deterministic-mode kernels (fixed_point_gpu.h): every
 * result bit for bit against the CPU scalar reference
 * (resihp__fixed_set_isa(0)), on random data with the values that make
 * conversions differ - ties of the rounding, saturation and its edges,
 * NaN, infinities, subnormals, negative zero - for each float type,
 * several frac_bits and divisors, lengths from 0 to 1000003, and pointers
 * aligned, misaligned between each other, and not even aligned for their
 * element type. The bytes around every result are checked untouched.
 *
 * Exits 77 (skip) without a CUDA device, 1 on the first mismatch. */
#include "config.h"

#include <resihp.h>

#include "../../libresihp/collectives/fixed_point.h"
#include "../../libresihp/collectives/fixed_point_gpu.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NMAX 1000003
#define SLACK 64 /* bytes before and after each buffer for offsets, guards */
#define GUARD 16
#define POISON 0xa5

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static double of_bits(uint64_t b) {
  double d;
  memcpy(&d, &b, 8);
  return d;
}

/* A double that probes the conversion at frac_bits f. */
static double any_double(int f) {
  uint64_t r = next();
  double edge = ldexp(1.0, 63 - f), sign = (r >> 8) & 1 ? 1.0 : -1.0;
  switch (r % 16) {
  case 0: /* NaN of either sign, payload or not */
    return of_bits(0x7ff8000000000000ull | ((r >> 9) & 1) << 63 |
                   (next() & 0x7ffffffffffffull));
  case 1:
    return sign * INFINITY;
  case 2:
    return -0.0;
  case 3: /* k + 1/2 on the fixed-point grid: ties of the rounding */
    return ldexp((double)((int64_t)(r >> 20) - (1ll << 42)) + 0.5, -f);
  case 4: /* exactly 2^63 after scaling, and its neighbours */
    return sign * edge;
  case 5:
    return nextafter(sign * edge, 0.0);
  case 6:
    return nextafter(sign * edge, sign * INFINITY);
  case 7: /* subnormal double */
    return of_bits((r >> 12) | (r & 1) << 63);
  case 8: /* huge: saturates */
    return sign * ldexp(1.0 + (double)(r >> 40) / 16777216.0,
                        64 + (int)((r >> 16) % 900));
  case 9: /* ties of small values: 1/2, 3/2, ... at the grid's scale */
    return sign * ldexp((double)((r >> 40) % 64) + 0.5, -f);
  default: { /* any finite double of moderate exponent and mantissa */
    int e = (int)((r >> 52) % 160) - 80 - f / 2;
    return sign * ldexp((double)(next() >> 11), e - 53);
  }
  }
}

static size_t dsize(int dtype) {
  return dtype == RESIHP_FLOAT64 ? 8 : dtype == RESIHP_FLOAT32 ? 4 : 2;
}

static void fill_src(uint8_t *b, size_t n, int dtype, int f) {
  for (size_t i = 0; i < n; i++) {
    double d = any_double(f);
    if (dtype == RESIHP_FLOAT64) {
      memcpy(b + 8 * i, &d, 8);
    } else if (dtype == RESIHP_FLOAT32) {
      float x = (float)d;
      if (next() % 8 == 0) { /* any bit pattern: subnormals, NaN payloads */
        uint32_t u = (uint32_t)next();
        memcpy(&x, &u, 4);
      }
      memcpy(b + 4 * i, &x, 4);
    } else {
      uint16_t h =
          next() % 2 ? (uint16_t)next() : resihp__bf16_from_float((float)d);
      memcpy(b + 2 * i, &h, 2);
    }
  }
}

/* int64 fixed point to convert back: sums of converted values, the
 * extremes, values around 2^24 and 2^53 where the conversion to float or
 * double rounds (ties included), and any 64 bits. */
static void fill_fixed(uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t r = next();
    int64_t v;
    switch (r % 8) {
    case 0:
      v = (r >> 8) & 1 ? INT64_MAX : INT64_MIN;
      break;
    case 1: /* (2^53 + odd) and (2^24 + odd) << s: ties at some scale */
      v = (int64_t)(((1ull << ((r >> 8) & 1 ? 53 : 24)) + ((r >> 9) | 1) % 8)
                    << (r >> 16) % 8);
      v = (r >> 12) & 1 ? -v : v;
      break;
    case 2:
      v = (int64_t)(next() >> (r >> 8) % 64) * ((r >> 16) & 1 ? 1 : -1);
      break;
    case 3:
      v = (int64_t)((r >> 8) % 64) - 32;
      break;
    default:
      v = (int64_t)next();
    }
    memcpy(b + 8 * i, &v, 8);
  }
}

struct bufs {
  uint8_t *h_in, *h_out, *h_want, *d_in, *d_out, *d_b, *h_b;
  size_t cap;
  cudaStream_t stream;
};

static long checked;

static int cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return 1;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return 0;
}

/* Host to device on the test's stream: the stream is non-blocking, so a
 * copy on the legacy stream would not be ordered before the kernel. */
static int upload(struct bufs *B, uint8_t *dst, const uint8_t *src,
                  size_t len) {
  return cuda_ok(
      cudaMemcpyAsync(dst, src, len, cudaMemcpyHostToDevice, B->stream),
      "cudaMemcpy to device");
}

/* Output poisoned before a run; after it, the bytes of [off, off + len)
 * plus GUARD either side back in h_out. */
static int poison(struct bufs *B) {
  return cuda_ok(cudaMemsetAsync(B->d_out, POISON, B->cap, B->stream),
                 "cudaMemset");
}

static int fetch(struct bufs *B, size_t off, size_t len) {
  return cuda_ok(cudaMemcpyAsync(B->h_out + off - GUARD, B->d_out + off - GUARD,
                                 len + 2 * GUARD, cudaMemcpyDeviceToHost,
                                 B->stream),
                 "kernel or cudaMemcpy back") &&
         cuda_ok(cudaStreamSynchronize(B->stream), "kernel or cudaMemcpy back");
}

/* h_out against h_want on [off, off + len), POISON around it. */
static int compare(struct bufs *B, size_t off, size_t len, size_t esize,
                   const char *what) {
  for (size_t g = 0; g < GUARD; g++)
    if (B->h_out[off - 1 - g] != POISON || B->h_out[off + len + g] != POISON) {
      fprintf(stderr, "%s: wrote outside its %zu bytes\n", what, len);
      return 0;
    }
  if (memcmp(B->h_out + off, B->h_want + off, len) == 0) {
    checked += (long)(len / esize);
    return 1;
  }
  for (size_t i = 0; i < len / esize; i++)
    if (memcmp(B->h_out + off + i * esize, B->h_want + off + i * esize,
               esize)) {
      uint64_t got = 0, want = 0;
      memcpy(&got, B->h_out + off + i * esize, esize);
      memcpy(&want, B->h_want + off + i * esize, esize);
      fprintf(stderr, "%s: element %zu of %zu: got 0x%llx, want 0x%llx\n", what,
              i, len / esize, (unsigned long long)got,
              (unsigned long long)want);
      return 0;
    }
  return 0;
}

/* A kernel's return code, then its output at off (len bytes of esize-byte
 * elements, guards included) against the CPU reference. */
static int outcome(struct bufs *B, int rc, size_t off, size_t len, size_t esize,
                   const char *what) {
  if (rc) {
    fprintf(stderr, "%s: %s\n", what, resihp_strerror(rc));
    return 0;
  }
  return fetch(B, off, len) && compare(B, off, len, esize, what);
}

static const int dtypes[] = {RESIHP_FLOAT32, RESIHP_FLOAT64, RESIHP_BFLOAT16};
static const char *const dtype_names[] = {"float32", "bfloat16", "float64"};
static const int fracs[] = {0, 16, 32, 40};
static const size_t lengths[] = {0, 1, 7, 33, 4099, NMAX};
/* Byte offsets (input, output): aligned, vector-misaligned alike,
 * misaligned between each other, and not aligned for the element. */
static const size_t offsets[][2] = {{0, 0}, {8, 8},  {4, 0},
                                    {2, 8}, {0, 24}, {1, 3}};

static int test_from(struct bufs *B) {
  for (int d = 0; d < 3; d++)
    for (int fi = 0; fi < 4; fi++)
      for (int li = 0; li < 6; li++)
        for (int oi = 0; oi < 6; oi++) {
          int dt = dtypes[d], f = fracs[fi];
          size_t n = lengths[li], es = dsize(dt);
          size_t si = SLACK + offsets[oi][0], so = SLACK + offsets[oi][1];
          fill_src(B->h_in + si, n, dt, f);
          resihp__fixed_from((int64_t *)(void *)(B->h_want + so), B->h_in + si,
                             NULL, n, dt, f);
          char what[96];
          snprintf(what, sizeof what, "from %s frac %d n %zu offsets %zu/%zu",
                   dtype_names[dt], f, n, si - SLACK, so - SLACK);
          if (!upload(B, B->d_in + si, B->h_in + si, n * es) || !poison(B))
            return 0;
          int rc = resihp__fixed_from_device((int64_t *)(void *)(B->d_out + so),
                                             B->d_in + si, n, dt, f, B->stream);
          if (!outcome(B, rc, so, 8 * n, 8, what))
            return 0;
        }
  return 1;
}

static int test_to(struct bufs *B) {
  static const double divisors[] = {1.0, 3.0};
  for (int d = 0; d < 3; d++)
    for (int fi = 0; fi < 4; fi++)
      for (int vi = 0; vi < 2; vi++)
        for (int li = 0; li < 6; li++)
          for (int oi = 0; oi < 6; oi++) {
            int dt = dtypes[d], f = fracs[fi];
            double div = divisors[vi];
            size_t n = lengths[li], es = dsize(dt);
            size_t si = SLACK + offsets[oi][1], so = SLACK + offsets[oi][0];
            /* Half the time, values converted from floats: sums land
             * back near the inputs, ties of the back conversion too. */
            if (next() % 2) {
              fill_fixed(B->h_in + si, n);
            } else {
              fill_src(B->h_b, n, dt, f);
              resihp__fixed_from((int64_t *)(void *)(B->h_in + si), B->h_b,
                                 NULL, n, dt, f);
            }
            resihp__fixed_to(B->h_want + so,
                             (const int64_t *)(void *)(B->h_in + si), n, dt, f,
                             div);
            char what[96];
            snprintf(what, sizeof what,
                     "to %s frac %d divisor %g n %zu offsets %zu/%zu",
                     dtype_names[dt], f, div, n, si - SLACK, so - SLACK);
            if (!upload(B, B->d_in + si, B->h_in + si, 8 * n) || !poison(B))
              return 0;
            int rc = resihp__fixed_to_device(
                B->d_out + so, (const int64_t *)(void *)(B->d_in + si), n, dt,
                f, div, B->stream);
            if (!outcome(B, rc, so, es * n, es, what))
              return 0;
          }
  return 1;
}

/* a + b, out of place and in place (into a's buffer, then read back). */
static int test_add(struct bufs *B) {
  static const size_t add_offsets[][3] = {
      {0, 0, 0}, {8, 8, 8}, {0, 8, 0}, {8, 0, 24}, {1, 5, 3}};
  for (int li = 0; li < 6; li++)
    for (int oi = 0; oi < 5; oi++)
      for (int inplace = 0; inplace < 2; inplace++) {
        size_t n = lengths[li];
        size_t ao = SLACK + add_offsets[oi][0], bo = SLACK + add_offsets[oi][1];
        size_t so = inplace ? ao : SLACK + add_offsets[oi][2];
        fill_fixed(B->h_in + ao, n);
        fill_fixed(B->h_b + bo, n);
        for (size_t i = 0; i < n; i++) {
          uint64_t a, b;
          memcpy(&a, B->h_in + ao + 8 * i, 8);
          memcpy(&b, B->h_b + bo + 8 * i, 8);
          a += b;
          memcpy(B->h_want + so + 8 * i, &a, 8);
        }
        char what[96];
        snprintf(what, sizeof what, "add n %zu offsets %zu/%zu/%zu%s", n,
                 ao - SLACK, bo - SLACK, so - SLACK,
                 inplace ? " in place" : "");
        if (!poison(B) ||
            !upload(B, inplace ? B->d_out + ao : B->d_in + ao, B->h_in + ao,
                    8 * n) ||
            !upload(B, B->d_b + bo, B->h_b + bo, 8 * n))
          return 0;
        const uint8_t *a = inplace ? B->d_out + ao : B->d_in + ao;
        int rc = resihp__fixed_add_device(
            (int64_t *)(void *)(B->d_out + so),
            (const int64_t *)(const void *)a,
            (const int64_t *)(void *)(B->d_b + bo), n, B->stream);
        if (!outcome(B, rc, so, 8 * n, 8, what))
          return 0;
      }
  return 1;
}

int main(void) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device (%s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 77;
  }
  alarm(300); /* a GPU that hangs fails the test instead of holding it */
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  if (resihp__fixed_set_isa(0) != 0) {
    fprintf(stderr, "cannot select the scalar reference kernels\n");
    return 1;
  }
  /* Arguments refused before any CUDA call; nothing to do is no error. */
  if (resihp__fixed_from_device(NULL, NULL, 1, 99, 0, NULL) != RESIHP_EINVAL ||
      resihp__fixed_to_device(NULL, NULL, 1, 99, 0, 1.0, NULL) !=
          RESIHP_EINVAL ||
      resihp__fixed_from_device(NULL, NULL, 0, RESIHP_FLOAT32, 0, NULL) ||
      resihp__fixed_add_device(NULL, NULL, NULL, 0, NULL)) {
    fprintf(stderr, "argument checks: unexpected result\n");
    return 1;
  }

  struct bufs B = {.cap = 8 * (size_t)NMAX + 2 * SLACK};
  B.h_in = malloc(B.cap);
  B.h_out = malloc(B.cap);
  B.h_want = malloc(B.cap);
  B.h_b = malloc(B.cap);
  if (!B.h_in || !B.h_out || !B.h_want || !B.h_b) {
    fprintf(stderr, "out of host memory\n");
    return 1;
  }
  if (!cuda_ok(cudaMalloc((void **)&B.d_in, B.cap), "cudaMalloc") ||
      !cuda_ok(cudaMalloc((void **)&B.d_out, B.cap), "cudaMalloc") ||
      !cuda_ok(cudaMalloc((void **)&B.d_b, B.cap), "cudaMalloc") ||
      !cuda_ok(cudaStreamCreateWithFlags(&B.stream, cudaStreamNonBlocking),
               "cudaStreamCreate"))
    return 1;

  int ok = test_from(&B) && test_to(&B) && test_add(&B);
  printf("%s: %ld values checked bit for bit against the CPU scalar "
         "reference\n",
         ok ? "PASS" : "FAIL", checked);
  cudaStreamDestroy(B.stream);
  cudaFree(B.d_in);
  cudaFree(B.d_out);
  cudaFree(B.d_b);
  free(B.h_in);
  free(B.h_out);
  free(B.h_want);
  free(B.h_b);
  return ok ? 0 : 1;
}
