/* SPDX-License-Identifier: BSD-3-Clause */
/* Internals of the in-rank job (resihp/job.h), shared by its files:
 *
 *   job.c          life cycle: options, join, the heartbeat thread,
 *                  accessors, finish, abort, destroy
 *   job_link.c     the leader's coordinator link: send, receive, and
 *                  reconnecting to a coordinator that failed over
 *   job_replica.c  the replica's K ranks: finding each other (star links
 *                  to rank 0 for control lines), the replica communicator,
 *                  agreement among the K ranks
 *   job_step.c     step boundaries: GO (the shard groups of a new epoch),
 *                  START (microbatches, catch-up, serving), DONE
 *   job_exchange.c the gradient exchange in the shard group, the K groups'
 *                  common outcome and in-step recovery (RECOVER/REASSIGN)
 *   job_catchup.c  the state as a list of buffers, sending and receiving
 *                  one shard's state
 *   job_faults.c   injected faults and periodic probe verdicts
 *   job_layers.c   the model's layers and this replica's partition
 *   job_groups.c   this rank's groups of an epoch: one per run of layers
 *                  it holds when the members' partitions differ
 *   layer_groups.c the runs of layers of the replicas' partitions and
 *                  their groups (pure: layer_groups.h)
 *
 * Roles. Rank 0 of a replica's step (the leader) alone talks to the
 * coordinator; it relays what the other ranks need as lines over
 * authenticated "local" links (the star). Data between the ranks of a
 * replica goes through the replica communicator (rcomm); the gradient of
 * shard k goes through the shard group of rank k (comm), one
 * fault-tolerant communicator per shard across the member replicas. */
#ifndef RESIHP_RECOVERY_JOB_INTERNAL_H
#define RESIHP_RECOVERY_JOB_INTERNAL_H

#include "../control/costplan.h"
#include "../control/lobby.h"
#include "../control/wire.h"
#include "../probe/results.h"
#include "../transport/mesh.h"
#include "inject.h"
#include "layer_groups.h"

#include <resihp/allreduce.h>
#include <resihp/job.h>

#include <pthread.h>
#include <stdint.h>

#define RESIHP__JOB_MSG_MAX (RESIHP__WIRE_LINE_MAX + 1)
#define RESIHP__JOB_SAMPLES 4096
/* Ranks per replica: each adds an address to the replica's HELLO. */
#define RESIHP__JOB_MAX_SHARDS 64
/* Buffers of one rank's state. */
#define RESIHP__JOB_MAX_BUFS 4096
/* One address "a.b.c.d:port", and a replica's list of K of them. */
#define RESIHP__JOB_EP_MAX 48
#define RESIHP__JOB_EPS_MAX (RESIHP__JOB_MAX_SHARDS * RESIHP__JOB_EP_MAX)
/* Handshakes in progress on a listening socket, and each one's deadline
 * (see wire.h: strangers are never waited for). */
#define RESIHP__JOB_HS_PENDING 32
#define RESIHP__JOB_HS_TIMEOUT_MS 3000
/* Authenticated connections waiting for their first line (a rank's SUB,
 * a catch-up offer), each this long at most; and a SUB's length. */
#define RESIHP__JOB_LOBBY 16
#define RESIHP__JOB_FIRST_LINE_MS 5000
#define RESIHP__JOB_SUB_MAX 511

/* Addresses of the coordinator: the primary and a standby (job_coords.c). */
#define RESIHP__JOB_COORDS 4

struct resihp_job {
  resihp_job_opts_t o;
  char coordinator[256];
  /* the coordinator's addresses (job_coords.c), the one in use */
  char coords[RESIHP__JOB_COORDS][RESIHP__JOB_EP_MAX];
  int ncoords, coord_at;
  int replica;
  uint8_t *secret;
  size_t secret_len;
  int timeout_ms;
  int detect_ms;
  char node[64];

