/* SPDX-License-Identifier: BSD-3-Clause */
/* The replicas' vouches for a standby's early takeover, and the primary's
 * lease (vouch.h). Pure logic: the standby's and the primary's loops
 * (tools/run/standby.c, primary.c) do the talking. */
#include "config.h"

#include "vouch.h"

#include "../transport/sha256.h"
#include "coordinator.h"
#include "wire.h"

#include <resihp/error.h>

#include <stdlib.h>
#include <string.h>

/* Scheduling delays and clock rates between the primary's host and the
 * standby's: the standby waits this much beyond the primary's lease. */
#define WAIT_MARGIN_MS 1000

struct resihp__vouch {
  int R;
  uint32_t term;
  int nmembers;
  int *members;                                /* sorted */
  char (*creds)[RESIHP__VOUCH_CRED_HEX + 1];   /* R */
  char *vouched;                               /* R */
  int count;
  int64_t reached;
};

int resihp__vouch_need(int members) {
  int m = members / 2 + 1;
  return m < 2 ? 2 : m;
}

int resihp__vouch_lease(int members, int heard) {
  return members - heard < resihp__vouch_need(members);
}

int resihp__vouch_wait_ms(int silence_ms) {
  return silence_ms + WAIT_MARGIN_MS;
}

int resihp__vouch_parse(const char *line, int *replica,
                        char cred[RESIHP__VOUCH_CRED_HEX + 1], uint32_t *term) {
  long r, again, t = 0;
  if (strncmp(line, "HELLO ", 6) ||
      resihp__wire_get_range(line, "again", 1, 1, &again) ||
      resihp__wire_get_range(line, "replica", 0, RESIHP__COORD_MAX_REPLICAS - 1,
                             &r) ||
      resihp__wire_get(line, "cred", cred, RESIHP__VOUCH_CRED_HEX + 1) ||
      strlen(cred) != RESIHP__VOUCH_CRED_HEX ||
      strspn(cred, "0123456789abcdef") != RESIHP__VOUCH_CRED_HEX)
    return RESIHP_EPROTO;
  int rc = resihp__wire_get_range(line, "term", 0, UINT32_MAX - 1, &t);
  if (rc && rc != RESIHP_ENOENT)
    return RESIHP_EPROTO;
  *replica = (int)r;
  *term = (uint32_t)t;
  return 0;
}

int resihp__vouch_create(const char *snap, size_t len, int replicas,
                         resihp__vouch_t **out) {
  if (replicas < 1 || replicas > RESIHP__COORD_MAX_REPLICAS)
    return RESIHP_EINVAL;
  resihp__vouch_t *v = calloc(1, sizeof(*v));
  if (!v)
    return RESIHP_ENOMEM;
  v->R = replicas;
  v->members = malloc(sizeof(int) * (size_t)replicas);
  v->creds = malloc(sizeof(*v->creds) * (size_t)replicas);
  v->vouched = calloc((size_t)replicas, 1);
  int rc = !v->members || !v->creds || !v->vouched ? RESIHP_ENOMEM : 0;
  if (!rc)
    rc = resihp__coord_snapshot_voters(snap, len, replicas, &v->term,
                                       v->members, &v->nmembers, v->creds);
  if (rc) {
    resihp__vouch_destroy(v);
    return rc;
  }
  *out = v;
  return 0;
}

void resihp__vouch_destroy(resihp__vouch_t *v) {
  if (!v)
    return;
  free(v->members);
  free(v->creds);
  free(v->vouched);
  free(v);
}

uint32_t resihp__vouch_term(const resihp__vouch_t *v) { return v->term; }

int resihp__vouch_members(const resihp__vouch_t *v) { return v->nmembers; }

static int is_member(const resihp__vouch_t *v, int r) {
  int lo = 0, hi = v->nmembers;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (v->members[mid] < r)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < v->nmembers && v->members[lo] == r;
}

int resihp__vouch_add(resihp__vouch_t *v, int replica, const char *cred,
                      int64_t now_ms) {
  if (replica < 0 || replica >= v->R || !is_member(v, replica) ||
      !v->creds[replica][0] || strlen(cred) != RESIHP__VOUCH_CRED_HEX ||
      resihp__ct_memcmp(cred, v->creds[replica], RESIHP__VOUCH_CRED_HEX))
    return RESIHP_EAUTH;
  if (v->vouched[replica])
    return 0;
  v->vouched[replica] = 1;
  if (++v->count == resihp__vouch_need(v->nmembers))
    v->reached = now_ms;
  return 1;
}

int resihp__vouch_has(const resihp__vouch_t *v, int replica) {
  return v && replica >= 0 && replica < v->R && v->vouched[replica];
}

int resihp__vouch_count(const resihp__vouch_t *v) { return v->count; }

int64_t resihp__vouch_reached(const resihp__vouch_t *v) { return v->reached; }

int resihp__vouch_ready(const resihp__vouch_t *v, int64_t lost_ms,
                        int64_t now_ms, int wait_ms) {
  if (!v || !v->reached || !lost_ms)
    return 0;
  int64_t from = v->reached > lost_ms ? v->reached : lost_ms;
  return now_ms - from >= wait_ms;
}

void resihp__vouch_clear(resihp__vouch_t *v) {
  if (!v)
    return;
  memset(v->vouched, 0, (size_t)v->R);
  v->count = 0;
  v->reached = 0;
}
