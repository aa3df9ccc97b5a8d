/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator's detector and its moves of layers, fed sample
 * sequences (PERF lines, as the ranks send them) through its own step
 * boundaries (resihp__coord_advance), in process: three replicas, each
 * rank's microbatch time the cost of the units it holds now times its
 * slowdown, with a few per cent of deterministic noise. Steps take no
 * time here (their start times are set): nothing depends on this
 * machine's speed.
 *
 *   shrunk_not_peers  3 replicas x 3 ranks, 11 units 4,3,4 whose first
 *       and last units cost three times a middle one (an embedding, a
 *       classifier): replica 1 loses its rank 2 (no spare) and goes on
 *       with 6,5. Its ranks hold none of the layers that the others'
 *       rank k holds: taken as their peers (before), the shrunk rank 0,
 *       scaled as for an even share, was the faster half that stage 0's
 *       baseline followed, and the healthy replicas' rank 0 were found
 *       slow and repartitioned 4,3,4 -> 3,4,4 (the regroup bench), its
 *       own rank 1 slow against 3-unit peers. Now nobody is found slow,
 *       nothing moves; and a shrunk rank slowed 2x later is still caught,
 *       against its own baseline;
 *   moved_stays_while_throttled  3 replicas x 2 ranks, 6 units 3,3:
 *       replica 1's rank 1 throttled from outside from step 40 to 190,
 *       twice as slow while it holds its 3 units but at its peers' pace
 *       once a move left it fewer (the lab's samples: the duty cycle
 *       landed in its waits for its neighbour). Its layers move off it;
 *       found healthy while moved, it went home at the first boundary
 *       allowed, slow again at once, and the partition flapped (a move
 *       every ~5 steps, before). Now it goes home only after 50 steps
 *       not found slow, and each try that finds it slow again doubles the
 *       wait: at most 3 moves while throttled; once the throttle ends it
 *       goes home and stays. */
#include "config.h"

#include "../../libresihp/control/coord_internal.h"
#include "../../libresihp/recovery/layer_groups.h"
#include "suite_main.h"

#include <resihp/planner.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define R 3
#define MBS 4 /* each replica's microbatches a step */
#define STEP_MS 1000
#define UNIT_US 2000.0

static const char key[] = "repart-samples-test-secret";

static void on_failed(void *ud, int r, const char *node, long j, long s,
                      const char *why) {
  (void)ud, (void)r, (void)node, (void)j, (void)s, (void)why;
}

/* Deterministic noise: exp of about +-3 %. */
static unsigned long long rng = 1;
static double noise(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  double u = (double)(rng >> 11) / 9007199254740992.0; /* [0, 1) */
  return exp(0.06 * (u - 0.5));
}

/* The job: R replicas of K ranks holding lay (coord_layers.c's text),
 * every replica a member that can move its layers and catch them up by
 * layer, at the boundary of step 1 of S. */
static resihp__coord_t *make(int K, const char *lay, long S) {
  resihp__coord_opts_t o = {.replicas = R,
                            .bind_host = "127.0.0.1",
                            .secret = (const uint8_t *)key,
                            .secret_len = sizeof(key) - 1,
                            .silence_ms = 60000,
                            .on_failed = on_failed,
                            .assign = RESIHP_ASSIGN_COUNT,
                            .swap_cost_s = -1};
  resihp__coord_t *c;
  ck_assert_int_eq(resihp__coord_create(&o, &c), 0);
  c->M = R * MBS;
  c->K = K;
  c->owner = calloc((size_t)c->M, sizeof(int));
  ck_assert_ptr_nonnull(c->owner);
  ck_assert_int_eq(resihp__coord_ensure_steps(c, S + 1), 0);
  ck_assert_int_eq(resihp__coord_perf_init(c), 0);
  c->S = S;
  c->step = 1;
  c->start_ms[0] = 1000000;
  for (int r = 0; r < R; r++) {
    rep_t *p = &c->reps[r];
    p->state = R_MEMBER;
    p->begun = c->step;
    p->quota = MBS;
    resihp__coord_add_member(c, r);
    ck_assert_int_eq(resihp__coord_set_layers(c, r, lay), 0);
    resihp__coord_repart_begin(c, r, "BEGIN step=1 lmove=1");
    p->lstate = 1;
    p->ep = strdup("h:1/h:2/h:3");
    p->sep = strdup("h:4/h:5/h:6");
  }
  c->phase = P_BARRIER;
  rng = 1;
  return c;
}

/* The cost of the units replica r's rank k holds now (unit: a middle
 * unit's). */
static double work(const resihp__coord_t *c, int r, int k,
                   const double *ucost) {
  resihp__partition_t p;
  ck_assert_int_eq(resihp__partition_parse(
                       c->lparts[c->reps[r].lpart - 1].text, c->nlayers, &p),
                   0);
  double w = 0;
  for (int l = p.bounds[k]; l < p.bounds[k + 1]; l++)
    w += ucost ? ucost[l] : 1;
  resihp__partition_free(&p);
  return w;
}

/* Slowdown of replica r's rank k at step s. */
typedef double (*slow_fn)(int r, int k, long s);

/* n steps: each boundary (the decision, a move), then every member rank's
 * samples of the step, then the step's commit. */
