/* SPDX-License-Identifier: BSD-3-Clause */
/* Repartition at a step boundary (issue 32, item 2): move layers off a
 * slow rank of a pipeline replica, and back once it is healthy.
 *
 * A replica whose program can move its layers says so with every BEGIN
 * (lmove=1, resihp_job_set_layers_movable). At each step boundary (the
 * GO of the next step, before its epoch is decided), for a member whose
 * ranks' detector factors say one is slow, or whose layers were moved
 * before, the planner proposes a partition for the ranks' speeds now
 * (resihp_planner_partition, tp 1, one stage per rank, speed 1/factor,
 * every layer of equal cost: the coordinator knows the layers' number,
 * not their sizes), or the partition the program declared (home) once
 * every rank is healthy again. A partition is proposed when the replica's
 * predicted step (fill + (m - 1) * slowest stage, m its microbatches) is
 * at least REPART_MIN_GAIN shorter; not within REPART_SPACING steps of the
 * replica's last move (hysteresis: no flapping between two partitions).
 * Home only once no rank has been found slow for REPART_BACK_HOLD steps,
 * doubled each time the replica is found slow again soon after going
 * home (home_held: health measured at a lighter load may not hold at
 * home; without it a stage throttled from outside went home at the first
 * boundary allowed, slow again at once, and the partition flapped).
 * Away from a slow rank, it is taken only when the one decision
 * (coord_decide.c) chose it over absorbing and a swap, by the time each
 * saves over the steps left less its switch cost; back home, when the
 * time saved pays the move. The move's cost is the mean of the moves
 * measured in this job, before the first the coordinator option
 * repart_cost_s (0: two recent steps, a boundary's stall and a step's
 * worth of transfers). One replica per boundary, none while a replica is
 * expected, joining or catching up (the sources of a catch-up hold
 * still).
 *   The move becomes the replica's committed partition (coord_layers.c:
 * snapshot, WELCOME) and the epoch is renewed with the same members: its
 * GO lists the partitions with the new one and says moved=R, so that the
 * replica's ranks take it (recovery/job_layers.c) and every rank builds
 * its groups from it (the first epoch in which the members' partitions
 * differ sends every member the whole member list: a rank keeps the
 * other ranks' columns only while they differ). The snapshot keeps the
 * declared partition of a moved replica (home=), so that a standby moves
 * it back as well. A free run has no boundary: it is held for one when a
 * move may pay (coord_perf.c, once until the ranks' factors change).
 *   The replica's detector samples are scaled from
 * then on by the rank's home share of the layers over its share now, so
 * the moved rank is still compared with the same stage of the other
 * replicas for the same work, and its time multiplier is the planner's
 * predicted step of the new partition over the healthy one. */
#include "config.h"

#include "../recovery/layer_groups.h"
#include "coord_internal.h"

#include <resihp/error.h>
#include <resihp/planner.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A move must make the replica's step this much shorter. */
#define REPART_MIN_GAIN 0.10
/* Steps between two moves of one replica. */
#define REPART_SPACING 5
/* Steps in which no rank of a moved replica may be found slow before it
 * goes home, doubled each time it is found slow again within that many
 * steps of going home, up to REPART_BACK_HOLD_MAX. */
#define REPART_BACK_HOLD 50
#define REPART_BACK_HOLD_MAX (1L << 20)

/* The planner's view of a replica of L equal layers over K ranks at
 * the given factors (speed 1/f), m microbatches; free with model_free. */
typedef struct {
  resihp_plan_cluster_t cl;
  resihp_plan_model_t m;
  double speed[RESIHP__COORD_MAX_SHARDS], cap[RESIHP__COORD_MAX_SHARDS];
  double *ms;
} model_t;

static int model_init(model_t *x, int L, int K, const double *factor,
                      int mbs) {
  if (!(x->ms = malloc(sizeof(double) * (size_t)L * 2)))
    return RESIHP_ENOMEM;
  for (int l = 0; l < L; l++) {
    x->ms[l] = 1;
    x->ms[L + l] = 0;
  }
  for (int k = 0; k < K; k++) {
    x->speed[k] = factor && factor[k] > 1 ? 1 / factor[k] : 1;
    x->cap[k] = 1e18;
  }
  resihp_plan_cluster_init(&x->cl);
  x->cl.net_lat_us = x->cl.nvlink_lat_us = 0; /* layers alone: no links */
  resihp_plan_model_init(&x->m);
  x->m.layers = L;
  x->m.layer_ms = x->ms;
  x->m.layer_mem_gb = x->ms + L;
  x->m.boundary_mb = 0;
  x->m.microbatches = mbs > 0 ? mbs : 1;
  return 0;
}

