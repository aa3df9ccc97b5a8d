/* SPDX-License-Identifier: BSD-3-Clause */
/* See slurm.h. */
#include "config.h"

#include "slurm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

pid_t resihp__slurm_spawn(char *const argv[], int quiet, int *out) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC))
    return -1;
  fflush(NULL);
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid_t p = fork();
  if (p == 0) {
    for (int sig = 1; sig < NSIG; sig++)
      if (sig != SIGKILL && sig != SIGSTOP)
        signal(sig, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    dup2(fds[1], 1);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      if (quiet)
        dup2(null, 2);
    }
    execvp(argv[0], argv);
    if (!quiet)
      fprintf(stderr, "resihp-run: cannot run %s: %s\n", argv[0],
              strerror(errno));
    _exit(127);
  }
  sigprocmask(SIG_SETMASK, &old, NULL);
  close(fds[1]);
  if (p < 0) {
    close(fds[0]);
    return -1;
  }
  *out = fds[0];
  return p;
}

int resihp__slurm_run(char *const argv[], int quiet,
                      void (*on_line)(const char *line, void *ud), void *ud) {
  int fd;
  pid_t p = resihp__slurm_spawn(argv, quiet, &fd);
  if (p < 0)
    return -1;
  FILE *f = fdopen(fd, "r");
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while (f && (n = getline(&line, &cap, f)) >= 0) {
    line[strcspn(line, "\r\n")] = '\0';
    if (*line && on_line)
      on_line(line, ud);
  }
  free(line);
  if (f)
    fclose(f);
  else
    close(fd);
  int st = 0;
  while (waitpid(p, &st, 0) < 0 && errno == EINTR)
    ;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int resihp__slurm_state_down(const char *line) {
  const char *s = line;
  /* State= as a field of its own (not the end of another key) */
  while ((s = strstr(s, "State=")) && s != line && s[-1] != ' ')
    s += 6;
  if (!s)
    return -1;
  s += 6;
  size_t n = strcspn(s, " \n");
  /* the base state comes first; flags follow after '+', '*' or '~' */
  return n >= 4 && !strncmp(s, "DOWN", 4) ? 1 : 0;
}

int resihp__slurm_state_active(const char *line) {
  static const char *const over[] = {
      "COMPLETED", "CANCELLED",     "FAILED",   "TIMEOUT",   "NODE_FAIL",
      "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED"};
  size_t n = strcspn(line, " \t+");
  for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++)
    if (n == strlen(over[i]) && !strncmp(line, over[i], n))
      return 0;
  return n > 0;
}

static void on_job_line(const char *line, void *ud) {
  *(int *)ud |= resihp__slurm_state_active(line);
}

int resihp__slurm_job_active(const char *job) {
  char *argv[] = {"squeue", "-h", "-j", (char *)job, "-o", "%T", NULL};
  int active = 0;
  return !resihp__slurm_run(argv, 1, on_job_line, &active) && active;
}

int resihp__slurm_parse_timeout(const char *line) {
  char key[32], unit[8];
  int v = -1, used = 0;
  if (sscanf(line, " %31s = %d %7s%n", key, &v, unit, &used) != 3 ||
      strcmp(key, "SlurmdTimeout") || strcmp(unit, "sec") || v < 0 ||
      line[used + strspn(line + used, " \t\r")] != '\0')
    return -1;
  return v;
}

static void on_config_line(const char *line, void *ud) {
  int v = resihp__slurm_parse_timeout(line);
  if (v >= 0)
    *(int *)ud = v;
}

int resihp__slurm_slurmd_timeout_s(void) {
  char *argv[] = {"timeout",  "-k",   "1",      "10",
                  "scontrol", "show", "config", NULL};
  int v = -1;
  resihp__slurm_run(argv, 1, on_config_line, &v);
  return v >= 0 ? v : 300;
}

struct named {
  const char *name;
  int yes;
};

static void on_step_line(const char *line, void *ud) {
  struct named *n = ud;
  n->yes |= !strcmp(line, n->name);
}

int resihp__slurm_step_named(const char *id, const char *name) {
  char steps[96];
  snprintf(steps, sizeof(steps), "--steps=%s", id);
  char *argv[] = {"timeout", "-k", "2",       "30",      "squeue", "-h",
                  steps,     "-o", "%j", NULL};
  struct named n = {name, 0};
  return !resihp__slurm_run(argv, 1, on_step_line, &n) && n.yes;
}
