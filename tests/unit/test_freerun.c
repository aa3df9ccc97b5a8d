/* SPDX-License-Identifier: BSD-3-Clause */
/* Free-running steps (coordinator.h, recovery/job_step.c): the real
 * coordinator in this process, replicas of real forked ranks over
 * loopback. Without failure the coordinator's protocol lines do not grow
 * with the steps; a replica killed from outside in the middle of a free
 * run is recovered within its step; a stop and a joiner end the run at a
 * step boundary. Every run's result must be exactly that of a failure-free
 * run (of the steps it did), and the ledger must hold every step once, in
 * order, each microbatch with one replica.
 *
 * Events, not time: a rank of the "hooked" replica writes its pid to a
 * pipe at the start of a chosen step and, if asked, waits there until the
 * test answers (or kills it), so that what the test does lands in the
 * middle of a free run however fast the steps go. */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/recovery/job_internal.h"
#include "../../libresihp/transport/mesh.h"
#include "rank_group.h"
#include "train_model.h"

#include <resihp.h>

#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXR 4 /* replicas */
#define MAXK 3 /* ranks per replica */
#define KEY "freerun-test-secret-0123456789"

typedef struct {
  int R, K;
  long steps;
  int lockstep;
  /* the hook: replica hook_r's rank 0 says it reached step hook_step and
   * waits for an answer when hook_wait (-1: no hook) */
  int hook_r;
  long hook_step;
  int hook_wait;
  /* replicas not started at first (they join later) */
  int late[MAXR];
  /* assignment by predicted cost, the ranks' data loader tm_workload */
  int cost;
  /* ... which fails for step wl_fail_step on replica wl_fail_r's ranks */
  int wl_fail_r;
  long wl_fail_step;
  /* replica lost_r's rank 1 dies at the boundary after step lost_step,
   * between the shard group's vote and the replica's; its rank 0 goes on
   * without checking end_step's result (-1: nobody) */
  int lost_r;
  long lost_step;
  /* 1: every rank declares its NB elements as NB layers of one element
   * (resihp_job_set_layers); 2: so do all but replica 0's last rank, which
   * declares another partition: both ranks of replica 0 must be refused
   * (each tells the test by a pid of -1 on the hook pipe); 3: the last
   * replica holds the layers in another partition than the others (K=2),
   * and each rank checks how many groups it is in; 4: as 3, and every
   * rank declares its state by layer (resihp_job_set_layer_state: layers
   * 0 and 2 the shard's NB uint64, layer 1 a counter of its own, the
   * rank an RNG word: tm_layer_state); 5: every replica
   * holds 4 layers of NB, 0, 0 and NB elements as 2,2 and can move them
   * (resihp_job_set_layers_movable): the test moves replica hook_r's to
   * 1,3 (its gradients keep their sizes), each rank checks it is told
   * once, at the step after hook_step, and only on that replica; its
   * rank die_in_move (-1: none) dies there, before the commit; 6: K
   * layers of NB elements, one per rank, movable and its state by layer
   * (each layer its shard), as many over fewer ranks for a replica that
   * shrank (its first ranks one more) */
  int layers;
  int die_in_move;
  /* (layers 3 and 4) the ranks can move their layers too
   * (resihp_job_set_layers_movable) */
  int movable;
  /* (layers 5) every rank declares its state by layer (layer 0 its shard
   * 0, layer 3 its shard 1, layers 1 and 2 none: layer5_state) and
   * commits a move so (resihp_job_commit_layer_state); a process of one
   * rank (the replica shrunk in place) holds all four */
  int lstate;
} plan_t;

static char g_secret[128], g_coord[64];
static int g_compute_us = 2000;         /* a step's "compute" */
static int g_hook_out[2], g_hook_in[2]; /* rank -> test, test -> rank */

/* The hooked rank: its pid to the test, then (hook_wait) one byte back. */
static void hook(const plan_t *p) {
  pid_t me = getpid();
  if (write(g_hook_out[1], &me, sizeof(me)) != sizeof(me))
    _exit(40);
  char b;
  if (p->hook_wait && read(g_hook_in[0], &b, 1) != 1)
    _exit(41);
}

/* tm_workload, but not for step wl_fail_step on replica wl_fail_r. */
static int g_replica;
static int flaky_workload(long s, int mb, double *tokens, double *sum_l2,
                          double *nseq, void *ud) {
  const plan_t *p = ud;
  if (g_replica == p->wl_fail_r && s == p->wl_fail_step)
    return -1;
  return tm_workload(s, mb, tokens, sum_l2, nseq, NULL);
}

/* The ranks of the process of a replica shrunk in place (0: none). */
static int g_shrunk_k;

/* At the boundary of step g_lost_step: this rank dies (see plan_t). */
static long g_lost_step = -1;
static void die_at_boundary(long step) {
  if (step == g_lost_step)
    raise(SIGKILL);
}

/* plan_t layers 4: the state of layer 1 (held by rank 1 of partition
 * 1,2, rank 0 of 2,1) and of the rank (its own RNG word) after step s,
 * each a recurrence over the steps, so that a replacement holding a
 * wrong one ends with another result. */
static uint64_t layer1_next(uint64_t x, long s) {
  return x * 31 + (uint64_t)s + 1;
}
static uint64_t rng_next(uint64_t g, int sh) {
  return g * 6364136223846793005ULL + 1442695040888963407ULL + (uint64_t)sh;
}

/* A process of a replica shrunk in place is told its partition on every
 * rank (resihp_job_shrunk_partition): the planner's over its ranks, the
 * counts the test expects (cnt); any other process is told none. 0 when
 * so. */
static int shrunk_counts(const resihp_job_t *job, const int *cnt) {
  int n = resihp_job_shards(job), got[MAXK];
  int rc = resihp_job_shrunk_partition(job, got, n);
  if (!g_shrunk_k || n != g_shrunk_k)
    return rc != RESIHP_ENOENT;
  return rc || memcmp(got, cnt, sizeof(int) * (size_t)n);
}

/* plan_t layers 5 with lstate: the state of layers first.. (count) of
 * a rank whose m holds its shards (one: both, 0 and 1; else shard sh's)
 * into ls, over lb. */
static void layer5_state(int first, int count, int one, uint64_t *m,
                         resihp_job_buf_t *lb, resihp_job_layer_state_t *ls) {
  lb[0] = (resihp_job_buf_t){m, sizeof(uint64_t) * NB};
  lb[1] = (resihp_job_buf_t){m + (one ? NB : 0), sizeof(uint64_t) * NB};
  for (int i = 0; i < count; i++) {
    int l = first + i;
    ls[i].bufs = l == 0 ? &lb[0] : l == 3 ? &lb[1] : NULL;
    ls[i].nbufs = l == 0 || l == 3;
  }
}

