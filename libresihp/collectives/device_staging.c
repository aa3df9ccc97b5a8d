/* SPDX-License-Identifier: BSD-3-Clause */
/* Device buffers through the host data plane, for ranks that have no NCCL
 * communicator: several ranks sharing one GPU (NCCL wants a device per
 * rank), or a library built without NCCL.
 *
 * Schedule: the buffer is cut into segments of SEG bytes. While the host
 * all-reduces segment k (resihp_allreduce_to, with its failure detection
 * and commit), the copy engines bring segment k+1 down into the other half
 * of a pinned double buffer and take segment k-1's result up, so PCIe
 * transfers hide behind the ring. Pinned memory is four segments whatever
 * the size: two in, two out.
 *
 * Failure semantics are those of the NCCL path: sendbuf is never written;
 * in place, results of several segments go to a private device buffer and
 * reach recvbuf only after the last segment committed, so a failure (a
 * peer killed mid-way) leaves the caller's buffer as it was; out of place,
 * recvbuf is only meaningful after success. Every wait on the GPU is bounded
 * (op_ms): a copy that never finishes is a local fault (RESIHP_EIO), not a
 * hang. */
#include "config.h"

#include "../transport/mesh.h"
#include "comm_internal.h"
#include "device_staging.h"

#include <resihp/allreduce.h>
#include <resihp/error.h>
#include <resihp/log.h>

#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#define SEG ((size_t)8 << 20)

struct resihp__staged {
  int device;
  cudaStream_t down, up; /* device->host and host->device copies */
  cudaEvent_t user, in_ready[2], out_free[2], done;
  char *pin;     /* in[0], in[1], out[0], out[1], SEG bytes each */
  void *scratch; /* device: in-place results until the commit */
  size_t scratch_cap;
};

static int cuda_failed(cudaError_t e, const char *what) {
  resihp_log(RESIHP_LOG_ERROR, "allreduce",
             "device all-reduce: %s failed: %s (this rank's GPU is unusable: "
             "leave the job with resihp_comm_destroy)",
             what, cudaGetErrorString(e));
  return RESIHP_EIO;
}

#define CU(call, what)                                                         \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess)                                                     \
      return cuda_failed(e_, what);                                            \
  } while (0)

/* Copies of a segment take tens to hundreds of microseconds: spin that
 * long (a sleep costs as much again), then sleep between looks. */
static void nap(int *spins) {
  if (++*spins < 2000) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, 50 * 1000};
  nanosleep(&ts, NULL);
}

/* Wait for an event, or for a stream when ev is NULL, without trusting
 * the GPU to ever finish. */
static int wait_for(cudaEvent_t ev, cudaStream_t stream, int timeout_ms) {
  int64_t deadline = resihp__now_ms() + timeout_ms;
  for (int spins = 0;;) {
    cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(stream);
    if (e == cudaSuccess)
      return 0;
    if (e != cudaErrorNotReady)
      return cuda_failed(e, ev ? "a copy" : "work on the stream");
    if (resihp__now_ms() > deadline) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "device all-reduce: the GPU did not finish a copy or kernel "
                 "in time (hung?): leave the job with resihp_comm_destroy");
      return RESIHP_EIO;
    }
    nap(&spins);
  }
}

static int wait_event(cudaEvent_t ev, int timeout_ms) {
  return wait_for(ev, NULL, timeout_ms);
}

int resihp__device_wait(void *cuda_stream, int timeout_ms) {
  return wait_for(NULL, (cudaStream_t)cuda_stream, timeout_ms);
}

void resihp__staged_free(struct resihp__staged *s) {
  if (!s)
    return;
  int prev = -1;
  cudaGetDevice(&prev);
  cudaSetDevice(s->device);
  /* A stream that does not drain keeps its buffers: freeing memory a copy
   * may still write would be worse than the leak. */
  int idle = cudaStreamSynchronize(s->down) == cudaSuccess &&
             cudaStreamSynchronize(s->up) == cudaSuccess;
  if (idle) {
    cudaFreeHost(s->pin);
    cudaFree(s->scratch);
  }
  cudaEventDestroy(s->user);
  cudaEventDestroy(s->done);
  for (int i = 0; i < 2; i++) {
    cudaEventDestroy(s->in_ready[i]);
    cudaEventDestroy(s->out_free[i]);
  }
  cudaStreamDestroy(s->down);
  cudaStreamDestroy(s->up);
  if (prev >= 0)
    cudaSetDevice(prev);
  free(s);
}

static int staged_create(int device, struct resihp__staged **out) {
  struct resihp__staged *s = calloc(1, sizeof(*s));
  if (!s)
    return RESIHP_ENOMEM;
  s->device = device;
  *out = s;
  unsigned f = cudaEventDisableTiming;
  CU(cudaStreamCreateWithFlags(&s->down, cudaStreamNonBlocking), "stream");
  CU(cudaStreamCreateWithFlags(&s->up, cudaStreamNonBlocking), "stream");
  CU(cudaEventCreateWithFlags(&s->user, f), "event");
  CU(cudaEventCreateWithFlags(&s->done, f), "event");
  for (int i = 0; i < 2; i++) {
    CU(cudaEventCreateWithFlags(&s->in_ready[i], f), "event");
    CU(cudaEventCreateWithFlags(&s->out_free[i], f), "event");
  }
  if (cudaHostAlloc((void **)&s->pin, 4 * SEG, cudaHostAllocDefault) !=
      cudaSuccess) {
    s->pin = NULL;
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "device all-reduce: cannot pin %zu MiB of host memory (raise "
               "the locked-memory limit, ulimit -l)",
               4 * SEG >> 20);
    return RESIHP_ENOMEM;
  }
  return 0;
}

