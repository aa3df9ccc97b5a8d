/* SPDX-License-Identifier: BSD-3-Clause */
/* Before authentication, strangers cannot keep a genuine client out.
 *
 * A flooder in a child process opens connections to a listener as fast
 * as the machine lets it (half of them say nothing, half send part of an
 * answer), keeping a few hundred open and closing the oldest. Meanwhile a
 * genuine client that takes 50 ms to answer the server (a distant node:
 * resihp__wire_test_rtt_ms) authenticates and is served, ten times in a
 * row, each within 2 s: on the coordinator's port, on the standby feed's
 * and on a rank's listener (the "local", "state" and the coordinator's
 * listeners share handshake.c). Before the stateless challenge each
 * flooder's connection evicted the oldest pending handshake, and the
 * genuine client's answer found its handshake gone. */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/standby.h"
#include "../../libresihp/control/wire.h"
#include "../../libresihp/recovery/job_internal.h"
#include "../../libresihp/transport/cookie.h"
#include "../../libresihp/transport/mesh.h"
#include "../../libresihp/transport/msgauth.h"
#include "../../libresihp/transport/sha256.h"
#include "suite_main.h"

#include <resihp/error.h>

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char KEY[] = "preauth-test-secret-0123456789";
#define TRIES 10
#define BOUND_MS 2000
#define RTT_MS 50

/* The flooder: connections at full rate to 127.0.0.1:port until killed;
 * every other one sends what (len bytes: part of an answer, or a forged
 * hello). */
static pid_t flood_with(int port, const void *what, size_t len) {
  pid_t p = fork();
  ck_assert_int_ge(p, 0);
  if (p)
    return p;
  enum { OPEN = 256 };
  int fds[OPEN];
  for (int i = 0; i < OPEN; i++)
    fds[i] = -1;
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  for (unsigned long i = 0;; i++) {
    int k = (int)(i % OPEN);
    if (fds[k] >= 0)
      close(fds[k]);
    fds[k] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fds[k] < 0)
      continue;
    connect(fds[k], (struct sockaddr *)&a, sizeof(a));
    /* the one before has had time to connect */
    int prev = fds[(k + OPEN - 1) % OPEN];
    if (i % 2 && prev >= 0)
      send(prev, what, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

static pid_t flood(int port) {
  return flood_with(port, "AUTH2 0123", 10);
}

static void flood_end(pid_t p) {
  kill(p, SIGKILL);
  waitpid(p, NULL, 0);
}

/* ---- the coordinator ---------------------------------------------------- */

typedef struct {
  resihp__coord_t *c;
  volatile int stop;
} pump_t;

static void *pump_main(void *arg) {
  pump_t *pm = arg;
  while (!pm->stop)
    resihp__coord_poll(pm->c, 20);
  return NULL;
}

/* As a genuine client: connect to ep, authenticate on channel label,
 * say line and take the answer into reply; ms taken. */
static long request(const char *ep, const char *label, const char *line,
                    char *reply, size_t cap, int try) {
  int64_t t0 = resihp__now_ms(), dl = t0 + 10000;
  resihp__wire_t w;
  resihp__wire_init(&w, resihp__wire_dial(ep, dl));
  int rc = w.fd < 0 ? w.fd : 0;
  if (!rc)
    rc = resihp__wire_auth_client(&w, (const uint8_t *)KEY, strlen(KEY),
                                  label, dl);
  if (!rc)
    rc = resihp__wire_send(&w, line, dl);
  if (!rc)
    rc = resihp__wire_recv(&w, reply, cap, dl);
  resihp__wire_free(&w);
  long ms = (long)(resihp__now_ms() - t0);
  fprintf(stderr, "%s: try %d: %s in %ld ms\n", label, try,
          rc ? resihp_strerror(rc) : reply, ms);
  if (rc)
    *reply = '\0';
  return ms;
}

/* One authenticated request and its answer: ms taken, or -1. */
static long coord_request(const char *ep, int n) {
  char line[128], reply[256];
  snprintf(line, sizeof(line), "SPARE node=g%d status=pass summary=-", n);
  long ms = request(ep, "coord", line, reply, sizeof(reply), n);
  return !strncmp(reply, "SPARE_OK ", 9) ? ms : -1;
}

START_TEST(coord_flooded) {
  resihp__coord_opts_t co = {.replicas = 1,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)KEY,
                             .secret_len = strlen(KEY),
                             .silence_ms = 3000};
  pump_t pm = {0};
  ck_assert_int_eq(resihp__coord_create(&co, &pm.c), 0);
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", resihp__coord_port(pm.c));
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, pump_main, &pm), 0);
  pid_t f = flood(resihp__coord_port(pm.c));
  resihp__wire_test_rtt_ms = RTT_MS;
  long worst = 0;
  int ok = 0;
  for (int i = 0; i < TRIES; i++) {
    long ms = coord_request(ep, i);
    ok += ms >= 0 && ms <= BOUND_MS;
    worst = ms < 0 || worst < 0 ? -1 : ms > worst ? ms : worst;
  }
  resihp__wire_test_rtt_ms = 0;
  flood_end(f);
  pm.stop = 1;
  pthread_join(t, NULL);
  resihp__coord_destroy(pm.c);
  ck_assert_msg(ok == TRIES, "%d of %d within %d ms (worst %ld)", ok, TRIES,
                BOUND_MS, worst);
}
END_TEST

