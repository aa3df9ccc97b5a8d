/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the layer-keyed groups (recovery/layer_groups.h): with a
 * random partition per replica, exchanging each run in its group sums
 * every layer's gradient exactly once per replica; identical partitions
 * give exactly today's K shard groups; catch-up pieces from any healthy
 * replica's partition cover every layer of the receiving rank exactly
 * once; and the partition text's parser. */
#include "config.h"

#include "../../libresihp/recovery/layer_groups.h"
#include "suite_main.h"

#include <resihp/error.h>

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deterministic generator (tests must not depend on libc's rand). */
static unsigned long long rng_state;
static unsigned rnd(unsigned n) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (unsigned)((rng_state >> 33) % n);
}

/* A random partition of L layers over 1..min(L, maxk) ranks. */
static void random_partition(int L, int maxk, resihp__partition_t *p) {
  int k = 1 + (int)rnd((unsigned)(L < maxk ? L : maxk));
  int *cnt = calloc((size_t)k, sizeof(int));
  ck_assert_ptr_nonnull(cnt);
  for (int i = 0; i < k; i++)
    cnt[i] = 1;
  for (int left = L - k; left > 0; left--)
    cnt[rnd((unsigned)k)]++;
  ck_assert_int_eq(resihp__partition_from_counts(cnt, k, L, p), 0);
  free(cnt);
}

