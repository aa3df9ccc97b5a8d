/* SPDX-License-Identifier: BSD-3-Clause */
/* A unit test program's main: run suite s and say whether every test
 * passed (0) or not (1). SIGPIPE is ignored: the tests' peers die with
 * their sockets open, and a write then fails with EPIPE as it would in a
 * job (the library never relies on the signal). */
#ifndef RESIHP_TESTS_SUITE_MAIN_H
#define RESIHP_TESTS_SUITE_MAIN_H

#include <check.h>
#include <signal.h>

static inline int run_suite(Suite *s) {
  signal(SIGPIPE, SIG_IGN);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

#endif
