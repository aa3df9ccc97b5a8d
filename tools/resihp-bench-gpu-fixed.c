/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-bench-gpu-fixed: the deterministic-mode kernels on GPU buffers
 * (fixed_point_gpu.h) beside a device-to-device cudaMemcpy of the float32
 * input's size, the bound that HBM puts on any streaming kernel. For each
 * size of float32 input, each operation is timed alone with CUDA events,
 * after warm-up runs, and the median of REPS runs is kept:
 *
 *   from  float32 -> int64 fixed point   (4 + 8 bytes per element)
 *   to    int64 -> float32, divisor 3    (8 + 4)
 *   add   int64 + int64 -> int64         (8 + 8 + 8)
 *   copy  cudaMemcpy of the input        (4 + 4)
 *
 * GB/s counts bytes read plus bytes written (10^9 bytes per second); each
 * kernel's ratio is its GB/s over the copy's at the same size.
 *
 * usage: resihp-bench-gpu-fixed [REPS [MAX_BYTES]] (default 11, 1 GiB;
 * sizes 1 MiB, 4 MiB, ... up to MAX_BYTES of float32 input). Exits 77
 * without a CUDA device. */
#include "config.h"

#include <resihp.h>

#include "../libresihp/collectives/fixed_point_gpu.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OP_FROM, OP_TO, OP_ADD, OP_COPY, NOPS };
enum { WARMUP = 3, FRAC_BITS = 32 };

struct bench {
  float *src, *out;
  int64_t *fx, *fy, *sum;
  size_t n;
  cudaStream_t stream;
};

static int run_op(struct bench *b, int op) {
  switch (op) {
  case OP_FROM:
    return resihp__fixed_from_device(b->fx, b->src, b->n, RESIHP_FLOAT32,
                                     FRAC_BITS, b->stream);
  case OP_TO:
    return resihp__fixed_to_device(b->out, b->fx, b->n, RESIHP_FLOAT32,
                                   FRAC_BITS, 3.0, b->stream);
  case OP_ADD:
    return resihp__fixed_add_device(b->sum, b->fx, b->fy, b->n, b->stream);
  default:
    return cudaMemcpyAsync(b->out, b->src, 4 * b->n, cudaMemcpyDeviceToDevice,
                           b->stream) == cudaSuccess
               ? 0
               : RESIHP_EIO;
  }
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Median milliseconds of reps timed runs of op, or a negative value. */
static float time_op(struct bench *b, int op, int reps, cudaEvent_t ev[2],
                     float *ms) {
  for (int i = 0; i < WARMUP; i++)
    if (run_op(b, op))
      return -1;
  for (int i = 0; i < reps; i++) {
    if (cudaEventRecord(ev[0], b->stream) != cudaSuccess || run_op(b, op) ||
        cudaEventRecord(ev[1], b->stream) != cudaSuccess ||
        cudaEventSynchronize(ev[1]) != cudaSuccess ||
        cudaEventElapsedTime(&ms[i], ev[0], ev[1]) != cudaSuccess)
      return -1;
  }
  qsort(ms, (size_t)reps, sizeof *ms, cmp_float);
  return reps % 2 ? ms[reps / 2] : (ms[reps / 2 - 1] + ms[reps / 2]) / 2;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 11;
  long long max = argc > 2 ? atoll(argv[2]) : 1LL << 30;
  if (reps < 10 || max < (1 << 20)) {
    fprintf(stderr, "usage: %s [REPS >= 10 [MAX_BYTES >= 1048576]]\n", argv[0]);
    return 2;
  }
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device (%s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 77;
  }
  struct cudaDeviceProp prop;
  memset(&prop, 0, sizeof prop);
  cudaGetDeviceProperties(&prop, 0);

  /* Input: gradient-like floats, so that from does the work of real data
   * (no zeros, every value needs rounding). */
  size_t nmax = (size_t)max / 4;
  float *h = malloc(4 * nmax);
  if (!h) {
    fprintf(stderr, "out of host memory\n");
    return 1;
  }
  uint32_t r = 2463534242u;
  for (size_t i = 0; i < nmax; i++) {
    r ^= r << 13, r ^= r >> 17, r ^= r << 5;
    h[i] = ((float)(r >> 8) - 8388608.0f) * 0x1p-30f;
  }
  struct bench b = {.n = nmax};
  cudaEvent_t ev[2];
  if (cudaMalloc((void **)&b.src, 4 * nmax) != cudaSuccess ||
      cudaMalloc((void **)&b.out, 4 * nmax) != cudaSuccess ||
      cudaMalloc((void **)&b.fx, 8 * nmax) != cudaSuccess ||
      cudaMalloc((void **)&b.fy, 8 * nmax) != cudaSuccess ||
      cudaMalloc((void **)&b.sum, 8 * nmax) != cudaSuccess ||
      cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking) !=
          cudaSuccess ||
      cudaEventCreate(&ev[0]) != cudaSuccess ||
      cudaEventCreate(&ev[1]) != cudaSuccess ||
      cudaMemcpy(b.src, h, 4 * nmax, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess) {
    fprintf(stderr,
            "CUDA setup failed (%lld bytes of input need %lld of "
            "device memory): %s\n",
            max, 8 * max, cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  free(h);
  /* A second fixed-point operand for add: the first one, converted. */
  if (resihp__fixed_from_device(b.fy, b.src, nmax, RESIHP_FLOAT32, FRAC_BITS,
                                b.stream))
    return 1;

  float *ms = malloc((size_t)reps * sizeof *ms);
  if (!ms)
    return 1;
  static const double bytes_per_elem[NOPS] = {12, 12, 24, 8};
  printf("# resihp-bench-gpu-fixed: %s (sm_%d%d), float32 input, frac_bits "
         "%d, median of %d runs after %d warm-up\n"
         "# GB/s = (bytes read + bytes written) / time; ratio = kernel GB/s "
         "/ copy GB/s\n",
         prop.name, prop.major, prop.minor, FRAC_BITS, reps, WARMUP);
  printf("%12s %10s %6s %10s %6s %10s %6s %10s\n", "input_bytes", "from_GB/s",
         "ratio", "to_GB/s", "ratio", "add_GB/s", "ratio", "copy_GB/s");
  for (long long bytes = 1 << 20; bytes <= max; bytes *= 4) {
    b.n = (size_t)bytes / 4;
    double gbps[NOPS];
    for (int op = 0; op < NOPS; op++) {
      float t = time_op(&b, op, reps, ev, ms);
      if (t < 0) {
        fprintf(stderr, "operation %d at %lld bytes failed: %s\n", op, bytes,
                cudaGetErrorString(cudaGetLastError()));
        return 1;
      }
      gbps[op] = bytes_per_elem[op] * (double)b.n / ((double)t * 1e-3) / 1e9;
    }
    printf("%12lld %10.1f %6.3f %10.1f %6.3f %10.1f %6.3f %10.1f\n", bytes,
           gbps[OP_FROM], gbps[OP_FROM] / gbps[OP_COPY], gbps[OP_TO],
           gbps[OP_TO] / gbps[OP_COPY], gbps[OP_ADD],
           gbps[OP_ADD] / gbps[OP_COPY], gbps[OP_COPY]);
    fflush(stdout);
  }
  free(ms);
  cudaEventDestroy(ev[0]);
  cudaEventDestroy(ev[1]);
  cudaStreamDestroy(b.stream);
  cudaFree(b.src);
  cudaFree(b.out);
  cudaFree(b.fx);
  cudaFree(b.fy);
  cudaFree(b.sum);
  return 0;
}
