/* SPDX-License-Identifier: BSD-3-Clause */
/* One decision for a slow member (issue 32, item 4).
 *
 * A member found slow (coord_perf.c) can be answered three ways: absorb
 * (it keeps fewer microbatches: nothing to switch), a move of its layers
 * between its ranks (coord_repart.c, when its program can move them) and
 * a swap for a spare (when the launcher has one). At a step boundary,
 * before the next GO, each is priced as the time it saves over the steps
 * left less its switch cost, and only the best is carried out, once per
 * slowness: a member whose slowness a move or a swap answered is not
 * answered again until its slowness changes (a new episode, or a factor
 * a quarter off: coord_perf.c), so a swap never follows a move for the
 * same slowness, nor the other way round. Absorb is re-examined at every
 * boundary (a spare may come), and said again only when the choice
 * changes. While a spare is free, the decision waits until a swap may be
 * chosen (the member slow for a few steps in a row), so that the two are
 * compared, not taken in the order they become possible.
 *
 * Prices, from the formulas the two paths had: a swap's is
 * resihp_planner_swap_gain_s (the member out for the switch cost while the
 * others carry its share, then all at full speed); a move's is the same
 * formula at no cost, from the member's factor now to the one predicted
 * after the move (resihp__repart_slowdown of the new partition), less the
 * move's switch cost: microbatches follow speed, so the job gains what the
 * member's speed adds to the sum, not the member's own step ratio.
 *
 * Switch costs are measured in this job: a move, from the boundary that
 * moved the layers to the next commit, less the steps in between at the
 * job's step before it (the stall the move added); a swap, from the swap
 * to the commit of the step in which its replacement caught up (how long
 * the replica was out, which is what the swap's formula prices). Each
 * kind's estimate is the mean of those measured, the configured default
 * (swap_cost_s, repart_cost_s or two recent steps) before the first. A
 * swap before the first is priced at the job's own launches when the
 * launcher times them (resihp__coord_note_launch: resihp-run does when no
 * --swap-cost is given): the fixed default (180 s) stood for a slow
 * cluster's launch and kept a swap that takes 1 s here from being chosen.
 * The sums, counts and decisions are in the state record (coord_snapshot.c:
 * "w"), and so are the launches ("wl"), so a standby that takes over goes
 * on from them; a switch being timed at the takeover is not measured.
 *
 * After the fact, the chosen action's gain is measured once eight steps
 * ran after it settled (a move: its own step; a swap: the replacement's
 * catch-up): the time saved so far against the steps at the job's step
 * before, plus the steps left at the new pace's saving.
 *
 * Cost per boundary: O(members) for the decision, O(1) a commit. */
#include "config.h"

#include "../transport/mesh.h"
#include "coord_internal.h"

#include <resihp/planner.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Steps after a switch settled before its gain is measured (the window of
 * resihp__coord_recent_step_s). */
#define GAIN_AFTER_STEPS 8

const char *resihp__decide_name(int kind) {
  static const char *const names[] = {"absorb", "repartition", "swap"};
  return kind >= 0 && kind < RESIHP__DECIDE__N ? names[kind] : "unknown";
}

double resihp__coord_switch_cost(const resihp__coord_t *c, int kind,
                                 int *measured) {
  *measured = c->cost_n[kind] > 0;
  if (*measured)
    return c->cost_sum[kind] / (double)c->cost_n[kind];
  if (kind == RESIHP__DECIDE_SWAP && c->launch_n > 0 && c->o.swap_cost_s >= 0) {
    *measured = 2;
    return c->launch_sum / (double)c->launch_n;
  }
  if (kind == RESIHP__DECIDE_SWAP)
    return c->o.swap_cost_s;
  if (kind == RESIHP__DECIDE_REPART)
    return c->o.repart_cost_s > 0 ? c->o.repart_cost_s
                                  : 2 * resihp__coord_recent_step_s(c);
  return 0;
}

