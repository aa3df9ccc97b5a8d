/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: the launcher an sbatch script calls.
 *
 *   resihp-run --replicas R [--spares S] [--nodes-per-replica K]
 *              [--inject SPEC] [--kill-node-cmd CMD] -- ./train args
 *
 * It runs the job's coordinator, starts one `srun --resilient ...` job step
 * per data-parallel replica inside the allocation (a dead rank under
 * --mpi=pmix takes its whole step down, so a replica is the unit that
 * fails), keeps the remaining nodes as spares, and when the coordinator
 * declares a replica failed (socket error, silence, or left out by the
 * survivors - never srun's exit code, which Slurm often leaves at 0) it
 * cancels that replica's step, marks its nodes bad and starts a replacement
 * step on spare nodes while the other replicas keep training. See
 * resihp-run(1).
 *
 * Spares. Each spare node runs a short check step, `srun --resilient
 * --resilient-role=spare resihp-run --spare-agent`: the plugin probes the
 * node, and the agent registers it with the coordinator with the probe's
 * verdict (one registration per node, so a spare for a replica of K nodes
 * is K registrations). The check is repeated every --spare-recheck
 * seconds while the job runs, on nodes not in use; a check step that ends
 * without registering makes the spare unreachable. Only spares the
 * coordinator holds as registered-healthy are promoted to replacements;
 * a replacement waits while spares are still being checked.
 *
 * Lifetime. SIGINT/SIGTERM (and SIGHUP) stop the training at the next
 * step boundary; with --state-dir one replica first saves the state there
 * (coord_save.c, recovery/job_save.c) and the exit status says it is
 * resumable; --save-every saves while training goes on; --resume starts
 * the coordinator at the saved step after checking every file. Every way
 * the job ends has its own exit status and a one-line outcome in the
 * summary (resihp-run(1), EXIT STATUS).
 */
#include "config.h"

#include "../libresihp/control/coordinator.h"
#include "../libresihp/control/gate.h"
#include "../libresihp/control/keeper.h"
#include "../libresihp/control/spare_agent.h"
#include "../libresihp/control/standby.h"
#include "../libresihp/recovery/inject.h"
#include "../libresihp/recovery/job_save.h"
#include "../libresihp/transport/mesh.h"
#include "resihp-run-cmd.h"
#include "resihp-run-slurm.h"

#include <resihp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Nodes of the allocation: 100K GPUs are at most this many nodes. */
#define MAXN 131072
#define MAXR RESIHP__COORD_MAX_REPLICAS

/* Exit codes, documented in resihp-run(1). */
enum {
  EXIT_OK = 0,
  EXIT_USAGE = 1,
  EXIT_LOST = 2,
  EXIT_DISAGREE = 3,
  EXIT_SIGNAL = 4,  /* a second SIGINT/SIGTERM: stopped at once */
  EXIT_STOPPED = 5, /* SIGINT/SIGTERM: stopped at a step boundary */
  EXIT_PROGRAM = 6,  /* the program could not start or left before joining,
                       or stopped the run (resihp_job_abort) */
  EXIT_RESUMABLE = 7 /* SIGINT/SIGTERM: stopped at a step boundary with a
                       resumable state in --state-dir (resihp-run --resume) */
};

typedef struct {
  char name[64];
  int bad;
  int owner; /* replica using it, -1 free */
  /* spare check step in flight: its srun, and the node's registrations
   * with the coordinator when it started */
  pid_t check;
  long check_regs;
  int gate; /* the check's gate until recorded (gate.h), else -1 */
} node_t;

typedef struct {
  pid_t pid; /* srun, 0 when none */
  int nodes[64], nnodes;
  int64_t t_launch, kill_at;
  int connected; /* its rank has reached the coordinator */
  int relaunch;  /* a replacement is wanted */
  int tries;
  int launches;
  int given_up;
  /* its step ended before its rank joined: its nodes are being checked to
   * tell a broken node from a program that cannot run; the srun status */
  int diagnosing;
  int early_status;
  /* its srun waits at this gate until its pid is in the keeper's record
   * (gate.h): -1 when none */
  int gate;
} replica_t;

static struct {
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
  int launch_timeout_s;
  int silence_ms;
  int quiet;
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
  int recheck_s;
  char self[4096]; /* this program, run as the spare agent */
  const char *ledger;
  const char *events, *metrics; /* --events, --metrics (record.h) */
  resihp__record_t *record;
  int hold;             /* --wait-for-replacements */
  int lockstep;         /* --lockstep */
  int stopping;         /* stop asked at the next step boundary */
  int program_failed;   /* the program, not a node, failed to start */
  int aborted;          /* a replica stopped the run (ABORT) */
  char prog_path[4096]; /* PROGRAM as found in PATH */
  /* fail-slow: how microbatches are spread (resihp_assign_mode_t), how long
   * a swap for a spare takes (< 0: never swap), progress every N s */
  int assign;
  double swap_cost_s;
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
  /* the standby on another node (standby.h, resihp-run-slurm.h): wanted
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
  unsigned standby_gen;
  char standby_step[64];
  /* since when the standby started does not follow the feed (0: it
   * does), and whether it ever did */
  int64_t standby_lost_ms;
  int standby_seen;
  char coords[600];
  int took_over;
  char node_self[64];
  int argc0;
  char **argv0;
  int slurmd_timeout_s;
  int64_t clock_delta; /* the old primary's host's clock to ours (ms) */
} g = {.standby_opt = 1,
       .standby_node = -1,
       .saved_step = -1,
       .saving_said = -1,
       .kept = {-1, -1},
       .K = 1,
       .S = -1,
       .launch_timeout_s = 60,
       .recheck_s = 30,
       .assign = RESIHP_ASSIGN_COST,
       .swap_cost_s = -2, /* not given: the planner's default */
       .progress_s = 10,
       .hang_ms = 5000};

/* The first SIGINT/SIGTERM stops the training at a step boundary, a
 * second one at once. */
static volatile sig_atomic_t got_signal, nsignals;

static void on_signal(int sig) {
  got_signal = sig;
  nsignals++;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  if (g.quiet)
    return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "resihp-run: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: resihp-run --replicas R [--spares S] [--nodes-per-replica N]\n"
      "                  [--ranks-per-replica K]\n"
      "                  [--inject SPEC] [--kill-node-cmd CMD] [--mpi TYPE]\n"
      "                  [--port P] [--coordinator-host HOST]\n"
      "                  [--secret-file PATH] [--silence-ms MS]\n"
      "                  [--launch-timeout S] [--no-spare-check]\n"
      "                  [--spare-recheck S] [--wait-for-replacements]\n"
      "                  [--ledger FILE] [--events FILE] [--metrics FILE]\n"
      "                  [--assign even|count|cost] [--lockstep]\n"
      "                  [--swap-cost SECONDS|never] [--progress SECONDS]\n"
      "                  [--state-dir DIR [--save-every N]] [--resume DIR]\n"
      "                  [--failover-after-ms MS] [--standby auto|none]\n"
      "                  [--standby-output FILE]\n"
      "                  [--quiet] -- PROGRAM [ARGS...]\n"
      "Run PROGRAM as R data-parallel replicas, one Slurm job step each,\n"
      "inside the current allocation, and replace failed replicas on spare\n"
      "nodes while the others keep training. See resihp-run(1).\n");
}

/* Commands run in the background (reaped by the main loop, killed at
 * exit if still running). Never through a shell: some of their words come
 * from the ranks (node names, step ids). */
static pid_t helpers[256];

/* A child of resihp-run: its own process group, so that a ^C at the
 * terminal reaches resihp-run alone, which stops the steps in order. */
static void child_setup(int quiet_stdio) {
  setpgid(0, 0);
  if (g.nofile_raised)
    setrlimit(RLIMIT_NOFILE, &g.nofile0);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  int fd = open("/dev/null", O_RDWR);
  if (fd >= 0) {
    dup2(fd, 0);
    if (quiet_stdio) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    if (fd > 2)
      close(fd);
  }
}

/* Run argv1, then (if not NULL) argv2 once argv1 has ended. */
static void spawn_argv(char *const argv1[], char *const argv2[], int quiet) {
  pid_t p = fork();
  if (p > 0) {
    for (size_t i = 0; i < sizeof(helpers) / sizeof(helpers[0]); i++)
      if (!helpers[i]) {
        helpers[i] = p;
        break;
      }
    return;
  }
  if (p < 0) {
    say("cannot start %s: %s", argv1[0], strerror(errno));
    return;
  }
  child_setup(quiet);
  if (argv2) {
    pid_t q = fork();
    if (q == 0) {
      execvp(argv1[0], argv1);
      _exit(127);
    }
    if (q > 0)
      while (waitpid(q, NULL, 0) < 0 && errno == EINTR)
        ;
    argv1 = argv2;
  }
  execvp(argv1[0], argv1);
  fprintf(stderr, "resihp-run: cannot run %s: %s\n", argv1[0], strerror(errno));
  _exit(127);
}

/* A node name of `scontrol show hostnames` (MAXN at most, each cut to
 * the room of a name). */
static void add_node(const char *name, void *ud) {
  (void)ud;
  if (g.nnodes >= MAXN)
    return;
  node_t *n = &g.nodes[g.nnodes++];
  snprintf(n->name, sizeof(n->name), "%.63s", name);
  n->owner = -1;
  n->gate = -1;
}

static int read_nodes(void) {
  const char *list = getenv("SLURM_JOB_NODELIST");
  const char *jid = getenv("SLURM_JOB_ID");
  if (!list || !*list || !jid || !*jid) {
    fprintf(stderr,
            "resihp-run: not inside a Slurm allocation (no SLURM_JOB_ID / "
            "SLURM_JOB_NODELIST): call it from an sbatch script or salloc\n");
    return -1;
  }
  snprintf(g.jobid, sizeof(g.jobid), "%s", jid);
  char *const argv[] = {"scontrol", "show", "hostnames", (char *)list, NULL};
  if (resihp__slurm_run(argv, 0, add_node, NULL) || g.nnodes <= 0) {
    fprintf(stderr, "resihp-run: 'scontrol show hostnames %s' failed\n", list);
    return -1;
  }
  return 0;
}

static int make_secret(void) {
  if (g.secret_file[0])
    return 0;
  const char *dir = getenv("RESIHP_SECRET_DIR");
  char cwd[2048];
  if (!dir || !*dir)
    dir = getcwd(cwd, sizeof(cwd)) ? cwd : "/tmp";
  snprintf(g.secret_file, sizeof(g.secret_file), "%s/.resihp-secret.%s.%ld",
           dir, g.jobid, (long)getpid());
  int fd = open(g.secret_file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    fprintf(stderr,
            "resihp-run: cannot create the job secret %s: %s (set "
            "RESIHP_SECRET_DIR to a directory shared by the nodes)\n",
            g.secret_file, strerror(errno));
    return -1;
  }
  uint8_t key[32];
  if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key) ||
      write(fd, key, sizeof(key)) != (ssize_t)sizeof(key)) {
    close(fd);
    unlink(g.secret_file);
    fprintf(stderr, "resihp-run: cannot write the job secret\n");
    return -1;
  }
  memset(key, 0, sizeof(key));
  close(fd);
  g.own_secret = 1;
  return 0;
}

