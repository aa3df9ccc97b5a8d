/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-bench-allreduce: bus bandwidth of resihp_allreduce on loopback.
 *
 * Forks --ranks processes on 127.0.0.1 (pre-bound ports, random per-run
 * secret). Each rank opens one communicator per mode and, for every size,
 * times the modes in turn, --reps times over, so that all modes see the
 * same background load; the best repetition is reported. Rank 0 prints one
 * line per mode and size:
 *
 *   resihp MODE RANKS BYTES USEC_PER_OP ALGBW_GBPS BUSBW_GBPS
 *
 * bus bandwidth = bytes / time * 2(n-1)/n, as nccl-tests define it, so
 * numbers are comparable across rank counts and with resihp-bench-mpi.
 * The modes are the rows of the table `modes` below (--mode picks some):
 * ft (fault tolerant, out of place; direct exchange for small buffers),
 * ring (ft with the ring at every size), 1copy (ft with single copy from
 * 256 KiB), ftip (fault tolerant, in place:
 * adds the private copy that keeps the input), noft (unprotected ring: no
 * monitor thread, no DONE round), det (fault tolerant + deterministic
 * fixed point), mac (ft with mac-data: a MAC over every gradient byte) -
 * all with the default host transport (shared-memory rings between ranks of
 * one host) - and fttcp, mactcp (ft, mac over TCP only, the medium of Open
 * MPI's tcp BTL). Every mode MACs its control frames, and the frame headers
 * on socket links (shared-memory rings carry no MACs). All but
 * ftip use resihp_allreduce_to() with separate send and receive buffers, like
 * the MPI twin. Data are float32 sums.
 *
 * The copy limit: at each size rank 0 also times a single-thread memcpy of
 * that many bytes between two distinct, pre-faulted buffers, in the same
 * process and run, interleaved with the modes (best of the repetitions; the
 * other ranks wait in the next all-reduce meanwhile). One more line per
 * size, with the bytes copied per second in both bandwidth columns (a copy
 * has no bus factor):
 *
 *   resihp memcpy RANKS BYTES USEC_PER_COPY GBPS GBPS
 *
 * --p2p: point-to-point bandwidth instead, 2 ranks: rank 0 sends a stream
 * of messages of each size to rank 1 with resihp_send (rank 1: resihp_recv,
 * then a 1-byte reply so that the time covers their arrival), over the
 * shared-memory rings (ft) and over TCP (fttcp), beside a plain memcpy of
 * the same size timed in the same run and process; best repetition:
 *
 *   p2p BYTES SHM_GBPS TCP_GBPS MEMCPY_GBPS
 */
#include <resihp.h>

#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXR 64
#define MAXMODES 32

/* A mode: a communicator made with these options, timed like the others.
 * To add one, add a row (and its name to the columns of resihp-bench.sh);
 * options that have no field here go in tune, called last. */
struct mode {
  const char *name;
  int inplace; /* resihp_allreduce on the input itself, else _to */
  int unprotected, deterministic, transport, mac_data; /* resihp_comm_opts_t */
  void (*tune)(resihp_comm_opts_t *o);                 /* or NULL */
};

/* The ring at every size (no direct exchange, no single copy). */
static void ring_only(resihp_comm_opts_t *o) {
  o->small_max = 0;
  o->single_copy = 0;
}
static void single_copy(resihp_comm_opts_t *o) {
  o->single_copy = 1;
}

static const struct mode modes[] = {
    /* name     inplace unprot det transport mac tune */
    {"ft", 0, 0, 0, -1, 0, NULL},           {"ring", 0, 0, 0, -1, 0, ring_only},
    {"1copy", 0, 0, 0, -1, 0, single_copy}, {"ftip", 1, 0, 0, -1, 0, NULL},
    {"noft", 0, 1, 0, -1, 0, NULL},         {"det", 0, 0, 1, -1, 0, NULL},
    {"fttcp", 0, 0, 0, 1, 0, NULL},         {"mac", 0, 0, 0, -1, 1, NULL},
    {"mactcp", 0, 0, 0, 1, 1, NULL},
};
#define NMODES ((int)(sizeof(modes) / sizeof(modes[0])))
_Static_assert(sizeof(modes) / sizeof(modes[0]) <= MAXMODES, "MAXMODES");

static int mode_index(const char *name) {
  for (int k = 0; k < NMODES; k++)
    if (!strcmp(name, modes[k].name))
      return k;
  return -1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct cfg {
  int ranks, scale, reps;
  long min_bytes, max_bytes, chunk;
  int pick[MAXMODES], nmodes; /* indices into modes[] */
  int p2p;
};

static int iters_for(long bytes, int scale) {
  long it = (64L << 20) * scale / bytes; /* bytes per rank and timing */
  if (it < 2)
    it = 2;
  if (it > 100)
    it = 100;
  return (int)it;
}

/* Seconds per message of bytes from rank 0 to rank 1 (rank 0's view). */
static double p2p_time(resihp_comm_t *c, int rank, uint8_t *buf, long bytes,
                       long iters, int *rc) {
  uint8_t one = 0;
  /* Line up (the reply of the previous round may still be in flight). */
  if ((*rc = resihp_bcast(c, 0, &one, 1)))
    return 0;
  double t0 = now_s();
  for (long it = 0; it < iters && !*rc; it++)
    *rc = rank == 0 ? resihp_send(c, 1, buf, (size_t)bytes)
                    : resihp_recv(c, 0, buf, (size_t)bytes);
  if (!*rc)
    *rc = rank == 0 ? resihp_recv(c, 1, &one, 1) : resihp_send(c, 0, &one, 1);
  return (now_s() - t0) / iters;
}

static int run_p2p(int rank, const struct cfg *cf, resihp_comm_t **c) {
  uint8_t *buf = malloc((size_t)cf->max_bytes);
  uint8_t *dst = malloc((size_t)cf->max_bytes);
  int rc = 0;
  if (!buf || !dst)
    return 1;
  memset(buf, 0x5a, (size_t)cf->max_bytes);
  memset(dst, 0, (size_t)cf->max_bytes);
  if (rank == 0)
    printf("# p2p BYTES SHM_GBPS TCP_GBPS MEMCPY_GBPS (one way, best of %d)\n",
           cf->reps);
  for (long bytes = cf->min_bytes; bytes <= cf->max_bytes; bytes *= 4) {
    /* 64 MiB a timing, however small the messages: the fixed costs of a
     * round (lining up, the reply) must not pass for per-message costs. */
    long iters = (64L << 20) * cf->scale / bytes;
    iters = iters < 4 ? 4 : iters > 20000 ? 20000 : iters;
    double shm = 1e30, tcp = 1e30, mem = 1e30;
    for (int rep = 0; rep < cf->reps; rep++) {
      double t = p2p_time(c[mode_index("ft")], rank, buf, bytes, iters, &rc);
      if (rc)
        goto fail;
      shm = t < shm ? t : shm;
      t = p2p_time(c[mode_index("fttcp")], rank, buf, bytes, iters, &rc);
      if (rc)
        goto fail;
      tcp = t < tcp ? t : tcp;
      double t0 = now_s();
      for (long it = 0; it < iters; it++) {
        memcpy(dst, buf, (size_t)bytes);
        __asm__ volatile("" : : "r"(dst) : "memory"); /* keep every copy */
      }
      t = (now_s() - t0) / iters;
      mem = t < mem ? t : mem;
    }
    if (rank == 0) {
      printf("p2p %ld %.3f %.3f %.3f\n", bytes, (double)bytes / shm / 1e9,
             (double)bytes / tcp / 1e9, (double)bytes / mem / 1e9);
      fflush(stdout);
    }
  }
  free(buf);
  free(dst);
  return 0;
fail:
  fprintf(stderr, "rank %d: p2p failed: %s\n", rank, resihp_strerror(rc));
  return 1;
}

/* Seconds per single-thread memcpy of bytes (after one untimed copy). */
static double copy_time(uint8_t *dst, const uint8_t *src, size_t bytes,
                        int iters) {
  memcpy(dst, src, bytes);
  double t0 = now_s();
  for (int it = 0; it < iters; it++) {
    memcpy(dst, src, bytes);
    __asm__ volatile("" : : "r"(dst) : "memory"); /* keep every copy */
  }
  return (now_s() - t0) / iters;
}

static int run_rank(int rank, const struct cfg *cf,
                    const char *eps[NMODES][MAXR], int lfd[NMODES][MAXR],
                    const uint8_t *secret) {
  resihp_comm_t *c[NMODES] = {0};
  int rc = 0;
  for (int k = 0; k < cf->nmodes; k++) {
    int m = cf->pick[k];
    resihp_comm_opts_t o;
    resihp_comm_opts_init(&o);
    o.rank = rank;
    o.nranks = cf->ranks;
    o.endpoints = eps[m];
    o.listen_fd = lfd[m][rank];
    o.secret = secret;
    o.secret_len = 32;
    o.chunk_bytes = cf->chunk;
    o.unprotected = modes[m].unprotected;
    o.deterministic = modes[m].deterministic;
    o.transport = modes[m].transport;
    o.mac_data = modes[m].mac_data;
    if (modes[m].tune)
      modes[m].tune(&o);
    if ((rc = resihp_comm_create(&o, &c[m]))) {
      fprintf(stderr, "rank %d: %s\n", rank, resihp_strerror(rc));
      return 1;
    }
  }
  if (cf->p2p) {
    rc = run_p2p(rank, cf, c);
    for (int m = 0; m < NMODES; m++)
      resihp_comm_destroy(c[m]);
    return rc;
  }
  size_t maxn = (size_t)cf->max_bytes / sizeof(float);
  float *src = malloc(maxn * sizeof(float)),
        *buf = malloc(maxn * sizeof(float));
  if (!buf || !src)
    return 1;
  /* Gradient-like values: small (|x| < 2^-7, so that deterministic mode
   * meets what it meets in training), exact in float. */
  for (size_t i = 0; i < maxn; i++)
    src[i] = buf[i] = (float)((int)(i % 17) - 8) * 0x1p-10f;
  /* The copy limit's own buffers (rank 0), touched now so that no page
   * fault is timed. */
  uint8_t *csrc = NULL, *cdst = NULL;
  if (rank == 0) {
    csrc = malloc((size_t)cf->max_bytes);
    cdst = malloc((size_t)cf->max_bytes);
    if (!csrc || !cdst)
      return 1;
    memset(csrc, 0x5a, (size_t)cf->max_bytes);
    memset(cdst, 0, (size_t)cf->max_bytes);
  }
  for (long bytes = cf->min_bytes; bytes <= cf->max_bytes; bytes *= 4) {
    size_t n = (size_t)bytes / sizeof(float);
    int iters = iters_for(bytes, cf->scale);
    double best[NMODES], copy = 1e30;
    for (int k = 0; k < NMODES; k++)
      best[k] = 1e30;
    for (int rep = 0; rep < cf->reps; rep++) {
      if (rank == 0) {
        double t = copy_time(cdst, csrc, (size_t)bytes, iters);
        copy = t < copy ? t : copy;
      }
      for (int k = 0; k < cf->nmodes; k++) {
        int m = cf->pick[k];
        const float *in = modes[m].inplace ? buf : src;
        float one = 1;
        /* Warm up, then line the ranks up with a tiny all-reduce. */
        if ((rc = resihp_allreduce_to(c[m], in, buf, n, RESIHP_FLOAT32,
                                      RESIHP_OP_SUM)) ||
            (rc = resihp_allreduce(c[m], &one, 1, RESIHP_FLOAT32,
                                   RESIHP_OP_SUM)))
          goto fail;
        double t0 = now_s();
        for (int it = 0; it < iters; it++)
          if ((rc = resihp_allreduce_to(c[m], in, buf, n, RESIHP_FLOAT32,
                                        RESIHP_OP_SUM)))
            goto fail;
        double dt = (now_s() - t0) / iters;
        if (dt < best[m])
          best[m] = dt;
      }
    }
    if (rank == 0) {
      for (int k = 0; k < cf->nmodes; k++) {
        int m = cf->pick[k];
        double alg = (double)bytes / best[m] / 1e9;
        printf("resihp %s %d %ld %.1f %.3f %.3f\n", modes[m].name, cf->ranks,
               bytes, best[m] * 1e6, alg,
               alg * 2.0 * (cf->ranks - 1) / cf->ranks);
      }
      double gbps = (double)bytes / copy / 1e9;
      printf("resihp memcpy %d %ld %.1f %.3f %.3f\n", cf->ranks, bytes,
             copy * 1e6, gbps, gbps);
      fflush(stdout);
    }
  }
  free(buf);
  free(src);
  free(csrc);
  free(cdst);
  for (int m = 0; m < NMODES; m++)
    resihp_comm_destroy(c[m]);
  return 0;
fail:
  fprintf(stderr, "rank %d: all-reduce failed: %s\n", rank,
          resihp_strerror(rc));
  return 1;
}

static void usage(void) {
  fprintf(stderr, "usage: resihp-bench-allreduce [--ranks N]\n"
                  "         [--mode M,M...] (M: ");
  for (int k = 0; k < NMODES; k++)
    fprintf(stderr, "%s%s", k ? " " : "", modes[k].name);
  fprintf(stderr,
          ")\n"
          "         [--min BYTES] [--max BYTES] [--chunk BYTES] [--reps R]\n"
          "         [--quick|--full] [--p2p]\n"
          "  --quick (default): 4 KiB .. 16 MiB, 3 repetitions;\n"
          "  --full: 4 KiB .. 256 MiB, 5 repetitions, twice the iterations\n"
          "  --p2p: resihp_send/recv bandwidth over shared memory and TCP\n"
          "         beside memcpy (2 ranks)\n");
}

static int parse_modes(struct cfg *cf, const char *s) {
  char buf[128];
  snprintf(buf, sizeof(buf), "%s", s);
  cf->nmodes = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t;
       t = strtok_r(NULL, ",", &save)) {
    int m = mode_index(t);
    if (m < 0 || cf->nmodes == NMODES)
      return -1;
    cf->pick[cf->nmodes++] = m;
  }
  return cf->nmodes ? 0 : -1;
}

int main(int argc, char **argv) {
  struct cfg cf = {.ranks = 2,
                   .scale = 1,
                   .reps = 3,
                   .min_bytes = 4096,
                   .max_bytes = 16L << 20,
                   .nmodes = 0};
  static const struct option opts[] = {{"ranks", required_argument, 0, 'n'},
                                       {"mode", required_argument, 0, 'm'},
                                       {"min", required_argument, 0, 'a'},
                                       {"max", required_argument, 0, 'b'},
                                       {"chunk", required_argument, 0, 'c'},
                                       {"reps", required_argument, 0, 'r'},
                                       {"quick", no_argument, 0, 'q'},
                                       {"full", no_argument, 0, 'f'},
                                       {"help", no_argument, 0, 'h'},
                                       {"p2p", no_argument, 0, 'p'},
                                       {0, 0, 0, 0}};
  for (int k = 0; k < NMODES; k++)
    cf.pick[cf.nmodes++] = k;
  int ch;
  while ((ch = getopt_long(argc, argv, "n:m:a:b:c:r:qfhp", opts, NULL)) != -1) {
    switch (ch) {
    case 'n':
      cf.ranks = atoi(optarg);
      break;
    case 'm':
      if (parse_modes(&cf, optarg)) {
        usage();
        return 2;
      }
      break;
    case 'a':
      cf.min_bytes = atol(optarg);
      break;
    case 'b':
      cf.max_bytes = atol(optarg);
      break;
    case 'c':
      cf.chunk = atol(optarg);
      break;
    case 'r':
      cf.reps = atoi(optarg);
      break;
    case 'q':
      cf.max_bytes = 16L << 20;
      break;
    case 'p':
      cf.p2p = 1;
      break;
    case 'f':
      cf.max_bytes = 256L << 20;
      cf.reps = 5;
      cf.scale = 2;
      break;
    default:
      usage();
      return ch == 'h' ? 0 : 2;
    }
  }
  if (cf.p2p) { /* two ranks; the shared-memory and the TCP communicator */
    cf.ranks = 2;
    cf.pick[0] = mode_index("ft");
    cf.pick[1] = mode_index("fttcp");
    cf.nmodes = 2;
  }
  if (cf.ranks < 1 || cf.ranks > MAXR || cf.min_bytes < 4 || cf.reps < 1 ||
      cf.max_bytes < cf.min_bytes) {
    usage();
    return 2;
  }
  uint8_t secret[32];
  if (getrandom(secret, sizeof(secret), 0) != sizeof(secret))
    return 1;
  static char epbuf[NMODES][MAXR][32];
  static const char *eps[NMODES][MAXR];
  static int lfd[NMODES][MAXR];
  for (int m = 0; m < NMODES; m++)
    for (int i = 0; i < cf.ranks; i++) {
      struct sockaddr_in sa = {.sin_family = AF_INET,
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      socklen_t sl = sizeof(sa);
      lfd[m][i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (lfd[m][i] < 0 ||
          bind(lfd[m][i], (struct sockaddr *)&sa, sizeof(sa)) ||
          listen(lfd[m][i], 64) ||
          getsockname(lfd[m][i], (struct sockaddr *)&sa, &sl)) {
        perror("listen");
        return 1;
      }
      snprintf(epbuf[m][i], sizeof(epbuf[m][i]), "127.0.0.1:%u",
               ntohs(sa.sin_port));
      eps[m][i] = epbuf[m][i];
    }
  signal(SIGPIPE, SIG_IGN);
  pid_t pid[MAXR];
  for (int r = 0; r < cf.ranks; r++) {
    pid[r] = fork();
    if (pid[r] < 0) {
      perror("fork");
      return 1;
    }
    if (pid[r] == 0) {
      for (int m = 0; m < NMODES; m++)
        for (int j = 0; j < cf.ranks; j++)
          if (j != r)
            close(lfd[m][j]);
      _exit(run_rank(r, &cf, eps, lfd, secret));
    }
  }
  for (int m = 0; m < NMODES; m++)
    for (int j = 0; j < cf.ranks; j++)
      close(lfd[m][j]);
  int bad = 0;
  for (int r = 0; r < cf.ranks; r++) {
    int st;
    waitpid(pid[r], &st, 0);
    if (WIFSIGNALED(st))
      fprintf(stderr, "rank %d killed by signal %d\n", r, WTERMSIG(st));
    bad |= !WIFEXITED(st) || WEXITSTATUS(st);
  }
  return bad;
}
