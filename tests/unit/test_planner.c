/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the planner: the search against exhaustive search over the
 * same cost model on small random cases, the plan's invariants on larger
 * random clusters (every microbatch assigned exactly once, every layer in
 * exactly one stage, memory respected, no failed device used), the quota
 * solver against brute force, the slow-stage partition, escalation, and
 * bad input. */
#include "config.h"

#include "../../libresihp/planner/planner-int.h"
#include "suite_main.h"

#include <resihp.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deterministic generator (tests must not depend on libc's rand). */
static unsigned long long rng_state;
static double rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng_state >> 11) / (double)(1ULL << 53);
}
static int rnd_int(int lo, int hi) {
  return lo + (int)(rnd() * (hi - lo + 1));
}

typedef struct {
  resihp_plan_device_t dev[16];
  double lms[16], lmem[16];
  resihp_plan_cluster_t c;
  resihp_plan_model_t m;
} small_case_t;

static void make_small(small_case_t *k, unsigned seed) {
  rng_state = seed * 7919ULL + 17;
  static const int gpn[] = {1, 2, 4};
  int nodes = rnd_int(1, 3), g = gpn[rnd_int(0, 2)];
  while (nodes * g > 8)
    nodes--;
  double mem = rnd() < 0.2 ? 8 + 10 * rnd() : 40 + 40 * rnd();
  int n = 0;
  for (int i = 0; i < nodes; i++)
    for (int j = 0; j < g; j++) {
      double u = rnd();
      double s = u < 0.6    ? 1.0
                 : u < 0.75 ? 0.7
                 : u < 0.85 ? 0.5
                 : u < 0.93 ? 0.3
                            : 0;
      k->dev[n++] = (resihp_plan_device_t){i, s, mem};
    }
  resihp_plan_cluster_init(&k->c);
  k->c.ndevices = n;
  k->c.devices = k->dev;
  k->c.net_gbs = 10 + 40 * rnd();
  resihp_plan_model_init(&k->m);
  k->m.layers = rnd_int(1, 6);
  for (int l = 0; l < k->m.layers; l++) {
    k->lms[l] = 5 + 20 * rnd();
    k->lmem[l] = 1 + 6 * rnd();
  }
  k->m.layer_ms = k->lms;
  k->m.layer_mem_gb = k->lmem;
  k->m.act_gb = rnd();
  k->m.boundary_mb = 20 * rnd();
  k->m.tp_mb = 50 * rnd();
  k->m.microbatches = rnd_int(1, 8);
}

/* ---- exhaustive search over the same cost model ---- */

typedef struct {
  const small_case_t *k;
  resihp__prefix_t px;
  int t, p, d;
  int used[16];
  int slot_dev[64][8]; /* slot (r*p+s) -> its t devices */
  double best;
} ex_t;

/* Best time of one replica for every m in 0..M, over all partitions. */
static void replica_best(ex_t *x, const double *sp, const double *cap,
                         double *out) {
  const resihp_plan_model_t *m = &x->k->m;
  int L = m->layers, p = x->p, M = m->microbatches;
  for (int q = 0; q <= M; q++)
    out[q] = q ? INFINITY : 0;
  int ly[8];
  /* enumerate compositions of L into p parts >= 1 */
  int idx[8];
  for (int s = 0; s < p; s++)
    idx[s] = 1;
  idx[p - 1] = L - (p - 1);
  if (idx[p - 1] < 1)
    return;
  for (;;) {
    int a = 0, ok = 1;
    for (int s = 0; s < p; s++) {
      ly[s] = idx[s];
      if (resihp__stage_mem(&x->px, m, x->t, p, s, a, a + ly[s]) >
          cap[s] * (1 + 1e-12))
        ok = 0;
      a += ly[s];
    }
    if (ok) {
      double fill, step;
      resihp__replica_cost(&x->k->c, m, &x->px, x->t, p, sp, ly, &fill, &step);
      for (int q = 1; q <= M; q++)
        if (fill + (q - 1) * step < out[q])
          out[q] = fill + (q - 1) * step;
    }
    /* next composition: odometer over the first p-1 parts */
    int s = p - 2;
    while (s >= 0) {
      idx[s]++;
      int used = 0;
      for (int j = 0; j < p - 1; j++)
        used += idx[j];
      if (L - used >= 1)
        break;
      idx[s] = 1;
      s--;
    }
    if (s < 0)
      break;
    int used = 0;
    for (int j = 0; j < p - 1; j++)
      used += idx[j];
    idx[p - 1] = L - used;
  }
}

