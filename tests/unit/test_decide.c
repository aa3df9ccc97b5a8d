/* SPDX-License-Identifier: BSD-3-Clause */
/* One decision for a slow member (control/coord_decide.c), through the
 * coordinator's own step boundaries (resihp__coord_advance) in process:
 * three replicas of two ranks holding 6 layers (3,3) that can move them,
 * steps of 1 s (their start times are set, not measured), rank 1 of
 * replica 0 twice as slow, a spare free. Nothing here depends on this
 * machine's speed: a long switch is made by moving the coordinator's
 * times back (resihp__coord_shift_times).
 *
 *   swap_pays_more  a cheap swap saves more than a move: the replica is
 *       swapped, its layers stay, and the job's events say "decision"
 *       swap with both options priced;
 *   repart_pays_more  a swap that pays, but less than a move (a dear
 *       swap): the layers move, nobody is swapped;
 *   members_changed_unmeasured  the same move, then a new epoch (a
 *       failure's regroup, a shrink) within the 8 steps after it: its gain
 *       is not measured (no outcome; the summary says why), where those
 *       stalled steps read as a large loss (-163 s in torch-shrink.test);
 *   neither_pays  two steps left: nothing moves, nobody is swapped, the
 *       decision is absorb;
 *   swaps_off  with swaps off (--swap-cost never) the layers move at
 *       once and the decision says swaps are off;
 *   never_both  a spare free from the start: the slowness is answered
 *       once, by a swap or a move, never by both over the steps after;
 *   most_saving_first  two replicas slow, one 3x and one 2x: the 3x one
 *       (the larger saving) is swapped first, the other waits for the
 *       next boundary with nothing in flight;
 *   free_run_held_again  free-running, a slow member that may move holds
 *       the run for a boundary; a boundary that waits for a swap to
 *       become possible (the spare free, slow for too few steps) leaves
 *       it to hold the run again at the next commit, so that the move
 *       and the swap are compared at all;
 *   swap_cost_measured  a swap whose replacement caught up 60 s after it
 *       (times moved back): the swap's cost is measured at 60 s, eight
 *       steps later its gain is measured, and the next slow replica is
 *       moved, not swapped (at 60 s a swap no longer pays);
 *   swap_priced_from_launches  the swap's default cost (180 s) makes a
 *       move the answer; with the job's steps timed from launch to join
 *       (0.5 s and 1.5 s: resihp-run's resihp__coord_note_launch) the
 *       same slowness is answered by a swap priced at their mean, 1 s,
 *       and the decision says where the price came from;
 *   measured_cost_counts  a move that stalled the job far longer than
 *       the default (500 s): the next slow replica is not moved, and the
 *       decision says its cost was measured;
 *   record_keeps_costs  a standby restored from the coordinator's state
 *       record has the measured costs and the decisions, and records them
 *       again. */
#include "config.h"

#include "../../libresihp/control/coord_internal.h"
#include "../../libresihp/control/record.h"
#include "../../libresihp/transport/mesh.h"
#include "suite_main.h"

#include <resihp/planner.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define R 3
#define STEP_MS 1000

static const char key[] = "decide-test-secret";
static int spare = 1;
static int swapped = -1;
static char events[64], metrics[64];

static int spare_free(void *ud) {
  (void)ud;
  return spare;
}

static void on_swapped(void *ud, int r, const char *node, long j, long s,
                       const char *why) {
  (void)ud, (void)node, (void)j, (void)s, (void)why;
  swapped = r;
  spare = 0; /* taken */
}

static void on_failed(void *ud, int r, const char *node, long j, long s,
                      const char *why) {
  (void)ud, (void)r, (void)node, (void)j, (void)s, (void)why;
}

/* A coordinator at the boundary of step 20 of S, every replica a member
 * holding 3,3 of 6 layers with 8 microbatches, the last steps 1 s each. */
