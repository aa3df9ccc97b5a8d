/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the coordinator's failover (libresihp/control/
 * coord_snapshot.c and the idempotent answers of coord_protocol.c), with
 * the real coordinator driven through its message handler over socket
 * pairs. For each phase (barrier, set-up, step, free run, end, a decided
 * RECOVER round, a save in progress) the state mirrored write-ahead
 * (on_mirror) is restored into a second coordinator, the replicas come
 * back with HELLO ... again=1 and say their pending request again, and
 * the answer must be the one the first coordinator sent (or sends, fed
 * the same). Also: snapshot -> restore -> snapshot is the same text; a
 * member that never comes back is failed after the bound; the ledger
 * lines the file lacks are written once, none twice; a free run mirrors
 * at commits only; restore refuses broken records.
 *
 * COORD_SNAP_BENCH=1 prints the snapshot's size and the time to build and
 * restore it at R = 1024 and 10000 (a figure, not a test). */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/wire.h"
#include "../../libresihp/transport/mesh.h"
#include "suite_main.h"

#include <resihp/error.h>

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define N 3
static const char key[] = "failover-test-secret";

/* One coordinator and its N replicas' ends of their connections. */
typedef struct {
  resihp__coord_t *c;
  int k[N];
  resihp__wire_t peer[N];
} side_t;

/* The credential each replica's last WELCOME gave it (a HELLO again=1
 * says it). */
static char creds[N][64];

/* The last mirrored state, and how many mirrors were made. */
static char *snap;
static size_t snap_len;
static int nmirrors;
static int saved_ok;

static void on_mirror(void *ud, const char *s, size_t len) {
  (void)ud;
  free(snap);
  snap = malloc(len + 1);
  ck_assert_ptr_nonnull(snap);
  memcpy(snap, s, len);
  snap[len] = '\0';
  snap_len = len;
  nmirrors++;
}

static void on_saved(void *ud, long step, int r, int ok) {
  (void)ud;
  (void)step;
  (void)r;
  saved_ok += ok;
}

static resihp__coord_opts_t opts(int lockstep, long every, FILE *ledger,
                                 int silence_ms) {
  resihp__coord_opts_t co = {.replicas = N,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)key,
                             .secret_len = sizeof(key) - 1,
                             .silence_ms = silence_ms,
                             .lockstep = lockstep,
                             .save_every = every,
                             .on_saved = on_saved,
                             .ledger = ledger,
                             .on_mirror = on_mirror};
  return co;
}

/* A new connection of replica i's (its old end, if any, closed). */
static void connect_one(side_t *s, int i) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  resihp__wire_t w;
  resihp__wire_init(&w, sv[0]);
  s->k[i] = resihp__coord_adopt(s->c, &w);
  ck_assert_int_ge(s->k[i], 0);
  resihp__wire_init(&s->peer[i], sv[1]);
}

static void connect_all(side_t *s) {
  for (int i = 0; i < N; i++)
    connect_one(s, i);
}

static void close_side(side_t *s) {
  ck_assert_ptr_null(resihp__coord_check(s->c));
  resihp__coord_destroy(s->c);
  for (int i = 0; i < N; i++)
    resihp__wire_free(&s->peer[i]);
}

static void feed(side_t *s, int i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void feed(side_t *s, int i, const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  resihp__coord_feed(s->c, s->k[i], line);
}

/* The next line replica i gets but heartbeats. */
static void next(side_t *s, int i, char *line, size_t cap) {
  do
    ck_assert_int_eq(
        resihp__wire_recv(&s->peer[i], line, cap, resihp__now_ms() + 5000), 0);
  while (!strcmp(line, "HB"));
}

/* The next line starting with prefix (others skipped). */
static void expect(side_t *s, int i, const char *prefix, char *line,
                   size_t cap) {
  for (int n = 0; n < 64; n++) {
    next(s, i, line, cap);
    if (!strncmp(line, prefix, strlen(prefix)))
      return;
  }
  ck_abort_msg("replica %d never got '%s'", i, prefix);
}

/* Nothing waits for replica i (but heartbeats). */
static void quiet(side_t *s, int i) {
  char line[256];
  int rc;
  while ((rc = resihp__wire_recv(&s->peer[i], line, sizeof(line),
                                 resihp__now_ms())) == 0)
    ck_assert_msg(!strcmp(line, "HB"), "replica %d got '%s'", i, line);
}

static void hello(side_t *s, int i) {
  feed(s, i,
       "HELLO replica=%d ep=h%d:1 sep=h%d:2 mbs=6 steps=8 jobid=7 "
       "stepid=%d",
       i, i, i, i);
}

/* Every replica joins; GO to each in go[] (may be NULL). */
static void join(side_t *s, char go[N][256]) {
  char line[256];
  for (int i = 0; i < N; i++) {
    hello(s, i);
    expect(s, i, "WELCOME ", line, sizeof(line));
    ck_assert_int_eq(resihp__wire_get(line, "cred", creds[i], sizeof(creds[i])),
                     0);
    ck_assert_uint_eq(strlen(creds[i]), 32);
  }
  for (int i = 0; i < N; i++)
    feed(s, i, "BEGIN step=-1");
  for (int i = 0; i < N; i++)
    expect(s, i, "GO ", go ? go[i] : line, 256);
}

static void ready_all(side_t *s, char start[N][256]) {
  char line[256];
  for (int i = 0; i < N; i++)
    feed(s, i, "READY epoch=%u", resihp__coord_epoch(s->c));
  for (int i = 0; i < N; i++)
    expect(s, i, "START ", start ? start[i] : line, 256);
}

/* A coordinator with options co, every replica joined and in its first
 * step (the STARTs in start[], which may be NULL). */
static void running(side_t *s, resihp__coord_opts_t *co, char start[N][256]) {
  ck_assert_int_eq(resihp__coord_create(co, &s->c), 0);
  connect_all(s);
  join(s, NULL);
  ready_all(s, start);
}

/* The coordinator's summary (free it). */
static char *summary_of(resihp__coord_t *c) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  resihp__coord_summary(c, f, NULL);
  fclose(f);
  return text;
}

/* The second coordinator from the last mirror: its own snapshot must be
 * the same text; the replicas in `back` come back (HELLO again=1). */
static void failover(side_t *s1, side_t *s2, resihp__coord_opts_t *co,
                     long have, const int *back, int nback) {
  ck_assert_ptr_nonnull(snap);
  char *mine = strdup(snap);
  size_t len = snap_len;
  long step = resihp__coord_step(s1->c);
  uint32_t ep = resihp__coord_epoch(s1->c);
  ck_assert_int_eq(resihp__coord_restore(co, mine, len, have, &s2->c), 0);
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  ck_assert_int_eq(resihp__coord_snapshot(s2->c, &b), 0);
  ck_assert_str_eq(b.s, mine);
  resihp__wire_buf_free(&b);
  free(mine);
  ck_assert_int_eq(resihp__coord_step(s2->c), step);
  ck_assert_int_eq(resihp__coord_epoch(s2->c), ep);
  connect_all(s2);
  for (int j = 0; j < nback; j++) {
    int i = back[j];
    ck_assert(!resihp__coord_connected(s2->c, i));
    feed(s2, i,
         "HELLO replica=%d ep=h%d:1 sep=h%d:2 mbs=6 steps=8 jobid=7 "
         "stepid=%d again=1 epoch=%u step=%ld cred=%s",
         i, i, i, i, ep, step, creds[i]);
    char line[256], want[96];
    next(s2, i, line, sizeof(line));
    snprintf(want, sizeof(want),
             "WELCOME replica=%d step=%ld hb=200 again=1 term=0",
             i, step);
    ck_assert_str_eq(line, want);
    ck_assert(resihp__coord_connected(s2->c, i));
  }
}

static const int ALL[N] = {0, 1, 2};

/* Set-up: the GO of the epoch being set up, again, to a replica that says
 * BEGIN again; then the step starts as it would have. */