static void evaluate(ex_t *x) {
  const small_case_t *k = x->k;
  int M = k->m.microbatches, d = x->d, p = x->p;
  double bt[8][9];
  for (int r = 0; r < d; r++) {
    double sp[8], cap[8];
    for (int s = 0; s < p; s++) {
      sp[s] = INFINITY;
      cap[s] = INFINITY;
      for (int q = 0; q < x->t; q++) {
        const resihp_plan_device_t *dv = &k->dev[x->slot_dev[r * p + s][q]];
        if (dv->speed < sp[s])
          sp[s] = dv->speed;
        if (dv->mem_gb < cap[s])
          cap[s] = dv->mem_gb;
      }
    }
    replica_best(x, sp, cap, bt[r]);
    if (!isfinite(bt[r][1]))
      return; /* a replica that cannot hold the model: not a layout */
  }
  /* min over quota splits of the max replica time */
  double f[9], g[9];
  for (int q = 0; q <= M; q++)
    f[q] = bt[0][q];
  for (int r = 1; r < d; r++) {
    for (int q = 0; q <= M; q++) {
      g[q] = INFINITY;
      for (int a = 0; a <= q; a++) {
        double v = fmax(f[q - a], bt[r][a]);
        if (v < g[q])
          g[q] = v;
      }
    }
    memcpy(f, g, sizeof(f));
  }
  double t = f[M] + resihp_planner_dp_ms(&k->c, &k->m, x->t, p, d);
  if (t < x->best)
    x->best = t;
}

/* Fill slot `sl` with t unused healthy devices of one node (as a set);
 * replicas are interchangeable, so a replica's first group must start
 * after the previous replica's first group. */
static void assign(ex_t *x, int sl, int minfirst) {
  if (sl == x->d * x->p) {
    evaluate(x);
    return;
  }
  const small_case_t *k = x->k;
  int n = k->c.ndevices, t = x->t;
  int stage0 = sl % x->p == 0;
  int comb[8];
  /* choose t devices in increasing index order, all on one node */
  int depth = 0;
  comb[0] = stage0 ? minfirst : 0;
  while (depth >= 0) {
    if (comb[depth] >= n) {
      depth--;
      if (depth >= 0)
        comb[depth]++;
      continue;
    }
    int dv = comb[depth];
    int ok = !x->used[dv] && k->dev[dv].speed > 0 &&
             (depth == 0 || k->dev[dv].node == k->dev[comb[0]].node);
    if (!ok) {
      comb[depth]++;
      continue;
    }
    if (depth == t - 1) {
      for (int q = 0; q < t; q++) {
        x->used[comb[q]] = 1;
        x->slot_dev[sl][q] = comb[q];
      }
      assign(x, sl + 1, stage0 ? comb[0] + 1 : minfirst);
      for (int q = 0; q < t; q++)
        x->used[comb[q]] = 0;
      comb[depth]++;
    } else {
      depth++;
      comb[depth] = comb[depth - 1] + 1;
    }
  }
}

static double exhaustive(const small_case_t *k) {
  ex_t x = {.k = k, .best = INFINITY};
  ck_assert_int_eq(resihp__prefix_init(&x.px, &k->m), 0);
  int healthy = 0, gmax = 0;
  for (int i = 0; i < k->c.ndevices; i++) {
    healthy += k->dev[i].speed > 0;
    int cnt = 0;
    for (int j = 0; j < k->c.ndevices; j++)
      cnt += k->dev[j].node == k->dev[i].node;
    if (cnt > gmax)
      gmax = cnt;
  }
  for (x.t = 1; x.t <= gmax; x.t *= 2)
    for (x.p = 1; x.p <= k->m.layers; x.p++)
      for (x.d = 1; x.d <= k->m.microbatches && x.t * x.p * x.d <= healthy;
           x.d++)
        assign(&x, 0, 0);
  resihp__prefix_free(&x.px);
  return x.best;
}

static double worst_gap;

