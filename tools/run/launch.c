/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: the replicas' job steps and the nodes they run on - picking
 * nodes, launching a step (through its gate), cancelling one, reaping what
 * ended, relaunching what is wanted (tick). */
#include "config.h"

#include "run.h"
#include "shrink_pick.h"
#include "slurm.h"

#include <resihp/error.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Commands run in the background (reaped by the main loop, killed at
 * exit if still running). Never through a shell: some of their words come
 * from the ranks (node names, step ids). */
pid_t helpers[256];

/* A child of resihp-run: its own process group, so that a ^C at the
 * terminal reaches resihp-run alone, which stops the steps in order. */
void child_setup(int quiet_stdio) {
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

const char *step_name(int r) {
  static char name[32];
  snprintf(name, sizeof(name), "resihp-replica-%d", r);
  return name;
}

/* A helper started: reaped and waited for at the end (end_helpers). */
static void add_helper(pid_t p) {
  for (size_t i = 0; i < sizeof(helpers) / sizeof(helpers[0]); i++)
    if (!helpers[i]) {
      helpers[i] = p;
      break;
    }
}

/* Run argv1, then (if not NULL) argv2 once argv1 has ended; its pid (the
 * parent's), or -1. */
pid_t spawn_argv(char *const argv1[], char *const argv2[], int quiet) {
  pid_t p = fork();
  if (p > 0) {
    add_helper(p);
    return p;
  }
  if (p < 0) {
    say("cannot start %s: %s", argv1[0], strerror(errno));
    return -1;
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

static int spare_state(int i) {
  return resihp__coord_spare_state(g.coord, g.nodes[i].name, NULL);
}

/* A free node a replica may be given: any for the first launches (the
 * replicas start at once, on the first nodes), only a spare registered
 * healthy, and not found slow by its burn-in, for a replacement (any free
 * one with --no-spare-check). */
static int take_slow; /* the last resort: a spare suspect for speed only */
static int usable(int i, int initial) {
  const node_t *n = &g.nodes[i];
  if (n->bad || n->owner >= 0)
    return 0;
  if (initial || g.no_spare_check)
    return 1;
  /* a spare that registered before any replica's burn-in is judged now */
  int was = spare_state(i), st = resihp__coord_spare_judge(g.coord, n->name);
  if (was == RESIHP__SPARE_HEALTHY && st == RESIHP__SPARE_SUSPECT)
    on_spare(NULL, n->name, st, resihp__coord_spare_summary(g.coord, n->name));
  return st == RESIHP__SPARE_HEALTHY ||
         (take_slow && resihp__coord_spare_slow_only(g.coord, n->name));
}

int pick_nodes(int *out, int k, int initial) {
  int n = 0;
  for (int i = 0; i < g.nnodes && n < k; i++)
    if (usable(i, initial))
      out[n++] = i;
  return n == k ? 0 : -1;
}

/* Free spares whose first check has not answered yet, or whose re-check
 * a replacement asked for (suspect ones). */
static int spares_pending(int suspects) {
  int n = 0;
  for (int i = 0; i < g.nnodes; i++) {
    int st = spare_state(i);
    n += !g.nodes[i].bad && g.nodes[i].owner < 0 && g.nodes[i].check > 0 &&
         (st == RESIHP__SPARE_CHECKING ||
          (suspects && st == RESIHP__SPARE_SUSPECT));
  }
  return n;
}

int spares_left(void) {
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

static int start_step(int r, const int *idx, int nn, int initial,
                      int promote);

/* No healthy spare is left for replica r, whose step failed: when some of
 * the nodes that step ran on died (the node an injected kill-node ran its
 * command for, or one Slurm says is DOWN) and the others did not, and its
 * program can shrink (the coordinator decides:
 * resihp__coord_shrink_in_place gives it the planner's partition over its
 * survivors), the survivors' nodes run a step of their ranks alone, which
 * catches its layers up by layer from the other replicas
 * (coord_shrink.c 11). A node killed from outside is DOWN for Slurm only
 * after about SlurmdTimeout (twice, for the ping that notices it): while
 * none of them is known dead yet and the replica could shrink, resihp-run
 * waits that long, asking every second in the background (verdict_tick;
 * the others train on meanwhile). A rank killed on a node that lives on is
 * known from its leader (FAULT kind=lost: p->sh.lost): its node is taken for
 * dead at once, nothing is waited for. 0 when launched so, 1 while waiting, -1
 * when it does not shrink. */
static int shrink_in_place(int r) {
  replica_t *p = &g.reps[r];
  int rpn = g.ranks / g.K, down[64] = {0}, idx[64], n = 0, nn = p->sh.nwas;
  unsigned long long dead = 0;
  if (g.K < 2 || nn != g.K || nn > 64)
    return -1;
  /* (a node whose ranks' bits are beyond 64: none, nn * rpn <= 64) */
  unsigned long long mine = rpn < 64 ? (1ULL << rpn) - 1 : ~0ULL;
  for (int i = 0; i < nn; i++) {
    down[i] = p->sh.killed == p->sh.was[i] + 1 ||
              (rpn * i < 64 && (p->sh.lost >> (rpn * i) & mine)) ||
              g.nodes[p->sh.was[i]].slurm_down;
    if (!down[i])
      idx[n++] = p->sh.was[i];
  }
  int64_t now = resihp__now_ms();
  if (n == nn && !resihp__coord_shrink_able(g.coord, r)) {
    if (!p->sh.wait) {
      int s = 2 * g.slurmd_timeout_s + 10;
      p->sh.wait = now + 1000LL * s;
      resihp__verdict_soon(&g.verdict); /* asked at once */
      say("replica %d: no healthy spare; waiting up to %d s for Slurm to "
          "say which of its nodes died (it could shrink onto the others)",
          r, s);
      /* --wait-for-replacements: the others wait for it at the next
       * boundary, as for a replacement (a give-up clears it) */
      if (g.hold)
        resihp__coord_expect(g.coord, r, 1);
    }
    if (now < p->sh.wait) {
      p->sh.poll = now + 1000;
      return 1;
    }
  }
  p->sh.wait = 0;
  if (resihp__run_shrink_pick(nn, rpn, down, &dead) < 0)
    return -1;
  for (int i = 0; i < n; i++)
    if (g.nodes[idx[i]].owner >= 0)
      return -1; /* (taken meanwhile: never, they were its own) */
  int rc = resihp__coord_shrink_in_place(g.coord, r, dead);
  if (rc) {
    say("replica %d cannot shrink onto its %d surviving node(s) (%s)", r, n,
        resihp_strerror(rc));
    return -1;
  }
  /* the survivors' nodes did not fail: a failure marked them all bad */
  char nodelist[4096] = "";
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    node_t *x = &g.nodes[idx[i]];
    g.nbad -= x->bad == NODE_BAD;
    x->bad = NODE_OK;
    off += (size_t)snprintf(nodelist + off, sizeof(nodelist) - off, "%s%s",
                            i ? "," : "", x->name);
  }
  if (p->sh.lost)
    say("replica %d: its leader lost rank(s) (bits %#llx) whose node(s) may "
        "live on: not used by its shrunk step",
        r, p->sh.lost);
  say("no healthy spare left for replica %d: it shrinks to %d rank(s) on "
      "nodes %s (its dead node(s)' ranks' layers go to them)",
      r, n * rpn, nodelist);
  char why[4200];
  snprintf(why, sizeof(why), "shrinks to %d ranks on %s", n * rpn, nodelist);
  resihp__record_event(g.record, "spare", resihp__coord_step(g.coord), r,
                       RESIHP__RECORD_NONE, "none-left", why, -1);
  return start_step(r, idx, n, 0, 0);
}

int launch(int r) {
  replica_t *p = &g.reps[r];
  if (p->sh.wait && resihp__now_ms() < p->sh.poll)
    return 0; /* (waiting for Slurm's verdict: asked again soon) */
  g.ldirty = 1;
  int idx[64];
  int initial = p->launches == 0 && !p->tries;
  if (pick_nodes(idx, g.K, initial)) {
    if (!initial && shrink_in_place(r) >= 0)
      return 0;
    say("no healthy spare left for replica %d: the job goes on with the "
        "other replicas (same microbatches per step)",
        r);
    snprintf(p->why, sizeof(p->why), "%s", WHY_NO_SPARE);
    p->given_up = 1;
    jobnote_changed();
    p->relaunch = 0;
    resihp__record_event(g.record, "spare", resihp__coord_step(g.coord), r,
                         RESIHP__RECORD_NONE, "none-left", NULL, -1);
    resihp__coord_mark_failed(g.coord, r, "no spare");
    return -1;
  }
  return start_step(r, idx, g.K, initial, !initial);
}

/* Replica r's step on the nn nodes idx (spares it is promoted to when
 * promote; a shrink in place onto its own when neither that nor
 * initial), as many ranks on each as on every replica's node. */
static int start_step(int r, const int *idx, int nn, int initial,
                      int promote) {
  replica_t *p = &g.reps[r];
  char nodelist[4096] = "";
  size_t off = 0;
  for (int i = 0; i < nn; i++) {
    g.nodes[idx[i]].owner = r;
    if (promote)
      resihp__coord_spare_mark(g.coord, g.nodes[idx[i]].name,
                               RESIHP__SPARE_PROMOTED, r, NULL);
    p->nodes[i] = idx[i];
    off += (size_t)snprintf(nodelist + off, sizeof(nodelist) - off, "%s%s",
                            i ? "," : "", g.nodes[idx[i]].name);
  }
  p->nnodes = nn;
  p->sh.killed = 0;
  p->sh.lost = 0;
  p->sh.wait = 0;
  char inj[2048], opt_res[4200], opt_rep[64], opt_co[640], nk[16], nr[16],
      jn[64], mpi[80];
  inject_for(r, inj, sizeof(inj));
  snprintf(opt_res, sizeof(opt_res), "--resilient=secret-file=%s",
           g.secret_file);
  snprintf(opt_rep, sizeof(opt_rep), "--resilient-replica=%d", r);
  snprintf(opt_co, sizeof(opt_co), "--resilient-coordinator=%s", g.coords);
  snprintf(nk, sizeof(nk), "%d", nn);
  snprintf(nr, sizeof(nr), "%d", g.ranks / g.K * nn);
  snprintf(jn, sizeof(jn), "--job-name=%s", step_name(r));
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
  /* a shrink in place (neither a first launch nor a spare): Slurm holds
   * the survivors' nodes for the failed step until the dead node is DOWN
   * (about SlurmdTimeout): the new step shares them meanwhile */
  if (!initial && !promote)
    argv0[na++] = "--overlap";
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
    /* the replicas' first launches time the burn-in the spares are
     * judged against (recovery/job.c); a replacement does not wait for it */
    if (initial && !g.no_burn_in)
      setenv("RESIHP_BURNIN_BYTES", "0", 1);
    else
      unsetenv("RESIHP_BURNIN_BYTES");
    execvp("srun", argv);
    fprintf(stderr, "resihp-run: cannot run srun: %s\n", strerror(errno));
    _exit(127);
  }
  free(argv);
  if (pid < 0)
    return -1;
  p->pid = pid;
  p->suspects_rechecked = 0;
  p->t_launch = resihp__now_ms();
  p->kill_at = 0;
  p->connected = 0;
  p->relaunch = 0;
  p->launches++;
  if (p->launches > 1) {
    g.nreplacements++;
    resihp__coord_expect(g.coord, r, 1);
    if (promote)
      resihp__record_event(g.record, "spare", resihp__coord_step(g.coord), r,
                           RESIHP__RECORD_NONE, "taken", nodelist, -1);
  }
  say("replica %d: step launched on %s%s%s", r, nodelist,
      inj[0] ? ", injecting " : "", inj);
  return 0;
}

/* The sruns launched since the last record: record their pids, then let
 * them run (gate.h). A primary killed before the record leaves none
 * running; one killed after it, before they run, leaves their exits to
 * say so (ended). */
void open_gates(void) {
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

void release_nodes(int r, int how) {
  g.ldirty = 1;
  replica_t *p = &g.reps[r];
  for (int i = 0; i < p->nnodes; i++) {
    node_t *n = &g.nodes[p->nodes[i]];
    p->sh.was[i] = p->nodes[i];
    if (n->owner == r)
      n->owner = -1;
    if (how != NODE_OK && n->bad != NODE_BAD) {
      g.nbad += how == NODE_BAD;
      n->bad = how;
    }
  }
  p->sh.nwas = p->nnodes;
  p->nnodes = 0;
}

/* Kill the step at once, then cancel it (a signal alone does not end a
 * step on a dead node). The ids are the claim of a rank or a standby:
 * only a step of this job that bears the name the launcher gave the one
 * it launched (name: resihp-replica-R, resihp-standby) is ever touched,
 * which slurmctld is asked in the background. */
void cancel_step(long jobid, long stepid, const char *name) {
  if (jobid < 0 || stepid < 0 || jobid != strtol(g.jobid, NULL, 10))
    return;
  char id[64];
  snprintf(id, sizeof(id), "%ld.%ld", jobid, stepid);
  pid_t p = fork();
  if (p > 0) {
    add_helper(p);
    return;
  }
  if (p < 0) {
    say("cannot cancel step %s: %s", id, strerror(errno));
    return;
  }
  child_setup(0);
  if (!resihp__slurm_step_named(id, name)) {
    say("step %s is not %s (or Slurm does not know it): not cancelled", id,
        name);
    _exit(0);
  }
  char *const kill9[] = {"scancel", "--quiet", "--signal=KILL", id, NULL};
  char *const cancel[] = {"scancel", "--quiet", id, NULL};
  resihp__slurm_run(kill9, 1, NULL, NULL);
  execvp(cancel[0], cancel);
  _exit(127);
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
    jobnote_ended(pid, st);
    for (int r = 0; r < g.R; r++)
      if (g.reps[r].kill_cmd == pid) {
        g.reps[r].kill_cmd = 0;
        resihp__coord_fault_landed(g.coord, r);
      }
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
        release_nodes(r, NODE_OK);
        if (p->launches-- > 1)
          g.nreplacements--;
        if (!p->given_up)
          p->relaunch = 1;
        continue;
      }
      /* after the job, a step that ends badly on its own (a rank's
       * clean-up that fails) leaves the results standing, but is said */
      if (!g.ending && st != 0 && resihp__coord_finished(g.coord, r))
        p->done_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (!p->connected && !p->relaunch && !p->given_up && !g.stopping &&
          resihp__coord_state(g.coord) == RESIHP__COORD_RUNNING)
        diagnose(r, st);
    }
  }
}

