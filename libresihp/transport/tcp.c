/* SPDX-License-Identifier: BSD-3-Clause */
/* TCP data plane: framed, non-blocking streams over the authenticated
 * sockets of the mesh, driven by poll() from the calling thread. For peers
 * on the same host the byte stream runs through shared-memory rings (shm.c)
 * instead, and the socket only carries doorbells and EOF; everything below
 * the byte level (framing, epochs, cancel) is the same for both.
 *
 * Each peer has a small send queue (frames leave in order; a frame is a
 * header plus a payload written with one sendmsg) and at most one posted
 * receive. An arriving header is checked before a byte of its payload is
 * accepted: magic, type, sender, length bound, epoch and tag. A header that
 * cannot be consumed yet (a later collective or epoch) is parked and the
 * socket is not read further until a matching receive is posted, which gives
 * flow control for free.
 *
 * A point-to-point message (post_send_msg) is one queue entry that leaves
 * as a run of frames of at most max_payload bytes: the next frame's header
 * is made (and sealed) when the previous frame has left. detach_sends
 * copies what is left of queued messages, so that a sender need not wait
 * for a receiver that is itself sending to it (p2p.c).
 *
 * MACs (transport.h), on socket links only (a shared-memory ring has
 * nobody on its path): a frame is header | payload | tag. The sender seals
 * a frame when it starts writing it, so frames dropped by cancel before
 * their first byte never use a sequence number; the receiver hashes the
 * bytes as they arrive (before they are summed) and only then completes
 * the receive. Skipped and stale frames are checked too: the sequence must
 * stay in step, and a frame is only known to be stale once its tag says
 * that the epoch in its header is genuine.
 */
#include "config.h"

#include "transport.h"
#include "mesh.h"
#include "shm.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SENDQ 16
#define HDR sizeof(resihp__frame_hdr_t)
#define SCRATCH 65536
#define SPIN_US 50

struct sendreq {
  resihp__frame_hdr_t hdr;
  const uint8_t *buf; /* NULL: pad with zeros (frame cut short by cancel) */
  size_t len;
  size_t off; /* bytes of header + payload (+ tag) written */
  uint8_t tag[RESIHP__MAC_LEN];
  int sealed;
  uint8_t *own; /* private copy (cancel, detach_sends): buf points into it */
  size_t rest;  /* bytes of a message after this frame (post_send_msg) */
};

struct peer {
  int fd;
  resihp__ring_t *rin, *rout; /* shared-memory rings (same host), or NULL */
  int eof;                    /* socket EOF seen while draining doorbells */
  int broken; /* failed once: reported, then no longer polled */
  struct sendreq q[SENDQ];
  int qhead, qcount;
  /* Receive side. */
  resihp__frame_hdr_t rh;
  size_t rh_got;
  int in_payload;
  size_t pay_left;
  uint8_t *pay_dst; /* NULL while skipping */
  int pay_sink;     /* whole elements go to the posted sink as they arrive */
  size_t pay_elem;  /* ... of this many bytes (the frame's form) */
  size_t pay_summed; /* bytes of the payload already handed over */
  int for_posted;   /* this frame completes the posted receive */
  int parked;
  /* The posted receive. */
  int posted, done;
  resihp__tag_t ptag;
  uint8_t *pbuf;
  size_t plen;
  size_t palt; /* post_recv_alt: the alternative length, else 0 */
  resihp__sink_fn psink; /* post_recv_sink, else NULL */
  void *parg;
  size_t pelem, palt_elem;
  const uint8_t *padd; /* post_recv_reduce (pcombine set): the addend */
  resihp__combine_fn pcombine;
  int pdtype;
  /* The peer's commit vote waited for (tcp_voted), its key. */
  int awaiting;
  uint64_t await_key;
  /* MACs (mac: this link has them). */
  int mac;
  resihp__msgauth_t auth;
  resihp__mackey_t ktx, krx; /* auth's keys, pads hashed */
  resihp__macstream_t rmac; /* the frame being received */
  int rmac_pay;             /* ... covers its payload */
  uint8_t rtag[RESIHP__MAC_LEN];
  size_t rtag_got;
};

struct tcp {
  resihp__transport_t base;
  int self, n;
  uint32_t epoch;
  size_t max_payload;
  int wake_fd;
  struct peer *p;
  struct pollfd *pfd;
  int *pfd_peer;
  uint8_t scratch[SCRATCH];
  unsigned long dropped_stale;
  /* Rings: 1 when an empty/full ring should ask the peer for a doorbell
   * (this thread is about to sleep in poll), 0 while only spinning. */
  int arm;
  int mac_data; /* gradient payloads are MACed too */
  /* More ranks on this host (peers with rings, and this one) than CPUs
   * this process may run on: spins yield the CPU (relax). */
  int crowded;
  unsigned spins;
};

static size_t tag_len(const struct peer *p) {
  return p->mac ? RESIHP__MAC_LEN : 0;
}

static const uint8_t zeros[SCRATCH];

static struct tcp *T(resihp__transport_t *t) { return (struct tcp *)t; }

static resihp__frame_hdr_t frame_hdr(const struct tcp *t, const struct peer *p,
                                     resihp__tag_t tag, size_t len) {
  resihp__frame_hdr_t h = {.magic = RESIHP__FRAME_MAGIC,
                           .type = RESIHP__FRAME_DATA,
                           .epoch = t->epoch,
                           .src = (uint32_t)t->self,
                           .seq = tag.seq,
                           .step = tag.step,
                           .chunk = tag.chunk,
                           .len = (uint32_t)len};
  if (p->mac && (t->mac_data || tag.step >= RESIHP__STEP_CONTROL))
    h.flags = RESIHP__FRAME_F_MACPAY;
  return h;
}

