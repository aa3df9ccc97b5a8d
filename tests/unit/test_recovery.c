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
  ck_assert_int_eq(resihp__inject_parse("", v, 8, &n, err, sizeof(err)), 0);
  ck_assert_int_eq(n, 0);
  const char *bad[] = {"kill-rank",        "kill-rank:0",    "explode:0@1",
                       "kill-rank:x@1",    "kill-rank:0@-3", "kill-rank:0@1,",
                       "kill-rank:0@soon", ",kill-rank:0@1"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    ck_assert_int_eq(resihp__inject_parse(bad[i], v, 8, &n, err, sizeof(err)),
                     RESIHP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "KIND:REPLICA@STEP"));
  }
}
END_TEST

/* Server side of a handshake on fd through the non-blocking machine. */
static int serve_handshake(const uint8_t *key, size_t klen, int fd,
                           resihp__wire_t *out) {
  resihp__wire_hs_t *h;
  ck_assert_int_eq(resihp__wire_hs_create(key, klen, "coord", 4, 3000, &h), 0);
  ck_assert_int_eq(resihp__wire_hs_add(h, fd), 0);
  int rc = RESIHP_EAUTH;
  while (resihp__wire_hs_pending(h)) {
    struct pollfd p[4];
    int n = resihp__wire_hs_fds(h, p, 4);
    poll(p, (nfds_t)n, resihp__wire_hs_wait_ms(h, 1000));
    if (resihp__wire_hs_next(h, out) == 1) {
      rc = 0;
      break;
    }
  }
  long refused = 0;
  resihp__wire_hs_stats(h, &refused, NULL);
  if (rc)
    ck_assert_int_eq(refused, 1);
  resihp__wire_hs_destroy(h);
  return rc;
}

/* Mutual authentication, then every line tagged: a line altered or
 * injected after the handshake is refused. */
