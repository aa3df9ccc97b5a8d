/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp detector: workload-aware fail-slow and fail-stop detection.
 *
 * Microbatch times swing with the sequence lengths packed into each
 * microbatch, so "slower than usual" means nothing by itself. The detector
 * keeps, for every rank, an online predictor of the microbatch time from its
 * workload,
 *
 *     T ~ a*N + b*sum(l_i^2) + e*nseq + c
 *
 * (N tokens, l_i the lengths of the packed sequences: the attention term,
 * nseq the number of sequences), and from it the rank's speed on a fixed
 * workload in every iteration. A rank is slow when that speed is below its
 * peers' (the ranks that do the same work: the faster half of them, so that
 * a factor stays right when up to half of them are slow too) or below its
 * stage's baseline (learnt while the stage is healthy: a stage slow as a
 * whole is seen), beyond what the whole job sees at the same moment (a
 * job-wide stall cancels, and a stall that reaches nodes a few iterations
 * apart does too). The excess must persist: it is accumulated over
 * iterations (CUSUM up to log(1 + slow-margin), default 25 %, at least
 * confirm_iters iterations in a row in which the rank had samples; a rank
 * given no microbatch in a step neither confirms nor clears), then the rank
 * becomes SLOW with a speed factor f (the rank needs f times as long as a
 * healthy peer for the same work), which the planner can use to move work.
 * The verdict is re-validated every iteration and the rank returns to
 * HEALTHY (an event) once it is back at its peers' and baseline's speed.
 * A rank's usual pace relative to its peers and its stage's baseline
 * follow a healthy pace slowly, anchored: once the rank's model has
 * settled (one predictor memory after its start or its last SLOW period)
 * they rise at most half of log(1 + min_slow) above the lowest level they
 * had, so that a drift of any speed (a throttle ramping over thousands of
 * iterations) is caught at about the factor a step is.
 * Missed heartbeats, socket errors and failed probes fold into the same
 * per-rank health state (SUSPECT, then FAILED). SUSPECT is a passing state
 * (a suspicion being checked, a late heartbeat): act on SLOW and FAILED.
 *
 * Decisions are made per iteration: when the first sample of a later
 * iteration is recorded, or at once with resihp_detector_end_iter. The
 * number of microbatches a rank computes may change from one iteration to
 * the next (and be 0).
 *
 * With a single rank there is nothing to compare with: a slowdown of the
 * whole job (a slow filesystem) is then reported as that rank being slow.
 *
 * Ownership: resihp_detector_create and resihp_predictor_create allocate the
 * handle; the caller frees it with the matching _destroy (NULL is fine).
 * Nothing else is allocated after creation: recording a sample never
 * allocates and costs O(1); judging an iteration costs O(ranks log ranks). A
 * detector is not thread-safe: call it from one thread or hold a lock around
 * it. Every int-returning call returns 0 or a negative RESIHP_E* code and has
 * logged why (subsystem "detector").
 */
#ifndef RESIHP_DETECTOR_H
#define RESIHP_DETECTOR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Workload of one microbatch on one rank. tokens >= 1, 1 <= nseq <= tokens,
 * tokens^2/nseq <= sum_l2 <= tokens^2 (what any set of lengths gives). */
typedef struct {
  double tokens; /* N: tokens processed (no padding) */
  double sum_l2; /* sum of squared sequence lengths */
  double nseq;   /* number of (packed) sequences */
} resihp_workload_t;

/* ---- Predictor: online weighted least squares with forgetting. ---- */

typedef struct resihp_predictor resihp_predictor_t;

/* Indices into the coefficient vector (time in the caller's unit, usually
 * microseconds). */
enum {
  RESIHP_COEF_TOKEN = 0, /* a: per token */
  RESIHP_COEF_ATTN = 1,  /* b: per squared token of a sequence */
  RESIHP_COEF_SEQ = 2,   /* e: per sequence */
  RESIHP_COEF_CONST = 3, /* c: fixed cost per microbatch */
  RESIHP_COEF__COUNT = 4
};

/* forget in [0.9, 1]: weight kept by a sample per newer sample (effective
 * memory 1/(1-forget) samples); 0 chooses the default 0.998. */
int resihp_predictor_create(resihp_predictor_t **out, double forget);
void resihp_predictor_destroy(resihp_predictor_t *p);

/* Fit one measured sample. weight in (0, 1] scales its influence (Huber
 * weights of outliers); 1 for a normal sample. time > 0, finite. */
int resihp_predictor_update(resihp_predictor_t *p, const resihp_workload_t *w,
                            double time, double weight);

