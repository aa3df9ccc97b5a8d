/* SPDX-License-Identifier: BSD-3-Clause */
/* NCCL transport: the GPU moves the data, the CPU keeps control.
 *
 * The communicator is created non-blocking (config.blocking = 0), so no
 * NCCL call can hang this thread: every call that returns ncclInProgress is
 * followed by a bounded poll of ncclCommGetAsyncError. A collective is
 * enqueued on the caller's stream and then watched: done when the stream
 * is; failed when NCCL reports an asynchronous error, or when the CPU-side
 * monitor (heartbeats, aborts from peers) raises the communicator's failure
 * flag - then ncclCommRevoke stops in-flight work so that the device does
 * not wait forever for a dead peer. After the survivors agreed on a new view
 * on the CPU, ncclCommShrink (NCCL_SHRINK_ABORT) drops the failed ranks
 * without a new bootstrap. Built only when configure finds NCCL; nothing
 * here is linked into the SPANK plugin.
 *
 * ncclCommRevoke and ncclCommShrink are newer than the NCCL that many
 * hosts carry, so they are looked up at run time in the NCCL this process
 * loaded, never linked: on the H200 machine the device check ran on
 * (tests/gpu/device-check.sh), the loaded NCCL had no ncclCommRevoke, and
 * the rank died of a symbol lookup error at its first failure. Without
 * revoke the communicator is aborted instead (which also stops in-flight
 * work), without shrink (or after an abort) the survivors attach a new one
 * over the new view (comm.c, RESIHP_ENOTSUP from the shrink).
 */
#include "config.h"

#include "transport.h"

#include <resihp/allreduce.h>
#include <resihp/error.h>
#include <resihp/log.h>

#include <cuda_runtime_api.h>
/* nccl.h declares a few functions as f() rather than f(void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

struct nccl {
  resihp__transport_t base;
  ncclComm_t comm;
  int device;
  void *scratch; /* device buffer for in-place calls */
  size_t scratch_cap;
};

_Static_assert(RESIHP__NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES,
               "NCCL unique id size");

typedef ncclResult_t (*revoke_fn_t)(ncclComm_t, int);
typedef ncclResult_t (*shrink_fn_t)(ncclComm_t, int *, int, ncclComm_t *,
                                    ncclConfig_t *, int);
static struct {
  revoke_fn_t revoke;
  shrink_fn_t shrink;
} newer;
static pthread_once_t newer_once = PTHREAD_ONCE_INIT;
static atomic_int newer_off; /* tests: resihp__nccl_use_newer(0) */

/* dlsym gives an object pointer; copying its bytes into a function
 * pointer is the POSIX-sanctioned conversion. */
static void *symbol(void *lib, const char *name, void *fn, size_t size) {
  void *p = lib ? dlsym(lib, name) : NULL;
  memcpy(fn, &p, size);
  return p;
}

/* In the NCCL that defines ncclGetUniqueId in this process (found by
 * address: libresihp may be loaded RTLD_LOCAL, as Python's ctypes does,
 * where a global lookup would not see its NCCL). */
static void find_newer(void) {
  ncclResult_t (*anchor)(ncclUniqueId *) = ncclGetUniqueId;
  void *a;
  memcpy(&a, &anchor, sizeof(a));
  Dl_info info;
  void *lib = dladdr(a, &info) && info.dli_fname
                  ? dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)
                  : NULL;
  if (!lib)
    lib = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
  int v = 0;
  ncclGetVersion(&v);
  if (!symbol(lib, "ncclCommRevoke", &newer.revoke, sizeof(newer.revoke)))
    resihp_log(RESIHP_LOG_INFO, "allreduce",
               "NCCL %d has no ncclCommRevoke: a failed collective aborts "
               "the communicator instead", v);
  if (!symbol(lib, "ncclCommShrink", &newer.shrink, sizeof(newer.shrink)))
    resihp_log(RESIHP_LOG_INFO, "allreduce",
               "NCCL %d has no ncclCommShrink: survivors attach a new "
               "communicator after a failure", v);
  if (lib)
    dlclose(lib); /* NOLOAD: only the reference taken here */
}

unsigned resihp__nccl_newer(int *version) {
  pthread_once(&newer_once, find_newer);
  if (version && ncclGetVersion(version) != ncclSuccess)
    *version = 0;
  return (newer.revoke ? RESIHP__NCCL_HAS_REVOKE : 0u) |
         (newer.shrink ? RESIHP__NCCL_HAS_SHRINK : 0u);
}

