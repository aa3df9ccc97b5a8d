/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator's membership and epochs: which replicas are in the
 * group, what becomes of one that fails, and the set-up of each epoch (GO
 * to every member, then READY or RESYNC from each, coord_protocol.c).
 *
 * The group is the set of replicas that take part in the current step. It
 * changes only at step boundaries (a replacement is admitted, or a replica
 * that died is left out), and every change is a new epoch in which the
 * members re-create their communicator; within a step a failure is handled
 * by the survivors' own shrink, and the coordinator only learns the agreed
 * view through RECOVER (coord_rounds.c).
 *
 * Failure detection here is coarse (socket EOF, silence for silence_ms, or
 * exclusion by the survivors' view); the survivors' all-reduce detects
 * within its own, tighter bound. A replica declared failed is reported to
 * the launcher, which kills its step before starting a replacement, so a
 * replica is never alive twice. Its failure record (fail_t) opens here;
 * coord_schedule.c dates its replacement's admission and first training
 * step, coord_summary.c reports it.
 */
#include "config.h"

#include "../transport/mesh.h"
#include "coord_internal.h"

#include <resihp/error.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* members is kept sorted (add_member, and a restored list is checked):
 * a binary search, so that the lines of N members cost O(N log N), not
 * O(N^2) (every reconnect and progress report asks). */
int resihp__coord_is_member(const resihp__coord_t *c, int r) {
  int lo = 0, hi = c->nmembers;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (c->members[mid] < r)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < c->nmembers && c->members[lo] == r;
}

void resihp__coord_remove_member(resihp__coord_t *c, int r) {
  int k = 0;
  c->changed |= resihp__coord_is_member(c, r);
  for (int i = 0; i < c->nmembers; i++)
    if (c->members[i] != r)
      c->members[k++] = c->members[i];
  c->nmembers = k;
}

void resihp__coord_add_member(resihp__coord_t *c, int r) {
  int i = c->nmembers++;
  c->changed = 1;
  c->reps[r].list_epoch = 0; /* a new process: no list yet */
  while (i > 0 && c->members[i - 1] > r) {
    c->members[i] = c->members[i - 1];
    i--;
  }
  c->members[i] = r;
}

int resihp__coord_ensure_fails(resihp__coord_t *c, int n) {
  if (n <= c->capfails)
    return 0;
  int cap = c->capfails > 0 ? c->capfails : 16;
  while (cap < n)
    cap = cap > INT_MAX / 2 ? n : 2 * cap;
  fail_t *f = realloc(c->fails, sizeof(*f) * (size_t)cap);
  if (!f)
    return RESIHP_ENOMEM;
  c->fails = f;
  c->capfails = cap;
  return 0;
}

uint64_t resihp__coord_identity(long jobid, long stepid, const char *ep,
                                const char *sep) {
  /* FNV-1a over the fields, each ended by a byte no field holds */
  uint64_t h = 0xcbf29ce484222325ULL;
  char ids[48];
  snprintf(ids, sizeof(ids), "%ld.%ld", jobid, stepid);
  const char *part[3] = {ids, ep ? ep : "", sep ? sep : ""};
  for (int i = 0; i < 3; i++)
    for (const char *q = part[i];; q++) {
      h = (h ^ (unsigned char)*q) * 0x100000001b3ULL;
      if (!*q)
        break;
    }
  return h ? h : 1;
}

/* Replica r leaves: failed, or swapped out (retired). Either way its
 * process is retired: it never takes the replica's place again. */
static void leave(resihp__coord_t *c, int r, const char *why, int swapped);

/* Replica r has failed: leave it out, tell the launcher. */
void resihp__coord_fail_replica(resihp__coord_t *c, int r, const char *why) {
  leave(c, r, why, 0);
}

void resihp__coord_swap_out(resihp__coord_t *c, int r, const char *why) {
  leave(c, r, why, 1);
}

static void leave(resihp__coord_t *c, int r, const char *why, int swapped) {
  rep_t *p = &c->reps[r];
  if (p->state == R_GONE || p->state == R_NONE)
    return;
  if (c->superseded || (c->o.may_decide && !c->o.may_decide(c->o.ud))) {
    /* cut off (a primary stopped, then woken): a standby may coordinate
     * now, and this one decides nothing */
    logc(RESIHP_LOG_WARN,
         "replica %d not failed (%s): this coordinator has lost its lease",
         r, why);
    if (p->conn >= 0)
      resihp__coord_close_conn(c, p->conn);
    return;
  }
  /* The fault it announced may still wait on its connection: a rank's
   * FAULT is relayed by its leader, and someone else (a peer, a joiner
   * whose catch-up source it was) can report the failure first on another
   * connection. Read it before the failure is judged an outside one. */
  if (p->conn >= 0 && !p->fault_kind[0]) {
    resihp__coord_take_faults(c, p->conn);
    if (p->state == R_GONE || p->state == R_NONE)
      return; /* a FAULT kind=probe fails it right away */
  }
  resihp__coord_dirty(c);
  int was_member = resihp__coord_is_member(c, r);
  resihp__coord_remove_member(c, r);
  if (p->ep)
    p->retired = resihp__coord_identity(p->jobid, p->stepid, p->ep, p->sep);
  if (p->conn >= 0) {
    /* a swapped-out process is told, so that it leaves rather than takes
     * the closed link for a coordinator failover and reconnects */
    if (swapped)
      resihp__coord_send_to(c, r, "NO reason=retired");
    resihp__coord_close_conn(c, p->conn);
  }
  p->state = R_GONE;
  p->catching = 0;
  if (swapped)
    logc(RESIHP_LOG_WARN, "replica %d retired at step %ld (%s)", r, c->step,
         why);
  else
    logc(RESIHP_LOG_WARN, "replica %d failed at step %ld (%s)", r, c->step,
         why);
  /* (no room for its record: the run goes on, the summary lacks it) */
  if (c->state == RESIHP__COORD_RUNNING &&
      !resihp__coord_ensure_fails(c, c->nfails + 1)) {
    fail_t *f = &c->fails[c->nfails];
    memset(f, 0, sizeof(*f));
    f->replica = r;
    f->t_detect = resihp__now_ms();
    int announced = p->fault_kind[0] && f->t_detect - p->fault_ms < 120000;
    if (announced)
      memcpy(f->kind, p->fault_kind, sizeof(f->kind));
    else
      strcpy(f->kind, "detected");
    snprintf(f->why, sizeof(f->why), "%s", why);
    /* An outside fault (nobody announced it) happened at an unknown time
     * after the replica's last sign of life: report that, not the
     * detection time. */
    f->outside = !announced;
    f->t_fault = announced          ? p->fault_ms
                 : p->last_life > 0 ? p->last_life
                                    : f->t_detect;
    f->step = announced ? p->fault_step : c->step;
    f->catchup = announced && p->fault_step < 0;
    f->takeover = c->restored_ms && !c->resumed_ms && !announced;
    if (f->step < 0)
      f->step = c->step;
    p->open_fail = c->nfails++;
    /* a swap has its own event (coord_schedule.c): it is no failure */
    if (!swapped)
      resihp__record_event(c->o.record, "failure", f->step, r, c->epoch,
                           f->kind, why, -1);
  }
  p->fault_kind[0] = '\0';
  if (swapped && c->o.on_swapped && c->phase != P_END)
    c->o.on_swapped(c->o.ud, r, p->node, p->jobid, p->stepid, why);
  else if (c->o.on_failed && c->phase != P_END)
    c->o.on_failed(c->o.ud, r, p->node, p->jobid, p->stepid, why);
  if (was_member && c->phase == P_SETUP)
    resihp__coord_send_go(c); /* a new epoch without it */
  if (was_member)
    resihp__coord_hold(c, "a member failed"); /* free run: a new epoch */
}

void resihp__coord_mark_failed(resihp__coord_t *c, int r, const char *why) {
  if (r < 0 || r >= c->R)
    return;
  rep_t *p = &c->reps[r];
  resihp__coord_dirty(c);
  p->expected = 0; /* no replacement is coming */
  if (p->state == R_NONE) {
    p->state = R_GONE;
    logc(RESIHP_LOG_WARN, "replica %d given up (%s)", r, why);
  } else {
    resihp__coord_fail_replica(c, r, why);
  }
  resihp__coord_advance(c);
}

void resihp__coord_set_loss(resihp__coord_t *c, int64_t lo_ms, int64_t hi_ms) {
  if (lo_ms > 0 && hi_ms >= lo_ms) {
    c->loss_lo_ms = lo_ms;
    c->loss_hi_ms = hi_ms;
  }
}

void resihp__coord_fault_landed(resihp__coord_t *c, int r) {
  if (r < 0 || r >= c->R)
    return;
  rep_t *p = &c->reps[r];
  int64_t now = resihp__now_ms();
  resihp__coord_dirty(c);
  if (p->fault_kind[0]) { /* announced, not failed yet */
    p->fault_ms = now;
    return;
  }
  if (p->open_fail < 0 || p->open_fail >= c->nfails)
    return;
  fail_t *f = &c->fails[p->open_fail];
  if (!f->outside && f->t_fault < f->t_detect)
    f->t_fault = now < f->t_detect ? now : f->t_detect;
}

void resihp__coord_fail_lost(resihp__coord_t *c, int r, const char *why) {
  if (r < 0 || r >= c->R ||
      (c->reps[r].state != R_MEMBER && c->reps[r].state != R_JOINING))
    return;
  resihp__coord_fail_replica(c, r, why);
  resihp__coord_advance(c);
}

static void member_list(resihp__coord_t *c, resihp__wire_buf_t *b) {
  for (int i = 0; i < c->nmembers; i++)
    resihp__wire_buf_printf(b, "%s%d@%s", i ? "," : "", c->members[i],
                            c->reps[c->members[i]].ep);
}

/* Whether replica r's process holds the list of epoch base (then GO sends
 * it the change only). */
static int holds_list(const resihp__coord_t *c, int r, uint32_t base) {
  return base != 0 && c->reps[r].list_epoch == base;
}

/* GO's change since the list of epoch base: "base=B n=N gone=r:r
 * add=r@eps,..." (gone: left, or a new process under the same id; add: the
 * members the base list does not hold, in id order). */
static void member_delta(resihp__coord_t *c, uint32_t base,
                         resihp__wire_buf_t *b) {
  resihp__wire_buf_printf(b, " base=%u n=%d gone=", base, c->nmembers);
  int first = 1;
  for (int i = 0; i < c->nlast; i++) {
    int r = c->last_list[i];
    if (!resihp__coord_is_member(c, r) || !holds_list(c, r, base)) {
      resihp__wire_buf_printf(b, "%s%d", first ? "" : ":", c->last_list[i]);
      first = 0;
    }
  }
  resihp__wire_buf_printf(b, " add=");
  first = 1;
  for (int i = 0; i < c->nmembers; i++) {
    int r = c->members[i];
    if (!holds_list(c, r, base)) {
      resihp__wire_buf_printf(b, "%s%d@%s", first ? "" : ",", r, c->reps[r].ep);
      first = 0;
    }
  }
}

/* Start of a step's set-up: GO to every member, a new epoch if the member
 * list differs from the last one started, or if a member could not set
 * the last one up (RESYNC: everyone makes its group again). The list
 * travels whole only to members that hold no list of the last epoch (a
 * joiner, a replacement, a member that failed to set up); the others get
 * its change (member_delta), so an epoch costs O(N + N x changes) bytes,
 * not O(N^2). A step boundary without change sends no list. */
void resihp__coord_send_go(resihp__coord_t *c) {
  if (c->nmembers == 0) {
    c->phase = P_BARRIER;
    return;
  }
  if (c->phase == P_BARRIER) {
    resihp__coord_shrink_boundary(c); /* (coord_shrink.c) */
    resihp__coord_repart_boundary(c); /* may renew the epoch */
  }
  int same = c->nmembers == c->nlast && !c->changed;
  c->changed = 0;
  for (int i = 0; same && i < c->nmembers; i++)
    same = c->members[i] == c->last_list[i];
  int renew = !same || c->phase == P_SETUP;
  if (renew)
    c->epoch++;
  c->phase = P_SETUP;
  uint32_t base = c->go_epoch;
  int nwhole = 0;
  /* while the members' partitions differ, each rank keeps the other
   * ranks' columns of the member list, which a change of the list alone
   * does not carry (recovery/job_step.c): the first epoch in which they
   * differ (a move, a shrink, a joiner of a partition nobody holds) sends
   * every member the whole list (a standby, which does not know the
   * last one's, does so once too) */
  int differ = 0;
  for (int i = 1; renew && i < c->nmembers && !differ; i++)
    differ = c->reps[c->members[i]].lpart != c->reps[c->members[0]].lpart;
  int all = renew && differ && !c->go_differ;
  if (renew)
    c->go_differ = differ;
  for (int i = 0; renew && i < c->nmembers; i++)
    nwhole += all || !holds_list(c, c->members[i], base);
  /* whole: the line for members without the base list (and the only
   * line when nothing changed); delta: for the others */
  resihp__wire_buf_t whole, delta;
  resihp__wire_buf_init(&whole);
  resihp__wire_buf_init(&delta);
  if (nwhole || !renew) {
    resihp__wire_buf_printf(&whole, "GO step=%ld epoch=%u new=%d", c->step,
                            c->epoch, renew);
    if (renew) {
      resihp__wire_buf_printf(&whole, " members=");
      member_list(c, &whole);
      resihp__coord_put_lparts(c, &whole);
    }
  }
  if (renew && nwhole < c->nmembers) {
    resihp__wire_buf_printf(&delta, "GO step=%ld epoch=%u new=1", c->step,
                            c->epoch);
    member_delta(c, base, &delta);
    resihp__coord_put_lparts(c, &delta);
  }
  /* which line each member gets, then the new state (mirrored before the
   * first GO goes out), then the lines */
  char *delta_for = malloc((size_t)(unsigned)c->nmembers);
  for (int i = 0; delta_for && i < c->nmembers; i++)
    delta_for[i] = renew && !all && holds_list(c, c->members[i], base);
  resihp__coord_pace_reset(c); /* what a last boundary still owed is moot */
  for (int i = 0; i < c->nmembers; i++) {
    rep_t *p = &c->reps[c->members[i]];
    p->ready = !renew;
    /* a member holds this epoch's list once its GO is sent
     * (coord_pace.c); until then none */
    if (renew)
      p->list_epoch = 0;
    resihp__coord_owe(c, c->members[i],
                      renew && !(delta_for && delta_for[i]) ? OWE_GO_WHOLE
                                                            : OWE_GO_LINE);
  }
  if (renew)
    c->go_epoch = c->epoch;
  memcpy(c->last_list, c->members, sizeof(int) * (size_t)c->nmembers);
  c->nlast = c->nmembers;
  c->cplan_text_ok = 0; /* "cby=list" names this list */
  resihp__coord_dirty(c);
  /* each line is hashed once for all its recipients (wire.h) */
  uint8_t dwhole[RESIHP__SHA256_LEN], ddelta[RESIHP__SHA256_LEN];
  if (whole.s && !whole.err)
    resihp__wire_line_digest(whole.s, whole.len, dwhole);
  if (delta.s && !delta.err)
    resihp__wire_line_digest(delta.s, delta.len, ddelta);
  free(delta_for);
  /* the lines leave paced (coord_pace.c), the state mirrored first */
  resihp__coord_mirror_if(c);
  c->go_renew = renew;
  resihp__wire_buf_free(&c->go_whole);
  resihp__wire_buf_free(&c->go_line);
  c->go_whole = renew ? whole : delta;
  c->go_line = renew ? delta : whole;
  memcpy(c->go_whole_digest, renew ? dwhole : ddelta, sizeof(dwhole));
  memcpy(c->go_line_digest, renew ? ddelta : dwhole, sizeof(dwhole));
  resihp__wire_buf_init(&whole);
  resihp__wire_buf_init(&delta);
  resihp__coord_pump(c);
  if (renew)
    logc(RESIHP_LOG_INFO,
         "step %ld: epoch %u with %d replicas (%d sent the whole list, %d "
         "its change)",
         c->step, c->epoch, c->nmembers, nwhole, c->nmembers - nwhole);
  resihp__wire_buf_free(&whole);
  resihp__wire_buf_free(&delta);
}

/* GO of the epoch being set up again, to a member that says BEGIN once
 * more (it missed it: a failover, coord_snapshot.c). Its process holds
 * the list it had before that GO, which is no longer known here: the
 * whole list is right whatever it holds. */
void resihp__coord_send_go_whole(resihp__coord_t *c, int r) {
  c->reps[r].owed &= ~(OWE_GO_WHOLE | OWE_GO_LINE); /* this is it */
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  resihp__wire_buf_printf(&b, "GO step=%ld epoch=%u new=1 members=", c->step,
                          c->epoch);
  member_list(c, &b);
  resihp__coord_put_lparts(c, &b);
  resihp__coord_send_buf_to(c, r, &b);
  resihp__wire_buf_free(&b);
}
