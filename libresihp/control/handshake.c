/* SPDX-License-Identifier: BSD-3-Clause */
/* The control plane's mutual handshake (see wire.h): the client's side,
 * which may block (it chose whom to call), and the server's side, which
 * never does.
 *
 * Why the server side is a state machine. Anyone who can reach a port can
 * open a connection and say nothing. A server that reads each newcomer's
 * answer before it looks at the next one (or at its members) hands every
 * stranger a second of its time; a few idle connections a second stall it
 * for good. So each pending connection here is only a record: greeted with
 * AUTH1 at once (a short line that fits any fresh socket buffer), read
 * when the owner's poll says so, dropped at its own absolute deadline
 * (trickling bytes does not extend it) or when it sends anything but a
 * short AUTH2, and at most max_pending of them exist: the oldest makes
 * room for a newcomer. A genuine client answers within a round trip, so
 * it completes long before it would become the oldest of a full table.
 */
#include "config.h"

#include "../transport/mesh.h"
#include "../transport/sha256.h"
#include "wire.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define NONCE_LEN 16
#define NONCE_HEX (2 * NONCE_LEN)

static void proof(const uint8_t *secret, size_t slen, const char *label,
                  const char *side, const char *n1, const char *n2,
                  char out[2 * RESIHP__SHA256_LEN + 1]) {
  const void *parts[4] = {label, side, n1, n2};
  size_t lens[4] = {strlen(label), strlen(side), strlen(n1), strlen(n2)};
  uint8_t m[RESIHP__SHA256_LEN];
  resihp__hmac_sha256(secret, slen, parts, lens, 4, m);
  resihp__hex(out, m, sizeof(m));
}

static int proof_ok(const char *got, const char *want) {
  return strlen(got) == strlen(want) &&
         resihp__ct_memcmp(got, want, strlen(want)) == 0;
}

static int nonce(char out[NONCE_HEX + 1]) {
  uint8_t r[NONCE_LEN];
  if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
    return RESIHP_ESYS;
  resihp__hex(out, r, sizeof(r));
  return 0;
}

/* Both ends key the session from the two nonces, as text. */
static void seal_session(resihp__wire_t *w, const uint8_t *secret, size_t slen,
                         const char *label, const char *ns, const char *nc,
                         int is_client) {
  resihp__msgauth_init(&w->auth, secret, slen, label, ns, strlen(ns), nc,
                       strlen(nc), is_client);
  w->sealed = 1;
  w->max = RESIHP__WIRE_LINE_MAX;
}

/* One move of the client's side on what has arrived: AUTH1 -> AUTH2,
 * AUTH3 -> sealed. 1 once sealed, 0 while it waits for the server,
 * negative on failure. */
int resihp__wire_cli_step(resihp__wire_t *w, resihp__wire_cli_t *s,
                          const uint8_t *secret, size_t slen,
                          const char *label) {
  char line[RESIHP__WIRE_PREAUTH_MAX + 1], lab[64], got[80], want[80];
  if (s->stage == 0) {
    w->sealed = 0;
    w->max = RESIHP__WIRE_PREAUTH_MAX;
    s->stage = 1;
  }
  int rc = resihp__wire_fill(w);
  int t = resihp__wire_take(w, line, sizeof(line));
  if (t < 0)
    return t;
  if (t == 0)
    return rc < 0 ? (s->stage == 2 && rc == RESIHP_ECLOSED ? RESIHP_EAUTH : rc)
                  : 0;
  if (s->stage == 1) {
    if (sscanf(line, "AUTH1 %63s %70s", lab, s->ns) != 2 ||
        strcmp(lab, label) || strlen(s->ns) != NONCE_HEX)
      return RESIHP_EAUTH;
    if ((rc = nonce(s->nc)))
      return rc;
    proof(secret, slen, label, "cli", s->ns, s->nc, want);
    snprintf(line, sizeof(line), "AUTH2 %s %s", s->nc, want);
    /* a short line on a fresh socket: it fits the send buffer */
    if ((rc = resihp__wire_send(w, line, resihp__now_ms() + 1000)))
      return rc;
    s->stage = 2;
    return 0;
  }
  if (sscanf(line, "AUTH3 %70s", got) != 1)
    return RESIHP_EAUTH;
  proof(secret, slen, label, "srv", s->nc, s->ns, want);
  if (!proof_ok(got, want))
    return RESIHP_EAUTH;
  seal_session(w, secret, slen, label, s->ns, s->nc, 1);
  return 1;
}

