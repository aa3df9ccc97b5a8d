/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of step-level recovery: fault injection specs, the
 * coordinator's authenticated wire, and whole jobs of forked ranks (real
 * processes that really die) driven by an in-process coordinator: the sum
 * over every microbatch of every step must come out exactly the same with
 * and without failures, and replacements must catch up. */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/wire.h"
#include "../../libresihp/probe/results.h"
#include "../../libresihp/recovery/inject.h"
#include "../../libresihp/transport/mesh.h"
#include "suite_main.h"

#include <resihp.h>

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

START_TEST(inject_specs) {
  resihp__inject_t v[8];
  int n = -1;
  char err[512], buf[256];
  ck_assert_int_eq(resihp__inject_parse("kill-rank:0@5,kill-node:1@8,"
                                        "hang-rank:2@12,kill-rank:1@catchup",
                                        v, 8, &n, err, sizeof(err)),
                   0);
  ck_assert_int_eq(n, 4);
  ck_assert_int_eq(v[1].kind, RESIHP__INJ_KILL_NODE);
  ck_assert_int_eq(v[2].replica, 2);
  ck_assert_int_eq(v[2].step, 12);
  ck_assert_int_eq(v[3].step, RESIHP__INJECT_CATCHUP);
  ck_assert_str_eq(resihp__inject_format(v, n, buf, sizeof(buf)),
                   "kill-rank:0@5,kill-node:1@8,hang-rank:2@12,"
                   "kill-rank:1@catchup");
  ck_assert_int_eq(resihp__inject_parse("hang-rank:1.0@setup", v, 8, &n, err,
                                        sizeof(err)),
                   0);
  ck_assert_int_eq(v[0].step, RESIHP__INJECT_SETUP);
  ck_assert_str_eq(resihp__inject_format(v, n, buf, sizeof(buf)),
                   "hang-rank:1.0@setup");
  ck_assert_int_eq(resihp__inject_parse("", v, 8, &n, err, sizeof(err)), 0);
  ck_assert_int_eq(n, 0);
  const char *bad[] = {"kill-rank",        "kill-rank:0",    "explode:0@1",
                       "kill-rank:x@1",    "kill-rank:0@-3", "kill-rank:0@1,",
                       "kill-rank:0@soon", ",kill-rank:0@1",
                       "slow-rank:0@setupx2"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    ck_assert_int_eq(resihp__inject_parse(bad[i], v, 8, &n, err, sizeof(err)),
                     RESIHP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "KIND:REPLICA@STEP"));
  }
}
END_TEST

/* slow-rank: "x" or the sign U+00D7, F exact in thousandths, :D optional;
 * printed back in the ASCII form; each refusal names the item and why. */
START_TEST(inject_slow_specs) {
  resihp__inject_t v[8];
  int n = -1;
  char err[512], buf[256];
  ck_assert_int_eq(
      resihp__inject_parse("slow-rank:1@5x2,slow-rank:0.1@10\xc3\x97"
                           "1.5:20,slow-rank:2@0x100:1,slow-rank:3@7x1.001,"
                           "kill-rank:1@9",
                           v, 8, &n, err, sizeof(err)),
      0);
  ck_assert_int_eq(n, 5);
  ck_assert_int_eq(v[0].kind, RESIHP__INJ_SLOW_RANK);
  ck_assert_int_eq(v[0].replica, 1);
  ck_assert_int_eq(v[0].rank, -1);
  ck_assert_int_eq(v[0].step, 5);
  ck_assert_int_eq(v[0].factor_milli, 2000);
  ck_assert_int_eq(v[0].steps, 0);
  ck_assert_int_eq(v[1].rank, 1);
  ck_assert_int_eq(v[1].factor_milli, 1500);
  ck_assert_int_eq(v[1].steps, 20);
  ck_assert_int_eq(v[2].factor_milli, 100000);
  ck_assert_int_eq(v[3].factor_milli, 1001);
  ck_assert_int_eq(v[4].factor_milli, 0);
  ck_assert_str_eq(resihp__inject_format(v, n, buf, sizeof(buf)),
                   "slow-rank:1@5x2,slow-rank:0.1@10x1.5:20,"
                   "slow-rank:2@0x100:1,slow-rank:3@7x1.001,kill-rank:1@9");
  static const struct {
    const char *spec, *why;
  } bad[] = {
      {"slow-rank:1@5", "needs a factor"},
      {"slow-rank:1@5x1", "more than 1 and at most 100"},
      {"slow-rank:1@5x1.0", "more than 1 and at most 100"},
      {"slow-rank:1@5x100.001", "more than 1 and at most 100"},
      {"slow-rank:1@5x99999999999", "more than 1 and at most 100"},
      {"slow-rank:1@5x0.5", "more than 1 and at most 100"},
      {"slow-rank:1@5x1.0005", "1 to 3 decimals"},
      {"slow-rank:1@5x2.", "1 to 3 decimals"},
      {"slow-rank:1@5x.5", "decimal number"},
      {"slow-rank:1@5x-2", "decimal number"},
      {"slow-rank:1@5x2:0", "D must be"},
      {"slow-rank:1@5x2:", "D must be"},
      {"slow-rank:1@5x2:3:4", "junk"},
      {"slow-rank:1@5x2,5", "missing"},
      {"slow-rank:1@catchupx2", "STEP must be"},
      {"slow-rank:1@-5x2", "STEP must be"},
      {"slow-rank:1@5\xc3x2", "needs a factor"},
      {"kill-rank:1@5x2", "STEP must be"},
      {"hang-rank:1@5:3", "STEP must be"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    ck_assert_int_eq(
        resihp__inject_parse(bad[i].spec, v, 8, &n, err, sizeof(err)),
        RESIHP_EINVAL);
    ck_assert_int_eq(n, 0);
    ck_assert_msg(strstr(err, bad[i].why), "%s: %s", bad[i].spec, err);
    ck_assert_ptr_nonnull(strstr(err, "slow-rank:REPLICA[.RANK]@STEPxF[:D]"));
  }
}
END_TEST

/* Server side of handshakes on the listening socket lfd through the
 * non-blocking machine, until one is authenticated (0) or child p exits
 * (its status in *st; RESIHP_EAUTH if a connection was refused). */
static int serve_handshake(const uint8_t *key, size_t klen, int lfd, pid_t p,
                           int *st, resihp__wire_t *out) {
  resihp__wire_hs_t *h;
  ck_assert_int_eq(resihp__wire_hs_create(key, klen, "coord", 4, 3000, &h), 0);
  int rc = RESIHP_ETIMEDOUT, exited = 0;
  int64_t dl = resihp__now_ms() + 30000; /* safety net only */
  while (rc && !exited && resihp__now_ms() < dl) {
    struct pollfd q[2] = {{lfd, POLLIN, 0},
                          {resihp__wire_hs_fd(h), POLLIN, 0}};
    poll(q, 2, resihp__wire_hs_wait_ms(h, 50));
    if (q[0].revents)
      resihp__wire_hs_accept(h, lfd);
    while (rc && resihp__wire_hs_next(h, out) == 1)
      rc = 0;
    exited = rc && waitpid(p, st, WNOHANG) == p;
  }
  if (rc && !exited)
    kill(p, SIGKILL);
  if (!exited)
    waitpid(p, st, 0);
  long refused = 0;
  resihp__wire_hs_stats(h, &refused, NULL);
  if (rc && refused)
    rc = RESIHP_EAUTH;
  resihp__wire_hs_destroy(h);
  return rc;
}

/* Mutual authentication, then every line tagged: a line altered or
 * injected after the handshake is refused. */
/* wrong: 0 right secret, 1 wrong secret, 2 right secret but the second
 * line tagged with another line's digest (a line sent to many is hashed
 * once: resihp__wire_queue_hashed). */
START_TEST(wire_auth) {
  const uint8_t k1[] = "secret-one", k2[] = "secret-two";
  for (int wrong = 0; wrong < 3; wrong++) {
    int port = 0, lfd = resihp__wire_listen("127.0.0.1", 0, &port);
    ck_assert_int_ge(lfd, 0);
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%d", port);
    pid_t p = fork();
    if (p == 0) {
      close(lfd);
      resihp__wire_t w;
      resihp__wire_init(&w, resihp__wire_dial(ep, resihp__now_ms() + 3000));
      int rc = resihp__wire_auth_client(&w, wrong == 1 ? k2 : k1, 10, "coord",
                                        resihp__now_ms() + 3000);
      uint8_t d[RESIHP__SHA256_LEN];
      resihp__wire_line_digest("HELLO a=1", 9, d);
      if (!rc) /* hashed beforehand: the same tag */
        rc = resihp__wire_queue_hashed(&w, "HELLO a=1", d);
      if (!rc && wrong == 2) /* the digest of another line */
        rc = resihp__wire_queue_hashed(&w, "HELLO a=2", d);
      /* an injected line without a tag */
      else if (!rc)
        rc = send(w.fd, "GO step=1\n", 10, 0) == 10 ? 0 : 1;
      _exit(rc == 0 ? 0 : 1);
    }
    resihp__wire_t w;
    resihp__wire_init(&w, -1);
    int st = 0;
    int rc = serve_handshake(k1, 10, lfd, p, &st, &w);
    close(lfd);
    if (wrong == 1) {
      ck_assert_int_eq(rc, RESIHP_EAUTH);
      ck_assert_int_ne(WEXITSTATUS(st), 0);
      continue;
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    char line[64];
    ck_assert_int_eq(
        resihp__wire_recv(&w, line, sizeof(line), resihp__now_ms() + 3000), 0);
    ck_assert_str_eq(line, "HELLO a=1");
    ck_assert_int_eq(
        resihp__wire_recv(&w, line, sizeof(line), resihp__now_ms() + 3000),
        RESIHP_EAUTH);
    resihp__wire_free(&w);
  }
  char v[32];
  long x;
  ck_assert_int_eq(resihp__wire_get("GO step=3 epoch=2 members=0@a:1", "epoch",
                                    v, sizeof(v)),
                   0);
  ck_assert_str_eq(v, "2");
  ck_assert_int_eq(resihp__wire_get_long("GO step=3 xstep=9", "step", &x), 0);
  ck_assert_int_eq(x, 3);
  ck_assert_int_eq(resihp__wire_get("GO a=1", "b", v, sizeof(v)),
                   RESIHP_ENOENT);
  ck_assert_int_eq(resihp__wire_get_rest("SPARE node=n1 summary=mem: low; x",
                                         "summary", v, sizeof(v)),
                   0);
  ck_assert_str_eq(v, "mem: low; x");
}
END_TEST

static const char start_ok[] =
    "format=resihp-probe-v1\nkind=start\ntime=1\nhealthy=1\ntimed_out=0\n"
    "duration_us=5\nfailed=\ncheck.mem.status=pass\ncheck.mem.duration_us=1\n"
    "check.mem.detail=ok\n\n";
static const char periodic_bad[] =
    "format=resihp-probe-v1\nkind=periodic\ntime=2\nhealthy=0\n"
    "timed_out=0\nduration_us=5\nfailed=mem\ncheck.mem.status=fail\n"
    "check.mem.duration_us=1\ncheck.mem.detail=available 1 MiB\n"
    "check.disk.status=pass\ncheck.disk.duration_us=1\n"
    "check.disk.detail=fine\n\n";

static void append_file(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "a");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fwrite(text, 1, n, f), n);
  fclose(f);
}

