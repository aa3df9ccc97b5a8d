/* SPDX-License-Identifier: BSD-3-Clause */
/* Microbatch quotas: the constant-microbatch invariant.
 *
 * Every iteration runs exactly `microbatches` microbatches, whatever has
 * failed; they are split over the live replicas so that the slowest one
 * finishes first. Replica r running k microbatches finishes at
 * fill_r + (k - 1) step_r, so for a deadline T it can take
 * n_r(T) = T >= fill_r ? floor((T - fill_r) / step_r) + 1 : 0 of them.
 * The optimum is the smallest T with sum n_r(T) >= microbatches, found by
 * bisection; replicas whose last microbatch would finish latest then give
 * back the surplus. Identical replicas are handled as one class, so at
 * 100,000 GPUs the solver costs O(classes), not O(replicas). */
#include "config.h"

#include <resihp/error.h>
#include <resihp/log.h>
#include <resihp/planner.h>

#include <math.h>
#include <stdlib.h>

static double take(const resihp_replica_class_t *c, double t, int cap) {
  if (c->count <= 0 || t < c->fill_ms)
    return 0;
  /* The epsilon keeps k exact when t is itself a finish time. */
  double k = floor((t - c->fill_ms) / c->step_ms + 1e-9) + 1;
  return k > cap ? cap : k;
}

static double finish(const resihp_replica_class_t *c, int k) {
  return k > 0 ? c->fill_ms + (k - 1) * c->step_ms : 0;
}

typedef struct {
  double last;
  int idx;
} order_t;

static int by_last_desc(const void *a, const void *b) {
  const order_t *x = a, *y = b;
  if (x->last != y->last)
    return x->last < y->last ? 1 : -1;
  return x->idx - y->idx;
}

int resihp_planner_quotas(resihp_replica_class_t *classes, int nclasses,
                          int microbatches, double *time_ms) {
  if (!classes || nclasses < 0 || microbatches < 0 || !time_ms) {
    resihp_log(RESIHP_LOG_ERROR, "planner",
               "resihp_planner_quotas: missing argument or negative count");
    return RESIHP_EINVAL;
  }
  long live = 0;
  double hi = INFINITY;
  for (int i = 0; i < nclasses; i++) {
    resihp_replica_class_t *c = &classes[i];
    c->quota = c->n_extra = 0;
    if (c->count < 0 || !(c->step_ms > 0) || !(c->fill_ms >= 0)) {
      resihp_log(RESIHP_LOG_ERROR, "planner",
                 "resihp_planner_quotas: class %d needs count >= 0, "
                 "step > 0 and fill >= 0",
                 i);
      return RESIHP_EINVAL;
    }
    if (c->count == 0 || !isfinite(c->fill_ms) || !isfinite(c->step_ms))
      continue;
    live += c->count;
    int per = (microbatches + c->count - 1) / c->count;
    double t = finish(c, per);
    if (t < hi)
      hi = t;
  }
  *time_ms = 0;
  if (live == 0) {
    resihp_log(RESIHP_LOG_INFO, "planner",
               "no live replica to give %d microbatches to", microbatches);
    return RESIHP_EINFEASIBLE;
  }
  if (microbatches == 0)
    return 0;
  double lo = 0;
  hi *= 1 + 1e-12;
  for (int it = 0; it < 200 && hi - lo > 1e-13 * hi; it++) {
    double mid = 0.5 * (lo + hi), sum = 0;
    for (int i = 0; i < nclasses && sum < microbatches; i++)
      if (isfinite(classes[i].fill_ms))
        sum += classes[i].count * take(&classes[i], mid, microbatches);
    if (sum >= microbatches)
      hi = mid;
    else
      lo = mid;
  }
  order_t *ord = malloc((size_t)(nclasses ? nclasses : 1) * sizeof(*ord));
  if (!ord) {
    resihp_log(RESIHP_LOG_ERROR, "planner", "out of memory for quotas");
    return RESIHP_ENOMEM;
  }
  double sum = 0;
  int n = 0;
  for (int i = 0; i < nclasses; i++) {
    resihp_replica_class_t *c = &classes[i];
    if (!isfinite(c->fill_ms))
      continue;
    int k = (int)take(c, hi, microbatches);
    c->quota = k;
    sum += (double)k * c->count;
    if (k > 0 && c->count > 0)
      ord[n++] = (order_t){finish(c, k), i};
  }
  /* Give back the surplus from the latest finishers: the class's
   * replicas that keep k are the "extra" ones of quota k - 1. */
  double excess = sum - microbatches;
  qsort(ord, (size_t)n, sizeof(*ord), by_last_desc);
  for (int j = 0; j < n && excess > 0; j++) {
    resihp_replica_class_t *c = &classes[ord[j].idx];
    int drop = excess >= c->count ? c->count : (int)excess;
    excess -= drop;
    c->n_extra = c->count - drop;
    c->quota -= 1;
  }
  free(ord);
  double t = 0;
  for (int i = 0; i < nclasses; i++) {
    resihp_replica_class_t *c = &classes[i];
    int kmax = c->quota + (c->n_extra > 0 ? 1 : 0);
    if (c->count > 0 && kmax > 0 && finish(c, kmax) > t)
      t = finish(c, kmax);
  }
  *time_ms = t;
  return 0;
}