int resihp__wire_auth_client(resihp__wire_t *w, const uint8_t *secret,
                             size_t slen, const char *label,
                             int64_t deadline_ms) {
  resihp__wire_cli_t s = {0};
  for (;;) {
    int rc = resihp__wire_cli_step(w, &s, secret, slen, label);
    if (rc)
      return rc < 0 ? rc : 0;
    int64_t left = deadline_ms - resihp__now_ms();
    if (left <= 0)
      return RESIHP_ETIMEDOUT;
    struct pollfd p = {.fd = w->fd, .events = POLLIN};
    poll(&p, 1, left > 1000 ? 1000 : (int)left);
  }
}

/* A slot of the table. Slots stay where they are (the epoll set names
 * them by index); the ones in use are linked in accept order, so the
 * oldest (first to expire, first evicted) is at hand. */
typedef struct {
  resihp__wire_t w; /* w.fd < 0: the slot is free */
  int64_t deadline;
  char ns[NONCE_HEX + 1];
  uint32_t tag;     /* the accept's sequence number: events of a slot's
                       earlier occupant are recognised as stale */
  int older, newer; /* accept order, -1 at the ends */
} pending_t;

struct resihp__wire_hs {
  uint8_t *secret;
  size_t slen;
  char label[16];
  int max, timeout_ms;
  pending_t *p; /* max slots */
  int *free, nfree;
  int n;              /* slots in use */
  int oldest, newest; /* -1 when none */
  /* Every pending socket is in one epoll set: a wake-up with thousands of
   * joiners pending (a whole job after a failover) costs what is ready,
   * not one poll entry and one look per pending handshake. */
  int efd;
  struct epoll_event *ev;
  int cap_ev, nev, iev; /* the ready ones of this pass, and where it is */
  int in_pass;
  uint32_t seq;
  long refused, expired, quiet;
  int64_t last_warn;
};

int resihp__wire_hs_create(const uint8_t *secret, size_t slen,
                           const char *label, int max_pending, int timeout_ms,
                           resihp__wire_hs_t **out) {
  if (!secret || !slen || !label || strlen(label) >= 16 || max_pending < 1 ||
      timeout_ms < 1)
    return RESIHP_EINVAL;
  resihp__wire_hs_t *h = calloc(1, sizeof(*h));
  if (!h)
    return RESIHP_ENOMEM;
  h->efd = epoll_create1(EPOLL_CLOEXEC);
  h->secret = malloc(slen);
  h->p = calloc((size_t)max_pending, sizeof(*h->p));
  h->free = malloc(sizeof(int) * (size_t)max_pending);
  /* a pass reads at most this many: the rest are ready for the next */
  h->cap_ev = max_pending < 1024 ? max_pending : 1024;
  h->ev = malloc(sizeof(*h->ev) * (size_t)h->cap_ev);
  if (h->efd < 0 || !h->secret || !h->p || !h->free || !h->ev) {
    int rc = h->efd < 0 ? RESIHP_ESYS : RESIHP_ENOMEM;
    if (h->efd >= 0)
      close(h->efd);
    free(h->secret);
    free(h->p);
    free(h->free);
    free(h->ev);
    free(h);
    return rc;
  }
  memcpy(h->secret, secret, slen);
  h->slen = slen;
  snprintf(h->label, sizeof(h->label), "%s", label);
  h->max = max_pending;
  h->timeout_ms = timeout_ms;
  h->oldest = h->newest = -1;
  for (int i = 0; i < max_pending; i++) {
    resihp__wire_init(&h->p[i].w, -1);
    h->free[h->nfree++] = max_pending - 1 - i;
  }
  *out = h;
  return 0;
}

