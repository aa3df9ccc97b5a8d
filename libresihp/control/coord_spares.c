/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator's spare registry: the spare nodes the launcher owns,
 * their registrations (SPARE from a spare agent, answered SPARE_OK) and the
 * launcher's verdicts (unreachable, promoted). See coordinator.h for the
 * rules: one registration per node, a bad spare stays bad.
 */
#include "config.h"

#include "../transport/mesh.h"
#include "coord_internal.h"

#include <resihp/error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static spare_t *find_spare(const resihp__coord_t *c, const char *node) {
  for (int i = 0; i < c->nspares; i++)
    if (!strcmp(c->spares[i].node, node))
      return &c->spares[i];
  return NULL;
}

const char *resihp__spare_state_name(int state) {
  switch (state) {
  case RESIHP__SPARE_CHECKING:
    return "checking";
  case RESIHP__SPARE_HEALTHY:
    return "registered-healthy";
  case RESIHP__SPARE_FAILED_PROBE:
    return "failed-probe";
  case RESIHP__SPARE_UNREACHABLE:
    return "unreachable";
  case RESIHP__SPARE_PROMOTED:
    return "promoted";
  case RESIHP__SPARE_SUSPECT:
    return "suspect";
  }
  return "?";
}

int resihp__coord_spare_add(resihp__coord_t *c, const char *node) {
  if (find_spare(c, node))
    return 0;
  if (c->nspares == RESIHP__COORD_MAX_SPARES || strlen(node) >= 64)
    return RESIHP_ENOSPC;
  if (c->nspares == c->capspares) {
    int n = c->capspares ? 2 * c->capspares : 16;
    spare_t *x = realloc(c->spares, sizeof(spare_t) * (size_t)n);
    if (!x)
      return RESIHP_ENOMEM;
    c->spares = x;
    c->capspares = n;
  }
  spare_t *sp = &c->spares[c->nspares++];
  resihp__coord_dirty(c);
  memset(sp, 0, sizeof(*sp));
  snprintf(sp->node, sizeof(sp->node), "%s", node);
  sp->replica = -1;
  return 0;
}

int resihp__coord_spare_state(const resihp__coord_t *c, const char *node,
                              long *registrations) {
  const spare_t *sp = find_spare(c, node);
  if (registrations)
    *registrations = sp ? sp->registrations : 0;
  return sp ? sp->state : RESIHP__SPARE_CHECKING;
}

static int spare_bad(int state) {
  return state == RESIHP__SPARE_FAILED_PROBE ||
         state == RESIHP__SPARE_UNREACHABLE;
}

void resihp__coord_spare_mark(resihp__coord_t *c, const char *node, int state,
                              int replica, const char *why) {
  if (resihp__coord_spare_add(c, node))
    return;
  resihp__coord_dirty(c);
  spare_t *sp = find_spare(c, node);
  if (spare_bad(sp->state))
    return;
  sp->state = state;
  sp->replica = replica;
  if (why)
    snprintf(sp->summary, sizeof(sp->summary), "%s", why);
  if (spare_bad(state))
    logc(RESIHP_LOG_WARN, "spare %s is %s (%s)", node,
         resihp__spare_state_name(state), why ? why : "");
}

long resihp__coord_burnin_bytes(const resihp__coord_t *c) {
  for (int r = 0; r < c->R; r++)
    if (c->reps[r].burnin.bytes > 0)
      return c->reps[r].burnin.bytes;
  return 0;
}

int resihp__coord_burnin_ref(const resihp__coord_t *c, resihp__burnin_t *ref) {
  memset(ref, 0, sizeof(*ref));
  resihp__burnin_t *v = malloc(sizeof(*v) * (size_t)(c->R > 0 ? c->R : 1));
  if (!v)
    return 0; /* judged at the next look */
  int n = 0;
  for (int r = 0; r < c->R; r++)
    if (c->reps[r].burnin.bytes > 0)
      v[n++] = c->reps[r].burnin;
  int have = resihp__burnin_reference(v, n, ref);
  free(v);
  return have;
}

/* Judge sp's burn-in against the replicas' median, if it has one not
 * judged yet and there is a reference: a slow or failed one makes a
 * healthy spare suspect. O(R) per call: once per registration, or per
 * spare looked at for a replacement. */
