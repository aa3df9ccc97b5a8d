/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator's private header: its state (struct resihp__coord and
 * the records it keeps) and the functions its files share. The API and the
 * protocol are in coordinator.h. The code is a file per idea:
 *
 *   coord_members.c   membership and epochs: the group, a replica's
 *                     failure, the set-up of an epoch (GO, READY, RESYNC)
 *   coord_schedule.c  the step schedule and the microbatch ledger: the
 *                     state machine from barrier to commit, START lists,
 *                     catch-up sources
 *   coord_pace.c      the lines of a step boundary (GO, START) paced
 *                     over poll rounds
 *   coord_rounds.c    in-step recovery: RECOVER rounds and REASSIGN
 *   coord_spares.c    the spare registry (SPARE)
 *   coord_perf.c      fail-slow: the detector, microbatches by predicted
 *                     cost, the swap of a slow replica (PERF, WL)
 *   coord_repart.c    moves of a replica's layers between its ranks
 *   coord_decide.c    one decision for a slow replica: absorb, move its
 *                     layers or swap it, by measured switch costs
 *   coord_protocol.c  the ranks' messages: HELLO, SUBHELLO/LEADER, BEGIN,
 *                     READY/RESYNC, FAULT, CATCHUP_FAILED, FINISH, ABORT
 *   coord_loop.c      the coordinator object, its connections and event
 *                     loop: handshakes, poll, heartbeats, silence
 *   coord_summary.c   the final summary and its statistics
 *
 * Not for use outside these files (tests use coordinator.h).
 */
#ifndef RESIHP_CONTROL_COORD_INTERNAL_H
#define RESIHP_CONTROL_COORD_INTERNAL_H

#include "coordinator.h"
#include "costplan.h"
#include "../probe/burnin.h"
#include "wire.h"

#include <resihp/detector.h>
#include <resihp/log.h>

#include <poll.h>
#include <stdint.h>
#include <sys/epoll.h>

/* Ranks per replica (shards), and the addresses they give. */
#define RESIHP__COORD_MAX_SHARDS 64
#define RESIHP__COORD_EP_MAX 48
#define RESIHP__COORD_EPS_MAX (RESIHP__COORD_MAX_SHARDS * RESIHP__COORD_EP_MAX)
/* A replica's partition of the layers as text, "L:c1:...": at most
 * RESIHP__COORD_MAX_SHARDS - 1 cut points below 10^6, and L */
#define RESIHP__COORD_LAY_MAX (RESIHP__COORD_MAX_SHARDS * 8)
/* Most steps a job may declare: the summary keeps one time per step. */
#define MAX_STEPS 1000000000L

enum { R_NONE, R_JOINING, R_MEMBER, R_GONE };
/* A member's credential: 16 random bytes, as hex. */
#define RESIHP__COORD_CRED_HEX 32
/* P_FREE: the members run free after START run=1 (coord_schedule.c) */
enum { P_BARRIER, P_SETUP, P_RUN, P_END, P_FREE };

