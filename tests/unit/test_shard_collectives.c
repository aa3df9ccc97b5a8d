/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp_reduce_scatter and resihp_allgather (resihp/allreduce.h), the
 * collectives of a sharded replica, over forked ranks on loopback:
 *  - the blocks cover any count, also not divisible by the view (and
 *    smaller than it: empty blocks), in order, sizes differing by one;
 *  - each member's block of the reduce-scatter is bitwise that block of
 *    resihp_allreduce's result (float, deterministic fixed point, int64),
 *    the all-gather of the blocks rebuilds that result on every member,
 *    in place and out of place, and sendbuf is never written;
 *  - deterministic mode with values that are not small integers, summed
 *    and averaged: each block still bitwise the all-reduce's;
 *  - each runs one phase of the all-reduce's algorithm, not both: the
 *    reduce-scatter sends (or, single-copy, reads) only reduce-scatter
 *    chunks, n-1 ring steps, the all-gather only all-gather ones;
 *  - a member SIGKILLed (or SIGSTOPped: it hangs) from outside at an
 *    arbitrary moment of back-to-back reduce-scatters and all-gathers
 *    (ring and single-copy paths): every survivor's
 *    failing call says RESIHP_EPEER or RESIHP_ETIMEDOUT (never EPROTO),
 *    names the victim, leaves its input as it was; after the shrink the
 *    same calls over the survivors give their exact sums. */
#include "config.h"

#include <resihp.h>

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../libresihp/collectives/comm_internal.h"
#include "rank_group.h"

#define XS_OK 0
#define XS_FAIL 1
#define XS_EPROTO 2

static size_t esz(resihp_dtype_t dt) {
  return dt == RESIHP_FLOAT32 ? 4 : 8;
}

/* The exact sum over the members of fill() (small integers: exact in
 * float whatever the order). */
static void *expected(size_t count, resihp_dtype_t dt, uint64_t members) {
  void *want = calloc(count ? count : 1, esz(dt));
  void *one = calloc(count ? count : 1, esz(dt));
  for (int r = 0; r < 64; r++) {
    if (!(members >> r & 1))
      continue;
    fill(one, count, dt, r);
    for (size_t i = 0; i < count; i++)
      if (dt == RESIHP_FIXED64)
        ((int64_t *)want)[i] += ((int64_t *)one)[i];
      else
        ((float *)want)[i] += ((float *)one)[i];
  }
  free(one);
  return want;
}

START_TEST(blocks_cover) {
  for (int n = 1; n <= 8; n++)
    for (size_t count = 0; count < 40; count++) {
      size_t next = 0, lo, len;
      for (int i = 0; i < n; i++) {
        resihp_block(count, n, i, &lo, &len);
        ck_assert_uint_eq(lo, next);
        ck_assert(len == count / n || len == count / n + 1);
        next = lo + len;
      }
      ck_assert_uint_eq(next, count);
    }
  size_t lo = 1, len = 1;
  resihp_block(10, 2, 2, &lo, &len); /* outside the view: empty */
  ck_assert(lo == 0 && len == 0);
}
END_TEST

struct rcase {
  int n;
  size_t count;
  resihp_dtype_t dt;
  int det, cma; /* cma: the single-copy path asked for */
};

static const struct rcase rcases[] = {
    {1, 7, RESIHP_FLOAT32, 1, 0},       {2, 0, RESIHP_FLOAT32, 1, 0},
    {2, 1, RESIHP_FLOAT32, 1, 0},       {2, 1001, RESIHP_FLOAT32, 1, 0},
    {3, 2, RESIHP_FIXED64, 0, 0},       {3, 100003, RESIHP_FLOAT32, 1, 0},
    {4, 5, RESIHP_FLOAT32, 0, 0},       {4, 300007, RESIHP_FLOAT32, 1, 0},
    {4, 65539, RESIHP_FIXED64, 0, 0},   {3, 1 << 20, RESIHP_FLOAT32, 0, 0},
    {2, 100001, RESIHP_FLOAT32, 0, 1},  {4, 300007, RESIHP_FLOAT32, 0, 1},
    {3, 1 << 20, RESIHP_FIXED64, 0, 1}, {4, 1 << 20, RESIHP_FLOAT32, 1, 1},
};