START_TEST(test_setup) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  ck_assert_int_eq(resihp__coord_create(&co, &a.c), 0);
  connect_all(&a);
  char go[N][256], line[256];
  /* one mirror for the whole join: before the GOs (a WELCOME needs none:
   * a replica a successor does not know joins again) */
  int m0 = nmirrors;
  join(&a, go);
  ck_assert_int_eq(nmirrors, m0 + 1);
  failover(&a, &b, &co, -1, ALL, N);
  m0 = nmirrors;
  for (int i = 0; i < N; i++) {
    feed(&b, i, "BEGIN step=-1");
    next(&b, i, line, sizeof(line));
    ck_assert_str_eq(line, go[i]);
  }
  ck_assert_int_eq(nmirrors, m0); /* answers said again: no new state */
  char s1[N][256], s2[N][256];
  ready_all(&a, s1);
  ready_all(&b, s2);
  for (int i = 0; i < N; i++)
    ck_assert_str_eq(s1[i], s2[i]);
  close_side(&a);
  close_side(&b);
}
END_TEST

/* A step that runs: READY again gets the same START; the barrier after
 * it (BEGIN from some, the others after the failover) gets the same GO
 * from both coordinators. */
START_TEST(test_run_and_barrier) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  char start[N][256], line[256];
  running(&a, &co, start);
  failover(&a, &b, &co, -1, ALL, N);
  for (int i = 0; i < N; i++) {
    feed(&b, i, "READY epoch=%u", resihp__coord_epoch(b.c));
    next(&b, i, line, sizeof(line));
    ck_assert_str_eq(line, start[i]);
  }
  close_side(&b);
  /* barrier: replica 0 began step 1, then the coordinator went */
  feed(&a, 0, "BEGIN step=1");
  quiet(&a, 0);
  failover(&a, &b, &co, -1, ALL, N);
  feed(&b, 0, "BEGIN step=1"); /* again: still waits for the others */
  quiet(&b, 0);
  for (int i = 1; i < N; i++) {
    feed(&a, i, "BEGIN step=1");
    feed(&b, i, "BEGIN step=1");
  }
  for (int i = 0; i < N; i++) {
    char g1[256], g2[256];
    expect(&a, i, "GO ", g1, sizeof(g1));
    expect(&b, i, "GO ", g2, sizeof(g2));
    ck_assert_str_eq(g1, g2);
    ck_assert_msg(!strncmp(g1, "GO step=1 ", 10), "%s", g1);
  }
  close_side(&a);
  close_side(&b);
}
END_TEST

/* Free run: a PROG commits steps and mirrors once (a heartbeat or a PROG
 * that commits nothing mirrors nothing); the ledger lines the file lacks
 * are written by the restored coordinator, once; READY again gets the
 * START run=1 again, BEGIN again its GO new=0 and START. */
START_TEST(test_free_run_and_ledger) {
  side_t a, b;
  FILE *l1 = tmpfile(), *l2 = tmpfile();
  ck_assert_ptr_nonnull(l1);
  ck_assert_ptr_nonnull(l2);
  resihp__coord_opts_t co = opts(0, 0, l1, 600000);
  char start[N][256], line[256];
  running(&a, &co, start);
  ck_assert_ptr_nonnull(strstr(start[0], " run=1"));
  int m0 = nmirrors;
  feed(&a, 0, "HB");
  feed(&a, 0, "PROG step=3");
  ck_assert_int_eq(nmirrors, m0 + 1);
  ck_assert_int_eq(resihp__coord_step(a.c), 3);
  feed(&a, 0, "PROG step=3");
  feed(&a, 1, "HB");
  ck_assert_int_eq(nmirrors, m0 + 1);
  /* the file as the first coordinator wrote it: 3 lines; the second one's
   * lacks the last 2 (as if the first died between mirror and write) */
  char want[3][64];
  rewind(l1);
  for (int s = 0; s < 3; s++)
    ck_assert_ptr_nonnull(fgets(want[s], sizeof(want[s]), l1));
  ck_assert_ptr_null(fgets(line, sizeof(line), l1));
  fputs(want[0], l2);
  resihp__coord_opts_t co2 = opts(0, 0, l2, 600000);
  failover(&a, &b, &co2, 1, ALL, N);
  rewind(l2);
  for (int s = 0; s < 3; s++) {
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), l2));
    ck_assert_str_eq(line, want[s]);
  }
  ck_assert_ptr_null(fgets(line, sizeof(line), l2));
  /* none twice: a later commit writes step 3 only */
  feed(&b, 0, "PROG step=4");
  rewind(l2);
  int lines = 0;
  while (fgets(line, sizeof(line), l2))
    lines++;
  ck_assert_int_eq(lines, 4);
  ck_assert_msg(!strncmp(line, "3 ", 2), "%s", line);
  /* a member that never got its START */
  feed(&b, 1, "READY epoch=%u", resihp__coord_epoch(b.c));
  next(&b, 1, line, sizeof(line));
  ck_assert_str_eq(line, start[1]);
  feed(&b, 2, "BEGIN step=0");
  next(&b, 2, line, sizeof(line));
  ck_assert_msg(!strncmp(line, "GO step=0 epoch=", 16) &&
                    strstr(line, " new=0"),
                "%s", line);
  next(&b, 2, line, sizeof(line));
  ck_assert_str_eq(line, start[2]);
  close_side(&a);
  close_side(&b);
  fclose(l1);
  fclose(l2);
}
END_TEST

/* A free run held (here by a stop, as by a joiner) when the coordinator
 * went: each member that comes back is told HOLD again without a new
 * mirror (a mirror is the whole state, O(N): N members coming back made
 * N of them, 1,032 x 162 KB at 1,024 replicas). */
START_TEST(test_held_run_reconnects) {
  side_t a, b;
  resihp__coord_opts_t co = opts(0, 0, NULL, 600000);
  char start[N][256], line[256];
  running(&a, &co, start);
  ck_assert_ptr_nonnull(strstr(start[0], " run=1"));
  resihp__coord_stop(a.c);
  for (int i = 0; i < N; i++)
    expect(&a, i, "HOLD", line, sizeof(line));
  int m0 = nmirrors;
  failover(&a, &b, &co, -1, ALL, N);
  for (int i = 0; i < N; i++)
    expect(&b, i, "HOLD", line, sizeof(line));
  ck_assert_int_eq(nmirrors, m0);
  /* the run ends as it would have: the step after it is the last */
  for (int i = 0; i < N; i++)
    feed(&b, i, "BEGIN step=1");
  for (int i = 0; i < N; i++)
    expect(&b, i, "DONE", line, sizeof(line));
  close_side(&a);
  close_side(&b);
}
END_TEST

/* A decided RECOVER round: the same REASSIGN again. */
START_TEST(test_round) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  char line[256], re[2][256];
  running(&a, &co, NULL);
  feed(&a, 0, "RECOVER step=0 cepoch=1 view=0:1");
  feed(&a, 1, "RECOVER step=0 cepoch=1 view=0:1");
  for (int i = 0; i < 2; i++)
    expect(&a, i, "REASSIGN ", re[i], sizeof(re[i]));
  ck_assert_int_eq(resihp__coord_members(a.c), 2);
  static const int back[2] = {0, 1};
  failover(&a, &b, &co, -1, back, 2);
  for (int i = 0; i < 2; i++) {
    feed(&b, i, "RECOVER step=0 cepoch=1 view=0:1");
    next(&b, i, line, sizeof(line));
    ck_assert_str_eq(line, re[i]);
  }
  close_side(&a);
  close_side(&b);
}
END_TEST

/* A restored coordinator told that a replica is lost (its node DOWN)
 * fails it at once, not when the reconnect wait ends (here 600 s); the
 * others came back as usual; a second word about it changes nothing. */
START_TEST(test_fail_lost) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  running(&a, &co, NULL);
  static const int back[2] = {0, 1};
  failover(&a, &b, &co, -1, back, 2);
  ck_assert_int_eq(resihp__coord_members(b.c), N);
  resihp__coord_fail_lost(b.c, 2, "its node h2 is DOWN");
  ck_assert_int_eq(resihp__coord_members(b.c), N - 1);
  resihp__coord_fail_lost(b.c, 2, "its node h2 is DOWN");
  resihp__coord_fail_lost(b.c, N, "out of range");
  ck_assert_int_eq(resihp__coord_members(b.c), N - 1);
  char *text = summary_of(b.c);
  ck_assert_msg(strstr(text, "failures:               1 ") &&
                    strstr(text, "failure 1: replica 2, ") &&
                    strstr(text, "(its node h2 is DOWN)") &&
                    !strstr(text, "failure 2:"),
                "%s", text);
  free(text);
  close_side(&a);
  close_side(&b);
}
END_TEST

