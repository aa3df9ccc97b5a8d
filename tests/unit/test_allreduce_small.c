/* SPDX-License-Identifier: BSD-3-Clause */
/* Tests of the small-message all-reduce (direct exchange,
 * small_allreduce.c): every length up to the threshold, every type, over
 * shared memory and TCP, with and without MACs over the data; bitwise equal
 * results on every rank for values whose sum depends on the order; the
 * deterministic mode equal to the ring's; and ranks that really die
 * (SIGKILL) or hang (SIGSTOP) at each stage of the exchange or at any
 * moment, from inside (test hook) and from outside. Forked ranks:
 * rank_group.h. */
#include "config.h"

#include <resihp.h>

#include "../../libresihp/collectives/comm_internal.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rank_group.h"

/* Collectives that took the small path on this rank (the hook's last
 * stage runs once per exchange that completed). */
static int small_calls;
static void count_hook(resihp_comm_t *c, int stage) {
  if (stage == resihp_comm_size(c) - 1)
    small_calls++;
}

static const resihp_dtype_t all_dtypes[] = {RESIHP_FLOAT32, RESIHP_BFLOAT16,
                                            RESIHP_FLOAT64, RESIHP_FIXED64};

/* ---- correctness: every length up to the threshold, every type ---------- */

static int rank_lengths(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  if (make_comm(rank, n, SECRET, 65536, 0, &c))
    return 1;
  resihp__small_test_hook = count_hook;
  for (int d = 0; d < 4; d++) {
    resihp_dtype_t dt = all_dtypes[d];
    size_t esz = resihp__dtype_size(dt), top = 0;
    while (resihp__small_fits(c, (top + 1) * esz))
      top++; /* the largest count that takes the small path */
    if (top < (size_t)n + 1) {
      fprintf(stderr, "rank %d: threshold %zu elements too low\n", rank, top);
      return 1;
    }
    size_t counts[] = {0,          1,   (size_t)n - 1, (size_t)n + 1,
                       1000 % top, top, top + 1};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
      for (int op = 0; op < 2; op++)
        for (int inplace = 0; inplace < 2; inplace++) {
          size_t cnt = counts[k];
          uint8_t *in = malloc(cnt * 8 + 8), *out = malloc(cnt * 8 + 8);
          fill(in, cnt, dt, rank);
          int before = small_calls;
          int rc = inplace ? resihp_allreduce(c, in, cnt, dt, (resihp_op_t)op)
                           : resihp_allreduce_to(c, in, out, cnt, dt,
                                                 (resihp_op_t)op);
          int want_small = cnt > 0 && cnt <= top;
          if (rc ||
              check(inplace ? in : out, cnt, dt, (resihp_op_t)op, view_mask(c),
                    n) ||
              (small_calls > before) != want_small) {
            fprintf(stderr,
                    "rank %d count %zu dtype %d op %d in place %d: %s (small "
                    "path %d, expected %d)\n",
                    rank, cnt, (int)dt, op, inplace, resihp_strerror(rc),
                    small_calls > before, want_small);
            return 1;
          }
          free(in);
          free(out);
        }
  }
  resihp_comm_destroy(c);
  return 0;
}

/* _i: n = 2..8 over shared memory (0..6), n = 2..8 over TCP (7..13),
 * mac-data on shared memory and TCP (14, 15). */
START_TEST(small_lengths) {
  int n = _i < 14 ? 2 + _i % 7 : 3 + (_i - 14) * 2;
  transport = (_i >= 7 && _i < 14) || _i == 15 ? 1 : -1;
  mac_data = _i >= 14;
  detect_ms = CALM_DETECT_MS;
  small_max = -1;
  int st[MAXN];
  run_group(n, rank_lengths, NULL, st);
  expect_all_ok(n, st);
}
END_TEST

/* ---- bitwise equal everywhere; deterministic mode as the ring's --------- */

