/* SPDX-License-Identifier: BSD-3-Clause */
/* Free runs with microbatches assigned by predicted cost.
 *
 * With assignment by cost the coordinator needs each step's workloads to
 * say who computes what. Rather than ask for them every step, it sends,
 * with START run=1, the plan of the run: the contributors in order, their
 * time multipliers, and for each shard the model of its reference rank
 * (the detector's fit, resihp_detector_model). Every rank of every member
 * then asks its data loader for the workloads of each following step,
 * costs them with the same function (resihp_model_costs) and assigns them
 * with the same planner call as the coordinator (resihp__costplan_owners,
 * which the coordinator itself uses for the step it starts), so that all
 * get the same owners bit for bit: the doubles travel as their IEEE-754
 * bits, the workloads as the integers WL would carry. Whoever cannot (no
 * data loader, a workload the model cannot cost) votes to end the run at
 * the next boundary (job_step.c), which then goes through the coordinator.
 *
 * The coordinator, which never sees those workloads, learns the owners
 * from the replicas (coord_schedule.c): the parser here trusts nothing. */
#include "config.h"

#include "costplan.h"

#include <resihp/error.h>
#include <resihp/planner.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FIG 16 /* hex digits of a double */
#define MODEL_FIGS (RESIHP_COEF__COUNT + 3)

int resihp__costplan_init(resihp__costplan_t *p, int cap, int K) {
  memset(p, 0, sizeof(*p));
  if (cap < 1 || K < 1)
    return RESIHP_EINVAL;
  p->contrib = malloc(sizeof(int) * (size_t)cap);
  p->slow = malloc(sizeof(double) * (size_t)cap);
  p->model = calloc((size_t)K, sizeof(resihp_model_t));
  if (!p->contrib || !p->slow || !p->model) {
    resihp__costplan_free(p);
    return RESIHP_ENOMEM;
  }
  p->cap = cap;
  p->K = K;
  return 0;
}

void resihp__costplan_free(resihp__costplan_t *p) {
  if (!p)
    return;
  free(p->contrib);
  free(p->slow);
  free(p->model);
  memset(p, 0, sizeof(*p));
}

static void put_fig(resihp__wire_buf_t *b, double v, int first) {
  uint64_t u;
  memcpy(&u, &v, sizeof(u));
  resihp__wire_buf_printf(b, "%s%016llx", first ? "" : ":",
                          (unsigned long long)u);
}

static size_t digits(int v) {
  size_t n = 1;
  for (; v >= 10; v /= 10)
    n++;
  return n;
}

/* The multipliers: "1" when all are 1; the few that are not as
 * "sPOS.X:POS.X" (positions ascending) when that is shorter; else all of
 * them, "X:X:...". Most replicas are not slow, so a plan with one slow
 * replica stays O(1) bytes, not O(N). */
static void put_slow(resihp__wire_buf_t *b, const resihp__costplan_t *p) {
  size_t sparse = 0, dense = (size_t)p->nc * (FIG + 1);
  for (int i = 0; i < p->nc; i++)
    if (p->slow[i] != 1.0)
      sparse += digits(i) + 1 + FIG + 1;
  if (!sparse) {
    resihp__wire_buf_printf(b, "1");
    return;
  }
  if (sparse >= dense) {
    for (int i = 0; i < p->nc; i++)
      put_fig(b, p->slow[i], !i);
    return;
  }
  resihp__wire_buf_printf(b, "s");
  for (int i = 0, first = 1; i < p->nc; i++)
    if (p->slow[i] != 1.0) {
      resihp__wire_buf_printf(b, "%s%d.", first ? "" : ":", i);
      put_fig(b, p->slow[i], 1);
      first = 0;
    }
}

void resihp__costplan_put(resihp__wire_buf_t *b, const resihp__costplan_t *p,
                          const int *list, int nlist) {
  int as_list = list && nlist == p->nc;
  for (int i = 0; as_list && i < p->nc; i++)
    as_list = p->contrib[i] == list[i];
  resihp__wire_buf_printf(b, " cby=");
  if (as_list)
    resihp__wire_buf_printf(b, "list");
  else
    resihp__wire_buf_ints(b, p->contrib, p->nc);
  resihp__wire_buf_printf(b, " cslow=");
  put_slow(b, p);
  resihp__wire_buf_printf(b, " cmod=");
  for (int k = 0; k < p->K; k++) {
    const resihp_model_t *m = &p->model[k];
    for (int i = 0; i < RESIHP_COEF__COUNT; i++)
      put_fig(b, m->theta[i], !k && !i);
    put_fig(b, m->n0, 0);
    put_fig(b, m->k0, 0);
    put_fig(b, m->t0, 0);
  }
}

/* One figure of exactly FIG lowercase hex digits at *s, finite; *s moves
 * past it. */
static int parse_fig(const char **s, double *out) {
  uint64_t u = 0;
  for (int d = 0; d < FIG; d++, (*s)++) {
    char c = **s;
    int v = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                   : -1;
    if (v < 0)
      return RESIHP_EPROTO;
    u = u << 4 | (uint64_t)v;
  }
  memcpy(out, &u, sizeof(u));
  return isfinite(*out) ? 0 : RESIHP_EPROTO;
}

/* n figures "X:X:...", all finite. */
static int parse_figs(const char *s, double *out, int n) {
  for (int i = 0; i < n; i++) {
    if (parse_fig(&s, &out[i]) || *s != (i + 1 < n ? ':' : '\0'))
      return RESIHP_EPROTO;
    s += i + 1 < n;
  }
  return 0;
}

