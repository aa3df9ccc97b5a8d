/* SPDX-License-Identifier: BSD-3-Clause */
/* Probe selection, configuration and the bounded helper that runs the
 * checks (see probe.h).
 *
 * Schedule of one run: the caller forks a helper (sanitised like every child
 * of slurmstepd), the helper runs the selected checks one after the other
 * and writes one fixed-size record per finished check into a pipe; the
 * caller reads records until EOF or until the deadline. At the deadline the
 * helper is SIGKILLed and the first check without a record is the one that
 * hung: it is reported as TIMEOUT, the ones after it as not run. Records are
 * smaller than PIPE_BUF, so each arrives whole. */
#include "config.h"

#include "../core/errbuf.h"

#include "checks.h"

#include <resihp/error.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const names[RESIHP_PROBE__COUNT] = {
#define XX(id, name, help) [RESIHP_PROBE_##id] = name,
    RESIHP_PROBE_CHECKS(XX)
#undef XX
};

const char *resihp__probe_check_name(int check) {
  return (unsigned)check < RESIHP_PROBE__COUNT ? names[check] : "?";
}

const char *resihp__probe_status_name(int status) {
  switch (status) {
  case RESIHP_PROBE_PASS:
    return "pass";
  case RESIHP_PROBE_FAIL:
    return "fail";
  case RESIHP_PROBE_SKIP:
    return "skip";
  case RESIHP_PROBE_TIMEOUT:
    return "timeout";
  default:
    return "notrun";
  }
}

int resihp__probe_check_lookup(const char *name) {
  for (int i = 0; name && i < RESIHP_PROBE__COUNT; i++)
    if (!strcmp(name, names[i]))
      return i;
  return -1;
}

static void list_names(char *buf, size_t len) {
  buf[0] = '\0';
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++) {
    size_t l = strlen(buf);
    snprintf(buf + l, len - l, "%s%s", i ? ":" : "", names[i]);
  }
}

int resihp__probe_parse_list(const char *list, unsigned *mask, char *err,
                             size_t errlen) {
  char valid[128];
  list_names(valid, sizeof(valid));
  if (!list || !mask) {
    resihp__errf(err, errlen, "internal error: NULL argument");
    return RESIHP_EINVAL;
  }
  size_t len = strnlen(list, RESIHP_SETTING_STR_MAX);
  if (len >= RESIHP_SETTING_STR_MAX) {
    resihp__errf(err, errlen, "probe list longer than %d characters",
        RESIHP_SETTING_STR_MAX - 1);
    return RESIHP_ERANGE;
  }
  if (!strcmp(list, "all")) {
    *mask = RESIHP_PROBE_ALL;
    return 0;
  }
  if (!strcmp(list, "none")) {
    *mask = 0;
    return 0;
  }
  unsigned m = 0;
  const char *p = list;
  for (;;) {
    size_t l = strcspn(p, ":");
    char word[32];
    if (l == 0 || l >= sizeof(word)) {
      resihp__errf(err, errlen, "bad probe list '%.80s': use all, none or names "
                       "separated by ':' from %s", list, valid);
      return RESIHP_EINVAL;
    }
    memcpy(word, p, l);
    word[l] = '\0';
    int k = resihp__probe_check_lookup(word);
    if (k < 0) {
      resihp__errf(err, errlen, "unknown probe '%s'; valid are all, none, %s", word,
          valid);
      return RESIHP_EINVAL;
    }
    if (m & (1u << k)) {
      resihp__errf(err, errlen, "probe '%s' given twice", word);
      return RESIHP_EINVAL;
    }
    m |= 1u << k;
    if (!p[l])
      break;
    p += l + 1;
  }
  *mask = m;
  return 0;
}

int resihp__probe_valid_dir(const char *dir) {
  size_t l = dir ? strnlen(dir, RESIHP_PROBE_PATH_MAX) : 0;
  if (l == 0 || l >= RESIHP_PROBE_PATH_MAX || dir[0] != '/')
    return 0;
  for (size_t i = 0; i < l; i++)
    if ((unsigned char)dir[i] < ' ' || (unsigned char)dir[i] >= 0x7f)
      return 0;
  return strstr(dir, "/../") == NULL &&
         !(l >= 3 && !strcmp(dir + l - 3, "/.."));
}

void resihp__probe_config_init(resihp_probe_config_t *c) {
  memset(c, 0, sizeof(*c));
  c->checks = RESIHP_PROBE_ALL;
  c->timeout_ms = 5000;
  c->min_free_mem = 256L << 20;
  snprintf(c->scratch_dir, sizeof(c->scratch_dir), "/tmp");
  snprintf(c->sysfs_root, sizeof(c->sysfs_root), "/sys");
  snprintf(c->proc_root, sizeof(c->proc_root), "/proc");
  snprintf(c->nvml_lib, sizeof(c->nvml_lib), "libnvidia-ml.so.1");
  c->test_delay_check = -1;
}

int resihp__probe_config_from_settings(resihp_probe_config_t *c,
                                       const resihp_settings_t *s,
                                       const char *scratch_fallback,
                                       char *err, size_t errlen) {
  unsigned mask;
  int rc = resihp__probe_parse_list(
      resihp_settings_get_str(s, RESIHP_SETTING_PROBES), &mask, err, errlen);
  if (rc)
    return rc;
  c->checks = mask;
  c->timeout_ms = resihp_settings_get(s, RESIHP_SETTING_PROBE_TIMEOUT);
  c->min_free_mem = resihp_settings_get(s, RESIHP_SETTING_PROBE_MIN_FREE_MEM);
  c->min_link_mbps = resihp_settings_get(s, RESIHP_SETTING_PROBE_MIN_LINK);
  const char *dir = resihp_settings_get_str(s, RESIHP_SETTING_PROBE_SCRATCH);
  if (!*dir)
    dir = scratch_fallback && *scratch_fallback ? scratch_fallback : "/tmp";
  if (!resihp__probe_valid_dir(dir)) {
    resihp__errf(err, errlen, "scratch dir '%.80s' is not an absolute path of "
                     "printable characters without '..'", dir);
    return RESIHP_EINVAL;
  }
  snprintf(c->scratch_dir, sizeof(c->scratch_dir), "%s", dir);
  return 0;
}

