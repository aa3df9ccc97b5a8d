/* SPDX-License-Identifier: BSD-3-Clause */
/* See verdict.h. */
#include "config.h"

#include "slurm.h"
#include "verdict.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void resihp__verdict_init(resihp__verdict_t *v) {
  memset(v, 0, sizeof(*v));
  v->fd = -1;
}

int resihp__verdict_ask(resihp__verdict_t *v, const char *const *names, int n) {
  if (v->fd >= 0)
    return 1;
  char *list = malloc(RESIHP__VERDICT_LIST_MAX);
  if (!list)
    return -1;
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    size_t l = strlen(names[i]);
    if (!l || off + l + 2 > RESIHP__VERDICT_LIST_MAX)
      continue;
    if (off)
      list[off++] = ',';
    memcpy(list + off, names[i], l);
    off += l;
  }
  list[off] = '\0';
  int fds[2];
  if (!off || pipe2(fds, O_CLOEXEC)) {
    free(list);
    return -1;
  }
  fflush(NULL);
  /* a signal to the child before its exec must not run our handlers
   * there (resihp-run's stop; a test's) */
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
      dup2(null, 2);
    }
    char *argv[] = {"timeout", "-k",   "1",  "5",  "scontrol",
                    "show",    "node", list, "-o", NULL};
    execvp(argv[0], argv);
    _exit(127);
  }
  sigprocmask(SIG_SETMASK, &old, NULL);
  free(list);
  close(fds[1]);
  if (p < 0) {
    close(fds[0]);
    return -1;
  }
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  v->pid = p;
  v->fd = fds[0];
  v->len = 0;
  return 0;
}

/* One answer line: its NodeName= (the first field of `scontrol -o`) and
 * whether its State= says DOWN. */
static void answer_line(char *line, void (*on_node)(const char *, int, void *),
                        void *ud) {
  if (strncmp(line, "NodeName=", 9))
    return;
  int down = resihp__slurm_state_down(line);
  char *name = line + 9;
  name[strcspn(name, " \t")] = '\0';
  if (*name && down >= 0)
    on_node(name, down, ud);
}

int resihp__verdict_read(resihp__verdict_t *v,
                         void (*on_node)(const char *name, int down, void *ud),
                         void *ud) {
  if (v->fd < 0)
    return 0;
  for (;;) {
    if (v->cap - v->len < 4096 && v->cap < RESIHP__VERDICT_ANSWER_MAX + 1) {
      size_t cap = v->cap ? 2 * v->cap : 16384;
      char *b = realloc(v->buf, cap);
      if (b) {
        v->buf = b;
        v->cap = cap;
      }
    }
    char drop[4096];
    int keep = v->len + 1 < v->cap && v->len < RESIHP__VERDICT_ANSWER_MAX;
    size_t room = keep ? v->cap - v->len - 1 : sizeof(drop);
    ssize_t k = read(v->fd, keep ? v->buf + v->len : drop, room);
    if (k > 0) {
      if (keep)
        v->len += (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    break; /* the end (or an error: the same, no more will come) */
  }
  close(v->fd);
  v->fd = -1;
  if (!v->buf)
    return 1;
  v->buf[v->len] = '\0';
  for (char *s = v->buf, *e; *s; s = e) {
    e = s + strcspn(s, "\n");
    /* a last line without its end was cut by the answer's bound (or by
     * the timeout): no answer */
    if (!*e && v->len >= RESIHP__VERDICT_ANSWER_MAX)
      break;
    if (*e)
      *e++ = '\0';
    answer_line(s, on_node, ud);
  }
  v->len = 0;
  return 1;
}

void resihp__verdict_reaped(resihp__verdict_t *v, pid_t pid) {
  if (pid > 0 && pid == v->pid)
    v->pid = 0;
}

void resihp__verdict_finish(resihp__verdict_t *v) {
  if (v->pid > 0) {
    /* not reaped, so still ours (a zombie at most): timeout passes a
     * SIGTERM on to scontrol, which a SIGKILL would leave behind; at most
     * a second for both to go */
    kill(v->pid, SIGTERM);
    int gone = 0;
    for (int i = 0; i < 100 && !(gone = waitpid(v->pid, NULL, WNOHANG) != 0);
         i++)
      usleep(10000);
    if (!gone) {
      kill(v->pid, SIGKILL);
      while (waitpid(v->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    }
  }
  if (v->fd >= 0)
    close(v->fd);
  free(v->buf);
  resihp__verdict_init(v);
}
