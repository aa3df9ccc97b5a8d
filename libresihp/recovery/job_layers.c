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

/* FNV-1a over what every rank must have declared alike (layer sizes,
 * counts). */
static uint64_t declaration_digest(int nlayers, const size_t *elems,
                                   const int *counts, int k) {
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
  return h;
}

/* Whether n parties hold the same digest h, from exact sums: h is cut
 * into `pieces` pieces of `bits` bits d, each party adds (d, d^2), and
 * all are equal exactly when n * sum(d^2) == (sum d)^2 for every piece
 * (Cauchy-Schwarz); every party computes the same answer from the same
 * sums. v: 2 * pieces entries; fill, then sum, then equal. The pieces
 * must keep n^2 * 2^(2 bits) below 2^63. */
static void digest_fill(uint64_t h, int pieces, int bits, int64_t *v) {
  for (int i = 0; i < pieces; i++) {
    int64_t d = (int64_t)((h >> (i * bits)) & ((1ULL << bits) - 1));
    v[2 * i] = d;
    v[2 * i + 1] = d * d;
  }
}
static int digest_equal(int64_t n, int pieces, const int64_t *v) {
  for (int i = 0; i < pieces; i++)
    if (n * v[2 * i + 1] != v[2 * i] * v[2 * i])
      return 0;
  return 1;
}

/* The K ranks of a replica (K <= RESIHP__JOB_MAX_SHARDS): 3 x 20 bits. */
static int replica_agrees(resihp_job_t *j, uint64_t h, int *agree) {
  int64_t v[6];
  digest_fill(h, 3, 20, v);
  int rc = resihp__job_replica_sum(j, v, 6);
  if (rc)
    return rc;
  *agree = digest_equal(j->lsize, 3, v);
  if (!*agree)
    resihp__job_replica_settle(j);
  return 0;
}

void resihp__job_replica_settle(resihp_job_t *j) {
  int64_t b = 0;
  (void)resihp__job_replica_sum(j, &b, 1); /* failed: the answer is known */
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
  int agree = 1;
  if ((rc = replica_agrees(
           j, declaration_digest(nlayers, elems, counts, nranks), &agree)) ||
      !agree) {
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

int resihp_job_partition(const resihp_job_t *j, int *counts, int nranks) {
  if (!j || !counts || nranks != j->lsize)
    return RESIHP_EINVAL;
  if (!j->nlayers)
    return RESIHP_ENOENT;
  for (int k = 0; k < nranks; k++)
    counts[k] = j->part.bounds[k + 1] - j->part.bounds[k];
  return 0;
}

int resihp_job_set_layers_movable(resihp_job_t *j) {
  if (!j)
    return RESIHP_EINVAL;
  if (!j->nlayers)
    return RESIHP_ENOENT;
  if (j->began)
    return RESIHP_ESTATE;
  j->movable = 1;
  return 0;
}

int resihp_job_commit_layers(resihp_job_t *j, const resihp_job_buf_t *bufs,
                             int n, int failed) {
  if (!j || n < 0 || (n && !bufs))
    return RESIHP_EINVAL;
  if (!j->moving || !j->in_step)
    return RESIHP_ESTATE;
  /* the new list first (its sizes are the new layers'), then whether
   * every rank of the replica got this far: all or nothing */
  int fixed = j->shape_fixed;
  j->shape_fixed = 0;
  int rc = failed ? RESIHP_EINVAL : resihp__job_state_set(j, bufs, n);
  j->shape_fixed = fixed;
  return resihp__job_commit_agree(j, rc);
}

int resihp__job_commit_agree(resihp_job_t *j, int rc) {
  int64_t bad = rc != 0;
  int src = resihp__job_replica_sum(j, &bad, 1);
  if (src)
    return src;
  if (bad) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d rank %d: %d rank(s) of this replica failed to move "
               "their layers: the replica fails",
               j->replica, j->lrank, (int)bad);
    return rc ? rc : RESIHP_EPEER;
  }
  j->moving = 0;
  return 0;
}

int resihp__job_layer_check(const resihp_job_t *j, size_t count) {
  if (!j->nlayers)
    return 0;
  if (j->moving) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d rank %d: a gradient exchange before the moved "
               "layers were committed (resihp_job_commit_layers)",
               j->replica, j->lrank);
    return RESIHP_ESTATE;
  }
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

static void lparts_free(resihp_job_t *j) {
  for (int i = 0; i < j->nlparts; i++)
    resihp__partition_free(&j->lparts[i]);
  free(j->lparts);
  free(j->lpart_of);
  j->lparts = NULL;
  j->lpart_of = NULL;
  j->nlparts = 0;
}

void resihp__job_layers_free(resihp_job_t *j) {
  free(j->layer_off);
  j->layer_off = NULL;
  resihp__partition_free(&j->part);
  j->nlayers = 0;
  lparts_free(j);
}

void resihp__job_put_lay(const resihp_job_t *j, resihp__wire_buf_t *b) {
  if (!j->nlayers)
    return;
  resihp__wire_buf_printf(b, " lay=%d", j->nlayers);
  for (int k = 1; k < j->part.k; k++)
    resihp__wire_buf_printf(b, ":%d", j->part.bounds[k]);
  if (j->movable)
    resihp__wire_buf_printf(b, " lmove=1");
}