static resihp__coord_t *make(double swap_cost_s, long S,
                             resihp__record_t **rec) {
  snprintf(events, sizeof(events), "/tmp/test-decide-%d.events", (int)getpid());
  snprintf(metrics, sizeof(metrics), "/tmp/test-decide-%d.prom", (int)getpid());
  unlink(events);
  unlink(metrics);
  char err[256];
  ck_assert_int_eq(
      resihp__record_create(events, metrics, "t", rec, err, sizeof(err)), 0);
  resihp__coord_opts_t o = {.replicas = R,
                            .bind_host = "127.0.0.1",
                            .secret = (const uint8_t *)key,
                            .secret_len = sizeof(key) - 1,
                            .silence_ms = 60000,
                            .on_failed = on_failed,
                            .on_swapped = on_swapped,
                            .assign = RESIHP_ASSIGN_COUNT,
                            .swap_cost_s = swap_cost_s,
                            .spare_free = spare_free,
                            .record = *rec};
  resihp__coord_t *c;
  ck_assert_int_eq(resihp__coord_create(&o, &c), 0);
  c->M = 3 * 8;
  c->K = 2;
  c->owner = calloc((size_t)c->M, sizeof(int));
  ck_assert_ptr_nonnull(c->owner);
  ck_assert_int_eq(resihp__coord_ensure_steps(c, S + 1), 0);
  ck_assert_int_eq(resihp__coord_perf_init(c), 0);
  c->S = S;
  c->step = 20;
  for (long s = 0; s < c->step; s++)
    c->start_ms[s] = 1000000 + s * STEP_MS;
  for (int r = 0; r < R; r++) {
    rep_t *p = &c->reps[r];
    p->state = R_MEMBER;
    p->begun = c->step;
    p->quota = 8;
    resihp__coord_add_member(c, r);
    ck_assert_int_eq(resihp__coord_set_layers(c, r, "6:3"), 0);
    resihp__coord_repart_begin(c, r, "BEGIN step=20 lmove=1");
  }
  c->phase = P_BARRIER;
  swapped = -1;
  spare = 1;
  return c;
}

/* Replica r's rank k runs at factor f, slow for that many steps. */
static void slow(resihp__coord_t *c, int r, int k, double f, long steps) {
  c->rank_slow[r * c->K + k] = f;
  c->reps[r].slow = f;
  c->reps[r].slow_steps = steps;
}

/* The step started STEP_MS after the last one (not now: steps of this
 * test take no time). */
static void started(resihp__coord_t *c) {
  c->start_ms[c->step] = c->start_ms[c->step - 1] + STEP_MS;
}

/* The step's boundary: the decision, the GO (and the START). */
static void boundary(resihp__coord_t *c) {
  c->phase = P_BARRIER;
  resihp__coord_advance(c);
  started(c);
}

/* Every member commits the step, then the next boundary. */
static void next_step(resihp__coord_t *c) {
  for (int i = 0; i < c->nmembers; i++)
    c->reps[c->members[i]].begun = c->step + 1;
  c->phase = P_RUN;
  resihp__coord_advance(c);
  started(c);
}

/* The events file's lines with "event":"name" and, if not NULL, text
 * and also. */
static int count_events2(const char *name, const char *text, const char *also) {
  FILE *f = fopen(events, "r");
  if (!f)
    return 0;
  char line[2048], want[64];
  snprintf(want, sizeof(want), "\"event\":\"%s\"", name);
  int n = 0;
  while (fgets(line, sizeof(line), f))
    n += strstr(line, want) && (!text || strstr(line, text)) &&
         (!also || strstr(line, also));
  fclose(f);
  return n;
}

static int count_events(const char *name, const char *text) {
  return count_events2(name, text, NULL);
}

/* Whether file holds text. */
static int holds(const char *file, const char *text) {
  char buf[16384];
  FILE *f = fopen(file, "r");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, text) != NULL;
}

/* The summary's text. */
static void summary(resihp__coord_t *c, char *out, size_t n) {
  FILE *m = fmemopen(out, n, "w");
  ck_assert_ptr_nonnull(m);
  resihp__coord_summary(c, m, NULL);
  fclose(m);
}

static void done(resihp__coord_t *c, resihp__record_t *rec) {
  resihp__coord_destroy(c);
  resihp__record_destroy(rec);
  unlink(events);
  unlink(metrics);
}

