/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run's own part of the keeper's record (tools/run/record.c), as a
 * launcher that takes over reads it: a replica whose step failed with no
 * spare left, waiting for Slurm's verdict or knowing the rank its leader
 * lost, is still one that may shrink in place onto the same nodes after a
 * failover (shrink_rec.h); a malformed line of it is refused. */
#include "config.h"

#include "../../tools/run/run.h"
#include "suite_main.h"

#include <resihp/error.h>

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* what resihp-run's main.c and launch.c define */
struct run g;
volatile sig_atomic_t got_signal, nsignals;
pid_t helpers[256];

static void setup(void) {
  memset(&g, 0, sizeof(g));
  g.R = 2;
  g.K = 3;
  g.nnodes = 6;
  g.reps = calloc((size_t)g.R, sizeof(*g.reps));
  ck_assert_ptr_nonnull(g.reps);
  snprintf(g.coord_ep, sizeof(g.coord_ep), "h0:1");
}

static void teardown(void) { free(g.reps); }

/* The record of the launcher's state now, with an empty coordinator's
 * part: "LAUNCHER <bytes>\n" and the lines (malloc'ed, *len). */
static char *record(size_t *len) {
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  launcher_state(&b);
  ck_assert_int_eq(b.err, 0);
  char *rec = malloc(b.len + 64);
  ck_assert_ptr_nonnull(rec);
  *len = (size_t)snprintf(rec, b.len + 64, "LAUNCHER %zu\n%s", b.len, b.s);
  resihp__wire_buf_free(&b);
  return rec;
}

/* Replica 1's step on nodes 3, 4, 5 failed with no spare left: its
 * leader said it lost rank 1 (the node of which lives on), and it waits
 * (as it would for Slurm's verdict) until some time from now. The
 * launcher that takes over from the record has the same nodes, lost
 * ranks and wait (asking again at once); replica 0, which waits for
 * nothing, none. */
START_TEST(shrink_wait_survives_failover) {
  replica_t *p = &g.reps[1];
  p->sh.nwas = 3;
  p->sh.was[0] = 3;
  p->sh.was[1] = 4;
  p->sh.was[2] = 5;
  p->sh.lost = 2;
  p->sh.killed = 5;
  p->sh.wait = resihp__now_ms() + 600000;
  p->sh.poll = resihp__now_ms() + 1000;
  p->relaunch = 1;
  resihp__run_shrink_t was = p->sh;
  size_t len;
  char *rec = record(&len);
  memset(g.reps, 0, (size_t)g.R * sizeof(*g.reps));
  const char *coord;
  size_t clen;
  ck_assert_int_eq(restore_launcher(rec, len, &coord, &clen), 0);
  ck_assert_uint_eq(clen, 0);
  ck_assert_int_eq(p->relaunch, 1);
  ck_assert_msg(p->sh.nwas == 3 && p->sh.was[0] == 3 && p->sh.was[1] == 4 &&
                    p->sh.was[2] == 5,
                "%s", rec);
  ck_assert_uint_eq(p->sh.lost, 2);
  ck_assert_int_eq(p->sh.killed, 5);
  ck_assert_int_eq(p->sh.wait, was.wait); /* (the same host here) */
  ck_assert_int_eq(p->sh.poll, 0);
  ck_assert_int_eq(g.reps[0].sh.nwas, 0);
  ck_assert_int_eq(g.reps[0].sh.wait, 0);
  free(rec);
}
END_TEST

/* Its line malformed (a node out of the table, fewer nodes than it says,
 * a replica the job does not have, junk after it): the record is
 * refused, as any malformed line of it. */
START_TEST(shrink_line_refused) {
  static const char *const bad[] = {
      "S 1 0 2 0 3 3 4 6", "S 1 0 2 0 3 3 4", "S 2 0 0 0 0",
      "S 1 0 0 0 0 x",     "S 1 7 0 0 0",     "S 1 0 0 -5 0",
      "S -1 0 0 0 0",      "S 1 0 0 0 65",    "S1 0 0 0 0"};
  const char *coord;
  size_t clen;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char rec[256];
    int n = snprintf(rec, sizeof(rec), "LAUNCHER %zu\n%s\n", strlen(bad[i]) + 1,
                     bad[i]);
    ck_assert_msg(restore_launcher(rec, (size_t)n, &coord, &clen) ==
                      RESIHP_EPROTO,
                  "taken: %s", bad[i]);
  }
  char ok[] = "LAUNCHER 18\nS 1 0 2 0 3 3 4 5\n";
  ck_assert_int_eq(restore_launcher(ok, strlen(ok), &coord, &clen), 0);
  ck_assert_int_eq(g.reps[1].sh.nwas, 3);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("run_record");
  TCase *tc = tcase_create("record");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, shrink_wait_survives_failover);
  tcase_add_test(tc, shrink_line_refused);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return run_suite(suite()); }
