/* SPDX-License-Identifier: BSD-3-Clause */
/* Helper processes of slurmstepd: fork hygiene and bounded commands.
 *
 * A child of slurmstepd inherits its blocked signals, its handlers, the
 * sockets srun is waiting on and the job's environment. If it keeps the
 * stdio or any socket open, srun waits for EOF that never comes; if it keeps
 * signals blocked, Slurm cannot kill it; if it outlives the step, slurmd
 * drains the node. So every helper starts with resihp__helper_sanitize(). */
#include "config.h"

#include "probe.h"

#include <resihp/error.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HELPER_PATH "/usr/sbin:/usr/bin:/sbin:/bin"
#define KEEP_FD_MIN 64

static void close_from(int lowfd, int except) {
  /* close_range(2) where the kernel has it, otherwise a bounded loop. */
#ifdef SYS_close_range
  if (except < lowfd) {
    if (syscall(SYS_close_range, (unsigned)lowfd, ~0u, 0) == 0)
      return;
  } else if ((except == lowfd ||
              syscall(SYS_close_range, (unsigned)lowfd, (unsigned)except - 1,
                      0) == 0) &&
             syscall(SYS_close_range, (unsigned)except + 1, ~0u, 0) == 0) {
    return;
  }
#endif
  long max = sysconf(_SC_OPEN_MAX);
  if (max < 0 || max > 65536)
    max = 65536;
  for (int fd = lowfd; fd < max; fd++)
    if (fd != except)
      close(fd);
}

int resihp__helper_sanitize(int keep_fd, pid_t parent_pid, const char *name) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; s++)
    (void)sigaction(s, &dfl, NULL);

  /* Die with whoever forked us; if it is already gone, go now. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent_pid)
    _exit(127);
  if (name)
    prctl(PR_SET_NAME, name);

  int kept = -1;
  if (keep_fd >= 0) {
    kept = fcntl(keep_fd, F_DUPFD, KEEP_FD_MIN);
    if (kept < 0)
      _exit(127);
  }
  int dn = open("/dev/null", O_RDWR);
  if (dn < 0)
    _exit(127);
  for (int fd = 0; fd < 3; fd++)
    if (dn != fd && dup2(dn, fd) < 0)
      _exit(127);
  close_from(3, kept);

  /* Nothing of the job's (untrusted) environment reaches the helper or the
   * libraries it loads (hwloc and NVML read variables of their own). */
  clearenv();
  setenv("PATH", HELPER_PATH, 1);
  setenv("LC_ALL", "C", 1);
  umask(022);
  if (chdir("/") != 0)
    _exit(127);
  return kept;
}

int resihp__helper_become_root(pid_t parent_pid) {
  if (geteuid() != 0 && seteuid(0) != 0)
    return RESIHP_ESYS;
  if (setgroups(0, NULL) != 0 || setresgid(0, 0, 0) != 0 ||
      setresuid(0, 0, 0) != 0)
    return RESIHP_ESYS;
  /* The kernel clears the parent-death signal when the effective uid or gid
   * changes, so the one resihp__helper_sanitize() set is gone: arm it again,
   * and if the parent died in between (the signal was never sent), go. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent_pid)
    _exit(127);
  return 0;
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int resihp__reap_bounded(pid_t pid, int *status, long timeout_ms) {
  long long deadline = now_ms() + timeout_ms;
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      if (status)
        *status = st;
      return 0;
    }
    if (r < 0 && errno != EINTR)
      return RESIHP_ESYS; /* already reaped (slurmstepd waits for any child) */
    if (now_ms() >= deadline)
      return RESIHP_ETIMEDOUT;
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* Wait for pid until deadline (monotonic ms); SIGKILL it after. Returns
 * the wait status or RESIHP_ETIMEDOUT. */
static int wait_bounded(pid_t pid, long long deadline) {
  int st = 0;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid)
      return st;
    if (r < 0 && errno != EINTR)
      return RESIHP_ESYS;
    if (now_ms() >= deadline) {
      kill(pid, SIGKILL);
      resihp__reap_bounded(pid, NULL, 1000);
      return RESIHP_ETIMEDOUT;
    }
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

int resihp__run_command(char *const argv[], char *const env_extra[],
                        long timeout_ms) {
  if (!argv || !argv[0])
    return RESIHP_EINVAL;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0)
    return RESIHP_ESYS;
  if (pid == 0) {
    resihp__helper_sanitize(-1, parent, NULL);
    for (int i = 0; env_extra && env_extra[i]; i++)
      putenv(env_extra[i]);
    execvp(argv[0], argv);
    _exit(127);
  }
  int st = wait_bounded(pid, now_ms() + timeout_ms);
  if (st < 0)
    return st;
  if (WIFEXITED(st))
    return WEXITSTATUS(st);
  return RESIHP_EABORTED;
}

int resihp__probe_drain(const char *node, const char *summary,
                        const char *slurm_conf, long timeout_ms) {
  if (!node || !*node || strnlen(node, 128) >= 128)
    return RESIHP_EINVAL;
  for (const char *p = node; *p; p++)
    if ((unsigned char)*p <= ' ' || *p == '=' || (unsigned char)*p >= 0x7f)
      return RESIHP_EINVAL;
  char nodearg[160], reason[240], conf[300];
  snprintf(nodearg, sizeof(nodearg), "nodename=%s", node);
  int n = snprintf(reason, sizeof(reason), "reason=resihp: %s",
                   summary && *summary ? summary : "health probe failed");
  if (n < 0)
    return RESIHP_EINVAL;
  /* The reason is shown by sinfo -R: keep it one printable line. */
  for (char *p = reason; *p; p++)
    if ((unsigned char)*p < ' ' || (unsigned char)*p >= 0x7f)
      *p = ' ';
  char *argv[] = {"scontrol", "update", nodearg, "state=drain", reason, NULL};
  char *env[2] = {NULL, NULL};
  if (slurm_conf && *slurm_conf && slurm_conf[0] == '/' &&
      strnlen(slurm_conf, 256) < 256) {
    snprintf(conf, sizeof(conf), "SLURM_CONF=%s", slurm_conf);
    env[0] = conf;
  }
  int rc = resihp__run_command(argv, env, timeout_ms);
  if (rc < 0)
    return rc;
  return rc == 0 ? 0 : RESIHP_EIO;
}
