/* SPDX-License-Identifier: BSD-3-Clause */
/* The job's record as it happens, for people and for monitoring
 * (resihp-run --events FILE --metrics FILE):
 *
 *   events   JSON lines appended to FILE, one per thing that happened:
 *            {"time":1700000000.123,"job":"42","event":"failure",
 *             "step":12,"replica":3,"epoch":4,"reason":"...","seconds":1.5}
 *            (replica, epoch, reason and seconds only when they apply).
 *            Each line is one write(2) on an O_APPEND descriptor, so a
 *            reader never sees half a line;
 *   metrics  a Prometheus textfile (node_exporter's textfile collector)
 *            replaced atomically, in base units: counters of failures,
 *            recoveries and the seconds they took, swaps, stops (by
 *            reason), steps committed; gauges of the step, epoch, active
 *            replicas and the job's state. Counters start from the file's
 *            values, so a resumed job keeps counting.
 *
 * Reasons become metric labels: only a small fixed vocabulary passes
 * (resihp__record_reason_label), whatever text a replica sent, so the
 * number of series stays bounded. The event's free text is escaped.
 *
 * Not thread-safe: the launcher's main loop (the coordinator) owns it.
 * NULL is accepted everywhere (no record asked).
 */
#ifndef RESIHP_CONTROL_RECORD_H
#define RESIHP_CONTROL_RECORD_H

#include <stddef.h>
#include <stdint.h>

typedef struct resihp__record resihp__record_t;

/* Events to events_path and metrics to metrics_path (either may be NULL).
 * job labels every event. Returns 0 or a negative code with a sentence in
 * err (a file that cannot be opened or written). */
int resihp__record_create(const char *events_path, const char *metrics_path,
                          const char *job, resihp__record_t **out, char *err,
                          size_t errlen);
/* Writes the metrics a last time and closes the files. */
void resihp__record_destroy(resihp__record_t *r);

/* No replica / epoch / duration. */
#define RESIHP__RECORD_NONE (-1)

/* One event (a name from the vocabulary below). reason may be NULL;
 * seconds < 0: none. Updates the counters and writes the metrics now.
 *
 *   start      the job began (step: the first step)
 *   joined     a replica's process joined (reason: "pid P on NODE, step
 *              J.S", its leader rank's, for an operator to act on)
 *   failure    replica failed (reason: why; counted by kind)
 *   admitted   its replacement was admitted (seconds: since the failure)
 *   recovered  the replacement trains again (seconds: since the failure;
 *              a recovery, counted with its duration)
 *   slow / healthy / swap   fail-slow: a replica's speed changed, or it
 *              was swapped for a spare
 *   repartition   a replica's layers moved between its ranks at a step
 *              boundary (kind: slow, back when its ranks are healthy
 *              again, asked; reason: "from=3,3 to=4,2 predicted-step=xR
 *              saved=Ss", the layer counts and the planner's prediction;
 *              seconds: the time it predicts saved over the steps left)
 *   decision   the one answer chosen for a slow replica (kind: absorb,
 *              repartition or swap; reason: what each option saves over
 *              the steps left less its switch cost, "n/a" when it is not
 *              possible, and the costs used, measured or default, e.g.
 *              "absorb=0s repartition=5.27s swap=3.33s cost:
 *              repartition=2s (default), swap=30s (default)"; seconds:
 *              the chosen one's predicted saving). Said again only when
 *              the choice for the same slowness changes
 *   switch-cost   a switch measured (kind: repartition, the stall it
 *              added; swap, the replica out until its replacement caught
 *              up; seconds: that; reason: the job's estimate now)
 *   outcome    the chosen repartition or swap's saving measured after
 *              the fact (kind: which; reason: the job's step time before
 *              and after and the prediction; seconds: the measured
 *              saving over the steps left, 0 if none)
 *   abort / stop / done / lost   how the run ended or was asked to end
 *   save / resume   a resumable state was written / read
 *   coordinator     a coordinator process started (kind: primary, or
 *              standby for one that took over; reason: "pid N")
 *   failover   a coordinator died or hung and a successor took over
 *              (kind: killed|hung; seconds: from detection to restored) */
void resihp__record_event(resihp__record_t *r, const char *event, long step,
                          int replica, long epoch, const char *kind,
                          const char *reason, double seconds);

/* Gauges: the step being trained, the epoch, the active replicas. Writes
 * the metrics when they changed and at most once a second, and a
 * "progress" event (step, epoch, replicas: the active ones) at most once
 * a second while the step moves, for the pace of the run over time. */
void resihp__record_progress(resihp__record_t *r, long step, long epoch,
                             int replicas);

/* The run's summary (the text resihp-run prints at the end) as "summary"
 * events, one per non-empty line (reason: the line, cut at 479 bytes), so
 * that a report of the events carries it. */
void resihp__record_summary(resihp__record_t *r, const char *text);

/* The label a kind of failure gets: kind itself when it is one of the
 * known kinds, else "other". */
const char *resihp__record_reason_label(const char *kind);

/* JSON string escaping of text into out (n bytes, always terminated;
 * cut at a character boundary when it does not fit). */
void resihp__record_json_escape(const char *text, char *out, size_t n);

#endif
