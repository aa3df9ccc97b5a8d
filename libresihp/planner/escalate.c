/* SPDX-License-Identifier: BSD-3-Clause */
/* Escalation: what to do when one device of a running plan degrades.
 *
 * Options are ordered by how much they disturb the job: absorb the slowness
 * by moving microbatches to other replicas (quotas only), move layers off
 * the slow stage, drop the device from its TP group (the group falls back
 * to the next power of two, t/2, at half its throughput and memory), swap
 * its node for a hot spare, or relaunch the replica's step in place. Each
 * is priced as the time to run the next `horizon_iters` iterations: a
 * whole-job stall to switch plus the iterations at the new predicted time;
 * spare and relaunch instead take the replica offline while the others go
 * on with its quota (non-blocking catch-up), then run at the repaired
 * speed (for a relaunch, repaired with probability relaunch_cure). Every
 * iteration time comes from the same cost model as the plan. */
#include "config.h"

#include "planner-int.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

void resihp_escalation_costs_init(resihp_escalation_costs_t *c) {
  *c = (resihp_escalation_costs_t){
      .horizon_iters = 1000,
      .quota_switch_s = 0.5,
      .repartition_s = 20,
      .regroup_s = 60,
      .spare_swap_s = 180,
      .relaunch_s = 120,
      .relaunch_cure = 0.5,
  };
}

const char *resihp_escalation_name(resihp_escalation_t kind) {
  static const char *const names[] = {"absorb", "repartition", "regroup",
                                      "spare", "relaunch"};
  return (unsigned)kind < RESIHP_ESC__COUNT ? names[kind] : "unknown";
}

/* Iteration time with replica r replaced by (fill, step), or removed when
 * fill is infinite. INFINITY when no replica is left. */
static double iter_with(const resihp_plan_t *P, resihp_replica_class_t *cls,
                        int r, double fill, double step) {
  int live = 0;
  for (int i = 0; i < P->dp; i++) {
    cls[i] = (resihp_replica_class_t){P->fill[i], P->step[i], 1, 0, 0};
    if (i == r)
      cls[i] = (resihp_replica_class_t){isfinite(fill) ? fill : 1,
                                        isfinite(step) ? step : 1,
                                        isfinite(fill) ? 1 : 0, 0, 0};
    live += cls[i].count;
  }
  double t;
  if (!live || resihp_planner_quotas(cls, P->dp, P->model.microbatches, &t))
    return INFINITY;
  return t + resihp_planner_dp_ms(&P->cluster, &P->model, P->tp, P->pp, live);
}

/* Partition replica r for stage s at (speed, cap); returns the iteration
 * time and the GB of layer state that changes stage. */
static double with_partition(const resihp_plan_t *P,
                             resihp_replica_class_t *cls, int r, int s,
                             double speed, double cap, double *moved_gb) {
  int pp = P->pp;
  double *sp = malloc((size_t)pp * sizeof(double));
  double *cp = malloc((size_t)pp * sizeof(double));
  int *ly = malloc((size_t)pp * sizeof(int));
  double res = INFINITY, fill, step;
  *moved_gb = 0;
  if (!sp || !cp || !ly)
    goto out;
  memcpy(sp, &P->speed[(size_t)r * pp], (size_t)pp * sizeof(double));
  memcpy(cp, &P->cap[(size_t)r * pp], (size_t)pp * sizeof(double));
  sp[s] = speed;
  cp[s] = cap;
  if (resihp__partition(&P->cluster, &P->model, &P->px, P->tp, pp, sp, cp,
                        P->quota[r] > 0 ? P->quota[r] : 1, ly, &fill, &step))
    goto out;
  res = iter_with(P, cls, r, fill, step);
  /* Layers whose stage changes carry their state across the network. */
  const int *old = &P->layers[(size_t)r * pp];
  int so = 0, sn = 0, eo = old[0], en = ly[0];
  for (int l = 0; l < P->model.layers; l++) {
    while (l >= eo && so + 1 < pp)
      eo += old[++so];
    while (l >= en && sn + 1 < pp)
      en += ly[++sn];
    if (so != sn)
      *moved_gb += P->model.layer_mem_gb[l] / P->tp;
  }
out:
  free(sp);
  free(cp);
  free(ly);
  return res;
}

/* Time for K iterations when the replica is offline for `off` seconds at
 * `during` ms per iteration, then `after` ms. */
static double offline_total(double K, double off, double during, double after) {
  if (!isfinite(during))
    return off + K * after / 1000;
  double n = off * 1000 / during;
  if (n >= K)
    return K * during / 1000;
  return off + (K - n) * after / 1000;
}

static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

