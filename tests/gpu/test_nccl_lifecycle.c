/* SPDX-License-Identifier: BSD-3-Clause */
/* The NCCL transport's life cycle on what one GPU allows: a one-rank
 * communicator. Each path returns as transport.h documents:
 *  - init on a device that does not exist: RESIHP_ENOTSUP, nothing leaked;
 *  - init, all-reduce in and out of place (float32 sum and average,
 *    int64), FIXED64 average RESIHP_ENOTSUP, a bad dtype RESIHP_EINVAL;
 *  - revoke: the CPU side raises the failure flag while the collective
 *    waits behind work on the stream (a host function that holds the
 *    stream until released, so nothing depends on speed): RESIHP_EPEER,
 *    the communicator revoked, recvbuf of an in-place call untouched;
 *  - the same with no flag and a short bound: RESIHP_ETIMEDOUT;
 *  - shrink by nobody is refused (RESIHP_ENOTSUP: NCCL cannot remake a
 *    communicator in place), a new one works; destroy aborts a revoked one;
 *  - the public path: a one-rank resihp_comm with the device attached,
 *    in deterministic mode: exact small sums, and random data bit for bit
 *    the host path's (values with more than 32 fraction bits, so the
 *    fixed-point rounding shows);
 *  - all of it again as with an NCCL without ncclCommRevoke and
 *    ncclCommShrink (resihp__nccl_use_newer(0)): the fallbacks.
 * Exits 77 (skip) without a CUDA device. */
#include "config.h"

#include "../../libresihp/collectives/comm_internal.h"
#include "device_count.h"

#include <resihp.h>

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N ((size_t)1 << 20)

static int failures;

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                     \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      failures++;                                                              \
    }                                                                          \
  } while (0)

/* A host function that holds the stream until the test releases it. */
static atomic_int hold;
static void CUDART_CB held(void *arg) {
  (void)arg;
  while (atomic_load(&hold))
    usleep(100);
}

static int check_floats(const float *d, float want) {
  float *h = malloc(N * 4);
  cudaMemcpy(h, d, N * 4, cudaMemcpyDeviceToHost);
  int ok = 1;
  for (size_t i = 0; i < N && ok; i++)
    ok = h[i] == want * (float)(i % 5);
  free(h);
  return ok;
}

