/* SPDX-License-Identifier: BSD-3-Clause */
/* See coord_pairs.h. */
#include "config.h"

#include "coord_pairs.h"

#include <check.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

resihp__coord_t *coord_c;
int coord_k[COORD_PAIRS_MAX];
resihp__wire_t coord_peer[COORD_PAIRS_MAX];
static int npairs;

void coord_pairs_setup(int n,
                       int (*on_fault)(void *, int, const char *, const char *,
                                       long),
                       void *ud) {
  static const char key[] = "coord-pairs-test-secret";
  ck_assert(n > 0 && n <= COORD_PAIRS_MAX);
  npairs = n;
  resihp__coord_opts_t co = {.replicas = n,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)key,
                             .secret_len = sizeof(key) - 1,
                             .silence_ms = 600000,
                             .on_fault = on_fault,
                             .ud = ud};
  ck_assert_int_eq(resihp__coord_create(&co, &coord_c), 0);
  for (int i = 0; i < n; i++) {
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv),
                     0);
    resihp__wire_t w;
    resihp__wire_init(&w, sv[0]);
    coord_k[i] = resihp__coord_adopt(coord_c, &w);
    ck_assert_int_ge(coord_k[i], 0);
    resihp__wire_init(&coord_peer[i], sv[1]);
  }
}

void coord_pairs_teardown(void) {
  ck_assert_ptr_null(resihp__coord_check(coord_c));
  resihp__coord_destroy(coord_c);
  for (int i = 0; i < npairs; i++)
    resihp__wire_free(&coord_peer[i]);
}

void coord_pairs_expect(int i, const char *prefix, char *line, size_t cap) {
  for (int n = 0; n < 64;) {
    int t = resihp__wire_take(&coord_peer[i], line, cap);
    ck_assert_int_ge(t, 0);
    if (t && !strncmp(line, prefix, strlen(prefix)))
      return;
    n += t;
    if (!t) {
      resihp__coord_poll(coord_c, 10);
      int rc = resihp__wire_fill(&coord_peer[i]);
      ck_assert_int_eq(rc, 0);
    }
  }
  ck_abort_msg("replica %d never got '%s'", i, prefix);
}

void coord_pairs_join_all(void) {
  char line[512];
  for (int i = 0; i < npairs; i++) {
    snprintf(line, sizeof(line),
             "HELLO replica=%d ep=h%d:1 sep=h%d:2 mbs=6 steps=20", i, i, i);
    resihp__coord_feed(coord_c, coord_k[i], line);
  }
  for (int i = 0; i < npairs; i++)
    resihp__coord_feed(coord_c, coord_k[i], "BEGIN step=-1");
  for (int i = 0; i < npairs; i++) {
    coord_pairs_expect(i, "GO ", line, sizeof(line));
    snprintf(line, sizeof(line), "READY epoch=%ld",
             (long)resihp__coord_epoch(coord_c));
    resihp__coord_feed(coord_c, coord_k[i], line);
  }
  for (int i = 0; i < npairs; i++)
    coord_pairs_expect(i, "START ", line, sizeof(line));
}
