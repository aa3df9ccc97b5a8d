/* SPDX-License-Identifier: BSD-3-Clause */
/* Full-mesh set-up with mutual HMAC-SHA-256 authentication (see mesh.h for
 * the exchange). Every wait is bounded by the caller's deadline; the
 * accepting side authenticates its connections concurrently, so a bad
 * connection costs a genuine peer nothing but a slot (see accept_peers). */
#include "config.h"

#include "mesh.h"
#include "cookie.h"
#include "msgauth.h"
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
#define MESH_VERSION RESIHP__MESH_VERSION
#define HANDSHAKE_MS 3000
#define NONCE 32
_Static_assert(NONCE == RESIHP__COOKIE_LEN, "a server nonce is a cookie");

struct hello {
  uint32_t magic;
  uint16_t version;
  uint8_t channel;
  uint8_t answer; /* 0: a first hello; 1: an answer follows (struct tail) */
  uint32_t src, dst, nranks;
  /* which communicator of the ranks behind one listening socket: a rank
   * that holds several runs of layers sets up one group per run over the
   * same socket, one after the other (resihp__comm_create_group) */
  uint32_t group;
  uint8_t nonce[NONCE];
};

_Static_assert(sizeof(struct hello) == RESIHP__MESH_HELLO_BYTES,
               "mesh.h says a hello's size");

/* What follows a hello that answers a challenge, on the client's second
 * connection: the server's cookie and the client's proof. */
struct tail {
  uint8_t nonce_s[NONCE];
  uint8_t mac[RESIHP__SHA256_LEN];
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

struct timespec resihp__realtime_in(int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
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

/* The hello as first sent (answer 0): what the MACs and the cookie
 * cover, on both connections. */
static struct hello first_hello(const struct hello *h) {
  struct hello f = *h;
  f.answer = 0;
  return f;
}

static void mac(const uint8_t *key, size_t keylen, const char *label,
                const struct hello *h, const uint8_t *nonce_s,
                uint8_t out[RESIHP__SHA256_LEN]) {
  struct hello f = first_hello(h);
  const void *parts[3] = {label, &f, nonce_s};
  size_t lens[3] = {strlen(label), sizeof(f), NONCE};
  resihp__hmac_sha256(key, keylen, parts, lens, 3, out);
}

int resihp__mesh_test_rtt_ms;

/* Longest wait between two looks at the caller's abort (mesh.h). */
#define ABORT_POLL_MS 100

static int aborted(int (*abort)(void *), void *arg) {
  return abort && abort(arg);
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

/* Label of a channel's session keys (msgauth.h). */
static const char *channel_label(int channel) {
  return channel ? "resihp-ctrl" : "resihp-data";
}

/* Client half of the exchange: the hello on fd (a connected socket, closed
 * here), the server's challenge checked, then the answer on a new
 * connection to sa: the fd of that one, authenticated, or a negative code.
 * RESIHP_ECLOSED means that the server closed before proving anything or
 * before its verdict (an overloaded server dropping pending handshakes,
 * or one that disliked the hello): worth another try. */
static int client_handshake(int fd, const struct sockaddr_storage *sa,
                            socklen_t salen, const char *endpoint,
                            const uint8_t *secret, size_t secret_len, int src,
                            int dst, int nranks, uint32_t group, int channel,
                            int64_t hs_deadline, resihp__msgauth_t *auth) {
  struct {
    struct hello h;
    struct tail t;
  } ans = {.h = {.magic = MESH_MAGIC,
                 .version = MESH_VERSION,
                 .channel = (uint8_t)channel,
                 .src = (uint32_t)src,
                 .dst = (uint32_t)dst,
                 .nranks = (uint32_t)nranks,
                 .group = group}};
  struct hello *h = &ans.h;
  struct challenge c;
  uint8_t want[RESIHP__SHA256_LEN], verdict = 0;
  int rc;
  if (getrandom(h->nonce, NONCE, 0) != NONCE) {
    close(fd);
    return RESIHP_ESYS;
  }
  rc = resihp__io_full(fd, h, sizeof(*h), 1, hs_deadline);
  if (!rc)
    rc = resihp__io_full(fd, &c, sizeof(c), 0, hs_deadline);
  close(fd); /* the server keeps nothing of it either */
  if (rc)
    return rc == RESIHP_EPEER ? RESIHP_ECLOSED : rc;
  mac(secret, secret_len, "resihp-srv", h, c.nonce, want);
  if (c.magic != MESH_MAGIC ||
      resihp__ct_memcmp(want, c.mac, sizeof(want))) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "rank %d at %s failed authentication (it does not know this "
               "job's secret): check RESIHP_SECRET_FILE on both sides",
               dst, endpoint);
    return RESIHP_EAUTH;
  }
  if (resihp__mesh_test_rtt_ms > 0)
    usleep((useconds_t)resihp__mesh_test_rtt_ms * 1000);
  /* the answer: the hello again, the cookie and the proof, at once */
  h->answer = 1;
  memcpy(ans.t.nonce_s, c.nonce, NONCE);
  mac(secret, secret_len, "resihp-cli", h, c.nonce, ans.t.mac);
  if ((fd = connect_once(sa, salen, hs_deadline)) < 0)
    return fd == RESIHP_ETIMEDOUT ? fd : RESIHP_ECLOSED;
  tune(fd);
  if ((rc = resihp__io_full(fd, &ans, sizeof(ans), 1, hs_deadline)) ||
      (rc = resihp__io_full(fd, &verdict, 1, 0, hs_deadline))) {
    close(fd);
    /* it proved that it holds the secret: a close is not a refusal of
     * ours (the same secret) but a dropped answer */
    return rc == RESIHP_EPEER ? RESIHP_ECLOSED : rc;
  }
  if (verdict != 1) {
    close(fd);
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "rank %d at %s refused this rank", dst, endpoint);
    return RESIHP_EAUTH;
  }
  if (auth)
    resihp__msgauth_init(auth, secret, secret_len, channel_label(channel),
                         c.nonce, NONCE, h->nonce, NONCE, 1);
  return fd;
}

