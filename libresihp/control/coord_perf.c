/* SPDX-License-Identifier: BSD-3-Clause */
/* Fail-slow adaptation in the coordinator: the detector of the running
 * job, the step's microbatches by predicted cost, and the swap of a
 * replica that stays slow.
 *
 * Samples. After each step every rank sends its microbatch samples (PERF:
 * microbatch, time, tokens, sum of squared lengths, sequences; the leader
 * relays its other ranks'), which the detector records as rank
 * replica * K + shard, stage = shard: ranks with the same shard do the same
 * work. The detector's events (SLOW with a factor, HEALTHY again) set the
 * replica's time multiplier, the largest over its ranks (a replica goes at
 * its slowest stage's pace); SUSPECT changes nothing (it is a suspicion
 * being checked), so quotas do not flap.
 *
 * Costs. One contributor is asked (START wl=1) to send the workloads of
 * all M microbatches of the next step with its next BEGIN (WL), from the
 * trainer's data loader (resihp_job_set_workload_fn). A microbatch's cost
 * is the sum over shards of a healthy rank's prediction for it (the
 * model of the shard's reference rank, resihp_detector_model, evaluated
 * by resihp_model_costs); without workloads or a warm predictor all
 * microbatches cost the same. The assignment is resihp__costplan_owners
 * (resihp_planner_assign by cost) with a plan (contributors, multipliers,
 * models) that START ships when the members run free: they then assign
 * every following step themselves, the same way (costplan.c); the WL
 * asked for is then that of the step at which the run ends.
 *
 * Swap. A replica slow for swap_after steps in a row may be swapped for a
 * spare at a step boundary when resihp_planner_swap_gain_s says it pays
 * back over the steps left and the launcher has a spare, and the one
 * decision (coord_decide.c) finds it pays more than a move of its layers:
 * it is failed with a reason the summary shows, so the launcher relaunches
 * it on a spare exactly as after a crash; no microbatch is lost (the
 * boundary is between steps).
 * Free-running there is no boundary to do it at: once a member has been
 * slow that long and a swap would be picked, the run is held for it, once
 * per member until its factor moves (resihp__coord_hold_for_swap).
 *
 * Cost per step: O(samples) to record, O(M log M + M R) to assign. What a
 * rank says is bounded (at most M samples of one of the last two steps,
 * every figure checked) and only ever moves work: the ledger stays exact.
 */
#include "config.h"

#include "../transport/mesh.h"
#include "coord_internal.h"

#include <resihp/error.h>
#include <resihp/planner.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Largest figure a sample or workload may carry (time in us, tokens,
 * squared lengths): far beyond any real microbatch, small enough that the
 * sums stay exact in a double. */
#define PERF_MAX 1000000000000000LL
/* Steps a replica stays slow before a swap is considered. */
#define SWAP_AFTER_STEPS 3

static void on_event(int rank, resihp_health_state_t prev,
                     const resihp_rank_health_t *now, uint64_t iter, void *ud) {
  resihp__coord_t *c = ud;
  int r = rank / c->K, k = rank % c->K;
  c->rank_slow[rank] = now->state == RESIHP_HEALTH_SLOW && now->slow_factor > 1
                           ? now->slow_factor
                           : 1.0;
  c->rank_state[rank] = (unsigned char)now->state;
  c->reps[r].repart_asked = 0; /* a move may pay now (coord_repart.c) */
  if (prev == RESIHP_HEALTH_SLOW && now->state != RESIHP_HEALTH_SLOW) {
    int none = 1; /* its last slow rank cleared: a move home waits from
                     here (coord_repart.c) */
    for (int i = 0; i < c->K; i++)
      none &= c->rank_state[r * c->K + i] != RESIHP_HEALTH_SLOW;
    if (none)
      c->reps[r].healthy_from = c->step;
  }
  if (now->state == RESIHP_HEALTH_SUSPECT)
    return; /* a suspicion being checked: nothing to act on */
  double f = 1.0;
  for (int i = 0; i < c->K; i++)
    if (c->rank_slow[r * c->K + i] > f)
      f = c->rank_slow[r * c->K + i];
  f = resihp__coord_repart_factor(c, r, f); /* layers moved off it */
  rep_t *p = &c->reps[r];
  if (fabs(f - p->slow) < 0.05 * p->slow)
    return;
  const char *st = resihp_health_state_name(now->state);
  if (f > 1 && p->slow <= 1 && !p->slow_episodes++)
    p->slow_since = (long)iter;
  if (f > p->worst_slow)
    p->worst_slow = f;
  /* a new episode, or its end, is news; a factor that moves is not */
  int news = (f > 1) != (p->slow > 1) || f > 1.25 * p->slow;
  p->slow = f;
  if (news) {
    p->swap_held = 0; /* worth asking about a swap again */
    p->decided = 0;   /* a new slowness: decided anew (coord_decide.c) */
  }
  /* free-running, its quota must change: HOLD once the samples are in
   * (coord_protocol.c); a factor that stays near the run's goes on */
  if (c->phase == P_FREE && resihp__coord_is_member(c, r) &&
      resihp__coord_slow_moved(p))
    c->hold_slow = 1;
  /* equal counts (assign even) move nothing: say so */
  int even = c->o.assign == RESIHP_ASSIGN_EVEN;
  if (f > 1)
    logc(news ? RESIHP_LOG_WARN : RESIHP_LOG_DEBUG,
         "replica %d rank %d is %s at step %llu: the replica runs at x%.2f, "
         "%s",
         r, k, st, (unsigned long long)iter, f,
         even ? "its microbatches stay (equal counts)"
              : "it gets fewer microbatches");
  else
    logc(RESIHP_LOG_WARN, "replica %d is %s again at step %llu%s", r, st,
         (unsigned long long)iter, even ? "" : ": its microbatches return");
  if (c->o.on_health && news)
    c->o.on_health(c->o.ud, r, k, f > 1 ? "slow" : "healthy", f, (long)iter);
}