static void run(resihp__coord_t *c, int n, const double *ucost, slow_fn f) {
  for (int i = 0; i < n; i++) {
    c->phase = P_BARRIER;
    resihp__coord_advance(c);
    c->start_ms[c->step] = c->start_ms[c->step - 1] + STEP_MS;
    for (int m = 0; m < c->nmembers; m++) {
      int r = c->members[m];
      for (int k = 0; k < resihp__coord_rep_k(c, r); k++) {
        char msg[512];
        int len = snprintf(msg, sizeof(msg), "PERF k=%d step=%ld s=", k,
                           c->step);
        double t = work(c, r, k, ucost) * UNIT_US * f(r, k, c->step);
        for (int mb = 0; mb < MBS; mb++)
          len += snprintf(msg + len, sizeof(msg) - (size_t)len,
                          "%s%d:%lld:64:4096:1", mb ? "," : "", mb,
                          (long long)(t * noise()));
        resihp__coord_on_perf(c, 0, r, msg);
      }
    }
    for (int m = 0; m < c->nmembers; m++)
      c->reps[c->members[m]].begun = c->step + 1;
    c->phase = P_RUN;
    resihp__coord_advance(c);
  }
}

/* Whether any rank of replica r is found slow now. */
static int any_slow(const resihp__coord_t *c, int r) {
  for (int k = 0; k < c->K; k++)
    if (c->rank_slow[r * c->K + k] > 1)
      return 1;
  return 0;
}

static double healthy(int r, int k, long s) {
  (void)r, (void)k, (void)s;
  return 1;
}

/* shrunk_not_peers: replica 1's rank 1 (of 2 now) at half speed from
 * step 160 */
static double shrunk_slow_later(int r, int k, long s) {
  return r == 1 && k == 1 && s >= 160 ? 2 : 1;
}

START_TEST(shrunk_not_peers) {
  static const double ucost[11] = {3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3};
  resihp__coord_t *c = make(3, "11:4:7", 400);
  run(c, 59, ucost, healthy); /* warm: baselines set */
  for (int r = 0; r < R; r++)
    ck_assert(!any_slow(c, r));
  /* replica 1 loses its rank 2 and no spare is left: its new process of
   * 2 ranks (6,5) joins at the next boundary */
  resihp__coord_fail_replica(c, 1, "lost its rank 2");
  ck_assert_int_eq(resihp__coord_shrink_in_place(c, 1, 1ULL << 2), 0);
  ck_assert_int_eq(resihp__coord_rep_k(c, 1), 2);
  c->reps[1].state = R_JOINING;
  c->reps[1].waiting = 1;
  for (int i = 0; i < 100; i++) {
    run(c, 1, ucost, healthy);
    for (int r = 0; r < R; r++)
      ck_assert_msg(!any_slow(c, r), "step %ld: replica %d found slow",
                    c->step, r);
  }
  ck_assert_int_eq(c->repartitions, 0);
  ck_assert_int_eq(resihp__coord_rep_k(c, 1), 2);
  /* a shrunk rank that does slow down is still caught */
  run(c, 40, ucost, shrunk_slow_later);
  ck_assert_msg(c->rank_slow[1 * 3 + 1] > 1.5, "%g", c->rank_slow[1 * 3 + 1]);
  ck_assert(!any_slow(c, 0) && !any_slow(c, 2));
  resihp__coord_destroy(c);
}
END_TEST

/* moved_stays_while_throttled: replica 1's rank 1 at half speed while
 * throttled (steps 40..189) and holding its 3 units, at its peers' pace
 * with fewer */
static resihp__coord_t *cur_c;
static double throttled_by_load(int r, int k, long s) {
  return r == 1 && k == 1 && s >= 40 && s < 190 && work(cur_c, r, k, NULL) >= 3
             ? 2
             : 1;
}

START_TEST(moved_stays_while_throttled) {
  resihp__coord_t *c = cur_c = make(2, "6:3", 400);
  rep_t *p = &c->reps[1];
  long moves = 0, backs = 0, moved_at = -1, first_back = -1;
  int was = 0;
  while (c->step < 190) {
    run(c, 1, NULL, throttled_by_load);
    if (p->moved != was) {
      moves++;
      if (p->moved && moved_at < 0)
        moved_at = c->step;
      if (!p->moved && first_back < 0)
        first_back = c->step;
      backs += !p->moved;
      was = p->moved;
    }
  }
  ck_assert_msg(moved_at > 40 && moved_at < 60, "moved at %ld", moved_at);
  ck_assert_msg(first_back < 0 || first_back >= moved_at + 50,
                "moved at %ld, back at %ld", moved_at, first_back);
  ck_assert_msg(moves <= 3 && backs <= 1,
                "%ld moves (%ld back home) while throttled", moves, backs);
  /* the throttle ended: home, and it stays */
  run(c, 150, NULL, throttled_by_load);
  ck_assert_int_eq(p->moved, 0);
  long n = p->nmoves;
  run(c, 40, NULL, throttled_by_load);
  ck_assert_int_eq(p->nmoves, n);
  ck_assert_int_eq(c->reps[0].nmoves + c->reps[2].nmoves, 0);
  resihp__coord_destroy(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("repart_samples");
  TCase *t = tcase_create("samples");
  tcase_add_test(t, shrunk_not_peers);
  tcase_add_test(t, moved_stays_while_throttled);
  suite_add_tcase(s, t);
  return run_suite(s);
}