static int tcp_post_send(resihp__transport_t *tt, int peer, resihp__tag_t tag,
                         const void *buf, size_t len) {
  struct tcp *t = T(tt);
  if (peer < 0 || peer >= t->n || t->p[peer].fd < 0 || len > t->max_payload)
    return RESIHP_EINVAL;
  struct peer *p = &t->p[peer];
  if (p->broken)
    return RESIHP_EPEER;
  if (p->qcount == SENDQ)
    return RESIHP_EBUSY;
  struct sendreq *r = &p->q[(p->qhead + p->qcount) % SENDQ];
  memset(r, 0, sizeof(*r));
  r->hdr = frame_hdr(t, p, tag, len);
  r->buf = buf;
  r->len = len;
  p->qcount++;
  return 0;
}

static int tcp_post_send_alt(resihp__transport_t *tt, int peer,
                             resihp__tag_t tag, const void *buf, size_t len) {
  int rc = tcp_post_send(tt, peer, tag, buf, len);
  if (rc)
    return rc;
  struct peer *p = &T(tt)->p[peer];
  p->q[(p->qhead + p->qcount - 1) % SENDQ].hdr.flags |= RESIHP__FRAME_F_ALT;
  return 0;
}

static int tcp_post_send_msg(resihp__transport_t *tt, int peer,
                             resihp__tag_t tag, const void *buf, size_t len) {
  struct tcp *t = T(tt);
  size_t first = len < t->max_payload ? len : t->max_payload;
  tag.chunk = len > first ? 0 : RESIHP__CHUNK_LAST;
  int rc = tcp_post_send(tt, peer, tag, buf, first);
  if (rc)
    return rc;
  struct peer *p = &t->p[peer];
  p->q[(p->qhead + p->qcount - 1) % SENDQ].rest = len - first;
  return 0;
}

/* The next frame of a message whose current frame has left. */
static void next_frame(struct tcp *t, struct sendreq *q) {
  q->buf += q->len;
  q->len = q->rest < t->max_payload ? q->rest : t->max_payload;
  q->rest -= q->len;
  q->hdr.chunk = (q->hdr.chunk & ~RESIHP__CHUNK_LAST) + 1;
  if (!q->rest)
    q->hdr.chunk |= RESIHP__CHUNK_LAST;
  q->hdr.len = (uint32_t)q->len;
  q->off = 0;
  q->sealed = 0;
}

static int tcp_detach_sends(resihp__transport_t *tt, int peer) {
  struct peer *p = &T(tt)->p[peer];
  for (int k = 0; k < p->qcount; k++) {
    struct sendreq *q = &p->q[(p->qhead + k) % SENDQ];
    if (!q->buf || q->own)
      continue; /* padding, or private already */
    size_t poff = q->off > HDR ? q->off - HDR : 0, total = q->len + q->rest;
    uint8_t *own = malloc(total ? total : 1);
    if (!own)
      return RESIHP_ENOMEM;
    if (total > poff)
      memcpy(own + poff, q->buf + poff, total - poff);
    q->own = own;
    q->buf = own;
  }
  return 0;
}