void resihp__nccl_use_newer(int on) { atomic_store(&newer_off, !on); }

static revoke_fn_t revoke_call(void) {
  pthread_once(&newer_once, find_newer);
  return atomic_load(&newer_off) ? NULL : newer.revoke;
}

static shrink_fn_t shrink_call(void) {
  pthread_once(&newer_once, find_newer);
  return atomic_load(&newer_off) ? NULL : newer.shrink;
}

static int64_t ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap(void) {
  struct timespec ts = {0, 50 * 1000};
  nanosleep(&ts, NULL);
}

/* Wait until the communicator leaves ncclInProgress. */
static int settle(ncclComm_t comm, atomic_int *failed, int timeout_ms,
                  const char *what) {
  int64_t deadline = ms_now() + timeout_ms;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &st);
    if (r != ncclSuccess)
      st = r;
    if (st == ncclSuccess)
      return 0;
    if (st != ncclInProgress) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce", "NCCL %s failed: %s", what,
                 ncclGetErrorString(st));
      return RESIHP_EPEER;
    }
    if (failed && atomic_load(failed))
      return RESIHP_EPEER;
    if (ms_now() > deadline) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "NCCL %s did not finish in %d ms", what, timeout_ms);
      return RESIHP_ETIMEDOUT;
    }
    nap();
  }
}

static int nccl_dtype(int dtype, ncclDataType_t *out) {
  switch (dtype) {
  case RESIHP_FLOAT32:
    *out = ncclFloat32;
    return 0;
  case RESIHP_BFLOAT16:
    *out = ncclBfloat16;
    return 0;
  case RESIHP_FLOAT64:
    *out = ncclFloat64;
    return 0;
  case RESIHP_FIXED64: /* integer sums: exact, so deterministic on GPUs too */
    *out = ncclInt64;
    return 0;
  }
  return RESIHP_EINVAL;
}

static int run(struct nccl *t, const void *sendbuf, void *recvbuf,
               size_t count, ncclDataType_t ty, int op, cudaStream_t s,
               atomic_int *failed, int timeout_ms);

static size_t elem_size(int dtype) {
  return dtype == RESIHP_BFLOAT16 ? 2 : dtype == RESIHP_FLOAT32 ? 4 : 8;
}

static int nccl_allreduce(resihp__transport_t *tt, const void *sendbuf,
                          void *recvbuf, size_t count, int dtype, int op,
                          void *stream, atomic_int *failed, int timeout_ms) {
  struct nccl *t = (struct nccl *)tt;
  ncclDataType_t ty;
  if (nccl_dtype(dtype, &ty))
    return RESIHP_EINVAL;
  if (!t->comm) /* aborted by a failure (no ncclCommRevoke): shrink first */
    return RESIHP_EPEER;
  if (op == RESIHP_OP_AVG && dtype == RESIHP_FIXED64)
    return RESIHP_ENOTSUP;
  cudaSetDevice(t->device);
  cudaStream_t s = (cudaStream_t)stream;
  size_t bytes = count * elem_size(dtype);
  void *out = recvbuf;
  if (sendbuf == recvbuf && bytes) {
    /* Keep the input until the result is complete everywhere. */
    if (t->scratch_cap < bytes) {
      cudaFree(t->scratch);
      t->scratch = NULL;
      t->scratch_cap = 0;
      if (cudaMalloc(&t->scratch, bytes) != cudaSuccess)
        return RESIHP_ENOMEM;
      t->scratch_cap = bytes;
    }
    out = t->scratch;
  }
  int rc = run(t, sendbuf, out, count, ty, op, s, failed, timeout_ms);
  if (rc || out == recvbuf)
    return rc;
  if (cudaMemcpyAsync(recvbuf, out, bytes, cudaMemcpyDeviceToDevice, s) !=
          cudaSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess)
    return RESIHP_EIO;
  return 0;
}

