/* SPDX-License-Identifier: BSD-3-Clause */
/* The planner's search: DP/PP/TP sizes, device placement, layer partition
 * and quotas of minimum predicted iteration time.
 *
 * For each power-of-two TP degree t, every node's healthy devices are
 * sorted by speed and cut into groups of t, so that slow devices share a
 * group instead of each slowing a different one (a group runs at its
 * slowest member's speed); the slowest devices of a node are the ones left
 * over. All groups are then sorted by speed and dealt, in that order, to
 * consecutive pipeline stages of consecutive replicas: degradation is
 * concentrated in few replicas, which the quota solver then gives fewer
 * microbatches and whose layer partition moves work off the slow stage.
 * For each PP degree p the DP degree is the largest that the groups allow
 * (capped by the microbatch count) and, when that is 16 or less, every
 * smaller one; otherwise three smaller candidates: the smallest d with the
 * same microbatches per replica (less all-reduce), d - 1 (drops the slowest
 * replica), and the number of replicas the quota solver gives work to. Replicas
 * dealt from one run of identical groups are identical, so each configuration
 * costs O(distinct replicas), which keeps 100,000 GPUs well under a second. */
#include "config.h"

#include "planner-int.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  double speed, cap;
  double key; /* speed the search uses: exact, or rounded down (below) */
  int first;  /* index into the node-sorted device order */
} group_t;

/* Replicas [first, first + count) all have these stages. */
typedef struct {
  int first, count;
  double fill, step;
} cls_t;

/* Scratch for one TP degree and one configuration. */
typedef struct {
  const resihp_plan_cluster_t *c;
  const resihp_plan_model_t *m;
  const resihp__prefix_t *px;
  int *order;      /* devices sorted by node, speed desc */
  group_t *groups; /* sorted by speed desc */
  int ngroups;
  double max_speed, max_cap; /* over the groups */
  int coarse;                /* keys are rounded speeds */
  int *run_end; /* per group: end (exclusive) of its run of equals */
  /* per configuration */
  cls_t *cls;
  resihp_replica_class_t *rc;
  double *cspeed, *ccap; /* ncls * pp */
  int *clayers;          /* ncls * pp */
  int *cperm;            /* ncls * pp: stage -> group offset in replica */
  /* scratch for trying stage orders */
  double *tspeed, *tcap;
  int *tlayers, *tperm, *cand;
  const double *ksp, *kcp; /* keys for next_order */
  int all_orders;
  int ncls, cap_cls, cap_pp;
  int striped; /* deal: 0 consecutive groups per replica, 1 striped */
  /* Memo of uniform replicas' partitions: the healthy replica recurs in
   * every candidate DP degree, deal and round. */
  struct memo {
    int t, p, mb, valid, rc;
    double speed, cap, fill, step;
    int *layers;
  } memo[16];
  int memo_next;
  int *breaks; /* striped deal: replicas that start a new class */
} search_t;

/* Group index of stage offset s of replica r among d replicas of p. */
static int group_of(const search_t *S, int r, int s, int p, int d) {
  return S->striped ? r + s * d : r * p + s;
}

