/* SPDX-License-Identifier: BSD-3-Clause */
/* Partitions of layers and the runs of a set of them (layer_groups.h). */
#include "config.h"

#include "layer_groups.h"

#include "../control/wire.h"

#include <resihp/error.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int resihp__partition_parse(const char *text, int nlayers,
                            resihp__partition_t *p) {
  p->k = 0;
  p->bounds = NULL;
  if (!text || nlayers < 1 || nlayers > RESIHP__LAYERS_MAX)
    return RESIHP_EPROTO;
  int *cuts = NULL, n = 0;
  int rc = resihp__wire_parse_ints(text, nlayers, &cuts, &n);
  if (rc)
    return rc == RESIHP_ENOMEM ? rc : RESIHP_EPROTO;
  for (int i = 0; i < n; i++)
    if (cuts[i] < 1 || (i && cuts[i] <= cuts[i - 1])) {
      free(cuts);
      return RESIHP_EPROTO;
    }
  int *b = malloc(sizeof(int) * (size_t)(n + 2));
  if (!b) {
    free(cuts);
    return RESIHP_ENOMEM;
  }
  b[0] = 0;
  if (n)
    memcpy(b + 1, cuts, sizeof(int) * (size_t)n);
  b[n + 1] = nlayers;
  free(cuts);
  p->k = n + 1;
  p->bounds = b;
  return 0;
}

int resihp__partition_from_counts(const int *n, int k, int nlayers,
                                  resihp__partition_t *p) {
  p->k = 0;
  p->bounds = NULL;
  if (!n || k < 1 || nlayers < 1 || nlayers > RESIHP__LAYERS_MAX ||
      k > nlayers)
    return RESIHP_EINVAL;
  int *b = malloc(sizeof(int) * (size_t)(k + 1));
  if (!b)
    return RESIHP_ENOMEM;
  b[0] = 0;
  for (int i = 0; i < k; i++) {
    if (n[i] < 1 || n[i] > nlayers - b[i]) {
      free(b);
      return RESIHP_EINVAL;
    }
    b[i + 1] = b[i] + n[i];
  }
  if (b[k] != nlayers) {
    free(b);
    return RESIHP_EINVAL;
  }
  p->k = k;
  p->bounds = b;
  return 0;
}

int resihp__partition_format(const resihp__partition_t *p, char *out,
                             size_t cap) {
  size_t len = 0;
  if (!cap)
    return RESIHP_ERANGE;
  out[0] = '\0';
  for (int i = 1; i < p->k; i++) {
    int w = snprintf(out + len, cap - len, "%s%d", i > 1 ? ":" : "",
                     p->bounds[i]);
    if (w < 0 || (size_t)w >= cap - len)
      return RESIHP_ERANGE;
    len += (size_t)w;
  }
  return 0;
}

int resihp__partition_equal(const resihp__partition_t *a,
                            const resihp__partition_t *b) {
  return a->k == b->k &&
         !memcmp(a->bounds, b->bounds, sizeof(int) * (size_t)(a->k + 1));
}

