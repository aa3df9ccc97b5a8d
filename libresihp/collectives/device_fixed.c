/* SPDX-License-Identifier: BSD-3-Clause */
/* The deterministic mode over NCCL: float device buffers become int64
 * fixed point on the GPU (fixed_point_kernels.cu), NCCL sums the int64
 * exactly, and every rank converts the sums back, also on the GPU. Integer sums
 * do not depend on NCCL's algorithm, its channel count or the view after a
 * shrink, so the result is bit for bit what the host path gives for the same
 * inputs. Built with CUDA, NCCL and nvcc. */
#include "config.h"

#include "comm_internal.h"
#include "device_staging.h"
#include "fixed_point_gpu.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <cuda_runtime_api.h>

static int run(resihp_comm_t *c, const void *sendbuf, void *recvbuf,
               size_t count, resihp_dtype_t dtype, resihp_op_t op,
               void *cuda_stream) {
  size_t bytes = 2 * count * sizeof(int64_t);
  if (c->fixed_dev_cap < bytes) {
    cudaFree(c->fixed_dev);
    c->fixed_dev = NULL;
    c->fixed_dev_cap = 0;
    if (cudaMalloc(&c->fixed_dev, bytes) != cudaSuccess) {
      cudaGetLastError();
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "deterministic device all-reduce: cannot allocate %zu MiB "
                 "of device memory for the int64 sums",
                 bytes >> 20);
      return RESIHP_ENOMEM;
    }
    c->fixed_dev_cap = bytes;
  }
  int64_t *in = c->fixed_dev, *sum = in + count;
  double div = op == RESIHP_OP_AVG ? (double)c->nmembers : 1.0;
  int rc = resihp__fixed_from_device(in, sendbuf, count, (int)dtype,
                                     c->frac_bits, cuda_stream);
  if (!rc)
    rc = c->gpu->ops->allreduce(c->gpu, in, sum, count, RESIHP_FIXED64,
                                RESIHP_OP_SUM, cuda_stream, &c->failed,
                                10 * c->detect_ms);
  /* recvbuf is written only once the sums are complete: a failure leaves
   * it as it was, in place too. The caller's commit decides the rest. */
  if (!rc)
    rc = resihp__fixed_to_device(recvbuf, sum, count, (int)dtype, c->frac_bits,
                                 div, cuda_stream);
  return rc ? rc : resihp__device_wait(cuda_stream, c->op_ms);
}

int resihp__allreduce_device_fixed(resihp_comm_t *c, const void *sendbuf,
                                   void *recvbuf, size_t count,
                                   resihp_dtype_t dtype, resihp_op_t op,
                                   void *cuda_stream) {
  /* The sums and the kernels belong on NCCL's device, whichever device
   * the calling thread has current. */
  int prev = -1;
  cudaGetDevice(&prev);
  if (prev != c->gpu_device && cudaSetDevice(c->gpu_device) != cudaSuccess) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "deterministic device all-reduce: cannot use CUDA device %d",
               c->gpu_device);
    return RESIHP_EIO;
  }
  int rc = run(c, sendbuf, recvbuf, count, dtype, op, cuda_stream);
  if (prev >= 0 && prev != c->gpu_device)
    cudaSetDevice(prev);
  return rc;
}

void resihp__device_fixed_free(resihp_comm_t *c) {
  cudaFree(c->fixed_dev);
  c->fixed_dev = NULL;
  c->fixed_dev_cap = 0;
}
