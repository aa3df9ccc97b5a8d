/* SPDX-License-Identifier: BSD-3-Clause */
/* The control plane's mutual handshake (see wire.h): the client's side,
 * which may block (it chose whom to call), and the server's side, which
 * never does and keeps nothing for a stranger.
 *
 * Why a stateless challenge. Anyone who can reach a port can open
 * connections faster than a distant client can answer one. A server that
 * greets each newcomer with a nonce and waits for the answer on the same
 * connection must keep that connection and its nonce for a round trip; a
 * flood of strangers then fills whatever table holds them, and a client
 * 50 ms away found its handshake evicted before its answer arrived. So
 * the server never waits for an answer: it hands out a challenge (AUTH1,
 * a cookie it can check later from its own key and clock) and closes, and
 * the client comes back on a new connection with the cookie and its proof
 * in the first line (AUTH2). The only thing a server holds before a proof
 * is a connection whose first line has not arrived yet; a genuine client
 * sends that line with its connect, so it is read at once, and a stranger's
 * silence only keeps a slot of a small table until newer ones push it out
 * or its deadline passes. A client whose connection was dropped anyway
 * starts again (resihp__wire_auth_client retries with backoff).
 *
 * A recorded AUTH2 could be replayed only with its cookie, within the
 * cookie's lifetime, and is not: the server remembers each client nonce it
 * accepted for as long as a cookie is valid (a table only a proof of the
 * secret can add to; transport/cookie.c).
 */
#include "config.h"

#include "../transport/cookie.h"
#include "../transport/mesh.h"
#include "../transport/sha256.h"
#include "wire.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <errno.h>
#include <fcntl.h>
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
/* The client's second connection, to a server that just answered. */
#define REDIAL_MS 2000

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

int resihp__wire_test_rtt_ms;

/* Both ends key the session from the two nonces, as text. */
static void seal_session(resihp__wire_t *w, const uint8_t *secret, size_t slen,
                         const char *label, const char *ns, const char *nc,
                         int is_client) {
  resihp__msgauth_init(&w->auth, secret, slen, label, ns, strlen(ns), nc,
                       strlen(nc), is_client);
  w->sealed = 1;
  w->max = RESIHP__WIRE_LINE_MAX;
}

/* A new connection to the server in place of w's, under the same
 * descriptor number: whoever holds that number (a thread that shuts it
 * down to cancel, a caller that asks the socket for its address) keeps
 * holding the connection in use; one that watches it in an epoll set
 * adds it again (the set forgets a closed connection). */
static int reconnect(resihp__wire_t *w, const resihp__wire_cli_t *s,
                     int64_t deadline_ms) {
  int fd = resihp__wire_dial_addr(&s->peer, s->peerlen, deadline_ms);
  if (fd < 0)
    return fd;
  int rc = dup3(fd, w->fd, O_CLOEXEC) < 0 ? RESIHP_ESYS : 0;
  close(fd);
  w->len = 0;
  w->out_off = w->out_len = 0;
  w->sealed = 0;
  w->max = RESIHP__WIRE_PREAUTH_MAX;
  return rc;
}

/* One move of the client's side on what has arrived: AUTH0 sent ->
 * AUTH1 (a cookie) -> a new connection with AUTH2 -> AUTH3 -> sealed. 1
 * once sealed, 0 while it waits for the server, negative on failure. */
