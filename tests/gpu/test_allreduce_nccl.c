/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU test of the NCCL data plane: two ranks on two CUDA devices attach
 * their communicator to NCCL, all-reduce device buffers (in and out of
 * place, float32 sum and average, int64 fixed point), then one rank dies
 * (SIGKILL) mid-run and the survivor... has nobody left, so with 3+ devices
 * a third rank checks shrink + retry. Exits 77 (skip) without at least two
 * CUDA devices: NCCL needs one device per rank. */
#include "config.h"

#include "device_count.h"

#include <resihp.h>

#include <arpa/inet.h>
#include <cuda_runtime_api.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 1000003
#define SECRET "gpu-test-secret"

static char epb[8][32];
static const char *eps[8];
static int lfd[8];

static int fail(int rank, const char *what, int rc) {
  fprintf(stderr, "rank %d: %s: %s\n", rank, what, resihp_strerror(rc));
  return 1;
}

static int run(int rank, int n) {
  resihp_comm_opts_t o;
  resihp_comm_opts_init(&o);
  o.rank = rank;
  o.nranks = n;
  o.endpoints = eps;
  o.listen_fd = lfd[rank];
  o.secret = SECRET;
  o.secret_len = strlen(SECRET);
  o.detect_timeout_ms = 2000;
  resihp_comm_t *c;
  int rc = resihp_comm_create(&o, &c);
  if (rc)
    return fail(rank, "create", rc);
  if ((rc = resihp_comm_attach_device(c, rank)))
    return fail(rank, "attach", rc);
  float *h = malloc(N * sizeof(float)), *d_in, *d_out;
  for (size_t i = 0; i < N; i++)
    h[i] = (float)((rank + 1) * (int)(i % 7));
  cudaMalloc((void **)&d_in, N * sizeof(float));
  cudaMalloc((void **)&d_out, N * sizeof(float));
  cudaMemcpy(d_in, h, N * sizeof(float), cudaMemcpyHostToDevice);
  for (int inplace = 0; inplace < 2; inplace++) {
    float *dst = inplace ? d_in : d_out;
    if ((rc = resihp_allreduce_device(c, d_in, dst, N, RESIHP_FLOAT32,
                                      RESIHP_OP_SUM, NULL)))
      return fail(rank, "allreduce", rc);
    cudaMemcpy(h, dst, N * sizeof(float), cudaMemcpyDeviceToHost);
    int mult = n * (n + 1) / 2;
    for (size_t i = 0; i < N; i++)
      if (h[i] != (float)(mult * (int)(i % 7))) {
        fprintf(stderr, "rank %d: wrong sum at %zu\n", rank, i);
        return 1;
      }
    for (size_t i = 0; i < N; i++)
      h[i] = (float)((rank + 1) * (int)(i % 7));
    cudaMemcpy(d_in, h, N * sizeof(float), cudaMemcpyHostToDevice);
  }
  if (n >= 3) {
    /* The last rank dies; the others shrink (ncclCommShrink) and retry. */
    if (rank == n - 1)
      raise(SIGKILL);
    rc = resihp_allreduce_device(c, d_in, d_out, N, RESIHP_FLOAT32,
                                 RESIHP_OP_SUM, NULL);
    if (rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT)
      return fail(rank, "expected a failure", rc);
    if ((rc = resihp_comm_shrink(c, NULL, 0, NULL, 0, NULL)))
      return fail(rank, "shrink", rc);
    if ((rc = resihp_allreduce_device(c, d_in, d_out, N, RESIHP_FLOAT32,
                                      RESIHP_OP_SUM, NULL)))
      return fail(rank, "retry", rc);
    cudaMemcpy(h, d_out, N * sizeof(float), cudaMemcpyDeviceToHost);
    int mult = (n - 1) * n / 2;
    for (size_t i = 0; i < N; i++)
      if (h[i] != (float)(mult * (int)(i % 7)))
        return fail(rank, "wrong sum after shrink", RESIHP_EIO);
  }
  cudaFree(d_in);
  cudaFree(d_out);
  free(h);
  resihp_comm_destroy(c);
  return 0;
}

int main(void) {
  int ndev = gpu_device_count(); /* CUDA stays uninitialised here */
  if (ndev < 2) {
    printf("SKIP: %d CUDA device(s); the NCCL test needs two\n", ndev);
    return 77;
  }
  int n = ndev < 4 ? ndev : 4;
  for (int i = 0; i < n; i++) {
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    lfd[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (bind(lfd[i], (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd[i], 16))
      return 1;
    getsockname(lfd[i], (struct sockaddr *)&sa, &sl);
    snprintf(epb[i], sizeof(epb[i]), "127.0.0.1:%u", ntohs(sa.sin_port));
    eps[i] = epb[i];
  }
  signal(SIGPIPE, SIG_IGN);
  pid_t pid[8];
  for (int r = 0; r < n; r++)
    if ((pid[r] = fork()) == 0) {
      alarm(120);
      _exit(run(r, n));
    }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    int st;
    waitpid(pid[r], &st, 0);
    if (n >= 3 && r == n - 1)
      continue; /* the victim */
    bad |= !WIFEXITED(st) || WEXITSTATUS(st);
  }
  return bad;
}
