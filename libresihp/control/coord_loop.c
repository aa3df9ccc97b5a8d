/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator object, its connections and its event loop: create and
 * destroy, the listener and the handshakes in progress (handshake.c), one
 * poll round (resihp__coord_poll: read, hand every line to the protocol,
 * coord_protocol.c), heartbeats to every replica, and silence detection:
 * a replica whose connection is lost or silent for silence_ms has failed
 * (coord_members.c). It owns no thread. Also the accessors, and the
 * hooks of the tests and the fuzz target: adopt a connection without a
 * handshake, feed it a line, check the invariants (resihp__coord_check).
 */
#include "config.h"

#include "../transport/mesh.h"
#include "coord_internal.h"

#include <resihp/error.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Pending handshakes beyond one per replica (a whole job may join at
 * once: none of them may be evicted), and how long each may take. */
#define HS_PENDING_EXTRA 64
/* Connections read in one poll round, so that a round's work is bounded
 * whatever N (the keeper's hang bound watches the loop). */
#define EVENTS_PER_ROUND 2048
/* Heartbeats sent in one poll round at most. */
#define HB_PER_ROUND 2048
/* A round's work that counts as listening (see resihp__coord_poll). */
#define WORK_CREDIT_MS 100
#define HS_TIMEOUT_MS 3000

/* What the coordinator keeps for one replica that does not read (a
 * stopped process, a full socket buffer): two of the longest lines. Past
 * it the replica's connection is cut and it fails as a lost one, long
 * before its silence would fail it. */
#define COORD_OUT_MAX (2 * (size_t)RESIHP__WIRE_LINE_MAX + 4096)

/* Lines to a replica never wait for it: they are queued in order and
 * leave when its socket takes them (EPOLLOUT in resihp__coord_poll), so a
 * replica that stops reading delays nobody else. */
void resihp__coord_send_to(resihp__coord_t *c, int r, const char *line) {
  resihp__coord_send_hashed(c, r, line, NULL);
}

void resihp__coord_send_hashed(resihp__coord_t *c, int r, const char *line,
                               const uint8_t *digest) {
  rep_t *p = &c->reps[r];
  if (p->conn < 0)
    return;
  int hb = !strcmp(line, "HB");
  if (!hb && p->owed)
    resihp__coord_pay(c, r); /* what it is owed leaves first */
  if (!hb && !c->again)
    resihp__coord_mirror_if(c); /* write-ahead (coord_snapshot.c) */
  c->lines_tx += !hb;
  conn_t *cn = &c->conns[p->conn];
  int rc = resihp__wire_queue_hashed(&cn->w, line, digest);
  size_t queued = cn->w.out_len - cn->w.out_off;
  if (rc < 0) {
    /* a gone peer's end of file follows: its reader fails it */
    logc(RESIHP_LOG_WARN, "cannot send to replica %d: %s", r,
         resihp_strerror(rc));
  } else if (queued > COORD_OUT_MAX) {
    logc(RESIHP_LOG_WARN,
         "replica %d has not read what it was sent (%zu bytes wait): its "
         "connection is cut",
         r, queued);
    shutdown(cn->w.fd, SHUT_RDWR); /* the next poll round sees it closed */
  } else if (queued && !cn->out_armed) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT,
                             .data.u32 = (uint32_t)p->conn};
    cn->out_armed = !epoll_ctl(c->efd, EPOLL_CTL_MOD, cn->w.fd, &ev);
  }
}

void resihp__coord_flush_conn(resihp__coord_t *c, int k) {
  conn_t *cn = &c->conns[k];
  long left = resihp__wire_flush(&cn->w);
  if (left == 0 && cn->out_armed) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)k};
    cn->out_armed = epoll_ctl(c->efd, EPOLL_CTL_MOD, cn->w.fd, &ev) != 0;
  }
}

