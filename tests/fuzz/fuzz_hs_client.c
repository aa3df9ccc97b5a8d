/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the client side of the control plane's handshake
 * (resihp__wire_cli_step, handshake.c): what a server, or anyone posing as
 * one, sends a joiner before the session is sealed (AUTH1, AUTH3). The
 * input is that byte stream: its first line on the client's first
 * connection, the rest on the second one it opens to answer AUTH1; the
 * client steps over it as its poll loop would. Whatever it is, the client never believes it (a session sealed
 * without the server's proof of the secret), never reads past its
 * pre-authentication limit, and returns 0 or a negative code.
 *
 * libFuzzer: clang -fsanitize=fuzzer,address -DRESIHP_FUZZ_LIBFUZZER
 * -I. -Ilibresihp/include tests/fuzz/fuzz_hs_client.c
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

#include "../../libresihp/transport/mesh.h"

#define MAXIN 4096

/* A loopback listener, opened once: the client's second connection (its
 * answer to AUTH1, handshake.c) comes back to it. */
static int listener(void) {
  static int lfd = -2;
  if (lfd == -2) {
    int port = 0;
    lfd = resihp__wire_listen("127.0.0.1", 0, &port);
  }
  return lfd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const uint8_t secret[] = "fuzz-hs-secret";
  resihp__fuzz_quiet();
  signal(SIGPIPE, SIG_IGN); /* AUTH2 to a peer that has gone */
  int lfd = listener();
  if (size > MAXIN || lfd < 0)
    return 0;
  struct sockaddr_storage a;
  socklen_t al = sizeof(a);
  getsockname(lfd, (struct sockaddr *)&a, &al);
  resihp__wire_t w;
  resihp__wire_init(&w, resihp__wire_dial_addr(&a, al, resihp__now_ms() + 1000));
  int srv = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  if (w.fd < 0 || srv < 0)
    abort();
  /* the first line on the first connection, the rest on the second */
  const uint8_t *nl = size ? memchr(data, '\n', size) : NULL;
  size_t first = nl ? (size_t)(nl - data) + 1 : size;
  if (first && write(srv, data, first) != (ssize_t)first)
    abort();
  resihp__wire_cli_t s = {0};
  /* a step per line at most, and one more to see the end */
  int rc = 0;
  for (size_t i = 0; i <= size && rc == 0; i++) {
    if (i == size / 2 + 1 && srv >= 0)
      close(srv), srv = -1; /* the rest: the peer has gone */
    int was = s.stage;
    rc = resihp__wire_cli_step(&w, &s, secret, sizeof(secret) - 1, "coord");
    if (rc == 0 && was < 2 && s.stage == 2) { /* the second connection */
      if (srv >= 0)
        close(srv);
      srv = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
      if (srv < 0)
        abort();
      if (size > first &&
          write(srv, data + first, size - first) != (ssize_t)(size - first))
        abort();
    }
  }
  if (rc > 0 || w.sealed) {
    fprintf(stderr, "fuzz_hs_client: sealed without the server's proof\n");
    abort();
  }
  if (w.len > 2 * (RESIHP__WIRE_PREAUTH_MAX + 1)) {
    fprintf(stderr, "fuzz_hs_client: buffered past the limit\n");
    abort();
  }
  resihp__wire_free(&w);
  if (srv >= 0)
    close(srv);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "AUTH1 ",
      "AUTH2 ",
      "AUTH3 ",
      "coord ",
      "state ",
      "\n",
      " ",
      "0123456789abcdef0123456789abcdef",
      "00",
      "ff",
      "\0",
      "mac=",
      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 16, 8);
  return resihp__fuzz_pad_long(buf, n, cap, 40);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_hs_client", "corpus-hs-client",
                           MAXIN, gen, 20000);
}
#endif
