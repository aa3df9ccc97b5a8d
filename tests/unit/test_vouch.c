/* SPDX-License-Identifier: BSD-3-Clause */
/* The standby's early takeover on the replicas' word (control/vouch.h):
 * how many vouchers it needs, the primary's lease, and that the two can
 * never hold at once (every membership size, every split of heard and
 * vouched members); a vouch's parser; the count against a record's
 * membership and credentials (a stranger, a wrong credential, a member
 * twice); the wait past the primary's lease from the later of the feed's
 * loss and the count; a replica's WELCOME says the coordinator's term. */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/vouch.h"
#include "../../libresihp/recovery/job_internal.h"
#include "suite_main.h"

#include <resihp/error.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define C0 "00112233445566778899aabbccddeeff"
#define C1 "ffeeddccbbaa99887766554433221100"
#define C2 "0123456789abcdef0123456789abcdef"

START_TEST(need_is_a_strict_majority_of_at_least_two) {
  ck_assert_int_eq(resihp__vouch_need(0), 2);
  ck_assert_int_eq(resihp__vouch_need(1), 2);
  ck_assert_int_eq(resihp__vouch_need(2), 2);
  ck_assert_int_eq(resihp__vouch_need(3), 2);
  ck_assert_int_eq(resihp__vouch_need(4), 3);
  ck_assert_int_eq(resihp__vouch_need(5), 3);
  ck_assert_int_eq(resihp__vouch_need(1000), 501);
  /* a replica dead or stopped: the primary goes on (R = 1, 2, 3) */
  ck_assert(resihp__vouch_lease(1, 0));
  ck_assert(resihp__vouch_lease(2, 1));
  ck_assert(resihp__vouch_lease(3, 2));
  /* cut off from too many: it must step down */
  ck_assert(!resihp__vouch_lease(2, 0));
  ck_assert(!resihp__vouch_lease(3, 1));
  ck_assert(!resihp__vouch_lease(5, 2));
  ck_assert(resihp__vouch_lease(5, 3));
}
END_TEST

/* No split brain: a member heard by the primary within the bound has not
 * vouched (it left the primary before it vouched, and the standby waits a
 * bound past the last vouch), so heard + vouched <= members; then the
 * primary's lease and the standby's count never both hold. */
START_TEST(lease_and_takeover_never_both) {
  for (int m = 0; m <= 200; m++)
    for (int h = 0; h <= m; h++)
      for (int v = 0; h + v <= m; v++)
        if (resihp__vouch_lease(m, h) && v >= resihp__vouch_need(m))
          ck_abort_msg("members %d heard %d vouched %d", m, h, v);
  /* and it is no vacuous rule: with everyone heard the lease holds, with
   * nobody heard a standby can count a majority */
  for (int m = 2; m <= 200; m++) {
    ck_assert(resihp__vouch_lease(m, m));
    ck_assert(!resihp__vouch_lease(m, 0));
  }
}
END_TEST

