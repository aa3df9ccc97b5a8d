/* SPDX-License-Identifier: BSD-3-Clause */
/* The job coordinator: membership epochs, heartbeats, the replica table,
 * the microbatch ledger and catch-up sources. resihp-run embeds it and
 * drives it from its main loop (resihp__coord_poll); it owns no thread.
 * The code is a file per idea, coord_*.c (the map: coord_internal.h).
 *
 * Protocol (text lines, see wire.h; connections authenticated with the
 * per-job secret). A replica's rank 0 says HELLO (replica, endpoints,
 * node, Slurm step, microbatches, steps, lsize=K ranks and shape=D, a
 * digest of its shards' state sizes) and gets WELCOME hb=H cred=C (C: a
 * random credential of its own, which a reconnect must say); K must be
 * the job's (the first HELLO sets it), D the same as that of the replicas
 * holding the same partition of the layers (the job's, the first HELLO's,
 * when it declared none), compared at the process's first BEGIN, where
 * its partition is known (coord_layers.c). With K ranks, ep= and sep= list
 * one address per rank, "a/b/..." in shard order. The leader then says HB
 * every H ms, and the coordinator says HB to it too
 * (resihp__coord_heartbeats). Each step:
 *
 *   rank  -> BEGIN step=s [lay=L[:c1:...]]  (at the step boundary;
 *            lay: the replica's partition of the model's L layers, its
 *            K-1 cut points, once its program declared them
 *            (resihp_job_set_layers): kept as the replica's, mirrored,
 *            told to its next process in WELCOME lay=; coord_layers.c)
 *   coord -> GO step=s epoch=e new=0|1 [members=r@ep,...]  (ep: the list)
 *            once every member has sent BEGIN s; replicas waiting to join
 *            are admitted here, which makes a new epoch (new=1), and so
 *            does a RESYNC (everyone makes its group again). new=0 carries
 *            no list. The whole list goes only to a member that holds no
 *            list of the last epoch (a joiner, a replacement, one that said
 *            RESYNC); the others get its change instead of members=:
 *            base=B n=N gone=r:r add=r@ep,...  (recovery/job_members.h)
 *            With layers declared, a new epoch's GO says lay=L and, for
 *            K > 1, lparts=D0,D1@r:r,... (the members' distinct
 *            partitions, D0 every unlisted member's: layer_groups.h)
 *   rank  -> READY epoch=e | RESYNC epoch=e  (only when new=1: after
 *            re-creating the communicator, or failing to)
 *   coord -> START step=s epoch=e mbs=a:b:c [serve=r.k@ep,...] [catchup=1]
 *            (after every READY; a RESYNC or a death makes a new GO;
 *            serve: this replica's rank k sends shard k to replica r, whose
 *            rank k listens at ep; a joiner's K shards are spread over the
 *            healthy members)
 *   rank  -> RECOVER step=s cepoch=c gone=r:r   (all-reduce failed; gone
 *            is the step's members missing from any of the K shard groups
 *            after resihp_comm_shrink, the view is the others: a report
 *            is as long as the failure, not the job; c counts the
 *            recoveries since the groups were made. view=r:r:r, the view
 *            itself, is the older form, still read)
 *   coord -> REASSIGN step=s cepoch=c extra=a:b  (the microbatches of
 *            replicas outside the view, spread over the view; the same
 *            answer for every member of the same (s, c))
 *   (the next BEGIN s+1 commits step s in the ledger)
 *   coord -> DONE instead of GO when s reaches the number of steps.
 *
 * Free-running. START may end with run=1 when the coordinator needs no
 * boundary for a while (nobody joins or catches up, no stop, not the last
 * step, an assignment the members can make: equal counts or counts by
 * speed with every replica healthy, or by predicted cost when this step
 * was, with a warm predictor and the step's workloads). The members then
 * go on step after step with the same group, without BEGIN, GO or START,
 * and agree at the end of every step, over their own all-reduce, whether
 * to go on (recovery/job_step.c). By cost, START also carries the plan
 * (cby=r:r:r cslow=X:X:X cmod=X:...: the contributors, their multipliers
 * and each shard's reference model, doubles as the 16 hex digits of their
 * bits, control/costplan.c; "cby=list" when the contributors are the
 * epoch's member list and "cslow=1" when no one is slow, as in every free
 * run, so that N STARTs are O(N) bytes), every rank assigns each next step from
 * its data loader with it, and PROG, RECOVER and the BEGIN that ends the run
 * carry the owners of the run's steps (ofrom=a own=r:r:..., M a step:
 * coord_schedule.c); a rank that cannot assign a step ends the run.
 * With --save-every, run=1 comes with until=T, the next boundary where a
 * save is due: the members end the run there by themselves (no HOLD
 * needed). Meanwhile:
 *
 *   rank  -> PROG step=s   (from the leader of the first member, at most
 *            about once a second: every step before s is committed)
 *   rank  -> PERF ...      (every rank, the samples of the steps they
 *            agreed on, about one a second)
 *   coord -> HOLD          (once per run: a replica waits to join, a
 *            replacement is expected, a stop, a member failed or turned
 *            slow; the members end the run at the end of the step in
 *            which a leader heard it)
 *
 * The run ends with BEGIN s as above (every member at the same s: the
 * steps before s commit with the run's owners), or within a step with
 * RECOVER step=s, which commits the steps before s and is then handled as
 * in any step. FAULT step=s says the steps before s are committed too.
 *
 * Also: HB both ways (liveness), FAULT kind=... (an injected fault is
 * about to fire), CATCHUP_FAILED (a replacement lost its source and waits
 * to be admitted again), FINISH result=... at the end, and for replicas
 * of several ranks SUBHELLO replica= jobid= stepid= from a rank other than
 * the step's rank 0, answered with LEADER ep=... once that rank 0 has said
 * LEP replica= jobid= stepid= lep=... (its address for the step's other
 * ranks; before HELLO, which needs their addresses) or HELLO with lep=.
 *
 * A rank whose program met an error that no spare can fix (a state it
 * cannot load, replicas whose parameters differ: the same program would
 * fail the same way on any node) says ABORT reason=TEXT (printable ASCII,
 * spaces allowed, to the end of the line) and leaves. The coordinator
 * does not report that replica failed (no replacement), stops the run as
 * resihp__coord_stop does (the others commit the step in progress, taking
 * over the leaver's microbatches if need be, then get DONE), answers its
 * connection NO reason=aborted and closes it. The first reason is kept
 * (resihp__coord_aborted); a malformed one is refused and replaced by a
 * placeholder, but the stop stands.
 *
 * Failover (coord_snapshot.c). The coordinator mirrors its state (on_mirror)
 * before anything that follows from a change goes out, and a keeper that
 * outlives it starts a successor from that record (resihp__coord_restore).
 * A leader that lost its link reconnects with its HELLO line plus
 * ` again=1 epoch=E step=S cred=C`; the same process of a known replica
 * (replica, jobid, stepid, ep and sep as before, and the credential its
 * first WELCOME gave it: the ids alone are no proof, every GO lists ep)
 * gets `WELCOME replica=R step=S hb=H again=1` (and HOLD again in a free
 * run that must end); the ids without the credential are refused
 * (NO reason=bad-credential) and the member's link stays; anything else
 * is an ordinary HELLO. A restored coordinator fails a member that has not
 * come back within silence_ms plus two steps
 * (resihp__coord_reconnect_within). Requests said again get the answer they
 * missed, always (not only after a failover): BEGIN while an epoch is set
 * up -> its GO (whole list); READY/RESYNC of the epoch while the step runs
 * -> the same START; BEGIN of a step that runs (after GO new=0) -> GO
 * new=0 and START; BEGIN from the replica asked to save -> SAVE; BEGIN at
 * the end -> DONE; RECOVER of a decided round -> the same REASSIGN;
 * SAVED and FINISH again are harmless.
 *
 * A leader whose link to another rank k of its replica closes without
 * that rank's BYE (what a rank leaving on its own says first) or RESULT
 * says FAULT kind=lost rank=k (1 <= k < its ranks): the coordinator keeps
 * it for the launcher (resihp__coord_lost_ranks) and fails a replica that
 * is not a member yet (catching up) at once; a rank out of range is
 * refused.
 *
 * A rank whose node failed a periodic health probe (a kind=periodic block
 * with healthy=0 in its RESIHP_PROBE_RESULTS file) says, at its next step
 * boundary instead of BEGIN, FAULT kind=probe step=s node=N summary=TEXT
 * (summary last: free text to the end of the line) and leaves; the
 * coordinator fails the replica at once, like any other failure.
 *
 * Spare registry. The spare check step on a spare node runs the spare
 * agent (resihp-run --spare-agent), which reads the probe verdict the
 * plugin handed it and, on a connection of its own authenticated like a
 * rank's, says SPARE node=N status=pass|fail summary=TEXT; the coordinator
 * records it and answers SPARE_OK state=NAME (or NO reason=...). One
 * registration per node: a spare of several nodes is several spare nodes.
 * The launcher adds the spare nodes it owns, re-runs the checks
 * periodically, marks a spare that did not register in time unreachable
 * and promotes (hands to a replacement) only registered-healthy spares.
 * A spare found bad stays bad for the rest of the job, like a replica's
 * node that failed.
 *
 * Burn-in (probe/burnin.h). A spare whose probe passed says
 * burnin=BYTES:COMPUTE_US:ALLREDUCE_US (or burnin=fail) before its summary:
 * its CPU burn-in. The replicas' ranks say the same in their first HELLO
 * (the launcher asks their first launch for it); their median is the
 * reference. A spare much slower than the reference, or whose burn-in
 * failed, is suspect: not promoted, not bad either - its next check
 * (--spare-recheck) burns it in again and may make it healthy. A spare
 * that registered before any replica had joined is judged when the
 * launcher next looks for a replacement (resihp__coord_spare_judge).
 */
