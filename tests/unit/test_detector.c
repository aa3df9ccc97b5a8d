/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the detector: the predictor's fit, fail-slow decisions on
 * crafted traces, fail-stop inputs, and rejection of bad input. */
#include "config.h"
#include "suite_main.h"

#include <resihp.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- a small deterministic workload generator ---- */

static uint64_t rng_state;

static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static double uniform(void) {
  return ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;
}

static double normal(void) {
  return sqrt(-2 * log(uniform())) * cos(2 * M_PI * uniform());
}

/* 1..6 documents of log-normal length (median 600, capped at 8192), not
 * packed: tokens and attention cost both swing by an order of magnitude. */
static resihp_workload_t random_workload(void) {
  resihp_workload_t w = {0, 0, 0};
  int n = 1 + (int)(uniform() * 6);
  for (int i = 0; i < n; i++) {
    double l = floor(exp(log(600) + 1.1 * normal()));
    if (l < 16)
      l = 16;
    if (l > 8192)
      l = 8192;
    w.tokens += l;
    w.sum_l2 += l * l;
    w.nseq += 1;
  }
  return w;
}

static const double A = 8.0, B = 4e-4, E = 40.0, C = 1500.0;

static double true_time(const resihp_workload_t *w) {
  return A * w->tokens + B * w->sum_l2 + E * w->nseq + C;
}

/* ---- log capture ---- */

static char last_error[512];
static int n_errors;

static void capture(resihp_log_level_t l, const char *sub, const char *msg,
                    void *ud) {
  (void)ud;
  if (l == RESIHP_LOG_ERROR) {
    snprintf(last_error, sizeof(last_error), "%s: %s", sub, msg);
    n_errors++;
  }
}

static void quiet_setup(void) {
  resihp_log_set_handler(capture, NULL);
  resihp_log_set_level(RESIHP_LOG_WARN);
  last_error[0] = '\0';
  n_errors = 0;
  rng_state = 42;
}

static void quiet_teardown(void) {
  resihp_log_set_handler(NULL, NULL);
}

/* ---- predictor ---- */

START_TEST(predictor_recovers_coefficients) {
  resihp_predictor_t *p = NULL;
  ck_assert_int_eq(resihp_predictor_create(&p, 0), 0);
  double coef[RESIHP_COEF__COUNT], t;
  resihp_workload_t w = random_workload();
  ck_assert_int_eq(resihp_predictor_predict(p, &w, &t), RESIHP_ESTATE);
  for (int i = 0; i < 2000; i++) {
    w = random_workload();
    ck_assert_int_eq(resihp_predictor_update(p, &w, true_time(&w), 1.0), 0);
  }
  ck_assert_uint_eq(resihp_predictor_samples(p), 2000);
  ck_assert_int_eq(resihp_predictor_coef(p, coef), 0);
  ck_assert_double_eq_tol(coef[RESIHP_COEF_TOKEN], A, A * 1e-3);
  ck_assert_double_eq_tol(coef[RESIHP_COEF_ATTN], B, B * 1e-3);
  ck_assert_double_eq_tol(coef[RESIHP_COEF_SEQ], E, E * 1e-2);
  ck_assert_double_eq_tol(coef[RESIHP_COEF_CONST], C, C * 1e-2);
  resihp_predictor_destroy(p);
}
END_TEST

START_TEST(predictor_noisy_fit_and_error) {
  resihp_predictor_t *p = NULL;
  ck_assert_int_eq(resihp_predictor_create(&p, 0.998), 0);
  double err = 0;
  int n = 0;
  for (int i = 0; i < 4000; i++) {
    resihp_workload_t w = random_workload();
    double t = true_time(&w) * exp(0.01 * normal());
    double pred;
    if (i >= 500 && resihp_predictor_predict(p, &w, &pred) == 0) {
      err += fabs(pred - t) / t;
      n++;
    }
    ck_assert_int_eq(resihp_predictor_update(p, &w, t, 1.0), 0);
  }
  double coef[RESIHP_COEF__COUNT];
  resihp_predictor_coef(p, coef);
  ck_assert_double_eq_tol(coef[RESIHP_COEF_TOKEN], A, A * 0.03);
  ck_assert_double_eq_tol(coef[RESIHP_COEF_ATTN], B, B * 0.05);
  /* Out-of-sample error close to the 1 % noise (mean |N(0,1%)| = 0.8 %). */
  ck_assert_double_lt(err / n, 0.012);
  resihp_predictor_destroy(p);
}
END_TEST

/* Packed microbatches all have the same token count, which is collinear
 * with the constant: the fit must stay finite and predict well anyway. */