static int rank_rs_ag(int rank, int n, void *arg) {
  const struct rcase *k = arg;
  resihp_comm_t *c;
  single_copy = k->cma ? 1 : -1;
  if (make_comm(rank, n, SECRET, 65536, k->det, &c))
    return XS_FAIL;
  size_t e = esz(k->dt), cnt = k->count, lo, len;
  uint8_t *in = calloc(cnt + 1, e), *orig = calloc(cnt + 1, e);
  uint8_t *ar = calloc(cnt + 1, e), *blk = calloc(cnt + 1, e);
  uint8_t *all = calloc(cnt + 1, e), *inpl = calloc(cnt + 1, e);
  fill(in, cnt, k->dt, rank);
  memcpy(orig, in, cnt * e);
  int bad = 0;
  if (resihp_allreduce_to(c, in, ar, cnt, k->dt, RESIHP_OP_SUM) ||
      resihp_reduce_scatter(c, in, blk, cnt, k->dt, RESIHP_OP_SUM))
    bad = 1;
  resihp_block(cnt, n, rank, &lo, &len);
  void *want = expected(cnt, k->dt, view_mask(c));
  if (!bad && (memcmp(blk, ar + lo * e, len * e) ||
               memcmp(blk, (uint8_t *)want + lo * e, len * e))) {
    fprintf(stderr, "rank %d: reduce-scatter block differs\n", rank);
    bad = 1;
  }
  /* out of place, then in place (the block already at its offset) */
  memset(all, 0xa5, cnt * e);
  memcpy(inpl + lo * e, blk, len * e);
  if (!bad && (resihp_allgather(c, blk, all, cnt, k->dt) ||
               resihp_allgather(c, inpl + lo * e, inpl, cnt, k->dt)))
    bad = 1;
  if (!bad && (memcmp(all, ar, cnt * e) || memcmp(inpl, ar, cnt * e))) {
    fprintf(stderr, "rank %d: all-gather differs from the all-reduce\n", rank);
    bad = 1;
  }
  if (memcmp(in, orig, cnt * e))
    bad = 1;
  /* bad arguments are refused, nothing sent */
  if (resihp_reduce_scatter(c, NULL, blk, 4, k->dt, RESIHP_OP_SUM) !=
          RESIHP_EINVAL ||
      resihp_allgather(NULL, blk, all, 4, k->dt) != RESIHP_EINVAL)
    bad = 1;
  resihp_comm_destroy(c);
  return bad ? XS_FAIL : XS_OK;
}

/* Deterministic mode, values of every magnitude with fractions (the fixed
 * point ring's narrow and wide forms, rounding), sum and average: each
 * block of the reduce-scatter is bitwise that of the all-reduce. */
static const struct rcase fcases[] = {
    {2, 70001, RESIHP_FLOAT32, 1, 0},
    {3, 100003, RESIHP_FLOAT32, 1, 0},
    {4, 1 << 20, RESIHP_FLOAT32, 1, 0},
};

static int rank_frac(int rank, int n, void *arg) {
  const struct rcase *k = arg;
  resihp_comm_t *c;
  if (make_comm(rank, n, SECRET, 65536, 1, &c))
    return XS_FAIL;
  size_t cnt = k->count, lo, len;
  float *in = malloc((cnt + 1) * 4), *ar = malloc((cnt + 1) * 4);
  float *blk = malloc((cnt + 1) * 4);
  for (size_t i = 0; i < cnt; i++) /* some chunks narrow, some wide */
    in[i] = (float)((double)((i * 2654435761u + (size_t)rank * 97) % 20011) /
                    7919.0 * ((i / 8192) % 3 ? 1e-3 : 3e4));
  resihp_block(cnt, n, rank, &lo, &len);
  int bad = 0;
  for (int op = RESIHP_OP_SUM; op <= RESIHP_OP_AVG && !bad; op++)
    if (resihp_allreduce_to(c, in, ar, cnt, RESIHP_FLOAT32, op) ||
        resihp_reduce_scatter(c, in, blk, cnt, RESIHP_FLOAT32, op) ||
        memcmp(blk, ar + lo, len * 4)) {
      fprintf(stderr, "rank %d: op %d: the block differs\n", rank, op);
      bad = 1;
    }
  free(in);
  free(ar);
  free(blk);
  resihp_comm_destroy(c);
  return bad ? XS_FAIL : XS_OK;
}

