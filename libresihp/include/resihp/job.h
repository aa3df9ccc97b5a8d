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
 * A program error that no spare can fix (see resihp_job_abort) ends the
 * whole run instead: resihp_job_abort(job, why); resihp_job_destroy(job);
 * exit(1).
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
 * Sharded replicas (hybrid parallelism). A replica's step may have K
 * ranks (resihp-run --ranks-per-replica K): rank k of every replica owns
 * shard k of the model (a pipeline stage, a tensor-parallel slice, an FSDP
 * shard). Every rank of a replica gets the replica's whole microbatch list
 * (st.mbs, st.extra): the shards of a replica process each microbatch
 * together. For each k, the ranks k of the member replicas form a
 * fault-tolerant data-parallel group of their own: resihp_job_allreduce on
 * rank k exchanges shard k's gradient there, the K groups concurrently.
 * The ranks of one replica form a communicator of their own
 * (resihp_job_replica_comm: p2p for activations, all-reduce and broadcast
 * for tensor-parallel pieces; rank k there is shard k).
 *   A step commits in all K groups or in none: after its group's
 * all-reduce each rank learns through the replica communicator whether all
 * K groups succeeded. If one failed, the replica's rank 0 (which alone
 * talks to the coordinator) reports the replicas left in every group; the
 * coordinator's one decision removes a failed replica from all K groups in
 * the same step and epoch and hands its microbatches to the survivors, whose
 * K ranks all get RESIHP_EREASSIGNED with the same st.extra. Any rank of a
 * replica failing fails the whole replica; resihp-run relaunches it, and
 * rank k of the replacement receives shard k's state from rank k of a
 * healthy replica (the K transfers in parallel, spread over the healthy
 * replicas).
 *   With K = 1 (the default) a replica is one rank and all of this reduces
 * to the data-parallel job described above.
 *
 * Layers. A program may say what its model is made of: L layers 0..L-1,
 * each with a number of gradient elements, and how this replica's K ranks
 * hold them: rank k the layers [b_k, b_k+1), b_0 = 0 < ... < b_K = L
 * (resihp_job_set_layers, every rank of the replica with the same
 * arguments, before the first step). The data-parallel groups are then
 * keyed by layers, not by rank index: the union of the cut points of the
 * replicas' partitions splits 0..L into runs, and for each run the ranks
 * that hold it (one per replica) form its fault-tolerant group, whose id
 * is the run's first layer; a rank's gradient is the concatenation of its
 * layers' elements, and each run's slice goes through its group. With
 * identical partitions the runs are the K ranges: exactly the K shard
 * groups above, at no extra cost. resihp_job_layers says which layers
 * this rank holds. Replicas may hold different partitions: each leader
 * tells the coordinator its own with every BEGIN, every new epoch's GO
 * lists the members' distinct ones, and a rank holding several runs joins
 * one group per run (several groups over its one listening socket); a
 * failure in any of them is recovered in all of them, as one step.
 *   Catch-up by layer. With an opaque state list (below) a replacement
 * catches up from members that hold its partition: rank k's bytes mean
 * nothing to a rank holding other layers. When the program says which
 * state belongs to which layer (resihp_job_set_layer_state: each layer's
 * parameters and optimizer moments, and the rank's own non-layer state
 * such as RNG streams), a replacement whose partition no member holds
 * catches up layer by layer: rank k receives each run of its layers from
 * the member rank that holds it (of one healthy member, spread over the
 * members as the shards are), and its non-layer state from rank k of that
 * member, the transfers in parallel from their sources. A member holding
 * its partition is still preferred (one transfer per rank, as before).
 *
 * Repartition. A program that can move layers between its ranks says so
 * (resihp_job_set_layers_movable). When the fail-slow detector finds one
 * rank of such a replica slow and moving layers off it pays over the
 * steps left (planner: resihp_planner_partition with the ranks' measured
 * speeds, each layer's cost taken as equal), the coordinator gives the
 * replica a new partition at a step boundary: a new epoch (same members)
 * whose groups are built from it, and begin_step returns st.layers_moved
 * = 1 on the replica's ranks, resihp_job_layers saying the new layers.
 * Before computing, the ranks send the parameters and optimizer state of
 * the layers that change hands over the replica communicator and call
 * resihp_job_commit_layers with their new state list. It is all or
 * nothing: a rank failing during the move fails the replica as any
 * failure does (its microbatches go to the others; it is relaunched with
 * the partition its program declares), never a half-moved model. When
 * the rank is healthy again the partition moves back the same way (only
 * when that pays as well, and not within a few steps of the last move).
 * The detector's samples of a moved rank are scaled by its old share of
 * the layers over its new one, so it is compared with the same stage of
 * the other replicas for the same work.
 *
 * State. The state a replacement copies is a list of buffers (parameters,
 * optimizer moments, RNG state...): resihp_job_opts_t.state at join (its
 * sizes are compared with the same shard of the replicas holding the
 * same partition of the layers, of every replica when none declared
 * layers: a mismatch is refused at the first step) or
 * resihp_job_set_state_list() before the first step, or, with layers,
 * resihp_job_set_layer_state() (the state by layer, see above).
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

#include <resihp/allreduce.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resihp_job resihp_job_t;

/* One buffer of a rank's state. */
typedef struct {
  void *data;
  size_t bytes;
} resihp_job_buf_t;

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
  /* The ranks per replica (shards) this program is written for; 0: any.
   * Join fails (RESIHP_EINVAL) when the step has another number. */
  int ranks_per_replica;
  /* This rank's state (its shard), nstate buffers; may be NULL/0 and
   * given later with resihp_job_set_state_list. Given here, its sizes are
   * checked at join against the same shard of every other replica. */
  const resihp_job_buf_t *state;
  int nstate;
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
  /* with catching_up: this rank's shard received, bytes and seconds from
   * the start of the wait for it to the checked end */
  size_t catchup_bytes;
  double catchup_seconds;
  /* 1: the coordinator moved layers between this replica's ranks at this
   * step boundary (resihp_job_set_layers_movable): resihp_job_layers and
   * resihp_job_partition say the new partition; move the state of the
   * layers that change hands over the replica communicator, then call
   * resihp_job_commit_layers before computing (see "Repartition") */
  int layers_moved;
} resihp_job_step_t;

