/* SPDX-License-Identifier: BSD-3-Clause */
/* Deterministic fixed point on GPU buffers: the conversions of
 * fixed_point.c as CUDA kernels, bit for bit those of its scalar reference
 * (tests/gpu/test_fixed_point_gpu.c checks them).
 *
 * Built by nvcc into a fatbin that the library embeds as a byte array and
 * loads at first use through the runtime (fixed_point_gpu.c), so nothing
 * here is linked by the host toolchain and the kernels are found by their
 * extern "C" names.
 *
 * Why the bits match the CPU:
 *   - scale = 2^frac_bits and k = 2^-frac_bits / divisor are computed on
 *     the host by the same expressions as fixed_point.c and passed in;
 *   - every operation is one correctly rounded IEEE operation in round to
 *     nearest even (the intrinsics name the mode), with subnormals kept:
 *     the build never passes --use_fast_math or -ftz, and --fmad=false
 *     keeps any multiply from fusing with a later add;
 *   - cvt.rni.s64.f64 saturates and gives 0 for NaN, as the reference does;
 *     the selects below spell the reference out anyway, so the result does
 *     not rest on that reading of the PTX manual.
 *
 * Layout of every kernel: the host splits [0, n) into `head` elements
 * before the first vector whose every pointer is aligned for its vector
 * access (16 bytes of int64, as much of the float type), `nvec` vectors of
 * V elements, and the tail; head and tail go element by element
 * (byte by byte when a pointer is not even aligned for its element type,
 * `bytewise`). Both loops are grid-stride, so any grid size is correct. */
#include <stdint.h>