/* Whole blocks in order; an unterminated block waits for its end. */
START_TEST(probe_results_watch) {
  char path[128];
  snprintf(path, sizeof(path), "/tmp/resihp-test-probe.%d", (int)getpid());
  unlink(path);
  resihp__probe_watch_t w;
  resihp__probe_block_t b;
  ck_assert_int_eq(resihp__probe_watch_init(&w, NULL), RESIHP_EINVAL);
  ck_assert_int_eq(resihp__probe_watch_init(&w, path), 0);
  ck_assert_int_lt(resihp__probe_watch_next(&w, &b), 0); /* no file */
  append_file(path, start_ok, strlen(start_ok));
  ck_assert_int_eq(resihp__probe_watch_next(&w, &b), 1);
  ck_assert_str_eq(b.kind, "start");
  ck_assert_int_eq(b.healthy, 1);
  ck_assert_int_eq(resihp__probe_watch_next(&w, &b), 0);
  size_t half = strlen(periodic_bad) / 2;
  append_file(path, periodic_bad, half);
  ck_assert_int_eq(resihp__probe_watch_next(&w, &b), 0);
  append_file(path, periodic_bad + half, strlen(periodic_bad) - half);
  ck_assert_int_eq(resihp__probe_watch_next(&w, &b), 1);
  ck_assert_str_eq(b.kind, "periodic");
  ck_assert_int_eq(b.healthy, 0);
  ck_assert_str_eq(b.failed, "mem");
  ck_assert_str_eq(b.summary, "mem: available 1 MiB");
  ck_assert_int_eq(resihp__probe_watch_next(&w, &b), 0);
  resihp__probe_watch_free(&w);
  unlink(path);
}
END_TEST

/* ---- a job of forked ranks -------------------------------------------- */

static int g_mbs = 6, g_steps = 30;
#define M g_mbs
#define STEPS g_steps
#define NSTATE 4

static char secret_path[256];
/* Sharded replicas: g_K ranks each (shard k adds its own pattern), and
 * the rank of the victim replica that dies (-1: the default rank). */
static int g_K = 1, g_victim_rank = -1, g_keep;
/* setup_kill: a replacement stops itself as it starts setting up its first
 * group (hang-rank:R@setup) and the harness SIGKILLs it there; when it did
 * (ms), and where the ranks' log goes. */
static int g_setup_kill;
static int64_t g_setup_killed_ms;
static char g_log_path[128];
/* frozen_coordinator: at step g_freeze_step the test process (the
 * coordinator) is SIGSTOPped from outside for g_freeze_ms; g_frozen_ms: how
 * long it surely was stopped. */
static int g_freeze_step = -1, g_freeze_ms;
static int64_t g_frozen_ms;
/* Bad input: the ranks per replica each shard is written for (0: any),
 * and a replica whose state is shorter than the others'. */
static int g_rpr[2], g_short_state_replica = -1;
/* A slow-rank plan given to every rank (NULL: none), and the factor and
 * steps [from, to) it should stretch the samples of replica g_slow_r by. */
static const char *g_slow;
static int g_slow_r = -1;
static long g_slow_from, g_slow_to;
static double g_slow_f;
/* resihp_job_abort: rank g_abort_rank of replica g_abort_r stops the run
 * at the begin of step g_abort_step (-1: never). */
static long g_abort_step = -1;
static int g_abort_r = -1, g_abort_rank;

/* Every sample of this replica is what it reported (1 ms), stretched by
 * at least g_slow_f in the slow steps of the slow replica only. */
static int samples_slowed_right(resihp_job_t *job, int replica) {
  static resihp_job_mb_sample_t smp[1024];
  int ns = resihp_job_microbatch_samples(job, smp, 1024), slow = 0;
  for (int i = 0; i < ns; i++) {
    int in = replica == g_slow_r && smp[i].step >= g_slow_from &&
             smp[i].step < g_slow_to;
    slow += in;
    if (in ? smp[i].seconds < 0.001 * g_slow_f : smp[i].seconds != 0.001)
      return 0;
  }
  return ns > 0 && (replica != g_slow_r || slow > 0);
}

static int64_t pattern(long step, int mb, int k, int shard) {
  return (step + 1) * 1000 + mb * (k + 1) + shard * 7;
}

/* A rank: its "model" is a vector of int64; microbatch mb of step s adds a
 * known pattern, so the final state is known exactly. With several ranks
 * per replica each is a shard with a pattern of its own, and the ranks of
 * a replica check their communicator every step. */
static int rank_main(int replica, int die_at) {
  char coord[64];
  snprintf(coord, sizeof(coord), "%s", getenv("TEST_COORD"));
  resihp_job_opts_t o;
  resihp_job_opts_init(&o);
  o.microbatches = M;
  o.steps = STEPS;
  o.coordinator = coord;
  o.replica = replica;
  o.secret_file = secret_path;
  o.timeout_ms = 10000;
  char inj[64] = "";
  if (die_at >= 0 && g_victim_rank >= 0)
    snprintf(inj, sizeof(inj), "kill-rank:%d.%d@%d", replica, g_victim_rank,
             die_at);
  else if (die_at >= 0)
    snprintf(inj, sizeof(inj), "kill-rank:%d@%d", replica, die_at);
  if (g_setup_kill && die_at == -3)
    snprintf(inj, sizeof(inj), "hang-rank:%d@setup", replica);
  o.inject = g_slow ? g_slow : inj;
  int64_t state[NSTATE] = {0}, acc[NSTATE];
  /* the state is announced at join: its shape is checked there */
  resihp_job_buf_t sb = {state, sizeof(state)};
  if (replica == g_short_state_replica)
    sb.bytes -= sizeof(int64_t);
  o.state = &sb;
  o.nstate = 1;
  const char *pr = getenv("SLURM_PROCID");
  o.ranks_per_replica = g_rpr[pr && *pr == '1'];
  resihp_job_t *job;
  if (resihp_job_join(&o, &job))
    return 10;
  int sh = resihp_job_shard(job), K = resihp_job_shards(job);
  if (K != g_K || sh < 0 || sh >= K)
    return 15;
  resihp_job_step_t st;
  int rc;
  while ((rc = resihp_job_begin_step(job, &st)) == 0 && !st.done) {
    if (st.step == g_abort_step && replica == g_abort_r && sh == g_abort_rank) {
      /* a tab and a byte that is no ASCII: sent as '_' */
      rc = resihp_job_abort(job, "state\tcannot be loaded \xff");
      resihp_job_destroy(job);
      return rc ? 18 : 17;
    }
    memset(acc, 0, sizeof(acc));
    usleep(10000); /* a step takes time: a replacement can join */
    for (int i = 0; i < st.nmbs; i++) {
      for (int k = 0; k < NSTATE; k++)
        acc[k] += pattern(st.step, st.mbs[i], k, sh);
      resihp_job_report_microbatch(job, st.mbs[i], 100, 2000, 2, 0.001);
    }
    while ((rc = resihp_job_allreduce(job, acc, NSTATE)) == RESIHP_EREASSIGNED)
      for (int i = 0; i < st.nextra; i++)
        for (int k = 0; k < NSTATE; k++)
          acc[k] += pattern(st.step, st.extra[i], k, sh);
    if (rc)
      return 11;
    if (K > 1) {
      int64_t v = sh + 1;
      if (resihp_allreduce(resihp_job_replica_comm(job), &v, 1, RESIHP_FIXED64,
                           RESIHP_OP_SUM))
        return 16; /* a rank of the replica died: leave like a trainer */
      if (v != K * (K + 1) / 2)
        return 14;
    }
    for (int k = 0; k < NSTATE; k++)
      state[k] = state[k] * 3 + acc[k]; /* order matters: a real recurrence */
    resihp_job_end_step(job);
  }
  if (rc)
    return 12;
  resihp_job_mb_sample_t smp[4];
  int ns = resihp_job_microbatch_samples(job, smp, 4);
  if (ns > 0 && (smp[0].tokens != 100 || smp[0].sum_l2 != 2000 ||
                 smp[0].nseq != 2 || smp[0].mb < 0 || smp[0].mb >= M))
    return 13;
  char res[64];
  snprintf(res, sizeof(res), "%lld.%lld", (long long)state[0],
           (long long)state[NSTATE - 1]);
  /* a wrong stretch shows as a replica that disagrees */
  if (g_slow && !samples_slowed_right(job, replica))
    snprintf(res, sizeof(res), "samples-not-slowed-as-planned");
  resihp_job_finish(job, res);
  resihp_job_destroy(job);
  return 0;
}

/* The result of a failure-free run: "s0" or, sharded, "s0/s1/..." */
static const char *expected(char *buf, size_t len) {
  size_t off = 0;
  for (int sh = 0; sh < g_K; sh++) {
    int64_t state[NSTATE] = {0};
    for (int s = 0; s < STEPS; s++)
      for (int k = 0; k < NSTATE; k++) {
        int64_t a = 0;
        for (int mb = 0; mb < M; mb++)
          a += pattern(s, mb, k, sh);
        state[k] = state[k] * 3 + a;
      }
    off += (size_t)snprintf(buf + off, len - off, "%s%lld.%lld", sh ? "/" : "",
                            (long long)state[0], (long long)state[NSTATE - 1]);
  }
  return buf;
}

typedef struct {
  int R;
  pid_t pids[8][8]; /* replica, rank */
  int failed[8];
  int replaced[8];
  int allow_replace;
  int keep_failed; /* leave a failed replica's other ranks running */
} harness_t;

/* die_at PROBE_FAILS: the rank's node failed a periodic probe before it
 * started (its results file holds a failing periodic block). */
