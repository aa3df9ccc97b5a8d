/* SPDX-License-Identifier: BSD-3-Clause */
/* The naive detectors resihp is compared with. Both look only at a rank's
 * iteration time (the sum of its microbatch times), the way a dashboard
 * alert or a simple watchdog would:
 *
 *   k x median: alarm when the iteration time exceeds k times the median of
 *   the rank's previous WINDOW iterations (k = 1.2 by default: the smallest
 *   k that can see a 1.2x slowdown at all);
 *   fixed threshold: alarm when it exceeds k times the median of the rank's
 *   first WARMUP iterations (k = 1 + slow margin).
 *
 * An alarm stays raised until CLEAR consecutive iterations are below the
 * threshold; only raising it counts. Neither knows about sequence lengths,
 * which is the point.
 */
#include "config.h"

#include "eval.h"

#include <stdlib.h>
#include <string.h>

#define WINDOW 50
#define WARMUP 20
#define CLEAR 3

struct brank {
  double hist[WINDOW];
  unsigned n, head;
  double fixed; /* EV_FIXED: threshold, 0 until warm */
  int alarmed;
  unsigned below;
};

struct ev_baseline {
  enum ev_baseline_kind kind;
  double k;
  int n_ranks;
  struct brank r[];
};

ev_baseline_t *ev_baseline_create(enum ev_baseline_kind kind, int n_ranks,
                                  double k) {
  ev_baseline_t *b =
      calloc(1, sizeof(*b) + (size_t)n_ranks * sizeof(struct brank));
  if (!b)
    return NULL;
  b->kind = kind;
  b->k = k;
  b->n_ranks = n_ranks;
  return b;
}

void ev_baseline_destroy(ev_baseline_t *b) {
  free(b);
}

void ev_baseline_reset_rank(ev_baseline_t *b, int rank) {
  memset(&b->r[rank], 0, sizeof(b->r[rank]));
}

/* Quickselect (Hoare partition): the k-th smallest of v[0..n),
 * reordering v. */
static double select_kth(double *v, int n, int k) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    double pivot = v[(lo + hi) / 2];
    int i = lo, j = hi;
    while (i <= j) {
      while (v[i] < pivot)
        i++;
      while (v[j] > pivot)
        j--;
      if (i <= j) {
        double t = v[i];
        v[i++] = v[j];
        v[j--] = t;
      }
    }
    if (k <= j)
      hi = j;
    else if (k >= i)
      lo = i;
    else
      break;
  }
  return v[k];
}

static double median(const struct brank *r) {
  double v[WINDOW];
  memcpy(v, r->hist, r->n * sizeof(double));
  return select_kth(v, (int)r->n, (int)r->n / 2);
}

int ev_baseline_update(ev_baseline_t *b, int rank, double t) {
  struct brank *r = &b->r[rank];
  double threshold = 0;
  if (b->kind == EV_KMEDIAN) {
    if (r->n >= WARMUP)
      threshold = b->k * median(r);
  } else {
    if (r->fixed == 0 && r->n >= WARMUP)
      r->fixed = b->k * median(r);
    threshold = r->fixed;
  }
  r->hist[r->head] = t;
  r->head = (r->head + 1) % WINDOW;
  if (r->n < WINDOW)
    r->n++;
  if (threshold == 0)
    return 0;
  if (t > threshold) {
    r->below = 0;
    if (!r->alarmed) {
      r->alarmed = 1;
      return 1;
    }
    return 0;
  }
  if (r->alarmed && ++r->below >= CLEAR)
    r->alarmed = 0;
  return 0;
}
