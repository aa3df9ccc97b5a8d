/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-bench-control: the control plane at scale, on loopback.
 *
 * For each N of --replicas, a child process runs the real coordinator
 * (resihp__coord_create/_poll, as resihp-run embeds it) for N replicas of
 * 4*N microbatches (at most resihp__wire_max_microbatches), and this process
 * plays the N replicas: stubs that speak the real protocol through the real
 * wire (non-blocking handshake, MAC'd lines), all multiplexed on one epoll set,
 * with zero compute. Two processes because each end needs a descriptor per
 * replica: N is limited by the hard RLIMIT_NOFILE (raised to it), not by twice
 * N.
 *
 * What is measured, one line per N:
 *   hello      all N connected, authenticated and welcomed (WELCOME);
 *   join       all N admitted too (their first GO: the first epoch);
 *   step       BEGIN sent -> START received, per replica and step, over
 *              the --steps steady steps (median and 99th percentile);
 *   idle       the coordinator's CPU share (%) while every replica only
 *              beats, for --idle seconds after the first step (what a
 *              quiet job, as in a free run, costs it: heartbeats both
 *              ways at the periods WELCOME says, resihp__coord_heartbeats);
 *   cpu        the coordinator's CPU time per steady step
 *              (/proc/PID/schedstat), heartbeats included;
 *   bytes      the coordinator's bytes received + sent per steady step
 *              (what the stubs read and wrote, tags included; TCP/IP
 *              headers not), heartbeats included;
 *   deaths     three failures mid-step (at the all-reduce of a step of
 *              --step-ms), reported as training ranks report them: every
 *              survivor says RECOVER gone=... and its next BEGIN once
 *              REASSIGN comes: a replica dies (closes), one hangs (stays
 *              connected, silent), a node's replicas die; time to every
 *              survivor's REASSIGN and to every survivor holding the new
 *              epoch (GO new=1), and the messages and bytes each failure
 *              cost, from the death to every survivor's next START;
 *   failover   the first victim's replacement joins (a new Slurm step
 *              under its id) and, while it waits to be admitted (a free
 *              run held for it), the coordinator's process is SIGKILLed
 *              at a random point of the step: time to every survivor
 *              back on the successor
 *              (WELCOME ... again=1; a stub in the middle of its step
 *              notices at its end, as a free run's leader does), and to
 *              every survivor holding the next step's START (resume; the
 *              stall: how much later than a step's time); fo_cpu: the
 *              successor's CPU time until every survivor was back;
 *   rss, poll  the coordinator's peak RSS (VmHWM) and its longest poll
 *              round (shared memory written by its processes).
 *
 * The coordinator runs as resihp-run runs it: under the keeper (keeper.h),
 * which holds the listening socket and the mirrored state, kills it after
 * 5 s without a beat and starts the successor from it
 * (resihp__coord_restore); the stubs reconnect as the
 * job's link does (recovery/job_link.c: HELLO ... again=1, then the
 * pending BEGIN again). --no-failover runs the coordinator alone, without
 * the mirror: the cost of the mirror on each step, side by side.
 *
 * --check asserts what must hold whatever the speed: every replica was
 * admitted at once, every survivor got every START of every step in order
 * and every epoch (GO new=1), no member other than the victims was lost
 * (every GO new=1 counts N less the victims so far), every survivor came back
 * once after the failover, DONE reached everyone and the coordinator's
 * successor ended DONE. Exit 0 if so, 1 if not, 2 for a usage error.
 *
 * The step protocol lives in one function, stub_line (what a replica does
 * with each line from the coordinator); the rest is plumbing.
 */
#include "config.h"

#include "../libresihp/control/coordinator.h"
#include "../libresihp/control/keeper.h"
#include "../libresihp/control/wire.h"
#include "../libresihp/transport/mesh.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_N 1000000
/* Descriptors either process needs beside one per replica. */
#define FD_SPARE 64
/* What a sealed line adds to its text: " mac=" + tag + '\n'. */
#define LINE_EXTRA (5 + RESIHP__MAC_HEX + 1)

enum { S_CONNECTING, S_HANDSHAKE, S_LIVE, S_DEAD };
/* The failures, as replicas report them: mid-step, at the all-reduce,
 * every survivor says RECOVER gone=... (recovery/job_exchange.c). */
enum { D_DIE, D_HANG, D_NODE, D_KINDS };
static const char *const death_name[D_KINDS] = {"die", "hang", "node"};
/* Replicas of one node (a whole node's death). */
#define NODE_REPLICAS 8
/* What the coordinator's processes tell the bench (shared memory). */
typedef struct {
  double max_poll_ms; /* its longest poll round */
  long rss_kb;        /* its peak RSS (VmHWM) */
} coord_stats_t;

typedef struct {
  int kind;
  long step;
  int nv, v[NODE_REPLICAS];
  char gone[NODE_REPLICAS * 8 + 1];
  double t_death, t_reassign, t_epoch, t_start;
  long reassigned, in_epoch, started;
  double bytes0, lines0, bytes1, lines1;
} death_t;

typedef struct {
  int id, stage;
  resihp__wire_t w;
  resihp__wire_cli_t hs;
  long next_step;  /* the START expected next */
  long starts;     /* STARTs received in order */
  long gos;        /* GO lines */
  long bad_gos;    /* GO lines whose member count was wrong */
  long whole_gos;  /* GO new=1 lines with the whole member list */
  uint32_t epoch;  /* the last GO new=1 */
  long epochs;     /* GO new=1 received */
  double begin_ms; /* last BEGIN sent */
  int admitted, done;
  int held;   /* its BEGIN of step 1 waits for the idle window's end */
  int back;   /* reconnecting after the failover */
  int agains; /* WELCOME ... again=1 received */
  char cred[48]; /* its first WELCOME's credential (said again=1) */
  int death;  /* the death it is a victim of, -1: none */
  int hung;   /* a hang: says nothing, reads nothing */
  int due_what; /* 1: its BEGIN is due at `due`, 2: its step's all-reduce */
  double due;
  int lost; /* its link failed mid-step: it reconnects at its boundary */
  int replacement; /* a dead replica's replacement (a new Slurm step) */
} stub_t;

