/* SPDX-License-Identifier: BSD-3-Clause */
/* Text messages and mutual authentication of coordinator and catch-up
 * connections (see wire.h). */
#include "config.h"

#include "../transport/mesh.h"
#include "../transport/sha256.h"
#include "wire.h"

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
#include <unistd.h>

#define NONCE_LEN 16

void resihp__wire_init(resihp__wire_t *w, int fd) {
  w->fd = fd;
  w->buf = NULL;
  w->len = w->cap = 0;
}

void resihp__wire_free(resihp__wire_t *w) {
  if (w->fd >= 0)
    close(w->fd);
  w->fd = -1;
  free(w->buf);
  w->buf = NULL;
  w->len = w->cap = 0;
}

int resihp__wire_fill(resihp__wire_t *w) {
  for (;;) {
    if (w->cap - w->len < 4096) {
      if (w->cap >= RESIHP__WIRE_LINE_MAX * 2)
        return RESIHP_EPROTO;
      size_t nc = w->cap ? w->cap * 2 : 8192;
      char *nb = realloc(w->buf, nc);
      if (!nb)
        return RESIHP_ENOMEM;
      w->buf = nb;
      w->cap = nc;
    }
    ssize_t r = recv(w->fd, w->buf + w->len, w->cap - w->len, MSG_DONTWAIT);
    if (r > 0) {
      w->len += (size_t)r;
      continue;
    }
    if (r == 0)
      return RESIHP_ECLOSED;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 0;
    if (errno == EINTR)
      continue;
    return RESIHP_EIO;
  }
}

int resihp__wire_take(resihp__wire_t *w, char *out, size_t cap) {
  char *nl = w->len ? memchr(w->buf, '\n', w->len) : NULL;
  if (!nl)
    return 0;
  size_t n = (size_t)(nl - w->buf);
  size_t c = n < cap - 1 ? n : cap - 1;
  memcpy(out, w->buf, c);
  out[c] = '\0';
  memmove(w->buf, nl + 1, w->len - n - 1);
  w->len -= n + 1;
  return 1;
}

int resihp__wire_recv(resihp__wire_t *w, char *out, size_t cap,
                      int64_t deadline_ms) {
  for (;;) {
    if (resihp__wire_take(w, out, cap))
      return 0;
    int rc = resihp__wire_fill(w);
    if (resihp__wire_take(w, out, cap))
      return 0;
    if (rc < 0)
      return rc;
    int64_t left = deadline_ms - resihp__now_ms();
    if (left <= 0)
      return RESIHP_ETIMEDOUT;
    struct pollfd p = {.fd = w->fd, .events = POLLIN};
    poll(&p, 1, left > 1000 ? 1000 : (int)left);
  }
}

int resihp__wire_send(int fd, const char *line, int64_t deadline_ms) {
  size_t n = strlen(line);
  char stackbuf[1024];
  char *b = n + 1 <= sizeof(stackbuf) ? stackbuf : malloc(n + 1);
  if (!b)
    return RESIHP_ENOMEM;
  memcpy(b, line, n);
  b[n] = '\n';
  int rc = resihp__io_full(fd, b, n + 1, 1, deadline_ms);
  if (b != stackbuf)
    free(b);
  return rc;
}

static void hex(char *out, const uint8_t *in, size_t n) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[in[i] >> 4];
    out[2 * i + 1] = d[in[i] & 15];
  }
  out[2 * n] = '\0';
}

static void mac(const uint8_t *secret, size_t slen, const char *label,
                const char *side, const char *n1, const char *n2,
                char out[2 * RESIHP__SHA256_LEN + 1]) {
  const void *parts[4] = {label, side, n1, n2};
  size_t lens[4] = {strlen(label), strlen(side), strlen(n1), strlen(n2)};
  uint8_t m[RESIHP__SHA256_LEN];
  resihp__hmac_sha256(secret, slen, parts, lens, 4, m);
  hex(out, m, sizeof(m));
}

static int nonce(char out[2 * NONCE_LEN + 1]) {
  uint8_t r[NONCE_LEN];
  if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
    return RESIHP_ESYS;
  hex(out, r, sizeof(r));
  return 0;
}

int resihp__wire_auth_server(resihp__wire_t *w, const uint8_t *secret,
                             size_t slen, const char *label,
                             int64_t deadline_ms) {
  char ns[2 * NONCE_LEN + 1], line[512], nc[80], got[80], want[80];
  int rc = nonce(ns);
  if (rc)
    return rc;
  snprintf(line, sizeof(line), "AUTH1 %s %s", label, ns);
  if ((rc = resihp__wire_send(w->fd, line, deadline_ms)))
    return rc;
  if ((rc = resihp__wire_recv(w, line, sizeof(line), deadline_ms)))
    return rc;
  if (sscanf(line, "AUTH2 %64s %70s", nc, got) != 2 ||
      strlen(nc) != 2 * NONCE_LEN)
    return RESIHP_EAUTH;
  mac(secret, slen, label, "cli", ns, nc, want);
  if (strlen(got) != strlen(want) ||
      resihp__ct_memcmp(got, want, strlen(want)) != 0)
    return RESIHP_EAUTH;
  mac(secret, slen, label, "srv", nc, ns, want);
  snprintf(line, sizeof(line), "AUTH3 %s", want);
  return resihp__wire_send(w->fd, line, deadline_ms);
}

