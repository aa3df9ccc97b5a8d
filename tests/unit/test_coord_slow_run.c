/* SPDX-License-Identifier: BSD-3-Clause */
/* A slow member in a free run (coord_schedule.c, coord_perf.c), driven
 * through the coordinator's message handler over socket pairs
 * (coord_pairs.h), with the detector's verdict set by hand (what
 * test_failslow reaches through real samples):
 * - a replica already slow when a step starts runs free with the others,
 *   with fewer microbatches;
 * - its factor wobbling by less than a quarter needs no boundary; moving
 *   more, or the slowdown ending, does (HOLD);
 * - slow long enough for a swap while the run goes on, with a spare free:
 *   HOLD once, and the swap at the boundary the members then make. */
#include "config.h"

#include "../../libresihp/transport/mesh.h"
#include "coord_pairs.h"
#include "suite_main.h"

#include <resihp/planner.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define R 3

static int spare_free(void *ud) {
  (void)ud;
  return 1;
}

/* Microbatches in a START line (mbs=a:b:c). */
static int mbs_in(const char *start) {
  const char *m = strstr(start, " mbs=");
  ck_assert_ptr_nonnull(m);
  int n = m[5] != ' ' && m[5] != '\0';
  for (m += 5; *m && *m != ' '; m++)
    n += *m == ':';
  return n;
}

/* Every member ends the run at step s (BEGIN); their STARTs into start[]
 * (a READY to a GO that asks for one). */
static void boundary(long s, char start[R][512]) {
  char line[512];
  for (int i = 0; i < R; i++) {
    snprintf(line, sizeof(line), "BEGIN step=%ld", s);
    resihp__coord_feed(coord_c, coord_k[i], line);
  }
  for (int i = 0; i < R; i++) {
    coord_pairs_expect(i, "GO ", line, sizeof(line));
    if (strstr(line, " new=1")) {
      snprintf(line, sizeof(line), "READY epoch=%ld",
               (long)resihp__coord_epoch(coord_c));
      resihp__coord_feed(coord_c, coord_k[i], line);
    }
  }
  for (int i = 0; i < R; i++)
    coord_pairs_expect(i, "START ", start[i], sizeof(start[i]));
}

/* Three replicas counted by speed, in a free run from step 0. */
static void setup(void) {
  coord_pairs_setup(R, NULL, NULL);
  coord_c->o.assign = RESIHP_ASSIGN_COUNT;
  coord_pairs_join_all();
  ck_assert_int_eq(coord_c->phase, P_FREE);
}

/* Whether a HOLD waits for replica i (polled; nothing else is expected
 * but heartbeats). */
static int held(int i) {
  char line[512];
  resihp__coord_poll(coord_c, 0);
  ck_assert_int_ge(resihp__wire_fill(&coord_peer[i]), 0);
  int t;
  while ((t = resihp__wire_take(&coord_peer[i], line, sizeof(line))) > 0)
    if (!strcmp(line, "HOLD"))
      return 1;
  ck_assert_int_ge(t, 0);
  return 0;
}

START_TEST(slow_member_runs_free) {
  setup();
  char st[R][512];
  coord_c->reps[2].slow = 2.0; /* the detector found it x2 */
  ck_assert(resihp__coord_hold_needed(coord_c));
  boundary(1, st);
  /* it runs free with the others, with fewer microbatches (6 by speed
   * 1:1:0.5 -> 2.4:2.4:1.2) */
  for (int i = 0; i < R; i++)
    ck_assert_msg(strstr(st[i], " run=1"), "%s", st[i]);
  ck_assert_int_lt(mbs_in(st[2]), mbs_in(st[0]));
  ck_assert_int_eq(mbs_in(st[0]) + mbs_in(st[1]) + mbs_in(st[2]), 6);
  ck_assert(!resihp__coord_hold_needed(coord_c));
  /* a factor that wobbles goes on; one that moves ends the run */
  coord_c->reps[2].slow = 2.4;
  ck_assert(!resihp__coord_hold_needed(coord_c));
  coord_c->reps[2].slow = 1.7;
  ck_assert(!resihp__coord_hold_needed(coord_c));
  coord_c->reps[2].slow = 2.6;
  ck_assert(resihp__coord_hold_needed(coord_c));
  coord_c->reps[2].slow = 1.5;
  ck_assert(resihp__coord_hold_needed(coord_c));
  coord_c->reps[2].slow = 1.0; /* healthy again: its share comes back */
  ck_assert(resihp__coord_hold_needed(coord_c));
  boundary(2, st);
  ck_assert_int_eq(mbs_in(st[2]), mbs_in(st[0]));
  ck_assert(strstr(st[2], " run=1"));
  ck_assert_int_eq(coord_c->starts, 3);
  coord_pairs_teardown();
}
END_TEST

START_TEST(slow_member_swapped_from_a_free_run) {
  setup();
  coord_c->o.spare_free = spare_free;
  coord_c->o.swap_cost_s = 0;
  char st[R][512], line[512];
  coord_c->reps[2].slow = 2.0;
  boundary(1, st);
  ck_assert(strstr(st[0], " run=1"));
  /* the run goes on, replica 2 slow in every step: once it has been slow
   * long enough, the run is held for a swap, once. The steps' times are
   * spread over the wall time between reports: let some pass, so that a
   * step is not 0 ms long (a swap's gain is judged from it) */
  int hold_at = -1;
  for (long s = 2; s <= 8 && hold_at < 0; s++) {
    usleep(3000);
    snprintf(line, sizeof(line), "PROG step=%ld", s);
    resihp__coord_feed(coord_c, coord_k[0], line);
    if (held(0))
      hold_at = (int)s;
  }
  ck_assert_msg(hold_at >= 3, "held at %d", hold_at); /* 3 steps slow */
  ck_assert(held(1) && held(2));
  usleep(3000);
  resihp__coord_feed(coord_c, coord_k[0], "PROG step=9");
  ck_assert(!held(0)); /* asked once */
  /* the members end the run: replica 2 is swapped at the boundary */
  for (int i = 0; i < R; i++)
    resihp__coord_feed(coord_c, coord_k[i], "BEGIN step=9");
  ck_assert_int_eq(coord_c->swaps, 1);
  ck_assert_int_eq(resihp__coord_is_member(coord_c, 2), 0);
  coord_pairs_teardown();
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("coord_slow_run");
  TCase *tc = tcase_create("free");
  tcase_add_test(tc, slow_member_runs_free);
  tcase_add_test(tc, slow_member_swapped_from_a_free_run);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return run_suite(suite());
}
