/* SPDX-License-Identifier: BSD-3-Clause */
/* Coordinator failover, the replicas' side (recovery/job_link.c): real
 * forked ranks train against a coordinator that runs in its own child
 * process on a listening socket the test made (use_listen_fd, as the
 * keeper does) and mirrors its state into a pipe (on_mirror, one record a
 * snapshot). The test SIGKILLs that process at chosen moments and starts a
 * new one from the last complete record (resihp__coord_restore) on the
 * same socket: in the middle of a free run, at step boundaries (lockstep:
 * every step asks the coordinator), and while a replica that was killed
 * too is being recovered. Every run must finish with the result of a
 * failure-free run, bit for bit, and a ledger with every step exactly
 * once, in order.
 *
 * Events, not time: a rank of the hooked replica writes its pid to a pipe
 * at the start of a chosen step and waits there until the test answers,
 * so the kill lands where it is meant to however fast the steps go.
 *
 * --bench: how long a SIGKILLed coordinator stalls a free run (the
 * longest step boundary of a replica, with and without a failover). */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/recovery/job_internal.h"
#include "../../libresihp/transport/mesh.h"
#include "rank_group.h"
#include "train_model.h"

#include <resihp.h>

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXR 3 /* replicas */
#define MAXK 2 /* ranks per replica */
#define KEY "failover-test-secret-0123456789"
#define REC_SNAP 'S'
#define REC_END 'E'

typedef struct {
  int R, K;
  long steps;
  int lockstep;
  int hook_r; /* replica whose rank 0 waits at hook_step (-1: none) */
  long hook_step;
  int kill_coord; /* at the hook: SIGKILL the coordinator */
  int kill_r;     /* ... and this replica too (-1: none) */
  /* the hooked rank goes on before the new coordinator is started (it may
   * reach the boundary while there is none) */
  int release_first;
  /* assignment by predicted cost, the ranks' data loader tm_workload */
  int cost;
  /* the new coordinator comes back elsewhere, as a standby on another
   * node takes over: on a second socket, the first one closed. The ranks
   * are told only the first address; the first coordinator tells them
   * both (COORDS), the new one its own. */
  int elsewhere;
} plan_t;

static char g_secret[128], g_ledger[128], g_coord[64], g_both[160];
/* the coordinator's port, outlives coordinators; the second one
 * (elsewhere) and the one the next coordinator takes */
static resihp__wire_listener_t g_lis, g_lis2, *g_use;
static int g_compute_us = 2000;
static int g_hook_out[2], g_hook_in[2]; /* rank -> test, test -> rank */
static int g_stat[2];                   /* the hooked rank's boundary times */
static pid_t g_pids[MAXR][MAXK];
static int g_K;

/* ---- the ranks ---- */

static int rank_main(const plan_t *p, int replica) {
  resihp_job_opts_t o;
  uint64_t m[NB] = {0};
  resihp_job_buf_t sb;
  tm_job_opts(&o, p->steps, g_coord, replica, g_secret, m, &sb);
  resihp_job_t *job;
  if (resihp_job_join(&o, &job))
    return 10;
  if (p->cost && resihp_job_set_workload_fn(job, tm_workload, NULL))
    return 15;
  int sh = resihp_job_shard(job);
  int hooked = replica == p->hook_r && sh == 0;
  resihp_job_step_t st;
  int rc;
  int64_t worst = 0, t = resihp__now_ms();
  while ((rc = resihp_job_begin_step(job, &st)) == 0 && !st.done) {
    int64_t b = resihp__now_ms() - t; /* end_step + begin_step */
    if (st.step > 1 && b > worst)
      worst = b;
    if (hooked && st.step == p->hook_step) {
      pid_t me = getpid();
      char c;
      if (write(g_hook_out[1], &me, sizeof(me)) != sizeof(me) ||
          read(g_hook_in[0], &c, 1) != 1)
        return 40;
    }
    if (tm_step_wl(job, &st, sh, m, g_compute_us, p->cost))
      return 11;
    t = resihp__now_ms();
    if (resihp_job_end_step(job))
      return 12;
  }
  if (rc)
    return 13;
  /* before FINISH: the test ends the ranks once the coordinator is done */
  if (hooked && write(g_stat[1], &worst, sizeof(worst)) != sizeof(worst))
    return 14;
  char res[64];
  tm_result_text(m, res, sizeof(res));
  resihp_job_finish(job, res);
  resihp_job_destroy(job);
  return 0;
}

