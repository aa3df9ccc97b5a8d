/* SPDX-License-Identifier: BSD-3-Clause */
/* Synthetic training traces for resihp-detect-eval.
 *
 * Job shape: replicas x stages ranks (data parallel x pipeline parallel;
 * tensor parallelism is inside a "rank"), mb microbatches per rank per
 * iteration. Every replica draws its own microbatches; all stages of a
 * replica run the same microbatch, the same stage of different replicas are
 * peers doing the same work on different data.
 *
 * Sequence lengths. Documents come from a long-tailed mixture: with
 * probability 0.85 log-normal with median 600 tokens and sigma 1.1 (web
 * text: most documents a few hundred tokens), otherwise Pareto with minimum
 * 2048 tokens and alpha 1.5 (books, code files, papers: a heavy tail that
 * reaches past any context window); at least 16 tokens, at most 1M.
 *   packed:   documents are concatenated and cut into windows of exactly
 *             `context` tokens (8192); attention is per document (variable
 *             length kernels), so a window holds the pieces of the documents
 *             that fall into it and a long document is split across windows.
 *             N is constant, sum l^2 swings from ~N^2/40 to N^2.
 *   unpacked: a microbatch is 4 documents, each truncated to `context`; N
 *             and sum l^2 both swing by orders of magnitude.
 *
 * Time model of a healthy rank of stage s (microseconds):
 *   compute = a_s N + b_s sum l^2 + e_s nseq + c_s
 *   comm    = g_s N + h_s                 (TP all-reduce, pipeline sends)
 * with per layer a = 1.0, b = 5e-5, e = 5, c = 150 and 8 layers per stage,
 * the last stage adding the LM head (a += 2.5) and the first the embedding
 * (c += 100); g = 1.6, h = 300. A packed microbatch takes ~85-110 ms,
 * communication ~13 % of it. On top of the model:
 *   - a static speed per rank (sigma 1 %, silicon lottery);
 *   - a slow thermal drift per rank (+-2 %, period 3000 iterations);
 *   - jitter per rank per iteration (sigma 0.4 %) and per microbatch
 *     (sigma 1 %), log-normal;
 *   - hiccups: one microbatch in 2000 takes 1.1-1.6x longer (GC, page
 *     faults, a preempted kernel);
 *   - cluster-wide swings: every ~1500 iterations (exponential), all ranks
 *     1.05-1.2x slower for 5-40 iterations (a checkpoint being written, a
 *     shared-network hiccup). Not faults: nothing to move away from.
 * With faults on, each rank sees, after a first exponential gap (mean 300
 * iterations, at least 100 after the start or a previous fault + 60):
 *   - 10 %: fail-stop, the rank stops for 30-80 iterations, then a
 *     replacement rejoins (fresh device, fresh predictor);
 *   - 90 %: fail-slow of factor 1.1, 1.2, 1.3, 1.5, 2 or 3 (uniform) on the
 *     compute (75 %) or the communication (25 %) of that rank, persistent
 *     (200-800 iterations, 50 %) or transient (3-30 iterations).
 * A communication slowdown of f stretches the microbatch by much less than
 * f (1 + 0.13 (f - 1)); the effective slowdown is recorded per episode.
 *
 * The ramps schedule (faults = 2) is fixed instead: a throttled device
 * (its whole microbatch time scaled) on ranks 0..7 (replicas 0 and 1, at
 * most 2 of a stage's 4 ranks slow at once), each a ramp from 1.0 to 1.2,
 * 1.35 or 1.6 over 100, 1000 or 10000 iterations (the longest at most the
 * trace less 1000) held 300 iterations at the top, on rank 6 steps of 1.2,
 * 1.35 and 1.6 and on rank 7 of 1.04 to 1.1 (the factor a step needs to be
 * caught); last, a hang of the
 * whole job: 20 iterations without samples.
 */
#include "config.h"

#include "eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- shared helpers ---- */