static long long mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void resihp__probe_run_check(const resihp_probe_config_t *c, int check,
                             resihp_probe_result_t *out) {
  long long t0 = mono_us();
  memset(out, 0, sizeof(*out));
  if (c->test_delay_check == check && c->test_delay_ms > 0) {
    struct timespec ts = {c->test_delay_ms / 1000,
                          (c->test_delay_ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
      ;
  }
  switch (check) {
  case RESIHP_PROBE_TOPO:
    resihp__probe_check_topo(c, out);
    break;
  case RESIHP_PROBE_MEM:
    resihp__probe_check_mem(c, out);
    break;
  case RESIHP_PROBE_DISK:
    resihp__probe_check_disk(c, out);
    break;
  case RESIHP_PROBE_NET:
    resihp__probe_check_net(c, out);
    break;
  case RESIHP_PROBE_GPU:
    resihp__probe_check_gpu(c, out);
    break;
  default:
    resihp__probe_say(out, RESIHP_PROBE_FAIL, "unknown check %d", check);
  }
  if (c->test_fail & (1u << check))
    resihp__probe_say(out, RESIHP_PROBE_FAIL,
                      "failure forced by the administrator's test-fail hook");
  out->usec = (long)(mono_us() - t0);
}

struct record {
  int check;
  resihp_probe_result_t result;
};

static void finish(resihp_probe_report_t *rep, long long t0) {
  rep->usec = (long)(mono_us() - t0);
  rep->healthy = !rep->timed_out;
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++)
    if (rep->r[i].status == RESIHP_PROBE_FAIL ||
        rep->r[i].status == RESIHP_PROBE_TIMEOUT)
      rep->healthy = 0;
}

int resihp__probe_run(const resihp_probe_config_t *c,
                      resihp_probe_report_t *rep) {
  memset(rep, 0, sizeof(*rep));
  rep->checks = c->checks & RESIHP_PROBE_ALL;
  rep->time = (long long)time(NULL);
  long long t0 = mono_us();
  if (!rep->checks) {
    finish(rep, t0);
    return 0;
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0)
    return RESIHP_ESYS;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return RESIHP_ESYS;
  }
  if (pid == 0) {
    int w = resihp__helper_sanitize(p[1], parent, "resihp-probe-h");
    for (int i = 0; i < RESIHP_PROBE__COUNT; i++) {
      if (!(c->checks & (1u << i)))
        continue;
      struct record rec;
      rec.check = i;
      resihp__probe_run_check(c, i, &rec.result);
      if (write(w, &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
        _exit(3);
    }
    _exit(0);
  }
  close(p[1]);
  long long deadline = t0 + c->timeout_ms * 1000LL;
  int got[RESIHP_PROBE__COUNT] = {0};
  for (;;) {
    long long left = deadline - mono_us();
    if (left <= 0) {
      rep->timed_out = 1;
      break;
    }
    struct pollfd pfd = {.fd = p[0], .events = POLLIN};
    int n = poll(&pfd, 1, (int)((left + 999) / 1000));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      break;
    if (n == 0)
      continue; /* the loop head notices the deadline */
    struct record rec;
    ssize_t r = read(p[0], &rec, sizeof(rec));
    if (r < 0 && errno == EINTR)
      continue;
    if (r != (ssize_t)sizeof(rec))
      break; /* EOF (helper done or dead) or a torn record */
    if ((unsigned)rec.check >= RESIHP_PROBE__COUNT ||
        !(rep->checks & (1u << rec.check)))
      break;
    rec.result.detail[sizeof(rec.result.detail) - 1] = '\0';
    rep->r[rec.check] = rec.result;
    got[rec.check] = 1;
  }
  close(p[0]);
  if (rep->timed_out)
    kill(pid, SIGKILL);
  int st = 0;
  /* A helper that finished is reaped at once; a killed one normally within
   * milliseconds. The bound keeps the deadline hard even for a helper stuck
   * in the kernel. */
  (void)resihp__reap_bounded(pid, &st, rep->timed_out ? 1000 : 5000);
  /* The first selected check without a result is the one that was running
   * when the deadline hit (or the helper died). */
  int blamed = 0;
  for (int i = 0; i < RESIHP_PROBE__COUNT; i++) {
    if (!(rep->checks & (1u << i)) || got[i])
      continue;
    resihp_probe_result_t *r = &rep->r[i];
    if (blamed) {
      resihp__probe_say(r, RESIHP_PROBE_NOTRUN, "not reached");
      continue;
    }
    blamed = 1;
    if (rep->timed_out) {
      resihp__probe_say(r, RESIHP_PROBE_TIMEOUT,
                        "probe timeout: no result within probe-timeout=%ld ms",
                        c->timeout_ms);
      r->usec = c->timeout_ms * 1000;
    } else {
      resihp__probe_say(r, RESIHP_PROBE_FAIL,
                        "probe helper died (%s %d) during this check",
                        WIFSIGNALED(st) ? "signal" : "exit status",
                        WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
  }
  finish(rep, t0);
  return 0;
}
