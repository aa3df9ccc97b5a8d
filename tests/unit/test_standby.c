/* SPDX-License-Identifier: BSD-3-Clause */
/* The standby's feed (control/standby.h): a follower in a child process
 * gets the newest record, authenticated, and BYE at the end; a record put
 * while nobody follows reaches the next follower; a second standby takes
 * the first one's place, and an old one the primary no longer expects
 * cannot take it back; a follower with the wrong secret gets nothing;
 * the primary's death ends the follower's wait with the last complete
 * record; the lines' parsers are strict; the standby beats while it
 * follows (the primary's lease). Events, not time: each step waits
 * for what it checks (the feed's standby, a pipe from the child). */
#include "config.h"

#include "../../libresihp/control/standby.h"
#include "../../libresihp/control/wire.h"
#include "../../libresihp/transport/mesh.h"
#include "suite_main.h"

#include <resihp/error.h>

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const uint8_t KEY[] = "standby-test-secret-0123456789";

typedef struct {
  resihp__wire_listener_t lis;
  char ep[64];
  resihp__feed_t *f;
} primary_t;

static void primary_up(primary_t *p) {
  ck_assert_int_eq(resihp__wire_listener_open("127.0.0.1", 0, 4, &p->lis), 0);
  snprintf(p->ep, sizeof(p->ep), "127.0.0.1:%d", p->lis.port);
  ck_assert_int_eq(
      resihp__feed_start(p->lis.fds[0], KEY, sizeof(KEY) - 1, &p->f), 0);
}

static void primary_down(primary_t *p) {
  resihp__feed_stop(p->f);
  resihp__wire_listener_close(&p->lis);
}

/* A follower in a child: what follow returned and the last record it
 * had, through a pipe (rc, then the record's bytes). */
typedef struct {
  pid_t pid;
  int rfd;
} follower_t;

static void follower_start(follower_t *fl, const char *ep, const uint8_t *key,
                           size_t klen, const char *hello) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  fl->pid = fork();
  ck_assert_int_ge(fl->pid, 0);
  if (fl->pid == 0) {
    close(fds[0]);
    char *rec = NULL;
    size_t len = 0;
    int rc =
        resihp__feed_follow(ep, key, klen, hello, 3000, &rec, &len, NULL, NULL);
    FILE *o = fdopen(fds[1], "w");
    fprintf(o, "%d\n", rc);
    if (rec)
      fwrite(rec, 1, len, o);
    fclose(o);
    _exit(0);
  }
  close(fds[1]);
  fl->rfd = fds[0];
}

/* Its outcome: follow's return, the record into rec. */
static int follower_end(follower_t *fl, char *rec, size_t cap) {
  FILE *i = fdopen(fl->rfd, "r");
  int rc = -999;
  ck_assert_int_eq(fscanf(i, "%d\n", &rc), 1);
  size_t n = fread(rec, 1, cap - 1, i);
  rec[n] = '\0';
  fclose(i);
  ck_assert_int_eq(waitpid(fl->pid, NULL, 0), fl->pid);
  return rc;
}

/* Wait until the feed has a standby (have = 1) whose address is ep, or
 * none (have = 0). */
static void wait_standby(primary_t *p, int have, const char *ep) {
  char got[64], node[64];
  for (int i = 0; i < 3000; i++) {
    int h = resihp__feed_standby(p->f, got, sizeof(got), node, sizeof(node),
                                 NULL, 0, NULL);
    if (h == have && (!have || !strcmp(got, ep)))
      return;
    usleep(2000);
  }
  ck_abort_msg("the feed never had the standby %s (want %d)", ep, have);
}

/* The standby at ep is the feed's; BYE ends it (follow returns 1) with
 * the record want; the primary goes. */
static void bye_ends(primary_t *p, follower_t *fl, const char *ep,
                     const char *want) {
  char rec[256];
  wait_standby(p, 1, ep);
  resihp__feed_bye(p->f, 5000);
  ck_assert_int_eq(follower_end(fl, rec, sizeof(rec)), 1);
  ck_assert_str_eq(rec, want);
  primary_down(p);
}

