/* SPDX-License-Identifier: BSD-3-Clause */
/* Point to point and broadcast over a communicator (see resihp/allreduce.h).
 *
 * Wire. Messages travel on the data links of the mesh (TCP, or the
 * shared-memory rings of ranks on one host) as RESIHP__STEP_P2P frames of
 * at most chunk_bytes (transport.h): seq numbers the messages of each
 * ordered pair in the epoch, chunk numbers the frames of a message and
 * marks the last. A receive posts one frame at a time with the exact length
 * it expects, so a frame of another length, or a message that ends early
 * or late, is refused by its header before a byte of it is accepted
 * (RESIHP_EPROTO, the sender suspected): nothing is allocated or copied by
 * a length from the wire. The frame kind keeps messages and collective data
 * apart on one link; the epoch in every frame drops what an earlier view
 * left behind, and the message numbers start again in each epoch. MACs,
 * heartbeats and failure detection are those of the all-reduce.
 *
 * Sends. A send hands the whole message to the transport and drives it
 * until every byte left this process (into the socket or the ring). When
 * the link is full because the receiver is itself sending to this rank -
 * both ends of a pipeline exchange send first and receive second - waiting
 * would deadlock as soon as both messages exceed what the link buffers
 * (4 MiB per shared-memory ring, the kernel's socket buffers over TCP). So
 * a send that cannot finish while its peer has data waiting for this rank
 * copies what has not left into private memory (the sender's own length)
 * and returns; the rest leaves during this rank's next calls on the
 * communicator, which all drive the transport, and resihp_comm_destroy()
 * lets it leave before closing. Such a send has returned 0 before the
 * bytes left: a failure of the peer then fails the next call, as any
 * failure between calls does. Cycles of three or more ranks that all send
 * more than a link holds before receiving are not detected this way and
 * need one of them to receive first.
 *
 * Failures. Every wait watches the communicator's failure flag (monitor:
 * dead or silent peers, aborts of other members) and the transport's
 * errors, and gives a live peer that takes no part op_ms; a failed call
 * broadcasts an abort like a failed all-reduce, so members blocked on this
 * rank (the next pipeline stage) fail too instead of waiting op_ms.
 */
#include "config.h"

#include "../transport/mesh.h"
#include "comm_internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdlib.h>
#include <string.h>

/* Poll period of a send whose link is full: how soon it notices that the
 * peer started sending to it (which rings no doorbell here). */
#define SEND_POLL_MS 1

/* Where an empty message points when the caller gave NULL. */
static const uint8_t empty[1];

void (*resihp__p2p_test_hook)(resihp_comm_t *c, int send, size_t frame);

struct resihp__selfmsg {
  struct resihp__selfmsg *next;
  size_t len;
  uint8_t data[];
};

static void self_clear(resihp_comm_t *c) {
  while (c->self_head) {
    struct resihp__selfmsg *m = c->self_head;
    c->self_head = m->next;
    free(m);
  }
  c->self_tail = NULL;
}

void resihp__p2p_free(resihp_comm_t *c) {
  self_clear(c);
  free(c->p2p_tx);
  free(c->p2p_rx);
  c->p2p_tx = c->p2p_rx = NULL;
}

/* Message numbers of the current epoch (allocated on first use). */
static int p2p_state(resihp_comm_t *c) {
  if (!c->p2p_tx) {
    c->p2p_tx = calloc((size_t)c->world_size, sizeof(uint32_t));
    c->p2p_rx = calloc((size_t)c->world_size, sizeof(uint32_t));
    if (!c->p2p_tx || !c->p2p_rx) {
      resihp__p2p_free(c);
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "out of memory for point-to-point state");
      return RESIHP_ENOMEM;
    }
    c->p2p_epoch = c->epoch;
  }
  if (c->p2p_epoch != c->epoch) {
    /* A new view: what the old one left in flight is dropped as stale. */
    memset(c->p2p_tx, 0, (size_t)c->world_size * sizeof(uint32_t));
    memset(c->p2p_rx, 0, (size_t)c->world_size * sizeof(uint32_t));
    self_clear(c);
    c->p2p_epoch = c->epoch;
  }
  return 0;
}