void resihp__coord_send_buf_to(resihp__coord_t *c, int r,
                               const resihp__wire_buf_t *b) {
  resihp__coord_send_buf_hashed(c, r, b, NULL);
}

void resihp__coord_send_buf_hashed(resihp__coord_t *c, int r,
                                   const resihp__wire_buf_t *b,
                                   const uint8_t *digest) {
  if (b->err) {
    logc(RESIHP_LOG_ERROR, "cannot build a message for replica %d (%s)", r,
         resihp_strerror(b->err));
    return;
  }
  resihp__coord_send_hashed(c, r, b->s, digest);
}

/* The longest line of each kind a member sends (wire.h): the short
 * messages have their own small limit, the ones with lists (BEGIN, PROG,
 * PERF, WL, RECOVER: microbatches, owners, views that grow with the job)
 * the wire's. Anything else is refused when it comes, whatever its
 * length, so it gets the short limit. */
size_t resihp__coord_member_line_max(const char *line, size_t len) {
  static const char *const lists[] = {"BEGIN ", "PROG ", "PERF ", "WL ",
                                      "RECOVER "};
  const char *sp = memchr(line, ' ', len < 16 ? len : 16);
  if (!sp && len < 16)
    return RESIHP__WIRE_LINE_MAX; /* its name is not all here yet */
  for (size_t i = 0; sp && i < sizeof(lists) / sizeof(lists[0]); i++)
    if ((size_t)(sp - line) + 1 == strlen(lists[i]) &&
        !memcmp(line, lists[i], strlen(lists[i])))
      return RESIHP__WIRE_LINE_MAX;
  return RESIHP__WIRE_SHORT_MAX;
}

/* Connection k said who it is (HELLO, SUBHELLO, LEP): its lines may now
 * be as long as its messages need. */
static int conn_anonymous(const conn_t *cn) {
  return cn->replica < 0 && cn->sub_replica < 0 && cn->lep_replica < 0;
}

static void conn_known(conn_t *cn) {
  if (cn->w.max == RESIHP__WIRE_HELLO_MAX && !conn_anonymous(cn)) {
    cn->w.max = RESIHP__WIRE_LINE_MAX;
    cn->w.line_max = resihp__coord_member_line_max;
  }
}

void resihp__coord_close_conn(resihp__coord_t *c, int k) {
  conn_t *cn = &c->conns[k];
  if (cn->w.fd >= 0)
    epoll_ctl(c->efd, EPOLL_CTL_DEL, cn->w.fd, NULL);
  resihp__wire_free(&cn->w);
  if (cn->replica >= 0 && c->reps[cn->replica].conn == k)
    c->reps[cn->replica].conn = -1;
  cn->replica = -1;
  if (k < c->conn_free)
    c->conn_free = k;
}

int resihp__coord_adopt(resihp__coord_t *c, resihp__wire_t *w) {
  int k = -1;
  /* from the lowest slot that may be free: N joins in a row cost O(N) */
  for (int i = c->conn_free; i < c->nconns; i++)
    if (c->conns[i].w.fd < 0) {
      k = i;
      break;
    }
  c->conn_free = k < 0 ? c->nconns + 1 : k + 1;
  if (k < 0) {
    if (c->nconns == c->capconns) {
      int nc = c->capconns ? 2 * c->capconns : 16;
      conn_t *n = realloc(c->conns, sizeof(conn_t) * (size_t)nc);
      if (!n) {
        resihp__wire_free(w);
        return RESIHP_ENOMEM;
      }
      c->conns = n;
      c->capconns = nc;
    }
    k = c->nconns++;
  }
  /* (a descriptor epoll cannot watch, as in some tests, is simply never
   * read by the loop) */
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)k};
  if (w->fd >= 0)
    epoll_ctl(c->efd, EPOLL_CTL_ADD, w->fd, &ev);
  c->conns[k].w = *w;
  c->conns[k].out_armed = 0;
  c->conns[k].replica = -1;
  c->conns[k].sub_replica = -1;
  c->conns[k].lep_replica = -1;
  c->conns[k].lep[0] = '\0';
  c->conns[k].last_heard = c->listened;
  c->conns[k].adopted = resihp__now_ms();
  /* until it says who it is: short lines, and a deadline
   * (resihp__coord_poll) */
  c->conns[k].w.max = RESIHP__WIRE_HELLO_MAX;
  c->conns[k].w.line_max = NULL;
  resihp__wire_init(w, -1);
  return k;
}

