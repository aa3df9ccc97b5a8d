/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: the primary's lease (control/vouch.h). Once a standby holds
 * this job's records it may take over on the replicas' word, before
 * Slurm's verdict; so the primary decides only while it heard, within the
 * silence bound, from its standby (which does not take over while it
 * follows) or from so many members that the rest can never make a
 * standby's count. Without it, it only listens (a keeper's new primary
 * waits so for its members and its standby); without it for longer than
 * the bound, or told of a newer term by a replica, it steps down for
 * good: it says so, stops its feed and its coordinator, and waits for the
 * job's end without deciding anything (it does not exit: its keeper
 * would end the batch script, and Slurm the job with it). */
#include "config.h"

#include "../../libresihp/control/vouch.h"
#include "run.h"

#include <resihp.h>

#include <unistd.h>

int lease_held(void) {
  if (!g.lease_on || !g.coord) /* no standby ever held a record: none can
                                * take over */
    return 1;
  if (resihp__coord_superseded(g.coord))
    return 0;
  int64_t now = resihp__now_ms();
  int bound = g.co.silence_ms;
  int64_t sb = resihp__feed_heard_ms(g.feed);
  if (sb && now - sb <= bound)
    return 1;
  int members, heard = resihp__coord_heard(g.coord, &members);
  return resihp__vouch_lease(members, heard);
}

int lease_check(resihp__keeper_t *kp) {
  int64_t now = resihp__now_ms();
  if (lease_held()) {
    g.lease_ok_ms = now;
    return 1;
  }
  /* a primary just started (a keeper's failover) has heard nobody yet:
   * it listens (its members and its standby come back), deciding
   * nothing, for a bound; so does one that lost its lease a moment ago */
  if (!g.lease_ok_ms)
    g.lease_ok_ms = g.prim_start_ms ? g.prim_start_ms : now;
  if (resihp__coord_superseded(g.coord) ||
      now - g.lease_ok_ms > g.co.silence_ms)
    step_down(kp); /* does not return */
  return 0;
}

int may_decide(void *ud) {
  (void)ud;
  return lease_held();
}

void step_down(resihp__keeper_t *kp) {
  int members, heard = resihp__coord_heard(g.coord, &members);
  int64_t sb = resihp__feed_heard_ms(g.feed);
  if (resihp__coord_superseded(g.coord))
    say("stepping down at step %ld: a replica obeys a newer term, a "
        "standby took over; this coordinator decides nothing more and "
        "waits for the job's end",
        resihp__coord_step(g.coord));
  else
    say("stepping down at step %ld: for more than %d ms this coordinator "
        "heard neither its standby (%s) nor enough members (%d of %d; a "
        "standby takes over with %d): a standby may have taken over, so "
        "this one decides nothing more and waits for the job's end",
        resihp__coord_step(g.coord), g.co.silence_ms,
        sb ? "silent" : "none connected", heard, members,
        resihp__vouch_need(members));
  resihp__record_event(g.record, "stepdown", resihp__coord_step(g.coord),
                       RESIHP__RECORD_NONE, (long)resihp__coord_epoch(g.coord),
                       "cut off", "neither the standby nor enough members",
                       -1);
  /* the standby, if it still listens, sees the feed end */
  resihp__feed_stop(g.feed);
  g.feed = NULL;
  fflush(stdout);
  while (!got_signal) {
    resihp__keeper_beat(kp);
    usleep(200000);
  }
  _exit(EXIT_LOST);
}
