/* SPDX-License-Identifier: BSD-3-Clause */
/* Tests of the single-copy all-reduce between ranks of one host
 * (collectives/cma_allreduce.c, transport/cma.c): forked ranks on loopback
 * (rank_group.h) that read each other's buffers with process_vm_readv,
 * compared with exact sums, bitwise across ranks, and with the path that
 * was really taken (resihp__cma_calls); ranks that really die (SIGKILL
 * from a test hook between pieces, or from outside) or stop (SIGSTOP from
 * outside) in the middle of the copies. */
#include "config.h"

#include <resihp.h>

#include "../../libresihp/collectives/comm_internal.h"

#include <check.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rank_group.h"

#define THR RESIHP__CMA_MIN_BYTES

/* ---- correctness ---------------------------------------------------------
 * Every dtype, SUM and AVG, in place and out of place, lengths around the
 * threshold (in elements of the wire type) and odd ones; each rank sends
 * the parent a digest of every result, which must be the same bits on
 * every rank. */

struct digest {
  int rank, ncase;
  uint64_t h;
};
static int dig_pipe[2];

static uint64_t fnv(const void *b, size_t len) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < len; i++)
    h = (h ^ ((const uint8_t *)b)[i]) * 1099511628211ull;
  return h;
}

static const resihp_dtype_t dtypes[] = {RESIHP_FLOAT32, RESIHP_FLOAT64,
                                        RESIHP_BFLOAT16, RESIHP_FIXED64};
#define NDT 4
#define NCOUNTS 5
#define NCASES (NDT * 2 * 2 * NCOUNTS)

struct corr {
  int n, det, single;
};

static size_t case_count(int k, size_t wire) {
  size_t t = THR / wire;
  const size_t counts[NCOUNTS] = {t - 1, t, t + 1, 3 * t + 7, 100};
  return counts[k];
}

static int rank_correct(int rank, int n, void *arg) {
  const struct corr *co = arg;
  resihp_comm_t *c;
  single_copy = co->single;
  if (make_comm(rank, n, SECRET, 0, co->det, &c))
    return 1;
  size_t maxb = (3 * THR + 64) * 2;
  uint8_t *send = malloc(maxb), *out = malloc(maxb), *orig = malloc(maxb);
  int ncase = 0;
  for (int d = 0; d < NDT; d++)
    for (int op = 0; op < 2; op++)
      for (int ip = 0; ip < 2; ip++)
        for (int k = 0; k < NCOUNTS; k++, ncase++) {
          resihp_dtype_t dt = dtypes[d];
          size_t esz = dt == RESIHP_BFLOAT16 ? 2 : dt == RESIHP_FLOAT32 ? 4 : 8;
          size_t wire = co->det ? 8 : esz, count = case_count(k, wire);
          fill(send, count, dt, rank);
          memcpy(orig, send, count * esz);
          memset(out, 0xa5, count * esz);
          long before = atomic_load(&resihp__cma_calls);
          int rc = ip ? resihp_allreduce(c, send, count, dt, (resihp_op_t)op)
                      : resihp_allreduce_to(c, send, out, count, dt,
                                            (resihp_op_t)op);
          long took = atomic_load(&resihp__cma_calls) - before;
          long want = co->single && count * wire >= THR;
          const void *res = ip ? send : out;
          if (rc || took != want ||
              check(res, count, dt, (resihp_op_t)op, view_mask(c), n) ||
              (!ip && memcmp(orig, send, count * esz))) {
            fprintf(stderr,
                    "rank %d: case %d (dtype %d op %d %s count %zu): %s, "
                    "single-copy calls %ld (want %ld)\n",
                    rank, ncase, (int)dt, op, ip ? "in place" : "out of place",
                    count, resihp_err_name(rc), took, want);
            return 1;
          }
          struct digest dg = {rank, ncase, fnv(res, count * esz)};
          if (write(dig_pipe[1], &dg, sizeof(dg)) != (ssize_t)sizeof(dg))
            return 1;
        }
  resihp_comm_destroy(c);
  free(send);
  free(out);
  free(orig);
  return 0;
}