static int dial(const char *endpoint, const uint8_t *secret, size_t secret_len,
                int src, int dst, int nranks, uint32_t group, int channel,
                int64_t deadline_ms, resihp__msgauth_t *auth,
                int (*abort)(void *), void *abort_arg);

int resihp__mesh_dial(const char *endpoint, const uint8_t *secret,
                      size_t secret_len, int src, int dst, int nranks,
                      int channel, int64_t deadline_ms,
                      resihp__msgauth_t *auth) {
  return dial(endpoint, secret, secret_len, src, dst, nranks, 0, channel,
              deadline_ms, auth, NULL, NULL);
}

static int dial(const char *endpoint, const uint8_t *secret, size_t secret_len,
                int src, int dst, int nranks, uint32_t group, int channel,
                int64_t deadline_ms, resihp__msgauth_t *auth,
                int (*abort)(void *), void *abort_arg) {
  struct sockaddr_storage sa;
  socklen_t salen;
  int rc = resolve(endpoint, &sa, &salen);
  if (rc)
    return rc;
  /* The peer may not listen yet (refused), or may be shedding a flood of
   * pending handshakes (closed before its challenge): retry both until the
   * deadline. */
  int delay = 5, warned = 0;
  for (;;) {
    /* A peer that was declared dead will never answer: no retry past
     * that news (the connect itself waits ABORT_POLL_MS at most). */
    if (aborted(abort, abort_arg)) {
      resihp_log(RESIHP_LOG_INFO, "allreduce",
                 "set-up ended while dialling rank %d at %s: the job moved "
                 "on (a member failed)",
                 dst, endpoint);
      return RESIHP_EPEER;
    }
    int64_t cdl = deadline_ms;
    if (abort && cdl > resihp__now_ms() + ABORT_POLL_MS)
      cdl = resihp__now_ms() + ABORT_POLL_MS;
    int fd = connect_once(&sa, salen, cdl);
    if (fd == RESIHP_ETIMEDOUT && cdl < deadline_ms)
      continue; /* a slice of the wait: look at abort, wait on */
    if (fd >= 0) {
      tune(fd);
      int64_t hs_deadline = resihp__now_ms() + HANDSHAKE_MS;
      if (hs_deadline > deadline_ms)
        hs_deadline = deadline_ms;
      rc = client_handshake(fd, &sa, salen, endpoint, secret, secret_len, src,
                            dst, nranks, group, channel, hs_deadline, auth);
      if (rc >= 0)
        return rc;
      if (rc != RESIHP_ECLOSED)
        return rc;
      if (!warned++)
        resihp_log(RESIHP_LOG_WARN, "allreduce",
                   "rank %d at %s hung up before authenticating itself "
                   "(busy, or a different job there?); retrying",
                   dst, endpoint);
    } else if (fd != RESIHP_ECLOSED) {
      rc = fd;
    }
    if (remaining(deadline_ms) <= delay) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "cannot connect to rank %d at %s before the deadline: is it "
                 "running, with the same endpoint list and rank count?",
                 dst, endpoint);
      return RESIHP_ETIMEDOUT;
    }
    struct timespec ts = {0, delay * 1000000L};
    nanosleep(&ts, NULL);
    delay = delay < 200 ? delay * 2 : 200;
  }
}

