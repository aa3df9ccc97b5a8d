/* SPDX-License-Identifier: BSD-3-Clause */
/* Layer partition of one replica over its pipeline stages.
 *
 * The stages run on TP groups of different speeds (a slow device slows its
 * whole group) and the iteration of a replica running m microbatches costs
 * fill + (m - 1) * step, where step is the slowest stage. With many
 * microbatches the step dominates, so we first find the smallest possible
 * bottleneck B by bisection: for a given B a greedy pass decides
 * feasibility exactly, giving each stage, in order, as many consecutive
 * layers as fit under B and under its memory while leaving one layer for
 * every later stage (stage cost and memory only grow with more layers, so
 * the greedy reach is maximal and any partition under B is found).
 * A hill-climb then moves single layers across stage boundaries while
 * fill + (m - 1) * step drops, which matters when m is small and the fill
 * (the 1F1B bubble) weighs as much as the bottleneck. A slow middle stage
 * of a 4,4,4 pipeline thus comes out as 5,2,5. */
#include "config.h"

#include "planner-int.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const resihp_plan_cluster_t *c;
  const resihp_plan_model_t *m;
  const resihp__prefix_t *px;
  int tp, pp;
  double tpc;
  const double *speed, *cap;
} part_ctx_t;

static inline int fits(const part_ctx_t *x, int s, int a, int b, double bound) {
  if (resihp__stage_ms(x->px, x->tpc, x->tp, x->speed[s], a, b) > bound)
    return 0;
  return resihp__stage_mem(x->px, x->m, x->tp, x->pp, s, a, b) <=
         x->cap[s] * (1 + 1e-12);
}

/* Greedy feasibility for bottleneck `bound`; writes layers on success. */
static int greedy(const part_ctx_t *x, double bound, int *layers) {
  int L = x->m->layers, a = 0;
  for (int s = 0; s < x->pp; s++) {
    int maxend = L - (x->pp - 1 - s);
    if (s == x->pp - 1) {
      if (!fits(x, s, a, L, bound))
        return 0;
      layers[s] = L - a;
      return 1;
    }
    if (a + 1 > maxend || !fits(x, s, a, a + 1, bound))
      return 0;
    /* fits() is monotone in the end layer: bisect for the last that fits */
    int lo = a + 1, hi = maxend;
    while (lo < hi) {
      int mid = lo + (hi - lo + 1) / 2;
      if (fits(x, s, a, mid, bound))
        lo = mid;
      else
        hi = mid - 1;
    }
    int b = lo;
    layers[s] = b - a;
    a = b;
  }
  return 1;
}

static double objective(const part_ctx_t *x, const int *layers, int mb) {
  double fill, step;
  resihp__replica_cost(x->c, x->m, x->px, x->tp, x->pp, x->speed, layers, &fill,
                       &step);
  return fill + (mb > 1 ? mb - 1 : 0) * step;
}

static int mem_ok(const part_ctx_t *x, const int *layers) {
  int a = 0;
  for (int s = 0; s < x->pp; s++) {
    if (!fits(x, s, a, a + layers[s], INFINITY))
      return 0;
    a += layers[s];
  }
  return 1;
}

int resihp__partition(const resihp_plan_cluster_t *c,
                      const resihp_plan_model_t *m, const resihp__prefix_t *px,
                      int tp, int pp, const double *speed, const double *cap,
                      int microbatches, int *layers, double *fill,
                      double *step) {
  part_ctx_t x = {c, m, px, tp, pp, resihp__tp_comm_ms(c, m, tp), speed, cap};
  if (pp < 1 || pp > m->layers || tp < 1)
    return RESIHP_EINFEASIBLE;
  for (int s = 0; s < pp; s++)
    if (!(speed[s] > 0))
      return RESIHP_EINFEASIBLE;
  if (!greedy(&x, INFINITY, layers))
    return RESIHP_EINFEASIBLE; /* memory: no partition fits */
  /* lo: every stage equally busy (no partition beats it) */
  double hi = 0, lo, sum_speed = 0;
  for (int s = 0; s < pp; s++)
    sum_speed += speed[s];
  lo = px->ms[m->layers] / (tp * sum_speed);
  {
    int a = 0;
    for (int s = 0; s < pp; s++) {
      double t = resihp__stage_ms(px, x.tpc, tp, speed[s], a, a + layers[s]);
      if (t > hi)
        hi = t;
      a += layers[s];
    }
  }
  /* 1e-7 relative: finer bounds change no partition's cost noticeably */
  for (int it = 0; it < 64 && hi - lo > 1e-7 * hi; it++) {
    double mid = 0.5 * (lo + hi);
    if (greedy(&x, mid, layers))
      hi = mid;
    else
      lo = mid;
  }
  greedy(&x, hi, layers);

  /* Hill-climb on the full objective; each accepted move strictly lowers
   * it, and the number of passes is bounded. */
  double best = objective(&x, layers, microbatches);
  for (int pass = 0; pass < 4 * m->layers + 8; pass++) {
    int improved = 0;
    for (int s = 0; s + 1 < pp; s++) {
      for (int dir = -1; dir <= 1; dir += 2) {
        /* dir -1: last layer of s moves to s+1; +1: first of s+1 to s. */
        int from = dir < 0 ? s : s + 1, to = dir < 0 ? s + 1 : s;
        if (layers[from] <= 1)
          continue;
        layers[from]--;
        layers[to]++;
        double f = objective(&x, layers, microbatches);
        if (f < best * (1 - 1e-12) && mem_ok(&x, layers)) {
          best = f;
          improved = 1;
        } else {
          layers[from]++;
          layers[to]--;
        }
      }
    }
    if (!improved)
      break;
  }
  resihp__replica_cost(c, m, px, tp, pp, speed, layers, fill, step);
  return 0;
}

int resihp_planner_partition(const resihp_plan_cluster_t *cluster,
                             const resihp_plan_model_t *model, int tp, int pp,
                             const double *stage_speed,
                             const double *stage_cap_gb, int microbatches,
                             int *layers_out, double *fill_ms,
                             double *step_ms) {
  if (!cluster || !model || !model->layer_ms || !model->layer_mem_gb ||
      model->layers < 1 || !stage_speed || !stage_cap_gb || !layers_out ||
      !fill_ms || !step_ms || tp < 1 || pp < 1) {
    resihp_log(RESIHP_LOG_ERROR, "planner",
               "resihp_planner_partition: missing argument or tp/pp < 1");
    return RESIHP_EINVAL;
  }
  resihp__prefix_t px;
  int rc = resihp__prefix_init(&px, model);
  if (rc)
    return rc;
  rc = resihp__partition(cluster, model, &px, tp, pp, stage_speed, stage_cap_gb,
                         microbatches, layers_out, fill_ms, step_ms);
  resihp__prefix_free(&px);
  if (rc == RESIHP_EINFEASIBLE)
    resihp_log(RESIHP_LOG_INFO, "planner",
               "no partition of %d layers over %d stages fits (a stage is "
               "failed, or memory is too small)",
               model->layers, pp);
  return rc;
}