/* The term (control/vouch.h). A coordinator that lost its lease
 * (may_decide says no) fails nobody: a lost link is closed, the replica
 * stays a member. A standby's takeover is a newer term (every WELCOME
 * says it, the record keeps it); a replica that obeys it, saying so in its
 * HELLO, is not taken in by the old coordinator, which is superseded from
 * then on and fails nobody, whatever may_decide says. */
static int lease_now = 1;
static int lease(void *ud) {
  (void)ud;
  return lease_now;
}

START_TEST(test_term_fence) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  co.may_decide = lease;
  running(&a, &co, NULL);
  lease_now = 0;
  resihp__coord_fail_lost(a.c, 2, "its link closed");
  ck_assert_int_eq(resihp__coord_members(a.c), N); /* not failed */
  ck_assert(!resihp__coord_connected(a.c, 2));     /* its link closed */
  lease_now = 1;
  /* the standby's takeover: term 1, in its WELCOMEs and its record */
  static const int back[2] = {0, 1};
  failover(&a, &b, &co, -1, back, 2);
  resihp__coord_set_term(b.c, resihp__coord_term(b.c) + 1);
  char line[256];
  feed(&b, 2,
       "HELLO replica=2 ep=h2:1 sep=h2:2 mbs=6 steps=8 jobid=7 stepid=2 "
       "again=1 epoch=%u step=%ld cred=%s term=0",
       resihp__coord_epoch(b.c), resihp__coord_step(b.c), creds[2]);
  expect(&b, 2, "WELCOME ", line, sizeof(line));
  ck_assert_msg(strstr(line, " term=1"), "%s", line);
  resihp__wire_buf_t rb;
  resihp__wire_buf_init(&rb);
  ck_assert_int_eq(resihp__coord_snapshot(b.c, &rb), 0);
  ck_assert_msg(strstr(rb.s, "\nt 1\n"), "%s", rb.s);
  resihp__wire_buf_free(&rb);
  /* the old coordinator, woken: a replica of term 1 is not taken in */
  connect_one(&a, 0);
  ck_assert(!resihp__coord_superseded(a.c));
  feed(&a, 0,
       "HELLO replica=0 ep=h0:1 sep=h0:2 mbs=6 steps=8 jobid=7 stepid=0 "
       "again=1 epoch=%u step=%ld cred=%s term=1",
       resihp__coord_epoch(a.c), resihp__coord_step(a.c), creds[0]);
  ck_assert(resihp__coord_superseded(a.c));
  /* its new link was closed, not answered */
  ck_assert_int_ne(resihp__wire_recv(&a.peer[0], line, sizeof(line),
                                     resihp__now_ms() + 5000),
                   0);
  resihp__coord_fail_lost(a.c, 1, "its link closed");
  ck_assert_int_eq(resihp__coord_members(a.c), N); /* nobody failed */
  close_side(&a);
  close_side(&b);
}
END_TEST

/* A standby's takeover: replica 2 went with the primary's node, which died
 * between 3 s and 1 s before the takeover (the standby's bounds), while
 * the survivors had started step 10 beyond the last record (a free run).
 * The summary places the failure between the record's step and theirs,
 * says that its time is known only within the bounds, and gives the
 * survivors' stall as bounds to the first step after the takeover whose
 * upper one is never less than the truth (here: at least 3 s); before,
 * it read the record's step, "0 ms before detection" and the failed
 * step's duration. */
START_TEST(test_takeover_summary) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  running(&a, &co, NULL);
  long step = resihp__coord_step(a.c);
  uint32_t ep = resihp__coord_epoch(a.c);
  ck_assert_int_eq(resihp__coord_restore(&co, snap, snap_len, -1, &b.c), 0);
  connect_all(&b);
  for (int i = 0; i < 2; i++) {
    feed(&b, i,
         "HELLO replica=%d ep=h%d:1 sep=h%d:2 mbs=6 steps=8 jobid=7 "
         "stepid=%d again=1 epoch=%u step=%ld cred=%s",
         i, i, i, i, ep, step + 10, creds[i]);
    char line[256];
    expect(&b, i, "WELCOME ", line, sizeof(line));
  }
  int64_t now = resihp__now_ms();
  resihp__coord_set_loss(b.c, now - 3000, now - 1000);
  resihp__coord_fail_lost(b.c, 2, "its node h2 is DOWN");
  /* the survivors go on: the next step through the new coordinator */
  char line[256];
  for (int i = 0; i < 2; i++)
    feed(&b, i, "RECOVER step=%ld cepoch=1 view=0:1", step);
  for (int i = 0; i < 2; i++)
    expect(&b, i, "REASSIGN ", line, sizeof(line));
  for (int i = 0; i < 2; i++)
    feed(&b, i, "BEGIN step=%ld", step + 1);
  for (int i = 0; i < 2; i++)
    expect(&b, i, "GO ", line, sizeof(line));
  for (int i = 0; i < 2; i++)
    feed(&b, i, "READY epoch=%u", resihp__coord_epoch(b.c));
  for (int i = 0; i < 2; i++)
    expect(&b, i, "START ", line, sizeof(line));
  int64_t resumed = resihp__now_ms();
  char *text = summary_of(b.c);
  char want[128];
  snprintf(want, sizeof(want), "at step %ld-%ld (not known exactly", step,
           step + 10);
  ck_assert_msg(strstr(text, want), "%s", text);
  ck_assert_msg(strstr(text, "went with the primary between "), "%s",
                text);
  const char *st = strstr(text, "survivors' stall between ");
  double lo = -1, hi = -1;
  ck_assert_msg(st && sscanf(st, "survivors' stall between %lf and %lf", &lo,
                             &hi) == 2,
                "%s", text);
  /* the truth lies within; the upper bound is never below it */
  ck_assert_msg(hi * 1000 >= (double)(resumed - now) + 3000 - 100 &&
                    lo <= hi && lo * 1000 >= 1000 - 100,
                "%.1f..%.1f s\n%s", lo, hi, text);
  free(text);
  close_side(&a);
  close_side(&b);
}
END_TEST

/* A failed replica's process that comes back (HELLO again=1, as it does
 * when it takes its closed link for a coordinator failover) is refused as
 * retired, by the coordinator that failed it and by one restored from its
 * mirror: it never takes the replica's place again. A new process of the
 * replica (another Slurm step) joins. */
START_TEST(test_retired_refused) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  char line[256];
  running(&a, &co, NULL);
  uint32_t ep = resihp__coord_epoch(a.c);
  resihp__coord_fail_lost(a.c, 2, "its node h2 is DOWN");
  resihp__coord_mirror(a.c); /* (as the launcher does after each event) */
  for (int round = 0; round < 2; round++) {
    side_t *s = round ? &b : &a;
    if (round) {
      static const int back[2] = {0, 1};
      failover(&a, &b, &co, -1, back, 2);
    } else {
      resihp__wire_free(&a.peer[2]);
      connect_one(&a, 2);
    }
    feed(s, 2,
         "HELLO replica=2 ep=h2:1 sep=h2:2 mbs=6 steps=8 jobid=7 stepid=2 "
         "again=1 epoch=%u step=1",
         ep);
    next(s, 2, line, sizeof(line));
    ck_assert_str_eq(line, "NO reason=retired");
    ck_assert(!resihp__coord_connected(s->c, 2));
    ck_assert_int_eq(resihp__coord_members(s->c), N - 1);
  }
  resihp__wire_free(&b.peer[2]);
  connect_one(&b, 2);
  feed(&b, 2,
       "HELLO replica=2 ep=h2:5 sep=h2:6 mbs=6 steps=8 jobid=7 stepid=9");
  expect(&b, 2, "WELCOME replica=2 ", line, sizeof(line));
  ck_assert(resihp__coord_connected(b.c, 2));
  close_side(&a);
  close_side(&b);
}
END_TEST

/* A standby restored from the record snap: its own record is the same
 * text. */
static void restore_same(resihp__coord_opts_t *co, resihp__coord_t **out) {
  char *mine = strdup(snap);
  ck_assert_int_eq(resihp__coord_restore(co, mine, snap_len, -1, out), 0);
  resihp__wire_buf_t w;
  resihp__wire_buf_init(&w);
  ck_assert_int_eq(resihp__coord_snapshot(*out, &w), 0);
  ck_assert_str_eq(w.s, mine);
  resihp__wire_buf_free(&w);
  free(mine);
}

/* The partitions of replicas 0..2 in the layer tests: 10 layers over 2
 * ranks, replica 1's cut elsewhere. */
static const char *const LAY[N] = {"10:4", "10:6", "10:4"};