START_TEST(predictor_packed_collinear) {
  resihp_predictor_t *p = NULL;
  ck_assert_int_eq(resihp_predictor_create(&p, 0), 0);
  double worst = 0;
  for (int i = 0; i < 3000; i++) {
    resihp_workload_t w = {8192, 0, 0};
    double left = 8192;
    while (left > 0) {
      double l = floor(exp(log(600) + 1.1 * normal()));
      l = l < 16 ? 16 : l > left ? left : l;
      w.sum_l2 += l * l;
      w.nseq += 1;
      left -= l;
    }
    double t = true_time(&w), pred;
    if (i >= 100) {
      ck_assert_int_eq(resihp_predictor_predict(p, &w, &pred), 0);
      ck_assert(isfinite(pred));
      if (fabs(pred - t) / t > worst)
        worst = fabs(pred - t) / t;
    }
    ck_assert_int_eq(resihp_predictor_update(p, &w, t, 1.0), 0);
  }
  ck_assert_double_lt(worst, 1e-3);
  resihp_predictor_destroy(p);
}
END_TEST

/* ---- detector on crafted traces ---- */

#define REPLICAS 4
#define STAGES 2
#define NRANKS (REPLICAS * STAGES)
#define MB 4 /* microbatches per rank per iteration */

struct events {
  int n_slow, n_failed, n_suspect, n_recovered;
  int rank_slow[NRANKS];
  uint64_t first_slow_iter[NRANKS];
  double factor[NRANKS];
};

static void on_event(int rank, resihp_health_state_t prev,
                     const resihp_rank_health_t *now, uint64_t iter, void *ud) {
  struct events *e = ud;
  (void)prev;
  if (now->state == RESIHP_HEALTH_SLOW && prev != RESIHP_HEALTH_SLOW) {
    e->n_slow++;
    if (!e->rank_slow[rank]++)
      e->first_slow_iter[rank] = iter;
  }
  if (now->state == RESIHP_HEALTH_SLOW)
    e->factor[rank] = now->slow_factor;
  if (now->state == RESIHP_HEALTH_FAILED)
    e->n_failed++;
  if (now->state == RESIHP_HEALTH_SUSPECT)
    e->n_suspect++;
  if (prev == RESIHP_HEALTH_SLOW && now->state == RESIHP_HEALTH_HEALTHY)
    e->n_recovered++; /* the scheduler gives the rank its quota back */
}

static resihp_detector_t *make_detector(struct events *e) {
  resihp_detector_config_t cfg;
  resihp_detector_config_init(&cfg, NRANKS);
  ck_assert_double_eq_tol(cfg.slow_margin, 0.25, 1e-12);
  cfg.on_event = on_event;
  cfg.userdata = e;
  resihp_detector_t *d = NULL;
  ck_assert_int_eq(resihp_detector_create(&d, &cfg), 0);
  for (int r = 0; r < NRANKS; r++)
    ck_assert_int_eq(resihp_detector_set_stage(d, r, r % STAGES), 0);
  return d;
}

/* Heavy-tailed noise: with probability p a sample's time is multiplied or
 * divided by exp(x), x Pareto-tailed (alpha 1.2) up to 2 (a preempted
 * kernel, a page-fault storm, a clock that jumped). */
static double tail(double p) {
  if (p <= 0 || uniform() >= p)
    return 1;
  double x = 0.05 * (pow(uniform(), -1 / 1.2) - 1);
  x = x > 2 ? 2 : x;
  return uniform() < 0.5 ? exp(x) : exp(-x);
}

/* One iteration: replica rep draws mbs[rep] microbatches (any number, 0
 * included), every stage of the replica runs them (stage s costs 1 + 0.1 s
 * times the base model). slow[r] multiplies rank r's times, global[rep]
 * everyone's in replica rep; tail_p adds heavy-tailed noise to every
 * sample. */
static void run_shaped(resihp_detector_t *d, uint64_t it,
                       const double slow[NRANKS], const double global[REPLICAS],
                       const int mbs[REPLICAS], double tail_p) {
  int most = 0;
  for (int rep = 0; rep < REPLICAS; rep++)
    most = mbs[rep] > most ? mbs[rep] : most;
  for (int m = 0; m < most; m++)
    for (int rep = 0; rep < REPLICAS; rep++) {
      if (m >= mbs[rep])
        continue;
      resihp_workload_t w = random_workload();
      for (int s = 0; s < STAGES; s++) {
        int r = rep * STAGES + s;
        double t = true_time(&w) * (1 + 0.1 * s) * exp(0.01 * normal()) *
                   slow[r] * global[rep] * tail(tail_p);
        ck_assert_int_eq(resihp_detector_record(d, r, it, &w, t), 0);
      }
    }
  /* The coordinator ends every step this way: decisions at once. */
  ck_assert_int_eq(resihp_detector_end_iter(d, it), 0);
}

/* MB microbatches per replica; global multiplies everyone's times. */
static void run_iteration(resihp_detector_t *d, uint64_t it,
                          const double slow[NRANKS], double global) {
  double g[REPLICAS];
  int mbs[REPLICAS];
  for (int rep = 0; rep < REPLICAS; rep++) {
    g[rep] = global;
    mbs[rep] = MB;
  }
  run_shaped(d, it, slow, g, mbs, 0);
}

static void all_healthy(double slow[NRANKS]) {
  for (int r = 0; r < NRANKS; r++)
    slow[r] = 1;
}

/* A detector whose ranks, all healthy (slow[] set so), ran the first 200
 * iterations; *it is the next one. */