static void judge(resihp__coord_t *c, spare_t *sp) {
  if (sp->judged || sp->state != RESIHP__SPARE_HEALTHY ||
      (!sp->burnin.bytes && !sp->burnin.failed))
    return;
  resihp__burnin_t ref;
  int have = resihp__coord_burnin_ref(c, &ref);
  char why[200];
  int verdict =
      resihp__burnin_judge(&sp->burnin, have ? &ref : NULL,
                           c->o.burnin_ratio > 0 ? c->o.burnin_ratio
                                                 : RESIHP__BURNIN_MAX_RATIO,
                           why, sizeof(why));
  if (verdict == RESIHP__BURNIN_UNJUDGED)
    return;
  sp->judged = 1;
  resihp__coord_dirty(c);
  if (verdict == RESIHP__BURNIN_PASS) {
    logc(RESIHP_LOG_DEBUG, "spare %s: %s", sp->node, why);
    return;
  }
  sp->state = RESIHP__SPARE_SUSPECT;
  snprintf(sp->summary, sizeof(sp->summary), "%s", why);
  logc(RESIHP_LOG_WARN,
       "spare %s is suspect (%s): not promoted, checked "
       "again later",
       sp->node, why);
}

int resihp__coord_spare_slow_only(const resihp__coord_t *c, const char *node) {
  const spare_t *sp = find_spare(c, node);
  return sp && sp->state == RESIHP__SPARE_SUSPECT && sp->burnin.bytes > 0 &&
         !sp->burnin.failed;
}

const char *resihp__coord_spare_summary(const resihp__coord_t *c,
                                        const char *node) {
  const spare_t *sp = find_spare(c, node);
  return sp ? sp->summary : "";
}

int resihp__coord_spare_judge(resihp__coord_t *c, const char *node) {
  spare_t *sp = find_spare(c, node);
  if (!sp)
    return RESIHP__SPARE_CHECKING;
  judge(c, sp);
  return sp->state;
}

/* SPARE node=N status=pass|fail [burnin=B:C:A|fail] summary=TEXT from a
 * spare agent. */
void resihp__coord_on_spare(resihp__coord_t *c, int k, const char *msg) {
  char node[64] = "", status[8] = "", summary[400] = "", line[128], bi[64];
  resihp__burnin_t burnin = {0};
  int birc = resihp__wire_get(msg, "burnin", bi, sizeof(bi));
  if (resihp__wire_get(msg, "node", node, sizeof(node)) ||
      !resihp__wire_token_ok(node, sizeof(node)) ||
      resihp__wire_get(msg, "status", status, sizeof(status)) ||
      (strcmp(status, "pass") && strcmp(status, "fail")) ||
      (birc && birc != RESIHP_ENOENT) ||
      (!birc && resihp__burnin_parse(bi, &burnin)) ||
      resihp__coord_spare_add(c, node)) {
    resihp__coord_refuse(c, k, "bad-spare", 1, msg);
    return;
  }
  resihp__wire_get_rest(msg, "summary", summary, sizeof(summary));
  spare_t *sp = find_spare(c, node);
  sp->registrations++;
  int pass = !strcmp(status, "pass");
  /* a bad spare stays bad; a promoted one belongs to its replica */
  if (!spare_bad(sp->state) && sp->state != RESIHP__SPARE_PROMOTED) {
    /* a suspect spare is burned in again: it may be healthy now */
    sp->state = pass ? RESIHP__SPARE_HEALTHY : RESIHP__SPARE_FAILED_PROBE;
    snprintf(sp->summary, sizeof(sp->summary), "%s",
             pass || !strcmp(summary, "-") ? "" : summary);
    sp->burnin = burnin;
    if (burnin.failed && strcmp(summary, "-"))
      snprintf(sp->burnin.why, sizeof(sp->burnin.why), "%s", summary);
    sp->judged = 0;
    judge(c, sp);
  }
  logc(pass ? RESIHP_LOG_DEBUG : RESIHP_LOG_WARN,
       "spare %s registered: probe %s%s%s -> %s", node, status,
       pass ? "" : ": ", pass ? "" : summary,
       resihp__spare_state_name(sp->state));
  snprintf(line, sizeof(line), "SPARE_OK state=%s",
           resihp__spare_state_name(sp->state));
  resihp__wire_send(&c->conns[k].w, line, resihp__now_ms() + 1000);
  if (c->o.on_spare)
    c->o.on_spare(c->o.ud, node, sp->state, sp->summary);
}