static int by_node_speed(const void *a, const void *b, void *arg) {
  const resihp_plan_device_t *dev = arg;
  const resihp_plan_device_t *x = &dev[*(const int *)a],
                             *y = &dev[*(const int *)b];
  if (x->node != y->node)
    return x->node < y->node ? -1 : 1;
  if (x->speed != y->speed)
    return x->speed > y->speed ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

static int by_group_speed(const void *a, const void *b) {
  const group_t *x = a, *y = b;
  if (x->key != y->key)
    return x->key > y->key ? -1 : 1;
  if (x->cap != y->cap)
    return x->cap > y->cap ? -1 : 1;
  if (x->speed != y->speed)
    return x->speed > y->speed ? -1 : 1;
  return x->first - y->first;
}

/* Cut every node's healthy devices into TP groups of t. With `coarse`,
 * when the groups have more than 64 distinct speeds (say 1 % of 100,000
 * GPUs each slow in its own way), the search sees speeds rounded down to
 * steps of 0.02: classes of identical replicas stay few, and the estimate
 * stays on the safe side. The chosen layout is then re-evaluated with the
 * exact speeds. */
static void make_groups(search_t *S, int t, int coarse) {
  const resihp_plan_cluster_t *c = S->c;
  int n = c->ndevices, g = 0;
  for (int i = 0; i < n;) {
    int j = i, healthy = 0;
    while (j < n &&
           c->devices[S->order[j]].node == c->devices[S->order[i]].node) {
      if (c->devices[S->order[j]].speed > 0)
        healthy++;
      j++;
    }
    for (int k = 0; k + t <= healthy; k += t) {
      double cap = INFINITY;
      for (int q = 0; q < t; q++) {
        double mem = c->devices[S->order[i + k + q]].mem_gb;
        if (mem < cap)
          cap = mem;
      }
      double v = c->devices[S->order[i + k + t - 1]].speed;
      S->groups[g++] = (group_t){v, cap, v, i + k};
    }
    i = j;
  }
  S->ngroups = g;
  qsort(S->groups, (size_t)g, sizeof(group_t), by_group_speed);
  S->max_speed = S->max_cap = 0;
  for (int i = 0; i < g; i++) {
    S->max_speed = fmax(S->max_speed, S->groups[i].speed);
    S->max_cap = fmax(S->max_cap, S->groups[i].cap);
  }
  int distinct = g > 0;
  for (int i = 1; i < g && distinct <= 64; i++)
    distinct += S->groups[i].speed != S->groups[i - 1].speed ||
                S->groups[i].cap != S->groups[i - 1].cap;
  S->coarse = coarse && distinct > 64;
  if (S->coarse)
    resihp_log(RESIHP_LOG_DEBUG, "planner",
               "tp %d: more than 64 distinct group speeds; the search rounds "
               "them down to steps of 0.02",
               t);
  if (S->coarse) {
    for (int i = 0; i < g; i++)
      S->groups[i].key = floor(S->groups[i].speed * 50 + 1e-9) / 50;
    /* equal keys and capacities adjacent, so that they form one run */
    qsort(S->groups, (size_t)g, sizeof(group_t), by_group_speed);
  }
  for (int i = g - 1; i >= 0; i--)
    S->run_end[i] = (i + 1 < g && S->groups[i + 1].key == S->groups[i].key &&
                     S->groups[i + 1].cap == S->groups[i].cap)
                        ? S->run_end[i + 1]
                        : i + 1;
}

static int reserve(search_t *S, int ncls, int pp) {
  if (ncls <= S->cap_cls && pp <= S->cap_pp)
    return 0;
  int nc = ncls > S->cap_cls ? ncls * 2 : S->cap_cls;
  int np = pp > S->cap_pp ? pp : S->cap_pp;
  cls_t *cl = realloc(S->cls, (size_t)nc * sizeof(*cl));
  if (cl)
    S->cls = cl;
  resihp_replica_class_t *rc = realloc(S->rc, (size_t)nc * sizeof(*rc));
  if (rc)
    S->rc = rc;
  double *sp = realloc(S->cspeed, (size_t)nc * np * sizeof(double));
  if (sp)
    S->cspeed = sp;
  double *cp = realloc(S->ccap, (size_t)nc * np * sizeof(double));
  if (cp)
    S->ccap = cp;
  int *ly = realloc(S->clayers, (size_t)nc * np * sizeof(int));
  if (ly)
    S->clayers = ly;
  int *pm = realloc(S->cperm, (size_t)nc * np * sizeof(int));
  if (pm)
    S->cperm = pm;
  double *ts = realloc(S->tspeed, (size_t)np * sizeof(double));
  if (ts)
    S->tspeed = ts;
  double *tc = realloc(S->tcap, (size_t)np * sizeof(double));
  if (tc)
    S->tcap = tc;
  int *tl = realloc(S->tlayers, (size_t)np * sizeof(int));
  if (tl)
    S->tlayers = tl;
  int *tp = realloc(S->tperm, (size_t)np * sizeof(int));
  if (tp)
    S->tperm = tp;
  int *cd = realloc(S->cand, (size_t)np * sizeof(int));
  if (cd)
    S->cand = cd;
  if (!cl || !rc || !sp || !cp || !ly || !pm || !ts || !tc || !tl || !tp || !cd)
    return RESIHP_ENOMEM;
  S->cap_cls = nc;
  S->cap_pp = np;
  return 0;
}

static int cmp_int(const void *a, const void *b) {
  return *(const int *)a - *(const int *)b;
}

static int add_class(search_t *S, int r, int count, int p, int d) {
  int rc = reserve(S, S->ncls + 1, p);
  if (rc)
    return rc;
  S->cls[S->ncls] = (cls_t){r, count, 0, 0};
  for (int s = 0; s < p; s++) {
    const group_t *g = &S->groups[group_of(S, r, s, p, d)];
    S->cspeed[(size_t)S->ncls * p + s] = g->key;
    S->ccap[(size_t)S->ncls * p + s] = g->cap;
    S->cperm[(size_t)S->ncls * p + s] = s;
  }
  S->ncls++;
  return 0;
}

/* Group the d replicas (p groups each) into classes of identical
 * replicas. Consecutive deal: replicas that lie inside one run of equal
 * groups are equal. Striped deal (replica r takes groups r, r + d, ...):
 * replicas r and r + 1 differ only where a run ends between two of their
 * groups, so the class breaks are the run ends. */
static int make_classes(search_t *S, int p, int d) {
  S->ncls = 0;
  if (S->striped) {
    int nb = 0;
    for (int g = 0; g + 1 < d * p; g = S->run_end[g]) {
      int e = S->run_end[g]; /* groups e-1 and e differ */
      if (e >= d * p)
        break;
      int r = (e - 1) % d;
      if (r + 1 < d && (e - 1) / d == e / d)
        S->breaks[nb++] = r + 1;
    }
    qsort(S->breaks, (size_t)nb, sizeof(int), cmp_int);
    int r = 0;
    for (int j = 0; j <= nb; j++) {
      int end = j < nb ? S->breaks[j] : d;
      if (end <= r)
        continue;
      int rc = add_class(S, r, end - r, p, d);
      if (rc)
        return rc;
      r = end;
    }
    return 0;
  }
  for (int r = 0; r < d;) {
    int g0 = r * p, count = 1;
    if (S->run_end[g0] >= g0 + p) {
      int last = S->run_end[g0] / p - 1; /* last replica inside the run */
      if (last >= d)
        last = d - 1;
      count = last - r + 1;
    }
    int rc = add_class(S, r, count, p, d);
    if (rc)
      return rc;
    r += count;
  }
  return 0;
}

/* Stage keys compare by speed, then capacity (of the class in S->ksp). */
static int key_lt(const search_t *S, int a, int b) {
  if (S->ksp[a] != S->ksp[b])
    return S->ksp[a] < S->ksp[b];
  return S->kcp[a] < S->kcp[b];
}

/* Next distinct permutation of S->cand (an arrangement of stage keys);
 * 0 after the last. */
static int next_order(const search_t *S, int p) {
  int *c = S->cand, i = p - 2;
  while (i >= 0 && !key_lt(S, c[i], c[i + 1]))
    i--;
  if (i < 0)
    return 0;
  int j = p - 1;
  while (!key_lt(S, c[i], c[j]))
    j--;
  int tmp = c[i];
  c[i] = c[j];
  c[j] = tmp;
  for (int a = i + 1, b = p - 1; a < b; a++, b--) {
    tmp = c[a];
    c[a] = c[b];
    c[b] = tmp;
  }
  return 1;
}

/* Order of the stages of a replica whose groups differ. With layers of
 * different cost the position of a slow group matters (it should hold the
 * cheap layers). Where p! * layers is small (<= 5000) every distinct order
 * is tried; otherwise a few: the current one, reversed, and the slowest
 * group moved to each of up to 9 evenly spaced positions.
 * Writes candidate k into S->cand; returns 0 when k is past the last. */
static int stage_order(const search_t *S, const double *sp, int p, int k) {
  if (S->all_orders) {
    /* every distinct order, by next permutation over stage keys */
    return k == 0 ? 1 : next_order(S, p); /* caller sorted cand */
  }
  int npos = p <= 8 ? p : 9;
  if (k >= 2 + npos)
    return 0;
  for (int s = 0; s < p; s++)
    S->cand[s] = k == 1 ? p - 1 - s : s;
  if (k >= 2) {
    int pos = p <= 8 ? k - 2 : (int)((long)(k - 2) * (p - 1) / 8), slow = 0;
    for (int s = 1; s < p; s++)
      if (sp[s] < sp[slow])
        slow = s;
    for (int s = 0, j = 0; s < p; s++) {
      if (s == pos)
        S->cand[s] = slow;
      else {
        if (j == slow)
          j++;
        S->cand[s] = j++;
      }
    }
  }
  return 1;
}

/* Partition class i for mb microbatches, choosing its stage order (or,
 * without `explore`, keeping the order it has). */
static int place_class(search_t *S, int i, int t, int p, int mb, int explore) {
  double *sp = &S->cspeed[(size_t)i * p], *cp = &S->ccap[(size_t)i * p];
  int *ly = &S->clayers[(size_t)i * p], *pm = &S->cperm[(size_t)i * p];
  int uniform = 1;
  for (int s = 1; s < p; s++)
    if (sp[s] != sp[0] || cp[s] != cp[0])
      uniform = 0;
  if (uniform) {
    for (int k = 0; k < 16; k++) {
      struct memo *e = &S->memo[k];
      if (e->valid && e->t == t && e->p == p && e->mb == mb &&
          e->speed == sp[0] && e->cap == cp[0]) {
        if (!e->rc) {
          memcpy(ly, e->layers, (size_t)p * sizeof(int));
          S->cls[i].fill = e->fill;
          S->cls[i].step = e->step;
        }
        return e->rc;
      }
    }
    int rc = resihp__partition(S->c, S->m, S->px, t, p, sp, cp, mb, ly,
                               &S->cls[i].fill, &S->cls[i].step);
    struct memo *e = &S->memo[S->memo_next];
    int *nl = realloc(e->layers, (size_t)p * sizeof(int));
    if (nl) {
      S->memo_next = (S->memo_next + 1) % 16;
      e->layers = nl;
      memcpy(nl, ly, (size_t)p * sizeof(int));
      e->t = t;
      e->p = p;
      e->mb = mb;
      e->speed = sp[0];
      e->cap = cp[0];
      e->fill = S->cls[i].fill;
      e->step = S->cls[i].step;
      e->rc = rc;
      e->valid = 1;
    }
    return rc;
  }
  double best = INFINITY, bfill = 0, bstep = 0;
  int found = 0;
  double fact = 1;
  for (int s = 2; s <= p && fact <= 5000; s++)
    fact *= s;
  S->all_orders = fact * S->m->layers <= 5000;
  S->ksp = sp;
  S->kcp = cp;
  for (int a = 0; a < p; a++)
    S->cand[a] = a;
  if (S->all_orders && explore) {
    /* start from the smallest arrangement so next_order visits all */
    for (int a = 1; a < p; a++)
      for (int b = a; b > 0 && key_lt(S, S->cand[b], S->cand[b - 1]); b--) {
        int tmp = S->cand[b];
        S->cand[b] = S->cand[b - 1];
        S->cand[b - 1] = tmp;
      }
  }
  for (int k = 0; (k == 0 || explore) && stage_order(S, sp, p, k); k++) {
    double fill, step;
    for (int s = 0; s < p; s++) {
      S->tspeed[s] = sp[S->cand[s]];
      S->tcap[s] = cp[S->cand[s]];
    }
    if (resihp__partition(S->c, S->m, S->px, t, p, S->tspeed, S->tcap, mb,
                          S->tlayers, &fill, &step))
      continue;
    double f = fill + (mb > 1 ? mb - 1 : 0) * step;
    if (f < best * (1 - 1e-12)) {
      best = f;
      bfill = fill;
      bstep = step;
      found = 1;
      for (int s = 0; s < p; s++)
        S->tperm[s] = S->cand[s];
      memcpy(ly, S->tlayers, (size_t)p * sizeof(int));
    }
  }
  if (!found)
    return RESIHP_EINFEASIBLE;
  /* Apply the winning order to the class's arrays. */
  for (int s = 0; s < p; s++) {
    S->tspeed[s] = sp[S->tperm[s]];
    S->tcap[s] = cp[S->tperm[s]];
    S->tlayers[s] = pm[S->tperm[s]];
  }
  memcpy(sp, S->tspeed, (size_t)p * sizeof(double));
  memcpy(cp, S->tcap, (size_t)p * sizeof(double));
  memcpy(pm, S->tlayers, (size_t)p * sizeof(int));
  S->cls[i].fill = bfill;
  S->cls[i].step = bstep;
  return 0;
}

/* See the caller; NAN when out of memory. */
static double lower_bound(search_t *S, int t, int p, int d) {
  double sp = S->max_speed, cap = S->max_cap;
  if (reserve(S, 1, p))
    return NAN;
  for (int s = 0; s < p; s++) {
    S->cspeed[s] = sp;
    S->ccap[s] = cap;
  }
  int mb = (S->m->microbatches + d - 1) / d;
  S->ncls = 1;
  S->cls[0] = (cls_t){0, d, 0, 0};
  if (place_class(S, 0, t, p, mb, 1))
    return INFINITY;
  double lb = S->cls[0].fill + (mb - 1) * S->cls[0].step +
              resihp_planner_dp_ms(S->c, S->m, t, p, d);
  return lb * (1 - 1e-9);
}

/* Partition every class, solve quotas, re-partition for the quotas found
 * and solve again. Returns the iteration time (INFINITY if infeasible). */
static double eval_config(search_t *S, int t, int p, int d) {
  const resihp_plan_model_t *m = S->m;
  if (make_classes(S, p, d))
    return NAN;
  int guess = (m->microbatches + d - 1) / d;
  double time = INFINITY;
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < S->ncls; i++) {
      int mb = round ? S->rc[i].quota + (S->rc[i].n_extra > 0) : guess;
      if (round && mb < 1)
        mb = 1;
      /* the second round keeps the stage order the first one chose */
      if (place_class(S, i, t, p, mb, !round))
        return INFINITY;
      S->rc[i] = (resihp_replica_class_t){S->cls[i].fill, S->cls[i].step,
                                          S->cls[i].count, 0, 0};
    }
    if (resihp_planner_quotas(S->rc, S->ncls, m->microbatches, &time))
      return INFINITY;
  }
  return time + resihp_planner_dp_ms(S->c, m, t, p, d);
}

