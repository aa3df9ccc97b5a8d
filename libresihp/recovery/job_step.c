/* SPDX-License-Identifier: BSD-3-Clause */
/* Step boundaries (see resihp/job.h and control/coordinator.h).
 *
 * The leader says BEGIN and reads the coordinator's answers; GO, START and
 * DONE are relayed verbatim to the replica's other ranks, so that all K
 * ranks act on the same lines in the same order:
 *
 *   GO new=1   every rank re-creates its shard group for the epoch (the
 *              k-th address of each member in members=r@a/b,...), the K
 *              ranks add up their failures, and the leader answers READY
 *              or RESYNC for the replica;
 *   START      the step's microbatches; catchup=1: every rank receives its
 *              shard (job_catchup.c) and the K ranks agree whether all
 *              did; serve=r.k@ep,...: rank k of this replica sends shard k
 *              to replica r from a thread while it computes;
 *   DONE       training is over.
 *
 * Every agreement among the K ranks is an exact sum over the replica
 * communicator (resihp__job_replica_sum), called by all K ranks at the same
 * points because they follow the same lines. */
#include "config.h"

#include "job_internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* on_start: the catch-up failed, wait to be admitted again */
#define CATCHUP_AGAIN 1

/* The shard group of an epoch: this rank's shard k of every member. */
static int setup_group(resihp_job_t *j, const char *list) {
  resihp_comm_destroy(j->comm);
  j->comm = NULL;
  j->vgen = 0;
  int cap = 1;
  for (const char *p = list; *p; p++)
    cap += *p == ',';
  char *copy = strdup(list);
  const char **eps = calloc((size_t)cap, sizeof(char *));
  char(*items)[RESIHP__JOB_EP_MAX] = calloc((size_t)cap, RESIHP__JOB_EP_MAX);
  int *members = calloc((size_t)cap, sizeof(int));
  int n = 0, me = -1, rc = 0;
  if (!copy || !eps || !items || !members) {
    rc = RESIHP_ENOMEM;
    goto out;
  }
  char *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t && n < cap;
       t = strtok_r(NULL, ",", &save)) {
    char *at = strchr(t, '@');
    if (!at || resihp__wire_list_item(at + 1, j->lrank, items[n],
                                      RESIHP__JOB_EP_MAX)) {
      rc = RESIHP_EPROTO;
      goto out;
    }
    *at = '\0';
    members[n] = atoi(t);
    if (members[n] == j->replica)
      me = n;
    eps[n] = items[n];
    n++;
  }
  free(j->members);
  j->members = members;
  members = NULL;
  j->nmembers = n;
  if (me < 0) {
    rc = RESIHP_EPROTO;
    goto out;
  }
  rc = resihp__job_comm_create(j, me, n, eps, j->lfd, 10000, &j->comm);
out:
  free(copy);
  free(eps);
  free(items);
  free(members);
  return rc;
}

/* The next control line: the leader reads the coordinator and relays what
 * its ranks act on; the others read the leader. */
static int next_line(resihp_job_t *j) {
  if (j->lrank > 0)
    return resihp__job_recv_up(j);
  int rc = resihp__job_recv(j);
  if (rc || j->lsize == 1)
    return rc;
  if (!strcmp(j->msg, "DONE") || !strncmp(j->msg, "GO ", 3) ||
      !strncmp(j->msg, "START ", 6) || !strncmp(j->msg, "SAVE ", 5))
    return resihp__job_send_down(j, j->msg);
  return 0;
}

/* GO: a new epoch's groups, if any; the leader says how it went. */
static int on_go(resihp_job_t *j) {
  long ep = 0, isnew = 0;
  char *list = malloc(RESIHP__JOB_MSG_MAX);
  if (!list)
    return RESIHP_ENOMEM;
  int rc = 0;
  if (resihp__wire_get_long(j->msg, "epoch", &ep) ||
      resihp__wire_get_long(j->msg, "new", &isnew) ||
      resihp__wire_get(j->msg, "members", list, RESIHP__JOB_MSG_MAX))
    rc = RESIHP_EPROTO;
  if (rc || !isnew) {
    free(list);
    return rc;
  }
  j->epoch = (uint32_t)ep;
  int src = setup_group(j, list);
  free(list);
  if (src)
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d rank %d: group of epoch %ld not set up (%s)",
               j->replica, j->lrank, ep, resihp_strerror(src));
  int64_t failed = src != 0;
  if ((rc = resihp__job_replica_sum(j, &failed, 1)))
    return rc;
  if (j->lrank > 0)
    return 0;
  char line[64];
  snprintf(line, sizeof(line), "%s epoch=%ld", failed ? "RESYNC" : "READY", ep);
  return resihp__job_send(j, line);
}

/* The step is on: fire any fault injected for it, then tell the caller
 * its microbatches. */
