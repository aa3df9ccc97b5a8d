/* SPDX-License-Identifier: BSD-3-Clause */
/* The keeper (libresihp/control/keeper.h) with real processes: a primary's
 * exit status passes through; a primary SIGKILLed, or SIGSTOPped beyond
 * the hang bound, is replaced by one that gets exactly the last complete
 * record (never a cut one); the old primary's children are reaped and
 * their exits reach the new primary; a gated child (gate.h) runs only if
 * its parent recorded it and let it go; signals reach the primary; a primary
 * that keeps dying without progress makes the keeper give up. Each case
 * runs the keeper in a child of the test and reads its exit status: the
 * primaries say what they saw through their own exit status. */
#include "config.h"

#include "../../libresihp/control/gate.h"
#include "../../libresihp/control/keeper.h"
#include "suite_main.h"

#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LOST 99

typedef int (*primary_fn)(void *, const char *, size_t, resihp__keeper_t *);

/* The keeper, in a child; its exit status. */
static int keep(primary_fn fn, int hang_ms, int max, pid_t *keeper) {
  pid_t p = fork();
  ck_assert_int_ge(p, 0);
  if (p == 0) {
    signal(SIGPIPE, SIG_DFL); /* as resihp-run has it (run_suite ignores it) */
    resihp__keeper_opts_t o = {.hang_ms = hang_ms,
                               .max_failovers = max,
                               .lost_status = LOST,
                               .primary = fn};
    _exit(resihp__keeper_run(&o));
  }
  if (keeper)
    *keeper = p;
  return p;
}

