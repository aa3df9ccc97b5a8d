/* SPDX-License-Identifier: BSD-3-Clause */
/* The burn-in of a spare (see burnin.h): a fixed compute kernel, a
 * two-thread all-reduce over TCP loopback, and the verdict against the
 * replicas' own burn-in. */
#include "config.h"

#include "../control/wire.h"
#include "../transport/mesh.h"
#include "burnin.h"

#include <resihp/error.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The compute kernel: GEMM_REPS products of two GEMM_N x GEMM_N float
 * matrices of small integers, so that every sum is exact and every
 * repetition must give the same checksum (a CPU that computes wrongly
 * fails). About 85 M multiply-adds: tens of milliseconds on a healthy
 * core, long enough to span many periods of a throttle's duty cycle. */
#define GEMM_N 192
#define GEMM_REPS 12

static int compute(int64_t deadline_ms, long *us, char *why, size_t len) {
  const int n = GEMM_N;
  float *a = malloc(sizeof(float) * 3 * (size_t)n * (size_t)n);
  if (!a) {
    snprintf(why, len, "no memory for the compute kernel");
    return RESIHP_ENOMEM;
  }
  float *b = a + n * n, *c = b + n * n;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < n; k++) {
      a[i * n + k] = (float)((i + k) % 7);
      b[i * n + k] = (float)((i * 3 + k) % 5 - 2);
    }
  int rc = 0;
  double first = 0;
  int64_t t0 = now_us();
  for (int rep = 0; rep < GEMM_REPS && !rc; rep++) {
    memset(c, 0, sizeof(float) * (size_t)n * (size_t)n);
    for (int i = 0; i < n; i++)
      for (int k = 0; k < n; k++) {
        float x = a[i * n + k];
        for (int j = 0; j < n; j++)
          c[i * n + j] += x * b[k * n + j];
      }
    double sum = 0;
    for (int i = 0; i < n * n; i++)
      sum += (double)c[i] * (double)((i % 13) + 1);
    if (!rep)
      first = sum;
    else if (sum != first) {
      snprintf(why, len,
               "the compute kernel gave different results (%.0f, "
               "then %.0f)",
               first, sum);
      rc = RESIHP_EIO;
    }
    if (!rc && resihp__now_ms() > deadline_ms) {
      snprintf(why, len,
               "the compute kernel did not finish before the "
               "deadline (%d of %d products)",
               rep + 1, GEMM_REPS);
      rc = RESIHP_ETIMEDOUT;
    }
  }
  *us = (long)(now_us() - t0);
  free(a);
  return rc;
}

/* Send slen bytes and receive rlen bytes on fd at once (both sides send
 * first: sequential blocking calls would deadlock once a buffer exceeds the
 * sockets' queues). */