static uint64_t fnv1a(const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

struct hashrec {
  int rank;
  uint64_t hash;
};

#define RCOUNT 999 /* floats; odd, so no element count divides evenly */

/* Random non-exact values (seeded by rank): the float sum depends on the
 * order of the additions, so equal bytes on every rank show that all add
 * in the same order. Each rank sends the hash of its results. */
static int rank_bitwise(int rank, int n, void *arg) {
  int deterministic = *(int *)arg;
  resihp_comm_t *c;
  if (make_comm(rank, n, SECRET, 65536, deterministic, &c))
    return 1;
  resihp__small_test_hook = count_hook;
  srand(1000u + (unsigned)rank);
  float *f = malloc(RCOUNT * sizeof(float));
  double *d = malloc(RCOUNT * sizeof(double));
  uint16_t *h = malloc(RCOUNT * sizeof(uint16_t));
  for (int i = 0; i < RCOUNT; i++) {
    double v = ((double)rand() / RAND_MAX - 0.5) * 1e3 / (1 + rand() % 977);
    f[i] = (float)v;
    d[i] = v * 1.000000001;
    h[i] = resihp_bf16_from_float((float)v);
  }
  float *fo = malloc(RCOUNT * sizeof(float)),
        *fr = malloc(RCOUNT * sizeof(float));
  double *dout = malloc(RCOUNT * sizeof(double));
  uint16_t *ho = malloc(RCOUNT * sizeof(uint16_t));
  int rc = resihp_allreduce_to(c, f, fo, RCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM);
  if (!rc)
    rc = resihp_allreduce_to(c, d, dout, RCOUNT, RESIHP_FLOAT64, RESIHP_OP_AVG);
  if (!rc)
    rc = resihp_allreduce_to(c, h, ho, RCOUNT, RESIHP_BFLOAT16, RESIHP_OP_SUM);
  if (rc || small_calls != 3) {
    fprintf(stderr, "rank %d: %s, %d small calls\n", rank, resihp_strerror(rc),
            small_calls);
    return 1;
  }
  uint64_t hash = fnv1a(fo, RCOUNT * sizeof(float)) ^
                  fnv1a(dout, RCOUNT * sizeof(double)) * 3 ^
                  fnv1a(ho, RCOUNT * sizeof(uint16_t)) * 5;
  if (deterministic) {
    /* The same reduction by the ring (every rank switches alike): fixed
     * point is exact, so the result must not depend on the algorithm. */
    c->small_max = 0;
    rc = resihp_allreduce_to(c, f, fr, RCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM);
    if (rc || small_calls != 3 || memcmp(fo, fr, RCOUNT * sizeof(float))) {
      fprintf(stderr, "rank %d: ring %s, result %s the small path's\n", rank,
              resihp_strerror(rc),
              memcmp(fo, fr, RCOUNT * sizeof(float)) ? "differs from"
                                                     : "equals");
      return 1;
    }
  }
  struct hashrec r = {rank, hash};
  if (write(rec_pipe[1], &r, sizeof(r)) != (ssize_t)sizeof(r))
    return 1;
  resihp_comm_destroy(c);
  return 0;
}

/* _i: n = 3..8; odd _i deterministic; _i >= 6 over TCP. */
START_TEST(small_bitwise_equal) {
  int n = 3 + _i % 6, det = _i % 2;
  transport = _i >= 6 ? 1 : -1;
  mac_data = 0;
  detect_ms = CALM_DETECT_MS;
  small_max = -1;
  int st[MAXN];
  run_group(n, rank_bitwise, &det, st);
  expect_all_ok(n, st);
  struct hashrec r[MAXN];
  int k = 0;
  while (k < MAXN && read(rec_pipe[0], &r[k], sizeof(r[k])) == sizeof(r[k]))
    k++;
  close(rec_pipe[0]);
  ck_assert_int_eq(k, n);
  for (int i = 1; i < k; i++)
    ck_assert_msg(r[i].hash == r[0].hash, "rank %d result differs from rank %d",
                  r[i].rank, r[0].rank);
}
END_TEST

/* ---- faults ------------------------------------------------------------- */

#define KCOUNT 1000 /* floats: small path at 2..8 ranks */

enum how { HOOK_KILL, HOOK_STOP, OUTSIDE_KILL, OUTSIDE_STOP };

struct kill_sc {
  int n, victim, stage; /* stage: -1 random in 0..n-1 */
  enum how how;
  int tcp; /* 0 shared memory, 1 TCP, 2 shared memory + mac-data */
};

static int hook_stage;
static resihp_comm_t *hook_comm;
static enum how hook_how;
static void fault_hook(resihp_comm_t *c, int stage) {
  if (c != hook_comm || stage != hook_stage || resihp_comm_epoch(c) != 0)
    return;
  hook_comm = NULL; /* once */
  raise(hook_how == HOOK_KILL ? SIGKILL : SIGSTOP);
}

static int pid_pipe[2]; /* the victim's pid, to whoever signals it */

static int rank_kill(int rank, int n, void *arg) {
  const struct kill_sc *sc = arg;
  resihp_comm_t *c;
  detect_ms = DETECT_MS;
  if (make_comm(rank, n, SECRET, 65536, 0, &c))
    return 1;
  float *buf = malloc(KCOUNT * sizeof(float)),
        *orig = malloc(KCOUNT * sizeof(float));
  fill(buf, KCOUNT, RESIHP_FLOAT32, rank);
  if (resihp_allreduce(c, buf, KCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM) ||
      check(buf, KCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c), n)) {
    fprintf(stderr, "rank %d: the first (clean) all-reduce failed\n", rank);
    return 1;
  }
  int outside = sc->how == OUTSIDE_KILL || sc->how == OUTSIDE_STOP;
  pid_t victim_pid = 0;
  if (rank == sc->victim) {
    hook_comm = c;
    hook_stage = sc->stage;
    hook_how = sc->how;
    resihp__small_test_hook = fault_hook;
    if (outside && write(pid_pipe[1], &(pid_t){getpid()}, sizeof(pid_t)) !=
                       (ssize_t)sizeof(pid_t))
      return 1;
  } else if (outside && rank == (sc->victim + 1) % n &&
             read(pid_pipe[0], &victim_pid, sizeof(victim_pid)) !=
                 (ssize_t)sizeof(victim_pid)) {
    return 1;
  }
  /* The signaller strikes after a random number of clean collectives; the
   * victim loops until it is struck, so every survivor meets exactly one
   * failure whenever it comes. */
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  int strike_after = rand() % 20, done = 0, attempts = 0;
  double fail_ms = 0;
  for (;;) {
    if (victim_pid && done == strike_after)
      kill(victim_pid, sc->how == OUTSIDE_KILL ? SIGKILL : SIGSTOP);
    attempts++;
    fill(buf, KCOUNT, RESIHP_FLOAT32, rank);
    double t0 = now_ms();
    int rc = resihp_allreduce(c, buf, KCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM);
    if (rc == 0) {
      if (check(buf, KCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c),
                resihp_comm_size(c)))
        return 1;
      if (resihp_comm_epoch(c) > 0)
        break; /* the retry in the new view worked */
      done++;
      attempts = 0;
      continue;
    }
    fail_ms = now_ms() - t0;
    if (rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT) {
      fprintf(stderr, "rank %d: unexpected %s\n", rank, resihp_err_name(rc));
      return 1;
    }
    fill(orig, KCOUNT, RESIHP_FLOAT32, rank);
    if (memcmp(orig, buf, KCOUNT * sizeof(float))) {
      fprintf(stderr, "rank %d: buffer modified by a failed call\n", rank);
      return 1;
    }
    int failed[MAXN], nf = 0;
    if (resihp_comm_failed(c, failed, MAXN) < 1 || attempts > 2) {
      fprintf(stderr, "rank %d: failure without a suspect\n", rank);
      return 1;
    }
    rc = resihp_comm_shrink(c, NULL, 0, failed, MAXN, &nf);
    if (rc || nf < 1) {
      fprintf(stderr, "rank %d: shrink %s nf %d\n", rank, resihp_err_name(rc),
              nf);
      return 1;
    }
  }
  put_record(c, attempts, fail_ms);
  resihp_comm_destroy(c);
  return 0;
}

