/* SPDX-License-Identifier: BSD-3-Clause */
/* A shard group's member list as GO gives it (control/coordinator.h): the
 * whole list "r@a/b/...,..." in replica id order, or its change since the
 * epoch the rank holds ("base=B n=N gone=r:r add=r@a/b,..."), so that a new
 * epoch of N replicas costs O(N) bytes per changed member, not O(N) per
 * member. Pure functions of their input (the fuzz target
 * tests/fuzz/fuzz_members.c drives them). */
#ifndef RESIHP_RECOVERY_JOB_MEMBERS_H
#define RESIHP_RECOVERY_JOB_MEMBERS_H

#include "job_internal.h"

/* Most replicas a member list may name (the coordinator's bound). */
#define RESIHP__JOB_MAX_REPLICA_ID 1000000

/* One rank's address. */
typedef char resihp__job_ep_t[RESIHP__JOB_EP_MAX];

/* The whole list: the ids (strictly increasing) and shard lrank's address
 * of each, malloc'ed. 0, RESIHP_EPROTO or RESIHP_ENOMEM. */
int resihp__job_members_parse(const char *list, int lrank, int **ids,
                              resihp__job_ep_t **eps, int *n);
/* The list of a GO line msg without members=: the held list (old_ids and
 * old_eps, nold members, of epoch held; held < 0: none) less gone plus
 * add, in id order, exactly n= members. RESIHP_EPROTO when msg's base is
 * not held, an id is added twice or never removed, or the count is not
 * n (the rank then says RESYNC and gets the whole list). */
int resihp__job_members_delta(const char *msg, long held, const int *old_ids,
                              const resihp__job_ep_t *old_eps, int nold,
                              int lrank, int **ids, resihp__job_ep_t **eps,
                              int *n);

#endif
