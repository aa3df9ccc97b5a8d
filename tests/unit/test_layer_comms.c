/* SPDX-License-Identifier: BSD-3-Clause */
/* The layer-keyed groups over real sockets (recovery/layer_groups.h,
 * resihp__comm_create_group): forked ranks of replicas whose partitions
 * differ, each rank with ONE listening socket, set up one fault-tolerant
 * group per run of layers it holds (ascending run, the run's first layer
 * as the handshake's group), and exchange each run's slice of its
 * gradient there. Every element comes out as the sum over the replicas,
 * added exactly once per replica (exact int64). With a single-rank
 * replica SIGKILLed from outside after the set-up, every group loses it,
 * the survivors shrink each group and redo its run: the sums over the
 * survivors, again exactly once each. */
#include "config.h"

#include "../../libresihp/collectives/comm_internal.h"
#include "../../libresihp/recovery/layer_groups.h"
#include "rank_group.h"

#include <resihp/error.h>

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define L 7      /* layers */
#define MAXR 4   /* replicas */

/* A job: replica q holds the layers in partition part[q] with its ranks
 * at process base[q] + k. */
typedef struct {
  int R, n;
  int counts[MAXR][L];
  int base[MAXR + 1];
  size_t elems[L];
  int victim; /* a single-rank replica killed after set-up, or -1 */
} job_t;

static unsigned long long rng;
static unsigned rnd(unsigned n) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (unsigned)((rng >> 33) % n);
}

/* Random partitions (1..3 ranks each, at most MAXN processes in all). */
static void make_job(job_t *j, unsigned seed, int victim) {
  memset(j, 0, sizeof(*j));
  rng = seed * 7919ULL + 3;
  j->R = 2 + (int)rnd(MAXR - 1);
  j->victim = victim ? j->R - 1 : -1;
  for (int l = 0; l < L; l++)
    j->elems[l] = 1 + rnd(3);
  for (int q = 0; q < j->R; q++) {
    int left = MAXN - j->base[q] - (j->R - 1 - q); /* room for the rest */
    int k = q == j->victim ? 1 : 1 + (int)rnd(3);
    if (k > left)
      k = left;
    for (int i = 0; i < k; i++)
      j->counts[q][i] = 1;
    for (int i = L - k; i > 0; i--)
      j->counts[q][rnd((unsigned)k)]++;
    j->base[q + 1] = j->base[q] + k;
  }
  j->n = j->base[j->R];
}

static int64_t grad(int replica, size_t e) {
  return (int64_t)(replica + 1) * 1000 + (int64_t)e;
}

