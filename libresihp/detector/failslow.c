/* SPDX-License-Identifier: BSD-3-Clause */
/* Fail-slow detection: from one rank's microbatch times to a validated
 * slowdown factor.
 *
 * Every sample is compared with the rank's own prediction for its workload:
 * z = log(measured / predicted). Sequence-length swings are what the
 * predictor explains, so z stays within the timing noise (about 1 %) on a
 * healthy device however much the raw times swing. What the predictor cannot
 * explain but other ranks see at the same moment (a slow shared filesystem
 * during a checkpoint, a cluster-wide network hiccup, a clock change) is
 * removed by comparing with two references: the mean z of the rank's peers
 * (the ranks that do the same work in the other replicas) and the mean z of
 * all ranks. The statistic is the smallest of the three excesses,
 *   y = min(z, z - mean z of peers, z - mean z of all ranks),
 * so a rank only looks slow if it is slower than its own model AND than the
 * others: a common swing cancels, and a peer whose model went stale (it was
 * frozen during a long slowdown) cannot make a healthy rank look slow.
 *
 * A one-sided CUSUM accumulates y in excess of an allowance k (the larger
 * of 0.8*log(1+min_slow) and three noise deviations, at most half the
 * threshold), each sample's contribution capped so that no single hiccup can
 * go far. At half the threshold the rank is SUSPECT and stops feeding its
 * predictor (a slowdown must not be learnt as the new normal). At the
 * threshold log(1 + slow_margin) -- the paper's 25 % margin, here reached by
 * accumulation so that a steady 1.1x shows up in a handful of microbatches
 * while a lone 1.3x spike does not -- and after at least RUN_MIN samples,
 * the excess is validated: the lower median of the recent y must exceed
 * log(1 + min_slow). A few spikes among normal samples fail that test; a
 * real slowdown passes it and its median is the speed factor. A validated
 * rank is SLOW and leaves the references; its factor follows its excess
 * over its peers while a second CUSUM watches for the return to normal
 * speed, which makes it HEALTHY again.
 *
 * A device that is slow from its first sample, or degrades slowly enough
 * for the predictor to follow, has z ~ 0. For those, every peer_check
 * samples the rank's model is compared with its peers' models on the same
 * workload; a model that predicts more than the slow margin above the peers'
 * median twice in a row is a slow device too.
 *
 * Samples are fitted with Huber weights on y (full weight up to 2.5 noise
 * deviations above the prediction, decreasing beyond), so the rare outlier
 * that does not trigger the detector does not bend the model either.
 */
#include "config.h"

#include "detector-internal.h"

#include <resihp/log.h>

#include <math.h>
#include <string.h>

#define RUN_MIN 4
#define HUBER 2.5
#define CLIP 0.45        /* cap of one sample's CUSUM step, x threshold */
#define MAD_ALPHA 0.02   /* memory of the noise estimate: ~50 samples */
#define FACTOR_ALPHA 0.2 /* smoothing of a SLOW rank's factor */
#define MAX_PEERS 64     /* peers looked at by the model check */

void resihp__failslow_reset(resihp_detector_t *d, int rank) {
  struct resihp__rank *r = &d->ranks[rank];
  resihp__contrib_set(d, rank, 0);
  resihp__pred_init(&r->pred, d->cfg.forget);
  r->fs = RESIHP__FS_OK;
  r->mad = 0;
  r->bias = 0;
  r->cusum = 0;
  r->down = 0;
  r->zlast = 0;
  r->factor_log = 0;
  r->base = 0;
  r->reported = 1;
  r->model_gap_hits = 0;
  r->run = 0;
  r->ring_n = 0;
  r->ring_head = 0;
  r->samples = 0;
  r->check_countdown = d->cfg.peer_check;
}

static double sigma(const struct resihp__rank *r) {
  double s = 1.2533 * r->mad; /* mean absolute deviation -> std. dev. */
  return s > 0.003 ? s : 0.003;
}

/* Huber weights on the slow side only: a slowdown must not be learnt, but
 * a model that predicts too much (it was fitted during a cluster-wide swing,
 * or the device got faster) must catch up at once. The noise is measured
 * around the running bias, so that a bias does not pass for noise, widen
 * the CUSUM allowance and hide the next slowdown. */
