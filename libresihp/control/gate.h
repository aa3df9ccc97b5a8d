/* SPDX-License-Identifier: BSD-3-Clause */
/* A child that starts write-ahead: it runs only once its parent has
 * recorded its pid (in the keeper's state record), so that a parent killed
 * in between cannot leave behind a child its successor knows nothing of.
 *
 * resihp-run launches a replica's job step and a node's check step this
 * way. Without the gate, a primary killed between its fork of srun and its
 * next state record left an srun the successor did not know of: it
 * launched the replica again, possibly on the same spare node. With it:
 * - killed before the record: the child never runs (its gate reads end of
 *   file when the parent's end closes) and the successor, whose record
 *   does not have it, launches as if nothing had happened;
 * - killed after the record, before opening the gate: the child never
 *   runs either, and its exit (RESIHP__GATE_SIGNAL, passed on by the
 *   keeper) tells the successor, who has its pid, to launch it again;
 * - killed after opening: the successor has the pid of a running child. */
#ifndef RESIHP_CONTROL_GATE_H
#define RESIHP_CONTROL_GATE_H

#include <signal.h>
#include <sys/types.h>

/* How a child that never passed its gate ends. */
#define RESIHP__GATE_SIGNAL SIGUSR2

/* fork(). In the parent: the child's pid, and *gate its gate (close on
 * exec), to be opened once the pid is recorded; -1 with errno on failure.
 * In the child: 0 once the gate is open (it never returns if the parent
 * dies first: it ends by RESIHP__GATE_SIGNAL). */
pid_t resihp__gate_fork(int *gate);
/* Let the child run; closes gate. */
void resihp__gate_open(int gate);
/* Did a child with this wait status end at its gate, without running? */
int resihp__gate_unopened(int status);

#endif