namespace {

constexpr int kFloat32 = 0, kBfloat16 = 1, kFloat64 = 2; /* allreduce.h */

__device__ __forceinline__ int64_t fixed_of(double v) {
  long long r = __double2ll_rn(v);
  r = v >= 9223372036854775808.0 ? INT64_MAX : r;
  r = v < -9223372036854775808.0 ? INT64_MIN : r;
  return v != v ? 0 : r;
}

__device__ __forceinline__ float bf16_to_float(uint32_t h) {
  return __uint_as_float(h << 16);
}

/* resihp__bf16_from_float of fixed_point.h. */
__device__ __forceinline__ uint32_t bf16_from_float(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return ((u >> 16) | 0x40) & 0xffffu;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}

/* resihp__bf16_from_double of fixed_point.h: one rounding, through a
 * float rounded to odd (toward zero, sticky bit set when inexact). */
__device__ __forceinline__ uint32_t bf16_from_double(double d) {
  float f = __double2float_rz(d);
  uint32_t u = __float_as_uint(f);
  if (d == d && (double)f != d)
    u |= 1u;
  return bf16_from_float(__uint_as_float(u));
}

/* Element access for head and tail: aligned, or byte by byte. */
template <typename T>
__device__ __forceinline__ T load(const void *p, size_t i, bool bytewise) {
  if (!bytewise)
    return static_cast<const T *>(p)[i];
  const unsigned char *b =
      static_cast<const unsigned char *>(p) + i * sizeof(T);
  unsigned long long u = 0;
  for (unsigned k = 0; k < sizeof(T); k++)
    u |= (unsigned long long)b[k] << (8 * k);
  T v;
  memcpy(&v, &u, sizeof(T)); /* little endian: the low bytes */
  return v;
}

template <typename T>
__device__ __forceinline__ void store(void *p, size_t i, T v, bool bytewise) {
  if (!bytewise) {
    static_cast<T *>(p)[i] = v;
    return;
  }
  unsigned long long u = 0;
  memcpy(&u, &v, sizeof(T));
  unsigned char *b = static_cast<unsigned char *>(p) + i * sizeof(T);
  for (unsigned k = 0; k < sizeof(T); k++)
    b[k] = (unsigned char)(u >> (8 * k));
}

__device__ __forceinline__ double load_src(const void *src, size_t i, int dtype,
                                           bool bytewise) {
  if (dtype == kFloat32)
    return (double)load<float>(src, i, bytewise);
  if (dtype == kFloat64)
    return load<double>(src, i, bytewise);
  return (double)bf16_to_float(load<uint16_t>(src, i, bytewise));
}

__device__ __forceinline__ void store_to(void *dst, size_t i, int dtype,
                                         double d, bool bytewise) {
  if (dtype == kFloat64)
    store<double>(dst, i, d, bytewise);
  else if (dtype == kFloat32)
    store<float>(dst, i, __double2float_rn(d), bytewise);
  else
    store<uint16_t>(dst, i, (uint16_t)bf16_from_double(d),
                    bytewise);
}

__device__ __forceinline__ double to_double(int64_t v, double k) {
  return __dmul_rn(__ll2double_rn(v), k);
}

__device__ __forceinline__ size_t thread_index() {
  return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ size_t thread_count() {
  return (size_t)gridDim.x * blockDim.x;
}

/* Index of the j-th element outside the vectors. */
__device__ __forceinline__ size_t scalar_index(size_t j, size_t head,
                                               size_t vec_elems) {
  return j < head ? j : j + vec_elems;
}

/* The two elements of one vector load, widened exactly. */
__device__ __forceinline__ double2 widen(float2 x) {
  return make_double2((double)x.x, (double)x.y);
}
__device__ __forceinline__ double2 widen(double2 x) {
  return x;
}
__device__ __forceinline__ double2 widen(uint32_t w) {
  /* two bf16, the first in the low half */
  return make_double2((double)bf16_to_float(w & 0xffffu),
                      (double)bf16_to_float(w >> 16));
}

/* dst[i] = fixed(src[i] * scale) for src of type Elem (dtype Kind), read
 * two at a time as a Pair. Each thread stores one 16-byte pair of int64
 * per vector, so that a warp's stores are contiguous: with four floats per
 * thread and two stores 16 bytes apart, this write-heavy kernel reached
 * 2.3 TB/s on H200 at 1 GiB instead of 3.85 (the copy: 4.2). */
template <typename Elem, typename Pair, int Kind>
__device__ __forceinline__ void
from_body(int64_t *__restrict__ dst, const void *__restrict__ src, size_t n,
          size_t head, size_t nvec, int bytewise, double scale) {
  const Pair *s2 =
      reinterpret_cast<const Pair *>(static_cast<const Elem *>(src) + head);
  longlong2 *d2 = reinterpret_cast<longlong2 *>(dst + head);
  for (size_t v = thread_index(); v < nvec; v += thread_count()) {
    double2 x = widen(s2[v]);
    d2[v] = make_longlong2(fixed_of(__dmul_rn(x.x, scale)),
                           fixed_of(__dmul_rn(x.y, scale)));
  }
  for (size_t j = thread_index(); j < n - 2 * nvec; j += thread_count()) {
    size_t i = scalar_index(j, head, 2 * nvec);
    store<int64_t>(dst, i,
                   fixed_of(__dmul_rn(load_src(src, i, Kind, bytewise), scale)),
                   bytewise);
  }
}

} // namespace

#define FROM_KERNEL(name, Elem, Pair, Kind)                                    \
  extern "C" __global__ void name(                                             \
      int64_t *__restrict__ dst, const void *__restrict__ src, size_t n,       \
      size_t head, size_t nvec, int bytewise, double scale) {                  \
    from_body<Elem, Pair, Kind>(dst, src, n, head, nvec, bytewise, scale);     \
  }
FROM_KERNEL(resihp_fixed_from_f32_kernel, float, float2, kFloat32)
FROM_KERNEL(resihp_fixed_from_f64_kernel, double, double2, kFloat64)
FROM_KERNEL(resihp_fixed_from_bf16_kernel, uint16_t, uint32_t, kBfloat16)

/* dst[i] = (double)src[i] * k rounded to the target type. */
extern "C" __global__ void
resihp_fixed_to_f32_kernel(void *__restrict__ dst,
                           const int64_t *__restrict__ src, size_t n,
                           size_t head, size_t nvec, int bytewise, double k) {
  const longlong2 *s2 = reinterpret_cast<const longlong2 *>(src + head);
  float4 *d4 = reinterpret_cast<float4 *>(static_cast<float *>(dst) + head);
  for (size_t v = thread_index(); v < nvec; v += thread_count()) {
    longlong2 a = s2[2 * v], b = s2[2 * v + 1];
    d4[v] = make_float4(__double2float_rn(to_double(a.x, k)),
                        __double2float_rn(to_double(a.y, k)),
                        __double2float_rn(to_double(b.x, k)),
                        __double2float_rn(to_double(b.y, k)));
  }
  for (size_t j = thread_index(); j < n - 4 * nvec; j += thread_count()) {
    size_t i = scalar_index(j, head, 4 * nvec);
    store_to(dst, i, kFloat32, to_double(load<int64_t>(src, i, bytewise), k),
             bytewise);
  }
}

extern "C" __global__ void
resihp_fixed_to_f64_kernel(void *__restrict__ dst,
                           const int64_t *__restrict__ src, size_t n,
                           size_t head, size_t nvec, int bytewise, double k) {
  const longlong2 *s2 = reinterpret_cast<const longlong2 *>(src + head);
  double2 *d2 = reinterpret_cast<double2 *>(static_cast<double *>(dst) + head);
  for (size_t v = thread_index(); v < nvec; v += thread_count()) {
    longlong2 a = s2[v];
    d2[v] = make_double2(to_double(a.x, k), to_double(a.y, k));
  }
  for (size_t j = thread_index(); j < n - 2 * nvec; j += thread_count()) {
    size_t i = scalar_index(j, head, 2 * nvec);
    store_to(dst, i, kFloat64, to_double(load<int64_t>(src, i, bytewise), k),
             bytewise);
  }
}

extern "C" __global__ void
resihp_fixed_to_bf16_kernel(void *__restrict__ dst,
                            const int64_t *__restrict__ src, size_t n,
                            size_t head, size_t nvec, int bytewise, double k) {
  const longlong2 *s2 = reinterpret_cast<const longlong2 *>(src + head);
  uint4 *d8 = reinterpret_cast<uint4 *>(static_cast<uint16_t *>(dst) + head);
  for (size_t v = thread_index(); v < nvec; v += thread_count()) {
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
      longlong2 a = s2[4 * v + q];
      w[q] = bf16_from_double(to_double(a.x, k)) |
             bf16_from_double(to_double(a.y, k)) << 16;
    }
    d8[v] = make_uint4(w[0], w[1], w[2], w[3]);
  }
  for (size_t j = thread_index(); j < n - 8 * nvec; j += thread_count()) {
    size_t i = scalar_index(j, head, 8 * nvec);
    store_to(dst, i, kBfloat16, to_double(load<int64_t>(src, i, bytewise), k),
             bytewise);
  }
}