typedef struct {
  int n, steps, check;
  int mbs;          /* 4N, or the most a job may have */
  long total_steps; /* 1 set-up step, the steady ones, 2 per death, 2 */
  int step_ms;      /* each step's compute */
  death_t deaths[D_KINDS];
  int ndeaths;
  int *due_q; /* stubs with a step timer, in due order (a ring) */
  long due_head, due_tail;
  double lines; /* lines the stubs read and wrote */
  double t_fo_at, t_fo_step; /* the kill's time; its step's START */
  /* the first victim's replacement joins in the failover's step: the
   * coordinator is killed while it waits to be admitted (the free run
   * held for it) */
  int joiner;
  double t_joiner_in; /* it is admitted */
  coord_stats_t *stats;
  int failover; /* the coordinator is killed at fo_step's START */
  long fo_step;
  pid_t primary; /* the coordinator's process (the keeper's child) */
  int pid_fd;    /* where each coordinator's process says its pid */
  double t_fo_kill, t_fo_back, t_fo_start;
  double fo_cpu; /* the successor's CPU time until every survivor was back */
  long fo_back;
  int alive;
  int live; /* stubs with a socket */
  stub_t *s;
  int ep;
  uint8_t secret[32];
  int port;
  pid_t child;
  double t0, t_welcome, t_join, t_death, t_epoch;
  int hb_ms;                   /* the leaders' heartbeat period (WELCOME) */
  double idle_ms;              /* the idle window after step 0 */
  int silence_ms;              /* the coordinator's silence bound */
  double t_idle0, t_idle1;     /* its start (step 0 everywhere) and end */
  double cpu_idle0, cpu_idle1; /* the coordinator's CPU then */
  long welcomed;
  long admitted, in_new_epoch, done;
  long *started; /* per step: replicas that got its START */
  double *lat;   /* steady-step latencies (ms) */
  long nlat, caplat;
  double cpu0, cpu1, io0, io1, tm0, tm1;
  long retries, errors;
  double bytes; /* read and written by the stubs once authenticated */
  char line[RESIHP__WIRE_LINE_MAX + 1];
} bench_t;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The coordinator's CPU time (ms) and bytes through its descriptors. */
static double coordinator_cpu_ms(pid_t pid) {
  char path[64];
  unsigned long long ns = 0;
  snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%llu", &ns) != 1)
      ns = 0;
    fclose(f);
  }
  return (double)ns / 1e6;
}

static void snapshot(bench_t *b, int end) {
  double cpu = coordinator_cpu_ms(b->primary), io = b->bytes;
  if (end) {
    b->cpu1 = cpu;
    b->io1 = io;
    b->tm1 = now_ms();
  } else {
    b->cpu0 = cpu;
    b->io0 = io;
    b->tm0 = now_ms();
  }
}

static void fail(bench_t *b, stub_t *s, const char *what) {
  if (b->errors++ < 5)
    fprintf(stderr, "resihp-bench-control: N=%d replica %d: %s\n", b->n, s->id,
            what);
}

/* The coordinator was killed and this stub is not back yet: its link's
 * errors are the failover's, not the coordinator's. */
static int awaits_successor(const bench_t *b, const stub_t *s) {
  return b->t_fo_kill > 0 && !s->agains && !s->done;
}

static int send_line(bench_t *b, stub_t *s, const char *line) {
  int rc = resihp__wire_send(&s->w, line, resihp__now_ms() + 10000);
  b->bytes += (double)(strlen(line) + LINE_EXTRA);
  b->lines++;
  if (rc && !awaits_successor(b, s))
    fail(b, s, "cannot send");
  return rc;
}

static void kill_stub(bench_t *b, stub_t *s) {
  if (s->w.fd >= 0) {
    epoll_ctl(b->ep, EPOLL_CTL_DEL, s->w.fd, NULL);
    b->live--;
  }
  resihp__wire_free(&s->w);
  s->stage = S_DEAD;
}

static long count_members(const char *line) {
  char *m = strstr(line, " members=");
  if (!m || !m[9])
    return 0;
  long n = 1;
  for (m += 9; *m && *m != ' '; m++)
    n += *m == ',';
  return n;
}

static void add_latency(bench_t *b, double ms) {
  if (b->nlat == b->caplat) {
    long nc = b->caplat ? 2 * b->caplat : 4096;
    double *x = realloc(b->lat, sizeof(double) * (size_t)nc);
    if (!x)
      return;
    b->lat = x;
    b->caplat = nc;
  }
  b->lat[b->nlat++] = ms;
}

/* The failover: the coordinator's process dies (at a random point of a
 * step: replicas in the middle of theirs notice at their boundary). */
static void kill_coordinator(bench_t *b) {
  if (b->primary <= 0 || kill(b->primary, SIGKILL)) {
    b->errors++;
    fprintf(stderr,
            "resihp-bench-control: N=%d: cannot kill the "
            "coordinator\n",
            b->n);
    return;
  }
  b->t_fo_kill = now_ms();
}

/* Replicas gone by step `step`'s GO. */
static int dead_by(const bench_t *b, long step) {
  int n = 0;
  for (int d = 0; d < b->ndeaths; d++)
    n += b->deaths[d].step < step ? b->deaths[d].nv : 0;
  return n;
}

static death_t *death_at(bench_t *b, long step) {
  for (int d = 0; d < b->ndeaths; d++)
    if (b->deaths[d].step == step)
      return &b->deaths[d];
  return NULL;
}

/* Stub s does something at time `at`: its BEGIN (what 1), or its step's
 * all-reduce (what 2, where a death shows). */