START_TEST(planner_matches_exhaustive) {
  worst_gap = 0;
  int feasible = 0;
  for (unsigned seed = 1; seed <= 150; seed++) {
    small_case_t k;
    make_small(&k, seed);
    double opt = exhaustive(&k);
    resihp_plan_t *p = NULL;
    int rc = resihp_plan_create(&k.c, &k.m, NULL, &p);
    if (!isfinite(opt)) {
      ck_assert_msg(rc == RESIHP_EINFEASIBLE,
                    "seed %u: exhaustive finds no layout, planner rc %d", seed,
                    rc);
      continue;
    }
    feasible++;
    ck_assert_msg(rc == 0, "seed %u: planner failed (%d) but optimum %.3f",
                  seed, rc, opt);
    double got = resihp_plan_iter_ms(p);
    ck_assert_msg(got >= opt * (1 - 1e-9),
                  "seed %u: planner %.6f beats the optimum %.6f", seed, got,
                  opt);
    double gap = got / opt - 1;
    if (gap > worst_gap)
      worst_gap = gap;
    ck_assert_msg(gap <= 0.01,
                  "seed %u: planner %.4f ms vs optimum %.4f ms (%.2f %%)", seed,
                  got, opt, 100 * gap);
    resihp_plan_destroy(p);
  }
  printf("planner vs exhaustive: %d feasible cases of 150, worst gap %.4f %%\n",
         feasible, 100 * worst_gap);
  ck_assert_int_ge(feasible, 75);
}
END_TEST

/* ---- invariants on larger random clusters ---- */

static void check_invariants(const resihp_plan_cluster_t *c,
                             const resihp_plan_model_t *m,
                             const resihp_plan_t *p) {
  int t = resihp_plan_tp(p), pp = resihp_plan_pp(p), dp = resihp_plan_dp(p);
  ck_assert_int_ge(t, 1);
  ck_assert_int_eq(t & (t - 1), 0);
  long sum = 0;
  for (int r = 0; r < dp; r++) {
    ck_assert_int_ge(resihp_plan_quota(p, r), 0);
    sum += resihp_plan_quota(p, r);
    int layers = 0;
    for (int s = 0; s < pp; s++) {
      ck_assert_int_ge(resihp_plan_stage_layers(p, r, s), 1);
      layers += resihp_plan_stage_layers(p, r, s);
      ck_assert(resihp_plan_stage_mem_gb(p, r, s) <=
                resihp_plan_stage_cap_gb(p, r, s) * (1 + 1e-9));
    }
    ck_assert_int_eq(layers, m->layers); /* each layer in one stage */
  }
  ck_assert_int_eq(sum, m->microbatches); /* each microbatch once */
  /* every slot holds exactly t distinct healthy devices of one node; the
   * stage runs at the slowest one's speed and fits the smallest memory */
  int nslots = dp * pp;
  int *cnt = calloc((size_t)nslots * t, sizeof(int));
  int *node = malloc((size_t)nslots * sizeof(int));
  double *mins = malloc((size_t)nslots * sizeof(double));
  for (int i = 0; i < nslots; i++) {
    node[i] = -1;
    mins[i] = INFINITY;
  }
  for (int i = 0; i < c->ndevices; i++) {
    int r, s, q;
    if (resihp_plan_device_slot(p, i, &r, &s, &q))
      continue;
    ck_assert_msg(c->devices[i].speed > 0, "failed device %d is used", i);
    int sl = r * pp + s;
    cnt[sl * t + q]++;
    if (node[sl] < 0)
      node[sl] = c->devices[i].node;
    ck_assert_int_eq(node[sl], c->devices[i].node); /* TP within a node */
    if (c->devices[i].speed < mins[sl])
      mins[sl] = c->devices[i].speed;
    ck_assert(resihp_plan_stage_cap_gb(p, r, s) <= c->devices[i].mem_gb);
  }
  for (int i = 0; i < nslots * t; i++)
    ck_assert_int_eq(cnt[i], 1);
  for (int i = 0; i < nslots; i++)
    ck_assert(mins[i] == resihp_plan_stage_speed(p, i / pp, i % pp));
  /* the reported time follows from the plan through the cost model */
  double worst = 0;
  for (int r = 0; r < dp; r++) {
    double sp[256];
    int ly[256];
    for (int s = 0; s < pp; s++) {
      sp[s] = resihp_plan_stage_speed(p, r, s);
      ly[s] = resihp_plan_stage_layers(p, r, s);
    }
    double fill, step;
    resihp_planner_replica_cost(c, m, t, pp, sp, ly, &fill, &step);
    int q = resihp_plan_quota(p, r);
    double tr = q ? fill + (q - 1) * step : 0;
    ck_assert(fabs(tr - resihp_plan_replica_ms(p, r)) <= 1e-9 * (1 + tr));
    if (tr > worst)
      worst = tr;
  }
  double expect = worst + resihp_planner_dp_ms(c, m, t, pp, dp);
  ck_assert(fabs(expect - resihp_plan_iter_ms(p)) <= 1e-9 * expect);
  free(cnt);
  free(node);
  free(mins);
}