static int tcp_has_input(resihp__transport_t *tt, int peer) {
  struct peer *p = &T(tt)->p[peer];
  if (p->fd < 0 || p->broken)
    return 0;
  if (p->rh_got || p->in_payload)
    return 1;
  if (p->rin)
    return resihp__ring_pending(p->rin);
  char b;
  return recv(p->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
}

static int tcp_post_recv(resihp__transport_t *tt, int peer, resihp__tag_t tag,
                         void *buf, size_t len) {
  struct tcp *t = T(tt);
  if (peer < 0 || peer >= t->n || t->p[peer].fd < 0)
    return RESIHP_EINVAL;
  struct peer *p = &t->p[peer];
  if (p->broken)
    return RESIHP_EPEER;
  if (p->posted)
    return RESIHP_EBUSY;
  p->posted = 1;
  p->done = 0;
  p->ptag = tag;
  p->pbuf = buf;
  p->plen = len;
  p->palt = 0;
  p->psink = NULL;
  p->pcombine = NULL;
  p->parked = 0;
  return 0;
}

static int tcp_post_recv_sink(resihp__transport_t *tt, int peer,
                              resihp__tag_t tag, void *buf, size_t len,
                              size_t elem, size_t alt_len, size_t alt_elem,
                              resihp__sink_fn sink, void *arg) {
  if (!elem || len % elem || !sink ||
      (alt_len && (alt_len >= len || !alt_elem || alt_len % alt_elem)))
    return RESIHP_EINVAL;
  int rc = tcp_post_recv(tt, peer, tag, buf, len);
  if (rc)
    return rc;
  struct peer *p = &T(tt)->p[peer];
  p->palt = alt_len;
  p->psink = sink;
  p->parg = arg;
  p->pelem = elem;
  p->palt_elem = alt_elem;
  return 0;
}

static int tcp_post_recv_reduce(resihp__transport_t *tt, int peer,
                                resihp__tag_t tag, void *buf,
                                const void *addend, size_t len, size_t elem,
                                resihp__combine_fn combine, int dtype) {
  if (!elem || len % elem || !addend || !combine)
    return RESIHP_EINVAL;
  int rc = tcp_post_recv(tt, peer, tag, buf, len);
  if (rc)
    return rc;
  struct peer *p = &T(tt)->p[peer];
  p->pelem = elem;
  p->padd = addend;
  p->pcombine = combine;
  p->pdtype = dtype;
  return 0;
}

static int tcp_post_recv_alt(resihp__transport_t *tt, int peer,
                             resihp__tag_t tag, void *buf, size_t len,
                             size_t alt_len) {
  if (!alt_len || alt_len >= len)
    return RESIHP_EINVAL;
  int rc = tcp_post_recv(tt, peer, tag, buf, len);
  if (!rc)
    T(tt)->p[peer].palt = alt_len;
  return rc;
}

static int tcp_recv_done(resihp__transport_t *tt, int peer) {
  struct peer *p = &T(tt)->p[peer];
  int done = p->done; /* 2: the alternative form arrived */
  p->done = 0;
  return done;
}

static int tcp_sends_pending(resihp__transport_t *tt, int peer) {
  return T(tt)->p[peer].qcount;
}

/* ---- byte-stream I/O: the socket, or the rings with doorbells ---------- */

static int ring_bell(struct peer *p) {
  if (send(p->fd, "b", 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN &&
      errno != EWOULDBLOCK && errno != EINTR)
    return -1; /* EAGAIN: bells already pending, the peer will wake */
  return 0;
}

/* Read and drop doorbells; note EOF. -1 on a socket error. */
static int drain_bells(struct peer *p) {
  char b[64];
  for (;;) {
    ssize_t r = recv(p->fd, b, sizeof(b), MSG_DONTWAIT);
    if (r > 0)
      continue;
    if (r == 0) {
      p->eof = 1;
      return 0;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  }
}

/* Ring reads make no system call: doorbells are drained (and EOF noted)
 * by tcp_progress just before it arms the rings and sleeps, and after poll
 * wakes it, not on every access (that was a recv() per header, per payload
 * and per spin round, a fifth of the time with 8 ranks on 2 cores). Draining before arming
 * keeps wake-ups from being lost: a bell sent for a flag armed earlier is
 * read away, but the armed access re-checks the ring after setting its
 * flag; a flag armed after the drain gets a bell poll will see. EOF only
 * matters once the ring is empty: the peer's last bytes precede it. */
static ssize_t ring_got(struct peer *p, ssize_t n, int bell) {
  if (n < 0) {
    errno = EPROTO; /* the peer corrupted the ring's indices */
    return -1;
  }
  if (bell && ring_bell(p) < 0)
    return -1;
  if (n)
    return (ssize_t)n;
  if (p->eof)
    return 0; /* everything the peer wrote has been read */
  errno = EAGAIN;
  return -1;
}

static ssize_t peer_recv(struct tcp *t, struct peer *p, void *buf, size_t len) {
  if (!p->rin)
    return recv(p->fd, buf, len, MSG_DONTWAIT);
  int bell = 0;
  ssize_t n = resihp__ring_read(p->rin, buf, len, t->arm, &bell);
  return ring_got(p, n, bell);
}

/* The payload of a sink receive. Bytes [pay_summed, got) of pay_dst hold
 * raw payload: an element cut by the ring's wrap-around or by a short
 * socket read, handed over once it is whole. */
struct summing {
  struct peer *p;
  size_t got;
};

/* Payload bytes as they arrived, before anything is done with them. */
static void mac_in(struct peer *p, const void *b, size_t n) {
  if (p->rmac_pay)
    resihp__macstream_update(&p->rmac, b, n);
}

/* Whole elements from byte at of the payload to the sink. */
static void deliver(struct peer *p, size_t at, const uint8_t *b, size_t n) {
  if (p->pcombine) /* post_recv_reduce: no call through a sink (measured) */
    p->pcombine(p->pbuf + at, b, p->padd + at, n / p->pay_elem, p->pdtype);
  else
    p->psink(p->parg, p->rh.flags & RESIHP__FRAME_F_ALT ? 2 : 1,
             at / p->pay_elem, b, n / p->pay_elem);
  p->pay_summed = at + n;
}

static void sum_span(void *arg, const uint8_t *b, size_t n) {
  struct summing *s = arg;
  struct peer *p = s->p;
  mac_in(p, b, n);
  size_t e = p->pay_elem, sum = p->pay_summed;
  uint8_t *dst = p->pay_dst;
  if (s->got > sum) {
    size_t k = sum + e - s->got < n ? sum + e - s->got : n;
    memcpy(dst + s->got, b, k);
    s->got += k;
    b += k;
    n -= k;
    if (s->got < sum + e)
      return;
    deliver(p, sum, dst + sum, e);
    sum += e;
  }
  size_t whole = n / e * e; /* here s->got == sum */
  if (whole)
    deliver(p, sum, b, whole);
  memcpy(dst + s->got + whole, b + whole, n - whole);
  s->got += n;
}

/* A socket read of the rest of a payload takes the frame's tag along: one
 * system call per frame instead of two. *tagged: how many of the bytes
 * read went to the tag. */
static ssize_t sock_recv_tail(struct peer *p, void *buf, size_t len,
                              size_t *tagged) {
  struct iovec iov[2] = {{buf, len},
                         {p->rtag + p->rtag_got, tag_len(p) - p->rtag_got}};
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
  ssize_t r = recvmsg(p->fd, &m, MSG_DONTWAIT);
  if (r > (ssize_t)len) {
    *tagged = (size_t)r - len;
    p->rtag_got += *tagged;
  }
  return r;
}

static ssize_t peer_recv_summing(struct tcp *t, struct peer *p,
                                 size_t *tagged) {
  size_t got = p->rh.len - p->pay_left, e = p->pay_elem;
  if (p->rin) {
    struct summing s = {p, got};
    int bell = 0;
    ssize_t n = resihp__ring_consume(p->rin, p->pay_left, t->arm, &bell,
                                    sum_span, &s);
    return ring_got(p, n, bell);
  }
  ssize_t r = sock_recv_tail(p, p->pay_dst + got, p->pay_left, tagged);
  if (r > 0) {
    r -= (ssize_t)*tagged;
    mac_in(p, p->pay_dst + got, (size_t)r);
    size_t sum = p->pay_summed, upto = (got + (size_t)r) / e * e;
    if (upto > sum)
      deliver(p, sum, p->pay_dst + sum, upto - sum);
    r += (ssize_t)*tagged;
  }
  return r;
}

/* A sender does look at the socket once per frame it starts: a closed or
 * cut link must stop the data at once, as over TCP, not let a collective
 * go on through the shared memory of a peer that is gone (one recv() per
 * frame; the spin and the per-chunk reads stay free of system calls). */
/* A ring peer's socket before a frame starts: 0, or -1 (errno) when it
 * failed or the peer closed it. */
static int ring_link_open(struct peer *p, int frame_start) {
  if (frame_start && drain_bells(p) < 0)
    return -1;
  if (p->eof) {
    errno = EPIPE;
    return -1;
  }
  return 0;
}

static ssize_t peer_sendv(struct tcp *t, struct peer *p, struct iovec *iov,
                          int niov, int frame_start) {
  if (!p->rout) {
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
    return sendmsg(p->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  if (ring_link_open(p, frame_start))
    return -1;
  int bell = 0;
  ssize_t n = resihp__ring_write(p->rout, iov, niov, t->arm, &bell);
  if (n < 0) {
    errno = EPROTO;
    return -1;
  }
  if (bell && ring_bell(p) < 0)
    return -1;
  if (n)
    return (ssize_t)n;
  errno = EAGAIN;
  return -1;
}

/* Start taking the payload of the header in p->rh: into dst (NULL: skip
 * it), or for the posted receive (its buffer, its sink if it has one). */
static void begin_payload(struct peer *p, uint8_t *dst, int for_posted) {
  p->in_payload = 1;
  p->pay_left = p->rh.len;
  p->pay_dst = for_posted ? p->pbuf : dst;
  p->pay_sink = for_posted && (p->psink || p->pcombine);
  p->pay_elem = p->rh.flags & RESIHP__FRAME_F_ALT ? p->palt_elem : p->pelem;
  p->pay_summed = 0;
  p->for_posted = for_posted;
  p->rtag_got = 0;
  p->rmac_pay = 0;
  if (p->mac) {
    resihp__macstream_begin_key(&p->rmac, &p->krx, &p->auth.rx);
    resihp__macstream_update(&p->rmac, &p->rh, HDR);
    p->rmac_pay = (p->rh.flags & RESIHP__FRAME_F_MACPAY) != 0;
  }
}

/* Decide what to do with a complete header: accept its payload into the
 * posted buffer, skip it, or park it. Returns 0 or RESIHP_EPROTO. */
static int check_header(struct tcp *t, int peer) {
  struct peer *p = &t->p[peer];
  const resihp__frame_hdr_t *h = &p->rh;
  uint32_t flags_ok =
      (p->mac ? RESIHP__FRAME_F_MACPAY : 0) | RESIHP__FRAME_F_ALT;
  if (h->magic != RESIHP__FRAME_MAGIC || h->type != RESIHP__FRAME_DATA ||
      h->src != (uint32_t)peer || h->len > t->max_payload ||
      (h->flags & ~flags_ok)) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "malformed frame from rank %d (magic %#x type %u flags %#x src "
               "%u len %u): dropping the peer; check that every rank runs "
               "the same resihp version",
               peer, h->magic, h->type, h->flags, h->src, h->len);
    return RESIHP_EPROTO;
  }
  if (p->mac && !(h->flags & RESIHP__FRAME_F_MACPAY) &&
      (t->mac_data || h->step >= RESIHP__STEP_CONTROL)) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "rank %d sent a frame whose MAC does not cover its data: "
               "dropping the peer; give every rank the same mac-data setting",
               peer);
    return RESIHP_EPROTO;
  }
  p->parked = 0;
  if (h->epoch < t->epoch) {
    t->dropped_stale++;
    resihp_log(RESIHP_LOG_DEBUG, "allreduce",
               "dropping stale frame from rank %d (epoch %u < %u)", peer,
               h->epoch, t->epoch);
    begin_payload(p, NULL, 0);
    return 0;
  }
  if (h->epoch > t->epoch || !p->posted || p->done) {
    p->parked = 1;
    return 0;
  }
  int got_p2p = h->step == RESIHP__STEP_P2P;
  if (got_p2p != (p->ptag.step == RESIHP__STEP_P2P)) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "rank %d sent %s while this rank waits for %s: the calls of the "
               "two ranks do not match (receive every message before either "
               "rank starts the next collective); dropping the peer",
               peer, got_p2p ? "a point-to-point message" : "collective data",
               got_p2p ? "collective data" : "a point-to-point message");
    return RESIHP_EPROTO;
  }
  if (h->seq < p->ptag.seq) {
    resihp_log(RESIHP_LOG_WARN, "allreduce",
               "dropping duplicate frame from rank %d (collective %u < %u)",
               peer, h->seq, p->ptag.seq);
    begin_payload(p, NULL, 0);
    return 0;
  }
  if (h->seq > p->ptag.seq) {
    p->parked = 1;
    return 0;
  }
  /* The alternative form only where the receive offers one, and then of
   * exactly its length: the flag and the length must agree. */
  int alt = (h->flags & RESIHP__FRAME_F_ALT) != 0;
  if (h->step != p->ptag.step || h->chunk != p->ptag.chunk ||
      (alt ? !p->palt || h->len != p->palt : h->len != p->plen)) {
    if (h->step == p->ptag.step && (got_p2p || h->step == RESIHP__STEP_BCAST)) {
      uint32_t idx = p->ptag.chunk & ~RESIHP__CHUNK_LAST;
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "rank %d sent a message of another size than this rank "
                 "receives (frame %u of it holds %u bytes%s, expected %zu%s): "
                 "both ranks must name the same size; dropping the peer",
                 peer, idx, h->len,
                 h->chunk & RESIHP__CHUNK_LAST ? ", the last" : "", p->plen,
                 p->ptag.chunk & RESIHP__CHUNK_LAST ? ", the last" : "");
      return RESIHP_EPROTO;
    }
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "out-of-order frame from rank %d: got step %u chunk %u len "
               "%u%s, expected step %u chunk %u len %zu (or %zu, narrow)",
               peer, h->step, h->chunk, h->len, alt ? " (narrow)" : "",
               p->ptag.step, p->ptag.chunk, p->plen, p->palt);
    return RESIHP_EPROTO;
  }
  begin_payload(p, NULL, 1);
  return 0;
}

