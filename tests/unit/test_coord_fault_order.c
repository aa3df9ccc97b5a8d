/* SPDX-License-Identifier: BSD-3-Clause */
/* An injected fault whose FAULT line has reached the coordinator but not
 * been handled yet when the replica's failure comes from somebody else (a
 * peer, a joiner whose catch-up source died) on another connection, as in
 * one poll round under load: the failure is still the injected one, not an
 * outside fault (resihp__coord_fail_replica reads the replica's pending
 * FAULT first). A FAULT the launcher did not inject still counts for
 * nothing, and without a FAULT the failure is an outside one. Driven
 * through the real message handler over socket pairs (coord_pairs.h). */
#include "config.h"

#include "../../libresihp/transport/mesh.h"
#include "coord_pairs.h"
#include "suite_main.h"

#include <check.h>
#include <string.h>

#define R 3

/* The launcher's word: it injected kill-rank into replica 1 only. */
static int on_fault(void *ud, int r, const char *kind, const char *node,
                    long step) {
  (void)ud, (void)node, (void)step;
  return r == 1 && !strcmp(kind, "kill-rank") ? 0 : -1;
}

/* Replica r's FAULT line sits in its socket, unread by the coordinator;
 * then another party's report fails r. The failure record. */
static const fail_t *fail_after(int r, const char *fault) {
  coord_pairs_setup(R, on_fault, NULL);
  coord_pairs_join_all();
  if (fault)
    ck_assert_int_eq(
        resihp__wire_send(&coord_peer[r], fault, resihp__now_ms() + 5000), 0);
  resihp__coord_fail_replica(coord_c, r, "reported by a peer");
  ck_assert_int_eq(coord_c->nfails, 1);
  ck_assert_int_eq(resihp__coord_connected(coord_c, r), 0);
  return &coord_c->fails[0];
}

START_TEST(pending_fault_counts) {
  const fail_t *f = fail_after(1, "FAULT kind=kill-rank step=-1 node=h1");
  ck_assert_str_eq(f->kind, "kill-rank");
  ck_assert_int_eq(f->outside, 0);
  ck_assert_int_eq(f->catchup, 1); /* step -1: during a catch-up */
  coord_pairs_teardown();
}
END_TEST

START_TEST(uninjected_fault_ignored) {
  const fail_t *f = fail_after(2, "FAULT kind=kill-rank step=3 node=h2");
  ck_assert_str_eq(f->kind, "detected");
  ck_assert_int_eq(f->outside, 1);
  coord_pairs_teardown();
}
END_TEST

START_TEST(no_fault_is_outside) {
  const fail_t *f = fail_after(1, NULL);
  ck_assert_str_eq(f->kind, "detected");
  ck_assert_int_eq(f->outside, 1);
  coord_pairs_teardown();
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("coord_fault_order");
  TCase *tc = tcase_create("order");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, pending_fault_counts);
  tcase_add_test(tc, uninjected_fault_ignored);
  tcase_add_test(tc, no_fault_is_outside);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return run_suite(suite());
}
