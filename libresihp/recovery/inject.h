/* SPDX-License-Identifier: BSD-3-Clause */
/* Fault injection plans: "KIND:REPLICA@STEP,..." (see resihp-run(1)).
 * REPLICA may be REPLICA.RANK: the fault hits that rank of the replica's
 * step (a shard); without it kill-rank and hang-rank hit the replica's last
 * rank and kill-node its rank 0's node.
 *
 * KIND is kill-rank (the rank SIGKILLs itself), kill-node (resihp-run runs
 * its --kill-node-cmd on the rank's node and the rank waits to be killed)
 * or hang-rank (the rank SIGSTOPs itself). STEP is a step number, or
 * "catchup": the moment the replica takes part in a catch-up transfer
 * (half-way through sending or receiving the state), or "setup": the
 * moment the rank starts setting up its group of a new epoch, the others
 * already setting up theirs with it (a test stops it there with hang-rank
 * and kills it from outside).
 *
 * slow-rank is a fail-slow, not a failure: "slow-rank:REPLICA[.RANK]@STEP
 * xF[:D]" (also with the sign U+00D7 for 'x') makes the rank (default: the
 * replica's last) F times slower from step STEP on, for D steps or, without
 * :D, for good. F is a decimal in (1, 100] with at most 3 decimals, kept in
 * thousandths so that printing and parsing it again is exact; STEP must be
 * a number. The rank stretches its own microbatches (job_faults.c) and
 * never announces it to the coordinator. */
#ifndef RESIHP_RECOVERY_INJECT_H
#define RESIHP_RECOVERY_INJECT_H

#include <stddef.h>

#define RESIHP__INJECT_MAX 64
#define RESIHP__INJECT_CATCHUP (-1L)
#define RESIHP__INJECT_SETUP (-2L)

typedef enum {
  RESIHP__INJ_KILL_RANK = 0,
  RESIHP__INJ_KILL_NODE = 1,
  RESIHP__INJ_HANG_RANK = 2,
  RESIHP__INJ_SLOW_RANK = 3,
} resihp__inj_kind_t;

/* Bounds of slow-rank's factor (thousandths) and duration (steps). */
#define RESIHP__INJECT_SLOW_MIN_MILLI 1001
#define RESIHP__INJECT_SLOW_MAX_MILLI 100000
#define RESIHP__INJECT_SLOW_MAX_STEPS 1000000000L

typedef struct {
  resihp__inj_kind_t kind;
  int replica;
  int rank;  /* rank of the replica's step, or -1: the kind's default */
  long step; /* or RESIHP__INJECT_CATCHUP */
  /* slow-rank only (0 for the other kinds): the factor in thousandths and
   * the number of slow steps, 0 for good */
  int factor_milli;
  long steps;
} resihp__inject_t;

/* Parse spec into out (at most max items); *n gets the count. On error
 * returns RESIHP_EINVAL and writes a sentence naming the bad item into err. */
int resihp__inject_parse(const char *spec, resihp__inject_t *out, int max,
                         int *n, char *err, size_t errlen);
/* Text of items (the same syntax); returns buf. */
char *resihp__inject_format(const resihp__inject_t *v, int n, char *buf,
                            size_t len);
const char *resihp__inject_kind_name(resihp__inj_kind_t k);
/* Kind by name, or -1. */
int resihp__inject_kind_lookup(const char *name);

#endif