START_TEST(plan_invariants_random) {
  for (unsigned seed = 1; seed <= 26; seed++) {
    rng_state = seed * 104729ULL;
    int nodes = rnd_int(4, 64), g = rnd() < 0.5 ? 8 : 4;
    if (seed == 26) /* > 64 distinct speeds: the search rounds them */
      nodes = 1024, g = 8;
    int n = nodes * g;
    resihp_plan_device_t *dev = malloc((size_t)n * sizeof(*dev));
    for (int i = 0; i < n; i++) {
      double u = rnd();
      dev[i] = (resihp_plan_device_t){i / g,
                                      u < 0.9    ? 1.0
                                      : u < 0.95 ? 0.3 + 0.6 * rnd()
                                                 : 0.0,
                                      40 + 40 * (i / g % 2)};
    }
    int L = rnd_int(4, 48);
    double *lms = malloc((size_t)L * sizeof(double)),
           *lmem = malloc((size_t)L * sizeof(double));
    for (int l = 0; l < L; l++) {
      lms[l] = 10 + 30 * rnd();
      lmem[l] = 0.5 + 4 * rnd();
    }
    resihp_plan_cluster_t c;
    resihp_plan_cluster_init(&c);
    c.ndevices = n;
    c.devices = dev;
    resihp_plan_model_t m;
    resihp_plan_model_init(&m);
    m.layers = L;
    m.layer_ms = lms;
    m.layer_mem_gb = lmem;
    m.act_gb = 0.3 * rnd();
    m.boundary_mb = 64;
    m.tp_mb = 128;
    m.microbatches = rnd_int(1, 4 * n);
    resihp_plan_t *p = NULL;
    int rc = resihp_plan_create(&c, &m, NULL, &p);
    ck_assert_msg(rc == 0, "seed %u: rc %d", seed, rc);
    check_invariants(&c, &m, p);
    resihp_plan_destroy(p);
    free(dev);
    free(lms);
    free(lmem);
  }
}
END_TEST

/* ---- quota solver ---- */

START_TEST(quotas_match_brute_force) {
  for (unsigned seed = 1; seed <= 200; seed++) {
    rng_state = seed;
    int n = rnd_int(1, 3), M = rnd_int(0, 9);
    resihp_replica_class_t cl[3];
    int cnt[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) {
      cnt[i] = rnd_int(0, 2);
      double step = 1 + 9 * rnd();
      cl[i] =
          (resihp_replica_class_t){step * (1 + 3 * rnd()), step, cnt[i], 0, 0};
    }
    int live = cnt[0] + (n > 1 ? cnt[1] : 0) + (n > 2 ? cnt[2] : 0);
    double got;
    int rc = resihp_planner_quotas(cl, n, M, &got);
    if (!live) {
      ck_assert_int_eq(rc, RESIHP_EINFEASIBLE);
      continue;
    }
    ck_assert_int_eq(rc, 0);
    /* quotas sum to M, within a class they differ by at most one */
    long sum = 0;
    double worst = 0;
    for (int i = 0; i < n; i++) {
      ck_assert_int_ge(cl[i].quota, 0);
      ck_assert(cl[i].n_extra >= 0 && cl[i].n_extra <= cl[i].count);
      sum += (long)cl[i].quota * cl[i].count + cl[i].n_extra;
      int k = cl[i].quota + (cl[i].n_extra > 0);
      if (cl[i].count && k)
        worst = fmax(worst, cl[i].fill_ms + (k - 1) * cl[i].step_ms);
    }
    ck_assert_int_eq(sum, M);
    ck_assert(fabs(worst - got) < 1e-9);
    /* brute force over per-replica quotas (at most 6 replicas) */
    double fr[6], st[6];
    int R = 0;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < cnt[i]; j++) {
        fr[R] = cl[i].fill_ms;
        st[R++] = cl[i].step_ms;
      }
    double best = INFINITY;
    int q[6] = {0};
    for (;;) {
      int s = 0;
      for (int r = 0; r < R; r++)
        s += q[r];
      if (s == M) {
        double w = 0;
        for (int r = 0; r < R; r++)
          if (q[r])
            w = fmax(w, fr[r] + (q[r] - 1) * st[r]);
        best = fmin(best, w);
      }
      int r = 0;
      while (r < R && ++q[r] > M)
        q[r++] = 0;
      if (r == R)
        break;
    }
    ck_assert_msg(fabs(best - got) < 1e-9, "seed %u: %.6f vs brute %.6f", seed,
                  got, best);
  }
}
END_TEST