START_TEST(rs_deterministic_fractions) {
  int st[MAXN];
  detect_ms = CALM_DETECT_MS;
  run_group(fcases[_i].n, rank_frac, (void *)&fcases[_i], st);
  expect_all_ok(fcases[_i].n, st);
}
END_TEST

/* What this rank's algorithm did: ring chunks sent by phase (steps below
 * n-1: reduce-scatter), single-copy pieces read by phase. */
static long ring_sent[2], cma_read[2];
static int ring_n;
static void count_ring(resihp_comm_t *c, int step, size_t chunk) {
  (void)c;
  (void)chunk;
  ring_sent[step >= ring_n - 1]++;
}
static void count_cma(resihp_comm_t *c, int phase, size_t piece) {
  (void)c;
  (void)piece;
  cma_read[phase != 0]++;
}

/* rs: what a reduce-scatter may have done; else an all-gather's. */
static int one_phase(int rank, int rs, const char *what) {
  int me = rs ? 0 : 1, other = 1 - me;
  long done = ring_sent[me] + cma_read[me];
  int ok = done > 0 && !ring_sent[other] && !cma_read[other];
  if (!ok)
    fprintf(stderr,
            "rank %d: %s: ring chunks %ld + %ld, single-copy pieces %ld + "
            "%ld (reduce-scatter + all-gather)\n",
            rank, what, ring_sent[0], ring_sent[1], cma_read[0], cma_read[1]);
  memset(ring_sent, 0, sizeof(ring_sent));
  memset(cma_read, 0, sizeof(cma_read));
  return ok;
}

static int rank_phases(int rank, int n, void *arg) {
  resihp_comm_t *c, *d;
  size_t cnt = 1 << 20, lo, len;
  single_copy = *(const int *)arg; /* 1: single-copy where it applies */
  if (make_comm(rank, n, SECRET, 65536, 0, &c))
    return XS_FAIL;
  float *in = calloc(cnt, 4), *blk = calloc(cnt, 4), *all = calloc(cnt, 4);
  fill(in, cnt, RESIHP_FLOAT32, rank);
  resihp_block(cnt, n, rank, &lo, &len);
  ring_n = n;
  resihp__ring_test_hook = count_ring;
  resihp__cma_test_hook = count_cma;
  int ok =
      !resihp_reduce_scatter(c, in, blk, cnt, RESIHP_FLOAT32, RESIHP_OP_SUM) &&
      one_phase(rank, 1, "float reduce-scatter");
  if (single_copy == 1 && !resihp__cma_calls) {
    fprintf(stderr, "rank %d: the single-copy path was not taken\n", rank);
    ok = 0;
  }
  ok = ok && !resihp_allgather(c, blk, all, cnt, RESIHP_FLOAT32) &&
       one_phase(rank, 0, "all-gather");
  /* small: the ring, never the single-copy path */
  ok = ok && !resihp_allgather(c, blk, all, 4 * n, RESIHP_FLOAT32) &&
       one_phase(rank, 0, "small all-gather");
  resihp_comm_destroy(c);
  /* deterministic: the fixed point ring's reduce-scatter */
  ok = ok && !make_comm(rank, n, SECRET, 65536, 1, &d);
  ok = ok &&
       !resihp_reduce_scatter(d, in, blk, cnt, RESIHP_FLOAT32, RESIHP_OP_SUM) &&
       one_phase(rank, 1, "deterministic reduce-scatter");
  if (ok)
    resihp_comm_destroy(d);
  resihp__ring_test_hook = NULL;
  resihp__cma_test_hook = NULL;
  free(in);
  free(blk);
  free(all);
  return ok ? XS_OK : XS_FAIL;
}