static int read_secret(uint8_t *buf, size_t cap, size_t *len) {
  int fd = open(g.secret_file, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = read(fd, buf, cap);
  close(fd);
  if (n <= 0)
    return -1;
  *len = (size_t)n;
  return 0;
}

static int spare_state(int i) {
  return resihp__coord_spare_state(g.coord, g.nodes[i].name, NULL);
}

/* A free node a replica may be given: any for the first launches (the
 * replicas start at once, on the first nodes), only a spare registered
 * healthy for a replacement (any free one with --no-spare-check). */
static int usable(int i, int initial) {
  const node_t *n = &g.nodes[i];
  if (n->bad || n->owner >= 0)
    return 0;
  return initial || g.no_spare_check || spare_state(i) == RESIHP__SPARE_HEALTHY;
}

static int pick_nodes(int *out, int k, int initial) {
  int n = 0;
  for (int i = 0; i < g.nnodes && n < k; i++)
    if (usable(i, initial))
      out[n++] = i;
  return n == k ? 0 : -1;
}

/* Free spares whose first check has not answered yet. */
static int spares_pending(void) {
  int n = 0;
  for (int i = 0; i < g.nnodes; i++)
    n += !g.nodes[i].bad && g.nodes[i].owner < 0 && g.nodes[i].check > 0 &&
         spare_state(i) == RESIHP__SPARE_CHECKING;
  return n;
}

static int spares_left(void) {
  int n = 0;
  for (int i = 0; i < g.nnodes; i++)
    n += !g.nodes[i].bad && g.nodes[i].owner < 0;
  return n / g.K;
}

/* The injections for replica r's next launch. A slowdown belongs to the
 * hardware the replica ran on: a replacement on other nodes is not slow. */
static void inject_for(int r, char *buf, size_t len) {
  resihp__inject_t v[RESIHP__INJECT_MAX];
  int n = 0;
  for (int i = 0; i < g.ninj; i++)
    if (g.inj[i].replica == r && !g.fired[i] &&
        !(g.inj[i].kind == RESIHP__INJ_SLOW_RANK && g.reps[r].launches > 0))
      v[n++] = g.inj[i];
  resihp__inject_format(v, n, buf, len);
}

static int launch(int r) {
  g.ldirty = 1;
  replica_t *p = &g.reps[r];
  int idx[64];
  int initial = p->launches == 0 && !p->tries;
  if (pick_nodes(idx, g.K, initial)) {
    say("no healthy spare left for replica %d: the job goes on with the "
        "other replicas (same microbatches per step)",
        r);
    p->given_up = 1;
    p->relaunch = 0;
    resihp__coord_mark_failed(g.coord, r, "no spare");
    return -1;
  }
  char nodelist[4096] = "";
  size_t off = 0;
  for (int i = 0; i < g.K; i++) {
    g.nodes[idx[i]].owner = r;
    if (!initial)
      resihp__coord_spare_mark(g.coord, g.nodes[idx[i]].name,
                               RESIHP__SPARE_PROMOTED, r, NULL);
    p->nodes[i] = idx[i];
    off += (size_t)snprintf(nodelist + off, sizeof(nodelist) - off, "%s%s",
                            i ? "," : "", g.nodes[idx[i]].name);
  }
  p->nnodes = g.K;
  char inj[2048], opt_res[4200], opt_rep[64], opt_co[640], nk[16], nr[16],
      jn[64], mpi[80];
  inject_for(r, inj, sizeof(inj));
  snprintf(opt_res, sizeof(opt_res), "--resilient=secret-file=%s",
           g.secret_file);
  snprintf(opt_rep, sizeof(opt_rep), "--resilient-replica=%d", r);
  snprintf(opt_co, sizeof(opt_co), "--resilient-coordinator=%s", g.coords);
  snprintf(nk, sizeof(nk), "%d", g.K);
  snprintf(nr, sizeof(nr), "%d", g.ranks);
  snprintf(jn, sizeof(jn), "--job-name=resihp-replica-%d", r);
  snprintf(mpi, sizeof(mpi), "--mpi=%s", g.mpi ? g.mpi : "none");
  const char *argv0[32] = {"srun",
                           opt_res,
                           opt_rep,
                           "--resilient-role=replica",
                           opt_co,
                           "-N",
                           nk,
                           "-n",
                           nr,
                           "-w",
                           nodelist,
                           "--input=none",
                           "--kill-on-bad-exit=0",
                           jn,
                           mpi};
  int na = 15, np = 0;
  while (g.prog[np])
    np++;
  char **argv = calloc((size_t)(na + np + 1), sizeof(char *));
  if (!argv)
    return -1;
  for (int i = 0; i < na; i++)
    argv[i] = (char *)argv0[i];
  for (int i = 0; i < np; i++)
    argv[na + i] = g.prog[i];
  /* write-ahead: srun runs once its pid is recorded (open_gates) */
  pid_t pid = resihp__gate_fork(&p->gate);
  g.ngates += pid > 0;
  if (pid == 0) {
    child_setup(0);
    setenv("RESIHP_INJECT", inj, 1);
    char rs[16];
    snprintf(rs, sizeof(rs), "%d", r);
    setenv("RESIHP_REPLICA", rs, 1);
    setenv("RESIHP_COORDINATOR", g.coords, 1);
    /* the ranks wait for a coordinator that fails over: the hang bound,
     * then the successor's start, with room to spare; with a standby, also
     * Slurm's verdict that the primary's node is down (about
     * SlurmdTimeout, twice for the ping that notices it) */
    char fo[32];
    snprintf(fo, sizeof(fo), "%d",
             g.hang_ms + 30000 +
                 (g.standby_on ? 2000 * g.slurmd_timeout_s : 0));
    setenv("RESIHP_FAILOVER_MS", fo, 1);
    setenv("RESIHP_SECRET_FILE", g.secret_file, 1);
    /* where the ranks save and resume (job_save.c): paths go through the
     * environment only, never through the coordinator's messages */
    if (g.state_dir[0])
      setenv("RESIHP_STATE_DIR", g.state_dir, 1);
    if (g.resuming)
      setenv("RESIHP_RESUME_DIR", g.resume_step_dir, 1);
    execvp("srun", argv);
    fprintf(stderr, "resihp-run: cannot run srun: %s\n", strerror(errno));
    _exit(127);
  }
  free(argv);
  if (pid < 0)
    return -1;
  p->pid = pid;
  p->t_launch = resihp__now_ms();
  p->kill_at = 0;
  p->connected = 0;
  p->relaunch = 0;
  p->launches++;
  if (p->launches > 1) {
    g.nreplacements++;
    resihp__coord_expect(g.coord, r, 1);
  }
  say("replica %d: step launched on %s%s%s", r, nodelist,
      inj[0] ? ", injecting " : "", inj);
  return 0;
}

/* The sruns launched since the last record: record their pids, then let
 * them run (gate.h). A primary killed before the record leaves none
 * running; one killed after it, before they run, leaves their exits to
 * say so (ended). */
static void open_gates(void) {
  if (!g.ngates)
    return;
  int die = ++g.gate_batches == g.kill_at_batch;
  if (die && !g.kill_after_record)
    raise(SIGKILL);
  resihp__coord_mirror(g.coord);
  if (die)
    raise(SIGKILL);
  for (int r = 0; r < g.R; r++)
    if (g.reps[r].gate >= 0) {
      resihp__gate_open(g.reps[r].gate);
      g.reps[r].gate = -1;
    }
  for (int i = 0; i < g.nnodes; i++)
    if (g.nodes[i].gate >= 0) {
      resihp__gate_open(g.nodes[i].gate);
      g.nodes[i].gate = -1;
    }
  g.ngates = 0;
}

static void release_nodes(int r, int bad) {
  g.ldirty = 1;
  replica_t *p = &g.reps[r];
  for (int i = 0; i < p->nnodes; i++) {
    node_t *n = &g.nodes[p->nodes[i]];
    if (n->owner == r)
      n->owner = -1;
    if (bad && !n->bad) {
      n->bad = 1;
      g.nbad++;
    }
  }
  p->nnodes = 0;
}

/* Kill the step at once, then cancel it (a signal alone does not end a
 * step on a dead node). The ids are the rank's word: only a step of this
 * job is ever touched. */
static void cancel_step(long jobid, long stepid) {
  if (jobid < 0 || stepid < 0 || jobid != strtol(g.jobid, NULL, 10))
    return;
  char id[64];
  snprintf(id, sizeof(id), "%ld.%ld", jobid, stepid);
  char *const kill9[] = {"scancel", "--quiet", "--signal=KILL", id, NULL};
  char *const cancel[] = {"scancel", "--quiet", id, NULL};
  spawn_argv(kill9, cancel, 1);
}

static void on_failed(void *ud, int r, const char *node, long jobid,
                      long stepid, const char *why) {
  (void)ud;
  g.ldirty = 1;
  replica_t *p = &g.reps[r];
  say("replica %d failed (%s, node %s): cancelling step %ld.%ld, marking "
      "its node bad and starting a replacement",
      r, why, node, jobid, stepid);
  cancel_step(jobid, stepid);
  if (p->pid > 0)
    p->kill_at = resihp__now_ms() + 2000;
  release_nodes(r, 1);
  /* injections announced by this replica have fired */
  p->relaunch = 1;
  p->tries = 0;
}

/* A save at a step boundary ended (coord_save.c): record it in the meta,
 * point DIR/latest at it and keep only the last two step directories. */
static void on_saved(void *ud, long step, int r, int ok) {
  (void)ud;
  g.ldirty = 1;
  if (!ok) {
    say("no replica could save the state of step %ld (their messages above "
        "say why); %s",
        step,
        g.saved_step >= 0 ? "the last state saved stays the latest"
                          : "no resumable state");
    return;
  }
  resihp__save_meta_t m = {.step = step, .replicas = g.R};
  char shape[20] = "-", err[600];
  resihp__coord_job_shape(g.coord, &m.microbatches, &m.steps, &m.shards,
                          shape);
  snprintf(m.shape, sizeof(m.shape), "%s", shape);
  if (resihp__save_commit(g.state_dir, &m, err, sizeof(err))) {
    say("the state of step %ld was written but cannot be recorded: %s", step,
        err);
    return;
  }
  say("state of step %ld saved by replica %d in %s/step-%ld (%s/latest)",
      step, r, g.state_dir, step, g.state_dir);
  resihp__record_event(g.record, "save", step, r, RESIHP__RECORD_NONE, NULL,
                       NULL, -1);
  g.saved_step = step;
  long old = g.kept[0];
  g.kept[0] = g.kept[1];
  g.kept[1] = step;
  if (old >= 0 && old != step && old != g.kept[0])
    resihp__save_remove(g.state_dir, old);
}

/* --resume DIR: DIR/latest, its meta and every shard file checked before
 * anything starts (the ranks check their shard again when they load it).
 * Returns 0, or prints what is wrong and what to do. */
static int check_resume(void) {
  char err[5000];
  if (resihp__save_latest(g.resume_arg, &g.resume, err, sizeof(err))) {
    fprintf(stderr,
            "resihp-run: --resume %s: %s; give a directory that an earlier "
            "resihp-run --state-dir filled\n",
            g.resume_arg, err);
    return -1;
  }
  const resihp__save_meta_t *m = &g.resume;
  if (m->step >= m->steps) {
    fprintf(stderr,
            "resihp-run: --resume %s: the state saved is that of step %ld of "
            "%ld: the training is complete, nothing to resume\n",
            g.resume_arg, m->step, m->steps);
    return -1;
  }
  if (m->shards != g.ranks) {
    fprintf(stderr,
            "resihp-run: --resume %s: the state was saved by replicas of %d "
            "rank(s) each; run with --ranks-per-replica %d (this run has %d)\n",
            g.resume_arg, m->shards, m->shards, g.ranks);
    return -1;
  }
  char rp[PATH_MAX];
  if (!realpath(g.resume_arg, rp)) {
    fprintf(stderr, "resihp-run: --resume %s: %s\n", g.resume_arg,
            strerror(errno));
    return -1;
  }
  snprintf(g.resume_step_dir, sizeof(g.resume_step_dir), "%s/step-%ld", rp,
           m->step);
  for (int k = 0; k < m->shards; k++) {
    char path[4300];
    resihp__save_hdr_t h;
    snprintf(path, sizeof(path), "%s/shard-%d.bin", g.resume_step_dir, k);
    int bad = resihp__save_read(path, &h, NULL, 0, err, sizeof(err));
    if (bad || h.step != m->step || h.shard != k || h.shards != m->shards ||
        (m->shards == 1 && strcmp(h.shape, m->shape))) {
      if (!bad)
        snprintf(err, sizeof(err),
                 "%s does not belong to this state (step %ld, shard %d of "
                 "%d)",
                 path, h.step, h.shard, h.shards);
      fprintf(stderr,
              "resihp-run: --resume %s: %s; this state cannot be resumed: "
              "resume from another --state-dir, or start the training "
              "again\n",
              g.resume_arg, err);
      return -1;
    }
  }
  g.resuming = 1;
  g.kept[1] = m->step;
  return 0;
}

/* The training's steps as the replicas said (LONG_MAX before they did). */
static long job_steps(void) {
  int M, K;
  long S = LONG_MAX;
  char shape[20];
  resihp__coord_job_shape(g.coord, &M, &S, &K, shape);
  return S;
}

/* A resumed run's program must be the one that saved: same microbatches,
 * steps, ranks per replica and state shape (the first HELLO tells). */
static void check_resumed_shape(void) {
  int M, K;
  long S;
  char shape[20];
  if (!g.resuming || g.shape_checked ||
      !resihp__coord_job_shape(g.coord, &M, &S, &K, shape))
    return;
  g.shape_checked = 1;
  const resihp__save_meta_t *m = &g.resume;
  if (M == m->microbatches && S == m->steps && K == m->shards &&
      !strcmp(shape, m->shape))
    return;
  fprintf(stderr,
          "resihp-run: --resume %s: the program runs %d microbatches x %ld "
          "steps, %d rank(s) of state shape %s, but the state saved is of "
          "%d x %ld, %d rank(s) of shape %s: resume with the same program "
          "and options; stopping\n",
          g.resume_arg, M, S, K, shape, m->microbatches, m->steps, m->shards,
          m->shape);
  g.resume_mismatch = 1;
  g.stopping = 1;
  resihp__coord_stop(g.coord);
}

/* A replica's speed changed (the coordinator's detector). */
static void on_health(void *ud, int r, int shard, const char *state,
                      double factor, long step) {
  (void)ud;
  if (factor > 1)
    say("replica %d: %s x%.2f at step %ld (rank %d): it gets fewer "
        "microbatches",
        r, state, factor, step, shard);
  else
    say("replica %d: %s at step %ld: its microbatches return", r, state, step);
  resihp__record_event(g.record, factor > 1 ? "slow" : "healthy", step, r,
                       RESIHP__RECORD_NONE, NULL, NULL, -1);
}

/* A healthy spare for a swap, now. */
static int spare_free(void *ud) {
  (void)ud;
  int idx[64];
  return !g.stopping && !pick_nodes(idx, g.K, 0);
}

/* Every --progress seconds, once a step more is done: the step, and each
 * replica's speed and microbatches. */
static void progress(void) {
  long step = resihp__coord_step(g.coord);
  int64_t now = resihp__now_ms();
  if (!g.progress_s || now < g.next_progress || step == g.progress_step)
    return;
  if (!g.next_progress) {
    g.next_progress = now + g.progress_s * 1000L;
    return;
  }
  char line[4096];
  size_t off = 0;
  for (int r = 0; r < g.R && off < sizeof(line) - 64; r++) {
    double slow;
    int quota;
    const char *st;
    resihp__coord_replica_speed(g.coord, r, &slow, &quota, &st);
    int healthy = !strcmp(st, "healthy");
    off += (size_t)snprintf(
        line + off, sizeof(line) - off, " r%d:%s%s%d", r,
        !resihp__coord_connected(g.coord, r) ? "down"
        : healthy                            ? ""
                                             : st,
        !resihp__coord_connected(g.coord, r) || !healthy ? "/" : "", quota);
    if (slow > 1)
      off += (size_t)snprintf(line + off, sizeof(line) - off, "(x%.2f)", slow);
  }
  say("progress: step %ld; microbatches per replica:%s", step, line);
  g.progress_step = step;
  g.next_progress = now + g.progress_s * 1000L;
}

/* The node name as it may be printed: a rank's word, so anything odd is
 * shown as '?'. */
static const char *printable(const char *in, char *out, size_t len) {
  size_t i = 0;
  for (; in[i] && i + 1 < len; i++)
    out[i] = in[i] > ' ' && in[i] < 0x7f ? in[i] : '?';
  out[i] = '\0';
  return out;
}

/* The rank of replica r says an injected fault fires (see
 * resihp__coord_opts_t.on_fault). Only a fault this launcher injected into
 * that replica, for that step and not fired yet, is accepted; a kill-node
 * then runs --kill-node-cmd for the node, which must be one of the nodes
 * the replica runs on. Anything else is refused (the coordinator logs and
 * ignores it) and runs nothing. */
static int on_fault(void *ud, int r, const char *kind, const char *node,
                    long step) {
  (void)ud;
  char safe[80];
  int hit = -1;
  long now = resihp__coord_step(g.coord);
  for (int i = 0; i < g.ninj && hit < 0; i++)
    if (g.inj[i].replica == r && !g.fired[i] &&
        !strcmp(resihp__inject_kind_name(g.inj[i].kind), kind) &&
        ((step >= 0 && g.inj[i].step == step && step == now) ||
         (step < 0 && g.inj[i].step == RESIHP__INJECT_CATCHUP)))
      hit = i;
  if (hit < 0) {
    say("replica %d reported a %s fault at step %ld that resihp-run did not "
        "inject: ignored",
        r, printable(kind, safe, sizeof(safe)), step);
    return -1;
  }
  if (g.inj[hit].kind != RESIHP__INJ_KILL_NODE) {
    g.fired[hit] = 1;
    return 0;
  }
  const replica_t *p = &g.reps[r];
  int ni = -1;
  for (int i = 0; i < p->nnodes; i++)
    if (!strcmp(g.nodes[p->nodes[i]].name, node))
      ni = p->nodes[i];
  if (ni < 0) {
    say("replica %d reported kill-node for node '%s', which is not one of "
        "its nodes: ignored, nothing run",
        r, printable(node, safe, sizeof(safe)));
    return -1;
  }
  g.fired[hit] = 1;
  if (!g.kill_cmd.n) {
    say("kill-node on %s: no --kill-node-cmd given, the rank kills itself",
        g.nodes[ni].name);
    return 0;
  }
  char **argv = resihp__cmd_expand(&g.kill_cmd, g.nodes[ni].name);
  if (!argv) {
    say("kill-node on %s: out of memory, the rank kills itself",
        g.nodes[ni].name);
    return 0;
  }
  char shown[512];
  size_t off = 0;
  for (int i = 0; argv[i] && off < sizeof(shown); i++)
    off += (size_t)snprintf(shown + off, sizeof(shown) - off, "%s%s",
                            i ? " " : "", argv[i]);
  say("kill-node: running %s", shown);
  spawn_argv(argv, NULL, g.quiet);
  resihp__cmd_argv_free(argv);
  return 0;
}

/* Start a check step on node i: `srun --resilient-role=spare resihp-run
 * --spare-agent`, which registers the node and its probe verdict with the
 * coordinator. Used on free spares, and on the nodes of a replica whose
 * step ended before its rank joined. */
static void start_check(int i) {
  g.ldirty = 1;
  node_t *n = &g.nodes[i];
  resihp__coord_spare_add(g.coord, n->name);
  resihp__coord_spare_state(g.coord, n->name, &n->check_regs);
  /* write-ahead, as a replica's launch: an srun the successor of a
   * primary killed now does not know of would hold the node */
  pid_t p = resihp__gate_fork(&n->gate);
  if (p == 0) {
    child_setup(1); /* what went wrong is in the coordinator's registry */
    setenv("RESIHP_COORDINATOR", g.coord_ep, 1);
    setenv("RESIHP_SECRET_FILE", g.secret_file, 1);
    char res[4200], co[400], limit[16];
    /* a spare that answers no more must be found out before the next
     * recheck or two, not after srun's own (much longer) time-outs */
    int lim = g.recheck_s ? 3 * g.recheck_s : 30;
    snprintf(limit, sizeof(limit), "%d", lim < 5 ? 5 : lim > 30 ? 30 : lim);
    snprintf(res, sizeof(res), "--resilient=secret-file=%s", g.secret_file);
    snprintf(co, sizeof(co), "--resilient-coordinator=%s", g.coord_ep);
    /* -k: srun waits for an unreachable node's step past SIGTERM */
    execlp("timeout", "timeout", "-k", "2", limit, "srun", res,
           "--resilient-role=spare", co, "-N", "1", "-n", "1", "-w", n->name,
           "--input=none", "--job-name=resihp-spare-check", g.self,
           "--spare-agent", (char *)NULL);
    _exit(127);
  }
  if (p > 0) {
    n->check = p;
    g.ngates++;
  }
}

/* Check the free spares (those without a check in flight). */
static void check_spares(void) {
  for (int i = 0; i < g.nnodes; i++) {
    node_t *n = &g.nodes[i];
    if (!n->bad && n->owner < 0 && n->check <= 0)
      start_check(i);
  }
}

static void diagnosis_done(int r);

/* Replica r's step ended before its rank joined. A node that cannot run a
 * task (dead slurmd, failed step-start probe) does that, but so does a
 * program that cannot start or leaves at once; burning spares on the
 * latter only spreads the failure. Check its nodes the way spares are
 * checked; check_done decides. */
static void diagnose(int r, int st) {
  g.ldirty = 1;
  replica_t *p = &g.reps[r];
  p->diagnosing = 1;
  p->early_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  say("replica %d: step ended before its rank joined (srun status %d): "
      "checking its node%s",
      r, p->early_status, p->nnodes > 1 ? "s" : "");
  for (int k = 0; k < p->nnodes; k++) {
    /* the launcher's verdict is wanted, not the promotion it had */
    resihp__coord_spare_mark(g.coord, g.nodes[p->nodes[k]].name,
                             RESIHP__SPARE_CHECKING, -1, NULL);
    start_check(p->nodes[k]);
  }
  diagnosis_done(r); /* decides now if no check could start */
}

/* Did node i register healthy since its check started? */
static int registered_healthy(int i) {
  long regs = 0;
  int st = resihp__coord_spare_state(g.coord, g.nodes[i].name, &regs);
  return regs > g.nodes[i].check_regs && st == RESIHP__SPARE_HEALTHY;
}

/* Every node of a diagnosed replica has answered: healthy nodes mean the
 * program failed; otherwise the bad nodes go and a replacement starts. */
static void diagnosis_done(int r) {
  g.ldirty = 1;
  replica_t *p = &g.reps[r];
  for (int k = 0; k < p->nnodes; k++)
    if (g.nodes[p->nodes[k]].check > 0)
      return;
  p->diagnosing = 0;
  int healthy = 1;
  char names[512] = "";
  size_t off = 0;
  for (int k = 0; k < p->nnodes; k++) {
    healthy &= registered_healthy(p->nodes[k]);
    off += (size_t)snprintf(names + off,
                            off < sizeof(names) ? sizeof(names) - off : 0,
                            "%s%s", k ? "," : "", g.nodes[p->nodes[k]].name);
  }
  if (healthy && !g.stopping) {
    fprintf(stderr,
            "resihp-run: %s: left before joining the coordinator (srun "
            "status %d) on %s, which passed %s health check - the program, "
            "not the node, failed; no spare used (srun's messages above say "
            "why)\n",
            g.prog[0], p->early_status, names, p->nnodes > 1 ? "their" : "its");
    /* its nodes stay its own: they are no spares, and the run ends */
    g.program_failed = 1;
    p->given_up = 1;
    resihp__coord_mark_failed(g.coord, r, "program failed to start");
    return;
  }
  if (g.stopping) {
    release_nodes(r, 0);
    return;
  }
  /* free the nodes that answered healthy, mark the others bad */
  for (int k = 0; k < p->nnodes; k++) {
    node_t *n = &g.nodes[p->nodes[k]];
    if (n->owner == r)
      n->owner = -1;
    if (!registered_healthy(p->nodes[k]) && !n->bad) {
      if (resihp__coord_spare_state(g.coord, n->name, NULL) ==
          RESIHP__SPARE_CHECKING)
        resihp__coord_spare_mark(g.coord, n->name, RESIHP__SPARE_UNREACHABLE,
                                 -1, "check step ended without registering");
      say("replica %d: node %s failed its check: marked bad, trying other "
          "nodes",
          r, n->name);
      n->bad = 1;
      g.nbad++;
    }
  }
  p->nnodes = 0;
  p->relaunch = 1;
  p->tries++;
}

/* A check step ended: the coordinator has its registration, or the node
 * never answered. */
static void check_done(int i, int st) {
  g.ldirty = 1;
  node_t *n = &g.nodes[i];
  n->check = 0;
  if (n->owner >= 0 && g.reps[n->owner].diagnosing) {
    diagnosis_done(n->owner);
    return;
  }
  long regs = 0;
  resihp__coord_spare_state(g.coord, n->name, &regs);
  if (regs == n->check_regs && n->owner < 0 && !n->bad) {
    char why[80];
    snprintf(why, sizeof(why), "check step ended without registering (%s %d)",
             WIFEXITED(st) ? "status" : "signal",
             WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    resihp__coord_spare_mark(g.coord, n->name, RESIHP__SPARE_UNREACHABLE, -1,
                             why);
    say("spare %s did not register (%s): marked bad", n->name, why);
  }
  int s1 = resihp__coord_spare_state(g.coord, n->name, NULL);
  if ((s1 == RESIHP__SPARE_UNREACHABLE || s1 == RESIHP__SPARE_FAILED_PROBE) &&
      !n->bad && n->owner < 0) {
    n->bad = 1;
    g.nbad++;
  }
}

/* A check step recorded by a primary that died before letting it run
 * (gate.h): start it again, as if it never was. */
static void check_unopened(int i) {
  node_t *n = &g.nodes[i];
  n->check = 0;
  int diag = n->owner >= 0 && g.reps[n->owner].diagnosing;
  if (n->bad || (n->owner >= 0 && !diag))
    return;
  say("node %s: its check step never started (the coordinator before this "
      "one died first): checking it again",
      n->name);
  start_check(i);
  if (diag && n->check <= 0)
    diagnosis_done(n->owner);
}

/* The coordinator heard from a spare agent. */
static void on_spare(void *ud, const char *node, int state,
                     const char *summary) {
  (void)ud;
  for (int i = 0; i < g.nnodes; i++) {
    node_t *n = &g.nodes[i];
    if (strcmp(n->name, node) || n->owner >= 0)
      continue; /* a replica's node being diagnosed is no spare */
    long regs = 0;
    resihp__coord_spare_state(g.coord, node, &regs);
    if (state == RESIHP__SPARE_HEALTHY && regs == 1)
      say("spare %s is ready (registered healthy)", node);
    else if (state == RESIHP__SPARE_FAILED_PROBE && !n->bad)
      say("spare %s failed its health probe (%s): marked bad", node, summary);
  }
}

/* A child ended (or, after a failover, a child of the primary before:
 * the keeper reaped it and says so). */
static void ended(pid_t pid, int st) {
  {
    g.ldirty = 1;
    for (int i = 0; i < g.nnodes; i++)
      if (g.nodes[i].check == pid) {
        if (resihp__gate_unopened(st))
          check_unopened(i);
        else
          check_done(i, st);
      }
    for (size_t i = 0; i < sizeof(helpers) / sizeof(helpers[0]); i++)
      if (helpers[i] == pid)
        helpers[i] = 0;
    if (pid == g.standby_pid) {
      g.standby_pid = 0;
      if (!g.stopping)
        say("the standby coordinator on %s ended (%s %d): starting another",
            g.standby_node >= 0 ? g.nodes[g.standby_node].name : "?",
            WIFSIGNALED(st) ? "signal" : "status",
            WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
    for (int r = 0; r < g.R; r++) {
      replica_t *p = &g.reps[r];
      if (p->pid != pid)
        continue;
      p->pid = 0;
      if (resihp__gate_unopened(st)) {
        /* recorded by a primary that died before it could run: launch it
         * again, as if it never was (no try, its nodes not blamed) */
        say("replica %d: its step never started (the coordinator before "
            "this one died first): launching it again",
            r);
        release_nodes(r, 0);
        if (p->launches-- > 1)
          g.nreplacements--;
        if (!p->given_up)
          p->relaunch = 1;
        continue;
      }
      if (!p->connected && !p->relaunch && !p->given_up && !g.stopping &&
          resihp__coord_state(g.coord) == RESIHP__COORD_RUNNING)
        diagnose(r, st);
    }
  }
}

static void reap(void) {
  int st;
  pid_t pid;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
    ended(pid, st);
  while (g.keeper && resihp__keeper_orphan(g.keeper, &pid, &st))
    ended(pid, st);
}

/* ---- failover: the launcher's own state in the keeper's record ---- */

static int64_t realtime_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Every field a primary that takes over needs to go on launching,
 * replacing and summing up: the nodes not in their first state, every
 * replica. */
static void launcher_state(resihp__wire_buf_t *b) {
  resihp__wire_buf_printf(
      b, "L %d %d %d %d %d %ld %ld %ld %d %ld %d %d %d %d %" PRId64 " %ld %d",
      g.nbad, g.nreplacements, g.stopping, g.program_failed, g.aborted,
      g.saved_step, g.kept[0], g.kept[1], g.save_cancelled, g.saving_said,
      g.shape_checked, g.resume_mismatch, (int)got_signal, (int)nsignals,
      g.t0, g.progress_step, g.ninj);
  for (int i = 0; i < g.ninj; i++)
    resihp__wire_buf_printf(b, " %d", g.fired[i]);
  resihp__wire_buf_printf(b, "\n");
  /* where this primary was (a standby that takes over is elsewhere: the
   * sruns are not its own), and the standby it started */
  resihp__wire_buf_printf(b, "H %s %ld %d %d %" PRId64 " %" PRId64 "\n",
                          g.coord_ep, (long)g.standby_pid, g.standby_node,
                          g.standby_tries, resihp__now_ms(), realtime_ms());
  for (int i = 0; i < g.nnodes; i++) {
    node_t *n = &g.nodes[i];
    if (n->bad || n->owner >= 0 || n->check > 0)
      resihp__wire_buf_printf(b, "N %d %d %d %ld %ld\n", i, n->bad, n->owner,
                              (long)n->check, n->check_regs);
  }
  for (int r = 0; r < g.R; r++) {
    replica_t *p = &g.reps[r];
    resihp__wire_buf_printf(
        b, "P %d %ld %" PRId64 " %" PRId64 " %d %d %d %d %d %d %d %d", r,
        (long)p->pid, p->t_launch, p->kill_at, p->connected, p->relaunch,
        p->tries, p->launches, p->given_up, p->diagnosing, p->early_status,
        p->nnodes);
    for (int i = 0; i < p->nnodes; i++)
      resihp__wire_buf_printf(b, " %d", p->nodes[i]);
    resihp__wire_buf_printf(b, "\n");
  }
}

/* The record: "LAUNCHER <bytes>\n", the launcher's state, then the
 * coordinator's. */
static void on_mirror(void *ud, const char *snap, size_t len) {
  (void)ud;
  if (!g.keeper)
    return;
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  launcher_state(&b);
  char head[64];
  int hl = snprintf(head, sizeof(head), "LAUNCHER %zu\n", b.len);
  char *rec = b.err ? NULL : malloc((size_t)hl + b.len + len);
  if (rec) {
    memcpy(rec, head, (size_t)hl);
    memcpy(rec + hl, b.s, b.len);
    memcpy(rec + hl + b.len, snap, len);
    if (!resihp__keeper_record(g.keeper, rec, (size_t)hl + b.len + len))
      g.ldirty = 0;
    resihp__feed_put(g.feed, rec, (size_t)hl + b.len + len);
    free(rec);
  }
  resihp__wire_buf_free(&b);
}

/* The launcher's state from a record; *coord, *clen: the coordinator's
 * part. The record is ours (the keeper's pipe), still every index is
 * checked. */
static int restore_launcher(const char *rec, size_t len, const char **coord,
                            size_t *clen) {
  size_t ll = 0;
  int hl = 0;
  if (sscanf(rec, "LAUNCHER %zu\n%n", &ll, &hl) != 1 || hl <= 0 ||
      ll > len - (size_t)hl)
    return RESIHP_EPROTO;
  char *t = strndup(rec + hl, ll);
  if (!t)
    return RESIHP_ENOMEM;
  *coord = rec + hl + ll;
  *clen = len - (size_t)hl - ll;
  for (int i = 0; i < g.nnodes; i++) {
    g.nodes[i].bad = 0;
    g.nodes[i].owner = -1;
    g.nodes[i].check = 0;
  }
  int rc = 0;
  char *save = NULL;
  for (char *l = strtok_r(t, "\n", &save); l && !rc;
       l = strtok_r(NULL, "\n", &save)) {
    int n = 0, a[12];
    long v[4];
    int64_t w[2];
    if (l[0] == 'L') {
      int sig = 0, nsig = 0, ninj = 0;
      if (sscanf(l,
                 "L %d %d %d %d %d %ld %ld %ld %d %ld %d %d %d %d %" SCNd64
                 " %ld %d%n",
                 &g.nbad, &g.nreplacements, &g.stopping, &g.program_failed,
                 &g.aborted, &g.saved_step, &g.kept[0], &g.kept[1],
                 &g.save_cancelled, &g.saving_said, &g.shape_checked,
                 &g.resume_mismatch, &sig, &nsig, &g.t0, &g.progress_step,
                 &ninj, &n) != 17 ||
          ninj != g.ninj) {
        rc = RESIHP_EPROTO;
        break;
      }
      if (nsig > (int)nsignals) { /* signals the old primary had seen */
        got_signal = sig;
        nsignals = nsig;
      }
      char *q = l + n;
      for (int i = 0; i < g.ninj; i++)
        g.fired[i] = (int)strtol(q, &q, 10);
    } else if (l[0] == 'H') {
      char ep[300];
      if (sscanf(l, "H %299s %ld %d %d %" SCNd64 " %" SCNd64, ep, &v[0], &a[0],
                 &a[1], &w[0], &w[1]) != 6 ||
          a[0] < -1 || a[0] >= g.nnodes) {
        rc = RESIHP_EPROTO;
        break;
      }
      g.took_over = strcmp(ep, g.coord_ep) != 0;
      /* the old host's monotonic clock to this one's, through the wall
       * clock (the nodes' clocks are kept in step, NTP) */
      g.clock_delta = (resihp__now_ms() - realtime_ms()) - (w[0] - w[1]);
      g.standby_pid = (pid_t)v[0];
      g.standby_node = a[0];
      g.standby_tries = a[1];
    } else if (l[0] == 'N') {
      if (sscanf(l, "N %d %d %d %ld %ld", &a[0], &a[1], &a[2], &v[0], &v[1]) !=
              5 ||
          a[0] < 0 || a[0] >= g.nnodes || a[2] < -1 || a[2] >= g.R) {
        rc = RESIHP_EPROTO;
        break;
      }
      node_t *nd = &g.nodes[a[0]];
      nd->bad = a[1];
      nd->owner = a[2];
      nd->check = (pid_t)v[0];
      nd->check_regs = v[1];
    } else if (l[0] == 'P') {
      if (sscanf(l,
                 "P %d %ld %" SCNd64 " %" SCNd64 " %d %d %d %d %d %d %d %d%n",
                 &a[0], &v[0], &w[0], &w[1], &a[1], &a[2], &a[3], &a[4],
                 &a[5], &a[6], &a[7], &a[8], &n) != 12 ||
          a[0] < 0 || a[0] >= g.R || a[8] < 0 || a[8] > 64) {
        rc = RESIHP_EPROTO;
        break;
      }
      replica_t *p = &g.reps[a[0]];
      p->pid = (pid_t)v[0];
      p->t_launch = w[0];
      p->kill_at = w[1];
      p->connected = a[1];
      p->relaunch = a[2];
      p->tries = a[3];
      p->launches = a[4];
      p->given_up = a[5];
      p->diagnosing = a[6];
      p->early_status = a[7];
      p->nnodes = a[8];
      char *q = l + n;
      for (int i = 0; i < p->nnodes; i++) {
        long x = strtol(q, &q, 10);
        p->nodes[i] = x >= 0 && x < g.nnodes ? (int)x : 0;
      }
    }
  }
  free(t);
  if (!rc && g.took_over) {
    /* the old primary's sruns ran on its node, which is lost: their steps
     * run on without them (a failed one is cancelled by its id) */
    g.t0 += g.clock_delta;
    for (int r = 0; r < g.R; r++) {
      if (g.reps[r].t_launch)
        g.reps[r].t_launch += g.clock_delta;
      g.reps[r].pid = 0;
      g.reps[r].gate = -1;
      g.reps[r].kill_at = 0;
    }
    for (int i = 0; i < g.nnodes; i++) {
      g.nodes[i].check = 0;
      g.nodes[i].gate = -1;
    }
    g.standby_pid = 0;
    g.standby_tries = 0;
  }
  return rc;
}

/* A primary that takes over: the ledger's complete lines (a line cut by
 * the death of the one before is removed; the coordinator writes what is
 * missing). */
static long ledger_cut(FILE *f) {
  long lines = 0, keep = 0, pos = 0;
  int ch;
  rewind(f);
  while ((ch = getc(f)) != EOF) {
    pos++;
    if (ch == '\n') {
      lines++;
      keep = pos;
    }
  }
  fflush(f);
  if (ftruncate(fileno(f), keep) == 0)
    fseek(f, keep, SEEK_SET);
  return lines;
}

static void tick(void) {
  int64_t now = resihp__now_ms();
  for (int r = 0; r < g.R; r++) {
    replica_t *p = &g.reps[r];
    if (p->pid > 0 && p->kill_at && now >= p->kill_at) {
      kill(p->pid, SIGKILL);
      p->kill_at = 0;
      g.ldirty = 1;
    }
    if (p->pid > 0 && !p->connected && resihp__coord_connected(g.coord, r)) {
      p->connected = 1;
      g.ldirty = 1;
    }
    if (p->pid > 0 && !p->connected && !p->kill_at &&
        now - p->t_launch > (int64_t)g.launch_timeout_s * 1000) {
      say("replica %d: rank did not join within %d s: marking its nodes bad", r,
          g.launch_timeout_s);
      g.ldirty = 1;
      kill(p->pid, SIGKILL);
      release_nodes(r, 1);
      p->relaunch = 1;
      p->tries++;
    }
    if (p->relaunch && !g.stopping &&
        resihp__coord_state(g.coord) == RESIHP__COORD_RUNNING) {
      int idx[64];
      /* no healthy spare yet, but some are still being checked: wait */
      if (p->launches && p->tries <= 3 && pick_nodes(idx, g.K, 0) &&
          spares_pending())
        continue;
      if (p->tries > 3) {
        say("replica %d: giving up after %d failed launches", r, p->tries);
        g.ldirty = 1;
        p->given_up = 1;
        p->relaunch = 0;
        resihp__coord_mark_failed(g.coord, r, "launch failed");
      } else {
        launch(r);
      }
    }
  }
}

/* ---- the standby on another node (standby.h) ---- */

/* The coordinator's addresses the ranks get (at launch, and COORDS to
 * those running): ours, then the standby's once it follows the feed. */
static void update_coords(void) {
  char ep[64], node[64], step[64];
  unsigned gen = 0;
  int have = resihp__feed_standby(g.feed, ep, sizeof(ep), node, sizeof(node),
                                  step, sizeof(step), &gen);
  if (g.coords[0] && gen == g.standby_gen)
    return;
  g.standby_gen = gen;
  g.standby_lost_ms = have ? 0 : resihp__now_ms();
  if (have) {
    snprintf(g.coords, sizeof(g.coords), "%s/%s", g.coord_ep, ep);
    snprintf(g.standby_step, sizeof(g.standby_step), "%s", step);
    g.standby_seen = 1;
    g.standby_tries = 0; /* it came up: the next one gets its tries */
    say("standby coordinator on %s (%s) follows this one", node, ep);
  } else {
    snprintf(g.coords, sizeof(g.coords), "%s", g.coord_ep);
  }
  if (g.standby_on)
    resihp__coord_set_coords(g.coord, g.coords);
}

/* Start a standby on a node of the allocation other than this one's: a
 * step of its own (--overlap: it takes nothing from the replicas), its
 * output in a file that its node's slurmstepd writes, so that it outlives
 * this node. Three tries in a row that never follow the feed, and the job
 * goes on without one. */
static void launch_standby(void) {
  if (!g.standby_on || g.standby_pid > 0 || g.stopping || !g.feed ||
      resihp__coord_state(g.coord) != RESIHP__COORD_RUNNING)
    return;
  if (g.standby_tries >= 3) {
    if (g.standby_tries++ == 3)
      say("warning: no standby coordinator after 3 tries (its output: %s); "
          "the job goes on without one",
          g.standby_out);
    return;
  }
  int pick = -1;
  for (int k = 1; k <= g.nnodes && pick < 0; k++) {
    int i = (g.standby_node + k + g.nnodes) % g.nnodes;
    if (!g.nodes[i].bad && strcmp(g.nodes[i].name, g.node_self))
      pick = i;
  }
  if (pick < 0)
    return;
  g.standby_node = pick;
  g.standby_tries++;
  g.standby_lost_ms = resihp__now_ms();
  g.standby_seen = 0;
  g.standby_step[0] = '\0';
  g.ldirty = 1;
  /* this one only: an old standby that comes back is refused */
  resihp__feed_expect(g.feed, g.nodes[pick].name);
  const char *head[] = {"srun",
                        "--overlap",
                        "-N",
                        "1",
                        "-n",
                        "1",
                        "-w",
                        g.nodes[pick].name,
                        "--input=none",
                        "--kill-on-bad-exit=0",
                        "--job-name=resihp-standby",
                        "--mpi=none",
                        g.self,
                        "--standby-of",
                        g.feed_ep,
                        "--primary-node",
                        g.node_self,
                        "--secret-file",
                        g.secret_file};
  int nh = (int)(sizeof(head) / sizeof(head[0]));
  char **argv = calloc((size_t)(nh + g.argc0), sizeof(char *));
  if (!argv)
    return;
  for (int i = 0; i < nh; i++)
    argv[i] = (char *)head[i];
  /* the job's own options; not the ones that made this process a
   * standby, if it was one (the head says who the primary is now) */
  int na = nh;
  for (int i = 1; i < g.argc0; i++) {
    const char *a = g.argv0[i];
    if (!strcmp(a, "--"))
      for (; i < g.argc0; i++)
        argv[na++] = g.argv0[i];
    else if (!strcmp(a, "--standby-of") || !strcmp(a, "--primary-node"))
      i++;
    else if (strncmp(a, "--standby-of=", 13) &&
             strncmp(a, "--primary-node=", 15))
      argv[na++] = g.argv0[i];
  }
  pid_t pid = fork();
  if (pid == 0) {
    child_setup(0);
    execvp("srun", argv);
    fprintf(stderr, "resihp-run: cannot run srun: %s\n", strerror(errno));
    _exit(127);
  }
  free(argv);
  if (pid > 0)
    g.standby_pid = pid;
  say("standby coordinator: step launched on %s (output in %s.%s)",
      g.nodes[pick].name, g.standby_out, g.nodes[pick].name);
}

/* A standby that does not follow the feed (its node lost, a partition):
 * its step is cancelled, so that it can never take over with an old
 * state, and another one is started. Slurm's own verdict on its node
 * would take SlurmdTimeout. A new one gets the launch timeout to come
 * up. */
static void check_standby(void) {
  if (g.standby_pid <= 0 || !g.standby_lost_ms)
    return;
  int64_t bound =
      g.standby_seen ? g.hang_ms + 5000 : (int64_t)g.launch_timeout_s * 1000;
  if (resihp__now_ms() - g.standby_lost_ms < bound)
    return;
  say("the standby coordinator on %s does not follow this one (%lld ms): "
      "cancelling it and starting another",
      g.standby_node >= 0 ? g.nodes[g.standby_node].name : "?",
      (long long)(resihp__now_ms() - g.standby_lost_ms));
  long sj = -1, ss = -1;
  if (sscanf(g.standby_step, "%ld.%ld", &sj, &ss) == 2)
    cancel_step(sj, ss);
  kill(g.standby_pid, SIGKILL);
  g.standby_pid = 0; /* its exit, when reaped, is nobody's */
  g.standby_lost_ms = 0;
  g.ldirty = 1;
}

/* The standby's life until it takes over: follow the primary's feed;
 * when the link fails, ask Slurm whether the primary's node is DOWN (then
 * take over) or not (a local failover, a restart: follow again). 1 with
 * the record to take over from, 0 when the job is over (BYE), or a
 * negative code. */
static int standby_follow(const uint8_t *secret, size_t slen, char **rec,
                          size_t *len) {
  char hello[512];
  const char *sj = getenv("SLURM_JOB_ID"), *ss = getenv("SLURM_STEP_ID");
  snprintf(hello, sizeof(hello), "STANDBY ep=%s node=%s step=%s.%s", g.coord_ep,
           g.node_self, sj ? sj : "0", ss ? ss : "0");
  say("standby coordinator on %s (%s) for the primary on %s", g.node_self,
      g.coord_ep, g.primary_node);
  int64_t told = 0;
  while (!got_signal) {
    int rc = resihp__feed_follow(g.standby_of, secret, slen, hello,
                                 g.hang_ms + 2000, rec, len);
    if (rc == 1)
      return 0;
    if (resihp__slurm_node_down(g.primary_node)) {
      if (*rec)
        return 1;
      say("the primary's node %s is DOWN and no state came from it: nothing "
          "to take over",
          g.primary_node);
      return RESIHP_ENOENT;
    }
    if (resihp__now_ms() - told > 60000) {
      told = resihp__now_ms();
      say("the primary's feed at %s: %s; its node %s is up: following again",
          g.standby_of, resihp_strerror(rc), g.primary_node);
    }
    usleep(500000);
  }
  return RESIHP_ECLOSED;
}

/* A standby that took over, at the end: the batch script is gone with
 * its node, and Slurm requeues a job with no step left, which would run
 * the whole training again. Cancel the job instead (this step with it:
 * the last thing done). */
static void end_job(void) {
  say("the job's batch host was lost: ending job %s (scancel) so that Slurm "
      "does not requeue it",
      g.jobid);
  char *argv[] = {"scancel", "--quiet", g.jobid, NULL};
  resihp__slurm_run(argv, 0, NULL, NULL);
}

/* The first IPv4 address of host, as resihp__wire_dial picks it. */
static int resolve_host(const char *host, char *out, size_t len) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  if (getaddrinfo(host, NULL, &hints, &ai) || !ai)
    return -1;
  const struct sockaddr_in *a = (const struct sockaddr_in *)ai->ai_addr;
  int rc = inet_ntop(AF_INET, &a->sin_addr, out, (socklen_t)len) ? 0 : -1;
  freeaddrinfo(ai);
  return rc;
}

static int primary_main(void *ud, const char *snap, size_t snaplen,
                        resihp__keeper_t *k);

/* The coordinator holds a descriptor per replica's link and per pending
 * handshake (up to R + 64), and at set-up one per rank waiting for its
 * leader: past the usual soft limit of 1024 for a large job, where accept
 * would fail and joiners wait. Raise the soft limit as far as that needs
 * (the hard limit at most); refuse a job the hard limit cannot hold. */
static int raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl))
    return 0;
  g.nofile0 = rl;
  rlim_t need = 2 * (rlim_t)g.R + 192; /* links, handshakes, our own */
  rlim_t want = need + (rlim_t)g.R * (rlim_t)g.ranks;
  if (rl.rlim_cur < want) {
    rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
    g.nofile_raised = !setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < need) {
    fprintf(stderr,
            "resihp-run: %d replicas need at least %llu open files (a link "
            "and a handshake per replica); the limit is %llu (hard %llu): "
            "raise it (ulimit -Hn, or nofile in /etc/security/limits.conf) "
            "and try again\n",
            g.R, (unsigned long long)need, (unsigned long long)rl.rlim_cur,
            (unsigned long long)rl.rlim_max);
    return -1;
  }
  if (rl.rlim_cur < want)
    fprintf(stderr,
            "resihp-run: warning: the open-files limit (%llu) is below the "
            "%llu that %d replicas of %d rank(s) may hold at set-up; ranks "
            "may wait for their leader's address longer (raise ulimit -Hn)\n",
            (unsigned long long)rl.rlim_cur, (unsigned long long)want, g.R,
            g.ranks);
  return 0;
}

