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
#include <time.h>
#include <unistd.h>

/* Up to the coordinator: the leader says it itself, the others through
 * the leader's relay. */
int resihp__job_tell(resihp_job_t *j, const char *line) {
  return j->lrank > 0 ? resihp__job_send_up(j, line)
                      : resihp__job_send(j, line);
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
  resihp__job_tell(j, line);
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
  case RESIHP__INJ_SLOW_RANK:
    break; /* not a failure: resihp__job_slow_microbatch */
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

/* Whether slow-rank item i covers step s. */
static int slow_at(const resihp_job_t *j, int i, long s) {
  const resihp__inject_t *x = &j->inj[i];
  return s >= x->step && (x->steps == 0 || s - x->step < x->steps);
}

/* A slow-rank is no failure: nothing goes to the coordinator, which must
 * find it by itself from the microbatch times. The rank only says in its
 * log when it starts and when it ends being slow (inj_fired 1 then 2); a
 * replacement started after the slow period says nothing. */
static void slow_log(resihp_job_t *j, int i, long step) {
  const resihp__inject_t *x = &j->inj[i];
  int on = slow_at(j, i, step);
  if (j->inj_fired[i] == 0 && on) {
    char until[64] = "for good";
    if (x->steps)
      snprintf(until, sizeof(until), "to step %ld", x->step + x->steps - 1);
    j->inj_fired[i] = 1;
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d rank %d: injected slowdown x%d.%03d from step %ld "
               "%s (node %s)",
               j->replica, j->lrank, x->factor_milli / 1000,
               x->factor_milli % 1000, step, until, j->node);
  } else if (j->inj_fired[i] == 1 && !on) {
    j->inj_fired[i] = 2;
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d rank %d: injected slowdown ends at step %ld "
               "(node %s)",
               j->replica, j->lrank, step, j->node);
  }
}

void resihp__job_maybe_fire(resihp_job_t *j, long step) {
  for (int i = 0; i < j->ninj; i++)
    if (j->inj[i].kind == RESIHP__INJ_SLOW_RANK) {
      if (my_fault(j, i))
        slow_log(j, i, step);
    } else if (!j->inj_fired[i] && my_fault(j, i) && j->inj[i].step == step) {
      j->inj_fired[i] = 1;
      resihp__job_fire(j, j->inj[i].kind, step);
    }
}

/* A fault planned for a group's set-up ("setup"): fired once, as the rank
 * starts setting up the group of a new epoch. */
void resihp__job_setup_fault(resihp_job_t *j) {
  for (int i = 0; i < j->ninj; i++)
    if (!j->inj_fired[i] && my_fault(j, i) &&
        j->inj[i].step == RESIHP__INJECT_SETUP) {
      j->inj_fired[i] = 1;
      resihp__job_fire(j, j->inj[i].kind, j->step);
    }
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

double resihp__job_slow_microbatch(resihp_job_t *j, double seconds) {
  int milli = 0;
  for (int i = 0; i < j->ninj; i++)
    if (j->inj[i].kind == RESIHP__INJ_SLOW_RANK && my_fault(j, i) &&
        slow_at(j, i, j->step) && j->inj[i].factor_milli > milli)
      milli = j->inj[i].factor_milli;
  if (!milli || !(seconds > 0))
    return seconds;
  /* the missing (F - 1) x seconds, slept in slices of at most 0.25 ms as the
   * trainers' simulated compute is, so that an outside stop (SIGSTOP, a
   * debugger) still counts as lost time and not as work done; a sample of
   * a day at most, whatever the caller measured */
  double extra = seconds * (milli - 1000) / 1000.0;
  if (extra > 86400)
    extra = 86400;
  double t0 = mono_s(), done = 0;
  while (done < extra) {
    double left = extra - done, slice = left < 2.5e-4 ? left : 2.5e-4;
    struct timespec ts = {0, (long)(slice * 1e9)};
    double a = mono_s();
    nanosleep(&ts, NULL);
    double dt = mono_s() - a;
    done += dt < 1.5 * slice ? dt : 1.5 * slice;
  }
  return seconds + (mono_s() - t0);
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
    resihp__job_tell(j, line);
    j->watch_probes = 0;
    return RESIHP_EPROBE;
  }
  if (rc < 0)
    j->watch_probes = 0; /* no results file (probes=none) or it is gone */
  return 0;
}