static int rank_main(const plan_t *p, int replica) {
  resihp_job_opts_t o;
  /* (a replica shrunk to fewer ranks, plan_t layers 4 and 6, holds more
   * shards: those of its layers in order) */
  uint64_t m[MAXK * NB] = {0};
  resihp_job_buf_t sb;
  tm_job_opts(&o, p->steps, g_coord, replica, g_secret, m, &sb);
  if (p->layers == 4 || p->layers == 6 || p->lstate) /* (by layer, below) */
    o.state = NULL, o.nstate = 0;
  uint64_t x = 1, rng = 100;
  resihp_job_t *job;
  if (resihp_job_join(&o, &job))
    return 10;
  g_replica = replica;
  if (p->cost && resihp_job_set_workload_fn(job, flaky_workload, (void *)p))
    return 14;
  int sh = resihp_job_shard(job);
  int first = -1, count = -1;
  /* a replica of 2 ranks shrunk to one (a relaunch on its survivor, the
   * coordinator's resihp__coord_shrink_in_place) */
  int one = (p->layers == 4 || p->layers == 5) && p->K == 2 &&
            resihp_job_shards(job) == 1;
  resihp_job_buf_t lb5[2];
  resihp_job_layer_state_t ls5[4];
  if (p->layers == 3 || p->layers == 4) {
    /* 3 layers of NB, 0 and NB elements: every rank exchanges NB of them
     * whether its replica holds them as 1,2 or (the last replica) 2,1;
     * one rank holds all three */
    size_t el[3] = {NB, 0, NB};
    int cnt[2] = {1, 2};
    if (replica == p->R - 1)
      cnt[0] = 2, cnt[1] = 1;
    if (one)
      cnt[0] = 3;
    if (shrunk_counts(job, cnt))
      return 19;
    if (resihp_job_set_layers(job, 3, el, cnt, one ? 1 : 2) ||
        (p->movable && resihp_job_set_layers_movable(job)))
      return 16;
    resihp_job_buf_t mb = {m, sizeof(uint64_t) * NB},
                     m2b = {m + NB, sizeof(uint64_t) * NB},
                     xb = {&x, sizeof(x)}, gb = {&rng, sizeof(rng)};
    resihp_job_layer_state_t ls[3];
    if (resihp_job_layers(job, &first, &count) || count > 2 + one)
      return 16;
    for (int i = 0; i < count; i++) {
      ls[i].bufs = first + i == 1 ? &xb : one && first + i == 2 ? &m2b : &mb;
      ls[i].nbufs = 1;
    }
    if (p->layers == 4 &&
        resihp_job_set_layer_state(job, ls, count, &gb, 1))
      return 18;
  } else if (p->layers == 6) {
    int n = resihp_job_shards(job), cnt[MAXK];
    size_t el[MAXK];
    resihp_job_buf_t lb[MAXK], gb = {&rng, sizeof(rng)};
    resihp_job_layer_state_t ls[MAXK];
    for (int k = 0; k < p->K; k++)
      el[k] = NB;
    for (int k = 0; k < n; k++)
      cnt[k] = 1 + (k < p->K - n);
    if (shrunk_counts(job, cnt))
      return 19;
    if (resihp_job_set_layers(job, p->K, el, cnt, n) ||
        resihp_job_set_layers_movable(job) ||
        resihp_job_layers(job, &first, &count))
      return 16;
    for (int i = 0; i < count; i++) {
      lb[i] = (resihp_job_buf_t){m + i * NB, sizeof(uint64_t) * NB};
      ls[i].bufs = &lb[i];
      ls[i].nbufs = 1;
    }
    if (resihp_job_set_layer_state(job, ls, count, &gb, 1))
      return 18;
  } else if (p->layers == 5) {
    size_t el[4] = {NB, 0, 0, NB};
    int cnt[2] = {2, 2};
    if (one)
      cnt[0] = 4;
    if (shrunk_counts(job, cnt))
      return 19;
    if (resihp_job_set_layers(job, 4, el, cnt, one ? 1 : 2) ||
        resihp_job_set_layers_movable(job) ||
        resihp_job_layers(job, &first, &count))
      return 16;
    layer5_state(first, count, one, m, lb5, ls5);
    if (p->lstate && resihp_job_set_layer_state(job, ls5, count, NULL, 0))
      return 18;
  } else if (p->layers) {
    int K = resihp_job_shards(job), cnt[MAXK];
    size_t el[NB * MAXK];
    for (int i = 0; i < NB * K; i++)
      el[i] = 1;
    for (int k = 0; k < K; k++)
      cnt[k] = NB;
    int odd = p->layers == 2 && replica == 0;
    if (odd && sh == K - 1 && K > 1)
      cnt[0]++, cnt[K - 1]--;
    int rc = resihp_job_set_layers(job, NB * K, el, cnt, K);
    if (odd) {
      /* the leader leaves only once the test counted both refusals: its
       * exit fails the replica, whose other rank is then killed (as
       * resihp-run cancels a failed replica's step), maybe before it said
       * its own refusal */
      pid_t refused = -1;
      char ack;
      if (rc == RESIHP_EINVAL &&
          write(g_hook_out[1], &refused, sizeof(refused)) == sizeof(refused) &&
          (sh || read(g_hook_in[0], &ack, 1) == 1))
        return 15;
    } else if (rc || resihp_job_layers(job, &first, &count) ||
               first != sh * NB || count != NB)
      return 16;
  }
  if (replica == p->lost_r && sh == 1) {
    g_lost_step = p->lost_step;
    resihp__job_boundary_hook = die_at_boundary;
  }
  resihp_job_step_t st;
  int rc, moves = 0;
  while ((rc = resihp_job_begin_step(job, &st)) == 0 && !st.done) {
    if (replica == p->hook_r && sh == 0 && st.step == p->hook_step)
      hook(p);
    /* (layers 3) a rank holding two runs of layers is in two groups (not
     * checked with 4: its replica 2 may be out for a while) */
    if (st.layers_moved && sh == p->die_in_move)
      raise(SIGKILL); /* in the middle of the move */
    if (st.layers_moved && p->die_in_move >= 0) {
      /* the other rank died in the move: the commit must fail here (all
       * or nothing), said to the test by a pid of -2 */
      pid_t failed = -2;
      if (resihp_job_commit_layers(job, &sb, 1, 0) &&
          write(g_hook_out[1], &failed, sizeof(failed)) == sizeof(failed))
        return 20;
      return 21;
    }
    if (st.layers_moved) {
      /* (layers 5) 1,3 from the next step on: the state keeps its size */
      int cnt[2] = {0, 0}, mfirst = -1, mcount = -1;
      if (p->layers != 5 || replica != p->hook_r ||
          st.step != p->hook_step + 1 || moves++ ||
          resihp_job_partition(job, cnt, 2) || cnt[0] != 1 || cnt[1] != 3 ||
          resihp_job_layers(job, &mfirst, &mcount) || mfirst != (sh ? 1 : 0) ||
          mcount != (sh ? 3 : 1))
        return 18;
      layer5_state(mfirst, mcount, 0, m, lb5, ls5);
      if (p->lstate
              ? resihp_job_commit_layer_state(job, ls5, mcount, NULL, 0, 0)
              : resihp_job_commit_layers(job, &sb, 1, 0))
        return 18;
    }
    /* (layers 3) a rank holding two runs of layers is in two groups */
    if (p->layers == 3 &&
        resihp__job_ngroups(job) !=
            1 + (sh == (replica == p->R - 1 ? 0 : 1)))
      return 17;
    if (p->layers == 6 ? tm_step_shards(job, &st, first, count, m,
                                        g_compute_us, p->cost)
                       : tm_step_shards(job, &st, sh, 1 + one, m, g_compute_us,
                                        p->cost))
      return 11;
    if (first <= 1 && 1 < first + count)
      x = layer1_next(x, st.step);
    rng = rng_next(rng, sh);
    /* a trainer that does not check end_step's result goes on to
     * begin_step, which must then fail rather than wait */
    if (resihp_job_end_step(job) && replica != p->lost_r)
      return 12;
  }
  if (rc)
    return 13;
  if (p->layers == 5 && moves != (replica == p->hook_r && !one))
    return 19;
  char res[128];
  tm_result_text(m, res, sizeof(res));
  /* the shards' results, as a replica of one rank per shard says them */
  for (int i = 1; i < (p->layers == 6 ? count : 1 + one); i++) {
    size_t n = strlen(res);
    res[n++] = '/';
    tm_result_text(m + i * NB, res + n, sizeof(res) - n);
  }
  if (p->layers == 4) { /* the other state as a failure-free run's */
    uint64_t wx = 1, wg = 100;
    for (long s = 0; s < p->steps; s++)
      wx = layer1_next(wx, s), wg = rng_next(wg, sh);
    if (wg != rng || (first <= 1 && 1 < first + count && wx != x))
      snprintf(res, sizeof(res), "wrong-state");
  }
  resihp_job_finish(job, res);
  resihp_job_destroy(job);
  return 0;
}