static void due_at(bench_t *b, stub_t *s, double at, int what) {
  s->due = at;
  s->due_what = what;
  b->due_q[b->due_tail++ % b->n] = s->id;
}

static void send_begin(bench_t *b, stub_t *s) {
  char buf[64];
  snprintf(buf, sizeof(buf), "BEGIN step=%ld", s->next_step);
  s->begin_ms = now_ms();
  send_line(b, s, buf);
}

static int start_stub(bench_t *b, stub_t *s);

/* The first victim's replacement: a new process under its id. */
static void start_joiner(bench_t *b) {
  stub_t *s = &b->s[b->joiner];
  resihp__wire_free(&s->w);
  memset(s, 0, sizeof(*s));
  s->id = b->joiner;
  s->death = -1;
  s->replacement = 1;
  s->next_step = -1;
  if (start_stub(b, s))
    fail(b, s, "the replacement cannot connect");
}

/* Its step's compute is over: BEGIN, or, if its link was lost meanwhile,
 * a new link first (then BEGIN again on WELCOME ... again=1). */
static void step_over(bench_t *b, stub_t *s) {
  if (s->lost) {
    s->lost = 0;
    s->back = 1;
    if (start_stub(b, s))
      fail(b, s, "cannot connect again");
    return;
  }
  if (s->stage == S_LIVE)
    send_begin(b, s);
}

/* The all-reduce of a death's step: its victims die (or hang), every
 * survivor reports them (RECOVER ... gone=). */
static void all_reduce(bench_t *b, stub_t *s) {
  death_t *d = death_at(b, s->next_step - 1);
  if (!d) {
    step_over(b, s);
    return;
  }
  if (!(d->t_death > 0)) {
    /* the victims die (or hang) together, before anyone reports them */
    d->t_death = now_ms();
    d->bytes0 = b->bytes;
    d->lines0 = b->lines;
    for (int i = 0; i < d->nv; i++) {
      stub_t *v = &b->s[d->v[i]];
      if (d->kind == D_HANG)
        v->hung = 1; /* its socket stays open, silent */
      else
        kill_stub(b, v);
      b->alive--;
    }
  }
  if (s->death == d - b->deaths)
    return;
  char buf[160];
  snprintf(buf, sizeof(buf), "RECOVER step=%ld cepoch=0 gone=%s",
           s->next_step - 1, d->gone);
  if (s->lost) /* (the coordinator is gone: no failover during a death) */
    return;
  send_line(b, s, buf);
}

/* Timers due now. */
static void run_timers(bench_t *b) {
  double t = now_ms();
  while (b->due_head < b->due_tail) {
    stub_t *s = &b->s[b->due_q[b->due_head % b->n]];
    if (s->due > t)
      break;
    b->due_head++;
    int what = s->due_what;
    s->due_what = 0;
    if (what == 1)
      step_over(b, s);
    else if (what == 2)
      all_reduce(b, s);
  }
}

/* What a replica does with one line from the coordinator: the whole step
 * protocol of the stub (see coordinator.h). A START is answered with the
 * next BEGIN after --step-ms of "compute". */
static void stub_line(bench_t *b, stub_t *s, const char *line) {
  long v = -1, isnew = 0;
  char buf[96];
  b->lines++;
  if (s->hung)
    return;
  if (!strncmp(line, "WELCOME ", 8) && strstr(line, " again=1")) {
    /* back on the successor: the BEGIN it may have missed, again */
    s->agains++;
    s->back = 0;
    if (!(s->replacement && !s->admitted) && ++b->fo_back == b->alive) {
      b->t_fo_back = now_ms();
      /* the successor said its pid before it restored: its CPU so far */
      pid_t succ;
      if (read(b->pid_fd, &succ, sizeof(succ)) == (ssize_t)sizeof(succ))
        b->fo_cpu = coordinator_cpu_ms(succ);
    }
    if (s->replacement && !s->admitted)
      send_line(b, s, "BEGIN step=-1"); /* still a joiner */
    else if (!s->due_what)
      send_begin(b, s);
  } else if (!strncmp(line, "WELCOME ", 8)) {
    long hb = 0;
    resihp__wire_get(line, "cred", s->cred, sizeof(s->cred));
    if (!b->hb_ms && !resihp__wire_get_long(line, "hb", &hb) && hb >= 100 &&
        hb <= 60000)
      b->hb_ms = (int)hb;
    if (!s->replacement && ++b->welcomed == b->n)
      b->t_welcome = now_ms();
    send_line(b, s, "BEGIN step=-1");
  } else if (!strncmp(line, "GO ", 3)) {
    long step = -1;
    s->gos++;
    if (resihp__wire_get_long(line, "step", &step) ||
        resihp__wire_get_long(line, "epoch", &v) ||
        resihp__wire_get_long(line, "new", &isnew)) {
      fail(b, s, "malformed GO");
      return;
    }
    if (!isnew)
      return; /* no list: the group stays */
    /* every member, less the dead: the whole list (members=) or the
     * change since the last epoch's (n=) */
    long nm = count_members(line);
    s->whole_gos += nm > 0;
    if (!nm && resihp__wire_get_long(line, "n", &nm))
      nm = 0;
    if (nm != b->n - dead_by(b, step) +
                  (b->joiner >= 0 && step > b->fo_step ? 1 : 0))
      s->bad_gos++;
    s->epoch = (uint32_t)v;
    s->epochs++;
    death_t *d = death_at(b, step - 1);
    if (!s->admitted && s->replacement) {
      s->admitted = 1;
      b->alive++;
      b->t_joiner_in = now_ms();
      s->next_step = step; /* its first START */
    } else if (!s->admitted) {
      s->admitted = 1;
      if (++b->admitted == b->n)
        b->t_join = now_ms();
    } else if (d && ++d->in_epoch == b->alive) {
      d->t_epoch = now_ms();
    }
    snprintf(buf, sizeof(buf), "READY epoch=%ld", v);
    send_line(b, s, buf);
  } else if (!strncmp(line, "REASSIGN ", 9)) {
    death_t *d = death_at(b, s->next_step - 1);
    if (d && ++d->reassigned == b->alive)
      d->t_reassign = now_ms();
    /* the failed all-reduce was the step's last act */
    send_begin(b, s);
  } else if (!strncmp(line, "START ", 6)) {
    double t = now_ms();
    if (resihp__wire_get_long(line, "step", &v) || v != s->next_step) {
      fail(b, s, "START out of order");
      return;
    }
    s->starts++;
    s->next_step = v + 1;
    if (v >= 1 && v <= b->steps)
      add_latency(b, t - s->begin_ms);
    int all = v < b->total_steps && ++b->started[v] == b->alive;
    death_t *after = death_at(b, v - 1);
    if (all && after) {
      after->t_start = t;
      after->bytes1 = b->bytes;
      after->lines1 = b->lines;
    }
    if (all && v == 0 && b->idle_ms > 0) {
      b->t_idle0 = now_ms();
      b->cpu_idle0 = coordinator_cpu_ms(b->primary);
    } else if (all && v == 0)
      snapshot(b, 0);
    else if (all && v == b->steps)
      snapshot(b, 1);
    else if (all && b->t_fo_kill > 0 && v == b->fo_step + 1)
      b->t_fo_start = now_ms();
    if (all && b->failover && v == b->fo_step) {
      /* the replacement joins, and the kill comes at a random point of
       * this step once it had time to say HELLO */
      b->t_fo_step = t;
      b->t_fo_at = t + 100 +
                   (b->step_ms > 100 ? (double)(random() % (b->step_ms - 100))
                                     : 0);
      if (b->joiner >= 0)
        start_joiner(b);
    }
    if (v == 0 && b->idle_ms > 0) {
      s->held = 1; /* step 1 after the idle window (end_idle) */
      return;
    }
    if (death_at(b, v))
      due_at(b, s, t + b->step_ms / 2.0, 2);
    else
      due_at(b, s, t + b->step_ms, 1);
  } else if (!strcmp(line, "DONE")) {
    s->done = 1;
    b->done++;
    send_line(b, s, "FINISH result=bench");
  } else if (!strncmp(line, "NO ", 3)) {
    fail(b, s, line);
  } /* HB and anything else: nothing to do */
}

