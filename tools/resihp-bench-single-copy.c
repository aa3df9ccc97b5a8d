/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-bench-single-copy: the two host data paths of a large all-reduce
 * side by side at 2 ranks on loopback - the shared-memory rings
 * (single_copy = 0) and process_vm_readv (single_copy = 1) - beside a
 * single-thread memcpy of the same size, timed in the same run by rank 0
 * while rank 1 waits. Fault tolerant, out of place, float32 sums; best of
 * --reps repetitions, modes interleaved. And the ceiling of any single-copy
 * design on this machine (IDEAL): both processes' buffers in one shared
 * mapping, each adds its half straight from both inputs and copies the
 * other's half of the result, synchronised by spinning on two counters -
 * no fault tolerance, no system call, nothing but the bytes. Prints per
 * size:
 *
 *   single-copy BYTES RING_GBPS SINGLE_GBPS MEMCPY_GBPS SINGLE/MEMCPY
 *               IDEAL_GBPS IDEAL/MEMCPY
 *
 * (bus bandwidth; at 2 ranks it equals bytes / time).
 *
 * usage: resihp-bench-single-copy [REPS [MAX_BYTES]] (default 5, 64 MiB;
 * sizes 1 MiB, 4 MiB, ... up to MAX_BYTES) */
#include <resihp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* IDEAL: one shared mapping, made before fork. ready[r]: iterations whose
 * half rank r has added; copied[r]: iterations whose other half it has
 * copied (each on its own cache line). */
struct ideal {
  _Alignas(64) atomic_long ready[2][8];
  _Alignas(64) atomic_long copied[2][8];
};
static struct ideal *shared;
static float *ideal_buf; /* in[0], in[1], out[0], out[1] */

static void ideal_allreduce(int rank, size_t n, long it) {
  size_t half = n / 2; /* inputs and outputs n floats apart */
  float *in0 = ideal_buf, *in1 = in0 + n, *out = in1 + n + rank * n,
        *theirs = in1 + n + (1 - rank) * n;
  size_t mine = rank ? half : 0, mlen = rank ? n - half : half;
  size_t other = rank ? 0 : half, olen = rank ? half : n - half;
  /* The peer must have copied this half of the previous result. */
  while (atomic_load(&shared->copied[1 - rank][0]) < it - 1)
    ;
  for (size_t i = mine; i < mine + mlen; i++)
    out[i] = in0[i] + in1[i];
  atomic_store(&shared->ready[rank][0], it);
  while (atomic_load(&shared->ready[1 - rank][0]) < it)
    ;
  memcpy(out + other, theirs + other, olen * sizeof(float));
  atomic_store(&shared->copied[rank][0], it);
}

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
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    static long ideal_it;
    for (int rep = 0; rep < reps; rep++)
      for (int m = 0; m < 4; m++) {
        resihp_comm_t *cm = c[m >= 2 ? 0 : m];
        if (resihp_allreduce_to(cm, src, dst, n, RESIHP_FLOAT32,
                                RESIHP_OP_SUM) ||
            resihp_allreduce(cm, &one, 1, RESIHP_FLOAT32, RESIHP_OP_SUM))
          return 1;
        double t0 = now_s();
        for (int it = 0; it < iters; it++) {
          if (m == 3) {
            ideal_allreduce(rank, n, ++ideal_it);
          } else if (m == 2 && rank == 0) {
            memcpy(dst, src, (size_t)bytes);
            __asm__ volatile("" : : "r"(dst) : "memory");
          } else if (m < 2 &&
                     resihp_allreduce_to(cm, src, dst, n, RESIHP_FLOAT32,
                                         RESIHP_OP_SUM)) {
            return 1;
          }
        }
        double dt = (now_s() - t0) / iters;
        best[m] = dt < best[m] ? dt : best[m];
      }
    if (rank == 0)
      printf("single-copy %ld %.2f %.2f %.2f %.0f%% %.2f %.0f%%\n", bytes,
             bytes / best[0] / 1e9, bytes / best[1] / 1e9,
             bytes / best[2] / 1e9, 100.0 * best[2] / best[1],
             bytes / best[3] / 1e9, 100.0 * best[2] / best[3]);
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
         "SINGLE/MEMCPY IDEAL_GBPS IDEAL/MEMCPY (2 ranks, best of %d)\n",
         reps);
  /* The IDEAL buffers: both inputs and both outputs, shared. */
  size_t ideal_len = sizeof(struct ideal) + 4 * (size_t)max;
  shared = mmap(NULL, ideal_len, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (shared == MAP_FAILED) {
    perror("resihp-bench-single-copy: mmap");
    return 1;
  }
  ideal_buf = (float *)(shared + 1);
  for (size_t i = 0; i < 2 * (size_t)max / 4; i++)
    ideal_buf[i] = (float)(i % 17) * 0.25f;
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