/* ---- server half: concurrent handshakes -----------------------------------
 * Accepted connections are authenticated side by side in one poll loop,
 * each a small state machine with its own deadline (HANDSHAKE_MS, capped
 * by the set-up deadline). A connection that sends nothing, drips garbage
 * or never answers the challenge only holds a slot until its deadline or
 * until MAX_PENDING newer ones push it out, and a genuine peer is accepted
 * the moment it has proved itself. So nobody without the secret can delay
 * the ranks that hold it by more than a flood of MAX_PENDING connections
 * per round trip, and a dropped genuine client simply dials again. */

#define MAX_PENDING 64

enum { HS_HELLO, HS_CHALLENGE, HS_ANSWER, HS_VERDICT };

struct pending {
  int fd; /* -1: free slot */
  int state;
  size_t off; /* bytes of the current message moved */
  int64_t deadline;
  uint64_t order; /* accept order: the oldest goes first when full */
  struct hello h;
  struct challenge c;
  struct tail t;
  uint8_t verdict;
  char who[64];
};

static int hs_writing(const struct pending *p) {
  return p->state == HS_CHALLENGE || p->state == HS_VERDICT;
}

/* 1: not a hello this rank expects; 2: one for another of its groups
 * (set up later: the sender dials again); 0: good. */
static int bad_hello(const struct hello *h, const resihp__mesh_opts_t *o) {
  return h->magic != MESH_MAGIC || h->version != MESH_VERSION ||
         h->channel > 1 || h->answer > 1 || h->dst != (uint32_t)o->rank ||
                 h->nranks != (uint32_t)o->nranks ||
                 h->src <= (uint32_t)o->rank || h->src >= (uint32_t)o->nranks
             ? 1
         : h->group != o->group ? 2
                                : 0;
}

/* Move one handshake as far as its socket allows without waiting. 0: not
 * finished, 1: the peer proved itself (verdict sent), 2: a challenge went
 * out (the connection is done with: nothing is kept), negative: refused
 * (logged; the caller closes). */
