/* SPDX-License-Identifier: BSD-3-Clause */
/* This rank's fault-tolerant groups of an epoch, keyed by layers (issue
 * 32; layer_groups.h).
 *
 * Without declared layers, or when every member holds the same partition
 * (GO's lparts= names one), a rank has one group: shard k of every member,
 * today's shard group, j->comm. When the members' partitions differ, the
 * runs of layers of the distinct partitions split this rank's layers; for
 * each run it holds the rank joins the run's group: in each member, the
 * rank that holds the run (its address from that member's column of the
 * list), group id = the run's first layer (several groups share the
 * rank's listening socket: resihp__comm_create_group), set up in run
 * order on every rank. The group's rank i is member i in every group, so
 * a member's absence means the same in all of them. The exchange sends
 * each run's slice of the rank's gradient in its group; every replica's K
 * ranks together hold every run once, so what the K ranks add up (a
 * failure, a vote, a view) is the same sum on every replica. */
#include "config.h"

#include "job_internal.h"
#include "job_members.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int resihp__job_ngroups(const resihp_job_t *j) {
  return j->comm ? 1 + j->nxcomm : 0;
}

resihp_comm_t *resihp__job_group(const resihp_job_t *j, int g) {
  return g ? j->xcomm[g - 1] : j->comm;
}

void resihp__job_group_slice(const resihp_job_t *j, int g, size_t count,
                             size_t *off, size_t *n) {
  if (!j->gslice) {
    *off = 0;
    *n = count;
    return;
  }
  *off = j->gslice[2 * g];
  *n = j->gslice[2 * g + 1];
}

void resihp__job_groups_destroy(resihp_job_t *j) {
  for (int g = 0; g < j->nxcomm; g++)
    resihp_comm_destroy(j->xcomm[g]);
  free(j->xcomm);
  free(j->gslice);
  j->xcomm = NULL;
  j->gslice = NULL;
  j->nxcomm = 0;
  resihp_comm_destroy(j->comm);
  j->comm = NULL;
}

int resihp__job_groups_failed(const resihp_job_t *j) {
  for (int g = 0; g < resihp__job_ngroups(j); g++)
    if (resihp_comm_failed(resihp__job_group(j, g), NULL, 0) > 0)
      return 1;
  return 0;
}

/* The groups of this rank's runs (see the top). */
static int run_groups(resihp_job_t *j, int me, int n,
                      char (*const mine)[RESIHP__JOB_EP_MAX],
                      char (*const *cols)[RESIHP__JOB_EP_MAX]) {
  resihp__runmap_t m;
  int rc = resihp__runmap_build(&m, j->nlayers, j->lparts, j->nlparts);
  if (rc)
    return rc;
  int r0, r1;
  if ((rc = resihp__runmap_rank_runs(&m, &j->part, j->lrank, &r0, &r1))) {
    resihp__runmap_free(&m);
    return RESIHP_EPROTO;
  }
  int ng = r1 - r0;
  int *holder = malloc(sizeof(int) * (size_t)n);
  const char **ep = malloc(sizeof(char *) * (size_t)n);
  j->gslice = malloc(sizeof(size_t) * 2 * (size_t)ng);
  j->xcomm = ng > 1 ? calloc((size_t)ng - 1, sizeof(resihp_comm_t *)) : NULL;
  if (!holder || !ep || !j->gslice || (ng > 1 && !j->xcomm))
    rc = RESIHP_ENOMEM;
  size_t base = j->layer_off[j->part.bounds[j->lrank]];
  for (int r = r0; r < r1 && !rc; r++) {
    resihp__runmap_holders(&m, r, j->lparts, j->lpart_of, n, holder);
    for (int i = 0; i < n && !rc; i++) {
      if (holder[i] == j->lrank)
        ep[i] = mine[i];
      else if (holder[i] < 0 || holder[i] >= j->ncols || !cols[holder[i]])
        rc = RESIHP_EPROTO;
      else
        ep[i] = cols[holder[i]][i];
    }
    int g = r - r0;
    j->gslice[2 * g] = j->layer_off[m.first[r]] - base;
    j->gslice[2 * g + 1] =
        j->layer_off[m.first[r + 1]] - j->layer_off[m.first[r]];
    resihp_comm_t **out = g ? &j->xcomm[g - 1] : &j->comm;
    if (!rc)
      rc = resihp__job_comm_create_group(j, (uint32_t)m.first[r], me, n, ep,
                                         j->lfd, 10000, 1, out);
    if (!rc && g)
      j->nxcomm = g;
  }
  free(holder);
  free(ep);
  resihp__runmap_free(&m);
  return rc;
}

int resihp__job_groups_create(resihp_job_t *j, int me, int n,
                              char (*const mine)[RESIHP__JOB_EP_MAX],
                              char (*const *cols)[RESIHP__JOB_EP_MAX]) {
  int rc;
  if (j->nlparts > 1) {
    rc = run_groups(j, me, n, mine, cols);
  } else {
    const char **ep = calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!ep)
      return RESIHP_ENOMEM;
    for (int i = 0; i < n; i++)
      ep[i] = mine[i];
    rc = resihp__job_comm_create(j, me, n, ep, j->lfd, 10000, 1, &j->comm);
    free(ep);
  }
  if (rc)
    resihp__job_groups_destroy(j);
  return rc;
}