  /* the coordinator link (leader only) and the heartbeat thread */
  resihp__wire_t cw;
  pthread_mutex_t send_mu;
  pthread_mutex_t hb_mu;
  pthread_cond_t hb_cv;
  pthread_t hb_thread;
  int hb_started, hb_stop;
  /* the period of HB to the coordinator, as its WELCOME said (the star
   * links' stays RESIHP__JOB_HB_MS); read by the heartbeat thread */
  int coord_hb_ms;
  char *msg; /* the last line received (coordinator or leader) */
  /* failover (leader): the HELLO said at join, the last request that
   * waits for (or may have missed) an answer, re-sent after a reconnect;
   * gen counts reconnects (under send_mu; link_cv tells the other threads
   * of one), lost: the failover window passed, the link is gone for good;
   * heard_ms: when the coordinator last said anything (silence = loss) */
  char *hello, *pending;
  /* the credential of its first WELCOME: a HELLO again=1 says it */
  char cred[48];
  /* the coordinator's term (control/vouch.h): the one it obeys (its last
   * WELCOME's), and the least it may obey since it vouched for a
   * standby's takeover (VOUCHED term=T): a WELCOME of a smaller term is
   * an old coordinator's, refused */
  uint32_t term, min_term;
  pthread_cond_t link_cv;
  unsigned long gen;
  int lost;
  int failover_ms;
  pthread_t main_thread;
  int64_t heard_ms;
  /* A line that came while a shard group was being set up (setup_abort,
   * job_replica.c): the coordinator moved on, so the set-up ended; the
   * next resihp__job_recv / resihp__job_recv_up returns it. relayed: the
   * leader already sent it down to its ranks. */
  char *stash;
  int stash_relayed;

  /* listening sockets: shard group, catch-up, replica communicator */
  int lfd, slfd, rlfd;
  resihp__wire_hs_t *shs; /* handshakes on slfd */
  resihp__lobby_t *slobby; /* and their first lines */
  char ep[RESIHP__JOB_EP_MAX], sep[RESIHP__JOB_EP_MAX], rep[RESIHP__JOB_EP_MAX];

  /* the replica's ranks: this one is shard lrank of lsize */
  int lrank, lsize;
  int pmix; /* the step's ranks found each other through PMIx */
  int llfd; /* leader: where the other ranks connect */
  char lep[RESIHP__JOB_EP_MAX];
  resihp__wire_hs_t *lhs;
  resihp__lobby_t *llobby;
  resihp__wire_t up;    /* non-leader: link to the leader */
  resihp__wire_t *down; /* leader: links to ranks 1..lsize-1 */
  /* the replica's lists, shard order, "a/b/...": shard groups and
   * catch-up (leader), replica communicator (everyone) */
  char eps[RESIHP__JOB_EPS_MAX], seps[RESIHP__JOB_EPS_MAX];
  char reps[RESIHP__JOB_EPS_MAX];
  char rshape[17];      /* leader: digest of every shard's state shape */
  resihp_comm_t *rcomm; /* the replica communicator */
  /* leader: the relay thread reading the star links */
  pthread_t relay_thread;
  int relay_started;
  int relay_reporting; /* lost ranks being told to the coordinator */
  int relay_pipe[2];
  pthread_mutex_t relay_mu; /* down_open, results */
  pthread_cond_t relay_cv;
  /* by rank - 1: 0 closed, 1 open, 2 open and its rank said BYE (it
   * leaves on its own: a link that closes without it is a rank lost) */
  int *down_open;
  char (*results)[224]; /* finish results, by rank ("" until said) */
  /* each rank's last group set-up (SETUP line): its epoch + 1 (0: none
   * yet) and whether it failed */
  uint32_t *setup_epoch;
  int *setup_failed;

  /* the shard group of the current epoch: with layers held in different
   * partitions, the group of this rank's first run of layers, and
   * xcomm[0..nxcomm) those of its others, gslice each one's elements
   * (offset, count) in the rank's gradient (NULL: one group, all of it);
   * job_groups.c */
  resihp_comm_t *comm;
  resihp_comm_t **xcomm;
  int nxcomm;
  size_t *gslice;
  /* while the partitions differ: every other rank's address of each of
   * members[] (col_eps[k], k != lrank, the base of the next GO's delta
   * like member_eps; NULL: not held), ncols columns: the most ranks of
   * any partition (more than lsize when this replica shrank) */
  char (**col_eps)[RESIHP__JOB_EP_MAX];
  int ncols;
  uint32_t epoch;
  int *members, nmembers; /* replica ids, in the group's world-rank order */
  uint32_t vgen;          /* REASSIGNs applied since the group was made */
  int member;             /* in the group of the current step */
  int valid_state;        /* holds the state of the last committed step */
  int in_step;
  long step;
  int *mbs, nmbs, *extra, nextra;
  resihp_job_step_t *st;
  void *work; /* the exchange's result until the K groups agree */
  size_t workcap;

