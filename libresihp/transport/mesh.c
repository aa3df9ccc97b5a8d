/* SPDX-License-Identifier: BSD-3-Clause */
/* Full-mesh set-up with mutual HMAC-SHA-256 authentication (see mesh.h for
 * the exchange). Every wait is bounded by the caller's deadline; a single
 * bad connection never costs more than HANDSHAKE_MS. */
#include "config.h"

#include "mesh.h"
#include "sha256.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MESH_MAGIC 0x52534841u /* "RSHA" */
#define MESH_VERSION 1
#define HANDSHAKE_MS 3000
#define NONCE 32

struct hello {
  uint32_t magic;
  uint16_t version;
  uint8_t channel;
  uint8_t pad;
  uint32_t src, dst, nranks;
  uint8_t nonce[NONCE];
};

struct challenge {
  uint32_t magic;
  uint8_t nonce[NONCE];
  uint8_t mac[RESIHP__SHA256_LEN];
};

int64_t resihp__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int remaining(int64_t deadline) {
  int64_t r = deadline - resihp__now_ms();
  return r < 0 ? 0 : (r > 1000000 ? 1000000 : (int)r);
}

int resihp__io_full(int fd, void *buf, size_t len, int writing,
                    int64_t deadline_ms) {
  uint8_t *p = buf;
  while (len) {
    ssize_t r = writing ? send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL)
                        : recv(fd, p, len, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      len -= (size_t)r;
      continue;
    }
    if (r == 0)
      return RESIHP_ECLOSED;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return RESIHP_EPEER;
    struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
    int t = remaining(deadline_ms);
    if (t == 0)
      return RESIHP_ETIMEDOUT;
    if (poll(&pfd, 1, t) < 0 && errno != EINTR)
      return RESIHP_ESYS;
  }
  return 0;
}

static void tune(int fd) {
  int one = 1, big = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  /* Room for several chunks in flight; the kernel caps it at wmem_max. */
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

static int split_endpoint(const char *ep, char *host, size_t hl, char *port,
                          size_t pl) {
  const char *colon = ep ? strrchr(ep, ':') : NULL;
  if (!colon || colon == ep || (size_t)(colon - ep) >= hl ||
      strlen(colon + 1) >= pl || !colon[1])
    return RESIHP_EINVAL;
  memcpy(host, ep, (size_t)(colon - ep));
  host[colon - ep] = '\0';
  strcpy(port, colon + 1);
  return 0;
}

static int resolve(const char *ep, struct sockaddr_storage *sa,
                   socklen_t *salen) {
  char host[256], port[32];
  if (split_endpoint(ep, host, sizeof(host), port, sizeof(port))) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "bad endpoint '%.100s': write host:port", ep ? ep : "(null)");
    return RESIHP_EINVAL;
  }
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM},
                  *res;
  int rc = getaddrinfo(host, port, &hints, &res);
  if (rc) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce", "cannot resolve '%s': %s", ep,
               gai_strerror(rc));
    return RESIHP_EINVAL;
  }
  memcpy(sa, res->ai_addr, res->ai_addrlen);
  *salen = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

static void mac(const uint8_t *key, size_t keylen, const char *label,
                const struct hello *h, const uint8_t *nonce_s,
                uint8_t out[RESIHP__SHA256_LEN]) {
  const void *parts[3] = {label, h, nonce_s};
  size_t lens[3] = {strlen(label), sizeof(*h), NONCE};
  resihp__hmac_sha256(key, keylen, parts, lens, 3, out);
}

static int connect_once(const struct sockaddr_storage *sa, socklen_t salen,
                        int64_t deadline) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return RESIHP_ESYS;
  if (connect(fd, (const struct sockaddr *)sa, salen) < 0 &&
      errno != EINPROGRESS) {
    close(fd);
    return RESIHP_ECLOSED;
  }
  struct pollfd pfd = {.fd = fd, .events = POLLOUT};
  int t = remaining(deadline);
  if (poll(&pfd, 1, t) <= 0) {
    close(fd);
    return RESIHP_ETIMEDOUT;
  }
  int err = 0;
  socklen_t el = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
  if (err) {
    close(fd);
    return RESIHP_ECLOSED;
  }
  return fd;
}

