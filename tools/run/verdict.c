/* SPDX-License-Identifier: BSD-3-Clause */
/* See verdict.h. */
#include "config.h"

#include "../../libresihp/transport/mesh.h"
#include "slurm.h"
#include "verdict.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void resihp__verdict_init(resihp__verdict_t *v) {
  memset(v, 0, sizeof(*v));
  v->fd = -1;
}

int resihp__verdict_due(const resihp__verdict_t *v) {
  return v->fd < 0 && resihp__now_ms() >= v->next_ms;
}

void resihp__verdict_soon(resihp__verdict_t *v) {
  v->next_ms = 0;
}

int resihp__verdict_ask(resihp__verdict_t *v, const char *const *names, int n) {
  if (!resihp__verdict_due(v))
    return 1;
  v->next_ms = resihp__now_ms() + RESIHP__VERDICT_PERIOD_MS;
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
  char *argv[] = {"timeout", "-k",   "1",  "5",  "scontrol",
                  "show",    "node", list, "-o", NULL};
  int fd;
  pid_t p = off ? resihp__slurm_spawn(argv, 1, &fd) : -1;
  free(list);
  if (p < 0)
    return -1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  v->pid = p;
  v->fd = fd;
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