int resihp__coord_room(char **buf, size_t *cap, size_t need) {
  if (need > RESIHP__WIRE_LINE_MAX + 1)
    need = RESIHP__WIRE_LINE_MAX + 1;
  if (need <= *cap)
    return 0;
  size_t n = *cap * 2 > need ? *cap * 2 : need;
  n = n < 4096                        ? 4096
      : n > RESIHP__WIRE_LINE_MAX + 1 ? RESIHP__WIRE_LINE_MAX + 1
                                      : n;
  char *b = realloc(*buf, n);
  if (!b)
    return RESIHP_ENOMEM;
  *buf = b;
  *cap = n;
  return 0;
}

/* Every complete line that connection k has buffered, then what its
 * socket said (rc from resihp__wire_fill, or a bad line) if it is gone. */
static void drain_conn(resihp__coord_t *c, int k, int rc) {
  conn_t *cn = &c->conns[k];
  int t;
  /* room for any line buffered (a complete one is no longer) */
  while (cn->w.fd >= 0 &&
         !(t = resihp__coord_room(&c->line, &c->linecap, cn->w.len + 1)) &&
         (t = resihp__wire_take(&cn->w, c->line, c->linecap))) {
    if (t < 0) {
      logc(RESIHP_LOG_ERROR,
           "a connection%s sent a line that %s: connection dropped",
           cn->replica >= 0 ? " of a replica" : "",
           t == RESIHP_EAUTH ? "failed its integrity check (altered, "
                               "injected or replayed)"
                             : "is malformed");
      rc = t;
      break;
    }
    resihp__coord_on_line(c, k, c->line);
    cn = &c->conns[k];
    conn_known(cn);
  }
  if (rc < 0 && cn->w.fd >= 0) {
    int r = cn->replica;
    resihp__coord_close_conn(c, k);
    if (r >= 0 && c->state == RESIHP__COORD_RUNNING &&
        !(c->phase == P_END && c->reps[r].finished))
      resihp__coord_fail_replica(c, r, "connection lost");
  }
}

void resihp__coord_take_faults(resihp__coord_t *c, int k) {
  if (k < 0 || k >= c->nconns || c->conns[k].w.fd < 0)
    return;
  /* not c->line: a caller may be handling the line held there; a buffer
   * of its own (a failure at a time: one that a FAULT line leads to has
   * its fault kind set and reads nothing here) */
  if (c->fline_busy)
    return;
  c->fline_busy = 1;
  /* What has come (non-blocking), a few buffers' worth at most: a peer
   * that keeps sending cannot hold the loop here. */
  for (int pass = 0, got = 1; got && pass < 4 && c->conns[k].w.fd >= 0;
       pass++) {
    resihp__wire_fill(&c->conns[k].w);
    for (got = 0;
         c->conns[k].w.fd >= 0 &&
         !resihp__coord_room(&c->fline, &c->flinecap, c->conns[k].w.len + 1) &&
         resihp__wire_take(&c->conns[k].w, c->fline, c->flinecap) == 1;
         got = 1)
      if (!strncmp(c->fline, "FAULT ", 6))
        resihp__coord_on_line(c, k, c->fline);
  }
  c->fline_busy = 0;
}

void resihp__coord_feed(resihp__coord_t *c, int k, const char *line) {
  if (k < 0 || k >= c->nconns || c->conns[k].w.fd < 0)
    return;
  resihp__coord_pace_round(c); /* (a line fed is a round of its own) */
  resihp__coord_on_line(c, k, line);
  conn_known(&c->conns[k]);
  resihp__coord_advance(c);
}

