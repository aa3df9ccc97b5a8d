/* SPDX-License-Identifier: BSD-3-Clause */
/* A cost plan: what every replica needs to assign a step's microbatches by
 * predicted cost itself, exactly as the coordinator would (see costplan.c).
 * Shared by the coordinator (control/coord_perf.c, coord_schedule.c) and
 * the ranks (recovery/job_step.c). */
#ifndef RESIHP_CONTROL_COSTPLAN_H
#define RESIHP_CONTROL_COSTPLAN_H

#include "wire.h"

#include <resihp/detector.h>

/* The largest replica id a plan may name (the coordinator's bound). */
#define RESIHP__COSTPLAN_MAXR 1000000
/* Most owners (steps x microbatches) a free cost run reports in one line
 * and a replica keeps; the run ends at a boundary when they would be more
 * (resihp__costplan_rows). */
#define RESIHP__COSTPLAN_OWNERS (1 << 16)
/* Most steps a free cost run's log holds, whatever the microbatches. */
#define RESIHP__COSTPLAN_ROWS 4096

typedef struct {
  int K;                 /* shards: one model each */
  int nc;                /* contributors, in the planner's order */
  int cap;               /* room in contrib and slow */
  int *contrib;          /* replica ids */
  double *slow;          /* each contributor's time multiplier (>= 1) */
  resihp_model_t *model; /* K: shard k's reference rank's model */
} resihp__costplan_t;

/* The most models a plan carries (the coordinator's shards). */
#define RESIHP__COSTPLAN_MAX_MODELS 64

/* How many models the plan on a line carries (its cmod= figures over 7),
 * 1..RESIHP__COSTPLAN_MAX_MODELS: a process of fewer ranks than the job's
 * K (a replica shrunk in place) reads and uses the coordinator's K models
 * as every other process does, so that all of them assign the same
 * owners; RESIHP_ENOENT without cmod=; RESIHP_EPROTO for a count that is
 * not a whole number of models or above the bound. */
int resihp__costplan_models(const char *msg);

/* Room for up to cap contributors and K models; _free(NULL-like) is fine. */
int resihp__costplan_init(resihp__costplan_t *p, int cap, int K);
void resihp__costplan_free(resihp__costplan_t *p);

/* Append " cby=a:b cslow=X:X cmod=X:...": ids in decimal, every double as
 * the 16 hex digits of its IEEE-754 bits (so the receiver gets the same
 * bits), the K models' theta[0..3], n0, k0, t0 in shard order. list: the
 * member list the receiver holds (NULL: none); contributors equal to it
 * are sent as "cby=list", multipliers that are all 1 as "cslow=1", and
 * the few that are not as "cslow=sPOS.X:POS.X" (contributor positions,
 * ascending; the others 1), so that a START stays O(K + slow replicas)
 * bytes, not O(N), and N of them O(N). */
void resihp__costplan_put(resihp__wire_buf_t *b, const resihp__costplan_t *p,
                          const int *list, int nlist);

/* Read a plan from a line (the keys above; list as for _put, "cby=list"
 * without one is an error). 0; RESIHP_ENOENT when the line
 * has none of the keys; RESIHP_EPROTO for anything else: a key missing,
 * more contributors than p->cap or ids not distinct or past max_id, a
 * count that is not nc multipliers and 7 K model figures, a figure that
 * is not exactly 16 lowercase hex digits or not finite, a multiplier < 1,
 * a model that is not resihp_model_ok. On error p holds no plan (nc 0). */
int resihp__costplan_parse(const char *msg, int max_id, resihp__costplan_t *p,
                           const int *list, int nlist);

/* Step owners by the plan: each of the M microbatches' cost from its
 * workload (resihp_model_costs; cost: room for M), resihp_planner_assign
 * by cost over the contributors (pick: room for M), owner[mb] the
 * replica id. 0, or RESIHP_EINVAL when a workload cannot be costed (the
 * caller then does without the plan), RESIHP_ENOMEM. */
int resihp__costplan_owners(const resihp__costplan_t *p,
                            const resihp_workload_t *wl, int M, double *cost,
                            int *pick, int *owner);

/* A workload figure as it travels (WL lines) and as the ranks cost it: a
 * non-negative integer, at most 1e15. */
long long resihp__costplan_whole(double v);

/* Steps whose owners a free cost run may log: at least 1. */
int resihp__costplan_rows(int M);

#endif
