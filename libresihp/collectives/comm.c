/* SPDX-License-Identifier: BSD-3-Clause */
/* Communicator: membership epochs, failure monitor, abort propagation and
 * the shrink agreement.
 *
 * Failure detection. The monitor thread owns the read side of the control
 * connections. Every heartbeat period it sends a HEARTBEAT to each member
 * of the view; any byte from a peer refreshes that peer's last-heard time.
 * A peer silent for the detection bound T plus one heartbeat period hb
 * (hung, SIGSTOPped, or its host gone), or whose control socket reports
 * EOF/error (died, link cut), is marked dead here. The extra period is what
 * makes T the bound the user asked for: the last beat of a peer that stops
 * left up to hb before it stopped, so a pause shorter than T is never taken
 * for a failure, and a longer one is caught between T and T + hb after it
 * began. (At 90 % of T, a 1 s bound failed a rank paused for 0.87 s.) Peers
 * are marked dead here; the data plane marks peers dead on socket errors as
 * well. Marking wakes the algorithm through an eventfd. Because heartbeats
 * come from a thread of their own, a rank busy computing between
 * collectives is never mistaken for a dead one.
 *
 * Outcome of a collective. A rank whose ring fails broadcasts ABORT(seq,
 * suspects) on the control links. A rank whose ring completes sends DONE(seq)
 * to every member (a zero-length frame on the data links, behind its last
 * chunk; between ranks of one host a vote word in their rings' shared
 * memory instead) and returns success only once every member has sent
 * DONE(seq) or
 * is dead in its own eyes; an ABORT(seq) from any member makes it fail as
 * well (allreduce.c). So with one
 * failure per collective either every survivor keeps the result (all of
 * them finished the ring, the dead rank's contribution included) or every
 * survivor gets an error with its buffer untouched and retries.
 *
 * Shrink agreement. Survivors flood suspicion sets in numbered rounds on
 * the control connections: in round r each sends its set S to every other
 * member and waits for the round-r set of each member outside S (a member
 * that stays silent for twice the detection bound joins S). The new S is
 * the union of everything heard. When every set heard in a round equals the set
 * sent, the round ends the agreement: every member outside S sent S to everyone
 * and heard only S, so all of them stop in that same round with the same
 * set. A further failure during the agreement can leave the rank that saw
 * it in a later round while its peers have already moved on; they answer
 * its late agreement messages with DECIDED(the set they committed), which
 * it adopts (the new failure is then handled in the next epoch). Without an
 * answer it ends up excluded or alone - never mixed into a view that others
 * disagree with, because every data frame carries the epoch and views are
 * built deterministically from the agreed set. A rank that finds itself in
 * the agreed set, or in any set a member sent it during this agreement
 * (sets only grow, so that member's view will not contain it), returns
 * RESIHP_EEXCLUDED; so does its next call when such a set arrives just
 * after it committed. A pure network partition costs
 * both sides of the cut link (union semantics); re-admission is the
 * coordinator's job.
 */
#include "config.h"

#include "../transport/mesh.h"
#include "../transport/shm.h"
#include "comm_internal.h"
#include "device_staging.h"

#include <resihp/error.h>
#include <resihp/log.h>
#include <resihp/settings.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SET_LEN(c) ((size_t)((c)->world_size + 7) / 8)

void resihp_comm_opts_init(resihp_comm_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->listen_fd = -1;
  o->deterministic = -1;
  o->transport = -1;
  o->mac_data = -1;
  o->small_max = -1;
  o->single_copy = -1;
}

static int64_t now_ms(void) { return resihp__now_ms(); }

static void notify(resihp_comm_t *c) {
  uint64_t one = 1;
  atomic_store(&c->failed, 1);
  if (write(c->notify_fd, &one, sizeof(one)) < 0) {
    /* The counter is saturated or the fd is gone: the flag is enough. */
  }
  pthread_cond_broadcast(&c->cv);
}

void resihp__comm_mark_dead(resihp_comm_t *c, int peer, int code) {
  if (peer < 0 || peer >= c->world_size || peer == c->world_rank)
    return;
  pthread_mutex_lock(&c->mu);
  if (c->in_view[peer] && !resihp__set_has(&c->dead, peer)) {
    resihp__set_add(&c->dead, peer);
    if (!c->dead_code)
      c->dead_code = code;
    resihp_log(RESIHP_LOG_WARN, "allreduce",
               "rank %d: peer rank %d failed in epoch %u (%s)", c->world_rank,
               peer, c->epoch, resihp_strerror(code));
    notify(c);
  }
  pthread_mutex_unlock(&c->mu);
}

/* Control frames are small; a frame is written whole or not at all (a
 * partial write is finished within the detection bound, else the peer is
 * declared dead), so the control stream never loses its framing. Each
 * carries a MAC with the link's sequence number (msgauth.h), sealed under
 * ctrl_mu in the order frames go out. */
void resihp__comm_send_ctrl(resihp_comm_t *c, int peer, int type, uint32_t seq,
                            const resihp__set_t *set) {
  resihp__comm_send_ctrl_epoch(c, peer, type, seq, set, 0, 0);
}