void resihp_job_opts_init(resihp_job_opts_t *o);

/* Connect to the coordinator, authenticate, register this replica and
 * open the listening sockets of the all-reduce and of catch-up. */
int resihp_job_join(const resihp_job_opts_t *o, resihp_job_t **out);

/* Register the state a replacement copies from a healthy member (e.g.
 * parameters and optimizer state as one contiguous buffer). Call before
 * the first begin_step. A replacement receives into this buffer. */
int resihp_job_set_state(resihp_job_t *job, void *state, size_t bytes);
/* The same for a state of several buffers (copied list; the buffers stay
 * the caller's). At most 4096 buffers. When the state was given at join,
 * the sizes must be the same (RESIHP_EINVAL otherwise). */
int resihp_job_set_state_list(resihp_job_t *job, const resihp_job_buf_t *bufs,
                              int n);

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
/* The same for gradients as they are: dtype RESIHP_FLOAT32, RESIHP_BFLOAT16,
 * RESIHP_FLOAT64 or RESIHP_FIXED64; op RESIHP_OP_SUM, or RESIHP_OP_AVG
 * (divided by the replicas in the group: st.nreplicas). Float sums depend on
 * which replica computed what; for bitwise reproducible results accumulate
 * in fixed point. One gradient exchange per step and rank. */
int resihp_job_allreduce_as(resihp_job_t *job, void *buf, size_t count,
                            resihp_dtype_t dtype, resihp_op_t op);

/* Commit the step (the ledger records who computed what). While the
 * replicas run free (resihp_job(3): they meet the coordinator only when
 * something changes) it also agrees with every other rank whether the
 * next step goes on without the coordinator; a negative code when a rank
 * of this replica failed meanwhile: leave. */
int resihp_job_end_step(resihp_job_t *job);

/* Record how long microbatch mb took and its workload (tokens, sum of
 * squared sequence lengths, number of sequences: what the fail-slow
 * detector's predictor needs, see the detector's T ~ a*N + b*sum(l^2) +
 * e*nseq + c). Kept in a ring of the last 4096 samples; at the next
 * begin_step the step's samples go to the coordinator's detector, which
 * moves microbatches away from a replica that turns slow (and may swap it
 * for a spare, see resihp-run(1)). seconds is this rank's own compute time
 * of the microbatch, not its waits for other ranks. */
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