START_TEST(swap_pays_more) {
  resihp__record_t *rec;
  resihp__coord_t *c = make(1, 100, &rec);
  slow(c, 0, 1, 2.0, 3);
  boundary(c);
  ck_assert_int_eq(swapped, 0);
  ck_assert_int_eq(c->repartitions, 0);
  ck_assert_int_eq(c->reps[0].moved, 0);
  ck_assert_int_eq(count_events("decision", "\"kind\":\"swap\""), 1);
  ck_assert_int_eq(count_events("decision", "repartition="), 1);
  ck_assert_int_eq(count_events("decision", "repartition=n/a"), 0);
  done(c, rec);
}
END_TEST

START_TEST(repart_pays_more) {
  resihp__record_t *rec;
  /* 80 steps left of 1 s, the others carry a 1.25 s step while it is
   * out: a 30 s swap saves ~3 s, the move ~5 s (7 s less two steps) */
  resihp__coord_t *c = make(30, 100, &rec);
  double gain = resihp_planner_swap_gain_s(R, 2.0, 2.5 / 3, 80, 30);
  ck_assert(gain > 0); /* it would pay on its own */
  slow(c, 0, 1, 2.0, 3);
  boundary(c);
  ck_assert_int_eq(swapped, -1);
  ck_assert_int_eq(c->repartitions, 1);
  ck_assert_int_eq(c->reps[0].moved, 1);
  ck_assert_int_eq(count_events("decision", "\"kind\":\"repartition\""), 1);
  ck_assert_int_eq(count_events("swap", NULL), 0);
  ck_assert(holds(metrics, "resihp_decisions_total{choice=\"repartition\"} 1"));
  /* its steps after: the move's stall, then its gain, measured */
  for (int s = 0; s < 10; s++)
    next_step(c);
  ck_assert_int_eq(count_events("switch-cost", "\"kind\":\"repartition\""), 1);
  ck_assert_int_eq(count_events("outcome", "\"kind\":\"repartition\""), 1);
  ck_assert_int_eq(count_events("swap", NULL), 0);
  char out[8192];
  summary(c, out, sizeof(out));
  ck_assert_msg(strstr(out, "decisions:              0 absorb, 1 repartition, "
                            "0 swap; switch costs: repartition "),
                "%s", out);
  ck_assert_msg(strstr(out, "replica 0 decided:      repartition at step 20: "
                            "5.27 s predicted saved, "),
                "%s", out);
  ck_assert_msg(strstr(out, "s measured"), "%s", out);
  done(c, rec);
}
END_TEST

START_TEST(members_changed_unmeasured) {
  resihp__record_t *rec;
  resihp__coord_t *c = make(30, 100, &rec);
  slow(c, 0, 1, 2.0, 3);
  boundary(c);
  ck_assert_int_eq(c->reps[0].moved, 1);
  for (int s = 0; s < 3; s++)
    next_step(c);
  uint32_t e = c->epoch;
  c->changed = 1; /* the members change at the next boundary */
  next_step(c);
  ck_assert_uint_eq(c->epoch, e + 1);
  for (int s = 0; s < 10; s++)
    next_step(c);
  ck_assert_int_eq(count_events("outcome", "\"kind\":\"repartition\""), 0);
  char out[8192];
  summary(c, out, sizeof(out));
  ck_assert_msg(strstr(out, "replica 0 decided:      repartition at step 20: "
                            "5.27 s predicted saved, not measured (the "
                            "members changed after)"),
                "%s", out);
  done(c, rec);
}
END_TEST

START_TEST(neither_pays) {
  resihp__record_t *rec;
  resihp__coord_t *c = make(1, 22, &rec);
  slow(c, 0, 1, 2.0, 3);
  boundary(c);
  ck_assert_int_eq(swapped, -1);
  ck_assert_int_eq(c->repartitions, 0);
  ck_assert_int_eq(count_events("decision", "\"kind\":\"absorb\""), 1);
  /* the next boundary, the same choice: not said again */
  next_step(c);
  ck_assert_int_eq(swapped, -1);
  ck_assert_int_eq(c->repartitions, 0);
  ck_assert_int_eq(count_events("decision", NULL), 1);
  done(c, rec);
}
END_TEST

