/* SPDX-License-Identifier: BSD-3-Clause */
/* Parsing and printing of fault injection plans (see inject.h). */
#include "config.h"

#include "inject.h"

#include <resihp/error.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kinds[] = {"kill-rank", "kill-node", "hang-rank",
                                    "slow-rank"};
enum { NKINDS = sizeof(kinds) / sizeof(kinds[0]) };

const char *resihp__inject_kind_name(resihp__inj_kind_t k) {
  return (unsigned)k < NKINDS ? kinds[k] : "?";
}

int resihp__inject_kind_lookup(const char *name) {
  for (int i = 0; i < NKINDS; i++)
    if (!strcmp(name, kinds[i]))
      return i;
  return -1;
}

static int bad(char *err, size_t errlen, const char *item, const char *why) {
  if (err && errlen)
    snprintf(err, errlen,
             "bad fault injection '%s': %s (expected KIND:REPLICA@STEP or "
             "KIND:REPLICA.RANK@STEP with KIND kill-rank|kill-node|hang-rank, "
             "STEP a step number, 'catchup' or 'setup', or "
             "slow-rank:REPLICA[.RANK]@STEPxF[:D] with F in (1, 100] and D "
             ">= 1 steps; items separated by ',')",
             item, why);
  return RESIHP_EINVAL;
}

/* Decimal digits at *p into *v, which stops growing past hi (no overflow
 * however many digits); the number of digits read. */
static int digits(const char **p, long *v, long hi) {
  int n = 0;
  *v = 0;
  for (; **p >= '0' && **p <= '9'; (*p)++, n++)
    if (*v <= hi)
      *v = *v * 10 + (**p - '0');
  return n;
}

/* slow-rank's "STEPxF[:D]"; NULL, or why it is refused. Parsed by hand,
 * not by strtod, so that the locale cannot change what F means. */
static const char *parse_slow(const char *p, long *step, int *milli,
                              long *steps) {
  long v, frac = 0;
  if (!digits(&p, &v, 1000000000000L) || v > 1000000000000L)
    return "STEP must be a number >= 0 (slow-rank has no 'catchup' or "
           "'setup')";
  *step = v;
  if (*p == 'x')
    p++;
  else if (!strncmp(p, "\xc3\x97", 2)) /* U+00D7, the multiplication sign */
    p += 2;
  else
    return "slow-rank needs a factor: STEPxF, e.g. 10x2.5";
  if (!digits(&p, &v, 1000))
    return "F must be a decimal number, e.g. 1.5";
  if (*p == '.') {
    p++;
    int nf = digits(&p, &frac, 1000);
    if (nf < 1 || nf > 3)
      return "F must have 1 to 3 decimals after its '.'";
    for (; nf < 3; nf++)
      frac *= 10;
  }
  if (v > 1000 || v * 1000 + frac < RESIHP__INJECT_SLOW_MIN_MILLI ||
      v * 1000 + frac > RESIHP__INJECT_SLOW_MAX_MILLI)
    return "F must be more than 1 and at most 100";
  *milli = (int)(v * 1000 + frac);
  *steps = 0;
  if (*p == ':') {
    p++;
    if (!digits(&p, &v, RESIHP__INJECT_SLOW_MAX_STEPS) || v < 1 ||
        v > RESIHP__INJECT_SLOW_MAX_STEPS)
      return "D must be a number of steps from 1 to 1000000000";
    *steps = v;
  }
  if (*p)
    return "junk after slow-rank's F[:D]";
  return NULL;
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
    int milli = 0;
    long steps = 0;
    if (k == RESIHP__INJ_SLOW_RANK) {
      const char *why = parse_slow(at + 1, &s, &milli, &steps);
      if (why)
        return bad(err, errlen, item, why);
    } else if (!strcmp(at + 1, "catchup")) {
      s = RESIHP__INJECT_CATCHUP;
    } else if (!strcmp(at + 1, "setup")) {
      s = RESIHP__INJECT_SETUP;
    } else {
      errno = 0;
      s = strtol(at + 1, &end, 10);
      if (end == at + 1 || *end || errno || s < 0)
        return bad(err, errlen, item,
                   "STEP must be a number >= 0, 'catchup' or 'setup'");
    }
    if (cnt >= max)
      return bad(err, errlen, item, "too many items");
    out[cnt].kind = (resihp__inj_kind_t)k;
    out[cnt].replica = (int)r;
    out[cnt].rank = (int)rank;
    out[cnt].step = s;
    out[cnt].factor_milli = milli;
    out[cnt].steps = steps;
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
    else if (v[i].step == RESIHP__INJECT_SETUP)
      snprintf(st, sizeof(st), "setup");
    else
      snprintf(st, sizeof(st), "%ld", v[i].step);
    char rk[16] = "", slow[48] = "";
    if (v[i].rank >= 0)
      snprintf(rk, sizeof(rk), ".%d", v[i].rank);
    if (v[i].kind == RESIHP__INJ_SLOW_RANK) {
      /* F with its decimals, trailing zeros dropped: 2, 2.5, 1.125 */
      int m = v[i].factor_milli, nd = 3, frac = m % 1000;
      for (; nd > 0 && frac % 10 == 0; nd--)
        frac /= 10;
      int w = nd ? snprintf(slow, sizeof(slow), "x%d.%0*d", m / 1000, nd, frac)
                 : snprintf(slow, sizeof(slow), "x%d", m / 1000);
      if (v[i].steps > 0 && w > 0 && (size_t)w < sizeof(slow))
        snprintf(slow + w, sizeof(slow) - (size_t)w, ":%ld", v[i].steps);
    }
    int w = snprintf(buf + off, len - off, "%s%s:%d%s@%s%s", i ? "," : "",
                     resihp__inject_kind_name(v[i].kind), v[i].replica, rk, st,
                     slow);
    if (w < 0)
      break;
    off += (size_t)w;
  }
  return buf;
}
