/* SPDX-License-Identifier: BSD-3-Clause */
/* A second failure during a shrink agreement, with the ranks' timing forced
 * by hooks so that the race happens every run:
 *
 *   5 ranks; rank 1 is SIGKILLed in the first all-reduce (epoch 0). Ranks
 *   0 and 2 finish the agreement's round 0 but wait, before committing,
 *   until rank 4's round-1 message has reached them. Rank 3 commits epoch
 *   1 at once and is SIGKILLed in its first chunk there. Rank 4 holds its
 *   round 0 until it has seen rank 3 die, so its own detection sends it to
 *   round 1 of the epoch-0 agreement, which its peers have decided.
 *
 * Rank 4 must adopt the decision its peers took (they answer its late
 * message with DECIDED although it reached them before their commit), then
 * all three survivors shrink once more together: every survivor ends in
 * epoch 2 with members {0, 2, 4}. Before the fix, the message that arrived
 * before the commit was dropped with the old epoch's mailboxes: rank 4
 * waited for answers nobody sent, and the survivors split into two views
 * (a CI run saw epochs 1 and 2). */
#include "config.h"

#include "../../libresihp/collectives/comm_internal.h"
#include "rank_group.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 5
#define FIRST 1  /* killed in epoch 0 */
#define SECOND 3 /* killed in epoch 1 */
#define LATE 4   /* sees SECOND die before it finishes round 0 */
#define COUNT 10000
#define CHUNK 4096
/* A safety net only: every wait below is for an event that comes. */
#define WAIT_MS 20000

static void ring_hook(resihp_comm_t *c, int step, size_t chunk) {
  int me = resihp_comm_world_rank(c);
  uint32_t e = resihp_comm_epoch(c);
  if ((me == FIRST && e == 0 && step == 0 && chunk == 0) ||
      (me == SECOND && e == 1 && step == 0 && chunk == 1))
    raise(SIGKILL);
}

/* Wait (c->mu held) until done(c) or the safety net. */
static int wait_for(resihp_comm_t *c, int (*done)(resihp_comm_t *)) {
  int64_t end = (int64_t)now_ms() + WAIT_MS;
  while (!done(c)) {
    if ((int64_t)now_ms() > end)
      return -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
  }
  return 0;
}

static int second_dead(resihp_comm_t *c) {
  return resihp__set_has(&c->dead, SECOND);
}

static int late_round1_in(resihp_comm_t *c) {
  const struct mbox *m = &c->mbox[LATE][1];
  return m->have && m->round == 1;
}

static void shrink_hook(resihp_comm_t *c, int point, uint32_t round) {
  int me = resihp_comm_world_rank(c);
  if (resihp_comm_epoch(c) != 0 || round != 0)
    return;
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  if (me == LATE && point == 0)
    rc = wait_for(c, second_dead);
  else if ((me == 0 || me == 2) && point == 1)
    rc = wait_for(c, late_round1_in);
  pthread_mutex_unlock(&c->mu);
  if (rc)
    fprintf(stderr, "rank %d: the forced order did not happen\n", me);
}

static int rank_main(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  detect_ms = DETECT_MS;
  if (make_comm(rank, n, SECRET, CHUNK, 0, &c))
    return 1;
  resihp__ring_test_hook = ring_hook;
  resihp__shrink_test_hook = shrink_hook;
  float *buf = malloc(COUNT * sizeof(float));
  int attempts = 0, rc;
  do {
    attempts++;
    fill(buf, COUNT, RESIHP_FLOAT32, rank);
    rc = resihp_allreduce(c, buf, COUNT, RESIHP_FLOAT32, RESIHP_OP_SUM);
    if (rc == RESIHP_EPEER || rc == RESIHP_ETIMEDOUT) {
      int nf = 0, failed[MAXN];
      int src = resihp_comm_shrink(c, NULL, 0, failed, MAXN, &nf);
      if (src) {
        fprintf(stderr, "rank %d: shrink: %s\n", rank, resihp_err_name(src));
        return src == RESIHP_EEXCLUDED ? 3 : 1;
      }
    } else if (rc) {
      fprintf(stderr, "rank %d: %s\n", rank, resihp_err_name(rc));
      return 1;
    }
  } while (rc && attempts < 5);
  if (rc || check(buf, COUNT, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c),
                  resihp_comm_size(c)))
    return 1;
  put_record(c, attempts, 0);
  resihp_comm_destroy(c);
  free(buf);
  return 0;
}

START_TEST(second_failure_during_agreement) {
  int st[MAXN];
  run_group(N, rank_main, NULL, st);
  ck_assert_msg(WIFSIGNALED(st[FIRST]), "rank %d status %#x", FIRST, st[FIRST]);
  ck_assert_msg(WIFSIGNALED(st[SECOND]), "rank %d status %#x", SECOND,
                st[SECOND]);
  const int survivors[] = {0, 2, LATE};
  for (int i = 0; i < 3; i++)
    ck_assert_msg(WIFEXITED(st[survivors[i]]) &&
                      WEXITSTATUS(st[survivors[i]]) == 0,
                  "survivor %d status %#x", survivors[i], st[survivors[i]]);
  struct record rec[MAXN];
  int k = read_records(rec, MAXN);
  ck_assert_int_eq(k, 3);
  for (int i = 0; i < k; i++) {
    ck_assert_msg(rec[i].epoch == 2, "rank %d ended in epoch %u",
                  rec[i].world_rank, rec[i].epoch);
    ck_assert_uint_eq(rec[i].members, (1u << 0) | (1u << 2) | (1u << LATE));
    ck_assert_int_eq(rec[i].attempts, 3);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("shrink_race");
  TCase *tc = tcase_create("race");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, second_failure_during_agreement);
  suite_add_tcase(s, tc);
  return run_suite(s);
}