void resihp__comm_send_ctrl_epoch(resihp_comm_t *c, int peer, int type,
                                  uint32_t seq, const resihp__set_t *set,
                                  uint32_t epoch, int use_epoch) {
  struct {
    resihp__frame_hdr_t h;
    uint8_t set[RESIHP__SET_BYTES + RESIHP__MAC_LEN]; /* set, then tag */
  } f;
  memset(&f.h, 0, sizeof(f.h));
  f.h.magic = RESIHP__FRAME_MAGIC;
  f.h.type = (uint16_t)type;
  f.h.src = (uint32_t)c->world_rank;
  f.h.seq = seq;
  size_t len = set ? SET_LEN(c) : 0;
  f.h.len = (uint32_t)len;
  if (set)
    memcpy(f.set, set->b, len);
  pthread_mutex_lock(&c->ctrl_mu);
  f.h.epoch = use_epoch ? epoch : c->epoch;
  int fd = c->ctrl_fds[peer];
  int failed = 0;
  struct pollfd room = {.fd = fd, .events = POLLOUT};
  if (fd >= 0 && type == RESIHP__FRAME_HEARTBEAT && poll(&room, 1, 0) == 0) {
    /* Skip this beat, before it takes a sequence number: the peer is not
     * draining anyway. */
  } else if (fd >= 0) {
    const void *parts[2] = {&f.h, f.set};
    size_t lens[2] = {sizeof(f.h), len};
    resihp__msgauth_seal(&c->ctrl_auth[peer], parts, lens, 2, f.set + len);
    size_t total = sizeof(f.h) + len + RESIHP__MAC_LEN;
    ssize_t w = send(fd, &f, total, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      w = resihp__io_full(fd, &f, total, 1, now_ms() + c->detect_ms) ? -1
                                                                      : (ssize_t)total;
    else if (w > 0 && (size_t)w < total &&
             resihp__io_full(fd, (uint8_t *)&f + w, total - (size_t)w, 1,
                             now_ms() + c->detect_ms))
      w = -1;
    failed = w < 0;
  }
  pthread_mutex_unlock(&c->ctrl_mu);
  if (failed)
    resihp__comm_mark_dead(c, peer, RESIHP_EPEER);
}

void resihp__comm_broadcast_ctrl(resihp_comm_t *c, int type, uint32_t seq,
                                 const resihp__set_t *set) {
  for (int i = 0; i < c->nmembers; i++)
    if (c->members[i] != c->world_rank)
      resihp__comm_send_ctrl(c, c->members[i], type, seq, set);
}

/* ---- monitor thread ------------------------------------------------------ */


/* Handle one complete control frame from peer (mu held). */
static int handle_ctrl(resihp_comm_t *c, int peer, const struct rxstate *r) {
  const resihp__frame_hdr_t *h = &r->h;
  int names_me = (r->set[c->world_rank >> 3] >> (c->world_rank & 7)) & 1;
  if (h->type == RESIHP__FRAME_AGREE && names_me && h->epoch == c->epoch &&
      c->excluded_by < 0) {
    /* Sets only grow: that member's view will not contain this rank. */
    c->excluded_by = peer;
    notify(c);
  }
  if (h->type == RESIHP__FRAME_AGREE && h->epoch + 1 == c->epoch &&
      c->prev_valid) {
    /* A peer still agreeing on the epoch this rank has left: the decision
     * is final, tell it (the monitor sends once the lock is dropped). New
     * suspicions it may have belong to the next epoch. */
    c->reply_decided[peer] = 1;
    return 0;
  }
  if (h->type == RESIHP__FRAME_DECIDED) {
    if (h->epoch == c->epoch && !c->decided_have) {
      c->decided_have = 1;
      memcpy(c->decided.b, r->set, SET_LEN(c));
      pthread_cond_broadcast(&c->cv);
    }
    return 0;
  }
  if (h->epoch < c->epoch)
    return 0; /* left over from an older membership */
  if (h->epoch > c->epoch) {
    /* A peer already in the next epoch: it finished an agreement this rank
     * is still running. Keep what it says about that epoch (its agreement
     * sets, aborts) for when this rank gets there: dropping them would
     * leave this rank waiting for messages that were already sent. */
    if (h->epoch == c->epoch + 1 && h->type != RESIHP__FRAME_HEARTBEAT) {
      struct resihp__stash *st = &c->stash[peer];
      if (st->n < RESIHP__STASH_MAX)
        st->f[st->n++] = *r;
    }
    return 0;
  }
  switch (h->type) {
  case RESIHP__FRAME_HEARTBEAT:
    return 0;
  case RESIHP__FRAME_DONE:
    if ((int64_t)h->seq + 1 > c->done_seq[peer])
      c->done_seq[peer] = (int64_t)h->seq + 1;
    pthread_cond_broadcast(&c->cv);
    return 0;
  case RESIHP__FRAME_ABORT:
    c->abort_seq[peer] = (int64_t)h->seq + 1;
    for (size_t k = 0; k < SET_LEN(c); k++)
      c->blamed.b[k] |= r->set[k];
    notify(c);
    return 0;
  case RESIHP__FRAME_BYE:
    /* The peer destroyed its communicator: gone, but not a fault. */
    if (c->in_view[peer] && !resihp__set_has(&c->dead, peer)) {
      resihp__set_add(&c->dead, peer);
      resihp__set_add(&c->departed, peer);
      if (!c->dead_code)
        c->dead_code = RESIHP_EPEER;
      resihp_log(RESIHP_LOG_INFO, "allreduce", "rank %d left the communicator",
                 peer);
      notify(c);
    }
    return 0;
  case RESIHP__FRAME_AGREE: {
    struct mbox *m = &c->mbox[peer][h->seq & 1];
    m->have = 1;
    m->round = h->seq;
    memcpy(m->set.b, r->set, SET_LEN(c));
    pthread_cond_broadcast(&c->cv);
    return 0;
  }
  }
  return RESIHP_EPROTO;
}

static int read_ctrl(resihp_comm_t *c, int peer, struct rxstate *r) {
  for (;;) {
    uint8_t *dst;
    size_t want = resihp__ctrl_want(r, RESIHP__MAC_LEN, &dst);
    ssize_t n = recv(c->ctrl_fds[peer], dst, want, MSG_DONTWAIT);
    if (n < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
                 ? 0
                 : RESIHP_EPEER;
    if (n == 0)
      return RESIHP_EPEER; /* closed or died, also mid-frame */
    int rc = resihp__ctrl_got(r, (size_t)n, peer, SET_LEN(c),
                              &c->ctrl_auth[peer]);
    if (rc == 1) {
      pthread_mutex_lock(&c->mu);
      rc = handle_ctrl(c, peer, r);
      pthread_mutex_unlock(&c->mu);
      r->got = 0;
      if (!rc)
        continue;
    }
    /* Bad bytes from a peer whose link has closed: a dead peer, as on the
     * data links (transport.h). */
    if (rc == RESIHP_EPROTO && resihp__link_closed(c->ctrl_fds[peer]))
      return RESIHP_EPEER;
    if (rc < 0)
      return rc;
  }
}

/* Whether peer's control socket holds unread bytes (then its last-heard
 * time becomes now): the silence may be this process's own, when it was
 * stopped or interrupted itself, and the peer must not pay for that. */
static int pending_input(resihp_comm_t *c, int peer, int64_t *last,
                         int64_t now) {
  struct pollfd p = {.fd = c->ctrl_fds[peer], .events = POLLIN};
  if (p.fd < 0 || poll(&p, 1, 0) != 1)
    return 0;
  *last = now;
  return 1;
}

static void *monitor_main(void *arg) {
  resihp_comm_t *c = arg;
  int n = c->world_size;
  struct pollfd *pfd = calloc((size_t)n + 1, sizeof(*pfd));
  int *who = calloc((size_t)n + 1, sizeof(int));
  int64_t *last = calloc((size_t)n, sizeof(int64_t));
  struct rxstate *rx = calloc((size_t)n, sizeof(*rx));
  uint8_t *live = calloc((size_t)n, 1);
  uint8_t *closed = c->ctrl_closed; /* EOF or error seen: stop polling */
  uint8_t *reply = calloc((size_t)n, 1);
  uint32_t seen_epoch = UINT32_MAX;
  if (!pfd || !who || !last || !rx || !live || !reply) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "monitor: out of memory; failure detection is off");
    goto out;
  }
  int64_t next_beat = 0;
  /* Silence that makes a peer dead: the bound plus one heartbeat period
   * (see the top of this file), so that only pauses longer than the bound
   * count. */
  int64_t silence = (int64_t)c->detect_ms + c->hb_ms;
  for (;;) {
    pthread_mutex_lock(&c->mu);
    if (c->epoch != seen_epoch) {
      /* New view: the detection clock starts again for everyone. */
      seen_epoch = c->epoch;
      for (int i = 0; i < n; i++)
        last[i] = now_ms();
    }
    /* Peers already marked dead are still read (an agreement message from
     * one that is alive after all must not be missed) but no longer
     * heartbeated or timed. */
    memcpy(live, c->in_view, (size_t)n);
    for (int i = 0; i < n; i++)
      if (resihp__set_has(&c->dead, i))
        live[i] = 0;
    int nfd = 0;
    for (int i = 0; i < n; i++) {
      if (!c->in_view[i] || closed[i] || i == c->world_rank ||
          c->ctrl_fds[i] < 0)
        continue;
      pfd[nfd] = (struct pollfd){.fd = c->ctrl_fds[i], .events = POLLIN};
      who[nfd++] = i;
    }
    pthread_mutex_unlock(&c->mu);
    pfd[nfd] = (struct pollfd){.fd = c->stop_pipe[0], .events = POLLIN};
    who[nfd++] = -1;
    int64_t t = now_ms();
    /* Wake for the next beat or the earliest silence deadline, whichever
     * comes first, so detection is not late by a polling period. */
    int64_t wake = next_beat;
    for (int i = 0; i < n; i++)
      if (live[i] && i != c->world_rank && last[i] + silence < wake)
        wake = last[i] + silence;
    int wait = wake > t ? (int)(wake - t) + 1 : 0;
    if (poll(pfd, (nfds_t)nfd, wait) < 0 && errno != EINTR)
      break;
    t = now_ms();
    for (int k = 0; k < nfd; k++) {
      if (!pfd[k].revents)
        continue;
      if (who[k] < 0)
        goto out;
      int i = who[k];
      last[i] = t;
      int rc = read_ctrl(c, i, &rx[i]);
      if (rc) {
        pthread_mutex_lock(&c->mu);
        closed[i] = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        resihp__comm_mark_dead(c, i, rc);
      }
    }
    {
      /* Answers about the previous epoch, outside the lock. */
      resihp__set_t prev;
      uint32_t prev_epoch = 0;
      int any = 0;
      pthread_mutex_lock(&c->mu);
      for (int i = 0; i < n; i++) {
        reply[i] = c->reply_decided[i];
        any |= reply[i];
        c->reply_decided[i] = 0;
      }
      prev = c->prev_decided;
      prev_epoch = c->epoch - 1;
      pthread_mutex_unlock(&c->mu);
      for (int i = 0; any && i < n; i++)
        if (reply[i])
          resihp__comm_send_ctrl_epoch(c, i, RESIHP__FRAME_DECIDED, 0, &prev,
                                       prev_epoch, 1);
    }
    if (t >= next_beat) {
      for (int i = 0; i < n; i++)
        if (live[i] && i != c->world_rank)
          resihp__comm_send_ctrl(c, i, RESIHP__FRAME_HEARTBEAT, 0, NULL);
      next_beat = t + c->hb_ms;
    }
    for (int i = 0; i < n; i++)
      if (live[i] && i != c->world_rank && t - last[i] >= silence &&
          !pending_input(c, i, &last[i], t)) {
        resihp_log(RESIHP_LOG_WARN, "allreduce",
                   "rank %d silent for %lld ms (bound %d ms): hung or gone",
                   i, (long long)(t - last[i]), c->detect_ms);
        resihp__comm_mark_dead(c, i, RESIHP_ETIMEDOUT);
      }
  }
out:
  free(pfd);
  free(who);
  free(last);
  free(rx);
  free(live);
  free(reply);
  return NULL;
}