/* A failure anywhere in the view fails every call until
 * resihp_comm_shrink() (an aborted collective may have left frames on any
 * link), but members that left with resihp_comm_destroy() are no failure
 * for messages between the others: a last stage may send its last message
 * and go. */
static int enter(resihp_comm_t *c, const char *what) {
  if (c->unprotected || !atomic_load(&c->failed))
    return 0;
  int departures_only = 1;
  pthread_mutex_lock(&c->mu);
  if (c->excluded_by >= 0)
    departures_only = 0;
  for (int i = 0; i < c->world_size && departures_only; i++)
    if ((resihp__set_has(&c->dead, i) && !resihp__set_has(&c->departed, i)) ||
        resihp__set_has(&c->blamed, i) || c->abort_seq[i])
      departures_only = 0;
  pthread_mutex_unlock(&c->mu);
  return departures_only ? 0 : resihp__comm_enter(c, what);
}

/* During a wait on peer w (world rank): the failure flag only says that
 * something happened somewhere; stop for what concerns this call. */
static int broken(resihp_comm_t *c, int w, const char *what) {
  if (c->unprotected || !atomic_load(&c->failed))
    return 0;
  int rc = resihp__comm_peer_broken(c, w);
  if (rc == RESIHP_EEXCLUDED)
    return resihp__comm_enter(c, what);
  return rc ? resihp__comm_fail(c, RESIHP_EABORTED, -1, what) : 0;
}

static int check_args(resihp_comm_t *c, int peer, const void *buf, size_t bytes,
                      const char *what) {
  /* Frames are numbered in 31 bits; far beyond any real message. */
  if (!c || peer < 0 || peer >= c->nmembers || (!buf && bytes) ||
      bytes / c->chunk_bytes >= RESIHP__CHUNK_LAST - 1) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "%s: invalid argument (comm %p, peer %d of %d, buf %p, %zu "
               "bytes)",
               what, (void *)c, peer, c ? c->nmembers : 0, buf, bytes);
    return RESIHP_EINVAL;
  }
  int rc = enter(c, what);
  return rc ? rc : p2p_state(c);
}

/* A wait that saw nothing move for op_ms: a live peer that takes no part
 * (dead and hung ones are the monitor's). */
static int stalled(resihp_comm_t *c, int r, int64_t *last, int peer,
                   const char *what) {
  int64_t now = resihp__now_ms();
  if (r > 0)
    *last = now;
  if (now - *last <= c->op_ms)
    return 0;
  resihp_log(RESIHP_LOG_ERROR, "allreduce",
             "rank %d: %s: no progress with rank %d for %lld ms (op timeout)",
             c->world_rank, what, peer, (long long)(now - *last));
  return 1;
}

int resihp_send(resihp_comm_t *c, int peer, const void *buf, size_t bytes) {
  int rc = check_args(c, peer, buf, bytes, "send");
  if (rc)
    return rc;
  int w = c->members[peer], bad = -1;
  if (w == c->world_rank) {
    struct resihp__selfmsg *m = malloc(sizeof(*m) + bytes);
    if (!m)
      return RESIHP_ENOMEM;
    m->next = NULL;
    m->len = bytes;
    if (bytes)
      memcpy(m->data, buf, bytes);
    if (c->self_tail)
      c->self_tail->next = m;
    else
      c->self_head = m;
    c->self_tail = m;
    return 0;
  }
  const resihp__transport_ops_t *ops = c->tp->ops;
  resihp__tag_t tag = {c->p2p_tx[w], RESIHP__STEP_P2P, 0};
  int queued = 0;
  int64_t last = resihp__now_ms();
  for (;;) {
    if (!queued) {
      /* EBUSY: earlier messages to w still fill the queue. */
      rc = ops->post_send_msg(c->tp, w, tag, buf ? buf : empty, bytes);
      if (rc && rc != RESIHP_EBUSY)
        return resihp__comm_fail(c, rc, rc == RESIHP_EPEER ? w : -1, "send");
      if (!rc) {
        queued = 1;
        c->p2p_tx[w]++;
      }
    }
    if (queued && !ops->sends_pending(c->tp, w))
      return 0;
    if ((rc = broken(c, w, "send")))
      return rc;
    int r = ops->progress(c->tp, SEND_POLL_MS, &bad);
    if (r < 0)
      return resihp__comm_fail(c, r, bad, "send");
    if (queued && !ops->sends_pending(c->tp, w))
      return 0;
    if (queued && ops->has_input(c->tp, w)) {
      /* The peer is sending to this rank: it will not read before its own
       * send is done (see the top of this file). */
      if ((rc = ops->detach_sends(c->tp, w)))
        return resihp__comm_fail(c, rc, -1, "send");
      return 0;
    }
    if (stalled(c, r, &last, w, "send"))
      return resihp__comm_fail(c, RESIHP_ETIMEDOUT, w, "send");
  }
}

