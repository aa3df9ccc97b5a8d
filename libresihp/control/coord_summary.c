/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator's final summary: steps done, throughput and the median
 * step, every failure (fail_t records, coord_members.c) with the
 * survivors' stall and the replacement's rejoin time, the replica that
 * stopped the run (ABORT), the spares, and whether the replicas' results
 * agree.
 */
#include "config.h"

#include "../transport/mesh.h"
#include "coord_internal.h"

#include <resihp/planner.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Duration of step s (its START to the next one, or to the end); -1 when
 * not known (not completed, or before a coordinator failover). */
static int64_t step_ms(const resihp__coord_t *c, long s) {
  if (s < 0 || s >= c->step || !c->start_ms[s])
    return -1;
  int64_t end = s + 1 < c->step ? c->start_ms[s + 1] : c->t_done;
  return end ? end - c->start_ms[s] : -1;
}

/* The step in which a fault happened: the last one that started before
 * it, looked for from the step it was detected in (or announced for). A
 * coordinator restored after a failover knows when its first step and the
 * steps since it took over started, not those in between: the search
 * stops at a step whose start it does not know instead of reading that
 * start as "before the fault" (every fault then fell in the first step). */
static long fault_step(const resihp__coord_t *c, const fail_t *x, long steps) {
  long s = x->step, last = steps < c->S ? steps : c->S - 1;
  if (!c->start_ms || s < c->base_step || s > last)
    return s;
  while (s < last && c->start_ms[s + 1] && c->start_ms[s + 1] <= x->t_fault)
    s++;
  while (s > c->base_step && c->start_ms[s] > x->t_fault && c->start_ms[s - 1])
    s--;
  return s;
}

/* The one decision for slow replicas (coord_decide.c): how often each
 * answer was chosen, the switch costs used at the end (measured or the
 * defaults), and per replica the last swap or move chosen, predicted
 * against measured. */
static void decisions(const resihp__coord_t *c, FILE *f) {
  long n = 0;
  for (int k = 0; k < RESIHP__DECIDE__N; k++)
    n += c->decisions[k];
  if (!n)
    return;
  char cost[RESIHP__DECIDE__N][64];
  for (int k = RESIHP__DECIDE_REPART; k < RESIHP__DECIDE__N; k++) {
    int measured;
    double s = resihp__coord_switch_cost(c, k, &measured);
    if (k == RESIHP__DECIDE_SWAP && c->o.swap_cost_s < 0)
      snprintf(cost[k], sizeof(cost[k]), "never (swaps off)");
    else if (measured == 1)
      snprintf(cost[k], sizeof(cost[k]), "%.3g s (mean of %ld measured)", s,
               c->cost_n[k]);
    else if (measured == 2)
      snprintf(cost[k], sizeof(cost[k]), "%.3g s (mean launch of %ld steps)",
               s, c->launch_n);
    else
      snprintf(cost[k], sizeof(cost[k]), "%.3g s (default)", s > 0 ? s : 0);
  }
  fprintf(f,
          "  decisions:              %ld absorb, %ld repartition, %ld swap; "
          "switch costs: repartition %s, swap %s\n",
          c->decisions[RESIHP__DECIDE_ABSORB],
          c->decisions[RESIHP__DECIDE_REPART],
          c->decisions[RESIHP__DECIDE_SWAP], cost[RESIHP__DECIDE_REPART],
          cost[RESIHP__DECIDE_SWAP]);
  for (int r = 0; r < c->R; r++) {
    const rep_t *p = &c->reps[r];
    if (!p->acted)
      continue;
    char m[64] = "not measured (too few steps after)";
    if (p->has_measured > 0)
      snprintf(m, sizeof(m), "%.3g s measured", p->measured);
    else if (p->has_measured < 0)
      snprintf(m, sizeof(m), "not measured (the members changed after)");
    fprintf(f,
            "  replica %d decided:      %s at step %ld: %.3g s predicted "
            "saved, %s\n",
            r, resihp__decide_name(p->acted - 1), p->acted_at, p->predicted, m);
  }
}

/* What the fail-slow detector saw and what was done about it, per replica
 * that was ever slow. */
