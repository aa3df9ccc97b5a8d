/* SPDX-License-Identifier: BSD-3-Clause */
/* Faults a rank executes itself: the injections planned for its replica
 * (RESIHP_INJECT, see inject.h and resihp-run(1)) and the verdicts of the
 * plugin's periodic probes on its node (see job_internal.h). */
#include "config.h"

#include "job_internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Up to the coordinator: the leader says it itself, the others through
 * the leader's relay. */
static void tell(resihp_job_t *j, const char *line) {
  if (j->lrank > 0)
    resihp__job_send_up(j, line);
  else
    resihp__job_send(j, line);
}

/* Announce an injected fault to the coordinator, then commit it. */
void resihp__job_fire(resihp_job_t *j, resihp__inj_kind_t kind, long step) {
  char line[256];
  snprintf(line, sizeof(line), "FAULT kind=%s step=%ld node=%s",
           resihp__inject_kind_name(kind), step, j->node);
  resihp_log(RESIHP_LOG_WARN, "job",
             "replica %d rank %d: injected fault %s at step %ld (node %s)",
             j->replica, j->lrank, resihp__inject_kind_name(kind), step,
             j->node);
  tell(j, line);
  switch (kind) {
  case RESIHP__INJ_KILL_RANK:
    raise(SIGKILL);
    break;
  case RESIHP__INJ_HANG_RANK:
    raise(SIGSTOP);
    break;
  case RESIHP__INJ_KILL_NODE:
    /* resihp-run kills the node (and us with it); if nobody does within
     * 10 s, the rank dies alone, which is still a failure to recover. */
    for (int i = 0; i < 100; i++)
      usleep(100000);
    raise(SIGKILL);
    break;
  }
}

/* The rank a fault hits: the one named (REPLICA.RANK), else a node kill
 * the leader's node, a rank kill or hang the replica's last rank. */
static int my_fault(const resihp_job_t *j, int i) {
  int who = j->inj[i].rank >= 0                       ? j->inj[i].rank
            : j->inj[i].kind == RESIHP__INJ_KILL_NODE ? 0
                                                      : j->lsize - 1;
  return j->inj[i].replica == j->replica && j->lrank == who;
}

void resihp__job_maybe_fire(resihp_job_t *j, long step) {
  for (int i = 0; i < j->ninj; i++)
    if (!j->inj_fired[i] && my_fault(j, i) && j->inj[i].step == step) {
      j->inj_fired[i] = 1;
      resihp__job_fire(j, j->inj[i].kind, step);
    }
}

/* A fault planned for a catch-up hits the named rank, else rank 0. */
int resihp__job_catchup_fault(resihp_job_t *j) {
  for (int i = 0; i < j->ninj; i++)
    if (!j->inj_fired[i] && j->inj[i].replica == j->replica &&
        j->lrank == (j->inj[i].rank >= 0 ? j->inj[i].rank : 0) &&
        j->inj[i].step == RESIHP__INJECT_CATCHUP)
      return i;
  return -1;
}

/* A periodic probe failed on this rank's node: the node is not fit to
 * train on, even though the rank still runs. Tell the coordinator (through
 * the leader for the other ranks of a replica), which fails the replica and
 * has it relaunched on a healthy spare, and leave. Checked at step
 * boundaries only, where leaving costs no half-done work: the steps the
 * replica finished are already in every survivor's sum. An unchanged file
 * costs one stat(2). */
int resihp__job_check_probes(resihp_job_t *j) {
  if (!j->watch_probes)
    return 0;
  resihp__probe_block_t b;
  int rc;
  while ((rc = resihp__probe_watch_next(&j->probes, &b)) == 1) {
    if (strcmp(b.kind, "periodic") || b.healthy != 0)
      continue;
    char line[640];
    snprintf(line, sizeof(line),
             "FAULT kind=probe step=%ld node=%s summary=%.400s", j->step + 1,
             j->node, b.summary[0] ? b.summary : b.failed);
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d: node %s failed its periodic health probe (%s): "
               "leaving so that the replica is relaunched on a healthy node",
               j->replica, j->node, b.summary[0] ? b.summary : b.failed);
    tell(j, line);
    j->watch_probes = 0;
    return RESIHP_EPROBE;
  }
  if (rc < 0)
    j->watch_probes = 0; /* no results file (probes=none) or it is gone */
  return 0;
}