uint64_t ev_rng_next(ev_rng_t *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double ev_uniform(ev_rng_t *r) {
  return ((double)(ev_rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
}

double ev_normal(ev_rng_t *r) {
  return sqrt(-2 * log(ev_uniform(r))) * cos(2 * M_PI * ev_uniform(r));
}

int ev_grow(void **arr, size_t *cap, size_t n, size_t size) {
  if (n < *cap)
    return 0;
  size_t c = *cap ? 2 * *cap : 64;
  void *p = realloc(*arr, c * size);
  if (!p)
    return -1;
  *arr = p;
  *cap = c;
  return 0;
}

int ev_add_episode(ev_source_t *s, const ev_episode_t *e) {
  if (ev_grow((void **)&s->ep, &s->ep_cap, s->nep, sizeof(*e)))
    return -1;
  s->ep[s->nep++] = *e;
  return 0;
}

double ev_episode_factor(const ev_episode_t *e, uint32_t it) {
  uint32_t top = e->hold > e->start ? e->hold : e->end - 1;
  if (!(e->ramp_from > 0) || top <= e->start)
    return e->factor;
  double x = it <= e->start ? 0
             : it >= top    ? 1
                            : (double)(it - e->start) / (top - e->start);
  return e->ramp_from + (e->factor - e->ramp_from) * x;
}

double ev_episode_effective(const ev_episode_t *e, uint32_t it) {
  double f = ev_episode_factor(e, it);
  double eff = e->eff > 0 ? e->eff : e->eff_n ? e->eff_sum / e->eff_n : 0;
  if (!(eff > 0))
    return f;
  if (e->factor <= 1)
    return eff;
  return 1 + (eff - 1) * (f - 1) / (e->factor - 1);
}

void ev_source_destroy(ev_source_t *s) {
  if (s && s->destroy)
    s->destroy(s);
}

/* ---- generator ---- */

#define MBS_UNPACKED 4
#define DOC_MAX 1000000.0

struct cost {
  double a, b, e, c, g, h;
};

struct swing {
  uint32_t start, end;
  double f;
};

struct gen {
  ev_source_t src; /* first: the source interface */
  ev_gen_params_t p;
  ev_rng_t rng;
  uint32_t it;
  int n_ranks;
  ev_sample_t *buf;
  double *speed, *phase, *jit, *carry;
  struct cost *cost;
  struct swing *sw;
  size_t nsw, isw;
  size_t *cursor, *rank_end;     /* per rank, into src.ep (grouped by rank) */
  uint32_t hang_start, hang_end; /* no samples in [start, end) */
};

static double exp_draw(ev_rng_t *r, double mean) {
  return -mean * log(ev_uniform(r));
}

static double doc_len(ev_rng_t *r) {
  double l;
  if (ev_uniform(r) < 0.85)
    l = exp(log(600.0) + 1.1 * ev_normal(r));
  else
    l = 2048.0 * pow(ev_uniform(r), -1.0 / 1.5);
  l = floor(l);
  return l < 16 ? 16 : l > DOC_MAX ? DOC_MAX : l;
}

static resihp_workload_t draw_microbatch(struct gen *g, int rep) {
  resihp_workload_t w = {0, 0, 0};
  double C = g->p.context;
  if (!g->p.packed) {
    for (int i = 0; i < MBS_UNPACKED; i++) {
      double l = doc_len(&g->rng);
      l = l > C ? C : l;
      w.tokens += l;
      w.sum_l2 += l * l;
      w.nseq += 1;
    }
    return w;
  }
  double left = C;
  while (left > 0) {
    double l = g->carry[rep] > 0 ? g->carry[rep] : doc_len(&g->rng);
    double piece = l < left ? l : left;
    g->carry[rep] = l - piece;
    w.sum_l2 += piece * piece;
    w.nseq += 1;
    left -= piece;
  }
  w.tokens = C;
  return w;
}

/* Active episode of rank r at iteration it, or NULL. */
static ev_episode_t *active(struct gen *g, int r, uint32_t it) {
  size_t *c = &g->cursor[r];
  while (*c < g->rank_end[r] && g->src.ep[*c].end <= it)
    (*c)++;
  if (*c < g->rank_end[r] && g->src.ep[*c].start <= it)
    return &g->src.ep[*c];
  return NULL;
}

static int gen_next(ev_source_t *s, uint32_t *iter, const ev_sample_t **samples,
                    size_t *n) {
  struct gen *g = (struct gen *)s;
  if (g->it >= g->p.iters)
    return 0;
  if (g->it >= g->hang_start && g->it < g->hang_end)
    g->it = g->hang_end; /* the whole job hangs: nobody has samples */
  if (g->it >= g->p.iters)
    return 0;
  uint32_t it = g->it++;
  int S = g->p.stages;
  double global = 1.0;
  while (g->isw < g->nsw && g->sw[g->isw].end <= it)
    g->isw++;
  if (g->isw < g->nsw && g->sw[g->isw].start <= it)
    global = g->sw[g->isw].f;
  for (int r = 0; r < g->n_ranks; r++)
    g->jit[r] = exp(0.004 * ev_normal(&g->rng));
  size_t k = 0;
  for (int m = 0; m < g->p.mb; m++)
    for (int rep = 0; rep < g->p.replicas; rep++) {
      resihp_workload_t w = draw_microbatch(g, rep);
      for (int st = 0; st < S; st++) {
        int r = rep * S + st;
        ev_episode_t *e = active(g, r, it);
        if (e && e->kind == EV_STOP)
          continue;
        const struct cost *c = &g->cost[st];
        double drift = 1 + 0.02 * sin(2 * M_PI * it / 3000.0 + g->phase[r]);
        double comp =
            (c->a * w.tokens + c->b * w.sum_l2 + c->e * w.nseq + c->c) *
            g->speed[r] * drift;
        double comm = c->g * w.tokens + c->h;
        double healthy = comp + comm, t = healthy;
        if (e) {
          double f = ev_episode_factor(e, it);
          t = e->whole                ? healthy * f
              : e->kind == EV_COMPUTE ? comp * f + comm
                                      : comp + comm * f;
          e->eff_sum += t / healthy;
          e->eff_n++;
        }
        t *= global * g->jit[r] * exp(0.01 * ev_normal(&g->rng));
        if (ev_uniform(&g->rng) < 1.0 / 2000)
          t *= 1.1 + 0.5 * ev_uniform(&g->rng);
        g->buf[k++] =
            (ev_sample_t){.iter = it, .rank = r, .stage = st, .w = w, .t = t};
      }
    }
  *iter = it;
  *samples = g->buf;
  *n = k;
  return 1;
}

static void gen_destroy(ev_source_t *s) {
  struct gen *g = (struct gen *)s;
  free(g->buf);
  free(g->speed);
  free(g->phase);
  free(g->jit);
  free(g->carry);
  free(g->cost);
  free(g->sw);
  free(g->cursor);
  free(g->rank_end);
  free(g->src.ep);
  free(g->src.mbl);
  free(g);
}

static const double factors[] = {1.1, 1.2, 1.3, 1.5, 2.0, 3.0};

static int schedule_faults(struct gen *g) {
  uint32_t iters = g->p.iters;
  for (int r = 0; r < g->n_ranks; r++) {
    double t = 100 + exp_draw(&g->rng, 300);
    while (t < iters - 50) {
      ev_episode_t e = {.rank = r, .start = (uint32_t)t};
      double len;
      if (ev_uniform(&g->rng) < 0.10) {
        e.kind = EV_STOP;
        e.factor = 0;
        len = 30 + 50 * ev_uniform(&g->rng);
      } else {
        e.kind = ev_uniform(&g->rng) < 0.75 ? EV_COMPUTE : EV_COMM;
        e.factor = factors[(int)(ev_uniform(&g->rng) * 6) % 6];
        len = ev_uniform(&g->rng) < 0.5 ? 200 + 600 * ev_uniform(&g->rng)
                                        : 3 + 27 * ev_uniform(&g->rng);
      }
      double end = t + floor(len);
      e.end = end > iters ? iters : (uint32_t)end;
      if (ev_add_episode(&g->src, &e))
        return -1;
      t = end + (e.kind == EV_STOP ? 100 : 60) + exp_draw(&g->rng, 300);
    }
    g->rank_end[r] = g->src.nep;
    g->cursor[r] = r ? g->rank_end[r - 1] : 0;
  }
  return 0;
}

/* The ramps schedule (see the top of the file), rank by rank. */
static int schedule_ramps(struct gen *g) {
  static const struct {
    int rank;
    uint32_t start, len;
    double to;
  } plan[] = {
      {0, 300, 10000, 1.6}, {1, 300, 10000, 1.35}, {2, 300, 10000, 1.2},
      {3, 300, 1000, 1.6},  {3, 2000, 100, 1.6},   {4, 300, 1000, 1.35},
      {4, 2000, 100, 1.35}, {5, 300, 1000, 1.2},   {5, 2000, 100, 1.2},
      {6, 300, 1, 1.2},     {6, 1000, 1, 1.35},    {6, 1700, 1, 1.6},
      {7, 300, 1, 1.04},    {7, 1000, 1, 1.05},    {7, 1700, 1, 1.06},
      {7, 2400, 1, 1.07},   {7, 3100, 1, 1.08},    {7, 3800, 1, 1.1},
  };
  uint32_t iters = g->p.iters;
  size_t k = 0;
  for (int r = 0; r < g->n_ranks; r++) {
    for (; k < sizeof(plan) / sizeof(plan[0]) && plan[k].rank == r; k++) {
      uint32_t len = plan[k].len;
      if (len > 1000 && iters > 2000 + plan[k].start && len > iters - 1000)
        len = iters - 1000 - plan[k].start;
      ev_episode_t e = {.rank = r,
                        .start = plan[k].start,
                        .end = plan[k].start + len + 300,
                        .factor = plan[k].to,
                        .kind = EV_COMPUTE,
                        .eff = plan[k].to,
                        .whole = 1};
      if (len > 1) {
        e.ramp_from = 1.0;
        e.hold = e.start + len;
      }
      if (e.end + 300 <= iters && ev_add_episode(&g->src, &e))
        return -1;
    }
    g->rank_end[r] = g->src.nep;
    g->cursor[r] = r ? g->rank_end[r - 1] : 0;
  }
  if (iters >= 1000) {
    ev_episode_t h = {
        .rank = -1, .start = iters - 250, .end = iters - 230, .kind = EV_HANG};
    if (ev_add_episode(&g->src, &h))
      return -1;
    g->hang_start = h.start;
    g->hang_end = h.end;
  }
  return 0;
}

static int schedule_swings(struct gen *g) {
  size_t cap = 0;
  double t = exp_draw(&g->rng, 1500);
  while (t < g->p.iters) {
    if (g->nsw == cap) {
      cap = cap ? 2 * cap : 16;
      struct swing *p = realloc(g->sw, cap * sizeof(*p));
      if (!p)
        return -1;
      g->sw = p;
    }
    double len = 5 + floor(35 * ev_uniform(&g->rng));
    g->sw[g->nsw++] = (struct swing){(uint32_t)t, (uint32_t)(t + len),
                                     1.05 + 0.15 * ev_uniform(&g->rng)};
    t += len + 100 + exp_draw(&g->rng, 1500);
  }
  return 0;
}

ev_source_t *ev_gen_create(const ev_gen_params_t *p, const char *name) {
  struct gen *g = calloc(1, sizeof(*g));
  if (!g)
    return NULL;
  g->p = *p;
  g->rng.s = p->seed;
  g->n_ranks = p->replicas * p->stages;
  size_t nr = (size_t)g->n_ranks;
  g->buf = calloc(nr * (size_t)p->mb, sizeof(*g->buf));
  g->speed = calloc(nr, sizeof(double));
  g->phase = calloc(nr, sizeof(double));
  g->jit = calloc(nr, sizeof(double));
  g->carry = calloc((size_t)p->replicas, sizeof(double));
  g->cost = calloc((size_t)p->stages, sizeof(*g->cost));
  g->cursor = calloc(nr, sizeof(size_t));
  g->rank_end = calloc(nr, sizeof(size_t));
  g->src.next = gen_next;
  g->src.destroy = gen_destroy;
  if (!g->buf || !g->speed || !g->phase || !g->jit || !g->carry || !g->cost ||
      !g->cursor || !g->rank_end) {
    gen_destroy(&g->src);
    return NULL;
  }
  snprintf(g->src.name, sizeof(g->src.name), "%s", name);
  g->src.n_ranks = g->n_ranks;
  g->src.mb = p->mb;
  g->src.n_iters = p->iters;
  g->src.labelled = 1;
  for (int s = 0; s < p->stages; s++) {
    const int layers = 8;
    g->cost[s] = (struct cost){.a = 1.0 * layers,
                               .b = 5e-5 * layers,
                               .e = 5.0 * layers,
                               .c = 150.0 * layers,
                               .g = 1.6,
                               .h = 300};
    if (s == p->stages - 1)
      g->cost[s].a += 2.5;
    if (s == 0)
      g->cost[s].c += 100;
  }
  for (int r = 0; r < g->n_ranks; r++) {
    g->speed[r] = exp(0.01 * ev_normal(&g->rng));
    g->phase[r] = 2 * M_PI * ev_uniform(&g->rng);
  }
  if ((p->faults == 1 && schedule_faults(g)) ||
      (p->faults == 2 && schedule_ramps(g)) || schedule_swings(g)) {
    gen_destroy(&g->src);
    return NULL;
  }
  return &g->src;
}
