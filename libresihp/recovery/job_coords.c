/* SPDX-License-Identifier: BSD-3-Clause */
/* Where the coordinator is: the primary's address and a standby's on
 * another node of the allocation (see job_internal.h).
 *
 * RESIHP_COORDINATOR is "ep" or "ep/ep" (at most RESIHP__JOB_COORDS
 * addresses, the wire's list syntax), and the coordinator says the
 * current list again after every WELCOME and whenever its standby
 * changes (COORDS eps=ep/ep). A leader whose link fails dials the
 * addresses in turn from the one it used last (job_link.c): the keeper's
 * failover comes back on the same address, a standby's takeover on its
 * own. */
#include "config.h"

#include "job_internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdio.h>
#include <string.h>

int resihp__job_set_coords(resihp_job_t *j, const char *list) {
  char eps[RESIHP__JOB_COORDS][RESIHP__JOB_EP_MAX];
  int n = 1;
  for (const char *p = list; *p; p++)
    n += *p == '/';
  if (!*list || n > RESIHP__JOB_COORDS ||
      !resihp__wire_list_ok(list, n, RESIHP__JOB_EP_MAX))
    return RESIHP_EINVAL;
  for (int i = 0; i < n; i++)
    if (resihp__wire_list_item(list, i, eps[i], sizeof(eps[i])) ||
        !strchr(eps[i], ':'))
      return RESIHP_EINVAL;
  /* the address in use keeps its place when it is still listed */
  int at = 0;
  for (int i = 0; i < n && j->ncoords; i++)
    if (!strcmp(eps[i], j->coords[j->coord_at]))
      at = i;
  memcpy(j->coords, eps, sizeof(eps));
  j->ncoords = n;
  j->coord_at = at;
  return 0;
}

void resihp__job_on_coords(resihp_job_t *j, const char *line) {
  char list[RESIHP__JOB_COORDS * RESIHP__JOB_EP_MAX];
  if (resihp__wire_get(line, "eps", list, sizeof(list)) ||
      resihp__job_set_coords(j, list)) {
    resihp_log(RESIHP_LOG_WARN, "job",
               "replica %d: ignoring the coordinator's list of addresses "
               "'%.80s'",
               j->replica, line);
    return;
  }
  resihp_log(RESIHP_LOG_DEBUG, "job", "replica %d: coordinator at %s",
             j->replica, list);
}

const char *resihp__job_coord_ep(const resihp_job_t *j) {
  return j->coords[j->coord_at];
}

void resihp__job_coord_next(resihp_job_t *j) {
  if (j->ncoords > 0)
    j->coord_at = (j->coord_at + 1) % j->ncoords;
}