#define PROBE_FAILS (-2)
static char probe_path[128];

/* catchup_strangers_do_not_delay: idle connections opened to the
 * replacement's catch-up port as soon as it says HELLO. */
static int g_flood_catchup, g_flooded;
/* replica 0's listeners, looked at from another loopback address
 * (127.0.0.2): how many answered there, and at their own (127.0.0.1) */
static int g_check_bind, g_bind_checked, g_bind_elsewhere, g_bind_own;

static void check_bind(const char *ep) {
  const char *c = ep ? strrchr(ep, ':') : NULL;
  if (!c)
    return;
  char other[64], own[64];
  snprintf(other, sizeof(other), "127.0.0.2%s", c);
  snprintf(own, sizeof(own), "127.0.0.1%s", c);
  int fd = resihp__wire_dial(other, resihp__now_ms() + 2000);
  g_bind_elsewhere += fd >= 0;
  if (fd >= 0)
    close(fd);
  fd = resihp__wire_dial(own, resihp__now_ms() + 2000);
  g_bind_own += fd >= 0;
  if (fd >= 0)
    close(fd);
}
static void open_idle(const char *ep, int *fds, int n);

static pid_t spawn_rank(int r, int die_at) {
  pid_t p = fork();
  if (p == 0) {
    if (die_at == PROBE_FAILS)
      setenv("RESIHP_PROBE_RESULTS", probe_path, 1);
    if (g_log_path[0]) {
      setenv("RESIHP_DEBUG", "info", 1); /* "set-up ended" is info */
      int fd = open(g_log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
      }
    }
    _exit(rank_main(r, die_at == PROBE_FAILS ? -1 : die_at));
  }
  return p;
}

/* The g_K ranks of replica r, as the tasks of one Slurm step (no PMIx:
 * the other ranks find rank 0 through the coordinator). */
static void spawn_replica(pid_t *pids, int r, int die_at) {
  if (g_K == 1) {
    pids[0] = spawn_rank(r, die_at);
    return;
  }
  char n[16], k[16];
  snprintf(n, sizeof(n), "%d", g_K);
  unsetenv("PMIX_RANK");
  setenv("SLURM_NTASKS", n, 1);
  for (int i = 0; i < g_K; i++) {
    snprintf(k, sizeof(k), "%d", i);
    setenv("SLURM_PROCID", k, 1);
    pids[i] = spawn_rank(r, die_at);
  }
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
}

static void on_failed(void *ud, int r, const char *node, long j, long s,
                      const char *why) {
  (void)node;
  (void)j;
  (void)s;
  (void)why;
  harness_t *h = ud;
  h->failed[r]++;
  for (int k = 0; k < g_K && !h->keep_failed; k++)
    kill(h->pids[r][k], SIGKILL);
  if (h->allow_replace && !h->replaced[r]) {
    h->replaced[r] = 1;
    spawn_replica(h->pids[r], r, g_setup_kill ? -3 : -1);
  }
}

/* A process SIGSTOPs this one, waits until it is stopped, keeps it so for
 * ms, SIGCONTs it, and says how long it was surely stopped. */
static int64_t freeze_me(int ms) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t me = getpid(), k = fork();
  ck_assert_int_ge(k, 0);
  if (k == 0) {
    char path[64], st = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)me);
    kill(me, SIGSTOP);
    while (st != 'T') { /* stopped from here on */
      FILE *f = fopen(path, "r");
      if (!f || fscanf(f, "%*d %*s %c", &st) != 1)
        st = 0;
      if (f)
        fclose(f);
    }
    int64_t t1 = resihp__now_ms();
    usleep((useconds_t)ms * 1000);
    int64_t held = resihp__now_ms() - t1;
    kill(me, SIGCONT);
    _exit(write(p[1], &held, sizeof(held)) == sizeof(held) ? 0 : 1);
  }
  close(p[1]);
  int64_t held = 0;
  ck_assert_int_eq(read(p[0], &held, sizeof(held)), sizeof(held));
  close(p[0]);
  ck_assert_int_eq(waitpid(k, NULL, 0), k);
  return held;
}

/* Run R ranks; replica victim dies at step die_at (-1: none). Returns the
 * result text the coordinator collected. */
static int run_job(int R, int victim, int die_at, int replace, char *out,
                   size_t outlen) {
  snprintf(secret_path, sizeof(secret_path), "/tmp/resihp-test-secret.%d",
           (int)getpid());
  FILE *f = fopen(secret_path, "w");
  fputs("unit-test-secret-0123456789", f);
  fclose(f);
  chmod(secret_path, 0600);
  harness_t h = {.R = R, .allow_replace = replace, .keep_failed = g_keep};
  resihp__coord_opts_t co = {.replicas = R,
                             .bind_host = "127.0.0.1",
                             .secret =
                                 (const uint8_t *)"unit-test-secret-0123456789",
                             .secret_len = 27,
                             .silence_ms = 3000,
                             .on_failed = on_failed,
                             .lockstep = g_freeze_step >= 0,
                             .ud = &h};
  resihp__coord_t *c;
  ck_assert_int_eq(resihp__coord_create(&co, &c), 0);
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", resihp__coord_port(c));
  setenv("TEST_COORD", ep, 1);
  for (int r = 0; r < R; r++)
    spawn_replica(h.pids[r], r, r == victim ? die_at : -1);
  int64_t deadline = resihp__now_ms() + 40000;
  int idle[64];
  const char *sep = NULL;
  while (resihp__coord_state(c) == RESIHP__COORD_RUNNING &&
         resihp__now_ms() < deadline) {
    resihp__coord_poll(c, 50);
    if (g_freeze_step >= 0 && !g_frozen_ms &&
        resihp__coord_step(c) >= g_freeze_step)
      g_frozen_ms = freeze_me(g_freeze_ms);
    int ws;
    pid_t wp;
    while ((wp = waitpid(-1, &ws, WNOHANG | WUNTRACED)) > 0)
      if (WIFSTOPPED(ws) && g_setup_kill && !g_setup_killed_ms) {
        /* the replacement stopped where its plan said: kill it there,
         * from outside */
        kill(wp, SIGKILL);
        g_setup_killed_ms = resihp__now_ms();
      }
    /* the replacement said HELLO; its START (and catch-up) comes at a
     * later poll, after these are queued on its port */
    const char *ep0 = NULL, *sep0 = NULL;
    if (g_check_bind && !g_bind_checked && resihp__coord_connected(c, 0) &&
        !resihp__coord_replica_eps(c, 0, &ep0, &sep0, NULL)) {
      check_bind(ep0);
      check_bind(sep0);
      g_bind_checked = 1;
    }
    if (g_flood_catchup && !g_flooded && victim >= 0 && h.replaced[victim] &&
        resihp__coord_connected(c, victim) &&
        !resihp__coord_replica_eps(c, victim, NULL, &sep, NULL)) {
      open_idle(sep, idle, g_flood_catchup);
      g_flooded = 1;
    }
  }
  for (int i = 0; g_flooded && i < g_flood_catchup; i++)
    close(idle[i]);
  int state = resihp__coord_state(c);
  FILE *mem = fmemopen(out, outlen, "w");
  int agree = resihp__coord_summary(c, mem, NULL);
  fclose(mem);
  for (int r = 0; r < R; r++)
    for (int k = 0; k < g_K; k++)
      kill(h.pids[r][k], SIGKILL);
  while (waitpid(-1, NULL, 0) > 0)
    ;
  resihp__coord_destroy(c);
  unlink(secret_path);
  ck_assert_msg(state == RESIHP__COORD_DONE, "%s", out);
  ck_assert_int_eq(agree, 0);
  if (victim >= 0)
    ck_assert_int_ge(h.failed[victim], 1);
  return 0;
}

START_TEST(job_without_failure) {
  char out[8192], want[128];
  run_job(3, -1, -1, 0, out, sizeof(out));
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  ck_assert_ptr_nonnull(strstr(out, "3 replicas agree"));
}
END_TEST

/* A rank listens on the address it advertises (the one that routes to
 * the coordinator, 127.0.0.1 here), not on every address of the host:
 * its data and state ports answer at 127.0.0.1, not at 127.0.0.2. */
START_TEST(job_listens_where_it_says) {
  char out[8192];
  g_check_bind = 1;
  run_job(1, -1, -1, 0, out, sizeof(out));
  g_check_bind = 0;
  ck_assert_int_eq(g_bind_checked, 1);
  ck_assert_int_eq(g_bind_own, 2);
  ck_assert_int_eq(g_bind_elsewhere, 0);
}
END_TEST

START_TEST(job_rank_dies_no_spare) {
  char out[8192], want[128];
  run_job(3, 1, 4, 0, out, sizeof(out));
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  ck_assert_msg(strstr(out, "2 replicas agree"), "%s", out);
  ck_assert_msg(strstr(out, "reassigned"), "%s", out);
}
END_TEST

START_TEST(job_rank_dies_replaced) {
  char out[8192], want[128];
  run_job(2, 0, 3, 1, out, sizeof(out));
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  /* the replacement caught up and finished with the same state */
  ck_assert_msg(strstr(out, "2 replicas agree"), "%s", out);
}
END_TEST

/* slow-rank:1@3x2.5:4: replica 1's samples of steps 3..6 are stretched
 * 2.5 times (it sleeps the difference), nobody else's and no other step;
 * the job finishes as usual with the same result (a slowdown is no fault). */
/* A replacement killed from outside at the start of its first group's
 * set-up, while the survivors set theirs up with it: the coordinator fails
 * it and sends the next epoch, and the survivors must end the set-up in
 * progress at once instead of dialling (or waiting for) the dead rank until
 * the set-up's deadline (10 s): no survivor's set-up runs into it, and the
 * run finishes with the survivors. */
