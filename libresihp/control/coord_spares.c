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

/* SPARE node=N status=pass|fail summary=TEXT from a spare agent. */
void resihp__coord_on_spare(resihp__coord_t *c, int k, const char *msg) {
  char node[64] = "", status[8] = "", summary[400] = "", line[128];
  if (resihp__wire_get(msg, "node", node, sizeof(node)) ||
      !resihp__wire_token_ok(node, sizeof(node)) ||
      resihp__wire_get(msg, "status", status, sizeof(status)) ||
      (strcmp(status, "pass") && strcmp(status, "fail")) ||
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
    sp->state = pass ? RESIHP__SPARE_HEALTHY : RESIHP__SPARE_FAILED_PROBE;
    snprintf(sp->summary, sizeof(sp->summary), "%s",
             pass || !strcmp(summary, "-") ? "" : summary);
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
