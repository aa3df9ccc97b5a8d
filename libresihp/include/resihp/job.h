/* SPDX-License-Identifier: BSD-3-Clause */
/* Step-level recovery: the in-rank side of a resilient data-parallel job.
 *
 * A job is R data-parallel replicas, each its own Slurm job step started by
 * resihp-run(1), which also runs the job's coordinator. A training loop uses
 * this API as follows (error handling elided):
 *
 *   resihp_job_opts_t o; resihp_job_opts_init(&o);
 *   o.microbatches = M; o.steps = S;
 *   resihp_job_join(&o, &job);                    // reads RESIHP_* env
 *   resihp_job_set_state(job, params, bytes);     // what catch-up copies
 *   resihp_job_step_t st;
 *   while (resihp_job_begin_step(job, &st) == 0 && !st.done) {
 *     zero(acc);
 *     for (i = 0; i < st.nmbs; i++) compute_into(acc, st.mbs[i]);
 *     while ((rc = resihp_job_allreduce(job, acc, n)) == RESIHP_EREASSIGNED)
 *       for (i = 0; i < st.nextra; i++) compute_into(acc, st.extra[i]);
 *     apply(params, acc);
 *     resihp_job_end_step(job);
 *   }
 *   resihp_job_finish(job, checksum_text); resihp_job_destroy(job);
 *
 * Constant microbatch count. Every step processes the same M microbatches,
 * numbered 0..M-1. The coordinator spreads them over the live replicas
 * (begin_step: st.mbs) and keeps a ledger of (step, microbatch) -> replica.
 * When a replica fails during a step, the survivors' all-reduce fails with
 * its buffer untouched, the survivors agree on who is gone
 * (resihp_comm_shrink), and the coordinator hands the gone replica's
 * microbatches of this step to the survivors: resihp_job_allreduce()
 * returns RESIHP_EREASSIGNED and st.extra lists what this replica must add
 * to its accumulator before calling it again. No microbatch is dropped or
 * counted twice, so with fixed-point accumulation (resihp_fixed_*) the
 * result is bitwise that of a failure-free run.
 *
 * Rejoin and catch-up. A replacement replica started by resihp-run joins
 * at the next step boundary: every member re-creates the communicator for
 * the new membership epoch, one healthy member sends the replacement its
 * state (the buffer given to resihp_job_set_state, as of the last committed
 * step) over an authenticated connection from a thread of its own while it
 * goes on computing, and the replacement contributes no microbatch in that
 * step (st.catching_up) but applies the step's all-reduced gradient like
 * everyone else. From the following step it gets its quota back.
 *
 * Several ranks per replica. When a replica's step has several tasks
 * (resihp-run --nodes-per-replica K), rank 0 of the step speaks for the
 * replica (coordinator, all-reduce across replicas); the other ranks find
 * it through PMIx (srun --mpi=pmix) or the coordinator and connect to it.
 * Every rank calls the same API: st.mbs and st.extra are that rank's share
 * of the replica's microbatches, resihp_job_allreduce sums the ranks'
 * accumulators exactly before the all-reduce across replicas and hands the
 * result to every rank. Any rank failing fails its whole replica. The state
 * is assumed replicated within a replica: a replacement's ranks all get the
 * serving replica's rank-0 state.
 *
 * Fault injection (RESIHP_INJECT, see resihp-run(1)) is executed here:
 * begin_step fires the injection planned for this replica at this step
 * (kill-rank and hang-rank in the replica's last rank, kill-node in its
 * rank 0).
 *
 * Node health. begin_step also reads what the plugin's periodic probe
 * appended to RESIHP_PROBE_RESULTS since the last step (one stat(2) when
 * nothing changed); a failed periodic probe on this rank's node is reported
 * to the coordinator, which fails the replica so that resihp-run relaunches
 * it on a healthy spare, and begin_step returns RESIHP_EPROBE: exit.
 *
 * Threads. A job is used by one thread. It owns a heartbeat thread and, on
 * a member that serves a catch-up, a sender thread; both are joined by
 * resihp_job_end_step/resihp_job_destroy.
 *
 * Ownership. The job copies its options. The state buffer stays the
 * caller's and must stay valid until resihp_job_destroy. st.mbs and
 * st.extra point into the job and are valid until the next call on it.
 * resihp_job_destroy accepts NULL.
 */
