/* SPDX-License-Identifier: BSD-3-Clause */
/* The model's layers and this replica's partition of them (resihp/job.h,
 * layer_groups.h): what the program declares, what it is told it holds,
 * and the slices of its gradient that the exchange sends in each run's
 * group. */
#include "config.h"

#include "job_internal.h"
#include "layer_groups.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Two independent 20-bit digests of what every rank of the replica must
 * have declared alike (FNV-1a over the layer sizes and the counts). */
static void declaration_digest(int nlayers, const size_t *elems,
                               const int *counts, int k, int64_t d[2]) {
  uint64_t h = 1469598103934665603ULL;
#define MIX(x)                                                                 \
  do {                                                                         \
    uint64_t v_ = (uint64_t)(x);                                               \
    for (int b_ = 0; b_ < 8; b_++) {                                           \
      h ^= (v_ >> (8 * b_)) & 0xff;                                            \
      h *= 1099511628211ULL;                                                   \
    }                                                                          \
  } while (0)
  MIX(nlayers);
  for (int l = 0; l < nlayers; l++)
    MIX(elems[l]);
  MIX(k);
  for (int i = 0; i < k; i++)
    MIX(counts[i]);
#undef MIX
  d[0] = (int64_t)(h & 0xfffff);
  d[1] = (int64_t)((h >> 40) & 0xfffff);
}

/* Whether every rank of the replica declared the same: for each digest
 * d_k, K * sum(d_k^2) == (sum d_k)^2 exactly when all are equal (the
 * sums fit: 20-bit digests, K <= RESIHP__JOB_MAX_SHARDS), and every rank
 * computes the same answer from the same sums. */
static int replica_agrees(resihp_job_t *j, const int64_t d[2], int *agree) {
  int64_t v[4] = {d[0], d[0] * d[0], d[1], d[1] * d[1]};
  int rc = resihp__job_replica_sum(j, v, 4);
  if (rc)
    return rc;
  *agree = (int64_t)j->lsize * v[1] == v[0] * v[0] &&
           (int64_t)j->lsize * v[3] == v[2] * v[2];
  return 0;
}

int resihp_job_set_layers(resihp_job_t *j, int nlayers, const size_t *elems,
                          const int *counts, int nranks) {
  if (!j || !elems || !counts || nlayers < 1 ||
      nlayers > RESIHP__LAYERS_MAX || nranks != j->lsize)
    return RESIHP_EINVAL;
  if (j->began)
    return RESIHP_ESTATE; /* the partition is part of the committed state */
  resihp__partition_t p;
  int rc = resihp__partition_from_counts(counts, nranks, nlayers, &p);
  if (rc)
    return rc;
  size_t *off = resihp__layers_offsets(elems, nlayers);
  if (!off) {
    resihp__partition_free(&p);
    return RESIHP_ENOMEM;
  }
  int64_t d[2];
  int agree = 1;
  declaration_digest(nlayers, elems, counts, nranks, d);
  if ((rc = replica_agrees(j, d, &agree)) || !agree) {
    if (!rc)
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d rank %d: the ranks of this replica declared "
                 "different layers or partitions (resihp_job_set_layers): "
                 "every rank must pass the same sizes and counts",
                 j->replica, j->lrank);
    free(off);
    resihp__partition_free(&p);
    return rc ? rc : RESIHP_EINVAL;
  }
  resihp__job_layers_free(j);
  j->nlayers = nlayers;
  j->layer_off = off;
  j->part = p;
  return 0;
}

int resihp_job_layers(const resihp_job_t *j, int *first, int *count) {
  if (!j || !first || !count)
    return RESIHP_EINVAL;
  if (!j->nlayers)
    return RESIHP_ENOENT;
  *first = j->part.bounds[j->lrank];
  *count = j->part.bounds[j->lrank + 1] - *first;
  return 0;
}

int resihp__job_layer_check(const resihp_job_t *j, size_t count) {
  if (!j->nlayers)
    return 0;
  const resihp__partition_t *p = &j->part;
  size_t mine = j->layer_off[p->bounds[j->lrank + 1]] -
                j->layer_off[p->bounds[j->lrank]];
  if (count == mine)
    return 0;
  resihp_log(RESIHP_LOG_ERROR, "job",
             "replica %d rank %d: a gradient of %zu elements, but this rank's "
             "layers %d-%d have %zu (resihp_job_set_layers)",
             j->replica, j->lrank, count, p->bounds[j->lrank],
             p->bounds[j->lrank + 1] - 1, mine);
  return RESIHP_EINVAL;
}

void resihp__job_layers_free(resihp_job_t *j) {
  free(j->layer_off);
  j->layer_off = NULL;
  resihp__partition_free(&j->part);
  j->nlayers = 0;
}