static void fit(struct resihp__rank *r, const resihp_workload_t *w, double t,
                double y) {
  double s = sigma(r);
  double u = y / s;
  resihp__pred_update(&r->pred, w, t, u <= HUBER ? 1.0 : HUBER / u);
  double dev = fabs(y - r->bias);
  if (dev > 4 * s)
    dev = 4 * s;
  r->mad += MAD_ALPHA * (dev - r->mad);
  double zb = y > 4 * s ? 4 * s : y < -4 * s ? -4 * s : y;
  r->bias += MAD_ALPHA * (zb - r->bias);
}

static void ring_push(struct resihp__rank *r, double y,
                      const resihp_workload_t *w, double t) {
  unsigned i = r->ring_head;
  r->ring_z[i] = y;
  r->ring_w[i] = *w;
  r->ring_t[i] = t;
  r->ring_head = (i + 1) % RESIHP__RING;
  if (r->ring_n < RESIHP__RING)
    r->ring_n++;
}

/* Index of the k-th most recent ring entry (k = 0: newest). */
static unsigned ring_at(const struct resihp__rank *r, unsigned k) {
  return (r->ring_head + RESIHP__RING - 1 - k) % RESIHP__RING;
}

static double lower_median(double *v, unsigned n) {
  for (unsigned i = 1; i < n; i++) {
    double x = v[i];
    unsigned j = i;
    for (; j > 0 && v[j - 1] > x; j--)
      v[j] = v[j - 1];
    v[j] = x;
  }
  return v[(n - 1) / 2];
}

/* Fit the last n samples (oldest first): they were held back while
 * suspect and turned out to be normal. */
static void absorb(struct resihp__rank *r, unsigned n) {
  if (n > r->ring_n)
    n = r->ring_n;
  for (unsigned k = n; k-- > 0;) {
    unsigned i = ring_at(r, k);
    fit(r, &r->ring_w[i], r->ring_t[i], r->ring_z[i]);
  }
}

static void become_slow(resihp_detector_t *d, int rank, uint64_t iter, double f,
                        double base) {
  struct resihp__rank *r = &d->ranks[rank];
  r->fs = RESIHP__FS_SLOW;
  r->factor_log = f;
  r->base = base;
  r->down = 0;
  r->cusum = 0;
  resihp__contrib_set(d, rank, 0);
  resihp__publish(d, rank, iter);
}

static void validate(resihp_detector_t *d, int rank, uint64_t iter) {
  struct resihp__rank *r = &d->ranks[rank];
  unsigned n = r->run > RUN_MIN ? r->run : RUN_MIN;
  if (n > r->ring_n)
    n = r->ring_n;
  double v[RESIHP__RING];
  for (unsigned k = 0; k < n; k++)
    v[k] = r->ring_z[ring_at(r, k)];
  double f = lower_median(v, n);
  if (f >= d->s_min) {
    become_slow(d, rank, iter, f, 0);
    return;
  }
  resihp_log(RESIHP_LOG_DEBUG, "detector",
             "rank %d: excess not confirmed (median %.3f), cleared", rank,
             exp(f));
  absorb(r, r->run);
  r->cusum = 0;
  r->run = 0;
  r->fs = RESIHP__FS_OK;
  resihp__publish(d, rank, iter);
}

/* Compare the rank's model with its peers' on workload w. */
static void model_check(resihp_detector_t *d, int rank, uint64_t iter,
                        const resihp_workload_t *w) {
  struct resihp__rank *r = &d->ranks[rank];
  double v[MAX_PEERS];
  unsigned n = 0;
  for (int q = d->stages[r->slot].head; q >= 0 && n < MAX_PEERS;
       q = d->ranks[q].next_peer) {
    const struct resihp__rank *p = &d->ranks[q];
    if (q == rank || !p->contrib)
      continue;
    double t = resihp__pred_predict(&p->pred, w);
    if (t > 0)
      v[n++] = log(t);
  }
  double own = resihp__pred_predict(&r->pred, w);
  if (!n || !(own > 0))
    return;
  double gap = log(own) - lower_median(v, n);
  if (gap < d->h) {
    r->model_gap_hits = 0;
    return;
  }
  if (++r->model_gap_hits < 2)
    return;
  r->model_gap_hits = 0;
  become_slow(d, rank, iter, gap, gap);
}