START_TEST(random_partitions_sum_once) {
  rng_state = 1000 + (unsigned long long)_i;
  int L = 1 + (int)rnd(40), R = 1 + (int)rnd(12), D = 1 + (int)rnd(4);
  size_t *elems = malloc(sizeof(size_t) * (size_t)L);
  ck_assert_ptr_nonnull(elems);
  for (int l = 0; l < L; l++)
    elems[l] = (size_t)rnd(4); /* a layer may have no gradient */
  size_t *off = resihp__layers_offsets(elems, L);
  ck_assert_ptr_nonnull(off);
  size_t E = off[L];
  resihp__partition_t *parts = calloc((size_t)D, sizeof(*parts));
  int *of = malloc(sizeof(int) * (size_t)R);
  ck_assert(parts && of);
  for (int d = 0; d < D; d++)
    random_partition(L, 8, &parts[d]);
  for (int r = 0; r < R; r++)
    of[r] = (int)rnd((unsigned)D);
  /* as a rank learns them: each member's cut points as text, the
   * distinct partitions found from those (the random ones may repeat) */
  char (*text)[256] = calloc((size_t)R, sizeof(*text));
  const char **tp = calloc((size_t)R, sizeof(char *));
  int *of2 = calloc((size_t)R, sizeof(int)), nd = 0;
  resihp__partition_t *dp = NULL;
  ck_assert(text && tp && of2);
  for (int r = 0; r < R; r++) {
    ck_assert_int_eq(resihp__partition_format(&parts[of[r]], text[r], 256), 0);
    tp[r] = text[r];
  }
  ck_assert_int_eq(resihp__partitions_distinct(tp, R, L, &dp, &nd, of2), 0);
  ck_assert_int_ge(nd, 1);
  ck_assert_int_le(nd, D);
  for (int r = 0; r < R; r++) {
    ck_assert(resihp__partition_equal(&dp[of2[r]], &parts[of[r]]));
    for (int q = 0; q < R; q++)
      ck_assert_int_eq(of2[r] == of2[q],
                       resihp__partition_equal(&parts[of[r]], &parts[of[q]]));
  }
  resihp__runmap_t m;
  ck_assert_int_eq(resihp__runmap_build(&m, L, dp, nd), 0);
  int *holder = calloc((size_t)R, sizeof(int));
  ck_assert_ptr_nonnull(holder);
  ck_assert_int_ge(m.nruns, 1);
  ck_assert_int_eq(m.first[0], 0);
  ck_assert_int_eq(m.first[m.nruns], L);

  /* every rank's buffer: its layers' elements; replica r's gradient of
   * element e is (r + 1) * 1000 + e, and each element remembers how many
   * times a group added it up */
  int64_t **buf = calloc((size_t)R, sizeof(int64_t *));
  int **touched = calloc((size_t)R, sizeof(int *));
  ck_assert(buf && touched);
  for (int r = 0; r < R; r++) {
    buf[r] = calloc(E ? E : 1, sizeof(int64_t));
    touched[r] = calloc(E ? E : 1, sizeof(int));
    ck_assert(buf[r] && touched[r]);
    for (size_t e = 0; e < E; e++)
      buf[r][e] = (int64_t)(r + 1) * 1000 + (int64_t)e;
  }
  /* each rank's runs are consecutive and tile its layers */
  for (int d = 0; d < nd; d++)
    for (int k = 0; k < dp[d].k; k++) {
      int r0, r1;
      ck_assert_int_eq(resihp__runmap_rank_runs(&m, &dp[d], k, &r0, &r1),
                       0);
      ck_assert_int_lt(r0, r1);
      ck_assert_int_eq(m.first[r0], dp[d].bounds[k]);
      ck_assert_int_eq(m.first[r1], dp[d].bounds[k + 1]);
      for (int g = r0; g < r1; g++)
        ck_assert_int_eq(
            resihp__partition_holder(&dp[d], resihp__runmap_group(&m, g)),
            k);
    }
  /* the exchange: each run in its group (one holder per replica, each
   * replica's buffer here being the concatenation of its ranks' ones) */
  int64_t *sum = calloc(E ? E : 1, sizeof(int64_t));
  ck_assert_ptr_nonnull(sum);
  for (int g = 0; g < m.nruns; g++) {
    size_t a = off[m.first[g]], b = off[m.first[g + 1]];
    memset(sum, 0, sizeof(int64_t) * (E ? E : 1));
    resihp__runmap_holders(&m, g, dp, of2, R, holder);
    for (int r = 0; r < R; r++) {
      const resihp__partition_t *p = &parts[of[r]];
      int k = holder[r];
      /* the holder's own slice of the run, offsets within its buffer */
      size_t base = off[p->bounds[k]];
      ck_assert_uint_le(base, a);
      ck_assert_uint_le(b, off[p->bounds[k + 1]]);
      ck_assert_int_eq(resihp__partition_holder(p, m.first[g + 1] - 1), k);
      /* (element e lies at e - base in the holder's own buffer) */
      for (size_t e = a; e < b; e++)
        sum[e] += buf[r][e];
    }
    for (int r = 0; r < R; r++)
      for (size_t e = a; e < b; e++) {
        buf[r][e] = sum[e];
        touched[r][e]++;
      }
  }
  for (int r = 0; r < R; r++)
    for (size_t e = 0; e < E; e++) {
      int64_t want = 0;
      for (int q = 0; q < R; q++)
        want += (int64_t)(q + 1) * 1000 + (int64_t)e;
      ck_assert_int_eq(touched[r][e], 1);
      ck_assert_int_eq(buf[r][e], want);
    }
  for (int r = 0; r < R; r++) {
    free(buf[r]);
    free(touched[r]);
  }
  free(buf);
  free(touched);
  free(sum);
  resihp__runmap_free(&m);
  for (int d = 0; d < D; d++)
    resihp__partition_free(&parts[d]);
  for (int d = 0; d < nd; d++)
    resihp__partition_free(&dp[d]);
  free(dp);
  free(holder);
  free(text);
  free(tp);
  free(of2);
  free(parts);
  free(of);
  free(off);
  free(elems);
}
END_TEST

START_TEST(identical_partitions_are_shard_groups) {
  rng_state = 77 + (unsigned long long)_i;
  int L = 1 + (int)rnd(60);
  resihp__partition_t p[3];
  random_partition(L, 16, &p[0]);
  char text[1024];
  ck_assert_int_eq(resihp__partition_format(&p[0], text, sizeof(text)), 0);
  for (int i = 1; i < 3; i++)
    ck_assert_int_eq(resihp__partition_parse(text, L, &p[i]), 0);
  resihp__runmap_t m;
  ck_assert_int_eq(resihp__runmap_build(&m, L, p, 3), 0);
  ck_assert_int_eq(m.nruns, p[0].k);
  for (int k = 0; k < p[0].k; k++) {
    int r0, r1;
    ck_assert_int_eq(resihp__runmap_rank_runs(&m, &p[1], k, &r0, &r1), 0);
    ck_assert_int_eq(r0, k);
    ck_assert_int_eq(r1, k + 1);
    ck_assert_int_eq(resihp__runmap_group(&m, k), p[0].bounds[k]);
  }
  resihp__runmap_free(&m);
  for (int i = 0; i < 3; i++)
    resihp__partition_free(&p[i]);
}
END_TEST