#ifndef RESIHP_CONTROL_COORDINATOR_H
#define RESIHP_CONTROL_COORDINATOR_H

#include "record.h"
#include "wire.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Not a table size: every per-replica table is sized from the job's
 * replica count (resihp__coord_opts_t.replicas). This bound only
 * validates that count (and so every replica id a peer sends), far above
 * any machine: 100K GPUs are at most 100K replicas. */
#define RESIHP__COORD_MAX_REPLICAS 1000000
#define RESIHP__COORD_HELLO_MS 10000

typedef struct resihp__coord resihp__coord_t;

typedef struct {
  int replicas;
  /* a spare whose burn-in is more than this many times slower than the
   * replicas' is suspect (0: RESIHP__BURNIN_MAX_RATIO) */
  double burnin_ratio;
  const char *bind_host; /* NULL: any */
  int port;              /* 0: ephemeral */
  const uint8_t *secret;
  size_t secret_len;
  int silence_ms; /* a replica silent this long has failed */
  /* an authenticated connection that has not said who it is (HELLO,
   * SUBHELLO, LEP) this long after its handshake is closed (0:
   * RESIHP__COORD_HELLO_MS) */
  int hello_ms;
  /* Whether this coordinator may fail a replica now (NULL: always): a
   * primary that lost its lease (vouch.h) must not, a standby may have
   * taken over; the replica's link is closed instead (it reconnects to
   * whoever coordinates). */
  int (*may_decide)(void *ud);
  /* A replica failed (died, hung, excluded by its peers): the launcher
   * kills its step and starts a replacement. */
  void (*on_failed)(void *ud, int replica, const char *node, long jobid,
                    long stepid, const char *why);
  /* A replica was swapped out for a spare (it was slow, not broken): the
   * launcher ends its step without blaming its node and starts the
   * replacement. NULL: on_failed is called instead. */
  void (*on_swapped)(void *ud, int replica, const char *node, long jobid,
                     long stepid, const char *why);
  /* A spare registered (state is RESIHP__SPARE_*; summary "" if none). */
  void (*on_spare)(void *ud, const char *node, int state, const char *summary);
  /* A rank of replica says an injected fault is about to fire (kind as in
   * inject.h; node and step are the rank's word, not to be trusted). The
   * launcher returns 0 if it injected that fault, else non-zero: the
   * report is then logged and ignored. */
  int (*on_fault)(void *ud, int replica, const char *kind, const char *node,
                  long step);
  void *ud;
  /* If not NULL, every committed step appends one line "STEP r0 r1 ...":
   * the replica that computed each microbatch (the ledger). Not closed. */
  FILE *ledger;
  /* Hold each step boundary while a replacement announced with
   * resihp__coord_expect has not reached it (tests, reproducible runs):
   * the survivors wait for it instead of training on without it. */
  int hold_for_replacements;
  /* Fail-slow adaptation (coord_perf.c). How each step's microbatches are
   * spread (resihp_assign_mode_t: 0 = even, as if nothing were slow). */
  int assign;
  /* A replica's speed changed: state "slow" (factor > 1), "healthy" or
   * "replaced"; shard is the rank that changed it. May be NULL. */
  void (*on_health)(void *ud, int replica, int shard, const char *state,
                    double factor, long step);
  /* Swap a replica that stays slow for a spare when that saves time:
   * swap_cost_s is how long a replica is out for it (< 0: never swap)
   * until a swap of this job was measured (coord_decide.c); spare_free
   * says whether the launcher has a spare now (NULL: never). */
  double swap_cost_s;
  int (*spare_free)(void *ud);
  /* Move layers off a slow rank of a replica whose program can
   * (coord_repart.c) when that saves more than its cost over the steps
   * left: repart_cost_s until a move of this job was measured (0: two
   * recent steps; < 0: never). Of absorbing, a move and a swap, only the
   * one that saves most is done (coord_decide.c). */
  double repart_cost_s;
  /* A slowdown must also have lasted this long (ms of wall time) before a
   * replica is slow (resihp_detector_set_confirm_ms): ranks that share
   * CPUs are slowed in turn for a few steps each, which is no slow device.
   * 0: a few iterations suffice (tests that must not depend on time). */
  unsigned confirm_slow_ms;
  /* 1: never free-running (START never says run=1): every step through
   * the coordinator, as benchmarks compare. */
  int lockstep;
  /* Saves of the resumable state (coord_save.c). start_step: the first
   * step (a resumed run; the replicas load that step's state from disk).
   * save_on_stop: a stop (resihp__coord_stop) saves first; save_every N:
   * every N-th step boundary saves, training going on. on_saved reports
   * each save: ok=1 (replica r's K ranks wrote it) or 0 (none could). */
  long start_step;
  int save_on_stop;
  long save_every;
  void (*on_saved)(void *ud, long step, int replica, int ok);
  /* The job's events and metrics (record.h; NULL: none): failures,
   * admissions, recoveries with their duration, swaps, how the run
   * ended. Owned by the caller. */
  resihp__record_t *record;
  /* Failover (coord_snapshot.c). listener: accept on these sockets (the
   * keeper's port, not closed by destroy) instead of binding one for
   * `replicas` clients (NULL). */
  const resihp__wire_listener_t *listener;
  /* Write-ahead mirror of the state (text; NULL: none): called with the
   * snapshot (resihp__coord_snapshot) before any message that follows
   * from a change of state goes out and before a ledger line is written,
   * only when something changed since the last call. */
  void (*on_mirror)(void *ud, const char *snap, size_t len);
} resihp__coord_opts_t;