static void transport_paths(void) {
  uint8_t id[RESIHP__NCCL_ID_BYTES] = {0};
  atomic_int failed = 0;
  resihp__transport_t *t = NULL;
  EXPECT(resihp__nccl_transport_create(id, 0, 1, 99, &failed, 5000, &t) ==
                 RESIHP_ENOTSUP &&
             !t,
         "device 99 accepted");
  EXPECT(resihp__nccl_unique_id(id) == 0, "ncclGetUniqueId");
  int rc = resihp__nccl_transport_create(id, 0, 1, 0, &failed, 20000, &t);
  EXPECT(rc == 0 && t, "init: %s", resihp_strerror(rc));
  if (!t)
    return;
  float *h = malloc(N * 4), *d_in, *d_out;
  for (size_t i = 0; i < N; i++)
    h[i] = (float)(i % 5);
  cudaMalloc((void **)&d_in, N * 4);
  cudaMalloc((void **)&d_out, N * 4);
  cudaMemcpy(d_in, h, N * 4, cudaMemcpyHostToDevice);
  const resihp__transport_ops_t *ops = t->ops;
  rc = ops->allreduce(t, d_in, d_out, N, RESIHP_FLOAT32, RESIHP_OP_SUM, NULL,
                      &failed, 20000);
  EXPECT(rc == 0 && check_floats(d_out, 1), "sum out of place: %s",
         resihp_strerror(rc));
  rc = ops->allreduce(t, d_in, d_in, N, RESIHP_FLOAT32, RESIHP_OP_AVG, NULL,
                      &failed, 20000);
  EXPECT(rc == 0 && check_floats(d_in, 1), "avg in place: %s",
         resihp_strerror(rc));
  rc = ops->allreduce(t, d_in, d_out, N / 2, RESIHP_FIXED64, RESIHP_OP_SUM,
                      NULL, &failed, 20000);
  EXPECT(rc == 0, "int64 sum: %s", resihp_strerror(rc));
  EXPECT(ops->allreduce(t, d_in, d_out, N / 2, RESIHP_FIXED64, RESIHP_OP_AVG,
                        NULL, &failed, 20000) == RESIHP_ENOTSUP,
         "FIXED64 average accepted");
  EXPECT(ops->allreduce(t, d_in, d_out, N, 12345, RESIHP_OP_SUM, NULL, &failed,
                        20000) == RESIHP_EINVAL,
         "bad dtype accepted");

  /* Revoke: the collective waits behind the held stream; the flag rises. */
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaMemset(d_out, 0x7f, N * 4);
  atomic_store(&hold, 1);
  cudaLaunchHostFunc(s, held, NULL);
  atomic_store(&failed, 1);
  rc = ops->allreduce(t, d_out, d_out, N, RESIHP_FLOAT32, RESIHP_OP_SUM, s,
                      &failed, 20000);
  EXPECT(rc == RESIHP_EPEER, "revoke: %s", resihp_strerror(rc));
  atomic_store(&hold, 0);
  cudaStreamSynchronize(s);
  unsigned *u = malloc(N * 4);
  cudaMemcpy(u, d_out, N * 4, cudaMemcpyDeviceToHost);
  int same = 1;
  for (size_t i = 0; i < N; i++)
    same &= u[i] == 0x7f7f7f7fu;
  EXPECT(same, "a revoked in-place all-reduce wrote recvbuf");
  free(u);
  atomic_store(&failed, 0);

  /* Shrink with nobody excluded: refused (NCCL cannot remake a revoked
   * communicator in place); the communicator layer attaches a new one
   * (public_path), as here. */
  rc = ops->shrink(t, NULL, 0, 20000);
  EXPECT(rc == RESIHP_ENOTSUP, "shrink by nobody: %s", resihp_strerror(rc));
  ops->destroy(t);
  t = NULL;
  EXPECT(resihp__nccl_unique_id(id) == 0, "ncclGetUniqueId");
  rc = resihp__nccl_transport_create(id, 0, 1, 0, &failed, 20000, &t);
  EXPECT(rc == 0 && t, "init again: %s", resihp_strerror(rc));
  if (!t)
    return;
  ops = t->ops;
  rc = ops->allreduce(t, d_in, d_out, N, RESIHP_FLOAT32, RESIHP_OP_SUM, s,
                      &failed, 20000);
  EXPECT(rc == 0 && check_floats(d_out, 1), "sum after shrink: %s",
         resihp_strerror(rc));

  /* The bound: no flag, the stream held past it. */
  atomic_store(&hold, 1);
  cudaLaunchHostFunc(s, held, NULL);
  rc = ops->allreduce(t, d_in, d_out, N, RESIHP_FLOAT32, RESIHP_OP_SUM, s,
                      &failed, 300);
  EXPECT(rc == RESIHP_ETIMEDOUT, "bound: %s", resihp_strerror(rc));
  atomic_store(&hold, 0);
  cudaStreamSynchronize(s);
  ops->destroy(t); /* aborts the revoked communicator: must return */
  cudaStreamDestroy(s);
  cudaFree(d_in);
  cudaFree(d_out);
  free(h);
  printf("transport: init, all-reduce, revoke, bound, abort: %s\n",
         failures ? "FAILED" : "ok");
}

