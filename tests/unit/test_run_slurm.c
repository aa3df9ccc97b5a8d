/* SPDX-License-Identifier: BSD-3-Clause */
/* What resihp-run reads from scontrol (tools/run/slurm.h): a node's
 * State= (DOWN in any form is down; a field that only ends in "State=",
 * or none, is not a verdict), SlurmdTimeout from the configuration, and
 * whether squeue's state of a job says that it may still run. */
#include "config.h"

#include "../../tools/run/slurm.h"
#include "suite_main.h"

#include <check.h>

START_TEST(node_state) {
  static const struct {
    const char *line;
    int down;
  } t[] = {
      {"NodeName=n1 Arch=x86_64 CoresPerSocket=1 State=DOWN* ThreadsPerCore=1", 1},
      {"NodeName=n1 State=DOWN+DRAIN Weight=1", 1},
      {"NodeName=n1 State=DOWN", 1},
      {"NodeName=n1 State=MIXED* Weight=1", 0},
      {"NodeName=n1 State=IDLE+DRAIN Reason=DOWN", 0},
      {"NodeName=n1 State=ALLOCATED", 0},
      {"NodeName=n1 NextState=DOWN State=IDLE", 0},
      {"NodeName=n1 NextState=DOWN", -1},
      {"", -1},
      {"State=DOWN", 1},
  };
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
    ck_assert_msg(resihp__slurm_state_down(t[i].line) == t[i].down,
                  "'%s': %d", t[i].line, resihp__slurm_state_down(t[i].line));
}
END_TEST

START_TEST(slurmd_timeout) {
  ck_assert_int_eq(resihp__slurm_parse_timeout("SlurmdTimeout           = 300 sec"),
                   300);
  ck_assert_int_eq(resihp__slurm_parse_timeout("SlurmdTimeout = 10 sec"), 10);
  const char *bad[] = {"SlurmdTimeout = 10",        "SlurmdTimeout = x sec",
                       "SlurmctldTimeout = 10 sec", "SlurmdTimeout = 10 sec x",
                       "SlurmdTimeout = -5 sec",    ""};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(resihp__slurm_parse_timeout(bad[i]) == -1, "'%s' taken",
                  bad[i]);
}
END_TEST

START_TEST(job_state) {
  static const struct {
    const char *line;
    int active;
  } t[] = {
      {"RUNNING", 1},   {"PENDING", 1},   {"COMPLETING", 1}, {"SUSPENDED", 1},
      {"CONFIGURING", 1}, {"COMPLETED", 0}, {"CANCELLED+", 0}, {"CANCELLED by 0", 0},
      {"FAILED", 0},    {"TIMEOUT", 0},   {"NODE_FAIL", 0},  {"OUT_OF_MEMORY", 0},
      {"", 0},
  };
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
    ck_assert_msg(resihp__slurm_state_active(t[i].line) == t[i].active,
                  "'%s': %d", t[i].line, resihp__slurm_state_active(t[i].line));
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("run_slurm");
  TCase *tc = tcase_create("scontrol");
  tcase_add_test(tc, node_state);
  tcase_add_test(tc, slurmd_timeout);
  tcase_add_test(tc, job_state);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return run_suite(suite());
}