/* The failure contract (transport.h): RESIHP_EPROTO is for a live peer
 * saying something that cannot be right. A peer whose link has closed or
 * been reset by the time its bytes turn out wrong is gone: the caller must
 * see a departure (RESIHP_EPEER) - a caller may treat EPROTO as fatal and
 * leave, which breaks the survivors' next collective - and the peer is
 * suspected either way. A dead peer cannot write bad bytes (the kernel and
 * the rings' release/acquire indices deliver what it wrote, then EOF), so
 * this only settles races with the close; one poll() on the error path. */
static int protocol_error(const struct peer *p, int peer) {
  if (resihp__link_closed(p->fd)) {
    resihp_log(RESIHP_LOG_WARN, "allreduce",
               "rank %d's link closed after bytes that cannot be right: "
               "counted as a dead peer",
               peer);
    return RESIHP_EPEER;
  }
  return RESIHP_EPROTO;
}

static int consider_header(struct tcp *t, int peer) {
  int rc = check_header(t, peer);
  return rc == RESIHP_EPROTO ? protocol_error(&t->p[peer], peer) : rc;
}

/* A socket or ring error (errno) on peer's link: RESIHP_EPEER (reset,
 * closed, any socket error), or RESIHP_EPROTO when a live peer corrupted a
 * shared-memory ring. */