typedef struct {
  int state;
  int conn; /* index into conns, -1 when none */
  /* the addresses of its K ranks, "a/b/...": shard groups, catch-up
   * (malloc'ed at its HELLO, NULL before: K addresses each, not the most
   * a HELLO may hold, times R replicas) */
  char *ep, *sep;
  char node[64];
  char lep[RESIHP__COORD_EP_MAX]; /* the leader's, for the other ranks */
  long jobid, stepid;
  long pid;     /* its leader rank's process id on node (its word; 0: not said) */
  long begun;   /* last BEGIN step (members) */
  int waiting;  /* joiner waiting for admission */
  int ready;    /* READY for the current setup epoch */
  int catching; /* catching up in the current step */
  int catchup_failed;
  int finished;
  char result[224];
  char fault_kind[16]; /* injected fault announced, not yet seen failing */
  int64_t fault_ms;
  long fault_step;
  int open_fail;     /* failure record waiting for this replica's comeback */
  int reports;       /* RECOVERs in this step */
  int resyncs;       /* RESYNCs in this step */
  int64_t last_life; /* last line (heartbeat included) heard from it */
  int expected;      /* the launcher started a replacement, not admitted yet */
  /* its last HELLO was refused for its program's configuration (the
   * reason: "mismatch", ...), "" otherwise: the launcher blames the
   * program, not the node, when its step ends (resihp__coord_refused) */
  char refused[32];
  /* the credential its WELCOME gave it (hex, "" before): a HELLO again=1
   * must bring it, so that nobody else with the job's secret can take
   * its place by replaying its ids (they are in every GO) */
  char cred[RESIHP__COORD_CRED_HEX + 1];
  /* fail-slow (coord_perf.c): time multiplier now (1 = healthy), since
   * which step, steps slow in a row and in all, episodes, the worst
   * factor, microbatches in the last step, swapped for a spare (step);
   * the multiplier the current step's assignment used (run_slow: a free
   * run goes on while slow stays near it), a boundary asked to swap it
   * since its factor last moved (swap_held: asked once) */
  double slow, worst_slow, run_slow;
  int swap_held;
  long slow_since, slow_steps, slow_total, slow_episodes;
  int quota;
  long swapped_at;
  /* the epoch whose member list its process holds (0: none): GO sends it
   * only the change since then */
  uint32_t list_epoch;
  /* the last process of this replica that the job failed or swapped out
   * (resihp__coord_identity of its Slurm step and addresses; 0: none): it
   * is retired, and may never take the replica's place again, whatever it
   * says (coord_protocol.c: its reconnect is refused) */
  uint64_t retired;
  /* the lines of the last boundary it is owed, not sent yet (OWE_*,
   * coord_pace.c) */
  int owed;
  /* its leader's burn-in at its first HELLO (bytes 0: none): the
   * reference spares are judged against (coord_spares.c) */
  resihp__burnin_t burnin;
  /* its partition of the layers (coord_layers.c): 1 + index into the
   * job's distinct ones (lparts), 0: none said */
  int lpart;
  /* its process's state shape (HELLO shape=: the digest of its shards'
   * state sizes), compared at the process's first BEGIN (shape_open),
   * once its partition is known: with the shape of the replicas holding
   * the same partition, or the job's when it declared no layers */
  char shape[20];
  int shape_open;
  /* its process declared its state by layer (BEGIN lst=1,
   * resihp_job_set_layer_state): it can catch up, and serve, by layer */
  int lstate;
  /* repartition (coord_repart.c): its program can move layers (BEGIN
   * lmove=1); the partition it declared (cut points; "": not yet); moved
   * away from it by the coordinator, at which step, how often;
   * repart_asked: a free run was held for a move since its ranks' factors
   * last changed; healthy_from: the step at which its last slow rank
   * was cleared; back_at: when it last went
   * home, back_hold: the steps its ranks must stay unslowed, moved, before
   * it goes home (hysteresis, doubled each time it is slow again soon
   * after going home) */
  int lmove;
  char home[RESIHP__COORD_LAY_MAX];
  int moved, repart_asked;
  long moved_at, nmoves, healthy_from, back_at, back_hold;
  /* one decision (coord_decide.c): what was chosen for its slowness now
   * (1 + RESIHP__DECIDE_*, 0: nothing yet; a new slowness forgets it);
   * the last swap or move chosen for it (1 + kind, 0: none), at which
   * step, its gain predicted and, once its steps after can tell,
   * measured (s; has_measured 0: not yet, -1: never, the members
   * changed in its steps after) */
  int decided, acted, has_measured;
  long acted_at;
  double predicted, measured;
  /* shrunk (coord_shrink.c): its ranks now (0: the job's K; fewer once
   * it lost ranks with no spare left; its committed partition has as
   * many), the ranks it lost (bits, its numbering before), at which step
   * (1 + step; 0: never), and its multiplier then (its predicted step
   * over the healthy K-rank one) */
  int k;
  unsigned long long lost;
  /* the ranks its present process lost, as its leader said (FAULT
   * kind=lost; bits, its present numbering): cleared by a new process */
  unsigned long long lost_now;
  long shrunk_at;
  double shrink_slow;
} rep_t;

/* The reactions to a slow member (coord_decide.c). */
enum { RESIHP__DECIDE_ABSORB, RESIHP__DECIDE_REPART, RESIHP__DECIDE_SWAP,
       RESIHP__DECIDE__N };

/* One distinct partition of the layers: its cut points' text ("" for one
 * rank per replica; NULL: a free slot) and how many replicas hold it. */
typedef struct {
  char *text;
  int refs;
  char shape[20]; /* its holders' state shape ("": none compared yet) */
} lpart_t;

enum { OWE_GO_WHOLE = 1, OWE_GO_LINE = 2, OWE_START = 4 };

typedef struct {
  resihp__wire_t w;
  int replica;
  int64_t last_heard; /* on the listening clock (c->listened) */
  int64_t adopted; /* when it was taken in (its deadline to say who it is) */
  int out_armed; /* its output queue waits for EPOLLOUT */
  /* a non-leader rank waiting for its leader's address */
  int sub_replica;
  long sub_stepid, sub_jobid;
  /* a leader that said where its ranks find it (LEP), before its HELLO */
  int lep_replica;
  long lep_stepid, lep_jobid;
  char lep[RESIHP__COORD_EP_MAX];
} conn_t;

/* One view reported by survivors for a (step, communicator epoch). Honest
 * survivors all report the same view; a different one is a candidate of
 * its own, so that nobody can spoil a round by reporting first. */
typedef struct {
  uint32_t cepoch;
  char *inview;   /* R entries */
  char *reported; /* R: reporters waiting for (or given) the answer */
  /* the step's members outside the view, once counted (coord_rounds.c) */
  int nout, counted;
  int decided;
  int n;
  int *mb, *to;
} round_t;

typedef struct {
  char node[64];
  int state; /* RESIHP__SPARE_* */
  long registrations;
  int replica; /* promoted to */
  char summary[200];
  /* its last burn-in (bytes 0, failed 0: none) and whether it was judged
   * against the replicas' yet */
  resihp__burnin_t burnin;
  int judged;
} spare_t;

typedef struct {
  int replica;
  char kind[16];
  char why[64];
  long step;
  int catchup; /* the fault hit during a catch-up transfer */
  int outside; /* not injected: t_fault is the last sign of life */
  /* failed by a restored coordinator before its first step (the replica
   * went with the lost primary's node): the fault came before the
   * takeover; its time and step are known only within bounds (summary) */
  int takeover;
  int64_t t_fault, t_detect, t_admit, t_train;
} fail_t;