/* ---- the standby feed --------------------------------------------------- */

START_TEST(standby_feed_flooded) {
  resihp__wire_listener_t lis;
  ck_assert_int_eq(resihp__wire_listener_open("127.0.0.1", 0, 4, &lis), 0);
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", lis.port);
  pid_t f = flood(lis.port);
  int ok = 0;
  for (int i = 0; i < TRIES; i++) {
    resihp__feed_t *feed = NULL;
    ck_assert_int_eq(
        resihp__feed_start(lis.fds[0], (const uint8_t *)KEY, strlen(KEY),
                           &feed),
        0);
    resihp__feed_expect(feed, "n1", NULL);
    int64_t t0 = resihp__now_ms();
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
      resihp__wire_test_rtt_ms = RTT_MS;
      char *rec = NULL;
      size_t len = 0;
      resihp__feed_follow(ep, (const uint8_t *)KEY, strlen(KEY),
                          "STANDBY ep=127.0.0.1:9 node=n1 step=1.1", 3000,
                          &rec, &len, NULL, NULL);
      _exit(0);
    }
    int have = 0;
    /* safety net only: the bound is checked below */
    while (!(have = resihp__feed_standby(feed, NULL, 0, NULL, 0, NULL, 0,
                                         NULL)) &&
           resihp__now_ms() - t0 < 5000)
      usleep(1000);
    long ms = (long)(resihp__now_ms() - t0);
    fprintf(stderr, "standby: try %d: %s in %ld ms\n", i,
            have ? "following" : "not following", ms);
    ok += have && ms <= BOUND_MS;
    resihp__feed_stop(feed);
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
  }
  flood_end(f);
  resihp__wire_listener_close(&lis);
  ck_assert_msg(ok == TRIES, "%d of %d within %d ms", ok, TRIES, BOUND_MS);
}
END_TEST

/* ---- a rank's listener (local, state) ------------------------------------ */

typedef struct {
  int lfd;
  const char *label;
  volatile int stop;
} rank_srv_t;

/* The leader's loop (resihp__job_accept_authed) with the ranks' limits:
 * each authenticated connection's line is echoed. */
static void *rank_main(void *arg) {
  rank_srv_t *s = arg;
  resihp__wire_hs_t *hs = NULL;
  resihp__lobby_t *lobby = NULL;
  ck_assert_int_eq(resihp__wire_hs_create((const uint8_t *)KEY, strlen(KEY),
                                          s->label, RESIHP__JOB_HS_PENDING,
                                          RESIHP__JOB_HS_TIMEOUT_MS, &hs),
                   0);
  ck_assert_int_eq(resihp__lobby_create(RESIHP__JOB_LOBBY,
                                        RESIHP__JOB_FIRST_LINE_MS,
                                        RESIHP__JOB_SUB_MAX, &lobby),
                   0);
  while (!s->stop) {
    resihp__wire_t w;
    char line[128];
    if (resihp__job_accept_authed(NULL, hs, lobby, s->lfd,
                                  resihp__now_ms() + 100, NULL, &w, line,
                                  sizeof(line)))
      continue;
    resihp__wire_send(&w, line, resihp__now_ms() + 5000);
    resihp__wire_free(&w);
  }
  resihp__lobby_destroy(lobby);
  resihp__wire_hs_destroy(hs);
  return NULL;
}

static void rank_flooded(const char *label) {
  int port = 0;
  rank_srv_t s = {.label = label};
  s.lfd = resihp__wire_listen("127.0.0.1", 0, &port);
  ck_assert_int_ge(s.lfd, 0);
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", port);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, rank_main, &s), 0);
  pid_t f = flood(port);
  resihp__wire_test_rtt_ms = RTT_MS;
  int ok = 0;
  for (int i = 0; i < TRIES; i++) {
    char reply[128];
    long ms = request(ep, label, "SUB lrank=1", reply, sizeof(reply), i);
    ok += !strcmp(reply, "SUB lrank=1") && ms <= BOUND_MS;
  }
  resihp__wire_test_rtt_ms = 0;
  flood_end(f);
  s.stop = 1;
  pthread_join(t, NULL);
  close(s.lfd);
  ck_assert_msg(ok == TRIES, "%s: %d of %d within %d ms", label, ok, TRIES,
                BOUND_MS);
}