static int enter_step(resihp_job_t *j, resihp_job_step_t *st, long s, int cu) {
  resihp__job_maybe_fire(j, s);
  j->in_step = 1;
  j->st = st;
  st->step = s;
  st->catching_up = cu;
  st->nmbs = j->nmbs;
  st->mbs = j->mbs;
  st->epoch = j->epoch;
  st->nreplicas = resihp_comm_size(j->comm);
  if (cu) {
    st->catchup_bytes = j->state_len;
    st->catchup_seconds = (double)j->catchup_ms / 1000.0;
  }
  return 0;
}

/* START with catchup=1: every rank receives its shard; all or none. */
static int catch_up(resihp_job_t *j, long s) {
  if (!j->nstate)
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: catching up but no state was registered "
               "(resihp_job_set_state_list)",
               j->replica);
  int rc = resihp__job_receive_state(j);
  if (rc)
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d rank %d: catch-up at step %ld failed (%s)",
               j->replica, j->lrank, s, resihp_strerror(rc));
  int64_t failed = rc != 0;
  if ((rc = resihp__job_replica_sum(j, &failed, 1)))
    return rc;
  if (!failed)
    return 0;
  /* leave the groups: the survivors shrink without this replica, and the
   * coordinator admits it again with another source */
  if (j->lrank == 0) {
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: catch-up failed; leaving the group to be admitted "
               "again",
               j->replica);
    if ((rc = resihp__job_send(j, "CATCHUP_FAILED")))
      return rc;
  }
  resihp_comm_destroy(j->comm);
  j->comm = NULL;
  j->member = 0;
  return CATCHUP_AGAIN;
}

static int on_start(resihp_job_t *j, resihp_job_step_t *st) {
  long s = -1, cu = 0;
  int rc;
  if (resihp__wire_get_long(j->msg, "step", &s) || s < 0)
    return RESIHP_EPROTO;
  resihp__wire_get_long(j->msg, "catchup", &cu);
  long wl = 0;
  resihp__wire_get_long(j->msg, "wl", &wl);
  j->wl_asked = wl == 1;
  if ((rc = resihp__job_parse_mbs(j, j->msg, "mbs", &j->mbs, &j->nmbs)))
    return rc;
  if (!j->comm)
    return RESIHP_EPROTO; /* a START without a group of ours */
  j->nextra = 0;
  j->step = s;
  j->member = 1;
  if (cu) {
    if ((rc = catch_up(j, s)))
      return rc;
  } else if (!j->valid_state && resihp__job_resuming(j)) {
    /* a resumed run: the state of step s is on disk (job_save.c) */
    if ((rc = resihp__job_resume_load(j, s)))
      return rc;
  } else if (!j->valid_state && s > 0) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: asked to compute step %ld without a state",
               j->replica, s);
    return RESIHP_ESTATE;
  }
  j->valid_state = 1;
  char *serve = malloc(RESIHP__JOB_MSG_MAX);
  if (serve && !resihp__wire_get(j->msg, "serve", serve, RESIHP__JOB_MSG_MAX))
    resihp__job_serve_start(j, serve, s);
  free(serve);
  return enter_step(j, st, s, (int)cu);
}

int resihp_job_begin_step(resihp_job_t *j, resihp_job_step_t *st) {
  if (!j || !st)
    return RESIHP_EINVAL;
  if (j->in_step) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "resihp_job_begin_step: step %ld was not ended", j->step);
    return RESIHP_ESTATE;
  }
  resihp__job_serve_join(j);
  memset(st, 0, sizeof(*st));
  int rc = resihp__job_check_probes(j);
  if (rc)
    return rc;
  resihp__job_send_perf(j);
  if (j->lrank == 0) {
    char line[128];
    snprintf(line, sizeof(line), "BEGIN step=%ld",
             j->member ? j->step + 1 : -1);
    if ((rc = resihp__job_send(j, line)))
      return rc;
  }
  for (;;) {
    if ((rc = next_line(j)))
      return rc;
    if (!strcmp(j->msg, "DONE")) {
      st->done = 1;
      st->step = j->step + 1;
      return 0;
    }
    if (!strncmp(j->msg, "SAVE ", 5)) {
      /* a save at this boundary (job_save.c); then GO or DONE */
      if ((rc = resihp__job_on_save(j)))
        return rc;
      continue;
    }
    if (!strncmp(j->msg, "GO ", 3)) {
      if ((rc = on_go(j)))
        return rc;
      continue;
    }
    if (!strncmp(j->msg, "NO ", 3)) {
      resihp_log(RESIHP_LOG_ERROR, "job", "replica %d rank %d: %s", j->replica,
                 j->lrank, j->msg);
      return RESIHP_ESTATE;
    }
    if (strncmp(j->msg, "START ", 6))
      continue; /* WELCOME and the like */
    rc = on_start(j, st);
    if (rc != CATCHUP_AGAIN)
      return rc;
  }
}
