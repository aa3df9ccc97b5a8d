/* SPDX-License-Identifier: BSD-3-Clause */
/* Single-copy all-reduce between ranks of one host (cross-memory attach).
 *
 * The ring moves every byte through a shared-memory ring: one copy in, one
 * out. When every pair of members of the view may read each other's memory
 * (process_vm_readv, decided at set-up: transport/cma.h), each byte needs
 * one copy instead.
 *
 * Schedule. Segments as in the ring (segment i of n nearly equal ones
 * belongs to member i). Per collective, on the data links, each member
 * sends every other one ADDR (the addresses of its in and work buffers; a
 * small control frame tagged with the epoch and seq of the call) and waits
 * for theirs. Reduce-scatter: member p computes segment p alone, piece by
 * piece (pieces that fit the L2 cache with the staging buffer), reading
 * each member's piece of in in member order (process_vm_readv into
 * staging, its own piece in place) and adding in that order, so that every
 * element is summed once, by its owner, in an order that depends only on
 * the view: the result is the same bits on every rank. It then sends
 * READY. All-gather: once member q said READY, p reads q's reduced segment
 * from q's work straight into its own work. Then the caller's DONE round
 * (allreduce.c): a member sends DONE only after it finished reading
 * everybody, so once a member has every DONE nobody reads its memory any
 * more and it may return and let its caller reuse the buffers.
 *
 * Lengths and offsets are computed here from count and the view, never
 * taken from a peer; a peer only tells where its buffers start. A peer
 * could name any address of its own process, which gives it nothing it
 * could not send anyway.
 *
 * Failure. A member that dies mid-copy makes the read fail (ESRCH) or its
 * link end (EOF), a stopped one falls silent (the monitor): the call
 * returns RESIHP_EPEER / RESIHP_ETIMEDOUT through resihp__comm_fail like
 * the ring, having written only work (the private copy for in place, so
 * the caller's buffer is untouched; in is never written). A live member
 * whose published address does not read (EFAULT) is RESIHP_EPROTO, unless
 * the collective is already being aborted (a member that gave up may have
 * let its caller free the buffer: its ABORT left before it returned).
 *
 * Pid reuse: if a member dies and its pid is reused by another process of
 * the same user before a survivor reads, the read returns that process's
 * bytes. They never reach a successful result: the dead member sends no
 * DONE, and since the commit round counts a member known dead as done (its
 * data may have been complete), each rank also asks its pidfd of every
 * member, after its last read and before its DONE, whether the member
 * exited. If not, the pid was still the member's when it was read; if so,
 * the call fails (RESIHP_EPEER) and the bytes are discarded.
 */
#include "config.h"

#include "comm_internal.h"
#include "../transport/cma.h"
#include "../transport/mesh.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PIECE RESIHP__CMA_PIECE
#define GATHER_PIECE RESIHP__CMA_GATHER_PIECE
#define CHUNK_ADDR 1u
#define CHUNK_READY 2u

void (*resihp__cma_test_hook)(resihp_comm_t *c, int phase, size_t piece);
atomic_long resihp__cma_calls;

int resihp__cma_comm_setup(resihp_comm_t *c, int want,
                           struct resihp__ring **rin,
                           resihp__msgauth_t *data_auth, int64_t deadline_ms) {
  int n = c->world_size;
  uint8_t *local = calloc((size_t)n, 1);
  c->cma_pid = calloc((size_t)n, sizeof(*c->cma_pid));
  c->cma_pidfd = malloc((size_t)n * sizeof(*c->cma_pidfd));
  c->cma_reach = calloc((size_t)n, sizeof(*c->cma_reach));
  c->cma_epoch = -1;
  for (int i = 0; c->cma_pidfd && i < n; i++)
    c->cma_pidfd[i] = -1;
  if (!local || !c->cma_pid || !c->cma_pidfd || !c->cma_reach) {
    free(local);
    return RESIHP_ENOMEM;
  }
  for (int i = 0; i < n; i++)
    local[i] = rin[i] != NULL;
  int rc = resihp__cma_setup(c->world_rank, n, c->data_fds, data_auth, local,
                             want, deadline_ms, c->cma_pid, c->cma_pidfd,
                             (uint8_t *)c->cma_reach, sizeof(*c->cma_reach));
  free(local);
  return rc;
}

