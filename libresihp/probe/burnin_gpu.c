/* SPDX-License-Identifier: BSD-3-Clause */
/* The GPU part of a spare's burn-in (burnin.h): on every visible CUDA
 * device a GEMM of fixed size, checked entry by entry on sampled rows, and
 * (with NCCL) a device all-reduce of the job's gradient size across the
 * node's devices. Built only when configure finds nvcc (the kernels are
 * burnin_kernels.cu, embedded as a fatbin and loaded through libcudart
 * alone, as fixed_point_gpu.c does); without a usable device it skips:
 * gpus = 0, no figure, no failure.
 *
 * Bounded: device work is waited for by polling an event until the
 * burn-in's deadline, never by a blocking synchronize, so a GPU that hangs
 * makes the burn-in fail "did not finish before the deadline" instead of
 * holding the check step. (What is left queued on a hung device is not
 * freed: cudaFree would wait for it; the spare agent exits right after.)
 * ncclCommInitAll over local devices is the one call without a bound of
 * its own; the check step's time limit (resihp-run) bounds it. */
#include "config.h"

#include "../transport/mesh.h"
#include "burnin.h"

#include <resihp/error.h>

#include <cuda_runtime_api.h>
#ifdef RESIHP_HAVE_NCCL
/* nccl.h declares a few functions as f() rather than f(void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern const unsigned long long resihp__burnin_fatbin[];

/* 2048^2 matrices (a multiple of the kernel's 16x16 tiles), 10 products:
 * 172 GFLOP, tens of milliseconds on a healthy GPU. */
#define GEMM_N 2048
#define GEMM_REPS 10
#define MAX_GPUS 64

enum { K_INIT, K_GEMM, K_FILL, K_COUNT };
static const char *const kernel_names[K_COUNT] = {
    [K_INIT] = "resihp_burnin_init_kernel",
    [K_GEMM] = "resihp_burnin_gemm_kernel",
    [K_FILL] = "resihp_burnin_fill_kernel",
};

static struct {
  pthread_once_t once;
  int rc; /* 0, or RESIHP_ENOTSUP: this machine runs no CUDA kernel */
  cudaLibrary_t lib;
  cudaKernel_t kernel[K_COUNT];
} gpu = {.once = PTHREAD_ONCE_INIT};

static void load(void) {
  if (cudaLibraryLoadData(&gpu.lib, resihp__burnin_fatbin, NULL, NULL, 0, NULL,
                          NULL, 0) != cudaSuccess) {
    gpu.rc = RESIHP_ENOTSUP;
    return;
  }
  for (int i = 0; i < K_COUNT; i++)
    if (cudaLibraryGetKernel(&gpu.kernel[i], gpu.lib, kernel_names[i]) !=
        cudaSuccess)
      gpu.rc = RESIHP_EIO;
}

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Until ev has happened or the deadline: 0, RESIHP_ETIMEDOUT or
 * RESIHP_EIO (the device reported an error). */
static int wait_event(cudaEvent_t ev, int64_t deadline_ms) {
  for (;;) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess)
      return 0;
    if (e != cudaErrorNotReady)
      return RESIHP_EIO;
    if (resihp__now_ms() > deadline_ms)
      return RESIHP_ETIMEDOUT;
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

static int launch(int k, unsigned gx, unsigned gy, unsigned bx, unsigned by,
                  void **args, cudaStream_t st) {
  dim3 grid = {gx, gy, 1}, block = {bx, by, 1};
  return cudaLaunchKernel((const void *)gpu.kernel[k], grid, block, args, 0,
                          st) == cudaSuccess
             ? 0
             : RESIHP_EIO;
}

/* What row i of a b must be, from the formula the init kernel used. */
static int row_ok(const float *c, int i, int n) {
  for (int j = 0; j < n; j++) {
    double s = 0;
    for (int k = 0; k < n; k++)
      s += (double)((i + k) % 7) * (double)((k * 3 + j) % 5 - 2);
    if ((double)c[j] != s)
      return 0;
  }
  return 1;
}