/* The state shapes of replicas 0..2 (HELLO shape=): those of a
 * partition the same, replica 1's (another partition) another. */
static const char *const SHAPE[N] = {"00000000000000aa", "00000000000000bb",
                                     "00000000000000aa"};

/* A coordinator a of replicas of 2 ranks, each of partition LAY[i] and
 * state shape shape[i] (NULL: none, shape=-), their first BEGIN ending
 * with extra: joined (no lay= in a first WELCOME), their GO in go[],
 * every one in its first step. join_layers: with SHAPE, nothing more. */
static void join_shaped(side_t *a, resihp__coord_opts_t *co,
                        const char *const *shape, const char *extra,
                        char go[N][512]) {
  char line[512];
  ck_assert_int_eq(resihp__coord_create(co, &a->c), 0);
  connect_all(a);
  for (int i = 0; i < N; i++) {
    feed(a, i,
         "HELLO replica=%d ep=h%d:1/h%d:3 sep=h%d:2/h%d:4 mbs=6 steps=8 "
         "lsize=2 jobid=7 stepid=%d shape=%s",
         i, i, i, i, i, i, shape ? shape[i] : "-");
    expect(a, i, "WELCOME ", line, sizeof(line));
    ck_assert_ptr_null(strstr(line, "lay="));
    resihp__wire_get(line, "cred", creds[i], sizeof(creds[i]));
  }
  for (int i = 0; i < N; i++)
    feed(a, i, "BEGIN step=-1 lay=%s%s", LAY[i], extra);
  for (int i = 0; i < N; i++)
    expect(a, i, "GO ", go[i], 512);
  ready_all(a, NULL);
}

static void join_layers(side_t *a, resihp__coord_opts_t *co, char go[N][512]) {
  join_shaped(a, co, SHAPE, "", go);
}

/* A new process of replica 2 (Slurm step stepid, state shape shape, its
 * first address after the step's) says HELLO on a new connection to s:
 * its WELCOME in line. */
static void rejoin_2(side_t *s, int stepid, const char *shape, char *line,
                     size_t cap) {
  resihp__wire_free(&s->peer[2]);
  connect_one(s, 2);
  feed(s, 2,
       "HELLO replica=2 ep=h2:%d/h2:7 sep=h2:6/h2:8 mbs=6 steps=8 lsize=2 "
       "jobid=7 stepid=%d shape=%s",
       100 + stepid, stepid, shape);
  expect(s, 2, "WELCOME replica=2 ", line, cap);
}

/* The replicas' partitions of the layers (coord_layers.c): every BEGIN
 * says its replica's (lay=), GO of a new epoch lists the distinct ones
 * (the one most members hold first, the others with their members), the
 * snapshot keeps them (a standby's GO is the same) and WELCOME tells a
 * replica's next process; a malformed one fails its replica, another
 * number of layers refuses its program. */
START_TEST(test_layers) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  char line[512], go[N][512];
  join_layers(&a, &co, go);
  for (int i = 0; i < N; i++)
    ck_assert_msg(strstr(go[i], " lay=10 lparts=4,6@1"), "%s", go[i]);
  /* the standby's state holds them: its GO after the barrier too */
  resihp__coord_mirror(a.c);
  ck_assert_ptr_nonnull(
      strstr(snap, "\ny 1 lay=10:6 shape=00000000000000bb\n"));
  restore_same(&co, &b.c);
  connect_all(&b);
  feed(&b, 1,
       "HELLO replica=1 ep=h1:1/h1:3 sep=h1:2/h1:4 mbs=6 steps=8 lsize=2 "
       "jobid=7 stepid=1 again=1 epoch=%u step=0 cred=%s",
       resihp__coord_epoch(b.c), creds[1]);
  expect(&b, 1, "WELCOME ", line, sizeof(line));
  ck_assert_msg(strstr(line, " lay=10:6"), "%s", line);
  /* a malformed partition fails its replica (the connection goes) */
  feed(&a, 2, "BEGIN step=1 lay=10:4:3");
  expect(&a, 2, "NO reason=bad-layers", line, sizeof(line));
  ck_assert(!resihp__coord_connected(a.c, 2));
  /* another model: refused for its program */
  feed(&a, 1, "BEGIN step=1 lay=11:6");
  expect(&a, 1, "NO reason=mismatch", line, sizeof(line));
  char why[32];
  ck_assert_int_eq(resihp__coord_refused(a.c, 1, why, sizeof(why)), 1);
  ck_assert_str_eq(why, "mismatch");
  /* replica 2's next process learns the partition its state has */
  resihp__wire_free(&a.peer[2]);
  connect_one(&a, 2);
  feed(&a, 2,
       "HELLO replica=2 ep=h2:5/h2:7 sep=h2:6/h2:8 mbs=6 steps=8 lsize=2 "
       "jobid=7 stepid=9");
  expect(&a, 2, "WELCOME replica=2 ", line, sizeof(line));
  ck_assert_msg(strstr(line, " lay=10:4"), "%s", line);
  close_side(&a);
  close_side(&b);
}
END_TEST

/* Repartition (coord_repart.c): replicas that can move their layers say
 * lmove=1 with every BEGIN; replica 0's are moved (4 | 6 -> 6 | 4) at the
 * next boundary: its GO is a new epoch of the same members that says
 * moved=0 and lists replica 0 with the partition it now shares with
 * replica 1; the snapshot keeps the partition it declared (home=), which
 * a standby restores as it was (the same record again), and the summary
 * counts the move; the boundary after moves nothing. */
START_TEST(test_layers_moved) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  char line[512], go[N][512];
  join_layers(&a, &co, go);
  int cnt[2] = {6, 4};
  resihp__coord_repart_force(a.c, 0, cnt);
  uint32_t ep = resihp__coord_epoch(a.c);
  for (int i = 0; i < N; i++)
    feed(&a, i, "BEGIN step=1 lay=%s lmove=1", LAY[i]);
  for (int i = 0; i < N; i++) {
    expect(&a, i, "GO ", line, sizeof(line));
    ck_assert_msg(strstr(line, " new=1") && strstr(line, " moved=0") &&
                      strstr(line, " lparts=6,4@2"),
                  "%s", line);
  }
  ck_assert_uint_eq(resihp__coord_epoch(a.c), ep + 1);
  resihp__coord_mirror(a.c);
  ck_assert_msg(
      strstr(snap, "\ny 0 lay=10:6 shape=00000000000000bb home=4\n"), "%s",
      snap);
  restore_same(&co, &b.c);
  char *text = summary_of(a.c);
  ck_assert_msg(strstr(text, "1 repartition(s)") &&
                    strstr(text, "replica 0 layers:       moved 1 time(s)"),
                "%s", text);
  free(text);
  text = summary_of(b.c); /* (the standby counts it too) */
  ck_assert_msg(strstr(text, "1 repartition(s)"), "%s", text);
  free(text);
  /* the next boundary moves nothing: no new epoch */
  ready_all(&a, NULL);
  for (int i = 0; i < N; i++)
    feed(&a, i, "BEGIN step=2 lay=%s lmove=1", i == 0 ? "10:6" : LAY[i]);
  for (int i = 0; i < N; i++) {
    expect(&a, i, "GO ", line, sizeof(line));
    ck_assert_msg(strstr(line, " new=0") && !strstr(line, "moved="), "%s",
                  line);
  }
  close_side(&a);
  ck_assert_ptr_null(resihp__coord_check(b.c));
  resihp__coord_destroy(b.c);
}
END_TEST

/* A replica that lost a rank with no spare left shrinks (issue 32, item
 * 3; coord_shrink.c): refused while its program cannot move layers or
 * catch them up by layer (BEGIN lmove=1 lst=1), or for all its ranks;
 * then replica 0, losing its rank 0, holds all 10 layers on its one
 * survivor from the next boundary (its BEGIN there still says its two
 * ranks' partition, taken): a new epoch whose GO says shrunk=0:0 with
 * its one-rank partition among the others (an empty cut list) and its
 * addresses survivor first; a second shrink waits for the boundary
 * (EBUSY). A standby restored while the shrink waits, or after its GO,
 * keeps it (the snapshot the same text; shrink=next:, shrunk= and
 * shrink=now:); its partition line of one rank restores k from its cut
 * points, the summary counts it, its next BEGIN of one rank takes no new
 * epoch, and one of two ranks now fails it. */
