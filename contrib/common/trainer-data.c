/* SPDX-License-Identifier: BSD-3-Clause */
/* The example trainers' data kinds and simulated compute: see
 * trainer-data.h. */
#include "trainer-data.h"

#include "trainer-common.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const names[] = {"fixed", "longtail", "packed"};

int trainer_data_kind(const char *name) {
  for (int i = 0; i < 3; i++)
    if (name && !strcmp(name, names[i]))
      return i;
  return -1;
}

const char *trainer_data_name(trainer_data_kind_t k) {
  return (unsigned)k < 3 ? names[k] : "?";
}

int trainer_data_max_seqs(const trainer_data_t *d) {
  return d->kind == TRAINER_DATA_PACKED ? d->budget / TRAINER_LONG_MIN : d->B;
}

long trainer_data_max_tokens(const trainer_data_t *d) {
  switch (d->kind) {
  case TRAINER_DATA_FIXED:
    return (long)d->B * TRAINER_MAX_LEN;
  case TRAINER_DATA_LONGTAIL:
    return (long)d->B * TRAINER_LONG_MAX;
  case TRAINER_DATA_PACKED:
    break;
  }
  return d->budget;
}

int trainer_mb_init(trainer_mb_t *m, const trainer_data_t *d) {
  size_t n = (size_t)trainer_data_max_seqs(d);
  memset(m, 0, sizeof(*m));
  m->cls = calloc(n, sizeof(int));
  m->len = calloc(n, sizeof(int));
  m->off = calloc(n, sizeof(int));
  m->tok = calloc((size_t)trainer_data_max_tokens(d), sizeof(int));
  if (m->cls && m->len && m->off && m->tok)
    return 0;
  trainer_mb_free(m);
  return -1;
}

void trainer_mb_free(trainer_mb_t *m) {
  free(m->cls);
  free(m->len);
  free(m->off);
  free(m->tok);
  memset(m, 0, sizeof(*m));
}

/* A long-tailed length: octave k with probability 2^-(k+1), the last
 * octave taking the rest, uniform within [8 << k, 16 << k). */
static int long_tail_len(uint64_t *r) {
  uint64_t u = trainer_splitmix(r);
  int k = 0;
  while (k < 6 && (u & 1)) {
    u >>= 1;
    k++;
  }
  int lo = TRAINER_LONG_MIN << k;
  return lo + (int)((u >> 8) % (uint64_t)lo);
}

static void add_seq(trainer_mb_t *m, int cls, int len) {
  m->cls[m->nseq] = cls;
  m->len[m->nseq] = len;
  m->off[m->nseq] = (int)m->tokens;
  m->nseq++;
  m->tokens += len;
  m->sum_l2 += (double)len * len;
}

/* Lengths and classes of a longtail or packed microbatch. */
static void shape(const trainer_data_t *d, uint64_t r, trainer_mb_t *m) {
  m->nseq = 0;
  m->tokens = 0;
  m->sum_l2 = 0;
  if (d->kind == TRAINER_DATA_LONGTAIL) {
    for (int b = 0; b < d->B; b++) {
      int cls = (int)(trainer_splitmix(&r) % (uint64_t)d->C);
      add_seq(m, cls, long_tail_len(&r));
    }
    return;
  }
  for (;;) {
    int cls = (int)(trainer_splitmix(&r) % (uint64_t)d->C);
    int len = long_tail_len(&r);
    if (m->nseq == 0 && len > d->budget)
      len = d->budget;
    if (m->tokens + len > d->budget)
      return;
    add_seq(m, cls, len);
  }
}

/* The tokens' stream of a microbatch, apart from its shape's. */
static uint64_t token_rng(uint64_t r) {
  uint64_t t = r ^ 0x5851f42d4c957f2dULL;
  trainer_splitmix(&t);
  return t;
}

void trainer_data_draw(const trainer_data_t *d, long s, int mb,
                       trainer_mb_t *m) {
  uint64_t r = trainer_mb_rng(d->seed, s, mb);
  if (d->kind == TRAINER_DATA_FIXED) {
    /* the original stream: class, length, tokens per sequence */
    m->nseq = 0;
    m->tokens = 0;
    m->sum_l2 = 0;
    for (int b = 0; b < d->B; b++) {
      int cls, len = trainer_sequence(&r, d->V, d->C, &cls, m->tok + m->tokens);
      add_seq(m, cls, len);
    }
    return;
  }
  shape(d, r, m);
  uint64_t t = token_rng(r);
  for (int i = 0; i < m->nseq; i++)
    trainer_tokens(&t, d->V, d->C, m->cls[i], m->len[i], m->tok + m->off[i]);
}

void trainer_data_shape(const trainer_data_t *d, long s, int mb,
                        trainer_mb_t *m) {
  if (d->kind == TRAINER_DATA_FIXED)
    trainer_data_draw(d, s, mb, m); /* lengths and tokens share a stream */
  else
    shape(d, trainer_mb_rng(d->seed, s, mb), m);
}

double trainer_data_step_seqs(const trainer_data_t *d, long s, int M,
                              trainer_mb_t *scratch) {
  if (d->kind != TRAINER_DATA_PACKED)
    return (double)M * d->B;
  double n = 0;
  for (int mb = 0; mb < M; mb++) {
    trainer_data_shape(d, s, mb, scratch);
    n += scratch->nseq;
  }
  return n;
}

double trainer_work(double tokens, double sum_l2, double nseq) {
  return tokens + sum_l2 / 256.0 + 4.0 * nseq + 64.0;
}

