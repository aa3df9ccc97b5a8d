/* SPDX-License-Identifier: BSD-3-Clause */
/* What resihp-run reads from scontrol (tools/run/slurm.h): a node's
 * State= (DOWN in any form is down; a field that only ends in "State=",
 * or none, is not a verdict), SlurmdTimeout from the configuration, and
 * whether squeue's state of a job says that it may still run; nodes'
 * states asked in the background (verdict.h); and which ranks of a
 * replica died with which of its nodes (shrink_pick.h). */
#include "config.h"

#include "../../libresihp/transport/mesh.h"
#include "../../tools/run/jobnote.h"
#include "../../tools/run/shrink_pick.h"
#include "../../tools/run/slurm.h"
#include "../../tools/run/verdict.h"
#include "suite_main.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* A fake Slurm command NAME (script text) in a new directory made from
 * the template dir, first on PATH; its path into path (unlink it and
 * rmdir dir after). */
static void fake_command(char *dir, const char *name, const char *script,
                         char *path, size_t len) {
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, len, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(script, f);
  fclose(f);
  chmod(path, 0755);
  char env[4200];
  snprintf(env, sizeof(env), "%s:%s", dir, getenv("PATH"));
  setenv("PATH", env, 1);
}

/* A step's name as slurmctld says it (a fake squeue in PATH that knows
 * step 7.1 as resihp-replica-1 and nothing else): a claimed id is taken
 * only with the launcher's own name for it. */