  /* the model's layers (resihp_job_set_layers, job_layers.c): their
   * element offsets off[0..L], this replica's partition; nlayers 0: none
   * declared. began: a step was begun, the partition is fixed. */
  int nlayers;
  size_t *layer_off;
  resihp__partition_t part;
  int began;
  /* the epoch's partitions (GO's lparts=, job_layers.c): the distinct
   * ones of its members and each member's (index, members[] order);
   * nlparts 0: GO said none (no layers, one rank per replica). And the
   * partition the coordinator holds for this replica id (WELCOME's lay=,
   * its last process's: "" when none), and whether it said this process
   * is a shrunk replica's (shrunk=1: it must hold that partition) */
  resihp__partition_t *lparts;
  int nlparts;
  int *lpart_of;
  char welcome_lay[RESIHP__JOB_EPS_MAX / 6];
  int welcome_shrunk;
  /* repartition at a step boundary (issue 32, job_layers.c): movable,
   * the program can move its layers (resihp_job_set_layers_movable: its
   * BEGINs say lmove=1); moving, a GO of the coordinator gave this
   * replica a new partition (part is the new one already, GO's moved=)
   * whose state the program has yet to move and commit
   * (resihp_job_commit_layers) */
  int movable, moving;
  /* a GO gave this replica a partition it cannot take (job_layers.c): it
   * leaves */
  int go_refused;

  /* the state: this rank's shard, a list of buffers */
  resihp_job_buf_t *state;
  int nstate;
  size_t state_len; /* total bytes */
  int shape_fixed;  /* sizes announced at join: later lists must match */
  /* the state by layer (resihp_job_set_layer_state, job_layer_state.c):
   * layer first + i's bytes are [lstate_off[i], lstate_off[i + 1]) of the
   * list's concatenation, the rank's own from lstate_off[count] to
   * state_len; NULL: an opaque list */
  size_t *lstate_off;
  int lstate_first, lstate_count; /* the layers it was declared for */
  pthread_t serve_thread;
  int serving;
  /* the serve thread's connection (-1: none), shut down by
   * resihp__job_serve_stop; serve_mu keeps it from being closed
   * meanwhile. serve_stop/serve_done: atomics. */
  pthread_mutex_t serve_mu;
  int serve_fd, serve_stop, serve_done;
  uint8_t *snap;
  char *serve_to; /* "replica@ep,..." this rank serves */
  long serve_step;
  int64_t catchup_ms; /* the last catch-up received took so long */

  resihp__inject_t inj[RESIHP__INJECT_MAX];
  int ninj;
  int inj_fired[RESIHP__INJECT_MAX];

  resihp__probe_watch_t probes;
  int watch_probes;

  resihp_job_mb_sample_t samples[RESIHP__JOB_SAMPLES];
  long nsamples;
  /* fail-slow (job_perf.c): the data loader's workloads, and whether the
   * coordinator asked for the next step's (START wl=1) */
  resihp_job_workload_fn wl_fn;
  void *wl_ud;
  int wl_asked;

  /* free-running (job_step.c): the coordinator said START run=1, and
   * every boundary since agreed to go on without it; the step's
   * recovery (job_exchange.c), a probe verdict found at end_step and
   * returned by the next begin_step, whether this step's samples go to
   * the coordinator (agreed: the same steps on every rank), and when
   * this rank last sent PERF and PROG */
  int run;
  long run_until; /* the free run ends at this boundary (a save is due) */
  /* this rank's shard address of each of members[] (the epoch's list, the
   * base of the next GO's delta; NULL: none held) */
  char (*member_eps)[RESIHP__JOB_EP_MAX];
  int recovered;
  /* a rank of this replica is gone: the replica has left its groups, and
   * begin_step and the exchange return this from now on */
  int replica_lost;
  int probe_rc;
  int perf_due;
  int64_t last_perf_ms, last_prog_ms;
  /* a free run by cost (job_step.c): START's plan (cost_on), or a plan
   * that did not parse (cost_bad: the run ends at the first boundary);
   * the owners this rank computed of the run's steps olog_from.. (olog_n
   * rows of M, at most olog_cap: the leaders report them), the rows the
   * first member's leader sent with PROG, and room for one step's
   * workloads, costs, picks and owners */
  resihp__costplan_t cplan;
  int cost_on, cost_bad;
  int *olog;
  long olog_from;
  int olog_n, olog_cap, olog_sent;
  resihp_workload_t *cwl;
  double *ccost;
  int *cpick;
};

