/* SPDX-License-Identifier: BSD-3-Clause */
/* In-step recovery: the coordinator's RECOVER rounds and their REASSIGN
 * answers.
 *
 * A survivor reports the replicas its group lost (gone=r:r, the step's
 * members it no longer has), not the ones it kept: every survivor of a
 * failure reports, so a report of the living would make a failure cost
 * O(N^2) bytes and parsing (N reports of N ids; 490 MB at 10,000
 * replicas). Its view V is the step's members (in_step) less those. The
 * older form, view=r:r (V itself), is still read, at O(N) a report.
 *
 * A RECOVER with view V moves every microbatch whose owner is outside V to
 * the contributors in V, round-robin in microbatch order; the moves are kept
 * per (step, communicator epoch) so that every survivor of the same view
 * gets the same answer, whatever order their RECOVERs arrive in. Because a
 * failed all-reduce leaves every survivor's buffer untouched, a microbatch
 * whose owner left the view was never counted: moving it neither drops nor
 * double-counts a sample. When the coordinator acts on a view is said
 * below (confirm_ms).
 */
#include "config.h"

#include "../transport/mesh.h"
#include "coord_internal.h"

#include <resihp/error.h>

#include <stdlib.h>
#include <string.h>

/* RECOVER reports one member may make in one step: each stands for a
 * failure it saw, and a replica sees few in one step; more is a fault. */
#define REPORTS_PER_STEP 8

void resihp__coord_free_rounds(resihp__coord_t *c) {
  for (int k = 0; k < c->nrounds; k++) {
    free(c->rounds[k].mb);
    free(c->rounds[k].to);
    free(c->rounds[k].inview);
    free(c->rounds[k].reported);
  }
  c->nrounds = 0;
}

/* RECOVER rounds.
 *
 * The survivors of a failure in a step agree on a view (resihp_comm_shrink)
 * and each reports it. The coordinator acts on a view only when it cannot
 * be one member's say-so: every member it leaves out is seen failing here
 * too (its connection is gone, or it has been silent towards the
 * coordinator for confirm_ms, five heartbeats: a hung process is), or the
 * reporters of the same view are a majority of the members. A healthy
 * replica that one rank claims is gone is therefore never evicted on that
 * claim; the claim waits (the claimant waits for its answer), and if the
 * claimant is the faulty one, the others soon leave it out themselves.
 * A member may report at most REPORTS_PER_STEP times in a step. */
static int64_t confirm_ms(const resihp__coord_t *c) {
  int64_t ms = c->o.silence_ms / 3;
  return ms < 400 ? 400 : ms;
}

static int round_confirmed(const resihp__coord_t *c, const round_t *rd) {
  int reporters = 0, unconfirmed = 0;
  for (int i = 0; i < c->nmembers; i++) {
    int m = c->members[i];
    const rep_t *p = &c->reps[m];
    if (rd->inview[m]) {
      reporters += rd->reported[m];
      continue;
    }
    /* (no connection while a restored coordinator waits for its members
     * to come back says nothing: coord_snapshot.c) */
    int seen =
        (p->conn < 0 && !(c->reconnect_by && c->listened < c->reconnect_by)) ||
        p->catchup_failed ||
        (p->conn >= 0 &&
         c->listened - c->conns[p->conn].last_heard >= confirm_ms(c));
    unconfirmed += !seen;
  }
  if (!reporters)
    return 0; /* nobody still in the group is waiting for it */
  return unconfirmed == 0 || 2 * reporters > c->nmembers;
}

static void answer_round(resihp__coord_t *c, const round_t *rd, int r) {
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  resihp__wire_buf_printf(&b, "REASSIGN step=%ld cepoch=%u extra=", c->step,
                          rd->cepoch);
  int first = 1;
  for (int i = 0; i < rd->n && !b.err; i++)
    if (rd->to[i] == r) {
      resihp__wire_buf_printf(&b, "%s%d", first ? "" : ":", rd->mb[i]);
      first = 0;
    }
  resihp__coord_send_buf_to(c, r, &b);
  resihp__wire_buf_free(&b);
}

/* Act on a confirmed view: leave out the members outside it and move the
 * microbatches whose owner is outside it to the contributors in it. */
/* How many of the step's members round rd's view leaves out (computed
 * once per round: a report is then compared in O(its length)). */
static int round_nout(const resihp__coord_t *c, round_t *rd) {
  if (!rd->counted) {
    rd->counted = 1;
    rd->nout = 0;
    for (int r = 0; r < c->R; r++)
      rd->nout += c->in_step[r] && !rd->inview[r];
  }
  return rd->nout;
}