START_TEST(one_phase_each) {
  int st[MAXN], cma = _i;
  detect_ms = CALM_DETECT_MS;
  run_group(4, rank_phases, &cma, st);
  expect_all_ok(4, st);
}
END_TEST

START_TEST(rs_ag_exact) {
  int st[MAXN];
  detect_ms = CALM_DETECT_MS;
  run_group(rcases[_i].n, rank_rs_ag, (void *)&rcases[_i], st);
  expect_all_ok(rcases[_i].n, st);
}
END_TEST

/* ---- a member killed from outside ---------------------------------------- */
struct kcase {
  int n, victim, tcp, delay_us;
  size_t count;
  int cma;  /* the single-copy path asked for */
  int stop; /* SIGSTOP instead of SIGKILL: the victim hangs */
};

static const struct kcase kcases[] = {
    {2, 1, 0, 0, 1 << 20, 0, 0},   {2, 0, 0, 700, 1 << 20, 0, 0},
    {3, 2, 0, 300, 300001, 0, 0},  {4, 1, 0, 1500, 1 << 20, 0, 0},
    {3, 0, 1, 500, 1 << 20, 0, 0}, {4, 3, 1, 0, 200003, 0, 0},
    {3, 1, 0, 300, 1 << 20, 1, 0}, {4, 2, 0, 0, 1 << 20, 1, 0},
    {3, 2, 0, 400, 1 << 20, 0, 1}, {4, 1, 0, 200, 1 << 20, 1, 1},
};

static int pid_pipe[2] = {-1, -1};

static pid_t start_killer(int delay_us, int sig) {
  pid_t k = fork();
  ck_assert_int_ge(k, 0);
  if (k)
    return k;
  close(pid_pipe[1]); /* EOF, not a hang, if the victim never writes */
  pid_t victim;
  if (read(pid_pipe[0], &victim, sizeof(victim)) != (ssize_t)sizeof(victim))
    _exit(1);
  /* Only spreads the moment over the victim's calls; nothing waits on it. */
  struct timespec ts = {0, delay_us * 1000L};
  nanosleep(&ts, NULL);
  kill(victim, sig); /* a stopped victim: run_group kills it at the end */
  _exit(0);
}

