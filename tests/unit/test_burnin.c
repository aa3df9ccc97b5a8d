/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of a spare's burn-in (issue 35): the verdict against the
 * replicas' reference (slow compute, slow all-reduce per byte, jitter
 * below the floor, a failed burn-in, no reference yet), the reference
 * (median, failed ones skipped, sizes scaled), the wire form, a real run
 * (correct sums, bounded by its deadline). The coordinator's suspect
 * spares are tested with its spare registry (test_recovery.c). */
#include "config.h"

#include "../../libresihp/probe/burnin.h"
#include "../../libresihp/transport/mesh.h"
#include "suite_main.h"

#include <resihp.h>

#include <check.h>
#include <stdio.h>
#include <string.h>

static resihp__burnin_t bi(long bytes, long c_us, long a_us) {
  resihp__burnin_t b = {
      .bytes = bytes, .compute_us = c_us, .allreduce_us = a_us};
  return b;
}

START_TEST(judge_verdicts) {
  resihp__burnin_t ref = bi(4 << 20, 50000, 30000);
  char why[200];
  /* as fast, or a little slower: pass */
  resihp__burnin_t s = bi(4 << 20, 60000, 36000);
  ck_assert_int_eq(resihp__burnin_judge(&s, &ref, 3.0, why, sizeof(why)),
                   RESIHP__BURNIN_PASS);
  ck_assert_msg(strstr(why, "burn-in passed"), "%s", why);
  /* compute 10x slower (a throttled node): slow, and says by how much */
  s = bi(4 << 20, 500000, 36000);
  ck_assert_int_eq(resihp__burnin_judge(&s, &ref, 3.0, why, sizeof(why)),
                   RESIHP__BURNIN_SLOW);
  ck_assert_msg(strstr(why, "compute 10.0x slower than the replicas"), "%s",
                why);
  /* the all-reduce is compared per byte: twice the bytes in twice the
   * time is as fast; in 8x the time, 4x slower */
  s = bi(8 << 20, 50000, 60000);
  ck_assert_int_eq(resihp__burnin_judge(&s, &ref, 3.0, NULL, 0),
                   RESIHP__BURNIN_PASS);
  s = bi(8 << 20, 50000, 240000);
  ck_assert_int_eq(resihp__burnin_judge(&s, &ref, 3.0, why, sizeof(why)),
                   RESIHP__BURNIN_SLOW);
  ck_assert_msg(strstr(why, "all-reduce of 4.0 MiB 4.0x slower"), "%s", why);
  /* below the floor a time is jitter: 1 ms vs 15 ms of all-reduce (15x)
   * is no slowness; 1 ms vs 61 ms is (61 ms against the 20 ms floor) */
  resihp__burnin_t tiny = bi(4096, 50000, 1000);
  s = bi(4096, 50000, 15000);
  ck_assert_int_eq(resihp__burnin_judge(&s, &tiny, 3.0, NULL, 0),
                   RESIHP__BURNIN_PASS);
  s.allreduce_us = 61000;
  ck_assert_int_eq(resihp__burnin_judge(&s, &tiny, 3.0, NULL, 0),
                   RESIHP__BURNIN_SLOW);
  s.allreduce_us = 15000;
  s.compute_us = 1000; /* faster than the reference: fine */
  ck_assert_int_eq(resihp__burnin_judge(&s, &tiny, 3.0, NULL, 0),
                   RESIHP__BURNIN_PASS);
  /* exactly at the bound passes, past it does not */
  s = bi(4 << 20, 150000, 30000);
  ck_assert_int_eq(resihp__burnin_judge(&s, &ref, 3.0, NULL, 0),
                   RESIHP__BURNIN_PASS);
  s.compute_us = 150001;
  ck_assert_int_eq(resihp__burnin_judge(&s, &ref, 3.0, NULL, 0),
                   RESIHP__BURNIN_SLOW);
  /* a failed burn-in fails, reference or not */
  s = bi(4 << 20, 1000, 1000);
  s.failed = 1;
  snprintf(s.why, sizeof(s.why), "wrong sum");
  ck_assert_int_eq(resihp__burnin_judge(&s, NULL, 3.0, why, sizeof(why)),
                   RESIHP__BURNIN_FAILED);
  ck_assert_msg(strstr(why, "burn-in failed: wrong sum"), "%s", why);
  /* no reference yet: not judged */
  s = bi(4 << 20, 5000000, 1000);
  ck_assert_int_eq(resihp__burnin_judge(&s, NULL, 3.0, why, sizeof(why)),
                   RESIHP__BURNIN_UNJUDGED);
}
END_TEST