/* job.c: the coordinator link (leader). recv skips heartbeats; its
 * deadline is about the coordinator's silence. Both reconnect when the
 * link fails (resihp__job_reconnect); recv then re-sends j->pending. */
int resihp__job_send(resihp_job_t *j, const char *line);
/* A last word on the coordinator link as it is, even once
 * resihp_job_destroy has marked it closed (RESIHP_ECLOSED) but not yet
 * closed it: no reconnect, one second at most. 0 or the error. */
int resihp__job_send_last(resihp_job_t *j, const char *line);
int resihp__job_recv(resihp_job_t *j);
/* Failover: the link failed with why; connect again (HELLO again=1)
 * within the failover window. Only the main thread reconnects; another
 * thread waits for it (or the window) instead. 0: a new link is up. */
int resihp__job_reconnect(resihp_job_t *j, int why);
/* The coordinator's NO (final) logged: a retired process (its replica was
 * swapped out or failed) is told so plainly. */
void resihp__job_say_no(const resihp_job_t *j, const char *no);
/* job_coords.c: the coordinator's addresses from "ep[/ep...]" (0, or
 * RESIHP_EINVAL for a list that is not one), from its COORDS line (a bad
 * one is ignored), the one to dial now and the next one. */
int resihp__job_set_coords(resihp_job_t *j, const char *list);
void resihp__job_on_coords(resihp_job_t *j, const char *line);
const char *resihp__job_coord_ep(const resihp_job_t *j);
void resihp__job_coord_next(resihp_job_t *j);
/* Default of RESIHP_FAILOVER_MS, and the largest value taken. */
#define RESIHP__JOB_FAILOVER_MS 30000
#define RESIHP__JOB_FAILOVER_MAX_MS 3600000
/* Parse RESIHP_FAILOVER_MS (NULL or "": the default); strict: digits
 * only, at most RESIHP__JOB_FAILOVER_MAX_MS. */
int resihp__job_parse_failover(const char *v, int *ms);
/* The heartbeat period of the star links, and of the coordinator link
 * when the coordinator does not say (resihp__coord_heartbeats). */
#define RESIHP__JOB_HB_MS 200
/* The coordinator's answer to HELLO: 0 when it is WELCOME (its period of
 * HB to the coordinator taken from hb=, 100..60000 ms; absent:
 * RESIHP__JOB_HB_MS), else RESIHP_EPROTO. */
int resihp__job_welcome(resihp_job_t *j, const char *line);
/* Parse the microbatch list under key of msg into *out (freed first). */
int resihp__job_parse_mbs(resihp_job_t *j, const char *msg, const char *key,
                          int **out, int *n);

/* job_replica.c */
int resihp__job_join_leader(resihp_job_t *j, const char *jid, const char *sid);
int resihp__job_accept_ranks(resihp_job_t *j);
int resihp__job_replica_comm_create(resihp_job_t *j);
/* A communicator of this job's secret: rank of n at eps, accepting on
 * listen_fd (the shard group and the replica communicator). */
/* abortable: the set-up ends as soon as the coordinator (via the leader,
 * for ranks > 0) says anything but a heartbeat (a new epoch after a member
 * died): a shard group's set-up. */
int resihp__job_comm_create(resihp_job_t *j, int rank, int n,
                            const char *const *eps, int listen_fd,
                            int connect_timeout_ms, int abortable,
                            resihp_comm_t **out);
/* Puts a line kept by an ended set-up into j->msg: 1, or 0 if none. */
int resihp__job_take_stash(resihp_job_t *j);
/* Leader of a replica that leaves the job: hang up on the coordinator
 * now (no reconnect), so that it fails the replica at once and not when
 * this process is done closing its communicators (a lingering close of
 * up to 2 s while the survivors wait for the next epoch). */
