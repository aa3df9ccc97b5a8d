/* SPDX-License-Identifier: BSD-3-Clause */
/* See shrink_rec.h. */
#include "config.h"

#include "shrink_rec.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int resihp__run_shrink_format(int r, const resihp__run_shrink_t *s, char *buf,
                              size_t cap) {
  int nwas = s->nwas < 0                          ? 0
             : s->nwas > RESIHP__RUN_SHRINK_NODES ? RESIHP__RUN_SHRINK_NODES
                                                  : s->nwas;
  size_t at = 0;
  int n = snprintf(buf, cap, "S %d %d %llu %" PRId64 " %d", r, s->killed,
                   s->lost, s->wait, nwas);
  for (int i = 0; n >= 0 && (at += (size_t)n) < cap && i < nwas; i++)
    n = snprintf(buf + at, cap - at, " %d", s->was[i]);
  if (n < 0 || at + 2 > cap)
    return -1;
  buf[at++] = '\n';
  buf[at] = '\0';
  return (int)at;
}

/* One ' ' then a decimal number in [lo, hi] at *q: 0 and *q past it. */
static int field(const char **q, long long lo, long long hi, long long *v) {
  const char *p = *q;
  if (*p++ != ' ' || *p < '0' || *p > '9')
    return -1;
  errno = 0;
  char *e;
  long long x = strtoll(p, &e, 10);
  if (errno || e == p || x < lo || x > hi)
    return -1;
  *q = e;
  *v = x;
  return 0;
}

int resihp__run_shrink_parse(const char *line, int R, int nnodes, int *r,
                             resihp__run_shrink_t *s) {
  resihp__run_shrink_t t;
  memset(&t, 0, sizeof(t));
  long long rr, killed, wait, nwas, x;
  if (line[0] != 'S')
    return -1;
  const char *q = line + 1;
  if (field(&q, 0, (long long)R - 1, &rr) || field(&q, 0, nnodes, &killed))
    return -1;
  /* the lost ranks: an unsigned 64-bit number */
  if (*q++ != ' ' || *q < '0' || *q > '9')
    return -1;
  errno = 0;
  char *e;
  t.lost = strtoull(q, &e, 10);
  if (errno)
    return -1;
  q = e;
  if (field(&q, 0, INT64_MAX, &wait) ||
      field(&q, 0,
            nnodes < RESIHP__RUN_SHRINK_NODES ? nnodes
                                              : RESIHP__RUN_SHRINK_NODES,
            &nwas))
    return -1;
  for (int i = 0; i < nwas; i++) {
    if (field(&q, 0, (long long)nnodes - 1, &x))
      return -1;
    t.was[i] = (int)x;
  }
  if (*q)
    return -1;
  t.nwas = (int)nwas;
  t.killed = (int)killed;
  t.wait = wait;
  *r = (int)rr;
  *s = t;
  return 0;
}