/* ---- the slow stage: 4,4,4 becomes 5,2,5 ---- */

START_TEST(slow_stage_gets_fewer_layers) {
  double lms[12], lmem[12];
  for (int l = 0; l < 12; l++) {
    lms[l] = 10;
    lmem[l] = 1;
  }
  resihp_plan_cluster_t c;
  resihp_plan_cluster_init(&c);
  resihp_plan_model_t m;
  resihp_plan_model_init(&m);
  m.layers = 12;
  m.layer_ms = lms;
  m.layer_mem_gb = lmem;
  m.microbatches = 64;
  c.net_lat_us = c.nvlink_lat_us = 0;
  double cap[3] = {80, 80, 80}, fill, step;
  int ly[3];
  double healthy[3] = {1, 1, 1};
  ck_assert_int_eq(resihp_planner_partition(&c, &m, 1, 3, healthy, cap, 64, ly,
                                            &fill, &step),
                   0);
  ck_assert_int_eq(ly[0], 4);
  ck_assert_int_eq(ly[1], 4);
  ck_assert_int_eq(ly[2], 4);
  double slow[3] = {1, 0.5, 1};
  ck_assert_int_eq(
      resihp_planner_partition(&c, &m, 1, 3, slow, cap, 64, ly, &fill, &step),
      0);
  ck_assert_int_eq(ly[0], 5);
  ck_assert_int_eq(ly[1], 2);
  ck_assert_int_eq(ly[2], 5);
  ck_assert(fabs(step - 50) < 1e-9);
  /* memory caps bind: stage 0 can hold only 3 layers */
  double tight[3] = {3.5, 80, 80};
  ck_assert_int_eq(
      resihp_planner_partition(&c, &m, 1, 3, slow, tight, 64, ly, &fill, &step),
      0);
  ck_assert_int_le(ly[0], 3);
  ck_assert_int_eq(ly[0] + ly[1] + ly[2], 12);
  double none[3] = {1, 1, 1};
  ck_assert_int_eq(
      resihp_planner_partition(&c, &m, 1, 3, slow, none, 64, ly, &fill, &step),
      RESIHP_EINFEASIBLE);
}
END_TEST

/* ---- escalation ---- */

static void grid(resihp_plan_device_t *dev, int nodes, int g, double mem) {
  for (int i = 0; i < nodes * g; i++)
    dev[i] = (resihp_plan_device_t){i / g, 1.0, mem};
}