enum {
  RESIHP__COORD_RUNNING = 0,
  RESIHP__COORD_DONE = 1,
  RESIHP__COORD_LOST = 2
};

int resihp__coord_create(const resihp__coord_opts_t *o, resihp__coord_t **out);
void resihp__coord_destroy(resihp__coord_t *c);
int resihp__coord_port(const resihp__coord_t *c);
/* One round of the event loop: waits at most timeout_ms. */
int resihp__coord_poll(resihp__coord_t *c, int timeout_ms);
int resihp__coord_state(const resihp__coord_t *c);
long resihp__coord_step(const resihp__coord_t *c);
uint32_t resihp__coord_epoch(const resihp__coord_t *c);
/* Replicas currently in the group. */
int resihp__coord_members(const resihp__coord_t *c);
/* 1 while replica has a live connection (joined or joining). */
int resihp__coord_connected(const resihp__coord_t *c, int replica);
/* Replica's current (or last) process as its leader rank said at HELLO:
 * its pid on node (0: not said, or a restored coordinator's), its Slurm
 * step (-1: none). Strings are the coordinator's; -1 out of range. */
int resihp__coord_replica_proc(const resihp__coord_t *c, int replica,
                               long *pid, const char **node, long *jobid,
                               long *stepid);
/* End the training at the next step boundary: the step in progress
 * commits, the next one does not start, every rank gets DONE and reports
 * its result; the state becomes RESIHP__COORD_DONE once they have. */
