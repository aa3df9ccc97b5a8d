/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-detect-eval: replay training traces (synthetic, or the user's own
 * logs) through resihp's detector and two naive baselines, and score them
 * against the faults that were injected or labelled.
 *
 * Every trace is replayed once; each iteration's samples go to all three
 * detectors. resihp gets every microbatch (resihp_detector_record), then
 * the end of the iteration (resihp_detector_end_iter, as the coordinator
 * does at the end of a step), the heartbeats implied by the samples (an
 * iteration has as many heartbeat periods as microbatches per rank, '#! mb';
 * a rank with samples in it, or declared idle, sends them all, a rank
 * without misses them all; 1 % are dropped at random on top, as a lossy
 * network would; the count of samples itself says nothing, since the
 * coordinator assigns microbatches by predicted cost) and, when a failed
 * rank shows up again, a reset (its replacement joined). The baselines get
 * each rank's iteration time. Only the detectors' own calls are timed.
 *
 * Scoring: an alarm is a transition into SLOW or FAILED (baselines: raising
 * the alarm). A SLOW alarm is a true positive when the rank has a labelled
 * slowdown that started at or before it and ended less than GRACE
 * iterations before it, a FAILED one when the rank has a labelled stop
 * under way; the first one per episode detects it (latency = alarm
 * iteration - start), later ones are duplicates; every other alarm is
 * false, FAILED ones included. MAPE is the predictor's
 * error on microbatches of ranks with no labelled fault, predicted from the
 * model as it stood at the start of the iteration.
 */
#include "config.h"

#include "detect-eval/eval.h"

#include <resihp.h>

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GRACE 3
#define HB_LOSS 0.01

struct alarm {
  int rank;
  uint32_t iter;
  double factor;
};

struct alarms {
  struct alarm *a;
  size_t n, cap;
};

static void push_alarm(struct alarms *l, int rank, uint32_t iter,
                       double factor) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    struct alarm *p = realloc(l->a, cap * sizeof(*p));
    if (!p) {
      fprintf(stderr, "resihp-detect-eval: out of memory\n");
      exit(1);
    }
    l->a = p;
    l->cap = cap;
  }
  l->a[l->n++] = (struct alarm){rank, iter, factor};
}

enum { DET_RESIHP, DET_KMEDIAN, DET_FIXED, N_DET };

struct det {
  char name[32];
  struct alarms slow, failed;
  double ns;
  uint64_t updates;
};

struct run {
  ev_source_t *src;
  struct det det[N_DET];
  double ape_sum;
  uint64_t ape_n;
  uint64_t samples;
  uint32_t iters;
};

static struct {
  uint64_t seed;
  uint32_t iters;
  int replicas, stages, mb, context;
  double margin_pct, k_median;
  const char *scenario;
  const char *write_trace;
  int check, verbose;
} opt = {.seed = 1,
         .iters = 10000,
         .replicas = 4,
         .stages = 4,
         .mb = 8,
         .context = 8192,
         .margin_pct = 25,
         .k_median = 1.2,
         .scenario = "all"};

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void on_event(int rank, resihp_health_state_t prev,
                     const resihp_rank_health_t *h, uint64_t iter, void *ud) {
  struct det *d = ud;
  if (h->state == RESIHP_HEALTH_SLOW && prev != RESIHP_HEALTH_SLOW)
    push_alarm(&d->slow, rank, (uint32_t)iter, h->slow_factor);
  if (h->state == RESIHP_HEALTH_FAILED && prev != RESIHP_HEALTH_FAILED)
    push_alarm(&d->failed, rank, (uint32_t)iter, 0);
}

/* Is rank inside a labelled fault at iteration it? */
static int faulty(const ev_source_t *s, int rank, uint32_t it) {
  for (size_t i = 0; i < s->nep; i++)
    if (s->ep[i].rank == rank && s->ep[i].start <= it && it < s->ep[i].end)
      return 1;
  return 0;
}

/* Iterations from..to-1 had no sample at all: every rank that has started
 * misses all their heartbeats (a job-wide hang is seen as one of them). */
static void missed_iterations(resihp_detector_t *d, uint32_t from, uint32_t to,
                              int periods, const int64_t *last_seen, int nr) {
  for (uint32_t g = from; g < to; g++)
    for (int m = 0; m < periods; m++)
      for (int r = 0; r < nr; r++)
        if (last_seen[r] >= 0)
          resihp_detector_heartbeat(d, r, g, 0);
}