void resihp__wire_hs_destroy(resihp__wire_hs_t *h) {
  if (!h)
    return;
  for (int i = 0; i < h->max; i++)
    if (h->p[i].w.fd >= 0)
      resihp__wire_free(&h->p[i].w);
  close(h->efd);
  memset(h->secret, 0, h->slen);
  free(h->secret);
  free(h->p);
  free(h->free);
  free(h->ev);
  free(h);
}

/* Take slot i out of the table; its connection is the caller's. */
static void release(resihp__wire_hs_t *h, int i) {
  pending_t *p = &h->p[i];
  /* explicitly: a forked child may hold the same socket open, and the
   * set would go on reporting it */
  epoll_ctl(h->efd, EPOLL_CTL_DEL, p->w.fd, NULL);
  if (p->older >= 0)
    h->p[p->older].newer = p->newer;
  else
    h->oldest = p->newer;
  if (p->newer >= 0)
    h->p[p->newer].older = p->older;
  else
    h->newest = p->older;
  resihp__wire_init(&p->w, -1);
  h->free[h->nfree++] = i;
  h->n--;
}

/* Strangers can make many of these; say so at most once a second. */
static void drop(resihp__wire_hs_t *h, int i, int refused, const char *why) {
  int64_t now = resihp__now_ms();
  if (refused)
    h->refused++;
  else
    h->expired++;
  if (refused && now - h->last_warn >= 1000) {
    resihp_log(RESIHP_LOG_WARN, "wire",
               "%s: refused a connection that failed authentication (%s)%s",
               h->label, why, h->quiet ? "; and others not logged" : "");
    h->last_warn = now;
    h->quiet = 0;
  } else {
    h->quiet += refused;
    resihp_log(RESIHP_LOG_DEBUG, "wire", "%s: dropped a pending handshake (%s)",
               h->label, why);
  }
  resihp__wire_t w = h->p[i].w;
  release(h, i);
  resihp__wire_free(&w);
}

/* A short line on a fresh socket: it fits the send buffer, or the peer is
 * not worth waiting for. */
static int send_now(int fd, const char *line) {
  size_t n = strlen(line);
  return send(fd, line, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n
             ? 0
             : RESIHP_EIO;
}

int resihp__wire_hs_add(resihp__wire_hs_t *h, int fd) {
  if (!h->nfree)
    drop(h, h->oldest, 0, "evicted: too many pending handshakes");
  int i = h->free[--h->nfree];
  pending_t *p = &h->p[i];
  h->n++;
  p->tag = h->seq++;
  p->older = h->newest;
  p->newer = -1;
  if (h->newest >= 0)
    h->p[h->newest].newer = i;
  else
    h->oldest = i;
  h->newest = i;
  resihp__wire_init(&p->w, fd);
  p->w.max = RESIHP__WIRE_PREAUTH_MAX;
  p->deadline = resihp__now_ms() + h->timeout_ms;
  /* GO and START leave back to back: Nagle would hold the second for the
   * peer's delayed ACK (~40 ms a step). Fails harmlessly off TCP. */
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct epoll_event e = {.events = EPOLLIN,
                          .data.u64 = (uint64_t)p->tag << 32 | (uint32_t)i};
  char line[80];
  int rc = epoll_ctl(h->efd, EPOLL_CTL_ADD, fd, &e) ? RESIHP_ESYS : 0;
  if (!rc)
    rc = nonce(p->ns);
  if (!rc) {
    snprintf(line, sizeof(line), "AUTH1 %s %s\n", h->label, p->ns);
    rc = send_now(fd, line);
  }
  if (rc)
    drop(h, i, 0, "cannot greet");
  return rc;
}

void resihp__wire_hs_accept(resihp__wire_hs_t *h, int lfd) {
  /* Until the queue is empty (joiners arrive by the thousand), but at
   * most max_pending: a flood of connections cannot keep the owner here. */
  for (int i = 0; i < h->max; i++) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return;
    resihp__wire_hs_add(h, fd);
  }
}

