/* SPDX-License-Identifier: BSD-3-Clause */
/* Reduce-scatter and all-gather over a communicator (see resihp/allreduce.h):
 * the collectives of a sharded replica, whose K ranks each own one block of
 * the parameters' flat storage (resihp_block).
 *
 * Each is one phase of the all-reduce's ring (ring_allreduce.c), its
 * segments being resihp_block's blocks: the reduce-scatter is its
 * reduce-scatter phase alone (n-1 steps, every rank sending one block a
 * step: (n-1)/n of the buffer, half the all-reduce's bytes), the
 * all-gather its all-gather phase alone. Deterministic mode runs the fixed
 * point ring's phase: the same int64 sums (integer addition, in any order)
 * and the same conversion back as resihp_allreduce, so each block is
 * bitwise the all-reduce's. Around the algorithm, the all-reduce's outcome
 * protocol (allreduce.c): the commit round, resihp__comm_fail's abort to
 * every member, and sums kept in the communicator's work buffer until
 * success is known everywhere, so the caller's input is never written and
 * a failure anywhere is a failure everywhere.
 */
#include "config.h"

#include "comm_internal.h"
#include "fixed_point.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdlib.h>
#include <string.h>

void resihp_block(size_t count, int n, int i, size_t *lo, size_t *len) {
  if (n < 1 || i < 0 || i >= n) {
    *lo = *len = 0;
    return;
  }
  size_t q = count / (size_t)n, r = count % (size_t)n, k = (size_t)i;
  *lo = k * q + (k < r ? k : r);
  *len = q + (k < r);
}

static int bad_args(resihp_comm_t *c, const void *s, const void *r,
                    size_t count, size_t esz, const char *what) {
  if (c && esz && count <= ((size_t)1 << 40) && ((s && r) || !count))
    return 0;
  resihp_log(RESIHP_LOG_ERROR, "allreduce",
             "%s: invalid argument (comm %p, sendbuf %p, recvbuf %p, count "
             "%zu)",
             what, (void *)c, s, r, count);
  return RESIHP_EINVAL;
}

/* The algorithm ran (rc, bad peer): the outcome everywhere. */
static int finish(resihp_comm_t *c, int rc, int bad, const char *what) {
  if (rc)
    return resihp__comm_fail(c, rc, bad, what);
  if (!c->unprotected && c->nmembers > 1 && (rc = resihp__comm_commit(c)))
    return resihp__comm_fail(c, rc, -1, what);
  c->seq++;
  return 0;
}

int resihp_reduce_scatter(resihp_comm_t *c, const void *sendbuf, void *recvbuf,
                          size_t count, resihp_dtype_t dtype, resihp_op_t op) {
  static const char what[] = "reduce-scatter";
  size_t esz = resihp__dtype_size(dtype), lo, len;
  int rc = bad_args(c, sendbuf, recvbuf, count, esz, "resihp_reduce_scatter");
  if (!rc && op != RESIHP_OP_SUM && op != RESIHP_OP_AVG)
    rc = bad_args(NULL, sendbuf, recvbuf, count, esz, "resihp_reduce_scatter");
  if (rc || (rc = resihp__comm_enter(c, what)))
    return rc;
  int n = c->nmembers, bad = -1;
  int fixed = c->deterministic && dtype != RESIHP_FIXED64;
  double div = op == RESIHP_OP_AVG ? (double)n : 1.0;
  resihp_block(count, n, c->my_index, &lo, &len);
  if (fixed) {
    /* As the all-reduce: int64 sums, the narrow forms, then this rank's
     * block back in the caller's type (the ring writes it at its offset
     * in the whole buffer: out - lo stays inside the sums). */
    size_t nlen = resihp__ring_fixed_narrow_len(c, count);
    size_t outoff = (count * 8 + nlen * 4 + 63) & ~(size_t)63;
    if ((rc = resihp__reserve(&c->staging, &c->staging_cap,
                              2 * c->chunk_bytes)) ||
        (rc = resihp__reserve(&c->work, &c->work_cap, outoff + len * esz)))
      return rc;
    uint8_t *work = c->work, *out = work + outoff;
    struct resihp__ring_fixed fx = {
        sendbuf,        (int)dtype, c->frac_bits, (int32_t *)(work + count * 8),
        out - lo * esz, div};
    rc = resihp__ring_fixed_phases(c, &fx, c->work, c->staging, count,
                                   RESIHP__RING_RS, &bad);
    if (!(rc = finish(c, rc, bad, what)))
      memcpy(recvbuf, out, len * esz);
    return rc;
  }
  int cma = resihp__cma_chosen(c, count * esz);
  if ((rc = resihp__reserve(&c->work, &c->work_cap, count * esz + 1)) ||
      (cma && (rc = resihp__reserve(&c->staging, &c->staging_cap,
                                    RESIHP__CMA_STAGING))))
    return rc;
  rc = cma ? resihp__cma_phases(c, sendbuf, c->work, c->staging, count,
                                (int)dtype, RESIHP__RING_RS, &bad)
           : resihp__ring_phase(c, sendbuf, c->work, count, (int)dtype,
                                RESIHP__RING_RS, &bad);
  if (!(rc = finish(c, rc, bad, what)))
    resihp__copy_out(recvbuf, (uint8_t *)c->work + lo * esz, len, (int)dtype,
                     div);
  return rc;
}

int resihp_allgather(resihp_comm_t *c, const void *sendbuf, void *recvbuf,
                     size_t count, resihp_dtype_t dtype) {
  static const char what[] = "all-gather";
  size_t esz = resihp__dtype_size(dtype), lo, len;
  int rc = bad_args(c, sendbuf, recvbuf, count, esz, "resihp_allgather");
  if (rc || (rc = resihp__comm_enter(c, what)))
    return rc;
  int bad = -1;
  uint8_t *out = recvbuf;
  resihp_block(count, c->nmembers, c->my_index, &lo, &len);
  if (len && sendbuf != out + lo * esz)
    memmove(out + lo * esz, sendbuf, len * esz);
  /* The ring receives every block but this rank's into recvbuf. */
  rc = resihp__cma_chosen(c, count * esz)
           ? resihp__cma_phases(c, out, out, NULL, count, (int)dtype,
                                RESIHP__RING_AG, &bad)
           : resihp__ring_phase(c, out, out, count, (int)dtype, RESIHP__RING_AG,
                                &bad);
  return finish(c, rc, bad, what);
}