static resihp_detector_t *warmed_up(struct events *e, double slow[NRANKS],
                                    uint64_t *it) {
  resihp_detector_t *d = make_detector(e);
  all_healthy(slow);
  for (*it = 0; *it < 200; (*it)++)
    run_iteration(d, *it, slow, 1);
  return d;
}

START_TEST(variability_only_no_alarm) {
  struct events e = {0};
  resihp_detector_t *d = make_detector(&e);
  double slow[NRANKS];
  for (int r = 0; r < NRANKS; r++)
    slow[r] = 1;
  for (uint64_t it = 0; it < 3000; it++) {
    /* everyone 15 % slower for a while (e.g. a checkpoint being written) */
    double global = (it % 700 >= 300 && it % 700 < 330) ? 1.15 : 1.0;
    run_iteration(d, it, slow, global);
  }
  ck_assert_int_eq(e.n_slow, 0);
  ck_assert_int_eq(e.n_failed, 0);
  for (int r = 0; r < NRANKS; r++) {
    resihp_rank_health_t h;
    ck_assert_int_eq(resihp_detector_health(d, r, &h), 0);
    ck_assert_int_eq(h.state, RESIHP_HEALTH_HEALTHY);
    ck_assert_uint_eq(h.samples, 3000 * MB);
  }
  resihp_detector_destroy(d);
}
END_TEST

START_TEST(persistent_slowdown_detected_and_recovered) {
  struct events e = {0};
  resihp_detector_t *d = make_detector(&e);
  double slow[NRANKS];
  for (int r = 0; r < NRANKS; r++)
    slow[r] = 1;
  const int victim = 5;
  resihp_rank_health_t h;
  uint64_t it = 0;
  for (; it < 200; it++)
    run_iteration(d, it, slow, 1);
  ck_assert_int_eq(e.n_slow, 0);
  slow[victim] = 1.3;
  for (; it < 203; it++)
    run_iteration(d, it, slow, 1);
  /* Within 3 iterations: SLOW, with the factor the planner needs. */
  ck_assert_int_eq(resihp_detector_health(d, victim, &h), 0);
  ck_assert_str_eq(resihp_health_state_name(h.state), "slow");
  ck_assert_int_eq(e.rank_slow[victim], 1);
  ck_assert_uint_ge(e.first_slow_iter[victim], 200);
  ck_assert(h.why & RESIHP_WHY_SLOW);
  ck_assert(h.why & RESIHP_WHY_PEERS);
  for (; it < 400; it++)
    run_iteration(d, it, slow, 1);
  ck_assert_int_eq(resihp_detector_health(d, victim, &h), 0);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_SLOW);
  ck_assert_double_eq_tol(h.slow_factor, 1.3, 0.05);
  ck_assert_int_eq(e.n_slow, 1); /* nobody else, no flapping */
  /* The device recovers. */
  slow[victim] = 1;
  for (; it < 403; it++)
    run_iteration(d, it, slow, 1);
  ck_assert_int_eq(resihp_detector_health(d, victim, &h), 0);
  ck_assert_str_eq(resihp_health_state_name(h.state), "healthy");
  ck_assert_double_eq(h.slow_factor, 1.0);
  ck_assert_int_eq(e.n_recovered, 1); /* the event that returns its quota */
  for (; it < 1000; it++)
    run_iteration(d, it, slow, 1);
  ck_assert_int_eq(e.n_slow, 1);
  resihp_detector_destroy(d);
}
END_TEST

static double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Replicas whose processes share CPUs (more busy processes than cores)
 * take turns being slowed: here one replica at a time is 1.6x slow for
 * 6 iterations, then the next. Counted in iterations alone that is a
 * slowdown, again and again (the lab's 29 slow episodes of a failure-free
 * run on 2 shared cores); with resihp_detector_set_confirm_ms(1000) an
 * excess must last a second of wall time, which turns fed at once never
 * do. A slowdown that lasts is then SLOW once a second has passed, not
 * before. */