static void run_correct(struct corr co) {
  ck_assert_int_eq(pipe(dig_pipe), 0);
  int st[MAXN];
  run_group(co.n, rank_correct, &co, st);
  close(dig_pipe[1]);
  struct record rec[MAXN];
  read_records(rec, MAXN);
  expect_all_ok(co.n, st);
  static uint64_t h[NCASES][MAXN];
  static int seen[NCASES][MAXN];
  memset(seen, 0, sizeof(seen));
  struct digest dg;
  int total = 0;
  while (read(dig_pipe[0], &dg, sizeof(dg)) == (ssize_t)sizeof(dg)) {
    ck_assert(dg.ncase >= 0 && dg.ncase < NCASES && dg.rank >= 0 &&
              dg.rank < co.n);
    h[dg.ncase][dg.rank] = dg.h;
    seen[dg.ncase][dg.rank]++;
    total++;
  }
  close(dig_pipe[0]);
  ck_assert_int_eq(total, NCASES * co.n);
  for (int k = 0; k < NCASES; k++)
    for (int r = 0; r < co.n; r++) {
      ck_assert_int_eq(seen[k][r], 1);
      ck_assert_msg(h[k][r] == h[k][0], "case %d: rank %d differs from rank 0",
                    k, r);
    }
}

/* n = 2..4, float path and deterministic (int64 on the wire). */
START_TEST(cma_correct) {
  run_correct((struct corr){2 + _i % 3, _i / 3, 1});
}
END_TEST

/* single-copy off: the rings, same results, the path never taken. */
START_TEST(cma_setting_off_uses_rings) {
  run_correct((struct corr){2 + _i, 0, 0});
}
END_TEST

/* ---- the probe fails: the rings, silently --------------------------------
 * Ranks that may not read each other (not dumpable and without
 * CAP_SYS_PTRACE: what Yama ptrace_scope 1 does to siblings) fall back to
 * the rings at set-up: large calls work and never take the path. */

static int drop_ptrace_rights(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d))
    return -1;
  d[0].effective &= ~(1u << CAP_SYS_PTRACE);
  d[0].permitted &= ~(1u << CAP_SYS_PTRACE);
  if (syscall(SYS_capset, &h, d))
    return -1;
  return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

static int rank_no_probe(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  single_copy = 1; /* asked for (default off), refused by the probe */
  if (drop_ptrace_rights() || make_comm(rank, n, SECRET, 0, 0, &c))
    return 1;
  size_t count = 4 * THR / sizeof(float) + 3;
  float *buf = malloc(count * sizeof(float));
  fill(buf, count, RESIHP_FLOAT32, rank);
  long before = atomic_load(&resihp__cma_calls);
  if (resihp_allreduce(c, buf, count, RESIHP_FLOAT32, RESIHP_OP_SUM) ||
      check(buf, count, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c), n) ||
      atomic_load(&resihp__cma_calls) != before) {
    fprintf(stderr, "rank %d: wrong result or single copy taken\n", rank);
    return 1;
  }
  resihp_comm_destroy(c);
  free(buf);
  return 0;
}

START_TEST(cma_probe_fails_uses_rings) {
  int st[MAXN];
  run_group(2 + _i, rank_no_probe, NULL, st);
  struct record rec[MAXN];
  read_records(rec, MAXN);
  expect_all_ok(2 + _i, st);
}
END_TEST

/* ---- a live peer publishes a buffer that cannot be read ------------------
 * Rank 1 passes a send buffer whose first half (segment 0, which rank 0
 * reads) is not accessible; rank 1 itself never touches it. Rank 0 must
 * report RESIHP_EPROTO and suspect rank 1. */

#define HCOUNT ((size_t)1 << 20) /* float32: 4 MiB, halves page-aligned */

static int rank_bad_addr(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  single_copy = 1;
  if (make_comm(rank, n, SECRET, 0, 0, &c))
    return 1;
  size_t bytes = HCOUNT * sizeof(float);
  float *in = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  float *out = malloc(bytes);
  if (in == MAP_FAILED || !out)
    return 1;
  fill(in, HCOUNT, RESIHP_FLOAT32, rank);
  if (rank == 1 && mprotect(in, bytes / 2, PROT_NONE))
    return 1;
  long before = atomic_load(&resihp__cma_calls);
  int rc =
      resihp_allreduce_to(c, in, out, HCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM);
  if (atomic_load(&resihp__cma_calls) != before + 1)
    return 1;
  if (rank == 1)
    return rc ? 0 : 1; /* it fails too, for the abort of rank 0 */
  int failed[MAXN];
  if (rc != RESIHP_EPROTO || resihp_comm_failed(c, failed, MAXN) != 1 ||
      failed[0] != 1) {
    fprintf(stderr, "rank 0: %s, want RESIHP_EPROTO blaming rank 1\n",
            resihp_err_name(rc));
    return 1;
  }
  return 0;
}

START_TEST(cma_unreadable_address_is_eproto) {
  int st[MAXN];
  run_group(2, rank_bad_addr, NULL, st);
  struct record rec[MAXN];
  read_records(rec, MAXN);
  expect_all_ok(2, st);
}
END_TEST

