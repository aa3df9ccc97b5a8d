/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: Slurm's verdict on nodes, asked without waiting for it.
 *
 * A shrink in place waits for slurmctld to say which of a failed step's
 * nodes are DOWN (launch.c). resihp-run's loop is also the coordinator's:
 * a query that blocks it silences the coordinator, and slurmctld is
 * slowest to answer just when nodes fail. So one `scontrol show node
 * LIST -o` at a time, for every waiting node together, runs in the
 * background, bounded (timeout -k 1 5), and its answer is read whenever
 * the loop comes round. */
#ifndef RESIHP_TOOLS_RUN_VERDICT_H
#define RESIHP_TOOLS_RUN_VERDICT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The most of the node list one query carries (the rest waits for the
 * next query), and of its answer that is read (the rest is dropped). */
#define RESIHP__VERDICT_LIST_MAX (32 << 10)
#define RESIHP__VERDICT_ANSWER_MAX (4 << 20)
/* At most one query started per this many ms. */
#define RESIHP__VERDICT_PERIOD_MS 1000

typedef struct {
  pid_t pid; /* the last query's process until it is reaped, else 0 */
  int fd;    /* its standard output while it is in flight, else -1 */
  char *buf; /* what it said so far */
  size_t len, cap;
  int64_t next_ms; /* no query starts before (resihp__now_ms) */
} resihp__verdict_t;

void resihp__verdict_init(resihp__verdict_t *v);

/* Whether a query may start: none is in flight, and the last one started
 * (or failed to) RESIHP__VERDICT_PERIOD_MS ago, or _soon was said since. */
int resihp__verdict_due(const resihp__verdict_t *v);
/* The next query may start at once (a new wait began). */
void resihp__verdict_soon(resihp__verdict_t *v);

/* Start asking about the n nodes names (in that order, as many as fit in
 * RESIHP__VERDICT_LIST_MAX). 0: started; 1: it is not due, nothing
 * started; -1: it could not start (no name, no pipe, no fork).
 * The child is the caller's to reap (resihp-run's reap: waitpid(-1)), who
 * then says so (_reaped); _finish reaps it if nobody did. */
int resihp__verdict_ask(resihp__verdict_t *v, const char *const *names, int n);

/* Read what the query in flight has said, without blocking. Once it has
 * ended: on_node(name, down, ud) for each node it answered about (down:
 * its State= says DOWN), and 1. 0 while it runs or when none is in
 * flight. A query that failed or timed out answers about no node. */
int resihp__verdict_read(resihp__verdict_t *v,
                         void (*on_node)(const char *name, int down, void *ud),
                         void *ud);

/* The caller reaped pid: if it was the last query's, it is not ours to
 * signal any more (its number may be given to another process). */
void resihp__verdict_reaped(resihp__verdict_t *v, pid_t pid);

/* Stop the last query if it was not reaped (ended, then reaped), and
 * free. */
void resihp__verdict_finish(resihp__verdict_t *v);

#endif
