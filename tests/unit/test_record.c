/* SPDX-License-Identifier: BSD-3-Clause */
/* The job's record (libresihp/control/record.h): JSON-lines events that stay
 * valid whatever text a replica sent, bounded metric labels, counters that
 * go on across a resumed run, and metrics files replaced whole. */
#include "config.h"

#include "../../libresihp/control/record.h"
#include "suite_main.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64], events[96], metrics[96];

static void setup(void) {
  snprintf(dir, sizeof(dir), "/tmp/resihp-record-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(events, sizeof(events), "%s/events.jsonl", dir);
  snprintf(metrics, sizeof(metrics), "%s/job.prom", dir);
}

static void teardown(void) {
  unlink(events);
  unlink(metrics);
  rmdir(dir);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* The sample's value in a textfile, or -1 when absent. */
static double sample(const char *text, const char *name) {
  size_t n = strlen(name);
  for (const char *p = text; (p = strstr(p, name)); p += n)
    if ((p == text || p[-1] == '\n') && p[n] == ' ')
      return atof(p + n + 1);
  return -1;
}

START_TEST(escapes_whatever_a_replica_sent) {
  char out[64];
  resihp__record_json_escape("a\"b\\c\nd\x01\xff", out, sizeof(out));
  ck_assert_str_eq(out, "a\\\"b\\\\c\\u000ad\\u0001\\u00ff");
  /* cut at an escape's boundary, never in its middle */
  char small[8];
  resihp__record_json_escape("ab\"\"\"", small, sizeof(small));
  ck_assert_str_eq(small, "ab\\\"\\\"");
  resihp__record_json_escape(NULL, small, sizeof(small));
  ck_assert_str_eq(small, "");
}
END_TEST

START_TEST(labels_are_a_fixed_vocabulary) {
  ck_assert_str_eq(resihp__record_reason_label("kill-node"), "kill-node");
  ck_assert_str_eq(resihp__record_reason_label("detected"), "detected");
  ck_assert_str_eq(resihp__record_reason_label("x\"} 1\nevil 2"), "other");
  ck_assert_str_eq(resihp__record_reason_label(NULL), "other");
}
END_TEST

START_TEST(events_and_metrics) {
  resihp__record_t *r;
  char err[256] = "";
  ck_assert_int_eq(
      resihp__record_create(events, metrics, "42", &r, err, sizeof(err)), 0);
  resihp__record_event(r, "start", 0, RESIHP__RECORD_NONE, 1, NULL, NULL, -1);
  resihp__record_event(r, "failure", 7, 2, 1, "kill-node",
                       "died: \"link\" closed\n", -1);
  resihp__record_event(r, "failure", 8, 1, 2, "evil\"}", NULL, -1);
  resihp__record_event(r, "recovered", 9, 2, 3, "kill-node", NULL, 1.5);
  resihp__record_event(r, "done", 20, RESIHP__RECORD_NONE, 3, NULL, NULL, -1);
  resihp__record_destroy(r);

  const char *ev = slurp(events);
  ck_assert_ptr_nonnull(strstr(
      ev, "\"job\":\"42\",\"event\":\"failure\",\"step\":7,\"replica\":2,"
          "\"epoch\":1,\"kind\":\"kill-node\",\"reason\":\"died: "
          "\\\"link\\\" closed\\u000a\"}\n"));
  ck_assert_ptr_nonnull(strstr(ev, "\"event\":\"recovered\",\"step\":9,"
                                   "\"replica\":2,\"epoch\":3,\"kind\":"
                                   "\"kill-node\",\"seconds\":1.500}\n"));
  int lines = 0;
  for (const char *p = ev; *p; p++)
    lines += *p == '\n';
  ck_assert_int_eq(lines, 5);

  const char *m = slurp(metrics);
  ck_assert_double_eq(sample(m, "resihp_failures_total{reason=\"kill-node\"}"),
                      1);
  ck_assert_double_eq(sample(m, "resihp_failures_total{reason=\"other\"}"), 1);
  ck_assert_double_eq(
      sample(m, "resihp_recoveries_total{reason=\"kill-node\"}"), 1);
  ck_assert_double_eq(sample(m, "resihp_recovery_seconds_total"), 1.5);
  ck_assert_double_eq(sample(m, "resihp_stops_total{how=\"done\"}"), 1);
  ck_assert_double_eq(sample(m, "resihp_job_running"), 0);
  ck_assert_double_eq(sample(m, "resihp_step"), 20);
  ck_assert_ptr_null(strstr(m, "evil"));
  ck_assert_ptr_nonnull(strstr(m, "# TYPE resihp_failures_total counter"));

  /* a resumed job: its counters go on from the file's */
  ck_assert_int_eq(
      resihp__record_create(NULL, metrics, "42", &r, err, sizeof(err)), 0);
  ck_assert_double_eq(sample(slurp(metrics), "resihp_job_running"), 1);
  resihp__record_event(r, "failure", 25, 0, 4, "kill-rank", NULL, -1);
  resihp__record_progress(r, 26, 5, 3);
  resihp__record_destroy(r);
  m = slurp(metrics);
  ck_assert_double_eq(sample(m, "resihp_failures_total{reason=\"kill-node\"}"),
                      1);
  ck_assert_double_eq(sample(m, "resihp_failures_total{reason=\"kill-rank\"}"),
                      1);
  ck_assert_double_eq(sample(m, "resihp_replicas_active"), 3);
  ck_assert_double_eq(sample(m, "resihp_epoch"), 5);
}
END_TEST

START_TEST(progress_and_summary_lines) {
  resihp__record_t *r;
  char err[256] = "";
  ck_assert_int_eq(
      resihp__record_create(events, NULL, "7", &r, err, sizeof(err)), 0);
  /* the pace of the run for a report: a progress line with the active
   * replicas, none again while the step does not move */
  resihp__record_progress(r, 5, 1, 2);
  resihp__record_progress(r, 5, 1, 2);
  resihp__record_progress(r, 5, 1, 1);
  /* resihp-run's summary, a line per line of it, escaped */
  resihp__record_summary(r, "resihp-run summary\n  steps completed: 5\n\n"
                            "  final result:  \"x\"\n");
  resihp__record_summary(r, NULL);
  resihp__record_destroy(r);
  const char *ev = slurp(events);
  ck_assert_ptr_nonnull(strstr(ev, "\"event\":\"progress\",\"step\":5,"
                                   "\"epoch\":1,\"replicas\":2}\n"));
  ck_assert_ptr_null(strstr(ev, "\"replicas\":1"));
  ck_assert_ptr_nonnull(strstr(ev, "\"event\":\"summary\",\"step\":5,"
                                   "\"reason\":\"resihp-run summary\"}\n"));
  ck_assert_ptr_nonnull(
      strstr(ev, "\"reason\":\"  final result:  \\\"x\\\"\"}\n"));
  int lines = 0;
  for (const char *p = ev; *p; p++)
    lines += *p == '\n';
  ck_assert_int_eq(lines, 4);
}
END_TEST

START_TEST(unwritable_paths_are_clear_errors) {
  resihp__record_t *r = (void *)1;
  char err[256] = "";
  ck_assert_int_lt(resihp__record_create("/nonexistent-dir/e.jsonl", NULL, "1",
                                         &r, err, sizeof(err)),
                   0);
  ck_assert_ptr_null(r);
  ck_assert_ptr_nonnull(strstr(err, "/nonexistent-dir/e.jsonl"));
  err[0] = '\0';
  ck_assert_int_lt(resihp__record_create(NULL, "/nonexistent-dir/m.prom", "1",
                                         &r, err, sizeof(err)),
                   0);
  ck_assert_ptr_nonnull(strstr(err, "writable"));
  /* no record asked: everything accepts NULL */
  resihp__record_event(NULL, "failure", 1, 1, 1, "x", "y", 1);
  resihp__record_progress(NULL, 1, 1, 1);
  resihp__record_summary(NULL, "x");
  resihp__record_destroy(NULL);
}
END_TEST

/* Paths that are not a regular file of ours are refused at once, with a
 * message naming them: a FIFO (it hung resihp-run), a symbolic link,
 * another user's file (root runs as uid 0: the file is chowned to 65534);
 * nothing is written through them. */
START_TEST(foreign_files_are_refused) {
  char fifo[300], link[300], other[300], err[512];
  snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
  snprintf(link, sizeof(link), "%s/link", dir);
  snprintf(other, sizeof(other), "%s/other", dir);
  ck_assert_int_eq(mkfifo(fifo, 0644), 0);
  ck_assert_int_eq(symlink("/etc/hostname", link), 0);
  FILE *f = fopen(other, "w");
  ck_assert_ptr_nonnull(f);
  fputs("theirs\n", f);
  fclose(f);
  int foreign = geteuid() == 0 && chown(other, 65534, 65534) == 0;
  const char *paths[] = {fifo, link, other};
  for (int i = 0; i < (foreign ? 3 : 2); i++) {
    resihp__record_t *r = (void *)1;
    err[0] = '\0';
    ck_assert_int_lt(
        resihp__record_create(paths[i], NULL, "1", &r, err, sizeof(err)), 0);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(err, paths[i]) && strstr(err, "refusing"),
                  "events %s: '%s'", paths[i], err);
    err[0] = '\0';
    ck_assert_int_lt(
        resihp__record_create(NULL, paths[i], "1", &r, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, paths[i]) && strstr(err, "refusing"),
                  "metrics %s: '%s'", paths[i], err);
  }
  struct stat st;
  ck_assert_int_eq(lstat(link, &st), 0);
  ck_assert(S_ISLNK(st.st_mode)); /* not replaced by a metrics file */
  if (foreign) {
    ck_assert_int_eq(stat(other, &st), 0);
    ck_assert_int_eq(st.st_size, 7); /* nothing appended */
  }
  unlink(fifo);
  unlink(link);
  unlink(other);
}
END_TEST

int main(void) {
  Suite *s = suite_create("record");
  TCase *tc = tcase_create("record");
  tcase_set_timeout(tc, 60); /* fsyncs on a busy disk */
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, escapes_whatever_a_replica_sent);
  tcase_add_test(tc, labels_are_a_fixed_vocabulary);
  tcase_add_test(tc, events_and_metrics);
  tcase_add_test(tc, progress_and_summary_lines);
  tcase_add_test(tc, unwritable_paths_are_clear_errors);
  tcase_add_test(tc, foreign_files_are_refused);
  suite_add_tcase(s, tc);
  return run_suite(s);
}
