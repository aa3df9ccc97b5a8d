/* SPDX-License-Identifier: BSD-3-Clause */
/* Device buffers without NCCL (device_staging.c, built with CUDA):
 * resihp_allreduce_device of a communicator with no NCCL communicator
 * attached goes through the host data plane; and the deterministic mode
 * over NCCL (device_fixed.c). */
#ifndef RESIHP_COLLECTIVES_DEVICE_STAGING_H
#define RESIHP_COLLECTIVES_DEVICE_STAGING_H

#include <resihp/allreduce.h>

#include <stddef.h>

struct resihp__staged;

/* Same contract as resihp_allreduce_device; cuda_stream is a
 * cudaStream_t. The pinned and device buffers it keeps hang off c. */
int resihp__allreduce_staged(resihp_comm_t *c, const void *sendbuf,
                             void *recvbuf, size_t count, resihp_dtype_t dtype,
                             resihp_op_t op, void *cuda_stream);
/* Free them (NULL is fine). */
void resihp__staged_free(struct resihp__staged *s);
/* Wait until the stream (a cudaStream_t) has done its work: 0, or
 * RESIHP_EIO when it failed or took longer than timeout_ms (logged). */
int resihp__device_wait(void *cuda_stream, int timeout_ms);

/* The deterministic mode over an attached NCCL communicator
 * (device_fixed.c, built with nvcc): the device buffers are converted to
 * int64 fixed point on the GPU, summed by NCCL, converted back. Same
 * contract as resihp_allreduce_device but the commit; RESIHP_ENOTSUP when
 * the library has no kernels. */
int resihp__allreduce_device_fixed(resihp_comm_t *c, const void *sendbuf,
                                   void *recvbuf, size_t count,
                                   resihp_dtype_t dtype, resihp_op_t op,
                                   void *cuda_stream);
void resihp__device_fixed_free(resihp_comm_t *c);

#endif