int main(int argc, char **argv) {
  /* The program of a spare's check step (see the top comment). */
  if (argc == 2 && !strcmp(argv[1], "--spare-agent"))
    return resihp__spare_agent_run(10000);
  static const struct option lo[] = {
      {"replicas", required_argument, 0, 'r'},
      {"spares", required_argument, 0, 's'},
      {"nodes-per-replica", required_argument, 0, 'k'},
      {"ranks-per-replica", required_argument, 0, 'K'},
      {"inject", required_argument, 0, 'i'},
      {"kill-node-cmd", required_argument, 0, 'c'},
      {"mpi", required_argument, 0, 'm'},
      {"port", required_argument, 0, 'p'},
      {"coordinator-host", required_argument, 0, 'H'},
      {"secret-file", required_argument, 0, 'f'},
      {"silence-ms", required_argument, 0, 'S'},
      {"launch-timeout", required_argument, 0, 'T'},
      {"quiet", no_argument, 0, 'q'},
      {"no-spare-check", no_argument, 0, 'n'},
      {"ledger", required_argument, 0, 'L'},
      {"spare-recheck", required_argument, 0, 'C'},
      {"wait-for-replacements", no_argument, 0, 'W'},
      {"assign", required_argument, 0, 'A'},
      {"lockstep", no_argument, 0, 'l'},
      {"swap-cost", required_argument, 0, 'w'},
      {"progress", required_argument, 0, 'P'},
      {"state-dir", required_argument, 0, 'D'},
      {"save-every", required_argument, 0, 'E'},
      {"resume", required_argument, 0, 'R'},
      {"events", required_argument, 0, 'V'},
      {"metrics", required_argument, 0, 'M'},
      {"failover-after-ms", required_argument, 0, 'F'},
      {"standby", required_argument, 0, 'B'},
      {"standby-output", required_argument, 0, 'O'},
      /* internal: how a primary starts its standby */
      {"standby-of", required_argument, 0, 'Y'},
      {"primary-node", required_argument, 0, 'Z'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int o;
  char *end;
  g.argc0 = argc;
  g.argv0 = argv;
  while ((o = getopt_long(argc, argv,
                          "+r:s:k:K:i:c:m:p:H:f:S:T:qnL:C:WA:lw:P:D:E:R:V:M:F:"
                          "B:O:Y:Z:h",
                          lo, NULL)) != -1) {
    long v = 0;
    if (strchr("rskKpSTCPEF", o)) {
      errno = 0;
      v = strtol(optarg, &end, 10);
      if (errno || end == optarg || *end || v < 0 || v > 100000) {
        fprintf(stderr, "resihp-run: --%s wants a number, not '%s'\n",
                o == 'r'   ? "replicas"
                : o == 's' ? "spares"
                : o == 'k' ? "nodes-per-replica"
                : o == 'K' ? "ranks-per-replica"
                : o == 'p' ? "port"
                : o == 'S' ? "silence-ms"
                : o == 'C' ? "spare-recheck"
                : o == 'P' ? "progress"
                : o == 'E' ? "save-every"
                : o == 'F' ? "failover-after-ms"
                           : "launch-timeout",
                optarg);
        return EXIT_USAGE;
      }
    }
    switch (o) {
    case 'r':
      g.R = (int)v;
      break;
    case 's':
      g.S = (int)v;
      break;
    case 'k':
      g.K = (int)v;
      break;
    case 'K':
      g.ranks = (int)v;
      break;
    case 'i':
      g.inject = optarg;
      break;
    case 'c': {
      char cerr[300];
      resihp__cmd_free(&g.kill_cmd);
      if (resihp__cmd_parse(optarg, &g.kill_cmd, cerr, sizeof(cerr))) {
        fprintf(stderr, "resihp-run: --kill-node-cmd: %s\n", cerr);
        return EXIT_USAGE;
      }
      break;
    }
    case 'm':
      g.mpi = optarg;
      break;
    case 'p':
      g.port = (int)v;
      break;
    case 'H':
      g.coord_host = optarg;
      break;
    case 'f':
      snprintf(g.secret_file, sizeof(g.secret_file), "%s", optarg);
      break;
    case 'S':
      g.silence_ms = (int)v;
      break;
    case 'T':
      g.launch_timeout_s = (int)v;
      break;
    case 'F':
      g.hang_ms = (int)v;
      break;
    case 'B':
      if (strcmp(optarg, "auto") && strcmp(optarg, "none")) {
        fprintf(stderr,
                "resihp-run: --standby wants auto (a standby coordinator on "
                "another node of the allocation, the default) or none, not "
                "'%s'\n",
                optarg);
        return EXIT_USAGE;
      }
      g.standby_opt = !strcmp(optarg, "auto");
      break;
    case 'O':
      g.standby_out = optarg;
      break;
    case 'Y':
      g.standby_of = optarg;
      break;
    case 'Z':
      g.primary_node = optarg;
      break;
    case 'q':
      g.quiet = 1;
      break;
    case 'n':
      g.no_spare_check = 1;
      break;
    case 'L':
      g.ledger = optarg;
      break;
    case 'V':
      g.events = optarg;
      break;
    case 'M':
      g.metrics = optarg;
      break;
    case 'C':
      g.recheck_s = (int)v;
      break;
    case 'W':
      g.hold = 1;
      break;
    case 'l':
      g.lockstep = 1;
      break;
    case 'A':
      if ((g.assign = resihp_assign_mode_lookup(optarg)) < 0) {
        fprintf(stderr,
                "resihp-run: --assign wants even (equal counts, no "
                "adaptation), count (counts by speed) or cost (by predicted "
                "cost, the default), not '%s'\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'w':
      errno = 0;
      g.swap_cost_s = strtod(optarg, &end);
      if (!strcmp(optarg, "never")) {
        g.swap_cost_s = -1;
      } else if (errno || end == optarg || *end || !(g.swap_cost_s >= 0) ||
                 g.swap_cost_s > 1e7) {
        fprintf(stderr,
                "resihp-run: --swap-cost wants the seconds a replica is out "
                "while a spare takes its place (e.g. 60), or 'never', not "
                "'%s'\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'P':
      g.progress_s = (int)v;
      break;
    case 'D':
      if (!*optarg || (mkdir(optarg, 0700) && errno != EEXIST) ||
          !realpath(optarg, g.state_dir)) {
        fprintf(stderr,
                "resihp-run: --state-dir %s: cannot create or find it: %s "
                "(give a directory on a file system that the nodes share)\n",
                optarg, strerror(errno));
        return EXIT_USAGE;
      }
      break;
    case 'E':
      g.save_every = v;
      break;
    case 'R':
      g.resume_arg = optarg;
      break;
    case 'h':
      usage(stdout);
      return EXIT_OK;
    default:
      usage(stderr);
      return EXIT_USAGE;
    }
  }
  if (optind >= argc) {
    fprintf(stderr, "resihp-run: no program given (put it after --)\n");
    usage(stderr);
    return EXIT_USAGE;
  }
  g.prog = argv + optind;
  /* A program that cannot start would fail on every node: say so now
   * rather than burn the nodes and spares one by one. (Checked on this
   * host; the nodes see the same file system as a rule, and a failure
   * there is caught when the step ends before joining.) */
  int perr = resihp__prog_check(g.prog[0], g.prog_path, sizeof(g.prog_path));
  if (perr) {
    fprintf(stderr,
            "resihp-run: %s: cannot execute (%s) - the program, not the "
            "node, failed; no spare used\n",
            g.prog[0], strerror(perr));
    return EXIT_PROGRAM;
  }
  if (g.R < 1 || g.R > MAXR || g.K < 1 || g.K > 64) {
    fprintf(stderr,
            "resihp-run: --replicas must be 1..%d and --nodes-per-replica "
            "1..64\n",
            MAXR);
    return EXIT_USAGE;
  }
  g.reps = calloc((size_t)g.R, sizeof(*g.reps));
  if (!g.reps) {
    fprintf(stderr, "resihp-run: out of memory for %d replicas\n", g.R);
    return EXIT_USAGE;
  }
  for (int r = 0; r < g.R; r++)
    g.reps[r].gate = -1;
  if (!g.ranks)
    g.ranks = g.K;
  if (g.ranks < g.K || g.ranks > 64 || g.ranks % g.K) {
    fprintf(stderr,
            "resihp-run: --ranks-per-replica %d does not fit replicas of %d "
            "node(s): it must be a multiple of --nodes-per-replica (the same "
            "number of ranks on each node of a replica), at most 64\n",
            g.ranks, g.K);
    return EXIT_USAGE;
  }
  if (raise_nofile())
    return EXIT_USAGE;
  if (g.save_every && !g.state_dir[0] && !g.resume_arg) {
    fprintf(stderr, "resihp-run: --save-every needs --state-dir DIR (where "
                    "the states go)\n");
    return EXIT_USAGE;
  }
  if (g.resume_arg && check_resume())
    return EXIT_USAGE;
  /* a resumed run saves into the directory it resumed from unless told */
  if (g.resuming && !g.state_dir[0] &&
      !realpath(g.resume_arg, g.state_dir)) {
    fprintf(stderr, "resihp-run: --resume %s: %s\n", g.resume_arg,
            strerror(errno));
    return EXIT_USAGE;
  }
  char err[512];
  const char *spec = g.inject ? g.inject : getenv("RESIHP_INJECT");
  if (resihp__inject_parse(spec, g.inj, RESIHP__INJECT_MAX, &g.ninj, err,
                           sizeof(err))) {
    fprintf(stderr, "resihp-run: %s\n", err);
    return EXIT_USAGE;
  }
  for (int i = 0; i < g.ninj; i++)
    if (g.inj[i].replica >= g.R) {
      fprintf(stderr,
              "resihp-run: bad fault injection: replica %d does not exist "
              "(--replicas %d: 0..%d)\n",
              g.inj[i].replica, g.R, g.R - 1);
      return EXIT_USAGE;
    }
  if (read_nodes())
    return EXIT_USAGE;
  int avail_spares = (g.nnodes - g.R * g.K) / g.K;
  if (g.nnodes < g.R * g.K || (g.S >= 0 && g.S > avail_spares)) {
    fprintf(stderr,
            "resihp-run: the allocation has %d nodes; %d replicas of %d "
            "node(s) and %d spare(s) need %d (ask sbatch/salloc for more "
            "with -N)\n",
            g.nnodes, g.R, g.K, g.S < 0 ? 0 : g.S,
            (g.R + (g.S < 0 ? 0 : g.S)) * g.K);
    return EXIT_USAGE;
  }
  if (g.S >= 0) /* nodes beyond R+S replicas' worth are left alone */
    for (int i = (g.R + g.S) * g.K; i < g.nnodes; i++)
      g.nodes[i].bad = 1;
  /* Replicas take the first nodes in order. */
  for (int r = 0; r < g.R; r++)
    g.reps[r].relaunch = 0;
  if (make_secret())
    return EXIT_USAGE;
  uint8_t secret[4096];
  size_t slen = 0;
  if (read_secret(secret, sizeof(secret), &slen)) {
    fprintf(stderr, "resihp-run: cannot read the secret file %s\n",
            g.secret_file);
    if (g.own_secret)
      unlink(g.secret_file);
    return EXIT_USAGE;
  }
  /* The ranks reach the coordinator under this host's name (or
   * --coordinator-host): listen on the address that name resolves to, as
   * the ranks will resolve it, and on no other interface. */
  char host[256], bind_addr[INET_ADDRSTRLEN];
  if (g.standby_of) /* the address is this node's, not the primary's */
    g.coord_host = NULL;
  if (g.coord_host)
    snprintf(host, sizeof(host), "%s", g.coord_host);
  else if (gethostname(host, sizeof(host)))
    snprintf(host, sizeof(host), "127.0.0.1");
  host[sizeof(host) - 1] = '\0';
  if (resolve_host(host, bind_addr, sizeof(bind_addr))) {
    fprintf(stderr,
            "resihp-run: cannot resolve '%s' to an IPv4 address for the "
            "coordinator (give --coordinator-host NAME-OR-ADDRESS that the "
            "nodes reach this host by)\n",
            host);
    memset(secret, 0, sizeof(secret));
    if (g.own_secret)
      unlink(g.secret_file);
    return EXIT_USAGE;
  }
  g.co = (resihp__coord_opts_t){
      .replicas = g.R,
      .bind_host = bind_addr,
      .hold_for_replacements = g.hold,
      .lockstep = g.lockstep,
      .port = g.port,
      .secret = secret,
      .secret_len = slen,
      .silence_ms =
          g.silence_ms ? g.silence_ms
                       : (int)resihp_settings_get(resihp_settings_global(),
                                                  RESIHP_SETTING_COORD_TIMEOUT),
      .on_failed = on_failed,
      .on_spare = on_spare,
      .on_fault = on_fault,
      .assign = g.assign,
      .on_health = on_health,
      .swap_cost_s = g.swap_cost_s,
      .spare_free = spare_free,
      .start_step = g.resuming ? g.resume.step : 0,
      .save_on_stop = g.state_dir[0] != '\0',
      .save_every = g.save_every,
      .on_saved = on_saved,
      .on_mirror = on_mirror};
  if (g.swap_cost_s == -2) {
    resihp_escalation_costs_t ec;
    resihp_escalation_costs_init(&ec);
    g.co.swap_cost_s = ec.spare_swap_s;
  }
  /* The listening socket is the keeper's: the port outlives any one
   * coordinator, and what waits in its backlog during a failover is
   * accepted by the next one. Sized for every rank at once: at set-up
   * each one connects (the leaders, and the others for their leader's
   * address). */
  resihp__wire_listener_t lis;
  if (resihp__wire_listener_open(bind_addr, g.port, g.R * g.ranks, &lis)) {
    fprintf(stderr, "resihp-run: cannot listen on %s:%d: %s\n", bind_addr,
            g.port, strerror(errno));
    memset(secret, 0, sizeof(secret));
    if (g.own_secret)
      unlink(g.secret_file);
    return EXIT_USAGE;
  }
  int port = lis.port;
  g.co.listener = &lis;
  /* A standby on another node (standby.h), when this process runs on a
   * node of the allocation (sbatch: the batch host). Under salloc it runs
   * outside, on a login node: the allocation does not outlive that host's
   * salloc anyway, so there is nothing a standby could save. */
  const char *me = getenv("SLURMD_NODENAME");
  snprintf(g.node_self, sizeof(g.node_self), "%s", me ? me : "");
  int inside = 0;
  for (int i = 0; me && i < g.nnodes; i++)
    inside |= !strcmp(g.nodes[i].name, me);
  g.standby_on = g.standby_opt && inside && g.nnodes >= 2;
  if (g.standby_opt && !g.standby_on && !g.standby_of)
    say("no standby coordinator: %s",
        !inside ? "resihp-run runs outside the allocation (salloc: the "
                  "allocation ends with its host anyway)"
                : "the allocation has a single node");
  if (g.standby_on &&
      resihp__wire_listener_open(bind_addr, 0, 4, &g.feed_lis)) {
    say("warning: cannot listen for a standby coordinator: %s; the job goes "
        "on without one",
        strerror(errno));
    g.standby_on = 0;
  }
  if (g.standby_on) {
    snprintf(g.feed_ep, sizeof(g.feed_ep), "%s:%d", host, g.feed_lis.port);
    g.slurmd_timeout_s = resihp__slurm_slurmd_timeout_s();
  }
  static char sout[4200];
  char cwd[4096];
  if (!g.standby_out) /* the same in the primary and in its standby */
    snprintf(sout, sizeof(sout), "%s/resihp-standby-%s",
             getcwd(cwd, sizeof(cwd)) ? cwd : "/tmp", g.jobid);
  g.standby_out = g.standby_out ? g.standby_out : sout;
  snprintf(g.host, sizeof(g.host), "%s", host);
  snprintf(g.coord_ep, sizeof(g.coord_ep), "%s:%d", host, port);
  ssize_t sl = readlink("/proc/self/exe", g.self, sizeof(g.self) - 1);
  if (sl > 0)
    g.self[sl] = '\0';
  else
    snprintf(g.self, sizeof(g.self), "%s", argv[0]);
  g.t0 = resihp__now_ms();
  /* This process becomes the keeper; the primary does the work. A
   * standby first follows the primary's feed, and becomes the keeper of
   * a primary restored from the last record when the primary's node is
   * lost. */
  resihp__keeper_opts_t ko = {.hang_ms = g.hang_ms,
                              .lost_status = EXIT_LOST,
                              .primary = primary_main};
  char *rec = NULL;
  int ret = -1;
  if (g.standby_of) {
    /* its output goes straight to a file of its own: srun's forwarding
     * runs on the primary's node and dies with it */
    char path[4300];
    snprintf(path, sizeof(path), "%s.%s", g.standby_out, g.node_self);
    int ofd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (ofd >= 0) {
      fflush(stdout);
      fflush(stderr);
      dup2(ofd, 1);
      dup2(ofd, 2);
      close(ofd);
      setvbuf(stdout, NULL, _IOLBF, 0);
    } else {
      say("cannot write %s: %s; the standby's output goes to its srun", path,
          strerror(errno));
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    size_t rlen = 0;
    int fr = standby_follow(secret, slen, &rec, &rlen);
    if (fr == 1) {
      ko.snap = rec;
      ko.snaplen = rlen;
      ko.first_why = "lost with its node";
      got_signal = nsignals = 0;
    } else {
      ret = fr == 0 || got_signal ? EXIT_OK : EXIT_LOST;
      if (fr == 0)
        say("the job is over: the standby leaves");
    }
  }
  if (ret < 0)
    ret = resihp__keeper_run(&ko);
  if (ko.snap) {
    g.own_secret = 1; /* the job's now: removed below */
    end_job();
  }
  free(rec);
  resihp__wire_listener_close(&g.feed_lis);
  resihp__wire_listener_close(&lis);
  memset(secret, 0, sizeof(secret));
  resihp__cmd_free(&g.kill_cmd);
  if (g.own_secret)
    unlink(g.secret_file);
  return ret;
}

/* RESIHP_TEST_KILL_PRIMARY=before:N or after:N, for failover.test: the
 * first primary SIGKILLs itself at its N-th batch of gated launches, before
 * or after recording them, the two windows that gates close. */
static void test_kill_primary(void) {
  const char *v = getenv("RESIHP_TEST_KILL_PRIMARY");
  if (!v || !*v)
    return;
  char when[8];
  int n = 0, used = 0;
  if (sscanf(v, "%7[a-z]:%d%n", when, &n, &used) != 2 || v[used] || n < 1 ||
      (strcmp(when, "before") && strcmp(when, "after"))) {
    say("ignoring RESIHP_TEST_KILL_PRIMARY=%s (before:N or after:N)", v);
    return;
  }
  g.kill_at_batch = n;
  g.kill_after_record = !strcmp(when, "after");
}

/* The primary (keeper.h): the coordinator and the launcher, from the start
 * (snap NULL) or from the last state a primary that died left. */
static int primary_main(void *ud, const char *snap, size_t snaplen,
                        resihp__keeper_t *kp) {
  (void)ud;
  g.keeper = kp;
  if (!resihp__keeper_failovers(kp, NULL, NULL, NULL))
    test_kill_primary();
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  /* a hang-up (the terminal of an salloc gone) would kill resihp-run, and
   * salloc reports a command killed by SIGHUP as success: stop like a
   * SIGTERM instead, so that the job ends with its true status */
  sigaction(SIGHUP, &sa, NULL);
  resihp__keeper_beat(kp); /* the keeper may pass signals on now */
  resihp__coord_opts_t co = g.co;
  FILE *ledger = NULL;
  long ledger_have = -1;
  if (g.ledger && !(ledger = fopen(g.ledger, snap ? "r+" : "w"))) {
    fprintf(stderr, "resihp-run: cannot write the ledger %s: %s\n", g.ledger,
            strerror(errno));
    return EXIT_USAGE;
  }
  if (ledger && snap)
    ledger_have = ledger_cut(ledger);
  co.ledger = ledger;
  if (g.events || g.metrics) {
    const char *jid = getenv("SLURM_JOB_ID");
    char rerr[600];
    if (resihp__record_create(g.events, g.metrics, jid ? jid : "", &g.record,
                              rerr, sizeof(rerr))) {
      fprintf(stderr, "resihp-run: %s\n", rerr);
      return EXIT_USAGE;
    }
    co.record = g.record;
    if (!snap)
      resihp__record_event(g.record, g.resuming ? "resume" : "start",
                           g.resuming ? g.resume.step : 0, RESIHP__RECORD_NONE,
                           RESIHP__RECORD_NONE, NULL,
                           g.resuming ? g.resume_arg : NULL, -1);
  }
  int rc;
  if (snap) {
    const char *csnap = NULL;
    size_t clen = 0;
    rc = restore_launcher(snap, snaplen, &csnap, &clen);
    if (!rc)
      rc = resihp__coord_restore(&co, csnap, clen, ledger_have, &g.coord);
    if (!rc && g.took_over) {
      resihp__coord_shift_times(g.coord, g.clock_delta);
      /* the replicas try each address in turn, a few seconds a round */
      resihp__coord_reconnect_within(g.coord, 15000 + g.co.silence_ms);
    }
  } else {
    rc = resihp__coord_create(&co, &g.coord);
  }
  if (rc) {
    fprintf(stderr, "resihp-run: cannot start the coordinator: %s\n",
            resihp_strerror(rc));
    return snap ? EXIT_LOST : EXIT_USAGE;
  }
  if (g.standby_on && resihp__feed_start(g.feed_lis.fds[0], g.co.secret,
                                         g.co.secret_len, &g.feed))
    say("warning: cannot serve a standby coordinator; the job goes on "
        "without one");
  if (g.standby_pid > 0 && g.standby_node >= 0) /* a local failover */
    resihp__feed_expect(g.feed, g.nodes[g.standby_node].name);
  update_coords();
  if (g.took_over) {
    say("took over from the primary on %s, which Slurm declared DOWN: the "
        "coordinator continues here (%s) at step %ld",
        g.primary_node, g.coord_ep, resihp__coord_step(g.coord));
  }
  char pidtxt[64];
  snprintf(pidtxt, sizeof(pidtxt), "pid %ld", (long)getpid());
  resihp__record_event(g.record, "coordinator", resihp__coord_step(g.coord),
                       RESIHP__RECORD_NONE, (long)resihp__coord_epoch(g.coord),
                       snap ? "standby" : "primary", pidtxt, -1);
  const char *fwhy = NULL;
  pid_t fold = 0;
  int64_t fsince = 0;
  if (resihp__keeper_failovers(kp, &fwhy, &fold, &fsince)) {
    double secs = (double)(resihp__now_ms() - fsince) / 1000.0;
    if (fold)
      say("coordinator failover: pid %ld %s; pid %ld continues at step %ld "
          "(epoch %u) after %.3f s",
          (long)fold, fwhy, (long)getpid(), resihp__coord_step(g.coord),
          resihp__coord_epoch(g.coord), secs);
    resihp__record_event(g.record, "failover", resihp__coord_step(g.coord),
                         RESIHP__RECORD_NONE,
                         (long)resihp__coord_epoch(g.coord), fwhy, pidtxt,
                         secs);
  } else {
    say("job %s: %d replica(s) x %d node(s), %d spare(s) of %d nodes; "
        "coordinator %s (listening on %s, pid %ld)",
        g.jobid, g.R, g.K, spares_left() - g.R, g.nnodes, g.coord_ep,
        g.co.bind_host, (long)getpid());
    if (g.resuming)
      say("resuming the training at step %ld of %ld from %s (saved by a run "
          "of %d replica(s))",
          g.resume.step, g.resume.steps, g.resume_step_dir,
          g.resume.replicas);
    if (g.state_dir[0])
      say("resumable states go to %s%s", g.state_dir,
          g.save_every ? "" : " (on SIGTERM/SIGINT)");
  }
  int64_t t0 = g.t0;
  if (!snap) {
    for (int r = 0; r < g.R; r++)
      if (launch(r))
        g.reps[r].relaunch = 1;
    open_gates();
  }
  int64_t next_check = 0;
  int ret = EXIT_OK, killed = 0;
  while (resihp__coord_state(g.coord) == RESIHP__COORD_RUNNING) {
    /* a save holds the boundary: say so once per step saved */
    if (resihp__coord_saving(g.coord) &&
        g.saving_said != resihp__coord_step(g.coord)) {
      g.saving_said = resihp__coord_step(g.coord);
      say("saving the state of step %ld%s", g.saving_said,
          g.stopping ? " (send the signal again to stop without saving)" : "");
    }
    if (nsignals >= 2 && !g.save_cancelled &&
        resihp__coord_saving(g.coord)) {
      /* the boundary is reached, only the save is left: drop it */
      g.save_cancelled = 1;
      say("%s again while saving the state of step %ld: stopping without "
          "saving (%s)",
          strsignal(got_signal), resihp__coord_step(g.coord),
          g.saved_step >= 0 ? "the last state saved stays the latest"
                            : "no resumable state is left");
      resihp__coord_save_cancel(g.coord);
      continue;
    }
    if (nsignals >= 2 + g.save_cancelled) {
      say("%s again: stopping at once, in the middle of step %ld",
          strsignal(got_signal), resihp__coord_step(g.coord));
      killed = 1;
      break;
    }
    /* A signal, or a program that cannot start: the step in progress
     * commits, the next one does not start, every replica reports its
     * result. */
    if ((got_signal || g.program_failed) && !g.stopping) {
      g.stopping = 1;
      g.ldirty = 1;
      if (got_signal)
        say("%s: stopping once the step in progress (step %ld) has "
            "committed; send it again to stop at once",
            strsignal(got_signal), resihp__coord_step(g.coord));
      resihp__coord_stop(g.coord);
      continue;
    }
    if (!g.stopping && !g.no_spare_check && resihp__now_ms() >= next_check) {
      check_spares();
      open_gates();
      next_check =
          g.recheck_s ? resihp__now_ms() + g.recheck_s * 1000L : INT64_MAX;
    }
    resihp__keeper_beat(kp);
    resihp__coord_poll(g.coord, 50);
    resihp__record_progress(g.record, resihp__coord_step(g.coord),
                            (long)resihp__coord_epoch(g.coord),
                            resihp__coord_members(g.coord));
    /* A replica stopped the run because of an error of its program
     * (resihp_job_abort): no replacement for it (a spare would fail the
     * same way) nor for anyone else; the coordinator already stops at the
     * step boundary. Seen before reap() so that its step's end is not
     * taken for a node to diagnose. */
    char why[224];
    int ar = resihp__coord_aborted(g.coord, why, sizeof(why));
    if (ar >= 0 && !g.aborted) {
      g.aborted = 1;
      g.ldirty = 1;
      g.stopping = 1;
      fprintf(stderr,
              "resihp-run: replica %d stopped the run: %s (an error of the "
              "program, which no spare can fix; the others stop at the step "
              "boundary)\n",
              ar, why);
      resihp__coord_stop(g.coord);
    }
    reap();
    tick();
    open_gates();
    update_coords();
    check_standby();
    launch_standby();
    progress();
    check_resumed_shape();
    int live = 0;
    for (int r = 0; r < g.R; r++)
      live += !g.reps[r].given_up;
    if (!live) {
      if (!g.program_failed)
        say("every replica has failed and no spare is left");
      break;
    }
    if (g.ldirty)
      resihp__coord_mirror(g.coord); /* the launcher's own change */
  }
  int state = resihp__coord_state(g.coord);
  long end_step = resihp__coord_step(g.coord);
  /* resumable at the step the run stopped at: saved there, or a resumed
   * run stopped before it trained (the state it came from is the latest) */
  long resumable = g.saved_step >= 0 && g.saved_step == end_step ? end_step
                   : g.resuming && end_step == g.resume.step ? end_step
                                                             : -1;
  char outcome[4800];
  const char *lw = resihp__coord_lost_why(g.coord);
  if (killed) {
    ret = EXIT_SIGNAL;
    snprintf(outcome, sizeof(outcome),
             "stopped at once by a second signal, mid-step %ld", end_step);
  } else if (g.resume_mismatch) {
    ret = EXIT_USAGE;
    snprintf(outcome, sizeof(outcome),
             "not resumed: the program does not match the state saved");
  } else if (g.program_failed || g.aborted) {
    ret = EXIT_PROGRAM;
    snprintf(outcome, sizeof(outcome),
             "stopped by the program (it could not start, or aborted)");
  } else if (state != RESIHP__COORD_DONE) {
    ret = EXIT_LOST;
    snprintf(outcome, sizeof(outcome), "LOST %s",
             lw[0] ? lw : "(every replica failed and no spare is left)");
  } else if (got_signal && end_step < job_steps()) {
    ret = resumable >= 0 ? EXIT_RESUMABLE : EXIT_STOPPED;
    if (resumable >= 0)
      snprintf(outcome, sizeof(outcome),
               "stopped, resumable at step %ld (resihp-run --resume %s)",
               resumable, g.state_dir);
    else
      snprintf(outcome, sizeof(outcome), "stopped at step %ld%s", end_step,
               g.state_dir[0] ? " (the state could not be saved)" : "");
  } else {
    snprintf(outcome, sizeof(outcome), "completed");
  }
  /* The standby leaves (BYE; its srun is waited for below). */
  g.stopping = 1;
  resihp__feed_bye(g.feed, 2000);
  resihp__feed_stop(g.feed);
  g.feed = NULL;
  /* Let the steps end on their own, then cancel what is left. A step
   * whose rank never joined (a replacement still starting) is not waited
   * for. */
  for (int r = 0; r < g.R; r++)
    if (g.reps[r].pid > 0 && !g.reps[r].connected)
      kill(g.reps[r].pid, SIGKILL);
  int64_t deadline = resihp__now_ms() + (killed                        ? 0
                                         : state == RESIHP__COORD_DONE ? 15000
                                                                       : 2000);
  for (;;) {
    reap();
    int left = 0;
    for (int r = 0; r < g.R; r++)
      left += g.reps[r].pid > 0 && g.reps[r].connected;
    if (!left || resihp__now_ms() > deadline)
      break;
    resihp__keeper_beat(kp);
    resihp__coord_poll(g.coord, 50);
  }
  for (int r = 0; r < g.R; r++)
    if (g.reps[r].pid > 0) {
      kill(g.reps[r].pid, SIGTERM);
      resihp__keeper_beat(kp);
      usleep(100000);
      kill(g.reps[r].pid, SIGKILL);
    }
  /* and gone before resihp-run is: a SIGKILLed srun lingers a moment, and
   * nothing of the job may outlive its launcher (bounded: a process stuck
   * in the kernel is not waited for) */
  for (int64_t until = resihp__now_ms() + 5000; resihp__now_ms() < until;) {
    reap();
    int left = 0;
    for (int r = 0; r < g.R; r++)
      left += g.reps[r].pid > 0 && kill(g.reps[r].pid, 0) == 0;
    left += g.standby_pid > 0 && kill(g.standby_pid, 0) == 0;
    if (resihp__now_ms() > until - 2000 && g.standby_pid > 0)
      kill(g.standby_pid, SIGTERM); /* BYE did not end it */
    if (!left)
      break;
    resihp__keeper_beat(kp);
    usleep(10000);
  }
  double secs = 0;
  fflush(stdout);
  int agree = resihp__coord_summary(g.coord, stdout, &secs);
  printf("  replacements launched:  %d; nodes marked bad: %d; spares left: "
         "%d\n",
         g.nreplacements, g.nbad, spares_left());
  int nfo = resihp__keeper_failovers(kp, &fwhy, NULL, NULL);
  if (nfo)
    printf("  coordinator failovers:  %d (the last: the coordinator %s)\n",
           nfo, fwhy);
  printf("  wall time:              %.3f s\n",
         (double)(resihp__now_ms() - t0) / 1000.0);
  if (ret == EXIT_OK && agree != 0) {
    ret = EXIT_DISAGREE;
    snprintf(outcome, sizeof(outcome), "completed, but the results differ");
  }
  if (ret == EXIT_LOST && g.saved_step >= 0)
    snprintf(outcome + strlen(outcome), sizeof(outcome) - strlen(outcome),
             "; the state of step %ld can be resumed: resihp-run --resume %s",
             g.saved_step, g.state_dir);
  printf("  outcome:                %s (exit status %d)\n", outcome, ret);
  fflush(stdout);
  if (ret == EXIT_LOST)
    fprintf(stderr, "resihp-run: LOST: the job cannot go on %s\n",
            lw[0] ? lw : "(every replica failed and no spare is left)");
  /* helpers (scancel, kill-node commands) get a moment, then go */
  for (int i = 0; i < 20; i++) {
    reap();
    int left = 0;
    for (size_t k = 0; k < sizeof(helpers) / sizeof(helpers[0]); k++)
      left += helpers[k] != 0;
    if (!left)
      break;
    resihp__keeper_beat(kp);
    usleep(100000);
  }
  for (size_t k = 0; k < sizeof(helpers) / sizeof(helpers[0]); k++)
    if (helpers[k])
      kill(helpers[k], SIGKILL);
  /* SIGTERM: timeout(1) passes it on to its srun, SIGKILL would orphan it */
  for (int i = 0; i < g.nnodes; i++)
    if (g.nodes[i].check > 0)
      kill(g.nodes[i].check, SIGTERM);
  while (waitpid(-1, NULL, WNOHANG) > 0)
    ;
  resihp__coord_destroy(g.coord);
  resihp__record_destroy(g.record);
  if (ledger)
    fclose(ledger);
  return ret;
}