/* What the data loader knows of microbatch mb of step `step` before it is
 * computed: tokens, sum of squared sequence lengths, sequences (as for
 * resihp_job_report_microbatch). Return 0, or non-zero when unknown. */
typedef int (*resihp_job_workload_fn)(long step, int mb, double *tokens,
                                      double *sum_l2, double *nseq, void *ud);
/* Let the coordinator assign microbatches by predicted cost: with
 * sequence lengths that vary, equal counts are not equal work. One replica
 * per step is asked for the next step's workloads; fn is then called for
 * every microbatch of that step from begin_step, on the caller's thread.
 * Without it, microbatches are assumed to cost the same. */
int resihp_job_set_workload_fn(resihp_job_t *job, resihp_job_workload_fn fn,
                               void *ud);

/* Declare the model's layers: nlayers layers, elems[l] gradient elements
 * of layer l (in the order of the rank's gradient: its first layer's
 * elements, then the next one's...), and this replica's partition: counts[k]
 * layers on rank k, nranks = resihp_job_shards(job) entries, each >= 1,
 * summing to nlayers. Every rank of the replica calls it with the same
 * arguments (they check with each other over the replica communicator),
 * before the first begin_step. Afterwards every exchange of this rank must
 * be of its layers' elements exactly. 0; RESIHP_EINVAL (bad arguments, or
 * the ranks of the replica declared different things: all of them get
 * it); RESIHP_ESTATE after the first step; RESIHP_EPEER when a rank of the
 * replica failed. At most 100000 layers. */
int resihp_job_set_layers(resihp_job_t *job, int nlayers, const size_t *elems,
                          const int *counts, int nranks);
/* The layers this rank holds now: [*first, *first + *count). RESIHP_ENOENT
 * when none were declared. */
int resihp_job_layers(const resihp_job_t *job, int *first, int *count);
/* This replica's partition now: counts[k] layers on rank k, nranks =
 * resihp_job_shards(job) entries. RESIHP_ENOENT when no layers were
 * declared. */
int resihp_job_partition(const resihp_job_t *job, int *counts, int nranks);
/* Say that this program can move layers between its ranks at a step
 * boundary (see "Repartition"); call after resihp_job_set_layers, before
 * the first step, on every rank. Without it the coordinator never moves
 * this replica's layers. */
int resihp_job_set_layers_movable(resihp_job_t *job);
/* After a step whose st.layers_moved is 1: every rank of the replica has
 * moved its layers' state and gives its new state list (as
 * resihp_job_set_state_list; the sizes may differ from the old ones). The
 * ranks agree over the replica communicator that all of them did: 0 on
 * every rank, or an error on every rank (a rank that failed the move
 * passes failed = 1; a rank gone fails the others with RESIHP_EPEER):
 * then leave, the replica fails as a whole. The list is opaque from then
 * on: a program that declared its state by layer commits with
 * resihp_job_commit_layer_state instead (below), or its replica can no
 * longer catch up by layer nor shrink. */
int resihp_job_commit_layers(resihp_job_t *job, const resihp_job_buf_t *bufs,
                             int n, int failed);
/* A replica that lost ranks with no spare left is relaunched on its
 * survivors as fewer ranks (resihp-run(1)) when its program moves layers
 * and holds its state by layer; that process holds the partition the
 * coordinator planned over its ranks: counts[k] layers on rank k, nranks =
 * resihp_job_shards(job), on every rank, to declare with
 * resihp_job_set_layers instead of the program's own. RESIHP_ENOENT in
 * any other process (declare the program's partition); RESIHP_EPROTO when
 * the coordinator's is not one of nranks ranks. Such a program joins with
 * ranks_per_replica 0. */
int resihp_job_shrunk_partition(const resihp_job_t *job, int *counts,
                                int nranks);

/* The state of one layer: its buffers (parameters, optimizer moments...),
 * the same number and sizes in every replica that holds the layer. */
