/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the coordinator's saves (libresihp/control/coord_save.c),
 * driven through its real message handler over socket pairs: a save holds
 * the step boundary until one replica answers SAVED ok=1; ok=0 or the
 * asked replica's failure asks the next member; a SAVED from anyone else
 * is ignored and a malformed one refused; when nobody can save, the
 * launcher hears ok=0 and the training goes on; a stop saves first unless
 * the save is given up; a resumed run starts at its step with nobody
 * catching up, and saves nothing at that first boundary. */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/wire.h"
#include "../../libresihp/transport/mesh.h"
#include "suite_main.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define R 3
static resihp__coord_t *c;
static int k[R], sv[R][2];
static resihp__wire_t peer[R];
static long saved_step[8];
static int saved_by[8], saved_ok[8], nsaved;

static void on_saved(void *ud, long step, int r, int ok) {
  (void)ud;
  ck_assert_int_lt(nsaved, 8);
  saved_step[nsaved] = step;
  saved_by[nsaved] = r;
  saved_ok[nsaved] = ok;
  nsaved++;
}

static void setup(int n, long start, int every, int on_stop) {
  static const char key[] = "save-test-secret";
  resihp__coord_opts_t co = {.replicas = n,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)key,
                             .secret_len = sizeof(key) - 1,
                             .silence_ms = 600000,
                             .start_step = start,
                             .save_every = every,
                             .save_on_stop = on_stop,
                             .on_saved = on_saved};
  nsaved = 0;
  ck_assert_int_eq(resihp__coord_create(&co, &c), 0);
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv[i]),
                     0);
    resihp__wire_t w;
    resihp__wire_init(&w, sv[i][0]);
    k[i] = resihp__coord_adopt(c, &w);
    ck_assert_int_ge(k[i], 0);
    resihp__wire_init(&peer[i], sv[i][1]);
  }
}

static void teardown(int n) {
  ck_assert_ptr_null(resihp__coord_check(c));
  resihp__coord_destroy(c);
  for (int i = 0; i < n; i++)
    resihp__wire_free(&peer[i]);
}

/* The next line replica i gets that starts with prefix (others skipped). */
static void expect(int i, const char *prefix, char *line, size_t cap) {
  for (int n = 0; n < 64; n++) {
    ck_assert_int_eq(
        resihp__wire_recv(&peer[i], line, cap, resihp__now_ms() + 5000), 0);
    if (!strncmp(line, prefix, strlen(prefix)))
      return;
  }
  ck_abort_msg("replica %d never got '%s'", i, prefix);
}