/* The idle window is over: its CPU share, then step 1 for everyone. */
static void end_idle(bench_t *b) {
  b->t_idle1 = now_ms();
  b->cpu_idle1 = coordinator_cpu_ms(b->primary);
  snapshot(b, 0);
  for (int i = 0; i < b->n; i++)
    if (b->s[i].held && b->s[i].stage == S_LIVE) {
      b->s[i].held = 0;
      due_at(b, &b->s[i], now_ms() + b->step_ms, 1);
    }
}

/* The replica's socket is ready: connect, handshake, then lines. */
static void stub_io(bench_t *b, stub_t *s, uint32_t ev) {
  if (s->stage == S_CONNECTING) {
    int err = 0;
    socklen_t el = sizeof(err);
    getsockopt(s->w.fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) {
      b->retries++;
      kill_stub(b, s);
      if (!s->back || start_stub(b, s))
        fail(b, s, "connect failed");
      return;
    }
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = s};
    epoll_ctl(b->ep, EPOLL_CTL_MOD, s->w.fd, &e);
    s->stage = S_HANDSHAKE; /* the client speaks first (AUTH0) */
  }
  if (s->stage == S_HANDSHAKE) {
    int was = s->hs.stage;
    int rc = resihp__wire_cli_step(&s->w, &s->hs, b->secret, sizeof(b->secret),
                                   "coord");
    if (rc >= 0 && was < 2 && s->hs.stage == 2) {
      /* the answer went on a new connection (the old one is closed, and
       * with it its place in the set) */
      struct epoll_event e = {.events = EPOLLIN, .data.ptr = s};
      if (epoll_ctl(b->ep, EPOLL_CTL_ADD, s->w.fd, &e))
        rc = RESIHP_ESYS;
    }
    if (rc < 0) {
      /* a join is refused for good; a reconnect tries again, as the
       * job's link does within RESIHP_FAILOVER_MS (job_link.c) */
      b->retries++;
      kill_stub(b, s);
      if (!s->back || start_stub(b, s))
        fail(b, s, "handshake refused (a joiner dropped)");
      return;
    }
    if (rc == 0)
      return;
    s->stage = S_LIVE;
    char hello[320];
    int hl = snprintf(
        hello, sizeof(hello),
        "HELLO replica=%d ep=127.0.0.1:%d sep=127.0.0.1:%d node=bench%d "
        "jobid=1 stepid=%d mbs=%d steps=%ld pid=%d lsize=1 lep=- shape=-",
        s->id, 20000 + s->id % 40000, 20000 + s->id % 40000, s->id,
        s->replacement ? b->n + s->id : s->id,
        b->mbs, b->total_steps, (int)getpid());
    if (s->back && !(s->replacement && !s->admitted))
      /* as recovery/job_link.c says it after a failover (a joiner just
       * joins again) */
      snprintf(hello + hl, sizeof(hello) - (size_t)hl,
               " again=1 epoch=%u step=%ld cred=%s", s->epoch,
               s->next_step - 1, s->cred[0] ? s->cred : "-");
    if (send_line(b, s, hello))
      return;
  }
  size_t had = s->w.len;
  int rc = resihp__wire_fill(&s->w), t;
  b->bytes += (double)(s->w.len - had);
  while (s->stage == S_LIVE &&
         (t = resihp__wire_take(&s->w, b->line, sizeof(b->line))) != 0) {
    if (t < 0) {
      fail(b, s, "bad line from the coordinator");
      rc = t;
      break;
    }
    stub_line(b, s, b->line);
  }
  if (s->stage == S_LIVE && rc < 0) {
    int again = awaits_successor(b, s) && !s->back;
    if (!s->done && !again && !s->hung)
      fail(b, s, "connection lost");
    kill_stub(b, s);
    if (again && s->due_what) {
      s->lost = 1; /* in the middle of its step: it sees at its boundary */
    } else if (again) { /* the coordinator's death: its successor */
      s->back = 1;
      if (start_stub(b, s))
        fail(b, s, "cannot connect again");
    }
    return;
  }
  /* N buffers of one GO each would add up: give the room back */
  if (s->stage == S_LIVE && s->w.len == 0 && s->w.cap > 65536) {
    free(s->w.buf);
    s->w.buf = NULL;
    s->w.cap = 0;
  }
}

