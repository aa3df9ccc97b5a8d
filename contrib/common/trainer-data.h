/* SPDX-License-Identifier: BSD-3-Clause */
/* The example trainers' data and the compute they pretend to do
 * (trainer-data.c).
 *
 * Data. Microbatch mb of step s is drawn from (seed, s, mb) alone, so any
 * replica (and any pipeline stage) can regenerate it. Three kinds
 * (--data):
 *   fixed     B sequences of 4..63 tokens, uniform: the trainers' original
 *             data, bit for bit (the default);
 *   longtail  B sequences of long-tailed lengths 8..1023: the length's
 *             octave k (8 << k up to twice that) is k with probability
 *             2^-(k+1) (the last octave takes the rest), uniform within
 *             it: half the sequences are under 16 tokens, 3 % over 256, a
 *             density like L^-2 as in real corpora;
 *   packed    sequences of those lengths packed into a microbatch of at
 *             most `budget` tokens (--tokens, default B x 64): drawn until
 *             the next one would not fit, the first one cut to the budget,
 *             so the count of sequences varies from microbatch to
 *             microbatch.
 * Each sequence belongs to a class and draws half of its tokens from that
 * class's block of the vocabulary. longtail and packed draw the lengths
 * and classes from one stream and the tokens from another, so that the
 * shape of a microbatch (trainer_data_shape) costs no token draws.
 *
 * Compute. A real transformer's microbatch takes
 *   T = a * tokens + b * sum of squared lengths + c * sequences + d
 * (the MLPs, attention, per-sequence overheads, launch latency).
 * trainer_compute_sleep sleeps that long with a = 1, b = 1/256 (attention
 * costs what the MLPs cost at 256 tokens), c = 4, d = 64 work units,
 * scaled so that a mean microbatch of the data kind costs --mb-ms. It
 * sleeps in slices of at most 0.25 ms and counts each slice as done work for
 * at most 1.5 times its length: a process stopped from outside (SIGSTOP)
 * does no work meanwhile, so a duty cycle of stops and continues slows it
 * down as it would a real computation, while using almost no CPU; but a
 * CPU quota does not slow sleeping: trainer_compute_arith does the work as
 * arithmetic instead, which anything that takes CPU time away slows. */
#ifndef TRAINER_DATA_H
#define TRAINER_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
  TRAINER_DATA_FIXED = 0,
  TRAINER_DATA_LONGTAIL = 1,
  TRAINER_DATA_PACKED = 2,
} trainer_data_kind_t;

/* Longest sequence of longtail and packed. */
#define TRAINER_LONG_MAX 1023
/* Shortest sequence of longtail and packed (the first one of a packed
 * microbatch is at most the budget, which is at least this). */
#define TRAINER_LONG_MIN 8

typedef struct {
  trainer_data_kind_t kind;
  int B;      /* sequences per microbatch: fixed, longtail */
  int budget; /* tokens per microbatch: packed (>= TRAINER_LONG_MIN) */
  int V, C;   /* vocabulary, classes (C <= V) */
  uint64_t seed;
} trainer_data_t;

/* One microbatch: nseq sequences, sequence i of class cls[i] with len[i]
 * tokens at tok + off[i]. Arrays sized by trainer_mb_init for the most a
 * microbatch of the data holds. */
typedef struct {
  int nseq;
  long tokens;
  double sum_l2;
  int *cls, *len, *off, *tok;
} trainer_mb_t;

/* "fixed", "longtail", "packed" -> kind, or -1. */
int trainer_data_kind(const char *name);
const char *trainer_data_name(trainer_data_kind_t k);

/* The most sequences and tokens a microbatch of d holds. */
int trainer_data_max_seqs(const trainer_data_t *d);
long trainer_data_max_tokens(const trainer_data_t *d);

/* 0, or -1 when out of memory; trainer_mb_free(NULL-filled) is fine. */
int trainer_mb_init(trainer_mb_t *m, const trainer_data_t *d);
void trainer_mb_free(trainer_mb_t *m);

/* Microbatch mb of step s into m (nseq, tokens, sum_l2, every array). */
void trainer_data_draw(const trainer_data_t *d, long s, int mb,
                       trainer_mb_t *m);
/* Its shape only (nseq, tokens, sum_l2; no token drawn, len[] filled). */
void trainer_data_shape(const trainer_data_t *d, long s, int mb,
                        trainer_mb_t *m);
/* What the data loader tells resihp before a step (a resihp_job_workload_fn:
 * resihp_job_set_workload_fn(job, trainer_workload, &wl)): the shape of
 * microbatch mb of step s, without drawing its tokens. wl.scratch is
 * trainer_mb_init'ed for wl.d and used by nothing else. */
typedef struct {
  const trainer_data_t *d;
  trainer_mb_t scratch;
} trainer_workload_t;
int trainer_workload(long s, int mb, double *tokens, double *sum_l2,
                     double *nseq, void *wl);

/* The sequences of microbatches 0..M-1 of step s: what a step's mean
 * gradient divides by (M x B but for packed data). */
double trainer_data_step_seqs(const trainer_data_t *d, long s, int M,
                              trainer_mb_t *scratch);

/* The simulated compute: ms_per_work milliseconds per work unit. */
typedef struct {
  double ms_per_work;
  double ops_per_work; /* trainer_compute_arith's; 0: none */
} trainer_cost_t;

/* Work units of a microbatch (the formula above). */
double trainer_work(double tokens, double sum_l2, double nseq);
/* The mean tokens of a sequence and sequences of a microbatch of d (over
 * a fixed sample of 256 microbatches, whatever d's seed; exact for fixed
 * data): 0, or -1 when out of memory. */
int trainer_data_mean(const trainer_data_t *d, double *tok_per_seq,
                      double *seqs);
/* Scale so that the mean microbatch of d (over the same sample) takes
 * mean_ms; 0 for no simulated compute. 0, or -1 when out of memory. */
int trainer_cost_init(trainer_cost_t *c, const trainer_data_t *d,
                      double mean_ms);
/* Sleep for the microbatch's work, in slices (see above); returns the
 * milliseconds it was meant to take. */
double trainer_compute_sleep(const trainer_cost_t *c, const trainer_mb_t *m);
/* Real compute instead: so that the mean microbatch of d does mean_kops
 * thousand dependent multiply-adds (trainer_compute_arith), whatever the
 * time they take. Sleeping is not slowed by a CPU quota (a cgroup's
 * cpu.max, a noisy neighbour taking the core); arithmetic is, as a real
 * model's compute would be. 0, or -1 when out of memory. */
int trainer_cost_init_arith(trainer_cost_t *c, const trainer_data_t *d,
                            double mean_kops);
/* Do the microbatch's work as arithmetic (a fixed count of operations for
 * its workload); returns the thousands of operations done. */
double trainer_compute_arith(const trainer_cost_t *c, const trainer_mb_t *m);

/* The times of a run's microbatches, for a summary line (the first
 * million of them). Zero-initialised is empty. */
typedef struct {
  double *v;
  size_t n, cap;
} trainer_mbstats_t;

void trainer_mbstats_add(trainer_mbstats_t *t, double seconds);
/* "PREFIXmicrobatch times (N): mean, p10, p50, p90, p99, max in ms". */
void trainer_mbstats_print(const trainer_mbstats_t *t, FILE *f,
                           const char *prefix);
void trainer_mbstats_free(trainer_mbstats_t *t);

#endif /* TRAINER_DATA_H */