START_TEST(test_layers_shrunk) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  char line[1024], go[N][512];
  join_layers(&a, &co, go);
  ck_assert_int_eq(resihp__coord_shrink(a.c, 0, 1), RESIHP_ESTATE);
  for (int i = 0; i < N; i++)
    feed(&a, i, "BEGIN step=1 lay=%s lmove=1 lst=1", LAY[i]);
  for (int i = 0; i < N; i++) {
    expect(&a, i, "GO ", line, sizeof(line));
    ck_assert_msg(strstr(line, " new=0") && !strstr(line, "shrunk="), "%s",
                  line);
  }
  ready_all(&a, NULL);
  uint32_t ep = resihp__coord_epoch(a.c);
  ck_assert_int_eq(resihp__coord_shrink(a.c, 0, 3), RESIHP_EINVAL);
  ck_assert_int_eq(resihp__coord_shrink(a.c, 0, 1ULL << 2), RESIHP_EINVAL);
  ck_assert_int_eq(resihp__coord_shrink(a.c, 0, 1), 0);
  ck_assert_int_eq(resihp__coord_shrink(a.c, 1, 1), RESIHP_EBUSY);
  /* a standby taking over now keeps the shrink for the next GO */
  resihp__coord_mirror(a.c);
  ck_assert_msg(strstr(snap, "\ny 0 lay=10:4 lst=1 shape=00000000000000aa "
                             "shrink=next:1\n"),
                "%s", snap);
  restore_same(&co, &b.c);
  ck_assert_int_eq(resihp__coord_shrink(b.c, 2, 1), RESIHP_EBUSY);
  resihp__coord_destroy(b.c);
  /* its ranks say their partition before until its GO tells them */
  for (int i = 0; i < N; i++)
    feed(&a, i, "BEGIN step=2 lay=%s lmove=1 lst=1", LAY[i]);
  for (int i = 0; i < N; i++) {
    expect(&a, i, "GO ", line, sizeof(line));
    /* its addresses changed: the whole list to it, to the others the
     * change (a new process's way) */
    ck_assert_msg(strstr(line, " new=1") && strstr(line, " shrunk=0:0") &&
                      strstr(line, i ? " gone=0 add=0@h0:3/h0:1 "
                                     : " members=0@h0:3/h0:1,1@") &&
                      strstr(line, " lparts=4,6@1,@0"),
                  "%s", line);
  }
  ck_assert_uint_eq(resihp__coord_epoch(a.c), ep + 1);
  resihp__coord_mirror(a.c);
  ck_assert_msg(
      strstr(snap, "\ny 0 lay=10 lst=1 shrunk=3:1:1.25 shrink=now:1\n"), "%s",
      snap);
  restore_same(&co, &b.c);
  /* its survivor, now its one rank, comes back to the standby with its
   * one address (HELLO lsize=1): taken (its list keeps the dead rank's
   * address after its own, as the primary's); one rank said by a replica
   * that did not shrink is refused */
  connect_all(&b);
  feed(&b, 0,
       "HELLO replica=0 ep=h0:3 sep=h0:4 mbs=6 steps=8 lsize=1 jobid=7 "
       "stepid=0 again=1 epoch=%u step=%ld cred=%s",
       resihp__coord_epoch(b.c), resihp__coord_step(b.c), creds[0]);
  expect(&b, 0, "WELCOME ", line, sizeof(line));
  ck_assert_msg(strstr(line, " again=1") && strstr(line, " lay=10"), "%s",
                line);
  ck_assert(resihp__coord_connected(b.c, 0));
  feed(&b, 1,
       "HELLO replica=1 ep=h1:3 sep=h1:4 mbs=6 steps=8 lsize=1 jobid=7 "
       "stepid=1 again=1 epoch=%u step=%ld cred=%s",
       resihp__coord_epoch(b.c), resihp__coord_step(b.c), creds[1]);
  expect(&b, 1, "NO reason=mismatch", line, sizeof(line));
  char *text = summary_of(a.c);
  ck_assert_msg(strstr(text, "1 shrink(s)"), "%s", text);
  free(text);
  text = summary_of(b.c); /* (the standby's: the replica's line, the
                            * count) */
  ck_assert_msg(strstr(text, "replica 0 ranks:        1 of 2 since step "
                                 "2 (no spare left), cut at - (one rank "
                                 "holds all), predicted step x1.25") &&
                    strstr(text, "1 shrink(s)"),
                "%s", text);
  free(text);
  /* the next boundary: nothing new, and no shrunk= any more */
  ready_all(&a, NULL);
  for (int i = 0; i < N; i++)
    feed(&a, i, "BEGIN step=3 lay=%s lmove=1 lst=1", i ? LAY[i] : "10");
  for (int i = 0; i < N; i++) {
    expect(&a, i, "GO ", line, sizeof(line));
    ck_assert_msg(strstr(line, " new=0") && !strstr(line, "shrunk="), "%s",
                  line);
  }
  /* two ranks said by a replica of one: refused, its replica fails */
  ready_all(&a, NULL);
  feed(&a, 0, "BEGIN step=4 lay=10:4 lmove=1 lst=1");
  for (int i = 1; i < N; i++)
    feed(&a, i, "BEGIN step=4 lay=%s lmove=1 lst=1", LAY[i]);
  expect(&a, 1, "GO ", line, sizeof(line));
  ck_assert_msg(strstr(line, " new=1") && strstr(line, " n=2 gone=0 ") &&
                    !strstr(line, "shrunk="),
                "%s", line);
  close_side(&a);
  close_side(&b);
}
END_TEST

/* The rank a leader said it lost (FAULT kind=lost) is in the state record
 * until its replica's next process joins: a standby that takes over before
 * the replica's failure is seen tells the launcher the same rank
 * (resihp__coord_lost_ranks), which then shrinks at once instead of
 * waiting for Slurm's verdict on a node that lives. A rank a leader
 * cannot have lost (itself, or past its ranks) is no record. */
START_TEST(test_lost_rank_kept) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  char line[1024], go[N][512];
  join_layers(&a, &co, go);
  for (int i = 0; i < N; i++)
    feed(&a, i, "BEGIN step=1 lay=%s lmove=1 lst=1", LAY[i]);
  for (int i = 0; i < N; i++)
    expect(&a, i, "GO ", line, sizeof(line));
  ready_all(&a, NULL);
  feed(&a, 1, "FAULT kind=lost rank=1");
  ck_assert_uint_eq(resihp__coord_lost_ranks(a.c, 1), 2);
  resihp__coord_mirror(a.c);
  ck_assert_msg(strstr(snap, "\ny 1 lay=10:6 lst=1 shape=00000000000000bb "
                             "lostnow=2\n"),
                "%s", snap);
  restore_same(&co, &b.c);
  ck_assert_uint_eq(resihp__coord_lost_ranks(b.c, 1), 2);
  ck_assert_uint_eq(resihp__coord_lost_ranks(b.c, 0), 0);
  resihp__coord_destroy(b.c);
  const char *bad[] = {" lostnow=1", " lostnow=4", " lostnow=0", " lostnow=x",
                       " lostnow=2 x"};
  char *at = strstr(snap, " lostnow=2\n");
  ck_assert_ptr_nonnull(at);
  size_t cap = snap_len + 64;
  char *text = malloc(cap);
  ck_assert_ptr_nonnull(text);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    snprintf(text, cap, "%.*s%s%s", (int)(at - snap), snap, bad[i],
             at + strlen(" lostnow=2"));
    ck_assert_msg(resihp__coord_restore(&co, text, strlen(text), -1, &b.c),
                  "'%s' taken", bad[i]);
  }
  free(text);
  close_side(&a);
}
END_TEST

/* A replacement catches up from the members that hold its partition of
 * the layers: replica 2 (4 | 6 layers, as replica 0; replica 1 holds
 * 6 | 4) comes back, and both of its shards are served by replica 0; by
 * the rule for one partition (contributor ji + k) replica 1 would serve
 * its shard 1. */
