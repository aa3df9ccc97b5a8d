/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: the job's Comment in Slurm (jobnote.h) kept up to date: at
 * the start, after each failure, swap or dropped replica, and at the end
 * with the outcome. During the run each update is one scontrol in the
 * background, one at a time and at most one a second (a burst of failures
 * among thousands of replicas makes one update, and the coordinator never
 * waits for slurmctld); the last one is waited for, bounded. A takeover
 * primary reads the count of failures back from the Comment. */
#include "config.h"

#include "jobnote.h"
#include "run.h"
#include "slurm.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define JOBNOTE_WAIT_MS 10000

static struct {
  int on;
  char user[RESIHP__JOBNOTE_USER_MAX + 1];
  int failures, swaps;
  char last[200];
  int dirty;
  pid_t pid; /* its scontrol in flight, 0: none */
  int64_t next_ms;
  int said;
} note;

static void keep_line(const char *line, void *ud) {
  snprintf((char *)ud, 2 * RESIHP__JOBNOTE_MAX, "%s", line);
}

void jobnote_start(void) {
  if (g.no_job_comment || !g.jobid[0])
    return;
  note.on = 1;
  char cur[2 * RESIHP__JOBNOTE_MAX] = "";
  char *argv[] = {"squeue", "-h", "-j", g.jobid, "-o", "%k", NULL};
  if (resihp__slurm_run(argv, 1, keep_line, cur) == 0)
    resihp__jobnote_parse(cur, note.user, sizeof(note.user), &note.failures);
  note.dirty = 1;
}

void jobnote_failure(int r, const char *node, const char *why, int swap) {
  if (!note.on)
    return;
  if (swap)
    note.swaps++;
  else
    note.failures++;
  snprintf(note.last, sizeof(note.last), "replica %d on %.64s at step %ld: %.80s",
           r, node, resihp__coord_step(g.coord), why);
  note.dirty = 1;
}

void jobnote_changed(void) { note.dirty = note.on; }

static pid_t send_note(const char *state) {
  int dropped = 0;
  for (int r = 0; r < g.R; r++)
    dropped += g.reps[r].given_up;
  resihp__jobnote_t n = {.state = state,
                         .step = resihp__coord_step(g.coord),
                         .failures = note.failures,
                         .swaps = note.swaps,
                         .replacements = g.nreplacements,
                         .dropped = dropped,
                         .nodes_bad = g.nbad,
                         .last = note.last};
  char text[RESIHP__JOBNOTE_MAX + 1], arg[RESIHP__JOBNOTE_MAX + 16], job[80];
  resihp__jobnote_text(note.user, &n, text, sizeof(text));
  snprintf(arg, sizeof(arg), "comment=%s", text);
  snprintf(job, sizeof(job), "jobid=%s", g.jobid);
  char *argv[] = {"scontrol", "update", job, arg, NULL};
  pid_t p = spawn_argv(argv, NULL, 1);
  return p > 0 ? p : 0;
}

void jobnote_tick(void) {
  int64_t now = resihp__now_ms();
  if (!note.on || !note.dirty || note.pid > 0 || now < note.next_ms)
    return;
  note.dirty = 0;
  note.next_ms = now + 1000;
  note.pid = send_note("running");
}

void jobnote_ended(pid_t pid, int st) {
  if (!note.on || pid != note.pid)
    return;
  note.pid = 0;
  if ((!WIFEXITED(st) || WEXITSTATUS(st) != 0) && !note.said) {
    note.said = 1;
    say("could not record what happened in the job's Comment (scontrol "
        "update jobid=%s comment=... %s %d); see scontrol show job",
        g.jobid, WIFSIGNALED(st) ? "signal" : "status",
        WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
}

/* Wait (bounded) for the scontrol in flight; killed when it takes longer. */
static void wait_note(resihp__keeper_t *kp) {
  for (int i = 0; note.pid > 0 && i < JOBNOTE_WAIT_MS / 100; i++) {
    reap();
    if (note.pid <= 0)
      break;
    resihp__keeper_beat(kp);
    usleep(100000);
  }
  if (note.pid > 0) {
    kill(note.pid, SIGKILL);
    reap();
  }
}

void jobnote_final(const char *outcome, resihp__keeper_t *kp) {
  if (!note.on)
    return;
  wait_note(kp);
  note.pid = send_note(outcome);
  wait_note(kp);
}