static int rank_entry(void *ud, int r) {
  /* the coordinators' sockets are none of a rank's business */
  resihp__wire_listener_close(&g_lis);
  resihp__wire_listener_close(&g_lis2);
  return rank_main(ud, r);
}

static void kill_replica(int r) {
  for (int k = 0; k < g_K; k++)
    if (g_pids[r][k] > 0)
      kill(g_pids[r][k], SIGKILL);
}

/* ---- the coordinator, in its own process ---- */

typedef struct {
  int fd; /* the mirror pipe */
} coord_ctx_t;

static void write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      _exit(30);
    p += w;
    n -= (size_t)w;
  }
}

static void mirror_record(int fd, char type, const char *text, size_t len) {
  uint32_t n = (uint32_t)len;
  write_all(fd, &type, 1);
  write_all(fd, &n, sizeof(n));
  write_all(fd, text, len);
}

static void on_mirror(void *ud, const char *snap, size_t len) {
  mirror_record(((coord_ctx_t *)ud)->fd, REC_SNAP, snap, len);
}

static void on_failed(void *ud, int r, const char *node, long j, long s,
                      const char *why) {
  (void)ud, (void)node, (void)j, (void)s, (void)why;
  kill_replica(r); /* never alive twice; no replacement */
}

/* The ledger's complete lines. */
static long ledger_lines(void) {
  FILE *f = fopen(g_ledger, "r");
  long n = 0;
  int ch;
  while (f && (ch = fgetc(f)) != EOF)
    n += ch == '\n';
  if (f)
    fclose(f);
  return n;
}

/* The child: a coordinator (restored from snap when given) until the run
 * ends; then its summary as the last record. */
static void coord_main(const plan_t *p, int fd, const char *snap, size_t len) {
  FILE *ledger = fopen(g_ledger, "a");
  if (!ledger)
    _exit(31);
  setvbuf(ledger, NULL, _IOLBF, 0);
  coord_ctx_t ctx = {fd};
  resihp__coord_opts_t co = {.replicas = p->R,
                             .secret = (const uint8_t *)KEY,
                             .secret_len = strlen(KEY),
                             .silence_ms = 5000,
                             .on_failed = on_failed,
                             .on_mirror = on_mirror,
                             .ud = &ctx,
                             .ledger = ledger,
                             .swap_cost_s = -1,
                             .lockstep = p->lockstep,
                             .assign = p->cost ? RESIHP_ASSIGN_COST : 0,
                             .listener = g_use};
  resihp__coord_t *c;
  int rc = snap ? resihp__coord_restore(&co, snap, len, ledger_lines(), &c)
                : resihp__coord_create(&co, &c);
  if (rc)
    _exit(32);
  if (p->elsewhere) { /* both addresses, or the new one's own */
    char own[64];
    snprintf(own, sizeof(own), "127.0.0.1:%d", g_use->port);
    resihp__coord_set_coords(c, snap ? own : g_both);
  }
  int64_t deadline = resihp__now_ms() + 120000; /* safety net */
  while (resihp__coord_state(c) == RESIHP__COORD_RUNNING &&
         resihp__now_ms() < deadline)
    resihp__coord_poll(c, 20);
  char *sum = NULL;
  size_t sl = 0;
  FILE *mem = open_memstream(&sum, &sl);
  resihp__coord_summary(c, mem, NULL);
  fprintf(mem, "\nsteps=%ld\n", resihp__coord_step(c));
  fclose(mem);
  mirror_record(fd, REC_END, sum, sl);
  int state = resihp__coord_state(c);
  resihp__coord_destroy(c);
  fclose(ledger);
  _exit(state == RESIHP__COORD_DONE ? 0 : 33);
}

/* ---- the test: one run ---- */

typedef struct {
  pid_t pid;
  int rfd;
  char *buf; /* bytes read, not yet a complete record */
  size_t len, cap;
  char *snap; /* the last complete snapshot */
  size_t snap_len;
  long nsnaps;
  char *summary; /* the end record */
} coord_proc_t;