START_TEST(vouch_parsed_strictly) {
  int r = -1;
  char cred[RESIHP__VOUCH_CRED_HEX + 1];
  uint32_t term = 99;
  ck_assert_int_eq(
      resihp__vouch_parse("HELLO replica=2 ep=h:1 sep=h:2 mbs=6 steps=8 "
                          "jobid=7 stepid=3 again=1 epoch=4 step=9 cred=" C2
                          " term=5",
                          &r, cred, &term),
      0);
  ck_assert_int_eq(r, 2);
  ck_assert_str_eq(cred, C2);
  ck_assert_uint_eq(term, 5);
  /* an older replica says no term: 0 */
  ck_assert_int_eq(
      resihp__vouch_parse("HELLO replica=0 again=1 cred=" C0, &r, cred, &term),
      0);
  ck_assert_uint_eq(term, 0);
  const char *bad[] = {
      "HELLO replica=0 cred=" C0,                      /* not again */
      "HELLO replica=0 again=0 cred=" C0,              /* not again */
      "HELLO replica=0 again=1 cred=-",                /* never welcome */
      "HELLO replica=0 again=1 cred=" C0 "0",          /* too long */
      "HELLO replica=0 again=1 cred=00112233445566778899AABBCCDDEEFF",
      "HELLO replica=-1 again=1 cred=" C0,
      "HELLO again=1 cred=" C0,                        /* no replica */
      "HELLO replica=0 again=1 cred=" C0 " term=x",    /* bad term */
      "HELLO replica=0 again=1 cred=" C0 " term=-1",
      "HELLO replica=0 again=1 cred=" C0 " term=4294967295",
      "SUBHELLO replica=0 again=1 cred=" C0,
      "SPARE node=n1 status=pass summary=x",
      ""};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(resihp__vouch_parse(bad[i], &r, cred, &term) ==
                      RESIHP_EPROTO,
                  "'%s' taken", bad[i]);
}
END_TEST

/* A record's coordinator part as resihp__coord_snapshot writes the lines
 * the count reads (the others are the restore's). */
static const char SNAP[] =
    "RESIHP-COORD 1 4 12 1 3000 =- 0\n"
    "c 9 2 0 3 3 0 0 -1 -1 -1 -1 -1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    "a \n"
    "l \n"
    "m 0:1:2\n"
    "n 0:1:2\n"
    "i -\n"
    "r 0 1 7 1 9 0 0 0 0 0 0 3 4 0 0 -1 -1 0 0 0 0 1 -1 0 0 =n1 =h:1 =h:1 "
    "=h:2 = = =" C0 "\n"
    "r 1 1 7 2 9 0 0 0 0 0 0 3 4 0 0 -1 -1 0 0 0 0 1 -1 0 0 =n2 =h:1 =h:1 "
    "=h:2 = = =" C1 "\n"
    "r 2 1 7 3 9 0 0 0 0 0 0 3 4 0 0 -1 -1 0 0 0 0 1 -1 0 0 =n3 =h:1 =h:1 "
    "=h:2 = = =" C2 "\n"
    "r 3 4 7 4 9 0 0 0 0 0 0 3 4 0 0 -1 -1 0 0 0 0 1 -1 0 0 =n4 =h:1 =h:1 "
    "=h:2 = = =" C0 "\n"
    "t 6\n"
    "end\n";

