/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator's step schedule and microbatch ledger: the state machine
 * (resihp__coord_advance) that takes each step from its barrier (every
 * member said BEGIN; replicas waiting to join are admitted) through its
 * set-up (coord_members.c) to START, then to its commit, and DONE instead
 * of GO at the end.
 *
 * Ledger. owner[mb] says which replica computes microbatch mb of the
 * current step. At START the M microbatches are cut into contiguous blocks
 * over the contributing members (replicas catching up contribute nothing),
 * and each replica catching up is given one of the contributors as its
 * source (serve=). A RECOVER may move microbatches within the step
 * (coord_rounds.c); the step commits once every member has begun the next
 * one, and the ledger file, if any, gets its owners.
 *
 * Free-running. When nothing is pending that needs a boundary (nobody
 * joins or catches up, no stop, not the last step, and an
 * assignment the members can make themselves: the same from step to step,
 * or by predicted cost when this step's was, see below), START says run=1:
 * the members go on step after step and say nothing (see
 * recovery/job_step.c), and the phase is P_FREE. The coordinator's step
 * then lags theirs; what a member says tells it how far they are, and each
 * step before that is committed with the run's owners, in order
 * (resihp__coord_free_to): PROG step=t (about once a second), PERF of a
 * step, FAULT, RECOVER step=t (the step is then recovered as usual, in
 * P_RUN) and BEGIN step=t, which ends the run. When the coordinator needs
 * a boundary (a joiner, an expected replacement, a stop, a member's death,
 * a member whose speed moved away from the one the run's assignment used,
 * a slow member worth a spare) it says HOLD once to every member
 * (resihp__coord_hold): the members agree to say BEGIN at the end of the
 * step in which one of them heard it. A slow member does not hold a run by
 * itself: the run's assignment already gives it fewer microbatches (its
 * multiplier is in the plan, or in its count), so a job in which some
 * replica is always slow still runs free; only a change does
 * (resihp__coord_slow_moved, with hysteresis).
 *
 * Free-running by cost. The START of such a run carries its plan
 * (costplan.c: the contributors, their multipliers, each shard's model),
 * and every rank assigns each following step from its data loader's
 * workloads exactly as resihp__coord_assign would. The coordinator, which
 * does not see those workloads, learns the owners from the members: the
 * first member's leader sends those of the steps since its last PROG with
 * PROG, and every leader sends those of all the run's steps with the BEGIN
 * that ends it and with a RECOVER (which needs the step's own): ofrom=a
 * own=o:o:..., M per step, at most resihp__costplan_rows(M) steps (a run
 * ends at a boundary before its log is longer). They are checked (every
 * owner a contributor of the run, M per step, the same as any reported
 * before for the step: the replicas must never disagree) and kept in fown
 * (mirrored) until their steps are committed and in the ledger; a step is
 * committed only once its owners are known, so a BEGIN that does not
 * bring them is refused. A PROG lost with a coordinator leaves a gap that
 * the next report or the run's end fills (a reconnecting leader sends
 * everything again).
 */
#include "config.h"

#include "../transport/mesh.h"
#include "coord_internal.h"

#include <resihp/error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int contributors(resihp__coord_t *c, int *out) {
  int n = 0;
  for (int i = 0; i < c->nmembers; i++)
    if (!c->reps[c->members[i]].catching)
      out[n++] = c->members[i];
  return n;
}

void resihp__coord_lose(resihp__coord_t *c, const char *why) {
  logc(RESIHP_LOG_ERROR,
       "training cannot go on at step %ld: %s; the job's state is lost "
       "(add spares or replicas)",
       c->step, why);
  snprintf(c->lost_why, sizeof(c->lost_why), "at step %ld: %s", c->step, why);
  c->state = RESIHP__COORD_LOST;
  resihp__coord_dirty(c);
  c->t_done = resihp__now_ms();
  resihp__record_event(c->o.record, "lost", c->step, RESIHP__RECORD_NONE,
                       c->epoch, NULL, why, -1);
  for (int r = 0; r < c->R; r++)
    if (c->reps[r].conn >= 0)
      resihp__coord_send_to(c, r, "NO reason=job-lost");
}