/* ---- faults --------------------------------------------------------------
 * The victim dies or stops between two pieces it reads (phase 0:
 * reduce-scatter, 1: all-gather): by its own SIGKILL from the test hook,
 * or by a signal from outside (a thread of the parent), which it waits
 * for. Survivors must get RESIHP_EPEER or RESIHP_ETIMEDOUT (never
 * RESIHP_EPROTO), find their input untouched, shrink, retry with the exact
 * result and agree on the view and on the outcome of every call (a call
 * may succeed everywhere when the victim dies after everybody read it). */

enum how { K_HOOK, K_OUT_KILL, K_OUT_STOP };

struct kscen {
  int n, victim, phase;
  long piece; /* -1 random, -2 last */
  enum how how;
  int inplace;
};

#define KCOUNT ((size_t)3 << 18) /* 3 MiB of float32 */

static const struct kscen kscen[] = {
    {2, 1, 0, 0, K_HOOK, 1},     {2, 0, 0, -1, K_HOOK, 1},
    {2, 1, 0, -2, K_HOOK, 0},    {2, 1, 1, 0, K_HOOK, 1},
    {2, 0, 1, -2, K_HOOK, 0},    {3, 0, 0, -1, K_HOOK, 1},
    {3, 2, 1, -1, K_HOOK, 0},    {3, 1, 0, -2, K_HOOK, 1},
    {4, 1, 0, -1, K_HOOK, 1},    {4, 3, 1, 0, K_HOOK, 1},
    {4, 2, 0, 0, K_HOOK, 0},     {3, 1, 0, -1, K_OUT_KILL, 1},
    {2, 1, 1, 0, K_OUT_KILL, 0}, {2, 1, 0, -1, K_OUT_STOP, 1},
    {3, 2, 1, 0, K_OUT_STOP, 1}, {4, 0, 0, -1, K_OUT_STOP, 0},
};

static struct kscen cur;
static resihp_comm_t *hook_comm;
static int kill_pipe[2];

static void kill_hook(resihp_comm_t *c, int phase, size_t piece) {
  if (c != hook_comm || phase != cur.phase || (long)piece != cur.piece)
    return;
  hook_comm = NULL; /* once */
  if (cur.how == K_HOOK)
    raise(SIGKILL);
  pid_t me = getpid();
  if (write(kill_pipe[1], &me, sizeof(me)) != (ssize_t)sizeof(me))
    _exit(1);
  for (;;)
    pause(); /* until the signal from outside */
}

static int rank_kill(int rank, int n, void *arg) {
  (void)arg;
  resihp_comm_t *c;
  /* The calm bound: a rank starved for a second on a loaded machine (the
   * sanitizer tree) must not pass for a failure here. */
  detect_ms = CALM_DETECT_MS;
  single_copy = 1;
  if (make_comm(rank, n, SECRET, 0, 0, &c))
    return 1;
  float *send = malloc(KCOUNT * sizeof(float));
  float *out = malloc(KCOUNT * sizeof(float));
  float *orig = malloc(KCOUNT * sizeof(float));
  fill(orig, KCOUNT, RESIHP_FLOAT32, rank);
  /* A clean call first: the path is taken. */
  memcpy(send, orig, KCOUNT * sizeof(float));
  long before = atomic_load(&resihp__cma_calls);
  if (resihp_allreduce(c, send, KCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM) ||
      check(send, KCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c), n) ||
      atomic_load(&resihp__cma_calls) != before + 1) {
    fprintf(stderr, "rank %d: the clean single-copy call failed\n", rank);
    return 1;
  }
  if (rank == cur.victim) {
    hook_comm = c;
    resihp__cma_test_hook = kill_hook;
  }
  int attempts = 0, rc;
  for (;;) {
    attempts++;
    memcpy(send, orig, KCOUNT * sizeof(float));
    before = atomic_load(&resihp__cma_calls);
    rc = cur.inplace
             ? resihp_allreduce(c, send, KCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM)
             : resihp_allreduce_to(c, send, out, KCOUNT, RESIHP_FLOAT32,
                                   RESIHP_OP_SUM);
    if (attempts == 1 && atomic_load(&resihp__cma_calls) != before + 1) {
      fprintf(stderr, "rank %d: the failing call was not single-copy\n", rank);
      return 1;
    }
    const float *res = cur.inplace ? send : out;
    if (rc == 0 && check(res, KCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM,
                         view_mask(c), resihp_comm_size(c)))
      return 1;
    /* A call may still succeed once the victim is gone: its data were
     * complete (it died after everybody had read it); the next one fails. */
    if (rc == 0 && !(view_mask(c) >> cur.victim & 1))
      break;
    if (attempts > 4) {
      fprintf(stderr, "rank %d: no recovery after %d calls\n", rank, attempts);
      return 1;
    }
    if (rc == 0)
      continue;
    if (rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT) {
      fprintf(stderr, "rank %d: unexpected %s\n", rank, resihp_err_name(rc));
      return 1;
    }
    if (memcmp(orig, send, KCOUNT * sizeof(float))) {
      fprintf(stderr, "rank %d: input modified by a failed call\n", rank);
      return 1;
    }
    int failed[MAXN], nf = 0;
    if (resihp_comm_failed(c, failed, MAXN) < 1 ||
        (rc = resihp_comm_shrink(c, NULL, 0, failed, MAXN, &nf)) || nf < 1) {
      fprintf(stderr, "rank %d: shrink %s nf %d\n", rank, resihp_err_name(rc),
              nf);
      return 1;
    }
  }
  /* The new view keeps working. */
  memcpy(send, orig, KCOUNT * sizeof(float));
  if ((rc = resihp_allreduce(c, send, KCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM)) ||
      check(send, KCOUNT, RESIHP_FLOAT32, RESIHP_OP_SUM, view_mask(c),
            resihp_comm_size(c))) {
    fprintf(stderr, "rank %d: the call after the recovery: %s\n", rank,
            resihp_err_name(rc));
    return 1;
  }
  put_record(c, attempts, 0);
  resihp_comm_destroy(c);
  free(send);
  free(out);
  free(orig);
  return 0;
}