START_TEST(swaps_off) {
  resihp__record_t *rec;
  resihp__coord_t *c = make(-1, 100, &rec);
  slow(c, 0, 1, 2.0, 1);
  boundary(c);
  ck_assert_int_eq(c->repartitions, 1);
  ck_assert_int_eq(count_events2("decision", "swap=n/a", "swap=never"), 1);
  char out[8192];
  summary(c, out, sizeof(out));
  ck_assert_msg(strstr(out, "swap never (swaps off)"), "%s", out);
  done(c, rec);
}
END_TEST

START_TEST(never_both) {
  /* the swap's cost either way of the move's gain */
  static const double costs[] = {1, 30};
  for (unsigned i = 0; i < sizeof(costs) / sizeof(costs[0]); i++) {
    resihp__record_t *rec;
    resihp__coord_t *c = make(costs[i], 100, &rec);
    slow(c, 0, 1, 2.0, 1); /* just found slow */
    boundary(c);
    for (int s = 0; s < 10; s++)
      next_step(c);
    int moves = c->reps[0].nmoves;
    ck_assert_msg((swapped == 0) + (moves > 0) == 1,
                  "swap cost %g: swapped %d, %d move(s)", costs[i], swapped,
                  moves);
    done(c, rec);
  }
}
END_TEST

START_TEST(most_saving_first) {
  resihp__record_t *rec;
  resihp__coord_t *c = make(1, 100, &rec);
  slow(c, 0, 1, 2.0, 3);
  slow(c, 2, 1, 3.0, 3);
  boundary(c);
  ck_assert_int_eq(swapped, 2);
  ck_assert_int_eq(c->repartitions, 0);
  ck_assert_int_eq(count_events("decision", NULL), 1);
  done(c, rec);
}
END_TEST

START_TEST(free_run_held_again) {
  resihp__record_t *rec;
  resihp__coord_t *c = make(30, 100, &rec);
  slow(c, 0, 1, 2.0, 1);
  c->phase = P_FREE;
  resihp__coord_perf_commit(c);
  ck_assert_int_eq(c->held, 1);
  boundary(c); /* waits: slow for 2 steps */
  ck_assert_int_eq(c->repartitions, 0);
  ck_assert_int_eq(count_events("decision", NULL), 0);
  c->phase = P_FREE;
  c->held = 0;
  resihp__coord_perf_commit(c);
  ck_assert_int_eq(c->held, 1);
  boundary(c);
  ck_assert_int_eq(c->repartitions, 1);
  done(c, rec);
}
END_TEST

START_TEST(swap_cost_measured) {
  resihp__record_t *rec;
  resihp__coord_t *c = make(1, 100, &rec);
  slow(c, 0, 1, 2.0, 3);
  boundary(c);
  ck_assert_int_eq(swapped, 0);
  /* its replacement says hello and waits for the next boundary */
  c->reps[0].state = R_JOINING;
  c->reps[0].waiting = 1;
  next_step(c);
  ck_assert(resihp__coord_is_member(c, 0) && c->reps[0].catching);
  resihp__coord_shift_times(c, -60000);
  next_step(c); /* caught up */
  ck_assert_int_eq(
      count_events2("switch-cost", "\"kind\":\"swap\"", "\"seconds\":60."), 1);
  int m;
  double s = resihp__coord_switch_cost(c, RESIHP__DECIDE_SWAP, &m);
  ck_assert_msg(m && s >= 60 && s < 70, "%g", s);
  for (int i = 0; i < 8; i++)
    next_step(c);
  ck_assert_int_eq(count_events("outcome", "\"kind\":\"swap\""), 1);
  /* the next slow replica: the swap priced at what it took, 60 s, no
   * longer pays (at 1 s it was chosen): its layers move */
  spare = 1;
  slow(c, 1, 1, 2.0, 3);
  next_step(c);
  ck_assert_int_eq(
      count_events2("decision", "\"replica\":1", "swap=60s (measured)"), 1);
  ck_assert_int_eq(
      count_events2("decision", "\"replica\":1", "\"kind\":\"repartition\""),
      1);
  ck_assert_int_eq(c->reps[1].moved, 1);
  done(c, rec);
}
END_TEST

