/* SPDX-License-Identifier: BSD-3-Clause */
/* A replica that lost ranks with no spare left goes on with the
 * survivors (control/coord_shrink.c, issue 32 item 3): the parts decided
 * without talking.
 *
 *   plan_even  3,3 losing rank 1 holds 6 on one rank; 4,4,4 losing rank
 *       2 holds 6,6; 3,3,3,3 losing ranks 0 and 3 holds 6,6;
 *   plan_by_speed  the survivors' measured factors shape the partition
 *       (a survivor at half speed gets fewer layers), the dead rank's
 *       factor is not looked at;
 *   plan_refused  no survivor, nobody dead, a dead rank past K, fewer
 *       layers than survivors: RESIHP_EINVAL;
 *   renumbered  the survivors keep their order, numbered densely (as
 *       resihp_comm_shrink numbers them); a dead rank has none;
 *   slowdown  a 3,3 replica shrunk to 6 on one rank runs about twice
 *       the step (many microbatches), 4,4,4 to 6,6 about 1.5x, never
 *       below 1;
 *   shrunk_list  GO's shrunk= list: whose ranks, bounded, each item
 *       once, malformed lists refused;
 *   moved_after_shrink  a replica of 3 ranks shrunk to 2 (6,6 of 12
 *       layers) whose slow rank's layers then moved (8,4) is timed with
 *       both: the move's predicted step times the shrink's. */
#include "config.h"

#include "../../libresihp/control/coord_internal.h"
#include "../../libresihp/recovery/layer_groups.h"
#include "suite_main.h"

#include <resihp/error.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(plan_even) {
  int out[4];
  ck_assert_int_eq(resihp__shrink_plan(6, 2, 1ULL << 1, NULL, 8, out), 1);
  ck_assert_int_eq(out[0], 6);
  ck_assert_int_eq(resihp__shrink_plan(6, 2, 1ULL << 0, NULL, 8, out), 1);
  ck_assert_int_eq(out[0], 6);
  ck_assert_int_eq(resihp__shrink_plan(12, 3, 1ULL << 2, NULL, 8, out), 2);
  ck_assert_int_eq(out[0], 6);
  ck_assert_int_eq(out[1], 6);
  ck_assert_int_eq(resihp__shrink_plan(12, 4, 1ULL | 1ULL << 3, NULL, 8, out),
                   2);
  ck_assert_int_eq(out[0], 6);
  ck_assert_int_eq(out[1], 6);
}
END_TEST

START_TEST(plan_by_speed) {
  int out[3];
  /* rank 2 dead (its factor ignored), rank 1 at half speed */
  double f[3] = {1, 2, 50};
  ck_assert_int_eq(resihp__shrink_plan(12, 3, 1ULL << 2, f, 16, out), 2);
  ck_assert_int_gt(out[0], out[1]);
  ck_assert_int_eq(out[0] + out[1], 12);
  /* the same with rank 0 dead: the survivors are old ranks 1 and 2 */
  double g[3] = {50, 1, 2};
  ck_assert_int_eq(resihp__shrink_plan(12, 3, 1ULL, g, 16, out), 2);
  ck_assert_int_gt(out[0], out[1]);
}
END_TEST

START_TEST(plan_refused) {
  int out[64];
  ck_assert_int_eq(resihp__shrink_plan(6, 2, 3, NULL, 8, out), RESIHP_EINVAL);
  ck_assert_int_eq(resihp__shrink_plan(6, 2, 0, NULL, 8, out), RESIHP_EINVAL);
  ck_assert_int_eq(resihp__shrink_plan(6, 2, 1ULL << 2, NULL, 8, out),
                   RESIHP_EINVAL);
  ck_assert_int_eq(resihp__shrink_plan(2, 4, 1, NULL, 8, out), RESIHP_EINVAL);
  ck_assert_int_eq(resihp__shrink_plan(6, 0, 1, NULL, 8, out), RESIHP_EINVAL);
  ck_assert_int_eq(resihp__shrink_plan(6, 65, 1, NULL, 8, out), RESIHP_EINVAL);
  /* 64 ranks, the last one dead: 63 survivors */
  ck_assert_int_eq(resihp__shrink_plan(200, 64, 1ULL << 63, NULL, 8, out), 63);
  int sum = 0;
  for (int k = 0; k < 63; k++)
    sum += out[k];
  ck_assert_int_eq(sum, 200);
}
END_TEST