/* start_ms grows with the steps done, never with what a HELLO claims. */
int resihp__coord_ensure_steps(resihp__coord_t *c, long n) {
  if (n <= c->capsteps)
    return 0;
  long cap = c->capsteps ? c->capsteps : 64;
  while (cap < n)
    cap *= 2;
  int64_t *x = realloc(c->start_ms, sizeof(int64_t) * (size_t)cap);
  if (!x)
    return RESIHP_ENOMEM;
  memset(x + c->capsteps, 0, sizeof(int64_t) * (size_t)(cap - c->capsteps));
  c->start_ms = x;
  c->capsteps = cap;
  return 0;
}

/* Whether the members may run free from this step: see above. */
static int may_run_free(const resihp__coord_t *c, int nc) {
  if (c->o.lockstep || c->stop || c->step + 1 >= c->S || nc != c->nmembers ||
      (c->wl_asked >= 0 && !c->cplan_have))
    return 0;
  for (int r = 0; r < c->R; r++) {
    const rep_t *p = &c->reps[r];
    if (p->expected || p->state == R_JOINING || p->catchup_failed)
      return 0;
  }
  return 1;
}

int resihp__coord_hold_needed(const resihp__coord_t *c) {
  if (c->stop)
    return 1;
  for (int r = 0; r < c->R; r++) {
    const rep_t *p = &c->reps[r];
    if (p->expected || (p->state == R_JOINING && p->waiting) ||
        (p->state == R_MEMBER && resihp__coord_slow_moved(p)))
      return 1;
  }
  return 0;
}

void resihp__coord_hold(resihp__coord_t *c, const char *why) {
  if (c->phase != P_FREE || c->held)
    return;
  c->held = 1;
  logc(RESIHP_LOG_DEBUG,
       "free run held after step %ld (%s): HOLD to %d "
       "replicas",
       c->step, why, c->nmembers);
  for (int i = 0; i < c->nmembers; i++)
    resihp__coord_send_to(c, c->members[i], "HOLD");
}

/* Member r's START of the step started last (what start_step sent it; the
 * same line again for a member that asks again, see coord_snapshot.c). */
static void build_start(resihp__coord_t *c, int r, resihp__wire_buf_t *b) {
  const rep_t *p = &c->reps[r];
  resihp__wire_buf_printf(b, "START step=%ld epoch=%u mbs=", c->start_at,
                          c->epoch);
  for (int i = c->start_off[r]; i < c->start_off[r + 1] && !b->err; i++)
    resihp__wire_buf_printf(b, "%s%d", i > c->start_off[r] ? ":" : "",
                            c->start_mbs[i]);
  if (r == c->wl_asked)
    resihp__wire_buf_printf(b, " wl=1");
  if (c->start_run)
    resihp__wire_buf_printf(b, " run=1");
  if (resihp__coord_cost_run(c)) {
    if (!c->cplan_text_ok) {
      resihp__wire_buf_free(&c->cplan_text);
      resihp__wire_buf_init(&c->cplan_text);
      resihp__costplan_put(&c->cplan_text, &c->cplan, c->last_list, c->nlast);
      c->cplan_text_ok = !c->cplan_text.err;
    }
    if (c->cplan_text.err)
      b->err = c->cplan_text.err;
    else
      resihp__wire_buf_printf(b, "%s", c->cplan_text.s);
  }
  if (c->start_run && c->o.save_every > 0)
    resihp__wire_buf_printf(b, " until=%ld",
                            resihp__coord_next_save(c, c->start_at));
  if (p->catching) {
    resihp__wire_buf_printf(b, " catchup=1");
    return;
  }
  /* the joiners' shards are spread over the contributors: shard k of the
   * ji-th joiner comes from contributor ji + k (of those holding its
   * partition of the layers), so that the K transfers of one joiner run
   * from different replicas (the joiners in id order: the members of the
   * step that catch up) */
  int sfirst = 1;
  for (int ji = 0; ji < c->nstart_joiners && c->start_src; ji++) {
    int q = c->start_joiners[ji];
    const rep_t *j = &c->reps[q];
    for (int sh = 0; sh < c->K; sh++) {
      char ep[RESIHP__COORD_EP_MAX];
      if (c->start_src[(size_t)ji * (size_t)c->K + (size_t)sh] != r ||
          resihp__wire_list_item(j->sep, sh, ep, sizeof(ep)))
        continue;
      if (c->start_lay && c->start_lay[ji]) { /* by layer (coord_layers.c) */
        resihp__coord_put_layer_serve(c, ji, sh, ep, &sfirst, b);
        continue;
      }
      resihp__wire_buf_printf(b, "%s%d.%d@%s", sfirst ? " serve=" : ",", q, sh,
                              ep);
      sfirst = 0;
    }
  }
}

