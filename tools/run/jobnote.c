/* SPDX-License-Identifier: BSD-3-Clause */
/* See jobnote.h. */
#include "config.h"

#include "jobnote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARK "resihp:"

/* Text that reaches slurmctld: printable ASCII, one line, no quotes
 * (scontrol strips them), cut at max bytes; spaces at the ends go. */
static void clean(const char *in, char *out, size_t len, size_t max) {
  size_t o = 0;
  if (len == 0)
    return;
  for (size_t i = 0; in && in[i] && o + 1 < len && o < max; i++) {
    unsigned char ch = (unsigned char)in[i];
    out[o++] = ch < ' ' || ch >= 0x7f || ch == '"' || ch == '\'' ? '?' : ch;
  }
  while (o > 0 && out[o - 1] == ' ')
    o--;
  out[o] = '\0';
  size_t s = strspn(out, " ");
  if (s)
    memmove(out, out + s, o - s + 1);
}

size_t resihp__jobnote_text(const char *user, const resihp__jobnote_t *n,
                            char *out, size_t len) {
  char u[RESIHP__JOBNOTE_USER_MAX + 1], state[200], last[200], body[600];
  clean(user, u, sizeof(u), RESIHP__JOBNOTE_USER_MAX);
  clean(n->state ? n->state : "running", state, sizeof(state), 160);
  clean(n->last, last, sizeof(last), 160);
  int b = snprintf(body, sizeof(body),
                   MARK " %s at step %ld; failures %d%s%s%s; replacements "
                        "%d; nodes bad %d",
                   state, n->step, n->failures, last[0] ? " (last: " : "",
                   last, last[0] ? ")" : "", n->replacements, n->nodes_bad);
  if (b > 0 && n->swaps && (size_t)b < sizeof(body))
    b += snprintf(body + b, sizeof(body) - (size_t)b, "; slow swapped %d",
                  n->swaps);
  if (b > 0 && n->dropped && (size_t)b < sizeof(body))
    b += snprintf(body + b, sizeof(body) - (size_t)b,
                  "; replicas dropped %d", n->dropped);
  if (len == 0)
    return 0;
  int w = snprintf(out, len, "%s%s%s", u, u[0] ? " | " : "", body);
  size_t cap = len - 1 < RESIHP__JOBNOTE_MAX ? len - 1 : RESIHP__JOBNOTE_MAX;
  size_t l = w < 0 ? 0 : (size_t)w;
  if (l > cap) {
    l = cap;
    out[l] = '\0';
  }
  return l;
}

void resihp__jobnote_parse(const char *comment, char *user, size_t ulen,
                           int *failures) {
  *failures = 0;
  if (ulen)
    user[0] = '\0';
  if (!comment || !strcmp(comment, "(null)"))
    return;
  const char *ours = strstr(comment, MARK);
  size_t ul = ours ? (size_t)(ours - comment) : strlen(comment);
  /* our separator before MARK goes with it */
  if (ours && ul >= 3 && !strncmp(ours - 3, " | ", 3))
    ul -= 3;
  char tmp[RESIHP__JOBNOTE_USER_MAX + 1];
  size_t tl = ul < RESIHP__JOBNOTE_USER_MAX ? ul : RESIHP__JOBNOTE_USER_MAX;
  memcpy(tmp, comment, tl);
  tmp[tl] = '\0';
  clean(tmp, user, ulen, RESIHP__JOBNOTE_USER_MAX);
  const char *f = ours ? strstr(ours, "; failures ") : NULL;
  if (f) {
    long v = strtol(f + strlen("; failures "), NULL, 10);
    *failures = v > 0 && v < 1000000 ? (int)v : 0;
  }
}
