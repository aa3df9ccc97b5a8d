/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-sim: discrete-event simulation of a long training run on N GPUs
 * under failures drawn from published statistics, comparing recovery
 * policies on the same failure trace. Layout, quotas, partitions and
 * escalation decisions come from resihp's real planner (libresihp).
 *
 * Figures and their sources (also in resihp-sim(1)):
 *  - Unexpected interruptions: 419 in 54 days of Llama 3 405B pre-training
 *    on 16,384 H100 GPUs, about 78 % of them attributed to hardware
 *    (Dubey et al., "The Llama 3 Herd of Models", arXiv 2407.21783,
 *    section 3.3.4). We scale the rate per GPU-hour:
 *    419 / (54 * 24 * 16384) = 1.97e-5. Hardware faults need a node
 *    replacement; the others (software, network flaps) a restart in place.
 *  - Stall per failure with fault-tolerant HSDP: about 3 minutes, down from
 *    about 10 for a full restart; effective training time 44 % -> 80 % at
 *    O(100K) GPUs (FT-HSDP, arXiv 2602.00277): our defaults for
 *    --ft-stall-min and --restart-min, and the shape we check against.
 *  - Constant-microbatch redistribution (ReCoVer, arXiv 2605.11215):
 *    2.23x effective throughput over checkpoint-restart; no re-admission
 *    of a failed replica.
 *  - Fail-slow detection (ResiHP, arXiv 2605.06374): validation when the
 *    measured iteration exceeds the prediction by 25 % (setting
 *    slow-margin); by default the simulator runs resihp's real detector
 *    (see detect_slow_delay_s).
 *  Assumptions without a public per-GPU figure, all options: fail-slow
 *  episodes (rate 1e-5 per GPU-hour, mean 2 h, speed 0.3-0.9), node
 *  repair time (24 h), checkpoint write (30 s), in-step recovery (30 s),
 *  relaunch (2 min), spare swap (3 min), relaunch cure rate (0.5),
 *  ReCoVer's full restart when fewer than 90 % of its replicas remain. */
#include "config.h"

#include <resihp.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GPN 8  /* GPUs per node */
#define NB 400 /* time-series buckets */

typedef struct {
  double days, stop_rate, hw_frac, slow_rate, slow_mean_h, slow_min, slow_max;
  double restart_min, ckpt_min, ckpt_write_s, ft_stall_min, replica_restart_min,
      recover_s, relaunch_s, spare_swap_s, repair_h, relaunch_cure,
      recover_restart_frac, detect_s, validate_iters, mb_per_gpu;
  int spares; /* -1: 1 % of nodes, at least 1 */
  uint64_t seed;
} params_t;