static int rank_entry(void *ud, int r) {
  return rank_main(ud, r);
}

static void spawn(const plan_t *p, int r, pid_t *pids) {
  tm_spawn(p->K, r, pids, rank_entry, (void *)p);
}

typedef struct {
  pid_t pids[MAXR][MAXK];
  int failed[MAXR];
  int K;
} kids_t;

static void on_failed(void *ud, int r, const char *node, long j, long s,
                      const char *why) {
  (void)node, (void)j, (void)s, (void)why;
  kids_t *h = ud;
  h->failed[r]++;
  for (int k = 0; k < h->K; k++)
    if (h->pids[r][k] > 0)
      kill(h->pids[r][k], SIGKILL); /* never alive twice; no replacement */
}

/* What a run left: the summary, counts, and the ledger checked. */
typedef struct {
  char summary[8192];
  long steps, rx, tx, timed;
  double seconds;
  int ledger_ok;
  /* steps in which each replica computed something, and the first step
   * in which it computed nothing after having done so */
  long owned[MAXR];
  long lost_at[MAXR];
  char ledger[32768]; /* the ledger file as written */
} outcome_t;

/* What the test does when the hooked rank reports (its pid). */
typedef void (*on_hook_fn)(resihp__coord_t *c, kids_t *h, const plan_t *p,
                           pid_t who);

static void run(const plan_t *p, on_hook_fn on_hook, outcome_t *out) {
  memset(out, 0, sizeof(*out));
  snprintf(g_secret, sizeof(g_secret), "/tmp/resihp-freerun-secret.%d",
           (int)getpid());
  FILE *sf = fopen(g_secret, "w");
  ck_assert_ptr_nonnull(sf);
  fputs(KEY, sf);
  fclose(sf);
  chmod(g_secret, 0600);
  ck_assert_int_eq(pipe(g_hook_out), 0);
  ck_assert_int_eq(pipe(g_hook_in), 0);
  fcntl(g_hook_out[0], F_SETFL, O_NONBLOCK);
  FILE *ledger = tmpfile();
  ck_assert_ptr_nonnull(ledger);
  kids_t h = {.K = p->K};
  resihp__coord_opts_t co = {.replicas = p->R,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)KEY,
                             .secret_len = strlen(KEY),
                             .silence_ms = 5000,
                             .on_failed = on_failed,
                             .ud = &h,
                             .ledger = ledger,
                             .swap_cost_s = -1,
                             .lockstep = p->lockstep,
                             .assign = p->cost ? RESIHP_ASSIGN_COST : 0};
  resihp__coord_t *c;
  ck_assert_int_eq(resihp__coord_create(&co, &c), 0);
  snprintf(g_coord, sizeof(g_coord), "127.0.0.1:%d", resihp__coord_port(c));
  for (int r = 0; r < p->R; r++)
    if (p->late[r])
      resihp__coord_mark_failed(c, r, "starts later");
    else
      spawn(p, r, h.pids[r]);
  int64_t t0 = resihp__now_ms(), deadline = t0 + 90000; /* safety net */
  while (resihp__coord_state(c) == RESIHP__COORD_RUNNING &&
         resihp__now_ms() < deadline) {
    resihp__coord_poll(c, 20);
    pid_t who;
    if (read(g_hook_out[0], &who, sizeof(who)) == sizeof(who))
      on_hook(c, &h, p, who);
    while (waitpid(-1, NULL, WNOHANG) > 0)
      ;
  }
  out->seconds = (double)(resihp__now_ms() - t0) / 1000.0;
  int state = resihp__coord_state(c);
  out->steps = resihp__coord_step(c);
  resihp__coord_lines(c, &out->rx, &out->tx, &out->timed);
  FILE *mem = fmemopen(out->summary, sizeof(out->summary), "w");
  resihp__coord_summary(c, mem, NULL);
  fclose(mem);
  for (int r = 0; r < p->R; r++)
    for (int k = 0; k < p->K; k++)
      if (h.pids[r][k] > 0)
        kill(h.pids[r][k], SIGKILL);
  while (waitpid(-1, NULL, 0) > 0)
    ;
  resihp__coord_destroy(c);
  out->ledger_ok =
      tm_check_ledger(ledger, p->R, out->steps, out->owned, out->lost_at);
  rewind(ledger);
  size_t got = fread(out->ledger, 1, sizeof(out->ledger) - 1, ledger);
  out->ledger[got] = '\0';
  fclose(ledger);
  for (int i = 0; i < 2; i++) {
    close(g_hook_out[i]);
    close(g_hook_in[i]);
  }
  unlink(g_secret);
  ck_assert_msg(state == RESIHP__COORD_DONE, "%s", out->summary);
  ck_assert_msg(out->ledger_ok, "ledger not exact; %s", out->summary);
}

/* R replicas of K ranks for `steps` steps; replica hook_r waits at the
 * start of hook_step for the test (-1: no hook). */