/* The predicted step of counts[0..K) (fill + (m - 1) * slowest stage). */
static double model_step(const model_t *x, int K, const int *counts) {
  double fill, step;
  resihp_planner_replica_cost(&x->cl, &x->m, 1, K, x->speed, counts, &fill,
                              &step);
  int mb = x->m.microbatches;
  return fill + (mb > 1 ? mb - 1 : 0) * step;
}

int resihp__repart_choose(int L, int K, const double *factor, const int *cur,
                          const int *home, int mbs, double step_s,
                          long steps_left, double cost_s, int *out,
                          double *ratio, double *gain_s) {
  *ratio = 1;
  *gain_s = 0;
  if (L < K || K < 2 || K > RESIHP__COORD_MAX_SHARDS)
    return 0;
  int healthy = 1;
  for (int k = 0; k < K; k++)
    healthy &= !(factor[k] > 1);
  model_t x;
  if (model_init(&x, L, K, factor, mbs))
    return RESIHP_ENOMEM;
  int rc = 0;
  double fill, step;
  if (healthy)
    memcpy(out, home, sizeof(int) * (size_t)K);
  else if (resihp_planner_partition(&x.cl, &x.m, 1, K, x.speed, x.cap,
                                    x.m.microbatches, out, &fill, &step))
    goto done;
  if (!memcmp(out, cur, sizeof(int) * (size_t)K))
    goto done;
  double now = model_step(&x, K, cur), then = model_step(&x, K, out);
  *ratio = now > 0 ? then / now : 1;
  *gain_s = (1 - *ratio) * step_s * (double)steps_left;
  rc = *ratio <= 1 - REPART_MIN_GAIN && *gain_s > cost_s;
done:
  free(x.ms);
  return rc;
}

int resihp__repart_plan(int L, int K, const double *factor, int mbs,
                        int *out) {
  if (L < K || K < 1 || K > RESIHP__COORD_MAX_SHARDS)
    return RESIHP_EINVAL;
  model_t x;
  if (model_init(&x, L, K, factor, mbs))
    return RESIHP_ENOMEM;
  double fill, step;
  int rc = resihp_planner_partition(&x.cl, &x.m, 1, K, x.speed, x.cap,
                                    x.m.microbatches, out, &fill, &step);
  free(x.ms);
  return rc ? RESIHP_EINVAL : 0;
}

double resihp__repart_ratio(int L, int K, const double *factor,
                            const int *counts, int K0, const int *home,
                            int mbs) {
  model_t slow, ok;
  if (model_init(&slow, L, K, factor, mbs))
    return 1;
  if (model_init(&ok, L, K0, NULL, mbs)) {
    free(slow.ms);
    return 1;
  }
  double a = model_step(&slow, K, counts), b = model_step(&ok, K0, home);
  free(slow.ms);
  free(ok.ms);
  return b > 0 && a > b ? a / b : 1;
}

double resihp__repart_slowdown(int L, int K, const double *factor,
                               const int *counts, const int *home, int mbs) {
  return resihp__repart_ratio(L, K, factor, counts, K, home, mbs);
}

/* The counts of the partition "cuts" (coord_layers.c's text) of L
 * layers over K ranks into counts: 0, or an error. */
static int counts_of(const char *cuts, int L, int K, int *counts) {
  resihp__partition_t p;
  int rc = resihp__partition_parse(cuts, L, &p);
  if (rc)
    return rc;
  if (p.k != K)
    rc = RESIHP_EPROTO;
  for (int k = 0; !rc && k < K; k++)
    counts[k] = p.bounds[k + 1] - p.bounds[k];
  resihp__partition_free(&p);
  return rc;
}

void resihp__coord_repart_reset(resihp__coord_t *c, int r, int shrunk) {
  rep_t *p = &c->reps[r];
  p->lmove = 0;
  p->moved = 0;
  p->moved_at = 0;
  p->repart_asked = 0;
  p->back_at = 0;
  p->back_hold = 0;
  if (shrunk)
    return; /* (its home is the shrunk partition, coord_shrink.c) */
  p->home[0] = '\0';
  p->k = 0; /* (HELLO checked: the job's K ranks) */
  p->lost = 0;
  p->shrunk_at = 0;
  p->shrink_slow = 1;
}