/* The device that holds p, or -1 (host memory: not for this call). */
static int device_of(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError(); /* clear the sticky-free error of a bad pointer */
    return -1;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged
             ? a.device
             : -1;
}

/* Wait for whatever copies this call left in flight (after a failure). */
static void drain(struct resihp__staged *s, int timeout_ms) {
  if (cudaEventRecord(s->done, s->down) == cudaSuccess)
    wait_event(s->done, timeout_ms);
  if (cudaEventRecord(s->done, s->up) == cudaSuccess)
    wait_event(s->done, timeout_ms);
}

static int run(resihp_comm_t *c, struct resihp__staged *s, const char *send,
               char *recv, size_t count, resihp_dtype_t dtype, resihp_op_t op,
               cudaStream_t stream) {
  size_t esz = resihp__dtype_size(dtype), per = SEG / esz;
  size_t nseg = (count + per - 1) / per, bytes = count * esz;
  int inplace = send == recv;
  char *in[2] = {s->pin, s->pin + SEG},
       *out[2] = {s->pin + 2 * SEG, s->pin + 3 * SEG};
  char *dst = recv;
  /* In place, results wait in scratch until the last segment committed;
   * with one segment that commit comes first, so they go straight home. */
  int via_scratch = inplace && nseg > 1;
  if (via_scratch) {
    if (s->scratch_cap < bytes) {
      cudaFree(s->scratch);
      s->scratch = NULL;
      s->scratch_cap = 0;
      CU(cudaMalloc(&s->scratch, bytes), "cudaMalloc of the result buffer");
      s->scratch_cap = bytes;
    }
    dst = s->scratch;
  }
  /* The caller's stream may still be writing sendbuf. */
  CU(cudaEventRecord(s->user, stream), "cudaEventRecord");
  CU(cudaStreamWaitEvent(s->down, s->user, 0), "cudaStreamWaitEvent");
  int rc = 0;
  size_t n0 = count < per ? count : per;
  if (cudaMemcpyAsync(in[0], send, n0 * esz, cudaMemcpyDeviceToHost, s->down) !=
          cudaSuccess ||
      cudaEventRecord(s->in_ready[0], s->down) != cudaSuccess)
    rc = cuda_failed(cudaGetLastError(), "copy to the host");
  for (size_t seg = 0; seg < nseg && !rc; seg++) {
    /* Segment seg+1 goes down while seg is reduced: its half of the double
     * buffer held segment seg-1, whose reduction has returned. */
    size_t off = seg * per, n = count - off < per ? count - off : per;
    if (seg + 1 < nseg) {
      size_t o1 = off + per, n1 = count - o1 < per ? count - o1 : per;
      if (cudaMemcpyAsync(in[(seg + 1) & 1], send + o1 * esz, n1 * esz,
                          cudaMemcpyDeviceToHost, s->down) != cudaSuccess ||
          cudaEventRecord(s->in_ready[(seg + 1) & 1], s->down) != cudaSuccess) {
        rc = cuda_failed(cudaGetLastError(), "copy to the host");
        break;
      }
    }
    /* out[seg & 1] is free once segment seg-2 went up. */
    if ((rc = wait_event(s->in_ready[seg & 1], c->op_ms)) ||
        (seg >= 2 && (rc = wait_event(s->out_free[seg & 1], c->op_ms))))
      break;
    if ((rc = resihp_allreduce_to(c, in[seg & 1], out[seg & 1], n, dtype, op)))
      break;
    if (cudaMemcpyAsync(dst + off * esz, out[seg & 1], n * esz,
                        cudaMemcpyHostToDevice, s->up) != cudaSuccess ||
        cudaEventRecord(s->out_free[seg & 1], s->up) != cudaSuccess)
      rc = cuda_failed(cudaGetLastError(), "copy to the device");
  }
  if (!rc && via_scratch &&
      cudaMemcpyAsync(recv, dst, bytes, cudaMemcpyDeviceToDevice, s->up) !=
          cudaSuccess)
    rc = cuda_failed(cudaGetLastError(), "copy of the result");
  if (!rc) {
    CU(cudaEventRecord(s->done, s->up), "cudaEventRecord");
    return wait_event(s->done, c->op_ms);
  }
  drain(s, c->op_ms);
  return rc;
}

int resihp__allreduce_staged(resihp_comm_t *c, const void *sendbuf,
                             void *recvbuf, size_t count, resihp_dtype_t dtype,
                             resihp_op_t op, void *cuda_stream) {
  if (!count) /* still a collective: the others count on this rank */
    return resihp_allreduce_to(c, sendbuf, recvbuf, 0, dtype, op);
  int device = device_of(recvbuf);
  if (device < 0 || device_of(sendbuf) != device) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "resihp_allreduce_device: the buffers are not both in the "
               "memory of one CUDA device (use resihp_allreduce for host "
               "memory)");
    return RESIHP_EINVAL;
  }
  int prev = -1;
  cudaGetDevice(&prev);
  if (prev != device && cudaSetDevice(device) != cudaSuccess)
    return cuda_failed(cudaGetLastError(), "cudaSetDevice");
  if (c->staged && c->staged->device != device) {
    resihp__staged_free(c->staged);
    c->staged = NULL;
  }
  int rc = 0;
  if (!c->staged && (rc = staged_create(device, &c->staged))) {
    resihp__staged_free(c->staged);
    c->staged = NULL;
  }
  if (!rc)
    rc = run(c, c->staged, sendbuf, recvbuf, count, dtype, op,
             (cudaStream_t)cuda_stream);
  if (prev >= 0 && prev != device)
    cudaSetDevice(prev);
  return rc;
}
