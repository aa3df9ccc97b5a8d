/* SPDX-License-Identifier: BSD-3-Clause */
/* A rank's state by layer (resihp_job_set_layer_state, issue 32): which
 * bytes of its state list belong to which of its layers, so that a
 * replacement holding another partition of the layers than every member
 * can receive each run of its layers from the member rank holding it
 * (coord_layers.c chooses, coord_schedule.c names the pieces in serve=,
 * job_catchup.c sends and receives them).
 *
 * The state list stays one list (the layers' buffers in layer order, then
 * the rank's own), so that what serves, saves and compares a whole state
 * is unchanged; the layers' byte offsets into its concatenation cut it
 * into pieces. */
#include "config.h"

#include "job_internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether layers (nlayers) and nrank buffers of the rank's own are a
 * state by layer of this rank's layers now: 1 with *first, *count (its
 * layers) and *total (buffers in all) set, else 0. */
static int layer_state_ok(const resihp_job_t *j,
                          const resihp_job_layer_state_t *layers, int nlayers,
                          int nrank, int *first, int *count, long *total) {
  int ok = !resihp_job_layers(j, first, count) && nlayers == *count;
  *total = nrank;
  for (int i = 0; ok && i < nlayers; i++) {
    ok = layers[i].nbufs >= 0 && (!layers[i].nbufs || layers[i].bufs);
    *total += ok ? layers[i].nbufs : 0;
  }
  return ok && *total <= RESIHP__JOB_MAX_BUFS;
}

/* The state list of a state by layer that layer_state_ok took (the
 * layers' buffers in layer order, then the rank's) and its layers' byte
 * offsets: 0, or an error with the state as it was. */
static int layer_state_take(resihp_job_t *j,
                            const resihp_job_layer_state_t *layers,
                            int nlayers, const resihp_job_buf_t *rank,
                            int nrank, int first, int count, long total) {
  resihp_job_buf_t *all = malloc(sizeof(*all) * (size_t)(total ? total : 1));
  size_t *off = malloc(sizeof(size_t) * (size_t)(count + 1));
  if (!all || !off) {
    free(all);
    free(off);
    return RESIHP_ENOMEM;
  }
  int n = 0;
  size_t at = 0;
  for (int i = 0; i < nlayers; i++) {
    off[i] = at;
    for (int b = 0; b < layers[i].nbufs; b++) {
      all[n++] = layers[i].bufs[b];
      at += layers[i].bufs[b].bytes; /* (bounded by state_set below) */
    }
  }
  off[count] = at;
  for (int b = 0; b < nrank; b++)
    all[n++] = rank[b];
  int rc = resihp__job_state_set(j, all, n);
  free(all);
  if (rc) {
    free(off);
    return rc;
  }
  j->lstate_off = off;
  j->lstate_first = first;
  j->lstate_count = count;
  return 0;
}

static int layer_state_args(const resihp_job_t *j,
                            const resihp_job_layer_state_t *layers,
                            int nlayers, const resihp_job_buf_t *rank,
                            int nrank) {
  return !j || nlayers < 0 || nrank < 0 || (nlayers && !layers) ||
         (nrank && !rank);
}

int resihp_job_set_layer_state(resihp_job_t *j,
                               const resihp_job_layer_state_t *layers,
                               int nlayers, const resihp_job_buf_t *rank,
                               int nrank) {
  if (layer_state_args(j, layers, nlayers, rank, nrank))
    return RESIHP_EINVAL;
  if (j->began)
    return RESIHP_ESTATE;
  int first, count;
  long total;
  int ok = layer_state_ok(j, layers, nlayers, nrank, &first, &count, &total);
  /* every rank of the replica declares its state by layer, or none does:
   * the coordinator is told so for the whole replica (lst=1) */
  int64_t v = ok;
  int rc = resihp__job_replica_sum(j, &v, 1);
  if (rc)
    return rc;
  if (v != j->lsize) {
    resihp__job_replica_settle(j);
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d rank %d: %s (resihp_job_set_layer_state)",
               j->replica, j->lrank,
               ok ? "another rank of this replica declared no state by layer "
                    "or a bad one"
                  : "a state by layer that is not this rank's layers' (or no "
                    "layers declared, or too many buffers)");
    return RESIHP_EINVAL;
  }
  return layer_state_take(j, layers, nlayers, rank, nrank, first, count,
                          total);
}