static int start_stub(bench_t *b, stub_t *s) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return RESIHP_ESYS;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)b->port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  resihp__wire_init(&s->w, fd);
  memset(&s->hs, 0, sizeof(s->hs)); /* a new handshake */
  s->stage = S_CONNECTING;
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 &&
      errno != EINPROGRESS) {
    resihp__wire_free(&s->w);
    s->stage = S_DEAD;
    return RESIHP_EPEER;
  }
  b->live++;
  struct epoll_event e = {.events = EPOLLIN | EPOLLOUT, .data.ptr = s};
  return epoll_ctl(b->ep, EPOLL_CTL_ADD, fd, &e) ? RESIHP_ESYS : 0;
}

/* The coordinator's process (or processes, under the keeper). */
typedef struct {
  bench_t *b;
  resihp__wire_listener_t lis;
  int pid_wfd;
} coord_proc_t;

static void mirror_to_keeper(void *ud, const char *snap, size_t len) {
  resihp__keeper_record(ud, snap, len);
}

/* This process's peak resident set (VmHWM), in KiB. */
static long peak_rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[128];
  long kb = 0;
  while (f && fgets(line, sizeof(line), f))
    if (!strncmp(line, "VmHWM:", 6))
      kb = strtol(line + 6, NULL, 10);
  if (f)
    fclose(f);
  return kb;
}

/* Serve until the training is over: from the start (snap NULL) or, under
 * the keeper, from the state the killed one mirrored. */
static int serve(void *ud, const char *snap, size_t len, resihp__keeper_t *k) {
  coord_proc_t *cp = ud;
  bench_t *b = cp->b;
  pid_t me = getpid();
  if (write(cp->pid_wfd, &me, sizeof(me)) != (ssize_t)sizeof(me))
    return 3;
  resihp__coord_opts_t o = {.replicas = b->n,
                            .bind_host = "127.0.0.1",
                            .secret = b->secret,
                            .secret_len = sizeof(b->secret),
                            .silence_ms = b->silence_ms,
                            .listener = &cp->lis,
                            .on_mirror = k ? mirror_to_keeper : NULL,
                            .ud = k};
  resihp__coord_t *c;
  int rc = snap ? resihp__coord_restore(&o, snap, len, -1, &c)
                : resihp__coord_create(&o, &c);
  if (rc) {
    fprintf(stderr, "resihp-bench-control: coordinator for %d replicas: %s\n",
            b->n, resihp_strerror(rc));
    return 3;
  }
  double last_rss = 0;
  while (resihp__coord_state(c) == RESIHP__COORD_RUNNING) {
    /* the longest round, its wait of at most 20 ms included */
    double t = now_ms();
    resihp__coord_poll(c, 20);
    double dt = now_ms() - t;
    if (dt > b->stats->max_poll_ms)
      b->stats->max_poll_ms = dt;
    if (now_ms() - last_rss > 500) {
      last_rss = now_ms();
      long kb = peak_rss_kb();
      if (kb > b->stats->rss_kb)
        b->stats->rss_kb = kb;
    }
    if (k)
      resihp__keeper_beat(k);
  }
  long kb = peak_rss_kb();
  if (kb > b->stats->rss_kb)
    b->stats->rss_kb = kb;
  int done = resihp__coord_state(c) == RESIHP__COORD_DONE;
  resihp__coord_destroy(c);
  return done ? 0 : 4;
}

/* The child: the listening socket (the keeper's, as in resihp-run), its
 * port to the bench, then the coordinator under the keeper or alone. */
static void run_coordinator(bench_t *b, int wfd, int pid_wfd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int port = -1;
  coord_proc_t cp = {.b = b, .pid_wfd = pid_wfd};
  if (resihp__wire_listener_open("127.0.0.1", 0, b->n, &cp.lis)) {
    fprintf(stderr, "resihp-bench-control: cannot listen: %s\n",
            strerror(errno));
  } else {
    port = cp.lis.port;
  }
  if (write(wfd, &port, sizeof(port)) != (ssize_t)sizeof(port) || port < 0)
    _exit(3);
  close(wfd);
  if (!b->failover)
    _exit(serve(&cp, NULL, 0, NULL));
  /* resihp-run's hang bound: a coordinator that does not beat for 5 s
   * is killed and replaced (see resihp-run(1)) */
  resihp__keeper_opts_t ko = {
      .hang_ms = 5000, .lost_status = 5, .primary = serve, .ud = &cp};
  _exit(resihp__keeper_run(&ko));
}

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, c = *(const double *)y;
  return a < c ? -1 : a > c;
}