static int replay(struct run *run) {
  ev_source_t *src = run->src;
  int nr = src->n_ranks;
  struct det *R = &run->det[DET_RESIHP];
  resihp_detector_config_t cfg;
  resihp_detector_config_init(&cfg, nr);
  cfg.slow_margin = opt.margin_pct / 100.0;
  if (cfg.min_slow > cfg.slow_margin)
    cfg.min_slow = cfg.slow_margin;
  cfg.on_event = on_event;
  cfg.userdata = R;
  resihp_detector_t *d = NULL;
  if (resihp_detector_create(&d, &cfg))
    return -1;
  ev_baseline_t *km = ev_baseline_create(EV_KMEDIAN, nr, opt.k_median);
  ev_baseline_t *fx =
      ev_baseline_create(EV_FIXED, nr, 1 + opt.margin_pct / 100);
  int *stage = malloc((size_t)nr * sizeof(int));
  int *count = calloc((size_t)nr, sizeof(int));
  int64_t *last_seen = malloc((size_t)nr * sizeof(int64_t));
  double *itime = calloc((size_t)nr, sizeof(double));
  uint8_t *labelled_fault = calloc((size_t)nr, 1);
  double *pred = NULL;
  size_t pred_cap = 0;
  if (!km || !fx || !stage || !count || !last_seen || !itime ||
      !labelled_fault) {
    fprintf(stderr, "resihp-detect-eval: out of memory\n");
    exit(1);
  }
  for (int r = 0; r < nr; r++) {
    stage[r] = -1;
    last_seen[r] = -1;
  }
  int *declared = malloc((size_t)nr * sizeof(int));
  if (!declared) {
    fprintf(stderr, "resihp-detect-eval: out of memory\n");
    exit(1);
  }
  size_t mbc = 0;        /* cursor into src->mbl */
  int periods = src->mb; /* heartbeat periods per iteration */
  ev_rng_t hb = {opt.seed ^ 0x5eedULL};
  uint32_t it;
  const ev_sample_t *s;
  size_t n;
  int rc;
  uint32_t next_it = 0; /* the iteration after the last one replayed */
  while ((rc = src->next(src, &it, &s, &n)) > 0) {
    /* Iterations without any sample (the whole job hung): nobody sent a
     * heartbeat in them. */
    missed_iterations(d, next_it, it, periods, last_seen, nr);
    next_it = it + 1;
    if (n > pred_cap) {
      pred_cap = 2 * n;
      pred = realloc(pred, pred_cap * sizeof(double));
      if (!pred) {
        fprintf(stderr, "resihp-detect-eval: out of memory\n");
        exit(1);
      }
    }
    for (int r = 0; r < nr; r++) {
      count[r] = 0;
      itime[r] = 0;
      declared[r] = -1;
      labelled_fault[r] = src->labelled ? (uint8_t)faulty(src, r, it) : 0;
    }
    /* Microbatch counts declared up to this iteration ('#! mb'). */
    for (; mbc < src->nmb && src->mbl[mbc].iter <= it; mbc++) {
      const ev_mb_t *m = &src->mbl[mbc];
      if (m->rank < 0)
        periods = m->count > 0 ? m->count : 1;
      else if (m->iter == it)
        declared[m->rank] = m->count;
    }
    /* Arrivals: stage changes, and replacements of failed ranks. */
    for (size_t i = 0; i < n; i++) {
      int r = s[i].rank;
      if (count[r]++ == 0) {
        resihp_rank_health_t h;
        resihp_detector_health(d, r, &h);
        if (h.state == RESIHP_HEALTH_FAILED) {
          resihp_detector_reset_rank(d, r, it);
          ev_baseline_reset_rank(km, r);
          ev_baseline_reset_rank(fx, r);
        } else if (last_seen[r] >= 0 && last_seen[r] + 1 < (int64_t)it) {
          ev_baseline_reset_rank(km, r); /* came back after a gap */
          ev_baseline_reset_rank(fx, r);
        }
        last_seen[r] = it;
      }
      if (stage[r] != s[i].stage) {
        stage[r] = s[i].stage;
        resihp_detector_set_stage(d, r, s[i].stage);
      }
      itime[r] += s[i].t;
    }
    for (size_t i = 0; i < n; i++)
      if (resihp_detector_predict(d, s[i].rank, &s[i].w, &pred[i]))
        pred[i] = 0;
    double t0 = now_ns();
    for (size_t i = 0; i < n; i++)
      if (resihp_detector_record(d, s[i].rank, it, &s[i].w, s[i].t) ==
          RESIHP_EINVAL)
        return -1;
    resihp_detector_end_iter(d, it);
    R->ns += now_ns() - t0;
    R->updates += n;
    for (size_t i = 0; i < n; i++)
      if (pred[i] > 0 && !labelled_fault[s[i].rank]) {
        run->ape_sum += fabs(pred[i] - s[i].t) / s[i].t;
        run->ape_n++;
      }
    /* Heartbeat periods: as many as microbatches per rank. A rank that
     * computed anything, or was given nothing, is alive all iteration. */
    for (int m = 0; m < periods; m++)
      for (int r = 0; r < nr; r++) {
        if (last_seen[r] < 0)
          continue; /* not started yet */
        int alive = count[r] > 0 || declared[r] == 0;
        int got = alive && ev_uniform(&hb) >= HB_LOSS;
        resihp_detector_heartbeat(d, r, it, got);
      }
    for (int b = 0; b < 2; b++) {
      ev_baseline_t *bl = b ? fx : km;
      struct det *D = &run->det[b ? DET_FIXED : DET_KMEDIAN];
      t0 = now_ns();
      for (int r = 0; r < nr; r++)
        if (count[r] && ev_baseline_update(bl, r, itime[r]))
          push_alarm(&D->slow, r, it, 0);
      D->ns += now_ns() - t0;
      for (int r = 0; r < nr; r++)
        D->updates += count[r] > 0;
    }
    run->samples += n;
    run->iters = it + 1;
  }
  if (rc >= 0 && src->n_iters > next_it) { /* a hang that ends the trace */
    missed_iterations(d, next_it, src->n_iters, periods, last_seen, nr);
    run->iters = src->n_iters;
  }
  free(pred);
  free(declared);
  free(stage);
  free(count);
  free(last_seen);
  free(itime);
  free(labelled_fault);
  ev_baseline_destroy(km);
  ev_baseline_destroy(fx);
  resihp_detector_destroy(d);
  if (rc < 0) {
    fprintf(stderr, "resihp-detect-eval: %s\n", src->err);
    return -1;
  }
  return 0;
}

