/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU test of device buffers staged through pinned host memory: three
 * ranks (processes) share CUDA device 0, with no NCCL attached.
 *  - sums of device buffers, in and out of place, float32 and float64, one
 *    size on the small-message path and one of several segments; exact
 *    values, so the results are compared with ==; sendbuf never written;
 *  - deterministic mode: the device result is bit for bit the host
 *    all-reduce of the same random data;
 *  - a rank SIGKILLed after two of eight segments committed: the
 *    survivors' in-place device buffer is exactly what it was, and after
 *    resihp_comm_shrink the retry sums the two survivors.
 * Exits 77 (skip) without a CUDA device. The parent forks before any CUDA
 * call (CUDA does not survive fork); a child answers how many devices. */
#include "config.h"

#include "../../libresihp/collectives/comm_internal.h"
#include "device_count.h"

#include <resihp.h>

#include <arpa/inet.h>
#include <cuda_runtime_api.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define NRANKS 3
#define SECRET "gpu-staged-test-secret"
#define BIG ((size_t)5000003)     /* floats: three 8 MiB segments */
#define KILL_N ((size_t)16 << 20) /* floats: eight segments */

static char epb[2][NRANKS][32];
static const char *eps[2][NRANKS];
static int lfd[2][NRANKS];

static int fail(int rank, const char *what, int rc) {
  fprintf(stderr, "rank %d: %s: %s\n", rank, what, resihp_strerror(rc));
  return 1;
}

static int make(int set, int rank, int deterministic, resihp_comm_t **c) {
  resihp_comm_opts_t o;
  resihp_comm_opts_init(&o);
  o.rank = rank;
  o.nranks = NRANKS;
  o.endpoints = eps[set];
  o.listen_fd = lfd[set][rank];
  o.secret = SECRET;
  o.secret_len = strlen(SECRET);
  o.detect_timeout_ms = 3000;
  o.deterministic = deterministic;
  return resihp_comm_create(&o, c);
}

/* Exact in float: small integers and quarters. */
static double value(int rank, size_t i) {
  return (double)((rank + 1) * (int)(i % 7)) + 0.25 * (double)(i % 3);
}

static double expect(size_t i, uint64_t members) {
  double s = 0;
  for (int r = 0; r < NRANKS; r++)
    if (members >> r & 1)
      s += value(r, i);
  return s;
}

static int same_device(const void *d, const void *h, size_t bytes) {
  void *back = malloc(bytes);
  cudaMemcpy(back, d, bytes, cudaMemcpyDeviceToHost);
  int same = !memcmp(back, h, bytes);
  free(back);
  return same;
}

/* Sums of float32 or float64, count elements, in and out of place. */
static int sums(resihp_comm_t *c, int rank, size_t count, int f64) {
  size_t esz = f64 ? 8 : 4;
  resihp_dtype_t dt = f64 ? RESIHP_FLOAT64 : RESIHP_FLOAT32;
  char *h = malloc(count * esz), *got = malloc(count * esz);
  void *d_in, *d_out;
  for (size_t i = 0; i < count; i++) {
    if (f64)
      ((double *)h)[i] = value(rank, i);
    else
      ((float *)h)[i] = (float)value(rank, i);
  }
  cudaMalloc(&d_in, count * esz);
  cudaMalloc(&d_out, count * esz);
  int bad = 0;
  for (int inplace = 0; inplace < 2 && !bad; inplace++) {
    cudaMemcpy(d_in, h, count * esz, cudaMemcpyHostToDevice);
    void *dst = inplace ? d_in : d_out;
    int rc =
        resihp_allreduce_device(c, d_in, dst, count, dt, RESIHP_OP_SUM, NULL);
    if (rc) {
      bad = fail(rank, "allreduce_device", rc);
      break;
    }
    if (!inplace && !same_device(d_in, h, count * esz)) {
      fprintf(stderr, "rank %d: sendbuf was written\n", rank);
      bad = 1;
    }
    cudaMemcpy(got, dst, count * esz, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < count && !bad; i++) {
      double v = f64 ? ((double *)got)[i] : ((float *)got)[i];
      if (v != expect(i, (1u << NRANKS) - 1)) {
        fprintf(stderr, "rank %d: %zu %s %s: %g at %zu, want %g\n", rank, count,
                f64 ? "f64" : "f32", inplace ? "in place" : "out", v, i,
                expect(i, (1u << NRANKS) - 1));
        bad = 1;
      }
    }
  }
  cudaFree(d_in);
  cudaFree(d_out);
  free(h);
  free(got);
  return bad;
}

