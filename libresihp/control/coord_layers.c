/* SPDX-License-Identifier: BSD-3-Clause */
/* The replicas' partitions of the model's layers (issue 32;
 * recovery/layer_groups.h), as the coordinator keeps them.
 *
 * A replica's leader says its partition with every BEGIN once its program
 * declared layers (resihp_job_set_layers): lay=L for one rank per replica,
 * lay=L:c1:...:c(K-1) (its cut points) otherwise. The coordinator checks
 * it (L the job's, K - 1 cut points strictly inside 0..L), keeps it as the
 * replica's committed partition (snapshot: the standby mirrors it; WELCOME
 * tells it to the replica's next process) and lists the distinct ones in
 * every GO of a new epoch, so that every rank of every member builds the
 * same layer-keyed groups (layer_groups.h) without talking:
 *
 *   lay=L lparts=D0,D1@r:r:...,D2@r:...
 *
 * D0 is the partition most of the epoch's members hold (every member not
 * listed holds it), each other one with the members that hold it. A job
 * of thousands of replicas has a handful of distinct partitions: they are
 * interned (one text each, counted), a replica holds an index, a BEGIN
 * that says the same partition again costs one comparison, and the list
 * is built once per epoch in O(members + distinct), its length
 * O(distinct + members not holding D0). */
#include "config.h"

#include "../recovery/layer_groups.h"
#include "coord_internal.h"

#include <resihp/error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The distinct partitions the job may hold at once: each adds up to
 * RESIHP__COORD_LAY_MAX bytes to every new epoch's GO. */
static int lparts_room(const resihp__coord_t *c) {
  size_t per = RESIHP__COORD_LAY_MAX;
  size_t ids = (size_t)c->R * 9;
  size_t room = RESIHP__WIRE_LINE_MAX / 2;
  return ids >= room ? 1 : (int)((room - ids) / per);
}

/* The canonical text of a partition said as "L[:c1...]": its cut points
 * (cuts, "" for one rank) and L. RESIHP_EPROTO when it is none. */
static int lay_parse(const char *lay, int K, int *L, char *cuts, size_t cap) {
  char *end;
  if (lay[0] < '1' || lay[0] > '9')
    return RESIHP_EPROTO;
  long l = strtol(lay, &end, 10);
  if (l < 1 || l > RESIHP__LAYERS_MAX || (*end && *end != ':'))
    return RESIHP_EPROTO;
  resihp__partition_t p;
  int rc = resihp__partition_parse(*end ? end + 1 : "", (int)l, &p);
  if (rc)
    return rc == RESIHP_ENOMEM ? rc : RESIHP_EPROTO;
  if (p.k != K || (*end && !end[1]) ||
      resihp__partition_format(&p, cuts, cap) ||
      strcmp(cuts, *end ? end + 1 : "")) /* canonical: no "01", no "+" */
    rc = RESIHP_EPROTO;
  resihp__partition_free(&p);
  *L = (int)l;
  return rc;
}

static void unref(resihp__coord_t *c, int d) {
  if (--c->lparts[d].refs == 0) {
    free(c->lparts[d].text);
    c->lparts[d].text = NULL;
  }
}

int resihp__coord_set_layers(resihp__coord_t *c, int r, const char *lay) {
  char cuts[RESIHP__COORD_LAY_MAX];
  int L;
  rep_t *p = &c->reps[r];
  /* of its ranks now: the job's K, fewer once it shrank */
  if (strlen(lay) >= sizeof(cuts) ||
      lay_parse(lay, resihp__coord_rep_k(c, r), &L, cuts, sizeof(cuts)))
    return RESIHP_EPROTO;
  if (c->nlayers && L != c->nlayers)
    return RESIHP_EINVAL;
  if (p->lpart && !strcmp(c->lparts[p->lpart - 1].text, cuts))
    return 0; /* every BEGIN says it: the same again */
  int d = -1, hole = -1;
  for (int i = 0; i < c->nlparts && d < 0; i++) {
    if (!c->lparts[i].text)
      hole = hole < 0 ? i : hole;
    else if (!strcmp(c->lparts[i].text, cuts))
      d = i;
  }
  if (d < 0) {
    int live = 0;
    for (int i = 0; i < c->nlparts; i++)
      live += c->lparts[i].text != NULL;
    if (live >= lparts_room(c))
      return RESIHP_ERANGE;
    char *t = strdup(cuts);
    if (!t)
      return RESIHP_ENOMEM;
    if (hole < 0) {
      if (c->nlparts == c->caplparts) {
        int n = c->caplparts ? 2 * c->caplparts : 4;
        lpart_t *x = realloc(c->lparts, sizeof(lpart_t) * (size_t)n);
        if (!x) {
          free(t);
          return RESIHP_ENOMEM;
        }
        c->lparts = x;
        c->caplparts = n;
      }
      hole = c->nlparts++;
    }
    d = hole;
    c->lparts[d].text = t;
    c->lparts[d].refs = 0;
    c->lparts[d].shape[0] = '\0';
  }
  if (p->lpart)
    unref(c, p->lpart - 1);
  c->lparts[d].refs++;
  p->lpart = d + 1;
  c->nlayers = L;
  resihp__coord_dirty(c);
  return 0;
}