/* ---- scoring ---- */

enum {
  C_PERSIST,   /* compute >= 1.2x, lasting >= 100 iterations */
  C_TRANSIENT, /* compute >= 1.2x, shorter */
  C_MILD,      /* compute < 1.2x */
  C_COMM,      /* communication, stretching the microbatch >= 5 % */
  C_COMM_LOW,  /* communication, stretching it less */
  C_RAMP,      /* a slowdown that ramps up (then may hold) */
  C_STOP,      /* fail-stop */
  C_HANG,      /* the whole job hung */
  N_CLASS
};
static const char *const class_name[N_CLASS] = {"compute >=1.2x persistent",
                                                "compute >=1.2x transient",
                                                "compute <1.2x",
                                                "comm, effective >=1.05x",
                                                "comm, effective <1.05x",
                                                "ramp (then hold)",
                                                "fail-stop",
                                                "job-wide hang"};

static int class_of(const ev_episode_t *e) {
  if (e->kind == EV_STOP)
    return C_STOP;
  if (e->kind == EV_HANG)
    return C_HANG;
  if (e->ramp_from > 0)
    return C_RAMP;
  if (e->kind == EV_COMM) {
    double eff = e->eff > 0 ? e->eff
                 : e->eff_n ? e->eff_sum / e->eff_n
                            : e->factor;
    return eff >= 1.05 ? C_COMM : C_COMM_LOW;
  }
  if (e->factor < 1.2 - 1e-9)
    return C_MILD;
  return e->end - e->start >= 100 ? C_PERSIST : C_TRANSIENT;
}

struct score {
  size_t alarms, tp, fp, dup;
  size_t n[N_CLASS], hit[N_CLASS], hit3[N_CLASS];
  double lat_sum[N_CLASS];
  uint32_t *lat[N_CLASS];
  size_t nlat[N_CLASS];
  double ferr_sum;
  size_t ferr_n;
  size_t stop_fp;
  uint32_t *latency; /* per episode: first alarm - start, UINT32_MAX none */
};

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

