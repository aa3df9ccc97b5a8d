/* SPDX-License-Identifier: BSD-3-Clause */
/* The job secret's file, DIR/.resihp-secret.JOB.PID (mode 0600), and why
 * it cannot outlive its job.
 *
 * The ranks on every node read it (RESIHP_SECRET_FILE), so it lives in a
 * directory the nodes share (RESIHP_SECRET_DIR, else the working
 * directory): no descriptor can be passed to them. resihp-run removes it
 * when the job ends, but a SIGKILLed keeper removes nothing. So every
 * process that needs the file to stay holds a shared lock on it (flock:
 * the keeper, which its primary inherits, and a standby); a lock dies
 * with its last holder, however it died. Each resihp-run that creates a
 * secret first removes the secrets of its user in that directory that
 * nobody holds and whose job Slurm no longer runs: a file system whose
 * locks are node-local only cannot make a running job's secret look
 * stale then. */
#ifndef RESIHP_TOOLS_RUN_SECRET_H
#define RESIHP_TOOLS_RUN_SECRET_H

#include <stddef.h>

/* Whether Slurm job `job` may still run (1), or is over (0). */
typedef int (*resihp__secret_job_active_fn)(const char *job);

/* JOB of a name ".resihp-secret.JOB.PID" (JOB digits and '_', as an
 * array's 123_4; PID digits), into job (len bytes); 0 when the name is not
 * of that form or JOB does not fit. Names come from a shared directory:
 * tests/fuzz/fuzz_secret_name. */
int resihp__secret_parse_name(const char *name, char *job, size_t len);

/* Remove the stale secrets in dir (see above); job_active NULL: the lock
 * alone decides. At most max_entries names are looked at. Returns how
 * many were removed. */
int resihp__secret_clean_stale(const char *dir,
                               resihp__secret_job_active_fn job_active,
                               long max_entries);

/* Create a fresh secret (32 random bytes) as DIR/.resihp-secret.JOB.PID,
 * its name into path (len bytes), held: *lock_fd (close-on-exec) stays
 * open for as long as the secret must. 0, or -1 with errno (a message is
 * the caller's). */
int resihp__secret_create(const char *dir, const char *job, char *path,
                          size_t len, int *lock_fd);

/* Hold an existing secret (a standby's --secret-file): the descriptor to
 * keep open, or -1 (not held: it may be removed once the others are
 * gone). */
int resihp__secret_hold(const char *path);

#endif
