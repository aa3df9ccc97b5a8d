/* SPDX-License-Identifier: BSD-3-Clause */
/* The toy training of the job tests (train_model.h). */
#include "config.h"

#include "train_model.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void tm_job_opts(resihp_job_opts_t *o, long steps, const char *coord,
                 int replica, const char *secret, uint64_t *m,
                 resihp_job_buf_t *sb) {
  resihp_job_opts_init(o);
  o->microbatches = MBS;
  o->steps = steps;
  o->coordinator = coord;
  o->replica = replica;
  o->secret_file = secret;
  o->inject = "";
  o->timeout_ms = 20000;
  sb->data = m;
  sb->bytes = sizeof(uint64_t) * NB;
  o->state = sb;
  o->nstate = 1;
}

void tm_spawn(int K, int r, pid_t *pids, int (*fn)(void *ud, int r), void *ud) {
  char v[16];
  unsetenv("PMIX_RANK");
  snprintf(v, sizeof(v), "%d", K);
  setenv("SLURM_NTASKS", v, 1);
  for (int k = 0; k < K; k++) {
    snprintf(v, sizeof(v), "%d", k);
    setenv("SLURM_PROCID", v, 1);
    pids[k] = fork();
    if (pids[k] == 0)
      _exit(fn(ud, r));
  }
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
}

int64_t tm_contribution(long s, int mb, int i, int sh) {
  return (s + 1) * 131 + (int64_t)mb * 17 * (i + 1) + sh * 3;
}

/* One element after a step: order matters (a real recurrence). */
static uint64_t apply(uint64_t x, int64_t sum) {
  return x * 6364136223846793005ULL + (uint64_t)sum;
}

void tm_result_text(const uint64_t *m, char *out, size_t n) {
  snprintf(out, n, "%llx.%llx", (unsigned long long)m[0],
           (unsigned long long)m[NB - 1]);
}

void tm_reference(int K, long steps, char *out, size_t n) {
  size_t off = 0;
  for (int sh = 0; sh < K; sh++) {
    uint64_t m[NB] = {0};
    for (long s = 0; s < steps; s++)
      for (int i = 0; i < NB; i++) {
        int64_t a = 0;
        for (int mb = 0; mb < MBS; mb++)
          a += tm_contribution(s, mb, i, sh);
        m[i] = apply(m[i], a);
      }
    char one[64];
    tm_result_text(m, one, sizeof(one));
    off += (size_t)snprintf(out + off, n - off, "%s%s", sh ? "/" : "", one);
  }
}

/* Tokens of microbatch mb of step s: a power of two from 200 to 6400 us,
 * the largest at mb = s % MBS, so that the assignment by cost moves from
 * step to step and is far from every tie (see train_model.h). */
static double wl_tokens(long s, int mb) {
  return 200.0 * (double)(1 << (MBS - 1 - (int)((mb - s % MBS + MBS) % MBS)));
}

int tm_workload(long s, int mb, double *tokens, double *sum_l2, double *nseq,
                void *ud) {
  (void)ud;
  if (s < 0 || mb < 0 || mb >= MBS)
    return -1;
  *tokens = wl_tokens(s, mb);
  *sum_l2 = *tokens * *tokens; /* one sequence */
  *nseq = 1;
  return 0;
}

int tm_step_shards(resihp_job_t *job, const resihp_job_step_t *st, int sh,
                   int nsh, uint64_t *m, int compute_us, int by_workload) {
  int64_t acc[NB * TM_MAX_SHARDS] = {0};
  int n = NB * nsh;
  if (nsh < 1 || nsh > TM_MAX_SHARDS)
    return RESIHP_EINVAL;
  usleep((useconds_t)compute_us);
  for (int k = 0; k < st->nmbs; k++) {
    for (int i = 0; i < n; i++)
      acc[i] += tm_contribution(st->step, st->mbs[k], i % NB, sh + i / NB);
    double t, l2, ns;
    if (by_workload && !tm_workload(st->step, st->mbs[k], &t, &l2, &ns, NULL))
      resihp_job_report_microbatch(job, st->mbs[k], t, l2, ns, t * 1e-6);
    else
      resihp_job_report_microbatch(job, st->mbs[k], 100, 5200, 2, 0.001);
  }
  int rc;
  while ((rc = resihp_job_allreduce(job, acc, (size_t)n)) == RESIHP_EREASSIGNED)
    for (int k = 0; k < st->nextra; k++)
      for (int i = 0; i < n; i++)
        acc[i] += tm_contribution(st->step, st->extra[k], i % NB, sh + i / NB);
  if (rc)
    return rc;
  for (int i = 0; i < n; i++)
    m[i] = apply(m[i], acc[i]);
  return 0;
}

int tm_step_wl(resihp_job_t *job, const resihp_job_step_t *st, int sh,
               uint64_t *m, int compute_us, int by_workload) {
  return tm_step_shards(job, st, sh, 1, m, compute_us, by_workload);
}

int tm_step(resihp_job_t *job, const resihp_job_step_t *st, int sh, uint64_t *m,
            int compute_us) {
  return tm_step_wl(job, st, sh, m, compute_us, 0);
}

void tm_expect_cost_owners(long s, int R, int *owner) {
  double cost[MBS];
  int pick[MBS];
  for (int mb = 0; mb < MBS; mb++)
    cost[mb] = wl_tokens(s, mb);
  ck_assert_int_eq(
      resihp_planner_assign(RESIHP_ASSIGN_COST, cost, MBS, NULL, R, pick, NULL),
      0);
  for (int mb = 0; mb < MBS; mb++)
    owner[mb] = pick[mb];
}

int tm_check_ledger(FILE *f, int R, long steps, long *owned, long *lost_at) {
  rewind(f);
  char line[512];
  long want = 0;
  for (int r = 0; r < R; r++)
    lost_at[r] = -1;
  int *seen = calloc((size_t)R, sizeof(int));
  if (!seen)
    return 0;
  int ok = 1;
  while (ok && fgets(line, sizeof(line), f)) {
    char *q = line, *e;
    long s = strtol(q, &e, 10);
    if (e == q || s != want++) {
      ok = 0;
      break;
    }
    int n = 0;
    memset(seen, 0, sizeof(int) * (size_t)R);
    for (q = e;; q = e) {
      long o = strtol(q, &e, 10);
      if (e == q)
        break;
      if (o < 0 || o >= R) {
        ok = 0;
        break;
      }
      seen[o] = 1;
      n++;
    }
    if (n != MBS)
      ok = 0;
    for (int r = 0; ok && r < R; r++) {
      owned[r] += seen[r];
      if (!seen[r] && owned[r] && lost_at[r] < 0)
        lost_at[r] = s;
    }
  }
  free(seen);
  return ok && want == steps;
}

void tm_expect_result(const char *summary, int K, long n, int replicas) {
  char want[256], agree[64];
  tm_reference(K, n, want, sizeof(want));
  snprintf(agree, sizeof(agree), "(%d replicas agree)", replicas);
  ck_assert_msg(strstr(summary, want), "want %s: %s", want, summary);
  ck_assert_msg(strstr(summary, agree), "%s", summary);
}
