/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: the primary (keeper.h) - the coordinator and the launcher's
 * main loop, how the run stops, the summary and the exit status. */
#include "config.h"

#include "run.h"

#include <resihp.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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
    const replica_t *p = &g.reps[r];
    if (p->given_up) {
      /* gone for the rest of the run: say so, not a stale quota */
      off += (size_t)snprintf(line + off, sizeof(line) - off,
                              " r%d:dropped (%s)", r,
                              !strcmp(p->why, WHY_NO_SPARE) ? "no spare"
                                                            : "given up");
      continue;
    }
    if (!resihp__coord_connected(g.coord, r)) {
      off += (size_t)snprintf(line + off, sizeof(line) - off, " r%d:%s", r,
                              p->relaunch || p->pid > 0 ? "replacing"
                                                        : "down");
      continue;
    }
    double slow;
    int quota;
    const char *st;
    resihp__coord_replica_speed(g.coord, r, &slow, &quota, &st);
    int healthy = !strcmp(st, "healthy");
    off += (size_t)snprintf(line + off, sizeof(line) - off, " r%d:%s%s%d", r,
                            healthy ? "" : st, healthy ? "" : "/", quota);
    if (slow > 1)
      off += (size_t)snprintf(line + off, sizeof(line) - off, "(x%.2f)", slow);
  }
  say("progress: step %ld; microbatches per replica:%s", step, line);
  g.progress_step = step;
  g.next_progress = now + g.progress_s * 1000L;
}

/* How the run ended: its exit status, and the summary's one-line
 * outcome in outcome (len bytes). killed: stopped at once (a second
 * signal); state: the coordinator's. */
static int outcome_of(int killed, int state, char *outcome, size_t len) {
  long end_step = resihp__coord_step(g.coord);
  /* resumable at the step the run stopped at: saved there, or a resumed
   * run stopped before it trained (the state it came from is the latest) */
  long resumable = g.saved_step >= 0 && g.saved_step == end_step ? end_step
                   : g.resuming && end_step == g.resume.step     ? end_step
                                                                 : -1;
  const char *lw = resihp__coord_lost_why(g.coord);
  int ret = EXIT_OK;
  if (killed) {
    ret = EXIT_SIGNAL;
    snprintf(outcome, len, "stopped at once by a second signal, mid-step %ld",
             end_step);
  } else if (g.resume_mismatch) {
    ret = EXIT_USAGE;
    snprintf(outcome, len,
             "not resumed: the program does not match the state saved");
  } else if (g.program_failed || g.aborted) {
    ret = EXIT_PROGRAM;
    snprintf(outcome, len,
             "stopped by the program (it could not start, or aborted)");
  } else if (state != RESIHP__COORD_DONE) {
    ret = EXIT_LOST;
    snprintf(outcome, len, "LOST %s",
             lw[0] ? lw : "(every replica failed and no spare is left)");
  } else if (got_signal && end_step < job_steps()) {
    ret = resumable >= 0 ? EXIT_RESUMABLE : EXIT_STOPPED;
    if (resumable >= 0)
      snprintf(outcome, len,
               "stopped, resumable at step %ld (resihp-run --resume %s)",
               resumable, g.state_dir);
    else
      snprintf(outcome, len, "stopped at step %ld%s", end_step,
               g.state_dir[0] ? " (the state could not be saved)" : "");
  } else {
    snprintf(outcome, len, "completed");
  }
  return ret;
}

/* The end of the job's steps: the standby leaves, the steps end on their
 * own (not waited for when killed), what is left is cancelled, and every
 * srun is gone before resihp-run is. */
static void end_steps(int killed, int state, resihp__keeper_t *kp) {
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
  g.ending = 1;
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
}

/* The helpers (scancel) get a moment, then go; a kill-node command that
 * has started finishes its work (up to a minute: a node left half killed
 * is worse than a late end); spare checks still running are ended. */
