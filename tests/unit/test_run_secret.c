/* SPDX-License-Identifier: BSD-3-Clause */
/* The job secret's file (tools/run/secret.h) cannot outlive its job: a
 * keeper that makes one is stopped there and SIGKILLed from outside, and
 * the next start in the directory removes what it left; a secret that a
 * live process holds (the keeper, or a standby that holds another's), or
 * whose job Slurm still runs, stays; names not of our form, links and
 * directories are never touched. */
#include "config.h"

#include "../../tools/run/secret.h"
#include "suite_main.h"

#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static void make_dir(void) {
  snprintf(dir, sizeof(dir), "/tmp/resihp-secret-test.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static int job_over(const char *job) {
  (void)job;
  return 0;
}

static int job_runs(const char *job) {
  (void)job;
  return 1;
}

static int exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* A process that makes a secret (hold: holds `path` instead) and stops;
 * its secret's name into path. */
static pid_t stopped_keeper(const char *job, char *path, size_t len,
                            const char *hold) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    char mine[512] = "";
    int fd = -1;
    if (hold)
      fd = resihp__secret_hold(hold);
    else if (resihp__secret_create(dir, job, mine, sizeof(mine), &fd))
      fd = -1;
    if (fd < 0)
      _exit(1);
    if (write(p[1], mine, sizeof(mine)) != (ssize_t)sizeof(mine))
      _exit(1);
    raise(SIGSTOP);
    _exit(0);
  }
  close(p[1]);
  char got[512];
  ck_assert_int_eq(read(p[0], got, sizeof(got)), sizeof(got));
  close(p[0]);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
  ck_assert(WIFSTOPPED(st));
  if (path)
    snprintf(path, len, "%s", got);
  return pid;
}

static void kill_outside(pid_t pid) {
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
}

/* The next resihp-run in the directory: a secret of its own, after the
 * clean-up. */
static void next_start(resihp__secret_job_active_fn active) {
  char path[512];
  int fd;
  resihp__secret_clean_stale(dir, active, 4096);
  ck_assert_int_eq(resihp__secret_create(dir, "999", path, sizeof(path), &fd),
                   0);
  ck_assert(exists(path));
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0600);
  ck_assert_int_eq(st.st_size, 32);
  unlink(path);
  close(fd);
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

START_TEST(killed_keeper_leaves_nothing_for_long) {
  char path[512];
  make_dir();
  kill_outside(stopped_keeper("101", path, sizeof(path), NULL));
  ck_assert_msg(exists(path), "the kill left nothing to clean: %s", path);
  next_start(job_over);
  ck_assert_msg(!exists(path), "a SIGKILLed keeper's secret outlived it: %s",
                path);
  remove_dir();
}
END_TEST

START_TEST(held_secret_stays) {
  char path[512];
  make_dir();
  pid_t keeper = stopped_keeper("102", path, sizeof(path), NULL);
  next_start(job_over);
  ck_assert_msg(exists(path), "a live keeper's secret was removed");
  /* a standby holds it too: the keeper's death does not free it */
  pid_t standby = stopped_keeper("102", NULL, 0, path);
  kill_outside(keeper);
  next_start(job_over);
  ck_assert_msg(exists(path), "a live standby's secret was removed");
  kill_outside(standby);
  next_start(job_over);
  ck_assert(!exists(path));
  remove_dir();
}
END_TEST

START_TEST(running_job_secret_stays) {
  char path[512];
  make_dir();
  kill_outside(stopped_keeper("103", path, sizeof(path), NULL));
  /* nobody holds it, but Slurm says the job runs (locks that are
   * node-local only): kept */
  next_start(job_runs);
  ck_assert(exists(path));
  next_start(job_over);
  ck_assert(!exists(path));
  remove_dir();
}
END_TEST

START_TEST(not_ours_untouched) {
  make_dir();
  static const char *const names[] = {".resihp-secret.1", ".resihp-secret.x.2",
                                      ".resihp-secret.3.4x", "resihp-secret.5.6",
                                      ".resihp-secret.7.8.tmp"};
  char p[256], target[256], link[256], sub[256];
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
    int fd = open(p, O_WRONLY | O_CREAT, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
  }
  snprintf(target, sizeof(target), "%s/target", dir);
  close(open(target, O_WRONLY | O_CREAT, 0600));
  snprintf(link, sizeof(link), "%s/.resihp-secret.9.10", dir);
  ck_assert_int_eq(symlink(target, link), 0);
  snprintf(sub, sizeof(sub), "%s/.resihp-secret.11.12", dir);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  ck_assert_int_eq(resihp__secret_clean_stale(dir, job_over, 4096), 0);
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
    ck_assert_msg(exists(p), "%s removed", names[i]);
  }
  ck_assert(exists(target) && exists(link) && exists(sub));
  remove_dir();
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("run_secret");
  TCase *tc = tcase_create("secret");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, killed_keeper_leaves_nothing_for_long);
  tcase_add_test(tc, held_secret_stays);
  tcase_add_test(tc, running_job_secret_stays);
  tcase_add_test(tc, not_ours_untouched);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return run_suite(suite()); }