int resihp__cma_chosen(resihp_comm_t *c, size_t bytes) {
  if (c->unprotected || c->nmembers < 2 || bytes < RESIHP__CMA_MIN_BYTES ||
      !c->cma_pid)
    return 0;
  if (c->cma_epoch != (int64_t)c->epoch) {
    /* Every pair, by the reach sets every member told: a member that
     * cannot read some member has that member's set empty, so it says no,
     * and so does everyone else. */
    int ok = 1;
    for (int i = 0; i < c->nmembers && ok; i++)
      for (int j = 0; j < c->nmembers && ok; j++)
        if (i != j &&
            !resihp__set_has(&c->cma_reach[c->members[i]], c->members[j]))
          ok = 0;
    c->cma_ok = ok;
    c->cma_epoch = (int64_t)c->epoch;
  }
  return c->cma_ok;
}

struct addrs {
  uint64_t in, work;
};

struct run {
  resihp_comm_t *c;
  const resihp__transport_ops_t *ops;
  int n, p;
  size_t esz, base, rem;
  int64_t last; /* last progress of the transport */
  int *bad_peer;
};

static size_t seg_start(const struct run *r, int i) {
  return (size_t)i * r->base + ((size_t)i < r->rem ? (size_t)i : r->rem);
}
static size_t seg_len(const struct run *r, int i) {
  return r->base + ((size_t)i < r->rem);
}

/* One wait of the transport; a failure noticed by the monitor, a link
 * error, or no progress for op_ms (a live member that does not take part)
 * ends the call. stuck: the member waited for, blamed on a time-out. */
static int pump(struct run *r, int stuck) {
  resihp_comm_t *c = r->c;
  if (atomic_load(&c->failed))
    return RESIHP_EABORTED;
  int rc = r->ops->progress(c->tp, c->hb_ms, r->bad_peer);
  if (rc < 0)
    return rc;
  int64_t now = resihp__now_ms();
  if (rc > 0) {
    r->last = now;
  } else if (now - r->last > c->op_ms) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "rank %d: no progress for %lld ms in the single-copy "
               "all-reduce (waiting for rank %d)",
               c->world_rank, (long long)(now - r->last), stuck);
    *r->bad_peer = stuck;
    return RESIHP_ETIMEDOUT;
  }
  return 0;
}

/* A read of member `peer` (world rank) failed with -errno e. */
static int read_failed(struct run *r, int e, int peer) {
  resihp_comm_t *c = r->c;
  *r->bad_peer = peer;
  if (e == -ESRCH || e == -EPERM) {
    /* Gone (or its pid now names a process of another user). */
    resihp_log(RESIHP_LOG_DEBUG, "allreduce",
               "rank %d: cannot read rank %d any more (%s)", c->world_rank,
               peer, strerror(-e));
    return RESIHP_EPEER;
  }
  /* The process is there but the range is not mapped. Honest when the
   * collective is already aborting (see the top): wait for that news a
   * bounded time, else blame the member. */
  int64_t until = resihp__now_ms() + c->detect_ms;
  while (resihp__now_ms() < until) {
    int rc = pump(r, peer);
    if (rc == RESIHP_EABORTED)
      *r->bad_peer = -1;
    if (rc)
      return rc == RESIHP_ETIMEDOUT ? RESIHP_EPROTO : rc;
  }
  resihp_log(RESIHP_LOG_ERROR, "allreduce",
             "rank %d: rank %d published a buffer address that cannot be "
             "read (%s): dropping it as faulty",
             c->world_rank, peer, strerror(-e));
  return RESIHP_EPROTO;
}

