/* SPDX-License-Identifier: BSD-3-Clause */
/* Small-message all-reduce: direct exchange.
 *
 * Schedule. Every member sends its whole buffer to every other member (one
 * frame each, RESIHP__STEP_SMALL) and receives theirs into a slot per
 * member; once all n-1 have arrived it adds the n contributions in view
 * order, ((c0 + c1) + c2) + ..., the same additions in the same order on
 * every member, so that the results are bitwise identical even where
 * floating-point addition is not associative. Sends start with the member
 * after this one (p+1, p+2, ...), so that not every member writes to
 * member 0 first.
 *
 * Why. For a few KiB the ring's cost is its 2(n-1) dependent steps, each a
 * hand-off between two processes (a wake-up, a doorbell when the peer
 * sleeps), not the bytes: here every message can leave at once and there is
 * one round of arrivals, whatever n. It sends (n-1) times the buffer where
 * the ring sends 2(n-1)/n times, so it only pays up to some size, which
 * depends on n (resihp__small_fits: a deterministic function of the size,
 * n and the communicator's settings, so that every member picks the same
 * algorithm).
 *
 * Buffers. in is read-only and is what leaves (the caller's data); slots
 * holds n * count elements; the sum goes to work, which may be the
 * caller's receive buffer (out of place) or a private one: the caller's
 * buffer is written only after the DONE round.
 *
 * Deterministic mode (fx): the caller's values leave in their narrow form
 * when they have one (half the bytes), else as int64 made in in (then
 * written here); the contributions are added as int64, whose sum does not
 * depend on the order, and the own values join in the pass that converts
 * the sum back to the caller's type (resihp__fixed_sum_to) into fx->out:
 * with two members, straight from the peer's narrow form, nothing widened.
 *
 * Failure. As the ring: the first error of the transport, the
 * communicator's failure flag (EABORTED) or op_ms without progress
 * (ETIMEDOUT, blaming a member that has not delivered) ends the call; the
 * caller cancels, broadcasts the abort and reports (resihp__comm_fail).
 */
#include "config.h"

#include "../transport/mesh.h"
#include "comm_internal.h"
#include "fixed_point.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <string.h>

void (*resihp__small_test_hook)(resihp_comm_t *c, int stage);

#define SLOT(j) (slot + (size_t)(j)*bytes)

/* Beyond this many bytes sent per call ((n-1) * size) the extra traffic
 * costs more than the ring's steps. Measured on one host, 2-8 ranks
 * (resihp-bench-allreduce, ft against ring): direct exchange wins at 2
 * ranks x 32 KiB and 4 x 16 KiB, ties at 4 x 32 KiB (96 KiB) and 8 x 16
 * KiB (112 KiB), loses at 2 x 64 KiB, 4 x 64 KiB and 8 x 32 KiB. */
#define SMALL_TOTAL_MAX ((size_t)96 << 10)

int resihp__small_fits(const resihp_comm_t *c, size_t bytes) {
  size_t n = (size_t)c->nmembers;
  return n > 1 && bytes <= c->small_max && bytes <= c->chunk_bytes &&
         bytes * (n - 1) <= SMALL_TOTAL_MAX;
}

/* The deterministic sum: the peers' contributions plus the own values,
 * converted back into fx->out. arrived[j] == 2: j's is narrow. */
static int fixed_sum(resihp_comm_t *c, const struct resihp__ring_fixed *fx,
                     uint8_t *slot, const uint8_t *arrived, size_t count,
                     int *bad_peer) {
  int n = c->nmembers, p = c->my_index;
  size_t bytes = count * 8;
  int first = p == 0, form = arrived[first] == 2;
  if (n > 2) { /* int64 sums (widened): any order gives the same bits */
    int second = first + 1 == p ? first + 2 : first + 1;
    resihp__reduce_sum_to(SLOT(p), SLOT(first), SLOT(second), count,
                          RESIHP_FIXED64);
    for (int j = second + 1; j < n; j++)
      if (j != p)
        resihp__reduce_sum(SLOT(p), SLOT(j), count, RESIHP_FIXED64);
    first = p;
    form = 0;
  }
  if (resihp__fixed_sum_to(fx->out, fx->src, SLOT(first), form, count,
                           fx->src_dtype, fx->frac_bits, fx->divisor))
    return resihp__narrow_refused(c->members[first], "contribution", bad_peer);
  return 0;
}