static void ok_step(resihp_detector_t *d, int rank, uint64_t iter,
                    const resihp_workload_t *w, double t, double y) {
  struct resihp__rank *r = &d->ranks[rank];
  double s = sigma(r);
  double k = 3 * s > d->k_min ? 3 * s : d->k_min;
  if (k > 0.5 * d->h)
    k = 0.5 * d->h; /* however noisy, a slowdown past the margin adds up */
  double step = y - k;
  if (step > CLIP * d->h)
    step = CLIP * d->h;
  r->cusum += step;
  ring_push(r, y, w, t);
  if (r->cusum <= 0) {
    unsigned held = r->run;
    r->cusum = 0;
    r->run = 0;
    if (r->fs == RESIHP__FS_SUSPECT) {
      absorb(r, held + 1);
      r->fs = RESIHP__FS_OK;
      resihp__publish(d, rank, iter);
      return;
    }
  } else {
    r->run++;
  }
  if (r->fs == RESIHP__FS_OK && r->cusum < 0.5 * d->h) {
    fit(r, w, t, y);
    if (d->cfg.peer_check && --r->check_countdown == 0) {
      r->check_countdown = d->cfg.peer_check;
      model_check(d, rank, iter, w);
    }
    return;
  }
  if (r->fs == RESIHP__FS_OK) {
    r->fs = RESIHP__FS_SUSPECT;
    resihp__publish(d, rank, iter);
  }
  if (r->cusum >= d->h && r->run >= RUN_MIN)
    validate(d, rank, iter);
}

static void slow_step(resihp_detector_t *d, int rank, uint64_t iter,
                      double z_ref) {
  struct resihp__rank *r = &d->ranks[rank];
  double zs = z_ref + r->base;
  r->factor_log += FACTOR_ALPHA * (zs - r->factor_log);
  double hr = 0.5 * d->h;
  double step = d->s_min - zs;
  if (step > CLIP * hr)
    step = CLIP * hr;
  r->down += step;
  if (r->down < 0)
    r->down = 0;
  if (r->down < hr) {
    resihp__publish(d, rank, iter); /* reports a factor that moved */
    return;
  }
  r->fs = RESIHP__FS_OK;
  r->cusum = 0;
  r->run = 0;
  r->down = 0;
  r->factor_log = 0;
  if (r->base != 0) {
    /* Its model had learnt the slow device: learn the healthy one. */
    double mad = r->mad;
    resihp__pred_init(&r->pred, d->cfg.forget);
    r->mad = mad;
    r->base = 0;
  }
  resihp__publish(d, rank, iter);
}

void resihp__failslow_record(resihp_detector_t *d, int rank, uint64_t iter,
                             const resihp_workload_t *w, double t) {
  struct resihp__rank *r = &d->ranks[rank];
  r->samples++;
  if (r->pred.n < d->cfg.warmup && r->fs != RESIHP__FS_SLOW) {
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

  /* References: the mean z of the other ranks of the stage (same work)
   * and of all other ranks (what the whole job sees at this moment). */
  struct resihp__stage *s = &d->stages[r->slot];
  double own = r->contrib ? r->zlast : 0;
  int others = s->count - r->contrib;
  int everyone = d->count - r->contrib;
  double z_rel = z, z_all = z, y = z;
  if (others > 0) {
    z_rel = z - (s->sum - own) / others;
    y = z_rel < y ? z_rel : y;
  }
  if (everyone > 0) {
    z_all = z - (d->sum - own) / everyone;
    y = z_all < y ? z_all : y;
  }
  if (r->contrib) {
    s->sum += z - r->zlast;
    d->sum += z - r->zlast;
  }
  r->zlast = z;
  if (r->fs == RESIHP__FS_SLOW) {
    /* How slow, for the planner: relative to the ranks it could hand work
     * to, its peers first. */
    slow_step(d, rank, iter, others > 0 ? z_rel : z_all);
    return;
  }
  if (!r->contrib)
    resihp__contrib_set(d, rank, 1);
  ok_step(d, rank, iter, w, t, y);
}