static void public_path(void) {
  resihp_comm_opts_t o;
  resihp_comm_opts_init(&o);
  const char *ep[1] = {"127.0.0.1:0"};
  o.rank = 0;
  o.nranks = 1;
  o.endpoints = ep;
  o.secret = "lifecycle-secret";
  o.secret_len = strlen(o.secret);
  o.deterministic = 1;
  resihp_comm_t *c;
  int rc = resihp_comm_create(&o, &c);
  EXPECT(rc == 0, "one-rank comm: %s", resihp_strerror(rc));
  if (rc)
    return;
  rc = resihp_comm_attach_device(c, 0);
  EXPECT(rc == 0, "attach: %s", resihp_strerror(rc));
  float *h = malloc(N * 4), *d;
  for (size_t i = 0; i < N; i++)
    h[i] = (float)(i % 5);
  cudaMalloc((void **)&d, N * 4);
  cudaMemcpy(d, h, N * 4, cudaMemcpyHostToDevice);
  rc = resihp_allreduce_device(c, d, d, N, RESIHP_FLOAT32, RESIHP_OP_SUM, NULL);
  EXPECT(rc == 0 && check_floats(d, 1), "public all-reduce: %s",
         resihp_strerror(rc));
  /* A failure with nobody gone (as a false alarm): the call fails, the
   * shrink by nobody keeps a working device communicator. */
  atomic_store(&c->failed, 1);
  rc = resihp_allreduce_device(c, d, d, N, RESIHP_FLOAT32, RESIHP_OP_SUM, NULL);
  EXPECT(rc == RESIHP_EPEER, "flagged all-reduce: %s", resihp_strerror(rc));
  rc = resihp_comm_shrink(c, NULL, 0, NULL, 0, NULL);
  EXPECT(rc == 0, "shrink by nobody: %s", resihp_strerror(rc));
  rc = resihp_allreduce_device(c, d, d, N, RESIHP_FLOAT32, RESIHP_OP_SUM, NULL);
  EXPECT(rc == 0 && check_floats(d, 1), "all-reduce after the shrink: %s",
         resihp_strerror(rc));
  /* Deterministic mode (the CUDA kernels around NCCL's int64 sum): bit
   * for bit the host path on random data. */
  float *host = malloc(N * 4), *dev = malloc(N * 4);
  unsigned s = 99;
  for (size_t i = 0; i < N; i++) {
    s = s * 1103515245u + 12345u;
    host[i] = h[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 3e-3f;
  }
  cudaMemcpy(d, h, N * 4, cudaMemcpyHostToDevice);
  rc = resihp_allreduce_device(c, d, d, N, RESIHP_FLOAT32, RESIHP_OP_AVG, NULL);
#ifdef RESIHP_HAVE_CUDA_KERNELS
  EXPECT(rc == 0, "deterministic device all-reduce: %s", resihp_strerror(rc));
  int rc2 = resihp_allreduce(c, host, N, RESIHP_FLOAT32, RESIHP_OP_AVG);
  EXPECT(rc2 == 0, "deterministic host all-reduce: %s", resihp_strerror(rc2));
  cudaMemcpy(dev, d, N * 4, cudaMemcpyDeviceToHost);
  EXPECT(!memcmp(dev, host, N * 4) && memcmp(dev, h, N * 4),
         "deterministic: device and host results differ (or nothing was "
         "rounded)");
#else
  EXPECT(rc == RESIHP_ENOTSUP, "deterministic without kernels: %s",
         resihp_strerror(rc));
#endif
  free(host);
  free(dev);
  cudaFree(d);
  free(h);
  resihp_comm_destroy(c);
  printf("public: one-rank comm, attach, all-reduce, deterministic: %s\n",
         failures ? "FAILED" : "ok");
}

int main(void) {
  if (gpu_device_count() < 1) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  alarm(300); /* a GPU that hangs fails the test instead of holding it */
  if (cudaSetDevice(0) != cudaSuccess)
    return 1;
  int version = 0;
  unsigned has = resihp__nccl_newer(&version);
  printf("NCCL %d: ncclCommRevoke %s, ncclCommShrink %s\n", version,
         has & RESIHP__NCCL_HAS_REVOKE ? "yes" : "no",
         has & RESIHP__NCCL_HAS_SHRINK ? "yes" : "no");
  transport_paths();
  public_path();
  /* Again as with an NCCL that has neither: a failure aborts the
   * communicator, the shrink attaches a new one. */
  printf("without ncclCommRevoke and ncclCommShrink:\n");
  resihp__nccl_use_newer(0);
  transport_paths();
  public_path();
  return failures ? 1 : 0;
}