static void score_alarms(const ev_source_t *src, const struct alarms *al,
                         int stops, struct score *sc, uint32_t *latency) {
  for (size_t k = 0; k < al->n; k++) {
    const struct alarm *a = &al->a[k];
    size_t match = SIZE_MAX;
    for (size_t i = 0; i < src->nep; i++) {
      const ev_episode_t *e = &src->ep[i];
      /* a job-wide hang is detected by any rank's FAILED */
      int stop = e->kind == EV_STOP || e->kind == EV_HANG;
      if ((e->rank != a->rank && e->kind != EV_HANG) || stop != stops)
        continue;
      uint32_t until = stops ? e->end : e->end + GRACE;
      if (e->start <= a->iter && a->iter < until) {
        match = i;
        break;
      }
    }
    sc->alarms++;
    if (match == SIZE_MAX) {
      if (opt.verbose && al->n < 1000)
        printf("  false %s alarm: rank %d iteration %u factor %.2f\n",
               stops ? "fail-stop" : "fail-slow", a->rank, a->iter, a->factor);
      if (stops)
        sc->stop_fp++;
      sc->fp++; /* a FAILED alarm without a labelled stop is false too */
      continue;
    }
    if (latency[match] != UINT32_MAX) {
      sc->dup++;
      continue;
    }
    sc->tp++;
    const ev_episode_t *e = &src->ep[match];
    latency[match] = a->iter - e->start;
    if (!stops && a->factor > 0) {
      /* the slowdown of the measured time at the alarm (ramps move) */
      double eff =
          ev_episode_effective(e, a->iter < e->end ? a->iter : e->end - 1);
      sc->ferr_sum += fabs(a->factor - eff) / eff;
      sc->ferr_n++;
    }
  }
}

static void score(const struct run *run, int det, struct score *sc) {
  const ev_source_t *src = run->src;
  memset(sc, 0, sizeof(*sc));
  uint32_t *latency = malloc((src->nep + 1) * sizeof(uint32_t));
  for (int c = 0; c < N_CLASS; c++)
    sc->lat[c] = malloc((src->nep + 1) * sizeof(uint32_t));
  for (size_t i = 0; i < src->nep; i++)
    latency[i] = UINT32_MAX;
  sc->latency = latency;
  score_alarms(src, &run->det[det].slow, 0, sc, latency);
  score_alarms(src, &run->det[det].failed, 1, sc, latency);
  for (size_t i = 0; i < src->nep; i++) {
    int c = class_of(&src->ep[i]);
    if (opt.verbose && det == DET_RESIHP && latency[i] == UINT32_MAX)
      printf("  missed by resihp: rank %d %s %.2fx (effective %.3fx) "
             "iterations %u..%u\n",
             src->ep[i].rank,
             src->ep[i].kind == EV_STOP   ? "stop"
             : src->ep[i].kind == EV_HANG ? "job hang"
             : src->ep[i].kind == EV_COMM ? "comm"
                                          : "compute",
             src->ep[i].factor,
             ev_episode_effective(&src->ep[i], src->ep[i].end - 1),
             src->ep[i].start, src->ep[i].end);
    sc->n[c]++;
    if (latency[i] == UINT32_MAX)
      continue;
    sc->hit[c]++;
    sc->hit3[c] += latency[i] <= 3;
    sc->lat_sum[c] += latency[i];
    sc->lat[c][sc->nlat[c]++] = latency[i];
  }
  for (int c = 0; c < N_CLASS; c++)
    qsort(sc->lat[c], sc->nlat[c], sizeof(uint32_t), cmp_u32);
}

static void score_free(struct score *sc) {
  for (int c = 0; c < N_CLASS; c++)
    free(sc->lat[c]);
  free(sc->latency);
}

/* The true (effective) slowdown of episode i when first flagged; 0 if
 * never. */
static double flagged_at(const ev_source_t *src, const struct score *sc,
                         size_t i) {
  const ev_episode_t *e = &src->ep[i];
  uint32_t l = sc->latency[i];
  if (l == UINT32_MAX)
    return 0;
  return ev_episode_effective(e, e->start + l < e->end ? e->start + l
                                                       : e->end - 1);
}

/* A trace with ramps: per slowdown, when each detector first flagged it and
 * the rank's true (effective) slowdown then; a step's shows the factor a
 * step needs, a ramp's whether the baseline followed it. */