START_TEST(rank_local_flooded) {
  rank_flooded("local");
}
END_TEST

START_TEST(rank_state_flooded) {
  rank_flooded("state");
}
END_TEST

/* ---- a rank's mesh listener (the communicator's set-up) ------------------ */

typedef struct {
  resihp__mesh_opts_t o;
  int rc;
} mesh_side_t;

static void *mesh_main(void *arg) {
  mesh_side_t *m = arg;
  int data[2], ctrl[2];
  m->rc = resihp__mesh_connect(&m->o, data, ctrl, NULL, NULL);
  for (int i = 0; !m->rc && i < 2; i++) {
    if (data[i] >= 0)
      close(data[i]);
    if (ctrl[i] >= 0)
      close(ctrl[i]);
  }
  return NULL;
}

START_TEST(rank_mesh_flooded) {
  int port = 0, lfd = resihp__wire_listen("127.0.0.1", 0, &port);
  ck_assert_int_ge(lfd, 0);
  char ep0[64];
  snprintf(ep0, sizeof(ep0), "127.0.0.1:%d", port);
  const char *eps[2] = {ep0, "127.0.0.1:9"};
  /* the flood's hellos are valid ones, as rank 1 would send (anyone can
   * write one: it proves nothing) */
  struct {
    uint32_t magic;
    uint16_t version;
    uint8_t channel, pad;
    uint32_t src, dst, nranks, group;
    uint8_t nonce[32];
  } hello = {.magic = 0x52534841u, .version = RESIHP__MESH_VERSION,
             .src = 1, .dst = 0, .nranks = 2};
  pid_t f = flood_with(port, &hello, sizeof(hello));
  int ok = 0;
  for (int i = 0; i < TRIES; i++) {
    mesh_side_t r0 = {.o = {.rank = 0,
                            .nranks = 2,
                            .endpoints = eps,
                            .listen_fd = lfd,
                            .secret = (const uint8_t *)KEY,
                            .secret_len = strlen(KEY),
                            .timeout_ms = 10000}};
    mesh_side_t r1 = r0;
    r1.o.rank = 1;
    r1.o.listen_fd = -1;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, mesh_main, &r0), 0);
    resihp__mesh_test_rtt_ms = RTT_MS; /* rank 1's answers only */
    int64_t t0 = resihp__now_ms();
    mesh_main(&r1);
    long ms = (long)(resihp__now_ms() - t0);
    resihp__mesh_test_rtt_ms = 0;
    pthread_join(t, NULL);
    fprintf(stderr, "mesh: try %d: %s in %ld ms\n", i,
            r1.rc ? resihp_strerror(r1.rc) : "connected", ms);
    ok += !r1.rc && !r0.rc && ms <= BOUND_MS;
  }
  flood_end(f);
  close(lfd);
  ck_assert_msg(ok == TRIES, "mesh: %d of %d within %d ms", ok, TRIES,
                BOUND_MS);
}
END_TEST

/* The mesh server's answer path (resihp__mesh_hs_serve): a hello gets a
 * cookie and nothing is kept; the answer with that cookie and the right
 * proof is accepted once, the same answer again (a replay) is refused, and
 * so is one with a wrong proof or a cookie bound to another hello. */
static int mesh_serve(resihp__cookie_jar_t *jar, const void *in, size_t n,
                      uint8_t *out, size_t cap) {
  static const char *const eps[2] = {"127.0.0.1:1", "127.0.0.1:2"};
  resihp__mesh_opts_t o = {.rank = 0,
                           .nranks = 2,
                           .endpoints = eps,
                           .listen_fd = -1,
                           .secret = (const uint8_t *)KEY,
                           .secret_len = strlen(KEY),
                           .timeout_ms = 1000};
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  ck_assert_int_eq(write(sv[1], in, n), (ssize_t)n);
  int r = resihp__mesh_hs_serve(&o, jar, sv[0]);
  if (read(sv[1], out, cap) < 0)
    out[0] = 0;
  close(sv[0]);
  close(sv[1]);
  return r;
}