static int xfer(int fd, const char *sp, size_t slen, char *rp, size_t rlen,
                int64_t deadline_ms) {
  while (slen || rlen) {
    int64_t left = deadline_ms - resihp__now_ms();
    if (left <= 0)
      return RESIHP_ETIMEDOUT;
    struct pollfd p = {.fd = fd,
                       .events =
                           (short)((slen ? POLLOUT : 0) | (rlen ? POLLIN : 0))};
    int n = poll(&p, 1, left > 1000 ? 1000 : (int)left);
    if (n < 0 && errno != EINTR)
      return RESIHP_ESYS;
    if (n <= 0)
      continue;
    if (slen && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = send(fd, sp, slen, MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN && errno != EINTR)
        return RESIHP_EIO;
      if (w > 0) {
        sp += w;
        slen -= (size_t)w;
      }
    }
    if (rlen && (p.revents & (POLLIN | POLLERR | POLLHUP))) {
      ssize_t r = recv(fd, rp, rlen, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
        return RESIHP_EIO;
      if (r > 0) {
        rp += r;
        rlen -= (size_t)r;
      }
    }
  }
  return 0;
}

/* One side of the two-rank all-reduce: reduce-scatter (each side sums one
 * half), then all-gather, as the ring all-reduce does with two members. */
typedef struct {
  int fd, side, rc;
  float *buf, *tmp;
  size_t n;
  int64_t deadline_ms;
} side_t;

static void *side_run(void *arg) {
  side_t *s = arg;
  size_t h = s->n / 2;
  size_t mine_off = s->side ? h : 0, mine_n = s->side ? s->n - h : h;
  size_t other_off = s->side ? 0 : h, other_n = s->n - mine_n;
  s->rc = xfer(s->fd, (char *)(s->buf + other_off), other_n * sizeof(float),
               (char *)s->tmp, mine_n * sizeof(float), s->deadline_ms);
  if (!s->rc) {
    for (size_t i = 0; i < mine_n; i++)
      s->buf[mine_off + i] += s->tmp[i];
    s->rc = xfer(s->fd, (char *)(s->buf + mine_off), mine_n * sizeof(float),
                 (char *)(s->buf + other_off), other_n * sizeof(float),
                 s->deadline_ms);
  }
  return NULL;
}

static int allreduce(long bytes, int64_t deadline_ms, long *us, char *why,
                     size_t len) {
  size_t n = (size_t)bytes / sizeof(float);
  int rc = RESIHP_ENOMEM, port = 0, lfd = -1, fds[2] = {-1, -1};
  float *mem = malloc(sizeof(float) * 3 * n);
  side_t s[2];
  char ep[32];
  if (!mem) {
    snprintf(why, len, "no memory for a %ld-byte all-reduce", bytes);
    return rc;
  }
  for (size_t i = 0; i < n; i++) {
    mem[i] = 1.0f;
    mem[n + i] = 2.0f;
  }
  lfd = resihp__wire_listen("127.0.0.1", 0, &port);
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", port);
  if (lfd >= 0)
    fds[0] = resihp__wire_dial(ep, deadline_ms);
  if (fds[0] >= 0) {
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    int64_t left = deadline_ms - resihp__now_ms();
    if (poll(&p, 1, left > 0 ? (int)left : 0) == 1)
      fds[1] = accept(lfd, NULL, NULL);
  }
  if (fds[1] < 0) {
    snprintf(why, len, "cannot open a loopback connection: %s",
             strerror(errno));
    rc = RESIHP_ESYS;
    goto out;
  }
  for (int i = 0; i < 2; i++) {
    fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    s[i] = (side_t){.fd = fds[i],
                    .side = i,
                    .buf = mem + (size_t)i * n,
                    .tmp = mem + 2 * n,
                    .n = n,
                    .deadline_ms = deadline_ms};
  }
  /* the sides' scratch must not overlap: side 1's is the upper half */
  s[1].tmp = mem + 2 * n + n / 2;
  int64_t t0 = now_us();
  pthread_t th;
  if (pthread_create(&th, NULL, side_run, &s[1])) {
    snprintf(why, len, "cannot start the all-reduce's second thread");
    rc = RESIHP_ESYS;
    goto out;
  }
  side_run(&s[0]);
  /* side 0 is done or gave up; side 1 ends by its own deadline or when
   * its peer's socket closes */
  if (s[0].rc)
    shutdown(fds[0], SHUT_RDWR);
  pthread_join(th, NULL);
  *us = (long)(now_us() - t0);
  rc = s[0].rc ? s[0].rc : s[1].rc;
  if (rc == RESIHP_ETIMEDOUT)
    snprintf(why, len,
             "the loopback all-reduce of %ld bytes did not finish "
             "before the deadline",
             bytes);
  else if (rc)
    snprintf(why, len, "the loopback all-reduce of %ld bytes failed: %s", bytes,
             resihp_strerror(rc));
  for (size_t i = 0; !rc && i < 2 * n; i++)
    if (mem[i] != 3.0f) {
      snprintf(why, len,
               "the loopback all-reduce gave a wrong sum (%g "
               "instead of 3 at %zu)",
               (double)mem[i], i % n);
      rc = RESIHP_EIO;
    }
out:
  for (int i = 0; i < 2; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  if (lfd >= 0)
    close(lfd);
  free(mem);
  return rc;
}

int resihp__burnin_run(long bytes, int64_t deadline_ms, resihp__burnin_t *out) {
  memset(out, 0, sizeof(*out));
  if (bytes < 4096)
    bytes = 4096;
  if (bytes > RESIHP__BURNIN_MAX_BYTES)
    bytes = RESIHP__BURNIN_MAX_BYTES;
  out->bytes = bytes & ~7L; /* two halves of whole floats */
  int rc = compute(deadline_ms, &out->compute_us, out->why, sizeof(out->why));
  if (!rc)
    rc = allreduce(out->bytes, deadline_ms, &out->allreduce_us, out->why,
                   sizeof(out->why));
#ifdef RESIHP_HAVE_CUDA_KERNELS
  if (!rc)
    rc = resihp__burnin_gpu(out->bytes, deadline_ms, out);
#endif
  out->failed = rc != 0;
  return rc;
}

static int cmp_long(const void *x, const void *y) {
  long a = *(const long *)x, b = *(const long *)y;
  return (a > b) - (a < b);
}

/* The lower medians of the burn-ins of v that passed (with GPU figures
 * only, gpu = 1): the compute (GPU: GEMM) time in *cu and the all-reduce
 * (GPU: device all-reduce) time, scaled to bytes, in *au; c and a are
 * scratch for n values. Returns how many there were (0: *cu, *au unset). */
static int medians(const resihp__burnin_t *v, int n, int gpu, long bytes,
                   long *c, long *a, long *cu, long *au) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (v[i].failed || v[i].bytes <= 0 || (gpu && v[i].gpus <= 0))
      continue;
    c[m] = gpu ? v[i].gpu_gemm_us : v[i].compute_us;
    a[m] = (long)((double)(gpu ? v[i].gpu_allreduce_us : v[i].allreduce_us) *
                  (double)bytes / (double)v[i].bytes);
    m++;
  }
  if (m) {
    qsort(c, (size_t)m, sizeof(long), cmp_long);
    qsort(a, (size_t)m, sizeof(long), cmp_long);
    *cu = c[(m - 1) / 2];
    *au = a[(m - 1) / 2];
  }
  return m;
}

