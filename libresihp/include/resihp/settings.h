/* SPDX-License-Identifier: BSD-3-Clause */
/* The one typed registry of resihp settings.
 *
 * Every tunable has a key (as written in `srun --resilient=key=value,...`
 * and in plugstack.conf), an environment variable (RESIHP_*) through which the
 * SPANK plugin hands it to the ranks, a type, bounds and a default. The table
 * below is the single source of truth: parsing, validation, `resihp-info` and
 * the man pages all follow it.
 *
 * Strings are bounded (RESIHP_SETTING_STR_MAX) and may not contain ',', '='
 * or control characters, so that an option string round-trips unambiguously.
 * Lists inside a string value use ':' as separator.
 */
#ifndef RESIHP_SETTINGS_H
#define RESIHP_SETTINGS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RESIHP_SETTING_STR_MAX 256
#define RESIHP_OPTS_MAX 4096

/* XX(ID, key, env, type, default, min, max, choices-or-string-default, help)
 * For ENUM the default is an index into the '|'-separated choices; for STR
 * the 8th field is the default string. */
#define RESIHP_SETTINGS_MAP(XX)                                                \
  XX(DEBUG, "debug", "RESIHP_DEBUG", ENUM, 1, 0, 4,                            \
     "error|warn|info|debug|trace", "log level of libresihp (also 0..4)")      \
  XX(DETECT_TIMEOUT, "detect-timeout", "RESIHP_DETECT_TIMEOUT_MS", MS, 1000,   \
     10, 600000, "",                                                           \
     "bound on detecting a dead, hung or cut-off peer (milliseconds)")         \
  XX(HEARTBEAT, "heartbeat", "RESIHP_HEARTBEAT_MS", MS, 100, 1, 60000, "",     \
     "heartbeat period on the control plane (milliseconds)")                   \
  XX(TRANSPORT, "transport", "RESIHP_TRANSPORT", ENUM, 0, 0, 3,                \
     "auto|tcp|shm|nccl", "data plane for gradient all-reduce")                \
  XX(CHUNK_BYTES, "chunk-bytes", "RESIHP_CHUNK_BYTES", INT, 262144, 4096,      \
     67108864, "", "pipelining chunk of the ring all-reduce (bytes)")          \
  XX(DETERMINISTIC, "deterministic", "RESIHP_DETERMINISTIC", BOOL, 0, 0, 1,    \
     "", "bitwise reproducible all-reduce whatever replicas contribute")      \
  XX(SLOW_MARGIN, "slow-margin", "RESIHP_SLOW_MARGIN_PCT", INT, 25, 1, 1000,   \
     "", "measured/predicted excess that triggers fail-slow validation (%)")   \
  XX(PROBES, "probes", "RESIHP_PROBES", STR, 0, 0, 0, "all",                   \
     "node health checks to run: all, none or a ':'-separated list")          \
  XX(PROBE_TIMEOUT, "probe-timeout", "RESIHP_PROBE_TIMEOUT_MS", MS, 5000,      \
     100, 120000, "", "hard deadline of the step-start health probe (ms)")    \
  XX(PROBE_INTERVAL, "probe-interval", "RESIHP_PROBE_INTERVAL_S", INT, 60, 0, \
     86400, "", "period of health probes while the step runs (s, 0 = off)")   \
  XX(REPLICA, "replica", "RESIHP_REPLICA", INT, -1, -1, 1000000, "",           \
     "data-parallel replica this step runs (set by resihp-run)")               \
  XX(ROLE, "role", "RESIHP_ROLE", ENUM, 0, 0, 1, "replica|spare",              \
     "what this step is for (set by resihp-run)")                              \
  XX(COORDINATOR, "coordinator", "RESIHP_COORDINATOR", STR, 0, 0, 0, "",       \
     "host:port of the resihp coordinator (set by resihp-run)")                \
  XX(SECRET_FILE, "secret-file", "RESIHP_SECRET_FILE", STR, 0, 0, 0, "",       \
     "file holding the per-job secret that authenticates peers")              \
  XX(PROBE_MIN_FREE_MEM, "probe-min-free-mem", "RESIHP_PROBE_MIN_FREE_MEM",    \
     INT, 268435456L, 0, 1125899906842624L, "",                                \
     "memory a node must have available for a probe to pass (bytes, K/M/G)")  \
  XX(PROBE_SCRATCH, "probe-scratch", "RESIHP_PROBE_SCRATCH", STR, 0, 0, 0, "", \
     "directory the disk check writes to (default: job's TMPDIR, /tmp)")      \
  XX(PROBE_MIN_LINK, "probe-min-link", "RESIHP_PROBE_MIN_LINK_MBPS", INT, 0,   \
     0, 10000000, "", "slowest acceptable NIC/IB link rate (Mb/s, 0 = any)")  \
  XX(PROBE_METRICS, "probe-metrics", "RESIHP_PROBE_METRICS", STR, 0, 0, 0, "", \
     "Prometheus textfile the probes update (plugstack.conf only)")           \
  XX(PROBE_RUN_DIR, "probe-run-dir", "RESIHP_PROBE_RUN_DIR", STR, 0, 0, 0,     \
     "/tmp", "where per-step probe results go (plugstack.conf only)")  \
  XX(FIXED_FRAC_BITS, "fixed-frac-bits", "RESIHP_FIXED_FRAC_BITS", INT, 32,    \
     0, 62, "", "fraction bits of the deterministic int64 fixed point")       \
  XX(COORD_TIMEOUT, "coord-timeout", "RESIHP_COORD_TIMEOUT_MS", MS, 3000, 100, \
     600000, "", "coordinator: silence after which a replica is failed (ms)") \
  XX(MAC_DATA, "mac-data", "RESIHP_MAC_DATA", BOOL, 0, 0, 1, "",              \
     "per-message MACs over gradient data too (control traffic: always)")    \
  XX(SMALL_MAX, "small-max", "RESIHP_SMALL_MAX", INT, 32768, 0, 16777216, "",  \
     "all-reduce by direct exchange up to this size (bytes, 0 = ring only)")  \
  XX(SINGLE_COPY, "single-copy", "RESIHP_SINGLE_COPY", BOOL, 0, 0, 1, "",      \
     "large all-reduces read same-host peers' memory directly (one copy)")

