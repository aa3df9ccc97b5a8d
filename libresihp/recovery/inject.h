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
 * (half-way through sending or receiving the state). */
#ifndef RESIHP_RECOVERY_INJECT_H
#define RESIHP_RECOVERY_INJECT_H

#include <stddef.h>

#define RESIHP__INJECT_MAX 64
#define RESIHP__INJECT_CATCHUP (-1L)

typedef enum {
  RESIHP__INJ_KILL_RANK = 0,
  RESIHP__INJ_KILL_NODE = 1,
  RESIHP__INJ_HANG_RANK = 2,
} resihp__inj_kind_t;

typedef struct {
  resihp__inj_kind_t kind;
  int replica;
  int rank;  /* rank of the replica's step, or -1: the kind's default */
  long step; /* or RESIHP__INJECT_CATCHUP */
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
