/* SPDX-License-Identifier: BSD-3-Clause */
/* Children that start write-ahead (see gate.h). The gate is a socket pair
 * (a pipe would raise SIGPIPE in a parent whose child died first): the
 * child reads one byte; end of file means every writer is gone, i.e. the
 * parent died before opening it. Later children of the same parent may
 * hold an earlier gate's write end while they wait at their own; each of
 * them ends at its own gate when the parent dies, so all of them end. */
#include "config.h"

#include "gate.h"

#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

pid_t resihp__gate_fork(int *gate) {
  int p[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p))
    return -1;
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(p[0]);
    close(p[1]);
    errno = e;
    return -1;
  }
  if (pid > 0) {
    close(p[0]);
    *gate = p[1];
    return pid;
  }
  close(p[1]);
  char c;
  ssize_t n;
  while ((n = read(p[0], &c, 1)) < 0 && errno == EINTR)
    ;
  close(p[0]);
  if (n == 1)
    return 0;
  /* the parent is gone: end in a way no program run through the gate
   * would be taken for */
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, RESIHP__GATE_SIGNAL);
  signal(RESIHP__GATE_SIGNAL, SIG_DFL);
  sigprocmask(SIG_UNBLOCK, &s, NULL);
  raise(RESIHP__GATE_SIGNAL);
  _exit(127);
}

void resihp__gate_open(int gate) {
  ssize_t n;
  while ((n = send(gate, "g", 1, MSG_NOSIGNAL)) < 0 && errno == EINTR)
    ;
  close(gate);
}

int resihp__gate_unopened(int status) {
  return WIFSIGNALED(status) && WTERMSIG(status) == RESIHP__GATE_SIGNAL;
}
