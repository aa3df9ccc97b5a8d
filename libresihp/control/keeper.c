/* SPDX-License-Identifier: BSD-3-Clause */
/* The keeper (keeper.h): forks the primary, holds its last state record,
 * fails over to a new primary when it dies or hangs. */
#include "config.h"

#include "keeper.h"

#include "../transport/mesh.h"

#include <resihp/error.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* A record: its type, its length (host order), its bytes. */
enum { REC_STATE = 'S', REC_BEAT = 'B' };
#define HDR 5
/* No record of ours comes near this; a bigger length is a broken pipe. */
#define REC_MAX (1u << 30)
#define BEAT_MS 100

struct resihp__keeper {
  int recw;  /* the primary's end of the record pipe */
  int noter; /* the primary's end of the orphan notices */
  int64_t last_beat;
  int failovers;
  const char *why;
  pid_t old;
  int64_t since;
};

typedef struct {
  pid_t pid;
  int status;
} notice_t;

/* The keeper's signal handlers write the signal's number here. */
static int sig_w = -1, sig_r = -1;

static void on_signal(int sig) {
  int e = errno;
  unsigned char b = (unsigned char)sig;
  if (write(sig_w, &b, 1) < 0) {
    /* full: enough wake-ups are pending already */
  }
  errno = e;
}

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return RESIHP_EIO;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int put_record(int fd, char type, const void *buf, size_t len) {
  if (len > REC_MAX)
    return RESIHP_EINVAL;
  unsigned char h[HDR];
  uint32_t l = (uint32_t)len;
  h[0] = (unsigned char)type;
  memcpy(h + 1, &l, 4);
  int rc = write_all(fd, h, HDR);
  return rc ? rc : write_all(fd, buf, len);
}

int resihp__keeper_record(resihp__keeper_t *k, const void *buf, size_t len) {
  int rc = put_record(k->recw, REC_STATE, buf, len);
  if (!rc)
    k->last_beat = resihp__now_ms(); /* a record is a beat too */
  return rc;
}

int resihp__keeper_record_cut(resihp__keeper_t *k, const void *buf, size_t len,
                              size_t cut) {
  unsigned char h[HDR];
  uint32_t l = (uint32_t)len;
  h[0] = REC_STATE;
  memcpy(h + 1, &l, 4);
  int rc = write_all(k->recw, h, HDR);
  return rc ? rc : write_all(k->recw, buf, cut < len ? cut : len);
}

void resihp__keeper_beat(resihp__keeper_t *k) {
  int64_t now = resihp__now_ms();
  if (now - k->last_beat < BEAT_MS)
    return;
  k->last_beat = now;
  put_record(k->recw, REC_BEAT, "", 0);
}

int resihp__keeper_orphan(resihp__keeper_t *k, pid_t *pid, int *status) {
  notice_t n;
  ssize_t got = read(k->noter, &n, sizeof(n));
  if (got != (ssize_t)sizeof(n))
    return 0; /* a notice is written whole (far below PIPE_BUF) */
  *pid = n.pid;
  *status = n.status;
  return 1;
}

int resihp__keeper_failovers(const resihp__keeper_t *k, const char **why,
                             pid_t *old, int64_t *since) {
  if (why)
    *why = k->why;
  if (old)
    *old = k->old;
  if (since)
    *since = k->since;
  return k->failovers;
}

/* ---- the keeper's side ---- */

typedef struct {
  const resihp__keeper_opts_t *o;
  pid_t pid;    /* the primary, 0 when none */
  int recr;     /* its record pipe */
  int notew;    /* its orphan notices */
  int beaten;   /* it beat once: its signal handlers are in place */
  int killed;   /* we killed it (hung) */
  int64_t last; /* its last record or beat */
  char *buf;    /* bytes read, not yet a complete record */
  size_t n, cap;
  char *snap; /* the last complete state record */
  size_t snaplen;
  int in_a_row;   /* failovers without a state record between them */
  notice_t *pend; /* orphan exits waiting for a primary */
  size_t npend, cappend;
  int sigs[3]; /* signals waiting for a primary able to take them */
  resihp__keeper_t info;
} keeper_t;

