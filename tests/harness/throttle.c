/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle: slow processes down from outside, without their help, for the
 * tests and benchmarks of fail-slow handling.
 *
 *   throttle -f F [-p PERIOD_MS] [-t SECONDS] [--pgid PGID]
 *            [--pids-from CMD [--refresh MS]] [--cgroup DIR]
 *            [--freezer DIR] [-q] [PID...]
 *
 * Duty cycle (the default). Every PERIOD_MS (default 40 ms) the targets
 * run for PERIOD/F, then are stopped (SIGSTOP) for the rest, so that
 * anything they do - compute, or sleeping in short slices as the example
 * trainers do - progresses about F times slower. Targets: the PIDs given,
 * every process of process group PGID (signalled as a group, so new
 * members are included at once), and the PIDs that CMD prints (first
 * number of each line: `pgrep -f x`, `scontrol listpids JOB.STEP`), run
 * again every --refresh MS (default 500) to pick up new ones. A target
 * that exits (ESRCH, or a zombie) is dropped; when none is left and no
 * source can bring new ones, throttle exits 0. It stops after -t SECONDS,
 * or on SIGTERM, SIGINT or SIGHUP, and then always continues (SIGCONT)
 * every target before exiting, so that nothing is left stopped; only
 * SIGKILL can leave a target stopped, so do not use it on throttle.
 * Beware: a target that stopped itself (resihp-run's hang-rank) is
 * continued by the duty cycle.
 *
 * cgroup (--cgroup DIR). Writes "PERIOD/F PERIOD" (microseconds) to
 * DIR/cpu.max instead (cgroup v2; v1: PERIOD to DIR/cpu.cfs_period_us and
 * PERIOD/F to DIR/cpu.cfs_quota_us), and the old values back at the end:
 * the kernel
 * limits the cgroup's CPU time, which slows computation but not sleeping,
 * so it does not slow the example trainers' simulated compute. The
 * processes must already be in the cgroup.
 *
 * Freezer (--freezer DIR). The duty cycle freezes and thaws a cgroup
 * instead of signalling processes (v1: DIR/freezer.state FROZEN/THAWED;
 * v2: DIR/cgroup.freeze 1/0): every process in it is stopped, including
 * those started after throttle was (children stay in their parent's
 * cgroup), and unlike a CPU quota the slowdown does not shrink when the
 * machine is busy: a whole node's slurmd and the steps it starts, slowed
 * from outside. It is always thawed at the end.
 *
 * Exit: 0 at the end (time, signal or no target left), 2 for bad usage or
 * a target that may not be signalled (EPERM) or a cgroup that cannot be
 * set. With -v, each start, stop and drop is printed on stderr. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_TARGETS 4096

static volatile sig_atomic_t g_stop;
static pid_t g_pids[MAX_TARGETS];
static int g_npids, g_verbose, g_gone;
static pid_t g_pgid;

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Sleep s seconds unless a stop signal comes first. */
static void nap(double s) {
  if (s <= 0 || g_stop)
    return;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL); /* EINTR on a signal: the caller sees g_stop */
}

/* A zombie can still be signalled but will never run again. */
static int is_zombie(pid_t p) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)p);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *rp = strrchr(buf, ')'); /* the name may hold anything but ')' last */
  return rp && rp[1] == ' ' && rp[2] == 'Z';
}

static void drop(int i, const char *why) {
  if (g_verbose)
    fprintf(stderr, "throttle: pid %d %s: dropped\n", (int)g_pids[i], why);
  g_pids[i] = g_pids[--g_npids];
  g_gone++;
}

/* A pid we may signal: never 0, -1 (which mean groups or everyone), init
 * or ourselves. */
static int valid_pid(long p) {
  return p > 1 && p <= INT_MAX && p != getpid();
}

static void add_pid(pid_t p) {
  for (int i = 0; i < g_npids; i++)
    if (g_pids[i] == p)
      return;
  if (g_npids == MAX_TARGETS) {
    fprintf(stderr, "throttle: more than %d targets: pid %d ignored\n",
            MAX_TARGETS, (int)p);
    return;
  }
  g_pids[g_npids++] = p;
  if (g_verbose)
    fprintf(stderr, "throttle: pid %d added\n", (int)p);
}

/* Signal every target; -1 when one may not be signalled (EPERM). */
static int signal_all(int sig) {
  int rc = 0;
  for (int i = g_npids - 1; i >= 0; i--) {
    int e = kill(g_pids[i], sig) ? errno : 0;
    if (!e && !is_zombie(g_pids[i]))
      continue;
    if (e == EPERM) {
      fprintf(stderr, "throttle: may not signal pid %d: %s\n", (int)g_pids[i],
              strerror(e));
      rc = -1;
    }
    drop(i, e == 0 || e == ESRCH ? "exited" : strerror(e));
  }
  if (g_pgid > 0 && killpg(g_pgid, sig)) {
    if (errno == EPERM) {
      fprintf(stderr, "throttle: may not signal process group %d\n",
              (int)g_pgid);
      rc = -1;
    }
    if (g_verbose)
      fprintf(stderr, "throttle: process group %d is gone\n", (int)g_pgid);
    g_pgid = 0;
  }
  return rc;
}