START_TEST(turns_on_shared_cpus_no_alarm) {
  for (int confirm = 0; confirm < 2; confirm++) {
    struct events e = {0};
    resihp_detector_t *d = make_detector(&e);
    ck_assert_int_eq(resihp_detector_set_confirm_ms(d, confirm ? 1000 : 0), 0);
    double slow[NRANKS];
    all_healthy(slow);
    uint64_t it = 0;
    for (; it < 200; it++)
      run_iteration(d, it, slow, 1);
    double t0 = mono_ms();
    for (; it < 600; it++) {
      int turn = (int)(it / 6) % REPLICAS;
      for (int r = 0; r < NRANKS; r++)
        slow[r] = r / STAGES == turn ? 1.6 : 1;
      run_iteration(d, it, slow, 1);
    }
    int fast = mono_ms() - t0 < 1000; /* else the turns took a second */
    if (!confirm)
      ck_assert_msg(e.n_slow > 0, "turns not taken for slowdowns at all");
    else if (fast)
      ck_assert_msg(e.n_slow == 0, "%d slow episodes", e.n_slow);
    resihp_detector_destroy(d);
  }
  struct events e = {0};
  resihp_detector_t *d = make_detector(&e);
  ck_assert_int_eq(resihp_detector_set_confirm_ms(d, 1000), 0);
  double slow[NRANKS];
  all_healthy(slow);
  uint64_t it = 0;
  for (; it < 200; it++)
    run_iteration(d, it, slow, 1);
  slow[5] = 1.5;
  double t0 = mono_ms(), dt = 0;
  for (; !e.rank_slow[5] && it < 100000; it++) {
    run_iteration(d, it, slow, 1);
    dt = mono_ms() - t0;
    ck_assert_msg(e.rank_slow[5] == 0 || dt >= 1000,
                  "slow after %.0f ms, before a second", dt);
    if (dt < 1000)
      usleep(20000);
  }
  ck_assert_msg(e.rank_slow[5] == 1 && e.n_slow == 1,
                "not found slow (%.0f ms)", dt);
  ck_assert_int_eq(resihp_detector_set_confirm_ms(d, 60001), RESIHP_EINVAL);
  ck_assert_int_eq(resihp_detector_set_confirm_ms(NULL, 10), RESIHP_EINVAL);
  resihp_detector_destroy(d);
}
END_TEST

/* A cluster-wide swing that starts together with a real fault: the swing
 * cancels against the peers and the rest of the job, the fault does not,
 * and the factor reported is the fault's alone. */
START_TEST(fault_during_global_swing) {
  struct events e = {0};
  resihp_detector_t *d = make_detector(&e);
  double slow[NRANKS];
  for (int r = 0; r < NRANKS; r++)
    slow[r] = 1;
  uint64_t it = 0;
  for (; it < 200; it++)
    run_iteration(d, it, slow, 1);
  slow[6] = 1.3;
  for (; it < 240; it++)
    run_iteration(d, it, slow, 1.15);
  ck_assert_int_eq(e.n_slow, 1);
  ck_assert_int_eq(e.rank_slow[6], 1);
  ck_assert_uint_le(e.first_slow_iter[6], 202);
  resihp_rank_health_t h;
  ck_assert_int_eq(resihp_detector_health(d, 6, &h), 0);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_SLOW);
  ck_assert_double_eq_tol(h.slow_factor, 1.3, 0.06);
  /* the swing ends, the fault stays: still slow, nobody else */
  for (; it < 300; it++)
    run_iteration(d, it, slow, 1);
  ck_assert_int_eq(resihp_detector_health(d, 6, &h), 0);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_SLOW);
  ck_assert_int_eq(e.n_slow, 1);
  resihp_detector_destroy(d);
}
END_TEST

/* A device slow from its first microbatch teaches its own predictor that
 * slowness; the comparison with its peers' models must still catch it. */
START_TEST(slow_from_start_caught_by_peers) {
  struct events e = {0};
  resihp_detector_t *d = make_detector(&e);
  double slow[NRANKS];
  for (int r = 0; r < NRANKS; r++)
    slow[r] = 1;
  slow[2] = 1.5;
  for (uint64_t it = 0; it < 100; it++)
    run_iteration(d, it, slow, 1);
  resihp_rank_health_t h;
  ck_assert_int_eq(resihp_detector_health(d, 2, &h), 0);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_SLOW);
  ck_assert_double_eq_tol(h.slow_factor, 1.5, 0.08);
  ck_assert_int_eq(e.n_slow, 1);
  /* ... and when it is repaired it is healthy again. */
  slow[2] = 1;
  for (uint64_t it = 100; it < 104; it++)
    run_iteration(d, it, slow, 1);
  ck_assert_int_eq(resihp_detector_health(d, 2, &h), 0);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_HEALTHY);
  resihp_detector_destroy(d);
}
END_TEST

/* ---- shapes an evaluation with trace families of its own found hard ---- */

/* A whole pipeline stage slow at once (every peer shares the slowdown):
 * only the stage's baseline and the other stages can tell. */
START_TEST(whole_stage_slow_detected) {
  struct events e = {0};
  double slow[NRANKS];
  uint64_t it;
  resihp_detector_t *d = warmed_up(&e, slow, &it);
  for (int r = 1; r < NRANKS; r += STAGES)
    slow[r] = 1.3; /* every replica's stage 1 */
  for (; it < 204; it++)
    run_iteration(d, it, slow, 1);
  for (int r = 0; r < NRANKS; r++) {
    resihp_rank_health_t h;
    ck_assert_int_eq(resihp_detector_health(d, r, &h), 0);
    if (r % STAGES == 1) {
      ck_assert_msg(h.state == RESIHP_HEALTH_SLOW, "rank %d is %s", r,
                    resihp_health_state_name(h.state));
      ck_assert_double_eq_tol(h.slow_factor, 1.3, 0.06);
      ck_assert(!(h.why & RESIHP_WHY_PEERS)); /* against its baseline */
    } else {
      ck_assert_int_eq(h.state, RESIHP_HEALTH_HEALTHY);
    }
  }
  /* It stays detected (the baseline does not learn it), nobody else. */
  for (; it < 600; it++)
    run_iteration(d, it, slow, 1);
  ck_assert_int_eq(e.n_slow, REPLICAS);
  for (int r = 1; r < NRANKS; r += STAGES) {
    resihp_rank_health_t h;
    resihp_detector_health(d, r, &h);
    ck_assert_int_eq(h.state, RESIHP_HEALTH_SLOW);
  }
  resihp_detector_destroy(d);
}
END_TEST