/* The GEMM on device d: its time in *us. */
static int gemm(int d, int64_t deadline_ms, long *us, char *why, size_t len) {
  int n = GEMM_N, rc = RESIHP_EIO;
  size_t nn = (size_t)n * (size_t)n;
  float *a = NULL, *host = NULL;
  cudaStream_t st = NULL;
  cudaEvent_t ev = NULL;
  if (cudaSetDevice(d) != cudaSuccess ||
      cudaMalloc((void **)&a, 3 * nn * sizeof(float)) != cudaSuccess ||
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess ||
      !(host = malloc((size_t)n * sizeof(float)))) {
    snprintf(why, len, "GPU %d: cannot set up the GEMM (no memory?)", d);
    goto out;
  }
  float *b = a + nn, *c = b + nn;
  void *init_args[] = {&a, &b, &n};
  void *gemm_args[] = {&a, &b, &c, &n};
  rc = launch(K_INIT, 1024, 1, 256, 1, init_args, st);
  if (!rc && cudaEventRecord(ev, st) != cudaSuccess)
    rc = RESIHP_EIO;
  if (!rc)
    rc = wait_event(ev, deadline_ms);
  int64_t t0 = now_us();
  for (int r = 0; !rc && r < GEMM_REPS; r++)
    rc = launch(K_GEMM, (unsigned)n / 16, (unsigned)n / 16, 16, 16, gemm_args,
                st);
  if (!rc && cudaEventRecord(ev, st) != cudaSuccess)
    rc = RESIHP_EIO;
  if (!rc)
    rc = wait_event(ev, deadline_ms);
  *us = (long)(now_us() - t0);
  /* the device is idle now: these copies are short */
  int rows[3] = {0, n / 2, n - 1};
  for (int i = 0; !rc && i < 3; i++) {
    if (cudaMemcpy(host, c + (size_t)rows[i] * (size_t)n,
                   (size_t)n * sizeof(float),
                   cudaMemcpyDeviceToHost) != cudaSuccess)
      rc = RESIHP_EIO;
    else if (!row_ok(host, rows[i], n)) {
      snprintf(why, len, "GPU %d: the GEMM gave a wrong product (row %d)", d,
               rows[i]);
      rc = RESIHP_EIO;
      goto out;
    }
  }
  if (rc == RESIHP_ETIMEDOUT)
    snprintf(why, len, "GPU %d: the GEMM did not finish before the deadline",
             d);
  else if (rc)
    snprintf(why, len, "GPU %d: the GEMM failed on the device", d);
out:
  free(host);
  if (rc != RESIHP_ETIMEDOUT) { /* else still queued: left (see above) */
    cudaFree(a);
    if (st)
      cudaStreamDestroy(st);
    if (ev)
      cudaEventDestroy(ev);
  }
  return rc;
}

#ifdef RESIHP_HAVE_NCCL
/* A sum over the nd devices with NCCL, bytes per device: its time in
 * *us. Every element must come out as 1 + 2 + ... + nd. */
