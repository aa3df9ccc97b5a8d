/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator's saves of the resumable state (see coordinator.h).
 *
 * A save is a barrier-time action: at P_BARRIER, once every member has
 * said BEGIN s and before GO or DONE, resihp__coord_advance asks
 * resihp__coord_save_due whether a save holds the boundary. One member
 * replica is asked (SAVE step=s); its K ranks each write their shard, so
 * one replica's answer covers the whole state. The replicas are asked in
 * the order of their ids, each at most once per save: a replica that
 * answers ok=0 or fails is followed by the next member, and when none is
 * left the save is given up (on_saved ok=0) and the boundary goes on. The
 * state saved at the boundary of step s is the one every member holds
 * there: that of the start of step s, so the ledger resumes at s.
 *
 * Nothing is saved at the first boundary of a run (step 0, or the step a
 * resumed run starts from): the state there is the initial one, or the
 * one the run was resumed from. */
#include "config.h"

#include "../transport/mesh.h"
#include "coord_internal.h"

#include <resihp/error.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Is a save wanted at this boundary? */
static int wanted(const resihp__coord_t *c) {
  if (c->step <= c->base_step || c->abort_replica >= 0)
    return 0;
  if (c->stop)
    return c->o.save_on_stop && c->step < c->S;
  return c->o.save_every > 0 && c->step < c->S &&
         (c->step - c->base_step) % c->o.save_every == 0;
}

long resihp__coord_next_save(const resihp__coord_t *c, long step) {
  long every = c->o.save_every > 0 ? c->o.save_every : 1;
  long next = step + 1, off = (next - c->base_step) % every;
  return off ? next + every - off : next;
}

/* The next member after replica `after` (-1: from the first). */
static int next_member(const resihp__coord_t *c, int after) {
  int best = -1;
  for (int i = 0; i < c->nmembers; i++) {
    int r = c->members[i];
    if (r > after && c->reps[r].conn >= 0 && (best < 0 || r < best))
      best = r;
  }
  return best;
}

int resihp__coord_save_due(resihp__coord_t *c) {
  if (!wanted(c))
    return 0;
  if (c->save_step != c->step) {
    c->save_step = c->step;
    c->save_asked = -1;
    c->save_last = -1;
    c->save_over = 0;
  }
  if (c->save_over)
    return 0;
  if (c->save_asked >= 0 && resihp__coord_is_member(c, c->save_asked))
    return 1; /* its answer is awaited */
  int r = next_member(c, c->save_last);
  if (r < 0) {
    logc(RESIHP_LOG_ERROR,
         "no replica could save the state of step %ld: not saved", c->step);
    c->save_over = 1;
    c->save_asked = -1;
    if (c->o.on_saved)
      c->o.on_saved(c->o.ud, c->step, -1, 0);
    return 0;
  }
  char line[64];
  snprintf(line, sizeof(line), "SAVE step=%ld", c->step);
  c->save_asked = r;
  c->save_last = r;
  logc(RESIHP_LOG_INFO, "step %ld: replica %d saves the state", c->step, r);
  resihp__coord_send_to(c, r, line);
  return 1;
}

void resihp__coord_on_saved(resihp__coord_t *c, int k, int r, const char *msg) {
  long s = -1, ok = -1;
  if (resihp__wire_get_range(msg, "step", 0, LONG_MAX, &s) ||
      resihp__wire_get_range(msg, "ok", 0, 1, &ok)) {
    resihp__coord_refuse(c, k, "bad-saved", 1, msg);
    return;
  }
  if (r != c->save_asked || s != c->save_step || c->save_over ||
      c->phase != P_BARRIER) {
    logc(RESIHP_LOG_DEBUG, "replica %d: stale SAVED step=%ld ignored", r, s);
    return;
  }
  c->save_asked = -1;
  if (ok) {
    c->save_over = 1;
    logc(RESIHP_LOG_INFO, "step %ld: state saved by replica %d", s, r);
    if (c->o.on_saved)
      c->o.on_saved(c->o.ud, s, r, 1);
  } else {
    logc(RESIHP_LOG_WARN,
         "replica %d could not save the state of step %ld; asking another", r,
         s);
  }
  resihp__coord_advance(c);
}

int resihp__coord_saving(const resihp__coord_t *c) {
  return c->phase == P_BARRIER && c->save_step == c->step && !c->save_over &&
         c->save_asked >= 0;
}

void resihp__coord_save_cancel(resihp__coord_t *c) {
  resihp__coord_dirty(c);
  if (c->save_step == c->step && !c->save_over)
    logc(RESIHP_LOG_WARN, "the save of step %ld is given up", c->step);
  c->save_step = c->step;
  c->save_over = 1;
  c->save_asked = -1;
  resihp__coord_advance(c);
}

int resihp__coord_job_shape(const resihp__coord_t *c, int *microbatches,
                            long *steps, int *shards, char shape[20]) {
  if (!c->S)
    return 0;
  *microbatches = c->M;
  *steps = c->S;
  *shards = c->K;
  memcpy(shape, c->shape, sizeof(c->shape));
  return 1;
}

const char *resihp__coord_lost_why(const resihp__coord_t *c) {
  return c->lost_why;
}