static int status_of(pid_t p) {
  int st;
  ck_assert_int_eq(waitpid(p, &st, 0), p);
  ck_assert(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static int exits_42(void *ud, const char *snap, size_t len,
                    resihp__keeper_t *k) {
  (void)ud;
  (void)k;
  return snap || len ? 1 : 42;
}

START_TEST(exit_status_passes_through) {
  ck_assert_int_eq(status_of(keep(exits_42, 0, 0, NULL)), 42);
}
END_TEST

/* A standby's takeover: the first primary starts from the record given,
 * which counts as one failover, for the reason given. */
static int from_record(void *ud, const char *snap, size_t len,
                       resihp__keeper_t *k) {
  (void)ud;
  const char *why = NULL;
  int n = resihp__keeper_failovers(k, &why, NULL, NULL);
  return snap && len == 5 && !memcmp(snap, "state", 5) && n == 1 &&
                 !strcmp(why, "lost with its node")
             ? 43
             : 1;
}

START_TEST(first_primary_from_a_record) {
  pid_t p = fork();
  ck_assert_int_ge(p, 0);
  if (p == 0) {
    resihp__keeper_opts_t o = {.lost_status = LOST,
                               .primary = from_record,
                               .snap = "state",
                               .snaplen = 5,
                               .first_why = "lost with its node"};
    _exit(resihp__keeper_run(&o));
  }
  ck_assert_int_eq(status_of(p), 43);
}
END_TEST

/* First primary: records "one", then "two", then a cut "three", then dies
 * by SIGKILL. Second: must see "two" and one failover, killed. */
static int killed_mid_record(void *ud, const char *snap, size_t len,
                             resihp__keeper_t *k) {
  (void)ud;
  if (!snap) {
    resihp__keeper_record(k, "one", 3);
    resihp__keeper_record(k, "two", 3);
    resihp__keeper_record_cut(k, "three", 5, 2);
    raise(SIGKILL);
    return 1;
  }
  const char *why = NULL;
  int n = resihp__keeper_failovers(k, &why, NULL, NULL);
  return len == 3 && !memcmp(snap, "two", 3) && n == 1 && !strcmp(why, "killed")
             ? 10
             : 2;
}

START_TEST(killed_primary_gets_last_complete_record) {
  ck_assert_int_eq(status_of(keep(killed_mid_record, 0, 0, NULL)), 10);
}
END_TEST

/* First primary: a record, then stops itself (as SIGSTOP from outside
 * would) and never beats again. */
static int stops(void *ud, const char *snap, size_t len, resihp__keeper_t *k) {
  (void)ud;
  if (!snap) {
    resihp__keeper_record(k, "state", 5);
    raise(SIGSTOP);
    return 1; /* only if it is let go: the keeper must kill it */
  }
  const char *why = NULL;
  int n = resihp__keeper_failovers(k, &why, NULL, NULL);
  return len == 5 && n == 1 && !strcmp(why, "hung") ? 20 : 2;
}

START_TEST(hung_primary_is_killed_and_replaced) {
  ck_assert_int_eq(status_of(keep(stops, 200, 0, NULL)), 20);
}
END_TEST

/* First primary: starts a child that waits forever, records its pid,
 * dies. Second: kills that orphan and waits for the keeper's notice. */
static int orphan(void *ud, const char *snap, size_t len, resihp__keeper_t *k) {
  (void)ud;
  (void)len;
  if (!snap) {
    pid_t c = fork();
    if (c == 0) {
      for (;;)
        pause();
    }
    char s[32];
    int n = snprintf(s, sizeof(s), "%ld", (long)c);
    resihp__keeper_record(k, s, (size_t)n);
    raise(SIGKILL);
    return 1;
  }
  pid_t c = (pid_t)atol(snap);
  if (c <= 0 || kill(c, SIGTERM))
    return 2;
  for (int i = 0; i < 600000; i++) { /* a safety net, not a timing */
    pid_t p;
    int st;
    resihp__keeper_beat(k);
    if (resihp__keeper_orphan(k, &p, &st)) {
      if (p == c)
        return WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM ? 30 : 3;
    } else {
      usleep(1000);
    }
  }
  return 4;
}

START_TEST(orphans_exits_reach_the_new_primary) {
  ck_assert_int_eq(status_of(keep(orphan, 0, 0, NULL)), 30);
}
END_TEST

/* Every descriptor above stderr closed but keep. */
static void close_all_but(int keep) {
  for (int fd = 3; fd < 1024; fd++)
    if (fd != keep)
      close(fd);
}

/* An orphan that exits while the primary has already closed its end of
 * the notices (as a primary does when it exits, before the keeper reaps
 * it): the keeper's notice finds no reader, and the keeper must go on
 * (not die of SIGPIPE) and pass the primary's status on. The orphan, a
 * grandchild, waits on a pipe that the primary closes after its own ends
 * of the keeper's pipes; the primary returns once the keeper reaped it. */
static int orphan_after_close(void *ud, const char *snap, size_t len,
                              resihp__keeper_t *k) {
  (void)ud;
  (void)snap;
  (void)len;
  (void)k;
  int p[2];
  if (pipe(p))
    return 1;
  int q[2]; /* the grandchild's pid, from the child that forks it */
  if (pipe(q))
    return 1;
  pid_t x = fork();
  if (x == 0) {
    pid_t g = fork();
    if (g == 0) {
      close_all_but(p[0]);
      char c;
      while (read(p[0], &c, 1) > 0)
        ;
      _exit(0);
    }
    _exit(write(q[1], &g, sizeof(g)) == (ssize_t)sizeof(g) ? 0 : 1);
  }
  pid_t g = 0;
  if (x < 0 || read(q[0], &g, sizeof(g)) != (ssize_t)sizeof(g) ||
      waitpid(x, NULL, 0) != x)
    return 2;
  close_all_but(p[1]);
  close(p[1]); /* the grandchild, now the keeper's, exits */
  for (int i = 0; i < 600000 && kill(g, 0) == 0; i++) /* a safety net */
    usleep(1000);
  return kill(g, 0) == 0 ? 3 : 50;
}

START_TEST(orphan_exit_after_primary_closed_its_end) {
  ck_assert_int_eq(status_of(keep(orphan_after_close, 0, 0, NULL)), 50);
}
END_TEST

/* A gated child (gate.h) whose parent, the first primary, is killed:
 * mode 0 after recording the child's pid, 1 after opening its gate too,
 * 2 before recording it. The child would make gate_file. Second primary:
 * the orphan's exit says whether it ran, and the file agrees. */
static int gate_mode;
static char gate_file[64];

static int gated(void *ud, const char *snap, size_t len, resihp__keeper_t *k) {
  (void)ud;
  (void)len;
  if (!snap) {
    resihp__keeper_record(k, "0", 1); /* a record without the child */
    int g;
    pid_t c = resihp__gate_fork(&g);
    if (c == 0) {
      int fd = open(gate_file, O_CREAT | O_WRONLY, 0600);
      _exit(fd >= 0 ? 7 : 8);
    }
    if (c < 0)
      return 2;
    char s[32];
    int n = snprintf(s, sizeof(s), "%ld", (long)c);
    if (gate_mode != 2)
      resihp__keeper_record(k, s, (size_t)n);
    if (gate_mode == 1)
      resihp__gate_open(g);
    raise(SIGKILL);
    return 1;
  }
  pid_t c = (pid_t)atol(snap);
  for (int i = 0; i < 600000; i++) { /* a safety net, not a timing */
    pid_t p;
    int st;
    resihp__keeper_beat(k);
    if (!resihp__keeper_orphan(k, &p, &st)) {
      usleep(1000);
      continue;
    }
    if (c && p != c)
      return 3;
    int made = access(gate_file, F_OK) == 0;
    if (gate_mode == 1)
      return WIFEXITED(st) && WEXITSTATUS(st) == 7 && made ? 50 : 4;
    return resihp__gate_unopened(st) && !made ? 50 : 5;
  }
  return 6;
}

START_TEST(gated_child_runs_only_once_recorded) {
  for (gate_mode = 0; gate_mode < 3; gate_mode++) {
    snprintf(gate_file, sizeof(gate_file), "/tmp/resihp-gate.%d.%d",
             (int)getpid(), gate_mode);
    unlink(gate_file);
    ck_assert_int_eq(status_of(keep(gated, 0, 0, NULL)), 50);
    unlink(gate_file);
  }
}
END_TEST

static volatile sig_atomic_t got_term;
static void on_term(int s) {
  (void)s;
  got_term = 1;
}
static int ready_fd = -1;

static int takes_sigterm(void *ud, const char *snap, size_t len,
                         resihp__keeper_t *k) {
  (void)ud;
  (void)snap;
  (void)len;
  signal(SIGTERM, on_term);
  resihp__keeper_record(k, "up", 2); /* handlers in place */
  if (write(ready_fd, "r", 1) != 1)
    return 2;
  for (int i = 0; i < 600000 && !got_term; i++)
    usleep(1000);
  return got_term ? 40 : 3;
}

START_TEST(signals_reach_the_primary) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  ready_fd = p[1];
  pid_t kpid;
  keep(takes_sigterm, 0, 0, &kpid);
  close(p[1]);
  char c;
  ck_assert_int_eq(read(p[0], &c, 1), 1);
  kill(kpid, SIGTERM);
  ck_assert_int_eq(status_of(kpid), 40);
  close(p[0]);
}
END_TEST

static int dies_at_once(void *ud, const char *snap, size_t len,
                        resihp__keeper_t *k) {
  (void)ud;
  (void)snap;
  (void)len;
  (void)k;
  if (write(ready_fd, "x", 1) != 1)
    return 2;
  raise(SIGKILL);
  return 1;
}

START_TEST(gives_up_without_progress) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  ready_fd = p[1];
  pid_t kpid;
  keep(dies_at_once, 0, 2, &kpid);
  close(p[1]);
  ck_assert_int_eq(status_of(kpid), LOST);
  char buf[16];
  ssize_t n = read(p[0], buf, sizeof(buf));
  ck_assert_int_eq(n, 3); /* the first primary and 2 failovers */
  close(p[0]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("keeper");
  TCase *tc = tcase_create("keeper");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, exit_status_passes_through);
  tcase_add_test(tc, first_primary_from_a_record);
  tcase_add_test(tc, killed_primary_gets_last_complete_record);
  tcase_add_test(tc, hung_primary_is_killed_and_replaced);
  tcase_add_test(tc, orphans_exits_reach_the_new_primary);
  tcase_add_test(tc, orphan_exit_after_primary_closed_its_end);
  tcase_add_test(tc, gated_child_runs_only_once_recorded);
  tcase_add_test(tc, signals_reach_the_primary);
  tcase_add_test(tc, gives_up_without_progress);
  suite_add_tcase(s, tc);
  return run_suite(s);
}
