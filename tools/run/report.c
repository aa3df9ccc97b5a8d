/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run --report FILE: at the end, resihp-report(1) draws the run
 * from its events (--events) into FILE. The report is for people: one
 * that cannot be drawn is a warning, never the job's exit status. */
#include "config.h"

#include "run.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* resihp-report is drawn in seconds; a bound all the same (a stuck
 * renderer must not keep the job's allocation) */
#define REPORT_LIMIT_MS 300000

int report_check(void) {
  const char *dot = strrchr(g.report, '.');
  if (!g.events) {
    fprintf(stderr, "resihp-run: --report %s needs --events FILE (the report "
                    "is drawn from the events)\n",
            g.report);
    return -1;
  }
  if (!dot || (strcmp(dot, ".html") && strcmp(dot, ".htm") &&
               strcmp(dot, ".svg") && strcmp(dot, ".png"))) {
    fprintf(stderr,
            "resihp-run: --report %s: the file's suffix must be .html, .svg "
            "or .png (its format)\n",
            g.report);
    return -1;
  }
  return 0;
}

/* resihp-report beside this program (installed together, or both in the
 * build tree), else the one on PATH. */
static void report_tool(char *out, size_t len) {
  const char *slash = strrchr(g.self, '/');
  if (slash) {
    snprintf(out, len, "%.*s/resihp-report", (int)(slash - g.self), g.self);
    if (!access(out, X_OK))
      return;
  }
  snprintf(out, len, "resihp-report");
}

void make_report(resihp__keeper_t *kp) {
  if (!g.report)
    return;
  char tool[4200];
  report_tool(tool, sizeof(tool));
  char *const argv[] = {tool, "-o", (char *)g.report, (char *)g.events, NULL};
  fflush(stdout);
  fflush(stderr);
  pid_t p = fork();
  if (p < 0) {
    fprintf(stderr, "resihp-run: warning: no report: cannot start %s: %s\n",
            tool, strerror(errno));
    return;
  }
  if (!p) {
    child_setup(0);
    execvp(tool, argv);
    fprintf(stderr, "resihp-run: cannot run %s: %s\n", tool, strerror(errno));
    _exit(127);
  }
  int st = 0;
  int64_t until = resihp__now_ms() + REPORT_LIMIT_MS;
  pid_t w;
  /* the keeper must go on hearing from this primary while it waits */
  while ((w = waitpid(p, &st, WNOHANG)) == 0 && resihp__now_ms() < until) {
    resihp__keeper_beat(kp);
    usleep(50000);
  }
  if (w == 0) {
    kill(-p, SIGKILL);
    waitpid(p, &st, 0);
    fprintf(stderr,
            "resihp-run: warning: no report: %s took more than %d s\n", tool,
            REPORT_LIMIT_MS / 1000);
  } else if (w == p && WIFEXITED(st) && !WEXITSTATUS(st)) {
    printf("  report:                 %s\n", g.report);
    fflush(stdout);
  } else {
    fprintf(stderr,
            "resihp-run: warning: no report: %s ended with status %d (its "
            "message above says why)\n",
            tool, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
}