static plan_t plan(int R, int K, long steps, int hook_r, long hook_step) {
  plan_t p = {.R = R,
              .K = K,
              .steps = steps,
              .hook_r = hook_r,
              .wl_fail_r = -1,
              .lost_r = -1,
              .die_in_move = -1};
  p.hook_step = hook_step;
  p.hook_wait = hook_r >= 0;
  return p;
}

static void no_hook(resihp__coord_t *c, kids_t *h, const plan_t *p, pid_t who) {
  (void)c, (void)h, (void)p, (void)who;
}

/* The replicas' results agree with a failure-free run of n steps. */
static void expect_result(const outcome_t *o, int K, long n, int replicas) {
  tm_expect_result(o->summary, K, n, replicas);
}

/* Without failure, 20 or 40 steps cost the coordinator the same protocol
 * lines, but for the time-based reports (PROG, PERF: a few a second per
 * rank), and fewer than one per step; step by step (lockstep) it takes
 * several lines per replica and step. */
START_TEST(lines_do_not_grow_with_steps) {
  plan_t p = plan(3, 1 + _i, 20, -1, 0);
  outcome_t a, b, l;
  p.steps = 20;
  run(&p, no_hook, &a);
  expect_result(&a, p.K, 20, 3);
  p.steps = 40;
  run(&p, no_hook, &b);
  expect_result(&b, p.K, 40, 3);
  p.lockstep = 1;
  p.steps = 20;
  run(&p, no_hook, &l);
  expect_result(&l, p.K, 20, 3);
  fprintf(stderr,
          "freerun K=%d: 20 steps %ld+%ld lines (%ld timed) in %.2f s, 40 "
          "steps %ld+%ld (%ld timed) in %.2f s; lockstep 20 steps %ld+%ld "
          "in %.2f s\n",
          p.K, a.rx, a.tx, a.timed, a.seconds, b.rx, b.tx, b.timed, b.seconds,
          l.rx, l.tx, l.seconds);
  ck_assert_int_eq(a.rx - a.timed, b.rx - b.timed);
  ck_assert_int_eq(a.tx, b.tx);
  ck_assert_int_lt(b.rx - b.timed + b.tx, 40);
  /* each rank reports at most once a report period (100 ms), plus its
   * first and last step; PROG once a second */
  long ranks = p.R * p.K;
  ck_assert_int_le(b.timed,
                   (ranks * (1000 / RESIHP__JOB_PERF_MS) + 1) *
                       ((long)b.seconds + 3));
  /* lockstep: BEGIN from every replica, GO and START to each, per step */
  ck_assert_int_ge(l.rx - l.timed, 20 * p.R);
  ck_assert_int_ge(l.tx, 2 * 20 * p.R);
}
END_TEST

/* Every rank declares its layers (resihp_job_set_layers): the same
 * result as without; and a replica whose ranks declare different
 * partitions is refused on both ranks, the others finish without it. */
START_TEST(layers_declared) {
  plan_t p = plan(3, 1 + _i, 20, -1, 0);
  p.layers = 1;
  outcome_t o;
  run(&p, no_hook, &o);
  expect_result(&o, p.K, 20, 3);
}
END_TEST

static int g_refused;
static void count_refused(resihp__coord_t *c, kids_t *h, const plan_t *p,
                          pid_t who) {
  (void)c, (void)h, (void)p;
  g_refused += who == -1;
  if (who == -1 && g_refused == 2) /* the leader may leave now */
    ck_assert_int_eq(write(g_hook_in[1], "x", 1), 1);
}

START_TEST(layers_disagree) {
  plan_t p = plan(3, 2, 20, -1, 0);
  p.layers = 2;
  g_refused = 0;
  outcome_t o;
  run(&p, count_refused, &o);
  expect_result(&o, p.K, 20, 2);
  ck_assert_int_eq(g_refused, 2);
  ck_assert_int_eq(o.owned[0], 0);
}
END_TEST

/* Move the hooked replica's layers (1,3) at the next boundary. */
static int g_commit_failed;
static void move_it(resihp__coord_t *c, kids_t *h, const plan_t *p,
                    pid_t who) {
  (void)h, (void)p;
  if (who == -2) { /* a commit failed (layers_move_rank_dies) */
    g_commit_failed++;
    return;
  }
  int cnt[2] = {1, 3};
  resihp__coord_repart_force(c, p->hook_r, cnt);
  ck_assert_int_eq(write(g_hook_in[1], "x", 1), 1);
}

/* Repartition at a step boundary (issue 32): the coordinator gives replica
 * 1 the partition 1,3 of its 4 layers (2,2 before, as the others); its
 * ranks are told once, commit, and the groups of the next epochs are
 * built from it (rank 1 of replica 1 then holds two runs of layers): every
 * replica's result is that of a failure-free run, the ledger exact. */
START_TEST(layers_moved) {
  plan_t p = plan(3, 2, 20, 1, 6);
  p.layers = 5;
  p.lockstep = 1;
  outcome_t o;
  run(&p, move_it, &o);
  expect_result(&o, p.K, 20, 3);
  ck_assert_msg(strstr(o.summary, "repartition") != NULL, "%s", o.summary);
}
END_TEST

/* The hooked replica's layers move (1,3) at the next boundary, as in
 * layers_moved; once it has trained on past the move, its rank 1 is
 * SIGKILLed from outside with no spare left, and the launcher shrinks it
 * in place (as lose_rank_no_spare): the rank its leader said it lost,
 * then a process of one rank holding all 4 layers. */
/* Replica r's rank 1 was SIGKILLed with no spare left: once the replica
 * failed, the launcher's part of a shrink in place: the rank
 * its leader said it lost (its link to rank 1 closed without a BYE: the
 * launcher learns it so, not from a node), the coordinator's shrink, and
 * the new process of K - 1 ranks on the survivors. */
static void shrink_after_loss(resihp__coord_t *c, kids_t *h, const plan_t *p,
                              int r) {
  int64_t deadline = resihp__now_ms() + 30000; /* safety net */
  while (!h->failed[r] && resihp__now_ms() < deadline)
    resihp__coord_poll(c, 20);
  ck_assert_int_eq(h->failed[r], 1);
  unsigned long long lost = resihp__coord_lost_ranks(c, r);
  ck_assert_msg(lost == 1ULL << 1, "lost ranks %#llx, not rank 1", lost);
  ck_assert_int_eq(resihp__coord_shrink_able(c, r), 0);
  ck_assert_int_eq(resihp__coord_shrink_in_place(c, r, lost), 0);
  g_shrunk_k = p->K - 1; /* (inherited by the relaunch's ranks) */
  tm_spawn(p->K - 1, r, h->pids[r], rank_entry, (void *)p);
  h->pids[r][p->K - 1] = -1;
}