void resihp__coord_stop(resihp__coord_t *c);
/* A coordinator restored on another host (a standby's takeover): every
 * time it holds moves by delta_ms, from the old host's monotonic clock to
 * this one's (0 stays 0: not a time). */
void resihp__coord_shift_times(resihp__coord_t *c, int64_t delta_ms);
/* A restored coordinator waits ms (from now) for every member to
 * reconnect before it fails those that did not (the default, and the
 * least, is silence_ms plus two of the last step's time: in a free run a
 * member looks at its link at step boundaries only): a standby on another
 * address is found by the replicas only on their next try at it. Waits
 * are on the time the coordinator spent listening, not working. */
void resihp__coord_reconnect_within(resihp__coord_t *c, int ms);
/* The coordinator's addresses, "ep[/ep...]" (the primary's, then a
 * standby's on another node; NULL or "": none said): every leader is told
 * (COORDS eps=...) now and after each WELCOME, and dials them in turn
 * when its link fails (recovery/job_coords.c). */
void resihp__coord_set_coords(resihp__coord_t *c, const char *eps);
/* The replica that stopped the run with ABORT (the first, if several
 * did) or -1; its reason is copied into why (n bytes; why may be NULL). */
int resihp__coord_aborted(const resihp__coord_t *c, char *why, size_t n);
/* The injected fault replica announced has now taken effect (its
 * kill-node command returned): its detection is timed from now, not from
 * the announcement (the command's own time is no detection time); a
 * failure already detected while the command ran gets 0. */
