/* SPDX-License-Identifier: BSD-3-Clause */
/* Internals shared by the planner's files (cost model, partition, quotas,
 * search, escalation). Not installed. */
#ifndef RESIHP_PLANNER_INT_H
#define RESIHP_PLANNER_INT_H

#include <resihp/planner.h>

#include <math.h>

/* Per-layer TP all-reduce cost and per-boundary pipeline transfer (ms). */
double resihp__tp_comm_ms(const resihp_plan_cluster_t *c,
                          const resihp_plan_model_t *m, int tp);
double resihp__pp_comm_ms(const resihp_plan_cluster_t *c,
                          const resihp_plan_model_t *m, int tp, int pp);

/* Prefix sums of layer_ms and layer_mem_gb (layers + 1 entries each), so a
 * stage's compute and memory cost O(1). */
typedef struct resihp__prefix {
  double *ms;
  double *mem;
} resihp__prefix_t;

int resihp__prefix_init(resihp__prefix_t *px, const resihp_plan_model_t *m);
void resihp__prefix_free(resihp__prefix_t *px);

/* Time of stage holding layers [a, b) on a group of speed `speed` (inline:
 * the partition search calls these millions of times). */
static inline double resihp__stage_ms(const resihp__prefix_t *px, double tpc,
                                      int tp, double speed, int a, int b) {
  if (speed <= 0)
    return INFINITY;
  return (px->ms[b] - px->ms[a]) / (tp * speed) + (b - a) * tpc;
}

/* Per-device memory of stage `s` of `pp` holding layers [a, b). */
static inline double resihp__stage_mem(const resihp__prefix_t *px,
                                       const resihp_plan_model_t *m, int tp,
                                       int pp, int s, int a, int b) {
  return (px->mem[b] - px->mem[a] + (b - a) * m->act_gb * (pp - s)) / tp;
}

/* resihp_planner_partition with precomputed prefix sums. */
int resihp__partition(const resihp_plan_cluster_t *c,
                      const resihp_plan_model_t *m, const resihp__prefix_t *px,
                      int tp, int pp, const double *speed, const double *cap,
                      int microbatches, int *layers, double *fill,
                      double *step);

/* Fill/step of a replica with a given partition. */
void resihp__replica_cost(const resihp_plan_cluster_t *c,
                          const resihp_plan_model_t *m,
                          const resihp__prefix_t *px, int tp, int pp,
                          const double *speed, const int *layers, double *fill,
                          double *step);

/* A plan (opaque to users; plan.c builds it, escalate.c reads it). */
struct resihp_plan {
  resihp_plan_cluster_t cluster;
  resihp_plan_model_t model;
  resihp_plan_device_t *devices;
  double *layer_ms, *layer_mem;
  resihp__prefix_t px;
  int tp, pp, dp;
  double iter_ms, dp_ms;
  int *quota;                /* dp */
  int *layers;               /* dp * pp */
  double *speed, *cap, *mem; /* dp * pp */
  double *fill, *step;       /* dp */
  int *slot;                 /* ndevices: r*pp*tp + s*tp + k, or -1 */
};

/* Checks shared by the public entry points; logs what is wrong. */
int resihp__check_inputs(const resihp_plan_cluster_t *c,
                         const resihp_plan_model_t *m);

#endif