START_TEST(newest_record_then_bye) {
  primary_t p;
  primary_up(&p);
  resihp__feed_put(p.f, "one", 3); /* before anyone follows */
  follower_t fl;
  follower_start(&fl, p.ep, KEY, sizeof(KEY) - 1,
                 "STANDBY ep=10.0.0.2:4000 node=n2 step=7.3");
  wait_standby(&p, 1, "10.0.0.2:4000");
  char node[64], step[64];
  resihp__feed_standby(p.f, NULL, 0, node, sizeof(node), step, sizeof(step),
                       NULL);
  ck_assert_str_eq(node, "n2");
  ck_assert_str_eq(step, "7.3");
  resihp__feed_put(p.f, "two", 3);
  resihp__feed_put(p.f, "three, the newest", 17);
  resihp__feed_bye(p.f, 5000);
  char rec[256];
  ck_assert_int_eq(follower_end(&fl, rec, sizeof(rec)), 1);
  ck_assert_str_eq(rec, "three, the newest");
  wait_standby(&p, 0, NULL);
  primary_down(&p);
}
END_TEST

/* Authenticated connections that never say their hello hold neither the
 * feed's thread nor the standby that comes after them: it follows while
 * they are all still open (each waited 2 s in turn before, and was closed
 * before the standby was looked at). */
START_TEST(silent_hellos_do_not_hold_the_feed) {
  primary_t p;
  primary_up(&p);
  resihp__wire_t silent[3];
  for (int i = 0; i < 3; i++) {
    int64_t dl = resihp__now_ms() + 10000;
    resihp__wire_init(&silent[i], resihp__wire_dial(p.ep, dl));
    ck_assert_int_ge(silent[i].fd, 0);
    ck_assert_int_eq(resihp__wire_auth_client(&silent[i], KEY, sizeof(KEY) - 1,
                                              "standby", dl),
                     0);
  }
  follower_t fl;
  follower_start(&fl, p.ep, KEY, sizeof(KEY) - 1,
                 "STANDBY ep=10.0.0.3:4000 node=n3");
  wait_standby(&p, 1, "10.0.0.3:4000");
  for (int i = 0; i < 3; i++) {
    char c;
    ck_assert_msg(recv(silent[i].fd, &c, 1, MSG_DONTWAIT) < 0 &&
                      errno == EAGAIN,
                  "silent connection %d was closed before the standby "
                  "followed",
                  i);
    resihp__wire_free(&silent[i]);
  }
  resihp__feed_bye(p.f, 5000);
  char rec[64];
  ck_assert_int_eq(follower_end(&fl, rec, sizeof(rec)), 1);
  primary_down(&p);
}
END_TEST

START_TEST(second_standby_replaces_first) {
  primary_t p;
  primary_up(&p);
  resihp__feed_put(p.f, "state", 5);
  follower_t a, b;
  follower_start(&a, p.ep, KEY, sizeof(KEY) - 1, "STANDBY ep=h:1 node=a");
  wait_standby(&p, 1, "h:1");
  follower_start(&b, p.ep, KEY, sizeof(KEY) - 1, "STANDBY ep=h:2 node=b");
  wait_standby(&p, 1, "h:2");
  /* the primary now wants a standby on node b only: the old one, back,
   * is refused and b stays */
  resihp__feed_expect(p.f, "b", NULL);
  follower_t old;
  follower_start(&old, p.ep, KEY, sizeof(KEY) - 1, "STANDBY ep=h:1 node=a");
  char rec[256];
  /* the first one's link is closed: it ends with the record it had */
  ck_assert_int_lt(follower_end(&a, rec, sizeof(rec)), 0);
  ck_assert_str_eq(rec, "state");
  ck_assert_int_lt(follower_end(&old, rec, sizeof(rec)), 0);
  ck_assert_str_eq(rec, "");
  bye_ends(&p, &b, "h:2", "state");
}
END_TEST

