/* SPDX-License-Identifier: BSD-3-Clause */
/* The job's events (JSON lines) and metrics (Prometheus textfile); see
 * record.h. */
#include "config.h"

#include "record.h"

#include "../core/ownfile.h"
#include "../metrics/metrics.h"
#include "../transport/mesh.h"

#include <resihp/error.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct resihp__record {
  int efd; /* events, O_APPEND; -1: none */
  char *metrics_path;
  resihp_metrics_t *m;
  char job[64];
  long step, epoch;
  int replicas;
  int64_t written_ms; /* the metrics were last written then */
  int dirty;
  long progress_step;  /* the step of the last "progress" event */
  int64_t progress_ms; /* when it was written */
};

/* Kinds of failure a label may name (inject.h's kinds, and what the
 * coordinator itself finds). */
static const char *const known_kinds[] = {
    "kill-rank", "kill-node", "hang-rank", "slow-rank", "detected",
    "slow",      "probe",     "excluded",  "catchup",   NULL};

const char *resihp__record_reason_label(const char *kind) {
  for (int i = 0; kind && known_kinds[i]; i++)
    if (!strcmp(kind, known_kinds[i]))
      return known_kinds[i];
  return "other";
}

void resihp__record_json_escape(const char *text, char *out, size_t n) {
  size_t o = 0;
  if (!n)
    return;
  for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p;
       p++) {
    char e[8];
    size_t k;
    if (*p == '"' || *p == '\\') {
      e[0] = '\\';
      e[1] = (char)*p;
      k = 2;
    } else if (*p < 0x20 || *p >= 0x7f) {
      /* control characters, and bytes beyond ASCII: the text comes from
       * replicas and need not be UTF-8; \u00XX keeps the line valid JSON */
      k = (size_t)snprintf(e, sizeof(e), "\\u%04x", *p);
    } else {
      e[0] = (char)*p;
      k = 1;
    }
    if (o + k >= n)
      break;
    memcpy(out + o, e, k);
    o += k;
  }
  out[o] = '\0';
}

static const struct {
  const char *name;
  resihp_metric_type_t type;
  const char *help;
} families[] = {
    {"resihp_failures_total", RESIHP_METRIC_COUNTER,
     "Replicas that failed, by kind of failure."},
    {"resihp_recoveries_total", RESIHP_METRIC_COUNTER,
     "Failed replicas whose replacement trains again, by kind of failure."},
    {"resihp_recovery_seconds_total", RESIHP_METRIC_COUNTER,
     "Seconds from failures to their replacement training again, summed."},
    {"resihp_last_recovery_duration_seconds", RESIHP_METRIC_GAUGE,
     "Seconds from the last recovered failure to its replacement training."},
    {"resihp_swaps_total", RESIHP_METRIC_COUNTER,
     "Slow replicas swapped for a spare."},
    {"resihp_slow_episodes_total", RESIHP_METRIC_COUNTER,
     "Times a replica was found slow."},
    {"resihp_decisions_total", RESIHP_METRIC_COUNTER,
     "Answers chosen for a slow replica, by choice (absorb, repartition, "
     "swap)."},
    {"resihp_switch_cost_seconds", RESIHP_METRIC_GAUGE,
     "The last measured cost of a switch, by kind (repartition: the stall "
     "it added; swap: the replica out until its replacement caught up)."},
    {"resihp_stops_total", RESIHP_METRIC_COUNTER,
     "Ends of a run, by how it ended (done, stop, abort, lost)."},
    {"resihp_saves_total", RESIHP_METRIC_COUNTER, "Resumable states written."},
    {"resihp_failovers_total", RESIHP_METRIC_COUNTER,
     "Coordinators replaced by a successor (died, hung, or lost with "
     "their node)."},
    {"resihp_step", RESIHP_METRIC_GAUGE, "The step being trained."},
    {"resihp_epoch", RESIHP_METRIC_GAUGE, "The membership epoch."},
    {"resihp_replicas_active", RESIHP_METRIC_GAUGE,
     "Replicas in the group training now."},
    {"resihp_job_running", RESIHP_METRIC_GAUGE,
     "1 while the run goes on, 0 once it ended."},
    {"resihp_last_event_timestamp_seconds", RESIHP_METRIC_GAUGE,
     "Unix time of the last event."},
};

static void write_metrics(resihp__record_t *r) {
  if (!r->m || !r->metrics_path)
    return;
  resihp__metrics_set(r->m, "resihp_step", NULL, (double)r->step);
  resihp__metrics_set(r->m, "resihp_epoch", NULL, (double)r->epoch);
  resihp__metrics_set(r->m, "resihp_replicas_active", NULL,
                      (double)r->replicas);
  /* a failed write is retried at the next event; the job goes on */
  if (!resihp__metrics_write(r->m, r->metrics_path))
    r->dirty = 0;
  r->written_ms = resihp__now_ms();
}