START_TEST(swap_priced_from_launches) {
  for (int timed = 0; timed < 2; timed++) {
    resihp__record_t *rec;
    resihp__coord_t *c = make(180, 100, &rec);
    if (timed) {
      resihp__coord_note_launch(c, 0.5);
      resihp__coord_note_launch(c, 1.5);
    }
    slow(c, 0, 1, 2.0, 3);
    boundary(c);
    ck_assert_int_eq(swapped, timed ? 0 : -1);
    ck_assert_int_eq(c->repartitions, timed ? 0 : 1);
    ck_assert_int_eq(count_events("decision", timed ? "swap=1s (launches)"
                                                    : "swap=180s (default)"),
                     1);
    done(c, rec);
  }
}
END_TEST

START_TEST(measured_cost_counts) {
  resihp__record_t *rec;
  resihp__coord_t *c = make(1, 100, &rec);
  spare = 0; /* no spare: a move or nothing */
  slow(c, 0, 1, 2.0, 3);
  boundary(c);
  ck_assert_int_eq(c->reps[0].moved, 1);
  /* the move's step took 500 s more than a step */
  resihp__coord_shift_times(c, -500000);
  next_step(c);
  ck_assert_int_eq(count_events("switch-cost", "\"kind\":\"repartition\""), 1);
  ck_assert(
      holds(metrics, "resihp_switch_cost_seconds{kind=\"repartition\"} 49"));
  /* another replica slow the same way: the move does not pay now */
  slow(c, 1, 1, 2.0, 3);
  next_step(c);
  ck_assert_int_eq(c->reps[1].moved, 0);
  ck_assert_int_eq(c->repartitions, 1);
  ck_assert_int_eq(
      count_events2("decision", "\"replica\":1", "\"kind\":\"absorb\""), 1);
  ck_assert_int_eq(count_events2("decision", "\"replica\":1", "repartition=-4"),
                   1); /* ~7 s saved, ~499 s to move */
  ck_assert_int_eq(count_events2("decision", "\"replica\":1", "(measured)"), 1);
  done(c, rec);
}
END_TEST

/* A job of 3 replicas whose layers moved (tests/fuzz/corpus-snapshot/repart)
 * after one move measured at 499 s and one decision to move. */
static const char record_text[] =
    "RESIHP-COORD 1 3 6 2 8 =00000000000000aa 0\n"
    "c 1 1 0 2 2 0 0 -1 -1 -1 -1 -1 0 0 0 3 0 0 0 0 0 0 0 36358574 0 0 1 0\n"
    "a \n"
    "l \n"
    "m 0:1:2\n"
    "n 0:1:2\n"
    "i 0:1:2\n"
    "o 0:0:1:1:2:2\n"
    "so 0:0:1:1:2:2\n"
    "sc 0:1:2\n"
    "r 0 2 7 0 1 0 0 0 0 0 0 2 2 0 0 -1 -1 0 0 0 0 0 0 0 36358574 =? = "
    "=h0:1/h0:3 =h0:2/h0:4 = = =193ec90bf90b31ef1923343948486677\n"
    "r 1 2 7 1 1 0 0 0 0 0 0 2 2 0 0 -1 -1 0 0 0 0 0 0 0 36358574 =? = "
    "=h1:1/h1:3 =h1:2/h1:4 = = =d833b361a61b44440dd31f6c793bb529\n"
    "r 2 2 7 2 1 0 0 0 0 0 0 2 2 0 0 -1 -1 0 0 0 0 0 0 0 36358574 =? = "
    "=h2:1/h2:3 =h2:2/h2:4 = = =5fa89e4c4a2600a5677b6ec4fa6928bc\n"
    "y 0 lay=10:6 shape=00000000000000bb home=4\n"
    "y 1 lay=10:6 shape=00000000000000bb\n"
    "y 2 lay=10:4 shape=00000000000000aa\n"
    "w 0 0 0 499000 1 1 0 0 0\n"
    "end\n";

/* A coordinator restored from a record of this job (swap_cost_s: its
 * --swap-cost): resihp__coord_restore's answer, *d set when 0. */