static void fail_slow(const resihp__coord_t *c, FILE *f) {
  static const char *const how[] = {"equal counts (no adaptation)",
                                    "counts by speed", "predicted cost"};
  fprintf(f,
          "  fail-slow:              %ld samples; microbatches by %s (%ld "
          "steps with workloads); %ld swap(s) for a spare; %ld "
          "repartition(s); %ld shrink(s)\n",
          c->samples,
          how[c->o.assign >= 0 && c->o.assign <= 2 ? c->o.assign : 0],
          c->costed, c->swaps, c->repartitions, c->shrinks);
  for (int r = 0; r < c->R; r++) {
    const rep_t *p = &c->reps[r];
    if (p->worst_slow <= 1)
      continue;
    char act[96];
    if (p->swapped_at >= 0)
      snprintf(act, sizeof(act), "swapped for a spare at step %ld",
               p->swapped_at);
    else if (p->slow > 1 && c->o.assign == RESIHP_ASSIGN_EVEN)
      snprintf(act, sizeof(act),
               "still slow at the end, equal counts (nothing moved)");
    else if (p->slow > 1)
      snprintf(act, sizeof(act), "still slow at the end, fewer microbatches");
    else if (c->o.assign == RESIHP_ASSIGN_EVEN)
      snprintf(act, sizeof(act), "recovered (equal counts: nothing moved)");
    else
      snprintf(act, sizeof(act), "recovered, its microbatches returned");
    fprintf(f,
            "  replica %d slow:         up to x%.2f, first at step %ld; %ld "
            "step(s) slow in %ld episode(s); %s\n",
            r, p->worst_slow, p->slow_since, p->slow_total, p->slow_episodes,
            act);
  }
  /* the replicas whose layers moved (coord_repart.c): the cut points
   * now and as declared */
  for (int r = 0; r < c->R; r++) {
    const rep_t *p = &c->reps[r];
    if (!p->nmoves || !p->lpart)
      continue;
    fprintf(f,
            "  replica %d layers:       moved %ld time(s), last at step %ld; "
            "cut at %s now, declared %s\n",
            r, p->nmoves, p->moved_at, c->lparts[p->lpart - 1].text,
            p->home[0] ? p->home : "?");
  }
  decisions(c, f);
  /* the replicas that lost ranks with no spare left (coord_shrink.c) */
  for (int r = 0; r < c->R; r++) {
    const rep_t *p = &c->reps[r];
    if (!p->shrunk_at || !p->lpart)
      continue;
    fprintf(f,
            "  replica %d ranks:        %d of %d since step %ld (no spare "
            "left), cut at %s, predicted step x%.2f\n",
            r, resihp__coord_rep_k(c, r), c->K, p->shrunk_at - 1,
            c->lparts[p->lpart - 1].text[0] ? c->lparts[p->lpart - 1].text
                                            : "- (one rank holds all)",
            p->shrink_slow);
  }
}

/* A failure that went with a lost primary's node (fail_t.takeover): the
 * restored coordinator saw neither the fault nor the survivors' wait, so
 * what it knows is written as bounds, and what it does not know is said:
 * the step (between the last record's and the last step a survivor said
 * it had started), the time (within the standby's bounds on the primary's
 * death, resihp__coord_set_loss, else only "before the takeover"), hence
 * the stall (until the first step after the takeover) and the rejoin.
 * Why it went (its node DOWN, or it did not vouch) is its failure's why.
 * *stall_ms and *rejoin_s get the upper bounds (-1: unknown). */
static void takeover_texts(const resihp__coord_t *c, const fail_t *x,
                           char *st, size_t stlen, char *det, size_t detlen,
                           char *sl, size_t sllen, char *rj, size_t rjlen,
                           double *stall_ms, double *rejoin_s) {
  int bounded = c->loss_hi_ms > 0;
  int64_t lo = bounded ? c->loss_lo_ms : 0, hi = bounded ? c->loss_hi_ms : 0;
  if (c->again_step > x->step)
    snprintf(st, stlen, "%ld-%ld (not known exactly: between the last record "
             "and the survivors' last step)",
             x->step, c->again_step);
  else
    snprintf(st, stlen, "%ld", x->step);
  if (bounded)
    snprintf(det, detlen,
             "went with the primary between %lld and %lld ms before "
             "the takeover",
             (long long)(x->t_detect - hi), (long long)(x->t_detect - lo));
  else
    snprintf(det, detlen, "lost before the takeover (when, not known)");
  *stall_ms = *rejoin_s = -1;
  if (!c->resumed_ms)
    snprintf(sl, sllen, "n/a (no step after the takeover)");
  else if (bounded) {
    *stall_ms = (double)(c->resumed_ms - lo);
    snprintf(sl, sllen, "between %.1f and %.1f s (to the first step after "
             "the takeover)",
             (double)(c->resumed_ms - hi) / 1000.0, *stall_ms / 1000.0);
  } else {
    *stall_ms = (double)(c->resumed_ms - x->t_detect);
    snprintf(sl, sllen, "at least %.1f s (from the takeover; before it, not "
             "known)",
             *stall_ms / 1000.0);
  }
  if (x->t_train && bounded) {
    *rejoin_s = (double)(x->t_train - lo) / 1000.0;
    snprintf(rj, rjlen, "replacement training again %.2f-%.2f s after the "
             "fault",
             (double)(x->t_train - hi) / 1000.0, *rejoin_s);
  } else if (x->t_train) {
    snprintf(rj, rjlen, "replacement training again at least %.2f s after "
             "the fault",
             (double)(x->t_train - x->t_detect) / 1000.0);
  }
}

