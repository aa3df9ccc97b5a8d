/* SPDX-License-Identifier: BSD-3-Clause */
/* Deterministic fixed point on GPU buffers (fixed_point_gpu.h): loads the
 * kernels of fixed_point_kernels.cu and launches them.
 *
 * The kernels come as a fatbin embedded in the library (sm_80 and sm_90
 * code, compute_90 PTX for later GPUs) and are loaded with the runtime's
 * library API (cudaLibraryLoadData, cudaLibraryGetKernel): the library then
 * needs nothing but libcudart, which it links already, no nvrtc and no
 * driver-API library at link time, and this file is plain C built by the
 * usual compiler. A cudaLibrary_t is independent of contexts, so the
 * kernel handles serve every device and thread once loaded.
 *
 * Each call splits its elements (fixed_point_kernels.cu): a head up to the
 * first element where every pointer is aligned for the kernel's vector
 * access (a 16-byte pair of int64, and the float values that go with it),
 * whole vectors, and a tail; when the pointers disagree about that
 * alignment everything goes element by element, and byte by byte when a
 * pointer is not aligned for its own element type. */
#include "config.h"

#include "fixed_point_gpu.h"

#include <resihp/allreduce.h>
#include <resihp/error.h>
#include <resihp/log.h>

#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>

enum {
  K_FROM_F32,
  K_FROM_F64,
  K_FROM_BF16,
  K_TO_F32,
  K_TO_F64,
  K_TO_BF16,
  K_ADD,
  K_COUNT
};

static const char *const kernel_names[K_COUNT] = {
    [K_FROM_F32] = "resihp_fixed_from_f32_kernel",
    [K_FROM_F64] = "resihp_fixed_from_f64_kernel",
    [K_FROM_BF16] = "resihp_fixed_from_bf16_kernel",
    [K_TO_F32] = "resihp_fixed_to_f32_kernel",
    [K_TO_F64] = "resihp_fixed_to_f64_kernel",
    [K_TO_BF16] = "resihp_fixed_to_bf16_kernel",
    [K_ADD] = "resihp_fixed_add_kernel",
};

/* Loaded once; never unloaded, since work may still be queued on a
 * caller's stream when the process exits and the runtime tears itself
 * down then anyway. */
static struct {
  pthread_once_t once;
  int rc; /* 0, or why the kernels are unavailable */
  cudaLibrary_t lib;
  cudaKernel_t kernel[K_COUNT];
} gpu = {.once = PTHREAD_ONCE_INIT};

enum { THREADS = 256, BLOCKS_PER_SM = 8, VEC_BYTES = 16 };

/* Errors that no retry or other pointer fixes: this machine cannot run
 * the kernels at all. */
static int unsupported(cudaError_t e) {
  return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
         e == cudaErrorNoKernelImageForDevice ||
         e == cudaErrorUnsupportedPtxVersion ||
         e == cudaErrorSystemDriverMismatch || e == cudaErrorStubLibrary ||
         e == cudaErrorCallRequiresNewerDriver ||
         e == cudaErrorDevicesUnavailable;
}

static void load(void) {
  cudaError_t e = cudaLibraryLoadData(&gpu.lib, resihp__fixed_point_fatbin,
                                      NULL, NULL, 0, NULL, NULL, 0);
  if (e != cudaSuccess) {
    gpu.rc = unsupported(e) ? RESIHP_ENOTSUP : RESIHP_EIO;
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "deterministic mode on GPU buffers: cannot load the CUDA "
               "kernels (%s: %s); check that a GPU is visible "
               "(nvidia-smi, CUDA_VISIBLE_DEVICES) and that the driver "
               "supports the CUDA runtime this library was built with (%d.%d), "
               "or reduce host buffers instead",
               cudaGetErrorName(e), cudaGetErrorString(e),
               CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    return;
  }
  for (int i = 0; i < K_COUNT; i++) {
    e = cudaLibraryGetKernel(&gpu.kernel[i], gpu.lib, kernel_names[i]);
    if (e != cudaSuccess) {
      gpu.rc = RESIHP_EIO;
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "deterministic mode on GPU buffers: kernel %s missing from "
                 "the embedded fatbin (%s); the library was built from "
                 "mismatched sources: rebuild it",
                 kernel_names[i], cudaGetErrorString(e));
      return;
    }
  }
}

static int ready(void) {
  pthread_once(&gpu.once, load);
  if (gpu.rc)
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "deterministic mode on GPU buffers is unavailable: %s (the "
               "first such error says why)",
               resihp_strerror(gpu.rc));
  return gpu.rc;
}

/* The split of n elements over pointers p[0..np) of element sizes size[]
 * into head, vectors of vec elements and tail. A vector access to p[j]
 * spans vec * size[j] bytes, at most 16 in one load or store, and needs
 * that alignment; p[0] has the largest, so the head aligns it and the
 * others either follow or never will. */
struct split {
  size_t head, nvec;
  int bytewise;
};

static size_t vec_align(size_t vec, size_t size) {
  return vec * size < VEC_BYTES ? vec * size : VEC_BYTES;
}

static struct split split_of(size_t n, size_t vec, const void *const p[],
                             const size_t size[], int np) {
  struct split s = {n, 0, 0};
  for (int j = 0; j < np; j++)
    if ((uintptr_t)p[j] % size[j])
      s.bytewise = 1;
  if (s.bytewise)
    return s;
  size_t a = vec_align(vec, size[0]);
  size_t head = (a - (uintptr_t)p[0] % a) % a / size[0];
  for (int j = 1; j < np; j++)
    if (((uintptr_t)p[j] + head * size[j]) % vec_align(vec, size[j]))
      return s;
  if (head >= n)
    return s;
  s.head = head;
  s.nvec = (n - head) / vec;
  return s;
}