static int link_failed(const struct peer *p, int peer) {
  if (errno == EPROTO)
    return protocol_error(p, peer); /* logged by the ring */
  resihp_log(RESIHP_LOG_WARN, "allreduce", "link to rank %d failed: %s", peer,
             strerror(errno));
  return RESIHP_EPEER;
}

static void frame_finished(struct peer *p) {
  if (p->for_posted) {
    p->posted = 0;
    p->done = p->rh.flags & RESIHP__FRAME_F_ALT ? 2 : 1;
  }
  p->for_posted = 0;
  p->in_payload = 0;
  p->rh_got = 0;
  p->pay_dst = NULL;
  p->pay_sink = 0;
}

/* Read as much as is available from peer. Returns 1 if anything happened,
 * 0 if nothing, negative on failure. */
static int read_peer(struct tcp *t, int peer) {
  struct peer *p = &t->p[peer];
  int any = 0;
  for (;;) {
    if (p->parked)
      return any;
    ssize_t r;
    /* Do not read ahead of what is wanted: the next header would only be
     * parked, and a peer that finished and closed must not look failed. */
    if (!p->in_payload && !p->rh_got && (!p->posted || p->done))
      return any;
    uint8_t *into = NULL; /* plain payload bytes land here */
    size_t tagged = 0;    /* bytes of the tag read along with the payload */
    if (!p->in_payload) {
      r = peer_recv(t, p, (uint8_t *)&p->rh + p->rh_got, HDR - p->rh_got);
    } else if (p->pay_left == 0 && p->rtag_got < tag_len(p)) {
      r = peer_recv(t, p, p->rtag + p->rtag_got, tag_len(p) - p->rtag_got);
    } else if (p->pay_left == 0) {
      if (p->mac && resihp__macstream_open(&p->rmac, &p->auth.rx, p->rtag)) {
        resihp_log(RESIHP_LOG_ERROR, "allreduce",
                   "frame from rank %d fails its MAC (forged, replayed or "
                   "changed on the way): dropping the peer",
                   peer);
        return protocol_error(p, peer);
      }
      frame_finished(p);
      any = 1;
      continue;
    } else if (p->pay_sink) {
      r = peer_recv_summing(t, p, &tagged);
    } else {
      uint8_t *dst = p->pay_dst ? p->pay_dst + (p->rh.len - p->pay_left)
                                : t->scratch;
      size_t want = p->pay_left;
      if (!p->pay_dst && want > SCRATCH)
        want = SCRATCH;
      r = !p->rin && p->mac && want == p->pay_left
              ? sock_recv_tail(p, dst, want, &tagged)
              : peer_recv(t, p, dst, want);
      into = dst;
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return any;
      return link_failed(p, peer);
    }
    if (r == 0) {
      /* In the middle of a frame too: a peer killed while sending is a
       * dead peer, not a malformed frame (EPROTO is for what a live peer
       * says). */
      resihp_log(RESIHP_LOG_WARN, "allreduce", "rank %d closed its link%s",
                 peer,
                 p->in_payload || p->rh_got ? " in the middle of a frame" : "");
      return RESIHP_EPEER;
    }
    any = 1;
    if (!p->in_payload) {
      p->rh_got += (size_t)r;
      if (p->rh_got == HDR) {
        int rc = consider_header(t, peer);
        if (rc)
          return rc;
      }
    } else if (p->pay_left == 0) {
      p->rtag_got += (size_t)r;
    } else {
      size_t got = (size_t)r - tagged;
      if (into)
        mac_in(p, into, got);
      p->pay_left -= got;
    }
  }
}

/* Tag a frame as it starts to leave: this is where it takes its sequence
 * number (see the top of this file). */
static void seal(struct peer *p, struct sendreq *q) {
  resihp__macstream_t m;
  resihp__macstream_begin_key(&m, &p->ktx, &p->auth.tx);
  resihp__macstream_update(&m, &q->hdr, HDR);
  if (q->hdr.flags & RESIHP__FRAME_F_MACPAY)
    resihp__macstream_update(&m, q->buf, q->len);
  resihp__macstream_seal(&m, &p->auth.tx, q->tag);
  q->sealed = 1;
}

/* The link to peer failed (errno) outside progress(): reported once. */
static int broke(struct peer *p, int peer) {
  p->broken = 1;
  return link_failed(p, peer);
}