/* One slow iteration on one rank (all its microbatches of that step, 2x)
 * is not a fail-slow: confirmation needs the excess over several
 * iterations, whatever the number of samples in one. */
START_TEST(single_slow_iteration_no_alarm) {
  struct events e = {0};
  resihp_detector_t *d = make_detector(&e);
  double slow[NRANKS];
  all_healthy(slow);
  double g[REPLICAS] = {1, 1, 1, 1};
  int mbs[REPLICAS] = {16, 16, 16, 16};
  for (uint64_t it = 0; it < 800; it++) {
    slow[5] = it % 100 == 50 ? 2.0 : 1.0;
    run_shaped(d, it, slow, g, mbs, 0);
  }
  ck_assert_int_eq(e.n_slow, 0);
  resihp_detector_destroy(d);
}
END_TEST

/* A stall of the whole job (3x, a checkpoint on a shared filesystem) that
 * reaches the replicas up to 2 iterations apart and leaves them up to 6
 * apart: no alarm. A real fault after it is still seen. */
START_TEST(skewed_job_stall_no_alarm) {
  struct events e = {0};
  resihp_detector_t *d = make_detector(&e);
  double slow[NRANKS];
  all_healthy(slow);
  int mbs[REPLICAS] = {MB, MB, MB, MB};
  static const int start_skew[REPLICAS] = {0, 2, 1, 0};
  static const int end_skew[REPLICAS] = {0, 6, 3, 1};
  uint64_t it = 0;
  for (; it < 700; it++) {
    double g[REPLICAS];
    for (int rep = 0; rep < REPLICAS; rep++) {
      int stall = 0;
      for (uint64_t s0 = 200; s0 <= 500; s0 += 150) /* three stalls */
        stall |= it >= s0 + start_skew[rep] && it < s0 + 20 + end_skew[rep];
      g[rep] = stall ? 3.0 : 1.0;
    }
    run_shaped(d, it, slow, g, mbs, 0);
  }
  ck_assert_int_eq(e.n_slow, 0);
  slow[3] = 1.4;
  for (; it < 710; it++)
    run_iteration(d, it, slow, 1);
  ck_assert_int_eq(e.n_slow, 1);
  ck_assert_int_eq(e.rank_slow[3], 1);
  resihp_detector_destroy(d);
}
END_TEST

/* Heavy-tailed noise on every rank while the models warm up (first 30
 * iterations): whatever verdicts that noise causes must not outlive it
 * (the old detector kept such ranks SLOW on frozen models for hundreds of
 * iterations). */
START_TEST(warmup_heavy_tail_recovers) {
  struct events e = {0};
  resihp_detector_t *d = make_detector(&e);
  double slow[NRANKS];
  all_healthy(slow);
  double g[REPLICAS] = {1, 1, 1, 1};
  int mbs[REPLICAS] = {MB, MB, MB, MB};
  int slow_iters = 0;
  for (uint64_t it = 0; it < 400; it++) {
    run_shaped(d, it, slow, g, mbs, it < 30 ? 0.3 : 0);
    for (int r = 0; r < NRANKS && it >= 100; r++) {
      resihp_rank_health_t h;
      resihp_detector_health(d, r, &h);
      slow_iters += h.state == RESIHP_HEALTH_SLOW;
    }
  }
  ck_assert_int_eq(slow_iters, 0); /* rank-iterations SLOW after 100 */
  ck_assert_int_eq(e.n_slow, e.n_recovered);
  resihp_detector_destroy(d);
}
END_TEST

/* The coordinator assigns microbatches by predicted cost: every replica's
 * count changes every step, 0 included. No alarm from that, and a slow
 * rank is still found with its factor. */
START_TEST(varying_microbatches_harmless) {
  struct events e = {0};
  resihp_detector_t *d = make_detector(&e);
  double slow[NRANKS];
  all_healthy(slow);
  double g[REPLICAS] = {1, 1, 1, 1};
  uint64_t it = 0;
  for (; it < 600; it++) {
    int mbs[REPLICAS];
    for (int rep = 0; rep < REPLICAS; rep++)
      mbs[rep] = (int)(uniform() * 9); /* 0..8 */
    if (it == 400)
      slow[4] = 1.3;
    run_shaped(d, it, slow, g, mbs, 0);
    if (it < 400)
      ck_assert_int_eq(e.n_slow, 0);
  }
  ck_assert_int_eq(e.n_slow, 1);
  ck_assert_int_eq(e.rank_slow[4], 1);
  ck_assert_uint_le(e.first_slow_iter[4], 412);
  resihp_rank_health_t h;
  resihp_detector_health(d, 4, &h);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_SLOW);
  ck_assert_double_eq_tol(h.slow_factor, 1.3, 0.06);
  ck_assert_int_eq(e.n_failed, 0);
  resihp_detector_destroy(d);
}
END_TEST