int resihp__coord_index_start(resihp__coord_t *c) {
  if (!c->start_mbs)
    c->start_mbs = malloc(sizeof(int) * (size_t)(c->M ? c->M : 1));
  if (!c->start_off)
    c->start_off = malloc(sizeof(int) * (size_t)(c->R + 1));
  if (!c->start_joiners)
    c->start_joiners = malloc(sizeof(int) * (size_t)c->R);
  if (!c->start_mbs || !c->start_off || !c->start_joiners)
    return RESIHP_ENOMEM;
  /* a counting sort of the microbatches by owner, in microbatch order */
  memset(c->start_off, 0, sizeof(int) * (size_t)(c->R + 1));
  for (int mb = 0; mb < c->M; mb++)
    c->start_off[c->start_owner[mb] + 1]++;
  for (int r = 0; r < c->R; r++)
    c->start_off[r + 1] += c->start_off[r];
  for (int mb = 0; mb < c->M; mb++) /* start_off[r] ends at r + 1's start */
    c->start_mbs[c->start_off[c->start_owner[mb]]++] = mb;
  for (int r = c->R; r > 0; r--)
    c->start_off[r] = c->start_off[r - 1];
  c->start_off[0] = 0;
  c->nstart_joiners = 0;
  for (int q = 0; q < c->R; q++)
    if (c->in_step[q] && c->reps[q].catching && c->reps[q].sep)
      c->start_joiners[c->nstart_joiners++] = q;
  return resihp__coord_serve_sources(c);
}

void resihp__coord_send_start(resihp__coord_t *c, int r) {
  if (!c->start_owner || r < 0 || r >= c->R)
    return;
  c->reps[r].owed &= ~OWE_START; /* (if it was owed: this is it) */
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  build_start(c, r, &b);
  resihp__coord_send_buf_to(c, r, &b);
  resihp__wire_buf_free(&b);
}