START_TEST(wire_auth) {
  const uint8_t k1[] = "secret-one", k2[] = "secret-two";
  for (int wrong = 0; wrong < 2; wrong++) {
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid_t p = fork();
    if (p == 0) {
      close(sv[0]);
      resihp__wire_t w;
      resihp__wire_init(&w, sv[1]);
      int rc = resihp__wire_auth_client(&w, wrong ? k2 : k1, 10, "coord",
                                        resihp__now_ms() + 3000);
      if (!rc)
        rc = resihp__wire_send(&w, "HELLO a=1", resihp__now_ms() + 3000);
      /* an injected line without a tag, then one with a stale tag */
      if (!rc)
        rc = send(sv[1], "GO step=1\n", 10, 0) == 10 ? 0 : 1;
      _exit(rc == 0 ? 0 : 1);
    }
    close(sv[1]);
    resihp__wire_t w;
    resihp__wire_init(&w, -1);
    int rc = serve_handshake(k1, 10, sv[0], &w);
    int st;
    waitpid(p, &st, 0);
    if (wrong) {
      ck_assert_int_eq(rc, RESIHP_EAUTH);
      ck_assert_int_ne(WEXITSTATUS(st), 0);
      continue;
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    char line[64];
    ck_assert_int_eq(resihp__wire_recv(&w, line, sizeof(line),
                                       resihp__now_ms() + 3000),
                     0);
    ck_assert_str_eq(line, "HELLO a=1");
    ck_assert_int_eq(resihp__wire_recv(&w, line, sizeof(line),
                                       resihp__now_ms() + 3000),
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

/* A rank: its "model" is a vector of int64; microbatch mb of step s adds a
 * known pattern, so the final state is known exactly. */
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
  if (die_at >= 0)
    snprintf(inj, sizeof(inj), "kill-rank:%d@%d", replica, die_at);
  o.inject = inj;
  resihp_job_t *job;
  if (resihp_job_join(&o, &job))
    return 10;
  int64_t state[NSTATE] = {0}, acc[NSTATE];
  resihp_job_set_state(job, state, sizeof(state));
  resihp_job_step_t st;
  int rc;
  while ((rc = resihp_job_begin_step(job, &st)) == 0 && !st.done) {
    memset(acc, 0, sizeof(acc));
    usleep(10000); /* a step takes time: a replacement can join */
    for (int i = 0; i < st.nmbs; i++) {
      for (int k = 0; k < NSTATE; k++)
        acc[k] += (st.step + 1) * 1000 + st.mbs[i] * (k + 1);
      resihp_job_report_microbatch(job, st.mbs[i], 100, 2000, 2, 0.001);
    }
    while ((rc = resihp_job_allreduce(job, acc, NSTATE)) == RESIHP_EREASSIGNED)
      for (int i = 0; i < st.nextra; i++)
        for (int k = 0; k < NSTATE; k++)
          acc[k] += (st.step + 1) * 1000 + st.extra[i] * (k + 1);
    if (rc)
      return 11;
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
  resihp_job_finish(job, res);
  resihp_job_destroy(job);
  return 0;
}

static const char *expected(char *buf, size_t len) {
  int64_t state[NSTATE] = {0};
  for (int s = 0; s < STEPS; s++)
    for (int k = 0; k < NSTATE; k++) {
      int64_t a = 0;
      for (int mb = 0; mb < M; mb++)
        a += (s + 1) * 1000 + mb * (k + 1);
      state[k] = state[k] * 3 + a;
    }
  snprintf(buf, len, "%lld.%lld", (long long)state[0],
           (long long)state[NSTATE - 1]);
  return buf;
}

typedef struct {
  int R;
  pid_t pids[8];
  int failed[8];
  int replaced[8];
  int allow_replace;
} harness_t;

/* die_at PROBE_FAILS: the rank's node failed a periodic probe before it
 * started (its results file holds a failing periodic block). */
#define PROBE_FAILS (-2)
static char probe_path[128];

static pid_t spawn_rank(int r, int die_at) {
  pid_t p = fork();
  if (p == 0) {
    if (die_at == PROBE_FAILS)
      setenv("RESIHP_PROBE_RESULTS", probe_path, 1);
    _exit(rank_main(r, die_at == PROBE_FAILS ? -1 : die_at));
  }
  return p;
}

static void on_failed(void *ud, int r, const char *node, long j, long s,
                      const char *why) {
  (void)node;
  (void)j;
  (void)s;
  (void)why;
  harness_t *h = ud;
  h->failed[r]++;
  kill(h->pids[r], SIGKILL);
  if (h->allow_replace && !h->replaced[r]) {
    h->replaced[r] = 1;
    h->pids[r] = spawn_rank(r, -1);
  }
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
  harness_t h = {.R = R, .allow_replace = replace};
  resihp__coord_opts_t co = {.replicas = R,
                             .bind_host = "127.0.0.1",
                             .secret =
                                 (const uint8_t *)"unit-test-secret-0123456789",
                             .secret_len = 27,
                             .silence_ms = 3000,
                             .on_failed = on_failed,
                             .ud = &h};
  resihp__coord_t *c;
  ck_assert_int_eq(resihp__coord_create(&co, &c), 0);
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", resihp__coord_port(c));
  setenv("TEST_COORD", ep, 1);
  for (int r = 0; r < R; r++)
    h.pids[r] = spawn_rank(r, r == victim ? die_at : -1);
  int64_t deadline = resihp__now_ms() + 40000;
  while (resihp__coord_state(c) == RESIHP__COORD_RUNNING &&
         resihp__now_ms() < deadline) {
    resihp__coord_poll(c, 50);
    while (waitpid(-1, NULL, WNOHANG) > 0)
      ;
  }
  int state = resihp__coord_state(c);
  FILE *mem = fmemopen(out, outlen, "w");
  int agree = resihp__coord_summary(c, mem, NULL);
  fclose(mem);
  for (int r = 0; r < R; r++)
    kill(h.pids[r], SIGKILL);
  while (waitpid(-1, NULL, 0) > 0)
    ;
  resihp__coord_destroy(c);
  unlink(secret_path);
  ck_assert_int_eq(state, RESIHP__COORD_DONE);
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

START_TEST(spare_registry) {
  const char *key = "spare-test-secret";
  resihp__coord_opts_t co = {.replicas = 1,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)key,
                             .secret_len = strlen(key),
                             .silence_ms = 3000};
  resihp__coord_t *c;
  ck_assert_int_eq(resihp__coord_create(&co, &c), 0);
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
  int st = 0;
  while (waitpid(p, &st, WNOHANG) == 0)
    resihp__coord_poll(c, 20);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
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

static Suite *suite(void) {
  Suite *s = suite_create("recovery");
  TCase *tc = tcase_create("specs");
  tcase_add_test(tc, inject_specs);
  tcase_add_test(tc, wire_auth);
  tcase_add_test(tc, probe_results_watch);
  suite_add_tcase(s, tc);
  tc = tcase_create("jobs");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, job_without_failure);
  tcase_add_test(tc, job_rank_dies_no_spare);
  tcase_add_test(tc, job_rank_dies_replaced);
  tcase_add_test(tc, job_wrong_secret_refused);
  tcase_add_test(tc, job_probe_failure_replaced);
  tcase_add_test(tc, spare_registry);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