START_TEST(test_layers_serve) {
  side_t a;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  char line[512], go[N][512];
  join_layers(&a, &co, go);
  resihp__coord_fail_lost(a.c, 2, "its node h2 is DOWN");
  rejoin_2(&a, 9, SHAPE[2], line, sizeof(line));
  feed(&a, 2, "BEGIN step=-1 lay=10:4");
  for (int i = 0; i < 2; i++)
    feed(&a, i, "BEGIN step=1 lay=%s", LAY[i]);
  for (int i = 0; i < N; i++)
    expect(&a, i, "GO ", line, sizeof(line));
  for (int i = 0; i < N; i++)
    feed(&a, i, "READY epoch=%u", resihp__coord_epoch(a.c));
  char serve[64] = "";
  expect(&a, 0, "START ", line, sizeof(line));
  ck_assert_int_eq(resihp__wire_get(line, "serve", serve, sizeof(serve)), 0);
  ck_assert_str_eq(serve, "2.0@h2:6,2.1@h2:8");
  expect(&a, 1, "START ", line, sizeof(line));
  ck_assert_msg(!strstr(line, "serve="), "%s", line);
  expect(&a, 2, "START ", line, sizeof(line));
  ck_assert_msg(strstr(line, "catchup=1"), "%s", line);
  close_side(&a);
}
END_TEST

/* Catch-up by layer (issue 32): replica 1 (6 | 4 layers), whose
 * partition no other replica holds, is replaced. When every process
 * declared its state by layer (BEGIN lst=1) its rank 0 gets layers 0-5
 * from replica 0 (0-3 from its rank 0, 4-5 from its rank 1) and its rank
 * 1 layers 6-9 from replica 2's rank 1, each with its own state from the
 * same rank (:r); the standby's snapshot keeps lst=1. Without lst= (an
 * opaque state) the serve= is the old one: whole shards by the rule for
 * one partition (with the error logged). Before, both got the latter. */
START_TEST(test_layers_serve_by_layer) {
  for (int lst = 1; lst >= 0; lst--) {
    side_t a, b;
    resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
    char line[512], go[N][512];
    const char *ls = lst ? " lst=1" : "";
    join_shaped(&a, &co, NULL, ls, go);
    if (lst) { /* the standby's state says it too */
      resihp__coord_mirror(a.c);
      ck_assert_msg(strstr(snap, "\ny 1 lay=10:6 lst=1"), "%s", snap);
      restore_same(&co, &b.c);
      resihp__coord_destroy(b.c);
    }
    resihp__coord_fail_lost(a.c, 1, "its node h1 is DOWN");
    resihp__wire_free(&a.peer[1]);
    connect_one(&a, 1);
    feed(&a, 1,
         "HELLO replica=1 ep=h1:5/h1:7 sep=h1:6/h1:8 mbs=6 steps=8 lsize=2 "
         "jobid=7 stepid=9 shape=-");
    expect(&a, 1, "WELCOME replica=1 ", line, sizeof(line));
    feed(&a, 1, "BEGIN step=-1 lay=10:6%s", ls);
    feed(&a, 0, "BEGIN step=1 lay=10:4%s", ls);
    feed(&a, 2, "BEGIN step=1 lay=10:4%s", ls);
    for (int i = 0; i < N; i++)
      expect(&a, i, "GO ", line, sizeof(line));
    for (int i = 0; i < N; i++)
      feed(&a, i, "READY epoch=%u", resihp__coord_epoch(a.c));
    char serve[2][128] = {"", ""};
    for (int i = 0; i < N; i += 2) {
      expect(&a, i, "START ", line, sizeof(line));
      resihp__wire_get(line, "serve", serve[i / 2], sizeof(serve[0]));
    }
    if (lst) {
      ck_assert_str_eq(serve[0], "1.0:0-4@h1:6,1.0:4-6@h1:6,1.0:r@h1:6");
      ck_assert_str_eq(serve[1], "1.1:6-10@h1:8,1.1:r@h1:8");
    } else {
      ck_assert_str_eq(serve[0], "1.0@h1:6");
      ck_assert_str_eq(serve[1], "1.1@h1:8");
    }
    expect(&a, 1, "START ", line, sizeof(line));
    ck_assert_msg(strstr(line, "catchup=1"), "%s", line);
    close_side(&a);
  }
}
END_TEST

/* The shrink as a relaunch in place (coord_shrink.c 11): replica 0 (4 |
 * 6 layers) fails having lost its rank 1 and no spare is left; the
 * launcher shrinks it in place by the rank its leader said it lost
 * (refused for a member, for no survivor or
 * a rank it does not have): all 10 layers on its survivor, whose new
 * process of one rank is taken (HELLO lsize=1, WELCOME lay=10) and
 * catches every layer up by layer from one member (replica 1: 0-6 from
 * its rank 0, 6-10 from its rank 1, its own state from rank 0) and
 * nothing from another: the catch-up has as many ranks as the replica
 * now, not the job's K (before, replica 2 served a rank 1 the replica no
 * longer has, out of its partition's bounds). A standby restores it (the
 * same text), the summary counts the shrink. */
START_TEST(test_layers_shrunk_in_place) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  char line[512], go[N][512];
  join_shaped(&a, &co, NULL, " lmove=1 lst=1", go);
  ck_assert_int_eq(resihp__coord_shrink_in_place(a.c, 0, 2), RESIHP_ESTATE);
  /* (the launcher asks first, to wait for Slurm's verdict on its nodes) */
  ck_assert_int_eq(resihp__coord_shrink_able(a.c, 0), RESIHP_ESTATE);
  ck_assert_int_eq(resihp__coord_shrink_able(a.c, N), RESIHP_EINVAL);
  /* its leader says which rank it lost (FAULT kind=lost): rank 1 of its
   * 2, kept for the launcher; its own rank 0 and a rank it does not have
   * are refused (and kept nowhere) */
  ck_assert_int_eq(resihp__coord_lost_ranks(a.c, 0), 0);
  feed(&a, 0, "FAULT kind=lost rank=0");
  expect(&a, 0, "NO reason=bad-fault", line, sizeof(line));
  feed(&a, 0, "FAULT kind=lost rank=2");
  expect(&a, 0, "NO reason=bad-fault", line, sizeof(line));
  ck_assert_int_eq(resihp__coord_lost_ranks(a.c, 0), 0);
  feed(&a, 0, "FAULT kind=lost rank=1");
  ck_assert_int_eq(resihp__coord_lost_ranks(a.c, 0), 2);
  ck_assert_int_eq(resihp__coord_lost_ranks(a.c, 1), 0);
  ck_assert_int_eq(resihp__coord_lost_ranks(a.c, N), 0);
  resihp__coord_fail_lost(a.c, 0, "its rank 1's node h0 is DOWN");
  ck_assert_int_eq(resihp__coord_shrink_able(a.c, 0), 0);
  ck_assert_int_eq(resihp__coord_lost_ranks(a.c, 0), 2);
  ck_assert_int_eq(resihp__coord_shrink_in_place(a.c, 0, 3), RESIHP_EINVAL);
  ck_assert_int_eq(resihp__coord_shrink_in_place(a.c, 0, 4), RESIHP_EINVAL);
  ck_assert_int_eq(resihp__coord_shrink_in_place(a.c, 0, 2), 0);
  resihp__coord_mirror(a.c);
  /* (the rank said lost stays until its next process joins) */
  ck_assert_msg(strstr(snap, "\ny 0 lay=10 lst=1 shrunk=1:2:1.25 lostnow=2\n"),
                "%s", snap);
  restore_same(&co, &b.c);
  resihp__coord_destroy(b.c);
  /* its survivor's new process of one rank */
  resihp__wire_free(&a.peer[0]);
  connect_one(&a, 0);
  feed(&a, 0,
       "HELLO replica=0 ep=h0:5 sep=h0:6 mbs=6 steps=8 lsize=1 jobid=7 "
       "stepid=9 shape=-");
  expect(&a, 0, "WELCOME replica=0 ", line, sizeof(line));
  ck_assert_msg(strstr(line, " lay=10"), "%s", line);
  ck_assert_int_eq(resihp__coord_lost_ranks(a.c, 0), 0); /* a new process */
  feed(&a, 0, "BEGIN step=-1 lay=10 lmove=1 lst=1");
  for (int i = 1; i < N; i++)
    feed(&a, i, "BEGIN step=1 lay=%s lmove=1 lst=1", LAY[i]);
  for (int i = 0; i < N; i++)
    expect(&a, i, "GO ", line, sizeof(line));
  for (int i = 0; i < N; i++)
    feed(&a, i, "READY epoch=%u", resihp__coord_epoch(a.c));
  char serve[128] = "";
  expect(&a, 1, "START ", line, sizeof(line));
  resihp__wire_get(line, "serve", serve, sizeof(serve));
  ck_assert_str_eq(serve, "0.0:0-6@h0:6,0.0:6-10@h0:6,0.0:r@h0:6");
  expect(&a, 2, "START ", line, sizeof(line));
  ck_assert_msg(!strstr(line, "serve="), "%s", line);
  expect(&a, 0, "START ", line, sizeof(line));
  ck_assert_msg(strstr(line, "catchup=1"), "%s", line);
  char *text = summary_of(a.c);
  ck_assert_msg(strstr(text, "1 shrink(s)"), "%s", text);
  free(text);
  close_side(&a);
}
END_TEST