static void report_shapes(const ev_source_t *src, const struct score *sc) {
  int ramps = 0;
  for (size_t i = 0; i < src->nep; i++)
    ramps |= src->ep[i].ramp_from > 0;
  if (!ramps)
    return;
  printf("  %-4s %-27s", "rank", "slowdown (true factor)");
  for (int k = 0; k < N_DET; k++)
    printf(" %-22s", k == DET_RESIHP    ? "resihp: delay @factor"
                     : k == DET_KMEDIAN ? "k*median"
                                        : "fixed");
  printf("\n");
  for (size_t i = 0; i < src->nep; i++) {
    const ev_episode_t *e = &src->ep[i];
    if (e->kind == EV_STOP || e->kind == EV_HANG)
      continue;
    char shape[64];
    uint32_t top = e->hold > e->start ? e->hold : e->end - 1;
    if (e->ramp_from > 0)
      snprintf(shape, sizeof(shape), "ramp %.2f-%.2f/%u it, hold %u",
               ev_episode_effective(e, e->start), ev_episode_effective(e, top),
               top - e->start, e->end - top);
    else
      snprintf(shape, sizeof(shape), "step %.2f for %u it",
               ev_episode_effective(e, e->start), e->end - e->start);
    printf("  %4d %-27s", e->rank, shape);
    for (int k = 0; k < N_DET; k++) {
      uint32_t l = sc[k].latency[i];
      char cell[32];
      if (l == UINT32_MAX)
        snprintf(cell, sizeof(cell), "never");
      else
        snprintf(cell, sizeof(cell), "%u it @%.3f", l,
                 flagged_at(src, &sc[k], i));
      printf(" %-22s", cell);
    }
    printf("\n");
  }
}

static void pct(char *buf, size_t len, size_t num, size_t den) {
  if (den)
    snprintf(buf, len, "%.1f", 100.0 * num / den);
  else
    snprintf(buf, len, "-");
}

static int failures; /* targets missed (--check) */

static void target(int ok, const char *trace, const char *what) {
  if (!ok) {
    failures++;
    printf("TARGET MISSED: %s: %s\n", trace, what);
  }
}

/* --check on a trace with ramps: the smallest step caught is the factor a
 * step needs; every ramp that rises past it is flagged, and no later than
 * at RAMP_TOL above it (the baseline does not follow the ramp). Most are
 * within 0.05; a fast ramp rises on while its excess accumulates, and a
 * rank's own thermal wander (2 %) adds to the ramp or takes from it. */
#define RAMP_TOL 0.08
static void ramp_targets(const ev_source_t *src, const struct score *sc) {
  double step = 0;
  for (size_t i = 0; i < src->nep; i++) {
    const ev_episode_t *e = &src->ep[i];
    double f = flagged_at(src, sc, i);
    if (e->kind != EV_STOP && e->kind != EV_HANG && !(e->ramp_from > 0) &&
        f > 0 && (step == 0 || f < step))
      step = f;
  }
  if (step == 0)
    return;
  for (size_t i = 0; i < src->nep; i++) {
    const ev_episode_t *e = &src->ep[i];
    if (!(e->ramp_from > 0) || e->kind == EV_STOP || e->kind == EV_HANG ||
        ev_episode_effective(e, e->end - 1) < step + RAMP_TOL)
      continue;
    double f = flagged_at(src, sc, i);
    char what[160];
    snprintf(what, sizeof(what),
             "rank %d's ramp flagged at a true factor <= %.3f (the smallest "
             "step caught, %.3f, + %.3f); flagged at %.3f",
             e->rank, step + RAMP_TOL, step, RAMP_TOL, f);
    target(f > 0 && f <= step + RAMP_TOL, src->name, what);
  }
}