START_TEST(replacement_killed_in_setup) {
  char out[8192], want[128];
  snprintf(g_log_path, sizeof(g_log_path), "/tmp/resihp-test-setup-log.%d",
           (int)getpid());
  unlink(g_log_path);
  g_setup_kill = 1;
  g_K = 1 + _i; /* 2: the replacement's rank 1 is killed */
  int64_t t0 = resihp__now_ms();
  run_job(3, 1, 3, 1, out, sizeof(out));
  int64_t t1 = resihp__now_ms();
  ck_assert_msg(g_setup_killed_ms > 0, "the replacement never stopped: %s",
                out);
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  ck_assert_msg(strstr(out, "2 replicas agree"), "%s", out);
  FILE *f = fopen(g_log_path, "r");
  ck_assert_ptr_nonnull(f);
  char line[1024];
  int deadline_hit = 0, ended = 0;
  while (fgets(line, sizeof(line), f)) {
    if (strstr(line, "before the deadline") ||
        strstr(line, "from higher ranks missing after"))
      deadline_hit++, fprintf(stderr, "%s", line);
    ended += strstr(line, "set-up ended") != NULL;
  }
  fclose(f);
  unlink(g_log_path);
  fprintf(stderr,
          "replacement_killed_in_setup: run %lld ms, of which %lld ms after "
          "the kill; %d set-up(s) ended early\n",
          (long long)(t1 - t0), (long long)(t1 - g_setup_killed_ms), ended);
  ck_assert_msg(!deadline_hit,
                "%d survivor set-up(s) waited for the dead replacement until "
                "the deadline",
                deadline_hit);
  ck_assert_msg(ended >= 1, "no survivor was setting up with the victim");
  g_setup_kill = 0;
  g_log_path[0] = '\0';
}
END_TEST

/* The coordinator's process SIGSTOPped from outside for 2 s in the middle
 * of the run (a frozen host), every step through it (lockstep), so the
 * replicas wait at the next boundary: the summary's training time leaves
 * that out and its waiting shows it, never less than it was. */
START_TEST(frozen_coordinator_is_waiting) {
  char out[8192], want[128];
  g_freeze_step = 5;
  g_freeze_ms = 2000;
  g_frozen_ms = 0;
  run_job(2, -1, -1, 0, out, sizeof(out));
  g_freeze_step = -1;
  ck_assert_msg(g_frozen_ms >= 2000, "%lld", (long long)g_frozen_ms);
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  double train = -1, waited = -1, all = -1;
  const char *t = strstr(out, "training time:");
  const char *w = strstr(out, "waiting:");
  ck_assert_msg(t && sscanf(t, "training time: %lf", &train) == 1, "%s", out);
  ck_assert_msg(w && sscanf(w, "waiting: %lf s of the run's %lf", &waited,
                            &all) == 2,
                "no waiting in the summary after a %lld ms freeze:\n%s",
                (long long)g_frozen_ms, out);
  ck_assert_msg(waited * 1000 >= (double)g_frozen_ms,
                "waiting %.3f s < the freeze's %lld ms\n%s", waited,
                (long long)g_frozen_ms, out);
  ck_assert_msg(train <= all - (double)g_frozen_ms / 1000 + 1e-3,
                "training %.3f s counts the freeze (run %.3f s)\n%s", train,
                all, out);
}
END_TEST

START_TEST(job_slow_rank_stretches_samples) {
  char out[8192], want[128];
  g_slow = "slow-rank:1@3x2.5:4";
  g_slow_r = 1;
  g_slow_from = 3;
  g_slow_to = 7;
  g_slow_f = 2.5;
  run_job(3, -1, -1, 0, out, sizeof(out));
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  ck_assert_msg(strstr(out, "3 replicas agree"), "%s", out);
}
END_TEST

/* Sharded replicas, 3 x 2 ranks: without failure each shard's state is its
 * own exact sum, and the replica reports both shards. */
START_TEST(shards_without_failure) {
  char out[8192], want[256];
  g_K = 2;
  run_job(3, -1, -1, 0, out, sizeof(out));
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  ck_assert_msg(strstr(out, "3 replicas agree"), "%s", out);
}
END_TEST

/* Rank 0 (shard 0) of replica 1 dies in step 4; its rank 1 is left
 * running (g_keep), so the shard-1 group's all-reduce succeeds with
 * replica 1's contribution while the shard-0 group fails. Both groups must
 * drop replica 1 together and redo the step with its microbatches
 * reassigned: had shard 1 kept its committed sum and added the reassigned
 * microbatches too, its state would differ from the expected one. */
START_TEST(shards_kill_in_one_group_aborts_all) {
  char out[8192], want[256];
  g_K = 2;
  g_victim_rank = 0;
  g_keep = 1;
  run_job(3, 1, 4, 0, out, sizeof(out));
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  ck_assert_msg(strstr(out, "2 replicas agree"), "%s", out);
  ck_assert_msg(strstr(out, "reassigned"), "%s", out);
}
END_TEST

/* Shard 1 of replica 0 dies; the replica is replaced and each shard of the
 * replacement catches up from a healthy replica. */
/* resihp_job_abort in the middle of step 3 (it has its microbatches),
 * from a replica of one rank and from the non-leader rank of a replica of
 * two (relayed by its rank 0): nobody is relaunched although replacements
 * are allowed (no failure at all), the others commit step 3 with the
 * leaver's microbatches (their state is exactly that of 4 failure-free
 * steps) and the run stops there, the reason in the summary. */
START_TEST(job_abort_stops_run) {
  char out[8192], want[256];
  g_K = 1 + _i;
  g_abort_step = 3;
  g_abort_r = 1;
  g_abort_rank = _i;
  run_job(3, -1, -1, 1, out, sizeof(out));
  g_steps = 4;
  expected(want, sizeof(want));
  g_steps = 30;
  ck_assert_msg(strstr(out, want), "%s", out);
  ck_assert_msg(strstr(out, "2 replicas agree"), "%s", out);
  ck_assert_msg(strstr(out, "steps completed:        4 of 30"), "%s", out);
  ck_assert_msg(strstr(out, "failures:               0 "), "%s", out);
  ck_assert_msg(!strstr(out, "(0 microbatches reassigned"), "%s", out);
  ck_assert_msg(
      strstr(out, "stopped by replica 1:   state_cannot be loaded _ "), "%s",
      out);
}
END_TEST

/* ABORT straight into the handler: a reason that is not printable text
 * is refused, but the stop stands (before the first step: the run ends at
 * once), and the first reason is the one kept. */
START_TEST(coord_abort_reason_checked) {
  static const char key[] = "abort-test-secret";
  resihp__coord_opts_t co = {.replicas = 2,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)key,
                             .secret_len = sizeof(key) - 1,
                             .silence_ms = 600000};
  resihp__coord_t *c;
  ck_assert_int_eq(resihp__coord_create(&co, &c), 0);
  int k[2], sv[2][2];
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv[i]),
                     0);
    resihp__wire_t w;
    resihp__wire_init(&w, sv[i][0]);
    k[i] = resihp__coord_adopt(c, &w);
    ck_assert_int_ge(k[i], 0);
  }
  resihp__coord_feed(c, k[0], "HELLO replica=0 ep=a:1 sep=a:2 mbs=4 steps=9");
  resihp__coord_feed(c, k[1], "HELLO replica=1 ep=b:1 sep=b:2 mbs=4 steps=9");
  ck_assert_int_eq(resihp__coord_aborted(c, NULL, 0), -1);
  resihp__coord_feed(c, k[1], "ABORT reason=bad\x01text");
  char why[64];
  ck_assert_int_eq(resihp__coord_aborted(c, why, sizeof(why)), 1);
  ck_assert_str_eq(why, "(no readable reason given)");
  ck_assert_int_eq(resihp__coord_connected(c, 1), 0);
  resihp__coord_feed(c, k[0], "ABORT reason=second one");
  ck_assert_int_eq(resihp__coord_aborted(c, why, sizeof(why)), 1);
  ck_assert_ptr_null(resihp__coord_check(c));
  ck_assert_int_eq(resihp__coord_state(c), RESIHP__COORD_DONE);
  resihp__coord_destroy(c);
  for (int i = 0; i < 2; i++)
    close(sv[i][1]);
}
END_TEST

START_TEST(shards_replaced_per_shard_catchup) {
  char out[8192], want[256];
  g_K = 2;
  g_victim_rank = 1;
  run_job(3, 0, 3, 1, out, sizeof(out));
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  ck_assert_msg(strstr(out, "3 replicas agree"), "%s", out);
}
END_TEST

static resihp__coord_t *new_coord(int R, const char *key, int silence_ms,
                                  char *ep, size_t eplen);

/* Run R replicas of g_K ranks until every process has exited (the
 * coordinator pumped meanwhile); the exit codes go to codes[r][k]. */
static void run_until_exit(int R, int codes[][8]) {
  const char *key = "unit-test-secret-0123456789";
  snprintf(secret_path, sizeof(secret_path), "/tmp/resihp-test-secret-b.%d",
           (int)getpid());
  FILE *f = fopen(secret_path, "w");
  fputs(key, f);
  fclose(f);
  chmod(secret_path, 0600);
  char ep[64];
  resihp__coord_t *c = new_coord(R, key, 10000, ep, sizeof(ep));
  setenv("TEST_COORD", ep, 1);
  pid_t pids[8][8];
  for (int r = 0; r < R; r++)
    spawn_replica(pids[r], r, -1);
  int left = R * g_K;
  int64_t deadline = resihp__now_ms() + 40000;
  while (left > 0 && resihp__now_ms() < deadline) {
    resihp__coord_poll(c, 20);
    for (int r = 0; r < R; r++)
      for (int k = 0; k < g_K; k++) {
        int st;
        if (pids[r][k] > 0 && waitpid(pids[r][k], &st, WNOHANG) > 0) {
          codes[r][k] = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
          pids[r][k] = 0;
          left--;
        }
      }
    /* a replica that got through waits for the other: stop it once the
     * refused one is gone */
    if (g_short_state_replica >= 0 && (codes[0][0] >= 0 || codes[1][0] >= 0))
      for (int r = 0; r < R; r++)
        for (int k = 0; k < g_K; k++)
          if (pids[r][k] > 0)
            kill(pids[r][k], SIGKILL);
  }
  for (int r = 0; r < R; r++)
    for (int k = 0; k < g_K; k++)
      if (pids[r][k] > 0)
        kill(pids[r][k], SIGKILL);
  while (waitpid(-1, NULL, 0) > 0)
    ;
  resihp__coord_destroy(c);
  unlink(secret_path);
}

/* The two ranks of a replica are written for different numbers of ranks
 * per replica (2 and 3): both refuse at join, before anything started. */
START_TEST(shards_disagree_on_k_refused) {
  int codes[8][8];
  memset(codes, -1, sizeof(codes));
  g_K = 2;
  g_rpr[0] = 2;
  g_rpr[1] = 3;
  run_until_exit(1, codes);
  ck_assert_int_eq(codes[0][0], 10);
  ck_assert_int_eq(codes[0][1], 10);
}
END_TEST