int resihp__coord_perf_init(resihp__coord_t *c) {
  int n = c->R * c->K;
  resihp_detector_config_t cfg;
  resihp_detector_config_init(&cfg, n);
  cfg.on_event = on_event;
  cfg.userdata = c;
  c->rank_slow = malloc(sizeof(double) * (size_t)n);
  c->rank_state = calloc((size_t)n, 1);
  c->wl = malloc(sizeof(resihp_workload_t) * (size_t)c->M);
  c->cost = malloc(sizeof(double) * (size_t)c->M);
  c->pick = malloc(sizeof(int) * (size_t)c->M);
  c->tuples = malloc(sizeof(long long) * 5 * (size_t)c->M);
  c->fown_cap = resihp__costplan_rows(c->M);
  c->fown = malloc(sizeof(int) * (size_t)c->fown_cap * (size_t)c->M);
  if (!c->rank_state || !c->rank_slow || !c->wl || !c->cost || !c->pick ||
      !c->tuples || !c->fown || resihp__costplan_init(&c->cplan, c->R, c->K) ||
      resihp_detector_create(&c->det, &cfg) ||
      resihp_detector_set_confirm_ms(
          c->det, c->o.confirm_slow_ms < 60000 ? c->o.confirm_slow_ms : 60000))
    return RESIHP_ENOMEM;
  for (int i = 0; i < n; i++)
    c->rank_slow[i] = 1.0;
  for (int r = 0; r < c->R; r++) {
    c->reps[r].slow = c->reps[r].run_slow = 1.0;
    resihp__coord_perf_stages(c, r);
  }
  c->wl_step = -1;
  c->perf_step = -1;
  return 0;
}

void resihp__coord_perf_free(resihp__coord_t *c) {
  resihp_detector_destroy(c->det);
  c->det = NULL;
  free(c->rank_slow);
  free(c->rank_state);
  c->rank_state = NULL;
  free(c->wl);
  free(c->cost);
  free(c->pick);
  free(c->tuples);
  free(c->val);
  free(c->fown);
  c->fown = NULL;
  c->fown_n = 0;
  resihp__costplan_free(&c->cplan);
  c->cplan_have = 0;
  resihp__wire_buf_free(&c->cplan_text);
  c->cplan_text_ok = 0;
  c->rank_slow = c->cost = NULL;
  c->wl = NULL;
  c->pick = NULL;
  c->tuples = NULL;
  c->val = NULL;
  c->valcap = 0;
}

void resihp__coord_perf_stages(resihp__coord_t *c, int r) {
  if (!c->det)
    return;
  /* A shrunk replica's rank k holds none of the layers that the other
   * replicas' rank k holds (6,5 of 11 units where they hold 4,3,4), and
   * units differ in cost (an embedding, a classifier): its samples,
   * however scaled, are no measure of theirs. As their peer it was the
   * faster half that their baseline followed, and their healthy ranks
   * then looked slow against it (x1.19 in the regroup bench, a
   * repartition of two healthy replicas for no gain). Alone in a stage
   * (ids past the job's K, one per rank), it is judged against its own
   * baseline and the job's pace; changing its stage restarts its
   * predictor, as a new process's would be. */
  int own = c->reps[r].shrunk_at > 0;
  for (int k = 0; k < c->K; k++)
    resihp_detector_set_stage(c->det, r * c->K + k,
                              own ? c->K + r * c->K + k : k);
}

