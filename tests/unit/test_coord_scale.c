/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator without fixed limits: its tables follow the job's
 * replica count (a replica id far beyond the old 256 is welcomed, one past
 * the job's count is refused), the count itself is validated, and a job
 * whose member list could not fit in a line is refused at HELLO with a
 * reason, not cut short later. Real sockets; the client is the
 * non-blocking one, in the same process as the coordinator. (Many
 * replicas joining at once: tests/tools/bench-control.test.) */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/wire.h"
#include "../../libresihp/transport/mesh.h"
#include "suite_main.h"

#include <resihp/error.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char key[] = "scale-test-secret";

static resihp__coord_t *coord(int R, char *ep, size_t cap) {
  resihp__coord_opts_t o = {.replicas = R,
                            .bind_host = "127.0.0.1",
                            .secret = (const uint8_t *)key,
                            .secret_len = strlen(key),
                            .silence_ms = 60000};
  resihp__coord_t *c = NULL;
  ck_assert_int_eq(resihp__coord_create(&o, &c), 0);
  snprintf(ep, cap, "127.0.0.1:%d", resihp__coord_port(c));
  return c;
}

/* Say line to the in-process coordinator c and return 1 if its first
 * answer starts with want. The client never blocks (resihp__wire_cli_step),
 * so one process plays both ends, the coordinator pumped in between. */
static int says(resihp__coord_t *c, const char *ep, const char *line,
                const char *want) {
  resihp__wire_t w;
  resihp__wire_cli_t hs = {0};
  char reply[256] = "";
  resihp__wire_init(&w, resihp__wire_dial(ep, resihp__now_ms() + 5000));
  int64_t deadline = resihp__now_ms() + 30000; /* safety net only */
  int rc = w.fd < 0 ? w.fd : 0, t = 0;
  while (!rc && resihp__now_ms() < deadline) {
    resihp__coord_poll(c, 10);
    rc = resihp__wire_cli_step(&w, &hs, (const uint8_t *)key, strlen(key),
                               "coord");
  }
  if (rc == 1)
    rc = resihp__wire_send(&w, line, resihp__now_ms() + 5000);
  while (!rc && !t && resihp__now_ms() < deadline) {
    resihp__coord_poll(c, 10);
    rc = resihp__wire_fill(&w);
    t = resihp__wire_take(&w, reply, sizeof(reply));
  }
  resihp__wire_free(&w);
  if (t != 1 || strncmp(reply, want, strlen(want)))
    fprintf(stderr, "said '%.60s...', got '%s' (%s)\n", line, reply,
            resihp_strerror(rc));
  return t == 1 && !strncmp(reply, want, strlen(want));
}

/* Heartbeat periods grow with the job (about 2,000 a second each way),
 * within what detection needs: a leader beats 4 times per silence bound,
 * the coordinator at least every 5 s, small jobs as before. */
START_TEST(heartbeats_follow_the_job) {
  static const struct {
    int R, silence, leader, coord;
  } t[] = {{3, 3000, 200, 500},        {400, 3000, 200, 500},
           {2000, 3000, 750, 1000},    {10000, 3000, 750, 5000},
           {10000, 60000, 5000, 5000}, {1000000, 60000, 15000, 5000},
           {10000, 100, 200, 5000},    {1, 1, 200, 500}};
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    int l = -1, k = -1;
    resihp__coord_heartbeats(t[i].R, t[i].silence, &l, &k);
    ck_assert_msg(l == t[i].leader && k == t[i].coord,
                  "R=%d silence=%d: leader %d coord %d", t[i].R, t[i].silence,
                  l, k);
  }
}
END_TEST

START_TEST(replica_count_validated) {
  resihp__coord_opts_t o = {.replicas = RESIHP__COORD_MAX_REPLICAS + 1,
                            .secret = (const uint8_t *)key,
                            .secret_len = strlen(key)};
  resihp__coord_t *c = NULL;
  ck_assert_int_eq(resihp__coord_create(&o, &c), RESIHP_EINVAL);
  o.replicas = 0;
  ck_assert_int_eq(resihp__coord_create(&o, &c), RESIHP_EINVAL);
}
END_TEST

#define HELLO_FMT                                                              \
  "HELLO replica=%d ep=127.0.0.1:9 sep=127.0.0.1:9 mbs=4 steps=3"