int resihp__burnin_reference(const resihp__burnin_t *v, int n,
                             resihp__burnin_t *ref) {
  memset(ref, 0, sizeof(*ref));
  long *c = malloc(sizeof(long) * 2 * (size_t)(n > 0 ? n : 1));
  if (!c)
    return 0;
  long *a = c + (n > 0 ? n : 1);
  for (int i = 0; i < n && !ref->bytes; i++)
    if (!v[i].failed && v[i].bytes > 0)
      ref->bytes = v[i].bytes;
  int m =
      medians(v, n, 0, ref->bytes, c, a, &ref->compute_us, &ref->allreduce_us);
  /* the GPU figures of those that have them (a GPU job's replicas all do) */
  ref->gpus = medians(v, n, 1, ref->bytes, c, a, &ref->gpu_gemm_us,
                      &ref->gpu_allreduce_us) > 0;
  free(c);
  return m;
}

static double ratio(double x, double y) {
  if (x < RESIHP__BURNIN_FLOOR_US)
    x = RESIHP__BURNIN_FLOOR_US;
  if (y < RESIHP__BURNIN_FLOOR_US)
    y = RESIHP__BURNIN_FLOOR_US;
  return x / y;
}

int resihp__burnin_judge(const resihp__burnin_t *spare,
                         const resihp__burnin_t *ref, double max_ratio,
                         char *why, size_t len) {
  char tmp[8];
  if (!why) {
    why = tmp;
    len = sizeof(tmp);
  }
  if (spare->failed) {
    snprintf(why, len, "burn-in failed: %s",
             spare->why[0] ? spare->why : "no reason given");
    return RESIHP__BURNIN_FAILED;
  }
  if (!ref || ref->bytes <= 0 || spare->bytes <= 0) {
    snprintf(why, len, "burn-in not judged: no replica's to compare with");
    return RESIHP__BURNIN_UNJUDGED;
  }
  double ar =
      (double)spare->allreduce_us * (double)ref->bytes / (double)spare->bytes;
  double rc = ratio((double)spare->compute_us, (double)ref->compute_us);
  double ra = ratio(ar, (double)ref->allreduce_us);
  if (rc > max_ratio) {
    snprintf(why, len,
             "burn-in: compute %.1fx slower than the replicas (%.0f ms vs "
             "%.0f ms)",
             rc, spare->compute_us / 1e3, ref->compute_us / 1e3);
    return RESIHP__BURNIN_SLOW;
  }
  if (ra > max_ratio) {
    snprintf(why, len,
             "burn-in: all-reduce of %.1f MiB %.1fx slower than the "
             "replicas (%.0f ms vs %.0f ms)",
             (double)ref->bytes / (1 << 20), ra, ar / 1e3,
             ref->allreduce_us / 1e3);
    return RESIHP__BURNIN_SLOW;
  }
  if (spare->gpus > 0 && ref->gpus > 0) {
    /* GPU times are milliseconds at most: the floor would hide a slow
     * device, so they are compared as measured */
    double rg = (double)spare->gpu_gemm_us /
                (double)(ref->gpu_gemm_us > 0 ? ref->gpu_gemm_us : 1);
    if (rg > max_ratio) {
      snprintf(why, len,
               "burn-in: GPU GEMM %.1fx slower than the replicas' (%.1f ms "
               "vs %.1f ms)",
               rg, spare->gpu_gemm_us / 1e3, ref->gpu_gemm_us / 1e3);
      return RESIHP__BURNIN_SLOW;
    }
    if (spare->gpu_allreduce_us > 0 && ref->gpu_allreduce_us > 0) {
      double gar = (double)spare->gpu_allreduce_us * (double)ref->bytes /
                   (double)spare->bytes;
      double rd = gar / (double)ref->gpu_allreduce_us;
      if (rd > max_ratio) {
        snprintf(why, len,
                 "burn-in: device all-reduce %.1fx slower than the "
                 "replicas' (%.1f ms vs %.1f ms)",
                 rd, gar / 1e3, ref->gpu_allreduce_us / 1e3);
        return RESIHP__BURNIN_SLOW;
      }
    }
  }
  snprintf(why, len,
           "burn-in passed: compute %.1fx, all-reduce %.1fx the replicas' "
           "time",
           rc, ra);
  return RESIHP__BURNIN_PASS;
}