struct resihp__coord {
  resihp__coord_opts_t o; /* o.secret: the caller's, read at create only */
  resihp__wire_listener_t lis; /* o.listener's, or our own */
  int port;
  /* The replicas' connections are in an epoll set (efd): a wake-up costs
   * what is ready, not one poll entry per replica; the listener and the
   * few pending handshakes are polled beside efd. */
  int efd;
  struct epoll_event *evs;
  int capevs;
  conn_t *conns;
  int nconns, capconns;
  /* no slot below this one is free (resihp__coord_adopt) */
  int conn_free;
  /* connections that may wait for their leader's address (SUBHELLO):
   * at least as many as do (coord_protocol.c answer_subs) */
  int subs_waiting;
  /* Every per-replica table has R entries, R from the launcher (opts
   * replicas), allocated at create: no fixed limit. */
  rep_t *reps;
  int R, M;
  int K;          /* ranks per replica (the first HELLO sets it) */
  char shape[20]; /* digest of the shards' state sizes, or "-" */
  /* the model's layers (0: none declared) and the replicas' distinct
   * partitions of them (coord_layers.c) */
  int nlayers;
  lpart_t *lparts;
  int nlparts, caplparts;
  long S;
  long step;
  int phase, state;
  uint32_t epoch;
  /* the coordinator's term (vouch.h): 0 for the job's first primary and
   * its keeper's successors, one more at each standby's takeover; every
   * WELCOME says it */
  uint32_t term;
  /* a replica said a newer term: a standby took over (never undone) */
  int superseded;
  int *members, nmembers;
  int *last_list, nlast; /* members of the last started epoch */
  int changed; /* a member left or joined since (same ids, new process) */
  int *owner;
  char *in_step; /* members when the step started */
  int *scratch;  /* R ints for a step's or a round's contributors */
  int *scratch2; /* R more (a round's departed) */
  char *view;    /* R ints as text: a RECOVER's list */
  char *inview;  /* R: a mark per replica, all 0 between uses */
  double *rslow; /* R: the contributors' speeds (coord_perf.c) */
  round_t *rounds;
  int nrounds, caprounds;
  int64_t *start_ms; /* START time of each step, index step */
  long capsteps;     /* entries of start_ms: grows with the steps done */
  int64_t t_done;
  /* The loop's last wake-up, and the time of the run the coordinator was
   * not running (coord_loop.c): waiting, not training, in the summary. */
  int64_t last_wake, away_ms;
  /* A restored coordinator: when, at which step, the first step it started
   * (the survivors trained again), the highest step a member said it had
   * started when it came back (HELLO again=1), and when the lost primary
   * died: after loss_lo, before loss_hi (resihp__coord_set_loss; 0: not
   * known). */
  int64_t restored_ms, resumed_ms, loss_lo_ms, loss_hi_ms;
  long restored_step, again_step;
  fail_t *fails; /* every failure of the run, for the summary */
  int nfails, capfails;
  long reassigned;
  int64_t last_hb, last_silence_check;
  /* the listening clock (ms): time spent waiting for the replicas, not
   * working (coord_loop.c), which silence is measured on; when the last
   * poll returned */
  int64_t listened, last_return;
  /* heartbeat periods: each leader's (told in WELCOME) and our own
   * (resihp__coord_heartbeats) */
  int hb_leader_ms, hb_coord_ms;
  int hb_next; /* the next replica of the heartbeat sweep (R: none) */
  spare_t *spares;
  int nspares, capspares;
  resihp__wire_hs_t *hs; /* handshakes in progress */
  char *line;            /* one received line (resihp__coord_room) */
  char *fline;           /* the same for take_faults */
  size_t linecap, flinecap;
  int fline_busy;
  struct pollfd *pfd;
  int cappfd;
  int stop; /* end at the next step boundary (resihp__coord_stop) */
  /* the first replica that stopped the run with ABORT (-1: none), and
   * its reason */
  int abort_replica;
  char abort_why[224];
  /* fail-slow adaptation (coord_perf.c) */
  resihp_detector_t *det;
  double *rank_slow;         /* R*K: each rank's multiplier (1: not SLOW) */
  unsigned char *rank_state; /* R*K: each rank's resihp_health_state_t */
  resihp_workload_t *wl;     /* M workloads of step wl_step */
  double *cost;              /* M costs */
  long wl_step;
  int wl_asked;      /* replica to send the next step's workloads */
  int *pick;         /* M: contributor index of each microbatch */
  long long *tuples; /* M*5: one parsed PERF or WL list */
  char *val;         /* one PERF or WL list as received (coord_room) */
  size_t valcap;
  long samples, costed, swaps;
  /* repartition (coord_repart.c): the replica moved at this boundary
   * (-1: none: GO's moved=), moves in all */
  int moved_r;
  long repartitions;
  /* one decision (coord_decide.c): the replica whose layers this
   * boundary moves because it was chosen (-1: none) and its counts now,
   * home and to be, ratio and gain; each switch's measured costs (sum,
   * count: their mean is the estimate, the configured default before the
   * first); decisions taken by kind. Switches being timed, one at a time:
   * a move (its replica, -1: none; its step, epoch, time in ms, and the
   * job's step before it, s) and a swap (the replica, -1: none, and when
   * it was swapped out); the chosen action whose gain is being measured
   * (replica, -1: none; the step and time it was chosen at, the job's
   * step time then, the step at which its steps after can be told and
   * the epoch they run in) */
  int decide_r;
  int decide_cur[RESIHP__COORD_MAX_SHARDS],
      decide_home[RESIHP__COORD_MAX_SHARDS],
      decide_out[RESIHP__COORD_MAX_SHARDS];
  double decide_ratio, decide_gain;
  double cost_sum[RESIHP__DECIDE__N];
  long cost_n[RESIHP__DECIDE__N];
  /* replicas' steps from launch to join (resihp__coord_note_launch): a
   * swap's price before one is measured, when not configured */
  double launch_sum;
  long launch_n;
  long decisions[RESIHP__DECIDE__N];
  int rm_r;
  long rm_step;
  uint32_t rm_epoch;
  int64_t rm_ms;
  double rm_step_s;
  int sw_r;
  int64_t sw_ms;
  int dg_r;
  long dg_step, dg_settle;
  uint32_t dg_epoch;
  int64_t dg_ms;
  double dg_before_s;
  /* shrink (coord_shrink.c): one waiting for the next GO (1 + replica,
   * 0: none) and its lost ranks; the one the last GO said (shrunk=: -1
   * none); shrinks in all */
  int shrink_next;
  unsigned long long shrink_next_dead;
  int shrunk_r;
  unsigned long long shrunk_dead;
  long shrinks;
  /* whether the members of the last renewed epoch held different
   * partitions of the layers (coord_members.c: whole lists when they
   * first do; not in the snapshot: a standby sends them whole once) */
  int go_differ;
  /* a move asked for by resihp__coord_repart_force: 1 + replica, 0: none */
  int force_r;
  int force_counts[RESIHP__COORD_MAX_SHARDS];
  /* the step whose PERF lines are being counted, and how many came: once
   * every member rank's are in, the step is judged (coord_perf.c) */
  long perf_step;
  int perf_lines;
  /* steps started by a START (the others ran free); a member slow long
   * enough for a swap in a free run (coord_perf.c: a boundary may be due) */
  long starts;
  int swap_due;
  /* free-running (coord_schedule.c): HOLD sent in this run; protocol
   * lines received and sent but heartbeats, and of those received the
   * time-based reports (PROG, PERF); a member turned slow in the run
   * (HOLD due once its PERF is read) */
  int held, hold_slow;
  uint32_t go_epoch; /* epoch of the last list sent (last_list's) */
  /* the last boundary's GO lines, built and hashed once: the whole
   * list (for members that hold none) and the other (the change, or
   * new=0), whether it made an epoch (go_renew); the members owed lines,
   * pace_q[pace_head .. pace_n) (r << 3 | OWE_*), and > 0 while they are
   * being sent (coord_pace.c) */
  resihp__wire_buf_t go_whole, go_line;
  uint8_t go_whole_digest[RESIHP__SHA256_LEN];
  uint8_t go_line_digest[RESIHP__SHA256_LEN];
  int go_renew;
  int *pace_q;
  long pace_head, pace_n;
  int paying;
  long pace_lines, pace_bytes; /* what this poll round may still send */
  long lines_rx, lines_tx, lines_timed;
  /* saves (coord_save.c): the first step of this run, the step whose
   * save is under way or over (-1: none), the replica asked (-1: none)
   * and the last one asked for that step, whether it is over */
  long base_step;
  long save_step;
  int save_asked, save_last, save_over;
  char lost_why[160];
  /* "COORDS eps=..." (resihp__coord_set_coords), NULL when none */
  char *coords_line;
  /* failover (coord_snapshot.c): state changed since the last mirror, a
   * mirror under way (no re-entry), members of a restored coordinator
   * reconnect by this time (0: none pending) */
  int dirty, mirroring;
  /* how long the last step took (0: unknown), mirrored: a restored
   * coordinator's members come back at their next step boundary in a
   * free run, so their reconnect window follows it */
  int64_t step_ms;
  /* > 0 while answers that need no mirror go out (resihp__coord_again) */
  int again;
  int64_t reconnect_by;
  /* the last START as sent, to send it again (coord_schedule.c): its
   * step, run=1, the owners (M) and contributors (R) it was built from */
  long start_at;
  int start_run, nstart_contrib;
  int *start_owner, *start_contrib;
  /* its index (resihp__coord_index_start), so that N STARTs cost
   * O(N + M), not O(N M): member r's microbatches are
   * start_mbs[start_off[r] .. start_off[r + 1]), the members catching up
   * that serve= names, in id order, start_joiners[0 .. nstart_joiners) */
  int *start_mbs, *start_off, *start_joiners, nstart_joiners;
  /* the member that serves shard k of joiner ji: start_src[ji * K + k]
   * (coord_layers.c: one that holds the joiner's partition of the
   * layers) */
  int *start_src;
  /* joiner ji catches up by layer (start_lay[ji]: no member holds its
   * partition, it and start_src's members hold their state by layer):
   * coord_schedule.c names the pieces of each member rank in serve= */
  int *start_lay;
  /* assignment by cost (coord_perf.c, costplan.c): the plan the last
   * START's owners were computed with (cplan_have: they were; a free run
   * then ships it, run=1 cby=...), and the owners the replicas reported
   * of that free run's steps fown_at..fown_at+fown_n-1 (M each), not yet
   * in the ledger (coord_schedule.c) */
  resihp__costplan_t cplan;
  int cplan_have;
  /* the plan as START carries it, the same for every member: written
   * once (cplan_text_ok), not once per member, which was O(N) each */
  resihp__wire_buf_t cplan_text;
  int cplan_text_ok;
  int *fown;
  long fown_at;
  int fown_n, fown_cap;
};