/* The outside: a process (not a thread: ranks are forked from this one,
 * and a fork beside a running thread may copy a lock it holds) that
 * signals whichever rank writes its pid to kill_pipe. */
static pid_t start_killer(void) {
  ck_assert_int_eq(pipe(kill_pipe), 0);
  pid_t k = fork();
  ck_assert_int_ge(k, 0);
  if (k == 0) {
    close(kill_pipe[1]);
    pid_t pid;
    while (read(kill_pipe[0], &pid, sizeof(pid)) == (ssize_t)sizeof(pid))
      kill(pid, cur.how == K_OUT_STOP ? SIGSTOP : SIGKILL);
    _exit(0);
  }
  close(kill_pipe[0]);
  return k;
}

START_TEST(cma_peer_dies_mid_copy) {
  const char *only = getenv("RESIHP_TEST_SCENARIO"); /* for debugging */
  if (only && atoi(only) != _i)
    return;
  cur = kscen[_i];
  unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
  srand(seed);
  size_t seg = KCOUNT / (size_t)cur.n * sizeof(float);
  size_t piece = cur.phase ? RESIHP__CMA_GATHER_PIECE : RESIHP__CMA_PIECE;
  long npieces = (long)((seg + piece - 1) / piece);
  if (cur.piece == -1)
    cur.piece = rand() % npieces;
  if (cur.piece == -2)
    cur.piece = npieces - 1;
  fprintf(stderr,
          "single-copy fault %d: n=%d victim=%d phase=%d piece=%ld/%ld how=%d "
          "%s (seed %u)\n",
          _i, cur.n, cur.victim, cur.phase, cur.piece, npieces, (int)cur.how,
          cur.inplace ? "in place" : "out of place", seed);
  pid_t killer = start_killer();
  int st[MAXN];
  run_group(cur.n, rank_kill, NULL, st);
  close(kill_pipe[1]); /* the killer reads EOF once every rank is gone */
  waitpid(killer, NULL, 0);
  struct record rec[MAXN];
  int k = read_records(rec, MAXN);
  for (int r = 0; r < cur.n; r++) {
    if (r == cur.victim) {
      ck_assert_msg(WIFSIGNALED(st[r]), "victim %d status %#x", r, st[r]);
      continue;
    }
    ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0,
                  "rank %d status %#x", r, st[r]);
  }
  ck_assert_int_eq(k, cur.n - 1);
  for (int i = 0; i < k; i++) {
    ck_assert_int_eq(rec[i].epoch, rec[0].epoch);
    ck_assert_uint_eq(rec[i].members, rec[0].members);
    ck_assert_int_eq(rec[i].attempts, rec[0].attempts); /* same outcomes */
    ck_assert(!(rec[i].members >> cur.victim & 1));
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("allreduce_cma");
  TCase *tc = tcase_create("correct");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, cma_correct, 0, 6);
  tcase_add_loop_test(tc, cma_setting_off_uses_rings, 0, 2);
  tcase_add_loop_test(tc, cma_probe_fails_uses_rings, 0, 2);
  tcase_add_test(tc, cma_unreadable_address_is_eproto);
  suite_add_tcase(s, tc);
  tc = tcase_create("faults");
  tcase_set_timeout(tc, 120); /* safety net: ranks have alarm(40) */
  tcase_add_loop_test(tc, cma_peer_dies_mid_copy, 0,
                      (int)(sizeof(kscen) / sizeof(kscen[0])));
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return run_suite(suite());
}