const char *resihp__coord_cost_source(int measured) {
  return measured == 1 ? "measured" : measured == 2 ? "launches" : "default";
}

void resihp__coord_note_launch(resihp__coord_t *c, double s) {
  if (s >= 0 && isfinite(s)) {
    c->launch_sum += s;
    c->launch_n++;
  }
}

static void note_cost(resihp__coord_t *c, int kind, int r, double s) {
  c->cost_sum[kind] += s;
  c->cost_n[kind]++;
  int measured;
  double est = resihp__coord_switch_cost(c, kind, &measured);
  logc(RESIHP_LOG_INFO,
       "replica %d: the %s took %.3g s (the job's estimate is now %.3g s, "
       "from %ld measured)",
       r, resihp__decide_name(kind), s, est, c->cost_n[kind]);
  char why[96];
  snprintf(why, sizeof(why), "estimate=%.3gs measured=%ld", est,
           c->cost_n[kind]);
  resihp__record_event(c->o.record, "switch-cost", c->step, r, c->epoch,
                       resihp__decide_name(kind), why, s);
}

void resihp__coord_time_move(resihp__coord_t *c, int r) {
  c->rm_r = r;
  c->rm_step = c->step;
  c->rm_epoch = c->epoch + 1; /* the GO that moves them */
  c->rm_ms = resihp__now_ms();
  c->rm_step_s = resihp__coord_recent_step_s(c);
  if (c->dg_r == r) {
    c->dg_settle = c->step + 1 + GAIN_AFTER_STEPS;
    c->dg_epoch = c->rm_epoch;
  }
}

void resihp__coord_time_swap(resihp__coord_t *c, int r) {
  c->sw_r = r;
  c->sw_ms = resihp__now_ms();
}

/* Start measuring the gain of the action chosen for member r. */
static void measure_gain(resihp__coord_t *c, int r, int kind, double gain) {
  rep_t *p = &c->reps[r];
  p->acted = 1 + kind;
  p->acted_at = c->step;
  p->predicted = gain;
  p->has_measured = 0;
  c->dg_r = r;
  c->dg_step = c->step;
  c->dg_ms = resihp__now_ms();
  c->dg_before_s = resihp__coord_recent_step_s(c);
  c->dg_settle = -1; /* set when the switch is over */
}

static void fmt_option(char *b, size_t n, const char *name, int ok,
                       double net) {
  if (ok)
    snprintf(b, n, "%s=%.3gs", name, net);
  else
    snprintf(b, n, "%s=n/a", name);
}

/* Say what was chosen for member r and why. */
static void say(resihp__coord_t *c, int r, int pick, const int *ok,
                const double *net, const double *cost, const int *measured) {
  char opt[RESIHP__DECIDE__N][48], costs[160];
  for (int k = 0; k < RESIHP__DECIDE__N; k++)
    fmt_option(opt[k], sizeof(opt[k]), resihp__decide_name(k), ok[k], net[k]);
  char sw[48] = "never"; /* swaps off */
  if (c->o.swap_cost_s >= 0)
    snprintf(sw, sizeof(sw), "%.3gs (%s)", cost[RESIHP__DECIDE_SWAP],
             resihp__coord_cost_source(measured[RESIHP__DECIDE_SWAP]));
  snprintf(costs, sizeof(costs), "cost: repartition=%.3gs (%s), swap=%s",
           cost[RESIHP__DECIDE_REPART],
           resihp__coord_cost_source(measured[RESIHP__DECIDE_REPART]), sw);
  logc(pick == RESIHP__DECIDE_ABSORB ? RESIHP_LOG_INFO : RESIHP_LOG_WARN,
       "replica %d slow x%.2f at step %ld: %s chosen; saved over the %ld "
       "steps left: %s %s %s; %s",
       r, c->reps[r].slow, c->step, resihp__decide_name(pick), c->S - c->step,
       opt[0], opt[1], opt[2], costs);
  char why[320];
  snprintf(why, sizeof(why), "%s %s %s %s", opt[0], opt[1], opt[2], costs);
  resihp__record_event(c->o.record, "decision", c->step, r, c->epoch,
                       resihp__decide_name(pick), why,
                       net[pick] > 0 ? net[pick] : 0);
  c->decisions[pick]++;
}