/* Replicas of different partitions hold different state sizes (SHAPE:
 * join_layers, where replica 1's differs, and all join): the shape is
 * compared at a process's first BEGIN with those of the replicas holding
 * its partition. A replacement of replica 2 (replica 0's partition) with
 * another state shape is refused for its program, as is one that
 * declares no layers and has another shape than the job's; one with the
 * right shape joins. A standby restored from the mirror compares the
 * same (the snapshot's "y" lines carry the partitions' shapes). Before
 * the shape was compared per partition, replica 1 was refused at its
 * HELLO. */
START_TEST(test_layers_shape) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  char line[512], go[N][512], why[32];
  join_layers(&a, &co, go);
  ck_assert_int_eq(resihp__coord_members(a.c), N);
  /* the standby: replica 2's replacement with replica 1's shape */
  resihp__coord_mirror(a.c);
  char *mine = strdup(snap);
  ck_assert_int_eq(resihp__coord_restore(&co, mine, snap_len, -1, &b.c), 0);
  free(mine);
  connect_all(&b);
  resihp__coord_fail_lost(b.c, 2, "its node h2 is DOWN");
  rejoin_2(&b, 20, SHAPE[1], line, sizeof(line));
  feed(&b, 2, "BEGIN step=-1 lay=10:4");
  expect(&b, 2, "NO reason=mismatch", line, sizeof(line));
  close_side(&b);
  static const char *const again[] = {
      "BEGIN step=-1 lay=10:4", /* 10:4 with replica 1's shape */
      "BEGIN step=-1",          /* no layers: the job's shape (aa) */
      "BEGIN step=-1 lay=10:4", /* the right one */
  };
  static const char *const shape[] = {"00000000000000bb", "00000000000000cc",
                                      "00000000000000aa"};
  for (int t = 0; t < 3; t++) {
    if (t == 0)
      resihp__coord_fail_lost(a.c, 2, "its node h2 is DOWN");
    rejoin_2(&a, 9 + t, shape[t], line, sizeof(line));
    feed(&a, 2, "%s", again[t]);
    if (t < 2) {
      expect(&a, 2, "NO reason=mismatch", line, sizeof(line));
      ck_assert_int_eq(resihp__coord_refused(a.c, 2, why, sizeof(why)), 1);
      ck_assert_str_eq(why, "mismatch");
      ck_assert(!resihp__coord_connected(a.c, 2));
    }
  }
  for (int i = 0; i < 2; i++)
    feed(&a, i, "BEGIN step=1 lay=%s", LAY[i]);
  for (int i = 0; i < N; i++)
    expect(&a, i, "GO ", line, sizeof(line));
  ck_assert_int_eq(resihp__coord_members(a.c), N);
  close_side(&a);
}
END_TEST

/* A save in progress: SAVE again to the replica asked, SAVED goes on. */
START_TEST(test_save) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 1, NULL, 600000);
  char line[256], save[256];
  running(&a, &co, NULL);
  for (int i = 0; i < N; i++)
    feed(&a, i, "BEGIN step=1");
  expect(&a, 0, "SAVE ", save, sizeof(save));
  ck_assert_str_eq(save, "SAVE step=1");
  ck_assert(resihp__coord_saving(a.c));
  failover(&a, &b, &co, -1, ALL, N);
  ck_assert(resihp__coord_saving(b.c));
  feed(&b, 0, "BEGIN step=1");
  next(&b, 0, line, sizeof(line));
  ck_assert_str_eq(line, save);
  saved_ok = 0;
  feed(&b, 0, "SAVED step=1 ok=1");
  feed(&b, 0, "SAVED step=1 ok=1"); /* a duplicate: harmless */
  ck_assert_int_eq(saved_ok, 1);
  for (int i = 0; i < N; i++)
    expect(&b, i, "GO step=1 ", line, sizeof(line));
  close_side(&a);
  close_side(&b);
}
END_TEST

/* The end: BEGIN again gets DONE; FINISH duplicates harmless. */
START_TEST(test_end) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  char line[256];
  running(&a, &co, NULL);
  resihp__coord_stop(a.c);
  for (int i = 0; i < N; i++)
    feed(&a, i, "BEGIN step=1");
  for (int i = 0; i < N; i++)
    expect(&a, i, "DONE", line, sizeof(line));
  failover(&a, &b, &co, -1, ALL, N);
  for (int i = 0; i < N; i++) {
    feed(&b, i, "BEGIN step=1");
    next(&b, i, line, sizeof(line));
    ck_assert_str_eq(line, "DONE");
    feed(&b, i, "FINISH result=x");
    feed(&b, i, "FINISH result=x");
  }
  ck_assert_int_eq(resihp__coord_state(b.c), RESIHP__COORD_DONE);
  close_side(&a);
  close_side(&b);
}
END_TEST

/* A member that never comes back is failed after the bound (the others,
 * heard from, stay); a HELLO again=1 that does not match the replica's
 * Slurm step is an ordinary HELLO (refused: the replica is running). */
START_TEST(test_no_comeback) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 3000);
  running(&a, &co, NULL);
  static const int back[2] = {0, 1};
  failover(&a, &b, &co, -1, back, 2);
  char line[256];
  feed(&b, 2,
       "HELLO replica=2 ep=h2:1 sep=h2:2 mbs=6 steps=8 jobid=7 stepid=99 "
       "again=1");
  next(&b, 2, line, sizeof(line));
  ck_assert_str_eq(line, "NO reason=duplicate");
  ck_assert(!resihp__coord_connected(b.c, 2));
  ck_assert_int_eq(resihp__coord_members(b.c), 3);
  int64_t give_up = resihp__now_ms() + 60000; /* a safety net */
  while (resihp__coord_members(b.c) == 3 && resihp__now_ms() < give_up) {
    for (int i = 0; i < 2; i++)
      resihp__wire_send(&b.peer[i], "HB", resihp__now_ms() + 1000);
    resihp__coord_poll(b.c, 50);
  }
  ck_assert_int_eq(resihp__coord_members(b.c), 2);
  ck_assert(resihp__coord_connected(b.c, 0));
  ck_assert(resihp__coord_connected(b.c, 1));
  close_side(&a);
  close_side(&b);
}
END_TEST

/* Another member (it has the job's secret) replays replica 1's ids in a
 * HELLO again=1, on a connection of its own, with no credential or a
 * wrong one: refused, and replica 1's link stays; the genuine replica 1
 * still comes back after a failover (its credential survives in the
 * record). */
START_TEST(test_hijack) {
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  running(&a, &co, NULL);
  char wrong[64];
  snprintf(wrong, sizeof(wrong), "%s", creds[1]);
  wrong[0] = wrong[0] == '0' ? '1' : '0';
  const char *tries[] = {"", " cred=-", " cred=", " cred=00", wrong};
  for (size_t t = 0; t < sizeof(tries) / sizeof(tries[0]); t++) {
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv),
                     0);
    resihp__wire_t w, peer;
    resihp__wire_init(&w, sv[0]);
    int k = resihp__coord_adopt(a.c, &w);
    ck_assert_int_ge(k, 0);
    resihp__wire_init(&peer, sv[1]);
    char line[256];
    snprintf(line, sizeof(line),
             "HELLO replica=1 ep=h1:1 sep=h1:2 mbs=6 steps=8 jobid=7 stepid=1 "
             "again=1 epoch=%u step=%ld%s%s",
             resihp__coord_epoch(a.c), resihp__coord_step(a.c),
             t == 4 ? " cred=" : "", tries[t]);
    resihp__coord_feed(a.c, k, line);
    do
      ck_assert_int_eq(
          resihp__wire_recv(&peer, line, sizeof(line), resihp__now_ms() + 5000),
          0);
    while (!strcmp(line, "HB"));
    ck_assert_str_eq(line, "NO reason=bad-credential");
    ck_assert(resihp__coord_connected(a.c, 1));
    ck_assert_int_eq(resihp__coord_members(a.c), N);
    resihp__wire_free(&peer);
  }
  failover(&a, &b, &co, -1, ALL, N);
  ck_assert_int_eq(resihp__coord_members(b.c), N);
  close_side(&a);
  close_side(&b);
}
END_TEST