int resihp__mesh_dial(const char *endpoint, const uint8_t *secret,
                      size_t secret_len, int src, int dst, int nranks,
                      int channel, int64_t deadline_ms) {
  struct sockaddr_storage sa;
  socklen_t salen;
  int rc = resolve(endpoint, &sa, &salen);
  if (rc)
    return rc;
  int fd;
  /* The peer may not listen yet: retry refused connections until the
   * deadline. */
  for (int delay = 5;; delay = delay < 200 ? delay * 2 : 200) {
    fd = connect_once(&sa, salen, deadline_ms);
    if (fd >= 0)
      break;
    if (fd != RESIHP_ECLOSED || remaining(deadline_ms) <= delay) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "cannot connect to rank %d at %s before the deadline: is it "
                 "running?",
                 dst, endpoint);
      return RESIHP_ETIMEDOUT;
    }
    struct timespec ts = {0, delay * 1000000L};
    nanosleep(&ts, NULL);
  }
  tune(fd);
  int64_t hs_deadline = resihp__now_ms() + HANDSHAKE_MS;
  if (hs_deadline > deadline_ms)
    hs_deadline = deadline_ms;
  struct hello h = {.magic = MESH_MAGIC,
                    .version = MESH_VERSION,
                    .channel = (uint8_t)channel,
                    .src = (uint32_t)src,
                    .dst = (uint32_t)dst,
                    .nranks = (uint32_t)nranks};
  struct challenge c;
  uint8_t want[RESIHP__SHA256_LEN], resp[RESIHP__SHA256_LEN], verdict = 0;
  if (getrandom(h.nonce, NONCE, 0) != NONCE) {
    rc = RESIHP_ESYS;
    goto fail;
  }
  if ((rc = resihp__io_full(fd, &h, sizeof(h), 1, hs_deadline)) ||
      (rc = resihp__io_full(fd, &c, sizeof(c), 0, hs_deadline)))
    goto fail;
  mac(secret, secret_len, "resihp-srv", &h, c.nonce, want);
  if (c.magic != MESH_MAGIC ||
      resihp__ct_memcmp(want, c.mac, sizeof(want))) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "rank %d at %s failed authentication (it does not know this "
               "job's secret): check RESIHP_SECRET_FILE on both sides",
               dst, endpoint);
    rc = RESIHP_EAUTH;
    goto fail;
  }
  mac(secret, secret_len, "resihp-cli", &h, c.nonce, resp);
  if ((rc = resihp__io_full(fd, resp, sizeof(resp), 1, hs_deadline)) ||
      (rc = resihp__io_full(fd, &verdict, 1, 0, hs_deadline)))
    goto fail;
  if (verdict != 1) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "rank %d at %s refused this rank", dst, endpoint);
    rc = RESIHP_EAUTH;
    goto fail;
  }
  return fd;
fail:
  if (rc == RESIHP_ECLOSED || rc == RESIHP_EPEER) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "rank %d at %s closed the connection during authentication "
               "(wrong secret?)",
               dst, endpoint);
    rc = RESIHP_EAUTH;
  }
  close(fd);
  return rc;
}

/* Server half on an accepted socket: returns 0 and sets *src and *channel, or
 * a negative code (the caller refuses the connection). */
static int serve(int fd, const resihp__mesh_opts_t *o, int *src, int *channel,
                 const char *who) {
  int64_t deadline = resihp__now_ms() + HANDSHAKE_MS;
  struct hello h;
  struct challenge c = {.magic = MESH_MAGIC};
  uint8_t want[RESIHP__SHA256_LEN], got[RESIHP__SHA256_LEN], verdict = 0;
  int rc = resihp__io_full(fd, &h, sizeof(h), 0, deadline);
  if (rc) {
    resihp_log(RESIHP_LOG_WARN, "allreduce",
               "refused connection from %s: no complete hello (%s)", who,
               resihp_strerror(rc));
    return rc;
  }
  if (h.magic != MESH_MAGIC || h.version != MESH_VERSION || h.channel > 1 ||
      h.dst != (uint32_t)o->rank || h.nranks != (uint32_t)o->nranks ||
      h.src <= (uint32_t)o->rank || h.src >= (uint32_t)o->nranks) {
    resihp_log(RESIHP_LOG_WARN, "allreduce",
               "refused connection from %s: bad hello (claims rank %u of %u "
               "to rank %u): a stray client or a mismatched job",
               who, h.src, h.nranks, h.dst);
    return RESIHP_EPROTO;
  }
  if (getrandom(c.nonce, NONCE, 0) != NONCE)
    return RESIHP_ESYS;
  mac(o->secret, o->secret_len, "resihp-srv", &h, c.nonce, c.mac);
  if ((rc = resihp__io_full(fd, &c, sizeof(c), 1, deadline)) ||
      (rc = resihp__io_full(fd, got, sizeof(got), 0, deadline))) {
    resihp_log(RESIHP_LOG_WARN, "allreduce",
               "refused connection from %s claiming rank %u: it did not "
               "answer the challenge (%s)",
               who, h.src, resihp_strerror(rc));
    return rc;
  }
  mac(o->secret, o->secret_len, "resihp-cli", &h, c.nonce, want);
  if (resihp__ct_memcmp(want, got, sizeof(want))) {
    resihp_log(RESIHP_LOG_WARN, "allreduce",
               "refused connection from %s claiming rank %u: wrong HMAC "
               "(it does not know this job's secret)",
               who, h.src);
    resihp__io_full(fd, &verdict, 1, 1, deadline);
    return RESIHP_EAUTH;
  }
  verdict = 1;
  if ((rc = resihp__io_full(fd, &verdict, 1, 1, deadline)))
    return rc;
  *src = (int)h.src;
  *channel = h.channel;
  return 0;
}