int resihp_plan_escalate(const resihp_plan_t *P, int device, double new_speed,
                         const resihp_escalation_costs_t *costs,
                         resihp_escalation_option_t out[RESIHP_ESC__COUNT],
                         resihp_escalation_t *best) {
  if (!P || !out || !best || device < 0 || device >= P->cluster.ndevices ||
      !(new_speed >= 0)) {
    resihp_log(RESIHP_LOG_ERROR, "planner",
               "escalate: need a plan, a device of it and a speed >= 0");
    return RESIHP_EINVAL;
  }
  resihp_escalation_costs_t C;
  resihp_escalation_costs_init(&C);
  if (costs)
    C = *costs;
  double K = C.horizon_iters;
  for (int k = 0; k < RESIHP_ESC__COUNT; k++)
    out[k] = (resihp_escalation_option_t){.kind = (resihp_escalation_t)k};
  *best = RESIHP_ESC_ABSORB;
  int r, s, q;
  if (resihp_plan_device_slot(P, device, &r, &s, &q)) {
    out[RESIHP_ESC_ABSORB] = (resihp_escalation_option_t){
        RESIHP_ESC_ABSORB,    1, 0, 0, P->iter_ms, P->iter_ms,
        K * P->iter_ms / 1000};
    return 0;
  }
  int t = P->tp, pp = P->pp;
  /* The other members of the device's TP group, fastest first. */
  double *others = malloc((size_t)t * sizeof(double));
  resihp_replica_class_t *cls = malloc((size_t)P->dp * sizeof(*cls));
  if (!others || !cls) {
    free(others);
    free(cls);
    resihp_log(RESIHP_LOG_ERROR, "planner", "escalate: out of memory");
    return RESIHP_ENOMEM;
  }
  int no = 0, base = (r * pp + s) * t;
  for (int i = 0; i < P->cluster.ndevices; i++)
    if (i != device && P->slot[i] >= base && P->slot[i] < base + t)
      others[no++] = P->devices[i].speed;
  qsort(others, (size_t)no, sizeof(double), cmp_desc);
  double others_min = no ? others[no - 1] : INFINITY;
  double g = new_speed < others_min ? new_speed : others_min;
  double cap = P->cap[(size_t)r * pp + s], moved;
  double dropped = iter_with(P, cls, r, INFINITY, INFINITY);

  /* ABSORB: same partition, the slow stage slows its replica; a failed
   * device takes its replica out and the others share its quota. */
  double absorb = dropped;
  if (g > 0) {
    double *sp = malloc((size_t)pp * sizeof(double)), fill, step;
    if (sp) {
      memcpy(sp, &P->speed[(size_t)r * pp], (size_t)pp * sizeof(double));
      sp[s] = g;
      resihp__replica_cost(&P->cluster, &P->model, &P->px, t, pp, sp,
                           &P->layers[(size_t)r * pp], &fill, &step);
      absorb = iter_with(P, cls, r, fill, step);
      free(sp);
    }
  }
  if (isfinite(absorb))
    out[RESIHP_ESC_ABSORB] =
        (resihp_escalation_option_t){RESIHP_ESC_ABSORB,
                                     1,
                                     C.quota_switch_s,
                                     0,
                                     absorb,
                                     absorb,
                                     C.quota_switch_s + K * absorb / 1000};

  if (g > 0) {
    double it = with_partition(P, cls, r, s, g, cap, &moved);
    double sw = C.repartition_s + moved / P->cluster.net_gbs;
    if (isfinite(it))
      out[RESIHP_ESC_REPARTITION] = (resihp_escalation_option_t){
          RESIHP_ESC_REPARTITION, 1, sw, 0, it, it, sw + K * it / 1000};
  }

  if (t >= 2 && no >= t / 2) {
    /* The best t/2 of the other members carry the stage at half width. */
    double half = others[t / 2 - 1] * 0.5;
    double it = with_partition(P, cls, r, s, half, cap * 0.5, &moved);
    double stage_gb = P->mem[(size_t)r * pp + s];
    double sw = C.regroup_s + (moved + stage_gb) / P->cluster.net_gbs;
    if (isfinite(it))
      out[RESIHP_ESC_REGROUP] = (resihp_escalation_option_t){
          RESIHP_ESC_REGROUP, 1, sw, 0, it, it, sw + K * it / 1000};
  }

  /* After a swap or a cured relaunch the device runs at full speed. */
  double healed_speed = others_min < 1 ? others_min : 1;
  double healed = with_partition(P, cls, r, s, healed_speed, cap, &moved);
  if (P->cluster.spare_nodes > 0 && isfinite(healed))
    out[RESIHP_ESC_SPARE] = (resihp_escalation_option_t){
        RESIHP_ESC_SPARE,
        1,
        0,
        C.spare_swap_s,
        dropped,
        healed,
        offline_total(K, C.spare_swap_s, dropped, healed)};
  if (isfinite(healed)) {
    double uncured = isfinite(absorb) ? absorb : healed;
    double after = C.relaunch_cure * healed + (1 - C.relaunch_cure) * uncured;
    out[RESIHP_ESC_RELAUNCH] = (resihp_escalation_option_t){
        RESIHP_ESC_RELAUNCH,
        1,
        0,
        C.relaunch_s,
        dropped,
        after,
        offline_total(K, C.relaunch_s, dropped, after)};
  }

  double bt = INFINITY;
  for (int k = 0; k < RESIHP_ESC__COUNT; k++)
    if (out[k].feasible && out[k].total_s < bt) {
      bt = out[k].total_s;
      *best = (resihp_escalation_t)k;
    }
  free(others);
  free(cls);
  return 0;
}