/* A new process for replica r (a replacement): forget the old one. */
void resihp__coord_perf_reset(resihp__coord_t *c, int r) {
  if (!c->det)
    return;
  resihp__coord_perf_stages(c, r); /* (shrunk, or back to K ranks) */
  for (int k = 0; k < c->K; k++) {
    resihp_detector_reset_rank(c->det, r * c->K + k, (uint64_t)c->step);
    c->rank_slow[r * c->K + k] = 1.0;
    c->rank_state[r * c->K + k] = RESIHP_HEALTH_HEALTHY;
  }
  if (c->reps[r].slow > 1 && c->o.on_health)
    c->o.on_health(c->o.ud, r, 0, "replaced", 1.0, c->step);
  c->reps[r].slow = 1.0;
  c->reps[r].swap_held = 0;
  c->reps[r].decided = 0;
  c->reps[r].healthy_from = c->step;
}

/* Hysteresis: a slowdown that starts or ends, or a factor a quarter off
 * the run's either way. A factor that wobbles around its value (the
 * detector's estimate moves with every few samples) keeps the run going;
 * the next boundary for another reason uses the newest. */
int resihp__coord_slow_moved(const rep_t *p) {
  return (p->slow > 1) != (p->run_slow > 1) || p->slow > 1.25 * p->run_slow ||
         p->run_slow > 1.25 * p->slow;
}

/* PERF [k=K] step=S s=mb:us:tokens:l2:nseq,... */
void resihp__coord_on_perf(resihp__coord_t *c, int k, int r, const char *msg) {
  long s, sh = 0;
  int n = 0, e = 0;
  /* k= is set by the leader's relay for its other ranks */
  /* free-running by cost, the coordinator commits a step once its
   * owners come, which may be after its samples */
  if (!c->det ||
      resihp__wire_get_range(msg, "step", 0,
                             c->phase == P_FREE ? c->S : c->step, &s) ||
      ((e = resihp__wire_get_range(msg, "k", 0, c->K - 1, &sh)) &&
       e != RESIHP_ENOENT) ||
      resihp__coord_room(&c->val, &c->valcap, strlen(msg) + 1) ||
      resihp__wire_get(msg, "s", c->val, c->valcap) ||
      resihp__wire_parse_tuples(c->val, 5, PERF_MAX, c->tuples, c->M, &n)) {
    resihp__coord_refuse(c, k, "bad-perf", 0, msg);
    return;
  }
  if (s + 2 < c->step)
    return; /* too late to matter */
  /* a rank whose layers moved: timed as for its declared share of them */
  double scale = resihp__coord_repart_scale(c, r * c->K + (int)sh);
  for (int i = 0; i < n; i++) {
    const long long *t = &c->tuples[(size_t)i * 5];
    resihp_workload_t w = {(double)t[2], (double)t[3], (double)t[4]};
    if (t[0] >= c->M || t[1] == 0)
      continue;
    /* a bad workload is refused by the detector (logged), nothing kept */
    resihp_detector_record(c->det, r * c->K + (int)sh, (uint64_t)s, &w,
                           (double)t[1] * scale);
  }
  c->samples += n;
  /* Every member rank has sent its samples of step s: judge it now. Else
   * the first sample of the next sampled step would, a report period
   * later (a free run's), or the commit (lockstep, one rank a replica).
   * Lines of two steps that interleave (a relayed rank late) restart the
   * count: the step is then judged the old way. */
  if (s != c->perf_step) {
    c->perf_step = s;
    c->perf_lines = 0;
  }
  if (++c->perf_lines == c->nmembers * c->K)
    resihp_detector_end_iter(c->det, (uint64_t)s);
}

/* WL step=S w=tokens:l2:nseq,... (all M microbatches of step S) */
void resihp__coord_on_wl(resihp__coord_t *c, int k, int r, const char *msg) {
  long s;
  int n = 0;
  /* free-running, the coordinator's step lags: the WL of the step at
   * which the run ends comes with the BEGIN that ends it */
  if (!c->det || r != c->wl_asked ||
      resihp__wire_get_range(msg, "step", c->step,
                             c->phase == P_FREE ? c->S : c->step + 1, &s) ||
      resihp__coord_room(&c->val, &c->valcap, strlen(msg) + 1) ||
      resihp__wire_get(msg, "w", c->val, c->valcap) ||
      resihp__wire_parse_tuples(c->val, 3, PERF_MAX, c->tuples, c->M, &n) ||
      n != c->M) {
    resihp__coord_refuse(c, k, "bad-workloads", 0, msg);
    return;
  }
  for (int i = 0; i < n; i++)
    c->wl[i] = (resihp_workload_t){(double)c->tuples[3 * i],
                                   (double)c->tuples[3 * i + 1],
                                   (double)c->tuples[3 * i + 2]};
  c->wl_step = s;
}

