/* SPDX-License-Identifier: BSD-3-Clause */
/* The cost plan's multipliers on the wire (control/costplan.c): a plan
 * with one slow replica among 10,000 is a short line, not one figure per
 * replica (N STARTs of N figures each: 1.7 GB at 10,000); all ones and
 * all slow still go as before; every form comes back bit for bit, and a
 * sparse list that is not one is refused. */
#include "config.h"

#include "../../libresihp/control/costplan.h"
#include "suite_main.h"

#include <check.h>
#include <resihp/error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 10000
/* a model resihp_model_ok takes: theta 1,0,0,0; n0 1000; k0 1; t0 1000 */
#define CMOD                                                                   \
  " cmod=3ff0000000000000:0000000000000000:0000000000000000:"                 \
  "0000000000000000:408f400000000000:3ff0000000000000:408f400000000000"

static int ids[N];

/* A plan of N contributors 0..N-1, all multipliers 1. */
static void plan_of_n(resihp__costplan_t *p) {
  ck_assert_int_eq(resihp__costplan_init(p, N, 1), 0);
  ck_assert_int_eq(resihp__costplan_parse("START cby=0 cslow=1" CMOD, N, p,
                                          NULL, 0),
                   0);
  for (int i = 0; i < N; i++)
    ids[i] = p->contrib[i] = i, p->slow[i] = 1.0;
  p->nc = N;
}

/* put, then parse into a fresh plan: the same contributors and the same
 * multipliers, bit for bit. The line is left in *line (to be freed). */
static void round_trip(const resihp__costplan_t *p, char **line) {
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  resihp__wire_buf_printf(&b, "START");
  resihp__costplan_put(&b, p, ids, N);
  ck_assert_int_eq(b.err, 0);
  resihp__costplan_t q;
  ck_assert_int_eq(resihp__costplan_init(&q, N, 1), 0);
  ck_assert_int_eq(resihp__costplan_parse(b.s, N, &q, ids, N), 0);
  ck_assert_int_eq(q.nc, p->nc);
  ck_assert(!memcmp(q.contrib, p->contrib, sizeof(int) * (size_t)N));
  ck_assert(!memcmp(q.slow, p->slow, sizeof(double) * (size_t)N));
  resihp__costplan_free(&q);
  *line = b.s;
}

START_TEST(one_slow_of_many_is_short) {
  resihp__costplan_t p;
  plan_of_n(&p);
  p.slow[4321] = 1.5;
  p.slow[9999] = 2.0;
  char *line;
  round_trip(&p, &line);
  ck_assert_msg(strstr(line, " cby=list cslow=s4321.3ff8000000000000:"
                             "9999.4000000000000000 cmod="),
                "%.200s", line);
  /* what does not depend on N: START, cby, two entries, one model */
  ck_assert_uint_lt(strlen(line), 220);
  free(line);
  resihp__costplan_free(&p);
}
END_TEST

START_TEST(all_ones_and_all_slow) {
  resihp__costplan_t p;
  plan_of_n(&p);
  char *line;
  round_trip(&p, &line);
  ck_assert_ptr_nonnull(strstr(line, " cslow=1 cmod="));
  free(line);
  for (int i = 0; i < N; i++)
    p.slow[i] = 1.0 + i / 1024.0;
  round_trip(&p, &line); /* every one listed: as many figures as replicas */
  ck_assert_ptr_nonnull(strstr(line, " cslow=3ff0000000000000:"));
  ck_assert_uint_gt(strlen(line), (size_t)N * 17);
  free(line);
  resihp__costplan_free(&p);
}
END_TEST

START_TEST(bad_sparse_refused) {
  static const char *bad[] = {
      "s",                                           /* no entry */
      "s2.4000000000000000:1.4000000000000000",      /* descending */
      "s1.4000000000000000:1.4000000000000000",      /* twice */
      "s3.4000000000000000",                         /* past the 3 */
      "s1.4000000000000000:",                        /* cut */
      "s14000000000000000",                          /* no '.' */
      "s-1.4000000000000000",                        /* negative */
      "s+1.4000000000000000",                        /* a sign */
      "s1.0000000000000000",                         /* below 1 */
      "s1.7ff8000000000000",                         /* NaN */
      "s1.400000000000000",                          /* 15 digits */
      "s1.4000000000000000x",                        /* trailing */
      "s99999999999999999999999.4000000000000000",   /* overflow */
  };
  resihp__costplan_t p;
  ck_assert_int_eq(resihp__costplan_init(&p, 3, 1), 0);
  char line[512];
  snprintf(line, sizeof(line), "START cby=0:1:2 cslow=s1.4000000000000000" CMOD);
  ck_assert_int_eq(resihp__costplan_parse(line, 3, &p, NULL, 0), 0);
  ck_assert(p.slow[0] == 1.0 && p.slow[1] == 2.0 && p.slow[2] == 1.0);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    snprintf(line, sizeof(line), "START cby=0:1:2 cslow=%s" CMOD, bad[i]);
    ck_assert_msg(resihp__costplan_parse(line, 3, &p, NULL, 0) ==
                      RESIHP_EPROTO,
                  "taken: %s", bad[i]);
    ck_assert_int_eq(p.nc, 0);
  }
  resihp__costplan_free(&p);
}
END_TEST

/* How many models a plan carries, read before the plan: a replica shrunk
 * in place (2 ranks) reads the coordinator's 3 (one per shard of the
 * job), as every process must assign the same owners; before, it read as
 * many as its own ranks and refused every plan (seen in shrink.test: each
 * of its steps through the coordinator). */
START_TEST(models_counted) {
  static const char m1[] = CMOD;
  char line[1024];
  snprintf(line, sizeof(line), "START cby=0 cslow=1%s:%s:%s", m1,
           m1 + 6, m1 + 6); /* (three models: the figures again, twice) */
  ck_assert_int_eq(resihp__costplan_models(line), 3);
  resihp__costplan_t p;
  ck_assert_int_eq(resihp__costplan_init(&p, 1, 3), 0);
  ck_assert_int_eq(resihp__costplan_parse(line, 1, &p, NULL, 0), 0);
  resihp__costplan_free(&p);
  ck_assert_int_eq(resihp__costplan_models("START cby=0 cslow=1" CMOD), 1);
  ck_assert_int_eq(resihp__costplan_models("START cby=0 cslow=1"),
                   RESIHP_ENOENT);
  /* not a whole number of models */
  ck_assert_int_eq(
      resihp__costplan_models("START cmod=3ff0000000000000:0000000000000000"),
      RESIHP_EPROTO);
  ck_assert_int_eq(resihp__costplan_models("START cmod="), RESIHP_EPROTO);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("costplan");
  TCase *tc = tcase_create("slow");
  tcase_add_test(tc, one_slow_of_many_is_short);
  tcase_add_test(tc, all_ones_and_all_slow);
  tcase_add_test(tc, bad_sparse_refused);
  tcase_add_test(tc, models_counted);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return run_suite(suite());
}
