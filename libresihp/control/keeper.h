/* SPDX-License-Identifier: BSD-3-Clause */
/* The keeper: the process that outlives the coordinator.
 *
 * resihp-run's own process (the one salloc or the batch script waits on)
 * becomes the keeper. It forks the primary, which does the real work (the
 * coordinator and the launcher), and keeps nothing but the primary's
 * latest state record. When the primary dies by a signal (SIGKILL, a
 * crash) or stops beating for longer than hang_ms (SIGSTOP, a hang: the
 * keeper SIGKILLs and reaps it first, so an old primary never comes back
 * to act), the keeper forks a new primary from the last complete record.
 * A primary that exits ends the keeper with its exit status.
 *
 * The keeper has no protocol logic, so that it has little to fail: it
 * reads records, reaps processes, forwards signals. It is a child
 * subreaper: the old primary's children (its sruns) become its children;
 * it reaps them and passes their exits on to the current primary
 * (resihp__keeper_orphan), whose launcher handles them as its own.
 *
 * Records go through a pipe, length-prefixed; a record cut by its
 * writer's death is no record (the last complete one is kept).
 */
#ifndef RESIHP_CONTROL_KEEPER_H
#define RESIHP_CONTROL_KEEPER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct resihp__keeper resihp__keeper_t;

typedef struct {
  /* A primary that has not beaten for this long is killed and replaced
   * (<= 0: never; only a death fails over). */
  int hang_ms;
  /* Failovers in a row without a new record between them before giving
   * up (a primary that dies again at once would loop). <= 0: 3. */
  int max_failovers;
  /* The keeper's exit status when it gives up. */
  int lost_status;
  /* The primary, in the child: snap is the last complete record (NULL and
   * 0 for the first primary); returns its exit status. */
  int (*primary)(void *ud, const char *snap, size_t len, resihp__keeper_t *k);
  void *ud;
  /* A record to start the first primary from (NULL: from scratch): a
   * standby that takes over from a primary whose node was lost. It counts
   * as a failover, for the reason first_why. */
  const char *snap;
  size_t snaplen;
  const char *first_why;
} resihp__keeper_opts_t;

/* Run the keeper until a primary exits (its status is returned) or the
 * keeper gives up (lost_status, with a message on stderr). Needs SIGCHLD
 * not ignored; installs its own handlers for SIGCHLD, SIGTERM, SIGINT and
 * SIGHUP. */
int resihp__keeper_run(const resihp__keeper_opts_t *o);

/* In the primary. A state record (one whole record, or none if the
 * primary dies while writing). 0 or a negative code. */
int resihp__keeper_record(resihp__keeper_t *k, const void *buf, size_t len);
/* Tests: a state record's header and its first cut bytes only, as a
 * primary that dies while writing leaves it. */
int resihp__keeper_record_cut(resihp__keeper_t *k, const void *buf, size_t len,
                              size_t cut);
/* I am alive (cheap: writes at most about ten times a second). */
void resihp__keeper_beat(resihp__keeper_t *k);
/* The next exit of an orphan the keeper reaped: 1 with its pid and wait
 * status, 0 when there is none now. Never blocks. */
int resihp__keeper_orphan(resihp__keeper_t *k, pid_t *pid, int *status);
/* Failovers so far; the last one's cause ("killed" or "hung"), the pid of
 * the primary it replaced and when it was detected (resihp__now_ms).
 * why/old/since may be NULL. */
int resihp__keeper_failovers(const resihp__keeper_t *k, const char **why,
                             pid_t *old, int64_t *since);

#endif