/* Wait for the receive posted for world rank w. */
static int wait_recv(resihp_comm_t *c, int w, const char *what) {
  const resihp__transport_ops_t *ops = c->tp->ops;
  int64_t last = resihp__now_ms();
  int bad = -1;
  while (!ops->recv_done(c->tp, w)) {
    int rc = broken(c, w, what);
    if (rc)
      return rc;
    int r = ops->progress(c->tp, c->hb_ms, &bad);
    if (r < 0)
      return resihp__comm_fail(c, r, bad, what);
    if (stalled(c, r, &last, w, what))
      return resihp__comm_fail(c, RESIHP_ETIMEDOUT, w, what);
  }
  return 0;
}

/* Frame i of a message of bytes in frames of chunk bytes. */
static uint32_t frame_tag(size_t i, size_t nframes) {
  return (uint32_t)i | (i + 1 == nframes ? RESIHP__CHUNK_LAST : 0);
}
static size_t frames(const resihp_comm_t *c, size_t bytes) {
  return bytes ? (bytes + c->chunk_bytes - 1) / c->chunk_bytes : 1;
}
static size_t frame_len(const resihp_comm_t *c, size_t bytes, size_t i) {
  size_t off = i * c->chunk_bytes;
  return bytes - off < c->chunk_bytes ? bytes - off : c->chunk_bytes;
}

int resihp_recv(resihp_comm_t *c, int peer, void *buf, size_t bytes) {
  int rc = check_args(c, peer, buf, bytes, "recv");
  if (rc)
    return rc;
  int w = c->members[peer];
  if (w == c->world_rank) {
    struct resihp__selfmsg *m = c->self_head;
    if (!m || m->len != bytes) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce",
                 "rank %d: receive of %zu bytes from itself, but %s", w, bytes,
                 m ? "the next message it sent itself has another size"
                   : "it sent itself nothing");
      return m ? RESIHP_EPROTO : RESIHP_ESTATE;
    }
    if (bytes)
      memcpy(buf, m->data, bytes);
    c->self_head = m->next;
    if (!c->self_head)
      c->self_tail = NULL;
    free(m);
    return 0;
  }
  const resihp__transport_ops_t *ops = c->tp->ops;
  size_t n = frames(c, bytes);
  uint8_t *b = buf ? buf : (uint8_t *)empty; /* never written: 0 bytes */
  for (size_t i = 0; i < n; i++) {
    resihp__tag_t tag = {c->p2p_rx[w], RESIHP__STEP_P2P, frame_tag(i, n)};
    size_t len = frame_len(c, bytes, i);
    if (resihp__p2p_test_hook)
      resihp__p2p_test_hook(c, 0, i);
    if ((rc = ops->post_recv(c->tp, w, tag, len ? b + i * c->chunk_bytes : b,
                             len)))
      return resihp__comm_fail(c, rc, rc == RESIHP_EPEER ? w : -1, "recv");
    if ((rc = wait_recv(c, w, "recv")))
      return rc;
  }
  c->p2p_rx[w]++;
  return 0;
}

