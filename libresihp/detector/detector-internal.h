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
/* The model resihp_model_predict evaluates like resihp__pred_predict. */
void resihp__pred_model(const struct resihp__pred *p, resihp_model_t *m);

/* 0 if w and time describe a possible microbatch; otherwise logs what is
 * wrong (naming who called) and returns RESIHP_EINVAL. */
/* 0, or logs why (naming the API call `who`) and returns EINVAL/ERANGE. */
int resihp__detector_check_rank(const resihp_detector_t *d, int rank,
                                const char *who);
int resihp__check_sample(const char *who, const resihp_workload_t *w,
                         double time);

/* Level-shift the model by factor s (> 0): every prediction is multiplied
 * by s and later samples refine it as before. */
void resihp__pred_scale(struct resihp__pred *p, double s);

/* ---- Detector state shared by detector.c, failslow.c and health.c ---- */

/* Fail-slow sub-state of a rank (see failslow.c). */
enum resihp__fs { RESIHP__FS_OK, RESIHP__FS_SUSPECT, RESIHP__FS_SLOW };

/* Per-iteration values of a rank kept for validation (its last RING judged
 * iterations). */
#define RESIHP__RING 8
/* Samples of one iteration whose median stands for the rank in it; more
 * samples are fitted but not kept (the first ones are a random subset). */
#define RESIHP__ITER_BUF 16
/* Iterations over which a job-wide stall still excuses a rank's excess. */
#define RESIHP__STALL_WINDOW 8

struct resihp__rank {
  struct resihp__pred pred;
  int slot;      /* index of its stage in the detector's stage table */
  int next_peer; /* next rank of the same stage, -1 at the end */
  int stage;     /* the caller's stage id */
  /* Per sample: z = log(measured / own prediction). */
  double mad;    /* exponentially weighted mean |z - bias|, for Huber weights */
  double bias;   /* exponentially weighted mean z of fitted samples */
  unsigned it_n; /* samples in the open iteration */
  double it_z[RESIHP__ITER_BUF];
  double it_last; /* median z of its last judged iteration */
  /* Per judged iteration (see failslow.c for A, X and y). */
  double A, X, y;
  int judged; /* has an A in the iteration being closed */
  enum resihp__fs fs;
  double isig;          /* noise of y: weighted mean |y - previous y| / sqrt 2
                           while healthy (a slow drift does not inflate it) */
  double y_prev;        /* y of its previous judged iteration */
  int y_prev_ok;        /* ... exists */
  double offset;        /* its usual y (silicon, thermal), 0..threshold */
  double offset_lo;     /* the lowest offset since its model settled: offset
                           rises at most DRIFT of s_min above it (anchored) */
  unsigned offset_n;    /* iterations in offset, up to OFFSET_WARM */
  uint64_t settle_from; /* pred.n when its model last began to settle (a
                           reset, the end of a SLOW period) */
  double cusum;         /* upper CUSUM of y over iterations */
  double down;          /* while SLOW: CUSUM towards recovery */
  unsigned run;      /* consecutive judged iterations with y above allowance */
  int64_t run_us;    /* when the run began (CLOCK_MONOTONIC us; confirm_ms) */
  double factor_log; /* while SLOW: smoothed log slowdown */
  int vs_peers;      /* the slowdown is relative to healthy peers */
  double reported;   /* factor in the last event */
  unsigned ring_n, ring_head;
  double ring_y[RESIHP__RING];
  uint64_t samples;
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
  /* Reference workload: the mean of the stage's first WREF samples, then
   * fixed, so that the members' models are compared on the same work. */
  resihp_workload_t wref;
  unsigned wref_n;
  /* Baseline: log time of the stage's faster half on wref, learnt slowly
   * while the stage is healthy (base_n iterations so far). */
  double base;
  double base_lo; /* the lowest base since it was set: base rises at most
                     DRIFT of s_min above it */
  unsigned base_n;
  /* Scratch of the iteration being closed. */
  double ref;   /* faster-half mean of the members' A */
  double hx;    /* faster-half mean of the members' X, less the job's */
  int n_ref;    /* members in ref */
  int ref_slow; /* ref includes SLOW members (all judged ones are) */
};

struct resihp_detector {
  resihp_detector_config_t cfg;
  double h;            /* log(1 + slow margin): CUSUM threshold */
  double k_min;        /* smallest CUSUM allowance per iteration */
  double s_min;        /* log(1 + min_slow) */
  unsigned confirm_ms; /* wall time an excess must last too (0: none) */
  struct resihp__rank *ranks;
  struct resihp__stage *stages;       /* cfg.n_ranks slots */
  double *scratch;                    /* cfg.n_ranks values, for medians */
  int open;                           /* an iteration has samples */
  uint64_t cur_iter;                  /* that iteration */
  double jhist[RESIHP__STALL_WINDOW]; /* the job's excess, last iterations */
  unsigned jhist_n, jhist_head;
};

/* Recompute a rank's published health from its fail-slow and fail-stop
 * state; log and call the event callback if it changed. */
void resihp__publish(resihp_detector_t *d, int rank, uint64_t iter);

/* Fail-slow path of resihp_detector_record (arguments checked). */
void resihp__failslow_record(resihp_detector_t *d, int rank, uint64_t iter,
                             const resihp_workload_t *w, double time);

/* Judge the open iteration (all its samples are in). */
void resihp__failslow_close(resihp_detector_t *d);

/* Forget the fail-slow state of a rank (new warm-up). */
void resihp__failslow_reset(resihp_detector_t *d, int rank);

/* A stage slot starts anew (no reference workload, no baseline). */
void resihp__stage_init(struct resihp__stage *s, int id);

#endif /* RESIHP_DETECTOR_INTERNAL_H */