/* Add the pids CMD prints: the first number of each line. */
static void refresh(const char *cmd) {
  FILE *f = popen(cmd, "r");
  if (!f) {
    fprintf(stderr, "throttle: cannot run '%s': %s\n", cmd, strerror(errno));
    return;
  }
  char line[512];
  while (fgets(line, sizeof(line), f)) {
    char *p = line + strspn(line, " \t"), *end;
    if (*p < '0' || *p > '9')
      continue; /* a header line */
    errno = 0;
    long v = strtol(p, &end, 10);
    if (!errno && (*end == '\0' || strchr(" \t\n", *end)) && valid_pid(v))
      add_pid((pid_t)v);
  }
  pclose(f);
}

/* Freeze (1) or thaw (0) the cgroup dir: v1's freezer.state, else v2's
 * cgroup.freeze. -1 when neither can be written. */
static int freeze(const char *dir, int on) {
  static const char *const file[2] = {"freezer.state", "cgroup.freeze"};
  static const char *const val[2][2] = {{"THAWED", "FROZEN"}, {"0", "1"}};
  char path[4096];
  for (int v = 0; v < 2; v++) {
    snprintf(path, sizeof(path), "%s/%s", dir, file[v]);
    FILE *f = fopen(path, "w");
    if (!f)
      continue;
    int ok = fputs(val[v][on], f) >= 0;
    ok = (fclose(f) == 0) && ok;
    if (ok)
      return 0;
  }
  fprintf(stderr, "throttle: cannot %s %s: is it a cgroup with a freezer?\n",
          on ? "freeze" : "thaw", dir);
  return -1;
}

/* The cgroup v1 CPU quota of dir ("quota period" as v2 writes it, into
 * cpu.cfs_period_us then cpu.cfs_quota_us; the old pair into old). */
static int cgroup_v1_set(const char *dir, const char *val, char *old,
                         size_t oldlen) {
  char path[4096];
  long q = 0, p = 0, oq = -1, op = 0;
  if (sscanf(val, "%ld %ld", &q, &p) != 2 &&
      !(sscanf(val, "max %ld", &p) == 1 && (q = -1)))
    return -1;
  const char *name[2] = {"cpu.cfs_quota_us", "cpu.cfs_period_us"};
  long *was[2] = {&oq, &op};
  for (int i = 0; old && i < 2; i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, name[i]);
    FILE *f = fopen(path, "r");
    if (!f || fscanf(f, "%ld", was[i]) != 1) {
      fprintf(stderr,
              "throttle: cannot read %s (%s): is %s a cgroup with the cpu "
              "controller?\n",
              path, strerror(errno), dir);
      if (f)
        fclose(f);
      return -1;
    }
    fclose(f);
  }
  if (old)
    snprintf(old, oldlen, "%ld %ld", oq, op);
  /* the period first: a quota is checked against the period in place */
  long v[2] = {p, q};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, name[1 - i]);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%ld\n", v[i]) < 0 || fclose(f)) {
      fprintf(stderr, "throttle: cannot write %ld to %s: %s\n", v[i], path,
              strerror(errno));
      return -1;
    }
  }
  return 0;
}

/* cpu.max of a cgroup v2 directory (or a v1 one's quota): read the old
 * value into old, write "quota period". 0 or -1 (with a message). */
static int cgroup_set(const char *dir, const char *val, char *old,
                      size_t oldlen) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/cpu.max", dir);
  if (access(path, F_OK) && !access(dir, F_OK))
    return cgroup_v1_set(dir, val, old, oldlen);
  if (old) {
    FILE *f = fopen(path, "r");
    if (!f || !fgets(old, (int)oldlen, f)) {
      fprintf(stderr,
              "throttle: cannot read %s (%s): is %s a cgroup v2 directory "
              "with the cpu controller enabled?\n",
              path, strerror(errno), dir);
      if (f)
        fclose(f);
      return -1;
    }
    fclose(f);
    old[strcspn(old, "\n")] = '\0';
  }
  FILE *f = fopen(path, "w");
  if (!f || fprintf(f, "%s\n", val) < 0 || fclose(f)) {
    fprintf(stderr, "throttle: cannot write '%s' to %s: %s\n", val, path,
            strerror(errno));
    return -1;
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: throttle -f F [-p PERIOD_MS] [-t SECONDS] [--pgid PGID]\n"
          "                [--pids-from CMD [--refresh MS]] [--cgroup DIR] "
          "[--freezer DIR] [-v] [PID...]\n"
          "Slows the targets F times (1 < F <= 1000) by a SIGSTOP/SIGCONT "
          "duty\ncycle of PERIOD_MS (default 40), until SECONDS have passed, "
          "a SIGTERM\ncomes or no target is left; then continues them all. "
          "--cgroup sets\nDIR/cpu.max instead; --freezer freezes and thaws "
          "cgroup DIR in the cycle.\n");
}

