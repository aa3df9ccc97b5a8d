/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: the resumable state (--state-dir, --save-every, --resume):
 * saves as they end, and the checks of a state to resume from. */
#include "config.h"

#include "run.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* A save at a step boundary ended (coord_save.c): record it in the meta,
 * point DIR/latest at it and keep only the last two step directories. */
void on_saved(void *ud, long step, int r, int ok) {
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
  resihp__coord_job_shape(g.coord, &m.microbatches, &m.steps, &m.shards, shape);
  snprintf(m.shape, sizeof(m.shape), "%s", shape);
  if (resihp__save_commit(g.state_dir, &m, err, sizeof(err))) {
    say("the state of step %ld was written but cannot be recorded: %s", step,
        err);
    return;
  }
  say("state of step %ld saved by replica %d in %s/step-%ld (%s/latest)", step,
      r, g.state_dir, step, g.state_dir);
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
int check_resume(void) {
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
  uint8_t key[RESIHP__SAVE_KEY_LEN];
  if (resihp__save_key(rp, 0, key, err, sizeof(err))) {
    fprintf(stderr, "resihp-run: --resume %s: %s\n", g.resume_arg, err);
    return -1;
  }
  for (int k = 0; k < m->shards; k++) {
    char path[4300];
    resihp__save_hdr_t h;
    snprintf(path, sizeof(path), "%s/shard-%d.bin", g.resume_step_dir, k);
    int bad = resihp__save_read(path, key, &h, NULL, 0, err, sizeof(err));
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
long job_steps(void) {
  int M, K;
  long S = LONG_MAX;
  char shape[20];
  resihp__coord_job_shape(g.coord, &M, &S, &K, shape);
  return S;
}

/* A resumed run's program must be the one that saved: same microbatches,
 * steps, ranks per replica and state shape (the first HELLO tells). */
void check_resumed_shape(void) {
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
