/* SPDX-License-Identifier: BSD-3-Clause */
/* Trace files for resihp-detect-eval: reading users' own logs and writing
 * generated traces, in one line-oriented text format (see
 * man/resihp-detect-eval.1):
 *
 *   # comment
 *   #! mb M                  microbatches per rank per iteration
 *   #! mb ITER M             ... for every rank from iteration ITER on
 *   #! mb ITER RANK M        ... for RANK at ITER only (0: idle, alive)
 *   #! slow RANK START END FACTOR compute|comm [ramp=FROM] [hold=H]
 *                                            [eff=EFF]
 *   #! stop RANK START REJOIN               ground truth (optional)
 *   #! hang START END                       the whole job: no samples
 *   #! nofault                              ground truth: no fault at all
 *   iter rank stage tokens sum_l2 nseq time_us
 *
 * Iterations must not decrease from one sample line to the next. Every
 * line is checked as it is read, and the first bad one stops the replay with
 * its line number: a detector evaluated on half-parsed input would report
 * figures about nothing.
 */
#include "config.h"

#include "eval.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_LEN 4096
#define RANK_MAX (1 << 20)

struct file_src {
  ev_source_t src;
  ev_sample_t *s;
  size_t n, cap, pos;
  int nofault;
};

static void say(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

static int file_next(ev_source_t *s, uint32_t *iter,
                     const ev_sample_t **samples, size_t *n) {
  struct file_src *f = (struct file_src *)s;
  if (f->pos >= f->n)
    return 0;
  size_t b = f->pos, e = b;
  while (e < f->n && f->s[e].iter == f->s[b].iter)
    e++;
  f->pos = e;
  *iter = f->s[b].iter;
  *samples = f->s + b;
  *n = e - b;
  return 1;
}

static void file_destroy(ev_source_t *s) {
  struct file_src *f = (struct file_src *)s;
  free(f->s);
  free(f->src.ep);
  free(f->src.mbl);
  free(f);
}

static int add_mb(ev_source_t *s, uint32_t iter, int rank, int count) {
  if (ev_grow((void **)&s->mbl, &s->mb_cap, s->nmb, sizeof(s->mbl[0])))
    return -1;
  s->mbl[s->nmb++] = (ev_mb_t){iter, rank, count};
  return 0;
}

static int cmp_mb(const void *a, const void *b) {
  const ev_mb_t *x = a, *y = b;
  if (x->iter != y->iter)
    return (x->iter > y->iter) - (x->iter < y->iter);
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Strict number parsing: the whole token, finite. */
static int num(const char *tok, double *out) {
  char *end;
  errno = 0;
  double v = strtod(tok, &end);
  if (end == tok || *end || errno == ERANGE || !isfinite(v))
    return -1;
  *out = v;
  return 0;
}

static int whole(const char *tok, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(tok, &end, 10);
  if (end == tok || *end || errno == ERANGE || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

static int split(char *line, char **tok, int max) {
  int n = 0;
  char *save = NULL;
  for (char *t = strtok_r(line, " \t\r\n", &save); t;
       t = strtok_r(NULL, " \t\r\n", &save)) {
    if (n == max)
      return max + 1;
    tok[n++] = t;
  }
  return n;
}

/* Optional key=value words after a slow label. */
static int slow_option(ev_episode_t *e, const char *tok) {
  double v;
  if (!strncmp(tok, "ramp=", 5) && !num(tok + 5, &v) && v >= 1) {
    e->ramp_from = v;
    return 0;
  }
  if (!strncmp(tok, "eff=", 4) && !num(tok + 4, &v) && v >= 1) {
    e->eff = v;
    return 0;
  }
  long h;
  if (!strncmp(tok, "hold=", 5) && !whole(tok + 5, 1, UINT32_MAX - 1, &h)) {
    e->hold = (uint32_t)h;
    return 0;
  }
  return -1;
}

/* A ground-truth label: the trace is labelled from now on. */
static int add_label(struct file_src *f, const ev_episode_t *e,
                     const char *where, char *err, size_t errlen) {
  f->src.labelled = 1;
  if (ev_add_episode(&f->src, e)) {
    say(err, errlen, "%s: out of memory", where);
    return -1;
  }
  return 0;
}

static int directive(struct file_src *f, char **tok, int nt, const char *where,
                     char *err, size_t errlen) {
  long v[3];
  double factor;
  if (!strcmp(tok[0], "mb")) {
    int bad = nt < 2 || nt > 4;
    if (!bad && nt == 2)
      bad = whole(tok[1], 1, 1 << 16, &v[0]);
    if (!bad && nt == 3)
      bad = whole(tok[1], 0, UINT32_MAX - 1, &v[0]) ||
            whole(tok[2], 0, 1 << 16, &v[1]);
    if (!bad && nt == 4)
      bad = whole(tok[1], 0, UINT32_MAX - 1, &v[0]) ||
            whole(tok[2], 0, RANK_MAX - 1, &v[1]) ||
            whole(tok[3], 0, 1 << 16, &v[2]);
    if (bad) {
      say(err, errlen,
          "%s: expected '#! mb M' (1 <= M <= 65536), '#! mb ITER M' or "
          "'#! mb ITER RANK M' (0 <= M <= 65536)",
          where);
      return -1;
    }
    if (nt == 2) {
      f->src.mb = (int)v[0];
      return 0;
    }
    int rc = nt == 3 ? add_mb(&f->src, (uint32_t)v[0], -1, (int)v[1])
                     : add_mb(&f->src, (uint32_t)v[0], (int)v[1], (int)v[2]);
    if (rc)
      say(err, errlen, "%s: out of memory", where);
    return rc;
  }
  if (!strcmp(tok[0], "nofault")) {
    if (nt != 1) {
      say(err, errlen, "%s: expected '#! nofault' alone", where);
      return -1;
    }
    f->nofault = 1;
    f->src.labelled = 1;
    return 0;
  }
  if (!strcmp(tok[0], "slow")) {
    ev_episode_t e = {0};
    int bad = nt < 6 || nt > 9 || whole(tok[1], 0, RANK_MAX - 1, &v[0]) ||
              whole(tok[2], 0, UINT32_MAX - 1, &v[1]) ||
              whole(tok[3], 0, UINT32_MAX - 1, &v[2]) || v[2] <= v[1] ||
              num(tok[4], &factor) || factor < 1 ||
              (strcmp(tok[5], "compute") && strcmp(tok[5], "comm"));
    for (int i = 6; !bad && i < nt; i++)
      bad = slow_option(&e, tok[i]);
    /* a ramp that holds reaches its factor inside the episode */
    if (!bad && e.hold)
      bad = !(e.ramp_from > 0) || e.hold <= (uint32_t)v[1] ||
            e.hold > (uint32_t)v[2];
    if (bad) {
      say(err, errlen,
          "%s: expected '#! slow RANK START END FACTOR compute|comm "
          "[ramp=FROM] [hold=H] [eff=EFFECTIVE]' with START < END, FACTOR, "
          "FROM, EFFECTIVE >= 1 and, with ramp=, START < H <= END",
          where);
      return -1;
    }
    e.rank = (int)v[0];
    e.start = (uint32_t)v[1];
    e.end = (uint32_t)v[2];
    e.factor = factor;
    e.kind = strcmp(tok[5], "comm") ? EV_COMPUTE : EV_COMM;
    return add_label(f, &e, where, err, errlen);
  }
  if (!strcmp(tok[0], "stop")) {
    ev_episode_t e = {0};
    if (nt != 4 || whole(tok[1], 0, RANK_MAX - 1, &v[0]) ||
        whole(tok[2], 0, UINT32_MAX - 1, &v[1]) ||
        whole(tok[3], 0, UINT32_MAX, &v[2]) || v[2] <= v[1]) {
      say(err, errlen,
          "%s: expected '#! stop RANK START REJOIN' with START < REJOIN",
          where);
      return -1;
    }
    e.rank = (int)v[0];
    e.start = (uint32_t)v[1];
    e.end = (uint32_t)v[2];
    e.kind = EV_STOP;
    return add_label(f, &e, where, err, errlen);
  }
  if (!strcmp(tok[0], "hang")) {
    ev_episode_t e = {.rank = -1, .kind = EV_HANG};
    if (nt != 3 || whole(tok[1], 0, UINT32_MAX - 1, &v[0]) ||
        whole(tok[2], 0, UINT32_MAX, &v[1]) || v[1] <= v[0]) {
      say(err, errlen,
          "%s: expected '#! hang START END' with START < END (the whole "
          "job: no samples in START..END-1)",
          where);
      return -1;
    }
    e.start = (uint32_t)v[0];
    e.end = (uint32_t)v[1];
    return add_label(f, &e, where, err, errlen);
  }
  say(err, errlen,
      "%s: unknown directive '#! %.32s' (known: mb, slow, stop, hang, "
      "nofault)",
      where, tok[0]);
  return -1;
}

static int sample_line(struct file_src *f, char **tok, int nt,
                       const char *where, char *err, size_t errlen) {
  static const char *const names[] = {"iter",   "rank", "stage",  "tokens",
                                      "sum_l2", "nseq", "time_us"};
  if (nt != 7) {
    say(err, errlen,
        "%s: expected 7 fields 'iter rank stage tokens sum_l2 nseq "
        "time_us', got %d",
        where, nt > 7 ? 8 : nt);
    return -1;
  }
  long it, rank, stage;
  double v[4];
  if (whole(tok[0], 0, UINT32_MAX - 1, &it)) {
    say(err, errlen, "%s: iter '%.32s' is not an integer in 0..%u", where,
        tok[0], UINT32_MAX - 1);
    return -1;
  }
  if (whole(tok[1], 0, RANK_MAX - 1, &rank)) {
    say(err, errlen, "%s: rank '%.32s' is not an integer in 0..%d", where,
        tok[1], RANK_MAX - 1);
    return -1;
  }
  if (whole(tok[2], 0, INT_MAX, &stage)) {
    say(err, errlen, "%s: stage '%.32s' is not an integer >= 0", where, tok[2]);
    return -1;
  }
  for (int i = 0; i < 4; i++)
    if (num(tok[3 + i], &v[i])) {
      say(err, errlen, "%s: %s '%.32s' is not a finite number", where,
          names[3 + i], tok[3 + i]);
      return -1;
    }
  if (v[3] <= 0) {
    say(err, errlen, "%s: time_us %g must be > 0", where, v[3]);
    return -1;
  }
  double N = v[0], S = v[1], K = v[2];
  if (N < 1 || K < 1 || K > N) {
    say(err, errlen,
        "%s: empty or impossible batch (tokens %g, nseq %g): need 1 <= nseq "
        "<= tokens",
        where, N, K);
    return -1;
  }
  if (S > N * N * (1 + 1e-9) || S < N * N / K * (1 - 1e-9)) {
    say(err, errlen,
        "%s: sum_l2 %g impossible for %g tokens in %g sequences (must lie "
        "in tokens^2/nseq..tokens^2 = %g..%g)",
        where, S, N, K, N * N / K, N * N);
    return -1;
  }
  if (f->n && (uint32_t)it < f->s[f->n - 1].iter) {
    say(err, errlen,
        "%s: iteration %ld after %u; sample lines must be in "
        "non-decreasing iteration order",
        where, it, f->s[f->n - 1].iter);
    return -1;
  }
  if (f->n == f->cap) {
    size_t cap = f->cap ? 2 * f->cap : 4096;
    ev_sample_t *p = realloc(f->s, cap * sizeof(*p));
    if (!p) {
      say(err, errlen, "%s: out of memory", where);
      return -1;
    }
    f->s = p;
    f->cap = cap;
  }
  f->s[f->n++] = (ev_sample_t){.iter = (uint32_t)it,
                               .rank = (int)rank,
                               .stage = (int)stage,
                               .w = {N, S, K},
                               .t = v[3]};
  return 0;
}

ev_source_t *ev_file_open(const char *path, char *err, size_t errlen) {
  FILE *fp = strcmp(path, "-") ? fopen(path, "r") : stdin;
  if (!fp) {
    say(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  ev_source_t *s = ev_trace_read(fp, path, err, errlen);
  if (fp != stdin)
    fclose(fp);
  return s;
}

ev_source_t *ev_trace_read(FILE *fp, const char *path, char *err,
                           size_t errlen) {
  struct file_src *f = calloc(1, sizeof(*f));
  if (!f) {
    say(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  f->src.next = file_next;
  f->src.destroy = file_destroy;
  const char *base = strrchr(path, '/');
  snprintf(f->src.name, sizeof(f->src.name), "%s",
           !strcmp(path, "-") ? "stdin"
           : base             ? base + 1
                              : path);
  char line[LINE_MAX_LEN + 2];
  char where[300];
  long lineno = 0;
  int rc = 0, mb_given = 0;
  while (!rc && fgets(line, sizeof(line), fp)) {
    lineno++;
    snprintf(where, sizeof(where), "%.250s:%ld", path, lineno);
    size_t len = strlen(line);
    if (len > LINE_MAX_LEN && line[len - 1] != '\n') {
      say(err, errlen, "%s: line longer than %d characters", where,
          LINE_MAX_LEN);
      rc = -1;
      break;
    }
    char *tok[10];
    if (!strncmp(line, "#!", 2)) {
      int nt = split(line + 2, tok, 9);
      if (nt == 0) {
        say(err, errlen, "%s: empty directive", where);
        rc = -1;
      } else {
        mb_given |= nt == 2 && !strcmp(tok[0], "mb");
        rc = directive(f, tok, nt, where, err, errlen);
      }
      continue;
    }
    char *hash = strchr(line, '#');
    if (hash)
      *hash = '\0';
    int nt = split(line, tok, 8);
    if (nt == 0)
      continue;
    rc = sample_line(f, tok, nt, where, err, errlen);
  }
  if (!rc && ferror(fp)) {
    say(err, errlen, "%s: read error: %s", path, strerror(errno));
    rc = -1;
  }
  if (!rc && f->nofault && f->src.nep) {
    say(err, errlen,
        "%s: '#! nofault' and fault labels ('#! slow', '#! stop') "
        "contradict each other; keep one",
        path);
    rc = -1;
  }
  if (!rc && f->n == 0) {
    say(err, errlen,
        "%s: no sample lines (expected 'iter rank stage tokens "
        "sum_l2 nseq time_us')",
        path);
    rc = -1;
  }
  if (rc) {
    file_destroy(&f->src);
    return NULL;
  }
  /* Ranks and microbatches per iteration follow from the samples. */
  int max_rank = 0, mb = 1;
  size_t run = 0;
  for (size_t i = 0; i < f->n; i++)
    if (f->s[i].rank > max_rank)
      max_rank = f->s[i].rank;
  int *count = calloc((size_t)max_rank + 1, sizeof(int));
  if (!count) {
    say(err, errlen, "%s: out of memory", path);
    file_destroy(&f->src);
    return NULL;
  }
  for (size_t i = 0; i < f->n; i = run) {
    for (run = i; run < f->n && f->s[run].iter == f->s[i].iter; run++)
      if (++count[f->s[run].rank] > mb)
        mb = count[f->s[run].rank];
    for (size_t j = i; j < run; j++)
      count[f->s[j].rank] = 0;
  }
  free(count);
  for (size_t i = 0; i < f->src.nep; i++)
    if (f->src.ep[i].rank > max_rank) {
      say(err, errlen, "%s: a '#!' label names rank %d, which has no samples",
          path, f->src.ep[i].rank);
      file_destroy(&f->src);
      return NULL;
    }
  for (size_t i = 0; i < f->src.nmb; i++)
    if (f->src.mbl[i].rank > max_rank) {
      say(err, errlen,
          "%s: '#! mb' names rank %d, which has no samples; list only the "
          "job's ranks",
          path, f->src.mbl[i].rank);
      file_destroy(&f->src);
      return NULL;
    }
  if (f->src.nmb)
    qsort(f->src.mbl, f->src.nmb, sizeof(f->src.mbl[0]), cmp_mb);
  f->src.n_ranks = max_rank + 1;
  if (!mb_given)
    f->src.mb = mb;
  f->src.n_iters = f->s[f->n - 1].iter + 1;
  /* a hang at the end of the trace lasts as labelled */
  for (size_t i = 0; i < f->src.nep; i++)
    if (f->src.ep[i].kind == EV_HANG && f->src.ep[i].end > f->src.n_iters)
      f->src.n_iters = f->src.ep[i].end;
  return &f->src;
}

int ev_write_trace(ev_source_t *src, const char *path, const char *comment,
                   char *err, size_t errlen) {
  FILE *fp = strcmp(path, "-") ? fopen(path, "w") : stdout;
  if (!fp) {
    say(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    return -1;
  }
  fprintf(fp,
          "# resihp detector trace (resihp-detect-eval(1))\n"
          "# %s\n"
          "# iter rank stage tokens sum_l2 nseq time_us\n"
          "#! mb %d\n",
          comment, src->mb);
  if (src->labelled && !src->nep)
    fprintf(fp, "#! nofault\n");
  for (size_t i = 0; i < src->nep; i++) {
    const ev_episode_t *e = &src->ep[i];
    if (e->kind == EV_STOP)
      fprintf(fp, "#! stop %d %u %u\n", e->rank, e->start, e->end);
    else if (e->kind == EV_HANG)
      fprintf(fp, "#! hang %u %u\n", e->start, e->end);
    else {
      fprintf(fp, "#! slow %d %u %u %g %s", e->rank, e->start, e->end,
              e->factor, e->kind == EV_COMM ? "comm" : "compute");
      if (e->ramp_from > 0)
        fprintf(fp, " ramp=%g", e->ramp_from);
      if (e->hold)
        fprintf(fp, " hold=%u", e->hold);
      if (e->eff > 0)
        fprintf(fp, " eff=%g", e->eff);
      fputc('\n', fp);
    }
  }
  uint32_t it;
  const ev_sample_t *s;
  size_t n;
  int rc;
  while ((rc = src->next(src, &it, &s, &n)) > 0)
    for (size_t i = 0; i < n; i++)
      fprintf(fp, "%u %d %d %.0f %.0f %.0f %.3f\n", s[i].iter, s[i].rank,
              s[i].stage, s[i].w.tokens, s[i].w.sum_l2, s[i].w.nseq, s[i].t);
  int bad = ferror(fp);
  if (fp != stdout)
    bad |= fclose(fp) != 0;
  else
    bad |= fflush(fp) != 0;
  if (rc < 0 || bad) {
    say(err, errlen, "%s: write failed", path);
    return -1;
  }
  return 0;
}