START_TEST(escalation_options) {
  resihp_plan_device_t dev[32];
  grid(dev, 4, 8, 80);
  double lms[16], lmem[16];
  for (int l = 0; l < 16; l++) {
    lms[l] = 50;
    lmem[l] = 4;
  }
  resihp_plan_cluster_t c;
  resihp_plan_cluster_init(&c);
  c.ndevices = 32;
  c.devices = dev;
  c.spare_nodes = 1;
  resihp_plan_model_t m;
  resihp_plan_model_init(&m);
  m.layers = 16;
  m.layer_ms = lms;
  m.layer_mem_gb = lmem;
  m.act_gb = 0.2;
  m.microbatches = 32;
  resihp_plan_opts_t o;
  resihp_plan_opts_init(&o);
  o.tp = 2;
  o.pp = 4;
  resihp_plan_t *p = NULL;
  ck_assert_int_eq(resihp_plan_create(&c, &m, &o, &p), 0);
  ck_assert_int_eq(resihp_plan_dp(p), 4);
  resihp_escalation_costs_t costs;
  resihp_escalation_costs_init(&costs);
  resihp_escalation_option_t opt[RESIHP_ESC__COUNT];
  resihp_escalation_t best;
  double base = resihp_plan_iter_ms(p);

  /* A slow device: every option is possible, absorbing costs time, moving
   * layers costs less time per iteration than absorbing. */
  ck_assert_int_eq(resihp_plan_escalate(p, 3, 0.4, &costs, opt, &best), 0);
  for (int k = 0; k < RESIHP_ESC__COUNT; k++) {
    ck_assert_int_eq(opt[k].kind, k);
    ck_assert_msg(opt[k].feasible, "%s", resihp_escalation_name(k));
    ck_assert(opt[best].total_s <= opt[k].total_s);
  }
  ck_assert(opt[RESIHP_ESC_ABSORB].iter_ms > base);
  ck_assert(opt[RESIHP_ESC_REPARTITION].iter_ms <=
            opt[RESIHP_ESC_ABSORB].iter_ms);
  ck_assert(fabs(opt[RESIHP_ESC_SPARE].iter_ms - base) < 1e-6 * base);
  ck_assert(opt[RESIHP_ESC_SPARE].during_ms > base);

  /* Cheap switching and a long horizon favour moving layers over a swap
   * when no spare exists; a very long horizon with a spare favours it. */
  c.spare_nodes = 0;
  resihp_plan_t *p0 = NULL;
  ck_assert_int_eq(resihp_plan_create(&c, &m, &o, &p0), 0);
  ck_assert_int_eq(resihp_plan_escalate(p0, 3, 0.4, &costs, opt, &best), 0);
  ck_assert(!opt[RESIHP_ESC_SPARE].feasible);
  ck_assert_int_ne(best, RESIHP_ESC_SPARE);
  costs.horizon_iters = 1e7;
  ck_assert_int_eq(resihp_plan_escalate(p, 3, 0.4, &costs, opt, &best), 0);
  ck_assert_int_eq(best, RESIHP_ESC_SPARE);

  /* A failed device: its replica cannot absorb with a partition; the
   * others take its quota (constant microbatch count). */
  resihp_escalation_costs_init(&costs);
  ck_assert_int_eq(resihp_plan_escalate(p, 3, 0, &costs, opt, &best), 0);
  ck_assert(!opt[RESIHP_ESC_REPARTITION].feasible);
  ck_assert(opt[RESIHP_ESC_ABSORB].feasible);
  ck_assert(opt[RESIHP_ESC_ABSORB].iter_ms > base);

  ck_assert_int_eq(resihp_plan_escalate(p, 99, 0.5, &costs, opt, &best),
                   RESIHP_EINVAL);
  ck_assert_int_eq(resihp_plan_escalate(p, 3, -1, &costs, opt, &best),
                   RESIHP_EINVAL);
  ck_assert_str_eq(resihp_escalation_name(RESIHP_ESC_REGROUP), "regroup");
  ck_assert_str_eq(resihp_escalation_name(77), "unknown");
  resihp_plan_destroy(p);
  resihp_plan_destroy(p0);
}
END_TEST

/* ---- bad input ---- */

/* Every failing call must have logged why (error contract). */
static int logged;
static void count_log(resihp_log_level_t level, const char *subsystem,
                      const char *message, void *userdata) {
  (void)level;
  (void)message;
  (void)userdata;
  if (!strcmp(subsystem, "planner"))
    logged++;
}