/* ---- creation ------------------------------------------------------------ */

static int read_secret(const char *path, uint8_t **out, size_t *len) {
  if (!path || !*path) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "no job secret: set RESIHP_SECRET_FILE (or pass one) so that "
               "peers can authenticate each other");
    return RESIHP_EAUTH;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce", "cannot read secret file %s: %s",
               path, strerror(errno));
    return RESIHP_EAUTH;
  }
  uint8_t *buf = malloc(4096);
  size_t n = buf ? fread(buf, 1, 4096, f) : 0;
  fclose(f);
  if (!n) {
    free(buf);
    resihp_log(RESIHP_LOG_ERROR, "allreduce", "secret file %s is empty",
               path);
    return RESIHP_EAUTH;
  }
  *out = buf;
  *len = n;
  return 0;
}

void resihp_comm_destroy(resihp_comm_t *c) {
  if (!c)
    return;
  if (c->tp)
    resihp__p2p_flush(c); /* messages handed over must leave first */
  if (c->monitor_running) {
    resihp__comm_broadcast_ctrl(c, RESIHP__FRAME_BYE, c->seq, NULL);
    if (write(c->stop_pipe[1], "x", 1) < 0) {
      /* cannot happen with an open pipe; join would hang, so say it */
      resihp_log(RESIHP_LOG_ERROR, "allreduce", "cannot stop monitor: %s",
                 strerror(errno));
    }
    pthread_join(c->monitor, NULL);
  }
  if (c->gpu)
    c->gpu->ops->destroy(c->gpu);
#ifdef RESIHP_HAVE_CUDA
  resihp__staged_free(c->staged);
#endif
#ifdef RESIHP_HAVE_CUDA_KERNELS
  resihp__device_fixed_free(c);
#endif
  if (c->tp)
    c->tp->ops->destroy(c->tp);
  if (c->ctrl_fds) {
    for (int i = 0; c->in_view && i < c->world_size; i++)
      if (!c->in_view[i] && c->ctrl_fds[i] >= 0) {
        close(c->ctrl_fds[i]); /* removed peers: already shut down */
        c->ctrl_fds[i] = -1;
      }
    resihp__graceful_close(c->ctrl_fds, c->world_size, 1000);
  }
  if (c->stop_pipe[0] >= 0) {
    close(c->stop_pipe[0]);
    close(c->stop_pipe[1]);
  }
  if (c->notify_fd >= 0)
    close(c->notify_fd);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->ctrl_mu);
  pthread_cond_destroy(&c->cv);
  free(c->members);
  free(c->data_fds);
  free(c->ctrl_fds);
  if (c->ctrl_auth)
    explicit_bzero(c->ctrl_auth, (size_t)c->world_size * sizeof(*c->ctrl_auth));
  free(c->ctrl_auth);
  free(c->in_view);
  free(c->ctrl_closed);
  free(c->reply_decided);
  free(c->stash);
  free(c->abort_seq);
  free(c->done_seq);
  free(c->mbox);
  resihp__p2p_free(c);
  free(c->work);
  free(c->staging);
  for (int i = 0; c->cma_pidfd && i < c->world_size; i++)
    if (c->cma_pidfd[i] >= 0)
      close(c->cma_pidfd[i]);
  free(c->cma_pidfd);
  free(c->cma_pid);
  free(c->cma_reach);
  free(c);
}

