/* SPDX-License-Identifier: BSD-3-Clause */
/* What one failure costs the control plane, in bytes and in judgement, at a
 * size where O(N^2) shows: the real coordinator with many replicas whose
 * connections are socket pairs (adopted without a handshake), driven
 * through its own poll loop. The bytes are counted, not timed.
 *
 *   recover_reports_the_dead  every survivor of a mid-step death reports
 *       it: the reports and the answers are O(1) bytes each (a survivor
 *       names the dead, gone=, not the living), and the leader's line
 *       (resihp__job_recover_line) is as long as the failure;
 *   joins_paced_and_o_n  a whole job's whole-list GOs leave a bounded
 *       number of bytes a poll round, and a replacement's admission sends
 *       the others the change only;
 *   boundary_paced  a boundary's GO and START lines, and a round of
 *       heartbeats, leave a bounded number a poll round;
 *   silence_not_judged_on_work  a poll round that works for longer than
 *       the silence bound (here a slow mirror) fails nobody: silence is
 *       measured on the time the coordinator spent listening; a replica
 *       silent while it listened is still failed;
 *   no_heartbeat_behind_a_queue  heartbeats go only to replicas whose
 *       queue is empty;
 *   reconnect_window_follows_steps  a restored coordinator waits for its
 *       members the silence bound plus two steps of the last step's time
 *       (a free run's members look at their link at step boundaries). */
#include "config.h"

#include "../../libresihp/control/coord_internal.h"
#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/wire.h"
#include "../../libresihp/recovery/job_internal.h"
#include "../../libresihp/transport/mesh.h"
#include "suite_main.h"

#include <resihp/error.h>

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char key[] = "cost-test-secret";

/* The coordinator, each replica's connection index and its end. */
typedef struct {
  resihp__coord_t *c;
  int n;
  int *k;
  resihp__wire_t *peer;
  long rx_bytes; /* what the replicas read, tags included */
} side_t;

static char *snap;
static size_t snap_len;
static int mirror_sleep_ms; /* a slow mirror: a long poll round */

static void on_mirror(void *ud, const char *s, size_t len) {
  (void)ud;
  free(snap);
  snap = malloc(len + 1);
  ck_assert_ptr_nonnull(snap);
  memcpy(snap, s, len);
  snap[len] = '\0';
  snap_len = len;
  if (mirror_sleep_ms) {
    struct timespec ts = {mirror_sleep_ms / 1000,
                          (mirror_sleep_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
}

static resihp__coord_opts_t opts(int n, int silence_ms, int lockstep) {
  resihp__coord_opts_t co = {.replicas = n,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)key,
                             .secret_len = sizeof(key) - 1,
                             .silence_ms = silence_ms,
                             .lockstep = lockstep,
                             .on_mirror = on_mirror};
  return co;
}

static void connect_all(side_t *s) {
  for (int i = 0; i < s->n; i++) {
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv),
                     0);
    resihp__wire_t w;
    resihp__wire_init(&w, sv[0]);
    s->k[i] = resihp__coord_adopt(s->c, &w);
    ck_assert_int_ge(s->k[i], 0);
    resihp__wire_init(&s->peer[i], sv[1]);
  }
}

static void open_side(side_t *s, int n) {
  /* two descriptors per replica */
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  s->n = n;
  s->k = calloc((size_t)n, sizeof(int));
  s->peer = calloc((size_t)n, sizeof(resihp__wire_t));
  s->rx_bytes = 0;
  ck_assert(s->k && s->peer);
}

