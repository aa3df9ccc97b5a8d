/* SPDX-License-Identifier: BSD-3-Clause */
/* What resihp-run asks Slurm (scontrol, scancel; never through a shell).
 *
 * A standby takes over only when Slurm says the primary's node is DOWN:
 * slurmctld then removes the node from a --no-kill job and kills what
 * still ran there for the job when it comes back, so the old primary is
 * fenced by Slurm, not by a guess from a silence (a network partition
 * between two nodes would otherwise make two coordinators). That verdict
 * takes up to about SlurmdTimeout, which the replicas must wait out. */
#ifndef RESIHP_TOOLS_RUN_SLURM_H
#define RESIHP_TOOLS_RUN_SLURM_H

#include <sys/types.h>

/* Start argv (found in PATH) with its standard output on a pipe whose
 * read end (close-on-exec) goes to *out, its standard input on /dev/null
 * and, quiet, its standard error too (else it is ours, with a line if it
 * cannot start). Every signal is at its default in the child before its
 * exec: a signal sent to it then does not run the caller's handlers there.
 * Its pid (the caller's to reap), or -1 with nothing started. */
pid_t resihp__slurm_spawn(char *const argv[], int quiet, int *out);
/* Run argv (scontrol, scancel, ... found in PATH) and wait for it; each
 * non-empty line of its standard output to on_line (may be NULL), without
 * its end. quiet: its standard error goes to /dev/null (a poll repeated
 * every second), else it is ours, with a line if it cannot start. 0 when
 * it exited 0, else -1. */
int resihp__slurm_run(char *const argv[], int quiet,
                      void (*on_line)(const char *line, void *ud), void *ud);
/* One `scontrol show node NAME -o` line: 1 when its State= says DOWN
 * (DOWN, DOWN*, DOWN+DRAIN...), 0 when it says anything else, -1 when it
 * has no State= field. */
int resihp__slurm_state_down(const char *line);
/* One `squeue -h -j JOB -o %T` line: 1 for the state of a job that may
 * still run (PENDING, RUNNING, SUSPENDED, COMPLETING...), 0 for a state
 * that ends it (COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL, ...). */
int resihp__slurm_state_active(const char *line);
/* Ask slurmctld about job: 1 when it may still run, 0 when it is over or
 * unknown (squeue failed: it forgot the job, or cannot be asked). */
int resihp__slurm_job_active(const char *job);
/* A "SlurmdTimeout = 300 sec" line of `scontrol show config`: the
 * seconds, or -1 when the line is not that. */
int resihp__slurm_parse_timeout(const char *line);
/* Whether step "JOBID.STEPID" (id) is named name (srun --job-name) in
 * slurmctld's view: 1 yes, 0 no or no answer (within 30 s). The step ids
 * a rank or a standby claims are their word; the name is the launcher's. */
int resihp__slurm_step_named(const char *id, const char *name);
/* SlurmdTimeout in seconds (300, Slurm's default, when unknown or not
 * answered within 10 s). */
int resihp__slurm_slurmd_timeout_s(void);

#endif