START_TEST(catchup_pieces_cover) {
  rng_state = 4242 + (unsigned long long)_i;
  int L = 1 + (int)rnd(50);
  resihp__partition_t dst, src;
  random_partition(L, 8, &dst);
  random_partition(L, 8, &src);
  resihp__layer_piece_t *pc = malloc(sizeof(*pc) * (size_t)src.k);
  ck_assert_ptr_nonnull(pc);
  for (int k = 0; k < dst.k; k++) {
    int a = dst.bounds[k], b = dst.bounds[k + 1];
    int n = resihp__layers_sources(&src, a, b, pc);
    ck_assert_int_ge(n, 1);
    ck_assert_int_le(n, src.k);
    int at = a;
    for (int i = 0; i < n; i++) {
      ck_assert_int_eq(pc[i].first, at); /* no gap, no overlap */
      ck_assert_int_lt(pc[i].first, pc[i].end);
      ck_assert_int_ge(pc[i].first, src.bounds[pc[i].rank]);
      ck_assert_int_le(pc[i].end, src.bounds[pc[i].rank + 1]);
      at = pc[i].end;
    }
    ck_assert_int_eq(at, b);
  }
  ck_assert_int_eq(resihp__layers_sources(&src, 0, 0, pc), RESIHP_EINVAL);
  ck_assert_int_eq(resihp__layers_sources(&src, 0, L + 1, pc), RESIHP_EINVAL);
  free(pc);
  resihp__partition_free(&dst);
  resihp__partition_free(&src);
}
END_TEST

START_TEST(partition_text) {
  resihp__partition_t p;
  ck_assert_int_eq(resihp__partition_parse("", 5, &p), 0);
  ck_assert_int_eq(p.k, 1);
  ck_assert_int_eq(p.bounds[1], 5);
  resihp__partition_free(&p);
  ck_assert_int_eq(resihp__partition_parse("2:3", 5, &p), 0);
  ck_assert_int_eq(p.k, 3);
  ck_assert_int_eq(p.bounds[0], 0);
  ck_assert_int_eq(p.bounds[1], 2);
  ck_assert_int_eq(p.bounds[2], 3);
  ck_assert_int_eq(p.bounds[3], 5);
  char t[16];
  ck_assert_int_eq(resihp__partition_format(&p, t, sizeof(t)), 0);
  ck_assert_str_eq(t, "2:3");
  ck_assert_int_eq(resihp__partition_format(&p, t, 3), RESIHP_ERANGE);
  resihp__partition_free(&p);
  static const char *const bad[] = {"0",   "5",   "3:2", "2:2", "-1",
                                    "2:",  ":2",  "a",   "2 3", "6",
                                    "1:7", "2::3"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ck_assert_int_eq(resihp__partition_parse(bad[i], 5, &p), RESIHP_EPROTO);
    ck_assert_ptr_null(p.bounds);
  }
  ck_assert_int_eq(resihp__partition_parse("", 0, &p), RESIHP_EPROTO);
  int c[] = {2, 0, 3};
  ck_assert_int_eq(resihp__partition_from_counts(c, 3, 5, &p), RESIHP_EINVAL);
  int c2[] = {2, 2};
  ck_assert_int_eq(resihp__partition_from_counts(c2, 2, 5, &p),
                   RESIHP_EINVAL);
  /* a map refuses a partition of another model, and a rank it lacks */
  resihp__partition_t q;
  ck_assert_int_eq(resihp__partition_parse("1", 4, &q), 0);
  resihp__runmap_t m;
  ck_assert_int_eq(resihp__runmap_build(&m, 5, &q, 1), RESIHP_EINVAL);
  ck_assert_int_eq(resihp__runmap_build(&m, 4, &q, 1), 0);
  int r0, r1;
  ck_assert_int_eq(resihp__runmap_rank_runs(&m, &q, 2, &r0, &r1),
                   RESIHP_EINVAL);
  resihp__partition_t z;
  ck_assert_int_eq(resihp__partition_parse("2", 4, &z), 0);
  ck_assert_int_eq(resihp__runmap_rank_runs(&m, &z, 0, &r0, &r1),
                   RESIHP_EINVAL);
  resihp__partition_free(&z);
  resihp__runmap_free(&m);
  resihp__partition_free(&q);
  /* the distinct partitions of members: a bad text refuses them all */
  const char *texts[4] = {"1:3", NULL, "1:3", "2"};
  int of[4], nd = 0;
  resihp__partition_t *dp = NULL;
  ck_assert_int_eq(resihp__partitions_distinct(texts, 4, 4, &dp, &nd, of), 0);
  ck_assert_int_eq(nd, 3);
  ck_assert_int_eq(of[0], of[2]);
  ck_assert_int_ne(of[0], of[1]);
  ck_assert_int_ne(of[3], of[1]);
  ck_assert_int_eq(dp[of[1]].k, 1);
  for (int i = 0; i < nd; i++)
    resihp__partition_free(&dp[i]);
  free(dp);
  texts[3] = "4";
  ck_assert_int_eq(resihp__partitions_distinct(texts, 4, 4, &dp, &nd, of),
                   RESIHP_EPROTO);
  ck_assert_ptr_null(dp);
}
END_TEST

