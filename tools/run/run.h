/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run's parts (tools/run/): the launcher's state, which every part
 * shares (one launcher per process: the state is one global, g), and what
 * each part offers the others. main.c has the whole picture. */
#ifndef RESIHP_TOOLS_RUN_H
#define RESIHP_TOOLS_RUN_H

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/gate.h"
#include "../../libresihp/control/keeper.h"
#include "../../libresihp/control/spare_agent.h"
#include "../../libresihp/control/standby.h"
#include "../../libresihp/recovery/inject.h"
#include "../../libresihp/recovery/job_save.h"
#include "../../libresihp/transport/mesh.h"
#include "cmd.h"
#include "shrink_rec.h"
#include "verdict.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>

/* Nodes of the allocation: 100K GPUs are at most this many nodes. */
#define MAXN 131072
#define MAXR RESIHP__COORD_MAX_REPLICAS

/* Exit codes, documented in resihp-run(1). */
enum {
  EXIT_OK = 0,
  EXIT_USAGE = 1,
  EXIT_LOST = 2,
  EXIT_DISAGREE = 3,
  EXIT_SIGNAL = 4,   /* a second SIGINT/SIGTERM: stopped at once */
  EXIT_STOPPED = 5,  /* SIGINT/SIGTERM: stopped at a step boundary */
  EXIT_PROGRAM = 6,  /* the program could not start or left before joining,
                       or stopped the run (resihp_job_abort) */
  EXIT_RESUMABLE = 7 /* SIGINT/SIGTERM: stopped at a step boundary with a
                       resumable state in --state-dir (resihp-run --resume) */
};

/* node_t.bad: a node given out again (NODE_OK), or not: it failed
 * (NODE_BAD, counted in nbad) or its replica was swapped out for being
 * slow there (NODE_SLOW). */
enum { NODE_OK = 0, NODE_BAD = 1, NODE_SLOW = 2 };

typedef struct {
  char name[64];
  int bad;
  int owner; /* replica using it, -1 free */
  /* spare check step in flight: its srun, and the node's registrations
   * with the coordinator when it started */
  pid_t check;
  long check_regs;
  int gate; /* the check's gate until recorded (gate.h), else -1 */
  int suspect; /* said so: its burn-in was slow or failed (events.c) */
  long suspect_regs; /* its registrations when last said suspect */
  int slurm_down; /* slurmctld's last answer about it said DOWN (verdict.h) */
} node_t;

/* replica_t.why of a replica that failed when no healthy spare was left */
#define WHY_NO_SPARE "no healthy spare was left"

typedef struct {
  pid_t pid; /* srun, 0 when none */
  int nodes[64], nnodes;
  /* the failed step's nodes, its lost ranks and the wait for Slurm's
   * verdict: what a shrink in place goes on with (shrink_rec.h) */
  resihp__run_shrink_t sh;
  int64_t t_launch, kill_at;
  int connected; /* its rank has reached the coordinator */
  int relaunch;  /* a replacement is wanted */
  int tries;
  int launches;
  int given_up;
  /* its step ended before its rank joined: its nodes are being checked to
   * tell a broken node from a program that cannot run; the srun status */
  int diagnosing;
  /* its replacement had the suspect spares checked again (once per
   * replacement: spares.c, recheck_suspects) */
  int suspects_rechecked;
  int early_status;
  /* why it was given up while the others go on (the summary and the
   * progress lines; not in the launcher's record) */
  char why[160];
  /* its step's srun status when it ended on its own after its rank had
   * reported its result (FINISH), 0 if it exited 0 or did not end so:
   * the summary warns */
  int done_status;
  /* its injected kill-node's command while it runs (0: none) */
  pid_t kill_cmd;
  /* its srun waits at this gate until its pid is in the keeper's record
   * (gate.h): -1 when none */
  int gate;
} replica_t;