void resihp__coord_fault_landed(resihp__coord_t *c, int replica);
/* 1 once replica's rank has reported its result (FINISH). */
int resihp__coord_finished(const resihp__coord_t *c, int replica);
/* 1 if replica's last HELLO was refused for its program's configuration
 * (not the same training as the job's, too many microbatches, ...): a
 * step that ends before joining after that is the program's fault, not
 * its node's. The reason is copied into why (n bytes; why may be NULL). */
int resihp__coord_refused(const resihp__coord_t *c, int replica, char *why,
                          size_t n);
/* A step of the job took s seconds from its launch to its leader's join.
 * A launcher whose swap cost was not configured says so for every step
 * it starts: until a swap is measured, a swap is priced at the mean of
 * these (the replacement's launch, which is most of a swap: its catch-up
 * is not in it) instead of the swap_cost_s default. */
void resihp__coord_note_launch(resihp__coord_t *c, double s);
/* The launcher has started (on=1) a replacement of replica, or no longer
 * waits for one (on=0); see hold_for_replacements. */
void resihp__coord_expect(resihp__coord_t *c, int replica, int on);
/* The heartbeat periods of a job of that many replicas with that silence
 * bound: each leader's (told in WELCOME) and the coordinator's, in ms. */
void resihp__coord_heartbeats(int replicas, int silence_ms, int *leader_ms,
                              int *coord_ms);
/* A member or joiner the launcher knows is gone (a node of its step that
 * Slurm declared DOWN): failed now, as a lost connection would be, rather
 * than when a restored coordinator's reconnect wait ends; a replacement is
 * welcome. Anything else (a replica already gone or never launched): no
 * effect. */
void resihp__coord_fail_lost(resihp__coord_t *c, int replica, const char *why);
/* A standby's restored coordinator: the lost primary died after lo_ms and
 * before hi_ms (resihp__now_ms clock: its feed's last possible sign of
 * life and the moment the standby noticed the silence). The summary then
 * bounds the stall of the failures that went with it. */
void resihp__coord_set_loss(resihp__coord_t *c, int64_t lo_ms, int64_t hi_ms);
/* Forget a replica that never joined or was given up (no replacement). */
void resihp__coord_mark_failed(resihp__coord_t *c, int replica,
                               const char *why);
/* Shrink member replica, which lost the ranks whose bits dead holds (its
 * numbering now) and has no spare left (coord_shrink.c, issue 32): from
 * the next step boundary its survivors hold the planner's partition of
 * the layers over them, renumbered in their order (GO shrunk=r:k,...).
 * 0; or, with nothing changed, RESIHP_EINVAL (no survivor, nobody dead, a
 * rank it does not have, fewer layers than survivors), RESIHP_ESTATE (not
 * a member, no layers, or its program cannot move layers and catch them
 * up by layer: BEGIN lmove=1 lst=1) or RESIHP_EBUSY (another shrink waits
 * for the boundary): then fail it as before. */
int resihp__coord_shrink(resihp__coord_t *c, int replica,
                         unsigned long long dead);
/* Shrink replica, which failed (it left, or resihp__coord_fail_*) having
 * lost the ranks whose bits dead holds, for a relaunch in place (the
 * shrink's other road, coord_shrink.c 11): it now holds the planner's
 * partition of the layers over its survivors, and its next process is
 * one of as many ranks (HELLO lsize=K'; the survivors in their order),
 * which catches its layers up by layer from the members. 0; or, with
 * nothing changed, RESIHP_EINVAL (as resihp__coord_shrink) or
 * RESIHP_ESTATE (not failed, no layers, its program cannot move layers
 * and catch them up by layer, or the run ends): then give it up. */