void resihp__job_hang_up(resihp_job_t *j);
/* Fires the faults planned for a group's set-up (inject.h, "setup"). */
void resihp__job_setup_fault(resihp_job_t *j);
/* Leader: line (and raw bytes) to every other rank. Non-leader: the next
 * line from the leader (heartbeats skipped). */
int resihp__job_send_down(resihp_job_t *j, const char *line);
int resihp__job_send_down_buf(resihp_job_t *j, const resihp__wire_buf_t *b);
int resihp__job_recv_up(resihp_job_t *j);
/* Non-leader: a line to the leader (relayed to the coordinator when it
 * is a FAULT, a PERF or an ABORT). */
int resihp__job_send_up(resihp_job_t *j, const char *line);
/* A line for the coordinator from any rank: the leader sends it, the others
 * up the star to the leader's relay (FAULT, PERF, ABORT). 0 once sent.
 * job_faults.c. */
int resihp__job_tell(resihp_job_t *j, const char *line);
/* Element-wise sum of v[0..n) over the replica's ranks (exact): how the K
 * ranks agree. Returns RESIHP_EPEER when a rank of the replica failed;
 * then this rank has left its shard group (resihp__job_replica_lost). */
int resihp__job_replica_sum(resihp_job_t *j, int64_t *v, size_t n);
/* After the ranks of the replica agreed to refuse what they were given: one
 * more sum, so that every rank holds the refusal before any leaves (a rank
 * told "no" usually exits at once; a partner still finishing the first sum
 * would see it gone, RESIHP_EPEER, instead of the refusal). job_layers.c */
void resihp__job_replica_settle(resihp_job_t *j);
void resihp__job_replica_lost(resihp_job_t *j);
/* A layer move's commit (resihp_job_commit_layers and _layer_state):
 * rc is this rank's own outcome (0: its new state is taken); the ranks of
 * the replica agree over the replica communicator that all of them got
 * this far. 0 on every rank (the move is over), or an error on every
 * rank. */
int resihp__job_commit_agree(resihp_job_t *j, int rc);
/* Tests: called at a free-run boundary of step `step` between the shard
 * group's vote and the replica's (where a rank's death leaves its replica
 * out of step with the others). */
extern void (*resihp__job_boundary_hook)(long step);
void resihp__job_relay_stop(resihp_job_t *j);
/* Leader, leaving: wait up to ms for the relay to learn how every rank's
 * link ended (its BYE or RESULT, or closed: reported lost). */
void resihp__job_relay_settle(resihp_job_t *j, int ms);
/* Leader: mine, then every other rank's finish result, "/"-separated. */
/* Leader: whether any rank of the replica failed to set up its group of
 * epoch (*failed), waiting for their SETUP lines and meanwhile watching
 * the coordinator (a new epoch ends their set-ups: setup_abort). 0, or
 * RESIHP_EPEER when a rank is gone (the replica leaves the job). */
int resihp__job_setup_results(resihp_job_t *j, uint32_t epoch,
                              int64_t *failed);
int resihp__job_results(resihp_job_t *j, const char *mine,
                        resihp__wire_buf_t *b);
/* A handshake-complete connection on lfd and its first line (cap bytes
 * at most) before the deadline; give_up (may be NULL) is asked between
 * polls. Authenticated connections wait for their first line in lobby,
 * each for RESIHP__JOB_FIRST_LINE_MS. */
int resihp__job_accept_authed(resihp_job_t *j, resihp__wire_hs_t *hs,
                              resihp__lobby_t *lobby, int lfd,
                              int64_t deadline, int (*give_up)(resihp_job_t *),
                              resihp__wire_t *out, char *line, size_t cap);

/* job_perf.c: before BEGIN, the last step's samples (PERF, every rank)
 * and, if asked, the next step's workloads (WL, leader). */
void resihp__job_send_perf(resihp_job_t *j);
/* The data loader's workloads of the M microbatches of step `step` into w,
 * as WL carries them (whole numbers): 0, or RESIHP_ENOENT when there is
 * no workload function or it failed for one of them. */
int resihp__job_workloads(resihp_job_t *j, long step, resihp_workload_t *w);
/* Free-running: at most one PROG per this many ms (the first member's
 * leader), and one PERF per RESIHP__JOB_PERF_MS and rank in a job of up to
 * 200 ranks. The detector confirms a slowdown over a few sampled steps and
 * warms up over 16: a PERF once a second made that 14-32 s in a free run
 * (98-257 steps of the lab's), where every step is sampled with
 * --lockstep; every 100 ms it is well under a second. */