/* A replica whose shard state differs in size from the first replica's is
 * refused (the others' would not fit its buffers, or its theirs): at its
 * first step, where the coordinator knows its partition of the layers
 * (none here: the job's shape), before it joined any group; its
 * begin_step fails (exit 12). */
START_TEST(shards_state_mismatch_refused) {
  int codes[8][8];
  memset(codes, -1, sizeof(codes));
  g_K = 2;
  g_short_state_replica = 1;
  run_until_exit(2, codes);
  /* the first HELLO sets the job's shape: the other replica is refused */
  ck_assert_msg((codes[0][0] == 12) != (codes[1][0] == 12), "%d %d",
                codes[0][0], codes[1][0]);
}
END_TEST

/* A periodic probe failure reaches the coordinator: the replica is failed
 * for it (kind probe) and replaced, and the result is unchanged. */
START_TEST(job_probe_failure_replaced) {
  char out[8192], want[128];
  snprintf(probe_path, sizeof(probe_path), "/tmp/resihp-test-probe-job.%d",
           (int)getpid());
  unlink(probe_path);
  append_file(probe_path, start_ok, strlen(start_ok));
  append_file(probe_path, periodic_bad, strlen(periodic_bad));
  run_job(2, 1, PROBE_FAILS, 1, out, sizeof(out));
  unlink(probe_path);
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  ck_assert_msg(strstr(out, "2 replicas agree"), "%s", out);
  ck_assert_msg(strstr(out, "replica 1, probe at step"), "%s", out);
  ck_assert_msg(strstr(out, "periodic probe failed on"), "%s", out);
}
END_TEST

/* SPARE registrations: state per node, summary kept, bad states sticky,
 * a promoted spare stays promoted, a bad secret is refused. */
static int spare_say(const char *ep, const char *key, const char *line,
                     char *reply, size_t cap) {
  int fd = resihp__wire_dial(ep, resihp__now_ms() + 3000);
  if (fd < 0)
    return fd;
  resihp__wire_t w;
  resihp__wire_init(&w, fd);
  int rc = resihp__wire_auth_client(&w, (const uint8_t *)key, strlen(key),
                                    "coord", resihp__now_ms() + 3000);
  if (!rc)
    rc = resihp__wire_send(&w, line, resihp__now_ms() + 3000);
  if (!rc)
    rc = resihp__wire_recv(&w, reply, cap, resihp__now_ms() + 3000);
  resihp__wire_free(&w);
  return rc;
}

/* A coordinator of one replica on 127.0.0.1 with the job secret key, for
 * the spare registry's tests. */
/* Serve the coordinator until the child p (spare agents talking to it)
 * exits; it must exit 0. */
static void serve_until_exit(resihp__coord_t *c, pid_t p) {
  int st = 0;
  while (waitpid(p, &st, WNOHANG) == 0)
    resihp__coord_poll(c, 20);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
}

static resihp__coord_t *spare_coord(const char *key) {
  resihp__coord_opts_t co = {.replicas = 1,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)key,
                             .secret_len = strlen(key),
                             .silence_ms = 3000};
  resihp__coord_t *c;
  ck_assert_int_eq(resihp__coord_create(&co, &c), 0);
  return c;
}

START_TEST(spare_registry) {
  const char *key = "spare-test-secret";
  resihp__coord_t *c = spare_coord(key);
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", resihp__coord_port(c));
  const char *lines[] = {
      "SPARE node=s1 status=pass summary=-",
      "SPARE node=s2 status=fail summary=mem: available 1 MiB",
      "SPARE node=s3 status=pass summary=-",
      "SPARE node=s2 status=pass summary=-", /* bad stays bad */
      "SPARE node=s4 status=maybe summary=-",
  };
  const int n = sizeof(lines) / sizeof(lines[0]);
  pid_t p = fork();
  if (p == 0) {
    char reply[256];
    for (int i = 0; i < n; i++) {
      int rc = spare_say(ep, key, lines[i], reply, sizeof(reply));
      int want_ok = i < n - 1;
      if (want_ok ? rc || strncmp(reply, "SPARE_OK ", 9)
                  : !rc && strncmp(reply, "NO ", 3))
        _exit(1 + i);
    }
    /* the wrong secret never registers */
    spare_say(ep, "wrong", "SPARE node=s5 status=pass summary=-", reply,
              sizeof(reply));
    _exit(0);
  }
  serve_until_exit(c, p);
  long regs = 0;
  ck_assert_int_eq(resihp__coord_spare_state(c, "s1", &regs),
                   RESIHP__SPARE_HEALTHY);
  ck_assert_int_eq(regs, 1);
  ck_assert_int_eq(resihp__coord_spare_state(c, "s2", &regs),
                   RESIHP__SPARE_FAILED_PROBE);
  ck_assert_int_eq(regs, 2);
  ck_assert_int_eq(resihp__coord_spare_state(c, "s5", &regs),
                   RESIHP__SPARE_CHECKING);
  ck_assert_int_eq(regs, 0);
  resihp__coord_spare_mark(c, "s1", RESIHP__SPARE_PROMOTED, 0, NULL);
  resihp__coord_spare_mark(c, "s3", RESIHP__SPARE_UNREACHABLE, -1, "timeout");
  resihp__coord_spare_mark(c, "s3", RESIHP__SPARE_PROMOTED, 0, NULL);
  ck_assert_int_eq(resihp__coord_spare_state(c, "s1", NULL),
                   RESIHP__SPARE_PROMOTED);
  ck_assert_int_eq(resihp__coord_spare_state(c, "s3", NULL),
                   RESIHP__SPARE_UNREACHABLE);
  char out[4096];
  FILE *mem = fmemopen(out, sizeof(out), "w");
  resihp__coord_summary(c, mem, NULL);
  fclose(mem);
  ck_assert_msg(strstr(out, "spare s1: promoted to replica 0"), "%s", out);
  ck_assert_msg(strstr(out, "spare s2: failed-probe (mem: available 1 MiB)"),
                "%s", out);
  ck_assert_msg(strstr(out, "spare s3: unreachable (timeout)"), "%s", out);
  resihp__coord_destroy(c);
}
END_TEST

static void say_all(resihp__coord_t *c, const char *key, const char **lines,
                    int n) {
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", resihp__coord_port(c));
  pid_t p = fork();
  if (p == 0) {
    char reply[256];
    for (int i = 0; i < n; i++) {
      int rc = spare_say(ep, key, lines[i], reply, sizeof(reply));
      int want_ok = strstr(lines[i], "burnin=x") == NULL;
      if (want_ok ? rc || strncmp(reply, "SPARE_OK ", 9)
                  : !rc && strncmp(reply, "NO ", 3))
        _exit(1 + i);
    }
    _exit(0);
  }
  serve_until_exit(c, p);
}

/* Burn-in (issue 35): a spare whose burn-in failed is suspect, not bad
 * (the summary says it was refused), one with nothing to compare with yet
 * is healthy until judged, a malformed burn-in is refused, and a later
 * registration that passes makes a suspect spare healthy again. */
START_TEST(spare_burnin_suspect) {
  const char *key = "burnin-test-secret";
  resihp__coord_t *c = spare_coord(key);
  const char *first[] = {
      /* burn-in failed (the node too slow to finish): suspect */
      "SPARE node=s1 status=pass burnin=fail summary=the compute kernel did "
      "not finish before the deadline (1 of 12 products)",
      /* a burn-in with nothing to compare to yet: healthy, unjudged */
      "SPARE node=s2 status=pass burnin=4194304:50000:10000 summary=-",
      /* no burn-in (--no-burn-in): healthy as before */
      "SPARE node=s3 status=pass summary=-",
      /* a malformed burn-in is refused */
      "SPARE node=s4 status=pass burnin=x:1 summary=-",
  };
  say_all(c, key, first, 4);
  ck_assert_int_eq(resihp__coord_spare_state(c, "s1", NULL),
                   RESIHP__SPARE_SUSPECT);
  ck_assert_msg(strstr(resihp__coord_spare_summary(c, "s1"),
                       "burn-in failed: the compute kernel did not finish"),
                "%s", resihp__coord_spare_summary(c, "s1"));
  /* a failed burn-in is never a last resort (only a slow one is) */
  ck_assert_int_eq(resihp__coord_spare_slow_only(c, "s1"), 0);
  ck_assert_int_eq(resihp__coord_spare_judge(c, "s2"), RESIHP__SPARE_HEALTHY);
  ck_assert_int_eq(resihp__coord_spare_slow_only(c, "s2"), 0);
  ck_assert_int_eq(resihp__coord_spare_state(c, "s3", NULL),
                   RESIHP__SPARE_HEALTHY);
  ck_assert_int_eq(resihp__coord_spare_state(c, "s4", NULL),
                   RESIHP__SPARE_CHECKING);
  ck_assert_int_eq(resihp__coord_burnin_bytes(c), 0);
  char out[4096];
  FILE *mem = fmemopen(out, sizeof(out), "w");
  resihp__coord_summary(c, mem, NULL);
  fclose(mem);
  ck_assert_msg(strstr(out, "spare s1: suspect (burn-in failed: the compute "
                            "kernel did not finish"),
                "%s", out);
  ck_assert_msg(strstr(out, "refused, checked again later"), "%s", out);
  ck_assert_msg(strstr(out, "spare s2: registered-healthy; 1 registration(s); "
                            "last burn-in 60 ms"),
                "%s", out);
  /* suspect is not bad: its next check passes and it is healthy again */
  const char *again[] = {
      "SPARE node=s1 status=pass burnin=4194304:50000:10000 summary=-"};
  say_all(c, key, again, 1);
  ck_assert_int_eq(resihp__coord_spare_state(c, "s1", NULL),
                   RESIHP__SPARE_HEALTHY);
  resihp__coord_destroy(c);
}
END_TEST

/* A rank with the wrong secret is refused by the coordinator. */
START_TEST(job_wrong_secret_refused) {
  const char *good = "the-job-secret-0123456789";
  resihp__coord_opts_t co = {.replicas = 1,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)good,
                             .secret_len = strlen(good),
                             .silence_ms = 3000};
  resihp__coord_t *c;
  ck_assert_int_eq(resihp__coord_create(&co, &c), 0);
  char ep[64], path[128];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", resihp__coord_port(c));
  snprintf(path, sizeof(path), "/tmp/resihp-test-badsecret.%d", (int)getpid());
  FILE *f = fopen(path, "w");
  fputs("not-the-job-secret", f);
  fclose(f);
  chmod(path, 0600);
  pid_t p = fork();
  if (p == 0) {
    resihp_job_opts_t o;
    resihp_job_opts_init(&o);
    o.microbatches = 1;
    o.steps = 1;
    o.coordinator = ep;
    o.replica = 0;
    o.secret_file = path;
    o.inject = "";
    resihp_job_t *job = NULL;
    int rc = resihp_job_join(&o, &job);
    _exit(rc == RESIHP_EAUTH ? 0 : 1);
  }
  int st = 0;
  while (waitpid(p, &st, WNOHANG) == 0)
    resihp__coord_poll(c, 20);
  unlink(path);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
  ck_assert_int_eq(resihp__coord_connected(c, 0), 0);
  resihp__coord_destroy(c);
}
END_TEST