/* Replicas of different partitions hold different state sizes: the
 * shape is compared within a partition (HELLO comes before the partition
 * is known, so the first BEGIN compares). A standby restores the
 * partitions' shapes from the snapshot's "y" lines: it compares as its
 * predecessor did. */
int resihp__coord_check_shape(resihp__coord_t *c, int r, const char **want) {
  rep_t *p = &c->reps[r];
  char *s = c->nlayers && p->lpart ? c->lparts[p->lpart - 1].shape : c->shape;
  p->shape_open = 0;
  *want = s;
  if (!s[0])
    snprintf(s, sizeof(p->shape), "%s", p->shape);
  return strcmp(s, p->shape) ? RESIHP_EINVAL : 0;
}

int resihp__coord_put_lay(const resihp__coord_t *c, int r,
                          resihp__wire_buf_t *b) {
  const rep_t *p = &c->reps[r];
  if (!c->nlayers || !p->lpart)
    return 0;
  const char *t = c->lparts[p->lpart - 1].text;
  resihp__wire_buf_printf(b, " lay=%d%s%s", c->nlayers, t[0] ? ":" : "", t);
  return 1;
}

void resihp__coord_put_lparts(const resihp__coord_t *c, resihp__wire_buf_t *b) {
  if (!c->nlayers)
    return;
  resihp__wire_buf_printf(b, " lay=%d", c->nlayers);
  if (c->K == 1 || !c->nlparts)
    return; /* one rank holds every layer: nothing to tell apart */
  resihp__coord_put_moved(c, b);  /* (coord_repart.c) */
  resihp__coord_put_shrunk(c, b); /* (coord_shrink.c) */
  /* members by partition (counting sort: O(members + distinct)); those
   * that declared none are counted with the default */
  int D = c->nlparts, n = c->nmembers;
  int *count = calloc((size_t)D + 1, sizeof(int));
  int *by = malloc(sizeof(int) * (size_t)(n ? n : 1));
  if (!count || !by) {
    free(count);
    free(by);
    b->err = RESIHP_ENOMEM;
    return;
  }
  for (int i = 0; i < n; i++) {
    int lp = c->reps[c->members[i]].lpart;
    if (lp)
      count[lp - 1]++;
  }
  int def = -1;
  for (int d = 0; d < D; d++)
    if (c->lparts[d].text && (def < 0 || count[d] > count[def]))
      def = d;
  if (def < 0) { /* (nobody holds one any more) */
    free(count);
    free(by);
    return;
  }
  /* start of each partition's members in by[] (sorted ids: members is) */
  int at = 0;
  for (int d = 0; d <= D; d++) {
    int k = count[d];
    count[d] = at;
    at += k;
  }
  for (int i = 0; i < n; i++) {
    int lp = c->reps[c->members[i]].lpart;
    if (lp)
      by[count[lp - 1]++] = c->members[i];
  }
  resihp__wire_buf_printf(b, " lparts=%s", c->lparts[def].text);
  for (int d = 0, from = 0; d < D && !b->err; from = count[d], d++) {
    if (d == def || count[d] == from)
      continue;
    resihp__wire_buf_printf(b, ",%s@", c->lparts[d].text);
    resihp__wire_buf_ints(b, by + from, count[d] - from);
  }
  free(count);
  free(by);
}

/* (snapshot) "y r lay=L:cuts[ lst=1][ shape=D][ home=cuts][ shrunk=...]
 * [ shrink=...][ lostnow=bits]" lines: every replica's committed
 * partition, the state shape of its holders once one began, the partition
 * its program declared when the coordinator moved its layers away from it
 * (coord_repart.c), and its shrink and the ranks its leader said it lost
 * (coord_shrink.c) */