static int tcp_send_fill(resihp__transport_t *tt, int peer, resihp__tag_t tag,
                         size_t len, size_t alt_len, resihp__fill_fn fill,
                         void *arg) {
  struct tcp *t = T(tt);
  if (peer < 0 || peer >= t->n || t->p[peer].fd < 0 || len > t->max_payload ||
      alt_len > t->max_payload)
    return RESIHP_EINVAL;
  struct peer *p = &t->p[peer];
  if (p->broken)
    return RESIHP_EPEER;
  if (!p->rout || p->mac || p->qcount)
    return 1;
  /* A frame starts: a closed link stops the data, as in peer_sendv. */
  if (ring_link_open(p, 1))
    return broke(p, peer);
  int bad = 0;
  size_t room = len > alt_len ? len : alt_len;
  uint8_t *at = resihp__ring_reserve(p->rout, HDR + room, &bad);
  if (bad) {
    errno = EPROTO;
    return broke(p, peer);
  }
  int form = at ? fill(arg, at + HDR, room) : 0;
  if (form != 1 && form != 2)
    return 1;
  resihp__frame_hdr_t h = frame_hdr(t, p, tag, form == 2 ? alt_len : len);
  if (form == 2)
    h.flags |= RESIHP__FRAME_F_ALT;
  memcpy(at, &h, HDR);
  int bell = 0;
  resihp__ring_publish(p->rout, HDR + h.len, &bell);
  if (bell && ring_bell(p) < 0)
    return broke(p, peer);
  return 0;
}

static int tcp_vote(resihp__transport_t *tt, int peer, uint64_t key) {
  struct tcp *t = T(tt);
  if (peer < 0 || peer >= t->n || t->p[peer].fd < 0)
    return RESIHP_EINVAL;
  struct peer *p = &t->p[peer];
  if (!p->rin || !p->rout)
    return RESIHP_ENOTSUP;
  if (p->broken)
    return RESIHP_EPEER;
  int bell = 0;
  resihp__ring_vote(p->rout, key, &bell);
  return bell && ring_bell(p) < 0 ? broke(p, peer) : 0;
}

static int tcp_voted(resihp__transport_t *tt, int peer, uint64_t key) {
  struct peer *p = &T(tt)->p[peer];
  p->awaiting = 0;
  if (!key || !p->rin)
    return 0;
  if (resihp__ring_voted(p->rin, key, 0))
    return 1;
  p->awaiting = 1;
  p->await_key = key;
  return 0;
}

static int write_peer(struct tcp *t, int peer) {
  struct peer *p = &t->p[peer];
  int any = 0;
  while (p->qcount) {
    struct sendreq *q = &p->q[p->qhead];
    struct iovec iov[3];
    int niov = 0;
    size_t end = HDR + q->len; /* where the tag starts */
    if (p->mac && !q->sealed)
      seal(p, q);
    if (q->off < HDR) {
      iov[niov].iov_base = (uint8_t *)&q->hdr + q->off;
      iov[niov].iov_len = HDR - q->off;
      niov++;
    }
    size_t poff = q->off > HDR ? q->off - HDR : 0;
    if (poff < q->len) {
      size_t l = q->len - poff;
      if (q->buf) {
        iov[niov].iov_base = (void *)(q->buf + poff);
      } else {
        iov[niov].iov_base = (void *)zeros;
        if (l > SCRATCH)
          l = SCRATCH;
      }
      iov[niov].iov_len = l;
      niov++;
      poff += l;
    }
    if (p->mac && poff >= q->len && q->off < end + RESIHP__MAC_LEN) {
      size_t toff = q->off > end ? q->off - end : 0;
      iov[niov].iov_base = q->tag + toff;
      iov[niov].iov_len = RESIHP__MAC_LEN - toff;
      niov++;
    }
    if (niov) {
      ssize_t w = peer_sendv(t, p, iov, niov, q->off == 0);
      if (w < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
          return any;
        return link_failed(p, peer);
      }
      q->off += (size_t)w;
      any = 1;
    }
    if (q->off == end + tag_len(p) && q->rest) {
      next_frame(t, q);
      continue;
    }
    if (q->off == end + tag_len(p)) {
      free(q->own);
      q->own = NULL;
      p->qhead = (p->qhead + 1) % SENDQ;
      p->qcount--;
    }
  }
  return any;
}

static int p_has_queue(struct tcp *t, int i) { return t->p[i].qcount > 0; }

/* Optimistic pass: at high throughput the links are usually ready, so try
 * the I/O first and only poll when nothing moved. 1 if anything moved. */
static int optimistic(struct tcp *t, int *bad_peer) {
  int any = 0;
  for (int i = 0; i < t->n; i++) {
    struct peer *p = &t->p[i];
    if (p->fd < 0 || p->broken)
      continue;
    int rc = 0;
    if (p->awaiting && resihp__ring_voted(p->rin, p->await_key, t->arm)) {
      any = 1;
    } else if (p->awaiting && p->eof) {
      /* Gone without its vote: the same news as EOF amid a frame. */
      resihp_log(RESIHP_LOG_WARN, "allreduce",
                 "rank %d closed its link before its commit vote", i);
      rc = RESIHP_EPEER;
    }
    if (rc >= 0 && p->qcount)
      rc = write_peer(t, i);
    if (rc >= 0 && !p->parked &&
        ((p->posted && !p->done) || p->in_payload || p->rh_got)) {
      int r2 = read_peer(t, i);
      rc = r2 < 0 ? r2 : (rc | r2);
    }
    if (rc < 0) {
      p->broken = 1;
      *bad_peer = i;
      return rc;
    }
    any |= rc;
  }
  return any;
}

static int optimistic(struct tcp *t, int *bad_peer);

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int wants_input(const struct peer *p) {
  return p->awaiting || (!p->parked && ((p->posted && !p->done) ||
                                        p->in_payload || p->rh_got));
}

/* Doorbells of a ring peer (see peer_recv); 0, or RESIHP_EPEER when its
 * socket failed. */
