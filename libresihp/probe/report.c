/* SPDX-License-Identifier: BSD-3-Clause */
/* Rendering probe reports: the key=value results file handed to ranks
 * (and appended to by periodic probes), JSON and a text table for
 * resihp-probe, a one-line failure summary for logs, srun and drain
 * reasons, and the Prometheus textfile metrics.
 *
 * Results file, format v1 (one block per probe run, blocks separated by an
 * empty line, the last block is the newest):
 *   format=resihp-probe-v1
 *   kind=start|periodic|manual
 *   time=<unix seconds>  healthy=0|1  timed_out=0|1  duration_us=<n>
 *   failed=<check:check...>   (empty when healthy)
 *   check.<name>.status=pass|fail|skip|timeout|notrun
 *   check.<name>.duration_us=<n>
 *   check.<name>.detail=<one printable line>
 * Readers must ignore keys they do not know. */
#include "config.h"

#include "probe.h"

#include "../core/errbuf.h"
#include "../metrics/metrics.h"

#include <resihp/error.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int selected(const resihp_probe_report_t *rep, int i) {
  return (rep->checks >> i) & 1u;
}

static int bad(const resihp_probe_result_t *r) {
  return r->status == RESIHP_PROBE_FAIL || r->status == RESIHP_PROBE_TIMEOUT;
}

int resihp__probe_failure_summary(const resihp_probe_report_t *rep, char *buf,
                                  size_t len) {
  int n = 0;
  size_t off = 0;
  if (len)
    buf[0] = '\0';
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++) {
    if (!selected(rep, i) || !bad(&rep->r[i]))
      continue;
    n++;
    if (off < len) {
      int w = snprintf(buf + off, len - off, "%s%s: %s", off ? "; " : "",
                       resihp__probe_check_name(i), rep->r[i].detail);
      if (w > 0)
        off += (size_t)w;
    }
  }
  for (size_t k = 0; k < len && buf[k]; k++)
    if ((unsigned char)buf[k] < ' ')
      buf[k] = ' ';
  return n;
}

static void failed_list(const resihp_probe_report_t *rep, char *buf,
                        size_t len) {
  buf[0] = '\0';
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++)
    if (selected(rep, i) && bad(&rep->r[i])) {
      size_t l = strlen(buf);
      snprintf(buf + l, len - l, "%s%s", l ? ":" : "",
               resihp__probe_check_name(i));
    }
}

int resihp__probe_format_kv(const resihp_probe_report_t *rep, const char *kind,
                            char *buf, size_t len) {
  char failed[64];
  failed_list(rep, failed, sizeof(failed));
  size_t off = 0;
#define PUT(...)                                                               \
  do {                                                                         \
    int w_ = snprintf(buf + off, off < len ? len - off : 0, __VA_ARGS__);      \
    if (w_ < 0 || (size_t)w_ >= len - off)                                     \
      return RESIHP_ERANGE;                                                    \
    off += (size_t)w_;                                                         \
  } while (0)
  PUT("format=resihp-probe-v1\nkind=%s\ntime=%lld\nhealthy=%d\ntimed_out=%d\n"
      "duration_us=%ld\nfailed=%s\n",
      kind, rep->time, rep->healthy, rep->timed_out, rep->usec, failed);
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++) {
    if (!selected(rep, i))
      continue;
    const resihp_probe_result_t *r = &rep->r[i];
    char detail[RESIHP_PROBE_DETAIL_MAX];
    snprintf(detail, sizeof(detail), "%s", r->detail);
    for (char *p = detail; *p; p++)
      if ((unsigned char)*p < ' ')
        *p = ' ';
    const char *n = resihp__probe_check_name(i);
    PUT("check.%s.status=%s\ncheck.%s.duration_us=%ld\ncheck.%s.detail=%s\n",
        n, resihp__probe_status_name(r->status), n, r->usec, n, detail);
  }
#undef PUT
  return (int)off;
}

int resihp__probe_write_kv(const resihp_probe_report_t *rep, const char *kind,
                           const char *path, int append) {
  char buf[4096];
  int n = resihp__probe_format_kv(rep, kind, buf, sizeof(buf) - 1);
  if (n < 0)
    return n;
  if (append) {
    /* One write(2) of the block with O_APPEND: a reader sees whole blocks
     * or an unterminated last one, which it skips. */
    buf[n++] = '\n';
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
      return RESIHP_EIO;
    ssize_t w = write(fd, buf, (size_t)n);
    close(fd);
    return w == n ? 0 : RESIHP_EIO;
  }
  char tmp[RESIHP_PROBE_PATH_MAX + 64];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
    return RESIHP_ERANGE;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                0644);
  if (fd < 0)
    return RESIHP_EIO;
  buf[n++] = '\n';
  ssize_t w = write(fd, buf, (size_t)n);
  int rc = (w == n && fsync(fd) == 0) ? 0 : RESIHP_EIO;
  if (close(fd) != 0)
    rc = RESIHP_EIO;
  if (rc == 0 && rename(tmp, path) != 0)
    rc = RESIHP_EIO;
  if (rc)
    unlink(tmp);
  return rc;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

