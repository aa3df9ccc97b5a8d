/* SPDX-License-Identifier: BSD-3-Clause */
/* Tests of the fault-tolerant all-reduce: real processes on loopback that
 * really die (SIGKILL), hang (SIGSTOP) or lose a link (shutdown), plus
 * hostile peers, authentication and the deterministic mode. Each group
 * test forks N ranks (rank_group.h). */
#include "config.h"

#include <resihp.h>

#include "../../libresihp/collectives/comm_internal.h"
#include "../../libresihp/transport/mesh.h"
#include "../../libresihp/transport/msgauth.h"
#include "../../libresihp/transport/sha256.h"
#include "../../libresihp/transport/shm.h"
#include "../../libresihp/transport/transport.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rank_group.h"

/* ---- correctness: any length, every type -------------------------------- */

static int rank_lengths(int rank, int n, void *arg) {
  resihp_comm_t *c;
  int rc = make_comm(rank, n, SECRET, 4096, 0, &c);
  if (rc) {
    fprintf(stderr, "rank %d: create: %s\n", rank, resihp_strerror(rc));
    return 1;
  }
  size_t counts[] = {0, 1, (size_t)n - 1, (size_t)n + 1, 1000, 12345};
  resihp_dtype_t dts[] = {RESIHP_FLOAT32, RESIHP_BFLOAT16, RESIHP_FLOAT64};
  for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
    for (int d = 0; d < 3; d++)
      for (int op = 0; op < 2; op++) {
        size_t cnt = counts[k];
        void *buf = malloc(cnt * 8 + 8);
        fill(buf, cnt, dts[d], rank);
        rc = resihp_allreduce(c, buf, cnt, dts[d], (resihp_op_t)op);
        if (rc || check(buf, cnt, dts[d], (resihp_op_t)op, view_mask(c), n)) {
          fprintf(stderr, "rank %d count %zu dtype %d op %d: %s\n", rank, cnt,
                  (int)dts[d], op, resihp_strerror(rc));
          return 1;
        }
        free(buf);
      }
  resihp_comm_destroy(c);
  return 0;
}

START_TEST(allreduce_lengths) {
  int n = 2 + _i / 2 % 4; /* 2..5 ranks, over shared memory and over TCP */
  transport = _i % 2 ? 1 : -1;
  mac_data = _i >= 8; /* and again with MACs over the data (3..5 ranks) */
  int st[MAXN];
  run_group(n, rank_lengths, NULL, st);
  expect_all_ok(n, st);
}
END_TEST

/* ---- faults ------------------------------------------------------------- */

enum fault { F_KILL, F_STOP, F_CUT, F_KILL_IDLE };

struct scenario {
  int n;
  enum fault fault;
  int tcp; /* 1: TCP only; 0: default transport (shared memory here); 2:
            * default transport, and rank victim2 is killed during the
            * retry (a second failure, in epoch 1); 3: TCP only and 4:
            * default transport, both with mac-data (frames cut short by
            * the abort must still pass their MAC in the next epoch) */
  int victim;
  int step;     /* -1: random */
  long chunk;   /* -1: random; -2: last chunk */
  unsigned seed;
};

#define FCOUNT 10000
#define VICTIM2 3
#define FCHUNK 4096

static struct scenario *cur_sc;
static int hook_step;
static long hook_chunk;
static uint32_t hook_epoch; /* fire only in this membership epoch */
static resihp_comm_t *hook_comm;

static void fault_hook(resihp_comm_t *c, int step, size_t chunk) {
  if (step != hook_step || (long)chunk != hook_chunk || c != hook_comm ||
      resihp_comm_epoch(c) != hook_epoch)
    return;
  hook_comm = NULL; /* once */
  switch (cur_sc->fault) {
  case F_KILL:
    raise(SIGKILL);
    break;
  case F_STOP:
    raise(SIGSTOP);
    break;
  case F_CUT: {
    int n = resihp_comm_size(c), p = resihp_comm_rank(c);
    resihp_comm_test_cut_link(c, resihp_comm_member(c, (p + 1) % n));
    break;
  }
  case F_KILL_IDLE:
    break;
  }
}

static int rank_fault(int rank, int n, void *arg) {
  struct scenario *sc = arg;
  resihp_comm_t *c;
  detect_ms = DETECT_MS;
  int rc = make_comm(rank, n, SECRET, FCHUNK, 0, &c);
  if (rc)
    return 1;
  cur_sc = sc;
  float *buf = malloc(FCOUNT * sizeof(float));
  /* One clean collective first, so that the fault hits a warm ring. */
  fill(buf, FCOUNT, RESIHP_FLOAT32, rank);
  if (resihp_allreduce(c, buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM) ||
      check(buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c), n)) {
    fprintf(stderr, "rank %d: the first (clean) all-reduce failed\n", rank);
    return 1;
  }
  if (sc->fault == F_KILL_IDLE && rank == sc->victim)
    raise(SIGKILL);
  if (rank == sc->victim) {
    hook_comm = c;
    hook_step = sc->step;
    hook_chunk = sc->chunk;
    hook_epoch = 0;
    resihp__ring_test_hook = fault_hook;
  }
  if (sc->tcp == 2 && rank == VICTIM2) {
    hook_comm = c;
    hook_step = 0;
    hook_chunk = 1;
    hook_epoch = 1;
    resihp__ring_test_hook = fault_hook;
  }
  if (sc->fault == F_KILL_IDLE) {
    struct timespec ts = {1, 300 * 1000000L}; /* > DETECT_MS */
    nanosleep(&ts, NULL); /* let the monitor notice between collectives */
  }
  int attempts = 0;
  double fail_ms = 0;
  for (;;) {
    attempts++;
    fill(buf, FCOUNT, RESIHP_FLOAT32, rank);
    double t0 = now_ms();
    rc = resihp_allreduce(c, buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM);
    if (rc == 0)
      break;
    if (attempts == 1)
      fail_ms = now_ms() - t0;
    if (rc == RESIHP_EEXCLUDED)
      return 3;
    if (rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT) {
      fprintf(stderr, "rank %d: unexpected %s\n", rank, resihp_err_name(rc));
      return 1;
    }
    /* The caller's buffer must be exactly its input. */
    float *orig = malloc(FCOUNT * sizeof(float));
    fill(orig, FCOUNT, RESIHP_FLOAT32, rank);
    if (memcmp(orig, buf, FCOUNT * sizeof(float))) {
      fprintf(stderr, "rank %d: buffer modified by a failed call\n", rank);
      return 1;
    }
    free(orig);
    int failed[MAXN], nf = 0;
    if (resihp_comm_failed(c, failed, MAXN) < 1) {
      fprintf(stderr, "rank %d: failure without a suspect\n", rank);
      return 1;
    }
    rc = resihp_comm_shrink(c, NULL, 0, failed, MAXN, &nf);
    if (rc == RESIHP_EEXCLUDED)
      return 3;
    if (rc || nf < 1 || attempts > 3) {
      fprintf(stderr, "rank %d: shrink %s nf %d\n", rank, resihp_err_name(rc),
              nf);
      return 1;
    }
  }
  if (check(buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c),
            resihp_comm_size(c)))
    return 1;
  /* The new view keeps working. */
  fill(buf, FCOUNT, RESIHP_FLOAT32, rank);
  rc = resihp_allreduce(c, buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM);
  if (rc == RESIHP_EEXCLUDED)
    return 3;
  if (rc ||
      check(buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c),
            resihp_comm_size(c))) {
    fprintf(stderr, "rank %d: the all-reduce after the recovery: %s\n", rank,
            resihp_err_name(rc));
    return 1;
  }
  put_record(c, attempts, fail_ms);
  resihp_comm_destroy(c);
  free(buf);
  return 0;
}

static const struct scenario scenarios[] = {
    {2, F_KILL, 0, 1, 0, 0, 0},   /* first chunk */
    {3, F_KILL, 0, 0, 3, -2, 0},  /* last chunk of the last step */
    {4, F_KILL, 0, 2, -1, -1, 0}, /* random point */
    {5, F_KILL, 0, 4, -1, -1, 0},
    {8, F_KILL, 0, 5, -1, -1, 0},
    {3, F_STOP, 0, 1, 0, 0, 0},
    {4, F_STOP, 0, 3, 5, -2, 0},
    {6, F_STOP, 0, 2, -1, -1, 0},
    {3, F_CUT, 0, 0, 1, 1, 0},
    {5, F_CUT, 0, 3, 7, -2, 0},
    {4, F_KILL_IDLE, 0, 1, 0, 0, 0},
    /* The same over TCP only. */
    {2, F_KILL, 1, 0, 0, 0, 0},
    {4, F_KILL, 1, 1, -1, -1, 0},
    {6, F_KILL, 1, 5, 9, -2, 0},
    {4, F_STOP, 1, 2, -1, -1, 0},
    {4, F_CUT, 1, 1, -1, -1, 0},
    /* With MACs over the data. */
    {4, F_KILL, 3, 2, -1, -1, 0},
    {4, F_STOP, 4, 1, -1, -1, 0},
    {5, F_CUT, 3, 2, -1, -1, 0},
    /* Two failures: rank 1 dies, then rank 3 during the retry. */
    {5, F_KILL, 2, 1, -1, -1, 0},
    {6, F_STOP, 2, 0, 2, -2, 0},
};

START_TEST(allreduce_faults) {
  struct scenario sc = scenarios[_i];
  const char *only = getenv("RESIHP_TEST_SCENARIO"); /* for debugging */
  if (only && atoi(only) != _i)
    return;
  unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
  srand(seed);
  int nsteps = 2 * (sc.n - 1);
  size_t seg = FCOUNT / (size_t)sc.n, per = FCHUNK / sizeof(float);
  long nch = (long)((seg + per - 1) / per);
  if (sc.step < 0)
    sc.step = rand() % nsteps;
  if (sc.chunk == -1)
    sc.chunk = rand() % nch;
  if (sc.chunk == -2)
    sc.chunk = nch - 1;
  fprintf(stderr,
          "fault scenario %d: n=%d fault=%d victim=%d step=%d chunk=%ld %s "
          "(seed %u)\n",
          _i, sc.n, (int)sc.fault, sc.victim, sc.step, sc.chunk,
          sc.tcp == 1   ? "tcp"
          : sc.tcp == 2 ? "shm, 2nd failure"
          : sc.tcp == 3 ? "tcp, mac-data"
          : sc.tcp == 4 ? "shm, mac-data"
                        : "shm",
          seed);
  transport = sc.tcp == 1 || sc.tcp == 3 ? 1 : -1;
  mac_data = sc.tcp >= 3;
  int st[MAXN];
  run_group(sc.n, rank_fault, &sc, st);
  struct record rec[MAXN];
  int k = read_records(rec, MAXN);
  int survivors = 0, excluded = 0;
  for (int r = 0; r < sc.n; r++) {
    int cut_end = sc.fault == F_CUT &&
                  (r == sc.victim || r == (sc.victim + 1) % sc.n);
    if ((r == sc.victim && sc.fault != F_CUT) ||
        (sc.tcp == 2 && r == VICTIM2)) {
      ck_assert_msg(WIFSIGNALED(st[r]), "victim %d status %#x", r, st[r]);
      continue;
    }
    ck_assert_msg(WIFEXITED(st[r]), "rank %d status %#x", r, st[r]);
    if (cut_end && WEXITSTATUS(st[r]) == 3) {
      excluded++;
      continue;
    }
    ck_assert_msg(WEXITSTATUS(st[r]) == 0, "rank %d exit %d", r,
                  WEXITSTATUS(st[r]));
    survivors++;
  }
  ck_assert_int_eq(k, survivors);
  ck_assert_int_ge(survivors, 1);
  double worst = 0;
  for (int i = 0; i < k; i++)
    worst = rec[i].fail_ms > worst ? rec[i].fail_ms : worst;
  /* Reported, not asserted: no timing assertions in tests. */
  fprintf(stderr,
          "  %d survivor(s), %d excluded, epoch %u, attempts %d, failed call "
          "returned after <= %.0f ms (bound %d ms)\n",
          survivors, excluded, rec[0].epoch, rec[0].attempts, worst,
          DETECT_MS);
  if (sc.fault == F_CUT) /* never both ends of the cut link */
    ck_assert(((rec[0].members >> sc.victim) & 1) == 0 ||
              ((rec[0].members >> ((sc.victim + 1) % sc.n)) & 1) == 0);
  for (int i = 1; i < k; i++) {
    ck_assert_int_eq(rec[i].epoch, rec[0].epoch);
    ck_assert_uint_eq(rec[i].members, rec[0].members);
    ck_assert_int_eq(rec[i].attempts, rec[0].attempts);
  }
  /* The failed ranks are out of the view. */
  /* The second victim dies in its first call of epoch 1, which it may
   * reach while a slower survivor is still agreeing on epoch 1: that one
   * then sees it dead (its connection closed) and the survivors agree on
   * both at once. Either way each failed call cost one shrink. */
  if (sc.tcp == 2) {
    ck_assert(!(rec[0].members >> VICTIM2 & 1));
    ck_assert(rec[0].attempts == 2 || rec[0].attempts == 3);
    ck_assert_int_eq(rec[0].epoch, (uint32_t)rec[0].attempts - 1);
  }
  if (sc.fault != F_CUT)
    ck_assert(!(rec[0].members >> sc.victim & 1));
  else
    ck_assert_int_eq(excluded + survivors, sc.n);
}
END_TEST