static void start_step(resihp__coord_t *c) {
  int *contrib = c->scratch;
  int nc = contributors(c, contrib);
  if (nc == 0) {
    resihp__coord_lose(c, "no member holds a valid state");
    return;
  }
  if (resihp__coord_ensure_steps(c, c->step + 2)) {
    resihp__coord_lose(c, "out of memory");
    return;
  }
  if (!c->start_owner)
    c->start_owner = malloc(sizeof(int) * (size_t)c->M);
  if (!c->start_contrib)
    c->start_contrib = malloc(sizeof(int) * (size_t)c->R);
  if (!c->start_owner || !c->start_contrib ||
      resihp__coord_assign(c, contrib, nc)) {
    resihp__coord_lose(c, "out of memory");
    return;
  }
  resihp__coord_free_rounds(c);
  c->fown_n = 0;
  memset(c->in_step, 0, (size_t)c->R);
  for (int i = 0; i < c->nmembers; i++) {
    rep_t *p = &c->reps[c->members[i]];
    c->in_step[c->members[i]] = 1;
    p->run_slow = p->slow; /* what the assignment just used */
    p->reports = 0;
    p->resyncs = 0;
    p->quota = 0;
  }
  for (int mb = 0; mb < c->M; mb++)
    c->reps[c->owner[mb]].quota++;
  int64_t now = resihp__now_ms();
  if (c->step > c->base_step && c->start_ms[c->step - 1] > 0 &&
      now > c->start_ms[c->step - 1])
    c->step_ms = now - c->start_ms[c->step - 1];
  c->start_ms[c->step] = now;
  if (c->restored_ms && !c->resumed_ms)
    c->resumed_ms = now; /* the survivors train again */
  /* the whole state of the step first (it is mirrored before the first
   * START goes out), then the STARTs */
  int run = may_run_free(c, nc);
  memcpy(c->start_owner, c->owner, sizeof(int) * (size_t)c->M);
  memcpy(c->start_contrib, contrib, sizeof(int) * (size_t)nc);
  c->nstart_contrib = nc;
  if (resihp__coord_index_start(c)) {
    resihp__coord_lose(c, "out of memory");
    return;
  }
  c->start_at = c->step;
  c->starts++;
  c->start_run = run;
  c->phase = run ? P_FREE : P_RUN;
  c->held = 0;
  for (int i = 0; i < c->nmembers; i++) {
    int r = c->members[i];
    rep_t *p = &c->reps[r];
    if (p->catching || p->open_fail < 0 || p->quota == 0)
      continue;
    fail_t *f = &c->fails[p->open_fail];
    if (!f->t_train) {
      f->t_train = now;
      resihp__record_event(c->o.record, "recovered", c->step, r, c->epoch,
                           f->kind, NULL, (double)(now - f->t_fault) / 1000.0);
    }
    p->open_fail = -1;
  }
  resihp__coord_dirty(c);
  /* mirrored, then owed: they leave paced (coord_pace.c), after the GO
   * each member may still be owed */
  resihp__coord_mirror_if(c);
  for (int i = 0; i < c->nmembers; i++)
    resihp__coord_owe(c, c->members[i], OWE_START);
  resihp__coord_pump(c);
  if (run)
    logc(RESIHP_LOG_DEBUG, "step %ld: %d replicas run free", c->step,
         c->nmembers);
}

/* Step c->step is committed (its ledger line: resihp__coord_write_ledger,
 * after the mirror). */
static void commit_step(resihp__coord_t *c) {
  logc(RESIHP_LOG_DEBUG, "step %ld committed by %d replicas", c->step,
       c->nmembers);
  for (int i = 0; i < c->nmembers; i++)
    c->reps[c->members[i]].catching = 0;
  resihp__coord_perf_commit(c);
  c->step++;
  c->phase = P_BARRIER;
  resihp__coord_dirty(c);
  if (resihp__coord_ensure_steps(c, c->step + 1))
    resihp__coord_lose(c, "out of memory");
}

/* The owners of step s: as a free run by cost reported them, else the
 * step's (c->owner). */
static const int *owners_of(const resihp__coord_t *c, long s) {
  if (c->fown_n > 0 && s >= c->fown_at && s < c->fown_at + c->fown_n)
    return &c->fown[(size_t)(s - c->fown_at) * (size_t)c->M];
  return c->owner;
}

/* Write-ahead: the state that says these steps are committed is mirrored
 * before their lines are written, so that a coordinator restored from it
 * writes the lines the file lacks (coord_snapshot.c), and none twice. The
 * owners are the current ones (a commit writes its lines before the next
 * START changes them), or those a free run by cost reported, which stay
 * in the state until their lines are written. */
void resihp__coord_write_ledger(resihp__coord_t *c, long from, long to) {
  if (!c->o.ledger || from >= to)
    return;
  resihp__coord_mirror_if(c);
  for (long s = from; s < to; s++) {
    const int *own = owners_of(c, s);
    fprintf(c->o.ledger, "%ld", s);
    for (int mb = 0; mb < c->M; mb++)
      fprintf(c->o.ledger, " %d", own[mb]);
    fputc('\n', c->o.ledger);
  }
  fflush(c->o.ledger);
}

int resihp__coord_cost_run(const resihp__coord_t *c) {
  return c->start_run && c->cplan_have && c->cplan.nc > 0;
}