static const struct kill_sc kill_scenarios[] = {
    {2, 1, 0, HOOK_KILL, 0},  /* before its only send */
    {2, 0, 1, HOOK_KILL, 0},  /* everything arrived, before DONE */
    {3, 2, 1, HOOK_KILL, 0},  /* between two sends */
    {4, 1, -1, HOOK_KILL, 0}, /* random stage */
    {5, 3, -1, HOOK_KILL, 1}, /* TCP */
    {8, 5, -1, HOOK_KILL, 0},
    {6, 0, -1, HOOK_KILL, 2}, /* mac-data */
    {3, 1, -1, HOOK_STOP, 0}, /* hangs: the detection bound */
    {5, 4, -1, HOOK_STOP, 1},
    {4, 2, 0, OUTSIDE_KILL, 0}, /* at any moment, from another rank */
    {7, 6, 0, OUTSIDE_KILL, 1},
    {4, 1, 0, OUTSIDE_STOP, 0},
};

START_TEST(small_kill) {
  struct kill_sc sc = kill_scenarios[_i];
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  if (sc.stage < 0)
    sc.stage = rand() % sc.n;
  if (sc.how == OUTSIDE_KILL || sc.how == OUTSIDE_STOP)
    sc.stage = -1; /* the hook stays quiet */
  fprintf(stderr, "small kill scenario %d: n=%d victim=%d stage=%d how=%d %s\n",
          _i, sc.n, sc.victim, sc.stage, (int)sc.how,
          sc.tcp == 1   ? "tcp"
          : sc.tcp == 2 ? "shm, mac-data"
                        : "shm");
  transport = sc.tcp == 1 ? 1 : -1;
  mac_data = sc.tcp == 2;
  small_max = -1;
  ck_assert_int_eq(pipe(pid_pipe), 0);
  int st[MAXN];
  run_group(sc.n, rank_kill, &sc, st);
  close(pid_pipe[0]);
  close(pid_pipe[1]);
  struct record rec[MAXN];
  int k = read_records(rec, MAXN);
  for (int r = 0; r < sc.n; r++) {
    if (r == sc.victim)
      ck_assert_msg(WIFSIGNALED(st[r]), "victim %d status %#x", r, st[r]);
    else
      ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0,
                    "rank %d status %#x", r, st[r]);
  }
  ck_assert_int_eq(k, sc.n - 1);
  for (int i = 0; i < k; i++) {
    /* One failed call, then the exact retry in the same new view. */
    ck_assert_int_eq(rec[i].attempts, 2);
    ck_assert_int_eq(rec[i].epoch, 1);
    ck_assert_uint_eq(rec[i].members, rec[0].members);
  }
  ck_assert(!(rec[0].members >> sc.victim & 1));
  ck_assert_int_eq(__builtin_popcountll(rec[0].members), sc.n - 1);
  fprintf(stderr, "  %d survivors, failed call returned after %.0f ms\n", k,
          rec[0].fail_ms);
}
END_TEST

