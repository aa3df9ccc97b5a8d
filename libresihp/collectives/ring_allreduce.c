/* SPDX-License-Identifier: BSD-3-Clause */
/* Chunk-pipelined ring all-reduce.
 *
 * Schedule. The n members of the view form a ring in view order; member p
 * sends to p+1 and receives from p-1. The buffer is cut into n nearly equal
 * segments (segment i starts at i*floor(count/n) + min(i, count%n)), and
 * each segment into chunks (a quarter segment, within [32 KiB,
 * chunk_bytes]). There are 2(n-1) steps:
 *
 *   reduce-scatter, step s = 0..n-2: send segment p-s, receive segment
 *     p-s-1 and add it to the local contribution. After step n-2, member p
 *     holds segment p+1 fully reduced.
 *   all-gather, step s = n-1+t, t = 0..n-2: send segment p+1-t, receive
 *     segment p-t, which is final, and store it.
 *
 * The segment sent at step s is the one received at step s-1, so chunk c of
 * step s can leave as soon as chunk c of step s-1 has arrived: chunks flow
 * through the ring in a pipeline and every link carries
 * 2(n-1)/n * count elements, the bandwidth optimum. Sends and receives are
 * issued in step-major order, which is also the order in which they arrive.
 *
 * Buffers. in is read-only (the caller's data in fault-tolerant mode);
 * reduced and gathered values go to work. Reduce-scatter receives straight
 * into work and adds in, since each segment is received exactly once in that
 * phase; where the transport offers post_recv_reduce it adds while the bytes
 * arrive (from a shared-memory ring straight into work: one pass over the
 * chunk instead of a copy and a second pass). When in == work (unprotected
 * or fixed-point copy), arrivals go to a one-chunk staging buffer first.
 * Empty segments (count < n) have no chunks.
 *
 * Failure. The algorithm only sees the transport and the communicator's
 * failure flag; it returns at the first error and leaves the clean-up
 * (cancel, abort broadcast) to the caller.
 */
#include "config.h"

#include "comm_internal.h"
#include "../transport/mesh.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <string.h>

#define MIN_CHUNK 32768

struct layout {
  int n, p;
  size_t count, base, rem, chunk;
};

static size_t seg_start(const struct layout *l, int i) {
  return (size_t)i * l->base + ((size_t)i < l->rem ? (size_t)i : l->rem);
}
static size_t seg_len(const struct layout *l, int i) {
  return l->base + ((size_t)i < l->rem);
}
static size_t nchunks(const struct layout *l, int i) {
  return (seg_len(l, i) + l->chunk - 1) / l->chunk;
}
void (*resihp__ring_test_hook)(resihp_comm_t *c, int step, size_t chunk);

static int mod(int a, int n) { return ((a % n) + n) % n; }
static int send_seg(const struct layout *l, int s) {
  return s < l->n - 1 ? mod(l->p - s, l->n) : mod(l->p + 1 - (s - (l->n - 1)), l->n);
}
static int recv_seg(const struct layout *l, int s) {
  return s < l->n - 1 ? mod(l->p - s - 1, l->n) : mod(l->p - (s - (l->n - 1)), l->n);
}

int resihp__algo_wait(resihp_comm_t *c, int64_t *last_progress,
                      int *bad_peer, const char *what) {
  /* Liveness is the monitor's job; this only bounds waiting for a live
   * peer that never joins (or, unprotected, for anything at all). */
  int64_t stall_ms = c->unprotected ? 10 * (int64_t)c->detect_ms : c->op_ms;
  int wait_ms = c->unprotected ? c->detect_ms : c->hb_ms;
  if (atomic_load(&c->failed))
    return RESIHP_EABORTED;
  int r = c->tp->ops->progress(c->tp, wait_ms, bad_peer);
  if (r < 0)
    return r;
  int64_t now = resihp__now_ms();
  if (r > 0)
    *last_progress = now;
  else if (now - *last_progress > stall_ms) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "rank %d: no progress for %lld ms in %s", c->world_rank,
               (long long)(now - *last_progress), what);
    return RESIHP_ETIMEDOUT;
  }
  return 0;
}

