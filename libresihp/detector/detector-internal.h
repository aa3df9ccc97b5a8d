/* SPDX-License-Identifier: BSD-3-Clause */
/* Private to libresihp/detector: the predictor state that the detector embeds
 * in every rank (so that recording a sample never allocates) and the input
 * checks shared by the public entry points. */
#ifndef RESIHP_DETECTOR_INTERNAL_H
#define RESIHP_DETECTOR_INTERNAL_H

#include <resihp/detector.h>

#include <stdint.h>

#define RESIHP__PRED_NF RESIHP_COEF__COUNT

/* Exponentially weighted least squares kept as its normal equations: R is
 * the upper triangle of sum(w x x^T) (row-major, 10 entries), r = sum(w x y),
 * theta the current solution. Features and time are scaled by the first
 * sample (n0, k0, t0) so that all entries are O(1). */
struct resihp__pred {
  double R[RESIHP__PRED_NF * (RESIHP__PRED_NF + 1) / 2];
  double r[RESIHP__PRED_NF];
  double theta[RESIHP__PRED_NF];
  double n0, k0, t0;
  double forget;
  uint64_t n;
};

void resihp__pred_init(struct resihp__pred *p, double forget);
void resihp__pred_update(struct resihp__pred *p, const resihp_workload_t *w,
                         double time, double weight);
/* Only valid once p->n > 0. */
double resihp__pred_predict(const struct resihp__pred *p,
                            const resihp_workload_t *w);
void resihp__pred_coef(const struct resihp__pred *p,
                       double coef[RESIHP__PRED_NF]);

/* 0 if w and time describe a possible microbatch; otherwise logs what is
 * wrong (naming who called) and returns RESIHP_EINVAL. */
/* 0, or logs why (naming the API call `who`) and returns EINVAL/ERANGE. */
int resihp__detector_check_rank(const resihp_detector_t *d, int rank,
                                const char *who);
int resihp__check_sample(const char *who, const resihp_workload_t *w,
                         double time);

/* ---- Detector state shared by detector.c, failslow.c and health.c ---- */

/* Fail-slow sub-state of a rank (see failslow.c). */
enum resihp__fs { RESIHP__FS_OK, RESIHP__FS_SUSPECT, RESIHP__FS_SLOW };

/* Recent samples of a rank kept for validation and for fitting samples that
 * validation cleared. */
#define RESIHP__RING 8

struct resihp__rank {
  struct resihp__pred pred;
  int slot;      /* index of its stage in the detector's stage table */
  int next_peer; /* next rank of the same stage, -1 at the end */
  int stage;     /* the caller's stage id */
  /* Fail-slow. z is log(measured / own prediction); z_rel the same less
   * the mean z of the peers, so that swings every peer sees cancel. */
  enum resihp__fs fs;
  double mad;         /* exponentially weighted mean |z_rel - bias| */
  double bias;        /* exponentially weighted mean z_rel of fitted samples */
  double cusum;       /* upper CUSUM of z_rel */
  double down;        /* while SLOW: CUSUM towards recovery */
  double zlast;       /* last z, the rank's contribution to its peers */
  double factor_log;  /* while SLOW: smoothed log slowdown */
  double base;        /* while SLOW: own model's excess over the peers' */
  double reported;    /* factor in the last event */
  int contrib;        /* counted in its stage's sum of z */
  int model_gap_hits; /* consecutive peer checks finding a slow model */
  unsigned run;       /* samples since the CUSUM left zero */
  unsigned ring_n, ring_head;
  double ring_z[RESIHP__RING];
  double ring_t[RESIHP__RING];
  resihp_workload_t ring_w[RESIHP__RING];
  uint64_t samples;
  unsigned check_countdown;
  /* Fail-stop. */
  unsigned misses;
  int socket_err;
  int probe_failed;
  unsigned refused; /* samples refused since it FAILED */
  /* Published health. */
  resihp_health_state_t state;
  double slow_factor;
  unsigned why;
  uint64_t since_iter;
};

struct resihp__stage {
  int id;
  int members; /* ranks in this stage (0: slot free) */
  int head;    /* first member, -1 if none */
  int count;   /* members contributing to sum */
  double sum;  /* sum of their zlast */
};

struct resihp_detector {
  resihp_detector_config_t cfg;
  double h;     /* log(1 + slow margin): CUSUM threshold */
  double k_min; /* smallest CUSUM allowance per sample */
  double s_min; /* log(1 + min_slow) */
  struct resihp__rank *ranks;
  struct resihp__stage *stages; /* cfg.n_ranks slots */
  int count;                    /* ranks contributing to sum, over all stages */
  double sum;                   /* sum of their zlast */
};

/* Add/remove a rank's zlast to/from its stage sum. */
void resihp__contrib_set(resihp_detector_t *d, int rank, int on);

/* Recompute a rank's published health from its fail-slow and fail-stop
 * state; log and call the event callback if it changed. */
void resihp__publish(resihp_detector_t *d, int rank, uint64_t iter);

/* Fail-slow path of resihp_detector_record (arguments checked). */
void resihp__failslow_record(resihp_detector_t *d, int rank, uint64_t iter,
                             const resihp_workload_t *w, double time);

/* Forget the fail-slow state of a rank (new warm-up). */
void resihp__failslow_reset(resihp_detector_t *d, int rank);

#endif /* RESIHP_DETECTOR_INTERNAL_H */