START_TEST(count_against_the_record) {
  resihp__vouch_t *v = NULL;
  ck_assert_int_eq(resihp__vouch_create(SNAP, strlen(SNAP), 4, &v), 0);
  ck_assert_uint_eq(resihp__vouch_term(v), 6);
  ck_assert_int_eq(resihp__vouch_members(v), 3);
  /* replica 3 is no member (gone), whatever credential it says */
  ck_assert_int_eq(resihp__vouch_add(v, 3, C0, 100), RESIHP_EAUTH);
  ck_assert_int_eq(resihp__vouch_add(v, 4, C0, 100), RESIHP_EAUTH);
  /* another member's credential is no proof */
  ck_assert_int_eq(resihp__vouch_add(v, 1, C0, 100), RESIHP_EAUTH);
  ck_assert_int_eq(resihp__vouch_add(v, 0, C0, 100), 1);
  ck_assert_int_eq(resihp__vouch_add(v, 0, C0, 200), 0); /* again */
  ck_assert_int_eq(resihp__vouch_count(v), 1);
  ck_assert_int_eq(resihp__vouch_reached(v), 0);
  ck_assert(!resihp__vouch_ready(v, 50, 100000, 4000));
  ck_assert_int_eq(resihp__vouch_add(v, 2, C2, 1000), 1);
  ck_assert_int_eq(resihp__vouch_count(v), 2);
  ck_assert_int_eq(resihp__vouch_reached(v), 1000);
  ck_assert(resihp__vouch_has(v, 0) && resihp__vouch_has(v, 2));
  ck_assert(!resihp__vouch_has(v, 1) && !resihp__vouch_has(v, 3));
  /* the wait runs from the later of the count and the feed's loss, and
   * there is none while the feed is not lost */
  ck_assert(!resihp__vouch_ready(v, 0, 100000, 4000));
  ck_assert(!resihp__vouch_ready(v, 500, 4999, 4000));
  ck_assert(resihp__vouch_ready(v, 500, 5000, 4000));
  ck_assert(!resihp__vouch_ready(v, 3000, 6999, 4000));
  ck_assert(resihp__vouch_ready(v, 3000, 7000, 4000));
  /* the feed speaks again: everything forgotten */
  resihp__vouch_clear(v);
  ck_assert_int_eq(resihp__vouch_count(v), 0);
  ck_assert(!resihp__vouch_ready(v, 3000, 100000, 4000));
  ck_assert(!resihp__vouch_has(v, 0));
  resihp__vouch_destroy(v);
  /* no term line: the job's first primary (term 0) */
  char *s0 = strdup(SNAP);
  char *t = strstr(s0, "t 6\n");
  memmove(t, t + 4, strlen(t + 4) + 1);
  ck_assert_int_eq(resihp__vouch_create(s0, strlen(s0), 4, &v), 0);
  ck_assert_uint_eq(resihp__vouch_term(v), 0);
  resihp__vouch_destroy(v);
  free(s0);
}
END_TEST

START_TEST(record_refused) {
  resihp__vouch_t *v = NULL;
  /* another job size, a cut record, no membership, a bad credential */
  ck_assert_int_eq(resihp__vouch_create(SNAP, strlen(SNAP), 3, &v),
                   RESIHP_EPROTO);
  ck_assert_int_eq(resihp__vouch_create(SNAP, strlen(SNAP) - 4, 4, &v),
                   RESIHP_EPROTO);
  ck_assert_int_eq(resihp__vouch_create("RESIHP-COORD 1 4 1 1 1 =- 0\nend\n",
                                        32, 4, &v),
                   RESIHP_EPROTO);
  char *s = strdup(SNAP);
  s[strstr(s, "=" C2) - s + 1] = 'X';
  ck_assert_int_eq(resihp__vouch_create(s, strlen(s), 4, &v), RESIHP_EPROTO);
  free(s);
  ck_assert_int_eq(resihp__vouch_create(SNAP, strlen(SNAP), 0, &v),
                   RESIHP_EINVAL);
}
END_TEST

/* The replica's side: WELCOME says the term it obeys from then on. */
START_TEST(welcome_says_the_term) {
  resihp_job_t *j = calloc(1, sizeof(*j));
  ck_assert_ptr_nonnull(j);
  ck_assert_int_eq(resihp__job_welcome(j, "WELCOME replica=0 step=0 term=3"),
                   0);
  ck_assert_uint_eq(j->term, 3);
  ck_assert_int_eq(resihp__job_welcome(j, "WELCOME replica=0 step=0"), 0);
  ck_assert_uint_eq(j->term, 0);
  ck_assert_int_eq(resihp__job_welcome(j, "WELCOME replica=0 term=x"),
                   RESIHP_EPROTO);
  ck_assert_int_eq(resihp__job_welcome(j, "WELCOME replica=0 term=-2"),
                   RESIHP_EPROTO);
  free(j);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("vouch");
  TCase *tc = tcase_create("vouch");
  tcase_add_test(tc, need_is_a_strict_majority_of_at_least_two);
  tcase_add_test(tc, lease_and_takeover_never_both);
  tcase_add_test(tc, vouch_parsed_strictly);
  tcase_add_test(tc, count_against_the_record);
  tcase_add_test(tc, record_refused);
  tcase_add_test(tc, welcome_says_the_term);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return run_suite(suite());
}
