/* SPDX-License-Identifier: BSD-3-Clause */
/* Fail-slow detection: from the ranks' microbatch times to validated
 * slowdown factors.
 *
 * Per sample (O(1), no allocation): the rank's own predictor explains the
 * sequence-length swings, z = log(measured / predicted) stays within the
 * timing noise on a healthy device, and the sample is fitted (Huber weights
 * on the slow side, so that the rare hiccup does not bend the model) unless
 * the rank's last iteration was already in excess. The first ITER_BUF z of
 * the iteration are kept.
 *
 * Per iteration (when a sample of a later iteration arrives, or at
 * resihp_detector_end_iter; O(ranks log ranks), amortised over the
 * iteration's samples), each rank that had samples gets one number,
 *   A = log(own model's time for the stage's reference workload) + median z,
 * its speed on a fixed workload this iteration. A model that learnt a slow
 * device predicts more and its z shrinks by as much, so A does not care
 * whether the model is fresh, frozen or slow from the start. The rank's
 * excess is judged against three references:
 *   - its peers (the stage's other ranks, the same work): the mean A of the
 *     stage's faster half, E = A - ref. The faster half, not the median, so
 *     that a factor stays right when up to half the peers are slow too;
 *   - its stage's baseline: the faster half's A learnt slowly while the
 *     stage is healthy and frozen while it is not, X = A - base, so that a
 *     stage that is slow as a whole (every peer shares the slowdown) is
 *     still seen;
 *   - the job: J, the faster-half mean of every rank's X, so that a stall
 *     of the whole job (a checkpoint, a network hiccup) cancels.
 * The statistic is y = min(X - J, max(E, Hs)) with Hs the stage's
 * faster-half X less J: slower than its baseline beyond what the whole job
 * sees, and either slower than its peers or in a stage slow as a whole.
 * Judged is y less the rank's offset (its usual y: silicon, a degree of
 * thermal drift). The offset and the stage's baseline follow a healthy
 * pace slowly, but anchored (anchored()): once the rank's model has
 * settled they may rise only DRIFT x log(1 + min_slow) above the lowest
 * level they had, and the noise that sets the allowance is measured from
 * one iteration to the next. A drift slow enough to be followed would
 * otherwise carry the offset, the baseline and the noise with it and be
 * caught late or never (a throttle ramping 1.0 -> 1.6 over 1,000
 * iterations was flagged at 1.4, one that settled at 1.2 not at all); now
 * a drift of any speed is caught at about the factor a step is.
 *
 * Confirmation is over iterations, not samples: a one-sided CUSUM of y in
 * excess of an allowance k (the larger of 0.8*log(1+min_slow) and three
 * noise deviations, at most half the threshold), each iteration's step
 * capped at CLIP of the threshold log(1 + slow_margin), so that the
 * threshold takes at least three iterations; and y must have exceeded k in
 * the last confirm_iters iterations in a row in which the rank had samples
 * (a rank given no microbatch in a step neither confirms nor clears). The
 * lower median of those iterations' y must exceed log(1 + min_slow) and is
 * the factor. Two guards against stalls of the whole job whose start and end
 * differ by a few iterations from node to node: the minimum run (a rank
 * that enters a stall an iteration or two before the others never collects
 * it) and the stall window: while the largest J of the last STALL_WINDOW
 * iterations is within min_slow of the rank's X, its excess is the tail
 * of a stall the job just had, and confirmation waits.
 *
 * A SLOW verdict is re-validated every iteration with the same statistic: a
 * second CUSUM of log(1+min_slow) - y makes the rank HEALTHY again after
 * three iterations back at its peers' and baseline's speed, whatever its
 * own model learnt (a rank flagged by noise while warming up does not stay
 * SLOW). While SLOW the factor follows y.
 */
#include "config.h"

#include "detector-internal.h"

#include <resihp/log.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HUBER 2.5
#define CLIP 0.45         /* cap of one iteration's CUSUM step, x threshold */
#define MAD_ALPHA 0.02    /* memory of the per-sample noise: ~50 samples */
#define ISIG_ALPHA 0.05   /* memory of the per-iteration noise: ~20 */
#define FACTOR_ALPHA 0.3  /* smoothing of a SLOW rank's factor */
#define BASE_ALPHA 0.02   /* memory of a stage's baseline: ~50 iterations */
#define BASE_WARM 8       /* iterations averaged to set a baseline */
#define BASE_MODEL_N 4    /* x warm-up: samples fitted before a baseline */
#define WREF_N 64         /* samples averaged into a reference workload */
#define OFFSET_WARM 16    /* iterations averaged into a rank's own offset */
#define OFFSET_ALPHA 0.02 /* then its memory: ~50 iterations */
#define DRIFT                                                                  \
  0.5 /* how far, x log(1 + min_slow), a rank's offset and a                   \
         stage's baseline may rise above their lowest level */

