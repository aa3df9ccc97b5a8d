/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the control plane's wire (libresihp/control/wire.c): the
 * line framing with and without tags, and the message parsers.
 *
 * The first byte picks what the rest is:
 *  - even: a byte stream from a peer, read by an unsealed wire: every line
 *    taken fits its buffer and holds no newline or NUL; nothing else comes
 *    out (no truncation); with bit 1 set, with a member's limits per kind
 *    of message (resihp__coord_member_line_max): none longer than its
 *    kind's;
 *  - odd: lines that a sealed sender tags; the second and third bytes
 *    choose one byte of the stream to alter (or none): every line the
 *    sealed reader accepts is the one that was sent, in order, and an
 *    altered line is never accepted;
 *  and every input also goes through get/get_long/get_range/get_rest,
 *  parse_ints (values in range; re-formatted, they parse the same) and
 *  token_ok. See README for a libFuzzer build. */
#include "config.h"

#include "../../libresihp/control/coord_internal.h"
#include "../../libresihp/control/wire.h"
#include "../../libresihp/transport/mesh.h"
#include "fuzz_driver.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXIN 8192

static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_coord_wire: %s\n", what);
    abort();
  }
}

static void parsers(const char *msg) {
  static const char *const keys[] = {"a", "step", "view", "mbs", "summary"};
  char v[64];
  long x;
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
    int rc = resihp__wire_get(msg, keys[i], v, sizeof(v));
    check(rc == 0 || rc == RESIHP_ENOENT || rc == RESIHP_ERANGE, "get rc");
    check(rc || (strlen(v) < sizeof(v) && !strchr(v, ' ')), "get value");
    rc = resihp__wire_get_rest(msg, keys[i], v, sizeof(v));
    check(rc || strlen(v) < sizeof(v), "get_rest value");
    rc = resihp__wire_get_range(msg, keys[i], -5, 1000, &x);
    check(rc || (x >= -5 && x <= 1000), "get_range value");
    resihp__wire_get_long(msg, keys[i], &x);
  }
  int *ids = NULL, n = 0;
  if (!resihp__wire_parse_ints(msg, 100000, &ids, &n)) {
    for (int i = 0; i < n; i++)
      check(ids[i] >= 0 && ids[i] < 100000, "parse_ints range");
    resihp__wire_buf_t b;
    resihp__wire_buf_init(&b);
    resihp__wire_buf_ints(&b, ids, n);
    int *again = NULL, m = 0;
    check(!b.err &&
              !resihp__wire_parse_ints(b.s ? b.s : "", 100000, &again, &m),
          "parse_ints round trip");
    check(m == n && (!n || !memcmp(ids, again, sizeof(int) * (size_t)n)),
          "parse_ints round trip differs");
    free(again);
    resihp__wire_buf_free(&b);
  }
  free(ids);
  resihp__wire_token_ok(msg, 96);
}

/* typed: with a member's limits per kind of message (the coordinator's
 * resihp__coord_member_line_max): no line longer than its kind's comes
 * through. */
static void unsealed(const uint8_t *d, size_t n, int typed) {
  int sv[2];
  check(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), "pair");
  check(send(sv[1], d, n, 0) == (ssize_t)n, "send");
  close(sv[1]);
  resihp__wire_t w;
  resihp__wire_init(&w, sv[0]);
  w.max = typed ? 4 * MAXIN : 512; /* small: overlong lines are reached */
  if (typed)
    w.line_max = resihp__coord_member_line_max;
  static char out[4 * MAXIN + 1];
  size_t cap = typed ? sizeof(out) : 64;
  int rc = 0;
  for (int guard = 0; guard < 10000; guard++) {
    int t = resihp__wire_take(&w, out, cap);
    if (t == 1) {
      check(strlen(out) < cap && !strchr(out, '\n'), "line");
      check(!typed || strlen(out) <= resihp__coord_member_line_max(
                                          out, strlen(out)),
            "a line longer than its kind's limit");
      continue;
    }
    if (t < 0)
      continue; /* refused and consumed */
    if (rc < 0)
      break;
    rc = resihp__wire_fill(&w);
  }
  resihp__wire_free(&w);
}