static int rank_killed(int rank, int n, void *arg) {
  const struct kcase *k = arg;
  resihp_comm_t *c;
  transport = k->tcp ? 1 : -1;
  single_copy = k->cma ? 1 : -1;
  /* single-copy: float sums, so that the reduce-scatter takes it too */
  if (make_comm(rank, n, SECRET, 1 << 16, !k->cma, &c))
    return XS_FAIL;
  size_t cnt = k->count, lo, len;
  float *in = malloc(cnt * 4), *orig = malloc(cnt * 4), *out = malloc(cnt * 4);
  float *blk = malloc(cnt * 4);
  fill(in, cnt, RESIHP_FLOAT32, rank);
  memcpy(orig, in, cnt * 4);
  if (rank == k->victim) { /* the killer starts its clock now */
    pid_t me = getpid();
    if (write(pid_pipe[1], &me, sizeof(me)) != (ssize_t)sizeof(me))
      return XS_FAIL;
  }
  int rc = 0;
  for (int it = 0; it < 100000 && !rc; it++) {
    rc = resihp_reduce_scatter(c, in, blk, cnt, RESIHP_FLOAT32, RESIHP_OP_SUM);
    if (!rc) { /* in place: the block is the input it must keep */
      resihp_block(cnt, n, rank, &lo, &len);
      memcpy(out + lo, blk, len * 4);
      rc = resihp_allgather(c, out + lo, out, cnt, RESIHP_FLOAT32);
      if (rc && memcmp(out + lo, blk, len * 4)) {
        fprintf(stderr, "rank %d: the all-gather wrote its input\n", rank);
        return XS_FAIL;
      }
    }
  }
  if (rc == RESIHP_EPROTO)
    return XS_EPROTO;
  if (rc != RESIHP_EPEER && rc != RESIHP_ETIMEDOUT) {
    fprintf(stderr, "rank %d: rc %s\n", rank, resihp_err_name(rc));
    return XS_FAIL;
  }
  int sus[MAXN], ns = resihp_comm_failed(c, sus, MAXN), named = 0;
  for (int i = 0; i < ns && i < MAXN; i++)
    named |= sus[i] == k->victim;
  if (memcmp(in, orig, cnt * 4)) {
    fprintf(stderr, "rank %d: the reduce-scatter wrote its input\n", rank);
    return XS_FAIL;
  }
  int failed[MAXN], nf = 0;
  if (resihp_comm_shrink(c, NULL, 0, failed, MAXN, &nf) || nf != 1 ||
      failed[0] != k->victim) {
    fprintf(stderr, "rank %d: shrink removed %d (named %d)\n", rank, nf, named);
    return XS_FAIL;
  }
  /* the survivors' exact sums, in the new view's blocks */
  if (resihp_reduce_scatter(c, in, blk, cnt, RESIHP_FLOAT32, RESIHP_OP_SUM))
    return XS_FAIL;
  int m = resihp_comm_size(c), me = resihp_comm_rank(c);
  resihp_block(cnt, m, me, &lo, &len);
  memcpy(out + lo, blk, len * 4);
  if (resihp_allgather(c, out + lo, out, cnt, RESIHP_FLOAT32))
    return XS_FAIL;
  float *want = expected(cnt, RESIHP_FLOAT32, view_mask(c));
  int bad = memcmp(out, want, cnt * 4) != 0;
  put_record(c, 1, 0);
  resihp_comm_destroy(c);
  return bad ? XS_FAIL : XS_OK;
}

START_TEST(killed_from_outside) {
  const struct kcase *k = &kcases[_i];
  int st[MAXN];
  detect_ms = DETECT_MS;
  ck_assert_int_eq(pipe(pid_pipe), 0);
  pid_t killer = start_killer(k->delay_us, k->stop ? SIGSTOP : SIGKILL);
  run_group(k->n, rank_killed, (void *)k, st);
  int ks;
  ck_assert_int_eq(waitpid(killer, &ks, 0), killer);
  ck_assert_msg(WIFEXITED(ks) && WEXITSTATUS(ks) == 0, "killer %#x", ks);
  close(pid_pipe[0]);
  close(pid_pipe[1]);
  transport = -1;
  struct record rec[MAXN];
  int nrec = read_records(rec, MAXN);
  for (int r = 0; r < k->n; r++) {
    if (r == k->victim) {
      ck_assert_msg(WIFSIGNALED(st[r]) && WTERMSIG(st[r]) == SIGKILL,
                    "the victim %#x", st[r]);
      continue;
    }
    ck_assert_msg(!(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == XS_EPROTO),
                  "rank %d: a dead peer was RESIHP_EPROTO", r);
    ck_assert_msg(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == XS_OK,
                  "rank %d status %#x", r, st[r]);
  }
  ck_assert_int_eq(nrec, k->n - 1);
  for (int i = 1; i < nrec; i++)
    ck_assert(rec[i].members == rec[0].members && rec[i].epoch == rec[0].epoch);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("shard_collectives");
  TCase *t = tcase_create("exact");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, blocks_cover);
  tcase_add_loop_test(t, rs_ag_exact, 0,
                      (int)(sizeof(rcases) / sizeof(rcases[0])));
  tcase_add_loop_test(t, rs_deterministic_fractions, 0,
                      (int)(sizeof(fcases) / sizeof(fcases[0])));
  tcase_add_loop_test(t, one_phase_each, 0, 2);
  suite_add_tcase(s, t);
  TCase *k = tcase_create("killed");
  tcase_set_timeout(k, 120);
  tcase_add_loop_test(k, killed_from_outside, 0,
                      (int)(sizeof(kcases) / sizeof(kcases[0])));
  suite_add_tcase(s, k);
  return s;
}

int main(void) {
  return run_suite(suite());
}