static int max_node_gpus(const resihp_plan_cluster_t *c, const int *order) {
  int best = 0;
  for (int i = 0; i < c->ndevices;) {
    int j = i;
    while (j < c->ndevices &&
           c->devices[order[j]].node == c->devices[order[i]].node)
      j++;
    if (j - i > best)
      best = j - i;
    i = j;
  }
  return best;
}

static void search_free(search_t *S) {
  free(S->order);
  free(S->groups);
  free(S->run_end);
  free(S->cls);
  free(S->rc);
  free(S->cspeed);
  free(S->ccap);
  free(S->clayers);
  free(S->cperm);
  free(S->tspeed);
  free(S->tcap);
  free(S->tlayers);
  free(S->tperm);
  free(S->cand);
  free(S->breaks);
  for (int k = 0; k < 16; k++)
    free(S->memo[k].layers);
}

/* Fill the plan's arrays for configuration (t, p, d); S holds the groups of
 * t and the classes of the last eval_config(t, p, d). */
static int materialize(resihp_plan_t *P, search_t *S, int t, int p, int d,
                       double iter) {
  size_t dp = (size_t)d, st = (size_t)d * p;
  P->tp = t;
  P->pp = p;
  P->dp = d;
  P->iter_ms = iter;
  P->dp_ms = resihp_planner_dp_ms(&P->cluster, &P->model, t, p, d);
  P->quota = calloc(dp, sizeof(int));
  P->layers = calloc(st, sizeof(int));
  P->speed = calloc(st, sizeof(double));
  P->cap = calloc(st, sizeof(double));
  P->mem = calloc(st, sizeof(double));
  P->fill = calloc(dp, sizeof(double));
  P->step = calloc(dp, sizeof(double));
  P->slot = malloc((size_t)P->cluster.ndevices * sizeof(int));
  if (!P->quota || !P->layers || !P->speed || !P->cap || !P->mem || !P->fill ||
      !P->step || !P->slot)
    return RESIHP_ENOMEM;
  for (int i = 0; i < P->cluster.ndevices; i++)
    P->slot[i] = -1;
  for (int i = 0; i < S->ncls; i++) {
    for (int k = 0; k < S->cls[i].count; k++) {
      int r = S->cls[i].first + k;
      P->quota[r] = S->rc[i].quota + (k < S->rc[i].n_extra ? 1 : 0);
      P->fill[r] = S->cls[i].fill;
      P->step[r] = S->cls[i].step;
      int a = 0;
      for (int s = 0; s < p; s++) {
        size_t o = (size_t)r * p + s;
        P->layers[o] = S->clayers[(size_t)i * p + s];
        P->speed[o] = S->cspeed[(size_t)i * p + s];
        P->cap[o] = S->ccap[(size_t)i * p + s];
        P->mem[o] =
            resihp__stage_mem(&P->px, &P->model, t, p, s, a, a + P->layers[o]);
        a += P->layers[o];
        const group_t *g =
            &S->groups[group_of(S, r, S->cperm[(size_t)i * p + s], p, d)];
        for (int q = 0; q < t; q++)
          P->slot[S->order[g->first + q]] = (int)(o * t + q);
      }
    }
  }
  return 0;
}