/* Post one control frame each way with every other member. */
static int exchange(struct run *r, uint32_t chunk, const void *out,
                    void *in, size_t len) {
  resihp_comm_t *c = r->c;
  resihp__tag_t tag = {c->seq, RESIHP__STEP_CONTROL, chunk};
  static uint8_t sink[1]; /* zero-length receives */
  for (int i = 0; i < r->n; i++) {
    int m = c->members[i], rc;
    if (i == r->p)
      continue;
    if ((rc = r->ops->post_send(c->tp, m, tag, out, len)) ||
        (rc = r->ops->post_recv(c->tp, m, tag,
                                in ? (uint8_t *)in + (size_t)i * len : sink,
                                len))) {
      *r->bad_peer = m;
      return rc;
    }
  }
  return 0;
}

/* Wait until the receives posted by exchange() completed (got[i]) and, with
 * drain, no send is left. */
static int wait_all(struct run *r, uint8_t *got, int drain) {
  resihp_comm_t *c = r->c;
  for (;;) {
    int stuck = -1;
    for (int i = 0; i < r->n; i++) {
      int m = c->members[i];
      if (i == r->p)
        continue;
      if (!got[i] && r->ops->recv_done(c->tp, m))
        got[i] = 1;
      if (!got[i] || (drain && r->ops->sends_pending(c->tp, m)))
        stuck = stuck < 0 ? m : stuck;
    }
    if (stuck < 0)
      return 0;
    int rc = pump(r, stuck);
    if (rc)
      return rc;
  }
}

/* Reduce-scatter: segment p of work = the sum of segment p of every
 * member's in, in member order. Staging holds three pieces: the first
 * member's (added to the second's in one pass, straight into work), the
 * next member's, and with in == work this member's own piece once work
 * has been written over it. */
static int reduce_own(struct run *r, const struct addrs *peer,
                      const uint8_t *in, uint8_t *work, uint8_t *staging,
                      int dtype) {
  resihp_comm_t *c = r->c;
  size_t esz = r->esz, per = PIECE / esz;
  size_t start = seg_start(r, r->p), len = seg_len(r, r->p);
  uint8_t *first = staging, *next = staging + PIECE,
          *saved = staging + 2 * PIECE;
  for (size_t off = 0, k = 0; off < len; off += per, k++) {
    size_t cnt = len - off < per ? len - off : per;
    size_t at = (start + off) * esz, bytes = cnt * esz;
    uint8_t *dst = work + at;
    const uint8_t *own = in + at, *acc = NULL;
    if (resihp__cma_test_hook)
      resihp__cma_test_hook(c, 0, k);
    if (atomic_load(&c->failed))
      return RESIHP_EABORTED;
    if (own == dst && r->p >= 2) {
      memcpy(saved, own, bytes); /* work is written before its turn */
      own = saved;
    }
    for (int i = 0; i < r->n; i++) {
      const uint8_t *src = own;
      if (i != r->p) {
        uint8_t *to = i == 0 ? first : next;
        int e = resihp__cma_read(c->cma_pid[c->members[i]], to,
                                 peer[i].in + at, bytes);
        if (e)
          return read_failed(r, e, c->members[i]);
        src = to;
      }
      if (i == 0)
        acc = src;
      else if (i == 1)
        resihp__reduce_sum_to(dst, acc, src, cnt, dtype);
      else
        resihp__reduce_sum(dst, src, cnt, dtype);
    }
  }
  return 0;
}