int resihp__coord_repart_restore(resihp__coord_t *c, int r,
                                 const char *home) {
  rep_t *p = &c->reps[r];
  int counts[RESIHP__COORD_MAX_SHARDS];
  if (c->K > RESIHP__COORD_MAX_SHARDS || strlen(home) >= sizeof(p->home) ||
      counts_of(home, c->nlayers, resihp__coord_rep_k(c, r), counts))
    return RESIHP_EPROTO;
  snprintf(p->home, sizeof(p->home), "%s", home);
  p->moved = 1;
  p->moved_at = c->step;
  return 0;
}

void resihp__coord_repart_begin(resihp__coord_t *c, int r, const char *msg) {
  rep_t *p = &c->reps[r];
  long v = 0;
  if (!resihp__wire_get_range(msg, "lmove", 0, 1, &v))
    p->lmove = (int)v;
  if (!p->home[0] && !p->moved && p->lpart)
    snprintf(p->home, sizeof(p->home), "%s", c->lparts[p->lpart - 1].text);
}

/* The counts of replica r's partition now and of its home: 0, or -1. */
static int both_counts(const resihp__coord_t *c, int r, int *cur, int *home) {
  const rep_t *p = &c->reps[r];
  int K = resihp__coord_rep_k(c, r);
  if (!p->lpart || !p->home[0] ||
      counts_of(c->lparts[p->lpart - 1].text, c->nlayers, K, cur) ||
      counts_of(p->home, c->nlayers, K, home))
    return -1;
  return 0;
}

double resihp__coord_repart_factor(const resihp__coord_t *c, int r, double f) {
  const rep_t *p = &c->reps[r];
  int cur[RESIHP__COORD_MAX_SHARDS], home[RESIHP__COORD_MAX_SHARDS];
  /* a shrunk replica (coord_shrink.c) is timed as for K ranks: its
   * K'-rank home costs shrink_slow more */
  double shrunk = p->shrunk_at ? p->shrink_slow : 1;
  if (!p->moved || !c->rank_slow || both_counts(c, r, cur, home))
    return f * shrunk;
  return shrunk * resihp__repart_slowdown(
                      c->nlayers, resihp__coord_rep_k(c, r),
                      c->rank_slow + (size_t)r * (size_t)c->K, cur, home,
                      p->quota > 0 ? p->quota : 1);
}

/* The steps in which no rank of moved replica p may be found slow before
 * it goes home now. */
static long back_hold(const rep_t *p) {
  return p->back_hold > 0 ? p->back_hold : REPART_BACK_HOLD;
}

/* Whether moved replica r may go home now: no rank of it found slow for
 * back_hold steps (a suspicion, which the detector raises often on a
 * busy machine, does not count either way). A rank found healthy while
 * moved was measured at its lighter load, and a slowdown from outside may
 * cost it less there than at home: in the lab (torch-repartition.test,
 * stage 1 of replica 1 duty-cycled from outside, its samples dumped) the
 * throttle showed as a ~100 ms stall of one of its microbatches every
 * other step (its step x3.5-4.9 its peers') while it held its 3 units,
 * none while it held 2 (x0.87-1.40, scaled): the detector, right by its
 * samples, cleared it 4 steps after the move, and it went home at the
 * first boundary allowed, where the stalls came back at once. So health
 * at home is tried after a while, not taken for granted, and a try that
 * finds it slow again is not repeated soon. */
static int home_held(const resihp__coord_t *c, int r) {
  const rep_t *p = &c->reps[r];
  for (int k = 0; k < resihp__coord_rep_k(c, r); k++)
    if (c->rank_state[r * c->K + k] == RESIHP_HEALTH_SLOW)
      return 0;
  return c->step >= p->healthy_from + back_hold(p);
}

int resihp__coord_repart_wanted(resihp__coord_t *c, int r) {
  rep_t *p = &c->reps[r];
  int K = resihp__coord_rep_k(c, r);
  if (!p->lmove || p->repart_asked || K < 2 || !c->rank_slow ||
      (p->moved_at > 0 && c->step < p->moved_at + REPART_SPACING))
    return 0;
  int slow = 0;
  for (int k = 0; k < K; k++)
    slow |= c->rank_slow[r * c->K + k] > 1;
  if (slow == p->moved)
    return 0; /* slow and moved, or healthy at home */
  if (p->moved && !home_held(c, r))
    return 0; /* (asked again at a later commit) */
  p->repart_asked = 1;
  return 1;
}

/* Replica r's move if one pays now at that cost: 1 with the new counts
 * in out (ratio and gain: resihp__repart_choose's). */