struct run {
  int R, S, K;
  int ranks; /* ranks per replica (shards); 0: one per node */
  /* the open-files limit this process was given: its children get it
   * back (raise_nofile) */
  struct rlimit nofile0;
  int nofile_raised;
  /* children waiting at their gate (open_gates); the test hook
   * RESIHP_TEST_KILL_PRIMARY: the batch of gates at which the first
   * primary SIGKILLs itself (0: none), after its record or before */
  int ngates, gate_batches, kill_at_batch, kill_after_record;
  const char *inject;
  resihp__cmd_t kill_cmd; /* n == 0: none */
  const char *mpi;
  const char *coord_host;
  int port;
  char secret_file[4096];
  int own_secret;
  int secret_fd; /* held while this process runs (secret.h), or -1 */
  int launch_timeout_s;
  int silence_ms;
  int quiet;
  int no_job_comment; /* --no-job-comment */
  char **prog;
  char jobid[64];
  node_t nodes[MAXN];
  int nnodes;
  replica_t *reps; /* R of them, allocated once R is known */
  resihp__inject_t inj[RESIHP__INJECT_MAX];
  int ninj;
  int fired[RESIHP__INJECT_MAX];
  resihp__coord_t *coord;
  char coord_ep[300];
  int nbad, nreplacements;
  int no_spare_check;
  int no_burn_in; /* --no-burn-in: spares are promoted on their probe alone */
  int recheck_s;
  char self[4096]; /* this program, run as the spare agent */
  const char *ledger;
  const char *events, *metrics; /* --events, --metrics (record.h) */
  const char *report;           /* --report: resihp-report's output */
  resihp__record_t *record;
  int hold;             /* --wait-for-replacements */
  int lockstep;         /* --lockstep */
  int stopping;         /* stop asked at the next step boundary */
  int program_failed;   /* the program, not a node, failed to start */
  int joined;           /* a replica's rank has joined the coordinator */
  int ending;           /* the launcher kills the steps left (end_steps) */
  int aborted;          /* a replica stopped the run (ABORT) */
  char prog_path[4096]; /* PROGRAM as found in PATH */
  /* fail-slow: how microbatches are spread (resihp_assign_mode_t), how long
   * a swap for a spare takes (< 0: never swap), progress every N s */
  int assign;
  double swap_cost_s;
  double burnin_ratio; /* --burn-in-ratio (0: RESIHP__BURNIN_MAX_RATIO) */
  int progress_s;
  int64_t next_progress;
  long progress_step;
  /* the resumable state: --state-dir (absolute), --save-every, --resume
   * (its meta: the step this run starts from); the last state saved
   * (-1: none) and the two step directories kept; a save given up by a
   * second signal; the resumed program's shape checked against the meta */
  char state_dir[4096];
  long save_every;
  const char *resume_arg;
  resihp__save_meta_t resume;
  int resuming;
  char resume_step_dir[4200];
  long saved_step;
  long kept[2];
  int save_cancelled;
  long saving_said; /* the step whose save was announced */
  int shape_checked;
  int resume_mismatch;
  /* failover (keeper.h): the hang bound, when the job started, whether
   * the launcher's own state changed since the last record, the keeper's
   * handle in the primary, the coordinator's listening socket (the
   * keeper's) and its options */
  int hang_ms;
  int64_t t0;
  int ldirty;
  resihp__keeper_t *keeper;
  resihp__coord_opts_t co;
  char host[256];
  /* the standby on another node (standby.h, slurm.h): wanted
   * (--standby auto|none), its output file; this process as a standby
   * (--standby-of the primary's feed, --primary-node); the feed's socket
   * (the keeper's, like the coordinator's) and address; in the primary,
   * the feed thread, the standby's srun, node and launches, the standby
   * the feed has, the coordinator's addresses the ranks get; whether this
   * primary took over from a node that was lost; this node; the command
   * line (the standby's); SlurmdTimeout */
  int standby_opt, standby_on;
  const char *standby_out;
  const char *standby_of, *primary_node;
  resihp__wire_listener_t feed_lis;
  char feed_ep[300];
  resihp__feed_t *feed;
  pid_t standby_pid;
  int standby_node, standby_tries;
  /* the credential handed to the standby launched last (its step's
   * environment, RESIHP_STANDBY_TOKEN): only it may follow the feed;
   * in a standby, its own */
  char standby_token[40];
  unsigned standby_gen;
  char standby_step[64];
  /* since when the standby started does not follow the feed (0: it
   * does), and whether it ever did */
  int64_t standby_lost_ms;
  int standby_seen;
  char coords[600];
  int took_over;
  /* a standby: the primary it followed died after loss_lo_ms and before
   * loss_hi_ms (standby_follow; resihp__coord_set_loss) */
  int64_t loss_lo_ms, loss_hi_ms;
  /* the early takeover (control/vouch.h, vouching.c, lease.c): this
   * standby took over on its replicas' word (vouched members of how
   * many; who vouched, R flags), not on Slurm's verdict; a standby has
   * followed this job's primary (from then on the primary decides only
   * under its lease); when this primary started and last held it */
  int vouched, vouch_count, vouch_members;
  char *vouchers;
  int lease_on;
  int64_t prim_start_ms, lease_ok_ms;
  char node_self[64];
  int argc0;
  char **argv0;
  int slurmd_timeout_s;
  /* Slurm's verdict on the nodes of replicas waiting to shrink (or, in a
   * standby, on the primary's node), and the replica the node list starts
   * from (a list that does not fit in one query) */
  resihp__verdict_t verdict;
  int verdict_from;
  int64_t clock_delta; /* the old primary's host's clock to ours (ms) */
};
extern struct run g;