/* ---- the detection bound is the one the user set -------------------------
 * Rank 2 stops itself (SIGSTOP) at the start of a collective. The first
 * time the parent continues it after PAUSE_MS, a little less than the
 * bound: that collective must succeed everywhere with nobody suspected.
 * The second time it stays stopped: the others must declare it failed,
 * agree and finish without it. (With the old "90 % of the bound in
 * silence" a pause of PAUSE_MS was always declared a failure.) The bound is
 * large so that PAUSE_MS can stay 400 ms below it. */
#define PAUSE_BOUND_MS 6000
#define PAUSE_MS 5600
#define PAUSE_VICTIM 2

static void pause_hook(resihp_comm_t *c, int step, size_t chunk) {
  (void)c;
  if (step == 0 && chunk == 0 && hook_comm) {
    hook_comm = NULL; /* once per arming */
    raise(SIGSTOP);
  }
}

static int rank_pause(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  detect_ms = PAUSE_BOUND_MS;
  if (make_comm(rank, n, SECRET, FCHUNK, 0, &c))
    return 1;
  float *buf = malloc(FCOUNT * sizeof(float));
  fill(buf, FCOUNT, RESIHP_FLOAT32, rank);
  if (resihp_allreduce(c, buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM))
    return 1;
  if (rank == PAUSE_VICTIM) {
    resihp__ring_test_hook = pause_hook;
    hook_comm = c;
  }
  /* Paused for less than the bound: tolerated. */
  fill(buf, FCOUNT, RESIHP_FLOAT32, rank);
  int rc = resihp_allreduce(c, buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM);
  if (rc || resihp_comm_failed(c, NULL, 0) ||
      check(buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c), n)) {
    fprintf(stderr, "rank %d: a pause of %d ms with a bound of %d ms: %s\n",
            rank, PAUSE_MS, PAUSE_BOUND_MS, resihp_err_name(rc));
    return 1;
  }
  if (rank == PAUSE_VICTIM)
    hook_comm = c; /* and now for good */
  /* Stopped for good: detected, removed, and the others go on. */
  fill(buf, FCOUNT, RESIHP_FLOAT32, rank);
  double t0 = now_ms();
  rc = resihp_allreduce(c, buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM);
  double fail_ms = now_ms() - t0;
  int failed[MAXN], nf = 0;
  if ((rc != RESIHP_ETIMEDOUT && rc != RESIHP_EPEER) ||
      resihp_comm_failed(c, failed, MAXN) != 1 || failed[0] != PAUSE_VICTIM) {
    fprintf(stderr, "rank %d: a rank stopped for good: %s\n", rank,
            resihp_err_name(rc));
    return 1;
  }
  if (resihp_comm_shrink(c, NULL, 0, failed, MAXN, &nf) || nf != 1)
    return 1;
  fill(buf, FCOUNT, RESIHP_FLOAT32, rank);
  if (resihp_allreduce(c, buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM) ||
      check(buf, FCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c),
            resihp_comm_size(c)))
    return 1;
  put_record(c, 1, fail_ms);
  resihp_comm_destroy(c);
  free(buf);
  return 0;
}

START_TEST(pause_below_bound_tolerated_beyond_detected) {
  int st[MAXN];
  resume_rank = PAUSE_VICTIM;
  resume_ms = PAUSE_MS;
  run_group(3, rank_pause, NULL, st);
  resume_rank = -1;
  struct record rec[MAXN];
  int k = read_records(rec, MAXN);
  ck_assert_msg(WIFSIGNALED(st[PAUSE_VICTIM]), "victim status %#x",
                st[PAUSE_VICTIM]);
  for (int r = 0; r < 2; r++)
    ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0,
                  "rank %d status %#x", r, st[r]);
  ck_assert_int_eq(k, 2);
  for (int i = 0; i < k; i++) /* reported, not asserted */
    fprintf(stderr, "  rank %d: stopped peer declared failed after <= %.0f ms "
                    "(bound %d ms + heartbeat)\n",
            rec[i].world_rank, rec[i].fail_ms, PAUSE_BOUND_MS);
}
END_TEST

/* ---- deterministic mode --------------------------------------------------- */

#define DCOUNT 3001
#define MICRO 12

static float micro_value(int mb, size_t i) {
  /* Values of very different magnitudes, where float sums depend on order. */
  uint32_t x = (uint32_t)(mb * 2654435761u) ^ (uint32_t)(i * 40503u);
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  float f = (float)(x & 0xffff) / 65536.0f - 0.5f;
  return f * powf(2.0f, (float)((int)(x >> 16) % 20 - 10));
}

/* Microbatches 0..MICRO-1 spread round-robin over the current view. */
static void accumulate(resihp_comm_t *c, int64_t *acc) {
  float tmp[DCOUNT];
  memset(acc, 0, DCOUNT * sizeof(int64_t));
  for (int mb = 0; mb < MICRO; mb++) {
    if (mb % resihp_comm_size(c) != resihp_comm_rank(c))
      continue;
    for (size_t i = 0; i < DCOUNT; i++)
      tmp[i] = micro_value(mb, i);
    resihp_fixed_accumulate_float(acc, tmp, DCOUNT, 32);
  }
}

struct det {
  int kill_victim;  /* -1 none */
  const char *path; /* where view rank 0 writes the result */
};

static int rank_det(int rank, int n, void *arg) {
  struct det *d = arg;
  resihp_comm_t *c;
  detect_ms = DETECT_MS;
  if (make_comm(rank, n, SECRET, 4096, 1, &c))
    return 1;
  int64_t acc[DCOUNT];
  if (rank == d->kill_victim) {
    hook_comm = c;
    hook_step = 1;
    hook_chunk = 0;
    hook_epoch = 0;
    static struct scenario s = {.fault = F_KILL};
    cur_sc = &s;
    resihp__ring_test_hook = fault_hook;
  }
  int rc;
  for (int attempt = 0;; attempt++) {
    accumulate(c, acc);
    rc = resihp_allreduce(c, acc, DCOUNT, RESIHP_FIXED64, RESIHP_OP_SUM);
    if (!rc)
      break;
    if (attempt > 2 || resihp_comm_shrink(c, NULL, 0, NULL, 0, NULL))
      return 1;
  }
  float res[DCOUNT];
  resihp_fixed_to_float(res, acc, DCOUNT, 32, 1.0);
  /* Deterministic float mode too: the result equals the exact sum of the
   * inputs' fixed-point images, whatever the ring order. */
  float x[DCOUNT], want[DCOUNT];
  int64_t sum[DCOUNT], tmp[DCOUNT];
  for (size_t i = 0; i < DCOUNT; i++)
    x[i] = micro_value(100 + resihp_comm_world_rank(c), i);
  memset(sum, 0, sizeof(sum));
  for (int i = 0; i < resihp_comm_size(c); i++) {
    float y[DCOUNT];
    for (size_t j = 0; j < DCOUNT; j++)
      y[j] = micro_value(100 + resihp_comm_member(c, i), j);
    resihp_fixed_from_float(tmp, y, DCOUNT, resihp_fixed_frac_bits());
    for (size_t j = 0; j < DCOUNT; j++)
      sum[j] = (int64_t)((uint64_t)sum[j] + (uint64_t)tmp[j]);
  }
  resihp_fixed_to_float(want, sum, DCOUNT, resihp_fixed_frac_bits(), 1.0);
  if (resihp_allreduce(c, x, DCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM) ||
      memcmp(x, want, sizeof(x))) {
    fprintf(stderr, "rank %d: deterministic float mode differs\n", rank);
    return 1;
  }
  if (resihp_comm_rank(c) == 0) {
    FILE *f = fopen(d->path, "wb");
    if (!f || fwrite(res, sizeof(res), 1, f) != 1)
      return 1;
    fclose(f);
  }
  resihp_comm_destroy(c);
  return 0;
}

START_TEST(deterministic_with_failure) {
  char a[] = "/tmp/resihp-det-XXXXXX", b[] = "/tmp/resihp-det-XXXXXX",
       e[] = "/tmp/resihp-det-XXXXXX";
  close(mkstemp(a));
  close(mkstemp(b));
  close(mkstemp(e));
  int st[MAXN];
  /* Failure-free with 4 replicas, failure-free with 3, and 4 replicas of
   * which one dies mid-collective and the survivors redo its microbatches:
   * the same bits every time. */
  struct det d4 = {-1, a}, d3 = {-1, b}, dk = {2, e};
  run_group(4, rank_det, &d4, st);
  expect_all_ok(4, st);
  close(rec_pipe[0]);
  run_group(3, rank_det, &d3, st);
  expect_all_ok(3, st);
  close(rec_pipe[0]);
  run_group(4, rank_det, &dk, st);
  for (int r = 0; r < 4; r++)
    if (r != 2)
      ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0, "rank %d",
                    r);
  close(rec_pipe[0]);
  float ra[DCOUNT], rb[DCOUNT], re[DCOUNT];
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb"), *fe = fopen(e, "rb");
  ck_assert(fa && fb && fe);
  ck_assert_int_eq(fread(ra, sizeof(ra), 1, fa), 1);
  ck_assert_int_eq(fread(rb, sizeof(rb), 1, fb), 1);
  ck_assert_int_eq(fread(re, sizeof(re), 1, fe), 1);
  fclose(fa);
  fclose(fb);
  fclose(fe);
  unlink(a);
  unlink(b);
  unlink(e);
  ck_assert(memcmp(ra, rb, sizeof(ra)) == 0);
  ck_assert(memcmp(ra, re, sizeof(ra)) == 0);
  /* And a plain float sum in another order would differ: the test has
   * teeth. */
  int differs = 0;
  for (size_t i = 0; i < DCOUNT && !differs; i++) {
    float f1 = 0, f2 = 0;
    for (int mb = 0; mb < MICRO; mb++)
      f1 += micro_value(mb, i);
    for (int mb = MICRO - 1; mb >= 0; mb--)
      f2 += micro_value(mb, i);
    differs = f1 != f2;
  }
  ck_assert(differs);
}
END_TEST

