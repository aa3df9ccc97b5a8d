/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the example trainers' data kinds and simulated compute
 * (contrib/common/trainer-data.h): fixed data is the original stream; the
 * lengths of longtail data vary and have a long tail; packed microbatches
 * respect their token budget with a varying count of sequences; every
 * kind is a function of (seed, step, microbatch) alone. */
#include "../../contrib/common/trainer-common.h"
#include "../../contrib/common/trainer-data.h"
#include "suite_main.h"

#include <check.h>
#include <math.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

static trainer_data_t data(trainer_data_kind_t k) {
  return (trainer_data_t){
      .kind = k, .B = 8, .budget = 512, .V = 64, .C = 8, .seed = 1};
}

/* fixed: the sequences trainer_sequence draws, bit for bit */
START_TEST(fixed_is_the_original_stream) {
  trainer_data_t d = data(TRAINER_DATA_FIXED);
  trainer_mb_t m;
  ck_assert_int_eq(trainer_mb_init(&m, &d), 0);
  for (long s = 0; s < 5; s++)
    for (int mb = 0; mb < 6; mb++) {
      trainer_data_draw(&d, s, mb, &m);
      uint64_t r = trainer_mb_rng(d.seed, s, mb);
      int tok[TRAINER_MAX_LEN], cls;
      ck_assert_int_eq(m.nseq, d.B);
      for (int b = 0; b < d.B; b++) {
        int len = trainer_sequence(&r, d.V, d.C, &cls, tok);
        ck_assert_int_eq(m.len[b], len);
        ck_assert_int_eq(m.cls[b], cls);
        ck_assert(!memcmp(m.tok + m.off[b], tok, (size_t)len * sizeof(int)));
      }
    }
  trainer_mb_free(&m);
}
END_TEST

/* The draw is a function of (seed, step, mb); another of any differs;
 * the shape alone agrees with the draw. */
START_TEST(deterministic) {
  for (int k = 0; k < 3; k++) {
    trainer_data_t d = data((trainer_data_kind_t)k), e = d;
    trainer_mb_t a, b, c;
    ck_assert_int_eq(trainer_mb_init(&a, &d), 0);
    ck_assert_int_eq(trainer_mb_init(&b, &d), 0);
    ck_assert_int_eq(trainer_mb_init(&c, &d), 0);
    trainer_data_draw(&d, 7, 3, &a);
    trainer_data_draw(&d, 8, 3, &c); /* in between: no hidden state */
    trainer_data_draw(&d, 7, 3, &b);
    ck_assert_int_eq(a.nseq, b.nseq);
    ck_assert_int_eq(a.tokens, b.tokens);
    ck_assert(!memcmp(a.len, b.len, (size_t)a.nseq * sizeof(int)));
    ck_assert(!memcmp(a.tok, b.tok, (size_t)a.tokens * sizeof(int)));
    trainer_data_shape(&d, 7, 3, &c);
    ck_assert_int_eq(c.nseq, a.nseq);
    ck_assert_int_eq(c.tokens, a.tokens);
    ck_assert(c.sum_l2 == a.sum_l2);
    int differ = 0;
    for (long s = 0; s < 20; s++) {
      trainer_data_draw(&d, 7, 3, &a);
      e.seed = 2;
      trainer_data_draw(&e, 7, 3, &b);
      differ += a.tokens != b.tokens ||
                memcmp(a.tok, b.tok, (size_t)a.tokens * sizeof(int));
      trainer_data_draw(&d, s, 4, &b);
      differ += s != 7 && a.tokens == b.tokens &&
                !memcmp(a.tok, b.tok, (size_t)a.tokens * sizeof(int));
    }
    ck_assert_int_ge(differ, 1);
    trainer_mb_free(&a);
    trainer_mb_free(&b);
    trainer_mb_free(&c);
  }
}
END_TEST

/* longtail: mostly short, a few long, lengths within 8..1023; the sums
 * the trainers report are those of the lengths */