/* Half of a stage's ranks slow at once: the factor is measured against the
 * healthy half, not the median of a partly slow set. */
START_TEST(half_peers_slow_factor) {
  struct events e = {0};
  double slow[NRANKS];
  uint64_t it;
  resihp_detector_t *d = warmed_up(&e, slow, &it);
  slow[0] = slow[2] = 1.5; /* stage 0 of replicas 0 and 1 */
  for (; it < 260; it++)
    run_iteration(d, it, slow, 1);
  ck_assert_int_eq(e.n_slow, 2);
  for (int r = 0; r <= 2; r += 2) {
    resihp_rank_health_t h;
    resihp_detector_health(d, r, &h);
    ck_assert_int_eq(h.state, RESIHP_HEALTH_SLOW);
    ck_assert_uint_le(e.first_slow_iter[r], 203);
    ck_assert_double_eq_tol(e.factor[r], 1.5, 0.06);
    ck_assert_double_eq_tol(h.slow_factor, 1.5, 0.06);
  }
  resihp_detector_destroy(d);
}
END_TEST

/* ---- slow drifts: caught at the factor a step is ---- */

/* Rank 5 healthy for 200 iterations, then slowed from 1 to factor `to`
 * over `ramp` iterations (0: a step) and held at `to` for `hold` more.
 * Returns the true factor at the iteration it is first SLOW, 0 if never;
 * no other rank may be flagged. */
static double first_flagged(double to, unsigned ramp, unsigned hold) {
  struct events e = {0};
  double slow[NRANKS];
  uint64_t it;
  resihp_detector_t *d = warmed_up(&e, slow, &it);
  double f = 0;
  for (unsigned k = 0; k < ramp + hold && !e.rank_slow[5]; k++, it++) {
    slow[5] = ramp && k < ramp ? 1 + (to - 1) * (k + 1) / ramp : to;
    run_iteration(d, it, slow, 1);
    if (e.rank_slow[5])
      f = slow[5];
  }
  ck_assert_msg(e.n_slow == e.rank_slow[5], "%d other ranks flagged",
                e.n_slow - e.rank_slow[5]);
  resihp_detector_destroy(d);
  return f;
}

/* The factor a step needs: the smallest of 1.02, 1.03, ... held 300
 * iterations that is flagged (and every larger one is). */
static double step_factor(void) {
  double found = 0;
  for (int c = 15; c >= 2; c--) {
    double f = 1 + c / 100.0;
    if (first_flagged(f, 0, 300) == 0)
      break;
    found = f;
  }
  ck_assert_msg(found > 0 && found <= 1.10, "step factor %.2f", found);
  return found;
}

/* A thermal throttle ramping 1.0 -> 1.6 over 100, 1,000 or 10,000
 * iterations is first flagged at the factor a step is (within 0.05): the
 * rank's baseline and noise estimate do not follow the ramp (before: 1,000
 * iterations flagged at ~1.4, 10,000 at ~1.35). */
START_TEST(ramp_caught_at_step_factor) {
  double step = step_factor();
  static const unsigned ramps[] = {100, 1000, 10000};
  for (int i = 0; i < 3; i++) {
    double f = first_flagged(1.6, ramps[i], 300);
    printf("ramp 1.0-1.6 over %u iterations: first flagged at %.3f (a step: "
           "%.2f)\n",
           ramps[i], f, step);
    ck_assert_msg(f > 0 && fabs(f - step) <= 0.05,
                  "ramp over %u iterations flagged at %.3f, a step at %.2f",
                  ramps[i], f, step);
  }
}
END_TEST

/* A drift that settles at 1.2x or 1.35x, slowly or very slowly, is
 * flagged as the same step is (before: never). */
START_TEST(ramp_then_hold_flagged) {
  static const double to[] = {1.2, 1.35};
  static const unsigned ramps[] = {1000, 10000};
  for (int i = 0; i < 2; i++) {
    ck_assert_msg(first_flagged(to[i], 0, 300) > 0, "step %.2f missed", to[i]);
    for (int j = 0; j < 2; j++)
      ck_assert_msg(first_flagged(to[i], ramps[j], 300) > 0,
                    "ramp to %.2f over %u iterations, held 300, missed", to[i],
                    ramps[j]);
  }
}
END_TEST