START_TEST(fixed_point_helpers) {
  float x[] = {1.5f, -2.25f, 0.0f, 1e-12f, 3e12f, -3e12f, NAN};
  int64_t q[7];
  resihp_fixed_from_float(q, x, 7, 32);
  ck_assert_int_eq(q[0], (int64_t)3 << 31);
  ck_assert_int_eq(q[1], -((int64_t)9 << 30));
  ck_assert_int_eq(q[2], 0);
  ck_assert_int_eq(q[3], 0); /* below resolution */
  ck_assert_int_eq(q[4], INT64_MAX);
  ck_assert_int_eq(q[5], INT64_MIN);
  ck_assert_int_eq(q[6], 0);
  float back[2];
  resihp_fixed_to_float(back, q, 2, 32, 1.0);
  ck_assert(back[0] == 1.5f && back[1] == -2.25f);
  resihp_fixed_to_float(back, q, 2, 32, 2.0);
  ck_assert(back[0] == 0.75f);
  ck_assert_int_eq(resihp_bf16_from_float(1.0f), 0x3f80);
  ck_assert(resihp_bf16_to_float(resihp_bf16_from_float(3.0f)) == 3.0f);
  /* 1 + 2^-8 is a tie in bf16: rounds to even (1.0). */
  ck_assert_int_eq(resihp_bf16_from_float(1.00390625f), 0x3f80);
}
END_TEST

/* ---- SHA-256 / HMAC vectors ---------------------------------------------- */

static void hex(const uint8_t *d, char *out) {
  for (int i = 0; i < 32; i++)
    sprintf(out + 2 * i, "%02x", d[i]);
}