#define RESIHP__JOB_REPORT_MS 1000
#define RESIHP__JOB_PERF_MS 100
#define RESIHP__JOB_REPORT_MAX_MS 60000
/* The period of a free run's samples (PERF) in an epoch of nmembers
 * replicas of lsize ranks: RESIHP__JOB_PERF_MS, or longer in a larger
 * job (ranks/2 ms), so that the coordinator gets at most about 2,000 PERF
 * lines a second up to 120,000 ranks (then once a minute: every rank of
 * the epoch computes the same period: they vote on it, job_step.c). */
int64_t resihp__job_report_ms(int nmembers, int lsize);
/* job_exchange.c: the RECOVER a leader says when the step's agreed view
 * keeps, of each member w of the epoch, in[w] == lsize (the members it
 * lost: as long as the failure, not the job), into b. */
void resihp__job_recover_line(const resihp_job_t *j, const int64_t *in,
                              resihp__wire_buf_t *b);
/* Tests: when set, a free run sends every step's samples, so that what
 * the detector sees does not depend on the machine's speed. */
extern int resihp__job_report_every_step;

/* job_step.c: the end of a free-running step: every rank of every member
 * learns whether the run goes on (0) or the next step needs the
 * coordinator; a negative code when this replica lost one of its ranks. */
int resihp__job_free_boundary(resihp_job_t *j);
/* Leader, a free run by cost: " ofrom=a own=..." (the owners of the run's
 * steps from row `from` of its log up to step `to`, exclusive) into b. */
void resihp__job_put_owners(const resihp_job_t *j, resihp__wire_buf_t *b,
                            int from, long to);

/* job_layers.c: RESIHP_EINVAL (logged) when layers are declared and a
 * gradient of count elements is not this rank's layers'; and the free. */
int resihp__job_layer_check(const resihp_job_t *j, size_t count);
void resihp__job_layers_free(resihp_job_t *j);
/* Leader: " lay=L[:cuts]" (this replica's partition, every BEGIN says
 * it: control/coord_layers.c) into b when layers are declared. */
void resihp__job_put_lay(const resihp_job_t *j, resihp__wire_buf_t *b);
/* GO of a new epoch (j->msg, j->members set): the members' partitions
 * from lay= and lparts= into j->lparts / lpart_of. 0 (none said: nlparts
 * 0), or RESIHP_EPROTO when they are no partitions of this model, or this
 * replica's is not the one it declared. */
int resihp__job_layers_go(resihp_job_t *j);
/* WELCOME's lay= into j->welcome_lay ("" when absent or malformed) and
 * its shrunk=1 into j->welcome_shrunk; also the leader's RANKS line,
 * which passes both on to the replica's other ranks. */
void resihp__job_layers_welcome(resihp_job_t *j, const char *line);

/* job_step.c: free the other ranks' columns of the member list. */
void resihp__job_cols_free(resihp_job_t *j);
/* job_groups.c: this rank's groups of the epoch (see there): the first
 * on j->comm, the others on xcomm; member i is rank i of each. mine: this
 * rank's column of the member list, cols[k]: rank k's (needed when the
 * partitions differ). 0, or the set-up's error (nothing left set up). */
int resihp__job_groups_create(resihp_job_t *j, int me, int n,
                              char (*const mine)[RESIHP__JOB_EP_MAX],
                              char (*const *cols)[RESIHP__JOB_EP_MAX]);
void resihp__job_groups_destroy(resihp_job_t *j);
int resihp__job_ngroups(const resihp_job_t *j);
resihp_comm_t *resihp__job_group(const resihp_job_t *j, int g);
/* Group g's elements of a gradient of count: [*off, *off + *n). */
void resihp__job_group_slice(const resihp_job_t *j, int g, size_t count,
                             size_t *off, size_t *n);
/* 1 when a member of any of the groups failed. */
int resihp__job_groups_failed(const resihp_job_t *j);
/* resihp__job_comm_create for one of several groups on one listening
 * socket (resihp__comm_create_group; group 0 is resihp_comm_create). */
