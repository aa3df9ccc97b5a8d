/* SPDX-License-Identifier: BSD-3-Clause */
/* Parsing and printing of fault injection plans (see inject.h). */
#include "config.h"

#include "inject.h"

#include <resihp/error.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kinds[] = {"kill-rank", "kill-node", "hang-rank"};

const char *resihp__inject_kind_name(resihp__inj_kind_t k) {
  return (unsigned)k < 3 ? kinds[k] : "?";
}

int resihp__inject_kind_lookup(const char *name) {
  for (int i = 0; i < 3; i++)
    if (!strcmp(name, kinds[i]))
      return i;
  return -1;
}

static int bad(char *err, size_t errlen, const char *item, const char *why) {
  if (err && errlen)
    snprintf(err, errlen,
             "bad fault injection '%s': %s (expected KIND:REPLICA@STEP or "
             "KIND:REPLICA.RANK@STEP with KIND kill-rank|kill-node|hang-rank, "
             "STEP a step number or 'catchup', items separated by ',')",
             item, why);
  return RESIHP_EINVAL;
}

int resihp__inject_parse(const char *spec, resihp__inject_t *out, int max,
                         int *n, char *err, size_t errlen) {
  *n = 0;
  if (!spec || !*spec)
    return 0;
  int cnt = 0;
  const char *p = spec;
  while (*p) {
    size_t len = strcspn(p, ",");
    char item[128];
    if (len == 0 || len >= sizeof(item))
      return bad(err, errlen, len ? "(too long)" : "(empty)",
                 len ? "item too long" : "empty item");
    memcpy(item, p, len);
    item[len] = '\0';
    p += len;
    if (*p == ',') {
      p++;
      if (!*p)
        return bad(err, errlen, spec, "trailing ','");
    }
    char *colon = strchr(item, ':'), *at = strchr(item, '@');
    if (!colon || !at || at < colon)
      return bad(err, errlen, item, "missing ':' or '@'");
    *colon = '\0';
    *at = '\0';
    int k = resihp__inject_kind_lookup(item);
    *colon = ':';
    *at = '@';
    if (k < 0)
      return bad(err, errlen, item, "unknown kind");
    char *end;
    errno = 0;
    long r = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (end != at && *end != '.') || errno || r < 0 ||
        r > 1000000)
      return bad(err, errlen, item, "REPLICA must be a number >= 0");
    long rank = -1;
    if (*end == '.') {
      const char *rs = end + 1;
      errno = 0;
      rank = strtol(rs, &end, 10);
      if (end == rs || end != at || errno || rank < 0 || rank > 1000000)
        return bad(err, errlen, item, "RANK must be a number >= 0");
    }
    long s;
    if (!strcmp(at + 1, "catchup")) {
      s = RESIHP__INJECT_CATCHUP;
    } else {
      errno = 0;
      s = strtol(at + 1, &end, 10);
      if (end == at + 1 || *end || errno || s < 0)
        return bad(err, errlen, item,
                   "STEP must be a number >= 0 or 'catchup'");
    }
    if (cnt >= max)
      return bad(err, errlen, item, "too many items");
    out[cnt].kind = (resihp__inj_kind_t)k;
    out[cnt].replica = (int)r;
    out[cnt].rank = (int)rank;
    out[cnt].step = s;
    cnt++;
  }
  *n = cnt;
  return 0;
}

char *resihp__inject_format(const resihp__inject_t *v, int n, char *buf,
                            size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && off < len; i++) {
    char st[24];
    if (v[i].step == RESIHP__INJECT_CATCHUP)
      snprintf(st, sizeof(st), "catchup");
    else
      snprintf(st, sizeof(st), "%ld", v[i].step);
    char rk[16] = "";
    if (v[i].rank >= 0)
      snprintf(rk, sizeof(rk), ".%d", v[i].rank);
    int w = snprintf(buf + off, len - off, "%s%s:%d%s@%s", i ? "," : "",
                     resihp__inject_kind_name(v[i].kind), v[i].replica, rk, st);
    if (w < 0)
      break;
    off += (size_t)w;
  }
  return buf;
}