START_TEST(sha256_vectors) {
  uint8_t d[32];
  char h[65];
  resihp__sha256_t s;
  resihp__sha256_init(&s);
  resihp__sha256_update(&s, "abc", 3);
  resihp__sha256_final(&s, d);
  hex(d, h);
  ck_assert_str_eq(
      h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m =
      "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  resihp__sha256_init(&s);
  resihp__sha256_update(&s, m, strlen(m));
  resihp__sha256_final(&s, d);
  hex(d, h);
  ck_assert_str_eq(
      h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  /* RFC 4231 test case 1 and 2. */
  uint8_t key[20];
  memset(key, 0x0b, 20);
  const void *parts[1] = {"Hi There"};
  size_t lens[1] = {8};
  resihp__hmac_sha256(key, 20, parts, lens, 1, d);
  hex(d, h);
  ck_assert_str_eq(
      h, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  const void *p2[2] = {"what do ya want ", "for nothing?"};
  size_t l2[2] = {16, 12};
  resihp__hmac_sha256("Jefe", 4, p2, l2, 2, d);
  hex(d, h);
  ck_assert_str_eq(
      h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

/* The SHA-NI and the portable compression give the same digests, for
 * every length around block boundaries and input cut at odd places, and
 * the FIPS 180-4 million-'a' vector. */
static void digest_in_pieces(const uint8_t *d, size_t n, size_t piece,
                             uint8_t out[32]) {
  resihp__sha256_t s;
  resihp__sha256_init(&s);
  for (size_t off = 0; off < n; off += piece)
    resihp__sha256_update(&s, d + off, n - off < piece ? n - off : piece);
  resihp__sha256_final(&s, out);
}

START_TEST(sha256_implementations_agree) {
  static uint8_t data[200000];
  uint32_t x = 12345;
  for (size_t i = 0; i < sizeof(data); i++)
    data[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 24);
  size_t lens[] = {0, 1, 55, 56, 63, 64, 65, 127, 128, 129, 1000, 4096,
                   65537, sizeof(data)};
  for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
    uint8_t a[32], b[32];
    resihp__sha256_select(1);
    digest_in_pieces(data, lens[k], 7, a);
    resihp__sha256_select(0);
    digest_in_pieces(data, lens[k], lens[k] % 3 ? 1000 : 64, b);
    ck_assert_msg(!memcmp(a, b, 32), "length %zu differs", lens[k]);
  }
  memset(data, 'a', sizeof(data));
  for (int portable = 0; portable < 2; portable++) {
    resihp__sha256_t s;
    uint8_t d[32];
    char h[65];
    resihp__sha256_select(portable);
    resihp__sha256_init(&s);
    for (int i = 0; i < 5; i++)
      resihp__sha256_update(&s, data, 200000);
    resihp__sha256_final(&s, d);
    hex(d, h);
    ck_assert_str_eq(
        h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
  resihp__sha256_select(0);
}
END_TEST

/* Per-message MACs: both ends derive matching keys, each direction its own;
 * a forged, replayed, reordered or cross-direction message is refused. */
START_TEST(msgauth_seal_open) {
  const uint8_t secret[] = "job secret";
  resihp__msgauth_t srv, cli, other;
  resihp__msgauth_init(&srv, secret, 10, "coord", "NS", 2, "NC", 2, 0);
  resihp__msgauth_init(&cli, secret, 10, "coord", "NS", 2, "NC", 2, 1);
  resihp__msgauth_init(&other, secret, 10, "state", "NS", 2, "NC", 2, 1);
  uint8_t t1[RESIHP__MAC_LEN], t2[RESIHP__MAC_LEN], t3[RESIHP__MAC_LEN];
  const void *m1[1] = {"GO epoch=1"}, *m2[1] = {"GO epoch=2"};
  size_t l[1] = {10};
  resihp__msgauth_seal(&srv, m1, l, 1, t1);
  resihp__msgauth_seal(&srv, m2, l, 1, t2);
  /* out of order, or a forged body with a real tag: refused, no state change */
  ck_assert_int_eq(resihp__msgauth_open(&cli, m2, l, 1, t2), RESIHP_EAUTH);
  ck_assert_int_eq(resihp__msgauth_open(&cli, m2, l, 1, t1), RESIHP_EAUTH);
  ck_assert_int_eq(resihp__msgauth_open(&cli, m1, l, 1, t1), 0);
  /* replay of the first */
  ck_assert_int_eq(resihp__msgauth_open(&cli, m1, l, 1, t1), RESIHP_EAUTH);
  ck_assert_int_eq(resihp__msgauth_open(&cli, m2, l, 1, t2), 0);
  /* the client's own direction uses another key: a server tag reflected
   * back is refused; another channel's keys differ */
  resihp__msgauth_seal(&cli, m1, l, 1, t3);
  ck_assert_int_ne(memcmp(t3, t1, sizeof(t1)), 0);
  ck_assert_int_eq(resihp__msgauth_open(&srv, m1, l, 1, t1), RESIHP_EAUTH);
  ck_assert_int_eq(resihp__msgauth_open(&srv, m1, l, 1, t3), 0);
  resihp__msgauth_seal(&other, m1, l, 1, t3);
  ck_assert_int_ne(memcmp(t3, t1, sizeof(t1)), 0);
  /* the parts are concatenated: a split does not change the tag */
  resihp__msgauth_t a, b;
  resihp__msgauth_init(&a, secret, 10, "coord", "NS", 2, "NC", 2, 0);
  resihp__msgauth_init(&b, secret, 10, "coord", "NS", 2, "NC", 2, 1);
  const void *split[2] = {"GO ep", "och=1"};
  size_t ls[2] = {5, 5};
  resihp__msgauth_seal(&a, split, ls, 2, t1);
  ck_assert_int_eq(resihp__msgauth_open(&b, m1, l, 1, t1), 0);
  /* the tag is HMAC(K_dir, seq | message) truncated (msgauth.h), whether
   * computed in one go or streamed: check against the one-shot HMAC */
  {
    resihp__msgauth_t x;
    resihp__msgauth_init(&x, secret, 10, "coord", "NS", 2, "NC", 2, 0);
    x.tx.seq = 7;
    uint8_t seq[8] = {7, 0, 0, 0, 0, 0, 0, 0}, full[RESIHP__SHA256_LEN];
    const void *hp[2] = {seq, "GO epoch=1"};
    size_t hl[2] = {8, 10};
    resihp__hmac_sha256(x.tx.key, sizeof(x.tx.key), hp, hl, 2, full);
    resihp__msgauth_seal(&x, m1, l, 1, t2);
    ck_assert_int_eq(memcmp(t2, full, RESIHP__MAC_LEN), 0);
    ck_assert_uint_eq(x.tx.seq, 8);
  }
  /* hex round trip; malformed hex refused */
  char h[RESIHP__MAC_HEX + 1];
  resihp__mac_to_hex(t1, h);
  ck_assert_uint_eq(strlen(h), RESIHP__MAC_HEX);
  ck_assert_int_eq(resihp__mac_from_hex(h, strlen(h), t2), 0);
  ck_assert_int_eq(memcmp(t1, t2, sizeof(t1)), 0);
  ck_assert_int_eq(resihp__mac_from_hex(h, strlen(h) - 1, t2), RESIHP_EAUTH);
  h[3] = 'G';
  ck_assert_int_eq(resihp__mac_from_hex(h, strlen(h), t2), RESIHP_EAUTH);
}
END_TEST
END_TEST

/* ---- authentication ------------------------------------------------------ */

/* The impostor finds out first: the server's proof fails its check, and
 * it never answers (the server, which kept nothing of its hello, has
 * nothing to refuse). The genuine rank still gets in. */
static int rank_auth(int rank, int n, void *arg) {
  resihp_comm_t *c;
  if (rank == 0) {
    int rc = make_comm(0, 2, SECRET, 4096, 0, &c);
    if (rc) {
      fprintf(stderr, "rank 0: rc %d\n", rc);
      return 1;
    }
  } else if (rank == 1) {
    /* The impostor: wrong secret. Its own create fails with EAUTH. */
    lfds[1] = -1;
    int rc = make_comm(1, 2, "not-the-secret", 4096, 0, &c);
    if (rc != RESIHP_EAUTH) {
      fprintf(stderr, "impostor: rc %d\n", rc);
      return 1;
    }
    return 0;
  } else {
    /* The genuine rank 1 arrives after the impostor was refused. */
    struct timespec ts = {0, 400 * 1000000L};
    nanosleep(&ts, NULL);
    lfds[1] = lfds[2];
    if (make_comm(1, 2, SECRET, 4096, 0, &c))
      return 1;
  }
  float x[100];
  fill(x, 100, RESIHP_FLOAT32, resihp_comm_world_rank(c));
  if (resihp_allreduce(c, x, 100, RESIHP_FLOAT32, RESIHP_OP_SUM) ||
      check(x, 100, RESIHP_FLOAT32, RESIHP_OP_SUM, 3, 2))
    return 1;
  resihp_comm_destroy(c);
  return 0;
}

START_TEST(auth_refuses_wrong_secret) {
  int st[MAXN];
  run_group(3, rank_auth, NULL, st);
  close(rec_pipe[0]);
  expect_all_ok(3, st);
}
END_TEST

/* ---- pre-authentication stalls ------------------------------------------
 * Rank 3 of the group plays an attacker who knows the endpoints but not the
 * secret. Before the real ranks start it opens connections to rank 0's
 * port that stay idle, connections that drip a plausible hello a byte at a
 * time, and connections that drip garbage; once the ranks run it opens more
 * idle ones than the server keeps pending. The three real ranks must set up
 * and all-reduce as if nobody was there (their 10 s connect timeout is the
 * only clock: with one idle connection costing its 3 s handshake deadline
 * in turn, the old server ran out of it). */
#define STALL_IDLE 60
#define STALL_LATE 40
#define STALL_DRIP 4
static int stall_gate[2];

static int open_to(const char *ep) {
  int port = atoi(strrchr(ep, ':') + 1);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 &&
      errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

/* 1 once nobody listens on ep any more (connection refused). */
static int port_closed(const char *ep) {
  int fd = open_to(ep), err = 0;
  if (fd < 0)
    return 1;
  struct pollfd pfd = {.fd = fd, .events = POLLOUT};
  socklen_t el = sizeof(err);
  if (poll(&pfd, 1, 100) == 1)
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
  close(fd);
  return err == ECONNREFUSED;
}

static int rank_stall(int rank, int n, void *arg) {
  (void)arg;
  (void)n;
  if (rank < 3) {
    char go;
    close(stall_gate[1]);
    if (read(stall_gate[0], &go, 1) != 1)
      return 1;
    resihp_comm_t *c;
    int rc = make_comm(rank, 3, SECRET, 4096, 0, &c);
    if (rc) {
      fprintf(stderr, "rank %d: set-up under attack: %s\n", rank,
              resihp_strerror(rc));
      return 1;
    }
    float x[1000];
    fill(x, 1000, RESIHP_FLOAT32, rank);
    if (resihp_allreduce(c, x, 1000, RESIHP_FLOAT32, RESIHP_OP_SUM) ||
        check(x, 1000, RESIHP_FLOAT32, RESIHP_OP_SUM, 7, 3))
      return 1;
    resihp_comm_destroy(c);
    return 0;
  }
  /* The attacker. */
  close(stall_gate[0]);
  int fds[STALL_IDLE + STALL_LATE + 2 * STALL_DRIP], nfd = 0;
  for (int i = 0; i < STALL_IDLE; i++)
    if ((fds[nfd] = open_to(eps[0])) >= 0)
      nfd++;
  int drip0 = nfd;
  for (int i = 0; i < 2 * STALL_DRIP; i++)
    if ((fds[nfd] = open_to(eps[i % 2 ? 1 : 0])) >= 0)
      nfd++;
  int drip1 = nfd;
  if (write(stall_gate[1], "ggg", 3) != 3)
    return 1;
  close(stall_gate[1]);
  for (int i = 0; i < STALL_LATE; i++)
    if ((fds[nfd] = open_to(eps[0])) >= 0)
      nfd++;
  /* A hello that looks right (magic "RSHA", version 1) byte by byte, or
   * bytes that do not; until both ports refuse connections, which means
   * that the real ranks are done. */
  static const uint8_t hello[] = {0x41, 0x48, 0x53, 0x52, 1, 0, 0, 0};
  for (size_t tick = 0;; tick++) {
    if (port_closed(eps[0]) && port_closed(eps[1]))
      return 0;
    for (int k = 0; k < nfd; k++) {
      if (fds[k] < 0)
        continue;
      uint8_t sink[64];
      ssize_t r = recv(fds[k], sink, sizeof(sink), MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                     errno != ENOTCONN)) {
        close(fds[k]);
        fds[k] = -1;
        continue;
      }
      if (k >= drip0 && k < drip1) {
        uint8_t b = (k - drip0) % 4 == 3 ? (uint8_t)tick
                                         : hello[tick % sizeof(hello)];
        if (send(fds[k], &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
            errno != EAGAIN && errno != ENOTCONN) {
          close(fds[k]);
          fds[k] = -1;
        }
      }
    }
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

START_TEST(setup_despite_idle_and_garbage_connections) {
  int st[MAXN];
  ck_assert_int_eq(pipe(stall_gate), 0);
  run_group(4, rank_stall, NULL, st);
  close(stall_gate[0]);
  close(stall_gate[1]);
  close(rec_pipe[0]);
  expect_all_ok(4, st);
}
END_TEST

/* ---- tampering on the path ------------------------------------------------
 * Rank 2 of the group is a man in the middle: rank 1 reaches rank 0
 * through it (its endpoint list says so), and it relays both connections
 * faithfully through the handshake, which it cannot fake. After that it
 * tampers with what rank 1 sends: _i = 0 slips a forged control frame in
 * front of rank 1's first one (an agreement set that names rank 0, which
 * rank 0 would obey by leaving the job), 1 changes a byte of rank 1's first
 * genuine control frame, 2 (mac-data) flips a bit in the payload of rank
 * 1's first data frame. Rank 0 must refuse the frame - never act on it -
 * and suspect rank 1. 3 changes the shared-memory object name in rank 1's
 * transport set-up message: rank 0 must refuse to set up. */
#define HELLO_BYTES RESIHP__MESH_HELLO_BYTES
/* what the client sends on its second connection: the hello again, the
 * server's cookie and its proof (mesh.c: struct tail) */
#define CLIENT_HS (HELLO_BYTES + 32 + 32)
#define SERVER_HS (4 + 32 + 32 + 1)
/* shm.c: struct setup_msg, then ok, each with its MAC */
#define SHM_SETUP_BYTES (64 + RESIHP__MAC_LEN + 1 + RESIHP__MAC_LEN)

static int mac_refusals;
static void count_mac_refusals(resihp_log_level_t lvl, const char *sub,
                               const char *msg, void *ud) {
  (void)lvl, (void)sub, (void)ud;
  if (strstr(msg, "fails its MAC"))
    mac_refusals++;
}

static int dial_plain(const char *ep) {
  int fd = open_to(ep);
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  if (fd < 0 || poll(&p, 1, 5000) != 1)
    return -1;
  return fd;
}

/* Relay one direction's available bytes; apply the attack on the bytes
 * rank 1 sends to rank 0 (up: 1). Returns -1 at EOF or error, either
 * end's. */
struct relay {
  int from, to, up, channel;
  int answer;   /* the client's second connection (the first only asks) */
  size_t count; /* bytes relayed so far in this direction */
};

static int relay_once(struct relay *r, int mode, int *done) {
  uint8_t buf[65536];
  ssize_t n = recv(r->from, buf, sizeof(buf), MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
    return -1;
  if (n < 0)
    return 0;
  if (r->up && r->count <= CLIENT_HS && r->count + (size_t)n > CLIENT_HS &&
      !*done) {
    /* The first byte after the handshake is about to pass. */
    size_t at = CLIENT_HS - r->count;
    if (mode == 0 && r->channel == 1) {
      ck_assert_int_eq(send(r->to, buf, at, MSG_NOSIGNAL), (ssize_t)at);
      struct {
        resihp__frame_hdr_t h;
        uint8_t set[1 + RESIHP__MAC_LEN];
      } f = {.h = {.magic = RESIHP__FRAME_MAGIC,
                   .type = RESIHP__FRAME_AGREE,
                   .src = 1,
                   .len = 1},
             .set = {1}};
      ck_assert_int_eq(send(r->to, &f, sizeof(f), MSG_NOSIGNAL),
                       (ssize_t)sizeof(f));
      memmove(buf, buf + at, (size_t)n - at);
      r->count += at;
      n -= (ssize_t)at;
      *done = 1;
    }
  }
  size_t target = (size_t)-1;
  if (mode == 1 && r->up && r->channel == 1)
    target = CLIENT_HS + 16; /* the seq field of the first frame */
  if (mode == 2 && r->up && r->channel == 0)
    target = CLIENT_HS + SHM_SETUP_BYTES + sizeof(resihp__frame_hdr_t) + 100;
  if (mode == 3 && r->up && r->channel == 0)
    target = CLIENT_HS + 20; /* in setup_msg.name */
  if (target >= r->count && target < r->count + (size_t)n && !*done) {
    buf[target - r->count] ^= 0x10;
    *done = 1;
  }
  r->count += (size_t)n;
  /* the rank that saw the tampering may have closed its end already:
   * that is a hang-up like any other (the caller tells which ends it) */
  if (send(r->to, buf, (size_t)n, MSG_NOSIGNAL) != n)
    return -1;
  return 0;
}

static int rank_mitm(int rank, int n, void *arg) {
  int mode = *(int *)arg;
  (void)n;
  transport = 1; /* the data must travel through the relay */
  mac_data = mode == 2;
  if (rank == 2) {
    /* Rank 1 dials its two channels one after the other, each on two
     * connections (one asks for the challenge, the other answers it):
     * relay each while waiting for the next. */
    struct relay r[8];
    int done = 0, nr = 0;
    for (;;) {
      struct pollfd p[9];
      for (int k = 0; k < nr; k++)
        p[k] = (struct pollfd){.fd = r[k].from, .events = POLLIN};
      p[nr] = (struct pollfd){.fd = nr < 8 ? lfds[2] : -1, .events = POLLIN};
      if (poll(p, (nfds_t)nr + 1, -1) < 0)
        return 1;
      for (int k = 0; k < nr; k++) {
        if (!p[k].revents || r[k].from < 0 ||
            relay_once(&r[k], mode, &done) >= 0)
          continue;
        if (r[k].answer)
          return done ? 0 : 1; /* someone hung up: the test is over */
        /* a connection that only asked for its challenge: over */
        struct relay *a = &r[k & ~1], *b = &r[k | 1];
        close(a->from);
        close(a->to);
        a->from = a->to = b->from = b->to = -1;
      }
      if (!p[nr].revents)
        continue;
      int cli = accept(lfds[2], NULL, NULL), srv = dial_plain(eps[0]);
      uint8_t hello[HELLO_BYTES];
      if (cli < 0 || srv < 0 ||
          recv(cli, hello, sizeof(hello), MSG_WAITALL) != sizeof(hello) ||
          send(srv, hello, sizeof(hello), MSG_NOSIGNAL) != sizeof(hello))
        return 1;
      r[nr++] = (struct relay){cli, srv, 1, hello[6], hello[7], HELLO_BYTES};
      r[nr++] = (struct relay){srv, cli, 0, hello[6], hello[7], 0};
    }
  }
  resihp_comm_t *c;
  if (rank == 1)
    eps[0] = ep_buf[2]; /* rank 0, as rank 1 sees it: the relay */
  else
    resihp_log_set_handler(count_mac_refusals, NULL);
  int rc = make_comm(rank, 2, SECRET, 4096, 0, &c);
  if (mode == 3) {
    if (rank == 0 && (rc != RESIHP_EPROTO || mac_refusals < 1)) {
      fprintf(stderr, "rank 0: tampered set-up gave %s\n",
              resihp_err_name(rc));
      return 1;
    }
    if (!rc)
      resihp_comm_destroy(c);
    return 0;
  }
  if (rc)
    return 1;
  float x[1000];
  for (int k = 0; k < 200 && !rc; k++) {
    fill(x, 1000, RESIHP_FLOAT32, rank);
    rc = resihp_allreduce(c, x, 1000, RESIHP_FLOAT32, RESIHP_OP_SUM);
    if (!rc && check(x, 1000, RESIHP_FLOAT32, RESIHP_OP_SUM, 3, 2)) {
      fprintf(stderr, "rank %d: a tampered result was accepted\n", rank);
      return 1;
    }
  }
  int f[2];
  if (rank == 0 && (rc == 0 || rc == RESIHP_EEXCLUDED || mac_refusals < 1 ||
                    resihp_comm_failed(c, f, 2) != 1 || f[0] != 1)) {
    fprintf(stderr, "rank 0: tampering (mode %d) gave %s, %d MAC refusal(s)\n",
            mode, resihp_err_name(rc), mac_refusals);
    return 1;
  }
  resihp_comm_destroy(c);
  return 0;
}

START_TEST(tampered_frames_refused) {
  int st[MAXN], mode = _i;
  run_group(3, rank_mitm, &mode, st);
  close(rec_pipe[0]);
  expect_all_ok(3, st);
}
END_TEST


/* ---- hostile frames on the data plane ------------------------------------ */

static void raw_frame(int fd, uint32_t magic, uint16_t type, uint32_t epoch,
                      uint32_t src, uint32_t seq, uint32_t step, uint32_t len,
                      const void *payload, size_t plen) {
  resihp__frame_hdr_t h = {.magic = magic,
                           .type = type,
                           .epoch = epoch,
                           .src = src,
                           .seq = seq,
                           .step = step,
                           .len = len};
  ck_assert_int_eq(write(fd, &h, sizeof(h)), sizeof(h));
  if (plen)
    ck_assert_int_eq(write(fd, payload, plen), (ssize_t)plen);
}

static resihp__transport_t *pair_transport(int sv[2]) {
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  int fds[2] = {-1, sv[0]};
  resihp__transport_t *t;
  ck_assert_int_eq(
      resihp__tcp_transport_create(0, 2, fds, NULL, NULL, 1024, -1, NULL,
                                   0, &t), 0);
  return t;
}

static int pump(resihp__transport_t *t, int *bad) {
  for (int i = 0; i < 50; i++) {
    int r = t->ops->progress(t, 20, bad);
    if (r < 0)
      return r;
    if (t->ops->recv_done(t, 1))
      return 1;
  }
  return 0;
}

START_TEST(stale_epoch_and_duplicates_dropped) {
  int sv[2], bad;
  resihp__transport_t *t = pair_transport(sv);
  t->ops->set_epoch(t, 5);
  float stale[4] = {9, 9, 9, 9}, good[4] = {1, 2, 3, 4}, got[4] = {0};
  /* A late frame of epoch 4, a duplicate of collective 1, then the real
   * frame of epoch 5, collective 2. */
  raw_frame(sv[1], RESIHP__FRAME_MAGIC, RESIHP__FRAME_DATA, 4, 1, 2, 0, 16,
            stale, 16);
  raw_frame(sv[1], RESIHP__FRAME_MAGIC, RESIHP__FRAME_DATA, 5, 1, 1, 0, 16,
            stale, 16);
  raw_frame(sv[1], RESIHP__FRAME_MAGIC, RESIHP__FRAME_DATA, 5, 1, 2, 0, 16,
            good, 16);
  resihp__tag_t tag = {2, 0, 0};
  ck_assert_int_eq(t->ops->post_recv(t, 1, tag, got, 16), 0);
  ck_assert_int_eq(pump(t, &bad), 1);
  ck_assert(memcmp(got, good, 16) == 0);
  /* A frame of a future epoch is parked, not consumed. */
  raw_frame(sv[1], RESIHP__FRAME_MAGIC, RESIHP__FRAME_DATA, 6, 1, 0, 0, 16,
            good, 16);
  tag.seq = 3;
  ck_assert_int_eq(t->ops->post_recv(t, 1, tag, got, 16), 0);
  ck_assert_int_eq(pump(t, &bad), 0);
  t->ops->destroy(t);
  close(sv[1]);
}
END_TEST

/* post_recv_reduce sums while bytes arrive; an element may come in pieces
 * (short socket reads; a shared-memory ring that wraps, or that was full so
 * the sender wrote what fitted). _i = 0: socket, a byte-dribbling sender;
 * 1: shared-memory rings, frames that leave every float cut by the wrap. */
struct shm_side {
  int self, fds[2];
  resihp__ring_t *in[2], *out[2];
  int rc;
};

static void *shm_side_setup(void *arg) {
  struct shm_side *s = arg;
  s->rc = resihp__shm_setup(s->self, 2, s->fds, NULL, 1,
                            resihp__now_ms() + 5000,
                            s->in, s->out);
  return NULL;
}

/* Two transports, rank 0 (rx) and rank 1 (tx), joined by shared-memory
 * rings; *rx_in is rank 0's ring from rank 1, *tx_out rank 1's ring to
 * rank 0 (both mappings of one object). */
static void shm_pair(size_t max, resihp__transport_t **rx,
                     resihp__transport_t **tx, resihp__ring_t **rx_in,
                     resihp__ring_t **tx_out) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  struct shm_side side[2] = {{.self = 0, .fds = {-1, sv[0]}},
                             {.self = 1, .fds = {sv[1], -1}}};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, shm_side_setup, &side[1]), 0);
  shm_side_setup(&side[0]);
  pthread_join(th, NULL);
  ck_assert_int_eq(side[0].rc, 0);
  ck_assert_int_eq(side[1].rc, 0);
  ck_assert_ptr_nonnull(side[0].in[1]);
  if (rx_in)
    *rx_in = side[0].in[1];
  if (tx_out)
    *tx_out = side[1].out[0];
  ck_assert_int_eq(resihp__tcp_transport_create(0, 2, side[0].fds, side[0].in,
                                                side[0].out, max, -1, NULL, 0, rx),
                   0);
  ck_assert_int_eq(resihp__tcp_transport_create(1, 2, side[1].fds, side[1].in,
                                                side[1].out, max, -1, NULL, 0, tx),
                   0);
}

static void combine_f32(void *dst, const void *a, const void *b, size_t n,
                        int dtype) {
  resihp__reduce_sum_to(dst, a, b, n, dtype);
}

START_TEST(recv_reduce_sums_split_elements) {
  int sv[2], bad = -1;
  if (_i == 0) {
    resihp__transport_t *t = pair_transport(sv);
    float pay[64], add[64], got[64];
    for (int i = 0; i < 64; i++) {
      pay[i] = (float)(i % 7);
      add[i] = 100.0f + (float)(i % 5);
    }
    resihp__frame_hdr_t h = {.magic = RESIHP__FRAME_MAGIC,
                             .type = RESIHP__FRAME_DATA,
                             .src = 1,
                             .len = sizeof(pay)};
    ck_assert_int_eq(write(sv[1], &h, sizeof(h)), sizeof(h));
    resihp__tag_t tag = {0, 0, 0};
    ck_assert_int_eq(t->ops->post_recv_reduce(t, 1, tag, got, add,
                                              sizeof(pay), 4, combine_f32,
                                              RESIHP_FLOAT32),
                     0);
    const uint8_t *b = (const uint8_t *)pay;
    for (size_t off = 0, k = 1; off < sizeof(pay); off += k, k = k % 7 + 1) {
      size_t m = off + k > sizeof(pay) ? sizeof(pay) - off : k;
      ck_assert_int_eq(write(sv[1], b + off, m), (ssize_t)m);
      t->ops->progress(t, 0, &bad);
    }
    ck_assert_int_eq(pump(t, &bad), 1);
    for (int i = 0; i < 64; i++)
      ck_assert_float_eq(got[i], pay[i] + add[i]);
    t->ops->destroy(t);
    close(sv[1]);
    return;
  }
  resihp__transport_t *rx, *tx;
  size_t big = (1u << 20) + 4; /* bytes per float frame */
  shm_pair(big, &rx, &tx, NULL, NULL);
  /* Frame 0: three bfloat16 (6 bytes), so that every later float starts 2
   * bytes off a 4-byte boundary; then 6 float frames, 6 MiB in a 4 MiB
   * ring, all queued at once: the ring fills and wraps. */
  enum { NF = 7 };
  size_t nel = big / 4;
  float *pay = malloc(big), *add = malloc(big), *got = malloc(big);
  uint16_t bpay[3], badd[3], bgot[3];
  for (size_t i = 0; i < nel; i++) {
    pay[i] = (float)(i % 7);
    add[i] = 100.0f + (float)(i % 5);
  }
  for (int i = 0; i < 3; i++) {
    bpay[i] = resihp_bf16_from_float((float)i);
    badd[i] = resihp_bf16_from_float(2.0f);
  }
  for (uint32_t f = 0; f < NF; f++) {
    resihp__tag_t tag = {0, 0, f};
    ck_assert_int_eq(f ? tx->ops->post_send(tx, 0, tag, pay, big)
                       : tx->ops->post_send(tx, 0, tag, bpay, 6),
                     0);
  }
  for (uint32_t f = 0; f < NF; f++) {
    resihp__tag_t tag = {0, 0, f};
    memset(got, 0, big);
    ck_assert_int_eq(
        f ? rx->ops->post_recv_reduce(rx, 1, tag, got, add, big, 4,
                                      combine_f32, RESIHP_FLOAT32)
          : rx->ops->post_recv_reduce(rx, 1, tag, bgot, badd, 6, 2,
                                      combine_f32, RESIHP_BFLOAT16),
        0);
    int done = 0;
    for (int k = 0; k < 100000 && !done; k++) {
      ck_assert_int_ge(tx->ops->progress(tx, 0, &bad), 0);
      ck_assert_int_ge(rx->ops->progress(rx, 0, &bad), 0);
      done = rx->ops->recv_done(rx, 1);
    }
    ck_assert_msg(done, "frame %u never completed", f);
    if (!f) {
      for (int i = 0; i < 3; i++)
        ck_assert_float_eq(resihp_bf16_to_float(bgot[i]), (float)i + 2.0f);
      continue;
    }
    for (size_t i = 0; i < nel; i++)
      if (got[i] != pay[i] + add[i])
        ck_abort_msg("frame %u element %zu: %g, want %g", f, i,
                     (double)got[i], (double)(pay[i] + add[i]));
  }
  ck_assert_int_eq(tx->ops->sends_pending(tx, 0), 0);
  rx->ops->destroy(rx);
  tx->ops->destroy(tx);
  free(pay);
  free(add);
  free(got);
}
END_TEST

/* post_recv_sink hands every element over whole, in order, at its index,
 * in the form that came (int64 plain, int32 alternative): over a socket
 * (through the bounce buffer), and through shared-memory rings where a
 * 6-byte frame first leaves every later element 2 bytes off its
 * alignment and 1 MiB frames wrap the 4 MiB ring, cutting elements. */
struct gathered {
  uint8_t *dst[3];
  size_t esz[3], len[3];
  int bad;
};

static void gather(void *arg, int form, size_t index, const void *elems,
                   size_t count) {
  struct gathered *g = arg;
  if ((form != 1 && form != 2) || !count ||
      (index + count) * g->esz[form] > g->len[form]) {
    g->bad = 1;
    return;
  }
  memcpy(g->dst[form] + index * g->esz[form], elems, count * g->esz[form]);
}

START_TEST(recv_sink_hands_whole_elements) {
  int bad = -1;
  size_t big = _i ? ((size_t)1 << 20) + 8 : 64, alt = big / 2 + 4;
  uint8_t *pay = malloc(big), *got = malloc(big), *got2 = malloc(alt),
          *bounce = malloc(big);
  for (size_t i = 0; i < big; i++)
    pay[i] = (uint8_t)(i * 7 + i / 251);
  struct gathered g = {{NULL, got, got2}, {0, 8, 4}, {0, big, alt}, 0};
  resihp__transport_t *rx, *tx = NULL;
  int sv[2] = {-1, -1};
  if (_i)
    shm_pair(big, &rx, &tx, NULL, NULL);
  else
    rx = pair_transport(sv);
  /* Frame 0 (rings): three bfloat16; then plain and alternative frames. */
  enum { NF = 7 };
  static const uint8_t six[6] = {1, 2, 3, 4, 5, 6};
  for (uint32_t f = _i ? 0 : 1; f < NF; f++) {
    resihp__tag_t tag = {0, 0, f};
    if (_i) {
      ck_assert_int_eq(!f      ? tx->ops->post_send(tx, 0, tag, six, 6)
                       : f % 2 ? tx->ops->post_send(tx, 0, tag, pay, big)
                               : tx->ops->post_send_alt(tx, 0, tag, pay, alt),
                       0);
      continue;
    }
    resihp__frame_hdr_t h = {.magic = RESIHP__FRAME_MAGIC,
                             .type = RESIHP__FRAME_DATA,
                             .flags = f % 2 ? 0 : RESIHP__FRAME_F_ALT,
                             .src = 1,
                             .chunk = f,
                             .len = (uint32_t)(f % 2 ? big : alt)};
    ck_assert_int_eq(write(sv[1], &h, sizeof(h)), sizeof(h));
    ck_assert_int_eq(write(sv[1], pay, h.len), (ssize_t)h.len);
  }
  for (uint32_t f = _i ? 0 : 1; f < NF; f++) {
    resihp__tag_t tag = {0, 0, f};
    uint8_t small[6];
    memset(got, 0, big);
    memset(got2, 0, alt);
    ck_assert_int_eq(f ? rx->ops->post_recv_sink(rx, 1, tag, bounce, big, 8,
                                                 alt, 4, gather, &g)
                       : rx->ops->post_recv(rx, 1, tag, small, 6),
                     0);
    int done = 0;
    for (int k = 0; k < 100000 && !done; k++) {
      if (tx)
        ck_assert_int_ge(tx->ops->progress(tx, 0, &bad), 0);
      ck_assert_int_ge(rx->ops->progress(rx, 0, &bad), 0);
      done = rx->ops->recv_done(rx, 1);
    }
    ck_assert_msg(done, "frame %u never completed", f);
    ck_assert(!g.bad);
    if (!f) {
      ck_assert(!memcmp(small, six, 6));
      continue;
    }
    ck_assert_int_eq(done, f % 2 ? 1 : 2);
    ck_assert_msg(!memcmp(f % 2 ? got : got2, pay, f % 2 ? big : alt),
                  "frame %u: elements out of place", f);
  }
  rx->ops->destroy(rx);
  if (tx) {
    ck_assert_int_eq(tx->ops->sends_pending(tx, 0), 0);
    tx->ops->destroy(tx);
  } else {
    close(sv[1]);
  }
  free(pay);
  free(got);
  free(got2);
  free(bounce);
}
END_TEST

/* send_fill makes a frame in the peer's ring in place: the receiver gets
 * exactly what fill wrote, in the form it named; where it cannot (fill
 * declines, sends are queued, no ring) nothing is published and the
 * caller's post_send goes on in order. */
static int fill_alt(void *arg, void *payload, size_t cap) {
  const int *mode = arg;
  if (!*mode || cap < 36)
    return 0;
  for (int i = 0; i < 36; i++)
    ((uint8_t *)payload)[i] = (uint8_t)(i + 1);
  return 2;
}

START_TEST(send_fill_in_place) {
  int bad = -1, yes = 1, no = 0;
  uint8_t got[64], plain[64];
  for (int i = 0; i < 64; i++)
    plain[i] = (uint8_t)(200 - i);
  resihp__transport_t *rx, *tx;
  shm_pair(1 << 16, &rx, &tx, NULL, NULL);
  resihp__tag_t tag = {0, 0, 0};
  /* Made in place, alternative form. */
  ck_assert_int_eq(tx->ops->send_fill(tx, 0, tag, 64, 36, fill_alt, &yes), 0);
  ck_assert_int_eq(tx->ops->sends_pending(tx, 0), 0);
  ck_assert_int_eq(rx->ops->post_recv_alt(rx, 1, tag, got, 64, 36), 0);
  int done = 0;
  for (int k = 0; k < 1000 && !done; k++) {
    ck_assert_int_ge(rx->ops->progress(rx, 0, &bad), 0);
    done = rx->ops->recv_done(rx, 1);
  }
  ck_assert_int_eq(done, 2);
  for (int i = 0; i < 36; i++)
    ck_assert_int_eq(got[i], i + 1);
  /* Declined: nothing leaves; then a queued send makes it decline too. */
  tag.chunk = 1;
  ck_assert_int_eq(tx->ops->send_fill(tx, 0, tag, 64, 36, fill_alt, &no), 1);
  ck_assert_int_eq(tx->ops->post_send(tx, 0, tag, plain, 64), 0);
  tag.chunk = 2;
  ck_assert_int_eq(tx->ops->send_fill(tx, 0, tag, 64, 36, fill_alt, &yes), 1);
  ck_assert_int_eq(tx->ops->post_send(tx, 0, tag, plain, 64), 0);
  for (uint32_t c = 1; c <= 2; c++) {
    tag.chunk = c;
    memset(got, 0, sizeof(got));
    ck_assert_int_eq(rx->ops->post_recv(rx, 1, tag, got, 64), 0);
    done = 0;
    for (int k = 0; k < 1000 && !done; k++) {
      ck_assert_int_ge(tx->ops->progress(tx, 0, &bad), 0);
      ck_assert_int_ge(rx->ops->progress(rx, 0, &bad), 0);
      done = rx->ops->recv_done(rx, 1);
    }
    ck_assert_int_eq(done, 1);
    ck_assert(!memcmp(got, plain, 64));
  }
  rx->ops->destroy(rx);
  tx->ops->destroy(tx);
  /* A socket link has no ring to write into. */
  int sv[2];
  resihp__transport_t *t = pair_transport(sv);
  ck_assert_int_eq(t->ops->send_fill(t, 1, tag, 64, 36, fill_alt, &yes), 1);
  t->ops->destroy(t);
  close(sv[1]);
}
END_TEST

/* The commit's votes through a ring pair: only the exact key counts, the
 * vote for the next collective does not hide this one's (two slots by
 * parity), a waiting progress() wakes for a vote (doorbell), a peer that
 * closes its link before voting is RESIHP_EPEER, and a socket-only link has
 * no votes. */
struct voter {
  resihp__transport_t *tx;
  uint64_t key;
};

static void *vote_later(void *arg) {
  struct voter *v = arg;
  usleep(20000); /* the other side is asleep in poll() by then, mostly */
  v->tx->ops->vote(v->tx, 0, v->key);
  return NULL;
}

START_TEST(commit_votes_in_rings) {
  int bad = -1;
  resihp__transport_t *rx, *tx;
  shm_pair(1 << 16, &rx, &tx, NULL, NULL);
  ck_assert_int_eq(rx->ops->voted(rx, 1, 7), 0); /* nothing yet */
  ck_assert_int_eq(tx->ops->vote(tx, 0, 7), 0);
  ck_assert_int_eq(tx->ops->vote(tx, 0, 8), 0); /* ahead by one */
  ck_assert_int_eq(rx->ops->voted(rx, 1, 7), 1);
  ck_assert_int_eq(rx->ops->voted(rx, 1, 8), 1);
  ck_assert_int_eq(rx->ops->voted(rx, 1, 9), 0);
  ck_assert_int_eq(rx->ops->voted(rx, 1, 6), 0); /* a stale key: no */
  /* Waiting: progress() returns once the vote came, woken by its bell. */
  struct voter v = {tx, 9};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, vote_later, &v), 0);
  int seen = 0;
  for (int k = 0; k < 100 && !seen; k++) {
    ck_assert_int_ge(rx->ops->progress(rx, 1000, &bad), 0);
    seen = rx->ops->voted(rx, 1, 9);
  }
  pthread_join(th, NULL);
  ck_assert(seen);
  /* Gone before its vote. */
  ck_assert_int_eq(rx->ops->voted(rx, 1, 10), 0);
  tx->ops->destroy(tx);
  int rc = 0;
  for (int k = 0; k < 100 && rc >= 0; k++)
    rc = rx->ops->progress(rx, 100, &bad);
  ck_assert_int_eq(rc, RESIHP_EPEER);
  ck_assert_int_eq(bad, 1);
  rx->ops->destroy(rx);
  int sv[2];
  resihp__transport_t *t = pair_transport(sv);
  ck_assert_int_eq(t->ops->vote(t, 1, 1), RESIHP_ENOTSUP);
  t->ops->destroy(t);
  close(sv[1]);
}
END_TEST

/* A peer that shares a ring can write its header: head and tail are
 * checked against this side's own index, and an impossible one is a
 * protocol error of that peer, never an access outside the mapping. _i = 0:
 * the producer publishes a head beyond a full ring; 1: one behind the
 * consumer's tail; 2: the consumer publishes a tail ahead of everything
 * written (which once made the producer write past the mapping). */
START_TEST(shm_ring_corrupt_index) {
  resihp__transport_t *rx, *tx;
  resihp__ring_t *ring_in, *ring_out;
  size_t len = (4u << 20) + 8192;
  shm_pair(len, &rx, &tx, &ring_in, &ring_out);
  uint8_t *pay = calloc(1, len), *got = calloc(1, len);
  resihp__tag_t tag = {0, 0, 0};
  int bad = -1, rc = 0;
  if (_i < 2) {
    _Atomic uint64_t *head = resihp__ring_test_index(ring_out, 0);
    atomic_store(head, _i == 0 ? (4u << 20) + 8192 : (uint64_t)-1);
    ck_assert_int_eq(rx->ops->post_recv(rx, 1, tag, got, 64), 0);
    for (int k = 0; k < 100 && rc >= 0; k++)
      rc = rx->ops->progress(rx, 0, &bad);
  } else {
    atomic_store(resihp__ring_test_index(ring_in, 1), 8192);
    ck_assert_int_eq(tx->ops->post_send(tx, 0, tag, pay, len), 0);
    for (int k = 0; k < 100 && rc >= 0; k++)
      rc = tx->ops->progress(tx, 0, &bad);
  }
  ck_assert_int_eq(rc, RESIHP_EPROTO);
  ck_assert_int_eq(bad, _i < 2 ? 1 : 0);
  rx->ops->destroy(rx);
  tx->ops->destroy(tx);
  free(pay);
  free(got);
}
END_TEST

/* A 16-byte receive from rank 1 fails with code, blaming rank 1; then t
 * is destroyed. */
static void receive_fails(resihp__transport_t *t, int code) {
  float got[4];
  int bad = -1;
  resihp__tag_t tag = {0, 0, 0};
  ck_assert_int_eq(t->ops->post_recv(t, 1, tag, got, 16), 0);
  ck_assert_int_eq(pump(t, &bad), code);
  ck_assert_int_eq(bad, 1);
  t->ops->destroy(t);
}

/* _i selects the kind of malformed input. */
START_TEST(malformed_frames_rejected) {
  int sv[2];
  resihp__transport_t *t = pair_transport(sv);
  uint8_t junk[64];
  memset(junk, 0xab, sizeof(junk));
  float pay[4] = {0};
  switch (_i) {
  case 0: /* garbage */
    ck_assert_int_eq(write(sv[1], junk, sizeof(junk)), sizeof(junk));
    break;
  case 1: /* oversized length */
    raw_frame(sv[1], RESIHP__FRAME_MAGIC, RESIHP__FRAME_DATA, 0, 1, 0, 0,
              1u << 30, NULL, 0);
    break;
  case 2: /* a length beyond the posted receive */
    raw_frame(sv[1], RESIHP__FRAME_MAGIC, RESIHP__FRAME_DATA, 0, 1, 0, 0, 20,
              pay, 16);
    break;
  case 3: /* unknown frame type with a plausible length */
    raw_frame(sv[1], RESIHP__FRAME_MAGIC, RESIHP__FRAME_AGREE, 0, 1, 0, 0, 16,
              pay, 16);
    break;
  case 4: /* right epoch, wrong step */
    raw_frame(sv[1], RESIHP__FRAME_MAGIC, RESIHP__FRAME_DATA, 0, 1, 0, 3, 16,
              pay, 16);
    break;
  case 5: /* sender claims another rank */
    raw_frame(sv[1], RESIHP__FRAME_MAGIC, RESIHP__FRAME_DATA, 0, 7, 0, 0, 16,
              pay, 16);
    break;
  case 6: /* wrong frame type on the data plane */
    raw_frame(sv[1], RESIHP__FRAME_MAGIC, 99, 0, 1, 0, 0, 0, NULL, 0);
    break;
  }
  receive_fails(t, RESIHP_EPROTO);
  close(sv[1]);
}
END_TEST

/* A peer whose link ends in the middle of a frame died (or left): that is
 * RESIHP_EPEER, like any closed link, not a protocol error. _i = 0: the
 * payload is cut short, 1: the header, 2: a real process is SIGKILLed after
 * writing half a frame. */
START_TEST(peer_gone_mid_frame) {
  int sv[2];
  resihp__transport_t *t = pair_transport(sv);
  float pay[4] = {0};
  if (_i == 0) {
    raw_frame(sv[1], RESIHP__FRAME_MAGIC, RESIHP__FRAME_DATA, 0, 1, 0, 0, 16,
              pay, 7);
  } else if (_i == 1) {
    ck_assert_int_eq(write(sv[1], pay, 10), 10);
  } else {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      raw_frame(sv[1], RESIHP__FRAME_MAGIC, RESIHP__FRAME_DATA, 0, 1, 0, 0,
                16, pay, 9);
      raise(SIGKILL);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFSIGNALED(st));
  }
  close(sv[1]);
  receive_fails(t, RESIHP_EPEER);
}
END_TEST

/* End to end: a peer that authenticates, then sends a frame that cannot be
 * right (longer than the chunk it stands for) and stays connected. */
static int rank_hostile(int rank, int n, void *arg) {
  if (rank == 0) {
    resihp_comm_t *c;
    if (make_comm(0, 2, SECRET, 4096, 0, &c))
      return 1;
    float x[1000];
    fill(x, 1000, RESIHP_FLOAT32, 0);
    int rc = resihp_allreduce(c, x, 1000, RESIHP_FLOAT32, RESIHP_OP_SUM);
    float orig[1000];
    fill(orig, 1000, RESIHP_FLOAT32, 0);
    if (rc != RESIHP_EPROTO || memcmp(x, orig, sizeof(x))) {
      fprintf(stderr, "rank 0 got %s\n", resihp_err_name(rc));
      return 1;
    }
    int f[2];
    if (resihp_comm_failed(c, f, 2) != 1 || f[0] != 1)
      return 1;
    resihp_comm_destroy(c);
    return 0;
  }
  int64_t dl = resihp__now_ms() + 5000;
  resihp__msgauth_t auth[2];
  int d = resihp__mesh_dial(eps[0], (const uint8_t *)SECRET, strlen(SECRET), 1,
                            0, 2, 0, dl, &auth[0]);
  int k = resihp__mesh_dial(eps[0], (const uint8_t *)SECRET, strlen(SECRET), 1,
                            0, 2, 1, dl, NULL);
  if (d < 0 || k < 0)
    return 1;
  /* Play the transport set-up honestly (declining shared memory), then
   * misbehave. */
  int fds[2] = {d, -1};
  resihp__ring_t *rin[2], *rout[2];
  if (resihp__shm_setup(1, 2, fds, auth, 0, dl, rin, rout))
    return 1;
  float pay[8] = {0};
  resihp__frame_hdr_t h = {.magic = RESIHP__FRAME_MAGIC,
                           .type = RESIHP__FRAME_DATA,
                           .src = 1,
                           .len = 4000}; /* the chunk is 2000 */
  if (resihp__io_full(d, &h, sizeof(h), 1, dl) ||
      resihp__io_full(d, pay, sizeof(pay), 1, dl))
    return 1;
  sleep(2); /* keep both links open: the bad frame must be the cause */
  return 0;
}

START_TEST(hostile_peer_bad_frame) {
  int st[MAXN];
  run_group(2, rank_hostile, NULL, st);
  close(rec_pipe[0]);
  expect_all_ok(2, st);
}
END_TEST

/* ---- point to point and broadcast ------------------------------------------
 * Real ranks over TCP only (_i odd) and over shared memory (_i even).
 * Message bytes say who sent them and which message they are, so that a
 * misrouted, reordered or truncated message is seen. */

#define MIB ((size_t)1 << 20)

static void pattern(uint8_t *b, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; i++)
    b[i] = (uint8_t)(i * 131u + seed * 7u + (i >> 9) + (seed >> 3));
}

static int pattern_ok(const uint8_t *b, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; i++)
    if (b[i] != (uint8_t)(i * 131u + seed * 7u + (i >> 9) + (seed >> 3))) {
      fprintf(stderr, "byte %zu of %zu differs (seed %u)\n", i, len, seed);
      return 0;
    }
  return 1;
}

static int p2p_comm(int rank, int n, long chunk, resihp_comm_t **c) {
  int rc = make_comm(rank, n, SECRET, chunk, 0, c);
  if (rc)
    fprintf(stderr, "rank %d: create: %s\n", rank, resihp_strerror(rc));
  return rc;
}

/* Test _i: TCP only when odd; every rank must exit 0. */
static void p2p_group(int i, int n, rank_fn fn, void *arg) {
  transport = i % 2 ? 1 : -1;
  int st[MAXN];
  run_group(n, fn, arg, st);
  expect_all_ok(n, st);
}

/* An all-reduce whose result is checked: interleaved with messages. */
static int checked_allreduce(resihp_comm_t *c) {
  float v[1000];
  fill(v, 1000, RESIHP_FLOAT32, resihp_comm_world_rank(c));
  int rc = resihp_allreduce(c, v, 1000, RESIHP_FLOAT32, RESIHP_OP_SUM);
  if (rc || check(v, 1000, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c),
                  resihp_comm_size(c))) {
    fprintf(stderr, "rank %d: all-reduce between messages: %s\n",
            resihp_comm_world_rank(c), resihp_err_name(rc));
    return 1;
  }
  return 0;
}

static const size_t rt_sizes[] = {0, 1, 4097, 4096, MIB, 8 * MIB};
#define NRT (sizeof(rt_sizes) / sizeof(rt_sizes[0]))

/* Rank 0 and rank 2 (not ring neighbours) bounce every size; rank 1 sends
 * to itself; then everyone all-reduces. */
static int rank_round_trip(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  if (p2p_comm(rank, n, 0, &c))
    return 1;
  uint8_t *b = malloc(8 * MIB + 1);
  for (size_t k = 0; k < NRT; k++) {
    size_t len = rt_sizes[k];
    int rc = 0, ok = 1;
    if (rank == 0) {
      pattern(b, len, (unsigned)k);
      if ((rc = resihp_send(c, 2, b, len)) == 0) {
        memset(b, 0xee, len);
        rc = resihp_recv(c, 2, b, len);
        ok = pattern_ok(b, len, (unsigned)k + 100);
      }
    } else if (rank == 2) {
      memset(b, 0xee, len);
      if ((rc = resihp_recv(c, 0, b, len)) == 0) {
        ok = pattern_ok(b, len, (unsigned)k);
        pattern(b, len, (unsigned)k + 100);
        rc = resihp_send(c, 0, b, len);
      }
    } else {
      pattern(b, len, (unsigned)k);
      if ((rc = resihp_send(c, 1, b, len)) == 0) {
        memset(b, 0xee, len);
        rc = resihp_recv(c, 1, b, len);
        ok = pattern_ok(b, len, (unsigned)k);
      }
    }
    if (rc || !ok) {
      fprintf(stderr, "rank %d: round trip of %zu bytes: %s\n", rank, len,
              resihp_err_name(rc));
      return 1;
    }
    if (checked_allreduce(c))
      return 1;
  }
  free(b);
  resihp_comm_destroy(c);
  return 0;
}

START_TEST(p2p_round_trips) { p2p_group(_i, 3, rank_round_trip, NULL); }
END_TEST

/* Both ends send first and receive second, with messages below and far
 * above what a link buffers (4 MiB per shared-memory ring). */
static int rank_both_ways(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  if (p2p_comm(rank, n, 0, &c))
    return 1;
  static const size_t sizes[] = {4096, MIB, 5 * MIB, 16 * MIB + 5};
  uint8_t *out = malloc(16 * MIB + 5), *in = malloc(16 * MIB + 5);
  int other = 1 - rank;
  for (int round = 0; round < 2; round++)
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
      size_t len = sizes[k];
      pattern(out, len, (unsigned)(rank * 10 + k));
      int rc = resihp_send(c, other, out, len);
      memset(out, 0, len); /* the send's buffer is the caller's again */
      if (!rc)
        rc = resihp_recv(c, other, in, len);
      if (rc || !pattern_ok(in, len, (unsigned)(other * 10 + k))) {
        fprintf(stderr, "rank %d: both ways, %zu bytes: %s\n", rank, len,
                resihp_err_name(rc));
        return 1;
      }
    }
  if (checked_allreduce(c))
    return 1;
  free(out);
  free(in);
  resihp_comm_destroy(c);
  return 0;
}