START_TEST(heartbeats_suspect_then_failed) {
  struct events e = {0};
  resihp_detector_t *d = make_detector(&e);
  resihp_rank_health_t h;
  ck_assert_int_eq(resihp_detector_heartbeat(d, 1, 0, 0), 0);
  ck_assert_int_eq(resihp_detector_health(d, 1, &h), 0);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_HEALTHY); /* one late beat */
  ck_assert_int_eq(resihp_detector_heartbeat(d, 1, 0, 0), 0);
  resihp_detector_health(d, 1, &h);
  ck_assert_str_eq(resihp_health_state_name(h.state), "suspect");
  ck_assert(h.why & RESIHP_WHY_HEARTBEAT);
  ck_assert_uint_eq(h.missed_heartbeats, 2);
  /* a heartbeat clears the suspicion */
  resihp_detector_heartbeat(d, 1, 1, 1);
  resihp_detector_health(d, 1, &h);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_HEALTHY);
  /* failed_misses (detect-timeout 1000 ms / heartbeat 100 ms = 10) */
  for (int i = 0; i < 9; i++)
    resihp_detector_heartbeat(d, 1, 2, 0);
  resihp_detector_health(d, 1, &h);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_SUSPECT);
  resihp_detector_heartbeat(d, 1, 3, 0);
  resihp_detector_health(d, 1, &h);
  ck_assert_str_eq(resihp_health_state_name(h.state), "failed");
  ck_assert_uint_eq(h.since_iter, 3);
  /* sticky: a late heartbeat does not revive it, samples are refused */
  resihp_detector_heartbeat(d, 1, 4, 1);
  resihp_detector_health(d, 1, &h);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_FAILED);
  resihp_workload_t w = {100, 10000, 1};
  ck_assert_int_eq(resihp_detector_record(d, 1, 4, &w, 10), RESIHP_ESTATE);
  ck_assert_int_eq(resihp_detector_reset_rank(d, 1, 5), 0);
  resihp_detector_health(d, 1, &h);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_HEALTHY);
  ck_assert_int_eq(resihp_detector_record(d, 1, 5, &w, 10), 0);

  /* socket error: suspect at once, failed after suspect_misses misses */
  ck_assert_int_eq(resihp_detector_socket_error(d, 3, 7, RESIHP_EPEER), 0);
  resihp_detector_health(d, 3, &h);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_SUSPECT);
  ck_assert(h.why & RESIHP_WHY_SOCKET);
  resihp_detector_heartbeat(d, 3, 7, 0);
  resihp_detector_heartbeat(d, 3, 7, 0);
  resihp_detector_health(d, 3, &h);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_FAILED);

  /* failed probe: failed at once; a passing one changes nothing */
  ck_assert_int_eq(resihp_detector_probe_report(d, 4, 8, 1, "gpu"), 0);
  resihp_detector_health(d, 4, &h);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_HEALTHY);
  ck_assert_int_eq(resihp_detector_probe_report(d, 4, 8, 0, "gpu"), 0);
  resihp_detector_health(d, 4, &h);
  ck_assert_int_eq(h.state, RESIHP_HEALTH_FAILED);
  ck_assert(h.why & RESIHP_WHY_PROBE);
  ck_assert_int_eq(e.n_failed, 3);
  resihp_detector_destroy(d);
}
END_TEST

START_TEST(state_names) {
  ck_assert_str_eq(resihp_health_state_name(RESIHP_HEALTH_HEALTHY), "healthy");
  ck_assert_str_eq(resihp_health_state_name(RESIHP_HEALTH_SUSPECT), "suspect");
  ck_assert_str_eq(resihp_health_state_name(RESIHP_HEALTH_SLOW), "slow");
  ck_assert_str_eq(resihp_health_state_name(RESIHP_HEALTH_FAILED), "failed");
  ck_assert_str_eq(resihp_health_state_name((resihp_health_state_t)7), "?");
}
END_TEST

/* ---- bad input ---- */

static const struct {
  resihp_workload_t w;
  double t;
  const char *needle;
} bad[] = {
    {{100, 10000, 1}, NAN, "time nan rejected"},
    {{100, 10000, 1}, -5, "time -5 rejected"},
    {{100, 10000, 1}, 0, "time 0 rejected"},
    {{100, 10000, 1}, INFINITY, "time inf rejected"},
    {{0, 0, 0}, 10, "empty or invalid batch"},
    {{100, 10000, 0}, 10, "empty or invalid batch"},
    {{NAN, 10000, 1}, 10, "empty or invalid batch"},
    {{100, 20000, 1}, 10, "inconsistent workload"},
    {{100, 1000, 2}, 10, "inconsistent workload"},
    {{100, 10000, 200}, 10, "inconsistent workload"},
};

START_TEST(bad_samples_rejected) {
  resihp_detector_config_t cfg;
  resihp_detector_config_init(&cfg, 2);
  resihp_detector_t *d = NULL;
  ck_assert_int_eq(resihp_detector_create(&d, &cfg), 0);
  resihp_predictor_t *p = NULL;
  ck_assert_int_eq(resihp_predictor_create(&p, 0), 0);

  ck_assert_int_eq(resihp_detector_record(d, 0, 0, &bad[_i].w, bad[_i].t),
                   RESIHP_EINVAL);
  ck_assert_msg(strstr(last_error, bad[_i].needle), "logged '%s'", last_error);
  ck_assert_int_eq(n_errors, 1);
  last_error[0] = '\0';
  ck_assert_int_eq(resihp_predictor_update(p, &bad[_i].w, bad[_i].t, 1),
                   RESIHP_EINVAL);
  ck_assert_msg(strstr(last_error, bad[_i].needle), "logged '%s'", last_error);
  /* nothing was recorded */
  resihp_rank_health_t h;
  ck_assert_int_eq(resihp_detector_health(d, 0, &h), 0);
  ck_assert_uint_eq(h.samples, 0);
  ck_assert_uint_eq(resihp_predictor_samples(p), 0);
  resihp_predictor_destroy(p);
  resihp_detector_destroy(d);
}
END_TEST