static void move_then_lose(resihp__coord_t *c, kids_t *h, const plan_t *p,
                           pid_t who) {
  (void)who;
  int r = p->hook_r, cnt[2] = {1, 3};
  resihp__coord_repart_force(c, r, cnt);
  ck_assert_int_eq(write(g_hook_in[1], "x", 1), 1);
  int64_t deadline = resihp__now_ms() + 30000; /* safety net */
  while (resihp__coord_step(c) < p->hook_step + 4 &&
         resihp__now_ms() < deadline)
    resihp__coord_poll(c, 20);
  kill(h->pids[r][1], SIGKILL);
  shrink_after_loss(c, h, p, r);
}

/* Issue 32 item 3: a replica that moved its layers can still shrink.
 * Every rank declares its state by layer; replica 1's layers move 2,2 ->
 * 1,3 at step 7 and its ranks commit the move by layer
 * (resihp_job_commit_layer_state); at step 10 or so its rank 1 is
 * SIGKILLed with no spare left: the coordinator can still shrink it
 * (its BEGINs after the move still say lst=1; with the opaque
 * resihp_job_commit_layers they did not, and the shrink was refused:
 * RESIHP_ESTATE) onto one rank holding all 4 layers, which catches them up
 * by layer from the others and trains on: every replica ends with the
 * failure-free result, the ledger exact; the summary counts the move and
 * the shrink. */
START_TEST(layers_moved_then_shrunk) {
  plan_t p = plan(3, 2, 60, 1, 6);
  p.layers = 5;
  p.lstate = 1;
  p.lockstep = 1;
  outcome_t o;
  run(&p, move_then_lose, &o);
  g_shrunk_k = 0;
  expect_result(&o, p.K, 60, 3);
  ck_assert_msg(strstr(o.summary, "repartition") &&
                    strstr(o.summary, "1 shrink(s)") &&
                    strstr(o.summary, "replica 1 ranks:        1 of 2"),
                "%s", o.summary);
  ck_assert_msg(o.owned[1] > 20, "replica 1 computed in %ld steps; %s",
                o.owned[1], o.summary);
}
END_TEST

/* A rank of the moved replica dies in the middle of the move (_i: which
 * one): the other's commit fails (all or nothing: it never computes with
 * half of the layers moved), the replica fails as a whole at that step
 * and the two others finish with the result of a failure-free run,
 * taking over its microbatches; the ledger is exact. */
START_TEST(layers_move_rank_dies) {
  plan_t p = plan(3, 2, 20, 1, 6);
  p.layers = 5;
  p.lockstep = 1;
  p.die_in_move = _i;
  g_commit_failed = 0;
  outcome_t o;
  run(&p, move_it, &o);
  /* the leader's commit fails (rank 1 died); when the leader died, the
   * coordinator fails the replica and its other rank is killed with it
   * (on_failed, as resihp-run cancels the step), maybe before its commit */
  if (_i)
    ck_assert_int_eq(g_commit_failed, 1);
  else
    ck_assert_int_le(g_commit_failed, 1);
  expect_result(&o, p.K, 20, 2);
  ck_assert_msg(o.lost_at[1] == 7, "lost at %ld; %s", o.lost_at[1], o.summary);
}
END_TEST

/* Kill every rank of the hooked replica, waiting at its step. */
static void kill_it(resihp__coord_t *c, kids_t *h, const plan_t *p, pid_t who) {
  (void)c, (void)who;
  for (int k = 0; k < p->K; k++)
    kill(h->pids[p->hook_r][k], SIGKILL);
}

/* A replica whose ranks hold other layers than the others' (partition
 * 2,1 against 1,2 of 3 layers of NB, 0 and NB elements): the runs are
 * layers 0, 1 and 2, and a rank holding two of them is in two groups
 * (the last replica's rank 0, the others' rank 1: each rank checks its
 * count at every step, plan_t layers 3). Before, replicas of different
 * partitions stopped the run at step 0; now they train to the result of
 * a failure-free run, also when replica 0 is SIGKILLed in step 7 (_i 1):
 * the survivors recover in both of their groups. */
START_TEST(layers_other_partition_trains) {
  plan_t p = plan(3, 2, 20, _i ? 0 : -1, 7);
  p.layers = 3;
  outcome_t o;
  run(&p, _i ? kill_it : no_hook, &o);
  expect_result(&o, p.K, 20, _i ? 2 : 3);
  if (_i)
    ck_assert_msg(o.lost_at[0] == 7, "lost at %ld", o.lost_at[0]);
}
END_TEST

/* While replica 0 waits at the start of step 7, replica g_victim is
 * SIGKILLed, and once the coordinator has failed it, started again; then
 * replica 0 goes on. */
static int g_victim;
static void kill_and_replace(resihp__coord_t *c, kids_t *h, const plan_t *p,
                             pid_t who) {
  (void)who;
  int r = g_victim;
  for (int k = 0; k < p->K; k++)
    kill(h->pids[r][k], SIGKILL);
  int64_t deadline = resihp__now_ms() + 30000; /* safety net */
  while (!h->failed[r] && resihp__now_ms() < deadline)
    resihp__coord_poll(c, 20);
  ck_assert_int_eq(h->failed[r], 1);
  spawn(p, r, h->pids[r]);
  while (!resihp__coord_connected(c, r) && resihp__now_ms() < deadline)
    resihp__coord_poll(c, 20);
  ck_assert_int_eq(write(g_hook_in[1], "g", 1), 1);
}

/* Catch-up by layer (issue 32): the last replica holds the layers as 2,1,
 * the others as 1,2 (plan_t layers 4: every rank declares its state by
 * layer, and a counter of layer 1 and an RNG word of the rank besides the
 * shards' parameters). It is SIGKILLed from outside in step 7 and its
 * replacement, whose partition no member holds, receives layers 0-1 on
 * rank 0 from both ranks of one member (layer 0 from its rank 0, layer 1
 * from its rank 1) and layer 2 on rank 1, each rank its RNG word from the
 * same rank of its source: every replica ends with the failure-free
 * result, the replacement having computed most steps after. Before,
 * rank 0 of the replacement was offered the 40 bytes of a 1,2 member's
 * rank 0 for its 48 and refused them, again and again, until the
 * run's safety net. With _i 1 replica 1 (1,2, as replica 0) is replaced
 * instead: it receives its state by layer whole from replica 0, as an
 * opaque state would be. */
START_TEST(layers_caught_up_by_layer) {
  plan_t p = plan(3, 2, 200, 0, 7);
  p.layers = 4;
  g_victim = _i ? 1 : 2;
  outcome_t o;
  run(&p, kill_and_replace, &o);
  expect_result(&o, p.K, 200, 3);
  ck_assert_msg(o.owned[g_victim] > 100, "replica %d computed in %ld steps; %s",
                g_victim, o.owned[g_victim], o.summary);
}
END_TEST