/* The coordinator's log lines (subsystem "coord"). */
#define logc(l, ...) resihp_log((l), "coord", __VA_ARGS__)

/* coord_loop.c: connections, and a replica's addresses (its HELLO's). */
int resihp__coord_set_eps(resihp__coord_t *c, int r, const char *ep,
                          const char *sep);
void resihp__coord_send_to(resihp__coord_t *c, int r, const char *line);
void resihp__coord_send_buf_to(resihp__coord_t *c, int r,
                               const resihp__wire_buf_t *b);
/* The same for a line sent to many: its digest computed once
 * (resihp__wire_line_digest), or NULL. */
void resihp__coord_send_hashed(resihp__coord_t *c, int r, const char *line,
                               const uint8_t *digest);
void resihp__coord_send_buf_hashed(resihp__coord_t *c, int r,
                                   const resihp__wire_buf_t *b,
                                   const uint8_t *digest);
void resihp__coord_close_conn(resihp__coord_t *c, int k);
/* The longest line a member may send of the kind that starts with the
 * len bytes at line (resihp__wire_t.line_max of its connection). */
size_t resihp__coord_member_line_max(const char *line, size_t len);
/* Connection k's socket takes what it can of its queue now. */
void resihp__coord_flush_conn(resihp__coord_t *c, int k);
/* The FAULT lines that connection k has buffered or its socket holds,
 * handled; its other lines are dropped (the replica is failing: see
 * resihp__coord_fail_replica). */