/* GO's lparts= (the coordinator's coord_layers.c writes it): the first
 * partition is every unlisted member's, the others their listed ones';
 * a stranger, a member listed twice, a partition of more than K ranks, a
 * first entry with members or a later one without are refused; one of
 * fewer ranks (a replica that shrank) is taken, even as the first. */
START_TEST(lparts_list) {
  static const int ids[] = {1, 4, 7, 9, 12};
  int of[5];
  resihp__partition_t *parts;
  int np;
  ck_assert_int_eq(resihp__lparts_parse("4:9,7:13@4:12,1:19@9", 20, 3, ids, 5,
                                        &parts, &np, of),
                   0);
  ck_assert_int_eq(np, 3);
  static const int want[] = {0, 1, 0, 2, 1};
  for (int i = 0; i < 5; i++)
    ck_assert_int_eq(of[i], want[i]);
  ck_assert_int_eq(parts[1].bounds[1], 7);
  ck_assert_int_eq(parts[2].bounds[2], 19);
  for (int d = 0; d < np; d++)
    resihp__partition_free(&parts[d]);
  free(parts);
  /* replica 4 shrank to one rank, replica 9 to two; then most did */
  ck_assert_int_eq(resihp__lparts_parse("4:9,@4,11@9", 20, 3, ids, 5, &parts,
                                        &np, of),
                   0);
  ck_assert_int_eq(np, 3);
  ck_assert_int_eq(parts[1].k, 1);
  ck_assert_int_eq(parts[2].k, 2);
  ck_assert_int_eq(parts[2].bounds[1], 11);
  ck_assert_int_eq(of[1], 1);
  ck_assert_int_eq(of[3], 2);
  for (int d = 0; d < np; d++)
    resihp__partition_free(&parts[d]);
  free(parts);
  ck_assert_int_eq(
      resihp__lparts_parse("4", 20, 3, ids, 5, &parts, &np, of), 0);
  ck_assert_int_eq(parts[0].k, 2);
  resihp__partition_free(&parts[0]);
  free(parts);
  static const char *const bad[] = {"4:9,7:13@5",
                                    "4:9,7:13@4:4",
                                    "4:9,7:13@4,1:19@4",
                                    "4:9,7",
                                    "4:9@1",
                                    "4:9:12",
                                    "4:9,4:9:12@4",
                                    "4:9,7:13@",
                                    "4:9,",
                                    "4:9,,7:13@4",
                                    "4:9,7:13@-1",
                                    "4:9,7:13@4,1:19@1,2:3@7,5:6@9,8:10@12"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ck_assert_msg(resihp__lparts_parse(bad[i], 20, 3, ids, 5, &parts, &np,
                                       of) == RESIHP_EPROTO,
                  "'%s' accepted", bad[i]);
    ck_assert_ptr_null(parts);
  }
}
END_TEST