int resihp__wire_cli_step(resihp__wire_t *w, resihp__wire_cli_t *s,
                          const uint8_t *secret, size_t slen,
                          const char *label) {
  char line[RESIHP__WIRE_PREAUTH_MAX + 1], lab[64], got[80], want[80];
  int rc;
  if (s->stage == 0) {
    w->sealed = 0;
    w->max = RESIHP__WIRE_PREAUTH_MAX;
    s->peerlen = sizeof(s->peer);
    if (getpeername(w->fd, (struct sockaddr *)&s->peer, &s->peerlen))
      s->peerlen = 0; /* not an IP socket: AUTH1 cannot be answered */
    snprintf(line, sizeof(line), "AUTH0 %s", label);
    /* a short line on a fresh socket: it fits the send buffer */
    if ((rc = resihp__wire_send(w, line, resihp__now_ms() + 1000)))
      return rc;
    s->stage = 1;
  }
  rc = resihp__wire_fill(w);
  int t = resihp__wire_take(w, line, sizeof(line));
  if (t < 0)
    return t;
  if (t == 0)
    return rc < 0 ? (s->stage == 2 && rc == RESIHP_ECLOSED ? RESIHP_EAUTH : rc)
                  : 0;
  if (s->stage == 1) {
    if (sscanf(line, "AUTH1 %63s %70s", lab, s->ns) != 2 ||
        strcmp(lab, label) || !resihp__wire_token_ok(s->ns, sizeof(s->ns)))
      return RESIHP_EAUTH;
    if ((rc = nonce(s->nc)))
      return rc;
    if (resihp__wire_test_rtt_ms > 0)
      usleep((useconds_t)resihp__wire_test_rtt_ms * 1000);
    /* The answer goes on a new connection, in its first line: the server
     * kept nothing of the first one. */
    if ((rc = reconnect(w, s, resihp__now_ms() + REDIAL_MS)))
      return rc;
    proof(secret, slen, label, "cli", s->ns, s->nc, want);
    snprintf(line, sizeof(line), "AUTH2 %s %s %s", s->ns, s->nc, want);
    if ((rc = resihp__wire_send(w, line, resihp__now_ms() + 1000)))
      return rc;
    s->stage = 2;
    return 0;
  }
  if (sscanf(line, "AUTH3 %70s", got) != 1)
    return RESIHP_EAUTH;
  proof(secret, slen, label, "srv", s->nc, s->ns, want);
  if (!proof_ok(got, want)) {
    s->bad_server = 1; /* not a server of this job: no second try */
    return RESIHP_EAUTH;
  }
  seal_session(w, secret, slen, label, s->ns, s->nc, 1);
  return 1;
}

/* A server that dropped the connection (a full table, a cookie that grew
 * stale while the client was stopped) is asked again, a few times, after
 * a pause that doubles; a wrong proof of the server's ends it at once. */
#define CLIENT_TRIES 5
#define CLIENT_BACKOFF_MS 50

static int stopped(const int *stop) {
  return stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE);
}

int resihp__wire_auth_client(resihp__wire_t *w, const uint8_t *secret,
                             size_t slen, const char *label,
                             int64_t deadline_ms) {
  return resihp__wire_auth_client_stoppable(w, secret, slen, label,
                                            deadline_ms, NULL);
}

int resihp__wire_auth_client_stoppable(resihp__wire_t *w,
                                       const uint8_t *secret, size_t slen,
                                       const char *label, int64_t deadline_ms,
                                       const int *stop) {
  resihp__wire_cli_t s = {0};
  int64_t pause = CLIENT_BACKOFF_MS;
  for (int tries = 1;;) {
    int rc = resihp__wire_cli_step(w, &s, secret, slen, label);
    if (rc > 0)
      return 0;
    if (stopped(stop))
      return RESIHP_ECLOSED; /* its owner shut it down: no second try */
    int64_t left = deadline_ms - resihp__now_ms();
    if (rc < 0 && !s.bad_server && s.peerlen && tries < CLIENT_TRIES &&
        left > pause) {
      resihp_log(RESIHP_LOG_DEBUG, "wire",
                 "%s: handshake dropped (%s): trying again in %ld ms", label,
                 resihp_strerror(rc), (long)pause);
      usleep((useconds_t)pause * 1000);
      if ((rc = reconnect(w, &s, deadline_ms)))
        return rc;
      /* a stop set before the new connection took the old one's number
       * shut the old one down: it is seen here */
      if (stopped(stop))
        return RESIHP_ECLOSED;
      s.stage = 0;
      tries++;
      pause *= 2;
      continue;
    }
    if (rc < 0)
      return rc;
    if (left <= 0)
      return RESIHP_ETIMEDOUT;
    struct pollfd p = {.fd = w->fd, .events = POLLIN};
    poll(&p, 1, left > 1000 ? 1000 : (int)left);
  }
}