int resihp__coord_shrink_in_place(resihp__coord_t *c, int replica,
                                  unsigned long long dead);
/* Whether replica, which failed, could shrink in place once the launcher
 * knows which of its ranks died (its last rank taken for one): 0, or why
 * not (as resihp__coord_shrink_in_place). Nothing changes. */
int resihp__coord_shrink_able(const resihp__coord_t *c, int replica);
/* The ranks of replica's present process that its leader said it lost
 * (FAULT kind=lost rank=k: the rank's link closed without a word, its
 * node perhaps alive), as bits of its present numbering; 0 when none was
 * said (or replica is out of range). */
unsigned long long resihp__coord_lost_ranks(const resihp__coord_t *c,
                                            int replica);
/* Spare states (names: resihp__spare_state_name). */
enum {
  RESIHP__SPARE_CHECKING = 0, /* added, never registered */
  RESIHP__SPARE_HEALTHY,      /* registered, probe passed */
  RESIHP__SPARE_FAILED_PROBE, /* registered, probe failed */
  RESIHP__SPARE_UNREACHABLE,  /* its check step ended without registering */
  RESIHP__SPARE_PROMOTED,     /* handed to a replica */
  RESIHP__SPARE_SUSPECT       /* probe passed, burn-in slow or failed */
};
#define RESIHP__COORD_MAX_SPARES 4096

const char *resihp__spare_state_name(int state);
/* Make node a known spare (CHECKING); no-op if it is known. 0 or
 * RESIHP_ENOSPC. */
int resihp__coord_spare_add(resihp__coord_t *c, const char *node);
/* State of node (RESIHP__SPARE_CHECKING if unknown); *registrations (may be
 * NULL) counts the registrations received from it. */
int resihp__coord_spare_state(const resihp__coord_t *c, const char *node,
                              long *registrations);
/* The launcher's verdicts: RESIHP__SPARE_UNREACHABLE (why says how) or
 * RESIHP__SPARE_PROMOTED (replica gets it). Bad states are kept. */
void resihp__coord_spare_mark(resihp__coord_t *c, const char *node, int state,
                              int replica, const char *why);
/* The state of node once its burn-in is judged against the replicas'
 * (a registered-healthy spare whose burn-in was not judged yet, for want
 * of a reference, may become suspect now). */
int resihp__coord_spare_judge(resihp__coord_t *c, const char *node);
/* 1 if node is suspect for its speed only: its burn-in finished, with
 * right results, but slower than the replicas' (a last resort when no
 * healthy spare is left: see resihp-run's launch). */
int resihp__coord_spare_slow_only(const resihp__coord_t *c, const char *node);
/* What was found wrong with node ("" if nothing; never NULL). */
const char *resihp__coord_spare_summary(const resihp__coord_t *c,
                                        const char *node);
/* The all-reduce size a spare's burn-in should use: the replicas' (their
 * burn-in's), 0 before any said it. */
long resihp__coord_burnin_bytes(const resihp__coord_t *c);

/* A replica's addresses as its HELLO gave them (all-reduce, catch-up: one
 * per rank, "a/b/..."; leader of its other ranks, "" when none). Before
 * its HELLO, only the leader's address when it said LEP (ep and sep "");
 * RESIHP_ENOENT if it said neither. */
int resihp__coord_replica_eps(const resihp__coord_t *c, int replica,
                              const char **ep, const char **sep,
                              const char **lep);

/* For tests and the fuzz target (tests/fuzz/fuzz_coord.c), which drive the
 * real message handler without a handshake: adopt an authenticated
 * connection (w is moved in; returns its index or a negative code), feed
 * one line as if connection k had sent it, and check the coordinator's
 * invariants (NULL if they hold, else what is broken): membership and
 * ledger consistent, and the job lost only when no connected member
 * holding the state is left. */
int resihp__coord_adopt(resihp__coord_t *c, resihp__wire_t *w);
void resihp__coord_feed(resihp__coord_t *c, int k, const char *line);
const char *resihp__coord_check(const resihp__coord_t *c);