/* Predicted time of workload w; RESIHP_ESTATE before the first sample. */
int resihp_predictor_predict(const resihp_predictor_t *p,
                             const resihp_workload_t *w, double *time);

/* Current coefficients (RESIHP_COEF_*) in the caller's units. */
int resihp_predictor_coef(const resihp_predictor_t *p,
                          double coef[RESIHP_COEF__COUNT]);

/* Samples fitted so far. */
uint64_t resihp_predictor_samples(const resihp_predictor_t *p);

/* ---- Detector ---- */

typedef struct resihp_detector resihp_detector_t;

typedef enum {
  RESIHP_HEALTH_HEALTHY = 0,
  RESIHP_HEALTH_SUSPECT = 1, /* excess being validated, or heartbeats late */
  RESIHP_HEALTH_SLOW = 2,    /* validated fail-slow, see slow_factor */
  RESIHP_HEALTH_FAILED = 3,  /* fail-stop; sticky until reset_rank */
} resihp_health_state_t;

/* "healthy", "suspect", "slow", "failed"; "?" for anything else. */
const char *resihp_health_state_name(resihp_health_state_t s);

/* Why a rank is not healthy (bit set in resihp_rank_health_t.why). */
enum {
  RESIHP_WHY_SLOW = 1 << 0,      /* microbatches slower than predicted */
  RESIHP_WHY_PEERS = 1 << 1,     /* SLOW relative to its peers (else to its
                                    stage's baseline: the whole stage is) */
  RESIHP_WHY_HEARTBEAT = 1 << 2, /* missed heartbeats */
  RESIHP_WHY_SOCKET = 1 << 3,    /* a socket to it failed */
  RESIHP_WHY_PROBE = 1 << 4,     /* a health probe failed on its node */
};

typedef struct {
  resihp_health_state_t state;
  double slow_factor;         /* >= 1 when SLOW (time multiplier), else 1 */
  unsigned why;               /* RESIHP_WHY_* bits */
  unsigned missed_heartbeats; /* consecutive */
  uint64_t since_iter;        /* iteration at which this state began */
  uint64_t samples;           /* microbatch samples recorded */
} resihp_rank_health_t;

/* Called on every state change of a rank, and when the factor of a SLOW
 * rank moves by more than 10 %, from inside the call that caused it. */
typedef void (*resihp_detector_event_fn)(int rank, resihp_health_state_t prev,
                                         const resihp_rank_health_t *now,
                                         uint64_t iter, void *userdata);

typedef struct {
  int n_ranks;             /* ranks 0..n_ranks-1 (required, >= 1) */
  double slow_margin;      /* fraction (0.25 = 25 %) */
  double min_slow;         /* smallest validated slowdown reported (0.05) */
  double forget;           /* predictor forgetting factor (0.998) */
  unsigned warmup;         /* samples per rank before judging it (32) */
  unsigned suspect_misses; /* consecutive heartbeat misses -> SUSPECT (2) */
  unsigned failed_misses;  /* consecutive misses -> FAILED
                              (detect-timeout / heartbeat, i.e. 10) */
  unsigned peer_check;     /* unused (kept for source compatibility: the
                              peers' models are compared every iteration) */
  unsigned confirm_iters;  /* iterations in a row an excess must last
                              before SLOW (3; 1..1000) */
  resihp_detector_event_fn on_event; /* optional */
  void *userdata;
} resihp_detector_config_t;

/* Defaults, taken from resihp_settings_global() where a setting exists
 * (slow-margin, detect-timeout, heartbeat). */
void resihp_detector_config_init(resihp_detector_config_t *cfg, int n_ranks);

int resihp_detector_create(resihp_detector_t **out,
                           const resihp_detector_config_t *cfg);
void resihp_detector_destroy(resihp_detector_t *d);

/* Live use: an excess must also have lasted ms milliseconds of wall time
 * (CLOCK_MONOTONIC, read when an iteration is judged) before the rank is
 * SLOW; 0, the default, counts iterations only (recorded traces). Ranks
 * that share CPUs (more busy processes than cores) are each slowed now and
 * then, in turn, for a few short steps: a device that is slow stays slow.
 * 0, or RESIHP_EINVAL for a NULL detector or more than a minute. */
int resihp_detector_set_confirm_ms(resihp_detector_t *d, unsigned ms);

/* Declare which work a rank does: ranks with the same stage id run the same
 * model slice (the same pipeline stage in every data-parallel replica) and
 * are each other's peers for validation. Default: every rank its own stage
 * (no peers; validation then uses the rank's own history only). Changing a
 * rank's stage (layers moved by the planner) restarts its predictor. */