static void take_records(keeper_t *kp) {
  size_t off = 0;
  while (kp->n - off >= HDR) {
    uint32_t len;
    memcpy(&len, kp->buf + off + 1, 4);
    if (len > REC_MAX) { /* cannot come from put_record: drop it all */
      off = kp->n;
      break;
    }
    if (kp->n - off - HDR < len)
      break;
    if (kp->buf[off] == REC_STATE) {
      char *s = malloc(len + 1);
      if (s) {
        memcpy(s, kp->buf + off + HDR, len);
        s[len] = '\0';
        free(kp->snap);
        kp->snap = s;
        kp->snaplen = len;
        kp->in_a_row = 0;
      }
    }
    kp->last = resihp__now_ms();
    kp->beaten = 1;
    off += HDR + len;
  }
  memmove(kp->buf, kp->buf + off, kp->n - off);
  kp->n -= off;
}

/* Read what the record pipe holds now. */
static void read_records(keeper_t *kp) {
  for (;;) {
    if (kp->cap - kp->n < 65536) {
      size_t cap = kp->cap ? kp->cap * 2 : 1 << 20;
      char *b = realloc(kp->buf, cap);
      if (!b)
        return;
      kp->buf = b;
      kp->cap = cap;
    }
    ssize_t got = read(kp->recr, kp->buf + kp->n, kp->cap - kp->n);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break;
    kp->n += (size_t)got;
    take_records(kp);
  }
}

static void send_signal(keeper_t *kp, int sig) {
  if (kp->pid > 0 && kp->beaten) {
    kill(kp->pid, sig);
    return;
  }
  for (int i = 0; i < 3; i++) /* one of each kind is enough */
    if (kp->sigs[i] == sig || !kp->sigs[i]) {
      kp->sigs[i] = sig;
      return;
    }
}

static void notify(keeper_t *kp, pid_t pid, int status) {
  notice_t n = {pid, status};
  if (kp->pid > 0 && write(kp->notew, &n, sizeof(n)) == (ssize_t)sizeof(n))
    return;
  if (kp->npend == kp->cappend) {
    size_t cap = kp->cappend ? kp->cappend * 2 : 64;
    notice_t *p = realloc(kp->pend, cap * sizeof(*p));
    if (!p)
      return; /* lost: that srun's replica is then found by silence */
    kp->pend = p;
    kp->cappend = cap;
  }
  kp->pend[kp->npend++] = n;
}

static int fork_primary(keeper_t *kp) {
  int rec[2], note[2];
  if (pipe2(rec, O_CLOEXEC))
    return RESIHP_EIO;
  if (pipe2(note, O_CLOEXEC | O_NONBLOCK)) {
    close(rec[0]);
    close(rec[1]);
    return RESIHP_EIO;
  }
  /* the exits reaped while no primary was there come first */
  size_t i = 0;
  for (; i < kp->npend; i++)
    if (write(note[1], &kp->pend[i], sizeof(notice_t)) != sizeof(notice_t))
      break;
  if (kp->npend > i) /* (pend is NULL while none ever waited) */
    memmove(kp->pend, kp->pend + i, (kp->npend - i) * sizeof(notice_t));
  kp->npend -= i;
  fflush(NULL);
  pid_t self = getpid();
  pid_t p = fork();
  if (p < 0) {
    for (int j = 0; j < 2; j++) {
      close(rec[j]);
      close(note[j]);
    }
    return RESIHP_EIO;
  }
  if (p == 0) {
    close(rec[0]);
    close(note[1]);
    close(sig_w);
    close(sig_r);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    /* its own process group: a terminal's ^C reaches the keeper, which
     * passes it on once */
    setpgid(0, 0);
    /* the keeper gone (SIGKILL of resihp-run), the job is over: so is
     * the primary, which nobody would ever reap or replace */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != self)
      _exit(kp->o->lost_status);
    resihp__keeper_t k = kp->info;
    k.recw = rec[1];
    k.noter = note[0];
    k.last_beat = 0;
    exit(kp->o->primary(kp->o->ud, kp->snap, kp->snaplen, &k));
  }
  close(rec[1]);
  close(note[0]);
  fcntl(rec[0], F_SETFL, O_NONBLOCK);
  kp->pid = p;
  kp->recr = rec[0];
  kp->notew = note[1];
  kp->beaten = 0;
  kp->killed = 0;
  kp->n = 0;
  kp->last = resihp__now_ms();
  return 0;
}