/* The multipliers of n contributors as put_slow writes them. */
static int parse_slow(const char *s, double *out, int n) {
  if (!strcmp(s, "1") || *s == 's')
    for (int i = 0; i < n; i++)
      out[i] = 1.0;
  if (!strcmp(s, "1"))
    return 0;
  if (*s != 's')
    return parse_figs(s, out, n);
  long prev = -1;
  s++;
  do {
    char *end;
    if (*s < '0' || *s > '9')
      return RESIHP_EPROTO;
    long pos = strtol(s, &end, 10);
    if (pos <= prev || pos >= n || *end != '.')
      return RESIHP_EPROTO; /* not ascending, past the end */
    s = end + 1;
    if (parse_fig(&s, &out[pos]) || (*s && *s != ':'))
      return RESIHP_EPROTO;
    prev = pos;
  } while (*s && *s++ == ':');
  return 0;
}

int resihp__costplan_models(const char *msg) {
  size_t per = (size_t)(FIG + 1) * MODEL_FIGS,
         cap = per * RESIHP__COSTPLAN_MAX_MODELS + 1;
  char *v = malloc(cap);
  if (!v)
    return RESIHP_ENOMEM;
  int rc = resihp__wire_get(msg, "cmod", v, cap);
  size_t n = rc ? 0 : strlen(v) + 1;
  free(v);
  if (rc)
    return rc == RESIHP_ENOENT ? rc : RESIHP_EPROTO;
  return n % per ? RESIHP_EPROTO : (int)(n / per);
}

int resihp__costplan_parse(const char *msg, int max_id, resihp__costplan_t *p,
                           const int *list, int nlist) {
  size_t cap =
      (size_t)(FIG + 1) *
          (size_t)(p->cap > MODEL_FIGS * p->K ? p->cap : MODEL_FIGS * p->K) +
      1;
  char *v = malloc(cap);
  int *ids = NULL, n = 0, rc;
  char *seen = NULL;
  double *fig = NULL;
  p->nc = 0;
  if (!v)
    return RESIHP_ENOMEM;
  rc = resihp__wire_get(msg, "cby", v, cap);
  if (rc == RESIHP_ENOENT &&
      resihp__wire_get(msg, "cslow", v, cap) == RESIHP_ENOENT &&
      resihp__wire_get(msg, "cmod", v, cap) == RESIHP_ENOENT)
    goto out; /* no plan */
  rc = RESIHP_EPROTO;
  if (max_id < 1 || resihp__wire_get(msg, "cby", v, cap))
    goto out;
  if (!strcmp(v, "list")) { /* the member list the receiver holds */
    if (!list || nlist < 1 || nlist > p->cap)
      goto out;
    n = nlist;
    ids = malloc(sizeof(int) * (size_t)n);
    if (!ids)
      goto out;
    memcpy(ids, list, sizeof(int) * (size_t)n);
  } else if (resihp__wire_parse_ints(v, max_id, &ids, &n) || n < 1 ||
             n > p->cap) {
    goto out;
  }
  if (!(seen = calloc((size_t)max_id, 1)))
    goto out;
  for (int i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= max_id || seen[ids[i]]++)
      goto out; /* twice, or past the bound */
    p->contrib[i] = ids[i];
  }
  if (resihp__wire_get(msg, "cslow", v, cap) || parse_slow(v, p->slow, n))
    goto out;
  for (int i = 0; i < n; i++)
    if (!(p->slow[i] >= 1))
      goto out;
  size_t nf = (size_t)MODEL_FIGS * (size_t)p->K;
  if (resihp__wire_get(msg, "cmod", v, cap) ||
      strlen(v) != (FIG + 1) * nf - 1 || !(fig = malloc(sizeof(double) * nf)) ||
      parse_figs(v, fig, (int)nf))
    goto out;
  for (int k = 0; k < p->K; k++) {
    const double *f = fig + (size_t)k * MODEL_FIGS;
    resihp_model_t *m = &p->model[k];
    memcpy(m->theta, f, sizeof(m->theta));
    m->n0 = f[RESIHP_COEF__COUNT];
    m->k0 = f[RESIHP_COEF__COUNT + 1];
    m->t0 = f[RESIHP_COEF__COUNT + 2];
    if (!resihp_model_ok(m))
      goto out;
  }
  p->nc = n;
  rc = 0;
out:
  free(v);
  free(ids);
  free(seen);
  free(fig);
  return rc;
}

int resihp__costplan_owners(const resihp__costplan_t *p,
                            const resihp_workload_t *wl, int M, double *cost,
                            int *pick, int *owner) {
  if (!p || p->nc < 1)
    return RESIHP_EINVAL;
  int rc = resihp_model_costs(p->model, p->K, wl, M, cost);
  if (!rc)
    rc = resihp_planner_assign(RESIHP_ASSIGN_COST, cost, M, p->slow, p->nc,
                               pick, NULL);
  for (int mb = 0; !rc && mb < M; mb++)
    owner[mb] = p->contrib[pick[mb]];
  return rc;
}

long long resihp__costplan_whole(double v) {
  if (!(v >= 0))
    return 0;
  return v > 1e15 ? 1000000000000000LL : llround(v);
}

int resihp__costplan_rows(int M) {
  int rows = M > 0 ? RESIHP__COSTPLAN_OWNERS / M : 1;
  if (rows > RESIHP__COSTPLAN_ROWS)
    rows = RESIHP__COSTPLAN_ROWS;
  return rows < 1 ? 1 : rows;
}