static int launch(int which, const struct split *s, size_t n, size_t vec,
                  void **args, void *cuda_stream) {
  size_t work = s->nvec > n - vec * s->nvec ? s->nvec : n - vec * s->nvec;
  size_t blocks = (work + THREADS - 1) / THREADS, cap = 1024;
  int dev, sms;
  /* One full wave of resident blocks; the loops stride over the rest. */
  if (cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) ==
          cudaSuccess &&
      sms > 0)
    cap = (size_t)sms * BLOCKS_PER_SM;
  if (blocks > cap)
    blocks = cap;
  if (blocks == 0)
    blocks = 1;
  dim3 grid = {(unsigned)blocks, 1, 1}, block = {THREADS, 1, 1};
  cudaError_t e = cudaLaunchKernel((const void *)gpu.kernel[which], grid, block,
                                   args, 0, (cudaStream_t)cuda_stream);
  if (e == cudaSuccess)
    return 0;
  (void)cudaGetLastError(); /* leave no launch error for the caller's checks */
  if (unsupported(e)) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "deterministic mode on GPU buffers: %s cannot run on this "
               "GPU (%s: %s); the library carries code for sm_80 and newer "
               "and needs a driver for CUDA %d.%d: reduce host buffers instead",
               kernel_names[which], cudaGetErrorName(e), cudaGetErrorString(e),
               CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    return RESIHP_ENOTSUP;
  }
  resihp_log(RESIHP_LOG_ERROR, "allreduce",
             "deterministic mode on GPU buffers: launching %s failed (%s: "
             "%s); pass device memory of the current device and a stream of "
             "it (an earlier failed kernel also shows here)",
             kernel_names[which], cudaGetErrorName(e), cudaGetErrorString(e));
  return RESIHP_EIO;
}

static size_t dtype_size(int dtype) {
  return dtype == RESIHP_FLOAT64 ? 8 : dtype == RESIHP_FLOAT32 ? 4 : 2;
}

static int check_dtype(int dtype, const char *what) {
  if (dtype == RESIHP_FLOAT32 || dtype == RESIHP_FLOAT64 ||
      dtype == RESIHP_BFLOAT16)
    return 0;
  resihp_log(RESIHP_LOG_ERROR, "allreduce",
             "%s: dtype %d is not a float type; deterministic mode takes "
             "RESIHP_FLOAT32, RESIHP_FLOAT64 or RESIHP_BFLOAT16",
             what, dtype);
  return RESIHP_EINVAL;
}

int resihp__fixed_from_device(int64_t *dst, const void *src, size_t n,
                              int src_dtype, int frac_bits, void *cuda_stream) {
  int rc = check_dtype(src_dtype, "resihp__fixed_from_device");
  if (rc || n == 0 || (rc = ready()))
    return rc;
  int which = src_dtype == RESIHP_FLOAT32   ? K_FROM_F32
              : src_dtype == RESIHP_FLOAT64 ? K_FROM_F64
                                            : K_FROM_BF16;
  size_t vec = 2; /* one 16-byte pair of int64 per thread */
  const void *p[2] = {dst, src};
  const size_t size[2] = {8, dtype_size(src_dtype)};
  struct split s = split_of(n, vec, p, size, 2);
  double scale = ldexp(1.0, frac_bits); /* as fixed_point.c */
  void *args[] = {&dst, &src, &n, &s.head, &s.nvec, &s.bytewise, &scale};
  return launch(which, &s, n, vec, args, cuda_stream);
}

int resihp__fixed_to_device(void *dst, const int64_t *src, size_t n,
                            int dst_dtype, int frac_bits, double divisor,
                            void *cuda_stream) {
  int rc = check_dtype(dst_dtype, "resihp__fixed_to_device");
  if (rc || n == 0 || (rc = ready()))
    return rc;
  int which = dst_dtype == RESIHP_FLOAT32   ? K_TO_F32
              : dst_dtype == RESIHP_FLOAT64 ? K_TO_F64
                                            : K_TO_BF16;
  size_t vec = VEC_BYTES / dtype_size(dst_dtype);
  const void *p[2] = {dst, src};
  const size_t size[2] = {dtype_size(dst_dtype), 8};
  struct split s = split_of(n, vec, p, size, 2);
  double k = ldexp(1.0, -frac_bits) / divisor; /* as fixed_point.c */
  void *args[] = {&dst, &src, &n, &s.head, &s.nvec, &s.bytewise, &k};
  return launch(which, &s, n, vec, args, cuda_stream);
}

int resihp__fixed_add_device(int64_t *dst, const int64_t *a, const int64_t *b,
                             size_t n, void *cuda_stream) {
  if (n == 0)
    return 0;
  int rc = ready();
  if (rc)
    return rc;
  size_t vec = VEC_BYTES / 8;
  const void *p[3] = {dst, a, b};
  const size_t size[3] = {8, 8, 8};
  struct split s = split_of(n, vec, p, size, 3);
  void *args[] = {&dst, &a, &b, &n, &s.head, &s.nvec, &s.bytewise};
  return launch(K_ADD, &s, n, vec, args, cuda_stream);
}
