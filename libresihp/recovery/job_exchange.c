/* SPDX-License-Identifier: BSD-3-Clause */
/* The gradient exchange of a step (see resihp/job.h).
 *
 * Rank k all-reduces shard k's gradient in its shard group. With K > 1 the
 * result goes to a private buffer first, and the K ranks of the replica
 * add up their failures over the replica communicator: the step commits in
 * every group (the result is copied out) or in none (the caller's buffer
 * is untouched). Each group's outcome is the same on all its survivors
 * (resihp/allreduce.h), so every replica comes to the same conclusion.
 *
 * Recovery. When a group failed, its survivors have shrunk it
 * (resihp_comm_shrink). The K ranks then add up which members each still
 * has: the replicas present in all K groups are the replica's view, and
 * the leader reports the members of the epoch outside it (RECOVER step=s
 * cepoch=g gone=...; g counts the recoveries applied since the groups
 * were made, the same on every replica). The dead, not the living: every
 * survivor reports, so a list of the living would cost the coordinator
 * O(N^2) per failure. The coordinator's one decision (REASSIGN, the same answer for
 * every reporter of the same view) is relayed to the other ranks; every
 * group then removes the members outside the view that it still has (a
 * shrink naming them: the survivors of each group agree without waiting
 * for them), so a replica leaves all K groups in the same step and epoch,
 * and its microbatches go to the survivors as st->extra. */
#include "config.h"

#include "../collectives/comm_internal.h"
#include "job_internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int peer_failure(int rc) {
  return rc == RESIHP_EPEER || rc == RESIHP_ETIMEDOUT || rc == RESIHP_EPROTO;
}

/* The replicas present in all the groups of the replica's K ranks (a
 * rank's: in all of its own), as counts over j->members. */
static int agreed_view(resihp_job_t *j, int64_t *in) {
  memset(in, 0, sizeof(int64_t) * (size_t)j->nmembers);
  int ng = resihp__job_ngroups(j);
  for (int g = 0; g < ng; g++) {
    resihp_comm_t *c = resihp__job_group(j, g);
    int size = resihp_comm_size(c);
    for (int i = 0; i < size; i++) {
      int w = resihp_comm_member(c, i);
      if (w >= 0 && w < j->nmembers)
        in[w]++;
    }
  }
  for (int w = 0; w < j->nmembers; w++)
    in[w] = in[w] == ng;
  return resihp__job_replica_sum(j, in, (size_t)j->nmembers);
}

void resihp__job_recover_line(const resihp_job_t *j, const int64_t *in,
                              resihp__wire_buf_t *b) {
  resihp__wire_buf_printf(b, "RECOVER step=%ld cepoch=%u gone=", j->step,
                          j->vgen);
  int first = 1;
  for (int w = 0; w < j->nmembers; w++)
    if (in[w] != j->lsize) {
      resihp__wire_buf_printf(b, "%s%d", first ? "" : ":", j->members[w]);
      first = 0;
    }
  /* in a free run by cost, the owners of its steps, this one's too */
  resihp__job_put_owners(j, b, 0, j->step + 1);
}

/* Leader: report the view, wait for the coordinator's decision and relay
 * it. Others: the relayed decision. Either way j->msg holds REASSIGN. */
static int decision(resihp_job_t *j, const int64_t *in) {
  int rc;
  if (j->lrank > 0) {
    if ((rc = resihp__job_recv_up(j)))
      return rc;
    return strncmp(j->msg, "REASSIGN ", 9) ? RESIHP_EPROTO : 0;
  }
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  resihp__job_recover_line(j, in, &b);
  rc = b.err ? b.err : resihp__job_send(j, b.s);
  resihp__wire_buf_free(&b);
  if (rc)
    return rc;
  do {
    if ((rc = resihp__job_recv(j)))
      return rc;
  } while (strncmp(j->msg, "REASSIGN ", 9));
  return resihp__job_send_down(j, j->msg);
}