START_TEST(step_named) {
  char dir[] = "/tmp/resihp-squeue-XXXXXX", path[128];
  fake_command(dir, "squeue",
               "#!/bin/sh\n[ \"$2\" = --steps=7.1 ] && echo resihp-replica-1\n"
               "exit 0\n",
               path, sizeof(path));
  ck_assert_int_eq(resihp__slurm_step_named("7.1", "resihp-replica-1"), 1);
  ck_assert_int_eq(resihp__slurm_step_named("7.1", "resihp-replica-0"), 0);
  ck_assert_int_eq(resihp__slurm_step_named("7.2", "resihp-replica-1"), 0);
  ck_assert_int_eq(resihp__slurm_step_named("7.1", "resihp-replica-"), 0);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* The job's Comment: the user's own text kept in front, ours after it,
 * rewritten (not appended) each time, bounded and printable. */
START_TEST(jobnote) {
  resihp__jobnote_t n = {.state = "running", .step = 12, .failures = 2,
                         .replacements = 1, .nodes_bad = 1, .dropped = 1,
                         .last = "replica 2 on n3 at step 12: killed\n\"x\""};
  char out[RESIHP__JOBNOTE_MAX + 1], user[RESIHP__JOBNOTE_USER_MAX + 1];
  resihp__jobnote_text("my sweep 7", &n, out, sizeof(out));
  ck_assert_str_eq(out, "my sweep 7 | resihp: running at step 12; failures 2 "
                        "(last: replica 2 on n3 at step 12: killed??x?); "
                        "replacements 1; nodes bad 1; replicas dropped 1");
  int f = -1;
  resihp__jobnote_parse(out, user, sizeof(user), &f);
  ck_assert_str_eq(user, "my sweep 7");
  ck_assert_int_eq(f, 2);
  /* ours alone, "(null)" (no comment) and none at all */
  resihp__jobnote_parse("resihp: completed at step 3; failures 5; x", user,
                        sizeof(user), &f);
  ck_assert_str_eq(user, "");
  ck_assert_int_eq(f, 5);
  resihp__jobnote_parse("(null)", user, sizeof(user), &f);
  ck_assert_str_eq(user, "");
  ck_assert_int_eq(f, 0);
  n.failures = 0;
  n.last = NULL;
  n.dropped = 0;
  resihp__jobnote_text(NULL, &n, out, sizeof(out));
  ck_assert_str_eq(out, "resihp: running at step 12; failures 0; "
                        "replacements 1; nodes bad 1");
  /* long texts are cut: the user's part, then the whole */
  char big[2000];
  memset(big, 'u', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  resihp__jobnote_parse(big, user, sizeof(user), &f);
  ck_assert_uint_eq(strlen(user), RESIHP__JOBNOTE_USER_MAX);
  n.last = big;
  n.state = big;
  ck_assert_uint_le(resihp__jobnote_text(big, &n, out, sizeof(out)),
                    RESIHP__JOBNOTE_MAX);
  ck_assert_uint_le(strlen(out), RESIHP__JOBNOTE_MAX);
}
END_TEST

/* A replica's ranks lie on its nodes in Slurm's block order: the dead
 * node's ranks are the dead ones; nothing to shrink when no node or
 * every node died, with one node, or past 64 ranks. */
START_TEST(shrink_pick) {
  unsigned long long dead = 7;
  int d3[3] = {0, 1, 0}, none[3] = {0, 0, 0}, all[3] = {1, 1, 1};
  ck_assert_int_eq(resihp__run_shrink_pick(3, 1, d3, &dead), 2);
  ck_assert_uint_eq(dead, 2);
  ck_assert_int_eq(resihp__run_shrink_pick(3, 2, d3, &dead), 2);
  ck_assert_uint_eq(dead, 0xc); /* ranks 2 and 3 on node 1 */
  int d0[2] = {1, 0};
  ck_assert_int_eq(resihp__run_shrink_pick(2, 1, d0, &dead), 1);
  ck_assert_uint_eq(dead, 1);
  dead = 5;
  ck_assert_int_eq(resihp__run_shrink_pick(3, 1, none, &dead), -1);
  ck_assert_int_eq(resihp__run_shrink_pick(3, 1, all, &dead), -1);
  ck_assert_int_eq(resihp__run_shrink_pick(1, 1, d0, &dead), -1);
  ck_assert_int_eq(resihp__run_shrink_pick(3, 0, d3, &dead), -1);
  ck_assert_int_eq(resihp__run_shrink_pick(3, 22, d3, &dead), -1);
  ck_assert_uint_eq(dead, 5); /* untouched when refused */
  int d64[64] = {0};
  d64[63] = 1;
  ck_assert_int_eq(resihp__run_shrink_pick(64, 1, d64, &dead), 63);
  ck_assert_uint_eq(dead, 1ULL << 63);
}
END_TEST

/* What a verdict query answered: "name=down," per node, in order. */
static void note_node(const char *name, int down, void *ud) {
  char *got = ud;
  size_t l = strlen(got);
  snprintf(got + l, 4096 - l, "%s=%d,", name, down);
}

/* Reads until the query in flight has ended (an event the fake scontrol
 * makes; the bound only keeps a broken test from hanging). */
static int read_until_ended(resihp__verdict_t *v, char *got) {
  for (int i = 0; i < 60000; i++) {
    int rc = resihp__verdict_read(v, note_node, got);
    if (rc)
      return rc;
    usleep(1000);
  }
  return 0;
}

/* Slurm's verdict asked in the background (resihp-run's loop is the
 * coordinator's): the query does not wait for slurmctld, which here does
 * not answer until the test lets it (a file appears); then one answer for
 * every node asked, in one query, down or not, and none for a node
 * slurmctld does not list. One query at a time, and at most one a second
 * unless asked to ask soon. */
START_TEST(verdict_background) {
  char dir[] = "/tmp/resihp-scontrol-XXXXXX", path[128], gate[160], args[160];
  fake_command(dir, "scontrol",
               "#!/bin/sh\necho \"$*\" > \"${0%/*}/args\"\n"
               "while [ ! -e \"${0%/*}/gate\" ]; do sleep 0.01; done\n"
               "echo 'NodeName=n1 Arch=x86_64 State=DOWN* x=1'\n"
               "echo 'garbage State=DOWN'\n"
               "echo 'NodeName=n2 State=IDLE x=1'\n"
               "echo 'NodeName=n4 NextState=DOWN'\n",
               path, sizeof(path));
  snprintf(gate, sizeof(gate), "%s/gate", dir);
  snprintf(args, sizeof(args), "%s/args", dir);
  resihp__verdict_t v;
  resihp__verdict_init(&v);
  char got[4096] = "";
  const char *names[] = {"n1", "n2", "n3", "n4"};
  int64_t t0 = resihp__now_ms();
  ck_assert_int_eq(resihp__verdict_ask(&v, names, 4), 0);
  ck_assert_int_eq(resihp__verdict_ask(&v, names, 4), 1); /* in flight */
  /* slurmctld has not answered: nothing blocks, nothing is said */
  ck_assert_int_eq(resihp__verdict_read(&v, note_node, got), 0);
  ck_assert_str_eq(got, "");
  FILE *f = fopen(gate, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  ck_assert_int_eq(read_until_ended(&v, got), 1);
  ck_assert_str_eq(got, "n1=1,n2=0,");
  f = fopen(args, "r");
  char line[256] = "";
  ck_assert_ptr_nonnull(f);
  ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
  fclose(f);
  ck_assert_str_eq(line, "show node n1,n2,n3,n4 -o\n");
  /* ended: the next one may start (the caller reaps the last) */
  pid_t pid = v.pid;
  ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
  resihp__verdict_reaped(&v, pid);
  ck_assert_int_eq(v.pid, 0);
  /* the next not before a second after the last began, unless a new
   * wait asks at once */
  ck_assert_int_ge(v.next_ms, t0 + RESIHP__VERDICT_PERIOD_MS);
  resihp__verdict_soon(&v);
  ck_assert(resihp__verdict_due(&v));
  ck_assert_int_eq(resihp__verdict_ask(&v, names, 1), 0);
  got[0] = '\0';
  ck_assert_int_eq(read_until_ended(&v, got), 1);
  ck_assert_str_eq(got, "n1=1,n2=0,"); /* (the fake says the same) */
  resihp__verdict_finish(&v);          /* reaps it */
  ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
  unlink(gate);
  unlink(args);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* A slurmctld that never answers: the query ends at its bound with no
 * verdict; one that is stopped at the end goes at once. A
 * list longer than one query carries is cut at a whole name. */
START_TEST(verdict_bounded) {
  char dir[] = "/tmp/resihp-scontrol-XXXXXX", path[128], args[160];
  fake_command(dir, "scontrol",
               "#!/bin/sh\necho \"$3\" > \"${0%/*}/args\"\n"
               "exec sleep 1000\n",
               path, sizeof(path));
  snprintf(args, sizeof(args), "%s/args", dir);
  resihp__verdict_t v;
  resihp__verdict_init(&v);
  char got[4096] = "";
  enum { N = 2000 }; /* 56 KB of names */
  static char name[N][64];
  const char *names[N];
  for (int i = 0; i < N; i++) {
    snprintf(name[i], sizeof(name[i]), "node-with-a-long-name-%05d", i);
    names[i] = name[i];
  }
  ck_assert_int_eq(resihp__verdict_ask(&v, names, N), 0);
  ck_assert_int_eq(read_until_ended(&v, got), 1); /* timeout's 5 s */
  ck_assert_str_eq(got, "");
  FILE *f = fopen(args, "r");
  ck_assert_ptr_nonnull(f);
  static char list[RESIHP__VERDICT_LIST_MAX + 2];
  ck_assert_ptr_nonnull(fgets(list, sizeof(list), f));
  fclose(f);
  list[strcspn(list, "\n")] = '\0';
  ck_assert_uint_lt(strlen(list), RESIHP__VERDICT_LIST_MAX);
  ck_assert_uint_gt(strlen(list), RESIHP__VERDICT_LIST_MAX - 64);
  ck_assert(!strncmp(list, "node-with-a-long-name-00000,", 28));
  const char *last = strrchr(list, ',') + 1;
  ck_assert_uint_eq(strlen(last), strlen(name[0])); /* a whole name */
  resihp__verdict_finish(&v);
  /* a query stopped while it waits */
  ck_assert_int_eq(resihp__verdict_ask(&v, names, 1), 0);
  ck_assert_int_eq(resihp__verdict_read(&v, note_node, got), 0);
  resihp__verdict_finish(&v);
  ck_assert_int_eq(v.fd, -1);
  ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1); /* nothing left */
  unlink(args);
  unlink(path);
  rmdir(dir);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("run_slurm");
  TCase *tc = tcase_create("scontrol");
  tcase_add_test(tc, node_state);
  tcase_add_test(tc, slurmd_timeout);
  tcase_add_test(tc, job_state);
  tcase_add_test(tc, step_named);
  tcase_add_test(tc, jobnote);
  tcase_add_test(tc, shrink_pick);
  tcase_add_test(tc, verdict_background);
  tcase_add_test(tc, verdict_bounded);
  /* (verdict_bounded waits out the 5 s bound once) */
  tcase_set_timeout(tc, 30);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return run_suite(suite());
}