static int rank_main(int p, int n, void *arg) {
  const job_t *j = arg;
  (void)n;
  int me = 0;
  while (j->base[me + 1] <= p)
    me++;
  int k = p - j->base[me], rc = 0;
  resihp__partition_t part[MAXR];
  for (int q = 0; q < j->R; q++)
    if (resihp__partition_from_counts(j->counts[q], j->base[q + 1] - j->base[q],
                                      L, &part[q]))
      return 20;
  /* as a rank of a job learns them: every member's cut points as text;
   * the map from the distinct partitions among them */
  char text[MAXR][64];
  const char *tp[MAXR];
  int of[MAXR], nd = 0, holder[MAXR];
  resihp__partition_t *dp = NULL;
  for (int q = 0; q < j->R; q++) {
    if (resihp__partition_format(&part[q], text[q], sizeof(text[q])))
      return 20;
    tp[q] = text[q];
  }
  resihp__runmap_t m;
  size_t *off = resihp__layers_offsets(j->elems, L);
  int r0, r1;
  if (!off || resihp__partitions_distinct(tp, j->R, L, &dp, &nd, of) ||
      resihp__runmap_build(&m, L, dp, nd) ||
      resihp__runmap_rank_runs(&m, &part[me], k, &r0, &r1))
    return 21;
  size_t mine0 = off[part[me].bounds[k]], mine1 = off[part[me].bounds[k + 1]];
  int64_t *buf = calloc(mine1 - mine0, sizeof(int64_t));
  resihp_comm_t **comm = calloc((size_t)(r1 - r0), sizeof(*comm));
  if (!buf || !comm)
    return 22;
  for (size_t e = mine0; e < mine1; e++)
    buf[e - mine0] = grad(me, e);
  /* the groups, one per run, ascending; member q is replica q's holder */
  for (int r = r0; r < r1; r++) {
    const char *ep[MAXR];
    resihp__runmap_holders(&m, r, dp, of, j->R, holder);
    for (int q = 0; q < j->R; q++)
      ep[q] = eps[j->base[q] + holder[q]];
    if ((rc = make_comm_group(me, j->R, ep, lfds[p],
                              (uint32_t)resihp__runmap_group(&m, r) + 1,
                              SECRET, 0, -1, &comm[r - r0])))
      return 23;
  }
  if (me == j->victim)
    raise(SIGSTOP); /* killed from outside, here */
  for (int r = r0; r < r1; r++) {
    size_t a = off[m.first[r]] - mine0, b = off[m.first[r + 1]] - mine0;
    for (;;) {
      rc = resihp_allreduce(comm[r - r0], buf + a, b - a, RESIHP_FIXED64,
                            RESIHP_OP_SUM);
      if (!rc)
        break;
      if (j->victim < 0)
        return 24;
      int failed[MAXR], nf = 0;
      if (resihp_comm_shrink(comm[r - r0], NULL, 0, failed, MAXR, &nf))
        return 25;
    }
    /* the members the sum covered: everyone, or all but the victim */
    int size = resihp_comm_size(comm[r - r0]);
    if (size != (j->victim < 0 ? j->R : j->R - 1))
      return 26;
    for (size_t e = a; e < b; e++) {
      int64_t want = 0;
      for (int q = 0; q < j->R; q++)
        if (q != j->victim)
          want += grad(q, mine0 + e);
      if (buf[e] != want)
        return 27;
    }
  }
  for (int r = r0; r < r1; r++)
    resihp_comm_destroy(comm[r - r0]);
  free(comm);
  free(buf);
  free(off);
  resihp__runmap_free(&m);
  for (int q = 0; q < j->R; q++)
    resihp__partition_free(&part[q]);
  for (int d = 0; d < nd; d++)
    resihp__partition_free(&dp[d]);
  free(dp);
  return 0;
}

START_TEST(differing_partitions_sum_once) {
  job_t j;
  make_job(&j, 11 + (unsigned)_i, 0);
  detect_ms = CALM_DETECT_MS;
  int st[MAXN];
  run_group(j.n, rank_main, &j, st);
  for (int p = 0; p < j.n; p++)
    ck_assert_msg(WIFEXITED(st[p]) && WEXITSTATUS(st[p]) == 0,
                  "job %d: process %d of %d: status %#x", _i, p, j.n, st[p]);
}
END_TEST

START_TEST(replica_killed_every_group_recovers) {
  job_t j;
  make_job(&j, 101 + (unsigned)_i, 1);
  detect_ms = DETECT_MS;
  kill_stopped_rank = j.base[j.victim];
  int st[MAXN];
  run_group(j.n, rank_main, &j, st);
  for (int p = 0; p < j.n; p++)
    if (p != j.base[j.victim])
      ck_assert_msg(WIFEXITED(st[p]) && WEXITSTATUS(st[p]) == 0,
                    "job %d: process %d of %d: status %#x", _i, p, j.n, st[p]);
  ck_assert(WIFSIGNALED(st[j.base[j.victim]]));
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("layer_comms");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, differing_partitions_sum_once, 0, 6);
  tcase_add_loop_test(tc, replica_killed_every_group_recovers, 0, 3);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return run_suite(suite()); }