void resihp__stage_init(struct resihp__stage *s, int id) {
  memset(s, 0, sizeof(*s));
  s->id = id;
  s->head = -1;
}

void resihp__failslow_reset(resihp_detector_t *d, int rank) {
  struct resihp__rank *r = &d->ranks[rank];
  resihp__pred_init(&r->pred, d->cfg.forget);
  r->mad = 0;
  r->bias = 0;
  r->it_n = 0;
  r->it_last = 0;
  r->A = r->X = r->y = 0;
  r->judged = 0;
  r->fs = RESIHP__FS_OK;
  r->isig = 0;
  r->y_prev = 0;
  r->y_prev_ok = 0;
  r->offset = 0;
  r->offset_lo = 0;
  r->offset_n = 0;
  r->settle_from = 0;
  r->cusum = 0;
  r->down = 0;
  r->run = 0;
  r->factor_log = 0;
  r->vs_peers = 0;
  r->reported = 1;
  r->ring_n = 0;
  r->ring_head = 0;
  r->samples = 0;
}

static double sigma(const struct resihp__rank *r) {
  double s = 1.2533 * r->mad; /* mean absolute deviation -> std. dev. */
  return s > 0.003 ? s : 0.003;
}

/* Huber weights, tight on the slow side (a slowdown must not be learnt)
 * and loose on the fast side (a model that predicts too much must catch up
 * quickly, but a sample many deviations too fast is a clock glitch, and the
 * 1/T^2 weights of the fit would make it count many times over). The noise
 * is measured around the running bias, so that a bias does not pass for
 * noise and widen the weights. */
static void fit(struct resihp__rank *r, const resihp_workload_t *w, double t,
                double z) {
  double s = sigma(r);
  double u = (z - r->bias) / s;
  double wt = u > HUBER ? HUBER / u : u < -4 * HUBER ? -4 * HUBER / u : 1.0;
  resihp__pred_update(&r->pred, w, t, wt);
  double dev = fabs(z - r->bias);
  if (dev > 4 * s)
    dev = 4 * s;
  r->mad += MAD_ALPHA * (dev - r->mad);
  double zb = z > 4 * s ? 4 * s : z < -4 * s ? -4 * s : z;
  r->bias += MAD_ALPHA * (zb - r->bias);
}