/* ---- hardening: strangers, bad peers, long lists, tampering ---------- */

static resihp__coord_t *new_coord(int R, const char *key, int silence_ms,
                                  char *ep, size_t eplen) {
  resihp__coord_opts_t co = {.replicas = R,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)key,
                             .secret_len = strlen(key),
                             .silence_ms = silence_ms};
  resihp__coord_t *c;
  ck_assert_int_eq(resihp__coord_create(&co, &c), 0);
  snprintf(ep, eplen, "127.0.0.1:%d", resihp__coord_port(c));
  return c;
}

/* Run the coordinator until child p exits; its exit status. */
static int pump_until_exit(resihp__coord_t *c, pid_t p) {
  int st = 0;
  int64_t deadline = resihp__now_ms() + 60000; /* safety net only */
  while (waitpid(p, &st, WNOHANG) == 0) {
    if (resihp__now_ms() > deadline) {
      kill(p, SIGKILL);
      waitpid(p, &st, 0);
      return 99;
    }
    resihp__coord_poll(c, 20);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 98;
}

/* n connections that never say a word (and stay open). */
static void open_idle(const char *ep, int *fds, int n) {
  for (int i = 0; i < n; i++)
    fds[i] = resihp__wire_dial(ep, resihp__now_ms() + 5000);
}

/* An authenticated connection to the coordinator, for scripted peers. */
static int coord_open(const char *ep, const char *key, resihp__wire_t *w) {
  resihp__wire_init(w, resihp__wire_dial(ep, resihp__now_ms() + 5000));
  if (w->fd < 0)
    return w->fd;
  return resihp__wire_auth_client(w, (const uint8_t *)key, strlen(key), "coord",
                                  resihp__now_ms() + 10000);
}

/* The next line that is not a heartbeat. */
static int coord_reply(resihp__wire_t *w, char *out, size_t cap) {
  int rc;
  do
    rc = resihp__wire_recv(w, out, cap, resihp__now_ms() + 10000);
  while (!rc && !strcmp(out, "HB"));
  return rc;
}

/* One line, one answer, on a fresh connection. */
static int coord_say(const char *ep, const char *key, const char *line,
                     char *reply, size_t cap) {
  resihp__wire_t w;
  int rc = coord_open(ep, key, &w);
  if (!rc)
    rc = resihp__wire_send(&w, line, resihp__now_ms() + 5000);
  if (!rc)
    rc = coord_reply(&w, reply, cap);
  resihp__wire_free(&w);
  return rc;
}

/* 100 idle connections (more than the pending cap) and 10 that drip half
 * a handshake are open when a genuine client comes: it is answered
 * anyway, while they are still open. Before the fix each one held the
 * accept loop for a second. */
START_TEST(coord_strangers_do_not_delay) {
  const char *key = "stranger-test-secret";
  char ep[64];
  resihp__coord_t *c = new_coord(1, key, 3000, ep, sizeof(ep));
  pid_t p = fork();
  if (p == 0) {
    int idle[100], drip[10];
    open_idle(ep, idle, 100);
    open_idle(ep, drip, 10);
    for (int i = 0; i < 10; i++)
      if (drip[i] >= 0)
        send(drip[i], "AUTH2 0123", 10, MSG_NOSIGNAL);
    char reply[128];
    int rc = coord_say(ep, key, "SPARE node=g1 status=pass summary=-", reply,
                       sizeof(reply));
    _exit(rc == 0 && !strncmp(reply, "SPARE_OK ", 9) ? 0 : 1);
  }
  ck_assert_int_eq(pump_until_exit(c, p), 0);
  ck_assert_int_eq(resihp__coord_spare_state(c, "g1", NULL),
                   RESIHP__SPARE_HEALTHY);
  resihp__coord_destroy(c);
}
END_TEST

/* A connection that trickles a byte now and then does not stay: its
 * handshake deadline is absolute. */
/* Resident memory of this process, now (VmRSS) or at its peak so far
 * (VmHWM), bytes. */
static long rss_bytes(const char *which) {
  char l[128];
  long kb = 0;
  FILE *f = fopen("/proc/self/status", "r");
  while (f && fgets(l, sizeof(l), f))
    if (!strncmp(l, which, strlen(which)))
      sscanf(l + strlen(which), ": %ld", &kb);
  if (f)
    fclose(f);
  return kb << 10;
}

/* The peer closed fd (or reset it) before the deadline. */
static int closed_by_peer(int fd, int64_t deadline) {
  char b[256];
  while (resihp__now_ms() < deadline) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    poll(&p, 1, 100);
    ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
      return 1;
  }
  return 0;
}

/* Authenticated connections that never say who they are: 10 send a 4 MiB
 * HELLO without its end, 10 say nothing. The first are cut at the
 * pre-HELLO limit (64 KiB) and the others closed at the HELLO deadline
 * (1 s here), not before; the coordinator's memory does not grow with
 * what they sent. Before, each could buffer a 16 MiB line and stayed
 * open for good (20 connections: 2 MB -> 330 MB). */
START_TEST(coord_silent_authed_closed) {
  const char *key = "silent-authed-secret";
  resihp__coord_opts_t co = {.replicas = 1,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)key,
                             .secret_len = strlen(key),
                             .silence_ms = 3000,
                             .hello_ms = 1000};
  resihp__coord_t *c;
  ck_assert_int_eq(resihp__coord_create(&co, &c), 0);
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", resihp__coord_port(c));
  long before = rss_bytes("VmRSS");
  pid_t p = fork();
  if (p == 0) {
    enum { N = 20, JUNK = 4 << 20 };
    resihp__wire_t w[N];
    int64_t authed[N];
    for (int i = 0; i < N; i++) {
      if (coord_open(ep, key, &w[i]))
        _exit(2);
      authed[i] = resihp__now_ms();
    }
    char *junk = malloc(JUNK);
    memset(junk, 'x', JUNK);
    memcpy(junk, "HELLO ", 6);
    int64_t dl = resihp__now_ms() + 15000; /* safety net only */
    for (int i = 0; i < N / 2; i++) {
      size_t off = 0;
      while (off < JUNK && resihp__now_ms() < dl) {
        ssize_t n = send(w[i].fd, junk + off, JUNK - off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
          off += (size_t)n;
          continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
          break; /* cut off */
        struct pollfd q = {.fd = w[i].fd, .events = POLLOUT};
        poll(&q, 1, 100);
      }
    }
    int bad = 0;
    for (int i = 0; i < N; i++) {
      if (!closed_by_peer(w[i].fd, dl)) {
        fprintf(stderr, "connection %d still open\n", i);
        bad = 1;
      } else if (i >= N / 2 && resihp__now_ms() - authed[i] < 1000) {
        fprintf(stderr, "connection %d closed before its deadline\n", i);
        bad = 1;
      }
    }
    _exit(bad);
  }
  int rc = pump_until_exit(c, p);
  long grew = rss_bytes("VmHWM") - before; /* while they were open */
  resihp__coord_destroy(c);
  fprintf(stderr, "coord_silent_authed_closed: the coordinator grew by %ld "
                  "KiB\n", grew >> 10);
  ck_assert_int_eq(rc, 0);
  ck_assert_msg(grew < (8 << 20), "the coordinator grew by %ld bytes", grew);
}
END_TEST

START_TEST(coord_drip_dropped) {
  const char *key = "drip-test-secret";
  char ep[64];
  resihp__coord_t *c = new_coord(1, key, 3000, ep, sizeof(ep));
  pid_t p = fork();
  if (p == 0) {
    int fd = resihp__wire_dial(ep, resihp__now_ms() + 5000);
    char b[256];
    int64_t safety = resihp__now_ms() + 30000;
    while (resihp__now_ms() < safety) {
      if (send(fd, "A", 1, MSG_NOSIGNAL) < 0)
        _exit(0);
      struct pollfd q = {.fd = fd, .events = POLLIN};
      if (poll(&q, 1, 100) > 0) {
        ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN))
          _exit(0); /* closed by the coordinator */
      }
    }
    _exit(1);
  }
  ck_assert_int_eq(pump_until_exit(c, p), 0);
  resihp__coord_destroy(c);
}
END_TEST

/* Catch-up: 60 idle connections to the replacement's catch-up port do
 * not keep its state from arriving. */
START_TEST(catchup_strangers_do_not_delay) {
  char out[8192], want[128];
  g_flood_catchup = 60;
  run_job(2, 0, 3, 1, out, sizeof(out));
  ck_assert_msg(g_flooded, "the catch-up port was never flooded");
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  ck_assert_msg(strstr(out, "replacement training again"), "%s", out);
  ck_assert_msg(strstr(out, "2 replicas agree"), "%s", out);
}
END_TEST

/* A replica of two ranks, M = 20000: the leader's address is flooded with
 * idle connections, and with authenticated ones that say nothing, before
 * its other rank comes (the leader's accept must not wait for them), and
 * every microbatch id reaches the ranks. */