/* ---- agreement: a member stopped, then continued ------------------------
 * Rank 1 stops (SIGSTOP, from its own hook) before it sends anything; rank
 * 0 gives up on it; then rank 0 continues it (SIGCONT) and stays alive
 * without taking part any more. Rank 1 then finds rank 0's contribution,
 * which left before rank 0 gave up, and completes its exchange - but the
 * call must still fail there as it failed on rank 0 (the commit round:
 * rank 0 never said it was done), with rank 1's buffer untouched. Over
 * shared memory (_i 0: the commit's votes in the rings) and TCP (_i 1:
 * its frames). */
static int cont_pipe[2]; /* rank 1 -> rank 0: its call returned */

static int rank_continued(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  detect_ms = DETECT_MS;
  if (make_comm(rank, n, SECRET, 65536, 0, &c))
    return 1;
  enum { COUNT = 256 };
  float buf[COUNT], orig[COUNT];
  fill(buf, COUNT, RESIHP_FLOAT32, rank);
  memcpy(orig, buf, sizeof(buf));
  pid_t victim = 0;
  if (rank == 1) {
    hook_comm = c;
    hook_stage = 0;
    hook_how = HOOK_STOP;
    resihp__small_test_hook = fault_hook;
    if (write(pid_pipe[1], &(pid_t){getpid()}, sizeof(pid_t)) !=
        (ssize_t)sizeof(pid_t))
      return 1;
  } else if (read(pid_pipe[0], &victim, sizeof(victim)) !=
             (ssize_t)sizeof(victim)) {
    return 1;
  }
  int rc = resihp_allreduce(c, buf, COUNT, RESIHP_FLOAT32, RESIHP_OP_SUM);
  if (!rc || memcmp(buf, orig, sizeof(buf))) {
    fprintf(stderr, "rank %d: the call %s\n", rank,
            rc ? "changed the buffer" : "succeeded");
    return 1;
  }
  if (rank == 0) {
    char done;
    kill(victim, SIGCONT);
    if (read(cont_pipe[0], &done, 1) != 1) /* alive until rank 1 decided */
      return 1;
  } else if (write(cont_pipe[1], "d", 1) != 1) {
    return 1;
  }
  resihp_comm_destroy(c);
  return 0;
}

START_TEST(small_stopped_then_continued) {
  transport = _i ? 1 : -1;
  small_max = -1;
  ck_assert_int_eq(pipe(pid_pipe), 0);
  ck_assert_int_eq(pipe(cont_pipe), 0);
  int st[MAXN];
  run_group(2, rank_continued, NULL, st);
  for (int k = 0; k < 2; k++) {
    close(pid_pipe[k]);
    close(cont_pipe[k]);
  }
  for (int r = 0; r < 2; r++)
    ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0,
                  "rank %d status %#x", r, st[r]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("allreduce_small");
  TCase *tc = tcase_create("small");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, small_lengths, 0, 16);
  tcase_add_loop_test(tc, small_bitwise_equal, 0, 12);
  tcase_add_loop_test(
      tc, small_kill, 0,
      (int)(sizeof(kill_scenarios) / sizeof(kill_scenarios[0])));
  tcase_add_loop_test(tc, small_stopped_then_continued, 0, 2);
  suite_add_tcase(s, tc);
  return run_suite(s);
}