int resihp_comm_create(const resihp_comm_opts_t *o, resihp_comm_t **out) {
  return resihp__comm_create_group(o, 0, out);
}

int resihp__comm_create_group(const resihp_comm_opts_t *o, uint32_t group,
                              resihp_comm_t **out) {
  if (!o || !out || o->nranks < 1 || o->nranks > RESIHP_COMM_MAX_RANKS ||
      o->rank < 0 || o->rank >= o->nranks || (!o->endpoints && o->nranks > 1)) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "resihp_comm_create: need rank in 0..nranks-1, nranks in "
               "1..%d and an endpoint per rank",
               RESIHP_COMM_MAX_RANKS);
    return RESIHP_EINVAL;
  }
  const resihp_settings_t *s = resihp_settings_global();
  int n = o->nranks, rc;
  resihp_comm_t *c = calloc(1, sizeof(*c));
  if (!c)
    return RESIHP_ENOMEM;
  c->stop_pipe[0] = c->stop_pipe[1] = c->notify_fd = -1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->ctrl_mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->world_rank = o->rank;
  c->world_size = n;
  c->detect_ms = o->detect_timeout_ms > 0
                     ? o->detect_timeout_ms
                     : (int)resihp_settings_get(s, RESIHP_SETTING_DETECT_TIMEOUT);
  c->hb_ms = o->heartbeat_ms > 0
                 ? o->heartbeat_ms
                 : (int)resihp_settings_get(s, RESIHP_SETTING_HEARTBEAT);
  if (c->hb_ms * 3 > c->detect_ms)
    c->hb_ms = c->detect_ms / 3 > 1 ? c->detect_ms / 3 : 1;
  c->chunk_bytes = (size_t)(o->chunk_bytes > 0
                                ? o->chunk_bytes
                                : resihp_settings_get(s, RESIHP_SETTING_CHUNK_BYTES));
  c->chunk_bytes &= ~(size_t)7; /* whole elements of every type */
  if (c->chunk_bytes < 8)
    c->chunk_bytes = 8;
  c->deterministic = o->deterministic >= 0
                         ? o->deterministic
                         : (int)resihp_settings_get(s, RESIHP_SETTING_DETERMINISTIC);
  c->frac_bits = resihp_fixed_frac_bits();

  c->unprotected = o->unprotected;
  c->small_max = (size_t)(o->small_max >= 0
                              ? o->small_max
                              : resihp_settings_get(s, RESIHP_SETTING_SMALL_MAX));
  c->mac_data = o->mac_data >= 0
                    ? o->mac_data
                    : (int)resihp_settings_get(s, RESIHP_SETTING_MAC_DATA);
  c->op_ms = o->op_timeout_ms > 0 ? o->op_timeout_ms : 300000;
  c->members = calloc((size_t)n, sizeof(int));
  c->data_fds = calloc((size_t)n, sizeof(int));
  c->ctrl_fds = calloc((size_t)n, sizeof(int));
  c->ctrl_auth = calloc((size_t)n, sizeof(*c->ctrl_auth));
  resihp__msgauth_t *data_auth = calloc((size_t)n, sizeof(*data_auth));
  c->in_view = calloc((size_t)n, 1);
  c->ctrl_closed = calloc((size_t)n, 1);
  c->reply_decided = calloc((size_t)n, 1);
  c->stash = calloc((size_t)n, sizeof(*c->stash));
  c->abort_seq = calloc((size_t)n, sizeof(int64_t));
  c->done_seq = calloc((size_t)n, sizeof(int64_t));
  c->mbox = calloc((size_t)n, sizeof(*c->mbox));
  if (!c->members || !c->data_fds || !c->ctrl_fds || !c->ctrl_auth ||
      !data_auth || !c->in_view ||
      !c->ctrl_closed || !c->reply_decided || !c->stash ||
      !c->abort_seq || !c->done_seq || !c->mbox) {
    rc = RESIHP_ENOMEM;
    goto fail;
  }
  for (int i = 0; i < n; i++) {
    c->members[i] = i;
    c->in_view[i] = 1;
    c->ctrl_fds[i] = c->data_fds[i] = -1;
  }
  c->nmembers = n;
  c->my_index = o->rank;
  c->excluded_by = -1;
  if (pipe2(c->stop_pipe, O_CLOEXEC) < 0 ||
      (c->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
    rc = RESIHP_ESYS;
    goto fail;
  }
  uint8_t *filesecret = NULL;
  size_t secret_len = o->secret_len;
  const uint8_t *secret = o->secret;
  if (!secret || !secret_len) {
    rc = read_secret(resihp_settings_get_str(s, RESIHP_SETTING_SECRET_FILE),
                     &filesecret, &secret_len);
    if (rc)
      goto fail;
    secret = filesecret;
  }
  resihp__mesh_opts_t mo = {.rank = o->rank,
                            .nranks = n,
                            .endpoints = o->endpoints,
                            .listen_fd = o->listen_fd,
                            .secret = secret,
                            .secret_len = secret_len,
                            .timeout_ms = o->connect_timeout_ms > 0
                                              ? o->connect_timeout_ms
                                              : 30000,
                            .group = group,
                            .abort = o->setup_abort,
                            .abort_arg = o->setup_abort_arg};
  rc = n > 1 ? resihp__mesh_connect(&mo, c->data_fds, c->ctrl_fds, data_auth,
                                    c->ctrl_auth)
             : 0;
  if (filesecret) {
    memset(filesecret, 0, secret_len);
    free(filesecret);
  }
  if (rc)
    goto fail;
  /* Host data plane: shared-memory rings with peers on this host unless
   * TCP was asked for (opts, else RESIHP_TRANSPORT). */
  int tr = o->transport >= 0
               ? o->transport
               : (int)resihp_settings_get(s, RESIHP_SETTING_TRANSPORT);
  resihp__ring_t **rin = calloc((size_t)n, sizeof(*rin));
  resihp__ring_t **rout = calloc((size_t)n, sizeof(*rout));
  rc = rin && rout ? 0 : RESIHP_ENOMEM;
  if (!rc && n > 1)
    rc = resihp__shm_setup(o->rank, n, c->data_fds, data_auth, tr != 1,
                           resihp__now_ms() + mo.timeout_ms, rin, rout);
  if (!rc && n > 1 &&
      (rc = resihp__cma_comm_setup(
           c,
           o->single_copy >= 0
               ? o->single_copy
               : (int)resihp_settings_get(s, RESIHP_SETTING_SINGLE_COPY),
           rin, data_auth, resihp__now_ms() + mo.timeout_ms)))
    for (int i = 0; i < n; i++) { /* the transport never took them */
      resihp__ring_unmap(rin[i]);
      resihp__ring_unmap(rout[i]);
    }
  if (!rc)
    rc = resihp__tcp_transport_create(o->rank, n, c->data_fds, rin, rout,
                                      c->chunk_bytes, c->notify_fd, data_auth,
                                      c->mac_data, &c->tp);
  if (!rc) {
    int shm = 0;
    for (int i = 0; i < n; i++)
      shm += rin[i] != NULL;
    resihp_log(RESIHP_LOG_DEBUG, "allreduce",
               "rank %d: %d peer(s) over shared memory, %d over TCP", o->rank,
               shm, n - 1 - shm);
  }
  free(rin);
  free(rout);
  explicit_bzero(data_auth, (size_t)n * sizeof(*data_auth)); /* copied */
  free(data_auth);
  data_auth = NULL;
  if (rc) {
    for (int i = 0; i < n; i++)
      if (c->data_fds[i] >= 0)
        close(c->data_fds[i]);
    goto fail;
  }
  if (!c->unprotected && n > 1) {
    if (pthread_create(&c->monitor, NULL, monitor_main, c)) {
      rc = RESIHP_ESYS;
      goto fail;
    }
    c->monitor_running = 1;
  }
  resihp_log(RESIHP_LOG_INFO, "allreduce",
             "rank %d of %d connected (detect %d ms, heartbeat %d ms, chunk "
             "%zu B%s%s%s)",
             o->rank, n, c->detect_ms, c->hb_ms, c->chunk_bytes,
             c->deterministic ? ", deterministic" : "",
             c->unprotected ? ", unprotected" : "",
             c->mac_data ? ", MACs on data" : "");
  *out = c;
  return 0;
fail:
  if (data_auth)
    explicit_bzero(data_auth, (size_t)n * sizeof(*data_auth));
  free(data_auth);
  resihp_comm_destroy(c);
  return rc;
}