static int drain_or_fail(struct tcp *t, int i, int *bad_peer) {
  struct peer *p = &t->p[i];
  if (!p->rin || drain_bells(p) == 0)
    return 0;
  resihp_log(RESIHP_LOG_WARN, "allreduce", "link to rank %d failed: %s", i,
             strerror(errno));
  p->broken = 1;
  *bad_peer = i;
  return RESIHP_EPEER;
}

/* Whether this wait involves a shared-memory ring, where a look at the
 * link makes no system call. */
static int waits_on_ring(const struct tcp *t) {
  for (int i = 0; i < t->n; i++) {
    const struct peer *p = &t->p[i];
    if (p->fd >= 0 && !p->broken && (p->rin || p->rout) &&
        (p->qcount || wants_input(p)))
      return 1;
  }
  return 0;
}

/* Between two looks at the links. On rings, with no more ranks on this
 * host than CPUs, the peer runs on another CPU: a pause instruction and no
 * system call (sched_yield is one, which in a VM costs about as much as a
 * look), with a yield now and then for whatever else wants this CPU. With
 * more ranks than CPUs the peer may need this very CPU to produce the
 * bytes, and over sockets every look is a system call anyway: yield every
 * time. */
static void relax(struct tcp *t, int rings) {
  if (!rings || t->crowded || ++t->spins % 32 == 0) {
    sched_yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  for (int k = 0; k < 16; k++)
    __builtin_ia32_pause();
#endif
}

static int tcp_progress(resihp__transport_t *tt, int timeout_ms,
                        int *bad_peer) {
  struct tcp *t = T(tt);
  int nfd = 0, any = 0;
  t->arm = 0;
  /* The answer is often microseconds away (the next chunk, a doorbell):
   * look again for a short while, yielding the CPU, before paying for a
   * sleep in poll() and the wake-up that follows. Measured on loopback:
   * 4 KiB latency drops from ~100 us to ~12 us, 1 MiB rises by a third.
   * A caller that asks not to wait (timeout 0: a look, as the fuzz target
   * makes after each of its operations) gets one look, no spin. */
  int rings = waits_on_ring(t);
  int64_t until = mono_us() + (timeout_ms > 0 ? SPIN_US : 0);
  do {
    int r = optimistic(t, bad_peer);
    if (r)
      return r;
    relax(t, rings);
  } while (mono_us() < until);
  /* Headers parked earlier may be consumable now. */
  for (int i = 0; i < t->n; i++) {
    struct peer *p = &t->p[i];
    if (p->fd >= 0 && !p->broken && !p->in_payload && p->rh_got == HDR &&
        !p->parked) {
      int rc = consider_header(t, i);
      if (rc) {
        p->broken = 1;
        *bad_peer = i;
        return rc;
      }
      /* An accepted frame (even an empty one) completes in read_peer,
       * below, once its tag is in. */
    }
  }
  /* About to sleep: drain the doorbells of the rings waited on, then look
   * once more with the rings armed (see peer_recv). */
  for (int i = 0; i < t->n; i++) {
    struct peer *p = &t->p[i];
    if (p->fd >= 0 && !p->broken && (p->qcount || wants_input(p)) &&
        (any = drain_or_fail(t, i, bad_peer)) < 0)
      return any;
  }
  t->arm = 1;
  if ((any = optimistic(t, bad_peer)))
    return any;
  for (int i = 0; i < t->n; i++) {
    struct peer *p = &t->p[i];
    if (p->fd < 0 || p->broken)
      continue;
    short ev = 0;
    int want_in = wants_input(p);
    if (want_in)
      ev |= POLLIN;
    if (p->qcount)
      ev |= p->rout ? POLLIN : POLLOUT; /* rings: space comes as a bell */
    if (!ev)
      continue;
    t->pfd[nfd] = (struct pollfd){.fd = p->fd, .events = ev};
    t->pfd_peer[nfd++] = i;
  }
  if (t->wake_fd >= 0) {
    t->pfd[nfd] = (struct pollfd){.fd = t->wake_fd, .events = POLLIN};
    t->pfd_peer[nfd++] = -1;
  }
  int r = poll(t->pfd, (nfds_t)nfd, timeout_ms);
  if (r < 0) {
    if (errno == EINTR)
      return 0;
    return RESIHP_ESYS;
  }
  for (int k = 0; k < nfd && r > 0; k++) {
    int i = t->pfd_peer[k];
    short re = t->pfd[k].revents;
    if (i < 0 || !re)
      continue;
    int rc = 0;
    if (re & (POLLIN | POLLHUP | POLLERR)) {
      if ((rc = drain_or_fail(t, i, bad_peer)) < 0)
        return rc;
      rc = read_peer(t, i);
    }
    if (rc >= 0 && p_has_queue(t, i) && (re & (POLLOUT | POLLERR | POLLIN))) {
      int r2 = write_peer(t, i);
      rc = r2 < 0 ? r2 : (rc | r2);
    }
    if (rc < 0) {
      t->p[i].broken = 1;
      *bad_peer = i;
      return rc;
    }
    any |= rc;
  }
  return any;
}

/* The caller's buffer is only valid until cancel returns. A frame cut
 * short is finished with zeros, unless its MAC covers the payload: then
 * the receiver must get exactly the bytes that were sealed, so the rest is
 * copied (without memory, zeros: the peer then drops the link). */
static void keep_rest(struct sendreq *h) {
  size_t poff = h->off > HDR ? h->off - HDR : 0;
  if (!h->buf || h->own || poff >= h->len)
    return;
  if (h->hdr.flags & RESIHP__FRAME_F_MACPAY) {
    h->own = malloc(h->len);
    if (h->own) {
      memcpy(h->own + poff, h->buf + poff, h->len - poff);
      h->buf = h->own;
      return;
    }
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "out of memory finishing an aborted frame: its MAC will fail "
               "and the peer will drop this rank");
  }
  h->buf = NULL;
}