static void adopt_authed(resihp__coord_t *c) {
  resihp__wire_t w;
  while (resihp__wire_hs_next(c->hs, &w) == 1) {
    int k = resihp__coord_adopt(c, &w);
    if (k >= 0)
      drain_conn(c, k, 0); /* lines that came with the handshake */
  }
}

/* Handshakes never hold this loop: each pending one is a record in c->hs,
 * moved on when its socket has something (see handshake.c). Answers that
 * wait are read before new connections are accepted: newcomers can push
 * the oldest pending ones out. */
static void accept_conns(resihp__coord_t *c, const struct pollfd *lp) {
  adopt_authed(c);
  for (int i = 0; i < c->lis.n; i++)
    if (lp[i].revents)
      resihp__wire_hs_accept(c->hs, lp[i].fd);
  adopt_authed(c);
}

int resihp__coord_poll(resihp__coord_t *c, int timeout_ms) {
  int nl = c->lis.n, want = nl + 2;
  if (want > c->cappfd) {
    struct pollfd *np = realloc(c->pfd, sizeof(*np) * (size_t)want);
    if (!np)
      return RESIHP_ENOMEM;
    c->pfd = np;
    c->cappfd = want;
  }
  if (c->nconns > c->capevs) {
    struct epoll_event *ne = realloc(c->evs, sizeof(*ne) * (size_t)c->capconns);
    if (!ne)
      return RESIHP_ENOMEM;
    c->evs = ne;
    c->capevs = c->capconns;
  }
  struct pollfd *p = c->pfd;
  for (int i = 0; i < nl; i++)
    p[i] = (struct pollfd){.fd = c->lis.fds[i], .events = POLLIN};
  p[nl] = (struct pollfd){.fd = c->efd, .events = POLLIN};
  p[nl + 1] =
      (struct pollfd){.fd = resihp__wire_hs_fd(c->hs), .events = POLLIN};
  resihp__coord_pace_round(c);
  int64_t before = resihp__now_ms();
  /* lines still owed at a boundary: no sleep (coord_pace.c) */
  if (c->pace_head < c->pace_n)
    timeout_ms = 0;
  poll(p, (nfds_t)want, resihp__wire_hs_wait_ms(c->hs, timeout_ms));
  int64_t now = resihp__now_ms();
  /* The loop promises the replicas a heartbeat every hb_coord_ms: a gap
   * between two wake-ups longer than that means that this process was not
   * running (stopped, as by a frozen host, or starved), and the replicas
   * could only wait for it. The whole gap counts, once the run has
   * started and until it is done: the summary's waiting is never less
   * than the time it really did not listen. */
  if (c->last_wake && now - c->last_wake > c->hb_coord_ms + timeout_ms &&
      c->start_ms && c->step > c->base_step && !c->t_done)
    c->away_ms += now - c->last_wake;
  c->last_wake = now;
  /* The listening clock (c->listened) runs while the coordinator waits in
   * poll, and between two waits (its work on a round, its caller's) for
   * WORK_CREDIT_MS at most: short rounds count as they go, the part of a
   * long one beyond that does not. A replica is judged silent on it,
   * never on time the coordinator spent working (a long round, a machine
   * that starved it) instead of listening. */
  int64_t work = before - c->last_return;
  c->listened += (now - before) +
                 (c->last_return && work > 0
                      ? (work < WORK_CREDIT_MS ? work : WORK_CREDIT_MS)
                      : 0);
  c->last_return = now;
  /* At most EVENTS_PER_ROUND connections are read per round (the others,
   * still ready, come first in the next one: epoll puts the ones it
   * returned last); silence is looked for only after a round that took
   * everything there was (drained). */
  int cap = c->capevs < EVENTS_PER_ROUND ? c->capevs : EVENTS_PER_ROUND;
  int ne = p[nl].revents && cap ? epoll_wait(c->efd, c->evs, cap, 0) : 0;
  int drained = ne < cap || !p[nl].revents;
  for (int e = 0; e < ne; e++) {
    int i = (int)c->evs[e].data.u32;
    if (i >= c->nconns || c->conns[i].w.fd < 0)
      continue; /* closed by an earlier line of this round */
    conn_t *cn = &c->conns[i];
    if (c->evs[e].events & EPOLLOUT)
      resihp__coord_flush_conn(c, i);
    if (!(c->evs[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
      continue; /* writable only: nothing heard */
    int rc = resihp__wire_fill(&cn->w);
    cn->last_heard = c->listened;
    drain_conn(c, i, rc);
  }
  accept_conns(c, p);
  /* silence is looked for a few times per bound, not at every wake-up:
   * N joins or reconnects wake the loop up to N times */
  int64_t every = c->o.silence_ms / 4 < 250 ? c->o.silence_ms / 4 : 250;
  int look = drained && now - c->last_silence_check >= every;
  if (look)
    c->last_silence_check = now;
  for (int i = 0; look && i < c->nconns; i++) {
    conn_t *cn = &c->conns[i];
    if (cn->w.fd >= 0 && conn_anonymous(cn) &&
        now - cn->adopted > c->o.hello_ms) {
      /* authenticated, but it never said who it is (or only asked, as a
       * spare does, and stayed): it holds a buffer and a descriptor */
      logc(RESIHP_LOG_WARN,
           "an authenticated connection said no HELLO within %d ms: "
           "connection closed",
           c->o.hello_ms);
      resihp__coord_close_conn(c, i);
      continue;
    }
    if (cn->w.fd >= 0 && cn->replica >= 0 &&
        c->listened - cn->last_heard > c->o.silence_ms &&
        c->state == RESIHP__COORD_RUNNING) {
      int r = cn->replica;
      logc(RESIHP_LOG_WARN, "replica %d silent for %lld ms", r,
           (long long)(c->listened - cn->last_heard));
      resihp__coord_fail_replica(c, r, "silent");
    }
  }
  /* a restored coordinator's members that did not come back in time have
   * failed, as silent ones do (coord_snapshot.c) */
  if (c->reconnect_by && c->listened >= c->reconnect_by &&
      c->state == RESIHP__COORD_RUNNING) {
    c->reconnect_by = 0;
    for (int r = 0; r < c->R; r++)
      if (c->reps[r].conn < 0 &&
          (c->reps[r].state == R_MEMBER || c->reps[r].state == R_JOINING))
        resihp__coord_fail_replica(c, r, "did not reconnect after a failover");
  }
  /* (a replica whose queue still holds lines gets them as its sign of
   * life: a heartbeat behind them says nothing more, and N of them
   * appended to full queues, as while a whole job joins, cost 0.4 s) */
  /* A round of heartbeats is a sweep over the replicas, HB_PER_ROUND a
   * poll round (10,000 in one round held it 0.4-0.6 s on a loaded
   * machine). */
  if (now - c->last_hb >= c->hb_coord_ms && c->hb_next >= c->R) {
    c->last_hb = now;
    c->hb_next = 0;
  }
  for (int n = 0; c->hb_next < c->R && n < HB_PER_ROUND; c->hb_next++) {
    int k = c->reps[c->hb_next].conn;
    if (k >= 0 && c->conns[k].w.out_off == c->conns[k].w.out_len) {
      resihp__coord_send_to(c, c->hb_next, "HB");
      n++;
    }
  }
  resihp__coord_advance(c);
  resihp__coord_pump(c);
  return 0;
}

/* Heartbeats are the one traffic of a quiet job, and they come from every
 * replica: at the small jobs' 200 ms, 10,000 replicas would send 50,000 a
 * second, and the coordinator 20,000 back, about a core's worth. So the
 * periods grow with R (R/2 ms: about 2,000 a second each way), bounded
 * by what detection needs: a leader beats at least four times per silence
 * bound (the coordinator fails a silent replica after it), the coordinator
 * every 5 s at most (a replica takes its coordinator for lost after a
 * silence of its own, 20 s or more). */
void resihp__coord_heartbeats(int replicas, int silence_ms, int *leader_ms,
                              int *coord_ms) {
  long grow = replicas / 2;
  long lmax = silence_ms / 4 > 200 ? silence_ms / 4 : 200;
  *leader_ms = (int)(grow < 200 ? 200 : grow > lmax ? lmax : grow);
  *coord_ms = (int)(grow < 500 ? 500 : grow > 5000 ? 5000 : grow);
}

int resihp__coord_create(const resihp__coord_opts_t *o, resihp__coord_t **out) {
  if (!o || o->replicas < 1 || o->replicas > RESIHP__COORD_MAX_REPLICAS ||
      !o->secret || !o->secret_len)
    return RESIHP_EINVAL;
  resihp__coord_t *c = calloc(1, sizeof(*c));
  if (!c)
    return RESIHP_ENOMEM;
  c->o = *o;
  c->moved_r = -1;
  c->decide_r = c->rm_r = c->sw_r = c->dg_r = -1;
  c->shrunk_r = -1;
  c->efd = epoll_create1(EPOLL_CLOEXEC);
  if (c->o.silence_ms <= 0)
    c->o.silence_ms = 3000;
  if (c->o.hello_ms <= 0)
    c->o.hello_ms = RESIHP__COORD_HELLO_MS;
  resihp__coord_heartbeats(o->replicas, c->o.silence_ms, &c->hb_leader_ms,
                           &c->hb_coord_ms);
  int rc = RESIHP_ENOMEM;
  size_t R = (size_t)o->replicas;
  c->reps = calloc(R, sizeof(*c->reps));
  c->members = calloc(R, sizeof(int));
  c->last_list = calloc(R, sizeof(int));
  c->in_step = calloc(R, 1);
  c->scratch = calloc(R, sizeof(int));
  c->scratch2 = calloc(R, sizeof(int));
  c->view = malloc(8 * R + 1); /* ids < 10^7, each with its ':' */
  c->inview = calloc(R, 1);
  c->rslow = calloc(R, sizeof(double));
  c->pace_q = calloc(2 * R, sizeof(int));
  resihp__wire_buf_init(&c->go_whole);
  resihp__wire_buf_init(&c->go_line);
  if (c->efd < 0 || !c->reps || !c->members || !c->last_list ||
      !c->in_step || !c->scratch || !c->scratch2 || !c->view || !c->inview ||
      !c->rslow || !c->pace_q)
    goto fail;
  c->R = o->replicas;
  for (int r = 0; r < c->R; r++) {
    c->reps[r].conn = -1;
    c->reps[r].begun = -1;
    c->reps[r].open_fail = -1;
    c->reps[r].swapped_at = -1;
  }
  c->wl_asked = -1;
  c->abort_replica = -1;
  c->hb_next = c->R; /* no sweep under way */
  /* saves and resumes (coord_save.c) */
  if (o->start_step < 0 || o->start_step >= MAX_STEPS || o->save_every < 0) {
    rc = RESIHP_EINVAL;
    goto fail;
  }
  c->step = c->base_step = o->start_step;
  /* the step times are indexed by step: room up to the first one */
  if ((rc = resihp__coord_ensure_steps(c, c->step + 1)))
    goto fail;
  c->save_step = -1;
  c->save_asked = c->save_last = -1;
  if ((rc = resihp__wire_hs_create(o->secret, o->secret_len, "coord",
                                   c->R + HS_PENDING_EXTRA, HS_TIMEOUT_MS,
                                   &c->hs)))
    goto fail;
  if (o->listener) {
    /* the keeper's sockets: they outlive this coordinator */
    if (o->listener->n < 1 || !o->listener->fds) {
      rc = RESIHP_EINVAL;
      goto fail;
    }
    c->lis = *o->listener;
    c->port = c->lis.port;
  } else if ((rc = resihp__wire_listener_open(o->bind_host, o->port, c->R,
                                              &c->lis))) {
    logc(RESIHP_LOG_ERROR, "cannot listen on %s:%d: %s",
         o->bind_host ? o->bind_host : "*", o->port, strerror(errno));
    goto fail;
  } else {
    c->port = c->lis.port;
  }
  *out = c;
  return 0;
fail:
  resihp__coord_destroy(c);
  return rc;
}

void resihp__coord_destroy(resihp__coord_t *c) {
  if (!c)
    return;
  for (int i = 0; i < c->nconns; i++)
    resihp__wire_free(&c->conns[i].w);
  resihp__coord_free_rounds(c);
  free(c->rounds);
  free(c->conns);
  free(c->spares);
  free(c->fails);
  free(c->coords_line);
  if (!c->o.listener)
    resihp__wire_listener_close(&c->lis);
  if (c->efd >= 0)
    close(c->efd);
  free(c->evs);
  resihp__wire_hs_destroy(c->hs);
  free(c->line);
  free(c->fline);
  free(c->pfd);
  free(c->owner);
  free(c->start_owner);
  free(c->start_contrib);
  free(c->start_mbs);
  free(c->start_off);
  free(c->start_joiners);
  free(c->start_src);
  free(c->start_lay);
  free(c->start_ms);
  resihp__coord_perf_free(c);
  resihp__coord_layers_free(c);
  for (int r = 0; c->reps && r < c->R; r++) {
    free(c->reps[r].ep);
    free(c->reps[r].sep);
  }
  free(c->reps);
  free(c->members);
  free(c->last_list);
  free(c->in_step);
  free(c->scratch);
  free(c->scratch2);
  free(c->view);
  free(c->inview);
  free(c->rslow);
  free(c->pace_q);
  resihp__wire_buf_free(&c->go_whole);
  resihp__wire_buf_free(&c->go_line);
  free(c);
}

int resihp__coord_set_eps(resihp__coord_t *c, int r, const char *ep,
                          const char *sep) {
  rep_t *p = &c->reps[r];
  char *e = strdup(ep), *s = strdup(sep);
  if (!e || !s) {
    free(e);
    free(s);
    return RESIHP_ENOMEM;
  }
  free(p->ep);
  free(p->sep);
  p->ep = e;
  p->sep = s;
  return 0;
}

int resihp__coord_port(const resihp__coord_t *c) {
  return c->port;
}
int resihp__coord_state(const resihp__coord_t *c) {
  return c->state;
}
long resihp__coord_step(const resihp__coord_t *c) {
  return c->step;
}
uint32_t resihp__coord_epoch(const resihp__coord_t *c) {
  return c->epoch;
}
int resihp__coord_members(const resihp__coord_t *c) {
  return c->nmembers;
}
uint32_t resihp__coord_term(const resihp__coord_t *c) { return c->term; }

void resihp__coord_set_term(resihp__coord_t *c, uint32_t term) {
  c->term = term;
  resihp__coord_dirty(c);
}

int resihp__coord_superseded(const resihp__coord_t *c) { return c->superseded; }

/* On the monotonic clock, not the listening one: a primary that was
 * stopped has heard nobody for all that time, whatever its poll says. */
int resihp__coord_heard(const resihp__coord_t *c, int *members) {
  int64_t now = resihp__now_ms();
  int n = 0;
  for (int i = 0; i < c->nmembers; i++) {
    const rep_t *p = &c->reps[c->members[i]];
    n += p->conn >= 0 && p->last_life > 0 && now - p->last_life <= c->o.silence_ms;
  }
  *members = c->nmembers;
  return n;
}

int resihp__coord_connected(const resihp__coord_t *c, int r) {
  return r >= 0 && r < c->R && c->reps[r].conn >= 0;
}
int resihp__coord_finished(const resihp__coord_t *c, int r) {
  return r >= 0 && r < c->R && c->reps[r].finished;
}
int resihp__coord_refused(const resihp__coord_t *c, int r, char *why,
                          size_t n) {
  const char *rf = r >= 0 && r < c->R ? c->reps[r].refused : "";
  if (why && n)
    snprintf(why, n, "%s", rf);
  return rf[0] != '\0';
}

int resihp__coord_replica_proc(const resihp__coord_t *c, int r, long *pid,
                               const char **node, long *jobid, long *stepid) {
  if (r < 0 || r >= c->R)
    return -1;
  const rep_t *p = &c->reps[r];
  *pid = p->pid;
  *node = p->node;
  *jobid = p->jobid;
  *stepid = p->stepid;
  return 0;
}
int resihp__coord_aborted(const resihp__coord_t *c, char *why, size_t n) {
  if (why && n)
    snprintf(why, n, "%s", c->abort_replica >= 0 ? c->abort_why : "");
  return c->abort_replica;
}

int resihp__coord_replica_eps(const resihp__coord_t *c, int r, const char **ep,
                              const char **sep, const char **lep) {
  if (r < 0 || r >= c->R)
    return RESIHP_ENOENT;
  if (!c->reps[r].ep || !c->reps[r].ep[0]) {
    /* a leader still gathering its ranks has only said LEP */
    for (int k = 0; lep && k < c->nconns; k++)
      if (c->conns[k].w.fd >= 0 && c->conns[k].lep_replica == r &&
          c->conns[k].lep[0]) {
        *lep = c->conns[k].lep;
        if (ep)
          *ep = "";
        if (sep)
          *sep = "";
        return 0;
      }
    return RESIHP_ENOENT;
  }
  if (ep)
    *ep = c->reps[r].ep;
  if (sep)
    *sep = c->reps[r].sep;
  if (lep)
    *lep = c->reps[r].lep;
  return 0;
}

const char *resihp__coord_check(const resihp__coord_t *c) {
  if (c->nmembers < 0 || c->nmembers > c->R)
    return "member count out of range";
  for (int i = 0; i < c->nmembers; i++) {
    int m = c->members[i];
    if (m < 0 || m >= c->R)
      return "member id out of range";
    if (i && c->members[i - 1] >= m)
      return "members not sorted or repeated";
    if (c->reps[m].state != R_MEMBER)
      return "a member is not in state MEMBER";
  }
  int healthy = 0;
  for (int r = 0; r < c->R; r++) {
    const rep_t *p = &c->reps[r];
    if (p->state == R_MEMBER && !resihp__coord_is_member(c, r))
      return "state MEMBER outside the group";
    if (p->conn >= 0 && (p->conn >= c->nconns || c->conns[p->conn].w.fd < 0 ||
                         c->conns[p->conn].replica != r))
      return "replica and connection disagree";
    healthy += p->state == R_MEMBER && p->conn >= 0 && !p->catching;
  }
  for (int mb = 0; mb < c->M; mb++) {
    if (c->owner[mb] < 0 || c->owner[mb] >= c->R)
      return "ledger owner out of range";
    if (c->phase == P_RUN && !c->in_step[c->owner[mb]])
      return "ledger owner was not in the step";
  }
  if (c->S && (c->step > c->S || c->capsteps < c->step + 1))
    return "step out of range";
  for (int k = 0; k < c->nrounds; k++)
    if (c->rounds[k].n < 0 || c->rounds[k].n > c->M)
      return "round moves out of range";
  if (c->state == RESIHP__COORD_LOST && healthy)
    return "job lost while a connected member held the state";
  return NULL;
}