static void end_helpers(resihp__keeper_t *kp) {
  for (int i = 0; i < 600; i++) {
    reap();
    int left = 0, killing = 0;
    for (size_t k = 0; k < sizeof(helpers) / sizeof(helpers[0]); k++)
      left += helpers[k] != 0;
    for (int r = 0; r < g.R; r++)
      killing += g.reps[r].kill_cmd > 0;
    if (!left || (i >= 20 && !killing))
      break;
    resihp__keeper_beat(kp);
    usleep(100000);
  }
  for (size_t k = 0; k < sizeof(helpers) / sizeof(helpers[0]); k++)
    if (helpers[k])
      kill(helpers[k], SIGKILL);
  resihp__verdict_finish(&g.verdict); /* (a question nobody waits for) */
  /* SIGTERM: timeout(1) passes it on to its srun, SIGKILL would orphan it */
  for (int i = 0; i < g.nnodes; i++)
    if (g.nodes[i].check > 0)
      kill(g.nodes[i].check, SIGTERM);
  while (waitpid(-1, NULL, WNOHANG) > 0)
    ;
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
int primary_main(void *ud, const char *snap, size_t snaplen,
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
  g.prim_start_ms = resihp__now_ms(); /* its first half bound: lease.c */
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
    resihp__feed_expect(g.feed, g.nodes[g.standby_node].name,
                        g.standby_token);
  update_coords();
  jobnote_start();
  if (g.took_over) {
    /* a new term: a replica that follows this coordinator never obeys
     * the old primary again (control/vouch.h) */
    resihp__coord_set_term(g.coord, resihp__coord_term(g.coord) + 1);
    /* nobody holds this term's records yet (the old primary is fenced by
     * the term): the lease applies once this one's own standby follows */
    g.lease_on = 0;
    if (g.vouched)
      say("took over from the primary on %s on the word of %d of its %d "
          "members, before Slurm's verdict: the coordinator continues here "
          "(%s) at step %ld, term %u",
          g.primary_node, g.vouch_count, g.vouch_members, g.coord_ep,
          resihp__coord_step(g.coord), (unsigned)resihp__coord_term(g.coord));
    else
      say("took over from the primary on %s, which Slurm declared DOWN: the "
          "coordinator continues here (%s) at step %ld, term %u",
          g.primary_node, g.coord_ep, resihp__coord_step(g.coord),
          (unsigned)resihp__coord_term(g.coord));
    resihp__coord_set_loss(g.coord, g.loss_lo_ms, g.loss_hi_ms);
    fail_lost_replicas();
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
    resihp__record_event(
        g.record, "failover", resihp__coord_step(g.coord), RESIHP__RECORD_NONE,
        (long)resihp__coord_epoch(g.coord), fwhy, pidtxt, secs);
  } else {
    say("job %s: %d replica(s) x %d node(s), %d spare(s) of %d nodes; "
        "coordinator %s (listening on %s, pid %ld)",
        g.jobid, g.R, g.K, spares_left() - g.R, g.nnodes, g.coord_ep,
        g.co.bind_host, (long)getpid());
    if (g.resuming)
      say("resuming the training at step %ld of %ld from %s (saved by a run "
          "of %d replica(s))",
          g.resume.step, g.resume.steps, g.resume_step_dir, g.resume.replicas);
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
  int killed = 0;
  while (resihp__coord_state(g.coord) == RESIHP__COORD_RUNNING) {
    /* a save holds the boundary: say so once per step saved */
    if (resihp__coord_saving(g.coord) &&
        g.saving_said != resihp__coord_step(g.coord)) {
      g.saving_said = resihp__coord_step(g.coord);
      say("saving the state of step %ld%s", g.saving_said,
          g.stopping ? " (send the signal again to stop without saving)" : "");
    }
    if (nsignals >= 2 && !g.save_cancelled && resihp__coord_saving(g.coord)) {
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
    /* cut off from its standby and from too many members: a standby may
     * have taken over (control/vouch.h); it only listens (its failures
     * wait: may_decide), and steps down past the bound */
    int decide = lease_check(kp);
    resihp__coord_poll(g.coord, 50);
    /* and again after the wait: stopped in it, woken after a takeover, it
     * must not go on to its own timers and launches */
    if (!decide || !lease_check(kp))
      continue;
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
    verdict_tick();
    tick();
    open_gates();
    update_coords();
    check_standby();
    launch_standby();
    progress();
    jobnote_tick();
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
  char outcome[4800];
  int state = resihp__coord_state(g.coord);
  int ret = outcome_of(killed, state, outcome, sizeof(outcome));
  end_steps(killed, state, kp);
  double secs = 0;
  fflush(stdout);
  /* the summary goes to stdout and, line by line, to the events (a
   * report of them shows it); without memory, to stdout only */
  char *stext = NULL;
  size_t slen = 0;
  FILE *sf = open_memstream(&stext, &slen);
  if (!sf)
    sf = stdout;
  int agree = resihp__coord_summary(g.coord, sf, &secs);
  int nslow = 0;
  for (int i = 0; i < g.nnodes; i++)
    nslow += g.nodes[i].bad == NODE_SLOW;
  fprintf(sf,
          "  replacements launched:  %d; nodes marked bad: %d; spares left: "
          "%d; nodes slow (swapped out): %d\n",
          g.nreplacements, g.nbad, spares_left(), nslow);
  for (int r = 0; r < g.R; r++)
    if (g.reps[r].given_up && g.reps[r].why[0])
      fprintf(sf, "  replica %d given up:     %s; the others went on\n", r,
              g.reps[r].why);
  for (int r = 0; r < g.R; r++)
    if (g.reps[r].done_status) {
      fprintf(sf,
              "  warning:                replica %d's step exited with status "
              "%d after the job was done (its result counts; its output "
              "says what failed)\n",
              r, g.reps[r].done_status);
      fprintf(stderr,
              "resihp-run: warning: replica %d's step exited with status %d "
              "after its rank reported its result\n",
              r, g.reps[r].done_status);
    }
  int nfo = resihp__keeper_failovers(kp, &fwhy, NULL, NULL);
  if (nfo)
    fprintf(sf, "  coordinator failovers:  %d (the last: the coordinator %s)\n",
            nfo, fwhy);
  fprintf(sf, "  wall time:              %.3f s\n",
          (double)(resihp__now_ms() - t0) / 1000.0);
  if (ret == EXIT_OK && agree != 0) {
    ret = EXIT_DISAGREE;
    snprintf(outcome, sizeof(outcome), "completed, but the results differ");
  }
  if (ret == EXIT_LOST && g.saved_step >= 0)
    snprintf(outcome + strlen(outcome), sizeof(outcome) - strlen(outcome),
             "; the state of step %ld can be resumed: resihp-run --resume %s",
             g.saved_step, g.state_dir);
  fprintf(sf, "  outcome:                %s (exit status %d)\n", outcome, ret);
  if (sf != stdout && !fclose(sf)) {
    fputs(stext, stdout);
    resihp__record_summary(g.record, stext);
  }
  free(stext);
  fflush(stdout);
  jobnote_final(outcome, kp);
  const char *lw = resihp__coord_lost_why(g.coord);
  if (ret == EXIT_LOST)
    fprintf(stderr, "resihp-run: LOST: the job cannot go on %s\n",
            lw[0] ? lw : "(every replica failed and no spare is left)");
  end_helpers(kp);
  resihp__coord_destroy(g.coord);
  resihp__record_destroy(g.record);
  make_report(kp);
  if (ledger)
    fclose(ledger);
  return ret;
}