/* Reported owners of committed steps are dropped once in the ledger. */
static void drop_owners_before(resihp__coord_t *c, long s) {
  if (c->fown_n <= 0 || s <= c->fown_at)
    return;
  long k = s - c->fown_at;
  if (k >= c->fown_n) {
    c->fown_n = 0;
    return;
  }
  memmove(c->fown, c->fown + (size_t)k * (size_t)c->M,
          sizeof(int) * (size_t)c->M * (size_t)(c->fown_n - k));
  c->fown_n -= (int)k;
  c->fown_at = s;
}

/* The first step of the run whose owners are unknown: the run's first
 * step is START's, the next ones as reported. */
static long owners_known_to(const resihp__coord_t *c) {
  long next = c->step > c->start_at ? c->step : c->start_at + 1;
  if (c->fown_n > 0 && c->fown_at <= next)
    return c->fown_at + c->fown_n;
  return next;
}

int resihp__coord_take_owners(resihp__coord_t *c, const char *msg) {
  long a;
  if (c->phase != P_FREE || !resihp__coord_cost_run(c))
    return 0;
  int rc = resihp__wire_get_range(msg, "ofrom", c->start_at + 1,
                                  c->start_at + c->fown_cap, &a);
  if (rc == RESIHP_ENOENT)
    return 0;
  int *v = NULL, n = 0, M = c->M;
  char *ok = NULL;
  if (rc || resihp__coord_room(&c->val, &c->valcap, strlen(msg) + 1) ||
      resihp__wire_get(msg, "own", c->val, c->valcap) ||
      resihp__wire_parse_ints(c->val, c->R, &v, &n) || n % M ||
      a - c->start_at - 1 + n / M > c->fown_cap ||
      !(ok = calloc((size_t)c->R, 1))) {
    rc = RESIHP_EPROTO;
    goto out;
  }
  for (int i = 0; i < c->cplan.nc; i++)
    ok[c->cplan.contrib[i]] = 1;
  for (int i = 0; i < n; i++)
    if (!ok[v[i]]) {
      rc = RESIHP_EPROTO; /* not a contributor of the run */
      goto out;
    }
  long next = owners_known_to(c);
  if (c->fown_n == 0)
    c->fown_at = next;
  for (int i = 0; i < n / M; i++) {
    long s = a + i;
    const int *row = v + (size_t)i * (size_t)M;
    if (s < c->fown_at)
      continue; /* committed */
    if (s < c->fown_at + c->fown_n) {
      if (memcmp(row, owners_of(c, s), sizeof(int) * (size_t)M)) {
        logc(RESIHP_LOG_ERROR,
             "the replicas disagree on the owners of step %ld of a free run "
             "by cost",
             s);
        rc = RESIHP_EPROTO;
        goto out;
      }
      continue;
    }
    if (s != c->fown_at + c->fown_n || c->fown_n >= c->fown_cap)
      break; /* a gap: what comes later says it again */
    memcpy(c->fown + (size_t)c->fown_n * (size_t)M, row,
           sizeof(int) * (size_t)M);
    c->fown_n++;
  }
  rc = 0;
out:
  free(v);
  free(ok);
  return rc;
}

int resihp__coord_cost_owners_of(resihp__coord_t *c, long s) {
  if (!resihp__coord_cost_run(c) || s == c->start_at) {
    c->fown_n = 0;
    return 0;
  }
  if (!(c->fown_n > 0 && s >= c->fown_at && s < c->fown_at + c->fown_n))
    return RESIHP_EPROTO;
  memcpy(c->owner, owners_of(c, s), sizeof(int) * (size_t)c->M);
  c->fown_n = 0;
  for (int i = 0; i < c->nmembers; i++)
    c->reps[c->members[i]].quota = 0;
  for (int mb = 0; mb < c->M; mb++)
    c->reps[c->owner[mb]].quota++;
  return 0;
}