static int plan_for(resihp__coord_t *c, int r, double cost, int *cur, int *home,
                    int *out, double *ratio, double *gain) {
  rep_t *p = &c->reps[r];
  int K = resihp__coord_rep_k(c, r);
  *ratio = 1;
  *gain = 0;
  if (!p->lmove || !p->lpart || !p->home[0] || p->catching ||
      (p->moved_at > 0 && c->step < p->moved_at + REPART_SPACING))
    return 0;
  const double *f = c->rank_slow + (size_t)r * (size_t)c->K;
  int slow = 0;
  for (int k = 0; k < K; k++)
    slow |= f[k] > 1;
  if (!slow && (!p->moved || !home_held(c, r)))
    return 0;
  if (both_counts(c, r, cur, home))
    return 0;
  double step_s = resihp__coord_recent_step_s(c);
  if (c->o.repart_cost_s < 0 || step_s <= 0)
    return 0;
  return resihp__repart_choose(c->nlayers, K, f, cur, home,
                               p->quota > 0 ? p->quota : 1, step_s,
                               c->S - c->step, cost, out, ratio, gain) == 1;
}

int resihp__coord_repart_plan(resihp__coord_t *c, int r, int *cur, int *home,
                              int *out, double *ratio) {
  double gain;
  if (c->K < 2 || !c->nlayers || !c->rank_slow)
    return 0;
  return plan_for(c, r, 0, cur, home, out, ratio, &gain);
}

/* Give replica r the partition out (counts; cur its present one, home
 * its declared one) from the next epoch: 0, or -1 when it cannot be
 * held (no room for another partition). */
static int apply(resihp__coord_t *c, int r, const int *cur, const int *home,
                 const int *out, double ratio, double gain,
                 const char *why_text) {
  int K = resihp__coord_rep_k(c, r);
  resihp__partition_t np;
  char lay[RESIHP__COORD_LAY_MAX + 16], cuts[RESIHP__COORD_LAY_MAX];
  if (resihp__partition_from_counts(out, K, c->nlayers, &np))
    return -1;
  int rc = resihp__partition_format(&np, cuts, sizeof(cuts));
  resihp__partition_free(&np);
  snprintf(lay, sizeof(lay), "%d%s%s", c->nlayers, cuts[0] ? ":" : "", cuts);
  int same = 1; /* every member held one partition so far */
  for (int i = 0; i < c->nmembers && same; i++)
    same = c->reps[c->members[i]].lpart == c->reps[r].lpart;
  if (rc || resihp__coord_set_layers(c, r, lay))
    return -1;
  /* while the members' partitions differ, each rank keeps the other
   * ranks' columns of the member list, which a change of the list alone
   * does not carry (recovery/job_step.c): the first epoch in which they
   * differ sends every member the whole list, once */
  for (int i = 0; i < c->nmembers && same; i++)
    c->reps[c->members[i]].list_epoch = 0;
  rep_t *p = &c->reps[r];
  int back = !memcmp(out, home, sizeof(int) * (size_t)K);
  if (back) {
    p->back_at = c->step;
  } else if (p->back_at > 0 && c->step < p->back_at + back_hold(p)) {
    /* slow again soon after going home: its health, measured while its
     * layers were moved, did not hold at home; wait longer next time */
    long h = 2 * back_hold(p);
    p->back_hold = h < REPART_BACK_HOLD_MAX ? h : REPART_BACK_HOLD_MAX;
  }
  p->moved = !back;
  p->moved_at = c->step;
  resihp__coord_time_move(c, r);
  p->nmoves++;
  c->repartitions++;
  c->moved_r = r;
  c->changed = 1; /* a new epoch, the same members */
  /* its multiplier: the step it is predicted to run at now over the
   * healthy one at home (back home: its slowest rank's factor) */
  double fmax = 1;
  for (int k = 0; k < K; k++)
    if (c->rank_slow && c->rank_slow[r * c->K + k] > fmax)
      fmax = c->rank_slow[r * c->K + k];
  p->slow = resihp__coord_repart_factor(c, r, fmax);
  char from[RESIHP__COORD_LAY_MAX], to[RESIHP__COORD_LAY_MAX];
  size_t a = 0, b = 0;
  for (int k = 0; k < K; k++) {
    a += (size_t)snprintf(from + a, sizeof(from) - a, "%s%d", k ? "," : "",
                          cur[k]);
    b += (size_t)snprintf(to + b, sizeof(to) - b, "%s%d", k ? "," : "",
                          out[k]);
    if (a >= sizeof(from) || b >= sizeof(to))
      break;
  }
  logc(RESIHP_LOG_WARN,
       "replica %d: layers repartitioned %s -> %s at step %ld (%s): "
       "predicted step x%.2f, %.3g s saved over the %ld steps left",
       r, from, to, c->step,
       why_text ? why_text
       : back   ? "its ranks are healthy again"
                : "a rank is slow",
       ratio, gain, c->S - c->step);
  char why[2 * RESIHP__COORD_LAY_MAX + 64];
  snprintf(why, sizeof(why), "from=%s to=%s predicted-step=x%.2f saved=%.3gs",
           from, to, ratio, gain);
  resihp__record_event(c->o.record, "repartition", c->step, r, c->epoch + 1,
                       why_text ? "asked" : back ? "back" : "slow", why, gain);
  resihp__coord_dirty(c);
  return 0;
}

