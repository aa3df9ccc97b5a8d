/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: what the coordinator tells the launcher (its callbacks): a
 * replica failed, a rank's health, a fault a rank reports, a spare's
 * registration. */
#include "config.h"

#include "run.h"

#include <resihp/planner.h>

#include <string.h>

/* Replica r's step J.S ends (cancelled, its srun killed if it lingers),
 * its nodes are released as `how` says (NODE_BAD, NODE_SLOW), and a
 * replacement is wanted (the injections this replica announced have
 * fired). */
static void replace(int r, long jobid, long stepid, int how) {
  replica_t *p = &g.reps[r];
  g.ldirty = 1;
  cancel_step(jobid, stepid, step_name(r));
  if (p->pid > 0)
    p->kill_at = resihp__now_ms() + 2000;
  release_nodes(r, how);
  p->relaunch = 1;
  p->tries = 0;
}

void on_failed(void *ud, int r, const char *node, long jobid, long stepid,
               const char *why) {
  (void)ud;
  say("replica %d failed (%s, node %s): cancelling step %ld.%ld, marking "
      "its node bad and starting a replacement",
      r, why, node, jobid, stepid);
  jobnote_failure(r, node, why, 0);
  replace(r, jobid, stepid, NODE_BAD);
  g.reps[r].sh.lost = resihp__coord_lost_ranks(g.coord, r);
}

/* The coordinator swapped a slow replica out for a spare: its process is
 * retired (the coordinator refuses it from now on), its step ends, its
 * nodes are not blamed but not given out again either (they were slow),
 * and the replacement starts as after a failure. */
void on_swapped(void *ud, int r, const char *node, long jobid, long stepid,
                const char *why) {
  (void)ud;
  say("replica %d swapped out (%s): node %s is slow (not bad, not used "
      "again); cancelling step %ld.%ld and starting the replacement on a "
      "spare",
      r, why, node, jobid, stepid);
  jobnote_failure(r, node, why, 1);
  replace(r, jobid, stepid, NODE_SLOW);
}

/* A replica's speed changed (the coordinator's detector). */
void on_health(void *ud, int r, int shard, const char *state, double factor,
               long step) {
  (void)ud;
  /* with --assign even nothing moves: say what is done, not what is not */
  int even = g.assign == RESIHP_ASSIGN_EVEN;
  long pid = 0, jobid = -1, stepid = -1;
  const char *node = "?";
  resihp__coord_replica_proc(g.coord, r, &pid, &node, &jobid, &stepid);
  if (factor > 1)
    say("replica %d: %s x%.2f at step %ld (rank %d; leader pid %ld on %s, "
        "step %ld.%ld): %s",
        r, state, factor, step, shard, pid, node, jobid, stepid,
        even ? "--assign even: its microbatches stay"
             : "it gets fewer microbatches");
  else
    say("replica %d: %s at step %ld: %s", r, state, step,
        even ? "--assign even: nothing had moved"
             : "its microbatches return");
  /* the action taken, for a report of the events: its quota is cut or
   * given back (or, with --assign even, nothing moves) */
  char act[96];
  if (factor > 1)
    snprintf(act, sizeof(act), "x%.2f: %s", factor,
             even ? "its microbatches stay (--assign even)"
                  : "fewer microbatches");
  else
    snprintf(act, sizeof(act), "%s",
             even ? "nothing had moved (--assign even)"
                  : "its microbatches return");
  resihp__record_event(g.record, factor > 1 ? "slow" : "healthy", step, r,
                       RESIHP__RECORD_NONE, state, act, -1);
}

/* A healthy spare for a swap, now. */
int spare_free(void *ud) {
  (void)ud;
  int idx[64];
  return !g.stopping && !pick_nodes(idx, g.K, 0);
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
int on_fault(void *ud, int r, const char *kind, const char *node, long step) {
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
  replica_t *p = &g.reps[r];
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
  p->sh.killed = ni + 1;
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
  /* the node dies when the command has done its work: its detection is
   * timed from the command's end (resihp__coord_fault_landed in ended) */
  pid_t kp = spawn_argv(argv, NULL, g.quiet);
  p->kill_cmd = kp > 0 ? kp : 0;
  resihp__cmd_argv_free(argv);
  return 0;
}

/* The coordinator heard from a spare agent. */
void on_spare(void *ud, const char *node, int state, const char *summary) {
  (void)ud;
  for (int i = 0; i < g.nnodes; i++) {
    node_t *n = &g.nodes[i];
    if (strcmp(n->name, node) || n->owner >= 0)
      continue; /* a replica's node being diagnosed is no spare */
    long regs = 0;
    resihp__coord_spare_state(g.coord, node, &regs);
    if (state == RESIHP__SPARE_HEALTHY && regs == 1) {
      say("spare %s is ready (registered healthy)", node);
      resihp__record_event(g.record, "spare", resihp__coord_step(g.coord),
                           RESIHP__RECORD_NONE, RESIHP__RECORD_NONE, "ready",
                           node, -1);
    } else if (state == RESIHP__SPARE_FAILED_PROBE && !n->bad) {
      say("spare %s failed its health probe (%s): marked bad", node, summary);
      resihp__record_event(g.record, "spare", resihp__coord_step(g.coord),
                           RESIHP__RECORD_NONE, RESIHP__RECORD_NONE,
                           "failed-probe", node, -1);
    } else if (state == RESIHP__SPARE_SUSPECT && !n->suspect) {
      say("spare %s refused as suspect (%s): not promoted, checked again "
          "later",
          node, summary);
      resihp__record_event(g.record, "spare", resihp__coord_step(g.coord),
                           RESIHP__RECORD_NONE, RESIHP__RECORD_NONE,
                           "suspect", node, -1);
    } else if (state == RESIHP__SPARE_SUSPECT && regs > n->suspect_regs) {
      /* its re-check (--spare-recheck, or at need before a replacement)
       * came back slow again: said, so that the pool's state is seen */
      say("spare %s checked again: still suspect (%s)", node, summary);
    } else if (state == RESIHP__SPARE_HEALTHY && n->suspect) {
      say("spare %s passed its burn-in again: healthy", node);
      resihp__record_event(g.record, "spare", resihp__coord_step(g.coord),
                           RESIHP__RECORD_NONE, RESIHP__RECORD_NONE, "ready",
                           node, -1);
    }
    n->suspect = state == RESIHP__SPARE_SUSPECT;
    n->suspect_regs = n->suspect ? regs : 0;
  }
}