START_TEST(leader_strangers_and_long_lists) {
  const char *key = "unit-test-secret-0123456789";
  g_mbs = 20000;
  g_steps = 3;
  g_K = 2;
  snprintf(secret_path, sizeof(secret_path), "/tmp/resihp-test-secret-l.%d",
           (int)getpid());
  FILE *f = fopen(secret_path, "w");
  fputs(key, f);
  fclose(f);
  chmod(secret_path, 0600);
  char ep[64];
  resihp__coord_t *c = new_coord(1, key, 10000, ep, sizeof(ep));
  setenv("TEST_COORD", ep, 1);
  unsetenv("PMIX_RANK");
  setenv("SLURM_NTASKS", "2", 1);
  pid_t pids[2];
  setenv("SLURM_PROCID", "0", 1);
  pids[0] = spawn_rank(0, -1);
  int64_t deadline = resihp__now_ms() + 40000;
  const char *lep = NULL;
  while (resihp__now_ms() < deadline &&
         (resihp__coord_replica_eps(c, 0, NULL, NULL, &lep) || !lep[0]))
    resihp__coord_poll(c, 20);
  ck_assert_msg(lep && lep[0], "the leader never said where it is");
  int idle[60];
  open_idle(lep, idle, 60);
  /* and 3 that authenticate and then say nothing: each held the leader
   * until its 60 s deadline before */
  resihp__wire_t mute[3];
  for (int i = 0; i < 3; i++) {
    resihp__wire_init(&mute[i], resihp__wire_dial(lep, resihp__now_ms() + 5000));
    ck_assert_int_eq(resihp__wire_auth_client(&mute[i], (const uint8_t *)key,
                                              strlen(key), "local",
                                              resihp__now_ms() + 10000),
                     0);
  }
  setenv("SLURM_PROCID", "1", 1);
  pids[1] = spawn_rank(0, -1);
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
  while (resihp__coord_state(c) == RESIHP__COORD_RUNNING &&
         resihp__now_ms() < deadline)
    resihp__coord_poll(c, 50);
  int state = resihp__coord_state(c);
  char out[8192], want[128];
  FILE *mem = fmemopen(out, sizeof(out), "w");
  resihp__coord_summary(c, mem, NULL);
  fclose(mem);
  for (int i = 0; i < 2; i++)
    kill(pids[i], SIGKILL);
  while (waitpid(-1, NULL, 0) > 0)
    ;
  for (int i = 0; i < 60; i++)
    close(idle[i]);
  for (int i = 0; i < 3; i++)
    resihp__wire_free(&mute[i]);
  resihp__coord_destroy(c);
  unlink(secret_path);
  ck_assert_int_eq(state, RESIHP__COORD_DONE);
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
}
END_TEST

/* M = 20000 and a replica dies: START lists (10000 ids each) and the
 * REASSIGN of the dead one's 10000 ids arrive whole; the sum is exact. */
START_TEST(job_long_lists_reassigned) {
  char out[8192], want[128];
  g_mbs = 20000;
  g_steps = 3;
  run_job(2, 1, 1, 0, out, sizeof(out));
  ck_assert_msg(strstr(out, expected(want, sizeof(want))), "%s", out);
  ck_assert_msg(strstr(out, "10000 microbatches reassigned"), "%s", out);
}
END_TEST

/* A line built by appends and printf: numbers of every sign and size,
 * growth from empty, and the line limit, which sticks and keeps the line
 * as it was. */
START_TEST(wire_buf_appends) {
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  int v[] = {0, -1, 7, INT_MAX, INT_MIN, 1000000};
  resihp__wire_buf_ints(&b, v, 6);
  resihp__wire_buf_put(&b, " ", 1);
  resihp__wire_buf_long(&b, LONG_MIN);
  resihp__wire_buf_printf(&b, " %s=%d", "x", 42);
  char want[160];
  snprintf(want, sizeof(want), "0:-1:7:%d:%d:1000000 %ld x=42", INT_MAX,
           INT_MIN, LONG_MIN);
  ck_assert_int_eq(b.err, 0);
  ck_assert_str_eq(b.s, want);
  ck_assert_uint_eq(b.len, strlen(want));
  /* printf past the room it has grows the line, many times over */
  for (int i = 0; i < 1000; i++)
    resihp__wire_buf_printf(&b, " %0100d", i);
  ck_assert_int_eq(b.err, 0);
  ck_assert_uint_eq(b.len, strlen(want) + 1000 * 101);
  ck_assert_uint_eq(strlen(b.s), b.len);
  resihp__wire_buf_free(&b);
  /* the line limit: one byte too many is refused and sticks */
  char *big = malloc(RESIHP__WIRE_LINE_MAX);
  ck_assert_ptr_nonnull(big);
  memset(big, 'a', RESIHP__WIRE_LINE_MAX);
  resihp__wire_buf_init(&b);
  resihp__wire_buf_put(&b, big, RESIHP__WIRE_LINE_MAX - 1);
  ck_assert_int_eq(b.err, 0);
  resihp__wire_buf_printf(&b, "%s", "bc");
  ck_assert_int_eq(b.err, RESIHP_ERANGE);
  ck_assert_uint_eq(b.len, RESIHP__WIRE_LINE_MAX - 1);
  ck_assert_uint_eq(strlen(b.s), b.len);
  resihp__wire_buf_long(&b, 5);
  ck_assert_uint_eq(b.len, RESIHP__WIRE_LINE_MAX - 1);
  resihp__wire_buf_free(&b);
  free(big);
}
END_TEST

/* More microbatches than a line can list: refused at join, clearly. */
START_TEST(too_many_microbatches_refused) {
  int max = resihp__wire_max_microbatches();
  ck_assert_int_eq(max, 165518); /* the number job.h and resihp_job.3 give */
  /* the longest list really fits, one more id would not */
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  resihp__wire_buf_printf(&b, "%*s", RESIHP__WIRE_LIST_HEADROOM - 37, "");
  int *ids = malloc(sizeof(int) * (size_t)max);
  for (int i = 0; i < max; i++)
    ids[i] = i;
  resihp__wire_buf_ints(&b, ids, max);
  ck_assert_int_eq(b.err, 0);
  free(ids);
  resihp__wire_buf_free(&b);
  resihp_job_opts_t o;
  resihp_job_opts_init(&o);
  o.microbatches = max + 1;
  o.steps = 1;
  o.coordinator = "127.0.0.1:1";
  o.replica = 0;
  resihp_job_t *job = NULL;
  ck_assert_int_eq(resihp_job_join(&o, &job), RESIHP_ERANGE);
  const char *key = "mbs-test-secret";
  char ep[64], line[256];
  resihp__coord_t *c = new_coord(1, key, 3000, ep, sizeof(ep));
  pid_t p = fork();
  if (p == 0) {
    char reply[128];
    snprintf(line, sizeof(line),
             "HELLO replica=0 ep=127.0.0.1:1 sep=127.0.0.1:2 mbs=%d steps=3",
             max + 1);
    int rc = coord_say(ep, key, line, reply, sizeof(reply));
    _exit(!rc && !strcmp(reply, "NO reason=too-many-microbatches") ? 0 : 1);
  }
  ck_assert_int_eq(pump_until_exit(c, p), 0);
  ck_assert_int_eq(resihp__coord_state(c), RESIHP__COORD_RUNNING);
  resihp__coord_destroy(c);
}
END_TEST

/* HELLOs with absurd or list-breaking fields are refused one by one; the
 * job is not hurt (before: steps=LONG_MAX made the job LOST). */
START_TEST(coord_bad_hello_refused) {
  const char *key = "hello-test-secret";
  char ep[64];
  resihp__coord_t *c = new_coord(2, key, 3000, ep, sizeof(ep));
  pid_t p = fork();
  if (p == 0) {
    static const char *const bad[] = {
        "HELLO replica=0 ep=127.0.0.1:1 sep=127.0.0.1:2 mbs=6 "
        "steps=9223372036854775807",
        "HELLO replica=0 ep=127.0.0.1:1,1@10.0.0.9:1 sep=127.0.0.1:2 mbs=6 "
        "steps=3",
        "HELLO replica=7 ep=127.0.0.1:1 sep=127.0.0.1:2 mbs=6 steps=3",
        "HELLO replica=0 ep=127.0.0.1:1 sep=127.0.0.1:2 mbs=0x6 steps=3",
        "HELLO replica=0 ep=127.0.0.1:1 sep=127.0.0.1:2 mbs=6 steps=3 "
        "node=a@b",
    };
    char reply[128];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
      if (coord_say(ep, key, bad[i], reply, sizeof(reply)) ||
          strcmp(reply, "NO reason=bad-hello"))
        _exit(1 + (int)i);
    if (coord_say(ep, key,
                  "HELLO replica=0 ep=127.0.0.1:1 sep=127.0.0.1:2 mbs=6 "
                  "steps=3",
                  reply, sizeof(reply)) ||
        strncmp(reply, "WELCOME ", 8))
      _exit(20);
    _exit(0);
  }
  ck_assert_int_eq(pump_until_exit(c, p), 0);
  ck_assert_int_ne(resihp__coord_state(c), RESIHP__COORD_LOST);
  resihp__coord_destroy(c);
}
END_TEST

/* Three scripted replicas start a step; replica 0 then claims, again and
 * again with new communicator epochs, that the others are gone. They are
 * alive, so nothing happens to them, and its ninth claim is refused
 * (before: the first claim evicted both, the 65th lost the job). */