void reap(void) {
  int st;
  pid_t pid;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
    resihp__verdict_reaped(&g.verdict, pid);
    ended(pid, st);
  }
  while (g.keeper && resihp__keeper_orphan(g.keeper, &pid, &st))
    ended(pid, st);
}

/* slurmctld's answer about node name: kept for the shrinks that wait for
 * it (shrink_in_place), which act on a DOWN at once. */
static void on_verdict(const char *name, int down, void *ud) {
  (void)ud;
  for (int r = 0; r < g.R; r++) {
    replica_t *p = &g.reps[r];
    for (int i = 0; p->sh.wait && i < p->sh.nwas; i++) {
      node_t *x = &g.nodes[p->sh.was[i]];
      if (strcmp(x->name, name))
        continue;
      x->slurm_down = down;
      if (down)
        p->sh.poll = 0;
    }
  }
}

/* The replicas waiting for Slurm's verdict on their nodes: the last
 * query's answer, and the next query once a second, about all their nodes
 * not known DOWN yet, in the background (verdict.h). */
void verdict_tick(void) {
  resihp__verdict_read(&g.verdict, on_verdict, NULL);
  if (!resihp__verdict_due(&g.verdict))
    return;
  const char **names = NULL;
  size_t n = 0, cap = 0;
  for (int k = 0; k < g.R; k++) {
    replica_t *p = &g.reps[(g.verdict_from + k) % g.R];
    for (int i = 0; p->sh.wait && i < p->sh.nwas; i++) {
      node_t *x = &g.nodes[p->sh.was[i]];
      if (x->slurm_down)
        continue;
      if (n == cap) {
        size_t c2 = cap ? 2 * cap : 64;
        const char **m = realloc(names, c2 * sizeof(*names));
        if (!m)
          break; /* (asked about those it has) */
        names = m;
        cap = c2;
      }
      names[n++] = x->name;
    }
  }
  if (n) {
    g.verdict_from = (g.verdict_from + 1) % g.R;
    if (resihp__verdict_ask(&g.verdict, names, (int)n) < 0)
      say("cannot ask slurmctld about nodes (%s): asking again in a second",
          strerror(errno));
  }
  free(names);
}