static void close_side(side_t *s) {
  ck_assert_ptr_null(resihp__coord_check(s->c));
  resihp__coord_destroy(s->c);
  for (int i = 0; i < s->n; i++)
    resihp__wire_free(&s->peer[i]);
  free(s->k);
  free(s->peer);
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

/* Every replica in ids[0..n) gets a line starting with prefix (the lines
 * before it skipped); the bytes they read are counted. The coordinator
 * is polled (no wait) in between so that its queues move. */
static void all_get(side_t *s, const int *ids, int n, const char *prefix) {
  static char line[RESIHP__WIRE_LINE_MAX + 1];
  char *got = calloc((size_t)s->n, 1);
  int left = n;
  int64_t deadline = resihp__now_ms() + 60000; /* safety net only */
  while (left && resihp__now_ms() < deadline) {
    resihp__coord_poll(s->c, 0);
    for (int j = 0; j < n; j++) {
      int i = ids[j], t;
      if (got[i])
        continue;
      size_t had = s->peer[i].len;
      ck_assert_int_eq(resihp__wire_fill(&s->peer[i]), 0);
      s->rx_bytes += (long)(s->peer[i].len - had);
      while (!got[i] && (t = resihp__wire_take(&s->peer[i], line,
                                               sizeof(line))) == 1)
        if (!strncmp(line, prefix, strlen(prefix))) {
          got[i] = 1;
          left--;
        }
    }
  }
  free(got);
  ck_assert_msg(!left, "%d replicas never got '%s'", left, prefix);
}

static int *range(int n) {
  int *ids = malloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++)
    ids[i] = i;
  return ids;
}

/* Every replica joins and gets the START of step 0. */
static void running(side_t *s, resihp__coord_opts_t *co) {
  ck_assert_int_eq(resihp__coord_create(co, &s->c), 0);
  connect_all(s);
  int *all = range(s->n);
  for (int i = 0; i < s->n; i++)
    feed(s, i,
         "HELLO replica=%d ep=h%d:1 sep=h%d:2 mbs=%d steps=20 jobid=7 "
         "stepid=%d",
         i, i, i, 2 * s->n, i);
  for (int i = 0; i < s->n; i++)
    feed(s, i, "BEGIN step=-1");
  all_get(s, all, s->n, "GO ");
  for (int i = 0; i < s->n; i++)
    feed(s, i, "READY epoch=%u", resihp__coord_epoch(s->c));
  all_get(s, all, s->n, "START ");
  free(all);
}

/* One poll round of up to 20 ms, replicas 0..nbeat-1 beating first. */
static void beat_and_poll(side_t *s, int nbeat) {
  for (int i = 0; i < nbeat; i++)
    resihp__wire_send(&s->peer[i], "HB", resihp__now_ms() + 5000);
  resihp__coord_poll(s->c, 20);
}

/* Poll until the coordinator starts a round of heartbeats. */
static void until_heartbeats(side_t *s) {
  int64_t hb = s->c->last_hb, deadline = resihp__now_ms() + 30000;
  while (s->c->last_hb == hb && resihp__now_ms() < deadline)
    resihp__coord_poll(s->c, 20);
  ck_assert_int_ne(s->c->last_hb, hb);
}

/* A replica dies mid-step; every survivor reports it as the job does.
 * Before: each report listed the N-1 survivors (O(N^2) in all). */
START_TEST(recover_reports_the_dead) {
  enum { NR = 1000 };
  side_t s;
  open_side(&s, NR);
  resihp__coord_opts_t co = opts(NR, 600000, 1);
  running(&s, &co);
  int victim = NR / 2, *alive = malloc(sizeof(int) * NR), na = 0;
  for (int i = 0; i < NR; i++)
    if (i != victim)
      alive[na++] = i;
  /* the leader's line: the epoch's members, one of them lost */
  resihp_job_t *j = calloc(1, sizeof(*j));
  int64_t *in = malloc(sizeof(int64_t) * NR);
  ck_assert(j && in);
  j->members = range(NR);
  j->nmembers = NR;
  j->lsize = 1;
  for (int i = 0; i < NR; i++)
    in[i] = i != victim;
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  resihp__job_recover_line(j, in, &b);
  ck_assert_int_eq(b.err, 0);
  char want[64];
  snprintf(want, sizeof(want), "RECOVER step=0 cepoch=0 gone=%d", victim);
  ck_assert_str_eq(b.s, want);
  /* every survivor says it (its connection still open: the majority
   * decides, not the coordinator's own view of the victim) */
  long fed = 0;
  for (int a = 0; a < na; a++) {
    resihp__coord_feed(s.c, s.k[alive[a]], b.s);
    fed += (long)b.len;
  }
  s.rx_bytes = 0;
  all_get(&s, alive, na, "REASSIGN ");
  /* O(1) a survivor each way: 40 bytes said, under 100 read (the
   * REASSIGN, its tag, heartbeats) */
  ck_assert_int_le(fed, 40L * na);
  ck_assert_int_le(s.rx_bytes, 200L * na);
  ck_assert_int_eq(resihp__coord_members(s.c), NR - 1);
  ck_assert(!resihp__coord_connected(s.c, victim));
  resihp__wire_buf_free(&b);
  free(j->members);
  free(j);
  free(in);
  free(alive);
  close_side(&s);
}
END_TEST