/* Broadcast: a chunk-pipelined chain in view order from the root (root,
 * root+1, ..., root-1). Each member receives chunk i from its predecessor
 * and passes it on while chunk i+1 arrives, so every link carries the
 * message once and a large message takes about its transfer time plus one
 * chunk per hop: the bandwidth optimum, where a binomial tree sends the
 * whole message log2(n) times in sequence. The tree would win on latency
 * for small messages in large views; the views here are a replica's few
 * ranks (pipeline stages, tensor slices), where the chain's extra hops cost
 * microseconds. A broken chain fails every member: the rank next to the
 * failure sees it and aborts, the others get the abort. */
int resihp_bcast(resihp_comm_t *c, int root, void *buf, size_t bytes) {
  int rc = check_args(c, root, buf, bytes, "bcast");
  if (rc)
    return rc;
  int nm = c->nmembers, pos = (c->my_index - root + nm) % nm;
  if (nm == 1) {
    c->seq++;
    return 0;
  }
  const resihp__transport_ops_t *ops = c->tp->ops;
  int prev = pos > 0 ? c->members[(c->my_index - 1 + nm) % nm] : -1;
  int next = pos < nm - 1 ? c->members[(c->my_index + 1) % nm] : -1;
  size_t n = frames(c, bytes), got = prev < 0 ? n : 0, sent = next < 0 ? n : 0;
  uint8_t *b = buf ? buf : (uint8_t *)empty; /* never written: 0 bytes */
  int posted = 0, bad = -1;
  int64_t last = resihp__now_ms();
  for (;;) {
    while (sent < got) {
      if (resihp__p2p_test_hook)
        resihp__p2p_test_hook(c, 1, sent);
      resihp__tag_t tag = {c->seq, RESIHP__STEP_BCAST, frame_tag(sent, n)};
      rc = ops->post_send(c->tp, next, tag, b + sent * c->chunk_bytes,
                          frame_len(c, bytes, sent));
      if (rc == RESIHP_EBUSY)
        break;
      if (rc)
        return resihp__comm_fail(c, rc, rc == RESIHP_EPEER ? next : -1,
                                 "bcast");
      sent++;
    }
    if (!posted && got < n) {
      resihp__tag_t tag = {c->seq, RESIHP__STEP_BCAST, frame_tag(got, n)};
      if ((rc = ops->post_recv(c->tp, prev, tag, b + got * c->chunk_bytes,
                               frame_len(c, bytes, got))))
        return resihp__comm_fail(c, rc, rc == RESIHP_EPEER ? prev : -1,
                                 "bcast");
      posted = 1;
    }
    if (got == n && sent == n && (next < 0 || !ops->sends_pending(c->tp, next)))
      break;
    if ((rc = broken(c, got < n ? prev : next, "bcast")))
      return rc;
    int r = ops->progress(c->tp, c->hb_ms, &bad);
    if (r < 0)
      return resihp__comm_fail(c, r, bad, "bcast");
    if (posted && ops->recv_done(c->tp, prev)) {
      posted = 0;
      got++;
      r = 1;
    }
    int waited = got < n ? prev : next;
    if (stalled(c, r, &last, waited, "bcast"))
      return resihp__comm_fail(c, RESIHP_ETIMEDOUT, waited, "bcast");
  }
  c->seq++;
  return 0;
}

static int broken_quiet(resihp_comm_t *c, int w) {
  return !c->unprotected && atomic_load(&c->failed) &&
         resihp__comm_peer_broken(c, w);
}

void resihp__p2p_flush(resihp_comm_t *c) {
  const resihp__transport_ops_t *ops = c->tp->ops;
  int64_t deadline = resihp__now_ms() + c->op_ms;
  for (int i = 0; i < c->nmembers; i++) {
    int w = c->members[i], bad = -1;
    while (w != c->world_rank && ops->sends_pending(c->tp, w) &&
           resihp__now_ms() < deadline && !broken_quiet(c, w))
      if (ops->progress(c->tp, c->hb_ms, &bad) < 0)
        return;
  }
}
