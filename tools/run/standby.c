/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: the standby coordinator on another node (standby.h) - its
 * launch and watch in the primary, and the standby's side until it takes
 * over. */
#include "config.h"

#include "../../libresihp/transport/msgauth.h"
#include "run.h"
#include "slurm.h"

#include <resihp.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>

/* The coordinator's addresses the ranks get (at launch, and COORDS to
 * those running): ours, then the standby's once it follows the feed. */
void update_coords(void) {
  char ep[64], node[64], step[64];
  unsigned gen = 0;
  int have = resihp__feed_standby(g.feed, ep, sizeof(ep), node, sizeof(node),
                                  step, sizeof(step), &gen);
  if (g.coords[0] && gen == g.standby_gen)
    return;
  g.standby_gen = gen;
  g.standby_lost_ms = have ? 0 : resihp__now_ms();
  if (have) {
    g.lease_on = 1; /* a standby holds our records: it may take over */
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
void launch_standby(void) {
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
  /* this one only: an old standby that comes back is refused, and so is
   * anyone else with the job's secret who names its node: it must say the
   * token only its step's environment holds */
  uint8_t rnd[16];
  if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
    say("warning: no randomness for the standby's token: %s; the job goes "
        "on without a standby for now",
        strerror(errno));
    return;
  }
  resihp__hex(g.standby_token, rnd, sizeof(rnd));
  resihp__feed_expect(g.feed, g.nodes[pick].name, g.standby_token);
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
    setenv("RESIHP_STANDBY_TOKEN", g.standby_token, 1);
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
void check_standby(void) {
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
    cancel_step(sj, ss, "resihp-standby");
  kill(g.standby_pid, SIGKILL);
  g.standby_pid = 0; /* its exit, when reaped, is nobody's */
  g.standby_lost_ms = 0;
  g.ldirty = 1;
}

/* A standby that took over: the replicas with a node on the lost
 * primary's node are gone with it (Slurm declared it DOWN; or, on the
 * replicas' word, they did not vouch: every live member had the standby's
 * whole wait to come), and fail now instead of at the end of the
 * reconnect wait, which is for the replicas that are alive and looking
 * for the new address. */
void fail_lost_replicas(void) {
  for (int r = 0; r < g.R; r++) {
    const replica_t *p = &g.reps[r];
    if (g.vouched && g.vouchers && g.vouchers[r])
      continue; /* it lost the primary, not its life */
    for (int i = 0; i < p->nnodes; i++)
      if (!strcmp(g.nodes[p->nodes[i]].name, g.primary_node)) {
        char why[96];
        if (g.vouched)
          snprintf(why, sizeof(why),
                   "its node %s went with the primary; it did not vouch",
                   g.primary_node);
        else
          snprintf(why, sizeof(why), "its node %s is DOWN", g.primary_node);
        resihp__coord_fail_lost(g.coord, r, why);
        break;
      }
  }
}

/* slurmctld's answer about the primary's node (primary_down) */
static void on_primary_verdict(const char *name, int down, void *ud) {
  if (!strcmp(name, g.primary_node))
    *(int *)ud = down;
}

/* Whether Slurm said the primary's node is DOWN: asked in the background
 * at most once a second (verdict.h), so that a slurmctld slow to answer
 * does not hold the replicas' vouches (a takeover by them is not Slurm's
 * to wait for). The standby reaps its query itself: no launcher loop runs
 * yet. */
static int primary_down(void) {
  static int down;
  if (resihp__verdict_read(&g.verdict, on_primary_verdict, &down) &&
      g.verdict.pid > 0) {
    pid_t p = g.verdict.pid; /* (its output ended: it has exited) */
    while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
      ;
    resihp__verdict_reaped(&g.verdict, p);
  }
  const char *name = g.primary_node;
  resihp__verdict_ask(&g.verdict, &name, 1); /* (when due) */
  return down;
}

struct follow_ud {
  char **rec;
  size_t *len;
  int heard;
};

/* While the feed is followed: the replicas that dial us are answered (at
 * once: RELEASED, the primary speaks to us). */
static void follow_tick(void *ud, int heard) {
  struct follow_ud *u = ud;
  if (heard) {
    u->heard = 1;
    vouching_heard();
  }
  vouching_step(0, *u->rec, *u->len);
}

/* The standby's life until it takes over: follow the primary's feed;
 * when the link fails, take over once enough replicas vouched that they
 * lost the primary too and its lease ran out (control/vouch.h), or once
 * Slurm declares the primary's node DOWN; else (a local failover, a
 * restart) follow again. 1 with the record to take over from, 0 when the
 * job is over (BYE), or a negative code. */
int standby_follow(const uint8_t *secret, size_t slen, char **rec,
                   size_t *len) {
  char hello[512];
  const char *sj = getenv("SLURM_JOB_ID"), *ss = getenv("SLURM_STEP_ID");
  snprintf(hello, sizeof(hello), "STANDBY ep=%s node=%s step=%s.%s token=%s",
           g.coord_ep, g.node_self, sj ? sj : "0", ss ? ss : "0",
           g.standby_token[0] ? g.standby_token : "-");
  say("standby coordinator on %s (%s) for the primary on %s", g.node_self,
      g.coord_ep, g.primary_node);
  vouching_start(secret, slen);
  int64_t told = 0, lost = 0;
  const int silence = g.hang_ms + 2000;
  int ret = RESIHP_ECLOSED;
  while (!got_signal) {
    int64_t since = resihp__now_ms();
    /* what the last record was, to tell whether this call got one */
    size_t blen = *rec ? *len : 0;
    char *before = blen ? malloc(blen) : NULL;
    if (before)
      memcpy(before, *rec, blen);
    struct follow_ud u = {rec, len, 0};
    int rc = resihp__feed_follow(g.standby_of, secret, slen, hello, silence,
                                 rec, len, follow_tick, &u);
    int fresh = *rec && (blen ? before && (*len != blen ||
                                           memcmp(before, *rec, blen))
                              : 1);
    free(before);
    if (rc == 1) {
      ret = 0;
      break;
    }
    /* When the primary died, as far as this side can tell: after its last
     * record of this call (so after the call began) and after the feed's
     * last possible sign of life (the call ends at most `silence` after
     * one), before now. A call that got no record (nobody answered) says
     * nothing new; an outage that began so is not bounded (the summary
     * then says so). */
    int64_t now = resihp__now_ms();
    if (fresh) {
      g.loss_lo_ms = now - silence > since ? now - silence : since;
      g.loss_hi_ms = now;
    }
    if (u.heard || !lost)
      lost = now; /* the feed is lost from now (it spoke in this call) */
    if (primary_down()) {
      if (*rec) {
        ret = 1;
        break;
      }
      say("the primary's node %s is DOWN and no state came from it: nothing "
          "to take over",
          g.primary_node);
      ret = RESIHP_ENOENT;
      break;
    }
    if (resihp__now_ms() - told > 60000) {
      told = resihp__now_ms();
      say("the primary's feed at %s: %s; its node %s is up: following again",
          g.standby_of, resihp_strerror(rc), g.primary_node);
    }
    /* half a second for the replicas' word (and Slurm's) before the next
     * try */
    int64_t until = resihp__now_ms() + 500;
    while (
        !got_signal && *rec && resihp__now_ms() < until &&
        !(g.vouched = vouching_ready(lost, &g.vouch_count, &g.vouch_members)) &&
        !primary_down())
      vouching_step(
          (int)(until - resihp__now_ms() < 50 ? until - resihp__now_ms() : 50),
          *rec, *len);
    if (!g.vouched && *rec && primary_down()) {
      ret = 1; /* (said by the caller, as at the top) */
      break;
    }
    if (g.vouched) {
      say("%d of the %d members lost the primary on %s and vouched for a "
          "takeover, and its lease ran out (%lld ms since the feed's loss): "
          "taking over before Slurm's verdict",
          g.vouch_count, g.vouch_members, g.primary_node,
          (long long)(resihp__now_ms() - lost));
      ret = 1;
      break;
    }
    if (!*rec)
      usleep(500000);
  }
  /* (a query in flight is not the primary's to reap: the keeper's child) */
  resihp__verdict_finish(&g.verdict);
  vouching_end();
  return ret;
}

/* A standby that took over, at the end: the batch script is gone with
 * its node, and Slurm requeues a job with no step left, which would run
 * the whole training again. Cancel the job instead (this step with it:
 * the last thing done). */
void end_job(void) {
  say("the job's batch host was lost: ending job %s (scancel) so that Slurm "
      "does not requeue it",
      g.jobid);
  char *argv[] = {"scancel", "--quiet", g.jobid, NULL};
  resihp__slurm_run(argv, 0, NULL, NULL);
}