int resihp__ring_allreduce(resihp_comm_t *c, const void *in, void *work,
                           void *staging, size_t count, int dtype,
                           int *bad_peer) {
  size_t esz = resihp__dtype_size(dtype);
  int n = c->nmembers;
  *bad_peer = -1;
  if (n == 1 || count == 0) {
    if (in != work && count)
      memcpy(work, in, count * esz);
    return 0;
  }
  struct layout l = {.n = n,
                     .p = c->my_index,
                     .count = count,
                     .base = count / (size_t)n,
                     .rem = count % (size_t)n,
                     .chunk = c->chunk_bytes / esz};
  /* Aim at four chunks per segment so that the pipeline has depth even
   * for mid-sized buffers, but keep chunks of at least MIN_CHUNK bytes
   * (per-frame costs) and at most chunk_bytes. Every rank computes the same
   * value from (count, n, chunk_bytes). */
  size_t quarter = (l.base + 1) / 4;
  if (quarter * esz < MIN_CHUNK)
    quarter = MIN_CHUNK / esz;
  if (quarter < l.chunk)
    l.chunk = quarter;
  const resihp__transport_ops_t *ops = c->tp->ops;
  int left = c->members[mod(l.p - 1, n)], right = c->members[mod(l.p + 1, n)];
  int nsteps = 2 * (n - 1);
  const uint8_t *inb = in;
  uint8_t *wb = work;
  int ss = 0, rs = 0, posted = 0, summed = 0;
  size_t sc = 0, rc = 0;
  int64_t last_progress = resihp__now_ms();
  for (;;) {
    /* Issue every send whose data is ready. */
    while (ss < nsteps) {
      int seg = send_seg(&l, ss);
      if (sc >= nchunks(&l, seg)) {
        ss++;
        sc = 0;
        continue;
      }
      if (ss > 0 && !(rs > ss - 1 || (rs == ss - 1 && rc > sc)))
        break;
      size_t off = seg_start(&l, seg) + sc * l.chunk;
      size_t len = seg_len(&l, seg) - sc * l.chunk;
      if (len > l.chunk)
        len = l.chunk;
      if (resihp__ring_test_hook)
        resihp__ring_test_hook(c, ss, sc);
      const uint8_t *src = (ss == 0 ? inb : wb) + off * esz;
      resihp__tag_t tag = {c->seq, (uint32_t)ss, (uint32_t)sc};
      int r = ops->post_send(c->tp, right, tag, src, len * esz);
      if (r == RESIHP_EBUSY)
        break;
      if (r)
        return r;
      sc++;
    }
    /* Post the next receive. */
    while (!posted && rs < nsteps) {
      int seg = recv_seg(&l, rs);
      if (rc >= nchunks(&l, seg)) {
        rs++;
        rc = 0;
        continue;
      }
      size_t off = seg_start(&l, seg) + rc * l.chunk;
      size_t len = seg_len(&l, seg) - rc * l.chunk;
      if (len > l.chunk)
        len = l.chunk;
      void *dst = rs < n - 1 && staging ? staging : wb + off * esz;
      resihp__tag_t tag = {c->seq, (uint32_t)rs, (uint32_t)rc};
      summed = rs < n - 1 && !staging && ops->post_recv_reduce;
      int r = summed ? ops->post_recv_reduce(c->tp, left, tag, dst,
                                             inb + off * esz, len * esz, esz,
                                             resihp__reduce_sum_to, dtype)
                     : ops->post_recv(c->tp, left, tag, dst, len * esz);
      if (r)
        return r;
      posted = 1;
    }
    if (!posted && rs >= nsteps && ss >= nsteps &&
        !ops->sends_pending(c->tp, right))
      return 0;
    int r = resihp__algo_wait(c, &last_progress, bad_peer,
                              "the ring (waiting on the left neighbour)");
    if (r == RESIHP_ETIMEDOUT)
      *bad_peer = left;
    if (r)
      return r;
    if (posted && ops->recv_done(c->tp, left)) {
      posted = 0;
      if (rs < n - 1 && !summed) {
        int seg = recv_seg(&l, rs);
        size_t off = seg_start(&l, seg) + rc * l.chunk;
        size_t len = seg_len(&l, seg) - rc * l.chunk;
        if (len > l.chunk)
          len = l.chunk;
        if (staging)
          resihp__reduce_sum(wb + off * esz, staging, len, dtype);
        else
          resihp__reduce_sum(wb + off * esz, inb + off * esz, len, dtype);
      }
      rc++;
    }
  }
}