int resihp__wire_hs_fd(const resihp__wire_hs_t *h) {
  return h->efd;
}

int resihp__wire_hs_pending(const resihp__wire_hs_t *h) {
  return h ? h->n : 0;
}

int resihp__wire_hs_wait_ms(const resihp__wire_hs_t *h, int max_ms) {
  if (!h || h->oldest < 0)
    return max_ms; /* nothing pending: the caller's own wait */
  int64_t left = h->p[h->oldest].deadline - resihp__now_ms();
  if (left < 0)
    left = 0;
  return max_ms >= 0 && max_ms < left ? max_ms : (int)left;
}

void resihp__wire_hs_stats(const resihp__wire_hs_t *h, long *refused,
                           long *expired) {
  if (refused)
    *refused = h->refused;
  if (expired)
    *expired = h->expired;
}

/* The client's answer, complete: check it, answer with our proof. */
static int finish(resihp__wire_hs_t *h, pending_t *p, const char *line) {
  char nc[80], got[80], want[80], reply[96];
  if (sscanf(line, "AUTH2 %64s %70s", nc, got) != 2 || strlen(nc) != NONCE_HEX)
    return RESIHP_EPROTO;
  proof(h->secret, h->slen, h->label, "cli", p->ns, nc, want);
  if (!proof_ok(got, want))
    return RESIHP_EAUTH;
  proof(h->secret, h->slen, h->label, "srv", nc, p->ns, want);
  snprintf(reply, sizeof(reply), "AUTH3 %s\n", want);
  if (send_now(p->w.fd, reply))
    return RESIHP_EIO;
  seal_session(&p->w, h->secret, h->slen, h->label, p->ns, nc, 0);
  return 0;
}

int resihp__wire_hs_next(resihp__wire_hs_t *h, resihp__wire_t *out) {
  char line[RESIHP__WIRE_PREAUTH_MAX + 1];
  if (!h->in_pass) {
    /* A pass: what is ready now. An answer that came in time but waited
     * for us (thousands joining at once) still counts, so the expired
     * are dropped after it, from the oldest on (a partial answer does not
     * extend a deadline). */
    h->in_pass = 1;
    h->iev = 0;
    h->nev = h->n ? epoll_wait(h->efd, h->ev, h->cap_ev, 0) : 0;
    if (h->nev < 0)
      h->nev = 0;
  }
  while (h->iev < h->nev) {
    uint64_t d = h->ev[h->iev++].data.u64;
    int i = (int)(uint32_t)d;
    pending_t *p = &h->p[i];
    if (i >= h->max || p->w.fd < 0 || p->tag != (uint32_t)(d >> 32))
      continue; /* dropped (or replaced) since the wait */
    int rc = resihp__wire_fill(&p->w);
    int t = resihp__wire_take(&p->w, line, sizeof(line));
    if (t == 0 && rc == 0)
      continue; /* part of a line: more later */
    if (t <= 0) {
      drop(h, i, rc == RESIHP_EPROTO || t < 0, resihp_strerror(t ? t : rc));
      continue;
    }
    if ((rc = finish(h, p, line))) {
      drop(h, i, 1, resihp_strerror(rc));
      continue;
    }
    *out = p->w;
    release(h, i);
    return 1;
  }
  int64_t now = resihp__now_ms();
  while (h->oldest >= 0 && now >= h->p[h->oldest].deadline)
    drop(h, h->oldest, 0, "no answer in time");
  h->in_pass = 0;
  return 0;
}