/* Bytes the coordinator holds for its replicas, not yet taken by their
 * sockets. */
static long queued(const side_t *s) {
  long q = 0;
  for (int i = 0; i < s->n; i++) {
    const resihp__wire_t *w = &s->c->conns[s->k[i]].w;
    q += (long)(w->out_len - w->out_off);
  }
  return q;
}

/* A whole job joins at once with long addresses (1,000 x 50 KB lists):
 * the whole-list GOs leave 16 MB a round, not all in the round that made
 * the epoch (50 MB queued then; 2.2 GB and seconds at 10,000);
 * everyone is admitted all the same. Then a replica dies and its
 * replacement joins: every member but the joiner gets the change only,
 * O(N) bytes in all besides the joiner's whole list. */
START_TEST(joins_paced_and_o_n) {
  enum { NR = 1000 };
  side_t s;
  open_side(&s, NR);
  resihp__coord_opts_t co = opts(NR, 600000, 1);
  ck_assert_int_eq(resihp__coord_create(&co, &s.c), 0);
  connect_all(&s);
  char pad[41]; /* addresses of 44 bytes (48 at most) */
  memset(pad, 'x', 40);
  pad[40] = '\0';
  for (int i = 0; i < NR; i++)
    feed(&s, i,
         "HELLO replica=%d ep=h%d%s:1 sep=h%d:2 mbs=%d steps=20 jobid=7 "
         "stepid=%d",
         i, i, pad, i, 2 * NR, i);
  for (int i = 0; i < NR; i++)
    feed(&s, i, "BEGIN step=-1");
  ck_assert_int_le(queued(&s), 17L << 20);
  int owed = 0; /* the rest in the next rounds */
  for (int i = 0; i < NR; i++)
    owed += s.c->reps[i].owed != 0;
  ck_assert_int_ge(owed, NR / 2);
  int *all = range(NR);
  all_get(&s, all, NR, "GO ");
  for (int i = 0; i < NR; i++)
    feed(&s, i, "READY epoch=%u", resihp__coord_epoch(s.c));
  all_get(&s, all, NR, "START ");
  /* a death at the step's end and a replacement */
  int victim = NR / 3, *alive = malloc(sizeof(int) * NR), na = 0;
  for (int i = 0; i < NR; i++)
    if (i != victim)
      alive[na++] = i;
  resihp__coord_fail_lost(s.c, victim, "test");
  ck_assert_int_eq(resihp__coord_members(s.c), NR - 1);
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv),
                   0);
  resihp__wire_free(&s.peer[victim]);
  resihp__wire_t w;
  resihp__wire_init(&w, sv[0]);
  s.k[victim] = resihp__coord_adopt(s.c, &w);
  resihp__wire_init(&s.peer[victim], sv[1]);
  feed(&s, victim,
       "HELLO replica=%d ep=h%d%s:1 sep=h%d:2 mbs=%d steps=20 jobid=7 "
       "stepid=%d",
       victim, victim, pad, victim, 2 * NR, NR + 1);
  feed(&s, victim, "BEGIN step=-1");
  s.rx_bytes = 0;
  for (int a = 0; a < na; a++)
    feed(&s, alive[a], "BEGIN step=1");
  all_get(&s, alive, na, "GO ");
  /* the change (n=, gone=, add=victim@its addresses) and a heartbeat or
   * two: a few hundred bytes each */
  ck_assert_int_le(s.rx_bytes, 400L * na);
  s.rx_bytes = 0;
  int one[1] = {victim};
  all_get(&s, one, 1, "GO ");
  ck_assert_int_ge(s.rx_bytes, 45L * NR); /* the whole list */
  ck_assert_int_le(s.rx_bytes, 70L * NR);
  ck_assert_int_eq(resihp__coord_members(s.c), NR);
  free(all);
  free(alive);
  close_side(&s);
}
END_TEST