/* GO's moved=: whether this replica is among the replicas whose
 * partition the coordinator changed in this epoch (a list of ids:
 * control/coord_repart.c). */
static int moved_here(const resihp_job_t *j) {
  char text[256];
  return !resihp__wire_get(j->msg, "moved", text, sizeof(text)) &&
         resihp__moved_has(text, j->replica) == 1;
}

/* The coordinator's new partition for this replica (GO's moved=): taken
 * when the program can move its layers; the step's ranks move them
 * (resihp_job_step_t.layers_moved) before any exchange. */
static int adopt(resihp_job_t *j, const resihp__partition_t *p) {
  if (!j->movable || !moved_here(j) || p->k != j->part.k)
    return RESIHP_EPROTO;
  for (int k = 0; k <= p->k; k++)
    j->part.bounds[k] = p->bounds[k];
  j->moving = 1;
  resihp_log(RESIHP_LOG_INFO, "job",
             "replica %d rank %d: the coordinator moved layers: this rank "
             "holds layers %d-%d from this step",
             j->replica, j->lrank, j->part.bounds[j->lrank],
             j->part.bounds[j->lrank + 1] - 1);
  return 0;
}

int resihp__job_layers_go(resihp_job_t *j) {
  lparts_free(j);
  long L = 0;
  int rc = resihp__wire_get_range(j->msg, "lay", 1, RESIHP__LAYERS_MAX, &L);
  if (rc == RESIHP_ENOENT)
    return 0;
  if (rc || !j->nlayers || L != j->nlayers)
    return RESIHP_EPROTO;
  char *text = malloc(RESIHP__JOB_MSG_MAX);
  if (!text)
    return RESIHP_ENOMEM;
  rc = resihp__wire_get(j->msg, "lparts", text, RESIHP__JOB_MSG_MAX);
  if (rc == RESIHP_ENOENT && j->lsize == 1)
    rc = 0; /* one rank holds everything: nothing to tell apart */
  else if (!rc && !(j->lpart_of = malloc(sizeof(int) * (size_t)j->nmembers)))
    rc = RESIHP_ENOMEM;
  else if (!rc) /* (of any ranks up to the bound: the job's K is more
                  * than this replica's when it shrank, coord_shrink.c) */
    rc = resihp__lparts_parse(text, j->nlayers, RESIHP__JOB_MAX_SHARDS,
                              j->members, j->nmembers, &j->lparts,
                              &j->nlparts, j->lpart_of);
  free(text);
  for (int i = 0; !rc && j->nlparts && i < j->nmembers; i++)
    if (j->members[i] == j->replica &&
        !resihp__partition_equal(&j->lparts[j->lpart_of[i]], &j->part) &&
        (rc = adopt(j, &j->lparts[j->lpart_of[i]]))) {
      /* not what this replica said: a bug, unless the coordinator moved
       * its layers; or it shrank it (control/coord_shrink.c), which this
       * library cannot take yet. No new epoch changes that: the replica
       * leaves at once (j->go_refused) rather than fail every set-up
       * until the coordinator gives up on it, and maybe on a healthy
       * replica whose set-ups it failed meanwhile */
      j->go_refused = 1;
      resihp_log(RESIHP_LOG_ERROR, "job",
                 "replica %d rank %d: the coordinator gave this replica "
                 "a partition of %d rank(s) that it cannot take: it leaves",
                 j->replica, j->lrank, j->lparts[j->lpart_of[i]].k);
    }
  if (rc) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d rank %d: GO's partitions of the layers are not "
               "this job's (%s)",
               j->replica, j->lrank, resihp_strerror(rc));
    lparts_free(j);
  }
  return rc;
}

void resihp__job_layers_welcome(resihp_job_t *j, const char *line) {
  j->welcome_lay[0] = '\0';
  if (resihp__wire_get(line, "lay", j->welcome_lay, sizeof(j->welcome_lay)) ||
      !resihp__wire_token_ok(j->welcome_lay, sizeof(j->welcome_lay)))
    j->welcome_lay[0] = '\0';
  char v[4];
  j->welcome_shrunk = !resihp__wire_get(line, "shrunk", v, sizeof(v)) &&
                      !strcmp(v, "1");
}

int resihp_job_shrunk_partition(const resihp_job_t *j, int *counts,
                                int nranks) {
  if (!j || !counts || nranks != j->lsize)
    return RESIHP_EINVAL;
  if (!j->welcome_shrunk || !j->welcome_lay[0])
    return RESIHP_ENOENT;
  /* "L" or "L:c1,c2...": the cut points of L layers (as GO's lparts=) */
  char *end;
  const char *s = j->welcome_lay;
  long L = s[0] >= '1' && s[0] <= '9' ? strtol(s, &end, 10) : 0;
  if (L < 1 || L > RESIHP__LAYERS_MAX || (*end && *end != ':'))
    return RESIHP_EPROTO;
  resihp__partition_t p;
  int rc = resihp__partition_parse(*end ? end + 1 : "", (int)L, &p);
  if (rc)
    return rc == RESIHP_ENOMEM ? rc : RESIHP_EPROTO;
  if (p.k != nranks)
    rc = RESIHP_EPROTO;
  for (int k = 0; !rc && k < nranks; k++)
    counts[k] = p.bounds[k + 1] - p.bounds[k];
  resihp__partition_free(&p);
  return rc;
}