typedef struct {
  const resihp_job_buf_t *bufs;
  int nbufs;
} resihp_job_layer_state_t;
/* Declare this rank's state by layer (catch-up by layer, see Layers
 * above), instead of resihp_job_set_state_list: layers[i] is the state of
 * layer first + i of resihp_job_layers (nlayers = its count), rank the
 * rank's own state that belongs to no layer (nrank buffers; NULL/0: none;
 * a replacement's rank k receives it from rank k of a member, so it must
 * have the same sizes there). After resihp_job_set_layers and before the
 * first begin_step; every rank of the replica calls it (they check with
 * each other over the replica communicator). The lists are copied, the
 * buffers stay the caller's (valid until resihp_job_destroy). The state a
 * member serves, saves and checks is then the layers' buffers in layer
 * order followed by the rank's, so a replacement of the same partition
 * receives it as one transfer as before. At most 4096 buffers in all. 0;
 * RESIHP_EINVAL (bad arguments, no layers declared, a rank of the replica
 * did not declare its state by layer: all of them get it, or sizes other
 * than those given at join); RESIHP_ESTATE after the first step;
 * RESIHP_EPEER when a rank of the replica failed. */
int resihp_job_set_layer_state(resihp_job_t *job,
                               const resihp_job_layer_state_t *layers,
                               int nlayers, const resihp_job_buf_t *rank,
                               int nrank);
/* resihp_job_commit_layers for a program that declared its state by
 * layer: after a step whose st.layers_moved is 1, every rank gives its
 * state by layer for the layers it holds now (resihp_job_layers: layers[i]
 * is layer first + i's; rank, nrank: its own, as at
 * resihp_job_set_layer_state). The state stays by layer, so the moved
 * replica's replacements still catch up by layer and it can still shrink
 * onto its survivors when it loses a rank with no spare left. The same
 * agreement and errors as resihp_job_commit_layers (RESIHP_EINVAL on every
 * rank when one gave a state that is not its new layers'). */
int resihp_job_commit_layer_state(resihp_job_t *job,
                                  const resihp_job_layer_state_t *layers,
                                  int nlayers, const resihp_job_buf_t *rank,
                                  int nrank, int failed);

int resihp_job_replica(const resihp_job_t *job);
/* This rank's shard index k (0..K-1) and K, the ranks of its replica. */
int resihp_job_shard(const resihp_job_t *job);
int resihp_job_shards(const resihp_job_t *job);
/* The communicator of this replica's K ranks (rank k = shard k), owned by
 * the job; valid from join to destroy. A failure of one of its ranks fails
 * the replica: on an error from it, leave (resihp_job_destroy, exit). */
resihp_comm_t *resihp_job_replica_comm(resihp_job_t *job);

/* Tell the coordinator the run is over, with a short result text (e.g. the
 * checksum of the final parameters, at most 200 printable characters,
 * no spaces) that resihp-run compares across replicas. Every rank calls
 * it with its shard's result; the replica reports "r0/r1/..." (shortened
 * to a digest of them when longer than 200 characters). */
int resihp_job_finish(resihp_job_t *job, const char *result);

/* Stop the whole run because of an error of the program that a spare
 * cannot fix: the same program would fail the same way on any node (a
 * state it cannot load after catch-up, replicas whose parameters differ,
 * a buffer it cannot use). A rank that just exits counts as a failed
 * replica, which resihp-run relaunches on a spare, where it fails again
 * until no spare is left; after resihp_job_abort it is not relaunched:
 * the coordinator stops the run as at SIGINT (the other replicas commit
 * the step in progress, taking over this replica's microbatches if need
 * be, then get st.done and finish), and resihp-run prints "replica R
 * stopped the run: REASON" and exits with status 6 (resihp-run(1)).
 *   Any rank may call it, at any time after join: before the first step,
 * between steps or in the middle of one (a rank other than the replica's
 * rank 0 says it through rank 0, which then leaves too). reason is text
 * for people, cut to 200 characters, anything but printable ASCII
 * replaced by '_'; NULL or "" says "no reason given". Logs it as an error
 * and returns 0 once it is sent (or the error of the send). Then destroy
 * the job and exit with a non-zero status; the job must not be used for
 * anything else. */
int resihp_job_abort(resihp_job_t *job, const char *reason);

void resihp_job_destroy(resihp_job_t *job);

#ifdef __cplusplus
}
#endif
#endif /* RESIHP_JOB_H */
