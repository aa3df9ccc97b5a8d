/* SPDX-License-Identifier: BSD-3-Clause */
/* Lines, their tags, raw data and the message parsers of the control
 * plane (see wire.h; the handshakes are in handshake.c). */
#include "config.h"

#include "../transport/mesh.h"
#include "wire.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define TAG_PREFIX " mac="
#define TAG_TEXT (sizeof(TAG_PREFIX) - 1 + RESIHP__MAC_HEX)

/* A line's tag covers its digest, under a label of its own:
 * HMAC(key, seq | "resihp-line" | SHA-256(line)). A line that goes to many
 * peers (a member list to every joiner) is hashed once, and each peer's
 * tag costs a few blocks whatever the line's length; the label keeps a
 * line's tag from ever matching that of raw bytes (resihp__wire_seal). */
static const char LINE_LABEL[] = "resihp-line";

void resihp__wire_line_digest(const char *line, size_t n,
                              uint8_t digest[RESIHP__SHA256_LEN]) {
  resihp__sha256_t h;
  resihp__sha256_init(&h);
  resihp__sha256_update(&h, line, n);
  resihp__sha256_final(&h, digest);
}

static void line_parts(const uint8_t *digest, const void *parts[2],
                       size_t lens[2]) {
  parts[0] = LINE_LABEL;
  lens[0] = sizeof(LINE_LABEL) - 1;
  parts[1] = digest;
  lens[1] = RESIHP__SHA256_LEN;
}

void resihp__wire_init(resihp__wire_t *w, int fd) {
  memset(w, 0, sizeof(*w));
  w->fd = fd;
  w->max = RESIHP__WIRE_LINE_MAX;
}

void resihp__wire_free(resihp__wire_t *w) {
  if (w->fd >= 0)
    close(w->fd);
  free(w->buf);
  free(w->out);
  memset(w, 0, sizeof(*w)); /* the session keys too */
  w->fd = -1;
  w->max = RESIHP__WIRE_LINE_MAX;
}

/* The first buffered line has no end within the limit (its type's, once
 * its name has come). */
static int first_line_too_long(const resihp__wire_t *w) {
  size_t max = w->max;
  if (w->line_max && w->len) {
    size_t m = w->line_max(w->buf, w->len);
    if (m < max)
      max = m;
  }
  return w->len > max && !memchr(w->buf, '\n', max + 1);
}