int resihp_job_commit_layer_state(resihp_job_t *j,
                                  const resihp_job_layer_state_t *layers,
                                  int nlayers, const resihp_job_buf_t *rank,
                                  int nrank, int failed) {
  if (layer_state_args(j, layers, nlayers, rank, nrank))
    return RESIHP_EINVAL;
  if (!j->moving || !j->in_step)
    return RESIHP_ESTATE;
  int first, count, rc = RESIHP_EINVAL;
  long total;
  if (failed) {
    /* (said by the agreement below) */
  } else if (!layer_state_ok(j, layers, nlayers, nrank, &first, &count,
                             &total)) {
    resihp_log(RESIHP_LOG_ERROR, "job",
               "replica %d rank %d: a state by layer that is not this rank's "
               "layers' after the move (resihp_job_commit_layer_state)",
               j->replica, j->lrank);
  } else {
    /* (its sizes are the new layers') */
    int fixed = j->shape_fixed;
    j->shape_fixed = 0;
    rc = layer_state_take(j, layers, nlayers, rank, nrank, first, count,
                          total);
    j->shape_fixed = fixed;
  }
  return resihp__job_commit_agree(j, rc);
}

int resihp__job_state_piece(const resihp_job_t *j, int a, int b, size_t *off,
                            size_t *len) {
  if (a == -1) {
    *off = 0;
    *len = j->state_len;
    return 0;
  }
  int first, count;
  if (!j->lstate_off || resihp_job_layers(j, &first, &count) ||
      first != j->lstate_first || count != j->lstate_count)
    return RESIHP_EINVAL;
  const size_t *o = j->lstate_off;
  if (a == -2) {
    *off = o[count];
    *len = j->state_len - o[count];
    return 0;
  }
  if (a < first || b <= a || b > first + count)
    return RESIHP_EINVAL;
  *off = o[a - first];
  *len = o[b - first] - o[a - first];
  return 0;
}

/* bound of a replica id or rank index in an entry */
#define IDS_MAX (1L << 24)

/* A decimal 0..max at *s (no leading zero), up to a character not a
 * digit. */
static int number(const char **s, int *v, long max) {
  const char *p = *s;
  long x = 0;
  if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
    return RESIHP_EPROTO;
  while (*p >= '0' && *p <= '9') {
    x = x * 10 + (*p++ - '0');
    if (x > max)
      return RESIHP_EPROTO;
  }
  *v = (int)x;
  *s = p;
  return 0;
}

int resihp__job_serve_entry_parse(const char *t, int *q, int *k, int *a,
                                  int *b, const char **ep) {
  const char *p = t;
  *a = -1;
  *b = -1;
  if (number(&p, q, IDS_MAX) || *p++ != '.' || number(&p, k, IDS_MAX))
    return RESIHP_EPROTO;
  if (*p == ':') {
    p++;
    if (*p == 'r') {
      *a = -2;
      p++;
    } else if (number(&p, a, RESIHP__LAYERS_MAX) || *p++ != '-' ||
               number(&p, b, RESIHP__LAYERS_MAX) || *b <= *a) {
      return RESIHP_EPROTO;
    }
  }
  if (*p++ != '@' || !*p)
    return RESIHP_EPROTO;
  *ep = p;
  return 0;
}

int resihp__job_offer_piece_parse(const char *line, int *a, int *b) {
  char lay[32];
  long rk = 0;
  *a = -1;
  *b = -1;
  int rc = resihp__wire_get(line, "layers", lay, sizeof(lay));
  if (!rc) {
    /* the layers' text as serve= writes them: one parser for both */
    int q, k;
    const char *ep;
    char entry[48];
    snprintf(entry, sizeof(entry), "0.0:%s@-", lay);
    if (resihp__job_serve_entry_parse(entry, &q, &k, a, b, &ep) || *a < 0)
      return RESIHP_EPROTO;
    return resihp__wire_get(line, "rank", lay, sizeof(lay)) == RESIHP_ENOENT
               ? 0
               : RESIHP_EPROTO;
  }
  if (rc != RESIHP_ENOENT)
    return RESIHP_EPROTO;
  rc = resihp__wire_get_long(line, "rank", &rk);
  if (rc == RESIHP_ENOENT)
    return 0;
  if (rc || rk != 1)
    return RESIHP_EPROTO;
  *a = -2;
  return 0;
}