/* A rank lost with no spare left (issue 32 item 3, coord_shrink.c 11):
 * the last replica loses its rank 1, SIGKILLed from outside in step 7;
 * its leader tells the coordinator which rank it lost (FAULT kind=lost
 * rank=1: what the launcher shrinks by, resihp__coord_lost_ranks);
 * the replica fails as before (its leader leaves, its other ranks are
 * killed as resihp-run cancels the step), then the launcher, with no
 * spare, shrinks it in place and starts it again as K - 1 ranks on its
 * survivors' nodes, which take the dead rank's layers, catch all theirs
 * up by layer from the members and train on. _i 0: 2 ranks to one (plan_t
 * layers 4: the replica held layers 0-1 | 2, the others 0 | 1-2; its one
 * rank holds all three); _i 1: 3 ranks to 2 (layers 6: 0 | 1 | 2, then
 * 0-1 | 2). Every replica ends with the failure-free result (a rank of
 * several shards says each), the ledger exact, the shrunk one computing
 * in most steps after; the summary counts the shrink and says the
 * replica's K - 1 ranks of K. */
static void lose_rank_no_spare(resihp__coord_t *c, kids_t *h, const plan_t *p,
                               pid_t who) {
  (void)who;
  int r = g_victim;
  kill(h->pids[r][1], SIGKILL);
  /* the hooked replica goes on: the victim's leader learns it in the
   * step's exchange */
  ck_assert_int_eq(write(g_hook_in[1], "g", 1), 1);
  shrink_after_loss(c, h, p, r);
}

/* lose_rank_no_spare, then a second failure during the regroup: once the
 * shrunk process of K - 1 ranks has reached the coordinator (it catches
 * its layers up, before it trains), its rank 1 is SIGKILLed from outside
 * too. Its leader says that rank lost (the new numbering), the replica
 * fails as a whole, and the launcher, with no spare and a replica that
 * already shrank, gives it up (resihp__coord_mark_failed): never half
 * regrouped, nothing waited for. */
static void lose_two_ranks(resihp__coord_t *c, kids_t *h, const plan_t *p,
                           pid_t who) {
  lose_rank_no_spare(c, h, p, who);
  int r = g_victim;
  int64_t deadline = resihp__now_ms() + 30000; /* safety net */
  while (!resihp__coord_connected(c, r) && resihp__now_ms() < deadline)
    resihp__coord_poll(c, 20);
  ck_assert(resihp__coord_connected(c, r));
  kill(h->pids[r][1], SIGKILL);
  while (h->failed[r] < 2 && resihp__now_ms() < deadline + 30000)
    resihp__coord_poll(c, 20);
  ck_assert_int_eq(h->failed[r], 2);
  unsigned long long lost = resihp__coord_lost_ranks(c, r);
  ck_assert_msg(lost == 1ULL << 1, "lost ranks %#llx, not rank 1", lost);
  resihp__coord_mark_failed(c, r, "no spare");
}

/* A second failure during a regroup (issue 32's tests): a replica of 3
 * ranks shrunk to 2 loses one of those in its catch-up: it fails cleanly
 * and is given up; the other two replicas finish with the failure-free
 * result, the ledger exact, the summary's one shrink. */
START_TEST(layers_shrunk_second_failure) {
  plan_t p = plan(3, 3, 60, 0, 7);
  p.layers = 6;
  p.movable = 1;
  g_victim = 2;
  outcome_t o;
  run(&p, lose_two_ranks, &o);
  expect_result(&o, p.K, 60, 2);
  ck_assert_msg(o.owned[g_victim] <= 8, "replica %d computed in %ld steps; %s",
                g_victim, o.owned[g_victim], o.summary);
  ck_assert_msg(strstr(o.summary, "1 shrink(s)"), "%s", o.summary);
}
END_TEST

START_TEST(layers_shrunk_in_place) {
  plan_t p = plan(3, 2 + _i, 200, 0, 7);
  p.layers = _i ? 6 : 4;
  p.movable = 1;
  g_victim = 2;
  outcome_t o;
  run(&p, lose_rank_no_spare, &o);
  expect_result(&o, p.K, 200, 3);
  ck_assert_msg(o.owned[g_victim] > 100, "replica %d computed in %ld steps; %s",
                g_victim, o.owned[g_victim], o.summary);
  char want[64];
  snprintf(want, sizeof(want), "replica 2 ranks:        %d of %d", p.K - 1,
           p.K);
  ck_assert_msg(strstr(o.summary, "1 shrink(s)") && strstr(o.summary, want),
                "%s", o.summary);
}
END_TEST

/* The coordinator shrinks the hooked replica to its rank 0 as if its
 * rank 1 had died with no spare left (coord_shrink.c): its GO of the
 * next boundary lists a partition of one rank for it among the others'
 * two-rank ones, and says shrunk=. Its ranks, alive and of two ranks
 * still, cannot take it (the library's part of a shrink is not built
 * yet): the replica fails, as it did before there was a shrink, never
 * half-regrouped; the other two replicas, whose GO lists a partition of
 * fewer ranks than theirs, build their groups with it and go on, and
 * finish with the failure-free result, the ledger exact. Before GO's
 * partitions could have fewer ranks, every replica refused that GO and
 * the job died. */
static void shrink_it(resihp__coord_t *c, kids_t *h, const plan_t *p,
                      pid_t who) {
  (void)h, (void)who;
  ck_assert_int_eq(resihp__coord_shrink(c, p->hook_r, 1ULL << 1), 0);
  ck_assert_int_eq(write(g_hook_in[1], "s", 1), 1);
}

START_TEST(layers_shrunk_replica_refuses) {
  plan_t p = plan(3, 2, 20, 0, 6);
  p.layers = 4;
  p.movable = 1;
  p.lockstep = 1;
  outcome_t o;
  run(&p, shrink_it, &o);
  expect_result(&o, p.K, 20, 2);
  ck_assert_msg(strstr(o.summary, "1 shrink(s)"), "%s", o.summary);
  ck_assert_int_eq(o.owned[1], 20);
  ck_assert_int_eq(o.owned[2], 20);
  ck_assert_msg(o.owned[0] <= 8, "replica 0 owned %ld steps", o.owned[0]);
}
END_TEST

/* Replica 1 is SIGKILLed in step 7 of a free run, before it computed
 * anything: the survivors take its microbatches within the step, the
 * ledger stays exact (replica 1 owns nothing from step 7 on), and the
 * result is that of a failure-free run. */
START_TEST(kill_in_free_run) {
  plan_t p = plan(3, 1 + _i, 30, 1, 7);
  outcome_t o;
  run(&p, kill_it, &o);
  expect_result(&o, p.K, 30, 2);
  ck_assert_msg(strstr(o.summary, "reassigned"), "%s", o.summary);
  ck_assert_msg(o.lost_at[1] == 7 && o.owned[1] == 7, "lost %ld owned %ld",
                o.lost_at[1], o.owned[1]);
  ck_assert_int_eq(o.owned[0], 30);
  ck_assert_int_eq(o.owned[2], 30);
}
END_TEST