START_TEST(coord_rogue_recover_refused) {
  const char *key = "rogue-test-secret";
  char ep[64];
  resihp__coord_t *c = new_coord(3, key, 600000, ep, sizeof(ep));
  int up[2], down[2];
  ck_assert_int_eq(pipe(up), 0);
  ck_assert_int_eq(pipe(down), 0);
  pid_t p = fork();
  if (p == 0) {
    resihp__wire_t w[3];
    char line[256], reply[4096];
    long epoch = -1;
    for (int i = 0; i < 3; i++) {
      snprintf(line, sizeof(line),
               "HELLO replica=%d ep=127.0.0.1:%d sep=127.0.0.1:%d mbs=6 "
               "steps=5",
               i, 100 + i, 200 + i);
      if (coord_open(ep, key, &w[i]) ||
          resihp__wire_send(&w[i], line, resihp__now_ms() + 5000) ||
          coord_reply(&w[i], reply, sizeof(reply)) ||
          strncmp(reply, "WELCOME ", 8))
        _exit(1);
    }
    for (int i = 0; i < 3; i++)
      if (resihp__wire_send(&w[i], "BEGIN step=-1", resihp__now_ms() + 5000))
        _exit(2);
    for (int i = 0; i < 3; i++)
      if (coord_reply(&w[i], reply, sizeof(reply)) ||
          strncmp(reply, "GO ", 3) ||
          resihp__wire_get_long(reply, "epoch", &epoch))
        _exit(3);
    snprintf(line, sizeof(line), "READY epoch=%ld", epoch);
    for (int i = 0; i < 3; i++)
      if (resihp__wire_send(&w[i], line, resihp__now_ms() + 5000))
        _exit(4);
    for (int i = 0; i < 3; i++)
      if (coord_reply(&w[i], reply, sizeof(reply)) ||
          strncmp(reply, "START ", 6))
        _exit(5);
    for (int k = 1; k <= 9; k++) {
      snprintf(line, sizeof(line), "RECOVER step=0 cepoch=%d view=0", k);
      if (resihp__wire_send(&w[0], line, resihp__now_ms() + 5000))
        _exit(6);
    }
    if (coord_reply(&w[0], reply, sizeof(reply)) ||
        strcmp(reply, "NO reason=too-many-recovers"))
      _exit(7);
    char b = 1;
    if (write(up[1], &b, 1) != 1 || read(down[0], &b, 1) != 1)
      _exit(8);
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  struct pollfd q = {.fd = up[0], .events = POLLIN};
  int64_t deadline = resihp__now_ms() + 60000; /* safety net only */
  while (poll(&q, 1, 0) == 0 && resihp__now_ms() < deadline)
    resihp__coord_poll(c, 20);
  ck_assert_int_eq(resihp__coord_members(c), 3);
  ck_assert_int_eq(resihp__coord_connected(c, 1), 1);
  ck_assert_int_eq(resihp__coord_connected(c, 2), 1);
  ck_assert_int_eq(resihp__coord_state(c), RESIHP__COORD_RUNNING);
  ck_assert_ptr_null(resihp__coord_check(c));
  char b = 1;
  ck_assert_int_eq(write(down[1], &b, 1), 1);
  ck_assert_int_eq(pump_until_exit(c, p), 0);
  close(up[0]);
  close(down[1]);
  resihp__coord_destroy(c);
}
END_TEST

/* A man in the middle that alters (mode 0) or adds (mode 1) a line after
 * the handshake: the coordinator refuses it and drops the connection. */
static void proxy_main(int lfd, const char *to, int mode) {
  int a = -1;
  while (a < 0)
    a = accept(lfd, NULL, NULL);
  int b = resihp__wire_dial(to, resihp__now_ms() + 5000);
  int newlines = 0, done = 0;
  char buf[8192];
  for (;;) {
    struct pollfd q[2] = {{.fd = a, .events = POLLIN},
                          {.fd = b, .events = POLLIN}};
    if (poll(q, 2, 10000) <= 0)
      _exit(0);
    for (int i = 0; i < 2; i++) {
      if (!q[i].revents)
        continue;
      ssize_t n = recv(q[i].fd, buf, sizeof(buf) - 64, MSG_DONTWAIT);
      if (n <= 0)
        _exit(0);
      int dst = i ? a : b;
      if (!i && newlines >= 1 && !done) {
        done = 1; /* the first line after the handshake */
        char *at = memmem(buf, (size_t)n, "status=fail", 11);
        if (mode == 0 && at)
          memcpy(at, "status=pass", 11);
        if (mode == 1) {
          static const char inj[] = "SPARE node=inj status=pass summary=-\n";
          send(dst, inj, sizeof(inj) - 1, MSG_NOSIGNAL);
        }
      }
      if (!i)
        for (ssize_t k = 0; k < n; k++)
          newlines += buf[k] == '\n';
      send(dst, buf, (size_t)n, MSG_NOSIGNAL);
    }
  }
}

START_TEST(coord_tampering_refused) {
  const char *key = "mitm-test-secret";
  char ep[64];
  resihp__coord_t *c = new_coord(1, key, 3000, ep, sizeof(ep));
  for (int mode = 0; mode < 2; mode++) {
    int pport = 0;
    int lfd = resihp__wire_listen("127.0.0.1", 0, &pport);
    ck_assert_int_ge(lfd, 0);
    int fl = fcntl(lfd, F_GETFL);
    fcntl(lfd, F_SETFL, fl & ~O_NONBLOCK);
    pid_t px = fork();
    if (px == 0)
      proxy_main(lfd, ep, mode);
    close(lfd);
    char pep[64];
    snprintf(pep, sizeof(pep), "127.0.0.1:%d", pport);
    pid_t p = fork();
    if (p == 0) {
      char reply[128];
      int rc = coord_say(pep, key, "SPARE node=px status=fail summary=bad",
                         reply, sizeof(reply));
      /* refused: no SPARE_OK ever comes */
      _exit(rc == 0 && !strncmp(reply, "SPARE_OK", 8) ? 1 : 0);
    }
    ck_assert_int_eq(pump_until_exit(c, p), 0);
    kill(px, SIGKILL);
    waitpid(px, NULL, 0);
    long regs = -1;
    ck_assert_int_eq(resihp__coord_spare_state(c, "px", &regs),
                     RESIHP__SPARE_CHECKING);
    ck_assert_int_eq(regs, 0);
    ck_assert_int_eq(resihp__coord_spare_state(c, "inj", &regs),
                     RESIHP__SPARE_CHECKING);
    ck_assert_int_eq(regs, 0);
  }
  resihp__coord_destroy(c);
}
END_TEST

/* Raw data after a line (a state, an accumulator) carries a tag of its
 * own: one altered byte and it is refused. */
START_TEST(wire_data_tagged) {
  static const uint8_t key[] = "data-key";
  uint8_t data[1000], got[1000], stream[2000];
  for (size_t i = 0; i < sizeof(data); i++)
    data[i] = (uint8_t)(i * 7);
  for (int alter = 0; alter < 2; alter++) {
    int a[2], b[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, a), 0);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, b), 0);
    resihp__wire_t tx, rx;
    resihp__wire_init(&tx, a[1]);
    resihp__wire_init(&rx, b[0]);
    resihp__msgauth_init(&tx.auth, key, 8, "state", "ns", 2, "nc", 2, 1);
    resihp__msgauth_init(&rx.auth, key, 8, "state", "ns", 2, "nc", 2, 0);
    tx.sealed = rx.sealed = 1;
    ck_assert_int_eq(resihp__wire_send_data(&tx, data, sizeof(data),
                                            resihp__now_ms() + 3000),
                     0);
    /* the path: what was sent, maybe with one byte changed */
    ssize_t n = recv(a[0], stream, sizeof(stream), 0);
    ck_assert_int_eq(n, (ssize_t)sizeof(data) + RESIHP__MAC_LEN);
    if (alter)
      stream[500] ^= 1;
    ck_assert_int_eq(send(b[1], stream, (size_t)n, 0), n);
    ck_assert_int_eq(
        resihp__wire_recv_data(&rx, got, sizeof(got), resihp__now_ms() + 3000),
        alter ? RESIHP_EAUTH : 0);
    resihp__wire_free(&tx);
    resihp__wire_free(&rx);
    close(a[0]);
    close(b[1]);
  }
}
END_TEST

/* The secret file: only a regular file of ours that nobody else may
 * touch, and never through a symbolic link. */
START_TEST(secret_file_checks) {
  char path[128], link[140];
  snprintf(path, sizeof(path), "/tmp/resihp-test-sf.%d", (int)getpid());
  snprintf(link, sizeof(link), "%s.link", path);
  unlink(path);
  unlink(link);
  FILE *f = fopen(path, "w");
  fputs("s3cret", f);
  fclose(f);
  uint8_t *s = NULL;
  size_t n = 0;
  chmod(path, 0644);
  ck_assert_int_eq(resihp__wire_read_secret(path, &s, &n), RESIHP_EAUTH);
  chmod(path, 0640);
  ck_assert_int_eq(resihp__wire_read_secret(path, &s, &n), RESIHP_EAUTH);
  chmod(path, 0600);
  ck_assert_int_eq(resihp__wire_read_secret(path, &s, &n), 0);
  ck_assert_int_eq(n, 6);
  ck_assert_int_eq(memcmp(s, "s3cret", 6), 0);
  free(s);
  ck_assert_int_eq(symlink(path, link), 0);
  ck_assert_int_lt(resihp__wire_read_secret(link, &s, &n), 0);
  ck_assert_int_lt(resihp__wire_read_secret("/tmp", &s, &n), 0);
  unlink(link);
  unlink(path);
  if (geteuid() == 0) {
    /* root may test ownership too: a file of someone else's */
    f = fopen(path, "w");
    fputs("s3cret", f);
    fclose(f);
    chmod(path, 0600);
    ck_assert_int_eq(chown(path, 65534, 65534), 0);
    ck_assert_int_eq(resihp__wire_read_secret(path, &s, &n), RESIHP_EAUTH);
    unlink(path);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("recovery");
  TCase *tc = tcase_create("specs");
  tcase_add_test(tc, inject_specs);
  tcase_add_test(tc, inject_slow_specs);
  tcase_add_test(tc, wire_auth);
  tcase_add_test(tc, probe_results_watch);
  suite_add_tcase(s, tc);
  tc = tcase_create("setupkill");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, replacement_killed_in_setup, 0, 2);
  tcase_add_test(tc, frozen_coordinator_is_waiting);
  suite_add_tcase(s, tc);
  tc = tcase_create("jobs");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, job_without_failure);
  tcase_add_test(tc, job_listens_where_it_says);
  tcase_add_test(tc, job_rank_dies_no_spare);
  tcase_add_test(tc, job_rank_dies_replaced);
  tcase_add_test(tc, job_slow_rank_stretches_samples);
  tcase_add_test(tc, job_wrong_secret_refused);
  tcase_add_test(tc, job_probe_failure_replaced);
  tcase_add_test(tc, spare_registry);
  tcase_add_test(tc, spare_burnin_suspect);
  suite_add_tcase(s, tc);
  tc = tcase_create("shards");
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, shards_without_failure);
  tcase_add_test(tc, shards_kill_in_one_group_aborts_all);
  tcase_add_test(tc, shards_replaced_per_shard_catchup);
  tcase_add_test(tc, shards_disagree_on_k_refused);
  tcase_add_test(tc, shards_state_mismatch_refused);
  tcase_add_loop_test(tc, job_abort_stops_run, 0, 2);
  suite_add_tcase(s, tc);
  tc = tcase_create("hardening");
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, secret_file_checks);
  tcase_add_test(tc, wire_data_tagged);
  tcase_add_test(tc, coord_strangers_do_not_delay);
  tcase_add_test(tc, coord_drip_dropped);
  tcase_add_test(tc, coord_silent_authed_closed);
  tcase_add_test(tc, catchup_strangers_do_not_delay);
  tcase_add_test(tc, leader_strangers_and_long_lists);
  tcase_add_test(tc, job_long_lists_reassigned);
  tcase_add_test(tc, wire_buf_appends);
  tcase_add_test(tc, too_many_microbatches_refused);
  tcase_add_test(tc, coord_bad_hello_refused);
  tcase_add_test(tc, coord_rogue_recover_refused);
  tcase_add_test(tc, coord_tampering_refused);
  tcase_add_test(tc, coord_abort_reason_checked);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return run_suite(suite());
}