/* Member r's options now: 1 when they may be compared (0: wait for a
 * swap to become possible), the net gains (ok: possible) and what the
 * move would be (decide_*). */
static int options(resihp__coord_t *c, int r, int swap_open, int *ok,
                   double *net, double *cost, int *measured) {
  rep_t *p = &c->reps[r];
  for (int k = 0; k < RESIHP__DECIDE__N; k++) {
    ok[k] = k == RESIHP__DECIDE_ABSORB;
    net[k] = 0;
    cost[k] = resihp__coord_switch_cost(c, k, &measured[k]);
  }
  if (swap_open) {
    if (!resihp__coord_swap_ready(p)) {
      p->repart_asked = 0; /* a free run: hold again (coord_perf.c) */
      return 0;
    }
    net[RESIHP__DECIDE_SWAP] =
        resihp__coord_swap_gain(c, r, cost[RESIHP__DECIDE_SWAP]);
    ok[RESIHP__DECIDE_SWAP] = isfinite(net[RESIHP__DECIDE_SWAP]);
  }
  double ratio;
  if (resihp__coord_repart_plan(c, r, c->decide_cur, c->decide_home,
                                c->decide_out, &ratio)) {
    double after = resihp__repart_slowdown(
        c->nlayers, resihp__coord_rep_k(c, r),
        c->rank_slow + (size_t)r * (size_t)c->K,
        c->decide_out, c->decide_home, p->quota > 0 ? p->quota : 1);
    double gain = c->nmembers > 1
                      ? resihp__coord_speedup_gain(c, r, after)
                      /* alone, its step is the job's */
                      : (1 - ratio) * resihp__coord_recent_step_s(c) *
                            (double)(c->S - c->step);
    c->decide_ratio = ratio;
    c->decide_gain = gain;
    net[RESIHP__DECIDE_REPART] = gain - cost[RESIHP__DECIDE_REPART];
    ok[RESIHP__DECIDE_REPART] = 1;
  }
  return 1;
}

int resihp__coord_decide(resihp__coord_t *c) {
  c->decide_r = -1;
  if (c->stop || !resihp__coord_quiet(c))
    return -1;
  int swap_open = resihp__coord_swap_open(c);
  int ok[RESIHP__DECIDE__N], measured[RESIHP__DECIDE__N];
  double net[RESIHP__DECIDE__N], cost[RESIHP__DECIDE__N];
  /* the member whose answer saves most is the one changed now (one
   * change a boundary: the others are decided again at the next) */
  int best_r = -1;
  double best = 0;
  for (int i = 0; i < c->nmembers; i++) {
    int r = c->members[i];
    rep_t *p = &c->reps[r];
    if (!(p->slow > 1) || p->decided > 1 + RESIHP__DECIDE_ABSORB)
      continue; /* healthy, or its slowness answered */
    if (!options(c, r, swap_open, ok, net, cost, measured))
      continue;
    int pick = RESIHP__DECIDE_ABSORB; /* ties: the least disturbing */
    for (int k = 1; k < RESIHP__DECIDE__N; k++)
      if (ok[k] && net[k] > net[pick])
        pick = k;
    if (pick != RESIHP__DECIDE_ABSORB) {
      if (net[pick] > best) {
        best = net[pick];
        best_r = r;
      }
      continue;
    }
    if (p->decided != 1 + pick)
      say(c, r, pick, ok, net, cost, measured);
    p->decided = 1 + pick;
  }
  if (best_r < 0)
    return -1;
  rep_t *p = &c->reps[best_r];
  options(c, best_r, swap_open, ok, net, cost, measured); /* its move */
  int pick = ok[RESIHP__DECIDE_SWAP] &&
                     net[RESIHP__DECIDE_SWAP] > net[RESIHP__DECIDE_REPART]
                 ? RESIHP__DECIDE_SWAP
                 : RESIHP__DECIDE_REPART;
  say(c, best_r, pick, ok, net, cost, measured);
  p->decided = 1 + pick;
  measure_gain(c, best_r, pick, net[pick]);
  if (pick == RESIHP__DECIDE_SWAP)
    return best_r;
  c->decide_r = best_r; /* resihp__coord_repart_boundary moves them */
  return -1;
}

