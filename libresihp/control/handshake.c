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

typedef struct {
  resihp__wire_t w;
  int64_t deadline;
  char ns[NONCE_HEX + 1];
  int ready; /* its socket polled readable (resihp__wire_hs_mark) */
  long seq;  /* accepted as the seq-th: the oldest is evicted first */
} pending_t;

struct resihp__wire_hs {
  uint8_t *secret;
  size_t slen;
  char label[16];
  int max, timeout_ms;
  /* in no order: removal moves the last one into the hole, so that
   * thousands of joiners completing at once cost O(1) each */
  pending_t *p;
  int n;
  int marked; /* the owner says which are readable (resihp__wire_hs_mark) */
  /* where resihp__wire_hs_next goes on: the owner calls it until it says
   * 0, and a pass over P pending ones with C complete costs O(P), not
   * O(P C) */
  int scan;
  long refused, expired, quiet, seq;
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
  h->secret = malloc(slen);
  h->p = calloc((size_t)max_pending, sizeof(*h->p));
  if (!h->secret || !h->p) {
    free(h->secret);
    free(h->p);
    free(h);
    return RESIHP_ENOMEM;
  }
  memcpy(h->secret, secret, slen);
  h->slen = slen;
  snprintf(h->label, sizeof(h->label), "%s", label);
  h->max = max_pending;
  h->timeout_ms = timeout_ms;
  *out = h;
  return 0;
}

void resihp__wire_hs_destroy(resihp__wire_hs_t *h) {
  if (!h)
    return;
  for (int i = 0; i < h->n; i++)
    resihp__wire_free(&h->p[i].w);
  memset(h->secret, 0, h->slen);
  free(h->secret);
  free(h->p);
  free(h);
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
  resihp__wire_free(&h->p[i].w);
  h->p[i] = h->p[--h->n];
}

/* The pending handshake that will expire first (the oldest). */
static int oldest(const resihp__wire_hs_t *h) {
  int o = 0;
  for (int i = 1; i < h->n; i++)
    if (h->p[i].seq < h->p[o].seq)
      o = i;
  return o;
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
  if (h->n == h->max)
    drop(h, oldest(h), 0, "evicted: too many pending handshakes");
  pending_t *p = &h->p[h->n];
  p->ready = 0; /* nothing to read before it has our AUTH1 */
  p->seq = h->seq++;
  resihp__wire_init(&p->w, fd);
  p->w.max = RESIHP__WIRE_PREAUTH_MAX;
  p->deadline = resihp__now_ms() + h->timeout_ms;
  /* GO and START leave back to back: Nagle would hold the second for the
   * peer's delayed ACK (~40 ms a step). Fails harmlessly off TCP. */
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  char line[80];
  int rc = nonce(p->ns);
  if (!rc) {
    snprintf(line, sizeof(line), "AUTH1 %s %s\n", h->label, p->ns);
    rc = send_now(fd, line);
  }
  h->n++;
  if (rc)
    drop(h, h->n - 1, 0, "cannot greet");
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

int resihp__wire_hs_fds(const resihp__wire_hs_t *h, struct pollfd *p, int cap) {
  int k = 0;
  for (int i = 0; i < h->n && k < cap; i++, k++) {
    p[k].fd = h->p[i].w.fd;
    p[k].events = POLLIN;
    p[k].revents = 0;
  }
  return k;
}

void resihp__wire_hs_mark(resihp__wire_hs_t *h, const struct pollfd *p, int n) {
  h->marked = 1;
  h->scan = 0;
  for (int i = 0; i < n && i < h->n; i++)
    h->p[i].ready = p[i].revents != 0;
}

int resihp__wire_hs_pending(const resihp__wire_hs_t *h) {
  return h ? h->n : 0;
}

int resihp__wire_hs_wait_ms(const resihp__wire_hs_t *h, int max_ms) {
  int64_t now = resihp__now_ms(), best = max_ms < 0 ? INT64_MAX : max_ms;
  for (int i = 0; h && i < h->n; i++)
    if (h->p[i].deadline - now < best)
      best = h->p[i].deadline - now;
  if (best == INT64_MAX)
    return max_ms; /* nothing pending: the caller's own wait */
  return best < 0 ? 0 : (int)best;
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
  int64_t now = resihp__now_ms();
  char line[RESIHP__WIRE_PREAUTH_MAX + 1];
  for (int i = h->scan; i < h->n;) {
    pending_t *p = &h->p[i];
    int expired = now >= p->deadline;
    if (h->marked && !p->ready) {
      if (expired)
        drop(h, i, 0, "no answer in time");
      else
        i++; /* nothing arrived: no system call for it */
      continue;
    }
    p->ready = 0;
    /* An answer that came in time but waited for us (thousands joining
     * at once) still counts; a partial one does not extend the deadline. */
    int rc = resihp__wire_fill(&p->w);
    int t = resihp__wire_take(&p->w, line, sizeof(line));
    if (t == 0 && rc == 0) {
      if (expired)
        drop(h, i, 0, "no answer in time");
      else
        i++;
      continue;
    }
    if (t <= 0) {
      drop(h, i, rc == RESIHP_EPROTO || t < 0, resihp_strerror(t ? t : rc));
      continue;
    }
    if ((rc = finish(h, p, line))) {
      drop(h, i, 1, resihp_strerror(rc));
      continue;
    }
    *out = p->w;
    h->p[i] = h->p[--h->n];
    h->scan = i; /* the last one moved here: not looked at yet */
    return 1;
  }
  h->scan = 0;
  return 0;
}