int resihp__record_create(const char *events_path, const char *metrics_path,
                          const char *job, resihp__record_t **out, char *err,
                          size_t errlen) {
  *out = NULL;
  resihp__record_t *r = calloc(1, sizeof(*r));
  if (!r)
    return RESIHP_ENOMEM;
  r->efd = -1;
  r->progress_step = -1;
  snprintf(r->job, sizeof(r->job), "%s", job ? job : "");
  if (events_path) {
    /* a FIFO would hang the launcher, another user's file or a link
     * would be written through: a regular file of our own only */
    char why[400];
    r->efd = resihp__open_own(events_path, O_WRONLY | O_APPEND | O_CREAT, 0644,
                              why, sizeof(why));
    if (r->efd < 0) {
      int rc = r->efd;
      snprintf(err, errlen, "the events file: %s", why);
      resihp__record_destroy(r);
      return rc == RESIHP_EINVAL ? rc : RESIHP_EIO;
    }
  }
  if (metrics_path) {
    r->metrics_path = strdup(metrics_path);
    r->m = resihp__metrics_create();
    if (!r->metrics_path || !r->m) {
      resihp__record_destroy(r);
      return RESIHP_ENOMEM;
    }
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
      resihp__metrics_declare(r->m, families[i].name, families[i].type,
                              families[i].help);
    /* counters go on from the last run's (a resumed job); a file that is
     * not a regular one of ours is neither read nor replaced */
    char why[400];
    if (resihp__own_or_absent(metrics_path, why, sizeof(why))) {
      snprintf(err, errlen, "the metrics file: %s", why);
      resihp__record_destroy(r);
      return RESIHP_EINVAL;
    }
    resihp__metrics_load(r->m, metrics_path);
    resihp__metrics_set(r->m, "resihp_job_running", NULL, 1);
    if (resihp__metrics_write(r->m, metrics_path)) {
      snprintf(err, errlen,
               "cannot write the metrics file %s (its directory must exist "
               "and be writable)",
               metrics_path);
      resihp__record_destroy(r);
      return RESIHP_EIO;
    }
    r->written_ms = resihp__now_ms();
  }
  *out = r;
  return 0;
}

void resihp__record_destroy(resihp__record_t *r) {
  if (!r)
    return;
  if (r->m && r->metrics_path) {
    resihp__metrics_set(r->m, "resihp_job_running", NULL, 0);
    write_metrics(r);
  }
  if (r->efd >= 0)
    close(r->efd);
  resihp__metrics_destroy(r->m);
  free(r->metrics_path);
  free(r);
}

static void count(resihp__record_t *r, const char *event, const char *kind,
                  double seconds) {
  if (!r->m)
    return;
  char label[64];
  snprintf(label, sizeof(label), "reason=\"%s\"",
           resihp__record_reason_label(kind));
  if (!strcmp(event, "failure")) {
    resihp__metrics_add(r->m, "resihp_failures_total", label, 1);
  } else if (!strcmp(event, "recovered")) {
    resihp__metrics_add(r->m, "resihp_recoveries_total", label, 1);
    if (seconds >= 0) {
      resihp__metrics_add(r->m, "resihp_recovery_seconds_total", NULL, seconds);
      resihp__metrics_set(r->m, "resihp_last_recovery_duration_seconds", NULL,
                          seconds);
    }
  } else if (!strcmp(event, "swap")) {
    resihp__metrics_add(r->m, "resihp_swaps_total", NULL, 1);
  } else if (!strcmp(event, "decision") || !strcmp(event, "switch-cost")) {
    /* the choices are a fixed few: anything else is "other" */
    const char *k =
        kind && (!strcmp(kind, "absorb") || !strcmp(kind, "repartition") ||
                 !strcmp(kind, "swap"))
            ? kind
            : "other";
    if (event[0] == 'd') {
      snprintf(label, sizeof(label), "choice=\"%s\"", k);
      resihp__metrics_add(r->m, "resihp_decisions_total", label, 1);
    } else if (seconds >= 0) {
      snprintf(label, sizeof(label), "kind=\"%s\"", k);
      resihp__metrics_set(r->m, "resihp_switch_cost_seconds", label, seconds);
    }
  } else if (!strcmp(event, "slow")) {
    resihp__metrics_add(r->m, "resihp_slow_episodes_total", NULL, 1);
  } else if (!strcmp(event, "save")) {
    resihp__metrics_add(r->m, "resihp_saves_total", NULL, 1);
  } else if (!strcmp(event, "failover")) {
    resihp__metrics_add(r->m, "resihp_failovers_total", NULL, 1);
  } else if (!strcmp(event, "done") || !strcmp(event, "stop") ||
             !strcmp(event, "abort") || !strcmp(event, "lost")) {
    snprintf(label, sizeof(label), "how=\"%s\"", event);
    resihp__metrics_add(r->m, "resihp_stops_total", label, 1);
  }
}

