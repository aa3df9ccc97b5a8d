/* SPDX-License-Identifier: BSD-3-Clause */
/* The baselines' rendezvous (trainer-common.h): a file of its own, so that
 * the pure parts of trainer-common.c (parsers, data, arithmetic) link
 * without libresihp (the --partition fuzz target, standalone). */
#include "trainer-common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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