/* Replica 1's rank 1 dies at a free-run boundary after its shard group
 * voted to go on and before its replica's sum; its rank 0, which goes on
 * without checking end_step, must not hold the others up: they were left
 * waiting in the next exchange for it (alive, heartbeating) while it
 * waited in begin_step for the coordinator, and the job stood still. It
 * leaves its group at once now; the other two replicas finish. */
START_TEST(rank_lost_at_boundary) {
  plan_t p = plan(3, 2, 30, -1, 0);
  p.lost_r = 1;
  p.lost_step = 6;
  outcome_t o;
  run(&p, no_hook, &o);
  expect_result(&o, p.K, 30, 2);
  ck_assert_int_eq(o.owned[0], 30);
  ck_assert_int_eq(o.owned[2], 30);
  ck_assert_msg(o.owned[1] <= 8, "replica 1 owned %ld steps", o.owned[1]);
}
END_TEST

/* Ask the stop, then let the hooked rank go on: HOLD is in its leader's
 * socket before it ends the step. */
static void stop_then_release(resihp__coord_t *c, kids_t *h, const plan_t *p,
                              pid_t who) {
  (void)h, (void)p, (void)who;
  resihp__coord_stop(c);
  ck_assert_int_eq(write(g_hook_in[1], "g", 1), 1);
}

/* A stop asked in step 5 of a free run: the run ends at the end of that
 * step, DONE, the result that of 6 failure-free steps. */
START_TEST(stop_in_free_run) {
  plan_t p = plan(3, 1, 200, 0, 5);
  outcome_t o;
  run(&p, stop_then_release, &o);
  ck_assert_int_eq(o.steps, 6);
  expect_result(&o, p.K, 6, 3);
}
END_TEST

/* Start the late replica 2; once it has said hello, let the hooked rank
 * go on. */
static void start_joiner(resihp__coord_t *c, kids_t *h, const plan_t *p,
                         pid_t who) {
  (void)who;
  spawn(p, 2, h->pids[2]);
  int64_t deadline = resihp__now_ms() + 30000; /* safety net */
  while (!resihp__coord_connected(c, 2) && resihp__now_ms() < deadline)
    resihp__coord_poll(c, 20);
  ck_assert_int_eq(write(g_hook_in[1], "g", 1), 1);
}

/* Replica 2 starts during a free run of 0 and 1: HOLD brings them to a
 * boundary where it is admitted, catches up and computes its share; all
 * three end with the failure-free result. */
START_TEST(joiner_in_free_run) {
  plan_t p = plan(3, 1, 200, 0, 5);
  p.late[2] = 1;
  outcome_t o;
  run(&p, start_joiner, &o);
  expect_result(&o, p.K, 200, 3);
  ck_assert_msg(o.owned[2] > 100, "replica 2 computed in %ld steps; %s",
                o.owned[2], o.summary);
}
END_TEST

/* Steps of a ledger text whose owners are those that assignment by cost
 * gives tm_workload over R equal replicas. */
static long costed_lines(const char *ledger, int R, long *last_other) {
  long n = 0;
  *last_other = -1;
  for (const char *q = ledger; *q;) {
    char *e;
    long s = strtol(q, &e, 10);
    int want[MBS], ok = 1;
    tm_expect_cost_owners(s, R, want);
    for (int mb = 0; mb < MBS; mb++)
      ok &= strtol(e, &e, 10) == want[mb];
    if (ok)
      n++;
    else
      *last_other = s;
    q = strchr(e, '\n');
    if (!q)
      break;
    q++;
  }
  return n;
}

/* Two ledgers hold the same steps and agree line by line after step
 * `from` (up to it one may still be warming up: by counts). */
static void same_ledgers(const char *x, const char *y, long from) {
  const char *p = x, *q = y;
  while (*p && *q) {
    const char *pe = strchr(p, '\n'), *qe = strchr(q, '\n');
    ck_assert(pe && qe);
    long s = strtol(p, NULL, 10);
    int same = pe - p == qe - q && !memcmp(p, q, (size_t)(pe - p));
    if (s > from)
      ck_assert_msg(same, "step %ld: '%.*s' and '%.*s'", s, (int)(pe - p), p,
                    (int)(qe - q), q);
    p = pe + 1;
    q = qe + 1;
  }
  ck_assert(!*p && !*q);
}

/* Assignment by predicted cost (the default of resihp-run) with the ranks'
 * data loader: once the predictor is warm (lockstep until then: the same
 * steps in every run) the members run free, each rank assigning each step
 * itself from the plan START carried. 40 or 80 steps cost the coordinator
 * the same protocol lines but for the time-based reports; the result is
 * that of a failure-free run; the ledger is the one the same job writes
 * step by step (lockstep), and from warm-up on each step's owners are the
 * assignment by cost of its workloads. */
START_TEST(cost_lines_do_not_grow_with_steps) {
  plan_t p = plan(3, 1 + _i, 40, -1, 0);
  p.cost = 1;
  outcome_t *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b)),
            *l = malloc(sizeof(*l));
  ck_assert(a && b && l);
  run(&p, no_hook, a);
  expect_result(a, p.K, 40, 3);
  p.steps = 80;
  run(&p, no_hook, b);
  expect_result(b, p.K, 80, 3);
  p.lockstep = 1;
  p.steps = 40;
  run(&p, no_hook, l);
  expect_result(l, p.K, 40, 3);
  long other_a, other_l;
  long ca = costed_lines(a->ledger, 3, &other_a),
       cl = costed_lines(l->ledger, 3, &other_l);
  fprintf(stderr,
          "freerun cost K=%d: 40 steps %ld+%ld lines (%ld timed) in %.2f s, "
          "80 steps %ld+%ld (%ld timed) in %.2f s; lockstep 40 steps %ld+%ld "
          "in %.2f s; steps by cost %ld free, %ld lockstep (the last other: "
          "%ld, %ld)\n",
          p.K, a->rx, a->tx, a->timed, a->seconds, b->rx, b->tx, b->timed,
          b->seconds, l->rx, l->tx, l->seconds, ca, cl, other_a, other_l);
  long other_b;
  costed_lines(b->ledger, 3, &other_b);
  /* costed from warm-up (32 samples a rank: 16 steps) to the end; with 2
   * ranks a replica's second rank's samples come through its leader and
   * may warm its shard's model a step later in one run than in another */
  ck_assert_int_lt(other_a, 24);
  ck_assert_int_eq(ca, 40 - 1 - other_a);
  ck_assert_int_eq(cl, 40 - 1 - other_l);
  same_ledgers(a->ledger, l->ledger, other_a > other_l ? other_a : other_l);
  if (other_a == other_b) {
    ck_assert_int_eq(a->rx - a->timed, b->rx - b->timed);
    ck_assert_int_eq(a->tx, b->tx);
  } else {
    /* a warm-up step more or less: its lockstep lines, no more */
    long d = labs(b->rx - b->timed + b->tx - (a->rx - a->timed + a->tx));
    ck_assert_int_le(d, 8 * 3 * labs(other_b - other_a));
  }
  /* the warm-up steps are step by step: the free steps cost nothing */
  ck_assert_int_lt(b->rx - b->timed + b->tx, l->rx - l->timed + l->tx);
  free(a);
  free(b);
  free(l);
}
END_TEST

