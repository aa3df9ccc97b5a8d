/* SPDX-License-Identifier: BSD-3-Clause */
/* Deterministic fixed point on GPU buffers (fixed_point_gpu.c, kernels in
 * fixed_point_kernels.cu): resihp__fixed_from and resihp__fixed_to of
 * fixed_point.h, and the int64 sum, bit for bit those of the CPU scalar
 * reference. Built only when configure found nvcc
 * (RESIHP_HAVE_CUDA_KERNELS).
 *
 * Pointers are device memory of the caller's current CUDA device (or
 * memory it can reach); they need no alignment. The work is only enqueued
 * on cuda_stream (a cudaStream_t; NULL is the legacy default stream): the
 * results are there once the stream has reached that point, and an error
 * while the kernel runs shows at the caller's next synchronisation, not
 * here. Apart from resihp__fixed_add_device, dst must not overlap the
 * sources.
 *
 * Each returns 0, or a negative RESIHP_E* code having logged why:
 * RESIHP_EINVAL (unknown dtype), RESIHP_ENOTSUP (no CUDA driver or device,
 * or a GPU older than sm_80 for which the library carries no code),
 * RESIHP_EIO (another CUDA error, e.g. a host pointer). The kernels are
 * loaded once, at the first call of any of them, from any thread. */
#ifndef RESIHP_COLLECTIVES_FIXED_POINT_GPU_H
#define RESIHP_COLLECTIVES_FIXED_POINT_GPU_H

#include <stddef.h>
#include <stdint.h>

/* dst[i] = fixed(src[i]); src_dtype: RESIHP_FLOAT32, RESIHP_FLOAT64 or
 * RESIHP_BFLOAT16. */
int resihp__fixed_from_device(int64_t *dst, const void *src, size_t n,
                              int src_dtype, int frac_bits, void *cuda_stream);
/* dst[i] = src[i] as dst_dtype (a float type), divided by divisor. */
int resihp__fixed_to_device(void *dst, const int64_t *src, size_t n,
                            int dst_dtype, int frac_bits, double divisor,
                            void *cuda_stream);
/* dst[i] = a[i] + b[i], wrapping; dst may be a or b. */
int resihp__fixed_add_device(int64_t *dst, const int64_t *a, const int64_t *b,
                             size_t n, void *cuda_stream);

/* The kernels' fatbin, generated at build time from fixed_point_kernels.cu
 * (libresihp/collectives/local.mk). */
extern const unsigned long long resihp__fixed_point_fatbin[];

#endif