int resihp__wire_auth_client(resihp__wire_t *w, const uint8_t *secret,
                             size_t slen, const char *label,
                             int64_t deadline_ms) {
  char line[512], lab[64], ns[80], nc[2 * NONCE_LEN + 1], want[80], got[80];
  int rc = resihp__wire_recv(w, line, sizeof(line), deadline_ms);
  if (rc)
    return rc;
  if (sscanf(line, "AUTH1 %63s %70s", lab, ns) != 2 || strcmp(lab, label) ||
      strlen(ns) != 2 * NONCE_LEN)
    return RESIHP_EAUTH;
  if ((rc = nonce(nc)))
    return rc;
  mac(secret, slen, label, "cli", ns, nc, want);
  snprintf(line, sizeof(line), "AUTH2 %s %s", nc, want);
  if ((rc = resihp__wire_send(w->fd, line, deadline_ms)))
    return rc;
  if ((rc = resihp__wire_recv(w, line, sizeof(line), deadline_ms)))
    return rc == RESIHP_ECLOSED ? RESIHP_EAUTH : rc;
  if (sscanf(line, "AUTH3 %70s", got) != 1)
    return RESIHP_EAUTH;
  mac(secret, slen, label, "srv", nc, ns, want);
  if (strlen(got) != strlen(want) ||
      resihp__ct_memcmp(got, want, strlen(want)) != 0)
    return RESIHP_EAUTH;
  return 0;
}

static int split(const char *endpoint, char *host, size_t hcap, char *port,
                 size_t pcap) {
  const char *c = strrchr(endpoint, ':');
  if (!c || c == endpoint || (size_t)(c - endpoint) >= hcap ||
      strlen(c + 1) >= pcap || !c[1])
    return RESIHP_EINVAL;
  memcpy(host, endpoint, (size_t)(c - endpoint));
  host[c - endpoint] = '\0';
  strcpy(port, c + 1);
  return 0;
}

int resihp__wire_dial(const char *endpoint, int64_t deadline_ms) {
  char host[256], port[16];
  if (split(endpoint, host, sizeof(host), port, sizeof(port)))
    return RESIHP_EINVAL;
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  if (getaddrinfo(host, port, &hints, &ai) || !ai)
    return RESIHP_ENOENT;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    return RESIHP_ESYS;
  }
  int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (rc < 0 && errno != EINPROGRESS) {
    close(fd);
    return RESIHP_EPEER;
  }
  if (rc < 0) {
    for (;;) {
      int64_t left = deadline_ms - resihp__now_ms();
      if (left <= 0) {
        close(fd);
        return RESIHP_ETIMEDOUT;
      }
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      if (poll(&p, 1, (int)(left > 1000 ? 1000 : left)) > 0)
        break;
    }
    int err = 0;
    socklen_t el = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) {
      close(fd);
      return RESIHP_EPEER;
    }
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

int resihp__wire_listen(const char *host, int port, int *port_out) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return RESIHP_ESYS;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (host && *host && inet_pton(AF_INET, host, &a.sin_addr) != 1) {
    close(fd);
    return RESIHP_EINVAL;
  }
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 128) < 0) {
    close(fd);
    return RESIHP_ESYS;
  }
  socklen_t al = sizeof(a);
  getsockname(fd, (struct sockaddr *)&a, &al);
  if (port_out)
    *port_out = ntohs(a.sin_port);
  return fd;
}

static int get_value(const char *msg, const char *key, const char *stop,
                     char *out, size_t cap) {
  size_t kl = strlen(key);
  const char *p = msg;
  while ((p = strstr(p, key))) {
    if ((p == msg || p[-1] == ' ') && p[kl] == '=') {
      p += kl + 1;
      size_t n = strcspn(p, stop);
      if (n >= cap)
        return RESIHP_ERANGE;
      memcpy(out, p, n);
      out[n] = '\0';
      return 0;
    }
    p += kl;
  }
  return RESIHP_ENOENT;
}

int resihp__wire_get(const char *msg, const char *key, char *out, size_t cap) {
  return get_value(msg, key, " ", out, cap);
}

int resihp__wire_get_rest(const char *msg, const char *key, char *out,
                          size_t cap) {
  return get_value(msg, key, "", out, cap);
}

int resihp__wire_get_long(const char *msg, const char *key, long *out) {
  char v[32], *end;
  int rc = resihp__wire_get(msg, key, v, sizeof(v));
  if (rc)
    return rc;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end)
    return RESIHP_EPROTO;
  *out = x;
  return 0;
}

int resihp__wire_parse_ints(const char *s, int **out, int *n) {
  int cnt = 0;
  if (*s)
    cnt = 1;
  for (const char *p = s; *p; p++)
    cnt += *p == ':';
  int *a = malloc(sizeof(int) * (size_t)(cnt ? cnt : 1));
  if (!a)
    return RESIHP_ENOMEM;
  const char *p = s;
  for (int i = 0; i < cnt; i++) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || (*end && *end != ':') || v < 0 || v > 1000000000) {
      free(a);
      return RESIHP_EPROTO;
    }
    a[i] = (int)v;
    p = *end ? end + 1 : end;
  }
  *out = a;
  *n = cnt;
  return 0;
}

int resihp__wire_read_secret(const char *path, uint8_t **out, size_t *len) {
  if (!path || !*path) {
    resihp_log(RESIHP_LOG_ERROR, "coord",
               "no job secret: set RESIHP_SECRET_FILE (resihp-run does)");
    return RESIHP_EINVAL;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    resihp_log(RESIHP_LOG_ERROR, "coord", "cannot read secret file %s: %s",
               path, strerror(errno));
    return RESIHP_EIO;
  }
  uint8_t *b = malloc(4096);
  if (!b) {
    close(fd);
    return RESIHP_ENOMEM;
  }
  ssize_t n = read(fd, b, 4096);
  close(fd);
  if (n <= 0) {
    free(b);
    resihp_log(RESIHP_LOG_ERROR, "coord", "secret file %s is empty", path);
    return RESIHP_EIO;
  }
  *out = b;
  *len = (size_t)n;
  return 0;
}
