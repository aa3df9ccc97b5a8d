/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-bench-device: all-reduce of device buffers staged through pinned
 * host memory (ranks sharing one GPU, no NCCL), or with --nccl through the
 * NCCL communicator attached to the ranks' (resihp_comm_attach_device; NCCL
 * takes one rank per GPU, so on one GPU one rank), beside the same
 * all-reduce of host buffers and the copy limits of the machine, measured
 * in the same run.
 *
 * First a child process (no rank runs meanwhile) times, for every size,
 * pinned device->host and host->device copies (PCIe) and a device->device
 * copy (HBM; bytes copied per second, read+write would be twice that).
 * Then --ranks processes share device 0 with one communicator each; for
 * every size they time, in turn, resihp_allreduce_device (in place, the
 * gradient case) and resihp_allreduce_to on host buffers, --reps times
 * over; best repetition. Rank 0 prints one line per size:
 *
 *   BYTES  DEV_BUSBW  HOST_BUSBW  D2H  H2D  D2D   (GB/s)
 *
 * bus bandwidth = bytes / time * 2(n-1)/n, as nccl-tests define it; one
 * rank moves no bytes between ranks, so its columns are bytes / time
 * (nccl-tests' algorithm bandwidth). Exits 77 without a CUDA device. */
#include <resihp.h>

#include <arpa/inet.h>
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXR 16
#define MAXSIZES 40

static char epb[MAXR][32];
static const char *eps[MAXR];
static int lfd[MAXR];
static char secret[33];

struct cfg {
  int ranks, reps, nccl;
  long min, max;
};

/* The copy limits, written by the child into shared memory. */
struct limits {
  double d2h, h2d, d2d;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int iters_for(long bytes) {
  long it = (256L << 20) / (bytes > 0 ? bytes : 1);
  return it < 3 ? 3 : it > 200 ? 200 : (int)it;
}

static double copy_rate(void *dst, const void *src, size_t bytes,
                        enum cudaMemcpyKind kind, int reps) {
  double best = 0;
  cudaMemcpy(dst, src, bytes, kind); /* warm-up */
  for (int r = 0; r < reps; r++) {
    int it = iters_for((long)bytes);
    cudaDeviceSynchronize();
    double t0 = now_s();
    for (int i = 0; i < it; i++)
      cudaMemcpyAsync(dst, src, bytes, kind, 0);
    cudaDeviceSynchronize();
    double rate = (double)bytes * it / (now_s() - t0) / 1e9;
    best = rate > best ? rate : best;
  }
  return best;
}

static int measure_limits(const struct cfg *cf, const long *sizes, int nsz,
                          struct limits *out) {
  void *h, *d1, *d2;
  size_t max = (size_t)cf->max;
  if (cudaSetDevice(0) != cudaSuccess ||
      cudaHostAlloc(&h, max, cudaHostAllocDefault) != cudaSuccess ||
      cudaMalloc(&d1, max) != cudaSuccess ||
      cudaMalloc(&d2, max) != cudaSuccess)
    return 1;
  memset(h, 1, max);
  cudaMemset(d1, 2, max);
  for (int s = 0; s < nsz; s++) {
    size_t b = (size_t)sizes[s];
    out[s].d2h = copy_rate(h, d1, b, cudaMemcpyDeviceToHost, cf->reps);
    out[s].h2d = copy_rate(d1, h, b, cudaMemcpyHostToDevice, cf->reps);
    out[s].d2d = copy_rate(d2, d1, b, cudaMemcpyDeviceToDevice, cf->reps);
  }
  return 0;
}

static double time_op(resihp_comm_t *c, int dev, void *d, float *hin,
                      float *hout, size_t count, int it, int *rc) {
  double t0 = now_s();
  for (int i = 0; i < it && !*rc; i++)
    *rc = dev ? resihp_allreduce_device(c, d, d, count, RESIHP_FLOAT32,
                                        RESIHP_OP_SUM, NULL)
              : resihp_allreduce_to(c, hin, hout, count, RESIHP_FLOAT32,
                                    RESIHP_OP_SUM);
  return (now_s() - t0) / it;
}

static int run_rank(int rank, const struct cfg *cf, const long *sizes, int nsz,
                    const struct limits *lim) {
  if (cudaSetDevice(0) != cudaSuccess)
    return 1;
  resihp_comm_opts_t o;
  resihp_comm_opts_init(&o);
  o.rank = rank;
  o.nranks = cf->ranks;
  o.endpoints = eps;
  o.listen_fd = lfd[rank];
  o.secret = secret;
  o.secret_len = strlen(secret);
  resihp_comm_t *c;
  int rc = resihp_comm_create(&o, &c);
  if (!rc && cf->nccl && (rc = resihp_comm_attach_device(c, 0)))
    resihp_comm_destroy(c);
  if (rc) {
    fprintf(stderr, "rank %d: %s\n", rank, resihp_strerror(rc));
    return 1;
  }
  size_t max = (size_t)cf->max;
  float *hin = malloc(max), *hout = malloc(max);
  void *d;
  if (!hin || !hout || cudaMalloc(&d, max) != cudaSuccess)
    return 1;
  for (size_t i = 0; i < max / 4; i++)
    hin[i] = (float)(i % 5);
  memset(hout, 0, max);
  cudaMemcpy(d, hin, max, cudaMemcpyHostToDevice);
  double f = cf->ranks > 1 ? 2.0 * (cf->ranks - 1) / cf->ranks : 1.0;
  const char *bw = cf->ranks > 1 ? "busbw" : "algbw";
  if (rank == 0)
    printf("# %d rank(s) on CUDA device 0, device buffers %s; GB/s; "
           "all-reduce columns are %s, copies are bytes moved per second\n"
           "%12s %7s_%s %8s_%s %8s %8s %8s %8s\n",
           cf->ranks, cf->nccl ? "through NCCL" : "staged through pinned host",
           cf->ranks > 1 ? "bus bandwidth" : "bytes / time", "bytes", "dev",
           bw, "host", bw, "dev/host", "d2h", "h2d", "d2d");
  for (int s = 0; s < nsz && !rc; s++) {
    size_t count = (size_t)sizes[s] / 4;
    int it = iters_for(sizes[s]);
    double best[2] = {1e30, 1e30};
    time_op(c, 1, d, hin, hout, count, 1, &rc); /* warm-up both */
    time_op(c, 0, d, hin, hout, count, 1, &rc);
    for (int r = 0; r < cf->reps && !rc; r++)
      for (int dev = 1; dev >= 0; dev--) {
        double t = time_op(c, dev, d, hin, hout, count, it, &rc);
        best[dev] = t < best[dev] ? t : best[dev];
      }
    if (!rc && rank == 0) {
      double bdev = (double)sizes[s] / best[1] / 1e9 * f,
             bhost = (double)sizes[s] / best[0] / 1e9 * f;
      printf("%12ld %10.2f %10.2f %8.2f %8.1f %8.1f %8.1f\n", sizes[s], bdev,
             bhost, bdev / bhost, lim[s].d2h, lim[s].h2d, lim[s].d2d);
      fflush(stdout);
    }
  }
  if (rc)
    fprintf(stderr, "rank %d: %s\n", rank, resihp_strerror(rc));
  cudaFree(d);
  free(hin);
  free(hout);
  resihp_comm_destroy(c);
  return rc != 0;
}

static long parse_size(const char *s) {
  char *e;
  long v = strtol(s, &e, 10);
  if (*e == 'K' || *e == 'k')
    v <<= 10;
  else if (*e == 'M' || *e == 'm')
    v <<= 20;
  else if (*e == 'G' || *e == 'g')
    v <<= 30;
  return v;
}

int main(int argc, char **argv) {
  struct cfg cf = {2, 3, 0, 1L << 20, 256L << 20};
  static const struct option lo[] = {
      {"ranks", 1, 0, 'n'}, {"reps", 1, 0, 'r'}, {"min", 1, 0, 'a'},
      {"max", 1, 0, 'b'},   {"nccl", 0, 0, 'N'}, {"help", 0, 0, 'h'},
      {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "n:r:h", lo, NULL)) != -1) {
    switch (ch) {
    case 'n':
      cf.ranks = atoi(optarg);
      break;
    case 'r':
      cf.reps = atoi(optarg);
      break;
    case 'a':
      cf.min = parse_size(optarg);
      break;
    case 'b':
      cf.max = parse_size(optarg);
      break;
    case 'N':
      cf.nccl = 1;
      break;
    default:
      fprintf(stderr,
              "usage: resihp-bench-device [--ranks N (2..%d; 1 with --nccl)] "
              "[--nccl] [--reps R] [--min BYTES] [--max BYTES] (K/M/G)\n",
              MAXR);
      return ch == 'h' ? 0 : 2;
    }
  }
  if (cf.ranks < (cf.nccl ? 1 : 2) || cf.ranks > MAXR || cf.reps < 1 ||
      cf.min < 4 || cf.max < cf.min || cf.max > (4L << 30)) {
    fprintf(stderr,
            "resihp-bench-device: --ranks 2..%d (1.. with --nccl), "
            "--reps >= 1, 4 <= --min <= --max <= 4G\n",
            MAXR);
    return 2;
  }
  long sizes[MAXSIZES];
  int nsz = 0;
  for (long b = cf.min; b <= cf.max && nsz < MAXSIZES; b *= 4)
    sizes[nsz++] = b & ~3L;
  struct limits *lim =
      mmap(NULL, sizeof(*lim) * MAXSIZES, PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (lim == MAP_FAILED)
    return 1;
  /* CUDA only in children: it does not survive fork. */
  pid_t p = fork();
  if (p == 0)
    _exit(measure_limits(&cf, sizes, nsz, lim));
  int st = 0;
  waitpid(p, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) {
    printf("SKIP: no usable CUDA device\n");
    return 77;
  }
  unsigned char rnd[16];
  if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
    return 1;
  for (int i = 0; i < 16; i++)
    snprintf(secret + 2 * i, 3, "%02x", rnd[i]);
  for (int i = 0; i < cf.ranks; i++) {
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    lfd[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (bind(lfd[i], (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd[i], 64))
      return 1;
    getsockname(lfd[i], (struct sockaddr *)&sa, &sl);
    snprintf(epb[i], sizeof(epb[i]), "127.0.0.1:%u", ntohs(sa.sin_port));
    eps[i] = epb[i];
  }
  signal(SIGPIPE, SIG_IGN);
  pid_t pid[MAXR];
  for (int r = 0; r < cf.ranks; r++)
    if ((pid[r] = fork()) == 0)
      _exit(run_rank(r, &cf, sizes, nsz, lim));
  int bad = 0;
  for (int r = 0; r < cf.ranks; r++) {
    waitpid(pid[r], &st, 0);
    bad |= !WIFEXITED(st) || WEXITSTATUS(st);
  }
  return bad;
}
