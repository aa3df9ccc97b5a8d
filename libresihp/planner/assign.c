/* SPDX-License-Identifier: BSD-3-Clause */
/* A step's microbatches over the live replicas, and what a swap for a
 * spare is worth.
 *
 * The coordinator calls resihp_planner_assign at every step start. EVEN is
 * the old schedule (contiguous blocks of equal size). COUNT gives replica j
 * a share of the count by its speed (the exact integer optimum of
 * resihp_planner_quotas with fill = step = slow[j]): right when all
 * microbatches cost the same. COST is longest-processing-time first on
 * related machines: microbatches by decreasing predicted cost, each to the
 * replica on which it would finish earliest (load + cost * slow). With
 * sequence lengths that vary, equal counts are not equal work; LPT's
 * makespan is within 4/3 of the optimum (identical machines). Which replica
 * computes what never changes the result: gradients are summed in fixed
 * point. */
#include "config.h"

#include <resihp/error.h>
#include <resihp/planner.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *resihp_assign_mode_name(resihp_assign_mode_t m) {
  switch (m) {
  case RESIHP_ASSIGN_EVEN:
    return "even";
  case RESIHP_ASSIGN_COUNT:
    return "count";
  case RESIHP_ASSIGN_COST:
    return "cost";
  }
  return "?";
}

int resihp_assign_mode_lookup(const char *name) {
  for (int m = RESIHP_ASSIGN_EVEN; name && m <= RESIHP_ASSIGN_COST; m++)
    if (!strcmp(name, resihp_assign_mode_name((resihp_assign_mode_t)m)))
      return m;
  return -1;
}

static double sane(const double *v, int i) {
  return v && isfinite(v[i]) && v[i] > 0 ? v[i] : 1.0;
}

static double speed_factor(const double *slow, int j) {
  double f = sane(slow, j);
  return f < 1 ? 1 : f;
}

typedef struct {
  double cost;
  int idx;
} item_t;

static int by_cost_desc(const void *a, const void *b) {
  const item_t *x = a, *y = b;
  if (x->cost != y->cost)
    return x->cost > y->cost ? -1 : 1;
  return x->idx - y->idx;
}

/* Contiguous blocks of quota[j] microbatches, replica 0 first. */
static void blocks(const int *quota, int r, int *owner) {
  int at = 0;
  for (int j = 0; j < r; j++)
    for (int k = 0; k < quota[j]; k++)
      owner[at++] = j;
}

static int by_count(const double *slow, int n, int r, int *owner) {
  resihp_replica_class_t *cls = calloc((size_t)r, sizeof(*cls));
  int *quota = calloc((size_t)r, sizeof(int));
  int rc = RESIHP_ENOMEM;
  if (cls && quota) {
    for (int j = 0; j < r; j++) {
      double f = speed_factor(slow, j);
      cls[j] = (resihp_replica_class_t){.fill_ms = f, .step_ms = f, .count = 1};
    }
    double t;
    rc = resihp_planner_quotas(cls, r, n, &t);
    for (int j = 0; !rc && j < r; j++)
      quota[j] = cls[j].quota + (cls[j].n_extra > 0);
    if (!rc)
      blocks(quota, r, owner);
  }
  free(cls);
  free(quota);
  return rc;
}

static int by_cost(const double *cost, const double *slow, int n, int r,
                   int *owner) {
  item_t *it = malloc(sizeof(*it) * (size_t)n);
  double *load = calloc((size_t)r, sizeof(double));
  if (!it || !load) {
    free(it);
    free(load);
    return RESIHP_ENOMEM;
  }
  for (int i = 0; i < n; i++)
    it[i] = (item_t){sane(cost, i), i};
  qsort(it, (size_t)n, sizeof(*it), by_cost_desc);
  for (int i = 0; i < n; i++) {
    int best = 0;
    double best_end = INFINITY;
    for (int j = 0; j < r; j++) {
      double end = load[j] + it[i].cost * speed_factor(slow, j);
      if (end < best_end) {
        best_end = end;
        best = j;
      }
    }
    load[best] = best_end;
    owner[it[i].idx] = best;
  }
  free(it);
  free(load);
  return 0;
}

int resihp_planner_assign(resihp_assign_mode_t mode, const double *cost, int n,
                          const double *slow, int r, int *owner,
                          double *makespan_out) {
  if (n < 0 || r < 1 || (n > 0 && !owner))
    return RESIHP_EINVAL;
  int rc = 0;
  if (n == 0)
    rc = 0;
  else if (mode == RESIHP_ASSIGN_COST)
    rc = by_cost(cost, slow, n, r, owner);
  else if (mode == RESIHP_ASSIGN_COUNT)
    rc = by_count(slow, n, r, owner);
  else
    for (int i = 0; i < n; i++)
      owner[i] = (int)((long)i * r / n);
  if (rc || !makespan_out)
    return rc;
  double *load = calloc((size_t)r, sizeof(double)), worst = 0;
  if (!load)
    return RESIHP_ENOMEM;
  for (int i = 0; i < n; i++)
    load[owner[i]] += sane(cost, i) * speed_factor(slow, owner[i]);
  for (int j = 0; j < r; j++)
    worst = load[j] > worst ? load[j] : worst;
  free(load);
  *makespan_out = worst;
  return 0;
}

double resihp_planner_swap_gain_s(int r, double factor, double step_s,
                                  double remaining_steps, double swap_s) {
  if (r < 2 || !(factor >= 1) || !(step_s > 0) || !(remaining_steps > 0) ||
      !(swap_s >= 0))
    return -INFINITY; /* one replica: nobody carries the step meanwhile */
  /* speeds add up: r healthy = r, one slow = r - 1 + 1/f, one out = r - 1 */
  double absorb = step_s * r / (r - 1 + 1 / factor);
  double without = step_s * r / (r - 1);
  double swap_steps = swap_s / without;
  if (swap_steps > remaining_steps)
    return (absorb - without) * remaining_steps; /* out for the rest */
  return remaining_steps * absorb -
         (swap_steps * without + (remaining_steps - swap_steps) * step_s);
}
