/* SPDX-License-Identifier: BSD-3-Clause */
/* A tiny Prometheus text-format writer for node_exporter's textfile
 * collector, shared by the probe helper and (later) libresihp's own counters.
 *
 * A metrics set is built in memory, optionally seeded from the file it will
 * replace (so counters keep counting across processes), and written back
 * atomically: a temporary file in the same directory, fsync, rename. The
 * collector therefore never reads a half-written file.
 *
 * No threads, no global state; safe to use in a helper forked from
 * slurmstepd. The caller owns the set and frees it with
 * resihp__metrics_destroy (NULL is fine).
 */
#ifndef RESIHP_METRICS_H
#define RESIHP_METRICS_H

#include <stddef.h>

typedef struct resihp_metrics resihp_metrics_t;

typedef enum {
  RESIHP_METRIC_COUNTER,
  RESIHP_METRIC_GAUGE,
} resihp_metric_type_t;

resihp_metrics_t *resihp__metrics_create(void);
void resihp__metrics_destroy(resihp_metrics_t *m);

/* Declare a family (name, type, help). Declaring it again is a no-op.
 * Names follow Prometheus rules ([a-zA-Z_:][a-zA-Z0-9_:]*). */
int resihp__metrics_declare(resihp_metrics_t *m, const char *name,
                            resihp_metric_type_t type, const char *help);

/* labels is the text between the braces (e.g. `check="mem"`) or NULL/"".
 * add() creates the sample at 0 if missing; set() replaces its value. */
int resihp__metrics_add(resihp_metrics_t *m, const char *name,
                        const char *labels, double delta);
int resihp__metrics_set(resihp_metrics_t *m, const char *name,
                        const char *labels, double value);

/* Current value of a sample, or def when absent. */
double resihp__metrics_get(const resihp_metrics_t *m, const char *name,
                           const char *labels, double def);

/* Seed samples of already declared families from an existing file written by
 * this writer (a missing file is not an error; unknown lines are dropped). */
int resihp__metrics_load(resihp_metrics_t *m, const char *path);

/* Write atomically (tmp + fsync + rename), mode 0644. */
int resihp__metrics_write(const resihp_metrics_t *m, const char *path);

/* Serialise concurrent read-modify-write cycles on path (several steps on a
 * node): returns an fd holding an exclusive lock on "path.lock", or a
 * negative RESIHP_E* code with a sentence in err. Close the fd to release
 * it. The lock file is created 0600; an existing one that is not a regular
 * file of ours with mode 0600 (or is a symlink) is refused (RESIHP_EINVAL).
 * Never blocks: a lock still busy after timeout_ms gives RESIHP_EBUSY. */
int resihp__metrics_lock(const char *path, long timeout_ms, char *err,
                         size_t errlen);

#endif