/* ---- queries ------------------------------------------------------------- */

int resihp_comm_rank(const resihp_comm_t *c) { return c ? c->my_index : -1; }
int resihp_comm_size(const resihp_comm_t *c) { return c ? c->nmembers : 0; }
int resihp_comm_world_rank(const resihp_comm_t *c) {
  return c ? c->world_rank : -1;
}
int resihp_comm_world_size(const resihp_comm_t *c) {
  return c ? c->world_size : 0;
}
int resihp_comm_member(const resihp_comm_t *c, int i) {
  return c && i >= 0 && i < c->nmembers ? c->members[i] : -1;
}
uint32_t resihp_comm_epoch(const resihp_comm_t *c) { return c ? c->epoch : 0; }

int resihp_comm_failed(const resihp_comm_t *cc, int *ranks, int max) {
  resihp_comm_t *c = (resihp_comm_t *)cc;
  if (!c)
    return 0;
  int k = 0;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->world_size; i++)
    if (c->in_view[i] &&
        (resihp__set_has(&c->dead, i) || resihp__set_has(&c->blamed, i))) {
      if (ranks && k < max)
        ranks[k] = i;
      k++;
    }
  pthread_mutex_unlock(&c->mu);
  return k;
}

int resihp_comm_test_cut_link(resihp_comm_t *c, int peer) {
  if (!c || peer < 0 || peer >= c->world_size || peer == c->world_rank)
    return RESIHP_EINVAL;
  if (c->data_fds[peer] >= 0)
    shutdown(c->data_fds[peer], SHUT_RDWR);
  if (c->ctrl_fds[peer] >= 0)
    shutdown(c->ctrl_fds[peer], SHUT_RDWR);
  return 0;
}