/* A replacement's ranks get every layer from healthy members, each piece
 * from a rank that holds it, the runs spread over the healthy members. */
START_TEST(catchup_plan_covers_and_spreads) {
  rng_state = 9000 + (unsigned long long)_i;
  int L = 1 + (int)rnd(30), R = 2 + (int)rnd(10), D = 1 + (int)rnd(4);
  resihp__partition_t *parts = calloc((size_t)D, sizeof(*parts));
  int *of = malloc(sizeof(int) * (size_t)R), *src = malloc(sizeof(int) * (size_t)R);
  ck_assert(parts && of && src);
  for (int d = 0; d < D; d++)
    random_partition(L, 6, &parts[d]);
  for (int r = 0; r < R; r++)
    of[r] = (int)rnd((unsigned)D);
  resihp__runmap_t m;
  ck_assert_int_eq(resihp__runmap_build(&m, L, parts, D), 0);
  /* member 0 is the replacement; the healthy ones a random subset */
  int nh = 0;
  for (int r = 1; r < R; r++)
    if (rnd(3))
      src[nh++] = r;
  if (!nh)
    src[nh++] = 1;
  const resihp__partition_t *me = &parts[of[0]];
  resihp__catchup_piece_t *pc = malloc(sizeof(*pc) * (size_t)m.nruns);
  ck_assert_ptr_nonnull(pc);
  for (int k = 0; k < me->k; k++) {
    int r0, r1;
    ck_assert_int_eq(resihp__runmap_rank_runs(&m, me, k, &r0, &r1), 0);
    int n = resihp__catchup_plan(&m, parts, of, of[0], k, src, nh,
                                 (unsigned)k, pc);
    ck_assert_int_ge(n, 1);
    ck_assert_int_le(n, r1 - r0);
    int at = me->bounds[k], used = 0;
    for (int i = 0; i < n; i++) {
      const resihp__partition_t *p = &parts[of[pc[i].member]];
      ck_assert_int_eq(pc[i].first, at);
      ck_assert_int_lt(pc[i].first, pc[i].end);
      ck_assert_int_ge(pc[i].first, p->bounds[pc[i].rank]);
      ck_assert_int_le(pc[i].end, p->bounds[pc[i].rank + 1]);
      ck_assert_int_ne(pc[i].member, 0);
      for (int h = 0; h < nh; h++)
        used |= (src[h] == pc[i].member) << (h < 30 ? h : 30);
      at = pc[i].end;
    }
    ck_assert_int_eq(at, me->bounds[k + 1]);
    /* as many distinct sources as runs allow */
    int want = r1 - r0 < nh ? r1 - r0 : nh, got = __builtin_popcount(used);
    if (nh <= 30)
      ck_assert_int_eq(got, want);
  }
  int none[1] = {1};
  ck_assert_int_eq(resihp__catchup_plan(&m, parts, of, of[0], 0, none, 0, 0,
                                        pc),
                   RESIHP_EINVAL);
  free(pc);
  resihp__runmap_free(&m);
  for (int d = 0; d < D; d++)
    resihp__partition_free(&parts[d]);
  free(parts);
  free(of);
  free(src);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("layer_groups");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, random_partitions_sum_once, 0, 400);
  tcase_add_loop_test(tc, identical_partitions_are_shard_groups, 0, 100);
  tcase_add_test(tc, lparts_list);
  tcase_add_loop_test(tc, catchup_pieces_cover, 0, 200);
  tcase_add_loop_test(tc, catchup_plan_covers_and_spreads, 0, 300);
  tcase_add_test(tc, partition_text);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return run_suite(suite()); }
