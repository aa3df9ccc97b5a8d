/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of the coordinator's state record parser
 * (resihp__coord_restore, libresihp/control/coord_snapshot.c), with the
 * standalone driver of fuzz_driver.h for `make check`. The record comes
 * from the coordinator's own pipe to the keeper, but the parser trusts it
 * no more than a peer's line.
 *
 * The input is a record for a job of 3 replicas. Invariants beyond "does
 * not crash": an accepted record gives a coordinator whose invariants hold
 * (resihp__coord_check), and its snapshot, restored again, gives the same
 * text (snapshot(restore(snapshot(c))) round-trips). The generator mutates
 * the corpus's valid records (tests/fuzz/corpus-snapshot). A libFuzzer
 * build links it as fuzz_coord's (README), with -DRESIHP_FUZZ_LIBFUZZER. */
#include "config.h"

#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/wire.h"
#include "fuzz_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static resihp__wire_listener_t lis;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char key[] = "fuzz-secret";
  resihp__fuzz_quiet();
  if (!lis.n && resihp__wire_listener_open("127.0.0.1", 0, 3, &lis))
    abort();
  /* the keeper's socket: no bind per input */
  resihp__coord_opts_t co = {.replicas = 3,
                             .secret = (const uint8_t *)key,
                             .secret_len = sizeof(key) - 1,
                             .silence_ms = 600000,
                             .listener = &lis};
  resihp__coord_t *c = NULL, *d = NULL;
  if (resihp__coord_restore(&co, (const char *)data, size, -1, &c))
    return 0;
  if (resihp__coord_check(c))
    abort();
  resihp__wire_buf_t a, b;
  resihp__wire_buf_init(&a);
  resihp__wire_buf_init(&b);
  if (resihp__coord_snapshot(c, &a) ||
      resihp__coord_restore(&co, a.s, a.len, -1, &d) ||
      resihp__coord_snapshot(d, &b) || a.len != b.len ||
      memcmp(a.s, b.s, a.len))
    abort();
  resihp__wire_buf_free(&a);
  resihp__wire_buf_free(&b);
  resihp__coord_destroy(c);
  resihp__coord_destroy(d);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER
/* One of the valid records below, with a few bytes changed, a line
 * dropped or doubled, or a number replaced by an extreme. */
static size_t gen(uint8_t *buf, size_t cap) {
  static const char *const seeds[] = {
      "RESIHP-COORD 1 3 6 1 8 =- 0\n"
      "c 0 2 0 1 1 1 0 -1 -1 -1 -1 -1 2 0 0 3 0 0 0 0 1 1 1 5 5 0 0\n"
      "a \nl \nm 0:1\nn 0:1:2\ni 0:1:2\no 0:0:1:1:0:1\nso 0:0:1:1:2:2\n"
      "sc 0:1:2\n"
      "r 0 2 7 0 0 0 1 0 0 0 0 1 2 1 0 -1 -1 0 0 0 0 0 0 0 5 =? = =h0:1 "
      "=h0:2 = =\n"
      "r 1 2 7 1 0 0 1 0 0 0 0 1 2 1 0 -1 -1 0 0 0 0 0 0 0 5 =n1 =l:1 =h1:1 "
      "=h1:2 = =ok\n"
      "r 2 3 7 2 0 0 1 0 0 0 0 1 2 0 0 0 -1 0 0 0 0 0 0 0 5 =? = =h2:1 "
      "=h2:2 =kill =\n"
      "f 2 0 0 1 5 5 0 0 =detected left out by the survivors\n"
      "d 1 1 2 0:1 0:1 4:5 0:1\n"
      "s 1 2 -1 =spare1 probe passed\nend\n",
      "RESIHP-COORD 1 3 6 1 8 =- 0\n"
      "c 1 0 0 1 1 0 0 -1 -1 1 0 0 0 0 0 3 0 0 0 0 0 0 0 9 0 0 0\n"
      "a \nl \nm 0:1:2\nn 0:1:2\ni 0:1:2\no 0:0:1:1:2:2\nso 0:0:1:1:2:2\n"
      "sc 0:1:2\n"
      "r 0 2 7 0 1 0 1 0 0 0 0 1 2 0 0 -1 -1 0 0 0 0 0 0 0 9 =? = =h0:1 "
      "=h0:2 = =\n"
      "r 1 2 7 1 1 0 1 0 0 0 0 1 2 0 0 -1 -1 0 0 0 0 0 0 0 9 =? = =h1:1 "
      "=h1:2 = =\n"
      "r 2 2 7 2 1 0 1 0 0 0 0 1 2 0 0 -1 -1 0 0 0 0 0 0 0 9 =? = =h2:1 "
      "=h2:2 = =\nend\n"};
  static const char *const atoms[] = {"-1",
                                      "0",
                                      "3",
                                      "9223372036854775807",
                                      "-9223372036854775808",
                                      "4294967296",
                                      "1e308",
                                      "nan",
                                      ":",
                                      " ",
                                      "=",
                                      "\n",
                                      "-",
                                      "",
                                      "\n\n",
                                      "999999",
                                      "r 9 2",
                                      "d 0 0 0 - - - -\n",
                                      "y 1 lay=10\n",
                                      "y 1 lay=10:4\n",
                                      "lay=",
                                      "y 0 lay=9\n",
                                      "y 1 lay=10 shape=ab\n",
                                      " shape=",
                                      " shape=-",
                                      "y 0 lay=10:6 home=4\n",
                                      "y 1 lay=10:6 shape=bb home=4:5\n",
                                      " home=",
                                      " home=0",
                                      "y 0 lay=10 lst=1\n",
                                      "y 2 lay=10:3:6\n",
                                      " shrunk=2:1:1.25",
                                      " shrunk=0:1:1",
                                      " shrunk=2:4:0.5",
                                      " shrink=next:1",
                                      " shrink=now:3",
                                      " shrink=later:1"};
  const char *s = seeds[resihp__fuzz_rng() % 2];
  size_t n = strlen(s);
  if (n > cap)
    n = cap;
  memcpy(buf, s, n);
  /* mostly one change: most inputs stay near a valid record */
  unsigned k = resihp__fuzz_rng() % 4 ? 1 : 2 + resihp__fuzz_rng() % 3;
  for (; k; k--) {
    uint64_t r = resihp__fuzz_rng();
    size_t at = n ? (size_t)(r % n) : 0;
    if (r % 3 == 0 && n) {
      buf[at] = (uint8_t)(r >> 32); /* a stray byte */
    } else {
      /* an atom in place of the next few bytes */
      const char *a = atoms[(r >> 16) % (sizeof(atoms) / sizeof(atoms[0]))];
      size_t l = strlen(a), cut = (r >> 40) % 4;
      if (at + cut > n)
        cut = n - at;
      if (n - cut + l > cap)
        continue;
      memmove(buf + at + l, buf + at + cut, n - at - cut);
      memcpy(buf + at, a, l);
      n = n - cut + l;
    }
  }
  return n;
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_snapshot", "corpus-snapshot",
                           65536, gen, 5000);
}
#endif
