/* SPDX-License-Identifier: BSD-3-Clause */
/* PMIx wire-up of a replica's ranks (see pmix_wireup.h). */
#include "config.h"

#include "pmix_wireup.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <pmix.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY "resihp.leader"

static pmix_proc_t me;
static int inited;

int resihp__pmix_init(int *rank, int *size) {
  if (!getenv("PMIX_RANK"))
    return RESIHP_ENOTSUP;
  if (!inited) {
    pmix_status_t st = PMIx_Init(&me, NULL, 0);
    if (st != PMIX_SUCCESS) {
      resihp_log(RESIHP_LOG_WARN, "job", "PMIx_Init failed: %s",
                 PMIx_Error_string(st));
      return RESIHP_EIO;
    }
    inited = 1;
  }
  pmix_proc_t wild;
  PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t *v = NULL;
  pmix_status_t st = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &v);
  if (st != PMIX_SUCCESS || !v) {
    resihp_log(RESIHP_LOG_WARN, "job", "PMIx: no job size: %s",
               PMIx_Error_string(st));
    return RESIHP_EIO;
  }
  *size = (int)v->data.uint32;
  *rank = (int)me.rank;
  PMIX_VALUE_RELEASE(v);
  return 0;
}

/* The wire-up is over: this rank is no PMIx client any more (see
 * pmix_wireup.h). */
static void finish(void) {
  pmix_status_t st = PMIx_Finalize(NULL, 0);
  if (st != PMIX_SUCCESS)
    resihp_log(RESIHP_LOG_WARN, "job", "PMIx_Finalize: %s",
               PMIx_Error_string(st));
  inited = 0;
}

/* Rank 0's address, put by rank 0, spread by the fence, got by the
 * others. */
static int exchange(int rank, char *ep, size_t cap) {
  pmix_status_t st;
  if (rank == 0) {
    pmix_value_t val;
    val.type = PMIX_STRING;
    val.data.string = ep;
    if ((st = PMIx_Put(PMIX_GLOBAL, KEY, &val)) != PMIX_SUCCESS ||
        (st = PMIx_Commit()) != PMIX_SUCCESS) {
      resihp_log(RESIHP_LOG_WARN, "job", "PMIx_Put/Commit failed: %s",
                 PMIx_Error_string(st));
      return RESIHP_EIO;
    }
  }
  pmix_info_t info[2];
  bool yes = true;
  int timeout = 30;
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
  pmix_proc_t wild;
  PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
  st = PMIx_Fence(&wild, 1, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (st != PMIX_SUCCESS) {
    resihp_log(RESIHP_LOG_WARN, "job", "PMIx_Fence failed: %s",
               PMIx_Error_string(st));
    return RESIHP_EIO;
  }
  if (rank == 0)
    return 0;
  pmix_proc_t leader;
  PMIX_LOAD_PROCID(&leader, me.nspace, 0);
  pmix_value_t *v = NULL;
  st = PMIx_Get(&leader, KEY, NULL, 0, &v);
  if (st != PMIX_SUCCESS || !v || v->type != PMIX_STRING) {
    resihp_log(RESIHP_LOG_WARN, "job", "PMIx_Get of the leader failed: %s",
               PMIx_Error_string(st));
    if (v)
      PMIX_VALUE_RELEASE(v);
    return RESIHP_EIO;
  }
  snprintf(ep, cap, "%s", v->data.string);
  PMIX_VALUE_RELEASE(v);
  return 0;
}

int resihp__pmix_leader_ep(int rank, char *ep, size_t cap) {
  if (!inited)
    return RESIHP_ESTATE;
  int rc = exchange(rank, ep, cap);
  finish(); /* whatever the outcome: no PMIx after the wire-up */
  return rc;
}