/* A boundary of 2,500 members: its 5,000 lines (GO new=0, START) leave
 * 2,048 a round, each member's GO before its START, everyone gets both;
 * a heartbeat round too is a sweep of 2,048 a round. */
START_TEST(boundary_paced) {
  enum { NR = 2500 };
  side_t s;
  open_side(&s, NR);
  resihp__coord_opts_t co = opts(NR, 600000, 1);
  running(&s, &co);
  for (int i = 0; i < NR; i++)
    feed(&s, i, "BEGIN step=1");
  int owed = 0;
  for (int i = 0; i < NR; i++)
    owed += s.c->reps[i].owed != 0;
  ck_assert_int_ge(owed, NR - 2048 / 2);
  /* the last one, still owed both, says BEGIN again (as after a lost
   * link): it gets them now, once */
  int last = NR - 1;
  ck_assert_int_eq(s.c->reps[last].owed, OWE_GO_LINE | OWE_START);
  feed(&s, last, "BEGIN step=1");
  ck_assert_int_eq(s.c->reps[last].owed, 0);
  int *all = range(NR);
  all_get(&s, all, NR, "START ");
  for (int i = 0; i < 10; i++)
    resihp__coord_poll(s.c, 0);
  static char line[512];
  int gos = 0, starts = 0, t;
  ck_assert_int_eq(resihp__wire_fill(&s.peer[last]), 0);
  while ((t = resihp__wire_take(&s.peer[last], line, sizeof(line))) == 1) {
    gos += !strncmp(line, "GO ", 3);
    starts += !strncmp(line, "START ", 6);
  }
  ck_assert_int_eq(gos, 0);   /* (the GO came before its START) */
  ck_assert_int_eq(starts, 0); /* no second START */
  for (int i = 0; i < NR; i++)
    ck_assert_int_eq(s.c->reps[i].owed, 0);
  /* a sweep: the first round reaches 2,048 replicas at most */
  until_heartbeats(&s);
  ck_assert_int_le(s.c->hb_next, 2048);
  free(all);
  close_side(&s);
}
END_TEST

/* A poll round that works (a slow mirror) for longer than the silence
 * bound (3 s, 2 s): no replica is failed for the time the coordinator was not
 * listening. One that stays silent while it listens is. */
START_TEST(silence_not_judged_on_work) {
  side_t s;
  open_side(&s, 3);
  resihp__coord_opts_t co = opts(3, 2000, 1);
  running(&s, &co);
  /* every replica heard just now */
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(
        resihp__wire_send(&s.peer[i], "HB", resihp__now_ms() + 5000), 0);
  resihp__coord_poll(s.c, 0);
  feed(&s, 0, "BEGIN step=1");
  feed(&s, 1, "BEGIN step=1");
  /* replica 2 completes the barrier (its GO and START are mirrored
   * first: 3 s), replica 0 beats; both read in one round */
  ck_assert_int_eq(resihp__wire_send(&s.peer[2], "BEGIN step=1",
                                     resihp__now_ms() + 5000),
                   0);
  ck_assert_int_eq(resihp__wire_send(&s.peer[0], "HB", resihp__now_ms() + 5000),
                   0);
  mirror_sleep_ms = 3000;
  resihp__coord_poll(s.c, 0);
  mirror_sleep_ms = 0;
  int ids[3] = {0, 1, 2};
  all_get(&s, ids, 3, "START ");
  for (int i = 0; i < 5; i++)
    resihp__coord_poll(s.c, 0);
  ck_assert_int_eq(resihp__coord_members(s.c), 3);
  /* replicas 0 and 1 beat, 2 says nothing: it is failed once the
   * coordinator has listened for the bound */
  int64_t deadline = resihp__now_ms() + 30000; /* safety net only */
  while (resihp__coord_connected(s.c, 2) && resihp__now_ms() < deadline)
    beat_and_poll(&s, 2);
  ck_assert(!resihp__coord_connected(s.c, 2));
  ck_assert(resihp__coord_connected(s.c, 0) && resihp__coord_connected(s.c, 1));
  close_side(&s);
}
END_TEST