START_TEST(bad_input) {
  resihp_plan_device_t dev[8];
  grid(dev, 2, 4, 80);
  double lms[4] = {10, 10, 10, 10}, lmem[4] = {1, 1, 1, 1};
  resihp_plan_cluster_t c;
  resihp_plan_cluster_init(&c);
  c.ndevices = 8;
  c.devices = dev;
  resihp_plan_model_t m;
  resihp_plan_model_init(&m);
  m.layers = 4;
  m.layer_ms = lms;
  m.layer_mem_gb = lmem;
  m.microbatches = 8;
  resihp_plan_t *p = (resihp_plan_t *)&c;
  resihp_log_set_level(RESIHP_LOG_ERROR);
  resihp_log_set_handler(count_log, NULL);
  logged = 0;
  ck_assert_int_eq(resihp_plan_create(NULL, &m, NULL, &p), RESIHP_EINVAL);
  ck_assert_ptr_null(p);
  ck_assert_int_eq(resihp_plan_create(&c, &m, NULL, NULL), RESIHP_EINVAL);

  resihp_plan_cluster_t c2 = c;
  c2.ndevices = 0;
  ck_assert_int_eq(resihp_plan_create(&c2, &m, NULL, &p), RESIHP_EINVAL);
  resihp_plan_model_t m2 = m;
  m2.layers = 0;
  ck_assert_int_eq(resihp_plan_create(&c, &m2, NULL, &p), RESIHP_EINVAL);
  m2 = m;
  m2.microbatches = 0;
  ck_assert_int_eq(resihp_plan_create(&c, &m2, NULL, &p), RESIHP_EINVAL);
  lms[2] = -1;
  ck_assert_int_eq(resihp_plan_create(&c, &m, NULL, &p), RESIHP_EINVAL);
  lms[2] = 10;
  dev[5].speed = -0.5;
  ck_assert_int_eq(resihp_plan_create(&c, &m, NULL, &p), RESIHP_EINVAL);
  dev[5].speed = 1;
  resihp_plan_opts_t o;
  resihp_plan_opts_init(&o);
  o.tp = 3;
  ck_assert_int_eq(resihp_plan_create(&c, &m, &o, &p), RESIHP_EINVAL);
  o.tp = 8; /* larger than a node */
  ck_assert_int_eq(resihp_plan_create(&c, &m, &o, &p), RESIHP_EINFEASIBLE);
  o.tp = 0;
  o.pp = 5; /* more stages than layers */
  ck_assert_int_eq(resihp_plan_create(&c, &m, &o, &p), RESIHP_EINFEASIBLE);
  /* model larger than all memory */
  for (int l = 0; l < 4; l++)
    lmem[l] = 500;
  ck_assert_int_eq(resihp_plan_create(&c, &m, NULL, &p), RESIHP_EINFEASIBLE);
  for (int l = 0; l < 4; l++)
    lmem[l] = 1;
  /* every device failed */
  for (int i = 0; i < 8; i++)
    dev[i].speed = 0;
  ck_assert_int_eq(resihp_plan_create(&c, &m, NULL, &p), RESIHP_EINFEASIBLE);
  ck_assert_ptr_null(p);
  /* one healthy device left: a plan on it alone */
  dev[6].speed = 1;
  ck_assert_int_eq(resihp_plan_create(&c, &m, NULL, &p), 0);
  ck_assert_int_eq(resihp_plan_dp(p) * resihp_plan_pp(p) * resihp_plan_tp(p),
                   1);
  ck_assert_int_eq(resihp_plan_device_slot(p, 6, NULL, NULL, NULL), 0);
  ck_assert_int_eq(resihp_plan_device_slot(p, 0, NULL, NULL, NULL),
                   RESIHP_ENOENT);
  ck_assert_int_eq(resihp_plan_device_slot(p, 8, NULL, NULL, NULL),
                   RESIHP_EINVAL);
  ck_assert_int_eq(resihp_plan_quota(p, 0), 8);
  ck_assert_int_eq(resihp_plan_quota(p, 1), -1);
  ck_assert_int_eq(resihp_plan_stage_layers(p, 0, 1), -1);
  ck_assert_int_ge(logged, 12); /* one message per failed create */
  resihp_log_set_handler(NULL, NULL);
  resihp_plan_destroy(p);
  resihp_plan_destroy(NULL);
  ck_assert_int_eq(resihp_plan_tp(NULL), 0);
  resihp_log_set_level(RESIHP_LOG_WARN);
}
END_TEST

static unsigned long long lcg(void) {
  return (unsigned long long)(rnd() * 1e12);
}

/* A step's assignment: every microbatch exactly one owner in range for
 * any input (garbage figures included), the same twice, LPT within its 4/3
 * bound of a lower bound on the optimum and no worse than equal counts;
 * counts by speed match the quota solver. */
