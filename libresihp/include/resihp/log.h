/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp logging.
 *
 * The library never writes to stdout. By default messages at or above the
 * level chosen by RESIHP_DEBUG (error|warn|info|debug|trace or 0..4; default
 * warn) go to stderr as "resihp[host:pid] subsystem: message". A host program
 * may install its own handler; it is then called for every message that passes
 * the level filter, from whatever thread logged it.
 */
#ifndef RESIHP_LOG_H
#define RESIHP_LOG_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  RESIHP_LOG_ERROR = 0,
  RESIHP_LOG_WARN = 1,
  RESIHP_LOG_INFO = 2,
  RESIHP_LOG_DEBUG = 3,
  RESIHP_LOG_TRACE = 4,
} resihp_log_level_t;

typedef void (*resihp_log_fn)(resihp_log_level_t level, const char *subsystem,
                              const char *message, void *userdata);

void resihp_log(resihp_log_level_t level, const char *subsystem,
                const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void resihp_vlog(resihp_log_level_t level, const char *subsystem,
                 const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Install a handler (NULL restores stderr). Not to be called concurrently
 * with logging threads. */
void resihp_log_set_handler(resihp_log_fn fn, void *userdata);

/* Override the level taken from RESIHP_DEBUG. */
void resihp_log_set_level(resihp_log_level_t level);
resihp_log_level_t resihp_log_get_level(void);

/* True when a message at this level would be emitted (skip costly
 * formatting otherwise). */
int resihp_log_enabled(resihp_log_level_t level);

const char *resihp_log_level_name(resihp_log_level_t level);

#ifdef __cplusplus
}
#endif
#endif /* RESIHP_LOG_H */