#ifndef RESIHP_JOB_H
#define RESIHP_JOB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resihp_job resihp_job_t;

typedef struct {
  /* global microbatches per step (constant), 1..165518: every list of
   * microbatch ids must fit in one control message (join refuses more
   * with RESIHP_ERANGE rather than cut a list short) */
  int microbatches;
  long steps; /* steps of the whole training run, >= 1 */
  /* NULL/-1: take them from RESIHP_COORDINATOR, RESIHP_REPLICA,
   * RESIHP_SECRET_FILE, RESIHP_INJECT (as the SPANK plugin and resihp-run
   * set them). */
  const char *coordinator;
  int replica;
  const char *secret_file;
  const char *inject;
  int timeout_ms; /* bound on every wait for the coordinator; 0 = 60000 */
} resihp_job_opts_t;

typedef struct {
  long step;       /* step number, 0-based */
  int done;        /* 1: training is over, leave the loop */
  int catching_up; /* 1: this replica just got its state; nmbs is 0 */
  int nmbs;        /* microbatches this replica computes in this step */
  const int *mbs;
  int nextra; /* microbatches added by the last RESIHP_EREASSIGNED */
  const int *extra;
  uint32_t epoch; /* membership epoch of the step */
  int nreplicas;  /* replicas in this step's all-reduce group */
} resihp_job_step_t;

void resihp_job_opts_init(resihp_job_opts_t *o);

/* Connect to the coordinator, authenticate, register this replica and
 * open the listening sockets of the all-reduce and of catch-up. */
int resihp_job_join(const resihp_job_opts_t *o, resihp_job_t **out);

/* Register the state a replacement copies from a healthy member (e.g.
 * parameters and optimizer state as one contiguous buffer). Call before
 * the first begin_step. A replacement receives into this buffer. */
int resihp_job_set_state(resihp_job_t *job, void *state, size_t bytes);

/* Wait for the step boundary (every member ready), re-create the
 * communicator if the membership changed, receive the state when this is
 * a replacement, and fire a planned fault injection. Fills *st.
 * RESIHP_EPROBE: this node failed a periodic health probe (see above). */
int resihp_job_begin_step(resihp_job_t *job, resihp_job_step_t *st);

/* Fault-tolerant sum of the int64 fixed-point accumulator over the group.
 * Returns 0 (acc holds the sum over all M microbatches of the step),
 * RESIHP_EREASSIGNED (acc untouched; add the microbatches in st->extra of
 * the step struct last filled and call again), RESIHP_EEXCLUDED (the
 * others excluded this replica: leave) or another negative code. */
int resihp_job_allreduce(resihp_job_t *job, int64_t *acc, size_t n);

/* Commit the step (the ledger records who computed what). */
int resihp_job_end_step(resihp_job_t *job);

/* Record how long microbatch mb took and its workload (tokens, sum of
 * squared sequence lengths, number of sequences: what the fail-slow
 * detector's predictor needs, see the detector's T ~ a*N + b*sum(l^2) +
 * e*nseq + c). Kept in a ring of the last 4096 samples. */
void resihp_job_report_microbatch(resihp_job_t *job, int mb, double tokens,
                                  double sum_l2, double nseq, double seconds);
/* Copy up to max of the recorded samples, oldest first; returns how many. */
typedef struct {
  long step;
  int mb;
  double tokens, sum_l2, nseq;
  double seconds;
} resihp_job_mb_sample_t;
int resihp_job_microbatch_samples(const resihp_job_t *job,
                                  resihp_job_mb_sample_t *out, int max);

int resihp_job_replica(const resihp_job_t *job);

/* Tell the coordinator the run is over, with a short result text (e.g. the
 * checksum of the final parameters, at most 200 printable characters,
 * no spaces) that resihp-run compares across replicas. */
int resihp_job_finish(resihp_job_t *job, const char *result);

void resihp_job_destroy(resihp_job_t *job);

#ifdef __cplusplus
}
#endif
#endif /* RESIHP_JOB_H */