/* Final summary (steps, failures with stall and rejoin, throughput, the
 * results the replicas reported). A failure nobody injected is reported
 * with the time between the replica's last sign of life (any line, its
 * heartbeats included) and the detection. Returns 0 if all results
 * agree. */
/* Replica r now: its time multiplier (1: healthy), the microbatches it
 * got in the last step started, and its worst rank's detector state
 * ("healthy", "suspect", "slow", "failed"). -1 for a replica out of range. */
int resihp__coord_replica_speed(const resihp__coord_t *c, int r, double *slow,
                                int *quota, const char **state);

/* seconds_out: the training time (the run's time without what it waited
 * for the coordinator, which the summary shows apart). */
int resihp__coord_summary(const resihp__coord_t *c, FILE *f,
                          double *seconds_out);

/* Protocol lines received and sent so far, heartbeats not counted; timed
 * (may be NULL) gets how many of those received were time-based reports
 * of free runs (PROG, PERF), whose number grows with time, not steps. */
/* Move replica r's layers to counts (K of them) at the next step
 * boundary, whatever the detector says, if its program can
 * (coord_repart.c; tests: the protocol without a slow rank). */
void resihp__coord_repart_force(resihp__coord_t *c, int r, const int *counts);
void resihp__coord_lines(const resihp__coord_t *c, long *rx, long *tx,
                         long *timed);
/* Saves (coord_save.c). The protocol: at a step boundary where a save is
 * due (every member said BEGIN s; before GO or DONE) the coordinator says
 *   coord -> SAVE step=s      to one member replica's leader (relayed to
 *                             its K ranks, which write their shards)
 *   rank  -> SAVED step=s ok=1|0
 * and holds the boundary until then; ok=0 or the replica's failure asks
 * the next member. No path travels: the ranks have theirs from resihp-run.
 * resihp__coord_saving: a save is under way; resihp__coord_save_cancel
 * gives it up (the boundary then goes on without it). */
int resihp__coord_saving(const resihp__coord_t *c);
void resihp__coord_save_cancel(resihp__coord_t *c);
/* The job's shape as the first HELLO set it (0 before any HELLO). */
int resihp__coord_job_shape(const resihp__coord_t *c, int *microbatches,
                            long *steps, int *shards, char shape[20]);
/* Failover (coord_snapshot.c). The state as text (what on_mirror gets);
 * b is appended to. */
int resihp__coord_snapshot(resihp__coord_t *c, resihp__wire_buf_t *b);
/* Call on_mirror now (the launcher's own state changed). */
void resihp__coord_mirror(resihp__coord_t *c);
/* A coordinator that continues from snap (o as for resihp__coord_create;
 * the job's shape comes from snap). ledger_have: the steps the ledger file
 * (o->ledger, opened for appending) already holds since this run began
 * (its complete lines), -1 without a ledger. Every member must reconnect
 * (HELLO ... again=1) within o->silence_ms or is failed. RESIHP_EPROTO
 * for a text that is not a valid snapshot. */
int resihp__coord_restore(const resihp__coord_opts_t *o, const char *snap,
                          size_t len, long ledger_have, resihp__coord_t **out);
/* What a standby checks the replicas' vouches against (vouch.h), from a
 * state record's text: its term, the last membership (members: room for
 * replicas ids) and each replica's credential (creds: replicas entries,
 * "" for none). 0, RESIHP_ENOMEM or RESIHP_EPROTO. */
int resihp__coord_snapshot_voters(const char *snap, size_t len, int replicas,
                                  uint32_t *term, int *members, int *nmembers,
                                  char (*creds)[32 + 1]);
/* The coordinator's term (vouch.h): every WELCOME says it. A standby's
 * takeover sets the record's plus one. */
uint32_t resihp__coord_term(const resihp__coord_t *c);
void resihp__coord_set_term(resihp__coord_t *c, uint32_t term);
/* 1 once a replica said it obeys a newer term than this coordinator's (a
 * HELLO term=T, T > ours): a standby took over; this coordinator fails
 * nobody from then on, and its launcher steps down. */
int resihp__coord_superseded(const resihp__coord_t *c);
/* Members, and how many of them the coordinator heard from within the
 * silence bound (on the monotonic clock; O(members): the primary asks
 * only while its standby is silent): the primary's lease (vouch.h). */
int resihp__coord_heard(const resihp__coord_t *c, int *members);
/* Why the job was lost ("" if it was not). */
const char *resihp__coord_lost_why(const resihp__coord_t *c);

#endif
