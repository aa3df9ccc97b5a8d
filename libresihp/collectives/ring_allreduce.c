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
 * Deterministic mode (resihp__ring_allreduce_fixed). The input is the
 * caller's float data, converted to int64 fixed point chunk by chunk where
 * the ring first reads it - step 0's sends and reduce-scatter's addends -
 * while the chunk is in cache, instead of a pass over the whole input
 * before the ring starts. A chunk whose values are all k * 2^t with k in
 * int32 (gradients of ~1e-3 with 32 fraction bits are ~2^22; larger values
 * of similar magnitude share low zero bits, a float having 24 significant
 * bits) travels as t and the int32 k, half the bytes, flagged as the
 * transport's alternative form, and is widened on receipt; any other chunk
 * travels as int64. Each sender decides per chunk and the frame says
 * which, so every value stays exact and no rank needs to agree beforehand.
 * The narrow copies live in a buffer laid out like work (narrow_slot), each
 * segment being sent once in reduce-scatter; step 0's own values that fit
 * are made straight in the peer's shared-memory ring instead where the
 * transport can (send_fill: one pass over them, no copy). Step 0's values, and
 * the partial sums of the steps after it, go straight into their narrow form
 * (shift 0) when every one fits in int32; other chunks are made in a chunk
 * in cache (staging's second chunk) and packed from there with a shift if
 * one fits, so int64 values reach memory only when they cannot travel
 * narrow. The last reduce-scatter step adds the received sum to the
 * owner's own values and converts the result back to the caller's type in
 * one pass (resihp__fixed_sum_to: a pure function of the int64 sums, so
 * every rank gets the same bits), as the chunk arrives where the transport
 * hands it over in place (post_recv_sink: straight from a shared-memory
 * ring, as post_recv_reduce for the float ring), and all-gather moves those
 * final values as the float ring does: no rank converts back more than its
 * own segment.
 *
 * Failure. The algorithm only sees the transport and the communicator's
 * failure flag; it returns at the first error and leaves the clean-up
 * (cancel, abort broadcast) to the caller.
 */
#include "config.h"

#include "../transport/mesh.h"
#include "comm_internal.h"
#include "fixed_point.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdlib.h>
#include <string.h>

#define MIN_CHUNK 32768

struct layout {
  int n, p;
  int shift; /* 1 for one phase alone: member p ends with segment p */
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
atomic_ulong resihp__ring_fixed_sent[2];

static int mod(int a, int n) {
  return ((a % n) + n) % n;
}
static int send_seg(const struct layout *l, int s) {
  return s < l->n - 1 ? mod(l->p - s - l->shift, l->n)
                      : mod(l->p + 1 - (s - (l->n - 1)) - l->shift, l->n);
}
static int recv_seg(const struct layout *l, int s) {
  return s < l->n - 1 ? mod(l->p - s - 1 - l->shift, l->n)
                      : mod(l->p - (s - (l->n - 1)) - l->shift, l->n);
}

int resihp__algo_wait(resihp_comm_t *c, int64_t *last_progress, int *bad_peer,
                      const char *what) {
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

/* fixed: the deterministic ring, whose elements (esz 8) mostly travel in
 * their narrow form (4 bytes): its smallest chunk is counted in those, so
 * that its frames are no smaller (and no more numerous) than the float
 * ring's. */
static void make_layout(resihp_comm_t *c, size_t count, size_t esz, int fixed,
                        struct layout *l) {
  *l = (struct layout){.n = c->nmembers,
                       .p = c->my_index,
                       .count = count,
                       .base = count / (size_t)c->nmembers,
                       .rem = count % (size_t)c->nmembers,
                       .chunk = c->chunk_bytes / esz};
  /* Aim at four chunks per segment so that the pipeline has depth even
   * for mid-sized buffers, but keep chunks of at least MIN_CHUNK bytes
   * (per-frame costs) and at most chunk_bytes. Every rank computes the same
   * value from (count, n, chunk_bytes). */
  size_t quarter = (l->base + 1) / 4, min_esz = fixed ? 4 : esz;
  if (quarter * min_esz < MIN_CHUNK)
    quarter = MIN_CHUNK / min_esz;
  if (quarter < l->chunk)
    l->chunk = quarter;
}

/* Where the narrow form of chunk sc of segment seg goes in the narrow
 * buffer (int32 units): its n + 1 values after those of every chunk before
 * it, segment 0 having the most chunks. */
static size_t narrow_slot(const struct layout *l, int seg, size_t sc) {
  return seg_start(l, seg) + sc * l->chunk + (size_t)seg * nchunks(l, 0) + sc;
}

size_t resihp__ring_fixed_narrow_len(resihp_comm_t *c, size_t count) {
  struct layout l;
  make_layout(c, count, 8, 1, &l);
  return count + (size_t)c->nmembers * nchunks(&l, 0) + 1;
}

/* Where the deterministic ring put a reduce-scatter chunk's values to be
 * sent (by segment and chunk, narrow_slot's order): not yet made, narrow
 * in its slot, or int64 in work. */
enum { CHUNK_UNMADE, CHUNK_NARROW, CHUNK_WIDE };

/* Values of a chunk just made in conv (stats from the conversion): to
 * their narrow slot when they fit, else to wide. */
static uint8_t settle(const int64_t *conv, const uint64_t stats[2], size_t len,
                      int32_t *slot, int64_t *wide) {
  if (slot && resihp__fixed_narrow(slot, conv, len, stats))
    return CHUNK_NARROW;
  if (conv != wide)
    memcpy(wide, conv, len * sizeof(*wide));
  return CHUNK_WIDE;
}

/* Deterministic reduce-scatter: the values this rank sends on for the
 * chunk at off - its own (step 0: part NULL), or the partial sum that
 * arrived in part (narrow or int64) plus its own: narrow in its slot in one
 * pass when every value fits, else made in conv (a chunk in cache) and
 * settled. 0, or -1 for an impossible shift. */
static int make_partial(const struct resihp__ring_fixed *fx, void *part,
                        int narrow_in, size_t off, size_t len, size_t fsz,
                        int32_t *slot, int64_t *conv, int64_t *wide,
                        uint8_t *state) {
  const uint8_t *own = (const uint8_t *)fx->src + off * fsz;
  int fits = !slot  ? 0
             : part ? resihp__fixed_add_narrow(slot, own, part, narrow_in, len,
                                               fx->src_dtype, fx->frac_bits)
                    : resihp__fixed_from_narrow(slot, own, len, fx->src_dtype,
                                                fx->frac_bits);
  if (fits < 0)
    return -1;
  if (fits) {
    *state = CHUNK_NARROW;
    return 0;
  }
  if (narrow_in && resihp__fixed_widen(part, part, len))
    return -1;
  uint64_t stats[2] = {0, 0};
  resihp__fixed_from_stats(slot ? conv : wide, own, part, len, fx->src_dtype,
                           fx->frac_bits, stats);
  if (state)
    *state = settle(slot ? conv : wide, stats, len, slot, wide);
  return 0;
}

int resihp__allreduce_alone(const struct resihp__ring_fixed *fx, const void *in,
                            void *work, size_t count, size_t esz) {
  if (fx && count) {
    resihp__fixed_from(work, fx->src, NULL, count, fx->src_dtype,
                       fx->frac_bits);
    resihp__fixed_to(fx->out, work, count, fx->src_dtype, fx->frac_bits,
                     fx->divisor);
  } else if (in != work && count) {
    memcpy(work, in, count * esz);
  }
  return 0;
}

/* Step 0's own values made straight in the transport's memory
 * (send_fill) when they fit the narrow form, without the copy through
 * their narrow slot. */
struct own_values {
  const struct resihp__ring_fixed *fx;
  size_t off, len, fsz;
};

static int fill_narrow(void *arg, void *payload, size_t cap) {
  const struct own_values *o = arg;
  (void)cap; /* room for the int64 form: more than the narrow one needs */
  return resihp__fixed_from_narrow(
             payload, (const uint8_t *)o->fx->src + o->off * o->fsz, o->len,
             o->fx->src_dtype, o->fx->frac_bits)
             ? 2
             : 0;
}

/* Deterministic reduce-scatter's last step, summed as the chunk arrives
 * (post_recv_sink): the received partial sum plus this rank's values, back
 * to the caller's type, straight from the transport's memory. */
struct last_sum {
  const struct resihp__ring_fixed *fx;
  size_t fsz, off; /* element size of the caller's type, chunk's start */
  int t;           /* the narrow form's shift, once its first int32 came */
  int bad;         /* an impossible shift */
};

static void sum_arrived(void *arg, int form, size_t index, const void *elems,
                        size_t count) {
  struct last_sum *ls = arg;
  const uint8_t *e = elems;
  if (form == 2 && index == 0) {
    ls->t = resihp__fixed_shift(e);
    ls->bad = ls->t < 0;
    e += 4;
    count--;
    index = 1;
  }
  if (ls->bad || !count)
    return;
  const struct resihp__ring_fixed *fx = ls->fx;
  size_t v = (ls->off + index - (form == 2)) * ls->fsz;
  resihp__fixed_sum_to_span(
      (uint8_t *)fx->out + v, (const uint8_t *)fx->src + v, e,
      form == 2 ? ls->t : -1, count, fx->src_dtype, fx->frac_bits, fx->divisor);
}

int resihp__narrow_refused(int peer, const char *what, int *bad_peer) {
  resihp_log(RESIHP_LOG_ERROR, "allreduce",
             "rank %d sent a narrow %s with an impossible shift: dropping the "
             "peer; check that every rank runs the same resihp version",
             peer, what);
  *bad_peer = peer;
  return RESIHP_EPROTO;
}

static int ring(resihp_comm_t *c, const void *in,
                const struct resihp__ring_fixed *fx, uint8_t *made, void *work,
                void *staging, size_t count, int dtype, int phases,
                int *bad_peer) {
  size_t esz = resihp__dtype_size(dtype);
  int n = c->nmembers;
  *bad_peer = -1;
  if (n == 1 || count == 0)
    return resihp__allreduce_alone(fx, in, work, count, esz);
  struct layout l;
  make_layout(c, count, esz, fx != NULL, &l);
  /* One phase alone (reduce-scatter or all-gather of a sharded replica):
   * its steps only, the segments turned by one so that member p ends with
   * (or starts from) segment p, resihp_block's. */
  l.shift = phases != RESIHP__RING_BOTH;
  const resihp__transport_ops_t *ops = c->tp->ops;
  int left = c->members[mod(l.p - 1, n)], right = c->members[mod(l.p + 1, n)];
  int nsteps = phases & RESIHP__RING_AG ? 2 * (n - 1) : n - 1;
  const uint8_t *inb = in;
  uint8_t *wb = work;
  /* Deterministic mode: float input and output and their element size,
   * step 0's conversion chunk; narrow wire where the transport has the
   * alternative form. */
  const uint8_t *fsrc = fx ? fx->src : NULL;
  uint8_t *fout = fx ? fx->out : NULL;
  size_t fsz = fx ? resihp__dtype_size(fx->src_dtype) : 0;
  int64_t *converted =
      fx ? (int64_t *)((uint8_t *)staging + l.chunk * esz) : NULL;
  int32_t *narrow =
      fx && ops->post_send_alt && ops->post_recv_alt ? fx->narrow : NULL;
  int ss = phases & RESIHP__RING_RS ? 0 : n - 1, rs = ss, posted = 0,
      summed = 0;
  struct last_sum ls = {fx, fsz, 0, 0, 0};
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
      int ag = ss >= n - 1;
      /* Deterministic all-gather moves final values of the caller's type. */
      const uint8_t *src =
          fx && ag ? fout + off * fsz : (ss == 0 && !fx ? inb : wb) + off * esz;
      size_t bytes = len * (fx && ag ? fsz : esz);
      uint8_t *state =
          made && !ag ? &made[(size_t)seg * nchunks(&l, 0) + sc] : NULL;
      int32_t *slot =
          narrow && !ag && len > 1 ? narrow + narrow_slot(&l, seg, sc) : NULL;
      resihp__tag_t tag = {c->seq, (uint32_t)ss, (uint32_t)sc};
      int r = 1; /* 1: not sent in place */
      if (fx && ss == 0 && state && !*state && slot && ops->send_fill) {
        struct own_values o = {fx, off, len, fsz};
        r = ops->send_fill(c->tp, right, tag, bytes, (len + 1) * 4, fill_narrow,
                           &o);
        if (r < 0) {
          *bad_peer = right;
          return r;
        }
        if (r == 0)
          *state = CHUNK_NARROW;
      }
      if (fx && ss == 0 && !(state && *state)) /* made once: EBUSY retries */
        make_partial(fx, NULL, 0, off, len, fsz, slot, converted,
                     (int64_t *)(wb + off * esz), state);
      int thin = state && *state == CHUNK_NARROW;
      if (r)
        r = thin ? ops->post_send_alt(c->tp, right, tag, slot, (len + 1) * 4)
                 : ops->post_send(c->tp, right, tag, src, bytes);
      if (r == RESIHP_EBUSY)
        break;
      if (r)
        return r;
      if (fx && !ag)
        atomic_fetch_add_explicit(&resihp__ring_fixed_sent[thin], 1,
                                  memory_order_relaxed);
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
      int rsphase = rs < n - 1;
      void *dst = fx && !rsphase       ? fout + off * fsz
                  : rsphase && staging ? staging
                                       : wb + off * esz;
      size_t bytes = len * (fx && !rsphase ? fsz : esz);
      resihp__tag_t tag = {c->seq, (uint32_t)rs, (uint32_t)rc};
      summed = rsphase && (fx ? rs == n - 2 && ops->post_recv_sink
                              : !staging && ops->post_recv_reduce);
      size_t alt = narrow && rsphase && len > 1 ? (len + 1) * 4 : 0;
      if (summed && fx)
        ls = (struct last_sum){fx, fsz, off, 0, 0};
      int r = summed && fx ? ops->post_recv_sink(c->tp, left, tag, dst, bytes,
                                                 esz, alt, 4, sum_arrived, &ls)
              : summed     ? ops->post_recv_reduce(c->tp, left, tag, dst,
                                                   inb + off * esz, bytes, esz,
                                                   resihp__reduce_sum_to, dtype)
              : alt ? ops->post_recv_alt(c->tp, left, tag, dst, bytes, alt)
                    : ops->post_recv(c->tp, left, tag, dst, bytes);
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
    int got = posted ? ops->recv_done(c->tp, left) : 0;
    if (got) {
      posted = 0;
      int seg = recv_seg(&l, rs);
      size_t off = seg_start(&l, seg) + rc * l.chunk;
      size_t len = seg_len(&l, seg) - rc * l.chunk;
      if (len > l.chunk)
        len = l.chunk;
      int rsphase = rs < n - 1;
      void *dst = rsphase && staging ? staging : wb + off * esz;
      uint8_t *state =
          made && rsphase ? &made[(size_t)seg * nchunks(&l, 0) + rc] : NULL;
      if (fx && rsphase) {
        int32_t *slot =
            narrow && len > 1 ? narrow + narrow_slot(&l, seg, rc) : NULL;
        /* the last step: the sum back to the caller's type, for
         * all-gather, in one pass (done as it arrived where summed) */
        if (summed ? ls.bad
            : rs == n - 2
                ? resihp__fixed_sum_to(fout + off * fsz, fsrc + off * fsz, dst,
                                       got == 2, len, fx->src_dtype,
                                       fx->frac_bits, fx->divisor)
                : make_partial(fx, dst, got == 2, off, len, fsz, slot,
                               converted, (int64_t *)(wb + off * esz), state))
          return resihp__narrow_refused(left, "chunk", bad_peer);
      } else if (rsphase && !summed && staging)
        resihp__reduce_sum(wb + off * esz, staging, len, dtype);
      else if (rsphase && !summed)
        resihp__reduce_sum(wb + off * esz, inb + off * esz, len, dtype);
      rc++;
    }
  }
}

int resihp__ring_allreduce(resihp_comm_t *c, const void *in, void *work,
                           void *staging, size_t count, int dtype,
                           int *bad_peer) {
  return ring(c, in, NULL, NULL, work, staging, count, dtype, RESIHP__RING_BOTH,
              bad_peer);
}

int resihp__ring_phase(resihp_comm_t *c, const void *in, void *work,
                       size_t count, int dtype, int phase, int *bad_peer) {
  return ring(c, in, NULL, NULL, work, NULL, count, dtype, phase, bad_peer);
}

int resihp__ring_allreduce_fixed(resihp_comm_t *c,
                                 const struct resihp__ring_fixed *fx,
                                 int64_t *work, void *staging, size_t count,
                                 int *bad_peer) {
  return resihp__ring_fixed_phases(c, fx, work, staging, count,
                                   RESIHP__RING_BOTH, bad_peer);
}

int resihp__ring_fixed_phases(resihp_comm_t *c,
                              const struct resihp__ring_fixed *fx,
                              int64_t *work, void *staging, size_t count,
                              int phases, int *bad_peer) {
  if (!staging)
    return RESIHP_EINVAL; /* arrivals cannot go straight into work */
  const resihp__transport_ops_t *ops = c->tp->ops;
  uint8_t *made = NULL;
  if (fx->narrow && ops->post_send_alt && ops->post_recv_alt &&
      c->nmembers > 1 && count) {
    struct layout l;
    make_layout(c, count, 8, 1, &l);
    made = calloc((size_t)c->nmembers * nchunks(&l, 0), 1);
    if (!made) {
      resihp_log(RESIHP_LOG_ERROR, "allreduce", "out of memory");
      return RESIHP_ENOMEM;
    }
  }
  int rc = ring(c, NULL, fx, made, work, staging, count, RESIHP__DTYPE_INT64,
                phases, bad_peer);
  free(made);
  return rc;
}