static double num(const char *opt, const char *arg, double lo, double hi) {
  char *end;
  errno = 0;
  double v = strtod(arg, &end);
  if (errno || end == arg || *end || !(v >= lo && v <= hi)) {
    fprintf(stderr, "throttle: %s wants a number from %g to %g, not '%s'\n",
            opt, lo, hi, arg);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  double factor = 0, period_ms = 40, duration = 0, refresh_ms = 500;
  const char *pids_from = NULL, *cgroup = NULL, *freezer = NULL;
  static const struct option lo[] = {{"factor", 1, 0, 'f'},
                                     {"period", 1, 0, 'p'},
                                     {"time", 1, 0, 't'},
                                     {"pgid", 1, 0, 'g'},
                                     {"pids-from", 1, 0, 'c'},
                                     {"refresh", 1, 0, 'r'},
                                     {"cgroup", 1, 0, 'C'},
                                     {"freezer", 1, 0, 'F'},
                                     {"verbose", 0, 0, 'v'},
                                     {"help", 0, 0, 'h'},
                                     {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "f:p:t:vh", lo, NULL)) != -1) {
    switch (o) {
    case 'f':
      factor = num("-f", optarg, 1, 1000);
      break;
    case 'p':
      period_ms = num("-p", optarg, 2, 10000);
      break;
    case 't':
      duration = num("-t", optarg, 0.001, 1e7);
      break;
    case 'g': {
      long g = (long)num("--pgid", optarg, 2, INT_MAX);
      if (g == getpgrp()) {
        fprintf(stderr, "throttle: --pgid %ld is throttle's own group\n", g);
        return 2;
      }
      g_pgid = (pid_t)g;
      break;
    }
    case 'c':
      pids_from = optarg;
      break;
    case 'r':
      refresh_ms = num("--refresh", optarg, 10, 3600000);
      break;
    case 'C':
      cgroup = optarg;
      break;
    case 'F':
      freezer = optarg;
      break;
    case 'v':
      g_verbose = 1;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (!(factor > 1)) {
    fprintf(stderr, "throttle: -f F (more than 1) is required\n");
    usage(stderr);
    return 2;
  }
  for (int i = optind; i < argc; i++) {
    char *end;
    errno = 0;
    long v = strtol(argv[i], &end, 10);
    if (errno || end == argv[i] || *end || !valid_pid(v)) {
      fprintf(stderr,
              "throttle: '%s' is not a pid to throttle (a number > 1, not "
              "throttle's own)\n",
              argv[i]);
      return 2;
    }
    add_pid((pid_t)v);
  }
  if (!g_npids && !g_pgid && !pids_from && !cgroup && !freezer) {
    fprintf(stderr, "throttle: no target (PIDs, --pgid, --pids-from, "
                    "--cgroup or --freezer)\n");
    return 2;
  }
  if (freezer && freeze(freezer, 0))
    return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal; /* no SA_RESTART: naps end at once */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  double t0 = now_s(), end = duration > 0 ? t0 + duration : 0;
  long cycles = 0;
  int rc = 0;
  if (cgroup) {
    char old[128], val[64];
    long per = (long)(period_ms * 1000);
    snprintf(val, sizeof(val), "%ld %ld", (long)(per / factor), per);
    if (cgroup_set(cgroup, val, old, sizeof(old)))
      return 2;
    while (!g_stop && (!end || now_s() < end))
      nap(end ? (end - now_s() < 0.2 ? end - now_s() : 0.2) : 0.2);
    return cgroup_set(cgroup, old, NULL, 0) ? 2 : 0;
  }
  double run = period_ms / 1000 / factor, rest = period_ms / 1000 - run,
         next_refresh = 0;
  while (!g_stop && (!end || now_s() < end)) {
    if (pids_from && now_s() >= next_refresh) {
      refresh(pids_from);
      next_refresh = now_s() + refresh_ms / 1000;
    }
    if (!g_npids && !g_pgid && !pids_from && !freezer) {
      fprintf(stderr, "throttle: no target left\n");
      break;
    }
    if (signal_all(SIGCONT) || (freezer && freeze(freezer, 0))) {
      rc = 2;
      break;
    }
    nap(run);
    if (g_stop)
      break;
    if (signal_all(SIGSTOP) || (freezer && freeze(freezer, 1))) {
      rc = 2;
      break;
    }
    nap(rest);
    cycles++;
  }
  signal_all(SIGCONT); /* never leave a target stopped */
  if (freezer && freeze(freezer, 0))
    rc = 2;
  if (g_verbose)
    fprintf(stderr,
            "throttle: %ld cycles of %.0f ms at 1/%.3g in %.2f s; %d "
            "target(s) gone\n",
            cycles, period_ms, factor, now_s() - t0, g_gone);
  return rc;
}
