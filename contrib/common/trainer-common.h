/* SPDX-License-Identifier: BSD-3-Clause */
/* What the example trainers (contrib/trainer, contrib/pipeline-trainer)
 * share: the synthetic data, the checksum, the clock, and the file
 * rendezvous of their baselines that run without resihp-run, and the
 * layers both models are made of.
 *
 * Data. Microbatch mb of step s is drawn from (seed, s, mb) alone, so any
 * replica (and any pipeline stage) can regenerate it: by default B
 * sequences, each of a class and drawing half of its 4..63 tokens from
 * that class's block of the vocabulary; trainer-data.h has the other
 * kinds of data (long-tailed lengths, packing) and the simulated
 * compute. */
#ifndef TRAINER_COMMON_H
#define TRAINER_COMMON_H

#include <resihp.h>

#include <stddef.h>
#include <stdint.h>

/* Longest sequence trainer_sequence draws. */
#define TRAINER_MAX_LEN 63

uint64_t trainer_splitmix(uint64_t *x);

/* The generator state of microbatch mb of step s. */
uint64_t trainer_mb_rng(uint64_t seed, long s, int mb);

/* Draw the next sequence from *r over a vocabulary of V tokens and C
 * classes: its class in *cls, its tokens in tok[0..len-1]; returns len
 * (4..TRAINER_MAX_LEN). */
int trainer_sequence(uint64_t *r, int V, int C, int *cls, int *tok);
/* The len tokens of a sequence of class cls from *r: half from the
 * class's block of the vocabulary, half from all of it. */
void trainer_tokens(uint64_t *r, int V, int C, int cls, int len, int *tok);

/* FNV-1a 64 of n bytes, continuing from h (TRAINER_FNV_INIT to start). */
#define TRAINER_FNV_INIT 0xcbf29ce484222325ULL
uint64_t trainer_fnv1a_more(uint64_t h, const void *p, size_t n);
uint64_t trainer_fnv1a(const void *p, size_t n);

/* Layers, for one sequence (trainer-layers.c). W is out x in, row-major.
 * x = the mean of the rows tok[0..len) of E (D wide), and its backward:
 * gE's rows tok += dx / len. */
void trainer_embed_mean(const float *E, int D, const int *tok, int len,
                        float *x);
void trainer_embed_mean_bwd(float *gE, int D, const int *tok, int len,
                            const float *dx);
/* y = W x + b, through tanh when act_tanh. */
void trainer_dense(const float *W, const float *b, int in, int out,
                   const float *x, float *y, int act_tanh);
/* da = dh * (1 - h^2): from tanh's output back to its input. */
void trainer_tanh_bwd(const float *h, const float *dh, int n, float *da);
/* Backward of y = W x + b: gW += dy x^T, gb += dy, dx = W^T dy. */
void trainer_dense_bwd(const float *W, int in, int out, const float *x,
                       const float *dy, float *gW, float *gb, float *dx);
/* Softmax of the logits z[0..n) and its cross-entropy with class cls:
 * z becomes dloss/dz (p - onehot); returns the loss. */
double trainer_softmax_xent(float *z, int n, int cls);

/* A list of counts "2,3,1" (--partition): decimal digits only, each
 * 1..hi, at most max of them, written to out. Returns how many, or -1 for
 * anything else (signs, spaces, empty items, too many, too large). */
int trainer_parse_counts(const char *s, int *out, int max, int hi);
/* "R=c1:c2:..." (--partition-of): a replica R (decimal digits, at most
 * 2^31-1) and its counts as trainer_parse_counts, ':' between them; the
 * count, or -1. */
int trainer_parse_replica_counts(const char *s, int *r, int *out, int max,
                                 int hi);

double trainer_now_s(void);
void trainer_sleep_ms(int ms);
/* An integer from the environment, def when unset or empty. */
int trainer_envint(const char *name, int def);

/* The rendezvous of the baselines (one plain srun step, no resihp-run):
 * listen on an ephemeral port, publish host:port in DIR/NAME.RANK, wait
 * (at most 30 s) for the n ranks' files and build a communicator of them
 * (unprotected: resihp_comm_opts_t.unprotected). Messages are prefixed
 * with prog. Returns 0, 2 for a local set-up error (listen, files) or 1
 * when the communicator cannot be built. */
int trainer_rendezvous(const char *prog, const char *dir, const char *name,
                       int rank, int n, int unprotected, resihp_comm_t **out);

#endif /* TRAINER_COMMON_H */
