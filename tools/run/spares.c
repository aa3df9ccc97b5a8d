/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: spare nodes' check steps, and the diagnosis of a replica
 * whose step ended before its rank joined (a broken node, or a program
 * that cannot run). */
#include "config.h"

#include "run.h"

#include <stdlib.h>

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
    lim = lim < 5 ? 5 : lim > 30 ? 30 : lim;
    snprintf(limit, sizeof(limit), "%d", lim);
    /* the burn-in (probe/burnin.h), on spares only (a diagnosed node's
     * health is wanted, not its speed), at the replicas' all-reduce size
     * once known, within a third of the check's time so that a node too
     * slow to finish still registers, as suspect */
    char bytes[24], bms[16];
    snprintf(bytes, sizeof(bytes), "%ld", resihp__coord_burnin_bytes(g.coord));
    snprintf(bms, sizeof(bms), "%d", lim * 1000 / 3);
    setenv("RESIHP_BURNIN_BYTES",
           g.no_burn_in || n->owner >= 0 ? "off" : bytes, 1);
    setenv("RESIHP_BURNIN_MS", bms, 1);
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
void check_spares(void) {
  for (int i = 0; i < g.nnodes; i++) {
    node_t *n = &g.nodes[i];
    if (!n->bad && n->owner < 0 && n->check <= 0)
      start_check(i);
  }
}

/* A replacement found no healthy spare: check the free suspect spares
 * again now (burn-in at need, the way it would run if not ahead), rather
 * than give the replica up for a spare that a busy moment made look slow.
 * The number of checks started; the replacement waits for them. */
int recheck_suspects(void) {
  int n = 0;
  for (int i = 0; i < g.nnodes; i++) {
    node_t *nd = &g.nodes[i];
    if (!nd->bad && nd->owner < 0 && nd->check <= 0 &&
        resihp__coord_spare_state(g.coord, nd->name, NULL) ==
            RESIHP__SPARE_SUSPECT) {
      start_check(i);
      n += nd->check > 0;
    }
  }
  return n;
}

static void diagnosis_done(int r);

/* Replica r's step ended before its rank joined. A node that cannot run a
 * task (dead slurmd, failed step-start probe) does that, but so does a
 * program that cannot start or leaves at once; burning spares on the
 * latter only spreads the failure. Check its nodes the way spares are
 * checked; check_done decides. */
void diagnose(int r, int st) {
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

/* An srun status that says its task died of a signal (128 + n). */
static int early_by_signal(int status) {
  return status > 128 && status <= 128 + 64;
}

/* Replica r's program left before joining, on healthy nodes (names), on
 * its own (not killed). Replica r is given up; its nodes stay its own
 * (no spare for a program that leaves). That is the program's failure,
 * which ends the run, only if the coordinator refused its first launch's
 * HELLO for its configuration, or every replica has now left so at
 * start-up: replicas that train go on without it. */
static void program_left(int r, const char *names) {
  replica_t *p = &g.reps[r];
  p->given_up = 1;
  jobnote_changed();
  /* joined: a rank has joined since this process launched it, or one is
   * connected (a primary restored from a record only sees the latter) */
  int live = 0, joined = g.joined;
  for (int q = 0; q < g.R; q++) {
    live += !g.reps[q].given_up;
    joined |= g.reps[q].connected;
  }
  char refused[32];
  int cfg = resihp__coord_refused(g.coord, r, refused, sizeof(refused)) &&
            p->launches == 1;
  if (cfg || (!live && !joined)) {
    fprintf(stderr,
            "resihp-run: %s: left before joining the coordinator (srun "
            "status %d) on %s, which passed %s health check - the program, "
            "not the node, failed; no spare used (srun's messages above say "
            "why)\n",
            g.prog[0], p->early_status, names, p->nnodes > 1 ? "their" : "its");
    g.program_failed = 1;
    resihp__coord_mark_failed(g.coord, r, "program failed to start");
    return;
  }
  snprintf(p->why, sizeof(p->why),
           "its %s left before joining (srun status %d) on %.40s, which "
           "passed %s health check",
           p->launches > 1 ? "replacement" : "program", p->early_status,
           names, p->nnodes > 1 ? "their" : "its");
  say("replica %d: %s: given up, no spare used; the %d other replica%s go%s "
      "on",
      r, p->why, live, live == 1 ? "" : "s", live == 1 ? "es" : "");
  resihp__coord_mark_failed(g.coord, r, p->why);
}

/* Every node of a diagnosed replica has answered: healthy nodes mean the
 * program failed (or a kill from outside); otherwise the bad nodes go and
 * a replacement starts. */
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
  if (healthy && !g.stopping && early_by_signal(p->early_status) &&
      !resihp__coord_refused(g.coord, r, NULL, 0)) {
    /* killed (SIGKILL from outside, the OOM killer): its program may be
     * fine and its nodes are: another try, as for a node that failed */
    say("replica %d: its step was killed by signal %d before its rank "
        "joined, on %s, which passed %s health check: a fault from outside, "
        "not the program's; launching it again",
        r, p->early_status - 128, names, p->nnodes > 1 ? "their" : "its");
    release_nodes(r, NODE_OK);
    p->relaunch = 1;
    p->tries++;
    return;
  }
  if (healthy && !g.stopping) {
    program_left(r, names);
    return;
  }
  if (g.stopping) {
    release_nodes(r, NODE_OK);
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
void check_done(int i, int st) {
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
void check_unopened(int i) {
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