static void report(struct run *run) {
  const ev_source_t *src = run->src;
  double fa_norm = run->iters ? 1e4 / run->iters : 0;
  char mape[16], buf[3][16];
  if (run->ape_n)
    snprintf(mape, sizeof(mape), "%.2f", 100 * run->ape_sum / run->ape_n);
  else
    snprintf(mape, sizeof(mape), "-");
  struct score sc[N_DET];
  for (int k = 0; k < N_DET; k++) {
    score(run, k, &sc[k]);
    const struct det *D = &run->det[k];
    pct(buf[0], sizeof(buf[0]), sc[k].tp, sc[k].tp + sc[k].fp);
    size_t slow_n = 0, slow_hit = 0;
    for (int c = 0; c < C_STOP; c++) {
      slow_n += sc[k].n[c];
      slow_hit += sc[k].hit[c];
    }
    pct(buf[1], sizeof(buf[1]), slow_hit, slow_n);
    if (!src->labelled) {
      snprintf(buf[0], sizeof(buf[0]), "n/a");
      snprintf(buf[1], sizeof(buf[1]), "n/a");
    }
    char iters[16] = "", fa[16];
    if (!k)
      snprintf(iters, sizeof(iters), "%u", run->iters);
    if (src->labelled)
      snprintf(fa, sizeof(fa), "%.2f", sc[k].fp * fa_norm);
    else
      snprintf(fa, sizeof(fa), "n/a");
    printf("%-18s %7s %-15s %6zu %7s %8s %9s %6s %9.0f\n", k ? "" : src->name,
           iters, D->name, run->det[k].slow.n + run->det[k].failed.n, buf[0],
           buf[1], fa, k == DET_RESIHP ? mape : "-",
           D->updates ? D->ns / D->updates : 0.0);
  }
  if (src->nep) {
    printf("  %-27s %5s  %-15s %8s %8s %8s %5s %5s\n", "fault class", "n",
           "detector", "recall%", "<=3it%", "lat.mean", "p99", "max");
    for (int c = 0; c < N_CLASS; c++) {
      if (!sc[0].n[c])
        continue;
      for (int k = 0; k < N_DET; k++) {
        if ((c == C_STOP || c == C_HANG) && k != DET_RESIHP)
          continue;
        const struct score *x = &sc[k];
        pct(buf[0], sizeof(buf[0]), x->hit[c], x->n[c]);
        pct(buf[1], sizeof(buf[1]), x->hit3[c], x->n[c]);
        if (x->nlat[c])
          printf("  %-27s %5zu  %-15s %8s %8s %8.2f %5u %5u\n",
                 k ? "" : class_name[c], x->n[c], run->det[k].name, buf[0],
                 buf[1], x->lat_sum[c] / x->nlat[c],
                 x->lat[c][(x->nlat[c] * 99 + 99) / 100 - 1],
                 x->lat[c][x->nlat[c] - 1]);
        else
          printf("  %-27s %5zu  %-15s %8s %8s %8s %5s %5s\n",
                 k ? "" : class_name[c], x->n[c], run->det[k].name, buf[0],
                 buf[1], "-", "-", "-");
      }
    }
    if (sc[0].ferr_n)
      printf("  resihp speed factor error at detection: %.1f %% (mean, vs "
             "the effective slowdown)\n",
             100 * sc[0].ferr_sum / sc[0].ferr_n);
    if (sc[0].n[C_STOP])
      printf("  resihp fail-stop false alarms: %zu\n", sc[0].stop_fp);
    report_shapes(src, sc);
  }
  if (src->labelled && sc[0].stop_fp)
    printf("  resihp FAILED without a labelled stop: %zu (counted as false "
           "alarms)\n",
           sc[0].stop_fp);
  if (opt.check) {
    if (src->labelled && src->nep == 0)
      target(run->det[0].slow.n == 0 && run->det[0].failed.n == 0, src->name,
             "zero false alarms on variability-only trace");
    if (sc[0].n[C_PERSIST])
      target(sc[0].hit3[C_PERSIST] * 100 >= sc[0].n[C_PERSIST] * 99, src->name,
             "recall >= 99 % within 3 iterations for >= 1.2x persistent");
    if (run->ape_n)
      target(run->ape_sum / run->ape_n <= 0.02, src->name, "MAPE <= 2 %");
    ramp_targets(src, &sc[DET_RESIHP]);
  }
  if (opt.verbose)
    for (int k = 0; k < N_DET; k++)
      for (size_t i = 0; i < run->det[k].slow.n; i++)
        printf("  alarm %-15s rank %4d iteration %7u factor %.2f\n",
               run->det[k].name, run->det[k].slow.a[i].rank,
               run->det[k].slow.a[i].iter, run->det[k].slow.a[i].factor);
  for (int k = 0; k < N_DET; k++)
    score_free(&sc[k]);
}

static void header(int ntraces) {
  static int done;
  if (done++)
    return;
  if (ntraces)
    printf("resihp-detect-eval: %d trace file(s), slow margin %.0f %%\n",
           ntraces, opt.margin_pct);
  else
    printf("resihp-detect-eval: seed %llu, %d replicas x %d stages, %d "
           "microbatches/iteration, context %d, slow margin %.0f %%\n",
           (unsigned long long)opt.seed, opt.replicas, opt.stages, opt.mb,
           opt.context, opt.margin_pct);
  printf("%-18s %7s %-15s %6s %7s %8s %9s %6s %9s\n", "trace", "iters",
         "detector", "alarms", "prec%", "recall%", "FA/1e4it", "MAPE%",
         "ns/update");
}

static int evaluate(ev_source_t *src, int ntraces) {
  header(ntraces);
  struct run run = {.src = src};
  snprintf(run.det[DET_RESIHP].name, 32, "resihp");
  snprintf(run.det[DET_KMEDIAN].name, 32, "k*median(%.2g)", opt.k_median);
  snprintf(run.det[DET_FIXED].name, 32, "fixed(%.3g)",
           1 + opt.margin_pct / 100);
  int rc = replay(&run);
  if (!rc)
    report(&run);
  for (int k = 0; k < N_DET; k++) {
    free(run.det[k].slow.a);
    free(run.det[k].failed.a);
  }
  return rc;
}