int resihp__coord_summary(const resihp__coord_t *c, FILE *f,
                          double *seconds_out) {
  long steps = c->step;
  int64_t *d = malloc(sizeof(int64_t) * (size_t)(steps + 1));
  int n = 0;
  for (long s = 0; d && s < steps; s++) {
    int64_t x = step_ms(c, s);
    if (x >= 0)
      d[n++] = x;
  }
  double median = 0;
  if (n) {
    qsort(d, (size_t)n, sizeof(int64_t), cmp_i64);
    median = (double)d[n / 2];
  }
  free(d);
  /* still running: the launcher was stopped at once, mid-step */
  int64_t t_end = c->t_done ? c->t_done : resihp__now_ms();
  /* a resumed run started at base_step (coord_save.c) */
  long run = steps - c->base_step;
  double all = run > 0 && c->start_ms && c->start_ms[c->base_step]
                   ? (double)(t_end - c->start_ms[c->base_step]) / 1000.0
                   : 0.0;
  /* training is the run's time but what it spent waiting for a
   * coordinator that was not running (a frozen host: coord_loop.c) */
  double waited = (double)c->away_ms / 1000.0;
  if (waited > all)
    waited = all;
  double secs = all - waited;
  if (seconds_out)
    *seconds_out = secs;
  fprintf(f, "resihp-run summary\n");
  fprintf(f, "  steps completed:        %ld of %ld (%d microbatches each)\n",
          steps, c->S, c->M);
  fprintf(f,
          "  training time:          %.3f s (%.2f steps/s, %.1f "
          "microbatches/s; median step %.0f ms)\n",
          secs, secs > 0 ? run / secs : 0.0,
          secs > 0 ? (double)run * c->M / secs : 0.0, median);
  if (waited > 0)
    fprintf(f,
            "  waiting:                %.3f s of the run's %.3f s (the "
            "coordinator did not run its loop: its process stopped, starved "
            "or busy elsewhere)\n",
            waited, all);
  /* what the steps cost the coordinator: a START each, or nothing (free);
   * a step recovered or restarted within a run may take a second START */
  fprintf(f,
          "  control:                %ld step start(s) through the "
          "coordinator, %ld step(s) ran free\n",
          c->starts, run > c->starts ? run - c->starts : 0);
  fprintf(f,
          "  failures:               %d (%ld microbatches reassigned "
          "within their step)%s\n",
          c->nfails - (int)c->swaps, c->reassigned,
          c->swaps ? "; swaps for a spare are listed with them" : "");
  /* (a swap's record is a fail_t of kind "slow": coord_schedule.c) */
  double worst_stall = 0, worst_rejoin = 0;
  for (int i = 0; i < c->nfails; i++) {
    const fail_t *x = &c->fails[i];
    long s = fault_step(c, x, steps);
    int64_t sd = step_ms(c, s);
    double stall = sd >= 0 ? (double)sd - median : -1;
    if (stall < 0 && sd >= 0)
      stall = 0;
    double rejoin =
        x->t_train ? (double)(x->t_train - x->t_fault) / 1000.0 : -1;
    if (stall > worst_stall && !x->takeover)
      worst_stall = stall;
    if (rejoin > worst_rejoin && !x->takeover)
      worst_rejoin = rejoin;
    char rj[96];
    if (rejoin >= 0)
      snprintf(rj, sizeof(rj), "replacement training again after %.2f s",
               rejoin);
    else if (x->t_admit)
      snprintf(rj, sizeof(rj), "its replacement failed while catching up");
    else
      snprintf(rj, sizeof(rj), "not replaced");
    char sl[96];
    if (stall >= 0)
      snprintf(sl, sizeof(sl), "%.0f ms", stall);
    else if (s < steps && c->start_ms && s >= c->base_step &&
             (!c->start_ms[s] || !c->start_ms[s + 1]))
      snprintf(sl, sizeof(sl), "n/a (before a coordinator failover)");
    else
      snprintf(sl, sizeof(sl), "n/a (step not completed)");
    /* An injected fault's time is known; an outside one's is not, only
     * how long before the detection the replica last showed life. */
    char det[128], st[128];
    snprintf(det, sizeof(det),
             x->outside ? "outside fault: last sign of life %lld ms before "
                          "detection"
                        : "detected after %lld ms",
             (long long)(x->t_detect - x->t_fault));
    snprintf(st, sizeof(st), "%ld", s);
    if (x->takeover) {
      double tstall, trejoin;
      takeover_texts(c, x, st, sizeof(st), det, sizeof(det), sl, sizeof(sl),
                     rj, sizeof(rj), &tstall, &trejoin);
      if (tstall > worst_stall)
        worst_stall = tstall;
      if (trejoin > worst_rejoin)
        worst_rejoin = trejoin;
    }
    fprintf(f,
            "  %s %d: replica %d, %s%s at step %s (%s); %s; survivors' "
            "stall %s; %s\n",
            strcmp(x->kind, "slow") ? "failure" : "swap", i + 1, x->replica,
            x->kind, x->catchup ? " during catch-up" : "", st, x->why, det, sl,
            rj);
  }
  if (c->nfails && worst_rejoin > 0)
    fprintf(f, "  worst survivor stall:   %.0f ms; worst rejoin: %.2f s\n",
            worst_stall, worst_rejoin);
  else if (c->nfails)
    fprintf(f, "  worst survivor stall:   %.0f ms; no replica rejoined\n",
            worst_stall);
  fail_slow(c, f);
  if (c->abort_replica >= 0)
    fprintf(f, "  stopped by replica %d:   %s (its program; no replacement)\n",
            c->abort_replica, c->abort_why);
  resihp__burnin_t bref;
  int nref = c->nspares ? resihp__coord_burnin_ref(c, &bref) : 0;
  if (nref) {
    char g[96] = "";
    if (bref.gpus > 0)
      snprintf(g, sizeof(g), ", GPU GEMM %.1f ms, device all-reduce %.1f ms",
               bref.gpu_gemm_us / 1e3, bref.gpu_allreduce_us / 1e3);
    fprintf(f,
            "  spares' burn-in against: compute %.0f ms, all-reduce of %.1f "
            "MiB %.0f ms%s (median of %d replica(s), at their start)\n",
            bref.compute_us / 1e3, (double)bref.bytes / (1 << 20),
            bref.allreduce_us / 1e3, g, nref);
  }
  for (int i = 0; i < c->nspares; i++) {
    const spare_t *sp = &c->spares[i];
    char extra[260] = "", bi[64] = "";
    if (sp->state == RESIHP__SPARE_PROMOTED)
      snprintf(extra, sizeof(extra), " to replica %d", sp->replica);
    else if (sp->state == RESIHP__SPARE_SUSPECT)
      snprintf(extra, sizeof(extra), " (%s; refused, checked again later)",
               sp->summary);
    else if (sp->summary[0])
      snprintf(extra, sizeof(extra), " (%s)", sp->summary);
    /* the last burn-in's own time: what promoting it would have waited
     * for had it not run ahead, in its check step */
    if (sp->burnin.bytes > 0)
      snprintf(bi, sizeof(bi), "; last burn-in %.0f ms",
               (double)(sp->burnin.compute_us + sp->burnin.allreduce_us +
                        sp->burnin.gpu_gemm_us + sp->burnin.gpu_allreduce_us) /
                   1e3);
    fprintf(f, "  spare %s: %s%s; %ld registration(s)%s\n", sp->node,
            resihp__spare_state_name(sp->state), extra, sp->registrations,
            bi);
  }
  const char *ref = NULL;
  int agree = 1, nres = 0;
  for (int r = 0; r < c->R; r++) {
    const rep_t *p = &c->reps[r];
    if (!p->finished || !p->result[0] || !strcmp(p->result, "-"))
      continue;
    nres++;
    if (!ref)
      ref = p->result;
    else if (strcmp(ref, p->result))
      agree = 0;
  }
  for (int r = 0; r < c->R && !agree; r++)
    if (c->reps[r].finished)
      fprintf(f, "  replica %d result:      %s\n", r, c->reps[r].result);
  fprintf(f, "  final result:           %s (%d replicas %s)\n",
          ref ? ref : "none", nres, agree ? "agree" : "DISAGREE");
  return agree && ref ? 0 : -1;
}