static int wait_child(pid_t pid, int ms) {
  for (int i = 0; i < ms / 10; i++) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

/* The checks of --check: NULL if all hold, else what failed. */
static const char *verdict(const bench_t *b, int child_rc) {
  static char why[200];
  for (int i = 0; i < b->n; i++) {
    const stub_t *s = &b->s[i];
    int victim = s->death >= 0, repl = s->replacement;
    long want = victim ? b->deaths[s->death].step + 1
                : repl ? b->total_steps - b->fo_step - 1
                       : b->total_steps;
    /* the list travels whole once (the first epoch); the epoch after the
     * death is its change only */
    /* a survivor comes back once after the failover (the victim is gone
     * by then; its replacement, waiting to be admitted, joins again) */
    int agains = victim || repl || !b->failover ? 0 : 1;
    /* a victim dies when the first survivor reaches its death step's
     * all-reduce: with short steps that may be before its own START of
     * that step reached it (a death between steps, which is just as real) */
    int starts_ok = s->starts == want || (victim && s->starts == want - 1);
    if (!s->admitted || !starts_ok || s->bad_gos || s->whole_gos != 1 ||
        s->agains != agains ||
        (!victim &&
         (!s->done ||
          s->epochs != (repl ? 1 : 1 + b->ndeaths + (b->joiner >= 0))))) {
      snprintf(why, sizeof(why),
               "replica %d: admitted %d, %ld of %ld STARTs, %ld GOs with a "
               "wrong member count, %ld with the whole list, %ld epochs, "
               "back %d time(s) of %d, done %d",
               i, s->admitted, s->starts, want, s->bad_gos, s->whole_gos,
               s->epochs, s->agains, agains, s->done);
      return why;
    }
  }
  if (b->retries)
    return "joiners were refused or dropped";
  if (b->errors)
    return "errors (see above)";
  if (child_rc) {
    snprintf(why, sizeof(why), "coordinator exit status %d (0: DONE)",
             child_rc);
    return why;
  }
  return NULL;
}

/* A replica's heartbeat thread, for every live stub, at the period its
 * WELCOME said. */
static void beat(bench_t *b, double *last_hb) {
  if (now_ms() - *last_hb < (b->hb_ms ? b->hb_ms : 200))
    return;
  *last_hb = now_ms();
  for (int i = 0; i < b->n; i++)
    if (b->s[i].stage == S_LIVE && !b->s[i].hung)
      send_line(b, &b->s[i], "HB");
}

/* One N: returns 0 if it ran (and, with check, passed). */
static int run_one(int n, int steps, int check, int failover, double idle_s,
                   int silence_ms, int step_ms, double timeout_s) {
  bench_t *b = calloc(1, sizeof(*b));
  if (!b)
    return 1;
  b->n = b->alive = n;
  b->steps = steps;
  b->check = check;
  b->idle_ms = idle_s * 1000;
  b->silence_ms = silence_ms;
  b->step_ms = step_ms;
  /* a death every other step after the steady ones: one replica dies, one
   * hangs, a node's replicas die (fewer in a small job) */
  b->ndeaths = D_KINDS;
  for (int d = 0; d < D_KINDS; d++) {
    death_t *x = &b->deaths[d];
    x->kind = d;
    x->step = steps + 1 + 2L * d;
    x->nv = d == D_NODE ? (n / 8 < NODE_REPLICAS ? n / 8 : NODE_REPLICAS) : 1;
    if (x->nv < 1)
      x->nv = 1;
    int first = d == D_DIE ? n / 2 : d == D_HANG ? n / 3 : 3 * n / 4;
    for (int i = 0; i < x->nv; i++) {
      x->v[i] = first + i;
      snprintf(x->gone + strlen(x->gone), sizeof(x->gone) - strlen(x->gone),
               "%s%d", i ? ":" : "", first + i);
    }
  }
  b->failover = failover;
  b->joiner = failover ? b->deaths[D_DIE].v[0] : -1;
  b->fo_step = steps + 2L * D_KINDS + 1;
  b->total_steps = b->fo_step + 3;
  b->mbs = 4 * n < resihp__wire_max_microbatches()
               ? 4 * n
               : resihp__wire_max_microbatches();
  b->ep = -1;
  b->s = calloc((size_t)n, sizeof(stub_t));
  b->started = calloc((size_t)b->total_steps, sizeof(long));
  b->due_q = calloc((size_t)n, sizeof(int));
  b->stats = mmap(NULL, sizeof(coord_stats_t), PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int rc = 1, pfd[2] = {-1, -1}, pidp[2] = {-1, -1}, child_rc = -1;
  if (b->stats == MAP_FAILED)
    b->stats = NULL;
  if (!b->s || !b->started || !b->due_q || !b->stats ||
      getrandom(b->secret, sizeof(b->secret), 0) != (ssize_t)sizeof(b->secret))
    goto out;
  memset(b->stats, 0, sizeof(*b->stats));
  for (int i = 0; i < n; i++) {
    b->s[i].id = i;
    b->s[i].stage = S_DEAD;
    b->s[i].death = -1;
    resihp__wire_init(&b->s[i].w, -1);
  }
  for (int d = 0; d < b->ndeaths; d++)
    for (int i = 0; i < b->deaths[d].nv; i++)
      b->s[b->deaths[d].v[i]].death = d;
  if (pipe(pfd) || pipe(pidp))
    goto out;
  b->pid_fd = pidp[0];
  fflush(stdout); /* or the child's copy of the buffer comes out too */
  b->child = fork();
  if (b->child == 0) {
    close(pfd[0]);
    close(pidp[0]);
    run_coordinator(b, pfd[1], pidp[1]);
  }
  close(pfd[1]);
  close(pidp[1]);
  if (b->child < 0 ||
      read(pfd[0], &b->port, sizeof(b->port)) != (ssize_t)sizeof(b->port) ||
      b->port < 0 ||
      read(b->pid_fd, &b->primary, sizeof(b->primary)) !=
          (ssize_t)sizeof(b->primary)) {
    fprintf(stderr, "resihp-bench-control: N=%d: no coordinator\n", n);
    goto out;
  }
  b->ep = epoll_create1(EPOLL_CLOEXEC);
  if (b->ep < 0)
    goto out;
  b->t0 = now_ms();
  struct epoll_event ev[256];
  double deadline = b->t0 + timeout_s * 1000, last_hb = b->t0;
  int next = 0; /* replicas started so far */
  while (b->done < b->alive && now_ms() < deadline) {
    /* every replica starts at once, but each answers its own mail: a
     * batch of connects, then whatever is ready, as N processes would */
    for (int k = 0; k < 256 && next < n; k++)
      if (start_stub(b, &b->s[next++])) {
        fprintf(stderr, "resihp-bench-control: N=%d: cannot connect: %s\n", n,
                strerror(errno));
        goto out;
      }
    /* then all the mail there is (each replica answers its own at once:
     * a stub left waiting behind thousands of others would answer its
     * handshake later than a replica does, and be dropped as slow) */
    int k, rounds = 0;
    do {
      k = epoll_wait(b->ep, ev, 256, next < n || rounds++ ? 0 : 5);
      for (int i = 0; i < k; i++)
        stub_io(b, ev[i].data.ptr, ev[i].events);
      beat(b, &last_hb); /* a replica's heartbeat thread never waits */
    } while (k == 256 && rounds < 64);
    run_timers(b);
    if (b->t_fo_at > 0 && !(b->t_fo_kill > 0) && now_ms() >= b->t_fo_at)
      kill_coordinator(b);
    if (b->t_idle0 > 0 && !(b->t_idle1 > 0) &&
        now_ms() >= b->t_idle0 + b->idle_ms)
      end_idle(b);
    beat(b, &last_hb);
    if ((b->errors && !check) ||
        (next == n && !b->live && b->due_head == b->due_tail))
      break;
  }
  int finished = b->done == b->alive;
  if (!finished)
    fprintf(stderr,
            "resihp-bench-control: N=%d: %ld of %d replicas finished%s\n", n,
            b->done, b->alive,
            now_ms() >= deadline ? " before the --timeout" : "");
  for (int i = 0; i < n; i++)
    if (b->s[i].stage != S_DEAD)
      kill_stub(b, &b->s[i]);
  /* the coordinator ends once their FINISH is read; else it is killed */
  child_rc = wait_child(b->child, finished ? 20000 : 0);
  b->child = 0;
  if (b->nlat)
    qsort(b->lat, (size_t)b->nlat, sizeof(double), cmp_d);
  double med = b->nlat ? b->lat[b->nlat / 2] : -1,
         p99 = b->nlat ? b->lat[(b->nlat * 99) / 100] : -1;
  printf("%7d %9.1f %9.1f %6d %6.1f %10.2f %10.2f %12.2f %12.1f",
         n, b->t_welcome > 0 ? b->t_welcome - b->t0 : -1,
         b->t_join > 0 ? b->t_join - b->t0 : -1, b->hb_ms,
         b->t_idle1 > 0
             ? 100 * (b->cpu_idle1 - b->cpu_idle0) / (b->t_idle1 - b->t_idle0)
             : -1,
         med, p99, b->tm1 > 0 ? (b->cpu1 - b->cpu0) / steps : -1,
         b->tm1 > 0 ? (b->io1 - b->io0) / steps / 1024 : -1);
  /* each death: to every survivor's REASSIGN / in the new epoch */
  for (int d = 0; d < b->ndeaths; d++) {
    const death_t *x = &b->deaths[d];
    printf(" %7.0f/%-7.0f",
           x->t_reassign > 0 ? x->t_reassign - x->t_death : -1,
           x->t_epoch > 0 ? x->t_epoch - x->t_death : -1);
  }
  printf(" %9.1f %9.1f %9.1f %8.1f %8.1f %8.1f\n",
         b->t_fo_back > 0 ? b->t_fo_back - b->t_fo_kill : -1,
         b->t_fo_back > 0 ? b->fo_cpu : -1,
         b->t_fo_start > 0 ? b->t_fo_start - b->t_fo_kill : -1,
         b->t_fo_start > 0 ? b->t_fo_start - (b->t_fo_step + b->step_ms) : -1,
         (double)b->stats->rss_kb / 1024, b->stats->max_poll_ms);
  /* what each failure cost, from the death to every survivor's next
   * START (heartbeats included) */
  printf("#   N=%d per failure (messages, KiB, survivors' RECOVER included):",
         n);
  for (int d = 0; d < b->ndeaths; d++) {
    const death_t *x = &b->deaths[d];
    printf(" %s(%d) %.0f msgs %.1f KiB;", death_name[x->kind], x->nv,
           x->t_start > 0 ? x->lines1 - x->lines0 : -1,
           x->t_start > 0 ? (x->bytes1 - x->bytes0) / 1024 : -1);
  }
  printf(" failover %.0f ms into a %d ms step, a replacement waiting "
         "(admitted %.0f ms after the kill)\n",
         b->t_fo_at > 0 ? b->t_fo_at - b->t_fo_step : -1, b->step_ms,
         b->t_joiner_in > 0 ? b->t_joiner_in - b->t_fo_kill : -1);
  fflush(stdout);
  if (check) {
    const char *why = verdict(b, child_rc);
    if (why)
      printf("check N=%d: FAILED: %s\n", n, why);
    else
      printf("check N=%d: ok (%d admitted, %ld steps, %d deaths, %d "
             "survivors in the new epochs%s)\n",
             n, n, b->total_steps, b->ndeaths, b->alive,
             failover ? ", all back after the coordinator's failover" : "");
    rc = why != NULL;
  } else {
    rc = b->t_join > 0 && b->deaths[D_KINDS - 1].t_epoch > 0 &&
                 (!failover || b->t_fo_start > 0)
             ? 0
             : 1;
  }
out:
  if (b->child > 0)
    wait_child(b->child, 0);
  if (pfd[0] >= 0)
    close(pfd[0]);
  if (pidp[0] >= 0)
    close(pidp[0]);
  for (int i = 0; b->s && i < n; i++)
    resihp__wire_free(&b->s[i].w);
  if (b->ep >= 0)
    close(b->ep);
  free(b->s);
  free(b->started);
  free(b->due_q);
  if (b->stats)
    munmap(b->stats, sizeof(coord_stats_t));
  free(b->lat);
  free(b);
  return rc;
}

static void usage(FILE *f) {
  fprintf(f, "usage: resihp-bench-control [--replicas \"N ...\"] [--steps S] "
             "[--check] [--no-failover] [--idle SECONDS] [--silence-ms MS] "
             "[--step-ms MS] [--timeout SECONDS]\n"
             "The coordinator with N simulated replicas on loopback (default "
             "16 64 256 1024):\n"
             "join time, the coordinator's CPU share while replicas only beat "
             "(--idle, default 2 s; 0: none), step-boundary latency, "
             "coordinator CPU and bytes per step; a replica's death, a hang "
             "and a node's death mid-step (every survivor says RECOVER) to "
             "every survivor's REASSIGN and new epoch, with messages and "
             "bytes per failure; the coordinator SIGKILLed at a random point "
             "of a step to every replica back and the stall; the "
             "coordinator's peak RSS and longest poll round. resihp-run's "
             "bounds: --silence-ms 3000, hang 5 s; --step-ms 1000.\n");
}

int main(int argc, char **argv) {
  const char *list = "16 64 256 1024";
  long steps = 5;
  int check = 0, failover = 1;
  double timeout_s = 300, idle_s = 2;
  long silence_ms = 3000, step_ms = 1000;
  static const struct option opts[] = {
      {"replicas", required_argument, 0, 'r'},
      {"steps", required_argument, 0, 's'},
      {"check", no_argument, 0, 'c'},
      {"no-failover", no_argument, 0, 'F'},
      {"timeout", required_argument, 0, 't'},
      {"idle", required_argument, 0, 'i'},
      {"silence-ms", required_argument, 0, 'S'},
      {"step-ms", required_argument, 0, 'T'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int o;
  char *end;
  while ((o = getopt_long(argc, argv, "r:s:ct:i:S:T:h", opts, NULL)) != -1) {
    switch (o) {
    case 'r':
      list = optarg;
      break;
    case 's':
      steps = strtol(optarg, &end, 10);
      if (*end || steps < 1 || steps > 100000) {
        fprintf(stderr, "resihp-bench-control: --steps must be 1..100000\n");
        return 2;
      }
      break;
    case 'c':
      check = 1;
      break;
    case 'F':
      failover = 0;
      break;
    case 't':
      timeout_s = strtod(optarg, &end);
      if (*end || !(timeout_s >= 1 && timeout_s <= 86400)) {
        fprintf(stderr,
                "resihp-bench-control: --timeout must be 1..86400 seconds\n");
        return 2;
      }
      break;
    case 'i':
      idle_s = strtod(optarg, &end);
      if (*end || !(idle_s >= 0 && idle_s <= 3600)) {
        fprintf(stderr,
                "resihp-bench-control: --idle must be 0..3600 seconds\n");
        return 2;
      }
      break;
    case 'S':
      silence_ms = strtol(optarg, &end, 10);
      if (*end || silence_ms < 100 || silence_ms > 3600000) {
        fprintf(stderr,
                "resihp-bench-control: --silence-ms must be 100..3600000\n");
        return 2;
      }
      break;
    case 'T':
      step_ms = strtol(optarg, &end, 10);
      if (*end || step_ms < 0 || step_ms > 600000) {
        fprintf(stderr, "resihp-bench-control: --step-ms must be 0..600000\n");
        return 2;
      }
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (optind != argc) {
    usage(stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  srandom((unsigned)(time(NULL) ^ getpid())); /* the failover's moment */
  /* a descriptor per replica at each end: as many as this user may have */
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  getrlimit(RLIMIT_NOFILE, &rl);
  int ns[64], nn = 0;
  for (const char *p = list; *p;) {
    while (*p == ' ' || *p == ',')
      p++;
    if (!*p)
      break;
    long v = strtol(p, &end, 10);
    if (end == p || v < 2 || v > MAX_N || nn == 64 ||
        (*end && *end != ' ' && *end != ',')) {
      fprintf(stderr,
              "resihp-bench-control: --replicas wants up to 64 numbers, each "
              "2..%d, separated by spaces or commas\n",
              MAX_N);
      return 2;
    }
    ns[nn++] = (int)v;
    p = end;
  }
  if (!nn) {
    usage(stderr);
    return 2;
  }
  printf("# coordinator with N simulated replicas on loopback, 4N "
         "microbatches, steps of %ld ms, %ld steady steps, silence bound %ld "
         "ms; %s\n",
         step_ms, steps, silence_ms,
         failover ? "under the keeper (hang bound 5 s), state mirrored, "
                    "SIGKILLed once"
                  : "alone, no mirror, no failover");
  printf("# %5s %9s %9s %6s %6s %10s %10s %12s %12s %15s %15s %15s %9s %9s "
         "%9s %8s %8s %8s\n",
         "N", "hello_ms", "join_ms", "hb_ms", "idle%", "step_med",
         "step_p99", "cpu_ms/step", "KiB/step", "die:rsg/epoch", "hang:rsg/ep",
         "node:rsg/ep", "fo_back", "fo_cpu", "fo_resume", "fo_stall",
         "rss_MiB", "maxpoll");
  int failed = 0;
  for (int i = 0; i < nn; i++) {
    if ((rlim_t)ns[i] + FD_SPARE > rl.rlim_cur) {
      printf("# N=%d needs %d descriptors in each process; the hard limit "
             "(ulimit -Hn) is %llu: skipped\n",
             ns[i], ns[i] + FD_SPARE, (unsigned long long)rl.rlim_cur);
      failed |= check;
      continue;
    }
    failed |= run_one(ns[i], (int)steps, check, failover, idle_s,
                      (int)silence_ms, (int)step_ms, timeout_s);
  }
  return failed ? 1 : 0;
}