/* ---- the server's side -------------------------------------------------- */

/* A slot of the table of connections whose first line has not come yet.
 * Slots stay where they are (the epoll set names them by index); the ones
 * in use are linked in accept order, so the oldest (first to expire,
 * first evicted) is at hand. */
typedef struct {
  resihp__wire_t w; /* w.fd < 0: the slot is free */
  int64_t deadline;
  uint32_t tag;     /* the accept's sequence number: events of a slot's
                       earlier occupant are recognised as stale */
  int older, newer; /* accept order, -1 at the ends */
} pending_t;

struct resihp__wire_hs {
  uint8_t *secret;
  size_t slen;
  resihp__cookie_jar_t jar; /* the cookies' key, the nonces accepted */
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
  /* authenticated, not yet taken by the owner */
  resihp__wire_t *done;
  int ndone, capdone;
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
  int rc = h->efd < 0 ? RESIHP_ESYS
           : !h->secret || !h->p || !h->free || !h->ev ? RESIHP_ENOMEM
           : resihp__cookie_jar_init(&h->jar);
  if (rc) {
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
  for (int i = 0; i < h->ndone; i++)
    resihp__wire_free(&h->done[i]);
  free(h->done);
  resihp__cookie_jar_free(&h->jar);
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
  else if (why)
    h->expired++;
  if (refused && now - h->last_warn >= 1000) {
    resihp_log(RESIHP_LOG_WARN, "wire",
               "%s: refused a connection that failed authentication (%s)%s",
               h->label, why, h->quiet ? "; and others not logged" : "");
    h->last_warn = now;
    h->quiet = 0;
  } else if (why) {
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

static int unhex(const char *s, uint8_t *out, size_t n) {
  if (strlen(s) != 2 * n)
    return RESIHP_EPROTO;
  for (size_t i = 0; i < 2 * n; i++) {
    int c = s[i], v = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
    if (v < 0)
      return RESIHP_EPROTO;
    out[i / 2] = (uint8_t)(i % 2 ? out[i / 2] | v : v << 4);
  }
  return 0;
}

/* A client's first line, complete. AUTH0: a cookie, and the connection
 * is done with (1). AUTH2: the cookie and the proof checked, our proof
 * sent, the session sealed (0). Negative: refused. */
static int first_line(resihp__wire_hs_t *h, resihp__wire_t *w,
                      const char *line) {
  char lab[64], c[80], nc[80], got[80], want[80], reply[200];
  uint8_t cb[RESIHP__COOKIE_LEN], ncb[NONCE_LEN];
  int rc;
  if (!strncmp(line, "AUTH0 ", 6)) {
    if (sscanf(line, "AUTH0 %63s", lab) != 1 || strcmp(lab, h->label))
      return RESIHP_EPROTO;
    char ck[2 * RESIHP__COOKIE_LEN + 1];
    if ((rc = resihp__cookie_make(&h->jar, h->label, strlen(h->label), cb)))
      return rc;
    resihp__hex(ck, cb, sizeof(cb));
    snprintf(reply, sizeof(reply), "AUTH1 %s %s\n", h->label, ck);
    return send_now(w->fd, reply) ? RESIHP_EIO : 1;
  }
  if (sscanf(line, "AUTH2 %70s %70s %70s", c, nc, got) != 3 ||
      unhex(c, cb, sizeof(cb)) || unhex(nc, ncb, NONCE_LEN))
    return RESIHP_EPROTO;
  if ((rc = resihp__cookie_check(&h->jar, h->label, strlen(h->label), cb)))
    return rc;
  proof(h->secret, h->slen, h->label, "cli", c, nc, want);
  if (!proof_ok(got, want))
    return RESIHP_EAUTH;
  if ((rc = resihp__cookie_first_use(&h->jar, ncb)))
    return rc; /* a replay */
  proof(h->secret, h->slen, h->label, "srv", nc, c, want);
  snprintf(reply, sizeof(reply), "AUTH3 %s\n", want);
  if (send_now(w->fd, reply))
    return RESIHP_EIO;
  seal_session(w, h->secret, h->slen, h->label, c, nc, 0);
  return 0;
}

/* Read slot i: 1 when its connection was authenticated (now in done), 0
 * while its first line is incomplete, -1 when it was dropped (answered,
 * refused, gone). */
static int advance(resihp__wire_hs_t *h, int i) {
  char line[RESIHP__WIRE_PREAUTH_MAX + 1];
  pending_t *p = &h->p[i];
  int rc = resihp__wire_fill(&p->w);
  int t = resihp__wire_take(&p->w, line, sizeof(line));
  if (t == 0 && rc == 0)
    return 0; /* part of a line: more later */
  if (t <= 0) {
    drop(h, i, rc == RESIHP_EPROTO || t < 0, resihp_strerror(t ? t : rc));
    return -1;
  }
  if ((rc = first_line(h, &p->w, line))) {
    if (rc == 1)
      drop(h, i, 0, NULL); /* a cookie handed out: nothing kept */
    else
      drop(h, i, 1, resihp_strerror(rc));
    return -1;
  }
  if (h->ndone == h->capdone) {
    int nc = h->capdone ? 2 * h->capdone : 16;
    resihp__wire_t *nd = realloc(h->done, sizeof(*nd) * (size_t)nc);
    if (!nd) {
      drop(h, i, 0, "out of memory");
      return -1;
    }
    h->done = nd;
    h->capdone = nc;
  }
  h->done[h->ndone++] = p->w;
  release(h, i);
  return 1;
}

/* 1 if the connection is still pending (its first line is incomplete). */
static int add(resihp__wire_hs_t *h, int fd) {
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
  if (epoll_ctl(h->efd, EPOLL_CTL_ADD, fd, &e)) {
    drop(h, i, 0, "cannot watch it");
    return 0;
  }
  /* a client's first line comes with its connection: usually here now */
  return advance(h, i) == 0;
}

int resihp__wire_hs_add(resihp__wire_hs_t *h, int fd) {
  add(h, fd);
  return 0;
}

void resihp__wire_hs_accept(resihp__wire_hs_t *h, int lfd) {
  /* Until the queue is empty (joiners arrive by the thousand), but within
   * bounds: a flood of connections cannot keep the owner here, and those
   * left waiting for their first line in one call are at most half the
   * table, so none of them is evicted before the owner's next pass reads
   * what it has (hs_next). */
  int waiting = 0, most = (h->max + 1) / 2;
  for (int i = 0; waiting < most && i < 4 * h->max + 64; i++) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return;
    waiting += add(h, fd);
  }
}

int resihp__wire_hs_fd(const resihp__wire_hs_t *h) {
  return h->efd;
}

int resihp__wire_hs_pending(const resihp__wire_hs_t *h) {
  return h ? h->n + h->ndone : 0;
}

int resihp__wire_hs_wait_ms(const resihp__wire_hs_t *h, int max_ms) {
  if (h && h->ndone)
    return 0; /* one is ready for the owner */
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

static int take_done(resihp__wire_hs_t *h, resihp__wire_t *out) {
  *out = h->done[0];
  memmove(h->done, h->done + 1, sizeof(*h->done) * (size_t)--h->ndone);
  return 1;
}

int resihp__wire_hs_next(resihp__wire_hs_t *h, resihp__wire_t *out) {
  if (h->ndone)
    return take_done(h, out);
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
    if (i >= h->max || h->p[i].w.fd < 0 || h->p[i].tag != (uint32_t)(d >> 32))
      continue; /* dropped (or replaced) since the wait */
    if (advance(h, i) == 1)
      return take_done(h, out);
  }
  int64_t now = resihp__now_ms();
  while (h->oldest >= 0 && now >= h->p[h->oldest].deadline)
    drop(h, h->oldest, 0, "no answer in time");
  h->in_pass = 0;
  return 0;
}