void resihp__coord_take_faults(resihp__coord_t *c, int k);

/* coord_members.c */
int resihp__coord_is_member(const resihp__coord_t *c, int r);
void resihp__coord_remove_member(resihp__coord_t *c, int r);
void resihp__coord_add_member(resihp__coord_t *c, int r);
void resihp__coord_fail_replica(resihp__coord_t *c, int r, const char *why);
/* Replica r is swapped out for a spare between two steps: it leaves as a
 * failed one does, but its process is retired, not failed (told so:
 * NO reason=retired), and the launcher hears of it through on_swapped
 * (its node is slow, not bad) when it gave one. */
void resihp__coord_swap_out(resihp__coord_t *c, int r, const char *why);
/* A process of replica r: its Slurm step and its ranks' addresses, as a
 * number (never 0). */
uint64_t resihp__coord_identity(long jobid, long stepid, const char *ep,
                                const char *sep);
/* Room for n failure records (c->fails grows with the run): 0 or
 * RESIHP_ENOMEM. */
int resihp__coord_ensure_fails(resihp__coord_t *c, int n);
void resihp__coord_send_go(resihp__coord_t *c);
/* coord_layers.c: replica r's partition from a BEGIN's lay= (kept, the
 * same again costs a comparison): 0, RESIHP_EPROTO (not a partition of
 * the job's K ranks), RESIHP_EINVAL (another number of layers than the
 * job's), RESIHP_ERANGE (too many distinct partitions for a GO line) or
 * RESIHP_ENOMEM. */
int resihp__coord_set_layers(resihp__coord_t *c, int r, const char *lay);
/* Replica r's state shape (its HELLO's) against the replicas' of its
 * partition (the job's when it declared none), at its process's first
 * BEGIN: 0 (the first to hold a partition sets its shape), or
 * RESIHP_EINVAL with the expected one in *want. */
int resihp__coord_check_shape(resihp__coord_t *c, int r, const char **want);
/* A snapshot's "y" line after "y r lay=": "L[:cuts][ lst=1][ shape=D]", as
 * resihp__coord_put_layers wrote it. 0, RESIHP_EPROTO, RESIHP_ENOMEM... */
int resihp__coord_restore_layers(resihp__coord_t *c, int r, const char *s);
/* " lay=L:cuts" of replica r (WELCOME, snapshot): 1 if it has one. */
int resihp__coord_put_lay(const resihp__coord_t *c, int r,
                          resihp__wire_buf_t *b);
/* GO of a new epoch: " lay=L lparts=..." (nothing when no layers). */
void resihp__coord_put_lparts(const resihp__coord_t *c, resihp__wire_buf_t *b);
/* Snapshot: a "y r lay=...[ shape=D]" line per replica that has a
 * partition (D: the state shape of its holders, once one began). */
