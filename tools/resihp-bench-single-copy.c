/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-bench-single-copy: the two host data paths of a large all-reduce
 * side by side at 2 ranks on loopback - the shared-memory rings
 * (single_copy = 0) and process_vm_readv (single_copy = 1) - beside a
 * single-thread memcpy of the same size, timed in the same run by rank 0
 * while rank 1 waits. Fault tolerant, out of place, float32 sums; best of
 * --reps repetitions, modes interleaved. Prints per size:
 *
 *   single-copy BYTES RING_GBPS SINGLE_GBPS MEMCPY_GBPS SINGLE/MEMCPY
 *
 * (bus bandwidth; at 2 ranks it equals bytes / time).
 *
 * usage: resihp-bench-single-copy [REPS [MAX_BYTES]] (default 5, 64 MiB;
 * sizes 1 MiB, 4 MiB, ... up to MAX_BYTES) */
#include <resihp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char secret[] = "resihp-bench-single-copy-secret";
static char ep[2][2][32]; /* [path][rank] */
static int lfd[2][2];

static int rank_main(int rank, int reps, long max) {
  resihp_comm_t *c[2];
  for (int m = 0; m < 2; m++) {
    const char *eps[2] = {ep[m][0], ep[m][1]};
    resihp_comm_opts_t o;
    resihp_comm_opts_init(&o);
    o.rank = rank;
    o.nranks = 2;
    o.endpoints = eps;
    o.listen_fd = lfd[m][rank];
    o.secret = secret;
    o.secret_len = sizeof(secret) - 1;
    o.single_copy = m;
    if (resihp_comm_create(&o, &c[m]))
      return 1;
  }
  float *src = malloc((size_t)max), *dst = malloc((size_t)max), one = 1;
  if (!src || !dst)
    return 1;
  for (size_t i = 0; i < (size_t)max / 4; i++)
    src[i] = dst[i] = (float)(i % 17) * 0.25f;
  for (long bytes = 1L << 20; bytes <= max; bytes *= 4) {
    size_t n = (size_t)bytes / 4;
    int iters = (int)((256L << 20) / bytes);
    iters = iters < 3 ? 3 : iters;
    double best[3] = {1e30, 1e30, 1e30};
    for (int rep = 0; rep < reps; rep++)
      for (int m = 0; m < 3; m++) {
        resihp_comm_t *cm = c[m == 2 ? 0 : m];
        if (resihp_allreduce_to(cm, src, dst, n, RESIHP_FLOAT32,
                                RESIHP_OP_SUM) ||
            resihp_allreduce(cm, &one, 1, RESIHP_FLOAT32, RESIHP_OP_SUM))
          return 1;
        double t0 = now_s();
        for (int it = 0; it < iters; it++) {
          if (m == 2 && rank == 0) {
            memcpy(dst, src, (size_t)bytes);
            __asm__ volatile("" : : "r"(dst) : "memory");
          } else if (m < 2 && resihp_allreduce_to(cm, src, dst, n,
                                                  RESIHP_FLOAT32,
                                                  RESIHP_OP_SUM)) {
            return 1;
          }
        }
        double dt = (now_s() - t0) / iters;
        best[m] = dt < best[m] ? dt : best[m];
      }
    if (rank == 0)
      printf("single-copy %ld %.2f %.2f %.2f %.0f%%\n", bytes,
             bytes / best[0] / 1e9, bytes / best[1] / 1e9,
             bytes / best[2] / 1e9, 100.0 * best[2] / best[1]);
    fflush(stdout);
  }
  for (int m = 0; m < 2; m++)
    resihp_comm_destroy(c[m]);
  free(src);
  free(dst);
  return 0;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  long max = argc > 2 ? atol(argv[2]) : 64L << 20;
  if (reps < 1 || max < (1L << 20)) {
    fprintf(stderr, "usage: resihp-bench-single-copy [REPS [MAX_BYTES]]\n");
    return 2;
  }
  for (int m = 0; m < 2; m++)
    for (int r = 0; r < 2; r++) {
      struct sockaddr_in sa = {.sin_family = AF_INET,
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      socklen_t sl = sizeof(sa);
      lfd[m][r] = socket(AF_INET, SOCK_STREAM, 0);
      if (lfd[m][r] < 0 || bind(lfd[m][r], (struct sockaddr *)&sa, sl) ||
          listen(lfd[m][r], 16) ||
          getsockname(lfd[m][r], (struct sockaddr *)&sa, &sl))
        return 1;
      snprintf(ep[m][r], sizeof(ep[m][r]), "127.0.0.1:%u", ntohs(sa.sin_port));
    }
  printf("# single-copy BYTES RING_GBPS SINGLE_GBPS MEMCPY_GBPS "
         "SINGLE/MEMCPY (2 ranks, best of %d)\n",
         reps);
  fflush(stdout);
  pid_t pid[2];
  for (int r = 0; r < 2; r++)
    if ((pid[r] = fork()) == 0)
      _exit(rank_main(r, reps, max));
  int bad = 0;
  for (int r = 0; r < 2; r++) {
    int st;
    waitpid(pid[r], &st, 0);
    bad |= !WIFEXITED(st) || WEXITSTATUS(st);
  }
  return bad;
}