/* By cost: replica 1 is SIGKILLed in step 26 of a free run (warm from
 * about step 17), before it computed anything: the survivors take its
 * microbatches within the step (their RECOVER brings the owners of the
 * run's steps), the ledger stays exact and the result is that of a
 * failure-free run. */
START_TEST(cost_kill_in_free_run) {
  plan_t p = plan(3, 1 + _i, 40, 1, 26);
  p.cost = 1;
  outcome_t *o = malloc(sizeof(*o));
  ck_assert(o);
  run(&p, kill_it, o);
  expect_result(o, p.K, 40, 2);
  ck_assert_msg(strstr(o->summary, "reassigned"), "%s", o->summary);
  ck_assert_msg(o->lost_at[1] == 26 && o->owned[1] == 26, "lost %ld owned %ld",
                o->lost_at[1], o->owned[1]);
  long other;
  long n = costed_lines(o->ledger, 3, &other);
  ck_assert_msg(n >= 26 - 20, "%s", o->ledger);
  free(o);
}
END_TEST

/* By cost: the data loader of replica 2 does not know step 30's
 * workloads. Its ranks vote at the end of step 29 to end the run, so that
 * every replica says BEGIN 30 (nobody goes on with a list of its own);
 * step 30 is assigned by the coordinator (replica 0's loader gave its
 * workloads), a new free run follows. The ledger is still the one the
 * same job writes step by step, the result that of a failure-free run,
 * and the boundary costs lines that a run without it does not. */
START_TEST(cost_workload_missing_ends_run) {
  plan_t p = plan(3, 1, 40, -1, 0);
  p.cost = 1;
  outcome_t *a = malloc(sizeof(*a)), *f = malloc(sizeof(*f)),
            *l = malloc(sizeof(*l));
  ck_assert(a && f && l);
  run(&p, no_hook, a);
  p.wl_fail_r = 2;
  p.wl_fail_step = 30;
  run(&p, no_hook, f);
  expect_result(f, p.K, 40, 3);
  p.lockstep = 1;
  run(&p, no_hook, l);
  long other_f, other_l;
  costed_lines(f->ledger, 3, &other_f);
  costed_lines(l->ledger, 3, &other_l);
  ck_assert_int_lt(other_f, 24);
  same_ledgers(f->ledger, l->ledger, other_f > other_l ? other_f : other_l);
  ck_assert_int_gt(f->rx - f->timed, a->rx - a->timed);
  ck_assert_int_gt(f->tx, a->tx);
  free(a);
  free(f);
  free(l);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("freerun");
  TCase *tc = tcase_create("freerun");
  tcase_set_timeout(tc, 240);
  tcase_add_loop_test(tc, lines_do_not_grow_with_steps, 0, 2);
  tcase_add_loop_test(tc, kill_in_free_run, 0, 2);
  tcase_add_loop_test(tc, layers_declared, 0, 2);
  tcase_add_test(tc, layers_disagree);
  tcase_add_loop_test(tc, layers_other_partition_trains, 0, 2);
  tcase_add_loop_test(tc, layers_caught_up_by_layer, 0, 2);
  tcase_add_test(tc, layers_moved);
  tcase_add_test(tc, layers_moved_then_shrunk);
  tcase_add_loop_test(tc, layers_move_rank_dies, 0, 2);
  tcase_add_test(tc, layers_shrunk_replica_refuses);
  tcase_add_loop_test(tc, layers_shrunk_in_place, 0, 2);
  tcase_add_test(tc, layers_shrunk_second_failure);
  tcase_add_test(tc, rank_lost_at_boundary);
  tcase_add_test(tc, stop_in_free_run);
  tcase_add_test(tc, joiner_in_free_run);
  tcase_add_loop_test(tc, cost_lines_do_not_grow_with_steps, 0, 2);
  tcase_add_loop_test(tc, cost_kill_in_free_run, 0, 2);
  tcase_add_test(tc, cost_workload_missing_ends_run);
  suite_add_tcase(s, tc);
  return s;
}

/* --bench [R [STEPS [US [cost]]]]: the same job step by step and
 * free-running, side by side (compute US microseconds a step, default 0:
 * what the coordinator costs a step; cost: assignment by predicted cost
 * with the toy data loader; RESIHP_BENCH_K ranks per replica and
 * RESIHP_BENCH_LAYERS as plan_t layers: 1 identical partitions, 3 the
 * last replica's differs). A measurement, not a test; it runs as one so
 * that the harness's checks work. */
static int g_bench_r = 3;
static long g_bench_steps = 400;
static int g_bench_cost;

START_TEST(bench) {
  printf("%-10s %8s %6s %10s %10s %12s %10s\n", "mode", "replicas", "steps",
         "lines-rx", "lines-tx", "lines/step", "ms/step");
  for (int lock = 1; lock >= 0; lock--) {
    const char *ek = getenv("RESIHP_BENCH_K");
    const char *el = getenv("RESIHP_BENCH_LAYERS");
    int bk = ek ? atoi(ek) : 1;
    plan_t p = plan(g_bench_r, bk >= 1 && bk <= MAXK ? bk : 1, g_bench_steps,
                    -1, 0);
    p.layers = el ? atoi(el) : 0;
    p.lockstep = lock;
    p.cost = g_bench_cost;
    outcome_t o;
    run(&p, no_hook, &o);
    printf("%-10s %8d %6ld %10ld %10ld %12.2f %10.3f\n",
           lock ? (p.cost ? "lock-cost" : "lockstep")
                : (p.cost ? "free-cost" : "free-run"),
           p.R, p.steps, o.rx, o.tx, (double)(o.rx + o.tx) / (double)p.steps,
           1000.0 * o.seconds / (double)p.steps);
    fflush(stdout);
  }
}
END_TEST

static int run_bench(int argc, char **argv) {
  g_bench_r = argc > 2 ? atoi(argv[2]) : 3;
  g_bench_steps = argc > 3 ? atol(argv[3]) : 400;
  g_compute_us = argc > 4 ? atoi(argv[4]) : 0;
  g_bench_cost = argc > 5 && !strcmp(argv[5], "cost");
  if (g_bench_r < 1 || g_bench_r > MAXR || g_bench_steps < 2 ||
      g_compute_us < 0) {
    fprintf(stderr, "usage: test_freerun --bench [R<=%d [STEPS [US [cost]]]]\n",
            MAXR);
    return 2;
  }
  Suite *s = suite_create("freerun-bench");
  TCase *tc = tcase_create("bench");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, bench);
  suite_add_tcase(s, tc);
  return run_suite(s);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--bench"))
    return run_bench(argc, argv);
  return run_suite(suite());
}