/* Means per microbatch over a fixed sample of 256 microbatches, whatever
 * d's seed: 0, or -1 when out of memory. */
static int sample_means(const trainer_data_t *d, double *tokens, double *sum_l2,
                        double *nseq) {
  trainer_data_t sample = *d;
  sample.seed = 0x7a11;
  trainer_mb_t m;
  if (trainer_mb_init(&m, &sample))
    return -1;
  enum { N = 256 };
  *tokens = *sum_l2 = *nseq = 0;
  for (int i = 0; i < N; i++) {
    trainer_data_shape(&sample, i / 8, i % 8, &m);
    *tokens += (double)m.tokens / N;
    *sum_l2 += m.sum_l2 / N;
    *nseq += (double)m.nseq / N;
  }
  trainer_mb_free(&m);
  return 0;
}

int trainer_data_mean(const trainer_data_t *d, double *tok_per_seq,
                      double *seqs) {
  double t, l2, n;
  if (d->kind == TRAINER_DATA_FIXED) {
    *tok_per_seq = (4 + TRAINER_MAX_LEN) / 2.0;
    *seqs = d->B;
    return 0;
  }
  if (sample_means(d, &t, &l2, &n))
    return -1;
  *tok_per_seq = t / n;
  *seqs = n;
  return 0;
}

int trainer_cost_init(trainer_cost_t *c, const trainer_data_t *d,
                      double mean_ms) {
  double t, l2, n;
  c->ms_per_work = 0;
  if (!(mean_ms > 0))
    return 0;
  /* the work is linear in the three: the mean work is the work of the
   * means */
  if (sample_means(d, &t, &l2, &n))
    return -1;
  c->ms_per_work = mean_ms / trainer_work(t, l2, n);
  return 0;
}

int trainer_cost_init_arith(trainer_cost_t *c, const trainer_data_t *d,
                            double mean_kops) {
  double t, l2, n;
  c->ops_per_work = 0;
  if (!(mean_kops > 0))
    return 0;
  if (sample_means(d, &t, &l2, &n))
    return -1;
  c->ops_per_work = mean_kops * 1e3 / trainer_work(t, l2, n);
  return 0;
}

double trainer_compute_arith(const trainer_cost_t *c, const trainer_mb_t *m) {
  double ops =
      c->ops_per_work * trainer_work((double)m->tokens, m->sum_l2, m->nseq);
  /* a dependent chain: each step waits for the last, so that the count of
   * operations, not the compiler, sets the time; the result is kept */
  volatile double x = 1.0;
  double y = x;
  for (long i = 0; i < (long)ops; i++)
    y = y * 0.999999 + 1e-6;
  x = y;
  return ops / 1e3 + 0 * x;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Short slices, so that a stop from outside costs about its length: a
 * slice it stretches is credited 1.5 slices, and the rest of the stop is
 * lost, as it is to a real computation. With 1 ms slices a 4 ms duty cycle
 * meant to slow by 1.5x slowed by 1.26x (1.6x for 2x), at the detector's
 * margin. */
#define SLICE_MS 0.25

double trainer_compute_sleep(const trainer_cost_t *c, const trainer_mb_t *m) {
  double want =
      c->ms_per_work * trainer_work((double)m->tokens, m->sum_l2, m->nseq);
  double done = 0;
  while (want - done > 1e-3) {
    double slice = want - done < SLICE_MS ? want - done : SLICE_MS;
    struct timespec ts = {0, (long)(slice * 1e6)};
    double t0 = now_ms();
    nanosleep(&ts, NULL);
    double dt = now_ms() - t0;
    /* a slice stretched by a stop (or a long wait for a CPU) counts as
     * at most 1.5 slices of work */
    done += dt < 1.5 * slice ? dt : 1.5 * slice;
  }
  return want;
}

void trainer_mbstats_add(trainer_mbstats_t *t, double seconds) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 1024;
    if (cap > (size_t)1 << 20)
      return;
    double *v = realloc(t->v, cap * sizeof(double));
    if (!v)
      return;
    t->v = v;
    t->cap = cap;
  }
  t->v[t->n++] = seconds;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void trainer_mbstats_print(const trainer_mbstats_t *t, FILE *f,
                           const char *prefix) {
  if (!t->n)
    return;
  double *v = malloc(t->n * sizeof(double)), sum = 0;
  if (!v)
    return;
  memcpy(v, t->v, t->n * sizeof(double));
  qsort(v, t->n, sizeof(double), cmp_double);
  for (size_t i = 0; i < t->n; i++)
    sum += v[i];
#define PCT(p) (1e3 * v[(size_t)((p) * (double)(t->n - 1) + 0.5)])
  fprintf(f,
          "%smicrobatch times (%zu): mean %.2f ms, p10 %.2f, p50 %.2f, p90 "
          "%.2f, p99 %.2f, max %.2f ms\n",
          prefix, t->n, 1e3 * sum / (double)t->n, PCT(0.10), PCT(0.50),
          PCT(0.90), PCT(0.99), 1e3 * v[t->n - 1]);
#undef PCT
  free(v);
}

void trainer_mbstats_free(trainer_mbstats_t *t) {
  free(t->v);
  memset(t, 0, sizeof(*t));
}

int trainer_workload(long s, int mb, double *tokens, double *sum_l2,
                     double *nseq, void *ud) {
  trainer_workload_t *wl = ud;
  trainer_data_shape(wl->d, s, mb, &wl->scratch);
  *tokens = (double)wl->scratch.tokens;
  *sum_l2 = wl->scratch.sum_l2;
  *nseq = wl->scratch.nseq;
  return 0;
}
