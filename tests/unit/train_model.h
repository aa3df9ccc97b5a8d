/* SPDX-License-Identifier: BSD-3-Clause */
/* The toy training of the job tests (test_freerun, test_job_failover):
 * each shard is NB uint64, each step's microbatches add exactly known
 * contributions that the replicas all-reduce, and a step applies their sum
 * by a recurrence (order matters), so a run's result is that of a
 * failure-free run bit for bit or it is not. Also the ledger's check. */
#ifndef RESIHP_TESTS_TRAIN_MODEL_H
#define RESIHP_TESTS_TRAIN_MODEL_H

#include <resihp.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define NB 4  /* the model: NB uint64 per shard */
#define MBS 6 /* microbatches per step */

/* A test rank's options: the model's shape, `steps` steps, coordinator
 * and secret file, a 20 s timeout, no injection, state m (NB uint64, as
 * the one buffer sb). */
void tm_job_opts(resihp_job_opts_t *o, long steps, const char *coord,
                 int replica, const char *secret, uint64_t *m,
                 resihp_job_buf_t *sb);
/* Fork the K ranks of replica r as the tasks of one Slurm step (they find
 * their rank 0 through the coordinator) into pids; each exits with
 * fn(ud, r). */
void tm_spawn(int K, int r, pid_t *pids, int (*fn)(void *ud, int r), void *ud);
/* What microbatch mb adds to element i of shard sh in step s. */
int64_t tm_contribution(long s, int mb, int i, int sh);
/* The shard m after its result text ("first.last", hex). */
void tm_result_text(const uint64_t *m, char *out, size_t n);
/* The replica's result after `steps` failure-free steps, as the
 * coordinator shows it ("s0" or "s0/s1"). */
void tm_reference(int K, long steps, char *out, size_t n);
/* Compute step st for shard sh (compute_us of "work"), all-reduce it
 * (taking reassigned microbatches) and apply it to m: 0, or the error. */
int tm_step(resihp_job_t *job, const resihp_job_step_t *st, int sh, uint64_t *m,
            int compute_us);
/* The toy data loader (resihp_job_workload_fn): microbatch mb of step s
 * is one sequence of a power of two of tokens, 200..6400, the largest at
 * mb = s % MBS. Its time (tm_step_wl) is 1 us per token, so the
 * predictor's costs go by tokens, and any two loads the assignment by
 * cost compares differ by 6 % at least: its result does not depend on the
 * last bits of the fitted model. */
int tm_workload(long s, int mb, double *tokens, double *sum_l2, double *nseq,
                void *ud);
/* tm_step, reporting each microbatch with tm_workload's figures and time
 * when by_workload (else a fixed sample). */
int tm_step_wl(resihp_job_t *job, const resihp_job_step_t *st, int sh,
               uint64_t *m, int compute_us, int by_workload);
/* tm_step_wl for the nsh shards sh.. that one rank holds (a replica of
 * fewer ranks than the model's shards: m their nsh * NB uint64 in order,
 * nsh at most TM_MAX_SHARDS), all-reduced as one buffer. */
#define TM_MAX_SHARDS 4
int tm_step_shards(resihp_job_t *job, const resihp_job_step_t *st, int sh,
                   int nsh, uint64_t *m, int compute_us, int by_workload);
/* The owners (replica index 0..R-1) that assignment by cost over R equal
 * replicas gives step s's microbatches with tm_workload's costs. */
void tm_expect_cost_owners(long s, int R, int *owner);
/* The ledger f holds steps 0..steps-1 once each, in order, MBS owners
 * each, all below R: 1. Counts the steps each replica computed in (owned)
 * and the first in which one computed nothing after having done so
 * (lost_at, -1: none). */
int tm_check_ledger(FILE *f, int R, long steps, long *owned, long *lost_at);
/* The coordinator's summary shows the failure-free result of n steps and
 * that `replicas` replicas agree on it (Check assertions). */
void tm_expect_result(const char *summary, int K, long n, int replicas);

#endif