/* ---- deterministic random numbers (splitmix64) ---- */
static uint64_t rng_s;
static double urand(void) {
  uint64_t z = (rng_s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return ((z >> 11) + 0.5) / 9007199254740992.0;
}
static double exp_rand(double mean) {
  return -mean * log(urand());
}

/* ---- failure trace ---- */
enum { EV_STOP, EV_SLOW };
typedef struct {
  double t; /* seconds */
  int kind, dev, hw;
  double speed, dur, cure; /* cure: uniform draw for relaunch outcome */
} fault_t;

static fault_t *make_trace(int ngpus, const params_t *P, int *n_out) {
  double rate_h = ngpus * (P->stop_rate + P->slow_rate);
  double end = P->days * 86400;
  int cap = 1024, n = 0;
  fault_t *f = malloc((size_t)cap * sizeof(*f));
  rng_s = P->seed * 0x2545F4914F6CDD1DULL + ngpus;
  for (double t = exp_rand(3600 / rate_h); f && t < end;
       t += exp_rand(3600 / rate_h)) {
    if (n == cap) {
      fault_t *g = realloc(f, (size_t)(cap *= 2) * sizeof(*f));
      if (!g) {
        free(f);
        return NULL;
      }
      f = g;
    }
    fault_t *e = &f[n++];
    e->t = t;
    e->dev = (int)(urand() * ngpus);
    e->kind = urand() * (P->stop_rate + P->slow_rate) < P->stop_rate ? EV_STOP
                                                                     : EV_SLOW;
    e->hw = urand() < P->hw_frac;
    e->speed = P->slow_min + (P->slow_max - P->slow_min) * urand();
    e->dur = exp_rand(P->slow_mean_h * 3600);
    e->cure = urand();
  }
  *n_out = n;
  return f;
}

/* ---- the job: one healthy plan, shared by all policies ---- */
typedef struct {
  resihp_plan_cluster_t c;
  resihp_plan_model_t m;
  resihp_plan_device_t *dev;
  double lms[80], lmem[80];
  resihp_plan_t *plan, *plan_nospare;
  int t, p, d, q0, M;
  int *layers0; /* healthy partition (replica 0) */
  double fill0, step0, dp_ms, iter0;
  double plan_ms; /* time the planner took */
} job_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int job_init(job_t *J, int ngpus, int spares, double mb_per_gpu) {
  memset(J, 0, sizeof(*J));
  J->dev = malloc((size_t)ngpus * sizeof(*J->dev));
  if (!J->dev)
    return -1;
  for (int i = 0; i < ngpus; i++)
    J->dev[i] = (resihp_plan_device_t){i / GPN, 1.0, 80};
  /* 70B-class model: 80 layers, 8192-token microbatches, see
   * contrib/plans/large-4096.plan; --mb-per-gpu microbatches per GPU */
  for (int l = 0; l < 80; l++) {
    J->lms[l] = 107;
    J->lmem[l] = 14;
  }
  resihp_plan_cluster_init(&J->c);
  J->c.ndevices = ngpus;
  J->c.devices = J->dev;
  J->c.spare_nodes = spares;
  resihp_plan_model_init(&J->m);
  J->m.layers = 80;
  J->m.layer_ms = J->lms;
  J->m.layer_mem_gb = J->lmem;
  J->m.act_gb = 0.5;
  J->m.boundary_mb = 134;
  J->m.tp_mb = 536;
  J->m.microbatches = (int)fmax(1, floor(ngpus * mb_per_gpu));
  double t0 = now_s();
  int rc = resihp_plan_create(&J->c, &J->m, NULL, &J->plan);
  J->plan_ms = (now_s() - t0) * 1000;
  if (rc) {
    fprintf(stderr, "resihp-sim: no plan for %d GPUs: %s\n", ngpus,
            resihp_strerror(rc));
    return -1;
  }
  resihp_plan_cluster_t c0 = J->c;
  c0.spare_nodes = 0;
  resihp_plan_opts_t o;
  resihp_plan_opts_init(&o);
  o.tp = resihp_plan_tp(J->plan);
  o.pp = resihp_plan_pp(J->plan);
  if (resihp_plan_create(&c0, &J->m, &o, &J->plan_nospare))
    return -1;
  J->t = resihp_plan_tp(J->plan);
  J->p = resihp_plan_pp(J->plan);
  J->d = resihp_plan_dp(J->plan);
  J->M = J->m.microbatches;
  J->q0 = (J->M + J->d - 1) / J->d;
  J->layers0 = malloc((size_t)J->p * sizeof(int));
  double *sp = malloc((size_t)J->p * sizeof(double));
  if (!J->layers0 || !sp) {
    free(sp);
    return -1;
  }
  for (int s = 0; s < J->p; s++) {
    J->layers0[s] = resihp_plan_stage_layers(J->plan, 0, s);
    sp[s] = 1;
  }
  resihp_planner_replica_cost(&J->c, &J->m, J->t, J->p, sp, J->layers0,
                              &J->fill0, &J->step0);
  free(sp);
  J->dp_ms = resihp_plan_dp_ms(J->plan);
  J->iter0 = resihp_plan_iter_ms(J->plan);
  return 0;
}

static void job_free(job_t *J) {
  resihp_plan_destroy(J->plan);
  resihp_plan_destroy(J->plan_nospare);
  free(J->layers0);
  free(J->dev);
}

/* Fill/step of a replica whose stage s runs at speed v: with the healthy
 * partition kept (fixed = 1) or re-partitioned by the planner. */
static void slow_cost(const job_t *J, int s, double v, double cap_scale,
                      int fixed, double *fill, double *step) {
  double *sp = malloc((size_t)J->p * sizeof(double));
  double *cp = malloc((size_t)J->p * sizeof(double));
  int *ly = malloc((size_t)J->p * sizeof(int));
  *fill = *step = INFINITY;
  if (sp && cp && ly) {
    for (int k = 0; k < J->p; k++) {
      sp[k] = 1;
      cp[k] = 80;
    }
    sp[s] = v;
    cp[s] = 80 * cap_scale;
    if (fixed)
      resihp_planner_replica_cost(&J->c, &J->m, J->t, J->p, sp, J->layers0,
                                  fill, step);
    else if (resihp_planner_partition(&J->c, &J->m, J->t, J->p, sp, cp, J->q0,
                                      ly, fill, step))
      resihp_planner_replica_cost(&J->c, &J->m, J->t, J->p, sp, J->layers0,
                                  fill, step);
  }
  free(sp);
  free(cp);
  free(ly);
}

/* ---- fail-slow detection: the adapter for resihp's detector ----
 * detect_slow_delay_s() says how long after the start of an episode that
 * makes one GPU `factor` times slower (its stage's compute takes factor
 * times as long) resihp validates it as fail-slow; INFINITY when it never
 * does (below the slow margin). Two implementations:
 *  - "real" (default): resihp's detector itself (resihp/detector.h). A
 *    detector watches 8 ranks of one pipeline stage (peers doing the same
 *    work on different data) fed with packed 8192-token microbatches whose
 *    document lengths vary (log-normal, median 600 tokens) and whose time
 *    follows a*N + b*sum(l^2) + e*nseq + c with 1 % noise; after a warm-up,
 *    rank 0 slows by `factor` and we count microbatches until the detector
 *    reports it SLOW. Results are cached per 1 % of factor.
 *  - "model": the paper's rule as a formula: validated after
 *    1 + validate_iters iterations when factor exceeds 1 + slow-margin. */
enum { DET_REAL, DET_MODEL };
static int det_impl = DET_REAL;

static double lognormal(double median, double sigma) {
  double u1 = urand(), u2 = urand();
  return median * exp(sigma * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
}

/* One packed microbatch: documents cut to an 8192-token window. */
static void draw_workload(resihp_workload_t *w) {
  const double ctx = 8192;
  double left = ctx, l2 = 0, n = 0;
  while (left > 0) {
    double l = fmin(left, fmax(16, floor(lognormal(600, 1.1))));
    l2 += l * l;
    n++;
    left -= l;
  }
  *w = (resihp_workload_t){ctx, l2, n};
}

/* Microbatches until the real detector flags a rank slowed by factor. */
static double real_detect_mb(double factor, int mb_per_iter) {
  enum { RANKS = 8, WARM_ITERS = 64, MAX_ITERS = 2000 };
  resihp_detector_config_t cfg;
  resihp_detector_config_init(&cfg, RANKS);
  resihp_detector_t *d = NULL;
  if (resihp_detector_create(&d, &cfg))
    return INFINITY;
  uint64_t saved = rng_s;
  rng_s = 0x5eed0000ULL + (uint64_t)(factor * 1000);
  double found = INFINITY;
  for (int it = 0; it < WARM_ITERS + MAX_ITERS && !isfinite(found); it++) {
    for (int k = 0; k < mb_per_iter; k++)
      for (int r = 0; r < RANKS; r++) {
        resihp_workload_t w;
        draw_workload(&w);
        double t = 1.0 * w.tokens + 5e-5 * w.sum_l2 + 5 * w.nseq + 150;
        t *= 8 * exp(0.01 * sqrt(-2 * log(urand())) * cos(2 * M_PI * urand()));
        if (r == 0 && it >= WARM_ITERS)
          t *= factor;
        resihp_detector_record(d, r, (uint64_t)it, &w, t);
      }
    resihp_rank_health_t h;
    if (it >= WARM_ITERS && !resihp_detector_health(d, 0, &h) &&
        h.state == RESIHP_HEALTH_SLOW)
      found = (double)(it - WARM_ITERS + 1) * mb_per_iter;
  }
  resihp_detector_destroy(d);
  rng_s = saved;
  return found;
}

static double detect_slow_delay_s(const params_t *P, double factor,
                                  double iter_ms, int mb_per_iter) {
  double margin = resihp_settings_get(resihp_settings_global(),
                                      RESIHP_SETTING_SLOW_MARGIN) /
                  100.0;
  if (det_impl == DET_MODEL)
    return factor < 1 + margin ? INFINITY
                               : (1 + P->validate_iters) * iter_ms / 1000;
  static double cache[1001];
  static int cached_mb[1001];
  int key = (int)lround(fmin(factor, 10) * 100);
  if (cached_mb[key] != mb_per_iter) {
    cache[key] = real_detect_mb(key / 100.0, mb_per_iter);
    cached_mb[key] = mb_per_iter;
  }
  return cache[key] / mb_per_iter * iter_ms / 1000;
}

/* ---- policies ---- */
enum { POL_CR, POL_FT, POL_RECOVER, POL_RESIHP, POL__N };
static const char *const pol_name[] = {"checkpoint-restart", "drop-replica",
                                       "recover", "resihp"};

enum { R_UP, R_OFF, R_LOST };
enum { S_NONE, S_UNDETECTED, S_ABSORB, S_PARTITION }; /* slow handling */

typedef struct {
  int state, slow, episode, waiting_spare;
  int back_slow;     /* comes back still slow (a relaunch that did not cure) */
  double fill, step; /* when slow */
  int stage;
  double speed;
} replica_t;

/* policy-generated events */
enum { E_BACK, E_SLOW_END, E_DETECT, E_SPARE_RETURN, E_CKPT, E_RESTART_DONE };
typedef struct {
  double t;
  int type, r, ep, gen;
} pev_t;

typedef struct {
  int pol;
  const job_t *J;
  const params_t *P;
  replica_t *rep;
  int *special, nspecial; /* replicas not up-and-healthy */
  int *is_special;
  int lost, spares, waiting;
  double stall_until, progress, productive, ckpt_progress, ckpt_productive;
  int ckpt_gen;
  int in_restart;
  pev_t *heap;
  int nheap, capheap;
  double bucket[NB];
  double horizon;
  long n_stop, n_slow, n_esc[RESIHP_ESC__COUNT], n_restarts;
} sim_t;

static int heap_push(sim_t *S, pev_t e) {
  if (S->nheap == S->capheap) {
    int nc = S->capheap ? 2 * S->capheap : 256;
    pev_t *h = realloc(S->heap, (size_t)nc * sizeof(*h));
    if (!h)
      return -1;
    S->heap = h;
    S->capheap = nc;
  }
  int i = S->nheap++;
  while (i > 0 && S->heap[(i - 1) / 2].t > e.t) {
    S->heap[i] = S->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  S->heap[i] = e;
  return 0;
}

static pev_t heap_pop(sim_t *S) {
  pev_t top = S->heap[0], last = S->heap[--S->nheap];
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= S->nheap)
      break;
    if (c + 1 < S->nheap && S->heap[c + 1].t < S->heap[c].t)
      c++;
    if (S->heap[c].t >= last.t)
      break;
    S->heap[i] = S->heap[c];
    i = c;
  }
  if (S->nheap)
    S->heap[i] = last;
  return top;
}

static void mark(sim_t *S, int r) {
  replica_t *x = &S->rep[r];
  int sp = x->state != R_UP || x->slow != S_NONE;
  if (sp && !S->is_special[r]) {
    S->is_special[r] = 1;
    S->special[S->nspecial++] = r;
  }
}

static void compact(sim_t *S) {
  int k = 0;
  for (int i = 0; i < S->nspecial; i++) {
    int r = S->special[i];
    replica_t *x = &S->rep[r];
    if (x->state != R_UP || x->slow != S_NONE)
      S->special[k++] = r;
    else
      S->is_special[r] = 0;
  }
  S->nspecial = k;
}

/* Microbatches per second while the job runs (not stalled). */
static double rate(sim_t *S) {
  const job_t *J = S->J;
  compact(S);
  int up_healthy = J->d - S->lost, up = 0, nslow = 0;
  double slow_time = 0; /* slowest fixed-quota slow replica */
  for (int i = 0; i < S->nspecial; i++) {
    replica_t *x = &S->rep[S->special[i]];
    if (x->state == R_LOST)
      continue;
    up_healthy--;
    if (x->state == R_UP)
      up++, nslow++;
  }
  up += up_healthy;
  if (up <= 0)
    return 0;
  double healthy_pipe = J->fill0 + (J->q0 - 1) * J->step0;
  if (S->pol == POL_CR || S->pol == POL_FT) {
    /* fixed quotas: a slow replica drags the iteration; an offline one
     * (FT) shrinks the batch */
    double T = up_healthy ? healthy_pipe : 0;
    for (int i = 0; i < S->nspecial; i++) {
      replica_t *x = &S->rep[S->special[i]];
      if (x->state == R_UP) {
        double t = x->fill + (J->q0 - 1) * x->step;
        if (t > T)
          T = t;
      }
    }
    T += resihp_planner_dp_ms(&J->c, &J->m, J->t, J->p, up);
    return (double)J->M * up / J->d / (T / 1000);
  }
  /* constant microbatch count: undetected slow replicas keep a fixed
   * share; the others' quotas are solved by the planner */
  resihp_replica_class_t *cls = malloc((size_t)(nslow + 1) * sizeof(*cls));
  if (!cls)
    return 0;
  int n = 0, fixed_mb = 0, share = (J->M + up - 1) / up;
  cls[n++] = (resihp_replica_class_t){J->fill0, J->step0, up_healthy, 0, 0};
  for (int i = 0; i < S->nspecial; i++) {
    replica_t *x = &S->rep[S->special[i]];
    if (x->state != R_UP)
      continue;
    if (x->slow == S_UNDETECTED) {
      fixed_mb += share;
      double t = x->fill + (share - 1) * x->step;
      if (t > slow_time)
        slow_time = t;
    } else
      cls[n++] = (resihp_replica_class_t){x->fill, x->step, 1, 0, 0};
  }
  double T = 0;
  int rest = J->M - fixed_mb;
  if (rest > 0 && resihp_planner_quotas(cls, n, rest, &T))
    T = INFINITY;
  free(cls);
  if (slow_time > T)
    T = slow_time;
  T += resihp_planner_dp_ms(&J->c, &J->m, J->t, J->p, up);
  return J->M / (T / 1000);
}

/* Advance time to t at the current rate, filling the buckets. */
static void advance(sim_t *S, double from, double to, double r) {
  double a = from > S->stall_until ? from : S->stall_until;
  if (to <= a || r <= 0)
    return;
  S->progress += r * (to - a);
  S->productive += to - a;
  double w = S->horizon / NB;
  for (double x = a; x < to;) {
    int b = (int)(x / w);
    if (b >= NB)
      break;
    double e = fmin(to, (b + 1) * w);
    S->bucket[b] += r * (e - x);
    x = e;
  }
}

static void stall(sim_t *S, double now, double dur) {
  double end = now + dur;
  if (S->stall_until < now)
    S->stall_until = end;
  else
    S->stall_until += dur; /* stalls queue up */
}

static int replica_of(const job_t *J, int dev, int *stage) {
  int r, s;
  if (resihp_plan_device_slot(J->plan, dev, &r, &s, NULL))
    return -1;
  *stage = s;
  return r;
}

static void take_offline(sim_t *S, int r, double until) {
  replica_t *x = &S->rep[r];
  x->state = R_OFF;
  x->slow = S_NONE;
  mark(S, r);
  if (isfinite(until))
    heap_push(S, (pev_t){until, E_BACK, r, 0, 0});
}

/* resihp: bring a replica back on a spare, or queue it for one. */
static void want_spare(sim_t *S, int r, double now) {
  if (S->spares > 0) {
    S->spares--;
    take_offline(S, r, now + S->P->spare_swap_s);
  } else {
    take_offline(S, r, INFINITY);
    S->rep[r].waiting_spare = 1;
    S->waiting++;
  }
}

static void fail_stop(sim_t *S, const fault_t *f, double now) {
  const job_t *J = S->J;
  const params_t *P = S->P;
  int s, r = replica_of(J, f->dev, &s);
  if (r < 0)
    return; /* an idle GPU */
  if (S->rep[r].state != R_UP)
    return; /* already out */
  S->n_stop++;
  switch (S->pol) {
  case POL_CR:
    /* the whole job restarts from the last checkpoint */
    S->progress = S->ckpt_progress;
    S->productive = S->ckpt_productive;
    if (now < S->stall_until && S->in_restart)
      S->stall_until = now + P->restart_min * 60;
    else
      stall(S, now, P->restart_min * 60);
    S->in_restart = 1;
    S->ckpt_gen++;
    S->n_restarts++;
    heap_push(S, (pev_t){S->stall_until, E_RESTART_DONE, -1, 0, 0});
    break;
  case POL_FT:
    stall(S, now, P->ft_stall_min * 60);
    take_offline(S, r, now + P->replica_restart_min * 60);
    break;
  case POL_RECOVER:
    stall(S, now, P->recover_s);
    S->rep[r].state = R_LOST;
    S->rep[r].slow = S_NONE;
    mark(S, r);
    S->lost++;
    if (J->d - S->lost < P->recover_restart_frac * J->d) {
      /* too few replicas left: checkpoint and restart them all */
      stall(S, now, P->ckpt_write_s + P->restart_min * 60);
      S->n_restarts++;
      for (int i = 0; i < S->nspecial; i++) {
        replica_t *x = &S->rep[S->special[i]];
        if (x->state == R_LOST)
          x->state = R_UP;
      }
      S->lost = 0;
    }
    break;
  case POL_RESIHP:
    stall(S, now, P->detect_s + P->recover_s);
    if (f->hw) {
      want_spare(S, r, now);
      heap_push(S, (pev_t){now + P->repair_h * 3600, E_SPARE_RETURN, -1, 0, 0});
    } else
      take_offline(S, r, now + P->relaunch_s);
    break;
  }
}

static void slow_start(sim_t *S, const fault_t *f, int ep, double now) {
  const job_t *J = S->J;
  int s, r = replica_of(J, f->dev, &s);
  if (r < 0)
    return;
  replica_t *x = &S->rep[r];
  if (x->state != R_UP || x->slow != S_NONE)
    return; /* overlapping episodes on one replica: the first one counts */
  S->n_slow++;
  x->slow = S_UNDETECTED;
  x->episode = ep;
  x->stage = s;
  x->speed = f->speed;
  slow_cost(J, s, f->speed, 1, 1, &x->fill, &x->step);
  mark(S, r);
  heap_push(S, (pev_t){now + f->dur, E_SLOW_END, r, ep, 0});
  if (S->pol == POL_RESIHP) {
    double ratio =
        (x->fill + (J->q0 - 1) * x->step) / (J->fill0 + (J->q0 - 1) * J->step0);
    double delay =
        detect_slow_delay_s(S->P, 1 / f->speed, J->iter0 * ratio, J->q0);
    if (isfinite(delay))
      heap_push(S, (pev_t){now + delay, E_DETECT, r, ep, 0});
  }
}

/* resihp: the planner chooses how to handle a validated fail-slow. */
static void detected(sim_t *S, int r, const fault_t *f, double now) {
  const job_t *J = S->J;
  const params_t *P = S->P;
  replica_t *x = &S->rep[r];
  resihp_escalation_costs_t C;
  resihp_escalation_costs_init(&C);
  C.spare_swap_s = P->spare_swap_s;
  C.relaunch_s = P->relaunch_s;
  C.relaunch_cure = P->relaunch_cure;
  /* compare over the expected remaining episode */
  C.horizon_iters = P->slow_mean_h * 3600 * 1000 / J->iter0;
  resihp_escalation_option_t opt[RESIHP_ESC__COUNT];
  resihp_escalation_t best;
  const resihp_plan_t *plan = S->spares > 0 ? J->plan : J->plan_nospare;
  if (resihp_plan_escalate(plan, f->dev, f->speed, &C, opt, &best))
    return;
  S->n_esc[best]++;
  switch (best) {
  case RESIHP_ESC_ABSORB:
    x->slow = S_ABSORB;
    stall(S, now, opt[best].switch_s);
    break;
  case RESIHP_ESC_REPARTITION:
  case RESIHP_ESC_REGROUP:
    x->slow = S_PARTITION;
    if (best == RESIHP_ESC_REGROUP)
      slow_cost(J, x->stage, 0.5, 0.5, 0, &x->fill, &x->step);
    else
      slow_cost(J, x->stage, x->speed, 1, 0, &x->fill, &x->step);
    stall(S, now, opt[best].switch_s);
    break;
  case RESIHP_ESC_SPARE:
    /* the slow node goes back to the pool when its episode ends */
    S->spares--;
    take_offline(S, r, now + P->spare_swap_s);
    heap_push(S, (pev_t){fmax(f->t + f->dur, now), E_SPARE_RETURN, -1, 0, 0});
    break;
  case RESIHP_ESC_RELAUNCH:
    take_offline(S, r, now + P->relaunch_s);
    /* a relaunch that does not cure brings the replica back slow */
    x->back_slow = f->cure >= P->relaunch_cure;
    break;
  default:
    break;
  }
}

typedef struct {
  double ettr, thr, restarts;
  long stops, slows, esc[RESIHP_ESC__COUNT];
} result_t;

static int simulate(int pol, const job_t *J, const params_t *P,
                    const fault_t *tr, int ntr, result_t *res, double *series) {
  sim_t S = {.pol = pol, .J = J, .P = P};
  S.horizon = P->days * 86400;
  S.rep = calloc((size_t)J->d, sizeof(*S.rep));
  S.special = malloc((size_t)J->d * sizeof(int));
  S.is_special = calloc((size_t)J->d, sizeof(int));
  if (!S.rep || !S.special || !S.is_special)
    return -1;
  S.spares = J->c.spare_nodes;
  double ckpt_s = P->ckpt_min * 60;
  if (pol == POL_CR)
    heap_push(&S, (pev_t){ckpt_s, E_CKPT, -1, 0, 0});
  double now = 0, r = rate(&S);
  int i = 0;
  for (;;) {
    double tn = i < ntr ? tr[i].t : INFINITY;
    double tp = S.nheap ? S.heap[0].t : INFINITY;
    double t = fmin(fmin(tn, tp), S.horizon);
    advance(&S, now, t, r);
    now = t;
    if (now >= S.horizon)
      break;
    if (tp <= tn) {
      pev_t e = heap_pop(&S);
      replica_t *x = e.r >= 0 ? &S.rep[e.r] : NULL;
      switch (e.type) {
      case E_BACK:
        if (x->state == R_OFF) {
          x->state = R_UP;
          x->slow = x->back_slow ? S_ABSORB : S_NONE;
          x->back_slow = 0;
        }
        break;
      case E_SLOW_END:
        if (x->episode == e.ep) {
          x->slow = S_NONE;
          x->back_slow = 0;
        }
        break;
      case E_DETECT:
        if (x->slow == S_UNDETECTED && x->episode == e.ep && x->state == R_UP)
          detected(&S, e.r, &tr[e.ep], now);
        break;
      case E_SPARE_RETURN:
        S.spares++;
        if (S.waiting > 0) {
          for (int k = 0; k < S.nspecial; k++) {
            replica_t *w = &S.rep[S.special[k]];
            if (w->waiting_spare) {
              w->waiting_spare = 0;
              S.waiting--;
              S.spares--;
              heap_push(&S, (pev_t){now + P->spare_swap_s, E_BACK, S.special[k],
                                    0, 0});
              break;
            }
          }
        }
        break;
      case E_CKPT:
        if (e.gen == S.ckpt_gen && !S.in_restart) {
          stall(&S, now, P->ckpt_write_s);
          S.ckpt_progress = S.progress;
          S.ckpt_productive = S.productive;
          heap_push(&S,
                    (pev_t){S.stall_until + ckpt_s, E_CKPT, -1, 0, S.ckpt_gen});
        }
        break;
      case E_RESTART_DONE:
        if (S.in_restart && now >= S.stall_until) {
          S.in_restart = 0;
          heap_push(&S, (pev_t){now + ckpt_s, E_CKPT, -1, 0, S.ckpt_gen});
        }
        break;
      }
    } else {
      if (tr[i].kind == EV_STOP)
        fail_stop(&S, &tr[i], now);
      else
        slow_start(&S, &tr[i], i, now);
      i++;
    }
    r = rate(&S);
  }
  double ideal = J->M / (J->iter0 / 1000);
  res->ettr = S.productive / S.horizon;
  res->thr = S.progress / (ideal * S.horizon);
  res->restarts = S.n_restarts;
  res->stops = S.n_stop;
  res->slows = S.n_slow;
  memcpy(res->esc, S.n_esc, sizeof(res->esc));
  if (series)
    for (int b = 0; b < NB; b++)
      series[b] = S.bucket[b] / (ideal * S.horizon / NB);
  free(S.rep);
  free(S.special);
  free(S.is_special);
  free(S.heap);
  return 0;
}

/* ---- output ---- */

/* The gnuplot to run: $GNUPLOT (a path or a name) or "gnuplot". */
static const char *gnuplot_cmd(void) {
  const char *g = getenv("GNUPLOT");
  return g && *g ? g : "gnuplot";
}

static int have_gnuplot(void) {
  const char *cmd = gnuplot_cmd(), *path = getenv("PATH");
  if (strchr(cmd, '/'))
    return access(cmd, X_OK) == 0;
  if (!path)
    return 0;
  char *copy = strdup(path), *save = NULL;
  int found = 0;
  for (char *d = strtok_r(copy, ":", &save); d && !found;
       d = strtok_r(NULL, ":", &save)) {
    char f[4096];
    snprintf(f, sizeof(f), "%s/%s", d, cmd);
    found = access(f, X_OK) == 0;
  }
  free(copy);
  return found;
}

static int write_csv(const char *file, double horizon,
                     double series[POL__N][NB]) {
  FILE *f = fopen(file, "w");
  if (!f) {
    fprintf(stderr, "resihp-sim: cannot write %s: %s\n", file, strerror(errno));
    return -1;
  }
  fprintf(f, "hours");
  for (int p = 0; p < POL__N; p++)
    fprintf(f, ",%s", pol_name[p]);
  fprintf(f, "\n");
  for (int b = 0; b < NB; b++) {
    fprintf(f, "%.4f", (b + 0.5) * horizon / NB / 3600);
    for (int p = 0; p < POL__N; p++)
      fprintf(f, ",%.5f", series[p][b]);
    fprintf(f, "\n");
  }
  return fclose(f) ? -1 : 0;
}

static int plot(const char *png, const char *csv, int gpus) {
  FILE *g = popen(gnuplot_cmd(), "w");
  if (!g) {
    fprintf(stderr, "resihp-sim: cannot run gnuplot: %s\n", strerror(errno));
    return -1;
  }
  fprintf(g,
          "set terminal pngcairo size 1100,600\n"
          "set output '%s'\n"
          "set datafile separator ','\n"
          "set title 'resihp-sim: %d GPUs, throughput relative to "
          "failure-free'\n"
          "set xlabel 'hours'\nset ylabel 'effective throughput'\n"
          "set yrange [0:1.05]\nset key bottom right\n"
          "plot for [i=2:%d] '%s' using 1:i with lines lw 1.5 title "
          "columnheader(i)\n",
          png, gpus, POL__N + 1, csv);
  int rc = pclose(g);
  if (rc) {
    fprintf(stderr, "resihp-sim: gnuplot failed (status %d)\n", rc);
    return -1;
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: resihp-sim [--gpus N[,N...]] [--days D] [--seed S] "
          "[--spares N]\n"
          "                  [--csv FILE] [--plot FILE.png] [--PARAM VALUE]"
          "...\n"
          "Simulate a training run under published failure rates and compare "
          "recovery policies\n(see resihp-sim(1) for every parameter and its "
          "source).\n");
}

typedef struct {
  const char *name;
  double *v;
  double lo, hi;
} opt_t;

int main(int argc, char **argv) {
  params_t P = {
      .days = 54,
      .stop_rate = 419.0 / (54 * 24 * 16384.0),
      .hw_frac = 0.78,
      .slow_rate = 1e-5,
      .slow_mean_h = 2,
      .slow_min = 0.3,
      .slow_max = 0.9,
      .restart_min = 10,
      .ckpt_min = 0, /* 0: Young's optimum */
      .ckpt_write_s = 30,
      .ft_stall_min = 3,
      .replica_restart_min = 10,
      .recover_s = 30,
      .relaunch_s = 120,
      .spare_swap_s = 180,
      .repair_h = 24,
      .relaunch_cure = 0.5,
      .recover_restart_frac = 0.9,
      .detect_s = 1,
      .validate_iters = 3,
      .mb_per_gpu = 0.25,
      .spares = -1,
      .seed = 1,
  };
  const opt_t opts[] = {
      {"days", &P.days, 0.001, 3650},
      {"stop-rate", &P.stop_rate, 0, 1},
      {"hw-frac", &P.hw_frac, 0, 1},
      {"slow-rate", &P.slow_rate, 0, 1},
      {"slow-mean-h", &P.slow_mean_h, 0.001, 1e4},
      {"slow-min", &P.slow_min, 0.01, 1},
      {"slow-max", &P.slow_max, 0.01, 1},
      {"restart-min", &P.restart_min, 0, 1e4},
      {"ckpt-min", &P.ckpt_min, 0, 1e5},
      {"ckpt-write-s", &P.ckpt_write_s, 0, 1e5},
      {"ft-stall-min", &P.ft_stall_min, 0, 1e4},
      {"replica-restart-min", &P.replica_restart_min, 0, 1e5},
      {"recover-s", &P.recover_s, 0, 1e5},
      {"relaunch-s", &P.relaunch_s, 0, 1e5},
      {"spare-swap-s", &P.spare_swap_s, 0, 1e5},
      {"repair-h", &P.repair_h, 0, 1e5},
      {"relaunch-cure", &P.relaunch_cure, 0, 1},
      {"recover-restart-frac", &P.recover_restart_frac, 0, 1},
      {"validate-iters", &P.validate_iters, 0, 1e6},
      {"mb-per-gpu", &P.mb_per_gpu, 0.001, 64},
  };
  const char *csv = NULL, *png = NULL, *gpus_arg = "16384";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (strncmp(a, "--", 2) || i + 1 >= argc) {
      fprintf(stderr, "resihp-sim: '%s': expected --OPTION VALUE\n", a);
      usage(stderr);
      return 2;
    }
    const char *v = argv[++i];
    char *end;
    if (!strcmp(a, "--csv"))
      csv = v;
    else if (!strcmp(a, "--plot"))
      png = v;
    else if (!strcmp(a, "--gpus"))
      gpus_arg = v;
    else if (!strcmp(a, "--detector")) {
      if (!strcmp(v, "real"))
        det_impl = DET_REAL;
      else if (!strcmp(v, "model"))
        det_impl = DET_MODEL;
      else {
        fprintf(stderr, "resihp-sim: --detector '%s': real or model\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--seed")) {
      errno = 0;
      P.seed = strtoull(v, &end, 10);
      if (*end || end == v || errno) {
        fprintf(stderr, "resihp-sim: --seed '%s' is not an integer\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--spares")) {
      long n = strtol(v, &end, 10);
      if (*end || end == v || n < 0 || n > 1000000) {
        fprintf(stderr, "resihp-sim: --spares '%s': need 0..1000000\n", v);
        return 2;
      }
      P.spares = (int)n;
    } else {
      size_t k;
      for (k = 0; k < sizeof(opts) / sizeof(opts[0]); k++)
        if (!strcmp(a + 2, opts[k].name))
          break;
      if (k == sizeof(opts) / sizeof(opts[0])) {
        fprintf(stderr, "resihp-sim: unknown option '%s'\n", a);
        usage(stderr);
        return 2;
      }
      double x = strtod(v, &end);
      if (*end || end == v || !(x >= opts[k].lo && x <= opts[k].hi)) {
        fprintf(stderr, "resihp-sim: %s '%s': need a number in [%g, %g]\n", a,
                v, opts[k].lo, opts[k].hi);
        return 2;
      }
      *opts[k].v = x;
    }
  }
  if (P.slow_min > P.slow_max) {
    fprintf(stderr, "resihp-sim: --slow-min exceeds --slow-max\n");
    return 2;
  }
  if (png && !have_gnuplot()) {
    fprintf(stderr,
            "resihp-sim: --plot needs gnuplot, but '%s' was not found "
            "(Debian: apt-get install gnuplot-nox; or set GNUPLOT)\n",
            gnuplot_cmd());
    return 1;
  }
  /* list of scales */
  int scales[16], ns = 0;
  char *copy = strdup(gpus_arg), *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    char *end;
    long n = strtol(tok, &end, 10);
    if (*end || end == tok || n < 8 || n > 1000000 || ns == 16) {
      fprintf(stderr,
              "resihp-sim: --gpus '%s': need up to 16 counts in [8, 1e6]\n",
              gpus_arg);
      free(copy);
      return 2;
    }
    scales[ns++] = (int)n;
  }
  free(copy);
  printf("resihp-sim: seed %llu, %.1f days; fail-stop %.3g/GPU-h (%.0f %% "
         "hardware), fail-slow %.3g/GPU-h; %s detector\n",
         (unsigned long long)P.seed, P.days, P.stop_rate, P.hw_frac * 100,
         P.slow_rate, det_impl == DET_REAL ? "real" : "modelled");
  static double series[POL__N][NB];
  int rc = 0;
  for (int k = 0; k < ns && !rc; k++) {
    int n = scales[k];
    int spares =
        P.spares >= 0 ? P.spares : (n / GPN / 100 > 0 ? n / GPN / 100 : 1);
    job_t J;
    if (job_init(&J, n, spares, P.mb_per_gpu)) {
      job_free(&J);
      return 1;
    }
    params_t Q = P;
    double mtbf_s = 3600 / (n * P.stop_rate);
    if (Q.ckpt_min <= 0) /* Young: sqrt(2 * write * MTBF) */
      Q.ckpt_min = sqrt(2 * Q.ckpt_write_s * mtbf_s) / 60;
    int ntr;
    fault_t *tr = make_trace(n, &Q, &ntr);
    if (!tr) {
      job_free(&J);
      return 1;
    }
    printf("\n%d GPUs: plan dp %d pp %d tp %d, %.0f ms/iteration, %d "
           "microbatches (planned in %.1f ms); %d spare nodes\n",
           n, J.d, J.p, J.t, J.iter0, J.M, J.plan_ms, spares);
    printf("  job MTBF %.1f min, checkpoint every %.1f min; trace: %d "
           "events\n",
           mtbf_s / 60, Q.ckpt_min, ntr);
    printf("  fail-slow detection delay (%s):",
           det_impl == DET_REAL ? "real detector" : "model");
    static const double show[] = {1.0, 1.05, 1.1, 1.25, 2, 3};
    for (size_t k2 = 0; k2 < sizeof(show) / sizeof(show[0]); k2++) {
      double dl = detect_slow_delay_s(&Q, show[k2], J.iter0, J.q0);
      if (isfinite(dl))
        printf(" %gx %.0f s", show[k2], dl);
      else
        printf(" %gx never", show[k2]);
    }
    printf("\n");
    printf("  %-20s %8s %12s %10s %8s %8s\n", "policy", "ETTR", "throughput",
           "restarts", "stops", "slows");
    result_t all[POL__N];
    for (int p = 0; p < POL__N; p++) {
      result_t R;
      if (simulate(p, &J, &Q, tr, ntr, &R, series[p])) {
        fprintf(stderr, "resihp-sim: out of memory\n");
        rc = 1;
        break;
      }
      printf("  %-20s %7.1f%% %11.1f%% %10.0f %8ld %8ld", pol_name[p],
             100 * R.ettr, 100 * R.thr, R.restarts, R.stops, R.slows);
      if (p == POL_RESIHP) {
        printf("   escalations:");
        for (int e = 0; e < RESIHP_ESC__COUNT; e++)
          printf(" %s %ld", resihp_escalation_name((resihp_escalation_t)e),
                 R.esc[e]);
      }
      printf("\n");
      all[p] = R;
    }
    if (!rc && all[POL_CR].thr > 0)
      printf("  vs checkpoint-restart: ETTR %.0f%% -> drop-replica %.0f%%; "
             "throughput x%.2f recover, x%.2f resihp\n",
             100 * all[POL_CR].ettr, 100 * all[POL_FT].ettr,
             all[POL_RECOVER].thr / all[POL_CR].thr,
             all[POL_RESIHP].thr / all[POL_CR].thr);
    free(tr);
    job_free(&J);
    if (k == ns - 1 && !rc) {
      char tmp[] = "/tmp/resihp-sim-XXXXXX";
      const char *file = csv;
      if (!file && png) {
        int fd = mkstemp(tmp);
        if (fd < 0) {
          fprintf(stderr, "resihp-sim: mkstemp: %s\n", strerror(errno));
          return 1;
        }
        close(fd);
        file = tmp;
      }
      if (file && write_csv(file, Q.days * 86400, series))
        rc = 1;
      if (!rc && png && plot(png, file, n))
        rc = 1;
      if (!csv && png)
        unlink(tmp);
      if (!rc && csv)
        printf("wrote %s\n", csv);
      if (!rc && png)
        printf("wrote %s\n", png);
    }
  }
  return rc;
}
