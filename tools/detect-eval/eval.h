/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-detect-eval internals: traces as a stream of iterations (generated
 * or read from a file), their ground-truth labels, and the two naive
 * baseline detectors. Only the evaluation tool uses this. */
#ifndef RESIHP_DETECT_EVAL_H
#define RESIHP_DETECT_EVAL_H

#include <resihp.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One microbatch of one rank, as in a trace line. */
typedef struct {
  uint32_t iter;
  int rank;
  int stage;
  resihp_workload_t w;
  double t; /* microseconds */
} ev_sample_t;

enum ev_kind { EV_COMPUTE, EV_COMM, EV_STOP, EV_HANG };

/* A labelled fault on one rank, active for iterations [start, end). For
 * EV_STOP, end is the iteration the replacement rank rejoins (UINT32_MAX:
 * never). EV_HANG is the whole job's (rank -1): no rank has samples in
 * [start, end). factor is the injected slowdown of the component (compute or
 * communication); eff_* accumulate the slowdown it caused on the measured
 * microbatch time (generated traces only). */
typedef struct {
  int rank;
  uint32_t start, end;
  double factor;
  enum ev_kind kind;
  double eff_sum;
  unsigned eff_n;
  double ramp_from; /* > 0: the factor ramps from this at start to factor
                       at end - 1, or at hold (label ramp=) */
  uint32_t hold;    /* > start: the ramp reaches factor here and holds it
                       until end (label hold=); 0: a ramp to the end */
  double eff;       /* > 0: effective slowdown of the microbatch at factor
                       (label eff=) */
  int whole;        /* generated: the whole microbatch time is scaled (a
                       throttled device), eff = factor */
} ev_episode_t;

/* Factor of episode e at iteration it, and the slowdown it causes on the
 * measured microbatch time then (the effective one, for comm). */
double ev_episode_factor(const ev_episode_t *e, uint32_t it);
double ev_episode_effective(const ev_episode_t *e, uint32_t it);

/* Microbatches per iteration (label mb): for every rank from iter on
 * (rank < 0), or for one rank at iter only. */
typedef struct {
  uint32_t iter;
  int rank;
  int count;
} ev_mb_t;

/* A source of iterations. next() returns 1 with the samples of the next
 * iteration that has any (valid until the following call), 0 at the end, <0
 * on error (message in err). */
typedef struct ev_source ev_source_t;
struct ev_source {
  int (*next)(ev_source_t *s, uint32_t *iter, const ev_sample_t **samples,
              size_t *n);
  void (*destroy)(ev_source_t *s);
  char name[64];
  int n_ranks;
  int mb;           /* microbatches per rank per iteration (heartbeats) */
  uint32_t n_iters; /* iterations covered (last + 1) */
  int labelled;     /* episodes below are the complete ground truth */
  ev_episode_t *ep;
  size_t nep, ep_cap;
  ev_mb_t *mbl; /* sorted by iteration; global entries first */
  size_t nmb, mb_cap;
  char err[512];
};

int ev_add_episode(ev_source_t *s, const ev_episode_t *e);
/* Make room for element n of *arr (*cap elements of size bytes): doubles
 * the array when full. 0, or -1 out of memory (*arr unchanged). */
int ev_grow(void **arr, size_t *cap, size_t n, size_t size);
void ev_source_destroy(ev_source_t *s);

/* Synthetic traces (tracegen.c). */
typedef struct {
  int replicas, stages, mb;
  uint32_t iters;
  int packed;  /* 1: documents packed into full context windows */
  int faults;  /* 1: inject fail-slow episodes and fail-stops; 2: the
                  ramps schedule instead (ramp-then-hold and step
                  slowdowns at set factors, then a job-wide hang) */
  int context; /* context window (tokens) */
  uint64_t seed;
} ev_gen_params_t;

ev_source_t *ev_gen_create(const ev_gen_params_t *p, const char *name);

/* Trace files (traceio.c). */
ev_source_t *ev_file_open(const char *path, char *err, size_t errlen);
/* The same from an open stream (name: for messages); fp is not closed. */
ev_source_t *ev_trace_read(FILE *fp, const char *name, char *err,
                           size_t errlen);
/* Drain src into path in the documented text format. */
int ev_write_trace(ev_source_t *src, const char *path, const char *comment,
                   char *err, size_t errlen);

/* Naive baselines (baseline.c): both judge a rank's iteration time, the
 * sum of its microbatch times in that iteration. */
enum ev_baseline_kind { EV_KMEDIAN, EV_FIXED };
typedef struct ev_baseline ev_baseline_t;
ev_baseline_t *ev_baseline_create(enum ev_baseline_kind kind, int n_ranks,
                                  double k);
/* Returns 1 when rank newly raises an alarm at this iteration. */
int ev_baseline_update(ev_baseline_t *b, int rank, double iter_time);
void ev_baseline_reset_rank(ev_baseline_t *b, int rank);
void ev_baseline_destroy(ev_baseline_t *b);

/* Deterministic random numbers (splitmix64). */
typedef struct {
  uint64_t s;
} ev_rng_t;
uint64_t ev_rng_next(ev_rng_t *r);
double ev_uniform(ev_rng_t *r); /* (0, 1) */
double ev_normal(ev_rng_t *r);  /* N(0, 1) */

#endif /* RESIHP_DETECT_EVAL_H */