/* ---- shrink -------------------------------------------------------------- */

void (*resihp__shrink_test_hook)(resihp_comm_t *c, int point, uint32_t round);

static void set_union(resihp__set_t *a, const resihp__set_t *b, size_t len) {
  for (size_t k = 0; k < len; k++)
    a->b[k] |= b->b[k];
}

int resihp_comm_shrink(resihp_comm_t *c, const int *suspects, int nsuspects,
                       int *failed, int max, int *nfailed) {
  if (!c || (nsuspects && !suspects))
    return RESIHP_EINVAL;
  size_t len = SET_LEN(c);
  resihp__set_t S;
  memset(&S, 0, sizeof(S));
  pthread_mutex_lock(&c->mu);
  set_union(&S, &c->dead, len);
  set_union(&S, &c->blamed, len);
  pthread_mutex_unlock(&c->mu);
  for (int k = 0; k < nsuspects; k++)
    if (suspects[k] >= 0 && suspects[k] < c->world_size &&
        suspects[k] != c->world_rank)
      resihp__set_add(&S, suspects[k]);
  for (int i = 0; i < c->world_size; i++)
    if (!c->in_view[i] && resihp__set_has(&S, i))
      S.b[i >> 3] &= (uint8_t)~(1u << (i & 7));
  int rc = 0;
  uint32_t round;
  for (round = 0;; round++) {
    pthread_mutex_lock(&c->mu);
    if (c->excluded_by >= 0)
      resihp__set_add(&S, c->world_rank);
    int adopt = c->decided_have;
    if (adopt)
      S = c->decided;
    pthread_mutex_unlock(&c->mu);
    if (adopt && !resihp__set_has(&S, c->world_rank))
      break; /* others already concluded: their set is final */
    if (resihp__set_has(&S, c->world_rank)) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "rank %d was excluded by its peers in epoch %u; it must "
                 "leave the job (the coordinator may re-admit it)",
                 c->world_rank, c->epoch);
      rc = RESIHP_EEXCLUDED;
      break;
    }
    /* Each round either ends the agreement or grows the set (or waits at
     * most twice the detection bound), so this bound is never reached
     * unless peers keep sending conflicting sets. */
    if (round > 2 * (uint32_t)c->world_size + 4) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "rank %d: no agreement after %u rounds in epoch %u",
                 c->world_rank, round, c->epoch);
      rc = RESIHP_ETIMEDOUT;
      break;
    }
    /* Suspects get the set too (when they can still be reached): a rank
     * cut off from some peers learns that it was excluded. */
    for (int i = 0; i < c->nmembers; i++) {
      int m = c->members[i];
      if (m != c->world_rank)
        resihp__comm_send_ctrl(c, m, RESIHP__FRAME_AGREE, round, &S);
    }
    resihp__set_t U = S;
    int same = 1;
    int64_t deadline = now_ms() + 2 * (int64_t)c->detect_ms;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nmembers; i++) {
      int m = c->members[i];
      if (m == c->world_rank || resihp__set_has(&S, m))
        continue;
      struct mbox *mb = &c->mbox[m][round & 1];
      while (!(mb->have && mb->round == round) &&
             !resihp__set_has(&c->dead, m) && !c->decided_have) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
          break;
        struct timespec ts = resihp__realtime_in(left);
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
      }
      if (mb->have && mb->round == round) {
        if (memcmp(mb->set.b, S.b, len))
          same = 0;
        set_union(&U, &mb->set, len);
      } else if (!c->decided_have) {
        resihp_log(RESIHP_LOG_WARN, "allreduce",
                   "rank %d: no agreement message from rank %d in round %u",
                   c->world_rank, m, round);
        resihp__set_add(&U, m);
        same = 0;
      }
    }
    if (resihp__shrink_test_hook) {
      pthread_mutex_unlock(&c->mu);
      resihp__shrink_test_hook(c, 0, round);
      pthread_mutex_lock(&c->mu);
    }
    /* Only what was flooded this round and this rank's own detections:
     * an accusation relayed by an abort that arrives mid-round was not
     * seen by the others, and counting it would let this rank leave the
     * round with a set nobody else has. The accuser floods its own set. */
    set_union(&U, &c->dead, len);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < c->world_size; i++)
      if (!c->in_view[i] && resihp__set_has(&U, i))
        U.b[i >> 3] &= (uint8_t)~(1u << (i & 7));
    pthread_mutex_lock(&c->mu);
    if (c->excluded_by >= 0 || c->decided_have) /* look again, above */
      same = 0;
    pthread_mutex_unlock(&c->mu);
    if (same && !memcmp(U.b, S.b, len))
      break;
    S = U;
  }
  if (!rc && resihp__shrink_test_hook)
    resihp__shrink_test_hook(c, 1, round);
  if (!rc) {
    /* Before committing, let the monitor read what the ranks being removed
     * sent last: a peer that commits first closes its links right after
     * sending an agreement set that may name this rank, and that set must
     * not be missed. Closed links (killed, cut, departed peers) return at
     * once; a silent peer costs at most two heartbeat periods. */
    int64_t grace = now_ms() + 2 * (int64_t)c->hb_ms;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nmembers; i++) {
      int m = c->members[i];
      if (!resihp__set_has(&S, m))
        continue;
      while (!c->ctrl_closed[m] && c->excluded_by < 0 && now_ms() < grace) {
        struct timespec ts = resihp__realtime_in(10);
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
      }
    }
    if (c->excluded_by >= 0) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "rank %d was excluded by rank %d in epoch %u; it must leave "
                 "the job (the coordinator may re-admit it)",
                 c->world_rank, c->excluded_by, c->epoch);
      rc = RESIHP_EEXCLUDED;
    }
    pthread_mutex_unlock(&c->mu);
  }
  if (rc)
    return rc;
  /* Commit the new view. */
  int k = 0, nm = 0, ngone = 0;
  int *gone = c->gpu ? calloc((size_t)c->nmembers, sizeof(int)) : NULL;
  for (int i = 0; gone && i < c->nmembers; i++)
    if (resihp__set_has(&S, c->members[i]))
      gone[ngone++] = i; /* positions in the old view, as NCCL numbers them */
  c->tp->ops->cancel(c->tp);
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->nmembers; i++) {
    int m = c->members[i];
    if (resihp__set_has(&S, m)) {
      if (failed && k < max)
        failed[k] = m;
      k++;
      c->in_view[m] = 0;
      c->tp->ops->drop_peer(c->tp, m);
      c->data_fds[m] = -1;
      if (c->ctrl_fds[m] >= 0)
        shutdown(c->ctrl_fds[m], SHUT_RDWR);
    } else {
      if (m == c->world_rank)
        c->my_index = nm;
      c->members[nm++] = m;
    }
  }
  c->nmembers = nm;
  pthread_mutex_lock(&c->ctrl_mu);
  c->epoch++;
  pthread_mutex_unlock(&c->ctrl_mu);
  c->seq = 0;
  memset(&c->dead, 0, sizeof(c->dead));
  memset(&c->blamed, 0, sizeof(c->blamed));
  memset(&c->departed, 0, sizeof(c->departed));
  c->dead_code = 0;
  for (int i = 0; i < c->world_size; i++) {
    /* A peer that moved to a later round of this agreement (a second
     * failure it saw before this rank decided) sent it before this commit
     * and would wait for an answer about an epoch this rank has left:
     * answer it with the decision, as for any late agreement message. */
    int later = 0;
    for (int slot = 0; slot < 2; slot++)
      later |= c->mbox[i][slot].have && c->mbox[i][slot].round > round;
    c->abort_seq[i] = c->done_seq[i] = 0;
    c->mbox[i][0].have = c->mbox[i][1].have = 0;
    c->reply_decided[i] = later && c->in_view[i];
  }
  c->prev_decided = S;
  c->prev_valid = 1;
  c->decided_have = 0;

  uint64_t drain;
  while (read(c->notify_fd, &drain, sizeof(drain)) > 0)
    ;
  atomic_store(&c->failed, 0);
  c->tp->ops->set_epoch(c->tp, c->epoch);
  /* Messages of this new epoch that arrived early (after the reset above:
   * an early abort must still fail the next collective). */
  for (int i = 0; i < c->world_size; i++) {
    struct resihp__stash *st = &c->stash[i];
    for (int q = 0; q < st->n && c->in_view[i]; q++)
      handle_ctrl(c, i, &st->f[q]);
    st->n = 0;
  }
  pthread_mutex_unlock(&c->mu);
  if (c->gpu) {
    int grc = gone ? c->gpu->ops->shrink(c->gpu, gone, ngone, 10 * c->detect_ms)
                   : RESIHP_ENOMEM;
    if (grc == RESIHP_ENOTSUP && gone) {
      /* NCCL cannot shrink this one in place: nobody left (a false alarm,
       * a collective past its bound; it may be revoked), or this NCCL has
       * no ncclCommShrink, or it was aborted for want of ncclCommRevoke
       * (transport/nccl.c). The new view is committed and every member of
       * it is here, so attach a new one, which is collective over the view
       * like this call. */
      c->gpu->ops->destroy(c->gpu);
      c->gpu = NULL;
      grc = resihp_comm_attach_device(c, c->gpu_device);
    }
    if (grc) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "rank %d: shrinking the device communicator failed (%s); "
                 "device detached, call resihp_comm_attach_device() again",
                 c->world_rank, resihp_strerror(grc));
      if (c->gpu)
        c->gpu->ops->destroy(c->gpu);
      c->gpu = NULL;
      c->gpu_detached = 1;
    }
  }
  free(gone);
  /* Members whose control link is already gone (a second failure during
   * the agreement) are dead in the new epoch from the start. */
  for (int i = 0; i < c->nmembers; i++)
    if (c->members[i] != c->world_rank && c->ctrl_closed[c->members[i]])
      resihp__comm_mark_dead(c, c->members[i], RESIHP_EPEER);
  if (nfailed)
    *nfailed = k;
  resihp_log(RESIHP_LOG_INFO, "allreduce",
             "rank %d: epoch %u, %d member(s), %d removed", c->world_rank,
             c->epoch, nm, k);
  return 0;
}