void resihp__coord_put_layers(const resihp__coord_t *c, resihp__wire_buf_t *b);
void resihp__coord_layers_free(resihp__coord_t *c);
/* The sources of the joiners' shards into c->start_src (see there), from
 * the contributors start_contrib: shard k of the ji-th joiner from the
 * (ji + k)-th of those that hold its partition (all of them when the
 * partitions are the same or not said). 0 or RESIHP_ENOMEM. */
int resihp__coord_serve_sources(resihp__coord_t *c);
/* START's serve= entries of member r for joiner ji's rank k by layer
 * (start_lay): "q.k:A-B@ep" for each run of the joiner rank's layers that
 * a rank of r holds, then "q.k:r@ep" (rank k's own state). *first: no
 * entry written yet (" serve=" comes first). */
void resihp__coord_put_layer_serve(const resihp__coord_t *c, int ji, int k,
                                   const char *ep, int *first,
                                   resihp__wire_buf_t *b);
/* coord_pace.c: lines owed to members at a boundary. Forget what is
 * owed; owe member r line what (OWE_*); send a round's worth (1 if some
 * remain); send member r what it is owed now (before any other line). */
void resihp__coord_pace_reset(resihp__coord_t *c);
/* A poll round begins: its budget of paced lines. */
void resihp__coord_pace_round(resihp__coord_t *c);
void resihp__coord_owe(resihp__coord_t *c, int r, int what);
int resihp__coord_pump(resihp__coord_t *c);
void resihp__coord_pay(resihp__coord_t *c, int r);

/* coord_schedule.c */
void resihp__coord_advance(resihp__coord_t *c);
void resihp__coord_lose(resihp__coord_t *c, const char *why);
int resihp__coord_ensure_steps(resihp__coord_t *c, long n);
/* Free run: a member says it is at step t, so every step before t is
 * committed (with the run's owners); no-op outside a free run. */
void resihp__coord_free_to(resihp__coord_t *c, long t);
/* A free run by cost: whether it is one, and the owners a line carries
 * (ofrom=a own=...: M per step from step a), kept until their steps are
 * committed: 0, or RESIHP_EPROTO for owners that are not a run's. */
int resihp__coord_cost_run(const resihp__coord_t *c);
int resihp__coord_take_owners(resihp__coord_t *c, const char *msg);
/* RECOVER in a free run by cost at step s (committed up to s): the owners
 * of step s become the step's; 0, or RESIHP_EPROTO if they are unknown. */
int resihp__coord_cost_owners_of(resihp__coord_t *c, long s);
/* Free run: whether the coordinator needs the next boundary (a stop, a
 * joiner, an expected replacement, a member whose speed moved away from
 * the run's: resihp__coord_slow_moved), and HOLD, once. */
int resihp__coord_hold_needed(const resihp__coord_t *c);
void resihp__coord_hold(resihp__coord_t *c, const char *why);

/* coord_rounds.c */
void resihp__coord_free_rounds(resihp__coord_t *c);
void resihp__coord_decide_rounds(resihp__coord_t *c);
void resihp__coord_on_recover(resihp__coord_t *c, int k, int r,
                              const char *msg);

/* coord_perf.c */
int resihp__coord_perf_init(resihp__coord_t *c);
void resihp__coord_perf_free(resihp__coord_t *c);
/* A buffer (*buf, *cap bytes) with room for need bytes (at most a line's
 * most): the coordinator's line buffers grow with the lines that come
 * instead of holding RESIHP__WIRE_LINE_MAX (16 MiB) each from the start.
 * 0 or RESIHP_ENOMEM (coord_loop.c). */
int resihp__coord_room(char **buf, size_t *cap, size_t need);
void resihp__coord_perf_reset(resihp__coord_t *c, int r);
/* Replica r's ranks' stages in the detector: rank k is the peer of the
 * other replicas' rank k, but a shrunk replica's ranks hold other layers
 * and are each a stage of their own (coord_shrink.c). */
void resihp__coord_perf_stages(resihp__coord_t *c, int r);
void resihp__coord_on_perf(resihp__coord_t *c, int k, int r, const char *msg);
void resihp__coord_on_wl(resihp__coord_t *c, int k, int r, const char *msg);
int resihp__coord_assign(resihp__coord_t *c, const int *contrib, int nc);
void resihp__coord_perf_commit(resihp__coord_t *c);
/* Whether a swap may be chosen now (a spare is free, swaps are on, the
 * job has another member, no change under way), and whether member p has
 * been slow long enough for one. */
int resihp__coord_swap_open(const resihp__coord_t *c);
int resihp__coord_swap_ready(const rep_t *p);
/* What a swap of member r saves over the steps left at that switch cost
 * (s, resihp_planner_swap_gain_s; negative: it does not pay), and what
 * running it at multiplier f_after instead of its own now saves (a move
 * of its layers; the same formula at no cost). */
double resihp__coord_swap_gain(const resihp__coord_t *c, int r, double cost_s);
double resihp__coord_speedup_gain(const resihp__coord_t *c, int r,
                                  double f_after);
/* In a free run, after commits: HOLD when a member has become worth a
 * swap (once per member until its factor moves). */
void resihp__coord_hold_for_swap(resihp__coord_t *c);
/* Whether replica p's multiplier moved far enough from the one its
 * assignment used to need a step boundary. */
int resihp__coord_slow_moved(const rep_t *p);