START_TEST(renumbered) {
  unsigned long long dead = 1ULL << 1 | 1ULL << 3;
  ck_assert_int_eq(resihp__shrink_rank(0, dead), 0);
  ck_assert_int_eq(resihp__shrink_rank(1, dead), -1);
  ck_assert_int_eq(resihp__shrink_rank(2, dead), 1);
  ck_assert_int_eq(resihp__shrink_rank(3, dead), -1);
  ck_assert_int_eq(resihp__shrink_rank(4, dead), 2);
  ck_assert_int_eq(resihp__shrink_rank(63, 1ULL), 62);
  ck_assert_int_eq(resihp__shrink_rank(64, 0), -1);
  ck_assert_int_eq(resihp__shrink_rank(-1, 0), -1);
}
END_TEST

START_TEST(slowdown) {
  int home2[2] = {3, 3}, one[1] = {6};
  double ok[2] = {1, 1};
  double s = resihp__shrink_slowdown(6, 2, home2, 1, ok, one, 1000);
  ck_assert(fabs(s - 2.0) < 0.01);
  int home3[3] = {4, 4, 4}, two[2] = {6, 6};
  s = resihp__shrink_slowdown(12, 3, home3, 2, ok, two, 1000);
  ck_assert(fabs(s - 1.5) < 0.01);
  /* a survivor at half speed: slower still */
  double half[2] = {1, 2};
  ck_assert(resihp__shrink_slowdown(12, 3, home3, 2, half, two, 1000) > s);
  ck_assert(resihp__shrink_slowdown(6, 2, home2, 2, ok, home2, 8) == 1.0);
}
END_TEST

START_TEST(shrunk_list) {
  unsigned long long d = 99;
  ck_assert_int_eq(resihp__shrunk_get("3:1", 3, &d), 1);
  ck_assert(d == 1ULL << 1);
  ck_assert_int_eq(resihp__shrunk_get("3:1", 4, &d), 0);
  ck_assert(d == 0);
  ck_assert_int_eq(resihp__shrunk_get("3:1,4:0,3:63", 3, &d), 1);
  ck_assert(d == (1ULL << 1 | 1ULL << 63));
  ck_assert_int_eq(resihp__shrunk_get("", 3, &d), 0);
  ck_assert_int_eq(resihp__shrunk_get("16777215:0", 16777215, &d), 1);
  const char *bad[] = {"3:64",   "3:1,3:1", "3",    "3:1:2", "3:-1",
                       "-3:1",   "3:1,",    ",3:1", "3;1",   "16777216:0",
                       "3:1 4:0", "x"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    d = 99;
    ck_assert_msg(resihp__shrunk_get(bad[i], 3, &d) == RESIHP_EPROTO,
                  "accepted %s", bad[i]);
    ck_assert(d == 0);
  }
  /* at most RESIHP__SHRUNK_ITEMS items */
  char many[2048];
  size_t n = 0;
  for (int i = 0; i <= RESIHP__SHRUNK_ITEMS; i++)
    n += (size_t)snprintf(many + n, sizeof(many) - n, "%s%d:0", i ? "," : "",
                          i);
  ck_assert_int_eq(resihp__shrunk_get(many, 3, &d), RESIHP_EPROTO);
}
END_TEST

START_TEST(moved_after_shrink) {
  resihp__coord_t *c = calloc(1, sizeof(*c));
  ck_assert_ptr_nonnull(c);
  rep_t rep[1];
  memset(rep, 0, sizeof(rep));
  double slow[3] = {1, 2, 1};
  c->K = 3;
  c->R = 1;
  c->reps = rep;
  c->rank_slow = slow;
  rep[0].k = 2;
  ck_assert_int_eq(resihp__coord_set_layers(c, 0, "12:8"), 0);
  snprintf(rep[0].home, sizeof(rep[0].home), "6");
  rep[0].moved = 1;
  rep[0].shrunk_at = 5;
  rep[0].shrink_slow = 1.5;
  rep[0].quota = 8;
  int cur[2] = {8, 4}, home[2] = {6, 6};
  double moved = resihp__repart_slowdown(12, 2, slow, cur, home, 8);
  ck_assert(moved > 1);
  ck_assert(fabs(resihp__coord_repart_factor(c, 0, 2) - 1.5 * moved) < 1e-9);
  /* not moved: the detector's factor times the shrink's */
  rep[0].moved = 0;
  ck_assert(fabs(resihp__coord_repart_factor(c, 0, 1.2) - 1.8) < 1e-9);
  resihp__coord_layers_free(c);
  free(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("shrink");
  TCase *t = tcase_create("plan");
  tcase_add_test(t, plan_even);
  tcase_add_test(t, plan_by_speed);
  tcase_add_test(t, plan_refused);
  tcase_add_test(t, renumbered);
  tcase_add_test(t, slowdown);
  tcase_add_test(t, shrunk_list);
  tcase_add_test(t, moved_after_shrink);
  suite_add_tcase(s, t);
  return run_suite(s);
}
