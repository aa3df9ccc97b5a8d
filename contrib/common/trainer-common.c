/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared by the example trainers: see trainer-common.h. */
#include "trainer-common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

uint64_t trainer_splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t trainer_mb_rng(uint64_t seed, long s, int mb) {
  uint64_t r = seed * 1000003ULL + (uint64_t)s * 7919ULL + (uint64_t)mb;
  trainer_splitmix(&r);
  return r;
}

void trainer_tokens(uint64_t *r, int V, int C, int cls, int len, int *tok) {
  int block = V / C;
  for (int t = 0; t < len; t++) {
    uint64_t u = trainer_splitmix(r);
    tok[t] = (u & 1) ? cls * block + (int)((u >> 8) % (uint64_t)block)
                     : (int)((u >> 8) % (uint64_t)V);
  }
}

int trainer_sequence(uint64_t *r, int V, int C, int *cls, int *tok) {
  *cls = (int)(trainer_splitmix(r) % (uint64_t)C);
  int len = 4 + (int)(trainer_splitmix(r) % (TRAINER_MAX_LEN - 3));
  trainer_tokens(r, V, C, *cls, len, tok);
  return len;
}

uint64_t trainer_fnv1a_more(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t trainer_fnv1a(const void *p, size_t n) {
  return trainer_fnv1a_more(TRAINER_FNV_INIT, p, n);
}

int trainer_parse_counts(const char *s, int *out, int max, int hi) {
  int n = 0;
  for (;;) {
    long v = 0;
    const char *start = s;
    /* v stops growing past hi: no overflow, however many digits */
    for (; *s >= '0' && *s <= '9'; s++)
      if (v <= hi)
        v = v * 10 + (*s - '0');
    if (s == start || v < 1 || v > hi || n == max)
      return -1;
    out[n++] = (int)v;
    if (!*s)
      return n;
    if (*s++ != ',')
      return -1;
  }
}

double trainer_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void trainer_sleep_ms(int ms) {
  if (ms <= 0)
    return;
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int trainer_envint(const char *name, int def) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : def;
}

/* Wait for DIR/NAME.RANK and read the endpoint line in it; 0 or -1 after
 * deadline (monotonic seconds). */
static int read_endpoint(const char *path, char *ep, size_t len,
                         double deadline) {
  for (;;) {
    FILE *g = fopen(path, "r");
    if (g) {
      int got = fgets(ep, (int)len, g) && ep[strcspn(ep, "\n")] == '\n';
      fclose(g);
      if (got) {
        ep[strcspn(ep, "\n")] = 0;
        return 0;
      }
    }
    if (trainer_now_s() > deadline)
      return -1;
    trainer_sleep_ms(10);
  }
}

int trainer_rendezvous(const char *prog, const char *dir, const char *name,
                       int rank, int n, int unprotected, resihp_comm_t **out) {
  enum { EP_LEN = 300 };
  char ep[EP_LEN], path[4096], tmp[4200], host[256];
  int rc = 2;
  char **eps = NULL;
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  socklen_t al = sizeof(a);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) ||
      listen(lfd, 64) || getsockname(lfd, (struct sockaddr *)&a, &al)) {
    fprintf(stderr, "%s: cannot listen: %s\n", prog, strerror(errno));
    goto out;
  }
  if (gethostname(host, sizeof(host)))
    snprintf(host, sizeof(host), "127.0.0.1");
  snprintf(ep, sizeof(ep), "%s:%d", host, ntohs(a.sin_port));
  snprintf(path, sizeof(path), "%s/%s.%d", dir, name, rank);
  /* written whole, then renamed: a reader never sees half an endpoint */
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%s\n", ep) < 0 || fclose(f) || rename(tmp, path)) {
    fprintf(stderr, "%s: cannot write %s\n", prog, path);
    goto out;
  }
  eps = calloc((size_t)n, sizeof(char *));
  if (!eps)
    goto out;
  double deadline = trainer_now_s() + 30;
  for (int r = 0; r < n; r++) {
    snprintf(path, sizeof(path), "%s/%s.%d", dir, name, r);
    eps[r] = calloc(1, EP_LEN);
    if (!eps[r] || read_endpoint(path, eps[r], EP_LEN, deadline)) {
      fprintf(stderr,
              "%s[%d]: no endpoint from rank %d in %s after 30 s: are all "
              "%d tasks running, with the same directory?\n",
              prog, rank, r, path, n);
      goto out;
    }
  }
  resihp_comm_opts_t co;
  resihp_comm_opts_init(&co);
  co.rank = rank;
  co.nranks = n;
  co.endpoints = (const char *const *)eps;
  co.listen_fd = lfd;
  co.unprotected = unprotected;
  int e = resihp_comm_create(&co, out);
  if (e) {
    fprintf(stderr, "%s[%d]: communicator: %s\n", prog, rank,
            resihp_strerror(e));
    rc = 1;
    goto out;
  }
  rc = 0;
out:
  for (int r = 0; eps && r < n; r++)
    free(eps[r]);
  free(eps);
  /* the communicator does not own the listening socket; after the mesh
   * is up nobody connects to it again */
  if (lfd >= 0)
    close(lfd);
  return rc;
}