START_TEST(assign_invariants_random) {
  rng_state = 12345;
  int owner[200], again[200];
  double cost[200], slow[16];
  for (int trial = 0; trial < 2000; trial++) {
    int n = (int)(lcg() % 200), r = 1 + (int)(lcg() % 16);
    double total = 0, fastest = INFINITY, biggest = 0;
    for (int i = 0; i < n; i++) {
      cost[i] = (double)(1 + lcg() % 1000);
      if (lcg() % 50 == 0)
        cost[i] *= 20; /* a long sequence */
      total += cost[i];
      biggest = cost[i] > biggest ? cost[i] : biggest;
    }
    double speed_sum = 0;
    for (int j = 0; j < r; j++) {
      slow[j] = lcg() % 4 ? 1.0 : 1.0 + (double)(lcg() % 300) / 100;
      speed_sum += 1 / slow[j];
      fastest = slow[j] < fastest ? slow[j] : fastest;
    }
    for (int mode = RESIHP_ASSIGN_EVEN; mode <= RESIHP_ASSIGN_COST; mode++) {
      double span = -1, span2;
      ck_assert_int_eq(resihp_planner_assign((resihp_assign_mode_t)mode, cost,
                                             n, slow, r, owner, &span),
                       0);
      ck_assert_int_eq(resihp_planner_assign((resihp_assign_mode_t)mode, cost,
                                             n, slow, r, again, &span2),
                       0);
      for (int i = 0; i < n; i++) {
        ck_assert(owner[i] >= 0 && owner[i] < r);
        ck_assert_int_eq(owner[i], again[i]);
      }
      if (mode == RESIHP_ASSIGN_COST && n) {
        double lower = fmax(total / speed_sum, biggest * fastest);
        ck_assert_msg(span <= lower * 4.0 / 3.0 + biggest * 3.0 + 1e-6,
                      "LPT makespan %g, lower bound %g", span, lower);
        double even;
        resihp_planner_assign(RESIHP_ASSIGN_EVEN, cost, n, slow, r, again,
                              &even);
        ck_assert(span <= even + 1e-6);
      }
    }
  }
  /* garbage figures: still one owner each */
  double bad[4] = {NAN, -1, INFINITY, 0};
  ck_assert_int_eq(
      resihp_planner_assign(RESIHP_ASSIGN_COST, bad, 4, bad, 4, owner, NULL),
      0);
  for (int i = 0; i < 4; i++)
    ck_assert(owner[i] >= 0 && owner[i] < 4);
  ck_assert_int_eq(
      resihp_planner_assign(RESIHP_ASSIGN_COST, NULL, 4, NULL, 0, owner, NULL),
      RESIHP_EINVAL);
  /* counts by speed: 2x slow of 3 replicas and 10 microbatches: 4, 4, 2 */
  double s3[3] = {1, 1, 2};
  ck_assert_int_eq(
      resihp_planner_assign(RESIHP_ASSIGN_COUNT, NULL, 10, s3, 3, owner, NULL),
      0);
  int cnt[3] = {0};
  for (int i = 0; i < 10; i++)
    cnt[owner[i]]++;
  ck_assert(cnt[0] == 4 && cnt[1] == 4 && cnt[2] == 2);
  ck_assert_int_eq(resihp_assign_mode_lookup("cost"), RESIHP_ASSIGN_COST);
  ck_assert_int_eq(resihp_assign_mode_lookup("fast"), -1);
  /* a swap pays back over many steps, not over few; never with one replica */
  ck_assert(resihp_planner_swap_gain_s(4, 2.0, 1.0, 1000, 60) > 0);
  ck_assert(resihp_planner_swap_gain_s(4, 2.0, 1.0, 10, 60) < 0);
  ck_assert(resihp_planner_swap_gain_s(1, 2.0, 1.0, 1000, 60) < 0);
  ck_assert(resihp_planner_swap_gain_s(4, 1.0, 1.0, 1000, 60) < 0);
}
END_TEST

static Suite *planner_suite(void) {
  Suite *s = suite_create("planner");
  TCase *t = tcase_create("planner");
  tcase_set_timeout(t, 25);
  tcase_add_test(t, planner_matches_exhaustive);
  tcase_add_test(t, plan_invariants_random);
  tcase_add_test(t, quotas_match_brute_force);
  tcase_add_test(t, slow_stage_gets_fewer_layers);
  tcase_add_test(t, escalation_options);
  tcase_add_test(t, bad_input);
  tcase_add_test(t, assign_invariants_random);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  return run_suite(planner_suite());
}