START_TEST(reference_median) {
  resihp__burnin_t v[5] = {bi(4 << 20, 40000, 10000),
                           bi(8 << 20, 900000, 40000), /* a slow replica */
                           bi(4 << 20, 50000, 12000), bi(4 << 20, 1, 1),
                           bi(4 << 20, 45000, 11000)};
  v[3].failed = 1; /* skipped */
  resihp__burnin_t ref;
  ck_assert_int_eq(resihp__burnin_reference(v, 5, &ref), 4);
  ck_assert_int_eq(ref.bytes, 4 << 20);
  /* medians of 40/900/50/45 ms and 10/20(scaled)/12/11 ms: the lower
   * middle (of two replicas, the faster) */
  ck_assert_int_eq(ref.compute_us, 45000);
  ck_assert_int_eq(ref.allreduce_us, 11000);
  /* two replicas: the faster */
  ck_assert_int_eq(resihp__burnin_reference(v + 1, 2, &ref), 2);
  ck_assert_int_eq(ref.compute_us, 50000);
  ck_assert_int_eq(resihp__burnin_reference(v, 0, &ref), 0);
  ck_assert_int_eq(resihp__burnin_reference(&v[3], 1, &ref), 0);
}
END_TEST

START_TEST(wire_form) {
  resihp__burnin_t b = bi(4194304, 51234, 9876), c;
  char s[64];
  resihp__burnin_format(&b, s, sizeof(s));
  ck_assert_str_eq(s, "4194304:51234:9876");
  ck_assert_int_eq(resihp__burnin_parse(s, &c), 0);
  ck_assert_int_eq(c.bytes, b.bytes);
  ck_assert_int_eq(c.compute_us, b.compute_us);
  ck_assert_int_eq(c.allreduce_us, b.allreduce_us);
  ck_assert_int_eq(c.failed, 0);
  b.failed = 1;
  resihp__burnin_format(&b, s, sizeof(s));
  ck_assert_str_eq(s, "fail");
  ck_assert_int_eq(resihp__burnin_parse("fail", &c), 0);
  ck_assert_int_eq(c.failed, 1);
  const char *bad[] = {
      "",       "1:2",         "1:2:3:4",         "0:1:1", "-1:1:1",
      "1:-2:3", "1:2:3,1:2:3", "99999999999:1:1", "a:b:c", "1:2:99999999999"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(resihp__burnin_parse(bad[i], &c) == RESIHP_EPROTO, "%s",
                  bad[i]);
}
END_TEST

START_TEST(real_run_and_deadline) {
  resihp__burnin_t b;
  ck_assert_int_eq(resihp__burnin_run(1 << 20, resihp__now_ms() + 60000, &b),
                   0);
  ck_assert_int_eq(b.failed, 0);
  ck_assert_int_eq(b.bytes, 1 << 20);
  ck_assert(b.compute_us > 0 && b.allreduce_us > 0);
  /* sizes are clamped */
  ck_assert_int_eq(resihp__burnin_run(1, resihp__now_ms() + 60000, &b), 0);
  ck_assert_int_eq(b.bytes, 4096);
  /* a deadline already past: gives up after the first product, failed */
  int64_t t0 = resihp__now_ms();
  ck_assert_int_eq(resihp__burnin_run(1 << 20, t0 - 1, &b), RESIHP_ETIMEDOUT);
  ck_assert_int_eq(b.failed, 1);
  ck_assert_msg(strstr(b.why, "deadline"), "%s", b.why);
}
END_TEST

/* The GPU part: its figures on the wire, judged only when both sides
 * have them, the reference's medians; and a real run, which on a machine
 * without a usable GPU skips it (gpus 0, no figure, passed) and with one
 * (configure found nvcc) times a GEMM on every device. */
START_TEST(gpu_part) {
  resihp__burnin_t b = bi(4194304, 51234, 9876), c;
  b.gpus = 8;
  b.gpu_gemm_us = 20000;
  b.gpu_allreduce_us = 3000;
  char s[64], why[200];
  resihp__burnin_format(&b, s, sizeof(s));
  ck_assert_str_eq(s, "4194304:51234:9876:8:20000:3000");
  ck_assert_int_eq(resihp__burnin_parse(s, &c), 0);
  ck_assert_int_eq(c.gpus, 8);
  ck_assert_int_eq(c.gpu_gemm_us, 20000);
  ck_assert_int_eq(c.gpu_allreduce_us, 3000);
  ck_assert_int_eq(c.compute_us, 51234);
  ck_assert_int_eq(resihp__burnin_parse("4194304:51234:9876", &c), 0);
  ck_assert_int_eq(c.gpus, 0);
  const char *bad[] = {"1:2:3:4:5", "1:2:3:8:1:1:1", "1:2:3:5000:1:1",
                       "1:2:3:1:-1:1"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(resihp__burnin_parse(bad[i], &c) == RESIHP_EPROTO, "%s",
                  bad[i]);
  /* the reference: medians of the replicas that have GPU figures */
  resihp__burnin_t v[3] = {b, b, bi(4194304, 50000, 9000)};
  v[1].gpu_gemm_us = 22000;
  v[1].gpu_allreduce_us = 3500;
  resihp__burnin_t ref;
  ck_assert_int_eq(resihp__burnin_reference(v, 3, &ref), 3);
  ck_assert_int_eq(ref.gpus, 1);
  ck_assert_int_eq(ref.gpu_gemm_us, 20000);
  ck_assert_int_eq(ref.gpu_allreduce_us, 3000);
  /* a GEMM 5x slower (a throttled GPU) with a healthy CPU: slow */
  resihp__burnin_t sp = b;
  sp.gpu_gemm_us = 100000;
  ck_assert_int_eq(resihp__burnin_judge(&sp, &ref, 3.0, why, sizeof(why)),
                   RESIHP__BURNIN_SLOW);
  ck_assert_msg(strstr(why, "GPU GEMM 5.0x slower"), "%s", why);
  /* the device all-reduce, per byte */
  sp = b;
  sp.gpu_allreduce_us = 12000;
  ck_assert_int_eq(resihp__burnin_judge(&sp, &ref, 3.0, why, sizeof(why)),
                   RESIHP__BURNIN_SLOW);
  ck_assert_msg(strstr(why, "device all-reduce 4.0x slower"), "%s", why);
  /* a spare without GPU figures is judged on the CPU alone */
  sp = bi(4194304, 51234, 9876);
  ck_assert_int_eq(resihp__burnin_judge(&sp, &ref, 3.0, why, sizeof(why)),
                   RESIHP__BURNIN_PASS);
  /* a real run: skipped cleanly without a GPU, timed with one */
  ck_assert_int_eq(resihp__burnin_run(1 << 20, resihp__now_ms() + 60000, &b),
                   0);
  ck_assert_int_eq(b.failed, 0);
  if (b.gpus == 0) {
    ck_assert_int_eq(b.gpu_gemm_us, 0);
    ck_assert_int_eq(b.gpu_allreduce_us, 0);
    resihp__burnin_format(&b, s, sizeof(s));
    ck_assert_msg(!strchr(strchr(strchr(s, ':') + 1, ':') + 1, ':'), "%s", s);
  } else {
    ck_assert(b.gpu_gemm_us > 0);
  }
  fprintf(stderr,
          "# burn-in here: %d GPU(s), GEMM %ld us, device all-reduce "
          "%ld us\n",
          b.gpus, b.gpu_gemm_us, b.gpu_allreduce_us);
}
END_TEST

int main(void) {
  Suite *s = suite_create("burnin");
  TCase *tc = tcase_create("burnin");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, judge_verdicts);
  tcase_add_test(tc, reference_median);
  tcase_add_test(tc, wire_form);
  tcase_add_test(tc, real_run_and_deadline);
  tcase_add_test(tc, gpu_part);
  suite_add_tcase(s, tc);
  return run_suite(s);
}