void resihp__coord_free_to(resihp__coord_t *c, long t) {
  if (c->phase != P_FREE || c->state != RESIHP__COORD_RUNNING)
    return;
  if (t > c->S)
    t = c->S;
  int cost = resihp__coord_cost_run(c);
  if (cost && t > owners_known_to(c))
    t = owners_known_to(c); /* the rest when their owners come */
  long from = c->step;
  if (t <= from || resihp__coord_ensure_steps(c, t + 1))
    return;
  /* the steps in between started at times unknown: evenly spread */
  int64_t t0 = c->start_ms[from], now = resihp__now_ms();
  if (c->restored_ms && !c->resumed_ms)
    c->resumed_ms = now; /* they trained again by now at the latest */
  if (t0 > 0 && now > t0)
    c->step_ms = (now - t0) / (t - from);
  while (c->step < t && c->state == RESIHP__COORD_RUNNING) {
    c->costed += cost && c->step > c->start_at;
    commit_step(c);
    c->phase = P_FREE;
    c->start_ms[c->step] = t0 + (now - t0) * (c->step - from) / (t - from);
  }
  resihp__coord_write_ledger(c, from, c->step);
  drop_owners_before(c, c->step);
  resihp__coord_decide_commit(c);
  resihp__coord_hold_for_swap(c);
}

/* Every member has committed the last step: DONE instead of GO, to the
 * joiners too (the trainers then FINISH with their result). Used at the
 * last step and when the launcher asks to stop (resihp__coord_stop). */
static void end_training(resihp__coord_t *c) {
  c->phase = P_END;
  resihp__coord_dirty(c);
  c->t_done = resihp__now_ms();
  resihp__record_event(c->o.record,
                       c->abort_replica >= 0 ? "abort"
                       : c->stop             ? "stop"
                                             : "done",
                       c->step, c->abort_replica, c->epoch, NULL,
                       c->abort_replica >= 0 ? c->abort_why : NULL, -1);
  for (int r = 0; r < c->R; r++)
    if (c->reps[r].conn >= 0)
      resihp__coord_send_to(c, r, "DONE");
}

/* With hold_for_replacements, a step does not start while a replacement
 * the launcher started has not reached the barrier: the replacement joins
 * at the first boundary after it is up, however long its start takes. */
static int replacement_on_its_way(const resihp__coord_t *c) {
  if (!c->o.hold_for_replacements)
    return 0;
  for (int r = 0; r < c->R; r++)
    if (c->reps[r].expected &&
        !(c->reps[r].state == R_JOINING && c->reps[r].waiting))
      return 1;
  return 0;
}

/* Swap the slow replica r out between two steps (nothing of a step is
 * lost): the launcher starts its replacement on a spare as after a crash,
 * but the process that leaves is retired, not failed. */
static void swap_for_spare(resihp__coord_t *c, int r) {
  rep_t *p = &c->reps[r];
  char why[64];
  snprintf(why, sizeof(why), "slow x%.2f for %ld steps: swapped for a spare",
           p->slow, p->slow_steps);
  snprintf(p->fault_kind, sizeof(p->fault_kind), "slow");
  p->fault_ms = resihp__now_ms();
  p->fault_step = c->step;
  p->swapped_at = c->step;
  c->swaps++;
  resihp__coord_time_swap(c, r);
  resihp__record_event(c->o.record, "swap", c->step, r, c->epoch, "slow", why,
                       -1);
  resihp__coord_swap_out(c, r, why);
}

void resihp__coord_stop(resihp__coord_t *c) {
  resihp__coord_dirty(c);
  if (!c->stop)
    logc(RESIHP_LOG_INFO, "stop asked: step %ld is the last to start", c->step);
  c->stop = 1;
  resihp__coord_hold(c, "stop asked");
  resihp__coord_advance(c);
}

void resihp__coord_expect(resihp__coord_t *c, int replica, int on) {
  resihp__coord_dirty(c);
  if (replica >= 0 && replica < c->R)
    c->reps[replica].expected = on;
  if (on)
    resihp__coord_hold(c, "a replacement is expected");
  resihp__coord_advance(c);
}