/* 5000 replicas: ids up to 4999 join, 5000 does not. */
START_TEST(tables_follow_the_job) {
  char ep[64];
  resihp__coord_t *c = coord(5000, ep, sizeof(ep));
  char line[160];
  snprintf(line, sizeof(line), HELLO_FMT, 4999);
  /* silence 60 s: the leaders beat every R/2 = 2500 ms */
  ck_assert(says(c, ep, line, "WELCOME replica=4999 step=0 hb=2500"));
  snprintf(line, sizeof(line), HELLO_FMT, 5000);
  ck_assert(says(c, ep, line, "NO reason=bad-hello"));
  ck_assert_int_eq(resihp__coord_state(c), RESIHP__COORD_RUNNING);
  resihp__coord_destroy(c);
}
END_TEST

/* 8000 replicas of 64 ranks with 45-byte addresses: their member list
 * (8000 x 64 x 46 bytes) is over a line; the first HELLO says so. */
START_TEST(member_list_too_long_refused) {
  char ep[64];
  resihp__coord_t *c = coord(8000, ep, sizeof(ep));
  size_t cap = 64 * 48 * 2 + 256;
  char *eps = malloc(cap), *line = malloc(2 * cap);
  ck_assert_ptr_nonnull(eps);
  ck_assert_ptr_nonnull(line);
  size_t n = 0;
  for (int k = 0; k < 64; k++)
    n += (size_t)snprintf(eps + n, cap - n,
                          "%snode-with-a-much-longer-host-name-%05d:%d",
                          k ? "/" : "", k, 40000 + k);
  snprintf(line, 2 * cap, "HELLO replica=0 ep=%s sep=%s mbs=4 steps=3 lsize=64",
           eps, eps);
  ck_assert(says(c, ep, line, "NO reason=too-many-replicas"));
  ck_assert_int_eq(resihp__coord_connected(c, 0), 0);
  ck_assert_int_eq(resihp__coord_state(c), RESIHP__COORD_RUNNING);
  free(eps);
  free(line);
  resihp__coord_destroy(c);
}
END_TEST

/* One socket queues at most net.core.somaxconn connections: the port gets
 * enough sockets for the clients expected at once (twice the room). */
START_TEST(listen_queues_follow_the_job) {
  ck_assert_int_eq(resihp__wire_listener_count(0, 4096), 1);
  ck_assert_int_eq(resihp__wire_listener_count(2048, 4096), 1);
  ck_assert_int_eq(resihp__wire_listener_count(2049, 4096), 2);
  ck_assert_int_eq(resihp__wire_listener_count(10000, 4096), 5);
  ck_assert_int_eq(resihp__wire_listener_count(10000, 0), 1024);
  /* a group: every socket on one port, every client accepted by one of
   * them, and the kernel spreads the clients (200 on one of 4 sockets
   * by chance: below 4^-199) */
  int somaxconn = 4096;
  FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
  if (f) {
    ck_assert_int_eq(fscanf(f, "%d", &somaxconn), 1);
    fclose(f);
  }
  resihp__wire_listener_t l;
  ck_assert_int_eq(
      resihp__wire_listener_open("127.0.0.1", 0, 2 * somaxconn, &l), 0);
  ck_assert_int_eq(l.n, 4);
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", l.port);
  enum { CLIENTS = 200 };
  int cfd[CLIENTS], got = 0, used = 0;
  for (int i = 0; i < CLIENTS; i++) {
    cfd[i] = resihp__wire_dial(ep, resihp__now_ms() + 5000);
    ck_assert_int_ge(cfd[i], 0);
  }
  for (int s = 0; s < l.n; s++) {
    int fd, here = 0;
    while ((fd = accept(l.fds[s], NULL, NULL)) >= 0) {
      close(fd);
      here++;
    }
    got += here;
    used += here > 0;
  }
  ck_assert_int_eq(got, CLIENTS); /* dial returned: each one is queued */
  ck_assert_int_ge(used, 2);
  for (int i = 0; i < CLIENTS; i++)
    close(cfd[i]);
  resihp__wire_listener_close(&l);
  ck_assert_int_eq(l.n, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("coord_scale");
  TCase *t = tcase_create("scale");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, heartbeats_follow_the_job);
  tcase_add_test(t, replica_count_validated);
  tcase_add_test(t, tables_follow_the_job);
  tcase_add_test(t, member_list_too_long_refused);
  tcase_add_test(t, listen_queues_follow_the_job);
  suite_add_tcase(s, t);
  return run_suite(s);
}