/* Deterministic mode: device == host, bit for bit, on random data. */
static int deterministic(int rank) {
  resihp_comm_t *c;
  int rc = make(1, rank, 1, &c);
  if (rc)
    return fail(rank, "create (deterministic)", rc);
  size_t count = BIG;
  float *h = malloc(count * 4), *host = malloc(count * 4),
        *dev = malloc(count * 4);
  unsigned s = 12345u + 77u * (unsigned)rank;
  for (size_t i = 0; i < count; i++) {
    s = s * 1103515245u + 12345u;
    h[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.01f + 1e-7f;
  }
  memcpy(host, h, count * 4);
  float *d;
  cudaMalloc((void **)&d, count * 4);
  cudaMemcpy(d, h, count * 4, cudaMemcpyHostToDevice);
  int bad = 0;
  if ((rc = resihp_allreduce(c, host, count, RESIHP_FLOAT32, RESIHP_OP_AVG)))
    bad = fail(rank, "host allreduce (deterministic)", rc);
  else if ((rc = resihp_allreduce_device(c, d, d, count, RESIHP_FLOAT32,
                                         RESIHP_OP_AVG, NULL)))
    bad = fail(rank, "device allreduce (deterministic)", rc);
  else {
    cudaMemcpy(dev, d, count * 4, cudaMemcpyDeviceToHost);
    if (memcmp(dev, host, count * 4)) {
      fprintf(stderr,
              "rank %d: deterministic device result differs from "
              "the host's\n",
              rank);
      bad = 1;
    }
  }
  cudaFree(d);
  free(h);
  free(host);
  free(dev);
  resihp_comm_destroy(c);
  return bad;
}

/* The victim's watcher: SIGKILL once two segments committed. */
static void *killer(void *arg) {
  resihp_comm_t *c = arg;
  uint32_t start = __atomic_load_n(&c->seq, __ATOMIC_RELAXED);
  while (__atomic_load_n(&c->seq, __ATOMIC_RELAXED) - start < 2)
    usleep(100);
  fflush(stdout);
  raise(SIGKILL);
  return NULL;
}

static int kill_phase(resihp_comm_t *c, int rank) {
  size_t count = KILL_N;
  float *h = malloc(count * 4), *d;
  for (size_t i = 0; i < count; i++)
    h[i] = (float)value(rank, i);
  cudaMalloc((void **)&d, count * 4);
  cudaMemcpy(d, h, count * 4, cudaMemcpyHostToDevice);
  if (rank == NRANKS - 1) {
    pthread_t t;
    pthread_create(&t, NULL, killer, c);
  }
  int rc = resihp_allreduce_device(c, d, d, count, RESIHP_FLOAT32,
                                   RESIHP_OP_SUM, NULL);
  if (rank == NRANKS - 1)
    pause(); /* the watcher kills this rank */
  if (rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT)
    return fail(rank, "expected a dead peer", rc);
  if (!same_device(d, h, count * 4)) {
    fprintf(stderr,
            "rank %d: the failed in-place all-reduce changed the "
            "device buffer\n",
            rank);
    return 1;
  }
  if ((rc = resihp_comm_shrink(c, NULL, 0, NULL, 0, NULL)))
    return fail(rank, "shrink", rc);
  if ((rc = resihp_allreduce_device(c, d, d, count, RESIHP_FLOAT32,
                                    RESIHP_OP_SUM, NULL)))
    return fail(rank, "retry", rc);
  cudaMemcpy(h, d, count * 4, cudaMemcpyDeviceToHost);
  uint64_t survivors = (1u << (NRANKS - 1)) - 1;
  for (size_t i = 0; i < count; i++)
    if (h[i] != (float)expect(i, survivors)) {
      fprintf(stderr, "rank %d: wrong sum after shrink at %zu\n", rank, i);
      return 1;
    }
  cudaFree(d);
  free(h);
  printf("rank %d: survived a peer killed mid-way, buffer untouched, retry "
         "exact\n",
         rank);
  return 0;
}

static int run(int rank) {
  if (cudaSetDevice(0) != cudaSuccess)
    return fail(rank, "cudaSetDevice", RESIHP_EIO);
  resihp_comm_t *c;
  int rc = make(0, rank, 0, &c);
  if (rc)
    return fail(rank, "create", rc);
  if (sums(c, rank, 1000, 0) || sums(c, rank, BIG, 0) ||
      sums(c, rank, BIG / 2, 1) || deterministic(rank))
    return 1;
  if (rank == 0)
    printf("sums and deterministic mode: ok\n");
  rc = kill_phase(c, rank);
  resihp_comm_destroy(c);
  return rc;
}

int main(void) {
  int ndev = gpu_device_count();
  if (ndev < 1) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  for (int set = 0; set < 2; set++)
    for (int i = 0; i < NRANKS; i++) {
      struct sockaddr_in sa = {.sin_family = AF_INET,
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      socklen_t sl = sizeof(sa);
      lfd[set][i] = socket(AF_INET, SOCK_STREAM, 0);
      if (bind(lfd[set][i], (struct sockaddr *)&sa, sizeof(sa)) ||
          listen(lfd[set][i], 16))
        return 1;
      getsockname(lfd[set][i], (struct sockaddr *)&sa, &sl);
      snprintf(epb[set][i], sizeof(epb[set][i]), "127.0.0.1:%u",
               ntohs(sa.sin_port));
      eps[set][i] = epb[set][i];
    }
  signal(SIGPIPE, SIG_IGN);
  pid_t pid[NRANKS];
  for (int r = 0; r < NRANKS; r++)
    if ((pid[r] = fork()) == 0) {
      alarm(300);
      int rc = run(r);
      fflush(stdout); /* _exit does not */
      _exit(rc);
    }
  int bad = 0;
  for (int r = 0; r < NRANKS; r++) {
    int st;
    waitpid(pid[r], &st, 0);
    if (r == NRANKS - 1)
      bad |= !(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    else
      bad |= !WIFEXITED(st) || WEXITSTATUS(st);
  }
  return bad;
}