/* The mean time of the last steps, up to 8 (s; 0 if unknown). */
double resihp__coord_recent_step_s(const resihp__coord_t *c);

/* coord_repart.c: repartition at a step boundary. choose: for a replica
 * of L equal layers on K ranks at the given factors, holding cur and
 * declared home (counts), m microbatches: 1 and the new counts in out
 * when a move pays (predicted step ratio new/now into *ratio, the time
 * saved over steps_left steps of step_s into *gain_s, more than cost_s),
 * 0 when not, or an error. slowdown: the predicted step of counts at the
 * factors over that of home at full speed (>= 1). */
int resihp__repart_choose(int L, int K, const double *factor, const int *cur,
                          const int *home, int mbs, double step_s,
                          long steps_left, double cost_s, int *out,
                          double *ratio, double *gain_s);
double resihp__repart_slowdown(int L, int K, const double *factor,
                               const int *counts, const int *home, int mbs);
/* The planner's partition of L equal layers over K ranks at the given
 * factors (NULL: all healthy), m microbatches, into out (counts): 0 or
 * RESIHP_EINVAL / RESIHP_ENOMEM. ratio: the predicted step of counts over
 * K ranks at the factors over that of home over K0 ranks at full speed
 * (>= 1); slowdown is ratio with K0 = K. */
int resihp__repart_plan(int L, int K, const double *factor, int mbs, int *out);
double resihp__repart_ratio(int L, int K, const double *factor,
                            const int *counts, int K0, const int *home,
                            int mbs);

/* coord_shrink.c: a replica that lost ranks with no spare left goes on
 * with the survivors (issue 32, item 3). plan: the partition of L layers
 * over the survivors of a K-rank replica whose dead ranks are the bits of
 * dead (old numbering), at the old ranks' factors (NULL: healthy), into
 * out[0..K'): K' (>= 1), or RESIHP_EINVAL (no survivor, none dead, a
 * dead rank >= K, L < K'). slowdown: its multiplier, the predicted step
 * of counts over the kn survivors at their factors (kn entries) over the
 * healthy K-rank replica's at home. */
int resihp__shrink_plan(int L, int K, uint64_t dead, const double *factor,
                        int mbs, int *out);
double resihp__shrink_slowdown(int L, int K, const int *home, int kn,
                               const double *factor, const int *counts,
                               int mbs);
/* Replica r's ranks now (the job's K until it shrank). */
static inline int resihp__coord_rep_k(const resihp__coord_t *c, int r) {
  return c->reps[r].k > 0 ? c->reps[r].k : c->K;
}
/* At a GO: the shrink waiting, if any, is the epoch's (shrunk_r). */
void resihp__coord_shrink_boundary(resihp__coord_t *c);
/* (snapshot) Replica r's shrink on its "y" line: " shrunk=AT:LOST:SLOW"
 * (rep_t's shrunk_at, lost as decimal bits, shrink_slow) once it shrank,
 * and " shrink=next:DEAD" or " shrink=now:DEAD" while its shrink waits
 * for the next GO or is the epoch's (restored, a standby's GO says the
 * same shrunk=). restore: from the text put wrote (s: " shrunk=..."
 * and/or " shrink=...", nothing else): 0, or RESIHP_EPROTO. */
void resihp__coord_put_shrink_state(const resihp__coord_t *c, int r,
                                    resihp__wire_buf_t *b);
int resihp__coord_shrink_restore(resihp__coord_t *c, int r, const char *s);
/* A HELLO of n ranks from replica r, whose lists ep and sep (n
 * items, cap bytes each) become those kept here: those of a replica that
 * shrank to n ranks (its survivors' in their new order) followed by its
 * dead ranks' (the job's K items, as after its shrink): 0, or
 * RESIHP_EINVAL (not a replica of n ranks now, or the lists too long),
 * nothing changed. */
int resihp__coord_shrunk_hello(const resihp__coord_t *c, int r, int n,
                               char *ep, char *sep, size_t cap);
/* GO: " shrunk=r:k,..." when this epoch shrinks a replica. */
void resihp__coord_put_shrunk(const resihp__coord_t *c, resihp__wire_buf_t *b);
/* The rank that old rank k of a replica whose dead ranks are the bits of
 * dead has after the shrink (the survivors in their old order, as
 * resihp_comm_shrink numbers them), or -1 when k is dead. */
static inline int resihp__shrink_rank(int k, uint64_t dead) {
  if (k < 0 || k > 63 || (dead >> k & 1))
    return -1;
  return k - __builtin_popcountll(dead & ((1ULL << k) - 1));
}
/* A new process of replica r (HELLO): nothing moved, nothing declared;
 * of the job's K ranks (shrunk 0) not shrunk either, of its shrunk
 * replica's K' (shrunk 1) still shrunk. */
void resihp__coord_repart_reset(resihp__coord_t *c, int r, int shrunk);
/* (snapshot) Replica r's layers were moved away from home (its declared
 * cut points): 0, or RESIHP_EPROTO. */