void resihp__probe_print_json(const resihp_probe_report_t *rep,
                              const char *kind, FILE *f) {
  char failed[64];
  failed_list(rep, failed, sizeof(failed));
  fprintf(f, "{\"format\":\"resihp-probe-v1\",\"kind\":");
  json_str(f, kind);
  fprintf(f, ",\"time\":%lld,\"healthy\":%s,\"timed_out\":%s,"
             "\"duration_us\":%ld,\"failed\":",
          rep->time, rep->healthy ? "true" : "false",
          rep->timed_out ? "true" : "false", rep->usec);
  json_str(f, failed);
  fprintf(f, ",\"checks\":[");
  int first = 1;
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++) {
    if (!selected(rep, i))
      continue;
    const resihp_probe_result_t *r = &rep->r[i];
    fprintf(f, "%s{\"name\":\"%s\",\"status\":\"%s\",\"duration_us\":%ld,"
               "\"detail\":",
            first ? "" : ",", resihp__probe_check_name(i),
            resihp__probe_status_name(r->status), r->usec);
    json_str(f, r->detail);
    fputc('}', f);
    first = 0;
  }
  fprintf(f, "]}\n");
}

void resihp__probe_print_text(const resihp_probe_report_t *rep, FILE *f) {
  fprintf(f, "%-8s %-8s %10s  %s\n", "CHECK", "STATUS", "TIME(ms)", "DETAIL");
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++) {
    if (!selected(rep, i))
      continue;
    const resihp_probe_result_t *r = &rep->r[i];
    fprintf(f, "%-8s %-8s %10.1f  %s\n", resihp__probe_check_name(i),
            resihp__probe_status_name(r->status), r->usec / 1000.0, r->detail);
  }
  fprintf(f, "node %s (%.1f ms%s)\n", rep->healthy ? "HEALTHY" : "UNHEALTHY",
          rep->usec / 1000.0, rep->timed_out ? ", deadline expired" : "");
}

/* Only resihp's root helpers take the lock, each for one read-modify-write
 * of a small file: a wait this long means something is wrong, and the
 * metrics of one run are not worth holding a step (or a drain) for. */
#define METRICS_LOCK_TIMEOUT_MS 2000

int resihp__probe_update_metrics(const resihp_probe_report_t *rep,
                                 const char *kind, const char *path,
                                 char *err, size_t errlen) {
  if (!path || !*path)
    return 0;
  resihp_metrics_t *m = resihp__metrics_create();
  if (!m)
    return RESIHP_ENOMEM;
  resihp__metrics_declare(m, "resihp_probe_runs_total", RESIHP_METRIC_COUNTER,
                          "Health probe runs on this node by kind.");
  resihp__metrics_declare(m, "resihp_probe_failed_runs_total",
                          RESIHP_METRIC_COUNTER,
                          "Health probe runs that found the node unhealthy.");
  resihp__metrics_declare(m, "resihp_probe_failures_total",
                          RESIHP_METRIC_COUNTER,
                          "Failed (or timed out) checks by check.");
  resihp__metrics_declare(m, "resihp_probe_duration_seconds_total",
                          RESIHP_METRIC_COUNTER,
                          "Time spent in each check, summed over runs.");
  resihp__metrics_declare(m, "resihp_probe_last_duration_seconds",
                          RESIHP_METRIC_GAUGE,
                          "Duration of each check (and all) in the last run.");
  resihp__metrics_declare(m, "resihp_probe_last_healthy", RESIHP_METRIC_GAUGE,
                          "1 if the last probe run found the node healthy.");
  resihp__metrics_declare(m, "resihp_probe_last_run_timestamp_seconds",
                          RESIHP_METRIC_GAUGE,
                          "Unix time of the last probe run.");
  int lock = resihp__metrics_lock(path, METRICS_LOCK_TIMEOUT_MS, err, errlen);
  if (lock < 0) {
    resihp__metrics_destroy(m);
    return lock;
  }
  int rc = resihp__metrics_load(m, path);
  char l[64];
  snprintf(l, sizeof(l), "kind=\"%s\"", kind);
  resihp__metrics_add(m, "resihp_probe_runs_total", l, 1);
  resihp__metrics_add(m, "resihp_probe_failed_runs_total", l,
                      rep->healthy ? 0 : 1);
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++) {
    if (!selected(rep, i))
      continue;
    snprintf(l, sizeof(l), "check=\"%s\"", resihp__probe_check_name(i));
    resihp__metrics_add(m, "resihp_probe_failures_total", l,
                        bad(&rep->r[i]) ? 1 : 0);
    resihp__metrics_add(m, "resihp_probe_duration_seconds_total", l,
                        rep->r[i].usec / 1e6);
    resihp__metrics_set(m, "resihp_probe_last_duration_seconds", l,
                        rep->r[i].usec / 1e6);
  }
  resihp__metrics_set(m, "resihp_probe_last_duration_seconds",
                      "check=\"all\"", rep->usec / 1e6);
  resihp__metrics_set(m, "resihp_probe_last_healthy", NULL, rep->healthy);
  resihp__metrics_set(m, "resihp_probe_last_run_timestamp_seconds", NULL,
                      (double)rep->time);
  if (rc == 0)
    rc = resihp__metrics_write(m, path);
  if (rc)
    resihp__errf(err, errlen, "cannot rewrite %.200s: %s", path,
                 resihp_strerror(rc));
  close(lock);
  resihp__metrics_destroy(m);
  return rc;
}