static void sealed(const uint8_t *d, size_t n, size_t flip) {
  int sv[2];
  check(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), "pair");
  int big = 1 << 20;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  resihp__wire_t tx, rx;
  resihp__wire_init(&tx, sv[1]);
  resihp__wire_init(&rx, sv[0]);
  static const uint8_t key[] = "k";
  resihp__msgauth_init(&tx.auth, key, 1, "coord", "ns", 2, "nc", 2, 1);
  resihp__msgauth_init(&rx.auth, key, 1, "coord", "ns", 2, "nc", 2, 0);
  tx.sealed = rx.sealed = 1;
  /* the lines as sent, NUL-separated */
  static char sent[MAXIN + 1];
  size_t ns = 0, nlines = 0;
  for (size_t at = 0; at < n && nlines < 256;) {
    const uint8_t *nl = memchr(d + at, '\n', n - at);
    size_t l = nl ? (size_t)(nl - (d + at)) : n - at;
    memcpy(sent + ns, d + at, l);
    sent[ns + l] = '\0';
    if (!memchr(d + at, '\0', l) &&
        !resihp__wire_send(&tx, sent + ns, resihp__now_ms() + 1000)) {
      ns += l + 1;
      nlines++;
    }
    at += l + 1;
  }
  /* alter one byte of what is in flight */
  static uint8_t stream[4 * MAXIN];
  ssize_t got = recv(sv[0], stream, sizeof(stream), MSG_DONTWAIT);
  size_t len = got > 0 ? (size_t)got : 0;
  int altered = flip < len;
  if (altered)
    stream[flip] ^= 0x20;
  int pr[2];
  check(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pr), "pair");
  setsockopt(pr[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  check(send(pr[1], stream, len, 0) == (ssize_t)len, "resend");
  close(pr[1]);
  resihp__wire_free(&rx);
  resihp__wire_init(&rx, pr[0]);
  resihp__msgauth_init(&rx.auth, key, 1, "coord", "ns", 2, "nc", 2, 0);
  rx.sealed = 1;
  static char out[MAXIN + 1];
  const char *want = sent;
  size_t taken = 0;
  for (;;) {
    int t = resihp__wire_take(&rx, out, sizeof(out));
    if (t == 0 && resihp__wire_fill(&rx) == 0)
      continue;
    if (t == 0)
      t = resihp__wire_take(&rx, out, sizeof(out));
    if (t != 1)
      break; /* the end, or a refused line: the stream is over */
    check(taken < nlines && !strcmp(out, want), "a sealed line changed");
    want += strlen(want) + 1;
    taken++;
  }
  check(altered || taken == nlines, "an intact sealed stream was refused");
  resihp__wire_free(&rx);
  resihp__wire_free(&tx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  resihp__fuzz_quiet();
  if (size < 3 || size > MAXIN)
    return 0;
  static char msg[MAXIN + 1];
  memcpy(msg, data + 3, size - 3);
  msg[size - 3] = '\0';
  parsers(msg);
  if (data[0] & 1)
    sealed(data + 3, size - 3, (size_t)data[1] << 8 | data[2]);
  else
    unsealed(data + 3, size - 3, data[0] & 2);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {"step=",
                                      "view=",
                                      "gone=",
                                      "mbs=",
                                      "a=",
                                      "summary=",
                                      "1",
                                      "0",
                                      "-1",
                                      ":",
                                      "::",
                                      "12:7:99999",
                                      "100000",
                                      "9223372036854775808",
                                      " ",
                                      "\n",
                                      "=",
                                      "x",
                                      " mac=",
                                      "0123456789abcdef0123456789abcdef",
                                      "\0",
                                      "\xff"};
  size_t n = 0;
  if (cap < 3)
    return 0;
  uint64_t r = resihp__fuzz_rng();
  buf[n++] = (uint8_t)r;
  buf[n++] = (uint8_t)(r >> 8) & 1;
  buf[n++] = (uint8_t)(r >> 16);
  size_t parts = resihp__fuzz_rng() % 40;
  for (size_t i = 0; i < parts; i++) {
    const char *a =
        atoms[resihp__fuzz_rng() % (sizeof(atoms) / sizeof(atoms[0]))];
    size_t l = a[0] ? strlen(a) : 1;
    if (n + l > cap)
      break;
    memcpy(buf + n, a, l);
    n += l;
  }
  if (resihp__fuzz_rng() % 50 == 0) /* now and then, a very long line */
    while (n < cap && n < 3000)
      buf[n++] = (uint8_t)('0' + resihp__fuzz_rng() % 10);
  return n;
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_coord_wire", "corpus-coord-wire",
                           MAXIN, gen, 20000);
}
#endif
