/* SPDX-License-Identifier: BSD-3-Clause */
/* Reduce-scatter and all-gather over a communicator (see resihp/allreduce.h):
 * the collectives of a sharded replica, whose K ranks each own one block of
 * the parameters' flat storage.
 *
 * Both are built on the collectives that already carry the failure
 * semantics (outcome agreement, aborts that reach every member, the caller's
 * input never written): the reduce-scatter is an out-of-place all-reduce
 * into a private buffer of which each member keeps its block, so the sum is
 * bitwise that of resihp_allreduce (deterministic mode included) and a
 * failure anywhere is a failure everywhere; the all-gather is one broadcast
 * per owner along the view's chain (p2p.c), each of which fails every
 * member when one of them breaks. A ring reduce-scatter would send half the
 * bytes; the replica's few ranks make the all-reduce's extra pass cheap
 * next to the step, and it keeps one arithmetic for every exchange.
 */
#include "config.h"

#include "comm_internal.h"

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

int resihp_reduce_scatter(resihp_comm_t *c, const void *sendbuf, void *recvbuf,
                          size_t count, resihp_dtype_t dtype, resihp_op_t op) {
  size_t esz = resihp__dtype_size(dtype), lo, len;
  int rc = bad_args(c, sendbuf, recvbuf, count, esz, "resihp_reduce_scatter");
  if (rc)
    return rc;
  uint8_t *sum = malloc(count ? count * esz : 1);
  if (!sum) {
    resihp_log(RESIHP_LOG_ERROR, "allreduce",
               "reduce-scatter: cannot allocate %zu bytes", count * esz);
    return RESIHP_ENOMEM;
  }
  rc = resihp_allreduce_to(c, sendbuf, sum, count, dtype, op);
  if (!rc) { /* the view is the one the all-reduce just ran over */
    resihp_block(count, resihp_comm_size(c), resihp_comm_rank(c), &lo, &len);
    memcpy(recvbuf, sum + lo * esz, len * esz);
  }
  free(sum);
  return rc;
}

int resihp_allgather(resihp_comm_t *c, const void *sendbuf, void *recvbuf,
                     size_t count, resihp_dtype_t dtype) {
  size_t esz = resihp__dtype_size(dtype), lo, len;
  int rc = bad_args(c, sendbuf, recvbuf, count, esz, "resihp_allgather");
  if (rc)
    return rc;
  int n = resihp_comm_size(c), me = resihp_comm_rank(c);
  uint8_t *out = recvbuf;
  resihp_block(count, n, me, &lo, &len);
  if (len && sendbuf != out + lo * esz)
    memmove(out + lo * esz, sendbuf, len * esz);
  for (int i = 0; i < n && !rc; i++) {
    resihp_block(count, n, i, &lo, &len);
    rc = resihp_bcast(c, i, len ? out + lo * esz : NULL, len * esz);
  }
  return rc;
}