static void start_coord(const plan_t *p, coord_proc_t *cp) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    coord_main(p, fds[1], cp->snap, cp->snap_len);
  }
  close(fds[1]);
  cp->pid = pid;
  cp->rfd = fds[0];
  cp->len = 0; /* a cut record of the last one is no record */
}

/* Take the complete records from buf. */
static void parse_records(coord_proc_t *cp) {
  size_t off = 0;
  for (;;) {
    uint32_t n;
    if (cp->len - off < 1 + sizeof(n))
      break;
    memcpy(&n, cp->buf + off + 1, sizeof(n));
    if (cp->len - off - 1 - sizeof(n) < n)
      break;
    const char *text = cp->buf + off + 1 + sizeof(n);
    char **to = cp->buf[off] == REC_SNAP ? &cp->snap : &cp->summary;
    free(*to);
    *to = malloc(n + 1);
    ck_assert_ptr_nonnull(*to);
    memcpy(*to, text, n);
    (*to)[n] = '\0';
    if (cp->buf[off] == REC_SNAP) {
      cp->snap_len = n;
      cp->nsnaps++;
    }
    off += 1 + sizeof(n) + n;
  }
  memmove(cp->buf, cp->buf + off, cp->len - off);
  cp->len -= off;
}

/* Read what the pipe has (until EOF when block): 0 at EOF. */
static int read_pipe(coord_proc_t *cp, int block) {
  for (;;) {
    if (cp->cap - cp->len < 65536) {
      cp->cap = cp->cap * 2 + 65536;
      cp->buf = realloc(cp->buf, cp->cap);
      ck_assert_ptr_nonnull(cp->buf);
    }
    struct pollfd pf = {cp->rfd, POLLIN, 0};
    if (!block && poll(&pf, 1, 0) <= 0)
      return 1;
    ssize_t n = read(cp->rfd, cp->buf + cp->len, cp->cap - cp->len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return 0;
    cp->len += (size_t)n;
    parse_records(cp);
  }
}

/* SIGKILL the coordinator and keep its last complete record. */
static void kill_coord(coord_proc_t *cp) {
  kill(cp->pid, SIGKILL);
  ck_assert_int_eq(waitpid(cp->pid, NULL, 0), cp->pid);
  read_pipe(cp, 1);
  close(cp->rfd);
  ck_assert_msg(cp->snap, "no snapshot before the kill");
}

typedef struct {
  char summary[16384];
  long steps;
  int ledger_ok;
  long owned[MAXR], lost_at[MAXR];
  int64_t worst_ms; /* the hooked rank's longest boundary */
  double seconds;
  long nsnaps;
} outcome_t;

static void run(const plan_t *p, outcome_t *out) {
  memset(out, 0, sizeof(*out));
  memset(g_pids, 0, sizeof(g_pids));
  g_K = p->K;
  snprintf(g_secret, sizeof(g_secret), "/tmp/resihp-failover-secret.%d",
           (int)getpid());
  snprintf(g_ledger, sizeof(g_ledger), "/tmp/resihp-failover-ledger.%d",
           (int)getpid());
  FILE *sf = fopen(g_secret, "w");
  ck_assert_ptr_nonnull(sf);
  fputs(KEY, sf);
  fclose(sf);
  chmod(g_secret, 0600);
  unlink(g_ledger);
  ck_assert_int_eq(resihp__wire_listener_open("127.0.0.1", 0, p->R, &g_lis), 0);
  ck_assert_int_eq(resihp__wire_listener_open("127.0.0.1", 0, p->R, &g_lis2),
                   0);
  g_use = &g_lis;
  snprintf(g_coord, sizeof(g_coord), "127.0.0.1:%d", g_lis.port);
  snprintf(g_both, sizeof(g_both), "127.0.0.1:%d/127.0.0.1:%d", g_lis.port,
           g_lis2.port);
  ck_assert_int_eq(pipe(g_hook_out), 0);
  ck_assert_int_eq(pipe(g_hook_in), 0);
  ck_assert_int_eq(pipe(g_stat), 0);
  fcntl(g_hook_out[0], F_SETFL, O_NONBLOCK);
  fcntl(g_stat[0], F_SETFL, O_NONBLOCK);
  /* a window far beyond any failover here: only a safety net */
  setenv("RESIHP_FAILOVER_MS", "60000", 1);
  for (int r = 0; r < p->R; r++)
    tm_spawn(p->K, r, g_pids[r], rank_entry, (void *)p);
  coord_proc_t cp = {0};
  start_coord(p, &cp);
  int64_t t0 = resihp__now_ms(), deadline = t0 + 150000; /* safety net */
  int ended = 0, coord_rc = -1, coord_reaped = 0, coord_st = 0;
  while (!ended && resihp__now_ms() < deadline) {
    struct pollfd pf[2] = {{cp.rfd, POLLIN, 0}, {g_hook_out[0], POLLIN, 0}};
    poll(pf, 2, 50);
    if (!read_pipe(&cp, 0)) {
      int st = coord_st;
      if (!coord_reaped)
        ck_assert_int_eq(waitpid(cp.pid, &st, 0), cp.pid);
      coord_rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      ended = 1;
    }
    pid_t who;
    if (read(g_hook_out[0], &who, sizeof(who)) == sizeof(who)) {
      if (p->kill_r >= 0)
        kill_replica(p->kill_r);
      if (p->kill_coord)
        kill_coord(&cp);
      if (p->release_first)
        ck_assert_int_eq(write(g_hook_in[1], "g", 1), 1);
      if (p->kill_coord && p->elsewhere) {
        /* nobody listens at the first address any more: refused there */
        resihp__wire_listener_close(&g_lis);
        g_use = &g_lis2;
      }
      if (p->kill_coord) { /* a new one from the record */
        start_coord(p, &cp);
        coord_reaped = 0;
      }
      if (!p->release_first)
        ck_assert_int_eq(write(g_hook_in[1], "g", 1), 1);
    }
    /* the ranks that ended; the coordinator too, if it just did (its
     * status is kept for when its pipe says so) */
    pid_t x;
    int xst;
    while (!coord_reaped && (x = waitpid(-1, &xst, WNOHANG)) > 0)
      if (x == cp.pid) {
        coord_reaped = 1;
        coord_st = xst;
      }
  }
  out->seconds = (double)(resihp__now_ms() - t0) / 1000.0;
  out->nsnaps = cp.nsnaps;
  for (int r = 0; r < p->R; r++)
    kill_replica(r);
  if (!ended)
    kill(cp.pid, SIGKILL);
  while (waitpid(-1, NULL, 0) > 0)
    ;
  if (read(g_stat[0], &out->worst_ms, sizeof(out->worst_ms)) !=
      sizeof(out->worst_ms))
    out->worst_ms = -1;
  snprintf(out->summary, sizeof(out->summary), "%s",
           cp.summary ? cp.summary : "(no summary)");
  const char *st = strstr(out->summary, "\nsteps=");
  out->steps = st ? atol(st + 7) : -1;
  FILE *lf = fopen(g_ledger, "r");
  out->ledger_ok =
      lf && tm_check_ledger(lf, p->R, out->steps, out->owned, out->lost_at);
  if (lf)
    fclose(lf);
  free(cp.buf);
  free(cp.snap);
  free(cp.summary);
  close(cp.rfd);
  resihp__wire_listener_close(&g_lis);
  resihp__wire_listener_close(&g_lis2);
  for (int i = 0; i < 2; i++) {
    close(g_hook_out[i]);
    close(g_hook_in[i]);
    close(g_stat[i]);
  }
  unlink(g_secret);
  unlink(g_ledger);
  unsetenv("RESIHP_FAILOVER_MS");
  ck_assert_msg(coord_rc == 0, "coordinator exit %d: %s", coord_rc,
                out->summary);
  ck_assert_msg(out->ledger_ok, "ledger not exact; %s", out->summary);
}

static plan_t plan(int R, int K, long steps) {
  plan_t p = {.R = R,
              .K = K,
              .steps = steps,
              .hook_r = 0,
              .hook_step = 7,
              .kill_coord = 1,
              .kill_r = -1};
  return p;
}

static void expect_result(const outcome_t *o, int K, long n, int replicas) {
  ck_assert_int_eq(o->steps, n);
  tm_expect_result(o->summary, K, n, replicas);
}

/* A run in which every replica computes in every step. */
static void run_all_train(const plan_t *p) {
  outcome_t o;
  run(p, &o);
  expect_result(&o, p->K, p->steps, p->R);
  for (int r = 0; r < p->R; r++)
    ck_assert_int_eq(o.owned[r], p->steps);
}

/* ---- the tests ---- */

/* RESIHP_FAILOVER_MS: milliseconds, digits only, bounded; anything else
 * is refused with an error, and so is a join under it. */
START_TEST(failover_ms_parsed_strictly) {
  int ms = -1;
  ck_assert_int_eq(resihp__job_parse_failover(NULL, &ms), 0);
  ck_assert_int_eq(ms, RESIHP__JOB_FAILOVER_MS);
  ck_assert_int_eq(resihp__job_parse_failover("", &ms), 0);
  ck_assert_int_eq(ms, RESIHP__JOB_FAILOVER_MS);
  ck_assert_int_eq(resihp__job_parse_failover("0", &ms), 0);
  ck_assert_int_eq(ms, 0);
  ck_assert_int_eq(resihp__job_parse_failover("1500", &ms), 0);
  ck_assert_int_eq(ms, 1500);
  ck_assert_int_eq(resihp__job_parse_failover("3600000", &ms), 0);
  const char *bad[] = {"-1",   "1.5", "12x",
                       " 5",   "5 ",  "3600001",
                       "0x10", "abc", "99999999999999999999999"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(resihp__job_parse_failover(bad[i], &ms) == RESIHP_EINVAL,
                  "'%s' taken", bad[i]);
  setenv("RESIHP_FAILOVER_MS", "30s", 1);
  resihp_job_opts_t o;
  resihp_job_opts_init(&o);
  o.microbatches = 1;
  o.steps = 1;
  o.coordinator = "127.0.0.1:1";
  o.replica = 0;
  o.inject = "";
  resihp_job_t *j = NULL;
  ck_assert_int_eq(resihp_job_join(&o, &j), RESIHP_EINVAL);
  unsetenv("RESIHP_FAILOVER_MS");
}
END_TEST

/* The coordinator's addresses (RESIHP_COORDINATOR, COORDS): one to four
 * HOST:PORT separated by '/', each a plain token that fits; a new list
 * keeps the address in use in use. Anything else is refused, and a bad
 * COORDS line leaves the list as it was. */
START_TEST(coordinator_list_parsed_strictly) {
  resihp_job_t *j = calloc(1, sizeof(*j));
  ck_assert_ptr_nonnull(j);
  ck_assert_int_eq(resihp__job_set_coords(j, "a:1/b:2"), 0);
  ck_assert_int_eq(j->ncoords, 2);
  ck_assert_str_eq(resihp__job_coord_ep(j), "a:1");
  resihp__job_coord_next(j);
  ck_assert_str_eq(resihp__job_coord_ep(j), "b:2");
  resihp__job_coord_next(j);
  ck_assert_str_eq(resihp__job_coord_ep(j), "a:1");
  resihp__job_coord_next(j);
  resihp__job_on_coords(j, "COORDS eps=c:3/b:2/d:4");
  ck_assert_int_eq(j->ncoords, 3);
  ck_assert_str_eq(resihp__job_coord_ep(j), "b:2"); /* still in use */
  const char *bad[] = {
      "",     "a", "a:1/", "/a:1", "a:1//b:2", "a:1 b:2", "a:1/b:2/c:3/d:4/e:5",
      "a:1/x"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(resihp__job_set_coords(j, bad[i]) == RESIHP_EINVAL,
                  "'%s' taken", bad[i]);
  char longest[128];
  memset(longest, 'h', sizeof(longest) - 1);
  longest[sizeof(longest) - 1] = '\0';
  longest[5] = ':';
  ck_assert_int_eq(resihp__job_set_coords(j, longest), RESIHP_EINVAL);
  resihp__job_on_coords(j, "COORDS eps=e:5/");
  resihp__job_on_coords(j, "COORDS list=e:5");
  ck_assert_int_eq(j->ncoords, 3);
  ck_assert_str_eq(resihp__job_coord_ep(j), "b:2");
  free(j);
}
END_TEST

/* WELCOME's heartbeat period: taken within 100..60000 ms, the default
 * when absent, anything else refused (the join or the reconnect fails). */
START_TEST(welcome_hb_parsed_strictly) {
  resihp_job_t *j = calloc(1, sizeof(*j));
  ck_assert_ptr_nonnull(j);
  ck_assert_int_eq(resihp__job_welcome(j, "WELCOME replica=0 step=0"), 0);
  ck_assert_int_eq(j->coord_hb_ms, RESIHP__JOB_HB_MS);
  ck_assert_int_eq(
      resihp__job_welcome(j, "WELCOME replica=0 step=0 hb=750 again=1"), 0);
  ck_assert_int_eq(j->coord_hb_ms, 750);
  ck_assert_int_eq(resihp__job_welcome(j, "WELCOME replica=1 hb=60000"), 0);
  ck_assert_int_eq(j->coord_hb_ms, 60000);
  const char *bad[] = {"hb=99", "hb=60001", "hb=-5",
                       "hb=",   "hb=7x",    "hb=99999999999999999999"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char line[96];
    snprintf(line, sizeof(line), "WELCOME replica=0 step=0 %s", bad[i]);
    ck_assert_msg(resihp__job_welcome(j, line) == RESIHP_EPROTO, "'%s' taken",
                  bad[i]);
    ck_assert_int_eq(j->coord_hb_ms, 60000); /* unchanged */
  }
  /* and only a WELCOME is one */
  ck_assert_int_eq(resihp__job_welcome(j, "NO reason=bad-hello"),
                   RESIHP_EPROTO);
  ck_assert_int_eq(j->coord_hb_ms, 60000);
  free(j);
}
END_TEST

/* A free run's samples: every 100 ms in a job of up to 200 ranks, then
 * every ranks/2 ms (at most about 2,000 PERF lines a second), at most
 * once a minute. */
START_TEST(report_period_follows_the_job) {
  static const struct {
    int members, lsize;
    int64_t ms;
  } t[] = {{3, 1, 100},        {200, 1, 100},     {100, 4, 200},
           {2000, 1, 1000},    {2002, 1, 1001},   {10000, 1, 5000},
           {6000, 16, 48000},  {1000000, 64, 60000}, {0, 0, 100},
           {-5, 3, 100}};
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
    ck_assert_msg(resihp__job_report_ms(t[i].members, t[i].lsize) == t[i].ms,
                  "%d x %d: %lld ms", t[i].members, t[i].lsize,
                  (long long)resihp__job_report_ms(t[i].members, t[i].lsize));
}
END_TEST

/* The coordinator dies in step 7 of a free run and comes back from its
 * mirror (before the hooked replica goes on, or after): the replicas
 * reconnect and train on; nothing is lost or done twice. */
START_TEST(kill_in_free_run) {
  plan_t p = plan(2, 1 + (_i & 1), 30);
  p.release_first = _i >> 1;
  run_all_train(&p);
}
END_TEST

/* The same, but the new coordinator comes back on another address, as a
 * standby on another node does (job_coords.c): the replicas learnt it from
 * the first one (COORDS), find the first address refused, and reconnect
 * to the second. */
START_TEST(kill_in_free_run_back_elsewhere) {
  plan_t p = plan(2, 1 + (_i & 1), 30);
  p.release_first = _i >> 1;
  p.elsewhere = 1;
  run_all_train(&p);
}
END_TEST

/* Step by step (every boundary asks the coordinator: BEGIN, GO, READY,
 * START): the coordinator dies while replica 0 is in step 7 and the other
 * is on its way to the boundary; the pending requests are said again and
 * answered by the new coordinator. */
START_TEST(kill_at_boundary) {
  plan_t p = plan(2, 1 + _i, 20);
  p.lockstep = 1;
  run_all_train(&p);
}
END_TEST

/* Replica 1 and the coordinator die together in step 7 of a free run: the
 * survivors' RECOVER goes to the new coordinator, which decides the round;
 * replica 1 owns nothing from the step it died in on. Replica 1 is not
 * held: it may have sent its part of step 7 before the SIGKILL (a machine
 * under load), and the survivors then finish step 7 with it; either way
 * the ledger must say who computed what. */
START_TEST(kill_during_recovery) {
  plan_t p = plan(3, 1 + _i, 20);
  p.kill_r = 1;
  outcome_t o;
  run(&p, &o);
  expect_result(&o, p.K, 20, 2);
  ck_assert_msg((o.lost_at[1] == 7 || o.lost_at[1] == 8) &&
                    o.owned[1] == o.lost_at[1],
                "lost %ld owned %ld: %s", o.lost_at[1], o.owned[1], o.summary);
  ck_assert_int_eq(o.owned[0], 20);
  ck_assert_int_eq(o.owned[2], 20);
}
END_TEST

/* By predicted cost (warm and free from about step 17): the coordinator
 * dies in step 25 of a free run, whose owners so far only the replicas
 * hold (and the PROGs it mirrored): they reconnect, report them again,
 * and every step is in the ledger once with its owners. */
START_TEST(cost_kill_in_free_run) {
  plan_t p = plan(2, 1 + (_i & 1), 40);
  p.cost = 1;
  p.hook_step = 25;
  p.release_first = _i >> 1;
  run_all_train(&p);
}
END_TEST

/* By cost: replica 1 and the coordinator die together in step 25 of a
 * free run; the survivors' RECOVER, with the owners of the run's steps,
 * goes to the new coordinator. Replica 1 is not held: it may have sent its
 * part of step 25 before the SIGKILL, and the survivors may then finish
 * the step with it (a machine under load); either way the ledger must say
 * who computed what. */
START_TEST(cost_kill_during_recovery) {
  plan_t p = plan(3, 1 + _i, 40);
  p.cost = 1;
  p.hook_step = 25;
  p.kill_r = 1;
  outcome_t o;
  run(&p, &o);
  expect_result(&o, p.K, 40, 2);
  ck_assert_msg((o.lost_at[1] == 25 || o.lost_at[1] == 26) &&
                    o.owned[1] == o.lost_at[1],
                "lost %ld owned %ld: %s", o.lost_at[1], o.owned[1], o.summary);
  ck_assert_int_eq(o.owned[0], 40);
  ck_assert_int_eq(o.owned[2], 40);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("job_failover");
  TCase *tc = tcase_create("failover");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, failover_ms_parsed_strictly);
  tcase_add_test(tc, welcome_hb_parsed_strictly);
  tcase_add_test(tc, coordinator_list_parsed_strictly);
  tcase_add_test(tc, report_period_follows_the_job);
  tcase_add_loop_test(tc, kill_in_free_run, 0, 4);
  tcase_add_loop_test(tc, kill_in_free_run_back_elsewhere, 0, 4);
  tcase_add_loop_test(tc, kill_at_boundary, 0, 2);
  tcase_add_loop_test(tc, kill_during_recovery, 0, 2);
  tcase_add_loop_test(tc, cost_kill_in_free_run, 0, 4);
  tcase_add_loop_test(tc, cost_kill_during_recovery, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

/* --bench [STEPS [US]]: a free run of 2 replicas with and without a
 * SIGKILLed coordinator in step 7 (the hooked replica goes on at once; the
 * new coordinator is forked and restored meanwhile, as the keeper does):
 * the hooked replica's longest step boundary (end_step + begin_step: the
 * stall a failover costs) and the whole run's time. A measurement, not a
 * test. */
static long g_bench_steps = 100;

START_TEST(bench) {
  printf("%-10s %6s %6s %12s %10s %8s\n", "mode", "K", "steps", "worst-bnd-ms",
         "seconds", "mirrors");
  for (int K = 1; K <= 2; K++)
    for (int kill_it = 0; kill_it <= 1; kill_it++) {
      plan_t p = plan(2, K, g_bench_steps);
      p.kill_coord = kill_it;
      p.release_first = 1;
      outcome_t o;
      run(&p, &o);
      expect_result(&o, p.K, p.steps, 2);
      printf("%-10s %6d %6ld %12lld %10.2f %8ld\n",
             kill_it ? "failover" : "plain", K, p.steps, (long long)o.worst_ms,
             o.seconds, o.nsnaps);
      fflush(stdout);
    }
}
END_TEST

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--bench")) {
    g_bench_steps = argc > 2 ? atol(argv[2]) : 100;
    g_compute_us = argc > 3 ? atoi(argv[3]) : 2000;
    if (g_bench_steps < 10 || g_compute_us < 0) {
      fprintf(stderr, "usage: test_job_failover --bench [STEPS>=10 [US]]\n");
      return 2;
    }
    Suite *s = suite_create("job_failover-bench");
    TCase *tc = tcase_create("bench");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, bench);
    suite_add_tcase(s, tc);
    return run_suite(s);
  }
  return run_suite(suite());
}
