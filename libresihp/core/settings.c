/* SPDX-License-Identifier: BSD-3-Clause */
/* The typed settings registry: parsing and validation of every RESIHP_*
 * setting, shared by the SPANK plugin (option strings, plugstack arguments)
 * and the library (environment). Inputs are untrusted: every length is
 * bounded and every value is checked against its type and range. */
#include "config.h"

#include "errbuf.h"

#include <resihp/error.h>
#include <resihp/log.h>
#include <resihp/settings.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const resihp_setting_desc_t table[RESIHP_SETTING__COUNT] = {
#define XX(id, key, env, type, def, min, max, extra, help)                     \
  [RESIHP_SETTING_##id] = {key, env, RESIHP_STYPE_##type, def, min, max, extra, \
                           help},
    RESIHP_SETTINGS_MAP(XX)
#undef XX
};

const resihp_setting_desc_t *resihp_setting_desc(resihp_setting_id_t id) {
  return (unsigned)id < RESIHP_SETTING__COUNT ? &table[id] : NULL;
}

int resihp_setting_lookup(const char *name) {
  if (!name)
    return -1;
  for (int i = 0; i < RESIHP_SETTING__COUNT; i++)
    if (!strcmp(name, table[i].key) || !strcmp(name, table[i].env))
      return i;
  return -1;
}

void resihp_settings_init(resihp_settings_t *s) {
  memset(s, 0, sizeof(*s));
  for (int i = 0; i < RESIHP_SETTING__COUNT; i++) {
    s->value[i] = table[i].def;
    if (table[i].type == RESIHP_STYPE_STR)
      snprintf(s->str[i], sizeof(s->str[i]), "%s", table[i].extra);
    s->source[i] = RESIHP_SOURCE_DEFAULT;
  }
}

/* Index of word in a '|'-separated list, or -1. */
static int choice_index(const char *choices, const char *word) {
  size_t wl = strlen(word);
  int i = 0;
  for (const char *p = choices; *p; i++) {
    const char *bar = strchr(p, '|');
    size_t l = bar ? (size_t)(bar - p) : strlen(p);
    if (l == wl && !strncmp(p, word, l))
      return i;
    if (!bar)
      break;
    p = bar + 1;
  }
  return -1;
}

/* Parse a decimal integer with an optional suffix from units (each entry a
 * suffix and its multiplier). Rejects signs where min >= 0, junk and
 * overflow. */
struct unit {
  const char *suffix;
  long mult;
};

static int parse_scaled(const char *v, const struct unit *units, long *out) {
  if (!*v || isspace((unsigned char)*v))
    return -1;
  errno = 0;
  char *end;
  long n = strtol(v, &end, 10);
  if (end == v || errno == ERANGE)
    return -1;
  long mult = 1;
  if (*end) {
    mult = 0;
    for (const struct unit *u = units; u && u->suffix; u++)
      if (!strcmp(end, u->suffix)) {
        mult = u->mult;
        break;
      }
    if (!mult)
      return -1;
  }
  if (n > LONG_MAX / mult || n < LONG_MIN / mult)
    return -1;
  *out = n * mult;
  return 0;
}

static const struct unit size_units[] = {
    {"k", 1L << 10}, {"K", 1L << 10}, {"KiB", 1L << 10}, {"m", 1L << 20},
    {"M", 1L << 20}, {"MiB", 1L << 20}, {"g", 1L << 30}, {"G", 1L << 30},
    {"GiB", 1L << 30}, {NULL, 0}};
static const struct unit time_units[] = {
    {"ms", 1}, {"s", 1000}, {"m", 60000}, {"min", 60000}, {NULL, 0}};