/* A replica whose queue still holds lines gets no heartbeat behind them
 * (10,000 appended to full queues while a whole job joined held a round
 * for 0.4 s); one with an empty queue does. */
START_TEST(no_heartbeat_behind_a_queue) {
  side_t s;
  open_side(&s, 2);
  resihp__coord_opts_t co = opts(2, 600000, 1);
  running(&s, &co);
  /* replica 0 stops reading and a long line fills its socket */
  static char eps[1 << 20];
  memset(eps, 'a', sizeof(eps) - 1);
  resihp__coord_set_coords(s.c, eps);
  const resihp__wire_t *w0 = &s.c->conns[s.k[0]].w;
  size_t q0 = w0->out_len - w0->out_off;
  ck_assert_uint_gt(q0, 0);
  int ids[1] = {1};
  all_get(&s, ids, 1, "COORDS ");
  until_heartbeats(&s);
  ck_assert_uint_eq(w0->out_len - w0->out_off, q0);
  all_get(&s, ids, 1, "HB");
  close_side(&s);
}
END_TEST

/* The mirrored state says the last step took step_ms: a successor waits
 * for its members the silence bound plus two of those. */
START_TEST(reconnect_window_follows_steps) {
  side_t a, b;
  open_side(&a, 3);
  resihp__coord_opts_t co = opts(3, 300, 1);
  running(&a, &co);
  a.c->step_ms = 400; /* as start_step or a free run's PROG measure it */
  resihp__coord_mirror(a.c);
  /* the c line ends with step_ms, the repartitions and the shrinks */
  ck_assert_ptr_nonnull(strstr(snap, " 400 0 0\n"));
  open_side(&b, 3);
  ck_assert_int_eq(resihp__coord_restore(&co, snap, snap_len, -1, &b.c), 0);
  ck_assert_int_eq(b.c->step_ms, 400);
  connect_all(&b);
  feed(&b, 0,
       "HELLO replica=0 ep=h0:1 sep=h0:2 mbs=6 steps=20 jobid=7 stepid=0 "
       "again=1 epoch=%u step=0 cred=%s",
       resihp__coord_epoch(b.c), a.c->reps[0].cred);
  /* listen for more than the silence bound, less than the window
   * (300 + 2 x 400 ms): nobody is failed yet */
  int64_t deadline = resihp__now_ms() + 30000; /* safety net only */
  while (b.c->listened < 900 && resihp__now_ms() < deadline)
    beat_and_poll(&b, 1);
  ck_assert_int_eq(resihp__coord_members(b.c), 3);
  while (resihp__coord_members(b.c) == 3 && resihp__now_ms() < deadline)
    beat_and_poll(&b, 1);
  ck_assert_int_eq(resihp__coord_members(b.c), 1);
  ck_assert_int_ge(b.c->listened, 1100);
  close_side(&a);
  close_side(&b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("coord_cost");
  TCase *t = tcase_create("cost");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, recover_reports_the_dead);
  tcase_add_test(t, joins_paced_and_o_n);
  tcase_add_test(t, boundary_paced);
  tcase_add_test(t, silence_not_judged_on_work);
  tcase_add_test(t, reconnect_window_follows_steps);
  tcase_add_test(t, no_heartbeat_behind_a_queue);
  suite_add_tcase(s, t);
  return run_suite(s);
}