/* Whether round rd's view is the step's members less gone[0..ng) (ids
 * distinct, each a member of the step). */
static int round_is(const resihp__coord_t *c, round_t *rd, const int *gone,
                    int ng) {
  if (round_nout(c, rd) != ng)
    return 0;
  for (int i = 0; i < ng; i++)
    if (rd->inview[gone[i]])
      return 0;
  return 1;
}

static void decide_round(resihp__coord_t *c, round_t *rd) {
  int *gone = c->scratch2, ng = 0;
  for (int i = 0; i < c->nmembers; i++)
    if (!rd->inview[c->members[i]])
      gone[ng++] = c->members[i];
  for (int i = 0; i < ng; i++) {
    rep_t *p = &c->reps[gone[i]];
    if (p->catchup_failed && p->conn >= 0) {
      resihp__coord_remove_member(c, gone[i]);
      p->state = R_JOINING;
      p->waiting = 1;
      p->catching = 0;
      p->catchup_failed = 0;
    } else {
      resihp__coord_fail_replica(c, gone[i], "left out by the survivors");
    }
  }
  int *contrib = c->scratch, nc = 0;
  for (int r = 0; r < c->R; r++)
    if (rd->inview[r] && c->reps[r].state == R_MEMBER && !c->reps[r].catching)
      contrib[nc++] = r;
  rd->mb = malloc(sizeof(int) * (size_t)c->M);
  rd->to = malloc(sizeof(int) * (size_t)c->M);
  if (!rd->mb || !rd->to) {
    resihp__coord_lose(c, "out of memory");
    return;
  }
  int k = 0;
  for (int mb = 0; mb < c->M; mb++) {
    if (rd->inview[c->owner[mb]])
      continue;
    if (nc == 0) {
      resihp__coord_lose(c, "no survivor holds a valid state");
      return;
    }
    int to = contrib[k++ % nc];
    c->owner[mb] = to;
    rd->mb[rd->n] = mb;
    rd->to[rd->n] = to;
    rd->n++;
  }
  rd->decided = 1;
  resihp__coord_dirty(c);
  c->reassigned += rd->n;
  logc(RESIHP_LOG_INFO,
       "step %ld: %d microbatches of failed replicas reassigned to %d "
       "survivors",
       c->step, rd->n, nc);
  for (int r = 0; r < c->R; r++)
    if (rd->reported[r] && c->reps[r].conn >= 0)
      answer_round(c, rd, r);
}

static int cepoch_decided(const resihp__coord_t *c, uint32_t ce) {
  for (int k = 0; k < c->nrounds; k++)
    if (c->rounds[k].decided && c->rounds[k].cepoch == ce)
      return 1;
  return 0;
}

void resihp__coord_decide_rounds(resihp__coord_t *c) {
  for (int k = 0;
       k < c->nrounds && c->state == RESIHP__COORD_RUNNING && c->phase == P_RUN;
       k++) {
    round_t *rd = &c->rounds[k];
    if (!rd->decided && !cepoch_decided(c, rd->cepoch) &&
        round_confirmed(c, rd))
      decide_round(c, rd);
  }
}

/* The departed a RECOVER names, into c->scratch2 (*ng of them): gone=
 * as it is, or the step's members outside view= (an older peer's form).
 * Each must be a member of the step, named once, and not the reporter r.
 * 0, or RESIHP_EPROTO. */
static int reported_gone(resihp__coord_t *c, int r, const char *msg,
                         int *ng) {
  char *list = c->view, *mark = c->inview; /* mark: all 0 between calls */
  int *gone = c->scratch2, *v = NULL, nv = 0, rc = 0;
  *ng = 0;
  if (!resihp__wire_get(msg, "gone", list, 8 * (size_t)c->R + 1)) {
    if (resihp__wire_parse_ints(list, c->R, &v, &nv))
      return RESIHP_EPROTO;
    for (int i = 0; i < nv && !rc; i++) {
      rc = mark[v[i]] || !c->in_step[v[i]] || v[i] == r ? RESIHP_EPROTO : 0;
      mark[v[i]] = 1;
      gone[i] = v[i];
    }
    for (int i = 0; i < nv; i++)
      mark[v[i]] = 0;
    *ng = nv;
  } else if (!resihp__wire_get(msg, "view", list, 8 * (size_t)c->R + 1) &&
             !resihp__wire_parse_ints(list, c->R, &v, &nv) && nv >= 1) {
    for (int i = 0; i < nv && !rc; i++) {
      rc = mark[v[i]] || !c->in_step[v[i]] ? RESIHP_EPROTO : 0;
      mark[v[i]] = 1;
    }
    rc = rc || !mark[r] ? RESIHP_EPROTO : 0;
    for (int q = 0; q < c->R && !rc; q++)
      if (c->in_step[q] && !mark[q])
        gone[(*ng)++] = q;
    for (int i = 0; i < nv; i++)
      mark[v[i]] = 0;
  } else {
    rc = RESIHP_EPROTO;
  }
  free(v);
  return rc;
}

