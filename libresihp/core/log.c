/* SPDX-License-Identifier: BSD-3-Clause */
/* Logging: one entry point, a level taken once from RESIHP_DEBUG, stderr or
 * a host-installed handler. Each message is formatted into one buffer and
 * written with a single write() so that lines from ranks and threads never
 * interleave mid-line. */
#include "config.h"

#include <resihp/log.h>
#include <resihp/settings.h>

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static atomic_int level = -1; /* -1: not yet read from the environment */
static resihp_log_fn handler;
static void *handler_data;

static const char *const names[] = {"error", "warn", "info", "debug", "trace"};

const char *resihp_log_level_name(resihp_log_level_t l) {
  return (unsigned)l < sizeof(names) / sizeof(names[0]) ? names[l] : "?";
}

resihp_log_level_t resihp_log_get_level(void) {
  int l = atomic_load(&level);
  if (l < 0) {
    /* Settings parsing may itself log; give it a provisional level first so
     * that it cannot recurse into us. */
    atomic_store(&level, RESIHP_LOG_WARN);
    l = (int)resihp_settings_get(resihp_settings_global(), RESIHP_SETTING_DEBUG);
    atomic_store(&level, l);
  }
  return (resihp_log_level_t)l;
}

void resihp_log_set_level(resihp_log_level_t l) { atomic_store(&level, (int)l); }

int resihp_log_enabled(resihp_log_level_t l) {
  return (int)l <= (int)resihp_log_get_level();
}

void resihp_log_set_handler(resihp_log_fn fn, void *userdata) {
  handler = fn;
  handler_data = userdata;
}

void resihp_vlog(resihp_log_level_t l, const char *subsystem, const char *fmt,
                 va_list ap) {
  if (!resihp_log_enabled(l))
    return;
  char msg[1024];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  if (handler) {
    handler(l, subsystem, msg, handler_data);
    return;
  }
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  char *dot = strchr(host, '.');
  if (dot)
    *dot = '\0';
  char line[1200];
  int n = snprintf(line, sizeof(line), "resihp[%s:%d] %s %s: %s\n", host,
                   (int)getpid(), resihp_log_level_name(l),
                   subsystem ? subsystem : "core", msg);
  if (n < 0)
    return;
  if ((size_t)n >= sizeof(line)) {
    n = sizeof(line) - 1;
    line[n - 1] = '\n';
  }
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
  (void)w; /* nowhere left to report a failing stderr */
}

void resihp_log(resihp_log_level_t l, const char *subsystem, const char *fmt,
                ...) {
  va_list ap;
  va_start(ap, fmt);
  resihp_vlog(l, subsystem, fmt, ap);
  va_end(ap);
}