int resihp__job_comm_create_group(resihp_job_t *j, uint32_t group, int rank,
                                  int n, const char *const *eps, int listen_fd,
                                  int connect_timeout_ms, int abortable,
                                  resihp_comm_t **out);

/* job_catchup.c */
int resihp__job_state_set(resihp_job_t *j, const resihp_job_buf_t *bufs, int n);
/* Digest (16 hex) of the state's buffer sizes, "-" when no state. */
void resihp__job_state_shape(const resihp_job_t *j, char out[17]);
/* Digest (16 hex) of a text. */
void resihp__job_shape_digest(const char *text, char out[17]);
/* Start serving this rank's shard to the entries of serve for shard lrank
 * ("replica.shard@ep,...") with the state of step s-1; a serve still
 * running is stopped first (its replacement has left: see
 * resihp__job_serve_reap). */
void resihp__job_serve_start(resihp_job_t *j, const char *serve, long s);
/* A serve that has ended is joined; one still running is left running: its
 * replacement is in this step's group, so the step cannot end before the
 * transfer does, unless the replacement left, and a replacement that left
 * must not hold the survivors up until the transfer's deadline. */
void resihp__job_serve_reap(resihp_job_t *j);
/* Stop a serve still running (its connection shut down) and join it. */
void resihp__job_serve_stop(resihp_job_t *j);
/* Rank k of a replacement: the state of step `step` for shard k, from the
 * source the coordinator named; offers of another step (a source still
 * serving an earlier attempt) are refused and the wait goes on. */
int resihp__job_receive_state(resihp_job_t *j, long step);
/* After a catch-up failed: the connections of sources still dialling in
 * are closed, so that they give up now and not at their deadline. */
void resihp__job_receive_reset(resihp_job_t *j);

/* job_layer_state.c: one entry of START's serve= (coord_schedule.c):
 * "Q.K@EP" (rank K of replica Q gets this rank's whole state), "Q.K:A-B@EP"
 * (layers A..B-1 of this replica's) or "Q.K:r@EP" (its own non-layer state
 * from this rank K). *a = -1 (whole), -2 (r) or A; *ep points into t. 0 or
 * RESIHP_EPROTO. */
int resihp__job_serve_entry_parse(const char *t, int *q, int *k, int *a,
                                  int *b, const char **ep);
/* The bytes of a catch-up piece of this rank's state: a -1 (whole), -2
 * (the rank's own), or layers [a, b), which must be this rank's: 0 and
 * [*off, *off + *len), or RESIHP_EINVAL. */
int resihp__job_state_piece(const resihp_job_t *j, int a, int b, size_t *off,
                            size_t *len);
/* The piece a catch-up offer line names (job_catchup.c): " layers=A-B"
 * (*a = A, *b = B), " rank=1" (*a = -2) or neither (*a = -1, the whole
 * state). 0 or RESIHP_EPROTO (malformed, or both). */
int resihp__job_offer_piece_parse(const char *line, int *a, int *b);
void resihp__job_state_free(resihp_job_t *j);

/* job_faults.c */
void resihp__job_fire(resihp_job_t *j, resihp__inj_kind_t kind, long step);
void resihp__job_maybe_fire(resihp_job_t *j, long step);
/* A microbatch of the current step took seconds: when a slow-rank
 * injection covers this rank now, stretch it to F x seconds (sleeping the
 * difference) and return the time it then took; else return seconds. */
double resihp__job_slow_microbatch(resihp_job_t *j, double seconds);
int resihp__job_catchup_fault(resihp_job_t *j);
int resihp__job_check_probes(resihp_job_t *j);

/* job_save.c: the resumable state (job_save.h for the files). SAVE step=s
 * from the coordinator (every rank, after the relay): write this rank's
 * shard into RESIHP_STATE_DIR; the leader answers SAVED. A resumed run
 * (RESIHP_RESUME_DIR set by resihp-run) loads each rank's shard at its
 * first START instead of starting from the initial state; a shard that
 * cannot be loaded stops the run (ABORT) and returns RESIHP_ESTATE. */
#include "job_save.h"
int resihp__job_on_save(resihp_job_t *j);
int resihp__job_resuming(const resihp_job_t *j);
int resihp__job_resume_load(resihp_job_t *j, long step);

#endif
