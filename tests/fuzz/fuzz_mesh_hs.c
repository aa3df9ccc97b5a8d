/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the server side of the communicator's handshake
 * (transport/mesh.c: resihp__mesh_hs_serve): what anyone who can reach a
 * rank's port sends as a connection's first bytes (a hello, or a hello
 * that answers a challenge with the cookie and a proof, or anything
 * else). "@C" in the input stands for a cookie this server really handed
 * out a moment before, to a valid hello (rank 1 to rank 0 of 2, channel
 * 0, an all-zero nonce: an answer that repeats it passes the cookie's
 * check), so that the checks past the cookie are reached too. Whatever the bytes, no connection is
 * authenticated without the secret (no verdict 1), and a challenge goes
 * out only for a valid hello.
 *
 * libFuzzer: clang -fsanitize=fuzzer,address -DRESIHP_FUZZ_LIBFUZZER
 * -I. -Ilibresihp/include tests/fuzz/fuzz_mesh_hs.c
 * tests/fuzz/fuzz_driver.c build/libresihp/.libs/libresihp-internal.a */
#include "config.h"

#include "../../libresihp/transport/cookie.h"
#include "../../libresihp/transport/mesh.h"
#include "fuzz_driver.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXIN 1024
#define COOKIE_AT RESIHP__MESH_HELLO_BYTES /* a challenge: magic, then Ns */

static const uint8_t secret[] = "fuzz-mesh-secret";
static const char *const eps[2] = {"127.0.0.1:1", "127.0.0.1:2"};
static const resihp__mesh_opts_t opts = {.rank = 0,
                                         .nranks = 2,
                                         .endpoints = eps,
                                         .listen_fd = -1,
                                         .secret = secret,
                                         .secret_len = sizeof(secret) - 1,
                                         .timeout_ms = 1000};

/* The server's side on a connection that says in; what it wrote back
 * into out (cap bytes), and its verdict. */
static int serve(resihp__cookie_jar_t *jar, const void *in, size_t n,
                 uint8_t *out, size_t cap, size_t *got) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
    abort();
  if (n && write(sv[1], in, n) != (ssize_t)n)
    abort();
  shutdown(sv[1], SHUT_WR);
  int r = resihp__mesh_hs_serve(&opts, jar, sv[0]);
  ssize_t k = read(sv[1], out, cap);
  *got = k > 0 ? (size_t)k : 0;
  close(sv[0]);
  close(sv[1]);
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static resihp__cookie_jar_t jar;
  static int ready;
  resihp__fuzz_quiet();
  signal(SIGPIPE, SIG_IGN);
  if (size > MAXIN)
    return 0;
  if (!ready && resihp__cookie_jar_init(&jar))
    abort();
  ready = 1;
  /* a valid hello (rank 1 to rank 0 of 2, channel 0), for a cookie */
  uint8_t hello[COOKIE_AT] = {0}, ch[128];
  uint32_t v32 = 0x52534841u;
  uint16_t v16 = RESIHP__MESH_VERSION;
  memcpy(hello, &v32, 4);
  memcpy(hello + 4, &v16, 2);
  v32 = 1;
  memcpy(hello + 8, &v32, 4); /* src */
  v32 = 2;
  memcpy(hello + 16, &v32, 4); /* nranks */
  size_t got = 0;
  if (serve(&jar, hello, sizeof(hello), ch, sizeof(ch), &got) != 2 ||
      got < 4 + RESIHP__COOKIE_LEN)
    abort(); /* a valid hello always gets its challenge */
  static uint8_t buf[MAXIN * RESIHP__COOKIE_LEN / 2 + 64];
  size_t n = 0;
  for (size_t i = 0; i < size && n + RESIHP__COOKIE_LEN < sizeof(buf); i++) {
    if (i + 1 < size && data[i] == '@' && data[i + 1] == 'C') {
      memcpy(buf + n, ch + 4, RESIHP__COOKIE_LEN);
      n += RESIHP__COOKIE_LEN;
      i++;
    } else {
      buf[n++] = data[i];
    }
  }
  uint8_t out[256];
  int r = serve(&jar, buf, n, out, sizeof(out), &got);
  if (r == 1 || (got && r != 2 && out[0] == 1)) {
    fprintf(stderr, "fuzz_mesh_hs: a peer authenticated without the "
                    "secret\n");
    abort();
  }
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {"ASHR", "\x03", "\x02", "\x01", "\x00",
                                      "@C",   "\xff", "\x00\x00\x00\x00"};
  size_t n =
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 24, 16);
  return resihp__fuzz_pad_long(buf, n, cap, 40);
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_mesh_hs", "corpus-mesh-hs", MAXIN,
                           gen, 20000);
}
#endif