typedef enum {
#define RESIHP__SETTING_ENUM(id, ...) RESIHP_SETTING_##id,
  RESIHP_SETTINGS_MAP(RESIHP__SETTING_ENUM)
#undef RESIHP__SETTING_ENUM
  RESIHP_SETTING__COUNT
} resihp_setting_id_t;

typedef enum {
  RESIHP_STYPE_BOOL,
  RESIHP_STYPE_INT,
  RESIHP_STYPE_MS,
  RESIHP_STYPE_STR,
  RESIHP_STYPE_ENUM,
} resihp_setting_type_t;

typedef enum {
  RESIHP_SOURCE_DEFAULT,
  RESIHP_SOURCE_ENV,
  RESIHP_SOURCE_OPTION,
} resihp_setting_source_t;

typedef struct {
  const char *key;
  const char *env;
  resihp_setting_type_t type;
  long def, min, max;
  const char *extra; /* ENUM: choices; STR: default string */
  const char *help;
} resihp_setting_desc_t;

/* Plain value struct: callers may keep it on the stack and copy it. */
typedef struct resihp_settings {
  long value[RESIHP_SETTING__COUNT];
  char str[RESIHP_SETTING__COUNT][RESIHP_SETTING_STR_MAX];
  unsigned char source[RESIHP_SETTING__COUNT];
} resihp_settings_t;

const resihp_setting_desc_t *resihp_setting_desc(resihp_setting_id_t id);

/* Find a setting by key ("detect-timeout") or env name; -1 if unknown. */
int resihp_setting_lookup(const char *name);

/* Fill with defaults. */
void resihp_settings_init(resihp_settings_t *s);

/* Set one setting from text. On failure returns RESIHP_EINVAL/ERANGE,
 * leaves s unchanged and, if err is not NULL, writes a sentence for the user
 * (naming the key, the bad value and what is accepted) into err. */
int resihp_settings_set(resihp_settings_t *s, const char *key,
                        const char *value, resihp_setting_source_t source,
                        char *err, size_t errlen);

/* Parse "key=value,key=value" (the --resilient=OPTS form). Empty string and
 * NULL are valid and change nothing. All or nothing: on failure s is
 * unchanged. A key given twice is an error. */
int resihp_settings_parse_opts(resihp_settings_t *s, const char *opts,
                               char *err, size_t errlen);

/* Apply every RESIHP_* variable present in the environment. All or nothing. */
int resihp_settings_load_env(resihp_settings_t *s, char *err, size_t errlen);

long resihp_settings_get(const resihp_settings_t *s, resihp_setting_id_t id);
const char *resihp_settings_get_str(const resihp_settings_t *s,
                                    resihp_setting_id_t id);

/* Canonical text of a value ("1000", "yes", "tcp"). Returns buf. */
const char *resihp_settings_format(const resihp_settings_t *s,
                                   resihp_setting_id_t id, char *buf,
                                   size_t len);

/* Process-wide settings, read from the environment once on first use. An
 * invalid variable is reported through resihp_log and that setting keeps its
 * default (the library must not abort a training run over a typo). */
const resihp_settings_t *resihp_settings_global(void);

#ifdef __cplusplus
}
#endif
#endif /* RESIHP_SETTINGS_H */
