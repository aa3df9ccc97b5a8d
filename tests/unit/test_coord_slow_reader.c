/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the coordinator's output queues (coord_loop.c,
 * resihp__wire_queue): a replica that stops reading - a stopped process
 * whose socket buffer is full - delays nobody. What the coordinator sends
 * it waits in order in its queue while the others go on; once it reads
 * again every line arrives whole and in order; past the bound of what is
 * kept for one replica its connection is cut and it fails. Driven through
 * the real message handler over socket pairs, as test_coord_save. */
#include "config.h"

#include "coord_pairs.h"
#include "suite_main.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define R 2
#define BIG ((size_t)1 << 20)
static char *big;

static void setup(void) {
  coord_pairs_setup(R, NULL, NULL);
  big = malloc(BIG + 32);
  ck_assert_ptr_nonnull(big);
}

static void teardown(void) {
  coord_pairs_teardown();
  free(big);
}

/* Line j of the big ones: its number, then filler. */
static const char *big_line(int j) {
  int n = snprintf(big, 32, "BIG %d ", j);
  memset(big + n, 'a' + j % 26, BIG - (size_t)n);
  big[BIG] = '\0';
  return big;
}

static size_t queued(int i) {
  const resihp__wire_t *w = &coord_c->conns[coord_k[i]].w;
  return w->out_len - w->out_off;
}

START_TEST(stopped_reader_delays_nobody) {
  setup();
  coord_pairs_join_all();
  /* Replica 1 stops reading: 8 MiB for it, far beyond its socket buffer,
   * and every send returns without waiting for it. */
  for (int j = 0; j < 8; j++)
    resihp__coord_send_to(coord_c, 1, big_line(j));
  ck_assert_uint_gt(queued(1), 0);
  ck_assert(coord_c->conns[coord_k[1]].out_armed);
  ck_assert_int_eq(resihp__coord_connected(coord_c, 1), 1);
  /* Meanwhile replica 0 is served as usual. */
  resihp__coord_send_to(coord_c, 0, "HOLD");
  char line[512];
  coord_pairs_expect(0, "HOLD", line, sizeof(line));
  /* Replica 1 reads again: every line whole and in order, after what it
   * had before, and the queue empties. */
  char *got = malloc(BIG + 64);
  ck_assert_ptr_nonnull(got);
  for (int j = 0; j < 8; j++) {
    coord_pairs_expect(1, "BIG ", got, BIG + 64);
    const char *want = big_line(j);
    ck_assert_msg(!strcmp(got, want), "line %d differs", j);
  }
  for (int n = 0; n < 1000 && queued(1); n++)
    resihp__coord_poll(coord_c, 10);
  ck_assert_uint_eq(queued(1), 0);
  ck_assert(!coord_c->conns[coord_k[1]].out_armed);
  ck_assert_int_eq(resihp__coord_members(coord_c), R);
  free(got);
  teardown();
}
END_TEST

START_TEST(reader_beyond_bound_is_cut) {
  setup();
  coord_pairs_join_all();
  /* Replica 1 never reads: past two of the longest lines kept for it,
   * its connection is cut and it fails as a lost one. */
  int sent = 0;
  while (resihp__coord_connected(coord_c, 1) && sent < 64) {
    resihp__coord_send_to(coord_c, 1, big_line(sent++));
    resihp__coord_poll(coord_c, 0);
  }
  ck_assert_int_eq(resihp__coord_connected(coord_c, 1), 0);
  ck_assert_int_gt(sent, 2 * (int)(RESIHP__WIRE_LINE_MAX / BIG));
  ck_assert_int_eq(resihp__coord_members(coord_c), 1);
  teardown();
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("coord_slow_reader");
  TCase *tc = tcase_create("queues");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, stopped_reader_delays_nobody);
  tcase_add_test(tc, reader_beyond_bound_is_cut);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return run_suite(suite());
}