/* Replica r's rank joined: where its process is, so that an operator can
 * act on it (its other ranks: scontrol listpids of its step). */
static void say_joined(int r) {
  long pid = 0, jobid = -1, stepid = -1;
  const char *node = "?";
  if (resihp__coord_replica_proc(g.coord, r, &pid, &node, &jobid, &stepid))
    return;
  char why[160];
  snprintf(why, sizeof(why), "pid %ld on %s, step %ld.%ld", pid, node, jobid,
           stepid);
  say("replica %d: joined, its leader rank is pid %ld on node %s (step "
      "%ld.%ld%s)",
      r, pid, node, jobid, stepid,
      g.ranks > 1 || g.K > 1 ? "; all its ranks: scontrol listpids" : "");
  resihp__record_event(g.record, "joined", resihp__coord_step(g.coord), r,
                       RESIHP__RECORD_NONE, NULL, why, -1);
}

void tick(void) {
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
      g.joined = 1;
      g.ldirty = 1;
      say_joined(r);
      /* a swap's replacement is a launch like this one: priced so until
       * a swap is measured, unless --swap-cost said what it costs */
      if (g.swap_cost_s == -2 && p->t_launch)
        resihp__coord_note_launch(g.coord, (double)(now - p->t_launch) / 1e3);
    }
    if (p->pid > 0 && !p->connected && !p->kill_at &&
        now - p->t_launch > (int64_t)g.launch_timeout_s * 1000) {
      say("replica %d: rank did not join within %d s: marking its nodes bad", r,
          g.launch_timeout_s);
      g.ldirty = 1;
      kill(p->pid, SIGKILL);
      release_nodes(r, NODE_BAD);
      p->relaunch = 1;
      p->tries++;
    }
    if (p->relaunch && !g.stopping &&
        resihp__coord_state(g.coord) == RESIHP__COORD_RUNNING) {
      int idx[64];
      /* no healthy spare yet, but some are still being checked: wait;
       * suspect ones are checked again once for it (spares.c) */
      if (p->launches && p->tries <= 3 && pick_nodes(idx, g.K, 0)) {
        if (!p->suspects_rechecked && !g.no_burn_in) {
          p->suspects_rechecked = 1; /* (and waits for those in flight) */
          if (recheck_suspects())
            say("replica %d: no healthy spare; checking the suspect one(s) "
                "again first",
                r);
        }
        if (spares_pending(p->suspects_rechecked))
          continue;
        /* Re-checked and still only slow ones: a slow replica still
         * trains (the fail-slow detector gives it fewer microbatches, and
         * swaps it once a healthy spare appears), a dropped one does not
         * (and a busy moment can make a healthy spare look slow). A spare
         * whose burn-in failed is never taken. */
        take_slow = 1;
        if (!pick_nodes(idx, g.K, 0))
          say("replica %d: only spares slower than the replicas are left: "
              "taking one rather than going on without the replica (the "
              "fail-slow detector watches it)",
              r);
        else
          take_slow = 0;
      }
      if (p->tries > 3) {
        say("replica %d: giving up after %d failed launches", r, p->tries);
        snprintf(p->why, sizeof(p->why), "%d launches failed", p->tries);
        jobnote_changed();
        g.ldirty = 1;
        p->given_up = 1;
        p->relaunch = 0;
        resihp__coord_mark_failed(g.coord, r, "launch failed");
      } else {
        launch(r);
      }
      take_slow = 0;
    }
  }
}