/* Validate value for setting i; on success store into *num or str. */
static int parse_value(int i, const char *value, long *num, char *str,
                       char *err, size_t errlen) {
  const resihp_setting_desc_t *d = &table[i];
  switch (d->type) {
  case RESIHP_STYPE_BOOL:
    if (!strcmp(value, "yes") || !strcmp(value, "true") ||
        !strcmp(value, "on") || !strcmp(value, "1")) {
      *num = 1;
      return 0;
    }
    if (!strcmp(value, "no") || !strcmp(value, "false") ||
        !strcmp(value, "off") || !strcmp(value, "0")) {
      *num = 0;
      return 0;
    }
    resihp__errf(err, errlen, "%s=%s: not a boolean; use yes or no", d->key, value);
    return RESIHP_EINVAL;
  case RESIHP_STYPE_INT:
  case RESIHP_STYPE_MS: {
    int ms = d->type == RESIHP_STYPE_MS;
    if (parse_scaled(value, ms ? time_units : size_units, num) < 0) {
      if (ms)
        resihp__errf(err, errlen,
            "%s=%s: not a duration; give milliseconds (e.g. %ld) or a unit "
            "(500ms, 2s, 1m)",
            d->key, value, d->def);
      else
        resihp__errf(err, errlen, "%s=%s: not an integer; give a number such as %ld",
            d->key, value, d->def);
      return RESIHP_EINVAL;
    }
    if (*num < d->min || *num > d->max) {
      resihp__errf(err, errlen, "%s=%s: out of range; allowed %ld..%ld%s", d->key,
          value, d->min, d->max, ms ? " ms" : "");
      return RESIHP_ERANGE;
    }
    return 0;
  }
  case RESIHP_STYPE_ENUM: {
    int k = choice_index(d->extra, value);
    if (k < 0 && i == RESIHP_SETTING_DEBUG && value[0] >= '0' &&
        value[0] <= '9' && value[1] == '\0' && value[0] - '0' <= d->max)
      k = value[0] - '0';
    if (k < 0) {
      resihp__errf(err, errlen, "%s=%s: unknown value; choose one of %s", d->key,
          value, d->extra);
      return RESIHP_EINVAL;
    }
    *num = k;
    return 0;
  }
  case RESIHP_STYPE_STR: {
    size_t l = strnlen(value, RESIHP_SETTING_STR_MAX);
    if (l >= RESIHP_SETTING_STR_MAX) {
      resihp__errf(err, errlen, "%s: value longer than %d characters", d->key,
          RESIHP_SETTING_STR_MAX - 1);
      return RESIHP_ERANGE;
    }
    for (size_t k = 0; k < l; k++) {
      unsigned char c = (unsigned char)value[k];
      if (c <= ' ' || c >= 0x7f || c == ',' || c == '=') {
        resihp__errf(err, errlen,
            "%s: value has a forbidden character (position %zu); use "
            "printable ASCII without spaces, ',' or '='",
            d->key, k + 1);
        return RESIHP_EINVAL;
      }
    }
    memcpy(str, value, l + 1);
    return 0;
  }
  }
  return RESIHP_EINVAL;
}

static void list_keys(char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int i = 0; i < RESIHP_SETTING__COUNT && off < len; i++) {
    int n = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", table[i].key);
    if (n < 0)
      break;
    off += (size_t)n;
  }
}

int resihp_settings_set(resihp_settings_t *s, const char *key,
                        const char *value, resihp_setting_source_t source,
                        char *err, size_t errlen) {
  if (!s || !key || !value) {
    resihp__errf(err, errlen, "internal error: NULL argument");
    return RESIHP_EINVAL;
  }
  int i = resihp_setting_lookup(key);
  if (i < 0) {
    char keys[512];
    list_keys(keys, sizeof(keys));
    resihp__errf(err, errlen, "unknown setting '%.64s'; valid keys are: %s", key, keys);
    return RESIHP_EINVAL;
  }
  long num = 0;
  char str[RESIHP_SETTING_STR_MAX];
  int rc = parse_value(i, value, &num, str, err, errlen);
  if (rc)
    return rc;
  if (table[i].type == RESIHP_STYPE_STR)
    memcpy(s->str[i], str, sizeof(str));
  else
    s->value[i] = num;
  s->source[i] = (unsigned char)source;
  return 0;
}

