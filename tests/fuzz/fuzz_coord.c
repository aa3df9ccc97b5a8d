/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the coordinator's message handler (the real one, in
 * libresihp/control/coord_*.c), with the handshake stubbed: four
 * already-authenticated connections, and the input is a sequence of lines
 * "<conn><message>\n" fed as if connection <conn> ('0'..'3') had sent
 * <message>. In a message, "$E" and "$S" stand for the coordinator's
 * current epoch and step, so that generated sessions get past the
 * barriers. Two control lines: "!<r>" has the launcher give up replica r
 * (resihp__coord_mark_failed), "~" runs one poll round (which finds the
 * fake peers gone and fails their replicas).
 *
 * After every line the coordinator's invariants must hold
 * (resihp__coord_check): membership and ledger consistent, and the job
 * never lost while a connected member holds the state, whatever garbage an
 * authenticated peer sends. See README for a libFuzzer build. */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "fuzz_driver.h"

#include <resihp/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NCONN 4
#define MAX_LINE 8192

/* msg with $E and $S replaced. */
static void expand(const resihp__coord_t *c, const char *in, size_t n,
                   char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 24 < cap; i++) {
    if (in[i] == '$' && i + 1 < n && (in[i + 1] == 'E' || in[i + 1] == 'S')) {
      o += (size_t)snprintf(out + o, cap - o, "%ld",
                            in[i + 1] == 'E' ? (long)resihp__coord_epoch(c)
                                             : resihp__coord_step(c));
      i++;
      continue;
    }
    out[o++] = in[i];
  }
  out[o] = '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char key[] = "fuzz-secret";
  resihp__fuzz_quiet();
  resihp__coord_opts_t co = {.replicas = 3,
                             .bind_host = "127.0.0.1",
                             .secret = (const uint8_t *)key,
                             .secret_len = sizeof(key) - 1,
                             .silence_ms = 600000};
  resihp__coord_t *c;
  if (resihp__coord_create(&co, &c))
    abort();
  int conn[NCONN];
  for (int i = 0; i < NCONN; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
      abort();
    close(sv[1]); /* what the coordinator sends fails at once */
    resihp__wire_t w;
    resihp__wire_init(&w, sv[0]);
    conn[i] = resihp__coord_adopt(c, &w);
  }
  static char line[MAX_LINE + 64];
  size_t at = 0;
  while (at < size) {
    const uint8_t *nl = memchr(data + at, '\n', size - at);
    size_t n = nl ? (size_t)(nl - (data + at)) : size - at;
    const char *msg = (const char *)data + at;
    at += n + 1;
    if (n == 0 || memchr(msg, '\0', n))
      continue; /* the wire refuses NUL bytes before the handler */
    if (msg[0] == '~') {
      resihp__coord_poll(c, 0);
    } else if (msg[0] == '!' && n > 1) {
      resihp__coord_mark_failed(c, msg[1] % 4, "fuzz");
    } else if (n > 1) {
      expand(c, msg + 1, n - 1 < MAX_LINE ? n - 1 : MAX_LINE, line,
             sizeof(line));
      resihp__coord_feed(c, conn[(unsigned char)msg[0] % NCONN], line);
    }
    const char *bad = resihp__coord_check(c);
    if (bad) {
      fprintf(stderr, "fuzz_coord: invariant broken: %s\n", bad);
      abort();
    }
  }
  resihp__coord_destroy(c);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
/* Sessions biased towards the protocol: hellos, barriers, recoveries. */
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "HELLO replica=0 ep=127.0.0.1:1 sep=127.0.0.1:2 mbs=6 steps=4",
      "HELLO replica=1 ep=127.0.0.1:3 sep=127.0.0.1:4 mbs=6 steps=4",
      "HELLO replica=2 ep=h:5 sep=h:6 mbs=6 steps=4 lep=h:7 node=n2",
      "HELLO replica=1 ep=a sep=b mbs=99999999 steps=9223372036854775807",
      "BEGIN step=-1",
      "BEGIN step=$S",
      "BEGIN step=9",
      "READY epoch=$E",
      "RESYNC epoch=$E",
      "READY epoch=4294967297",
      "RECOVER step=$S cepoch=1 view=0:1",
      "RECOVER step=$S cepoch=2 view=0",
      "RECOVER step=$S cepoch=1 view=0:1:2",
      "RECOVER step=$S cepoch=3 view=1:1",
      "RECOVER step=$S cepoch=-1 view=",
      "RECOVER step=$S cepoch=1 gone=2",
      "RECOVER step=$S cepoch=2 gone=",
      "RECOVER step=$S cepoch=1 gone=1:2",
      "RECOVER step=$S cepoch=3 gone=2:2",
      "RECOVER step=$S cepoch=4 gone=0 view=0:1",
      "CATCHUP_FAILED",
      "PERF step=$S s=0:1500:300:30000:3,1:9000:1200:900000:4",
      "PERF k=0 step=$S s=2:1:1:1:1",
      "PERF k=9 step=$S s=2:1:1:1:1",
      "PROG step=$S",
      "PROG step=4",
      "PERF step=$S s=0:1:2:3:4:5",
      "PERF step=$S s=99999999999999999999:1:1:1:1",
      "PERF step=-1 s=",
      "WL step=$S w=100:5000:2,100:5000:2,100:5000:2,1:1:1,1:1:1,1:1:1",
      "WL step=$S w=1:1:1",
      "WL step=9 w=,,",
      "FINISH result=ok",
      "FAULT kind=kill-rank step=$S node=n1",
      "FAULT kind=probe step=1 "
      "summary=x",
      "SUBHELLO replica=1 lrank=1 jobid=1 stepid=2",
      "SPARE node=s1 status=pass summary=-",
      "HB",
      "GO",
      "=",
      " ",
      ":",
      "@"};
  size_t n = 0, lines = 1 + resihp__fuzz_rng() % 40;
  for (size_t i = 0; i < lines && n + 2 < cap; i++) {
    uint64_t r = resihp__fuzz_rng();
    if (r % 23 == 0) {
      buf[n++] = r % 2 ? '~' : '!';
      if (n < cap)
        buf[n++] = (uint8_t)('0' + (r >> 8) % 4);
    } else {
      buf[n++] = (uint8_t)('0' + (r >> 8) % 4);
      const char *a = atoms[(r >> 16) % (sizeof(atoms) / sizeof(atoms[0]))];
      size_t l = strlen(a);
      if (n + l >= cap)
        break;
      memcpy(buf + n, a, l);
      n += l;
      if ((r >> 40) % 7 == 0 && n + 1 < cap)
        buf[n - 1 - (r >> 44) % l] = (uint8_t)(r >> 48); /* a stray byte */
    }
    if (n < cap)
      buf[n++] = '\n';
  }
  return n;
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_coord", "corpus-coord", 65536, gen,
                           5000);
}
#endif