static int copy_inputs(resihp_plan_t *P, const resihp_plan_cluster_t *c,
                       const resihp_plan_model_t *m) {
  P->cluster = *c;
  P->model = *m;
  P->devices = malloc((size_t)c->ndevices * sizeof(*P->devices));
  P->layer_ms = malloc((size_t)m->layers * sizeof(double));
  P->layer_mem = malloc((size_t)m->layers * sizeof(double));
  if (!P->devices || !P->layer_ms || !P->layer_mem)
    return RESIHP_ENOMEM;
  memcpy(P->devices, c->devices, (size_t)c->ndevices * sizeof(*P->devices));
  memcpy(P->layer_ms, m->layer_ms, (size_t)m->layers * sizeof(double));
  memcpy(P->layer_mem, m->layer_mem_gb, (size_t)m->layers * sizeof(double));
  P->cluster.devices = P->devices;
  P->model.layer_ms = P->layer_ms;
  P->model.layer_mem_gb = P->layer_mem;
  return resihp__prefix_init(&P->px, &P->model);
}

int resihp_plan_create(const resihp_plan_cluster_t *cluster,
                       const resihp_plan_model_t *model,
                       const resihp_plan_opts_t *opts, resihp_plan_t **out) {
  if (!out) {
    resihp_log(RESIHP_LOG_ERROR, "planner", "resihp_plan_create: out is NULL");
    return RESIHP_EINVAL;
  }
  *out = NULL;
  int rc = resihp__check_inputs(cluster, model);
  if (rc)
    return rc;
  resihp_plan_opts_t o;
  resihp_plan_opts_init(&o);
  if (opts)
    o = *opts;
  if (o.tp < 0 || o.pp < 0 || o.max_tp < 0 || o.max_pp < 0 ||
      (o.tp & (o.tp - 1))) {
    resihp_log(RESIHP_LOG_ERROR, "planner",
               "tp must be 0 or a power of two; limits must be >= 0");
    return RESIHP_EINVAL;
  }
  resihp_plan_t *P = calloc(1, sizeof(*P));
  search_t S = {0};
  if (!P)
    return RESIHP_ENOMEM;
  rc = copy_inputs(P, cluster, model);
  if (rc)
    goto fail;
  const resihp_plan_cluster_t *c = &P->cluster;
  const resihp_plan_model_t *m = &P->model;
  S.c = c;
  S.m = m;
  S.px = &P->px;
  S.order = malloc((size_t)c->ndevices * sizeof(int));
  S.groups = malloc((size_t)c->ndevices * sizeof(group_t));
  S.run_end = malloc((size_t)c->ndevices * sizeof(int));
  S.breaks = malloc((size_t)c->ndevices * sizeof(int));
  rc = RESIHP_ENOMEM;
  if (!S.order || !S.groups || !S.run_end || !S.breaks)
    goto fail;
  for (int i = 0; i < c->ndevices; i++)
    S.order[i] = i;
  qsort_r(S.order, (size_t)c->ndevices, sizeof(int), by_node_speed,
          (void *)c->devices);

  int max_tp = max_node_gpus(c, S.order);
  if (o.max_tp && o.max_tp < max_tp)
    max_tp = o.max_tp;
  int max_pp = m->layers;
  if (o.max_pp && o.max_pp < max_pp)
    max_pp = o.max_pp;
  double best = INFINITY;
  int bt = 0, bp = 0, bd = 0, bs = 0;
  for (int t = 1; t <= max_tp; t *= 2) {
    if (o.tp && t != o.tp)
      continue;
    make_groups(&S, t, 1);
    for (int p = 1; p <= max_pp && p <= S.ngroups; p++) {
      if (o.pp && p != o.pp)
        continue;
      int dmax = S.ngroups / p;
      if (dmax > m->microbatches)
        dmax = m->microbatches;
      int per = (m->microbatches + dmax - 1) / dmax;
      /* Small DP degrees are all tried; large ones through a few
       * candidates, plus the degree left once replicas that the quota
       * solver leaves idle (only all-reduce cost) are dropped. */
      int cand[4] = {dmax, (m->microbatches + per - 1) / per, dmax - 1, 0};
      int ncand = dmax <= 16 ? dmax : 4;
      for (int k = 0; k < ncand; k++) {
        int d = dmax <= 16 ? dmax - k : cand[k];
        if (d < 1 ||
            (dmax > 16 &&
             ((k == 1 && d == dmax) || (k == 2 && d == cand[1]) ||
              (k == 3 && (d == dmax || d == cand[1] || d == cand[2])))))
          continue;
        /* Striping only differs when the groups are not all equal. */
        int deals = S.run_end[0] < S.ngroups ? 2 : 1;
        /* Lower bound: d replicas all as fast and roomy as the best group
         * (slower replicas only push more microbatches onto the others). */
        double lb = lower_bound(&S, t, p, d);
        if (isnan(lb)) {
          rc = RESIHP_ENOMEM;
          goto fail;
        }
        if (lb >= best)
          deals = 0;
        for (S.striped = 0; S.striped < deals; S.striped++) {
          double it = eval_config(&S, t, p, d);
          if (isnan(it)) {
            rc = RESIHP_ENOMEM;
            goto fail;
          }
          if (k == 0 && !S.striped && isfinite(it)) {
            int busy = 0;
            for (int i = 0; i < S.ncls; i++)
              busy += S.rc[i].quota > 0 ? S.rc[i].count : S.rc[i].n_extra;
            cand[3] = busy < d ? busy : 0;
          }
          if (it < best * (1 - 1e-12)) {
            best = it;
            bt = t;
            bp = p;
            bd = d;
            bs = S.striped;
          }
        }
      }
    }
  }
  if (!isfinite(best)) {
    resihp_log(RESIHP_LOG_ERROR, "planner",
               "no feasible layout: %d devices, %d layers, %d microbatches; "
               "add devices or memory, or relax the fixed tp/pp",
               c->ndevices, m->layers, m->microbatches);
    rc = RESIHP_EINFEASIBLE;
    goto fail;
  }
  make_groups(&S, bt, 0);
  S.striped = bs;
  double again = eval_config(&S, bt, bp, bd);
  rc = materialize(P, &S, bt, bp, bd, again);
  if (rc)
    goto fail;
  resihp_log(RESIHP_LOG_DEBUG, "planner",
             "plan: tp %d pp %d dp %d, %.3f ms per iteration", bt, bp, bd,
             again);
  search_free(&S);
  *out = P;
  return 0;
fail:
  if (rc == RESIHP_ENOMEM)
    resihp_log(RESIHP_LOG_ERROR, "planner", "out of memory while planning");
  search_free(&S);
  resihp_plan_destroy(P);
  return rc;
}

