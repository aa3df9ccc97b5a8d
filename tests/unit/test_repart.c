/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator's repartition decision (control/coord_repart.c):
 *
 *   slow_stage_sheds_layers  a stage at half speed of a 3,3 replica gets
 *       a layer taken off (4,2), the predicted step shorter by a quarter,
 *       the gain over the steps left more than the move costs;
 *   move_must_pay  the same with too few steps left, or a move dearer
 *       than what it saves, moves nothing;
 *   small_gain_stays  a stage a few per cent slow (the planner's
 *       partition no better by REPART_MIN_GAIN) stays: no flapping;
 *   healthy_moves_back  every rank healthy again, a moved replica goes
 *       back to the partition its program declared, and one at home stays;
 *   slowdown_of_moved  the multiplier of a moved replica is its
 *       predicted step over the healthy one at home (4,2 with stage 1 at
 *       half speed: 4/3 with many microbatches), never below 1. */
#include "config.h"

#include "../../libresihp/control/coord_internal.h"
#include "suite_main.h"

#include <check.h>
#include <math.h>

START_TEST(slow_stage_sheds_layers) {
  double f[2] = {1, 2};
  int cur[2] = {3, 3}, out[2], rc;
  double ratio, gain;
  rc = resihp__repart_choose(6, 2, f, cur, cur, 8, 1.0, 100, 2.0, out, &ratio,
                             &gain);
  ck_assert_int_eq(rc, 1);
  ck_assert_int_eq(out[0], 4);
  ck_assert_int_eq(out[1], 2);
  ck_assert(ratio < 0.9);
  ck_assert(gain > 2.0);
  /* the first stage slow: the layer goes the other way */
  double g[2] = {2, 1};
  ck_assert_int_eq(resihp__repart_choose(6, 2, g, cur, cur, 8, 1.0, 100, 2.0,
                                         out, &ratio, &gain),
                   1);
  ck_assert_int_eq(out[0], 2);
  ck_assert_int_eq(out[1], 4);
  /* three stages, the middle one slow */
  double h[3] = {1, 2, 1};
  int c3[3] = {4, 4, 4}, o3[3];
  ck_assert_int_eq(resihp__repart_choose(12, 3, h, c3, c3, 16, 1.0, 100, 1.0,
                                         o3, &ratio, &gain),
                   1);
  ck_assert_int_lt(o3[1], 4);
  ck_assert_int_eq(o3[0] + o3[1] + o3[2], 12);
}
END_TEST

START_TEST(move_must_pay) {
  double f[2] = {1, 2};
  int cur[2] = {3, 3}, out[2];
  double ratio, gain;
  ck_assert_int_eq(resihp__repart_choose(6, 2, f, cur, cur, 8, 1.0, 2, 5.0, out,
                                         &ratio, &gain),
                   0);
  ck_assert(gain > 0 && gain < 5.0);
  ck_assert_int_eq(resihp__repart_choose(6, 2, f, cur, cur, 8, 1.0, 100, 1e6,
                                         out, &ratio, &gain),
                   0);
}
END_TEST

START_TEST(small_gain_stays) {
  double f[2] = {1, 1.05};
  int cur[2] = {3, 3}, out[2];
  double ratio, gain;
  ck_assert_int_eq(resihp__repart_choose(6, 2, f, cur, cur, 8, 1.0, 1000, 0.1,
                                         out, &ratio, &gain),
                   0);
  /* moved to 4,2 for a 2x stage that is now 1.3x: 4,2 still beats 3,3
   * by less than REPART_MIN_GAIN, or not at all: it stays */
  double g[2] = {1, 1.3};
  int moved[2] = {4, 2}, home[2] = {3, 3};
  ck_assert_int_eq(resihp__repart_choose(6, 2, g, moved, home, 8, 1.0, 1000,
                                         0.1, out, &ratio, &gain),
                   0);
}
END_TEST

START_TEST(healthy_moves_back) {
  double f[2] = {1, 1};
  int moved[2] = {4, 2}, home[2] = {3, 3}, out[2];
  double ratio, gain;
  ck_assert_int_eq(resihp__repart_choose(6, 2, f, moved, home, 8, 1.0, 100, 2.0,
                                         out, &ratio, &gain),
                   1);
  ck_assert_int_eq(out[0], 3);
  ck_assert_int_eq(out[1], 3);
  /* fill + 7 steps: (6 + 7 * 3) / (6 + 7 * 4) */
  ck_assert(fabs(ratio - 27.0 / 34.0) < 1e-9);
  ck_assert_int_eq(resihp__repart_choose(6, 2, f, home, home, 8, 1.0, 100, 2.0,
                                         out, &ratio, &gain),
                   0);
}
END_TEST

START_TEST(slowdown_of_moved) {
  double f[2] = {1, 2}, ok[2] = {1, 1};
  int moved[2] = {4, 2}, home[2] = {3, 3};
  double s = resihp__repart_slowdown(6, 2, f, moved, home, 1000);
  ck_assert(fabs(s - 4.0 / 3.0) < 0.01);
  ck_assert(resihp__repart_slowdown(6, 2, ok, home, home, 8) == 1.0);
  /* at home with stage 1 at half speed: twice the step */
  ck_assert(fabs(resihp__repart_slowdown(6, 2, f, home, home, 1000) - 2.0) <
            0.01);
}
END_TEST

int main(void) {
  Suite *s = suite_create("repart");
  TCase *t = tcase_create("choose");
  tcase_add_test(t, slow_stage_sheds_layers);
  tcase_add_test(t, move_must_pay);
  tcase_add_test(t, small_gain_stays);
  tcase_add_test(t, healthy_moves_back);
  tcase_add_test(t, slowdown_of_moved);
  suite_add_tcase(s, t);
  return run_suite(s);
}