START_TEST(p2p_both_directions_at_once) { p2p_group(_i, 2, rank_both_ways, NULL); }
END_TEST

/* A three-stage pipeline: forward messages 0 -> 1 -> 2, gradients back,
 * then an all-reduce and a broadcast on the same communicator, a few
 * times over. Many messages of many sizes per pair, checked in order. */
#define PIPE_MSGS 40
static size_t pipe_len(int m) {
  return (size_t)(m * 7919) % 70000 + (m & 1);
}

/* One pass of PIPE_MSGS messages through the stages: dir 1 forward (from
 * rank - 1 to rank + 1), -1 backward. */
static int pipe_pass(resihp_comm_t *c, int rank, int n, int it, int dir) {
  static uint8_t b[70001];
  int from = rank - dir, to = rank + dir;
  for (int m = 0; m < PIPE_MSGS; m++) {
    unsigned seed = (unsigned)(it * 1000 + m + (dir < 0 ? 500 : 0));
    int rc = 0;
    if (from >= 0 && from < n &&
        (rc = resihp_recv(c, from, b, pipe_len(m))) == 0 &&
        !pattern_ok(b, pipe_len(m), seed + (unsigned)from))
      return 1;
    pattern(b, pipe_len(m), seed + (unsigned)rank);
    if (!rc && to >= 0 && to < n)
      rc = resihp_send(c, to, b, pipe_len(m));
    if (rc) {
      fprintf(stderr, "rank %d: %s %d: %s\n", rank,
              dir > 0 ? "forward" : "backward", m, resihp_err_name(rc));
      return 1;
    }
  }
  return 0;
}