int resihp__wire_fill(resihp__wire_t *w) {
  /* Two lines' worth is plenty to work on: the rest can wait in the
   * socket, so a peer cannot make this buffer grow without bound. */
  size_t limit = 2 * (w->max + 1);
  for (;;) {
    if (first_line_too_long(w))
      return RESIHP_EPROTO;
    if (w->len >= limit)
      return 0;
    if (w->cap - w->len < 4096 && w->cap < limit) {
      size_t nc = w->cap ? 2 * w->cap : 1024;
      if (nc > limit)
        nc = limit;
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

static void consume(resihp__wire_t *w, size_t n) {
  memmove(w->buf, w->buf + n, w->len - n);
  w->len -= n;
}

int resihp__wire_take(resihp__wire_t *w, char *out, size_t cap) {
  char *nl = w->len ? memchr(w->buf, '\n', w->len) : NULL;
  if (!nl)
    return 0;
  size_t n = (size_t)(nl - w->buf), body = n;
  int rc = 1;
  if (w->sealed) {
    uint8_t tag[RESIHP__MAC_LEN];
    body = n >= TAG_TEXT ? n - TAG_TEXT : 0;
    if (n < TAG_TEXT ||
        memcmp(w->buf + body, TAG_PREFIX, sizeof(TAG_PREFIX) - 1) ||
        resihp__mac_from_hex(w->buf + n - RESIHP__MAC_HEX, RESIHP__MAC_HEX,
                             tag)) {
      rc = RESIHP_EAUTH;
    } else {
      uint8_t digest[RESIHP__SHA256_LEN];
      const void *parts[2];
      size_t lens[2];
      resihp__wire_line_digest(w->buf, body, digest);
      line_parts(digest, parts, lens);
      rc = resihp__msgauth_open(&w->auth, parts, lens, 2, tag) ? RESIHP_EAUTH
                                                               : 1;
    }
  }
  if (rc == 1 && memchr(w->buf, '\0', body))
    rc = RESIHP_EPROTO; /* a NUL would cut the line short for its reader */
  if (rc == 1 && body >= cap)
    rc = RESIHP_ERANGE;
  if (rc == 1) {
    memcpy(out, w->buf, body);
    out[body] = '\0';
  }
  consume(w, n + 1);
  return rc;
}

int resihp__wire_recv(resihp__wire_t *w, char *out, size_t cap,
                      int64_t deadline_ms) {
  for (;;) {
    int t = resihp__wire_take(w, out, cap);
    if (t)
      return t < 0 ? t : 0;
    int rc = resihp__wire_fill(w);
    if ((t = resihp__wire_take(w, out, cap)))
      return t < 0 ? t : 0;
    if (rc < 0)
      return rc;
    int64_t left = deadline_ms - resihp__now_ms();
    if (left <= 0)
      return RESIHP_ETIMEDOUT;
    struct pollfd p = {.fd = w->fd, .events = POLLIN};
    poll(&p, 1, left > 1000 ? 1000 : (int)left);
  }
}

/* Room for more bytes at the end of the output queue. */
static int out_reserve(resihp__wire_t *w, size_t more) {
  if (w->out_off == w->out_len)
    w->out_off = w->out_len = 0;
  if (w->out_len + more <= w->out_cap)
    return 0;
  if (w->out_off) { /* what left makes room first */
    memmove(w->out, w->out + w->out_off, w->out_len - w->out_off);
    w->out_len -= w->out_off;
    w->out_off = 0;
    if (w->out_len + more <= w->out_cap)
      return 0;
  }
  size_t cap = w->out_cap ? w->out_cap : 4096;
  while (cap < w->out_len + more)
    cap *= 2;
  char *n = realloc(w->out, cap);
  if (!n)
    return RESIHP_ENOMEM;
  w->out = n;
  w->out_cap = cap;
  return 0;
}

int resihp__wire_queue(resihp__wire_t *w, const char *line) {
  return resihp__wire_queue_hashed(w, line, NULL);
}

/* Bytes [from, n) of the two pieces appended to the output queue. */
static int queue_rest(resihp__wire_t *w, const struct iovec *iov, size_t from) {
  size_t total = iov[0].iov_len + iov[1].iov_len;
  if (out_reserve(w, total - from))
    return RESIHP_ENOMEM;
  for (int i = 0; i < 2; i++) {
    size_t len = iov[i].iov_len, skip = from < len ? from : len;
    memcpy(w->out + w->out_len, (const char *)iov[i].iov_base + skip,
           len - skip);
    w->out_len += len - skip;
    from -= skip;
  }
  return 0;
}

int resihp__wire_queue_hashed(resihp__wire_t *w, const char *line,
                              const uint8_t *digest) {
  size_t n = strlen(line), extra = w->sealed ? TAG_TEXT : 0;
  if (n + extra > RESIHP__WIRE_LINE_MAX || memchr(line, '\n', n)) {
    resihp_log(RESIHP_LOG_ERROR, "wire",
               "refused to send a %zu-byte line '%.40s...': over the %d-byte "
               "limit or with a newline inside",
               n, line, RESIHP__WIRE_LINE_MAX);
    return RESIHP_ERANGE;
  }
  char tail[TAG_TEXT + 1];
  if (w->sealed) {
    uint8_t tag[RESIHP__MAC_LEN], own[RESIHP__SHA256_LEN];
    if (!digest)
      resihp__wire_line_digest(line, n, own);
    const void *parts[2];
    size_t lens[2];
    line_parts(digest ? digest : own, parts, lens);
    resihp__msgauth_seal(&w->auth, parts, lens, 2, tag);
    memcpy(tail, TAG_PREFIX, sizeof(TAG_PREFIX) - 1);
    resihp__mac_to_hex(tag, tail + sizeof(TAG_PREFIX) - 1);
  }
  tail[extra] = '\n';
  struct iovec iov[2] = {{(void *)line, n}, {tail, extra + 1}};
  size_t sent = 0;
  if (w->out_off == w->out_len) {
    /* Nothing waits: straight from the caller's line, and only what the
     * socket does not take now is copied. */
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t r;
    do
      r = sendmsg(w->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return w->fd < 0 ? RESIHP_ECLOSED : RESIHP_EPEER;
    sent = r > 0 ? (size_t)r : 0;
    if (sent == n + extra + 1)
      return 0;
  }
  if (queue_rest(w, iov, sent))
    return RESIHP_ENOMEM;
  long left = resihp__wire_flush(w);
  return left < 0 ? (int)left : 0;
}

long resihp__wire_flush(resihp__wire_t *w) {
  while (w->out_off < w->out_len) {
    ssize_t r = send(w->fd, w->out + w->out_off, w->out_len - w->out_off,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      w->out_off += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    return w->fd < 0 ? RESIHP_ECLOSED : RESIHP_EPEER;
  }
  if (w->out_off == w->out_len) {
    w->out_off = w->out_len = 0;
    if (w->out_cap > 65536) { /* a long line's room is not kept */
      free(w->out);
      w->out = NULL;
      w->out_cap = 0;
    }
  }
  return (long)(w->out_len - w->out_off);
}

/* The queue written out before the deadline. */
static int drain_out(resihp__wire_t *w, int64_t deadline_ms) {
  long left;
  while ((left = resihp__wire_flush(w)) > 0) {
    int64_t t = deadline_ms - resihp__now_ms();
    if (t <= 0)
      return RESIHP_ETIMEDOUT;
    struct pollfd p = {.fd = w->fd, .events = POLLOUT};
    if (poll(&p, 1, t > 1000 ? 1000 : (int)t) < 0 && errno != EINTR)
      return RESIHP_ESYS;
  }
  return (int)left;
}

int resihp__wire_send(resihp__wire_t *w, const char *line,
                      int64_t deadline_ms) {
  int rc = resihp__wire_queue(w, line);
  return rc ? rc : drain_out(w, deadline_ms);
}

int resihp__wire_write(resihp__wire_t *w, const void *buf, size_t len,
                       int64_t deadline_ms) {
  int rc = drain_out(w, deadline_ms); /* what was queued goes first */
  if (rc)
    return rc;
  return len ? resihp__io_full(w->fd, (void *)buf, len, 1, deadline_ms) : 0;
}

int resihp__wire_read(resihp__wire_t *w, void *buf, size_t len,
                      int64_t deadline_ms) {
  size_t have = w->len < len ? w->len : len;
  if (have) {
    memcpy(buf, w->buf, have);
    consume(w, have);
  }
  if (have == len)
    return 0;
  return resihp__io_full(w->fd, (char *)buf + have, len - have, 0, deadline_ms);
}

int resihp__wire_seal(resihp__wire_t *w, const void *const *parts,
                      const size_t *lens, int n, int64_t deadline_ms) {
  if (!w->sealed)
    return 0;
  uint8_t tag[RESIHP__MAC_LEN];
  resihp__msgauth_seal(&w->auth, parts, lens, n, tag);
  return resihp__wire_write(w, tag, sizeof(tag), deadline_ms);
}

int resihp__wire_unseal(resihp__wire_t *w, const void *const *parts,
                        const size_t *lens, int n, int64_t deadline_ms) {
  if (!w->sealed)
    return 0;
  uint8_t tag[RESIHP__MAC_LEN];
  int rc = resihp__wire_read(w, tag, sizeof(tag), deadline_ms);
  if (rc)
    return rc;
  return resihp__msgauth_open(&w->auth, parts, lens, n, tag);
}

int resihp__wire_send_data(resihp__wire_t *w, const void *buf, size_t len,
                           int64_t deadline_ms) {
  const void *parts[1] = {buf};
  size_t lens[1] = {len};
  int rc = resihp__wire_write(w, buf, len, deadline_ms);
  return rc ? rc : resihp__wire_seal(w, parts, lens, 1, deadline_ms);
}

int resihp__wire_recv_data(resihp__wire_t *w, void *buf, size_t len,
                           int64_t deadline_ms) {
  const void *parts[1] = {buf};
  size_t lens[1] = {len};
  int rc = resihp__wire_read(w, buf, len, deadline_ms);
  return rc ? rc : resihp__wire_unseal(w, parts, lens, 1, deadline_ms);
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
  return resihp__wire_dial_stoppable(endpoint, deadline_ms, NULL);
}

/* A non-blocking connect to a, completed before the deadline (or given up
 * within 50 ms once *stop is set). */
static int dial_addr(const struct sockaddr *a, socklen_t al,
                     int64_t deadline_ms, const int *stop) {
  int fd = socket(a->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return RESIHP_ESYS;
  int rc = connect(fd, a, al);
  if (rc < 0 && errno != EINPROGRESS) {
    int e = errno;
    close(fd);
    errno = e;
    return RESIHP_EPEER;
  }
  if (rc < 0) {
    for (;;) {
      int64_t left = deadline_ms - resihp__now_ms();
      if (left <= 0 || (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE))) {
        close(fd);
        return left <= 0 ? RESIHP_ETIMEDOUT : RESIHP_ECLOSED;
      }
      int slice = stop ? 50 : 1000;
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      if (poll(&p, 1, (int)(left > slice ? slice : left)) > 0)
        break;
    }
    int err = 0;
    socklen_t el = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) {
      close(fd);
      errno = err; /* the caller may tell a refusal from the rest */
      return RESIHP_EPEER;
    }
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

int resihp__wire_dial_stoppable(const char *endpoint, int64_t deadline_ms,
                                const int *stop) {
  char host[256], port[16];
  if (split(endpoint, host, sizeof(host), port, sizeof(port)))
    return RESIHP_EINVAL;
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  if (getaddrinfo(host, port, &hints, &ai) || !ai)
    return RESIHP_ENOENT;
  int fd = dial_addr(ai->ai_addr, ai->ai_addrlen, deadline_ms, stop);
  int e = errno;
  freeaddrinfo(ai);
  errno = e;
  return fd;
}

int resihp__wire_dial_addr(const struct sockaddr_storage *a, socklen_t al,
                           int64_t deadline_ms) {
  if (!al || (a->ss_family != AF_INET && a->ss_family != AF_INET6))
    return RESIHP_EINVAL;
  return dial_addr((const struct sockaddr *)a, al, deadline_ms, NULL);
}

/* One listening socket; reuseport: one of a group on the same port. */
static int listen_one(const char *host, int port, int reuseport,
                      int *port_out) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return RESIHP_ESYS;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (reuseport &&
      setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one))) {
    close(fd);
    return RESIHP_ESYS;
  }
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (host && *host && inet_pton(AF_INET, host, &a.sin_addr) != 1) {
    close(fd);
    return RESIHP_EINVAL;
  }
  /* A whole job connects at once: a short queue drops SYNs, and each
   * dropped joiner waits a second for its retry. The kernel caps this at
   * net.core.somaxconn (4096 by default since Linux 5.4). */
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 65535) < 0) {
    close(fd);
    return RESIHP_ESYS;
  }
  socklen_t al = sizeof(a);
  getsockname(fd, (struct sockaddr *)&a, &al);
  if (port_out)
    *port_out = ntohs(a.sin_port);
  return fd;
}

int resihp__wire_listen(const char *host, int port, int *port_out) {
  return listen_one(host, port, 0, port_out);
}

int resihp__wire_listener_count(int expect, int somaxconn) {
  if (somaxconn < 1)
    somaxconn = 1;
  /* twice the room: the kernel spreads clients by a hash, not evenly */
  long n = (2L * (expect > 0 ? expect : 0) + somaxconn - 1) / somaxconn;
  return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

static int read_somaxconn(void) {
  FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
  int v = 0;
  if (f) {
    if (fscanf(f, "%d", &v) != 1)
      v = 0;
    fclose(f);
  }
  return v > 0 ? v : 4096;
}

/* Past one socket's queue the kernel drops SYNs, and each client dropped
 * waits a second for its retry: 10,000 replicas coming back after a
 * failover lost a second or more that way. Several sockets on one port
 * (SO_REUSEPORT) each have their own queue; the kernel spreads clients
 * over them and lets only processes of this user join the group. */
int resihp__wire_listener_open(const char *host, int port, int expect,
                               resihp__wire_listener_t *l) {
  int n = resihp__wire_listener_count(expect, read_somaxconn());
  memset(l, 0, sizeof(*l));
  if (!(l->fds = malloc(sizeof(int) * (size_t)n)))
    return RESIHP_ENOMEM;
  l->port = port;
  for (; l->n < n; l->n++) {
    int fd = listen_one(host, l->port, n > 1, &l->port);
    if (fd < 0) {
      int e = errno;
      resihp__wire_listener_close(l);
      errno = e;
      return fd;
    }
    l->fds[l->n] = fd;
  }
  return 0;
}

void resihp__wire_listener_close(resihp__wire_listener_t *l) {
  for (int i = 0; i < l->n; i++)
    close(l->fds[i]);
  free(l->fds);
  l->fds = NULL;
  l->n = 0;
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

/* Decimal digits with an optional '-': no spaces, no '+', no hex. */
static int decimal(const char *s, long *out) {
  const char *d = *s == '-' ? s + 1 : s;
  if (*d < '0' || *d > '9')
    return RESIHP_EPROTO;
  char *end;
  errno = 0;
  long x = strtol(s, &end, 10);
  if (errno || *end)
    return RESIHP_EPROTO;
  *out = x;
  return 0;
}

int resihp__wire_get_long(const char *msg, const char *key, long *out) {
  char v[32];
  int rc = resihp__wire_get(msg, key, v, sizeof(v));
  if (rc)
    return rc == RESIHP_ERANGE ? RESIHP_EPROTO : rc;
  return decimal(v, out);
}

int resihp__wire_get_range(const char *msg, const char *key, long lo, long hi,
                           long *out) {
  long x;
  int rc = resihp__wire_get_long(msg, key, &x);
  if (rc)
    return rc;
  if (x < lo || x > hi)
    return RESIHP_EPROTO;
  *out = x;
  return 0;
}

int resihp__wire_parse_ints(const char *s, int max, int **out, int *n) {
  int cnt = *s ? 1 : 0;
  for (const char *p = s; *p; p++)
    cnt += *p == ':';
  int *a = malloc(sizeof(int) * (size_t)(cnt ? cnt : 1));
  if (!a)
    return RESIHP_ENOMEM;
  const char *p = s;
  for (int i = 0; i < cnt; i++) {
    char *end = (char *)p;
    long v = -1;
    if (*p >= '0' && *p <= '9') {
      errno = 0;
      v = strtol(p, &end, 10);
      if (errno || (*end && *end != ':'))
        v = -1;
    }
    if (v < 0 || v >= max) {
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

int resihp__wire_parse_tuples(const char *s, int arity, long long max,
                              long long *out, int max_items, int *n) {
  int items = 0;
  *n = 0;
  if (arity < 1 || max < 0 || max > (LLONG_MAX - 9) / 10)
    return RESIHP_EINVAL; /* v * 10 + 9 must not overflow */
  if (!*s)
    return 0;
  for (const char *p = s;;) {
    if (items >= max_items)
      return RESIHP_ERANGE;
    for (int f = 0; f < arity; f++) {
      if (*p < '0' || *p > '9')
        return RESIHP_EPROTO;
      long long v = 0;
      for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > max)
          return RESIHP_EPROTO;
      }
      out[(size_t)items * (size_t)arity + (size_t)f] = v;
      if (f + 1 < arity && *p++ != ':')
        return RESIHP_EPROTO;
    }
    items++;
    if (!*p)
      break;
    if (*p++ != ',')
      return RESIHP_EPROTO;
  }
  *n = items;
  return 0;
}

int resihp__wire_token_ok(const char *s, size_t cap) {
  size_t n = 0;
  for (; s[n]; n++) {
    char ch = s[n];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == ':' ||
          ch == '-'))
      return 0;
  }
  return n >= 1 && n < cap;
}

int resihp__wire_list_item(const char *list, int k, char *out, size_t cap) {
  const char *p = list;
  for (int i = 0; i < k && p; i++) {
    p = strchr(p, '/');
    if (p)
      p++;
  }
  if (!p || k < 0)
    return RESIHP_EPROTO;
  size_t n = strcspn(p, "/");
  if (n == 0 || n >= cap)
    return RESIHP_EPROTO;
  memcpy(out, p, n);
  out[n] = '\0';
  return 0;
}

int resihp__wire_list_ok(const char *list, int n, size_t item_cap) {
  char item[256];
  if (item_cap > sizeof(item))
    item_cap = sizeof(item);
  int count = 1;
  for (const char *p = list; *p; p++)
    count += *p == '/';
  if (count != n)
    return 0;
  for (int k = 0; k < n; k++)
    if (resihp__wire_list_item(list, k, item, item_cap) ||
        !resihp__wire_token_ok(item, item_cap))
      return 0;
  return 1;
}

void resihp__wire_buf_init(resihp__wire_buf_t *b) {
  memset(b, 0, sizeof(*b));
}

void resihp__wire_buf_free(resihp__wire_buf_t *b) {
  free(b->s);
  memset(b, 0, sizeof(*b));
}

static int buf_room(resihp__wire_buf_t *b, size_t more) {
  if (b->err)
    return b->err;
  if (b->len + more > RESIHP__WIRE_LINE_MAX)
    return b->err = RESIHP_ERANGE;
  if (b->len + more + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + more + 1)
      nc *= 2;
    char *s = realloc(b->s, nc);
    if (!s)
      return b->err = RESIHP_ENOMEM;
    b->s = s;
    b->cap = nc;
  }
  return 0;
}

/* Formatted once into the room there is; again only when it did not fit
 * (a snapshot or a member list of 10,000 replicas is ~10^5 calls). */
void resihp__wire_buf_printf(resihp__wire_buf_t *b, const char *fmt, ...) {
  if (b->err)
    return;
  size_t room = b->cap - b->len;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < room &&
      b->len + (size_t)n <= RESIHP__WIRE_LINE_MAX) {
    b->len += (size_t)n;
    return;
  }
  if (b->s)
    b->s[b->len] = '\0'; /* what did not fit is not the line's */
  if (n < 0 || buf_room(b, (size_t)n))
    return;
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void resihp__wire_buf_put(resihp__wire_buf_t *b, const char *p, size_t n) {
  if (buf_room(b, n))
    return;
  memcpy(b->s + b->len, p, n);
  b->len += n;
  b->s[b->len] = '\0';
}

void resihp__wire_buf_long(resihp__wire_buf_t *b, long v) {
  char t[24];
  int k = (int)sizeof(t);
  unsigned long u = v < 0 ? 0UL - (unsigned long)v : (unsigned long)v;
  do
    t[--k] = (char)('0' + u % 10);
  while (u /= 10);
  if (v < 0)
    t[--k] = '-';
  resihp__wire_buf_put(b, t + k, sizeof(t) - (size_t)k);
}

void resihp__wire_buf_ints(resihp__wire_buf_t *b, const int *v, int n) {
  for (int i = 0; i < n && !b->err; i++) {
    if (i)
      resihp__wire_buf_put(b, ":", 1);
    resihp__wire_buf_long(b, v[i]);
  }
}

int resihp__wire_send_buf(resihp__wire_t *w, const resihp__wire_buf_t *b,
                          int64_t deadline_ms) {
  if (b->err) {
    resihp_log(RESIHP_LOG_ERROR, "wire", "a message could not be built (%s)",
               resihp_strerror(b->err));
    return b->err;
  }
  return resihp__wire_send(w, b->s ? b->s : "", deadline_ms);
}

int resihp__wire_max_microbatches(void) {
  /* Ids 0..M-1 written in full, each with a separator (the last one's
   * stands for the line's own room), digit-length block by block. */
  size_t room =
             RESIHP__WIRE_MBS_LINE - RESIHP__WIRE_LIST_HEADROOM - TAG_TEXT + 1,
         used = 0;
  long lo = 0, hi = 10;
  for (size_t per = 2;; per++, lo = hi, hi *= 10) {
    size_t block = (size_t)(hi - lo) * per;
    if (used + block > room)
      return (int)(lo + (long)((room - used) / per));
    used += block;
  }
}

int resihp__wire_read_secret(const char *path, uint8_t **out, size_t *len) {
  if (!path || !*path) {
    resihp_log(RESIHP_LOG_ERROR, "coord",
               "no job secret: set RESIHP_SECRET_FILE (resihp-run does)");
    return RESIHP_EINVAL;
  }
  /* O_NOFOLLOW: a link planted where the secret should be is refused;
   * O_NONBLOCK: a FIFO there cannot hang the caller. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    resihp_log(RESIHP_LOG_ERROR, "coord", "cannot read secret file %s: %s%s",
               path, strerror(errno),
               errno == ELOOP ? " (a symbolic link: give the file itself)"
                              : "");
    return RESIHP_EIO;
  }
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    resihp_log(RESIHP_LOG_ERROR, "coord",
               "secret file %s is not a regular file: refused", path);
    return RESIHP_EINVAL;
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077)) {
    close(fd);
    if (st.st_uid != geteuid())
      resihp_log(RESIHP_LOG_ERROR, "coord",
                 "secret file %s belongs to uid %ld, not to you (uid %ld): "
                 "refused; use a secret file of your own",
                 path, (long)st.st_uid, (long)geteuid());
    else
      resihp_log(RESIHP_LOG_ERROR, "coord",
                 "secret file %s can be accessed by others (mode %03o): "
                 "refused; run chmod 600 %s",
                 path, (unsigned)(st.st_mode & 0777), path);
    return RESIHP_EAUTH;
  }
  uint8_t *b = malloc(4096);
  if (!b) {
    close(fd);
    return RESIHP_ENOMEM;
  }
  size_t n = 0;
  while (n < 4096) {
    ssize_t r = read(fd, b + n, 4096 - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  close(fd);
  if (n == 0) {
    free(b);
    resihp_log(RESIHP_LOG_ERROR, "coord", "secret file %s is empty", path);
    return RESIHP_EIO;
  }
  *out = b;
  *len = n;
  return 0;
}