/* A healthy, warm rank of shard k among the contributors, its model into
 * *m; -1 if none. */
static int reference_rank(const resihp__coord_t *c, const int *contrib, int nc,
                          int k, resihp_model_t *m) {
  for (int i = 0; i < nc; i++) {
    int rank = contrib[i] * c->K + k;
    resihp_rank_health_t h;
    if (!resihp_detector_health(c->det, rank, &h) &&
        h.state == RESIHP_HEALTH_HEALTHY &&
        !resihp_detector_model(c->det, rank, m))
      return rank;
  }
  return -1;
}

/* The step's owners by predicted cost into c->owner, with the plan
 * (c->cplan) that any replica can compute them from: 1, or 0 when there
 * are no workloads of this step or no warm predictor for some shard. */
static int assign_by_cost(resihp__coord_t *c, const int *contrib, int nc) {
  resihp__costplan_t *p = &c->cplan;
  p->nc = 0;
  if (c->wl_step != c->step || nc > p->cap)
    return 0;
  for (int k = 0; k < c->K; k++)
    if (reference_rank(c, contrib, nc, k, &p->model[k]) < 0)
      return 0;
  for (int i = 0; i < nc; i++) {
    p->contrib[i] = contrib[i];
    p->slow[i] = c->reps[contrib[i]].slow;
  }
  p->nc = nc;
  if (resihp__costplan_owners(p, c->wl, c->M, c->cost, c->pick, c->owner)) {
    p->nc = 0;
    return 0;
  }
  return 1;
}

int resihp__coord_assign(resihp__coord_t *c, const int *contrib, int nc) {
  int have = c->det && c->o.assign == RESIHP_ASSIGN_COST &&
             assign_by_cost(c, contrib, nc);
  c->cplan_have = have;
  c->cplan_text_ok = 0;
  if (!have) {
    /* without costs, counts by speed (contiguous blocks) */
    double *slow = c->rslow; /* even ignores them */
    for (int i = 0; i < nc; i++)
      slow[i] = c->reps[contrib[i]].slow;
    resihp_assign_mode_t mode = (resihp_assign_mode_t)c->o.assign;
    if (mode == RESIHP_ASSIGN_COST)
      mode = RESIHP_ASSIGN_COUNT;
    int rc = resihp_planner_assign(mode, NULL, c->M, slow, nc, c->pick, NULL);
    if (rc)
      return rc;
    for (int mb = 0; mb < c->M; mb++)
      c->owner[mb] = contrib[c->pick[mb]];
  }
  c->costed += have;
  /* the next step's workloads, from the first contributor */
  c->wl_asked = c->det && c->o.assign == RESIHP_ASSIGN_COST ? contrib[0] : -1;
  return 0;
}

/* A step committed: judge it now when all its samples are in (each leader
 * sent its PERF before its next BEGIN; the other ranks' come through their
 * leader's relay and may be later: then the last of them judges it,
 * resihp__coord_on_perf), and count the steps each member has been slow.
 * Free-running, a rank sends the samples of one step a report period (the
 * same steps on every rank, recovery/job_perf.c: 100 ms in a small job),
 * judged when the last member's are in: a slowdown is then confirmed
 * after a few sampled steps, under a second in a small job. */
void resihp__coord_perf_commit(resihp__coord_t *c) {
  /* free-running, only some steps have samples, which may come after
   * their commit: the next sampled step's first sample judges them */
  if (c->det && c->K == 1 && c->phase != P_FREE)
    resihp_detector_end_iter(c->det, (uint64_t)c->step);
  for (int i = 0; i < c->nmembers; i++) {
    rep_t *p = &c->reps[c->members[i]];
    p->slow_steps = p->slow > 1 ? p->slow_steps + 1 : 0;
    p->slow_total += p->slow > 1;
    /* a free run has no boundary at which to swap: one may be due */
    if (c->phase == P_FREE && p->slow_steps >= SWAP_AFTER_STEPS &&
        !p->swap_held)
      c->swap_due = 1;
    /* nor to move layers: hold for one when it may pay */
    if (c->phase == P_FREE && resihp__coord_repart_wanted(c, c->members[i]))
      resihp__coord_hold(c, "layers may move");
  }
}