void resihp_plan_destroy(resihp_plan_t *P) {
  if (!P)
    return;
  free(P->devices);
  free(P->layer_ms);
  free(P->layer_mem);
  resihp__prefix_free(&P->px);
  free(P->quota);
  free(P->layers);
  free(P->speed);
  free(P->cap);
  free(P->mem);
  free(P->fill);
  free(P->step);
  free(P->slot);
  free(P);
}

int resihp_plan_tp(const resihp_plan_t *P) {
  return P ? P->tp : 0;
}
int resihp_plan_pp(const resihp_plan_t *P) {
  return P ? P->pp : 0;
}
int resihp_plan_dp(const resihp_plan_t *P) {
  return P ? P->dp : 0;
}
double resihp_plan_iter_ms(const resihp_plan_t *P) {
  return P ? P->iter_ms : -1;
}
double resihp_plan_dp_ms(const resihp_plan_t *P) {
  return P ? P->dp_ms : -1;
}

static int rs_ok(const resihp_plan_t *P, int r, int s) {
  return P && r >= 0 && r < P->dp && s >= 0 && s < P->pp;
}

int resihp_plan_quota(const resihp_plan_t *P, int r) {
  return rs_ok(P, r, 0) ? P->quota[r] : -1;
}
int resihp_plan_stage_layers(const resihp_plan_t *P, int r, int s) {
  return rs_ok(P, r, s) ? P->layers[(size_t)r * P->pp + s] : -1;
}
double resihp_plan_stage_speed(const resihp_plan_t *P, int r, int s) {
  return rs_ok(P, r, s) ? P->speed[(size_t)r * P->pp + s] : -1;
}
double resihp_plan_stage_mem_gb(const resihp_plan_t *P, int r, int s) {
  return rs_ok(P, r, s) ? P->mem[(size_t)r * P->pp + s] : -1;
}
double resihp_plan_stage_cap_gb(const resihp_plan_t *P, int r, int s) {
  return rs_ok(P, r, s) ? P->cap[(size_t)r * P->pp + s] : -1;
}
double resihp_plan_replica_ms(const resihp_plan_t *P, int r) {
  if (!rs_ok(P, r, 0))
    return -1;
  return P->quota[r] > 0 ? P->fill[r] + (P->quota[r] - 1) * P->step[r] : 0;
}

int resihp_plan_device_slot(const resihp_plan_t *P, int device, int *replica,
                            int *stage, int *tp_rank) {
  if (!P || device < 0 || device >= P->cluster.ndevices)
    return RESIHP_EINVAL;
  int v = P->slot[device];
  if (v < 0)
    return RESIHP_ENOENT;
  if (tp_rank)
    *tp_rank = v % P->tp;
  v /= P->tp;
  if (stage)
    *stage = v % P->pp;
  if (replica)
    *replica = v / P->pp;
  return 0;
}