static int rank_pipeline(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  if (p2p_comm(rank, n, 16384, &c))
    return 1;
  uint8_t *b = malloc(70001);
  for (int it = 0; it < 3; it++) {
    if (pipe_pass(c, rank, n, it, 1) || pipe_pass(c, rank, n, it, -1))
      return 1;
    if (checked_allreduce(c))
      return 1;
    int root = it % n;
    if (rank == root)
      pattern(b, 50000, (unsigned)(77 + it));
    else
      memset(b, 0, 50000);
    int rc = resihp_bcast(c, root, b, 50000);
    if (rc || !pattern_ok(b, 50000, (unsigned)(77 + it))) {
      fprintf(stderr, "rank %d: bcast in the pipeline: %s\n", rank,
              resihp_err_name(rc));
      return 1;
    }
  }
  free(b);
  resihp_comm_destroy(c);
  return 0;
}

START_TEST(p2p_pipeline_ordered_and_interleaved) { p2p_group(_i, 3, rank_pipeline, NULL); }
END_TEST

static int rank_bcast(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  if (p2p_comm(rank, n, 65536, &c))
    return 1;
  static const size_t sizes[] = {0, 1, 777, MIB + 3};
  uint8_t *b = malloc(MIB + 3);
  for (int root = 0; root < n; root++)
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
      unsigned seed = (unsigned)(root * 10 + k);
      if (rank == root)
        pattern(b, sizes[k], seed);
      else
        memset(b, 0, sizes[k]);
      int rc = resihp_bcast(c, root, sizes[k] ? b : NULL, sizes[k]);
      if (rc || !pattern_ok(b, sizes[k], seed)) {
        fprintf(stderr, "rank %d: bcast of %zu bytes from %d: %s\n", rank,
                sizes[k], root, resihp_err_name(rc));
        return 1;
      }
    }
  if (checked_allreduce(c))
    return 1;
  free(b);
  resihp_comm_destroy(c);
  return 0;
}