/* Every group leaves out the members outside the agreed view. */
static int apply_view(resihp_job_t *j, const int64_t *in) {
  int *gone = malloc(sizeof(int) * (size_t)(j->nmembers ? j->nmembers : 1));
  if (!gone)
    return RESIHP_ENOMEM;
  int rc = 0;
  for (int g = 0; g < resihp__job_ngroups(j) && !rc; g++) {
    resihp_comm_t *c = resihp__job_group(j, g);
    int ng = 0, size = resihp_comm_size(c);
    for (int i = 0; i < size; i++) {
      int w = resihp_comm_member(c, i);
      if (w >= 0 && w < j->nmembers && in[w] != j->lsize)
        gone[ng++] = w;
    }
    rc = ng ? resihp_comm_shrink(c, gone, ng, NULL, 0, NULL) : 0;
  }
  free(gone);
  j->vgen++;
  return rc;
}

static int recover(resihp_job_t *j, int nf) {
  int64_t *in =
      malloc(sizeof(int64_t) * (size_t)(j->nmembers ? j->nmembers : 1));
  if (!in)
    return RESIHP_ENOMEM;
  int rc = agreed_view(j, in);
  int size = 0;
  for (int w = 0; !rc && w < j->nmembers; w++)
    size += in[w] == j->lsize;
  if (!rc && j->lrank == 0)
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: step %ld: %d peer(s) failed; %d replicas go on",
               j->replica, j->step, nf, size);
  if (!rc)
    rc = decision(j, in);
  if (!rc)
    rc = apply_view(j, in);
  free(in);
  j->recovered = 1; /* the group changed: a free run ends with this step */
  if (!rc)
    rc = resihp__job_parse_mbs(j, j->msg, "extra", &j->extra, &j->nextra);
  if (rc == RESIHP_EEXCLUDED)
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: excluded by the other replicas; leaving",
               j->replica);
  return rc;
}

int resihp_job_allreduce_as(resihp_job_t *j, void *buf, size_t count,
                            resihp_dtype_t dtype, resihp_op_t op) {
  size_t esz = resihp__dtype_size(dtype);
  if (!j || (!buf && count) || !esz ||
      (op != RESIHP_OP_SUM && op != RESIHP_OP_AVG))
    return RESIHP_EINVAL;
  if (j->replica_lost)
    return j->replica_lost;
  if (!j->in_step || !j->comm)
    return RESIHP_ESTATE;
  if (count > SIZE_MAX / esz)
    return RESIHP_ERANGE;
  int lrc = resihp__job_layer_check(j, count);
  if (lrc)
    return lrc;
  void *out = buf;
  if (j->lsize > 1) {
    if (j->workcap < count * esz) {
      void *w = realloc(j->work, count ? count * esz : 1);
      if (!w)
        return RESIHP_ENOMEM;
      j->work = w;
      j->workcap = count * esz;
    }
    out = j->work;
  }
  for (;;) {
    /* each run of layers in its group (one group: all of it); a failed
     * group is shrunk, the others still exchange, so that no peer waits */
    int nf = 0, rc;
    int64_t failed_groups = 0;
    for (int g = 0; g < resihp__job_ngroups(j); g++) {
      resihp_comm_t *c = resihp__job_group(j, g);
      size_t off, n;
      resihp__job_group_slice(j, g, count, &off, &n);
      rc = resihp_allreduce_to(c, (char *)buf + off * esz,
                               (char *)out + off * esz, n, dtype, op);
      if (!rc)
        continue;
      if (!peer_failure(rc))
        return rc;
      int failed[64], gf = 0;
      if ((rc = resihp_comm_shrink(c, NULL, 0, failed, 64, &gf))) {
        if (rc == RESIHP_EEXCLUDED)
          resihp_log(RESIHP_LOG_ERROR, "job",
                     "replica %d: excluded by the other replicas; leaving",
                     j->replica);
        return rc;
      }
      failed_groups++;
      nf = gf > nf ? gf : nf;
    }
    if (!failed_groups && j->lsize == 1)
      return 0;
    if ((rc = resihp__job_replica_sum(j, &failed_groups, 1)))
      return rc;
    if (!failed_groups) {
      memcpy(buf, out, count * esz);
      return 0;
    }
    if ((rc = recover(j, nf)))
      return rc;
    if (j->nextra == 0)
      continue;
    if (j->st) {
      j->st->nextra = j->nextra;
      j->st->extra = j->extra;
      j->st->nreplicas = resihp_comm_size(j->comm);
    }
    return RESIHP_EREASSIGNED;
  }
}

int resihp_job_allreduce(resihp_job_t *j, int64_t *acc, size_t n) {
  return resihp_job_allreduce_as(j, acc, n, RESIHP_FIXED64, RESIHP_OP_SUM);
}