int resihp__small_allreduce(resihp_comm_t *c, const void *in,
                            const struct resihp__ring_fixed *fx, void *work,
                            void *slots, size_t count, int dtype,
                            int *bad_peer) {
  size_t esz = resihp__dtype_size(dtype), bytes = count * esz;
  int n = c->nmembers, p = c->my_index;
  *bad_peer = -1;
  if (n == 1 || count == 0)
    return resihp__allreduce_alone(fx, in, work, count, esz);
  const resihp__transport_ops_t *ops = c->tp->ops;
  resihp__tag_t tag = {c->seq, RESIHP__STEP_SMALL, 0};
  /* Fixed point may travel narrow (count + 1 int32, fixed_point.h). */
  size_t alt = fx && ops->post_recv_alt && ops->post_send_alt && count > 1
                   ? (count + 1) * 4
                   : 0;
  const int32_t *narrow_in =
      alt && resihp__fixed_from_narrow(fx->narrow, fx->src, count,
                                       fx->src_dtype, fx->frac_bits)
          ? fx->narrow
          : NULL;
  if (fx && !narrow_in)
    resihp__fixed_from((int64_t *)work, fx->src, NULL, count, fx->src_dtype,
                       fx->frac_bits);
  uint8_t *slot = slots;
  if (in == work && !fx) {
    /* Unprotected in place: the sum must not overwrite what is still
     * being sent or added. */
    memcpy(SLOT(p), in, bytes);
    in = SLOT(p);
  }
  for (int j = 0; j < n; j++) {
    if (j == p)
      continue;
    int r =
        alt ? ops->post_recv_alt(c->tp, c->members[j], tag, SLOT(j), bytes, alt)
            : ops->post_recv(c->tp, c->members[j], tag, SLOT(j), bytes);
    if (r) {
      *bad_peer = c->members[j];
      return r;
    }
  }
  int sent = 1, got = 0; /* sends: to p+sent next; got: arrivals */
  uint8_t arrived[RESIHP_COMM_MAX_RANKS];
  memset(arrived, 0, (size_t)n);
  int64_t last_progress = resihp__now_ms();
  for (;;) {
    for (; sent < n; sent++) {
      if (resihp__small_test_hook)
        resihp__small_test_hook(c, sent - 1);
      int m = c->members[(p + sent) % n];
      int r = narrow_in ? ops->post_send_alt(c->tp, m, tag, narrow_in, alt)
                        : ops->post_send(c->tp, m, tag, in, bytes);
      if (r == RESIHP_EBUSY)
        break; /* earlier frames to m (a DONE) still queued */
      if (r) {
        *bad_peer = m;
        return r;
      }
    }
    for (int j = 0; j < n; j++)
      if (j != p && !arrived[j] &&
          (arrived[j] = (uint8_t)ops->recv_done(c->tp, c->members[j]))) {
        got++;
        if (arrived[j] == 2 && n > 2 &&
            resihp__fixed_widen((int64_t *)SLOT(j), (int32_t *)SLOT(j), count))
          return resihp__narrow_refused(c->members[j], "contribution",
                                        bad_peer);
      }
    if (got == n - 1 && sent == n) {
      /* Done once every byte left too: in may be the caller's buffer. */
      int pending = 0;
      for (int j = 0; j < n && !pending; j++)
        pending = j != p && ops->sends_pending(c->tp, c->members[j]);
      if (!pending)
        break;
    }
    int r = resihp__algo_wait(c, &last_progress, bad_peer,
                              "the small-message exchange");
    if (r == RESIHP_ETIMEDOUT) /* blame a member that has not delivered */
      for (int j = 0; j < n && *bad_peer < 0; j++)
        if (j != p && !arrived[j])
          *bad_peer = c->members[j];
    if (r)
      return r;
  }
  if (resihp__small_test_hook)
    resihp__small_test_hook(c, n - 1);
  if (fx)
    return fixed_sum(c, fx, slot, arrived, count, bad_peer);
  /* View order: the same additions on every member. */
  const void *c0 = p == 0 ? in : SLOT(0);
  const void *c1 = p == 1 ? in : SLOT(1);
  resihp__reduce_sum_to(work, c0, c1, count, dtype);
  for (int j = 2; j < n; j++)
    resihp__reduce_sum(work, j == p ? in : SLOT(j), count, dtype);
  return 0;
}