void resihp__coord_repart_force(resihp__coord_t *c, int r, const int *counts) {
  if (r < 0 || r >= c->R || c->K > RESIHP__COORD_MAX_SHARDS)
    return;
  c->force_r = r + 1;
  memcpy(c->force_counts, counts, sizeof(int) * (size_t)c->K);
}

/* No replica expected, joining or catching up: one change at a time. */
static int quiet(const resihp__coord_t *c) {
  for (int r = 0; r < c->R; r++) {
    const rep_t *p = &c->reps[r];
    if (p->expected || p->state == R_JOINING ||
        (p->state == R_MEMBER && p->catching))
      return 0;
  }
  return 1;
}

void resihp__coord_repart_boundary(resihp__coord_t *c) {
  int chosen = c->decide_r;
  c->decide_r = -1;
  c->moved_r = -1;
  if (c->K < 2 || !c->nlayers || c->stop || !quiet(c) ||
      c->shrunk_r >= 0) { /* (a shrink has this boundary: coord_shrink.c) */
    if (chosen >= 0) /* not done: decided again at the next boundary */
      c->reps[chosen].decided = 0;
    return;
  }
  int cur[RESIHP__COORD_MAX_SHARDS], home[RESIHP__COORD_MAX_SHARDS],
      out[RESIHP__COORD_MAX_SHARDS];
  double ratio, gain;
  if (c->force_r) { /* (tests: resihp__coord_repart_force) */
    int r = c->force_r - 1;
    c->force_r = 0;
    if (chosen >= 0)
      c->reps[chosen].decided = 0;
    if (resihp__coord_is_member(c, r) && c->reps[r].lmove &&
        !both_counts(c, r, cur, home))
      apply(c, r, cur, home, c->force_counts, 1, 0, "asked for");
    return;
  }
  if (chosen >= 0) { /* the decision's (coord_decide.c) */
    if (!resihp__coord_is_member(c, chosen) ||
        apply(c, chosen, c->decide_cur, c->decide_home, c->decide_out,
              c->decide_ratio, c->decide_gain, NULL))
      c->reps[chosen].decided = 0;
    return;
  }
  if (!c->rank_slow)
    return;
  /* a slow replica's layers move only when a decision chose it; one
   * whose ranks are healthy again goes home when that pays */
  int measured;
  double cost = resihp__coord_switch_cost(c, RESIHP__DECIDE_REPART, &measured);
  for (int i = 0; i < c->nmembers; i++) {
    int r = c->members[i];
    int slow = 0;
    for (int k = 0; k < c->K; k++)
      slow |= c->rank_slow[r * c->K + k] > 1;
    if (!slow && plan_for(c, r, cost, cur, home, out, &ratio, &gain) &&
        !apply(c, r, cur, home, out, ratio, gain, NULL))
      return; /* one replica per boundary */
  }
}

void resihp__coord_put_moved(const resihp__coord_t *c, resihp__wire_buf_t *b) {
  if (c->moved_r >= 0)
    resihp__wire_buf_printf(b, " moved=%d", c->moved_r);
}

double resihp__coord_repart_scale(const resihp__coord_t *c, int rank) {
  int r = rank / c->K, k = rank % c->K;
  int cur[RESIHP__COORD_MAX_SHARDS], home[RESIHP__COORD_MAX_SHARDS];
  if ((!c->reps[r].moved && !c->reps[r].shrunk_at) ||
      k >= resihp__coord_rep_k(c, r) || both_counts(c, r, cur, home))
    return 1.0;
  /* a shrunk replica's rank, a detector stage of its own (coord_perf.c):
   * by the layers it holds, as for an even share of K ranks, so that its
   * own baseline holds across a later move of its layers (its multiplier
   * says the rest, shrink_slow) */
  if (c->reps[r].shrunk_at)
    return (double)c->nlayers / c->K / (double)cur[k];
  return (double)home[k] / (double)cur[k];
}

int resihp__coord_quiet(const resihp__coord_t *c) {
  return quiet(c);
}