/* The chosen action's gain, once GAIN_AFTER_STEPS steps ran after it
 * settled: the time saved so far against the job's step before it, and
 * the steps left at the saving the new pace makes. */
static void gain_after(resihp__coord_t *c, int64_t now) {
  if (c->dg_r < 0 || c->dg_settle < 0 || c->step < c->dg_settle)
    return;
  rep_t *p = &c->reps[c->dg_r];
  double after = resihp__coord_recent_step_s(c), before = c->dg_before_s;
  int r = c->dg_r;
  c->dg_r = -1;
  if (!(after > 0) || !(before > 0))
    return;
  int kind = p->acted - 1;
  if (c->epoch != c->dg_epoch) {
    /* a failure, a shrink or another move in its steps after (a new
     * epoch) stalled them too: what they took is not the action's (a
     * move killed 4 steps after, then shrunk, read -163 s) */
    p->has_measured = -1;
    logc(RESIHP_LOG_INFO,
         "replica %d: the %s at step %ld: its gain is not measured (the "
         "members changed in the %d steps after it)",
         r, resihp__decide_name(kind), p->acted_at, GAIN_AFTER_STEPS);
    return;
  }
  double so_far = (double)(c->step - c->dg_step) * before -
                  (double)(now - c->dg_ms) / 1000.0;
  p->measured = so_far + (double)(c->S - c->step) * (before - after);
  p->has_measured = 1;
  logc(RESIHP_LOG_INFO,
       "replica %d: the %s at step %ld: the job's step %.3g s before, %.3g s "
       "after: %.3g s saved over the steps left (predicted %.3g s)",
       r, resihp__decide_name(kind), p->acted_at, before, after, p->measured,
       p->predicted);
  char why[128];
  snprintf(why, sizeof(why),
           "step-before=%.3gs step-after=%.3gs predicted=%.3gs", before, after,
           p->predicted);
  resihp__record_event(c->o.record, "outcome", c->step, r, c->epoch,
                       resihp__decide_name(kind), why,
                       p->measured > 0 ? p->measured : 0);
}

void resihp__coord_decide_commit(resihp__coord_t *c) {
  int64_t now = resihp__now_ms();
  if (c->rm_r >= 0 && c->step > c->rm_step) {
    /* a failure since (a new epoch) stalled it too: not the move's */
    if (c->epoch == c->rm_epoch && resihp__coord_is_member(c, c->rm_r)) {
      double stall = (double)(now - c->rm_ms) / 1000.0 -
                     (double)(c->step - c->rm_step) * c->rm_step_s;
      note_cost(c, RESIHP__DECIDE_REPART, c->rm_r, stall > 0 ? stall : 0);
    }
    c->rm_r = -1;
  }
  if (c->sw_r >= 0) {
    const rep_t *p = &c->reps[c->sw_r];
    /* caught up: the step it was admitted at (catching) committed */
    if (p->state == R_MEMBER && !p->catching) {
      note_cost(c, RESIHP__DECIDE_SWAP, c->sw_r,
                (double)(now - c->sw_ms) / 1000.0);
      if (c->dg_r == c->sw_r) {
        c->dg_settle = c->step + GAIN_AFTER_STEPS;
        c->dg_epoch = c->epoch;
      }
      c->sw_r = -1;
    }
  }
  gain_after(c, now);
}