START_TEST(longtail_has_a_long_tail) {
  trainer_data_t d = data(TRAINER_DATA_LONGTAIL);
  trainer_mb_t m;
  ck_assert_int_eq(trainer_mb_init(&m, &d), 0);
  int n = 0, under16 = 0, over256 = 0, maxlen = 0;
  double worst = 0, best = 1e300;
  for (long s = 0; s < 100; s++)
    for (int mb = 0; mb < 10; mb++) {
      trainer_data_draw(&d, s, mb, &m);
      ck_assert_int_eq(m.nseq, d.B);
      long tok = 0;
      double l2 = 0;
      for (int b = 0; b < m.nseq; b++) {
        int L = m.len[b];
        ck_assert_int_ge(L, TRAINER_LONG_MIN);
        ck_assert_int_le(L, TRAINER_LONG_MAX);
        ck_assert_int_eq(m.off[b], tok);
        for (int t = 0; t < L; t++)
          ck_assert(m.tok[m.off[b] + t] >= 0 && m.tok[m.off[b] + t] < d.V);
        tok += L;
        l2 += (double)L * L;
        n++;
        under16 += L < 16;
        over256 += L >= 256;
        if (L > maxlen)
          maxlen = L;
      }
      ck_assert_int_eq(m.tokens, tok);
      ck_assert(m.sum_l2 == l2);
      if (l2 > worst)
        worst = l2;
      if (l2 < best)
        best = l2;
    }
  /* 8000 draws: expected 50 % under 16, 3.1 % from 256 */
  ck_assert_int_gt(under16, n * 40 / 100);
  ck_assert_int_lt(under16, n * 60 / 100);
  ck_assert_int_gt(over256, n * 2 / 100);
  ck_assert_int_lt(over256, n * 5 / 100);
  ck_assert_int_ge(maxlen, 512);
  /* the attention term varies by orders of magnitude between microbatches */
  ck_assert(worst > 50 * best);
  trainer_mb_free(&m);
}
END_TEST

/* packed: within the budget, the count of sequences varies, the first
 * sequence cut to the budget when longer; the step's count is the sum */
START_TEST(packed_respects_the_budget) {
  trainer_data_t d = data(TRAINER_DATA_PACKED);
  d.budget = 300;
  trainer_mb_t m, scratch;
  ck_assert_int_eq(trainer_mb_init(&m, &d), 0);
  ck_assert_int_eq(trainer_mb_init(&scratch, &d), 0);
  ck_assert_int_eq(trainer_data_max_seqs(&d), 300 / TRAINER_LONG_MIN);
  int lo = 1 << 30, hi = 0, full = 0;
  for (long s = 0; s < 50; s++) {
    double seqs = 0;
    for (int mb = 0; mb < 10; mb++) {
      trainer_data_draw(&d, s, mb, &m);
      ck_assert_int_ge(m.nseq, 1);
      ck_assert_int_le(m.nseq, trainer_data_max_seqs(&d));
      ck_assert_int_le(m.tokens, d.budget);
      long tok = 0;
      for (int b = 0; b < m.nseq; b++)
        tok += m.len[b];
      ck_assert_int_eq(tok, m.tokens);
      full += m.tokens == d.budget;
      if (m.nseq < lo)
        lo = m.nseq;
      if (m.nseq > hi)
        hi = m.nseq;
      seqs += m.nseq;
    }
    ck_assert(trainer_data_step_seqs(&d, s, 10, &scratch) == seqs);
  }
  ck_assert_int_lt(lo, hi);  /* the count varies */
  ck_assert_int_ge(full, 1); /* a first sequence over the budget is cut */
  trainer_data_t f = data(TRAINER_DATA_FIXED);
  ck_assert(trainer_data_step_seqs(&f, 3, 10, &scratch) == 80);
  trainer_mb_free(&m);
  trainer_mb_free(&scratch);
}
END_TEST

/* The simulated compute: work grows with tokens, squared lengths and
 * sequences; a mean microbatch is scaled to the time asked for. */