void resihp__coord_put_layers(const resihp__coord_t *c, resihp__wire_buf_t *b) {
  for (int r = 0; r < c->R && !b->err; r++) {
    const rep_t *p = &c->reps[r];
    if (!p->lpart)
      continue;
    const char *shape = c->lparts[p->lpart - 1].shape;
    resihp__wire_buf_printf(b, "y %d", r);
    resihp__coord_put_lay(c, r, b);
    resihp__wire_buf_printf(b, "%s%s%s", p->lstate ? " lst=1" : "",
                            shape[0] ? " shape=" : "", shape);
    if (p->moved && p->home[0])
      resihp__wire_buf_printf(b, " home=%s", p->home);
    resihp__coord_put_shrink_state(c, r, b); /* (coord_shrink.c) */
    resihp__wire_buf_printf(b, "\n");
  }
}

int resihp__coord_restore_layers(resihp__coord_t *c, int r, const char *s) {
  char lay[RESIHP__COORD_LAY_MAX], shape[sizeof(c->shape)] = "",
      home[RESIHP__COORD_LAY_MAX] = "";
  const char *sp = strchr(s, ' ');
  size_t n = sp ? (size_t)(sp - s) : strlen(s);
  if (n >= sizeof(lay))
    return RESIHP_EPROTO;
  /* then " lst=1", " shape=D" and " home=cuts", each at most once, in
   * this order */
  const char *at = sp;
  int lst = at && !strncmp(at, " lst=1", 6) && (!at[6] || at[6] == ' ');
  if (lst)
    at = at[6] ? at + 6 : NULL;
  if (at && !strncmp(at, " shape=", 7)) {
    size_t m = strcspn(at + 7, " ");
    if (m == 0 || m >= sizeof(shape))
      return RESIHP_EPROTO;
    memcpy(shape, at + 7, m);
    shape[m] = '\0';
    at += 7 + m;
    at = *at ? at : NULL;
  }
  if (at && !strncmp(at, " home=", 6)) {
    size_t m = strcspn(at + 6, " ");
    if (m == 0 || m >= sizeof(home))
      return RESIHP_EPROTO;
    memcpy(home, at + 6, m);
    home[m] = '\0';
    at += 6 + m;
    at = *at ? at : NULL;
  }
  /* then the shrink's " shrunk=...", " shrink=..." and " lostnow=...", the
   * rest of it */
  if (at && strncmp(at, " shrunk=", 8) && strncmp(at, " shrink=", 8) &&
      strncmp(at, " lostnow=", 9))
    return RESIHP_EPROTO;
  if (shape[0] && !resihp__wire_token_ok(shape, sizeof(shape)))
    return RESIHP_EPROTO;
  memcpy(lay, s, n);
  lay[n] = '\0';
  /* a replica that shrank (coord_shrink.c) holds fewer ranks than the
   * job's K: as many as its partition's cut points say */
  int k = 1;
  const char *colon = strchr(lay, ':');
  for (const char *q = colon; q && *q; q++)
    k += *q == ':';
  if (k > c->K)
    return RESIHP_EPROTO;
  c->reps[r].k = k < c->K ? k : 0;
  int rc = resihp__coord_set_layers(c, r, lay);
  c->reps[r].lstate = lst;
  if (!rc && home[0])
    rc = resihp__coord_repart_restore(c, r, home);
  if (!rc && at)
    rc = resihp__coord_shrink_restore(c, r, at);
  if (rc || !shape[0])
    return rc;
  char *have = c->lparts[c->reps[r].lpart - 1].shape;
  if (have[0] && strcmp(have, shape))
    return RESIHP_EPROTO; /* one partition, two shapes */
  snprintf(have, sizeof(c->shape), "%s", shape);
  return 0;
}

void resihp__coord_layers_free(resihp__coord_t *c) {
  for (int i = 0; i < c->nlparts; i++)
    free(c->lparts[i].text);
  free(c->lparts);
  c->lparts = NULL;
  c->nlparts = c->caplparts = 0;
}