/* The first SIGINT/SIGTERM stops the training at a step boundary, a
 * second one at once (on_signal counts them). */
extern volatile sig_atomic_t got_signal, nsignals;
void on_signal(int sig);
/* Commands run in the background (launch.c: spawn_argv). */
extern pid_t helpers[256];

/* "resihp-run: " and a line on stderr, unless --quiet. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* launch.c */
void child_setup(int quiet_stdio);
pid_t spawn_argv(char *const argv1[], char *const argv2[], int quiet);
int pick_nodes(int *out, int k, int initial);
int spares_left(void);
int launch(int r);
void open_gates(void);
/* Replica r's nodes freed, marked how (NODE_OK, NODE_BAD, NODE_SLOW). */
void release_nodes(int r, int how);
/* The name of replica r's steps (srun --job-name; static storage). */
const char *step_name(int r);
void cancel_step(long jobid, long stepid, const char *name);
void reap(void);
void verdict_tick(void);
void tick(void);

/* spares.c */
void check_spares(void);
int recheck_suspects(void);
void diagnose(int r, int st);
void check_done(int i, int st);
void check_unopened(int i);

/* report.c: --report (resihp-report at the end) */
int report_check(void);
void make_report(resihp__keeper_t *kp);

/* comment.c: the job's Comment in Slurm (jobnote.h) */
void jobnote_start(void);
/* replica r failed on node (why), or was swapped for being slow (swap) */
void jobnote_failure(int r, const char *node, const char *why, int swap);
/* something else the Comment shows changed (a replica dropped) */
void jobnote_changed(void);
/* the main loop: an update in the background when something changed */
void jobnote_tick(void);
/* ended(): pid was reaped with status st */
void jobnote_ended(pid_t pid, int st);
/* the outcome, waited for (bounded) */
void jobnote_final(const char *outcome, resihp__keeper_t *kp);

/* events.c */
void on_failed(void *ud, int r, const char *node, long jobid, long stepid,
               const char *why);
void on_swapped(void *ud, int r, const char *node, long jobid, long stepid,
                const char *why);
void on_health(void *ud, int r, int shard, const char *state, double factor,
               long step);
int spare_free(void *ud);
int on_fault(void *ud, int r, const char *kind, const char *node, long step);
void on_spare(void *ud, const char *node, int state, const char *summary);

/* save.c */
void on_saved(void *ud, long step, int r, int ok);
int check_resume(void);
long job_steps(void);
void check_resumed_shape(void);

/* record.c */
void on_mirror(void *ud, const char *snap, size_t len);
/* The launcher's part of the record (its lines, without the header). */
void launcher_state(resihp__wire_buf_t *b);
int restore_launcher(const char *rec, size_t len, const char **coord,
                     size_t *clen);
long ledger_cut(FILE *f);
/* The coordinator's part of a record (after the launcher's). 0 or
 * RESIHP_EPROTO. */
int record_coord_part(const char *rec, size_t len, const char **coord,
                      size_t *clen);

/* standby.c */
void update_coords(void);
void launch_standby(void);
void check_standby(void);
void fail_lost_replicas(void);
int standby_follow(const uint8_t *secret, size_t slen, char **rec, size_t *len);
void end_job(void);

/* vouching.c: the standby hears the replicas that lost the primary */
int vouching_start(const uint8_t *secret, size_t slen);
void vouching_heard(void);
void vouching_step(int wait_ms, const char *rec, size_t len);
/* 1 to take over now (*count of *members vouched; g.vouchers set) */
int vouching_ready(int64_t lost_ms, int *count, int *members);
void vouching_end(void);

/* lease.c: the primary decides only under its lease */
int lease_held(void);
/* In the primary's loop: 1 to go on deciding, 0 to only listen this
 * round; steps down (does not return) past the bound */
int lease_check(resihp__keeper_t *kp);
int may_decide(void *ud); /* the coordinator's may_decide */
void step_down(resihp__keeper_t *kp);

/* primary.c */
int primary_main(void *ud, const char *snap, size_t snaplen,
                 resihp__keeper_t *kp);

#endif