/* Move the state machine on as far as the replicas let it. */
void resihp__coord_advance(resihp__coord_t *c) {
  for (int guard = 0; guard < 8 && c->state == RESIHP__COORD_RUNNING; guard++) {
    if (c->phase == P_FREE) {
      /* the members say when the run ends (BEGIN) */
      if (c->nmembers == 0)
        resihp__coord_lose(c, "every replica failed");
      return;
    }
    if (c->phase == P_RUN) {
      resihp__coord_decide_rounds(c);
      if (c->state != RESIHP__COORD_RUNNING || c->phase != P_RUN)
        continue;
      for (int i = 0; i < c->nmembers; i++)
        if (c->reps[c->members[i]].begun <= c->step)
          return;
      if (c->nmembers == 0 && c->step > c->base_step) {
        resihp__coord_lose(c, "every replica failed");
        return;
      }
      long s = c->step;
      commit_step(c);
      resihp__coord_write_ledger(c, s, c->step);
      resihp__coord_decide_commit(c);
      continue;
    }
    if (c->phase == P_SETUP) {
      for (int i = 0; i < c->nmembers; i++)
        if (!c->reps[c->members[i]].ready)
          return;
      if (c->nmembers == 0) {
        c->phase = P_BARRIER;
        continue;
      }
      start_step(c);
      return;
    }
    if (c->phase == P_END) {
      for (int i = 0; i < c->nmembers; i++)
        if (!c->reps[c->members[i]].finished)
          return;
      c->state = RESIHP__COORD_DONE;
      return;
    }
    /* P_BARRIER */
    if (c->S == 0 && !c->stop)
      return; /* nobody said hello yet */
    for (int i = 0; i < c->nmembers; i++)
      if (c->reps[c->members[i]].begun < c->step)
        return;
    if (c->nmembers == 0 && c->step > c->base_step) {
      resihp__coord_lose(c, "every replica that held the state failed");
      return;
    }
    if (resihp__coord_save_due(c))
      return; /* a save holds the boundary (coord_save.c) */
    if (c->stop || c->step >= c->S) {
      end_training(c);
      continue;
    }
    if (replacement_on_its_way(c))
      return;
    int slow = resihp__coord_decide(c); /* or a move (send_go) */
    if (slow >= 0)
      swap_for_spare(c, slow);
    int nwait = 0, pending = 0;
    for (int r = 0; r < c->R; r++) {
      if (c->reps[r].state == R_JOINING && c->reps[r].waiting)
        nwait++;
      else if (c->reps[r].state == R_NONE ||
               (c->reps[r].state == R_JOINING && !c->reps[r].waiting))
        pending++;
    }
    if (c->nmembers == 0 && (pending || !nwait))
      return; /* the first step waits for every initial replica */
    for (int r = 0; r < c->R; r++) {
      rep_t *p = &c->reps[r];
      if (p->state == R_JOINING && p->waiting) {
        p->state = R_MEMBER;
        p->waiting = 0;
        /* at the first step of a run the state is the initial one, or on
         * disk for a resumed run (coord_save.c): nobody to catch up from */
        p->catching = c->step > c->base_step;
        p->begun = c->step;
        p->finished = 0;
        p->expected = 0;
        resihp__coord_perf_reset(c, r);
        resihp__coord_add_member(c, r);
        if (p->open_fail >= 0 && !c->fails[p->open_fail].t_admit) {
          fail_t *f = &c->fails[p->open_fail];
          f->t_admit = resihp__now_ms();
          resihp__record_event(c->o.record, "admitted", c->step, r, c->epoch,
                               f->kind, NULL,
                               (double)(f->t_admit - f->t_fault) / 1000.0);
        }
      }
    }
    resihp__coord_send_go(c);
  }
}

void resihp__coord_lines(const resihp__coord_t *c, long *rx, long *tx,
                         long *timed) {
  *rx = c->lines_rx;
  *tx = c->lines_tx;
  if (timed)
    *timed = c->lines_timed;
  logc(RESIHP_LOG_DEBUG,
       "protocol lines but heartbeats: %ld received (%ld time-based "
       "reports), %ld sent, at step %ld",
       c->lines_rx, c->lines_timed, c->lines_tx, c->step);
}
