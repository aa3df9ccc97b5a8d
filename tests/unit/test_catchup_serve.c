/* SPDX-License-Identifier: BSD-3-Clause */
/* The catch-up transfer when a replacement gives up (job_catchup.c): a
 * source whose replacement left no longer holds its own replica's next
 * step until the transfer's 30 s deadline (it is stopped at once when the
 * next catch-up or the end comes), and a replacement trying again refuses
 * the offer of a source still serving its earlier attempt (another step's
 * state) and takes the one it asked for. Real sockets and threads, the
 * real handshake; the job structures hold only what the transfer uses. */
#include "config.h"

#include "../../libresihp/recovery/job_internal.h"
#include "suite_main.h"

#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define STATE_BYTES 65536
static const char secret[] = "unit-test-secret-0123456789";

/* A rank of shard 0 holding STATE_BYTES of state, each byte fill. */
static resihp_job_t *rank_new(int replica, uint8_t fill) {
  resihp_job_t *j = calloc(1, sizeof(*j));
  ck_assert_ptr_nonnull(j);
  j->replica = replica;
  j->slfd = -1;
  j->serve_fd = -1;
  pthread_mutex_init(&j->serve_mu, NULL);
  j->secret = malloc(sizeof(secret) - 1);
  memcpy(j->secret, secret, sizeof(secret) - 1);
  j->secret_len = sizeof(secret) - 1;
  uint8_t *data = malloc(STATE_BYTES);
  memset(data, fill, STATE_BYTES);
  resihp_job_buf_t b = {data, STATE_BYTES};
  ck_assert_int_eq(resihp__job_state_set(j, &b, 1), 0);
  return j;
}

static void rank_free(resihp_job_t *j) {
  resihp__job_serve_stop(j);
  free(j->state[0].data);
  resihp__job_state_free(j);
  resihp__wire_hs_destroy(j->shs);
  resihp__lobby_destroy(j->slobby);
  if (j->slfd >= 0)
    close(j->slfd);
  pthread_mutex_destroy(&j->serve_mu);
  free(j->secret);
  free(j);
}

/* A listening socket on loopback; *to: "0.0@127.0.0.1:PORT", the serve
 * entry of replica 0's shard 0 there. */
static int listen_at(char *to, size_t cap) {
  int port = 0, fd = resihp__wire_listen("127.0.0.1", 0, &port);
  ck_assert_int_ge(fd, 0);
  snprintf(to, cap, "0.0@127.0.0.1:%d", port);
  return fd;
}

/* The replacement never answers (it left before accepting): the source's
 * thread waits in the handshake. Its replica's next step does not wait
 * for it, and the next catch-up (or the end) stops it at once. */
START_TEST(left_replacement_holds_nobody) {
  char to[64];
  int lfd = listen_at(to, sizeof(to));
  resihp_job_t *src = rank_new(1, 0xAA);
  resihp__job_serve_start(src, to, 5);
  ck_assert_int_eq(src->serving, 1);
  /* connected: the source now waits for a handshake that never comes */
  struct pollfd p = {.fd = lfd, .events = POLLIN};
  ck_assert_int_eq(poll(&p, 1, 20000), 1);
  resihp__job_serve_reap(src); /* the next step begins */
  ck_assert_int_eq(src->serving, 1);
  resihp__job_serve_stop(src);
  ck_assert_int_eq(src->serving, 0);
  ck_assert_ptr_null(src->snap);
  /* the stopped source's connection is shut: its peer reads the end
   * (after the client's opening line, AUTH0) */
  int fd = accept(lfd, NULL, NULL);
  ck_assert_int_ge(fd, 0);
  char c[64];
  ssize_t n;
  do {
    p = (struct pollfd){.fd = fd, .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 20000), 1);
  } while ((n = read(fd, c, sizeof(c))) > 0);
  ck_assert_int_eq(n, 0);
  close(fd);
  /* and it did not come back for a second try */
  p = (struct pollfd){.fd = lfd, .events = POLLIN};
  ck_assert_int_eq(poll(&p, 1, 0), 0);
  close(lfd);
  rank_free(src);
}
END_TEST

static void *receive_main(void *arg) {
  resihp_job_t *j = arg;
  return (void *)(intptr_t)resihp__job_receive_state(j, 5);
}

/* Source A still serves the state of step 4 (an earlier attempt) when the
 * replacement asks for step 5; source B serves step 5. The replacement
 * refuses A's offer and keeps B's state, whole and checked. */
START_TEST(stale_offer_refused) {
  char to[64];
  resihp_job_t *joiner = rank_new(0, 0);
  joiner->slfd = listen_at(to, sizeof(to));
  resihp_job_t *a = rank_new(1, 0xAA), *b = rank_new(2, 0xBB);
  resihp__job_serve_start(a, to, 5); /* step 4's state */
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, receive_main, joiner), 0);
  /* B only once A's offer is over: A's is the first the joiner sees */
  while (!__atomic_load_n(&a->serve_done, __ATOMIC_ACQUIRE))
    usleep(1000);
  resihp__job_serve_start(b, to, 6); /* step 5's state */
  void *rc;
  pthread_join(t, &rc);
  ck_assert_int_eq((int)(intptr_t)rc, 0);
  const uint8_t *got = joiner->state[0].data;
  for (int i = 0; i < STATE_BYTES; i++)
    ck_assert_int_eq(got[i], 0xBB);
  rank_free(a);
  rank_free(b);
  rank_free(joiner);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("catchup_serve");
  TCase *tc = tcase_create("serve");
  tcase_set_timeout(tc, 25); /* below the transfer's 30 s deadline */
  tcase_add_test(tc, left_replacement_holds_nobody);
  tcase_add_test(tc, stale_offer_refused);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return run_suite(suite());
}
