/* SPDX-License-Identifier: BSD-3-Clause */
/* See resihp-run-slurm.h. */
#include "config.h"

#include "resihp-run-slurm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define OUT_MAX 65536

/* argv's standard output (at most cap - 1 bytes kept) into out; 0 when it
 * exited 0. */
static int capture(char *const argv[], char *out, size_t cap) {
  int fds[2];
  out[0] = '\0';
  if (pipe2(fds, O_CLOEXEC))
    return -1;
  pid_t p = fork();
  if (p == 0) {
    dup2(fds[1], 1);
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0)
      dup2(null, 2);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(fds[1]);
  if (p < 0) {
    close(fds[0]);
    return -1;
  }
  size_t n = 0;
  for (;;) {
    char buf[4096];
    ssize_t r = read(fds[0], buf, sizeof(buf));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    size_t take = (size_t)r < cap - 1 - n ? (size_t)r : cap - 1 - n;
    memcpy(out + n, buf, take);
    n += take;
  }
  out[n] = '\0';
  close(fds[0]);
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

int resihp__slurm_node_down(const char *node) {
  char *argv[] = {"scontrol", "show", "node", (char *)node, "-o", NULL};
  char *out = malloc(OUT_MAX);
  int down = out && !capture(argv, out, OUT_MAX) &&
             resihp__slurm_state_down(out) == 1;
  free(out);
  return down;
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

int resihp__slurm_slurmd_timeout_s(void) {
  char *argv[] = {"scontrol", "show", "config", NULL};
  char *out = malloc(OUT_MAX);
  int v = -1;
  if (out && !capture(argv, out, OUT_MAX))
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l && v < 0;
         l = strtok_r(NULL, "\n", &save))
      v = resihp__slurm_parse_timeout(l);
  free(out);
  return v >= 0 ? v : 300;
}