void resihp__failslow_record(resihp_detector_t *d, int rank, uint64_t iter,
                             const resihp_workload_t *w, double t) {
  if (d->open && iter > d->cur_iter)
    resihp__failslow_close(d);
  if (!d->open) {
    d->open = 1;
    d->cur_iter = iter;
  }
  struct resihp__rank *r = &d->ranks[rank];
  struct resihp__stage *st = &d->stages[r->slot];
  r->samples++;
  if (st->wref_n < WREF_N) {
    double n = ++st->wref_n;
    st->wref.tokens += (w->tokens - st->wref.tokens) / n;
    st->wref.sum_l2 += (w->sum_l2 - st->wref.sum_l2) / n;
    st->wref.nseq += (w->nseq - st->wref.nseq) / n;
  }
  if (r->pred.n < d->cfg.warmup) {
    /* Warm-up: learn, and measure the noise once the fit means something. */
    if (r->pred.n >= d->cfg.warmup / 2) {
      double p = resihp__pred_predict(&r->pred, w);
      if (p > 0) {
        double a = fabs(log(t / p));
        r->mad += (a - r->mad) / (double)(r->pred.n - d->cfg.warmup / 2 + 1);
      }
    }
    resihp__pred_update(&r->pred, w, t, 1.0);
    return;
  }
  double p = resihp__pred_predict(&r->pred, w);
  if (!(p > 0)) {
    resihp__pred_update(&r->pred, w, t, 1.0);
    return;
  }
  double z = log(t / p);
  if (r->it_n < RESIHP__ITER_BUF)
    r->it_z[r->it_n] = z;
  if (r->it_n < UINT32_MAX)
    r->it_n++;
  if (r->fs == RESIHP__FS_OK && r->run == 0)
    fit(r, w, t, z);
  else if (r->fs == RESIHP__FS_SLOW)
    /* The model keeps learning the workload at the healthy speed (a model
     * frozen in a bad state would keep the rank SLOW), and predictions stay
     * healthy-speed ones that the factor scales. */
    fit(r, w, t / exp(r->factor_log), z - r->factor_log);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, unsigned n) {
  qsort(v, n, sizeof(v[0]), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Mean of the smaller half (at least one value) of v[0..n), n >= 1: the
 * healthy part of a set of which up to half may be slow. */
static double faster_half(double *v, unsigned n) {
  qsort(v, n, sizeof(v[0]), cmp_double);
  unsigned k = n / 2 ? n / 2 : 1;
  double s = 0;
  for (unsigned i = 0; i < k; i++)
    s += v[i];
  return s / k;
}

enum field { F_A, F_X };

/* Faster-half mean of a field over the judged members of a stage (slot),
 * or of the whole job (slot < 0), leaving SLOW ranks out unless all are
 * (*with_slow set then). Returns the number of values, 0 if none. */
static unsigned reference(resihp_detector_t *d, int slot, enum field f,
                          double *out, int *with_slow) {
  for (int pass = 0; pass < 2; pass++) {
    unsigned n = 0;
    int q = slot >= 0 ? d->stages[slot].head : 0;
    for (; q >= 0 && q < d->cfg.n_ranks;
         q = slot >= 0 ? d->ranks[q].next_peer : q + 1) {
      const struct resihp__rank *r = &d->ranks[q];
      if (!r->judged || (pass == 0 && r->fs == RESIHP__FS_SLOW))
        continue;
      d->scratch[n++] = f == F_A ? r->A : r->X;
    }
    if (n) {
      *out = faster_half(d->scratch, n);
      if (with_slow)
        *with_slow = pass;
      return n;
    }
  }
  return 0;
}

static void ring_push(struct resihp__rank *r, double y) {
  r->ring_y[r->ring_head] = y;
  r->ring_head = (r->ring_head + 1) % RESIHP__RING;
  if (r->ring_n < RESIHP__RING)
    r->ring_n++;
}

/* Lower median of the last n iterations' y. */
static double recent_median(const struct resihp__rank *r, unsigned n) {
  double v[RESIHP__RING];
  if (n > r->ring_n)
    n = r->ring_n;
  for (unsigned k = 0; k < n; k++)
    v[k] = r->ring_y[(r->ring_head + RESIHP__RING - 1 - k) % RESIHP__RING];
  qsort(v, n, sizeof(v[0]), cmp_double);
  return v[(n - 1) / 2];
}

static void slow_step(resihp_detector_t *d, int rank, uint64_t iter) {
  struct resihp__rank *r = &d->ranks[rank];
  r->factor_log += FACTOR_ALPHA * (r->y - r->factor_log);
  double hr = 0.5 * d->h;
  double step = d->s_min - (r->y - r->offset);
  if (step > CLIP * hr)
    step = CLIP * hr;
  r->down += step;
  if (r->down < 0)
    r->down = 0;
  if (r->down < hr)
    return;
  r->fs = RESIHP__FS_OK;
  r->cusum = 0;
  r->run = 0;
  r->down = 0;
  r->factor_log = 0;
  r->settle_from = r->pred.n; /* what it fitted while slow is forgotten */
  /* Its model stood still while it was slow (or learnt a device that was
   * slow from the start): move it to the speed it has now. */
  if (fabs(r->it_last) > d->s_min)
    resihp__pred_scale(&r->pred, exp(r->it_last));
  resihp_log(RESIHP_LOG_DEBUG, "detector",
             "rank %d: back at its peers' and baseline's speed at iteration "
             "%llu",
             rank, (unsigned long long)iter);
}

/* Has the rank's model forgotten its warm-up, or its last SLOW period?
 * Its first fits, on few samples, may be off in shape, and so may the fits
 * of a slowdown that was not the same factor on every workload (a slow
 * link stretches communication, not compute); its speed on the reference
 * workload then moves while the model settles: until then a rank's offset
 * and its stage's baseline follow without an anchor. One memory of the
 * predictor
 * (1 / (1 - forget) samples), at least BASE_MODEL_N warm-ups, at most
 * SETTLE_MAX samples. */
#define SETTLE_MAX 2000
static int settled(const resihp_detector_t *d, int rank) {
  double m = d->cfg.forget < 1 ? 1 / (1 - d->cfg.forget) : SETTLE_MAX;
  double lo = (double)BASE_MODEL_N * d->cfg.warmup;
  m = m < lo ? lo : m > SETTLE_MAX ? SETTLE_MAX : m;
  const struct resihp__rank *r = &d->ranks[rank];
  return (double)(r->pred.n - r->settle_from) >= m;
}

/* A usual level (a rank's offset, a stage's baseline) that follows a
 * healthy pace slowly, anchored: it may fall freely (a faster pace is
 * learnt), but it rises at most band above the lowest level it had (*lo),
 * so that a slowdown that comes slowly enough to be followed (a thermal
 * throttle ramping over thousands of iterations) is caught at the same
 * factor as a step, while the pace's own wander (a degree of thermal
 * drift) stays within the band. floor: the level never goes below it. */
static double anchored(double v, double *lo, double floor, double band) {
  if (v < floor)
    v = floor;
  if (v < *lo)
    *lo = v;
  return v > *lo + band ? *lo + band : v;
}

/* One judged iteration of a rank that is not SLOW. gate: its excess over
 * the largest job-wide excess of the last iterations. */
static void ok_step(resihp_detector_t *d, int rank, uint64_t iter, double gate,
                    int64_t now) {
  struct resihp__rank *r = &d->ranks[rank];
  double y = r->y - r->offset;
  if (r->offset_n < OFFSET_WARM) {
    /* A rank's first iterations set its offset; nothing is judged. */
    r->offset_n++;
    r->offset += (r->y - r->offset) / r->offset_n;
    r->offset = r->offset < 0 ? 0 : r->offset > d->h ? d->h : r->offset;
    r->offset_lo = r->offset;
    return;
  }
  double s = 1.2533 * r->isig;
  double k = 3 * s > d->k_min ? 3 * s : d->k_min;
  if (k > 0.5 * d->h)
    k = 0.5 * d->h; /* however noisy, a slowdown past the margin adds up */
  double step = y - k;
  if (step > CLIP * d->h)
    step = CLIP * d->h;
  r->cusum += step;
  if (r->cusum < 0)
    r->cusum = 0;
  if (r->cusum > 2 * d->h)
    r->cusum = 2 * d->h; /* a deferred excess does not build up credit */
  if (y > k) {
    if (!r->run++)
      r->run_us = now;
    ring_push(r, r->y);
  } else {
    r->run = 0;
    /* Once its model has settled, the noise is what y does from one
     * iteration to the next, not its distance from the offset: a drift the
     * offset lags does not pass for noise and widen the allowance with it.
     * While it settles, that distance (its model's moving error) counts. */
    int set = settled(d, rank);
    double dev =
        set && r->y_prev_ok ? fabs(r->y - r->y_prev) * M_SQRT1_2 : fabs(y);
    double cap = 4 * (s > 0.003 ? s : 0.003);
    r->isig += ISIG_ALPHA * ((dev < cap ? dev : cap) - r->isig);
    if (r->cusum == 0) {
      double v = r->offset + OFFSET_ALPHA * (r->y - r->offset);
      if (set) {
        r->offset = anchored(v, &r->offset_lo, 0, DRIFT * d->s_min);
      } else { /* not anchored yet */
        r->offset = v < 0 ? 0 : v > d->h ? d->h : v;
        r->offset_lo = r->offset;
      }
    }
  }
  r->fs = r->cusum >= 0.5 * d->h ? RESIHP__FS_SUSPECT : RESIHP__FS_OK;
  if (r->cusum < d->h || r->run < d->cfg.confirm_iters ||
      now - r->run_us < (int64_t)d->confirm_ms * 1000)
    return;
  if (gate < d->s_min) {
    resihp_log(RESIHP_LOG_DEBUG, "detector",
               "rank %d: excess within a job-wide stall of the last %d "
               "iterations, not confirmed yet",
               rank, RESIHP__STALL_WINDOW);
    return;
  }
  double f = recent_median(r, r->run);
  if (f - r->offset < d->s_min) {
    resihp_log(RESIHP_LOG_DEBUG, "detector",
               "rank %d: excess not confirmed (median %.3f) at iteration %llu",
               rank, exp(f), (unsigned long long)iter);
    r->cusum = 0;
    r->run = 0;
    r->fs = RESIHP__FS_OK;
    return;
  }
  r->fs = RESIHP__FS_SLOW;
  r->factor_log = f;
  r->down = 0;
  r->cusum = 0;
}

/* A baseline is set only from models that have seen BASE_MODEL_N times
 * the warm-up: the first fits, after heavy-tailed noise, can be off by
 * more than a slowdown, and a baseline does not forget them quickly. */
static int models_settled(const resihp_detector_t *d, int slot) {
  for (int q = d->stages[slot].head; q >= 0; q = d->ranks[q].next_peer)
    if (d->ranks[q].judged &&
        d->ranks[q].pred.n < (uint64_t)BASE_MODEL_N * d->cfg.warmup)
      return 0;
  return 1;
}

void resihp__failslow_close(resihp_detector_t *d) {
  if (!d->open)
    return;
  d->open = 0;
  uint64_t iter = d->cur_iter;
  int nr = d->cfg.n_ranks;
  int judged = 0;
  int64_t now = 0;
  if (d->confirm_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    /* microseconds: a stamp truncated to ms would confirm up to 1 ms early */
    now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
  }
  /* Each rank's speed on its stage's reference workload. */
  for (int q = 0; q < nr; q++) {
    struct resihp__rank *r = &d->ranks[q];
    r->judged = 0;
    if (!r->it_n)
      continue;
    unsigned n = r->it_n < RESIHP__ITER_BUF ? r->it_n : RESIHP__ITER_BUF;
    r->it_n = 0;
    double m = median(r->it_z, n);
    const struct resihp__stage *st = &d->stages[r->slot];
    if (st->wref_n < WREF_N || r->state == RESIHP_HEALTH_FAILED)
      continue;
    double L = resihp__pred_predict(&r->pred, &st->wref);
    if (!(L > 0))
      continue;
    r->it_last = m;
    r->A = log(L) + m;
    r->judged = 1;
    judged++;
  }
  if (!judged)
    return;
  for (int s = 0; s < nr; s++) {
    struct resihp__stage *st = &d->stages[s];
    st->n_ref = 0;
    if (st->members > 0)
      st->n_ref = (int)reference(d, s, F_A, &st->ref, &st->ref_slow);
  }
  for (int q = 0; q < nr; q++) {
    struct resihp__rank *r = &d->ranks[q];
    if (r->judged) {
      const struct resihp__stage *st = &d->stages[r->slot];
      r->X = r->A - (st->base_n ? st->base : st->ref);
    }
  }
  double J = 0;
  if (reference(d, -1, F_X, &J, NULL) < 2)
    J = 0; /* alone: its own baseline is all there is */
  d->jhist[d->jhist_head] = J;
  d->jhist_head = (d->jhist_head + 1) % RESIHP__STALL_WINDOW;
  if (d->jhist_n < RESIHP__STALL_WINDOW)
    d->jhist_n++;
  double jpeak = J;
  for (unsigned i = 0; i < d->jhist_n; i++)
    jpeak = d->jhist[i] > jpeak ? d->jhist[i] : jpeak;
  for (int s = 0; s < nr; s++) {
    struct resihp__stage *st = &d->stages[s];
    if (st->n_ref) {
      double hx;
      reference(d, s, F_X, &hx, NULL);
      st->hx = hx - J;
    }
  }
  for (int q = 0; q < nr; q++) {
    struct resihp__rank *r = &d->ranks[q];
    if (!r->judged)
      continue;
    const struct resihp__stage *st = &d->stages[r->slot];
    /* Peers: the members in the reference other than itself. */
    int in_ref = st->ref_slow || r->fs != RESIHP__FS_SLOW;
    double E = st->n_ref - in_ref >= 1 ? r->A - st->ref : -INFINITY;
    double alone = E > st->hx ? E : st->hx;
    double g = r->X - J;
    r->y = g < alone ? g : alone;
    r->vs_peers = E >= st->hx;
    if (r->fs == RESIHP__FS_SLOW)
      slow_step(d, q, iter);
    else
      ok_step(d, q, iter, r->X - jpeak, now);
    r->y_prev = r->y;
    r->y_prev_ok = 1;
    resihp__publish(d, q, iter);
  }
  /* Baselines follow a healthy stage slowly (thermal drift, a model that
   * improved) and stand still while its faster half is in excess. */
  for (int s = 0; s < nr; s++) {
    struct resihp__stage *st = &d->stages[s];
    if (!st->n_ref)
      continue;
    if (st->base_n < BASE_WARM) {
      if (!models_settled(d, s))
        continue;
      st->base_n++;
      st->base += (st->ref - st->base) / st->base_n;
      st->base_lo = st->base;
    } else if (st->hx + J < d->s_min) {
      st->base = anchored(st->base + BASE_ALPHA * (st->ref - st->base),
                          &st->base_lo, -INFINITY, DRIFT * d->s_min);
      for (int q = st->head; q >= 0; q = d->ranks[q].next_peer)
        if (d->ranks[q].judged && !settled(d, q)) {
          st->base_lo = st->base; /* not anchored yet */
          break;
        }
    }
  }
}
