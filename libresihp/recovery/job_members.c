/* SPDX-License-Identifier: BSD-3-Clause */
/* A shard group's member list, whole or as a change (job_members.h). */
#include "config.h"

#include "job_members.h"

#include <resihp/error.h>

#include <stdlib.h>
#include <string.h>

#define MAX_REPLICA_ID RESIHP__JOB_MAX_REPLICA_ID

/* A list "r@a/b/...,..." (ascending replica ids): the ids, and this
 * rank's shard address of each. */
int resihp__job_members_parse(const char *list, int lrank, int **ids_out,
                              resihp__job_ep_t **eps_out, int *n_out) {
  int cap = 1;
  for (const char *p = list; *p; p++)
    cap += *p == ',';
  char *copy = strdup(list);
  resihp__job_ep_t *eps = calloc((size_t)cap, sizeof(resihp__job_ep_t));
  int *ids = calloc((size_t)cap, sizeof(int));
  int n = 0, rc = 0;
  if (!copy || !eps || !ids) {
    rc = RESIHP_ENOMEM;
    goto out;
  }
  char *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t && n < cap;
       t = strtok_r(NULL, ",", &save)) {
    char *at = strchr(t, '@'), *end;
    if (!at || resihp__wire_list_item(at + 1, lrank, eps[n],
                                      sizeof(resihp__job_ep_t))) {
      rc = RESIHP_EPROTO;
      goto out;
    }
    *at = '\0';
    long id = strtol(t, &end, 10);
    if (end == t || *end || id < 0 || id >= MAX_REPLICA_ID ||
        (n > 0 && id <= ids[n - 1])) {
      rc = RESIHP_EPROTO;
      goto out;
    }
    ids[n++] = (int)id;
  }
out:
  free(copy);
  if (rc) {
    free(eps);
    free(ids);
    return rc;
  }
  *ids_out = ids;
  *eps_out = eps;
  *n_out = n;
  return 0;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* GO with base=B n=N gone=r:r add=r@eps,...: the list of epoch B (which
 * this rank holds) without gone, with add, in id order; N members. */
int resihp__job_members_delta(const char *msg, long held, const int *old_ids,
                              const resihp__job_ep_t *old_eps, int nold,
                              int lrank, int **ids_out,
                              resihp__job_ep_t **eps_out, int *n_out) {
  long base = -1, want = 0;
  if (resihp__wire_get_long(msg, "base", &base) ||
      resihp__wire_get_range(msg, "n", 1, MAX_REPLICA_ID, &want) || held < 0 ||
      base != held)
    return RESIHP_EPROTO; /* not the list we hold: RESYNC, then a full one */
  char *v = malloc(RESIHP__JOB_MSG_MAX);
  int *gone = NULL, ngone = 0, *aids = NULL, na = 0, *ids = NULL, n = 0;
  resihp__job_ep_t *aeps = NULL, *eps = NULL;
  if (!v)
    return RESIHP_ENOMEM;
  int rc = resihp__wire_get(msg, "gone", v, RESIHP__JOB_MSG_MAX);
  if (rc == RESIHP_ENOENT)
    v[0] = '\0', rc = 0;
  if (!rc)
    rc = resihp__wire_parse_ints(v, MAX_REPLICA_ID, &gone, &ngone);
  if (!rc && (rc = resihp__wire_get(msg, "add", v, RESIHP__JOB_MSG_MAX)) ==
                 RESIHP_ENOENT)
    v[0] = '\0', rc = 0;
  if (!rc)
    rc = resihp__job_members_parse(v, lrank, &aids, &aeps, &na);
  if (!rc && want > (long)nold + na)
    rc = RESIHP_EPROTO;
  if (!rc && (!(ids = calloc((size_t)want, sizeof(int))) ||
              !(eps = calloc((size_t)want, sizeof(resihp__job_ep_t)))))
    rc = RESIHP_ENOMEM;
  if (!rc) {
    qsort(gone, (size_t)ngone, sizeof(int), cmp_int);
    /* merge the kept old members and the added ones, both in id order */
    int i = 0, a = 0;
    while (!rc && (i < nold || a < na)) {
      while (i < nold &&
             bsearch(&old_ids[i], gone, (size_t)ngone, sizeof(int), cmp_int))
        i++;
      int take_old = i < nold && (a >= na || old_ids[i] < aids[a]);
      if (i < nold && a < na && old_ids[i] == aids[a])
        rc = RESIHP_EPROTO; /* added but never gone */
      else if (take_old || a < na) {
        if (n >= want) {
          rc = RESIHP_EPROTO;
          break;
        }
        ids[n] = take_old ? old_ids[i] : aids[a];
        memcpy(eps[n], take_old ? old_eps[i] : aeps[a],
               sizeof(resihp__job_ep_t));
        n++;
        take_old ? i++ : a++;
      }
    }
    if (!rc && n != want)
      rc = RESIHP_EPROTO;
  }
  free(v);
  free(gone);
  free(aids);
  free(aeps);
  if (rc) {
    free(ids);
    free(eps);
    return rc;
  }
  *ids_out = ids;
  *eps_out = eps;
  *n_out = n;
  return 0;
}