static int open_listener(const char *ep) {
  struct sockaddr_storage sa;
  socklen_t salen;
  int rc = resolve(ep, &sa, &salen);
  if (rc)
    return rc;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0)
    return RESIHP_ESYS;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, (struct sockaddr *)&sa, salen) < 0 || listen(fd, 128) < 0) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce", "cannot listen on %s: %s", ep,
               strerror(errno));
    close(fd);
    return RESIHP_ESYS;
  }
  return fd;
}

int resihp__mesh_connect(const resihp__mesh_opts_t *o, int *data_fds,
                         int *ctrl_fds) {
  int64_t deadline = resihp__now_ms() + o->timeout_ms;
  int lfd = o->listen_fd, own_listener = 0, rc = 0;
  for (int i = 0; i < o->nranks; i++)
    data_fds[i] = ctrl_fds[i] = -1;
  if (lfd < 0 && o->rank < o->nranks - 1) {
    lfd = open_listener(o->endpoints[o->rank]);
    if (lfd < 0)
      return lfd;
    own_listener = 1;
  }
  /* Lower ranks first; they accept only once their own dials are done, so
   * the dependency chain always ends at rank 0 and cannot deadlock. */
  for (int j = 0; j < o->rank; j++) {
    for (int ch = 0; ch < 2; ch++) {
      int fd = resihp__mesh_dial(o->endpoints[j], o->secret, o->secret_len,
                                 o->rank, j, o->nranks, ch, deadline);
      if (fd < 0) {
        rc = fd;
        goto fail;
      }
      (ch ? ctrl_fds : data_fds)[j] = fd;
    }
  }
  int missing = 2 * (o->nranks - 1 - o->rank);
  while (missing > 0) {
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    int t = remaining(deadline);
    if (t == 0 || poll(&pfd, 1, t) == 0) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "rank %d: %d connection(s) from higher ranks missing after "
                 "%d ms: did every rank start, with the same endpoint list?",
                 o->rank, missing, o->timeout_ms);
      rc = RESIHP_ETIMEDOUT;
      goto fail;
    }
    struct sockaddr_in from;
    socklen_t fl = sizeof(from);
    int fd = accept4(lfd, (struct sockaddr *)&from, &fl,
                     SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      continue;
    tune(fd);
    char who[64];
    snprintf(who, sizeof(who), "%s:%u", inet_ntoa(from.sin_addr),
             ntohs(from.sin_port));
    int src = -1, ch = -1;
    if (serve(fd, o, &src, &ch, who)) {
      close(fd);
      continue;
    }
    int *slot = &(ch ? ctrl_fds : data_fds)[src];
    if (*slot >= 0) {
      resihp_log(RESIHP_LOG_WARN, "allreduce",
                 "refused duplicate connection from %s (rank %d channel %d)",
                 who, src, ch);
      close(fd);
      continue;
    }
    *slot = fd;
    missing--;
  }
  if (own_listener)
    close(lfd);
  return 0;
fail:
  for (int i = 0; i < o->nranks; i++) {
    if (data_fds[i] >= 0)
      close(data_fds[i]);
    if (ctrl_fds[i] >= 0)
      close(ctrl_fds[i]);
    data_fds[i] = ctrl_fds[i] = -1;
  }
  if (own_listener)
    close(lfd);
  return rc;
}

void resihp__graceful_close(int *fds, int n, int linger_ms) {
  int64_t deadline = resihp__now_ms() + linger_ms;
  int open_fds = 0;
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) {
      shutdown(fds[i], SHUT_WR);
      open_fds++;
    }
  struct pollfd *pfd = open_fds ? calloc((size_t)open_fds, sizeof(*pfd)) : NULL;
  int *idx = open_fds ? calloc((size_t)open_fds, sizeof(int)) : NULL;
  while (pfd && idx) {
    int k = 0;
    for (int i = 0; i < n; i++)
      if (fds[i] >= 0) {
        pfd[k] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        idx[k++] = i;
      }
    int t = remaining(deadline);
    if (!k || !t || poll(pfd, (nfds_t)k, t) <= 0)
      break;
    for (int j = 0; j < k; j++) {
      if (!pfd[j].revents)
        continue;
      char sink[4096];
      ssize_t r = recv(pfd[j].fd, sink, sizeof(sink), MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        close(fds[idx[j]]);
        fds[idx[j]] = -1;
      }
    }
  }
  free(pfd);
  free(idx);
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) {
      close(fds[i]);
      fds[i] = -1;
    }
}