/* Broken records are refused: cut, altered counts, ids out of range. */
START_TEST(test_bad_records) {
  side_t a;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  running(&a, &co, NULL);
  char *good = strdup(snap);
  size_t len = strlen(good);
  resihp__coord_t *x;
  ck_assert_int_eq(resihp__coord_restore(&co, good, len, -1, &x), 0);
  resihp__coord_destroy(x);
  /* cut anywhere: refused */
  for (size_t cut = 0; cut < len; cut += 7)
    ck_assert_int_eq(resihp__coord_restore(&co, good, cut, -1, &x),
                     RESIHP_EPROTO);
  /* one byte changed: refused or a valid state (never a crash) */
  for (size_t i = 0; i < len; i++) {
    char *bad = strdup(good);
    bad[i] = bad[i] == '9' ? '0' : '9';
    if (resihp__coord_restore(&co, bad, len, -1, &x) == 0) {
      ck_assert_ptr_null(resihp__coord_check(x));
      resihp__coord_destroy(x);
    }
    free(bad);
  }
  resihp__coord_opts_t other = co;
  other.replicas = N + 1;
  ck_assert_int_eq(resihp__coord_restore(&other, good, len, -1, &x),
                   RESIHP_EPROTO);
  free(good);
  close_side(&a);
}
END_TEST

/* A synthetic state of R replicas in a running step: size and times. */
/* More failures than the old fixed table held (256): each has its record,
 * in the summary and through a failover. Replica 2 joins and is lost 300
 * times (each time a replacement, as spare nodes would bring). */
START_TEST(test_many_failures) {
  enum { FAILS = 300 };
  side_t a, b;
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  ck_assert_int_eq(resihp__coord_create(&co, &a.c), 0);
  connect_all(&a);
  char line[256];
  for (int f = 0; f < FAILS; f++) {
    feed(&a, 2,
         "HELLO replica=2 ep=h2:1 sep=h2:2 mbs=6 steps=8 jobid=7 "
         "stepid=%d",
         100 + f);
    expect(&a, 2, "WELCOME ", line, sizeof(line));
    resihp__wire_free(&a.peer[2]);              /* the replica's process dies */
    int64_t give_up = resihp__now_ms() + 60000; /* a safety net */
    while (resihp__coord_connected(a.c, 2) && resihp__now_ms() < give_up)
      resihp__coord_poll(a.c, 50);
    ck_assert(!resihp__coord_connected(a.c, 2));
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv),
                     0);
    resihp__wire_t w;
    resihp__wire_init(&w, sv[0]);
    ck_assert_int_ge(a.k[2] = resihp__coord_adopt(a.c, &w), 0);
    resihp__wire_init(&a.peer[2], sv[1]);
  }
  join(&a, NULL); /* the last replacement among them: GO, mirrored */
  resihp__coord_t *cs[2] = {a.c, NULL};
  failover(&a, &b, &co, -1, NULL, 0); /* 300 records, the same text */
  cs[1] = b.c;
  for (int i = 0; i < 2; i++) {
    char *text = summary_of(cs[i]);
    const char *at = strstr(text, "failures:");
    int n = -1;
    ck_assert_msg(at && sscanf(at, "failures: %d", &n) == 1, "%s", text);
    ck_assert_int_eq(n, FAILS);
    free(text);
  }
  close_side(&a);
  close_side(&b);
}
END_TEST

static void bench(int R) {
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  int M = 4 * R;
  resihp__wire_buf_printf(&b, "RESIHP-COORD 1 %d %d 1 1000 =- 0\n", R, M);
  resihp__wire_buf_printf(&b,
                          "c 5 2 0 3 3 0 0 -1 -1 -1 -1 -1 0 0 0 %d 5 0 0 0 "
                          "0 0 0 1 2 0 0\na \nl \nm ",
                          R);
  for (int r = 0; r < R; r++)
    resihp__wire_buf_printf(&b, "%s%d", r ? ":" : "", r);
  resihp__wire_buf_printf(&b, "\nn ");
  for (int r = 0; r < R; r++)
    resihp__wire_buf_printf(&b, "%s%d", r ? ":" : "", r);
  resihp__wire_buf_printf(&b, "\ni ");
  for (int r = 0; r < R; r++)
    resihp__wire_buf_printf(&b, "%s%d", r ? ":" : "", r);
  for (int o = 0; o < 2; o++) {
    resihp__wire_buf_printf(&b, o ? "\nso " : "\no ");
    for (int mb = 0; mb < M; mb++)
      resihp__wire_buf_printf(&b, "%s%d", mb ? ":" : "", mb / 4);
  }
  resihp__wire_buf_printf(&b, "\nsc ");
  for (int r = 0; r < R; r++)
    resihp__wire_buf_printf(&b, "%s%d", r ? ":" : "", r);
  resihp__wire_buf_printf(&b, "\n");
  for (int r = 0; r < R; r++)
    resihp__wire_buf_printf(&b,
                            "r %d 2 1234 %d 5 0 1 0 0 0 0 3 4 0 0 -1 -1 0 0 "
                            "0 0 0 -1 0 0 =node%d =node%d:7000 "
                            "=10.0.%d.%d:6000 =10.0.%d.%d:6001 = =\n",
                            r, r, r, r, r / 256, r % 256, r / 256, r % 256);
  resihp__wire_buf_printf(&b, "end\n");
  ck_assert_int_eq(b.err, 0);
  resihp__coord_opts_t co = opts(1, 0, NULL, 600000);
  co.replicas = R;
  co.on_mirror = NULL;
  resihp__coord_t *c;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(resihp__coord_restore(&co, b.s, b.len, -1, &c), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  /* the snapshot's time: the least of five (this machine is shared) */
  double best = 1e9;
  size_t len = 0;
  for (int i = 0; i < 5; i++) {
    resihp__wire_buf_t s;
    resihp__wire_buf_init(&s);
    struct timespec ta, tb;
    clock_gettime(CLOCK_MONOTONIC, &ta);
    ck_assert_int_eq(resihp__coord_snapshot(c, &s), 0);
    clock_gettime(CLOCK_MONOTONIC, &tb);
    ck_assert_str_eq(s.s, b.s);
    double ms = (double)(tb.tv_sec - ta.tv_sec) * 1e3 +
                (double)(tb.tv_nsec - ta.tv_nsec) / 1e6;
    best = ms < best ? ms : best;
    len = s.len;
    resihp__wire_buf_free(&s);
  }
  printf("snapshot R=%d M=%d: %zu bytes, snapshot %.2f ms, restore %.2f ms\n",
         R, M, len, best,
         (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
             (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
  resihp__wire_buf_free(&b);
  resihp__coord_destroy(c);
}

START_TEST(test_bench) {
  if (!getenv("COORD_SNAP_BENCH"))
    return;
  bench(1024);
  bench(10000);
}
END_TEST

int main(void) {
  Suite *s = suite_create("coord_failover");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_setup);
  tcase_add_test(tc, test_run_and_barrier);
  tcase_add_test(tc, test_free_run_and_ledger);
  tcase_add_test(tc, test_held_run_reconnects);
  tcase_add_test(tc, test_round);
  tcase_add_test(tc, test_fail_lost);
  tcase_add_test(tc, test_term_fence);
  tcase_add_test(tc, test_takeover_summary);
  tcase_add_test(tc, test_layers);
  tcase_add_test(tc, test_layers_moved);
  tcase_add_test(tc, test_layers_shrunk);
  tcase_add_test(tc, test_lost_rank_kept);
  tcase_add_test(tc, test_layers_shrunk_in_place);
  tcase_add_test(tc, test_layers_serve);
  tcase_add_test(tc, test_layers_serve_by_layer);
  tcase_add_test(tc, test_layers_shape);
  tcase_add_test(tc, test_retired_refused);
  tcase_add_test(tc, test_save);
  tcase_add_test(tc, test_end);
  tcase_add_test(tc, test_no_comeback);
  tcase_add_test(tc, test_hijack);
  tcase_add_test(tc, test_bad_records);
  tcase_add_test(tc, test_many_failures);
  tcase_add_test(tc, test_bench);
  suite_add_tcase(s, tc);
  int failed = run_suite(s);
  free(snap);
  return failed;
}