START_TEST(mesh_answer_checked) {
  struct {
    uint32_t magic;
    uint16_t version;
    uint8_t channel, answer;
    uint32_t src, dst, nranks, group;
    uint8_t nonce[32];
    uint8_t ns[32], mac[32];
  } m = {.magic = 0x52534841u, .version = RESIHP__MESH_VERSION, .src = 1,
         .dst = 0, .nranks = 2, .nonce = {7, 7, 7}};
  const size_t hello = RESIHP__MESH_HELLO_BYTES;
  resihp__cookie_jar_t jar;
  ck_assert_int_eq(resihp__cookie_jar_init(&jar), 0);
  uint8_t out[128];
  ck_assert_int_eq(mesh_serve(&jar, &m, hello, out, sizeof(out)), 2);
  memcpy(m.ns, out + 4, 32); /* the challenge: magic, Ns, its MAC */
  const void *parts[3] = {"resihp-cli", &m, m.ns};
  size_t lens[3] = {10, hello, 32};
  resihp__hmac_sha256(KEY, strlen(KEY), parts, lens, 3, m.mac);
  m.answer = 1;
  m.mac[0] ^= 1; /* a wrong proof */
  ck_assert_int_eq(mesh_serve(&jar, &m, sizeof(m), out, sizeof(out)),
                   RESIHP_EAUTH);
  m.mac[0] ^= 1;
  m.nonce[0] = 8; /* the cookie was for another hello */
  ck_assert_int_eq(mesh_serve(&jar, &m, sizeof(m), out, sizeof(out)),
                   RESIHP_EAUTH);
  m.nonce[0] = 7;
  ck_assert_int_eq(mesh_serve(&jar, &m, sizeof(m), out, sizeof(out)), 1);
  ck_assert_int_eq(out[0], 1); /* the verdict */
  ck_assert_int_eq(mesh_serve(&jar, &m, sizeof(m), out, sizeof(out)),
                   RESIHP_EAUTH); /* a replay */
  resihp__cookie_jar_free(&jar);
}
END_TEST

/* The control plane's server, the same way: AUTH0 gets a cookie and the
 * connection is closed (nothing kept); an AUTH2 with it and the right
 * proof is authenticated once, the same AUTH2 again (a replay) refused,
 * as is one whose cookie was made up. */
static int hs_once(resihp__wire_hs_t *h, const char *line, char *reply,
                   size_t cap) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  ck_assert_int_eq(write(sv[1], line, strlen(line)), (ssize_t)strlen(line));
  resihp__wire_hs_add(h, sv[0]);
  resihp__wire_t w;
  int authed = 0;
  for (int i = 0; i < 100 && resihp__wire_hs_pending(h); i++)
    if (resihp__wire_hs_next(h, &w) == 1) {
      authed = 1;
      resihp__wire_free(&w);
    }
  ssize_t n = read(sv[1], reply, cap - 1);
  reply[n > 0 ? n : 0] = '\0';
  close(sv[1]);
  return authed;
}

START_TEST(wire_answer_checked) {
  resihp__wire_hs_t *h;
  ck_assert_int_eq(resihp__wire_hs_create((const uint8_t *)KEY, strlen(KEY),
                                          "coord", 4, 3000, &h),
                   0);
  char reply[256], lab[16], c[80], line[256];
  ck_assert_int_eq(hs_once(h, "AUTH0 coord\n", reply, sizeof(reply)), 0);
  ck_assert_int_eq(sscanf(reply, "AUTH1 %15s %79s", lab, c), 2);
  const char *nc = "0123456789abcdef0123456789abcdef";
  const void *parts[4] = {"coord", "cli", c, nc};
  size_t lens[4] = {5, 3, strlen(c), strlen(nc)};
  uint8_t m[RESIHP__SHA256_LEN];
  char proof[2 * RESIHP__SHA256_LEN + 1];
  resihp__hmac_sha256(KEY, strlen(KEY), parts, lens, 4, m);
  resihp__hex(proof, m, sizeof(m));
  snprintf(line, sizeof(line), "AUTH2 %s %s %s\n", c, nc, proof);
  ck_assert_int_eq(hs_once(h, line, reply, sizeof(reply)), 1);
  ck_assert(!strncmp(reply, "AUTH3 ", 6));
  ck_assert_int_eq(hs_once(h, line, reply, sizeof(reply)), 0); /* replay */
  ck_assert_str_eq(reply, "");
  c[0] = c[0] == '0' ? '1' : '0'; /* a cookie it did not make */
  snprintf(line, sizeof(line), "AUTH2 %s %s %s\n", c, nc, proof);
  ck_assert_int_eq(hs_once(h, line, reply, sizeof(reply)), 0);
  long refused = 0;
  resihp__wire_hs_stats(h, &refused, NULL);
  ck_assert_int_eq(refused, 2);
  resihp__wire_hs_destroy(h);
}
END_TEST

int main(void) {
  Suite *s = suite_create("preauth");
  TCase *tc = tcase_create("flood");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, coord_flooded);
  tcase_add_test(tc, standby_feed_flooded);
  tcase_add_test(tc, rank_local_flooded);
  tcase_add_test(tc, rank_state_flooded);
  tcase_add_test(tc, rank_mesh_flooded);
  tcase_add_test(tc, mesh_answer_checked);
  tcase_add_test(tc, wire_answer_checked);
  suite_add_tcase(s, tc);
  return run_suite(s);
}