int resihp__coord_repart_restore(resihp__coord_t *c, int r, const char *home);
/* Its BEGIN: lmove=, and its home partition once known. */
void resihp__coord_repart_begin(resihp__coord_t *c, int r, const char *msg);
/* Replica r's multiplier for its slowest rank's factor f. */
double resihp__coord_repart_factor(const resihp__coord_t *c, int r, double f);
/* Whether a free run should be held for a move of replica r's layers
 * (once until its ranks' factors change). */
int resihp__coord_repart_wanted(resihp__coord_t *c, int r);
/* Before a step's GO: move the layers of the replica a decision chose
 * (decide_r), or of one whose ranks are healthy again back home if that
 * pays (sets moved_r and changed). */
void resihp__coord_repart_boundary(resihp__coord_t *c);
/* The move that would speed member r up now: 1 with its counts now, home
 * and new ones and the predicted ratio of its step new/now (better by
 * the least gain a move needs), 0 when none (not movable, too soon after
 * its last move, no better partition). */
int resihp__coord_repart_plan(resihp__coord_t *c, int r, int *cur, int *home,
                              int *out, double *ratio);
/* No replica expected, joining or catching up: one change at a time. */
int resihp__coord_quiet(const resihp__coord_t *c);

/* coord_decide.c: one decision for a slow member. At a step boundary
 * (before the next GO): for the members that are slow and whose slowness
 * no swap or move answered yet, absorb, a move of its layers and a swap
 * for a spare are compared by the time each saves over the steps left,
 * less its switch cost; the best is carried out (one change a boundary):
 * the replica to swap is returned (-1: none), a move is left in decide_r
 * for resihp__coord_repart_boundary. */
int resihp__coord_decide(resihp__coord_t *c);
/* A switch's cost (s): the mean of those measured in this job (*measured
 * 1); for a swap none is yet, the mean launch of the job's steps when the
 * launcher gave them (*measured 2); else the configured default (0). */
double resihp__coord_switch_cost(const resihp__coord_t *c, int kind,
                                 int *measured);
/* What *measured of resihp__coord_switch_cost says: "measured",
 * "launches" or "default". */
const char *resihp__coord_cost_source(int measured);
/* A move of replica r's layers or its swap starts now: time it. */
void resihp__coord_time_move(resihp__coord_t *c, int r);
void resihp__coord_time_swap(resihp__coord_t *c, int r);
/* After steps committed: the switches' costs and the chosen action's
 * gain, once they can be measured. */
void resihp__coord_decide_commit(resihp__coord_t *c);
/* "absorb", "repartition", "swap". */
const char *resihp__decide_name(int kind);
/* GO: " moved=R" when the epoch moves replica R's layers. */
void resihp__coord_put_moved(const resihp__coord_t *c, resihp__wire_buf_t *b);
/* The scale of rank's detector samples: its declared share of the layers
 * over its share now (1 unless its replica's layers moved). */
double resihp__coord_repart_scale(const resihp__coord_t *c, int rank);

/* coord_spares.c */
void resihp__coord_on_spare(resihp__coord_t *c, int k, const char *msg);

/* coord_save.c: at P_BARRIER, 1 while a save holds the boundary (it asks
 * a replica when need be); SAVED from replica r. */
int resihp__coord_save_due(resihp__coord_t *c);
/* The next boundary after step where --save-every saves (a free run ends
 * there). */
long resihp__coord_next_save(const resihp__coord_t *c, long step);
void resihp__coord_on_saved(resihp__coord_t *c, int k, int r, const char *msg);

/* coord_snapshot.c: state changed (mirror before the next send or ledger
 * line); mirror now if it did. */
#define resihp__coord_dirty(c) ((c)->dirty = 1)
/* Send what stmt sends without mirroring first: an answer said again
 * (it follows from a state already mirrored), a WELCOME (a replica the
 * restored coordinator does not know comes back as a joiner), the answer
 * of a decided round to a late reporter. The state stays dirty for the
 * next send. */
#define resihp__coord_again(c, stmt)                                           \
  do {                                                                         \
    (c)->again++;                                                              \
    stmt;                                                                      \
    (c)->again--;                                                              \
  } while (0)
void resihp__coord_mirror_if(resihp__coord_t *c);

/* coord_schedule.c: the ledger lines of steps [from, to) (after the
 * mirror), and the last START again to member r. */
void resihp__coord_write_ledger(resihp__coord_t *c, long from, long to);
void resihp__coord_send_start(resihp__coord_t *c, int r);
/* Index the START just made or restored (start_mbs, start_off,
 * start_joiners). 0 or RESIHP_ENOMEM. */
int resihp__coord_index_start(resihp__coord_t *c);
/* coord_members.c: replica r's GO of the epoch being set up again, with
 * the whole list. */
void resihp__coord_send_go_whole(resihp__coord_t *c, int r);

/* coord_protocol.c; and the coordinator's addresses to replica r, if
 * any were set */
void resihp__coord_send_coords(resihp__coord_t *c, int r);
void resihp__coord_refuse(resihp__coord_t *c, int k, const char *reason,
                          int hangup, const char *msg);
void resihp__coord_on_line(resihp__coord_t *c, int k, const char *msg);

/* The replicas' burn-in reference (their median, probe/burnin.h) into
 * *ref; the number of replicas it comes from (0: none yet). O(R). */
int resihp__coord_burnin_ref(const resihp__coord_t *c, resihp__burnin_t *ref);

#endif