/* The primary ended: its exit status (>= 0), or -1 to fail over. */
static int primary_ended(keeper_t *kp, int st) {
  read_records(kp); /* what it wrote before it died is in the pipe */
  kp->n = 0;        /* a record cut by its death is no record */
  close(kp->recr);
  close(kp->notew);
  pid_t old = kp->pid;
  kp->pid = 0;
  if (WIFEXITED(st))
    return WEXITSTATUS(st);
  kp->info.failovers++;
  kp->info.why = kp->killed ? "hung" : "killed";
  kp->info.old = old;
  kp->info.since = resihp__now_ms();
  kp->in_a_row++;
  fprintf(stderr,
          "%s: the coordinator (pid %ld) %s%s; a new one takes over "
          "from its last state (failover %d)\n",
          program_invocation_short_name, (long)old,
          kp->killed ? "hung and was killed" : "died: ",
          kp->killed ? "" : strsignal(WTERMSIG(st)), kp->info.failovers);
  return -1;
}

int resihp__keeper_run(const resihp__keeper_opts_t *o) {
  keeper_t kp = {.o = o, .recr = -1, .notew = -1};
  int max = o->max_failovers > 0 ? o->max_failovers : 3;
  int sp[2];
  if (pipe2(sp, O_CLOEXEC | O_NONBLOCK)) {
    fprintf(stderr, "%s: cannot make a pipe: %s\n",
            program_invocation_short_name, strerror(errno));
    return o->lost_status;
  }
  sig_w = sp[1];
  sig_r = sp[0];
  struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGCHLD, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  /* An orphan's exit is passed on through a pipe whose reader, the
   * primary, may have closed it already (exiting, not yet reaped): that
   * write must fail, not kill the keeper with the job's status (the
   * notice is then kept for the next primary, or dropped with the run). */
  struct sigaction old_pipe, ign = {.sa_handler = SIG_IGN};
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, &old_pipe);
  /* the old primary's sruns come to us, not to init */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (o->snap && (kp.snap = malloc(o->snaplen ? o->snaplen : 1))) {
    memcpy(kp.snap, o->snap, o->snaplen);
    kp.snaplen = o->snaplen;
    kp.info.failovers = 1;
    kp.info.why = o->first_why ? o->first_why : "lost";
    kp.info.since = resihp__now_ms();
  }
  int ret = -1;
  while (ret < 0) {
    if (!kp.pid) {
      if (kp.in_a_row > max) {
        fprintf(stderr,
                "%s: LOST: the coordinator failed %d times in a row "
                "without making progress; giving up\n",
                program_invocation_short_name, kp.in_a_row);
        ret = o->lost_status;
        break;
      }
      if (fork_primary(&kp)) {
        fprintf(stderr, "%s: LOST: cannot start a coordinator: %s\n",
                program_invocation_short_name, strerror(errno));
        ret = o->lost_status;
        break;
      }
    }
    struct pollfd pf[2] = {{.fd = sp[0], .events = POLLIN},
                           {.fd = kp.recr, .events = POLLIN}};
    poll(pf, 2, BEAT_MS);
    read_records(&kp);
    if (kp.beaten)
      for (int i = 0; i < 3; i++)
        if (kp.sigs[i]) {
          kill(kp.pid, kp.sigs[i]);
          kp.sigs[i] = 0;
        }
    unsigned char sigs[64];
    ssize_t ns;
    while ((ns = read(sp[0], sigs, sizeof(sigs))) > 0)
      for (ssize_t i = 0; i < ns; i++)
        if (sigs[i] != SIGCHLD)
          send_signal(&kp, sigs[i]);
    int st;
    pid_t p;
    while (ret < 0 && (p = waitpid(-1, &st, WNOHANG)) > 0) {
      if (p == kp.pid)
        ret = primary_ended(&kp, st);
      else
        notify(&kp, p, st);
    }
    if (ret < 0 && kp.pid > 0 && !kp.killed && o->hang_ms > 0 &&
        resihp__now_ms() - kp.last > o->hang_ms) {
      kp.killed = 1; /* fencing: it never comes back to act */
      kill(kp.pid, SIGKILL);
    }
  }
  if (kp.pid > 0) { /* giving up with a primary alive cannot happen */
    kill(kp.pid, SIGKILL);
    waitpid(kp.pid, NULL, 0);
  }
  free(kp.buf);
  free(kp.snap);
  free(kp.pend);
  close(sp[0]);
  close(sp[1]);
  sig_w = sig_r = -1;
  signal(SIGCHLD, SIG_DFL);
  sigaction(SIGPIPE, &old_pipe, NULL);
  return ret;
}