/* All-gather: the segment of member i, reduced by it, into work. */
static int gather_from(struct run *r, const struct addrs *peer, int i,
                       uint8_t *work) {
  resihp_comm_t *c = r->c;
  size_t at = seg_start(r, i) * r->esz, len = seg_len(r, i) * r->esz;
  for (size_t off = 0, k = 0; off < len; off += GATHER_PIECE, k++) {
    size_t bytes = len - off < GATHER_PIECE ? len - off : GATHER_PIECE;
    if (resihp__cma_test_hook)
      resihp__cma_test_hook(c, 1, k);
    if (atomic_load(&c->failed))
      return RESIHP_EABORTED;
    int e = resihp__cma_read(c->cma_pid[c->members[i]], work + at + off,
                             peer[i].work + at + off, bytes);
    if (e)
      return read_failed(r, e, c->members[i]);
  }
  return 0;
}

int resihp__cma_allreduce(resihp_comm_t *c, const void *in, void *work,
                          void *staging, size_t count, int dtype,
                          int *bad_peer) {
  return resihp__cma_phases(c, in, work, staging, count, dtype,
                            RESIHP__RING_BOTH, bad_peer);
}

/* One phase alone (a sharded replica's collectives): the reduce-scatter
 * leaves segment p in work and reads nobody's work; the all-gather starts
 * from every member's segment already in its work (in == work), so the
 * ADDR round is all it waits for. The caller's DONE round still keeps
 * every buffer alive until nobody reads it. */
int resihp__cma_phases(resihp_comm_t *c, const void *in, void *work,
                       void *staging, size_t count, int dtype, int phases,
                       int *bad_peer) {
  int n = c->nmembers;
  struct run r = {.c = c,
                  .ops = c->tp->ops,
                  .n = n,
                  .p = c->my_index,
                  .esz = resihp__dtype_size(dtype),
                  .base = count / (size_t)n,
                  .rem = count % (size_t)n,
                  .last = resihp__now_ms(),
                  .bad_peer = bad_peer};
  *bad_peer = -1;
  atomic_fetch_add(&resihp__cma_calls, 1);
  struct addrs mine = {(uint64_t)(uintptr_t)in, (uint64_t)(uintptr_t)work};
  struct addrs *peer = calloc((size_t)n, sizeof(*peer));
  uint8_t *got = calloc((size_t)n, 1), *done = calloc((size_t)n, 1);
  static const uint8_t nothing[1];
  int rc = peer && got && done ? 0 : RESIHP_ENOMEM;
  /* mine and nothing stay valid until the sends left (drain) or the caller
   * cancelled the transport after a failure. */
  if (!rc)
    rc = exchange(&r, CHUNK_ADDR, &mine, peer, sizeof(mine));
  if (!rc)
    rc = wait_all(&r, got, 1);
  if (!rc && (phases & RESIHP__RING_RS))
    rc = reduce_own(&r, peer, in, work, staging, dtype);
  if (!rc && phases == RESIHP__RING_BOTH) {
    memset(got, 0, (size_t)n);
    rc = exchange(&r, CHUNK_READY, nothing, NULL, 0);
  }
  /* Gather from members as they become ready, starting after this one. */
  for (int left = phases & RESIHP__RING_AG ? n - 1 : 0; !rc && left > 0;) {
    int progressed = 0;
    for (int k = 1; k < n && !rc; k++) {
      int i = (r.p + k) % n, m = c->members[i];
      if (!got[i] && r.ops->recv_done(c->tp, m))
        got[i] = 1;
      if (got[i] && !done[i]) {
        rc = gather_from(&r, peer, i, work);
        done[i] = 1;
        left--;
        progressed = 1;
      }
    }
    if (!rc && left && !progressed) {
      int stuck = -1;
      for (int k = 1; k < n && stuck < 0; k++)
        if (!got[(r.p + k) % n])
          stuck = c->members[(r.p + k) % n];
      rc = pump(&r, stuck);
    }
  }
  for (int i = 0; i < n && !rc; i++)
    if (i != r.p && resihp__cma_exited(c->cma_pidfd[c->members[i]])) {
      *bad_peer = c->members[i];
      rc = RESIHP_EPEER;
    }
  if (!rc)
    rc = wait_all(&r, got, 1);
  free(peer);
  free(got);
  free(done);
  return rc;
}