static int restore_text(const char *text, double swap_cost_s,
                        resihp__coord_t **d) {
  resihp__coord_opts_t o = {.replicas = R,
                            .bind_host = "127.0.0.1",
                            .secret = (const uint8_t *)key,
                            .secret_len = sizeof(key) - 1,
                            .silence_ms = 60000,
                            .swap_cost_s = swap_cost_s};
  return resihp__coord_restore(&o, text, strlen(text), -1, d);
}

/* d's own record has the line want (with its newlines). */
static void record_has(resihp__coord_t *d, const char *want) {
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  ck_assert_int_eq(resihp__coord_snapshot(d, &b), 0);
  ck_assert_msg(strstr(b.s, want), "%s", b.s);
  resihp__wire_buf_free(&b);
}

START_TEST(record_keeps_costs) {
  resihp__coord_t *d;
  ck_assert_int_eq(restore_text(record_text, 0, &d), 0);
  int m;
  double got = resihp__coord_switch_cost(d, RESIHP__DECIDE_REPART, &m);
  ck_assert(m);
  ck_assert_msg(fabs(got - 499) < 1e-9, "%g", got);
  ck_assert(resihp__coord_switch_cost(d, RESIHP__DECIDE_SWAP, &m) == 0 && !m);
  ck_assert_int_eq(d->decisions[RESIHP__DECIDE_REPART], 1);
  record_has(d, "\nw 0 0 0 499000 1 1 0 0 0\n");
  resihp__coord_destroy(d);
}
END_TEST

/* The launches that price a swap until one is measured are in the record
 * too ("wl": 2 launches, 1.5 s in all): a standby that takes over prices
 * a swap at 0.75 s, not at the default, and records them again. */
START_TEST(record_keeps_launches) {
  size_t n = strlen(record_text) - strlen("end\n");
  char text[sizeof(record_text) + 64];
  snprintf(text, sizeof(text), "%.*swl 1500 2\nend\n", (int)n, record_text);
  resihp__coord_t *d;
  ck_assert_int_eq(restore_text(text, 180, &d), 0);
  int m;
  double got = resihp__coord_switch_cost(d, RESIHP__DECIDE_SWAP, &m);
  ck_assert_int_eq(m, 2); /* (launches) */
  ck_assert_msg(fabs(got - 0.75) < 1e-9, "%g", got);
  record_has(d, "\nwl 1500 2\n");
  resihp__coord_destroy(d);
  /* a count of none, or one that is not a number, is no record */
  const char *bad[] = {"wl 1500 0\n", "wl 1500\n", "wl x 2\n", "wl 1500 2 3\n",
                       "wl -1 2\n"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    snprintf(text, sizeof(text), "%.*s%send\n", (int)n, record_text, bad[i]);
    ck_assert_msg(restore_text(text, 180, &d) != 0, "'%s' taken", bad[i]);
  }
  /* without it (an older record), the default again */
  ck_assert_int_eq(restore_text(record_text, 180, &d), 0);
  got = resihp__coord_switch_cost(d, RESIHP__DECIDE_SWAP, &m);
  ck_assert_int_eq(m, 0);
  ck_assert_msg(fabs(got - 180) < 1e-9, "%g", got);
  resihp__coord_destroy(d);
}
END_TEST

int main(void) {
  Suite *s = suite_create("decide");
  TCase *t = tcase_create("decide");
  tcase_add_test(t, swap_pays_more);
  tcase_add_test(t, repart_pays_more);
  tcase_add_test(t, members_changed_unmeasured);
  tcase_add_test(t, neither_pays);
  tcase_add_test(t, swaps_off);
  tcase_add_test(t, never_both);
  tcase_add_test(t, most_saving_first);
  tcase_add_test(t, free_run_held_again);
  tcase_add_test(t, swap_cost_measured);
  tcase_add_test(t, swap_priced_from_launches);
  tcase_add_test(t, measured_cost_counts);
  tcase_add_test(t, record_keeps_costs);
  tcase_add_test(t, record_keeps_launches);
  suite_add_tcase(s, t);
  return run_suite(s);
}