void resihp__burnin_format(const resihp__burnin_t *b, char *out, size_t len) {
  if (b->failed)
    snprintf(out, len, "fail");
  else if (b->gpus > 0)
    snprintf(out, len, "%ld:%ld:%ld:%d:%ld:%ld", b->bytes, b->compute_us,
             b->allreduce_us, b->gpus, b->gpu_gemm_us, b->gpu_allreduce_us);
  else
    snprintf(out, len, "%ld:%ld:%ld", b->bytes, b->compute_us, b->allreduce_us);
}

int resihp__burnin_parse(const char *s, resihp__burnin_t *out) {
  memset(out, 0, sizeof(*out));
  if (!strcmp(s, "fail")) {
    out->failed = 1;
    snprintf(out->why, sizeof(out->why), "reported failed by the node");
    return 0;
  }
  long long v[6] = {0};
  int n = 0;
  /* an hour of microseconds at most: a burn-in is bounded far below; with
   * GPU figures (6 fields) or without (3) */
  if ((resihp__wire_parse_tuples(s, 6, 3600000000LL, v, 1, &n) &&
       resihp__wire_parse_tuples(s, 3, 3600000000LL, v, 1, &n)) ||
      n != 1 || v[0] < 1 || v[0] > RESIHP__BURNIN_MAX_BYTES || v[3] > 4096)
    return RESIHP_EPROTO;
  out->bytes = (long)v[0];
  out->compute_us = (long)v[1];
  out->allreduce_us = (long)v[2];
  out->gpus = (int)v[3];
  out->gpu_gemm_us = (long)v[4];
  out->gpu_allreduce_us = (long)v[5];
  return 0;
}