/* Another member of the job (it has the secret) names the node of the
 * standby the primary launched: without that standby's token, or with
 * another, it gets no record and does not become the standby; the
 * genuine one (its token) does. */
START_TEST(rogue_standby_refused) {
  primary_t p;
  primary_up(&p);
  resihp__feed_put(p.f, "state", 5);
  resihp__feed_expect(p.f, "n2", "00112233445566778899aabbccddeeff");
  static const char *const rogue[] = {
      "STANDBY ep=h:6 node=n2 step=7.1",
      "STANDBY ep=h:6 node=n2 step=7.1 token=-",
      "STANDBY ep=h:6 node=n2 step=7.1 token=00112233445566778899aabbccddeefe",
      "STANDBY ep=h:6 node=n2 step=7.1 token=00112233445566778899aabbccddeeff0",
      "STANDBY ep=h:6 node=n2 step=7.1 token=00112233"};
  char rec[256];
  for (size_t i = 0; i < sizeof(rogue) / sizeof(rogue[0]); i++) {
    follower_t r;
    follower_start(&r, p.ep, KEY, sizeof(KEY) - 1, rogue[i]);
    ck_assert_int_lt(follower_end(&r, rec, sizeof(rec)), 0);
    ck_assert_msg(!strcmp(rec, ""), "'%s' got a record", rogue[i]);
    ck_assert_int_eq(
        resihp__feed_standby(p.f, NULL, 0, NULL, 0, NULL, 0, NULL), 0);
  }
  follower_t good;
  follower_start(&good, p.ep, KEY, sizeof(KEY) - 1,
                 "STANDBY ep=h:2 node=n2 step=7.3 "
                 "token=00112233445566778899aabbccddeeff");
  bye_ends(&p, &good, "h:2", "state");
}
END_TEST

START_TEST(strangers_get_nothing) {
  primary_t p;
  primary_up(&p);
  resihp__feed_put(p.f, "secret state", 12);
  static const uint8_t other[] = "not-the-job-secret-0123456789";
  follower_t bad, hello;
  follower_start(&bad, p.ep, other, sizeof(other) - 1,
                 "STANDBY ep=h:1 node=x");
  char rec[256];
  ck_assert_int_lt(follower_end(&bad, rec, sizeof(rec)), 0);
  ck_assert_str_eq(rec, "");
  /* the right secret but no proper hello: dropped, nothing sent */
  follower_start(&hello, p.ep, KEY, sizeof(KEY) - 1, "HELLO replica=0");
  ck_assert_int_lt(follower_end(&hello, rec, sizeof(rec)), 0);
  ck_assert_str_eq(rec, "");
  ck_assert_int_eq(resihp__feed_standby(p.f, NULL, 0, NULL, 0, NULL, 0, NULL),
                   0);
  primary_down(&p);
}
END_TEST

/* The primary dies (its feed thread and socket gone at once, as with its
 * node): the follower ends with the last complete record. */
START_TEST(primary_death_keeps_last_record) {
  primary_t p;
  primary_up(&p);
  follower_t fl;
  follower_start(&fl, p.ep, KEY, sizeof(KEY) - 1, "STANDBY ep=h:9 node=z");
  wait_standby(&p, 1, "h:9");
  unsigned long seq = resihp__feed_put(p.f, "last words", 10);
  /* once it is out, the follower reads it before the link's end */
  for (int i = 0; i < 3000 && !resihp__feed_sent(p.f, seq); i++)
    usleep(2000);
  ck_assert(resihp__feed_sent(p.f, seq));
  primary_down(&p);
  char rec[256];
  ck_assert_int_lt(follower_end(&fl, rec, sizeof(rec)), 0);
  ck_assert_str_eq(rec, "last words");
}
END_TEST