/* The last i in [0, n) with v[i] <= x (v ascending, v[0] <= x). */
static int last_le(const int *v, int n, int x) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (v[mid] <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

int resihp__partition_holder(const resihp__partition_t *p, int layer) {
  return last_le(p->bounds, p->k, layer);
}

void resihp__partition_free(resihp__partition_t *p) {
  if (!p)
    return;
  free(p->bounds);
  p->bounds = NULL;
  p->k = 0;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

int resihp__runmap_build(resihp__runmap_t *m, int nlayers,
                         const resihp__partition_t *parts, int nparts) {
  m->nlayers = 0;
  m->nruns = 0;
  m->first = NULL;
  if (nlayers < 1 || nparts < 1 || !parts)
    return RESIHP_EINVAL;
  size_t total = 1;
  for (int p = 0; p < nparts; p++) {
    if (parts[p].k < 1 || !parts[p].bounds || parts[p].bounds[0] != 0 ||
        parts[p].bounds[parts[p].k] != nlayers)
      return RESIHP_EINVAL;
    total += (size_t)parts[p].k;
  }
  int *v = malloc(sizeof(int) * total);
  if (!v)
    return RESIHP_ENOMEM;
  size_t n = 0;
  for (int p = 0; p < nparts; p++)
    for (int i = 0; i < parts[p].k; i++)
      v[n++] = parts[p].bounds[i];
  qsort(v, n, sizeof(int), cmp_int);
  size_t u = 0;
  for (size_t i = 0; i < n; i++)
    if (!u || v[i] != v[u - 1])
      v[u++] = v[i];
  v[u] = nlayers;
  m->nlayers = nlayers;
  m->nruns = (int)u;
  m->first = v;
  return 0;
}

void resihp__runmap_free(resihp__runmap_t *m) {
  if (!m)
    return;
  free(m->first);
  m->first = NULL;
  m->nruns = 0;
}

int resihp__runmap_find(const resihp__runmap_t *m, int first) {
  if (m->nruns < 1 || first < 0 || first >= m->nlayers)
    return -1;
  int r = last_le(m->first, m->nruns, first);
  return m->first[r] == first ? r : -1;
}

int resihp__runmap_rank_runs(const resihp__runmap_t *m,
                             const resihp__partition_t *p, int k, int *r0,
                             int *r1) {
  if (k < 0 || k >= p->k || p->bounds[p->k] != m->nlayers)
    return RESIHP_EINVAL;
  int a = resihp__runmap_find(m, p->bounds[k]);
  int b = k + 1 < p->k ? resihp__runmap_find(m, p->bounds[k + 1]) : m->nruns;
  if (a < 0 || b < 0)
    return RESIHP_EINVAL;
  *r0 = a;
  *r1 = b;
  return 0;
}

size_t *resihp__layers_offsets(const size_t *elems, int nlayers) {
  if (nlayers < 0)
    return NULL;
  size_t *off = malloc(sizeof(size_t) * (size_t)(nlayers + 1));
  if (!off)
    return NULL;
  off[0] = 0;
  for (int l = 0; l < nlayers; l++) {
    if (elems[l] > SIZE_MAX - off[l]) {
      free(off);
      return NULL;
    }
    off[l + 1] = off[l] + elems[l];
  }
  return off;
}

int resihp__layers_sources(const resihp__partition_t *src, int first, int end,
                           resihp__layer_piece_t *out) {
  if (src->k < 1 || first < 0 || end <= first || end > src->bounds[src->k])
    return RESIHP_EINVAL;
  int n = 0;
  for (int k = resihp__partition_holder(src, first);
       k < src->k && src->bounds[k] < end; k++) {
    int a = src->bounds[k] > first ? src->bounds[k] : first;
    int b = src->bounds[k + 1] < end ? src->bounds[k + 1] : end;
    out[n++] = (resihp__layer_piece_t){.rank = k, .first = a, .end = b};
  }
  return n;
}

/* Member indices by their partition's text (qsort_r over texts). */
static int cmp_text(const void *a, const void *b, void *arg) {
  const char *const *texts = arg;
  const char *x = texts[*(const int *)a], *y = texts[*(const int *)b];
  return strcmp(x ? x : "", y ? y : "");
}

int resihp__partitions_distinct(const char *const *texts, int n, int nlayers,
                                resihp__partition_t **parts_out, int *nparts,
                                int *of) {
  *parts_out = NULL;
  *nparts = 0;
  if (n < 1)
    return RESIHP_EPROTO;
  int *idx = malloc(sizeof(int) * (size_t)n);
  resihp__partition_t *parts = calloc((size_t)n, sizeof(*parts));
  if (!idx || !parts) {
    free(idx);
    free(parts);
    return RESIHP_ENOMEM;
  }
  for (int i = 0; i < n; i++)
    idx[i] = i;
  qsort_r(idx, (size_t)n, sizeof(int), cmp_text, (void *)texts);
  int np = 0, rc = 0;
  for (int i = 0; i < n && !rc; i++) {
    const char *t = texts[idx[i]] ? texts[idx[i]] : "";
    const char *prev = i ? texts[idx[i - 1]] : NULL;
    if (!i || strcmp(t, prev ? prev : ""))
      rc = resihp__partition_parse(t, nlayers, &parts[np++]);
    of[idx[i]] = np - 1;
  }
  free(idx);
  if (rc) {
    for (int p = 0; p < np; p++)
      resihp__partition_free(&parts[p]);
    free(parts);
    return rc;
  }
  *parts_out = parts;
  *nparts = np;
  return 0;
}

/* One entry "D" or "D@r:r:..." of an lparts list, [s, e): its partition
 * into *p; the members it names get of[i] = d. */
static int lparts_entry(const char *s, const char *e, int d, int nlayers, int k,
                        const int *ids, int n, resihp__partition_t *p,
                        int *of) {
  const char *at = memchr(s, '@', (size_t)(e - s));
  if ((d == 0) != (at == NULL))
    return RESIHP_EPROTO; /* D0 names nobody, the others somebody */
  const char *ce = at ? at : e;
  char *t = strndup(s, (size_t)(ce - s));
  if (!t)
    return RESIHP_ENOMEM;
  int rc = resihp__partition_parse(t, nlayers, p);
  free(t);
  if (rc)
    return rc == RESIHP_ENOMEM ? rc : RESIHP_EPROTO;
  if (p->k > k) /* (fewer: a replica that shrank, control/coord_shrink.c) */
    return RESIHP_EPROTO;
  if (!at)
    return 0;
  char *list = strndup(at + 1, (size_t)(e - at - 1));
  int *who = NULL, nw = 0;
  if (!list)
    return RESIHP_ENOMEM;
  rc = resihp__wire_parse_ints(list, INT32_MAX, &who, &nw);
  free(list);
  if (rc)
    return rc == RESIHP_ENOMEM ? rc : RESIHP_EPROTO;
  if (nw < 1)
    rc = RESIHP_EPROTO;
  for (int i = 0; i < nw && !rc; i++) {
    const int *hit = bsearch(&who[i], ids, (size_t)n, sizeof(int), cmp_int);
    if (!hit || of[hit - ids])
      rc = RESIHP_EPROTO; /* not a member, or said twice */
    else
      of[hit - ids] = d;
  }
  free(who);
  return rc;
}

int resihp__lparts_parse(const char *text, int nlayers, int k, const int *ids,
                         int n, resihp__partition_t **parts_out, int *nparts,
                         int *of) {
  *parts_out = NULL;
  *nparts = 0;
  if (!text || n < 1 || k < 1)
    return RESIHP_EPROTO;
  for (int i = 1; i < n; i++)
    if (ids[i] <= ids[i - 1])
      return RESIHP_EPROTO;
  int D = 1;
  for (const char *q = text; *q; q++)
    D += *q == ',';
  if (D > n)
    return RESIHP_EPROTO; /* each other one is some member's */
  resihp__partition_t *parts = calloc((size_t)D, sizeof(*parts));
  if (!parts)
    return RESIHP_ENOMEM;
  memset(of, 0, sizeof(int) * (size_t)n);
  int rc = 0, d = 0;
  for (const char *s = text; d < D && !rc; d++) {
    const char *e = strchr(s, ',');
    if (!e)
      e = s + strlen(s);
    rc = lparts_entry(s, e, d, nlayers, k, ids, n, &parts[d], of);
    s = e + 1;
  }
  if (rc) {
    for (int p = 0; p < D; p++)
      resihp__partition_free(&parts[p]);
    free(parts);
    return rc;
  }
  *parts_out = parts;
  *nparts = D;
  return 0;
}

int resihp__lparts_max_ranks(const char *text, int bound) {
  int most = 1;
  for (const char *q = text; *q;) {
    size_t n = strcspn(q, "@,");
    int k = n ? 2 : 1;
    for (size_t i = 0; i < n && k <= bound; i++)
      k += q[i] == ':';
    most = k > most ? k : most;
    q += strcspn(q, ",");
    q += *q == ',';
  }
  return most < bound ? most : bound;
}

void resihp__runmap_holders(const resihp__runmap_t *m, int r,
                            const resihp__partition_t *parts, const int *of,
                            int n, int *holder) {
  for (int i = 0; i < n; i++)
    holder[i] = resihp__partition_holder(&parts[of[i]], m->first[r]);
}

int resihp__catchup_plan(const resihp__runmap_t *m,
                         const resihp__partition_t *parts, const int *of,
                         int mine, int k, const int *src, int nh,
                         unsigned salt, resihp__catchup_piece_t *out) {
  int r0, r1;
  if (nh < 1 || resihp__runmap_rank_runs(m, &parts[mine], k, &r0, &r1))
    return RESIHP_EINVAL;
  int n = 0;
  for (int r = r0; r < r1; r++) {
    int member = src[(salt + (unsigned)(r - r0)) % (unsigned)nh];
    const resihp__partition_t *p = &parts[of[member]];
    /* a run lies inside one range of every partition of the map */
    int rank = resihp__partition_holder(p, m->first[r]);
    if (p->bounds[rank + 1] < m->first[r + 1])
      return RESIHP_EINVAL;
    if (n && out[n - 1].member == member && out[n - 1].rank == rank)
      out[n - 1].end = m->first[r + 1];
    else
      out[n++] = (resihp__catchup_piece_t){
          .member = member, .rank = rank, .first = m->first[r],
          .end = m->first[r + 1]};
  }
  return n;
}

int resihp__moved_has(const char *list, int replica) {
  int *ids = NULL, n = 0, here = 0;
  if (resihp__wire_parse_ints(list, 1 << 24, &ids, &n))
    return RESIHP_EPROTO;
  for (int i = 0; i < n; i++)
    here |= ids[i] == replica;
  free(ids);
  return here;
}

int resihp__shrunk_get(const char *list, int replica,
                       unsigned long long *dead) {
  long long v[2 * RESIHP__SHRUNK_ITEMS];
  int n = 0;
  *dead = 0;
  if (resihp__wire_parse_tuples(list, 2, (1 << 24) - 1, v,
                                RESIHP__SHRUNK_ITEMS, &n))
    return RESIHP_EPROTO;
  unsigned long long mine = 0;
  for (int i = 0; i < n; i++) {
    if (v[2 * i + 1] >= RESIHP__SHRUNK_RANKS)
      return RESIHP_EPROTO;
    for (int j = 0; j < i; j++)
      if (v[2 * j] == v[2 * i] && v[2 * j + 1] == v[2 * i + 1])
        return RESIHP_EPROTO; /* said twice */
    if (v[2 * i] == replica)
      mine |= 1ULL << v[2 * i + 1];
  }
  *dead = mine;
  return mine != 0;
}