static int hs_step(struct pending *p, const resihp__mesh_opts_t *o,
                   resihp__cookie_jar_t *jar) {
  for (;;) {
    uint8_t *buf;
    size_t len;
    switch (p->state) {
    case HS_HELLO:
      buf = (uint8_t *)&p->h, len = sizeof(p->h);
      break;
    case HS_CHALLENGE:
      buf = (uint8_t *)&p->c, len = sizeof(p->c);
      break;
    case HS_ANSWER:
      buf = (uint8_t *)&p->t, len = sizeof(p->t);
      break;
    default:
      buf = &p->verdict, len = 1;
      break;
    }
    while (p->off < len) {
      ssize_t r = hs_writing(p)
                      ? send(p->fd, buf + p->off, len - p->off,
                             MSG_DONTWAIT | MSG_NOSIGNAL)
                      : recv(p->fd, buf + p->off, len - p->off, MSG_DONTWAIT);
      if (r > 0) {
        p->off += (size_t)r;
        /* Garbage shows in its first bytes: do not hold a slot for it. */
        if (p->state == HS_HELLO && p->off >= sizeof(p->h.magic) &&
            p->h.magic != MESH_MAGIC)
          break;
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
      resihp_log(RESIHP_LOG_DEBUG, "allreduce",
                 "refused connection from %s: it hung up during the "
                 "handshake",
                 p->who);
      return RESIHP_ECLOSED;
    }
    p->off = 0;
    switch (p->state) {
    case HS_HELLO: {
      int bad = bad_hello(&p->h, o);
      if (bad == 2) {
        resihp_log(RESIHP_LOG_DEBUG, "allreduce",
                   "hello from %s for group %u while setting up group %u: "
                   "it dials again",
                   p->who, p->h.group, o->group);
        return RESIHP_EPROTO;
      }
      if (bad) {
        resihp_log(RESIHP_LOG_WARN, "allreduce",
                   "refused connection from %s: bad hello (claims rank %u of "
                   "%u to rank %u): a stray client or a mismatched job",
                   p->who, p->h.src, p->h.nranks, p->h.dst);
        return RESIHP_EPROTO;
      }
      if (p->h.answer) {
        p->state = HS_ANSWER;
        break;
      }
      /* the challenge is a cookie bound to this hello: nothing is kept */
      struct hello f = first_hello(&p->h);
      p->c.magic = MESH_MAGIC;
      if (resihp__cookie_make(jar, &f, sizeof(f), p->c.nonce))
        return RESIHP_ESYS;
      mac(o->secret, o->secret_len, "resihp-srv", &p->h, p->c.nonce, p->c.mac);
      p->state = HS_CHALLENGE;
      break;
    }
    case HS_CHALLENGE:
      return 2;
    case HS_ANSWER: {
      struct hello f = first_hello(&p->h);
      uint8_t want[RESIHP__SHA256_LEN];
      int rc = resihp__cookie_check(jar, &f, sizeof(f), p->t.nonce_s);
      mac(o->secret, o->secret_len, "resihp-cli", &p->h, p->t.nonce_s, want);
      if (!rc && resihp__ct_memcmp(want, p->t.mac, sizeof(want)))
        rc = RESIHP_EAUTH;
      if (!rc)
        rc = resihp__cookie_first_use(jar, p->h.nonce);
      if (rc) {
        resihp_log(RESIHP_LOG_WARN, "allreduce",
                   "refused connection from %s claiming rank %u: %s",
                   p->who, p->h.src,
                   rc == RESIHP_ETIMEDOUT
                       ? "its challenge is too old"
                       : "wrong HMAC or a replay (it does not know this "
                         "job's secret)");
        return RESIHP_EAUTH;
      }
      memcpy(p->c.nonce, p->t.nonce_s, NONCE); /* the session's keys */
      p->verdict = 1;
      p->state = HS_VERDICT;
      break;
    }
    default:
      return 1;
    }
  }
}

int resihp__mesh_hs_serve(const resihp__mesh_opts_t *o,
                          resihp__cookie_jar_t *jar, int fd) {
  struct pending p = {.fd = fd, .state = HS_HELLO};
  snprintf(p.who, sizeof(p.who), "a test peer");
  return hs_step(&p, o, jar);
}

static void hs_drop(struct pending *p) {
  close(p->fd);
  p->fd = -1;
}

/* A slot for a new connection: a free one, else the oldest that has not
 * even sent a valid hello, else the oldest. */
static struct pending *hs_slot(struct pending *pd) {
  struct pending *victim = NULL;
  for (int k = 0; k < MAX_PENDING; k++) {
    struct pending *p = &pd[k];
    if (p->fd < 0)
      return p;
    if (!victim || (p->state == HS_HELLO && victim->state != HS_HELLO) ||
        ((p->state == HS_HELLO) == (victim->state == HS_HELLO) &&
         p->order < victim->order))
      victim = p;
  }
  resihp_log(RESIHP_LOG_WARN, "allreduce",
             "%d handshakes pending: dropping the oldest unfinished one, from "
             "%s",
             MAX_PENDING, victim->who);
  hs_drop(victim);
  return victim;
}

/* What hs_step's r means for p: still pending (0), a peer that proved
 * itself taken into its slot (1: one fewer missing), or the connection
 * closed (answered with a challenge, refused, a duplicate). */
static int settle(struct pending *p, int r, const resihp__mesh_opts_t *o,
                  int *data_fds, int *ctrl_fds, resihp__msgauth_t *data_auth,
                  resihp__msgauth_t *ctrl_auth) {
  if (r == 0)
    return 0;
  if (r != 1) {
    hs_drop(p); /* nothing kept */
    return 0;
  }
  int src = (int)p->h.src, ch = p->h.channel;
  int *slot = &(ch ? ctrl_fds : data_fds)[src];
  if (*slot >= 0) {
    resihp_log(RESIHP_LOG_WARN, "allreduce",
               "refused duplicate connection from %s (rank %d channel %d)",
               p->who, src, ch);
    hs_drop(p);
    return 0;
  }
  resihp__msgauth_t *a = ch ? ctrl_auth : data_auth;
  if (a)
    resihp__msgauth_init(&a[src], o->secret, o->secret_len, channel_label(ch),
                         p->c.nonce, NONCE, p->h.nonce, NONCE, 0);
  *slot = p->fd;
  p->fd = -1;
  return 1;
}

static int accept_peers(const resihp__mesh_opts_t *o, int lfd,
                        int64_t deadline, int *data_fds, int *ctrl_fds,
                        resihp__msgauth_t *data_auth,
                        resihp__msgauth_t *ctrl_auth) {
  struct pending *pd = calloc(MAX_PENDING, sizeof(*pd));
  struct pollfd pfd[MAX_PENDING + 1];
  int idx[MAX_PENDING + 1];
  int missing = 2 * (o->nranks - 1 - o->rank), rc = 0;
  uint64_t order = 0;
  resihp__cookie_jar_t jar;
  if (!pd)
    return RESIHP_ENOMEM;
  if ((rc = resihp__cookie_jar_init(&jar))) {
    free(pd);
    return rc;
  }
  for (int k = 0; k < MAX_PENDING; k++)
    pd[k].fd = -1;
  while (missing > 0) {
    int64_t now = resihp__now_ms(), wake = deadline;
    if (aborted(o->abort, o->abort_arg)) {
      resihp_log(RESIHP_LOG_INFO, "allreduce",
                 "rank %d: set-up ended with %d connection(s) from higher "
                 "ranks missing: the job moved on (a member failed)",
                 o->rank, missing);
      rc = RESIHP_EPEER;
      break;
    }
    if (o->abort && wake > now + ABORT_POLL_MS)
      wake = now + ABORT_POLL_MS;
    if (now >= deadline) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "rank %d: %d connection(s) from higher ranks missing after "
                 "%d ms: did every rank start, with the same endpoint list?",
                 o->rank, missing, o->timeout_ms);
      rc = RESIHP_ETIMEDOUT;
      break;
    }
    int np = 0;
    pfd[np] = (struct pollfd){.fd = lfd, .events = POLLIN};
    idx[np++] = -1;
    for (int k = 0; k < MAX_PENDING; k++) {
      struct pending *p = &pd[k];
      if (p->fd < 0)
        continue;
      if (now >= p->deadline) {
        resihp_log(RESIHP_LOG_WARN, "allreduce",
                   "refused connection from %s: no complete handshake within "
                   "%d ms",
                   p->who, HANDSHAKE_MS);
        hs_drop(p);
        continue;
      }
      if (p->deadline < wake)
        wake = p->deadline;
      pfd[np] = (struct pollfd){.fd = p->fd,
                                .events = hs_writing(p) ? POLLOUT : POLLIN};
      idx[np++] = k;
    }
    if (poll(pfd, (nfds_t)np, remaining(wake)) < 0 && errno != EINTR) {
      rc = RESIHP_ESYS;
      break;
    }
    /* Handshakes first, so that a connection accepted below cannot push
     * out one that has just completed. */
    for (int j = 1; j < np; j++) {
      struct pending *p = &pd[idx[j]];
      if (!pfd[j].revents)
        continue;
      missing -= settle(p, hs_step(p, o, &jar), o, data_fds, ctrl_fds,
                        data_auth, ctrl_auth);
    }
    if (!(pfd[0].revents & POLLIN) || missing <= 0)
      continue;
    /* What waits, up to half the table per wake-up (so that none accepted
     * here is pushed out before the next round reads it); each accept
     * only when the listener is readable: it may be the caller's,
     * blocking. A genuine peer's bytes come with its connection and are
     * read at once (hs_step). */
    for (int n = 0; n < MAX_PENDING / 2; n++) {
      struct pollfd lp = {.fd = lfd, .events = POLLIN};
      if (n && poll(&lp, 1, 0) != 1)
        break;
      struct sockaddr_in from;
      socklen_t fl = sizeof(from);
      int fd = accept4(lfd, (struct sockaddr *)&from, &fl,
                       SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0)
        break;
      tune(fd);
      struct pending *p = hs_slot(pd);
      memset(p, 0, sizeof(*p));
      p->fd = fd;
      p->state = HS_HELLO;
      p->order = order++;
      p->deadline = resihp__now_ms() + HANDSHAKE_MS;
      if (p->deadline > deadline)
        p->deadline = deadline;
      snprintf(p->who, sizeof(p->who), "%s:%u", inet_ntoa(from.sin_addr),
               ntohs(from.sin_port));
      missing -= settle(p, hs_step(p, o, &jar), o, data_fds, ctrl_fds,
                        data_auth, ctrl_auth);
    }
  }
  for (int k = 0; k < MAX_PENDING; k++)
    if (pd[k].fd >= 0)
      hs_drop(&pd[k]);
  free(pd);
  resihp__cookie_jar_free(&jar);
  return rc;
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
  /* a flood of connections must not fill the queue the peers come
   * through (the kernel caps it at net.core.somaxconn) */
  if (bind(fd, (struct sockaddr *)&sa, salen) < 0 || listen(fd, 4096) < 0) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce", "cannot listen on %s: %s", ep,
               strerror(errno));
    close(fd);
    return RESIHP_ESYS;
  }
  return fd;
}

int resihp__mesh_connect(const resihp__mesh_opts_t *o, int *data_fds,
                         int *ctrl_fds, resihp__msgauth_t *data_auth,
                         resihp__msgauth_t *ctrl_auth) {
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
      int fd = dial(o->endpoints[j], o->secret, o->secret_len, o->rank, j,
                    o->nranks, o->group, ch, deadline,
                    ch ? (ctrl_auth ? &ctrl_auth[j] : NULL)
                       : (data_auth ? &data_auth[j] : NULL),
                    o->abort, o->abort_arg);
      if (fd < 0) {
        rc = fd;
        goto fail;
      }
      (ch ? ctrl_fds : data_fds)[j] = fd;
    }
  }
  if (o->rank < o->nranks - 1 &&
      (rc = accept_peers(o, lfd, deadline, data_fds, ctrl_fds, data_auth,
                         ctrl_auth)))
    goto fail;
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