int resihp_settings_parse_opts(resihp_settings_t *s, const char *opts,
                               char *err, size_t errlen) {
  if (!s) {
    resihp__errf(err, errlen, "internal error: NULL settings");
    return RESIHP_EINVAL;
  }
  if (!opts || !*opts)
    return 0;
  size_t len = strnlen(opts, RESIHP_OPTS_MAX);
  if (len >= RESIHP_OPTS_MAX) {
    resihp__errf(err, errlen, "option string longer than %d characters",
        RESIHP_OPTS_MAX - 1);
    return RESIHP_ERANGE;
  }
  char buf[RESIHP_OPTS_MAX];
  memcpy(buf, opts, len + 1);
  resihp_settings_t tmp = *s;
  unsigned char seen[RESIHP_SETTING__COUNT] = {0};
  char *save = NULL;
  if (buf[0] == ',' || buf[len - 1] == ',' || strstr(buf, ",,")) {
    resihp__errf(err, errlen, "empty item in '%.200s'; write key=value[,key=value...]",
        opts);
    return RESIHP_EINVAL;
  }
  for (char *item = strtok_r(buf, ",", &save); item;
       item = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(item, '=');
    const char *value = "yes";
    if (eq) {
      *eq = '\0';
      value = eq + 1;
    }
    int i = resihp_setting_lookup(item);
    if (i >= 0 && !eq && table[i].type != RESIHP_STYPE_BOOL) {
      resihp__errf(err, errlen, "'%s' needs a value; write %s=VALUE", item, item);
      return RESIHP_EINVAL;
    }
    if (i >= 0 && seen[i]) {
      resihp__errf(err, errlen, "'%s' given twice", item);
      return RESIHP_EINVAL;
    }
    int rc = resihp_settings_set(&tmp, item, value, RESIHP_SOURCE_OPTION, err,
                                 errlen);
    if (rc)
      return rc;
    seen[i] = 1;
  }
  *s = tmp;
  return 0;
}

int resihp_settings_load_env(resihp_settings_t *s, char *err, size_t errlen) {
  resihp_settings_t tmp = *s;
  for (int i = 0; i < RESIHP_SETTING__COUNT; i++) {
    const char *v = getenv(table[i].env);
    if (!v)
      continue;
    char why[400];
    int rc = resihp_settings_set(&tmp, table[i].key, v, RESIHP_SOURCE_ENV, why,
                                 sizeof(why));
    if (rc) {
      resihp__errf(err, errlen, "%s: %s", table[i].env, why);
      return rc;
    }
  }
  *s = tmp;
  return 0;
}

long resihp_settings_get(const resihp_settings_t *s, resihp_setting_id_t id) {
  return (unsigned)id < RESIHP_SETTING__COUNT ? s->value[id] : 0;
}

const char *resihp_settings_get_str(const resihp_settings_t *s,
                                    resihp_setting_id_t id) {
  return (unsigned)id < RESIHP_SETTING__COUNT ? s->str[id] : "";
}

const char *resihp_settings_format(const resihp_settings_t *s,
                                   resihp_setting_id_t id, char *buf,
                                   size_t len) {
  if (!len)
    return buf;
  buf[0] = '\0';
  if ((unsigned)id >= RESIHP_SETTING__COUNT)
    return buf;
  const resihp_setting_desc_t *d = &table[id];
  switch (d->type) {
  case RESIHP_STYPE_BOOL:
    snprintf(buf, len, "%s", s->value[id] ? "yes" : "no");
    break;
  case RESIHP_STYPE_INT:
  case RESIHP_STYPE_MS:
    snprintf(buf, len, "%ld", s->value[id]);
    break;
  case RESIHP_STYPE_STR:
    snprintf(buf, len, "%s", s->str[id]);
    break;
  case RESIHP_STYPE_ENUM: {
    const char *p = d->extra;
    for (long k = 0; k < s->value[id] && p; k++) {
      p = strchr(p, '|');
      if (p)
        p++;
    }
    if (p) {
      const char *bar = strchr(p, '|');
      size_t l = bar ? (size_t)(bar - p) : strlen(p);
      snprintf(buf, len, "%.*s", (int)l, p);
    }
    break;
  }
  }
  return buf;
}

static resihp_settings_t global;
static char global_err[512];
static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static atomic_int global_reported;

static void global_load(void) {
  resihp_settings_init(&global);
  /* Apply variables one by one so one typo does not discard the rest; the
   * complaint is logged after pthread_once returns, because logging itself
   * reads these settings. */
  for (int i = 0; i < RESIHP_SETTING__COUNT; i++) {
    const char *v = getenv(table[i].env);
    char why[400];
    if (v && resihp_settings_set(&global, table[i].key, v, RESIHP_SOURCE_ENV,
                                 why, sizeof(why)) &&
        !global_err[0])
      snprintf(global_err, sizeof(global_err),
               "ignoring %s (default kept): %s", table[i].env, why);
  }
}

const resihp_settings_t *resihp_settings_global(void) {
  pthread_once(&global_once, global_load);
  if (global_err[0] && !atomic_exchange(&global_reported, 1))
    resihp_log(RESIHP_LOG_WARN, "settings", "%s", global_err);
  return &global;
}
