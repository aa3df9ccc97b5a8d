/* SPDX-License-Identifier: BSD-3-Clause */
/* The planner's cost model (documented in resihp/planner.h and
 * resihp-plan(1)): stage compute, TP/PP/DP communication, stage memory.
 * Everything the planner, the escalation and the exhaustive tests compare
 * goes through these few functions, so that they all optimise one model. */
#include "config.h"

#include "planner-int.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <math.h>
#include <stdlib.h>

void resihp_plan_cluster_init(resihp_plan_cluster_t *c) {
  *c = (resihp_plan_cluster_t){
      .nvlink_gbs = 300, .net_gbs = 50, .nvlink_lat_us = 5, .net_lat_us = 10};
}

void resihp_plan_model_init(resihp_plan_model_t *m) {
  *m = (resihp_plan_model_t){.grad_fraction = 0.125};
}

void resihp_plan_opts_init(resihp_plan_opts_t *o) {
  *o = (resihp_plan_opts_t){0};
}

double resihp__tp_comm_ms(const resihp_plan_cluster_t *c,
                          const resihp_plan_model_t *m, int tp) {
  if (tp <= 1)
    return 0;
  /* Megatron-style TP all-reduces twice forward and twice backward per
   * layer; tp_mb is their total volume, the latency is paid four times. */
  return 2.0 * (tp - 1) / tp * m->tp_mb / c->nvlink_gbs +
         4 * c->nvlink_lat_us / 1000.0;
}

double resihp__pp_comm_ms(const resihp_plan_cluster_t *c,
                          const resihp_plan_model_t *m, int tp, int pp) {
  if (pp <= 1)
    return 0;
  /* Activation forward and its gradient backward; each TP rank sends its
   * 1/tp slice (scatter/gather across the boundary). */
  return 2.0 * m->boundary_mb / tp / c->net_gbs + 2 * c->net_lat_us / 1000.0;
}

double resihp_planner_dp_ms(const resihp_plan_cluster_t *c,
                            const resihp_plan_model_t *m, int tp, int pp,
                            int dp) {
  if (dp <= 1 || tp < 1 || pp < 1)
    return 0;
  double mem = 0;
  for (int l = 0; l < m->layers; l++)
    mem += m->layer_mem_gb[l];
  double shard_mb = m->grad_fraction * mem * 1000.0 / ((double)pp * tp);
  return 2.0 * (dp - 1) / dp * shard_mb / c->net_gbs +
         2 * ceil(log2((double)dp)) * c->net_lat_us / 1000.0;
}

int resihp__prefix_init(resihp__prefix_t *px, const resihp_plan_model_t *m) {
  px->ms = calloc((size_t)m->layers + 1, sizeof(double));
  px->mem = calloc((size_t)m->layers + 1, sizeof(double));
  if (!px->ms || !px->mem) {
    resihp__prefix_free(px);
    resihp_log(RESIHP_LOG_ERROR, "planner", "out of memory for %d layers",
               m->layers);
    return RESIHP_ENOMEM;
  }
  for (int l = 0; l < m->layers; l++) {
    px->ms[l + 1] = px->ms[l] + m->layer_ms[l];
    px->mem[l + 1] = px->mem[l] + m->layer_mem_gb[l];
  }
  return 0;
}

void resihp__prefix_free(resihp__prefix_t *px) {
  free(px->ms);
  free(px->mem);
  px->ms = px->mem = NULL;
}

void resihp__replica_cost(const resihp_plan_cluster_t *c,
                          const resihp_plan_model_t *m,
                          const resihp__prefix_t *px, int tp, int pp,
                          const double *speed, const int *layers, double *fill,
                          double *step) {
  double tpc = resihp__tp_comm_ms(c, m, tp),
         ppc = resihp__pp_comm_ms(c, m, tp, pp);
  double sum = 0, mx = 0;
  int a = 0;
  for (int s = 0; s < pp; s++) {
    double t = resihp__stage_ms(px, tpc, tp, speed[s], a, a + layers[s]);
    sum += t;
    if (t > mx)
      mx = t;
    a += layers[s];
  }
  *fill = sum + (pp - 1) * ppc;
  *step = mx + ppc;
}

void resihp_planner_replica_cost(const resihp_plan_cluster_t *cluster,
                                 const resihp_plan_model_t *model, int tp,
                                 int pp, const double *stage_speed,
                                 const int *layers, double *fill_ms,
                                 double *step_ms) {
  resihp__prefix_t px;
  *fill_ms = *step_ms = INFINITY;
  if (resihp__prefix_init(&px, model))
    return;
  resihp__replica_cost(cluster, model, &px, tp, pp, stage_speed, layers,
                       fill_ms, step_ms);
  resihp__prefix_free(&px);
}

int resihp__check_inputs(const resihp_plan_cluster_t *c,
                         const resihp_plan_model_t *m) {
  if (!c || !m) {
    resihp_log(RESIHP_LOG_ERROR, "planner", "cluster or model missing");
    return RESIHP_EINVAL;
  }
  if (c->ndevices < 1 || !c->devices) {
    resihp_log(RESIHP_LOG_ERROR, "planner", "the cluster has no devices");
    return RESIHP_EINVAL;
  }
  if (!(c->net_gbs > 0) || !(c->nvlink_gbs > 0) || c->net_lat_us < 0 ||
      c->nvlink_lat_us < 0 || c->spare_nodes < 0) {
    resihp_log(RESIHP_LOG_ERROR, "planner",
               "bandwidths must be > 0, latencies and spares >= 0");
    return RESIHP_EINVAL;
  }
  for (int i = 0; i < c->ndevices; i++) {
    const resihp_plan_device_t *d = &c->devices[i];
    if (d->node < 0 || !(d->speed >= 0) || d->speed > 100 || !(d->mem_gb > 0)) {
      resihp_log(RESIHP_LOG_ERROR, "planner",
                 "device %d: node must be >= 0, speed in [0, 100], memory > 0",
                 i);
      return RESIHP_EINVAL;
    }
  }
  if (m->layers < 1 || !m->layer_ms || !m->layer_mem_gb ||
      m->microbatches < 1) {
    resihp_log(RESIHP_LOG_ERROR, "planner",
               "the model needs >= 1 layer (with compute and memory) and "
               ">= 1 microbatch");
    return RESIHP_EINVAL;
  }
  for (int l = 0; l < m->layers; l++)
    if (!(m->layer_ms[l] > 0) || !(m->layer_mem_gb[l] >= 0)) {
      resihp_log(RESIHP_LOG_ERROR, "planner",
                 "layer %d: compute must be > 0 ms and memory >= 0 GB", l);
      return RESIHP_EINVAL;
    }
  if (!(m->act_gb >= 0) || !(m->boundary_mb >= 0) || !(m->tp_mb >= 0) ||
      !(m->grad_fraction >= 0)) {
    resihp_log(RESIHP_LOG_ERROR, "planner",
               "activation, boundary, TP sizes and grad fraction must be >= 0");
    return RESIHP_EINVAL;
  }
  return 0;
}