START_TEST(bcast_from_every_root) {
  p2p_group(_i, 2 + _i / 2, rank_bcast, NULL); /* 2..5 ranks */
}
END_TEST

/* A receive that names another size than was sent: RESIHP_EPROTO on the
 * receiver, the sender suspected; the sender's next call fails through the
 * abort. Case 3: a message where the receiver is in a collective. */
#define MM_CHUNK 65536
static const size_t mm_sent[] = {1000, 2 * MM_CHUNK, MM_CHUNK, 100};
static const size_t mm_recv[] = {999, MM_CHUNK, 2 * MM_CHUNK, 0};

static int rank_mismatch(int rank, int n, void *arg) {
  int k = *(int *)arg;
  resihp_comm_t *c;
  if (p2p_comm(rank, n, MM_CHUNK, &c))
    return 1;
  uint8_t *b = calloc(1, 2 * MM_CHUNK);
  int rc;
  if (rank == 0) {
    rc = resihp_send(c, 1, b, mm_sent[k]);
    if (!rc)
      rc = k == 3 ? resihp_allreduce(c, b, 1000, RESIHP_FLOAT32, RESIHP_OP_SUM)
                  : resihp_recv(c, 1, b, 1);
    /* k == 3 is a small all-reduce (direct exchange): the receiver sent its
     * contribution before it met the stray frame, and a member that dies
     * after that counts as done (allreduce.h, "Outcome"), so success is
     * right too when its death is seen before its abort. */
    if (rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT && !(k == 3 && !rc)) {
      fprintf(stderr, "sender after a mismatch: %s\n", resihp_err_name(rc));
      return 1;
    }
    return 0;
  }
  rc = k == 3 ? resihp_allreduce(c, b, 1000, RESIHP_FLOAT32, RESIHP_OP_SUM)
              : resihp_recv(c, 0, b, mm_recv[k]);
  int failed[MAXN];
  if (rc != RESIHP_EPROTO || resihp_comm_failed(c, failed, MAXN) != 1 ||
      failed[0] != 0) {
    fprintf(stderr, "receiver of a mismatch (case %d): %s\n", k,
            resihp_err_name(rc));
    return 1;
  }
  return 0;
}