static int run(struct nccl *t, const void *sendbuf, void *recvbuf,
               size_t count, ncclDataType_t ty, int op, cudaStream_t s,
               atomic_int *failed, int timeout_ms) {
  ncclResult_t r = ncclAllReduce(sendbuf, recvbuf, count, ty,
                                 op == RESIHP_OP_AVG ? ncclAvg : ncclSum,
                                 t->comm, s);
  if (r != ncclSuccess && r != ncclInProgress) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce", "ncclAllReduce: %s",
               ncclGetErrorString(r));
    return RESIHP_EPEER;
  }
  int64_t deadline = ms_now() + timeout_ms;
  for (;;) {
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess)
      return 0;
    if (q != cudaErrorNotReady) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce", "CUDA stream failed: %s",
                 cudaGetErrorString(q));
      return RESIHP_EIO;
    }
    ncclResult_t st = ncclSuccess;
    ncclCommGetAsyncError(t->comm, &st);
    int why = 0;
    if (st != ncclSuccess && st != ncclInProgress)
      why = RESIHP_EPEER;
    else if (failed && atomic_load(failed))
      why = RESIHP_EPEER;
    else if (ms_now() > deadline)
      why = RESIHP_ETIMEDOUT;
    if (why) {
      /* Stop the kernels that wait for a dead peer; the communicator is
       * shrunk (or destroyed) next. */
      resihp_log(RESIHP_LOG_WARN, "allreduce",
                 "revoking the NCCL communicator (%s)", resihp_strerror(why));
      revoke_fn_t revoke = revoke_call();
      if (revoke) {
        revoke(t->comm, NCCL_REVOKE_DEFAULT);
      } else {
        ncclCommAbort(t->comm);
        t->comm = NULL;
      }
      return why;
    }
    nap();
  }
}

static int nccl_shrink(resihp__transport_t *tt, int *excluded, int nexcluded,
                       int timeout_ms) {
  struct nccl *t = (struct nccl *)tt;
  ncclComm_t newcomm = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  /* Nobody left (a false alarm, a collective past its bound): NCCL
   * shrinks by at least one rank (0 is an invalid argument), and neither
   * a revoked communicator nor ncclCommSplit of one gave a usable one on
   * NCCL 2.28.9 (H200, one rank), so the caller attaches a new one. */
  shrink_fn_t shrink = shrink_call();
  if (nexcluded <= 0 || !t->comm || !shrink)
    return RESIHP_ENOTSUP;
  cudaSetDevice(t->device);
  ncclResult_t r = shrink(t->comm, excluded, nexcluded, &newcomm, &cfg,
                          NCCL_SHRINK_ABORT);
  if (r != ncclSuccess && r != ncclInProgress) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce", "ncclCommShrink: %s",
               ncclGetErrorString(r));
    return RESIHP_EPEER;
  }
  if (!newcomm)
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "ncclCommShrink gave no communicator");
  int rc = newcomm ? settle(newcomm, NULL, timeout_ms, "shrink") : RESIHP_EPEER;
  if (rc) {
    if (newcomm)
      ncclCommAbort(newcomm);
    return rc;
  }
  ncclCommAbort(t->comm); /* the old one may be revoked: abort, not finalize */
  t->comm = newcomm;
  return 0;
}

static void nccl_destroy(resihp__transport_t *tt) {
  struct nccl *t = (struct nccl *)tt;
  if (!t)
    return;
  if (t->comm)
    ncclCommAbort(t->comm);
  cudaFree(t->scratch);
  free(t);
}

static const resihp__transport_ops_t nccl_ops = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .shrink = nccl_shrink,
    .destroy = nccl_destroy,
};

int resihp__nccl_unique_id(uint8_t id[RESIHP__NCCL_ID_BYTES]) {
  ncclUniqueId u;
  ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce", "ncclGetUniqueId: %s",
               ncclGetErrorString(r));
    return RESIHP_EIO;
  }
  memcpy(id, u.internal, NCCL_UNIQUE_ID_BYTES);
  return 0;
}

int resihp__nccl_transport_create(const uint8_t id[RESIHP__NCCL_ID_BYTES],
                                  int rank, int nranks, int device,
                                  atomic_int *failed, int timeout_ms,
                                  resihp__transport_t **out) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || device < 0 ||
      device >= ndev) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "no CUDA device %d here (%d found)", device, ndev);
    return RESIHP_ENOTSUP;
  }
  struct nccl *t = calloc(1, sizeof(*t));
  if (!t)
    return RESIHP_ENOMEM;
  t->base.ops = &nccl_ops;
  t->device = device;
  cudaSetDevice(device);
  ncclUniqueId u;
  memcpy(u.internal, id, NCCL_UNIQUE_ID_BYTES);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&t->comm, nranks, u, rank, &cfg);
  int rc = 0;
  if (r != ncclSuccess && r != ncclInProgress) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce", "ncclCommInitRankConfig: %s",
               ncclGetErrorString(r));
    rc = RESIHP_EIO;
  } else {
    rc = settle(t->comm, failed, timeout_ms, "init");
  }
  if (rc) {
    nccl_destroy(&t->base);
    return rc;
  }
  *out = &t->base;
  return 0;
}