START_TEST(cost_model) {
  ck_assert(trainer_work(200, 0, 1) > trainer_work(100, 0, 1));
  ck_assert(trainer_work(100, 1e6, 1) > trainer_work(100, 1e4, 1));
  ck_assert(trainer_work(100, 0, 8) > trainer_work(100, 0, 1));
  ck_assert(trainer_work(0, 0, 0) > 0);
  for (int k = 0; k < 3; k++) {
    trainer_data_t d = data((trainer_data_kind_t)k);
    trainer_cost_t c;
    double tps, seqs;
    ck_assert_int_eq(trainer_cost_init(&c, &d, 5.0), 0);
    ck_assert(c.ms_per_work > 0);
    ck_assert_int_eq(trainer_data_mean(&d, &tps, &seqs), 0);
    ck_assert(tps >= 4 && tps <= TRAINER_LONG_MAX);
    ck_assert(seqs >= 1 && seqs <= trainer_data_max_seqs(&d));
    /* whatever the seed */
    trainer_cost_t c2;
    d.seed = 99;
    ck_assert_int_eq(trainer_cost_init(&c2, &d, 5.0), 0);
    ck_assert(c.ms_per_work == c2.ms_per_work);
    ck_assert_int_eq(trainer_cost_init(&c2, &d, 0), 0);
    ck_assert(c2.ms_per_work == 0);
  }
  ck_assert_int_eq(trainer_data_kind("packed"), TRAINER_DATA_PACKED);
  ck_assert_int_eq(trainer_data_kind("Packed"), -1);
  ck_assert_int_eq(trainer_data_kind(NULL), -1);
  ck_assert_str_eq(trainer_data_name(TRAINER_DATA_LONGTAIL), "longtail");
}
END_TEST

static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The real compute (--mb-work): a fixed count of operations for a
 * microbatch's work, scaled like the simulated one, and done on the CPU -
 * so that a CPU quota slows it, where the sleep of --mb-ms uses about no
 * CPU at all (and a quota does not slow it). Counts of operations and CPU
 * time, not wall time: a busy machine does not change them. */
START_TEST(arith_compute_takes_cpu) {
  trainer_data_t d = data(TRAINER_DATA_LONGTAIL);
  trainer_cost_t c = {0}, s = {0};
  ck_assert_int_eq(trainer_cost_init_arith(&c, &d, 20000), 0);
  ck_assert(c.ops_per_work > 0);
  ck_assert_int_eq(trainer_cost_init(&s, &d, 20), 0);
  trainer_mb_t mb;
  ck_assert_int_eq(trainer_mb_init(&mb, &d), 0);
  trainer_data_shape(&d, 3, 1, &mb);
  double w = trainer_work((double)mb.tokens, mb.sum_l2, mb.nseq);
  double t0 = cpu_ms();
  double kops = trainer_compute_arith(&c, &mb);
  double arith = cpu_ms() - t0;
  ck_assert(fabs(kops - c.ops_per_work * w / 1e3) < 1e-6 * kops + 1e-3);
  t0 = cpu_ms();
  trainer_compute_sleep(&s, &mb);
  double sleep = cpu_ms() - t0;
  /* 20 M dependent multiply-adds for a mean microbatch: milliseconds of
   * CPU on any core; the sleep's slices cost microseconds each */
  ck_assert_msg(arith > 1.0 && arith > 4 * sleep,
                "arith %.3f ms of CPU, sleep %.3f ms", arith, sleep);
  trainer_mb_free(&mb);
  ck_assert_int_eq(trainer_cost_init_arith(&c, &d, 0), 0);
  ck_assert(c.ops_per_work == 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("trainer_data");
  TCase *tc = tcase_create("data");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, fixed_is_the_original_stream);
  tcase_add_test(tc, deterministic);
  tcase_add_test(tc, longtail_has_a_long_tail);
  tcase_add_test(tc, packed_respects_the_budget);
  tcase_add_test(tc, cost_model);
  tcase_add_test(tc, arith_compute_takes_cpu);
  suite_add_tcase(s, tc);
  return run_suite(s);
}