static const struct {
  const char *name;
  int packed, faults;
} scenarios[] = {
    {"var-packed", 1, 0},      {"var-unpacked", 0, 0}, {"faults-packed", 1, 1},
    {"faults-unpacked", 0, 1}, {"ramps", 0, 2},
};
#define N_SCEN (int)(sizeof(scenarios) / sizeof(scenarios[0]))

static ev_source_t *make_scenario(int i) {
  ev_gen_params_t p = {.replicas = opt.replicas,
                       .stages = opt.stages,
                       .mb = opt.mb,
                       .iters = opt.iters,
                       .packed = scenarios[i].packed,
                       .faults = scenarios[i].faults,
                       .context = opt.context,
                       .seed = opt.seed * 1000003ULL + (uint64_t)i};
  ev_source_t *s = ev_gen_create(&p, scenarios[i].name);
  if (!s) {
    fprintf(stderr, "resihp-detect-eval: out of memory\n");
    exit(1);
  }
  return s;
}

/* The predictor alone, on the microbatches of a generated trace: the cost
 * the hot path pays per microbatch before any detection logic. */
static void predictor_cost(void) {
  ev_gen_params_t p = {.replicas = 4,
                       .stages = 1,
                       .mb = 8,
                       .iters = 500,
                       .packed = 0,
                       .context = opt.context,
                       .seed = opt.seed};
  ev_source_t *src = ev_gen_create(&p, "cost");
  resihp_predictor_t *pr = NULL;
  if (!src || resihp_predictor_create(&pr, 0)) {
    ev_source_destroy(src);
    return;
  }
  uint32_t it;
  const ev_sample_t *s;
  size_t n;
  double ns = 0;
  uint64_t updates = 0;
  while (src->next(src, &it, &s, &n) > 0) {
    double t0 = now_ns();
    for (size_t i = 0; i < n; i++)
      resihp_predictor_update(pr, &s[i].w, s[i].t, 1.0);
    ns += now_ns() - t0;
    updates += n;
  }
  printf("resihp predictor alone: %.0f ns/update (%llu updates)\n",
         ns / (double)updates, (unsigned long long)updates);
  resihp_predictor_destroy(pr);
  ev_source_destroy(src);
}

static void usage(FILE *f) {
  fprintf(
      f, "usage: resihp-detect-eval [options] [--trace FILE]...\n"
         "Replay training traces through resihp's fail-slow/fail-stop "
         "detector and\n"
         "two naive baselines; print precision, recall, false alarms, "
         "latency, MAPE\n"
         "and cost. Without --trace, generated traces are used.\n"
         "  --seed N            random seed (default 1)\n"
         "  --iters N           iterations per generated trace (10000)\n"
         "  --replicas N        data-parallel replicas (4)\n"
         "  --stages N          pipeline stages (4)\n"
         "  --microbatches N    microbatches per rank per iteration (8)\n"
         "  --context N         context window in tokens (8192)\n"
         "  --scenario NAME     all, var-packed, var-unpacked, faults-packed,\n"
         "                      faults-unpacked, ramps (default all)\n"
         "  --trace FILE        replay FILE (text format, see the man "
         "page; - = stdin)\n"
         "  --write-trace FILE  write the generated --scenario to FILE and "
         "exit\n"
         "  --slow-margin PCT   resihp's slow margin (25)\n"
         "  --k K               k of the k*median baseline (1.2)\n"
         "  --check             exit 1 unless the detector meets its "
         "targets\n"
         "  --verbose           list every alarm\n"
         "Trace lines: 'iter rank stage tokens sum_l2 nseq time_us'; "
         "directives:\n"
         "  #! mb M | #! mb ITER M | #! mb ITER RANK M   microbatches per "
         "iteration\n"
         "  #! slow RANK START END FACTOR compute|comm [ramp=FROM] "
         "[hold=H]\n"
         "     [eff=EFFECTIVE]\n"
         "  #! stop RANK START REJOIN   #! hang START END   #! nofault   "
         "(ground truth)\n"
         "Iterations without samples are ones in which no rank sent a "
         "heartbeat.\n");
}