void resihp__coord_on_recover(resihp__coord_t *c, int k, int r,
                              const char *msg) {
  long s = -1, ce = -1;
  int ng = 0;
  if (resihp__wire_get_range(msg, "step", 0, MAX_STEPS, &s) ||
      resihp__wire_get_range(msg, "cepoch", 0, UINT32_MAX, &ce)) {
    resihp__coord_refuse(c, k, "bad-recover", 1, msg);
    return;
  }
  /* (a free run's in_step is its START's members: the same group) */
  int bad = !c->in_step[r] || reported_gone(c, r, msg, &ng) != 0;
  const int *gone = c->scratch2;
  /* free-running: the steps before s are committed; s is recovered as
   * any step is, and the run is over (its group changed) */
  if (!bad && c->phase == P_FREE &&
      resihp__coord_is_member(c, r) && s >= c->step && s < c->S) {
    /* by cost, the RECOVER brings the owners of the run's steps up to s
     * (job_step.c): those of s are the ones the rounds move */
    if (resihp__coord_take_owners(c, msg)) {
      resihp__coord_refuse(c, k, "bad-owners", 1, msg);
      return;
    }
    resihp__coord_free_to(c, s);
    if (c->state != RESIHP__COORD_RUNNING)
      return;
    if (c->step == s && resihp__coord_cost_owners_of(c, s)) {
      resihp__coord_refuse(c, k, "bad-recover", 1, msg);
      return;
    }
    if (c->step == s)
      c->phase = P_RUN;
  }
  if (bad || s > c->step) {
    resihp__coord_refuse(c, k, "bad-recover", 1, msg);
    return;
  }
  rep_t *p = &c->reps[r];
  if (s != c->step || c->phase != P_RUN || !resihp__coord_is_member(c, r)) {
    resihp__coord_refuse(c, k, "late-recover", 0, msg);
    return;
  }
  if (++p->reports > REPORTS_PER_STEP) {
    resihp__coord_refuse(c, k, "too-many-recovers", 0, msg);
    return;
  }
  round_t *rd = NULL;
  for (int i = 0; i < c->nrounds; i++) {
    round_t *x = &c->rounds[i];
    if (x->cepoch != (uint32_t)ce)
      continue;
    if (round_is(c, x, gone, ng))
      rd = x;
    else if (x->reported[r]) {
      /* two views of one epoch */
      resihp__coord_refuse(c, k, "bad-recover", 1, msg);
      return;
    }
  }
  if (!rd) {
    if (c->nrounds == c->caprounds) {
      /* bounded: every round is some member's report, REPORTS_PER_STEP
       * each at most */
      int n = c->caprounds ? 2 * c->caprounds : 8;
      round_t *x = realloc(c->rounds, sizeof(round_t) * (size_t)n);
      if (!x) {
        resihp__coord_refuse(c, k, "out-of-memory", 0, msg);
        return;
      }
      c->rounds = x;
      c->caprounds = n;
    }
    rd = &c->rounds[c->nrounds];
    memset(rd, 0, sizeof(*rd));
    rd->inview = malloc((size_t)c->R);
    rd->reported = calloc((size_t)c->R, 1);
    if (!rd->inview || !rd->reported) {
      free(rd->inview);
      free(rd->reported);
      resihp__coord_refuse(c, k, "out-of-memory", 0, msg);
      return;
    }
    c->nrounds++;
    rd->cepoch = (uint32_t)ce;
    memcpy(rd->inview, c->in_step, (size_t)c->R);
    for (int i = 0; i < ng; i++)
      rd->inview[gone[i]] = 0;
    rd->nout = ng;
    rd->counted = 1;
  }
  rd->reported[r] = 1;
  /* Undecided: decided by resihp__coord_advance once every line of this
   * poll round is read, not now. A replica that left the step on purpose
   * (ABORT) said so before it closed its sockets, that is before any
   * survivor could see it gone; deciding now could fail it, and relaunch
   * it, on a RECOVER read just before its ABORT. */
  if (rd->decided)
    resihp__coord_again(c, answer_round(c, rd, r));
}