/* One events line, written at once (replicas < 0: no replicas field). */
static void write_event(resihp__record_t *r, const struct timespec *now,
                        const char *event, long step, int replica, long epoch,
                        const char *kind, const char *reason, double seconds,
                        int replicas) {
  const struct timespec ts = *now;
  char esc_job[2 * sizeof(r->job)], esc_kind[64], esc_reason[512];
  char line[1024];
  resihp__record_json_escape(r->job, esc_job, sizeof(esc_job));
  int n = snprintf(line, sizeof(line),
                   "{\"time\":%lld.%03ld,\"job\":\"%s\",\"event\":\"%s\","
                   "\"step\":%ld",
                   (long long)ts.tv_sec, ts.tv_nsec / 1000000L, esc_job, event,
                   step);
  if (replica >= 0)
    n += snprintf(line + n, sizeof(line) - (size_t)n, ",\"replica\":%d",
                  replica);
  if (epoch >= 0)
    n += snprintf(line + n, sizeof(line) - (size_t)n, ",\"epoch\":%ld", epoch);
  if (kind) {
    resihp__record_json_escape(kind, esc_kind, sizeof(esc_kind));
    n += snprintf(line + n, sizeof(line) - (size_t)n, ",\"kind\":\"%s\"",
                  esc_kind);
  }
  if (reason) {
    resihp__record_json_escape(reason, esc_reason, sizeof(esc_reason));
    n += snprintf(line + n, sizeof(line) - (size_t)n, ",\"reason\":\"%s\"",
                  esc_reason);
  }
  if (seconds >= 0)
    n += snprintf(line + n, sizeof(line) - (size_t)n, ",\"seconds\":%.3f",
                  seconds);
  if (replicas >= 0)
    n += snprintf(line + n, sizeof(line) - (size_t)n, ",\"replicas\":%d",
                  replicas);
  n += snprintf(line + n, sizeof(line) - (size_t)n, "}\n");
  /* the parts are bounded so that the line always fits: one write */
  if (n > 0 && (size_t)n < sizeof(line)) {
    ssize_t w = write(r->efd, line, (size_t)n);
    (void)w; /* a full disk must not stop the training */
  }
}

void resihp__record_event(resihp__record_t *r, const char *event, long step,
                          int replica, long epoch, const char *kind,
                          const char *reason, double seconds) {
  if (!r || !event)
    return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (step >= 0)
    r->step = step;
  if (epoch >= 0)
    r->epoch = epoch;
  if (r->efd >= 0)
    write_event(r, &ts, event, step, replica, epoch, kind, reason, seconds, -1);
  count(r, event, kind, seconds);
  if (r->m) {
    resihp__metrics_set(r->m, "resihp_last_event_timestamp_seconds", NULL,
                        (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    if (!strcmp(event, "done") || !strcmp(event, "lost") ||
        !strcmp(event, "stop") || !strcmp(event, "abort"))
      resihp__metrics_set(r->m, "resihp_job_running", NULL,
                          strcmp(event, "stop") ? 0 : 1);
  }
  write_metrics(r);
}

void resihp__record_progress(resihp__record_t *r, long step, long epoch,
                             int replicas) {
  if (!r)
    return;
  if (step != r->step || epoch != r->epoch || replicas != r->replicas)
    r->dirty = 1;
  r->step = step;
  r->epoch = epoch;
  r->replicas = replicas;
  int64_t now = resihp__now_ms();
  if (r->dirty && now - r->written_ms >= 1000)
    write_metrics(r);
  /* the steps' pace for a report (resihp-report's timeline): a line a
   * second at most, only while steps commit, whatever the replicas */
  if (r->efd >= 0 && step != r->progress_step && now - r->progress_ms >= 1000) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    write_event(r, &ts, "progress", step, RESIHP__RECORD_NONE, epoch, NULL,
                NULL, -1, replicas);
    r->progress_step = step;
    r->progress_ms = now;
  }
}

void resihp__record_summary(resihp__record_t *r, const char *text) {
  if (!r || r->efd < 0 || !text)
    return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char line[480];
  for (const char *p = text; *p;) {
    size_t k = strcspn(p, "\n");
    snprintf(line, sizeof(line), "%.*s", (int)k, p);
    if (line[0])
      write_event(r, &ts, "summary", r->step, RESIHP__RECORD_NONE,
                  RESIHP__RECORD_NONE, NULL, line, -1, -1);
    p += k;
    if (*p)
      p++;
  }
}