int resihp__coord_serve_sources(resihp__coord_t *c) {
  int nc = c->nstart_contrib, nj = c->nstart_joiners, K = c->K;
  free(c->start_src);
  c->start_src = NULL;
  free(c->start_lay);
  c->start_lay = NULL;
  if (!nj || nc < 1)
    return 0;
  if (!(c->start_src = malloc(sizeof(int) * (size_t)nj * (size_t)K)))
    return RESIHP_ENOMEM;
  if (c->nlayers && K > 1 && !(c->start_lay = calloc((size_t)nj, sizeof(int))))
    return RESIHP_ENOMEM;
  /* the contributors by partition (counting sort, O(nc + distinct)):
   * partition d's are by[at[d] .. at[d + 1]) */
  int D = c->nlayers ? c->nlparts : 0;
  int *at = calloc((size_t)D + 2, sizeof(int));
  int *by = malloc(sizeof(int) * (size_t)nc);
  /* and those holding their state by layer (any partition) */
  int *ls = malloc(sizeof(int) * (size_t)nc), nls = 0;
  if (!at || !by || !ls) {
    free(at);
    free(by);
    free(ls);
    return RESIHP_ENOMEM;
  }
  for (int i = 0; D && i < nc; i++)
    if (c->reps[c->start_contrib[i]].lstate && c->reps[c->start_contrib[i]].lpart)
      ls[nls++] = c->start_contrib[i];
  for (int i = 0; i < nc; i++)
    at[(D ? c->reps[c->start_contrib[i]].lpart : 0) + 1]++;
  for (int d = 0; d <= D; d++)
    at[d + 1] += at[d];
  for (int i = 0; i < nc; i++) /* at[d] ends at d + 1's start */
    by[at[D ? c->reps[c->start_contrib[i]].lpart : 0]++] = c->start_contrib[i];
  for (int d = D + 1; d > 0; d--)
    at[d] = at[d - 1];
  at[0] = 0;
  for (int ji = 0; ji < nj; ji++) {
    int lp = D ? c->reps[c->start_joiners[ji]].lpart : 0;
    int n = at[lp + 1] - at[lp];
    /* of the joiner's ranks now (fewer once it shrank): its other slots
     * serve nobody */
    int kj = resihp__coord_rep_k(c, c->start_joiners[ji]);
    for (int k = kj; k < K; k++)
      c->start_src[(size_t)ji * (size_t)K + (size_t)k] = -1;
    if (lp && !n && c->start_lay && nls &&
        c->reps[c->start_joiners[ji]].lstate) {
      /* by layer: rank k's layers from the ranks of the (ji + k)-th
       * member holding its state by layer, whatever its partition */
      c->start_lay[ji] = 1;
      for (int k = 0; k < kj; k++)
        c->start_src[(size_t)ji * (size_t)K + (size_t)k] = ls[(ji + k) % nls];
      continue;
    }
    if (lp && !n) {
      logc(RESIHP_LOG_ERROR,
           "replica %d catches up, but no member holds its partition of the "
           "layers (%s): it gets shards of another one",
           c->start_joiners[ji], c->lparts[lp - 1].text);
    }
    for (int k = 0; k < kj; k++)
      c->start_src[(size_t)ji * (size_t)K + (size_t)k] =
          n ? by[at[lp] + (ji + k) % n] : c->start_contrib[(ji + k) % nc];
  }
  free(at);
  free(by);
  free(ls);
  return 0;
}

void resihp__coord_put_layer_serve(const resihp__coord_t *c, int ji, int k,
                                   const char *ep, int *first,
                                   resihp__wire_buf_t *b) {
  int q = c->start_joiners[ji];
  int r = c->start_src[(size_t)ji * (size_t)c->K + (size_t)k];
  resihp__partition_t pj, pr;
  if (resihp__partition_parse(c->lparts[c->reps[q].lpart - 1].text,
                              c->nlayers, &pj)) {
    b->err = RESIHP_ENOMEM; /* (both were parsed when said) */
    return;
  }
  if (resihp__partition_parse(c->lparts[c->reps[r].lpart - 1].text,
                              c->nlayers, &pr)) {
    resihp__partition_free(&pj);
    b->err = RESIHP_ENOMEM;
    return;
  }
  /* the joiner rank's layers [lo, hi) cut by r's ranks: O(K) */
  int lo = pj.bounds[k], hi = pj.bounds[k + 1];
  for (int s = 0; s < pr.k; s++) {
    int a = lo > pr.bounds[s] ? lo : pr.bounds[s];
    int e = hi < pr.bounds[s + 1] ? hi : pr.bounds[s + 1];
    if (a >= e)
      continue;
    resihp__wire_buf_printf(b, "%s%d.%d:%d-%d@%s", *first ? " serve=" : ",", q,
                            k, a, e, ep);
    *first = 0;
  }
  resihp__wire_buf_printf(b, "%s%d.%d:r@%s", *first ? " serve=" : ",", q, k,
                          ep);
  *first = 0;
  resihp__partition_free(&pj);
  resihp__partition_free(&pr);
}
