/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the server side of the control plane's handshake
 * (resihp__wire_hs_*, handshake.c): what anyone who can reach a
 * listener sends as a connection's first bytes (AUTH0, AUTH2 with a
 * cookie, nonce and proof, or anything else). "@C" in the input stands for
 * a cookie the server really handed out a moment before (asked for with
 * AUTH0), so that the checks past the cookie are reached too. Whatever
 * the bytes, no connection is authenticated without the secret, none is
 * kept once its peer has gone, and nothing is buffered past the
 * pre-authentication limit.
 *
 * libFuzzer: clang -fsanitize=fuzzer,address -DRESIHP_FUZZ_LIBFUZZER
 * -I. -Ilibresihp/include tests/fuzz/fuzz_hs_server.c
 * tests/fuzz/fuzz_driver.c build/libresihp/.libs/libresihp-internal.a */
#include "config.h"

#include "../../libresihp/control/wire.h"
#include "fuzz_driver.h"

#include <resihp/error.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXIN 1024

static const uint8_t secret[] = "fuzz-hs-secret";

/* The server's answer to one connection that says in: what it sent back
 * (into out), after it dropped the connection. */
static void exchange(resihp__wire_hs_t *h, const void *in, size_t n,
                     char *out, size_t cap) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
    abort();
  if (n && write(sv[1], in, n) != (ssize_t)n)
    abort();
  shutdown(sv[1], SHUT_WR); /* then the peer says no more */
  resihp__wire_hs_add(h, sv[0]);
  resihp__wire_t w;
  for (int pass = 0; resihp__wire_hs_pending(h); pass++) {
    if (pass > 100) {
      fprintf(stderr, "fuzz_hs_server: kept a connection whose peer left\n");
      abort();
    }
    if (resihp__wire_hs_next(h, &w) == 1) {
      fprintf(stderr, "fuzz_hs_server: authenticated without the secret\n");
      abort();
    }
  }
  ssize_t r = read(sv[1], out, cap - 1);
  out[r > 0 ? r : 0] = '\0';
  close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static resihp__wire_hs_t *h;
  resihp__fuzz_quiet();
  signal(SIGPIPE, SIG_IGN); /* answers to a peer that has gone */
  if (size > MAXIN)
    return 0;
  if (!h &&
      resihp__wire_hs_create(secret, sizeof(secret) - 1, "coord", 4, 3000, &h))
    abort();
  char cookie[256] = "", buf[4 * MAXIN], lab[16];
  exchange(h, "AUTH0 coord\n", 12, cookie, sizeof(cookie));
  if (sscanf(cookie, "AUTH1 %15s %200s", lab, cookie) != 2)
    abort(); /* a genuine client's request always gets a cookie */
  /* the input, "@C" replaced by the cookie */
  size_t n = 0;
  for (size_t i = 0; i < size && n + strlen(cookie) < sizeof(buf); i++) {
    if (i + 1 < size && data[i] == '@' && data[i + 1] == 'C') {
      memcpy(buf + n, cookie, strlen(cookie));
      n += strlen(cookie);
      i++;
    } else {
      buf[n++] = (char)data[i];
    }
  }
  char reply[512];
  exchange(h, buf, n, reply, sizeof(reply));
  if (!strncmp(reply, "AUTH3", 5)) {
    fprintf(stderr, "fuzz_hs_server: proved itself to a client without "
                    "the secret\n");
    abort();
  }
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "AUTH0 ",
      "AUTH2 ",
      "@C ",
      "@C",
      "coord",
      "state ",
      "\n",
      " ",
      "0123456789abcdef0123456789abcdef",
      "00000000000000000000000000000000",
      "00",
      "ff",
      "FF",
      "\0",
      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 12, 8);
  return resihp__fuzz_pad_long(buf, n, cap, 40);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_hs_server", "corpus-hs-server",
                           MAXIN, gen, 20000);
}
#endif