int resihp_detector_set_stage(resihp_detector_t *d, int rank, int stage);

/* One microbatch measured on rank: time_us is the rank's own execution time
 * of the microbatch (forward+backward with its own collectives, not waits for
 * other pipeline stages). iter must not decrease from call to call (a
 * smaller one counts in the iteration being recorded); the first sample of a
 * larger iter judges the iteration before it. RESIHP_EINVAL on a bad
 * workload or time (nothing recorded), RESIHP_ESTATE for a FAILED rank. */
int resihp_detector_record(resihp_detector_t *d, int rank, uint64_t iter,
                           const resihp_workload_t *w, double time_us);

/* Every sample of iteration iter has been recorded: judge it now (events
 * fire from inside this call) rather than at the first sample of the next
 * one. An iteration already judged, or one without samples, is a no-op. */
int resihp_detector_end_iter(resihp_detector_t *d, uint64_t iter);

/* Heartbeat bookkeeping, called once per heartbeat period per rank:
 * received = 1 when the rank's heartbeat arrived in this period, 0 when it
 * was missed. */
int resihp_detector_heartbeat(resihp_detector_t *d, int rank, uint64_t iter,
                              int received);

/* A send/receive to rank failed with RESIHP_E* err (EPEER, ECLOSED, ...).
 * The rank becomes SUSPECT and FAILED after suspect_misses further missed
 * heartbeats instead of failed_misses. */
int resihp_detector_socket_error(resihp_detector_t *d, int rank, uint64_t iter,
                                 int err);

/* Result of a node health probe covering rank (ok = 0: failed; what names
 * the check, e.g. "gpu"). A failed probe makes the rank FAILED at once. */
int resihp_detector_probe_report(resihp_detector_t *d, int rank, uint64_t iter,
                                 int ok, const char *what);

int resihp_detector_health(const resihp_detector_t *d, int rank,
                           resihp_rank_health_t *out);

/* The rank was replaced or rejoined: forget everything about it (state
 * HEALTHY, predictor restarted with a new warm-up). */
int resihp_detector_reset_rank(resihp_detector_t *d, int rank, uint64_t iter);

/* The rank's current prediction for w (RESIHP_ESTATE while warming up). */
int resihp_detector_predict(const resihp_detector_t *d, int rank,
                            const resihp_workload_t *w, double *time_us);

/* ---- A rank's model, taken elsewhere ----
 *
 * What resihp_detector_predict evaluates for a rank, as plain numbers: the
 * fitted coefficients theta of the scaled features (tokens/n0,
 * sum_l2/n0^2, nseq/k0, 1) and the scales n0, k0, t0 (the first sample's
 * tokens, sequences and time). A process that holds a copy of these
 * numbers, bit for bit, predicts bit for bit what the detector predicts:
 * resihp_model_predict is the one formula, which resihp_detector_predict
 * uses too (the coordinator ships a model to the ranks so that they assign
 * microbatches by cost without asking it, control/costplan.c). */
typedef struct {
  double theta[RESIHP_COEF__COUNT];
  double n0, k0, t0;
} resihp_model_t;

/* The rank's model into *out; RESIHP_ESTATE while it warms up (then
 * resihp_detector_predict fails as well). */
int resihp_detector_model(const resihp_detector_t *d, int rank,
                          resihp_model_t *out);

/* 1 if every figure of m is finite and its scales are what a first sample
 * gives (n0 >= 1, k0 >= 1, t0 > 0): a model worth evaluating. */
int resihp_model_ok(const resihp_model_t *m);

/* Predicted time of w by m, exactly as resihp_detector_predict computes
 * it for the rank m came from. RESIHP_EINVAL (logged at debug level: a
 * caller falls back) for an impossible workload or a model that is not
 * resihp_model_ok. */
int resihp_model_predict(const resihp_model_t *m, const resihp_workload_t *w,
                         double *time);

/* The predicted cost of each of n microbatches w[0..n-1] on a replica of
 * k shards, shard i's time by models[i]: cost[mb] = the sum over the
 * shards in order 0..k-1 of each prediction. RESIHP_EINVAL (cost then not
 * to be used) when a prediction fails or is not a finite time > 0. */
int resihp_model_costs(const resihp_model_t *models, int k,
                       const resihp_workload_t *w, int n, double *cost);

#ifdef __cplusplus
}
#endif
#endif /* RESIHP_DETECTOR_H */