static int parse_num(const char *arg, const char *name, double lo, double hi,
                     double *out) {
  char *end;
  double v = strtod(arg, &end);
  if (end == arg || *end || !(v >= lo && v <= hi)) {
    fprintf(stderr, "resihp-detect-eval: %s '%s': give a number in %g..%g\n",
            name, arg, lo, hi);
    exit(2);
  }
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"seed", required_argument, 0, 's'},
      {"iters", required_argument, 0, 'i'},
      {"replicas", required_argument, 0, 'r'},
      {"stages", required_argument, 0, 'p'},
      {"microbatches", required_argument, 0, 'm'},
      {"context", required_argument, 0, 'c'},
      {"scenario", required_argument, 0, 'S'},
      {"trace", required_argument, 0, 't'},
      {"write-trace", required_argument, 0, 'w'},
      {"slow-margin", required_argument, 0, 'M'},
      {"k", required_argument, 0, 'k'},
      {"check", no_argument, 0, 'C'},
      {"verbose", no_argument, 0, 'v'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const char **traces = calloc((size_t)argc, sizeof(char *));
  int ntraces = 0, c;
  double v;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 's':
      parse_num(optarg, "--seed", 0, 1e15, &v);
      opt.seed = (uint64_t)v;
      break;
    case 'i':
      parse_num(optarg, "--iters", 200, 1e7, &v);
      opt.iters = (uint32_t)v;
      break;
    case 'r':
      parse_num(optarg, "--replicas", 1, 4096, &v);
      opt.replicas = (int)v;
      break;
    case 'p':
      parse_num(optarg, "--stages", 1, 256, &v);
      opt.stages = (int)v;
      break;
    case 'm':
      parse_num(optarg, "--microbatches", 1, 1024, &v);
      opt.mb = (int)v;
      break;
    case 'c':
      parse_num(optarg, "--context", 256, 1048576, &v);
      opt.context = (int)v;
      break;
    case 'S':
      opt.scenario = optarg;
      break;
    case 't':
      traces[ntraces++] = optarg;
      break;
    case 'w':
      opt.write_trace = optarg;
      break;
    case 'M':
      parse_num(optarg, "--slow-margin", 5, 1000, &opt.margin_pct);
      break;
    case 'k':
      parse_num(optarg, "--k", 1.01, 100, &opt.k_median);
      break;
    case 'C':
      opt.check = 1;
      break;
    case 'v':
      opt.verbose = 1;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "resihp-detect-eval: unexpected argument '%s'\n",
            argv[optind]);
    usage(stderr);
    return 2;
  }
  if ((double)opt.replicas * opt.stages > 65536) {
    fprintf(stderr, "resihp-detect-eval: at most 65536 ranks\n");
    return 2;
  }
  int sel = -1;
  if (strcmp(opt.scenario, "all")) {
    for (int i = 0; i < N_SCEN; i++)
      if (!strcmp(opt.scenario, scenarios[i].name))
        sel = i;
    if (sel < 0) {
      fprintf(stderr, "resihp-detect-eval: unknown scenario '%s'\n",
              opt.scenario);
      usage(stderr);
      return 2;
    }
  }
  if (!getenv("RESIHP_DEBUG"))
    resihp_log_set_level(opt.verbose ? RESIHP_LOG_WARN : RESIHP_LOG_ERROR);

  if (opt.write_trace) {
    if (sel < 0) {
      fprintf(stderr, "resihp-detect-eval: --write-trace needs one "
                      "--scenario\n");
      return 2;
    }
    ev_source_t *s = make_scenario(sel);
    char comment[256], err[600];
    snprintf(comment, sizeof(comment),
             "generated: scenario %s, seed %llu, %d replicas x %d stages, %u "
             "iterations, context %d",
             scenarios[sel].name, (unsigned long long)opt.seed, opt.replicas,
             opt.stages, opt.iters, opt.context);
    int rc = ev_write_trace(s, opt.write_trace, comment, err, sizeof(err));
    ev_source_destroy(s);
    if (rc)
      fprintf(stderr, "resihp-detect-eval: %s\n", err);
    free(traces);
    return rc ? 1 : 0;
  }

  int rc = 0;
  if (ntraces) {
    for (int i = 0; i < ntraces && !rc; i++) {
      char err[600];
      ev_source_t *s = ev_file_open(traces[i], err, sizeof(err));
      if (!s) {
        fprintf(stderr, "resihp-detect-eval: %s\n", err);
        rc = -1;
        break;
      }
      rc = evaluate(s, ntraces);
      ev_source_destroy(s);
    }
  } else {
    for (int i = 0; i < N_SCEN && !rc; i++) {
      if (sel >= 0 && i != sel)
        continue;
      ev_source_t *s = make_scenario(i);
      rc = evaluate(s, 0);
      ev_source_destroy(s);
    }
    if (!rc)
      predictor_cost();
  }
  free(traces);
  if (rc)
    return 1;
  if (opt.check && failures) {
    printf("resihp-detect-eval: %d target(s) missed\n", failures);
    return 1;
  }
  return 0;
}