/* The mean time of the last steps, up to 8 (s; 0 if unknown). One step
 * alone may read 0 ms: a free run's steps are spread evenly over the time
 * between its reports, in whole ms. */
double resihp__coord_recent_step_s(const resihp__coord_t *c) {
  long last = c->step - 1, first = last;
  while (first > c->base_step && last - first < 8 && c->start_ms[first - 1])
    first--;
  if (first >= last || !c->start_ms[last])
    return 0;
  return (double)(c->start_ms[last] - c->start_ms[first]) / 1000.0 /
         (double)(last - first);
}

int resihp__coord_swap_open(const resihp__coord_t *c) {
  if (!(c->o.swap_cost_s >= 0) || !c->o.spare_free || c->step < 2 ||
      c->nmembers < 2 || !c->o.spare_free(c->o.ud))
    return 0;
  for (int r = 0; r < c->R; r++)
    if (c->reps[r].expected ||
        (c->reps[r].state == R_MEMBER && c->reps[r].catching))
      return 0; /* one change at a time */
  return 1;
}

int resihp__coord_swap_ready(const rep_t *p) {
  return p->slow_steps >= SWAP_AFTER_STEPS;
}

/* The healthy step of the job whose last steps ran with member r at
 * factor f, by speeds that add up (the last steps' time is the absorbed
 * one). */
static double healthy_step_s(const resihp__coord_t *c, double f) {
  int n = c->nmembers;
  return resihp__coord_recent_step_s(c) * (n - 1 + 1 / f) / n;
}

double resihp__coord_swap_gain(const resihp__coord_t *c, int r, double cost_s) {
  const rep_t *p = &c->reps[r];
  return resihp_planner_swap_gain_s(c->nmembers, p->slow,
                                    healthy_step_s(c, p->slow),
                                    (double)(c->S - c->step), cost_s);
}

double resihp__coord_speedup_gain(const resihp__coord_t *c, int r,
                                  double f_after) {
  const rep_t *p = &c->reps[r];
  double h = healthy_step_s(c, p->slow), left = (double)(c->S - c->step);
  return resihp_planner_swap_gain_s(c->nmembers, p->slow, h, left, 0) -
         resihp_planner_swap_gain_s(c->nmembers, f_after > 1 ? f_after : 1, h,
                                    left, 0);
}

/* In a free run, the member most worth swapping for a spare now that no
 * boundary was asked for yet (-1 if none). A member whose slowness was
 * already answered by a swap or a move of its layers is left out (one
 * decision, coord_decide.c, which decides at the boundary). */
static int swap_candidate(const resihp__coord_t *c) {
  int pick = -1;
  double best = 0;
  if (!resihp__coord_swap_open(c))
    return -1;
  int measured;
  double cost = resihp__coord_switch_cost(c, RESIHP__DECIDE_SWAP, &measured);
  for (int i = 0; i < c->nmembers; i++) {
    int r = c->members[i];
    const rep_t *p = &c->reps[r];
    if (!resihp__coord_swap_ready(p) || p->swap_held ||
        p->decided > 1 + RESIHP__DECIDE_ABSORB)
      continue;
    double gain = resihp__coord_swap_gain(c, r, cost);
    if (gain > best) {
      best = gain;
      pick = r;
    }
  }
  return pick;
}

void resihp__coord_hold_for_swap(resihp__coord_t *c) {
  if (!c->swap_due || c->phase != P_FREE)
    return;
  c->swap_due = 0;
  int r = swap_candidate(c);
  if (r < 0)
    return; /* asked again after the next commit (a spare may come) */
  c->reps[r].swap_held = 1;
  resihp__coord_hold(c, "a slow member is worth a spare");
}

int resihp__coord_replica_speed(const resihp__coord_t *c, int r, double *slow,
                                int *quota, const char **state) {
  if (r < 0 || r >= c->R)
    return -1;
  int worst = RESIHP_HEALTH_HEALTHY;
  for (int k = 0; c->rank_state && k < c->K; k++)
    if (c->rank_state[r * c->K + k] > worst)
      worst = c->rank_state[r * c->K + k];
  *state = resihp_health_state_name((resihp_health_state_t)worst);
  *slow = c->reps[r].slow > 1 ? c->reps[r].slow : 1.0;
  *quota = c->reps[r].quota;
  return 0;
}