START_TEST(bad_arguments_rejected) {
  resihp_detector_config_t cfg;
  resihp_detector_config_init(&cfg, 2);
  resihp_detector_t *d = NULL;
  resihp_workload_t w = {100, 10000, 1};
  ck_assert_int_eq(resihp_detector_create(&d, NULL), RESIHP_EINVAL);
  cfg.n_ranks = 0;
  ck_assert_int_eq(resihp_detector_create(&d, &cfg), RESIHP_EINVAL);
  ck_assert_ptr_null(d);
  ck_assert_ptr_nonnull(strstr(last_error, "n_ranks"));
  resihp_detector_config_init(&cfg, 2);
  cfg.slow_margin = NAN;
  ck_assert_int_eq(resihp_detector_create(&d, &cfg), RESIHP_EINVAL);
  resihp_detector_config_init(&cfg, 2);
  ck_assert_int_eq(resihp_detector_create(&d, &cfg), 0);
  ck_assert_int_eq(resihp_detector_record(d, 2, 0, &w, 1), RESIHP_ERANGE);
  ck_assert_ptr_nonnull(strstr(last_error, "out of range"));
  ck_assert_int_eq(resihp_detector_record(d, -1, 0, &w, 1), RESIHP_ERANGE);
  ck_assert_int_eq(resihp_detector_record(d, 0, 0, NULL, 1), RESIHP_EINVAL);
  ck_assert_int_eq(resihp_detector_record(NULL, 0, 0, &w, 1), RESIHP_EINVAL);
  ck_assert_int_eq(resihp_detector_set_stage(d, 0, -3), RESIHP_EINVAL);
  ck_assert_int_eq(resihp_detector_socket_error(d, 0, 0, 5), RESIHP_EINVAL);
  ck_assert_int_eq(resihp_detector_health(d, 0, NULL), RESIHP_EINVAL);
  double t;
  ck_assert_int_eq(resihp_detector_predict(d, 0, &w, &t), RESIHP_ESTATE);
  resihp_predictor_t *p = NULL;
  ck_assert_int_eq(resihp_predictor_create(&p, 0.5), RESIHP_EINVAL);
  ck_assert_ptr_null(p);
  ck_assert_int_eq(resihp_predictor_create(&p, 0), 0);
  ck_assert_int_eq(resihp_predictor_update(p, &w, 10, 0), RESIHP_EINVAL);
  ck_assert_int_eq(resihp_predictor_update(p, &w, 10, 2), RESIHP_EINVAL);
  resihp_predictor_destroy(p);
  resihp_predictor_destroy(NULL);
  resihp_detector_destroy(d);
  resihp_detector_destroy(NULL);
}
END_TEST

static Suite *detector_suite(void) {
  Suite *s = suite_create("detector");
  TCase *t = tcase_create("predictor");
  tcase_set_timeout(t, 30);
  tcase_add_checked_fixture(t, quiet_setup, quiet_teardown);
  tcase_add_test(t, predictor_recovers_coefficients);
  tcase_add_test(t, predictor_noisy_fit_and_error);
  tcase_add_test(t, predictor_packed_collinear);
  suite_add_tcase(s, t);

  t = tcase_create("decisions");
  tcase_set_timeout(t, 60);
  tcase_add_checked_fixture(t, quiet_setup, quiet_teardown);
  tcase_add_test(t, variability_only_no_alarm);
  tcase_add_test(t, persistent_slowdown_detected_and_recovered);
  tcase_add_test(t, fault_during_global_swing);
  tcase_add_test(t, slow_from_start_caught_by_peers);
  tcase_add_test(t, whole_stage_slow_detected);
  tcase_add_test(t, single_slow_iteration_no_alarm);
  tcase_add_test(t, skewed_job_stall_no_alarm);
  tcase_add_test(t, warmup_heavy_tail_recovers);
  tcase_add_test(t, varying_microbatches_harmless);
  tcase_add_test(t, half_peers_slow_factor);
  tcase_add_test(t, ramp_caught_at_step_factor);
  tcase_add_test(t, ramp_then_hold_flagged);
  tcase_add_test(t, turns_on_shared_cpus_no_alarm);
  tcase_add_test(t, heartbeats_suspect_then_failed);
  tcase_add_test(t, state_names);
  suite_add_tcase(s, t);

  t = tcase_create("bad-input");
  tcase_set_timeout(t, 10);
  tcase_add_checked_fixture(t, quiet_setup, quiet_teardown);
  tcase_add_loop_test(t, bad_samples_rejected, 0, sizeof(bad) / sizeof(bad[0]));
  tcase_add_test(t, bad_arguments_rejected);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  return run_suite(detector_suite());
}
