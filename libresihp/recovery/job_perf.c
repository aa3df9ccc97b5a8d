/* SPDX-License-Identifier: BSD-3-Clause */
/* What a rank tells the coordinator's fail-slow detector (see
 * libresihp/control/coord_perf.c): after each step its microbatch samples
 * (PERF), and, when the coordinator asked this replica, the workloads of
 * the next step's microbatches from the trainer's data loader (WL), so
 * that they can be assigned by predicted cost. Both are sent before the
 * next BEGIN; a rank other than the leader sends its PERF up the star,
 * and the leader's relay thread forwards it with the rank's index.
 * While the replicas run free (job_step.c) the samples of a step are sent
 * only when the ranks agreed at its end that a report period has passed
 * since the last ones (resihp__job_report_ms: 100 ms, longer in a job of
 * more than 200 ranks, so that the coordinator hears at most about 2,000
 * PERF lines a second): the same steps on every rank, so that the
 * detector still compares peers on the same work, at O(1) lines a second
 * instead of one per step; the workloads asked for
 * are then those of the step at which the run ends (with its BEGIN).
 * resihp__job_workloads is also what a free run by cost assigns each
 * step from (job_step.c): the figures the coordinator would get. */
#include "config.h"

#include "job_internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <math.h>
#include <stdlib.h>

int resihp__job_report_every_step;

int64_t resihp__job_report_ms(int nmembers, int lsize) {
  if (resihp__job_report_every_step)
    return 0;
  int64_t ranks =
      (int64_t)(nmembers > 0 ? nmembers : 1) * (lsize > 0 ? lsize : 1);
  int64_t ms = ranks / 2; /* 2,000 lines a second */
  /* but a slowdown is still confirmed within minutes */
  if (ms > RESIHP__JOB_REPORT_MAX_MS)
    ms = RESIHP__JOB_REPORT_MAX_MS;
  return ms > RESIHP__JOB_PERF_MS ? ms : RESIHP__JOB_PERF_MS;
}

static long long whole(double v) {
  return resihp__costplan_whole(v);
}

int resihp__job_workloads(resihp_job_t *j, long step, resihp_workload_t *w) {
  if (!j->wl_fn)
    return RESIHP_ENOENT;
  for (int mb = 0; mb < j->o.microbatches; mb++) {
    double t = 0, l2 = 0, ns = 0;
    if (j->wl_fn(step, mb, &t, &l2, &ns, j->wl_ud)) {
      resihp_log(RESIHP_LOG_DEBUG, "job",
                 "no workload for microbatch %d of step %ld", mb, step);
      return RESIHP_ENOENT;
    }
    w[mb] = (resihp_workload_t){(double)whole(t), (double)whole(l2),
                                (double)whole(ns)};
  }
  return 0;
}

static void send_line(resihp_job_t *j, const resihp__wire_buf_t *b) {
  if (!b->err && b->s)
    resihp__job_tell(j, b->s);
}

static void send_samples(resihp_job_t *j) {
  long s = j->step, first = j->nsamples;
  long oldest =
      j->nsamples > RESIHP__JOB_SAMPLES ? j->nsamples - RESIHP__JOB_SAMPLES : 0;
  while (first > oldest &&
         j->samples[(first - 1) % RESIHP__JOB_SAMPLES].step == s)
    first--;
  if (first == j->nsamples)
    return;
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  resihp__wire_buf_printf(&b, "PERF step=%ld s=", s);
  for (long i = first; i < j->nsamples; i++) {
    const resihp_job_mb_sample_t *x = &j->samples[i % RESIHP__JOB_SAMPLES];
    long long us = whole(x->seconds * 1e6);
    resihp__wire_buf_printf(&b, "%s%d:%lld:%lld:%lld:%lld",
                            i > first ? "," : "", x->mb, us ? us : 1,
                            whole(x->tokens), whole(x->sum_l2), whole(x->nseq));
  }
  send_line(j, &b);
  resihp__wire_buf_free(&b);
}

static void send_workloads(resihp_job_t *j, long step) {
  resihp_workload_t *w =
      malloc(sizeof(resihp_workload_t) * (size_t)j->o.microbatches);
  if (!w || resihp__job_workloads(j, step, w)) {
    free(w);
    return; /* not sent: the step is assigned by counts */
  }
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  resihp__wire_buf_printf(&b, "WL step=%ld w=", step);
  for (int mb = 0; mb < j->o.microbatches; mb++)
    resihp__wire_buf_printf(&b, "%s%lld:%lld:%lld", mb ? "," : "",
                            (long long)w[mb].tokens, (long long)w[mb].sum_l2,
                            (long long)w[mb].nseq);
  send_line(j, &b);
  resihp__wire_buf_free(&b);
  free(w);
}

void resihp__job_send_perf(resihp_job_t *j) {
  if (!j->member)
    return;
  send_samples(j);
  /* free-running, the workloads asked for are those of the step at which
   * the run ends, sent with its BEGIN */
  if (j->run)
    return;
  if (j->lrank == 0 && j->wl_asked && j->wl_fn)
    send_workloads(j, j->step + 1);
  j->wl_asked = 0;
}

int resihp_job_set_workload_fn(resihp_job_t *j, resihp_job_workload_fn fn,
                               void *ud) {
  if (!j)
    return RESIHP_EINVAL;
  j->wl_fn = fn;
  j->wl_ud = ud;
  return 0;
}