static int device_allreduce(int nd, long bytes, int64_t deadline_ms, long *us,
                            char *why, size_t len) {
  ncclComm_t comm[MAX_GPUS] = {0};
  float *buf[MAX_GPUS] = {0};
  cudaStream_t st[MAX_GPUS] = {0};
  cudaEvent_t ev[MAX_GPUS] = {0};
  int devs[MAX_GPUS] = {0}, rc = 0;
  long n = bytes / (long)sizeof(float);
  for (int d = 0; d < nd; d++)
    devs[d] = d;
  if (ncclCommInitAll(comm, nd, devs) != ncclSuccess) {
    snprintf(why, len, "NCCL cannot join the node's %d GPU(s)", nd);
    return RESIHP_EIO;
  }
  for (int d = 0; !rc && d < nd; d++) {
    float v = (float)(d + 1);
    void *args[] = {&buf[d], &n, &v};
    if (cudaSetDevice(d) != cudaSuccess ||
        cudaMalloc((void **)&buf[d], (size_t)n * sizeof(float)) !=
            cudaSuccess ||
        cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking) !=
            cudaSuccess ||
        cudaEventCreateWithFlags(&ev[d], cudaEventDisableTiming) !=
            cudaSuccess ||
        launch(K_FILL, 1024, 1, 256, 1, args, st[d]) ||
        cudaStreamSynchronize(st[d]) != cudaSuccess) {
      snprintf(why, len, "GPU %d: cannot set up the device all-reduce", d);
      rc = RESIHP_EIO;
    }
  }
  int64_t t0 = now_us();
  if (!rc) {
    ncclGroupStart();
    for (int d = 0; d < nd; d++)
      if (ncclAllReduce(buf[d], buf[d], (size_t)n, ncclFloat, ncclSum, comm[d],
                        st[d]) != ncclSuccess)
        rc = RESIHP_EIO;
    if (ncclGroupEnd() != ncclSuccess)
      rc = RESIHP_EIO;
    for (int d = 0; !rc && d < nd; d++) {
      cudaSetDevice(d);
      if (cudaEventRecord(ev[d], st[d]) != cudaSuccess)
        rc = RESIHP_EIO;
      else
        rc = wait_event(ev[d], deadline_ms);
    }
    if (rc)
      snprintf(why, len,
               rc == RESIHP_ETIMEDOUT
                   ? "the device all-reduce did not finish before the deadline"
                   : "the device all-reduce failed");
  }
  *us = (long)(now_us() - t0);
  float want = (float)nd * (float)(nd + 1) / 2, got[2];
  for (int d = 0; !rc && d < nd; d++) {
    cudaSetDevice(d);
    if (cudaMemcpy(&got[0], buf[d], sizeof(float), cudaMemcpyDeviceToHost) !=
            cudaSuccess ||
        cudaMemcpy(&got[1], buf[d] + n - 1, sizeof(float),
                   cudaMemcpyDeviceToHost) != cudaSuccess ||
        got[0] != want || got[1] != want) {
      snprintf(why, len, "GPU %d: the device all-reduce gave a wrong sum", d);
      rc = RESIHP_EIO;
    }
  }
  for (int d = 0; d < nd; d++) {
    if (rc == RESIHP_ETIMEDOUT) {
      ncclCommAbort(comm[d]); /* the buffers stay: still in use */
      continue;
    }
    cudaSetDevice(d);
    cudaFree(buf[d]);
    if (st[d])
      cudaStreamDestroy(st[d]);
    if (ev[d])
      cudaEventDestroy(ev[d]);
    ncclCommDestroy(comm[d]);
  }
  return rc;
}
#endif

int resihp__burnin_gpu(long bytes, int64_t deadline_ms, resihp__burnin_t *out) {
  int nd = 0;
  /* no driver, no device, or none visible (CUDA_VISIBLE_DEVICES): a node
   * without GPUs, nothing to burn in */
  if (cudaGetDeviceCount(&nd) != cudaSuccess || nd <= 0)
    return 0;
  pthread_once(&gpu.once, load);
  if (gpu.rc == RESIHP_ENOTSUP)
    return 0; /* the kernels run on no device here: not judged */
  if (gpu.rc) {
    snprintf(out->why, sizeof(out->why),
             "the burn-in's GPU kernels are missing from the library");
    return gpu.rc;
  }
  if (nd > MAX_GPUS)
    nd = MAX_GPUS;
  out->gpus = nd;
  for (int d = 0; d < nd; d++) {
    long us = 0;
    int rc = gemm(d, deadline_ms, &us, out->why, sizeof(out->why));
    if (us > out->gpu_gemm_us)
      out->gpu_gemm_us = us; /* the slowest device is the node's pace */
    if (rc)
      return rc;
  }
#ifdef RESIHP_HAVE_NCCL
  return device_allreduce(nd, bytes, deadline_ms, &out->gpu_allreduce_us,
                          out->why, sizeof(out->why));
#else
  (void)bytes;
  return 0;
#endif
}