static void feed(int i, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void feed(int i, const char *fmt, ...) {
  char line[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  resihp__coord_feed(c, k[i], line);
}

/* Every replica joins and takes the first step's START. */
static void join_all(int n, long first) {
  char line[512];
  for (int i = 0; i < n; i++) {
    snprintf(line, sizeof(line),
             "HELLO replica=%d ep=h%d:1 sep=h%d:2 mbs=6 steps=20", i, i, i);
    resihp__coord_feed(c, k[i], line);
  }
  for (int i = 0; i < n; i++)
    feed(i, "BEGIN step=%ld", -1L);
  for (int i = 0; i < n; i++) {
    expect(i, "GO ", line, sizeof(line));
    feed(i, "READY epoch=%ld", (long)resihp__coord_epoch(c));
  }
  for (int i = 0; i < n; i++) {
    expect(i, "START ", line, sizeof(line));
    char want[32];
    snprintf(want, sizeof(want), "START step=%ld ", first);
    ck_assert_msg(!strncmp(line, want, strlen(want)), "%s", line);
    ck_assert_ptr_null(strstr(line, "catchup=1"));
  }
}

/* Every live replica of those listed begins step s. */
static void begin_all(const int *who, int n, long s) {
  for (int i = 0; i < n; i++)
    feed(who[i], "BEGIN step=%ld", s);
}

START_TEST(save_every_asks_next_on_failure) {
  char line[512];
  setup(R, 0, 2, 0);
  join_all(R, 0);
  int all[R] = {0, 1, 2};
  begin_all(all, R, 1); /* step 1: no save (every 2) */
  ck_assert_int_eq(resihp__coord_saving(c), 0);
  for (int i = 0; i < R; i++)
    expect(i, "START step=1 ", line, sizeof(line));
  begin_all(all, R, 2); /* step 2: replica 0 asked first */
  expect(0, "SAVE ", line, sizeof(line));
  ck_assert_str_eq(line, "SAVE step=2");
  ck_assert_int_eq(resihp__coord_saving(c), 1);
  ck_assert_int_eq(resihp__coord_step(c), 2);
  feed(0, "SAVED step=%ld ok=0", 2L); /* it cannot: replica 1 */
  expect(1, "SAVE ", line, sizeof(line));
  ck_assert_str_eq(line, "SAVE step=2");
  resihp__coord_mark_failed(c, 1, "test: dies while saving"); /* replica 2 */
  expect(2, "SAVE ", line, sizeof(line));
  feed(0, "SAVED step=%ld ok=1", 2L); /* not asked: ignored */
  ck_assert_int_eq(nsaved, 0);
  ck_assert_int_eq(resihp__coord_saving(c), 1);
  feed(2, "SAVED step=%ld ok=1", 2L);
  ck_assert_int_eq(nsaved, 1);
  ck_assert_int_eq(saved_step[0], 2);
  ck_assert_int_eq(saved_by[0], 2);
  ck_assert_int_eq(saved_ok[0], 1);
  ck_assert_int_eq(resihp__coord_saving(c), 0);
  /* the boundary goes on: a new epoch without replica 1, then step 2 */
  int live[2] = {0, 2};
  for (int i = 0; i < 2; i++) {
    expect(live[i], "GO ", line, sizeof(line));
    feed(live[i], "READY epoch=%ld", (long)resihp__coord_epoch(c));
  }
  for (int i = 0; i < 2; i++)
    expect(live[i], "START step=2 ", line, sizeof(line));
  /* step 4: both say ok=0: the launcher hears it, training goes on */
  begin_all(live, 2, 3);
  for (int i = 0; i < 2; i++)
    expect(live[i], "START step=3 ", line, sizeof(line));
  begin_all(live, 2, 4);
  expect(0, "SAVE step=4", line, sizeof(line));
  feed(0, "SAVED step=%ld ok=0", 4L);
  expect(2, "SAVE step=4", line, sizeof(line));
  feed(2, "SAVED step=%ld ok=0", 4L);
  ck_assert_int_eq(nsaved, 2);
  ck_assert_int_eq(saved_ok[1], 0);
  ck_assert_int_eq(saved_by[1], -1);
  for (int i = 0; i < 2; i++)
    expect(live[i], "START step=4 ", line, sizeof(line));
  /* a malformed SAVED is refused and costs its sender */
  feed(2, "SAVED step=%ld ok=7", 4L);
  ck_assert_int_eq(resihp__coord_connected(c, 2), 0);
  teardown(R);
}
END_TEST

START_TEST(stop_saves_first_unless_cancelled) {
  char line[512];
  setup(2, 0, 0, 1);
  join_all(2, 0);
  int all[2] = {0, 1};
  begin_all(all, 2, 1);
  for (int i = 0; i < 2; i++)
    expect(i, "START step=1 ", line, sizeof(line));
  resihp__coord_stop(c); /* step 1 commits, then the save, then DONE */
  begin_all(all, 2, 2);
  expect(0, "SAVE step=2", line, sizeof(line));
  feed(0, "SAVED step=%ld ok=1", 2L);
  ck_assert_int_eq(nsaved, 1);
  for (int i = 0; i < 2; i++)
    expect(i, "DONE", line, sizeof(line));
  teardown(2);

  /* the same, the save given up (a second signal): DONE without it */
  setup(2, 0, 0, 1);
  join_all(2, 0);
  begin_all(all, 2, 1);
  resihp__coord_stop(c);
  begin_all(all, 2, 2);
  expect(0, "SAVE step=2", line, sizeof(line));
  resihp__coord_save_cancel(c);
  ck_assert_int_eq(resihp__coord_saving(c), 0);
  for (int i = 0; i < 2; i++)
    expect(i, "DONE", line, sizeof(line));
  feed(0, "SAVED step=%ld ok=1", 2L); /* too late: ignored */
  ck_assert_int_eq(nsaved, 0);
  teardown(2);
}
END_TEST

START_TEST(resumed_run_starts_at_its_step) {
  char line[512];
  setup(2, 7, 0, 1);
  ck_assert_int_eq(resihp__coord_step(c), 7);
  join_all(2, 7); /* START step=7, nobody catching up, not lost */
  ck_assert_int_eq(resihp__coord_state(c), RESIHP__COORD_RUNNING);
  teardown(2);
  /* stopped at its first boundary, far in: nothing new to save, and the
   * summary counts the steps of the run before it */
  setup(2, 500, 0, 1);
  int all[2] = {0, 1};
  for (int i = 0; i < 2; i++) {
    snprintf(line, sizeof(line),
             "HELLO replica=%d ep=h%d:1 sep=h%d:2 mbs=6 steps=900", i, i, i);
    resihp__coord_feed(c, k[i], line);
  }
  resihp__coord_stop(c);
  begin_all(all, 2, -1L);
  for (int i = 0; i < 2; i++)
    expect(i, "DONE", line, sizeof(line));
  ck_assert_int_eq(nsaved, 0);
  char *text = NULL;
  size_t tlen = 0;
  FILE *f = open_memstream(&text, &tlen);
  ck_assert_ptr_nonnull(f);
  resihp__coord_summary(c, f, NULL);
  fclose(f);
  ck_assert_msg(strstr(text, "steps completed:        500 of 900"), "%s", text);
  free(text);
  ck_assert_int_eq(resihp__coord_saving(c), 0);
  teardown(2);
  /* a start past the limits is refused */
  static const char key[] = "k";
  resihp__coord_opts_t co = {.replicas = 1,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)key,
                             .secret_len = 1,
                             .start_step = -1};
  resihp__coord_t *x = NULL;
  ck_assert_int_ne(resihp__coord_create(&co, &x), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("coord_save");
  TCase *t = tcase_create("saves");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, save_every_asks_next_on_failure);
  tcase_add_test(t, stop_saves_first_unless_cancelled);
  tcase_add_test(t, resumed_run_starts_at_its_step);
  suite_add_tcase(s, t);
  return run_suite(s);
}