START_TEST(p2p_size_mismatch_is_eproto) {
  int k = _i / 2;
  p2p_group(_i, 2, rank_mismatch, &k);
}
END_TEST

/* ---- faults during messages ------------------------------------------------
 * An 8 MiB message (32 frames) between two ranks; the receiver dies
 * (SIGKILL) before it posts frame k, or the sender is killed by the
 * receiver at that point. The survivor's call that notices must return
 * RESIHP_EPEER or RESIHP_ETIMEDOUT, never RESIHP_EPROTO, and name the
 * victim. */
#define BIG (8 * MIB)
static size_t p2p_hook_frame;
static int p2p_hook_armed, p2p_hook_sig;
static pid_t p2p_hook_pid; /* 0: raise in this process */

static void p2p_fault_hook(resihp_comm_t *c, int send, size_t frame) {
  (void)c;
  (void)send;
  if (!p2p_hook_armed || frame != p2p_hook_frame)
    return;
  p2p_hook_armed = 0;
  if (p2p_hook_pid)
    kill(p2p_hook_pid, p2p_hook_sig);
  else
    raise(p2p_hook_sig);
}

struct p2p_fault {
  int victim_sends; /* 0: the victim receives */
  size_t frame;
  int sig;
};

/* The survivor's failed call: the right code, the victim named. */
static int survivor_saw(resihp_comm_t *c, int rc, int want_code) {
  int failed[MAXN];
  if ((want_code ? rc != want_code
                 : rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT) ||
      resihp_comm_failed(c, failed, MAXN) != 1 || failed[0] != 1) {
    fprintf(stderr, "survivor: %s (%d suspected)\n", resihp_err_name(rc),
            resihp_comm_failed(c, NULL, 0));
    return 1;
  }
  return 0;
}

static int rank_p2p_fault(int rank, int n, void *arg) {
  struct p2p_fault *f = arg;
  resihp_comm_t *c;
  detect_ms = DETECT_MS;
  if (p2p_comm(rank, n, 0, &c))
    return 1;
  uint8_t *b = malloc(BIG);
  pattern(b, BIG, 5);
  int32_t pid = (int32_t)getpid();
  /* Rank 1 is the victim; a warm link first. */
  if (checked_allreduce(c))
    return 1;
  /* The victim's pid, acknowledged: a kill before the survivor has read
   * it could take it along (TCP resets a link that dies with unread data). */
  uint8_t ack = 0;
  if (rank == 1) {
    if (resihp_send(c, 0, &pid, sizeof(pid)) || resihp_recv(c, 0, &ack, 1))
      return 1;
    if (f->victim_sends) {
      resihp_send(c, 0, b, BIG); /* and no more: see below */
    } else {
      p2p_hook_frame = f->frame;
      p2p_hook_sig = f->sig;
      p2p_hook_armed = 1;
      resihp__p2p_test_hook = p2p_fault_hook;
      resihp_recv(c, 0, b, BIG);
    }
    pause(); /* killed by now, or about to be */
    return 1;
  }
  if (resihp_recv(c, 1, &pid, sizeof(pid)) || resihp_send(c, 1, &ack, 1))
    return 1;
  int rc;
  double t0 = now_ms();
  if (f->victim_sends) {
    p2p_hook_frame = f->frame;
    p2p_hook_sig = f->sig;
    p2p_hook_pid = pid;
    p2p_hook_armed = 1;
    resihp__p2p_test_hook = p2p_fault_hook;
    rc = resihp_recv(c, 1, b, BIG);
    if (!rc) /* it had all left before the kill: the next one never does */
      rc = resihp_recv(c, 1, b, 1);
  } else {
    rc = resihp_send(c, 1, b, BIG);
    if (!rc)
      rc = resihp_recv(c, 1, b, 1);
  }
  double fail_ms = now_ms() - t0;
  if (survivor_saw(c, rc, f->sig == SIGSTOP ? RESIHP_ETIMEDOUT : 0))
    return 1;
  if (f->sig == SIGSTOP) {
    /* Silence is only failure after the bound: never earlier. */
    if (fail_ms < DETECT_MS) {
      fprintf(stderr, "stopped peer declared failed after %.0f ms < %d ms\n",
              fail_ms, DETECT_MS);
      return 1;
    }
    fprintf(stderr,
            "  stopped peer: message call failed after %.0f ms (bound %d ms "
            "+ heartbeat)\n",
            fail_ms, DETECT_MS);
  }
  /* And the survivor goes on alone. */
  if (resihp_comm_shrink(c, NULL, 0, NULL, 0, NULL) ||
      resihp_comm_size(c) != 1 || resihp_send(c, 0, b, 10) ||
      resihp_recv(c, 0, b, 10) || resihp_bcast(c, 0, b, 10))
    return 1;
  resihp_comm_destroy(c);
  return 0;
}

static const size_t kill_frames[] = {0, 3, 17, 31};

START_TEST(p2p_peer_killed_mid_message) {
  struct p2p_fault f = {
      .victim_sends = _i / 2 % 2, .frame = kill_frames[_i / 4], .sig = SIGKILL};
  transport = _i % 2 ? 1 : -1;
  int st[MAXN];
  run_group(2, rank_p2p_fault, &f, st);
  ck_assert_msg(WIFEXITED(st[0]) && WEXITSTATUS(st[0]) == 0,
                "survivor status %#x", st[0]);
  ck_assert_msg(WIFSIGNALED(st[1]), "victim status %#x", st[1]);
}
END_TEST

START_TEST(p2p_peer_stopped_mid_message) {
  struct p2p_fault f = {.victim_sends = _i / 2, .frame = 2, .sig = SIGSTOP};
  transport = _i % 2 ? 1 : -1;
  int st[MAXN];
  run_group(2, rank_p2p_fault, &f, st);
  ck_assert_msg(WIFEXITED(st[0]) && WEXITSTATUS(st[0]) == 0,
                "survivor status %#x", st[0]);
  ck_assert_msg(WIFSIGNALED(st[1]), "victim status %#x", st[1]);
}
END_TEST

/* Four ranks; the root of a broadcast dies while sending frame 2 of 17.
 * Every survivor fails with EPEER/ETIMEDOUT naming it, shrinks, and the
 * three then broadcast from their new view rank 0 and pass their world
 * ranks around a ring of view ranks (p2p after the renumbering). */
#define BC_VICTIM 1
static int rank_bcast_root_killed(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  detect_ms = DETECT_MS;
  if (p2p_comm(rank, n, 65536, &c))
    return 1;
  size_t len = MIB + 7;
  uint8_t *b = malloc(len);
  if (checked_allreduce(c))
    return 1;
  if (rank == BC_VICTIM) {
    pattern(b, len, 9);
    p2p_hook_frame = 2;
    p2p_hook_sig = SIGKILL;
    p2p_hook_armed = 1;
    resihp__p2p_test_hook = p2p_fault_hook;
  }
  int rc = resihp_bcast(c, BC_VICTIM, b, len);
  int failed[MAXN];
  if ((rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT) ||
      resihp_comm_failed(c, failed, MAXN) < 1 || failed[0] != BC_VICTIM) {
    fprintf(stderr, "rank %d: bcast with the root killed: %s\n", rank,
            resihp_err_name(rc));
    return 1;
  }
  int nf = 0;
  if (resihp_comm_shrink(c, NULL, 0, failed, MAXN, &nf) || nf != 1 ||
      resihp_comm_size(c) != n - 1)
    return 1;
  int me = resihp_comm_rank(c), m = resihp_comm_size(c);
  if (me == 0)
    pattern(b, len, 10);
  else
    memset(b, 0, len);
  if ((rc = resihp_bcast(c, 0, b, len)) || !pattern_ok(b, len, 10)) {
    fprintf(stderr, "rank %d: bcast after shrink: %s\n", rank,
            resihp_err_name(rc));
    return 1;
  }
  int32_t mine = rank, got = -1;
  if (resihp_send(c, (me + 1) % m, &mine, sizeof(mine)) ||
      resihp_recv(c, (me + m - 1) % m, &got, sizeof(got)) ||
      got != resihp_comm_member(c, (me + m - 1) % m)) {
    fprintf(stderr, "rank %d: p2p after shrink got %d\n", rank, (int)got);
    return 1;
  }
  if (checked_allreduce(c))
    return 1;
  free(b);
  resihp_comm_destroy(c);
  return 0;
}

START_TEST(bcast_root_killed) {
  transport = _i % 2 ? 1 : -1;
  int st[MAXN];
  run_group(4, rank_bcast_root_killed, NULL, st);
  for (int r = 0; r < 4; r++)
    if (r != BC_VICTIM)
      ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0,
                    "rank %d status %#x", r, st[r]);
  ck_assert_msg(WIFSIGNALED(st[BC_VICTIM]), "victim status %#x", st[BC_VICTIM]);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("allreduce");
  TCase *tc = tcase_create("unit");
  tcase_add_test(tc, sha256_vectors);
  tcase_add_test(tc, sha256_implementations_agree);
  tcase_add_test(tc, msgauth_seal_open);
  tcase_add_test(tc, fixed_point_helpers);
  tcase_add_test(tc, stale_epoch_and_duplicates_dropped);
  tcase_add_loop_test(tc, malformed_frames_rejected, 0, 7);
  tcase_add_loop_test(tc, recv_reduce_sums_split_elements, 0, 2);
  tcase_add_loop_test(tc, recv_sink_hands_whole_elements, 0, 2);
  tcase_add_test(tc, send_fill_in_place);
  tcase_add_test(tc, commit_votes_in_rings);
  tcase_add_loop_test(tc, shm_ring_corrupt_index, 0, 3);
  tcase_add_loop_test(tc, peer_gone_mid_frame, 0, 3);
  suite_add_tcase(s, tc);
  tc = tcase_create("group");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, allreduce_lengths, 0, 8);
  tcase_add_loop_test(tc, allreduce_lengths, 10, 16);
  tcase_add_test(tc, auth_refuses_wrong_secret);
  tcase_add_test(tc, hostile_peer_bad_frame);
  tcase_add_test(tc, setup_despite_idle_and_garbage_connections);
  tcase_add_loop_test(tc, tampered_frames_refused, 0, 4);
  tcase_add_test(tc, deterministic_with_failure);
  suite_add_tcase(s, tc);
  tc = tcase_create("p2p");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, p2p_round_trips, 0, 2);
  tcase_add_loop_test(tc, p2p_both_directions_at_once, 0, 2);
  tcase_add_loop_test(tc, p2p_pipeline_ordered_and_interleaved, 0, 2);
  tcase_add_loop_test(tc, bcast_from_every_root, 0, 8);
  tcase_add_loop_test(tc, p2p_size_mismatch_is_eproto, 0, 8);
  tcase_add_loop_test(tc, p2p_peer_killed_mid_message, 0, 16);
  tcase_add_loop_test(tc, p2p_peer_stopped_mid_message, 0, 4);
  tcase_add_loop_test(tc, bcast_root_killed, 0, 2);
  suite_add_tcase(s, tc);

  tc = tcase_create("faults");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, allreduce_faults, 0,
                      (int)(sizeof(scenarios) / sizeof(scenarios[0])));
  tcase_add_test(tc, pause_below_bound_tolerated_beyond_detected);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return run_suite(suite()); }