static void tcp_cancel(resihp__transport_t *tt) {
  struct tcp *t = T(tt);
  for (int i = 0; i < t->n; i++) {
    struct peer *p = &t->p[i];
    if (p->qcount) {
      struct sendreq *h = &p->q[p->qhead];
      if (h->off > 0 && h->off < HDR + h->len + tag_len(p)) {
        keep_rest(h); /* finish this frame; it is stale now */
        h->rest = 0;  /* and not the rest of its message */
        p->qcount = 1;
      } else {
        if (h->sealed && h->off == 0)
          p->auth.tx.seq--; /* sealed, but not a byte left: never sent */
        p->qcount = 0;
      }
    }
    if (p->in_payload) {
      p->pay_dst = NULL; /* skip the rest of this frame later */
      p->pay_sink = 0;
      p->for_posted = 0;
    }
    p->posted = 0;
    p->done = 0;
    p->parked = 0;
    p->awaiting = 0;
  }
}

static void tcp_set_epoch(resihp__transport_t *tt, uint32_t epoch) {
  struct tcp *t = T(tt);
  t->epoch = epoch;
  for (int i = 0; i < t->n; i++)
    t->p[i].parked = 0;
}

static void tcp_drop_peer(resihp__transport_t *tt, int peer) {
  struct tcp *t = T(tt);
  if (peer < 0 || peer >= t->n || t->p[peer].fd < 0)
    return;
  shutdown(t->p[peer].fd, SHUT_RDWR);
  close(t->p[peer].fd);
  for (int k = 0; k < SENDQ; k++)
    free(t->p[peer].q[k].own);
  resihp__ring_unmap(t->p[peer].rin);
  resihp__ring_unmap(t->p[peer].rout);
  memset(&t->p[peer], 0, sizeof(t->p[peer]));
  t->p[peer].fd = -1;
}

static void tcp_destroy(resihp__transport_t *tt) {
  struct tcp *t = T(tt);
  if (!t)
    return;
  int *fds = calloc((size_t)t->n, sizeof(int));
  for (int i = 0; i < t->n; i++) {
    resihp__ring_unmap(t->p[i].rin);
    resihp__ring_unmap(t->p[i].rout);
    for (int k = 0; k < SENDQ; k++)
      free(t->p[i].q[k].own);
    if (fds)
      fds[i] = t->p[i].broken ? -1 : t->p[i].fd;
    if (t->p[i].fd >= 0 && (!fds || t->p[i].broken))
      close(t->p[i].fd);
  }
  if (fds)
    resihp__graceful_close(fds, t->n, 1000);
  free(fds);
  if (t->dropped_stale)
    resihp_log(RESIHP_LOG_DEBUG, "allreduce", "dropped %lu stale frames",
               t->dropped_stale);
  free(t->p);
  free(t->pfd);
  free(t->pfd_peer);
  free(t);
}

static const resihp__transport_ops_t tcp_ops = {
    .name = "tcp",
    .post_send = tcp_post_send,
    .post_recv = tcp_post_recv,
    .post_send_alt = tcp_post_send_alt,
    .post_recv_alt = tcp_post_recv_alt,
    .post_send_msg = tcp_post_send_msg,
    .detach_sends = tcp_detach_sends,
    .has_input = tcp_has_input,
    .post_recv_reduce = tcp_post_recv_reduce,
    .post_recv_sink = tcp_post_recv_sink,
    .send_fill = tcp_send_fill,
    .vote = tcp_vote,
    .voted = tcp_voted,
    .recv_done = tcp_recv_done,
    .sends_pending = tcp_sends_pending,
    .progress = tcp_progress,
    .cancel = tcp_cancel,
    .set_epoch = tcp_set_epoch,
    .drop_peer = tcp_drop_peer,
    .destroy = tcp_destroy,
};

int resihp__tcp_transport_create(int self, int nranks, const int *fds,
                                 resihp__ring_t **rin, resihp__ring_t **rout,
                                 size_t max_payload, int wake_fd,
                                 const resihp__msgauth_t *auth, int mac_data,
                                 resihp__transport_t **out) {
  struct tcp *t = calloc(1, sizeof(*t));
  if (!t)
    return RESIHP_ENOMEM;
  t->base.ops = &tcp_ops;
  t->self = self;
  t->n = nranks;
  t->max_payload = max_payload;
  t->wake_fd = wake_fd;
  t->mac_data = auth && mac_data;
  t->p = calloc((size_t)nranks, sizeof(*t->p));
  t->pfd = calloc((size_t)nranks + 1, sizeof(*t->pfd));
  t->pfd_peer = calloc((size_t)nranks + 1, sizeof(int));
  if (!t->p || !t->pfd || !t->pfd_peer) {
    free(t->p);
    free(t->pfd);
    free(t->pfd_peer);
    free(t);
    return RESIHP_ENOMEM;
  }
  for (int i = 0; i < nranks; i++) {
    t->p[i].fd = fds[i];
    t->p[i].rin = rin ? rin[i] : NULL;
    t->p[i].rout = rout ? rout[i] : NULL;
    /* A ring is memory of this process and the peer alone (0600, this
     * user's, unlinked once both mapped it: shm.h): whoever else could
     * write it could read the keys too, so its frames carry no MAC.
     * Both ends see the same rings (resihp__shm_setup decides per pair). */
    int ring = t->p[i].rin && t->p[i].rout;
    if (auth && i != self && !ring) {
      t->p[i].mac = 1;
      t->p[i].auth = auth[i];
      resihp__mackey_init(&t->p[i].ktx, &auth[i].tx);
      resihp__mackey_init(&t->p[i].krx, &auth[i].rx);
    }
  }
  int local = 1;
  for (int i = 0; i < nranks; i++)
    local += t->p[i].rin != NULL || t->p[i].rout != NULL;
  cpu_set_t cpus;
  int ncpu = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus)
                                                            : 1;
  t->crowded = local > ncpu;
  *out = &t->base;
  return 0;
}