START_TEST(lines_parsed_strictly) {
  size_t n;
  ck_assert_int_eq(resihp__feed_parse_rec("REC n=0", &n), 0);
  ck_assert_int_eq(n, 0);
  ck_assert_int_eq(resihp__feed_parse_rec("REC n=1073741824", &n), 0);
  const char *bad_rec[] = {"REC n=1073741825", "REC n=-1", "REC n=", "REC",
                           "REC m=5", "RECN n=5", "REC n=5x"};
  for (size_t i = 0; i < sizeof(bad_rec) / sizeof(bad_rec[0]); i++)
    ck_assert_msg(resihp__feed_parse_rec(bad_rec[i], &n) == RESIHP_EPROTO,
                  "'%s' taken", bad_rec[i]);
  char ep[16], node[8], step[12];
  ck_assert_int_eq(resihp__feed_parse_hello("STANDBY ep=h:1 node=n1", ep,
                                            sizeof(ep), node, sizeof(node),
                                            step, sizeof(step)),
                   0);
  ck_assert_str_eq(ep, "h:1");
  ck_assert_str_eq(node, "n1");
  ck_assert_str_eq(step, "-");
  ck_assert_int_eq(resihp__feed_parse_hello("STANDBY ep=h:1 node=n1 step=9.2",
                                            ep, sizeof(ep), node, sizeof(node),
                                            step, sizeof(step)),
                   0);
  ck_assert_str_eq(step, "9.2");
  const char *bad_hello[] = {"STANDBY ep=h1 node=n1",
                             "STANDBY node=n1",
                             "STANDBY ep=h:1",
                             "STANDBY ep=hhhhhhhhhhhhhh:1 "
                             "node=n1",
                             "STANDBY ep=h:1 node=nodenamelong",
                             "HELLO ep=h:1 node=n1",
                             "STANDBY ep=h:1 node=n1 step=",
                             "STANDBY ep=h:1 node=n1 step=123456789.1234"};
  for (size_t i = 0; i < sizeof(bad_hello) / sizeof(bad_hello[0]); i++)
    ck_assert_msg(resihp__feed_parse_hello(bad_hello[i], ep, sizeof(ep), node,
                                           sizeof(node), step,
                                           sizeof(step)) == RESIHP_EPROTO,
                  "'%s' taken", bad_hello[i]);
}
END_TEST

/* The standby says HB every beat while it follows (the primary's lease,
 * control/vouch.h): the primary's word of it moves on; a standby that
 * stops (SIGKILL) is no standby, and says nothing any more. */
START_TEST(standby_beats_while_it_follows) {
  primary_t p;
  primary_up(&p);
  resihp__feed_put(p.f, "one", 3);
  follower_t fl;
  follower_start(&fl, p.ep, KEY, sizeof(KEY) - 1,
                 "STANDBY ep=10.0.0.2:4000 node=n2 step=7.3");
  wait_standby(&p, 1, "10.0.0.2:4000");
  int64_t t0 = resihp__feed_heard_ms(p.f);
  ck_assert(t0 > 0);
  int moved = 0;
  for (int i = 0; i < 5000 && !moved; i++) { /* safety net only */
    moved = resihp__feed_heard_ms(p.f) > t0;
    usleep(2000);
  }
  ck_assert_msg(moved, "no HB from the standby");
  kill(fl.pid, SIGKILL);
  ck_assert_int_eq(waitpid(fl.pid, NULL, 0), fl.pid);
  close(fl.rfd);
  wait_standby(&p, 0, NULL);
  ck_assert(resihp__feed_heard_ms(p.f) == 0);
  primary_down(&p);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("standby");
  TCase *tc = tcase_create("feed");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, newest_record_then_bye);
  tcase_add_test(tc, second_standby_replaces_first);
  tcase_add_test(tc, silent_hellos_do_not_hold_the_feed);
  tcase_add_test(tc, strangers_get_nothing);
  tcase_add_test(tc, rogue_standby_refused);
  tcase_add_test(tc, primary_death_keeps_last_record);
  tcase_add_test(tc, lines_parsed_strictly);
  tcase_add_test(tc, standby_beats_while_it_follows);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return run_suite(suite());
}