/* dst[i] = a[i] + b[i], wrapping; dst may be a or b (each element is read
 * before it is written by the same thread), so no __restrict__. */
extern "C" __global__ void
resihp_fixed_add_kernel(int64_t *dst, const int64_t *a, const int64_t *b,
                        size_t n, size_t head, size_t nvec, int bytewise) {
  const longlong2 *a2 = reinterpret_cast<const longlong2 *>(a + head);
  const longlong2 *b2 = reinterpret_cast<const longlong2 *>(b + head);
  longlong2 *d2 = reinterpret_cast<longlong2 *>(dst + head);
  for (size_t v = thread_index(); v < nvec; v += thread_count()) {
    longlong2 x = a2[v], y = b2[v];
    d2[v] = make_longlong2(
        (long long)((unsigned long long)x.x + (unsigned long long)y.x),
        (long long)((unsigned long long)x.y + (unsigned long long)y.y));
  }
  for (size_t j = thread_index(); j < n - 2 * nvec; j += thread_count()) {
    size_t i = scalar_index(j, head, 2 * nvec);
    uint64_t s = (uint64_t)load<int64_t>(a, i, bytewise) +
                 (uint64_t)load<int64_t>(b, i, bytewise);
    store<int64_t>(dst, i, (int64_t)s, bytewise);
  }
}
